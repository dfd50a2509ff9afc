"""transformers with `attn_implementation="decode_attn"`: every scenario a
user meets either runs on the kernels exactly or falls back, never
silently wrong.

Random-weight models (`_models.py`: Llama, Mistral, Qwen3, Gemma-2,
Gemma-3, gpt-oss) generate greedily with decode_attn and with the model's
reference attention (SDPA; eager for Gemma-2's soft-cap and gpt-oss's
sinks). Every step's logits must agree to a relative L2 of 1e-2, or to the
floor measured in the same run where bf16 noise puts it higher (how far
transformers' eager attention is from its SDPA on the same model); tokens
must be equal, or where one differs the reference's logit margin there
must show a near tie. The attention function's counters say which calls
the kernels served and why the others fell back.

Each test runs twice: on the GPU (the kernels), and on the CPU with the
kernels replaced by `_emulated.attention_step`, a float64 model of them
(the integration's logic without a GPU, where torch and transformers are
installed)."""

import pytest

from conftest import GPU_SKIP, needs_gpu

torch = pytest.importorskip("torch")
transformers = pytest.importorskip("transformers")

import _emulated  # noqa: E402
import _models  # noqa: E402
import decode_attn.hf as hf  # noqa: E402
import decode_attn.ops as ops  # noqa: E402
from decode_attn import cache as qcache  # noqa: E402

STEPS = 12
BOUND = 1e-2


@pytest.fixture(params=["gpu", "emulated"])
def device(request, monkeypatch):
    if request.param == "gpu":
        if GPU_SKIP is not None:
            pytest.skip(f"GPU test: {GPU_SKIP}")
        return "cuda"
    monkeypatch.setattr(ops, "attention_step", _emulated.attention_step)
    monkeypatch.setattr(hf, "_on_gpu", lambda t: True)
    torch.set_num_threads(max(torch.get_num_threads(), 2))
    return "cpu"


def counted(f):
    """Runs `f` with the attention function's counters reset; (its result, the counters)."""
    hf.calls.clear()
    hf.calls["served"] = 0
    out = f()
    return out, dict(hf.calls)


def check(name, ref, ours, floor_run=None, report=None, **tags):
    r = _models.compare(ref, ours)
    floor = _models.compare(ref, floor_run).worst if floor_run is not None else 0.0
    if report is not None:
        report(test="hf", model=name, worst_step_rel_l2=r.worst, first_token_diff=r.first_diff, margin=r.margin, floor=floor, **tags)
    assert r.worst <= max(BOUND, floor), f"{name}: per-step logits rel L2 {r.worst:.3e} (floor {floor:.3e}, bound {BOUND})"
    assert r.tokens_equal or r.margin < 0.05, f"{name}: token {r.first_diff} differs where the reference's margin is {r.margin}"
    return r


def scenario(device, name, pads, prompt=24, steps=STEPS, report=None, **generate_kwargs):
    """decode_attn against the model's reference (and eager, the floor) on
    one model and batch: the counters of decode_attn's run."""
    model = _models.build(name, device)
    inputs = _models.prompts(len(pads), prompt, pads, device)
    ref_impl = _models.REFERENCE.get(name, "sdpa")
    ref = _models.generate(model, ref_impl, inputs, steps, **generate_kwargs)
    # The floor: the farther from the reference of two other correct
    # attentions on the same model (float32, and eager where the
    # reference is SDPA).
    partners = [_models.register_fp32_reference()] + (["eager"] if ref_impl == "sdpa" else [])
    floors = [_models.generate(model, p, inputs, steps, **generate_kwargs) for p in partners]
    floor = max(floors, key=lambda f: _models.compare(ref, f).worst)
    ours, calls = counted(lambda: _models.generate(model, hf.register(), inputs, steps, **generate_kwargs))
    check(name, ref, ours, floor, report, pads=list(pads), **{k: str(v) for k, v in generate_kwargs.items()})
    return calls


def served_every_decode_step(calls, layers, steps=STEPS):
    assert calls["served"] == layers * (steps - 1), calls


@pytest.mark.parametrize("pads", [[0, 0], [0, 9, 17], [0, 3, 0, 11, 1, 20, 7, 0]], ids=["unpadded2", "left-padded3", "left-padded8"])
def test_llama_batches_padded_or_not_are_served_exactly(device, pads, report):
    calls = scenario(device, "llama", pads, report=report)
    served_every_decode_step(calls, 2)


def test_llama_static_cache_is_served_up_to_its_filled_length(device, report):
    calls = scenario(device, "llama", [0, 9, 17], report=report, cache_implementation="static", disable_compile=True)
    served_every_decode_step(calls, 2)


@pytest.mark.parametrize("name", ["mistral", "qwen3", "gemma2", "gemma3", "gpt_oss"])
def test_models_with_windows_softcaps_and_sinks_are_served_exactly(device, name, report):
    # Padded by 5 so the key ranges and the windows combine; prompts of 30
    # so that the windows (16, gpt-oss 24) bind.
    calls = scenario(device, name, [0, 5], prompt=30, report=report)
    layers = _models.CONFIGS[name]().num_hidden_layers
    served_every_decode_step(calls, layers)
    # Prefill falls back: to SDPA, or for soft-caps and sinks to the
    # model's eager attention (SDPA would drop them).
    assert calls.get("prefill") == layers


@pytest.mark.parametrize("name", ["gemma2", "gpt_oss"])
def test_sliding_window_caches_are_served(device, name, report):
    calls = scenario(device, name, [0, 3], prompt=30, report=report, cache_implementation="static", disable_compile=True)
    served_every_decode_step(calls, _models.CONFIGS[name]().num_hidden_layers)


def test_a_custom_4d_mask_falls_back_to_the_reference(device):
    """A decode step of 3 tokens under a custom 4D mask that no key range
    describes (a hole in the cached prefix): it falls back, and gives
    exactly SDPA's result on the same cache."""
    model = _models.build("llama", device)
    inputs = _models.prompts(2, 16, [0, 4], device)
    step = torch.randint(3, _models.VOCAB, (2, 3), generator=torch.Generator().manual_seed(5)).to(device)
    n = 16 + 3
    allowed = torch.ones(2, 1, 3, n, dtype=torch.bool, device=device)
    allowed[1, :, :, :4] = False  # the padding
    allowed[:, :, :, 8:10] = False  # the hole
    allowed[:, :, :, 16:] = torch.tril(torch.ones(3, 3, dtype=torch.bool, device=device))
    additive = torch.where(allowed, 0.0, torch.finfo(torch.bfloat16).min).to(torch.bfloat16)
    positions = torch.arange(16, n, device=device)[None].expand(2, -1)
    logits = {}
    with torch.no_grad():
        for impl in ("sdpa", hf.register()):
            model.set_attn_implementation(impl)
            cache = transformers.DynamicCache(config=model.config)
            model(**inputs, past_key_values=cache, use_cache=True)
            logits[impl], calls = counted(lambda: model(input_ids=step, attention_mask=additive, position_ids=positions, past_key_values=cache, use_cache=True).logits.float())
    assert calls["served"] == 0 and calls.get("a mask that is not a key range") == 2, calls
    assert torch.equal(logits["decode_attn"], logits["sdpa"])


def test_output_attentions_falls_back(device):
    model = _models.build("llama", device)
    inputs = _models.prompts(2, 16, [0, 2], device)
    model.set_attn_implementation(hf.register())
    with torch.no_grad():
        cache = transformers.DynamicCache(config=model.config)
        model(**inputs, past_key_values=cache, use_cache=True)
        nxt = {"input_ids": inputs["input_ids"][:, -1:], "attention_mask": torch.cat([inputs["attention_mask"], inputs["attention_mask"][:, -1:]], 1)}
        _, calls = counted(lambda: model(**nxt, past_key_values=cache, use_cache=True, output_attentions=True))
    assert calls["served"] == 0 and calls.get("output_attentions") == 2, calls


@pytest.mark.parametrize("q_len", [1, 3])
def test_cross_attention_gets_no_causal_rule(device, q_len):
    """A non-causal module (cross-attention) without a mask: one new token
    sees every key either way and is served; several fall back (the
    kernels are causal among the new tokens)."""
    dtype = torch.bfloat16
    g = torch.Generator().manual_seed(3)
    q = torch.randn(2, 8, q_len, 128, generator=g).to(device, dtype)
    k = torch.randn(2, 4, 40, 128, generator=g).to(device, dtype)
    v = torch.randn(2, 4, 40, 128, generator=g).to(device, dtype)

    class CrossAttention(torch.nn.Module):
        is_causal = False
        num_key_value_groups = 2
        training = False

    module = CrossAttention()
    out, calls = counted(lambda: hf.decode_attn_forward(module, q, k, v, None, scaling=128**-0.5)[0])
    from transformers.integrations.sdpa_attention import sdpa_attention_forward

    ref = sdpa_attention_forward(module, q, k, v, None, scaling=128**-0.5)[0]
    assert calls["served"] == (1 if q_len == 1 else 0), calls
    assert (out.float() - ref.float()).norm() / ref.float().norm() < BOUND


def test_the_mask_function_hands_over_key_ranges_only_where_they_are_exact(device):
    """The mask function's `KeyRanges` against transformers' own SDPA mask:
    left padding, a static cache's unfilled rows, windows; a mask with a
    hole is handed on as it is."""
    from transformers.masking_utils import causal_mask_function, sdpa_mask, sliding_window_causal_mask_function

    b, q, n = 3, 2, 40
    pad = torch.ones(b, n, dtype=torch.bool, device=device)
    pad[1, :7] = False
    pad[2, :19] = False
    for fn, local in [(causal_mask_function, None), (sliding_window_causal_mask_function(9), 9)]:
        # A static cache: 30 of 40 rows filled (q_offset 28, 2 new tokens).
        args = dict(batch_size=b, q_length=q, kv_length=n, q_offset=torch.tensor(28, device=device), kv_offset=0, mask_function=fn, attention_mask=pad[:, :30], local_size=local, device=device)
        ranges = hf.decode_attn_mask(**args)
        assert isinstance(ranges, hf.KeyRanges)
        dense = sdpa_mask(**{**args, "allow_is_causal_skip": False})[:, 0]
        t = torch.arange(n, device=device)
        lens = ranges.lens[:, None, None]
        starts = ranges.starts[:, None, None] if ranges.starts is not None else 0
        pos = lens - q + torch.arange(q, device=device)[None, :, None]
        ours = (t >= starts) & (t <= pos)
        if local is not None:
            ours &= t > pos - local
        assert torch.equal(ours, dense)
    holed = pad.clone()
    holed[0, 10] = False
    got = hf.decode_attn_mask(batch_size=b, q_length=1, kv_length=n, q_offset=n - 1, attention_mask=holed, device=device)
    assert not isinstance(got, hf.KeyRanges)


# -- GPU only: compiled generation and quantized caches -----------------------


@needs_gpu
def test_compiled_static_generation_keeps_its_cuda_graphs(report):
    """`generate(cache_implementation="static")` compiles the decode step
    (mode "reduce-overhead": CUDA graphs); the op must stay inside them:
    no cudagraph skip, the same tokens as the uncompiled static run, and no
    decode_attn Python in a replayed step."""
    from torch._dynamo.utils import counters

    model = _models.build("llama", "cuda")
    inputs = _models.prompts(3, 24, [0, 9, 17], "cuda")
    plain = _models.generate(model, hf.register(), inputs, STEPS, cache_implementation="static", disable_compile=True)
    counters.clear()
    compiled = _models.generate(model, hf.register(), inputs, STEPS, cache_implementation="static")
    assert counters["inductor"]["cudagraph_skips"] == 0, dict(counters["inductor"])
    r = _models.compare(plain, compiled)
    report(test="hf-compiled", worst_step_rel_l2=r.worst, first_token_diff=r.first_diff, margin=r.margin)
    assert r.tokens_equal or r.margin < 0.05, (r.first_diff, r.margin)
    # With one static cache kept across generations (reset between them),
    # a second generation replays the recorded graphs: no op Python runs.
    # (`cache_implementation="static"` makes a new cache per call, whose
    # new addresses make inductor record the graphs anew.)
    cache = transformers.StaticCache(config=model.config, max_cache_len=24 + STEPS)
    _models.generate(model, hf.register(), inputs, STEPS, past_key_values=cache)
    calls = [0]
    inner = ops.attention_step

    def counting(*args):
        calls[0] += 1
        return inner(*args)

    ops.attention_step = counting
    try:
        cache.reset()
        again = _models.generate(model, hf.register(), inputs, STEPS, past_key_values=cache)
    finally:
        ops.attention_step = inner
    assert calls[0] == 0, f"{calls[0]} calls of the op's Python while the graphs replayed"
    assert torch.equal(again[1], compiled[1])


FORMATS = ["int8", "fp8", "fp8_per_head", "int4_g32"]


def quantized_run(model, fmt, inputs, steps, static=False, **kw):
    cache = qcache.QuantizedCache(model.config, fmt, max_cache_len=inputs["input_ids"].shape[1] + steps if static else None)
    out, calls = counted(lambda: _models.generate(model, hf.register(), inputs, steps, past_key_values=cache, **kw))
    return out, calls, cache


@needs_gpu
@pytest.mark.parametrize("static", [False, True], ids=["dynamic", "static"])
@pytest.mark.parametrize("fmt", FORMATS)
def test_quantized_caches_generate_on_the_kernels_and_report_their_error(fmt, static, report):
    model = _models.build("llama", "cuda")
    inputs = _models.prompts(3, 24, [0, 9, 17], "cuda")
    ref = _models.generate(model, "sdpa", inputs, STEPS)
    ours, calls, cache = quantized_run(model, fmt, inputs, STEPS, static=static, disable_compile=True)
    served_every_decode_step(calls, 2)
    r = _models.compare(ref, ours)
    report(test="hf-quantized", kv_format=fmt, static=static, worst_step_rel_l2=r.worst, first_token_diff=r.first_diff, margin=r.margin, bytes=cache.memory_bytes())
    # Quantization error, not a bug bound (the measured difference is the result).
    assert r.worst < 0.3, r.worst


@needs_gpu
def test_a_compiled_static_quantized_cache_keeps_its_cuda_graphs(report):
    from torch._dynamo.utils import counters

    model = _models.build("llama", "cuda")
    inputs = _models.prompts(3, 24, [0, 9, 17], "cuda")
    plain, _, _ = quantized_run(model, "int8", inputs, STEPS, static=True, disable_compile=True)
    counters.clear()
    compiled, _, _ = quantized_run(model, "int8", inputs, STEPS, static=True)
    assert counters["inductor"]["cudagraph_skips"] == 0, dict(counters["inductor"])
    r = _models.compare(plain, compiled)
    report(test="hf-quantized-compiled", worst_step_rel_l2=r.worst, first_token_diff=r.first_diff, margin=r.margin)
    assert r.tokens_equal or r.margin < 0.05


@needs_gpu
@pytest.mark.parametrize("fmt", ["int8", "fp8"])
def test_sliding_quantized_layers_keep_only_the_window(fmt, monkeypatch, report):
    """Mistral's 16-token window over a cache that grows 16 tokens at a
    time: the sliding layers drop what no later token sees, and the output
    stays the reference's."""
    monkeypatch.setattr(qcache, "CHUNK", 16)
    model = _models.build("mistral", "cuda")
    inputs = _models.prompts(2, 30, [0, 5], "cuda")
    ref = _models.generate(model, "sdpa", inputs, 24)
    ours, calls, cache = quantized_run(model, fmt, inputs, 24)
    served_every_decode_step(calls, 2, 24)
    assert all(layer.offset > 0 and layer.capacity <= 48 for layer in cache.layers)
    r = _models.compare(ref, ours)
    report(test="hf-quantized-sliding", kv_format=fmt, worst_step_rel_l2=r.worst, first_token_diff=r.first_diff, margin=r.margin)
    assert r.worst < 0.3


@needs_gpu
@pytest.mark.parametrize("fmt", ["int8", "int4_g32"])
def test_a_continued_chat_over_quantized_pages_falls_back_on_dequantized_keys(fmt, report):
    """Twelve new tokens over a filled cache (a continued chat): 16-bit
    keys, the cached ones dequantized, to SDPA; then decoding goes on on
    the kernels."""
    model = _models.build("llama", "cuda")
    first = _models.prompts(2, 24, [0, 3], "cuda")
    more = torch.randint(3, _models.VOCAB, (2, 12), generator=torch.Generator().manual_seed(9)).cuda()
    ids = torch.cat([first["input_ids"], more], 1)
    mask = torch.cat([first["attention_mask"], torch.ones_like(more)], 1)
    logits = {}
    with torch.no_grad():
        for impl, c in (("sdpa", transformers.DynamicCache(config=model.config)), (hf.register(), qcache.QuantizedCache(model.config, fmt))):
            model.set_attn_implementation(impl)
            model(**first, past_key_values=c, use_cache=True)  # the first turn
            gen, calls = counted(lambda: model.generate(input_ids=ids, attention_mask=mask, max_new_tokens=6, min_new_tokens=6, do_sample=False, pad_token_id=0, past_key_values=c, output_logits=True, return_dict_in_generate=True))
            logits[impl] = (torch.stack([x.float() for x in gen.logits], 1), gen.sequences[:, ids.shape[1] :])
    assert calls["served"] == 2 * 5 and calls.get("prefill") == 2, calls
    r = _models.compare(logits["sdpa"], logits["decode_attn"])
    report(test="hf-quantized-continued", kv_format=fmt, worst_step_rel_l2=r.worst, first_token_diff=r.first_diff, margin=r.margin)
    assert r.worst < 0.3


@needs_gpu
def test_quantized_caches_reorder_crop_and_repeat_exactly():
    """Beam search and assisted generation's cache operations: the cache's
    dequantized rows after each are the same operation on its rows before."""
    model = _models.build("llama", "cuda")
    inputs = _models.prompts(2, 20, [0, 4], "cuda")
    cache = qcache.QuantizedCache(model.config, "int8")
    model.set_attn_implementation(hf.register())
    with torch.no_grad():
        model(**inputs, past_key_values=cache, use_cache=True)
    layer = cache.layers[0]

    def rows():
        return layer.dequantized(layer.k_data, layer.v_data, layer.seen - layer.offset)[0].clone()

    before = rows()
    cache.batch_repeat_interleave(3)
    assert torch.equal(rows(), before.repeat_interleave(3, 0))
    idx = torch.tensor([5, 0, 3, 3], device="cuda")
    after_repeat = rows()
    cache.reorder_cache(idx)
    assert torch.equal(rows(), after_repeat.index_select(0, idx))
    cut = rows()
    cache.crop(-5)
    assert torch.equal(rows(), cut[:, :, :-5])
    assert cache.get_seq_length() == 15


@needs_gpu
def test_assisted_generation_verifies_drafts_over_a_quantized_cache():
    """Prompt-lookup decoding verifies several draft tokens a step (q_len
    up to 4, on the kernels) and crops rejected ones: greedy, it must give
    the plain greedy run's tokens."""
    model = _models.build("llama", "cuda")
    g = torch.Generator().manual_seed(4)
    base = torch.randint(3, _models.VOCAB, (1, 12), generator=g)
    ids = torch.cat([base, base, base], 1).cuda()  # repeats for the lookup to find
    inputs = {"input_ids": ids, "attention_mask": torch.ones_like(ids)}
    plain, _, _ = quantized_run(model, "int8", inputs, 16)
    assisted, calls, _ = quantized_run(model, "int8", inputs, 16, prompt_lookup_num_tokens=3)
    assert calls["served"] > 0
    r = _models.compare(plain, assisted)
    assert r.tokens_equal or r.margin < 0.05, (r.first_diff, r.margin)


@needs_gpu
@pytest.mark.parametrize("fmt, fraction", [("int8", 0.53), ("fp8", 0.51), ("int4_g32", 0.32)])
def test_a_quantized_cache_holds_a_fraction_of_the_bf16_bytes(fmt, fraction):
    model = _models.build("llama", "cuda")
    inputs = _models.prompts(2, 512, [0, 0], "cuda")
    cache = qcache.QuantizedCache(model.config, fmt, max_cache_len=1024)
    model.set_attn_implementation(hf.register())
    with torch.no_grad():
        model(**inputs, past_key_values=cache, use_cache=True)
    bf16 = 2 * 2 * 2 * 4 * 1024 * 128 * 2  # layers × K/V × batch × kv heads × tokens × D × 2 B
    assert cache.memory_bytes() <= fraction * bf16, cache.memory_bytes() / bf16
