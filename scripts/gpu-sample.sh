#!/usr/bin/env bash
# The performance helper's one-call check on the H200 (issue 14, session 2):
# the sampling tests (every sample variant against the CPU reference, ties,
# flat rows, chi-square), the sample/argmax kernel benchmark, then the decode
# step at batch 64 and 256 with lantern bench (per-op table). Logs under $OUT.
#   BIN_DIR=build/default bash scripts/gpu-sample.sh [tests kbench decode]
set -u
cd "$(dirname "$0")/.."
GPU_STEPS_NAME=sample GPU_STEPS_DEFAULT="tests kbench decode profile"
source scripts/gpu-steps.sh "$@"
need_synth=0
if { has decode || has profile; } && [[ ! -f $MODEL/model.safetensors ]]; then
  need_synth=1
  (step synth 120 $LANTERN synth --preset llama-3.2-1b --out $MODEL --seed 0 --tokenizer-dir .device/llama3 &)
fi
has tests && step sample_tests 100 $TESTS --gtest_filter='SampleGpu.*:ArgmaxGpu.*'
has kbench && step kbench 60 $KBENCH --benchmark_filter='^(sample|argmax)'
if has decode || has profile; then
  for i in $(seq 60); do
    [[ $need_synth == 0 ]] || grep -q synth "$LOGS/summary.txt" 2>/dev/null && break; sleep 2
  done
  has decode && for b in 64 256; do
    step bench_b$b 50 $LANTERN bench --model $MODEL --device cuda --batch $b --prompt-len 128 --decode-steps 128
  done
fi
PROMPT=$(printf 'The paged KV cache stores keys and values in blocks of sixteen tokens. %.0s' $(seq 8))
if has profile; then  # CUPTI on every step of a sampled batch-64 / batch-256 decode; per-op tables
  for cfg in "64 new" "256 new" "64 old"; do
    set -- $cfg; extra=(); [[ $2 == old ]] && extra=(--kernels sample=1)
    rm -rf /tmp/run_$1_$2
    step record_$1_$2 60 $LANTERN generate --model $MODEL --device cuda --prompt "$PROMPT" --repeat $1 \
      --max-seqs 256 --max-new-tokens 128 --ignore-eos --temperature 0.8 --top-p 0.95 --seed 7 \
      --record /tmp/run_$1_$2 --cupti-all-steps --quiet "${extra[@]}"
    step inspect_$1_$2 30 $LANTERN inspect /tmp/run_$1_$2 --phase decode --by op --top 25
  done
fi
echo "==== summary"; cat "$LOGS/summary.txt"; cat "$LOGS/gpu.txt"
grep -hE "^\[sample\]|tests ran|PASSED|FAILED|Failure|error|row [0-9]+:" "$LOGS"/sample_tests.log 2>/dev/null | head -60
[[ -f $LOGS/kbench.log ]] && grep -E "sample|argmax" "$LOGS/kbench.log" | grep -v "^\s*$" | head -60
for b in 64 256; do [[ -f $LOGS/bench_b$b.log ]] && { echo "== bench b=$b"; tail -45 "$LOGS/bench_b$b.log"; }; done
for f in "$LOGS"/inspect_*.log; do [[ -f $f ]] && { echo "== $(basename $f .log)"; head -45 "$f"; }; done
tar czf "$OUT/logs.tar.gz" -C /tmp lantern-sample-logs
