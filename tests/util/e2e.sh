# The end-to-end tests' common prologue, sourced: `. "$(dirname "$0")/util/e2e.sh" NAME LIPT_BINARY` sets
#   LIPT (the binary, absolute: the tests cd), REPO (the source tree), HERE (tests/), TMP (a directory removed at
#   exit), fails, pass/fail (one line each) and e2e_corpus FILE (four copies of docs/USAGE.md, the manual the tests
#   train on); e2e_done prints the count and exits non-zero on a failure. Each test sets its own LIPT_THREADS.
E2E_NAME=${1:?usage: . tests/util/e2e.sh NAME LIPT_BINARY}
[ -n "${2:-}" ] && [ -x "$2" ] || { echo "usage: ${E2E_NAME}_test.sh LIPT_BINARY (an executable; got '${2:-}')" >&2; exit 2; }
LIPT=$(cd "$(dirname "$2")" && pwd)/$(basename "$2")
HERE=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
REPO=$(cd "$HERE/.." && pwd)
TMP=$(mktemp -d)
trap 'rm -rf "$TMP"' EXIT
fails=0
pass() { echo "ok   $*"; }
fail() { echo "FAIL $*"; fails=$((fails + 1)); }
e2e_corpus() { for _ in 1 2 3 4; do cat "$REPO/docs/USAGE.md"; done >"$1"; }
e2e_done() {
  if [ "$fails" -eq 0 ]; then echo "$E2E_NAME: all passed"; else echo "$E2E_NAME: $fails failed"; fi
  exit $((fails > 0))
}
