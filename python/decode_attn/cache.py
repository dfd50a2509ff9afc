"""Quantized KV caches for transformers, in decode-attn's own layouts.

    from decode_attn.cache import QuantizedCache
    cache = QuantizedCache(model.config, kv_format="int8")            # grows as it fills
    cache = QuantizedCache(model.config, kv_format="fp8", max_cache_len=4096)   # static: CUDA graphs
    model.generate(..., past_key_values=cache)                         # with attn_implementation="decode_attn"

Each layer keeps K and V as `[batch, Hkv, capacity, D']` values of the
format (int8, fp8 e4m3 per head or per tensor, int4 with groups of 32, 64
or 128) and their scales (`docs/formats.md`), head-major, as
`DecodeShape(layout="hnd", kv_format=...)` describes them. Only each step's
new tokens are quantized (`DecodeAttention.append_rows`, on the GPU); no
16-bit copy of the cache is kept.

What `update()` returns, and so what the attention function sees:
- a decode step (1..8 new tokens over a filled cache): the quantized
  tensors themselves, at full capacity. They carry their layer
  (`quantized_layer_of`), which is how the attention function finds the
  scales, the format and the fill (`update()` returns only K and V); the
  mask function's key ranges say which rows are filled.
- a prefill (an empty cache) or more than 8 new tokens (a continued chat,
  an assisted verification): 16-bit K and V — the new tokens exact, the
  cached ones dequantized — which the attention function hands to SDPA.
  `get_mask_sizes` tells transformers' mask which of the two it will be.

Forms: dynamic (grows in steps of 256 tokens, reallocating), static
(`max_cache_len`: fixed buffers marked as static addresses, a device
length, for `torch.compile` and CUDA graphs), and for sliding-window layers
of the dynamic form a bounded one that keeps only the window (it drops the
oldest tokens as it fills, 256 at a time). Static sliding layers keep every
token (the kernels read only the window). `memory_bytes()` says what a
cache holds. Beam search and assisted generation: `reorder_cache`, `crop`,
`batch_repeat_interleave`, `batch_select_indices`.

Per-tensor fp8 (`"fp8"`): each layer's K and V scales are set from the
prefill's largest magnitudes (`amax / 448`); later values beyond them
saturate at ±448 × scale, as vLLM's fp8 caches do with their scales.
"""

from __future__ import annotations

import torch

from ._native import LATENT_ONLY_KV_FORMATS, QUANTIZED_KV_FORMATS, kv_format_name
from .api import DecodeAttention, DecodeShape
from .ops import DTYPE_NAMES

try:  # transformers' cache classes (the module imports without transformers)
    from transformers.cache_utils import Cache, CacheLayerMixin
except ImportError:  # pragma: no cover - exercised without transformers
    Cache, CacheLayerMixin = object, object

MAX_Q_LEN = 8
# Dynamic layers grow (and sliding ones drop old tokens) this many at a time.
CHUNK = 256
# The quantized formats' names, as the native module spells them (but those
# of MLA's latent rows alone: a model's attention layers have other rows).
FORMATS = tuple(f for f in QUANTIZED_KV_FORMATS if f not in LATENT_ONLY_KV_FORMATS)
_ATTR = "_decode_attn_layer"


def quantized_layer_of(t: torch.Tensor):
    """The `QuantizedLayer` whose K or V tensor `t` is, or None."""
    return getattr(t, _ATTR, None)


class QuantizedLayer(CacheLayerMixin):
    """One attention layer's K and V in a decode-attn format (see the module
    docs). `max_cache_len`: the static form; `sliding_window`: a sliding
    layer (the dynamic form then keeps only the window)."""

    is_compileable = False
    is_croppable = True

    def __init__(self, kv_format: str, max_cache_len: int | None = None, sliding_window: int | None = None, **kwargs):
        super().__init__()
        name = kv_format_name(kv_format)  # one spelling, or a ValueError naming `kv_format`
        if name not in FORMATS:
            why = " (its rows are MLA's latent rows alone)" if name in LATENT_ONLY_KV_FORMATS else ""
            raise ValueError(f"invalid `kv_format`: expected a quantized format, one of {FORMATS}, got {kv_format!r}{why}")
        self.kv_format = name
        self.static = max_cache_len is not None
        self.max_cache_len = max_cache_len
        self.sliding_window = sliding_window
        self.is_sliding = sliding_window is not None
        if self.static:
            self.is_compileable = True
            self.is_croppable = False
        # Tokens seen (host), tokens dropped from the front (sliding, dynamic).
        self.seen = 0
        self.offset = 0
        self.capacity = 0
        self._scaled = False
        self.k_data = self.v_data = self.k_scales = self.v_scales = None
        self.shape = None

    def __repr__(self):
        return f"QuantizedLayer({self.kv_format}, {'static' if self.static else 'dynamic'}, capacity={self.capacity}, seen={self.seen})"

    # -- storage -------------------------------------------------------------
    def lazy_initialization(self, key_states: torch.Tensor, value_states: torch.Tensor) -> None:
        if key_states.dtype not in DTYPE_NAMES:
            raise ValueError(f"decode_attn.cache: K and V must be bf16 or fp16 to quantize, got {key_states.dtype}")
        self.dtype, self.device = key_states.dtype, key_states.device
        self.batch_size, self.num_heads, _, self.head_dim = key_states.shape
        self.attn = DecodeAttention(self.device)
        self.cumulative_length = torch.zeros((), dtype=torch.int64, device=self.device)
        self._allocate(self.max_cache_len if self.static else CHUNK)
        self.is_initialized = True

    def _shape(self, capacity: int, batch: int | None = None) -> DecodeShape:
        return DecodeShape(
            batch=batch or self.batch_size,
            num_q_heads=self.num_heads,
            num_kv_heads=self.num_heads,
            head_dim=self.head_dim,
            max_seq_len=capacity,
            dtype=DTYPE_NAMES[self.dtype],
            kv_format=self.kv_format,
            layout="hnd",
        )

    def _allocate(self, capacity: int) -> None:
        """Empty buffers of `capacity` tokens (the data kept is copied by the caller)."""
        shape = self._shape(capacity)
        b, h = self.batch_size, self.num_heads
        width = self.head_dim // shape.values_per_element
        k = torch.empty((b, h, capacity, width), dtype=torch.uint8, device=self.device)
        v = torch.empty_like(k)
        if shape.tensor_scaled:
            ks = self.k_scales if self.k_scales is not None else torch.ones(1, dtype=torch.float32, device=self.device)
            vs = self.v_scales if self.v_scales is not None else torch.ones(1, dtype=torch.float32, device=self.device)
        else:
            padded = shape.scale_strides[2]
            words = shape.side_entry_bytes // 4
            dims = (b, h, padded) + ((words,) if words > 1 else ())
            side_dtype = torch.int32 if words > 1 else torch.float32
            ks = torch.zeros(dims, dtype=side_dtype, device=self.device)
            vs = torch.zeros_like(ks)
        if self.static and not torch.compiler.is_compiling():
            for t in (k, v, ks, vs, self.cumulative_length):
                torch._dynamo.mark_static_address(t)
        self._set(k, v, ks, vs, shape, capacity)

    def _set(self, k, v, ks, vs, shape, capacity):
        from .api import shape_id

        for t in (k, v):
            setattr(t, _ATTR, self)
        self.k_data, self.v_data, self.k_scales, self.v_scales = k, v, ks, vs
        self.keys, self.values = k, v
        self.shape, self.capacity = shape, capacity
        # (The id the compiled append names the shape by; the layer keeps
        # the shape alive.)
        self.shape_id = shape_id(shape)

    def _room(self, q: int) -> tuple[int, int]:
        """A dynamic layer's (capacity, oldest tokens to drop) for an update
        of `q` tokens: the capacity grows in steps of `CHUNK`; a full
        sliding layer drops what is out of every later token's window
        instead, where that makes room."""
        filled = self.seen - self.offset
        needed = filled + q
        if needed <= self.capacity:
            return self.capacity, 0
        drop = filled - (self.sliding_window - 1) if self.is_sliding else 0
        if drop > 0 and needed - drop <= self.capacity:
            return self.capacity, drop
        return -(-needed // CHUNK) * CHUNK, 0

    def _grow(self, q: int) -> None:
        """Dynamic layers: room for `q` more tokens (`_room`)."""
        capacity, drop = self._room(q)
        if drop:
            self._drop_front(drop)
        if capacity == self.capacity:
            return
        filled = self.seen - self.offset
        old = (self.k_data, self.v_data, self.k_scales, self.v_scales)
        self._allocate(capacity)
        if filled:
            self.k_data[:, :, :filled].copy_(old[0][:, :, :filled])
            self.v_data[:, :, :filled].copy_(old[1][:, :, :filled])
            if not self.shape.tensor_scaled:
                self.k_scales[:, :, :filled].copy_(old[2][:, :, :filled])
                self.v_scales[:, :, :filled].copy_(old[3][:, :, :filled])

    def _drop_front(self, n: int) -> None:
        """Sliding layers: forgets the `n` oldest tokens (moved in place)."""
        keep = self.seen - self.offset - n
        for t in (self.k_data, self.v_data) + (() if self.shape.tensor_scaled else (self.k_scales, self.v_scales)):
            t[:, :, :keep] = t[:, :, n : n + keep].clone()
        self.offset += n

    def memory_bytes(self) -> int:
        """Bytes this layer's K, V and scales occupy on the device."""
        if self.k_data is None:
            return 0
        return sum(t.numel() * t.element_size() for t in (self.k_data, self.v_data, self.k_scales, self.v_scales))

    # -- writing -------------------------------------------------------------
    def _lens(self, filled_after) -> torch.Tensor:
        if isinstance(filled_after, torch.Tensor):
            return filled_after.to(torch.int32).reshape(1).expand(self.batch_size).contiguous()
        return torch.full((self.batch_size,), filled_after, dtype=torch.int32, device=self.device)

    def _append(self, key_states, value_states, lens) -> None:
        """Quantizes the new rows into the cache (at `lens − rows ..`)."""
        if self.shape.tensor_scaled and not self._scaled and not torch.compiler.is_compiling():
            self._scaled = True
            # Per-tensor fp8: the scales from the first tokens' magnitudes.
            for scale, x in ((self.k_scales, key_states), (self.v_scales, value_states)):
                scale.copy_((x.abs().amax().float() / 448.0).clamp_min(torch.finfo(torch.float32).tiny).reshape(1))
        for states, data, side in ((key_states, self.k_data, self.k_scales), (value_states, self.v_data, self.v_scales)):
            rows = states
            if torch.compiler.is_compiling():
                torch.ops.decode_attn.append_rows(self.shape_id, rows, data, side, lens)
            else:
                self.attn.append_rows(self.shape, rows, data, side, seq_lens=lens, order="hnd")

    def dequantized(self, key: torch.Tensor, value: torch.Tensor, rows: int | None = None):
        """K and V as 16-bit `[B, Hkv, rows, D]` (the first `rows` of `key`'s,
        default all): what a fallback attends over."""
        n = key.shape[2] if rows is None else rows
        out = []
        for data, side in ((self.k_data, self.k_scales), (self.v_data, self.v_scales)):
            plain = torch.zeros((self.batch_size, self.num_heads, self.capacity, self.head_dim), dtype=self.dtype, device=self.device)
            filled = self._lens(self.cumulative_length) if self.static else self._lens(self.seen - self.offset)
            self.attn.dequantize_kv(self.shape, data, side, plain, seq_lens=filled)
            out.append(plain[:, :, :n])
        return out[0], out[1]

    def serves(self, query, key, value) -> bool:
        """Whether the attention function can read `key` / `value` (this
        layer's own tensors) with `query`'s dtype."""
        return key is self.k_data and value is self.v_data and query.dtype == self.dtype

    # -- the cache layer API -------------------------------------------------
    def _decode_step(self, q_len: int) -> bool:
        """Whether an update of `q_len` tokens returns the quantized tensors
        rather than 16-bit ones: a decode step over a filled cache (or any
        step of at most 8 tokens of a static one, which has no host length
        to read)."""
        if torch.compiler.is_compiling():
            return True
        return 1 <= q_len <= MAX_Q_LEN and (self.static or self.seen > 0)

    def _filled(self) -> int:
        """Tokens the layer holds (a static layer's device length is read)."""
        if self.static:
            return int(self.cumulative_length) if self.is_initialized else 0
        return self.seen - self.offset

    def update(self, key_states: torch.Tensor, value_states: torch.Tensor, *args, **kwargs):
        if not self.is_initialized:
            self.lazy_initialization(key_states, value_states)
        q = key_states.shape[-2]
        decode = self._decode_step(q)
        filled = None if decode else self._filled()
        past = self.dequantized(self.k_data, self.v_data, filled) if filled else None
        if self.static:
            if filled is not None and filled + q > self.capacity:
                raise ValueError(f"decode_attn.cache: a static cache of {self.capacity} tokens cannot hold {filled + q}")
            after = self.cumulative_length + q
            if decode:
                # (No host length to check a step against: a step past the
                # capacity stops on the device, as an index_copy_ would.)
                torch._assert_async(after <= self.capacity, "decode_attn.cache: a step past the static cache's capacity")
            self._append(key_states, value_states, self._lens(after))
            self.cumulative_length.add_(q)
        else:
            self._grow(q)
            self._append(key_states, value_states, self._lens(self.seen - self.offset + q))
            self.seen += q
        if decode:
            return self.k_data, self.v_data
        if past is None:
            return key_states, value_states
        return torch.cat([past[0], key_states], dim=-2), torch.cat([past[1], value_states], dim=-2)

    def get_mask_sizes(self, query_length: int) -> tuple[int, int]:
        if not self._decode_step(query_length):
            # 16-bit K and V of every kept token (`update`).
            return self._filled() + query_length, self.offset
        if self.static:
            return self.capacity, 0
        capacity, drop = self._room(query_length)
        return capacity, self.offset + drop

    def get_seq_length(self) -> int:
        if self.static:
            return self.cumulative_length if self.is_initialized else 0
        return self.seen

    def get_max_length(self) -> int:
        return self.max_cache_len if self.static else -1

    def reset(self) -> None:
        self.seen = 0
        self.offset = 0
        self._scaled = False
        if self.is_initialized:
            self.cumulative_length.zero_()

    def reorder_cache(self, beam_idx: torch.LongTensor) -> None:
        self.batch_select_indices(beam_idx)

    def batch_select_indices(self, indices: torch.Tensor) -> None:
        if not self.is_initialized:
            return
        indices = indices.to(self.device)
        batch = len(indices)
        self._rebatch(lambda t: t.index_select(0, indices), batch)

    def batch_repeat_interleave(self, repeats: int) -> None:
        if not self.is_initialized:
            return
        self._rebatch(lambda t: t.repeat_interleave(repeats, dim=0), self.batch_size * repeats)

    def _rebatch(self, f, batch: int) -> None:
        k, v = f(self.k_data), f(self.v_data)
        if self.shape.tensor_scaled:
            ks, vs = self.k_scales, self.v_scales
        else:
            ks, vs = f(self.k_scales), f(self.v_scales)
        self.batch_size = batch
        if self.static and not torch.compiler.is_compiling():
            for t in (k, v, ks, vs):
                torch._dynamo.mark_static_address(t)
        self._set(k, v, ks, vs, self._shape(self.capacity), self.capacity)

    def crop(self, tokens_to_remove: int) -> None:
        if self.static:
            raise NotImplementedError("decode_attn.cache: a static cache is not croppable (as transformers' StaticCache)")
        filled = self.seen - self.offset
        remove = -tokens_to_remove if tokens_to_remove <= 0 else max(self.seen - tokens_to_remove, 0)
        if remove > filled:
            raise ValueError(f"decode_attn.cache: cannot remove {remove} tokens from a layer that holds {filled}")
        self.seen -= remove


class QuantizedCache(Cache):
    """A transformers `Cache` of decode-attn quantized layers (module docs):
    one per layer of `config`, sliding layers where the config has them.
    `kv_format`: "int8", "fp8", "fp8-per-head", "int4-g32", "int4-g64" or
    "int4-g128" (`_` for `-` too); `max_cache_len`: the static form."""

    def __init__(self, config, kv_format: str = "int8", max_cache_len: int | None = None, **kwargs):
        from transformers.cache_utils import get_layer_types_and_kwargs

        layer_types, layer_kwargs = get_layer_types_and_kwargs(config.get_text_config(decoder=True))
        layers = []
        for t in layer_types:
            if t not in ("full_attention", "sliding_attention"):
                raise NotImplementedError(f"decode_attn.cache: layers of type {t!r} have no quantized form here (full and sliding attention do)")
            window = layer_kwargs.get("sliding_window") if t == "sliding_attention" else None
            layers.append(QuantizedLayer(kv_format, max_cache_len=max_cache_len, sliding_window=window))
        super().__init__(layers=layers)
        self.kv_format = kv_format

    def memory_bytes(self) -> int:
        """Bytes every layer's K, V and scales occupy on the device."""
        return sum(layer.memory_bytes() for layer in self.layers)

