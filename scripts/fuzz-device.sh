#!/usr/bin/env bash
# Every libFuzzer target to >= 1,000,000 executions (ASan + UBSan) on a
# many-core machine (the GPU machine's 16 cores) in a few minutes: libFuzzer's
# parallel mode, J jobs of ceil(RUNS / J) executions each on J workers,
# sharing one growing corpus per target. Docs and counts: docs/reliability.md.
#
#   bash scripts/fuzz-device.sh --stage   # here: build (scripts/fuzz.sh), strip
#                                         # debug info, copy to build/fuzz-device/
#   bash scripts/fuzz-device.sh [--runs N] [--budget S] [--jobs J] [target...]
#                                         # there: binaries from build/fuzz-device/
#
# Defaults: --runs 1000000 per target, --jobs = the cores, --budget 420 s of
# wall time for all targets: each target in turn gets the budget left times
# its share of the cost left (measured costs below), so time a fast target
# does not use goes to the later ones; a target that needs more than its
# share stops short and is reported SHORT.
# Writes $OUT/fuzz-summary.txt (the table printed at the end), the libFuzzer
# logs to $OUT/fuzz-logs/NAME/ and any finding's input to $OUT/crashers/NAME/
# ($OUT defaults to build/fuzz-device/out). Exit 1: a finding (crash, leak,
# timeout, sanitizer report, a regression input failing again); 3: no finding
# but some target short of --runs; 0: every target clean at >= --runs.
set -uo pipefail
cd "$(dirname "$0")/.."
source scripts/fuzz-targets.sh
BIN="$PWD/build/fuzz-device"

if [[ ${1:-} == --stage ]]; then
  bash scripts/fuzz.sh --build-only || exit 1
  rm -rf "$BIN" && mkdir -p "$BIN"
  for t in "${FUZZ_TARGETS[@]}"; do strip --strip-debug -o "$BIN/fuzz_$t" "build/fuzz/fuzz_$t"; done
  du -sh "$BIN"
  exit 0
fi

RUNS=1000000
BUDGET=420
JOBS=$(nproc)
TARGETS=()
while (($#)); do
  case "$1" in
    --runs) RUNS=$2; shift 2 ;;
    --budget) BUDGET=$2; shift 2 ;;
    --jobs) JOBS=$2; shift 2 ;;
    -h|--help) awk 'NR > 1 && !/^#/ {exit} NR > 1 {sub(/^# ?/, ""); print}' "$0"; exit 0 ;;
    *) TARGETS+=("$1"); shift ;;
  esac
done
((${#TARGETS[@]})) || TARGETS=("${FUZZ_TARGETS[@]}")
OUT=${OUT:-$BIN/out}
mkdir -p "$OUT"

# Libraries the device image lacks (PCRE2), carried in .device/ like the
# GPU stages do (scripts/gpu-verify.sh); the encoding target's tokenizer.
export LD_LIBRARY_PATH="$PWD/.device/pcre2/usr/lib/x86_64-linux-gnu:$PWD/.device/libs:${LD_LIBRARY_PATH:-}"
if [[ -z ${LANTERN_FUZZ_TOKENIZER:-} && -f .device/llama3/tokenizer.json ]]; then
  export LANTERN_FUZZ_TOKENIZER="$PWD/.device/llama3"
fi
for t in "${TARGETS[@]}"; do
  [[ -x $BIN/fuzz_$t ]] || { echo "fuzz-device: no $BIN/fuzz_$t (run: bash scripts/fuzz-device.sh --stage here, carry build/fuzz-device)" >&2; exit 1; }
  if ldd "$BIN/fuzz_$t" | grep -q "not found"; then
    echo "fuzz-device: fuzz_$t misses libraries:" >&2
    ldd "$BIN/fuzz_$t" | grep "not found" >&2
    exit 1
  fi
done

# Relative single-core cost of 1M executions (seconds, measured on the helper
# machine, docs/reliability.md): how the wall-time budget is shared.
declare -A COST=([config]=716 [chat]=392 [safetensors]=1837 [tokenizer_encode]=585
                 [run_dir]=1033 [tokenizer_load]=3600 [experiment]=930)
cost_left=0
for t in "${TARGETS[@]}"; do cost_left=$((cost_left + ${COST[$t]:-1000})); done
budget_left=$BUDGET

WORK=$(mktemp -d /dev/shm/lantern-fuzz-device.XXXXXX 2>/dev/null || mktemp -d)
trap 'rm -rf "$WORK"' EXIT
export TMPDIR=$WORK/tmp  # the targets' scratch files (one folder per process)
mkdir -p "$TMPDIR"
per_job=$(((RUNS + JOBS - 1) / JOBS))
status=0
rows=()
for t in "${TARGETS[@]}"; do
  bin=$BIN/fuzz_$t
  share=$((budget_left * ${COST[$t]:-1000} / cost_left))
  ((share < 10)) && share=10
  cost_left=$((cost_left - ${COST[$t]:-1000}))
  corpus=$WORK/$t/corpus logs=$OUT/fuzz-logs/$t art=$WORK/$t/artifacts
  mkdir -p "$corpus" "$logs" "$art"
  cp tests/fuzz/corpus/"$t"/* "$corpus"/ 2>/dev/null
  seeds=$(ls "$corpus" | wc -l)
  finding=""
  if compgen -G "tests/fuzz/regressions/$t/*" >/dev/null &&
     ! "$bin" -runs=0 tests/fuzz/regressions/"$t"/* >"$logs/regressions.log" 2>&1; then
    finding="regression input fails again"
  fi
  start=$(date +%s)
  # Each job writes fuzz-N.log in the working directory.
  (cd "$logs" && "$bin" -jobs="$JOBS" -workers="$JOBS" -runs="$per_job" -max_total_time="$share" \
     -max_len="${FUZZ_MAX_LEN[$t]}" -timeout=10 -rss_limit_mb=4096 -print_final_stats=1 \
     -artifact_prefix="$art/" "$corpus" >parent.log 2>&1)
  parent_status=$?
  wall=$(($(date +%s) - start))
  budget_left=$((budget_left - wall))
  execs=$(cat "$logs"/fuzz-*.log 2>/dev/null |
          awk '/stat::number_of_executed_units:/ {s += $2} END {print s + 0}')
  # Slow units are reported, not findings; anything else libFuzzer saved is.
  found=$(find "$art" -type f ! -name 'slow-unit-*' | wc -l)
  if ((found)) || grep -lqE "ERROR: (libFuzzer|AddressSanitizer|LeakSanitizer)|runtime error:|bad error message|terminate called" "$logs"/*.log 2>/dev/null; then
    finding="${finding:+$finding; }$found input(s) saved, errors in fuzz-logs/$t"
  elif ((parent_status)); then
    finding="${finding:+$finding; }libFuzzer exited with status $parent_status (see fuzz-logs/$t)"
  fi
  if [[ -n $finding ]]; then
    mkdir -p "$OUT/crashers/$t"
    cp "$art"/* "$OUT/crashers/$t/" 2>/dev/null
    result="FINDING: $finding"
    status=1
  elif ((execs < RUNS)); then
    result="SHORT of $RUNS"
    ((status == 0)) && status=3
  else
    result="no finding"
  fi
  rows+=("$(printf '| %-16s | %12s | %6s -> %-6s | %5s s | %s |' "$t" \
            "$execs" "$seeds" "$(ls "$corpus" | wc -l)" "$wall" "$result")")
  echo "fuzz-device: $t: $execs executions in $wall s (budget $share s): $result" >&2
done

{
  echo "libFuzzer, ASan + UBSan, $JOBS jobs on $JOBS workers, $(nproc) cores ($(lscpu 2>/dev/null | sed -n 's/^Model name: *//p'))"
  echo "runs per target asked: $RUNS ($per_job per job); wall budget $BUDGET s; $(date -u +%FT%TZ)"
  echo
  echo "| target           |   executions | corpus seeds -> end | wall    | result |"
  echo "| ---------------- | ------------ | ------------------- | ------- | ------ |"
  printf '%s\n' "${rows[@]}"
} | tee "$OUT/fuzz-summary.txt"
exit $status
