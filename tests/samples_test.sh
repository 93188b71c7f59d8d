#!/usr/bin/env bash
# Samples (issue 51, item 6.5): lipt train --sample-every N shows a generated text with the progress and records it in
# metrics.jsonl ("event":"sample"), without changing the training (the same losses, bit for bit, as without);
# lipt sample --num-samples K gives K texts with seeds S..S+K-1 (each the text of its seed alone) and --prompt-file FILE
# starts from a file's bytes (the same text as --prompt with them); coupling blocks sample with the cache (the same
# text as --no-cache).   Usage: samples_test.sh LIPT_BINARY
set -u
. "$(dirname "$0")/util/e2e.sh" samples "${1:-}"
ROOT=$REPO
export LIPT_THREADS=1
COMMON=(--config "$ROOT/models/tiny.cfg" --vocab bytes --data "$ROOT/docs/USAGE.md" --steps 6 --batch 2 --eval-every 3
        --eval-symbols 300 --final-eval none --log-every 1 --threads 1)
losses() { grep -v '"event"\|"eval"' "$1/metrics.jsonl" | sed -n 's/.*"loss":\([^,]*\),.*/\1/p'; }

# ---- train --sample-every
if timeout 60 "$LIPT" train "${COMMON[@]}" --out "$TMP/a" --sample-every 3 --sample-length 40 2> "$TMP/err" > /dev/null; then
  n=$(grep -c '"event":"sample"' "$TMP/a/metrics.jsonl")
  [ "$n" -eq 2 ] && pass "train --sample-every 3: $n samples in metrics.jsonl" || fail "train --sample-every 3: $n samples logged"
  grep -q '^step 3: sample (40 symbols)$' "$TMP/err" && grep -q '^step 6: sample (40 symbols)$' "$TMP/err" &&
    pass "train: the samples shown with the progress" || fail "train: samples not shown: $(head -c 600 "$TMP/err")"
  grep -q '^sample-every = 3$' "$TMP/a/run.cfg" && pass "run.cfg records sample-every" || fail "run.cfg: no sample-every"
else
  fail "train --sample-every: $(cat "$TMP/err")"
fi
if timeout 60 "$LIPT" train "${COMMON[@]}" --out "$TMP/b" --quiet 2> "$TMP/err" > /dev/null &&
   [ -n "$(losses "$TMP/a")" ] && [ "$(losses "$TMP/a")" = "$(losses "$TMP/b")" ]; then
  pass "train: the same losses with and without samples ($(losses "$TMP/a" | tr '\n' ' '))"
else fail "train: samples changed the training: $(losses "$TMP/a" | tr '\n' ' ') / $(losses "$TMP/b" | tr '\n' ' ')"; fi
timeout 60 "$LIPT" train "${COMMON[@]}" --out "$TMP/c" --sample-every -1 2> "$TMP/err" > /dev/null &&
  fail "train --sample-every -1 accepted" || pass "train --sample-every -1: $(cat "$TMP/err")"

# ---- sample --num-samples, --prompt-file
CK="$TMP/a/last.ckpt"
printf 'The' > "$TMP/prompt.txt"
if out=$(timeout 60 "$LIPT" sample --ckpt "$CK" --length 30 --seed 7 --num-samples 3 --json 2>/dev/null); then
  ok=1
  for k in 0 1 2; do
    one=$(timeout 60 "$LIPT" sample --ckpt "$CK" --length 30 --seed $((7 + k)) --json 2>/dev/null |
          python3 -c 'import json, sys; print(json.dumps(json.load(sys.stdin)["text"]))')
    many=$(echo "$out" | python3 -c "import json, sys; print(json.dumps(json.load(sys.stdin)['samples'][$k]))")
    [ "$one" = "$many" ] || { ok=0; fail "sample --num-samples 3: sample $k is not the text of seed $((7 + k)): $many / $one"; }
  done
  [ $ok -eq 1 ] && pass "sample --num-samples 3 --json: 3 texts, each that of its seed alone"
else fail "sample --num-samples: $out"; fi
n=$(timeout 60 "$LIPT" sample --ckpt "$CK" --length 20 --num-samples 4 --prompt-file "$TMP/prompt.txt" 2>/dev/null |
    grep -c '^---$')
[ "$n" -eq 3 ] && pass "sample --num-samples 4: the texts separated by 3 lines ---" || fail "sample --num-samples 4: $n separators"
a=$(timeout 60 "$LIPT" sample --ckpt "$CK" --length 20 --seed 3 --prompt-file "$TMP/prompt.txt" --json 2>/dev/null)
b=$(timeout 60 "$LIPT" sample --ckpt "$CK" --length 20 --seed 3 --prompt The --json 2>/dev/null)
strip() { sed 's/"seconds":[^,]*,"tokens_per_s":[^,]*,//'; }
if [ -n "$a" ] && [ "$(echo "$a" | strip)" = "$(echo "$b" | strip)" ] && echo "$a" | grep -q '"prompt":"The"'; then
  pass "sample --prompt-file: the same text as --prompt with its bytes"
else fail "sample --prompt-file: $a / $b"; fi
for bad in "--prompt x --prompt-file $TMP/prompt.txt" "--prompt-file $TMP/missing.txt" "--prompt-file $TMP" "--num-samples 0"; do
  # shellcheck disable=SC2086
  if timeout 60 "$LIPT" sample --ckpt "$CK" $bad > /dev/null 2> "$TMP/err"; then fail "sample $bad accepted"
  elif [ "$(wc -l < "$TMP/err")" -eq 1 ]; then pass "sample $bad: $(cat "$TMP/err")"
  else fail "sample $bad: $(cat "$TMP/err")"; fi
done

# ---- coupling blocks decode with the cache (the decoder walks the block description, issue 50 item 2): the same
# text as the full forward (--no-cache), across window slides; certified coupling on its grid with ActNorm
if timeout 60 "$LIPT" train "${COMMON[@]}" --coupling 1 --coupling_grid 16 --actnorm 1 --out "$TMP/cp" --quiet \
     2> "$TMP/err" > /dev/null; then
  a=$(timeout 60 "$LIPT" sample --ckpt "$TMP/cp/last.ckpt" --length 80 --seed 5 2> "$TMP/err.a")
  b=$(timeout 60 "$LIPT" sample --ckpt "$TMP/cp/last.ckpt" --length 80 --seed 5 --no-cache 2> /dev/null)
  if [ -n "$a" ] && [ "$a" = "$b" ] && grep -q '(cached,' "$TMP/err.a" && grep -q ' slides)' "$TMP/err.a"; then
    pass "sample, coupling blocks: cached, the same text as --no-cache ($(cat "$TMP/err.a"))"
  else fail "sample, coupling blocks: $(head -c 300 "$TMP/err.a") / cached and --no-cache differ"; fi
else fail "train coupling: $(cat "$TMP/err")"; fi

e2e_done
