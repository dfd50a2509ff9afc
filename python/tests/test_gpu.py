"""decode-attn on torch tensors, against the float64 reference: every cache
format × q_len 1/3/8 × GQA/MQA/MHA × contiguous/paged, the layouts and
variants, capacity plans, a CUDA graph of append + attention replayed 100
times while lengths grow on the device, torch.compile, and a second GPU.

Inputs are random with large magnitudes and an outlier channel; outputs
start as NaN; every run is repeated and must be bit-identical; the bound is
SPEC.md's relative L2 of 1e-2 against the reference computed from the
values the kernel reads (a quantized cache's dequantized values)."""

import math
import random

import pytest

from conftest import needs_gpu

torch = pytest.importorskip("torch")

import decode_attn as da  # noqa: E402
from _reference import attention, rel_l2  # noqa: E402
from decode_attn._tensors import scale_dims  # noqa: E402

pytestmark = needs_gpu
BOUND = 1e-2
TORCH_DTYPE = {"bf16": torch.bfloat16, "f16": torch.float16}


def randn(*shape, gen, dtype=torch.float32, scale=1.0):
    x = torch.randn(*shape, generator=gen, device="cuda", dtype=torch.float32) * scale
    return x.to(dtype)


def kv_values(b, n, h, d, gen, dtype):
    """Large values with an outlier channel, as real K caches have."""
    x = randn(b, n, h, d, gen=gen, scale=4.0)
    x[..., 3] *= 8.0
    return x.to(dtype)


class Cache:
    """A K/V cache of one format and layout, filled through the library's
    own writers, with the values the kernel reads (`k_ref`, `v_ref`,
    token-major `[B, cap, Hkv, D]`) for the reference."""

    def __init__(self, attn, shape, lens, gen):
        s = shape
        self.shape, self.lens = s, lens
        dt = TORCH_DTYPE[s.dtype]
        dev = "cuda"
        b, cap, h, d = s.batch, s.max_seq_len, s.num_kv_heads, s.head_dim
        plain_k, plain_v = kv_values(b, cap, h, d, gen, dt), kv_values(b, cap, h, d, gen, dt)
        self.seq_lens = torch.tensor(lens, dtype=torch.int32, device=dev)
        self.block_table = None
        self.host_table = None
        if s.layout == "paged":
            ps, pages = s.page_size, s.num_pages
            perm = torch.randperm(pages, generator=torch.Generator().manual_seed(7)).tolist()
            table = [[-1] * s.pages_per_seq for _ in lens]
            nxt = 0
            for bi, n in enumerate(lens):
                for j in range(math.ceil(n / ps)):
                    table[bi][j] = perm[nxt]
                    nxt += 1
            self.host_table = table
            dev_table = [[p if p >= 0 else 0 for p in row] for row in table]
            self.block_table = torch.tensor(dev_table, dtype=torch.int32, device=dev)

        contiguous = da.DecodeShape(**shape_args(s, layout="nhd", kv_format=s.kv_format))
        self.k_ref, self.v_ref = plain_k, plain_v
        if s.kv_format not in ("bf16", "f16"):
            # Dequantized to fp16 (8x finer than bf16), so the reference sees
            # the kernel's values, not a bf16 rounding of them.
            to_f16 = da.DecodeShape(**shape_args(s, layout="nhd", kv_format=s.kv_format, dtype="f16"))
            # The values the kernel reads: quantized and dequantized by the library.
            refs = []
            for x in (plain_k, plain_v):
                data, scales = empty_cache(contiguous)
                if contiguous.tensor_scaled:
                    scales.copy_(tensor_scale(x))
                attn.quantize_kv(contiguous, x, data, scales, seq_lens=self.seq_lens)
                deq = torch.zeros(x.shape, dtype=torch.float16, device=x.device)
                attn.dequantize_kv(to_f16, data, scales, deq, seq_lens=self.seq_lens)
                refs.append((deq, data, scales))
            (self.k_ref, kd, ks), (self.v_ref, vd, vs) = refs
            if s.tensor_scaled:
                self.k_scales, self.v_scales = ks, vs
        # The cache itself, in the shape's layout.
        if s.layout == "paged":
            pools = []
            for x in (plain_k, plain_v):
                ppool = to_pool(x, s, self.host_table)
                data, scales = empty_cache(s)
                if s.tensor_scaled:
                    scales = self.k_scales if x is plain_k else self.v_scales
                attn.quantize_kv(s, ppool, data, scales, seq_lens=self.seq_lens, block_table=self.block_table)
                pools.append((data, scales))
            (self.k, ks), (self.v, vs) = pools
        elif s.kv_format in ("bf16", "f16"):
            self.k, self.v = to_layout(plain_k, s), to_layout(plain_v, s)
            ks = vs = None
        else:
            self.k, self.v = to_layout(kd, s), to_layout(vd, s)
        self.k_scales, self.v_scales = ks, vs


def shape_args(s, **over):
    args = dict(
        batch=s.batch,
        num_q_heads=s.num_q_heads,
        num_kv_heads=s.num_kv_heads,
        head_dim=s.head_dim,
        max_seq_len=s.max_seq_len,
        q_len=s.q_len,
        dtype=s.dtype,
        kv_format=s.kv_format,
        layout=s.layout,
        soft_cap=s.soft_cap,
        window=s.window,
        sinks=s.sinks,
        alibi=s.alibi,
    )
    if s.layout == "paged":
        args.update(page_size=s.page_size, num_pages=s.num_pages, page_order=s.page_order)
    if s.layout == "strided":
        args.update(strides=s.kv_strides)
    args.update(over)
    if args["layout"] != "paged":
        for k in ("page_size", "num_pages", "page_order"):
            args.pop(k, None)
    if args["layout"] != "strided":
        args.pop("strides", None)
    return args


def tensor_scale(x):
    return (x.float().abs().amax() / 448.0).reshape(1)


def empty_cache(s):
    """Values and scales of one tensor (K or V) of shape `s`, NaN-free garbage."""
    d = s.row_elements
    if s.layout == "paged":
        dims = (s.num_pages, s.page_size, s.num_kv_heads, d) if s.page_order == "token_major" else (s.num_pages, s.num_kv_heads, s.page_size, d)
    else:
        dims = (s.batch, s.max_seq_len, s.num_kv_heads, d)
    if s.kv_format in ("bf16", "f16"):
        return torch.zeros(dims, dtype=TORCH_DTYPE[s.dtype], device="cuda"), None
    data = torch.zeros(dims, dtype=torch.uint8, device="cuda")
    if s.tensor_scaled:
        return data, torch.ones(1, dtype=torch.float32, device="cuda")
    if s.scale_dims is None:
        return data, None  # (fp8-ds-mla rows hold their scales)
    side = scale_dims(s)[0]
    side_dtype = torch.float32 if s.kv_format in ("int8", "fp8-per-head") else torch.int32
    return data, torch.zeros(side, dtype=side_dtype, device="cuda")


def to_layout(x, s):
    """A token-major `[B, cap, H, D]` tensor in layout nhd / hnd / strided."""
    if s.layout == "nhd":
        return x.contiguous()
    if s.layout == "hnd":
        return x.transpose(1, 2).contiguous()
    # strided: a view of a larger head-major buffer (room for 8 more tokens).
    b, n, h, d = x.shape
    fill = float("nan") if x.is_floating_point() else 0
    big = torch.full((b, h, n + 8, d), fill, dtype=x.dtype, device=x.device)
    big[:, :, :n] = x.transpose(1, 2)
    return big[:, :, :n]


def to_pool(x, s, table):
    """The rows of `x` scattered into a pool of pages through `table`."""
    ps = s.page_size
    tm = s.page_order == "token_major"
    dims = (s.num_pages, ps, s.num_kv_heads, s.head_dim) if tm else (s.num_pages, s.num_kv_heads, ps, s.head_dim)
    pool = torch.full(dims, float("nan"), dtype=x.dtype, device=x.device)
    for b, row in enumerate(table):
        for j, p in enumerate(row):
            if p < 0:
                continue
            rows = x[b, j * ps : (j + 1) * ps]
            n = rows.shape[0]
            if tm:
                pool[p, :n] = rows
            else:
                pool[p, :, :n] = rows.transpose(0, 1)
    return pool


def make_shape(fmt="bf16", dtype="bf16", q_len=1, heads=(32, 8), d=128, layout="nhd", lens=(37, 300, 1025), page_order="token_major", **variant):
    cap = 1040
    args = dict(batch=len(lens), num_q_heads=heads[0], num_kv_heads=heads[1], head_dim=d, max_seq_len=cap, q_len=q_len, dtype=dtype, kv_format=fmt, **variant)
    if layout == "paged":
        ps = 16
        pages = sum(math.ceil(n / ps) for n in lens) + 3
        args.update(layout="paged", page_size=ps, num_pages=pages, page_order=page_order)
    elif layout == "strided":
        h = heads[1]
        args.update(layout="strided", strides=(h * (cap + 8) * d, d, (cap + 8) * d))
    else:
        args.update(layout=layout)
    return da.DecodeShape(**args)


def draft_tree(q_len, lens, seed):
    """A random draft tree per sequence: each new token hangs from the
    prefix or an earlier token; (masks, positions) as host lists and as the
    uint8 / int32 device tensors `run` takes."""
    rng = random.Random(seed)
    masks, positions = [], []
    for n in lens:
        m, depth = [], []
        for i in range(q_len):
            parent = rng.randrange(-1, i) if i else -1
            m.append((1 << i) | (m[parent] if parent >= 0 else 0))
            depth.append(depth[parent] + 1 if parent >= 0 else 0)
        masks.append(m)
        positions.append([n - q_len + d for d in depth])
    dev = (torch.tensor(masks, dtype=torch.uint8, device="cuda"), torch.tensor(positions, dtype=torch.int32, device="cuda"))
    return (masks, positions), dev


def check(attn, shape, lens, report, capacity=False, seed=1, name="", starts=None):
    gen = torch.Generator(device="cuda").manual_seed(seed)
    cache = Cache(attn, shape, list(lens), gen)
    s = shape
    dt = TORCH_DTYPE[s.dtype]
    q = randn(s.batch, s.q_len, s.num_q_heads, s.head_dim, gen=gen, dtype=dt, scale=2.0)
    extra = {}
    arrays = {}
    sinks = alibi = None
    if s.sinks:
        sinks = arrays["sinks"] = randn(s.num_q_heads, gen=gen, scale=3.0)
    if s.alibi:
        alibi = arrays["alibi_slopes"] = torch.tensor([2.0 ** (-8 * (i + 1) / s.num_q_heads) for i in range(s.num_q_heads)], device="cuda")
    tree = None
    if s.tree:
        tree, (arrays["tree_masks"], arrays["tree_positions"]) = draft_tree(s.q_len, lens, seed)
    if arrays:
        extra["variant"] = da.VariantBuffers(**arrays)
    if capacity and starts is not None:
        plan = attn.plan_capacity(s)
        extra["seq_starts"] = torch.tensor(starts, dtype=torch.int32, device="cuda")
    elif capacity:
        plan = attn.plan_capacity(s)
    elif starts is not None:
        plan = attn.plan_key_ranges(s, starts, lens, cache.host_table)
    elif s.layout == "paged":
        plan = attn.plan_paged(s, lens, cache.host_table)  # unused entries: -1
    else:
        plan = attn.plan(s, lens)
    ws = attn.workspace(plan)
    outs = []
    for _ in range(2):
        out = torch.full_like(q, float("nan"))
        if capacity:
            attn.run_step(plan, q, cache.k, cache.v, out, ws, cache.seq_lens, cache.block_table, k_scales=cache.k_scales, v_scales=cache.v_scales, **extra)
        else:
            attn.run(plan, q, cache.k, cache.v, out, ws, k_scales=cache.k_scales, v_scales=cache.v_scales, **extra)
        outs.append(out)
    torch.cuda.synchronize()
    ref = attention(q, cache.k_ref, cache.v_ref, lens, s.scale, s.soft_cap, s.window, sinks, alibi, starts=starts, tree=tree)
    err = rel_l2(outs[0], ref)
    report(test=name or "case", shape=repr(s), capacity=capacity, rel_l2=err, family=plan.family)
    assert not torch.isnan(outs[0]).any(), "NaN left in the output"
    assert torch.equal(outs[0], outs[1]), "two runs differ"
    assert err <= BOUND, f"rel L2 {err:.3e} > {BOUND}"
    return err


@pytest.fixture(scope="module")
def attn():
    return da.DecodeAttention(0)


def _latent_rows(data, scales, shape, table, b, n):
    """Sequence b's first n latent rows as the kernels see them: bf16
    values, or fp8 codes times their row's scale (float64)."""
    if shape.layout == "paged":
        ps = shape.page_size
        rows = torch.cat([data[p] for p in table[b][: math.ceil(n / ps)]])[:n, 0]
        side = torch.cat([scales[p, 0] for p in table[b][: math.ceil(n / ps)]])[:n] if scales is not None else None
    else:
        rows = data[b, :n, 0]
        side = scales[b, 0, :n] if scales is not None else None
    if shape.kv_format == "fp8-ds-mla":
        # DeepSeek V3.2's rows: 512 e4m3 codes, four f32 scales (one per
        # 128), 64 bf16 RoPE values; a latent value is bf16(code · scale).
        codes = rows[:, :512].contiguous().view(torch.float8_e4m3fn).float()
        scales = rows[:, 512:528].contiguous().view(torch.float32)
        latent = (codes.view(-1, 4, 128) * scales[:, :, None]).view(-1, 512).to(torch.bfloat16)
        return torch.cat([latent, rows[:, 528:].contiguous().view(torch.bfloat16)], dim=1).double()
    if side is None:
        return rows.double()
    return rows.view(torch.float8_e4m3fn).double() * side.double()[:, None]


@pytest.mark.parametrize("capacity", [False, True], ids=["host-lengths", "capacity"])
@pytest.mark.parametrize("layout", ["nhd", "paged"])
@pytest.mark.parametrize("fmt", ["bf16", "fp8-per-head", "fp8-ds-mla"])
def test_mla_reads_one_latent_cache_as_k_and_v(attn, report, fmt, layout, capacity):
    """MLA (head_dim 576: one latent head of 512 latent and 64 RoPE values):
    the cache written on the GPU (`quantize_kv`: bf16 rows copied, fp8
    quantized with a scale per token, or into DeepSeek V3.2's 656-byte
    rows) is passed as K and V, read as Q·K's
    576 values and V's first 512; O is 512 wide. Against the f64 reference
    on the values as stored; a 576-wide O and a V that is not K are
    refused, naming them."""
    lens = [37, 300, 1025]
    s = make_shape(fmt, heads=(16, 1), d=576, layout=layout, lens=lens, q_len=2, scale=192 ** -0.5)
    gen = torch.Generator(device="cuda").manual_seed(7)
    x = randn(s.batch, s.max_seq_len, 1, 576, gen=gen, dtype=torch.bfloat16)
    data, scales = empty_cache(s)
    table = None
    if layout == "paged":
        per = math.ceil(s.max_seq_len / s.page_size)
        pages = list(range(s.num_pages))
        random.Random(3).shuffle(pages)
        free = iter(pages)
        table = [[next(free) if j * s.page_size < n else -1 for j in range(per)] for n in lens]
        plain = to_pool(x, s, table)
        block_table = torch.tensor(table, dtype=torch.int32, device="cuda")
    else:
        plain, block_table = x.contiguous(), None
    seq_lens = torch.tensor(lens, dtype=torch.int32, device="cuda")
    attn.quantize_kv(s, plain, data, scales, seq_lens=seq_lens, block_table=block_table)
    q = randn(s.batch, s.q_len, s.num_q_heads, 576, gen=gen, dtype=torch.bfloat16, scale=2.0)
    if capacity:
        plan = attn.plan_capacity(s)
    elif layout == "paged":
        plan = attn.plan_paged(s, lens, table)
    else:
        plan = attn.plan(s, lens)
    assert plan.family == "mla"
    ws = attn.workspace(plan)
    outs = []
    for _ in range(2):
        out = torch.full((s.batch, s.q_len, s.num_q_heads, 512), float("nan"), dtype=torch.bfloat16, device="cuda")
        if capacity:
            attn.run_step(plan, q, data, data, out, ws, seq_lens, block_table, k_scales=scales, v_scales=scales)
        else:
            attn.run(plan, q, data, data, out, ws, k_scales=scales, v_scales=scales)
        outs.append(out)
    torch.cuda.synchronize()
    ref = torch.zeros(s.batch, s.q_len, s.num_q_heads, 512, dtype=torch.float64, device="cuda")
    for b, n in enumerate(lens):
        rows = _latent_rows(data, scales, s, table, b, n)[None, :, None]
        ref[b : b + 1] = attention(q[b : b + 1], rows, rows[..., :512], [n], s.scale)
    err = rel_l2(outs[0], ref)
    report(test="mla", shape=repr(s), capacity=capacity, rel_l2=err, family=plan.family)
    assert not torch.isnan(outs[0]).any(), "NaN left in the output"
    assert torch.equal(outs[0], outs[1]), "two runs differ"
    assert err <= BOUND, f"rel L2 {err:.3e} > {BOUND}"
    wide = torch.empty(s.batch, s.q_len, s.num_q_heads, 576, dtype=torch.bfloat16, device="cuda")
    with pytest.raises(ValueError, match="`out`"):
        attn.run_step(plan, q, data, data, wide, ws, seq_lens, block_table, k_scales=scales, v_scales=scales) if capacity else attn.run(plan, q, data, data, wide, ws, k_scales=scales, v_scales=scales)
    other = data.clone()
    with pytest.raises(ValueError, match="`v`"):
        attn.run_step(plan, q, data, other, outs[0], ws, seq_lens, block_table, k_scales=scales, v_scales=scales) if capacity else attn.run(plan, q, data, other, outs[0], ws, k_scales=scales, v_scales=scales)


FORMATS = [("bf16", "bf16"), ("f16", "f16"), ("int8", "bf16"), ("fp8_per_head", "bf16"), ("fp8", "bf16"), ("int4_g32", "bf16")]
HEADS = {"gqa": (32, 8), "mqa": (16, 1), "mha": (8, 8)}


def test_a_device_names_its_kernels_architecture_and_where_they_came_from():
    dev = da.DecodeAttention(0)
    major, minor = torch.cuda.get_device_capability(0)
    expected = "sm_90a" if (major, minor) == (9, 0) else "sm_89" if (major, minor) >= (8, 9) else "sm_80"
    assert dev.arch == expected and dev.arch in da.ARCHS
    assert dev.module_source in ("fatbin", "fatbin-ptx")


@pytest.mark.parametrize("layout", ["nhd", "paged"])
@pytest.mark.parametrize("heads", list(HEADS))
@pytest.mark.parametrize("q_len", [1, 3, 8])
@pytest.mark.parametrize("fmt, dtype", FORMATS, ids=[f for f, _ in FORMATS])
def test_every_format_q_len_head_ratio_and_layout(attn, report, fmt, dtype, q_len, heads, layout):
    check(attn, make_shape(fmt, dtype, q_len, HEADS[heads], layout=layout), [37, 300, 1025], report, name="matrix")


@pytest.mark.parametrize("layout", ["hnd", "strided"])
@pytest.mark.parametrize("fmt", ["bf16", "int8", "fp8"])
def test_head_major_and_strided_views(attn, report, fmt, layout):
    check(attn, make_shape(fmt, q_len=2, layout=layout), [37, 300, 1025], report, name="layouts")


@pytest.mark.parametrize("fmt", ["bf16", "int8"])
def test_head_major_pages(attn, report, fmt):
    check(attn, make_shape(fmt, layout="paged", page_order="head_major"), [37, 300, 1025], report, name="layouts")


@pytest.mark.parametrize("d", [64, 256])
@pytest.mark.parametrize("fmt", ["bf16", "int8", "fp8_per_head", "int4_g32"])
def test_head_dims_64_and_256(attn, report, fmt, d):
    check(attn, make_shape(fmt, q_len=3, d=d), [37, 300, 1025], report, name="head_dims")


VARIANTS = {
    "soft_cap": dict(soft_cap=30.0),
    "window": dict(window=100),
    "sinks": dict(sinks=True),
    "alibi": dict(alibi=True),
}


@pytest.mark.parametrize("layout", ["nhd", "paged"])
@pytest.mark.parametrize("variant", list(VARIANTS))
@pytest.mark.parametrize("fmt", ["bf16", "int8", "fp8"])
def test_variants(attn, report, fmt, variant, layout):
    check(attn, make_shape(fmt, q_len=3, layout=layout, **VARIANTS[variant]), [37, 300, 1025], report, name="variants")


@pytest.mark.parametrize("layout", ["nhd", "paged"])
@pytest.mark.parametrize("fmt", ["bf16", "int8", "fp8", "int4_g32"])
def test_capacity_plans_read_lengths_on_the_device(attn, report, fmt, layout):
    check(attn, make_shape(fmt, q_len=3, layout=layout), [37, 300, 1025], report, capacity=True, name="capacity")


def test_fp16_queries_over_an_int8_cache(attn, report):
    check(attn, make_shape("int8", "f16", q_len=3), [37, 300, 1025], report, name="f16-int8")


def test_real_tensors_are_checked_before_any_launch(attn):
    s = make_shape()
    plan = attn.plan(s, [37, 300, 1025])
    ws = attn.workspace(plan)
    q = torch.zeros(3, 1, 32, 128, dtype=torch.bfloat16, device="cuda")
    k = torch.zeros(3, 1040, 8, 128, dtype=torch.bfloat16, device="cuda")
    with pytest.raises(ValueError, match="invalid `q`: expected dtype bfloat16, got float16"):
        attn.run(plan, q.half(), k, k, q.clone(), ws)
    with pytest.raises(ValueError, match="invalid `k`: expected a tensor on cuda:0, got one on cpu"):
        attn.run(plan, q, k.cpu(), k, q.clone(), ws)
    with pytest.raises(ValueError, match="invalid `v`: expected strides"):
        attn.run(plan, q, k, k.transpose(1, 2).contiguous().transpose(1, 2), q.clone(), ws)
    with pytest.raises(ValueError, match="invalid `workspace`"):
        attn.run(plan, q, k, k, q.clone(), ws[:16])
    with pytest.raises(ValueError, match="invalid `plan`"):
        attn.run_step(plan, q, k, k, q.clone(), ws, torch.ones(3, dtype=torch.int32, device="cuda"))


def _graph_case(attn, fmt, layout, report):
    """Append + attention + advance captured once, replayed 100 times with
    new rows each step; checked against the reference at steps 1, 50, 100."""
    gen = torch.Generator(device="cuda").manual_seed(5)
    lens = [5, 50, 100, 200]
    b, hq, hkv, d, cap = len(lens), 32, 8, 128, 512
    args = dict(batch=b, num_q_heads=hq, num_kv_heads=hkv, head_dim=d, max_seq_len=cap, kv_format=fmt)
    if layout == "paged":
        args.update(layout="paged", page_size=16, num_pages=b * cap // 16)
    s = da.DecodeShape(**args)
    plan = attn.plan_capacity(s)
    ws = attn.workspace(plan)
    mirror_k = kv_values(b, cap, hkv, d, gen, torch.bfloat16)
    mirror_v = kv_values(b, cap, hkv, d, gen, torch.bfloat16)
    seq_lens = torch.tensor(lens, dtype=torch.int32, device="cuda")
    table = None
    if layout == "paged":
        table = torch.arange(b * cap // 16, dtype=torch.int32, device="cuda").reshape(b, cap // 16).flip(1).contiguous()
    k, ks = empty_cache(s)
    v, vs = empty_cache(s)
    if s.tensor_scaled:
        ks.copy_(tensor_scale(mirror_k) * 2)  # headroom for the rows to come
        vs.copy_(tensor_scale(mirror_v) * 2)
    for src, dst, sc in ((mirror_k, k, ks), (mirror_v, v, vs)):
        src_layout = to_pool(src, s, table.tolist()) if layout == "paged" else src
        attn.quantize_kv(s, src_layout, dst, sc, seq_lens=seq_lens, block_table=table)
    q = torch.empty(b, 1, hq, d, dtype=torch.bfloat16, device="cuda")
    new_k = torch.empty(b, 1, hkv, d, dtype=torch.bfloat16, device="cuda")
    new_v = torch.empty_like(new_k)
    out = torch.empty_like(q)

    def step():
        attn.advance_seq_lens(s, seq_lens, 1)
        attn.append_kv(s, new_k, k, ks, seq_lens=seq_lens, block_table=table)
        attn.append_kv(s, new_v, v, vs, seq_lens=seq_lens, block_table=table)
        attn.run_step(plan, q, k, v, out, ws, seq_lens, table, k_scales=ks, v_scales=vs)

    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        step()
    host_lens = list(lens)
    worst = 0.0
    for i in range(1, 101):
        q.copy_(randn(b, 1, hq, d, gen=gen, scale=2.0))
        new_k.copy_(kv_values(b, 1, hkv, d, gen, torch.bfloat16))
        new_v.copy_(kv_values(b, 1, hkv, d, gen, torch.bfloat16))
        for j in range(b):
            host_lens[j] += 1
            mirror_k[j, host_lens[j] - 1] = new_k[j, 0]
            mirror_v[j, host_lens[j] - 1] = new_v[j, 0]
        out.fill_(float("nan"))
        graph.replay()
        if i in (1, 50, 100):
            torch.cuda.synchronize()
            assert seq_lens.tolist() == host_lens
            kr, vr = mirror_k, mirror_v
            if fmt != "bf16" and layout != "paged":
                # The values the kernel reads: the library's dequantization of the cache.
                to_f16 = da.DecodeShape(**{**args, "dtype": "f16"})
                kr, vr = (torch.zeros(mirror_k.shape, dtype=torch.float16, device="cuda") for _ in range(2))
                attn.dequantize_kv(to_f16, k, ks, kr, seq_lens=seq_lens)
                attn.dequantize_kv(to_f16, v, vs, vr, seq_lens=seq_lens)
                # ... which are the appended rows, to the format's precision.
                n = min(host_lens)
                assert rel_l2(kr[:, :n], mirror_k[:, :n]) < {"int8": 0.02, "fp8": 0.06}[fmt]
            ref = attention(q, kr, vr, host_lens, s.scale)
            err = rel_l2(out, ref)
            worst = max(worst, err)
            assert not torch.isnan(out).any()
            assert err <= BOUND, f"step {i}: rel L2 {err:.3e}"
    report(test="cuda_graph", shape=repr(s), replays=100, rel_l2=worst)


@pytest.mark.parametrize("fmt, layout", [("bf16", "paged"), ("int8", "nhd"), ("fp8", "nhd")])
def test_a_cuda_graph_of_append_and_attention_replays_as_lengths_grow(attn, report, fmt, layout):
    _graph_case(attn, fmt, layout, report)


def test_torch_compile_keeps_the_op_in_its_graph(attn, report):
    s = make_shape(q_len=1)
    gen = torch.Generator(device="cuda").manual_seed(3)
    lens = [37, 300, 1025]
    cache = Cache(attn, s, lens, gen)
    plan = attn.plan(s, lens)
    ws = attn.workspace(plan)
    q = randn(3, 1, 32, 128, gen=gen, dtype=torch.bfloat16)
    ref = attention(q, cache.k_ref, cache.v_ref, lens, s.scale)

    def through_the_method(q, out):
        attn.run(plan, q, cache.k, cache.v, out, ws)
        return out.float() * 2

    def through_the_op(q, out):
        torch.ops.decode_attn.run(plan.id, q, cache.k, cache.v, out, ws, None, None, None, None)
        return out.float() * 2

    torch._dynamo.reset()
    for fn, fullgraph in ((through_the_op, True), (through_the_method, True)):
        compiled = torch.compile(fn, fullgraph=fullgraph)
        out = torch.full_like(q, float("nan"))
        got = compiled(q, out)
        torch.cuda.synchronize()
        err = rel_l2(got / 2, ref)
        report(test="torch_compile", fn=fn.__name__, rel_l2=err)
        assert err <= BOUND


@pytest.mark.skipif(not torch.cuda.is_available() or torch.cuda.device_count() < 2, reason="needs a second GPU")
def test_a_second_gpu_has_its_own_instance(report):
    a0, a1 = da.DecodeAttention("cuda:0"), da.DecodeAttention(torch.device("cuda", 1))
    assert a0 is not a1 and a1.device == 1 and da.DecodeAttention(1) is a1
    with torch.cuda.device(1):
        s = make_shape("int8", q_len=3)
        err = check(a1, s, [37, 300, 1025], report, name="cuda:1")
    assert err <= BOUND
    plan0 = a0.plan(s, [37, 300, 1025])
    q = torch.zeros(3, 3, 32, 128, dtype=torch.bfloat16, device="cuda:1")
    with pytest.raises(ValueError, match="invalid `plan`"):
        a1.run(plan0, q, q, q, q, torch.zeros(1 << 20, dtype=torch.uint8, device="cuda:1"))


@pytest.mark.parametrize("capacity", [False, True], ids=["host-starts", "device-starts"])
@pytest.mark.parametrize("layout", ["nhd", "hnd", "paged"])
@pytest.mark.parametrize("fmt, dtype", FORMATS, ids=[f for f, _ in FORMATS])
def test_key_ranges_hide_each_sequences_keys_before_its_start(attn, report, fmt, dtype, layout, capacity):
    """Left-padded sequences: keys `[start_b, len_b)` only (device starts
    past `len_b - q_len` read as that)."""
    lens = [37, 300, 1025]
    starts = [5, 0, 1000] if not capacity else [40, 17, 1023]
    check(attn, make_shape(fmt, dtype, 3, (32, 8), layout=layout, key_ranges=True), lens, report, capacity=capacity, starts=starts, name="key-ranges")


@pytest.mark.parametrize("variant", [dict(window=64), dict(window=64, sinks=True), dict(soft_cap=20.0), dict(alibi=True)], ids=["window", "window-sinks", "softcap", "alibi"])
def test_key_ranges_combine_with_every_variant(attn, report, variant):
    check(attn, make_shape("bf16", "bf16", 2, (16, 4), key_ranges=True, **variant), [37, 300, 1025], report, starts=[3, 250, 960], name="key-ranges-variant")


@pytest.mark.parametrize("capacity", [False, True], ids=["host-lengths", "capacity"])
@pytest.mark.parametrize("variant", [dict(), dict(window=64, sinks=True), dict(soft_cap=20.0)], ids=["tree", "tree-window-sinks", "tree-softcap"])
@pytest.mark.parametrize("layout", ["nhd", "paged"])
@pytest.mark.parametrize("fmt, dtype", FORMATS, ids=[f for f, _ in FORMATS])
def test_a_draft_tree_shows_each_token_the_prefix_and_its_ancestors(attn, report, fmt, dtype, layout, variant, capacity):
    """Speculative decoding's tree verification: 6 new tokens a sequence
    in a random tree, against the reference of the same tree."""
    check(attn, make_shape(fmt, dtype, 6, (32, 8), layout=layout, tree=True, **variant), [37, 300, 1025], report, capacity=capacity, name="tree")


@pytest.mark.parametrize("order", ["nhd", "hnd"])
@pytest.mark.parametrize("fmt", ["bf16", "int8", "fp8_per_head", "fp8", "int4_g32"])
def test_append_rows_writes_what_append_kv_writes(attn, fmt, order):
    """Any number of rows per sequence, token- or head-major, in place:
    the same bytes as `append_kv` of the same rows in its `[B, q, Hkv, D]`
    order, 8 rows at a time."""
    b, h, d, cap, rows = 2, 4, 128, 64, 24
    shape = da.DecodeShape(batch=b, num_q_heads=8, num_kv_heads=h, head_dim=d, max_seq_len=cap, kv_format=fmt, layout="hnd")
    gen = torch.Generator(device="cuda").manual_seed(11)
    new = randn(b, rows, h, d, gen=gen, dtype=torch.bfloat16, scale=3.0)
    src = new if order == "nhd" else new.transpose(1, 2).contiguous()
    lens = torch.full((b,), rows + 8, dtype=torch.int32, device="cuda")
    vpe = shape.values_per_element
    side_dtype = torch.int32 if fmt.startswith("int4") else torch.float32
    outs = []
    for way in ("rows", "append"):
        data = torch.zeros(b, h, cap, d // vpe, dtype=torch.uint8 if fmt != "bf16" else torch.bfloat16, device="cuda")
        scales = None if fmt == "bf16" else (torch.full((1,), 0.05, device="cuda") if shape.tensor_scaled else torch.zeros(scale_dims(shape)[0], dtype=side_dtype, device="cuda"))
        if way == "rows":
            attn.append_rows(shape, src, data, scales, seq_lens=lens, order=order)
        else:
            eight = da.DecodeShape(batch=b, num_q_heads=8, num_kv_heads=h, head_dim=d, max_seq_len=cap, kv_format=fmt, layout="hnd", q_len=8)
            for c in range(rows // 8):
                step = torch.full((b,), 8 + 8 * (c + 1), dtype=torch.int32, device="cuda")
                attn.append_kv(eight, new[:, 8 * c : 8 * (c + 1)].contiguous(), data, scales, seq_lens=step)
        outs.append((data.clone(), None if scales is None else scales.clone()))
    torch.cuda.synchronize()
    assert torch.equal(outs[0][0], outs[1][0])
    if outs[0][1] is not None:
        assert torch.equal(outs[0][1], outs[1][1])
