#!/usr/bin/python3
"""Writes the golden files tests/golden/<variant>.bin that tests/test_golden.c checks lipt against.

For each variant of a small model it draws weights and power-iteration vectors from a fixed numpy seed, then
computes with the PyTorch re-implementation (lipt_torch.py, float32): logits, the mean cross-entropy, every
parameter gradient; three AdamW steps (torch.optim.AdamW, lipt's no-decay set) each followed by the power-iteration
refresh lipt's training loop runs (lipt_model_refresh_norms(cfg.power_iters)), with the loss of each step and every
parameter and buffer after the last; for the invertible models the normalisers (certified Gram-iteration spectral
norms) and, for them and the coupling model, the inversion of each batch row (recovered embedding input x0,
tokens, iterations). The same recipe in float64 runs next to it as a check of how well float32 determines each
quantity (the golden values are the float32 run; every compared tensor must agree to PRECISION).

Run from anywhere:  /usr/bin/python3 tests/golden/make_golden.py   (regenerates the files bit for bit)
Options: --out DIR (default: this directory), --check (regenerate in memory and compare with the files on disk),
and variant names to handle only those (e.g. `make_golden.py clipped-dp-maxmin dp-coupling`).
"""
import argparse
import math
import os
import struct
import sys

import numpy as np
import torch

sys.dont_write_bytecode = True  # keep the source tree clean
sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "python"))
from lipt_torch import (INVERT_MAX_ITER, INVERT_TOL, KIND_BUFFER, LiptConfig, LiptTransformer, _f32,  # noqa: E402
                        norm_inf_blocks, spectral_sigma)

torch.set_num_threads(1)

# ----------------------------------------------------------------------------- the file format (version 1)
#   "LIPTGOLD" | u32 version | u32 n_entries | entries | u64 FNV-1a-64 of every preceding byte
#   entry: u32 name_len | name (UTF-8) | u32 dtype | u32 ndim | u32 shape[ndim] | payload (little-endian)
#   dtype: 1 float32, 2 int32, 3 float64, 4 text (UTF-8, ndim 1, shape = [bytes])
MAGIC, VERSION = b"LIPTGOLD", 1
DT_F32, DT_I32, DT_F64, DT_TEXT = 1, 2, 3, 4
_NP = {DT_F32: "<f4", DT_I32: "<i4", DT_F64: "<f8"}


def fnv1a64(data: bytes) -> int:
    h = 0xCBF29CE484222325
    for b in data:
        h = ((h ^ b) * 0x100000001B3) & 0xFFFFFFFFFFFFFFFF
    return h


def encode(entries):
    out = [MAGIC, struct.pack("<II", VERSION, len(entries))]
    for name, dtype, val in entries:
        nb = name.encode("utf-8")
        if dtype == DT_TEXT:
            payload = val.encode("utf-8")
            shape = (len(payload),)
        else:
            arr = np.ascontiguousarray(np.asarray(val, dtype=_NP[dtype]))
            shape, payload = arr.shape, arr.tobytes()
        out.append(struct.pack("<I", len(nb)) + nb + struct.pack("<II", dtype, len(shape)))
        out.append(struct.pack("<%dI" % len(shape), *shape) + payload)
    blob = b"".join(out)
    return blob + struct.pack("<Q", fnv1a64(blob))


def decode(blob: bytes):
    """name -> numpy array or str (the reader the README describes)."""
    if blob[:8] != MAGIC:
        raise ValueError("not a lipt golden file")
    if struct.unpack("<Q", blob[-8:])[0] != fnv1a64(blob[:-8]):
        raise ValueError("checksum mismatch")
    version, n = struct.unpack("<II", blob[8:16])
    if version != VERSION:
        raise ValueError(f"version {version}")
    pos, out = 16, {}
    for _ in range(n):
        (ln,) = struct.unpack("<I", blob[pos:pos + 4]); pos += 4
        name = blob[pos:pos + ln].decode("utf-8"); pos += ln
        dtype, ndim = struct.unpack("<II", blob[pos:pos + 8]); pos += 8
        shape = struct.unpack("<%dI" % ndim, blob[pos:pos + 4 * ndim]); pos += 4 * ndim
        if dtype == DT_TEXT:
            out[name] = blob[pos:pos + shape[0]].decode("utf-8"); pos += shape[0]
        else:
            cnt = int(np.prod(shape)) * np.dtype(_NP[dtype]).itemsize
            out[name] = np.frombuffer(blob[pos:pos + cnt], dtype=_NP[dtype]).reshape(shape); pos += cnt
    return out


def check_detail(path: str, blob: bytes) -> str:
    """How a regenerated file differs from the one on disk: missing or unreadable, other names or shapes, or the
    largest relative difference of the values (PyTorch's float32 kernels differ in the last bits between CPUs, and
    the C test compares at 1e-4)."""
    if not os.path.exists(path):
        return " (no file on disk)"
    try:
        old, new = decode(open(path, "rb").read()), decode(blob)
    except ValueError as e:
        return f" (file on disk unreadable: {e})"
    if old.keys() != new.keys():
        return " (other tensors: " + ", ".join(sorted(set(old) ^ set(new))) + ")"
    worst, where = 0.0, ""
    for k in old:
        a, b = old[k], new[k]
        if isinstance(a, str) or isinstance(b, str):
            if a != b:
                return f" (text '{k}' differs)"
            continue
        if a.shape != b.shape:
            return f" ('{k}': shape {a.shape} on disk, {b.shape} now)"
        a64, b64 = a.astype(np.float64), b.astype(np.float64)
        d = float(np.max(np.abs(a64 - b64))) / max(float(np.max(np.abs(b64))), 1e-30) if a.size else 0.0
        if d > worst:
            worst, where = d, k
    return f" (largest relative difference {worst:.1e}, in '{where}')"


# ----------------------------------------------------------------------------- the recipe

COMMON = dict(vocab_size=11, d_model=12, n_heads=3, d_ff=20, n_layers=2, seq_len=9, dropout=0.0, c=0.9,
              ln_eps=1e-5, init_seed=1)
# (file stem, config, numpy seed, sequence length T of the batch). The invertible variants use T < seq_len: their
# attention bound must still use N = seq_len, and the unused pos_emb rows must get no gradient.
VARIANTS = [
    ("dp", dict(attention="dp", ffn="standard", activation="gelu", power_iters=1), 101, 9),
    ("l2", dict(attention="l2", ffn="standard", activation="relu", power_iters=1), 202, 9),
    ("l2-tied", dict(attention="l2-tied", ffn="standard", activation="lipswish", power_iters=1), 303, 9),
    ("contractive-inf", dict(attention="contractive-l2", ffn="contractive", activation="lipswish", lip_norm="inf",
                             power_iters=1), 404, 7),
    ("contractive-2", dict(attention="contractive-l2", ffn="contractive", activation="elu", lip_norm="2",
                           power_iters=2), 505, 7),
    ("contractive-inf2", dict(attention="contractive-l2", ffn="contractive", activation="lipswish", lip_norm="inf2",
                              power_iters=1, actnorm=1), 606, 7),
    ("clipped-dp", dict(attention="clipped-dp", ffn="contractive", activation="lipswish", lip_norm="inf2",
                        power_iters=1, clip_radius=2.75, rel_bias=1, actnorm=1), 708, 7),
    ("clipped-dp-norel", dict(attention="clipped-dp", ffn="contractive", activation="elu", lip_norm="inf2",
                              power_iters=2, clip_radius=0.0, rel_bias=0, actnorm=0, gram_iters=3), 808, 7),
    # the options added after the first eight files: GroupSort activation, the full ffn budget (W1 to 1, W2 to c)
    # and the MLP head on the invertible model; additive coupling blocks on the pre-LN DP model
    ("clipped-dp-maxmin", dict(attention="clipped-dp", ffn="contractive", activation="maxmin", lip_norm="inf2",
                               power_iters=1, clip_radius=2.75, rel_bias=1, actnorm=1, c=0.97, ffn_full_budget=1,
                               head_hidden=14), 909, 7),
    ("dp-coupling", dict(attention="dp", ffn="standard", activation="gelu", power_iters=1, coupling=1), 1010, 9),
    # post-LN blocks (norm = post): LN(x + f(x)) after each branch
    ("dp-post", dict(attention="dp", ffn="standard", activation="gelu", power_iters=1, norm="post"), 1111, 9),
    ("l2-tied-post", dict(attention="l2-tied", ffn="standard", activation="lipswish", power_iters=1, norm="post"),
     1212, 9),
    # DP with a logit map (the soft cap, 30): W^Q, W^K drawn wide (below) so that logits reach the map's curve
    ("dp-softcap", dict(attention="dp-softcap", ffn="standard", activation="gelu", power_iters=1), 1313, 9),
]
# config keys lipt_config_to_text gained after the first eight files were written, one tuple per generation: the
# config text leaves out the newest generations while all their keys are at their defaults, so older files stay
# byte-identical (lipt parses a missing key as its default); a file that sets a key has that generation and the
# ones before it
LATER_KEYS = (("ffn_full_budget", "coupling", "head_hidden"), ("norm",), ("precision",))
B, STEPS = 2, 3
ADAMW = dict(lr=1e-2, beta1=0.9, beta2=0.98, eps=1e-8, weight_decay=0.1)
INVERT = dict(tol=INVERT_TOL, max_iter=INVERT_MAX_ITER)  # lipt's defaults (the golden test checks)
PRECISION = 1e-5  # largest float32-vs-float64 difference of any compared tensor (a tenth of the test's 1e-4)
MARGIN = 1e-3  # least relative gap between the top two candidates of every max in the infinity-norm bound
CLIP_MARGIN = 1e-3  # least relative distance |(|x_i| / R) - 1| of every row clipped-dp attention sees


def config_text(cfg: LiptConfig) -> str:
    lines = cfg.to_text().splitlines(keepends=True)
    default = LiptConfig()
    for gen in reversed(LATER_KEYS):
        if any(getattr(cfg, k) != getattr(default, k) for k in gen):
            break
        assert [ln.split(" = ")[0] for ln in lines[-len(gen):]] == list(gen)
        lines = lines[:-len(gen)]
    return "".join(lines)


def leaf(name):
    return name.split(".", 2)[-1] if name.startswith("layers.") else name


def draw_values(cfg: LiptConfig, rs: np.random.RandomState):
    """Every parameter at a scale where each path matters (std 0.1-0.5, LayerNorm gains near 1), buffers as
    unit vectors advanced by one power-iteration round (so the refreshes of training still move them)."""
    inv = cfg.invertible
    qk = 1.2 if cfg.attn.logit_map else {"dp": 0.35, "clipped-dp": 0.2}.get(cfg.attention, 0.25)
    std = {"tok_emb": 0.7 if inv else 0.5, "pos_emb": 0.4 if inv else 0.5, "attn.wq": qk, "attn.wk": qk,
           "attn.wv": 0.35, "attn.wo": 0.35, "attn.bo": 0.1, "ffn.w1": 0.35, "ffn.b1": 0.1, "ffn.w2": 0.35,
           "ffn.b2": 0.1, "head.w": 0.4, "head.b": 0.1, "head.w1": 0.4, "head.b1": 0.1,
           # logit bias 8 * rel of std 1.2; ActNorm scales exp(N(0, 0.2^2))
           "attn.rel_bias": 0.15, "actnorm.log_scale": 0.2, "actnorm.bias": 0.1}
    vals = {}
    model = LiptTransformer(cfg)
    for name, shape, kind in model.specs:
        lf = leaf(name)
        if kind == KIND_BUFFER:
            v = rs.standard_normal(shape)
        elif lf.endswith("gamma") or lf == "ffn.beta":
            v = 1.0 + 0.2 * rs.standard_normal(shape)
        elif lf.endswith(".beta"):
            v = 0.2 * rs.standard_normal(shape)
        else:
            v = std[lf] * rs.standard_normal(shape)
        vals[name] = v.astype(np.float32)
    model.load_lipt_state(vals)
    model._normalise_buffers()
    model.refresh_norms(1)
    return {n: t.numpy().copy() for n, t in model.lipt_state_dict().items()}


def build(cfg, vals, dtype):
    m = LiptTransformer(cfg, dtype)
    m.load_lipt_state(vals)
    return m


def top2_gap(x: torch.Tensor) -> float:
    """Relative gap between the largest and the second largest entry (inf for one entry)."""
    x = x.detach().double().flatten()
    if x.numel() < 2:
        return math.inf
    s = torch.sort(x, descending=True).values
    return float((s[0] - s[1]) / max(abs(float(s[0])), 1e-30))


def margins(m: LiptTransformer):
    """Conditions the golden values must meet at a model state: (name, value, required minimum)."""
    cfg, out = m.cfg, []
    c = _f32(cfg.c)
    H, D = cfg.n_heads, cfg.d_model
    with torch.no_grad():
        for l in range(cfg.n_layers):
            p = f"layers.{l}."
            if cfg.invertible:
                out.append((p + "attn UB/c", float(m.attn_bound(l)) / c, 1.05))
                s1, s2 = m.ffn_sigmas(l)
                out.append((p + "ffn sigma1/c1", float(s1) / m.ffn_c1, 1.05))
                out.append((p + "ffn sigma2/c", float(s2) / c, 1.05))
            if cfg.attn.bound == "tied-l2" and cfg.invertible and cfg.lip_norm == "inf":
                wq, wv, wo = m.p(p + "attn.wq"), m.p(p + "attn.wv"), m.p(p + "attn.wo")
                cb = D // H
                rows = wq.abs().reshape(D, H, cb).sum(-1)          # [D,H]: argmax over rows per head
                cols = wq.abs().sum(0).reshape(H, cb)              # argmax over columns per head
                for h in range(H):
                    out.append((p + f"wq rows h{h} gap", top2_gap(rows[:, h]), MARGIN))
                    out.append((p + f"wq cols h{h} gap", top2_gap(cols[h]), MARGIN))
                    out.append((p + f"wv cols h{h} gap", top2_gap(wv.abs().sum(0).reshape(H, cb)[h]), MARGIN))
                prod = norm_inf_blocks(wq, False, H) * norm_inf_blocks(wq, True, H)
                out.append((p + "max_h wq gap", top2_gap(prod), MARGIN))
                out.append((p + "max_h wv gap", top2_gap(norm_inf_blocks(wv, True, H)), MARGIN))
                out.append((p + "wo cols gap", top2_gap(wo.abs().sum(0)), MARGIN))
    return out


def kink_margin(m: LiptTransformer, ids):
    """Smallest relative distance of a feed-forward pre-activation to the activation's kink, per layer relative
    to max |pre-activation|: |x| for ReLU, |u - v| of each pair for maxmin (a kink within rounding would make the
    golden gradient ill-determined). The pre-activations are the ones the forward pass hands the activation."""
    pre = []
    act = m._activation
    m._activation = lambda l, x: (pre.append(x.detach()), act(l, x))[1]
    try:
        with torch.no_grad():
            m(ids)
    finally:
        del m._activation
    worst = math.inf
    for x in pre:
        gap = (x[..., 0::2] - x[..., 1::2]) if m.cfg.activation == "maxmin" else x
        worst = min(worst, float(gap.abs().min()) / float(x.abs().max()))
    return worst


def clip_stats(m: LiptTransformer, ids):
    """clipped-dp: per layer, (rows clipped, rows, least |(|x_i| / R) - 1|) of the rows its attention clips (a
    row norm within rounding of R would make the golden gradient ill-determined)."""
    out = []
    R = m.cfg.radius
    with torch.no_grad():
        x = m.embed(ids)
        for l in range(m.cfg.n_layers):
            n = torch.sqrt((x.double() ** 2).sum(-1)).flatten()
            out.append((int((n > R).sum()), n.numel(), float((n / R - 1).abs().min())))
            x = m.block(l, x)
    return out


def run_recipe(cfg, vals, ids, targets, dtype, check=None):
    """Forward + backward at vals, then STEPS of AdamW + refresh; check(model) runs before each forward."""
    ids_t, tg_t = torch.as_tensor(ids, dtype=torch.int64), torch.as_tensor(targets, dtype=torch.int64)
    m = build(cfg, vals, dtype)
    m.train()
    logits, loss = m(ids_t, tg_t)
    loss.backward()
    res = {"logits": logits.detach().clone(), "loss": loss.detach().reshape(1).clone(),
           "grads": {n: m.p(n).grad.detach().clone() for n in m.trainable_names()}}
    m = build(cfg, vals, dtype)
    m.train()
    opt = torch.optim.AdamW(m.param_groups(ADAMW["weight_decay"]), lr=ADAMW["lr"],
                            betas=(ADAMW["beta1"], ADAMW["beta2"]), eps=ADAMW["eps"], foreach=False)
    losses = []
    for _ in range(STEPS):
        if check:
            check(m)
        opt.zero_grad(set_to_none=False)
        _, loss = m(ids_t, tg_t)
        loss.backward()
        opt.step()
        m.refresh_norms(cfg.power_iters)
        losses.append(loss.detach().reshape(1))
    if check:
        check(m)
    res["step_loss"] = torch.cat(losses)
    res["final"] = {n: t.clone() for n, t in m.lipt_state_dict().items()}
    return res


def rel(a, b):
    a, b = torch.as_tensor(a).double(), torch.as_tensor(b).double()
    return float((a - b).abs().max() / max(float(b.abs().max()), 1e-30))


def make_variant(stem, overrides, seed, T, verbose=True):
    cfg = LiptConfig(**{**COMMON, **overrides})
    rs = np.random.RandomState(seed)
    ids = rs.randint(0, cfg.vocab_size, size=(B, T)).astype(np.int32)
    targets = rs.randint(0, cfg.vocab_size, size=(B, T)).astype(np.int32)
    vals = draw_values(cfg, rs)

    failures = []

    ids_t = torch.as_tensor(ids, dtype=torch.int64)

    def check(m):
        for name, v, need in margins(m):
            if not v >= need:
                failures.append(f"{name} = {v:.3g} < {need:g}")
        if cfg.activation in ("relu", "maxmin"):
            r = kink_margin(m, ids_t)
            if not r >= 1e-4:
                failures.append(f"{cfg.activation} pre-activation margin {r:.3g} < 1e-4")
        if cfg.attn.clip_rows:
            for l, (_, _, gap) in enumerate(clip_stats(m, ids_t)):
                if not gap >= CLIP_MARGIN:
                    failures.append(f"layer {l} clip: a row norm within {gap:.3g} of R")

    r32 = run_recipe(cfg, vals, ids, targets, torch.float32, check)
    if failures:
        raise RuntimeError(f"{stem}: the drawn values do not meet the golden conditions (change the seed): "
                           + "; ".join(failures))
    r64 = run_recipe(cfg, {k: v.astype(np.float64) for k, v in vals.items()}, ids, targets, torch.float64)
    # every compared tensor must be pinned down by float32 far below the test's tolerance (a gradient that is a
    # sum with heavy cancellation, e.g. a one-element ffn.beta, would not be)
    loose = [(k, rel(r32[k], r64[k])) for k in ("logits", "loss", "step_loss")]
    loose += [("grad/" + n, rel(r32["grads"][n], r64["grads"][n])) for n in r32["grads"]]
    loose += [("final/" + n, rel(r32["final"][n], r64["final"][n])) for n in r32["final"]]
    loose = [f"{k} {e:.1e}" for k, e in loose if not e <= PRECISION]
    if loose:
        raise RuntimeError(f"{stem}: float32 does not pin down (float32 vs float64 > {PRECISION:g}; change the "
                           "seed): " + ", ".join(loose))

    # the refreshes must move the buffers (else the test could not see a missing refresh)
    buf_names = [n for n, _, k in LiptTransformer(cfg).specs if k == KIND_BUFFER]
    buf_move = min((rel(r32["final"][n], vals[n]) for n in buf_names), default=math.inf)

    m0 = build(cfg, vals, torch.float32)
    m0.eval()
    lip = [m0.layer_lipschitz(l) for l in range(cfg.n_layers)]
    clips = clip_stats(m0, ids_t) if cfg.attn.clip_rows else []
    if clips:
        n_clip, n_rows = sum(c[0] for c in clips), sum(c[1] for c in clips)
        if not 0 < n_clip < n_rows:
            raise RuntimeError(f"{stem}: the radius clips {n_clip} of {n_rows} rows (want some but not all)")

    entries = [("variant", DT_TEXT, stem), ("config", DT_TEXT, config_text(cfg)),
               ("recipe", DT_TEXT,
                "PyTorch %s, float32, numpy seed %d. Forward + backward at param/*; then %d steps of zero_grad, "
                "forward, backward, AdamW (torch.optim.AdamW, foreach=False, no-decay set of lipt), "
                "refresh_norms(power_iters); no clipping, dropout 0.\n" % (torch.__version__, seed, STEPS)),
               ("adamw", DT_F64, np.array([ADAMW[k] for k in ("lr", "beta1", "beta2", "eps", "weight_decay")])),
               ("steps", DT_I32, np.array([STEPS])),
               ("ids", DT_I32, ids), ("targets", DT_I32, targets)]
    entries += [("param/" + n, DT_F32, v) for n, v in vals.items()]
    entries += [("logits", DT_F32, r32["logits"].numpy()), ("loss", DT_F32, r32["loss"].numpy())]
    entries += [("grad/" + n, DT_F32, g.numpy()) for n, g in r32["grads"].items()]
    entries += [("step_loss", DT_F32, r32["step_loss"].numpy())]
    entries += [("final/" + n, DT_F32, t.numpy()) for n, t in r32["final"].items()]
    if cfg.invertible:
        entries += [("lipschitz/" + k, DT_F32, np.array([d[k] for d in lip]))
                    for k in ("attn_bound", "attn_factor", "sigma1", "sigma2", "ffn_factor1", "ffn_factor2")]
    if cfg.invertible or cfg.coupling:  # coupling blocks are inverted exactly (x = y - g(y) on each half)
        x0s, x0t, toks, iters = [], [], [], []
        for b in range(B):
            inv = m0.invert(ids[b], **INVERT)
            if not all(inv["converged"]) or not np.array_equal(inv["tokens"].numpy(), ids[b]):
                raise RuntimeError(f"{stem}: inversion of row {b} failed: {inv}")
            x0s.append(inv["x0"].numpy()); x0t.append(inv["x0_true"].numpy())
            toks.append(inv["tokens"].numpy().astype(np.int32)); iters.append(np.array(inv["iters"], np.int32))
        entries += [("invert/opts", DT_F64, np.array([INVERT["tol"], INVERT["max_iter"]], np.float64)),
                    ("invert/ids", DT_I32, ids), ("invert/x0", DT_F32, np.stack(x0s)),
                    ("invert/x0_true", DT_F32, np.stack(x0t)), ("invert/tokens", DT_I32, np.stack(toks)),
                    ("invert/iters", DT_I32, np.stack(iters))]

    if verbose:
        g_rel = max(rel(r32["grads"][n], r64["grads"][n]) for n in r32["grads"])
        f_rel = max(rel(r32["final"][n], r64["final"][n]) for n in r32["final"])
        print(f"{stem:16s} T {T}, loss {float(r32['loss']):.6f}  step losses {np.round(r32['step_loss'].numpy(), 6)}")
        print(f"{'':16s} float32 vs float64: logits {rel(r32['logits'], r64['logits']):.1e}  "
              f"loss {rel(r32['loss'], r64['loss']):.1e}  grads {g_rel:.1e}  "
              f"step losses {rel(r32['step_loss'], r64['step_loss']):.1e}  final params {f_rel:.1e}")
        gmin = min(float(g.abs()[g != 0].min()) / float(g.abs().max()) for g in r32["grads"].values()
                   if bool((g != 0).any()))
        print(f"{'':16s} smallest nonzero |grad| / max per tensor {gmin:.1e}; least buffer move by the "
              f"refreshes {buf_move:.1e}")
        if cfg.invertible:
            for l, d in enumerate(lip):
                p = f"layers.{l}."
                with torch.no_grad():
                    est = [float(spectral_sigma(m0.p(p + w), m0.p(p + u), m0.p(p + v), 1)) for w, u, v in
                           (("ffn.w1", "ffn.sn1.u", "ffn.sn1.v"), ("ffn.w2", "ffn.sn2.u", "ffn.sn2.v"))]
                print(f"{'':16s} layer {l}: UB {d['attn_bound']:.4g} factor {d['attn_factor']:.4g}  "
                      f"sigma1 {d['sigma1']:.4g} sigma2 {d['sigma2']:.4g} (certified; u^T W v of the buffers "
                      f"{est[0]:.4g}, {est[1]:.4g})")
            for l, (nc, nr, gap) in enumerate(clips):
                print(f"{'':16s} layer {l}: clipped rows {nc} of {nr} (R {cfg.radius:.4g}), least "
                      f"| |x|/R - 1 | {gap:.1e}")
        if cfg.activation in ("relu", "maxmin"):
            print(f"{'':16s} least {cfg.activation} kink margin at the initial weights {kink_margin(m0, ids_t):.1e}")
        if cfg.invertible or cfg.coupling:
            it = np.stack(iters)
            x0err = max(float(np.abs(a - b).max()) for a, b in zip(x0s, x0t))
            print(f"{'':16s} inversion: iterations per map {it.tolist()}, max|x0 - x0_true| {x0err:.1e}")
        ms = margins(m0)
        if ms:
            gaps = [v for n, v, need in ms if need == MARGIN]
            if gaps:
                print(f"{'':16s} least argmax gap at the initial weights {min(gaps):.1e}")
    if buf_names and not buf_move > 1e-3:
        raise RuntimeError(f"{stem}: the refreshes hardly move the buffers ({buf_move:.1e})")
    return encode(entries)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--out", default=os.path.dirname(os.path.abspath(__file__)))
    ap.add_argument("--check", action="store_true", help="compare with the files on disk instead of writing")
    ap.add_argument("stems", nargs="*", help="only these variants (default: all)")
    args = ap.parse_args()
    known = [v[0] for v in VARIANTS]
    unknown = [s for s in args.stems if s not in known]
    if unknown:
        ap.error(f"unknown variant(s) {unknown}; known: {known}")
    bad = 0
    for stem, ov, seed, T in VARIANTS:
        if args.stems and stem not in args.stems:
            continue
        blob = make_variant(stem, ov, seed, T)
        path = os.path.join(args.out, stem + ".bin")
        decode(blob)  # self-check of the encoder
        if args.check:
            same = os.path.exists(path) and open(path, "rb").read() == blob
            print(f"{path}: {'identical' if same else 'DIFFERS' + check_detail(path, blob)}")
            bad += not same
        else:
            with open(path + ".tmp", "wb") as f:
                f.write(blob)
            os.replace(path + ".tmp", path)
            print(f"{'':16s} wrote {path} ({len(blob)} bytes)")
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
