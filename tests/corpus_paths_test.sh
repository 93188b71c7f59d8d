#!/usr/bin/env bash
# Paths and corpora of the commands that read a checkpoint (issue 51, item 6):
#   1. a run's stored corpus grown past the cap (LIPT_MAX_CORPUS_GB) is refused at once by eval, lipschitz and invert,
#      before any checksum (a 1 TiB sparse file used to be read whole for its CRC-32: most of an hour, silently);
#   2. a corpus and run folder named with terminal escapes ("\x1b[31m") never reach the terminal raw: every command's
#      stdout and stderr carry them as \x1b;
#   3. --ckpt takes a run folder (its best.ckpt, else last.ckpt) in eval, sample, info, export, invert, lipschitz, and
#      a folder with neither is refused with the reason.
# Each command under `timeout 30`, so a hang fails.   Usage: corpus_paths_test.sh LIPT_BINARY
set -u
. "$(dirname "$0")/util/e2e.sh" corpus_paths "${1:-}"
ROOT=$REPO
export LIPT_THREADS=1
ESC=$(printf '\033')
NAME="co${ESC}[31mrpus"
mkdir -p "$TMP/$NAME"
DATA="$TMP/$NAME/text${ESC}]0;title${ESC}\\.txt"
cat "$ROOT/README.md" "$ROOT/docs/PERFORMANCE.md" > "$DATA"
RUN="$TMP/$NAME/run"
T=(timeout 30 "$LIPT")

# ---- training on it: nothing raw on the terminal
if "${T[@]}" train --config "$ROOT/models/tiny.cfg" --vocab bytes --data "$DATA" --out "$RUN" --steps 4 --batch 2 \
     --eval-every 2 --eval-symbols 500 --final-eval none --threads 1 > "$TMP/out" 2> "$TMP/err"; then
  if grep -q "$ESC" "$TMP/out" "$TMP/err"; then fail "train printed a raw escape: $(grep -a "$ESC" "$TMP/err" | head -2 | cat -v)"
  else pass "train: the escapes in the corpus's path shown as \\x1b"; fi
else
  fail "train: $(cat -v "$TMP/err")"; echo "train: $fails failed"; exit 1
fi

# ---- a run folder as --ckpt, and escapes in every command's output
run_cmd() { # NAME CMD...: exit 0, no raw escape on stdout or stderr
  local name=$1; shift
  if "$@" > "$TMP/out" 2> "$TMP/err"; then
    if grep -q "$ESC" "$TMP/out" "$TMP/err"; then fail "$name: a raw escape: $(grep -ah "$ESC" "$TMP/out" "$TMP/err" | head -2 | cat -v)"
    else pass "$name"; fi
  else fail "$name: exit $?: $(head -c 400 "$TMP/err" | cat -v)"; fi
}
# escapes, on the checkpoint files
run_cmd "eval --ckpt FILE (the run's own corpus)" "${T[@]}" eval --ckpt "$RUN/best.ckpt" --max-symbols 300
run_cmd "lipschitz --ckpt FILE" "${T[@]}" lipschitz --ckpt "$RUN/best.ckpt" --tokens 4 --windows 1 --ascent-steps 2
run_cmd "export --ckpt FILE" "${T[@]}" export --ckpt "$RUN/best.ckpt" --out "$TMP/$NAME/m0.safetensors"
run_cmd "plot RUN" "${T[@]}" plot "$RUN" --out "$TMP/$NAME/p.svg"
run_cmd "data --data PATH" "${T[@]}" data --data "$DATA" --vocab bytes
# run folders
run_cmd "eval --ckpt RUN_FOLDER" "${T[@]}" eval --ckpt "$RUN" --max-symbols 300
run_cmd "sample --ckpt RUN_FOLDER" "${T[@]}" sample --ckpt "$RUN" --length 20 --seed 1
run_cmd "info --ckpt RUN_FOLDER" "${T[@]}" info --ckpt "$RUN"
grep -q "best.ckpt" "$TMP/out" && pass "info of a run folder reads its best.ckpt" || fail "info: not best.ckpt: $(head -3 "$TMP/out" | cat -v)"
run_cmd "export --ckpt RUN_FOLDER" "${T[@]}" export --ckpt "$RUN" --out "$TMP/$NAME/m.safetensors"
run_cmd "invert --ckpt RUN_FOLDER" "${T[@]}" invert --ckpt "$RUN" --windows 1
run_cmd "lipschitz --ckpt RUN_FOLDER" "${T[@]}" lipschitz --ckpt "$RUN" --tokens 4 --windows 1 --ascent-steps 2
mv "$RUN/best.ckpt" "$TMP/best.ckpt"
run_cmd "eval --ckpt RUN_FOLDER without best.ckpt (its last.ckpt)" "${T[@]}" eval --ckpt "$RUN" --max-symbols 300
mkdir -p "$TMP/empty"
if "${T[@]}" eval --ckpt "$TMP/empty" > "$TMP/out" 2> "$TMP/err"; then fail "eval of a folder without checkpoints: exit 0"
elif grep -q "no best.ckpt or last.ckpt" "$TMP/err" && [ "$(wc -l < "$TMP/err")" -eq 1 ]; then
  pass "eval of a folder without checkpoints: $(cat "$TMP/err")"
else fail "eval of a folder without checkpoints: $(cat "$TMP/err")"; fi
mv "$TMP/best.ckpt" "$RUN/best.ckpt"

# ---- the stored corpus grown past the cap: refused at once, before any checksum
if truncate -s 1T "$DATA" 2>/dev/null; then
  for cmd in "eval --max-symbols 300" "lipschitz --tokens 4 --windows 1" "invert --windows 1"; do
    start=$(date +%s)
    # shellcheck disable=SC2086
    timeout 30 "$LIPT" $cmd --ckpt "$RUN/best.ckpt" > "$TMP/out" 2> "$TMP/err"
    rc=$? secs=$(( $(date +%s) - start ))
    if [ $rc -eq 124 ]; then fail "${cmd%% *} of a 1 TiB corpus: still reading after 30 s (a checksum before the cap)"
    elif [ $rc -ne 0 ] && grep -q "cap on a corpus" "$TMP/err"; then
      pass "${cmd%% *} of a 1 TiB corpus: refused in ${secs} s: $(tail -1 "$TMP/err" | cat -v | cut -c1-160)"
    else fail "${cmd%% *} of a 1 TiB corpus: exit $rc: $(cat -v "$TMP/err")"; fi
  done
else
  echo "note: this file system cannot hold a 1 TiB sparse file: the cap checks are skipped"
fi

e2e_done
