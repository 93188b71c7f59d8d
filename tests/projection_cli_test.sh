#!/usr/bin/env bash
# weight_projection and certified coupling end to end (models/README.md):
#   - lipt train with weight_projection = 1 and 2 (the probe configs at a small size, a large rate so that the weights
#     leave their budget): run.cfg keeps the key, and lipt lipschitz on the checkpoint exits 0 with every factor
#     >= 1 - 1e-5 (the weights at their budget) while the same run without it has a factor below 0.9;
#   - coupling = 1 with the invertible model's certified branches: lipt lipschitz exits 0 with the bi-Lipschitz bounds
#     (1 + L per half-block, the stack's product), and lipt invert recovers the windows exactly in at most 2
#     iterations per map (bit for bit on coupling_grid's grid).
# Usage: projection_cli_test.sh LIPT_BINARY
set -uo pipefail
. "$(dirname "$0")/util/e2e.sh" projection_cli "${1:-}"
export LIPT_THREADS=2
e2e_corpus "$TMP/corpus.txt"
SMALL=(--d_model 32 --d_ff 64 --n_layers 2 --n_heads 2 --seq_len 16 --batch 4)
COMMON=(--data "$TMP/corpus.txt" --eval-every 0 --final-eval none --save-every 0 --save-minutes 0 --quiet --lr 3e-2
  --warmup 0 --steps 15)
LIP=(--data "$TMP/corpus.txt" --tokens 4 --windows 1 --json)

smallest_factor() { # lipschitz.json -> the smallest attention or ffn factor (factor2: W2's)
  python3 -c 'import json,sys; d=json.load(open(sys.argv[1])); print(min(min(b["factor"], b["factor2"] if b["factor2"] is not None else 1) for b in d["branches"]))' "$1"
}

for p in 0 1 2; do
  cfg="$REPO/models/ablation/j-f-projected.cfg"
  [ $p = 2 ] && cfg="$REPO/models/ablation/j2-f-projected-qkvo.cfg"
  "$LIPT" train --config "$cfg" --weight_projection $p "${SMALL[@]}" "${COMMON[@]}" --out "$TMP/p$p" 2>"$TMP/err" ||
    { fail "weight_projection = $p: training failed: $(head -c 400 "$TMP/err")"; continue; }
  if [ $p = 0 ]; then grep -q weight_projection "$TMP/p$p/run.cfg" && fail "run.cfg holds weight_projection = 0"
  else grep -q "^weight_projection = $p$" "$TMP/p$p/run.cfg" || fail "run.cfg lacks weight_projection = $p"; fi
  "$LIPT" lipschitz --ckpt "$TMP/p$p/last.ckpt" "${LIP[@]}" >"$TMP/p$p.json" 2>"$TMP/err"
  rc=$?
  f=$(smallest_factor "$TMP/p$p.json")
  if [ $p = 0 ]; then
    if python3 -c "import sys; sys.exit(0 if $f < 0.9 else 1)"; then pass "weight_projection = 0: smallest factor $f (over budget)"
    else fail "the control's weights stayed inside the budget (smallest factor $f): the test cannot fail"; fi
  elif [ $rc -eq 0 ] && python3 -c "import sys; sys.exit(0 if $f >= 1 - 1e-5 else 1)"; then
    pass "weight_projection = $p: lipschitz exit 0, smallest factor $f"
  else fail "weight_projection = $p: lipschitz exit $rc, smallest factor $f"; fi
done

for grid in 0 16; do
  d="$TMP/k$grid"
  "$LIPT" train --config "$REPO/models/ablation/f-clipdp-rel-maxmin.cfg" --coupling 1 --coupling_grid $grid "${SMALL[@]}" \
    "${COMMON[@]}" --out "$d" 2>"$TMP/err" || { fail "certified coupling: training failed: $(head -c 400 "$TMP/err")"; continue; }
  "$LIPT" lipschitz --ckpt "$d/last.ckpt" "${LIP[@]}" >"$d.json" 2>"$TMP/err"
  rc=$?
  if [ $rc -eq 0 ] && python3 - "$d.json" <<'PY'; then pass "certified coupling (grid $grid): lipschitz exit 0, $(cat "$d.bounds")"
import json, math, sys
d = json.load(open(sys.argv[1]))
certs = [b["certificate"] for b in d["branches"]]
half, fwd, inv = d["bi_lipschitz_half_block"], d["bi_lipschitz_forward"], d["bi_lipschitz_inverse"]
prod = math.prod(1 + c for c in certs)
ok = d["certified"] and abs(half - (1 + max(certs))) < 1e-8 and abs(fwd - prod) <= 1e-8 * prod and inv == fwd  # JSON: 9 digits
open(sys.argv[1][:-5] + ".bounds", "w").write(f"half-block <= {half:.6f}, stack <= {fwd:.4f}, inverse <= {inv:.4f}")
sys.exit(0 if ok else 1)
PY
  else fail "certified coupling (grid $grid): lipschitz exit $rc: $(head -c 600 "$d.json") $(head -c 300 "$TMP/err")"; fi
  "$LIPT" invert --ckpt "$d/last.ckpt" --data "$TMP/corpus.txt" --windows 2 --json >"$d.inv" 2>"$TMP/err"
  if python3 - "$d.inv" "$grid" <<'PY'; then pass "certified coupling (grid $grid): inverted exactly, <= 2 iterations per map"
import json, sys
text = open(sys.argv[1]).read()
d = json.loads(text)
wins = d["windows"] if "windows" in d else [d]
ok = all(w["exact"] and all(m["iters"] <= 2 for m in w["maps"]) for w in wins)
if sys.argv[2] != "0":
    ok = ok and all(w["max_abs_input_err"] == 0 for w in wins)
sys.exit(0 if ok else 1)
PY
  else fail "certified coupling (grid $grid): $(head -c 600 "$d.inv") $(head -c 300 "$TMP/err")"; fi
done

e2e_done
