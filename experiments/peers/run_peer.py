#!/usr/bin/env python3
"""Runs one peer on jobs that `lantern run --dry-run` expanded, writing one
run directory per job in Lantern's format (docs/experiments.md § Peers).

  python3 experiments/peers/run_peer.py --peer hf-eager --model models/llama-3.2-1b \
      --job resolved.json workload.jsonl runs/hf-eager-decode-latency [--job ...]

Peers: hf-eager, hf-compile (HF transformers) and lantern-torch (our compact
compiled-PyTorch decoder, checked against HF's logits before it is timed).
Greedy decoding; every request runs to its max_new_tokens (EOS ignored).
Needs torch + transformers (the GPU machine).
"""
import argparse
import gc
import sys

import torch

import common


def make_hf(model_dir, compiled):
    from hf_peer import HfPeer
    return HfPeer(model_dir, compiled)


def run_lantern_torch(model_dir, jobs):
    from compiled_decoder import CompiledDecoderPeer, can_join, check_against_hf
    from transformers import AutoModelForCausalLM
    for resolved, items, out in jobs:
        max_len = max(len(it["prompt_ids"]) + it["max_new_tokens"] for it in items) + 1
        peer = CompiledDecoderPeer(model_dir, resolved["limits"]["max_seqs"], max(max_len, 64))
        hf = AutoModelForCausalLM.from_pretrained(model_dir, dtype=torch.bfloat16,
                                                  attn_implementation="sdpa").cuda().eval()
        check = check_against_hf(peer, hf, hf.config.vocab_size)
        del hf
        gc.collect()
        torch.cuda.empty_cache()
        reps, tokens = common.run_job(resolved, items, peer.run_batch, can_join, progress=f"{peer.name} {out}")
        notes = peer.notes + [f"checked against HF logits: {check}"]
        if resolved.get("sampling", {}).get("temperature", 0) > 0:
            notes.append("the experiment samples; peers decode greedily")
        print(common.write_run(out, peer.name, peer.description, resolved, reps, items, tokens, model_dir, notes))
        del peer
        gc.collect()
        torch.cuda.empty_cache()


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--peer", required=True, choices=["hf-eager", "hf-compile", "lantern-torch"])
    ap.add_argument("--model", required=True, help="HF model directory (the one Lantern ran)")
    ap.add_argument("--job", nargs=3, action="append", required=True, metavar=("RESOLVED", "WORKLOAD", "OUT"),
                    help="resolved experiment JSON, workload JSONL, run directory to write")
    a = ap.parse_args()
    if not torch.cuda.is_available():
        sys.exit("run_peer.py: no CUDA device (the peers run on the GPU machine)")
    jobs = [(*common.load_job(r, w), out) for r, w, out in a.job]
    if a.peer == "lantern-torch":
        run_lantern_torch(a.model, jobs)
        return
    peer = make_hf(a.model, compiled=a.peer == "hf-compile")
    for resolved, items, out in jobs:
        reps, tokens = common.run_job(resolved, items, peer.run_batch, progress=f"{peer.name} {out}")
        notes = list(peer.notes)
        if resolved.get("sampling", {}).get("temperature", 0) > 0:
            notes.append("the experiment samples; peers decode greedily")
        print(common.write_run(out, peer.name, peer.description, resolved, reps, items, tokens, a.model, notes))


if __name__ == "__main__":
    main()
