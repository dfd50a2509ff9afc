"""Tensor checks: what Rust cannot see of a torch tensor (its device and
dtype), its dims and strides handed to the Rust checks of each role
(`DecodeShape.check_*_view`: one check and one message for every binding),
and the `(address, elements, element type)` triples the native layer takes.

Duck-typed on purpose: anything with `dtype`, `device`, `shape`,
`stride()` and `data_ptr()` passes through, so the CPU tests exercise every
check without torch. Every rejection is a `ValueError` worded as the Rust
library words its own: ``invalid `param`: expected ..., got ...``.
"""

from __future__ import annotations

from math import prod

# torch dtype name -> the library's element type.
_ELEM = {
    "bfloat16": "bf16",
    "float16": "f16",
    "uint8": "u8",
    "float8_e4m3fn": "u8",
    "float32": "f32",
    "int32": "i32",
    "uint32": "u32",
}

# The shape's `dtype` -> the torch dtype Q, O and 16-bit caches have.
_TORCH_DTYPE = {"bf16": "bfloat16", "f16": "float16"}


def invalid(param: str, expected: str, got) -> ValueError:
    return ValueError(f"invalid `{param}`: expected {expected}, got {got}")


def dtype_name(t) -> str:
    return str(t.dtype).replace("torch.", "")


def _device(t):
    d = t.device
    return d.type, (d.index if d.index is not None else 0)


def extent(shape, strides) -> int:
    """Elements from the first to one past the last element the view addresses."""
    if any(n == 0 for n in shape):
        return 0
    return 1 + sum((n - 1) * s for n, s in zip(shape, strides))


class Checker:
    """Checks the tensors of one call against a shape and a device."""

    def __init__(self, shape, device: int):
        self.shape = shape
        self.device = device

    # -- generic -----------------------------------------------------------
    def tensor(self, name: str, t, dtypes: tuple[str, ...]):
        if t is None:
            raise invalid(name, f"a CUDA tensor of dtype {' or '.join(dtypes)}", "None")
        if not all(hasattr(t, a) for a in ("dtype", "device", "shape", "stride", "data_ptr")):
            raise invalid(name, "a torch tensor", type(t).__name__)
        kind, index = _device(t)
        if kind != "cuda" or index != self.device:
            raise invalid(name, f"a tensor on cuda:{self.device}", f"one on {kind}" + (f":{index}" if kind == "cuda" else ""))
        dt = dtype_name(t)
        if dt not in dtypes:
            raise invalid(name, f"dtype {' or '.join(dtypes)}", dt)
        return _ELEM[dt]

    def dense(self, name: str, t, dtypes: tuple[str, ...], dims: tuple[int, ...], what: str):
        """A contiguous tensor of exactly `dims`."""
        elem = self.tensor(name, t, dtypes)
        got = tuple(t.shape)
        if got != tuple(dims):
            raise invalid(name, f"shape {tuple(dims)} ({what})", got)
        want = _contiguous_strides(dims)
        if not _strides_match(dims, tuple(t.stride()), want):
            raise invalid(name, f"a contiguous tensor (strides {want})", f"strides {tuple(t.stride())}")
        return (t.data_ptr(), prod(dims), elem)

    # -- roles -------------------------------------------------------------
    def rows(self, name: str, t, heads: int):
        """Q, O or new K/V rows: `[batch, q_len, heads, head_dim]`, contiguous
        (the shape and strides checked in Rust)."""
        s = self.shape
        elem = self.tensor(name, t, (_TORCH_DTYPE[s.dtype],))
        return (t.data_ptr(), s.check_rows_view(name, heads, list(t.shape), list(t.stride())), elem)

    def q(self, t):
        return self.rows("q", t, self.shape.num_q_heads)

    def out(self, t):
        return self.rows("out", t, self.shape.num_q_heads)

    def cache(self, name: str, t, plain: bool = False):
        """K or V values (or a 16-bit `plain` copy) in the shape's layout."""
        s = self.shape
        if plain or s.kv_format in ("bf16", "f16"):
            dtypes = (_TORCH_DTYPE[s.dtype],)
        elif s.kv_format.startswith("fp8"):
            dtypes = ("uint8", "float8_e4m3fn")
        else:
            dtypes = ("uint8",)
        elem = self.tensor(name, t, dtypes)
        # The layout's dims and strides, checked in Rust (one message for
        # every binding).
        return (t.data_ptr(), s.check_cache_view(name, list(t.shape), list(t.stride()), plain), elem)

    def scales(self, name: str, t):
        """A quantized cache's side data (None for 16-bit caches)."""
        s = self.shape
        if s.kv_format in ("bf16", "f16"):
            if t is not None:
                raise invalid(name, f"None (a {s.kv_format} cache has no scales)", "a tensor")
            return None
        if s.tensor_scaled:
            elem = self.tensor(name, t, ("float32",))
            return (t.data_ptr(), s.check_side_view(name, list(t.shape), list(t.stride())), elem)
        dtypes = ("float32",) if s.kv_format in ("int8", "fp8-per-head") else ("int32", "uint32")
        self.tensor(name, t, dtypes)
        # int4's side words (an fp16 scale and an fp16 zero) travel as u32.
        return (t.data_ptr(), s.check_side_view(name, list(t.shape), list(t.stride())), "f32" if dtypes == ("float32",) else "u32")

    def seq_lens(self, t):
        self.tensor("seq_lens", t, ("int32", "uint32"))
        return (t.data_ptr(), self.shape.check_per_sequence_view("seq_lens", list(t.shape), list(t.stride())), "u32")

    def seq_starts(self, t):
        """A capacity step's first keys: `[batch]` int32 exactly when the
        shape has key ranges."""
        if not self.shape.key_ranges:
            if t is not None:
                raise invalid("seq_starts", "None (the shape has key_ranges=False)", "a tensor")
            return None
        self.tensor("seq_starts", t, ("int32", "uint32"))
        return (t.data_ptr(), self.shape.check_per_sequence_view("seq_starts", list(t.shape), list(t.stride())), "u32")

    def new_rows_any(self, t, order: str):
        """Any number of new K or V rows, `[batch, rows, Hkv, D]` ("nhd") or
        `[batch, Hkv, rows, D]` ("hnd"), head_dim contiguous: (rows,
        (batch, token, head) strides, the buffer triple)."""
        s = self.shape
        elem = self.tensor("new_rows", t, (_TORCH_DTYPE[s.dtype],))
        if order not in ("nhd", "hnd"):
            raise invalid("order", "'nhd' or 'hnd'", repr(order))
        shape, strides = tuple(t.shape), tuple(t.stride())
        if len(shape) != 4:
            raise invalid("new_rows", "a 4-D tensor", f"{len(shape)}-D")
        tok, head = (1, 2) if order == "nhd" else (2, 1)
        rows = shape[tok]
        want = (s.batch, rows, s.num_kv_heads, s.head_dim) if order == "nhd" else (s.batch, s.num_kv_heads, rows, s.head_dim)
        if shape != want or rows < 1:
            raise invalid("new_rows", f"shape {want} ({'batch, rows, num_kv_heads, head_dim' if order == 'nhd' else 'batch, num_kv_heads, rows, head_dim'}, rows >= 1)", shape)
        if strides[3] != 1:
            raise invalid("new_rows", "a tensor whose last dimension is contiguous (stride 1)", f"stride {strides[3]}")
        # (A dimension of extent 1 has no meaningful stride.)
        sb, st, sh = ((strides[i] if shape[i] > 1 else 0) for i in (0, tok, head))
        return rows, (sb, st, sh), (t.data_ptr(), extent(shape, strides), elem)

    def block_table(self, t):
        s = self.shape
        if s.layout != "paged":
            if t is not None:
                raise invalid("block_table", "None (the cache is not paged)", "a tensor")
            return None
        return self.dense("block_table", t, ("int32",), (s.batch, s.pages_per_seq), "batch, pages_per_seq")

    def per_head(self, name: str, t, wanted: bool, flag: str):
        """Sinks or ALiBi slopes: `[num_q_heads]` float32 when the shape has them."""
        if not wanted:
            if t is not None:
                raise invalid(name, f"None (the shape has {flag}=False)", "a tensor")
            return None
        return self.dense(name, t, ("float32",), (self.shape.num_q_heads,), "num_q_heads")

    def workspace(self, t, nbytes: int):
        elem = self.tensor("workspace", t, ("uint8",))
        n = prod(t.shape)
        if n < nbytes:
            raise invalid("workspace", f"at least {nbytes} bytes (plan.workspace_bytes)", f"{n} bytes")
        if len(t.shape) != 1 or (n > 1 and t.stride()[0] != 1):
            raise invalid("workspace", "a contiguous 1-D uint8 tensor", f"shape {tuple(t.shape)}")
        return (t.data_ptr(), n, elem)


def side_dims(s) -> tuple[tuple[int, ...], str] | None:
    """The shape of a quantized cache's side data and its dims' names, as
    the Rust library defines it (`DecodeShape::side_dims`); None for a
    format without side rows (16-bit, fp8 per tensor)."""
    side = s.side_dims
    return None if side is None else (tuple(side[0]), side[1])


def _contiguous_strides(dims) -> tuple[int, ...]:
    out, acc = [], 1
    for n in reversed(dims):
        out.append(acc)
        acc *= n
    return tuple(reversed(out))


def _strides_match(dims, got, want) -> bool:
    # A dimension of extent 1 has no meaningful stride.
    return all(n == 1 or g == w for n, g, w in zip(dims, got, want))
