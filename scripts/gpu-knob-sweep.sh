#!/usr/bin/env bash
# Several kernel or knob settings of `lantern bench` interleaved round by round, in one call of the
# device tool, building on the GPU machine from this tree (scripts/lib/device-built.sh). Where
# scripts/gpu-ab.sh compares two settings, this sweeps any number at one bench point and prints
# every run's decode step, SM clock and throttle state, then each setting's median:
#   OUT=DIR [ROUNDS=2] [BENCH="--batch 1 --prompt-len 32768 --decode-steps 32"] \
#     bash scripts/gpu-knob-sweep.sh SETTING [SETTING ...]
# A SETTING is comma-separated: NAME=VALUE with an upper-case NAME is an environment variable
# (LANTERN_TMA_STAGES=2), anything else a --kernels entry (attention_decode=19); "-" = defaults.
#   e.g. OUT=$OUT bash scripts/gpu-knob-sweep.sh - LANTERN_SMALL_BATCH_CARVEOUT=off
set -u
cd "$(dirname "$0")/.."
[[ $# -ge 1 && $1 != -h && $1 != --help ]] || { sed -n '2,10p' "$0" | sed 's/^# \{0,1\}//'; exit 0; }
LOGS=/tmp/knob-sweep-logs; TARGETS="lantern"; source scripts/lib/device-built.sh
read -ra BARGS <<< "${BENCH:---batch 1 --prompt-len 32768 --decode-steps 32}"
# A warm-up run whose GEMM plans every run then pins (--gemm-plans).
timeout 200 $L bench --model "$M" --device cuda "${BARGS[@]}" --quiet --json "$LOGS/plans.json" \
  > "$LOGS/warm.log" 2>&1 || echo "knob-sweep: warm-up failed (plans not pinned)"
declare -A RES
for r in $(seq "${ROUNDS:-2}"); do
  for side in "$@"; do
    envs=(); kernels=""
    IFS=, read -ra toks <<< "$side"
    for tok in "${toks[@]}"; do
      [[ $tok == - || -z $tok ]] && continue
      if [[ $tok =~ ^[A-Z_][A-Z0-9_]*= ]]; then envs+=("$tok"); else kernels+="${kernels:+,}$tok"; fi
    done
    args=(--model "$M" --device cuda "${BARGS[@]}")
    [[ -n $kernels ]] && args+=(--kernels "$kernels")
    [[ -f $LOGS/plans.json ]] && args+=(--gemm-plans "$LOGS/plans.json")
    log="$LOGS/run-$(echo "$side" | tr -c 'A-Za-z0-9_=\n' '_')-$r.log"
    env "${envs[@]}" timeout 200 $L bench "${args[@]}" > "$log" 2>&1
    rc=$?
    step=$(grep -m1 -E "^ +decode step" "$log" | awk '{print $3}')
    clk=$(grep -m1 -E "GPU clocks" "$log" | sed -E 's/ +/ /g; s/^ //' | cut -c1-90)
    printf "round %s  %-70s rc=%s  step %s ms  %s\n" "$r" "$side" "$rc" "${step:-?}" "$clk"
    RES[$side]+="${step:-nan} "
  done
done
echo "medians (ms per decode step; ${BARGS[*]}):"
for side in "$@"; do
  printf "  %-70s %s   [%s]\n" "$side" "$(python3 -c "import statistics,sys; v=[float(x) for x in sys.argv[1:] if x!='nan']; print('%.3f' % statistics.median(v) if v else '?')" ${RES[$side]})" "${RES[$side]}"
done
