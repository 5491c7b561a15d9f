#!/usr/bin/env bash
# gate_up_swiglu on the H200 (issue 14, session 6, branch fuse1): the fused
# kernel's GPU test, the engine GPU and CUPTI tests, decode steps at batch 1, 8,
# 16 and 64 with gate_up_swiglu.2 (default) and .1 (the unfused gate_up GEMV +
# swiglu), interleaved in the same call, then a CUPTI-recorded decode per-op
# table. Logs and a summary under $OUT/logs.
#   BIN_DIR=.wt/fuse1 SRC_DIR=/work/wt-fuse1 bash .wt/fuse1/gpu-fuse1.sh
set -u
OUT="${OUT:-/tmp/lantern-fuse1-out}"
LOGS=$OUT/logs
mkdir -p "$LOGS"
export LD_LIBRARY_PATH="$PWD/.device/pcre2/usr/lib/x86_64-linux-gnu:$PWD/.device/libs:${LD_LIBRARY_PATH:-}"
B=${BIN_DIR:-build/default}
SRC=${SRC_DIR:-/work/wt-fuse1}
if [[ ! -e $SRC ]]; then mkdir -p "$(dirname "$SRC")" && ln -s "$PWD" "$SRC"; fi
mkdir -p build/default
[[ -e build/default/bin ]] || ln -s "$PWD/$B/bin" build/default/bin  # NEEDS_CLI tests run build/default/bin/lantern
LANTERN=$B/bin/lantern TESTS=$B/tests/lantern_gpu_tests
MODEL=models/llama-3.2-1b
BUDGET_S=${BUDGET_S:-170}
source scripts/gpu-step.sh  # step NAME LIMIT_S command...

nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.mem --format=csv >"$LOGS/gpu.txt" 2>&1
step synth 60 $LANTERN synth --preset llama-3.2-1b --out $MODEL --seed 0 --tokenizer-dir .device/llama3 &
SYNTH=$!
step tests_kernels 40 $TESTS --gtest_filter='GateUpSwigluGpu.*:SwigluGpu.*:GemmGpu.DecodeShapes:GemmGpu.LmHeadFp32Logits:GemmGpu.EdgeTailsAndFallbacks:GemmGpu.ChainedLaunchesSeeTheirInputs'
wait $SYNTH
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
