#!/usr/bin/env python3
"""Where a decode step's wall time goes, op by op, from a recorded run's kernels.csv.

PDL-launched kernels start early and wait (griddepcontrol.wait), so their CUPTI durations overlap
and over-count. This charges each kernel only the time by which it moved the step's end: kernels
of one step sorted by start, kernel i is charged end_i - max(end of kernels before it) (>= 0), and
the gap before the first kernel is charged to "(idle)". Summed per op over a step's layers, median
over the steps of the phase.

  python3 scripts/critical_path.py RUN_DIR [--phase decode] [--skip-steps 2] [--decode-seqs N]
"""
import argparse
import csv
import json
import collections
import statistics
import sys


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
    args = ap.parse_args()
    only = whole_batch_steps(args.run_dir, args.decode_seqs) if args.decode_seqs > 0 else None
    steps = collections.defaultdict(list)
    with open(f"{args.run_dir}/kernels.csv", newline="") as f:
        for row in csv.DictReader(f):
            if row["phase"] != args.phase or row["source"] != "cupti":
                continue
            if only is not None and int(row["step"]) not in only:
                continue
            start, dur = float(row["start_us"]), float(row["dur_us"])
            steps[int(row["step"])].append((start, start + dur, row["op"] or "(unattributed)", dur))
    keys = sorted(steps)[args.skip_steps:]
    if not keys:
        sys.exit(f"{args.run_dir}: no {args.phase} steps with CUPTI rows"
                 + (f" decoding {args.decode_seqs} sequences" if args.decode_seqs else "")
                 + " (record with --cupti-all-steps)")
    charged = collections.defaultdict(list)
    durations = collections.defaultdict(list)
    spans = []
    for k in keys:
        rows = sorted(steps[k])
        per_op = collections.defaultdict(float)
        per_dur = collections.defaultdict(float)
        end = rows[0][0]
        for start, stop, op, dur in rows:
            per_op[op] += max(0.0, stop - end)
            per_dur[op] += dur
            end = max(end, stop)
        spans.append(end - rows[0][0])
        for op in set(per_op) | set(charged):
            charged[op].append(per_op.get(op, 0.0))
            durations[op].append(per_dur.get(op, 0.0))
    span = statistics.median(spans)
    which = f" decoding {args.decode_seqs} sequences" if args.decode_seqs else ""
    print(f"{len(keys)} {args.phase} steps{which}; GPU span median {span:.1f} us (first kernel start to last end)")
    print(f"{'op':<22} {'on the path us':>15} {'share':>7} {'sum of durations us':>20}")
    for op in sorted(charged, key=lambda o: -statistics.median(charged[o])):
        c = statistics.median(charged[op])
        print(f"{op:<22} {c:15.1f} {100 * c / span:6.1f}% {statistics.median(durations[op]):20.1f}")


if __name__ == "__main__":
    main()
