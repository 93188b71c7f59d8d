/* What a run folder records besides its checkpoints: run.cfg (the settings) and metrics.jsonl cut back to the
 * resumed step. */
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli.h"
#include "lipt/checkpoint.h"
#include "run.h"
#include "train_run.h"
#include "train_setup.h"

/* The training wall time up to `step`: the last elapsed_s of metrics.jsonl at or before it (0 when there is none).
 * Read back from the run's log rather than stored in the checkpoint, so that checkpoints stay the same bytes on any
 * machine, speed and thread count. */
double train_metrics_elapsed(const char *path, int64_t step) {
    lipt_error err = {0};
    FILE *f = lipt_open_regular(path, NULL, &err);
    if (!f) return 0;
    char line[4096];
    double e = 0;
    while (fgets(line, sizeof line, f)) {
        const char *s = strstr(line, "\"step\":"), *x = strstr(line, "\"elapsed_s\":");
        if (!s || !x || atoll(s + 7) > step) continue;
        const double v = atof(x + 12);
        if (isfinite(v) && v >= 0) e = v;
    }
    fclose(f);
    return e;
}

/* Keep metrics.jsonl lines up to `step` (a resumed run rewrites what came after its checkpoint). */
lipt_status train_truncate_metrics(const char *path, int64_t step, lipt_error *err) {
    FILE *f = lipt_open_regular(path, NULL, err); /* a FIFO there is refused, never waited on */
    if (!f) return errno == ENOENT ? LIPT_OK : err->status; /* missing: no log yet */
    char line[4096];
    int later = 0; /* a line past the checkpoint's step: only then is there anything to rewrite */
    while (!later && fgets(line, sizeof line, f)) {
        const char *s = strstr(line, "\"step\":");
        later = s && atoll(s + 7) > step;
    }
    if (!later) {
        fclose(f);
        return LIPT_OK;
    }
    rewind(f);
    /* through the one atomic writer: the log is replaced only once its new contents are safely on disk (a full disk
     * must not empty it), and never written through a planted symlink */
    lipt_output o;
    lipt_error why = {0};
    lipt_status st = lipt_output_open(&o, path, &why);
    while (st == LIPT_OK && fgets(line, sizeof line, f)) {
        const char *s = strstr(line, "\"step\":");
        if ((s ? atoll(s + 7) : 0) <= step && fputs(line, o.f) < 0) break; /* the stream's error: commit reports it */
    }
    fclose(f);
    if (st == LIPT_OK) st = lipt_output_commit(&o, &why);
    if (st != LIPT_OK)
        return lipt_fail(err, LIPT_ERR_IO, "cannot rewrite %s to step %lld: %s; nothing changed", path, (long long)step,
                         why.msg);
    return LIPT_OK;
}

/* The first line of run.cfg: what it says about repeating the run. */
#define RUN_CFG_REPEATS "the settings of this run; lipt train --config %s --out DIR repeats it"
#define RUN_CFG_RESUMED                                                                                             \
    "the settings this run started with; it was resumed with other settings (the blocks at the end of this file), " \
    "so no one command repeats it"

/* The text of run.cfg for the model config cfg and the stored options opts ("key=value\n"): model keys, training keys
 * as given (the corpus by its absolute path), other stored values as comments; first the lipt version, the git revision
 * and head (what the file is). 0, or -1 when it does not fit in n. */
static int run_cfg_text(const char *head, const lipt_config *cfg, const char *opts, char *out, size_t n) {
    char text[4096];
    size_t k = (size_t)snprintf(out, n, "# lipt %s (git %s): %s\n\n# model\n", LIPT_VERSION_STR, LIPT_GIT_HASH_STR, head);
    lipt_config_to_text(cfg, text, sizeof text);
    k += (size_t)snprintf(out + k, k < n ? n - k : 0, "%s\n# training\n", text);
    char abs[1100] = "";
    run_opt_get(opts, "data-abs", abs, sizeof abs);
    for (const char *p = opts; *p && k < n;) {
        const char *nl = strchr(p, '\n'), *eq = strchr(p, '=');
        const int len = nl ? (int)(nl - p) : (int)strlen(p);
        if (eq && eq < p + len) {
            const int kl = (int)(eq - p);
            char key[64];
            snprintf(key, sizeof key, "%.*s", kl, p);
            const size_t room = n - k;
            if (strcmp(key, TRAIN_EVALS_SINCE_BEST) == 0)
                ; /* the state of a checkpoint, not of the run's settings */
            else if (train_persisted_index(key) < 0) /* recorded, not a setting */
                k += (size_t)snprintf(out + k, room, "# %s = %.*s\n", key, len - kl - 1, eq + 1);
            else if (strcmp(key, "data") == 0 && abs[0])
                k += (size_t)snprintf(out + k, room, "data = %s    # given as %.*s\n", abs, len - kl - 1, eq + 1);
            else
                k += (size_t)snprintf(out + k, room, "%s = %.*s\n", key, len - kl - 1, eq + 1);
        }
        p += len + (nl ? 1 : 0);
    }
    return k < n ? 0 : -1;
}

static void replace_run_cfg(const char *path, const char *text) {
    lipt_error err = {0};
    if (run_replace_file(path, text, &err) != LIPT_OK)
        fprintf(stderr, "note: %s (the run goes on; its checkpoints hold the same settings)\n", cli_shown(err.msg));
}

/* DIR/run.cfg: every setting of the run: `lipt train --config DIR/run.cfg --out OTHER` repeats the run (a fine-tune:
 * with --init-from its checkpoint). */
void train_write_run_cfg(const trainer *t) {
    char path[1300], head[4000], out[16384];
    snprintf(path, sizeof path, "%s/run.cfg", t->out);
    if (t->init_from[0])
        snprintf(head, sizeof head, "the settings of this run; lipt train --init-from %s --config %s --out DIR repeats it "
                 "(a fine-tune of step %lld of run %s)", t->init_from, path, t->init_step,
                 t->init_run[0] ? t->init_run : "unknown");
    else
        snprintf(head, sizeof head, RUN_CFG_REPEATS, path);
    if (run_cfg_text(head, &t->cfg, t->opts_text, out, sizeof out) == 0) replace_run_cfg(path, out);
}

/* A value for a comment line: control bytes (a newline would end the comment) as '?'. */
static void comment_value(char *dst, size_t n, const char *v) {
    snprintf(dst, n, "%s", v);
    for (char *p = dst; *p; p++)
        if ((unsigned char)*p < 0x20 || *p == 0x7f) *p = '?';
}

void train_record_resume_cfg(const trainer *t) {
    char path[1300];
    snprintf(path, sizeof path, "%s/run.cfg", t->out);
    const size_t cap = (size_t)1 << 20;
    char *out = malloc(cap);
    if (!out) return;
    size_t k = 0;
    lipt_error err = {0};
    uint64_t size = 0;
    FILE *f = lipt_open_regular(path, &size, &err);
    if (f && size < cap / 2) { /* the run's own record: kept as it is */
        k = fread(out, 1, (size_t)size, f);
        out[k] = 0;
    } else if (!f && errno == ENOENT) { /* resumed into another folder: the settings of the checkpoint it continues */
        char head[1500];
        snprintf(head, sizeof head, "the settings of %s at step %lld, which this run continues, so no one command "
                 "repeats it", t->resumed_from, (long long)t->step);
        if (run_cfg_text(head, &t->stored_cfg, t->stored_opts, out, cap / 2) == 0) k = strlen(out);
    }
    if (f) fclose(f);
    if (k == 0 || (f && t->n_changes == 0)) { /* unreadable (say nothing more), or nothing to add */
        free(out);
        return;
    }
    if (t->n_changes > 0) {
        /* the first line must stay true: the run is no longer repeated by its settings alone */
        char *nl = strchr(out, '\n'), *said = strstr(out, "): the settings of this run;");
        if (nl && said && said < nl) {
            char *rest = strdup(nl);
            if (rest) {
                k = (size_t)(said - out) + (size_t)snprintf(said, cap - (size_t)(said - out), "): " RUN_CFG_RESUMED "%s",
                                                             rest);
                free(rest);
            }
        }
        if (k > 0 && out[k - 1] != '\n') out[k++] = '\n';
        k += (size_t)snprintf(out + k, cap - k, "\n# resumed at step %lld with:", (long long)t->step);
        for (int i = 0; i < t->n_changes && k < cap; i++) {
            char was[1100], now[1100];
            comment_value(was, sizeof was, t->changes[i].was);
            comment_value(now, sizeof now, t->changes[i].now);
            k += (size_t)snprintf(out + k, cap - k, "%s %s %s (was %s)", i ? "," : "", t->changes[i].key, now, was);
        }
        if (k < cap) k += (size_t)snprintf(out + k, cap - k, "\n");
    }
    if (k < cap) replace_run_cfg(path, out);
    free(out);
}

void train_log_resume(trainer *t) {
    json_w j;
    json_begin(&j, t->log);
    json_int(&j, "step", t->step);
    json_str(&j, "event", "resume");
    json_num(&j, "elapsed_s", t->elapsed_base);
    json_obj_open(&j, "changed");
    for (int i = 0; i < t->n_changes; i++) {
        json_obj_open(&j, t->changes[i].key);
        json_str(&j, "was", t->changes[i].was);
        json_str(&j, "now", t->changes[i].now);
        json_obj_close(&j);
    }
    json_obj_close(&j);
    char id[32] = "";
    if (run_opt_get(t->opts_text, "run-id", id, sizeof id) == 0) json_str(&j, "run_id", id);
    json_str(&j, "from", t->resumed_from);
    if (t->kept_aside[0]) json_str(&j, "kept_aside", t->kept_aside); /* --force: what this resume did not replace */
    json_end(&j);
}
