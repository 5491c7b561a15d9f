#!/usr/bin/env bash
# Builds the wg_flash prefill-attention phase probe (scripts/probe/af_phases.cu;
# docs/performance.md, session 29) into $B/../probe/af_phases, linked against $B's kernel
# libraries (B: a configured and built tree, default build/default; on the GPU machine
# build/gpu-machine after scripts/device-build.sh lantern_kernels).
#   B=build/gpu-machine bash scripts/probe/build-af-probe.sh && build/probe/af_phases 512/warm 512/chain
set -eu
cd "$(dirname "$0")/../.."
B=${B:-build/default}
OUTD=build/probe
mkdir -p "$OUTD"
LIBS="$B/kernels/liblantern_kernels.a $B/kernels/base/liblantern_base_cuda.a $B/kernels/base/liblantern_base.a"
FLAGS="-I. -I$B/generated -O3 -DNDEBUG -gencode=arch=compute_90a,code=sm_90a -lineinfo --expt-relaxed-constexpr -std=c++17"
nvcc $FLAGS scripts/probe/af_phases.cu -o "$OUTD/af_phases" $LIBS -lcuda -lcublasLt -lcublas -lgomp
echo "built $OUTD/af_phases"
