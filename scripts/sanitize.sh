#!/usr/bin/env bash
# Sanitizer stages of CI (scripts/test.sh runs them after the normal build;
# docs/reliability.md says what each covers and what it costs).
#
#   asan  ASan + UBSan build (preset asan) of the host test suite and the CLI
#         it drives; every CPU test must pass with no sanitizer report
#   tsan  ThreadSanitizer build (preset tsan) of the engine's thread tests
#         (lantern_thread_tests); 0 reports
#   fuzz  FUZZ_SECONDS (default 5) of every libFuzzer target (scripts/fuzz.sh)
#
#   scripts/sanitize.sh              # all three
#   scripts/sanitize.sh tsan fuzz    # some
# CUDA objects are built exactly as in the default preset, so with ccache the
# sanitizer builds recompile only host code. SANITIZE_DROP_TREES=1 (CI) removes
# build/asan and build/tsan once their stage passed, to keep the disk free.
set -euo pipefail
cd "$(dirname "$0")/.."
STAGES=("$@")
((${#STAGES[@]})) || STAGES=(asan tsan fuzz)
JOBS="$(nproc)"
SUPP="$PWD/tests/sanitize/lsan.supp"

stage_asan() {
  cmake --preset asan >/dev/null
  cmake --build --preset asan -j "$JOBS" --target lantern lantern_kernel_tests lantern_engine_tests \
    lantern_scheduler_tests lantern_runfmt_tests lantern_harness_tests lantern_viz_tests
  ASAN_OPTIONS="detect_leaks=1:halt_on_error=1:protect_shadow_gap=0" \
  LSAN_OPTIONS="suppressions=$SUPP:print_suppressions=0" \
  UBSAN_OPTIONS="print_stacktrace=1:halt_on_error=1" \
    ctest --preset asan -L cpu -j "$JOBS" --timeout 600
}

stage_tsan() {
  cmake --preset tsan >/dev/null
  cmake --build --preset tsan -j "$JOBS" --target lantern_thread_tests
  TSAN_OPTIONS="halt_on_error=1:second_deadlock_stack=1" \
    build/tsan/tests/lantern_thread_tests --gtest_filter='EngineStress.SubmitIdle*:EngineStress.WorkloadOfFour*'
}

stage_fuzz() {
  FUZZ_SECONDS="${FUZZ_SECONDS:-5}" bash scripts/fuzz.sh
}

for s in "${STAGES[@]}"; do
  start=$(date +%s)
  echo "sanitize: stage $s"
  "stage_$s"
  echo "sanitize: stage $s passed in $(( $(date +%s) - start )) s" \
       "(build trees: $(du -sh build/* 2>/dev/null | awk '{printf "%s %s  ", $2, $1}'))"
  if [[ "${SANITIZE_DROP_TREES:-0}" == 1 && -d "build/$s" && "$s" != fuzz ]]; then
    rm -rf "build/$s"
  fi
done
