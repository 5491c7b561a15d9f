#!/usr/bin/env bash
# Regenerates the screenshots of docs/viewer.md from a run directory:
#   scripts/viewer-screenshots.sh RUN_DIR [STEP] [OUT_DIR]
# renders every lantern-view panel at the cursor STEP (default: the step with
# the KV peak, from kv.json) into OUT_DIR (default docs/images) as
# viewer-PANEL.png, 1600x900, headless under xvfb-run (Mesa llvmpipe).
# Needs the default preset built (cmake --build --preset default --target lantern-view).
set -euo pipefail
cd "$(dirname "$0")/.."
RUN="${1:?usage: scripts/viewer-screenshots.sh RUN_DIR [STEP] [OUT_DIR]}"
STEP="${2:-}"
OUT="${3:-docs/images}"
VIEW=build/default/bin/lantern-view
[[ -x "$VIEW" ]] || { echo "viewer-screenshots: $VIEW not built: cmake --build --preset default --target lantern-view" >&2; exit 1; }
[[ -f "$RUN/manifest.json" ]] || { echo "viewer-screenshots: $RUN is not a run directory (no manifest.json)" >&2; exit 1; }
command -v xvfb-run >/dev/null || { echo "viewer-screenshots: xvfb-run missing: run scripts/setup.sh" >&2; exit 1; }
if [[ -z "$STEP" ]]; then
  STEP=$(python3 -c "import json,sys; print(max(0, json.load(open(sys.argv[1]))['peak_step']))" "$RUN/kv.json" 2>/dev/null || echo 0)
fi
mkdir -p "$OUT"
PANELS="memory lifetimes kv timeline kernels experiment"
xvfb-run -a -s "-screen 0 1920x1080x24 -noreset" bash -c "
  for p in $PANELS; do
    '$VIEW' --screenshot '$OUT/viewer-'\$p'.png' --panel \$p --step '$STEP' --size 1600x900 '$RUN' || exit 1
  done"
echo "viewer-screenshots: wrote $(for p in $PANELS; do printf '%s ' "$OUT/viewer-$p.png"; done)(step $STEP)"
