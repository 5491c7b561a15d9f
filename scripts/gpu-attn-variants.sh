#!/usr/bin/env bash
# Batched decode attention variants against each other on the H200, in one call (issue 14, session 14):
#  1. the attention tests (every variant against the CPU reference; 15 and 16 equal 14 bit for bit in
#     the kernel cases and in graph-replayed engine decode); a failure stops the script;
#  2. bench_kernels for VARIANTS (one layer, L2 flushed);
#  3. `lantern bench` at BATCHES rows (prompt 128, 128 decode steps), VARIANTS interleaved, ROUNDS rounds;
#  4. with EXTRA=1: the batch-256 GEMM plans (`lantern bench --verbose`), split-k versions for all 16
#     of the heuristic's candidates (LANTERN_LT_SPLIT_FROM=16) against the default 4 at batch 64 / 256
#     and in a 512-token prefill, and where a batch-256 step's time goes with the last of VARIANTS
#     (scripts/gpu-batch-profile.sh).
#   VARIANTS="14 16" bash scripts/gpu-attn-variants.sh OUT
set -u
cd "$(dirname "$0")/.."
source scripts/lib/gpu-bins.sh "$1"
B=${B:-build/default/bench/bench_kernels}
VARIANTS=${VARIANTS:-14 15 16}
step tests 150 "$T" --gtest_filter='AttentionDecodeGpu.*:BatchedAttentionGpu.*' || {
  tail -40 "$LOGS/tests.log"; echo "tests failed: stopping"; exit 1; }
grep -E "^\[  (PASSED|FAILED) |FAILED  \]|batched-attention-gpu" "$LOGS/tests.log"
step kbench 200 "$B" --benchmark_filter="^attention_decode\.($(echo $VARIANTS | tr ' ' '|'))\." --benchmark_min_time=0.2s
grep -E "^attention_decode" "$LOGS/kbench.log" | awk '{print $1, $2, $3, $4, $5}'
for round in $(seq 1 "${ROUNDS:-2}"); do
  for v in $VARIANTS; do
    step "bench_v${v}_r$round" 200 "$L" bench --model "$M" --device cuda --quiet --batch "${BATCHES:-24,64,128,256}" \
      --prompt-len 128 --decode-steps 128 --kernels attention_decode=$v --json "$LOGS/bench_v${v}_r$round.json"
    echo "== attention_decode=$v round $round"; grep -E "^ *[0-9]+ +[0-9]+ [|]" "$LOGS/bench_v${v}_r$round.log"
  done
done
last=${VARIANTS##* }
if [[ ${EXTRA:-0} == 1 ]]; then
  step plans 200 "$L" bench --model "$M" --device cuda --verbose --batch 256 --prompt-len 128 --decode-steps 16
  grep -E "m<=256 " "$LOGS/plans.log" | head -20
  for sf in 4 16; do
    step "bench_sf$sf" 200 env LANTERN_LT_SPLIT_FROM=$sf "$L" bench --model "$M" --device cuda --quiet --verbose \
      --batch 64,256 --prompt-len 128 --decode-steps 128 --kernels attention_decode=$last
    echo "== LANTERN_LT_SPLIT_FROM=$sf"; grep -E "^ *[0-9]+ +[0-9]+ [|]|m<=256 " "$LOGS/bench_sf$sf.log"
    step "prefill_sf$sf" 120 env LANTERN_LT_SPLIT_FROM=$sf "$L" bench --model "$M" --device cuda --verbose --batch 1 \
      --prompt-len 512,512,512 --decode-steps 2
    grep -E "prefill|m<=512 " "$LOGS/prefill_sf$sf.log" | head -20
  done
fi
if [[ ${PROFILE:-0} == 1 ]]; then
  BATCHES=256 KERNELS=attention_decode=$last bash scripts/gpu-batch-profile.sh "$LOGS/profile" | tail -20
fi
echo "==== summary"; cat "$LOGS/summary.txt"
