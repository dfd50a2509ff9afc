#!/usr/bin/env python3
"""sgl-flash-mla 1.0.0 (FlashMLA's SM90 dense decode, its legacy ops) on grid F, q_len 1 (QLEN=2: q_len 2, causal among the new tokens): a bf16 latent
cache in 64-token pages (checked against a float32 reference where small, at q_len 1), and FlashMLA's dense fp8 (e4m3 Q
and K, 576 bytes a row, per-tensor descales; timed only). Timing: `../shared/anchors/anchors.py`'s `bench`
(rotated buffers), copied beside this file. Usage: FMTS=bf16,fp8 [ONLY=H,B,ctx;...] OUT=dir python3 sgl_flash_mla.py, with the
wheel (`pip download sgl-flash-mla==1.0.0`, abi3; it loads beside torch 2.11 though it asks for 2.14) on
PYTHONPATH. docs/benchmark.md, "Grid F"."""
import os, sys, math, csv
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import torch
import anchors as A
import flash_mla

PAGE = 64
ROWS = [(H, B, ctx) for H in (16, 128) for B in (1, 32, 128) for ctx in (4096, 32768)]
# ONLY="H,B,ctx;H,B,ctx": those rows alone.
if os.environ.get("ONLY"):
    ROWS = [tuple(int(x) for x in r.split(",")) for r in os.environ["ONLY"].split(";")]
QLEN = int(os.environ.get("QLEN", "1"))


def main():
    OUT = os.environ.get("OUT", "/tmp")
    _, gbps, _, _ = A.copy_roofline()
    print(f"copy roofline {gbps:.0f} GB/s", flush=True)
    w = csv.DictWriter(open(os.path.join(OUT, "sgl.csv"), "w", newline=""), fieldnames=["impl", "fmt", "H", "B", "ctx", "q_len", "us", "pct_copy", "tflops", "rel_err", "note"])
    w.writeheader()
    gen = torch.Generator(device="cuda").manual_seed(1)
    for fmt in os.environ.get("FMTS", "bf16,fp8").split(","):
        for H, B, ctx in ROWS:
            row = dict(impl="sgl-flash-mla", fmt=fmt, H=H, B=B, ctx=ctx, q_len=QLEN)
            try:
                npg = ctx // PAGE
                row_bytes = 1152 if fmt == "bf16" else 576
                kvb = B * ctx * row_bytes
                nb = A.n_rot(kvb)
                if fmt == "bf16":
                    caches = [torch.randn(B * npg, PAGE, 1, 576, device="cuda", dtype=torch.bfloat16, generator=gen) for _ in range(nb)]
                else:
                    # FlashMLA's dense fp8: e4m3 Q and K (576 bytes a row), per-tensor descales.
                    caches = [torch.randn(B * npg, PAGE, 1, 576, device="cuda", generator=gen).to(torch.float8_e4m3fn) for _ in range(nb)]
                q = torch.randn(B, QLEN, H, 576, device="cuda", dtype=torch.bfloat16, generator=gen) * 0.05
                if fmt != "bf16":
                    q = (q * 20).to(torch.float8_e4m3fn)
                bt = torch.arange(B * npg, dtype=torch.int32, device="cuda").view(B, npg)
                lens = torch.full((B,), ctx, dtype=torch.int32, device="cuda")
                sm = 1.0 / math.sqrt(192)
                metas = [flash_mla.get_mla_metadata()[0] for _ in range(nb)]
                fp8 = fmt != "bf16"
                extra = {}
                if fp8:
                    for m in metas:
                        m.tile_scheduler_metadata, m.num_splits = flash_mla.get_mla_decoding_metadata(lens, QLEN * H, 1, H, True, None, True)
                    one = torch.ones(1, dtype=torch.float32, device="cuda")
                    extra = dict(descale_q=one / 20, descale_k=one)
                run = lambda i: flash_mla.flash_mla_with_kvcache(q, caches[i], bt, lens, 512, metas[i], None, softmax_scale=sm, causal=True, is_fp8_kvcache=fp8, use_legacy=True, **extra)
                o, _ = run(0)
                torch.cuda.synchronize()
                if B * ctx <= 32 * 4096 and fmt == "bf16" and QLEN == 1:
                    k = caches[0].float().view(B, ctx, 576)
                    s = torch.einsum("bhd,btd->bht", q.float().view(B, H, 576), k) * sm
                    ref = torch.einsum("bht,btd->bhd", torch.softmax(s, -1), k[..., :512])
                    row["rel_err"] = f"{((o.float().view(B, H, 512) - ref).norm() / ref.norm()).item():.2e}"
                elif not torch.isfinite(o).all():
                    row["note"] = "non-finite output"
                us = A.bench([lambda i=i: run(i) for i in range(nb)], 40, 5, sleep_per_rep=300e-6)
                by = kvb + B * QLEN * H * (576 + 512) * 2
                row.update(us=f"{us:.1f}", pct_copy=f"{100 * by / us / 1e3 / gbps:.1f}", tflops=f"{B * QLEN * H * ctx * 2 * (576 + 512) / us / 1e6:.0f}")
                del caches
            except Exception as e:
                row["note"] = f"{type(e).__name__}: {str(e)[:240]}"
            torch.cuda.empty_cache()
            w.writerow(row)
            print(row, flush=True)


if __name__ == "__main__":
    main()
