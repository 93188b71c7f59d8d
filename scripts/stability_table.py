#!/usr/bin/env python3
"""Markdown tables of the stability sweep (scripts/stability_sweep.sh): one per learning rate, a row per variant, a
column per depth; each cell "valid BPC (outcome)" with the largest gradient norm and attention-logit spread below.
    python3 scripts/stability_table.py docs/results/stability > docs/results/stability/tables.md"""
import csv
import glob
import os
import sys

ORDER = ["dp-post", "l2-tied-post", "dp", "l2-tied", "contractive", "contractive-l2"]


def main(root: str) -> None:
    for path in sorted(glob.glob(os.path.join(root, "lr*", "stability.csv"))):
        rows = list(csv.DictReader(open(path)))
        if not rows:
            continue
        tag = os.path.basename(os.path.dirname(path))[2:]  # "1e-3" or "1e-3-beta2-0.999"
        lr, _, beta2 = tag.partition("-beta2-")
        lr = lr + (f", Adam β2 {beta2}" if beta2 else "")
        depths = sorted({int(r["depth"]) for r in rows})
        print(f"\n**Adam lr {lr}** (constant, no warmup, no clipping; `{rows[0]['settings']}`): validation BPC after "
              f"{rows[0]['steps_done']} steps; below it the largest gradient norm / attention-logit row spread seen\n")
        print("| variant | " + " | ".join(f"{d} layers" for d in depths) + " |")
        print("|---|" + "---:|" * len(depths))
        # the documented order first, then any other variant of the CSV (the grids' variants come from lipt's table)
        shown = [v for v in ORDER if any(r["variant"] == v for r in rows)]
        shown += [v for v in dict.fromkeys(r["variant"] for r in rows) if v not in shown]
        for v in shown:
            cells = []
            for d in depths:
                r = next((r for r in rows if r["variant"] == v and int(r["depth"]) == d), None)
                if r is None:
                    cells.append("—")
                    continue
                out = r["outcome"]
                head = f"{float(r['valid_bpc']):.3f}" if out == "stable" else f"**{out}** at step {r['diverge_step']}"
                cells.append(f"{head}<br>{float(r['max_grad_norm']):.3g} / {float(r['max_attn_logit_spread']):.3g}")
            print(f"| {v} | " + " | ".join(cells) + " |")


if __name__ == "__main__":
    main(sys.argv[1] if len(sys.argv) > 1 else "docs/results/stability")
