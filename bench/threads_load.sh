#!/usr/bin/env bash
# The default thread count on an idle and on a busy machine: 120 training steps of models/ptb-demo.cfg with the
# default count (LIPT_THREADS unset), with --threads 1 and with --threads equal to the usable cores, first with the
# machine left alone, then with one busy loop per core (another program keeping every core busy; --busy K: K loops).
# Wall seconds per run, medians over the rounds, modes interleaved within a round; the default's count is read from
# the run's "model:" line. Run it on an otherwise idle machine: it is a timing.
#
# usage: bench/threads_load.sh [--rounds R] [--steps N] [--busy K] [--lipt PATH] [--data CORPUS]
set -euo pipefail
cd "$(dirname "$0")/.."
ROUNDS=3 STEPS=120 LIPT=build/lipt DATA=ptb BUSY=
while [ $# -gt 0 ]; do
  case $1 in
    --rounds) ROUNDS=$2; shift 2 ;;
    --steps) STEPS=$2; shift 2 ;;
    --busy) BUSY=$2; shift 2 ;;
    --lipt) LIPT=$2; shift 2 ;;
    --data) DATA=$2; shift 2 ;;
    --help|-h) sed -n '2,8p' "$0" | sed 's/^# \{0,1\}//'; exit 0 ;;
    *) echo "threads_load.sh: unknown option '$1' (see --help)" >&2; exit 2 ;;
  esac
done
[ -x "$LIPT" ] || { echo "threads_load.sh: $LIPT is not an executable lipt binary (build first)" >&2; exit 1; }
unset LIPT_THREADS
NC=$(nproc)
BUSY=${BUSY:-$NC}
TMP=$(mktemp -d)
busy=()
stop_busy() { [ ${#busy[@]} -gt 0 ] && kill "${busy[@]}" 2>/dev/null; wait 2>/dev/null; busy=(); }
trap 'stop_busy; rm -rf "$TMP"' EXIT

one() { # mode -> seconds (and the thread count on stderr's model line)
  local args=() t0 t1
  [ "$1" != default ] && args=(--threads "$1")
  t0=$(date +%s.%N)
  "$LIPT" train --config models/ptb-demo.cfg --data "$DATA" --out "$TMP/run" --force --steps "$STEPS" \
    --eval-every 0 --final-eval none --save-every 0 "${args[@]}" 2>"$TMP/err" >/dev/null
  t1=$(date +%s.%N)
  echo "$t0 $t1" | awk '{printf "%.2f", $2 - $1}'
}
median() { sort -n | awk '{a[NR]=$1} END {print (NR % 2) ? a[(NR+1)/2] : (a[NR/2] + a[NR/2+1]) / 2}'; }

echo "lipt: $("$LIPT" --version); $NC cores; models/ptb-demo.cfg, $STEPS steps, $ROUNDS rounds; busy: $BUSY loops"
for load in idle busy; do
  if [ "$load" = busy ]; then
    for _ in $(seq "$BUSY"); do (while :; do :; done) & busy+=($!); done
    sleep 1
  fi
  declare -A secs=()
  for r in $(seq "$ROUNDS"); do
    for mode in default 1 "$NC"; do
      s=$(one "$mode")
      secs[$mode]+="$s "
      [ "$mode" = default ] && seen=$(tr -s ' \n' '  ' < "$TMP/err" | grep -o '[0-9]* threads\?' | head -1)
      echo "  $load round $r: ${mode} threads: $s s${seen:+ (default: $seen)}" >&2
      seen=""
    done
  done
  d=$(echo "${secs[default]}" | tr ' ' '\n' | grep . | median)
  o=$(echo "${secs[1]}" | tr ' ' '\n' | grep . | median)
  a=$(echo "${secs[$NC]}" | tr ' ' '\n' | grep . | median)
  echo "$load: default $d s, --threads 1 $o s, --threads $NC $a s; default / --threads 1 = $(awk -v x="$d" -v y="$o" 'BEGIN{printf "%.2f", x/y}'), default / best = $(awk -v x="$d" -v y="$o" -v z="$a" 'BEGIN{b = y < z ? y : z; printf "%.2f", x/b}')"
  unset secs
  stop_busy
done
