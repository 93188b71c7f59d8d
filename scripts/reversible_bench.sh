#!/usr/bin/env bash
# Memory from invertibility (docs/PERFORMANCE.md): lipt bench at PTB's width and seq_len (d_model 256, d_ff 1024,
# seq_len 128, batch 8) for store, recompute, invert on the certified model (models/ptb-contractive.cfg: fixed-point
# blocks) and store, invert on coupling blocks (models/ablation/e-coupling-dp.cfg at the same width, coupling_grid 16),
# at each depth; the modes of one depth run back to back (the step-time ratios compare neighbours). Then, with
# --invert-check, every half-block's reconstruction against its stored truth at the deepest depth; then, under a
# data limit (ulimit -d), the deepest model and the longest seq_len each mode trains (scripts/reversible_cap.sh).
# Rows go to OUT/reversible.csv as they come (a rerun skips the rows already there); OUT/reversible_check.json;
# OUT/reversible_cap.csv.
# Usage: scripts/reversible_bench.sh [OUT_DIR] [DEPTHS] [RUNS] [CAP_GB]
#   (defaults: docs/results, "1 2 4 8 16 32", 3, 1)
set -euo pipefail
REPO=$(cd "$(dirname "$0")/.." && pwd)
OUT=${1:-$REPO/docs/results}
DEPTHS=${2:-1 2 4 8 16 32}
RUNS=${3:-3}
CAP_GB=${4:-1}
LIPT=${LIPT:-$REPO/build/lipt}
mkdir -p "$OUT"
CSV=$OUT/reversible.csv
[ -s "$CSV" ] || echo "model,mode,layers,arena_mb,params_mb,grads_mb,optimizer_mb,rss_mb,ms_per_step,final_loss,evals_per_inversion,worst_bound" >"$CSV"
WIDTH=(--d_model 256 --d_ff 1024 --seq_len 128 --n_heads 4 --batch 8)
BENCH=(--runs "$RUNS" --warmup 1 --steps-per-run 1 --skip-eval --skip-sample --gemm-size 0 --json)
# shellcheck source=scripts/reversible_models.sh
. "$REPO/scripts/reversible_models.sh" # config MODEL, extra MODEL
row() { # model mode layers
  local model=$1 mode=$2 L=$3
  grep -q "^$model,$mode,$L," "$CSV" && return 0
  # shellcheck disable=SC2046
  "$LIPT" bench --config "$(config "$model")" $(extra "$model") "${WIDTH[@]}" --n_layers "$L" --memory "$mode" \
    "${BENCH[@]}" >"$OUT/.row.json"
  python3 - "$model" "$mode" "$L" "$OUT/.row.json" >>"$CSV" <<'PY'
import json, sys
model, mode, L, path = sys.argv[1:5]
d = json.load(open(path))
r = d.get("reconstruction") or {}
print(",".join(str(v) for v in [model, mode, L, d["train_arena_peak_mb"], d["params_mb"], d["grads_mb"],
      d["optimizer_state_mb"], d["peak_rss_mb"], d["ms_per_step"]["train"], d["final_train_loss"],
      r.get("evaluations_per_inversion", ""), r.get("worst_bound", "")]))
PY
  tail -n 1 "$CSV"
}
for L in $DEPTHS; do
  for mode in store recompute invert; do row fixed-point $mode "$L"; done
  for mode in store invert; do row coupling $mode "$L"; done
done
rm -f "$OUT/.row.json"

deepest=${DEPTHS##* }
echo "== reconstruction against the truth, $deepest layers"
for model in fixed-point coupling; do
  # shellcheck disable=SC2046
  "$LIPT" bench --config "$(config $model)" $(extra $model) "${WIDTH[@]}" --n_layers "$deepest" --memory invert \
    --invert-check --runs 1 --warmup 0 --steps-per-run 1 --skip-eval --skip-sample --gemm-size 0 --json \
    >"$OUT/reversible_check_$model.json"
done

echo "== the deepest model and the longest seq_len each mode trains under ulimit -d ${CAP_GB} GB"
LIPT="$LIPT" bash "$REPO/scripts/reversible_cap.sh" "$OUT" "$CAP_GB"
python3 "$REPO/scripts/reversible_plot.py" "$CSV" "$OUT/reversible.svg"
