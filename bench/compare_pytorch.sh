#!/usr/bin/env bash
# lipt against the same model in PyTorch: installs Debian's python3-torch when missing (apt-get, through sudo when
# not root), builds lipt when no binary is given, then runs bench/compare_pytorch.py: lipt bench and the PyTorch
# equivalent in turn with the same threads (speed, memory, ratio lipt/PyTorch), and the agreement of the loss of
# `lipt export`ed weights loaded into PyTorch, for every variant. bench/README.md describes both parts.
#
# usage: bench/compare_pytorch.sh [--lipt PATH] [--threads N] [--bf16] [--skip-bench] [--skip-agreement] [--json FILE]
#                                 [-- LIPT BENCH ARGS]       e.g.  -- --config models/ptb-dp.cfg --batch 32
# --bf16: the bf16 comparison, lipt bench --precision bf16 against PyTorch under torch.autocast(device_type='cpu',
#         dtype=torch.bfloat16); on a CPU without AVX512_BF16 add -- --precision bf16-emulated (numerics, not speed).
# Environment: PYTHON (default /usr/bin/python3, the interpreter python3-torch installs into),
#              BUILD_JOBS (parallel jobs when building lipt; default: all cores).
set -euo pipefail
cd "$(dirname "$0")/.."
PYTHON=${PYTHON:-/usr/bin/python3}
LIPT=""
ARGS=()
while [ $# -gt 0 ]; do
  case "$1" in
    --lipt) LIPT=$2; shift 2 ;;
    --lipt=*) LIPT=${1#--lipt=}; shift ;;
    --help|-h) sed -n '2,12p' "$0" | sed 's/^# \{0,1\}//'; exit 0 ;;
    *) ARGS+=("$1"); shift ;;
  esac
done

if ! "$PYTHON" -c 'import torch, numpy' >/dev/null 2>&1; then
  echo "== installing python3-torch (Debian package) for $PYTHON"
  command -v apt-get >/dev/null || { echo "error: apt-get not found: install PyTorch and numpy for $PYTHON by hand" >&2; exit 1; }
  SUDO=""
  if [ "$(id -u)" != 0 ]; then
    command -v sudo >/dev/null || { echo "error: need root or sudo to install python3-torch" >&2; exit 1; }
    SUDO=sudo
  fi
  $SUDO apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq --no-install-recommends python3-torch python3-numpy >/dev/null
  "$PYTHON" -c 'import torch, numpy' || { echo "error: $PYTHON still cannot import torch (set PYTHON=...)" >&2; exit 1; }
fi

if [ -z "$LIPT" ]; then
  LIPT=build/lipt
  if [ ! -x "$LIPT" ]; then
    echo "== building lipt (build/)"
    bash scripts/deps.sh
    cmake -S . -B build -DCMAKE_BUILD_TYPE=Release >/dev/null
    cmake --build build -j"${BUILD_JOBS:-$(nproc 2>/dev/null || echo 2)}" --target lipt_cli >/dev/null
  fi
fi
[ -x "$LIPT" ] || { echo "error: $LIPT is not an executable lipt binary" >&2; exit 1; }

exec "$PYTHON" bench/compare_pytorch.py --lipt "$LIPT" ${ARGS[@]+"${ARGS[@]}"}
