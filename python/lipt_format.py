"""lipt's file formats without torch: the model config (LiptConfig), the parameters a config implies
(parameter_specs), the vocabulary with lipt's text mapping (Vocab), and the reader of `lipt export` files
(read_safetensors, read_export), which validates a file as lipt's own checkpoint reader does before anything is
allocated from it. python/lipt_torch.py builds the PyTorch model on top of it (python/README.md). The kinds a config
may name and the properties of each attention kind come from lipt's variant table (lipt_variants.py).

Every problem with a file raises SafetensorsError (a ValueError) naming the file and what was expected."""
from __future__ import annotations

import dataclasses
import json
import math
import os
import re
import stat
import struct
import sys
from collections import OrderedDict
from typing import Dict, List, Optional, Sequence, Tuple

import numpy as np

if os.path.dirname(os.path.abspath(__file__)) not in map(os.path.abspath, sys.path):
    sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))  # lipt_variants.py lives next to this file
from lipt_variants import (ACTIVATIONS, ATTENTIONS, CONTRACTIVE_ATTENTIONS, FFNS, LIP_NORMS, NORMS,  # noqa: F401
                           PRECISIONS, SPECTRAL_BOUNDS, AttnProps, attn_props, names_text, optional_props)

SPECTRAL_CHOLESKY = 1 << 16  # LIPT_SPECTRAL_CHOLESKY: or'd into gram_iters, the Cholesky-verified bound first
BOUND_VECTORS = ("uq", "vq", "uv", "vv", "uo", "vo", "uk", "vk")  # attn.bound.*, registration order

KIND_DECAY, KIND_NO_DECAY, KIND_BUFFER = "decay", "no_decay", "buffer"

# lipt's config parser's ranges (src/nn/config.c set_key; tests/python/config_ranges.py compares them with it): c and
# ln_eps in (0, 1), as lipt refuses c = 1 (no contraction, no inverse); floats: (lo, lo excluded, hi, hi excluded)
INT_RANGES = {"vocab_size": (2, 1 << 24), "d_model": (1, 1 << 16), "n_heads": (1, 1 << 12), "d_ff": (1, 1 << 18),
              "n_layers": (0, 1024), "seq_len": (1, 1 << 20), "power_iters": (0, 10000), "init_seed": (0, 2**64 - 1),
              "rel_bias": (0, 1), "actnorm": (0, 1), "gram_iters": (1, 30), "ffn_full_budget": (0, 1),
              "coupling": (0, 1), "head_hidden": (0, 1 << 18), "coupling_grid": (0, 20),
              "weight_projection": (0, 2)}
FLOAT_RANGES = {"dropout": (0.0, False, 1.0, True), "c": (0.0, True, 1.0, True), "ln_eps": (0.0, True, 1.0, True),
                "clip_radius": (0.0, False, 1e6, False)}

# The reader's caps: a header as large as the safetensors reference reader allows, and a model of 4 GiB of floats
# (1 Gi parameters) unless the caller passes a larger max_bytes
MAX_HEADER_BYTES = 100_000_000
MAX_MODEL_BYTES = 4 << 30


def _f32(x: float) -> float:
    """The float32 value lipt stores for a config float, as a Python float."""
    return float(np.float32(x))


@dataclasses.dataclass
class LiptConfig:
    """lipt_config (include/lipt/config.h), defaults of lipt_config_default."""
    vocab_size: int = 256
    d_model: int = 128
    n_heads: int = 4
    d_ff: int = 512
    n_layers: int = 2
    seq_len: int = 128
    attention: str = "dp"
    ffn: str = "standard"
    activation: str = "gelu"
    dropout: float = 0.0
    c: float = 0.9
    lip_norm: str = "inf"
    power_iters: int = 1
    init_seed: int = 1234
    ln_eps: float = 1e-5
    clip_radius: float = 0.0   # clipped-dp: radius R of the token ball, 0 means sqrt(d_model)
    rel_bias: int = 1          # clipped-dp: 1 learns a relative-position logit bias per head
    actnorm: int = 0           # invertible model: ActNorm x * exp(log_scale) + bias after every block
    gram_iters: int = 8        # Gram-iteration squarings of the certified spectral norms in the forward pass
    ffn_full_budget: int = 0   # contractive ffn: 1 divides W1 by max(1, sigma1) and W2 by max(1, sigma2/c)
    coupling: int = 0          # 1: additive coupling blocks (even d_model; pre-LN dp / l2 / l2-tied with ffn standard,
                               # or the invertible model's certified branches)
    head_hidden: int = 0       # F > 0: the head is ln_f, then GELU(x W1h + b1h) W + b (head.w1 [D,F], head.b1 [F])
    norm: str = "pre"          # "pre": x + f(LN(x)); "post": LN(x + f(x)) (dp, l2, l2-tied without coupling)
    precision: str = "float32"  # lipt's matrix products (float32, bf16, bf16-emulated); this module computes in its
                                # own dtype (torch.autocast gives bf16 products)
    spectral_bound: str = "gram"  # "cholesky": sigma certified by a Cholesky factorisation at an eigenvalue estimate
    coupling_grid: int = 0     # k > 0: coupling blocks' stream and branches rounded to multiples of 2^-k (exact sums)
    weight_projection: int = 0  # invertible model, training only: weights rescaled to their budget after each step
                                # (1: attention W^V, W^O; 2: W^Q, W^K, W^V, W^O; the forward is the same: the factors
                                # stay, now at about 1)
    # not a config key: the properties of `attention` when they come from an export's metadata (attention_info);
    # None (or another kind's) takes them from lipt's table (lipt_variants.attn_props_of)
    attn_info: Optional[AttnProps] = dataclasses.field(default=None, compare=False, repr=False)

    KEYS = ("vocab_size", "d_model", "n_heads", "d_ff", "n_layers", "seq_len", "attention", "ffn", "activation",
            "dropout", "c", "lip_norm", "power_iters", "init_seed", "ln_eps", "clip_radius", "rel_bias", "actnorm",
            "gram_iters", "ffn_full_budget", "coupling", "head_hidden", "norm", "precision", "spectral_bound",
            "coupling_grid", "weight_projection")

    def __post_init__(self):
        self.validate()

    @property
    def attn(self) -> AttnProps:
        """The properties of the attention kind: what the model computes (lipt_attn_info_of(cfg.attention))."""
        return optional_props(self.attn_info, self.attention)

    @property
    def invertible(self) -> bool:
        return self.attn.contractive and self.ffn == "contractive"

    @property
    def head_dim(self) -> int:
        return self.d_model // self.n_heads

    @property
    def radius(self) -> float:
        """lipt_config_clip_radius: clip_radius, or sqrt(d_model) when 0 (as float32)."""
        return _f32(self.clip_radius) if self.clip_radius > 0 else _f32(math.sqrt(self.d_model))

    @property
    def n_bound_vectors(self) -> int:
        """Attention-bound power vectors per layer (lipt_attn_bound_vector_count): 8 for the clipped-dp bound (W^K
        too), 6 for the tied L2 bound with lip_norm 2 or inf2, none unless the attention is contractive."""
        a = self.attn
        if not a.contractive:
            return 0
        return {"clipped-dp": 8, "tied-l2": 0 if self.lip_norm == "inf" else 6}.get(a.bound, 0)

    def validate(self) -> None:
        self._check_ranges()
        a = self.attn  # ValueError for a kind lipt does not know or this module does not implement
        if self.ffn not in FFNS: raise ValueError(f"ffn {self.ffn!r} not in {FFNS}")
        if self.activation not in ACTIVATIONS: raise ValueError(f"activation {self.activation!r} not in {ACTIVATIONS}")
        if self.lip_norm not in LIP_NORMS: raise ValueError(f"lip_norm {self.lip_norm!r} not in {LIP_NORMS}")
        if self.d_model % self.n_heads: raise ValueError(f"n_heads {self.n_heads} does not divide d_model {self.d_model}")
        if a.contractive != (self.ffn == "contractive"):
            raise ValueError(f"attention = {names_text(CONTRACTIVE_ATTENTIONS)} and ffn = contractive go together "
                             f"(the invertible model; got attention = {self.attention}, ffn = {self.ffn})")
        if a.token_norm_only and self.lip_norm != "inf2":
            raise ValueError(f"attention = {self.attention} is certified in the token-wise norm only: it needs "
                             f"lip_norm = inf2")
        if self.actnorm and not self.invertible:
            raise ValueError("actnorm = 1 is an option of the invertible model")
        if self.rel_bias not in (0, 1) or self.actnorm not in (0, 1):
            raise ValueError("rel_bias and actnorm are 0 or 1")
        if not 1 <= self.gram_iters <= 30:
            raise ValueError(f"gram_iters {self.gram_iters} outside [1, 30]")
        if self.spectral_bound not in SPECTRAL_BOUNDS:
            raise ValueError(f"spectral_bound {self.spectral_bound!r} not in {SPECTRAL_BOUNDS}")
        if self.spectral_bound != "gram" and self.ffn != "contractive":
            raise ValueError("spectral_bound = cholesky needs ffn = contractive")
        if not 0 <= self.clip_radius <= 1e6:
            raise ValueError(f"clip_radius {self.clip_radius} outside [0, 1e6]")
        if self.ffn == "contractive" and self.activation == "gelu":
            raise ValueError("the contractive feed-forward needs a 1-Lipschitz activation (relu, elu, lipswish, "
                             "maxmin)")
        if self.activation == "maxmin" and self.d_ff % 2:
            raise ValueError(f"activation = maxmin pairs the hidden units: d_ff {self.d_ff} must be even")
        if self.coupling_grid and not self.coupling:
            raise ValueError("coupling_grid rounds the residual stream of coupling blocks: it needs coupling = 1")
        if self.weight_projection not in (0, 1, 2):
            raise ValueError("weight_projection is 0, 1 or 2")
        if self.weight_projection and not self.invertible:
            raise ValueError(f"weight_projection = {self.weight_projection} rescales the certified branches' "
                             "weights: it needs the invertible model")
        if self.ffn_full_budget not in (0, 1) or self.coupling not in (0, 1):
            raise ValueError("ffn_full_budget and coupling are 0 or 1")
        if not 0 <= self.head_hidden <= 1 << 18:
            raise ValueError(f"head_hidden {self.head_hidden} outside [0, 2^18]")
        if self.precision not in PRECISIONS:
            raise ValueError(f"precision {self.precision!r} not in {PRECISIONS}")
        if self.norm not in NORMS:
            raise ValueError(f"norm {self.norm!r} not in {NORMS}")
        if self.norm == "post" and (self.invertible or self.coupling):
            raise ValueError("norm = post is an option of the non-invertible variants without coupling")
        plain_model = not self.attn.contractive and self.ffn == "standard"
        if self.coupling and (not (plain_model or self.invertible) or self.d_model % 2):
            plain = names_text(n for n in ATTENTIONS if n not in CONTRACTIVE_ATTENTIONS)
            raise ValueError(f"coupling = 1 needs an even d_model and either a pre-LN variant (attention {plain}, "
                             f"ffn standard) or the invertible model's certified branches (ffn contractive)")

    def _check_ranges(self) -> None:
        """The ranges lipt's config parser accepts (src/nn/config.c), types included."""
        for key, (lo, hi) in INT_RANGES.items():
            v = getattr(self, key)
            if type(v) is not int or not lo <= v <= hi:
                raise ValueError(f"{key} = {v!r}: expected an integer in [{lo}, {hi}]")
        for key, (lo, lo_open, hi, hi_open) in FLOAT_RANGES.items():
            v = getattr(self, key)
            ok = isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v)
            for x in ((v, _f32(v)) if ok else ()):
                ok = ok and (x > lo if lo_open else x >= lo) and (x < hi if hi_open else x <= hi)
            if not ok:
                raise ValueError(f"{key} = {v!r}: expected a number in {'(' if lo_open else '['}{lo:g}, {hi:g}"
                                 f"{')' if hi_open else ']'} (also as a float32)")
        for key in ("attention", "ffn", "activation", "lip_norm", "norm", "precision", "spectral_bound"):
            if not isinstance(getattr(self, key), str):
                raise ValueError(f"{key} = {getattr(self, key)!r}: expected a name")

    @classmethod
    def from_text(cls, text: str, attn_info: Optional[AttnProps] = None) -> "LiptConfig":
        """Parse lipt's `key = value` format (comments with #, '-' for '_' in keys, each key once). ValueError on
        anything lipt's own parser refuses. attn_info: the attention kind's properties (an export's metadata)."""
        kw = {}
        types = {f.name: f.type for f in dataclasses.fields(cls)}
        for line in text.splitlines():
            line = line.split("#", 1)[0].strip()
            if not line:
                continue
            key, eq, val = line.partition("=")
            key, val = key.strip().replace("-", "_"), val.strip()
            if not eq:
                raise ValueError(f"config line {line[:40]!r}: expected key = value")
            if key not in cls.KEYS:
                raise ValueError(f"unknown config key {key[:40]!r}")
            if key in kw:
                raise ValueError(f"config key {key!r} is set twice")
            if types[key] in (int, "int"):
                if not re.fullmatch(r"[+-]?[0-9]{1,20}", val):
                    raise ValueError(f"{key} = {val[:40]!r}: expected an integer")
                kw[key] = int(val)
            elif types[key] in (float, "float"):
                if not re.fullmatch(r"[+-]?([0-9]+\.?[0-9]*|\.[0-9]+)([eE][+-]?[0-9]{1,4})?", val):
                    raise ValueError(f"{key} = {val[:40]!r}: expected a number")
                kw[key] = float(val)
            else:
                kw[key] = val
        return cls(**kw, attn_info=attn_info)

    def to_text(self) -> str:
        """lipt_config_to_text's keys (floats with 9 digits, which read back as the same float32; lipt itself now
        writes the shortest such form, e.g. 0.9: the golden files keep the 9-digit text)."""
        g = lambda x: "%.9g" % _f32(x)
        return (f"vocab_size = {self.vocab_size}\nd_model = {self.d_model}\nn_heads = {self.n_heads}\n"
                f"d_ff = {self.d_ff}\nn_layers = {self.n_layers}\nseq_len = {self.seq_len}\n"
                f"attention = {self.attention}\nffn = {self.ffn}\nactivation = {self.activation}\n"
                f"dropout = {g(self.dropout)}\nc = {g(self.c)}\nlip_norm = {self.lip_norm}\n"
                f"power_iters = {self.power_iters}\ninit_seed = {self.init_seed}\nln_eps = {g(self.ln_eps)}\n"
                f"clip_radius = {g(self.clip_radius)}\nrel_bias = {self.rel_bias}\nactnorm = {self.actnorm}\n"
                f"gram_iters = {self.gram_iters}\nffn_full_budget = {self.ffn_full_budget}\n"
                f"coupling = {self.coupling}\nhead_hidden = {self.head_hidden}\nnorm = {self.norm}\n"
                f"precision = {self.precision}\n"
                + (f"spectral_bound = {self.spectral_bound}\n" if self.spectral_bound != "gram" else "")
                + (f"coupling_grid = {self.coupling_grid}\n" if self.coupling_grid else "")
                + (f"weight_projection = {self.weight_projection}\n" if self.weight_projection else ""))

    @property
    def gram_arg(self) -> int:
        """lipt_config_gram_arg: gram_iters, with SPECTRAL_CHOLESKY or'd in for spectral_bound = cholesky."""
        return self.gram_iters | (SPECTRAL_CHOLESKY if self.spectral_bound == "cholesky" else 0)


def parameter_specs(cfg: LiptConfig) -> List[Tuple[str, Tuple[int, ...], str]]:
    """(name, shape, kind) of every parameter and buffer in lipt's registration (= checkpoint) order
    (src/nn/model.c register_params). kind: "decay", "no_decay" (LIPT_PARAM_NO_DECAY) or "buffer"."""
    D, Fd, V, H = cfg.d_model, cfg.d_ff, cfg.vocab_size, cfg.n_heads
    ND, DEC, BUF = KIND_NO_DECAY, KIND_DECAY, KIND_BUFFER
    s = [("tok_emb", (V, D), ND), ("pos_emb", (cfg.seq_len, D), ND)]
    for l in range(cfg.n_layers):
        p = f"layers.{l}."
        if not cfg.invertible:
            s += [(p + "ln1.gamma", (D,), ND), (p + "ln1.beta", (D,), ND)]
        s.append((p + "attn.wq", (D, D), DEC))
        if cfg.attn.has_wk:
            s.append((p + "attn.wk", (D, D), DEC))
        s += [(p + "attn.wv", (D, D), DEC), (p + "attn.wo", (D, D), DEC), (p + "attn.bo", (D,), ND)]
        if cfg.attn.rel_bias and cfg.rel_bias:
            s.append((p + "attn.rel_bias", (H, cfg.seq_len), ND))
        if not cfg.invertible:
            s += [(p + "ln2.gamma", (D,), ND), (p + "ln2.beta", (D,), ND)]
        s += [(p + "ffn.w1", (D, Fd), DEC), (p + "ffn.b1", (Fd,), ND), (p + "ffn.w2", (Fd, D), DEC),
              (p + "ffn.b2", (D,), ND)]
        if cfg.activation == "lipswish":
            s.append((p + "ffn.beta", (1,), ND))
        if cfg.ffn == "contractive":
            s += [(p + "ffn.sn1.u", (D,), BUF), (p + "ffn.sn1.v", (Fd,), BUF), (p + "ffn.sn2.u", (Fd,), BUF),
                  (p + "ffn.sn2.v", (D,), BUF)]
        if cfg.actnorm:
            s += [(p + "actnorm.log_scale", (D,), ND), (p + "actnorm.bias", (D,), ND)]
        sizes = {"uq": H * D, "vq": D, "uv": H * D, "vv": D, "uo": D, "vo": D, "uk": H * D, "vk": D}
        for nm in BOUND_VECTORS[:cfg.n_bound_vectors]:
            s.append((p + "attn.bound." + nm, (sizes[nm],), BUF))
    s += [("ln_f.gamma", (D,), ND), ("ln_f.beta", (D,), ND)]
    if cfg.head_hidden > 0:
        s += [("head.w1", (D, cfg.head_hidden), DEC), ("head.b1", (cfg.head_hidden,), ND)]
    s += [("head.w", (cfg.head_hidden if cfg.head_hidden > 0 else D, V), DEC), ("head.b", (V,), ND)]
    return s


# ----------------------------------------------------------------------------------------------- the vocabulary

class Vocab:
    """A `lipt export` file's vocabulary: id i is the byte `symbols[i]`; `unk_id` (or -1) takes unseen bytes.
    ptb_form marks a vocabulary built from PTB char files: if it has '_' and no space, text is read with a space as
    '_' (PTB's word boundary), the rule of lipt's own encoder (lipt_vocab_text_symbol in include/lipt/data.h)."""

    def __init__(self, symbols: Sequence[int], unk_id: int = -1, ptb_form: bool = False):
        self.symbols = bytes(symbols)
        self.unk_id = int(unk_id)
        self.ptb_form = bool(ptb_form)
        self._id_of = {b: i for i, b in enumerate(self.symbols)}
        self.space_as = ord("_") if self.ptb_form and ord(" ") not in self._id_of and ord("_") in self._id_of else None

    @property
    def size(self) -> int:
        """Ids in use (the model's vocab_size): the symbols, and the unknown id if there is one."""
        return len(self.symbols) + (self.unk_id >= 0)

    @classmethod
    def from_metadata(cls, meta: Dict[str, str], path: str = "metadata") -> "Vocab":
        """The vocabulary of an export's metadata, checked as lipt checks its own (symbols distinct bytes in
        increasing order, unk_id -1 or the id after them); SafetensorsError otherwise."""
        bad = lambda what: SafetensorsError(path, f"metadata 'vocab': {what}")
        if "vocab" not in meta:
            raise bad("missing (a file exported by a lipt older than `info`?)")
        try:
            sy = json.loads(meta["vocab"])
        except (ValueError, RecursionError):
            raise bad("expected a JSON list of byte values") from None
        if not isinstance(sy, list) or not 1 <= len(sy) <= 256 or any(type(b) is not int or not 0 <= b <= 255 for b in sy):
            raise bad("expected a JSON list of 1 to 256 byte values (0..255)")
        if any(a >= b for a, b in zip(sy, sy[1:])):
            raise bad("expected distinct byte values in increasing order")
        unk = meta.get("unk_id", "-1")
        if not re.fullmatch(r"-?[0-9]{1,4}", unk) or int(unk) not in (-1, len(sy)):
            raise SafetensorsError(path, f"metadata 'unk_id' = {unk[:20]!r}: expected -1 or {len(sy)}")
        form = meta.get("ptb_form", "0")
        if form not in ("0", "1"):
            raise SafetensorsError(path, f"metadata 'ptb_form' = {form[:20]!r}: expected 0 or 1")
        return cls(sy, int(unk), form == "1")

    def text_symbol(self, b: int) -> int:
        """The symbol byte b is read as: a space is '_' for a PTB-style vocabulary, every other byte itself."""
        return self.space_as if b == 32 and self.space_as is not None else b

    def encode(self, text) -> List[int]:
        """bytes (or str, as UTF-8) -> ids, each byte read through text_symbol; a byte outside the vocabulary is
        the unknown id, or a ValueError listing the symbols the model reads."""
        data = text.encode("utf-8") if isinstance(text, str) else bytes(text)
        ids = []
        for pos, b in enumerate(data):
            i = self._id_of.get(self.text_symbol(b), self.unk_id)
            if i < 0:
                listing = self.symbols.decode("latin-1").encode("unicode_escape").decode("ascii")
                hint = " (a space is read as '_', the word boundary)" if self.space_as is not None else ""
                raise ValueError(f"byte {b!r} ({chr(b)!r}) at position {pos} is not in the model's vocabulary of "
                                 f"{len(self.symbols)} symbols and the model has no unknown id: {listing}{hint}")
            ids.append(i)
        return ids

    def decode(self, ids: Sequence[int]) -> bytes:
        """ids -> bytes in the vocabulary's symbol form (PTB: '_' between words; the unknown id becomes b"?")."""
        return bytes(self.symbols[i] if 0 <= i < len(self.symbols) else ord("?") for i in ids)


# ------------------------------------------------------------------------------------- safetensors, validated

class SafetensorsError(ValueError):
    """A file that is not a valid `lipt export` file: `path` names it, the message says what was expected."""

    def __init__(self, path: str, what: str):
        super().__init__(f"{path}: {what}")
        self.path = path


def _no_duplicates(pairs):
    d = {}
    for k, v in pairs:
        if k in d:
            raise ValueError(f"key {k[:60]!r} appears twice")
        d[k] = v
    return d


def _no_constant(name):
    raise ValueError(f"{name} is not a JSON number")


def _open_regular(path: str):
    """The file opened for reading, if it is a regular file (a FIFO or device is refused without blocking on it),
    and its size."""
    fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | getattr(os, "O_CLOEXEC", 0))
    try:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode):
            kind = "a directory" if stat.S_ISDIR(st.st_mode) else "a FIFO" if stat.S_ISFIFO(st.st_mode) else \
                "a device" if stat.S_ISCHR(st.st_mode) or stat.S_ISBLK(st.st_mode) else "not a regular file"
            raise SafetensorsError(path, f"is {kind}: expected a regular .safetensors file")
        f = os.fdopen(fd, "rb")
    except BaseException:
        os.close(fd)
        raise
    return f, st.st_size


def _read_exact(f, n: int, path: str, what: str) -> bytearray:
    buf = bytearray(n)
    got = f.readinto(buf) if n else 0
    if got != n:
        raise SafetensorsError(path, f"ends inside {what}: read {got} of {n} bytes (truncated while reading?)")
    return buf


def _parse_header(raw: bytes, path: str) -> dict:
    try:
        header = json.loads(raw.decode("utf-8"), object_pairs_hook=_no_duplicates, parse_constant=_no_constant)
    except UnicodeDecodeError:
        raise SafetensorsError(path, "the header is not UTF-8: expected a JSON object") from None
    except (ValueError, RecursionError) as e:
        raise SafetensorsError(path, f"the header is not valid JSON ({str(e)[:80]}): expected a JSON object") from None
    if not isinstance(header, dict):
        raise SafetensorsError(path, f"the header is a JSON {type(header).__name__}, expected an object")
    return header


def _check_entry(name, info, path: str) -> Tuple[Tuple[int, ...], int, int]:
    """One tensor's header entry -> (shape, begin, end), offsets relative to the data."""
    what = lambda s: SafetensorsError(path, f"tensor {name[:80]!r}: {s}")
    if not isinstance(info, dict) or set(info) != {"dtype", "shape", "data_offsets"}:
        raise what("expected an object with exactly dtype, shape and data_offsets")
    if info["dtype"] != "F32":
        raise what(f"dtype {str(info['dtype'])[:20]!r}, expected 'F32' (lipt exports float32 only)")
    shape, offs = info["shape"], info["data_offsets"]
    if not isinstance(shape, list) or len(shape) > 8 or any(type(d) is not int or d < 0 for d in shape):
        raise what("shape: expected a list of at most 8 non-negative integers")
    if not isinstance(offs, list) or len(offs) != 2 or any(type(o) is not int for o in offs) or \
            not 0 <= offs[0] <= offs[1]:
        raise what(f"data_offsets {str(offs)[:60]}: expected [begin, end] with 0 <= begin <= end")
    numel = math.prod(shape)
    if offs[1] - offs[0] != 4 * numel:
        raise what(f"data_offsets {offs} hold {offs[1] - offs[0]} bytes, the shape {shape} needs {4 * numel}")
    return tuple(shape), offs[0], offs[1]


def _check_layout(entries: Dict[str, Tuple[Tuple[int, ...], int, int]], data_len: int, path: str) -> None:
    """The tensors tile the data exactly: in range, no overlap, no gap, no byte left over."""
    at, prev = 0, None
    for name, (_, a, b) in sorted(entries.items(), key=lambda kv: (kv[1][1], kv[1][2])):
        if b > data_len:
            raise SafetensorsError(path, f"tensor {name!r}: data_offsets end at {b}, past the {data_len} data bytes")
        if a < at:
            raise SafetensorsError(path, f"tensors {prev!r} and {name!r} overlap (bytes {a}..{at}): expected each "
                                         f"tensor's bytes to be its own")
        if a > at:
            raise SafetensorsError(path, f"bytes {at}..{a} of the data belong to no tensor: expected the tensors "
                                         f"to cover the data without gaps")
        at, prev = b, name
    if at != data_len:
        raise SafetensorsError(path, f"{data_len - at} bytes after the last tensor: expected the tensors to cover "
                                     f"the {data_len} data bytes exactly")


def _read_checked(path: str, max_bytes: int, check=None):
    """Header checked, `check(header_tensors, meta)` run, then the data read: (tensors, meta)."""
    f, size = _open_regular(path)
    with f:
        if size < 8:
            raise SafetensorsError(path, f"{size} bytes: expected at least the 8-byte header length")
        if size > max_bytes + MAX_HEADER_BYTES + 8:
            raise SafetensorsError(path, f"{size} bytes, more than the cap of {max_bytes} bytes of model "
                                         f"(pass max_bytes= to read a larger model)")
        (n,) = struct.unpack("<Q", _read_exact(f, 8, path, "the header length"))
        if n < 2 or n > min(size - 8, MAX_HEADER_BYTES):
            raise SafetensorsError(path, f"header length {n}: expected 2 to {min(size - 8, MAX_HEADER_BYTES)} bytes "
                                         f"(the file has {size})")
        header = _parse_header(bytes(_read_exact(f, n, path, "the header")), path)
        meta = header.pop("__metadata__", {})
        if not isinstance(meta, dict) or any(not isinstance(v, str) for v in meta.values()):
            raise SafetensorsError(path, "__metadata__: expected an object of strings")
        entries = {name: _check_entry(name, info, path) for name, info in header.items()}
        data_len = size - 8 - n
        _check_layout(entries, data_len, path)
        if check is not None:
            check({k: v[0] for k, v in entries.items()}, meta)
        data = _read_exact(f, data_len, path, "the tensor data")
        if f.read(1):
            raise SafetensorsError(path, "grew while it was read: expected a file nobody writes to")
    out = OrderedDict()
    for name, (shape, a, b) in sorted(entries.items(), key=lambda kv: kv[1][1]):
        out[name] = np.frombuffer(data, dtype="<f4", count=(b - a) // 4, offset=a).reshape(shape)
    return out, meta


def read_safetensors(path: str, max_bytes: int = MAX_MODEL_BYTES) -> Tuple["OrderedDict[str, np.ndarray]", Dict[str, str]]:
    """An F32 .safetensors file (as `lipt export` writes it), validated: tensors by name (in data order) and the
    metadata. SafetensorsError for anything else (not a regular file, a bad header length or JSON, another dtype,
    offsets out of range, overlapping or leaving bytes uncovered, a file over max_bytes)."""
    return _read_checked(path, max_bytes)


def _attn_info(meta: Dict[str, str], path: str) -> Optional[AttnProps]:
    """The attention kind's properties from the metadata (attention_info), None for a file from a lipt that did not
    write them: the kind's properties then come from lipt_variants.json."""
    if "attention_info" not in meta:
        return None
    try:
        row = json.loads(meta["attention_info"], object_pairs_hook=_no_duplicates, parse_constant=_no_constant)
    except (ValueError, RecursionError) as e:
        raise SafetensorsError(path, f"metadata 'attention_info' is not valid JSON ({str(e)[:80]})") from None
    try:
        return attn_props(row, "metadata 'attention_info'")
    except ValueError as e:
        raise SafetensorsError(path, str(e)) from None


def _config_check(path: str, max_bytes: int, need_vocab: bool, found: dict):
    """The check read_export runs between the header and the data: config, vocabulary, every tensor's shape."""
    def check(shapes: Dict[str, Tuple[int, ...]], meta: Dict[str, str]) -> None:
        if "config" not in meta:
            raise SafetensorsError(path, "no 'config' in the metadata: expected a file written by `lipt export`")
        info = _attn_info(meta, path)
        try:
            cfg = LiptConfig.from_text(meta["config"], info)
        except (ValueError, TypeError) as e:
            raise SafetensorsError(path, f"metadata 'config': {e}") from None
        if info is not None and info.name != cfg.attention:
            raise SafetensorsError(path, f"metadata 'attention_info' describes attention {info.name[:40]!r}, the "
                                         f"config's attention is {cfg.attention!r}: expected the same")
        vocab = Vocab.from_metadata(meta, path) if need_vocab or "vocab" in meta else None
        if vocab is not None and vocab.size != cfg.vocab_size:
            raise SafetensorsError(path, f"the vocabulary has {vocab.size} ids, the config's vocab_size is "
                                         f"{cfg.vocab_size}: expected the same")
        specs = parameter_specs(cfg)
        total = 4 * sum(math.prod(s) for _, s, _ in specs)
        if total > max_bytes:
            raise SafetensorsError(path, f"the config describes {total} bytes of parameters, more than the cap of "
                                         f"{max_bytes} (pass max_bytes= to load a larger model)")
        want = {name: tuple(shape) for name, shape, _ in specs}
        for name, shape in want.items():
            if name not in shapes:
                raise SafetensorsError(path, f"tensor {name!r} of the config is missing")
            if shapes[name] != shape:
                raise SafetensorsError(path, f"tensor {name!r} has shape {list(shapes[name])}, the config needs "
                                             f"{list(shape)}")
        extra = sorted(set(shapes) - set(want))
        if extra:
            raise SafetensorsError(path, f"tensor {extra[0][:80]!r} is not a parameter of the config "
                                         f"({len(extra)} such)")
        found.update(cfg=cfg, vocab=vocab)
    return check


def read_export(path: str, max_bytes: int = MAX_MODEL_BYTES, need_vocab: bool = False):
    """A `lipt export` file, validated against its own config before the data is read: (cfg, tensors, meta, vocab)
    with vocab None when the file has none (need_vocab: required). The model it describes is at most max_bytes."""
    found: dict = {}
    tensors, meta = _read_checked(path, max_bytes, _config_check(path, max_bytes, need_vocab, found))
    return found["cfg"], tensors, meta, found["vocab"]
