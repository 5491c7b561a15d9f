#!/usr/bin/env bash
# gate_up_swiglu.5 wg_wide on the H200 (issue 14): its GPU tests, the kernel
# alone against variants 1 (cuBLASLt + swiglu) and 4 at 64..2048 rows
# (bench_kernels, L2 flushed), and the engine's batch-256 decode step and
# 512-token prefill with variant 4 (the default) and 5 (interleaved processes,
# the same pinned GEMM plans).
# Usage: OUT=DIR bash scripts/gpu-wg-wide.sh [tests] [knobs] [probe] [kernel] [engine] [prefill]
# Extra environment (e.g. LANTERN_WG_HOLD=2, LANTERN_WG_WIDE_MAX_M=4096) applies to every stage.
set -u
OUT=${OUT:-/tmp/out}; mkdir -p "$OUT"
KB=build/default/bench/bench_kernels; T=build/default/tests/lantern_gpu_tests; L=build/default/bin/lantern
M=${MODEL:-models/llama-3.2-1b}
ROUNDS=${ROUNDS:-2}
stages=${*:-tests kernel engine prefill}
# ab NAME LIMIT_S COLS bench-args...: a warm-up run records the GEMM plans, then
# ROUNDS interleaved processes of gate_up_swiglu 4 and 5 run with them pinned.
ab() {
  local name=$1 limit=$2 cols=$3; shift 3
  local common=(--model "$M" --device cuda "$@" --quiet)
  timeout "$limit" $L bench "${common[@]}" --json "$OUT/plans-$name.json" > "$OUT/$name-warm.log" 2>&1
  for r in $(seq "$ROUNDS"); do
    for v in 4 5; do
      local log="$OUT/$name-$v-$r${TAG:-}.log"
      timeout "$limit" $L bench "${common[@]}" --kernels gate_up_swiglu=$v --gemm-plans "$OUT/plans-$name.json" > "$log" 2>&1
      echo "gate_up_swiglu=$v round $r rc=$?"; grep -E "^ +[0-9]+ +[0-9]+ \|" "$log" | cut -c1-"$cols"
    done
  done
}
for st in $stages; do
  t0=$(date +%s)
  case $st in
    tests)
      timeout 150 $T --gtest_filter='GateUpSwigluGpu.*:BatchGemmGpu.Wide*' > "$OUT/wide-tests.log" 2>&1
      echo "tests rc=$?"; grep -E "^\[  (PASSED|FAILED)|Failure|element" "$OUT/wide-tests.log" | tail -12 ;;
    knobs)  # the tests with each consumer hold, and the batch tiled (m > 256)
      for kv in LANTERN_WG_HOLD=1 LANTERN_WG_HOLD=2 LANTERN_WG_WIDE_MAX_M=4096; do
        log="$OUT/wide-tests-${kv//=/_}.log"
        env $kv timeout 100 $T --gtest_filter='GateUpSwigluGpu.*:GemmGpu.Wgmma*:BatchGemmGpu.Wide*' > "$log" 2>&1
        echo "$kv tests rc=$?"; grep -E "^\[  (PASSED|FAILED)|^\[  FAILED" "$log" | tail -3
      done ;;
    probe)  # phase stamps of the wgmma kernel (build/probe/wg_phases: scripts/probe/build-probe.sh wg_phases)
      P=${PROBE:-build/carry/probe/wg_phases}
      $P gate_up/128 gate_up/256 gate_up/512 > "$OUT/probe.log" 2>&1
      grep -E "^==|last_mma|first_full|reduced" "$OUT/probe.log" ;;
    kernel)
      timeout 300 $KB --benchmark_filter='^gate_up_swiglu\.[145]\.' > "$OUT/wide-kernel.log" 2>&1
      echo "kernel rc=$?"; grep -E "^gate_up_swiglu" "$OUT/wide-kernel.log" | tail -18 ;;
    engine)  # the batch-256 (and 64) decode step
      ab dec 150 90 --batch 64,256 --prompt-len 128 --decode-steps 128 ;;
    prefill)  # one 512-token prompt, three prefills per process
      ab pre 120 50 --batch 1 --prompt-len 512,512,512 --decode-steps 2 ;;
  esac
  echo "[$st] $(( $(date +%s) - t0 )) s"
done
