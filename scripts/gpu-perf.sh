#!/usr/bin/env bash
# The performance helper's one-call check on the H200 (issue 14): correctness of
# the new kernel variants, then the decode step with new vs old kernels, then
# the kernel benchmark of the changed families. Logs under $OUT, a summary last.
#   bash scripts/gpu-perf.sh [stage ...]   stages: tests bench chain kbench profile (default: all but profile)
# (binaries from build/gpu-machine, or BIN_DIR=...; extra shared libraries in .devlibs/)
# BIN_DIR holds lantern, lantern_gpu_tests and bench_kernels (default: the
# gpu-machine build's bin/, tests/, bench/).
set -u
cd "$(dirname "$0")/.."
GPU_STEPS_NAME=perf GPU_STEPS_DEFAULT="tests bench chain kbench"
source scripts/gpu-steps.sh "$@"
OLD=gemm=2,rmsnorm=2,swiglu=1,residual=1,rope=1,kv_write=1,attention_decode=3
[[ -f $MODEL/model.safetensors ]] || (step synth 150 $LANTERN synth --preset llama-3.2-1b --out $MODEL --seed 0 \
  --tokenizer-dir .device/llama3 &)
if has tests; then
step kernel_tests 150 $TESTS --gtest_filter='-EngineGpu.*:CuptiGpu.*:NvtxCupti.*'
step other_tests 150 $TESTS --gtest_filter='EngineGpu.*:CuptiGpu.*:NvtxCupti.*'
fi
for i in $(seq 60); do [[ -f $MODEL/model.safetensors ]] && grep -q synth "$LOGS/summary.txt" && break; sleep 2; done
bench() {  # bench NAME BATCH [lantern bench options...]
  local name=$1 b=$2; shift 2
  step $name 60 $LANTERN bench --model $MODEL --device cuda --batch $b --prompt-len 128 --decode-steps 128 "$@"
}
if has bench; then
  for b in 1 8 16 64; do bench bench_new_b$b $b; done
  for b in 1 8; do bench bench_old_b$b $b --kernels $OLD; done
  bench bench_gemm2_b1 1 --kernels gemm=2
  bench bench_gemm4_b1 1 --kernels gemm=4
  LANTERN_GEMV_MAX_SPLITS=1 bench bench_nosplit_b1 1
  LANTERN_GEMV_MAX_SPLITS=8 bench bench_split8_b1 1
  LANTERN_GEMV_SINGLE=0 bench bench_nosingle_b1 1
  LANTERN_GEMV_SINGLE=0 bench bench_nosingle_b8 8
  bench bench_oldattn_b1 1 --kernels attention_decode=3
  bench bench_oldrope_b1 1 --kernels rope=2
  bench bench_new_b1_ctx2k 1 --prompt-len 2048 --max-batch-tokens 2048
  bench bench_old_b1_ctx2k 1 --prompt-len 2048 --max-batch-tokens 2048 --kernels $OLD
fi
if has chain; then  # the GEMV chain (one decode step's GEMVs as a graph) per split cap
  for cap in 1 2; do
    LANTERN_GEMV_MAX_SPLITS=$cap step chain_cap$cap 120 $KBENCH --benchmark_filter='gemm\.[25].*chain'
  done
  LANTERN_GEMV_SINGLE=0 step chain_cap2_nosingle 120 $KBENCH --benchmark_filter='gemm\.5.*chain'
fi
has kbench && step kbench 150 $KBENCH --benchmark_filter='(gemm\.[245]\.[a-z_]+/(q|kv|gate|down|lm_head)/m=(1|8)/)|attention_decode\.[34]|rope'
PROMPT="The paged KV cache stores keys and values in blocks of sixteen tokens."
if has profile; then  # CUPTI on every step; per-op decode table, new vs old kernels
  for kind in new old; do
    extra=(); [[ $kind == old ]] && extra=(--kernels $OLD)
    rm -rf /tmp/run_$kind
    step record_$kind 90 $LANTERN generate --model $MODEL --device cuda --prompt "$PROMPT" --max-new-tokens 128 \
      --ignore-eos --record /tmp/run_$kind --cupti-all-steps --quiet "${extra[@]}"
  done
  step inspect 60 bash -c "$LANTERN inspect /tmp/run_new --phase decode --by op --top 40; \
    $LANTERN inspect /tmp/run_new --phase decode --by kernel --top 40; \
    $LANTERN inspect /tmp/run_new --compare /tmp/run_old --phase decode --top 40"
fi
echo "==== summary"; cat "$LOGS/summary.txt"
for f in "$LOGS"/bench_*.log; do
  echo "== $(basename $f .log): $(grep -E 'decode step|of roofline' $f | tr -s ' ' | tr '\n' ' ')"
done
for f in "$LOGS"/chain_*.log; do echo "== $(basename $f .log)"; grep -E " chain m=" $f | grep -v manual_time; done
grep -hE "tests ran|PASSED|FAILED|SKIPPED" "$LOGS"/*_tests.log 2>/dev/null | head -20
[[ -f $LOGS/kbench.log ]] && grep -A80 "kernel shape" "$LOGS/kbench.log"
[[ -f $LOGS/inspect.log ]] && cat "$LOGS/inspect.log"
tar czf "$OUT/logs.tar.gz" -C /tmp lantern-perf-logs
