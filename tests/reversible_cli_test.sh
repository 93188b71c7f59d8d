#!/usr/bin/env bash
# lipt train --memory invert end to end (docs/PERFORMANCE.md "Memory from invertibility"):
#   - refused, exit 2 with the reason, for a model that is not invertible, for dropout that makes a fixed-point
#     branch no contraction, and for --recompute beside another --memory;
#   - coupling blocks (coupling_grid) train to the same weights, bit for bit, in store and invert modes, dropout on;
#   - a fixed-point run in invert mode stopped and resumed ends on the weights of the uninterrupted invert run, bit for
#     bit, and within float rounding of store-all's.
# Usage: reversible_cli_test.sh LIPT_BINARY
set -uo pipefail
. "$(dirname "$0")/util/e2e.sh" reversible_cli "${1:-}"
export LIPT_THREADS=2
e2e_corpus "$TMP/corpus.txt"
SMALL=(--d_model 32 --d_ff 64 --n_layers 3 --n_heads 2 --seq_len 32 --batch 4)
COMMON=(--data "$TMP/corpus.txt" --eval-every 0 --final-eval none --save-every 0 --save-minutes 0 --log-every 1 --quiet)

refused() { # what, expected text, command...
  local what=$1 want=$2
  shift 2
  "$@" >"$TMP/out" 2>"$TMP/err"
  local rc=$?
  if [ $rc -eq 2 ] && grep -q -- "$want" "$TMP/err"; then pass "$what: exit 2, '$want'"
  else fail "$what: exit $rc, message: $(head -c 400 "$TMP/err")"; fi
}
refused "dp model" "use --memory recompute" \
  "$LIPT" train --config "$REPO/models/ptb-dp.cfg" "${SMALL[@]}" "${COMMON[@]}" --out "$TMP/r1" --steps 2 --memory invert
refused "fixed-point model with dropout 0.2" "lower dropout below 1 - c" \
  "$LIPT" train --config "$REPO/models/ptb-contractive.cfg" "${SMALL[@]}" "${COMMON[@]}" --out "$TMP/r2" --steps 2 \
  --memory invert --dropout 0.2
refused "--recompute with --memory invert" "--recompute means --memory recompute" \
  "$LIPT" train --config "$REPO/models/ptb-contractive.cfg" "${SMALL[@]}" "${COMMON[@]}" --out "$TMP/r3" --steps 2 \
  --memory invert --recompute
refused "an unknown mode" "store, recompute or invert" \
  "$LIPT" train --config "$REPO/models/ptb-contractive.cfg" "${SMALL[@]}" "${COMMON[@]}" --out "$TMP/r4" --steps 2 \
  --memory everything

weights() { "$LIPT" export --ckpt "$1/last.ckpt" --out "$2" >/dev/null 2>&1; }
same() { # what, a.safetensors, b.safetensors, tolerance
  local out
  if out=$(python3 "$HERE/compare_params.py" "$2" "$3" "$4"); then pass "$1: $out"; else fail "$1: $out"; fi
}

# coupling: store and invert, the same bits
for mode in store invert; do
  "$LIPT" train --config "$REPO/models/ablation/e-coupling-dp.cfg" --coupling_grid 16 --dropout 0.1 "${SMALL[@]}" \
    "${COMMON[@]}" --out "$TMP/c-$mode" --steps 6 --memory $mode 2>"$TMP/err" || fail "coupling $mode: $(cat "$TMP/err")"
  weights "$TMP/c-$mode" "$TMP/c-$mode.st"
done
same "coupling, dropout 0.1, store against invert" "$TMP/c-store.st" "$TMP/c-invert.st" 0
cmp -s <(grep -o '"loss":[^,]*' "$TMP/c-store/metrics.jsonl") <(grep -o '"loss":[^,]*' "$TMP/c-invert/metrics.jsonl") &&
  pass "coupling: the same loss at every step" || fail "coupling: the losses differ"

# fixed point: invert straight, invert stopped at step 4 and resumed, store
FP=(--config "$REPO/models/ptb-contractive.cfg" "${SMALL[@]}" "${COMMON[@]}")
"$LIPT" train "${FP[@]}" --out "$TMP/f-straight" --steps 8 --memory invert 2>"$TMP/err" || fail "invert: $(cat "$TMP/err")"
"$LIPT" train "${FP[@]}" --out "$TMP/f-resumed" --steps 4 --memory invert 2>"$TMP/err" || fail "invert 4: $(cat "$TMP/err")"
"$LIPT" train --out "$TMP/f-resumed" --resume --steps 8 --memory invert --quiet 2>"$TMP/err" ||
  fail "invert resume: $(cat "$TMP/err")"
"$LIPT" train "${FP[@]}" --out "$TMP/f-store" --steps 8 2>"$TMP/err" || fail "store: $(cat "$TMP/err")"
for r in straight resumed store; do weights "$TMP/f-$r" "$TMP/f-$r.st"; done
same "fixed point, invert: resumed at step 4 against straight" "$TMP/f-straight.st" "$TMP/f-resumed.st" 0
same "fixed point: invert against store-all" "$TMP/f-store.st" "$TMP/f-straight.st" 1e-4

e2e_done
