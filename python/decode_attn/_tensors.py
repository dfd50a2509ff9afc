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

# torch dtype name -> the library's element type (`ElemType`'s names, and
# `e4m3` for fp8 bytes in torch's fp8 type).
_ELEM = {
    "bfloat16": "bf16",
    "float16": "f16",
    "uint8": "u8",
    "float8_e4m3fn": "e4m3",
    "float32": "f32",
    "int32": "i32",
    "uint32": "u32",
}


def torch_dtypes(elems) -> tuple[str, ...]:
    """The torch dtypes holding any of the library's element types `elems`."""
    return tuple(t for e in elems for t, x in _ELEM.items() if x == e)

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
        """O: `[batch, q_len, num_q_heads, V's head_dim]` (a latent cache's
        512, else head_dim), contiguous."""
        s = self.shape
        elem = self.tensor("out", t, (_TORCH_DTYPE[s.dtype],))
        return (t.data_ptr(), s.check_out_view("out", list(t.shape), list(t.stride())), elem)

    def cache(self, name: str, t, plain: bool = False):
        """K or V values (or a 16-bit `plain` copy) in the shape's layout:
        the element types the format takes and the layout's dims and
        strides, both from Rust (one message for every binding)."""
        s = self.shape
        elems = s.value_elems(plain)
        self.tensor(name, t, torch_dtypes(elems))
        return (t.data_ptr(), s.check_cache_view(name, list(t.shape), list(t.stride()), plain), elems[0])

    def scales(self, name: str, t):
        """A quantized cache's scales (None for 16-bit caches)."""
        s = self.shape
        elems = s.scale_elems
        if not elems:
            if t is not None:
                raise invalid(name, f"None (a {s.kv_format} cache has no scales)", "a tensor")
            return None
        self.tensor(name, t, torch_dtypes(elems))
        # (int4's side words, an fp16 scale and an fp16 zero, travel as u32.)
        return (t.data_ptr(), s.check_scales_view(name, list(t.shape), list(t.stride())), elems[0])

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
        rows, strides, n = s.check_new_rows_view("new_rows", list(t.shape), list(t.stride()), order == "hnd")
        return rows, strides, (t.data_ptr(), n, elem)

    def block_table(self, t):
        """A paged cache's `[batch, pages_per_seq]` int32 page ids (None for
        other layouts)."""
        if t is None and self.shape.layout != "paged":
            return None
        elem = self.tensor("block_table", t, ("int32",))
        return (t.data_ptr(), self.shape.check_table_view("block_table", list(t.shape), list(t.stride())), elem)

    def variant(self, names, tensors) -> tuple:
        """The variant's arrays (`VariantBuffers`), each None or a tensor
        of the element types Rust names for it (`variant_elems`), viewed as
        Rust checks (`check_variant_view`: its dims, and that the shape has
        its part); whether each is required is Rust's check at the run."""
        out = []
        for name, t in zip(names, tensors):
            if t is None:
                out.append(None)
                continue
            elems = self.shape.variant_elems(name)
            self.tensor(name, t, torch_dtypes(elems))
            out.append((t.data_ptr(), self.shape.check_variant_view(name, list(t.shape), list(t.stride())), elems[0]))
        return tuple(out)

    def workspace(self, t, nbytes: int):
        elem = self.tensor("workspace", t, ("uint8",))
        return (t.data_ptr(), type(self.shape).check_workspace_view("workspace", list(t.shape), list(t.stride()), nbytes), elem)


def scale_dims(s) -> tuple[tuple[int, ...], str] | None:
    """The shape of a quantized cache's scales and its dims' names, as
    the Rust library defines it (`DecodeShape::scale_dims`); None for a
    format without side rows (16-bit, fp8 per tensor)."""
    side = s.scale_dims
    return None if side is None else (tuple(side[0]), side[1])
