"""A plain numpy (float32) Llama forward pass, straight from an HF model directory.

No torch, no transformers: it reads config.json and model.safetensors (single
file or sharded) itself and follows HF's LlamaForCausalLM math (RMSNorm,
rotate-half RoPE with llama3 scaling, GQA causal attention, SwiGLU, tied or
untied LM head). Used by synth_stats.py to measure the logit statistics of
synthetic models on machines without torch; tensors are converted to float32
one at a time from a memory map, so host memory stays near one layer.
"""

import json
import math
import os
import struct

import numpy as np


def _bf16_to_f32(raw: np.ndarray) -> np.ndarray:
    return (raw.astype(np.uint32) << 16).view(np.float32)


class SafetensorsDir:
    """Lazy access to every tensor of a model directory."""

    def __init__(self, model_dir: str, cache: bool = False):
        self.cache = {} if cache else None
        index = os.path.join(model_dir, "model.safetensors.index.json")
        files = []
        if os.path.exists(index):
            with open(index) as f:
                files = sorted(set(json.load(f)["weight_map"].values()))
        else:
            files = ["model.safetensors"]
        self.tensors = {}
        for name in files:
            path = os.path.join(model_dir, name)
            with open(path, "rb") as f:
                (n,) = struct.unpack("<Q", f.read(8))
                header = json.loads(f.read(n))
            mm = np.memmap(path, dtype=np.uint8, mode="r")
            for key, entry in header.items():
                if key == "__metadata__":
                    continue
                begin, end = entry["data_offsets"]
                self.tensors[key] = (mm, 8 + n + begin, 8 + n + end, entry["dtype"], entry["shape"])

    def get(self, name: str) -> np.ndarray:
        if self.cache is not None and name in self.cache:
            return self.cache[name]
        out = self._convert(name)
        if self.cache is not None:
            self.cache[name] = out
        return out

    def _convert(self, name: str) -> np.ndarray:
        mm, begin, end, dtype, shape = self.tensors[name]
        raw = mm[begin:end]
        if dtype == "BF16":
            return _bf16_to_f32(raw.view(np.uint16)).reshape(shape)
        if dtype == "F32":
            return np.array(raw.view(np.float32)).reshape(shape)
        raise ValueError(f"{name}: dtype {dtype} not handled")


def rope_inv_freq(cfg: dict) -> np.ndarray:
    """HF's default + llama3 rope frequencies (float64, then float32)."""
    head_dim = cfg.get("head_dim") or cfg["hidden_size"] // cfg["num_attention_heads"]
    params = cfg.get("rope_parameters") or {}
    theta = params.get("rope_theta", cfg.get("rope_theta", 10000.0))
    scaling = params if params else (cfg.get("rope_scaling") or {})
    inv = 1.0 / theta ** (np.arange(0, head_dim, 2, dtype=np.float64) / head_dim)
    if scaling.get("rope_type", scaling.get("type")) == "llama3":
        factor = scaling["factor"]
        low, high = scaling["low_freq_factor"], scaling["high_freq_factor"]
        old = scaling["original_max_position_embeddings"]
        wavelen = 2 * math.pi / inv
        scaled = np.where(wavelen > old / low, inv / factor, inv)
        smooth = (old / wavelen - low) / (high - low)
        smoothed = (1 - smooth) * scaled / factor + smooth * scaled
        medium = ~(wavelen < old / high) & ~(wavelen > old / low)
        inv = np.where(medium, smoothed, scaled)
    return inv.astype(np.float32)


class NumpyLlama:
    def __init__(self, model_dir: str, cache_weights: bool = False):
        """cache_weights keeps every tensor in float32 after first use (4x the
        bf16 bytes of host memory) so repeated forwards skip the conversion."""
        with open(os.path.join(model_dir, "config.json")) as f:
            self.cfg = json.load(f)
        c = self.cfg
        self.hidden = c["hidden_size"]
        self.n_heads = c["num_attention_heads"]
        self.n_kv = c.get("num_key_value_heads") or self.n_heads
        self.head_dim = c.get("head_dim") or self.hidden // self.n_heads
        self.n_layers = c["num_hidden_layers"]
        self.eps = c.get("rms_norm_eps", 1e-6)
        self.tied = c.get("tie_word_embeddings", False)
        self.w = SafetensorsDir(model_dir, cache=cache_weights)
        self.inv_freq = rope_inv_freq(c)

    def _norm(self, x, name):
        var = np.mean(x * x, axis=-1, keepdims=True)
        return (x / np.sqrt(var + np.float32(self.eps))) * self.w.get(name)

    def _rope(self, x, positions):
        # x [T, heads, head_dim]; HF rotate-half: pairs (j, j + head_dim/2).
        freqs = positions[:, None].astype(np.float32) * self.inv_freq[None, :]
        emb = np.concatenate([freqs, freqs], axis=-1)
        cos, sin = np.cos(emb)[:, None, :], np.sin(emb)[:, None, :]
        half = self.head_dim // 2
        rot = np.concatenate([-x[..., half:], x[..., :half]], axis=-1)
        return x * cos + rot * sin

    def forward(self, ids, trace=None):
        """Logits [T, vocab] (float32) for token ids, causal, positions 0..T-1.

        `trace`, when a list, receives the residual-stream RMS after each layer.
        """
        ids = np.asarray(ids, dtype=np.int64)
        T = len(ids)
        pos = np.arange(T)
        x = self.w.get("model.embed_tokens.weight")[ids]
        mask = np.triu(np.full((T, T), -np.inf, dtype=np.float32), k=1)
        group = self.n_heads // self.n_kv
        for l in range(self.n_layers):
            p = f"model.layers.{l}."
            h = self._norm(x, p + "input_layernorm.weight")
            q = (h @ self.w.get(p + "self_attn.q_proj.weight").T).reshape(T, self.n_heads, self.head_dim)
            k = (h @ self.w.get(p + "self_attn.k_proj.weight").T).reshape(T, self.n_kv, self.head_dim)
            v = (h @ self.w.get(p + "self_attn.v_proj.weight").T).reshape(T, self.n_kv, self.head_dim)
            q, k = self._rope(q, pos), self._rope(k, pos)
            k = np.repeat(k, group, axis=1)  # head i uses kv head i // group
            v = np.repeat(v, group, axis=1)
            scores = np.einsum("thd,shd->hts", q, k) / np.float32(math.sqrt(self.head_dim)) + mask
            scores -= scores.max(axis=-1, keepdims=True)
            probs = np.exp(scores)
            probs /= probs.sum(axis=-1, keepdims=True)
            attn = np.einsum("hts,shd->thd", probs, v).reshape(T, self.n_heads * self.head_dim)
            x = x + attn @ self.w.get(p + "self_attn.o_proj.weight").T
            h = self._norm(x, p + "post_attention_layernorm.weight")
            gate = h @ self.w.get(p + "mlp.gate_proj.weight").T
            up = h @ self.w.get(p + "mlp.up_proj.weight").T
            act = gate / (1 + np.exp(-gate)) * up
            x = x + act @ self.w.get(p + "mlp.down_proj.weight").T
            if trace is not None:
                trace.append(float(np.sqrt(np.mean(x * x))))
        h = self._norm(x, "model.norm.weight")
        head = "model.embed_tokens.weight" if self.tied else "lm_head.weight"
        return h @ self.w.get(head).T
