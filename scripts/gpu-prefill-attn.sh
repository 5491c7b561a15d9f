#!/usr/bin/env bash
# attention_prefill variants on the H200 in one device call (issue 14, session 7;
# docs/performance.md, "attention_prefill.3 flash_pair"): the GPU tests, the
# kernel bench (128/512/2048 tokens), a CUPTI per-op profile of one ~500-token
# prefill per variant and `lantern bench` at 512 (three prompts) and 128/2048.
# Binaries are carried stripped in $BIN_DIR/{bin,tests,bench}; logs come back
# as $OUT/logs.tgz. Takes ~25 s on a warm machine.
#   BIN_DIR=.wt/NAME VARIANTS="2 3" bash scripts/gpu-prefill-attn.sh
set -u
cd "$(dirname "$0")/.."
OUT="${OUT:-/tmp/lantern-prefill-out}"
LOGS=$OUT/logs; mkdir -p "$LOGS"
source scripts/gpu-step.sh
B=${BIN_DIR:-build/carry}
L=$B/bin/lantern T=$B/tests/lantern_gpu_tests K=$B/bench/bench_kernels M=models/llama-3.2-1b
VARIANTS=${VARIANTS:-2 3}
[[ -f $M/model.safetensors ]] || step synth 60 $L synth --preset llama-3.2-1b --seed 0 --out $M --tokenizer-dir .device/llama3
step tests 30 $T --gtest_filter='AttentionPrefillGpu.*'
step kbench 20 $K --benchmark_filter='^attention_prefill'
PROMPT=$(printf 'The paged KV cache stores keys and values in blocks of sixteen tokens. %.0s' $(seq 36))
BENCH="$L bench --model $M --device cuda --batch 1 --decode-steps 2 --quiet"
for v in $VARIANTS; do
  rm -rf /tmp/rp$v
  step rec_v$v 25 $L generate --model $M --device cuda --prompt "$PROMPT" --max-new-tokens 2 --ignore-eos \
    --record /tmp/rp$v --cupti-all-steps --quiet --kernels attention_prefill=$v
  step insp_v$v 15 $L inspect /tmp/rp$v --phase prefill --by op --top 12
  step e512_v$v 20 $BENCH --prompt-len 512,512,512 --kernels attention_prefill=$v
  step esw_v$v 30 $BENCH --prompt-len 128,2048 --max-batch-tokens 2048 --kernels attention_prefill=$v
done
cat "$LOGS/summary.txt"
grep -hE "tests ran|PASSED|FAILED|Failure" "$LOGS/tests.log"
grep -E "^attention.* len=" "$LOGS/kbench.log"
for v in $VARIANTS; do
  echo "== v$v"; grep -E "attention_prefill|gate_up|down_proj|qkv_proj|o_proj" "$LOGS/insp_v$v.log"
  grep -hE "^ +1 +[0-9]+ \|" "$LOGS/e512_v$v.log" "$LOGS/esw_v$v.log"
done
tar czf "$OUT/logs.tgz" -C "$OUT" logs && rm -rf "$LOGS"
exit 0
