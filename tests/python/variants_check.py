"""python_variants (issue 36, item 2): the PyTorch module and lipt agree on the model kinds.

Usage: variants_check.py LIPT_VARIANTS_JSON DIR
  LIPT_VARIANTS_JSON  the output of `lipt info --variants --json`
  DIR                 one folder per attention kind K: DIR/K/model.safetensors (`lipt export` of a model of kind K),
                      DIR/K/eval.json (`lipt eval --json --max-symbols N` of it on DIR/text.txt's valid split)

Checks: python/lipt_variants.json is lipt's table; python implements every kind in it; each export names its kind's
properties in its metadata (attention_info) as the table does; the module scores each export as lipt eval does; an
export without attention_info (an older lipt) loads to the same model; a property the module does not implement is
refused with a message naming it, an unknown property that is false is not."""
import json
import math
import os
import struct
import sys
import tempfile

sys.dont_write_bytecode = True  # keep the source tree clean
sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "python"))
import torch  # noqa: E402

import lipt_torch  # noqa: E402
import lipt_variants  # noqa: E402
from lipt_format import SafetensorsError, read_safetensors  # noqa: E402

FAILS = []


def check(ok: bool, what: str) -> None:
    print(("ok   " if ok else "FAIL ") + what)
    if not ok:
        FAILS.append(what)


def rewrite_meta(src: str, dst: str, edit) -> None:
    """src with its __metadata__ passed through edit(dict) -> dict, written to dst."""
    with open(src, "rb") as f:
        raw = f.read()
    (n,) = struct.unpack("<Q", raw[:8])
    header = json.loads(raw[8:8 + n])
    header["__metadata__"] = edit(dict(header["__metadata__"]))
    h = json.dumps(header).encode()
    h += b" " * (-len(h) % 8)
    with open(dst, "wb") as f:
        f.write(struct.pack("<Q", len(h)) + h + raw[8 + n:])


def score_like_lipt(model, vocab, text: bytes, ev: dict) -> dict:
    """lipt_torch.score on the text lipt eval scored: the valid split's first ev["symbols"] symbols (fractions
    0.9/0.05/0.05 of the bytes) with the one symbol before it."""
    b1 = math.floor(len(text) * 0.9)
    return lipt_torch.score(model, vocab, text[b1 - 1:b1 + ev["symbols"]])


def check_kind(kind: str, row: dict, folder: str, text: bytes, tmp: str) -> None:
    path = os.path.join(folder, "model.safetensors")
    _, meta = read_safetensors(path)
    info = json.loads(meta.get("attention_info", "null"))
    check(info == row, f"{kind}: the export's attention_info is the table's row")
    model, vocab = lipt_torch.load(path)
    check(model.cfg.attn == lipt_variants.attn_props(row), f"{kind}: the loaded model computes the row's properties")
    with open(os.path.join(folder, "eval.json")) as f:
        ev = json.load(f)
    r = score_like_lipt(model, vocab, text, ev)
    check(r["symbols"] == ev["symbols"] and abs(r["bpc"] - ev["bpc"]) < 2e-6,
          f"{kind}: python scores {r['bpc']:.9f} BPC on {r['symbols']} symbols, lipt eval {ev['bpc']:.9f} on "
          f"{ev['symbols']}")
    ids = torch.tensor([vocab.encode(text[:model.cfg.seq_len])], dtype=torch.int64)
    with torch.no_grad():
        logits = model(ids)[0]
    old = os.path.join(tmp, kind + "-old.safetensors")
    rewrite_meta(path, old, lambda m: {k: v for k, v in m.items() if k != "attention_info"})
    m_old, _ = lipt_torch.load(old)
    with torch.no_grad():
        same = torch.equal(m_old(ids)[0], logits)
    check(same and m_old.cfg.attn == model.cfg.attn,
          f"{kind}: an export without attention_info (an older lipt) loads to the same model from the table")
    for val, refused in ((True, True), (False, False)):
        odd = os.path.join(tmp, kind + "-odd.safetensors")
        rewrite_meta(path, odd, lambda m: {**m, "attention_info": json.dumps({**row, "no_such_property": val})})
        try:
            lipt_torch.load(odd)
            err = None
        except SafetensorsError as e:
            err = str(e)
        if refused:
            check(err is not None and "no_such_property" in err and kind in err,
                  f"{kind}: a property python does not implement is refused: {err}")
        else:
            check(err is None, f"{kind}: an unknown property that is false is ignored ({err})")


def main() -> int:
    lipt_json, folder = sys.argv[1], sys.argv[2]
    with open(lipt_json) as f:
        lipt = json.load(f)
    with open(lipt_variants.TABLE_FILE) as f:
        ours = json.load(f)
    check(lipt == ours, "python/lipt_variants.json is `lipt info --variants --json` (else regenerate it: "
                        "lipt info --variants --json | python3 -m json.tool > python/lipt_variants.json)")
    for kind, row in lipt["attention"].items():
        try:
            lipt_variants.attn_props(row, "lipt info --variants --json")
            err = None
        except ValueError as e:
            err = str(e)
        check(err is None, f"{kind}: python implements every property of the kind" + (f": {err}" if err else ""))
    with open(os.path.join(folder, "text.txt"), "rb") as f:
        text = f.read()
    with tempfile.TemporaryDirectory() as tmp:
        for kind, row in lipt["attention"].items():
            sub = os.path.join(folder, kind)
            if not os.path.exists(os.path.join(sub, "model.safetensors")):
                check(False, f"{kind}: no export to check (lipt could not train or export the kind)")
                continue
            check_kind(kind, row, sub, text, tmp)
    print(f"{len(FAILS)} failed" if FAILS else "all passed")
    return 1 if FAILS else 0


if __name__ == "__main__":
    torch.set_num_threads(1)
    sys.exit(main())
