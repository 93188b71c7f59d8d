#!/usr/bin/env bash
# Repeated side-by-side comparisons for docs/PERFORMANCE.md: every configuration of the page is compared with
# bench/compare_pytorch.sh (lipt, then PyTorch, same threads) once per round, the configurations interleaved within a
# round, so that a slow phase of a shared machine hits both programs and several configurations alike. Then
# bench/summarize_rounds.py prints the medians over the rounds and the range of the ratio lipt/PyTorch.
# Resumable: a finished (configuration, round) JSON in the output directory is kept.
#
# usage: bench/compare_rounds.sh [--rounds R] [--out DIR] [--lipt PATH] [--threads N] [--only "NAME ..."]
#   names: dp l2 l2-tied contractive contractive-l2 (bench configuration, with sampling and SGEMM; contractive is
#          lipt's invertible model, contractive-l2 the paper's),
#          seq256 seq512 seq1024 width128 width512 (dp scaling; seq128 is the dp row),
#          long128 long512 long1024 long2048 long4096 (dp, batch 1: long contexts; not in the default list);
#          NAME-bf16: NAME at --precision bf16 against PyTorch's bf16 autocast (compare_pytorch.sh --bf16), e.g.
#          --only "dp dp-bf16 l2-tied l2-tied-bf16": summarize_rounds.py then adds bf16 / float32 per round
set -euo pipefail
cd "$(dirname "$0")/.."
ROUNDS=3 OUT=bench-rounds LIPT=build/lipt THREADS=2 ONLY=""
while [ $# -gt 0 ]; do
  case $1 in
    --rounds) ROUNDS=$2; shift 2 ;;
    --out) OUT=$2; shift 2 ;;
    --lipt) LIPT=$2; shift 2 ;;
    --threads) THREADS=$2; shift 2 ;;
    --only) ONLY=$2; shift 2 ;;
    --help|-h) sed -n '2,10p' "$0" | sed 's/^# \{0,1\}//'; exit 0 ;;
    *) echo "compare_rounds.sh: unknown option '$1' (see --help)" >&2; exit 2 ;;
  esac
done
case $ROUNDS in ''|*[!0-9]*|0) echo "compare_rounds.sh: --rounds needs a positive integer, got '$ROUNDS'" >&2; exit 2 ;; esac

# --paired-sgemm: the fraction of SGEMM from an SGEMM run right after each training run (summarize_rounds.py)
B="--dropout 0 --batch 16 --paired-sgemm"
S="$B --runs 3 --warmup 1 --steps-per-run 2 --skip-sample --gemm-size 0"
declare -A ARGS=(
  [dp]="--config models/ptb-dp.cfg $B"
  [l2]="--config models/ptb-l2.cfg $B"
  [l2-tied]="--config models/ptb-l2-tied.cfg $B"
  [contractive]="--config models/ptb-contractive.cfg $B"
  [contractive-l2]="--config models/ptb-contractive-l2.cfg $B"
  [seq256]="--config models/ptb-dp.cfg $S --seq_len 256"
  [seq512]="--config models/ptb-dp.cfg $S --seq_len 512"
  [seq1024]="--config models/ptb-dp.cfg $S --seq_len 1024"
  [width128]="--config models/ptb-dp.cfg $S --d_model 128 --d_ff 512"
  [width512]="--config models/ptb-dp.cfg $S --d_model 512 --d_ff 2048"
)
# long contexts: one sequence per step, d256 L4; fewer steps per run as a step grows
L="--config models/ptb-dp.cfg --dropout 0 --batch 1 --runs 3 --warmup 1 --skip-sample --gemm-size 0"
ARGS[long128]="$L --seq_len 128 --steps-per-run 16"
ARGS[long512]="$L --seq_len 512 --steps-per-run 4"
ARGS[long1024]="$L --seq_len 1024 --steps-per-run 2"
ARGS[long2048]="$L --seq_len 2048 --steps-per-run 1"
ARGS[long4096]="$L --seq_len 4096 --steps-per-run 1"
NAMES=${ONLY:-"dp l2 l2-tied contractive seq256 seq512 seq1024 width128 width512"}
for n in $NAMES; do
  [ -n "${ARGS[${n%-bf16}]:-}" ] || { echo "compare_rounds.sh: unknown configuration '$n' (see --help)" >&2; exit 2; }
done
mkdir -p "$OUT"
for r in $(seq "$ROUNDS"); do
  for n in $NAMES; do
    f=$OUT/$n.r$r.json
    [ -s "$f" ] && continue
    echo "== round $r/$ROUNDS: $n" >&2
    base=${n%-bf16} prec=()
    [ "$base" != "$n" ] && prec=(--bf16)
    # shellcheck disable=SC2086  # the argument lists are meant to split
    if bench/compare_pytorch.sh --lipt "$LIPT" --threads "$THREADS" "${prec[@]}" --skip-agreement --json "$f.tmp" \
      -- ${ARGS[$base]} \
      > "$OUT/$n.r$r.txt" 2>&1; then
      mv "$f.tmp" "$f"
    else
      echo "compare_rounds.sh: $n round $r failed, see $OUT/$n.r$r.txt" >&2
      exit 1
    fi
  done
done
/usr/bin/python3 bench/summarize_rounds.py "$OUT"
