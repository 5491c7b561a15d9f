#!/usr/bin/env bash
# How much a process's own GEMM plans move a 512-token prefill (issue 14, session 27): builds on
# the H200, then N (default 4) `lantern bench --prompt-len 512,512,512 --verbose` processes, each
# timing its own gemm.6 plans (not pinned), with the m <= 512 plans each picked; then the same
# with the environment SECOND (e.g. LANTERN_LT_SPLIT_FROM=8) unless NO_OFF=1; then the
# overlap-vs-sync GPU test over six seeds and the pruned-layer test.
#   OUT=DIR [N=4] bash scripts/gpu-plans.sh
set -u
cd "$(dirname "$0")/.."
LOGS=/tmp/plans-logs; TARGETS="lantern lantern_gpu_tests"; source scripts/lib/device-built.sh
sides=("default"); [[ ${NO_OFF:-0} == 1 || -z ${SECOND:-} ]] || sides+=("$SECOND")
for side in "${sides[@]}"; do
  for i in $(seq 1 "${N:-4}"); do
    env ${side/#default/} $L bench --model "$M" --device cuda --batch 1 --prompt-len 512,512,512 --decode-steps 2 --verbose \
      > "$LOGS/bench-$i.txt" 2>&1
    echo "$side process $i: prefill ms $(grep -E '^ +1 +512 \|' "$LOGS/bench-$i.txt" | awk '{print $4}' | tr '\n' ' ')"
    grep "m<=512 " "$LOGS/bench-$i.txt" | sed -E 's/ stages.*cluster/ cluster/; s/ ws .*\|/ |/'
  done
done
for seed in 1 2 3 4 5 6; do
  LANTERN_TEST_SEED=$seed timeout 120 $T --gtest_filter='EngineGpu.OverlappedDecodeEqualsSynchronousDecode:EngineGpu.PrunedLastLayerAgreesWithTheFullLayer' > "$LOGS/t$seed.log" 2>&1
  echo "seed $seed: rc=$? $(grep -E '^\[  PASSED|^\[  FAILED  \] [0-9]' "$LOGS/t$seed.log" | tr '\n' ' ')"
done
