/* lipt train's options: the training settings read and checked (the option table and the stored training keys:
 * src/shell/train_option_table.c; a run config file: src/shell/model_config.c). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli.h"
#include "lipt/checkpoint.h"
#include "run.h"
#include "train_keys.h"
#include "train_run.h"
#include "train_setup.h"

static int parse_final_eval(const char *s, int *valid, int *test) {
    *valid = *test = 0;
    if (strcmp(s, "none") == 0) return 0;
    if (strcmp(s, "valid,test") == 0 || strcmp(s, "test,valid") == 0) { *valid = *test = 1; return 0; }
    if (strcmp(s, "valid") == 0) { *valid = 1; return 0; }
    if (strcmp(s, "test") == 0) { *test = 1; return 0; }
    return -1;
}

/* Numeric options read and range-checked; 0, 2 (bad syntax, message printed) or the exit status. */
/* Where an option's value came from, for messages: a value the user did not type must not be blamed on a flag. */
static const char *origin(const cli_args *ap, const char *name) { return cli_origin(ap, name); }

static int read_numbers(cli_args *ap, train_settings *s) {
    const char *C = "train";
    if (cli_int(ap, "steps", &s->steps) || cli_int(ap, "batch", &s->batch) || cli_int(ap, "warmup", &s->warmup) ||
        cli_int(ap, "seed", &s->seed) || cli_int(ap, "eval-every", &s->eval_every) ||
        cli_int(ap, "eval-symbols", &s->eval_symbols) || cli_int(ap, "save-every", &s->save_every) ||
        cli_int(ap, "log-every", &s->log_every) || cli_float(ap, "lr", &s->lr) || cli_float(ap, "min-lr", &s->min_lr) ||
        cli_float(ap, "beta1", &s->beta1) || cli_float(ap, "beta2", &s->beta2) || cli_float(ap, "adam-eps", &s->aeps) ||
        cli_float(ap, "weight-decay", &s->wd) || cli_float(ap, "clip", &s->clip) ||
        cli_int(ap, "check-every", &s->check_every) || cli_float(ap, "save-minutes", &s->save_minutes) ||
        cli_int(ap, "patience", &s->patience) || cli_int(ap, "sample-every", &s->sample_every) ||
        cli_int(ap, "sample-length", &s->sample_length))
        return 2;
    if (s->steps < 0) return cli_error(C, "--steps must be >= 0, got %ld%s", s->steps, origin(ap, "steps"));
    if (s->batch < 1 || s->batch > 65536)
        return cli_error(C, "--batch must be in [1, 65536], got %ld%s", s->batch, origin(ap, "batch"));
    if (s->warmup < 0) return cli_error(C, "--warmup must be >= 0, got %ld%s", s->warmup, origin(ap, "warmup"));
    if (s->eval_every < 0 || s->save_every < 0 || s->log_every < 1 || s->eval_symbols < 0)
        return cli_error(C, "--eval-every, --save-every, --eval-symbols must be >= 0 and --log-every >= 1");
    if (s->sample_every < 0) return cli_error(C, "--sample-every must be >= 0 (0: no samples), got %ld%s", s->sample_every,
                                              origin(ap, "sample-every"));
    if (s->sample_length < 1 || s->sample_length > 100000)
        return cli_error(C, "--sample-length must be in [1, 100000], got %ld%s", s->sample_length,
                         origin(ap, "sample-length"));
    if (s->clip < 0) return cli_error(C, "--clip must be >= 0, got %g%s", s->clip, origin(ap, "clip"));
    const int mrc = cli_apply_memory(ap, C, &s->memory, &s->rev);
    if (mrc) return mrc;
    s->recompute = s->memory == CLI_MEMORY_RECOMPUTE;
    if (!(s->save_minutes >= 0) || s->save_minutes > 1e6)
        return cli_error(C, "--save-minutes must be in [0, 1e6], got %g", s->save_minutes);
    if (s->check_every < 0)
        return cli_error(C, "--check-every must be >= 0, got %ld%s", s->check_every, origin(ap, "check-every"));
    if (s->patience < 0)
        return cli_error(C, "--patience must be >= 0 (0: no early stopping), got %ld%s", s->patience,
                         origin(ap, "patience"));
    return 0;
}

/* The training options: numbers, the batch across ranks (kept global on resume unless the user gave --batch: the flag
 * as typed, not as restored from the checkpoint), the schedule, AdamW and data options, and the persisted text. 0, or
 * the exit status. */
int train_parse_settings(cli_args *ap, trainer *t, int resume, const run_extra *rx, const char *resume_path,
                          int batch_given, train_settings *s) {
    const char *C = "train";
    lipt_error err = {0};
    const int K = t->K;
    int bad = read_numbers(ap, s);
    if (bad) return bad;
    if (resume) {
        /* the global batch (ranks x batch) is what defines the run: keep it across a change of rank count */
        const char *g = rx->opts_text ? strstr(rx->opts_text, "global-batch=") : NULL;
        long stored = g ? atol(g + 13) : s->batch; /* written by a one-process build: its batch */
        if (!batch_given) {
            if (stored % K != 0)
                return cli_error(C, "the run in %s has a global batch of %ld, which does not split over %d ranks; pass "
                                 "--batch to choose the per-rank batch", resume_path, stored, K);
            s->batch = stored / K;
        } else if (stored != (long)K * s->batch && t->lead) {
            fprintf(stderr, "note: the global batch changes from %ld to %d x %ld = %ld\n", stored, K, s->batch,
                    (long)K * s->batch);
        }
    }
    if ((long)K * s->batch > 65536) return cli_error(C, "%d ranks x --batch %ld exceeds 65536 sequences per step", K, s->batch);
    if (parse_final_eval(cli_str(ap, "final-eval"), &s->final_valid, &s->final_test) < 0)
        return cli_error(C, "--final-eval must be valid,test | valid | test | none, got '%s'", cli_str(ap, "final-eval"));
    const char *ff = cli_str(ap, "final-from");
    if (strcmp(ff, "best") != 0 && strcmp(ff, "last") != 0)
        return cli_error(C, "--final-from must be best or last, got '%s'%s", ff, origin(ap, "final-from"));
    s->final_from_best = strcmp(ff, "best") == 0;
    if (lipt_lr_kind_parse(cli_str(ap, "schedule"), &s->sched.kind, &err) != LIPT_OK) return cli_fail(C, &err);
    s->sched.lr = s->lr;
    s->sched.warmup = s->warmup;
    s->sched.total = s->steps;
    s->sched.min_lr = s->min_lr;
    if (lipt_lr_schedule_check(&s->sched, &err) != LIPT_OK) return cli_fail(C, &err);
    s->acfg = (lipt_adamw_config){s->lr, s->beta1, s->beta2, s->aeps, s->wd};
    if (lipt_adamw_config_check(&s->acfg, &err) != LIPT_OK) return cli_fail(C, &err);
    if ((bad = train_optim_settings(ap, s, resume, rx->opts_text, resume_path)) != 0) return bad;
    if (lipt_data_parse_vocab(cli_str(ap, "vocab"), &s->dopts, &err) != LIPT_OK ||
        lipt_data_parse_split(cli_str(ap, "data-split"), &s->dopts, &err) != LIPT_OK)
        return cli_fail(C, &err);
    s->dopts.unk = cli_has(ap, "unk") && strcmp(cli_str(ap, "unk"), "1") == 0;
    size_t off = 0;
    int n_persisted;
    const char *const *persisted = train_persisted_keys(&n_persisted);
    for (int i = 0; i < n_persisted; i++) {
        const char *v = cli_str(ap, persisted[i]);
        if (!v) continue; /* unset flags are not stored */
        int w = snprintf(t->opts_text + off, sizeof t->opts_text - off, "%s=%s\n", persisted[i], v);
        if (w < 0 || (size_t)w >= sizeof t->opts_text - off)
            return cli_error(C, "training options too long to store (--%s is %zu characters)", persisted[i], strlen(v));
        off += (size_t)w;
    }
    snprintf(t->opts_text + off, sizeof t->opts_text - off, "global-batch=%ld\n", (long)K * s->batch);
    return 0;
}
