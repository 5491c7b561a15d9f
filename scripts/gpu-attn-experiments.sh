#!/usr/bin/env bash
# The batch-256 kernel-swap experiments on the H200 (issue 14, session 14), in one call: every GPU
# test first (a failure is reported, the runs still go), then experiments/batched-decode-256-batched_ring6_t.json
# with attention_decode = each of VARIANTS (`lantern run --set kernels.attention_decode=V`, 1 warm-up +
# 3 repetitions each) and one `lantern compare --markdown` over the runs.
#   VARIANTS="batched_ring6 batched_ring6_t batched_heads_t batched_tma_t" bash scripts/gpu-attn-experiments.sh OUT
set -u
cd "$(dirname "$0")/.."
source scripts/lib/gpu-bins.sh "$1"
step gpu_tests 300 "$T"
grep -E "^\[  (PASSED|FAILED|  SKIPPED) |FAILED  \]|tests ran" "$LOGS/gpu_tests.log" | head -20
runs=()
for v in ${VARIANTS:-batched_ring6 batched_ring6_t batched_heads_t batched_tma_t}; do
  step "run_$v" 200 "$L" run experiments/batched-decode-256-batched_ring6_t.json \
    --set model.path="$M" --set model.preset=auto --set kernels.attention_decode=$v --out "$LOGS/runs/$v" && runs+=("$LOGS/runs/$v")
done
step compare 60 "$L" compare "${runs[@]}" --markdown
cat "$LOGS/compare.log" | head -60
echo "==== summary"; cat "$LOGS/summary.txt"
