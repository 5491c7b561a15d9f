# Sourced (from the repository root) by the one-call GPU checks that run
# binaries built elsewhere (scripts/gpu-fuse.sh, scripts/gpu-fuse1.sh): the
# set-up they share.
#
#   GPU_NAME=fuse1 GPU_SRC_DEFAULT=/work/wt-fuse1 GPU_BUDGET_DEFAULT=170
#   source scripts/lib/gpu-preamble.sh
#
# gives OUT (default /tmp/lantern-$GPU_NAME-out) and LOGS=$OUT/logs;
# LD_LIBRARY_PATH with the carried PCRE2 and .device/libs; B, the binaries'
# folder: BIN_DIR, else build/carry (stripped copies carried by the device
# tool) when present, else build/default; LANTERN and TESTS in it; SRC (SRC_DIR,
# default GPU_SRC_DEFAULT: the checkout the binaries were built in, whose path
# the tests have compiled in) linked to this checkout when missing, and
# build/default/bin linked to $B/bin (NEEDS_CLI tests run
# build/default/bin/lantern); MODEL; BUDGET_S (default GPU_BUDGET_DEFAULT);
# `step NAME LIMIT_S command...` (scripts/gpu-step.sh); $LOGS/gpu.txt
# (nvidia-smi); `synth_model_in_background [LIMIT_S]` (synthesises MODEL
# unless present, SYNTH its pid) and `wait_synth`.
OUT="${OUT:-/tmp/lantern-$GPU_NAME-out}"
LOGS=$OUT/logs
mkdir -p "$LOGS"
export LD_LIBRARY_PATH="$PWD/.device/pcre2/usr/lib/x86_64-linux-gnu:$PWD/.device/libs:${LD_LIBRARY_PATH:-}"
B=${BIN_DIR:-build/default}
[[ -z ${BIN_DIR:-} && -d build/carry ]] && B=build/carry
SRC=${SRC_DIR:-$GPU_SRC_DEFAULT}
if [[ ! -e $SRC ]]; then mkdir -p "$(dirname "$SRC")" && ln -s "$PWD" "$SRC"; fi
mkdir -p build/default
[[ -e build/default/bin ]] || ln -s "$PWD/$B/bin" build/default/bin  # NEEDS_CLI tests run build/default/bin/lantern
LANTERN=$B/bin/lantern TESTS=$B/tests/lantern_gpu_tests
MODEL=models/llama-3.2-1b
BUDGET_S=${BUDGET_S:-$GPU_BUDGET_DEFAULT}  # stop starting steps after this many seconds (device time is scarce)

source scripts/gpu-step.sh  # step NAME LIMIT_S command...

nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.mem --format=csv >"$LOGS/gpu.txt" 2>&1

SYNTH=
synth_model_in_background() {  # [LIMIT_S]: the synthetic llama-3.2-1b unless MODEL holds one
  [[ -f $MODEL/model.safetensors ]] && return 0
  step synth "${1:-150}" $LANTERN synth --preset llama-3.2-1b --out $MODEL --seed 0 --tokenizer-dir .device/llama3 &
  SYNTH=$!
}
wait_synth() { if [[ -n $SYNTH ]]; then wait $SYNTH; fi; }
