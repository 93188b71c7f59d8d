/* A run folder is append-only history: before lipt train writes into a folder that holds a run, what it would
 * replace is found (another run's files, or a newer state of the same run), refused without --force, and kept aside
 * with it (last.ckpt -> last.step200.ckpt, metrics lines -> a side file), never deleted. The identity of a run: its
 * run-id (stored options), fixed when it starts. */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "cli.h"
#include "lipt/checkpoint.h"
#include "run.h"
#include "train_run.h"
#include "train_setup.h"

/* A deterministic id: the same settings, corpus and model start the same computation, bit for bit on any machine and
 * thread count, so an id from them keeps every checkpoint the same bytes there (FNV-1a, 64 bits). */
static unsigned long long fnv1a(const char *a, const char *b) {
    unsigned long long h = 1469598103934665603ull;
    for (const char *s = a; *s; s++) h = (h ^ (unsigned char)*s) * 1099511628211ull;
    for (const char *s = b; *s; s++) h = (h ^ (unsigned char)*s) * 1099511628211ull;
    return h;
}

int train_set_run_id(trainer *t, const char *stored_opts, const char *stored_cfg_text) {
    char id[32] = "", cfg_text[4096];
    const char *keep[] = {"run-id", "init-from", "init-from-run", "init-from-step"};
    size_t used = strlen(t->opts_text);
    if (stored_opts) { /* a resume: the run's identity (and origin) go on; a checkpoint from before ids: one now */
        for (int i = 0; i < 4; i++) {
            char v[1100];
            if (run_opt_get(stored_opts, keep[i], v, sizeof v) != 0) continue;
            const int w = snprintf(t->opts_text + used, sizeof t->opts_text - used, "%s=%s\n", keep[i], v);
            if (w < 0 || (size_t)w >= sizeof t->opts_text - used) return cli_error("train", "training options too long to store");
            used += (size_t)w;
        }
        if (run_opt_get(stored_opts, "run-id", id, sizeof id) == 0) return 0;
        snprintf(id, sizeof id, "%016llx", fnv1a(stored_cfg_text ? stored_cfg_text : "", stored_opts));
    } else {
        lipt_config_to_text(&t->cfg, cfg_text, sizeof cfg_text);
        snprintf(id, sizeof id, "%016llx", fnv1a(cfg_text, t->opts_text));
    }
    const int w = snprintf(t->opts_text + used, sizeof t->opts_text - used, "run-id=%s\n", id);
    if (w < 0 || (size_t)w >= sizeof t->opts_text - used) return cli_error("train", "training options too long to store");
    return 0;
}

/* A checkpoint's step and run id ("" when it has none: written before ids); -1 when it cannot be read. */
static int ckpt_identity(const char *path, long long *step, char *id, size_t n) {
    lipt_ckpt ck;
    lipt_error err = {0};
    run_extra x;
    id[0] = 0;
    if (lipt_ckpt_open(path, &ck, &err) != LIPT_OK) return -1;
    *step = (long long)ck.step;
    if (run_extra_unpack(&x, ck.extra, ck.extra_len, &err) == LIPT_OK) run_opt_get(x.opts_text, "run-id", id, n);
    lipt_ckpt_close(&ck);
    return 0;
}

static int same_file(const char *a, const char *b) {
    struct stat sa, sb;
    return stat(a, &sa) == 0 && stat(b, &sb) == 0 && sa.st_dev == sb.st_dev && sa.st_ino == sb.st_ino;
}

/* dir/stem.tag.ext, or stem.tag-2.ext ... when taken: a name that holds nothing yet. */
static void aside_name(const char *dir, const char *stem, const char *tag, const char *ext, char *out, size_t n) {
    char path[1400];
    for (int k = 1; k < 1000; k++) {
        if (k == 1) snprintf(out, n, "%s.%s%s", stem, tag, ext);
        else snprintf(out, n, "%s.%s-%d%s", stem, tag, k, ext);
        snprintf(path, sizeof path, "%s/%s", dir, out);
        if (access(path, F_OK) != 0 && errno == ENOENT) return;
    }
}

/* What writing into the folder would replace, and where --force keeps it. */
typedef struct {
    int n;
    char from[4][16], to[4][96];
    int metrics_after;      /* 1: the metrics lines past `after` go to metrics_to; 0: none */
    long long after;
    char metrics_to[96];
    char other_id[32];      /* the folder's run when it is another one ("" when not) */
    long long other_step;   /* its newest checkpoint's step */
    char other_name[16];
    long long newer_step;   /* the same run's newest checkpoint past the resume point (-1: none) */
    char newer_name[16];
} history_plan;

static void plan_move(history_plan *p, const char *dir, const char *name, const char *tag, const char *ext) {
    char stem[16];
    snprintf(stem, sizeof stem, "%.*s", (int)(strchr(name, '.') - name), name);
    snprintf(p->from[p->n], sizeof p->from[0], "%s", name);
    aside_name(dir, stem, tag, ext, p->to[p->n], sizeof p->to[0]);
    p->n++;
}

/* The plan for writing a run `id` at step `step` (resumed from `src`, NULL for a fresh run) into dir. */
static void make_plan(const char *dir, const char *src, const char *id, long long step, history_plan *p) {
    static const char *const names[] = {"last.ckpt", "best.ckpt"};
    memset(p, 0, sizeof *p);
    p->other_step = p->newer_step = -1;
    char path[1300], oid[32], tag[64];
    long long ostep[2] = {-1, -1};
    char oids[2][32] = {"", ""};
    for (int i = 0; i < 2; i++) {
        snprintf(path, sizeof path, "%s/%s", dir, names[i]);
        if (access(path, F_OK) != 0 || (src && same_file(path, src))) continue;
        if (ckpt_identity(path, &ostep[i], oid, sizeof oid) != 0) continue; /* unreadable: resume's own checks */
        snprintf(oids[i], sizeof oids[i], "%s", oid);
        const int other = !src || (oid[0] && id[0] && strcmp(oid, id) != 0);
        if (other && ostep[i] > p->other_step) {
            p->other_step = ostep[i];
            snprintf(p->other_id, sizeof p->other_id, "%s", oid[0] ? oid : "of unknown id");
            snprintf(p->other_name, sizeof p->other_name, "%s", names[i]);
        } else if (!other && i == 0 && ostep[i] > step) {
            /* a roll back: the run's resumable state (last.ckpt) is past the resume point. A newer best.ckpt alone is
             * the window between the two saves of an evaluation (a kill there): the resume recomputes it */
            p->newer_step = ostep[i];
            snprintf(p->newer_name, sizeof p->newer_name, "%s", names[i]);
        }
    }
    for (int i = 0; i < 2; i++) {
        const int other = ostep[i] >= 0 && (!src || (oids[i][0] && id[0] && strcmp(oids[i], id) != 0));
        if (ostep[i] < 0 || (!other && (ostep[i] <= step || p->newer_step < 0))) continue;
        snprintf(tag, sizeof tag, "step%lld", ostep[i]);
        plan_move(p, dir, names[i], tag, ".ckpt");
    }
    if (p->other_step >= 0) { /* another run: its whole record goes aside */
        snprintf(tag, sizeof tag, "%.16s", p->other_id[0] == 'o' ? "earlier" : p->other_id);
        snprintf(path, sizeof path, "%s/metrics.jsonl", dir);
        if (access(path, F_OK) == 0) plan_move(p, dir, "metrics.jsonl", tag, ".jsonl");
        snprintf(path, sizeof path, "%s/run.cfg", dir);
        if (access(path, F_OK) == 0) plan_move(p, dir, "run.cfg", tag, ".cfg");
    } else if (p->newer_step >= 0) { /* the same run rolled back: its lines past the resume point */
        p->metrics_after = 1;
        p->after = step;
        snprintf(tag, sizeof tag, "after%lld", step);
        aside_name(dir, "metrics", tag, ".jsonl", p->metrics_to, sizeof p->metrics_to);
    }
}

/* "last.ckpt as last.step20.ckpt, ..." */
static void describe_moves(const history_plan *p, char *out, size_t n) {
    size_t k = 0;
    out[0] = 0;
    for (int i = 0; i < p->n && k < n; i++)
        k += (size_t)snprintf(out + k, n - k, "%s%s as %s", i ? ", " : "", p->from[i], p->to[i]);
    if (p->metrics_after && k < n)
        snprintf(out + k, n - k, "%smetrics past step %lld in %s", k ? ", " : "", p->after, p->metrics_to);
}

/* Metrics lines past `after` copied into dir/to (a new file), then cut from metrics.jsonl: never lost in between. */
static lipt_status move_metrics_after(const trainer *t, const char *to, long long after, lipt_error *err) {
    char path[1400], line[4096];
    snprintf(path, sizeof path, "%s/%s", t->out, to);
    FILE *f = lipt_open_regular(t->metrics_path, NULL, err);
    if (!f) return errno == ENOENT ? LIPT_OK : err->status;
    lipt_output o;
    lipt_status st = lipt_output_open(&o, path, err);
    while (st == LIPT_OK && fgets(line, sizeof line, f)) {
        const char *s = strstr(line, "\"step\":");
        if (s && atoll(s + 7) > after) fputs(line, o.f);
    }
    fclose(f);
    if (st == LIPT_OK) st = lipt_output_commit(&o, err);
    return st == LIPT_OK ? train_truncate_metrics(t->metrics_path, after, err) : st;
}

int train_check_history(trainer *t, int force, int quiet) {
    const char *C = "train";
    char id[32] = "", moves[1024], src_id[40];
    run_opt_get(t->opts_text, "run-id", id, sizeof id);
    history_plan p;
    make_plan(t->out, t->resumed ? t->resumed_from : NULL, id, t->resumed ? (long long)t->step : -1, &p);
    if (p.n == 0 && !p.metrics_after) return 0;
    describe_moves(&p, moves, sizeof moves);
    snprintf(src_id, sizeof src_id, "%s", id[0] ? id : "of unknown id");
    if (!force && !t->resumed)
        return cli_error(C, "%s already holds a run (run %s, %s at step %lld): continue it with --resume, choose another "
                         "--out, or pass --force to start afresh there keeping its files aside (%s)", t->out,
                         p.other_id, p.other_name, p.other_step, moves);
    if (!force && p.other_step >= 0)
        return cli_error(C, "%s holds another run (run %s, %s at step %lld) than %s (run %s, step %lld): resuming there "
                         "would replace its checkpoints and mix two runs in its metrics.jsonl. Resume in the "
                         "checkpoint's own folder, choose a new --out, or pass --force to continue there keeping the "
                         "other run's files aside (%s)", t->out, p.other_id, p.other_name, p.other_step,
                         t->resumed_from, src_id, (long long)t->step, moves);
    if (!force)
        return cli_error(C, "%s (step %lld) is older than %s/%s (step %lld) of the same run (%s): resuming from it "
                         "would roll the run back. Continue from the newest (lipt train --resume --out %s), or pass "
                         "--force to roll back keeping the newer state aside (%s)", t->resumed_from, (long long)t->step,
                         t->out, p.newer_name, p.newer_step, src_id, t->out, moves);
    lipt_error err = {0};
    char from[1400], to[1400];
    if (p.metrics_after && move_metrics_after(t, p.metrics_to, p.after, &err) != LIPT_OK) return cli_fail(C, &err);
    for (int i = 0; i < p.n; i++) {
        snprintf(from, sizeof from, "%s/%s", t->out, p.from[i]);
        snprintf(to, sizeof to, "%s/%s", t->out, p.to[i]);
        if (lipt_move_aside(from, to, &err) != LIPT_OK) return cli_fail(C, &err);
    }
    snprintf(t->kept_aside, sizeof t->kept_aside, "%s", moves);
    if (!quiet) fprintf(stderr, "note: --force: kept aside in %s: %s\n", cli_shown(t->out), cli_shown(moves));
    return 0;
}
