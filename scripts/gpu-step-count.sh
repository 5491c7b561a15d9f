#!/usr/bin/env bash
# Why does the batch-256 decode step depend on the run's length? (session 9: 2.19 ms per step with
# 128 decode steps, 1.55-1.67 ms with 32-64, and flat in the prompt from 128 to 384 tokens.) Runs
# `lantern bench` once per (batch, prompt, decode steps) point, each in its own process, and prints
# the median step and the medians of each quarter of the decode steps (JSON decode_steps_ms: every
# step in order), so a drift over the run (clocks, KV layout, scheduling) shows.
#   LANTERN=... MODEL=... bash scripts/gpu-step-count.sh OUT_DIR ["B P S" ...]
set -u
cd "$(dirname "$0")/.."
source scripts/lib/gpu-bins.sh "$1"
shift
POINTS=("$@")
(( ${#POINTS[@]} )) || POINTS=("256 128 32" "256 128 64" "256 128 128" "256 128 192" "256 256 64" "64 128 64" "64 128 128")
for cfg in "${POINTS[@]}"; do
  set -- $cfg
  n=b$1_p$2_s$3
  step "$n" 90 "$L" bench --model "$M" --device cuda --quiet --batch "$1" --prompt-len "$2" --decode-steps "$3" \
    --json "$LOGS/$n.json" || continue
  python3 - "$LOGS/$n.json" <<'PY'
import json, statistics, sys
j = json.load(open(sys.argv[1]))
d = j["decode_steps_ms"]
q = max(1, len(d) // 4)
quarters = [round(statistics.median(d[i * q:(i + 1) * q]), 3) for i in range(min(4, len(d) // q))]
print(f"{sys.argv[1].split('/')[-1]}: median {j['decode_step_ms']:.3f} ms, quarter medians {quarters}, "
      f"min {min(d):.3f}, max {max(d):.3f}, {len(d)} steps")
PY
done
echo "==== summary"; cat "$LOGS/summary.txt"
