#!/usr/bin/env bash
# lipt train --init-from (issue 51, item 2): a tiny model trained on one text (GPL-3) fine-tuned on another
# (Apache-2.0): best.ckpt written, the patience counted on the new corpus, lipt eval on the new corpus, the origin in
# run.cfg and metrics.jsonl; a text with a symbol the model cannot read is refused with the way out. Texts: the
# licenses Debian ships (offline), else docs/USAGE.md and docs/PERFORMANCE.md. Usage: finetune_test.sh LIPT_BINARY
set -u
. "$(dirname "$0")/util/e2e.sh" finetune "${1:-}"
ROOT=$REPO

L=/usr/share/common-licenses
if [ -f "$L/GPL-3" ] && [ -f "$L/Apache-2.0" ]; then TEXT_A=$L/GPL-3; TEXT_B=$L/Apache-2.0
else TEXT_A=$ROOT/docs/USAGE.md; TEXT_B=$ROOT/docs/PERFORMANCE.md; fi
CFG=$ROOT/models/tiny.cfg
RUN=(--batch 8 --eval-symbols 3000 --final-eval none --log-every 1 --quiet --threads 1)
bpc_of() { sed -n 's/.*"bpc":\([0-9.]*\).*/\1/p'; }

# the model to start from: 60 steps on text A (every byte has an id, so any text maps onto its vocabulary), and a
# second one whose vocabulary is the symbols of A's lowercase letters
"$LIPT" train --config "$CFG" "${RUN[@]}" --data "$TEXT_A" --vocab bytes --steps 60 --eval-every 30 --out "$TMP/src" &&
  tr -cd 'a-z \n' <"$TEXT_A" >"$TMP/lower.txt" &&
  "$LIPT" train --config "$CFG" "${RUN[@]}" --data "$TMP/lower.txt" --steps 2 --eval-every 0 --out "$TMP/built" ||
  { echo "FAIL training the models to start from"; exit 1; }
src_id=$(sed -n 's/^# run-id = //p' "$TMP/src/run.cfg")

# fine-tuning on text B: a new run in a new folder from the folder's best.ckpt
if "$LIPT" train --init-from "$TMP/src" --data "$TEXT_B" "${RUN[@]}" --steps 40 --eval-every 10 --lr 2e-3 --warmup 5 \
     --patience 3 --out "$TMP/ft" 2>"$TMP/ft.err"; then
  [ -f "$TMP/ft/best.ckpt" ] && [ -f "$TMP/ft/last.ckpt" ] && pass "--init-from a run folder: best.ckpt and last.ckpt written" ||
    fail "fine-tune files: $(ls "$TMP/ft")"
else fail "--init-from: $(cat "$TMP/ft.err")"; fi
head -1 "$TMP/ft/metrics.jsonl" | grep -q "\"event\":\"init\".*\"from\":\"[^\"]*/src/best.ckpt\".*\"from_run\":\"$src_id\".*\"from_step\":60" &&
  grep -q "^# init-from = .*/src/best.ckpt" "$TMP/ft/run.cfg" && grep -q "^# init-from-run = $src_id" "$TMP/ft/run.cfg" &&
  pass "metrics.jsonl and run.cfg record the origin (best.ckpt at step 60 of run $src_id)" ||
  fail "origin record: $(head -1 "$TMP/ft/metrics.jsonl") $(grep init "$TMP/ft/run.cfg")"
# the model config is the checkpoint's; the optimizer and the step are fresh (the first line is step 1)
grep -q "^d_model = 64" "$TMP/ft/run.cfg" && grep -q '"step":1,' "$TMP/ft/metrics.jsonl" &&
  pass "the model config from the checkpoint, the steps counted from 1" || fail "config or steps of the fine-tune"
# lipt eval on the new corpus: the fine-tuned model reads it better than the model it started from
ft=$("$LIPT" eval --ckpt "$TMP/ft/best.ckpt" --split valid --json --quiet 2>"$TMP/e.err" | bpc_of)
st=$("$LIPT" eval --ckpt "$TMP/src/best.ckpt" --data "$TEXT_B" --split valid --json --quiet 2>>"$TMP/e.err" | bpc_of)
[ -n "$ft" ] && [ -n "$st" ] && awk -v a="$ft" -v b="$st" 'BEGIN { exit !(a < b) }' &&
  pass "lipt eval on the new corpus: $ft BPC fine-tuned, $st before" || fail "eval: '$ft' vs '$st': $(cat "$TMP/e.err")"

# the patience counts on the new corpus from a fresh best: at lr 0 nothing improves after the first evaluation, so
# --patience 1 stops at the second (step 10), with best.ckpt from the first (step 5); the source's best BPC (on
# another text) is not the bar
if "$LIPT" train --init-from "$TMP/src/last.ckpt" --data "$TEXT_B" "${RUN[@]}" --steps 40 --eval-every 5 --lr 0 \
     --warmup 0 --schedule constant --patience 1 --out "$TMP/pat" 2>"$TMP/pat.err" &&
   grep -q '"event":"early_stop"' "$TMP/pat/metrics.jsonl" && [ "$(grep -c '"loss"' "$TMP/pat/metrics.jsonl")" = 10 ] &&
   [ "$("$LIPT" info --ckpt "$TMP/pat/best.ckpt" --json 2>/dev/null | sed -n 's/.*"step":\([0-9]*\).*/\1/p')" = 5 ]; then
  pass "--patience 1 at lr 0: best.ckpt at step 5, stopped at step 10 (a fresh best and count on the new corpus)"
else fail "patience: $(cat "$TMP/pat.err") $(grep -c '"loss"' "$TMP/pat/metrics.jsonl") loss lines"; fi

# the fine-tuned run resumes as any run (its origin kept), and run.cfg repeats it
"$LIPT" train --resume --out "$TMP/ft" --steps 44 --quiet --threads 1 2>"$TMP/r.err" &&
  "$LIPT" info --ckpt "$TMP/ft/last.ckpt" --json 2>/dev/null | grep -q "init-from-run" &&
  [ "$(grep -c '"loss"' "$TMP/ft/metrics.jsonl")" = 44 ] && pass "a fine-tuned run resumes, its origin kept in the checkpoint" ||
  fail "resume of a fine-tune: $(cat "$TMP/r.err")"
"$LIPT" train --init-from "$TMP/src/best.ckpt" --config "$TMP/ft/run.cfg" --steps 3 --out "$TMP/rep" --quiet --threads 1 2>"$TMP/rep.err" &&
  pass "lipt train --init-from CKPT --config run.cfg repeats a fine-tune" || fail "repeat: $(cat "$TMP/rep.err")"

# refusals: one line each, saying what to do
expect_error() {
  local name=$1 want=$2; shift 2
  "$@" >"$TMP/out" 2>"$TMP/err"
  local rc=$?
  if [ $rc -ne 0 ] && [ $rc -lt 128 ] && [ "$(wc -l <"$TMP/err")" -eq 1 ] && grep -q -- "$want" "$TMP/err"; then
    pass "$name: $(cat "$TMP/err")"
  else fail "$name: exit $rc: $(head -c 400 "$TMP/err")"; fi
}
printf 'caf\xc3\xa9 au lait\n%.0s' $(seq 1 200) >"$TMP/cafe.txt"
expect_error "a symbol outside the model's vocabulary" "--vocab bytes" \
  "$LIPT" train --init-from "$TMP/built" --data "$TMP/cafe.txt" "${RUN[@]}" --steps 2 --out "$TMP/x1"
expect_error "--vocab with --init-from" "drop --vocab" \
  "$LIPT" train --init-from "$TMP/src" --data "$TEXT_B" --vocab built "${RUN[@]}" --steps 2 --out "$TMP/x2"
expect_error "another model's keys" "d_model" \
  "$LIPT" train --init-from "$TMP/src" --data "$TEXT_B" --d_model 32 "${RUN[@]}" --steps 2 --out "$TMP/x3"
expect_error "--init-from with --resume" "--init-from" \
  "$LIPT" train --init-from "$TMP/src" --resume --out "$TMP/ft" --steps 50 --quiet
expect_error "--init-from a folder without a checkpoint" "holds no" \
  "$LIPT" train --init-from "$TMP" --data "$TEXT_B" "${RUN[@]}" --steps 2 --out "$TMP/x4"

e2e_done
