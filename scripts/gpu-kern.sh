#!/usr/bin/env bash
# The kernel helper's one-call check on the H200 (issue 14, session 5): the
# sampling and attention GPU tests (every variant against the CPU reference),
# the sample / attention_decode kernel benchmark (sample.3 at clusters of 16
# and 8), a CUPTI per-op profile of one 512-token prefill, and the cost curves
# (scripts/perf-curves.sh). Binaries are carried from the development machine
# as stripped copies in build/carry/{bin,tests,bench} (of build/default); DEV
# names the .device folder (PCRE2, tokenizer files, libbenchmark); logs come
# back as one archive, $OUT/logs.tgz.
#   strip -o build/carry/bin/lantern build/default/bin/lantern   (and the other two)
#   DEV=$PWD/.device bash scripts/gpu-kern.sh [tests kbench engine prefill curves]
set -u
cd "$(dirname "$0")/.."
OUT="${OUT:-/tmp/lantern-kern-out}"
LOGS=$OUT/logs
mkdir -p "$LOGS"
DEV=${DEV:-$PWD/.device}  # PCRE2, the tokenizer files, libbenchmark
export LD_LIBRARY_PATH="$DEV/pcre2/usr/lib/x86_64-linux-gnu:$DEV/libs:${LD_LIBRARY_PATH:-}"
STAGES=" ${*:-tests kbench engine prefill curves} "
has() { [[ $STAGES == *" $1 "* ]]; }
B=${BIN_DIR:-build/carry}  # BIN_DIR=build/default when built on the GPU machine itself
LANTERN=$B/bin/lantern TESTS=$B/tests/lantern_gpu_tests KBENCH=$B/bench/bench_kernels
MODEL=models/llama-3.2-1b
# The tests have the build checkout's path compiled in (data, scratch).
[[ -e /work/wt-cupti ]] || { mkdir -p /work && ln -s "$PWD" /work/wt-cupti; }
source scripts/gpu-step.sh  # step NAME LIMIT_S command...
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.mem --format=csv >"$LOGS/gpu.txt" 2>&1
if { has engine || has prefill || has curves; } && [[ ! -f $MODEL/model.safetensors ]]; then
  (step synth 120 $LANTERN synth --preset llama-3.2-1b --out $MODEL --seed 0 --tokenizer-dir $DEV/llama3; touch $LOGS/synth.done) &
else
  touch $LOGS/synth.done
fi
has tests && step gpu_tests 150 $TESTS --gtest_filter='SampleGpu.*:ArgmaxGpu.*:AttentionDecodeGpu.*:AttentionPrefillGpu.*'
if has kbench; then
  step kbench 90 $KBENCH --benchmark_filter='^(sample|attention_decode)'
  LANTERN_SAMPLE_CLUSTER=8 step kbench_c8 40 $KBENCH --benchmark_filter='^sample.*cluster'
fi
for i in $(seq 90); do [[ -f $LOGS/synth.done ]] && break; sleep 2; done
has curves && LANTERN=$LANTERN step curves 150 bash scripts/perf-curves.sh "$OUT/curves"
if has engine; then  # new variants against the defaults in the engine (greedy decode steps)
  for v in 4 5; do
    step engine_attn$v 60 $LANTERN bench --model $MODEL --device cuda --quiet --batch 1 \
      --prompt-len 128,4096,32768 --decode-steps 16 --kernels attention_decode=$v
    step engine_attn${v}_batch 60 $LANTERN bench --model $MODEL --device cuda --quiet --batch 1,8,64,256 \
      --prompt-len 128 --decode-steps 16 --kernels attention_decode=$v
  done
  step engine_tests 120 $TESTS --gtest_filter='EngineGpu.*'
  # A sampled batch-64 decode, CUPTI on every step: the sampler's share per step.
  P64=$(printf 'The paged KV cache stores keys and values in blocks of sixteen tokens. %.0s' $(seq 8))
  rm -rf /tmp/run_s64
  step record_s64 60 $LANTERN generate --model $MODEL --device cuda --prompt "$P64" --repeat 64 \
    --max-seqs 64 --max-new-tokens 64 --ignore-eos --temperature 0.8 --top-p 0.95 --seed 7 \
    --record /tmp/run_s64 --cupti-all-steps --quiet
  step inspect_s64 30 $LANTERN inspect /tmp/run_s64 --phase decode --by op --top 12
fi
PROMPT=$(printf 'The paged KV cache stores keys and values in blocks of sixteen tokens. %.0s' $(seq 36))
if has prefill; then
  step prefill512 60 $LANTERN bench --model $MODEL --device cuda --batch 1 --prompt-len 512,512,512 --decode-steps 2 --quiet
  rm -rf /tmp/run_prefill
  step record_prefill 60 $LANTERN generate --model $MODEL --device cuda --prompt "$PROMPT" --max-new-tokens 2 \
    --ignore-eos --record /tmp/run_prefill --cupti-all-steps --quiet
  step inspect_prefill 30 $LANTERN inspect /tmp/run_prefill --phase prefill --by op --top 25
fi
echo "==== summary"; cat "$LOGS/summary.txt"; cat "$LOGS/gpu.txt"
grep -hE "^\[sample\]|tests ran|PASSED|FAILED|Failure|rror|row [0-9]+:|chi" "$LOGS"/gpu_tests.log 2>/dev/null | head -60
for f in kbench kbench_c8; do [[ -f $LOGS/$f.log ]] && grep -E "^(sample|attention)" "$LOGS/$f.log" | head -80; done
for f in "$LOGS"/engine_attn*.log; do [[ -f $f ]] && { echo "== $(basename $f .log)"; grep -vE "^bench:" "$f"; }; done
grep -hE "tests ran|PASSED|FAILED" "$LOGS"/engine_tests.log 2>/dev/null | head
[[ -f $LOGS/inspect_s64.log ]] && grep -A16 "top ops" "$LOGS/inspect_s64.log"
[[ -f $LOGS/prefill512.log ]] && cat "$LOGS/prefill512.log"
[[ -f $LOGS/inspect_prefill.log ]] && head -45 "$LOGS/inspect_prefill.log"
[[ -f $LOGS/curves.log ]] && cat "$LOGS/curves.log"
# At most 8 files come back from the device tool: one archive.
tar czf "$OUT/logs.tgz" -C "$OUT" logs $( [[ -d $OUT/curves ]] && echo curves ) && rm -rf "$LOGS" "$OUT/curves"
exit 0
