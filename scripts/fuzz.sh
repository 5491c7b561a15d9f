#!/usr/bin/env bash
# libFuzzer targets (clang, ASan + UBSan): build, replay the regression
# inputs, then fuzz. Docs and recorded counts: docs/reliability.md.
#
#   scripts/fuzz.sh                       # CI: every target, FUZZ_SECONDS (5) each
#   scripts/fuzz.sh --runs 1000000 config # one target for N executions
#   FUZZ_SECONDS=60 scripts/fuzz.sh       # longer pass over every target
#   FUZZ_SEED=1 scripts/fuzz.sh           # libFuzzer's -seed (CI fixes it; default: a fresh one)
#   scripts/fuzz.sh --build-only          # build/fuzz/fuzz_* only (scripts/fuzz-device.sh)
#
# Targets: scripts/fuzz-targets.sh (each is build/fuzz/fuzz_NAME; seeds in
# tests/fuzz/corpus/NAME, crashers kept in tests/fuzz/regressions/NAME and
# replayed first). The working corpus
# grows in build/fuzz/corpus/NAME, never in the repository.
set -euo pipefail
cd "$(dirname "$0")/.."
ROOT="$PWD"
source scripts/fuzz-targets.sh
BUILD="$ROOT/build/fuzz"
RUNS=""
BUILD_ONLY=0
TARGETS=()
while (($#)); do
  case "$1" in
    --runs) RUNS="$2"; shift 2 ;;
    --build-only) BUILD_ONLY=1; shift ;;
    -h|--help) awk 'NR > 1 && !/^#/ {exit} NR > 1 {sub(/^# ?/, ""); print}' "$0"; exit 0 ;;
    *) TARGETS+=("$1"); shift ;;
  esac
done
((${#TARGETS[@]})) || TARGETS=("${FUZZ_TARGETS[@]}")
command -v clang++ >/dev/null || { echo "fuzz: clang++ not found: run scripts/setup.sh" >&2; exit 1; }

cmake -S tests/fuzz -B "$BUILD" -G Ninja -DCMAKE_CXX_COMPILER=clang++ \
      -DCMAKE_BUILD_TYPE=RelWithDebInfo >/dev/null
if ! cmake --build "$BUILD" -j "$(nproc)" >"$BUILD/build.log" 2>&1; then
  echo "fuzz: the fuzz targets did not build (whole log: $BUILD/build.log):" >&2
  grep -E "error|undefined reference|FAILED" "$BUILD/build.log" | head -20 >&2
  exit 1
fi
((BUILD_ONLY)) && exit 0

# Scratch files (each input is written out, as the readers take paths) in RAM when possible.
TMPDIR="${FUZZ_TMPDIR:-/dev/shm}"
[[ -d "$TMPDIR" && -w "$TMPDIR" ]] || TMPDIR=/tmp
export TMPDIR
for t in "${TARGETS[@]}"; do
  bin="$BUILD/fuzz_$t"
  [[ -x "$bin" ]] || { echo "fuzz: no target $t" >&2; exit 1; }
  reg="tests/fuzz/regressions/$t"
  if compgen -G "$reg/*" >/dev/null; then
    "$bin" -runs=0 "$reg"/* >/dev/null 2>&1 || { echo "fuzz: $t: a regression input fails again:" >&2; "$bin" "$reg"/*; exit 1; }
  fi
  work="$BUILD/corpus/$t"
  mkdir -p "$work"
  cp -n tests/fuzz/corpus/$t/* "$work"/ 2>/dev/null || true
  limit=(-max_total_time="${FUZZ_SECONDS:-5}")
  [[ -n "$RUNS" ]] && limit=(-runs="$RUNS")
  [[ -n "${FUZZ_SEED:-}" ]] && limit+=(-seed="$FUZZ_SEED")
  log="$BUILD/fuzz_$t.log"
  start=$(date +%s)
  if ! "$bin" "${limit[@]}" -max_len="${FUZZ_MAX_LEN[$t]}" -timeout=10 -rss_limit_mb=4096 \
       -print_final_stats=1 -artifact_prefix="$BUILD/crash-$t-" "$work" >"$log" 2>&1; then
    echo "fuzz: $t found a problem (input saved as $BUILD/crash-$t-*):" >&2
    grep -E "ERROR|SUMMARY|runtime error|bad error message|deadly" "$log" | head -20 >&2
    exit 1
  fi
  execs=$(grep -oE "stat::number_of_executed_units: *[0-9]+" "$log" | grep -oE "[0-9]+$")
  echo "fuzz: $t: $execs executions, no finding ($(( $(date +%s) - start )) s)"
done
