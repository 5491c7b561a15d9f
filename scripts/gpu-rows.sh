#!/usr/bin/env bash
# attention_decode.21 split_rows_t and .22 split_rows_cluster_t (issue 14, sessions 38-39) in one call of the device tool, building
# on the GPU machine from this tree: the attention tests (every variant against the CPU reference;
# twice, the second with LANTERN_ROWS_SETS=2),
# then interleaved step times of the default against variant 21 with one and two consumer sets
# (scripts/gpu-knob-sweep.sh; SIDES="... attention_decode=22" adds the cluster form) at
# batch 1 / 32 k, batch 1 / 128, batch 1 / 2 k and batch 8 / 4 k, then Nsight Compute's speed of light on one
# in-engine launch of its two kernels at 32 k and of the default's split kernel; record: two recorded runs of
# experiments/long-context-decode-8.json (8 sequences at 4 k keys; default, then variant 21) and lantern compare's
# per-kernel table; carveout: the batch 2-8 points again with every step's kernels at a 50 % shared-memory
# carveout (LANTERN_SMALL_BATCH_CARVEOUT=50:8), default and variant 21 (session 40's hypothesis: from 2 rows
# the driver picks each kernel's carveout, variant 21's combine kernel (no shared memory) and its split kernel
# (98 KB) want different ones, and an SM that switches carveouts between two kernels cannot hold blocks of both,
# which costs the PDL overlap twice per layer), and variant 21 with only its two kernels at 50 %
# (LANTERN_ROWS_CARVEOUT=50). Steps: tests, sweep, ncu, record, carveout (default: tests sweep ncu).
# NCU_POINT / NCU_SKIP move the profiled launch: e.g. NCU_POINT="--batch 8 --prompt-len 4096 --decode-steps 40"
# NCU_SKIP=400 profiles a full-batch step (the first decode steps run partial batches while prompts prefill).
#   OUT=DIR [ROUNDS=2] [SIDES="- attention_decode=21 attention_decode=21,LANTERN_ROWS_SETS=2"] [POINTS="bench args;bench args"] bash scripts/gpu-rows.sh [tests] [sweep] [ncu] [record]
set -u
cd "$(dirname "$0")/.."
LOGS=/tmp/rows-logs; TARGETS="lantern lantern_gpu_tests"; source scripts/lib/device-built.sh
steps=${*:-tests sweep ncu}
read -ra sides <<< "${SIDES:-- attention_decode=21 attention_decode=21,LANTERN_ROWS_SETS=2}"
if [[ " $steps " == *" tests "* ]]; then
  # Twice: the second with variant 21's two consumer sets (LANTERN_ROWS_SETS is read once per process).
  for sets in 1 2; do
    LANTERN_ROWS_SETS=$sets timeout 300 $T --gtest_filter='AttentionDecodeGpu.*' > "$LOGS/tests-sets$sets.log" 2>&1
    echo "tests (LANTERN_ROWS_SETS=$sets): rc=$? $(grep -E '^\[  PASSED|^\[  FAILED  \] [0-9]' "$LOGS/tests-sets$sets.log" | tr '\n' ' ')"
    grep -E "Failure|split_rows|differs|Which is|rel" "$LOGS/tests-sets$sets.log" | head -30
    cp "$LOGS/tests-sets$sets.log" "$OUT/"
  done
fi
# sweep_points "POINT;POINT" SIDE...: every point, the sides interleaved (scripts/gpu-knob-sweep.sh).
sweep_points() {
  local point points; IFS=';' read -ra points <<< "$1"; shift
  for point in "${points[@]}"; do
    echo "== $point"
    BENCH="$point" OUT=$LOGS ROUNDS=${ROUNDS:-2} bash scripts/gpu-knob-sweep.sh "$@" 2>&1 | tail -$(( $# + 1 ))
  done
}
if [[ " $steps " == *" sweep "* ]]; then
  sweep_points "${POINTS:---batch 1 --prompt-len 32768 --decode-steps 32;--batch 1 --prompt-len 128 --decode-steps 128;--batch 1 --prompt-len 2048 --decode-steps 64;--batch 8 --prompt-len 4096 --decode-steps 64}" \
    "${sides[@]}"
fi
if [[ " $steps " == *" carveout "* ]]; then
  c=LANTERN_SMALL_BATCH_CARVEOUT=50:8
  sweep_points "${CARVEOUT_POINTS:---batch 2 --prompt-len 16384 --decode-steps 48;--batch 8 --prompt-len 4096 --decode-steps 64}" \
    - attention_decode=21 "$c" "attention_decode=21,$c" attention_decode=21,LANTERN_ROWS_CARVEOUT=50
fi
if [[ " $steps " == *" ncu "* ]]; then
  # Variant 21's two kernels (the split kernel and its combine), variant 22's split kernel, then the
  # default's (variant 17) at the same point, each after NCU_SKIP launches of the kernel (default 20).
  read -ra point <<< "${NCU_POINT:---batch 1 --prompt-len 32768 --decode-steps 4}"
  for side in "attention_decode=21:decode_rows_kernel|rows_combine_kernel:2" "attention_decode=22:decode_rows_kernel:1" \
    "-:decode_tma_kernel:1"; do
    IFS=: read -r kern regex count <<< "$side"
    args=(); [[ $kern != - ]] && args=(--kernels "$kern")
    timeout 200 ncu -k "regex:$regex" -s "${NCU_SKIP:-20}" -c "$count" --section SpeedOfLight --section WarpStateStats \
      $L bench --model "$M" --device cuda "${point[@]}" "${args[@]}" \
      > "$OUT/ncu-${kern//=/}.txt" 2>&1
    echo "ncu $kern: rc=$?"
    grep -E "decode_rows|rows_combine|decode_tma|Duration|DRAM Throughput|SM Frequency|Warp Cycles Per Issued" \
      "$OUT/ncu-${kern//=/}.txt" | head -12
  done
fi
if [[ " $steps " == *" record "* ]]; then
  for side in default split_rows_t; do
    set_args=(--set model.path="$M" --set model.preset=auto)
    [[ $side != default ]] && set_args+=(--set kernels.attention_decode=$side)
    timeout 240 $L run experiments/long-context-decode-8.json "${set_args[@]}" --out "$LOGS/run-$side" \
      > "$LOGS/run-$side.log" 2>&1
    echo "run $side: rc=$?"; tail -2 "$LOGS/run-$side.log"
  done
  timeout 60 $L compare "$LOGS/run-default" "$LOGS/run-split_rows_t" > "$OUT/compare.txt" 2>&1
  echo "compare: rc=$?"; grep -E "attention|o_proj|TPOT|ITL" "$OUT/compare.txt" | head -24
fi
