/* lipt train --init-from: a new run that starts from a checkpoint's weights (fine-tuning): the model config and the
 * vocabulary are the checkpoint's; step, optimizer state, best BPC and patience start afresh. */
#define _XOPEN_SOURCE 700 /* realpath */
#include <errno.h>
#include <limits.h>
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

/* A run folder names its best.ckpt, else its last.ckpt (run_resolve_ckpt, as --ckpt of the other commands). 0, or the
 * exit status. */
static int resolve(const char *given, char *out, size_t n) {
    struct stat sb;
    if (stat(given, &sb) != 0)
        return cli_error("train", "--init-from %s: %s (a checkpoint, or a run folder holding best.ckpt or last.ckpt)",
                         given, strerror(errno));
    lipt_error err = {0};
    if (run_resolve_ckpt(given, out, n, &err) != LIPT_OK) return cli_error("train", "--init-from %s", err.msg);
    return 0;
}

/* The model keys a --config file or --KEY gave, against the checkpoint's model: only dropout and precision may
 * differ (neither changes a weight's shape). 0, or the exit status. */
static int compare_model(cli_args *ap, trainer *t) {
    lipt_config u;
    int n_keys;
    const char *const *keys = train_persisted_keys(&n_keys);
    const int rc = cli_model_config(ap, "train", keys, n_keys, &u); /* also the file's training keys */
    if (rc) return rc;
    u.vocab_size = t->cfg.vocab_size; /* the vocabulary is the checkpoint's */
    lipt_config c = t->cfg;
    c.dropout = u.dropout;
    c.precision = u.precision;
    char a[4096], b[4096];
    lipt_config_to_text(&u, a, sizeof a);
    lipt_config_to_text(&c, b, sizeof b);
    if (strcmp(a, b) != 0) {
        const char *p = a, *q = b;
        while (*p && *p == *q) { p++; q++; }
        while (p > a && p[-1] != '\n') { p--; q--; }
        return cli_error("train", "--init-from %s: the model of --config or --KEY (%.*s) is not the checkpoint's (%.*s): "
                         "the weights fix the model; drop the model keys (dropout and precision may change)",
                         t->init_from, (int)strcspn(p, "\n"), p, (int)strcspn(q, "\n"), q);
    }
    t->cfg = c;
    return 0;
}

int train_init_config(cli_args *ap, trainer *t) {
    const char *C = "train";
    char path[1300], abs[PATH_MAX];
    int rc = resolve(cli_str(ap, "init-from"), path, sizeof path);
    if (rc) return rc;
    const char *full = realpath(path, abs) ? abs : path;
    if (strlen(full) >= sizeof t->init_from) return cli_error(C, "--init-from %s: the path is too long to store", full);
    memcpy(t->init_from, full, strlen(full) + 1);
    for (int k = 0; k < ap->n_opts; k++) /* typed, not a run.cfg's stored value */
        if ((strcmp(ap->opts[k].name, "vocab") == 0 || strcmp(ap->opts[k].name, "unk") == 0) &&
            ap->set[k] == CLI_SET_ARGV)
            return cli_error(C, "--%s chooses the vocabulary of a new model; --init-from keeps the vocabulary of %s (the "
                             "model reads only its symbols): drop --%s", ap->opts[k].name, path, ap->opts[k].name);
    lipt_error err = {0};
    run_extra x;
    if (lipt_ckpt_open(path, &t->init_ck, &err) != LIPT_OK) return cli_fail(C, &err);
    t->init_open = 1;
    if (run_ckpt_config(&t->init_ck, path, &t->cfg, &t->vocab, &err) != LIPT_OK) return cli_fail(C, &err);
    t->init_step = (long long)t->init_ck.step;
    if (run_extra_unpack(&x, t->init_ck.extra, t->init_ck.extra_len, &err) == LIPT_OK)
        run_opt_get(x.opts_text, "run-id", t->init_run, sizeof t->init_run);
    if (cli_has(ap, "config") || ap->n_extra) return compare_model(ap, t);
    return 0;
}

int train_init_weights(trainer *t, int quiet) {
    lipt_error err = {0};
    /* trainable values and the power-iteration vectors as saved: the starting model is exactly the trained function */
    const lipt_status st = lipt_ckpt_load_params(&t->init_ck, &t->model.params, 0, &err);
    lipt_ckpt_close(&t->init_ck);
    t->init_open = 0;
    if (st != LIPT_OK) return cli_fail("train", &err);
    if (!quiet)
        fprintf(stderr, "init: the weights of %s (step %lld%s%s); optimizer, step, best BPC and patience start afresh\n",
                cli_shown(t->init_from), t->init_step, t->init_run[0] ? " of run " : "", cli_shown(t->init_run));
    return 0;
}

int train_init_opts(trainer *t) {
    const size_t used = strlen(t->opts_text);
    const int w = snprintf(t->opts_text + used, sizeof t->opts_text - used,
                           "init-from=%s\ninit-from-run=%s\ninit-from-step=%lld\n", t->init_from,
                           t->init_run[0] ? t->init_run : "unknown", t->init_step);
    if (w < 0 || (size_t)w >= sizeof t->opts_text - used) {
        t->opts_text[used] = 0;
        return cli_error("train", "--init-from %s: the path is too long to store", t->init_from);
    }
    return 0;
}

void train_init_vocab_note(const trainer *t, lipt_error *err) {
    const char *p = strstr(err->msg, " is not in the vocabulary");
    if (!p) return;
    char head[LIPT_ERRMSG_LEN];
    snprintf(head, sizeof head, "%.*s", (int)(p - err->msg), err->msg);
    lipt_fail(err, err->status, "%s is not in the vocabulary of %s (%d symbols): a fine-tuned model reads only the "
              "symbols of the text it was trained on. Fine-tune on text made of them, or train the model to start from "
              "with --vocab bytes (every byte has an id) or --unk (unseen symbols read as one unknown id)", head,
              t->init_from, t->vocab.n_sym);
}

void train_log_init(trainer *t) {
    json_w j;
    char id[32] = "";
    run_opt_get(t->opts_text, "run-id", id, sizeof id);
    json_begin(&j, t->log);
    json_int(&j, "step", 0);
    json_str(&j, "event", "init");
    json_str(&j, "run_id", id);
    json_str(&j, "from", t->init_from);
    json_str(&j, "from_run", t->init_run[0] ? t->init_run : "unknown");
    json_int(&j, "from_step", t->init_step);
    json_end(&j);
}
