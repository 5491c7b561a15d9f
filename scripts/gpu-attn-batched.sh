#!/usr/bin/env bash
# Batched decode attention on the H200 (issue 14, session 9), in one call: `lantern bench` at batch
# 48-256 (prompt 128, 64 decode steps; the table has host and Model::run time per step) for each
# SETS entry ("NAME:ENV=V,...:KERNELS", ENV and KERNELS optional), ROUNDS rounds interleaved; then,
# with NCU=1, Nsight Compute on one attention_decode kernel (NCU_KERNEL, a regex) at batch 64 for the
# first NCU_N (2) sets.
#   LANTERN=... MODEL=... SETS="default:: split1:LANTERN_PIPE_MAX_SPLITS=1:" bash scripts/gpu-attn-batched.sh OUT
set -u
cd "$(dirname "$0")/.."
source scripts/lib/gpu-bins.sh "$1"
SETS=${SETS:-"default:: split1:LANTERN_PIPE_MAX_SPLITS=1: v7::attention_decode=7"}
BATCHES=${BATCHES:-48,64,128,256}
parse() {  # parse SET -> name, envs (env's NAME=V arguments), kargs (--kernels K or nothing)
  IFS=: read -r name envs kernels <<<"$1"
  envs=(${envs//,/ }); kargs=(${kernels:+--kernels "$kernels"})
}
for round in $(seq 1 "${ROUNDS:-2}"); do
  for set in $SETS; do
    parse "$set"
    step "bench_${name}_r$round" 200 env "${envs[@]}" "$L" bench --model "$M" --device cuda --quiet --batch "$BATCHES" \
      --prompt-len 128 --decode-steps 64 --json "$LOGS/bench_${name}_r$round.json" "${kargs[@]}"
    echo "== $set round $round"; grep -E "^ *[0-9]+ +[0-9]+ [|]" "$LOGS/bench_${name}_r$round.log"
  done
done
if [[ ${NCU:-0} == 1 ]]; then
  for set in $(echo $SETS | cut -d" " -f1-"${NCU_N:-2}"); do
    parse "$set"
    step "ncu_$name" 200 env "${envs[@]}" ncu --kernel-name "regex:${NCU_KERNEL:-decode_pipe|decode_batched}" --launch-skip 40 --launch-count 1 \
      --section SpeedOfLight --section Occupancy --section LaunchStats --section MemoryWorkloadAnalysis \
      --section WarpStateStats --section SchedulerStats \
      "$L" bench --model "$M" --device cuda --quiet --batch 64 --prompt-len 128 --decode-steps 16 "${kargs[@]}"
    echo "== ncu $set"; grep -E "Duration|DRAM Throughput|Memory Throughput|Achieved Occupancy|Theoretical Occupancy|Block Limit|Registers Per|Grid Size|Stall|Warp Cycles Per Issued|Eligible Warps|No Eligible" "$LOGS/ncu_$name.log" | head -40
  done
fi
echo "==== summary"; cat "$LOGS/summary.txt"
