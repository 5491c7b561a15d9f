#!/usr/bin/env bash
# Session 27's closing call: the whole GPU suite on the final tree, then 512-token prefills in
# separate processes with prune_last on and off, alternating (each process times its own plans).
#   OUT=DIR [N=4] bash scripts/gpu-final27.sh
set -u
cd "$(dirname "$0")/.."
LOGS=/tmp/final-logs; TARGETS="lantern lantern_gpu_tests"; source scripts/lib/device-built.sh
timeout 300 $T > "$OUT/gputests.log" 2>&1
echo "gputests rc=$?"; grep -E "^\[  PASSED|^\[  FAILED|SKIPPED \] [0-9]|tests ran" "$OUT/gputests.log" | tail -8
grep -E "\[engine-gpu\] pruned" "$OUT/gputests.log"
for i in $(seq 1 "${N:-4}"); do
  for v in on off; do
    $L bench --model "$M" --device cuda --batch 1 --prompt-len 512,512,512,2048 --decode-steps 2 --kernels prune_last=$v > "$LOGS/b-$v-$i.txt" 2>&1
    echo "prune_last=$v process $i: prefill ms $(grep -E '^ +1 +(512|2048) \|' "$LOGS/b-$v-$i.txt" | awk '{print $4}' | tr '\n' ' ')"
  done
done
