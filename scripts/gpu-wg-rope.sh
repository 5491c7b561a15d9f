#!/usr/bin/env bash
# qkv_rope.5 wg_rope (issue 14, session 37) in one call of the device tool, building on the GPU
# machine from this tree: its tests and the RoPE kernels' (QkvRopeGpu.*, RopeGpu.*,
# RopeKvWriteGpu.*, QkvAttentionGpu.*, gemm.8's own), then interleaved A/Bs of decode steps with the
# GEMM plans pinned: the default (qkv_rope.3: cuBLASLt + rope_kv_write from 17 rows) against SIDES
# (default "qkv_rope=5 gemm=8": the new variant, and gemm.8 for the q/k/v GEMM without the epilogue).
#   OUT=DIR [ROUNDS=2] [BATCHES=32,64,128] [SIDES="qkv_rope=5 gemm=8"] bash scripts/gpu-wg-rope.sh [tests] [ab]
set -u
cd "$(dirname "$0")/.."
LOGS=/tmp/wg-rope-logs; TARGETS="lantern lantern_gpu_tests"; source scripts/lib/device-built.sh
steps=${*:-tests ab}
if [[ " $steps " == *" tests "* ]]; then
  timeout 300 $T --gtest_filter='QkvRopeGpu.*:RopeGpu.*:RopeKvWriteGpu.*:QkvAttentionGpu.*:GemmGpu.WgmmaBatchShapes' \
    > "$LOGS/tests.log" 2>&1
  echo "tests: rc=$? $(grep -E '^\[  PASSED|^\[  FAILED  \] [0-9]|tests ran' "$LOGS/tests.log" | tr '\n' ' ')"
  grep -E "FAILED|Failure|differ" "$LOGS/tests.log" | head -30
  cp "$LOGS/tests.log" "$OUT/"
fi
if [[ " $steps " == *" ab "* ]]; then
  for side in ${SIDES:-qkv_rope=5 gemm=8}; do
    OUT=$LOGS/ab-$side MODEL=$M LANTERN=$L bash scripts/gpu-ab.sh -r "${ROUNDS:-2}" - "$side" \
      --batch "${BATCHES:-32,64,128}" --prompt-len 128 --decode-steps 128 > "$LOGS/ab-$side.log" 2>&1
    echo "ab $side: rc=$?"
    tail -6 "$LOGS/ab-$side.log"; cp "$LOGS/ab-$side.log" "$OUT/"
  done
fi
