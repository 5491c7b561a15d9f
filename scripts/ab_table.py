#!/usr/bin/env python3
"""The table of an A/B run (scripts/gpu-ab.sh): for every (batch, prompt) point, each
round's decode step and prefill (ms) of side A and side B, and the median difference
B - A (negative: B faster). Reads OUT/ab-A-<round>.json and OUT/ab-B-<round>.json
(`lantern bench --json`); a missing or unreadable file is reported, not fatal.
A point whose decode step is a median over partial batches in any run (the bench's
`decode_whole_batch` false: no step decoded the whole batch, too few --decode-steps
for its prefill) is marked `*` after its B-A, with a footnote.

  python3 scripts/ab_table.py OUT [LABEL_A LABEL_B]
"""
import glob
import json
import os
import statistics
import sys


def load(out, side):
    runs = []
    for path in sorted(glob.glob(os.path.join(out, f"ab-{side}-*.json")),
                       key=lambda p: int(p.rsplit("-", 1)[1].split(".")[0])):
        try:
            with open(path) as f:
                d = json.load(f)
        except (OSError, ValueError) as e:
            print(f"ab_table: {path}: {e}", file=sys.stderr)
            continue
        points = d.get("points") or [d]
        runs.append({(p["batch"], p["prompt_len"]): p for p in points})
    return runs


def main():
    if len(sys.argv) < 2:
        print(__doc__, file=sys.stderr)
        return 2
    out = sys.argv[1]
    labels = sys.argv[2:4] if len(sys.argv) >= 4 else ["A", "B"]
    a, b = load(out, "A"), load(out, "B")
    if not a or not b:
        print(f"ab_table: no runs of {'A' if not a else 'B'} in {out}", file=sys.stderr)
        return 1
    print(f"A = {labels[0]}   B = {labels[1]}   ({len(a)} / {len(b)} rounds; ms)")
    print(f"{'batch':>5} {'prompt':>6} | {'decode step A':<24} {'decode step B':<24} {'B-A':>7} | "
          f"{'prefill A':<24} {'prefill B':<24} {'B-A':>7}")
    partial = []
    for key in sorted(set().union(*a, *b)):
        def col(runs, field):
            return [r[key][field] for r in runs if key in r and field in r[key]]
        def fmt(v):
            return " ".join(f"{x:.3f}" for x in v)[:24]
        def diff(x, y):
            return f"{statistics.median(y) - statistics.median(x):+.3f}" if x and y else "-"
        da, db = col(a, "decode_step_ms"), col(b, "decode_step_ms")
        pa, pb = col(a, "prefill_ms"), col(b, "prefill_ms")
        mark = "*" if False in col(a, "decode_whole_batch") + col(b, "decode_whole_batch") else " "
        if mark == "*":
            partial.append(f"batch {key[0]} prompt {key[1]}")
        print(f"{key[0]:>5} {key[1]:>6} | {fmt(da):<24} {fmt(db):<24} {diff(da, db):>7}{mark}| "
              f"{fmt(pa):<24} {fmt(pb):<24} {diff(pa, pb):>7}")
    if partial:
        print(f"* no step decoded the whole batch ({', '.join(partial)}): the decode step is a median over "
              "partial batches; raise --decode-steps")
    return 0


if __name__ == "__main__":
    sys.exit(main())
