"""`python -m decode_attn.bench`: decode-attn against torch SDPA, and
against FlashInfer and FlashAttention-3 where they import, in one process,
printing one table.

The Rust bench's method (docs/benchmark.md): every library reads the same
bytes (bf16 K/V, head-major `[B, Hkv, L, D]`, which SDPA takes as it is
and decode-attn reads through layout "hnd"; the "nhd" column is
decode-attn on a token-major copy, its default layout); as many sets of buffers as
make at least 4x the L2 cache, rotated launch by launch so no launch finds
its cache in L2; the GPU kept busy (a sleep kernel) while the timed
launches are queued, so launch overhead is hidden as in a serving loop;
CUDA events around each launch; the median of `--iters`; and the copy
roofline (a device-to-device copy, bytes read + written) from the same run.
"""

from __future__ import annotations

import argparse
import statistics

import torch
import torch.nn.functional as F

import decode_attn as da

# (batch, context, q heads, kv heads, head_dim): rows of docs/benchmark.md's
# grids at q_len 1.
ROWS = [
    (1, 32768, 32, 8, 128),
    (1, 131072, 32, 8, 128),
    (32, 8192, 32, 8, 128),
    (128, 2048, 32, 8, 128),
    (64, 4096, 8, 1, 128),
    (8, 1024, 32, 32, 128),
    (128, 2048, 32, 32, 128),
    (16, 8192, 16, 8, 256),
]


# Rounds of each row's timings (the libraries alternating).
ROUNDS = 3


def _sets(bytes_per_set: int, l2: int, free: int) -> int:
    want = max(1, -(-4 * l2 // bytes_per_set))
    return max(1, min(want, int(free * 0.5) // max(bytes_per_set, 1)))


def time_launches(launch, n_sets: int, iters: int, warmup: int = 5) -> float:
    """Median µs of one launch (events around each), the GPU busy while queuing."""
    for i in range(warmup):
        launch(i % n_sets)
    torch.cuda.synchronize()
    events = [torch.cuda.Event(enable_timing=True) for _ in range(iters + 1)]
    torch.cuda._sleep(int(2e7))  # ~10 ms: the queue fills before the first launch runs
    for i in range(iters):
        events[i].record()
        launch(i % n_sets)
    events[iters].record()
    torch.cuda.synchronize()
    return statistics.median(events[i].elapsed_time(events[i + 1]) * 1e3 for i in range(iters))


def copy_roofline(iters: int) -> float:
    """GB/s of a 1 GiB device-to-device copy (bytes read + written)."""
    n = 1 << 30
    src = torch.empty(n, dtype=torch.uint8, device="cuda")
    dst = torch.empty_like(src)
    us = time_launches(lambda i: dst.copy_(src), 1, iters)
    del src, dst
    return 2 * n / (us * 1e-6) / 1e9


def _flashinfer():
    try:
        import flashinfer  # noqa: F401
    except ImportError:
        return None

    def make(q, k, v, b, ctx, hq, hkv, d):
        # One page per sequence ("HND" pages of ctx tokens): the same bytes.
        ws = torch.empty(128 << 20, dtype=torch.uint8, device="cuda")
        w = flashinfer.BatchDecodeWithPagedKVCacheWrapper(ws, kv_layout="HND")
        indptr = torch.arange(b + 1, dtype=torch.int32, device="cuda")
        indices = torch.arange(b, dtype=torch.int32, device="cuda")
        last = torch.full((b,), ctx, dtype=torch.int32, device="cuda")
        w.plan(indptr, indices, last, hq, hkv, d, ctx, q_data_type=torch.bfloat16, kv_data_type=torch.bfloat16)
        qf = q.reshape(b, hq, d)
        return lambda: w.run(qf, (k, v))

    return make


def _fa3():
    try:
        from flash_attn_interface import flash_attn_with_kvcache
    except ImportError:
        return None

    def make(q, k, v, b, ctx, hq, hkv, d):
        # FA3 reads token-major caches: a transposed copy of the same bytes.
        kt, vt = k.transpose(1, 2).contiguous(), v.transpose(1, 2).contiguous()
        lens = torch.full((b,), ctx, dtype=torch.int32, device="cuda")
        return lambda: flash_attn_with_kvcache(q, kt, vt, cache_seqlens=lens)

    return make


def bench(rows, iters: int) -> list[dict]:
    props = torch.cuda.get_device_properties(0)
    l2 = props.L2_cache_size
    attn = da.DecodeAttention(0)
    roof = copy_roofline(iters)
    others = {name: make() for name, make in (("FlashInfer", _flashinfer), ("FA3", _fa3))}
    others = {k: v for k, v in others.items() if v is not None}
    results = []
    for b, ctx, hq, hkv, d in rows:
        torch.cuda.empty_cache()
        shape = da.DecodeShape(batch=b, num_q_heads=hq, num_kv_heads=hkv, head_dim=d, max_seq_len=ctx, layout="hnd")
        plan = attn.plan(shape, [ctx] * b)
        ws = attn.workspace(plan)
        kv_bytes = 2 * b * hkv * ctx * d * 2
        qo_bytes = 2 * b * hq * d * 2
        free, _ = torch.cuda.mem_get_info()
        n = _sets(kv_bytes + qo_bytes, l2, free // (2 + len(others)))
        sets = []
        for _ in range(n):
            k = torch.randn(b, hkv, ctx, d, dtype=torch.bfloat16, device="cuda")
            v = torch.randn_like(k)
            q = torch.randn(b, 1, hq, d, dtype=torch.bfloat16, device="cuda")
            sets.append((q, k, v, torch.empty_like(q)))
        nhd_shape = da.DecodeShape(batch=b, num_q_heads=hq, num_kv_heads=hkv, head_dim=d, max_seq_len=ctx)
        nhd_plan = attn.plan(nhd_shape, [ctx] * b)
        nhd_sets = [(q, k.transpose(1, 2).contiguous(), v.transpose(1, 2).contiguous(), o) for q, k, v, o in sets]

        def ours_nhd(i):
            q, k, v, o = nhd_sets[i]
            attn.run(nhd_plan, q, k, v, o, ws)

        def ours(i):
            q, k, v, o = sets[i]
            attn.run(plan, q, k, v, o, ws)

        def sdpa(i):
            q, k, v, _ = sets[i]
            F.scaled_dot_product_attention(q.transpose(1, 2), k, v, enable_gqa=hq != hkv)

        row = {"batch": b, "ctx": ctx, "heads": f"{hq}/{hkv}", "d": d, "MB": (kv_bytes + qo_bytes) / 1e6, "sets": n}
        ws = attn.workspace(nhd_plan) if nhd_plan.workspace_bytes > ws.numel() else ws
        # The three alternate, round by round, in rotating order: an
        # effect of the order (clocks, the allocator, the L2's dirty lines)
        # lands on each of them alike. The median of the rounds' medians.
        fns = {"decode-attn": ours, "decode-attn nhd": ours_nhd, "SDPA": sdpa}
        rounds = {name: [] for name in fns}
        names = list(fns)
        for r in range(ROUNDS):
            for name in names[r % 3 :] + names[: r % 3]:
                rounds[name].append(time_launches(fns[name], n, iters))
        for name, times in rounds.items():
            row[name] = statistics.median(times)
            row[f"{name} rounds"] = times
        # Checked, not only timed: decode-attn's output against SDPA's on set 0.
        q, k, v, o = sets[0]
        ours(0)
        ref = F.scaled_dot_product_attention(q.transpose(1, 2).float(), k.float(), v.float(), enable_gqa=hq != hkv).transpose(1, 2)
        row["rel_l2_vs_sdpa_fp32"] = ((o.float() - ref).norm() / ref.norm()).item()
        del nhd_sets
        for name, make in others.items():
            fns = [make(q, k, v, b, ctx, hq, hkv, d) for q, k, v, _ in sets[: max(1, min(n, 2))]]
            row[name] = time_launches(lambda i: fns[i % len(fns)](), len(fns), iters)
        results.append(row)
        del sets, ws
    for r in results:
        r["roofline_GBps"] = roof
    return results


def table(results, libs) -> str:
    roof = results[0]["roofline_GBps"]
    head = "| B | ctx | Hq/Hkv | D | MB | " + " | ".join(f"{lib} µs | {lib} %" for lib in libs) + " |"
    lines = [f"copy roofline: {roof:.0f} GB/s; % = bytes moved / time / roofline", head, "|" + "---|" * (5 + 2 * len(libs))]
    for r in results:
        cells = [str(r["batch"]), str(r["ctx"]), r["heads"], str(r["d"]), f"{r['MB']:.0f}"]
        for lib in libs:
            us = r.get(lib)
            cells += ["–", "–"] if us is None else [f"{us:.1f}", f"{r['MB'] * 1e6 / (us * 1e-6) / 1e9 / roof * 100:.1f}%"]
        lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines)


def main(argv=None):
    ap = argparse.ArgumentParser(prog="python -m decode_attn.bench", description=__doc__.split("\n\n")[0])
    ap.add_argument("--iters", type=int, default=60, help="timed launches per row (median)")
    ap.add_argument("--rows", type=int, default=len(ROWS), help="the first N rows only")
    ap.add_argument("--json", help="also write the results here")
    ap.add_argument("--hf", action="store_true", help="transformers generation instead (decode_attn.bench_hf): tokens/s, memory, host time per call")
    ap.add_argument("--new", type=int, default=64, help="--hf: new tokens per generation")
    ap.add_argument("--repeats", type=int, default=3, help="--hf: generations per implementation and row (median)")
    ap.add_argument("--layers", type=int, default=8, help="--hf: decoder layers of the Llama-3-8B-shaped model")
    ap.add_argument("--hf-rows", default="all", help="--hf: 'all', or comma-separated indices of bench_hf.ROWS")
    ap.add_argument("--quant-rows", default="all", help="--hf: 'all', 'none', or comma-separated indices of bench_hf.QUANT_ROWS")
    ap.add_argument("--no-extras", action="store_true", help="--hf: skip the host time per call and the replayed-step count")
    args = ap.parse_args(argv)
    if args.hf:
        return main_hf(args)
    results = bench(ROWS[: args.rows], args.iters)
    libs = ["decode-attn", "decode-attn nhd", "SDPA"] + [lib for lib in ("FlashInfer", "FA3") if lib in results[0]]
    name = torch.cuda.get_device_name(0)
    print(f"{name}, torch {torch.__version__}, decode-attn kernels from {da.DecodeAttention(0).module_source}; bf16 caches, q_len 1")
    print(table(results, libs))
    worst = max(r["rel_l2_vs_sdpa_fp32"] for r in results)
    print(f"decode-attn vs fp32 SDPA on the same inputs: worst rel L2 {worst:.2e}")
    if args.json:
        import json

        with open(args.json, "w") as f:
            json.dump({"device": name, "torch": torch.__version__, "rows": results}, f, indent=1)


def main_hf(args):
    from . import bench_hf

    def pick(spec, rows):
        if spec == "all":
            return rows
        if spec == "none":
            return []
        return [rows[int(i)] for i in spec.split(",")]

    name = torch.cuda.get_device_name(0)
    print(f"{name}, torch {torch.__version__}; Llama-3-8B-shaped, {args.layers} layers, {args.new} new tokens, median of {args.repeats}", flush=True)
    results = bench_hf.run(pick(args.hf_rows, bench_hf.ROWS), pick(args.quant_rows, bench_hf.QUANT_ROWS), args.new, args.repeats, args.layers, not args.no_extras)
    print(bench_hf.tables(results))
    if args.json:
        import json

        with open(args.json, "w") as f:
            json.dump({"device": name, "torch": torch.__version__, "layers": args.layers, "new": args.new, **results}, f, indent=1)


if __name__ == "__main__":
    main()
