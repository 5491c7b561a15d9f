# Sourced (from the repository root) by the one-call GPU checks that take an output folder
# (gpu-early.sh, gpu-rerun-check.sh, gpu-fuse2.sh, gpu-determinism.sh):
#   source scripts/lib/gpu-bins.sh "$1"
# gives L (LANTERN, default build/default/bin/lantern), T (TESTS: lantern_gpu_tests), M (MODEL,
# default models/llama-3.2-1b), LOGS (the folder, created) and `step` (scripts/gpu-step.sh).
L=${LANTERN:-build/default/bin/lantern}
T=${TESTS:-build/default/tests/lantern_gpu_tests}
M=${MODEL:-models/llama-3.2-1b}
LOGS=$1
mkdir -p "$LOGS"
source scripts/gpu-step.sh
