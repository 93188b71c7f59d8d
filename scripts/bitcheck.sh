#!/usr/bin/env bash
# Bit-identity check for refactorings: short training runs of dp, l2-tied, the invertible model (clipped-dp) and the
# paper's contractive-l2 on PTB (one thread, 20 steps, small width), each followed by an export; prints the last logged
# loss and the SHA-256 of the exported tensor bytes. Run it with the binary before and after a change and compare.
#   LIPT=build/lipt scripts/bitcheck.sh [--wide] > before.txt
# --wide adds 4 steps of dp and the invertible model at the bench configuration (width 256, d_ff 1024, batch 16 x 128):
# the paths the small runs never reach (weight gradients cut along K, 256 x 1024 certificates, the attention's tiles).
set -euo pipefail
cd "$(dirname "$0")/.."
LIPT=${LIPT:-build/lipt}
TMP=$(mktemp -d)
trap 'rm -rf "$TMP"' EXIT
WIDE=0
case "${1:-}" in
  --wide) WIDE=1 ;;
  "") ;;
  *) echo "bitcheck.sh: unknown option '$1' (usage: scripts/bitcheck.sh [--wide])" >&2; exit 2 ;;
esac
RUNS="dp l2-tied contractive contractive-l2"
[ "$WIDE" = 1 ] && RUNS="$RUNS dp:wide contractive:wide"
for r in $RUNS; do
  v=${r%:wide} name=${r/:/-}
  if [ "$r" = "$v" ]; then
    shape="--steps 20 --d_model 64 --d_ff 128 --n_layers 2 --seq_len 32 --batch 4"
  else
    shape="--steps 4 --batch 16 --dropout 0"
  fi
  # shellcheck disable=SC2086
  "$LIPT" train --config "models/ptb-$v.cfg" --data ptb $shape --threads 1 --out "$TMP/$name" --eval-every 0 \
    --final-eval none --quiet >/dev/null
  "$LIPT" export --ckpt "$TMP/$name/last.ckpt" --out "$TMP/$name.safetensors" >/dev/null
  loss=$(tail -n 1 "$TMP/$name/metrics.jsonl" | sed 's/.*"loss":\([^,]*\).*/\1/')
  # the tensor bytes only (the metadata holds paths and settings that may differ between builds)
  hdr=$(od -An -t u8 -N8 "$TMP/$name.safetensors" | tr -d ' ')
  echo "$name loss $loss weights $(tail -c +$((hdr + 9)) "$TMP/$name.safetensors" | sha256sum | cut -c1-16)"
done
