#!/usr/bin/env bash
# The prefill's small ops on the H200 (issue 14, session 28), in one device call: builds there
# (scripts/device-ensure-built.sh), then per stage
#   tests  -- the kernel tests of the ops under change and the engine / harness GPU tests
#   kbench -- bench_kernels for the families under change (cold L2, event-timed)
#   share  -- one recorded 512-token prompt (3 prefills, CUPTI on every step): `lantern inspect
#             --phase prefill --by op` and scripts/prefill_gaps.py's per-op wall shares
#   spread -- $SPREAD_N (4) processes, each recording a 512-token prompt 3 times (each times its
#             own GEMM plans): per process the last prefill's span, idle time, wall shares and gaps;
#             SPREAD_ENV, evaluated per process ($i), sets its environment: 'LANTERN_X=$((i % 2))'
#   cpus   -- the 512-token prefill (`lantern bench`, plans pinned) in one process per CPU of
#             $CPUS (default every second one), each pinned there with taskset, with
#             LANTERN_GRAPH_LAUNCH_LOG=1 (the host time of each prefill graph's cudaGraphLaunch) and
#             LANTERN_STEP_GPU_LOG=1 (each step's stream time, event-timed: host-timed minus this is
#             the host's share)
#   clocks -- the NVML clock tests, then one bench process of $CLOCK_PROMPTS 512-token points
#             (with LANTERN_STEP_GPU_LOG=1): per point the prefill and the GPU's clocks and
#             power-cap time over it (bench --json points[].gpu_clocks)
#   suite  -- the whole lantern_gpu_tests
#   ab     -- scripts/gpu-ab.sh $AB_A vs $AB_B (default LANTERN_SWIGLU_ROWS=0 vs =1) on 512- and
#             2048-token prefills, plans pinned; nvidia-smi samples the clocks meanwhile
# Logs in /tmp/prefill-ops-logs (the device tool brings back at most 8 files); a summary on stdout.
#   OUT=DIR [AB_A=... AB_B=... KERNELS=...] bash scripts/gpu-prefill-ops.sh [tests] [kbench] [share] [ab]
set -u
cd "$(dirname "$0")/.."
LOGS=/tmp/prefill-ops-logs; TARGETS="lantern lantern_gpu_tests bench_kernels"; source scripts/lib/device-built.sh
TESTS=${TESTS:-'SwigluGpu.*:GateUpSwigluGpu.*:AddRmsnormGpu.*:RopeKvWriteGpu.*:AttentionPrefillGpu.*:EngineGpu.*:CuptiGpu.*:NvtxCupti.*:DeferredNormGpu.*'}
KFILTER=${KFILTER:-'swiglu|add_rmsnorm|rope_kv_write'}
for st in ${*:-tests kbench share ab}; do
  t0=$(date +%s)
  case $st in
    tests)
      timeout 400 $T --gtest_filter="$TESTS" > "$OUT/tests.log" 2>&1
      echo "tests rc=$?"; grep -E "^\[  PASSED|^\[  FAILED|SKIPPED \] [0-9]" "$OUT/tests.log" | tail -12
      grep -B2 -A8 "Failure" "$OUT/tests.log" | head -40 ;;
    kbench)
      timeout 200 $KB --benchmark_filter="$KFILTER" > "$LOGS/kbench.log" 2>&1
      echo "kbench rc=$?"; grep -E "$KFILTER" "$LOGS/kbench.log" | grep -v "/n=" | tail -30 | tee "$OUT/kbench.txt" ;;
    share)
      rm -rf /tmp/rec_share
      timeout 60 $L generate --model "$M" --device cuda --quiet --prompt-ids "$(seq -s, 100 611)" \
        --max-new-tokens 2 --ignore-eos --repeat 3 --max-seqs 1 --max-batch-tokens 512 \
        ${KERNELS:+--kernels "$KERNELS"} --record /tmp/rec_share --cupti-all-steps --ids --out /dev/null \
        > "$LOGS/rec.log" 2>&1
      echo "record rc=$?"
      $L inspect /tmp/rec_share --phase prefill --by op --gaps --top 24 > "$OUT/inspect.txt" 2>&1
      python3 scripts/prefill_gaps.py --dump-layer "${DUMP_LAYER:-3}" /tmp/rec_share > "$OUT/share.txt" 2>&1
      grep -E "^step|GPU:" "$OUT/share.txt" | head -8
      awk '/ op +kernels/{n++} n==3' "$OUT/share.txt" | grep -v "^  api" | head -60 ;;
    spread)
      for i in $(seq "${SPREAD_N:-4}"); do
        rm -rf /tmp/rec_sp$i
        env ${SPREAD_ENV:+$(eval echo "$SPREAD_ENV")} timeout 60 $L generate --model "$M" --device cuda --quiet \
          --prompt-ids "$(seq -s, 100 611)" --max-new-tokens 2 --ignore-eos --repeat 3 --max-seqs 1 --max-batch-tokens 512 \
          ${KERNELS:+--kernels "$KERNELS"} --record /tmp/rec_sp$i --cupti-all-steps --ids --out /dev/null \
          > "$LOGS/rec_sp$i.log" 2>&1 || { echo "process $i rc=$?"; tail -3 "$LOGS/rec_sp$i.log"; }
        python3 scripts/prefill_gaps.py /tmp/rec_sp$i > "$LOGS/spread$i.txt" 2>&1
        echo "== process $i ${SPREAD_ENV:+$(eval echo "$SPREAD_ENV")}"; awk '/^step 4/{n=1} n' "$LOGS/spread$i.txt" | grep -vE "^  api|host us" | head -24
      done > "$OUT/spread.txt"
      grep -E "^== |GPU:|idle gaps by kernel" "$OUT/spread.txt" ;;
    cpus)
      { nproc; lscpu | grep -E "NUMA|Model name|Socket|Core|Thread|MHz"; grep Cpus_allowed_list /proc/self/status
        nvidia-smi topo -m 2>&1 | head -6; } > "$OUT/cpus.txt"
      timeout 100 $L bench --model "$M" --device cuda --batch 1 --prompt-len 512 --decode-steps 2 --quiet \
        --json "$LOGS/cpu-plans.json" > "$LOGS/cpu-plans.log" 2>&1
      for c in ${CPUS:-$(seq 0 2 $(( $(nproc) - 1 )))} none; do
        pin=(taskset -c "$c"); [[ $c == none ]] && pin=()
        LANTERN_GRAPH_LAUNCH_LOG=1 LANTERN_STEP_GPU_LOG=1 timeout 100 "${pin[@]}" $L bench --model "$M" --device cuda \
          --batch 1 --prompt-len ${CPU_PROMPTS:-512,512,512,512} --decode-steps 2 --quiet --gemm-plans "$LOGS/cpu-plans.json" \
          --json "$LOGS/cpu-$c.json" > "$LOGS/cpu-$c.log" 2>&1
        echo "cpu $c rc=$?: prefill $(python3 -c "import json,sys; print(' '.join('%.3f' % p['prefill_ms'] for p in json.load(open(sys.argv[1]))['points']))" "$LOGS/cpu-$c.json" 2>&1 | tail -1) ms; launch us: $(grep -o "rows, [0-9]* ops) [0-9.]*" "$LOGS/cpu-$c.log" | awk '{printf "%s ", $4}')"
        echo "   gpu ms of the 512-row steps: $(grep -E "^step gpu: 512 rows" "$LOGS/cpu-$c.log" | awk '{printf "%s ", $8}')"
      done | tee -a "$OUT/cpus.txt" ;;
    power)
      # Is the GPU power-capped during back-to-back prefills? Limits and throttle reasons before
      # and after, clocks / power / reasons every 20 ms, each step's GPU time with a timestamp.
      nvidia-smi -q -d POWER,PERFORMANCE > "$LOGS/power-before.txt" 2>&1
      nvidia-smi --query-gpu=timestamp,clocks.sm,power.draw,clocks_event_reasons.active --format=csv,noheader \
        -lms 20 > "$LOGS/power-smi.csv" 2>&1 &
      smi=$!
      LANTERN_STEP_GPU_LOG=1 timeout 100 $L bench --model "$M" --device cuda --batch 1 --decode-steps 2 --quiet \
        --prompt-len ${POWER_PROMPTS:-512,512,512,512,512,512,512,512,512,512,2048,2048,512,512} > "$LOGS/power-bench.log" 2>&1
      sleep 0.3; kill $smi 2>/dev/null
      nvidia-smi -q -d POWER,PERFORMANCE > "$LOGS/power-after.txt" 2>&1
      grep -iE "limit|draw|capping|slowdown|Active|Idle" "$LOGS/power-after.txt" | head -30 | tee "$OUT/power.txt"
      python3 - "$LOGS/power-bench.log" "$LOGS/power-smi.csv" <<'PY' | tee -a "$OUT/power.txt"
import datetime, re, sys
steps = [(float(m.group(3)), int(m.group(1)), float(m.group(2)))
         for m in re.finditer(r"step gpu: (\d+) rows, \d+ logit rows, ([\d.]+) ms .*at ([\d.]+)\)", open(sys.argv[1]).read())]
smi = []
for line in open(sys.argv[2]):
    p = [x.strip() for x in line.split(",")]
    try:
        t = datetime.datetime.strptime(p[0], "%Y/%m/%d %H:%M:%S.%f").timestamp()
        smi.append((t, p[1], p[2], p[3]))
    except (ValueError, IndexError):
        pass
for t, rows, ms in steps:
    if rows < 256: continue
    near = [s for s in smi if t - ms / 1e3 - 0.03 <= s[0] <= t + 0.01]
    print(f"{rows:5d} rows {ms:7.3f} ms | " + "; ".join(f"{c} {w} {r}" for _, c, w, r in near[-4:]))
print("smi samples:", len(smi), "(local clock vs the engine's: both this machine's)")
PY
      ;;
    suite)
      timeout 400 $T > "$OUT/suite.log" 2>&1
      echo "suite rc=$?"; grep -E "^\[  PASSED|^\[  FAILED|SKIPPED \] [0-9]|tests ran" "$OUT/suite.log" | tail -12 ;;
    clocks)
      timeout 120 $T --gtest_filter='GpuClocksGpu.*:CuptiGpu.SessionRecordsACudaRun' > "$OUT/clock-tests.log" 2>&1
      echo "clock tests rc=$?"; grep -E "^\[  PASSED|^\[  FAILED|gpu-clocks\]" "$OUT/clock-tests.log"
      LANTERN_STEP_GPU_LOG=1 timeout 150 $L bench --model "$M" --device cuda --batch 1 --decode-steps 2 \
        --prompt-len "${CLOCK_PROMPTS:-$(printf '512,%.0s' $(seq 15))512}" --json "$LOGS/clocks.json" \
        > "$LOGS/clocks.log" 2> "$LOGS/clocks.err"
      echo "bench rc=$?"; grep -E "throttled|^ +1 +512" "$LOGS/clocks.log" | head -40 > "$OUT/clocks.txt"
      python3 - "$LOGS/clocks.json" "$LOGS/clocks.err" <<'PY' | tee -a "$OUT/clocks.txt"
import json, re, sys
pts = json.load(open(sys.argv[1]))["points"]
gpu = [float(m.group(1)) for m in re.finditer(r"step gpu: 512 rows, 1 logit rows, ([\d.]+) ms", open(sys.argv[2]).read())]
gpu = gpu[-len(pts):]  # the warm-up's prefill comes first
print("point  prefill ms  step gpu ms  SM MHz mean / min (samples)  power cap ms / point ms")
for i, p in enumerate(pts):
    c = p.get("gpu_clocks", {})
    print(f"{i:5d} {p['prefill_ms']:10.3f} {gpu[i] if i < len(gpu) else float('nan'):11.3f}   "
          f"{c.get('sm_mean_mhz', 0):7.1f} / {c.get('sm_min_mhz')} ({c.get('sm_samples')})   "
          f"{c.get('power_cap_ms', 0):.1f} / {1e3 * c.get('seconds', 0):.0f}")
PY
      ;;
    ab)
      nvidia-smi --query-gpu=timestamp,clocks.sm,clocks.mem,power.draw,temperature.gpu,clocks_event_reasons.active \
        --format=csv -lms 250 > "$LOGS/smi.csv" 2>&1 &
      smi=$!
      OUT="$LOGS/ab" LANTERN=$L bash scripts/gpu-ab.sh -r "${ROUNDS:-3}" "${AB_A:-LANTERN_SWIGLU_ROWS=0}" \
        "${AB_B:-LANTERN_SWIGLU_ROWS=1}" --batch 1 --prompt-len 512,512,512,2048 --decode-steps 2 2>&1 \
        | tail -16 | tee "$OUT/ab.txt"
      kill $smi 2>/dev/null
      python3 - "$LOGS/smi.csv" <<'PY' | tee "$OUT/smi.txt"
import collections, sys
rows = [l.strip().split(", ") for l in open(sys.argv[1]) if l[:1].isdigit()]
for col, name in ((1, "sm clock"), (2, "mem clock"), (3, "power"), (4, "temp"), (5, "event reasons")):
    c = collections.Counter(r[col] for r in rows if len(r) > col)
    print(f"{name}: {len(rows)} samples, " + ", ".join(f"{k} x{v}" for k, v in c.most_common(6)))
PY
      ;;
  esac
  echo "[$st] $(( $(date +%s) - t0 )) s"
done
