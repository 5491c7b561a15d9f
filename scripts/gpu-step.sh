# Sourced by the GPU scripts (gpu-steps.sh, gpu-kern.sh, scripts/lib/gpu-preamble.sh, gpu-tp.sh): one timed,
# logged step with one summary line. Needs LOGS; BUDGET_S (optional) stops starting steps after
# that many seconds of the script and shortens a step's limit to what is left (device time is scarce).
#   step NAME LIMIT_S command...     -> $LOGS/NAME.log, "NAME: rc=R Ns" in $LOGS/summary.txt
step() {
  local name=$1 limit=$2; shift 2
  if [[ -n ${BUDGET_S:-} ]]; then
    local left=$(( BUDGET_S - SECONDS ))
    if (( left < 5 )); then echo "$name: skipped (budget)" | tee -a "$LOGS/summary.txt"; return 1; fi
    (( limit > left )) && limit=$left
  fi
  local t0=$(date +%s)
  timeout "$limit" "$@" >"$LOGS/$name.log" 2>&1
  local rc=$?
  echo "$name: rc=$rc $(( $(date +%s) - t0 ))s" | tee -a "$LOGS/summary.txt"
  return $rc
}
