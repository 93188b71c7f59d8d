#!/usr/bin/env bash
# The kernel-dependent tests under every kernel set this CPU can run: OpenBLAS's own choice (the default), then
# OPENBLAS_CORETYPE = Prescott (its generic SSE3 kernels, what an unknown CPU falls back to), Haswell (AVX2) and
# SkylakeX (AVX-512), then oneDNN limited to AVX2 (ONEDNN_MAX_CPU_ISA). Under each: the GEMM and matmul suites (the
# same bits on 1, 2 and 3 threads, against double references), the golden files (lipt against PyTorch), --recompute,
# and two short training runs through the binary: the same checkpoint, byte for byte, on 1, 2 and 3 threads, and a
# run resumed half-way equal to the uninterrupted one. A kernel set the CPU cannot execute is skipped with a message.
# Usage: kernels_test.sh BUILD_DIR LIPT_BINARY (run from the source tree: the golden files are read from tests/golden).
set -u
B=${1:?usage: kernels_test.sh BUILD_DIR LIPT_BINARY}
LIPT=${2:?usage: kernels_test.sh BUILD_DIR LIPT_BINARY}
cd "$(dirname "$0")/.." || exit 2
export LIPT_SOURCE_DIR=$PWD CK_DEFAULT_TIMEOUT=${CK_DEFAULT_TIMEOUT:-600}
# a kernel set of our own choosing per pass: not the user's, not one lipt's start-up check would change
unset OPENBLAS_CORETYPE ONEDNN_MAX_CPU_ISA DNNL_MAX_CPU_ISA LIPT_TEST_PRETEND_GENERIC LIPT_OPENBLAS_CORETYPE
TMP=$(mktemp -d)
trap 'rm -rf "$TMP"' EXIT
fails=0
pass() { echo "ok   $*"; }
fail() { echo "FAIL $*"; fails=$((fails + 1)); }
skip() { echo "skip $*"; }

SUITES=(test_ops_gemm test_ops_matmul test_golden test_recompute)

# Corpus: PTB from ../shared/data when present, else a synthetic text.
SHARED=${LIPT_SHARED_DATA:-$PWD/../shared/data}
if [ -f "$SHARED/ptb/ptb.char.train.txt" ]; then
  DATA=ptb
  export LIPT_DATA="$SHARED"
else
  for i in $(seq 1 3000); do echo "the cat sat on the mat and the dog sat on a log $i"; done >"$TMP/synth.txt"
  DATA="$TMP/synth.txt"
fi
# The tiny invertible model (spectral norms: OpenBLAS's ssyrk and sgemm) at batch 64: its projections (2048 rows)
# reach oneDNN's blocks in builds with it, the attention's per-head products stay on OpenBLAS.
RUN=(--config models/tiny.cfg --data "$DATA" --batch 64 --eval-every 2 --eval-symbols 2000 --final-eval none
  --log-every 1 --quiet --dropout 0.1)
nt() { sed '/"event":"resume"/d; s/,"tok_per_s.*//; s/,"eval_s":[0-9.]*//' "$1"; } # metrics.jsonl without the timings and resume marks

json=$("$LIPT" info --system --json 2>/dev/null)
field() { echo "$json" | sed -n "s/.*\"$1\":\"\([^\"]*\)\".*/\1/p"; }
best=$(field openblas_best_core)
onednn=$(field onednn_isa)
echo "CPU: $(field cpu) ($(field cpu_features)); OpenBLAS's own choice: $(field openblas_core); best: ${best:-none}"
dynamic=1
echo "$(field openblas_config)" | grep -q DYNAMIC_ARCH || dynamic=0

# runnable NAME: whether this CPU executes the kernel set NAME
runnable() {
  case $1 in
    default) return 0 ;;
    Prescott) echo " $(field cpu_features) " | grep -q " sse3 " ;;
    Haswell) [ "$best" = Haswell ] || [ "$best" = SkylakeX ] ;;
    SkylakeX) [ "$best" = SkylakeX ] ;;
    onednn-avx2) [ -n "$onednn" ] && { [ "$best" = Haswell ] || [ "$best" = SkylakeX ]; } ;;
  esac
}

for set in default Prescott Haswell SkylakeX onednn-avx2; do
  env=()
  case $set in
    default) ;;
    onednn-avx2) env=(ONEDNN_MAX_CPU_ISA=AVX2) ;;
    *) env=(OPENBLAS_CORETYPE=$set) ;;
  esac
  if ! runnable "$set"; then
    case $set in
      SkylakeX) skip "$set: its kernels need AVX-512 (F, BW, DQ, VL), which this CPU lacks" ;;
      Haswell) skip "$set: its kernels need AVX2 and FMA, which this CPU lacks" ;;
      Prescott) skip "$set: its kernels need an x86-64 CPU with SSE3" ;;
      onednn-avx2) skip "$set: ${onednn:+the CPU lacks AVX2}${onednn:-no oneDNN in this build}" ;;
    esac
    continue
  fi
  if [ "$set" != default ] && [ "$set" != onednn-avx2 ] && [ $dynamic -eq 0 ]; then
    skip "$set: this OpenBLAS is not a DYNAMIC_ARCH build (OPENBLAS_CORETYPE does nothing)"
    continue
  fi
  # the kernels really are the ones asked for
  if [ "${set#onednn}" = "$set" ] && [ "$set" != default ]; then
    got=$(env "${env[@]}" "$LIPT" info --system --json 2>/dev/null | sed -n 's/.*"openblas_core":"\([^"]*\)".*/\1/p')
    [ "$got" = "$set" ] || { fail "$set: OpenBLAS runs '$got' kernels"; continue; }
  fi
  for s in "${SUITES[@]}"; do
    if env "${env[@]}" "$B/$s" >"$TMP/$s.log" 2>&1; then pass "$set: $s"
    else fail "$set: $s: $(grep -E ':[FE]:' "$TMP/$s.log" | head -3)"; fi
  done
  d="$TMP/$set"
  for th in 1 2 3; do
    env "${env[@]}" "$LIPT" train "${RUN[@]}" --steps 4 --threads $th --out "$d/t$th" >/dev/null 2>"$d.err" ||
      fail "$set: train on $th threads: $(head -c 300 "$d.err")"
  done
  if cmp -s "$d/t1/last.ckpt" "$d/t2/last.ckpt" && cmp -s "$d/t1/last.ckpt" "$d/t3/last.ckpt" &&
     diff <(nt "$d/t1/metrics.jsonl") <(nt "$d/t3/metrics.jsonl") >/dev/null; then
    pass "$set: training on 1, 2 and 3 threads: the same checkpoint and metrics, byte for byte"
  else
    fail "$set: training differs between thread counts: $(diff <(nt "$d/t1/metrics.jsonl") <(nt "$d/t2/metrics.jsonl") | head -3)"
  fi
  env "${env[@]}" "$LIPT" train "${RUN[@]}" --steps 2 --threads 2 --out "$d/half" >/dev/null 2>"$d.err" &&
    env "${env[@]}" "$LIPT" train --out "$d/half" --resume --steps 4 --quiet --threads 2 >/dev/null 2>>"$d.err"
  if diff <(nt "$d/t2/metrics.jsonl") <(nt "$d/half/metrics.jsonl") >/dev/null &&
     [ "$(grep -c '"loss"' "$d/half/metrics.jsonl" 2>/dev/null)" = 4 ]; then
    pass "$set: 2 steps then --resume to 4: the metrics of the uninterrupted run"
  else
    fail "$set: resume: $(head -c 300 "$d.err") $(diff <(nt "$d/t2/metrics.jsonl") <(nt "$d/half/metrics.jsonl") 2>&1 | head -3)"
  fi
done

if [ $fails -ne 0 ]; then
  echo "kernels: $fails failure(s)"
  exit 1
fi
echo "kernels: all passed"
