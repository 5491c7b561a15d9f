#!/usr/bin/env bash
# The pruned last layer (--kernels prune_last=on|off; issue 14) on the H200, in one device call:
# builds there (scripts/device-ensure-built.sh), then per stage
#   tests   -- the engine GPU tests (EngineGpu.*: pruned vs full, prefill graphs, graphs vs eager)
#   ab      -- scripts/gpu-ab.sh prune_last=off vs on: 512-token prefills (and 128 / 2048), plans pinned
#   tput    -- experiments/throughput-256.json with each setting, interleaved (tok/s, TTFT, TPOT)
#   profile -- a recorded 512-token prefill per setting, `lantern inspect --phase prefill --by op`
# Logs in /tmp/prune-logs (the device tool brings back at most 8 files); a summary on stdout.
#   OUT=DIR bash scripts/gpu-prune.sh [tests] [ab] [tput] [profile]
set -u
cd "$(dirname "$0")/.."
LOGS=/tmp/prune-logs; TARGETS="lantern lantern_gpu_tests"; source scripts/lib/device-built.sh
for st in ${*:-tests ab tput profile}; do
  t0=$(date +%s)
  case $st in
    tests)
      timeout 400 $T --gtest_filter='EngineGpu.*' > "$OUT/engine-tests.log" 2>&1
      echo "tests rc=$?"; grep -E "^\[  (PASSED|FAILED)|^\[  FAILED|\[engine-gpu\] pruned|tests? ran" "$OUT/engine-tests.log" | tail -20
      grep -A6 "Failure" "$OUT/engine-tests.log" | head -30 ;;
    ab)
      OUT="$LOGS/ab" LANTERN=$L bash scripts/gpu-ab.sh -r 3 prune_last=off prune_last=on --batch 1 \
        --prompt-len 128,512,512,2048 --decode-steps 2 2>&1 | tail -16 | tee "$OUT/ab.txt" ;;
    tput)
      for r in 1 2; do
        for v in off on; do
          timeout 200 $L run experiments/throughput-256.json --set model.path="$M" --set model.preset=auto \
            --set kernels.prune_last=$v --out "$LOGS/tput-$v-$r" > "$LOGS/tput-$v-$r.log" 2>&1
          echo "throughput-256 prune_last=$v round $r rc=$?: $(grep -hE "tokens/s" "$LOGS/tput-$v-$r.log" | head -1)"
          grep -hE "TTFT" "$LOGS/tput-$v-$r.log" | head -1
        done
      done ;;
    profile)
      for v in off on; do
        rm -rf /tmp/rec-$v
        timeout 60 $L generate --model "$M" --device cuda --quiet --prompt-ids "$(seq -s, 100 611)" \
          --max-new-tokens 2 --ignore-eos --repeat 3 --max-seqs 1 --max-batch-tokens 512 --kernels prune_last=$v \
          --record /tmp/rec-$v --cupti-all-steps --ids --out /dev/null > "$LOGS/rec-$v.log" 2>&1
        $L inspect /tmp/rec-$v --phase prefill --by op --top 20 > "$OUT/inspect-$v.txt" 2>&1
        echo "== prune_last=$v"; grep -E "^  [a-z_]+ " "$OUT/inspect-$v.txt" | head -20
        grep -E "violations|leaked|unattributed" "$OUT/inspect-$v.txt" | head -3
      done ;;
  esac
  echo "[$st] $(( $(date +%s) - t0 )) s"
done
