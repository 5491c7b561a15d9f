#!/usr/bin/env bash
# Decode-step times over a run, per (batch, prompt, decode steps) point, each in its own process:
# the median over the steps that decode the whole batch (what `lantern bench` reports since session
# 9), how many there were, and the medians of each quarter of them (JSON decode_steps_ms), so a drift
# over the run (clocks, KV layout) shows. Session 9 found the old bench's batch-256 median mixed
# prompt-chunk, whole-batch and ramp-down steps (scripts/bench_step_mix.py); this measures the clean
# step at the points it had measured.
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
print(f"{sys.argv[1].split('/')[-1]}: median {j['decode_step_ms']:.3f} ms over {len(d)} "
      f"{'whole-batch' if j['decode_whole_batch'] else 'PARTIAL-batch'} steps ({j['prefill_steps']} prefill steps), "
      f"quarter medians {quarters}, min {min(d):.3f}, max {max(d):.3f}")
PY
done
echo "==== summary"; cat "$LOGS/summary.txt"
