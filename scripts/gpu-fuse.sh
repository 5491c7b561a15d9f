#!/usr/bin/env bash
# The engine-side fusion check on the H200 (issue 14, branch fuse): the new
# kernels' GPU tests and the engine GPU tests, then decode steps at batch 1, 64
# and 256 with the fused op table (default) and with `--kernels fusion=off`,
# then a CUPTI-recorded decode per-op table (fused) to check attribution.
# Logs and a summary under $OUT.
#   bash scripts/gpu-fuse.sh [stage ...]   stages: tests bench tput profile (default: tests bench profile)
# Binaries: BIN_DIR/{bin/lantern,tests/lantern_gpu_tests}; default build/carry (stripped
# copies carried by the device tool) when present, else build/default. SRC_DIR: the
# checkout they were built in (tests have its path compiled in), linked to this one.
set -u
cd "$(dirname "$0")/.."
STAGES=" ${*:-tests bench profile} "
has() { [[ $STAGES == *" $1 "* ]]; }
GPU_NAME=fuse GPU_SRC_DEFAULT=/work/wt-perf GPU_BUDGET_DEFAULT=100000
source scripts/lib/gpu-preamble.sh  # OUT, LOGS, B, LANTERN, TESTS, MODEL, step, synth_model_in_background

synth_model_in_background 150
has tests && step tests_kernels 25 $TESTS --gtest_filter='AddRmsnormGpu.*:RopeKvWriteGpu.*:SwigluGpu.*'
wait_synth
bench() {  # bench NAME BATCH [lantern bench options...]
  local name=$1 b=$2; shift 2
  step $name 20 $LANTERN bench --model $MODEL --device cuda --batch $b --prompt-len 128 --decode-steps 128 "$@"
}
if has bench; then
  for b in 1 64 256; do
    bench bench_fused_b$b $b
    bench bench_unfused_b$b $b --kernels fusion=off
  done
fi
if has tests; then  # the engine on the GPU (fused default vs CPU, fused vs unfused) and CUPTI attribution
  step tests_engine 60 $TESTS --gtest_filter='EngineGpu.*:CuptiGpu.EngineRunOnCudaIsRecordedAndClean:CuptiGpu.KernelsAreAttributedToOpsAndSteps:CuptiGpu.GraphReplaysKeepOpLabelsAndLearnTheirStep'
fi
if has tput; then  # experiments/throughput-256.json, fused and unfused, 1 warm-up + 2 repetitions
  for f in on off; do
    rm -rf /tmp/tput_$f
    step tput_fusion_$f 30 $LANTERN run experiments/throughput-256.json --set model.path=$MODEL \
      --set repetitions=2 --set warmup=1 --set kernels.fusion=$f --out /tmp/tput_$f --quiet
    $LANTERN inspect /tmp/tput_$f >"$LOGS/tput_inspect_$f.log" 2>&1
  done
fi
PROMPT="The paged KV cache stores keys and values in blocks of sixteen tokens."
if has profile; then  # CUPTI on every step: per-op decode table, unattributed kernels
  rm -rf /tmp/run_fused
  step record_fused 15 $LANTERN generate --model $MODEL --device cuda --prompt "$PROMPT" --max-new-tokens 64 \
    --ignore-eos --record /tmp/run_fused --cupti-all-steps --quiet
  step inspect 8 bash -c "$LANTERN inspect /tmp/run_fused --phase decode --by op --top 30; \
    $LANTERN inspect /tmp/run_fused"
fi
echo "==== summary"; cat "$LOGS/summary.txt"
grep -hE "^\[  (PASSED|FAILED) |Failure|error|engine-gpu\]" "$LOGS"/tests_*.log 2>/dev/null | head -30
for f in "$LOGS"/tput_*.log; do echo "== $(basename $f .log)"; grep -iE "tok/s|tokens/s|output" $f | head -4; done
for f in "$LOGS"/bench_*.log; do
  echo "== $(basename $f .log): $(grep -E 'decode step|of roofline|tok/s|tokens/s|host per step' $f | tr -s ' ' | tr '\n' ' ')"
done
grep -iE "unattributed" "$LOGS/inspect.log" 2>/dev/null | head -5
