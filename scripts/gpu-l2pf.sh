#!/usr/bin/env bash
# The GEMV L2-prefetch knob (issue 14, session 36) on the GPU machine in one call of the device
# tool: LANTERN_GEMV_L2_PREFETCH=1 makes the multi-group skinny GEMVs (down_proj's k = 8192 at
# m <= 16) prefetch their rows past the two register groups into L2 before the PDL wait.
#   tests: the GEMV and engine GPU tests with the knob on (results must not change)
#   ab:    interleaved lantern bench A/B, knob off vs on (BATCHES, default 1,8; ROUNDS, default 3)
#   OUT=DIR bash scripts/gpu-l2pf.sh [tests] [ab]   (default: both)
set -u
cd "$(dirname "$0")/.."
OUT=${OUT:-/tmp/out}; mkdir -p "$OUT"
[[ $# -eq 0 ]] && set -- tests ab
LOG=$OUT/build.log bash scripts/device-ensure-built.sh lantern lantern_gpu_tests || exit 1
export LD_LIBRARY_PATH="$PWD/.device/pcre2/usr/lib/x86_64-linux-gnu:$PWD/.device/libs:${LD_LIBRARY_PATH:-}"
for s in "$@"; do
  echo "==== $s $(date +%T)"
  case $s in
    tests)
      LANTERN_GEMV_L2_PREFETCH=1 timeout 300 build/default/tests/lantern_gpu_tests \
        --gtest_filter='GemmGpu.*:ProjResidualNormGpu.*:GateUpSwigluGpu.*:DeferredNormGpu.*:EngineGpu.*' \
        > "$OUT/l2pf_tests.txt" 2>&1
      echo "tests (knob on) rc=$?"; grep -E "^\[  (PASSED|FAILED|SKIPPED) |Failure|Expected" "$OUT/l2pf_tests.txt" | head -20 ;;
    ab)
      OUT=$OUT bash scripts/gpu-ab.sh -r "${ROUNDS:-3}" - LANTERN_GEMV_L2_PREFETCH=1 \
        --batch "${BATCHES:-1,8}" --prompt-len 128 --decode-steps 128 2>&1 | tail -25 ;;
    *) echo "gpu-l2pf: no stage '$s'" >&2; exit 2 ;;
  esac
done
nvidia-smi --query-gpu=name,clocks.sm,clocks.mem --format=csv
