"""Helpers shared by the HF comparison scripts: prompts, metrics, running `lantern score`.

numpy only at import (torch is imported inside comparison_setup), so synth_stats.py
can use it on machines without torch.
"""

import os
import subprocess
import sys

import numpy as np

# Llama 3's special tokens start at 128000; random prompts stay below.
FIRST_SPECIAL_TOKEN = 128000


def comparison_parser(doc: str, out_name: str, lengths: str, lantern_device: str,
                      lantern_device_help: str):
    """The options every HF comparison script takes (each adds its own extras)."""
    import argparse
    ap = argparse.ArgumentParser(description=doc, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--model", required=True,
                    help="HF model directory (e.g. lantern synth --preset llama-3.2-1b)")
    ap.add_argument("--lantern", required=True, help="path of the lantern binary")
    ap.add_argument("--out", required=True, help=f"output directory (ids files, {out_name})")
    ap.add_argument("--lengths", default=lengths, help="prompt lengths")
    ap.add_argument("--seed", type=int, default=None, help="prompt seed (default: fresh, printed)")
    ap.add_argument("--hf-device", default="cuda", help="torch device for HF")
    ap.add_argument("--lantern-device", default=lantern_device, help=lantern_device_help)
    return ap


def comparison_setup(args):
    """Output directory, the (printed) seed and its generator, the prompt
    lengths, strict fp32 matmuls, and HF's fp32 model: (seed, rng, lengths, fp32)."""
    import torch  # after argparse, so --help works without torch
    import hf_runner
    os.makedirs(args.out, exist_ok=True)
    seed = fresh_seed(args.seed)
    print(f"seed {seed} (replay with --seed {seed})")
    hf_runner.strict_fp32()
    rng = np.random.default_rng(seed)
    lengths = [int(x) for x in args.lengths.split(",")]
    fp32 = hf_runner.load(args.model, torch.float32, args.hf_device)
    return seed, rng, lengths, fp32


def fresh_seed(seed):
    """The given seed, or a fresh one from the OS (printed by the caller)."""
    return seed if seed is not None else int.from_bytes(os.urandom(4), "little")


def random_prompt(rng: np.random.Generator, n: int, vocab: int) -> np.ndarray:
    return rng.integers(0, min(vocab, FIRST_SPECIAL_TOKEN), size=n, dtype=np.int64)


def rel_l2_rows(a: np.ndarray, ref: np.ndarray) -> np.ndarray:
    """Per row ||a - ref|| / ||ref|| (float64)."""
    a = a.astype(np.float64)
    ref = ref.astype(np.float64)
    return np.linalg.norm(a - ref, axis=-1) / np.maximum(np.linalg.norm(ref, axis=-1), 1e-30)


def top1_agree_rows(a: np.ndarray, ref: np.ndarray) -> np.ndarray:
    return a.argmax(-1) == ref.argmax(-1)


def logit_stats(logits: np.ndarray) -> dict:
    """Spread and decisiveness of next-token distributions [positions, vocab]."""
    x = logits.astype(np.float64)
    top2 = np.sort(np.partition(x, -2, axis=-1)[:, -2:], axis=-1)
    margin = top2[:, 1] - top2[:, 0]
    z = x - x.max(-1, keepdims=True)
    p = np.exp(z)
    p /= p.sum(-1, keepdims=True)
    entropy = -(p * np.log(np.maximum(p, 1e-300))).sum(-1)
    std = x.std(-1)
    return {
        "positions": int(x.shape[0]),
        "logit_std_median": float(np.median(std)),
        "logit_std_min": float(std.min()),
        "logit_std_max": float(std.max()),
        "top1_margin_median": float(np.median(margin)),
        "top1_margin_p10": float(np.percentile(margin, 10)),
        "top1_margin_min": float(margin.min()),
        "top1_prob_median": float(np.median(p.max(-1))),
        "entropy_median_nats": float(np.median(entropy)),
        "distinct_argmax": int(len(np.unique(x.argmax(-1)))),
    }


def summarize(values: np.ndarray) -> dict:
    return {"median": float(np.median(values)), "max": float(np.max(values)),
            "mean": float(np.mean(values))}


def write_ids(path: str, ids) -> None:
    with open(path, "w") as f:
        f.write(" ".join(str(int(i)) for i in ids) + "\n")


def lantern_score(lantern: str, model: str, ids, prefill: int, device: str, out_dir: str, tag: str,
                  vocab: int, extra_args=()) -> np.ndarray:
    """Teacher-forced logits from `lantern score`: [len(ids), vocab] float32.

    The first `prefill` ids are prefilled in one step (logits for every
    position); each remaining id is fed by a decode step.
    """
    ids_path = os.path.join(out_dir, f"ids_{tag}.txt")
    out_path = os.path.join(out_dir, f"lantern_{tag}.bin")
    write_ids(ids_path, ids)
    cmd = [lantern, "score", "--model", model, "--ids-file", ids_path, "--out", out_path,
           "--device", device, "--prefill-tokens", str(prefill), *extra_args]
    proc = subprocess.run(cmd, capture_output=True, text=True)
    if proc.returncode != 0:
        sys.stderr.write(f"command failed ({proc.returncode}): {' '.join(cmd)}\n{proc.stdout}{proc.stderr}")
        raise SystemExit(2)
    logits = np.fromfile(out_path, dtype="<f4")
    expected = len(ids) * vocab
    if logits.size != expected:
        sys.stderr.write(f"{out_path}: {logits.size} floats, expected {len(ids)} x {vocab} = {expected}\n")
        raise SystemExit(2)
    os.remove(out_path)  # hundreds of MB per prompt; the ids file stays for replay
    return logits.reshape(len(ids), vocab)


def print_table(headers, rows) -> None:
    widths = [max(len(str(h)), *(len(str(r[i])) for r in rows)) for i, h in enumerate(headers)]
    line = "  ".join(str(h).rjust(w) for h, w in zip(headers, widths))
    print(line)
    print("-" * len(line))
    for r in rows:
        print("  ".join(str(c).rjust(w) for c, w in zip(r, widths)))
