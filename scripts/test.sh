#!/usr/bin/env bash
# The one test command: installs missing build dependencies (Debian/Ubuntu, apt-get, through sudo
# when not root), builds lipt, runs the Check suites with ctest, then the same suites built with
# AddressSanitizer + UndefinedBehaviorSanitizer, then fuzzes every input parser for a short while (scripts/fuzz.sh,
# libFuzzer under clang). Exits non-zero on any failure.
set -euo pipefail
cd "$(dirname "$0")/.."
JOBS=${JOBS:-$(nproc 2>/dev/null || echo 2)}

# Open MPI for the data-parallel tests, python3 (stdlib only) to compare parameters between runs
bash scripts/deps.sh openmpi-bin libopenmpi-dev python3

start=$(date +%s)
echo "== release build (build/)"
cmake -S . -B build -DCMAKE_BUILD_TYPE=Release -DLIPT_TESTS=ON -DLIPT_MPI=ON >/dev/null
build_clean() { # dir: build, fail on errors or on any compiler warning
  local log="$1/build.log"
  if ! cmake --build "$1" -j"$JOBS" >"$log" 2>&1; then cat "$log"; echo "error: build failed in $1" >&2; exit 1; fi
  if grep -q "warning:" "$log"; then grep -B2 -A3 "warning:" "$log"; echo "error: the build is not warning-clean" >&2; exit 1; fi
}
build_clean build
echo "== tests (release)"
ctest --test-dir build --output-on-failure --no-tests=error --timeout 900

echo "== sanitizer build (build-asan/: ASan + UBSan)"
# without MPI: Open MPI's own allocations would swamp LeakSanitizer; the MPI tests run in the release build
cmake -S . -B build-asan -DCMAKE_BUILD_TYPE=RelWithDebInfo -DLIPT_SANITIZE=ON -DLIPT_TESTS=ON -DLIPT_MPI=OFF >/dev/null
build_clean build-asan
echo "== tests (sanitizers)"
# Check forks per test; ASan reports go to stderr and fail the test via the exit code.
ASAN_OPTIONS=${ASAN_OPTIONS:-detect_leaks=1:abort_on_error=1} \
UBSAN_OPTIONS=${UBSAN_OPTIONS:-print_stacktrace=1:halt_on_error=1} \
LIPT_SANITIZED=1 ctest --test-dir build-asan --output-on-failure --no-tests=error --timeout 900

# Fuzzing: each libFuzzer target (tests/fuzz/) replays its regression inputs, then runs LIPT_FUZZ_SECONDS (30) from its
# seeds; any crash, leak or hang fails CI, and so does a clang that cannot be installed (scripts/fuzz.sh).
bash scripts/fuzz.sh all "${LIPT_FUZZ_SECONDS:-30}"

echo "== all tests passed in $(( $(date +%s) - start )) s"
