#!/usr/bin/env bash
# An interleaved A/B of `lantern bench` between two kernel or knob settings,
# in one call of the device tool, building on the H200 from the working tree
# when no binary is there (scripts/device-build.sh: ~1 minute of device time,
# less than building here and carrying the binaries):
#
#   OUT=... bash scripts/gpu-ab.sh [-r ROUNDS] [--no-pin] A B [bench args...]
#
# A, B: comma-separated settings. NAME=VALUE with an upper-case NAME is an
# environment variable (LANTERN_TMA_STAGES=4), anything else a --kernels entry
# (attention_decode=19); "-" runs the defaults. Bench args default to
# --batch 1 --prompt-len 128 --decode-steps 128; --model and --device cuda
# are added. The GEMM plans are timed once in a warm-up run and pinned
# (--gemm-plans) for every A/B process unless --no-pin. Each run writes
# $OUT/ab-<side>-<round>.json; the table at the end (scripts/ab_table.py) has
# every round's decode step and prefill per (batch, prompt) point, and the
# medians of B - A.
#   e.g. OUT=$OUT bash scripts/gpu-ab.sh -r 3 attention_decode=19 - --batch 1,64 --prompt-len 128
# Works on the CPU backend too (LANTERN, MODEL and DEVICE=cpu set; a tiny model), for trying it.
set -u
cd "$(dirname "$0")/.."
OUT=${OUT:-/tmp/lantern-ab}; mkdir -p "$OUT"
ROUNDS=2; PIN=1
while [[ $# -gt 0 ]]; do
  case $1 in
    -r) ROUNDS=$2; shift 2 ;;
    --no-pin) PIN=0; shift ;;
    -h|--help) sed -n '2,21p' "$0" | sed 's/^# \{0,1\}//'; exit 0 ;;
    *) break ;;
  esac
done
[[ $# -ge 2 ]] || { echo "gpu-ab: expected two settings A and B (try --help)" >&2; exit 2; }
SIDE_A=$1 SIDE_B=$2; shift 2
BENCH_ARGS=("$@"); [[ ${#BENCH_ARGS[@]} -eq 0 ]] && BENCH_ARGS=(--batch 1 --prompt-len 128 --decode-steps 128)
DEVICE=${DEVICE:-cuda}
M=${MODEL:-models/llama-3.2-1b}
export LD_LIBRARY_PATH="$PWD/.device/pcre2/usr/lib/x86_64-linux-gnu:$PWD/.device/libs:${LD_LIBRARY_PATH:-}"
L=${LANTERN:-}
if [[ -z $L ]]; then
  for c in build/default/bin/lantern build/gpu-machine/bin/lantern; do [[ -x $c ]] && { L=$c; break; }; done
fi
if [[ -z $L ]]; then
  t0=$(date +%s)
  bash scripts/device-build.sh lantern > "$OUT/build.log" 2>&1 || { tail -20 "$OUT/build.log"; exit 1; }
  echo "gpu-ab: built lantern on this machine in $(( $(date +%s) - t0 )) s" >&2
  L=build/gpu-machine/bin/lantern
fi
if [[ ! -f $M/model.safetensors ]]; then
  "$L" synth --preset llama-3.2-1b --out "$M" --seed 0 --tokenizer-dir .device/llama3 > "$OUT/synth.log" 2>&1 \
    || { tail -5 "$OUT/synth.log"; exit 1; }
fi

# run SIDE NAME ROUND: one bench process with SIDE's settings.
run() {
  local side=$1 name=$2 round=$3 kernels="" envs=() tok
  IFS=, read -ra toks <<< "$side"
  for tok in "${toks[@]}"; do
    [[ $tok == - || -z $tok ]] && continue
    if [[ $tok =~ ^[A-Z_][A-Z0-9_]*= ]]; then envs+=("$tok"); else kernels+="${kernels:+,}$tok"; fi
  done
  local args=(--model "$M" --device "$DEVICE" "${BENCH_ARGS[@]}" --quiet --json "$OUT/ab-$name-$round.json")
  [[ -n $kernels ]] && args+=(--kernels "$kernels")
  [[ $PIN == 1 && -f $OUT/ab-plans.json ]] && args+=(--gemm-plans "$OUT/ab-plans.json")
  env "${envs[@]}" timeout "${AB_LIMIT_S:-200}" "$L" bench "${args[@]}" > "$OUT/ab-$name-$round.log" 2>&1
  local rc=$?
  echo "gpu-ab: $name ($side) round $round rc=$rc" >&2
  return $rc
}
if [[ $PIN == 1 && $DEVICE == cuda ]]; then
  timeout "${AB_LIMIT_S:-200}" "$L" bench --model "$M" --device cuda "${BENCH_ARGS[@]}" --quiet \
    --json "$OUT/ab-plans.json" > "$OUT/ab-warm.log" 2>&1 || echo "gpu-ab: the warm-up run failed (plans not pinned)" >&2
fi
for r in $(seq "$ROUNDS"); do  # interleaved: A then B in each round
  run "$SIDE_A" A "$r"
  run "$SIDE_B" B "$r"
done
python3 scripts/ab_table.py "$OUT" "$SIDE_A" "$SIDE_B"
