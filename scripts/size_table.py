#!/usr/bin/env python3
"""The model-size table of docs/USAGE.md ("Choosing a model size"), read from finished run folders.

For each run folder: parameters and precision (result.json, else run.cfg), training speed (median symbols/s of
the logged steps), and the wall time at which the periodic validation BPC first reached each threshold. Wall time
is the sum of the training process's elapsed_s over its segments (a drop marks a resume or a continued run).

    python3 scripts/size_table.py --thresholds 2.0,1.8,1.6 runs/converged/ptb-dp runs/converged/ptb-invertible-c2
"""
import argparse
import json
import os
import statistics
import sys


def read_metrics(path):
    """Training lines (step -> cumulative seconds, symbols/s) and validation lines (step, bpc), in file order."""
    train, speeds, valid = {}, [], []
    offset, last = 0.0, 0.0
    with open(path) as f:
        for n, line in enumerate(f, 1):
            line = line.strip()
            if not line:
                continue
            try:
                rec = json.loads(line)
            except json.JSONDecodeError as e:
                sys.exit(f"size_table: {path}:{n}: not JSON ({e})")
            if rec.get("eval") == "valid":
                valid.append((rec["step"], rec["bpc"]))
            elif "elapsed_s" in rec and "step" in rec:
                if rec["elapsed_s"] < last:  # a new training process: its clock starts again
                    offset += last
                last = rec["elapsed_s"]
                train[rec["step"]] = offset + rec["elapsed_s"]
                if rec.get("tok_per_s"):
                    speeds.append(rec["tok_per_s"])
    return train, speeds, valid


def run_facts(folder):
    facts = {"params": None, "precision": None, "batch": None, "seq_len": None}
    res = os.path.join(folder, "result.json")
    if os.path.exists(res):
        with open(res) as f:
            r = json.load(f)
        facts["params"], facts["precision"] = r.get("params"), r.get("precision")
    with open(os.path.join(folder, "run.cfg")) as f:
        for line in f:
            key, _, val = line.split("#")[0].partition("=")
            key, val = key.strip(), val.strip()
            if key in ("batch", "seq_len"):
                facts[key] = int(val)
            elif key == "precision" and not facts["precision"]:
                facts["precision"] = val
    return facts


def fmt_time(s):
    if s is None:
        return "–"
    return f"{s / 60:.0f} min" if s >= 600 else f"{s:.0f} s"


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--thresholds", required=True, help="comma-separated validation BPC levels, e.g. 2.0,1.8")
    ap.add_argument("runs", nargs="+", help="run folders (each with metrics.jsonl and run.cfg)")
    a = ap.parse_args()
    levels = [float(x) for x in a.thresholds.split(",")]
    head = ["run", "params", "precision", "symbols/s"] + [f"to BPC {x:g}" for x in levels] + ["best valid BPC (at)"]
    print("| " + " | ".join(head) + " |")
    print("|" + "---|" * len(head))
    for folder in a.runs:
        metrics = os.path.join(folder, "metrics.jsonl")
        if not os.path.exists(metrics):
            sys.exit(f"size_table: {folder}: no metrics.jsonl (not a run folder)")
        train, speeds, valid = read_metrics(metrics)
        facts = run_facts(folder)
        reach = []
        for x in levels:
            hit = next((s for s, b in valid if b <= x and s in train), None)
            reach.append(fmt_time(train[hit]) if hit is not None else "–")
        best = min(valid, key=lambda v: v[1]) if valid else None
        best_s = f"{best[1]:.3f} ({fmt_time(train.get(best[0]))})" if best else "–"
        params = f"{facts['params'] / 1e6:.2f}M" if facts["params"] else "?"
        speed = f"{statistics.median(speeds):,.0f}" if speeds else "?"
        row = [os.path.basename(os.path.normpath(folder)), params, facts["precision"] or "?", speed] + reach + [best_s]
        print("| " + " | ".join(row) + " |")


if __name__ == "__main__":
    main()
