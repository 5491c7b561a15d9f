#!/usr/bin/env bash
# The persistent-layer question (issue 14, session 35) on the GPU machine in one call of the
# device tool, from this tree:
#   probe:    scripts/probe/persistent_layer.cu (a batch-1 Llama-3.2-1B layer's five phases as one
#             cooperative kernel with counter barriers, vs the same code as a PDL chain in a graph,
#             vs the stream floor; PF values: the L2 prefetch sizes to try)
#   barrier:  tests/bench/bench_grid_barrier (what a phase boundary costs: PDL chain, plain chain,
#             grid.sync, a counter barrier)
#   suite:    the whole GPU suite (scripts/gpu-fold.sh tests suite)
#   rerun:    FILTER's GPU tests three times with their output
#   OUT=DIR bash scripts/gpu-persistent.sh [probe] [barrier] [suite] [rerun]   (default: the first three)
set -u
cd "$(dirname "$0")/.."
OUT=${OUT:-/tmp/out}; mkdir -p "$OUT"
[[ $# -eq 0 ]] && set -- probe barrier suite
for s in "$@"; do
  echo "==== $s $(date +%T)"
  case $s in
    probe)
      nvcc -I. -O3 -DNDEBUG -gencode=arch=compute_90a,code=sm_90a -std=c++17 \
        scripts/probe/persistent_layer.cu -o /tmp/persistent_layer || exit 1
      for c in ${CTXS:-512 0}; do CTX=$c timeout 200 /tmp/persistent_layer ${PF:-2048 4096 8192} 2>&1 | tee -a "$OUT/persistent_layer.txt"; done ;;
    barrier)
      LOG=/tmp/bgb.log bash scripts/device-ensure-built.sh bench_grid_barrier || exit 1
      bash scripts/device-build.sh bench_grid_barrier > /tmp/bgb2.log 2>&1 || { tail -20 /tmp/bgb2.log; exit 1; }
      timeout 120 build/gpu-machine/bench/bench_grid_barrier 2>&1 | tee "$OUT/grid_barrier.txt" ;;
    suite)
      OUT=$OUT bash scripts/gpu-fold.sh tests suite ;;
    rerun)  # the given tests (FILTER), three times, their output kept
      LOG=/tmp/rr.log bash scripts/device-ensure-built.sh lantern lantern_gpu_tests || exit 1
      bash scripts/device-build.sh lantern_gpu_tests > /tmp/rr2.log 2>&1 || { tail -20 /tmp/rr2.log; exit 1; }
      export LD_LIBRARY_PATH="$PWD/.device/pcre2/usr/lib/x86_64-linux-gnu:$PWD/.device/libs:${LD_LIBRARY_PATH:-}"
      for i in 1 2 3; do
        timeout 120 build/gpu-machine/tests/lantern_gpu_tests --gtest_filter="${FILTER:?}" 2>&1 | tail -40
      done | tee "$OUT/rerun.txt" | grep -vE "^\[ RUN|^$" | tail -60 ;;
    *) echo "gpu-persistent: no stage '$s'" >&2; exit 2 ;;
  esac
done
nvidia-smi --query-gpu=name,clocks.sm,clocks.mem,power.draw --format=csv
