#!/usr/bin/env bash
# Build on the H200 machine (run from the repo root there; .device carried).
# Usage: scripts/device-build.sh [targets...]   (default: everything)
set -euo pipefail
cd "$(dirname "$0")/.."
export LD_LIBRARY_PATH="$PWD/.device/pcre2/usr/lib/x86_64-linux-gnu:${LD_LIBRARY_PATH:-}"
cmake --preset gpu-machine -DLANTERN_PCRE2_ROOT="$PWD/.device/pcre2" >/tmp/lantern-cmake.log 2>&1 \
  || { cat /tmp/lantern-cmake.log; exit 1; }
cmake --build --preset gpu-machine -j "$(nproc)" ${1:+--target "$@"}
