#!/usr/bin/env bash
# Where the time goes now, in one device call (issue 14): builds on the H200 when no binaries are
# there, makes the synthetic llama-3.2-1b, then per stage
#   prefill  -- scripts/gpu-prefill-profile.sh (512-token bench + a CUPTI recording, by op / kernel)
#               and scripts/prefill_gaps.py over that recording (GPU idle time inside the step)
#   batch    -- scripts/gpu-batch-profile.sh for BATCHES (default 256): by op, by kernel, critical path
# Logs stay in /tmp/where-logs (the device tool brings back at most 8 files); a summary on stdout.
#   OUT=DIR KERNELS=... bash scripts/gpu-where.sh [prefill] [batch]
set -u
cd "$(dirname "$0")/.."
LOGS=/tmp/where-logs; TARGETS="lantern"; source scripts/lib/device-built.sh
for st in ${*:-prefill batch}; do
  t0=$(date +%s)
  case $st in
    prefill)
      bash scripts/gpu-prefill-profile.sh "$LOGS/prefill" 2>&1 | tee "$OUT/prefill.txt" | head -80
      python3 scripts/prefill_gaps.py /tmp/rec_p512 > "$OUT/prefill-gaps.txt" 2>&1
      head -60 "$OUT/prefill-gaps.txt" ;;
    batch)
      BATCHES=${BATCHES:-256} bash scripts/gpu-batch-profile.sh "$LOGS/batch" > "$OUT/batch.txt" 2>&1
      cat "$LOGS"/batch/inspect_b*.log | head -60; tail -50 "$OUT/batch.txt" ;;
  esac
  echo "[$st] $(( $(date +%s) - t0 )) s"
done
