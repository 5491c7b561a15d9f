#!/usr/bin/env bash
# proj_residual_norm.6 wg_wide_down (session 25): down_proj at 129-256 rows on
# gemm.8's wide form (a bf16 store), then add_rmsnorm.1. One device call with
# binaries in build/default (carried, or built there):
#   OUT=... bash scripts/gpu-wide-down.sh [stages...]   (default: tests engine)
# stages: tests (the proj_residual_norm kernel tests, the engine test in
# graphs, the wide gate/up shapes), engine (lantern bench --batch 256, prompt
# 128, 128 decode steps: variants 1 and 6 in interleaved processes, ROUNDS
# rounds, the GEMM plans pinned from a warm-up run).
set -u
OUT=${OUT:-/tmp/out}; mkdir -p "$OUT"
T=build/default/tests/lantern_gpu_tests; L=build/default/bin/lantern
M=${MODEL:-models/llama-3.2-1b}
ROUNDS=${ROUNDS:-2}
BATCHES=${BATCHES:-256}
VARIANTS=${VARIANTS:-unfused wg_wide_down}
stages=${*:-tests engine}
for st in $stages; do
  t0=$(date +%s)
  case $st in
    tests)
      timeout 240 $T --gtest_filter='ProjResidualNormGpu.*:BatchGemmGpu.WideDownProjInGraphsMatchesCublas:GateUpSwigluGpu.WideBatchShapes:DeferredNormGpu.ProjResidualAddWithoutTheNorm' \
        > "$OUT/wide-down-tests.log" 2>&1
      echo "tests rc=$?"; grep -E "^\[  (PASSED|FAILED)|Failure|rel-L2 error|\[batch-gemm|wg_wide_down\) m=(129|200|256|257|160)" "$OUT/wide-down-tests.log" | tail -30 ;;
    engine)
      common=(--model "$M" --device cuda --batch "$BATCHES" --prompt-len 128 --decode-steps 128 --quiet)
      timeout 200 $L bench "${common[@]}" --json "$OUT/plans.json" > "$OUT/engine-warm.log" 2>&1
      echo "warm-up rc=$?"
      for r in $(seq "$ROUNDS"); do
        for v in $VARIANTS; do
          log="$OUT/engine-$v-$r.log"
          timeout 200 $L bench "${common[@]}" --kernels proj_residual_norm=$v --gemm-plans "$OUT/plans.json" > "$log" 2>&1
          echo "proj_residual_norm=$v round $r rc=$?"; grep -E "^  decode step" "$log"
        done
      done ;;
  esac
  echo "[$st] $(( $(date +%s) - t0 )) s"
done
