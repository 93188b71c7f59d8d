#!/usr/bin/env bash
# Can the tests of --memory invert fail? Plants one defect at a time in a scratch copy of the tree (a git worktree of
# HEAD), rebuilds, runs the test that should catch it, and reports whether it did. Exits 1 if any defect goes unseen.
#
#   scripts/reversible_mutants.sh [BUILD_DIR]    (default /tmp/lipt-mutants; the worktree is removed at exit)
#
# The defects (each a one-line change; the test expected to fail):
#   rng-rebuild   the reconstruction runs with the current RNG instead of the segment's own (dropout masks not
#                 replayed)                                       -> test_reversible (coupling + dropout, fixed point)
#   rng-rerun     the rerun of a segment on the tape draws fresh masks      -> test_reversible
#   no-grid       coupling_grid rounds nothing (sums not exact in float32)  -> test_reversible (bit-identical rebuild)
#   no-refusal    a model that is not invertible is accepted               -> test_reversible, reversible_cli
#   resume-tol    a resumed run rebuilds with a looser tolerance            -> reversible_cli (resume bit for bit)
set -euo pipefail
cd "$(dirname "$0")/.."
BUILD=${1:-/tmp/lipt-mutants}
WT=$(mktemp -d /tmp/lipt-mutants-src.XXXXXX)
rmdir "$WT"
git worktree add -q --detach "$WT" HEAD
trap 'git worktree remove --force "$WT" 2>/dev/null || true' EXIT
rm -f "$BUILD/CMakeCache.txt"   # a build dir of an earlier run's worktree
cmake -S "$WT" -B "$BUILD" -DCMAKE_BUILD_TYPE=Release -DLIPT_TESTS=ON -DLIPT_MPI=OFF -DLIPT_DNNL=ON >/dev/null

# name | file | exact text | replacement | ctest regex
MUTANTS=(
  "rng-rebuild|src/autograd/reversible.c|    ctx->rng = c->rng[k];
    lipt_no_grad_push(ctx);|    lipt_no_grad_push(ctx);|^test_reversible$"
  "rng-rerun|src/autograd/reversible.c|    lipt_rng rng = c->rng[k];
    lipt_tensor *xk|    lipt_rng rng = ctx->rng;
    lipt_tensor *xk|^test_reversible$"
  "no-grid|src/ops/round_grid.c|Y[i] = rintf(X[i] * up) * down;|Y[i] = X[i] + 0 * up * down;|^test_reversible$"
  "no-refusal|src/nn/reversible.c|    if (!lipt_config_reversible(c))
        return lipt_fail(err, LIPT_ERR_ARG, \"--memory invert rebuilds|    if (0 && !lipt_config_reversible(c))
        return lipt_fail(err, LIPT_ERR_ARG, \"--memory invert rebuilds|^(test_reversible|reversible_cli)$"
  "resume-tol|src/shell/memory_opts.c|    rev->tol = tol;|    rev->tol = cli_has(a, \"resume\") ? 100 * tol : tol;|^reversible_cli$"
)

unseen=0
for m in "${MUTANTS[@]}"; do
  IFS='|' read -r -d '' name file from to tests <<<"$m" || true
  tests=${tests%$'\n'}
  python3 - "$WT/$file" "$from" "$to" <<'PY'
import sys
p, a, b = sys.argv[1:4]
s = open(p).read()
if s.count(a) != 1:
    sys.exit(f"mutant: the text to replace occurs {s.count(a)} times in {p}")
open(p, "w").write(s.replace(a, b))
PY
  if ! cmake --build "$BUILD" -j"$(nproc)" >"$BUILD/mutant-$name.build.log" 2>&1; then
    echo "mutant $name: build failed (see $BUILD/mutant-$name.build.log)"; unseen=1
  elif ctest --test-dir "$BUILD" -R "$tests" --timeout 900 --output-on-failure >"$BUILD/mutant-$name.log" 2>&1; then
    echo "mutant $name: NOT caught by $tests"; unseen=1
  else
    echo "mutant $name: caught by $tests: $(grep -m1 -E '^FAIL|:F:|:E:' "$BUILD/mutant-$name.log" | cut -c1-220)"
  fi
  git -C "$WT" checkout -q -- "$file"
done
# and the unmutated tree passes the same tests
cmake --build "$BUILD" -j"$(nproc)" >"$BUILD/clean.build.log" 2>&1
if ctest --test-dir "$BUILD" -R '^(test_reversible|reversible_cli)$' --timeout 900 >"$BUILD/clean.log" 2>&1; then
  echo "unmutated: test_reversible and reversible_cli pass"
else
  echo "unmutated: FAILED (log $BUILD/clean.log)"; unseen=1
fi
exit $unseen
