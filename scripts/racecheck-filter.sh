#!/usr/bin/env bash
# compute-sanitizer racecheck over a command, failing on any shared-memory hazard
# outside cuBLAS's own Hopper GEMM kernels (nvjet_*), which racecheck flags and
# we cannot change (docs/reliability.md, "compute-sanitizer"):
#   bash scripts/racecheck-filter.sh COMMAND [ARGS...]
# Exit 0: the command succeeded and every reported hazard is inside nvjet_*;
# 9: a hazard elsewhere; otherwise the command's or the sanitizer's status.
set -u
log=$(mktemp)
compute-sanitizer --tool racecheck "$@" 2>&1 | tee "$log"
rc=${PIPESTATUS[0]}
grep -q "Internal Sanitizer Error" "$log" && { echo "racecheck-filter: the sanitizer failed"; exit 2; }
[[ $rc -ne 0 ]] && { echo "racecheck-filter: the command exited $rc"; exit "$rc"; }
ours=$(grep -E "(Error|Warning): Race reported between|^=========     and .* access at " "$log" |
       grep -v " at nvjet_" || true)
vendor=$(grep -cE "(Error|Warning): Race reported between .* at nvjet_" "$log" || true)
echo "racecheck-filter: $vendor report(s) inside cuBLAS nvjet_* kernels (ignored)"
if [[ -n $ours ]]; then
  echo "racecheck-filter: hazards outside cuBLAS:"; echo "$ours"; exit 9
fi
echo "racecheck-filter: no hazard in any other kernel"
