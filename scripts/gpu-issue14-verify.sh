#!/usr/bin/env bash
# After a kernel change, in one call of the device tool with binaries carried from the development
# machine (build/default/{bin,tests,bench}): the correctness issue 14 pins (every GPU test, HF fp32
# and bf16 comparisons, batch consistency, a recorded mixed run, run + rerun --check, the harness
# overhead) and its goal table (scripts/gpu-issue14.sh), with one summary on stdout.
#   bash scripts/gpu-issue14-verify.sh [SOURCE_DIR]    (SOURCE_DIR: where the binaries were built)
# Without carried binaries (no build/default/bin/lantern) it first builds them on the H200 from
# this tree (scripts/device-build.sh, ~1 minute; session 25) and SOURCE_DIR defaults to here.
set -u
cd "$(dirname "$0")/.."
SRC=${1:-$PWD}
export OUT=${OUT:-/tmp/lantern-out}
mkdir -p "$OUT"
LOG="$OUT/build.log" bash scripts/device-ensure-built.sh lantern lantern_gpu_tests bench_kernels bench_harness_overhead \
  || exit 1
bash scripts/gpu-carried.sh "$SRC" synth gputests hf_bf16 hf_fp32 batch > "$OUT/verify1.txt" 2>&1
grep -E "^[a-z_0-9]+: rc=|PASS|FAIL|passed|failed|ratio|top-1|Failure|Expected|actual" "$OUT/verify1.txt" | head -40
LANTERN=build/default/bin/lantern KBENCH=build/default/bench/bench_kernels bash scripts/gpu-issue14.sh /tmp/issue14 \
  > "$OUT/issue14.txt" 2>&1
sed -n '/^lantern bench/,$p' "$OUT/issue14.txt" | grep -vE "^ +(prefill|decode tokens|host per)" | head -70
tar czf "$OUT/issue14.tar.gz" -C /tmp issue14
bash scripts/gpu-carried.sh "$SRC" record exprerun overhead > "$OUT/verify2.txt" 2>&1
grep -E "^[a-z_0-9]+: rc=|unattributed|problems|violations|identical|overhead|%" "$OUT/verify2.txt" | head -40
