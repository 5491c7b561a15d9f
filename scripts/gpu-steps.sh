# Sourced by the performance helpers' one-call checks on the H200
# (scripts/gpu-perf.sh, scripts/gpu-sample.sh): the set-up both share.
#
#   GPU_STEPS_NAME=perf GPU_STEPS_DEFAULT="tests bench"
#   source scripts/gpu-steps.sh "$@"
#
# gives OUT (default /tmp/lantern-NAME-out), LOGS (/tmp/lantern-NAME-logs, the
# caller tars it into $OUT), LD_LIBRARY_PATH with the carried PCRE2 and
# .devlibs, `has STAGE` (the stages asked for, else GPU_STEPS_DEFAULT), the
# binaries LANTERN / TESTS / KBENCH from B (BIN_DIR, default
# build/gpu-machine), MODEL, `step NAME LIMIT_S command...` (a timed,
# logged step with one summary line) and $LOGS/gpu.txt (nvidia-smi).
OUT="${OUT:-/tmp/lantern-$GPU_STEPS_NAME-out}"
LOGS=/tmp/lantern-$GPU_STEPS_NAME-logs  # the tool returns few files: tarred at the end
mkdir -p "$OUT" "$LOGS"
export LD_LIBRARY_PATH="$PWD/.device/pcre2/usr/lib/x86_64-linux-gnu:$PWD/.devlibs:${LD_LIBRARY_PATH:-}"
STAGES=" ${*:-$GPU_STEPS_DEFAULT} "
has() { [[ $STAGES == *" $1 "* ]]; }
B=${BIN_DIR:-build/gpu-machine}
LANTERN=$B/bin/lantern TESTS=$B/tests/lantern_gpu_tests KBENCH=$B/bench/bench_kernels
MODEL=models/llama-3.2-1b

source scripts/gpu-step.sh  # step NAME LIMIT_S command...

nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.mem --format=csv >"$LOGS/gpu.txt" 2>&1
