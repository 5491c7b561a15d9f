#!/usr/bin/env bash
# Where gemm.8's wgmma kernel spends its time, on the H200, in one call (docs/performance.md,
# session 22). Needs the probe built on the development machine (scripts/probe/build-probe.sh wg_phases)
# and carried as $PROBE (default build/carry/probe/wg_phases); bench_kernels as $B/bench.
#   bash scripts/gpu-wg-probe.sh [probe|splits|ncu ...]   (default: probe splits ncu)
#   probe:  per-block phase stamps (entry, PDL wait, first full stage, last wgmma, tile barrier,
#           reduce, exit) for o/qkv/gate_up/down at m = 32/64/128
#   splits: o/64 and down/64 with the cluster size capped at 1, 2, 4 (LANTERN_WG_MAX_SPLITS)
#   ncu:    Nsight Compute's source view (SASS, stall reasons) of gemm_wg_kernel on o/64, as CSV
# Writes $OUT/wg_*.txt; prints the tables.
set -u
cd "$(dirname "$0")/.."
OUT=${OUT:-/tmp/wg-out}; mkdir -p "$OUT"
B=${B:-build/carry}
PROBE=${PROBE:-$B/probe/wg_phases}
STAGES=("$@")
[[ ${#STAGES[@]} -eq 0 ]] && STAGES=(probe splits ncu)
for s in "${STAGES[@]}"; do
  echo "==== $s $(date +%T)"
  case $s in
    probe)
      timeout 120 "$PROBE" o/32 o/64 o/128 qkv/64 down/64 gate_up/64 gate_up/128 > "$OUT/wg_probe.txt" 2>&1
      cat "$OUT/wg_probe.txt" ;;
    splits)
      for sp in 1 2 4; do
        LANTERN_WG_MAX_SPLITS=$sp timeout 60 "$PROBE" o/64 down/64 > "$OUT/wg_splits$sp.txt" 2>&1
        echo "-- LANTERN_WG_MAX_SPLITS=$sp"; cat "$OUT/wg_splits$sp.txt"
      done ;;
    ncu)
      timeout 180 ncu --set full --import-source yes -k regex:gemm_wg_kernel -c 1 -f -o "$OUT/wg_o64" \
        "$PROBE" o/64 > "$OUT/wg_ncu_run.txt" 2>&1
      tail -3 "$OUT/wg_ncu_run.txt"
      ncu -i "$OUT/wg_o64.ncu-rep" --page source --print-source sass --csv > "$OUT/wg_o64_sass.csv" 2>&1
      ncu -i "$OUT/wg_o64.ncu-rep" --page details > "$OUT/wg_o64_details.txt" 2>&1
      grep -E "Duration|DRAM Throughput|Achieved Occupancy|Warp Cycles Per Issued|No Eligible|One or More" \
        "$OUT/wg_o64_details.txt" | head -12
      wc -c "$OUT/wg_o64_sass.csv"; rm -f "$OUT/wg_o64.ncu-rep" ;;
    *) echo "gpu-wg-probe: unknown stage '$s' (probe splits ncu)" >&2; exit 2 ;;
  esac
done
