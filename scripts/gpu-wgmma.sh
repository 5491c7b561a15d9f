#!/usr/bin/env bash
# The session 20-21 measurements of gemm.8 wgmma_split (docs/performance.md,
# "Session 20-21"), in one call of the device tool with binaries carried from
# the development machine (or built there), a model at models/llama-3.2-1b:
#   bash scripts/gpu-wgmma.sh [kernels|knobs|engine|ab|ncu ...]   (default: all)
#   kernels: bench_kernels gemm.6 vs gemm.8 on qkv/o/gate_up/down at m = 32/64/128
#   knobs:   gemm.8 at m = 64 under LANTERN_WG_MAX_SPLITS=4, =2 and LANTERN_WG_STAGES=4
#   engine:  lantern bench at batch 16..128 swapping one family at a time (two default runs bound the noise)
#   ab:      the default against --kernels gate_up_swiglu=2 (the default before session 21), two interleaved rounds
#   ncu:     Nsight Compute on gemm_wg_kernel (o m=64, o m=128, down m=64, qkv m=32)
# Logs go to $OUT (default /tmp/lantern-out); one summary on stdout.
set -u
cd "$(dirname "$0")/.."
B=${BUILD:-build/default}
M=${MODEL:-models/llama-3.2-1b}
OUT=${OUT:-/tmp/lantern-out}
mkdir -p "$OUT"
export LD_LIBRARY_PATH="$PWD/.device/libs:$PWD/.device/pcre2/usr/lib/x86_64-linux-gnu:${LD_LIBRARY_PATH:-}"
T=$(date +%s)
el() { echo "[$(($(date +%s) - T))s] $*" >&2; }
us() { grep -E "^gemm" "$1" | awk '$3 == "us" {print "  " $1, $2, $3}'; }
steps() { grep -E '^ +[0-9]+ +[0-9]+ \|' "$1" | awk '{printf "b%s %s ms  ", $1, $8}'; echo; }
bench() {  # bench LOG BATCHES DECODE_STEPS [--kernels ...]
  local log=$1 batches=$2 n=$3; shift 3
  "$B/bin/lantern" bench --model "$M" --device cuda --batch "$batches" --prompt-len 128 --decode-steps "$n" \
    --quiet "$@" > "$OUT/$log" 2>&1
}
STAGES=("$@")
[[ ${#STAGES[@]} -eq 0 ]] && STAGES=(kernels knobs engine ab ncu)
for s in "${STAGES[@]}"; do
  el "$s"
  case $s in
    kernels)
      "$B/bench/bench_kernels" --benchmark_filter='gemm\.(6|8)\..*/(qkv|o|gate_up|down)/m=(32|64|128)/' \
        > "$OUT/kernels.txt" 2>&1
      echo "kernels (us per launch, L2 flushed):"; us "$OUT/kernels.txt" ;;
    knobs)
      for kn in LANTERN_WG_MAX_SPLITS=4 LANTERN_WG_MAX_SPLITS=2 LANTERN_WG_STAGES=4; do
        env "$kn" "$B/bench/bench_kernels" --benchmark_filter='gemm\.8\..*/(qkv|o|gate_up|down)/m=64/' \
          > "$OUT/knob_${kn%%=*}_${kn##*=}.txt" 2>&1
        echo "$kn:"; us "$OUT/knob_${kn%%=*}_${kn##*=}.txt"
      done ;;
    engine)
      i=0
      for K in default gemm=8 gate_up_swiglu=4 proj_residual_norm=5 gemm=8,gate_up_swiglu=4,proj_residual_norm=5 \
               gate_up_swiglu=2 default; do
        i=$((i + 1))
        if [[ $K == default ]]; then bench "engine_$i.txt" 16,32,48,64,128 64; else bench "engine_$i.txt" 16,32,48,64,128 64 --kernels "$K"; fi
        printf '  %-45s ' "$K"; steps "$OUT/engine_$i.txt"
      done ;;
    ab)
      for r in 1 2; do
        bench "ab_new_$r.txt" 1,32,64,128,256 128
        bench "ab_old_$r.txt" 1,32,64,128,256 128 --kernels gate_up_swiglu=2
        printf '  round %d default             ' $r; steps "$OUT/ab_new_$r.txt"
        printf '  round %d gate_up_swiglu=2    ' $r; steps "$OUT/ab_old_$r.txt"
      done ;;
    ncu)
      for shape in o/m=64 o/m=128 down/m=64 qkv/m=32; do
        f=$OUT/ncu_$(echo "$shape" | tr '/=' '__').txt
        timeout 120 ncu -k regex:gemm_wg_kernel -c 1 --section SpeedOfLight --section LaunchStats \
          --section Occupancy --section WarpStateStats --section MemoryWorkloadAnalysis --section SourceCounters \
          "$B/bench/bench_kernels" --benchmark_filter="gemm\.8\..*/$shape/" > "$f" 2>&1
        echo "ncu $shape:"
        grep -E "Duration|DRAM Throughput|Grid Size|Cluster Size|Achieved Occupancy|Warp Cycles Per Issued" "$f" | head -8
      done ;;
    *) echo "gpu-wgmma: unknown stage '$s' (kernels knobs engine ab ncu)" >&2; exit 2 ;;
  esac
done
el done
