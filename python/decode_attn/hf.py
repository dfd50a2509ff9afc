"""The transformers attention function: decode steps on decode-attn, exact
or sent to a correct fallback, never silently wrong.

    import decode_attn.hf
    decode_attn.hf.register()                    # "decode_attn"
    model = AutoModelForCausalLM.from_pretrained(..., attn_implementation="decode_attn")

What runs where:
- `register()` adds an attention function and a mask function under one
  name. The mask function runs once per forward and layer type (full or
  sliding): for a decode step (1..8 new tokens) it turns transformers' mask
  into each sequence's key range in that layer type's K/V tensors —
  `[start_b, len_b)` as `[batch]` int32 device tensors (`KeyRanges`): a
  left-padded batch starts late, a static cache ends at its filled length
  — and checks that the range (with the layer's sliding window) is exactly
  transformers' own mask. Eager, the check is one host read per forward (as
  transformers' SDPA mask makes); a mask that is not a key range (a custom
  4D mask, a mask with holes, chunked attention) is then handed on as
  transformers' own, and the layers fall back. Under `torch.compile`
  nothing reads the device: the check is a `torch._assert_async`, so a
  traced step stops with a device assert rather than run on a mask it does
  not serve.
- The attention function serves a decode step whose mask is a `KeyRanges`
  (or none, for one new token) with the functional op
  `decode_attn::attention` on a capacity plan: transformers' own cache
  tensors read in place (`[B, Hkv, L, D]`, head-major; a static cache's
  capacity; quantized pages of `decode_attn.cache`), the model's scaling,
  soft-cap, sliding window and gpt-oss's sinks (`s_aux`). The op allocates
  its output and workspace from torch's allocator and writes nothing else,
  so `generate(..., cache_implementation="static")` keeps it inside its
  CUDA graphs.
- Everything else falls back: prefill and more than 8 new tokens,
  cross-attention (`is_causal=False`) with several new tokens, dropout,
  `output_attentions`, head dims other than 64/128/256, packed-sequence
  arguments, a mask that is not a key range. The fallback is transformers'
  SDPA, or where SDPA would drop something (a soft-cap, sinks) the model's
  own eager attention; quantized pages are dequantized for it.
"""

from __future__ import annotations

import sys

import torch

from . import ops
from .cache import quantized_layer_of

MAX_Q_LEN = 8
_HEAD_DIMS = (64, 128, 256)
# Arguments that change what attention computes and that the kernels do
# not take: their calls fall back.
_UNSERVED_KWARGS = frozenset(("cu_seq_lens_q", "cu_seq_lens_k", "max_length_q", "max_length_k", "position_bias", "attention_bias", "head_mask"))

_tracing = torch.compiler.is_compiling

# How often the attention function served a call or fell back, and why
# (for tests and the benchmark; a replayed CUDA graph counts nothing).
calls = {"served": 0}


def _count(what: str) -> None:
    if not _tracing():
        calls[what] = calls.get(what, 0) + 1


class KeyRanges:
    """What the mask function hands every attention call of one forward and
    layer type, for a decode step: sequence b's keys in that layer type's
    K/V tensors are `[starts[b], lens[b])` (`[batch]` int32 on the device;
    `starts` None: from 0), its `q_len` new tokens the last ones, causal
    among themselves, each seeing at most `window` keys (transformers'
    convention: the token itself and `window − 1` before it; None: all).
    `mask()` is transformers' own mask of the step (SDPA's), for calls that
    fall back, made on first use."""

    __slots__ = ("lens", "starts", "q_len", "kv_len", "window", "_mask_args", "_mask", "_made")
    # Read as a prepared 4D mask where transformers asks (`generate`
    # prepares a static cache's masks ahead of its compiled forward, which
    # then hands them back to the mask function: `decode_attn_mask`).
    ndim = 4

    @property
    def shape(self):
        return (self.lens.shape[0], 1, self.q_len, self.kv_len)

    def __init__(self, lens, starts, q_len: int, kv_len: int, window, mask_args: dict, mask=None, made: bool = False):
        self.lens = lens
        self.starts = starts
        self.q_len = q_len
        self.kv_len = kv_len
        self.window = window
        self._mask_args = mask_args
        self._mask = mask
        self._made = made

    def mask(self):
        """transformers' SDPA mask of the step (a boolean `[B, 1, q, kv]`
        tensor, or None for a plain causal one)."""
        if not self._made:
            from transformers.masking_utils import sdpa_mask

            self._mask = sdpa_mask(**self._mask_args)
            self._made = True
        return self._mask


def _lens_tensor(q_offset, q_length: int, kv_offset: int, batch: int, device) -> torch.Tensor:
    """Each sequence's filled length in the layer's K/V rows: the keys up to
    and including the new tokens (a static cache's `q_offset` is a device
    scalar)."""
    if isinstance(q_offset, torch.Tensor):
        n = (q_offset.to(device=device, dtype=torch.int32) + (q_length - kv_offset)).reshape(1)
        return n.expand(batch).contiguous()
    return torch.full((batch,), q_offset + q_length - kv_offset, dtype=torch.int32, device=device)


def decode_attn_mask(
    batch_size: int,
    q_length: int,
    kv_length: int,
    q_offset=0,
    kv_offset: int = 0,
    mask_function=None,
    attention_mask=None,
    local_size=None,
    allow_is_causal_skip: bool = True,
    allow_is_bidirectional_skip: bool = False,
    use_vmap: bool = False,
    device="cpu",
    **kwargs,
):
    """transformers' mask interface: a `KeyRanges` for a decode step whose
    mask is one, else SDPA's mask (which the attention function hands to
    its fallback)."""
    from transformers.masking_utils import causal_mask_function, prepare_padding_mask, sdpa_mask

    if isinstance(attention_mask, KeyRanges):
        # Made ahead for this step (`generate` with a static cache).
        return attention_mask
    if mask_function is None:
        mask_function = causal_mask_function
    args = dict(
        batch_size=batch_size,
        q_length=q_length,
        kv_length=kv_length,
        q_offset=q_offset,
        kv_offset=kv_offset,
        mask_function=mask_function,
        attention_mask=attention_mask,
        local_size=local_size,
        allow_is_causal_skip=allow_is_causal_skip,
        allow_is_bidirectional_skip=allow_is_bidirectional_skip,
        use_vmap=use_vmap,
        device=device,
        **kwargs,
    )
    if not 1 <= q_length <= MAX_Q_LEN or kv_length < q_length or allow_is_bidirectional_skip:
        return sdpa_mask(**args)
    lens = _lens_tensor(q_offset, q_length, kv_offset, batch_size, device)
    if not _tracing() and mask_function is causal_mask_function and local_size is None and not use_vmap:
        # The common eager step: causal over a 2D padding mask. One host
        # read says whether the padding is a left padding, and whether
        # there is any.
        if attention_mask is None:
            return KeyRanges(lens, None, q_length, kv_length, None, args)
        pad = prepare_padding_mask(attention_mask, kv_length, kv_offset)[:, kv_offset : kv_offset + kv_length]
        if not isinstance(q_offset, torch.Tensor) and q_offset + q_length - kv_offset == kv_length and bool(pad.all()):
            # Every row filled and none padded (as SDPA's mask reads it: one
            # host read).
            return KeyRanges(lens, None, q_length, kv_length, None, args)
        t = torch.arange(kv_length, device=device)
        filled = t[None, :] < lens[:, None]
        starts = (~pad & filled).cumprod(dim=1).sum(dim=1)
        left_padded = ((t[None, :] >= starts[:, None]) == pad) | ~filled
        # (Every new token must be a key of its own sequence.)
        sees_itself = (starts <= lens - q_length).all()
        ok, padded = torch.stack([left_padded.all() & sees_itself, (starts > 0).any()]).tolist()
        if not ok:
            return sdpa_mask(**args)
        return KeyRanges(lens, starts.to(torch.int32) if padded else None, q_length, kv_length, None, args)
    # Any other mask: made as SDPA makes it, and checked to be the key
    # range the kernels apply (with `local_size` as the window).
    dense = sdpa_mask(**{**args, "allow_is_causal_skip": False})
    b, _, q, n = dense.shape
    allowed = dense[:, 0]
    t = torch.arange(n, device=dense.device)
    first_row = allowed[:, 0, :]
    starts = torch.where(first_row.any(dim=1), first_row.to(torch.int8).argmax(dim=1), n).to(torch.int32)
    pos = lens[:, None] - q_length + torch.arange(q_length, device=dense.device)[None, :]
    ours = (t[None, None, :] >= starts[:, None, None]) & (t[None, None, :] <= pos[:, :, None])
    if local_size is not None:
        ours &= t[None, None, :] > pos[:, :, None] - local_size
    same = (ours == allowed).all() & (starts <= lens - q_length).all()
    if _tracing():
        torch._assert_async(same, "decode_attn: transformers' attention mask of this step is not a per-sequence key range (a mask with holes, chunked attention?): decode_attn cannot serve it under torch.compile; run the model without compiling it, or with another attention")
        return KeyRanges(lens, starts, q_length, kv_length, local_size, args, dense, True)
    ok, padded = torch.stack([same, (starts > 0).any()]).tolist()
    if not ok:
        return dense
    return KeyRanges(lens, starts if padded else None, q_length, kv_length, local_size, args, dense, True)


# -- the attention function ---------------------------------------------------

_sinks_f32: dict = {}


def _sinks(s_aux: torch.Tensor) -> torch.Tensor:
    """gpt-oss's sinks (a parameter of the model's dtype) as the f32 `[Hq]`
    array the kernels read, converted once per value of the parameter."""
    if _tracing():
        return s_aux.float().contiguous()
    key = id(s_aux)
    hit = _sinks_f32.get(key)
    if hit is not None and hit[0] is s_aux and hit[1] == s_aux._version and hit[2] == s_aux.data_ptr():
        return hit[3]
    f32 = s_aux.detach().float().contiguous()
    if len(_sinks_f32) > 4096:
        _sinks_f32.clear()
    _sinks_f32[key] = (s_aux, s_aux._version, s_aux.data_ptr(), f32)
    return f32


def _on_gpu(t: torch.Tensor) -> bool:
    """Whether the kernels can take `t` (the CPU tests emulate them)."""
    return t.is_cuda


def _why_not(module, query, key, value, attention_mask, dropout, kwargs) -> str | None:
    """Why this call falls back, or None when the kernels serve it."""
    b, hq, q_len, d = query.shape
    if not _on_gpu(query):
        return "not on a CUDA device"
    if query.dtype not in ops.DTYPE_NAMES:
        return "query dtype"
    if not 1 <= q_len <= MAX_Q_LEN:
        return "prefill"
    if d not in _HEAD_DIMS:
        return "head dim"
    if key.shape != value.shape or key.stride() != value.stride() or key.stride(-1) != 1:
        return "cache layout"
    if dropout and module.training:
        return "dropout"
    if kwargs.get("output_attentions", False):
        return "output_attentions"
    if not _UNSERVED_KWARGS.isdisjoint(kwargs) and any(kwargs[k] is not None for k in _UNSERVED_KWARGS.intersection(kwargs)):
        return "packed or biased attention"
    n = key.shape[2]
    if isinstance(attention_mask, KeyRanges):
        # The mask is what SDPA and eager attention apply, whatever
        # `is_causal` says: it was checked to be this key range.
        if attention_mask.q_len != q_len or attention_mask.kv_len != n:
            return "mask for other tensors"
        return None
    if attention_mask is None:
        # SDPA's meaning of no mask: one new token sees every key (causal
        # or not); several see the first q keys causally, or all of them
        # when not causal.
        is_causal = kwargs.get("is_causal")
        is_causal = getattr(module, "is_causal", True) if is_causal is None else is_causal
        if q_len == 1 or (is_causal and n == q_len):
            return None
        return "no mask" if is_causal else "not causal"
    return "a mask that is not a key range"


def decode_attn_forward(module, query, key, value, attention_mask, scaling=None, dropout=0.0, softcap=None, sliding_window=None, **kwargs):
    """transformers' attention interface (`query` `[B, Hq, q, D]`, `key` and
    `value` `[B, Hkv, L, D]`); returns `([B, q, Hq, D], None)`."""
    layer = quantized_layer_of(key)
    if layer is None and (key.dtype != query.dtype or key.shape[-1] != query.shape[-1]):
        why = "cache dtype or head dim"
    else:
        why = _why_not(module, query, key, value, attention_mask, dropout, kwargs)
    if layer is not None and why is None and not layer.serves(query, key, value):
        why = "quantized view"
    if why is not None:
        _count(why)
        if layer is not None:
            key, value = layer.dequantized(key, value)
        mask = attention_mask.mask() if isinstance(attention_mask, KeyRanges) else attention_mask
        return _fallback(module, query, key, value, mask, softcap, sliding_window, dropout=dropout, scaling=scaling, **kwargs)
    _count("served")
    b, hq, q_len, d = query.shape
    n = key.shape[2]
    if isinstance(attention_mask, KeyRanges):
        lens, starts, window = attention_mask.lens, attention_mask.starts, attention_mask.window
    else:
        lens, starts, window = _full_lens(b, n, query.device), None, None
    q = query.transpose(1, 2)
    if not q.is_contiguous():
        q = q.contiguous()
    s_aux = kwargs.get("s_aux")
    sinks = _sinks(s_aux) if s_aux is not None else None
    if layer is not None:
        kv_format, k_scales, v_scales = layer.kv_format, layer.k_scales, layer.v_scales
    else:
        kv_format, k_scales, v_scales = ops.DTYPE_NAMES[query.dtype], None, None
    # transformers' window W keeps W keys (the token and W − 1 before it);
    # the kernels' window W keeps W + 1.
    win = (window - 1) if window else -1
    args = (q, key, value, lens, starts, k_scales, v_scales, sinks, kv_format, win, float(scaling or 0.0), float(softcap or 0.0))
    out = torch.ops.decode_attn.attention(*args) if _tracing() else ops.attention_step(*args)
    return out, None


_full: dict = {}


def _full_lens(batch: int, n: int, device) -> torch.Tensor:
    """`[batch]` int32 lengths of `n` (cached per value: calls without a mask)."""
    if _tracing():
        return torch.full((batch,), n, dtype=torch.int32, device=device)
    key = (batch, n, device)
    t = _full.get(key)
    if t is None:
        if len(_full) > 256:
            _full.clear()
        t = _full[key] = torch.full((batch,), n, dtype=torch.int32, device=device)
    return t


def _fallback(module, query, key, value, mask, softcap, sliding_window=None, **kwargs):
    """What the kernels do not serve: transformers' SDPA, or with a logits
    soft-cap or sinks (which SDPA drops) the model's own eager attention."""
    if softcap is not None or kwargs.get("s_aux") is not None:
        eager = getattr(sys.modules[type(module).__module__], "eager_attention_forward", None)
        if eager is None:
            raise NotImplementedError(
                f"decode_attn: {type(module).__name__} needs a soft-cap or sinks, which SDPA drops, and its module has no eager_attention_forward to fall back to"
            )
        key, value, mask = _eager_inputs(mask, query, key, value)
        return eager(module, query, key, value, mask, softcap=softcap, sliding_window=sliding_window, **kwargs)
    from transformers.integrations.sdpa_attention import sdpa_attention_forward

    return sdpa_attention_forward(module, query, key, value, mask, sliding_window=sliding_window, **kwargs)


def _eager_inputs(mask, query, key, value):
    """SDPA's mask as the additive float mask eager attention takes, with
    SDPA's meaning of None kept: one new token sees every key; several see
    the first `q` keys causally (SDPA crops a static cache's unfilled
    keys)."""
    q_len = query.shape[2]
    if mask is not None and mask.dtype != torch.bool:
        return key, value, mask
    if mask is None:
        if q_len == 1:
            return key, value, None
        key, value = key[:, :, :q_len], value[:, :, :q_len]
        i = torch.arange(q_len, device=query.device)
        mask = (i[None, :] <= i[:, None])[None, None]
    zero = torch.zeros((), dtype=query.dtype, device=query.device)
    return key, value, torch.where(mask, zero, torch.finfo(query.dtype).min)


def register(name: str = "decode_attn") -> str:
    """Registers the attention function and its mask function under `name`
    (`attn_implementation=name`); returns the name. Quantized caches are
    caches, not attention functions: `decode_attn.cache`."""
    from transformers import AttentionInterface
    from transformers.masking_utils import ALL_MASK_ATTENTION_FUNCTIONS

    AttentionInterface.register(name, decode_attn_forward)
    ALL_MASK_ATTENTION_FUNCTIONS.register(name, decode_attn_mask)
    return name
