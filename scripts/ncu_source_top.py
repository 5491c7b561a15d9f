#!/usr/bin/env python3
"""The SASS instructions with the most warp-stall samples in an Nsight Compute source-page export.

  ncu -i REPORT --page source --csv --print-source sass > src.csv
  python3 scripts/ncu_source_top.py src.csv [N]

Prints the export's columns, then the N (default 30) instructions with the most samples in the
"Warp Stall Sampling (All Samples)" column, each with its share of all samples and its largest
stall-reason columns (any column whose name starts with "stall_" or contains "Stall"), then the
sum of every stall-reason column over the kernel.
"""
import csv
import sys


def num(x):
    try:
        return float(str(x).replace(",", ""))
    except ValueError:
        return 0.0


def main():
    if len(sys.argv) < 2 or sys.argv[1] in ("-h", "--help"):
        print(__doc__)
        return 0
    n = int(sys.argv[2]) if len(sys.argv) > 2 else 30
    with open(sys.argv[1], newline="") as f:
        lines = [l for l in f if l.strip()]
    # ncu may print a kernel header before the table: start at the first line with "Source".
    start = next((i for i, l in enumerate(lines) if "Source" in l and "," in l), 0)
    rows = list(csv.DictReader(lines[start:]))
    if not rows:
        print("no rows in the export")
        return 1
    cols = list(rows[0].keys())
    print("columns:", " | ".join(cols))
    samp = next((c for c in cols if c.startswith("Warp Stall Sampling (All")), None)
    if samp is None:
        print("no 'Warp Stall Sampling (All Samples)' column")
        return 1
    reasons = [c for c in cols if c != samp and ("stall" in c.lower()) and "Not-issued" not in c]
    total = sum(num(r[samp]) for r in rows) or 1.0
    print(f"{len(rows)} instructions, {total:.0f} samples")
    for r in sorted(rows, key=lambda r: -num(r[samp]))[:n]:
        top = sorted(((num(r[c]), c) for c in reasons), reverse=True)[:3]
        why = ", ".join(f"{c}={v:.0f}" for v, c in top if v > 0)
        print(f"{num(r[samp]) / total * 100:5.1f}%  {r.get('Address', '')}  {r.get('Source', '')[:70]:70s}  {why}")
    print("by reason over the kernel:")
    sums = sorted(((sum(num(r[c]) for r in rows), c) for c in reasons), reverse=True)
    for v, c in sums[:15]:
        print(f"  {v / total * 100:5.1f}%  {c}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
