#!/usr/bin/env bash
# Cost curves for docs/performance.md (issue 14), on the GPU machine: decode step
# time against batch (1 ... 256, prompt 128), against context (128 ... 32 k at
# batch 1), and prefill time against prompt length (16 ... 8 k, one request),
# each point with its floor and share of roofline. `lantern bench` with lists:
# one engine per curve, sized for its largest point; the roofline (copy
# bandwidth, GEMM peak) is measured in each process. Decode floor = weights + KV
# bytes at the copy bandwidth; prefill floor = max(FLOPs at the GEMM peak,
# weights at the copy bandwidth). The prefill list runs twice: the second pass
# is warm (cuBLAS has seen each shape), the one to read.
#   LANTERN=build/default/bin/lantern MODEL=models/llama-3.2-1b bash scripts/perf-curves.sh [OUT_DIR]
set -u
cd "$(dirname "$0")/.."
L=${LANTERN:-build/default/bin/lantern}
M=${MODEL:-models/llama-3.2-1b}
O=${1:-/tmp/perf-curves}
mkdir -p "$O"
run() {  # run NAME LIMIT_S args...
  local name=$1 limit=$2; shift 2
  local t0=$(date +%s)
  timeout "$limit" "$L" bench --model "$M" --device cuda --quiet --json "$O/$name.json" "$@" >"$O/$name.txt" 2>"$O/$name.err"
  echo "== $name: rc=$? $(( $(date +%s) - t0 ))s"
  cat "$O/$name.txt"
}
# --max-batch-tokens 8192: the batch prefills in a few steps, so every point has whole-batch decode
# steps (with the default 512 and 16 steps, batches of 64 and more had none: scripts/bench_step_mix.py).
run batch 150 --batch 1,2,4,8,16,32,64,128,256 --prompt-len 128 --decode-steps 32 --max-batch-tokens 8192
run context 150 --batch 1 --prompt-len 128,256,512,1024,2048,4096,8192,16384,32768 --decode-steps 16
P=16,32,64,128,256,512,1024,2048,4096,8192
run prefill 120 --batch 1 --prompt-len $P,$P --decode-steps 2
