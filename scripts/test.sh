#!/usr/bin/env bash
# The one test command, in two modes. Both install missing build dependencies (Debian/Ubuntu, apt-get, through sudo
# when not root), check the structure, build lipt with oneDNN and MPI (failing on any compiler warning) and run its
# tests with ctest, build the suites with AddressSanitizer + UndefinedBehaviorSanitizer and run them, then fuzz every
# input parser (scripts/fuzz.sh, libFuzzer under clang). Exits non-zero on any failure; prints each stage's seconds.
#
#   scripts/test.sh          quick mode (the default; the one to run before a commit): in the release build every
#                            test not labelled "long" (CMakeLists.txt): every Check suite (label "unit") and the
#                            short e2e tests; under the sanitizers every Check suite and the fault-injection test
#                            (label "sanitized"; the other e2e tests there in --full), with LIPT_TEST_QUICK=4
#                            (three suites' randomised sweeps take 1 configuration in 4: tests/util/testutil.h); 5 s of
#                            fuzzing per target, two targets at a time on two cores.
#   scripts/test.sh --full   what CI runs (.ci/run): every test in both builds (the "long" ones too: the storms, the
#                            kernel-set sweep, cli, workflow, mpi, the Python module), the --precision tests of a
#                            build without oneDNN, longer kill -9 and signal storms (tests/kill_test.sh 30 runs,
#                            tests/signal_storm_test.sh 3 runs per precision), 30 s of fuzzing per target.
#
# LIPT_FUZZ_SECONDS overrides the fuzzing time per target; JOBS (default: the cores) sets the build's parallelism,
# the fuzz targets run at a time and, in the quick mode, how many tests ctest runs at a time (the tests share no
# fixed path: mktemp; most Check suites keep one core busy, not two). The full mode runs one test at a time, as the
# storms' timings were measured (CTEST_PARALLEL_LEVEL changes it).
set -euo pipefail
cd "$(dirname "$0")/.."
usage() { echo "usage: scripts/test.sh [--quick|--full]   (quick by default; see the top of this file)"; }
MODE=quick
case "${1:-}" in
  ''|--quick) ;;
  --full) MODE=full ;;
  -h|--help) usage; exit 0 ;;
  *) usage >&2; exit 2 ;;
esac
[ $# -le 1 ] || { usage >&2; exit 2; }
JOBS=${JOBS:-$(nproc 2>/dev/null || echo 2)}
if [ "$MODE" = full ]; then FUZZ_SECONDS=${LIPT_FUZZ_SECONDS:-30}; else FUZZ_SECONDS=${LIPT_FUZZ_SECONDS:-5}; fi
QUICK_J=-j"$JOBS" # the quick mode's ctest parallelism

# Stage timer: `stage NAME` ends the stage running and starts NAME; the table is printed at exit, failed or not.
TIMES=() stage_name= stage_t0=$SECONDS
stage() {
  [ -n "$stage_name" ] && TIMES+=("$(printf '%6d s  %s' $((SECONDS - stage_t0)) "$stage_name")")
  stage_name=$1 stage_t0=$SECONDS
  [ -z "$1" ] || echo "== $1"
}
report() {
  local rc=$?
  stage ""
  echo "== stage times ($MODE mode, $(nproc 2>/dev/null || echo '?') cores)"
  printf '%s\n' "${TIMES[@]}"
  printf '%6d s  total\n' "$SECONDS"
  if [ "$rc" -eq 0 ]; then echo "== all tests passed ($MODE mode) in $SECONDS s"; else echo "== FAILED ($MODE mode, exit $rc)" >&2; fi
}
trap report EXIT

stage "dependencies"
# Open MPI for the data-parallel tests, python3 (stdlib only) to compare parameters between runs, oneDNN for
# --precision bf16 (its wrapper is tested with float32 operands on any CPU; bf16 itself where the CPU has AVX512_BF16),
# PyTorch, numpy and hypothesis for the Python module's tests (python_loader's fuzzing, workflow's scoring)
bash scripts/deps.sh openmpi-bin libopenmpi-dev python3 libdnnl-dev python3-numpy python3-torch python3-hypothesis

stage "structure (file and function sizes, no cycle between src/ folders; docs: scripts/check_docs.sh)"
bash scripts/check_structure.sh
bash scripts/check_docs.sh

build_clean() { # dir [cmake --build options]: build, fail on errors or on any compiler warning
  local dir=$1 log="$1/build.log"
  shift
  if ! cmake --build "$dir" -j"$JOBS" "$@" >"$log" 2>&1; then cat "$log"; echo "error: build failed in $dir" >&2; exit 1; fi
  # notes too (gcc's "the ABI for passing parameters ... changed" reads as a warning to a newcomer)
  if grep -qE "warning:|note:" "$log"; then grep -E -B2 -A3 "warning:|note:" "$log"; echo "error: the build is not warning-clean" >&2; exit 1; fi
}

stage "release build (build/)"
cmake -S . -B build -DCMAKE_BUILD_TYPE=Release -DLIPT_TESTS=ON -DLIPT_MPI=ON -DLIPT_DNNL=ON >/dev/null
build_clean build
# the names of the tests in build dir $1 labelled "long", for the stage lines
long_tests() { ctest --test-dir "$1" -N -L long | sed -n 's/^ *Test *#[0-9]*: *//p' | tr '\n' ' ' | sed 's/ $//'; }
if [ "$MODE" = full ]; then
  stage "tests (release): all"
  ctest --test-dir build --output-on-failure --no-tests=error --timeout 900
else
  stage "tests (release, $QUICK_J): all but the long e2e tests ($(long_tests build): --full runs them)"
  ctest --test-dir build --output-on-failure --no-tests=error --timeout 900 -LE long "$QUICK_J"
fi

stage "sanitizer build (build-asan/: ASan + UBSan)"
# without MPI: Open MPI's own allocations would swamp LeakSanitizer; the MPI tests run in the release build. With
# oneDNN: its wrapper runs clean under both sanitizers (measured with oneDNN 2.6.3). Without the shared library:
# it is the static one's sources again, and its one test (install) cannot load an instrumented library. -g1: line
# tables for the sanitizers' stack traces without the variables' debug information (the build 9 % faster).
cmake -S . -B build-asan -DCMAKE_BUILD_TYPE=RelWithDebInfo -DCMAKE_C_FLAGS_RELWITHDEBINFO="-O2 -g1 -DNDEBUG" \
  -DLIPT_SANITIZE=ON -DLIPT_TESTS=ON -DLIPT_MPI=OFF -DLIPT_DNNL=ON -DLIPT_SHARED=OFF >/dev/null
build_clean build-asan
# Check forks per test; ASan reports go to stderr and fail the test via the exit code.
export ASAN_OPTIONS=${ASAN_OPTIONS:-detect_leaks=1:abort_on_error=1}
export UBSAN_OPTIONS=${UBSAN_OPTIONS:-print_stacktrace=1:halt_on_error=1}
if [ "$MODE" = full ]; then
  stage "tests (sanitizers): all"
  LIPT_SANITIZED=1 ctest --test-dir build-asan --output-on-failure --no-tests=error --timeout 900
else
  stage "tests (sanitizers, $QUICK_J): the Check suites and fault (the e2e tests under the sanitizers: --full)"
  # LIPT_TEST_QUICK: the suites whose randomised sweeps dominate under the sanitizers (test_lipschitz_inf2,
  # test_lipschitz_bounds, test_ops_gemm_small) take 1 configuration in 4, every axis value still met
  # (tests/util/testutil.h: tu_skip); the release run took all of them
  LIPT_TEST_QUICK=4 LIPT_SANITIZED=1 ctest --test-dir build-asan --output-on-failure --no-tests=error --timeout 900 \
    -L '^(unit|sanitized)$' "$QUICK_J"
fi
unset ASAN_OPTIONS UBSAN_OPTIONS

if [ "$MODE" = full ]; then
  # The other side of LIPT_DNNL: a build without oneDNN refuses --precision bf16 with its own message (cli) and runs
  # bf16-emulated alike (test_ops_bf16); only what that changes is built and run
  stage "build without oneDNN (build-nodnnl/: LIPT_DNNL=OFF)"
  cmake -S . -B build-nodnnl -DCMAKE_BUILD_TYPE=Release -DLIPT_TESTS=ON -DLIPT_MPI=OFF -DLIPT_DNNL=OFF >/dev/null
  build_clean build-nodnnl --target lipt_cli test_ops_bf16
  stage "tests (without oneDNN): the --precision tests (test_ops_bf16, cli)"
  ctest --test-dir build-nodnnl --output-on-failure --timeout 900 -R '^(test_ops_bf16|cli)$'

  # The storms at more than ctest's one-minute length: kill -9 at 30 random moments (ctest: 10), the SIGUSR1 storm
  # with SIGTERM 3 times per precision (ctest: once), both on the release binary.
  stage "long storms: tests/kill_test.sh (30 runs), tests/signal_storm_test.sh (3 runs per precision)"
  bash tests/kill_test.sh build/lipt 30
  bash tests/signal_storm_test.sh build/lipt build/liblipt_test_usr1.so 3
fi

# Fuzzing: each libFuzzer target (tests/fuzz/) replays its regression inputs, then runs FUZZ_SECONDS from its seeds;
# any crash, leak or hang fails, and so does a clang that cannot be installed (scripts/fuzz.sh).
stage "fuzzing (scripts/fuzz.sh all $FUZZ_SECONDS: build-fuzz/, $FUZZ_SECONDS s per target)"
bash scripts/fuzz.sh all "$FUZZ_SECONDS"
stage ""
