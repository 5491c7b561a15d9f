#!/usr/bin/env bash
# Builds a phase probe (scripts/probe/NAME.cu: wg_phases for gemm.8, af_phases for the
# wg_flash prefill attention; docs/performance.md, sessions 22 and 29) into build/probe/NAME,
# linked against $B's kernel libraries (B: a configured and built tree, default
# build/default; on the GPU machine build/gpu-machine after scripts/device-build.sh lantern_kernels).
#   bash scripts/probe/build-probe.sh wg_phases      (after cmake --build --preset default)
#   B=build/gpu-machine bash scripts/probe/build-probe.sh af_phases
set -eu
cd "$(dirname "$0")/../.."
NAME=${1:?usage: build-probe.sh wg_phases|af_phases}
[[ -f scripts/probe/$NAME.cu ]] || { echo "build-probe.sh: no scripts/probe/$NAME.cu" >&2; exit 2; }
B=${B:-build/default}
OUTD=build/probe
mkdir -p "$OUTD"
LIBS="$B/kernels/liblantern_kernels.a $B/kernels/base/liblantern_base_cuda.a $B/kernels/base/liblantern_base.a"
FLAGS="-I. -I$B/generated -O3 -DNDEBUG -gencode=arch=compute_90a,code=sm_90a -lineinfo --expt-relaxed-constexpr -std=c++17"
nvcc $FLAGS "scripts/probe/$NAME.cu" -o "$OUTD/$NAME" $LIBS -lcuda -lcublasLt -lcublas -lgomp
echo "built $OUTD/$NAME"
