"""decode-attn: decode-phase attention for LLM inference on Hopper GPUs,
with bf16/fp16, int8, fp8 (e4m3) and int4 KV caches, contiguous, strided
or paged, GQA/MQA/MHA, q_len 1..8, soft-cap, sliding window, sinks and
ALiBi. Kernels written in Rust; this package calls them on torch tensors.

    import decode_attn as da
    attn = da.DecodeAttention("cuda:0")
    shape = da.DecodeShape(batch=8, num_q_heads=32, num_kv_heads=8, head_dim=128, max_seq_len=4096)
    plan = attn.plan(shape, seq_lens=[4096] * 8)
    attn.run(plan, q, k, v, out, attn.workspace(plan))

Imports without a GPU (and without torch); the first GPU call then raises
`RuntimeError`. Bad arguments raise `ValueError` naming the parameter, what
was expected and what was given.
"""

from ._driver import load_driver

DRIVER = load_driver()  # before the extension, which links libcuda.so.1

from . import _native  # noqa: E402
from ._native import ARCHS, HAS_FATBIN, DecodeShape, check_block_table, check_seq_lens, device_count  # noqa: E402
from .api import DecodeAttention, Plan, VariantBuffers  # noqa: E402

__all__ = [
    "DecodeAttention",
    "DecodeShape",
    "Plan",
    "VariantBuffers",
    "check_seq_lens",
    "check_block_table",
    "device_count",
    "DRIVER",
    "ARCHS",
    "HAS_FATBIN",
]

try:  # the torch custom ops, where torch is installed
    import importlib.util as _util

    if _util.find_spec("torch") is not None:
        from . import ops  # noqa: F401
except ImportError:  # pragma: no cover - a broken torch install
    pass

__version__ = "0.1.0"
