#!/usr/bin/env bash
# Fault injection (issue "Reliability II"): a failing disk under lipt train and lipt export. tests/fault/fault_shim.c,
# preloaded, makes write (at a chosen byte), fsync or rename fail with ENOSPC or EIO on the files whose path contains
# LIPT_FAULT_PATH. A tiny run (20 steps, a checkpoint every 5) is continued under each fault; every case must give a
# one-line error and a non-zero exit without a signal, leave the previous last.ckpt byte for byte intact and loadable,
# leave no temporary behind, and a later --resume without the fault must finish with every metrics line present once.
# The same for lipt export over an earlier export. Also: SIGTERM with a full disk, the whole run folder full during
# --resume, metrics.jsonl failing alone, --threads 64 under `ulimit -v 2000000` (must train, not hang), and a step too
# large for `ulimit -d` (refused, not aborted).
# Usage: fault_test.sh LIPT_BINARY FAULT_SHIM   (LIPT_FAULT_STRICT=0 reports failures of the cases marked xfail as
# known issues instead of failures: none are known now)
set -uo pipefail
abs() { echo "$(cd "$(dirname "$1")" && pwd)/$(basename "$1")"; }
LIPT=$(abs "${1:?usage: fault_test.sh LIPT_BINARY FAULT_SHIM}")
SHIM=$(abs "${2:?usage: fault_test.sh LIPT_BINARY FAULT_SHIM}")
REPO=$(cd "$(dirname "$0")/.." && pwd)
TMP=$(mktemp -d)
trap 'rm -rf "$TMP"' EXIT
STRICT=${LIPT_FAULT_STRICT:-1}
fails=0
xfails=0
start=$SECONDS
pass() { echo "ok    $*"; }
fail() { echo "FAIL  $*"; fails=$((fails + 1)); }
# a known issue outside this test's reach (described in docs/RELIABILITY.md): reported, not counted unless strict
xfail() {
  if [ "$STRICT" = 1 ]; then fail "$*"; else echo "XFAIL $*"; xfails=$((xfails + 1)); fi
}

[ -f "$SHIM" ] || { echo "FAIL  no fault shim at $SHIM"; exit 1; }
# a sanitizer build: its runtime must come first in the preload list
PRELOAD=$SHIM
asan=$(ldd "$LIPT" 2>/dev/null | awk '/libasan/ {print $3; exit}')
[ -n "$asan" ] && PRELOAD="$asan:$SHIM"
export LIPT_THREADS=1

for _ in 1 2 3 4 5 6 7 8; do cat "$REPO/docs/USAGE.md"; done >"$TMP/corpus.txt"
MODEL=(--d_model 32 --d_ff 64 --n_layers 1 --n_heads 2 --seq_len 32 --batch 4)
FLOG=$TMP/fault.log

# faulty SPEC PATH_SUBSTRING CMD...: CMD with the shim preloaded; its stdout and stderr in $TMP/out, $TMP/err
faulty() {
  local spec=$1 sub=$2
  shift 2
  rm -f "$FLOG"
  env LD_PRELOAD="$PRELOAD" LIPT_FAULT="$spec" LIPT_FAULT_PATH="$sub" LIPT_FAULT_LOG="$FLOG" "$@" >"$TMP/out" 2>"$TMP/err"
}

# failed_cleanly NAME RC MESSAGE_REGEX [ANY_LINES]: non-zero, no signal, one line on stderr naming the cause, and the
# fault did fire. With ANY_LINES the error must be the last line (notes may precede it).
failed_cleanly() {
  local name=$1 rc=$2 re=$3 lines
  lines=$(wc -l <"$TMP/err")
  if ! grep -q "failed (" "$FLOG" 2>/dev/null; then fail "$name: the fault never fired (exit $rc)"; return 1; fi
  if [ "$rc" -eq 0 ]; then fail "$name: exit 0 although the fault fired"; return 1; fi
  if [ "$rc" -ge 128 ]; then fail "$name: killed by a signal (exit $rc): $(head -c 300 "$TMP/err")"; return 1; fi
  if [ -z "${4:-}" ] && [ "$lines" -ne 1 ]; then fail "$name: $lines lines on stderr: $(head -c 400 "$TMP/err")"; return 1; fi
  if ! tail -n 1 "$TMP/err" | grep -Eq "^lipt [a-z]+: .*($re)"; then fail "$name: unclear error: $(cat "$TMP/err")"; return 1; fi
  return 0
}

# ckpt_ok NAME DIR STEP REF: DIR/last.ckpt is REF (the checkpoint of STEP) byte for byte, lipt info and lipt eval load
# it, and DIR holds no temporary
ckpt_ok() {
  local name=$1 dir=$2 step=$3 ref=$4 got tmps
  got=$("$LIPT" info --ckpt "$dir/last.ckpt" --json 2>/dev/null | sed -n 's/.*"step":\([0-9]*\).*/\1/p')
  tmps=$(find "$dir" -name '*.tmp' | wc -l)
  if ! cmp -s "$dir/last.ckpt" "$ref"; then fail "$name: last.ckpt changed"; return 1; fi
  if [ "$got" != "$step" ]; then fail "$name: lipt info says step '$got', not $step"; return 1; fi
  if ! "$LIPT" eval --ckpt "$dir/last.ckpt" --max-symbols 2000 --quiet >/dev/null 2>&1; then fail "$name: lipt eval cannot load last.ckpt"; return 1; fi
  if [ "$tmps" -ne 0 ]; then fail "$name: temporaries left: $(cd "$dir" && ls -- *.tmp)"; return 1; fi
  return 0
}

# steps_once FILE N: the training lines of metrics.jsonl are steps 1..N, each exactly once, in order
steps_once() {
  [ "$(grep '"loss"' "$1" | sed 's/.*"step":\([0-9]*\).*/\1/' | tr '\n' ' ')" = "$(seq 1 "$2" | tr '\n' ' ')" ]
}

# resumes_after NAME DIR: without the fault, --resume finishes the run (step 30) with every metrics line once
resumes_after() {
  if "$LIPT" train --out "$1" --resume --steps 30 --quiet 2>"$TMP/rerr" && steps_once "$1/metrics.jsonl" 30 &&
     [ "$("$LIPT" info --ckpt "$1/last.ckpt" --json | sed -n 's/.*"step":\([0-9]*\).*/\1/p')" = 30 ]; then
    return 0
  fi
  return 1
}

# ---- the reference run: 20 steps, last.ckpt every 5, a metrics line every step
if "$LIPT" train --data "$TMP/corpus.txt" --out "$TMP/base" "${MODEL[@]}" --steps 20 --save-every 5 --log-every 1 \
     --eval-every 0 --final-eval none --save-minutes 0 --quiet && steps_once "$TMP/base/metrics.jsonl" 20; then
  pass "reference run: 20 steps, last.ckpt at step 20"
else
  fail "reference run"; echo "fault tests: $fails failure(s)"; exit 1
fi
REF=$TMP/ref.ckpt
cp "$TMP/base/last.ckpt" "$REF"

# dry run of the faulty command itself: the bytes the first save (step 25) writes, up to its rename, so the byte
# offsets below fall inside it, the last one on its very last byte (the file header, patched at the end)
cp -r "$TMP/base" "$TMP/dry"
faulty write:ENOSPC:after=999999999999,fsync:EIO:after=999999,rename:EIO:after=999999 last.ckpt \
  "$LIPT" train --out "$TMP/dry" --resume --steps 30 --quiet
T=$(sed -n 's/.*renamed .* at \([0-9]*\) bytes/\1/p' "$FLOG" | head -n 1)
if [ "${T:-0}" -gt 4096 ] && grep -q "counted .* 3 fsync, 3 rename" "$FLOG"; then
  pass "dry run: the save at step 25 writes $T bytes; 3 saves, each with 1 fsync and 1 rename"
else
  fail "dry run under the shim: $(cat "$FLOG")"
  T=100000
fi

# ---- lipt train --resume under each fault: the save at step 25 fails
cases=("write:ENOSPC:after=0|No space left on device"
       "write:ENOSPC:after=31|No space left on device"
       "write:ENOSPC:after=4096|No space left on device"
       "write:ENOSPC:after=$((T / 2))|No space left on device"
       "write:ENOSPC:after=$((T - 1))|No space left on device"
       "write:EIO:after=$((T / 3))|Input/output error"
       "fsync:EIO|Input/output error"
       "rename:EIO|Input/output error")
i=0
for c in "${cases[@]}"; do
  spec=${c%%|*} re=${c#*|}
  i=$((i + 1))
  d=$TMP/t$i
  cp -r "$TMP/base" "$d"
  faulty "$spec" last.ckpt "$LIPT" train --out "$d" --resume --steps 30 --quiet
  rc=$?
  name="train --resume, $spec on last.ckpt"
  if failed_cleanly "$name" $rc "$re" && ckpt_ok "$name" "$d" 20 "$REF"; then
    if resumes_after "$d"; then
      pass "$name: exit $rc, step-20 checkpoint intact, no temporary, resumes to 30 afterwards: $(cat "$TMP/err")"
    else
      fail "$name: resume without the fault: $(tail -c 300 "$TMP/rerr")"
    fi
  fi
done

# ---- SIGTERM with a full disk: the save on the way out fails; exit 1 (not 143: nothing was saved), one line
d=$TMP/term
cp -r "$TMP/base" "$d"
rm -f "$FLOG"
env LD_PRELOAD="$PRELOAD" LIPT_FAULT=write:ENOSPC LIPT_FAULT_PATH=last.ckpt LIPT_FAULT_LOG="$FLOG" \
  "$LIPT" train --out "$d" --resume --steps 100000000 --save-every 0 --save-minutes 0 --quiet >"$TMP/out" 2>"$TMP/err" &
pid=$!
for _ in $(seq 300); do [ "$(grep -c '"loss"' "$d/metrics.jsonl")" -ge 40 ] && break; sleep 0.1; done
kill -TERM "$pid"
wait "$pid"
rc=$?
if failed_cleanly "SIGTERM with a full disk" $rc "No space left on device" && [ $rc -eq 1 ] &&
   ckpt_ok "SIGTERM with a full disk" "$d" 20 "$REF"; then
  pass "SIGTERM with a full disk: exit 1, step-20 checkpoint intact: $(cat "$TMP/err")"
elif [ $rc -ne 1 ]; then
  fail "SIGTERM with a full disk: exit $rc, not 1: $(cat "$TMP/err")"
fi

# ---- the whole run folder on a full disk while resuming a run whose log is ahead of its checkpoint (the state a
# failed save leaves: metrics up to step 25, last.ckpt at 20). Nothing may be lost: steps 1..20 stay in metrics.jsonl.
cp -r "$TMP/base" "$TMP/stale"
faulty write:ENOSPC last.ckpt "$LIPT" train --out "$TMP/stale" --resume --steps 30 --quiet
grep -q '"step":25,' "$TMP/stale/metrics.jsonl" || fail "could not prepare a log ahead of its checkpoint"
for a in 0 1500; do
  d=$TMP/full$a
  cp -r "$TMP/stale" "$d"
  faulty "write:ENOSPC:after=$a" "$d/" "$LIPT" train --out "$d" --resume --steps 30 --quiet
  rc=$?
  name="disk full (after $a bytes) for the whole run folder during --resume"
  if failed_cleanly "$name" $rc "No space left on device" any && ckpt_ok "$name" "$d" 20 "$REF"; then
    if [ "$(grep '"loss"' "$d/metrics.jsonl" | sed 's/.*"step":\([0-9]*\).*/\1/' | head -n 20 | tr '\n' ' ')" = \
         "$(seq 1 20 | tr '\n' ' ')" ]; then
      pass "$name: exit $rc, checkpoint intact, metrics.jsonl still holds steps 1..20"
    else
      xfail "$name: metrics.jsonl lost its history ($(grep -c '"loss"' "$d/metrics.jsonl") training lines left of 25):" \
            "train/cmd_train.c truncate_metrics renames a temporary it could not write over the log"
    fi
  fi
done

# ---- metrics.jsonl failing alone (EIO) while checkpoints succeed: the run must not go on silently without its log
d=$TMP/mlog
faulty write:EIO:after=600 metrics.jsonl "$LIPT" train --data "$TMP/corpus.txt" --out "$d" "${MODEL[@]}" --steps 20 \
  --save-every 5 --log-every 1 --eval-every 0 --final-eval none --quiet
rc=$?
if [ $rc -ne 0 ] && [ $rc -lt 128 ] && grep -q "metrics.jsonl" "$TMP/err"; then
  pass "a failing metrics.jsonl stops the run: exit $rc: $(tail -n 1 "$TMP/err")"
else
  xfail "a failing metrics.jsonl (EIO) is ignored: exit $rc, $(grep -c '"loss"' "$d/metrics.jsonl") of 20 lines logged," \
        "last.ckpt at step $("$LIPT" info --ckpt "$d/last.ckpt" --json | sed -n 's/.*"step":\([0-9]*\).*/\1/p')" \
        "(train_loop.c checks neither fprintf nor fflush on the log)"
fi

# ---- lipt export over an earlier export
mkdir -p "$TMP/exp" "$TMP/expdry"
"$LIPT" export --ckpt "$REF" --out "$TMP/exp/w.safetensors" 2>/dev/null || fail "export without a fault"
cp "$TMP/exp/w.safetensors" "$TMP/w.ref"
faulty write:ENOSPC:after=999999999999 w.safetensors "$LIPT" export --ckpt "$REF" --out "$TMP/expdry/w.safetensors"
E=$(sed -n 's/.*counted \([0-9]*\) bytes.*/\1/p' "$FLOG")
if [ "${E:-0}" -gt 1000 ]; then pass "export dry run: $E bytes"; else fail "export dry run counted '${E:-}'"; E=60000; fi
for c in "write:ENOSPC:after=0|No space left on device" "write:ENOSPC:after=$((E / 2))|No space left on device" \
         "write:ENOSPC:after=$((E - 1))|No space left on device" "write:EIO:after=8|Input/output error" \
         "fsync:EIO|Input/output error" "rename:EIO|Input/output error"; do
  spec=${c%%|*} re=${c#*|}
  faulty "$spec" w.safetensors "$LIPT" export --ckpt "$REF" --out "$TMP/exp/w.safetensors"
  rc=$?
  name="export, $spec"
  if failed_cleanly "$name" $rc "$re"; then
    if ! cmp -s "$TMP/exp/w.safetensors" "$TMP/w.ref"; then fail "$name: the earlier export changed"
    elif [ "$(find "$TMP/exp" -name '*.tmp' | wc -l)" -ne 0 ]; then fail "$name: a temporary was left"
    else pass "$name: exit $rc, the earlier export intact, no temporary: $(cat "$TMP/err")"; fi
  fi
done
# and a first export under a fault leaves nothing at all
faulty write:ENOSPC:after=100 w.safetensors "$LIPT" export --ckpt "$REF" --out "$TMP/exp/new-w.safetensors"
rc=$?
if failed_cleanly "first export, write:ENOSPC:after=100" $rc "No space left on device"; then
  if [ -e "$TMP/exp/new-w.safetensors" ] || [ -e "$TMP/exp/new-w.safetensors.tmp" ]; then fail "first export under a fault left a file"
  else pass "first export under a fault: exit $rc, no file and no temporary left"; fi
fi

# ---- an address-space limit and many threads (the audit's report): OpenBLAS maps 128 MiB per thread and spins forever
# when that fails; lipt lowers the thread count to what fits, with a note, and trains
if [ -n "$asan" ]; then
  echo "skip  --threads 64 under ulimit -v: a sanitizer build reserves terabytes of shadow memory"
else
  timeout -s KILL 120 bash -c 'ulimit -v 2000000 && exec "$@"' _ "$LIPT" train --data "$TMP/corpus.txt" --out "$TMP/lim" \
    "${MODEL[@]}" --threads 64 --steps 2 --eval-every 0 --final-eval none --quiet >"$TMP/out" 2>"$TMP/err"
  rc=$?
  if [ $rc -eq 0 ] && grep -q "note: 64 threads need .*using [0-9]* thread" "$TMP/err" && [ -s "$TMP/lim/last.ckpt" ]; then
    pass "--threads 64 under ulimit -v 2000000: trained; $(head -c 300 "$TMP/err")"
  elif [ $rc -eq 137 ]; then
    fail "--threads 64 under ulimit -v 2000000: hung (killed after 120 s)"
  else
    fail "--threads 64 under ulimit -v 2000000: exit $rc: $(head -c 300 "$TMP/err")"
  fi
fi

# ---- a data limit that even lipt train's memory probe (one step at a small batch) cannot live in: refused with what
# to lower, exit 1, not aborted when the probe's arena cannot grow
if [ -n "$asan" ]; then
  echo "skip  a step larger than ulimit -d: a sanitizer build reserves terabytes of shadow memory"
else
  timeout -s KILL 120 bash -c 'ulimit -d 1048576 && exec "$@"' _ "$LIPT" train --config "$REPO/models/ptb-contractive.cfg" \
    --d_model 256 --d_ff 1024 --n_heads 4 --n_layers 4 --seq_len 4096 --batch 8 --data "$TMP/corpus.txt" \
    --out "$TMP/big" --steps 1 --eval-every 0 --final-eval none --quiet >"$TMP/out" 2>"$TMP/err"
  rc=$?
  if [ $rc -eq 1 ] && grep -q "needs more memory than this process may use.*lower seq_len" "$TMP/err"; then
    pass "a step larger than ulimit -d: exit 1, $(head -c 200 "$TMP/err")"
  else
    fail "a step larger than ulimit -d: exit $rc (want 1 and the refusal): $(head -c 300 "$TMP/err")"
  fi
fi

echo "fault tests: $fails failure(s), $xfails known issue(s) (XFAIL), $((SECONDS - start)) s"
[ $fails -eq 0 ]
