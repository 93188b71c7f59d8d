/* lipt bench: training, evaluation and sampling speed of any model config on synthetic tokens, the achieved
 * GFLOP/s against this machine's SGEMM rate measured in the same run, and peak resident memory. */
#include <cblas.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>

#include "cli.h"
#include "lipt/decode.h"
#include "lipt/model.h"
#include "lipt/optim.h"
#include "lipt/train.h"
#include "ops/gemm.h"
#include "sysinfo.h"

static const cli_opt bench_opts[] = {
    {"config", CLI_STRING, "FILE", "model config (key = value); any config key can also be given as --key value", NULL},
    {"batch", CLI_INT, "B", "sequences of seq_len tokens per training / evaluation step", "16"},
    {"threads", CLI_INT, "N", "threads for OpenMP and OpenBLAS (default LIPT_THREADS or all cores)", NULL},
    {"runs", CLI_INT, "N", "timed runs per measurement (the median is reported)", "5"},
    {"warmup", CLI_INT, "N", "untimed runs before the timed ones", "2"},
    {"steps-per-run", CLI_INT, "N", "training / evaluation steps in one run", "3"},
    {"sample-tokens", CLI_INT, "N", "tokens generated in one sampling run (batch 1, after a 1-token prompt)", "64"},
    {"gemm-size", CLI_INT, "N", "SGEMM reference: N x N x N by OpenBLAS and, in builds with oneDNN, by oneDNN; the "
     "faster counts (0: skip)", "1024"},
    {"seed", CLI_INT, "S", "seed of the synthetic tokens, dropout and sampling", "0"},
    CLI_OPT_PRECISION("the config's key precision, float32; with another precision the GEMM reference is also "
                      "timed at it"),
    {"paired", CLI_FLAG, NULL, "with --precision other than float32: every timed training and evaluation run is "
     "followed by the same run in float32 (the same context, model and optimizer), and the median of the per-run "
     "ratios is reported: a ratio measured seconds apart, which a shared machine's slow phases cannot skew", NULL},
    {"paired-sgemm", CLI_FLAG, NULL, "after every timed training run, one SGEMM run of about 0.1 s (N = --gemm-size) "
     "and the median of the per-run fractions achieved / SGEMM: the training rate against the SGEMM rate of the same "
     "second, not of the end of the bench", NULL},
    {"recompute", CLI_FLAG, NULL, "training keeps only each half-block's output and reruns the rest in the backward "
     "(less memory, more compute; as lipt train --recompute)", NULL},
    {"skip-train", CLI_FLAG, NULL, "do not measure training", NULL},
    {"skip-eval", CLI_FLAG, NULL, "do not measure evaluation", NULL},
    {"skip-sample", CLI_FLAG, NULL, "do not measure sampling", NULL},
    {"json", CLI_FLAG, NULL, "print one JSON object on stdout (keys in bench/README.md) instead of the table", NULL},
};
#define N_BENCH_OPTS ((int)(sizeof bench_opts / sizeof bench_opts[0]))

static const char *const bench_summary =
    "Benchmark a model config on random tokens (no corpus needed): training tokens/s (forward, backward, gradient\n"
    "clipping, AdamW, norm refresh), evaluation tokens/s (no-grad forward with the loss), sampling tokens/s with and\n"
    "without the incremental cache, GFLOP/s counted from the model's matmul and attention work next to the SGEMM\n"
    "rate of this machine, and the peak resident memory. Every figure is the median of --runs timed runs after\n"
    "--warmup untimed ones. bench/README.md documents the FLOP count and the JSON keys.";

/* The optimizer of `lipt train` with its default options (constant learning rate: the schedule costs nothing). */
#define BENCH_LR 1e-3
#define BENCH_BETA1 0.9
#define BENCH_BETA2 0.98
#define BENCH_EPS 1e-8
#define BENCH_WD 0.0
#define BENCH_CLIP 1.0

enum { PH_TRAIN, PH_EVAL, PH_SAMPLE_CACHED, PH_SAMPLE_UNCACHED, PH_GEMM, PH_GEMM_P, PH_TRAIN_F32, PH_EVAL_F32, N_PH };
static const char *const ph_key[N_PH] = {"train", "eval", "sample_cached", "sample_uncached", "gemm_gflops",
                                         "gemm_precision_gflops", "train_float32_paired", "eval_float32_paired"};

typedef struct {
    double *rate;      /* [runs]: tokens/s (GFLOP/s for the GEMM) of each timed run */
    double median;     /* NaN when not measured */
    double sec_median; /* median seconds per step (train, eval) or per token (sampling) */
} measurement;

typedef struct {
    lipt_config cfg;
    lipt_model model;
    int B, T, runs, warmup, steps, sample_tokens, gemm_n, recompute;
    int paired;            /* --paired: float32 runs interleaved with train and eval */
    int paired_sgemm;      /* --paired-sgemm: an SGEMM run after every timed training run */
    double *sgemm_paired;  /* [runs]: GFLOP/s of those SGEMM runs (the faster library's) */
    double *sgemm_lib_paired[2]; /* [runs] each: OpenBLAS's and oneDNN's rate in those runs (NaN: not in the build) */
    double gemm_lib[2];    /* medians of the SGEMM phase per library (NaN: not in the build or not measured) */
    double paired_fraction; /* median over runs of train GFLOP/s / the following SGEMM run's; NaN */
    double paired_ratio[2]; /* train, eval: median over runs of (tokens/s at the precision) / (float32's); NaN */
    uint64_t seed;
    int32_t *tokens;   /* steps batches of B rows of T+1 random ids */
    measurement ph[N_PH];
    double last_loss;
    double rss_start, rss_model, rss_train, rss_eval, rss_sample;
    double hwm_start, hwm_peak;
    double arena_train; /* MB: the training step's arena high-water mark (activations, gradients, tape) */
    long slides_cached;
} bench;

static double peak_rss_mb(void) {
    struct rusage ru;
    if (getrusage(RUSAGE_SELF, &ru) != 0) return NAN;
    return (double)ru.ru_maxrss / 1024.0; /* Linux: kilobytes */
}

/* Linux's VmHWM (/proc/self/status): the peak resident set of this process image only. ru_maxrss also keeps the
 * high-water mark of what the process was before exec, i.e. of its parent's copy at fork time (a lipt launched
 * from a large Python process reports at least that process's size). NaN where /proc is not available. */
static double vm_hwm_mb(void) {
    FILE *f = fopen("/proc/self/status", "r");
    if (!f) return NAN;
    char line[256];
    double v = NAN;
    while (fgets(line, sizeof line, f))
        if (strncmp(line, "VmHWM:", 6) == 0) {
            v = strtod(line + 6, NULL) / 1024.0; /* kB */
            break;
        }
    fclose(f);
    return v;
}

static int cmp_double(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

static double median_of(const double *v, int n) {
    double *s = lipt_xmalloc(sizeof(double) * (size_t)n);
    memcpy(s, v, sizeof(double) * (size_t)n);
    qsort(s, (size_t)n, sizeof(double), cmp_double);
    double m = n % 2 ? s[n / 2] : 0.5 * (s[n / 2 - 1] + s[n / 2]);
    free(s);
    return m;
}

/* Inputs and targets of batch i: row b is tokens[i][b][0..T) -> tokens[i][b][1..T]. */
static void batch_ids(const bench *b, int i, int32_t *in, int32_t *tg) {
    const int32_t *src = b->tokens + (size_t)i * b->B * (b->T + 1);
    for (int r = 0; r < b->B; r++) {
        memcpy(in + (size_t)r * b->T, src + (size_t)r * (b->T + 1), sizeof(int32_t) * (size_t)b->T);
        memcpy(tg + (size_t)r * b->T, src + (size_t)r * (b->T + 1) + 1, sizeof(int32_t) * (size_t)b->T);
    }
}

/* batch_ids, returning the seconds it took: a copy of B·T ints, not model work, which the timings leave out. */
static double batch_ids_timed(const bench *b, int i, int32_t *in, int32_t *tg) {
    const double c0 = cli_now();
    batch_ids(b, i, in, tg);
    return cli_now() - c0;
}

/* Run k of a timed pair: the bench's precision (k = 0), then with --paired float32 (k = 1). Every run sets its
 * precision, so an error stops before any work. */
static lipt_status set_run_precision(lipt_ctx *ctx, const bench *b, int k, lipt_error *err) {
    return lipt_ctx_set_precision(ctx, k ? LIPT_PRECISION_FLOAT32 : b->cfg.precision, err);
}

/* Model FLOPs per token (a multiply-add is 2 FLOPs), for full windows of T tokens in batches of B.
 * Matmuls: the projections, the feed-forward and the head (embedding lookups are not matmuls). The tied
 * variants form their values as Q_h M_h with M_h = W^{Q,h}ᵀ W^{V,h} / s (d x d per head): D·d per token instead
 * of D², plus the D²·d of forming M once per forward pass, spread over the B·T tokens. Attention: q kᵀ and P v
 * over the full T x T square (2 · 2·T·D per token and layer), as a dense implementation computes it; the causal
 * mask would halve it. Training = 3 x forward (backward: two products per forward product). */
static void count_flops(const lipt_config *c, int B, int T, double *fwd, double *train) {
    const double D = c->d_model, F = c->d_ff, V = c->vocab_size, L = c->n_layers, d = D / c->n_heads;
    const int tied = lipt_attn_info_of(c->attention)->tied;
    double proj = tied ? 2.0 * D * D + D * d : 4.0 * D * D;
    double macs = L * (proj + 2.0 * D * F) + D * V;
    double fixed = tied ? L * D * D * d / ((double)B * T) : 0.0;
    double attn = L * 2.0 * T * D;
    *fwd = 2.0 * (macs + fixed + attn);
    *train = 3.0 * *fwd;
}

static size_t nonembedding_params(const lipt_model *m) {
    return lipt_params_count(&m->params) - m->tok_emb->numel - m->pos_emb->numel;
}

/* ---------------------------------------------------------------- the measurements */

/* --paired-sgemm: N×N operands and a repeat count for SGEMM runs of about 0.1 s. */
typedef struct {
    float *A, *B, *C;
    int N, reps;
} sgemm_probe;

/* GFLOP/s of `reps` products C = A B through library lib (lipt_sgemm_lib: 0 OpenBLAS, 1 oneDNN); NaN when the
 * build has no such library. */
static double sgemm_lib_rate(int lib, int N, int reps, const float *A, const float *B, float *C) {
    const double t0 = cli_now();
    for (int k = 0; k < reps; k++)
        if (lipt_sgemm_lib(lib, 0, 0, N, N, N, 1.0f, A, N, B, N, 0.0f, C, N) != 0) return NAN;
    return 2.0 * N * N * (double)N * reps / (cli_now() - t0) * 1e-9;
}

/* The SGEMM reference is the faster of the two libraries lipt's products run on (src/ops/gemm.c): each runs the
 * product in turn and the larger rate counts, so that a fraction of SGEMM is never flattered by the slower one. */
static double sgemm_probe_run(const sgemm_probe *g, double lib_rate[2]) { /* GFLOP/s of one run */
    double best = 0;
    for (int lib = 0; lib < 2; lib++) {
        const double r = sgemm_lib_rate(lib, g->N, g->reps, g->A, g->B, g->C);
        if (lib_rate) lib_rate[lib] = r;
        if (r > best) best = r; /* false for NaN */
    }
    return best;
}

static void sgemm_probe_init(sgemm_probe *g, const bench *b) {
    const size_t nn = (size_t)b->gemm_n * b->gemm_n;
    g->N = b->gemm_n;
    g->A = lipt_xaligned(sizeof(float) * nn);
    g->B = lipt_xaligned(sizeof(float) * nn);
    g->C = lipt_xaligned(sizeof(float) * nn);
    lipt_rng rng;
    lipt_rng_seed(&rng, b->seed + 13);
    lipt_rng_fill_uniform(&rng, g->A, nn, -1.0f, 1.0f);
    lipt_rng_fill_uniform(&rng, g->B, nn, -1.0f, 1.0f);
    memset(g->C, 0, sizeof(float) * nn);
    g->reps = 1;
    const double gf = sgemm_probe_run(g, NULL); /* also the warm-up (of both libraries) */
    const double per = 2.0 * g->N * g->N * (double)g->N / (gf * 1e9);
    g->reps = per > 0 ? (int)ceil(0.1 / per) : 1;
    if (g->reps < 1) g->reps = 1;
    if (g->reps > 100000) g->reps = 100000;
}

/* The median of v [n], NaN when any is NaN (a library not in this build). */
static double median_finite(const double *v, int n) {
    for (int r = 0; r < n; r++)
        if (!isfinite(v[r])) return NAN;
    return median_of(v, n);
}

static void sgemm_probe_free(sgemm_probe *g) {
    free(g->A);
    free(g->B);
    free(g->C);
}

/* Rates and medians of phase p (train or eval) from sec [runs] (and with --paired float32's sec [runs] after it):
 * the paired ratio is the median of the per-run ratios, each of two runs that ran back to back. */
static void finish_phase(bench *b, int p, const double *sec) {
    const int B = b->B, T = b->T, n = b->runs;
    for (int k = 0; k <= b->paired; k++) {
        measurement *m = &b->ph[k ? (p == PH_TRAIN ? PH_TRAIN_F32 : PH_EVAL_F32) : p];
        for (int r = 0; r < n; r++) m->rate[r] = (double)B * T * b->steps / sec[k * n + r];
        m->median = median_of(m->rate, n);
        m->sec_median = median_of(sec + k * n, n) / b->steps;
    }
    if (b->paired) {
        double *ratio = lipt_xmalloc(sizeof(double) * (size_t)n);
        for (int r = 0; r < n; r++) ratio[r] = sec[n + r] / sec[r];
        b->paired_ratio[p == PH_TRAIN ? 0 : 1] = median_of(ratio, n);
        free(ratio);
    }
}

static lipt_status bench_train(bench *b, lipt_error *err) {
    const int B = b->B, T = b->T;
    lipt_ctx ctx;
    lipt_ctx_init(&ctx, (size_t)64 << 20, b->seed * 2654435761u + 1);
    ctx.training = 1;
    ctx.recompute = b->recompute;
    lipt_adamw_config acfg = {BENCH_LR, BENCH_BETA1, BENCH_BETA2, BENCH_EPS, BENCH_WD};
    lipt_adamw opt;
    lipt_adamw_init(&opt, &acfg);
    int32_t *in = lipt_xmalloc(sizeof(int32_t) * (size_t)B * T), *tg = lipt_xmalloc(sizeof(int32_t) * (size_t)B * T);
    double *sec = lipt_xmalloc(sizeof(double) * 2 * (size_t)b->runs); /* [2][runs]: the precision, float32 */
    sgemm_probe probe;
    if (b->paired_sgemm) sgemm_probe_init(&probe, b);
    lipt_status st = LIPT_OK;
    for (int run = -b->warmup; run < b->runs && st == LIPT_OK; run++)
        for (int k = 0; k <= b->paired && st == LIPT_OK; k++) {
            if ((st = set_run_precision(&ctx, b, k, err)) != LIPT_OK) break;
            double t_in = 0;
            double t0 = cli_now();
            for (int s = 0; s < b->steps; s++) {
                t_in += batch_ids_timed(b, s, in, tg);
                const lipt_step_opts so = {BENCH_LR, BENCH_CLIP, b->cfg.power_iters, NULL, 0, 0, NULL, 0};
                lipt_step_result sr;
                st = lipt_train_step(&ctx, &b->model, &opt, in, tg, B, T, &so, &sr, err);
                b->last_loss = sr.loss;
                if (st != LIPT_OK) break;
            }
            if (run >= 0) sec[k * b->runs + run] = cli_now() - t0 - t_in;
            /* the SGEMM run right after each timed training run at the precision (before a paired float32 run) */
            if (k == 0 && b->paired_sgemm && run >= 0 && st == LIPT_OK) {
                double lr[2];
                b->sgemm_paired[run] = sgemm_probe_run(&probe, lr);
                b->sgemm_lib_paired[0][run] = lr[0], b->sgemm_lib_paired[1][run] = lr[1];
            }
        }
    if (st == LIPT_OK) finish_phase(b, PH_TRAIN, sec);
    if (st == LIPT_OK && b->paired_sgemm) {
        double fwd, train, *frac = lipt_xmalloc(sizeof(double) * (size_t)b->runs);
        count_flops(&b->cfg, B, T, &fwd, &train);
        for (int r = 0; r < b->runs; r++) frac[r] = train * 1e-9 * b->ph[PH_TRAIN].rate[r] / b->sgemm_paired[r];
        b->paired_fraction = median_of(frac, b->runs);
        free(frac);
    }
    if (b->paired_sgemm) sgemm_probe_free(&probe);
    free(sec);
    free(in);
    free(tg);
    b->arena_train = (double)ctx.arena.peak / 1048576.0;
    lipt_ctx_free(&ctx);
    return st;
}

static lipt_status bench_eval(bench *b, lipt_error *err) {
    const int B = b->B, T = b->T;
    lipt_ctx ctx;
    lipt_ctx_init(&ctx, (size_t)32 << 20, 1);
    ctx.training = 0;
    lipt_no_grad_push(&ctx);
    int32_t *in = lipt_xmalloc(sizeof(int32_t) * (size_t)B * T), *tg = lipt_xmalloc(sizeof(int32_t) * (size_t)B * T);
    double *sec = lipt_xmalloc(sizeof(double) * 2 * (size_t)b->runs); /* [2][runs]: the precision, float32 */
    lipt_status st = LIPT_OK;
    volatile double sink = 0; /* the loss is used, so nothing can be skipped */
    for (int run = -b->warmup; run < b->runs && st == LIPT_OK; run++)
        for (int k = 0; k <= b->paired && st == LIPT_OK; k++) {
            lipt_ctx_reset(&ctx); /* the precision changes between products only */
            if ((st = set_run_precision(&ctx, b, k, err)) != LIPT_OK) break;
            double t_in = 0;
            double t0 = cli_now();
            for (int s = 0; s < b->steps; s++) {
                t_in += batch_ids_timed(b, s, in, tg);
                lipt_tensor *logits = NULL, *loss = NULL;
                lipt_ctx_reset(&ctx);
                st = lipt_model_forward(&ctx, &b->model, in, B, T, tg, &logits, &loss, err);
                if (st != LIPT_OK) break;
                sink += loss->data[0];
            }
            if (run >= 0) sec[k * b->runs + run] = cli_now() - t0 - t_in;
        }
    (void)sink;
    if (st == LIPT_OK) finish_phase(b, PH_EVAL, sec);
    free(sec);
    free(in);
    free(tg);
    lipt_ctx_free(&ctx);
    return st;
}

/* The window policy of lipt_decoder (and of `lipt sample --no-cache`) for the uncached path. */
static void window_push(int32_t *win, int *len, int T, int32_t tok) {
    if (*len == T) {
        const int keep = lipt_decoder_keep(T);
        memmove(win, win + (T - keep), (size_t)keep * sizeof(int32_t));
        *len = keep;
    }
    win[(*len)++] = tok;
}

/* One sequence, as `lipt sample` generates: a 1-token prompt, then sample_tokens draws (temperature 1), each
 * followed by appending the drawn token (cached) or by a full forward pass over the window (uncached). */
static lipt_status bench_sample(bench *b, int cached, lipt_error *err) {
    const int T = b->T, V = b->cfg.vocab_size, n = b->sample_tokens;
    lipt_decoder *dec = NULL;
    lipt_ctx ctx;
    int ctx_ok = 0;
    int32_t *win = NULL;
    float *work = lipt_xmalloc(sizeof(float) * (size_t)V);
    double *sec = lipt_xmalloc(sizeof(double) * (size_t)b->runs);
    lipt_status st = LIPT_OK;
    if (cached) {
        st = lipt_decoder_create(&b->model, 1, &dec, err);
    } else {
        win = lipt_xmalloc(sizeof(int32_t) * (size_t)T);
        lipt_ctx_init(&ctx, (size_t)1 << 20, 1);
        ctx_ok = 1;
        st = lipt_ctx_set_precision(&ctx, b->cfg.precision, err);
        lipt_no_grad_push(&ctx);
    }
    lipt_rng rng;
    lipt_rng_seed(&rng, b->seed + 7);
    for (int run = -b->warmup; run < b->runs && st == LIPT_OK; run++) {
        const int prompt = b->tokens[(run + b->warmup) % (b->B * b->steps)];
        int wlen = 0;
        const float *lg = NULL;
        double t0 = cli_now();
        if (cached) {
            lipt_decoder_reset(dec);
            st = lipt_decoder_append(dec, &prompt, 1, &lg, err);
        } else {
            window_push(win, &wlen, T, prompt);
        }
        for (int i = 0; i < n && st == LIPT_OK; i++) {
            if (!cached) {
                lipt_tensor *out = NULL;
                lipt_ctx_reset(&ctx);
                st = lipt_model_forward(&ctx, &b->model, win, 1, wlen, NULL, &out, NULL, err);
                if (st != LIPT_OK) break;
                lg = out->data + (size_t)(wlen - 1) * V;
            }
            int tok = lipt_sample_next(lg, V, 1.0, 0, &rng, work);
            if (i + 1 == n) break; /* n model evaluations per run in both paths */
            if (cached) st = lipt_decoder_append(dec, &tok, 1, &lg, err);
            else window_push(win, &wlen, T, tok);
        }
        if (run >= 0) sec[run] = cli_now() - t0;
    }
    if (st == LIPT_OK) {
        measurement *m = &b->ph[cached ? PH_SAMPLE_CACHED : PH_SAMPLE_UNCACHED];
        for (int r = 0; r < b->runs; r++) m->rate[r] = n / sec[r];
        m->median = median_of(m->rate, b->runs);
        m->sec_median = median_of(sec, b->runs) / n;
        if (cached) b->slides_cached = lipt_decoder_slides(dec);
    }
    if (ctx_ok) lipt_ctx_free(&ctx);
    lipt_decoder_free(dec);
    free(win);
    free(work);
    free(sec);
    return st;
}

/* SGEMM C = A B on N x N matrices with the same thread setting, by each library lipt's products run on in turn
 * (OpenBLAS, and oneDNN where the build has it; the faster one's rate per run into ph[PH_GEMM], each library's median
 * into gemm_lib); with ctx, the same product through lipt_gemm_p at ctx's precision instead (into ph[PH_GEMM_P]: the
 * model's products at that precision, the operands' conversion included). A run repeats the call so that it lasts at
 * least about 50 ms (calibrated on the warm-up), which keeps small sizes above the timer's resolution. */
static void bench_gemm(bench *b, lipt_ctx *ctx) {
    const int N = b->gemm_n;
    const size_t nn = (size_t)N * N;
    float *A = lipt_xaligned(sizeof(float) * nn), *Bm = lipt_xaligned(sizeof(float) * nn),
          *Cm = lipt_xaligned(sizeof(float) * nn);
    lipt_rng rng;
    lipt_rng_seed(&rng, b->seed + 11);
    lipt_rng_fill_uniform(&rng, A, nn, -1.0f, 1.0f);
    lipt_rng_fill_uniform(&rng, Bm, nn, -1.0f, 1.0f);
    memset(Cm, 0, sizeof(float) * nn);
    const double flop = 2.0 * (double)N * N * N;
    int reps = 1;
    const int nlib = ctx ? 1 : 2;
    double *sec = lipt_xmalloc(sizeof(double) * 2 * (size_t)b->runs); /* [lib][runs] */
    for (int run = -(b->warmup > 0 ? b->warmup : 1); run < b->runs; run++)
        for (int lib = 0; lib < nlib; lib++) {
            double t0 = cli_now();
            int ok = 1;
            for (int k = 0; k < reps && ok; k++) {
                if (ctx) lipt_gemm_p(ctx, 0, 0, N, N, N, 1.0f, A, N, Bm, N, 0.0f, Cm, N);
                else ok = lipt_sgemm_lib(lib, 0, 0, N, N, N, 1.0f, A, N, Bm, N, 0.0f, Cm, N) == 0;
            }
            double dt = ok ? cli_now() - t0 : NAN; /* NaN: no such library in this build */
            if (run < 0 && lib == 0) {
                double per = dt / reps;
                int want = per > 0 ? (int)ceil(0.05 / per) : 1000;
                if (want > reps) reps = want > 100000 ? 100000 : want;
            } else if (run >= 0) {
                sec[lib * b->runs + run] = dt / reps;
            }
        }
    measurement *m = &b->ph[ctx ? PH_GEMM_P : PH_GEMM];
    for (int r = 0; r < b->runs; r++) {
        m->rate[r] = flop / sec[r] * 1e-9;
        if (nlib == 2 && isfinite(sec[b->runs + r]) && sec[b->runs + r] < sec[r])
            m->rate[r] = flop / sec[b->runs + r] * 1e-9;
    }
    m->median = median_of(m->rate, b->runs);
    m->sec_median = flop / m->median * 1e-9;
    if (!ctx)
        for (int lib = 0; lib < 2; lib++) {
            double *rate = lipt_xmalloc(sizeof(double) * (size_t)b->runs);
            for (int r = 0; r < b->runs; r++) rate[r] = flop / sec[lib * b->runs + r] * 1e-9;
            b->gemm_lib[lib] = median_finite(rate, b->runs);
            free(rate);
        }
    free(sec);
    free(A);
    free(Bm);
    free(Cm);
}

/* ---------------------------------------------------------------- output */

static void json_config(json_w *j, const lipt_config *c) {
    json_obj_open(j, "config");
    json_int(j, "vocab_size", c->vocab_size);
    json_int(j, "d_model", c->d_model);
    json_int(j, "n_heads", c->n_heads);
    json_int(j, "d_ff", c->d_ff);
    json_int(j, "n_layers", c->n_layers);
    json_int(j, "seq_len", c->seq_len);
    json_str(j, "attention", lipt_attn_name(c->attention));
    json_str(j, "ffn", lipt_ffn_name(c->ffn));
    json_str(j, "activation", lipt_act_name(c->activation));
    json_num(j, "dropout", c->dropout);
    json_num(j, "c", c->c);
    json_str(j, "lip_norm", lipt_lipnorm_name(c->lip_norm));
    json_int(j, "power_iters", c->power_iters);
    json_int(j, "init_seed", (long long)c->init_seed);
    json_num(j, "ln_eps", c->ln_eps);
    json_obj_close(j);
}

static void print_json(const bench *b, const double gf[2], double peak) {
    const double gemm = b->ph[PH_GEMM].median;
    json_w j;
    json_begin(&j, stdout);
    json_config(&j, &b->cfg);
    json_int(&j, "params", (long long)lipt_params_count(&b->model.params));
    json_int(&j, "params_nonembedding", (long long)nonembedding_params(&b->model));
    json_int(&j, "batch", b->B);
    json_int(&j, "seq_len", b->T);
    json_int(&j, "threads", lipt_get_threads());
    json_str(&j, "precision", lipt_precision_name(b->cfg.precision));
    json_bool(&j, "blas_openmp", lipt_blas_nests_safely());
    lipt_cpuinfo ci; /* the kernels the rates were measured on */
    lipt_cpuinfo_get(&ci);
    sysinfo_json(&j, &ci);
    json_bool(&j, "recompute", b->recompute);
    json_int(&j, "runs", b->runs);
    json_int(&j, "warmup", b->warmup);
    json_int(&j, "steps_per_run", b->steps);
    json_int(&j, "sample_tokens", b->sample_tokens);
    json_int(&j, "gemm_size", b->gemm_n);
    json_int(&j, "seed", (long long)b->seed);
    json_str(&j, "statistic", "median");
    json_obj_open(&j, "tokens_per_s");
    for (int p = 0; p < PH_GEMM; p++) json_num(&j, ph_key[p], b->ph[p].median);
    json_obj_close(&j);
    json_obj_open(&j, "ms_per_step");
    json_num(&j, "train", 1e3 * b->ph[PH_TRAIN].sec_median);
    json_num(&j, "eval", 1e3 * b->ph[PH_EVAL].sec_median);
    json_obj_close(&j);
    json_obj_open(&j, "ms_per_token");
    json_num(&j, "sample_cached", 1e3 * b->ph[PH_SAMPLE_CACHED].sec_median);
    json_num(&j, "sample_uncached", 1e3 * b->ph[PH_SAMPLE_UNCACHED].sec_median);
    json_obj_close(&j);
    json_obj_open(&j, "model_gflop_per_token");
    json_num(&j, "train", gf[0]);
    json_num(&j, "eval", gf[1]);
    json_obj_close(&j);
    json_str(&j, "attention_flops", "full T x T square (causal half not subtracted)");
    json_obj_open(&j, "achieved_gflops");
    json_num(&j, "train", gf[0] * b->ph[PH_TRAIN].median);
    json_num(&j, "eval", gf[1] * b->ph[PH_EVAL].median);
    json_obj_close(&j);
    json_num(&j, "gemm_gflops", gemm); /* the faster library's; each one's below */
    json_num(&j, "gemm_gflops_openblas", b->gemm_lib[0]);
    json_num(&j, "gemm_gflops_onednn", b->gemm_lib[1]); /* null without oneDNN */
    json_num(&j, "gemm_precision_gflops", b->ph[PH_GEMM_P].median); /* null at float32 */
    json_obj_open(&j, "fraction_of_gemm");
    json_num(&j, "train", gf[0] * b->ph[PH_TRAIN].median / gemm);
    json_num(&j, "eval", gf[1] * b->ph[PH_EVAL].median / gemm);
    json_obj_close(&j);
    json_num(&j, "peak_rss_mb", peak);
    json_num(&j, "train_arena_peak_mb", b->arena_train);
    json_str(&j, "peak_rss_source", "getrusage(RUSAGE_SELF).ru_maxrss after the model phases");
    json_obj_open(&j, "vm_hwm_mb");
    json_num(&j, "start", b->hwm_start);
    json_num(&j, "peak", b->hwm_peak);
    json_obj_close(&j);
    json_obj_open(&j, "rss_high_water_mb");
    json_num(&j, "start", b->rss_start);
    json_num(&j, "model", b->rss_model);
    json_num(&j, "train", b->rss_train);
    json_num(&j, "eval", b->rss_eval);
    json_num(&j, "sample", b->rss_sample);
    json_obj_close(&j);
    json_obj_open(&j, "paired_sgemm"); /* --paired-sgemm: an SGEMM run after each timed training run; nulls without */
    json_num(&j, "sgemm_gflops_median", b->paired_sgemm ? median_of(b->sgemm_paired, b->runs) : NAN);
    for (int lib = 0; lib < 2; lib++)
        json_num(&j, lib ? "sgemm_gflops_median_onednn" : "sgemm_gflops_median_openblas",
                 b->paired_sgemm ? median_finite(b->sgemm_lib_paired[lib], b->runs) : NAN);
    json_num(&j, "fraction_of_gemm_train", b->paired_fraction);
    json_arr_open(&j, "sgemm_gflops_per_run");
    if (b->paired_sgemm && isfinite(b->paired_fraction))
        for (int r = 0; r < b->runs; r++) json_num(&j, NULL, b->sgemm_paired[r]);
    json_arr_close(&j);
    json_obj_close(&j);
    json_obj_open(&j, "paired_float32"); /* --paired: float32 runs interleaved; nulls without */
    json_num(&j, "train", b->ph[PH_TRAIN_F32].median);
    json_num(&j, "eval", b->ph[PH_EVAL_F32].median);
    json_num(&j, "train_ratio", b->paired_ratio[0]);
    json_num(&j, "eval_ratio", b->paired_ratio[1]);
    json_obj_close(&j);
    json_num(&j, "final_train_loss", b->last_loss);
    json_obj_open(&j, "per_run");
    for (int p = 0; p < N_PH; p++) {
        json_arr_open(&j, ph_key[p]);
        if (isfinite(b->ph[p].median))
            for (int r = 0; r < b->runs; r++) json_num(&j, NULL, b->ph[p].rate[r]);
        json_arr_close(&j);
    }
    json_obj_close(&j);
    json_end(&j);
}

static void fmt_count(double n, char *buf, size_t len) {
    if (n >= 1e6) snprintf(buf, len, "%.2fM", n / 1e6);
    else if (n >= 1e3) snprintf(buf, len, "%.1fk", n / 1e3);
    else snprintf(buf, len, "%.0f", n);
}

static void print_table(const bench *b, const double gf[2], double peak) {
    const lipt_config *c = &b->cfg;
    const double gemm = b->ph[PH_GEMM].median;
    char np[32], nne[32];
    fmt_count((double)lipt_params_count(&b->model.params), np, sizeof np);
    fmt_count((double)nonembedding_params(&b->model), nne, sizeof nne);
    printf("lipt bench: %s attention, %s ffn, %s, %d layers, d_model %d, %d heads, d_ff %d, seq_len %d, vocab %d: "
           "%s parameters (%s non-embedding)\n",
           lipt_attn_name(c->attention), lipt_ffn_name(c->ffn), lipt_act_name(c->activation), c->n_layers, c->d_model,
           c->n_heads, c->d_ff, c->seq_len, c->vocab_size, np, nne);
    printf("batch %d x %d tokens, %d threads (%s BLAS), %s matrix products; median of %d runs after %d warm-up runs, "
           "%d steps per run%s\n", b->B, b->T, lipt_get_threads(), lipt_blas_nests_safely() ? "OpenMP" : "non-OpenMP",
           lipt_precision_name(c->precision), b->runs, b->warmup, b->steps,
           b->recompute ? "; training recomputes activations (--recompute)" : "");
    lipt_cpuinfo ci; /* the kernels the rates were measured on */
    lipt_cpuinfo_get(&ci);
    sysinfo_print(stdout, &ci, "");
    for (int p = 0; p < 2; p++) {
        const measurement *m = &b->ph[p];
        if (!isfinite(m->median)) continue;
        double ach = gf[p == PH_TRAIN ? 0 : 1] * m->median;
        printf("  %-17s %10.0f tokens/s  %9.2f ms/step  %.4g GFLOP/token  %7.2f GFLOP/s", p == PH_TRAIN ? "train" : "eval",
               m->median, 1e3 * m->sec_median, gf[p == PH_TRAIN ? 0 : 1], ach);
        if (isfinite(gemm)) printf("  (%.1f%% of SGEMM)", 100.0 * ach / gemm);
        printf("\n");
    }
    if (isfinite(b->paired_fraction))
        printf("  %-17s %10.1f%% of SGEMM (median of the per-run fractions; an SGEMM run of %.2f GFLOP/s median "
               "after each timed training run)\n", "train, paired", 100.0 * b->paired_fraction,
               median_of(b->sgemm_paired, b->runs));
    for (int p = 0; p < 2 && b->paired; p++) {
        const measurement *m = &b->ph[p ? PH_EVAL_F32 : PH_TRAIN_F32];
        if (!isfinite(m->median)) continue;
        printf("  %-17s %10.0f tokens/s  %9.2f ms/step  (float32 runs interleaved with the %s ones); %s / float32: "
               "%.3f (median of the per-run ratios)\n", p ? "eval, float32" : "train, float32", m->median,
               1e3 * m->sec_median, lipt_precision_name(c->precision), lipt_precision_name(c->precision),
               b->paired_ratio[p]);
    }
    for (int p = PH_SAMPLE_CACHED; p <= PH_SAMPLE_UNCACHED; p++) {
        const measurement *m = &b->ph[p];
        if (!isfinite(m->median)) continue;
        printf("  %-17s %10.1f tokens/s  %9.3f ms/token  (batch 1, %d tokens after a 1-token prompt%s)\n",
               p == PH_SAMPLE_CACHED ? "sample (cached)" : "sample (no cache)", m->median, 1e3 * m->sec_median,
               b->sample_tokens, p == PH_SAMPLE_CACHED && b->slides_cached ? ", window slides included" : "");
    }
    if (isfinite(gemm)) {
        printf("  %-17s %10.2f GFLOP/s (%d x %d x %d; the faster library per run: OpenBLAS %.2f", "SGEMM", gemm,
               b->gemm_n, b->gemm_n, b->gemm_n, b->gemm_lib[0]);
        if (isfinite(b->gemm_lib[1])) printf(", oneDNN %.2f)\n", b->gemm_lib[1]);
        else printf("; no oneDNN in this build)\n");
    }
    if (isfinite(b->ph[PH_GEMM_P].median))
        printf("  %-17s %10.2f GFLOP/s (the same product at --precision %s, operand conversion included)\n",
               "GEMM, precision", b->ph[PH_GEMM_P].median, lipt_precision_name(c->precision));
    printf("  %-17s %10.1f MB (ru_maxrss after the model phases; the SGEMM buffers come later and are not included)",
           "peak RSS", peak);
    if (isfinite(b->hwm_peak)) printf("; VmHWM %.1f MB", b->hwm_peak);
    printf("\n");
    if (isfinite(b->arena_train))
        printf("  %-17s %10.1f MB (the training step's arena high-water mark: activations, their gradients, the tape)\n",
               "train activations", b->arena_train);
    printf("FLOPs: matmuls (projections, feed-forward, head) + attention q k^T and P v over the full T x T square "
           "(the causal half is not subtracted); training = 3 x forward. See bench/README.md.\n");
}

/* ---------------------------------------------------------------- the command */

static int bench_main(cli_args *a, int argc, char **argv) {
    const char *C = "bench";
    int pr = cli_parse(a, C, bench_summary, bench_opts, N_BENCH_OPTS, argc, argv, 1, 0);
    if (pr) return pr > 0 ? 0 : 2;
    long batch, runs, warmup, steps, sample_tokens, gemm_n, seed;
    if (cli_int(a, "batch", &batch) || cli_int(a, "runs", &runs) ||
        cli_int(a, "warmup", &warmup) || cli_int(a, "steps-per-run", &steps) ||
        cli_int(a, "sample-tokens", &sample_tokens) || cli_int(a, "gemm-size", &gemm_n) || cli_int(a, "seed", &seed))
        return 2;
    if (batch < 1 || batch > 65536) return cli_error(C, "--batch must be in [1, 65536], got %ld", batch);
    if (runs < 1 || runs > 100000) return cli_error(C, "--runs must be in [1, 100000], got %ld", runs);
    if (warmup < 0 || warmup > 100000) return cli_error(C, "--warmup must be in [0, 100000], got %ld", warmup);
    if (steps < 1 || steps > 100000) return cli_error(C, "--steps-per-run must be in [1, 100000], got %ld", steps);
    if (sample_tokens < 1 || sample_tokens > 10000000)
        return cli_error(C, "--sample-tokens must be in [1, 10000000], got %ld", sample_tokens);
    if (gemm_n < 0 || gemm_n > 32768) return cli_error(C, "--gemm-size must be in [0, 32768] (0: skip), got %ld", gemm_n);
    if (seed < 0) return cli_error(C, "--seed must be >= 0, got %ld", seed);
    {
        int trc = cli_apply_threads(a, C);
        if (trc) return trc;
    }
    lipt_error err = {0};
    bench b;
    memset(&b, 0, sizeof b);
    b.rss_start = peak_rss_mb();
    b.hwm_start = vm_hwm_mb();
    lipt_config_default(&b.cfg);
    if (cli_has(a, "config") && lipt_config_load(&b.cfg, cli_str(a, "config"), &err) != LIPT_OK) return cli_fail(C, &err);
    for (int i = 0; i < a->n_extra; i++)
        if (lipt_config_set(&b.cfg, a->extra_key[i], a->extra_val[i], &err) != LIPT_OK)
            return cli_error(C, "--%s: %s (not a lipt bench option either: see lipt bench --help)", a->extra_key[i],
                             err.msg);
    if (lipt_config_validate(&b.cfg, &err) != LIPT_OK) return cli_fail(C, &err);
    const int prc = cli_apply_precision(a, C, &b.cfg.precision);
    if (prc) return prc;
    b.B = (int)batch;
    b.T = b.cfg.seq_len;
    b.runs = (int)runs;
    b.warmup = (int)warmup;
    b.steps = (int)steps;
    b.sample_tokens = (int)sample_tokens;
    b.gemm_n = (int)gemm_n;
    b.seed = (uint64_t)seed;
    b.recompute = cli_has(a, "recompute");
    b.paired = cli_has(a, "paired");
    if (b.paired && b.cfg.precision == LIPT_PRECISION_FLOAT32)
        return cli_error(C, "--paired compares a --precision other than float32 with float32; this run is float32");
    b.paired_ratio[0] = b.paired_ratio[1] = NAN;
    b.paired_sgemm = cli_has(a, "paired-sgemm");
    if (b.paired_sgemm && gemm_n == 0) return cli_error(C, "--paired-sgemm needs an SGEMM size (--gemm-size > 0)");
    b.paired_fraction = NAN;
    b.last_loss = NAN;
    b.arena_train = NAN;
    for (int p = 0; p < N_PH; p++) {
        b.ph[p].median = b.ph[p].sec_median = NAN;
        b.ph[p].rate = lipt_xcalloc((size_t)b.runs, sizeof(double));
    }
    b.sgemm_paired = lipt_xcalloc((size_t)b.runs, sizeof(double));
    for (int lib = 0; lib < 2; lib++) {
        b.sgemm_lib_paired[lib] = lipt_xcalloc((size_t)b.runs, sizeof(double));
        b.gemm_lib[lib] = NAN;
    }
    int rc = 0;
    if (lipt_model_init(&b.model, &b.cfg, &err) != LIPT_OK) {
        rc = cli_fail(C, &err);
        for (int p = 0; p < N_PH; p++) free(b.ph[p].rate);
        free(b.sgemm_paired);
        free(b.sgemm_lib_paired[0]);
        free(b.sgemm_lib_paired[1]);
        return rc;
    }
    /* random ids from a seeded generator: a batch of B rows of T+1 tokens per step of a run */
    const size_t ntok = (size_t)b.steps * b.B * (b.T + 1);
    b.tokens = lipt_xmalloc(sizeof(int32_t) * ntok);
    lipt_rng rng;
    lipt_rng_seed(&rng, b.seed);
    for (size_t i = 0; i < ntok; i++) b.tokens[i] = (int32_t)lipt_rng_below(&rng, (uint64_t)b.cfg.vocab_size);
    b.rss_model = peak_rss_mb();
    int quiet = cli_has(a, "json") || !cli_stderr_is_tty();
    if (!quiet) fprintf(stderr, "lipt bench: measuring ...\n");

    /* training first: it sets the high-water mark of memory, which the later phases rarely exceed */
    if (!cli_has(a, "skip-train") && bench_train(&b, &err) != LIPT_OK) { rc = cli_fail(C, &err); goto out; }
    b.rss_train = peak_rss_mb();
    if (!cli_has(a, "skip-eval") && bench_eval(&b, &err) != LIPT_OK) { rc = cli_fail(C, &err); goto out; }
    b.rss_eval = peak_rss_mb();
    if (!cli_has(a, "skip-sample") &&
        (bench_sample(&b, 1, &err) != LIPT_OK || bench_sample(&b, 0, &err) != LIPT_OK)) {
        rc = cli_fail(C, &err);
        goto out;
    }
    b.rss_sample = peak_rss_mb();
    b.hwm_peak = vm_hwm_mb();
    const double peak = b.rss_sample;
    if (b.gemm_n > 0) bench_gemm(&b, NULL);
    if (b.gemm_n > 0 && b.cfg.precision != LIPT_PRECISION_FLOAT32) {
        lipt_ctx gctx;
        lipt_ctx_init(&gctx, 4096, 0);
        if (lipt_ctx_set_precision(&gctx, b.cfg.precision, &err) == LIPT_OK) bench_gemm(&b, &gctx);
        lipt_ctx_free(&gctx);
    }
    if (cli_has(a, "skip-train") == 0 && !isfinite(b.last_loss))
        fprintf(stderr, "lipt bench: warning: the training loss became %g (the timings still stand)\n", b.last_loss);
    double fwd, train, gf[2];
    count_flops(&b.cfg, b.B, b.T, &fwd, &train);
    gf[0] = train * 1e-9;
    gf[1] = fwd * 1e-9;
    if (cli_has(a, "json")) print_json(&b, gf, peak);
    else print_table(&b, gf, peak);
out:
    free(b.tokens);
    for (int p = 0; p < N_PH; p++) free(b.ph[p].rate);
    free(b.sgemm_paired);
    free(b.sgemm_lib_paired[0]);
    free(b.sgemm_lib_paired[1]);
    lipt_model_free(&b.model);
    return rc;
}

int cmd_bench(int argc, char **argv) {
    cli_args a;
    int rc = bench_main(&a, argc, argv);
    cli_free(&a);
    return rc;
}
