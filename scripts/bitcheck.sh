#!/usr/bin/env bash
# Bit-identity check for refactorings: short training runs of dp, l2-tied, the invertible model (clipped-dp) and the
# paper's contractive-l2 on PTB (one thread, 20 steps, small width), each followed by an export; prints the last logged
# loss and the SHA-256 of the exported tensor bytes. Run it with the binary before and after a change and compare.
#   LIPT=build/lipt scripts/bitcheck.sh > before.txt
set -euo pipefail
cd "$(dirname "$0")/.."
LIPT=${LIPT:-build/lipt}
TMP=$(mktemp -d)
trap 'rm -rf "$TMP"' EXIT
for v in dp l2-tied contractive contractive-l2; do
  "$LIPT" train --config "models/ptb-$v.cfg" --data ptb --steps 20 --d_model 64 --d_ff 128 --n_layers 2 --seq_len 32 \
    --batch 4 --threads 1 --out "$TMP/$v" --eval-every 0 --final-eval none --quiet >/dev/null
  "$LIPT" export --ckpt "$TMP/$v/last.ckpt" --out "$TMP/$v.safetensors" >/dev/null
  loss=$(tail -n 1 "$TMP/$v/metrics.jsonl" | sed 's/.*"loss":\([^,]*\).*/\1/')
  # the tensor bytes only (the metadata holds paths and settings that may differ between builds)
  hdr=$(od -An -t u8 -N8 "$TMP/$v.safetensors" | tr -d ' ')
  echo "$v loss $loss weights $(tail -c +$((hdr + 9)) "$TMP/$v.safetensors" | sha256sum | cut -c1-16)"
done
