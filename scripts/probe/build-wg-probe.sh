#!/usr/bin/env bash
# Builds the gemm.8 phase probe (scripts/probe/wg_phases.cu; docs/performance.md, session 22)
# on the development machine into build/probe/wg_phases, linked against build/default's
# kernel libraries. Run it on the GPU machine: build/probe/wg_phases o/64 down/64 ...
#   bash scripts/probe/build-wg-probe.sh   (after cmake --build --preset default)
set -eu
cd "$(dirname "$0")/../.."
B=build/default
OUTD=build/probe
mkdir -p "$OUTD"
LIBS="$B/kernels/liblantern_kernels.a $B/kernels/base/liblantern_base_cuda.a $B/kernels/base/liblantern_base.a"
FLAGS="-I. -I$B/generated -O3 -DNDEBUG -gencode=arch=compute_90a,code=sm_90a -lineinfo --expt-relaxed-constexpr -std=c++17"
nvcc $FLAGS scripts/probe/wg_phases.cu -o "$OUTD/wg_phases" $LIBS -lcuda -lcublasLt -lcublas -lgomp
echo "built $OUTD/wg_phases"
