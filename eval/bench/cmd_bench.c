/* lipt bench: training, evaluation and sampling speed of any model config on synthetic tokens, the achieved
 * GFLOP/s against this machine's SGEMM rate measured in the same run, and peak resident memory. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>

#include "bench.h"
#include "cli.h"
#include "model_config.h"

static const cli_opt bench_opts[] = {
    {"config", CLI_STRING, "FILE", "model config (key = value); any config key can also be given as --key value", NULL},
    {"batch", CLI_INT, "B", "sequences of seq_len tokens per training / evaluation step", "16"},
    {"threads", CLI_INT, "N", "threads for OpenMP and OpenBLAS (default LIPT_THREADS, else the cores other programs leave idle)", NULL},
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
    {"invert-check", CLI_FLAG, NULL, "with --memory invert, a debug run: every half-block's true input kept as well, "
     "each rebuilt one measured against it (JSON reconstruction.per_block: relative error, a-posteriori bound, "
     "evaluations, the rerun's output against the forward's), memory as store-all's", NULL},
    {"paired-memory", CLI_FLAG, NULL, "with --memory recompute or invert: every timed training run is followed by the "
     "same steps in store-all (a context and arena of its own, the same model and optimizer), and the median of the "
     "per-run time ratios is reported (JSON memory_paired): the mode's price measured seconds apart", NULL},
    {"grad-check", CLI_FLAG, NULL, "with --memory recompute or invert: before the timed runs, one step of the mode and "
     "one of store-all from the same initial weights and batch (learning rate 0, no clipping), their gradients "
     "compared per parameter tensor (JSON gradient_check: the smallest cosine, the largest relative error)", NULL},
    {"profile", CLI_FLAG, NULL, "after the timed training runs, as many steps again timed op by op: each op's forward "
     "and backward and the step's phases (clipping, optimizer, refresh) in ms per step (the timers cost a few "
     "microseconds a step; the tokens/s above are measured without them)", NULL},
    CLI_OPTS_MEMORY,
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
/* ---------------------------------------------------------------- the command */

/* The options into b (its config, sizes and flags); 0, or the exit code of a refused option. */
static int bench_options(cli_args *a, const char *C, bench *b, lipt_error *err) {
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
    b->rss_start = peak_rss_mb();
    b->hwm_start = vm_hwm_mb();
    const int crc = cli_model_config(a, C, NULL, 0, &b->cfg); /* src/shell/model_config.c */
    if (crc) return crc;
    if (lipt_config_validate(&b->cfg, err) != LIPT_OK) return cli_fail(C, err);
    const int prc = cli_apply_precision(a, C, &b->cfg.precision);
    if (prc) return prc;
    b->B = (int)batch;
    b->T = b->cfg.seq_len;
    b->runs = (int)runs;
    b->warmup = (int)warmup;
    b->steps = (int)steps;
    b->sample_tokens = (int)sample_tokens;
    b->gemm_n = (int)gemm_n;
    b->seed = (uint64_t)seed;
    {
        const int rc = cli_apply_memory(a, "bench", &b->memory, &b->rev);
        if (rc) return rc;
        b->recompute = b->memory == CLI_MEMORY_RECOMPUTE;
        b->rev.debug_truth = cli_has(a, "invert-check");
        if (b->rev.debug_truth && b->memory != CLI_MEMORY_INVERT)
            return cli_error(C, "--invert-check measures --memory invert's reconstructions: add --memory invert");
    }
    b->paired = cli_has(a, "paired");
    if (b->paired && b->cfg.precision == LIPT_PRECISION_FLOAT32)
        return cli_error(C, "--paired compares a --precision other than float32 with float32; this run is float32");
    b->paired_memory = cli_has(a, "paired-memory");
    const int gcheck = cli_has(a, "grad-check");
    if ((b->paired_memory || gcheck) && b->memory == CLI_MEMORY_STORE)
        return cli_error(C, "--%s compares a --memory mode with store-all: add --memory recompute or --memory invert",
                         b->paired_memory ? "paired-memory" : "grad-check");
    if (b->paired_memory && b->paired)
        return cli_error(C, "--paired-memory and --paired pair each run with a different one: give one of them");
    if (b->paired_memory && cli_has(a, "skip-train"))
        return cli_error(C, "--paired-memory times training steps: drop --skip-train");
    b->paired_sgemm = cli_has(a, "paired-sgemm");
    b->profile = cli_has(a, "profile");
    if (b->profile && cli_has(a, "skip-train")) return cli_error(C, "--profile times training steps: drop --skip-train");
    if (b->paired_sgemm && gemm_n == 0) return cli_error(C, "--paired-sgemm needs an SGEMM size (--gemm-size > 0)");
    return 0;
}

/* b's per-run arrays, every figure NaN until measured; bench_free_runs frees them. */
static void bench_alloc_runs(bench *b) {
    if (b->rev.debug_truth) { /* per half-block figures of the last step */
        const int n = 2 * b->cfg.n_layers;
        b->rev.cap = n;
        b->rev.iters = lipt_xcalloc((size_t)n, sizeof(int));
        b->rev.bound = lipt_xcalloc((size_t)n, sizeof(double));
        b->rev.err_truth = lipt_xcalloc((size_t)n, sizeof(double));
        b->rev.consistency = lipt_xcalloc((size_t)n, sizeof(double));
    }
    b->paired_ratio[0] = b->paired_ratio[1] = NAN;
    b->memory_ratio = b->store_ms = b->arena_store = NAN;
    b->paired_fraction = NAN;
    b->last_loss = NAN;
    b->arena_train = NAN;
    for (int p = 0; p < N_PH; p++) {
        b->ph[p].median = b->ph[p].sec_median = NAN;
        b->ph[p].rate = lipt_xcalloc((size_t)b->runs, sizeof(double));
    }
    b->sgemm_paired = lipt_xcalloc((size_t)b->runs, sizeof(double));
    for (int lib = 0; lib < 2; lib++) {
        b->sgemm_lib_paired[lib] = lipt_xcalloc((size_t)b->runs, sizeof(double));
        b->gemm_lib[lib] = NAN;
    }
}

static void bench_free_runs(bench *b) {
    free(b->rev.iters);
    free(b->rev.bound);
    free(b->rev.err_truth);
    free(b->rev.consistency);
    for (int p = 0; p < N_PH; p++) free(b->ph[p].rate);
    free(b->sgemm_paired);
    free(b->sgemm_lib_paired[0]);
    free(b->sgemm_lib_paired[1]);
}

/* The phases the options ask for, then the report; 0 or the exit code of a failed phase. */
static int bench_run(cli_args *a, const char *C, bench *b, lipt_error *err) {
    /* random ids from a seeded generator: a batch of B rows of T+1 tokens per step of a run */
    const size_t ntok = (size_t)b->steps * b->B * (b->T + 1);
    b->tokens = lipt_xmalloc(sizeof(int32_t) * ntok);
    lipt_rng rng;
    lipt_rng_seed(&rng, b->seed);
    for (size_t i = 0; i < ntok; i++) b->tokens[i] = (int32_t)lipt_rng_below(&rng, (uint64_t)b->cfg.vocab_size);
    b->rss_model = peak_rss_mb();
    int quiet = cli_has(a, "json") || !cli_stderr_is_tty();
    if (!quiet) fprintf(stderr, "lipt bench: measuring ...\n");

    if (cli_has(a, "grad-check") && bench_grad_check(b, err) != LIPT_OK) return cli_fail(C, err);
    /* training first: it sets the high-water mark of memory, which the later phases rarely exceed */
    if (!cli_has(a, "skip-train") && bench_train(b, err) != LIPT_OK) return cli_fail(C, err);
    b->rss_train = peak_rss_mb();
    if (!cli_has(a, "skip-eval") && bench_eval(b, err) != LIPT_OK) return cli_fail(C, err);
    b->rss_eval = peak_rss_mb();
    if (!cli_has(a, "skip-sample") && (bench_sample(b, 1, err) != LIPT_OK || bench_sample(b, 0, err) != LIPT_OK))
        return cli_fail(C, err);
    b->rss_sample = peak_rss_mb();
    b->hwm_peak = vm_hwm_mb();
    const double peak = b->rss_sample;
    if (b->gemm_n > 0) bench_gemm(b, NULL);
    if (b->gemm_n > 0 && b->cfg.precision != LIPT_PRECISION_FLOAT32) {
        lipt_ctx gctx;
        lipt_ctx_init(&gctx, 4096, 0);
        if (lipt_ctx_set_precision(&gctx, b->cfg.precision, err) == LIPT_OK) bench_gemm(b, &gctx);
        lipt_ctx_free(&gctx);
    }
    if (cli_has(a, "skip-train") == 0 && !isfinite(b->last_loss))
        fprintf(stderr, "lipt bench: warning: the training loss became %g (the timings still stand)\n", b->last_loss);
    double fwd, train, gf[2];
    bench_count_flops(&b->cfg, b->B, b->T, &fwd, &train);
    gf[0] = train * 1e-9;
    gf[1] = fwd * 1e-9;
    if (cli_has(a, "json")) bench_print_json(b, gf, peak);
    else bench_print_table(b, gf, peak);
    return 0;
}

static int bench_main(cli_args *a, int argc, char **argv) {
    const char *C = "bench";
    int pr = cli_parse(a, C, bench_summary, bench_opts, N_BENCH_OPTS, argc, argv, 1, 0);
    if (pr) return pr > 0 ? 0 : 2;
    lipt_error err = {0};
    bench b;
    memset(&b, 0, sizeof b);
    int rc = bench_options(a, C, &b, &err);
    if (rc) return rc;
    /* a batch too large for this machine is refused with what to lower, as lipt train does, not aborted in its step */
    lipt_train_memory m;
    if (lipt_train_memory_estimate(&b.cfg, b.B, 1, 1, b.recompute, b.memory == CLI_MEMORY_INVERT ? &b.rev : NULL, &m,
                                   &err) != LIPT_OK)
        return cli_fail(C, &err);
    m.need += sizeof(int32_t) * (double)b.steps * b.B * (b.T + 1); /* the runs' synthetic tokens */
    if (m.need > m.room) return cli_memory_refuse(C, &m, b.B, b.T, b.memory);
    bench_alloc_runs(&b);
    if (lipt_model_init(&b.model, &b.cfg, &err) != LIPT_OK ||
        (b.memory == CLI_MEMORY_INVERT && lipt_config_reversible_check(&b.cfg, &err) != LIPT_OK)) {
        rc = cli_fail(C, &err);
        bench_free_runs(&b);
        return rc;
    }
    rc = bench_run(a, C, &b, &err);
    free(b.tokens);
    bench_free_runs(&b);
    lipt_model_free(&b.model);
    return rc;
}

int cmd_bench(int argc, char **argv) {
    cli_args a;
    int rc = bench_main(&a, argc, argv);
    cli_free(&a);
    return rc;
}
