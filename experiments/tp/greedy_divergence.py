#!/usr/bin/env python3
"""Where two greedy generations (TP=N vs TP=1) part, and whether it is a near-tie.

Inputs: the prompt ids, each run's generated ids (`lantern generate --ids` output,
space separated), and the teacher-forced logits of the *reference* sequence
(prompt + reference ids) scored by both configurations (`lantern score
--ids-file ... --prefill-tokens P`, float32 [positions x vocab]).

At the first generated token where the runs differ (index i, position P-1+i in
the scored sequence) it prints the reference logits' margin between the two
tokens picked and the candidate logits' margin the other way. The divergence
is a near-tie when the reference margin is under --margin (0.25 logits, the bf16
tolerance of docs/engine-verification.md) and the candidate, on the same
prefix, really prefers its own token (a tie flipped by rounding, not a
wrong computation). Exit 0: identical, or diverged at a near-tie; 1 otherwise.

  python3 experiments/tp/greedy_divergence.py --vocab 128256 --prompt 128000,791 \\
      tp1_ids.txt tp2_ids.txt ref_logits_tp1.f32 ref_logits_tp2.f32
"""
import argparse
import sys

import numpy as np


def read_ids(path):
    with open(path) as f:
        return [int(t) for t in f.read().replace(",", " ").split()]


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("reference_ids")
    ap.add_argument("candidate_ids")
    ap.add_argument("reference_logits", help="reference config's logits of prompt + reference ids")
    ap.add_argument("candidate_logits", help="candidate config's logits of the same sequence")
    ap.add_argument("--prompt", required=True, help="prompt ids, comma separated")
    ap.add_argument("--vocab", type=int, required=True)
    ap.add_argument("--margin", type=float, default=0.25)
    a = ap.parse_args()
    prompt = [int(t) for t in a.prompt.split(",")]
    ref, cand = read_ids(a.reference_ids), read_ids(a.candidate_ids)
    n = min(len(ref), len(cand))
    first = next((i for i in range(n) if ref[i] != cand[i]), None)
    if first is None and len(ref) == len(cand):
        print(f"identical over {len(ref)} tokens")
        return 0
    if first is None:
        print(f"same first {n} tokens, lengths differ ({len(ref)} vs {len(cand)}): stop decision differs")
        return 1
    rl = np.fromfile(a.reference_logits, dtype=np.float32).reshape(-1, a.vocab)
    cl = np.fromfile(a.candidate_logits, dtype=np.float32).reshape(-1, a.vocab)
    pos = len(prompt) - 1 + first  # logits row that predicts generated token `first`
    r_tok, c_tok = ref[first], cand[first]
    r_margin = float(rl[pos, r_tok] - rl[pos, c_tok])
    c_margin = float(cl[pos, c_tok] - cl[pos, r_tok])
    c_pick = int(cl[pos].argmax())
    tie = r_margin < a.margin and c_pick == c_tok
    print(f"first divergence at generated token {first} of {n} (position {pos}): reference {r_tok}, "
          f"candidate {c_tok}; reference margin {r_margin:.4f}, candidate margin {c_margin:.4f} "
          f"(candidate argmax on the reference prefix: {c_pick}) -> "
          f"{'near-tie (margin < %g): PASS' % a.margin if tie else 'NOT a near-tie: FAIL'}")
    return 0 if tie else 1


if __name__ == "__main__":
    sys.exit(main())
