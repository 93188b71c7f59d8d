#!/usr/bin/env bash
# A user coming from nanoGPT (issue 51):
#   A. the README's first command trains on any text without options: seven licence texts Debian ships, concatenated,
#      hold symbols (a '*', a tab) that first appear in the valid or test part; the vocabulary is the whole text's
#      bytes, as nanoGPT's, and --vocab built (the training part's) still refuses with advice;
#   B. nanoGPT's option names are lipt's with a one-line note each, checked in the run's run.cfg; init_from keeps its
#      three meanings (scratch, resume, a checkpoint) and refuses gpt2*; the names lipt has no equivalent for say what
#      to use; "did you mean" prefers nanoGPT's names.
# Usage: nanogpt_test.sh LIPT_BINARY. Tiny runs (a few steps, one thread): seconds.
set -uo pipefail
. "$(dirname "$0")/util/e2e.sh" nanogpt "${1:-}"
export LIPT_THREADS=1
cd "$TMP" || exit 1

L=/usr/share/common-licenses
TEXTS=(Apache-2.0 Artistic BSD GFDL-1.3 GPL-3 LGPL-2.1 MPL-2.0)
for t in "${TEXTS[@]}"; do
  [ -f "$L/$t" ] || { echo "skip: $L/$t is missing (package base-files)"; exit 77; }
  cat "$L/$t"
done >mytext.txt

# ---- A: the README's first command, with few steps ----
if "$LIPT" train --data mytext.txt --out runs/mine --steps 2 >a.out 2>a.err && grep -q '^done: 2 steps.*test bpc [0-9]' a.err &&
   grep -q 'the bytes of the whole text' a.err; then
  pass "lipt train --data mytext.txt (7 licences, $(wc -c <mytext.txt) bytes) trains: $(grep '^done' a.err | cut -c1-90)"
else
  fail "lipt train --data mytext.txt exits non-zero or does not finish: $(tail -c 400 a.err)"
fi
# the training part's vocabulary is still there, and still refuses a symbol it lacks, with the ways out
if ! "$LIPT" train --data mytext.txt --out runs/built --vocab built --steps 1 >/dev/null 2>b.err &&
   grep -q 'is not in the vocabulary' b.err && grep -q -- '--vocab whole' b.err; then
  pass "--vocab built keeps the training part's bytes and refuses with advice: $(cut -c1-160 b.err)"
else
  fail "--vocab built: $(tail -c 300 b.err)"
fi

# ---- B: nanoGPT's names ----
# nanoGPT's own form (--key=value) for every alias with a lipt equivalent, in one tiny run
"$LIPT" train --data mytext.txt --max_iters=3 --batch_size=3 --block_size=16 --n_layer=1 --n_head=2 --n_embd=16 \
  --d_ff 32 --learning_rate=0.002 --out_dir=nano --eval_interval=2 --warmup_iters=1 --grad_clip=0.5 \
  --log_interval=1 --quiet >n.out 2>n.err
rc=$?
check_alias() { # alias, lipt's name, the run.cfg line it must give
  if [ $rc -eq 0 ] && grep -q -- "^note: --$1 is nanoGPT's name for lipt's .*$2" n.err && grep -q "^$3\( \|$\)" nano/run.cfg; then
    pass "--$1 is --$2: $(grep -- "^note: --$1 " n.err)"
  else
    fail "--$1 (exit $rc): want a note naming $2 and '$3' in run.cfg; got: $(grep -- "--$1" n.err) / $(grep "^${3%% *}" nano/run.cfg 2>/dev/null)"
  fi
}
check_alias max_iters steps "steps = 3"
check_alias batch_size batch "batch = 3"
check_alias block_size seq_len "seq_len = 16"
check_alias n_layer n_layers "n_layers = 1"
check_alias n_head n_heads "n_heads = 2"
check_alias n_embd d_model "d_model = 16"
check_alias learning_rate lr "lr = 0.002"
check_alias out_dir out "steps = 3" # run.cfg is in nano/: the folder --out_dir named
check_alias eval_interval eval-every "eval-every = 2"
check_alias warmup_iters warmup "warmup = 1"
check_alias grad_clip clip "clip = 0.5"
check_alias log_interval log-every "log-every = 1"
[ "$(grep -c '^note: ' n.err)" -eq 12 ] && pass "one note line per alias (12)" || fail "notes: $(cat n.err)"

# init_from: scratch (a new run), resume (continue nano/), a checkpoint (fine-tune), gpt2 (refused)
if "$LIPT" train --data mytext.txt --init_from scratch --out scratch --steps 1 --seq_len 16 --d_model 16 --d_ff 32 \
     --n_layers 1 --n_heads 2 --quiet 2>s.err && grep -q "^note: --init_from scratch" s.err && ! grep -q init-from scratch/run.cfg; then
  pass "--init_from scratch: a new run ($(grep note s.err))"
else
  fail "--init_from scratch: $(tail -c 300 s.err)"
fi
if "$LIPT" train --init_from=resume --out_dir=nano --max_iters=5 2>r.err && grep -q "^note: --init_from resume" r.err &&
   grep -q 'resumed from nano/last.ckpt at step 3' r.err && "$LIPT" info --ckpt nano/last.ckpt --json | grep -q '"step":5'; then
  pass "--init_from=resume continues the run in --out_dir to step 5 ($(grep 'init_from' r.err))"
else
  fail "--init_from=resume: $(tail -c 300 r.err)"
fi
if "$LIPT" train --init_from nano --data mytext.txt --out tuned --steps 1 --quiet 2>t.err &&
   grep -q "^note: --init_from is nanoGPT's name for lipt's --init-from" t.err && grep -q '^# init-from' tuned/run.cfg; then
  pass "--init_from DIR fine-tunes from that run ($(grep '^# init-from ' tuned/run.cfg))"
else
  fail "--init_from DIR: $(tail -c 300 t.err)"
fi
"$LIPT" train --init_from gpt2-xl --out g >/dev/null 2>g.err
rc=$?
if [ $rc -eq 2 ] && grep -q 'no GPT-2 weights' g.err && [ "$(wc -l <g.err)" -eq 1 ] && [ ! -e g ]; then
  pass "--init_from gpt2-xl refused (exit 2): $(cut -c1-120 g.err)"
else
  fail "--init_from gpt2-xl: exit $rc: $(cat g.err)"
fi
# no equivalent: refused with what to use instead
"$LIPT" train --gradient_accumulation_steps 4 >/dev/null 2>ga.err
rc=$?
if [ $rc -eq 2 ] && grep -q -- '--batch' ga.err; then pass "--gradient_accumulation_steps: $(cat ga.err)"
else fail "--gradient_accumulation_steps: exit $rc: $(cat ga.err)"; fi
# "did you mean": nanoGPT's names before any lipt name a few letters away (--max_iter once suggested --gram_iters)
for typo in max_iter:steps learning_rat:lr warmup_iter:warmup n_layers_:n_layers; do
  "$LIPT" train --"${typo%%:*}" 1 >/dev/null 2>dy.err
  if grep -q -- "did you mean --${typo##*:} (nanoGPT's" dy.err; then pass "--${typo%%:*}: $(cat dy.err)"
  else fail "--${typo%%:*}: want a suggestion of --${typo##*:}: $(cat dy.err)"; fi
done

e2e_done
