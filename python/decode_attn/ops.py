"""torch custom ops: `decode_attn::run`, `decode_attn::run_step` and
`decode_attn::append_kv` (in place, `mutates_args` for what they write), and
`decode_attn::attention`, a functional decode step that allocates its
output and workspace from torch's allocator and mutates nothing, so that
inductor keeps it inside the CUDA graphs of `mode="reduce-overhead"`.
Plans and shapes are passed by id (`Plan.id`, `api.shape_id`), or for
`attention` by the values that fix them: a custom op takes only tensors and
numbers.

`DecodeAttention.run` / `run_step` / `append_kv` call these ops when
they are being compiled, and launch directly otherwise.
"""

from __future__ import annotations

import threading
from typing import Optional

import torch

from . import api
from ._native import KV_FORMAT_BITS, LATENT_QK_DIM, LATENT_V_DIM
from .api import DecodeAttention, DecodeShape

Tensor = torch.Tensor

# The query (and 16-bit cache) dtypes the kernels take, by their names in
# the library.
DTYPE_NAMES = {torch.bfloat16: "bf16", torch.float16: "f16"}


@torch.library.custom_op("decode_attn::run", mutates_args=("out", "workspace"), device_types="cuda")
def run(
    plan_id: int,
    q: Tensor,
    k: Tensor,
    v: Tensor,
    out: Tensor,
    workspace: Tensor,
    k_scales: Optional[Tensor],
    v_scales: Optional[Tensor],
    sinks: Optional[Tensor],
    alibi_slopes: Optional[Tensor],
    tree_masks: Optional[Tensor] = None,
    tree_positions: Optional[Tensor] = None,
) -> None:
    plan = api.lookup_plan(plan_id)
    variant = api.VariantBuffers(sinks=sinks, alibi_slopes=alibi_slopes, tree_masks=tree_masks, tree_positions=tree_positions)
    plan.attention._launch(plan, q, k, v, out, workspace, k_scales, v_scales, None, None, variant, None)


@run.register_fake
def _run_fake(plan_id, q, k, v, out, workspace, k_scales, v_scales, sinks, alibi_slopes, tree_masks=None, tree_positions=None) -> None:
    return None


@torch.library.custom_op("decode_attn::run_step", mutates_args=("out", "workspace"), device_types="cuda")
def run_step(
    plan_id: int,
    q: Tensor,
    k: Tensor,
    v: Tensor,
    out: Tensor,
    workspace: Tensor,
    seq_lens: Tensor,
    block_table: Optional[Tensor],
    seq_starts: Optional[Tensor],
    k_scales: Optional[Tensor],
    v_scales: Optional[Tensor],
    sinks: Optional[Tensor],
    alibi_slopes: Optional[Tensor],
    tree_masks: Optional[Tensor] = None,
    tree_positions: Optional[Tensor] = None,
) -> None:
    plan = api.lookup_plan(plan_id)
    variant = api.VariantBuffers(sinks=sinks, alibi_slopes=alibi_slopes, tree_masks=tree_masks, tree_positions=tree_positions)
    plan.attention._launch(plan, q, k, v, out, workspace, k_scales, v_scales, seq_lens, block_table, variant, None, seq_starts)


@run_step.register_fake
def _run_step_fake(plan_id, q, k, v, out, workspace, seq_lens, block_table, seq_starts, k_scales, v_scales, sinks, alibi_slopes, tree_masks=None, tree_positions=None) -> None:
    return None


@torch.library.custom_op("decode_attn::append_kv", mutates_args=("data", "scales"), device_types="cuda")
def append_kv(shape_id: int, new_rows: Tensor, data: Tensor, scales: Optional[Tensor], seq_lens: Tensor, block_table: Optional[Tensor]) -> None:
    shape = api.lookup_shape(shape_id)
    attn = api.DecodeAttention(new_rows.device)
    attn._write(True, shape, new_rows, data, scales, seq_lens, block_table, None)


@append_kv.register_fake
def _append_kv_fake(shape_id, new_rows, data, scales, seq_lens, block_table) -> None:
    return None


@torch.library.custom_op("decode_attn::append_rows", mutates_args=("data", "scales"), device_types="cuda")
def append_rows(shape_id: int, new_rows: Tensor, data: Tensor, scales: Optional[Tensor], seq_lens: Tensor) -> None:
    """`DecodeAttention.append_rows` of `[batch, Hkv, rows, D]` rows."""
    shape = api.lookup_shape(shape_id)
    api.DecodeAttention(new_rows.device).append_rows(shape, new_rows, data, scales, seq_lens=seq_lens, order="hnd")


@append_rows.register_fake
def _append_rows_fake(shape_id, new_rows, data, scales, seq_lens) -> None:
    return None


# -- the functional decode step ---------------------------------------------

# Capacity plans of `attention`, by everything that fixes one. Bounded: a
# DynamicCache grows by a token a step, so each step has a plan of its own.
_plans: dict = {}
_plans_lock = threading.Lock()
_MAX_PLANS = 512

def cache_layout(k: Tensor, kv_format: str) -> dict:
    """The layout arguments of a `[batch, Hkv, rows, D']` cache tensor read
    in place: "hnd" when contiguous, else "strided" (strides in cache
    values)."""
    if k.is_contiguous():
        return {"layout": "hnd"}
    vpe = max(8 // KV_FORMAT_BITS[kv_format], 1)  # (int4: two values a byte)
    sb, sh, st, _ = k.stride()
    return {"layout": "strided", "strides": (sb * vpe, st * vpe, sh * vpe)}


_ELEM = {torch.bfloat16: "bf16", torch.float16: "f16", torch.uint8: "u8", torch.float8_e4m3fn: "u8", torch.float32: "f32", torch.int32: "u32"}


class _StepPlan:
    """A capacity plan of `attention` and what its launches reuse: the
    element types and extents its key fixes, and the metadata of the
    tensors its first, fully checked launch took (`fits`)."""

    __slots__ = ("plan", "q_elems", "o_shape", "o_elems", "q_elem", "kv", "ws_bytes", "checked", "device")

    def __init__(self, plan: api.Plan, q: Tensor, k: Tensor):
        from ._tensors import extent

        self.plan = plan
        self.q_elems = q.numel()
        self.o_shape = out_shape(q)
        self.o_elems = q.numel() // q.shape[-1] * self.o_shape[-1]
        self.q_elem = _ELEM[q.dtype]
        self.kv = (extent(tuple(k.shape), tuple(k.stride())), _ELEM[k.dtype])
        self.ws_bytes = max(plan.workspace_bytes, 256)
        self.device = q.device.index
        self.checked = None

    def fits(self, q, k, v, seq_lens, seq_starts, k_scales, v_scales, sinks) -> bool:
        """Whether the tensors are as the checked launch's were, in what the
        plan's key does not fix: then a launch needs only the Rust checks.
        (The key fixes q's and k's shape, k's strides and dtypes.)"""
        dev = k.device
        return (
            q.is_contiguous()
            and q.device == dev
            and v.device == dev
            and v.dtype == k.dtype
            and v.shape == k.shape
            and v.stride() == k.stride()
            and self.checked == (_meta(seq_lens), _meta(seq_starts), _meta(k_scales), _meta(v_scales), _meta(sinks))
        )


def out_shape(q) -> tuple:
    """O's shape for queries `q` `[batch, q_len, Hq, D]`: V's head dim
    last (a latent cache's 512 for MLA's 576, else D)."""
    b, q_len, hq, d = q.shape
    return (b, q_len, hq, LATENT_V_DIM if d == LATENT_QK_DIM else d)


def _meta(t):
    return None if t is None else (t.dtype, t.shape, t.stride(), t.device)


def capacity_plan(q: Tensor, k: Tensor, kv_format: str, window: int, scale: float, soft_cap: float, sinks: bool, key_ranges: bool) -> _StepPlan:
    """The capacity plan `attention` runs for these tensors (made once per
    distinct key; every layer of a step shares it)."""
    key = (q.device.index, tuple(q.shape), q.dtype, tuple(k.shape), tuple(k.stride()), k.dtype, kv_format, window, scale, soft_cap, sinks, key_ranges)
    entry = _plans.get(key)
    if entry is not None:
        return entry
    b, q_len, hq, d = q.shape
    _, hkv, n, _ = k.shape
    shape = DecodeShape(
        batch=b,
        num_q_heads=hq,
        num_kv_heads=hkv,
        head_dim=d,
        q_len=q_len,
        max_seq_len=n,
        dtype=DTYPE_NAMES[q.dtype],
        kv_format=kv_format,
        scale=scale if scale > 0 else None,
        soft_cap=soft_cap if soft_cap > 0 else None,
        window=window if window >= 0 else None,
        sinks=sinks,
        key_ranges=key_ranges,
        **cache_layout(k, kv_format),
    )
    entry = _StepPlan(DecodeAttention(q.device).plan_capacity(shape), q, k)
    with _plans_lock:
        if len(_plans) >= _MAX_PLANS:
            _plans.clear()
        _plans[key] = entry
    return entry


def _buf(t, elem=None):
    return None if t is None else (t.data_ptr(), t.numel(), elem or _ELEM[t.dtype])


try:  # the stream handle without a torch.cuda.Stream object (what inductor calls)
    _raw_stream = torch._C._cuda_getCurrentRawStream
except AttributeError:  # pragma: no cover - another torch
    def _raw_stream(index):
        return torch.cuda.current_stream(index).cuda_stream


def attention_step(q, k, v, seq_lens, seq_starts, k_scales, v_scales, sinks, kv_format: str, window: int, scale: float, soft_cap: float):
    """`decode_attn::attention`'s work, callable directly (no dispatcher).
    The first launch of a plan checks every tensor (`DecodeAttention.run_step`'s
    checks); later ones whose tensors are alike (`_StepPlan.fits`) go to
    the Rust checks and the launch directly."""
    entry = capacity_plan(q, k, kv_format, window, scale, soft_cap, sinks is not None, seq_starts is not None)
    plan = entry.plan
    out = q.new_empty(entry.o_shape)
    workspace = torch.empty(entry.ws_bytes, dtype=torch.uint8, device=q.device)
    if entry.checked is None:
        # A new plan (a DynamicCache's each step): tensors like ones that
        # passed every check for another plan of the same queries (and,
        # with scales, the same cache shape) need not pass them again.
        entry.checked = _validated.get(_kind(q, k, kv_format, k_scales, seq_lens, seq_starts, v_scales, sinks))
    if entry.checked is not None and entry.fits(q, k, v, seq_lens, seq_starts, k_scales, v_scales, sinks):
        kv_elems, kv_elem = entry.kv
        side = None if k_scales is None else ("u32" if k_scales.dtype == torch.int32 else "f32")
        plan.attention._native.run(
            plan._native,
            (q.data_ptr(), entry.q_elems, entry.q_elem),
            (k.data_ptr(), kv_elems, kv_elem),
            (v.data_ptr(), kv_elems, kv_elem),
            None if side is None else (k_scales.data_ptr(), k_scales.numel(), side),
            None if side is None else (v_scales.data_ptr(), v_scales.numel(), side),
            (out.data_ptr(), entry.o_elems, entry.q_elem),
            (workspace.data_ptr(), entry.ws_bytes, "u8"),
            (seq_lens.data_ptr(), seq_lens.numel(), "u32"),
            None,
            None if seq_starts is None else (seq_starts.data_ptr(), seq_starts.numel(), "u32"),
            (None if sinks is None else (sinks.data_ptr(), sinks.numel(), "f32"), None, None, None),
            _raw_stream(entry.device),
        )
        return out
    plan.attention._launch(plan, q, k, v, out, workspace, k_scales, v_scales, seq_lens, None, api.VariantBuffers(sinks=sinks), None, seq_starts)
    entry.checked = (_meta(seq_lens), _meta(seq_starts), _meta(k_scales), _meta(v_scales), _meta(sinks))
    if len(_validated) > 4096:
        _validated.clear()
    _validated[_kind(q, k, kv_format, k_scales, seq_lens, seq_starts, v_scales, sinks)] = entry.checked
    return out


# Tensor metadata that passed every check, by what the checks of the
# tensors that are not the plan's own depend on: the queries' shape, dtype
# and device, the format, and (scales) the cache's shape.
_validated: dict = {}


def _kind(q, k, kv_format, k_scales, *others):
    return (tuple(q.shape), q.dtype, q.device, kv_format, None if k_scales is None else tuple(k.shape), _meta(k_scales), tuple(_meta(t) for t in others))


@torch.library.custom_op("decode_attn::attention", mutates_args=(), device_types="cuda")
def attention(
    q: Tensor,
    k: Tensor,
    v: Tensor,
    seq_lens: Tensor,
    seq_starts: Optional[Tensor],
    k_scales: Optional[Tensor],
    v_scales: Optional[Tensor],
    sinks: Optional[Tensor],
    kv_format: str,
    window: int,
    scale: float,
    soft_cap: float,
) -> Tensor:
    """One decode step over a `[batch, Hkv, rows, D']` cache read in place:
    `q` `[batch, q_len, Hq, D]` contiguous, `seq_lens` / `seq_starts`
    `[batch]` int32 device key ranges; `window` < 0, `scale` ≤ 0 and
    `soft_cap` ≤ 0 mean none. Returns `[batch, q_len, Hq, D]`, or for MLA
    (D = 576: one latent head, `k` and `v` the same cache) `[batch, q_len,
    Hq, 512]`."""
    return attention_step(q, k, v, seq_lens, seq_starts, k_scales, v_scales, sinks, kv_format, window, scale, soft_cap)


@attention.register_fake
def _attention_fake(q, k, v, seq_lens, seq_starts, k_scales, v_scales, sinks, kv_format, window, scale, soft_cap):
    return q.new_empty(out_shape(q))
