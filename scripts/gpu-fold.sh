#!/usr/bin/env bash
# The folded decode attention (session 33, written without a GPU: qkv_rope.4 gemv_rope_attn and the
# engine's qkv_attention op; docs/engine.md, "The folded decode attention") on the H200 in one call of
# the device tool, building there from this tree:
#   tests:   QkvAttentionGpu.* (variant 4 vs the CPU attention on its own bf16 inputs, vs qkv_rope.3 +
#            attention_decode, vs the fp32 definition; determinism), QkvRopeGpu.* (every variant,
#            variant 4 without attention = variant 3), FoldAttentionGpu.* (the engine: the composed fold
#            bit-identical, qkv_rope.4's folded steps vs the full table), EngineGpu.FusedQkvRope*
#   race:    compute-sanitizer racecheck and synccheck over QkvAttentionGpu.*
#   ab:      `lantern bench` interleaved (scripts/gpu-ab.sh, 3 rounds, pinned plans): the defaults vs
#            qkv_rope=4 at batch 1, 2, 4, 8 (prompt 128: contexts 129-256), then batch 1 at prompt 384
#            (contexts 385-512: two key chunks per tail); and fold_attention=on,qkv_rope=3 vs the defaults
#            at batch 1 (the op table alone: the same kernels, expected level)
#   knobs:   qkv_rope=4 vs qkv_rope=4 with LANTERN_QKV_ATTN_PREFETCH=0, and with
#            LANTERN_QKV_ATTN_EARLY_TRIGGER=1, batch 1 and 4; with LANTERN_QKV_ATTN_MAX_ROWS=1 (2-8 rows
#            take the composed form) at batch 2, 4, 8: whether the tail's rows in turn lose
#   paths:   the batch-1 critical path with qkv_rope=4 (scripts/gpu-batch-profile.sh, CUPTI on every
#            step; scripts/critical_path.py): where the folded step's time goes
#   argmax:  argmax.3 gpu_1pass (session 33 too: variant 2's chunk pass PDL-launched, the last chunk
#            block of each row finishing it) vs the default argmax.2, batch 1, 64 and 256 (greedy steps)
#   sample:  sample.9 grid_race_early (session 33 too: sample.7 PDL-launched, the Gumbel noise made
#            before the dependency wait, under the LM head): SampleGpu.* (sample.9 against cpu_race and
#            token for token against sample.7), then sampled decode (T 0.8, top-p 0.95) sample=7 vs
#            sample=9 at batch 1 and 8
#   final:   final_fuse=on (the last layer's down_proj, residual and final norm as one op in decode
#            steps) vs the defaults, batch 1, 16, 64, 256
#   suite:   the whole GPU suite
#   OUT=DIR bash scripts/gpu-fold.sh [tests] [race] [ab] [knobs] [paths] [argmax] [sample] [final] [suite]
#   (default: tests ab, ~8 minutes with the build). Later calls, each at most 10 minutes: `tests race
#   knobs`, `tests argmax sample`, `tests final paths`, `suite`. Logs in $OUT. ab, knobs, paths, argmax
#   and final run only when this call's tests passed, sample's A/B only when its own tests did
#   (FORCE=1: anyway).
set -u
cd "$(dirname "$0")/.."

TESTS_RC=0
stage_tests() {
  timeout 300 $T --gtest_filter='QkvAttentionGpu.*:QkvRopeGpu.*:FoldAttentionGpu.*:EngineGpu.FusedQkvRope*:ArgmaxGpu.*' \
    > "$OUT/fold_tests.log" 2>&1
  TESTS_RC=$?
  echo "fold tests rc=$TESTS_RC"
  grep -E "^\[  (PASSED|FAILED|SKIPPED)|^\[ +(OK|FAILED) |Failure|attn element|rel-L2|differ" "$OUT/fold_tests.log" | head -40
}

stage_race() {
  for tool in racecheck synccheck; do
    timeout 240 compute-sanitizer --tool $tool --error-exitcode 9 $T --gtest_filter='QkvAttentionGpu.*' \
      > "$LOGS/sanitize_$tool.log" 2>&1
    echo "compute-sanitizer $tool rc=$?"; grep -E "ERROR SUMMARY|hazard|Race|barrier" "$LOGS/sanitize_$tool.log" | head -6
  done | tee "$OUT/fold_race.txt"
}

# The timing stages need the tests to have passed in this call (FORCE=1: run anyway).
tests_passed() {
  [[ $TESTS_RC == 0 || ${FORCE:-0} == 1 ]] && return 0
  echo "skipped: the fold tests failed in this call (FORCE=1 runs it anyway)"; return 1
}

stage_ab() {
  tests_passed || return
  LANTERN=$L MODEL=$M OUT=$LOGS/ab bash scripts/gpu-ab.sh -r 3 - qkv_rope=4 \
    --batch 1,2,4,8 --prompt-len 128 --decode-steps 128 > "$OUT/fold_ab.txt" 2>&1
  echo "ab rc=$?"; tail -8 "$OUT/fold_ab.txt"
  LANTERN=$L MODEL=$M OUT=$LOGS/ab512 bash scripts/gpu-ab.sh -r 2 - qkv_rope=4 \
    --batch 1 --prompt-len 384 --decode-steps 128 > "$OUT/fold_ab512.txt" 2>&1
  echo "ab (contexts 385-512) rc=$?"; tail -4 "$OUT/fold_ab512.txt"
  LANTERN=$L MODEL=$M OUT=$LOGS/abc bash scripts/gpu-ab.sh -r 2 - fold_attention=on,qkv_rope=3 \
    --batch 1 --prompt-len 128 --decode-steps 128 > "$OUT/fold_ab_composed.txt" 2>&1
  echo "ab (composed fold) rc=$?"; tail -4 "$OUT/fold_ab_composed.txt"
}

stage_knobs() {
  tests_passed || return
  for knob in LANTERN_QKV_ATTN_PREFETCH=0 LANTERN_QKV_ATTN_EARLY_TRIGGER=1 LANTERN_QKV_ATTN_MAX_ROWS=1; do
    batches=1,4; [[ $knob == *MAX_ROWS* ]] && batches=2,4,8  # rows beyond the bound: the composed form
    LANTERN=$L MODEL=$M OUT=$LOGS/knob bash scripts/gpu-ab.sh -r 3 qkv_rope=4 "qkv_rope=4,$knob" \
      --batch $batches --prompt-len 128 --decode-steps 128 > "$LOGS/knob_$knob.txt" 2>&1
    echo "-- $knob rc=$?"; tail -5 "$LOGS/knob_$knob.txt"
  done | tee "$OUT/fold_knobs.txt"
}

stage_paths() {
  tests_passed || return
  LANTERN=$L MODEL=$M BATCHES="1" KERNELS=qkv_rope=4 bash scripts/gpu-batch-profile.sh "$LOGS/paths" \
    > "$OUT/fold_paths.txt" 2>&1
  echo "paths rc=$?"; grep -A40 "^== batch" "$OUT/fold_paths.txt" | head -50
}

stage_argmax() {
  tests_passed || return
  LANTERN=$L MODEL=$M OUT=$LOGS/argmax bash scripts/gpu-ab.sh -r 3 - argmax=3 \
    --batch 1,64,256 --prompt-len 128 --decode-steps 64 > "$OUT/argmax_ab.txt" 2>&1
  echo "argmax ab rc=$?"; tail -6 "$OUT/argmax_ab.txt"
}

stage_sample() {
  timeout 300 $T --gtest_filter='SampleGpu.*' > "$OUT/sample_tests.log" 2>&1
  local rc=$?
  echo "sample tests rc=$rc"; grep -E "^\[  (PASSED|FAILED)|Failure|grid_race|chi2" "$OUT/sample_tests.log" | head -20
  [[ $rc == 0 || ${FORCE:-0} == 1 ]] || { echo "skipped the sampled A/B: the sample tests failed"; return; }
  LANTERN=$L MODEL=$M OUT=$LOGS/sample bash scripts/gpu-ab.sh -r 3 sample=7 sample=9 \
    --batch 1,8 --prompt-len 128 --decode-steps 64 --temperature 0.8 --top-p 0.95 > "$OUT/sample_ab.txt" 2>&1
  echo "sample ab rc=$?"; tail -5 "$OUT/sample_ab.txt"
}

stage_final() {
  tests_passed || return
  LANTERN=$L MODEL=$M OUT=$LOGS/final bash scripts/gpu-ab.sh -r 3 - final_fuse=on \
    --batch 1,16,64,256 --prompt-len 128 --decode-steps 64 > "$OUT/final_ab.txt" 2>&1
  echo "final_fuse ab rc=$?"; tail -6 "$OUT/final_ab.txt"
}

stage_suite() {
  timeout 300 $T > "$LOGS/gputests.log" 2>&1
  echo "gpu suite rc=$?"; grep -E "^\[  PASSED|^\[  FAILED|tests ran" "$LOGS/gputests.log" | tail -8
  # What failed, with the test's seed and messages (the whole log stays on the machine).
  if grep -qE "Failure" "$LOGS/gputests.log"; then
    { grep -m3 "random seed" "$LOGS/gputests.log"
      grep -B3 -A14 -E "Failure" "$LOGS/gputests.log" | head -400; } > "$OUT/suite_failures.txt"
  fi
  return 0
}

[[ $# -eq 0 ]] && set -- tests ab
for s in "$@"; do
  declare -F "stage_$s" > /dev/null || { echo "gpu-fold: no stage '$s' (see the header)" >&2; exit 2; }
done
LOGS=/tmp/fold-logs; TARGETS="lantern lantern_gpu_tests"; source scripts/lib/device-built.sh
for s in "$@"; do
  echo "==== $s $(date +%T)"
  "stage_$s"
done
