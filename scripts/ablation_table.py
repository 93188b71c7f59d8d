#!/usr/bin/env python3
"""The ablation table of scripts/ablation.sh (stdlib only).

  ablation_table.py --cell DIR --name NAME        one candidate's result.json (from its metrics, lipschitz, invert)
  ablation_table.py --table DIR --csv F --md F    the table over every DIR/*.json (docs/results/ablation/: one
                                                  committed result per candidate, so the table survives its runs)
"""
import argparse
import csv
import glob
import json
import os
import statistics


def load_json(path):
    try:
        with open(path) as f:
            txt = f.read().strip()
        return json.loads(txt) if txt else {}
    except (OSError, ValueError):
        return {}


def cell(d, name):
    evals, speeds, steps = [], [], 0
    with open(os.path.join(d, "metrics.jsonl")) as f:
        for line in f:
            try:
                r = json.loads(line)
            except ValueError:
                continue
            if "eval" in r and "bpc" in r:
                evals.append(r)
            elif "tok_per_s" in r:
                speeds.append(r["tok_per_s"])
                steps = max(steps, r.get("step", 0))
    cfg = {}
    cfg_path = os.path.join(d, "run.cfg")  # the run's settings (config.cfg before run.cfg existed)
    if not os.path.exists(cfg_path):
        cfg_path = os.path.join(d, "config.cfg")
    with open(cfg_path) as f:
        for line in f:
            line = line.split("#")[0]
            if "=" in line:
                k, v = line.split("=", 1)
                cfg[k.strip()] = v.strip()
    lip = load_json(os.path.join(d, "lipschitz.json"))
    info = load_json(os.path.join(d, "info.json"))
    inv = load_json(os.path.join(d, "invert.json"))
    c = float(cfg.get("c", "nan"))
    att = [b for b in lip.get("branches", []) if b.get("branch") == "attn"]
    ffn = [b for b in lip.get("branches", []) if b.get("branch") == "ffn"]

    def col(rows, key):
        return [r.get(key) for r in rows if r.get(key) is not None]

    iters = {}
    for w in inv.get("windows", []):
        for mp in w.get("maps", []):
            iters.setdefault((mp["layer"], mp["branch"]), []).append(mp["iters"])
    out = {
        "name": name,
        "attention": cfg.get("attention"),
        "lip_norm": cfg.get("lip_norm"),
        "c": c,
        "steps": steps,
        "params": info.get("parameters"),
        "n_layers": int(cfg["n_layers"]) if "n_layers" in cfg else None,
        "d_model": int(cfg["d_model"]) if "d_model" in cfg else None,
        "optimizer": cfg.get("optimizer", "adamw"),
        "valid_bpc": evals[-1]["bpc"] if evals else None,
        "valid_symbols": evals[-1].get("symbols") if evals else None,
        "tok_per_s": statistics.median(speeds[len(speeds) // 5:]) if speeds else None,
        "invertible": lip.get("invertible"),
        "certified": lip.get("certified"),
        "attn_certificate": col(att, "certificate"),
        "attn_budget_used": col(att, "budget_used"),
        "attn_measured": col(att, "measured"),
        "ffn_certificate": col(ffn, "certificate"),
        "ffn_budget_used": col(ffn, "budget_used"),
        "inversion_iters_max": {f"{k[0]}.{k[1]}": max(v) for k, v in sorted(iters.items())},
        "inversion_exact": inv.get("all_exact"),
    }
    return out


def fmt_list(xs, f="{:.3f}"):
    return " / ".join(f.format(x) for x in xs) if xs else "–"


def table(out_dir, csv_path, md_path):
    rows = []
    for p in sorted(glob.glob(os.path.join(out_dir, "*.json"))):
        r = load_json(p)
        if r:
            rows.append(r)
    rows.sort(key=lambda r: (r["valid_bpc"] is None, r["valid_bpc"] or 0))
    os.makedirs(os.path.dirname(csv_path) or ".", exist_ok=True)
    hdr = ["name", "attention", "lip_norm", "c", "n_layers", "d_model", "params", "steps", "valid_bpc", "tok_per_s", "certified", "attn_budget_used",
           "attn_certificate", "ffn_certificate", "inversion_iters_max", "inversion_exact"]
    with open(csv_path + ".tmp", "w", newline="") as f:
        w = csv.writer(f)
        w.writerow(hdr)
        for r in rows:
            w.writerow([r.get("name"), r.get("attention"), r.get("lip_norm"), r.get("c"), r.get("n_layers"),
                        r.get("d_model"), r.get("params"), r.get("steps"),
                        r.get("valid_bpc"), r.get("tok_per_s"), r.get("certified"),
                        ";".join(f"{x:.4g}" for x in r.get("attn_budget_used", [])),
                        ";".join(f"{x:.6g}" for x in r.get("attn_certificate", [])),
                        ";".join(f"{x:.6g}" for x in r.get("ffn_certificate", [])),
                        ";".join(f"{k}:{v}" for k, v in r.get("inversion_iters_max", {}).items()),
                        r.get("inversion_exact")])
    os.replace(csv_path + ".tmp", csv_path)
    lines = ["| candidate | attention (norm) | c | layers × width | params | valid BPC | attention budget used (per layer) | "
             "certified bound, attention (per layer) | ffn bound | inversion iters (max per map) | exact | tokens/s |",
             "|---|---|---:|---|---:|---:|---|---|---|---|---|---:|"]
    for r in rows:
        it = r.get("inversion_iters_max", {})
        its = ", ".join(str(v) for v in it.values()) if it else "–"
        bpc = f"{r['valid_bpc']:.3f}" if r.get("valid_bpc") is not None else "–"
        tps = f"{r['tok_per_s']:.0f}" if r.get("tok_per_s") else "–"
        budget = fmt_list([100 * x for x in r.get("attn_budget_used", [])], "{:.1f}%")
        ffn = fmt_list(r.get("ffn_certificate", []), "{:.3f}")
        cc = f"{r['c']:.3g}" if isinstance(r.get("c"), float) and r.get("invertible") else "–"
        att = f"{r.get('attention')} ({r.get('lip_norm')})" if r.get("invertible") else str(r.get("attention"))
        if r.get("name", "").startswith("e-"):
            att += ", coupling"
        shape = f"{r['n_layers']} × {r['d_model']}" if r.get("n_layers") else "4 × 128"
        npar = f"{r['params'] / 1e3:.0f}k" if r.get("params") else "–"
        lines.append(f"| {r['name']} | {att} | {cc} | {shape} | {npar} | {bpc} | {budget} | "
                     f"{fmt_list(r.get('attn_certificate', []))} | {ffn} | {its} | "
                     f"{r.get('inversion_exact') if r.get('inversion_iters_max') else 'n/a'} | {tps} |")
    with open(md_path + ".tmp", "w") as f:
        f.write("\n".join(lines) + "\n")
    os.replace(md_path + ".tmp", md_path)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--cell")
    ap.add_argument("--name")
    ap.add_argument("--table")
    ap.add_argument("--csv")
    ap.add_argument("--md")
    a = ap.parse_args()
    if a.cell:
        print(json.dumps(cell(a.cell, a.name or os.path.basename(a.cell))))
    elif a.table:
        table(a.table, a.csv, a.md)
    else:
        ap.error("--cell or --table")


if __name__ == "__main__":
    main()
