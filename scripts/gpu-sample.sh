#!/usr/bin/env bash
# The performance helper's one-call check on the H200 (issue 14, session 2):
# the sampling tests (every sample variant against the CPU reference, ties,
# flat rows, chi-square), the sample/argmax kernel benchmark, then the decode
# step at batch 64 and 256 with lantern bench (per-op table). Logs under $OUT.
#   BIN_DIR=build/default bash scripts/gpu-sample.sh [tests kbench decode]
set -u
cd "$(dirname "$0")/.."
OUT="${OUT:-/tmp/lantern-sample-out}"
LOGS=/tmp/lantern-sample-logs
mkdir -p "$OUT" "$LOGS"
export LD_LIBRARY_PATH="$PWD/.device/pcre2/usr/lib/x86_64-linux-gnu:$PWD/.devlibs:${LD_LIBRARY_PATH:-}"
STAGES=" ${*:-tests kbench decode} "
has() { [[ $STAGES == *" $1 "* ]]; }
B=${BIN_DIR:-build/gpu-machine}
LANTERN=$B/bin/lantern TESTS=$B/tests/lantern_gpu_tests KBENCH=$B/bench/bench_kernels
MODEL=models/llama-3.2-1b
step() {  # step NAME LIMIT_S command...
  local name=$1 limit=$2; shift 2
  local t0=$(date +%s)
  timeout "$limit" "$@" >"$LOGS/$name.log" 2>&1
  local rc=$?
  echo "$name: rc=$rc $(( $(date +%s) - t0 ))s" | tee -a "$LOGS/summary.txt"
  return $rc
}
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.mem --format=csv >"$LOGS/gpu.txt" 2>&1
if has decode && [[ ! -f $MODEL/model.safetensors ]]; then
  (step synth 120 $LANTERN synth --preset llama-3.2-1b --out $MODEL --seed 0 --tokenizer-dir .device/llama3 &)
fi
has tests && step sample_tests 100 $TESTS --gtest_filter='SampleGpu.*:ArgmaxGpu.*'
has kbench && step kbench 60 $KBENCH --benchmark_filter='^(sample|argmax)'
if has decode; then
  for i in $(seq 60); do grep -q synth "$LOGS/summary.txt" 2>/dev/null && break; sleep 2; done
  for b in 64 256; do
    step bench_b$b 50 $LANTERN bench --model $MODEL --device cuda --batch $b --prompt-len 128 --decode-steps 128
  done
fi
echo "==== summary"; cat "$LOGS/summary.txt"; cat "$LOGS/gpu.txt"
grep -hE "^\[sample\]|tests ran|PASSED|FAILED|Failure|error|row [0-9]+:" "$LOGS"/sample_tests.log 2>/dev/null | head -60
[[ -f $LOGS/kbench.log ]] && grep -E "sample|argmax" "$LOGS/kbench.log" | grep -v "^\s*$" | head -60
for b in 64 256; do [[ -f $LOGS/bench_b$b.log ]] && { echo "== bench b=$b"; tail -45 "$LOGS/bench_b$b.log"; }; done
tar czf "$OUT/logs.tar.gz" -C /tmp lantern-sample-logs
