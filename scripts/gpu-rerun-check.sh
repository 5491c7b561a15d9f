#!/usr/bin/env bash
# Is a kernel set deterministic in the engine? For each --kernels value, ROUNDS times: `lantern run
# experiments/default.json` (12 mixed requests, prefill + mixed + graph decode steps, greedy) then
# `lantern rerun --check` (same GEMM plans pinned): tokens must be identical. Then the batch
# consistency check (experiments/hf/batch_consistency.py) and the engine GPU tests with the defaults.
#   LANTERN=... TESTS=... MODEL=models/llama-3.2-1b ROUNDS=2 bash scripts/gpu-rerun-check.sh OUT_DIR K...
set -u
cd "$(dirname "$0")/.."
source scripts/lib/gpu-bins.sh "$1"
shift
for k in "$@"; do
  for round in $(seq 1 "${ROUNDS:-2}"); do
    d="$LOGS/run_${k//[=,]/_}_$round"
    step "run_${k//[=,]/_}_$round" 120 "$L" run experiments/default.json --set model.path="$M" --set model.preset=auto \
      --set "kernels.${k%%=*}=${k#*=}" --quiet --out "$d"
    step "rerun_${k//[=,]/_}_$round" 120 "$L" rerun "$d" --check --quiet --out "$d-rerun"
    echo "== $k round $round: $(grep -E "rerun: tokens" "$LOGS/rerun_${k//[=,]/_}_$round.log")"
  done
done
step batch 300 python3 experiments/hf/batch_consistency.py --model "$M" --lantern "$L" --out "$LOGS/batch"
grep -E "agreement_above_tol|smallest_divergence|PASS|FAIL" "$LOGS/batch.log"
step gputests 300 "$T" --gtest_filter='EngineGpu.*:TensorParallelGpu.*:AttentionDecodeGpu.*:GateUpSwigluGpu.*'
grep -E "^\[  (PASSED|FAILED) |^\[  FAILED" "$LOGS/gputests.log"
echo "==== summary"; cat "$LOGS/summary.txt"
