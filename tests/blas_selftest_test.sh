#!/usr/bin/env bash
# The self-test of OpenBLAS kernel sets (src/kernels/blas_selftest.c, src/io/blas_verdict.c): it passes on this CPU and
# takes well under a second; its verdict is cached and the cache makes the next start free; with a planted bad kernel
# (LIPT_TEST_BLAS_SELFTEST_FAIL=1, a test hook) or a crashing one (=crash) lipt neither re-executes with nor
# recommends the failed set, keeps OpenBLAS's own choice and `lipt info --system` says the self-test failed.
# Usage: blas_selftest_test.sh LIPT_BINARY
set -u
. "$(dirname "$0")/util/e2e.sh" blas_selftest "${1:-}"
sysf() { echo "$1" | sed -n "s/.*\"$2\":\"\([^\"]*\)\".*/\1/p"; }
sysb() { echo "$1" | sed -n "s/.*\"$2\":\([a-z0-9]*\).*/\1/p"; }
unset OPENBLAS_CORETYPE LIPT_OPENBLAS_CORETYPE LIPT_OPENBLAS_SELFTEST LIPT_TEST_PRETEND_GENERIC \
  LIPT_TEST_BLAS_SELFTEST_FAIL
export XDG_CACHE_HOME="$TMP/cache"

sysj=$("$LIPT" info --system --json 2>/dev/null)
best=$(sysf "$sysj" openblas_best_core)
if ! echo "$sysj" | grep -q DYNAMIC_ARCH || [ -z "$best" ]; then
  echo "skip: OpenBLAS is not a DYNAMIC_ARCH build or the CPU lacks AVX: no kernel set to choose"
  exit 77
fi
rm -rf "$XDG_CACHE_HOME"

# ---- the self-test itself, in the hidden child command, on the best kernels the CPU runs
line=$(OPENBLAS_CORETYPE=$best "$LIPT" --blas-selftest)
rc=$?
ms=$(echo "$line" | sed -n 's/^pass \([0-9]*\) ms: .*/\1/p')
if [ $rc -eq 0 ] && [ -n "$ms" ] && [ "$ms" -lt 1000 ]; then
  pass "the self-test passes on the $best kernels in $ms ms: $line"
else
  fail "self-test on $best (exit $rc): $line"
fi
line=$(OPENBLAS_CORETYPE=$best LIPT_TEST_BLAS_SELFTEST_FAIL=1 "$LIPT" --blas-selftest)
rc=$?
echo "$line" | grep -q "^fail [0-9]* ms: sgemm NN 1x1x1 beta 0: C\[0,0\] = " && [ $rc -eq 1 ] &&
  pass "a planted bad kernel fails it: $line" || fail "planted failure (exit $rc): $line"

# ---- the planted failure: as if OpenBLAS had fallen back to Prescott, with a bad $best kernel set
pre=$(LIPT_TEST_BLAS_SELFTEST_FAIL=1 LIPT_TEST_PRETEND_GENERIC=1 "$LIPT" info --system --json 2>"$TMP/pre.err")
if [ "$(wc -l <"$TMP/pre.err")" -eq 1 ] &&
   grep -q "^lipt: note: OpenBLAS's $best kernels failed lipt's self-test on this CPU (wrong result: sgemm NN 1x1x1 .*); staying on OpenBLAS's own Prescott kernels (lipt info --system)$" "$TMP/pre.err" &&
   echo "$pre" | grep -q '"openblas_coretype_env":""' && [ "$(sysf "$pre" openblas_core_source)" = OpenBLAS ] && [ "$(sysf "$pre" openblas_selftest)" = failed ] &&
   [ "$(sysf "$pre" openblas_selftest_core)" = "$best" ] && echo "$pre" | grep -q '"openblas_recommended":""' &&
   { ! [ -e "$XDG_CACHE_HOME/lipt" ] || [ -z "$(ls "$XDG_CACHE_HOME/lipt")" ]; }; then
  pass "planted failure: no re-execution, OpenBLAS's $(sysf "$pre" openblas_core) kernels stay, nothing cached: $(cat "$TMP/pre.err")"
else
  fail "planted failure: $(cat "$TMP/pre.err") $pre"
fi
txt=$(LIPT_TEST_BLAS_SELFTEST_FAIL=1 LIPT_TEST_PRETEND_GENERIC=1 "$LIPT" info --system 2>/dev/null)
if echo "$txt" | grep -q "^  OpenBLAS: .* kernels, chosen by OpenBLAS; " &&
   echo "$txt" | grep -q "^    self-test of the $best kernels: FAILED (.*, tested by this command): wrong result: .*; not used, not recommended: OpenBLAS's own choice stays$" &&
   ! echo "$txt" | grep -q "OPENBLAS_CORETYPE=$best"; then
  pass "info --system says the self-test failed: $(echo "$txt" | grep self-test)"
else
  fail "info --system after the planted failure: $txt"
fi
# a user's lower kernel set stands either way; the failed set is not recommended
usr=$(OPENBLAS_CORETYPE=Prescott LIPT_TEST_BLAS_SELFTEST_FAIL=1 "$LIPT" info --system 2>"$TMP/usr.err")
if ! [ -s "$TMP/usr.err" ] && echo "$usr" | grep -q "^  OpenBLAS: Prescott kernels, OPENBLAS_CORETYPE=Prescott, set by the user" &&
   echo "$usr" | grep -q "self-test of the $best kernels: FAILED .*; not recommended: OpenBLAS's own choice stays$" &&
   ! echo "$usr" | grep -q "faster here"; then
  pass "a user's OPENBLAS_CORETYPE=Prescott stands, and the failed $best is not recommended"
else
  fail "user's OPENBLAS_CORETYPE with a failed self-test: $(cat "$TMP/usr.err") $usr"
fi
# a kernel that crashes the child (SIGSEGV) is a failure too, and lipt itself runs on. Under AddressSanitizer with
# abort_on_error=1 (scripts/test.sh's sanitizer stage), ASan's handler turns the child's SIGSEGV into SIGABRT (6).
want_sig=11
[ "${LIPT_SANITIZED:-}" = 1 ] && want_sig='\(11\|6\)'
crash=$(LIPT_TEST_BLAS_SELFTEST_FAIL=crash LIPT_TEST_PRETEND_GENERIC=1 "$LIPT" info --system --json 2>/dev/null)
rc=$?
if [ $rc -eq 0 ] && [ "$(sysf "$crash" openblas_selftest)" = failed ] &&
   sysf "$crash" openblas_selftest_detail | grep -q "^the self-test crashed: signal $want_sig " &&
   [ "$(sysf "$crash" openblas_core_source)" = OpenBLAS ]; then
  pass "a crashing kernel set fails the self-test: $(sysf "$crash" openblas_selftest_detail)"
else
  fail "crashing self-test (exit $rc): $crash"
fi

# ---- without the planted failure: the self-test passes, lipt picks $best, and the verdict is cached
t0=$(date +%s%N)
ok=$(LIPT_TEST_PRETEND_GENERIC=1 "$LIPT" info --system --json 2>"$TMP/ok.err")
t1=$(date +%s%N)
again=$(LIPT_TEST_PRETEND_GENERIC=1 "$LIPT" info --system --json 2>/dev/null)
t2=$(date +%s%N)
if grep -q "^lipt: OpenBLAS chose generic kernels (Prescott) on a CPU with AVX[-0-9]*; using $best kernels" "$TMP/ok.err" &&
   [ "$(sysf "$ok" openblas_core)" = "$best" ] && [ "$(sysf "$ok" openblas_core_source)" = lipt ] &&
   [ "$(sysf "$ok" openblas_selftest)" = passed ] && [ "$(sysb "$ok" openblas_selftest_cached)" = false ] &&
   [ "$(sysf "$again" openblas_selftest)" = passed ] && [ "$(sysb "$again" openblas_selftest_cached)" = true ] &&
   [ "$(ls "$XDG_CACHE_HOME/lipt" | grep -c '^blas-selftest-')" -eq 1 ]; then
  pass "the self-test passes: lipt picks $best; first start $(( (t1 - t0) / 1000000 )) ms, cached $(( (t2 - t1) / 1000000 )) ms: $(sysf "$ok" openblas_selftest_detail)"
else
  fail "self-test without the planted failure: $(cat "$TMP/ok.err") $ok / $again"
fi
txt=$(OPENBLAS_CORETYPE=Prescott "$LIPT" info --system 2>/dev/null)
if echo "$txt" | grep -q "self-test of the $best kernels: passed (.*, cached verdict); note: the CPU runs $best kernels, faster here (OPENBLAS_CORETYPE=$best)$"; then
  pass "a passed set is recommended over a user's Prescott: $(echo "$txt" | grep self-test)"
else
  fail "recommendation after a passed self-test: $txt"
fi
# a cache that cannot be written is not an error: the test runs, lipt picks $best
nocache=$(XDG_CACHE_HOME=/proc/no-such-dir LIPT_TEST_PRETEND_GENERIC=1 "$LIPT" info --system --json 2>"$TMP/nc.err")
rc=$?
if [ $rc -eq 0 ] && [ "$(sysf "$nocache" openblas_core)" = "$best" ] && [ "$(sysf "$nocache" openblas_selftest)" = passed ] &&
   [ "$(wc -l <"$TMP/nc.err")" -eq 1 ]; then
  pass "an unwritable cache: the self-test runs each time, no error"
else
  fail "unwritable cache (exit $rc): $(cat "$TMP/nc.err") $nocache"
fi

e2e_done
