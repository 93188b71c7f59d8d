/* lipt experiment: the paper's synthetic experiments on tied L2 attention (SPEC §4.1 asymptotic tightness of the
 * Lipschitz bound by gradient ascent on the Jacobian norm; §4.2 numerical invertibility of residual attention maps),
 * each as a table on stdout, CSV and SVG files, and optionally one JSON object. */
#include <errno.h>
#include <math.h>
#include <omp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "cli.h"
#include "lipt/bounds.h"
#include "lipt/invert.h"
#include "lipt/jacobian.h"
#include "exp_util.h"
#include "lipt/model.h"
#include "run.h"
#include "svg.h"

static uint64_t splitmix64(uint64_t x) {
    x += 0x9E3779B97F4A7C15ull;
    x = (x ^ (x >> 30)) * 0xBF58476D1CE4E5B9ull;
    x = (x ^ (x >> 27)) * 0x94D049BB133111EBull;
    return x ^ (x >> 31);
}

/* ------------------------------------------------------------------------------------------- attention maps */

typedef enum { ATT_L2_TIED, ATT_DP } att_kind;

/* Weights of one attention layer, in their own context (no gradients: constants of the maps). */
typedef struct {
    lipt_ctx ctx;
    int D;
    lipt_tensor *wq, *wk, *wv, *wo;
} att_weights;

/* "ones": every entry = scale; "random": N(0, scale² / D) (rows of about unit norm for scale 1). */
static void weights_init(att_weights *w, int D, int ones, double scale, uint64_t seed) {
    lipt_ctx_init(&w->ctx, 1 << 12, 1);
    w->D = D;
    lipt_tensor **ws[4] = {&w->wq, &w->wk, &w->wv, &w->wo};
    lipt_rng r;
    lipt_rng_seed(&r, seed);
    for (int i = 0; i < 4; i++) {
        *ws[i] = lipt_tensor_2d(&w->ctx, D, D);
        if (ones)
            for (int j = 0; j < D * D; j++) (*ws[i])->data[j] = (float)scale;
        else
            lipt_rng_fill_normal(&r, (*ws[i])->data, (size_t)D * D, (float)(scale / sqrt((double)D)));
    }
}

static void weights_clone(att_weights *dst, const att_weights *src) {
    weights_init(dst, src->D, 1, 0, 0);
    const size_t n = (size_t)src->D * src->D * sizeof(float);
    memcpy(dst->wq->data, src->wq->data, n);
    memcpy(dst->wk->data, src->wk->data, n);
    memcpy(dst->wv->data, src->wv->data, n);
    memcpy(dst->wo->data, src->wo->data, n);
}

static void weights_free(att_weights *w) { lipt_ctx_free(&w->ctx); }

/* F(X) = mult · Attn(X) W^O on X [N, D]: tied L2 (values X A_h W^{V,h}) or DP (its own W^K). */
typedef struct {
    att_kind kind;
    int N, D, H, causal;
    const att_weights *w;
    float mult;
} att_map;

static lipt_tensor *att_forward(lipt_ctx *ctx, lipt_tensor *x, void *user) {
    const att_map *m = user;
    lipt_tensor *x3 = lipt_reshape(ctx, x, 3, (int[]){1, m->N, m->D});
    lipt_tensor *q = lipt_matmul(ctx, x3, m->w->wq, 0, 0), *a;
    if (m->kind == ATT_L2_TIED)
        a = lipt_attention_l2_tied(ctx, q, m->w->wq, m->w->wv, m->H, m->causal);
    else
        a = lipt_attention_dp(ctx, q, lipt_matmul(ctx, x3, m->w->wk, 0, 0), lipt_matmul(ctx, x3, m->w->wv, 0, 0), m->H,
                              m->causal);
    lipt_tensor *out = lipt_matmul(ctx, a, m->w->wo, 0, 0);
    if (m->mult != 1.0f) out = lipt_scale(ctx, out, m->mult);
    return lipt_reshape(ctx, out, 2, (int[]){m->N, m->D});
}

/* The ∞-norm bound of SPEC §2 for these weights at sequence length N. */
static double bound_inf(const att_weights *w, int H, int N) {
    lipt_ctx ctx;
    lipt_ctx_init(&ctx, 1 << 14, 1);
    lipt_no_grad_push(&ctx);
    const double ub = lipt_bound_l2_inf(&ctx, w->wq, w->wv, w->wo, H, N)->data[0];
    lipt_no_grad_pop(&ctx);
    lipt_ctx_free(&ctx);
    return ub;
}

/* The 2-norm bound; vec holds converged power-iteration vectors (iters rounds run first). */
static double bound_2(const att_weights *w, int H, int N, lipt_bound_vectors *vec, int iters) {
    lipt_ctx ctx;
    lipt_ctx_init(&ctx, 1 << 14, 1);
    lipt_no_grad_push(&ctx);
    const double ub = lipt_bound_l2_2(&ctx, w->wq, w->wv, w->wo, H, N, vec, iters)->data[0];
    lipt_no_grad_pop(&ctx);
    lipt_ctx_free(&ctx);
    return ub;
}

/* ------------------------------------------------------------------------------------------- tightness */

static const cli_opt tight_opts[] = {
    {"n-list", CLI_STRING, "N,N,...", "sequence lengths (default by --d: 1: 2,3,5,10,20,50,100,200,500,1000; "
                                      "<= 4: up to 200; larger: up to 50)", NULL},
    {"d", CLI_INT, "D", "model width", "1"},
    {"heads", CLI_INT, "H", "attention heads (divides D)", "1"},
    {"norm", CLI_STRING, "inf|2", "Jacobian norm maximised (and bound compared)", "inf"},
    {"starts", CLI_INT, "S", "random starts of gradient ascent per N", "50"},
    {"steps", CLI_INT, "K", "Adam steps per start", "300"},
    {"lr", CLI_FLOAT, "LR", "Adam step size, in units of --input-scale", "0.05"},
    {"input-scale", CLI_FLOAT, "S", "start points are N(0, S^2) entries", "1"},
    {"fd-eps", CLI_FLOAT, "E", "central-difference step of the Hessian-vector products (relative)", "1e-3"},
    {"weights", CLI_STRING, "ones|random", "W^Q = W^V = W^O all ones (x --weight-scale), or N(0, scale^2/D) entries "
                                           "(default: ones for D = 1, else random)", NULL},
    {"weight-scale", CLI_FLOAT, "S", "weight scale", "1"},
    {"causal", CLI_FLAG, NULL, "causal mask (row i attends to j <= i); default unmasked", NULL},
    {"max-exact", CLI_INT, "M", "exact re-measure (inf: one full row scan of the best point; 2: full Jacobians per "
                                "start) when N*D <= M", "1024"},
    {"power-iters", CLI_INT, "K", "power-iteration rounds for the spectral norms of the 2-norm bound", "1000"},
    {"fit-min", CLI_INT, "N", "fit a (log N - log log N) + b to the rows with N >= this", "2"},
    {"seed", CLI_INT, "S", "seed of the weights and the starts", "1"},
    {"out", CLI_STRING, "DIR", "directory of the CSV, SVG and settings files", "runs/experiments"},
    {"restart", CLI_FLAG, NULL, "discard existing results of the same configuration instead of resuming", NULL},
    {"threads", CLI_INT, "N", "threads (starts run in parallel, one per thread)", NULL},
    {"json", CLI_FLAG, NULL, "one JSON object on stdout: settings, rows, fit, files", NULL},
};

typedef struct {
    int N;
    double lower, upper, ratio, fit, best_random, mean_start;
    int diverged, starts, steps;
    double seconds;
} tight_row;

typedef struct { double a, b, rms; int ok; } lin_fit;

static double tight_t(int N) { return log((double)N) - log(log((double)N)); }

/* Least squares y ≈ a t + b over the rows with N >= nmin, t = log N − log log N (upper: fit the bounds instead).
 * t is not monotone below N = e (t(2) > t(3)), hence the option to fit the larger N only. */
static lin_fit fit_rows(const tight_row *r, int n, int upper, int nmin) {
    lin_fit f = {NAN, NAN, NAN, 0};
    double st = 0, sy = 0;
    int m = 0;
    for (int i = 0; i < n; i++) {
        const double y = upper ? r[i].upper : r[i].lower;
        if (!isfinite(y) || r[i].N < nmin) continue;
        st += tight_t(r[i].N);
        sy += y;
        m++;
    }
    if (m < 2) return f;
    const double mt = st / m, my = sy / m;
    double stt = 0, sty = 0;
    for (int i = 0; i < n; i++) {
        const double y = upper ? r[i].upper : r[i].lower;
        if (!isfinite(y) || r[i].N < nmin) continue;
        const double t = tight_t(r[i].N) - mt;
        stt += t * t;
        sty += t * (y - my);
    }
    if (!(stt > 0)) return f;
    f.a = sty / stt;
    f.b = my - f.a * mt;
    double ss = 0;
    for (int i = 0; i < n; i++) {
        const double y = upper ? r[i].upper : r[i].lower;
        if (!isfinite(y) || r[i].N < nmin) continue;
        const double e = y - (f.a * tight_t(r[i].N) + f.b);
        ss += e * e;
    }
    f.rms = sqrt(ss / m);
    f.ok = 1;
    return f;
}

static int cmp_row_n(const void *p, const void *q) {
    const int a = ((const tight_row *)p)->N, b = ((const tight_row *)q)->N;
    return (a > b) - (a < b);
}

#define TIGHT_CSV_HEADER "N,lower,upper,ratio,fit,best_random,mean_start_best,diverged,starts,steps,seconds"

/* Rows of an earlier run (malformed lines, e.g. from an interrupted writer, are ignored). */
static int read_rows(const char *path, tight_row *rows, int cap) {
    FILE *f = fopen(path, "r");
    if (!f) return 0;
    char line[1024];
    int n = 0;
    while (fgets(line, sizeof line, f) && n < cap) {
        if (!strchr(line, '\n')) continue;
        double v[11];
        int k = 0;
        char *p = line;
        while (k < 11) {
            char *end = NULL;
            v[k] = strtod(p, &end);
            if (end == p) break;
            k++;
            p = end;
            if (*p != ',') break;
            p++;
        }
        if (k != 11 || v[0] < 2 || v[0] != floor(v[0])) continue; /* the header, or a broken line */
        tight_row r = {(int)v[0], v[1], v[2], v[3], v[4], v[5], v[6], (int)v[7], (int)v[8], (int)v[9], v[10]};
        int dup = 0;
        for (int i = 0; i < n; i++) dup |= rows[i].N == r.N;
        if (!dup) rows[n++] = r;
    }
    fclose(f);
    return n;
}

static lipt_status write_rows(const char *path, tight_row *rows, int n, int nmin, lipt_error *err) {
    qsort(rows, (size_t)n, sizeof *rows, cmp_row_n);
    const lin_fit fit = fit_rows(rows, n, 0, nmin);
    out_file o;
    lipt_status st = open_file(&o, path, err);
    if (st) return st;
    fprintf(o.f, "%s\n", TIGHT_CSV_HEADER);
    for (int i = 0; i < n; i++) {
        rows[i].fit = fit.ok ? fit.a * tight_t(rows[i].N) + fit.b : NAN;
        fprintf(o.f, "%d,%.9g,%.9g,%.9g,%.9g,%.9g,%.9g,%d,%d,%d,%.3f\n", rows[i].N, rows[i].lower, rows[i].upper,
                rows[i].ratio, rows[i].fit, rows[i].best_random, rows[i].mean_start, rows[i].diverged, rows[i].starts,
                rows[i].steps, rows[i].seconds);
    }
    return commit_file(&o, err);
}

static lipt_status tight_plot(const char *path, const tight_row *rows, int n, int norm2, int nmin, const char *title,
                              lipt_error *err) {
    double *xs = malloc(sizeof(double) * (size_t)(n + 1)), *lo = malloc(sizeof(double) * (size_t)(n + 1));
    double *up = malloc(sizeof(double) * (size_t)(n + 1)), *br = malloc(sizeof(double) * (size_t)(n + 1));
    enum { NF = 120 };
    double fx[NF], fy[NF];
    LIPT_CHECK(xs && lo && up && br, "experiment: out of memory");
    for (int i = 0; i < n; i++) {
        xs[i] = rows[i].N;
        lo[i] = rows[i].lower;
        up[i] = rows[i].upper;
        br[i] = rows[i].best_random;
    }
    const lin_fit fit = fit_rows(rows, n, 0, nmin);
    int nf = 0;
    if (fit.ok && n > 0) {
        int i0 = 0;
        while (i0 < n - 1 && rows[i0].N < nmin) i0++;
        const double a = log((double)rows[i0].N), b = log((double)rows[n - 1].N);
        for (int i = 0; i < NF; i++) {
            fx[i] = exp(a + (b - a) * i / (NF - 1));
            fy[i] = fit.a * (log(fx[i]) - log(log(fx[i]))) + fit.b;
        }
        nf = NF;
    }
    char lab_up[96], lab_lo[96], lab_fit[128];
    snprintf(lab_up, sizeof lab_up, "upper bound (Theorem 3.2, %s-norm)", norm2 ? "2" : "inf");
    snprintf(lab_lo, sizeof lab_lo, "lower bound: best ascent (max |J|)");
    snprintf(lab_fit, sizeof lab_fit, "fit %.3g (log N - log log N) %s %.3g", fit.a, fit.b < 0 ? "-" : "+", fabs(fit.b));
    svg_series s[4] = {
        {lab_up, xs, up, n, svg_color(3), SVG_MARK_SQUARE, 1, SVG_SOLID, 0},
        {lab_lo, xs, lo, n, svg_color(0), SVG_MARK_CIRCLE, 1, SVG_SOLID, 0},
        {"best random start (before ascent)", xs, br, n, svg_color(7), SVG_MARK_CROSS, 1, SVG_DOTTED, 1.2},
        {fit.ok ? lab_fit : NULL, fx, fy, nf, svg_color(2), SVG_MARK_NONE, 1, SVG_DASHED, 1.4},
    };
    svg_plot p = svg_plot_defaults();
    p.title = title;
    p.xlabel = "sequence length N";
    p.ylabel = norm2 ? "Lipschitz constant, 2-norm (bounds)" : "Lipschitz constant, inf-norm (bounds)";
    p.logx = 1;
    p.logy = norm2;
    p.width = 900;
    if (!norm2) p.ymin = 0;
    lipt_status st = svg_write_file(path, &p, s, 4, err);
    free(xs); free(lo); free(up); free(br);
    return st;
}

static int exp_tightness(int argc, char **argv) {
    const char *C = "experiment tightness";
    cli_args a;
    int pr = cli_parse(&a, C,
                       "Asymptotic tightness of the Lipschitz bound of tied L2 attention (paper Fig. 2, SPEC §4.1): for each N,\n"
                       "gradient ascent on the Jacobian norm of F(X) = Attn_L2tied(X) W^O from random starts gives a lower bound on\n"
                       "Lip(F), compared with the upper bound of Theorem 3.2 for the same weights. Resumable: N values already in\n"
                       "the CSV of the same configuration are skipped.",
                       tight_opts, (int)(sizeof tight_opts / sizeof tight_opts[0]), argc, argv, 0, 0);
    if (pr) return pr > 0 ? 0 : 2;
    long D, H, starts, steps, max_exact, piters, seed, fit_min;
    double lr, in_scale, fd_eps, wscale;
    if (cli_int(&a, "d", &D) || cli_int(&a, "heads", &H) || cli_int(&a, "starts", &starts) ||
        cli_int(&a, "steps", &steps) || cli_int(&a, "max-exact", &max_exact) || cli_int(&a, "power-iters", &piters) ||
        cli_int(&a, "seed", &seed) || cli_int(&a, "fit-min", &fit_min) || cli_float(&a, "lr", &lr) || cli_float(&a, "input-scale", &in_scale) ||
        cli_float(&a, "fd-eps", &fd_eps) || cli_float(&a, "weight-scale", &wscale))
        return 2;
    int rc = cli_apply_threads(&a, C);
    if (rc) return rc;
    if (D < 1 || D > 256 || H < 1 || D % H) return cli_error(C, "--d must be in [1, 256] and divisible by --heads");
    if (starts < 1 || starts > 100000 || steps < 0 || steps > 10000000)
        return cli_error(C, "--starts must be >= 1 and --steps >= 0");
    if (!(lr > 0) || !(in_scale > 0) || !(fd_eps > 0) || !(wscale > 0))
        return cli_error(C, "--lr, --input-scale, --fd-eps and --weight-scale must be positive");
    if (max_exact < 0 || piters < 1) return cli_error(C, "--max-exact must be >= 0 and --power-iters >= 1");
    const char *norm_s = cli_str(&a, "norm");
    const int norm2 = strcmp(norm_s, "2") == 0;
    if (!norm2 && strcmp(norm_s, "inf") != 0) return cli_error(C, "--norm must be inf or 2, got '%s'", norm_s);
    const char *wmode = cli_str(&a, "weights");
    if (!wmode) wmode = D == 1 ? "ones" : "random";
    const int ones = strcmp(wmode, "ones") == 0;
    if (!ones && strcmp(wmode, "random") != 0) return cli_error(C, "--weights must be ones or random, got '%s'", wmode);
    const int causal = cli_has(&a, "causal");
    const char *nl = cli_str(&a, "n-list");
    if (!nl) nl = D == 1 ? "2,3,5,10,20,50,100,200,500,1000" : D <= 4 ? "2,3,5,10,20,50,100,200" : "2,3,5,10,20,50";
    double nv[64];
    const int n_n = parse_list(nl, nv, 64);
    if (n_n < 1) return cli_error(C, "--n-list must be comma-separated integers (at most 64), got '%s'", nl);
    for (int i = 0; i < n_n; i++)
        if (nv[i] != floor(nv[i]) || nv[i] < 2 || nv[i] * (double)D > 1e6)
            return cli_error(C, "--n-list values must be integers >= 2 with N*D <= 1e6, got %g", nv[i]);

    lipt_error err = {0};
    const char *out = cli_str(&a, "out");
    if (run_mkdir(out, &err)) return cli_fail(C, &err);
    char base[1024], csv[1100], svg[1100], setf[1100];
    snprintf(base, sizeof base, "%s/tightness_d%ld_h%ld_%s%s", out, D, H, norm2 ? "2" : "inf", causal ? "_causal" : "");
    snprintf(csv, sizeof csv, "%s.csv", base);
    snprintf(svg, sizeof svg, "%s.svg", base);
    snprintf(setf, sizeof setf, "%s.settings", base);
    char settings[512];
    snprintf(settings, sizeof settings,
             "tightness d=%ld heads=%ld norm=%s causal=%d weights=%s weight_scale=%g starts=%ld steps=%ld lr=%g "
             "input_scale=%g fd_eps=%g max_exact=%ld seed=%ld\n",
             D, H, norm2 ? "2" : "inf", causal, wmode, wscale, starts, steps, lr, in_scale, fd_eps, max_exact, seed);

    /* resume: the rows of an earlier run with exactly these settings */
    tight_row rows[256];
    int n_rows = 0;
    if (!cli_has(&a, "restart")) {
        FILE *f = fopen(setf, "r");
        char prev[512] = "";
        if (f) {
            if (!fgets(prev, sizeof prev, f)) prev[0] = 0;
            fclose(f);
        }
        FILE *fc = fopen(csv, "r");
        if (fc) fclose(fc);
        if (fc && strcmp(prev, settings) != 0)
            return cli_error(C, "%s holds results of other settings (%s: %.*s; this run: %.*s); use --restart to discard "
                             "them or another --out",
                             csv, setf, prev[0] ? (int)strcspn(prev, "\n") : 4, prev[0] ? prev : "none",
                             (int)strcspn(settings, "\n"), settings);
        if (fc) n_rows = read_rows(csv, rows, 256);
    }
    {
        out_file o;
        if (open_file(&o, setf, &err)) return cli_fail(C, &err);
        fputs(settings, o.f);
        if (commit_file(&o, &err)) return cli_fail(C, &err);
    }
    if (cli_has(&a, "restart") || n_rows == 0)
        if (write_rows(csv, rows, n_rows, (int)fit_min, &err)) return cli_fail(C, &err);

    att_weights w0;
    weights_init(&w0, (int)D, ones, wscale, splitmix64((uint64_t)seed));
    float *vbuf = malloc(sizeof(float) * (size_t)(2 * H * D + 4 * D));
    lipt_bound_vectors vec = {vbuf, vbuf + H * D, vbuf + H * D + D, vbuf + 2 * H * D + D, vbuf + 2 * H * D + 2 * D,
                              vbuf + 2 * H * D + 3 * D, NULL, NULL, 0};
    if (norm2) {
        lipt_bound_vectors_init(&vec, (int)D, (int)H, (uint64_t)seed + 7);
        bound_2(&w0, (int)H, 2, &vec, (int)piters); /* converge the vectors once: the weights do not change */
    }
    /* starts run in parallel, one per thread, each on its own copy of the weights (the Jacobian tools touch the
     * weights' flags); BLAS inside a thread must then run single-threaded */
    int T = lipt_blas_nests_safely() ? lipt_get_threads() : 1;
    if (T > starts) T = (int)starts;
    if (T < 1) T = 1;
    att_weights *wt = malloc(sizeof *wt * (size_t)T);
    for (int t = 0; t < T; t++) weights_clone(&wt[t], &w0);
    char wdesc[160], title[256];
    if (ones) snprintf(wdesc, sizeof wdesc, "W^Q = W^V = W^O entries all %g", wscale);
    else snprintf(wdesc, sizeof wdesc, "random weights N(0, %g^2/D), seed %ld", wscale, seed);
    char wshort[48];
    if (ones) snprintf(wshort, sizeof wshort, "W = %g", wscale);
    else snprintf(wshort, sizeof wshort, "random W");
    snprintf(title, sizeof title, "Tied L2-MHA, D=%ld H=%ld, %s%s: %s-norm Lipschitz bounds vs N", D, H, wshort,
             causal ? ", causal" : "", norm2 ? "2" : "inf");
    const int tty = cli_stderr_is_tty();
    const int json = cli_has(&a, "json");
    const double t_all = cli_now();
    int n_done_now = 0;

    for (int ni = 0; ni < n_n && rc == 0; ni++) {
        const int N = (int)nv[ni];
        int have = 0;
        for (int i = 0; i < n_rows; i++) have |= rows[i].N == N;
        if (have) {
            fprintf(stderr, "tightness N=%d: already in %s, skipped\n", N, csv);
            continue;
        }
        if (n_rows >= 256) { rc = cli_error(C, "too many rows in %s", csv); break; }
        const size_t n = (size_t)N * D;
        const double ub = norm2 ? bound_2(&w0, (int)H, N, &vec, 0) : bound_inf(&w0, (int)H, N);
        /* unmasked attention is permutation-equivariant: the D rows of one token stand for all of them. Under the
         * causal mask the rows differ: scan them all at each start when that is affordable, else follow the last
         * token (which sees every other) */
        const int scan = causal && n <= (size_t)max_exact;
        size_t *follow = malloc(sizeof(size_t) * (size_t)D);
        for (long j = 0; j < D; j++) follow[j] = (size_t)(causal ? N - 1 : 0) * (size_t)D + (size_t)j;
        lipt_ascent_opts base_o = lipt_ascent_defaults();
        base_o.starts = 1;
        base_o.steps = (int)steps;
        base_o.lr = lr;
        base_o.input_scale = in_scale;
        base_o.fd_eps = fd_eps;
        base_o.candidates = scan ? (int)(D > 4 ? D : 4) : (int)D;
        base_o.rows = norm2 || scan ? NULL : follow;
        base_o.max_exact = (size_t)max_exact;
        float *xbest = malloc(sizeof(float) * n), *xbuf = malloc(sizeof(float) * n * (size_t)T);
        double best = -1, best_random = -1, sum_start = 0;
        int diverged = 0, done = 0, failed = 0, n_ok = 0;
        lipt_error ferr = {0};
        const double t0 = cli_now();
        const int every = starts >= 10 ? (int)(starts / 10) : 1;
#pragma omp parallel for schedule(dynamic, 1) num_threads(T) if (T > 1)
        for (long s = 0; s < starts; s++) {
            const int tid = T > 1 ? omp_get_thread_num() : 0;
            att_map m = {ATT_L2_TIED, N, (int)D, (int)H, causal, &wt[tid], 1.0f};
            lipt_jac_map jm = {att_forward, &m, 2, {N, (int)D, 0, 0}, 0};
            lipt_ascent_opts o = base_o;
            o.seed = splitmix64((uint64_t)seed * 0x100000001B3ull ^ ((uint64_t)N << 24) ^ (uint64_t)s);
            lipt_ascent_result r;
            memset(&r, 0, sizeof r);
            lipt_error e = {0};
            float *xb = xbuf + (size_t)tid * n;
            lipt_status st = norm2 ? lipt_ascent_jac_2(&jm, &o, xb, &r, &e) : lipt_ascent_jac_inf(&jm, &o, xb, &r, &e);
#pragma omp critical(exp_tightness)
            {
                if (st == LIPT_ERR_NUMERIC) {
                    diverged++; /* every step of this start was non-finite */
                } else if (st) {
                    if (!failed) ferr = e;
                    failed = 1;
                } else {
                    if (r.best > best) {
                        best = r.best;
                        memcpy(xbest, xb, n * sizeof(float));
                    }
                    if (r.best_random > best_random) best_random = r.best_random;
                    sum_start += r.best;
                    n_ok++;
                    diverged += r.n_diverged;
                }
                done++;
                const double el = cli_now() - t0;
                if (tty || done % every == 0 || done == starts) {
                    fprintf(stderr, "%stightness N=%d: %d/%ld starts, best %.6g (upper %.6g), %.1f s, eta %.0f s%s",
                            tty ? "\r" : "", N, done, starts, best, ub, el, el / done * (double)(starts - done),
                            tty ? "   " : "\n");
                    fflush(stderr);
                }
            }
        }
        if (tty) fputc('\n', stderr);
        free(xbuf);
        if (failed) {
            rc = cli_fail(C, &ferr);
        } else if (best < 0) {
            rc = cli_error(C, "N=%d: every start diverged", N);
        } else {
            /* the followed rows give a lower bound; the whole Jacobian at the best point can only raise it */
            if (!norm2 && n <= (size_t)max_exact) {
                att_map m = {ATT_L2_TIED, N, (int)D, (int)H, causal, &w0, 1.0f};
                lipt_jac_map jm = {att_forward, &m, 2, {N, (int)D, 0, 0}, 1};
                double full;
                if (lipt_jacobian_norm_inf_at(&jm, xbest, &full, NULL, &err) != LIPT_OK) rc = cli_fail(C, &err);
                else if (full > best) best = full;
            }
            if (rc == 0) {
                rows[n_rows++] = (tight_row){N, best, ub, best / ub, NAN, best_random, sum_start / n_ok, diverged,
                                             (int)starts, (int)steps, cli_now() - t0};
                /* the CSV and the plot so far, after every N (an interrupted run keeps both) */
                if (write_rows(csv, rows, n_rows, (int)fit_min, &err) ||
                    tight_plot(svg, rows, n_rows, norm2, (int)fit_min, title, &err))
                    rc = cli_fail(C, &err);
                n_done_now++;
                fprintf(stderr, "tightness N=%d done: lower %.6g, upper %.6g, ratio %.4f (%.1f s)\n", N, best, ub,
                        best / ub, cli_now() - t0);
            }
        }
        free(follow);
        free(xbest);
    }
    for (int t = 0; t < T; t++) weights_free(&wt[t]);
    free(wt);

    if (rc == 0) {
        qsort(rows, (size_t)n_rows, sizeof *rows, cmp_row_n);
        const lin_fit fit = fit_rows(rows, n_rows, 0, (int)fit_min), ufit = fit_rows(rows, n_rows, 1, (int)fit_min);
        if (tight_plot(svg, rows, n_rows, norm2, (int)fit_min, title, &err)) rc = cli_fail(C, &err);
        if (rc == 0 && json) {
            json_w j;
            json_begin(&j, stdout);
            json_str(&j, "experiment", "tightness");
            json_int(&j, "d", D);
            json_int(&j, "heads", H);
            json_str(&j, "norm", norm2 ? "2" : "inf");
            json_bool(&j, "causal", causal);
            json_str(&j, "weights", wmode);
            json_num(&j, "weight_scale", wscale);
            json_int(&j, "starts", starts);
            json_int(&j, "steps", steps);
            json_num(&j, "lr", lr);
            json_num(&j, "input_scale", in_scale);
            json_int(&j, "seed", seed);
            json_arr_open(&j, "rows");
            for (int i = 0; i < n_rows; i++) {
                json_obj_open(&j, NULL);
                json_int(&j, "N", rows[i].N);
                json_num(&j, "lower", rows[i].lower);
                json_num(&j, "upper", rows[i].upper);
                json_num(&j, "ratio", rows[i].ratio);
                json_num(&j, "fit", rows[i].fit);
                json_num(&j, "best_random", rows[i].best_random);
                json_num(&j, "mean_start_best", rows[i].mean_start);
                json_int(&j, "diverged", rows[i].diverged);
                json_int(&j, "starts", rows[i].starts);
                json_int(&j, "steps", rows[i].steps);
                json_num(&j, "seconds", rows[i].seconds);
                json_obj_close(&j);
            }
            json_arr_close(&j);
            json_obj_open(&j, "fit");
            json_str(&j, "form", "lower ~ a (log N - log log N) + b");
            json_int(&j, "n_min", fit_min);
            json_num(&j, "a", fit.a);
            json_num(&j, "b", fit.b);
            json_num(&j, "rms", fit.rms);
            json_num(&j, "upper_a", ufit.a);
            json_num(&j, "upper_b", ufit.b);
            json_obj_close(&j);
            json_str(&j, "csv", csv);
            json_str(&j, "svg", svg);
            json_num(&j, "seconds", cli_now() - t_all);
            json_end(&j);
        } else if (rc == 0) {
            printf("tightness: tied L2-MHA, D = %ld, H = %ld, %s, %s; %s-norm; %ld starts x %ld Adam steps (lr %g, "
                   "starts N(0, %g^2))\n",
                   D, H, wdesc, causal ? "causal" : "unmasked", norm2 ? "2" : "inf", starts, steps, lr, in_scale);
            printf("%6s %12s %12s %8s %12s %12s %10s\n", "N", "lower", "upper", "ratio", "fit", "best_random", "seconds");
            for (int i = 0; i < n_rows; i++)
                printf("%6d %12.6g %12.6g %8.4f %12.6g %12.6g %10.1f\n", rows[i].N, rows[i].lower, rows[i].upper,
                       rows[i].ratio, rows[i].fit, rows[i].best_random, rows[i].seconds);
            if (fit.ok)
                printf("fit (N >= %ld): lower ~ a (log N - log log N) + b with a = %.4g, b = %.4g (rms residual %.3g); "
                       "the same fit of the upper bound: a = %.4g, b = %.4g\n",
                       fit_min, fit.a, fit.b, fit.rms, ufit.a, ufit.b);
            else
                printf("fit: needs at least two N values\n");
            printf("wrote %s and %s (%d new N values, %.1f s)\n", csv, svg, n_done_now, cli_now() - t_all);
        }
    }
    weights_free(&w0);
    free(vbuf);
    return rc;
}

/* ------------------------------------------------------------------------------------------- invertibility */

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
    {"data", CLI_STRING, "NAME|PATH", "corpus of the test windows (with --inputs ptb)", "ptb"},
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
    {"out", CLI_STRING, "DIR", "directory of the CSV and SVG files", "runs/experiments"},
    {"threads", CLI_INT, "N", "threads for OpenMP and OpenBLAS", NULL},
    {"json", CLI_FLAG, NULL, "one JSON object on stdout: settings, per-setting summary and error traces, files", NULL},
};

/* The branch under inversion, recording ‖x_k − x*‖_∞ of every iterate it is called on (call k sees x_k). */
typedef struct {
    att_map *m;
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
    return att_forward(ctx, x, t->m);
}

typedef struct {
    char name[64];
    att_kind kind;
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

static int exp_invertibility(int argc, char **argv) {
    const char *C = "experiment invertibility";
    cli_args a;
    int pr = cli_parse(&a, C,
                       "Numerical invertibility of residual maps x + g(x) (paper Fig. 3, SPEC §4.2): g = contractive tied L2-MHA\n"
                       "(F / max(1, UB/c), UB the inf-norm bound at N) and g = DP-MHA scaled the same way, inverted by fixed-point\n"
                       "iteration x <- y - g(x) from x = y; the reconstruction error max|x_k - x*| after every iteration.",
                       inv_opts, (int)(sizeof inv_opts / sizeof inv_opts[0]), argc, argv, 0, 0);
    if (pr) return pr > 0 ? 0 : 2;
    long N, D, H, max_iter, seed, plot_iters;
    double wscale, tol, thr;
    if (cli_int(&a, "n", &N) || cli_int(&a, "d", &D) || cli_int(&a, "heads", &H) || cli_int(&a, "max-iter", &max_iter) ||
        cli_int(&a, "seed", &seed) || cli_int(&a, "plot-iters", &plot_iters) || cli_float(&a, "weight-scale", &wscale) || cli_float(&a, "tol", &tol) ||
        cli_float(&a, "threshold", &thr))
        return 2;
    int rc = cli_apply_threads(&a, C);
    if (rc) return rc;
    if (N < 1 || D < 1 || H < 1 || D % H || N * D > 65536)
        return cli_error(C, "--n, --d, --heads must be >= 1, --heads must divide --d, N*D <= 65536");
    if (max_iter < 1 || max_iter > 100000) return cli_error(C, "--max-iter must be in [1, 100000]");
    if (!(wscale > 0) || !(tol >= 0) || !(thr > 0)) return cli_error(C, "--weight-scale, --threshold > 0 and --tol >= 0");
    double cs[16], scales[16];
    const int nc = parse_list(cli_str(&a, "c-list"), cs, 16), nsc = parse_list(cli_str(&a, "scales"), scales, 16);
    if (nc < 1 || nsc < 1) return cli_error(C, "--c-list and --scales must be comma-separated numbers (at most 16)");
    for (int i = 0; i < nc; i++)
        if (!(cs[i] > 0 && cs[i] < 1)) return cli_error(C, "--c-list values must be in (0, 1), got %g", cs[i]);
    for (int i = 0; i < nsc; i++)
        if (!(scales[i] > 0)) return cli_error(C, "--scales values must be positive, got %g", scales[i]);
    if (plot_iters < 0) return cli_error(C, "--plot-iters must be >= 0");
    const char *wmode = cli_str(&a, "weights");
    const int ones = strcmp(wmode, "ones") == 0;
    if (!ones && strcmp(wmode, "random") != 0) return cli_error(C, "--weights must be random or ones, got '%s'", wmode);
    const char *inputs = cli_str(&a, "inputs"), *dpf = cli_str(&a, "dp-factor");
    const int spread = strcmp(inputs, "spread") == 0, from_ptb = strcmp(inputs, "ptb") == 0;
    if (!spread && !from_ptb && strcmp(inputs, "gaussian") != 0) return cli_error(C, "--inputs must be spread, gaussian or ptb");
    if (from_ptb != cli_has(&a, "ckpt")) return cli_error(C, "--inputs ptb needs --ckpt FILE (and --ckpt is only for --inputs ptb)");
    lipt_error err = {0};
    float *emb = NULL; /* the trained model's input embeddings, N x d_model */
    if (from_ptb) {
        lipt_model m;
        lipt_vocab vocab;
        int64_t step;
        if (run_load_model(cli_str(&a, "ckpt"), &m, &vocab, &step, &err) != LIPT_OK) return cli_fail(C, &err);
        int bad = 0;
        if (cli_has(&a, "d") && D != m.cfg.d_model)
            fprintf(stderr, "note: --d %ld replaced by the model's d_model %d\n", D, m.cfg.d_model);
        D = m.cfg.d_model;
        if (D % H) bad = cli_error(C, "--heads %ld does not divide the model's d_model %ld", H, D);
        if (!bad) {
            emb = malloc(sizeof(float) * (size_t)N * D);
            if (exp_test_inputs(&m, &vocab, cli_str(&a, "data"), (int)N, 0, 0, emb, &err) != LIPT_OK) {
                free(emb);
                emb = NULL;
                bad = err.status == LIPT_ERR_ARG ? cli_error(C, "%s", err.msg) : cli_fail(C, &err);
            }
        }
        lipt_model_free(&m);
        if (bad) return bad;
    }
    const int dp_ref = strcmp(dpf, "ref") == 0;
    if (!dp_ref && strcmp(dpf, "bound") != 0) return cli_error(C, "--dp-factor must be bound or ref");
    const int causal = cli_has(&a, "causal"), json = cli_has(&a, "json");
    const char *out = cli_str(&a, "out");
    if (run_mkdir(out, &err)) return cli_fail(C, &err);
    char base[1024], csv[1100], sumcsv[1100], svg[1100];
    snprintf(base, sizeof base, "%s/invertibility_n%ld_d%ld_h%ld%s%s", out, N, D, H, causal ? "_causal" : "", from_ptb ? "_ptb" : "");
    snprintf(csv, sizeof csv, "%s.csv", base);
    snprintf(sumcsv, sizeof sumcsv, "%s_summary.csv", base);
    snprintf(svg, sizeof svg, "%s.svg", base);

    const size_t n = (size_t)N * D;
    att_weights wl2, wdp;
    weights_init(&wl2, (int)D, ones, wscale, splitmix64((uint64_t)seed));
    weights_init(&wdp, (int)D, ones, wscale, splitmix64((uint64_t)seed + 1));
    /* one unit-scale draw z; the inputs are scale · z */
    float *z = malloc(sizeof(float) * n), *xs = malloc(sizeof(float) * n), *xr = malloc(sizeof(float) * n);
    lipt_rng r;
    lipt_rng_seed(&r, splitmix64((uint64_t)seed + 2));
    lipt_rng_fill_normal(&r, z, n, 1.0f);
    if (spread)
        for (long j = 0; j < D; j++) z[(size_t)(N - 1) * D + j] = 0;
    if (emb) {
        memcpy(z, emb, sizeof(float) * n);
        free(emb);
    }
    const double ub_l2 = bound_inf(&wl2, (int)H, (int)N), ub_dp = bound_inf(&wdp, (int)H, (int)N);
    /* the DP reference norm: its exact Jacobian at the unit-scale input */
    double jdp_ref = NAN;
    if (dp_ref) {
        att_map m = {ATT_DP, (int)N, (int)D, (int)H, causal, &wdp, 1.0f};
        lipt_jac_map jm = {att_forward, &m, 2, {(int)N, (int)D, 0, 0}, 1};
        if (lipt_jacobian_norm_inf_at(&jm, z, &jdp_ref, NULL, &err) != LIPT_OK) rc = cli_fail(C, &err);
    }
    const int ns = rc ? 0 : 2 * nc * nsc;
    inv_setting *S = calloc((size_t)ns, sizeof *S);
    double *tracebuf = malloc(sizeof(double) * (size_t)(max_iter + 2));
    LIPT_CHECK((S || !ns) && tracebuf && z && xs && xr, "experiment: out of memory");
    lipt_ctx ctx;
    lipt_ctx_init(&ctx, 1 << 20, 1);
    int k = 0;
    for (int kind = 0; kind < 2 && rc == 0; kind++)
        for (int ci = 0; ci < nc && rc == 0; ci++)
            for (int si = 0; si < nsc && rc == 0; si++, k++) {
                inv_setting *st = &S[k];
                st->kind = kind ? ATT_DP : ATT_L2_TIED;
                st->c = cs[ci];
                st->scale = scales[si];
                snprintf(st->name, sizeof st->name, "%s c=%g x%g", kind ? "DP" : "L2", cs[ci], scales[si]);
                const double ref = kind ? (dp_ref ? jdp_ref : ub_dp) : ub_l2;
                st->factor = 1.0 / fmax(1.0, ref / cs[ci]);
                att_map m = {st->kind, (int)N, (int)D, (int)H, causal, kind ? &wdp : &wl2, (float)st->factor};
                for (size_t i = 0; i < n; i++) xs[i] = (float)(scales[si] * z[i]);
                /* the local Lipschitz constant of g at the true input (exact Jacobian) */
                st->jac_inf = NAN;
                if (n <= 4096) {
                    lipt_jac_map jm = {att_forward, &m, 2, {(int)N, (int)D, 0, 0}, 1};
                    if (lipt_jacobian_norm_inf_at(&jm, xs, &st->jac_inf, NULL, &err) != LIPT_OK) {
                        rc = cli_fail(C, &err);
                        break;
                    }
                }
                /* y = x* + g(x*) */
                lipt_ctx_reset(&ctx);
                lipt_no_grad_push(&ctx);
                lipt_tensor *xt = lipt_tensor_2d(&ctx, (int)N, (int)D);
                memcpy(xt->data, xs, n * sizeof(float));
                lipt_tensor *gx = att_forward(&ctx, xt, &m);
                lipt_tensor *y = lipt_tensor_2d(&ctx, (int)N, (int)D);
                for (size_t i = 0; i < n; i++) y->data[i] = xs[i] + gx->data[i];
                lipt_no_grad_pop(&ctx);
                traced_branch tb = {&m, xs, n, tracebuf, (int)max_iter + 1, 0};
                lipt_fp_opts fo = {tol, (int)max_iter, 0};
                lipt_fp_result res = {0, 0, NULL, 0};
                lipt_error ie = {0};
                const lipt_status fs = lipt_fixed_point_invert(&ctx, traced_g, &tb, y, xr, &fo, &res, &ie);
                if (fs != LIPT_OK && fs != LIPT_ERR_NUMERIC) {
                    rc = cli_fail(C, &ie);
                    break;
                }
                st->status = fs == LIPT_OK ? "converged" : res.converged ? "converged" : strstr(ie.msg, "non-finite") ? "non-finite" : "not converged";
                /* the trace: x_0 = y ... x_iters, the last being the returned iterate */
                st->iters = res.iters;
                st->rel = malloc(sizeof(double) * (size_t)(res.iters + 1));
                st->abs_e = malloc(sizeof(double) * (size_t)(res.iters + 1));
                LIPT_CHECK(st->rel && st->abs_e, "experiment: out of memory");
                const double xscale = fmax(1.0, max_abs_f(xs, n));
                double elast = 0;
                for (size_t i = 0; i < n; i++) elast = fmax(elast, fabs((double)xr[i] - xs[i]));
                for (int it = 0; it <= res.iters; it++) {
                    st->abs_e[it] = it < res.iters && it < tb.calls ? tracebuf[it] : elast;
                    st->rel[it] = st->abs_e[it] / xscale;
                }
                st->reached_at = -1;
                for (int it = 0; it <= res.iters; it++)
                    if (st->rel[it] <= thr) { st->reached_at = it; break; }
                /* Banach: with Lip_inf(g) <= c the error contracts at least by c per iteration (plus float rounding) */
                st->within_rate = 1;
                for (int it = 0; it <= res.iters; it++)
                    if (st->rel[it] > pow(st->c, it) * st->rel[0] * (1 + 1e-4) + 4e-7) st->within_rate = 0;
            }
    lipt_ctx_free(&ctx);
    if (rc) goto done;

    {
        /* per-iteration CSV, summary CSV */
        out_file o;
        if (open_file(&o, csv, &err)) { rc = cli_fail(C, &err); goto done; }
        fprintf(o.f, "setting,attention,c,scale,iteration,error,rel_error,predicted\n");
        for (int i = 0; i < ns; i++)
            for (int it = 0; it <= S[i].iters; it++)
                fprintf(o.f, "%s,%s,%g,%g,%d,%.9g,%.9g,%.9g\n", S[i].name, S[i].kind ? "dp" : "l2", S[i].c, S[i].scale,
                        it, S[i].abs_e[it], S[i].rel[it], pow(S[i].c, it) * S[i].rel[0]);
        if (commit_file(&o, &err)) { rc = cli_fail(C, &err); goto done; }
        if (open_file(&o, sumcsv, &err)) { rc = cli_fail(C, &err); goto done; }
        fprintf(o.f, "setting,attention,c,scale,factor,jac_inf_at_input,status,iterations,reached_at,final_rel_error,"
                     "within_c_rate\n");
        for (int i = 0; i < ns; i++)
            fprintf(o.f, "%s,%s,%g,%g,%.9g,%.9g,%s,%d,%d,%.9g,%d\n", S[i].name, S[i].kind ? "dp" : "l2", S[i].c,
                    S[i].scale, S[i].factor, S[i].jac_inf, S[i].status, S[i].iters, S[i].reached_at,
                    S[i].rel[S[i].iters], S[i].within_rate);
        if (commit_file(&o, &err)) { rc = cli_fail(C, &err); goto done; }
    }

    {
        /* plot: colour by c, solid L2 / dashed DP, marker by scale; dotted c^k lines from the largest L2 start error */
        int maxit = 0, need = 0;
        double emin = INFINITY;
        for (int i = 0; i < ns; i++) {
            if (S[i].iters > maxit) maxit = S[i].iters;
            if (S[i].reached_at >= 0 && S[i].iters > need) need = S[i].iters;
            for (int it = 0; it <= S[i].iters; it++)
                if (S[i].rel[it] > 0) emin = fmin(emin, S[i].rel[it]);
        }
        if (!isfinite(emin)) emin = 1e-10;
        /* the failures run flat to the cap: the x axis shows where the reconstructions happen (the table and the
         * CSV have every iteration) */
        const int want = plot_iters > 0 ? (int)plot_iters : need * 2 > 20 ? need * 2 : 20;
        const int xshow = want < maxit ? want : maxit > 0 ? maxit : 1;
        const int me = xshow > 24 ? xshow / 12 : 1;
        const int nser = ns + nc;
        svg_series *ser = calloc((size_t)nser, sizeof *ser);
        double **buf = calloc((size_t)(2 * nser), sizeof *buf);
        LIPT_CHECK(ser && buf, "experiment: out of memory");
        static const svg_marker marks[] = {SVG_MARK_CIRCLE, SVG_MARK_SQUARE, SVG_MARK_TRIANGLE, SVG_MARK_DIAMOND, SVG_MARK_CROSS};
        for (int i = 0; i < ns; i++) {
            const int ci = (i / nsc) % nc, si = i % nsc;
            double *x = buf[2 * i] = malloc(sizeof(double) * (size_t)(S[i].iters + 1));
            double *yv = buf[2 * i + 1] = malloc(sizeof(double) * (size_t)(S[i].iters + 1));
            for (int it = 0; it <= S[i].iters; it++) {
                x[it] = it;
                yv[it] = S[i].rel[it] > 0 ? S[i].rel[it] : NAN; /* an exact 0 has no place on a log axis */
            }
            ser[i] = (svg_series){S[i].name, x, yv, S[i].iters + 1, svg_color(ci), marks[si % 5], me,
                                  S[i].kind ? SVG_DASHED : SVG_SOLID, 1.5};
        }
        char (*lab)[48] = calloc((size_t)nc, sizeof *lab);
        for (int ci = 0; ci < nc; ci++) {
            double e0 = 0;
            for (int i = 0; i < ns; i++)
                if (S[i].kind == ATT_L2_TIED && (i / nsc) % nc == ci) e0 = fmax(e0, S[i].rel[0]);
            int len = 0;
            while (len <= xshow && pow(cs[ci], len) * e0 >= emin / 10) len++;
            double *x = buf[2 * (ns + ci)] = malloc(sizeof(double) * (size_t)(len + 1));
            double *yv = buf[2 * (ns + ci) + 1] = malloc(sizeof(double) * (size_t)(len + 1));
            for (int it = 0; it < len; it++) {
                x[it] = it;
                yv[it] = pow(cs[ci], it) * e0;
            }
            snprintf(lab[ci], sizeof lab[ci], "c^k (c=%g), Banach rate", cs[ci]);
            ser[ns + ci] = (svg_series){lab[ci], x, yv, len, svg_color(ci), SVG_MARK_NONE, 1, SVG_DOTTED, 1.3};
        }
        char title[200];
        snprintf(title, sizeof title, "Fixed-point inversion of x + g(x): N=%ld, D=%ld, H=%ld%s, %s inputs", N, D, H,
                 causal ? ", causal" : "", spread ? "spread" : "Gaussian");
        svg_plot p = svg_plot_defaults();
        p.title = title;
        p.ylabel = "max|x_k - x*| / max(1, max|x*|)";
        p.logy = 1;
        p.width = 980;
        p.height = 40 + 18 * nser > 520 ? 40 + 18 * nser : 520;
        char xlab[160];
        snprintf(xlab, sizeof xlab, "fixed-point iteration k%s",
                 xshow < maxit ? " (axis cut: the runs that do not reconstruct go on to the cap)" : "");
        p.xlabel = xlab;
        p.xmin = 0;
        p.xmax = xshow;
        const lipt_status ps = svg_write_file(svg, &p, ser, nser, &err);
        for (int i = 0; i < 2 * nser; i++) free(buf[i]);
        free(buf);
        free(ser);
        free(lab);
        if (ps) { rc = cli_fail(C, &err); goto done; }
    }

    {
        int l2_ok = 0, l2_n = 0, dp_ok = 0, dp_n = 0;
        for (int i = 0; i < ns; i++) {
            if (S[i].kind == ATT_L2_TIED) { l2_n++; l2_ok += S[i].reached_at >= 0; }
            else { dp_n++; dp_ok += S[i].reached_at >= 0; }
        }
        if (json) {
            json_w j;
            json_begin(&j, stdout);
            json_str(&j, "experiment", "invertibility");
            json_int(&j, "n", N);
            json_int(&j, "d", D);
            json_int(&j, "heads", H);
            json_bool(&j, "causal", causal);
            json_str(&j, "inputs", inputs);
            json_str(&j, "dp_factor", dpf);
            json_str(&j, "weights", wmode);
            json_num(&j, "weight_scale", wscale);
            json_num(&j, "bound_l2", ub_l2);
            json_num(&j, "bound_dp_weights", ub_dp);
            json_num(&j, "dp_reference_jac_inf", jdp_ref);
            json_num(&j, "tol", tol);
            json_num(&j, "threshold", thr);
            json_int(&j, "max_iter", max_iter);
            json_int(&j, "seed", seed);
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
            json_int(&j, "l2_reconstructed", l2_ok);
            json_int(&j, "l2_settings", l2_n);
            json_int(&j, "dp_reconstructed", dp_ok);
            json_int(&j, "dp_settings", dp_n);
            json_str(&j, "csv", csv);
            json_str(&j, "summary_csv", sumcsv);
            json_str(&j, "svg", svg);
            json_end(&j);
        } else {
            printf("invertibility: N = %ld, D = %ld, H = %ld, %s, %s inputs (scale x unit draw), weights %s %g%s\n", N, D,
                   H, causal ? "causal" : "unmasked", spread ? "spread (last token at the origin)" : "Gaussian",
                   ones ? "all entries" : "N(0, S^2/D) with S =", wscale, ones ? "" : "");
            printf("L2: g = F / max(1, UB/c), UB = %.4g (inf-norm bound at N); DP: own weights, divided by max(1, %s/c) "
                   "with %s = %.4g\n",
                   ub_l2, dp_ref ? "|J|" : "UB", dp_ref ? "|J_DP(unit input)|_inf" : "the same bound formula of its weights",
                   dp_ref ? jdp_ref : ub_dp);
            printf("error = max|x_k - x*| / max(1, max|x*|); reconstructed when <= %g; fixed-point tol %g, cap %ld\n", thr,
                   tol, max_iter);
            printf("%-16s %9s %12s %-14s %6s %8s %12s %8s\n", "setting", "factor", "|J_g(x*)|inf", "status", "iters",
                   "reached", "final error", "c^k ok");
            for (int i = 0; i < ns; i++) {
                char rb[16];
                if (S[i].reached_at >= 0) snprintf(rb, sizeof rb, "k=%d", S[i].reached_at);
                else snprintf(rb, sizeof rb, "no");
                printf("%-16s %9.3g %12.4g %-14s %6d %8s %12.3e %8s\n", S[i].name, S[i].factor, S[i].jac_inf,
                       S[i].status, S[i].iters, rb, S[i].rel[S[i].iters], S[i].within_rate ? "yes" : "no");
            }
            printf("L2: %d of %d settings reconstructed to <= %g; DP: %d of %d", l2_ok, l2_n, thr, dp_ok, dp_n);
            int first = 1;
            for (int i = 0; i < ns; i++)
                if (S[i].kind == ATT_DP && S[i].reached_at < 0) {
                    printf("%s%s", first ? " (failed: " : ", ", S[i].name);
                    first = 0;
                }
            printf("%s\n", first ? "" : ")");
            printf("wrote %s, %s and %s\n", csv, sumcsv, svg);
        }
    }

done:
    for (int i = 0; i < ns; i++) {
        free(S[i].rel);
        free(S[i].abs_e);
    }
    free(S);
    free(tracebuf);
    free(z);
    free(xs);
    free(xr);
    weights_free(&wl2);
    weights_free(&wdp);
    return rc;
}

/* ------------------------------------------------------------------------------------------- entry */

static void exp_usage(FILE *f) {
    fprintf(f, "usage: lipt experiment <tightness|invertibility|depth|stability|robustness> [options]   (--help after one for its options)\n"
               "  tightness      lower bounds on Lip(tied L2-MHA) by gradient ascent vs the upper bound, over N (Fig. 2)\n"
               "  invertibility  fixed-point inversion of x + g(x), contractive L2 vs scaled DP attention (Fig. 3)\n"
               "  depth          PTB BPC of the four attention variants against depth, same budget per cell (Fig. 4)\n"
               "  stability      Adam at a fixed learning rate without warmup, depth growing: divergence detected (Fig. 11)\n"
               "  robustness     output spread of trained attention under input perturbations at growing scales (Fig. 10)\n");
}

int cmd_experiment(int argc, char **argv) {
    if (argc < 1) {
        exp_usage(stderr);
        return 2;
    }
    if (strcmp(argv[0], "--help") == 0 || strcmp(argv[0], "-h") == 0 || strcmp(argv[0], "help") == 0) {
        exp_usage(stdout);
        return 0;
    }
    if (strcmp(argv[0], "tightness") == 0) return exp_tightness(argc - 1, argv + 1);
    if (strcmp(argv[0], "invertibility") == 0) return exp_invertibility(argc - 1, argv + 1);
    if (strcmp(argv[0], "depth") == 0) return exp_depth(argc - 1, argv + 1);
    if (strcmp(argv[0], "stability") == 0) return exp_stability(argc - 1, argv + 1);
    if (strcmp(argv[0], "robustness") == 0) return exp_robustness(argc - 1, argv + 1);
    fprintf(stderr, "lipt experiment: unknown experiment '%s'\n", argv[0]);
    exp_usage(stderr);
    return 2;
}
