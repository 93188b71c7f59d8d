#!/usr/bin/env python3
"""Coefficients of the table-driven normal CDF and GELU derivative in src/kernels/vmath.h (lipt_vgelu_table_n).

For a = |x| < 3.9375, split into 32 intervals of width 1/8 centred on i/8 (i = 8a rounded to the nearest integer,
local variable u = 8a - i in [-1/2, 1/2], exact in float), two functions of a are each a polynomial in u (degree 5
for S, 4 for D):

  S(a) = Phi(-a)                     (the normal CDF's small side: Phi(x) = S for x < 0, 1 - S for x >= 0)
  D(a) = Phi(-a) - a phi(a)          (GELU' = Phi(x) + x phi(x) = D for x < 0, 1 - D for x >= 0)

S is fitted for relative error (S > 1e-5 on [0, 4), so the negative tail keeps its relative accuracy); D changes
sign near a = 0.75, so its error is weighted by Phi(-a) + a phi(a), the size of the two terms it is made of.
Interval 0 (centred on a = 0) keeps the constant term 1/2 exactly, so Phi(0) = GELU'(0) = 1/2 exactly (S - 1/2 and
D - 1/2 are odd in a: its even terms are 0, and the fit loses nothing).

Method (no code from elsewhere): on each interval, a weighted least-squares fit on 400 points, then Lawson's
iteratively reweighted least squares (weights multiplied by the pointwise error) to approach the minimax fit. The
coefficients are rounded to float from the highest degree down, refitting the lower ones after each rounding so
they absorb it; S's constant term is kept as a float pair (hi + lo), D's as one float. The script then evaluates
both polynomials exactly as the C code does (float32 Horner, one rounding per multiply and per add, no FMA) on a
dense grid against mpmath references and writes the C header, the worst errors in its opening comment.

Run: /usr/bin/python3 scripts/fit_gelu.py > src/kernels/gelu_tables.h   (numpy and mpmath; about 15 s)
"""
import sys

import mpmath as mp
import numpy as np

mp.mp.dps = 40
NI, H = 32, mp.mpf(1) / 8
DEG = {"S": 5, "D": 4}
SQRT2, SQRT2PI = mp.sqrt(2), mp.sqrt(2 * mp.pi)


def S(a):
    return mp.erfc(a / SQRT2) / 2


def phi(a):
    return mp.exp(-a * a / 2) / SQRT2PI


def D(a):
    return S(a) - a * phi(a)


def W(a):  # the scale of D's error
    return S(a) + a * phi(a)


def fit(us, f, w, fixed, deg):
    """Weighted near-minimax fit of f(u) by sum c_k u^k, k = 0..deg, with the coefficients in `fixed` (k -> value)
    held; returns all deg + 1 coefficients (double)."""
    free = [k for k in range(deg + 1) if k not in fixed]
    if not free:
        return [fixed[k] for k in range(deg + 1)]
    rhs = f - sum(v * us**k for k, v in fixed.items())
    A = np.stack([us**k for k in free], axis=1)
    lw = np.ones_like(us)
    for _ in range(60):  # Lawson: reweight by the error, converging towards equioscillation
        sw = np.sqrt(lw) / w
        c, *_ = np.linalg.lstsq(A * sw[:, None], rhs * sw, rcond=None)
        err = np.abs(A @ c - rhs) / w
        lw = lw * (err + 1e-300)
        lw /= lw.sum()
    out = dict(fixed)
    out.update(zip(free, c))
    return [out[k] for k in range(deg + 1)]


def f32(v):
    return float(np.float32(v))


def fit_interval(i, func, weight, split_c0, deg):
    us = np.cos(np.linspace(0, np.pi, 400)) / 2  # denser at the ends, where the error peaks
    a = [(i + mp.mpf(float(u))) * H for u in us]
    f = np.array([float(func(x)) for x in a])
    w = np.array([float(weight(x)) for x in a])
    fixed = {0: 0.5, 2: 0.0, 4: 0.0} if i == 0 else {}  # interval 0: S - 1/2, D - 1/2 odd
    for k in [k for k in range(deg, 0, -1) if k not in fixed]:  # round from the top down, refitting the rest
        c = fit(us, f, w, fixed, deg)
        fixed[k] = f32(c[k])
    # the constant term: the exact value that centres the error, then float (pair)
    c = fit(us, f, w, fixed, deg)
    hi = f32(c[0])
    lo = f32(c[0] - hi) if split_c0 else 0.0
    if i == 0:
        hi, lo = 0.5, 0.0
    return [hi, lo] + [fixed[k] for k in range(1, deg + 1)]


def eval_f32(co, u, split_c0):
    """The C code's evaluation: q = (((c5 u + c4) u + c3) u + c2) u + c1 (Horner), then q u + c0, or
    hi + (q u + lo) with the constant term split."""
    u = np.float32(u)
    deg = len(co) - 2
    q = np.float32(co[deg + 1])
    for k in range(deg, 1, -1):
        q = np.float32(np.float32(q * u) + np.float32(co[k]))
    q = np.float32(q * u)
    if split_c0:
        return np.float32(np.float32(co[0]) + np.float32(q + np.float32(co[1])))
    return np.float32(q + np.float32(co[0]))


def check(tabs, func, weight, split_c0, n=3000):
    worst = 0.0
    for i in range(NI):
        us = np.linspace(-0.5, 0.5, n, dtype=np.float64)
        for u in us:
            uf = np.float32(u)
            a = (i + mp.mpf(float(uf))) * H
            got = float(eval_f32(tabs[i], uf, split_c0))
            worst = max(worst, abs(got - float(func(a))) / float(weight(a)))
    return worst


def ctable(name, tabs, k):
    vals = ["%.9ef" % t[k] for t in tabs]
    lines = ["        " + ", ".join(vals[j:j + 5]) for j in range(0, len(vals), 5)]
    return "    /* %s */\n    {\n%s,\n    }," % (name, ",\n".join(lines))


def main():
    quick = "--quick" in sys.argv
    out, errs = {}, {}
    for name, func, weight, split in (("S", S, S, True), ("D", D, W, False)):
        tabs = [fit_interval(i, func, weight, split, DEG[name]) for i in range(NI)]
        errs[name] = check(tabs, func, weight, split, 300 if quick else 3000)
        out[name] = tabs
    print("/* Generated by scripts/fit_gelu.py (do not edit): the per-interval polynomials of lipt_vgelu_table_n in")
    print(" * src/kernels/vmath.h, row k holding the 32 intervals' coefficient of u^k. Worst float32 evaluation error")
    print(" * on [0, 3.9375): S = Phi(-a) relative %.3e, D = Phi(-a) - a phi(a) %.3e of Phi(-a) + a phi(a). */"
          % (errs["S"], errs["D"]))
    print("#ifndef LIPT_KERNELS_GELU_TABLES_H")
    print("#define LIPT_KERNELS_GELU_TABLES_H")
    print()
    for name in ("S", "D"):
        tabs = out[name]
        ks = [0, 1] + list(range(2, DEG[name] + 2)) if name == "S" else [0] + list(range(2, DEG[name] + 2))
        print("static const float lipt_gelu_tab_%s[%d][%d] __attribute__((aligned(64))) = {" % (name, len(ks), NI))
        for k in ks:
            label = ("c0 hi" if name == "S" else "c0") if k == 0 else "c0 lo" if k == 1 else "c%d" % (k - 1)
            print(ctable(label, tabs, k))
        print("};")
        print()
    print("#endif")


if __name__ == "__main__":
    main()
