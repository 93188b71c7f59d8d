#!/usr/bin/env bash
# Converged results (docs/RESULTS.md, "Converged results"): trains each named run of the plan below to its budget,
# then evaluates its best checkpoint (the lowest periodic validation BPC: early stopping on validation) as published
# numbers are made and writes one row per run into docs/results/converged.csv.
#
#   scripts/converged.sh [--out DIR] [--threads N] [--precision P] [--train-only] [--no-csv | --csv FILE] NAME [NAME ...]
#   scripts/converged.sh --list
#
# Resumable: a run folder with a checkpoint is continued (--resume), a finished run (DIR/NAME/result.json) is only
# re-evaluated when its result is missing. Evaluation: the whole validation split and the whole test split in
# non-overlapping windows of seq_len (each symbol scored once, the first with the preceding symbol as context),
# and the test split again in sliding windows of seq_len with stride seq_len/4 (each scored symbol has at least
# 3/4 of a window of context); next-character accuracy (argmax) on the headline split. Invertible models are also
# certified (lipt lipschitz, exit 0 required) and inverted (lipt invert, 10 test windows). Several may run at once:
# each takes a lock (flock on FILE.lock) to rewrite the CSV, so no row is lost. LIPT names the binary (build/lipt).
set -euo pipefail
cd "$(dirname "$0")/.."
OUT=runs/converged
THREADS=${LIPT_THREADS:-}
PRECISION=""
TRAIN_ONLY=0
CSV=docs/results/converged.csv
NAMES=()

# name | model label | corpus | config | data split | from | training flags (without --out/--threads/--precision)
# "from" names a run whose final checkpoint this one continues (a second cosine cycle: --steps is the new total and
# the learning rate restarts where the longer cosine stands at the resumed step); "-" starts from scratch.
# ptb-invertible-c3 is a third, gentler cycle: the cosine of 27,000 steps to --lr 8e-3 stands at 9.7e-4 at step
# 21,000, so the rate restarts there (the second cycle's restart at 2.36e-3 first cost 0.10 BPC) and decays to 2e-5.
# The -muon runs train the hidden layers' matrices with Muon (docs/USAGE.md: Optimizers) at the 400-step probes' best rate.
# The -deep16 runs spend the same parameters on 16 layers of width 136 (the probes' depth lever at this scale); on tiny
# Shakespeare on 16 layers of width 64 (the probes' very shape).
PTB_RECIPE="--batch 32 --schedule cosine --warmup 200 --min-lr 2e-5 --beta1 0.9 --beta2 0.98 \
--weight-decay 0.1 --clip 1 --seed 0 --eval-every 500 --eval-symbols 200000 --save-every 100"
TS_RECIPE="--batch 12 --steps 2000 --lr 1e-3 --schedule cosine --warmup 100 --min-lr 1e-4 --beta1 0.9 --beta2 0.99 \
--weight-decay 0.1 --clip 1 --seed 0 --eval-every 250 --eval-symbols 0 --save-every 250"
# nanoGPT's recipe run five times longer, stopped early when the whole validation split's BPC has not improved
# for 8 evaluations (4,000 steps): the budget where the model stops improving
TS_LONG="${TS_RECIPE/--steps 2000/--steps 10000} --patience 8"
TS_LONG="${TS_LONG/--eval-every 250/--eval-every 500}"
# fifteen times nanoGPT's budget (30,000 steps, 23.0M symbols, 23 epochs), stopped early after 5 evaluations (5,000
# steps) without improvement: where the invertible model's accuracy stops improving (ts-*-long still improved)
TS_XL="${TS_RECIPE/--steps 2000/--steps 30000} --patience 5"
TS_XL="${TS_XL/--eval-every 250/--eval-every 1000}"
TS_XL="${TS_XL/--save-every 250/--save-every 500}"
E8_RECIPE="--batch 16 --schedule cosine --warmup 200 --min-lr 2e-5 --beta1 0.9 --beta2 0.98 --weight-decay 0.1 \
--clip 1 --seed 0 --eval-every 500 --eval-symbols 100000 --save-every 100"
plan() {
  cat <<EOF
ptb-invertible|invertible|ptb|models/ptb8-invertible.cfg|auto|-|--steps 6500 --lr 4e-3 $PTB_RECIPE
ptb-dp|dp|ptb|models/ptb8-dp.cfg|auto|-|--steps 6500 --lr 4e-3 $PTB_RECIPE
ptb-l2-tied|l2-tied|ptb|models/ptb8-l2-tied.cfg|auto|-|--steps 6500 --lr 4e-3 $PTB_RECIPE
ptb-invertible-c2|invertible|ptb|models/ptb8-invertible.cfg|auto|ptb-invertible|--steps 21000 --lr 3e-3 $PTB_RECIPE
ptb-dp-c2|dp|ptb|models/ptb8-dp.cfg|auto|ptb-dp|--steps 21000 --lr 3e-3 $PTB_RECIPE
ptb-l2-tied-c2|l2-tied|ptb|models/ptb8-l2-tied.cfg|auto|ptb-l2-tied|--steps 21000 --lr 3e-3 $PTB_RECIPE
ptb-invertible-c3|invertible|ptb|models/ptb8-invertible.cfg|auto|ptb-invertible-c2|--steps 27000 --lr 8e-3 $PTB_RECIPE
ptb-dp-c3|dp|ptb|models/ptb8-dp.cfg|auto|ptb-dp-c2|--steps 27000 --lr 8e-3 $PTB_RECIPE
ptb-l2-tied-c3|l2-tied|ptb|models/ptb8-l2-tied.cfg|auto|ptb-l2-tied-c2|--steps 27000 --lr 8e-3 $PTB_RECIPE
ptb-invertible-muon|invertible|ptb|models/ptb8-invertible.cfg|auto|-|--steps 6500 --lr 4e-3 --optimizer muon --muon-lr 4e-3 $PTB_RECIPE
ptb-dp-muon|dp|ptb|models/ptb8-dp.cfg|auto|-|--steps 6500 --lr 4e-3 --optimizer muon --muon-lr 4e-3 $PTB_RECIPE
ptb-invertible-deep16-muon|invertible|ptb|models/ptb16-invertible.cfg|auto|-|--steps 6500 --lr 4e-3 --optimizer muon --muon-lr 4e-3 $PTB_RECIPE
ptb-dp-deep16-muon|dp|ptb|models/ptb16-dp.cfg|auto|-|--steps 6500 --lr 4e-3 --optimizer muon --muon-lr 4e-3 $PTB_RECIPE
ptb-invertible-muon-c2|invertible|ptb|models/ptb8-invertible.cfg|auto|ptb-invertible-muon|--steps 21000 --lr 3e-3 --optimizer muon --muon-lr 3e-3 $PTB_RECIPE
ptb-invertible-muon-c3|invertible|ptb|models/ptb8-invertible.cfg|auto|ptb-invertible-muon-c2|--steps 27000 --lr 8e-3 --optimizer muon --muon-lr 8e-3 $PTB_RECIPE
ptb-invertible-deep16-muon-c2|invertible|ptb|models/ptb16-invertible.cfg|auto|ptb-invertible-deep16-muon|--steps 21000 --lr 3e-3 --optimizer muon --muon-lr 3e-3 $PTB_RECIPE
ptb-dp-deep16-muon-c2|dp|ptb|models/ptb16-dp.cfg|auto|ptb-dp-deep16-muon|--steps 21000 --lr 3e-3 --optimizer muon --muon-lr 3e-3 $PTB_RECIPE
ts-dp|dp|tinyshakespeare|models/shakespeare-dp.cfg|0.9,0.1,0|-|$TS_RECIPE
ts-invertible|invertible|tinyshakespeare|models/shakespeare-invertible.cfg|0.9,0.1,0|-|$TS_RECIPE
ts-dp-long|dp|tinyshakespeare|models/shakespeare-dp.cfg|0.9,0.1,0|-|$TS_LONG
ts-invertible-long|invertible|tinyshakespeare|models/shakespeare-invertible.cfg|0.9,0.1,0|-|$TS_LONG
ts-invertible-xl|invertible|tinyshakespeare|models/shakespeare-invertible.cfg|0.9,0.1,0|-|$TS_XL
ts-invertible-deep16-xl|invertible|tinyshakespeare|models/shakespeare16-invertible.cfg|0.9,0.1,0|-|$TS_XL
ts-invertible-deep16-muon-xl|invertible|tinyshakespeare|models/shakespeare16-invertible.cfg|0.9,0.1,0|-|$TS_XL --optimizer muon --muon-lr 4e-3
enwik8-invertible|invertible|enwik8|models/enwik8-small-invertible.cfg|0.9,0.05,0.05|-|--steps 6000 --lr 4e-3 $E8_RECIPE
enwik8-dp|dp|enwik8|models/enwik8-small-dp.cfg|0.9,0.05,0.05|-|--steps 6000 --lr 2e-3 $E8_RECIPE
enwik8-invertible-muon|invertible|enwik8|models/enwik8-small-invertible.cfg|0.9,0.05,0.05|-|--steps 6000 --lr 4e-3 --optimizer muon --muon-lr 4e-3 $E8_RECIPE
enwik8-invertible-deep16-muon|invertible|enwik8|models/enwik8-small16-invertible.cfg|0.9,0.05,0.05|-|--steps 6000 --lr 4e-3 --optimizer muon --muon-lr 4e-3 $E8_RECIPE
enwik8-dp-deep16-muon|dp|enwik8|models/enwik8-small16-dp.cfg|0.9,0.05,0.05|-|--steps 6000 --lr 4e-3 --optimizer muon --muon-lr 4e-3 $E8_RECIPE
EOF
}

while [ $# -gt 0 ]; do
  case "$1" in
    --out) OUT="$2"; shift 2 ;;
    --threads) THREADS="$2"; shift 2 ;;
    --precision) PRECISION="$2"; shift 2 ;;
    --train-only) TRAIN_ONLY=1; shift ;;
    --no-csv) CSV=""; shift ;;
    --csv) CSV="$2"; shift 2 ;;
    --list) plan | cut -d'|' -f1,2,3,4,6; exit 0 ;;
    -h|--help) sed -n 2,15p "$0"; exit 0 ;;
    -*) echo "converged.sh: unknown option $1 (see --help)" >&2; exit 2 ;;
    *) NAMES+=("$1"); shift ;;
  esac
done
[ ${#NAMES[@]} -gt 0 ] || { echo "converged.sh: name at least one run (--list shows the plan)" >&2; exit 2; }
LIPT=${LIPT:-build/lipt}
[ -x "$LIPT" ] || { echo "converged.sh: $LIPT not built (cmake -S . -B build && cmake --build build -j)" >&2; exit 1; }
COMMON=()
[ -n "$THREADS" ] && COMMON+=(--threads "$THREADS")

run_one() { # name
  local line
  line=$(plan | awk -F'|' -v n="$1" '$1 == n') || true
  [ -n "$line" ] || { echo "converged.sh: no run named $1 (--list shows the plan)" >&2; exit 2; }
  local name model corpus cfg split from flags
  IFS='|' read -r name model corpus cfg split from flags <<<"$line"
  local dir="$OUT/$name" prec=()
  [ -n "$PRECISION" ] && prec=(--precision "$PRECISION")
  mkdir -p "$OUT"
  if [ "$from" != - ] && [ ! -f "$dir/last.ckpt" ]; then
    # finish the first cycle (training only), then start this run from a copy of its final state
    [ -f "$OUT/$from/result.json" ] || ( TRAIN_ONLY=1; run_one "$from" )
    echo "== $name: continuing $OUT/$from/last.ckpt"
    mkdir -p "$dir"
    cp "$OUT/$from/metrics.jsonl" "$OUT/$from/run.cfg" "$dir/"
    [ -f "$OUT/$from/best.ckpt" ] && cp "$OUT/$from/best.ckpt" "$dir/"
    cp "$OUT/$from/last.ckpt" "$dir/last.ckpt.tmp" && mv "$dir/last.ckpt.tmp" "$dir/last.ckpt"
  fi
  if [ ! -f "$dir/result.json" ] || [ "$TRAIN_ONLY" = 1 ]; then
    local src=(--config "$cfg" --force)      # a run cut off before its first checkpoint starts over
    [ -f "$dir/last.ckpt" ] && src=(--resume --ckpt "$dir/last.ckpt")
    echo "== $name: training ($cfg on $corpus)"
    # shellcheck disable=SC2086
    "$LIPT" train "${src[@]}" --data "$corpus" --data-split "$split" --out "$dir" $flags --final-eval none \
      "${prec[@]}" "${COMMON[@]}"
  fi
  [ "$TRAIN_ONLY" = 1 ] && return 0
  local ck="$dir/best.ckpt"
  [ -f "$ck" ] || ck="$dir/last.ckpt"
  local seq
  seq=$(sed -n 's/^seq_len *= *\([0-9]*\).*/\1/p' "$cfg" | head -1)
  echo "== $name: evaluating $ck"
  "$LIPT" eval --ckpt "$ck" --split valid --json --quiet "${COMMON[@]}" >"$dir/eval_valid.json"
  if [ "$split" = "0.9,0.1,0" ]; then
    echo '{}' >"$dir/eval_test.json"; echo '{}' >"$dir/eval_test_sliding.json"
  else
    "$LIPT" eval --ckpt "$ck" --split test --json --quiet "${COMMON[@]}" >"$dir/eval_test.json"
    "$LIPT" eval --ckpt "$ck" --split test --stride $((seq / 4)) --json --quiet "${COMMON[@]}" \
      >"$dir/eval_test_sliding.json"
  fi
  if [ "$model" = invertible ]; then
    echo "== $name: certificate and inversion"
    local lrc=0
    "$LIPT" lipschitz --ckpt "$ck" --tokens 8 --windows 2 --json "${COMMON[@]}" >"$dir/lipschitz.json" || lrc=$?
    echo "$lrc" >"$dir/lipschitz.exit"
    local itest=test
    [ "$split" = "0.9,0.1,0" ] && itest=valid
    "$LIPT" invert --ckpt "$ck" --split "$itest" --windows 10 --max-iter 1000 --json "${COMMON[@]}" \
      >"$dir/invert.json" || true
  fi
  local cmd="scripts/converged.sh${PRECISION:+ --precision $PRECISION} $name"
  python3 - "$dir" "$model" "$corpus" "$cmd" "$CSV" <<'PY'
import csv, fcntl, json, os, sys, tempfile
d, model, corpus, cmd, out = sys.argv[1:6]
def load(p):
    try:
        with open(os.path.join(d, p)) as f:
            return json.load(f)
    except (OSError, ValueError):
        return {}
ev, te, ts = load("eval_valid.json"), load("eval_test.json"), load("eval_test_sliding.json")
cfg = {}
with open(os.path.join(d, "run.cfg")) as f:
    for line in f:
        line = line.split("#", 1)[0].strip()
        if "=" in line:
            k, v = (s.strip() for s in line.split("=", 1))
            cfg[k.replace("-", "_")] = v
# elapsed_s counts from the start of each training process: a drop marks a resume, so the wall time is the sum
# of each segment's last value
wall, seg = 0.0, 0.0
with open(os.path.join(d, "metrics.jsonl")) as f:
    for line in f:
        try:
            r = json.loads(line)
        except ValueError:
            continue
        if "elapsed_s" not in r:
            continue
        e = float(r["elapsed_s"])
        if e < seg:
            wall += seg
        seg = e
wall += seg
ck = ev.get("ckpt", "")
step = ev.get("step")
batch, seq = int(cfg.get("batch", 0)), int(cfg.get("seq_len", 0))
head = ts if ts else ev
row = {
    "model": model, "corpus": corpus, "params": ev.get("parameters", ""),
    "symbols_seen": step * batch * seq if step is not None else "",
    "valid_bpc": "%.4f" % ev["bpc"] if "bpc" in ev else "",
    "test_bpc": "%.4f" % te["bpc"] if "bpc" in te else "",
    "test_bpc_sliding": "%.4f" % ts["bpc"] if "bpc" in ts else "",
    "valid_loss_nats": "%.4f" % ev["nll"] if "nll" in ev else "",
    "accuracy": "%.4f" % head["accuracy"] if "accuracy" in head else "",
    "precision": cfg.get("precision", "float32"), "wall_s": "%.0f" % wall, "command": cmd,
}
res = dict(row, step=step, ckpt=ck, lipschitz_exit=None, inverted=None)
try:
    res["lipschitz_exit"] = int(open(os.path.join(d, "lipschitz.exit")).read())
except (OSError, ValueError):
    pass
inv = load("invert.json")
if inv:
    ws = inv.get("windows", [])
    res["inverted"] = "%d/%d" % (sum(1 for w in ws if w.get("exact")), len(ws))
with open(os.path.join(d, "result.json"), "w") as f:
    json.dump(res, f, indent=1)
print(json.dumps(res))
if out:
    # read, add and replace under one lock: two runs finishing together would otherwise each write the rows they read,
    # and the later replace would drop the other's row
    with open(out + ".lock", "a") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        cols = list(row)
        rows = []
        if os.path.exists(out):
            with open(out, newline="") as f:
                rows = [r for r in csv.DictReader(f) if r.get("command") != cmd]
        rows.append(row)
        fd, tmp = tempfile.mkstemp(dir=os.path.dirname(os.path.abspath(out)), prefix=".converged.", suffix=".tmp")
        with os.fdopen(fd, "w", newline="") as f:
            w = csv.DictWriter(f, fieldnames=cols)
            w.writeheader()
            w.writerows(rows)
        os.chmod(tmp, 0o644)
        os.replace(tmp, out)
PY
}

for n in "${NAMES[@]}"; do run_one "$n"; done
