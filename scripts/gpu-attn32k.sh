#!/usr/bin/env bash
# Where batch-1 decode attention at a 32 k context spends its time in the engine (issue 14,
# session 37), in one call of the device tool, building on the GPU machine from this tree:
# `lantern bench --batch 1 --prompt-len 32768` for the step time, then Nsight Compute on two of
# its decode-attention launches (graph nodes) with the sections that split the time: speed of
# light, launch, occupancy, warp states, scheduler, memory and source counters.
# BASE=0 skips those two.
# With SOURCE=1 a third profile samples warp stalls per SASS instruction at the GPU's own clocks
# (--clock-control none) and scripts/ncu_source_top.py prints the instructions with the most stall
# samples and their reasons (ENV="A=1 B=2" sets knobs for the profiled runs; KERNELS=attention_decode=21
# with KERNEL=regex:decode_rows_kernel profiles another variant).
# With SUITE=1 the whole lantern_gpu_tests runs after it.
#   OUT=DIR [KERNEL=regex:decode_tma_kernel] [SOURCE=1] [SUITE=1] bash scripts/gpu-attn32k.sh
set -u
cd "$(dirname "$0")/.."
LOGS=/tmp/attn32k-logs; TARGETS="lantern${SUITE:+ lantern_gpu_tests}"; source scripts/lib/device-built.sh
if [[ ${BASE:-1} == 1 ]]; then
timeout 200 $L bench --model "$M" --device cuda --batch 1 --prompt-len 32768 --decode-steps 16 \
  > "$OUT/bench.txt" 2>&1
echo "bench: rc=$?"; grep -E "^ +1 +32768" "$OUT/bench.txt" | head -3
timeout 300 ncu -k "${KERNEL:-regex:decode_tma_kernel}" -s 20 -c 2 --section SpeedOfLight --section LaunchStats \
  --section Occupancy --section WarpStateStats --section SchedulerStats --section MemoryWorkloadAnalysis \
  --section SourceCounters $L bench --model "$M" --device cuda --batch 1 --prompt-len 32768 --decode-steps 4 \
  > "$OUT/ncu.txt" 2>&1
echo "ncu: rc=$?"
grep -E "decode_tma|Duration|DRAM Throughput|Memory Throughput|Grid Size|Block Size|Registers|Achieved Occupancy|Theoretical Occ|Warp Cycles Per Issued|Issued Warp|No Eligible|Active Warps Per|Eligible Warps" "$OUT/ncu.txt" | head -40
fi
if [[ ${SOURCE:-} == 1 ]]; then
  env ${ENV:-} timeout 300 ncu -k "${KERNEL:-regex:decode_tma_kernel}" -s 20 -c 1 --clock-control none \
    --section WarpStateStats --section SourceCounters --section SpeedOfLight -o "$LOGS/src" -f \
    $L bench --model "$M" --device cuda --batch 1 --prompt-len 32768 --decode-steps 4 \
    ${KERNELS:+--kernels "$KERNELS"} > "$LOGS/ncu-src.log" 2>&1
  echo "ncu source: rc=$?"
  ncu -i "$LOGS/src.ncu-rep" --page source --csv --print-source sass > "$LOGS/src.csv" 2> "$LOGS/src.err"
  echo "export: rc=$? $(wc -l < "$LOGS/src.csv") lines"; head -c 600 "$LOGS/src.err"
  ncu -i "$LOGS/src.ncu-rep" --page details > "$OUT/ncu-src-details.txt" 2>&1
  python3 scripts/ncu_source_top.py "$LOGS/src.csv" 40 > "$OUT/ncu-src-top.txt" 2>&1; head -60 "$OUT/ncu-src-top.txt"
  gzip -c "$LOGS/src.csv" > "$OUT/src.csv.gz"
fi
if [[ ${SUITE:-} == 1 ]]; then
  timeout 420 $T > "$LOGS/suite.log" 2>&1
  echo "suite: rc=$? $(grep -E '^\[  PASSED|^\[  SKIPPED|^\[  FAILED  \] [0-9]' "$LOGS/suite.log" | tr '\n' ' ')"
  grep -E "^\[  FAILED" "$LOGS/suite.log" | head -20
  tail -c 60000 "$LOGS/suite.log" > "$OUT/suite-tail.log"
fi
