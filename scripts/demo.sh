#!/usr/bin/env bash
# The lipt demo: installs what is missing, builds, trains the invertible Transformer (every residual branch
# certified Lipschitz < 1) on Penn Treebank characters for a few minutes, prints its certificate and test bits per
# character, inverts a test sentence from the model's last hidden state and shows it recovered, and samples text.
# DEMO_STEPS (default 900) and DEMO_THREADS tune it; without DEMO_THREADS lipt chooses its threads (the cores other
# programs leave idle: forcing all of them beside another job made training 12.7x slower). The run lands in runs/demo.
set -euo pipefail
cd "$(dirname "$0")/.."
STEPS=${DEMO_STEPS:-900}
# lipt's --threads only when asked for: its default follows the load
THREADS=(${DEMO_THREADS:+--threads "$DEMO_THREADS"})
t0=$(date +%s)

echo "== 1. dependencies"
bash scripts/deps.sh
echo "== 2. build (build/)"
cmake -S . -B build -DCMAKE_BUILD_TYPE=Release >/dev/null
cmake --build build -j"${DEMO_THREADS:-$(nproc 2>/dev/null || echo 2)}" --target lipt_cli >/dev/null
LIPT=build/lipt

echo "== 3. data: Penn Treebank characters"
if ! $LIPT data --data ptb; then
  echo "PTB not found locally (looked in \$LIPT_DATA, data/, ../shared/data): downloading"
  bash data/get_ptb.sh || { echo "error: PTB is not available and could not be downloaded; see data/README.md" >&2; exit 1; }
fi

echo "== 4. train the invertible model (models/ptb-demo.cfg: clipped-dp attention with a relative-position bias +"
echo "      contractive feed-forward, every branch certified Lipschitz <= 0.9), $STEPS steps"
rm -rf runs/demo
$LIPT train --config models/ptb-demo.cfg --data ptb --out runs/demo --steps "$STEPS" --batch 16 --lr 2e-3 \
  --warmup 100 --eval-every 300 --eval-symbols 50000 --final-eval none "${THREADS[@]}"

echo "== 5. the certificate: every branch's Lipschitz bound (must be < 1) and its measured Jacobian norm"
$LIPT lipschitz --ckpt runs/demo/last.ckpt --data ptb --tokens 8 --windows 1 "${THREADS[@]}" | tail -n +2

echo "== 6. test bits per character (whole test split, non-overlapping windows of 64)"
$LIPT eval --ckpt runs/demo/last.ckpt --split test "${THREADS[@]}" --quiet

echo "== 7. invert a test sentence: recover the input from the last hidden state"
$LIPT invert --ckpt runs/demo/last.ckpt --data ptb --split test --windows 1 "${THREADS[@]}"

echo "== 8. sample 300 symbols"
$LIPT sample --ckpt runs/demo/last.ckpt --prompt "the_" --length 300 --temperature 0.8 --seed 1 "${THREADS[@]}"
echo
echo "== demo done in $(( $(date +%s) - t0 )) s"
