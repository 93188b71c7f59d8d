/* lipt experiment invertibility (SPEC §4.2, paper Fig. 3): numerical invertibility of residual attention maps by
 * fixed-point iteration; a table on stdout, CSV files and one SVG figure (a panel per attention and c), optionally one
 * JSON object. A setting's status: converged (stopping rule met, x* reconstructed), stalled (stopping rule met, error
 * still above --threshold), not converged (cap reached) or non-finite. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli.h"
#include "exp_attn.h"
#include "exp_util.h"
#include "lipt/invert.h"
#include "lipt/jacobian.h"
#include "lipt/model.h"
#include "run.h"
#include "svg.h"

static const cli_opt inv_opts[] = {
    {"n", CLI_INT, "N", "tokens per input", "16"},
    {"d", CLI_INT, "D", "model width", "8"},
    {"heads", CLI_INT, "H", "attention heads (divides D)", "2"},
    {"c-list", CLI_STRING, "C,C,...", "contraction coefficients c < 1", "0.5,0.7,0.9"},
    {"scales", CLI_STRING, "S,S,...", "input scales (inputs are S times a fixed unit-scale draw)", "1,10,100"},
    {"inputs", CLI_STRING, "spread|gaussian|ptb", "spread: Gaussian tokens with the last token at the origin (it attends "
                                              "to far-out tokens: the DP Jacobian grows like S^2); gaussian: all Gaussian; "
                                              "ptb: the input embeddings (token + position) of the first N test symbols "
                                              "under the trained model --ckpt (D becomes its d_model)",
     "spread"},
    {"ckpt", CLI_STRING, "FILE", "trained model whose embeddings give the inputs (with --inputs ptb)", NULL},
    {"data", CLI_STRING, "NAME|PATH", "corpus of the test windows, with --inputs ptb (default: the checkpoint's own corpus)",
     NULL},
    {"dp-factor", CLI_STRING, "bound|ref", "DP scaling: bound = divide by max(1, UB/c) with UB the inf-norm bound formula "
                                           "of its own W^Q, W^V, W^O (the L2 rule); ref = divide by max(1, |J|_inf/c) "
                                           "with J its exact Jacobian at the unit-scale input", "bound"},
    {"weights", CLI_STRING, "random|ones", "weights N(0, S^2/D) entries, or all entries S", "random"},
    {"weight-scale", CLI_FLOAT, "S", "weight scale S", "1"},
    {"causal", CLI_FLAG, NULL, "causal mask", NULL},
    {"plot-iters", CLI_INT, "K", "x range of the plot (0: up to twice the iterations the reconstructed settings needed, "
                                 "at least 20)", "0"},
    {"max-iter", CLI_INT, "K", "fixed-point iteration cap", "200"},
    {"tol", CLI_FLOAT, "T", "stop when max|x_{k+1} - x_k| <= T max(1, max|x_k|)", "1e-7"},
    {"threshold", CLI_FLOAT, "E", "reconstructed when max|x_k - x*| / max(1, max|x*|) <= E", "1e-6"},
    {"seed", CLI_INT, "S", "seed of the weights and the inputs", "1"},
    {"out", CLI_STRING, "DIR", "directory of the CSV and SVG files", "runs/experiments/invertibility"},
    {"threads", CLI_INT, "N", "threads for OpenMP and OpenBLAS", NULL},
    {"json", CLI_FLAG, NULL, "one JSON object on stdout: settings, per-setting summary and error traces, files", NULL},
};

/* The branch under inversion, recording ‖x_k − x*‖_∞ of every iterate it is called on (call k sees x_k). */
typedef struct {
    exp_att_map *m;
    const float *xstar;
    size_t n;
    double *trace;
    int cap, calls;
} traced_branch;

static lipt_tensor *traced_g(lipt_ctx *ctx, lipt_tensor *x, void *user) {
    traced_branch *t = user;
    if (t->calls < t->cap) {
        double e = 0;
        for (size_t i = 0; i < t->n; i++) e = fmax(e, fabs((double)x->data[i] - t->xstar[i]));
        t->trace[t->calls] = e;
    }
    t->calls++;
    return exp_att_forward(ctx, x, t->m);
}

typedef struct {
    char name[64];
    exp_att_kind kind;
    double c, scale, factor, jac_inf;
    const char *status;
    int iters, reached_at, within_rate;
    double *rel;   /* rel[0..iters]: relative reconstruction error of x_0 = y, ..., x_iters */
    double *abs_e;
} inv_setting;

static double max_abs_f(const float *x, size_t n) {
    double m = 0;
    for (size_t i = 0; i < n; i++) m = fmax(m, fabs((double)x[i]));
    return m;
}

/* What happened, in words, for the table: never "converged" unless the iterate reached x*. */
static void outcome_text(const inv_setting *st, char *out, size_t n) {
    const char *pl = st->iters == 1 ? "" : "s";
    if (strcmp(st->status, "converged") == 0) snprintf(out, n, "converged");
    else if (strcmp(st->status, "stalled") == 0) snprintf(out, n, "did not converge (stalled after %d iteration%s)", st->iters, pl);
    else if (strcmp(st->status, "non-finite") == 0) snprintf(out, n, "diverged (non-finite after %d iteration%s)", st->iters, pl);
    else snprintf(out, n, "did not converge (%d iteration%s)", st->iters, pl);
}

/* The series of one panel into ps: its nsc settings (dashed: DP), then the Banach line c^k e0 down to emin / 10; their
 * points into pb (2 (nsc + 1) buffers, the caller frees them). Returns how many of the settings reconstructed. */
static int panel_series(const inv_setting *S, int nsc, double c, int dashed, int xshow, int me, double emin,
                        char (*lab)[32], svg_series *ps, double **pb) {
    static const svg_marker marks[] = {SVG_MARK_CIRCLE, SVG_MARK_SQUARE, SVG_MARK_TRIANGLE, SVG_MARK_DIAMOND, SVG_MARK_CROSS};
    int ok = 0;
    double e0 = 0;
    for (int si = 0; si < nsc; si++) {
        const inv_setting *st = &S[si];
        ok += st->reached_at >= 0;
        if (isfinite(st->rel[0])) e0 = fmax(e0, st->rel[0]);
        double *x = pb[2 * si] = malloc(sizeof(double) * (size_t)(st->iters + 1));
        double *yv = pb[2 * si + 1] = malloc(sizeof(double) * (size_t)(st->iters + 1));
        LIPT_CHECK(x && yv, "experiment: out of memory");
        for (int it = 0; it <= st->iters; it++) {
            x[it] = it;
            yv[it] = st->rel[it] > 0 ? st->rel[it] : NAN; /* an exact 0 has no place on a log axis */
        }
        ps[si] = (svg_series){lab[si], x, yv, st->iters + 1, svg_color(si), marks[si % 5], me,
                              dashed ? SVG_DASHED : SVG_SOLID, 1.5};
    }
    int len = 0;
    while (len <= xshow && pow(c, len) * e0 >= emin / 10) len++;
    double *x = pb[2 * nsc] = malloc(sizeof(double) * (size_t)(len + 1));
    double *yv = pb[2 * nsc + 1] = malloc(sizeof(double) * (size_t)(len + 1));
    LIPT_CHECK(x && yv, "experiment: out of memory");
    for (int it = 0; it < len; it++) {
        x[it] = it;
        yv[it] = pow(c, it) * e0;
    }
    ps[nsc] = (svg_series){"c^k (Banach)", x, yv, len, "#444444", SVG_MARK_NONE, 1, SVG_DOTTED, 1.3};
    return ok;
}

/* The figure: one panel per (attention, c), L2 on the first row(s), DP below, the scales as series inside a panel
 * (coloured and marked by scale) next to the dotted Banach rate c^k from the panel's largest start error. One panel
 * of 21 series was unreadable; shared axes keep the panels comparable. */
static lipt_status write_figure(const char *path, const inv_setting *S, int nc, int nsc, const double *cs,
                                const double *scales, long plot_iters, long max_iter, const char *title, lipt_error *err) {
    const int ns = 2 * nc * nsc;
    int maxit = 0, need = 0;
    double emin = INFINITY, emax = 0;
    for (int i = 0; i < ns; i++) {
        if (S[i].iters > maxit) maxit = S[i].iters;
        if (S[i].reached_at >= 0 && S[i].iters > need) need = S[i].iters;
        for (int it = 0; it <= S[i].iters; it++)
            if (S[i].rel[it] > 0 && isfinite(S[i].rel[it])) {
                emin = fmin(emin, S[i].rel[it]);
                emax = fmax(emax, S[i].rel[it]);
            }
    }
    if (!isfinite(emin)) emin = 1e-10;
    if (!(emax > emin)) emax = emin * 10;
    /* the failures run flat to the cap: the x axis shows where the reconstructions happen (the table and the CSV
     * have every iteration) */
    const int want = plot_iters > 0 ? (int)plot_iters : need * 2 > 20 ? need * 2 : 20;
    const int xshow = want < maxit ? want : maxit > 0 ? maxit : 1;
    const int me = xshow > 24 ? xshow / 12 : 1;
    /* grid: the c values across (at most 4 a row, rows balanced), each attention starting a new row; one c: L2 and DP side by side */
    const int rows_per_kind = (nc + 3) / 4, cols = nc == 1 ? 2 : (nc + rows_per_kind - 1) / rows_per_kind;
    const int ncell = nc == 1 ? 2 : 2 * rows_per_kind * cols, per_panel = nsc + 1;
    svg_panel *pn = calloc((size_t)ncell, sizeof *pn);
    svg_plot *plots = calloc((size_t)(2 * nc), sizeof *plots);
    svg_series *ser = calloc((size_t)(2 * nc * per_panel), sizeof *ser);
    double **buf = calloc((size_t)(4 * nc * per_panel), sizeof *buf);
    char (*ptitle)[96] = calloc((size_t)(2 * nc), sizeof *ptitle);
    char (*lab)[32] = calloc((size_t)nsc, sizeof *lab);
    LIPT_CHECK(pn && plots && ser && buf && ptitle && lab, "experiment: out of memory");
    for (int si = 0; si < nsc; si++) snprintf(lab[si], sizeof lab[si], "S = %g", scales[si]);
    for (int kind = 0; kind < 2; kind++)
        for (int ci = 0; ci < nc; ci++) {
            const int pi = kind * nc + ci; /* S[] runs kind, c, scale */
            const int ok = panel_series(&S[pi * nsc], nsc, cs[ci], kind, xshow, me, emin, lab, ser + (size_t)pi * per_panel,
                                        buf + (size_t)2 * pi * per_panel);
            snprintf(ptitle[pi], sizeof ptitle[pi], "%s, c = %g: %d of %d reconstructed", kind ? "DP" : "L2 (tied)", cs[ci],
                     ok, nsc);
            svg_plot *p = &plots[pi];
            *p = svg_plot_defaults();
            p->title = ptitle[pi];
            p->xlabel = "fixed-point iteration k";
            p->ylabel = "max|x_k - x*| / max(1, max|x*|)";
            p->logy = 1;
            p->width = 480;
            p->height = 330;
            p->xmin = 0;
            p->xmax = xshow;
            p->ymin = pow(10, floor(log10(emin) - 0.05));
            p->ymax = pow(10, ceil(log10(emax) + 0.05));
            const int cell = nc == 1 ? kind : kind * rows_per_kind * cols + ci;
            pn[cell] = (svg_panel){p, ser + (size_t)pi * per_panel, per_panel};
        }
    char note[300];
    char cut[96] = "";
    if (xshow < maxit) snprintf(cut, sizeof cut, "; x axis cut: the runs that do not reconstruct go on to the cap (%ld)", max_iter);
    snprintf(note, sizeof note, "solid: L2, dashed: DP; dotted: c^k from the panel's largest start error%s", cut);
    const svg_panels g = {title, note, cols};
    const lipt_status ps = svg_write_panels_file(path, &g, pn, ncell, err);
    for (int i = 0; i < 4 * nc * per_panel; i++) free(buf[i]);
    free(buf);
    free(ser);
    free(plots);
    free(pn);
    free(ptitle);
    free(lab);
    return ps;
}

/* The options, validated, and the output files. */
typedef struct {
    long N, D, H, max_iter, seed, plot_iters;
    double wscale, tol, thr;
    double cs[16], scales[16];
    int nc, nsc, ones, spread, from_ptb, dp_ref, causal, json;
    const char *wmode, *inputs, *dpf;
    char csv[1100], sumcsv[1100], svg[1100];
} inv_args;

/* Reads and checks the options up to --inputs and --ckpt (--threads: the prologue); returns 0 or the exit status. */
static int parse_inv_args(cli_args *a, const char *C, inv_args *o) {
    if (cli_int(a, "n", &o->N) || cli_int(a, "d", &o->D) || cli_int(a, "heads", &o->H) || cli_int(a, "max-iter", &o->max_iter) ||
        cli_int(a, "seed", &o->seed) || cli_int(a, "plot-iters", &o->plot_iters) || cli_float(a, "weight-scale", &o->wscale) || cli_float(a, "tol", &o->tol) ||
        cli_float(a, "threshold", &o->thr))
        return 2;
    const long N = o->N, D = o->D, H = o->H;
    if (N < 1 || D < 1 || H < 1 || D % H || N * D > 65536)
        return cli_error(C, "--n, --d, --heads must be >= 1, --heads must divide --d, N*D <= 65536");
    if (o->max_iter < 1 || o->max_iter > 100000) return cli_error(C, "--max-iter must be in [1, 100000]");
    if (!(o->wscale > 0) || !(o->tol >= 0) || !(o->thr > 0)) return cli_error(C, "--weight-scale, --threshold > 0 and --tol >= 0");
    o->nc = exp_parse_list(cli_str(a, "c-list"), o->cs, 16);
    o->nsc = exp_parse_list(cli_str(a, "scales"), o->scales, 16);
    if (o->nc < 1 || o->nsc < 1) return cli_error(C, "--c-list and --scales must be comma-separated numbers (at most 16)");
    for (int i = 0; i < o->nc; i++)
        if (!(o->cs[i] > 0 && o->cs[i] < 1)) return cli_error(C, "--c-list values must be in (0, 1), got %g", o->cs[i]);
    for (int i = 0; i < o->nsc; i++)
        if (!(o->scales[i] > 0)) return cli_error(C, "--scales values must be positive, got %g", o->scales[i]);
    if (o->plot_iters < 0) return cli_error(C, "--plot-iters must be >= 0");
    o->wmode = cli_str(a, "weights");
    o->ones = strcmp(o->wmode, "ones") == 0;
    if (!o->ones && strcmp(o->wmode, "random") != 0) return cli_error(C, "--weights must be random or ones, got '%s'", o->wmode);
    o->inputs = cli_str(a, "inputs");
    o->dpf = cli_str(a, "dp-factor");
    o->spread = strcmp(o->inputs, "spread") == 0;
    o->from_ptb = strcmp(o->inputs, "ptb") == 0;
    if (!o->spread && !o->from_ptb && strcmp(o->inputs, "gaussian") != 0) return cli_error(C, "--inputs must be spread, gaussian or ptb");
    if (o->from_ptb != cli_has(a, "ckpt")) return cli_error(C, "--inputs ptb needs --ckpt FILE (and --ckpt is only for --inputs ptb)");
    o->causal = cli_has(a, "causal");
    o->json = cli_has(a, "json");
    return 0;
}

/* --inputs ptb: the trained model's input embeddings of the first N test symbols (N x d_model floats, into *emb);
 * --d becomes the model's d_model. Returns 0 or the exit status. */
static int load_ptb_inputs(cli_args *a, const char *C, inv_args *o, float **emb, lipt_error *err) {
    lipt_model m;
    lipt_vocab vocab;
    int64_t step;
    if (run_load_model(cli_str(a, "ckpt"), &m, &vocab, &step, err) != LIPT_OK) return cli_fail(C, err);
    int bad = 0;
    if (cli_has(a, "d") && o->D != m.cfg.d_model)
        fprintf(stderr, "note: --d %ld replaced by the model's d_model %d\n", o->D, m.cfg.d_model);
    o->D = m.cfg.d_model;
    if (o->D % o->H) bad = cli_error(C, "--heads %ld does not divide the model's d_model %ld", o->H, o->D);
    if (!bad) {
        *emb = malloc(sizeof(float) * (size_t)o->N * o->D);
        if (exp_test_inputs(cli_str(a, "ckpt"), &m, &vocab, cli_str(a, "data"), (int)o->N, 0, 0, *emb, err) != LIPT_OK) {
            free(*emb);
            *emb = NULL;
            bad = err->status == LIPT_ERR_ARG ? cli_error(C, "%s", err->msg) : cli_fail(C, err);
        }
    }
    lipt_model_free(&m);
    return bad;
}

/* The rest of the options and the output folder; returns 0 or the exit status. */
static int prepare_outputs(cli_args *a, const char *C, inv_args *o, lipt_error *err) {
    o->dp_ref = strcmp(o->dpf, "ref") == 0;
    if (!o->dp_ref && strcmp(o->dpf, "bound") != 0) return cli_error(C, "--dp-factor must be bound or ref");
    const char *out = cli_str(a, "out");
    if (run_mkdir(out, err)) return cli_fail(C, err);
    char base[1024];
    snprintf(base, sizeof base, "%s/invertibility_n%ld_d%ld_h%ld%s%s", out, o->N, o->D, o->H,
             o->causal ? "_causal" : "", o->from_ptb ? "_ptb" : "");
    snprintf(o->csv, sizeof o->csv, "%s.csv", base);
    snprintf(o->sumcsv, sizeof o->sumcsv, "%s_summary.csv", base);
    snprintf(o->svg, sizeof o->svg, "%s.svg", base);
    return 0;
}

/* What the settings share: both attentions' weights and bounds, the unit-scale draw z and the work vectors. */
typedef struct {
    const inv_args *o;
    exp_att_weights wl2, wdp;
    float *z, *xs, *xr;   /* z: unit-scale inputs; xs = scale · z, the true x*; xr the recovered x */
    double *tracebuf;     /* max_iter + 2 errors of one inversion */
    double ub_l2, ub_dp, jdp_ref;
} inv_run;

/* Weights, inputs and the DP reference norm; emb (taken over and freed), when given, replaces the draw. Returns 0
 * or the exit status. */
static int setup_run(const char *C, const inv_args *o, float *emb, inv_run *r, lipt_error *err) {
    const long N = o->N, D = o->D;
    const size_t n = (size_t)N * D;
    int rc = 0;
    r->o = o;
    exp_att_init(&r->wl2, (int)D, o->ones, o->wscale, exp_seed((uint64_t)o->seed));
    exp_att_init(&r->wdp, (int)D, o->ones, o->wscale, exp_seed((uint64_t)o->seed + 1));
    /* one unit-scale draw z; the inputs are scale · z */
    float *z = r->z = malloc(sizeof(float) * n);
    r->xs = malloc(sizeof(float) * n);
    r->xr = malloc(sizeof(float) * n);
    lipt_rng rng;
    lipt_rng_seed(&rng, exp_seed((uint64_t)o->seed + 2));
    lipt_rng_fill_normal(&rng, z, n, 1.0f);
    if (o->spread)
        for (long j = 0; j < D; j++) z[(size_t)(N - 1) * D + j] = 0;
    if (emb) {
        memcpy(z, emb, sizeof(float) * n);
        free(emb);
    }
    r->ub_l2 = exp_att_bound_inf(&r->wl2, (int)o->H, (int)N);
    r->ub_dp = exp_att_bound_inf(&r->wdp, (int)o->H, (int)N);
    /* the DP reference norm: its exact Jacobian at the unit-scale input */
    r->jdp_ref = NAN;
    if (o->dp_ref) {
        exp_att_map m = {EXP_ATT_DP, (int)N, (int)D, (int)o->H, o->causal, &r->wdp, 1.0f};
        lipt_jac_map jm = {exp_att_forward, &m, 2, {(int)N, (int)D, 0, 0}, 1};
        if (lipt_jacobian_norm_inf_at(&jm, z, &r->jdp_ref, NULL, err) != LIPT_OK) rc = cli_fail(C, err);
    }
    r->tracebuf = malloc(sizeof(double) * (size_t)(o->max_iter + 2));
    return rc;
}

/* The trace of one inversion (x_0 = y ... x_iters, the last being the returned iterate) as errors relative to x*,
 * and what it says: reached, status, within the Banach rate. */
static void record_trace(inv_setting *st, const inv_run *r, const lipt_fp_result *res, int calls, lipt_status fs,
                         int nonfinite) {
    const inv_args *o = r->o;
    const size_t n = (size_t)o->N * o->D;
    st->iters = res->iters;
    st->rel = malloc(sizeof(double) * (size_t)(res->iters + 1));
    st->abs_e = malloc(sizeof(double) * (size_t)(res->iters + 1));
    LIPT_CHECK(st->rel && st->abs_e, "experiment: out of memory");
    const double xscale = fmax(1.0, max_abs_f(r->xs, n));
    double elast = 0;
    for (size_t i = 0; i < n; i++) elast = fmax(elast, fabs((double)r->xr[i] - r->xs[i]));
    for (int it = 0; it <= res->iters; it++) {
        st->abs_e[it] = it < res->iters && it < calls ? r->tracebuf[it] : elast;
        st->rel[it] = st->abs_e[it] / xscale;
    }
    st->reached_at = -1;
    for (int it = 0; it <= res->iters; it++)
        if (st->rel[it] <= o->thr) { st->reached_at = it; break; }
    /* "converged" only when the iteration met its stopping rule at x*: with a loose --tol the steps can
     * fall below it while the error is still far above --threshold (a slow, non-contractive DP map) */
    st->status = fs == LIPT_OK && res->converged ? (st->reached_at >= 0 ? "converged" : "stalled")
                 : nonfinite                     ? "non-finite"
                                                 : "not converged";
    /* Banach: with Lip_inf(g) <= c the error contracts at least by c per iteration (plus float rounding) */
    st->within_rate = 1;
    for (int it = 0; it <= res->iters; it++)
        if (st->rel[it] > pow(st->c, it) * st->rel[0] * (1 + 1e-4) + 4e-7) st->within_rate = 0;
}

/* One setting (attention kind, c index, scale index): g scaled by its factor, the exact Jacobian at x* when
 * affordable, y = x* + g(x*), then the traced fixed-point inversion. Returns 0 or the exit status. */
static int run_setting(const char *C, inv_run *r, lipt_ctx *ctx, int kind, int ci, int si, inv_setting *st,
                       lipt_error *err) {
    const inv_args *o = r->o;
    const long N = o->N, D = o->D;
    const size_t n = (size_t)N * D;
    float *xs = r->xs;
    st->kind = kind ? EXP_ATT_DP : EXP_ATT_L2_TIED;
    st->c = o->cs[ci];
    st->scale = o->scales[si];
    snprintf(st->name, sizeof st->name, "%s c=%g x%g", kind ? "DP" : "L2", o->cs[ci], o->scales[si]);
    const double ref = kind ? (o->dp_ref ? r->jdp_ref : r->ub_dp) : r->ub_l2;
    st->factor = 1.0 / fmax(1.0, ref / o->cs[ci]);
    exp_att_map m = {st->kind, (int)N, (int)D, (int)o->H, o->causal, kind ? &r->wdp : &r->wl2, (float)st->factor};
    for (size_t i = 0; i < n; i++) xs[i] = (float)(o->scales[si] * r->z[i]);
    /* the local Lipschitz constant of g at the true input (exact Jacobian) */
    st->jac_inf = NAN;
    if (n <= 4096) {
        lipt_jac_map jm = {exp_att_forward, &m, 2, {(int)N, (int)D, 0, 0}, 1};
        if (lipt_jacobian_norm_inf_at(&jm, xs, &st->jac_inf, NULL, err) != LIPT_OK) return cli_fail(C, err);
    }
    /* y = x* + g(x*) */
    lipt_ctx_reset(ctx);
    lipt_no_grad_push(ctx);
    lipt_tensor *xt = lipt_tensor_2d(ctx, (int)N, (int)D);
    memcpy(xt->data, xs, n * sizeof(float));
    lipt_tensor *gx = exp_att_forward(ctx, xt, &m);
    lipt_tensor *y = lipt_tensor_2d(ctx, (int)N, (int)D);
    for (size_t i = 0; i < n; i++) y->data[i] = xs[i] + gx->data[i];
    lipt_no_grad_pop(ctx);
    traced_branch tb = {&m, xs, n, r->tracebuf, (int)o->max_iter + 1, 0};
    lipt_fp_opts fo = {o->tol, (int)o->max_iter, 0, 0, 0};
    lipt_fp_result res = {0, 0, NULL, 0};
    lipt_error ie = {0};
    const lipt_status fs = lipt_fixed_point_invert(ctx, traced_g, &tb, y, r->xr, &fo, &res, &ie);
    if (fs != LIPT_OK && fs != LIPT_ERR_NUMERIC) return cli_fail(C, &ie);
    const int nonfinite = fs != LIPT_OK && strstr(ie.msg, "non-finite") != NULL;
    record_trace(st, r, &res, tb.calls, fs, nonfinite);
    return 0;
}

/* The per-iteration CSV and the summary CSV. */
static lipt_status write_csvs(const inv_args *o, const inv_setting *S, int ns, lipt_error *err) {
    exp_out f;
    lipt_status st = exp_open(&f, o->csv, err);
    if (st) return st;
    fprintf(f.f, "setting,attention,c,scale,iteration,error,rel_error,predicted\n");
    for (int i = 0; i < ns; i++)
        for (int it = 0; it <= S[i].iters; it++)
            fprintf(f.f, "%s,%s,%g,%g,%d,%.9g,%.9g,%.9g\n", S[i].name, S[i].kind ? "dp" : "l2", S[i].c, S[i].scale,
                    it, S[i].abs_e[it], S[i].rel[it], pow(S[i].c, it) * S[i].rel[0]);
    if ((st = exp_commit(&f, err)) || (st = exp_open(&f, o->sumcsv, err))) return st;
    fprintf(f.f, "setting,attention,c,scale,factor,jac_inf_at_input,status,iterations,reached_at,final_rel_error,"
                 "within_c_rate\n");
    for (int i = 0; i < ns; i++)
        fprintf(f.f, "%s,%s,%g,%g,%.9g,%.9g,%s,%d,%d,%.9g,%d\n", S[i].name, S[i].kind ? "dp" : "l2", S[i].c,
                S[i].scale, S[i].factor, S[i].jac_inf, S[i].status, S[i].iters, S[i].reached_at,
                S[i].rel[S[i].iters], S[i].within_rate);
    return exp_commit(&f, err);
}

/* Settings reconstructed, per attention. */
typedef struct { int l2_ok, l2_n, dp_ok, dp_n; } inv_counts;

static void print_json(const inv_run *r, const inv_setting *S, int ns, const inv_counts *k) {
    const inv_args *o = r->o;
    json_w j;
    json_begin(&j, stdout);
    json_str(&j, "experiment", "invertibility");
    json_int(&j, "n", o->N);
    json_int(&j, "d", o->D);
    json_int(&j, "heads", o->H);
    json_bool(&j, "causal", o->causal);
    json_str(&j, "inputs", o->inputs);
    json_str(&j, "dp_factor", o->dpf);
    json_str(&j, "weights", o->wmode);
    json_num(&j, "weight_scale", o->wscale);
    json_num(&j, "bound_l2", r->ub_l2);
    json_num(&j, "bound_dp_weights", r->ub_dp);
    json_num(&j, "dp_reference_jac_inf", r->jdp_ref);
    json_num(&j, "tol", o->tol);
    json_num(&j, "threshold", o->thr);
    json_int(&j, "max_iter", o->max_iter);
    json_int(&j, "seed", o->seed);
    json_arr_open(&j, "settings");
    for (int i = 0; i < ns; i++) {
        json_obj_open(&j, NULL);
        json_str(&j, "setting", S[i].name);
        json_str(&j, "attention", S[i].kind ? "dp" : "l2");
        json_num(&j, "c", S[i].c);
        json_num(&j, "scale", S[i].scale);
        json_num(&j, "factor", S[i].factor);
        json_num(&j, "jac_inf_at_input", S[i].jac_inf);
        json_str(&j, "status", S[i].status);
        json_int(&j, "iterations", S[i].iters);
        json_bool(&j, "reconstructed", S[i].reached_at >= 0);
        json_int(&j, "reached_at", S[i].reached_at);
        json_num(&j, "final_rel_error", S[i].rel[S[i].iters]);
        json_bool(&j, "within_c_rate", S[i].within_rate);
        json_arr_open(&j, "rel_error");
        for (int it = 0; it <= S[i].iters; it++) json_num(&j, NULL, S[i].rel[it]);
        json_arr_close(&j);
        json_obj_close(&j);
    }
    json_arr_close(&j);
    json_int(&j, "l2_reconstructed", k->l2_ok);
    json_int(&j, "l2_settings", k->l2_n);
    json_int(&j, "dp_reconstructed", k->dp_ok);
    json_int(&j, "dp_settings", k->dp_n);
    json_str(&j, "csv", o->csv);
    json_str(&j, "summary_csv", o->sumcsv);
    json_str(&j, "svg", o->svg);
    json_end(&j);
}

static void print_table(const inv_run *r, const inv_setting *S, int ns, const inv_counts *k) {
    const inv_args *o = r->o;
    const int dp_ref = o->dp_ref;
    printf("invertibility: N = %ld, D = %ld, H = %ld, %s, %s inputs (scale x unit draw), weights %s %g%s\n", o->N, o->D,
           o->H, o->causal ? "causal" : "unmasked",
           o->from_ptb ? "trained-embedding" : o->spread ? "spread (last token at the origin)" : "Gaussian",
           o->ones ? "all entries" : "N(0, S^2/D) with S =", o->wscale, o->ones ? "" : "");
    printf("L2: g = F / max(1, UB/c), UB = %.4g (inf-norm bound at N); DP: own weights, divided by max(1, %s/c) "
           "with %s = %.4g\n",
           r->ub_l2, dp_ref ? "|J|" : "UB", dp_ref ? "|J_DP(unit input)|_inf" : "the same bound formula of its weights",
           dp_ref ? r->jdp_ref : r->ub_dp);
    printf("error = max|x_k - x*| / max(1, max|x*|); reconstructed when <= %g; fixed-point tol %g, cap %ld\n", o->thr,
           o->tol, o->max_iter);
    printf("%-16s %9s %12s %6s %8s %12s %8s  %s\n", "setting", "factor", "|J_g(x*)|inf", "iters", "reached",
           "final error", "c^k ok", "outcome");
    int stalled = 0;
    for (int i = 0; i < ns; i++) {
        char rb[16], oc[96];
        if (S[i].reached_at >= 0) snprintf(rb, sizeof rb, "k=%d", S[i].reached_at);
        else snprintf(rb, sizeof rb, "no");
        outcome_text(&S[i], oc, sizeof oc);
        stalled += strcmp(S[i].status, "stalled") == 0;
        printf("%-16s %9.3g %12.4g %6d %8s %12.3e %8s  %s\n", S[i].name, S[i].factor, S[i].jac_inf, S[i].iters,
               rb, S[i].rel[S[i].iters], S[i].within_rate ? "yes" : "no", oc);
    }
    if (stalled)
        printf("stalled: the steps fell below --tol %g before the error reached --threshold %g (not converged to "
               "x*)\n", o->tol, o->thr);
    printf("L2: %d of %d settings reconstructed to <= %g; DP: %d of %d", k->l2_ok, k->l2_n, o->thr, k->dp_ok, k->dp_n);
    int first = 1;
    for (int i = 0; i < ns; i++)
        if (S[i].kind == EXP_ATT_DP && S[i].reached_at < 0) {
            printf("%s%s", first ? " (failed: " : ", ", S[i].name);
            first = 0;
        }
    printf("%s\n", first ? "" : ")");
    printf("wrote %s, %s and %s\n", cli_shown(o->csv), cli_shown(o->sumcsv), cli_shown(o->svg));
}

/* The CSV files, the figure, then the summary (JSON or table) on stdout; returns 0 or the exit status. */
static int write_results(const char *C, const inv_run *r, const inv_setting *S, int ns, lipt_error *err) {
    const inv_args *o = r->o;
    if (write_csvs(o, S, ns, err)) return cli_fail(C, err);
    char title[200];
    snprintf(title, sizeof title, "Fixed-point inversion of x + g(x): N=%ld, D=%ld, H=%ld%s, %s inputs", o->N, o->D, o->H,
             o->causal ? ", causal" : "", o->from_ptb ? "trained-embedding" : o->spread ? "spread" : "Gaussian");
    if (write_figure(o->svg, S, o->nc, o->nsc, o->cs, o->scales, o->plot_iters, o->max_iter, title, err))
        return cli_fail(C, err);
    inv_counts k = {0, 0, 0, 0};
    for (int i = 0; i < ns; i++) {
        if (S[i].kind == EXP_ATT_L2_TIED) { k.l2_n++; k.l2_ok += S[i].reached_at >= 0; }
        else { k.dp_n++; k.dp_ok += S[i].reached_at >= 0; }
    }
    if (o->json) print_json(r, S, ns, &k);
    else print_table(r, S, ns, &k);
    return 0;
}

static int inv_main(cli_args *a, const char *C) {
    inv_args o;
    int rc = parse_inv_args(a, C, &o);
    if (rc) return rc;
    lipt_error err = {0};
    float *emb = NULL; /* the trained model's input embeddings, N x d_model */
    if (o.from_ptb && (rc = load_ptb_inputs(a, C, &o, &emb, &err))) return rc;
    if ((rc = prepare_outputs(a, C, &o, &err))) {
        free(emb);
        return rc;
    }
    inv_run r;
    rc = setup_run(C, &o, emb, &r, &err);
    const int nc = o.nc, nsc = o.nsc, ns = rc ? 0 : 2 * nc * nsc;
    inv_setting *S = calloc((size_t)ns, sizeof *S);
    LIPT_CHECK((S || !ns) && r.tracebuf && r.z && r.xs && r.xr, "experiment: out of memory");
    lipt_ctx ctx;
    lipt_ctx_init(&ctx, 1 << 20, 1);
    /* S[] runs kind, c, scale */
    for (int k = 0; k < ns && rc == 0; k++) rc = run_setting(C, &r, &ctx, k / (nc * nsc), k / nsc % nc, k % nsc, &S[k], &err);
    lipt_ctx_free(&ctx);
    if (rc == 0) rc = write_results(C, &r, S, ns, &err);
    for (int i = 0; i < ns; i++) {
        free(S[i].rel);
        free(S[i].abs_e);
    }
    free(S);
    free(r.tracebuf);
    free(r.z);
    free(r.xs);
    free(r.xr);
    exp_att_free(&r.wl2);
    exp_att_free(&r.wdp);
    return rc;
}

const exp_def exp_invertibility = {
    "invertibility", "fixed-point inversion of x + g(x), contractive L2 vs scaled DP attention (Fig. 3)",
    "Numerical invertibility of residual maps x + g(x) (paper Fig. 3, SPEC §4.2): g = contractive tied L2-MHA\n"
    "(F / max(1, UB/c), UB the inf-norm bound at N) and g = DP-MHA scaled the same way, inverted by fixed-point\n"
    "iteration x <- y - g(x) from x = y; the reconstruction error max|x_k - x*| after every iteration.",
    inv_opts, (int)(sizeof inv_opts / sizeof inv_opts[0]), 0, inv_main,
};
