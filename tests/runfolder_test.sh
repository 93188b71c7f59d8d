#!/usr/bin/env bash
# Run folders are append-only history (issue 51): a resume into a folder holding another run, or from a checkpoint
# older than the folder's newest, is refused without --force and destroys nothing with it (the newer files kept
# aside); lipt export never replaces a file lipt owns in a run folder (fine-tuning: tests/finetune_test.sh). Texts: the licenses Debian ships (offline), else docs/USAGE.md.
# Usage: runfolder_test.sh LIPT_BINARY
set -u
. "$(dirname "$0")/util/e2e.sh" runfolder "${1:-}"
ROOT=$REPO

L=/usr/share/common-licenses
if [ -f "$L/GPL-3" ] && [ -f "$L/Apache-2.0" ]; then TEXT_A=$L/GPL-3; TEXT_B=$L/Apache-2.0
else TEXT_A=$ROOT/docs/USAGE.md; TEXT_B=$ROOT/docs/PERFORMANCE.md; fi
CFG=$ROOT/models/tiny.cfg
COMMON=(--config "$CFG" --vocab bytes --batch 4 --eval-symbols 2000 --final-eval none --log-every 1 --quiet --threads 1)

# The state of a run folder: one line per file (name, size, checksum), then every metrics line of every metrics file.
snapshot() { (cd "$1" && for f in $(ls -A | sort); do [ "$f" = .lock ] || echo "$f $(cksum <"$f")"; done); }
metrics_lines() { cat "$1"/metrics*.jsonl 2>/dev/null | wc -l; }
ckpt_sums() { (cd "$1" && cat ./*.ckpt 2>/dev/null | wc -c; for f in ./*.ckpt; do cksum <"$f"; done | sort); }
# Nothing of folder state $2 (a copy of the folder before) lost in folder $1: every checkpoint's bytes in some
# checkpoint (but $3, the checkpoint a rollback resumed from: the run goes on from it and may replace it with a better
# best.ckpt, as any run does), every metrics line in some metrics file, run.cfg's text at the head of some run*.cfg.
kept_all() {
  local now=$1 before=$2 skip=${3:-} f s
  for f in "$before"/*.ckpt; do
    [ "$(basename "$f")" = "$skip" ] && continue
    s=$(cksum <"$f")
    (cd "$now" && for g in ./*.ckpt; do cksum <"$g"; done) | grep -qxF "$s" || { echo "lost $(basename "$f")"; return 1; }
  done
  while IFS= read -r line; do
    grep -qxF -- "$line" "$now"/metrics*.jsonl || { echo "lost metrics line: $line"; return 1; }
  done <"$before/metrics.jsonl"
  for f in "$now"/run*.cfg; do
    [ "$(head -c "$(wc -c <"$before/run.cfg")" "$f")" = "$(cat "$before/run.cfg")" ] && return 0
  done
  echo "lost run.cfg"; return 1
}
# expect_refused NAME DIR CMD...: exit 1, one line on stderr, the folder DIR unchanged (files and metrics lines).
expect_refused() {
  local name=$1 dir=$2; shift 2
  local before after lines_before
  before=$(snapshot "$dir"); lines_before=$(metrics_lines "$dir")
  "$@" >"$TMP/out" 2>"$TMP/err"
  local rc=$?
  after=$(snapshot "$dir")
  if [ $rc -eq 0 ]; then fail "$name: exit 0 ($(metrics_lines "$dir") metrics lines, were $lines_before)"
  elif [ $rc -ge 128 ]; then fail "$name: crashed (exit $rc)"
  elif [ "$(wc -l <"$TMP/err")" -ne 1 ]; then fail "$name: $(wc -l <"$TMP/err") lines on stderr: $(head -c 400 "$TMP/err")"
  elif [ "$before" != "$after" ]; then fail "$name: refused but the folder changed: $(diff <(echo "$before") <(echo "$after") | head -4)"
  else pass "$name: refused, $dir unchanged ($lines_before metrics lines): $(cat "$TMP/err")"; fi
}

# ---- two runs: A (7 steps) and B (another seed: another run): 25 steps, then resumed to 35 at a learning rate that
# ruins it, so that its best.ckpt (step 25 or before) is older than its last.ckpt (step 35)
"$LIPT" train "${COMMON[@]}" --data "$TEXT_A" --steps 7 --eval-every 5 --seed 1 --out "$TMP/A" >/dev/null &&
  "$LIPT" train "${COMMON[@]}" --data "$TEXT_A" --steps 25 --eval-every 10 --save-every 10 --seed 2 --out "$TMP/B" >/dev/null &&
  "$LIPT" train --resume --out "$TMP/B" --steps 35 --lr 1 --warmup 0 --schedule constant --quiet --threads 1 >/dev/null ||
  { echo "FAIL training the two runs"; exit 1; }
bstep=$("$LIPT" info --ckpt "$TMP/B/best.ckpt" --json 2>/dev/null | sed -n 's/.*"step":\([0-9]*\).*/\1/p')
[ "$(grep -c '"loss"' "$TMP/B/metrics.jsonl")" = 35 ] && [ -n "$bstep" ] && [ "$bstep" -lt 35 ] &&
  pass "runs A (7 steps) and B (35, best.ckpt at step $bstep)" || fail "run B: $(grep -c '"loss"' "$TMP/B/metrics.jsonl") loss lines, best at '$bstep'"
id_a=$(sed -n 's/^# run-id = //p' "$TMP/A/run.cfg"); id_b=$(sed -n 's/^# run-id = //p' "$TMP/B/run.cfg")
[ -n "$id_a" ] && [ -n "$id_b" ] && [ "$id_a" != "$id_b" ] && pass "run.cfg records each run's id ($id_a, $id_b)" ||
  fail "run ids in run.cfg: '$id_a' '$id_b'"
cp -a "$TMP/B" "$TMP/B0" # B as it was

# ---- the reproducers: each refused, naming both runs and steps and what --force does
expect_refused "--resume --ckpt A/last.ckpt --out B (another run)" "$TMP/B" \
  "$LIPT" train --resume --ckpt "$TMP/A/last.ckpt" --out "$TMP/B" --steps 10 --quiet --threads 1
grep -q "$id_a" "$TMP/err" && grep -q "$id_b" "$TMP/err" && grep -q "step 7" "$TMP/err" && grep -q "step 35" "$TMP/err" &&
  grep -q -- "--force" "$TMP/err" && pass "the message names both runs, both steps and --force" || fail "message: $(cat "$TMP/err")"
expect_refused "--resume --ckpt B/best.ckpt (step $bstep, older than B/last.ckpt)" "$TMP/B" \
  "$LIPT" train --resume --ckpt "$TMP/B/best.ckpt" --steps 35 --quiet --threads 1
grep -q "step $bstep" "$TMP/err" && grep -q "step 35" "$TMP/err" && grep -q -- "--force" "$TMP/err" &&
  pass "the rollback message names both steps and --force" || fail "rollback message: $(cat "$TMP/err")"
for f in last.ckpt best.ckpt metrics.jsonl run.cfg; do
  expect_refused "lipt export --out B/$f" "$TMP/B" "$LIPT" export --ckpt "$TMP/A/last.ckpt" --out "$TMP/B/$f"
done
expect_refused "lipt export --out B/new.ckpt" "$TMP/B" "$LIPT" export --ckpt "$TMP/A/last.ckpt" --out "$TMP/B/new.ckpt"
if "$LIPT" export --ckpt "$TMP/B/last.ckpt" --out "$TMP/B/last.safetensors" 2>"$TMP/err" &&
   "$LIPT" export --ckpt "$TMP/B/last.ckpt" --out "$TMP/B/last.safetensors" 2>>"$TMP/err"; then
  pass "lipt export into a run folder under a name of its own (and again over its own export)"
  rm "$TMP/B/last.safetensors"
else fail "export beside a run: $(cat "$TMP/err")"; fi

# ---- --force: nothing destroyed; the newer files kept aside, an event line says so
cp -a "$TMP/B0" "$TMP/Bf"
n_before=$(metrics_lines "$TMP/Bf")
if "$LIPT" train --resume --ckpt "$TMP/A/last.ckpt" --out "$TMP/Bf" --steps 10 --force --quiet --threads 1 >/dev/null 2>"$TMP/err" &&
   why=$(kept_all "$TMP/Bf" "$TMP/B0") && [ -f "$TMP/Bf/last.step35.ckpt" ] &&
   grep -q '"event":"resume".*"kept_aside"' "$TMP/Bf/metrics.jsonl" && grep -q "$id_a" "$TMP/Bf/metrics.jsonl" &&
   [ "$(metrics_lines "$TMP/Bf")" -gt "$n_before" ]; then
  pass "--force into another run's folder: B's checkpoints, metrics and run.cfg kept aside ($(ls "$TMP/Bf" | tr '\n' ' '))"
else fail "--force into another run: $(cat "$TMP/err") ${why:-} $(ls "$TMP/Bf" | tr '\n' ' ')"; fi
cp -a "$TMP/B0" "$TMP/Br"
if "$LIPT" train --resume --ckpt "$TMP/Br/best.ckpt" --steps 35 --force --quiet --threads 1 >/dev/null 2>"$TMP/err" &&
   why=$(kept_all "$TMP/Br" "$TMP/B0" best.ckpt) && [ -f "$TMP/Br/last.step35.ckpt" ] && [ -f "$TMP/Br/metrics.after$bstep.jsonl" ] &&
   grep -q '"event":"resume".*"kept_aside"' "$TMP/Br/metrics.jsonl" &&
   [ "$(grep -c '"loss"' "$TMP/Br/metrics.after$bstep.jsonl")" = $((35 - bstep)) ]; then
  pass "--force rollback to best.ckpt: last.ckpt kept as last.step35.ckpt, metrics past step $bstep in metrics.after$bstep.jsonl"
else fail "--force rollback: $(cat "$TMP/err") ${why:-} $(ls "$TMP/Br" | tr '\n' ' ')"; fi
# a fresh run with --force over another run keeps that run's files aside too
cp -a "$TMP/B0" "$TMP/Bn"
if "$LIPT" train "${COMMON[@]}" --data "$TEXT_A" --steps 3 --seed 3 --out "$TMP/Bn" --force >/dev/null 2>"$TMP/err" &&
   why=$(kept_all "$TMP/Bn" "$TMP/B0") && [ "$(grep -c '"loss"' "$TMP/Bn/metrics.jsonl")" = 3 ]; then
  pass "a fresh run with --force over B keeps B's files aside ($(ls "$TMP/Bn" | tr '\n' ' '))"
else fail "fresh --force: $(cat "$TMP/err") ${why:-}"; fi
# the ordinary resumes are unchanged: the folder's own last.ckpt, and a copy of a run resumed from its original
cp -a "$TMP/B0" "$TMP/Bc"
# (B's metrics then skip the steps that Bc holds: 35 + 2 loss lines)
"$LIPT" train --resume --out "$TMP/Bc" --steps 38 --quiet --threads 1 >/dev/null 2>"$TMP/err" &&
  "$LIPT" train --resume --ckpt "$TMP/Bc/last.ckpt" --out "$TMP/B" --steps 40 --quiet --threads 1 >/dev/null 2>>"$TMP/err" &&
  [ "$(grep -c '"loss"' "$TMP/B/metrics.jsonl")" = 37 ] && pass "a run's own resume, and a copy continued from a newer checkpoint of its run" ||
  fail "ordinary resume: $(cat "$TMP/err")"

# ---- every way at once: files and metrics lines counted before and after
cp -a "$TMP/B0" "$TMP/W"
files0=$(ls -A "$TMP/W" | wc -l); lines0=$(metrics_lines "$TMP/W"); sums0=$(ckpt_sums "$TMP/W")
"$LIPT" train --resume --ckpt "$TMP/A/last.ckpt" --out "$TMP/W" --steps 10 --quiet --threads 1 >/dev/null 2>&1
"$LIPT" train --resume --ckpt "$TMP/W/best.ckpt" --out "$TMP/W" --steps 35 --quiet --threads 1 >/dev/null 2>&1
for f in last.ckpt best.ckpt metrics.jsonl run.cfg; do "$LIPT" export --ckpt "$TMP/A/last.ckpt" --out "$TMP/W/$f" 2>/dev/null; done
"$LIPT" train "${COMMON[@]}" --data "$TEXT_A" --steps 3 --out "$TMP/W" >/dev/null 2>&1
files1=$(ls -A "$TMP/W" | wc -l); lines1=$(metrics_lines "$TMP/W"); sums1=$(ckpt_sums "$TMP/W")
[ "$files0 $lines0" = "$files1 $lines1" ] && [ "$sums0" = "$sums1" ] &&
  pass "every way without --force: $files1 files, $lines1 metrics lines, the same checkpoints as before" ||
  fail "without --force: files $files0 -> $files1, metrics lines $lines0 -> $lines1, checkpoints $( [ "$sums0" = "$sums1" ] && echo same || echo changed)"
"$LIPT" train --resume --ckpt "$TMP/A/last.ckpt" --out "$TMP/W" --steps 10 --force --quiet --threads 1 >/dev/null 2>&1
"$LIPT" train --resume --ckpt "$TMP/W/best.ckpt" --out "$TMP/W" --steps 35 --force --quiet --threads 1 >/dev/null 2>&1
"$LIPT" train "${COMMON[@]}" --data "$TEXT_A" --steps 3 --out "$TMP/W" --force >/dev/null 2>&1
files2=$(ls -A "$TMP/W" | wc -l); lines2=$(metrics_lines "$TMP/W")
why=$(kept_all "$TMP/W" "$TMP/B0") && [ "$files2" -gt "$files0" ] && [ "$lines2" -gt "$lines0" ] &&
  pass "every way with --force: $files0 -> $files2 files, $lines0 -> $lines2 metrics lines, every earlier file and line kept" ||
  fail "with --force: ${why:-} files $files0 -> $files2, metrics lines $lines0 -> $lines2"

e2e_done
