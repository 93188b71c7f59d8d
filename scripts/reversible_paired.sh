#!/usr/bin/env bash
# The price of --memory invert and recompute against store-all, measured in pairs (docs/PERFORMANCE.md, "Memory from
# invertibility"): lipt bench --paired-memory runs every timed training run of the mode followed by the same steps in
# store-all, and reports the median of the per-run time ratios, which a shared machine's slow phases skew far less
# than two separate benches; --grad-check compares one step's gradients with store-all's per parameter tensor.
# Models: the certified model (models/ptb-contractive.cfg: fixed-point blocks) and coupling blocks
# (models/ablation/e-coupling-dp.cfg, coupling_grid 16), seq_len 128, batch 8, at width 64 (d_ff 256) and PTB's
# width 256 (d_ff 1024). Rows go to OUT/reversible_paired.csv as they come; a rerun skips the rows already there.
# Usage: scripts/reversible_paired.sh [OUT_DIR] [DEPTHS] [RUNS] [WIDTHS]
#   (defaults: docs/results, "8 32", 5, "64 256"); LIPT (default build/lipt), LIPT_THREADS as usual.
set -euo pipefail
REPO=$(cd "$(dirname "$0")/.." && pwd)
OUT=${1:-$REPO/docs/results}
DEPTHS=${2:-8 32}
RUNS=${3:-5}
WIDTHS=${4:-64 256}
LIPT=${LIPT:-$REPO/build/lipt}
[ -x "$LIPT" ] || { echo "reversible_paired.sh: $LIPT not built" >&2; exit 1; }
mkdir -p "$OUT"
CSV=$OUT/reversible_paired.csv
[ -s "$CSV" ] || echo "model,width,layers,mode,ratio_to_store,mode_ms,store_ms,arena_mb,store_arena_mb,grad_tensors,worst_cosine,worst_rel_err,evals_per_inversion,worst_bound,threads,cpu,date" >"$CSV"
CPU=$(sed -n 's/^model name[[:space:]]*: //p' /proc/cpuinfo | head -1 | tr ',' ' ')
# shellcheck source=scripts/reversible_models.sh
. "$REPO/scripts/reversible_models.sh" # config MODEL, extra MODEL
tmp=$(mktemp)
trap 'rm -f "$tmp"' EXIT
for W in $WIDTHS; do
  for L in $DEPTHS; do
    for model in fixed-point coupling; do
      for mode in invert recompute; do
        grep -q "^$model,$W,$L,$mode," "$CSV" && continue
        # shellcheck disable=SC2046
        "$LIPT" bench --config "$(config "$model")" $(extra "$model") --d_model "$W" --d_ff $((4 * W)) --seq_len 128 \
          --n_heads 4 --batch 8 --n_layers "$L" --memory "$mode" --paired-memory --grad-check --runs "$RUNS" \
          --warmup 1 --steps-per-run 2 --skip-eval --skip-sample --gemm-size 0 --json >"$tmp"
        python3 - "$model" "$W" "$L" "$mode" "$tmp" "$CPU" >>"$CSV" <<'PY'
import datetime, json, sys
model, W, L, mode, path, cpu = sys.argv[1:7]
d = json.load(open(path))
p, g = d["memory_paired"], d["gradient_check"]
print(",".join(str(v) for v in [model, W, L, mode, round(p["ratio"], 4), round(d["ms_per_step"]["train"], 2),
      round(p["store_ms_per_step"], 2), round(d["train_arena_peak_mb"], 2), round(p["store_arena_peak_mb"], 2),
      g["tensors"], f'{g["worst_cosine"]:.9f}', f'{g["worst_rel_err"]:.3e}', g.get("evaluations_per_inversion", ""),
      g.get("worst_bound", ""), d.get("threads", ""), cpu, datetime.date.today().isoformat()]))
PY
        tail -n 1 "$CSV"
      done
    done
  done
done
