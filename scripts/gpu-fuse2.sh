#!/usr/bin/env bash
# proj_residual_norm on the H200 (issue 14, session 8): the projection + residual + RMSNorm op's
# kernel test and the tests of the kernels it shares code with, the engine GPU tests, decode steps at
# batch 1/8/16/64 with proj_residual_norm.2 (the fused GEMV tail) and .1 (gemm + add_rmsnorm.1, the
# old ops) interleaved for ROUNDS rounds, the critical path (scripts/critical_path.py) of a
# recorded batch-1 run with each, and run + rerun --check with variant 2 (determinism).
#   LANTERN=... TESTS=... MODEL=models/llama-3.2-1b ROUNDS=2 bash scripts/gpu-fuse2.sh OUT_DIR
set -u
cd "$(dirname "$0")/.."
source scripts/lib/gpu-bins.sh "$1"
step tests_kernels 120 "$T" --gtest_filter='ProjResidualNormGpu.*:AddRmsnormGpu.*:GateUpSwigluGpu.*:GemmGpu.DecodeShapes:GemmGpu.EdgeTailsAndFallbacks:GemmGpu.ChainedLaunchesSeeTheirInputs'
grep -E "^\[  (PASSED|FAILED) |^\[  FAILED|Failure|Which is|proj_residual_norm\] .*m=(1|16) " "$LOGS/tests_kernels.log" | head -30
for round in $(seq 1 "${ROUNDS:-2}"); do
  for v in 2 1; do
    name="bench_v${v}_r$round"
    step "$name" 150 "$L" bench --model "$M" --device cuda --quiet --batch 1,8,16,64 --prompt-len 128 \
      --decode-steps 128 --kernels "proj_residual_norm=$v" --json "$LOGS/$name.json"
    echo "== proj_residual_norm=$v round $round"; grep -E "^ *[0-9]+ +[0-9]+ [|]" "$LOGS/$name.log"
  done
done
for v in 2 1; do
  d=/tmp/rec_fuse2_v$v
  rm -rf $d
  step "record_v$v" 90 "$L" generate --model "$M" --device cuda --quiet --prompt-ids "$(seq -s, 100 227)" \
    --max-new-tokens 64 --ignore-eos --max-seqs 1 --kernels "proj_residual_norm=$v" --record $d --cupti-all-steps
  python3 scripts/critical_path.py $d --skip-steps 4 > "$LOGS/critical_path_v$v.txt"
  echo "== critical path, proj_residual_norm=$v"; head -14 "$LOGS/critical_path_v$v.txt"
  "$L" inspect $d > "$LOGS/inspect_v$v.txt" 2>&1
  grep -iE "unattributed|violation|problems" "$LOGS/inspect_v$v.txt" | head -4
done
step tests_engine 300 "$T" --gtest_filter='EngineGpu.*:Cupti*:TensorParallelGpu.*'
grep -E "^\[  (PASSED|FAILED) |^\[  FAILED" "$LOGS/tests_engine.log" | tail -6
for round in 1 2; do
  d="$LOGS/run_v2_$round"
  step "run_v2_$round" 120 "$L" run experiments/default.json --set model.path="$M" --set model.preset=auto \
    --set kernels.proj_residual_norm=2 --quiet --out "$d"
  step "rerun_v2_$round" 120 "$L" rerun "$d" --check --quiet --out "$d-rerun"
  echo "== rerun round $round: $(grep -E "rerun: tokens" "$LOGS/rerun_v2_$round.log")"
done
echo "==== summary"; cat "$LOGS/summary.txt"
