#!/usr/bin/env bash
# Signal storm (issue 38, docs/RELIABILITY.md "Signals and oneDNN"). oneDNN 2.6.3's JIT sgemm kernels point the stack pointer at
# a heap workspace while they run, so a signal handled on a thread inside one writes its frame into the heap; before
# lipt's signal thread, a no-op SIGUSR1 handler every 20 ms aborted lipt train ("corrupted size vs. prev_size") within
# seconds. Here a library preloaded with LD_PRELOAD (tests/signal/usr1_preload.c) installs such a handler, without
# SA_ONSTACK, the model has ptb-dp's shapes (its large products, 8M..67M multiply-adds, run on oneDNN), and for each
# precision (float32, bf16-emulated, and bf16 where the build has oneDNN and the CPU AVX512_BF16), RUNS times:
#   - lipt train gets SIGUSR1 every 20 ms from its start, and SIGTERM a random 0..MAX_MS ms after its first metrics
#     line: exit 143 (not 134: no abort), one line naming the step, last.ckpt holds that step, the log every step;
#     while it trains, exactly one of its threads (3 or more: main, an OpenMP worker, lipt's signal thread) leaves
#     the asynchronous signals unblocked (/proc/PID/task/*/status);
#   - lipt train --resume under the same storm continues 2 steps and ends with exit 0.
# Usage: signal_storm_test.sh LIPT_BINARY USR1_PRELOAD [RUNS] [MAX_MS]   (RUNS per precision: 1 by default, as ctest
# runs it; 20 for the acceptance figure). LIPT_STORM_SEED=S repeats the random moments; LIPT_STORM_PRECISIONS="a b"
# chooses the precisions.
set -uo pipefail
LIPT=$(cd "$(dirname "${1:?usage: signal_storm_test.sh LIPT_BINARY USR1_PRELOAD [RUNS] [MAX_MS]}")" && pwd)/$(basename "$1")
PRE=$(cd "$(dirname "${2:?usage: signal_storm_test.sh LIPT_BINARY USR1_PRELOAD [RUNS] [MAX_MS]}")" && pwd)/$(basename "$2")
RUNS=${3:-1}
MAX_MS=${4:-3000}
REPO=$(cd "$(dirname "$0")/.." && pwd)
TMP=$(mktemp -d)
pid= spid=
trap '[ -n "$spid" ] && kill "$spid" 2>/dev/null; [ -n "$pid" ] && kill -9 "$pid" 2>/dev/null; rm -rf "$TMP"' EXIT
SEED=${LIPT_STORM_SEED:-$$}
RANDOM=$SEED
export LIPT_THREADS=2 # OpenMP workers run products too: a signal could land on one
fails=0 aborts=0 total_usr1=0
start=$SECONDS
pass() { echo "ok   $*"; }
fail() { echo "FAIL $*"; fails=$((fails + 1)); }

# under AddressSanitizer the runtime must come first in LD_PRELOAD
PRELOAD=$PRE
asan=$(ldd "$LIPT" 2>/dev/null | awk '/libasan/ {print $3; exit}')
[ -n "$asan" ] && PRELOAD="$asan:$PRE"

help=$("$LIPT" --help)
PRECISIONS=${LIPT_STORM_PRECISIONS:-float32 bf16-emulated}
if [ -z "${LIPT_STORM_PRECISIONS:-}" ] && echo "$help" | grep -q "this build has oneDNN, this CPU has AVX512_BF16"; then
  PRECISIONS="$PRECISIONS bf16"
fi
echo "$help" | grep -q "this build has oneDNN" ||
  echo "note: this build has no oneDNN: the products run on OpenBLAS (the test still checks that signals save and resume)"

for _ in 1 2 3 4 5 6 7 8; do cat "$REPO/docs/USAGE.md"; done >"$TMP/corpus.txt"
# ptb-dp's shapes (d_model 256, d_ff 1024, seq_len 128, 4 layers) at batch 2: 256 rows, so the projections,
# feed-forward and output products (8M..67M multiply-adds) run on oneDNN; the per-head attention products do not
MODEL=(--config "$REPO/models/ptb-dp.cfg" --batch 2)
COMMON=(--log-every 1 --eval-every 0 --final-eval none --save-every 0 --save-minutes 0 --quiet)
echo "signal storm: $RUNS run(s) per precision ($PRECISIONS), SIGTERM 0..$MAX_MS ms into training, seed $SEED" \
     "(LIPT_STORM_SEED=$SEED repeats it)"

step_of() { "$LIPT" info --ckpt "$1" --json 2>/dev/null | sed -n 's/.*"step":\([0-9]*\).*/\1/p'; }
logged_steps() { grep '"loss"' "$1" | sed 's/.*"step":\([0-9]*\).*/\1/'; }
# SIGUSR1 to $pid every 20 ms until it is gone; the count in $1. It starts once the preloaded handler is installed
# (bit 10 of SigCgt) in lipt's own image: before that, between fork and the library's constructor, SIGUSR1's default
# action would end it. The image is checked first because $pid is at first a copy of this shell, which catches
# SIGUSR1 (bash handles every terminating signal once an EXIT trap is set, as here) until it restores the default
# dispositions just before its exec: a storm started on that copy's SigCgt killed lipt between the exec and the
# preloaded constructor (once in 52 sanitizer runs: ASan's start-up makes that interval longest). execve resets
# every handler, so a set bit read after /proc/PID/exe names lipt is the preload's. (lipt's own re-execution, when it
# corrects OpenBLAS's kernel choice, holds the asynchronous signals blocked across its exec: src/core/signals.c.)
LIPT_REAL=$(readlink -f "$LIPT")
usr1_caught() {
  local m
  [ "$(readlink "/proc/$pid/exe" 2>/dev/null)" = "$LIPT_REAL" ] || return 1
  m=$(sed -n 's/^SigCgt:[[:space:]]*//p' "/proc/$pid/status" 2>/dev/null)
  [ -n "$m" ] && [ $(((16#$m >> 9) & 1)) -eq 1 ]
}
storm() {
  local n=0 waited=0
  while ! usr1_caught && kill -0 "$pid" 2>/dev/null; do waited=$((waited + 1)); sleep 0.01; done
  while kill -USR1 "$pid" 2>/dev/null; do n=$((n + 1)); sleep 0.02; done
  echo "$n $waited" >"$1"
}
# "R A": of the A threads of $pid, R leave SIGTERM (bit 15 of SigBlk) unblocked; lipt's design: exactly one, its
# signal thread, whatever OpenMP, OpenBLAS and oneDNN started (a check that does not depend on timing)
receivers() {
  local n=0 all=0 m t
  for t in /proc/"$pid"/task/*/status; do
    m=$(sed -n 's/^SigBlk:[[:space:]]*//p' "$t" 2>/dev/null)
    [ -n "$m" ] || continue
    all=$((all + 1))
    [ $(((16#$m >> 14) & 1)) -eq 0 ] && n=$((n + 1))
  done
  echo "$n $all"
}
# wait for $pid and the storm; sets rc and sent
finish() {
  wait "$pid"
  rc=$?
  pid=
  wait "$spid" 2>/dev/null
  spid=
  read -r sent waited <"$TMP/n" 2>/dev/null || sent=0 waited=?
  total_usr1=$((total_usr1 + sent))
}
crashed() { # an abort or a crash rather than the signal's exit: count it, show the reason
  if [ "$rc" -eq 134 ] || [ "$rc" -eq 139 ] || [ "$rc" -eq 135 ] || grep -qE "corrupted|double free|malloc|free\(\)" "$1"; then
    aborts=$((aborts + 1))
    return 0
  fi
  return 1
}

for prec in $PRECISIONS; do
  for i in $(seq 1 "$RUNS"); do
    ms=$((RANDOM % (MAX_MS + 1)))
    d=$TMP/run
    rm -rf "$d" "$TMP/n"
    what="$prec run $i (SIGTERM $ms ms into training)"
    LD_PRELOAD=$PRELOAD "$LIPT" train --data "$TMP/corpus.txt" --out "$d" "${MODEL[@]}" --steps 1000000 \
      --precision "$prec" "${COMMON[@]}" 2>"$TMP/err" &
    pid=$!
    storm "$TMP/n" &
    spid=$!
    # lipt's handlers are installed when training starts (before, SIGTERM ends the process: nothing to save)
    for _ in $(seq 12000); do [ -s "$d/metrics.jsonl" ] || ! kill -0 "$pid" 2>/dev/null && break; sleep 0.05; done
    recv=$(receivers)
    sleep "$((ms / 1000)).$(printf %03d $((ms % 1000)))"
    kill -TERM "$pid" 2>/dev/null
    finish
    said=$(sed -n 's/.* at step \([0-9]*\): saved .*continue with: lipt train --out .* --resume$/\1/p' "$TMP/err")
    step=$(step_of "$d/last.ckpt")
    if crashed "$TMP/err"; then
      fail "$what: ABORT, exit $rc after $sent SIGUSR1: $(tail -c 300 "$TMP/err" | tr '\n' ' ')"
      continue
    fi
    if [ "${recv% *}" != 1 ] || [ "${recv#* }" -lt 3 ]; then
      fail "$what: ${recv% *} of ${recv#* } threads could receive SIGTERM while training (want 1, lipt's signal thread, of 3 or more)"
      continue
    fi
    if [ $rc -ne 143 ] || [ "$(wc -l <"$TMP/err")" -ne 1 ] || [ -z "$said" ] || [ "$step" != "$said" ] ||
       [ "$(logged_steps "$d/metrics.jsonl" | tr '\n' ' ')" != "$(seq 1 "$step" | tr '\n' ' ')" ]; then
      fail "$what: exit $rc (want 143) after $sent SIGUSR1 (the storm waited $waited polls for the handler)," \
           "checkpoint step '$step', message: $(head -c 300 "$TMP/err")"
      continue
    fi
    n1=$sent
    # resume under the same storm: 2 more steps, the final save, exit 0
    rm -f "$TMP/n"
    LD_PRELOAD=$PRELOAD "$LIPT" train --out "$d" --resume --steps $((step + 2)) --quiet 2>"$TMP/err" &
    pid=$!
    storm "$TMP/n" &
    spid=$!
    finish
    if crashed "$TMP/err"; then
      fail "$what: the resume ABORTED, exit $rc after $sent SIGUSR1: $(tail -c 300 "$TMP/err" | tr '\n' ' ')"
      continue
    fi
    if [ $rc -ne 0 ] || [ "$(step_of "$d/last.ckpt")" != $((step + 2)) ]; then
      fail "$what: --resume under the storm: exit $rc, checkpoint step '$(step_of "$d/last.ckpt")' (want $((step + 2))): $(head -c 300 "$TMP/err")"
      continue
    fi
    pass "$what: $n1 SIGUSR1, exit 143 at step $step, saved; resumed to step $((step + 2)) under $sent more; 1 of ${recv#* } threads receives signals"
  done
done

echo "signal storm: $RUNS run(s) x ($PRECISIONS) in $((SECONDS - start)) s, $total_usr1 SIGUSR1 sent: $aborts aborts," \
     "$fails failures"
[ $fails -eq 0 ]
