#!/usr/bin/env bash
# The measurements session 9 could not take (no device after its fifth call), in one call of the
# device tool after `scripts/gpu-issue14-verify.sh`: the decode step over a run's length with the
# fixed `lantern bench` (scripts/gpu-step-count.sh), the carveout A/B (LANTERN_SMEM_CARVEOUT=100 vs
# unset, interleaved, batch 1/16/64/256), the whole-batch per-op profile at 64 and 256
# (scripts/gpu-batch-profile.sh, with the harness's per-replay attention cost), the batched-decode
# kernel-swap pair (experiments/batched-decode-*.json, lantern compare) and the cost curves
# (scripts/perf-curves.sh). BUDGET_S (default 540) stops starting steps past it.
#   LANTERN=... MODEL=... bash scripts/gpu-remeasure.sh OUT_DIR
set -u
cd "$(dirname "$0")/.."
export BUDGET_S=${BUDGET_S:-540}
source scripts/lib/gpu-bins.sh "$1"
BUDGET_S=$(( BUDGET_S - SECONDS )) bash scripts/gpu-step-count.sh "$LOGS/steps" "256 128 128" "256 128 192" "256 512 64" "64 128 128" 2>&1 | grep -v ": rc="
for round in 1 2; do
  for c in none 100; do
    name=carveout_${c}_r$round
    if [[ $c == none ]]; then
      step "$name" 120 "$L" bench --model "$M" --device cuda --quiet --batch 1,16,64,256 --prompt-len 128 \
        --decode-steps 128 --json "$LOGS/$name.json"
    else
      step "$name" 120 env LANTERN_SMEM_CARVEOUT="$c" "$L" bench --model "$M" --device cuda --quiet \
        --batch 1,16,64,256 --prompt-len 128 --decode-steps 128 --json "$LOGS/$name.json"
    fi
    echo "== carveout $c round $round"; grep -E "^ *[0-9]+ +[0-9]+ [|]|partial" "$LOGS/$name.log"
  done
done
BUDGET_S=$(( BUDGET_S - SECONDS )) BATCHES="64 256" bash scripts/gpu-batch-profile.sh "$LOGS/profile" 2>&1 | grep -v ": rc="
for v in split_k_early48 batched_ring; do
  step "swap_$v" 120 "$L" run "experiments/batched-decode-$v.json" --set model.path="$M" --set model.preset=auto \
    --quiet --out "$LOGS/swap_$v"
done
step swap_compare 60 "$L" compare "$LOGS/swap_split_k_early48" "$LOGS/swap_batched_ring" --markdown
head -40 "$LOGS/swap_compare.log"
step curves 240 bash scripts/perf-curves.sh "$LOGS/curves"
grep -vE "^$" "$LOGS/curves.log" | head -60
echo "==== summary"; cat "$LOGS/summary.txt"
