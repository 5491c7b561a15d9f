#!/usr/bin/env bash
# The main job on a fresh machine: set up, build and run experiments/default.json
# (docs/experiments.md): a short mixed workload, recorded to runs/. Without a GPU
# it runs the CPU reference backend on the tiny synthetic model, with one CUDA on
# the llama-3.2-1b synthetic model (synthesised into models/ on first use). It
# ends by printing the run directory, the top kernels, the alias and KV summary
# and the commands to look further.
# Extra arguments go to `lantern run`, e.g. --set device=cpu or --set repetitions=3.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
PRESET="${LANTERN_PRESET:-default}"
cmake --preset "$PRESET" >/dev/null
cmake --build --preset "$PRESET" -j "$(nproc)" --target lantern
BIN="build/$PRESET/bin/lantern"
echo "== lantern run experiments/default.json =="
exec "$BIN" run experiments/default.json "$@"
