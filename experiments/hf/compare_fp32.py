#!/usr/bin/env python3
"""Math pin: Lantern's fp32 CPU reference against HF transformers in float32.

Both run the same math in fp32 on the same bf16 weights, so they must agree
to rounding: for prompts of 1, 17 and 64 random tokens plus 16 decode steps
(HF-fp32's greedy continuation, teacher-forced), every position must have
logits within 1e-3 relative L2 of HF-fp32 (one causal forward, eager
attention, no TF32) and the same top-1 token. Lantern runs
`lantern score --device cpu` (prefill the prompt, then decode steps).
Writes OUT/summary_fp32.json; exits 1 on any failing position.

    python3 experiments/hf/compare_fp32.py --model models/llama-3.2-1b \
        --lantern build/gpu-machine/bin/lantern --out runs/compare-fp32
"""

import json
import os
import sys
import time

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import common  # noqa: E402

REL_L2_LIMIT = 1e-3


def main() -> int:
    ap = common.comparison_parser(__doc__, "summary_fp32.json", "1,17,64", "cpu",
                                  "--device for lantern score (cpu: fp32 reference)")
    ap.add_argument("--decode-steps", type=int, default=16, help="greedy tokens after each prompt")
    args = ap.parse_args()

    import hf_runner  # noqa: E402  (after argparse so --help works without torch)

    t0 = time.time()
    seed, rng, lengths, fp32 = common.comparison_setup(args)
    vocab = fp32.config.vocab_size
    rows, per_case, failures = [], [], []
    for n in lengths:
        prompt = common.random_prompt(rng, n, vocab).tolist()
        ids = prompt + hf_runner.greedy_continuation(fp32, prompt, args.decode_steps)
        truth = hf_runner.full_forward_logits(fp32, ids)
        lantern = common.lantern_score(args.lantern, args.model, ids, n, args.lantern_device, args.out,
                                       f"fp32_p{n}", vocab)
        err = common.rel_l2_rows(lantern, truth)
        agree = common.top1_agree_rows(lantern, truth)
        bad = [int(i) for i in np.nonzero((err > REL_L2_LIMIT) | ~agree)[0]]
        for i in bad:
            failures.append({"prompt_tokens": n, "position": i, "rel_l2": float(err[i]),
                             "lantern_top1": int(lantern[i].argmax()), "hf_top1": int(truth[i].argmax())})
        per_case.append({"prompt_tokens": n, "positions": len(ids), "rel_l2": common.summarize(err),
                         "top1_agreement": float(agree.mean()), "failing_positions": bad,
                         "rel_l2_per_position": [float(x) for x in err],
                         "fp32_logit_stats": common.logit_stats(truth)})
        rows.append([n, len(ids), f"{np.median(err):.2e}", f"{err.max():.2e}",
                     f"{int(agree.sum())}/{len(ids)}", "ok" if not bad else f"FAIL ({len(bad)})"])

    print()
    common.print_table(["prompt", "positions", "rel-L2 med", "rel-L2 max", "top-1 same", "verdict"], rows)
    for f in failures[:10]:
        print(f"  prompt {f['prompt_tokens']} position {f['position']}: rel-L2 {f['rel_l2']:.2e}, "
              f"top-1 lantern {f['lantern_top1']} vs hf {f['hf_top1']}")
    ok = not failures
    summary = {"seed": seed, "model": os.path.abspath(args.model), "lantern": os.path.abspath(args.lantern),
               "lengths": lengths, "decode_steps": args.decode_steps, "rel_l2_limit": REL_L2_LIMIT,
               "hf_device": args.hf_device, "lantern_device": args.lantern_device,
               "versions": hf_runner.versions(), "seconds": time.time() - t0, "pass": ok,
               "failures": failures, "per_prompt": per_case}
    path = os.path.join(args.out, "summary_fp32.json")
    with open(path, "w") as f:
        json.dump(summary, f, indent=1)
    print(f"\n{'PASS' if ok else 'FAIL'}: rel-L2 <= {REL_L2_LIMIT:g} and identical top-1 at every position; "
          f"summary in {path}")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
