/* lipt bench's report: the table, or one JSON object (keys in bench/README.md). */
#include <math.h>
#include <stdio.h>

#include "bench.h"
#include "cli.h"
#include "sysinfo.h"

static const char *const ph_key[N_PH] = {"train", "eval", "sample_cached", "sample_uncached", "gemm_gflops",
                                         "gemm_precision_gflops", "train_float32_paired", "eval_float32_paired"};
static size_t nonembedding_params(const lipt_model *m) {
    return lipt_params_count(&m->params) - m->tok_emb->numel - m->pos_emb->numel;
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

/* --profile: the ops in descending order of their forward + backward time, those that took any (order[], n). */
static int profile_order(const lipt_profile *pr, int *order) {
    int n = 0;
    for (int op = 0; op < LIPT_OP_COUNT; op++)
        if (pr->calls[op] > 0 || pr->bwd[op] > 0) order[n++] = op;
    for (int i = 1; i < n; i++) /* insertion sort: a few dozen ops */
        for (int k = i; k > 0 && pr->fwd[order[k]] + pr->bwd[order[k]] > pr->fwd[order[k - 1]] + pr->bwd[order[k - 1]];
             k--) {
            const int t = order[k];
            order[k] = order[k - 1];
            order[k - 1] = t;
        }
    return n;
}

static const char *const phase_key[LIPT_PHASE_COUNT] = {"forward", "backward", "clip", "optimizer", "refresh"};

static void json_profile(json_w *j, const bench *b) {
    const lipt_profile *pr = &b->prof;
    if (!b->profile || pr->steps == 0) {
        json_null(j, "profile");
        return;
    }
    const double per = 1e3 / (double)pr->steps; /* seconds summed -> ms per step */
    json_obj_open(j, "profile");
    json_int(j, "steps", pr->steps);
    json_obj_open(j, "phase_ms");
    for (int k = 0; k < LIPT_PHASE_COUNT; k++) json_num(j, phase_key[k], per * pr->phase[k]);
    json_obj_close(j);
    const lipt_profile_split sp = lipt_profile_split_of(pr); /* the step: the sum of the phases */
    json_num(j, "step_ms", sp.step_ms);
    json_num(j, "products_ms", sp.products_ms);
    json_num(j, "attention_ms", sp.attention_ms);
    json_num(j, "outside_products_ms", sp.outside_ms);
    json_num(j, "outside_products_fraction", sp.outside_fraction);
    int order[LIPT_OP_COUNT];
    const int n = profile_order(pr, order);
    json_arr_open(j, "ops");
    for (int i = 0; i < n; i++) {
        const int op = order[i];
        json_obj_open(j, NULL);
        json_str(j, "op", lipt_ops[op].name);
        json_num(j, "calls_per_step", (double)pr->calls[op] / (double)pr->steps);
        json_num(j, "forward_ms", per * pr->fwd[op]);
        json_num(j, "backward_ms", per * pr->bwd[op]);
        json_obj_close(j);
    }
    json_arr_close(j);
    json_obj_close(j);
}

static void print_profile(const bench *b) {
    const lipt_profile *pr = &b->prof;
    if (!b->profile || pr->steps == 0) return;
    const double per = 1e3 / (double)pr->steps;
    const lipt_profile_split sp = lipt_profile_split_of(pr);
    const double step = sp.step_ms;
    printf("profile: %ld training steps after the timed runs, ms per step (%.2f in all):\n ", pr->steps, step);
    for (int k = 0; k < LIPT_PHASE_COUNT; k++)
        printf(" %s %.2f (%.1f%%)%s", phase_key[k], per * pr->phase[k], 100.0 * per * pr->phase[k] / step,
               k + 1 < LIPT_PHASE_COUNT ? "," : "\n");
    printf("  products %.2f ms (%.1f%%; the attention kernels' whole calls %.2f ms of it), outside %.2f ms (%.1f%%)\n",
           sp.products_ms, 100.0 * sp.products_ms / step, sp.attention_ms, sp.outside_ms, 100.0 * sp.outside_fraction);
    printf("  %-24s %9s %11s %11s %9s\n", "op", "calls", "forward ms", "backward ms", "share");
    int order[LIPT_OP_COUNT];
    const int n = profile_order(pr, order);
    for (int i = 0; i < n; i++) {
        const int op = order[i];
        const double f = per * pr->fwd[op], g = per * pr->bwd[op];
        printf("  %-24s %9.1f %11.2f %11.2f %8.1f%%\n", lipt_ops[op].name, (double)pr->calls[op] / (double)pr->steps,
               f, g, 100.0 * (f + g) / step);
    }
}

/* lipt's own memory besides the step's arena (weights, their gradients, the optimizer's two moments), and with
 * --memory invert what the reconstructions cost and how close they came. */
static void json_memory(json_w *j, const bench *b) {
    const double p = (double)lipt_params_count(&b->model.params) * sizeof(float) / 1048576.0;
    json_num(j, "params_mb", p);
    json_num(j, "grads_mb", p);
    json_num(j, "optimizer_state_mb", 2 * p);
    if (b->paired_memory) {
        json_obj_open(j, "memory_paired"); /* the mode against store-all, run by run */
        json_num(j, "ratio", b->memory_ratio);
        json_num(j, "store_ms_per_step", b->store_ms);
        json_num(j, "store_arena_peak_mb", b->arena_store);
        json_obj_close(j);
    }
    if (b->gcheck.done) {
        const grad_check *g = &b->gcheck;
        json_obj_open(j, "gradient_check");
        json_int(j, "tensors", g->tensors);
        json_num(j, "worst_cosine", g->worst_cos);
        json_str(j, "worst_cosine_tensor", g->worst_cos_name);
        json_num(j, "worst_rel_err", g->worst_rel);
        json_str(j, "worst_rel_err_tensor", g->worst_rel_name);
        if (b->memory == CLI_MEMORY_INVERT) {
            json_num(j, "evaluations_per_inversion", g->evals_per_inversion);
            json_num(j, "worst_bound", g->worst_bound);
        }
        json_obj_close(j);
    }
    if (b->memory != CLI_MEMORY_INVERT) return;
    const lipt_reversible *r = &b->rev;
    json_obj_open(j, "reconstruction");
    json_int(j, "inversions", r->inversions);
    json_num(j, "evaluations_per_inversion", r->inversions ? (double)r->evaluations / (double)r->inversions : 0);
    json_num(j, "work_per_inversion", r->inversions ? r->work / (double)r->inversions : 0);
    json_int(j, "fallbacks", r->fallbacks);
    json_int(j, "unconverged", r->unconverged);
    json_num(j, "worst_bound", r->worst_bound);
    json_num(j, "tol", r->tol);
    json_int(j, "accel", r->accel);
    json_int(j, "keep_every", r->keep_every);
    if (r->debug_truth && r->cap > 0) {
        const char *keys[] = {"error", "bound", "consistency"};
        const double *vals[] = {r->err_truth, r->bound, r->consistency};
        json_obj_open(j, "per_block"); /* half-block k = 2 * layer + (0 attention, 1 feed-forward) */
        for (int a = 0; a < 3; a++) {
            json_arr_open(j, keys[a]);
            for (int k = 0; k < r->cap; k++) json_num(j, NULL, vals[a][k]);
            json_arr_close(j);
        }
        json_arr_open(j, "evaluations");
        for (int k = 0; k < r->cap; k++) json_int(j, NULL, r->iters[k]);
        json_arr_close(j);
        json_obj_close(j);
    }
    json_obj_close(j);
}

void bench_print_json(const bench *b, const double gf[2], double peak) {
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
    json_str(&j, "memory", cli_memory_name(b->memory));
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
    json_memory(&j, b);
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
    json_num(&j, "sgemm_gflops_median", b->paired_sgemm ? bench_median(b->sgemm_paired, b->runs) : NAN);
    for (int lib = 0; lib < 2; lib++)
        json_num(&j, lib ? "sgemm_gflops_median_onednn" : "sgemm_gflops_median_openblas",
                 b->paired_sgemm ? bench_median_finite(b->sgemm_lib_paired[lib], b->runs) : NAN);
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
    json_profile(&j, b);
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

void bench_print_table(const bench *b, const double gf[2], double peak) {
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
           b->memory == CLI_MEMORY_RECOMPUTE ? "; training recomputes activations (--memory recompute)"
           : b->memory == CLI_MEMORY_INVERT  ? "; training rebuilds block inputs from outputs (--memory invert)"
                                             : "");
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
               bench_median(b->sgemm_paired, b->runs));
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
    if (b->paired_memory)
        printf("paired with store-all: %.3fx store-all's step time (median of the per-run ratios; store-all %.1f ms per "
               "step, arena peak %.1f MB)\n", b->memory_ratio, b->store_ms, b->arena_store);
    if (b->gcheck.done)
        printf("gradients against store-all (%d tensors): smallest cosine %.9f (%s), largest relative error %.3e (%s)\n",
               b->gcheck.tensors, b->gcheck.worst_cos, b->gcheck.worst_cos_name, b->gcheck.worst_rel,
               b->gcheck.worst_rel_name);
    print_profile(b);
}
