#!/usr/bin/env bash
# python_loader (issue 38, item 3): python/lipt_format.py, through lipt_torch.load, validates a `lipt export` file:
# a small model is trained and exported here, then tests/python/loader_fuzz.py mutates the file (header bytes and
# length, dtypes, shapes, offsets, metadata, truncation) and checks that every mutation loads or raises
# SafetensorsError, with no other exception, hang or large allocation; FIFO, directory and device are refused.
# First the loader's config ranges against src/nn/config.c (tests/python/config_ranges.py, numpy only).
# Exits 77 (skipped) without PyTorch, numpy or hypothesis.   Usage: python_loader_test.sh LIPT_BINARY [EXAMPLES]
set -uo pipefail
LIPT=$(cd "$(dirname "${1:?usage: python_loader_test.sh path/to/lipt [examples]}")" && pwd)/$(basename "$1")
EXAMPLES=${2:-300}
REPO=$(cd "$(dirname "$0")/.." && pwd)
PY=/usr/bin/python3
# the loader's config ranges against lipt's parser (src/nn/config.c): c = 1 accepted by one and refused by the other
# would make a file that one side cannot read; numpy only
if "$PY" -c "import numpy" 2>/dev/null; then
  "$PY" "$REPO/tests/python/config_ranges.py" "$REPO" || { echo "FAIL python_loader: config ranges"; exit 1; }
fi
if ! "$PY" -c "import torch, numpy, hypothesis" 2>/dev/null; then
  echo "skip python_loader: $PY lacks torch, numpy or hypothesis (apt-get install python3-torch python3-numpy" \
       "python3-hypothesis)"
  exit 77
fi
TMP=$(mktemp -d)
trap 'rm -rf "$TMP"' EXIT
export LIPT_THREADS=1
cat "$REPO"/docs/USAGE.md "$REPO"/models/README.md > "$TMP/text.txt"
if ! "$LIPT" train --data "$TMP/text.txt" --out "$TMP/run" --d_model 8 --d_ff 16 --n_layers 1 --n_heads 2 \
       --seq_len 8 --batch 2 --steps 2 --unk --quiet > "$TMP/train.log" 2>&1 ||
   ! "$LIPT" export --ckpt "$TMP/run/last.ckpt" --out "$TMP/model.safetensors" 2>> "$TMP/train.log"; then
  cat "$TMP/train.log"
  echo "FAIL python_loader: could not train and export the model to fuzz"
  exit 1
fi
"$PY" "$REPO/tests/python/loader_fuzz.py" "$TMP/model.safetensors" "$EXAMPLES" || { echo "FAIL python_loader"; exit 1; }
echo "ok   python_loader"
