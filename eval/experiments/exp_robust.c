/* lipt experiment robustness (SPEC §4.5, paper Fig. 10): how far the outputs of a trained model's attention branch
 * spread when its input moves, at the inputs of the invertibility experiment scaled up. For each checkpoint and scale
 * S, X = S z with z the attention's input at PTB test symbols (after the LayerNorm of the pre-LN variants; or the
 * "spread" Gaussian draw), fed to the attention map alone; reported: the
 * gain |g(X+d) - g(X)| / |d| over random small perturbations d (median, max) and the worst case over all directions,
 * the exact Jacobian's 2-norm (and inf-norm), which an adversary perturbing X achieves to first order. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli.h"
#include "exp_util.h"
#include "lipt/jacobian.h"
#include "lipt/model.h"
#include "run.h"
#include "svg.h"

#define MAX_MODELS 8
#define MAX_SCALES 16

static const cli_opt rob_opts[] = {
    {"ckpt", CLI_STRING, "A,B,...", "trained checkpoints (any attention variant) (required)", NULL},
    {"data", CLI_STRING, "NAME|PATH", "corpus of the test symbols, the same for every checkpoint (default: the checkpoint's "
                                      "own corpus)", NULL},
    {"layer", CLI_INT, "L", "layer whose attention branch is studied (0-based)", "0"},
    {"n", CLI_INT, "N", "tokens per input", "16"},
    {"scales", CLI_STRING, "S,S,...", "input scales", "1,3,10,30,100"},
    {"inputs", CLI_STRING, "ptb|spread", "ptb: the attention's input at the first N test symbols (after its LayerNorm); spread: Gaussian tokens "
                                         "with the last at the origin, rms matched to the embeddings", "ptb"},
    {"perturbations", CLI_INT, "K", "random perturbations per setting", "64"},
    {"eps", CLI_FLOAT, "E", "perturbation size relative to |X| (Frobenius)", "1e-3"},
    {"seed", CLI_INT, "S", "seed of the perturbations", "1"},
    {"out", CLI_STRING, "DIR", "CSV and SVG folder", "runs/experiments/robustness"},
    {"threads", CLI_INT, "N", "threads for OpenMP and OpenBLAS", NULL},
    {"json", CLI_FLAG, NULL, "one JSON object on stdout: per model and scale the gains", NULL},
};

typedef struct {
    char label[96];
    double scale, rand_median, rand_max, jac2, jacinf, out_rms;
} rob_row;

static int cmp_double(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

static double frob(const float *x, size_t n) {
    double s = 0;
    for (size_t i = 0; i < n; i++) s += (double)x[i] * x[i];
    return sqrt(s);
}

/* g(x) of the branch into out (no grad). */
static void branch_eval(lipt_ctx *ctx, const lipt_model *m, int layer, const float *x, int N, float *out) {
    lipt_ctx_reset(ctx);
    lipt_no_grad_push(ctx);
    const int shape[3] = {1, N, m->cfg.d_model};
    lipt_tensor *t = lipt_tensor_new(ctx, 3, shape);
    memcpy(t->data, x, sizeof(float) * (size_t)N * m->cfg.d_model);
    lipt_tensor *y = lipt_model_branch(ctx, m, layer, LIPT_BRANCH_MHA, t);
    memcpy(out, y->data, sizeof(float) * (size_t)N * m->cfg.d_model);
    lipt_no_grad_pop(ctx);
}

/* The options, validated, with the checkpoint list split. */
typedef struct {
    long layer, N, K, seed;
    double eps;
    double scales[MAX_SCALES];
    int nsc, from_ptb;
    const char *out, *data;
    char paths[MAX_MODELS][1024];
    int nm;
} rob_args;

/* Reads and checks the options (makes --out; --threads: the prologue); returns 0 or the exit status. */
static int parse_rob_args(cli_args *a, const char *C, rob_args *o, lipt_error *err) {
    o->nm = 0;
    if (cli_int(a, "layer", &o->layer) || cli_int(a, "n", &o->N) || cli_int(a, "perturbations", &o->K) ||
        cli_int(a, "seed", &o->seed) || cli_float(a, "eps", &o->eps))
        return 2;
    int rc = 0;
    const int nsc = o->nsc = exp_parse_list(cli_str(a, "scales"), o->scales, MAX_SCALES);
    const char *inputs = cli_str(a, "inputs");
    o->from_ptb = strcmp(inputs, "ptb") == 0;
    if (!cli_has(a, "ckpt")) rc = cli_error(C, "--ckpt A,B,... is required");
    else if (nsc < 1) rc = cli_error(C, "--scales must be a comma list of positive numbers");
    else if (!o->from_ptb && strcmp(inputs, "spread") != 0) rc = cli_error(C, "--inputs must be ptb or spread, got '%s'", inputs);
    else if (o->N < 2 || o->K < 1 || !(o->eps > 0) || o->layer < 0)
        rc = cli_error(C, "--n >= 2, --perturbations >= 1, --eps > 0, --layer >= 0");
    for (int i = 0; !rc && i < nsc; i++)
        if (!(o->scales[i] > 0)) rc = cli_error(C, "--scales: %g is not positive", o->scales[i]);
    o->out = cli_str(a, "out");
    o->data = cli_str(a, "data");
    if (!rc && run_mkdir(o->out, err) != LIPT_OK) rc = cli_fail(C, err);
    if (!rc) {
        char buf[MAX_MODELS * 1024];
        snprintf(buf, sizeof buf, "%s", cli_str(a, "ckpt"));
        for (char *tok = strtok(buf, ","); tok && o->nm < MAX_MODELS; tok = strtok(NULL, ","))
            snprintf(o->paths[o->nm++], 1024, "%s", tok);
    }
    return rc;
}

/* Scratch of one model's measurements (n = N * d_model floats per vector). */
typedef struct {
    float *z, *x, *xp, *y, *yp;
    double *gains, *J;
} rob_bufs;

/* The gains at X = scale * z (rng stream si): K random perturbations of relative size eps, then the exact
 * Jacobian's norms (NAN when it is not finite). */
static void measure_scale(lipt_ctx *ctx, const lipt_model *m, const rob_args *o, int si, const rob_bufs *b,
                          lipt_jac_map *map, rob_row *row, lipt_error *err) {
    const size_t n = (size_t)o->N * m->cfg.d_model;
    const long K = o->K;
    float *x = b->x, *xp = b->xp;
    for (size_t i = 0; i < n; i++) x[i] = (float)(o->scales[si] * b->z[i]);
    branch_eval(ctx, m, (int)o->layer, x, (int)o->N, b->y);
    lipt_rng r;
    lipt_rng_seed(&r, (uint64_t)o->seed * 1000003u + (uint64_t)si);
    const double dn = o->eps * frob(x, n);
    for (long k = 0; k < K; k++) {
        lipt_rng_fill_normal(&r, xp, n, 1.0f);
        const double s = dn / frob(xp, n);
        for (size_t i = 0; i < n; i++) xp[i] = (float)(x[i] + s * xp[i]);
        double din = 0;
        for (size_t i = 0; i < n; i++) din += ((double)xp[i] - x[i]) * ((double)xp[i] - x[i]);
        branch_eval(ctx, m, (int)o->layer, xp, (int)o->N, b->yp);
        double dout = 0;
        for (size_t i = 0; i < n; i++) dout += ((double)b->yp[i] - b->y[i]) * ((double)b->yp[i] - b->y[i]);
        b->gains[k] = sqrt(dout) / fmax(sqrt(din), 1e-300);
    }
    qsort(b->gains, (size_t)K, sizeof *b->gains, cmp_double);
    row->scale = o->scales[si];
    row->rand_median = b->gains[K / 2];
    row->rand_max = b->gains[K - 1];
    row->out_rms = frob(b->y, n) / sqrt((double)n);
    if (lipt_jacobian(map, x, b->J, err) != LIPT_OK) {
        row->jac2 = row->jacinf = NAN; /* a non-finite Jacobian (overflow at large scales) */
        fprintf(stderr, "  note: scale %g: %s\n", o->scales[si], err->msg);
    } else {
        row->jac2 = lipt_matrix_norm_2(b->J, n, n, NULL, NULL);
        row->jacinf = lipt_matrix_norm_inf(b->J, n, n);
    }
    fprintf(stderr, "  scale %-6g random gain median %.4g max %.4g | worst direction (|J|_2) %.4g, |J|_inf %.4g\n",
            row->scale, row->rand_median, row->rand_max, row->jac2, row->jacinf);
}

/* One checkpoint: its attention's input z (or the spread draw), then a row per scale appended at rows[*nr].
 * Returns 0 or the exit status. */
static int measure_model(const char *C, const rob_args *o, const char *path, rob_row *rows, int *nr, lipt_error *err) {
    lipt_model m;
    lipt_vocab vocab;
    int64_t step;
    if (run_load_model(path, &m, &vocab, &step, err) != LIPT_OK) return cli_fail(C, err);
    int rc = 0;
    const long N = o->N, layer = o->layer;
    const int D = m.cfg.d_model;
    const size_t n = (size_t)N * D;
    rob_bufs b = {malloc(sizeof(float) * n), malloc(sizeof(float) * n), malloc(sizeof(float) * n),
                  malloc(sizeof(float) * n), malloc(sizeof(float) * n), malloc(sizeof(double) * (size_t)o->K),
                  malloc(sizeof(double) * n * n)};
    lipt_ctx ctx;
    lipt_ctx_init(&ctx, (size_t)16 << 20, 1);
    /* the attention's own input at this layer: earlier blocks, then the LayerNorm of the pre-LN variants */
    if (exp_test_inputs(path, &m, &vocab, o->data, (int)N, (int)layer, 1, b.z, err) != LIPT_OK) {
        /* a bad --n / --layer for this model is a usage error (exit 2), a missing corpus a failure (1) */
        rc = err->status == LIPT_ERR_ARG ? cli_error(C, "%s: %s", path, err->msg) : cli_fail(C, err);
    } else if (!o->from_ptb) {
        const double rms = frob(b.z, n) / sqrt((double)n);
        lipt_rng r;
        lipt_rng_seed(&r, (uint64_t)o->seed * 7919u + 3);
        lipt_rng_fill_normal(&r, b.z, n, (float)rms);
        for (int j = 0; j < D; j++) b.z[(size_t)(N - 1) * D + j] = 0;
    }
    char label[96];
    snprintf(label, sizeof label, "%s (%d layers)", lipt_attn_name(m.cfg.attention), m.cfg.n_layers);
    if (!rc) fprintf(stderr, "%s: %s, attention of layer %ld, N %ld, D %d\n", cli_shown(path), label, layer, N, D);
    lipt_branch_ref ref = {&m, (int)layer, LIPT_BRANCH_MHA, NULL};
    lipt_jac_map map = {lipt_model_branch_fn, &ref, 3, {1, (int)N, D}, 0};
    for (int si = 0; si < o->nsc && !rc; si++) {
        rob_row *row = &rows[(*nr)++];
        snprintf(row->label, sizeof row->label, "%s", label);
        measure_scale(&ctx, &m, o, si, &b, &map, row, err);
    }
    lipt_ctx_free(&ctx);
    free(b.z); free(b.x); free(b.xp); free(b.y); free(b.yp); free(b.gains); free(b.J);
    lipt_model_free(&m);
    return rc;
}

static lipt_status write_csv(const char *path, const rob_row *rows, int nr, lipt_error *err) {
    exp_out o;
    const lipt_status st = exp_open(&o, path, err);
    if (st != LIPT_OK) return st;
    fprintf(o.f, "model,scale,random_gain_median,random_gain_max,jacobian_2norm,jacobian_infnorm,output_rms\n");
    for (int i = 0; i < nr; i++)
        fprintf(o.f, "\"%s\",%g,%.6g,%.6g,%.6g,%.6g,%.6g\n", rows[i].label, rows[i].scale, rows[i].rand_median,
                rows[i].rand_max, rows[i].jac2, rows[i].jacinf, rows[i].out_rms);
    return exp_commit(&o, err);
}

/* Gains against scale: worst direction solid, random median dashed, one colour per model. */
static lipt_status write_figure(const char *path, const rob_row *rows, int nm, int nsc, lipt_error *err) {
    double xs[MAX_MODELS][MAX_SCALES], yw[MAX_MODELS][MAX_SCALES], ym[MAX_MODELS][MAX_SCALES];
    svg_series s[2 * MAX_MODELS];
    char lab[2 * MAX_MODELS][128];
    int ns = 0;
    for (int mi = 0; mi < nm; mi++) {
        for (int si = 0; si < nsc; si++) {
            const rob_row *r = &rows[mi * nsc + si];
            xs[mi][si] = r->scale;
            yw[mi][si] = r->jac2;
            ym[mi][si] = r->rand_median;
        }
        snprintf(lab[ns], sizeof lab[0], "%.100s: worst direction", rows[mi * nsc].label);
        s[ns] = (svg_series){lab[ns], xs[mi], yw[mi], nsc, svg_color(mi), SVG_MARK_CIRCLE, 1, SVG_SOLID, 0};
        ns++;
        snprintf(lab[ns], sizeof lab[0], "%.100s: random, median", rows[mi * nsc].label);
        s[ns] = (svg_series){lab[ns], xs[mi], ym[mi], nsc, svg_color(mi), SVG_MARK_CROSS, 1, SVG_DASHED, 1.2};
        ns++;
    }
    svg_plot p = svg_plot_defaults();
    p.title = "trained attention: output change per unit input change, |g(X+d)-g(X)| / |d|, at X = S z";
    p.xlabel = "input scale S";
    p.ylabel = "gain";
    p.logx = p.logy = 1;
    p.width = 1000;
    return svg_write_file(path, &p, s, ns, err);
}

static void print_json(const rob_row *rows, int nr) {
    json_w j;
    json_begin(&j, stdout);
    json_arr_open(&j, "rows");
    for (int i = 0; i < nr; i++) {
        json_obj_open(&j, NULL);
        json_str(&j, "model", rows[i].label);
        json_num(&j, "scale", rows[i].scale);
        json_num(&j, "random_gain_median", rows[i].rand_median);
        json_num(&j, "random_gain_max", rows[i].rand_max);
        json_num(&j, "jacobian_2norm", rows[i].jac2);
        json_num(&j, "jacobian_infnorm", rows[i].jacinf);
        json_obj_close(&j);
    }
    json_arr_close(&j);
    json_end(&j);
}

/* The CSV, the figure, the table (and the JSON object); returns 0 or the exit status. */
static int write_results(const char *C, const rob_args *o, const rob_row *rows, int nr, int json, lipt_error *err) {
    char path[1100];
    snprintf(path, sizeof path, "%s/robustness.csv", o->out);
    if (write_csv(path, rows, nr, err) != LIPT_OK) return cli_fail(C, err);
    snprintf(path, sizeof path, "%s/robustness.svg", o->out);
    if (write_figure(path, rows, o->nm, o->nsc, err) != LIPT_OK) return cli_fail(C, err);
    printf("%-28s %7s %12s %12s %12s %12s\n", "model", "scale", "rand_median", "rand_max", "|J|_2", "|J|_inf");
    for (int i = 0; i < nr; i++)
        printf("%-28s %7g %12.4g %12.4g %12.4g %12.4g\n", rows[i].label, rows[i].scale, rows[i].rand_median,
               rows[i].rand_max, rows[i].jac2, rows[i].jacinf);
    fprintf(stderr, "wrote %s/robustness.csv and %s/robustness.svg\n", cli_shown(o->out), cli_shown(o->out));
    if (json) print_json(rows, nr);
    return 0;
}

static int rob_main(cli_args *a, const char *C) {
    lipt_error err = {0};
    rob_args o;
    int rc = parse_rob_args(a, C, &o, &err);
    rob_row rows[MAX_MODELS * MAX_SCALES];
    int nr = 0;
    for (int mi = 0; !rc && mi < o.nm; mi++) rc = measure_model(C, &o, o.paths[mi], rows, &nr, &err);
    if (!rc) rc = write_results(C, &o, rows, nr, cli_has(a, "json"), &err);
    return rc;
}

const exp_def exp_robustness = {
    "robustness", "output spread of trained attention under input perturbations at growing scales (Fig. 10)",
    "Robustness of trained attention (paper Fig. 10, SPEC §4.5): the spread of a trained attention branch's\n"
    "outputs when its input X = S z moves, for growing S: random-perturbation gains and the exact Jacobian\n"
    "norms (the adversarial worst case to first order). Writes OUT/robustness.csv and OUT/robustness.svg.",
    rob_opts, (int)(sizeof rob_opts / sizeof rob_opts[0]), 0, rob_main,
};
