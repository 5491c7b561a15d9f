#!/usr/bin/env python3
"""Lantern bf16 (CUDA) against HF transformers: is Lantern's error within the bf16 bound?

Truth: HF LlamaForCausalLM in float32 (bf16 weights upcast, eager attention,
no TF32), one causal forward over prompt + continuation. For each prompt
length (random ids, seeded) the continuation is HF-fp32's greedy output.
Compared position by position (teacher forcing):

  lantern  : `lantern score --device cuda` (prefill the prompt, then decode steps)
  hf_bf16  : HF in bfloat16, run the same way (prefill, then decode steps)

Per position: relative L2 error of the logits and top-1 agreement, for
lantern vs fp32, hf_bf16 vs fp32 and lantern vs hf_bf16.
Pass: median rel-L2(lantern, fp32) <= 1.25 x median rel-L2(hf_bf16, fp32), and
top-1 agreement of lantern with fp32 within 1 point of hf_bf16's.
Also reports the fp32 logits' spread (std over the vocabulary) and top-1
margins. Writes OUT/summary_bf16.json; exits 1 when a criterion fails.

    python3 experiments/hf/compare_bf16.py --model models/llama-3.2-1b \
        --lantern build/gpu-machine/bin/lantern --out runs/compare-bf16
"""

import json
import os
import sys
import time

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import common  # noqa: E402

ERROR_RATIO_LIMIT = 1.25     # lantern median rel-L2 / hf_bf16 median rel-L2
TOP1_POINTS_LIMIT = 1.0      # lantern top-1 agreement may trail hf_bf16's by this many points


def main() -> int:
    ap = common.comparison_parser(__doc__, "summary_bf16.json", "1,17,128,512", "cuda",
                                  "--device for lantern score")
    ap.add_argument("--continuation", type=int, default=256, help="greedy tokens after each prompt")
    args = ap.parse_args()

    import torch  # noqa: E402  (after argparse so --help works without torch)
    import hf_runner  # noqa: E402

    t0 = time.time()
    seed, rng, lengths, fp32 = common.comparison_setup(args)
    vocab = fp32.config.vocab_size
    cases = []
    for n in lengths:
        prompt = common.random_prompt(rng, n, vocab).tolist()
        cont = hf_runner.greedy_continuation(fp32, prompt, args.continuation)
        ids = prompt + cont
        truth = hf_runner.full_forward_logits(fp32, ids)
        cases.append({"n": n, "ids": ids, "truth": truth})
    del fp32
    if args.hf_device.startswith("cuda"):
        torch.cuda.empty_cache()

    bf16 = hf_runner.load(args.model, torch.bfloat16, args.hf_device)
    for c in cases:
        c["hf_bf16"] = hf_runner.prefill_decode_logits(bf16, c["ids"], c["n"])
    del bf16

    for c in cases:
        c["lantern"] = common.lantern_score(args.lantern, args.model, c["ids"], c["n"], args.lantern_device,
                                            args.out, f"bf16_p{c['n']}", vocab)

    pairs = {"lantern_vs_fp32": ("lantern", "truth"), "hf_bf16_vs_fp32": ("hf_bf16", "truth"),
             "lantern_vs_hf_bf16": ("lantern", "hf_bf16")}
    per_case, all_err, all_top1 = [], {k: [] for k in pairs}, {k: [] for k in pairs}
    rows = []
    for c in cases:
        entry = {"prompt_tokens": c["n"], "positions": len(c["ids"])}
        for key, (a, b) in pairs.items():
            err = common.rel_l2_rows(c[a], c[b])
            agree = common.top1_agree_rows(c[a], c[b])
            all_err[key].append(err)
            all_top1[key].append(agree)
            entry[key] = {"rel_l2": common.summarize(err), "top1_agreement": float(agree.mean()),
                          "rel_l2_per_position": [float(x) for x in err]}
        entry["fp32_logit_stats"] = common.logit_stats(c["truth"])
        per_case.append(entry)
        rows.append([c["n"], len(c["ids"]),
                     f"{entry['lantern_vs_fp32']['rel_l2']['median']:.2e}",
                     f"{entry['hf_bf16_vs_fp32']['rel_l2']['median']:.2e}",
                     f"{entry['lantern_vs_fp32']['rel_l2']['max']:.2e}",
                     f"{entry['hf_bf16_vs_fp32']['rel_l2']['max']:.2e}",
                     f"{100 * entry['lantern_vs_fp32']['top1_agreement']:.1f}",
                     f"{100 * entry['hf_bf16_vs_fp32']['top1_agreement']:.1f}",
                     f"{100 * entry['lantern_vs_hf_bf16']['top1_agreement']:.1f}"])

    overall = {}
    for key in pairs:
        err = np.concatenate(all_err[key])
        agree = np.concatenate(all_top1[key])
        overall[key] = {"rel_l2": common.summarize(err), "top1_agreement": float(agree.mean())}
    truth_all = np.concatenate([c["truth"] for c in cases])
    overall["fp32_logit_stats"] = common.logit_stats(truth_all)

    lan, ref = overall["lantern_vs_fp32"], overall["hf_bf16_vs_fp32"]
    ratio = lan["rel_l2"]["median"] / max(ref["rel_l2"]["median"], 1e-30)
    top1_gap = 100 * (ref["top1_agreement"] - lan["top1_agreement"])
    checks = {
        "median_error_ratio": {"value": ratio, "limit": ERROR_RATIO_LIMIT, "pass": ratio <= ERROR_RATIO_LIMIT},
        "top1_points_behind_hf_bf16": {"value": top1_gap, "limit": TOP1_POINTS_LIMIT,
                                       "pass": top1_gap <= TOP1_POINTS_LIMIT},
    }
    ok = all(c["pass"] for c in checks.values())
    rows.append(["all", sum(len(c["ids"]) for c in cases), f"{lan['rel_l2']['median']:.2e}",
                 f"{ref['rel_l2']['median']:.2e}", f"{lan['rel_l2']['max']:.2e}", f"{ref['rel_l2']['max']:.2e}",
                 f"{100 * lan['top1_agreement']:.1f}", f"{100 * ref['top1_agreement']:.1f}",
                 f"{100 * overall['lantern_vs_hf_bf16']['top1_agreement']:.1f}"])

    print()
    common.print_table(["prompt", "positions", "lan med", "hfbf16 med", "lan max", "hfbf16 max",
                        "lan top1%", "hfbf16 top1%", "lan~hfbf16 top1%"], rows)
    st = overall["fp32_logit_stats"]
    print(f"\nHF-fp32 logits: std median {st['logit_std_median']:.3f} (min {st['logit_std_min']:.3f}, "
          f"max {st['logit_std_max']:.3f}); top-1 margin median {st['top1_margin_median']:.3f}, "
          f"p10 {st['top1_margin_p10']:.4f}; top-1 prob median {st['top1_prob_median']:.3f}")
    print(f"median rel-L2 ratio lantern/hf_bf16 = {ratio:.3f} (limit {ERROR_RATIO_LIMIT}): "
          f"{'ok' if checks['median_error_ratio']['pass'] else 'FAIL'}")
    print(f"top-1 agreement lantern {100 * lan['top1_agreement']:.2f}% vs hf_bf16 {100 * ref['top1_agreement']:.2f}% "
          f"(may trail by {TOP1_POINTS_LIMIT} point): {'ok' if checks['top1_points_behind_hf_bf16']['pass'] else 'FAIL'}")

    summary = {"seed": seed, "model": os.path.abspath(args.model), "lantern": os.path.abspath(args.lantern),
               "lengths": lengths, "continuation": args.continuation, "hf_device": args.hf_device,
               "lantern_device": args.lantern_device, "versions": hf_runner.versions(),
               "seconds": time.time() - t0, "checks": checks, "pass": ok, "overall": overall,
               "per_prompt": per_case}
    path = os.path.join(args.out, "summary_bf16.json")
    with open(path, "w") as f:
        json.dump(summary, f, indent=1)
    print(f"\n{'PASS' if ok else 'FAIL'}: summary in {path}")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
