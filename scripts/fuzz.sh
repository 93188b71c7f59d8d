#!/usr/bin/env bash
# Fuzzing: scripts/fuzz.sh TARGET SECONDS, or scripts/fuzz.sh all SECONDS (every target, SECONDS each, JOBS at a time:
# JOBS defaults to the number of cores).
# Targets (tests/fuzz/fuzz_TARGET.c): checkpoint, config, corpus, cli, ckpt_opts, run_config, metrics.
# Installs clang and its fuzzer/sanitizer runtimes when missing (apt-get, through sudo when not root), builds the
# libFuzzer targets in build-fuzz/ (clang, ASan + UBSan), replays every regression input of the target
# (tests/fuzz/regressions/TARGET/), then fuzzes from the seeds (tests/fuzz/corpus/TARGET/, copied to
# build-fuzz/corpus/TARGET/ so the checked-in seeds are never rewritten; what the fuzzer finds accumulates there across
# runs). Prints the executions per target; exits non-zero on any crash, leak, timeout or failed replay, and saves the
# crashing input under build-fuzz/crashes/TARGET/.
set -euo pipefail
cd "$(dirname "$0")/.."
TARGETS=(checkpoint config corpus cli ckpt_opts run_config metrics)
usage() { echo "usage: scripts/fuzz.sh checkpoint|config|corpus|cli|ckpt_opts|run_config|metrics|all SECONDS" >&2; exit 2; }
[ $# -eq 2 ] || usage
case "$2" in ''|*[!0-9]*) usage ;; esac
if [ "$1" = all ]; then
  run=("${TARGETS[@]}")
else
  case " ${TARGETS[*]} " in *" $1 "*) run=("$1") ;; *) usage ;; esac
fi
SECONDS_EACH=$2
JOBS=${JOBS:-$(nproc 2>/dev/null || echo 2)}
B=build-fuzz

# clang + OpenMP for clang; Debian ships libFuzzer and the sanitizer runtimes in libclang-rt-dev (only recommended by
# clang, so not pulled in by deps.sh's --no-install-recommends). A missing toolchain is an error, never a skip: CI
# runs these targets.
bash scripts/deps.sh clang libomp-dev
probe_dir=$(mktemp -d)
trap 'rm -rf "$probe_dir"' EXIT
probe() {
  printf 'int LLVMFuzzerTestOneInput(const unsigned char *d, unsigned long n) { (void)d; (void)n; return 0; }\n' \
    >"$probe_dir/p.c"
  clang -fsanitize=fuzzer,address,undefined "$probe_dir/p.c" -o "$probe_dir/p" 2>"$probe_dir/log"
}
if ! probe; then
  bash scripts/deps.sh libclang-rt-dev
  if ! probe; then
    cat "$probe_dir/log" >&2
    echo "error: clang cannot link -fsanitize=fuzzer,address,undefined (install libclang-rt-dev)" >&2
    exit 1
  fi
fi

echo "== fuzz build ($B/: $(clang --version | head -1), ASan + UBSan + libFuzzer)"
mkdir -p "$B/logs"
cmake -S . -B "$B" -DCMAKE_C_COMPILER=clang -DCMAKE_BUILD_TYPE=RelWithDebInfo \
  -DCMAKE_C_FLAGS_RELWITHDEBINFO="-O2 -gline-tables-only -DNDEBUG" -DLIPT_FUZZ=ON -DLIPT_SANITIZE=ON \
  -DLIPT_TESTS=OFF -DLIPT_MPI=OFF -DLIPT_SHARED=OFF >"$B/logs/configure.log" 2>&1 ||
  { cat "$B/logs/configure.log"; echo "error: configuring $B failed" >&2; exit 1; }
if ! cmake --build "$B" -j"$JOBS" --target "${run[@]/#/fuzz_}" >"$B/logs/build.log" 2>&1; then
  cat "$B/logs/build.log"; echo "error: the fuzz build failed" >&2; exit 1
fi

# Largest input per target: checkpoints are a few KB to a few tens of KB, the rest is text (metrics.jsonl: several
# lines past the readers' 4095-byte line buffer).
max_len() { case "$1" in checkpoint) echo 65536 ;; corpus|metrics) echo 16384 ;; *) echo 4096 ;; esac; }
export UBSAN_OPTIONS=${UBSAN_OPTIONS:-print_stacktrace=1:halt_on_error=1}
# One target: replay its regressions, then fuzz. Its messages go to $B/logs/$t.out (printed whole when it ends, so
# that targets running side by side do not interleave) and its one-line summary to $B/logs/$t.summary; the exit code
# says whether it failed.
fuzz_one() {
  local t=$1 bin="$B/fuzz_$1" reg
  reg=(tests/fuzz/regressions/"$t"/*)
  if [ -e "${reg[0]}" ]; then
    echo "== fuzz $t: replaying ${#reg[@]} regression input(s) from tests/fuzz/regressions/$t/"
    if ! "$bin" "${reg[@]}" >"$B/logs/$t.replay.log" 2>&1; then
      tail -n 60 "$B/logs/$t.replay.log"
      echo "error: fuzz $t: a regression input fails again (log: $B/logs/$t.replay.log)"
      echo "$t: regression replay FAILED" >"$B/logs/$t.summary"
      return 1
    fi
  fi
  local corpus="$B/corpus/$t" crashes="$B/crashes/$t"
  mkdir -p "$corpus" "$crashes"
  cp tests/fuzz/corpus/"$t"/* "$corpus"/
  echo "== fuzz $t: ${SECONDS_EACH} s from $(ls "$corpus" | wc -l) inputs ($corpus)"
  # -close_fd_mask=3: the parsers' own error messages would flood the log; libFuzzer keeps its output and the
  # sanitizer reports on a duplicate of stderr. -timeout: one input taking 25 s is a hang, reported as a failure.
  local log="$B/logs/$t.log" rc=0 execs rate cov
  "$bin" -max_total_time="$SECONDS_EACH" -max_len="$(max_len "$t")" -timeout=25 -rss_limit_mb=2048 \
    -close_fd_mask=3 -print_final_stats=1 -artifact_prefix="$crashes/" "$corpus" >"$log" 2>&1 || rc=$?
  execs=$(sed -n 's/^stat::number_of_executed_units: *//p' "$log" | tail -1)
  rate=$(sed -n 's/^stat::average_exec_per_sec: *//p' "$log" | tail -1)
  cov=$(grep -Eo 'cov: [0-9]+ ft: [0-9]+ corp: [0-9]+' "$log" | tail -1 || true)
  if [ "$rc" -ne 0 ]; then
    tail -n 80 "$log"
    echo "error: fuzz $t: crash (exit $rc) after ${execs:-?} executions; input saved in $crashes/ (log: $log)."
    echo "       Replay: $bin $crashes/<file>; once fixed, add it to tests/fuzz/regressions/$t/"
    echo "$t: CRASH after ${execs:-?} executions" >"$B/logs/$t.summary"
    return 1
  fi
  echo "   $t: ${execs:-?} executions (${rate:-?}/s), no crash; $cov"
  echo "$t: ${execs:-?} executions in ${SECONDS_EACH} s (${rate:-?}/s), 0 crashes" >"$B/logs/$t.summary"
}

# JOBS targets at a time (each fuzzer is one process on one core); reported in the order of TARGETS.
declare -A pid_of
for t in "${run[@]}"; do
  while [ "$(jobs -rp | wc -l)" -ge "$JOBS" ]; do wait -n || true; done
  rm -f "$B/logs/$t.summary"
  fuzz_one "$t" >"$B/logs/$t.out" 2>&1 &
  pid_of[$t]=$!
done
failed=()
summary=()
for t in "${run[@]}"; do
  rc=0
  wait "${pid_of[$t]}" || rc=$?
  cat "$B/logs/$t.out"
  [ "$rc" -eq 0 ] || failed+=("$t")
  summary+=("$(cat "$B/logs/$t.summary" 2>/dev/null || echo "$t: ended without a summary (exit $rc)")")
done

echo "== fuzz summary"
printf '   %s\n' "${summary[@]}"
if [ ${#failed[@]} -gt 0 ]; then
  echo "error: fuzzing failed: ${failed[*]}" >&2
  exit 1
fi
