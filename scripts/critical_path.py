#!/usr/bin/env python3
"""Where a decode step's wall time goes, op by op, from a recorded run's kernels.csv.

PDL-launched kernels start early and wait (griddepcontrol.wait), so their CUPTI durations overlap
and over-count. This charges each kernel only the time by which it moved the step's end: kernels
of one step sorted by start, kernel i is charged end_i - max(end of kernels before it) (>= 0), and
the gap before the first kernel is charged to "(idle)". Summed per op over a step's layers, median
over the steps of the phase.

Beside each op its floor: per kernel the larger of its bytes at the copy bandwidth and its FLOPs
at the GEMM peak (the run's manifest roofline, measured in the recording process; or
--bandwidth-gbs / --tflops), summed over the op's kernels of a step, median over the steps; and
the gap, on the path minus floor -- the table docs/performance.md's "where the time goes"
sections compute by hand. (A kernel that streams its weights before its PDL wait can sit on the
path for less than its floor: a negative gap.)

  python3 scripts/critical_path.py RUN_DIR [--phase decode] [--skip-steps 2] [--decode-seqs N]
                                   [--bandwidth-gbs X] [--tflops Y] [--source cupti|host]
"""
import argparse
import csv
import json
import collections
import statistics
import sys


def roofline(run_dir, bw, tf):
    """(copy GB/s, GEMM TFLOP/s) for the floors: the arguments, else the run's manifest (0: none)."""
    if bw and tf:
        return bw, tf
    try:
        with open(f"{run_dir}/manifest.json") as f:
            r = json.load(f).get("roofline") or {}
    except (OSError, ValueError):
        r = {}
    return bw or float(r.get("copy_gb_per_s") or 0.0), tf or float(r.get("gemm_tflop_per_s") or 0.0)


def kernel_floor_us(row, bw, tf):
    """The larger of a kernel row's bytes at bw GB/s and its FLOPs at tf TFLOP/s, in us."""
    def num(key):
        try:
            return float(row.get(key) or 0.0)
        except ValueError:
            return 0.0
    by_bytes = num("bytes") / (bw * 1e3) if bw else 0.0
    by_flops = num("flops") / (tf * 1e6) if tf else 0.0
    return max(by_bytes, by_flops)


def whole_batch_steps(run_dir, seqs):
    """Steps whose phase range in trace.json says: `seqs` decoding, none prefilling."""
    with open(f"{run_dir}/trace.json") as f:
        trace = json.load(f)
    events = trace["traceEvents"] if isinstance(trace, dict) else trace
    return {e["args"]["step"] for e in events
            if e.get("cat") == "phase" and e.get("args", {}).get("decode_seqs") == seqs
            and e["args"].get("prefill_seqs", 0) == 0}


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("run_dir")
    ap.add_argument("--phase", default="decode")
    ap.add_argument("--skip-steps", type=int, default=2, help="first steps of the phase to ignore (warm-up)")
    ap.add_argument("--decode-seqs", type=int, default=0,
                    help="only steps that decode exactly this many sequences and prefill none (trace.json's "
                         "phase ranges), e.g. the whole batch; 0: every step of the phase")
    ap.add_argument("--bandwidth-gbs", type=float, default=0.0,
                    help="copy bandwidth for the floors (default: the manifest's roofline.copy_gb_per_s)")
    ap.add_argument("--tflops", type=float, default=0.0,
                    help="GEMM peak for the floors (default: the manifest's roofline.gemm_tflop_per_s)")
    ap.add_argument("--source", default="cupti", choices=["cupti", "host"],
                    help="which rows: CUPTI's GPU kernels (default) or the host-timed ops of a CPU run")
    args = ap.parse_args()
    bw, tf = roofline(args.run_dir, args.bandwidth_gbs, args.tflops)
    only = whole_batch_steps(args.run_dir, args.decode_seqs) if args.decode_seqs > 0 else None
    steps = collections.defaultdict(list)
    with open(f"{args.run_dir}/kernels.csv", newline="") as f:
        for row in csv.DictReader(f):
            if row["phase"] != args.phase or row["source"] != args.source:
                continue
            if only is not None and int(row["step"]) not in only:
                continue
            start, dur = float(row["start_us"]), float(row["dur_us"])
            steps[int(row["step"])].append((start, start + dur, row["op"] or "(unattributed)", dur,
                                            kernel_floor_us(row, bw, tf)))
    keys = sorted(steps)[args.skip_steps:]
    if not keys:
        sys.exit(f"{args.run_dir}: no {args.phase} steps with CUPTI rows"
                 + (f" decoding {args.decode_seqs} sequences" if args.decode_seqs else "")
                 + " (record with --cupti-all-steps)")
    charged = collections.defaultdict(list)
    durations = collections.defaultdict(list)
    floors = collections.defaultdict(list)
    spans = []
    for k in keys:
        rows = sorted(steps[k])
        per_op = collections.defaultdict(float)
        per_dur = collections.defaultdict(float)
        per_floor = collections.defaultdict(float)
        end = rows[0][0]
        for start, stop, op, dur, floor in rows:
            per_op[op] += max(0.0, stop - end)
            per_dur[op] += dur
            per_floor[op] += floor
            end = max(end, stop)
        spans.append(end - rows[0][0])
        for op in set(per_op) | set(charged):
            charged[op].append(per_op.get(op, 0.0))
            durations[op].append(per_dur.get(op, 0.0))
            floors[op].append(per_floor.get(op, 0.0))
    span = statistics.median(spans)
    which = f" decoding {args.decode_seqs} sequences" if args.decode_seqs else ""
    where = "GPU" if args.source == "cupti" else "host"
    print(f"{len(keys)} {args.phase} steps{which}; {where} span median {span:.1f} us (first kernel start to last end)")
    if bw or tf:
        print(f"floors: bytes at {bw:g} GB/s, FLOPs at {tf:g} TFLOP/s" if bw and tf else
              f"floors: {'bytes at %g GB/s' % bw if bw else 'FLOPs at %g TFLOP/s' % tf} only")
    print(f"{'op':<24} {'on the path us':>15} {'share':>7} {'floor us':>9} {'gap us':>8} {'sum of durations us':>20}")
    total_floor = 0.0
    for op in sorted(charged, key=lambda o: -statistics.median(charged[o])):
        c, fl = statistics.median(charged[op]), statistics.median(floors[op])
        total_floor += fl
        floor_cols = f"{fl:9.1f} {c - fl:8.1f}" if bw or tf else f"{'-':>9} {'-':>8}"
        print(f"{op:<24} {c:15.1f} {100 * c / span:6.1f}% {floor_cols} {statistics.median(durations[op]):20.1f}")
    if bw or tf:
        print(f"{'(sum)':<24} {span:15.1f} {'':>7} {total_floor:9.1f} {span - total_floor:8.1f}")


if __name__ == "__main__":
    main()
