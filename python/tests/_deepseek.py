"""DeepSeek V3's attention in its absorbed form on decode_attn's MLA
kernels: a test double for the check in `test_deepseek.py`.

transformers' `DeepseekV3Attention` caches the expanded keys and values
(`kv_b_proj` applied: 128 query heads' own 192-value keys). Absorbed, the
cache is one latent row per token — the normed 512 `kv_a_proj` values and
the 64 RoPE'd key values — and `kv_b_proj` moves into the query
(`q_nope · W_UK`, 512 values a head) and the output (`O · W_UVᵀ`):
`AbsorbedMla` computes exactly that around the kernels, with the module's
own projections, norms, RoPE and scale, and writes the latent rows with
`DecodeAttention.append_rows` (bf16 copies, or fp8 quantized on the GPU:
a scale per token, or DeepSeek V3.2's 656-byte rows).
Prefill (many tokens) runs the module's own attention; each decode step
(one token) runs the kernels.
"""

import sys

import torch

import decode_attn as da
import decode_attn.ops as ops

LATENT, ROPE = 512, 64


class AbsorbedMla(torch.nn.Module):
    def __init__(self, inner, batch: int, capacity: int, kv_format: str):
        super().__init__()
        self.inner = inner
        cfg = inner.config
        assert inner.kv_lora_rank == LATENT and inner.qk_rope_head_dim == ROPE, "the kernels' latent rows are 512 + 64 values"
        self.heads, self.nope, self.v = inner.num_heads, inner.qk_nope_head_dim, inner.v_head_dim
        mod = sys.modules[type(inner).__module__]
        self.rope = mod.apply_rotary_pos_emb_interleave if getattr(cfg, "rope_interleave", False) else mod.apply_rotary_pos_emb
        w = inner.kv_b_proj.weight.float().view(self.heads, self.nope + self.v, LATENT)
        self.w_uk, self.w_uv = w[:, : self.nope], w[:, self.nope :]  # [H, nope, 512], [H, v, 512]
        device = w.device
        self.kv_format = kv_format
        self.attn = da.DecodeAttention(device)
        self.shape = da.DecodeShape(
            batch=batch, num_q_heads=self.heads, num_kv_heads=1, head_dim=LATENT + ROPE, max_seq_len=capacity,
            dtype="bf16", kv_format=kv_format, layout="hnd", scale=inner.scaling,
        )
        if kv_format == "bf16":
            self.data, self.scales = torch.zeros(batch, 1, capacity, LATENT + ROPE, dtype=torch.bfloat16, device=device), None
        elif kv_format == "fp8-ds-mla":
            # DeepSeek V3.2's 656-byte rows, their scales inside.
            self.data, self.scales = torch.zeros(batch, 1, capacity, self.shape.row_elements, dtype=torch.uint8, device=device), None
        else:
            self.data = torch.zeros(batch, 1, capacity, LATENT + ROPE, dtype=torch.uint8, device=device)
            self.scales = torch.zeros(batch, 1, (capacity + 3) // 4 * 4, dtype=torch.float32, device=device)
        self.length = 0
        self.steps = 0

    def _parts(self, hidden_states, position_embeddings):
        """Q's absorbed rows `[B, S, H, 576]` (bf16) and the tokens' latent rows `[B, S, 1, 576]` (bf16)."""
        m = self.inner
        b, s = hidden_states.shape[:2]
        if m.q_lora_rank is None:
            q = m.q_proj(hidden_states)
        else:
            q = m.q_b_proj(m.q_a_layernorm(m.q_a_proj(hidden_states)))
        q = q.view(b, s, self.heads, self.nope + ROPE).transpose(1, 2)
        q_nope, q_rot = torch.split(q, [self.nope, ROPE], dim=-1)
        k_pass, k_rot = torch.split(m.kv_a_proj_with_mqa(hidden_states), [LATENT, ROPE], dim=-1)
        latent = m.kv_a_layernorm(k_pass)
        cos, sin = position_embeddings
        q_rot, k_rot = self.rope(q_rot, k_rot.view(b, 1, s, ROPE), cos, sin)
        q_lat = torch.einsum("bhsn,hnc->bshc", q_nope.float(), self.w_uk)
        q_abs = torch.cat([q_lat, q_rot.transpose(1, 2).float()], -1).to(torch.bfloat16).contiguous()
        rows = torch.cat([latent, k_rot[:, 0]], -1).view(b, s, 1, LATENT + ROPE).to(torch.bfloat16).contiguous()
        return q_abs, rows

    def forward(self, hidden_states, position_embeddings=None, attention_mask=None, **kwargs):
        b, s = hidden_states.shape[:2]
        q_abs, rows = self._parts(hidden_states, position_embeddings)
        self.length += s
        lens = torch.full((b,), self.length, dtype=torch.int32, device=hidden_states.device)
        self.attn.append_rows(self.shape, rows, self.data, self.scales, seq_lens=lens)
        if s > 1:
            # Prefill: the module's own attention (no cache).
            return self.inner(hidden_states=hidden_states, position_embeddings=position_embeddings, attention_mask=attention_mask)
        self.steps += 1
        o = ops.attention_step(q_abs, self.data, self.data, lens, None, self.scales, self.scales, None, self.kv_format, -1, self.inner.scaling, 0.0)
        out = torch.einsum("bshc,hvc->bshv", o.float(), self.w_uv).reshape(b, s, self.heads * self.v)
        return self.inner.o_proj(out.to(hidden_states.dtype)), None


def config(vocab: int):
    """A small random DeepSeek V3: 2 dense layers, 16 heads, DeepSeek's
    latent sizes (512 + 64) and head dims (128 + 64 for Q·K, 128 for V)."""
    import transformers

    return transformers.DeepseekV3Config(
        vocab_size=vocab, hidden_size=512, intermediate_size=1024, moe_intermediate_size=256,
        num_hidden_layers=2, first_k_dense_replace=2, num_attention_heads=16, num_key_value_heads=16,
        n_routed_experts=4, num_experts_per_tok=2, n_group=1, topk_group=1,
        q_lora_rank=256, kv_lora_rank=LATENT, qk_nope_head_dim=128, qk_rope_head_dim=ROPE, v_head_dim=128,
        max_position_embeddings=1024,
    )


@torch.no_grad()
def decode_absorbed(model, inputs, ref_tokens, kv_format: str):
    """The model's logits at each step with `AbsorbedMla` in every layer,
    fed the reference's tokens: (`[B, steps, V]` float32 logits, argmax
    tokens, decode steps the kernels ran)."""
    ids = inputs["input_ids"]
    b, prompt = ids.shape
    steps = ref_tokens.shape[1]
    layers = model.model.layers
    originals = [layer.self_attn for layer in layers]
    wrappers = [AbsorbedMla(a, b, prompt + steps, kv_format) for a in originals]
    try:
        for layer, w in zip(layers, wrappers):
            layer.self_attn = w
        logits = [model(input_ids=ids, use_cache=False).logits[:, -1].float()]
        for i in range(steps - 1):
            pos = torch.full((b, 1), prompt + i, dtype=torch.long, device=ids.device)
            logits.append(model(input_ids=ref_tokens[:, i : i + 1], position_ids=pos, use_cache=False).logits[:, -1].float())
    finally:
        for layer, a in zip(layers, originals):
            layer.self_attn = a
    logits = torch.stack(logits, 1)
    return logits, logits.argmax(-1), sum(w.steps for w in wrappers)
