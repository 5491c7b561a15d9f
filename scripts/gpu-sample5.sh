#!/usr/bin/env bash
# sample.5 cluster_lean on the H200 in one device call (issue 14, session 10): the
# SampleGpu tests (every variant against the CPU reference; sample.4 and sample.5
# against sample.3 token for token; chi-square), the sample.4 / sample.5 kernel
# benchmark (default policy; then sample.5 forced to 8 blocks per row at b = 1/8
# and to 8 / 16 at b = 64), sampled decode in the engine (T 0.8, top_p 0.95) with
# each, and Nsight Compute's duration of one b = 1 launch of each. With PROBE=DIR
# also the phase probes there (scripts/probe/build-sample-probes.sh: the two
# kernels with %globaltimer stamps between phases, DIR/probe and DIR/probe_lean).
# Logs in $OUT/logs.
#   B=build/default bash scripts/gpu-sample5.sh
set -u
cd "$(dirname "$0")/.."
OUT="${OUT:-/tmp/lantern-sample5-out}"
LOGS=$OUT/logs
mkdir -p "$LOGS"
B=${B:-build/default}
LANTERN=$B/bin/lantern TESTS=$B/tests/lantern_gpu_tests KBENCH=$B/bench/bench_kernels
MODEL=models/llama-3.2-1b
source scripts/gpu-step.sh  # step NAME LIMIT_S command...
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.mem --format=csv >"$LOGS/gpu.txt" 2>&1
if [[ -n ${PROBE:-} ]]; then
  step probe_gather 30 "$PROBE/probe"
  step probe_lean 30 "$PROBE/probe_lean"
fi
step sample_tests 120 $TESTS --gtest_filter="${TEST_FILTER:-SampleGpu.*}"
step kbench 60 $KBENCH --benchmark_filter='^sample\.[45]'
LANTERN_SAMPLE_LEAN_CLUSTER=8 step kbench_l8 20 $KBENCH --benchmark_filter='^sample\.5.*b=(1|8|64)/'
LANTERN_SAMPLE_LEAN_CLUSTER=16 step kbench_l16 20 $KBENCH --benchmark_filter='^sample\.5.*b=64/'
if [[ ! -f $MODEL/model.safetensors ]]; then
  step synth 60 $LANTERN synth --preset llama-3.2-1b --out $MODEL --seed 0 --tokenizer-dir .device/llama3
fi
for v in 4 5; do  # sampled decode steps, graphs on
  step engine_s$v 40 $LANTERN bench --model $MODEL --device cuda --quiet --batch 1,64 --prompt-len 128 \
    --decode-steps 64 --temperature 0.8 --top-p 0.95 --kernels sample=$v
done
NCU=$(command -v ncu || echo /usr/local/cuda/bin/ncu)
for v in 4 5; do
  step ncu_s$v 40 $NCU --clock-control none --cache-control all -k regex:sample_ --launch-skip 3 --launch-count 1 \
    --section SpeedOfLight --section LaunchStats --section Occupancy $KBENCH --benchmark_filter="^sample\.$v.*b=1/top_k=0/"
done
echo "==== summary"; cat "$LOGS/summary.txt"; cat "$LOGS/gpu.txt"
for f in probe_gather probe_lean; do [[ -f $LOGS/$f.log ]] && { echo "== $f"; cat "$LOGS/$f.log"; }; done
grep -hE "^\[sample\]|tests ran|PASSED|FAILED|Failure|rror|row [0-9]+|Expected|Which is" "$LOGS"/sample_tests.log | head -60
for f in kbench kbench_l8 kbench_l16; do
  [[ -f $LOGS/$f.log ]] && { echo "== $f"; grep -E "^sample\.[0-9.a-z_]+ b=" "$LOGS/$f.log" | head -40; }
done
for v in 4 5; do
  [[ -f $LOGS/engine_s$v.log ]] && { echo "== engine sample=$v"; tail -6 "$LOGS/engine_s$v.log"; }
  [[ -f $LOGS/ncu_s$v.log ]] && { echo "== ncu sample.$v b=1 top_p 0.95"; grep -E "Duration|Cluster Size|Dynamic Shared|Registers Per|SM Frequency" "$LOGS/ncu_s$v.log" | head -8; }
done
