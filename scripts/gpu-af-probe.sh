#!/usr/bin/env bash
# Where the wg_flash prefill attention spends its time, on the H200, in one call
# (docs/performance.md, session 29). Builds lantern_kernels there, then the probe
# (scripts/probe/build-probe.sh af_phases), and runs:
#   probe: per-block phase stamps at 512 tokens (warm, chain, cold) and 2048 (warm);
#          LANTERN_PREFILL_WGS=4 too
#   ncu:   Nsight Compute's launch, occupancy, scheduler and warp-state sections of one
#          warm 512-token launch
#   bash scripts/gpu-af-probe.sh [probe] [ncu]   (default: both); logs in $OUT
set -u
cd "$(dirname "$0")/.."
OUT=${OUT:-/tmp/af-out}; mkdir -p "$OUT"
STAGES=("$@"); [[ ${#STAGES[@]} -eq 0 ]] && STAGES=(probe ncu)
t0=$(date +%s)
bash scripts/device-build.sh lantern_kernels > "$OUT/build.log" 2>&1 || { tail -30 "$OUT/build.log"; exit 1; }
B=build/gpu-machine bash scripts/probe/build-probe.sh af_phases >> "$OUT/build.log" 2>&1 || { tail -30 "$OUT/build.log"; exit 1; }
echo "build: $(( $(date +%s) - t0 )) s"
P=build/probe/af_phases
for s in "${STAGES[@]}"; do
  echo "==== $s $(date +%T)"
  case $s in
    probe)
      timeout 120 $P ${CASES:-512/warm 512/chain 512/cold 2048/warm 128/warm} > "$OUT/af_probe.txt" 2>&1
      echo "-- LANTERN_PREFILL_WGS=4" >> "$OUT/af_probe.txt"
      LANTERN_PREFILL_WGS=4 timeout 60 $P 512/warm 512/chain >> "$OUT/af_probe.txt" 2>&1
      cat "$OUT/af_probe.txt" ;;
    ncu)
      timeout 200 ncu --section LaunchStats --section Occupancy --section SchedulerStats --section WarpStateStats \
        --section SpeedOfLight --section ComputeWorkloadAnalysis --cache-control none \
        -k regex:attention_prefill_wg -s 5 -c 1 $P 512/warm > "$OUT/af_ncu.txt" 2>&1
      echo "ncu rc=$?"; grep -vE "^==PROF==|^  *-+$" "$OUT/af_ncu.txt" | grep -E "[0-9]" | head -80 ;;
  esac
done
