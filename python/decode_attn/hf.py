"""A drop-in attention function for HF transformers.

    import decode_attn.hf
    decode_attn.hf.register()                    # "decode_attn" (bf16/fp16 caches)
    model = AutoModelForCausalLM.from_pretrained(..., attn_implementation="decode_attn")

Decode steps (1..8 new tokens over a longer cache) run on decode-attn,
straight from transformers' own cache tensors (`[batch, kv_heads, len,
head_dim]`, read in place through the "hnd" or a strided layout: no copy of
the cache); prefill, and anything else the kernels do not serve, goes to
transformers' SDPA (or, with a logits soft-cap, which SDPA ignores, to the
model's eager attention). Soft-cap (Gemma 2), sliding windows (Mistral,
Gemma 2) and the model's scaling are passed through.

`register(kv_format="int8")` (or "fp8", "fp8_per_head", "int4_g32")
registers "decode_attn_int8" etc.: each decode step quantizes
transformers' bf16 cache into that format on the GPU and attends over the
quantized cache. It shows the format's effect on a real model's logits; a
serving engine would keep the quantized cache instead.

Decode steps assume unpadded batches (every sequence as long as the cache):
a left-padded batch's mask is not applied on the decode path.
"""

from __future__ import annotations

import sys

import torch

from . import api
from ._tensors import side_dims
from .api import DecodeAttention, DecodeShape

_DTYPES = {torch.bfloat16: "bf16", torch.float16: "f16"}
_plans: dict = {}
_workspaces: dict = {}
_MAX_PLANS = 256


def _fallback(module, query, key, value, attention_mask, softcap, sliding_window=None, **kwargs):
    """Prefill and whatever the kernels do not serve: transformers' SDPA, or
    with a logits soft-cap (which SDPA ignores) the model's eager attention."""
    if softcap is not None:
        eager = getattr(sys.modules[type(module).__module__], "eager_attention_forward", None)
        if eager is not None:
            mask = _additive_mask(attention_mask, query, key, sliding_window)
            return eager(module, query, key, value, mask, softcap=softcap, sliding_window=sliding_window, **kwargs)
    from transformers.integrations.sdpa_attention import sdpa_attention_forward

    return sdpa_attention_forward(module, query, key, value, attention_mask, sliding_window=sliding_window, **kwargs)


def _additive_mask(mask, query, key, sliding_window):
    """SDPA's mask (boolean, or None for a plain causal one) as the additive
    float mask eager attention takes."""
    if mask is not None and mask.dtype != torch.bool:
        return mask
    if mask is None:
        q_len, n = query.shape[2], key.shape[2]
        p = torch.arange(n - q_len, n, device=query.device)[:, None]
        t = torch.arange(n, device=query.device)[None, :]
        allowed = t <= p
        if sliding_window:
            allowed &= t > p - sliding_window
        mask = allowed[None, None]
    zero = torch.zeros((), dtype=query.dtype, device=query.device)
    return torch.where(mask, zero, torch.finfo(query.dtype).min)


def _plan(attn: DecodeAttention, shape_args: dict) -> api.Plan:
    """The plan of one decode step (all sequences as long as the cache),
    made once per distinct shape: every layer of a step shares it, and the
    shape is built only when it is new."""
    key = (attn.device, tuple(sorted(shape_args.items())))
    plan = _plans.get(key)
    if plan is None:
        if len(_plans) >= _MAX_PLANS:
            _plans.clear()
        shape = DecodeShape(**shape_args)
        plan = _plans[key] = attn.plan(shape, [shape.max_seq_len] * shape.batch)
    return plan


def _workspace(attn: DecodeAttention, nbytes: int):
    ws = _workspaces.get(attn.device)
    if ws is None or ws.numel() < nbytes:
        ws = _workspaces[attn.device] = torch.empty(max(nbytes, 1 << 20), dtype=torch.uint8, device=f"cuda:{attn.device}")
    return ws


def _layout(key: torch.Tensor):
    """The cache tensor `[B, Hkv, L, D]` as a layout, read in place."""
    b, h, n, d = key.shape
    if key.is_contiguous():
        return {"layout": "hnd"}
    sb, sh, st, sd = key.stride()
    if sd != 1:
        return None
    return {"layout": "strided", "strides": (sb, st, sh)}


def _quantized(attn, shape_args, key, value, kv_format):
    """Quantizes transformers' 16-bit K and V into `kv_format` (contiguous)."""
    b, h, n, d = key.shape
    shape = DecodeShape(**{**shape_args, "kv_format": kv_format, "layout": "hnd", "q_len": 1})
    dev = key.device
    lens = torch.full((b,), n, dtype=torch.int32, device=dev)
    vpe = shape.values_per_element
    out = []
    for t in (key, value):
        t = t.contiguous()
        data = torch.empty(b, h, n, d // vpe, dtype=torch.uint8, device=dev)
        if shape.tensor_scaled:
            scales = (t.abs().amax().float() / 448.0).clamp_min(1e-12).reshape(1)
        else:
            side_dtype = torch.int32 if kv_format.startswith("int4") else torch.float32
            scales = torch.empty(side_dims(shape)[0], dtype=side_dtype, device=dev)
        attn.quantize_kv(shape, t, data, scales, seq_lens=lens)
        out += [data, scales]
    return out


def make_attention(kv_format: str | None = None):
    """The attention function (transformers' signature) for a cache format:
    None keeps transformers' 16-bit cache as it is."""

    def decode_attn_forward(module, query, key, value, attention_mask, scaling=None, dropout=0.0, softcap=None, sliding_window=None, **kwargs):
        b, hq, q_len, d = query.shape
        n = key.shape[2]
        layout = _layout(key) if value.stride() == key.stride() else None
        servable = (
            query.is_cuda
            and 1 <= q_len <= 8
            and n > q_len
            and dropout == 0.0
            and query.dtype in _DTYPES
            and key.dtype == query.dtype
            and d in (64, 128, 256)
            and layout is not None
            and not kwargs.get("output_attentions", False)
            and kwargs.get("s_aux") is None
        )
        if not servable:
            return _fallback(module, query, key, value, attention_mask, softcap, sliding_window, dropout=dropout, scaling=scaling, **kwargs)
        attn = DecodeAttention(query.device)
        shape_args = dict(
            batch=b,
            num_q_heads=hq,
            num_kv_heads=key.shape[1],
            head_dim=d,
            q_len=q_len,
            max_seq_len=n,
            dtype=_DTYPES[query.dtype],
            scale=scaling,
            soft_cap=softcap,
            # transformers' window W keeps W keys (kv > q - W); ours keeps W + 1.
            window=(sliding_window - 1) if sliding_window else None,
        )
        q = query.transpose(1, 2).contiguous()
        out = torch.empty_like(q)
        if kv_format is None:
            plan = _plan(attn, {**shape_args, **layout})
            attn.run(plan, q, key, value, out, _workspace(attn, plan.workspace_bytes))
        else:
            k, ks, v, vs = _quantized(attn, shape_args, key, value, kv_format)
            plan = _plan(attn, {**shape_args, "kv_format": kv_format, "layout": "hnd"})
            attn.run(plan, q, k, v, out, _workspace(attn, plan.workspace_bytes), k_scales=ks, v_scales=vs)
        return out, None

    return decode_attn_forward


def register(kv_format: str | None = None) -> str:
    """Registers the attention function (and, for prefill, transformers'
    SDPA mask) under "decode_attn" or "decode_attn_<format>"; returns the
    name."""
    from transformers import AttentionInterface
    from transformers.masking_utils import ALL_MASK_ATTENTION_FUNCTIONS, sdpa_mask

    name = "decode_attn" if kv_format is None else f"decode_attn_{kv_format.replace('-', '_')}"
    AttentionInterface.register(name, make_attention(kv_format))
    ALL_MASK_ATTENTION_FUNCTIONS.register(name, sdpa_mask)
    return name
