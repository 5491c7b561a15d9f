#!/usr/bin/env bash
# Where a 512-token prefill step's GPU time goes, per op and per kernel, on the H200: `lantern
# bench` at 512 tokens (three prompts, the warm ones are the measure), then one ~512-token prompt
# recorded with CUPTI and `lantern inspect --phase prefill`.
#   LANTERN=... KERNELS=... bash scripts/gpu-prefill-profile.sh OUT_DIR
set -u
cd "$(dirname "$0")/.."
source scripts/lib/gpu-bins.sh "$1"
step bench512 60 "$L" bench --model "$M" --device cuda --batch 1 --prompt-len 512,512,512 --decode-steps 2 \
  --quiet ${KERNELS:+--kernels "$KERNELS"}
rm -rf /tmp/rec_p512
step record_p512 60 "$L" generate --model "$M" --device cuda --quiet --prompt-ids "$(seq -s, 100 611)" \
  --max-new-tokens 2 --ignore-eos --repeat 3 --max-seqs 1 --max-batch-tokens 512 \
  ${KERNELS:+--kernels "$KERNELS"} --record /tmp/rec_p512 --cupti-all-steps --ids --out /dev/null
step inspect_p512 60 "$L" inspect /tmp/rec_p512 --phase prefill --by op --top 20
step inspectk_p512 60 "$L" inspect /tmp/rec_p512 --phase prefill --by kernel --top 25
grep -hE "^ +1 +[0-9]+ \|" "$LOGS/bench512.log" || tail -8 "$LOGS/bench512.log"
cat "$LOGS/inspect_p512.log" "$LOGS/inspectk_p512.log"
