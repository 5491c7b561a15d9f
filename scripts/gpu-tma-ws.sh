#!/usr/bin/env bash
# attention_decode.17's producer-warp form (the default since session 16; LANTERN_TMA_WS=0 gives the
# barrier form, =1 also gives variant 16's one-split kernel the producer warp; docs/kernels.md row 17),
# in one call of the device tool with carried binaries:
#  1. compute-sanitizer racecheck (scripts/racecheck-filter.sh) and synccheck over the attention
#     kernel cases with the knob on;
#  2. the engine bit-identity test (variant 16 == 14 in graph-replayed decode of 160 sequences)
#     and the split test, REPEAT times each, with the knob on, then once with it off;
#  3. with the knob on and off: the batch 1 / 32 k step (`lantern bench`), two rounds.
# Session 16 ran steps 1-3 (docs/performance.md): clean, bit-identical in every repeat.
#   bash scripts/gpu-tma-ws.sh OUT
set -u
cd "$(dirname "$0")/.."
source scripts/lib/gpu-bins.sh "$1"
F='AttentionDecodeGpu.ModelShapes:AttentionDecodeGpu.PipeTilesHeadDimsAndGroups'
E='BatchedAttentionGpu.HeadRunsInGraphsEqualTheTransposedTile:BatchedAttentionGpu.SplitTma*'
step racecheck 300 env LANTERN_TMA_WS=1 bash scripts/racecheck-filter.sh "$T" --gtest_filter="$F"
tail -3 "$LOGS/racecheck.log"
step synccheck 300 env LANTERN_TMA_WS=1 compute-sanitizer --tool synccheck --error-exitcode 9 "$T" --gtest_filter="$F"
grep -E "ERROR SUMMARY|Barrier|divergent" "$LOGS/synccheck.log" | head -10
step engine_ws 300 env LANTERN_TMA_WS=1 "$T" --gtest_filter="$E" --gtest_repeat="${REPEAT:-3}"
grep -E "vs batched_ring6_t|split_tma_t vs|^\[  (PASSED|FAILED) " "$LOGS/engine_ws.log"
step engine_off 120 "$T" --gtest_filter="$E"
grep -E "vs batched_ring6_t|split_tma_t vs|^\[  (PASSED|FAILED) " "$LOGS/engine_off.log"
for r in 1 2; do
  for ws in 0 1; do
    step "ctx32k_ws${ws}_r$r" 150 env LANTERN_TMA_WS=$ws "$L" bench --model "$M" --device cuda --quiet --batch 1 \
      --prompt-len 32768 --decode-steps 16
    echo "== LANTERN_TMA_WS=$ws round $r"; grep -E "decode step" "$LOGS/ctx32k_ws${ws}_r$r.log"
  done
done
echo "==== summary"; cat "$LOGS/summary.txt"
