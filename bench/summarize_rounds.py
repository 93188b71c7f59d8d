#!/usr/bin/env python3
"""Summary of bench/compare_rounds.sh: per configuration, the medians over the rounds of lipt's and PyTorch's
training and evaluation tokens/s, the median ratio lipt/PyTorch with its range over the rounds, lipt's achieved
training GFLOP/s as a fraction of the SGEMM rate of the same run (when measured; with lipt bench --paired-sgemm, which
compare_rounds.sh passes, also the median per-run fraction against an SGEMM run right after each training run), and
peak memory (VmHWM). For
each NAME-bf16 measured next to NAME, a second table: bf16 / float32 training and evaluation tokens/s of lipt, per
round (the two runs of a round ran back to back) and within the bf16 run (lipt bench --paired: float32 runs
interleaved run by run), and PyTorch autocast bf16 / PyTorch float32, per round; medians and ranges.

usage: bench/summarize_rounds.py DIR [--markdown]
"""
import glob
import json
import os
import re
import sys
from statistics import median


def load(d: str) -> dict:
    found = []
    for f in glob.glob(os.path.join(d, "*.r*.json")):
        m = re.match(r"(.+)\.r(\d+)\.json$", os.path.basename(f))
        if m:
            found.append((m.group(1), int(m.group(2)), f))
    runs = {}
    for name, _, f in sorted(found):  # rounds in numeric order
        with open(f) as fh:
            runs.setdefault(name, []).append(json.load(fh)["speed"])
    return runs


def fmt_range(v: list) -> str:
    return "%.2f (%.2f–%.2f)" % (median(v), min(v), max(v))


def main() -> int:
    args = [a for a in sys.argv[1:] if not a.startswith("--")]
    if len(args) != 1 or not os.path.isdir(args[0]):
        print(__doc__.strip(), file=sys.stderr)
        return 2
    md = "--markdown" in sys.argv
    runs = load(args[0])
    if not runs:
        print("summarize_rounds.py: no *.rN.json files in %s" % args[0], file=sys.stderr)
        return 1
    head = ["config", "rounds", "train lipt", "train PyTorch", "train ratio (range)", "eval lipt", "eval PyTorch",
            "eval ratio (range)", "train/SGEMM", "train/SGEMM paired (range)", "VmHWM lipt MB", "VmHWM PyTorch MB"]
    rows = []
    for name, rs in runs.items():
        tl = [r["lipt"]["tokens_per_s"]["train"] for r in rs]
        tp = [r["pytorch"]["tokens_per_s"]["train"] for r in rs]
        el = [r["lipt"]["tokens_per_s"]["eval"] for r in rs]
        ep = [r["pytorch"]["tokens_per_s"]["eval"] for r in rs]
        frac = [r["lipt"]["achieved_gflops"]["train"] / r["lipt"]["gemm_gflops"] for r in rs
                if r["lipt"].get("gemm_gflops")]
        pfrac = [(r["lipt"].get("paired_sgemm") or {}).get("fraction_of_gemm_train") for r in rs]
        pfrac = [x for x in pfrac if x is not None]
        hl = [r["lipt"]["vm_hwm_mb"]["peak"] for r in rs]
        hp = [r["pytorch"]["vm_hwm_mb"]["peak"] for r in rs]
        rows.append([name, str(len(rs)), "%.0f" % median(tl), "%.0f" % median(tp),
                     fmt_range([a / b for a, b in zip(tl, tp)]), "%.0f" % median(el), "%.0f" % median(ep),
                     fmt_range([a / b for a, b in zip(el, ep)]), "%.2f" % median(frac) if frac else "-",
                     fmt_range(pfrac) if pfrac else "-",
                     "%.0f" % median(hl), "%.0f" % median(hp)])
    show(head, rows, md)
    # bf16 against float32, round by round
    head2 = ["config", "rounds", "lipt train bf16/f32 (range)", "lipt eval bf16/f32 (range)",
             "lipt train bf16/f32 paired (range)", "lipt eval bf16/f32 paired (range)",
             "PyTorch train bf16/f32 (range)", "bf16 train lipt/PyTorch (range)"]
    rows2 = []
    for name, rs in runs.items():
        base = name[:-len("-bf16")] if name.endswith("-bf16") else None
        if base not in runs:
            continue
        pairs = list(zip(runs[base], rs))  # rounds in order on both sides
        tok = lambda r, who, ph: r[who]["tokens_per_s"][ph]
        rows2.append([name, str(len(pairs)),
                      fmt_range([tok(b, "lipt", "train") / tok(f, "lipt", "train") for f, b in pairs]),
                      fmt_range([tok(b, "lipt", "eval") / tok(f, "lipt", "eval") for f, b in pairs]),
                      paired(rs, "train_ratio"), paired(rs, "eval_ratio"),
                      fmt_range([tok(b, "pytorch", "train") / tok(f, "pytorch", "train") for f, b in pairs]),
                      fmt_range([tok(b, "lipt", "train") / tok(b, "pytorch", "train") for _, b in pairs])])
    if rows2:
        print()
        show(head2, rows2, md)
    return 0


def paired(rs: list, key: str) -> str:
    """The median over rounds of lipt bench --paired's in-process ratio (compare_pytorch.sh --bf16 asks for it)."""
    v = [(r["lipt"].get("paired_float32") or {}).get(key) for r in rs]
    v = [x for x in v if x is not None]
    return fmt_range(v) if v else "-"


def show(head: list, rows: list, md: bool) -> None:
    if md:
        print("| " + " | ".join(head) + " |")
        print("|" + "|".join("---" if i == 0 else "---:" for i in range(len(head))) + "|")
        for r in rows:
            print("| " + " | ".join(r) + " |")
    else:
        w = [max(len(h), *(len(r[i]) for r in rows)) for i, h in enumerate(head)]
        print("  ".join(h.ljust(w[i]) for i, h in enumerate(head)))
        for r in rows:
            print("  ".join(c.ljust(w[i]) for i, c in enumerate(r)))


if __name__ == "__main__":
    sys.exit(main())
