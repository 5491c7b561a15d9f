#!/usr/bin/env bash
# Set up the machine, build the default preset, run every test (GPU tests skip
# with a reason when no GPU is present).
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
PRESET="${LANTERN_PRESET:-default}"
cmake --preset "$PRESET" >/dev/null
cmake --build --preset "$PRESET" -j "$(nproc)"
ctest --preset "$PRESET" -j "$(nproc)"
