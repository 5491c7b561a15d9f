#!/usr/bin/env bash
# After a change to the engine's op hooks (Model::observed): the GPU tests that exercise them
# (engine graphs and captures, CUPTI attribution, NVTX, the deferred-norm engine) and one recorded
# mixed run's attribution, in one device call.   OUT=DIR bash scripts/gpu-hooks-check.sh
set -u
cd "$(dirname "$0")/.."
LOGS=/tmp/hooks-logs; TARGETS="lantern lantern_gpu_tests"; source scripts/lib/device-built.sh
timeout 150 $T --gtest_filter='EngineGpu.*:CuptiGpu.*:NvtxCupti.*:DeferredNormGpu.*' > "$OUT/tests.log" 2>&1
echo "tests rc=$?"; grep -E "^\[  PASSED|^\[  FAILED|SKIPPED \] [0-9]" "$OUT/tests.log" | tail -6
timeout 60 $L generate --model "$M" --device cuda --quiet --prompt-ids "$(seq -s, 100 400)" --repeat 6 --max-new-tokens 16 \
  --ignore-eos --max-batch-tokens 512 --record /tmp/rec --cupti-all-steps --ids --out /dev/null > /tmp/gen.log 2>&1
echo "record rc=$?"; $L inspect /tmp/rec --by op --top 30 > "$OUT/inspect.txt" 2>&1
grep -E "head_gather|attention_head|unattributed|violations|leaked" "$OUT/inspect.txt" | head -8
grep -o '"unattributed_kernels": *[0-9]*' /tmp/rec/metrics.json
