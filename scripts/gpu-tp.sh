#!/usr/bin/env bash
# Tensor parallelism on the GPU machine (issue 13, docs/tensor-parallel.md), in one call:
#   bash scripts/gpu-tp.sh [stage ...]
# Stages (default: one on a 1-GPU machine, all but `one` with 2+ GPUs):
#   one      1 GPU: the TensorParallelGpu tests (one-rank NCCL group == plain engine, CLI --tp 1,
#            too few GPUs), --tp 1 vs plain tokens on synthetic llama-3.2-1b, commbench --tp 1
#   tests    2 GPUs: every TensorParallelGpu test (TwoGpusScoreLikeOne included)
#   logits   TP=2 vs TP=1 teacher-forced logits (lantern score, 64 prefill + 64 decode ids) on
#            synthetic llama-3.2-1b and llama-3.1-8b (experiments/tp/compare_logits.py), the LM
#            head replicated and split by vocabulary (--tp-lm-head split)
#   greedy   greedy generations, 64 tokens, 4 prompts, 1B and 8B, TP=2 vs TP=1; where they part,
#            experiments/tp/greedy_divergence.py: near-tie (PASS) or not (FAIL)
#   perf     synthetic llama-3.1-8b decode step, batch 1 and 64, TP=1 vs TP=2 (lantern bench), and
#            TP=2 with --tp-allreduce nccl (every all_reduce through NCCL, no P2P kernel)
#   lmhead   batch-1 decode step, TP=2, LM head replicated vs split (--tp-lm-head), synthetic
#            llama-3.1-8b and llama-3.2-1b (lantern bench)
#   comm     commbench --tp 2 (all_reduce_perf-style busbw per size) and a recorded TP=2 decode
#            run with CUPTI on every step: `lantern inspect` communication section
#   rerun    `lantern run --tp 2 --tp-allreduce nccl` (decode-latency, 1B, one repetition), then
#            `lantern rerun --check`: the recorded all_reduce choice repeated (expected: nccl, ran
#            nccl), every rank pinning the GEMM plans of its own manifest (all "pinned"), tokens
# Binaries: BIN_DIR (default build/gpu-machine, else build/default; its bin/ and tests/), shared
# libraries from .device/. Binaries built elsewhere (carried): SRC_DIR=the checkout they were built
# in (the tests run bin/lantern by its compiled-in path), linked to this checkout when missing.
# Logs in /tmp/lantern-tp-logs, tarred into $OUT/tp-logs.tar.gz; summary last.
set -u
cd "$(dirname "$0")/.."
OUT="${OUT:-/tmp/lantern-tp-out}"
LOGS=/tmp/lantern-tp-logs
mkdir -p "$OUT" "$LOGS"
export LD_LIBRARY_PATH="$PWD/.device/pcre2/usr/lib/x86_64-linux-gnu:$PWD/.device/libs:${LD_LIBRARY_PATH:-}"
source scripts/nccl-env.sh  # libnccl.so.2 on the library path; NCCL_NVLS_ENABLE=0 (never cuMulticastCreate)
if [[ -n ${SRC_DIR:-} && ! -e $SRC_DIR ]]; then mkdir -p "$(dirname "$SRC_DIR")"; ln -s "$PWD" "$SRC_DIR"; fi
B=${BIN_DIR:-build/gpu-machine}
[[ -x $B/bin/lantern ]] || B=build/default
LANTERN=$B/bin/lantern TESTS=$B/tests/lantern_gpu_tests
M1=models/llama-3.2-1b M8=models/llama-3.1-8b
GPUS=$(nvidia-smi -L 2>/dev/null | wc -l)
if [[ $# -gt 0 ]]; then STAGES=" $* "; elif [[ $GPUS -ge 2 ]]; then STAGES=" tests logits greedy perf lmhead comm rerun ";
else STAGES=" one "; fi
has() { [[ $STAGES == *" $1 "* ]]; }

source scripts/gpu-step.sh  # step NAME LIMIT_S command...
synth() {  # synth DIR PRESET
  [[ -f $1/model.safetensors ]] || step "synth_$2" 400 $LANTERN synth --preset "$2" --out "$1" --seed 0 \
    --tokenizer-dir .device/llama3
}

{ nvidia-smi -L; nvidia-smi topo -m; ls -l /usr/lib/x86_64-linux-gnu/libnccl* /usr/include/nccl.h;
  echo "NCCL_NVLS_ENABLE=$NCCL_NVLS_ENABLE"; } >"$LOGS/machine.txt" 2>&1

if has one; then
  step tp_gpu_tests 300 $TESTS --gtest_filter='TensorParallelGpu.*'
  synth $M1 llama-3.2-1b
  P="--model $M1 --device cuda --prompt-ids 128000,791,5684,48213,6636,10756 --max-new-tokens 64 --ids --quiet"
  step gen_plain 120 $LANTERN generate $P
  step gen_tp1 120 $LANTERN generate $P --tp 1
  if cmp -s "$LOGS/gen_plain.log" "$LOGS/gen_tp1.log"; then echo "tp1_tokens: identical" ; else echo "tp1_tokens: DIFFER"; fi \
    | tee -a "$LOGS/summary.txt"
  step commbench_tp1 120 $LANTERN commbench --tp 1 --device cuda
fi
has tests && step tp_gpu_tests 300 $TESTS --gtest_filter='TensorParallelGpu.*'
if has logits; then
  synth $M1 llama-3.2-1b
  synth $M8 llama-3.1-8b
  python3 -c "import random; random.seed(7); print(' '.join(str(random.randrange(1000, 120000)) for _ in range(128)))" \
    >"$LOGS/ids.txt"
  for m in $M1 $M8; do
    n=$(basename $m)
    for tp in 1 2; do
      step score_${n}_tp$tp 300 $LANTERN score --model $m --device cuda --ids-file "$LOGS/ids.txt" \
        --prefill-tokens 64 --out /tmp/score_${n}_tp$tp.f32 --tp $tp
    done
    step score_${n}_tp2split 300 $LANTERN score --model $m --device cuda --ids-file "$LOGS/ids.txt" \
      --prefill-tokens 64 --out /tmp/score_${n}_tp2split.f32 --tp 2 --tp-lm-head split
    step compare_${n} 120 python3 experiments/tp/compare_logits.py --vocab 128256 \
      /tmp/score_${n}_tp1.f32 /tmp/score_${n}_tp2.f32
    step compare_${n}_split 120 python3 experiments/tp/compare_logits.py --vocab 128256 \
      /tmp/score_${n}_tp1.f32 /tmp/score_${n}_tp2split.f32
  done
fi
if has greedy; then
  # 4 prompts x {1B, 8B}: greedy 64 tokens at TP=1 and TP=2; where they part, both configurations
  # score the TP=1 sequence and experiments/tp/greedy_divergence.py tells a near-tie from an error.
  for m in $M1 $M8; do
    n=$(basename $m)
    synth $m $n
    for i in 0 1 2 3; do
      prompt="128000,$((1000 + 977 * i)),$((5000 + 131 * i)),$((20000 + 7 * i)),$((40000 + 3 * i))"
      for tp in 1 2; do
        step greedy_${n}_p${i}_tp$tp 200 $LANTERN generate --model $m --device cuda --prompt-ids "$prompt" \
          --max-new-tokens 64 --ignore-eos --ids --quiet --tp $tp
      done
      if cmp -s "$LOGS/greedy_${n}_p${i}_tp1.log" "$LOGS/greedy_${n}_p${i}_tp2.log"; then
        echo "greedy $n prompt $i: identical over 64 tokens" | tee -a "$LOGS/summary.txt"
        continue
      fi
      echo "$prompt $(tr ',' ' ' <"$LOGS/greedy_${n}_p${i}_tp1.log")" | tr ',' ' ' >"$LOGS/greedy_${n}_p${i}_seq.txt"
      for tp in 1 2; do
        step gscore_${n}_p${i}_tp$tp 200 $LANTERN score --model $m --device cuda --ids-file \
          "$LOGS/greedy_${n}_p${i}_seq.txt" --prefill-tokens 5 --out /tmp/g_${n}_p${i}_tp$tp.f32 --tp $tp --quiet
      done
      r=$(python3 experiments/tp/greedy_divergence.py --vocab 128256 --prompt "$prompt" \
        "$LOGS/greedy_${n}_p${i}_tp1.log" "$LOGS/greedy_${n}_p${i}_tp2.log" /tmp/g_${n}_p${i}_tp1.f32 \
        /tmp/g_${n}_p${i}_tp2.f32 2>&1)
      echo "greedy $n prompt $i: $r" | tee -a "$LOGS/summary.txt"
    done
  done
fi
if has perf; then
  synth $M8 llama-3.1-8b
  for b in 1 64; do
    for tp in 1 2; do
      step bench_8b_b${b}_tp$tp 400 $LANTERN bench --model $M8 --device cuda --batch $b --prompt-len 128 \
        --decode-steps 128 --json "$LOGS/bench_8b_b${b}_tp$tp.json" --tp $tp
    done
    # the same TP=2 step with every all_reduce through NCCL (no P2P kernel)
    step bench_8b_b${b}_tp2_nccl 400 $LANTERN bench --model $M8 --device cuda --batch $b --prompt-len 128 \
      --decode-steps 128 --json "$LOGS/bench_8b_b${b}_tp2_nccl.json" --tp 2 --tp-allreduce nccl
  done
fi
if has lmhead; then
  synth $M8 llama-3.1-8b
  synth $M1 llama-3.2-1b
  for m in $M8 $M1; do
    n=$(basename $m)
    for head in replicated split; do
      step bench_lmhead_${n}_$head 400 $LANTERN bench --model $m --device cuda --batch 1 --prompt-len 128 \
        --decode-steps 128 --json "$LOGS/bench_lmhead_${n}_$head.json" --tp 2 --tp-lm-head $head
    done
  done
fi
if has comm; then
  synth $M8 llama-3.1-8b
  step commbench_tp2 300 $LANTERN commbench --tp 2 --device cuda --out "$LOGS/commbench.json"
  rm -rf /tmp/run_tp2
  step record_tp2 400 $LANTERN generate --model $M8 --device cuda --prompt-ids 128000,791,5684,48213 \
    --max-new-tokens 64 --ignore-eos --ids --quiet --record /tmp/run_tp2 --cupti-all-steps --tp 2
  step inspect_tp2 120 bash -c "$LANTERN inspect /tmp/run_tp2 --phase decode --by op --top 25; \
    $LANTERN inspect /tmp/run_tp2/rank-1 --phase decode --by op --top 10"
  cp /tmp/run_tp2/kernels_ranks.csv "$LOGS/" 2>/dev/null
fi
if has rerun; then
  synth $M1 llama-3.2-1b
  rm -rf /tmp/tp_rerun_a /tmp/tp_rerun_b
  step rerun_record 300 $LANTERN run experiments/decode-latency.json --set model.path=$M1 --set device=cuda \
    --set warmup=0 --set repetitions=1 --tp 2 --tp-allreduce nccl --out /tmp/tp_rerun_a
  step rerun_again 300 $LANTERN rerun /tmp/tp_rerun_a --check --out /tmp/tp_rerun_b
  python3 - >>"$LOGS/summary.txt" 2>&1 <<'PY'
import json
for r in ("", "rank-1/"):
    c = json.load(open(f"/tmp/tp_rerun_b/{r}manifest.json"))["config"]
    plans = c.get("gemm_plans", [])
    tp = c["tensor_parallel"]
    print(f"rerun {r or 'rank-0/'}: all_reduce_path {tp['all_reduce_path']} (ran: {tp['all_reduce']}), "
          f"{sum(p.get('pinned', False) for p in plans)} of {len(plans)} gemm plans pinned")
PY
  grep -h "pins\|rerun: tokens" "$LOGS/rerun_again.log" | tee -a "$LOGS/summary.txt"
fi

echo "==== summary"; cat "$LOGS/summary.txt"
grep -h "PASSED\|FAILED\|SKIPPED\|agreement\|TP=2" "$LOGS"/tp_gpu_tests.log 2>/dev/null | head -20
for f in "$LOGS"/compare_*.log; do [[ -f $f ]] && echo "== $(basename $f .log): $(tr '\n' ' ' <$f)"; done
for f in "$LOGS"/bench_*.log; do [[ -f $f ]] && echo "== $(basename $f .log): $(grep -E 'decode step' $f | tr -s ' ' | tr '\n' ' ')"; done
[[ -f $LOGS/commbench_tp2.log ]] && cat "$LOGS/commbench_tp2.log"
[[ -f $LOGS/commbench_tp1.log ]] && cat "$LOGS/commbench_tp1.log"
[[ -f $LOGS/inspect_tp2.log ]] && sed -n '/communication/,/^$/p' "$LOGS/inspect_tp2.log"
tar czhf "$OUT/tp-logs.tar.gz" -C /tmp lantern-tp-logs
