/* lipt bench's measurements and their record, shared by cmd_bench.c (the command), bench_measure.c (the timed
 * phases) and bench_report.c (the table and the JSON object). */
#ifndef LIPT_EVAL_BENCH_H
#define LIPT_EVAL_BENCH_H

#include <stdint.h>

#include "lipt/model.h"

enum { PH_TRAIN, PH_EVAL, PH_SAMPLE_CACHED, PH_SAMPLE_UNCACHED, PH_GEMM, PH_GEMM_P, PH_TRAIN_F32, PH_EVAL_F32, N_PH };

typedef struct {
    double *rate;      /* [runs]: tokens/s (GFLOP/s for the GEMM) of each timed run */
    double median;     /* NaN when not measured */
    double sec_median; /* median seconds per step (train, eval) or per token (sampling) */
} measurement;

/* --grad-check: one step of the --memory mode against store-all from the same weights, per parameter tensor. */
typedef struct {
    int done, tensors;
    double worst_cos, worst_rel;       /* the smallest cosine, the largest relative error ‖g − g₀‖ / ‖g₀‖ */
    char worst_cos_name[64], worst_rel_name[64];
    double evals_per_inversion, worst_bound; /* --memory invert: the reconstructions of that step */
} grad_check;

typedef struct {
    lipt_config cfg;
    lipt_model model;
    int B, T, runs, warmup, steps, sample_tokens, gemm_n, recompute;
    int memory;            /* --memory: CLI_MEMORY_STORE, _RECOMPUTE or _INVERT */
    lipt_reversible rev;   /* --memory invert: the knobs, and the reconstruction statistics of the training phase */
    int paired;            /* --paired: float32 runs interleaved with train and eval */
    int paired_memory;     /* --paired-memory: every timed training run followed by one in store-all */
    double memory_ratio;   /* median over runs of (seconds in the --memory mode) / (store-all's right after); NaN */
    double store_ms;       /* store-all's median ms per step in those runs; NaN */
    double arena_store;    /* MB: store-all's arena high-water mark in those runs; NaN */
    grad_check gcheck;     /* --grad-check */
    int paired_sgemm;      /* --paired-sgemm: an SGEMM run after every timed training run */
    int profile;           /* --profile: runs x steps more training steps timed op by op into prof */
    lipt_profile prof;
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

/* The median of v [n]; bench_median_finite: NaN when any is NaN (a library not in this build). */
double bench_median(const double *v, int n);
double bench_median_finite(const double *v, int n);
/* Model FLOPs per token (a multiply-add is 2 FLOPs), for full windows of T tokens in batches of B.
 * Matmuls: the projections, the feed-forward and the head (embedding lookups are not matmuls). The tied
 * variants form their values as Q_h M_h with M_h = W^{Q,h}ᵀ W^{V,h} / s (d x d per head): D·d per token instead
 * of D², plus the D²·d of forming M once per forward pass, spread over the B·T tokens. Attention: q kᵀ and P v
 * over the full T x T square (2 · 2·T·D per token and layer), as a dense implementation computes it; the causal
 * mask would halve it. Training = 3 x forward (backward: two products per forward product). */
void bench_count_flops(const lipt_config *c, int B, int T, double *fwd, double *train);

/* The timed phases (bench_measure.c): each fills its measurements in b. bench_gemm: the SGEMM reference (ctx NULL),
 * or the same product at ctx's precision. */
lipt_status bench_train(bench *b, lipt_error *err);
/* Batch i of the synthetic tokens: inputs and targets [B*T] (bench_measure.c). */
void bench_batch_ids(const bench *b, int i, int32_t *in, int32_t *tg);
/* --paired-memory and --grad-check (bench_memory.c). */
lipt_status bench_store_ctx_init(lipt_ctx *sctx, const bench *b, lipt_error *err);
void bench_finish_memory_pair(bench *b, const double *sec_mode, const double *sec_store, const lipt_ctx *sctx);
lipt_status bench_grad_check(bench *b, lipt_error *err);
lipt_status bench_eval(bench *b, lipt_error *err);
lipt_status bench_sample(bench *b, int cached, lipt_error *err);
void bench_gemm(bench *b, lipt_ctx *ctx);

/* The report (bench_report.c): gf, the model's GFLOP per token in training and evaluation; peak, the resident set
 * after the model phases in MB. */
void bench_print_json(const bench *b, const double gf[2], double peak);
void bench_print_table(const bench *b, const double gf[2], double peak);

#endif
