"""The model kinds lipt knows, from lipt's own variant table (include/lipt/variants.h, src/variants/attn_variants.c).

lipt_variants.json next to this file is the output of `lipt info --variants --json` (regenerate it with that command
after changing the table; ctest's python_variants fails while it differs). A `lipt export` file also carries its
attention kind's row in its metadata (`attention_info`), which takes precedence: a file from a lipt with a kind this
table lacks still loads when its properties are ones this module implements. The PyTorch module (lipt_torch.py) and
the file reader (lipt_format.py) branch on these properties, never on a kind's name.

A row that sets a property this module does not implement (a yes/no property it does not know, a bound or an
initialisation it has no code for, a combination lipt has no kernel for) raises ValueError naming the kind and the
property; a property it does not know that is false, 0 or null changes nothing and is ignored."""
from __future__ import annotations

import dataclasses
import json
import os
from typing import Dict, Optional, Tuple

TABLE_FILE = os.path.join(os.path.dirname(os.path.abspath(__file__)), "lipt_variants.json")

BOUNDS = ("none", "tied-l2", "clipped-dp")  # the certified bounds implemented here (lipt_attn_bound_kind)
QK_INITS = ("small", "l2", "clipped")       # the W^Q / W^K initial scales implemented here (lipt_qk_init)
# The logit maps implemented here (include/lipt/logit_map.h): name -> f(z, p) on a tensor of DP logits, through the
# tensor's own methods (no torch import here); lipt_torch.py applies the kind's map with its parameter.
LOGIT_MAPS = {
    "softcap": lambda z, p: p * (z / p).tanh(),  # src/ops/logit_map_softcap.c
}


@dataclasses.dataclass(frozen=True)
class AttnProps:
    """lipt_attn_info: the properties of one attention kind (include/lipt/variants.h has each one's meaning)."""
    name: str
    has_wk: bool = False           # a key projection of its own (attn.wk); else the keys are the queries
    tied: bool = False             # W^K = W^Q, values Q_h M_h with M_h = W^{Q,h}^T W^{V,h} / sqrt(d)
    l2_logits: bool = False        # logits -|q_i - k_j|^2 / sqrt(d); else q_i . k_j / sqrt(d)
    clip_rows: bool = False        # input rows projected on the ball of radius R first
    rel_bias: bool = False         # has attn.rel_bias (when the config's rel_bias = 1)
    contractive: bool = False      # divided by max(1, UB/c): an invertible model's attention
    token_norm_only: bool = False  # certified in the token-wise norm only: needs lip_norm = inf2
    logit_map: Optional[str] = None  # the map applied to the DP logits before the softmax (LOGIT_MAPS), or none
    logit_map_param: float = 0.0   # its parameter (softcap: the cap)
    bound: str = "none"            # which certified bound UB: "none", "tied-l2" (per lip_norm), "clipped-dp"
    qk_init: str = "small"         # W^Q / W^K initial std: "small" 0.02, "l2" D^-1/2 d^-1/4, "clipped" (D sqrt d)^-1/2 / 2
    lipschitz_note: str = ""       # its Lipschitz status, as `lipt lipschitz` reports it
    model: str = ""                # its PTB model's name (models/ptb-<model>.cfg)


FLAGS = tuple(f.name for f in dataclasses.fields(AttnProps) if f.type in (bool, "bool"))
TEXTS = tuple(f.name for f in dataclasses.fields(AttnProps) if f.type in (str, "str"))
NUMBERS = tuple(f.name for f in dataclasses.fields(AttnProps) if f.type in (float, "float"))


def _check_supported(p: AttnProps, where: str) -> None:
    """The combinations this module (and lipt's forward pass) computes."""
    bad = lambda what: ValueError(f"{where}: attention kind {p.name!r} {what}: python/lipt_torch.py has no code for "
                                  f"it (update python/ with the lipt that has this kind)")
    if p.bound not in BOUNDS:
        raise bad(f"has bound {p.bound!r} (known: {', '.join(BOUNDS)})")
    if p.qk_init not in QK_INITS:
        raise bad(f"has qk_init {p.qk_init!r} (known: {', '.join(QK_INITS)})")
    if p.tied and (p.has_wk or not p.l2_logits or p.rel_bias):
        raise bad("is tied with has_wk, rel_bias or without l2_logits (tied attention is L2 with keys = queries)")
    if not p.tied and not p.has_wk:
        raise bad("has neither a key projection (has_wk) nor tied keys")
    if p.rel_bias and p.l2_logits:
        raise bad("has a relative-position bias on L2 logits")
    if p.contractive and p.bound == "none":
        raise bad("is contractive without a bound to divide by")
    if p.logit_map is not None and p.logit_map not in LOGIT_MAPS:
        raise bad(f"has logit_map {p.logit_map!r} (known: {', '.join(LOGIT_MAPS)})")
    if p.logit_map is not None and (p.l2_logits or p.rel_bias):
        raise bad(f"has logit_map {p.logit_map!r} on L2 logits or with a relative-position bias")


def attn_props(row: object, where: str = "attention_info") -> AttnProps:
    """An AttnProps from one row of the table (a JSON object), checked: ValueError naming `where` otherwise."""
    if not isinstance(row, dict) or not isinstance(row.get("name"), str) or not row["name"]:
        raise ValueError(f"{where}: expected a JSON object with the kind's name")
    name = row["name"]
    kw = {"name": name}
    for key, val in row.items():
        if key in FLAGS:
            if not isinstance(val, bool):
                raise ValueError(f"{where}: attention kind {name!r}: {key} = {val!r}, expected true or false")
            kw[key] = val
        elif key in NUMBERS:
            if isinstance(val, bool) or not isinstance(val, (int, float)):
                raise ValueError(f"{where}: attention kind {name!r}: {key} = {val!r}, expected a number")
            kw[key] = float(val)
        elif key == "logit_map":
            if val is not None and not isinstance(val, str):
                raise ValueError(f"{where}: attention kind {name!r}: {key} = {val!r}, expected a name or null")
            kw[key] = val
        elif key in TEXTS:
            if not isinstance(val, str):
                raise ValueError(f"{where}: attention kind {name!r}: {key} = {val!r}, expected a string")
            kw[key] = val
        elif val is not False and val is not None and val != 0:  # one this module predates changes nothing then
            raise ValueError(f"{where}: attention kind {name!r} has property {key} = {json.dumps(val)[:60]}: "
                             f"python/lipt_torch.py does not implement it (update python/ with the lipt that has "
                             f"this property)")
    props = AttnProps(**kw)
    _check_supported(props, where)
    return props


def _load_table(path: str) -> dict:
    with open(path, encoding="utf-8") as fh:
        t = json.load(fh)
    keys = ("attention", "ffn", "activation", "lip_norm", "norm", "precision", "spectral_bound")
    if not isinstance(t, dict) or any(k not in t for k in keys) or not isinstance(t["attention"], dict) or \
            any(not isinstance(t[k], list) for k in keys[1:]):
        raise ValueError(f"{path}: expected the object of `lipt info --variants --json` (keys {', '.join(keys)})")
    return t


TABLE = _load_table(TABLE_FILE)
ATTN_ROWS: Dict[str, dict] = TABLE["attention"]  # name -> row, as lipt wrote it (checked when a kind is used)
ATTENTIONS: Tuple[str, ...] = tuple(ATTN_ROWS)
CONTRACTIVE_ATTENTIONS: Tuple[str, ...] = tuple(n for n, r in ATTN_ROWS.items() if r.get("contractive") is True)
FFNS: Tuple[str, ...] = tuple(TABLE["ffn"])
ACTIVATIONS: Tuple[str, ...] = tuple(TABLE["activation"])
LIP_NORMS: Tuple[str, ...] = tuple(TABLE["lip_norm"])
NORMS: Tuple[str, ...] = tuple(TABLE["norm"])
PRECISIONS: Tuple[str, ...] = tuple(TABLE["precision"])
SPECTRAL_BOUNDS: Tuple[str, ...] = tuple(TABLE["spectral_bound"])

_checked: Dict[str, AttnProps] = {}


def attn_props_of(name: str) -> AttnProps:
    """The properties of the attention kind `name` in lipt's table (lipt_variants.json); ValueError for a name lipt
    does not know or a kind this module does not implement."""
    if name not in _checked:
        if name not in ATTN_ROWS:
            raise ValueError(f"attention {name!r} not in {ATTENTIONS} (the kinds of python/lipt_variants.json; a "
                             f"newer lipt's export names its kind's properties in its metadata)")
        _checked[name] = attn_props(ATTN_ROWS[name], f"{TABLE_FILE} (lipt info --variants --json)")
    return _checked[name]


def names_text(names, last: str = "or") -> str:
    """"a, b or c" of the names in alphabetical order, as lipt's messages list kinds."""
    n = sorted(names)
    return n[0] if len(n) == 1 else ", ".join(n[:-1]) + f" {last} " + n[-1]


def optional_props(info: Optional[AttnProps], name: str) -> AttnProps:
    """`info` when it describes the kind `name` (an export's attention_info), else the table's row of `name`."""
    return info if info is not None and info.name == name else attn_props_of(name)
