/* lipt train --resume: the model config and the training options taken from the checkpoint (what was not given
 * again), the corpus compared with the one it was trained on, and the training state restored. */
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "cli.h"
#include "lipt/checkpoint.h"
#include "model_config.h"
#include "run.h"
#include "train_keys.h"
#include "train_run.h"
#include "train_setup.h"

/* --resume where the run folder holds no last.ckpt: what there is to continue, if anything. The exit status. */
static int no_checkpoint(const trainer *t) {
    struct stat sb;
    if (stat(t->out, &sb) != 0 || !S_ISDIR(sb.st_mode))
        return cli_error("train", "--resume: there is no run folder %s, so no run to continue (without --resume, lipt "
                         "train starts one there)", t->out);
    if (access(t->best_path, F_OK) == 0)
        return cli_error("train", "%s holds no last.ckpt to resume, only %s: continue from it with --resume --ckpt %s",
                         t->out, t->best_path, t->best_path);
    return cli_error("train", "%s holds no checkpoint to resume: its training ended before the first one (or never "
                     "started). The folder may be reused: the same command without --resume starts the run afresh "
                     "there", t->out);
}

/* The model config: from the checkpoint when resuming (its stored training options then fill in whatever was not
 * given again; ck stays open), else the config file and --key value overrides. 0, or the exit status. */
int train_merge_config(cli_args *ap, trainer *t, int *resume, const char *resume_path, lipt_ckpt *ck, run_extra *rx) {
    const char *C = "train";
    lipt_error err = {0};
    if (!*resume && cli_has(ap, "init-from")) return train_init_config(ap, t); /* train_init.c */
    if (!*resume) { /* src/shell/model_config.c; a run config's training keys fill in the options not given */
        int n_keys;
        const char *const *keys = train_persisted_keys(&n_keys);
        return cli_model_config(ap, C, keys, n_keys, &t->cfg);
    }
    const int data_given = cli_has(ap, "data");
    if (resume_path == t->last_path && access(resume_path, F_OK) != 0 && errno == ENOENT) {
        *resume = 3; /* nothing open to close */
        return no_checkpoint(t);
    }
    if (lipt_ckpt_open(resume_path, ck, &err) != LIPT_OK) {
        *resume = 3; /* nothing open to close */
        return cli_fail(C, &err);
    }
    if (cli_has(ap, "config") || ap->n_extra)
        return cli_error(C, "--resume takes the model config from %s; drop --config and model keys", resume_path);
    /* src/shell/run.c: what eval refuses (a vocabulary other than the model's), resume refuses too */
    if (run_ckpt_config(ck, resume_path, &t->cfg, &t->vocab, &err) != LIPT_OK ||
        run_extra_unpack(rx, ck->extra, ck->extra_len, &err) != LIPT_OK)
        return cli_fail(C, &err);
    t->stored_cfg = t->cfg; /* the settings before this resume, for its record */
    train_keys_from_ckpt(ap, rx->opts_text); /* src/shell/train_keys.c */
    /* the corpus by its absolute location (the spec as typed may be relative to another working directory) */
    char abs[1100];
    if (!data_given && run_opt_get(rx->opts_text, "data-abs", abs, sizeof abs) == 0)
        for (int k = 0; k < ap->n_opts; k++)
            if (strcmp(ap->opts[k].name, "data") == 0) ap->val[k] = cli_own(ap, abs, strlen(abs));
    return 0;
}

/* A resumed run's corpus against the one its checkpoint was trained on (data-crc32 and data-bytes, stored by every
 * save): a different text would continue the run on other data, and recording the new CRC would hide the change from
 * every later eval. Refused unless force; with force, a warning, and the earlier CRCs are kept in the options as
 * data-crc32-before=CRC@STEP[,...] (then the stored data-crc32 is the corpus the run continues on). 0, or the exit
 * status. */
int train_check_resumed_corpus(trainer *t, const run_extra *rx, const char *resume_path, const char *data_spec,
                                int force, long long step) {
    const char *C = "train";
    char was_crc[32], was_bytes[32], now_crc[32] = "", now_bytes[32] = "", before[512] = "";
    if (run_opt_get(rx->opts_text, "data-crc32", was_crc, sizeof was_crc) != 0) return 0; /* older checkpoints */
    if (run_opt_get(rx->opts_text, "data-bytes", was_bytes, sizeof was_bytes) != 0) snprintf(was_bytes, sizeof was_bytes, "?");
    if (run_opt_get(t->opts_text, "data-crc32", now_crc, sizeof now_crc) != 0)
        return cli_error(C, "cannot read %s to compare it with the corpus %s was trained on (CRC-32 %s)", data_spec,
                         resume_path, was_crc);
    run_opt_get(t->opts_text, "data-bytes", now_bytes, sizeof now_bytes);
    run_opt_get(rx->opts_text, "data-crc32-before", before, sizeof before);
    const size_t used = strlen(t->opts_text);
    if (strcmp(now_crc, was_crc) == 0) {
        /* the same corpus: the history of earlier forced changes goes on */
        if (before[0]) snprintf(t->opts_text + used, sizeof t->opts_text - used, "data-crc32-before=%s\n", before);
        return 0;
    }
    if (!force)
        return cli_error(C, "%s (CRC-32 %s, %s bytes) is not the corpus %s was trained on (CRC-32 %s, %s bytes): the "
                         "file changed since, or --data names another; resuming would continue on other text. Restore "
                         "the corpus, or pass --force to continue on this one (the checkpoint then records both)",
                         data_spec, now_crc, now_bytes, resume_path, was_crc, was_bytes);
    fprintf(stderr, "warning: %s (CRC-32 %s, %s bytes) is not the corpus %s was trained on (CRC-32 %s, %s bytes): "
                    "continuing on it (--force); the checkpoints record the earlier one as data-crc32-before\n",
            cli_shown(data_spec), now_crc, now_bytes, cli_shown(resume_path), was_crc, was_bytes);
    const int w = snprintf(t->opts_text + used, sizeof t->opts_text - used, "data-crc32-before=%s%s%s@%lld\n", before,
                           before[0] ? "," : "", was_crc, step);
    if (w < 0 || (size_t)w >= sizeof t->opts_text - used || (size_t)w >= sizeof before) {
        t->opts_text[used] = 0;
        return cli_error(C, "too many forced corpus changes to record in %s (data-crc32-before): start a new run",
                         resume_path);
    }
    return 0;
}

/* The training state of the checkpoint ck (closed here: *resume = 2): weights, optimizer, step, random streams,
 * batcher, best validation BPC, the patience count, the wall time so far; its stored options and model config kept
 * for the record of this resume. 0, or the exit status. */
int train_restore(trainer *t, const train_settings *s, lipt_ckpt *ck, const run_extra *rx, const char *resume_path,
                  uint64_t rank_mix, int *resume) {
    const char *C = "train";
    lipt_error err = {0};
    if (!ck->has_optimizer || ck->n_rngs < 1) return cli_error(C, "%s has no optimizer state: it cannot be resumed", resume_path);
    if (lipt_ckpt_load_params(ck, &t->model.params, 1, &err) != LIPT_OK) return cli_fail(C, &err);
    t->opt.t = ck->adam_t;
    t->step = ck->step;
    t->ctx.rng = ck->rngs[0];
    if (t->dist->rank > 0) lipt_rng_seed(&t->ctx.rng, ck->rngs[0].s[0] ^ rank_mix);
    t->batcher.st = rx->batcher;
    t->best_bpc = rx->best_bpc;
    t->best_step = rx->best_step;
    /* the patience count; a checkpoint from before it was stored: the periodic evaluations since the best step */
    char since[32];
    if (run_opt_get(rx->opts_text, TRAIN_EVALS_SINCE_BEST, since, sizeof since) == 0) t->evals_since_best = atol(since);
    else if (t->best_step >= 0 && s->eval_every > 0)
        t->evals_since_best = (long)(t->step / s->eval_every - t->best_step / s->eval_every);
    if (t->evals_since_best < 0) t->evals_since_best = 0;
    t->stored_opts = strdup(rx->opts_text ? rx->opts_text : "");
    if (!t->stored_opts) return cli_error(C, "out of memory");
    t->resumed = 1;
    snprintf(t->resumed_from, sizeof t->resumed_from, "%s", resume_path);
    if (strcmp(resume_path, t->last_path) == 0) t->saved_step = t->step; /* else last.ckpt is not this state yet */
    if (!s->quiet) fprintf(stderr, "resumed from %s at step %lld\n", cli_shown(resume_path), (long long)t->step);
    lipt_ckpt_close(ck);
    *resume = 2; /* closed */
    return 0;
}

/* Two option values alike: the same text, or the same number ("4e-3" and "0.004"). */
static int same_value(const char *a, const char *b) {
    if (strcmp(a, b) == 0) return 1;
    char *ea, *eb;
    const double x = strtod(a, &ea), y = strtod(b, &eb);
    return *a && *b && !*ea && !*eb && x == y;
}

static void add_change(trainer *t, const char *key, const char *was, const char *now) {
    train_change *c = &t->changes[t->n_changes++];
    snprintf(c->key, sizeof c->key, "%s", key);
    snprintf(c->was, sizeof c->was, "%s", was);
    snprintf(c->now, sizeof c->now, "%s", now);
}

/* The split a --data-split text gives on a corpus of this kind: auto is a corpus's standard split, 0.9/0.05/0.05 on
 * plain text; 1 when two texts give the same ("auto" and "0.9,0.05,0.05" on plain text do). */
static int same_split(const char *was, const char *now, lipt_corpus_kind kind) {
    lipt_data_opts o[2];
    lipt_error err = {0};
    memset(o, 0, sizeof o);
    for (int i = 0; i < 2; i++) {
        if (lipt_data_parse_split(i ? now : was, &o[i], &err) != LIPT_OK) return strcmp(was, now) == 0;
        if (o[i].split == LIPT_SPLIT_AUTO && kind == LIPT_CORPUS_TEXT) {
            o[i].split = LIPT_SPLIT_FRACTIONS;
            o[i].frac[0] = 0.9, o[i].frac[1] = o[i].frac[2] = 0.05;
        } else if (o[i].split == LIPT_SPLIT_AUTO) {
            o[i].split = LIPT_SPLIT_STANDARD;
        }
    }
    if (o[0].split != o[1].split) return 0;
    for (int k = 0; k < 3 && o[0].split == LIPT_SPLIT_FRACTIONS; k++)
        if (fabs(o[0].frac[k] - o[1].frac[k]) > 1e-12) return 0;
    return 1;
}

/* A resumed run on another split: its new valid or test part may be text it trained on, and their BPC would no longer
 * be held out. Refused unless --force (then said, and recorded with the other changes). 0, or the exit status. */
static int check_split_change(const cli_args *ap, const trainer *t, const char *was, const char *now) {
    if (cli_has(ap, "force")) {
        fprintf(stderr, "warning: --data-split %s is not the run's %s: continuing on it (--force); its valid and test "
                "BPC may now score text the run trained on (run.cfg and metrics.jsonl record the change)\n", now, was);
        return 0;
    }
    return cli_error("train", "--data-split %s is not the split the run in %s trained on (%s): the new valid or test "
                     "part would hold text the model has trained on, so their BPC would no longer be held out. Drop "
                     "--data-split to continue on the run's split; start a new run (--init-from %s keeps the weights) "
                     "for another split; or pass --force to continue anyway (recorded in run.cfg and metrics.jsonl)",
                     now, t->out, was, t->out);
}

int train_resume_changes(const cli_args *ap, trainer *t) {
    int n_keys = 0;
    while (train_persisted_key(n_keys)) n_keys++;
    t->changes = calloc((size_t)n_keys + 1, sizeof *t->changes);
    if (!t->changes) return cli_error("train", "out of memory");
    if (t->cfg.precision != t->stored_cfg.precision)
        add_change(t, "precision", lipt_precision_name(t->stored_cfg.precision), lipt_precision_name(t->cfg.precision));
    for (int i = 0; i < n_keys; i++) {
        const char *key = train_persisted_key(i);
        int k = 0;
        while (k < ap->n_opts && strcmp(ap->opts[k].name, key) != 0) k++;
        if (k == ap->n_opts || ap->set[k] != CLI_SET_ARGV) continue; /* not given again: the checkpoint's */
        char was[1100] = "", now[1100] = "";
        if (strcmp(key, "data") == 0 && run_opt_get(t->stored_opts, "data-abs", was, sizeof was) == 0 &&
            run_opt_get(t->opts_text, "data-abs", now, sizeof now) == 0) {
            if (strcmp(was, now) != 0) add_change(t, key, was, now); /* the corpus by its location, however typed */
            continue;
        }
        if (run_opt_get(t->stored_opts, key, was, sizeof was) != 0) snprintf(was, sizeof was, "unset");
        snprintf(now, sizeof now, "%s", cli_str(ap, key));
        if (strcmp(key, "data-split") == 0 && !same_split(strcmp(was, "unset") ? was : "auto", now, t->ds.loc.kind)) {
            const int rc = check_split_change(ap, t, was, now);
            if (rc) return rc;
        }
        if (!same_value(was, now)) add_change(t, key, was, now);
    }
    return 0;
}
