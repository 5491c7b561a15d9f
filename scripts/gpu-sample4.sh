#!/usr/bin/env bash
# The sampler helper's one-call check on the H200 (issue 14, session 7): the
# SampleGpu tests (every sample variant against the CPU reference, sample.4
# against sample.3 token for token, chi-square), the sample.3 / sample.4 kernel
# benchmark (default policy, then sample.4 forced to 16 blocks per row at b = 1/8
# and 4 at b = 64/256), and sampled decode in the engine (T 0.8, top_p 0.95) with
# each of the two; `profile`: Nsight Compute on one b = 1 launch of each (the
# kernel's own duration; sample.4's stalls per source line) and the sample op's
# CUPTI time per call in recorded sampled decodes (b = 1, 64). Logs in $OUT/logs.
#   B=.wt/sampler BUDGET_S=150 bash scripts/gpu-sample4.sh [tests kbench engine profile]
set -u
cd "$(dirname "$0")/.."
[[ -f scripts/gpu-step.sh ]] || cd ..  # staged copy: .wt/NAME/gpu-sample4.sh
OUT="${OUT:-/tmp/lantern-sample4-out}"
LOGS=$OUT/logs
mkdir -p "$LOGS"
STAGES=" ${*:-tests kbench engine} "
has() { [[ $STAGES == *" $1 "* ]]; }
B=${B:-build/default}
LANTERN=$B/bin/lantern TESTS=$B/tests/lantern_gpu_tests KBENCH=$B/bench/bench_kernels
MODEL=models/llama-3.2-1b
source scripts/gpu-step.sh  # step NAME LIMIT_S command...
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.mem --format=csv >"$LOGS/gpu.txt" 2>&1
if has engine && [[ ! -f $MODEL/model.safetensors ]]; then
  (step synth 60 $LANTERN synth --preset llama-3.2-1b --out $MODEL --seed 0 --tokenizer-dir .device/llama3; \
     touch $LOGS/synth.done) &
else
  touch $LOGS/synth.done
fi
has tests && step sample_tests 75 $TESTS --gtest_filter="${TEST_FILTER:-SampleGpu.*}"
if has kbench; then
  step kbench 30 $KBENCH --benchmark_filter='^sample\.[34]'
  LANTERN_SAMPLE_GATHER_CLUSTER=16 step kbench_g16 20 $KBENCH --benchmark_filter='^sample\.4.*b=(1|8)/'
  LANTERN_SAMPLE_GATHER_CLUSTER=4 step kbench_g4 20 $KBENCH --benchmark_filter='^sample\.4.*b=(64|256)/'
fi
for i in $(seq 60); do [[ -f $LOGS/synth.done ]] && break; sleep 1; done
if has engine; then  # sampled decode steps, graphs on, the sampler of each variant
  for v in ${ENGINE_VARIANTS:-3 4}; do
    step engine_s$v 35 $LANTERN bench --model $MODEL --device cuda --quiet --batch 1,64 --prompt-len 128 \
      --decode-steps 64 --temperature 0.8 --top-p 0.95 --bandwidth-gbs 4240 --kernels sample=$v
  done
fi
if has profile; then
  # Nsight Compute on one b = 1 launch each (clocks as found, caches flushed):
  # the kernel's own duration, and sample.4's stalls per CUDA source line.
  NCU=$(command -v ncu || echo /usr/local/cuda/bin/ncu)
  for spec in "4 0" "3 0" "4 50"; do
    set -- $spec
    sec=(--section SpeedOfLight --section LaunchStats)
    [[ $1$2 == 40 ]] && sec+=(--section WarpStateStats --section SourceCounters --import-source yes)
    step ncu_s$1_k$2 30 $NCU --clock-control none --cache-control all -k regex:sample_ --launch-skip 3 \
      --launch-count 1 "${sec[@]}" -f -o "$LOGS/ncu_s$1_k$2" $KBENCH --benchmark_filter="^sample\.$1.*b=1/top_k=$2/"
    $NCU -i "$LOGS/ncu_s$1_k$2.ncu-rep" --page details >"$LOGS/ncu_s$1_k$2.txt" 2>&1
  done
  $NCU -i "$LOGS/ncu_s4_k0.ncu-rep" --page source --csv --print-source cuda >"$LOGS/src_s4_k0.csv" 2>&1 ||
    $NCU -i "$LOGS/ncu_s4_k0.ncu-rep" --page source --csv >"$LOGS/src_s4_k0.csv" 2>&1
  rm -f "$LOGS"/*.ncu-rep
  # The engine: CUPTI on every sampled decode step, the sample op's time per call.
  P=$(printf 'The paged KV cache stores keys and values in blocks of sixteen tokens. %.0s' $(seq 8))
  for v in ${ENGINE_VARIANTS:-3 4}; do
    for b in 1 64; do
      rm -rf /tmp/run_s${v}_b$b
      step record_s${v}_b$b 25 $LANTERN generate --model $MODEL --device cuda --prompt "$P" --repeat $b \
        --max-seqs 64 --max-new-tokens 32 --ignore-eos --temperature 0.8 --top-p 0.95 --seed 7 \
        --kernels sample=$v --record /tmp/run_s${v}_b$b --cupti-all-steps --quiet
      step inspect_s${v}_b$b 15 $LANTERN inspect /tmp/run_s${v}_b$b --phase decode --by op --top 6
    done
  done
fi
echo "==== summary"; cat "$LOGS/summary.txt"; cat "$LOGS/gpu.txt"
grep -hE "^\[sample\]|tests ran|PASSED|FAILED|Failure|rror|row [0-9]+|Expected|Which is" "$LOGS"/sample_tests.log 2>/dev/null | head -80
for f in kbench kbench_g16 kbench_g4; do
  [[ -f $LOGS/$f.log ]] && { echo "== $f"; grep -E "^sample" "$LOGS/$f.log" | head -40; }
done
for v in ${ENGINE_VARIANTS:-3 4}; do
  [[ -f $LOGS/engine_s$v.log ]] && { echo "== engine sample=$v"; tail -8 "$LOGS/engine_s$v.log"; }
done
for f in "$LOGS"/ncu_s*.txt; do
  [[ -f $f ]] && { echo "== $(basename $f)"; grep -E "Duration|Cluster|Shared Memory Config|Dynamic Shared|SM Frequency" "$f" | head -8; }
done
for f in "$LOGS"/inspect_*.log; do [[ -f $f ]] && { echo "== $(basename $f .log)"; head -16 "$f"; }; done
