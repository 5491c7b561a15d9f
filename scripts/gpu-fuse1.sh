#!/usr/bin/env bash
# gate_up_swiglu on the H200 (issue 14, session 6, branch fuse1): the fused
# kernel's GPU test, the engine GPU and CUPTI tests, decode steps at batch 1, 8,
# 16 and 64 with gate_up_swiglu.2 (default) and .1 (the unfused gate_up GEMV +
# swiglu), interleaved in the same call, then a CUPTI-recorded decode per-op
# table. Logs and a summary under $OUT/logs.
#   BIN_DIR=.wt/fuse1 SRC_DIR=/work/wt-fuse1 bash .wt/fuse1/gpu-fuse1.sh   (from the repository root:
#   the shared set-up is scripts/lib/gpu-preamble.sh)
set -u
GPU_NAME=fuse1 GPU_SRC_DEFAULT=/work/wt-fuse1 GPU_BUDGET_DEFAULT=170
source scripts/lib/gpu-preamble.sh  # OUT, LOGS, B, LANTERN, TESTS, MODEL, step, synth_model_in_background

synth_model_in_background 60
step tests_kernels 40 $TESTS --gtest_filter='GateUpSwigluGpu.*:SwigluGpu.*:GemmGpu.DecodeShapes:GemmGpu.LmHeadFp32Logits:GemmGpu.EdgeTailsAndFallbacks:GemmGpu.ChainedLaunchesSeeTheirInputs'
wait_synth
bench() {  # bench NAME VARIANT
  step $1 40 $LANTERN bench --model $MODEL --device cuda --batch 1,8,16,64 --prompt-len 128 --decode-steps 64 \
    --kernels gate_up_swiglu=$2
}
bench bench_new_a 2
bench bench_old_a 1
step tests_engine 60 $TESTS --gtest_filter='EngineGpu.*:Cupti*'
PROMPT="The paged KV cache stores keys and values in blocks of sixteen tokens."
rm -rf /tmp/run_fuse1
step record 20 $LANTERN generate --model $MODEL --device cuda --prompt "$PROMPT" --max-new-tokens 64 \
  --ignore-eos --record /tmp/run_fuse1 --cupti-all-steps --quiet
step inspect 10 bash -c "$LANTERN inspect /tmp/run_fuse1 --phase decode --by op --top 30; $LANTERN inspect /tmp/run_fuse1"
bench bench_new_b 2
bench bench_old_b 1
echo "==== summary"; cat "$LOGS/summary.txt"
for f in "$LOGS"/tests_*.log; do echo "== $(basename $f .log)"; grep -hE "^\[  (PASSED|FAILED) |^\[==========\]|Failure|rel-L2|Which is|error" $f | head -40; done
for f in "$LOGS"/bench_*.log; do echo "== $(basename $f .log)"; grep -A4 "batch  prompt" $f | tail -4; done
grep -iE "unattributed|alias|violation|problems" "$LOGS/inspect.log" "$LOGS/record.log" 2>/dev/null | head -8
tar czf "$OUT/logs.tgz" -C "$OUT" logs && rm -rf "$LOGS"  # one file back (the tool returns a few files only)
