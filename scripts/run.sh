#!/usr/bin/env bash
# The main job on a fresh machine: set up, build, synthesise a model and
# generate from it. On a machine without a GPU this runs the CPU reference
# backend on the tiny model; with a GPU it runs CUDA on llama-3.2-1b.
# Override with LANTERN_PRESET_MODEL=tiny|llama-3.2-1b|... and LANTERN_DEVICE=cpu|cuda.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
PRESET="${LANTERN_PRESET:-default}"
cmake --preset "$PRESET" >/dev/null
cmake --build --preset "$PRESET" -j "$(nproc)" --target lantern
BIN="build/$PRESET/bin/lantern"

if [[ -n "${LANTERN_DEVICE:-}" ]]; then DEVICE="$LANTERN_DEVICE"
elif command -v nvidia-smi >/dev/null && nvidia-smi -L >/dev/null 2>&1; then DEVICE=cuda
else DEVICE=cpu; fi
MODEL_PRESET="${LANTERN_PRESET_MODEL:-$([[ $DEVICE == cuda ]] && echo llama-3.2-1b || echo tiny)}"
MODEL_DIR="models/$MODEL_PRESET"
if [[ ! -f "$MODEL_DIR/model.safetensors" ]]; then
  "$BIN" synth --preset "$MODEL_PRESET" --out "$MODEL_DIR" --seed 0
fi
echo "== lantern generate on $DEVICE with $MODEL_DIR =="
exec "$BIN" generate --model "$MODEL_DIR" --device "$DEVICE" --prompt-ids 128000,9906,11,1268,527,499,30 \
  --max-new-tokens 32 "$@"
