# Sourced (from the repository root) by the one-call device scripts that build on the H200 from
# this tree (gpu-race.sh, gpu-where.sh, gpu-prune.sh, gpu-plans.sh, gpu-oproj-pin.sh,
# gpu-final27.sh, gpu-hooks-check.sh):
#   LOGS=/tmp/NAME-logs; TARGETS="lantern lantern_gpu_tests"; source scripts/lib/device-built.sh
# gives OUT (default /tmp/out) and LOGS, created (logs stay in LOGS: the device tool brings back at
# most 8 files from OUT); LD_LIBRARY_PATH with the carried PCRE2 and .device/libs; TARGETS built
# (scripts/device-ensure-built.sh, log $LOGS/build.log; the script exits when the build fails);
# L, T, KB (the CLI, the GPU tests, bench_kernels); M (MODEL, default the synthetic llama-3.2-1b,
# made when missing).
OUT=${OUT:-/tmp/out}; mkdir -p "$OUT"
LOGS=${LOGS:-/tmp/device-logs}; mkdir -p "$LOGS"
export LD_LIBRARY_PATH="$PWD/.device/pcre2/usr/lib/x86_64-linux-gnu:$PWD/.device/libs:${LD_LIBRARY_PATH:-}"
LOG="$LOGS/build.log" bash scripts/device-ensure-built.sh ${TARGETS:-lantern} || exit 1
L=build/default/bin/lantern; T=build/default/tests/lantern_gpu_tests; KB=build/default/bench/bench_kernels
M=${MODEL:-models/llama-3.2-1b}
[[ -f $M/model.safetensors ]] \
  || $L synth --preset llama-3.2-1b --out "$M" --seed 0 --tokenizer-dir .device/llama3 > "$LOGS/synth.log" 2>&1
