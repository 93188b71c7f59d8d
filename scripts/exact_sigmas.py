#!/usr/bin/env python3
"""Exact spectral norms (LAPACK SVD in float64 through numpy) of an invertible checkpoint's weights, next to the
certified values lipt divides by: an independent check of `lipt lipschitz`.

  build/lipt export --ckpt runs/ptb-contractive/last.ckpt --out /tmp/m.safetensors
  build/lipt lipschitz --ckpt runs/ptb-contractive/last.ckpt --json > /tmp/lip.json
  python3 scripts/exact_sigmas.py /tmp/m.safetensors /tmp/lip.json

Per layer: the exact sigma of the normalised feed-forward weights W1·f1 and W2·f2 (each must be <= its budget: 1 and
c with ffn_full_budget, else c and c), their product (the feed-forward's certified constant is sigma_ub(W1) f1
sigma_ub(W2) f2 >= this), and for the attention the exact per-head norms against the certified ones (ratio >= 1).
Needs numpy (Debian: python3-numpy).
"""
import json
import struct
import sys

import numpy as np


def read_safetensors(path):
    with open(path, "rb") as f:
        n = struct.unpack("<Q", f.read(8))[0]
        head = json.loads(f.read(n))
        data = f.read()
    out = {}
    for k, v in head.items():
        if k == "__metadata__":
            continue
        a, b = v["data_offsets"]
        assert v["dtype"] == "F32", v["dtype"]
        out[k] = np.frombuffer(data[a:b], dtype="<f4").reshape(v["shape"]).astype(np.float64)
    return out, head.get("__metadata__", {})


def sigma(w):
    return float(np.linalg.svd(w, compute_uv=False)[0])


def main():
    if len(sys.argv) != 3:
        sys.exit(__doc__)
    w, meta = read_safetensors(sys.argv[1])
    with open(sys.argv[2]) as f:
        lip = json.load(f)
    c = float(lip["c"])
    H = None
    for k, v in meta.items():
        if k.endswith("n_heads"):
            H = int(v)
    cfg = {}
    if "config" in meta:
        for line in meta["config"].splitlines():
            if "=" in line:
                a, b = line.split("=", 1)
                cfg[a.strip()] = b.strip()
    H = H or int(cfg.get("n_heads", 1))
    full = cfg.get("ffn_full_budget", "0") == "1"
    br = {(b["layer"], b["branch"]): b for b in lip["branches"]}
    L = 1 + max(b["layer"] for b in lip["branches"])
    print(f"c = {c}, heads {H}, ffn_full_budget {int(full)}")
    print(f"{'layer':<6}{'sigma(W1 f1)':>14}{'budget':>8}{'sigma(W2 f2)':>14}{'budget':>8}{'product':>12}"
          f"{'ffn cert':>12}{'attn: max_h exact/certified sigma (q, k, v, o)':>50}")
    worst = 0.0
    for l in range(L):
        f = br[(l, "ffn")]
        a = br[(l, "attn")]
        s1 = sigma(w[f"layers.{l}.ffn.w1"]) * f["factor"]
        s2 = sigma(w[f"layers.{l}.ffn.w2"]) * f["factor2"]
        b1 = 1.0 if full else c
        worst = max(worst, s1 / b1, s2 / c)
        ratios = []
        for name, key in (("wq", "sigma_q_or_w1"), ("wk", "sigma_k_or_w2"), ("wv", "sigma_v")):
            m = w.get(f"layers.{l}.attn.{name}")
            if m is None or a.get(key) is None:
                ratios.append("-")
                continue
            d = m.shape[1] // H
            ex = max(sigma(m[:, h * d:(h + 1) * d]) for h in range(H))
            ratios.append(f"{ex:.5f}/{a[key]:.5f}")
        ex_o = sigma(w[f"layers.{l}.attn.wo"])
        ratios.append(f"{ex_o:.5f}/{a['sigma_o']:.5f}")
        print(f"{l:<6}{s1:>14.9f}{b1:>8.3f}{s2:>14.9f}{c:>8.3f}{s1 * s2:>12.9f}{f['certificate']:>12.9f}   "
              + ", ".join(ratios))
    print(f"largest exact normalised sigma / its budget: {worst:.9f} (1 - {1 - worst:.2e}) ({'ok' if worst <= 1 + 1e-6 else 'VIOLATED'})")


if __name__ == "__main__":
    main()
