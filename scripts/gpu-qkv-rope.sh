#!/usr/bin/env bash
# qkv_rope.2 (gemv_rope: RoPE and the KV write in the q/k/v GEMV's epilogue; session 30, written
# without a GPU) on the H200 in one call of the device tool, building there from this tree:
#   tests: QkvRopeGpu.* (every variant vs the definitions, variant 2 vs 1 bit-exact) and the
#          engine tests that run decode steps through it (EngineGpu.FusedQkvRope*, EarlyLoad*,
#          PlannedGemm*), then the whole GPU suite
#   ab:    an interleaved `lantern bench` A/B, qkv_rope=1 vs qkv_rope=2, batch 1, 4, 16, 64
#          (scripts/gpu-ab.sh: 3 rounds, pinned GEMM plans)
#   early: rope_kv_write=1 vs 2 (vec_early: metadata and sin/cos before the PDL wait) at batch 64
#          and 256, where qkv_rope.1 launches rope_kv_write after cuBLASLt (58 us of the batch-256
#          step's critical path in session 27; only batch 1 was A/B'd, in session 7)
#   kbench: bench_kernels' qkv_rope rows beside gemm.6's qkv GEMV and rope_kv_write.1 alone
#   where: a recorded batch-1 run (WHERE_BATCH=N: N sequences) of each with `lantern inspect --gaps` (the wall-time share of
#          qkv_rope and attention_decode)
#   ab3:   the default (qkv_rope.3) vs qkv_rope.1 at batch 1, 4, 8, 16
#   order: qkv_rope.2 with attention_decode's grid before session 31 (LANTERN_TMA_SPLIT_SLOWEST=0) vs now
#   quick: the attention-decode, qkv_rope and engine GPU tests only
#   OUT=DIR bash scripts/gpu-qkv-rope.sh [tests] [quick] [ab] [ab3] [order] [early] [kbench] [where]   (default: all but
#   early); logs in $OUT
set -u
cd "$(dirname "$0")/.."
STAGES=("$@"); [[ ${#STAGES[@]} -eq 0 ]] && STAGES=(tests ab kbench where)
LOGS=/tmp/qkv-rope-logs; TARGETS="lantern lantern_gpu_tests bench_kernels"; source scripts/lib/device-built.sh
for s in "${STAGES[@]}"; do
  echo "==== $s $(date +%T)"
  case $s in
    tests)
      timeout 240 $T --gtest_filter='QkvRopeGpu.*:EngineGpu.FusedQkvRope*:EngineGpu.EarlyLoad*:EngineGpu.PlannedGemm*' \
        > "$OUT/qkv_tests.log" 2>&1
      echo "qkv tests rc=$?"; grep -E "^\[  (PASSED|FAILED|SKIPPED)|^\[qkv_rope\]|\[engine-gpu\] qkv|Failure|element|bit-identical" \
        "$OUT/qkv_tests.log" | head -40
      timeout 300 $T > "$LOGS/gputests.log" 2>&1
      echo "gpu suite rc=$?"; grep -E "^\[  PASSED|^\[  FAILED|tests ran" "$LOGS/gputests.log" | tail -8 ;;
    quick)  # session 31: after the attention grid's kv-head-fastest order and the graphs test's op count
      timeout 240 $T --gtest_filter='AttentionDecodeGpu.*:QkvRopeGpu.*:EngineGpu.*' > "$OUT/quick_tests.log" 2>&1
      echo "quick tests rc=$?"; grep -E "^\[  (PASSED|FAILED|SKIPPED)|Failure|Which is" "$OUT/quick_tests.log" | head -30 ;;
    ab)
      LANTERN=$L MODEL=$M OUT=$LOGS/ab bash scripts/gpu-ab.sh -r 3 qkv_rope=1 qkv_rope=2 \
        --batch 1,4,16,64 --prompt-len 128 --decode-steps 128 > "$OUT/qkv_ab.txt" 2>&1
      echo "ab rc=$?"; tail -25 "$OUT/qkv_ab.txt" ;;
    ab3)  # session 31: the default (qkv_rope.3: variant 2 up to 8 rows) vs variant 1
      LANTERN=$L MODEL=$M OUT=$LOGS/ab3 bash scripts/gpu-ab.sh -r 3 qkv_rope=1 - \
        --batch 1,4,8,16 --prompt-len 128 --decode-steps 128 > "$OUT/qkv_ab3.txt" 2>&1
      echo "ab3 rc=$?"; tail -7 "$OUT/qkv_ab3.txt" ;;
    order)  # session 31: attention_decode's split-slowest grid vs the grid before, with qkv_rope.2
      LANTERN=$L MODEL=$M OUT=$LOGS/order bash scripts/gpu-ab.sh -r 3 qkv_rope=2,LANTERN_TMA_SPLIT_SLOWEST=0 \
        qkv_rope=2,LANTERN_TMA_SPLIT_SLOWEST=1 --batch 1,4,16 --prompt-len 128 --decode-steps 128 > "$OUT/order_ab.txt" 2>&1
      echo "order rc=$?"; tail -8 "$OUT/order_ab.txt" ;;
    early)
      LANTERN=$L MODEL=$M OUT=$LOGS/early bash scripts/gpu-ab.sh -r 3 rope_kv_write=1 rope_kv_write=2 \
        --batch 64,256 --prompt-len 128 --decode-steps 64 > "$OUT/early_ab.txt" 2>&1
      echo "early rc=$?"; tail -16 "$OUT/early_ab.txt" ;;
    kbench)
      timeout 120 $KB --benchmark_filter='qkv_rope|rope_kv_write.1.*n=1$|gemm.6.*/qkv/m=(1|8)$' > "$OUT/qkv_kbench.txt" 2>&1
      echo "kbench rc=$?"; grep -vE "^-+$" "$OUT/qkv_kbench.txt" | tail -14 ;;
    where)
      for v in 1 2; do
        rm -rf "$LOGS/run$v"
        $L generate --model "$M" --device cuda --quiet --prompt-ids "$(seq -s, 100 227)" --max-new-tokens 64 --ignore-eos \
          --repeat "${WHERE_BATCH:-1}" --max-seqs "${WHERE_BATCH:-1}" \
          --kernels qkv_rope=$v --record "$LOGS/run$v" --cupti-all-steps > "$LOGS/gen$v.log" 2>&1
        echo "-- qkv_rope=$v (generate rc=$?)"
        $L inspect "$LOGS/run$v" --phase decode --gaps > "$LOGS/insp$v.txt" 2>&1
        grep -E "wall|qkv|rope|attention_decode|o_proj|busy|idle" "$LOGS/insp$v.txt" | head -24
      done | tee "$OUT/qkv_where.txt" ;;
  esac
done
