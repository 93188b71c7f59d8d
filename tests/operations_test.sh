#!/usr/bin/env bash
# Running lipt day to day (issue 51, C):
#   1. scripts/demo.sh leaves the thread count to lipt (no --threads $(nproc), which beside another job ran 12.7x
#      slower) unless DEMO_THREADS asks for one;
#   2. SIGHUP (a closed terminal, a dropped ssh session) saves like SIGTERM: exit 129, the step reached saved, --resume
#      continues; a run started under nohup (SIGHUP ignored) keeps running;
#   3. --resume with another --data-split (its valid part: text already trained on) is refused; --force continues and
#      records it;
#   4. lipt bench --batch 65536 is refused with what to lower, as lipt train is, not aborted;
#   5. the note on the thread count lipt chose is not printed after --threads N;
#   6. scripts/converged.sh runs finishing together each keep their row of the CSV (a lock around its rewrite).
# Usage: operations_test.sh LIPT_BINARY. Tiny runs: seconds.
set -uo pipefail
LIPT=$(cd "$(dirname "${1:?usage: operations_test.sh LIPT_BINARY}")" && pwd)/$(basename "$1")
REPO=$(cd "$(dirname "$0")/.." && pwd)
TMP=$(mktemp -d)
pids=()
cleanup() { for p in "${pids[@]}"; do kill -9 "$p" 2>/dev/null; done; rm -rf "$TMP"; }
trap cleanup EXIT
export LIPT_THREADS=1
fails=0
pass() { echo "ok   $*"; }
fail() { echo "FAIL $*"; fails=$((fails + 1)); }
cd "$TMP" || exit 1
for _ in 1 2 3 4; do cat "$REPO/docs/USAGE.md"; done >corpus.txt
MODEL=(--d_model 16 --d_ff 32 --n_layers 1 --n_heads 2 --seq_len 16 --batch 2)
step_of() { "$LIPT" info --ckpt "$1" --json 2>/dev/null | sed -n 's/.*"step":\([0-9]*\).*/\1/p'; }

# ---- 1. demo.sh: --threads only from DEMO_THREADS ----
threads_of() { # the thread options demo.sh passes lipt, with DEMO_THREADS as given
  env ${1:+DEMO_THREADS=$1} bash -c "set -u; $(grep '^THREADS=' "$REPO/scripts/demo.sh"); echo \"\${THREADS[*]:-}\""
}
lipt_calls=$(grep -cE '^\$LIPT (train|lipschitz|eval|invert|sample) ' "$REPO/scripts/demo.sh")
with_opt=$(grep -c '"${THREADS\[@\]}"' "$REPO/scripts/demo.sh")
other=$(grep -v '^ *#' "$REPO/scripts/demo.sh" | grep -- '--threads' | grep -vc 'DEMO_THREADS')
if [ -z "$(threads_of '')" ] && [ "$(threads_of 3)" = "--threads 3" ] && [ "$with_opt" -eq "$lipt_calls" ] && [ "$other" -eq 0 ]; then
  pass "demo.sh: no --threads without DEMO_THREADS, --threads 3 with DEMO_THREADS=3 (all $lipt_calls lipt commands)"
else
  fail "demo.sh: thread options '$(threads_of '')' without DEMO_THREADS, '$(threads_of 3)' with 3; $with_opt of $lipt_calls lipt commands take them; $other other --threads"
fi

# ---- 2. SIGHUP ----
start_training() { # out dir; the rest: how to start it
  local d=$1
  shift
  "$@" "$LIPT" train --data corpus.txt --out "$d" "${MODEL[@]}" --steps 1000000 --save-every 1000000 --log-every 1 \
    --eval-every 0 --final-eval none --save-minutes 0 --quiet 2>"$d.err" &
  pid=$!
  pids+=("$pid")
  for _ in $(seq 600); do [ -s "$d/metrics.jsonl" ] && break; sleep 0.05; done
  sleep 0.3
}
start_training hup
kill -HUP "$pid"
wait "$pid"
rc=$?
said=$(sed -n 's/.*hung up .* at step \([0-9]*\): saved .*continue with: lipt train --out .* --resume$/\1/p' hup.err)
step=$(step_of hup/last.ckpt)
if [ $rc -eq 129 ] && [ "$(wc -l <hup.err)" -eq 1 ] && [ -n "$said" ] && [ "$step" = "$said" ] &&
   "$LIPT" train --out hup --resume --steps $((step + 2)) --quiet 2>/dev/null && [ "$(step_of hup/last.ckpt)" = $((step + 2)) ]; then
  pass "SIGHUP: exit 129, step $step saved, resumed: $(cat hup.err)"
else
  fail "SIGHUP: exit $rc (want 129), checkpoint step '$step': $(cat hup.err)"
fi
# under nohup (SIGHUP ignored from the start) the run goes on; SIGTERM still saves
start_training nohup env nohup
kill -HUP "$pid"
sleep 0.5
if kill -0 "$pid" 2>/dev/null; then
  kill -TERM "$pid"
  wait "$pid"
  rc=$?
  [ $rc -eq 143 ] && [ -n "$(step_of nohup/last.ckpt)" ] && pass "nohup: SIGHUP ignored, SIGTERM then saved (exit 143)" ||
    fail "nohup: SIGTERM after an ignored SIGHUP: exit $rc: $(cat nohup.err)"
else
  wait "$pid"
  fail "nohup: a run started under nohup ended on SIGHUP (exit $?)"
fi

# ---- 3. --resume with another --data-split ----
"$LIPT" train --data corpus.txt --out split "${MODEL[@]}" --steps 2 --quiet 2>/dev/null
"$LIPT" train --out split --resume --steps 3 --data-split 0.8,0.1,0.1 --quiet >/dev/null 2>s1.err
rc=$?
if [ $rc -ne 0 ] && [ "$(step_of split/last.ckpt)" = 2 ] && grep -q 'trained on' s1.err && grep -q -- '--force' s1.err; then
  pass "--resume --data-split 0.8,0.1,0.1 on an auto run: refused (exit $rc): $(cut -c1-150 s1.err)"
else
  fail "--resume with another --data-split: exit $rc, step $(step_of split/last.ckpt): $(cat s1.err)"
fi
if "$LIPT" train --out split --resume --steps 3 --data-split 0.9,0.05,0.05 --quiet 2>/dev/null; then
  pass "--resume --data-split 0.9,0.05,0.05 (the split auto gives plain text) is the same split: taken"
else
  fail "--resume --data-split 0.9,0.05,0.05 refused though it is the run's split"
fi
if "$LIPT" train --out split --resume --steps 4 --data-split 0.8,0.1,0.1 --force --quiet 2>s2.err &&
   grep -q 'warning: --data-split 0.8,0.1,0.1' s2.err && grep -q 'resumed at step 3 with: .*data-split 0.8,0.1,0.1' split/run.cfg; then
  pass "--force continues on the new split and run.cfg records it: $(grep 'resumed at step 3' split/run.cfg)"
else
  fail "--force with another --data-split: $(cat s2.err)"
fi

# ---- 4. bench --batch 65536 ----
"$LIPT" bench --batch 65536 --runs 1 --warmup 0 >/dev/null 2>b.err
rc=$?
if [ $rc -eq 1 ] && grep -q 'lower --batch' b.err && [ "$(wc -l <b.err)" -eq 1 ]; then
  pass "bench --batch 65536: refused (exit 1): $(cut -c1-160 b.err)"
else
  fail "bench --batch 65536: exit $rc (want 1 with advice): $(tail -c 300 b.err)"
fi

# ---- 5. the thread note: only about a count lipt chose ----
# two busy loops, so that lipt's default count is below the cores; script(1) gives lipt a terminal
if command -v script >/dev/null; then
  for _ in 1 2; do (while :; do :; done) & pids+=($!); done
  sleep 1
  run_tty() { script -qec "env -u LIPT_THREADS $LIPT train --data $TMP/corpus.txt --out $TMP/tn --force ${MODEL[*]} --steps 1 --eval-every 0 --final-eval none --quiet $*" /dev/null; }
  n1=$(run_tty --threads 1 | grep -c 'note: other programs')
  n0=$(run_tty | grep -c 'note: other programs')
  for p in "${pids[@]: -2}"; do kill -9 "$p" 2>/dev/null; wait "$p" 2>/dev/null; done
  if [ "$n1" -eq 0 ]; then pass "--threads 1: no note on the thread count (without --threads: $n0 note)"
  else fail "--threads 1 still prints the note on the thread count lipt would choose"; fi
else
  echo "skip 5: no script(1) to give lipt a terminal"
fi

# ---- 6. converged.sh: every row kept when runs finish together ----
# a stand-in for lipt that returns evaluation JSON once "go" exists, so that the writers meet at the CSV
cat >stub.sh <<EOF
#!/bin/sh
while [ ! -e "$TMP/go" ]; do sleep 0.01; done
echo '{"bpc":1.5,"nll":1.0,"accuracy":0.5,"step":10,"parameters":100,"ckpt":"x"}'
EOF
chmod +x stub.sh
mapfile -t NAMES < <(bash "$REPO/scripts/converged.sh" --list | cut -d'|' -f1) # every run of the plan
ok_rounds=0
for round in 1 2; do
  rm -f go conv.csv
  rm -rf conv
  for n in "${NAMES[@]}"; do
    mkdir -p "conv/$n"
    echo '{}' >"conv/$n/result.json"
    touch "conv/$n/last.ckpt" # a continued cycle's copy is already there
    printf 'batch = 2\nseq_len = 16\n' >"conv/$n/run.cfg"
    echo '{"step":1,"elapsed_s":1}' >"conv/$n/metrics.jsonl"
  done
  cpids=()
  for n in "${NAMES[@]}"; do
    LIPT="$TMP/stub.sh" bash "$REPO/scripts/converged.sh" --out "$TMP/conv" --csv "$TMP/conv.csv" "$n" >/dev/null 2>>conv.err &
    cpids+=($!)
  done
  sleep 1
  touch go
  for p in "${cpids[@]}"; do wait "$p"; done
  rows=$(($(wc -l <conv.csv 2>/dev/null || echo 1) - 1))
  [ "$rows" -eq ${#NAMES[@]} ] && ok_rounds=$((ok_rounds + 1)) || echo "     round $round: $rows rows of ${#NAMES[@]}"
done
if [ $ok_rounds -eq 2 ]; then pass "converged.sh: ${#NAMES[@]} runs finishing together keep all ${#NAMES[@]} rows (2 rounds)"
else fail "converged.sh: rows lost in $((2 - ok_rounds)) of 2 rounds: $(tail -c 300 conv.err)"; fi

[ $fails -eq 0 ] && echo "operations: all passed" || echo "operations: $fails failed"
[ $fails -eq 0 ]
