#!/usr/bin/env python3
"""docs/results/reversible.svg from reversible.csv (scripts/reversible_bench.sh): activation memory (lipt's arena
high-water mark) and step time against store-all, per depth, for each model and memory mode. Stdlib only.
Usage: reversible_plot.py reversible.csv out.svg"""
import csv
import math
import sys

rows = list(csv.DictReader(open(sys.argv[1])))
series = {}
for r in rows:
    series.setdefault((r["model"], r["mode"]), []).append(
        (int(r["layers"]), float(r["arena_mb"]), float(r["ms_per_step"])))
store = {(r["model"], int(r["layers"])): float(r["ms_per_step"]) for r in rows if r["mode"] == "store"}
colors = {"store": "#444444", "recompute": "#1f77b4", "invert": "#d62728"}
dash = {"fixed-point": "", "coupling": "6,4"}
W, H, M = 460, 320, 60


def panel(x0, title, ylabel, pick, logy):
    pts = [(L, pick(m, L, a, t)) for (m, mode), s in series.items() for (L, a, t) in s]
    pts = [p for p in pts if p[1] and p[1] > 0]
    Ls = [p[0] for p in pts] or [1]
    ys = [p[1] for p in pts] or [1]
    lx0, lx1 = math.log2(min(Ls)), math.log2(max(Ls)) or 1
    y0, y1 = (math.log10(min(ys)), math.log10(max(ys))) if logy else (0, max(ys) * 1.1)
    if y1 <= y0:
        y1 = y0 + 1
    fx = lambda L: x0 + M + (math.log2(L) - lx0) / max(lx1 - lx0, 1e-9) * (W - 1.5 * M)
    fy = lambda v: H - M + 10 - ((math.log10(v) if logy else v) - y0) / (y1 - y0) * (H - 1.5 * M)
    out = [f'<text x="{x0 + W / 2}" y="20" text-anchor="middle" font-size="14">{title}</text>',
           f'<line x1="{x0 + M}" y1="{H - M + 10}" x2="{x0 + W - M / 2}" y2="{H - M + 10}" stroke="black"/>',
           f'<line x1="{x0 + M}" y1="{H - M + 10}" x2="{x0 + M}" y2="{M / 2}" stroke="black"/>',
           f'<text x="{x0 + W / 2}" y="{H - 12}" text-anchor="middle" font-size="12">layers</text>',
           f'<text x="{x0 + 14}" y="{H / 2}" font-size="12" transform="rotate(-90 {x0 + 14} {H / 2})" '
           f'text-anchor="middle">{ylabel}</text>']
    for L in sorted(set(Ls)):
        out.append(f'<text x="{fx(L):.1f}" y="{H - M + 26}" text-anchor="middle" font-size="11">{L}</text>')
    ticks = [10 ** k for k in range(math.floor(y0), math.ceil(y1) + 1)] if logy else \
        [y1 / 1.1 * k / 4 for k in range(5)]
    for v in ticks:
        if v <= 0 and logy:
            continue
        y = fy(v)
        if M / 2 - 1 <= y <= H - M + 11:
            out.append(f'<text x="{x0 + M - 6}" y="{y + 4:.1f}" text-anchor="end" font-size="11">{v:.3g}</text>')
    for (m, mode), s in sorted(series.items()):
        p = [(L, pick(m, L, a, t)) for (L, a, t) in sorted(s)]
        p = [q for q in p if q[1] and q[1] > 0]
        if not p:
            continue
        d = " ".join(f"{fx(L):.1f},{fy(v):.1f}" for L, v in p)
        out.append(f'<polyline fill="none" stroke="{colors.get(mode, "green")}" stroke-width="2" '
                   f'stroke-dasharray="{dash.get(m, "")}" points="{d}"/>')
    return out


body = panel(0, "activation memory (arena high-water mark)", "MB", lambda m, L, a, t: a, True)
body += panel(W, "step time / store-all's", "ratio", lambda m, L, a, t: t / store.get((m, L), float("nan"))
              if store.get((m, L)) else None, False)
legend = []
y = H + 5
for i, ((m, mode), _) in enumerate(sorted(series.items())):
    x = 20 + (i % 3) * 300
    yy = y + (i // 3) * 18
    legend.append(f'<line x1="{x}" y1="{yy}" x2="{x + 30}" y2="{yy}" stroke="{colors.get(mode, "green")}" '
                  f'stroke-width="2" stroke-dasharray="{dash.get(m, "")}"/>')
    legend.append(f'<text x="{x + 36}" y="{yy + 4}" font-size="12">{m}, {mode}</text>')
svg = [f'<svg xmlns="http://www.w3.org/2000/svg" width="{2 * W}" height="{H + 50}" font-family="sans-serif">',
       f'<rect width="{2 * W}" height="{H + 50}" fill="white"/>'] + body + legend + ["</svg>"]
open(sys.argv[2], "w").write("\n".join(svg) + "\n")
