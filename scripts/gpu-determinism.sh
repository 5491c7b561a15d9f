#!/usr/bin/env bash
# Run-to-run determinism of the engine under several settings, ROUNDS times each: `lantern run
# experiments/default.json` (12 mixed requests: prefill, mixed and graph-replayed decode steps,
# greedy) then `lantern rerun --check` (GEMM plans pinned). For a differing pair it prints each
# differing request's first differing token index. Settings: SET=--set pairs separated by '|'
# (default: the defaults; proj_residual_norm=2; the same without CUDA graphs; the same with every
# request admitted at once; attention_decode=9).
#   LANTERN=... MODEL=models/llama-3.2-1b ROUNDS=4 bash scripts/gpu-determinism.sh OUT_DIR
set -u
cd "$(dirname "$0")/.."
source scripts/lib/gpu-bins.sh "$1"
SETS=${SETS:-"kernels.fusion=on|kernels.proj_residual_norm=2|kernels.proj_residual_norm=2,cuda_graphs=false|kernels.proj_residual_norm=2,limits.max_seqs=16,limits.max_batch_tokens=2048|kernels.attention_decode=9"}
IFS='|' read -ra SET_LIST <<<"$SETS"
for set in "${SET_LIST[@]}"; do
  args=()
  IFS=',' read -ra kv <<<"$set"
  for a in "${kv[@]}"; do args+=(--set "$a"); done
  tag=${set//[=,.]/_}
  same=0
  for round in $(seq 1 "${ROUNDS:-4}"); do
    d="$LOGS/run_${tag}_$round"
    step "run_${tag}_$round" 60 "$L" run experiments/default.json --set model.path="$M" --set model.preset=auto \
      "${args[@]}" --quiet --out "$d" || continue
    step "rerun_${tag}_$round" 60 "$L" rerun "$d" --check --quiet --out "$d-rerun"
    if grep -q "tokens    identical" "$LOGS/rerun_${tag}_$round.log"; then
      same=$((same + 1))
    else
      python3 - "$d" <<'PY'
import json, sys
a = {r["id"]: r["tokens"] for r in map(json.loads, open(sys.argv[1] + "/outputs.jsonl"))}
b = {r["id"]: r["tokens"] for r in map(json.loads, open(sys.argv[1] + "-rerun/outputs.jsonl"))}
for i in sorted(a):
    if a[i] != b.get(i):
        k = next((j for j, (x, y) in enumerate(zip(a[i], b[i])) if x != y), min(len(a[i]), len(b[i])))
        print(f"   request {i}: first differing token {k} of {len(a[i])}")
# Which kernels differ between the two runs (CUPTI-recorded steps): e.g. a GEMM plan not pinned.
import csv, collections
def kernels(d):
    out = collections.defaultdict(list)
    for r in csv.DictReader(open(d + "/kernels.csv")):
        out[int(r["step"])].append((r["op"], r["kernel"][:60]))
    return out
ka, kb = kernels(sys.argv[1]), kernels(sys.argv[1] + "-rerun")
shown = 0
for step in sorted(set(ka) & set(kb)):
    if ka[step] != kb[step] and shown < 3:
        shown += 1
        diff = [(x, y) for x, y in zip(ka[step], kb[step]) if x != y][:2]
        print(f"   step {step}: {len(ka[step])} vs {len(kb[step])} kernels; first differences {diff}")
if not shown:
    print(f"   the recorded steps ({len(set(ka) & set(kb))}) launched the same kernels")
PY
    fi
    rm -rf "$d" "$d-rerun"
  done
  echo "== $set: rerun identical in $same of ${ROUNDS:-4} rounds"
done
