#!/usr/bin/env python3
"""Markdown tables of a depth grid (lipt experiment depth) for docs/RESULTS.md.

    python3 scripts/depth_table.py [docs/results/depth/depth.csv]

Prints: validation / test BPC per variant and depth, parameters and training seconds, each variant's change from
1 layer, and each variant's gap to dp at the same depth (the paper's "gap shrinks with depth")."""
import csv
import sys

ORDER = ["dp", "l2", "l2-tied", "contractive", "contractive-l2"]
NAMES = {"contractive": "contractive (lipt's invertible model)", "contractive-l2": "contractive-l2 (the paper's)"}


def main(path):
    rows = list(csv.DictReader(open(path)))
    if not rows:
        sys.exit(f"{path}: no rows")
    cell = {(r["variant"], int(r["depth"])): r for r in rows}
    # the documented order first, then any other variant of the CSV (the grids' variants come from lipt's table)
    variants = [v for v in ORDER if any(k[0] == v for k in cell)]
    variants += [v for v in dict.fromkeys(r["variant"] for r in rows) if v not in variants]
    depths = sorted({k[1] for k in cell})
    print(f"Settings: `{rows[0]['settings']}`; validation / test BPC over the whole splits.\n")
    head = "| variant | " + " | ".join(f"{d} layer{'s' if d > 1 else ''}" for d in depths) + " |"
    print(head)
    print("|---|" + "---:|" * len(depths))

    def bpc(v, d):
        r = cell.get((v, d))
        if not r:
            return "—"
        if r["diverged"] == "1":
            return "diverged"
        return f"{float(r['valid_bpc']):.3f} / {float(r['test_bpc']):.3f}"

    for v in variants:
        print(f"| {NAMES.get(v, v)} | " + " | ".join(bpc(v, d) for d in depths) + " |")
    for v in variants:
        ps = [cell[(v, d)]["params"] if (v, d) in cell else "—" for d in depths]
        print(f"| parameters, {v} | " + " | ".join(f"{int(p) / 1e6:.2f} M" if p != "—" else p for p in ps) + " |")
    print("| training s, " + " / ".join(variants) + " | " + " | ".join(
        " / ".join(f"{float(cell[(v, d)]['train_seconds']):.0f}" if (v, d) in cell else "—" for v in variants)
        for d in depths) + " |")
    print()
    print("Change of validation BPC from 1 layer (negative: depth helps), and gap to dp at the same depth:\n")
    print("| variant | " + " | ".join(f"{d} L: Δ vs 1 L / gap to dp" for d in depths) + " |")
    print("|---|" + "---:|" * len(depths))
    for v in variants:
        out = []
        for d in depths:
            r, r1, rd = cell.get((v, d)), cell.get((v, depths[0])), cell.get(("dp", d))
            if not r or r["diverged"] == "1":
                out.append("—")
                continue
            x = float(r["valid_bpc"])
            a = f"{x - float(r1['valid_bpc']):+.3f}" if r1 and r1["diverged"] != "1" else "—"
            b = f"{x - float(rd['valid_bpc']):+.3f}" if rd and rd["diverged"] != "1" else "—"
            out.append(f"{a} / {b}")
        print(f"| {v} | " + " | ".join(out) + " |")


if __name__ == "__main__":
    main(sys.argv[1] if len(sys.argv) > 1 else "docs/results/depth/depth.csv")
