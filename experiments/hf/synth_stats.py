#!/usr/bin/env python3
"""Logit statistics of a (synthetic) model, with the numpy reference forward.

Measures what docs/synthetic-models.md reports: the spread of the next-token
logits (std over the vocabulary), the top-1 margin (top logit minus runner-up),
top-1 probability, entropy, how often the argmax repeats the input token, and
the residual-stream RMS after every layer. Runs anywhere numpy does:

    python3 experiments/hf/synth_stats.py --model models/tiny --lengths 1,17,64
"""

import argparse
import json
import os
import sys
import time

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from common import logit_stats, random_prompt  # noqa: E402
from numpy_llama import NumpyLlama  # noqa: E402


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--model", required=True, help="HF model directory")
    ap.add_argument("--lengths", default="1,17,64", help="comma-separated prompt lengths")
    ap.add_argument("--seed", type=int, default=None, help="prompt seed (default: fresh, printed)")
    ap.add_argument("--out", default=None, help="write the summary JSON here")
    args = ap.parse_args()

    seed = args.seed if args.seed is not None else int.from_bytes(os.urandom(4), "little")
    print(f"prompt seed {seed}")
    model = NumpyLlama(args.model, cache_weights=len(args.lengths.split(",")) > 1)
    vocab = model.cfg["vocab_size"]
    rng = np.random.default_rng(seed)
    all_logits, all_inputs, traces = [], [], []
    for n in [int(x) for x in args.lengths.split(",")]:
        ids = random_prompt(rng, n, vocab)
        t0 = time.time()
        trace = []
        with np.errstate(over="ignore"):
            logits = model.forward(ids, trace)
        print(f"  prompt of {n:4d} tokens: forward {time.time() - t0:.1f} s; residual RMS per layer "
              + " ".join(f"{r:.2f}" for r in trace))
        all_logits.append(logits)
        all_inputs.append(ids)
        traces.append(trace)
    logits = np.concatenate(all_logits)
    inputs = np.concatenate(all_inputs)
    stats = logit_stats(logits)
    stats["argmax_repeats_input"] = float(np.mean(logits.argmax(-1) == inputs))
    stats["residual_rms_last_layer_max"] = max(t[-1] for t in traces)
    stats["residual_rms_per_layer_first_prompt"] = traces[0]
    stats["seed"] = seed
    stats["model"] = os.path.abspath(args.model)
    for k, v in stats.items():
        if not isinstance(v, list):
            print(f"{k:32s} {v}")
    if args.out:
        with open(args.out, "w") as f:
            json.dump(stats, f, indent=2)
    return 0


if __name__ == "__main__":
    sys.exit(main())
