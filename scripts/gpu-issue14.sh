#!/usr/bin/env bash
# The measures of issue 14's goal table (docs/performance.md, "Where issue 14 stands"), in one
# call on the GPU machine, each with the roofline measured in its process:
#   batch 1 / 64 / 256 decode step (prompt 128, 128 decode steps), the same with OLD_KERNELS (default
#   attention_decode=8, the default before session 7), one 512-token prefill (three times, warm; then with
#   OLD_KERNELS, then the default again), batch 1 at context 32 k, throughput-256 (the
#   experiment, 2 repetitions), and the sampler's per-call time (bench_kernels, sample rows).
#   LANTERN=... KBENCH=... MODEL=models/llama-3.2-1b bash scripts/gpu-issue14.sh [OUT_DIR]
# Needs a model (lantern synth --preset llama-3.2-1b --seed 0). Logs and JSON in OUT_DIR.
set -u
cd "$(dirname "$0")/.."
L=${LANTERN:-build/default/bin/lantern}
KB=${KBENCH:-build/default/bench/bench_kernels}
M=${MODEL:-models/llama-3.2-1b}
LOGS=${1:-/tmp/issue14}
mkdir -p "$LOGS"
source scripts/gpu-step.sh  # step NAME LIMIT_S command...
bench() {  # bench NAME LIMIT_S args...
  local name=$1 limit=$2; shift 2
  step "$name" "$limit" "$L" bench --model "$M" --device cuda --quiet --json "$LOGS/$name.json" "$@"
  grep -E "^ *[0-9]+ +[0-9]+ [|]|batch|decode step|prefill|roofline|host per" "$LOGS/$name.log" | grep -v "^bench: " | head -40
}
bench decode 200 --batch 1,64,256 --prompt-len 128 --decode-steps 128
OLD=${OLD_KERNELS:-attention_decode=8}
bench decode_old 200 --batch 1,64,256 --prompt-len 128 --decode-steps 128 --kernels "$OLD"
bench prefill512 120 --batch 1 --prompt-len 512,512,512 --decode-steps 2
bench prefill512_old 120 --batch 1 --prompt-len 512,512,512 --decode-steps 2 --kernels "$OLD"
bench prefill512_again 120 --batch 1 --prompt-len 512,512,512 --decode-steps 2
bench ctx32k 150 --batch 1 --prompt-len 32768 --decode-steps 16
bench ctx32k_old 150 --batch 1 --prompt-len 32768 --decode-steps 16 --kernels "$OLD"
step tput256 240 "$L" run experiments/throughput-256.json --set model.path="$M" --set model.preset=auto \
  --set repetitions=2 --set warmup=1 --out "$LOGS/tput256"
grep -iE "tok/s|tokens/s|TPOT|TTFT" "$LOGS/tput256.log" | head -12
if [[ -x $KB ]]; then
  step sample 90 "$KB" --benchmark_filter='^sample.*/b=1/'
  grep -E "^sample" "$LOGS/sample.log" | head -20
fi
echo "==== summary"; cat "$LOGS/summary.txt"
