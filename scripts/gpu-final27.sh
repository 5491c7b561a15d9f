#!/usr/bin/env bash
# Session 27's closing call: the whole GPU suite on the final tree, then 512-token prefills in
# separate processes with prune_last on and off, alternating (each process times its own plans).
#   OUT=DIR [N=4] bash scripts/gpu-final27.sh
set -u
cd "$(dirname "$0")/.."
OUT=${OUT:-/tmp/out}; mkdir -p "$OUT"
LOGS=/tmp/final-logs; mkdir -p "$LOGS"
export LD_LIBRARY_PATH="$PWD/.device/pcre2/usr/lib/x86_64-linux-gnu:$PWD/.device/libs:${LD_LIBRARY_PATH:-}"
LOG="$LOGS/build.log" bash scripts/device-ensure-built.sh lantern lantern_gpu_tests || exit 1
L=build/default/bin/lantern; T=build/default/tests/lantern_gpu_tests; M=${MODEL:-models/llama-3.2-1b}
[[ -f $M/model.safetensors ]] || $L synth --preset llama-3.2-1b --out "$M" --seed 0 --tokenizer-dir .device/llama3 > "$LOGS/synth.log" 2>&1
timeout 300 $T > "$OUT/gputests.log" 2>&1
echo "gputests rc=$?"; grep -E "^\[  PASSED|^\[  FAILED|SKIPPED \] [0-9]|tests ran" "$OUT/gputests.log" | tail -8
grep -E "\[engine-gpu\] pruned" "$OUT/gputests.log"
for i in $(seq 1 "${N:-4}"); do
  for v in on off; do
    $L bench --model "$M" --device cuda --batch 1 --prompt-len 512,512,512,2048 --decode-steps 2 --kernels prune_last=$v > "$LOGS/b-$v-$i.txt" 2>&1
    echo "prune_last=$v process $i: prefill ms $(grep -E '^ +1 +(512|2048) \|' "$LOGS/b-$v-$i.txt" | awk '{print $4}' | tr '\n' ' ')"
  done
done
