#!/usr/bin/env bash
# kill -9 reliability (issue "Reliability II"): N times, lipt train with a checkpoint every 1..5 steps and a metrics line
# every 1..3 steps is killed with SIGKILL at a random moment (50..1550 ms after its start: during start-up, a step or a
# checkpoint write). Then:
#   - the newest last.ckpt loads (lipt info --json) and holds a step where a save was due (a multiple of --save-every);
#   - no metrics.jsonl line is lost before it: every multiple of --log-every up to that step has its line, complete;
#   - lipt train --out DIR --resume continues and finishes (10 more steps), every training line then present exactly
#     once, in order, and no temporary left behind (a last.ckpt.tmp a kill left is replaced by the next save);
#   - killed before the first checkpoint: --resume says so in one line, non-zero exit, no crash.
# Then SIGTERM and SIGINT once each at a random moment, on a model whose products run on oneDNN: exit 143 / 130, one
# line, the step reached saved, log complete, --resume continues.
# Usage: kill_test.sh LIPT_BINARY [N]   (N: 100 by default; ctest runs 10). LIPT_KILL_SEED=S repeats a sequence.
set -uo pipefail
LIPT=$(cd "$(dirname "${1:?usage: kill_test.sh LIPT_BINARY [N]}")" && pwd)/$(basename "$1")
N=${2:-100}
REPO=$(cd "$(dirname "$0")/.." && pwd)
TMP=$(mktemp -d)
pid=
trap '[ -n "$pid" ] && kill -9 "$pid" 2>/dev/null; rm -rf "$TMP"' EXIT
SEED=${LIPT_KILL_SEED:-$$}
RANDOM=$SEED
export LIPT_THREADS=1
fails=0
start=$SECONDS
pass() { echo "ok   $*"; }
fail() { echo "FAIL $*"; fails=$((fails + 1)); }

for _ in 1 2 3 4 5 6 7 8; do cat "$REPO/docs/USAGE.md"; done >"$TMP/corpus.txt"
MODEL=(--d_model 32 --d_ff 64 --n_layers 1 --n_heads 2 --seq_len 32 --batch 4)
echo "kill -9 test: $N runs, seed $SEED (LIPT_KILL_SEED=$SEED repeats them)"

step_of() { "$LIPT" info --ckpt "$1" --json 2>/dev/null | sed -n 's/.*"step":\([0-9]*\).*/\1/p'; }
logged_steps() { grep '"loss"' "$1" | sed 's/.*"step":\([0-9]*\).*/\1/'; }

n_ok=0 n_early=0 n_tmp=0 n_midlog=0 min_step='' max_step=0 sum_step=0
for i in $(seq 1 "$N"); do
  se=$((RANDOM % 5 + 1)) le=$((RANDOM % 3 + 1)) ms=$((50 + RANDOM % 1501))
  d=$TMP/run
  rm -rf "$d"
  "$LIPT" train --data "$TMP/corpus.txt" --out "$d" "${MODEL[@]}" --steps 1000000 --save-every $se --log-every $le \
    --eval-every 0 --final-eval none --save-minutes 0 --quiet 2>"$TMP/train.err" &
  pid=$!
  sleep "$((ms / 1000)).$(printf %03d $((ms % 1000)))"
  kill -9 "$pid" 2>/dev/null
  wait "$pid" 2>/dev/null
  rc=$?
  pid=
  what="run $i (--save-every $se --log-every $le, killed after $ms ms)"
  if [ $rc -ne 137 ]; then fail "$what: exit $rc, not 137 (SIGKILL): $(tail -c 300 "$TMP/train.err")"; continue; fi
  [ -e "$d/last.ckpt.tmp" ] && n_tmp=$((n_tmp + 1))

  if [ ! -e "$d/last.ckpt" ]; then
    # killed before the first save: resuming must say there is nothing to resume, cleanly
    "$LIPT" train --out "$d" --resume --quiet >/dev/null 2>"$TMP/res.err"
    rc=$?
    if [ $rc -ne 0 ] && [ $rc -lt 128 ] && [ "$(wc -l <"$TMP/res.err")" -eq 1 ]; then
      n_early=$((n_early + 1))
    else
      fail "$what: no checkpoint yet, and --resume gave exit $rc: $(head -c 300 "$TMP/res.err")"
    fi
    continue
  fi

  step=$(step_of "$d/last.ckpt")
  if [ -z "$step" ]; then fail "$what: the newest last.ckpt does not load: $("$LIPT" info --ckpt "$d/last.ckpt" 2>&1 | head -c 300)"; continue; fi
  if [ $((step % se)) -ne 0 ] || [ "$step" -lt 1 ]; then fail "$what: last.ckpt holds step $step, not a multiple of $se"; continue; fi
  # the log is never behind the checkpoint: each multiple of --log-every up to the saved step has its line, whole
  want=$(seq "$le" "$le" "$step" | tr '\n' ' ')
  got=$(logged_steps "$d/metrics.jsonl" | awk -v s="$step" '$1 <= s' | tr '\n' ' ')
  if [ "$got" != "$want" ]; then fail "$what: metrics lines up to step $step are [$got], want [$want]"; continue; fi
  if [ "$(grep -c '"loss"' "$d/metrics.jsonl")" -ne "$(grep -c '}$' "$d/metrics.jsonl")" ]; then
    n_midlog=$((n_midlog + 1)) # a line cut by the kill after the checkpoint: allowed, --resume drops it
  fi

  # resume and finish 10 more steps
  fin=$((step + 10))
  if ! "$LIPT" train --out "$d" --resume --steps $fin --quiet 2>"$TMP/res.err"; then
    fail "$what: --resume from step $step failed: $(tail -c 300 "$TMP/res.err")"; continue
  fi
  want=$( (seq "$le" "$le" "$fin"; [ $((fin % le)) -ne 0 ] && echo "$fin") | tr '\n' ' ')
  got=$(logged_steps "$d/metrics.jsonl" | tr '\n' ' ')
  if [ "$(step_of "$d/last.ckpt")" != "$fin" ]; then fail "$what: resumed run ended at step $(step_of "$d/last.ckpt"), not $fin"; continue; fi
  if [ "$got" != "$want" ]; then fail "$what: after --resume the metrics steps are [$got], want [$want]"; continue; fi
  if [ -n "$(find "$d" -name '*.tmp')" ]; then fail "$what: temporaries left after the resumed run: $(find "$d" -name '*.tmp')"; continue; fi
  n_ok=$((n_ok + 1))
  sum_step=$((sum_step + step))
  [ "$step" -gt "$max_step" ] && max_step=$step
  { [ -z "$min_step" ] || [ "$step" -lt "$min_step" ]; } && min_step=$step
done

# SIGTERM and SIGINT at a random moment (tests/cli_test.sh covers SIGINT once; MPI: tests/mpi_test.sh): the run saves
# the step it reached, exits 128 + signal with one line naming that step and the command to continue, and resumes.
# The model has ptb-dp's shapes (batch 2): its products run on oneDNN (4M multiply-adds and more), whose sgemm kernels
# move the stack pointer into the heap, where a signal once corrupted it (issue 38; tests/signal_storm_test.sh storms
# it). Two threads, so that an OpenMP worker is there to receive it too. A step is long enough for the signal to land
# inside one.
SIG_MODEL=(--config "$REPO/models/ptb-dp.cfg" --batch 2)
for sig in TERM INT; do
  ms=$((RANDOM % 1001))
  d=$TMP/sig$sig
  LIPT_THREADS=2 "$LIPT" train --data "$TMP/corpus.txt" --out "$d" "${SIG_MODEL[@]}" --steps 1000000 --save-every 1000000 --log-every 1 \
    --eval-every 0 --final-eval none --save-minutes 0 --quiet 2>"$TMP/sig.err" &
  pid=$!
  # the handlers are installed when training starts (before it, there is nothing to save and the default action ends
  # the process): from the first metrics line on, a random delay
  for _ in $(seq 600); do [ -s "$d/metrics.jsonl" ] && break; sleep 0.05; done
  sleep "$((ms / 1000)).$(printf %03d $((ms % 1000)))"
  kill -$sig "$pid"
  wait "$pid"
  rc=$?
  pid=
  want_rc=$([ $sig = TERM ] && echo 143 || echo 130)
  said=$(sed -n 's/.* at step \([0-9]*\): saved .*continue with: lipt train --out .* --resume$/\1/p' "$TMP/sig.err")
  step=$(step_of "$d/last.ckpt")
  if [ $rc -eq "$want_rc" ] && [ "$(wc -l <"$TMP/sig.err")" -eq 1 ] && [ -n "$said" ] && [ "$step" = "$said" ] &&
     [ "$(logged_steps "$d/metrics.jsonl" | tr '\n' ' ')" = "$(seq 1 "$step" | tr '\n' ' ')" ] &&
     LIPT_THREADS=2 "$LIPT" train --out "$d" --resume --steps $((step + 2)) --quiet 2>/dev/null &&
     [ "$(step_of "$d/last.ckpt")" = $((step + 2)) ]; then
    pass "SIG$sig $ms ms into training: exit $rc, saved step $step (the step it reached), every metrics line kept, resumed to $((step + 2)): $(cat "$TMP/sig.err")"
  else
    fail "SIG$sig $ms ms into training: exit $rc (want $want_rc), checkpoint step '$step', message: $(cat "$TMP/sig.err")"
  fi
done

echo "kill -9: $N runs in $((SECONDS - start)) s: $n_ok killed after a checkpoint, checkpoint loaded, log complete," \
     "resumed and finished; $n_early killed before the first checkpoint (--resume refused cleanly); $fails failed"
echo "         last.ckpt.tmp left by the kill in $n_tmp runs (replaced by the resumed run's first save);" \
     "a log line cut after the checkpoint in $n_midlog; saved steps ${min_step:-none}..$max_step" \
     "(mean $([ $n_ok -gt 0 ] && echo $((sum_step / n_ok)) || echo -))"
if [ $fails -eq 0 ] && [ $((n_ok + n_early)) -eq "$N" ]; then pass "kill -9 x $N"; else fail "kill -9 x $N"; fi
[ $fails -eq 0 ]
