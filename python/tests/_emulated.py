"""The decode step `decode_attn::attention` computes, in float64 on the
CPU (`_reference.attention`): what the transformers tests without a GPU
put in the kernels' place, so that the integration's logic (key ranges,
fallbacks, caches) is checked where there is no GPU."""

from _reference import attention


def attention_step(q, k, v, seq_lens, seq_starts, k_scales, v_scales, sinks, kv_format, window, scale, soft_cap):
    """`decode_attn.ops.attention_step` over a 16-bit `[B, Hkv, n, D]` cache."""
    if kv_format not in ("bf16", "f16"):
        raise NotImplementedError(f"the emulated kernel reads 16-bit caches, not {kv_format}")
    d = q.shape[-1]
    out = attention(
        q, k.transpose(1, 2), v.transpose(1, 2), seq_lens.tolist(), scale if scale > 0 else d**-0.5,
        soft_cap=soft_cap if soft_cap > 0 else None, window=window if window >= 0 else None,
        sinks=sinks, starts=seq_starts.tolist() if seq_starts is not None else None,
    )
    return out.to(q.dtype)
