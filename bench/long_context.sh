#!/usr/bin/env bash
# Long contexts in lipt alone: training tokens/s, peak resident memory (VmHWM) and the training arena's high-water
# mark of the dp model (d256 L4, batch 1) at sequence lengths 128 ... 4096, with and without --recompute, the two
# modes interleaved within a round. One lipt bench process per measurement, so every VmHWM is that run's own.
# Resumable: a finished (length, mode, round) JSON in the output directory is kept. bench/compare_rounds.sh
# (long128 ... long4096) has the same sizes against PyTorch.
#
# usage: bench/long_context.sh [--rounds R] [--out DIR] [--lipt PATH] [--threads N] [--lengths "128 512 ..."]
set -euo pipefail
cd "$(dirname "$0")/.."
ROUNDS=3 OUT=bench-long LIPT=build/lipt THREADS=2 LENGTHS="128 512 1024 2048 4096"
while [ $# -gt 0 ]; do
  case $1 in
    --rounds) ROUNDS=$2; shift 2 ;;
    --out) OUT=$2; shift 2 ;;
    --lipt) LIPT=$2; shift 2 ;;
    --threads) THREADS=$2; shift 2 ;;
    --lengths) LENGTHS=$2; shift 2 ;;
    --help|-h) sed -n '2,8p' "$0" | sed 's/^# \{0,1\}//'; exit 0 ;;
    *) echo "long_context.sh: unknown option '$1' (see --help)" >&2; exit 2 ;;
  esac
done
case $ROUNDS in ''|*[!0-9]*|0) echo "long_context.sh: --rounds needs a positive integer, got '$ROUNDS'" >&2; exit 2 ;; esac
[ -x "$LIPT" ] || { echo "long_context.sh: $LIPT is not an executable lipt binary (build first)" >&2; exit 1; }
mkdir -p "$OUT"
for r in $(seq "$ROUNDS"); do
  for T in $LENGTHS; do
    case $T in ''|*[!0-9]*) echo "long_context.sh: bad length '$T'" >&2; exit 2 ;; esac
    steps=$(( 2048 / T )); [ "$steps" -ge 1 ] || steps=1
    for mode in plain recompute; do
      f=$OUT/T$T.$mode.r$r.json
      [ -s "$f" ] && continue
      echo "== round $r/$ROUNDS: seq_len $T, $mode" >&2
      extra=(); [ $mode = recompute ] && extra=(--recompute)
      OMP_WAIT_POLICY=passive "$LIPT" bench --config models/ptb-dp.cfg --dropout 0 --batch 1 --seq_len "$T" \
        --threads "$THREADS" --runs 3 --warmup 1 --steps-per-run "$steps" --skip-eval --skip-sample --gemm-size 0 \
        --json "${extra[@]}" > "$f.tmp"
      mv "$f.tmp" "$f"
    done
  done
done
/usr/bin/python3 - "$OUT" <<'EOF'
import glob, json, os, re, sys
from statistics import median
runs = {}
for f in glob.glob(os.path.join(sys.argv[1], "T*.*.r*.json")):
    m = re.match(r"T(\d+)\.(plain|recompute)\.r\d+\.json$", os.path.basename(f))
    if m:
        runs.setdefault((int(m.group(1)), m.group(2)), []).append(json.load(open(f)))
print("| seq_len | rounds | train tokens/s | with --recompute | VmHWM MB | with --recompute | arena MB | with --recompute |")
print("|---:|---:|---:|---:|---:|---:|---:|---:|")
for T in sorted({k[0] for k in runs}):
    p, r = runs.get((T, "plain"), []), runs.get((T, "recompute"), [])
    med = lambda rs, f: "%.0f" % median(f(j) for j in rs) if rs else "-"
    tok = lambda j: j["tokens_per_s"]["train"]
    hwm = lambda j: j["vm_hwm_mb"]["peak"]
    ar = lambda j: j["train_arena_peak_mb"]
    print("| %d | %d | %s | %s | %s | %s | %s | %s |" % (T, min(len(p), len(r)), med(p, tok), med(r, tok), med(p, hwm),
                                                         med(r, hwm), med(p, ar), med(r, ar)))
EOF
