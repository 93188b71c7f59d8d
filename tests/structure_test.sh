#!/usr/bin/env bash
# scripts/check_structure.sh can pass and can fail: it passes on a small tree at the limits (a 600-line file, a
# 100-line function, folders that call downwards only, through the kernel floor's public header, a struct member named
# like a library symbol), and fails on each rule broken in a copy of this repository's sources: a file over 600 lines,
# a function over 100 lines, an include cycle and a call cycle between src/ folders, a whole file written other than
# through the one writer (a rename, a fopen for writing, also in a subfolder of eval/, O_CREAT without O_NOFOLLOW), a
# folder on no floor, a lower floor calling a higher one, another folder's private header, BLAS or oneDNN outside
# src/kernels (a call, an identifier, an include), a tape type in src/kernels, and a call cycle between two files of
# one folder (issue 50, item 3).
# Each planted violation must be named in the output of the copy it was planted in, and not in the untouched copy's,
# and the untouched copy must pass.
#   bash tests/structure_test.sh [SOURCE_DIR]     (also: scripts/check_structure.sh --self-test)
set -euo pipefail
SRC=$(cd "${1:-$(dirname "$0")/..}" && pwd)
GUARD="$SRC/scripts/check_structure.sh"
TMP=$(mktemp -d)
trap 'rm -rf "$TMP"' EXIT
fail() { echo "FAIL: $*" >&2; exit 1; }

# ---- a tree at the limits passes
mk() { mkdir -p "$(dirname "$1")"; cat >"$1"; }
mk "$TMP/ok/src/kernels/low.c" <<'EOF'
int low_fn(int x) { return x + 1; }
static int shared_name(int x) { return x; }
int low_use(int x) { return shared_name(x); }
EOF
mk "$TMP/ok/src/ops/high.c" <<'EOF'
#include "kernels/kernels.h"
int low_fn(int x);
static int shared_name(int x) { return low_fn(x); } /* a static of the same name is no edge to kernels */
#include "lipt/info.h" /* struct info (a public header: include/ is outside the floors) */
int high_fn(const struct info *i, int x) { return shared_name(x) * 2 + i->dnnl_isa + (*i).dnnl_version; }
EOF
mk "$TMP/ok/include/lipt/info.h" <<'EOF'
struct info { int dnnl_isa, dnnl_version; }; /* members named like oneDNN's symbols, read after -> and . */
EOF
mk "$TMP/ok/src/kernels/kernels.h" <<'EOF'
int low_fn(int x);
EOF
{ echo "int long_fn(int x) {"; for i in $(seq 98); do echo "    x += $i;"; done; echo "    return x; }"; } \
  >"$TMP/ok/src/ops/long_fn.c" # 100 lines, the limit
mkdir -p "$TMP/ok/include" "$TMP/ok/train" "$TMP/ok/eval"
for i in $(seq 600); do echo "/* line $i */"; done >"$TMP/ok/include/long.h" # 600 lines, the limit
out=$(bash "$GUARD" "$TMP/ok") || fail "the guard fails on a tree at the limits: $out"
echo "ok: a tree at the limits passes ($out)"

# ---- each rule broken in a copy of the repository fails, naming the violation
mkdir "$TMP/base"
cp -r "$SRC/src" "$SRC/include" "$SRC/train" "$SRC/eval" "$TMP/base/"
base=$(bash "$GUARD" "$TMP/base") || fail "the guard fails on the untouched copy: $base"
echo "ok: the untouched copy passes ($base)"
plant() { # name expected-text: copy base to $TMP/name, run the caller's planting command on it, then the guard
  local name=$1 want=$2
  shift 2
  rm -rf "${TMP:?}/$name"
  cp -r "$TMP/base" "$TMP/$name"
  (cd "$TMP/$name" && eval "$*")
  local rc=0 got
  got=$(bash "$GUARD" "$TMP/$name") || rc=$?
  [ "$rc" -eq 1 ] || fail "$name: the guard exited $rc, expected 1; output: $got"
  grep -qF -- "$want" <<<"$got" || fail "$name: the guard does not report '$want'; output: $got"
  ! grep -qF -- "$want" <<<"$base" || fail "$name: '$want' is reported before it was planted"
  echo "ok: $name fails the guard: $(grep -F -- "$want" <<<"$got" | head -n 1 | sed 's/^ *//')"
}
plant long_file "src/core/planted_long.c: 601 lines" \
  'for i in $(seq 601); do echo "/* $i */"; done > src/core/planted_long.c'
plant long_function "function planted_fn is 101 lines" \
  '{ echo "int planted_fn(int x) {"; for i in $(seq 99); do echo "    x += $i;"; done; echo "    return x; }"; } > src/core/planted_fn.c'
plant include_cycle "src/core/planted_inc.c:1 includes nn/planted.h" \
  'echo "/* planted */" > src/nn/planted.h; echo "#include \"nn/planted.h\"" > src/core/planted_inc.c'
plant call_cycle "core -> nn: src/core/planted_call.c:1 uses lipt_model_free" \
  'printf "void lipt_model_free(void *m);\nvoid planted(void *m) { lipt_model_free(m); }\n" > src/core/planted_call.c'
plant own_rename "train/planted_write.c:2: rename()" \
  'printf "#include <stdio.h>\nint planted(void) { return rename(\"a.tmp\", \"a\"); }\n" > train/planted_write.c'
plant own_fopen "eval/planted_fopen.c:2: fopen() for writing" \
  'printf "#include <stdio.h>\nFILE *planted(void) { return fopen(\"out.csv\", \"w\"); }\n" > eval/planted_fopen.c'
plant nested_fopen "eval/tools/planted_fopen.c:2: fopen() for writing" \
  'printf "#include <stdio.h>\nFILE *planted(void) { return fopen(\"out.csv\", \"w\"); }\n" > eval/tools/planted_fopen.c'
plant creat_follow "src/shell/planted_open.c:2: open() with O_CREAT but without O_NOFOLLOW" \
  'printf "#include <fcntl.h>\nint planted(void) { return open(\"log\", O_WRONLY | O_CREAT | O_APPEND, 0666); }\n" > src/shell/planted_open.c'
plant unknown_floor "src/planted: a folder on no floor" \
  'mkdir src/planted && echo "int planted_fn(int x) { return x; }" > src/planted/planted.c'
plant floor_up "floor: io (floor 2) reaches up to optim (floor 5): src/io/planted_up.c:2 uses lipt_adamw_defaults" \
  'printf "#include \"lipt/optim.h\"\nvoid planted(void) { (void)lipt_adamw_defaults(); }\n" > src/io/planted_up.c'
plant private_header "src/nn/planted_inc.c:1: includes ops/attention_impl.h, a private header of src/ops" \
  'echo "#include \"ops/attention_impl.h\"" > src/nn/planted_inc.c'
plant blas_call "src/lipschitz/planted_blas.c:2: cblas_sgemv: BLAS / oneDNN outside src/kernels" \
  'printf "void cblas_sgemv(void);\nvoid planted(void) { cblas_sgemv(); }\n" > src/lipschitz/planted_blas.c'
plant blas_include "src/ops/planted_inc.c:1: includes a BLAS / oneDNN header outside src/kernels" \
  'echo "#include <cblas.h>" > src/ops/planted_inc.c'
plant dnnl_ident "src/core/planted_dnnl.c:1: dnnl_status_t: BLAS / oneDNN outside src/kernels" \
  'echo "int planted(int s) { return (dnnl_status_t)s; }" > src/core/planted_dnnl.c'
plant tape_in_kernels "src/kernels/planted_tape.c:2: lipt_ctx in the kernel floor" \
  'printf "#include \"lipt/autograd.h\"\nint planted(const lipt_ctx *ctx) { return ctx->precision; }\n" > src/kernels/planted_tape.c'
plant file_cycle "call cycle between files: src/ops/planted_a.c, src/ops/planted_b.c" \
  'printf "int planted_b(int x);\nint planted_a(int x) { return x ? planted_b(x - 1) : 0; }\n" > src/ops/planted_a.c;
   printf "int planted_a(int x);\nint planted_b(int x) { return x ? planted_a(x - 1) : 1; }\n" > src/ops/planted_b.c'
grep -q "cycle between src/ folders" <<<"$(bash "$GUARD" "$TMP/call_cycle" || true)" || fail "call_cycle: no cycle line"
echo "structure_test: all passed"
