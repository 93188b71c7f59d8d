#!/usr/bin/env bash
# The one test command: installs missing build dependencies (Debian/Ubuntu, apt-get, through sudo
# when not root), builds lipt with oneDNN, runs the Check suites with ctest, then the same suites built with
# AddressSanitizer + UndefinedBehaviorSanitizer, then the --precision tests of a build without oneDNN, then fuzzes
# every input parser for a short while (scripts/fuzz.sh, libFuzzer under clang). Exits non-zero on any failure.
set -euo pipefail
cd "$(dirname "$0")/.."
JOBS=${JOBS:-$(nproc 2>/dev/null || echo 2)}

# Open MPI for the data-parallel tests, python3 (stdlib only) to compare parameters between runs, oneDNN for
# --precision bf16 (its wrapper is tested with float32 operands on any CPU; bf16 itself where the CPU has AVX512_BF16),
# PyTorch, numpy and hypothesis for the Python module's tests (python_loader's fuzzing, workflow's scoring)
bash scripts/deps.sh openmpi-bin libopenmpi-dev python3 libdnnl-dev python3-numpy python3-torch python3-hypothesis

start=$(date +%s)
echo "== structure (file and function sizes, no cycle between src/ folders)"; bash scripts/check_structure.sh
echo "== release build (build/)"
cmake -S . -B build -DCMAKE_BUILD_TYPE=Release -DLIPT_TESTS=ON -DLIPT_MPI=ON -DLIPT_DNNL=ON >/dev/null
build_clean() { # dir [cmake --build options]: build, fail on errors or on any compiler warning
  local dir=$1 log="$1/build.log"
  shift
  if ! cmake --build "$dir" -j"$JOBS" "$@" >"$log" 2>&1; then cat "$log"; echo "error: build failed in $dir" >&2; exit 1; fi
  if grep -q "warning:" "$log"; then grep -B2 -A3 "warning:" "$log"; echo "error: the build is not warning-clean" >&2; exit 1; fi
}
build_clean build
echo "== tests (release)"
ctest --test-dir build --output-on-failure --no-tests=error --timeout 900

echo "== sanitizer build (build-asan/: ASan + UBSan)"
# without MPI: Open MPI's own allocations would swamp LeakSanitizer; the MPI tests run in the release build. With
# oneDNN: its wrapper runs clean under both sanitizers (measured with oneDNN 2.6.3)
cmake -S . -B build-asan -DCMAKE_BUILD_TYPE=RelWithDebInfo -DLIPT_SANITIZE=ON -DLIPT_TESTS=ON -DLIPT_MPI=OFF \
  -DLIPT_DNNL=ON >/dev/null
build_clean build-asan
echo "== tests (sanitizers)"
# Check forks per test; ASan reports go to stderr and fail the test via the exit code.
ASAN_OPTIONS=${ASAN_OPTIONS:-detect_leaks=1:abort_on_error=1} \
UBSAN_OPTIONS=${UBSAN_OPTIONS:-print_stacktrace=1:halt_on_error=1} \
LIPT_SANITIZED=1 ctest --test-dir build-asan --output-on-failure --no-tests=error --timeout 900

# The other side of LIPT_DNNL: a build without oneDNN refuses --precision bf16 with its own message (cli) and runs
# bf16-emulated alike (test_ops_bf16); only what that changes is built and run
echo "== build without oneDNN (build-nodnnl/: LIPT_DNNL=OFF): the --precision tests"
cmake -S . -B build-nodnnl -DCMAKE_BUILD_TYPE=Release -DLIPT_TESTS=ON -DLIPT_MPI=OFF -DLIPT_DNNL=OFF >/dev/null
build_clean build-nodnnl --target lipt_cli test_ops_bf16
ctest --test-dir build-nodnnl --output-on-failure --timeout 900 -R '^(test_ops_bf16|cli)$'

# Fuzzing: each libFuzzer target (tests/fuzz/) replays its regression inputs, then runs LIPT_FUZZ_SECONDS (30) from its
# seeds; any crash, leak or hang fails CI, and so does a clang that cannot be installed (scripts/fuzz.sh).
bash scripts/fuzz.sh all "${LIPT_FUZZ_SECONDS:-30}"

echo "== all tests passed in $(( $(date +%s) - start )) s"
