#!/usr/bin/env bash
# Builds the sampler phase probes (docs/performance.md, "sample.5 cluster_lean") on the
# development machine into build/probe: probe (sample.4) and probe_lean (sample.5), each
# a stamped copy of the kernel (stamp_sampler.py) linked against build/default's
# kernel libraries. Run them on the GPU machine: PROBE=build/probe bash scripts/gpu-sample5.sh
#   bash scripts/probe/build-sample-probes.sh   (after cmake --build --preset default)
set -eu
cd "$(dirname "$0")/../.."
B=build/default
OUTD=build/probe
mkdir -p "$OUTD"
python3 scripts/probe/stamp_sampler.py gather kernels/cuda/sample_gather.cu "$OUTD/stamped_gather.cu"
python3 scripts/probe/stamp_sampler.py lean kernels/cuda/sample_lean.cu "$OUTD/stamped_lean.cu"
cp scripts/probe/sample_phases.cu "$OUTD/"
LIBS="$B/kernels/liblantern_kernels.a $B/kernels/base/liblantern_base_cuda.a $B/kernels/base/liblantern_base.a"
FLAGS="-I. -I$B/generated -O3 -DNDEBUG -arch=sm_90 -lineinfo --expt-relaxed-constexpr -std=c++17"
nvcc $FLAGS "$OUTD/sample_phases.cu" -o "$OUTD/probe" $LIBS -lcublasLt -lcublas -lgomp
nvcc $FLAGS -DLEAN -DNB=16 "$OUTD/sample_phases.cu" -o "$OUTD/probe_lean" $LIBS -lcublasLt -lcublas -lgomp
echo "built $OUTD/probe and $OUTD/probe_lean"
