#!/usr/bin/env bash
# The invertible model's ablation (issue "the invertible model learns"): trains every candidate config in
# models/ablation/ at the probe scale, then measures it, and writes the table docs/results/ablation.{csv,md}.
#
#   scripts/ablation.sh [--out DIR] [--steps N] [--only NAME[,NAME...]] [--threads N] [--table-only]
#
# Probe protocol: PTB characters, the candidate's config (d_model 128, 4 layers, 4 heads, d_ff 512, seq 64), batch
# 32, Adam (0.9, 0.98) lr 1e-3, 100 warmup + inverse square root, clip 1, seed 0, 900 steps; validation BPC on the
# first 50,000 symbols of the validation split (non-overlapping windows of seq_len). Per candidate it records the
# certificate and measured Jacobian norm of every branch (lipt lipschitz, 2 windows of 8 tokens), the inversion of 3
# test windows (lipt invert), and the training speed. Resumable: a finished candidate (DIR/NAME/result.json) is
# skipped; an interrupted one resumes from its last checkpoint. Each finished candidate's figures are also copied to
# docs/results/ablation/NAME.json (committed: the table is rebuilt from those, so rows outlive their run folders).
# Extra training flags for a candidate can be given in
# its config file as a comment line "# train: --flag value ...".
set -euo pipefail
cd "$(dirname "$0")/.."
OUT=runs/ablation
STEPS=900
ONLY=""
THREADS=${LIPT_THREADS:-}
TABLE_ONLY=0
while [ $# -gt 0 ]; do
  case "$1" in
    --out) OUT="$2"; shift 2 ;;
    --steps) STEPS="$2"; shift 2 ;;
    --only) ONLY="$2"; shift 2 ;;
    --threads) THREADS="$2"; shift 2 ;;
    --table-only) TABLE_ONLY=1; shift ;;
    -h|--help) sed -n 2,14p "$0"; exit 0 ;;
    *) echo "ablation.sh: unknown option $1 (see --help)" >&2; exit 2 ;;
  esac
done
LIPT=${LIPT:-build/lipt}
[ -x "$LIPT" ] || { echo "ablation.sh: $LIPT not built (cmake -S . -B build && cmake --build build -j)" >&2; exit 1; }
DATA=${LIPT_DATA_PTB:-}
if [ -z "$DATA" ]; then
  for d in "${LIPT_DATA:-}/ptb" data/ptb ../shared/data/ptb; do [ -d "$d" ] && { DATA="$d"; break; }; done
fi
[ -n "$DATA" ] || { echo "ablation.sh: PTB not found (set LIPT_DATA or run data/get_ptb.sh)" >&2; exit 1; }
TARGS=()
[ -n "$THREADS" ] && TARGS=(--threads "$THREADS")
mkdir -p "$OUT" docs/results/ablation

run_one() { # name
  local name="$1" cfg="models/ablation/$1.cfg" dir="$OUT/$1"
  if [ -f "$dir/result.json" ]; then
    echo "== $name: done (cached)"; cp "$dir/result.json" "docs/results/ablation/$name.json"; return 0
  fi
  local extra
  extra=$(sed -n 's/^# train: //p' "$cfg" | head -1)
  local src=(--config "$cfg" --force)   # a run cut off before its first checkpoint starts over
  [ -f "$dir/last.ckpt" ] && src=(--resume)   # the checkpoint holds the model config
  echo "== $name: training ($STEPS steps)"
  # shellcheck disable=SC2086
  "$LIPT" train "${src[@]}" --data "$DATA" --out "$dir" --steps "$STEPS" --batch 32 --lr 1e-3 --warmup 100 \
    --schedule invsqrt --clip 1 --seed 0 --beta1 0.9 --beta2 0.98 --eval-every "$STEPS" --eval-symbols 50000 \
    --final-eval none --save-every 100 --quiet "${TARGS[@]}" $extra
  echo "== $name: measuring"
  "$LIPT" lipschitz --ckpt "$dir/last.ckpt" --data "$DATA" --tokens 8 --windows 2 --json "${TARGS[@]}" \
    >"$dir/lipschitz.json" || true   # non-zero exit = not certified: recorded in the JSON
  # invertible models and the coupling control invert; the others report an error, recorded as no inversion
  "$LIPT" invert --ckpt "$dir/last.ckpt" --data "$DATA" --split test --windows 3 --max-iter 1000 --json \
    "${TARGS[@]}" >"$dir/invert.json" 2>/dev/null || true
  "$LIPT" info --ckpt "$dir/last.ckpt" --json >"$dir/info.json" || true   # the parameter count
  python3 scripts/ablation_table.py --cell "$dir" --name "$name" >"$dir/result.json.tmp"
  mv "$dir/result.json.tmp" "$dir/result.json"
  cp "$dir/result.json" "docs/results/ablation/$name.json"
}

if [ "$TABLE_ONLY" = 0 ]; then
  if [ -n "$ONLY" ]; then names=${ONLY//,/ }; else names=$(ls models/ablation/*.cfg | xargs -n1 basename | sed 's/\.cfg$//'); fi
  for n in $names; do
    [ -f "models/ablation/$n.cfg" ] || { echo "ablation.sh: no models/ablation/$n.cfg" >&2; exit 2; }
    run_one "$n"
    python3 scripts/ablation_table.py --table docs/results/ablation --csv docs/results/ablation.csv --md docs/results/ablation.md
  done
fi
python3 scripts/ablation_table.py --table docs/results/ablation --csv docs/results/ablation.csv --md docs/results/ablation.md
echo "== table: docs/results/ablation.md"
