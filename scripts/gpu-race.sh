#!/usr/bin/env bash
# sample.7 grid_race on the H200 (issue 14): builds on the machine when no
# binaries are there, then the sampler's GPU tests, the kernel against sample.6
# (bench_kernels, L2 flushed; blocks per row forced with
# LANTERN_SAMPLE_RACE_BLOCKS), the engine's sampled decode step with each
# (interleaved processes, the same pinned GEMM plans), and the kernel-swap pair
# of experiments (CUPTI: the sample op per call).
# Usage: OUT=DIR bash scripts/gpu-race.sh [tests] [probe] [kernel] [knobs] [engine] [record]
set -u
cd "$(dirname "$0")/.."
LOGS=/tmp/race-logs; TARGETS="lantern lantern_gpu_tests bench_kernels"; source scripts/lib/device-built.sh
stages=${*:-tests kernel engine record}
for st in $stages; do
  t0=$(date +%s)
  case $st in
    tests)
      timeout 500 $T --gtest_filter='SampleGpu.*' > "$OUT/sample-tests.log" 2>&1
      echo "tests rc=$?"; grep -E "^\[  (PASSED|FAILED)|^\[  FAILED|\[sample\]|tests? ran|rounding tie" "$OUT/sample-tests.log" | tail -30
      grep -A6 "Failure" "$OUT/sample-tests.log" | head -40 ;;
    probe)  # phase stamps (us after the first block's start, median block), b = 1
      for kv in "LANTERN_SAMPLE_RACE_BLOCKS=128" "LANTERN_SAMPLE_RACE_BLOCKS=64"; do
        for f in ${PROBE_FILTERS:-"b=1/top_k=0" "b=1/top_k=50"}; do
          echo "$kv $f"; env $kv LANTERN_SAMPLE_RACE_PROBE=1 timeout 60 $KB --benchmark_filter="^sample\.7\..*/$f/" 2>&1 | grep probe | tail -2
          env $kv timeout 60 $KB --benchmark_filter="^sample\.7\..*/$f/" 2>&1 | grep -E "^sample.*us=" | sed 's/.*us=/  event-timed us=/'
        done
      done ;;
    kernel)
      timeout 200 $KB --benchmark_filter='^sample\.[67]\.' > "$LOGS/sample-kernel.log" 2>&1
      echo "kernel rc=$?"; grep -E "^sample" "$LOGS/sample-kernel.log" | grep -v iterations: ;;
    knobs)
      for g in 64; do
        LANTERN_SAMPLE_RACE_BLOCKS=$g timeout 60 $KB --benchmark_filter='^sample\.7\..*/b=1/' > "$LOGS/sample-kernel-g$g.log" 2>&1
        echo "race blocks $g:"; grep -E "^sample" "$LOGS/sample-kernel-g$g.log" | head -4
      done ;;
    engine)  # interleaved processes, pinned GEMM plans (scripts/gpu-ab.sh)
      OUT="$LOGS/ab" bash scripts/gpu-ab.sh sample=6 sample=7 --batch 1,8 --prompt-len 128 --decode-steps 64 \
        --temperature 0.8 --top-p 0.95 2>&1 | tail -12 ;;
    record)
      for v in grid_gather grid_race; do
        timeout 200 $L run experiments/sampled-decode-$v.json --set model.path="$M" --set model.preset=auto --out "$LOGS/run-$v" > "$LOGS/run-$v.log" 2>&1
        echo "run $v rc=$?"; tail -3 "$LOGS/run-$v.log"
      done
      timeout 60 $L compare "$LOGS/run-grid_gather" "$LOGS/run-grid_race" > "$OUT/compare.txt" 2>&1
      echo "compare rc=$?"; grep -E "sample|TPOT|ITL|identical|tokens" "$OUT/compare.txt" | head -20
      tar czf "$OUT/runs.tar.gz" -C "$LOGS" run-grid_gather run-grid_race 2>/dev/null ;;
  esac
  echo "[$st] $(( $(date +%s) - t0 )) s"
done
