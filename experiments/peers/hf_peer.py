"""HF transformers peers: `hf-eager` (generate with the default dynamic KV
cache, sdpa attention) and `hf-compile` (generate with a static KV cache and
the forward under torch.compile(mode="reduce-overhead"), i.e. CUDA graphs).

Both run greedy generation to each batch's largest max_new_tokens with EOS
suppressed (min_new_tokens), left-padding prompts of unequal length. Token
times come from a logits processor that synchronises the device and stamps
perf_counter each generation step (the step's logits are ready then).
"""
import time

import torch
from transformers import AutoModelForCausalLM, LogitsProcessor, LogitsProcessorList


class StepClock(LogitsProcessor):
    """Stamps the time each generation step's logits are ready."""

    def __init__(self):
        self.times = []

    def __call__(self, input_ids, scores):
        torch.cuda.synchronize()
        self.times.append(time.perf_counter())
        return scores


class HfPeer:
    def __init__(self, model_dir, compiled):
        self.compiled = compiled
        self.model = AutoModelForCausalLM.from_pretrained(model_dir, dtype=torch.bfloat16,
                                                          attn_implementation="sdpa").cuda().eval()
        self.notes = []
        self.gen_kwargs = {}
        if compiled:
            self.gen_kwargs["cache_implementation"] = "static"
            try:  # transformers >= 4.48: generate compiles the decoding forward itself
                from transformers import CompileConfig
                self.gen_kwargs["compile_config"] = CompileConfig(fullgraph=True, mode="reduce-overhead")
                self.notes.append("static cache; generate's CompileConfig(fullgraph=True, mode='reduce-overhead')")
            except ImportError:
                self.model.forward = torch.compile(self.model.forward, mode="reduce-overhead", fullgraph=True)
                self.notes.append("static cache; model.forward under torch.compile(mode='reduce-overhead')")
        else:
            self.notes.append("dynamic cache, eager")

    @property
    def name(self):
        return "hf-compile" if self.compiled else "hf-eager"

    @property
    def description(self):
        return ("HF transformers generate, static KV cache + torch.compile (CUDA graphs)" if self.compiled
                else "HF transformers generate, eager, dynamic KV cache, sdpa")

    @torch.inference_mode()
    def run_batch(self, batch):
        longest = max(len(it["prompt_ids"]) for it in batch)
        pad = 0
        ids = torch.full((len(batch), longest), pad, dtype=torch.long)
        mask = torch.zeros((len(batch), longest), dtype=torch.long)
        for i, it in enumerate(batch):  # left padding: generation continues every row at the same column
            p = it["prompt_ids"]
            ids[i, longest - len(p):] = torch.tensor(p)
            mask[i, longest - len(p):] = 1
        n = max(it["max_new_tokens"] for it in batch)
        clock = StepClock()
        out = self.model.generate(input_ids=ids.cuda(), attention_mask=mask.cuda(), max_new_tokens=n,
                                  min_new_tokens=n, do_sample=False, temperature=None, top_p=None, top_k=None,
                                  logits_processor=LogitsProcessorList([clock]), pad_token_id=pad,
                                  **self.gen_kwargs)
        torch.cuda.synchronize()
        gen = out[:, longest:].tolist()
        times, tokens = [], []
        for i, it in enumerate(batch):
            k = it["max_new_tokens"]
            times.append(clock.times[:k])
            tokens.append(gen[i][:k])
        return times, tokens
