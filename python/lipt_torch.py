"""lipt's Transformer re-implemented in PyTorch (the reference for the golden tests and the PyTorch benchmark).

Every variant of include/lipt/model.h: pre-LN blocks with DP, untied L2 or tied L2 attention, and the invertible
models (no LayerNorm in the branches, spectrally normalised feed-forward, and either contractive tied L2 attention
normalised by the infinity-, 2- or token-wise (inf2) norm bound, or clipped-dp attention: rows clipped to a ball of
radius R, causal DP attention with a relative-position logit bias, normalised by its token-wise bound; optional
ActNorm after every block). Options: the maxmin (GroupSort) activation, the full ffn budget (W1 normalised to 1,
W2 to c), the MLP head (head_hidden) and additive coupling blocks for the pre-LN variants (coupling).

Conventions follow lipt exactly:
  * parameter names, shapes and registration order are lipt's (models/README.md), e.g. "layers.0.attn.wq";
  * linear maps are y = x W with W [in, out] (not nn.Linear's [out, in]);
  * multi-head tensors are [B, T, D] with head h in columns h*d .. h*d+d-1, d = D / H, s = sqrt(d);
  * attention is always causal (row i sees j <= i);
  * every spectral norm a contractive branch divides by is a certified upper bound by Gram iteration (float64,
    cfg.gram_iters squarings: `gram_spectral_ub`, lipt_spectral_ub), rounded up to float32 in a float32 model;
    its gradient is u v^T from the stored power-iteration buffers held fixed (the forward pass runs no power
    iterations); `refresh_norms(iters)` advances the vectors the way lipt_model_refresh_norms does (in float64,
    written back as float32), to be called after each optimizer step. (lipt's own training step with
    spectral_bound = cholesky instead sets the certified matrices' vectors to its certificates' Lanczos Ritz pairs
    in the forward and skips their power rounds, lipt_model_refresh_after_step; this reference keeps the power
    rounds, so its training trajectories differ there, while every forward value is the same function);
  * AdamW excludes biases, LayerNorm parameters, embeddings and ffn.beta from weight decay (`param_groups`).
The config, the parameter list, the vocabulary and the validating file reader are in lipt_format.py (next to this
file, no torch needed), re-exported here. What differs between the attention kinds comes from the properties of the
kind (cfg.attn, lipt_variants.py: lipt's own variant table, or an export's metadata), never from its name.

Use (python/README.md):
    import lipt_torch
    model, vocab = lipt_torch.load("run/model.safetensors")      # a `lipt export` file
    lipt_torch.score(model, vocab, open("text.txt", "rb").read())  # {"bpc": ..., "nll": ..., "symbols": ...}
    lipt_torch.sample(model, vocab, "The ", 200, temperature=0.8)  # bytes
Lower level:
    from lipt_torch import LiptConfig, LiptTransformer
    cfg = LiptConfig.from_text(open("models/tiny.cfg").read())
    model = LiptTransformer(cfg)                  # zero parameters; then load_lipt_state / init_weights
    model = LiptTransformer.from_safetensors("run/model.safetensors")   # a `lipt export` file
    logits, loss = model(ids, targets)            # ids, targets: int64 [B, T]
"""
from __future__ import annotations

import json
import math
import os
import sys
from collections import OrderedDict
from typing import Dict, List, Optional, Sequence, Tuple

import numpy as np
import torch
import torch.nn.functional as F
from torch import nn

if os.path.dirname(os.path.abspath(__file__)) not in map(os.path.abspath, sys.path):
    sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))  # lipt_format.py lives next to this file
from lipt_format import (ACTIVATIONS, ATTENTIONS, BOUND_VECTORS, CONTRACTIVE_ATTENTIONS, FFNS,  # noqa: F401
                         KIND_BUFFER, KIND_DECAY, KIND_NO_DECAY, LIP_NORMS, MAX_MODEL_BYTES, SPECTRAL_CHOLESKY,
                         AttnProps, LiptConfig, SafetensorsError, Vocab, _f32, parameter_specs, read_export,
                         read_safetensors)
from lipt_variants import LOGIT_MAPS

LIPSWISH_SCALE = 1.1
REL_BIAS_GAIN = 8.0  # LIPT_REL_BIAS_GAIN: the logit bias of clipped-dp is REL_BIAS_GAIN * attn.rel_bias
INVERT_TOL = 1e-6  # LIPT_INVERT_TOL (include/lipt/invert.h): the inversion's default relative tolerance
INVERT_MAX_ITER = 100  # LIPT_INVERT_MAX_ITER: its default iteration cap per map




# ----------------------------------------------------------------------------- maths shared with lipt's ops

def lambert_w0(x: float) -> float:
    """Principal branch of Lambert W for x >= -1/e (Halley iteration in double)."""
    if x < -1.0 / math.e:
        raise ValueError("lambert_w0: x < -1/e")
    if x == 0.0:
        return 0.0
    w = math.log1p(x) if x < 3.0 else math.log(x) - math.log(math.log(x))
    for _ in range(100):
        ew = math.exp(w)
        f = w * ew - x
        wp1 = w + 1.0
        if wp1 == 0.0:
            break
        step = f / (ew * wp1 - (w + 2.0) * f / (2.0 * wp1))
        w -= step
        if abs(step) <= 1e-16 * (1.0 + abs(w)):
            break
    return w


def phi_inv(y: float) -> float:
    """phi^{-1}(y) = W0(y / e), phi(x) = x e^{x+1} (SPEC section 2)."""
    return lambert_w0(y / math.e)


def contract_factor(x: torch.Tensor, c: float) -> torch.Tensor:
    """1 / max(1, x / c) of a one-element tensor, differentiated through x (lipt_contract_factor)."""
    return torch.where(x / c > 1, c / x, torch.ones_like(x))


def norm_inf_blocks(w: torch.Tensor, transpose: bool, n_blocks: int) -> torch.Tensor:
    """Induced infinity norms of the column blocks of w [R, C] (lipt_norm_inf): transpose False gives the max abs
    row sum of each block, True the max abs column sum. Subgradient at the (first) argmax."""
    R, C = w.shape
    cb = C // n_blocks
    a = w.abs()
    if not transpose:
        return a.reshape(R, n_blocks, cb).sum(-1).max(dim=0).values
    return a.sum(0).reshape(n_blocks, cb).max(dim=1).values


def spectral_sigma(w: torch.Tensor, u: torch.Tensor, v: torch.Tensor, n_blocks: int) -> torch.Tensor:
    """sigma_b = u_b^T W_b v_b for the column blocks of w [R, C] with fixed vectors u [n_blocks*R], v [C]
    (lipt_spectral_norm with iters = 0): the gradient is u v^T. The power-iteration estimate: below sigma unless
    the vectors have converged; the contractive branches divide by `spectral_ub` instead."""
    R, C = w.shape
    cb = C // n_blocks
    wb = w.reshape(R, n_blocks, cb)
    u = u.detach().to(w.dtype).reshape(n_blocks, R)
    v = v.detach().to(w.dtype).reshape(n_blocks, cb)
    return torch.einsum("br,rbc,bc->b", u, wb, v)




def cholesky_top_ub(g: torch.Tensor) -> float:
    """lipt_spectral_verify_top for the float64 Gram matrix g: an estimate of lambda_max (here eigvalsh; lipt uses
    Lanczos), then mu = theta (1 + delta) for delta = 2^-20, 2^-13, 2^-6 until the Cholesky factorisation of
    mu I - g succeeds; mu plus the proof's margin gamma_{n+1} tr(mu I - g) (lipt adds its last-ulp terms too).
    0.0 when no mu is proven (the caller falls back on Gram iteration)."""
    n = g.shape[0]
    theta = float(torch.linalg.eigvalsh(g)[-1])
    if not (theta > 0 and math.isfinite(theta)):
        return 0.0
    eye = torch.eye(n, dtype=g.dtype)
    for delta in (2.0 ** -20, 2.0 ** -13, 2.0 ** -6):
        mu = theta + theta * delta
        b = mu * eye - g
        if int(torch.linalg.cholesky_ex(b).info) == 0:
            gam = (n + 1) * 2.0 ** -53 / (1 - (n + 1) * 2.0 ** -53)
            return mu + gam / (1 - gam) * float(b.diagonal().sum())
    return 0.0


def gram_spectral_ub(w: torch.Tensor, n_blocks: int, gram_iters: int) -> List[float]:
    """lipt_spectral_ub of each column block W_b (R x cb) of w, in float64: G = W_b^T W_b if cb <= R else
    W_b W_b^T; `gram_iters` squarings G <- (G / 2^e)^2 with 2^e just above ||G||_F (exact rescaling); the bound is
    ||G_t||_F^(1/2^(t+1)) with the scales put back, i.e. ||G_0^(2^t)||_F^(1/2^(t+1)) >= sigma(W_b). lipt squares in
    float32 and adds a rounding margin for that (about n 2^-24, 1e-6 relative at these sizes) that is left out
    here. +inf for a non-finite block, 0 for
    a zero block. With SPECTRAL_CHOLESKY in gram_iters: sqrt(cholesky_top_ub(G)) when that finds a proof."""
    cholesky = bool(gram_iters & SPECTRAL_CHOLESKY)
    gram_iters &= ~SPECTRAL_CHOLESKY
    wd = w.detach().double()
    R, C = wd.shape
    cb = C // n_blocks
    out = []
    for b in range(n_blocks):
        a = wd[:, b * cb:(b + 1) * cb]
        if not bool(torch.isfinite(a).all()):
            out.append(math.inf)
            continue
        if not bool((a != 0).any()):
            out.append(0.0)
            continue
        g = a @ a.t() if cb > R else a.t() @ a
        top = cholesky_top_ub(g) if cholesky else 0.0
        if top > 0:
            out.append(math.sqrt(top))
            continue
        scales = []
        for _ in range(gram_iters):
            s = float((g * g).sum())
            e = math.frexp(math.sqrt(s))[1] if s > 0 and math.isfinite(s) else 0
            g = g * math.ldexp(1.0, -e)
            scales.append(e)
            g = g @ g
        c = math.sqrt(float((g * g).sum()))      # >= rho(G_t)
        for e in reversed(scales):
            c = math.ldexp(math.sqrt(c), e)      # >= rho(G_k)
        out.append(math.sqrt(c))                 # >= sigma(W_b) = sqrt(rho(G_0))
    return out


def _float_up(x: float) -> float:
    """The float32 value lipt_spectral_norm_ub returns for the double x: rounded to nearest, then up if below."""
    f = np.float32(x)
    if math.isfinite(x) and float(f) < x:
        f = np.nextafter(f, np.float32(np.inf))
    return float(f)


def spectral_ub(w: torch.Tensor, u: torch.Tensor, v: torch.Tensor, n_blocks: int, gram_iters: int) -> torch.Tensor:
    """lipt_spectral_norm_ub with power_iters = 0: the value is the certified bound `gram_spectral_ub` (rounded up
    to float32 in a float32 model), a constant; the gradient is that of u_b^T W_b v_b (u v^T, vectors fixed)."""
    vals = gram_spectral_ub(w, n_blocks, gram_iters)
    if w.dtype == torch.float32:
        vals = [_float_up(x) for x in vals]
    est = spectral_sigma(w, u, v, n_blocks)
    return torch.tensor(vals, dtype=w.dtype) + (est - est.detach())


BOUND_BLOCKS = {"uq": "H", "vq": "H", "uv": "H", "vv": "H", "uo": 1, "vo": 1, "uk": "H", "vk": "H"}


def _reseed_val(which: int, b: int, j: int) -> float:
    """src/lipschitz/spectral.c reseed_val: a deterministic dense restart for a degenerate power iteration."""
    m = (1 << 64) - 1
    z = ((((2 * b + which) & 0xFFFFFFFF) << 32 | (j & 0xFFFFFFFF)) + 0x9E3779B97F4A7C15) & m
    z = ((z ^ (z >> 30)) * 0xBF58476D1CE4E5B9) & m
    z = ((z ^ (z >> 27)) * 0x94D049BB133111EB) & m
    z ^= z >> 31
    return (z >> 11) * 2.0 ** -52 - 1.0


def _normalise(x: torch.Tensor) -> Optional[torch.Tensor]:
    n = float(torch.sqrt((x * x).sum()))
    if not (n > 0) or not math.isfinite(n):
        return None
    return x / n


@torch.no_grad()
def power_iterate(w: torch.Tensor, u: torch.Tensor, v: torch.Tensor, n_blocks: int, iters: int) -> None:
    """`iters` rounds v <- W_b^T u / |.|, u <- W_b v / |.| per column block, in float64, written back into the
    (float32) vectors u and v in place, as src/lipschitz/spectral.c power_block does."""
    if iters <= 0:
        return
    R, C = w.shape
    cb = C // n_blocks
    wd = w.detach().double()
    for b in range(n_blocks):
        wb = wd[:, b * cb:(b + 1) * cb]
        du = u[b * R:(b + 1) * R].double()
        dv = None
        for _ in range(iters):
            dv = _normalise(wb.t() @ du)
            if dv is None:
                dv = _normalise(torch.tensor([_reseed_val(0, b, j) for j in range(cb)], dtype=torch.float64))
            du_n = _normalise(wb @ dv)
            du = du_n if du_n is not None else _normalise(
                torch.tensor([_reseed_val(1, b, i) for i in range(R)], dtype=torch.float64))
        u[b * R:(b + 1) * R] = du.to(u.dtype)
        v[b * cb:(b + 1) * cb] = dv.to(v.dtype)


def bound_l2_inf(wq: torch.Tensor, wv: torch.Tensor, wo: torch.Tensor, H: int, N: int) -> torch.Tensor:
    """lipt_bound_l2_inf: (4 phi^{-1}(N-1) + 1/s) ||W^O^T||_inf max_h(||W^{Q,h}||_inf ||W^{Q,h}^T||_inf)
    max_h ||W^{V,h}^T||_inf, one element."""
    d = wq.shape[0] // H
    lead = 4.0 * phi_inv(float(N - 1)) + 1.0 / math.sqrt(d)
    q_max = (norm_inf_blocks(wq, False, H) * norm_inf_blocks(wq, True, H)).max().reshape(1)
    v_max = norm_inf_blocks(wv, True, H).max().reshape(1)
    o = norm_inf_blocks(wo, True, 1)
    return q_max * v_max * o * _f32(lead)


def bound_l2_2(wq: torch.Tensor, wv: torch.Tensor, wo: torch.Tensor, H: int, N: int,
               vec: Dict[str, torch.Tensor], gram_iters: int) -> torch.Tensor:
    """lipt_bound_l2_2 with iters = 0: (sqrt(N)/s)(4 phi^{-1}(N-1) + 1) sqrt(sum_h ||W^{Q,h}||^4 ||W^{V,h}||^2)
    ||W^O||, certified spectral norms (`spectral_ub`, gradient from the persistent vectors)."""
    d = wq.shape[0] // H
    lead = math.sqrt(N) / math.sqrt(d) * (4.0 * phi_inv(float(N - 1)) + 1.0)
    sq = spectral_ub(wq, vec["uq"], vec["vq"], H, gram_iters)
    sv = spectral_ub(wv, vec["uv"], vec["vv"], H, gram_iters)
    so = spectral_ub(wo, vec["uo"], vec["vo"], 1, gram_iters)
    t = sq * sq * sv
    return torch.sqrt((t * t).sum()).reshape(1) * so * _f32(lead)


def bound_l2_inf2(wq: torch.Tensor, wv: torch.Tensor, wo: torch.Tensor, H: int, N: int,
                  vec: Dict[str, torch.Tensor], gram_iters: int) -> torch.Tensor:
    """lipt_bound_l2_inf2 with iters = 0 (token-wise norm max_i |x_i|_2): ||W^O|| sqrt(sum_h L_h^2),
    L_h = (1 + 6 phi^{-1}(N-1)) ||W^{Q,h}||^2 ||W^{V,h}|| / s, certified spectral norms."""
    d = wq.shape[0] // H
    lead = (1.0 + 6.0 * phi_inv(float(N - 1))) / math.sqrt(d)
    sq = spectral_ub(wq, vec["uq"], vec["vq"], H, gram_iters)
    sv = spectral_ub(wv, vec["uv"], vec["vv"], H, gram_iters)
    so = spectral_ub(wo, vec["uo"], vec["vo"], 1, gram_iters)
    t = sq * sq * sv
    return torch.sqrt((t * t).sum()).reshape(1) * so * _f32(lead)


def bound_clipped_dp(wq: torch.Tensor, wk: torch.Tensor, wv: torch.Tensor, wo: torch.Tensor, H: int, R: float,
                     vec: Dict[str, torch.Tensor], gram_iters: int) -> torch.Tensor:
    """lipt_bound_clipped_dp with iters = 0: ||W^O|| sqrt(sum_h L_h^2), L_h = ||W^{V,h}|| (1 + 2 tau_h),
    2 tau_h = (2 R^2 / s) ||W^{Q,h}|| ||W^{K,h}||, certified spectral norms; independent of N."""
    d = wq.shape[0] // H
    sq = spectral_ub(wq, vec["uq"], vec["vq"], H, gram_iters)
    sk = spectral_ub(wk, vec["uk"], vec["vk"], H, gram_iters)
    sv = spectral_ub(wv, vec["uv"], vec["vv"], H, gram_iters)
    so = spectral_ub(wo, vec["uo"], vec["vo"], 1, gram_iters)
    two_tau = (sq * sk) * _f32(2.0 * R * R / math.sqrt(d))
    lh = sv * (two_tau + 1.0)
    return torch.sqrt((lh * lh).sum()).reshape(1) * so


def clip_rows(x: torch.Tensor, R: float) -> torch.Tensor:
    """lipt_clip_rows: each row (last dim) times min(1, R / |row|_2), the norm in float64 as lipt; the gradient
    of a clipped row is (R/|x|)(dy - x^ (x^ . dy))."""
    n = torch.sqrt((x.double() * x.double()).sum(-1, keepdim=True))
    return x * (R / n.clamp_min(R)).to(x.dtype)


def maxmin(x: torch.Tensor) -> torch.Tensor:
    """lipt_maxmin (GroupSort, groups of 2 over the last dim): pairs (2k, 2k+1) -> (max, min); a tie keeps the
    order, so each output takes its gradient from one input."""
    u, v = x[..., 0::2], x[..., 1::2]
    keep = u >= v
    return torch.stack((torch.where(keep, u, v), torch.where(keep, v, u)), dim=-1).reshape(x.shape)


def layer_norm(x: torch.Tensor, g: torch.Tensor, b: torch.Tensor, eps: float) -> torch.Tensor:
    mu = x.mean(-1, keepdim=True)
    var = ((x - mu) ** 2).mean(-1, keepdim=True)
    return (x - mu) / torch.sqrt(var + eps) * g + b


# ----------------------------------------------------------------------------- the model

def _safe(name: str) -> str:
    return name.replace(".", "__")


class LiptTransformer(nn.Module):
    """lipt_model. Parameters and buffers are registered under lipt's names with '.' spelled '__'; use
    `p(name)` / `lipt_state_dict()` / `load_lipt_state()` with lipt's spelling."""

    def __init__(self, cfg: LiptConfig, dtype: torch.dtype = torch.float32):
        super().__init__()
        cfg.validate()
        self.cfg = cfg
        self.specs = parameter_specs(cfg)
        self.kinds = OrderedDict((n, k) for n, _, k in self.specs)
        for name, shape, kind in self.specs:
            t = torch.zeros(shape, dtype=dtype)
            if kind == KIND_BUFFER:
                self.register_buffer(_safe(name), t)
            else:
                self.register_parameter(_safe(name), nn.Parameter(t))

    # ---- access
    def p(self, name: str) -> torch.Tensor:
        return getattr(self, _safe(name))

    def has(self, name: str) -> bool:
        return name in self.kinds

    def trainable_names(self) -> List[str]:
        return [n for n, k in self.kinds.items() if k != KIND_BUFFER]

    def lipt_state_dict(self) -> "OrderedDict[str, torch.Tensor]":
        """Every parameter and buffer under lipt's name, in registration order (detached)."""
        return OrderedDict((n, self.p(n).detach()) for n in self.kinds)

    @torch.no_grad()
    def load_lipt_state(self, state: Dict[str, object], strict: bool = True) -> None:
        """Copy values (arrays or tensors, lipt layout) by lipt name; strict: every name must be present."""
        for name, shape, _ in self.specs:
            if name not in state:
                if strict:
                    raise KeyError(f"missing tensor {name!r}")
                continue
            val = torch.as_tensor(np.array(state[name], dtype=np.float32))  # a writable copy
            if tuple(val.shape) != tuple(shape):
                raise ValueError(f"{name}: shape {tuple(val.shape)}, expected {tuple(shape)}")
            self.p(name).copy_(val.to(self.p(name).dtype))
        if strict:
            extra = [k for k in state if k not in self.kinds]
            if extra:
                raise KeyError(f"unexpected tensors {extra}")

    def param_groups(self, weight_decay: float) -> List[dict]:
        """torch.optim.AdamW groups with lipt's no-decay set (biases, norms, embeddings, ffn.beta)."""
        dec = [self.p(n) for n, k in self.kinds.items() if k == KIND_DECAY]
        nod = [self.p(n) for n, k in self.kinds.items() if k == KIND_NO_DECAY]
        return [{"params": dec, "weight_decay": weight_decay}, {"params": nod, "weight_decay": 0.0}]

    @classmethod
    def from_safetensors(cls, path: str, dtype: torch.dtype = torch.float32,
                         max_bytes: int = MAX_MODEL_BYTES) -> "LiptTransformer":
        """A model from a `lipt export` file, validated first (lipt_format.read_export): the config from its
        metadata, every tensor by name."""
        cfg, tensors, _, _ = read_export(path, max_bytes)
        model = cls(cfg, dtype)
        model.load_lipt_state(tensors)
        return model

    @torch.no_grad()
    def init_weights(self, seed: int = 1234) -> None:
        """lipt's initialisation scheme (models/README.md) drawn from torch's generator (not lipt's RNG, so the
        values differ from lipt's; the distributions are the same), then 100 power-iteration rounds."""
        cfg, gen = self.cfg, torch.Generator().manual_seed(seed)
        D, H = cfg.d_model, cfg.n_heads
        d = D // H
        emb_std = math.sqrt(0.5) if cfg.invertible else 0.02
        out_std = 0.02 / math.sqrt(2.0 * max(cfg.n_layers, 1))
        qk_std = {"small": 0.02, "l2": 1.0 / (math.sqrt(D) * d ** 0.25),
                  "clipped": 0.5 / math.sqrt(D * math.sqrt(d))}[cfg.attn.qk_init]
        for name, shape, kind in self.specs:
            t = self.p(name)
            leaf = name.split(".", 2)[-1] if name.startswith("layers.") else name
            if kind == KIND_BUFFER:
                t.copy_(torch.randn(shape, generator=gen, dtype=t.dtype))
                continue
            std = {"tok_emb": emb_std, "pos_emb": emb_std, "attn.wv": 0.02, "attn.wo": out_std, "ffn.w1": 0.02,
                   "ffn.w2": out_std, "head.w": 0.02, "head.w1": 0.02,
                   "attn.wq": qk_std, "attn.wk": qk_std}.get(leaf)
            if std is not None:
                t.copy_(torch.randn(shape, generator=gen, dtype=t.dtype) * std)
            elif leaf == "attn.rel_bias":
                # ALiBi-like start: head h prefers recent tokens with slope 2^(-8(h+1)/H) per step of distance
                slope = torch.tensor([2.0 ** (-8.0 * (h + 1) / H) for h in range(H)], dtype=torch.float64)
                dist = torch.arange(cfg.seq_len, dtype=torch.float64)
                t.copy_((-slope[:, None] * dist[None, :] / REL_BIAS_GAIN).to(t.dtype))
            elif leaf.endswith("gamma") or leaf == "ffn.beta":
                t.fill_(1.0)
            else:
                t.zero_()
        self._normalise_buffers()
        self.refresh_norms(100)

    @torch.no_grad()
    def _normalise_buffers(self) -> None:
        H = self.cfg.n_heads
        for name, _, kind in self.specs:
            if kind != KIND_BUFFER:
                continue
            t = self.p(name)
            nb = BOUND_BLOCKS[name.rsplit(".", 1)[-1]] if ".bound." in name else 1
            nb = H if nb == "H" else nb
            tb = t.view(nb, -1)
            tb /= tb.norm(dim=1, keepdim=True)

    # ---- spectral-norm bookkeeping
    def bound_vectors(self, l: int) -> Dict[str, torch.Tensor]:
        return {k: self.p(f"layers.{l}.attn.bound.{k}") for k in BOUND_VECTORS[:self.cfg.n_bound_vectors]}

    @torch.no_grad()
    def refresh_norms(self, iters: int) -> None:
        """lipt_model_refresh_norms: `iters` power-iteration rounds on every spectral-norm vector set (contractive
        ffn weights; the attention bound's W^Q, W^V, W^O and for clipped-dp W^K). No-op for the non-invertible
        variants."""
        cfg = self.cfg
        if iters <= 0 or not cfg.invertible:
            return
        for l in range(cfg.n_layers):
            p = f"layers.{l}."
            power_iterate(self.p(p + "ffn.w1"), self.p(p + "ffn.sn1.u"), self.p(p + "ffn.sn1.v"), 1, iters)
            power_iterate(self.p(p + "ffn.w2"), self.p(p + "ffn.sn2.u"), self.p(p + "ffn.sn2.v"), 1, iters)
            if cfg.n_bound_vectors:
                v = self.bound_vectors(l)
                H = cfg.n_heads
                power_iterate(self.p(p + "attn.wq"), v["uq"], v["vq"], H, iters)
                if "uk" in v:
                    power_iterate(self.p(p + "attn.wk"), v["uk"], v["vk"], H, iters)
                power_iterate(self.p(p + "attn.wv"), v["uv"], v["vv"], H, iters)
                power_iterate(self.p(p + "attn.wo"), v["uo"], v["vo"], 1, iters)

    def attn_bound(self, l: int) -> torch.Tensor:
        """UB of the unnormalised contractive attention of layer l (lipt_model_attn_bound: the lip_norm norm,
        N = seq_len, cfg.gram_iters squarings), one element. A contractive kind's bound is clipped-dp or tied-l2
        (lipt_variants.py refuses any other)."""
        cfg, p = self.cfg, f"layers.{l}."
        wq, wv, wo = self.p(p + "attn.wq"), self.p(p + "attn.wv"), self.p(p + "attn.wo")
        if cfg.attn.bound == "clipped-dp":
            return bound_clipped_dp(wq, self.p(p + "attn.wk"), wv, wo, cfg.n_heads, cfg.radius, self.bound_vectors(l),
                                    cfg.gram_arg)
        if cfg.lip_norm == "2":
            return bound_l2_2(wq, wv, wo, cfg.n_heads, cfg.seq_len, self.bound_vectors(l), cfg.gram_arg)
        if cfg.lip_norm == "inf2":
            return bound_l2_inf2(wq, wv, wo, cfg.n_heads, cfg.seq_len, self.bound_vectors(l), cfg.gram_arg)
        return bound_l2_inf(wq, wv, wo, cfg.n_heads, cfg.seq_len)

    def ffn_sigmas(self, l: int) -> Tuple[torch.Tensor, torch.Tensor]:
        """Certified spectral norms of ffn.w1, ffn.w2 (cfg.gram_iters squarings; gradient from ffn.sn*)."""
        p, g = f"layers.{l}.", self.cfg.gram_arg
        s1 = spectral_ub(self.p(p + "ffn.w1"), self.p(p + "ffn.sn1.u"), self.p(p + "ffn.sn1.v"), 1, g)
        s2 = spectral_ub(self.p(p + "ffn.w2"), self.p(p + "ffn.sn2.u"), self.p(p + "ffn.sn2.v"), 1, g)
        return s1, s2

    @torch.no_grad()
    def layer_lipschitz(self, l: int) -> Dict[str, float]:
        """lipt_model_layer_lipschitz(gram_iters = 0): the bound, the factors and the certified sigmas of block
        l."""
        out = {"attn_bound": 0.0, "attn_factor": 1.0, "sigma1": 0.0, "sigma2": 0.0, "ffn_factor1": 1.0,
               "ffn_factor2": 1.0}
        if not self.cfg.invertible:
            return out
        c = _f32(self.cfg.c)
        ub = self.attn_bound(l)
        s1, s2 = self.ffn_sigmas(l)
        out.update(attn_bound=float(ub), attn_factor=float(contract_factor(ub, c)), sigma1=float(s1),
                   sigma2=float(s2), ffn_factor1=float(contract_factor(s1, self.ffn_c1)),
                   ffn_factor2=float(contract_factor(s2, c)))
        return out

    # ---- forward pieces (lipt_model_embed / _branch / _block / _hidden / _logits)
    def embed(self, ids: torch.Tensor) -> torch.Tensor:
        B, T = ids.shape
        if not 1 <= T <= self.cfg.seq_len:
            raise ValueError(f"sequence length {T} outside [1, seq_len = {self.cfg.seq_len}]")
        return self.round_grid(self.p("tok_emb")[ids] + self.p("pos_emb")[:T])

    def round_grid(self, x: torch.Tensor) -> torch.Tensor:
        """coupling_grid = k: x rounded to multiples of 2^-k, the gradient straight through (lipt_round_grid)."""
        k = getattr(self.cfg, "coupling_grid", 0)
        if not k:
            return x
        q = 2.0 ** k
        return x + (torch.round(x * q) / q - x).detach()

    @property
    def ffn_c1(self) -> float:
        """The bound W1 of the contractive feed-forward is normalised to: 1 with ffn_full_budget, else c."""
        return 1.0 if self.cfg.ffn_full_budget else _f32(self.cfg.c)

    def _activation(self, l: int, x: torch.Tensor) -> torch.Tensor:
        a = self.cfg.activation
        if a == "maxmin":
            return maxmin(x)
        if a == "relu":
            return torch.relu(x)
        if a == "elu":
            return F.elu(x)
        if a == "lipswish":
            return x * torch.sigmoid(self.p(f"layers.{l}.ffn.beta") * x) / LIPSWISH_SCALE
        return F.gelu(x)  # exact erf form

    def attention(self, l: int, x: torch.Tensor) -> torch.Tensor:
        """Multi-head causal attention with its output projection (x already layer-normed for pre-LN); each step
        taken as the kind's properties say (cfg.attn), as lipt's forward pass reads its table row."""
        cfg, p, a = self.cfg, f"layers.{l}.", self.cfg.attn
        B, T, D = x.shape
        H, d = cfg.n_heads, cfg.head_dim
        inv_s = 1.0 / math.sqrt(d)
        heads = lambda t: t.reshape(B, T, H, d).transpose(1, 2)  # [B,H,T,d]
        wq, wv = self.p(p + "attn.wq"), self.p(p + "attn.wv")
        if a.clip_rows:
            x = clip_rows(x, cfg.radius)
        qh = heads(x @ wq)
        if a.tied:
            # keys are the queries; values Q_h M_h with M_h = W^{Q,h}^T W^{V,h} / s  [H,d,d]
            kh = qh
            M = torch.einsum("ihc,ihe->hce", wq.reshape(D, H, d), wv.reshape(D, H, d)) * inv_s
            vh = qh @ M.unsqueeze(0)
        else:
            kh = heads(x @ self.p(p + "attn.wk"))
            vh = heads(x @ wv)
        if a.l2_logits:
            # -|q_i - k_j|^2 / s up to the row constant -|q_i|^2 / s, which cancels in the softmax (as lipt)
            logits = (2.0 * (qh @ kh.transpose(-1, -2)) - (kh * kh).sum(-1).unsqueeze(-2)) * inv_s
        else:
            logits = (qh @ kh.transpose(-1, -2)) * inv_s
        if a.logit_map is not None:  # the DP logits' map, before any bias (as lipt_attn_probs_row)
            logits = LOGIT_MAPS[a.logit_map](logits, _f32(a.logit_map_param))
        if self.has(p + "attn.rel_bias"):  # registered for a kind with rel_bias when the config's rel_bias = 1
            # logit (i, j <= i) of head h gets REL_BIAS_GAIN * rel[h, i - j] (j > i is masked below)
            idx = (torch.arange(T)[:, None] - torch.arange(T)[None, :]).clamp_min(0)
            logits = logits + (self.p(p + "attn.rel_bias") * REL_BIAS_GAIN)[:, idx]
        mask = torch.ones(T, T, dtype=torch.bool, device=x.device).tril()
        P = torch.softmax(logits.masked_fill(~mask, float("-inf")), dim=-1)
        y = (P @ vh).transpose(1, 2).reshape(B, T, D)
        wo = self.p(p + "attn.wo")
        if a.contractive:  # the factor scales W^O, as lipt's forward pass does
            wo = wo * contract_factor(self.attn_bound(l), _f32(cfg.c))
        return y @ wo + self.p(p + "attn.bo")

    def feed_forward(self, l: int, x: torch.Tensor) -> torch.Tensor:
        p = f"layers.{l}."
        w1, w2 = self.p(p + "ffn.w1"), self.p(p + "ffn.w2")
        if self.cfg.ffn == "contractive":
            c = _f32(self.cfg.c)
            s1, s2 = self.ffn_sigmas(l)
            w1 = w1 * contract_factor(s1, self.ffn_c1)
            w2 = w2 * contract_factor(s2, c)
        h = self._activation(l, x @ w1 + self.p(p + "ffn.b1"))
        return h @ w2 + self.p(p + "ffn.b2")

    def half_mask(self, second: int, dtype: torch.dtype) -> torch.Tensor:
        """Coupling: ones on channels [0, D/2) (second 0) or [D/2, D) (second 1), zeros elsewhere."""
        D = self.cfg.d_model
        return ((torch.arange(D) >= D // 2) == bool(second)).to(dtype)

    def branch(self, l: int, which: int, x: torch.Tensor) -> torch.Tensor:
        """Residual branch g (0 attention, 1 feed-forward) of block l, without dropout (lipt_model_branch).
        coupling = 1: attention m1 * g_attn(m2 * x), feed-forward m2 * g_ffn(m1 * x), m1 / m2 the masks of the
        first / second half of the channels."""
        if self.cfg.coupling:
            attn = int(which == 0)
            g = self._plain_branch(l, which, x * self.half_mask(attn, x.dtype))
            return g * self.half_mask(1 - attn, x.dtype)
        return self._plain_branch(l, which, x)

    def _plain_branch(self, l: int, which: int, x: torch.Tensor) -> torch.Tensor:
        p, eps = f"layers.{l}.", _f32(self.cfg.ln_eps)
        pre = not self.cfg.invertible and self.cfg.norm == "pre"  # post-LN normalises after the sum instead
        if which == 0:
            xin = layer_norm(x, self.p(p + "ln1.gamma"), self.p(p + "ln1.beta"), eps) if pre else x
            return self.attention(l, xin)
        xin = layer_norm(x, self.p(p + "ln2.gamma"), self.p(p + "ln2.beta"), eps) if pre else x
        return self.feed_forward(l, xin)

    def residual(self, l: int, which: int, x: torch.Tensor, g: torch.Tensor) -> torch.Tensor:
        """lipt_model_residual: x + g, then (norm = post) the branch's LayerNorm, then ActNorm after the ffn."""
        x = x + g
        if self.cfg.norm == "post":
            p, ln = f"layers.{l}.", "ln1" if which == 0 else "ln2"
            x = layer_norm(x, self.p(p + ln + ".gamma"), self.p(p + ln + ".beta"), _f32(self.cfg.ln_eps))
        return self.actnorm(l, x) if which == 1 else x

    def block(self, l: int, x: torch.Tensor) -> torch.Tensor:
        for which in (0, 1):
            g = self.branch(l, which, x)
            if self.training and self.cfg.dropout > 0:
                g = F.dropout(g, self.cfg.dropout, True)
            x = self.residual(l, which, x, self.round_grid(g))
        return x

    def actnorm(self, l: int, x: torch.Tensor) -> torch.Tensor:
        """ActNorm after block l (actnorm = 1): x * exp(log_scale) + bias per channel; identity otherwise."""
        if not self.cfg.actnorm:
            return x
        p = f"layers.{l}.actnorm."
        return x * torch.exp(self.p(p + "log_scale")) + self.p(p + "bias")

    @torch.no_grad()
    def actnorm_inverse(self, l: int, y: torch.Tensor) -> torch.Tensor:
        """The exact inverse of `actnorm`, (y - bias) * exp(-log_scale) in float64 (as lipt_model_invert)."""
        if not self.cfg.actnorm:
            return y
        p = f"layers.{l}.actnorm."
        s, b = self.p(p + "log_scale").double(), self.p(p + "bias").double()
        return ((y.double() - b) * torch.exp(-s)).to(y.dtype)

    def hidden(self, ids: torch.Tensor) -> torch.Tensor:
        x = self.embed(ids)
        for l in range(self.cfg.n_layers):
            x = self.block(l, x)
        return x

    def logits_from_hidden(self, h: torch.Tensor) -> torch.Tensor:
        n = layer_norm(h, self.p("ln_f.gamma"), self.p("ln_f.beta"), _f32(self.cfg.ln_eps))
        if self.cfg.head_hidden > 0:  # the MLP head: GELU (exact erf form) of a hidden layer
            n = F.gelu(n @ self.p("head.w1") + self.p("head.b1"))
        return n @ self.p("head.w") + self.p("head.b")

    def forward(self, ids: torch.Tensor, targets: Optional[torch.Tensor] = None):
        """ids int64 [B,T] -> (logits [B,T,V], mean cross-entropy in nats or None)."""
        logits = self.logits_from_hidden(self.hidden(ids))
        loss = None
        if targets is not None:
            V = logits.shape[-1]
            loss = F.cross_entropy(logits.reshape(-1, V), targets.reshape(-1))
        return logits, loss

    # ---- inversion (lipt_model_invert)
    @torch.no_grad()
    def invert(self, ids: Sequence[int], tol: float = INVERT_TOL, max_iter: int = INVERT_MAX_ITER) -> Dict[str, object]:
        """Forward one sequence to the last hidden state, undo the blocks from the top (ActNorm exactly, then the
        feed-forward map, then the attention map, each by x <- y - g(x) from x = y until
        max|x_{k+1} - x_k| <= tol * max(1, max|x_k|) or the cap), subtract pos_emb and take the nearest token
        embedding. Returns x0 (recovered), x0_true, tokens, iters (per map at 2*l + which), converged."""
        if not self.cfg.invertible and not self.cfg.coupling:
            raise ValueError("inversion needs the invertible model or coupling blocks")
        ids_t = torch.as_tensor(np.asarray(ids, dtype=np.int64)).reshape(1, -1)
        T, L = ids_t.shape[1], self.cfg.n_layers
        x0_true = self.embed(ids_t)
        y = x0_true
        for l in range(L):
            y = self.block(l, y)
        iters, conv = [0] * (2 * L), [0] * (2 * L)
        for l in reversed(range(L)):
            y = self.actnorm_inverse(l, y)
            for which in (1, 0):
                x = y.clone()
                k = 0
                for k in range(1, max_iter + 1):
                    xn = y - self.branch(l, which, x)
                    if not bool(torch.isfinite(xn).all()):
                        raise FloatingPointError(f"inversion of layer {l} branch {which}: non-finite iterate")
                    if self.cfg.lip_norm == "inf2":  # the token-wise norm the maps are certified in
                        diff = float((xn.double() - x.double()).norm(dim=-1).max())
                        xmax = float(x.double().norm(dim=-1).max())
                    else:
                        diff = float((xn.double() - x.double()).abs().max())
                        xmax = float(x.abs().max())
                    x = xn
                    if diff <= tol * max(1.0, xmax):
                        conv[2 * l + which] = 1
                        break
                iters[2 * l + which] = k
                y = x
        x0 = y
        pos = self.p("pos_emb")[:T].double()
        d2 = ((x0[0].double() - pos).unsqueeze(1) - self.p("tok_emb").double().unsqueeze(0)).pow(2).sum(-1)
        tokens = d2.argmin(dim=1)  # first minimum, as lipt
        return {"x0": x0[0], "x0_true": x0_true[0], "tokens": tokens, "iters": iters, "converged": conv}


# ---------------------------------------------------------------------------------------------- the user-facing API

def load(path: str, max_bytes: int = MAX_MODEL_BYTES) -> Tuple[LiptTransformer, Vocab]:
    """A model and its vocabulary from a `lipt export` file, in eval mode. The file is validated before the model is
    built (lipt_format.read_export): SafetensorsError (a ValueError) names the file and what was expected."""
    cfg, tensors, _, vocab = read_export(path, max_bytes, need_vocab=True)
    model = LiptTransformer(cfg)
    model.load_lipt_state(tensors)
    model.eval()
    return model, vocab


@torch.no_grad()
def score(model: LiptTransformer, vocab: Vocab, text, window: Optional[int] = None) -> Dict[str, float]:
    """Bits per character of text[1:] given text[0] as context, in non-overlapping windows of `window` (default
    seq_len) symbols: the protocol of `lipt eval` (whose split is its text with the one symbol before it in front)."""
    ids = vocab.encode(text)
    T = window or model.cfg.seq_len
    if len(ids) < 2:
        raise ValueError("score needs at least two symbols (one of context, one scored)")
    nll, n = 0.0, 0
    for start in range(0, len(ids) - 1, T):
        seg = ids[start:start + T + 1]
        x = torch.tensor([seg[:-1]], dtype=torch.int64)
        y = torch.tensor([seg[1:]], dtype=torch.int64)
        logits, _ = model(x)
        nll += float(F.cross_entropy(logits[0].double(), y[0], reduction="sum"))
        n += len(seg) - 1
    return {"nll": nll / n, "bpc": nll / n / math.log(2.0), "symbols": n}


@torch.no_grad()
def sample(model: LiptTransformer, vocab: Vocab, prompt, n: int, temperature: float = 1.0, seed: int = 0) -> bytes:
    """n symbols after prompt (bytes or str), drawn at `temperature` (0: greedy), the context cut to seq_len."""
    ids = vocab.encode(prompt) if prompt else [0]
    g = torch.Generator().manual_seed(seed)
    out = []
    for _ in range(n):
        x = torch.tensor([ids[-model.cfg.seq_len:]], dtype=torch.int64)
        logits, _ = model(x)
        last = logits[0, -1].double()
        if temperature <= 0:
            nxt = int(last.argmax())
        else:
            nxt = int(torch.multinomial(torch.softmax(last / temperature, -1), 1, generator=g))
        ids.append(nxt)
        out.append(nxt)
    return vocab.decode(out)


if __name__ == "__main__":  # python3 python/lipt_torch.py MODEL.safetensors TEXTFILE: the BPC of the file's text
    import sys
    if len(sys.argv) != 3:
        sys.exit("usage: lipt_torch.py MODEL.safetensors TEXTFILE")
    m, v = load(sys.argv[1])
    with open(sys.argv[2], "rb") as fh:
        r = score(m, v, fh.read())
    print(json.dumps(r))
