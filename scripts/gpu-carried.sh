#!/usr/bin/env bash
# Run scripts/gpu-verify.sh stages on the H200 with binaries built on the
# development machine (default preset, sm_90) instead of building there: the
# device tool carries build/default/{bin,tests,bench} (named in `carry`) and
# .device (PCRE2, the tokenizer files, libbenchmark from Debian in
# .device/libs). Saves the 2-4 minutes of device time a build costs.
#
#   bash scripts/gpu-carried.sh SOURCE_DIR stage...
#
# SOURCE_DIR is the checkout the binaries were built in (the tests have its
# path compiled in for their data and scratch directories); it is linked to
# this checkout on the device.
set -u
cd "$(dirname "$0")/.."
SRC=$1
shift
if [[ ! -e $SRC ]]; then
  mkdir -p "$(dirname "$SRC")"
  ln -s "$PWD" "$SRC"
fi
mkdir -p build/gpu-machine
for d in bin tests bench; do
  [[ -d build/gpu-machine/$d && ! -L build/gpu-machine/$d ]] && continue  # built here (gpu-issue14-verify.sh)
  [[ -e build/default/$d ]] && ln -sfn ../default/$d build/gpu-machine/$d
done
export LD_LIBRARY_PATH="$PWD/.device/libs:${LD_LIBRARY_PATH:-}"
source scripts/nccl-env.sh
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.mem --format=csv,noheader
exec bash scripts/gpu-verify.sh "$@"
