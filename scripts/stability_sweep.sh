#!/usr/bin/env bash
# The stability sweep of docs/RESULTS.md ("Stability without warmup"): Adam at a fixed learning rate (no warmup, no
# decay, no clipping; Adam beta2 0.999 and 0.98), width 256, 4 heads, d_ff 1024, 1,000 steps of 8 x 64 PTB characters,
# depths 2-18, for DP and tied-L2 attention in pre-LN and post-LN blocks and the invertible model. Resumable: run it again to continue (finished
# cells are read back from the CSVs, an unfinished one continues from its checkpoint). Cells run in priority order:
# the post-LN pair first (the paper's claim), then pre-LN and the invertible model, lr 1e-3 before 3e-4; the first five
# depths before the in-between ones.
#   LIPT=build/lipt THREADS=2 scripts/stability_sweep.sh        # about 40 min per variant and learning rate at 2 threads
set -euo pipefail
cd "$(dirname "$0")/.."
LIPT=${LIPT:-build/lipt}
THREADS=${THREADS:-2}
COMMON=(--d-model 256 --heads 4 --d-ff 1024 --seq-len 64 --batch 8 --steps 1000 --clip 0 --threads "$THREADS"
        --window 20 --rise 0.5 --valid-symbols 32768 --runs runs/stability)
run() { # lr beta2 variants depths
  local out="docs/results/stability/lr$1"
  [ "$2" = 0.98 ] || out="$out-beta2-$2"
  echo "== lr $1, beta2 $2, $3, depths $4" >&2
  "$LIPT" experiment stability "${COMMON[@]}" --lr "$1" --beta2 "$2" --variants "$3" --depths "$4" --out "$out" >/dev/null
}
# The cells that decide the paper's claims first (with Adam's usual beta2 0.999, where post-LN DP collapses at 18
# layers): the invertible model and pre-LN DP at 18 layers, tied L2 post-LN at 10, post-LN DP at 14 (between 10 and
# 18), post-LN DP at 18 with the smaller lr, pre-LN tied L2 at 18.
run 1e-3 0.999 contractive 18
run 1e-3 0.999 dp 18
run 1e-3 0.999 l2-tied-post 10
run 1e-3 0.999 dp-post 14
run 3e-4 0.999 dp-post 18
run 1e-3 0.999 l2-tied 18
# then the whole grid: first Adam's usual beta2 0.999 (post-LN DP collapses at 18 layers there, not at 0.98), then lipt's default 0.98
for depths in 18,10,2,14,6 4,8,12,16; do
  for lr in 1e-3 3e-4; do
    for beta2 in 0.999 0.98; do
      for variants in dp-post,l2-tied-post dp,l2-tied contractive; do
        run "$lr" "$beta2" "$variants" "$depths"
      done
    done
  done
done
echo "== done: docs/results/stability/lr*/stability.csv" >&2
