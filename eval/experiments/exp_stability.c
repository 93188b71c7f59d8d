/* lipt experiment stability (SPEC §4.4, paper Fig. 11): training without warmup, a grid of PTB runs with Adam at a
 * fixed learning rate and growing depth; records the loss curves and detects divergence. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "exp_grid.h"
#include "metrics_read.h"
#include "svg.h"

typedef struct {
    int variant, depth;
    long steps_done;
    double first_loss, min_loss, final_loss, valid_bpc, max_gnorm, max_spread;
    int diverged;          /* 0 stable, 1 non-finite, 2 blow-up (smoothed loss rose by > rise above its minimum) */
    long diverge_step;
} stab_row;

#define STAB_HEADER                                                                                                    \
    "variant,depth,steps_done,first_loss,min_loss,final_loss,final_train_bpc,valid_bpc,max_grad_norm,"               \
    "max_attn_logit_spread,outcome,diverge_step,settings"

static const char *stab_kind(int d) { return d == 0 ? "stable" : d == 1 ? "non-finite" : "blow-up"; }

static int take_stab_row(char **f, const double *v, void *row, void *user) {
    stab_row *r = row;
    *r = (stab_row){.variant = exp_variant_index(user, f[0]), .depth = (int)v[1], .steps_done = (long)v[2],
                    .first_loss = v[3], .min_loss = v[4], .final_loss = v[5], .valid_bpc = v[7], .max_gnorm = v[8],
                    .max_spread = v[9], .diverged = strcmp(f[10], "stable") == 0 ? 0 : strcmp(f[10], "non-finite") == 0 ? 1 : 2,
                    .diverge_step = (long)v[11]};
    return r->variant >= 0;
}

static int cmp_stab_row(const void *p, const void *q) {
    const stab_row *a = p, *b = q;
    if (a->variant != b->variant) return a->variant - b->variant;
    return a->depth - b->depth;
}

/* Loss curve of a run from its metrics.jsonl (training lines only); the largest gradient norm and attention logit
 * spread logged go to *gmax, *smax when given. */
static int read_curve(const char *dir, double *step, double *loss, int cap, double *gmax, double *smax) {
    char p[1200];
    snprintf(p, sizeof p, "%s/metrics.jsonl", dir);
    FILE *f = lipt_open_regular(p, NULL, NULL); /* regular files only: never waits on a FIFO */
    if (gmax) *gmax = NAN;
    if (smax) *smax = NAN;
    if (!f) return 0;
    char line[1024];
    int n = 0;
    while (n < cap && fgets(line, sizeof line, f)) {
        if (strstr(line, "\"eval\"") || strstr(line, "\"event\"")) continue;
        double s = metrics_number(line, "step"), l = metrics_number(line, "loss");
        if (!isfinite(s)) continue;
        const double gn = metrics_number(line, "grad_norm"), sp = metrics_number(line, "attn_logit_spread");
        if (gmax && isfinite(gn) && !(gn <= *gmax)) *gmax = gn;
        if (smax && isfinite(sp) && !(sp <= *smax)) *smax = sp;
        step[n] = s;
        loss[n] = l;
        n++;
    }
    fclose(f);
    return n;
}

/* Divergence, detected: a non-finite loss (training stops itself), or the loss averaged over `win` logged steps rising
 * more than `rise` nats above the lowest such average seen before. */
static void detect(stab_row *r, const double *step, const double *loss, int n, int win, double rise) {
    r->steps_done = n ? (long)step[n - 1] : 0;
    r->first_loss = n ? loss[0] : NAN;
    r->min_loss = INFINITY;
    r->diverge_step = -1;
    double best = INFINITY, sum = 0;
    for (int i = 0; i < n; i++) {
        if (!isfinite(loss[i])) break;
        if (loss[i] < r->min_loss) r->min_loss = loss[i];
        sum += loss[i];
        if (i >= win) sum -= loss[i - win];
        if (i + 1 < win) continue;
        const double avg = sum / win;
        if (avg < best) best = avg;
        if (r->diverged == 0 && avg > best + rise) {
            r->diverged = 2;
            r->diverge_step = (long)step[i];
        }
    }
    int w = n < win ? n : win;
    double s = 0;
    for (int i = n - w; i < n; i++) s += loss[i];
    r->final_loss = w ? s / w : NAN;
}

static void stab_dir(const exp_grid *g, int v, int depth, char *dir, size_t n) {
    char key[256];
    exp_grid_key(g, key, sizeof key);
    snprintf(dir, n, "%s/stab-%s-L%d-%s", g->runs, g->variant[v], depth, key);
}

/* One plot per variant of every depth's loss curve, and their CSV. */
static lipt_status write_stab_curves(const exp_grid *g, const stab_row *rows, int n, lipt_error *err) {
    char path[1100];
    snprintf(path, sizeof path, "%s/stability_curves.csv", g->out);
    exp_out o;
    lipt_status st = exp_open(&o, path, err);
    if (st != LIPT_OK) return st;
    fprintf(o.f, "variant,depth,step,loss\n");
    enum { CAP = 20000 };
    double *sx = malloc(sizeof(double) * CAP * MAX_DEPTHS), *sy = malloc(sizeof(double) * CAP * MAX_DEPTHS);
    if (!sx || !sy) {
        free(sx); free(sy);
        exp_discard(&o);
        return lipt_fail(err, LIPT_ERR_NOMEM, "out of memory for the stability curves plot");
    }
    for (int v = 0; v < MAX_VARIANTS && st == LIPT_OK; v++) {
        svg_series s[MAX_DEPTHS];
        char lab[MAX_DEPTHS][48];
        int ns = 0;
        double lo = INFINITY, hi = -INFINITY;
        for (int i = 0; i < n && ns < MAX_DEPTHS; i++) {
            if (rows[i].variant != v) continue;
            char dir[1100];
            stab_dir(g, v, rows[i].depth, dir, sizeof dir);
            double *x = sx + (size_t)ns * CAP, *y = sy + (size_t)ns * CAP;
            int m = read_curve(dir, x, y, CAP, NULL, NULL);
            for (int k = 0; k < m; k++) {
                fprintf(o.f, "%s,%d,%.0f,%.5f\n", g->variant[v], rows[i].depth, x[k], y[k]);
                if (isfinite(y[k])) { lo = fmin(lo, y[k]); hi = fmax(hi, y[k]); }
            }
            snprintf(lab[ns], sizeof lab[0], "%d layers%s", rows[i].depth, rows[i].diverged ? " (diverged)" : "");
            s[ns] = (svg_series){lab[ns], x, y, m, svg_color(ns), SVG_MARK_NONE, 1, SVG_SOLID, 1.2};
            ns++;
        }
        if (!ns) continue;
        char title[200];
        snprintf(title, sizeof title, "%s: training loss, Adam lr %g constant, no warmup, clip %g, d_model %ld", g->variant[v],
                 g->lr, g->clip, g->d_model);
        svg_plot p = svg_plot_defaults();
        p.title = title;
        p.xlabel = "step";
        p.ylabel = "training loss (nats per symbol)";
        p.width = 960;
        if (isfinite(lo)) { /* fitted to the curves, the first steps' loss (about ln V) included */
            p.ymin = fmax(0, lo - 0.05 * (hi - lo));
            p.ymax = hi + 0.05 * (hi - lo);
        }
        snprintf(path, sizeof path, "%s/stability_%s.svg", g->out, g->variant[v]);
        st = svg_write_file(path, &p, s, ns, err);
    }
    free(sx);
    free(sy);
    if (st != LIPT_OK) { exp_discard(&o); return st; }
    return exp_commit(&o, err);
}

static lipt_status write_stab_outputs(const exp_grid *g, stab_row *rows, int n, lipt_error *err) {
    qsort(rows, (size_t)n, sizeof *rows, cmp_stab_row);
    char path[1100], key[256];
    exp_grid_key(g, key, sizeof key);
    snprintf(path, sizeof path, "%s/stability.csv", g->out);
    exp_out o;
    lipt_status st = exp_open(&o, path, err);
    if (st != LIPT_OK) return st;
    fprintf(o.f, STAB_HEADER "\n");
    for (int i = 0; i < n; i++) {
        const stab_row *r = &rows[i];
        fprintf(o.f, "%s,%d,%ld,%.5f,%.5f,%.5f,%.5f,%.5f,%.5g,%.5g,%s,%ld,%s\n", g->variant[r->variant], r->depth,
                r->steps_done, r->first_loss, r->min_loss, r->final_loss, r->final_loss / log(2.0), r->valid_bpc,
                r->max_gnorm, r->max_spread, stab_kind(r->diverged), r->diverge_step, key);
    }
    if ((st = exp_commit(&o, err)) != LIPT_OK) return st;
    if ((st = write_stab_curves(g, rows, n, err)) != LIPT_OK) return st;
    /* final loss against depth */
    double xs[MAX_VARIANTS][MAX_DEPTHS], ys[MAX_VARIANTS][MAX_DEPTHS];
    int cnt[MAX_VARIANTS] = {0};
    for (int i = 0; i < n; i++) {
        int v = rows[i].variant, k = cnt[v];
        if (k >= MAX_DEPTHS) continue;
        xs[v][k] = rows[i].depth;
        ys[v][k] = rows[i].diverged == 1 ? NAN : rows[i].final_loss / log(2.0);
        cnt[v]++;
    }
    svg_series s[MAX_VARIANTS];
    int ns = 0;
    for (int v = 0; v < MAX_VARIANTS; v++)
        if (cnt[v]) {
            s[ns] = (svg_series){g->variant[v], xs[v], ys[v], cnt[v], svg_color(v), SVG_MARK_CIRCLE, 1, SVG_SOLID, 0};
            ns++;
        }
    char title[256];
    snprintf(title, sizeof title, "final training BPC vs depth: Adam lr %g constant, no warmup, %ld steps, d_model %ld "
             "(gaps: non-finite loss)", g->lr, g->steps, g->d_model);
    svg_plot p = svg_plot_defaults();
    p.title = title;
    p.xlabel = "layers";
    p.ylabel = "training BPC (mean of the last logged steps)";
    p.width = 960;
    snprintf(path, sizeof path, "%s/stability.svg", g->out);
    return svg_write_file(path, &p, s, ns, err);
}

static const cli_opt stab_own[] = {
    {"variants", CLI_STRING, "LIST", "variants, each the PTB model DIR/ptb-VARIANT.cfg of --models: ", /* + the list */
     "dp,l2-tied,contractive"},
    {"depths", CLI_STRING, "LIST", "numbers of layers", "2,4,6,8,10,12,14,16,18"},
    {"steps", CLI_INT, "N", "optimizer steps per run", "300"},
    {"lr", CLI_FLOAT, "LR", "fixed Adam learning rate (no warmup, no decay)", "1e-3"},
    {"clip", CLI_FLOAT, "NORM", "gradient-norm clipping (0: off, as in plain Adam)", "0"},
    {"window", CLI_INT, "N", "logged steps averaged by the divergence test", "20"},
    {"rise", CLI_FLOAT, "NATS", "divergence: the averaged loss rises this far above its minimum", "0.5"},
    {"valid-symbols", CLI_INT, "N", "validation symbols scored per finished cell (0: skip)", "32768"},
    {"out", CLI_STRING, "DIR", "CSV and SVG folder", "runs/experiments/stability"},
    {"runs", CLI_STRING, "DIR", "run directories", "runs/stability"},
};

/* Trains, scores and records one stability cell. 0 done, 1 skipped, or the exit status | 0x100 to stop. */
static int stab_cell(const exp_grid *g, const char *C, stab_row *rows, int *n, int v, int depth, int cell, int total,
                     long win, double rise, long valid_symbols, double t_start) {
    int found = 0, rc = 0;
    for (int i = 0; i < *n; i++) found |= rows[i].variant == v && rows[i].depth == depth;
    char dir[1100], why[128] = "";
    double secs = 0;
    const int tr = exp_grid_cell(g, C, found, cell, total, v, depth, "stab-", 1, g->csv, dir, sizeof dir, &secs, why, sizeof why, &rc);
    if (tr < 0) return 1;
    if (tr == 2) return rc | 0x100;
    enum { CAP = 20000 };
    double *cs = malloc(sizeof(double) * CAP), *cl = malloc(sizeof(double) * CAP);
    if (!cs || !cl) {
        free(cs); free(cl);
        return cli_error(C, "out of memory") | 0x100;
    }
    stab_row r;
    memset(&r, 0, sizeof r);
    r.variant = v;
    r.depth = depth;
    r.valid_bpc = NAN;
    int m = read_curve(dir, cs, cl, CAP, &r.max_gnorm, &r.max_spread);
    detect(&r, cs, cl, m, (int)win, rise);
    free(cs);
    free(cl);
    if (tr == 1) {
        r.diverged = 1;
        r.diverge_step = r.steps_done + 1; /* the step whose loss was not finite (it is not logged) */
    } else if (valid_symbols > 0) {
        double nll;
        long sym;
        const int e = exp_eval_cell(g, dir, "valid", valid_symbols, &r.valid_bpc, &nll, &sym, NULL);
        if (e) return (e == 2 ? 130 : 1) | 0x100;
    }
    rows[(*n)++] = r;
    lipt_error err = {0};
    if (write_stab_outputs(g, rows, *n, &err) != LIPT_OK) return cli_fail(C, &err) | 0x100;
    fprintf(stderr, "[%d/%d] %s, %d layers: %s%s, loss %.3f -> min %.3f -> final %.3f, valid %.3f BPC, max |g| %.3g, "
            "max logit spread %.3g (%.0f s; %.0f s so far)\n", cell, total, g->variant[v], depth, stab_kind(r.diverged),
            r.diverged ? " detected" : "", r.first_loss, r.min_loss, r.final_loss, r.valid_bpc, r.max_gnorm, r.max_spread,
            secs, cli_now() - t_start);
    return 0;
}

static void stab_summary(const exp_grid *g, const stab_row *rows, int n, const int *vars, int nv) {
    printf("%-13s %6s %7s %10s %9s %10s %9s %10s %11s %-11s %s\n", "variant", "layers", "steps", "first_loss", "min_loss",
           "final_loss", "valid_bpc", "max_gnorm", "max_spread", "outcome", "at_step");
    for (int i = 0; i < n; i++)
        printf("%-13s %6d %7ld %10.4f %9.4f %10.4f %9.4f %10.4g %11.4g %-11s %ld\n", g->variant[rows[i].variant],
               rows[i].depth, rows[i].steps_done, rows[i].first_loss, rows[i].min_loss, rows[i].final_loss,
               rows[i].valid_bpc, rows[i].max_gnorm, rows[i].max_spread, stab_kind(rows[i].diverged), rows[i].diverge_step);
    for (int vi = 0; vi < nv; vi++) {
        int first = -1;
        for (int i = 0; i < n; i++)
            if (rows[i].variant == vars[vi] && rows[i].diverged && (first < 0 || rows[i].depth < first)) first = rows[i].depth;
        if (first > 0) printf("%s first diverges at %d layers\n", g->variant[vars[vi]], first);
        else printf("%s: stable at every depth tried\n", g->variant[vars[vi]]);
    }
}

static int stab_main(cli_args *a, const char *C) {
    exp_grid g = {.schedule = "constant", .warmup = 0, .save_every = 50};
    long win, valid_symbols;
    double rise;
    if (cli_float(a, "clip", &g.clip) || cli_int(a, "window", &win) || cli_float(a, "rise", &rise) ||
        cli_int(a, "valid-symbols", &valid_symbols))
        return 2;
    if (win < 1 || rise <= 0 || valid_symbols < 0) return cli_error(C, "--window must be >= 1, --rise > 0, --valid-symbols >= 0");
    static const exp_grid_csv csv = {"stability", STAB_HEADER, 13, sizeof(stab_row), take_stab_row};
    exp_grid_sel sel;
    stab_row rows[MAX_CELLS];
    int n, rc = exp_grid_setup(a, C, &g, &sel, &csv, rows, &n);
    if (rc) return rc;
    const int *vars = sel.vars, nv = sel.nv, nd = sel.nd;
    const double *dl = sel.dl;
    const int total = nv * nd;
    int cell = 0;
    double t_start = cli_now();
    for (int vi = 0; vi < nv && !rc; vi++)
        for (int di = 0; di < nd && !rc; di++) {
            const int r = stab_cell(&g, C, rows, &n, vars[vi], (int)dl[di], ++cell, total, win, rise, valid_symbols, t_start);
            if (r & 0x100) rc = r & 0xff;
        }
    if (!rc) {
        qsort(rows, (size_t)n, sizeof *rows, cmp_stab_row);
        stab_summary(&g, rows, n, vars, nv);
        fprintf(stderr, "wrote %s/stability.csv, stability_curves.csv, stability.svg, stability_<variant>.svg\n", cli_shown(g.out));
    }
    return rc;
}

const exp_def exp_stability = {
    "stability", "Adam at a fixed learning rate, no warmup, depth growing: divergence detected (Fig. 11)",
    "Training stability without warmup (paper Fig. 11, SPEC §4.4): Adam at a fixed learning rate from step 1,\n"
    "depth growing, for each variant; records every loss curve, the largest gradient norm and attention logit\n"
    "spread logged, and detects divergence (a non-finite loss, or the loss averaged over --window logged steps\n"
    "rising --rise nats above its minimum); finished cells are scored on --valid-symbols validation symbols.\n"
    "Writes OUT/stability.csv, OUT/stability_curves.csv, OUT/stability.svg and OUT/stability_<variant>.svg.\n"
    "Resumable; the CSV is tied to its settings (another --lr, --steps or width needs another --out).",
    stab_own, (int)(sizeof stab_own / sizeof stab_own[0]), 1, stab_main,
};
