#!/usr/bin/env bash
# sample.6 grid_gather on the H200 (issue 14): the sampler's GPU tests, the
# kernel alone against sample.5 (bench_kernels, L2 flushed; blocks per row
# forced with LANTERN_SAMPLE_WIDE_BLOCKS), and the engine's sampled decode
# step with each (interleaved processes, the same pinned GEMM plans).
# Usage: OUT=DIR bash scripts/gpu-sample6.sh [tests] [knobs] [probe] [kernel] [engine]
set -u
OUT=${OUT:-/tmp/out}; mkdir -p "$OUT"
KB=build/default/bench/bench_kernels; T=build/default/tests/lantern_gpu_tests; L=build/default/bin/lantern
M=${MODEL:-models/llama-3.2-1b}
stages=${*:-tests kernel engine}
for st in $stages; do
  t0=$(date +%s)
  case $st in
    tests)
      timeout 400 $T --gtest_filter='SampleGpu.*' > "$OUT/sample-tests.log" 2>&1
      echo "tests rc=$?"; grep -E "^\[  (PASSED|FAILED)|^\[  FAILED|\[sample\]|tests? ran" "$OUT/sample-tests.log" | tail -12 ;;
    knobs)  # the token-identity test through sample.6's other paths
      for kv in LANTERN_SAMPLE_WIDE_BLOCKS=16 LANTERN_SAMPLE_WIDE_BLOCKS=8; do
        env $kv timeout 300 $T --gtest_filter='SampleGpu.ClusterGatherDrawsClusterSelectsTokens:SampleGpu.MatchesReference*' > "$OUT/sample-tests-$kv.log" 2>&1
        echo "$kv tests rc=$?"; grep -E "^\[  (PASSED|FAILED)|^\[  FAILED" "$OUT/sample-tests-$kv.log" | tail -4
      done ;;
    probe)  # phase stamps (us after the first block's start), b = 1, top_p 0.95 and top_k 50
      for kv in LANTERN_SAMPLE_WIDE_BLOCKS=132 LANTERN_SAMPLE_WIDE_BLOCKS=32; do
        for f in "b=1/top_k=0" "b=1/top_k=50"; do
          echo "$kv $f"; env $kv LANTERN_SAMPLE_WIDE_PROBE=1 timeout 60 $KB --benchmark_filter="^sample\.6\..*/$f/" 2>&1 | grep probe | tail -2
        done
      done ;;
    kernel)
      timeout 200 $KB --benchmark_filter='^sample\.[56]\..*/b=(1|8|64)/' > "$OUT/sample-kernel.log" 2>&1
      echo "kernel rc=$?"; grep -E "^sample" "$OUT/sample-kernel.log" | head -20
      for g in 32 64; do
        LANTERN_SAMPLE_WIDE_BLOCKS=$g timeout 60 $KB --benchmark_filter='^sample\.6\..*/b=1/' > "$OUT/sample-kernel-g$g.log" 2>&1
        echo "blocks $g:"; grep -E "^sample" "$OUT/sample-kernel-g$g.log" | head -4
      done ;;
    engine)
      common=(--model "$M" --device cuda --batch 1,8 --prompt-len 128 --decode-steps 64 --temperature 0.8 --top-p 0.95 --quiet)
      timeout 120 $L bench "${common[@]}" --kernels sample=5 --json "$OUT/plans.json" > "$OUT/eng-warm.log" 2>&1
      for r in 1 2; do
        for v in 5 6; do
          timeout 120 $L bench "${common[@]}" --kernels sample=$v --gemm-plans "$OUT/plans.json" > "$OUT/eng-$v-$r.log" 2>&1
          echo "sample=$v round $r rc=$?"; grep -E "^ *(batch|[0-9]+ )|decode" "$OUT/eng-$v-$r.log" | head -6
        done
      done ;;
  esac
  echo "[$st] $(( $(date +%s) - t0 )) s"
done
