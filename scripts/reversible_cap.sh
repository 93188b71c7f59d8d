#!/usr/bin/env bash
# Memory from invertibility under a fixed memory cap (docs/PERFORMANCE.md): under a data limit (ulimit -d CAP_GB), at
# PTB's width (d_model 256, d_ff 1024, 4 heads), for the certified model (models/ptb-contractive.cfg: fixed-point
# blocks; store, recompute, invert) and coupling blocks (models/ablation/e-coupling-dp.cfg, coupling_grid 16; store,
# invert):
#   - the deepest model each mode trains at seq_len 128, batch 32 (PTB's training batch);
#   - the longest seq_len (a multiple of 64) each mode trains at 4 layers, batch 8.
# "Trains": lipt train's start-up check (a probe step at two small batches, extrapolated to the batch, against the
# room the limit leaves) accepts the model (bisection on that), then one real training step at the answer succeeds.
# Rows to OUT/reversible_cap.csv (rewritten). Usage: scripts/reversible_cap.sh [OUT_DIR] [CAP_GB]
#   (defaults: docs/results, 1); LIPT (default build/lipt), LIPT_THREADS as usual.
set -euo pipefail
REPO=$(cd "$(dirname "$0")/.." && pwd)
OUT=${1:-$REPO/docs/results}
CAP_GB=${2:-1}
LIPT=${LIPT:-$REPO/build/lipt}
[ -x "$LIPT" ] || { echo "reversible_cap.sh: $LIPT not built" >&2; exit 1; }
mkdir -p "$OUT"
# shellcheck source=scripts/reversible_models.sh
. "$REPO/scripts/reversible_models.sh" # config MODEL, extra MODEL
corpus=$(mktemp)
trap 'rm -f "$corpus"; rm -rf "$OUT/.cap"' EXIT
for _ in $(seq 40); do cat "$REPO/docs/USAGE.md"; done >"$corpus"
fits() { # model mode layers seq_len batch [steps]: whether lipt train accepts (and, with steps, trains) it
  rm -rf "$OUT/.cap"
  # shellcheck disable=SC2046
  (ulimit -d $((CAP_GB * 1024 * 1024)); "$LIPT" train --config "$(config "$1")" $(extra "$1") --d_model 256 \
    --d_ff 1024 --n_heads 4 --n_layers "$3" --seq_len "$4" --batch "$5" --memory "$2" --data "$corpus" \
    --out "$OUT/.cap" --steps "${6:-0}" --eval-every 0 --final-eval none --save-every 0 --quiet >/dev/null 2>&1)
}
largest() { # model mode what(layers|seq) unit: the largest multiple of unit that fits, by doubling then bisection
  local model=$1 mode=$2 what=$3 unit=$4 lo=0 hi=1 mid
  try() { if [ "$what" = layers ]; then fits "$model" "$mode" "$1" 128 32; else fits "$model" "$mode" 4 $(($1 * unit)) 8; fi; }
  while try $hi && [ $hi -lt 1024 ]; do lo=$hi; hi=$((hi * 2)); done
  while [ $((hi - lo)) -gt 1 ]; do
    mid=$(((lo + hi) / 2))
    if try $mid; then lo=$mid; else hi=$mid; fi
  done
  echo $((lo * unit))
}
echo "model,mode,cap_gb,deepest_layers,deepest_trained,longest_seq_len,longest_trained" >"$OUT/reversible_cap.csv"
for model in fixed-point coupling; do
  for mode in store recompute invert; do
    [ $model = coupling ] && [ $mode = recompute ] && continue
    L=$(largest $model $mode layers 1)
    tl=no
    [ "$L" -gt 0 ] && fits $model $mode "$L" 128 32 1 && tl=yes # one real step at that depth
    T=$(largest $model $mode seq 64)
    tt=no
    [ "$T" -gt 0 ] && fits $model $mode 4 "$T" 8 1 && tt=yes
    echo "$model,$mode,$CAP_GB,$L,$tl,$T,$tt" | tee -a "$OUT/reversible_cap.csv"
  done
done
