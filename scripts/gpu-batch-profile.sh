#!/usr/bin/env bash
# Where a batched decode step's GPU time goes, per op, on the H200, in one call: for each batch B in
# BATCHES, `lantern generate` with B copies of a 128-id prompt (48 tokens each, greedy, CUPTI in every
# step; 8192-row steps, so the prompts prefill in a few steps: 43 of the 48 decode steps at batch 256
# decode all sequences) recorded, then `lantern inspect --phase decode --by op` and
# scripts/critical_path.py over the steps that decode the whole batch (the time each op moved the
# step's end, median over those steps).
#   LANTERN=... MODEL=models/llama-3.2-1b BATCHES="64 256" KERNELS=... bash scripts/gpu-batch-profile.sh OUT_DIR
set -u
cd "$(dirname "$0")/.."
source scripts/lib/gpu-bins.sh "$1"
for b in ${BATCHES:-64 256}; do
  d=/tmp/rec_b$b
  rm -rf "$d"
  step "record_b$b" 150 "$L" generate --model "$M" --device cuda --quiet --prompt-ids "$(seq -s, 100 227)" \
    --repeat "$b" --max-new-tokens 48 --ignore-eos --max-seqs "$b" --max-batch-tokens 8192 \
    ${KERNELS:+--kernels "$KERNELS"} --record "$d" --cupti-all-steps --ids --out /dev/null
  step "inspect_b$b" 60 "$L" inspect "$d" --phase decode --by op --top 20
  step "inspectk_b$b" 60 "$L" inspect "$d" --phase decode --by kernel --top 25
  python3 scripts/critical_path.py "$d" --skip-steps 2 --decode-seqs "$b" > "$LOGS/critical_path_b$b.txt"
  echo "== batch $b"; cat "$LOGS/critical_path_b$b.txt"
done
echo "==== summary"; cat "$LOGS/summary.txt"
