#!/usr/bin/env bash
# attention_prefill.5 (wg_flash_pipe: variant 4 with each warpgroup's key tiles pipelined, S of
# tile i issued with P V of tile i - 1 and tile i's softmax under it; session 32, written without
# a GPU) on the H200 in one call of the device tool, building there from this tree:
#   tests:  AttentionPrefillGpu.* (every variant vs the CPU reference; variant 5 bit for bit vs 4)
#   kbench: bench_kernels' attention_prefill.4 and .5 at 128 / 512 / 2048 / 8192 tokens
#   probe:  scripts/probe/af_phases.cu (per-block phase stamps) for both, 512 and 2048 tokens
#   ab:     an interleaved `lantern bench` A/B, attention_prefill=4 vs 5, one prompt of 512, 2048
#           and 8192 tokens (scripts/gpu-ab.sh: 3 rounds, pinned GEMM plans)
#   balance: LANTERN_PREFILL_BALANCE=1 (one sequence in one wave: blocks L and L + #SMs carry a heavy
#           and a light query tile; a knob, off by default) -- the tests, the probe (key tiles per SM)
#           and bench_kernels with it, and a `lantern bench` A/B, =0 against =1, at 512 tokens
#   record: a 512-token prompt recorded with CUPTI (three prefills) with LANTERN_PREFILL_BALANCE=0 and
#           =1, `lantern inspect --phase prefill --by op`: the attention's kernel time in the engine,
#           where the PDL launch behind rope_kv_write decides the blocks' placement
#   suite:  the whole GPU suite
#   hf:     the HF fp32 / bf16 comparisons and the batch-consistency check (scripts/gpu-verify.sh's
#           hf_fp32 hf_bf16 batch, on this build): with suite, the verification of a tree whose
#           default changes; LANTERN_PREFILL_BALANCE etc. in the environment apply
#   paths:  where a decode step's time goes now, batch 1 and 16 (scripts/gpu-batch-profile.sh:
#           CUPTI-recorded steps, scripts/critical_path.py), and a recorded batch-16 run per qkv_rope
#           variant 1 / 2 (`WHERE_BATCH=16 scripts/gpu-qkv-rope.sh where`: which kernel's wall share
#           grows with qkv_rope.2 at 16 rows)
#   OUT=DIR bash scripts/gpu-af-pipe.sh [tests] [kbench] [probe] [ab] [balance] [record] [suite] [hf] [paths]
#   (default: tests kbench probe ab); logs in $OUT
set -u
cd "$(dirname "$0")/.."

stage_tests() {
  timeout 240 $T --gtest_filter='AttentionPrefillGpu.*' > "$OUT/af_tests.log" 2>&1
  echo "prefill attention tests rc=$?"
  grep -E "^\[  (PASSED|FAILED|SKIPPED)|Failure|differs|Which is|rel-L2" "$OUT/af_tests.log" | head -30
}

stage_kbench() {
  timeout 180 $KB --benchmark_filter='^attention_prefill\.[45]\.' > "$OUT/af_kbench.txt" 2>&1
  echo "kbench rc=$?"; grep -vE "^-+$" "$OUT/af_kbench.txt" | tail -12
}

stage_probe() {
  B=build/gpu-machine bash scripts/probe/build-probe.sh af_phases > "$LOGS/probe-build.log" 2>&1 \
    || { echo "probe build failed"; tail -20 "$LOGS/probe-build.log"; return; }
  for pipe in 0 1; do
    echo "-- LANTERN_AF_PIPE=$pipe"
    LANTERN_AF_PIPE=$pipe timeout 120 build/probe/af_phases 512/warm 512/chain 2048/warm 2>&1
  done > "$OUT/af_probe.txt"
  head -90 "$OUT/af_probe.txt"
}

stage_ab() {
  LANTERN=$L MODEL=$M OUT=$LOGS/ab bash scripts/gpu-ab.sh -r 3 attention_prefill=4 attention_prefill=5 \
    --batch 1 --prompt-len 512,2048,8192 --decode-steps 2 > "$OUT/af_ab.txt" 2>&1
  echo "ab rc=$?"; tail -12 "$OUT/af_ab.txt"
}

stage_hf() {
  bash scripts/gpu-verify.sh hf_fp32 hf_bf16 batch > "$OUT/hf.txt" 2>&1
  echo "hf rc=$?"; grep -E "^[a-z_0-9]+: rc=|PASS|FAIL|ratio|top-1|agreement" "$OUT/hf.txt" | head -20
}

stage_paths() {
  LANTERN=$L MODEL=$M BATCHES="1 16" bash scripts/gpu-batch-profile.sh "$LOGS/paths" > "$OUT/paths.txt" 2>&1
  echo "paths rc=$?"; grep -A40 "^== batch" "$OUT/paths.txt" | head -90
  WHERE_BATCH=16 OUT=$LOGS/where16 bash scripts/gpu-qkv-rope.sh where > "$OUT/where16.txt" 2>&1
  echo "where16 rc=$?"; tail -52 "$OUT/where16.txt"
}

stage_balance() {
  LANTERN_PREFILL_BALANCE=1 timeout 240 $T --gtest_filter='AttentionPrefillGpu.*' > "$OUT/bal_tests.log" 2>&1
  echo "prefill attention tests (balanced) rc=$?"
  grep -E "^\[  (PASSED|FAILED)|Failure|differs" "$OUT/bal_tests.log" | head -10
  B=build/gpu-machine bash scripts/probe/build-probe.sh af_phases > "$LOGS/probe-build.log" 2>&1 || echo "probe build failed"
  for bal in 0 1; do for pipe in 0 1; do
    echo "-- LANTERN_PREFILL_BALANCE=$bal LANTERN_AF_PIPE=$pipe"
    LANTERN_PREFILL_BALANCE=$bal LANTERN_AF_PIPE=$pipe timeout 60 build/probe/af_phases 512/warm 512/chain 2>&1 \
      | grep -E "^==|wg0_done|wg1_done|exit"
  done; done > "$OUT/bal_probe.txt"
  cat "$OUT/bal_probe.txt"
  LANTERN_PREFILL_BALANCE=1 timeout 120 $KB --benchmark_filter='^attention_prefill\.[45]\..*len=(512|2048)' \
    > "$OUT/bal_kbench.txt" 2>&1
  echo "kbench (balanced) rc=$?"; grep -E "^attention_prefill.*len" "$OUT/bal_kbench.txt" | tail -4
  LANTERN=$L MODEL=$M OUT=$LOGS/bal bash scripts/gpu-ab.sh -r 4 LANTERN_PREFILL_BALANCE=0 LANTERN_PREFILL_BALANCE=1 \
    --batch 1 --prompt-len 512 --decode-steps 2 > "$OUT/bal_ab.txt" 2>&1
  echo "ab rc=$?"; tail -3 "$OUT/bal_ab.txt"
}

stage_record() {
  for bal in 0 1; do
    rm -rf "$LOGS/rec$bal"
    LANTERN_PREFILL_BALANCE=$bal $L generate --model "$M" --device cuda --quiet --prompt-ids "$(seq -s, 100 611)" \
      --max-new-tokens 2 --ignore-eos --repeat 3 --max-seqs 1 --max-batch-tokens 512 --record "$LOGS/rec$bal" \
      --cupti-all-steps --ids --out /dev/null > "$LOGS/rec$bal.log" 2>&1
    echo "-- LANTERN_PREFILL_BALANCE=$bal (generate rc=$?)"
    $L inspect "$LOGS/rec$bal" --phase prefill --by op --top 20 2>&1 | grep -E "name|attention|rope|qkv|o_proj"
  done | tee "$OUT/bal_record.txt"
}

stage_suite() {
  timeout 300 $T > "$LOGS/gputests.log" 2>&1
  echo "gpu suite rc=$?"; grep -E "^\[  PASSED|^\[  FAILED|tests ran" "$LOGS/gputests.log" | tail -8
}

[[ $# -eq 0 ]] && set -- tests kbench probe ab
for s in "$@"; do
  declare -F "stage_$s" > /dev/null || { echo "gpu-af-pipe: no stage '$s' (see the header)" >&2; exit 2; }
done
LOGS=/tmp/af-pipe-logs; TARGETS="lantern lantern_gpu_tests bench_kernels"; source scripts/lib/device-built.sh
for s in "$@"; do
  echo "==== $s $(date +%T)"
  "stage_$s"
done
