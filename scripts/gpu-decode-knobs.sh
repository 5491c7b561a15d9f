#!/usr/bin/env bash
# The decode attention's knobs at short contexts, on the H200 in one call of the device tool
# (session 32): interleaved `lantern bench` A/Bs of the default against one knob each, batch 1 and 4,
# prompt 128, 128 decode steps (contexts 129-256: attention_decode.20 runs them as one split of up
# to 4 key tiles), scripts/gpu-ab.sh with 3 rounds and pinned GEMM plans:
#   LANTERN_TMA_STAGES=4        every tile of a one-split context requested before the PDL wait
#                               (the default ring of 3 refills the 4th tile mid-chain)
#   LANTERN_TMA_BLOCKS_PER_SM=1 half the splits (16 per kv head at batch 1): fewer idle blocks
#                               holding registers and shared memory until the wait
#   LANTERN_TMA_WS=0            the barrier form (no producer warp)
# A setting may combine several (comma-separated, as scripts/gpu-ab.sh takes them); A is BASE
# (default "-": the defaults). BATCHES (default 1,4) sets the batches; TESTS=1 first runs the
# attention and engine GPU tests under each setting.
#   OUT=DIR [BASE=...] [BATCHES=1,4,16] [TESTS=1] bash scripts/gpu-decode-knobs.sh [SETTING ...]
#   (default: the three above); logs in $OUT. Session 32 also ran a knob it added for one call,
#   LANTERN_TMA_IDLE_EXIT=1 (docs/performance.md, session 32; removed after).
set -u
cd "$(dirname "$0")/.."
KNOBS=("$@"); [[ ${#KNOBS[@]} -eq 0 ]] && KNOBS=(LANTERN_TMA_STAGES=4 LANTERN_TMA_BLOCKS_PER_SM=1 LANTERN_TMA_WS=0)
LOGS=/tmp/decode-knobs-logs; TARGETS="lantern ${TESTS:+lantern_gpu_tests}"; source scripts/lib/device-built.sh
for k in "${KNOBS[@]}"; do
  echo "==== $k $(date +%T)"
  name=$(echo "$k" | tr -c 'A-Za-z0-9_\n' '-')
  if [[ -n ${TESTS:-} ]]; then
    (IFS=,; for kv in $k; do [[ $kv == [A-Z]*=* ]] && export "$kv"; done
     timeout 300 $T --gtest_filter='AttentionDecodeGpu.*:BatchedAttentionGpu.*:EngineGpu.*' > "$LOGS/tests-$name.log" 2>&1
     echo "tests rc=$?"; grep -E "^\[  (PASSED|FAILED|SKIPPED)|Failure" "$LOGS/tests-$name.log" | head -8)
  fi
  LANTERN=$L MODEL=$M OUT=$LOGS/$name bash scripts/gpu-ab.sh -r 3 "${BASE:--}" "$k" \
    --batch "${BATCHES:-1,4}" --prompt-len 128 --decode-steps 128 > "$OUT/knob-$name.txt" 2>&1
  echo "rc=$?"; tail -5 "$OUT/knob-$name.txt"
done
