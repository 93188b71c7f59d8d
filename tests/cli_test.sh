#!/usr/bin/env bash
# End-to-end tests of the lipt binary: a short train -> eval -> invert -> sample run on the tiny config,
# resume equality, SIGINT save, and every corrupt-checkpoint and bad-input case: each must give a one-line
# error and a non-zero exit, never a crash. Usage: cli_test.sh LIPT_BINARY
set -u
. "$(dirname "$0")/util/e2e.sh" cli "${1:-}"

# Corpus: PTB from ../shared/data when present, else a synthetic text (the test then says so).
SHARED=${LIPT_SHARED_DATA:-$(dirname "$0")/../../shared/data}
if [ -f "$SHARED/ptb/ptb.char.train.txt" ]; then
  DATA=ptb
  export LIPT_DATA="$SHARED"
else
  echo "note: ../shared/data/ptb absent: using a synthetic corpus"
  python3 -c 'import random; r=random.Random(0); print("\n".join(" ".join(r.choice(["the","cat","sat","on","a","mat","dog"]) for _ in range(12)) for _ in range(4000)))' > "$TMP/synth.txt" 2>/dev/null \
    || for i in $(seq 1 4000); do echo "the cat sat on the mat and the dog sat on a log $i"; done > "$TMP/synth.txt"
  DATA="$TMP/synth.txt"
fi
CFG="$(dirname "$0")/../models/tiny.cfg"
COMMON=(--config "$CFG" --data "$DATA" --batch 4 --eval-symbols 2000 --final-eval none --log-every 1 --quiet --threads 1)

# expect_error NAME CMD...: non-zero exit, exactly one line on stderr, no crash (exit < 128), nothing on stdout.
expect_error() {
  local name=$1; shift
  "$@" >"$TMP/out" 2>"$TMP/err"
  local rc=$?
  local lines
  lines=$(wc -l <"$TMP/err")
  if [ $rc -eq 0 ]; then fail "$name: exit 0"; return; fi
  if [ $rc -ge 128 ]; then fail "$name: crashed (exit $rc): $(head -c 300 "$TMP/err")"; return; fi
  if [ "$lines" -ne 1 ]; then fail "$name: $lines lines on stderr: $(head -c 400 "$TMP/err")"; return; fi
  pass "$name: exit $rc: $(cat "$TMP/err")"
}

# ---- train -> eval -> invert -> sample
if "$LIPT" train "${COMMON[@]}" --out "$TMP/run" --steps 40 --eval-every 20 --dropout 0.1; then pass "train"; else fail "train"; fi
[ -f "$TMP/run/last.ckpt" ] && [ -f "$TMP/run/best.ckpt" ] && [ -s "$TMP/run/metrics.jsonl" ] && pass "run files" || fail "run files"
out=$("$LIPT" eval --ckpt "$TMP/run/last.ckpt" --split test --max-symbols 3000 --json --quiet)
echo "$out" | grep -q '"bpc":[0-9]' && pass "eval --json: $out" || fail "eval --json: $out"
# next-character accuracy: a fraction in [0, 1] in --json, a line of its own in the text report
acc=$(echo "$out" | sed -n 's/.*"accuracy":\([0-9.e+-]*\).*/\1/p')
if [ -n "$acc" ] && awk -v a="$acc" 'BEGIN { exit !(a >= 0 && a <= 1) }' &&
   "$LIPT" eval --ckpt "$TMP/run/last.ckpt" --split test --max-symbols 3000 --quiet |
     grep -q "^accuracy $(printf '%.4f' "$acc") (next-character, argmax; [0-9]* of 3000 symbols)$"; then
  pass "eval: accuracy $acc in [0, 1], the same in the text report"
else
  fail "eval accuracy: '$acc' in $out"
fi
out=$("$LIPT" invert --ckpt "$TMP/run/last.ckpt" --data "$DATA" --split test --windows 2 --json)
echo "$out" | grep -q '"all_exact":true' && pass "invert recovers 2 test windows exactly" || fail "invert: $out"
if "$LIPT" sample --help >/dev/null 2>&1; then
  out=$("$LIPT" sample --ckpt "$TMP/run/last.ckpt" --length 40 --seed 1 --json 2>/dev/null)
  echo "$out" | grep -q '"text"' && pass "sample --json" || fail "sample: $out"
fi
out=$("$LIPT" lipschitz --ckpt "$TMP/run/last.ckpt" --data "$DATA" --tokens 4 --windows 1 --json)
rc=$?
[ $rc -eq 0 ] && pass "lipschitz: exit 0 for a certified invertible model" || fail "lipschitz: exit $rc for a certified invertible model"
if ! command -v python3 >/dev/null; then
  echo "$out" | grep -q '"branches"' && pass "lipschitz --json (no python3 to compare bounds)" || fail "lipschitz: $out"
elif echo "$out" | python3 -c 'import json,sys; j=json.load(sys.stdin); b=j["branches"]; sys.exit(0 if j["certified"] and all(x["measured"] <= x["certificate_tokens"] < 1 for x in b) else 1)'; then
  pass "lipschitz: every branch certified < 1 and every measured Jacobian norm below its certificate"
else
  fail "lipschitz: $out"
fi
# the invertible model's JSON: the attention's bounds in its certifying norm at seq_len and at --tokens, no ∞/2 pair
if command -v python3 >/dev/null; then
  echo "$out" | python3 -c 'import json,sys; a=json.load(sys.stdin)["branches"][0]
sys.exit(0 if a["ub_seq_len"] > 0 and a["ub_tokens"] > 0 and a["ub_inf"] is None and a["ub_2"] is None else 1)' &&
    pass "lipschitz --json, invertible: ub_seq_len and ub_tokens set, ub_inf and ub_2 null" || fail "lipschitz keys: $out"
fi
# a non-invertible tied-L2 model: no certificate, so exit 0 after the report; its JSON gives the ∞- and 2-norm bounds
# of the attention alone at N = --tokens as ub_inf and ub_2. Which is which shows in how they grow from N = 1 to 4,
# a ratio that does not depend on the weights: ∞-norm 1 + 4√d·W₀(3/e), 2-norm 2·(1 + 4·W₀(3/e)) (d = 32: head width)
if "$LIPT" train "${COMMON[@]}" --attention l2-tied --ffn standard --activation gelu --lip-norm inf --steps 2 \
     --out "$TMP/plain" >/dev/null 2>&1; then
  for n in 1 4; do
    "$LIPT" lipschitz --ckpt "$TMP/plain/last.ckpt" --data "$DATA" --tokens $n --windows 1 --json >"$TMP/plain$n.json"
    rc=$?
    [ $rc -eq 0 ] && pass "lipschitz --tokens $n: exit 0 for a non-invertible model" ||
      fail "lipschitz --tokens $n: exit $rc for a non-invertible model: $(head -c 300 "$TMP/plain$n.json")"
  done
  if command -v python3 >/dev/null && python3 - "$TMP/plain1.json" "$TMP/plain4.json" <<'PY'
import json, math, sys
j1, j4 = (json.load(open(p)) for p in sys.argv[1:3])
w = 1.0
for _ in range(50): w -= (w * math.exp(w) - 3 / math.e) / (math.exp(w) * (1 + w))   # Newton: W0(3/e)
ok = "certified" not in j4
for b1, b4 in zip(j1["branches"], j4["branches"]):
    if b1["branch"] == "ffn":
        ok = ok and b4["ub_inf"] is None and b4["ub_2"] is None
        continue
    ok = ok and b4["ub_seq_len"] is None and b4["ub_tokens"] is None
    ok = ok and math.isclose(b4["ub_inf"] / b1["ub_inf"], 1 + 4 * math.sqrt(32) * w, rel_tol=1e-4)
    ok = ok and math.isclose(b4["ub_2"] / b1["ub_2"], 2 * (1 + 4 * w), rel_tol=1e-4)
sys.exit(0 if ok else 1)
PY
  then pass "lipschitz --json, tied L2: ub_inf is the ∞-norm bound, ub_2 the 2-norm bound, no certificate fields"
  elif command -v python3 >/dev/null; then fail "lipschitz --json, tied L2: $(cat "$TMP/plain4.json")"; fi
else
  fail "train a tied-L2 model for lipschitz"
fi
out=$("$LIPT" bench --config "$CFG" --runs 1 --warmup 0 --steps-per-run 1 --sample-tokens 4 --gemm-size 64 --threads 1 --json 2>/dev/null)
echo "$out" | grep -q '"tokens_per_s"' && pass "bench --json" || fail "bench: $out"
if "$LIPT" experiment invertibility --n 6 --d 4 --heads 2 --out "$TMP/exp" --threads 1 >"$TMP/inv.txt" 2>&1 &&
   "$LIPT" experiment tightness --n-list 2,5 --starts 2 --steps 5 --out "$TMP/exp" --threads 1 >"$TMP/tight.txt" 2>&1 &&
   [ -s "$TMP/exp/invertibility_n6_d4_h2.svg" ] && ls "$TMP"/exp/tightness_*.csv >/dev/null 2>&1; then
  pass "experiments (small scale) write their CSV and SVG"
  # the invertibility figure: one panel per (attention, c) — 2 x 3 by default — each with its own short legend
  npanels=$(grep -c '<clipPath id="plotarea' "$TMP/exp/invertibility_n6_d4_h2.svg")
  [ "$npanels" -eq 6 ] && pass "invertibility figure: 6 panels" || fail "invertibility figure: $npanels panels, not 6"
  # "converged" only for settings that reached x* (status column 7, reached_at column 9 of the summary)
  bad=$(awk -F, 'NR > 1 && $7 == "converged" && $9 < 0' "$TMP/exp/invertibility_n6_d4_h2_summary.csv" | wc -l)
  [ "$bad" -eq 0 ] && pass "invertibility summary: no unreconstructed setting called converged" ||
    fail "invertibility summary: $bad unreconstructed settings called converged"
else
  fail "experiments: $(tail -c 300 "$TMP/inv.txt" "$TMP/tight.txt")"
fi
"$LIPT" export --ckpt "$TMP/run/last.ckpt" --out "$TMP/w.safetensors" 2>/dev/null && [ -s "$TMP/w.safetensors" ] && pass "export" || fail "export"
# an empty validation/test split (fractions 1,0,0) trains and says it is not evaluated, exit 0
for i in $(seq 1 300); do echo "the cat sat on the mat $i"; done > "$TMP/small.txt"
if "$LIPT" train --config "$CFG" --data "$TMP/small.txt" --data-split 1,0,0 --steps 3 --batch 2 --threads 1 --out "$TMP/empty" \
     2>"$TMP/empty.err" >/dev/null && grep -q "validation split is empty" "$TMP/empty.err" && [ -f "$TMP/empty/last.ckpt" ]; then
  pass "empty validation and test splits: trained, not evaluated, exit 0"
else
  fail "empty splits: $(tail -c 300 "$TMP/empty.err")"
fi
# the training-grid experiments at toy scale: CSV + SVG, resumable (a second call skips finished cells)
GRID=(--d-model 16 --heads 2 --d-ff 32 --seq-len 16 --batch 2 --threads 1 --data "$DATA" --models "$(dirname "$0")/../models" --out "$TMP/exp")
if "$LIPT" experiment depth "${GRID[@]}" --variants dp,contractive --depths 1,2 --steps 4 --warmup 1 --valid-symbols 500 \
     --runs "$TMP/grid" >"$TMP/depth.txt" 2>&1 && [ "$(wc -l < "$TMP/exp/depth.csv")" -eq 5 ] && [ -s "$TMP/exp/depth.svg" ] &&
   "$LIPT" experiment depth "${GRID[@]}" --variants dp,contractive --depths 1,2 --steps 4 --warmup 1 --valid-symbols 500 \
     --runs "$TMP/grid" 2>&1 | grep -c "skipped" | grep -qx 4; then
  pass "experiment depth: 4 cells in depth.csv and depth.svg; a second run skips them"
else
  fail "experiment depth: $(tail -c 400 "$TMP/depth.txt")"
fi
if "$LIPT" experiment stability "${GRID[@]}" --variants dp,l2-tied --depths 1,2 --steps 6 --runs "$TMP/stab" >"$TMP/stab.txt" 2>&1 &&
   [ "$(wc -l < "$TMP/exp/stability.csv")" -eq 5 ] && [ -s "$TMP/exp/stability.svg" ] && [ -s "$TMP/exp/stability_dp.svg" ] &&
   [ "$(wc -l < "$TMP/exp/stability_curves.csv")" -eq 25 ]; then
  pass "experiment stability: 4 runs, their curves (24 points) and plots"
else
  fail "experiment stability: $(tail -c 400 "$TMP/stab.txt")"
fi
# a grid's CSV belongs to its settings: another --steps into the same folder is refused, not mixed with the old cells
expect_error "experiment stability with other settings into the same --out" "$LIPT" experiment stability "${GRID[@]}" \
  --variants dp --depths 1 --steps 7 --runs "$TMP/stab"
if "$LIPT" experiment robustness --ckpt "$TMP/run/last.ckpt,$(echo "$TMP"/grid/dp-L1-*/last.ckpt)" --data "$DATA" --n 4 --scales 1,10 \
     --perturbations 4 --out "$TMP/exp" --threads 1 >"$TMP/rob.txt" 2>&1 && [ "$(wc -l < "$TMP/exp/robustness.csv")" -eq 5 ] &&
   [ -s "$TMP/exp/robustness.svg" ] &&
   "$LIPT" experiment invertibility --inputs ptb --ckpt "$TMP/run/last.ckpt" --data "$DATA" --n 6 --heads 2 --dp-factor ref \
     --out "$TMP/exp" --threads 1 >"$TMP/invp.txt" 2>&1 && [ -s "$TMP/exp/invertibility_n6_d64_h2_ptb.svg" ]; then
  pass "experiment robustness and invertibility --inputs ptb on trained checkpoints"
else
  fail "experiment robustness / invertibility --inputs ptb: $(tail -c 400 "$TMP/rob.txt" "$TMP/invp.txt" 2>/dev/null)"
fi
# without --data an experiment on a checkpoint reads the corpus that checkpoint was trained on (and says so)
if "$LIPT" experiment invertibility --inputs ptb --ckpt "$TMP/run/last.ckpt" --n 6 --heads 2 --out "$TMP/exp" --threads 1 \
     >"$TMP/invo.txt" 2>&1 && grep -q "the run's own corpus" "$TMP/invo.txt"; then
  pass "experiment invertibility --inputs ptb defaults to the checkpoint's own corpus"
else
  fail "experiment invertibility without --data: $(tail -c 400 "$TMP/invo.txt")"
fi

# ---- resume: 20 + 20 steps give the same loss curve as 40 (dropout on, same threads)
"$LIPT" train "${COMMON[@]}" --out "$TMP/half" --steps 20 --eval-every 10 --dropout 0.1 &&
"$LIPT" train --out "$TMP/half" --steps 40 --resume --quiet --threads 1
# (the line that marks the resume is the only other difference)
if diff <(grep -v '"eval"' "$TMP/run/metrics.jsonl" | sed 's/,"tok_per_s.*//') \
        <(grep -v -e '"eval"' -e '"event":"resume"' "$TMP/half/metrics.jsonl" | sed 's/,"tok_per_s.*//') >/dev/null; then
  pass "resume gives the identical loss curve"
else
  fail "resume loss curve differs"
fi

# ---- --recompute: the same run bit for bit (losses, gradient norms and validation BPC), less memory
"$LIPT" train "${COMMON[@]}" --out "$TMP/rc" --steps 40 --eval-every 20 --dropout 0.1 --recompute
nt() { sed '/"event":"resume"/d; s/,"tok_per_s.*//; s/,"eval_s":[0-9.]*//' "$1"; } # without the timings and resume marks
if diff <(nt "$TMP/run/metrics.jsonl") <(nt "$TMP/rc/metrics.jsonl") >/dev/null &&
   [ "$(grep -c '"loss"' "$TMP/rc/metrics.jsonl")" -eq 40 ]; then
  pass "train --recompute gives the identical metrics"
else
  fail "train --recompute metrics differ: $(diff <(nt "$TMP/run/metrics.jsonl") <(nt "$TMP/rc/metrics.jsonl") | head -4)"
fi

# ---- --optimizer muon: 3 steps, then --resume to 6, give the loss curve of 6 steps in one go (the momenta are in the
# checkpoint; dropout on), which differs from AdamW's; run.cfg records the optimizer; --resume refuses the other one
"$LIPT" train "${COMMON[@]}" --out "$TMP/mu" --steps 6 --eval-every 3 --dropout 0.1 --optimizer muon &&
  "$LIPT" train "${COMMON[@]}" --out "$TMP/muh" --steps 3 --eval-every 3 --dropout 0.1 --optimizer muon &&
  "$LIPT" train --out "$TMP/muh" --steps 6 --resume --quiet --threads 1 &&
  "$LIPT" train "${COMMON[@]}" --out "$TMP/mua" --steps 6 --eval-every 3 --dropout 0.1
if [ "$(grep -c '"loss"' "$TMP/mu/metrics.jsonl" 2>/dev/null)" = 6 ] &&
   diff <(nt "$TMP/mu/metrics.jsonl") <(nt "$TMP/muh/metrics.jsonl") >/dev/null &&
   ! diff <(nt "$TMP/mu/metrics.jsonl") <(nt "$TMP/mua/metrics.jsonl") >/dev/null &&
   grep -qx "optimizer = muon" "$TMP/mu/run.cfg"; then
  pass "train --optimizer muon: --resume gives the identical loss curve, unlike AdamW's; run.cfg records it"
else
  fail "train --optimizer muon: $(diff <(nt "$TMP/mu/metrics.jsonl") <(nt "$TMP/muh/metrics.jsonl") 2>&1 | head -4)"
fi
expect_error "--resume of a Muon run with --optimizer adamw" "$LIPT" train --out "$TMP/muh" --resume --steps 8 \
  --optimizer adamw --quiet
expect_error "--optimizer sgd" "$LIPT" train "${COMMON[@]}" --out "$TMP/sgd" --steps 2 --optimizer sgd
expect_error "--muon-lr -1" "$LIPT" train "${COMMON[@]}" --out "$TMP/mlr" --steps 2 --optimizer muon --muon-lr -1

# ---- SIGINT saves and exits cleanly
"$LIPT" train "${COMMON[@]}" --out "$TMP/sig" --steps 1000000 --eval-every 0 2>"$TMP/sig.err" &
pid=$!
sleep 2
expect_error "a second trainer on the same run directory" "$LIPT" train "${COMMON[@]}" --out "$TMP/sig" --steps 10
kill -INT $pid
wait $pid
rc=$?
if [ $rc -eq 130 ] && grep -q "interrupted at step" "$TMP/sig.err" && "$LIPT" eval --ckpt "$TMP/sig/last.ckpt" --max-symbols 500 --quiet >/dev/null; then
  pass "SIGINT: saved a loadable checkpoint, exit 130"
else
  fail "SIGINT: rc $rc: $(cat "$TMP/sig.err")"
fi

# ---- divergence: resumed with an absurd learning rate, training stops with a clear message and the
# last good checkpoint (step 40) stays intact and loadable
cp -r "$TMP/run" "$TMP/div"
"$LIPT" train --out "$TMP/div" --resume --steps 80 --lr 1e30 --warmup 0 --clip 0 --schedule constant --quiet 2>"$TMP/div.err"
rc=$?
if [ $rc -eq 1 ] && grep -q "diverged.*intact.*step 40" "$TMP/div.err" && cmp -s "$TMP/div/last.ckpt" "$TMP/run/last.ckpt"; then
  pass "divergence detected, checkpoint intact: $(head -c 200 "$TMP/div.err")"
else
  fail "divergence: rc $rc: $(tail -c 300 "$TMP/div.err")"
fi

# ---- early stopping (--patience): at lr 0 the validation BPC cannot improve, so patience 1 stops the run at its
# second evaluation (step 20 of 40), says so, records it in metrics.jsonl and leaves last.ckpt there
FLAT=(--steps 40 --eval-every 10 --lr 0 --warmup 0 --schedule constant)
"$LIPT" train "${COMMON[@]}" "${FLAT[@]}" --out "$TMP/es" --patience 1 2>"$TMP/es.err"
rc=$?
if [ $rc -eq 0 ] &&
   grep -q "^early stop at step 20: no validation improvement in 1 evaluation; best BPC [0-9.]* at step 10 (.*best.ckpt)$" "$TMP/es.err" &&
   grep -q '^{"step":20,"event":"early_stop","patience":1,"best_step":10,' "$TMP/es/metrics.jsonl" &&
   [ "$(grep -c '"loss"' "$TMP/es/metrics.jsonl")" -eq 20 ] &&
   "$LIPT" info --ckpt "$TMP/es/last.ckpt" --json | grep -q '"step":20,'; then
  pass "--patience 1 stops at step 20 of 40: $(cat "$TMP/es.err")"
else
  fail "--patience 1: rc $rc: $(cat "$TMP/es.err") $(tail -n 2 "$TMP/es/metrics.jsonl")"
fi
"$LIPT" train "${COMMON[@]}" "${FLAT[@]}" --out "$TMP/es0" --patience 0 2>"$TMP/es0.err"
rc=$?
if [ $rc -eq 0 ] && ! grep -q "early stop" "$TMP/es0.err" && ! grep -q '"event"' "$TMP/es0/metrics.jsonl" &&
   [ "$(grep -c '"loss"' "$TMP/es0/metrics.jsonl")" -eq 40 ]; then
  pass "--patience 0: the same run goes on to step 40"
else
  fail "--patience 0: rc $rc: $(cat "$TMP/es0.err")"
fi
# the run's run.cfg holds patience (a training key): lipt train --config RUN/run.cfg repeats the early stop
if grep -qx "patience = 1" "$TMP/es/run.cfg" && grep -qx "final-from = last" "$TMP/es/run.cfg" &&
   "$LIPT" train --config "$TMP/es/run.cfg" --out "$TMP/es_cfg" --threads 1 2>"$TMP/es_cfg.err" >/dev/null &&
   grep -q "^early stop at step 20: " "$TMP/es_cfg.err"; then
  pass "patience and final-from in run.cfg; --config RUN/run.cfg stops at step 20 again"
else
  fail "patience in run.cfg: $(grep -e patience -e final-from "$TMP/es/run.cfg") $(tail -c 300 "$TMP/es_cfg.err")"
fi
# the patience count survives --resume: 20 steps, then resumed to 40, stops at step 30 exactly as one run of 40 does;
# resuming the stopped run stops again at once
"$LIPT" train "${COMMON[@]}" "${FLAT[@]}" --out "$TMP/es2" --patience 2 2>/dev/null
"$LIPT" train "${COMMON[@]}" "${FLAT[@]}" --out "$TMP/es2h" --patience 2 --steps 20 2>/dev/null &&
  "$LIPT" train --out "$TMP/es2h" --resume --steps 40 --quiet --threads 1 2>"$TMP/es2h.err"
if grep -q "^early stop at step 30: no validation improvement in 2 evaluations" "$TMP/es2h.err" &&
   diff <(nt "$TMP/es2/metrics.jsonl") <(nt "$TMP/es2h/metrics.jsonl") >/dev/null &&
   "$LIPT" train --out "$TMP/es2h" --resume --quiet --threads 1 2>"$TMP/es2r.err" &&
   grep -q "^early stop at step 30 (reached before this --resume)" "$TMP/es2r.err" &&
   [ "$(grep -c '"loss"' "$TMP/es2h/metrics.jsonl")" -eq 30 ]; then
  pass "--patience survives --resume: the same stop at step 30, and a resumed stopped run stops at once"
else
  fail "--patience and --resume: $(cat "$TMP/es2h.err" "$TMP/es2r.err" 2>/dev/null) $(diff <(nt "$TMP/es2/metrics.jsonl") <(nt "$TMP/es2h/metrics.jsonl") | head -4)"
fi
# --final-from best: a run resumed at a learning rate that ruins it stops early (step 60), and its final evaluation
# scores best.ckpt (the step of its best evaluation before), the number lipt eval gives for best.ckpt (a small corpus:
# the final evaluation reads the whole validation split)
"$LIPT" train "${COMMON[@]}" --data "$TMP/small.txt" --out "$TMP/fb" --steps 40 --eval-every 20 2>/dev/null
fbj=$("$LIPT" train --out "$TMP/fb" --resume --steps 80 --lr 1 --warmup 0 --schedule constant --patience 1 \
  --final-from best --final-eval valid --json --quiet --threads 1 2>"$TMP/fb.err")
# at the run's batch (4): a sum over another grouping of windows can differ in the last printed digit (seen after the
# certificate factors' outward rounding moved the weights by an ulp)
fbe=$("$LIPT" eval --ckpt "$TMP/fb/best.ckpt" --split valid --batch 4 --json --quiet --threads 1)
v1=$(echo "$fbj" | sed -n 's/.*"valid_bpc":\([0-9.e+-]*\).*/\1/p')
v2=$(echo "$fbe" | sed -n 's/.*"bpc":\([0-9.e+-]*\).*/\1/p')
bs=$(echo "$fbj" | sed -n 's/.*"best_step":\([0-9-]*\).*/\1/p')
if [ -n "$bs" ] && [ "$bs" -gt 0 ] && [ "$bs" -lt 60 ] && [ -n "$v1" ] && [ "$v1" = "$v2" ] &&
   echo "$fbj" | grep -q "\"steps\":60,.*\"final_from\":\"best\",\"final_weights_step\":$bs,\"early_stop\":true" &&
   echo "$fbe" | grep -q "\"step\":$bs," &&
   grep -q "\"eval\":\"valid_full\",.*\"weights\":\"best\",\"weights_step\":$bs," "$TMP/fb/metrics.jsonl"; then
  pass "--final-from best: stopped at step 60, the final valid BPC $v1 is best.ckpt's (step $bs)"
else
  fail "--final-from best: '$v1' vs '$v2': $fbj $(cat "$TMP/fb.err")"
fi
expect_error "--final-from bogus" "$LIPT" train "${COMMON[@]}" --out "$TMP/ffb" --final-from middle
expect_error "--patience -1" "$LIPT" train "${COMMON[@]}" --out "$TMP/pneg" --patience -1

# ---- corrupt checkpoints
CK="$TMP/run/last.ckpt"
: >"$TMP/empty.ckpt"
head -c 200 "$CK" >"$TMP/trunc1.ckpt"
size=$(stat -c %s "$CK")
head -c $((size - 7)) "$CK" >"$TMP/trunc2.ckpt"
cp "$CK" "$TMP/flip.ckpt"
printf '\x55' | dd of="$TMP/flip.ckpt" bs=1 seek=$((size / 2)) conv=notrunc 2>/dev/null
cp "$CK" "$TMP/ver.ckpt"
printf '\x07' | dd of="$TMP/ver.ckpt" bs=1 seek=8 conv=notrunc 2>/dev/null
echo "this is not a checkpoint" >"$TMP/foreign.ckpt"
for f in empty trunc1 trunc2 flip ver foreign; do
  expect_error "eval of $f checkpoint" "$LIPT" eval --ckpt "$TMP/$f.ckpt" --quiet
  expect_error "resume from $f checkpoint" "$LIPT" train --out "$TMP/r_$f" --resume --ckpt "$TMP/$f.ckpt" --quiet
done
expect_error "missing checkpoint" "$LIPT" eval --ckpt "$TMP/nope.ckpt"
expect_error "directory as checkpoint" "$LIPT" invert --ckpt "$TMP" --text abc

# ---- bad flags and values
expect_error "unknown command" "$LIPT" frobnicate
expect_error "unknown flag" "$LIPT" eval --frob 1
expect_error "non-integer --steps" "$LIPT" train --steps ten
expect_error "negative --batch" "$LIPT" train --batch -3 --quiet
expect_error "bad config value" "$LIPT" train --attention bogus --quiet
expect_error "bad config key" "$LIPT" train --d_modle 64 --quiet
expect_error "heads do not divide" "$LIPT" train --config "$CFG" --n_heads 3 --data "$DATA" --quiet
expect_error "missing config file" "$LIPT" train --config "$TMP/none.cfg" --quiet
printf 'd_model = 64\nn_heads = two\n' >"$TMP/bad.cfg"
expect_error "bad config line" "$LIPT" train --config "$TMP/bad.cfg" --quiet
expect_error "missing corpus" "$LIPT" train --data "$TMP/none.txt" --quiet
expect_error "bad split" "$LIPT" eval --ckpt "$CK" --split banana
expect_error "window too long" "$LIPT" eval --ckpt "$CK" --window 100000 --quiet
expect_error "eval without --ckpt" "$LIPT" eval
expect_error "unseen symbol in --text" "$LIPT" invert --ckpt "$CK" --text "ABC~~"
expect_error "text too long" "$LIPT" invert --ckpt "$CK" --text "$(printf 'a%.0s' $(seq 1 500))"
expect_error "bad --threads" "$LIPT" eval --ckpt "$CK" --threads 0
expect_error "export without --out" "$LIPT" export --ckpt "$CK"
# hostile paths (issue: reliability II): a FIFO as input never hangs, a device as output is never replaced, an export
# never overwrites its own checkpoint
mkfifo "$TMP/fifo"
expect_error "FIFO as --ckpt" timeout 20 "$LIPT" eval --ckpt "$TMP/fifo"
expect_error "FIFO as --config" timeout 20 "$LIPT" train --config "$TMP/fifo" --out "$TMP/fifo_run" --quiet
expect_error "a folder as --ckpt" "$LIPT" eval --ckpt "$TMP"
expect_error "export over its own checkpoint" "$LIPT" export --ckpt "$CK" --out "$CK"
"$LIPT" eval --ckpt "$CK" --quiet >/dev/null 2>&1 && pass "the checkpoint survived" || fail "export destroyed its checkpoint"
expect_error "export to a FIFO" timeout 20 "$LIPT" export --ckpt "$CK" --out "$TMP/fifo"
[ -p "$TMP/fifo" ] && pass "the FIFO is still a FIFO" || fail "the FIFO was replaced"
ln -s "$TMP/victim" "$TMP/planted.safetensors.tmp" && echo precious > "$TMP/victim"
"$LIPT" export --ckpt "$CK" --out "$TMP/planted.safetensors" 2>/dev/null &&
  [ "$(cat "$TMP/victim")" = precious ] && pass "a planted symlink at the temporary is not written through" ||
  fail "planted symlink: victim is now $(head -c 40 "$TMP/victim")"
# the metrics rewrite of a resume (lines past the checkpoint's step are dropped) never writes through a planted symlink
"$LIPT" train "${COMMON[@]}" --out "$TMP/mr" --steps 4 --log-every 1 --quiet &&
  cp "$TMP/mr/last.ckpt" "$TMP/mr4.ckpt" && "$LIPT" train --out "$TMP/mr" --resume --steps 8 --quiet &&
  cp "$TMP/mr4.ckpt" "$TMP/mr/last.ckpt" && echo precious > "$TMP/victim2" && ln -s "$TMP/victim2" "$TMP/mr/metrics.jsonl.tmp" &&
  "$LIPT" train --out "$TMP/mr" --resume --steps 8 --quiet && [ "$(cat "$TMP/victim2")" = precious ] &&
  [ "$(grep -c '"loss"' "$TMP/mr/metrics.jsonl")" -eq 8 ] &&
  pass "the metrics rewrite on resume ignores a planted symlink and keeps one line per step" ||
  fail "metrics rewrite: victim $(head -c 40 "$TMP/victim2"), $(grep -c '"loss"' "$TMP/mr/metrics.jsonl") lines"
expect_error "a FIFO as --data" timeout 20 "$LIPT" data --data "$TMP/fifo"
expect_error "a model past the size cap" "$LIPT" train --config "$CFG" --data "$DATA" --d_model 65536 --out "$TMP/huge" --quiet
expect_error "an int config value past int range" "$LIPT" train --config "$CFG" --data "$DATA" --power_iters 2147483648 --quiet
expect_error "a float config value that rounds out of range" "$LIPT" train --config "$CFG" --data "$DATA" --c 0.99999999999 --quiet
# ---- --precision: bf16-emulated end to end (train, resume on the identical curve, eval, sample, bench, the config key),
# an unknown value, and bf16 where it cannot run (no oneDNN in the build, or no AVX512_BF16 on the CPU)
"$LIPT" train "${COMMON[@]}" --out "$TMP/emu" --steps 8 --eval-every 4 --precision bf16-emulated &&
  "$LIPT" train "${COMMON[@]}" --out "$TMP/emuh" --steps 4 --eval-every 4 --precision bf16-emulated &&
  "$LIPT" train --out "$TMP/emuh" --steps 8 --resume --quiet --threads 1
if grep -qx "precision = bf16-emulated" "$TMP/emu/run.cfg" && diff <(nt "$TMP/emu/metrics.jsonl") <(nt "$TMP/emuh/metrics.jsonl") >/dev/null &&
   ! diff <(nt "$TMP/emu/metrics.jsonl") <(nt "$TMP/run/metrics.jsonl" | head -"$(wc -l < "$TMP/emu/metrics.jsonl")") >/dev/null; then
  pass "train --precision bf16-emulated: run.cfg records it, --resume keeps it (identical curve), the losses differ from float32's"
else
  fail "train --precision bf16-emulated: $(diff <(nt "$TMP/emu/metrics.jsonl") <(nt "$TMP/emuh/metrics.jsonl") | head -4)"
fi
e1=$("$LIPT" eval --ckpt "$TMP/emu/last.ckpt" --max-symbols 2000 --json --quiet)
e2=$("$LIPT" eval --ckpt "$TMP/emu/last.ckpt" --max-symbols 2000 --json --quiet --precision float32)
s1=$("$LIPT" sample --ckpt "$TMP/emu/last.ckpt" --length 20 --seed 3 --json 2>/dev/null)
b1=$("$LIPT" bench --config "$CFG" --precision bf16-emulated --runs 1 --warmup 0 --steps-per-run 1 --sample-tokens 4       --gemm-size 64 --threads 1 --json 2>/dev/null)
b2=$("$LIPT" bench --config "$CFG" --precision bf16-emulated --runs 1 --warmup 0 --steps-per-run 1 --sample-tokens 4       --gemm-size 64 --threads 1 --skip-sample 2>/dev/null)
if echo "$e1" | grep -q '"precision":"bf16-emulated"' && echo "$e2" | grep -q '"precision":"float32"' &&
   echo "$s1" | grep -q '"precision":"bf16-emulated"' && echo "$b1" | grep -q '"precision":"bf16-emulated"' &&
   echo "$b1" | grep -q '"gemm_precision_gflops":[0-9]' && echo "$b2" | grep -q "bf16-emulated matrix products"; then
  pass "eval, sample and bench report the precision (the checkpoint's by default; --precision float32 overrides)"
else
  fail "precision in reports: $e1 | $e2 | $s1 | $(echo "$b1" | head -c 300) | $(echo "$b2" | head -2)"
fi
# --paired: float32 runs interleaved with the precision's, their medians and the median per-run ratio
b3=$("$LIPT" bench --config "$CFG" --precision bf16-emulated --paired --runs 2 --warmup 0 --steps-per-run 1 \
  --skip-sample --gemm-size 0 --threads 1 --json 2>/dev/null)
if echo "$b3" | grep -q '"paired_float32":{"train":[0-9][0-9.e+-]*,"eval":[0-9][0-9.e+-]*,"train_ratio":[0-9]' &&
   echo "$b1" | grep -q '"paired_float32":{"train":null'; then
  pass "bench --paired reports float32 and the per-run ratio (nulls without it)"
else
  fail "bench --paired: $(echo "$b3" | grep -o '"paired_float32":{[^}]*}') | $(echo "$b1" | grep -o '"paired_float32":{[^}]*}')"
fi
b4=$("$LIPT" bench --config "$CFG" --paired-sgemm --runs 2 --warmup 0 --steps-per-run 1 --skip-sample --skip-eval \
  --gemm-size 64 --threads 1 --json 2>/dev/null)
# the reference is the faster library per run; each library's median beside it (oneDNN's null without it)
if echo "$b4" | grep -qE '"paired_sgemm":\{"sgemm_gflops_median":[0-9][0-9.e+-]*,"sgemm_gflops_median_openblas":[0-9][0-9.e+-]*,"sgemm_gflops_median_onednn":([0-9][0-9.e+-]*|null),"fraction_of_gemm_train":[0-9][0-9.e+-]*,"sgemm_gflops_per_run":\[[0-9][0-9.e+-]*,[0-9]' &&
   echo "$b1" | grep -q '"paired_sgemm":{"sgemm_gflops_median":null'; then
  pass "bench --paired-sgemm: an SGEMM run after each training run, the median per-run fraction"
else
  fail "bench --paired-sgemm: $(echo "$b4" | grep -o '"paired_sgemm":{[^}]*}') | $(echo "$b1" | grep -o '"paired_sgemm":{[^}]*}')"
fi
expect_error "bench --paired at float32" "$LIPT" bench --config "$CFG" --paired --runs 1
grep -q "paired compares a --precision other than float32" "$TMP/err" && pass "bench --paired needs another precision" ||
  fail "bench --paired at float32: $(cat "$TMP/err")"
printf 'precision = bf16-emulated\n' > "$TMP/emu.cfg"
"$LIPT" train --config "$TMP/emu.cfg" --data "$DATA" --steps 1 --batch 2 --seq_len 16 --d_model 16 --n_heads 2 --d_ff 32 \
  --n_layers 1 --out "$TMP/emu_key" --threads 1 --final-eval none --eval-every 0 2>"$TMP/emu_key.err" >/dev/null &&
  grep -q "matrix products in bf16-emulated" "$TMP/emu_key.err" && pass "the config key precision" ||
  fail "config key precision: $(cat "$TMP/emu_key.err")"
expect_error "train --precision fp16" "$LIPT" train "${COMMON[@]}" --out "$TMP/p16" --steps 1 --precision fp16
grep -q "not one of: float32, bf16, bf16-emulated" "$TMP/err" && pass "an unknown precision lists the valid ones" ||
  fail "unknown precision: $(cat "$TMP/err")"
printf 'd_model = 16\nprecision = half\n' > "$TMP/half.cfg"
expect_error "precision = half in a config" "$LIPT" train --config "$TMP/half.cfg" --data "$DATA" --out "$TMP/ph"
grep -q "half.cfg:2: precision = 'half' is not one of: float32, bf16, bf16-emulated" "$TMP/err" &&
  pass "the config key's error names the file, the line and the valid values" || fail "config precision: $(cat "$TMP/err")"
# what bf16 needs here: the message names the missing part; where both are present bf16 must run
usage=$("$LIPT" --help)
if echo "$usage" | grep -q "this build has no oneDNN"; then want="built without oneDNN"
elif echo "$usage" | grep -q "this CPU lacks AVX512_BF16"; then want="AVX512_BF16"
else want=""; fi
if [ -n "$want" ]; then
  for c in "train ${COMMON[*]} --out $TMP/b16 --steps 1" "eval --ckpt $TMP/emu/last.ckpt" "sample --ckpt $TMP/emu/last.ckpt" \
           "bench --config $CFG --runs 1"; do
    # shellcheck disable=SC2086
    expect_error "$c --precision bf16" "$LIPT" $c --precision bf16
    grep -q "$want" "$TMP/err" && pass "bf16 refused, naming: $want" || fail "bf16 error does not name $want: $(cat "$TMP/err")"
  done
  [ ! -e "$TMP/b16" ] && pass "train --precision bf16 stopped before any work (no run folder)" || fail "train bf16 made $TMP/b16"
else
  "$LIPT" train "${COMMON[@]}" --out "$TMP/b16" --steps 2 --precision bf16 && pass "train --precision bf16 (AVX512_BF16 here)" ||
    fail "train --precision bf16 on a CPU with AVX512_BF16"
fi

printf 'steps = -4\n' > "$TMP/negsteps.cfg"
"$LIPT" train --config "$TMP/negsteps.cfg" --data "$DATA" --out "$TMP/neg" --quiet 2>"$TMP/neg.err"
grep -q "from the --config file" "$TMP/neg.err" && pass "a bad value from a config file is not blamed on a flag: $(cat "$TMP/neg.err")" ||
  fail "config value blamed: $(cat "$TMP/neg.err")"
head -c 30000000 /dev/zero | gzip > "$TMP/bomb.gz"
expect_error "a gzip corpus past the decompression cap" env LIPT_MAX_CORPUS_GB=0.01 "$LIPT" data --data "$TMP/bomb.gz"
"$LIPT" eval --ckpt "$TMP/$(printf 'x\033]0;title\007\033[31m')" 2>"$TMP/esc.err"
if grep -q "$(printf '\033')" "$TMP/esc.err"; then fail "a control byte reached the terminal raw"
else pass "control bytes in messages are escaped: $(cat "$TMP/esc.err")"; fi
# one config prologue (src/shell/model_config.c): train and bench read --config and --key value alike, with the same
# message and exit status (2, a usage error) for a bad value in the file, a bad --key value and a missing file
printf 'd_model = 7x\n' > "$TMP/badval.cfg"
for case in "--config $TMP/badval.cfg" "--config $CFG --d_model abc" "--config $TMP/no-such.cfg"; do
  # shellcheck disable=SC2086
  "$LIPT" train $case --data "$DATA" --out "$TMP/prologue" --quiet 2>"$TMP/pt.err"; rt=$?
  # shellcheck disable=SC2086
  "$LIPT" bench $case --runs 1 2>"$TMP/pb.err"; rb=$?
  if [ $rt -eq 2 ] && [ $rb -eq 2 ] && [ "$(sed 's/^lipt train: //' "$TMP/pt.err")" = "$(sed 's/^lipt bench: //' "$TMP/pb.err")" ]; then
    pass "train and bench refuse '$case' alike (exit 2): $(cat "$TMP/pb.err")"
  else
    fail "config prologue differs for '$case': train $rt $(cat "$TMP/pt.err") | bench $rb $(cat "$TMP/pb.err")"
  fi
done
# every list of attention kinds is the variant table's: lipt help config names every kind the config parser accepts
# (its message lists them), and each kind is the attention of one variant of the training grids, whose PTB models exist
kinds=$("$LIPT" train --attention nonsense --data "$DATA" --out "$TMP/kinds" 2>&1 | sed -n 's/.*is not one of: //p' | tr -d ',')
attn_line=$("$LIPT" help config | grep '^  attention ')
variants=$("$LIPT" experiment depth --variants nonsense 2>&1 | sed -n "s/.*unknown variant 'nonsense' (//p" |
  sed 's/)$//; s/ ([^)]*)//g; s/,//g')
grid_kinds=""
for v in $variants; do
  f="$(dirname "$0")/../models/ptb-$v.cfg"
  if [ -f "$f" ]; then grid_kinds="$grid_kinds $(sed -n 's/^attention *= *\([^ #]*\).*/\1/p' "$f")"
  else fail "experiment variant $v has no models/ptb-$v.cfg"; fi
done
missing=""
[ -n "$kinds" ] || missing="(no kinds in the parser's message)"
for k in $kinds; do
  echo "$attn_line" | grep -q -- " $k\( \|$\)" || missing="$missing help:$k"
  echo " $grid_kinds " | grep -q -- " $k " || missing="$missing grid:$k"
done
[ -z "$missing" ] && pass "help config and the experiment grids list every attention kind ($kinds)" ||
  fail "a list of kinds disagrees with the table:$missing"
printf '\xef\xbb\xbfd_model = 32\nn_heads = 2\n' > "$TMP/bom.cfg"
"$LIPT" train --config "$TMP/bom.cfg" --data "$DATA" --steps 2 --batch 2 --seq_len 16 --d_ff 32 --n_layers 1 \
  --out "$TMP/bom_run" --threads 1 --quiet --final-eval none --eval-every 0 2>"$TMP/bom.err" &&
  pass "a config with a UTF-8 byte-order mark" || fail "BOM config: $(cat "$TMP/bom.err")"
for c in train eval invert export sample lipschitz bench data "experiment tightness" "experiment invertibility" \
         "experiment depth" "experiment stability" "experiment robustness"; do
  # shellcheck disable=SC2086
  "$LIPT" $c --help >/dev/null 2>&1 && pass "$c --help" || fail "$c --help"
done
# both usage texts name every experiment (the dispatcher's table writes the first)
exp_usage=$("$LIPT" experiment --help 2>&1) && main_usage=$("$LIPT" --help 2>&1)
for e in tightness invertibility depth stability robustness; do
  if echo "$exp_usage" | grep -q "^  $e " && echo "$main_usage" | grep '^  experiment ' | grep -qw "$e"; then
    pass "usage lists experiment $e"
  else
    fail "usage does not list experiment $e"
  fi
done

# ---- the machine: lipt info --system, and the start-up check that keeps OpenBLAS off its generic kernels
unset OPENBLAS_CORETYPE LIPT_OPENBLAS_CORETYPE LIPT_TEST_PRETEND_GENERIC
sysj=$("$LIPT" info --system --json 2>"$TMP/sys.err")
sysf() { echo "$1" | sed -n "s/.*\"$2\":\"\([^\"]*\)\".*/\1/p"; }
best=$(sysf "$sysj" openblas_best_core)
if [ -n "$(sysf "$sysj" openblas_core)" ] && echo "$sysj" | grep -q '"cpu_features":"[a-z0-9_ ]*"' &&
   "$LIPT" info --system | grep -q "^  OpenBLAS: .* kernels, " && ! [ -s "$TMP/sys.err" ]; then
  pass "info --system: OpenBLAS's $(sysf "$sysj" openblas_core) kernels ($(sysf "$sysj" openblas_core_source)), oneDNN ISA '$(sysf "$sysj" onednn_isa)', best core '$best'"
else
  fail "info --system: $sysj $(cat "$TMP/sys.err")"
fi
expect_error "info --system with --ckpt" "$LIPT" info --system --ckpt "$TMP/run/last.ckpt"
# the default thread count leaves the cores other programs keep busy: one busy loop per usable core, and the
# default is 1 thread; LIPT_THREADS (and --threads) stand whatever the load
ncores=$(echo "$sysj" | sed -n 's/.*"cpus_usable":\([0-9]*\).*/\1/p')
busy_pids=()
for _ in $(seq 1 "${ncores:-1}"); do (while :; do :; done) & busy_pids+=($!); done
sleep 0.3
ld=$("$LIPT" info --system --json 2>/dev/null)
ldset=$(LIPT_THREADS=$((ncores + 1)) "$LIPT" info --system --json 2>/dev/null)
kill "${busy_pids[@]}" 2>/dev/null; wait "${busy_pids[@]}" 2>/dev/null
if echo "$ld" | grep -q '"threads":1,"threads_default":true' &&
   echo "$ldset" | grep -q "\"threads\":$((ncores + 1)),\"threads_default\":false"; then
  pass "default threads on $ncores busy cores: 1 ($(echo "$ld" | grep -o '"cpus_busy_elsewhere":[0-9.]*')); LIPT_THREADS=$((ncores + 1)) stands"
else
  fail "default threads under load: $ld / $ldset"
fi
if echo "$sysj" | grep -q DYNAMIC_ARCH && [ -n "$best" ]; then
  # as if OpenBLAS had fallen back to Prescott: one note, then the same command on the best kernels
  pre=$(LIPT_TEST_PRETEND_GENERIC=1 "$LIPT" info --system --json 2>"$TMP/pre.err")
  if [ "$(wc -l <"$TMP/pre.err")" -eq 1 ] &&
     grep -q "^lipt: OpenBLAS chose generic kernels (Prescott) on a CPU with AVX[-0-9]*; using $best kernels (set OPENBLAS_CORETYPE to override)$" "$TMP/pre.err" &&
     [ "$(sysf "$pre" openblas_core)" = "$best" ] && [ "$(sysf "$pre" openblas_core_source)" = lipt ]; then
    pass "a generic OpenBLAS core is replaced at start-up: $(cat "$TMP/pre.err")"
  else
    fail "start-up kernel check: $(cat "$TMP/pre.err") $pre"
  fi
  # a user's OPENBLAS_CORETYPE stands, without a word, and info says the CPU runs better kernels
  usr=$(OPENBLAS_CORETYPE=Prescott LIPT_TEST_PRETEND_GENERIC=1 "$LIPT" info --system --json 2>"$TMP/usr.err")
  if ! [ -s "$TMP/usr.err" ] && [ "$(sysf "$usr" openblas_core)" = Prescott ] &&
     [ "$(sysf "$usr" openblas_core_source)" = user ] && echo "$usr" | grep -q '"openblas_generic":true'; then
    pass "a user's OPENBLAS_CORETYPE=Prescott is respected"
  else
    fail "user's OPENBLAS_CORETYPE: $(cat "$TMP/usr.err") $usr"
  fi
  # a run through the re-executed binary: the note once, and the run of the same kernels set by hand
  LIPT_TEST_PRETEND_GENERIC=1 "$LIPT" train "${COMMON[@]}" --out "$TMP/pretend" --steps 3 --eval-every 0 2>"$TMP/pt.err"
  OPENBLAS_CORETYPE=$best "$LIPT" train "${COMMON[@]}" --out "$TMP/byhand" --steps 3 --eval-every 0 2>/dev/null
  if [ "$(grep -c "^lipt: OpenBLAS chose generic kernels" "$TMP/pt.err")" -eq 1 ] &&
     [ "$(grep -c '"loss"' "$TMP/pretend/metrics.jsonl" 2>/dev/null)" = 3 ] &&
     diff <(nt "$TMP/pretend/metrics.jsonl") <(nt "$TMP/byhand/metrics.jsonl") >/dev/null; then
    pass "train after the start-up check: one note, the metrics of OPENBLAS_CORETYPE=$best set by hand"
  else
    fail "train after the start-up check: $(head -c 300 "$TMP/pt.err")"
  fi
else
  echo "skip  the start-up kernel check: OpenBLAS is not a DYNAMIC_ARCH build or the CPU lacks AVX"
fi

e2e_done
