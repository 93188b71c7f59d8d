#!/usr/bin/env bash
# python_variants (issue 36, item 2): python/lipt_variants.json is `lipt info --variants --json`, and the PyTorch
# module computes every attention kind in lipt's table as lipt does: for each kind a small model is trained (the
# options a kind needs taken from its properties: contractive -> ffn contractive with relu, token_norm_only ->
# lip_norm inf2), exported and evaluated here, then tests/python/variants_check.py compares (see there).
# Exits 77 (skipped) without PyTorch or numpy.   Usage: python_variants_test.sh LIPT_BINARY
set -uo pipefail
LIPT=$(cd "$(dirname "${1:?usage: python_variants_test.sh path/to/lipt}")" && pwd)/$(basename "$1")
REPO=$(cd "$(dirname "$0")/.." && pwd)
PY=/usr/bin/python3
if ! "$PY" -c "import torch, numpy" 2>/dev/null; then
  echo "skip python_variants: $PY lacks torch or numpy (apt-get install python3-torch python3-numpy)"
  exit 77
fi
TMP=$(mktemp -d)
trap 'rm -rf "$TMP"' EXIT
export LIPT_THREADS=1
cat "$REPO"/docs/USAGE.md "$REPO"/models/README.md > "$TMP/text.txt"
if ! "$LIPT" info --variants --json > "$TMP/variants.json"; then
  echo "FAIL python_variants: lipt info --variants --json"
  exit 1
fi
# one line per kind: its name and the options its properties need
kinds=$("$PY" -c '
import json, sys
for name, row in json.load(open(sys.argv[1]))["attention"].items():
    opts = ["--ffn", "contractive", "--activation", "relu"] if row.get("contractive") else []
    opts += ["--lip_norm", "inf2"] if row.get("token_norm_only") else []
    print(name, *opts)' "$TMP/variants.json") || { echo "FAIL python_variants: unreadable variant table"; exit 1; }
while read -r kind opts; do
  mkdir -p "$TMP/$kind"
  # shellcheck disable=SC2086  # opts: the kind's options, word-split on purpose
  if ! "$LIPT" train --data "$TMP/text.txt" --out "$TMP/$kind/run" --attention "$kind" $opts --d_model 8 --d_ff 16 \
         --n_layers 1 --n_heads 2 --seq_len 8 --batch 4 --steps 60 --lr 3e-2 --unk --quiet > "$TMP/$kind/log" 2>&1 ||
     ! "$LIPT" export --ckpt "$TMP/$kind/run/last.ckpt" --out "$TMP/$kind/model.safetensors" 2>> "$TMP/$kind/log" ||
     ! "$LIPT" eval --ckpt "$TMP/$kind/run/last.ckpt" --split valid --max-symbols 400 --json --quiet \
         > "$TMP/$kind/eval.json" 2>> "$TMP/$kind/log"; then
    echo "lipt could not train, export or evaluate attention $kind:"
    cat "$TMP/$kind/log"
  fi
done <<< "$kinds"
"$PY" "$REPO/tests/python/variants_check.py" "$TMP/variants.json" "$TMP" || { echo "FAIL python_variants"; exit 1; }
echo "ok   python_variants"
