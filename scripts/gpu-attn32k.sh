#!/usr/bin/env bash
# Where batch-1 decode attention at a 32 k context spends its time in the engine (issue 14,
# session 37), in one call of the device tool, building on the GPU machine from this tree:
# `lantern bench --batch 1 --prompt-len 32768` for the step time, then Nsight Compute on two of
# its decode-attention launches (graph nodes) with the sections that split the time: speed of
# light, launch, occupancy, warp states, scheduler, memory and source counters.
# With SUITE=1 the whole lantern_gpu_tests runs after it.
#   OUT=DIR [KERNEL=regex:decode_tma_kernel] [SUITE=1] bash scripts/gpu-attn32k.sh
set -u
cd "$(dirname "$0")/.."
LOGS=/tmp/attn32k-logs; TARGETS="lantern${SUITE:+ lantern_gpu_tests}"; source scripts/lib/device-built.sh
timeout 200 $L bench --model "$M" --device cuda --batch 1 --prompt-len 32768 --decode-steps 16 \
  > "$OUT/bench.txt" 2>&1
echo "bench: rc=$?"; grep -E "^ +1 +32768" "$OUT/bench.txt" | head -3
timeout 300 ncu -k "${KERNEL:-regex:decode_tma_kernel}" -s 20 -c 2 --section SpeedOfLight --section LaunchStats \
  --section Occupancy --section WarpStateStats --section SchedulerStats --section MemoryWorkloadAnalysis \
  --section SourceCounters $L bench --model "$M" --device cuda --batch 1 --prompt-len 32768 --decode-steps 4 \
  > "$OUT/ncu.txt" 2>&1
echo "ncu: rc=$?"
grep -E "decode_tma|Duration|DRAM Throughput|Memory Throughput|Grid Size|Block Size|Registers|Achieved Occupancy|Theoretical Occ|Warp Cycles Per Issued|Issued Warp|No Eligible|Active Warps Per|Eligible Warps" "$OUT/ncu.txt" | head -40
if [[ ${SUITE:-} == 1 ]]; then
  timeout 420 $T > "$LOGS/suite.log" 2>&1
  echo "suite: rc=$? $(grep -E '^\[  PASSED|^\[  SKIPPED|^\[  FAILED  \] [0-9]' "$LOGS/suite.log" | tr '\n' ' ')"
  grep -E "^\[  FAILED" "$LOGS/suite.log" | head -20
  tail -c 60000 "$LOGS/suite.log" > "$OUT/suite-tail.log"
fi
