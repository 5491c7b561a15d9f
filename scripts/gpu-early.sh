#!/usr/bin/env bash
# The early-load kernels (attention_decode.9 split_k_early, rope_kv_write.2 vec_early: loads that
# need no earlier kernel issued before the PDL wait) against the defaults on the H200, in one call:
# their kernel tests and the engine's early-load test, `lantern bench` at batch 1/8/64/256 for
# each kernel set interleaved (ROUNDS rounds), batch 1 at 32 k context, token identity of
# attention_decode 9 against 6 at batch 20 (the pipe kernels, same arithmetic; gemm.5 in both, as
# gemm.6 times its plans per process) and against 5 at batch 4, and the critical path
# (scripts/critical_path.py) of a recorded batch-1 run.
#   LANTERN=... TESTS=... MODEL=models/llama-3.2-1b ROUNDS=2 bash scripts/gpu-early.sh OUT_DIR
set -u
cd "$(dirname "$0")/.."
source scripts/lib/gpu-bins.sh "$1"
step tests 240 "$T" --gtest_filter='AttentionDecodeGpu.*:RopeKvWriteGpu.*:EngineGpu.EarlyLoad*'
grep -E "^\[  (PASSED|FAILED) |^\[  FAILED|engine-gpu\] attention" "$LOGS/tests.log" | head -20
SETS=${SETS:-"attention_decode=8,rope_kv_write=1 attention_decode=9,rope_kv_write=1 attention_decode=9,rope_kv_write=2"}
for round in $(seq 1 "${ROUNDS:-2}"); do
  for k in $SETS; do
    name="bench_${k//[=,]/_}_r$round"
    step "$name" 150 "$L" bench --model "$M" --device cuda --quiet --batch 1,8,64,256 \
      --prompt-len 128 --decode-steps 128 --kernels "$k" --json "$LOGS/$name.json"
    echo "== $k round $round"; grep -E "^ *[0-9]+ +[0-9]+ [|]" "$LOGS/$name.log"
  done
done
for k in attention_decode=8,rope_kv_write=1 attention_decode=9,rope_kv_write=2; do
  step "ctx32k_${k//[=,]/_}" 150 "$L" bench --model "$M" --device cuda --quiet --batch 1 --prompt-len 32768 \
    --decode-steps 16 --kernels "$k"
  echo "== 32k $k"; grep -E "decode step|roofline" "$LOGS/ctx32k_${k//[=,]/_}.log"
done
reqs() {  # reqs N FILE: N prompts of 61 ids, 48 tokens each, no early stop
  for i in $(seq 1 "$1"); do
    printf '{"prompt_ids": [%s], "max_new_tokens": 48, "ignore_eos": true}\n' "$(seq -s, $((1000 + 7 * i)) 13 $((1780 + 7 * i)))"
  done > "$2"
}
reqs 20 "$LOGS/r20.jsonl"; reqs 4 "$LOGS/r4.jsonl"
gen() {  # gen NAME N KERNELS
  step "gen_$1" 120 "$L" generate --model "$M" --device cuda --quiet --max-seqs 32 --max-batch-tokens 2048 \
    --ignore-eos --requests "$LOGS/r$2.jsonl" --kernels "$3" --out "$LOGS/gen_$1.jsonl" --ids
}
same() {
  python3 - "$LOGS/gen_$1.jsonl" "$LOGS/gen_$2.jsonl" <<'PY'
import json, sys
a = sorted((json.loads(l) for l in open(sys.argv[1])), key=lambda r: r["id"])
b = sorted((json.loads(l) for l in open(sys.argv[2])), key=lambda r: r["id"])
same = sum(x["tokens"] == y["tokens"] for x, y in zip(a, b))
n = sum(len(x["tokens"]) for x in a)
print(f"token identity {sys.argv[1].split('gen_')[-1]} vs {sys.argv[2].split('gen_')[-1]}: {same}/{len(a)} requests identical ({n} tokens)")
PY
}
gen b20_6 20 attention_decode=6; gen b20_6b 20 attention_decode=6; same b20_6 b20_6b
gen b20_g5_6 20 gemm=5,attention_decode=6; gen b20_g5_9 20 gemm=5,attention_decode=9,rope_kv_write=2; same b20_g5_6 b20_g5_9
gen b4_5 4 attention_decode=5; gen b4_9 4 attention_decode=9,rope_kv_write=2; same b4_5 b4_9
d=/tmp/rec_early
step record 90 "$L" generate --model "$M" --device cuda --quiet --prompt-ids "$(seq -s, 100 227)" \
  --max-new-tokens 64 --ignore-eos --max-seqs 1 --kernels attention_decode=9,rope_kv_write=2 --record $d --cupti-all-steps
python3 scripts/critical_path.py $d --skip-steps 4 > "$LOGS/critical_path.txt"; head -12 "$LOGS/critical_path.txt"
echo "==== summary"; cat "$LOGS/summary.txt"
