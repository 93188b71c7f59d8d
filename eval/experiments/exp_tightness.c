/* lipt experiment tightness (SPEC §4.1, paper Fig. 2): asymptotic tightness of the Lipschitz bound of tied L2
 * attention, by gradient ascent on the Jacobian norm; a table on stdout, CSV and SVG files, optionally one JSON object. */
#include <math.h>
#include <omp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli.h"
#include "exp_attn.h"
#include "exp_util.h"
#include "lipt/jacobian.h"
#include "svg.h"

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
    {"out", CLI_STRING, "DIR", "directory of the CSV, SVG and settings files", "runs/experiments/tightness"},
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

static int take_tight_row(char **f, const double *v, void *row, void *user) {
    (void)f, (void)user;
    if (!(v[0] >= 2 && v[0] == floor(v[0]) && v[0] < 1e7)) return 0; /* not a sequence length */
    *(tight_row *)row = (tight_row){(int)v[0], v[1], v[2], v[3], v[4], v[5], v[6], (int)v[7], (int)v[8], (int)v[9], v[10]};
    return 1;
}

/* Rows of an earlier run, the first of each N. Returns their count, or -1 (message printed): another format. */
static int read_rows(const char *C, const char *path, tight_row *rows, int cap) {
    const exp_csv spec = {path, TIGHT_CSV_HEADER, 11, NULL, sizeof(tight_row), take_tight_row, NULL};
    const int got = exp_read_csv(&spec, C, rows, cap);
    int n = 0;
    for (int i = 0; i < got; i++) {
        int dup = 0;
        for (int j = 0; j < n; j++) dup |= rows[j].N == rows[i].N;
        if (!dup) rows[n++] = rows[i];
    }
    return got < 0 ? -1 : n;
}

static lipt_status write_rows(const char *path, tight_row *rows, int n, int nmin, lipt_error *err) {
    qsort(rows, (size_t)n, sizeof *rows, cmp_row_n);
    const lin_fit fit = fit_rows(rows, n, 0, nmin);
    exp_out o;
    lipt_status st = exp_open(&o, path, err);
    if (st) return st;
    fprintf(o.f, "%s\n", TIGHT_CSV_HEADER);
    for (int i = 0; i < n; i++) {
        rows[i].fit = fit.ok ? fit.a * tight_t(rows[i].N) + fit.b : NAN;
        fprintf(o.f, "%d,%.9g,%.9g,%.9g,%.9g,%.9g,%.9g,%d,%d,%d,%.3f\n", rows[i].N, rows[i].lower, rows[i].upper,
                rows[i].ratio, rows[i].fit, rows[i].best_random, rows[i].mean_start, rows[i].diverged, rows[i].starts,
                rows[i].steps, rows[i].seconds);
    }
    return exp_commit(&o, err);
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

/* The options, validated, and the files of this configuration. */
typedef struct {
    long D, H, starts, steps, max_exact, piters, seed, fit_min;
    double lr, in_scale, fd_eps, wscale;
    int norm2, ones, causal, json, restart;
    const char *wmode;
    double nv[64]; /* the N values */
    int n_n;
    char csv[1100], svg[1100], setf[1100];
    char settings[512]; /* one line: what a resumed run must match */
} tight_args;

/* Reads and checks the options (--threads: the prologue); returns 0 or the exit status. */
static int parse_tight_args(cli_args *a, const char *C, tight_args *o) {
    if (cli_int(a, "d", &o->D) || cli_int(a, "heads", &o->H) || cli_int(a, "starts", &o->starts) ||
        cli_int(a, "steps", &o->steps) || cli_int(a, "max-exact", &o->max_exact) || cli_int(a, "power-iters", &o->piters) ||
        cli_int(a, "seed", &o->seed) || cli_int(a, "fit-min", &o->fit_min) || cli_float(a, "lr", &o->lr) || cli_float(a, "input-scale", &o->in_scale) ||
        cli_float(a, "fd-eps", &o->fd_eps) || cli_float(a, "weight-scale", &o->wscale))
        return 2;
    const long D = o->D;
    if (D < 1 || D > 256 || o->H < 1 || D % o->H) return cli_error(C, "--d must be in [1, 256] and divisible by --heads");
    if (o->starts < 1 || o->starts > 100000 || o->steps < 0 || o->steps > 10000000)
        return cli_error(C, "--starts must be >= 1 and --steps >= 0");
    if (!(o->lr > 0) || !(o->in_scale > 0) || !(o->fd_eps > 0) || !(o->wscale > 0))
        return cli_error(C, "--lr, --input-scale, --fd-eps and --weight-scale must be positive");
    if (o->max_exact < 0 || o->piters < 1) return cli_error(C, "--max-exact must be >= 0 and --power-iters >= 1");
    const char *norm_s = cli_str(a, "norm");
    o->norm2 = strcmp(norm_s, "2") == 0;
    if (!o->norm2 && strcmp(norm_s, "inf") != 0) return cli_error(C, "--norm must be inf or 2, got '%s'", norm_s);
    o->wmode = cli_str(a, "weights");
    if (!o->wmode) o->wmode = D == 1 ? "ones" : "random";
    o->ones = strcmp(o->wmode, "ones") == 0;
    if (!o->ones && strcmp(o->wmode, "random") != 0)
        return cli_error(C, "--weights must be ones or random, got '%s'", o->wmode);
    o->causal = cli_has(a, "causal");
    const char *nl = cli_str(a, "n-list");
    if (!nl) nl = D == 1 ? "2,3,5,10,20,50,100,200,500,1000" : D <= 4 ? "2,3,5,10,20,50,100,200" : "2,3,5,10,20,50";
    o->n_n = exp_parse_list(nl, o->nv, 64);
    if (o->n_n < 1) return cli_error(C, "--n-list must be comma-separated integers (at most 64), got '%s'", nl);
    for (int i = 0; i < o->n_n; i++)
        if (o->nv[i] != floor(o->nv[i]) || o->nv[i] < 2 || o->nv[i] * (double)D > 1e6)
            return cli_error(C, "--n-list values must be integers >= 2 with N*D <= 1e6, got %g", o->nv[i]);
    o->restart = cli_has(a, "restart");
    o->json = cli_has(a, "json");
    return 0;
}

/* The output folder and file names, the settings file, and the rows of an earlier run with exactly these settings
 * (resume; none with --restart). Returns 0 or the exit status. */
static int prepare_outputs(const char *C, const char *out, tight_args *o, tight_row *rows, int *n_rows,
                           lipt_error *err) {
    if (run_mkdir(out, err)) return cli_fail(C, err);
    const char *norm = o->norm2 ? "2" : "inf";
    char base[1024];
    snprintf(base, sizeof base, "%s/tightness_d%ld_h%ld_%s%s", out, o->D, o->H, norm, o->causal ? "_causal" : "");
    snprintf(o->csv, sizeof o->csv, "%s.csv", base);
    snprintf(o->svg, sizeof o->svg, "%s.svg", base);
    snprintf(o->setf, sizeof o->setf, "%s.settings", base);
    snprintf(o->settings, sizeof o->settings,
             "tightness d=%ld heads=%ld norm=%s causal=%d weights=%s weight_scale=%g starts=%ld steps=%ld lr=%g "
             "input_scale=%g fd_eps=%g max_exact=%ld seed=%ld\n",
             o->D, o->H, norm, o->causal, o->wmode, o->wscale, o->starts, o->steps, o->lr, o->in_scale, o->fd_eps,
             o->max_exact, o->seed);
    *n_rows = 0;
    if (!o->restart) {
        FILE *f = fopen(o->setf, "r");
        char prev[512] = "";
        if (f) {
            if (!fgets(prev, sizeof prev, f)) prev[0] = 0;
            fclose(f);
        }
        FILE *fc = fopen(o->csv, "r");
        if (fc) fclose(fc);
        if (fc && strcmp(prev, o->settings) != 0)
            return cli_error(C, "%s holds results of other settings (%s: %.*s; this run: %.*s); use --restart to discard "
                             "them or another --out",
                             o->csv, o->setf, prev[0] ? (int)strcspn(prev, "\n") : 4, prev[0] ? prev : "none",
                             (int)strcspn(o->settings, "\n"), o->settings);
        if (fc && (*n_rows = read_rows(C, o->csv, rows, 256)) < 0) return 2;
    }
    exp_out of;
    if (exp_open(&of, o->setf, err)) return cli_fail(C, err);
    fputs(o->settings, of.f);
    if (exp_commit(&of, err)) return cli_fail(C, err);
    if (o->restart || *n_rows == 0)
        if (write_rows(o->csv, rows, *n_rows, (int)o->fit_min, err)) return cli_fail(C, err);
    return 0;
}

/* What every N shares: the weights (one copy per thread), the 2-norm bound's vectors, the figure's title. */
typedef struct {
    const tight_args *o;
    exp_att_weights w0;
    exp_att_weights *wt; /* T copies of w0 */
    int T;
    float *vbuf;
    lipt_bound_vectors vec;
    char wdesc[160], title[256];
    int tty;
} tight_run;

static void setup_run(const tight_args *o, tight_run *r) {
    const long D = o->D, H = o->H;
    r->o = o;
    exp_att_init(&r->w0, (int)D, o->ones, o->wscale, exp_seed((uint64_t)o->seed));
    float *vbuf = r->vbuf = malloc(sizeof(float) * (size_t)(2 * H * D + 4 * D));
    r->vec = (lipt_bound_vectors){vbuf, vbuf + H * D, vbuf + H * D + D, vbuf + 2 * H * D + D, vbuf + 2 * H * D + 2 * D,
                                  vbuf + 2 * H * D + 3 * D, NULL, NULL, 0};
    if (o->norm2) {
        lipt_bound_vectors_init(&r->vec, (int)D, (int)H, (uint64_t)o->seed + 7);
        exp_att_bound_2(&r->w0, (int)H, 2, &r->vec, (int)o->piters); /* converge the vectors once: the weights do not change */
    }
    /* starts run in parallel, one per thread, each on its own copy of the weights (the Jacobian tools touch the
     * weights' flags); BLAS inside a thread must then run single-threaded */
    int T = lipt_blas_nests_safely() ? lipt_get_threads() : 1;
    if (T > o->starts) T = (int)o->starts;
    if (T < 1) T = 1;
    r->T = T;
    r->wt = malloc(sizeof *r->wt * (size_t)T);
    for (int t = 0; t < T; t++) exp_att_clone(&r->wt[t], &r->w0);
    if (o->ones) snprintf(r->wdesc, sizeof r->wdesc, "W^Q = W^V = W^O entries all %g", o->wscale);
    else snprintf(r->wdesc, sizeof r->wdesc, "random weights N(0, %g^2/D), seed %ld", o->wscale, o->seed);
    char wshort[48];
    if (o->ones) snprintf(wshort, sizeof wshort, "W = %g", o->wscale);
    else snprintf(wshort, sizeof wshort, "random W");
    snprintf(r->title, sizeof r->title, "Tied L2-MHA, D=%ld H=%ld, %s%s: %s-norm Lipschitz bounds vs N", D, H, wshort,
             o->causal ? ", causal" : "", o->norm2 ? "2" : "inf");
    r->tty = cli_stderr_is_tty();
}

/* The outcome of the starts at one N. */
typedef struct {
    double best, best_random, sum_start;
    int diverged, failed, n_ok;
    lipt_error ferr; /* the first failure's */
} ascent_sum;

/* Gradient ascent from every start at N, in parallel (progress on stderr); the best point into xbest. */
static ascent_sum run_starts(const tight_run *r, int N, const lipt_ascent_opts *base_o, double ub, double t0,
                             float *xbest) {
    const tight_args *o = r->o;
    const long D = o->D, starts = o->starts;
    const int T = r->T, tty = r->tty;
    const size_t n = (size_t)N * D;
    float *xbuf = malloc(sizeof(float) * n * (size_t)T);
    double best = -1, best_random = -1, sum_start = 0;
    int diverged = 0, done = 0, failed = 0, n_ok = 0;
    lipt_error ferr = {0};
    const int every = starts >= 10 ? (int)(starts / 10) : 1;
#pragma omp parallel for schedule(dynamic, 1) num_threads(T) if (T > 1)
    for (long s = 0; s < starts; s++) {
        const int tid = T > 1 ? omp_get_thread_num() : 0;
        exp_att_map m = {EXP_ATT_L2_TIED, N, (int)D, (int)o->H, o->causal, &r->wt[tid], 1.0f};
        lipt_jac_map jm = {exp_att_forward, &m, 2, {N, (int)D, 0, 0}, 0};
        lipt_ascent_opts ao = *base_o;
        ao.seed = exp_seed((uint64_t)o->seed * 0x100000001B3ull ^ ((uint64_t)N << 24) ^ (uint64_t)s);
        lipt_ascent_result res;
        memset(&res, 0, sizeof res);
        lipt_error e = {0};
        float *xb = xbuf + (size_t)tid * n;
        lipt_status st = o->norm2 ? lipt_ascent_jac_2(&jm, &ao, xb, &res, &e) : lipt_ascent_jac_inf(&jm, &ao, xb, &res, &e);
#pragma omp critical(exp_tightness)
        {
            if (st == LIPT_ERR_NUMERIC) {
                diverged++; /* every step of this start was non-finite */
            } else if (st) {
                if (!failed) ferr = e;
                failed = 1;
            } else {
                if (res.best > best) {
                    best = res.best;
                    memcpy(xbest, xb, n * sizeof(float));
                }
                if (res.best_random > best_random) best_random = res.best_random;
                sum_start += res.best;
                n_ok++;
                diverged += res.n_diverged;
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
    return (ascent_sum){best, best_random, sum_start, diverged, failed, n_ok, ferr};
}

/* One N: the bound, the ascent, the exact re-measure of the best point; the row appended and the CSV and the plot
 * rewritten. Returns 0 (a new row) or the exit status. */
static int measure_n(const char *C, tight_run *r, int N, tight_row *rows, int *n_rows, lipt_error *err) {
    const tight_args *o = r->o;
    const long D = o->D, H = o->H;
    const size_t n = (size_t)N * D;
    const int norm2 = o->norm2, causal = o->causal;
    const double ub = norm2 ? exp_att_bound_2(&r->w0, (int)H, N, &r->vec, 0) : exp_att_bound_inf(&r->w0, (int)H, N);
    /* unmasked attention is permutation-equivariant: the D rows of one token stand for all of them. Under the
     * causal mask the rows differ: scan them all at each start when that is affordable, else follow the last
     * token (which sees every other) */
    const int scan = causal && n <= (size_t)o->max_exact;
    size_t *follow = malloc(sizeof(size_t) * (size_t)D);
    for (long j = 0; j < D; j++) follow[j] = (size_t)(causal ? N - 1 : 0) * (size_t)D + (size_t)j;
    lipt_ascent_opts base_o = lipt_ascent_defaults();
    base_o.starts = 1;
    base_o.steps = (int)o->steps;
    base_o.lr = o->lr;
    base_o.input_scale = o->in_scale;
    base_o.fd_eps = o->fd_eps;
    base_o.candidates = scan ? (int)(D > 4 ? D : 4) : (int)D;
    base_o.rows = norm2 || scan ? NULL : follow;
    base_o.max_exact = (size_t)o->max_exact;
    float *xbest = malloc(sizeof(float) * n);
    const double t0 = cli_now();
    ascent_sum as = run_starts(r, N, &base_o, ub, t0, xbest);
    int rc = 0;
    double best = as.best;
    if (as.failed) {
        rc = cli_fail(C, &as.ferr);
    } else if (best < 0) {
        rc = cli_error(C, "N=%d: every start diverged", N);
    } else {
        /* the followed rows give a lower bound; the whole Jacobian at the best point can only raise it */
        if (!norm2 && n <= (size_t)o->max_exact) {
            exp_att_map m = {EXP_ATT_L2_TIED, N, (int)D, (int)H, causal, &r->w0, 1.0f};
            lipt_jac_map jm = {exp_att_forward, &m, 2, {N, (int)D, 0, 0}, 1};
            double full;
            if (lipt_jacobian_norm_inf_at(&jm, xbest, &full, NULL, err) != LIPT_OK) rc = cli_fail(C, err);
            else if (full > best) best = full;
        }
        if (rc == 0) {
            rows[(*n_rows)++] = (tight_row){N, best, ub, best / ub, NAN, as.best_random, as.sum_start / as.n_ok,
                                            as.diverged, (int)o->starts, (int)o->steps, cli_now() - t0};
            /* the CSV and the plot so far, after every N (an interrupted run keeps both) */
            if (write_rows(o->csv, rows, *n_rows, (int)o->fit_min, err) ||
                tight_plot(o->svg, rows, *n_rows, norm2, (int)o->fit_min, r->title, err))
                rc = cli_fail(C, err);
            fprintf(stderr, "tightness N=%d done: lower %.6g, upper %.6g, ratio %.4f (%.1f s)\n", N, best, ub,
                    best / ub, cli_now() - t0);
        }
    }
    free(follow);
    free(xbest);
    return rc;
}

static void print_json(const tight_args *o, const tight_row *rows, int n_rows, const lin_fit *fit,
                       const lin_fit *ufit, double t_all) {
    json_w j;
    json_begin(&j, stdout);
    json_str(&j, "experiment", "tightness");
    json_int(&j, "d", o->D);
    json_int(&j, "heads", o->H);
    json_str(&j, "norm", o->norm2 ? "2" : "inf");
    json_bool(&j, "causal", o->causal);
    json_str(&j, "weights", o->wmode);
    json_num(&j, "weight_scale", o->wscale);
    json_int(&j, "starts", o->starts);
    json_int(&j, "steps", o->steps);
    json_num(&j, "lr", o->lr);
    json_num(&j, "input_scale", o->in_scale);
    json_int(&j, "seed", o->seed);
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
    json_int(&j, "n_min", o->fit_min);
    json_num(&j, "a", fit->a);
    json_num(&j, "b", fit->b);
    json_num(&j, "rms", fit->rms);
    json_num(&j, "upper_a", ufit->a);
    json_num(&j, "upper_b", ufit->b);
    json_obj_close(&j);
    json_str(&j, "csv", o->csv);
    json_str(&j, "svg", o->svg);
    json_num(&j, "seconds", cli_now() - t_all);
    json_end(&j);
}

static void print_table(const tight_run *r, const tight_row *rows, int n_rows, const lin_fit *fit,
                        const lin_fit *ufit, int n_done_now, double t_all) {
    const tight_args *o = r->o;
    printf("tightness: tied L2-MHA, D = %ld, H = %ld, %s, %s; %s-norm; %ld starts x %ld Adam steps (lr %g, "
           "starts N(0, %g^2))\n",
           o->D, o->H, r->wdesc, o->causal ? "causal" : "unmasked", o->norm2 ? "2" : "inf", o->starts, o->steps, o->lr,
           o->in_scale);
    printf("%6s %12s %12s %8s %12s %12s %10s\n", "N", "lower", "upper", "ratio", "fit", "best_random", "seconds");
    for (int i = 0; i < n_rows; i++)
        printf("%6d %12.6g %12.6g %8.4f %12.6g %12.6g %10.1f\n", rows[i].N, rows[i].lower, rows[i].upper,
               rows[i].ratio, rows[i].fit, rows[i].best_random, rows[i].seconds);
    if (fit->ok)
        printf("fit (N >= %ld): lower ~ a (log N - log log N) + b with a = %.4g, b = %.4g (rms residual %.3g); "
               "the same fit of the upper bound: a = %.4g, b = %.4g\n",
               o->fit_min, fit->a, fit->b, fit->rms, ufit->a, ufit->b);
    else
        printf("fit: needs at least two N values\n");
    printf("wrote %s and %s (%d new N values, %.1f s)\n", cli_shown(o->csv), cli_shown(o->svg), n_done_now, cli_now() - t_all);
}

static int tight_main(cli_args *a, const char *C) {
    tight_args o;
    int rc = parse_tight_args(a, C, &o);
    if (rc) return rc;
    lipt_error err = {0};
    tight_row rows[256];
    int n_rows = 0;
    rc = prepare_outputs(C, cli_str(a, "out"), &o, rows, &n_rows, &err);
    if (rc) return rc;

    tight_run r;
    setup_run(&o, &r);
    const double t_all = cli_now();
    int n_done_now = 0;
    for (int ni = 0; ni < o.n_n && rc == 0; ni++) {
        const int N = (int)o.nv[ni];
        int have = 0;
        for (int i = 0; i < n_rows; i++) have |= rows[i].N == N;
        if (have) {
            fprintf(stderr, "tightness N=%d: already in %s, skipped\n", N, cli_shown(o.csv));
            continue;
        }
        if (n_rows >= 256) { rc = cli_error(C, "too many rows in %s", o.csv); break; }
        rc = measure_n(C, &r, N, rows, &n_rows, &err);
        if (rc == 0) n_done_now++;
    }
    for (int t = 0; t < r.T; t++) exp_att_free(&r.wt[t]);
    free(r.wt);

    if (rc == 0) {
        qsort(rows, (size_t)n_rows, sizeof *rows, cmp_row_n);
        const lin_fit fit = fit_rows(rows, n_rows, 0, (int)o.fit_min), ufit = fit_rows(rows, n_rows, 1, (int)o.fit_min);
        if (tight_plot(o.svg, rows, n_rows, o.norm2, (int)o.fit_min, r.title, &err)) rc = cli_fail(C, &err);
        else if (o.json) print_json(&o, rows, n_rows, &fit, &ufit, t_all);
        else print_table(&r, rows, n_rows, &fit, &ufit, n_done_now, t_all);
    }
    exp_att_free(&r.w0);
    free(r.vbuf);
    return rc;
}

const exp_def exp_tightness = {
    "tightness", "lower bounds on Lip(tied L2-MHA) by gradient ascent vs the upper bound, over N (Fig. 2)",
    "Asymptotic tightness of the Lipschitz bound of tied L2 attention (paper Fig. 2, SPEC §4.1): for each N,\n"
    "gradient ascent on the Jacobian norm of F(X) = Attn_L2tied(X) W^O from random starts gives a lower bound on\n"
    "Lip(F), compared with the upper bound of Theorem 3.2 for the same weights. Resumable: N values already in\n"
    "the CSV of the same configuration are skipped.",
    tight_opts, (int)(sizeof tight_opts / sizeof tight_opts[0]), 0, tight_main,
};
