"""`lantern-torch`: a compact Llama decoder of our own in PyTorch, the way a
tuned PyTorch serving loop does it: bf16 weights, a static KV cache
(registered buffers written in place), fused QKV and gate/up projections,
prefill eager, and the decode step under torch.compile(mode="reduce-overhead")
so it replays as a CUDA graph. Before anything is timed its logits are
checked against HF transformers' on the same weights (check_against_hf).
"""
import json
import math
import os
import time

import torch
import torch.nn.functional as F
from safetensors.torch import load_file


def llama3_inv_freq(cfg):
    """RoPE inverse frequencies with Llama 3's frequency scaling."""
    hd = cfg.get("head_dim") or cfg["hidden_size"] // cfg["num_attention_heads"]
    inv = 1.0 / (cfg.get("rope_theta", 10000.0) ** (torch.arange(0, hd, 2, dtype=torch.float64) / hd))
    rs = cfg.get("rope_scaling") or {}
    if rs.get("rope_type", rs.get("type")) != "llama3":
        return inv.float()
    factor, low, high = rs["factor"], rs["low_freq_factor"], rs["high_freq_factor"]
    old = rs["original_max_position_embeddings"]
    wavelen = 2 * math.pi / inv
    scaled = torch.where(wavelen > old / low, inv / factor, inv)
    smooth = (old / wavelen - low) / (high - low)
    blended = (1 - smooth) * scaled / factor + smooth * scaled
    medium = (wavelen >= old / high) & (wavelen <= old / low)
    return torch.where(medium, blended, scaled).float()


class Decoder(torch.nn.Module):
    def __init__(self, model_dir, max_batch, max_len, device="cuda"):
        super().__init__()
        with open(os.path.join(model_dir, "config.json")) as f:
            cfg = json.load(f)
        self.cfg = cfg
        self.n_layers = cfg["num_hidden_layers"]
        self.hq = cfg["num_attention_heads"]
        self.hkv = cfg["num_key_value_heads"]
        self.hd = cfg.get("head_dim") or cfg["hidden_size"] // self.hq
        self.eps = cfg["rms_norm_eps"]
        w = {}
        for name in sorted(os.listdir(model_dir)):
            if name.endswith(".safetensors"):
                w.update(load_file(os.path.join(model_dir, name), device=device))
        get = (lambda n: w[n].to(torch.bfloat16))
        p = torch.nn.Parameter
        self.embed = p(get("model.embed_tokens.weight"), requires_grad=False)
        head = w.get("lm_head.weight")
        self.lm_head = self.embed if head is None else p(head.to(torch.bfloat16), requires_grad=False)
        self.final_norm = p(get("model.norm.weight"), requires_grad=False)
        self.layers = torch.nn.ModuleList()
        for i in range(self.n_layers):
            pre = f"model.layers.{i}."
            layer = torch.nn.Module()
            layer.attn_norm = p(get(pre + "input_layernorm.weight"), requires_grad=False)
            layer.mlp_norm = p(get(pre + "post_attention_layernorm.weight"), requires_grad=False)
            layer.qkv = p(torch.cat([get(pre + f"self_attn.{x}_proj.weight") for x in "qkv"]), requires_grad=False)
            layer.o = p(get(pre + "self_attn.o_proj.weight"), requires_grad=False)
            layer.gate_up = p(torch.cat([get(pre + "mlp.gate_proj.weight"), get(pre + "mlp.up_proj.weight")]),
                              requires_grad=False)
            layer.down = p(get(pre + "mlp.down_proj.weight"), requires_grad=False)
            layer.register_buffer("k_cache", torch.zeros(max_batch, self.hkv, max_len, self.hd,
                                                         dtype=torch.bfloat16, device=device))
            layer.register_buffer("v_cache", torch.zeros_like(layer.k_cache))
            self.layers.append(layer)
        del w
        freqs = torch.outer(torch.arange(max_len, dtype=torch.float32), llama3_inv_freq(cfg)).to(device)
        emb = torch.cat([freqs, freqs], dim=-1)
        self.register_buffer("cos", emb.cos().to(torch.bfloat16))  # [max_len, hd], HF's bf16 rounding
        self.register_buffer("sin", emb.sin().to(torch.bfloat16))
        self.register_buffer("causal", torch.tril(torch.ones(max_len, max_len, dtype=torch.bool, device=device)))
        self.max_batch, self.max_len = max_batch, max_len

    def _norm(self, x, weight):
        x32 = x.float()
        x32 = x32 * torch.rsqrt(x32.pow(2).mean(-1, keepdim=True) + self.eps)
        return weight * x32.to(x.dtype)

    @staticmethod
    def _rotate(x, cos, sin):  # rotate-half convention, cos/sin [1, 1, S, hd]
        half = x.shape[-1] // 2
        rot = torch.cat([-x[..., half:], x[..., :half]], dim=-1)
        return x * cos + rot * sin

    def forward(self, tokens, pos, last_only=False):
        """tokens [B, S] (B <= max_batch), pos [S] positions; returns logits [B, S, vocab] (float), or
        [B, 1, vocab] for the last position only (a batch-256 prefill's full logits would be 17 GB)."""
        b, s = tokens.shape
        x = F.embedding(tokens, self.embed)
        cos, sin = self.cos[pos][None, None], self.sin[pos][None, None]
        mask = self.causal[pos][None, None]  # [1, 1, S, max_len]
        nq, nkv = self.hq * self.hd, self.hkv * self.hd
        for layer in self.layers:
            h = self._norm(x, layer.attn_norm)
            q, k, v = (h @ layer.qkv.t()).split([nq, nkv, nkv], dim=-1)
            q = self._rotate(q.view(b, s, self.hq, self.hd).transpose(1, 2), cos, sin)
            k = self._rotate(k.view(b, s, self.hkv, self.hd).transpose(1, 2), cos, sin)
            v = v.view(b, s, self.hkv, self.hd).transpose(1, 2)
            layer.k_cache[:b, :, pos] = k
            layer.v_cache[:b, :, pos] = v
            rep = self.hq // self.hkv
            kk = layer.k_cache[:b].repeat_interleave(rep, dim=1)
            vv = layer.v_cache[:b].repeat_interleave(rep, dim=1)
            a = F.scaled_dot_product_attention(q, kk, vv, attn_mask=mask)
            x = x + a.transpose(1, 2).reshape(b, s, nq) @ layer.o.t()
            h = self._norm(x, layer.mlp_norm)
            gate, up = (h @ layer.gate_up.t()).chunk(2, dim=-1)
            x = x + (F.silu(gate) * up) @ layer.down.t()
        if last_only:
            x = x[:, -1:]
        return (self._norm(x, self.final_norm) @ self.lm_head.t()).float()


class CompiledDecoderPeer:
    name = "lantern-torch"
    description = ("compact PyTorch Llama decoder: static KV cache, fused QKV and gate/up, "
                   "decode step under torch.compile(mode='reduce-overhead') (CUDA graphs)")

    def __init__(self, model_dir, max_batch, max_len):
        self.model = Decoder(model_dir, max_batch, max_len).eval()
        self.step = torch.compile(self._decode, mode="reduce-overhead", fullgraph=True)
        self.notes = [f"static cache for batch {max_batch} x {max_len} tokens", "prefill eager, decode compiled"]

    def _decode(self, tokens, pos):
        return self.model(tokens, pos, last_only=True)[:, -1].argmax(-1)

    @torch.inference_mode()
    def run_batch(self, batch):
        plen = len(batch[0]["prompt_ids"])
        assert all(len(it["prompt_ids"]) == plen for it in batch), "lantern-torch batches equal prompt lengths"
        n = max(it["max_new_tokens"] for it in batch)
        ids = torch.tensor([it["prompt_ids"] for it in batch], device="cuda")
        times, out = [], []
        nxt = self.model(ids, torch.arange(plen, device="cuda"), last_only=True)[:, -1].argmax(-1)
        torch.cuda.synchronize()
        times.append(time.perf_counter())
        out.append(nxt)
        for i in range(1, n):
            pos = torch.tensor([plen + i - 1], device="cuda")
            nxt = self.step(nxt[:, None].clone(), pos).clone()
            torch.cuda.synchronize()
            times.append(time.perf_counter())
            out.append(nxt)
        gen = torch.stack(out, dim=1).tolist()
        return ([times[:it["max_new_tokens"]] for it in batch],
                [gen[i][:it["max_new_tokens"]] for i, it in enumerate(batch)])


def can_join(first, other):
    return len(first["prompt_ids"]) == len(other["prompt_ids"])


@torch.inference_mode()
def check_against_hf(decoder, hf_model, vocab, seed=0, length=48, batch=2, tol=0.03):
    """Our logits against HF's on random prompts (prefill, then one decode
    step through the compiled path): relative max error below `tol` and the
    same argmax at >= 95 % of positions. Raises SystemExit with the numbers."""
    batch = min(batch, decoder.model.max_batch)  # the static cache holds max_batch sequences
    g = torch.Generator().manual_seed(seed)
    ids = torch.randint(0, min(vocab, 128000), (batch, length), generator=g).cuda()
    ours = decoder.model(ids, torch.arange(length, device="cuda"))
    ref = hf_model(input_ids=ids).logits.float()
    err = ((ours - ref).abs().max() / ref.abs().max()).item()
    agree = (ours.argmax(-1) == ref.argmax(-1)).float().mean().item()
    # One compiled decode step must continue the prefill exactly like a re-prefill.
    nxt = ours[:, -1].argmax(-1)
    stepped = decoder.step(nxt[:, None].clone(), torch.tensor([length], device="cuda")).clone()
    full = hf_model(input_ids=torch.cat([ids, nxt[:, None]], dim=1)).logits[:, -1].float().argmax(-1)
    step_agree = (stepped == full).float().mean().item()
    print(f"lantern-torch vs HF logits: max |diff| / max |HF| = {err:.4f}, argmax agreement {agree:.3f}, "
          f"compiled decode step agreement {step_agree:.2f}", flush=True)
    if err > tol or agree < 0.95 or step_agree < 1.0:
        raise SystemExit("lantern-torch does not match HF transformers: not timing it")
    return {"rel_max_err": err, "argmax_agreement": agree, "decode_step_agreement": step_agree}
