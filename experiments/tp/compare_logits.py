#!/usr/bin/env python3
"""Compare two `lantern score` outputs (float32 [positions x vocab]): TP=N vs TP=1.

Prints rel-L2 per position (median, max) and top-1 agreement where the
reference's top-1 margin exceeds the tolerance (0.25 logits, the bf16 level of
docs/engine-verification.md); exits 1 when a checked position disagrees or
the worst rel-L2 exceeds --max-rel-l2.

  python3 experiments/tp/compare_logits.py --vocab 128256 tp1.f32 tp2.f32
"""
import argparse
import sys

import numpy as np


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("reference")
    ap.add_argument("candidate")
    ap.add_argument("--vocab", type=int, required=True)
    ap.add_argument("--margin", type=float, default=0.25)
    ap.add_argument("--max-rel-l2", type=float, default=3e-2)
    a = ap.parse_args()
    ref = np.fromfile(a.reference, dtype=np.float32).reshape(-1, a.vocab).astype(np.float64)
    got = np.fromfile(a.candidate, dtype=np.float32).reshape(-1, a.vocab).astype(np.float64)
    assert ref.shape == got.shape, (ref.shape, got.shape)
    rel = np.linalg.norm(got - ref, axis=1) / np.maximum(np.linalg.norm(ref, axis=1), 1e-30)
    top2 = np.sort(ref, axis=1)[:, -2:]
    margin = top2[:, 1] - top2[:, 0]
    checked = margin > a.margin
    agree = (ref.argmax(1) == got.argmax(1))
    print(f"positions {len(rel)}  rel-L2 median {np.median(rel):.3g} max {rel.max():.3g}  "
          f"top-1 agreement {int((agree & checked).sum())}/{int(checked.sum())} where margin > {a.margin} "
          f"(all positions: {int(agree.sum())}/{len(agree)})")
    bad = checked & ~agree
    if bad.any():
        print("disagreeing positions (margin):", [(int(i), round(float(margin[i]), 3)) for i in np.where(bad)[0][:10]])
    ok = not bad.any() and rel.max() <= a.max_rel_l2
    print("PASS" if ok else "FAIL")
    sys.exit(0 if ok else 1)


if __name__ == "__main__":
    main()
