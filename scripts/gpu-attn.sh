#!/usr/bin/env bash
# attention_decode.6 and .7 (split_k_pipe, split_k_pipe_heads) on the H200 (issue 14, session 6): the
# attention and engine GPU tests, the attention_decode kernel benchmark for
# variants 5-7, and `lantern bench` with each of them (batch 1/64/256 at
# prompt 128; batch 1 at prompt 32000). Binaries: stripped copies in $B
# ({bin,tests,bench}); DEV the .device folder; BUDGET_S caps the whole run.
#   B=.wt/attn DEV=$PWD/.device bash scripts/gpu-attn.sh [tests kbench engine long]
set -u
OUT="${OUT:-/tmp/lantern-attn-out}"
LOGS=$OUT/logs
mkdir -p "$LOGS"
DEV=${DEV:-$PWD/.device}
export LD_LIBRARY_PATH="$DEV/pcre2/usr/lib/x86_64-linux-gnu:$DEV/libs:${LD_LIBRARY_PATH:-}"
STAGES=" ${*:-tests kbench engine long} "
has() { [[ $STAGES == *" $1 "* ]]; }
B=${B:-build/carry}
LANTERN=$B/bin/lantern TESTS=$B/tests/lantern_gpu_tests KBENCH=$B/bench/bench_kernels
MODEL=models/llama-3.2-1b
source scripts/gpu-step.sh 2>/dev/null || source "$(dirname "$0")/gpu-step.sh"
if { has engine || has long; } && [[ ! -f $MODEL/model.safetensors ]]; then
  (step synth 60 $LANTERN synth --preset llama-3.2-1b --out $MODEL --seed 0 --tokenizer-dir $DEV/llama3; touch $LOGS/synth.done) &
else
  touch $LOGS/synth.done
fi
has tests && step gpu_tests 90 $TESTS --gtest_filter='AttentionDecode*:EngineGpu.*'
has kbench && step kbench 60 $KBENCH --benchmark_filter='^attention_decode\.[567]'
for i in $(seq 60); do [[ -f $LOGS/synth.done ]] && break; sleep 1; done
for v in 5 6 7; do
  has engine && step engine_attn$v 45 $LANTERN bench --model $MODEL --device cuda --quiet \
    --batch 1,64,256 --prompt-len 128 --decode-steps 64 --kernels attention_decode=$v
done
for v in 5 6 7; do
  has long && step long_attn$v 45 $LANTERN bench --model $MODEL --device cuda --quiet \
    --batch 1 --prompt-len 32000 --decode-steps 16 --kernels attention_decode=$v
done
echo "==== summary"; cat "$LOGS/summary.txt"
grep -hE "tests ran|PASSED|FAILED|Failure|rror" "$LOGS"/gpu_tests.log 2>/dev/null | head -40
[[ -f $LOGS/kbench.log ]] && grep -E "^attention" "$LOGS/kbench.log"
for f in "$LOGS"/engine_attn*.log "$LOGS"/long_attn*.log; do [[ -f $f ]] && { echo "== $(basename $f .log)"; grep -vE "^bench:" "$f" | tail -20; }; done
exit 0
