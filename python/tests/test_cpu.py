"""What the package guarantees without a GPU (and without torch): it
imports, says clearly that a GPU call needs a GPU, and rejects every bad
argument with a `ValueError` naming the parameter, what was expected and
what it got. Tensors here are stand-ins with torch's attributes."""

import re

import pytest

import decode_attn as da
from decode_attn._tensors import Checker


class Device:
    def __init__(self, kind="cuda", index=0):
        self.type, self.index = kind, index


class FakeTensor:
    """The attributes the checks read off a torch tensor."""

    def __init__(self, shape, dtype="bfloat16", device=Device(), strides=None, ptr=1 << 20):
        self.shape = tuple(shape)
        self.dtype = f"torch.{dtype}"
        self.device = device
        self._strides = strides or _dense(self.shape)
        self._ptr = ptr

    def stride(self):
        return self._strides

    def data_ptr(self):
        return self._ptr


def _dense(shape):
    out, acc = [], 1
    for n in reversed(shape):
        out.append(acc)
        acc *= n
    return tuple(reversed(out))


def shape(**kw):
    args = dict(batch=2, num_q_heads=8, num_kv_heads=2, head_dim=128, max_seq_len=64)
    args.update(kw)
    return da.DecodeShape(**args)


def raises(param, fn, *args, **kwargs):
    with pytest.raises(ValueError, match=re.escape(f"invalid `{param}`: expected")) as e:
        fn(*args, **kwargs)
    assert ", got " in str(e.value)
    return e.value


# -- import and the GPU ----------------------------------------------------


def test_imports_without_a_gpu_and_reports_none():
    assert da.DRIVER in ("driver", "stand-in")
    if da.DRIVER == "stand-in":
        assert da.device_count() == 0


def test_the_wheel_carries_the_compiled_kernels():
    assert da.ARCHS == ("sm_80", "sm_89", "sm_90a")
    assert da.HAS_FATBIN


@pytest.mark.skipif(da.device_count() > 0, reason="a GPU is present")
def test_first_gpu_call_without_a_gpu_raises_a_clear_error():
    with pytest.raises(RuntimeError, match="decode_attn needs an NVIDIA GPU"):
        da.DecodeAttention(0)


# -- shapes ----------------------------------------------------------------


def test_a_valid_shape_reports_its_fields():
    s = shape(kv_format="int8", layout="paged", page_size=16, num_pages=10)
    assert (s.batch, s.num_q_heads, s.num_kv_heads, s.head_dim, s.q_len) == (2, 8, 2, 128, 1)
    assert (s.kv_format, s.layout, s.page_size, s.num_pages, s.pages_per_seq) == ("int8", "paged", 16, 10, 4)
    assert s.scale == pytest.approx(128**-0.5)


def test_each_format_has_one_name_and_a_16_bit_cache_implies_its_dtype():
    for given, name in [("fp16", "f16"), ("fp8_per_head", "fp8-per-head"), ("INT4_G64", "int4-g64"), ("int4", "int4-g32")]:
        assert shape(kv_format=given).kv_format == name
    # A 16-bit cache's dtype follows from it; quantized caches default to bf16.
    assert (shape(kv_format="fp16").dtype, shape(kv_format="int8").dtype, shape(dtype="fp16").kv_format) == ("f16", "bf16", "f16")
    with pytest.raises(ValueError, match="'fp8-per-head'"):
        shape(kv_format="int2")


@pytest.mark.parametrize(
    "param, kw",
    [
        ("batch", dict(batch=0)),
        ("batch", dict(batch=-1)),
        ("head_dim", dict(head_dim=96)),
        ("num_q_heads", dict(num_kv_heads=3)),
        ("q_len", dict(q_len=9)),
        ("q_len", dict(q_len=0)),
        ("max_seq_len", dict(max_seq_len=0)),
        ("dtype", dict(dtype="float32")),
        ("kv_format", dict(kv_format="int2")),
        ("layout", dict(layout="bshd")),
        ("strides", dict(layout="strided")),
        ("strides", dict(strides=(1, 2, 3))),
        ("page_size", dict(layout="paged", num_pages=4)),
        ("kv_layout.page_size", dict(layout="paged", page_size=12, num_pages=4)),
        ("page_size", dict(page_size=16)),
        ("num_pages", dict(layout="paged", page_size=16)),
        ("page_order", dict(layout="paged", page_size=16, num_pages=4, page_order="diagonal")),
        ("soft_cap", dict(soft_cap=-1.0)),
        ("scale", dict(scale=float("nan"))),
        ("alibi", dict(alibi=True, soft_cap=30.0)),
    ],
)
def test_bad_shapes_name_the_field(param, kw):
    raises(param, shape, **kw)


# -- lengths and block tables ---------------------------------------------


def test_lengths_must_be_one_per_sequence_within_q_len_and_capacity():
    s = shape(q_len=2)
    da.check_seq_lens(s, [2, 64])
    raises("seq_lens", da.check_seq_lens, s, [5])
    raises("seq_lens[1]", da.check_seq_lens, s, [5, 65])
    raises("seq_lens[0]", da.check_seq_lens, s, [1, 5])
    raises("seq_lens[0]", da.check_seq_lens, s, [-3, 5])


def test_block_tables_hold_pool_pages_for_every_used_entry():
    s = shape(layout="paged", page_size=16, num_pages=8)
    da.check_block_table(s, [20, 64], [0, 1, -1, -1, 2, 3, 4, 5])
    raises("block_table", da.check_block_table, s, [20, 64], [0, 1, 2])
    e = raises("block_table[1][1]", da.check_block_table, s, [20, 64], [0, 1, 5, 6, 2, 8, 4, 5])
    assert "got 8" in str(e)
    raises("block_table[0][1]", da.check_block_table, s, [20, 64], [0, -1, 0, 0, 2, 3, 4, 5])
    raises("block_table", da.check_block_table, shape(), [20, 64], [0])


# -- tensors ---------------------------------------------------------------


def test_q_and_out_must_be_contiguous_rows_of_the_shape_dtype_on_the_device():
    s = shape()
    c = Checker(s, 0)
    assert c.q(FakeTensor((2, 1, 8, 128)))[1:] == (2048, "bf16")
    raises("q", c.q, FakeTensor((2, 1, 8, 128), dtype="float16"))
    raises("q", c.q, FakeTensor((2, 1, 8, 128), device=Device("cpu", None)))
    raises("q", c.q, FakeTensor((2, 1, 8, 128), device=Device("cuda", 1)))
    raises("q", c.q, FakeTensor((2, 8, 1, 128)))
    raises("q", c.q, FakeTensor((2, 1, 8, 128), strides=(1024, 1024, 1, 8)))
    raises("q", c.q, None)
    raises("q", c.q, [1, 2, 3])
    raises("out", c.out, FakeTensor((2, 1, 8, 64)))


def test_a_latent_cache_takes_576_wide_queries_512_wide_outputs_and_fp8_bytes():
    """MLA (head_dim 576, one latent head): Q and the cache rows are 576
    wide, O is V's 512; a bf16 or fp8-per-head cache (one scale per token),
    nothing else."""
    s = da.DecodeShape(batch=2, num_q_heads=16, num_kv_heads=1, head_dim=576, max_seq_len=64)
    c = Checker(s, 0)
    assert c.q(FakeTensor((2, 1, 16, 576)))[1] == 2 * 16 * 576
    assert c.out(FakeTensor((2, 1, 16, 512)))[1] == 2 * 16 * 512
    raises("out", c.out, FakeTensor((2, 1, 16, 576)))
    f = da.DecodeShape(batch=2, num_q_heads=16, num_kv_heads=1, head_dim=576, max_seq_len=64, kv_format="fp8-per-head")
    c = Checker(f, 0)
    assert c.cache("k", FakeTensor((2, 64, 1, 576), dtype="uint8"))[1] == 2 * 64 * 576
    assert c.scales("k_scales", FakeTensor((2, 1, 64), dtype="float32"))[1] == 2 * 64
    raises("kv_format", da.DecodeShape, batch=2, num_q_heads=16, num_kv_heads=1, head_dim=576, max_seq_len=64, kv_format="int8")
    raises("num_kv_heads", da.DecodeShape, batch=2, num_q_heads=16, num_kv_heads=2, head_dim=576, max_seq_len=64)


def test_deepseek_v32_rows_are_656_bytes_with_their_scales_inside_and_latent_only():
    """fp8-ds-mla (DeepSeek V3.2's rows): a uint8 cache of 656-byte rows,
    no scales tensor, the plain rows it is written from 576 bf16 wide; MLA's
    latent rows alone (another head_dim, f16 queries refused by name), and
    not a format for other models' caches."""
    s = da.DecodeShape(batch=2, num_q_heads=16, num_kv_heads=1, head_dim=576, max_seq_len=64, kv_format="fp8-ds-mla")
    assert (s.row_elements, s.scale_dims) == (656, None)
    c = Checker(s, 0)
    assert c.cache("k", FakeTensor((2, 64, 1, 656), dtype="uint8"))[1] == 2 * 64 * 656
    raises("k", c.cache, "k", FakeTensor((2, 64, 1, 576), dtype="uint8"))
    assert c.cache("plain", FakeTensor((2, 64, 1, 576)), plain=True)[1] == 2 * 64 * 576
    assert c.scales("k_scales", None) is None
    raises("k_scales", c.scales, "k_scales", FakeTensor((2, 1, 64), dtype="float32"))
    raises("head_dim", da.DecodeShape, batch=2, num_q_heads=16, num_kv_heads=1, head_dim=128, max_seq_len=64, kv_format="fp8-ds-mla")
    raises("dtype", da.DecodeShape, batch=2, num_q_heads=16, num_kv_heads=1, head_dim=576, max_seq_len=64, kv_format="fp8-ds-mla", dtype="f16")
    assert "fp8-ds-mla" in da._native.QUANTIZED_KV_FORMATS and list(da._native.LATENT_ONLY_KV_FORMATS) == ["fp8-ds-mla"]


def test_caches_must_match_the_layout_shape_and_strides():
    c = Checker(shape(), 0)  # nhd [2, 64, 2, 128]
    assert c.cache("k", FakeTensor((2, 64, 2, 128)))[1] == 2 * 64 * 2 * 128
    raises("k", c.cache, "k", FakeTensor((2, 2, 64, 128)))
    raises("k", c.cache, "k", FakeTensor((2, 64, 2, 128), strides=(64 * 2 * 256, 256, 128, 1)))
    raises("k", c.cache, "k", FakeTensor((2, 64, 2, 128), strides=(16384, 256, 1, 2)))
    raises("k", c.cache, "k", FakeTensor((2, 64, 2, 128), dtype="uint8"))
    raises("k", c.cache, "k", FakeTensor((64, 2, 128)))
    # hnd, and a strided view of a larger buffer (its extent is what it addresses).
    c = Checker(shape(layout="hnd"), 0)
    c.cache("v", FakeTensor((2, 2, 64, 128)))
    big = (2 * 100 * 128, 100 * 128, 128, 1)
    c = Checker(shape(layout="strided", strides=(big[0], big[2], big[1])), 0)
    assert c.cache("k", FakeTensor((2, 2, 64, 128), strides=big))[1] == 1 + 1 * big[0] + 1 * big[1] + 63 * big[2] + 127


def test_quantized_caches_take_bytes_and_their_scales():
    c = Checker(shape(kv_format="int8"), 0)
    c.cache("k", FakeTensor((2, 64, 2, 128), dtype="uint8"))
    raises("k", c.cache, "k", FakeTensor((2, 64, 2, 128)))
    c.scales("k_scales", FakeTensor((2, 2, 64), dtype="float32"))
    raises("k_scales", c.scales, "k_scales", None)
    raises("k_scales", c.scales, "k_scales", FakeTensor((2, 2, 63), dtype="float32"))
    raises("k_scales", c.scales, "k_scales", FakeTensor((2, 2, 64), dtype="float16"))
    c = Checker(shape(kv_format="int4_g32"), 0)
    c.cache("k", FakeTensor((2, 64, 2, 64), dtype="uint8"))  # two values a byte
    raises("k", c.cache, "k", FakeTensor((2, 64, 2, 128), dtype="uint8"))
    assert c.scales("k_scales", FakeTensor((2, 2, 64, 4), dtype="int32"))[1:] == (2 * 2 * 64 * 4, "u32")  # a word per group of 32
    raises("k_scales", c.scales, "k_scales", FakeTensor((2, 2, 64), dtype="int32"))
    c = Checker(shape(kv_format="fp8"), 0)
    c.cache("k", FakeTensor((2, 64, 2, 128), dtype="float8_e4m3fn"))
    c.scales("k_scales", FakeTensor((1,), dtype="float32"))
    raises("k_scales", c.scales, "k_scales", FakeTensor((2,), dtype="float32"))
    raises("k_scales", Checker(shape(), 0).scales, "k_scales", FakeTensor((1,), dtype="float32"))


def test_paged_pools_are_pages_of_rows_and_tables_are_batch_by_pages():
    s = shape(layout="paged", page_size=16, num_pages=10)
    c = Checker(s, 0)
    c.cache("k", FakeTensor((10, 16, 2, 128)))
    raises("k", c.cache, "k", FakeTensor((10, 2, 16, 128)))
    c.block_table(FakeTensor((2, 4), dtype="int32"))
    raises("block_table", c.block_table, FakeTensor((2, 4), dtype="int64"))
    raises("block_table", c.block_table, FakeTensor((2, 5), dtype="int32"))
    raises("block_table", c.block_table, None)
    raises("block_table", Checker(shape(), 0).block_table, FakeTensor((2, 1), dtype="int32"))
    c = Checker(shape(layout="paged", page_size=16, num_pages=10, page_order="head_major"), 0)
    c.cache("k", FakeTensor((10, 2, 16, 128)))


def test_lengths_sinks_slopes_and_workspaces():
    c = Checker(shape(sinks=True), 0)
    c.seq_lens(FakeTensor((2,), dtype="int32"))
    raises("seq_lens", c.seq_lens, FakeTensor((2,), dtype="int64"))
    raises("seq_lens", c.seq_lens, FakeTensor((3,), dtype="int32"))
    names = da.VariantBuffers.NAMES
    sinks = c.variant(names, (FakeTensor((8,), dtype="float32"), None, None, None))
    assert sinks[0][1:] == (8, "f32") and sinks[1:] == (None, None, None)
    raises("sinks", c.variant, names, (FakeTensor((8,), dtype="float16"), None, None, None))
    raises("sinks", c.variant, names, (FakeTensor((7,), dtype="float32"), None, None, None))
    raises("alibi_slopes", c.variant, names, (None, FakeTensor((8,), dtype="float32"), None, None))
    c.workspace(FakeTensor((4096,), dtype="uint8"), 4096)
    raises("workspace", c.workspace, FakeTensor((4095,), dtype="uint8"), 4096)
    raises("workspace", c.workspace, FakeTensor((4096,), dtype="int8"), 4096)


def test_dimensions_of_extent_one_may_have_any_stride():
    c = Checker(shape(batch=1), 0)
    c.q(FakeTensor((1, 1, 8, 128), strides=(1024, 128, 128, 1)))  # a transposed [1, 8, 1, 128]


def test_key_ranges_take_one_int32_start_per_sequence():
    s = shape(key_ranges=True)
    assert s.key_ranges and s.variant == "masked"
    assert shape().variant == "standard" and not shape().key_ranges
    c = Checker(s, 0)
    assert c.seq_starts(FakeTensor((2,), dtype="int32"))[1:] == (2, "u32")
    raises("seq_starts", c.seq_starts, None)
    raises("seq_starts", c.seq_starts, FakeTensor((3,), dtype="int32"))
    raises("seq_starts", c.seq_starts, FakeTensor((2,), dtype="int64"))
    assert Checker(shape(), 0).seq_starts(None) is None
    raises("seq_starts", Checker(shape(), 0).seq_starts, FakeTensor((2,), dtype="int32"))


def test_a_draft_tree_takes_uint8_masks_and_int32_positions_per_new_token():
    s = shape(q_len=4, tree=True)
    assert s.tree and s.variant == "masked_tree"
    assert shape(q_len=4, tree=True, soft_cap=30.0).variant == "softcap_tree"
    raises("tree", shape, q_len=4, tree=True, alibi=True)
    raises("window", shape, q_len=4, tree=True, window=2)
    c = Checker(s, 0)
    names = da.VariantBuffers.NAMES
    tree = lambda m, p: c.variant(names, (None, None, m, p))  # noqa: E731
    _, _, m, p = tree(FakeTensor((2, 4), dtype="uint8"), FakeTensor((2, 4), dtype="int32"))
    assert m[1:] == (8, "u8") and p[1:] == (8, "u32")
    raises("tree_masks", tree, FakeTensor((2, 3), dtype="uint8"), FakeTensor((2, 4), dtype="int32"))
    raises("tree_positions", tree, FakeTensor((2, 4), dtype="uint8"), FakeTensor((2, 4), dtype="int64"))
    raises("tree_positions", tree, FakeTensor((2, 4), dtype="uint8"), FakeTensor((2, 4), dtype="int32", strides=(1, 2)))
    assert Checker(shape(), 0).variant(names, (None,) * 4) == (None,) * 4
    raises("tree_masks", Checker(shape(), 0).variant, names, (None, None, FakeTensor((2, 1), dtype="uint8"), None))


def test_variant_arrays_travel_as_one_argument():
    vb = da.VariantBuffers(sinks=1, tree_masks=2)
    assert vb.tensors() == (1, None, 2, None)
    assert repr(vb) == "VariantBuffers(sinks, tree_masks)"
    with pytest.raises(TypeError):
        da.VariantBuffers(window=3)
    raises("variant", da.api._variant, {"sinks": 1})
    assert da.api._variant(None).tensors() == (None,) * 4


def test_appended_rows_are_token_or_head_major_views_of_any_count():
    c = Checker(shape(), 0)  # 2 sequences, 2 kv heads, head_dim 128
    rows, strides, buf = c.new_rows_any(FakeTensor((2, 5, 2, 128)), "nhd")
    assert (rows, strides, buf[1]) == (5, (5 * 256, 256, 128), 2 * 5 * 256)
    # transformers' [B, Hkv, rows, D] states, and a transposed view of [B, rows, Hkv, D].
    assert c.new_rows_any(FakeTensor((2, 2, 5, 128)), "hnd")[:2] == (5, (2 * 5 * 128, 128, 5 * 128))
    assert c.new_rows_any(FakeTensor((2, 2, 5, 128), strides=(5 * 256, 128, 256, 1)), "hnd")[:2] == (5, (5 * 256, 256, 128))
    raises("new_rows", c.new_rows_any, FakeTensor((2, 3, 5, 128)), "hnd")
    raises("new_rows", c.new_rows_any, FakeTensor((2, 2, 5, 128), strides=(2560, 640, 1, 5)), "hnd")
    raises("order", c.new_rows_any, FakeTensor((2, 2, 5, 128)), "thd")


def test_the_transformers_cache_refuses_a_format_of_latent_rows_alone():
    """A model's quantized cache (`decode_attn.cache`) takes the quantized
    formats of ordinary attention rows; fp8-ds-mla's rows are MLA's latent
    rows alone, refused naming `kv_format` and why. (Needs torch: skipped
    where it is missing.)"""
    pytest.importorskip("torch")
    from decode_attn.cache import FORMATS, QuantizedLayer

    assert "fp8-ds-mla" not in FORMATS and "int8" in FORMATS
    with pytest.raises(ValueError, match=r"invalid `kv_format`: .*MLA's latent rows alone"):
        QuantizedLayer("fp8-ds-mla")
