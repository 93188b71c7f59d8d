/* lipt lipschitz: the certificate of every residual branch (a true upper bound of its Lipschitz constant in the
 * norm it is certified in, recomputed from the weights with converged Gram-iteration spectral norms), next to
 * exact Jacobian norms measured at data inputs (optionally after gradient ascent). */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli.h"
#include "lipt/bounds.h"
#include "lipt/jacobian.h"
#include "run.h"

static const cli_opt lip_opts[] = {
    {"ckpt", CLI_STRING, "FILE", "checkpoint (required; or a run folder: its best.ckpt, else last.ckpt)", NULL},
    {"data", CLI_STRING, "NAME|PATH", "corpus for the data inputs (default: the checkpoint's own corpus)", NULL},
    {"data-split", CLI_STRING, "HOW", "auto, standard or F0,F1,F2 (default: the run's own split)", NULL},
    {"split", CLI_STRING, "SPLIT", "split the input windows come from", "valid"},
    {"tokens", CLI_INT, "N", "tokens per measured input window (Jacobians are N*D square)", "8"},
    {"windows", CLI_INT, "K", "data windows to measure at (the largest norm is reported)", "2"},
    {"ascent-steps", CLI_INT, "S", "gradient-ascent steps on the inf-norm from each data input, then the Jacobian there in the certifying norm (0: none)", "0"},
    {"gram-iters", CLI_INT, "T", "Gram-iteration squarings of the reported spectral norms (converged default)", NULL},
    {"power-iters", CLI_INT, "N", "power-iteration rounds that steer the bound vectors (their values are certified anyway)", "50"},
    {"threads", CLI_INT, "N", "threads for OpenMP and OpenBLAS", NULL},
    {"json", CLI_FLAG, NULL, "one JSON object: per layer and branch the certificate and the measured norms", NULL},
};

typedef struct {
    const char *norm;            /* certifying norm: "inf", "2", "inf2" ("-" for no certificate) */
    double cert;                 /* certified bound of the branch map at N = seq_len (NaN: none) */
    double cert_tokens;          /* the same bound at N = --tokens (what the measurement must respect) */
    double ub_seq, ub_tokens;    /* invertible model's attention: UB of the unnormalised map in the certifying norm at
                                  * N = seq_len and at N = --tokens */
    double ub_inf, ub_2;         /* non-invertible tied L2: UB of the attention alone in the ∞- and 2-norm at
                                  * N = --tokens (no certifying norm: both are reported) */
    double factor, factor2;      /* normalising factors the forward pass uses (ffn: of W1 and W2) */
    double sig[4];               /* certified spectral norms (attention: max_h ‖W^Q_h‖, max_h ‖W^K_h‖ or NaN, max_h
                                  * ‖W^V_h‖, ‖W^O‖; ffn: ‖W1‖, ‖W2‖) */
    double meas, meas_upper;     /* measured Jacobian norm in the certifying norm (a lower bound of the map's
                                  * constant); inf2 also the block row-sum upper estimate */
    double meas_inf, meas_2;     /* measured ‖J‖_∞ and ‖J‖₂ at the same inputs */
    double ascent;               /* the Jacobian in the certifying norm at the input found by ∞-norm gradient ascent from
                                  * each data input (NaN if not run) */
    const char *note;
} branch_report;

static double max_of(const lipt_tensor *t) {
    double m = 0;
    for (size_t i = 0; i < t->numel; i++)
        if (!(t->data[i] <= m)) m = t->data[i];
    return m;
}

/* Certified spectral norms of the attention weights (max over heads), for the report. */
static void attn_sigmas(lipt_ctx *ctx, const lipt_model *m, int l, int g, double sig[4]) {
    const lipt_layer *L = &m->layers[l];
    const int H = m->cfg.n_heads, D = m->cfg.d_model;
    float *u = calloc((size_t)H * D, sizeof(float)), *v = calloc((size_t)D, sizeof(float));
    sig[0] = max_of(lipt_spectral_norm_ub(ctx, L->wq, u, v, H, 0, g));
    sig[1] = L->wk ? max_of(lipt_spectral_norm_ub(ctx, L->wk, u, v, H, 0, g)) : NAN;
    sig[2] = max_of(lipt_spectral_norm_ub(ctx, L->wv, u, v, H, 0, g));
    sig[3] = lipt_spectral_norm_ub(ctx, L->wo, u, v, 1, 0, g)->data[0];
    free(u);
    free(v);
}

/* The certificate of every branch of an invertible model, from the weights. */
static void certify(lipt_model *m, int N, int g, branch_report *rep) {
    const lipt_config *cfg = &m->cfg;
    lipt_ctx ctx;
    lipt_ctx_init(&ctx, (size_t)16 << 20, 1);
    lipt_no_grad_push(&ctx);
    for (int l = 0; l < cfg->n_layers; l++) {
        branch_report *ra = &rep[2 * l], *rf = &rep[2 * l + 1];
        lipt_layer_lipschitz used; /* the factors the forward pass divides by (cfg.gram_iters) */
        lipt_model_layer_lipschitz(m, l, 0, &used);
        ra->factor = used.attn_factor;
        ra->ub_seq = lipt_model_attn_bound(&ctx, m, l, cfg->seq_len, g)->data[0];
        ra->ub_tokens = lipt_model_attn_bound(&ctx, m, l, N, g)->data[0];
        /* upper bounds (the bound's float, the factor's float) multiplied with the product rounded up */
        ra->cert = lipt_bound_mul_up(ra->ub_seq, ra->factor);
        ra->cert_tokens = lipt_bound_mul_up(ra->ub_tokens, ra->factor);
        attn_sigmas(&ctx, m, l, g, ra->sig);
        ra->norm = lipt_lipnorm_name(cfg->lip_norm);
        ra->note = lipt_attn_info_of(cfg->attention)->lipschitz_note;
        /* feed-forward, per token in the 2-norm (so also in the token-wise norm and the sequence 2-norm):
         * ‖W1 f1‖ ‖W2 f2‖ with the activation 1-Lipschitz */
        lipt_layer *Ly = &m->layers[l];
        rf->sig[0] = lipt_spectral_norm_ub(&ctx, Ly->w1, Ly->sn1_u->data, Ly->sn1_v->data, 1, 0, g)->data[0];
        rf->sig[1] = lipt_spectral_norm_ub(&ctx, Ly->w2, Ly->sn2_u->data, Ly->sn2_v->data, 1, 0, g)->data[0];
        rf->sig[2] = rf->sig[3] = NAN;
        rf->factor = used.ffn_factor1;
        rf->factor2 = used.ffn_factor2;
        rf->cert = rf->cert_tokens = lipt_bound_mul_up(lipt_bound_mul_up(rf->sig[0], rf->factor),
                                                       lipt_bound_mul_up(rf->sig[1], rf->factor2));
        rf->ub_seq = rf->ub_tokens = NAN;
        rf->norm = cfg->lip_norm == LIPT_LIPNORM_INF ? "2" : lipt_lipnorm_name(cfg->lip_norm);
        rf->note = cfg->ffn_full_budget
                       ? "contractive feed-forward: W1 / max(1, sigma), W2 / max(1, sigma/c), 1-Lipschitz activation, per token"
                       : "contractive feed-forward: W1, W2 / max(1, sigma/c), 1-Lipschitz activation, per token";
        lipt_ctx_reset(&ctx);
    }
    lipt_no_grad_pop(&ctx);
    lipt_ctx_free(&ctx);
}

/* Bounds of the attention alone for a non-invertible model whose kind has a tied L2 bound (no certificate: its
 * branch has LayerNorm); the other kinds have none. */
static void bounds_plain(lipt_model *m, int N, int g, branch_report *rep) {
    const lipt_config *cfg = &m->cfg;
    const int D = cfg->d_model, H = cfg->n_heads;
    lipt_ctx ctx;
    lipt_ctx_init(&ctx, (size_t)16 << 20, 1);
    lipt_no_grad_push(&ctx);
    float *vbuf = calloc((size_t)(3 * H * D + 3 * D), sizeof(float));
    lipt_bound_vectors bv = {vbuf, vbuf + H * D, vbuf + H * D + D, vbuf + 2 * H * D + D, vbuf + 3 * H * D + D,
                             vbuf + 3 * H * D + 2 * D, NULL, NULL, g};
    for (int l = 0; l < cfg->n_layers; l++) {
        branch_report *ra = &rep[2 * l];
        const lipt_layer *Ly = &m->layers[l];
        if (lipt_attn_info_of(cfg->attention)->bound == LIPT_ATTN_BOUND_TIED_L2) {
            ra->ub_inf = lipt_bound_l2_inf(&ctx, Ly->wq, Ly->wv, Ly->wo, H, N)->data[0];
            ra->ub_2 = lipt_bound_l2_2(&ctx, Ly->wq, Ly->wv, Ly->wo, H, N, &bv, 0)->data[0];
        }
        ra->note = lipt_attn_info_of(cfg->attention)->lipschitz_note;
        rep[2 * l + 1].note = "feed-forward after LayerNorm: no bound";
        lipt_ctx_reset(&ctx);
    }
    free(vbuf);
    lipt_no_grad_pop(&ctx);
    lipt_ctx_free(&ctx);
}

/* A Jacobian's norm in the certifying norm `norm` ("inf2", "inf", "2"; NULL, no certificate: the ∞-norm). */
static double cert_norm(const char *norm, const double *J, size_t N, size_t D, double ninf, double n2, double *upper) {
    if (!norm) return ninf;
    if (strcmp(norm, "inf2") == 0) return lipt_matrix_norm_inf2(J, N, D, upper);
    if (strcmp(norm, "inf") == 0) return ninf;
    return n2;
}

/* Measured Jacobian norms of every branch at the hidden states of K data windows of N tokens. */
static int measure(lipt_model *m, const lipt_dataset *ds, int split, long N, long K, long asteps, branch_report *rep,
                   const char *C) {
    const int L = m->cfg.n_layers, D = m->cfg.d_model;
    const size_t n = (size_t)N * D;
    lipt_error err = {0};
    double *J = malloc(sizeof(double) * n * n);
    float *x = malloc(sizeof(float) * n * (size_t)(2 * L > 0 ? 2 * L : 1)), *xa = malloc(sizeof(float) * n);
    lipt_ctx ctx;
    lipt_ctx_init(&ctx, (size_t)16 << 20, 1);
    int rc = 0;
    if (!J || !x || !xa) rc = cli_error(C, "out of memory for a %zu x %zu Jacobian", n, n);
    for (long w = 0; w < K && rc == 0; w++) {
        int ids[1024];
        for (long t = 0; t < N; t++) ids[t] = ds->tok[split][w * N + t];
        /* inputs of every branch: the block input for attention, the mid-block state for the feed-forward */
        if (lipt_model_branch_inputs(&ctx, m, ids, (int)N, x, &err) != LIPT_OK) { rc = cli_fail(C, &err); break; }
        for (int k = 0; k < 2 * L; k++) {
            lipt_branch_ref ref = {m, k / 2, k % 2, NULL};
            lipt_jac_map jm = {lipt_model_branch_fn, &ref, 3, {1, (int)N, D, 0}, 1};
            if (lipt_jacobian(&jm, x + (size_t)k * n, J, &err) != LIPT_OK) { rc = cli_fail(C, &err); break; }
            branch_report *r = &rep[k];
            const double ni = lipt_matrix_norm_inf(J, n, n), n2 = lipt_matrix_norm_2(J, n, n, NULL, NULL);
            if (!(ni <= r->meas_inf)) r->meas_inf = ni;
            if (!(n2 <= r->meas_2)) r->meas_2 = n2;
            double mu = NAN;
            const double mc = cert_norm(r->norm, J, (size_t)N, (size_t)D, ni, n2, &mu);
            if (!(mc <= r->meas)) r->meas = mc;
            if (!(mu <= r->meas_upper)) r->meas_upper = mu;
            if (asteps > 0) {
                /* gradient ascent on the inf-norm from the data input, then the Jacobian at the point it found
                 * measured in the certifying norm (an adversarial input for the certificate) */
                lipt_ascent_opts ao = lipt_ascent_defaults();
                ao.starts = 1;
                ao.steps = (int)asteps;
                ao.x0 = x + (size_t)k * n;
                ao.max_exact = n;
                lipt_ascent_result ar;
                memset(&ar, 0, sizeof ar);
                if (lipt_ascent_jac_inf(&jm, &ao, xa, &ar, &err) != LIPT_OK) { rc = cli_fail(C, &err); break; }
                if (lipt_jacobian(&jm, xa, J, &err) != LIPT_OK) { rc = cli_fail(C, &err); break; }
                const double ma = cert_norm(r->norm, J, (size_t)N, (size_t)D, lipt_matrix_norm_inf(J, n, n),
                                            r->norm && strcmp(r->norm, "2") == 0 ? lipt_matrix_norm_2(J, n, n, NULL, NULL) : NAN,
                                            NULL);
                if (!(ma <= r->ascent)) r->ascent = ma;
            }
        }
    }
    free(J);
    free(x);
    free(xa);
    lipt_ctx_free(&ctx);
    return rc;
}

/* Coupling blocks with certified branches: each half-block y = x + g(x) changes only the half g does not read, so
 * x = y - g(y) exactly, and both directions are (1 + L)-Lipschitz in the branch's norm (L its certificate): per
 * half-block and, composed, for the stack (ActNorm by max exp(±s)). out[3]: the largest 1 + L, the stack's forward
 * and inverse bounds, each rounded up (libm's exp within an ulp: two up). */
static void coupling_bounds(const lipt_model *m, const branch_report *rep, double out[3]) {
    out[0] = 0, out[1] = out[2] = 1;
    for (int k = 0; k < 2 * m->cfg.n_layers; k++) {
        const double b = nextafter(1.0 + rep[k].cert, INFINITY); /* 1 + L rounded up */
        out[0] = fmax(out[0], b);
        out[1] = lipt_bound_mul_up(out[1], b);
        out[2] = lipt_bound_mul_up(out[2], b);
        const lipt_tensor *s = m->layers[k / 2].an_s;
        if (k % 2 && s) { /* ActNorm after the block: x exp(s) + b, inverse (y - b) exp(-s), per channel */
            double hi = -INFINITY, lo = INFINITY;
            for (size_t i = 0; i < s->numel; i++) hi = fmax(hi, s->data[i]), lo = fmin(lo, s->data[i]);
            out[1] = lipt_bound_mul_up(out[1], nextafter(nextafter(exp(hi), INFINITY), INFINITY));
            out[2] = lipt_bound_mul_up(out[2], nextafter(nextafter(exp(-lo), INFINITY), INFINITY));
        }
    }
}

static void print_json(const cli_args *a, const lipt_model *m, long N, long K, int g, const branch_report *rep,
                       int certified, int first_bad) {
    const lipt_config *cfg = &m->cfg;
    json_w j;
    json_begin(&j, stdout);
    json_str(&j, "ckpt", cli_str(a, "ckpt"));
    json_str(&j, "attention", lipt_attn_name(cfg->attention));
    json_bool(&j, "invertible", m->invertible);
    json_num_f32(&j, "c", cfg->c); /* a float32 key: 0.9, not 0.899999976 */
    json_int(&j, "seq_len", cfg->seq_len);
    json_int(&j, "tokens", N);
    json_int(&j, "windows", K);
    json_int(&j, "gram_iters", g);
    json_int(&j, "gram_iters_training", cfg->gram_iters);
    json_str(&j, "spectral_bound", lipt_spectral_bound_name(cfg->spectral_bound));
    json_arr_open(&j, "branches");
    for (int k = 0; k < 2 * cfg->n_layers; k++) {
        const branch_report *r = &rep[k];
        json_obj_open(&j, NULL);
        json_int(&j, "layer", k / 2);
        json_str(&j, "branch", k % 2 ? "ffn" : "attn");
        json_str(&j, "norm", r->norm ? r->norm : "none");
        json_num(&j, "certificate", r->cert);
        json_num(&j, "certificate_tokens", r->cert_tokens);
        json_num(&j, "ub_seq_len", r->ub_seq);
        json_num(&j, "ub_tokens", r->ub_tokens);
        json_num(&j, "ub_inf", r->ub_inf);
        json_num(&j, "ub_2", r->ub_2);
        json_num(&j, "factor", r->factor);
        json_num(&j, "factor2", r->factor2);
        json_num(&j, "sigma_q_or_w1", r->sig[0]);
        json_num(&j, "sigma_k_or_w2", r->sig[1]);
        json_num(&j, "sigma_v", r->sig[2]);
        json_num(&j, "sigma_o", r->sig[3]);
        json_num(&j, "measured", r->meas);
        json_num(&j, "measured_upper", r->meas_upper);
        json_num(&j, "budget_used", r->meas / cfg->c);
        json_num(&j, "measured_inf", r->meas_inf);
        json_num(&j, "measured_2", r->meas_2);
        json_num(&j, "ascent", r->ascent);
        json_str(&j, "note", r->note);
        json_obj_close(&j);
    }
    json_arr_close(&j);
    if (m->invertible) {
        json_bool(&j, "certified", certified);
        json_int(&j, "first_uncertified", first_bad);
    }
    if (m->invertible && cfg->coupling) { /* certified coupling: bi-Lipschitz, inverted by subtraction */
        double b[3];
        coupling_bounds(m, rep, b);
        json_num(&j, "bi_lipschitz_half_block", b[0]);
        json_num(&j, "bi_lipschitz_forward", b[1]);
        json_num(&j, "bi_lipschitz_inverse", b[2]);
    }
    json_end(&j);
}

/* One column of the table: " " and v right-aligned in w characters, or "n/a" where the value does not apply (NaN:
 * no bound exists for that map, or the branch has no such factor). */
static void cell(int w, const char *fmt, double v) {
    char b[48] = "n/a";
    if (!isnan(v)) snprintf(b, sizeof b, fmt, v);
    printf(" %*s", w, b);
}

static void print_text(const cli_args *a, const lipt_model *m, long N, long K, int g, const char *sn,
                       const branch_report *rep, long asteps) {
    const lipt_config *cfg = &m->cfg;
    const int L = cfg->n_layers;
    printf("%s: %s attention, %d layers, c = %g; measured at %ld %s windows of %ld tokens\n",
           cli_shown(cli_str(a, "ckpt")),
           lipt_attn_name(cfg->attention), L, (double)cfg->c, K, sn, N);
    if (!m->invertible) {
        printf("%-5s %-4s %12s %12s %12s %12s%s\n", "layer", "map", "ub_inf", "measured_inf", "ub_2", "measured_2",
               asteps ? "   ascent_inf" : "");
        for (int k = 0; k < 2 * L; k++) {
            const branch_report *r = &rep[k];
            printf("%-5d %-4s", k / 2, k % 2 ? "ffn" : "attn");
            cell(12, "%.4g", r->ub_inf), cell(12, "%.4g", r->meas_inf), cell(12, "%.4g", r->ub_2);
            cell(12, "%.4g", r->meas_2);
            if (asteps) cell(12, "%.4g", r->ascent);
            printf("\n");
        }
        for (int k = 0; k < 2 && k < 2 * L; k++) printf("note (%s): %s\n", k ? "ffn" : "attn", rep[k].note);
        printf("(n/a: no bound exists for that map; this model is not invertible, so it has no certificate)\n");
        return;
    }
    if (cfg->spectral_bound == LIPT_SPECTRAL_BOUND_CHOLESKY)
        printf("spectral norms certified by Cholesky (spectral_bound = cholesky, as in training; Gram iteration with %d "
               "squarings where that finds no proof, %d in training); UB at seq_len = %d and at N = %ld\n",
               g, cfg->gram_iters, cfg->seq_len, N);
    else
        printf("certificates recomputed with %d Gram squarings (training divides by %d); UB at seq_len = %d and at N = "
               "%ld\n", g, cfg->gram_iters, cfg->seq_len, N);
    printf("%-5s %-4s %-4s %11s %9s %10s %10s %9s %9s %9s %9s %11s %8s%s\n", "layer", "map", "norm", "certificate",
           "factor", "ub_seqlen", "ub_tokens", "sig_q/w1", "sig_k/w2", "sig_v", "sig_o", "measured", "budget",
           asteps ? "      ascent" : "");
    for (int k = 0; k < 2 * L; k++) {
        const branch_report *r = &rep[k];
        const int ffn = k % 2;
        printf("%-5d %-4s %-4s", k / 2, ffn ? "ffn" : "attn", r->norm);
        cell(11, "%.6f", r->cert), cell(9, "%.4g", ffn ? r->factor * r->factor2 : r->factor);
        cell(10, "%.4g", r->ub_seq), cell(10, "%.4g", r->ub_tokens);
        for (int q = 0; q < 4; q++) cell(9, "%.4g", r->sig[q]);
        cell(11, "%.4g", r->meas), cell(8, "%.2f%%", 100.0 * r->meas / cfg->c);
        if (asteps) cell(12, "%.4g", r->ascent);
        printf("\n");
    }
    for (int k = 0; k < 2 && k < 2 * L; k++) printf("note (%s): %s\n", k ? "ffn" : "attn", rep[k].note);
    printf("(measured: exact Jacobian norm of the branch in its certifying norm at data inputs, a lower bound of its\n"
           " Lipschitz constant; budget = measured / c. inf2 is the token-wise norm max_i |x_i|_2)\n");
}

static void print_coupling(const lipt_model *m, const branch_report *rep, double worst) {
    double b[3];
    coupling_bounds(m, rep, b);
    printf("certified: every branch has Lipschitz constant <= %.6f in its norm; coupling blocks: each half-block changes "
           "only the half its branch does not read, so it is inverted exactly by one subtraction (x = y - g(y)), and it "
           "and its inverse are (1 + L)-Lipschitz: <= %.6f per half-block; the stack <= %.6f, its inverse <= %.6f\n",
           worst, b[0], b[1], b[2]);
}

int cmd_lipschitz(int argc, char **argv) {
    const char *C = "lipschitz";
    cli_args a;
    int pr = cli_parse(&a, C,
                       "The certificate of every residual branch of an invertible model: a true upper bound of its Lipschitz\n"
                       "constant in the norm it is certified in (recomputed from the weights with converged certified spectral\n"
                       "norms), with the normalising factors, and the exact Jacobian norms measured at data inputs (a lower\n"
                       "bound; never above the certificate). For the other variants (no certificate: their branches hold\n"
                       "LayerNorm): the bounds of the attention alone (tied L2) next to measured norms.\n"
                       "Exit status: 0 after the report when every branch of an invertible model is certified < 1; 1 when\n"
                       "one is not (the report names it) or on an error; 2 for a usage error. The other variants have no\n"
                       "certificate to fail: 0 after their report (their JSON has no \"certified\" field).",
                       lip_opts, (int)(sizeof lip_opts / sizeof lip_opts[0]), argc, argv, 0, 0);
    if (pr) return pr > 0 ? 0 : 2;
    if (!cli_has(&a, "ckpt")) return cli_error(C, "--ckpt FILE is required");
    if (run_ckpt_option(&a, C)) return 2; /* a run folder: its best.ckpt, else last.ckpt */
    long N, K, asteps, piters, gi = LIPT_SPECTRAL_UB_ITERS_REPORT;
    if (cli_int(&a, "tokens", &N) || cli_int(&a, "windows", &K) || cli_int(&a, "ascent-steps", &asteps) ||
        cli_int(&a, "power-iters", &piters) || (cli_has(&a, "gram-iters") && cli_int(&a, "gram-iters", &gi)))
        return 2;
    {
        int trc = cli_apply_threads(&a, C);
        if (trc) return trc;
    }
    if (K < 1 || asteps < 0 || piters < 0 || piters > 100000)
        return cli_error(C, "--windows must be >= 1, --ascent-steps >= 0, --power-iters in [0, 100000]");
    if (gi < 1 || gi > 30) return cli_error(C, "--gram-iters must be in [1, 30], got %ld", gi);
    lipt_error err = {0};
    lipt_model m;
    lipt_vocab vocab;
    int64_t step;
    if (run_load_model(cli_str(&a, "ckpt"), &m, &vocab, &step, &err) != LIPT_OK) return cli_fail(C, &err);
    const lipt_config *cfg = &m.cfg;
    const int L = cfg->n_layers, D = cfg->d_model;
    int rc = 0;
    lipt_dataset ds;
    int have_ds = 0;
    branch_report *rep = NULL;
    if (N < 1 || N > cfg->seq_len) { rc = cli_error(C, "--tokens must be in [1, seq_len = %d], got %ld", cfg->seq_len, N); goto out; }
    if ((size_t)N * D > 8192) { rc = cli_error(C, "--tokens %ld x d_model %d = %ld Jacobian rows: at most 8192 (use fewer tokens)", N, D, N * D); goto out; }
    if (run_load_corpus(cli_str(&a, "ckpt"), cli_str(&a, "data"), cli_str(&a, "data-split"), &vocab,
                        0, &ds, &err) != LIPT_OK) { rc = cli_fail(C, &err); goto out; }
    have_ds = 1;
    const char *sn = cli_str(&a, "split");
    int split = cli_split_index(sn);
    if (split < 0) { rc = cli_error(C, "--split must be train, valid or test, got '%s'", sn); goto out; }
    if (ds.len[split] < (size_t)(N * K)) { rc = cli_error(C, "the %s split is too short for %ld windows of %ld", sn, K, N); goto out; }

    rep = calloc((size_t)(2 * L > 0 ? 2 * L : 1), sizeof *rep);
    for (int k = 0; k < 2 * L; k++) {
        branch_report *r = &rep[k];
        r->cert = r->cert_tokens = r->ub_seq = r->ub_tokens = r->ub_inf = r->ub_2 = r->factor = r->factor2 = NAN;
        r->sig[0] = r->sig[1] = r->sig[2] = r->sig[3] = NAN;
        r->meas = r->meas_upper = r->meas_inf = r->meas_2 = r->ascent = NAN;
    }
    /* the power vectors only steer gradients; run some rounds so the ffn's gradient directions are current (their
     * values never enter a certificate) */
    lipt_model_refresh_norms(&m, (int)piters);
    /* the report's spectral norms: gi Gram squarings, after a Cholesky-verified bound when the model uses those */
    const int garg = (int)gi | (lipt_config_gram_arg(cfg) & LIPT_SPECTRAL_CHOLESKY);
    if (m.invertible) certify(&m, (int)N, garg, rep);
    else bounds_plain(&m, (int)N, garg, rep);
    rc = measure(&m, &ds, split, N, K, asteps, rep, C);
    if (rc == 0) {
        int certified = 1, first_bad = -1;
        if (m.invertible)
            for (int k = 0; k < 2 * L; k++)
                if (!(rep[k].cert < 1.0)) {
                    certified = 0;
                    if (first_bad < 0) first_bad = k;
                }
        if (cli_has(&a, "json")) print_json(&a, &m, N, K, (int)gi, rep, certified, first_bad);
        else {
            print_text(&a, &m, N, K, (int)gi, sn, rep, asteps);
            if (m.invertible) {
                double worst = 0;
                for (int k = 0; k < 2 * L; k++) worst = fmax(worst, rep[k].cert);
                if (certified && cfg->coupling) print_coupling(&m, rep, worst);
                else if (certified)
                    printf("certified: every branch has Lipschitz constant <= %.6f < 1 in its norm (c = %g): every block "
                           "is invertible by fixed-point iteration\n", worst, (double)cfg->c);
                else
                    printf("NOT certified: layer %d %s has certificate %.6f >= 1\n", first_bad / 2,
                           first_bad % 2 ? "ffn" : "attn", rep[first_bad].cert);
            }
        }
        if (m.invertible && !certified) rc = 1;
    }
out:
    free(rep);
    if (have_ds) lipt_dataset_free(&ds);
    lipt_model_free(&m);
    return rc;
}
