#!/usr/bin/env python3
"""Relative difference of the parameters in two safetensors files (lipt export), stdlib only.
Usage: compare_params.py A.safetensors B.safetensors [TOL]; exit 1 when the difference exceeds TOL (default 1e-5)."""
import json, struct, sys, array, math
def load(p):
    b = open(p, 'rb').read()
    n = struct.unpack('<Q', b[:8])[0]
    h = json.loads(b[8:8 + n]); base = 8 + n; out = {}
    for k, v in h.items():
        if k == '__metadata__': continue
        a = array.array('f'); a.frombytes(b[base + v['data_offsets'][0]: base + v['data_offsets'][1]]); out[k] = a
    return out
a, b = load(sys.argv[1]), load(sys.argv[2])
if a.keys() != b.keys():
    sys.exit('different tensors: %s' % sorted(set(a) ^ set(b)))
num = den = 0.0; worst = 0.0; wk = ''
for k in a:
    d = sum((x - y) ** 2 for x, y in zip(a[k], b[k])); s = sum(x * x for x in a[k])
    num += d; den += s
    r = math.sqrt(d / max(s, 1e-30))
    if r > worst: worst, wk = r, k
tol = float(sys.argv[3]) if len(sys.argv) > 3 else 1e-5
rel = math.sqrt(num / den)
print(f"relative difference {rel:.3e} over all tensors; worst tensor {wk} {worst:.3e} (tolerance {tol:g})")
sys.exit(0 if rel <= tol and worst <= tol else 1)
