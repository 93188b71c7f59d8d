/* lipt bench's timed phases: training steps, evaluation steps, sampling with and without the decoder's cache, and
 * the SGEMM reference (bench.h). */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "bench.h"
#include "cli.h"
#include "gemm_ref.h"
#include "lipt/decode.h"
#include "lipt/sample.h"
#include "lipt/optim.h"
#include "lipt/train.h"

/* The optimizer of `lipt train` with its default options (constant learning rate: the schedule costs nothing). */
#define BENCH_LR 1e-3
#define BENCH_BETA1 0.9
#define BENCH_BETA2 0.98
#define BENCH_EPS 1e-8
#define BENCH_WD 0.0
#define BENCH_CLIP 1.0

static int cmp_double(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

double bench_median(const double *v, int n) {
    double *s = lipt_xmalloc(sizeof(double) * (size_t)n);
    memcpy(s, v, sizeof(double) * (size_t)n);
    qsort(s, (size_t)n, sizeof(double), cmp_double);
    double m = n % 2 ? s[n / 2] : 0.5 * (s[n / 2 - 1] + s[n / 2]);
    free(s);
    return m;
}

/* Inputs and targets of batch i: row b is tokens[i][b][0..T) -> tokens[i][b][1..T]. */
void bench_batch_ids(const bench *b, int i, int32_t *in, int32_t *tg) {
    const int32_t *src = b->tokens + (size_t)i * b->B * (b->T + 1);
    for (int r = 0; r < b->B; r++) {
        memcpy(in + (size_t)r * b->T, src + (size_t)r * (b->T + 1), sizeof(int32_t) * (size_t)b->T);
        memcpy(tg + (size_t)r * b->T, src + (size_t)r * (b->T + 1) + 1, sizeof(int32_t) * (size_t)b->T);
    }
}

/* batch_ids, returning the seconds it took: a copy of B·T ints, not model work, which the timings leave out. */
static double batch_ids_timed(const bench *b, int i, int32_t *in, int32_t *tg) {
    const double c0 = cli_now();
    bench_batch_ids(b, i, in, tg);
    return cli_now() - c0;
}

/* Run k of a timed pair: the bench's precision (k = 0), then with --paired float32 (k = 1). Every run sets its
 * precision, so an error stops before any work. */
static lipt_status set_run_precision(lipt_ctx *ctx, const bench *b, int k, lipt_error *err) {
    return lipt_ctx_set_precision(ctx, k ? LIPT_PRECISION_FLOAT32 : b->cfg.precision, err);
}
void bench_count_flops(const lipt_config *c, int B, int T, double *fwd, double *train) {
    const double D = c->d_model, F = c->d_ff, V = c->vocab_size, L = c->n_layers, d = D / c->n_heads;
    const int tied = lipt_attn_info_of(c->attention)->tied;
    double proj = tied ? 2.0 * D * D + D * d : 4.0 * D * D;
    double macs = L * (proj + 2.0 * D * F) + D * V;
    double fixed = tied ? L * D * D * d / ((double)B * T) : 0.0;
    double attn = L * 2.0 * T * D;
    *fwd = 2.0 * (macs + fixed + attn);
    *train = 3.0 * *fwd;
}

/* ---------------------------------------------------------------- the measurements */

/* --paired-sgemm: N×N operands and a repeat count for SGEMM runs of about 0.1 s. */
typedef struct {
    float *A, *B, *C;
    int N, reps;
} sgemm_probe;

/* GFLOP/s of `reps` products C = A B through library lib (gemm_ref_lib: 0 OpenBLAS, 1 oneDNN); NaN when the
 * build has no such library. */
static double sgemm_lib_rate(int lib, int N, int reps, const float *A, const float *B, float *C) {
    const double t0 = cli_now();
    for (int k = 0; k < reps; k++)
        if (gemm_ref_lib(lib, N, A, B, C) != 0) return NAN;
    return 2.0 * N * N * (double)N * reps / (cli_now() - t0) * 1e-9;
}

/* The SGEMM reference is the faster of the two libraries lipt's products run on (src/kernels/gemm.c): each runs the
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
double bench_median_finite(const double *v, int n) {
    for (int r = 0; r < n; r++)
        if (!isfinite(v[r])) return NAN;
    return bench_median(v, n);
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
        m->median = bench_median(m->rate, n);
        m->sec_median = bench_median(sec + k * n, n) / b->steps;
    }
    if (b->paired) {
        double *ratio = lipt_xmalloc(sizeof(double) * (size_t)n);
        for (int r = 0; r < n; r++) ratio[r] = sec[n + r] / sec[r];
        b->paired_ratio[p == PH_TRAIN ? 0 : 1] = bench_median(ratio, n);
        free(ratio);
    }
}

/* n training steps of b's model in ctx (step i on the batch of step i mod b->steps): the seconds they took without
 * fetching the batches into *sec, and the last step's loss into *loss (each when not NULL). */
static lipt_status run_steps(bench *b, lipt_ctx *ctx, lipt_adamw *opt, int n, int32_t *in, int32_t *tg, double *sec,
                             double *loss, lipt_error *err) {
    const lipt_step_opts so = {BENCH_LR, BENCH_CLIP, b->cfg.power_iters, NULL, 0, 0, NULL, 0};
    lipt_status st = LIPT_OK;
    double t_in = 0;
    const double t0 = cli_now();
    for (int i = 0; i < n && st == LIPT_OK; i++) {
        t_in += batch_ids_timed(b, i % b->steps, in, tg);
        lipt_step_result sr;
        st = lipt_train_step(ctx, &b->model, opt, in, tg, b->B, b->T, &so, &sr, err);
        if (loss) *loss = sr.loss;
    }
    if (sec) *sec = cli_now() - t0 - t_in;
    return st;
}

lipt_status bench_train(bench *b, lipt_error *err) {
    const int B = b->B, T = b->T;
    lipt_ctx ctx;
    lipt_ctx_init(&ctx, (size_t)64 << 20, b->seed * 2654435761u + 1);
    ctx.training = 1;
    ctx.recompute = b->recompute;
    ctx.rev = b->memory == CLI_MEMORY_INVERT ? &b->rev : NULL;
    lipt_adamw_config acfg = {BENCH_LR, BENCH_BETA1, BENCH_BETA2, BENCH_EPS, BENCH_WD};
    lipt_adamw opt;
    lipt_adamw_init(&opt, &acfg);
    int32_t *in = lipt_xmalloc(sizeof(int32_t) * (size_t)B * T), *tg = lipt_xmalloc(sizeof(int32_t) * (size_t)B * T);
    double *sec = lipt_xmalloc(sizeof(double) * 2 * (size_t)b->runs); /* [2][runs]: the precision, float32 */
    sgemm_probe probe = {0}; /* set by sgemm_probe_init with --paired-sgemm (only then used) */
    lipt_ctx sctx; /* --paired-memory: store-all's runs, on an arena of their own */
    double *sec_store = b->paired_memory ? lipt_xmalloc(sizeof(double) * (size_t)b->runs) : NULL;
    lipt_status st = b->paired_memory ? bench_store_ctx_init(&sctx, b, err) : LIPT_OK;
    if (b->paired_sgemm) sgemm_probe_init(&probe, b);
    for (int run = -b->warmup; run < b->runs && st == LIPT_OK; run++)
        for (int k = 0; k <= b->paired && st == LIPT_OK; k++) {
            if ((st = set_run_precision(&ctx, b, k, err)) != LIPT_OK) break;
            double t = 0;
            st = run_steps(b, &ctx, &opt, b->steps, in, tg, &t, &b->last_loss, err);
            if (run >= 0) sec[k * b->runs + run] = t;
            if (k == 0 && b->paired_memory && st == LIPT_OK) { /* the same steps in store-all, right after */
                st = run_steps(b, &sctx, &opt, b->steps, in, tg, &t, NULL, err);
                if (run >= 0) sec_store[run] = t;
            }
            /* the SGEMM run right after each timed training run at the precision (before a paired float32 run) */
            if (k == 0 && b->paired_sgemm && run >= 0 && st == LIPT_OK) {
                double lr[2];
                b->sgemm_paired[run] = sgemm_probe_run(&probe, lr);
                b->sgemm_lib_paired[0][run] = lr[0], b->sgemm_lib_paired[1][run] = lr[1];
            }
        }
    if (st == LIPT_OK) finish_phase(b, PH_TRAIN, sec);
    if (st == LIPT_OK && b->paired_memory) bench_finish_memory_pair(b, sec, sec_store, &sctx);
    if (b->paired_memory) lipt_ctx_free(&sctx);
    free(sec_store);
    if (st == LIPT_OK && b->profile) { /* as many steps again, at the run's precision, timed op by op */
        memset(&b->prof, 0, sizeof b->prof);
        if ((st = set_run_precision(&ctx, b, 0, err)) == LIPT_OK) {
            ctx.profile = &b->prof;
            st = run_steps(b, &ctx, &opt, b->runs * b->steps, in, tg, NULL, NULL, err);
            ctx.profile = NULL;
        }
    }
    if (st == LIPT_OK && b->paired_sgemm) {
        double fwd, train, *frac = lipt_xmalloc(sizeof(double) * (size_t)b->runs);
        bench_count_flops(&b->cfg, B, T, &fwd, &train);
        for (int r = 0; r < b->runs; r++) frac[r] = train * 1e-9 * b->ph[PH_TRAIN].rate[r] / b->sgemm_paired[r];
        b->paired_fraction = bench_median(frac, b->runs);
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

lipt_status bench_eval(bench *b, lipt_error *err) {
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
lipt_status bench_sample(bench *b, int cached, lipt_error *err) {
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
        m->median = bench_median(m->rate, b->runs);
        m->sec_median = bench_median(sec, b->runs) / n;
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
 * into gemm_lib); with ctx, the same product through the model's product (gemm_ref_at_precision) at ctx's precision instead (into ph[PH_GEMM_P]: the
 * model's products at that precision, the operands' conversion included). A run repeats the call so that it lasts at
 * least about 50 ms (calibrated on the warm-up), which keeps small sizes above the timer's resolution. */
void bench_gemm(bench *b, lipt_ctx *ctx) {
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
                if (ctx) gemm_ref_at_precision(ctx, N, A, Bm, Cm);
                else ok = gemm_ref_lib(lib, N, A, Bm, Cm) == 0;
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
    m->median = bench_median(m->rate, b->runs);
    m->sec_median = flop / m->median * 1e-9;
    if (!ctx)
        for (int lib = 0; lib < 2; lib++) {
            double *rate = lipt_xmalloc(sizeof(double) * (size_t)b->runs);
            for (int r = 0; r < b->runs; r++) rate[r] = flop / sec[lib * b->runs + r] * 1e-9;
            b->gemm_lib[lib] = bench_median_finite(rate, b->runs);
            free(rate);
        }
    free(sec);
    free(A);
    free(Bm);
    free(Cm);
}
