"""The Python API: `DecodeAttention` (one per device), `Plan`, and the
cache writers, over the native layer's raw-handle entry points.

Every call checks its tensors (`_tensors.Checker`) and then the Rust
library checks every buffer again before it launches anything. Work goes
on `torch.cuda.current_stream(device)`; nothing is allocated and nothing
synchronizes inside `run` / `run_step` / `append_kv`.
"""

from __future__ import annotations

import itertools
import threading
import weakref

from . import _native
from ._tensors import Checker, invalid

DecodeShape = _native.DecodeShape


class VariantBuffers:
    """The device arrays of a shape's variant parts, handed to `run` /
    `run_step` as one argument (`variant=`): `sinks` and `alibi_slopes`
    (`[num_q_heads]` float32), a draft tree's `tree_masks` (`[batch,
    q_len]` uint8, bit j of entry (b, i) set when new token i sees new
    token j, j <= i) and `tree_positions` (`[batch, q_len]` int32, the
    prefix length plus each token's depth). Each is required exactly when
    the plan's shape has its part (`sinks`, `alibi`, `tree`), which the
    Rust library checks."""

    __slots__ = ("sinks", "alibi_slopes", "tree_masks", "tree_positions")
    NAMES = __slots__

    def __init__(self, *, sinks=None, alibi_slopes=None, tree_masks=None, tree_positions=None):
        self.sinks = sinks
        self.alibi_slopes = alibi_slopes
        self.tree_masks = tree_masks
        self.tree_positions = tree_positions

    def tensors(self) -> tuple:
        """The four arrays (or None) in the native layer's order."""
        return (self.sinks, self.alibi_slopes, self.tree_masks, self.tree_positions)

    def __repr__(self) -> str:
        given = ", ".join(n for n in self.NAMES if getattr(self, n) is not None)
        return f"VariantBuffers({given})"


_NO_VARIANT = VariantBuffers()

# Live plans and shapes by id: what the torch custom ops (which take only
# tensors and numbers) name them by.
_PLANS: "weakref.WeakValueDictionary[int, Plan]" = weakref.WeakValueDictionary()
_SHAPES: "weakref.WeakValueDictionary[int, DecodeShape]" = weakref.WeakValueDictionary()
_ids = itertools.count(1)
_lock = threading.Lock()


def shape_id(shape: DecodeShape) -> int:
    """A number naming `shape` while it lives (for the torch ops)."""
    with _lock:
        for k, s in _SHAPES.items():
            if s is shape:
                return k
        k = next(_ids)
        _SHAPES[k] = shape
        return k


def lookup_shape(k: int) -> DecodeShape:
    s = _SHAPES.get(k)
    if s is None:
        raise invalid("shape_id", "the id of a live DecodeShape", k)
    return s


def lookup_plan(k: int) -> "Plan":
    p = _PLANS.get(k)
    if p is None:
        raise invalid("plan_id", "the id of a live Plan", k)
    return p


try:  # the package imports without torch; the GPU calls need it
    import torch as _torch_module
except ImportError:  # pragma: no cover - exercised by the CPU tests' machine
    _torch_module = None


def _torch():
    if _torch_module is None:
        raise RuntimeError("decode_attn: this call needs PyTorch (pip install torch)")
    return _torch_module


def _compiling() -> bool:
    """Whether torch.compile is tracing: the calls then go through the custom ops."""
    return _torch_module is not None and _torch_module.compiler.is_compiling()


def _device_index(device) -> int:
    if device is None:
        torch = _torch_module
        return torch.cuda.current_device() if torch is not None and torch.cuda.is_available() else 0
    if isinstance(device, int):
        return device
    if isinstance(device, str):
        kind, _, index = device.partition(":")
        if kind != "cuda" or (index and not index.isdigit()):
            raise invalid("device", "a CUDA device ('cuda', 'cuda:N', N or a torch.device)", repr(device))
        return int(index) if index else _device_index(None)
    kind, index = getattr(device, "type", None), getattr(device, "index", None)
    if kind != "cuda":
        raise invalid("device", "a CUDA device ('cuda', 'cuda:N', N or a torch.device)", repr(device))
    return index if index is not None else _device_index(None)


class Plan:
    """A plan made by `DecodeAttention.plan*`: the work of one decode step
    (host lengths) or of every step up to the shape's capacity (device
    lengths). Reusable and immutable."""

    __slots__ = ("_native", "shape", "attention", "id", "__weakref__")

    def __init__(self, native, attention: "DecodeAttention"):
        self._native = native
        self.shape = native.shape
        self.attention = attention
        with _lock:
            self.id = next(_ids)
            _PLANS[self.id] = self

    # What the native plan reports, read through.
    workspace_bytes = property(lambda self: self._native.workspace_bytes, doc="Bytes of the workspace a run needs.")
    is_capacity = property(lambda self: self._native.is_capacity, doc="Whether runs read lengths (and block table) on the device.")
    family = property(lambda self: self._native.family, doc="The kernel family: 'wide', 'narrow', 'wgmma' or 'mla'.")
    max_splits = property(lambda self: self._native.max_splits, doc="Most chunks any sequence is split into.")
    bytes_moved = property(lambda self: self._native.bytes_moved, doc="Bytes of K, V (and scales), Q and O one run moves.")

    def __repr__(self) -> str:
        return repr(self._native)


class DecodeAttention:
    """The kernels loaded into one GPU's primary context (PyTorch's; none is
    created). `DecodeAttention(device)` returns the one instance of that
    device. On a machine without a GPU it raises `RuntimeError`."""

    _instances: dict[int, "DecodeAttention"] = {}

    def __new__(cls, device=None):
        index = _device_index(device)
        with _lock:
            inst = cls._instances.get(index)
            if inst is None:
                inst = super().__new__(cls)
                inst._native = _native._Device(index)
                inst.device = index
                cls._instances[index] = inst
            return inst

    def __repr__(self) -> str:
        n = self._native
        return f"DecodeAttention(device=cuda:{self.device}, sms={n.sm_count}, {n.arch} kernels from {n.module_source})"

    @property
    def module_source(self) -> str:
        """`fatbin` (cubins compiled ahead), `fatbin-ptx` (the portable PTX,
        compiled by the driver at the first load) or `ptx`."""
        return self._native.module_source

    @property
    def arch(self) -> str:
        """The kernels' architecture on this GPU: `sm_90a` (Hopper, every
        family), else the portable `sm_89` or `sm_80` (wide and narrow)."""
        return self._native.arch

    # -- plans -------------------------------------------------------------
    def plan(self, shape: DecodeShape, seq_lens, **options) -> Plan:
        """Plans one step over host lengths (a list, or a CPU tensor).
        Options: `split` ('auto', 'never' or keys per chunk), `family`,
        `warps_k`, `merge`, `specialize`, `head_pair`, `transpose`."""
        return Plan(self._native.plan(shape, _host_ints("seq_lens", seq_lens), **options), self)

    def plan_paged(self, shape: DecodeShape, seq_lens, block_table, **options) -> Plan:
        """Plans one step over a paged cache: `block_table` is
        `[batch, shape.pages_per_seq]` page ids (host)."""
        return Plan(self._native.plan_paged(shape, _host_ints("seq_lens", seq_lens), _host_ints("block_table", block_table), **options), self)

    def plan_key_ranges(self, shape: DecodeShape, seq_starts, seq_lens, block_table=None, **options) -> Plan:
        """Plans one step over sequences that each start at a key of their
        own (a shape with `key_ranges=True`): sequence b's keys
        `seq_starts[b] .. seq_lens[b]` (host values; each start at most
        `seq_lens[b] - q_len`), and a paged cache's `block_table` (host)."""
        table = None if block_table is None else _host_ints("block_table", block_table)
        return Plan(self._native.plan_key_ranges(shape, _host_ints("seq_starts", seq_starts), _host_ints("seq_lens", seq_lens), table, **options), self)

    def plan_capacity(self, shape: DecodeShape, **options) -> Plan:
        """Plans every step up to the shape's capacity; run it with
        `run_step`, which reads lengths and block table on the device (so it
        can be captured in a CUDA graph)."""
        return Plan(self._native.plan_capacity(shape, **options), self)

    def workspace(self, plan: Plan):
        """A uint8 tensor of `plan.workspace_bytes` on this device (the
        caller owns it; one per concurrently running plan)."""
        torch = _torch()
        return torch.empty(max(plan.workspace_bytes, 256), dtype=torch.uint8, device=f"cuda:{self.device}")

    # -- attention ---------------------------------------------------------
    def run(self, plan: Plan, q, k, v, out, workspace, *, k_scales=None, v_scales=None, variant: VariantBuffers | None = None, stream=None) -> None:
        """One decode step of a plan of host lengths into `out`
        (`[batch, q_len, num_q_heads, head_dim]`). `variant`: the arrays
        of the shape's variant parts (sinks, ALiBi slopes, a draft tree),
        `VariantBuffers`."""
        variant = _variant(variant)
        if _compiling() and stream is None:
            _torch().ops.decode_attn.run(plan.id, q, k, v, out, workspace, k_scales, v_scales, *variant.tensors())
            return
        if plan.is_capacity:
            raise invalid("plan", "a plan of host lengths (plan / plan_paged); capacity plans run with run_step", "a capacity plan")
        self._launch(plan, q, k, v, out, workspace, k_scales, v_scales, None, None, variant, stream)

    def run_step(self, plan: Plan, q, k, v, out, workspace, seq_lens, block_table=None, *, seq_starts=None, k_scales=None, v_scales=None, variant: VariantBuffers | None = None, stream=None) -> None:
        """One decode step of a capacity plan: `seq_lens` (`[batch]` int32,
        new tokens included), `block_table` (paged caches) and `seq_starts`
        (`[batch]` int32 first keys, shapes with `key_ranges`; a start past
        `seq_lens[b] - q_len` reads as that) are read on the device, as are
        the variant's arrays (`run`). Graph-capturable."""
        variant = _variant(variant)
        if _compiling() and stream is None:
            _torch().ops.decode_attn.run_step(plan.id, q, k, v, out, workspace, seq_lens, block_table, seq_starts, k_scales, v_scales, *variant.tensors())
            return
        if not plan.is_capacity:
            raise invalid("plan", "a capacity plan (plan_capacity) for run_step", "a plan of host lengths")
        if seq_lens is None:
            raise invalid("seq_lens", "the [batch] int32 device lengths a capacity plan reads", "None")
        self._launch(plan, q, k, v, out, workspace, k_scales, v_scales, seq_lens, block_table, variant, stream, seq_starts)

    def _launch(self, plan, q, k, v, out, workspace, k_scales, v_scales, seq_lens, block_table, variant, stream, seq_starts=None):
        if plan.attention is not self:
            raise invalid("plan", f"a plan made for cuda:{self.device}", f"one for cuda:{plan.attention.device}")
        s = plan.shape
        c = Checker(s, self.device)
        step_lens = c.seq_lens(seq_lens) if seq_lens is not None else None
        table = c.block_table(block_table) if seq_lens is not None else _none("block_table", block_table, "None (a plan of host lengths has its block table)")
        starts = c.seq_starts(seq_starts) if seq_lens is not None else _none("seq_starts", seq_starts, "None (a plan of host lengths has its starts)")
        self._native.run(
            plan._native,
            c.q(q),
            c.cache("k", k),
            c.cache("v", v),
            c.scales("k_scales", k_scales),
            c.scales("v_scales", v_scales),
            c.out(out),
            c.workspace(workspace, plan.workspace_bytes),
            step_lens,
            table,
            starts,
            c.variant(VariantBuffers.NAMES, variant.tensors()),
            self._stream(stream),
        )

    # -- the cache ---------------------------------------------------------
    def append_kv(self, shape: DecodeShape, new_rows, data, scales=None, *, seq_lens, block_table=None, stream=None) -> None:
        """Writes a step's `q_len` new rows (`[batch, q_len, num_kv_heads,
        head_dim]`, the shape's dtype) of K or V at positions
        `seq_lens[b] - q_len ..` (device lengths, new tokens included),
        quantizing for quantized formats. Graph-capturable."""
        if _compiling() and stream is None:
            _torch().ops.decode_attn.append_kv(shape_id(shape), new_rows, data, scales, seq_lens, block_table)
            return
        self._write(True, shape, new_rows, data, scales, seq_lens, block_table, stream)

    def append_rows(self, shape: DecodeShape, new_rows, data, scales=None, *, seq_lens, block_table=None, order="nhd", stream=None) -> None:
        """Writes any number of new rows per sequence (a prefill, a continued
        chat): `new_rows` is `[batch, rows, num_kv_heads, head_dim]`
        (`order="nhd"`) or `[batch, num_kv_heads, rows, head_dim]`
        (`order="hnd"`, transformers' states in place), any strides that
        are multiples of 8 values with head_dim contiguous; sequence b's
        rows go to positions `seq_lens[b] - rows ..` (device lengths, new
        tokens included), quantized for quantized formats."""
        c = Checker(shape, self.device)
        rows, strides, buf = c.new_rows_any(new_rows, order)
        self._native.append_rows(shape, c.seq_lens(seq_lens), c.block_table(block_table), buf, strides, rows, c.cache("data", data), c.scales("scales", scales), self._stream(stream))

    def quantize_kv(self, shape: DecodeShape, plain, data, scales=None, *, seq_lens, block_table=None, stream=None) -> None:
        """Quantizes (or copies, for 16-bit formats) a whole 16-bit cache
        tensor `plain` in the shape's layout into `data` (and `scales`):
        rows `t < seq_lens[b]`."""
        self._write(False, shape, plain, data, scales, seq_lens, block_table, stream)

    def _write(self, append, shape, rows, data, scales, seq_lens, block_table, stream):
        c = Checker(shape, self.device)
        rows_buf = c.rows("new_rows", rows, shape.num_kv_heads) if append else c.cache("plain", rows, plain=True)
        self._native.write_kv(append, shape, c.seq_lens(seq_lens), c.block_table(block_table), rows_buf, c.cache("data", data), c.scales("scales", scales), self._stream(stream))

    def dequantize_kv(self, shape: DecodeShape, data, scales, plain, *, seq_lens, stream=None) -> None:
        """Dequantizes rows `t < seq_lens[b]` of a contiguous quantized cache
        tensor into `plain` (the shape's dtype and layout)."""
        c = Checker(shape, self.device)
        self._native.dequantize_kv(shape, c.seq_lens(seq_lens), c.cache("data", data), c.scales("scales", scales), c.cache("plain", plain, plain=True), self._stream(stream))

    def advance_seq_lens(self, shape: DecodeShape, seq_lens, by: int = 1, *, stream=None) -> None:
        """Grows every nonzero device length by `by`, capped at the capacity."""
        if not isinstance(by, int) or not 0 <= by < 2**32:
            raise invalid("by", "an integer in 0..2^32", repr(by))
        c = Checker(shape, self.device)
        self._native.advance_seq_lens(shape, c.seq_lens(seq_lens), by, self._stream(stream))

    def _stream(self, stream) -> int:
        if stream is not None:
            return int(getattr(stream, "cuda_stream", stream))
        return _torch().cuda.current_stream(self.device).cuda_stream


def _variant(variant) -> VariantBuffers:
    """`variant=` as `VariantBuffers` (None: no arrays)."""
    if variant is None:
        return _NO_VARIANT
    if not isinstance(variant, VariantBuffers):
        raise invalid("variant", "decode_attn.VariantBuffers (sinks, alibi_slopes, tree_masks, tree_positions) or None", type(variant).__name__)
    return variant


def _none(name, t, expected):
    if t is not None:
        raise invalid(name, expected, "a tensor")
    return None


def _host_ints(name: str, values) -> list[int]:
    """A list of ints from a list, tuple or CPU tensor (flattened)."""
    if hasattr(values, "device") and hasattr(values, "tolist"):
        if values.device.type != "cpu":
            raise invalid(name, "host values (a list or a CPU tensor): plans are made on the CPU", f"a tensor on {values.device}")
        values = values.reshape(-1).tolist()
    out = []
    try:
        for row in values:
            if isinstance(row, (list, tuple)):
                out.extend(int(x) for x in row)
            else:
                out.append(int(row))
    except (TypeError, ValueError):
        raise invalid(name, "a sequence of integers", type(values).__name__) from None
    return out
