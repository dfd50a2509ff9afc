#!/usr/bin/env python3
"""The README's numbers table and the per-row verdicts of docs/bench/<date>-<device>-side-by-side.md, from one
device call: the bench's full run (run 1), the bench again after the peers (run 2), and the peers' CSVs
(../shared/anchors: anchors.csv, xqa.csv).

    python3 docs/bench/tables.py RUN1.json RUN2.json ANCHORS.csv XQA.csv readme   # the README table
    python3 docs/bench/tables.py RUN1.json RUN2.json ANCHORS.csv XQA.csv rows     # every row with a peer

A row ties its best peer when the gap is within max(0.5 point, the spread between the two bench runs);
fp8 per head is compared with the per-tensor fp8 peers by time (% credits its scale bytes); int8 with the
best 8-bit peer (fp8 or Triton's int8)."""
import csv, json, sys
from collections import defaultdict
r1, r2 = (json.load(open(p)) for p in sys.argv[1:3])
def rows(d):
    return {(r["grid"], r["batch"], r["ctx"], r["format"]): r for r in d["rows"] if r.get("variant", "") in ("", None) and r["grid"] in "ABCD"}
a, b = rows(r1), rows(r2)
peers = defaultdict(dict)
for path in sys.argv[3:5]:
    for r in csv.DictReader(open(path)):
        if r["grid"] not in "ABCD" or not r["pct_copy"]:
            continue
        f = {"int4": "int4-g32"}.get(r["fmt"], r["fmt"])
        k = (r["grid"], int(r["B"]), int(r["ctx"]), f)
        us = float(r.get("time_us") or r.get("us"))
        p = float(r["pct_copy"])
        if r["impl"] not in peers[k] or p > peers[k][r["impl"]][0]:
            peers[k][r["impl"]] = (p, us)
def best(k, fmts):
    c = [(v[0], f"{impl}{'' if f == k[3] else ' ' + f}", v[1]) for f in fmts for impl, v in peers.get(k[:3] + (f,), {}).items()]
    return max(c) if c else None
order = sorted({k[:3] for k in a}, key=lambda k: ("ABCD".index(k[0]), -k[1] if k[0] == "B" else k[1], k[2]))
mode = sys.argv[5] if len(sys.argv) > 5 else "readme"
if mode == "readme":
    print("| grid | B | ctx | bf16 µs | bf16 % | best peer, 16-bit | int8 % | fp8/head % | fp8 % | best peer, 8-bit | int4-g32 % | Triton int4 % |")
    print("|---|---:|---:|---:|---:|---|---:|---:|---:|---|---:|---:|")
    for k in order:
        g = lambda f: a.get(k + (f,))
        pb = best(k + ("bf16",), ["bf16"]); p8 = best(k + ("fp8",), ["fp8"]); p4 = best(k + ("int4-g32",), ["int4-g32"])
        cell = lambda p: f"{p[1]} {p[0]:.1f}" if p else ""
        pct = lambda f: f"{g(f)['pct_roofline']:.1f}" if g(f) else ""
        print(f"| {k[0]} | {k[1]} | {k[2]} | {g('bf16')['median_us']:.1f} | **{pct('bf16')}** | {cell(pb)} | {pct('int8')} | {pct('fp8-per-head')} | {pct('fp8')} | {cell(p8)} | {pct('int4-g32')} | {p4[0]:.1f} |" if p4 else
              f"| {k[0]} | {k[1]} | {k[2]} | {g('bf16')['median_us']:.1f} | **{pct('bf16')}** | {cell(pb)} | {pct('int8')} | {pct('fp8-per-head')} | {pct('fp8')} | {cell(p8)} | {pct('int4-g32')} |  |")
else:
    # Every (row, format) with a peer: both runs, the spread, the best peer, the verdict (tie: within max(0.5, spread)).
    print("| row | format | run 1 % | run 2 % | best peer % | gap | tie band | verdict |")
    print("|---|---|---:|---:|---|---:|---:|---|")
    counts = defaultdict(int)
    for f, peer_fmts in (("bf16", ["bf16"]), ("fp8", ["fp8"]), ("fp8-per-head", ["fp8"]), ("int8", ["fp8", "int8"]), ("int4-g32", ["int4-g32"])):
        for k in order:
            x, y = a.get(k + (f,)), b.get(k + (f,))
            p = best(k + (f,), peer_fmts)
            if not x or not p:
                continue
            ours = max(x["pct_roofline"], y["pct_roofline"]) if y else x["pct_roofline"]
            spread = abs(x["pct_roofline"] - y["pct_roofline"]) if y else 0.0
            band = max(0.5, spread)
            if f == "fp8-per-head":
                # by time against per-tensor fp8 peers (% credits the scale bytes)
                ours_us = min(x["median_us"], y["median_us"]) if y else x["median_us"]
                gap = 100 * (p[2] / ours_us - 1)
                verdict = "lead" if gap >= 0 else ("tie" if -gap <= band else "behind")
                counts[verdict] += 1
                print(f"| {k[0]} ({k[1]}, {k[2]}) | {f} (by time) | {x['median_us']:.1f} µs | {y['median_us']:.1f} µs | {p[1]} {p[2]:.1f} µs | {gap:+.1f} % | {band:.1f} | {verdict} |")
                continue
            gap = ours - p[0]
            verdict = "lead" if gap >= 0 else ("tie" if -gap <= band else "behind")
            counts[verdict] += 1
            print(f"| {k[0]} ({k[1]}, {k[2]}) | {f} | {x['pct_roofline']:.1f} | {y['pct_roofline'] if y else float('nan'):.1f} | {p[1]} {p[0]:.1f} | {gap:+.1f} | {band:.1f} | {verdict} |")
    print()
    print("verdicts:", dict(counts))
