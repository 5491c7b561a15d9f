"""HF transformers side of the comparisons: load LlamaForCausalLM, greedy
continuations, teacher-forced logits (one full forward, or prefill + decode
steps exactly like `lantern score`). Needs torch + transformers (the GPU machine).
"""

import numpy as np
import torch
from transformers import LlamaForCausalLM


def versions() -> dict:
    import transformers

    return {"torch": torch.__version__, "transformers": transformers.__version__,
            "cuda": torch.version.cuda,
            "gpu": torch.cuda.get_device_name() if torch.cuda.is_available() else None}


def strict_fp32() -> None:
    # The fp32 truth must be fp32: no TF32 in matmuls or cuDNN.
    torch.set_float32_matmul_precision("highest")
    torch.backends.cuda.matmul.allow_tf32 = False
    torch.backends.cudnn.allow_tf32 = False


def load(model_dir: str, dtype: torch.dtype, device: str) -> LlamaForCausalLM:
    """LlamaForCausalLM with eager attention; bf16 weights upcast when dtype is float32."""
    try:
        model = LlamaForCausalLM.from_pretrained(model_dir, dtype=dtype, attn_implementation="eager")
    except TypeError:  # transformers < 4.56 spells it torch_dtype
        model = LlamaForCausalLM.from_pretrained(model_dir, torch_dtype=dtype, attn_implementation="eager")
    model = model.to(device).eval()
    got = next(model.parameters()).dtype
    if got != dtype:
        raise SystemExit(f"{model_dir}: loaded as {got}, wanted {dtype}")
    return model


def _ids_tensor(ids, device) -> torch.Tensor:
    return torch.as_tensor(np.asarray(ids, dtype=np.int64), device=device)[None, :]


@torch.inference_mode()
def full_forward_logits(model, ids) -> np.ndarray:
    """Logits [len(ids), vocab] (float32) of one causal forward over all ids."""
    device = next(model.parameters()).device
    out = model(input_ids=_ids_tensor(ids, device), use_cache=False)
    return out.logits[0].float().cpu().numpy()


@torch.inference_mode()
def prefill_decode_logits(model, ids, prefill: int) -> np.ndarray:
    """Teacher forcing the way `lantern score` runs: ids[:prefill] in one
    forward (logits for every position), then one decode step per remaining
    id with the KV cache. Returns [len(ids), vocab] float32."""
    device = next(model.parameters()).device
    out = model(input_ids=_ids_tensor(ids[:prefill], device), use_cache=True)
    rows = [out.logits[0].float().cpu()]
    past = out.past_key_values
    for t in ids[prefill:]:
        out = model(input_ids=_ids_tensor([t], device), past_key_values=past, use_cache=True)
        past = out.past_key_values
        rows.append(out.logits[0].float().cpu())
    return torch.cat(rows).numpy()


@torch.inference_mode()
def greedy_continuation(model, prompt, n_new: int) -> list:
    """n_new greedy tokens after prompt (no stopping at EOS: teacher forcing
    needs a fixed length)."""
    device = next(model.parameters()).device
    out = model(input_ids=_ids_tensor(prompt, device), use_cache=True)
    new = []
    for _ in range(n_new):
        nxt = int(out.logits[0, -1].argmax())
        new.append(nxt)
        out = model(input_ids=_ids_tensor([nxt], device), past_key_values=out.past_key_values,
                    use_cache=True)
    return new
