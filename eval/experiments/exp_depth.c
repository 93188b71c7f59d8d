/* lipt experiment depth (SPEC §4.3, paper Fig. 4): expressiveness by depth, a grid of PTB training runs of every
 * attention variant at every depth on the same budget, scored on validation and test BPC. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "exp_grid.h"
#include "svg.h"

typedef struct {
    int variant, depth;
    long params, steps;
    double train_s, valid_bpc, test_bpc, valid_nll, test_nll;
    long valid_symbols, test_symbols;
    int diverged;
} depth_row;

#define DEPTH_HEADER                                                                                                   \
    "variant,depth,params,steps,train_seconds,valid_bpc,valid_symbols,valid_nll,test_bpc,test_symbols,test_nll,"      \
    "diverged,settings"

static int take_depth_row(char **f, const double *v, void *row, void *user) {
    depth_row *r = row;
    *r = (depth_row){.variant = exp_variant_index(user, f[0]), .depth = (int)v[1], .params = (long)v[2], .steps = (long)v[3],
                     .train_s = v[4], .valid_bpc = v[5], .valid_symbols = (long)v[6], .valid_nll = v[7], .test_bpc = v[8],
                     .test_symbols = (long)v[9], .test_nll = v[10], .diverged = (int)v[11]};
    return r->variant >= 0;
}

static int cmp_depth_row(const void *p, const void *q) {
    const depth_row *a = p, *b = q;
    if (a->variant != b->variant) return a->variant - b->variant;
    return a->depth - b->depth;
}

static lipt_status write_depth_outputs(const char *outdir, depth_row *rows, int n, const exp_grid *g, lipt_error *err) {
    qsort(rows, (size_t)n, sizeof *rows, cmp_depth_row);
    char path[1100];
    snprintf(path, sizeof path, "%s/depth.csv", outdir);
    exp_out o;
    lipt_status st = exp_open(&o, path, err);
    if (st != LIPT_OK) return st;
    char key[256];
    exp_grid_key(g, key, sizeof key);
    fprintf(o.f, DEPTH_HEADER "\n");
    for (int i = 0; i < n; i++) {
        const depth_row *r = &rows[i];
        fprintf(o.f, "%s,%d,%ld,%ld,%.1f,%.5f,%ld,%.5f,%.5f,%ld,%.5f,%d,%s\n", g->variant[r->variant], r->depth,
                r->params, r->steps, r->train_s, r->valid_bpc, r->valid_symbols, r->valid_nll, r->test_bpc,
                r->test_symbols, r->test_nll, r->diverged, key);
    }
    if ((st = exp_commit(&o, err)) != LIPT_OK) return st;
    /* BPC against depth: validation solid, test dashed, one colour per variant */
    double xs[MAX_VARIANTS][MAX_DEPTHS], yv[MAX_VARIANTS][MAX_DEPTHS], yt[MAX_VARIANTS][MAX_DEPTHS];
    int cnt[MAX_VARIANTS] = {0};
    for (int i = 0; i < n; i++) {
        int v = rows[i].variant, k = cnt[v];
        if (k >= MAX_DEPTHS) continue;
        xs[v][k] = rows[i].depth;
        yv[v][k] = rows[i].diverged ? NAN : rows[i].valid_bpc;
        yt[v][k] = rows[i].diverged ? NAN : rows[i].test_bpc;
        cnt[v]++;
    }
    svg_series s[2 * MAX_VARIANTS];
    char lab[2 * MAX_VARIANTS][64];
    int ns = 0;
    static const svg_marker marks[5] = {SVG_MARK_CIRCLE, SVG_MARK_SQUARE, SVG_MARK_TRIANGLE, SVG_MARK_DIAMOND, SVG_MARK_CROSS};
    for (int v = 0; v < MAX_VARIANTS; v++) {
        if (!cnt[v]) continue;
        snprintf(lab[ns], sizeof lab[0], "%s (validation)", g->variant[v]);
        s[ns] = (svg_series){lab[ns], xs[v], yv[v], cnt[v], svg_color(v), marks[v % 5], 1, SVG_SOLID, 0};
        ns++;
        snprintf(lab[ns], sizeof lab[0], "%s (test)", g->variant[v]);
        s[ns] = (svg_series){lab[ns], xs[v], yt[v], cnt[v], svg_color(v), marks[v % 5], 1, SVG_DASHED, 1.2};
        ns++;
    }
    char title[256];
    snprintf(title, sizeof title, "PTB characters: BPC vs depth (d_model %ld, %ld heads, seq %ld, %ld steps x batch %ld)",
             g->d_model, g->heads, g->seq_len, g->steps, g->batch);
    svg_plot p = svg_plot_defaults();
    p.title = title;
    p.xlabel = "layers";
    p.ylabel = "bits per character";
    p.width = 960;
    snprintf(path, sizeof path, "%s/depth.svg", outdir);
    return svg_write_file(path, &p, s, ns, err);
}

static const cli_opt depth_own[] = {
    {"variants", CLI_STRING, "LIST", "variants, each the PTB model DIR/ptb-VARIANT.cfg of --models: ", /* + the list */
     "dp,l2,l2-tied,contractive"},
    {"depths", CLI_STRING, "LIST", "numbers of layers", "1,2,4,8,12"},
    {"steps", CLI_INT, "N", "optimizer steps of every cell (the same budget for all)", "1000"},
    {"lr", CLI_FLOAT, "LR", "peak learning rate (warmup then 1/sqrt decay)", "2e-3"},
    {"warmup", CLI_INT, "N", "linear warmup steps", "100"},
    {"clip", CLI_FLOAT, "NORM", "gradient-norm clipping", "1"},
    {"valid-symbols", CLI_INT, "N", "validation symbols scored per cell (0: the whole split)", "0"},
    {"out", CLI_STRING, "DIR", "CSV and SVG folder", "runs/experiments/depth"},
    {"runs", CLI_STRING, "DIR", "run directories of the cells (checkpoints, logs)", "runs/depth"},
};

static int depth_main(cli_args *a, const char *C) {
    exp_grid g = {.schedule = "invsqrt", .save_every = 100};
    long valid_symbols;
    if (cli_int(a, "warmup", &g.warmup) || cli_float(a, "clip", &g.clip) || cli_int(a, "valid-symbols", &valid_symbols))
        return 2;
    static const exp_grid_csv csv = {"depth", DEPTH_HEADER, 13, sizeof(depth_row), take_depth_row};
    exp_grid_sel sel;
    depth_row rows[MAX_CELLS];
    int n, rc = exp_grid_setup(a, C, &g, &sel, &csv, rows, &n);
    if (rc) return rc;
    const int *vars = sel.vars, nv = sel.nv, nd = sel.nd;
    const double *dl = sel.dl;
    lipt_error err = {0};
    const int total = nv * nd;
    int cell = 0, written = 0;
    double t_start = cli_now();
    for (int vi = 0; vi < nv && !rc; vi++)
        for (int di = 0; di < nd && !rc; di++) {
            const int v = vars[vi], depth = (int)dl[di];
            cell++;
            int found = 0;
            for (int i = 0; i < n; i++) found |= rows[i].variant == v && rows[i].depth == depth;
            char dir[1100], why[128] = "";
            double secs = 0;
            const int tr = exp_grid_cell(&g, C, found, cell, total, v, depth, "", 10, g.csv, dir, sizeof dir, &secs, why, sizeof why, &rc);
            if (tr < 0) continue;
            if (tr == 2) break;
            depth_row r;
            memset(&r, 0, sizeof r);
            r.variant = v;
            r.depth = depth;
            r.steps = g.steps;
            r.train_s = secs;
            r.diverged = tr == 1;
            r.valid_bpc = r.test_bpc = r.valid_nll = r.test_nll = NAN;
            if (!r.diverged) {
                int e = exp_eval_cell(&g, dir, "valid", valid_symbols, &r.valid_bpc, &r.valid_nll, &r.valid_symbols, &r.params);
                if (!e) e = exp_eval_cell(&g, dir, "test", 0, &r.test_bpc, &r.test_nll, &r.test_symbols, NULL);
                if (e == 2) { rc = 130; break; }
                if (e) { rc = 1; break; }
            }
            rows[n++] = r;
            written = 1;
            if (write_depth_outputs(g.out, rows, n, &g, &err) != LIPT_OK) { rc = cli_fail(C, &err); break; }
            if (r.diverged) fprintf(stderr, "[%d/%d] %s, %d layers: diverged (%s) after %.0f s\n", cell, total, g.variant[v], depth, why, secs);
            else
                fprintf(stderr, "[%d/%d] %s, %d layers: valid %.4f, test %.4f BPC (%.0f s of training; %.0f s so far)\n",
                        cell, total, g.variant[v], depth, r.valid_bpc, r.test_bpc, secs, cli_now() - t_start);
        }
    /* a grid with nothing left to train (or CSVs of one grid run in parts, concatenated) still gets its figure */
    if (!rc && !written && write_depth_outputs(g.out, rows, n, &g, &err) != LIPT_OK) rc = cli_fail(C, &err);
    if (!rc) {
        printf("%-12s %6s %10s %9s %10s %10s\n", "variant", "layers", "params", "train_s", "valid_bpc", "test_bpc");
        for (int i = 0; i < n; i++)
            printf("%-12s %6d %10ld %9.0f %10.4f %10.4f%s\n", g.variant[rows[i].variant], rows[i].depth, rows[i].params,
                   rows[i].train_s, rows[i].valid_bpc, rows[i].test_bpc, rows[i].diverged ? "  (diverged)" : "");
        fprintf(stderr, "wrote %s/depth.csv and %s/depth.svg\n", cli_shown(g.out), cli_shown(g.out));
    }
    return rc;
}

const exp_def exp_depth = {
    "depth", "PTB BPC against depth, same budget per cell (Fig. 4)",
    "Expressiveness by depth (paper Fig. 4, SPEC §4.3): trains every attention variant at every depth on the\n"
    "same budget (steps x batch x context, same data order), then scores validation and test BPC in\n"
    "non-overlapping windows of seq-len. Writes OUT/depth.csv and OUT/depth.svg after every cell.\n"
    "Resumable: cells in the CSV are skipped, an unfinished cell continues from its checkpoint.",
    depth_own, (int)(sizeof depth_own / sizeof depth_own[0]), 1, depth_main,
};
