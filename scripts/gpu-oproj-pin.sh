#!/usr/bin/env bash
# Is the 512-row prefill's spread between processes the o_proj plan, and does PDL cause it? (issue
# 14, session 27). Builds on the H200; one bench process writes its plans (--json); two files pin
# every plan to that process's except o_proj at m <= 512 (n 2048, k 2048): tile 17 (64x128, 2x1x1
# clusters) or tile 18 (128x64, 1x2x1), the two picks the four-process calls saw; each runs with
# programmatic dependent launch on and off (LANTERN_PDL=0), two rounds, interleaved.
#   OUT=DIR bash scripts/gpu-oproj-pin.sh
set -u
cd "$(dirname "$0")/.."
LOGS=/tmp/pin-logs; TARGETS="lantern"; source scripts/lib/device-built.sh
ARGS=(--model "$M" --device cuda --batch 1 --prompt-len 512,512,512 --decode-steps 2)
$L bench "${ARGS[@]}" --json "$LOGS/base.json" > "$LOGS/base.txt" 2>&1
echo "base process: $(grep -E '^ +1 +512 \|' "$LOGS/base.txt" | awk '{print $4}' | tr '\n' ' ')"
python3 - "$LOGS" <<'PY'
import json, sys
d = sys.argv[1]
base = json.load(open(f"{d}/base.json"))
for name, cfg in {"t17": dict(tile=17, custom=0, cluster=3), "t18": dict(tile=18, custom=3, cluster=5)}.items():
    plans = []
    for p in base["gemm_plans"]:
        p = dict(p)
        if p["m_bucket"] == 512 and p["n"] == 2048 and p["k"] == 2048 and p["out"] == "bf16":
            p.update(cfg, algo_id=66, stages=35, split_k=1, reduction=0, swizzle=0, workspace=0)
        plans.append(p)
    json.dump({"gemm_plans": plans}, open(f"{d}/{name}.json", "w"))
PY
for r in 1 2; do
  for pdl in 1 0; do
    for t in t17 t18; do
      LANTERN_PDL=$pdl $L bench "${ARGS[@]}" --gemm-plans "$LOGS/$t.json" --verbose > "$LOGS/$t-$pdl-$r.txt" 2>&1
      echo "o_proj $t PDL=$pdl round $r: prefill ms $(grep -E '^ +1 +512 \|' "$LOGS/$t-$pdl-$r.txt" | awk '{print $4}' | tr '\n' ' ') $(grep -E 'm<=512  n=2048   k=2048' "$LOGS/$t-$pdl-$r.txt" | sed -E 's/.*(tile [0-9]+).*(cluster [0-9]+).*\| (pinned )?/\1 \2 /' | cut -c1-40)"
    done
  done
done
