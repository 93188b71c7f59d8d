#!/usr/bin/env python3
"""Training curves of the ablation candidates (and any other runs) as one SVG (stdlib only).

  ablation_plot.py OUT.svg NAME=RUN_DIR [NAME=RUN_DIR ...] [--title TEXT]

Each run's metrics.jsonl gives the training BPC every --log-every steps (smoothed over 5 points) and the evaluations
(dots, labelled with the validation BPC).
"""
import json
import sys

COLORS = ["#1f77b4", "#d62728", "#2ca02c", "#9467bd", "#ff7f0e", "#8c564b", "#e377c2", "#7f7f7f", "#bcbd22",
          "#17becf", "#000000"]


def load(run_dir):
    train, evals = [], []
    with open(f"{run_dir}/metrics.jsonl") as f:
        for line in f:
            try:
                r = json.loads(line)
            except ValueError:
                continue
            if "eval" in r and "bpc" in r:
                evals.append((r["step"], r["bpc"]))
            elif "bpc" in r and "step" in r:
                train.append((r["step"], r["bpc"]))
    sm = []
    for i in range(len(train)):
        w = train[max(0, i - 2):i + 3]
        sm.append((train[i][0], sum(b for _, b in w) / len(w)))
    return sm, evals


def main():
    args = [a for a in sys.argv[1:] if not a.startswith("--title")]
    title = "Invertible-model ablation: training BPC (smoothed) and validation BPC (dots)"
    if "--title" in sys.argv:
        title = sys.argv[sys.argv.index("--title") + 1]
        args = [a for a in args if a != title]
    if len(args) < 2:
        sys.exit(__doc__)
    out, runs = args[0], [a.split("=", 1) for a in args[1:]]
    data = [(n, *load(d)) for n, d in runs]
    W, Hh, ml, mr, mt, mb = 900, 520, 60, 230, 40, 50
    xs = [s for _, tr, ev in data for s, _ in tr + ev]
    x1 = max(xs) if xs else 1
    y0, y1 = 1.8, 3.6
    X = lambda s: ml + (W - ml - mr) * s / x1
    Y = lambda b: mt + (Hh - mt - mb) * (y1 - min(max(b, y0), y1)) / (y1 - y0)
    o = [f'<svg xmlns="http://www.w3.org/2000/svg" width="{W}" height="{Hh}" font-family="sans-serif" font-size="12">',
         f'<rect width="{W}" height="{Hh}" fill="white"/>',
         f'<text x="{W / 2}" y="20" text-anchor="middle" font-size="14">{title}</text>']
    for k in range(0, 10):
        b = y0 + k * 0.2
        if b > y1 + 1e-9:
            break
        o.append(f'<line x1="{ml}" x2="{W - mr}" y1="{Y(b):.1f}" y2="{Y(b):.1f}" stroke="#ddd"/>')
        o.append(f'<text x="{ml - 6}" y="{Y(b) + 4:.1f}" text-anchor="end">{b:.1f}</text>')
    step = 100 if x1 <= 1000 else 250
    for s in range(0, int(x1) + 1, step):
        o.append(f'<text x="{X(s):.1f}" y="{Hh - mb + 16}" text-anchor="middle">{s}</text>')
    o.append(f'<text x="{(ml + W - mr) / 2}" y="{Hh - 12}" text-anchor="middle">step</text>')
    o.append(f'<text x="16" y="{Hh / 2}" transform="rotate(-90 16 {Hh / 2})" text-anchor="middle">bits per character</text>')
    o.append(f'<rect x="{ml}" y="{mt}" width="{W - ml - mr}" height="{Hh - mt - mb}" fill="none" stroke="#333"/>')
    for i, (name, tr, ev) in enumerate(data):
        col = COLORS[i % len(COLORS)]
        if tr:
            pts = " ".join(f"{X(s):.1f},{Y(b):.1f}" for s, b in tr)
            o.append(f'<polyline fill="none" stroke="{col}" stroke-width="1.5" points="{pts}"/>')
        for s, b in ev:
            o.append(f'<circle cx="{X(s):.1f}" cy="{Y(b):.1f}" r="4" fill="{col}"/>')
        last = f" (valid {ev[-1][1]:.3f})" if ev else ""
        ly = mt + 16 + 18 * i
        o.append(f'<line x1="{W - mr + 10}" x2="{W - mr + 30}" y1="{ly - 4}" y2="{ly - 4}" stroke="{col}" stroke-width="3"/>')
        o.append(f'<text x="{W - mr + 36}" y="{ly}">{name}{last}</text>')
    o.append("</svg>")
    with open(out, "w") as f:
        f.write("\n".join(o) + "\n")


if __name__ == "__main__":
    main()
