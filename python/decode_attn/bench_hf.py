"""`python -m decode_attn.bench --hf`: transformers generation with
`attn_implementation="decode_attn"` against SDPA, on a Llama-3-8B-shaped
model (32/8 heads, head_dim 128, hidden 4096, intermediate 14336; 8
layers, random weights, bf16).

- tokens/s of decoding: `generate` of `--new` tokens minus `generate` of
  one (the prefill), `batch × (new − 1)` tokens over the difference; the
  median of `--repeats`, the implementations alternating, each after a
  warm-up generation (which also compiles the static-cache rows).
- memory: `torch.cuda.max_memory_allocated` during the generation.
- host time of one attention call: 200 calls of the attention function
  issued behind a sleeping GPU on one decode step's tensors, µs per call,
  against transformers' SDPA attention function on the same tensors.
- under `torch.compile` with a static cache, the decode_attn op's calls in
  Python while 32 steps replay (0 once the CUDA graphs are recorded).

Static caches (`StaticCache`, or a static `QuantizedCache`) are kept
across a row's generations and reset, as a server keeps one; `generate`
compiles their decode step (mode "reduce-overhead": CUDA graphs).
"""

from __future__ import annotations

import statistics
import time

import torch

from . import hf, ops
from .cache import QuantizedCache

LAYERS = 8


def llama8b_config(layers: int = LAYERS):
    import transformers

    return transformers.LlamaConfig(
        hidden_size=4096, num_attention_heads=32, num_key_value_heads=8, head_dim=128, intermediate_size=14336,
        num_hidden_layers=layers, vocab_size=128256, max_position_embeddings=131072, rope_theta=500000.0,
    )


def build(layers: int = LAYERS):
    import transformers

    torch.manual_seed(0)
    with torch.device("cuda"):
        model = transformers.AutoModelForCausalLM.from_config(llama8b_config(layers), dtype=torch.bfloat16)
    return model.eval()


def _prompt(batch: int, ctx: int):
    g = torch.Generator().manual_seed(1)
    return {"input_ids": torch.randint(3, 128000, (batch, ctx), generator=g).cuda(), "attention_mask": torch.ones(batch, ctx, dtype=torch.long).cuda()}


_caches: dict = {}


def _kept_cache(model, kv_format: str | None, static_len: int | None):
    """One cache per format and size, reset for every generation: a static
    cache made anew each time (as `cache_implementation="static"` does)
    would have the compiled step record its CUDA graphs again."""
    import transformers

    key = (kv_format, static_len)
    cache = _caches.get(key)
    if cache is None:
        _caches.clear()
        if kv_format is None:
            cache = transformers.StaticCache(config=model.config, max_cache_len=static_len)
        else:
            cache = QuantizedCache(model.config, kv_format, max_cache_len=static_len)
        _caches[key] = cache
    cache.reset()
    return cache


@torch.no_grad()
def _generate_s(model, impl: str, inputs, new: int, cache: str, kv_format: str | None) -> tuple[float, int]:
    """Seconds of one `generate` of `new` tokens, and its peak memory."""
    model.set_attn_implementation(impl)
    kwargs = dict(max_new_tokens=new, min_new_tokens=new, do_sample=False, pad_token_id=0)
    b, ctx = inputs["input_ids"].shape
    if kv_format is not None or cache == "static":
        kwargs["past_key_values"] = _kept_cache(model, kv_format, ctx + new if cache == "static" else None)
    if cache != "static":
        kwargs["disable_compile"] = True
    torch.cuda.synchronize()
    torch.cuda.reset_peak_memory_stats()
    t = time.perf_counter()
    model.generate(**inputs, **kwargs)
    torch.cuda.synchronize()
    return time.perf_counter() - t, torch.cuda.max_memory_allocated()


def cache_bytes(kv_format: str | None) -> int:
    """Bytes the kept cache's K, V and scales occupy (`_kept_cache`)."""
    for (fmt, _), cache in _caches.items():
        if fmt == kv_format:
            if fmt is not None:
                return cache.memory_bytes()
            return sum(t.numel() * t.element_size() for layer in cache.layers for t in (layer.keys, layer.values) if t is not None)
    return 0


def tokens_per_s(model, impl: str, inputs, new: int, cache: str, kv_format: str | None, repeats: int) -> tuple[list[float], int]:
    b = inputs["input_ids"].shape[0]
    out, peak = [], 0
    for _ in range(repeats):
        full, mem = _generate_s(model, impl, inputs, new, cache, kv_format)
        first, _ = _generate_s(model, impl, inputs, 1, cache, kv_format)
        out.append(b * (new - 1) / max(full - first, 1e-9))
        peak = max(peak, mem)
    return out, peak


def host_us_per_call(model, batch: int, ctx: int, calls: int = 200) -> dict:
    """µs of host time per attention call: `calls` calls issued behind a
    sleeping GPU (so none waits on the device), over their count; the
    median of 5 rounds. One decode step's tensors (a 4096-token cache)."""
    from transformers.integrations.sdpa_attention import sdpa_attention_forward

    attn_module = model.model.layers[0].self_attn
    q = torch.randn(batch, 32, 1, 128, dtype=torch.bfloat16, device="cuda")
    k = torch.randn(batch, 8, ctx, 128, dtype=torch.bfloat16, device="cuda")
    v = torch.randn_like(k)
    lens = torch.full((batch,), ctx, dtype=torch.int32, device="cuda")
    ranges = hf.KeyRanges(lens, None, 1, ctx, None, {})
    fns = {
        "decode_attn": lambda: hf.decode_attn_forward(attn_module, q, k, v, ranges, scaling=128**-0.5),
        "sdpa": lambda: sdpa_attention_forward(attn_module, q, k, v, None, scaling=128**-0.5),
    }
    out = {}
    for name, fn in fns.items():
        for _ in range(20):
            fn()
        torch.cuda.synchronize()
        samples = []
        for _ in range(5):
            torch.cuda._sleep(int(1e8))  # ~50 ms of a busy GPU
            t = time.perf_counter()
            for _ in range(calls):
                fn()
            samples.append((time.perf_counter() - t) / calls * 1e6)
            torch.cuda.synchronize()
        out[name] = statistics.median(samples)
    return out


@torch.no_grad()
def compiled_replay_calls(model, batch: int, ctx: int, new: int = 32) -> int:
    """Calls of the decode_attn op's Python during a compiled static-cache
    generation that replays recorded CUDA graphs: the same `StaticCache`
    as a first generation (which compiled and recorded them), reset."""
    import transformers

    count = [0]
    inner = ops.attention_step

    def counting(*args):
        count[0] += 1
        return inner(*args)

    inputs = _prompt(batch, ctx)
    model.set_attn_implementation(hf.register())
    cache = transformers.StaticCache(config=model.config, max_cache_len=ctx + new)
    kwargs = dict(max_new_tokens=new, min_new_tokens=new, do_sample=False, pad_token_id=0, past_key_values=cache)
    model.generate(**inputs, **kwargs)
    ops.attention_step = counting
    try:
        cache.reset()
        model.generate(**inputs, **kwargs)
    finally:
        ops.attention_step = inner
    return count[0]


ROWS = [
    # (batch, context, cache, kv_format)
    (1, 4096, "dynamic", None),
    (16, 4096, "dynamic", None),
    (64, 4096, "dynamic", None),
    (1, 32768, "dynamic", None),
    (16, 32768, "dynamic", None),
    (1, 4096, "static", None),
    (16, 4096, "static", None),
    (64, 4096, "static", None),
]
QUANT_ROWS = [(16, 8192, "static", fmt) for fmt in ("int8", "fp8", "fp8_per_head", "int4_g32")] + [(16, 8192, "static", None)]


def run(rows, quant_rows, new: int, repeats: int, layers: int, extras: bool = True) -> dict:
    hf.register()
    model = build(layers)
    results = {"tokens_per_s": [], "quantized": [], "host_us": [], "replay_calls": None}
    if extras:
        # First, on fresh compile caches: the op's Python in replayed steps.
        torch._dynamo.reset()
        results["replay_calls"] = compiled_replay_calls(model, 4, 1024)
        print(f"  decode_attn op calls in Python during 32 replayed compiled steps: {results['replay_calls']}", flush=True)
    for b, ctx, cache, _ in rows:
        # Each compiled row on fresh compile caches (a row's shapes would
        # otherwise pile up recompilations to dynamo's limit, past which
        # it runs the forward uncompiled).
        torch._dynamo.reset()
        inputs = _prompt(b, ctx)
        row = {"batch": b, "ctx": ctx, "cache": cache}
        # Warm-ups (the static rows compile here), then alternating repeats.
        for impl in ("sdpa", "decode_attn"):
            _generate_s(model, impl, inputs, new, cache, None)
        runs = {"sdpa": [], "decode_attn": []}
        for _ in range(repeats):
            for impl in ("sdpa", "decode_attn"):
                tps, peak = tokens_per_s(model, impl, inputs, new, cache, None, 1)
                runs[impl] += tps
                row[f"{impl}_peak_bytes"] = peak
        for impl, tps in runs.items():
            row[impl] = statistics.median(tps)
            row[f"{impl}_all"] = tps
        row["ratio"] = row["decode_attn"] / row["sdpa"]
        row["best_ratio"] = max(runs["decode_attn"]) / max(runs["sdpa"])
        results["tokens_per_s"].append(row)
        print(f"  tokens/s B={b} ctx={ctx} {cache}: sdpa {row['sdpa']:.1f}, decode_attn {row['decode_attn']:.1f} ({row['ratio']:.3f}x; best of each {row['best_ratio']:.3f}x; {[round(x) for x in runs['sdpa']]} {[round(x) for x in runs['decode_attn']]})", flush=True)
        del inputs
        torch.cuda.empty_cache()
    for b, ctx, cache, fmt in quant_rows:
        torch._dynamo.reset()
        inputs = _prompt(b, ctx)
        _generate_s(model, "decode_attn", inputs, new, cache, fmt)
        tps, peak = tokens_per_s(model, "decode_attn", inputs, new, cache, fmt, repeats)
        row = {"batch": b, "ctx": ctx, "cache": cache, "kv_format": fmt or "bf16", "decode_attn": statistics.median(tps), "best": max(tps), "all": tps, "peak_bytes": peak, "cache_bytes": cache_bytes(fmt)}
        results["quantized"].append(row)
        print(f"  quantized B={b} ctx={ctx} {cache} {fmt or 'bf16'}: {row['decode_attn']:.1f} tokens/s (best {row['best']:.1f}; {[round(x) for x in tps]}), peak {peak / 2**30:.2f} GiB, cache {row['cache_bytes'] / 2**30:.2f} GiB", flush=True)
        del inputs
        torch.cuda.empty_cache()
    for b, ctx in ((1, 4096), (16, 4096)) if extras else ():
        us = host_us_per_call(model, b, ctx)
        results["host_us"].append({"batch": b, "ctx": ctx, **us})
        print(f"  host µs per call B={b} ctx={ctx}: {us}", flush=True)
    return results


def tables(results) -> str:
    lines = ["| B | ctx | cache | SDPA tokens/s | decode_attn tokens/s | ratio |", "|---:|---:|---|---:|---:|---:|"]
    for r in results["tokens_per_s"]:
        lines.append(f"| {r['batch']} | {r['ctx']} | {r['cache']} | {r['sdpa']:.1f} | {r['decode_attn']:.1f} | {r['ratio']:.3f} |")
    lines += ["", "| B | ctx | cache | format | decode_attn tokens/s | peak GiB |", "|---:|---:|---|---|---:|---:|"]
    for r in results["quantized"]:
        lines.append(f"| {r['batch']} | {r['ctx']} | {r['cache']} | {r['kv_format']} | {r['decode_attn']:.1f} | {r['peak_bytes'] / 2**30:.2f} |")
    lines += ["", "| B | ctx | decode_attn µs/call | SDPA µs/call |", "|---:|---:|---:|---:|"]
    for r in results["host_us"]:
        lines.append(f"| {r['batch']} | {r['ctx']} | {r['decode_attn']:.1f} | {r['sdpa']:.1f} |")
    lines.append(f"\ndecode_attn op calls in Python during 32 replayed compiled steps: {results['replay_calls']}")
    return "\n".join(lines)
