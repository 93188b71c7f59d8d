/* Certificates are proofs at every step (issue "sound certificates"): small invertible models trained a few hundred
 * Adam steps with power_iters = 1, and after EVERY step the exact largest singular value (one-sided Jacobi SVD in
 * double, here) of every normalised feed-forward weight is <= c; at the end the exact Jacobian norm of every branch
 * at data inputs and at gradient-ascended inputs is <= its certificate (the bound the forward pass divides by, times
 * the factor). The same run also measures what the previous rule (divide by the power-iteration estimate uᵀWv)
 * would have given: its normalised weights exceed c, which is the failure this test exists to catch. */
#include "testutil.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "lipt/bounds.h"
#include "lipt/model.h"
#include "lipt/optim.h"
#include "lipt/jacobian.h"
#include "lipt/train.h"

/* Largest singular value of a row-major R×C float matrix scaled by f, by one-sided Jacobi on the columns (double;
 * converged to ~1e-15 relative). */
static double exact_sigma(const float *w, int R, int C, double f) {
    const int n = R < C ? R : C, m = R < C ? C : R; /* work on the tall orientation: columns of length m */
    double *A = malloc((size_t)m * n * sizeof(double));
    for (int i = 0; i < R; i++)
        for (int j = 0; j < C; j++) {
            const double x = (double)w[(size_t)i * C + j] * f;
            if (R >= C) A[(size_t)j * m + i] = x; /* column j, length R = m */
            else A[(size_t)i * m + j] = x;        /* the transpose: column i, length C = m */
        }
    for (int sweep = 0; sweep < 60; sweep++) {
        double off = 0;
        for (int p = 0; p < n; p++)
            for (int q = p + 1; q < n; q++) {
                double *a = A + (size_t)p * m, *b = A + (size_t)q * m, al = 0, be = 0, ga = 0;
                for (int k = 0; k < m; k++) al += a[k] * a[k], be += b[k] * b[k], ga += a[k] * b[k];
                if (fabs(ga) <= 1e-300 || fabs(ga) <= 1e-16 * sqrt(al * be)) continue;
                off = fmax(off, fabs(ga) / sqrt(al * be));
                const double zeta = (be - al) / (2 * ga);
                const double t = (zeta >= 0 ? 1.0 : -1.0) / (fabs(zeta) + sqrt(1 + zeta * zeta));
                const double c = 1 / sqrt(1 + t * t), s = c * t;
                for (int k = 0; k < m; k++) {
                    const double x = a[k], y = b[k];
                    a[k] = c * x - s * y;
                    b[k] = s * x + c * y;
                }
            }
        if (off < 1e-15) break;
    }
    double best = 0;
    for (int p = 0; p < n; p++) {
        double s = 0;
        for (int k = 0; k < m; k++) s += A[(size_t)p * m + k] * A[(size_t)p * m + k];
        best = fmax(best, sqrt(s));
    }
    free(A);
    return best;
}

/* Tokens of a seeded order-1 Markov chain (a learnable, non-trivial corpus without files). */
static void markov(lipt_rng *r, int V, int n, int *out) {
    int cur = 0;
    for (int i = 0; i < n; i++) {
        const double u = lipt_rng_uniform(r);
        cur = u < 0.6 ? (cur * 7 + 3) % V : u < 0.85 ? (cur + 1) % V : (int)(lipt_rng_uniform(r) * V) % V;
        out[i] = cur;
    }
}

typedef struct {
    double worst_new;   /* max over steps and weights of sigma_exact(W f) / c with the certified factor */
    double worst_old;   /* the same with the power-iteration factor 1/max(1, uᵀWv/c) */
    double worst_jac;   /* max measured Jacobian norm / certificate at the end */
} cert_result;

static double power_sigma(const lipt_tensor *w, const float *u, const float *v) {
    const int R = w->shape[0], C = w->shape[1];
    double s = 0;
    for (int i = 0; i < R; i++) {
        double r = 0;
        for (int j = 0; j < C; j++) r += (double)w->data[(size_t)i * C + j] * v[j];
        s += (double)u[i] * r;
    }
    return s;
}

/* Jacobian norms of every branch at x (the branch inputs of a data window) and after ∞-norm ascent, against the
 * certificate: attention UB(N)·factor in its norm, feed-forward σ(W1)f1 σ(W2)f2 (per token 2-norm: the sequence
 * 2-norm, ∞,2-norm). Returns the worst measured / certificate. */
static double check_jacobians(lipt_model *m, const int *ids, int N) {
    const lipt_config *cfg = &m->cfg;
    const int D = cfg->d_model, L = cfg->n_layers;
    const size_t n = (size_t)N * D;
    lipt_ctx ctx;
    lipt_ctx_init(&ctx, 1 << 20, 1);
    float *x = malloc(n * sizeof(float) * (size_t)(2 * L));
    double *J = malloc(n * n * sizeof(double));
    lipt_error ierr = {0};
    ck_assert_msg(lipt_model_branch_inputs(&ctx, m, ids, N, x, &ierr) == LIPT_OK, "branch inputs: %s", ierr.msg);
    lipt_no_grad_push(&ctx); /* the certificates and Jacobians below in no-grad mode */
    double worst = 0;
    for (int k = 0; k < 2 * L; k++) {
        const int l = k / 2, which = k % 2;
        lipt_layer_lipschitz ll;
        lipt_model_layer_lipschitz(m, l, 0, &ll);
        double cert;
        const char *norm;
        if (which == LIPT_BRANCH_FFN) {
            cert = ll.sigma1 * ll.ffn_factor1 * ll.sigma2 * ll.ffn_factor2;
            norm = "2";
        } else {
            cert = lipt_model_attn_bound(&ctx, m, l, N, 0)->data[0] * ll.attn_factor;
            norm = lipt_lipnorm_name(cfg->lip_norm);
            lipt_ctx_reset(&ctx);
        }
        lipt_branch_ref ref = {m, l, which, NULL};
        lipt_jac_map jm = {lipt_model_branch_fn, &ref, 3, {1, N, D, 0}, 0};
        float *pts[2] = {x + (size_t)k * n, malloc(n * sizeof(float))};
        /* adversarial input: ∞-norm ascent from the data point (the branch is the same map in every norm) */
        lipt_ascent_opts ao = lipt_ascent_defaults();
        ao.starts = 1;
        ao.steps = 40;
        ao.x0 = pts[0];
        ao.max_exact = n;
        lipt_ascent_result ar;
        memset(&ar, 0, sizeof ar);
        lipt_error err = {0};
        ck_assert_msg(lipt_ascent_jac_inf(&jm, &ao, pts[1], &ar, &err) == LIPT_OK, "ascent: %s", err.msg);
        for (int p = 0; p < 2; p++) {
            ck_assert_msg(lipt_jacobian(&jm, pts[p], J, &err) == LIPT_OK, "jacobian: %s", err.msg);
            double meas;
            if (strcmp(norm, "inf") == 0) meas = lipt_matrix_norm_inf(J, n, n);
            else if (strcmp(norm, "inf2") == 0) meas = lipt_matrix_norm_inf2(J, (size_t)N, (size_t)D, NULL);
            else meas = lipt_matrix_norm_2(J, n, n, NULL, NULL);
            if (which == LIPT_BRANCH_FFN) /* per-token map: also its ∞,2 norm */
                meas = fmax(meas, lipt_matrix_norm_inf2(J, (size_t)N, (size_t)D, NULL));
            ck_assert_msg(meas <= cert * (1 + 1e-5), "layer %d %s at %s input: measured %.6g > certificate %.6g", l,
                          which ? "ffn" : "attn", p ? "ascended" : "data", meas, cert);
            ck_assert_msg(cert < 1.0, "layer %d %s: certificate %.6g not < 1", l, which ? "ffn" : "attn", cert);
            worst = fmax(worst, meas / cert);
        }
        free(pts[1]);
    }
    lipt_no_grad_pop(&ctx);
    free(x);
    free(J);
    lipt_ctx_free(&ctx);
    return worst;
}

static cert_result train_and_check(lipt_attn_kind attn, lipt_lipnorm_kind ln, int actnorm, lipt_spectral_bound_kind sb,
                                   int steps, uint64_t seed) {
    lipt_config cfg;
    lipt_config_default(&cfg);
    cfg.vocab_size = 13;
    cfg.d_model = 16;
    cfg.n_heads = 2;
    cfg.d_ff = 40;
    cfg.n_layers = 2;
    cfg.seq_len = 8;
    cfg.attention = attn;
    cfg.ffn = LIPT_FFN_CONTRACTIVE;
    cfg.activation = LIPT_ACT_LIPSWISH;
    cfg.lip_norm = ln;
    cfg.actnorm = actnorm;
    cfg.spectral_bound = sb;
    cfg.power_iters = 1;
    cfg.init_seed = seed;
    lipt_model m;
    lipt_error err = {0};
    ck_assert_msg(lipt_model_init(&m, &cfg, &err) == LIPT_OK, "init: %s", err.msg);
    lipt_adamw_config ac = lipt_adamw_defaults();
    ac.lr = 1e-2; /* fast-moving weights: what makes a lagging power iteration fall short of sigma */
    ac.beta2 = 0.98;
    ac.weight_decay = 0;
    lipt_adamw opt;
    lipt_adamw_init(&opt, &ac);
    lipt_ctx ctx;
    lipt_ctx_init(&ctx, 1 << 22, seed);
    ctx.training = 1;
    lipt_rng data;
    lipt_rng_seed(&data, seed + 99);
    const int B = 8, T = cfg.seq_len;
    int *tok = malloc(sizeof(int) * (size_t)B * (T + 1));
    int ids[64], tgt[64];
    cert_result res = {0, 0, 0};
    const double c = cfg.c;
    double first_loss = 0, last_loss = 0;
    for (int s = 0; s < steps; s++) {
        markov(&data, cfg.vocab_size, B * (T + 1), tok);
        for (int b = 0; b < B; b++)
            for (int t = 0; t < T; t++) ids[b * T + t] = tok[b * (T + 1) + t], tgt[b * T + t] = tok[b * (T + 1) + t + 1];
        lipt_tensor *loss;
        ck_assert(lipt_model_forward(&ctx, &m, ids, B, T, tgt, NULL, &loss, &err) == LIPT_OK);
        if (s == 0) first_loss = loss->data[0];
        last_loss = loss->data[0];
        lipt_params_zero_grad(&m.params);
        lipt_backward(&ctx, loss);
        lipt_clip_grad_norm(&m.params, 1.0);
        lipt_adamw_step(&opt, &m.params);
        lipt_ctx_reset(&ctx);
        /* the weights just moved: the next forward divides by factors of these weights. Check them BEFORE the
         * refresh, i.e. with power vectors one step stale, as a forward pass right after a step sees them */
        for (int l = 0; l < cfg.n_layers; l++) {
            lipt_layer *Ly = &m.layers[l];
            lipt_layer_lipschitz ll;
            lipt_model_layer_lipschitz(&m, l, 0, &ll);
            const lipt_tensor *w[2] = {Ly->w1, Ly->w2};
            const double f[2] = {ll.ffn_factor1, ll.ffn_factor2};
            const float *u[2] = {Ly->sn1_u->data, Ly->sn2_u->data}, *v[2] = {Ly->sn1_v->data, Ly->sn2_v->data};
            for (int k = 0; k < 2; k++) {
                const double se = exact_sigma(w[k]->data, w[k]->shape[0], w[k]->shape[1], 1.0);
                const double sn = se * f[k];
                ck_assert_msg(sn <= c * (1 + 1e-6), "step %d layer %d W%d: exact sigma of the normalised weight %.7f > c",
                              s + 1, l, k + 1, sn);
                res.worst_new = fmax(res.worst_new, sn / c);
                const double sp = power_sigma(w[k], u[k], v[k]);
                const double f_old = 1.0 / fmax(1.0, sp / c);
                res.worst_old = fmax(res.worst_old, se * f_old / c);
            }
        }
        lipt_model_refresh_norms(&m, cfg.power_iters);
    }
    ck_assert_msg(last_loss < first_loss - 0.3, "the model must learn for the test to mean anything: %.3f -> %.3f",
                  first_loss, last_loss);
    markov(&data, cfg.vocab_size, T, ids);
    res.worst_jac = check_jacobians(&m, ids, T);
    free(tok);
    lipt_ctx_free(&ctx);
    lipt_model_free(&m);
    return res;
}

START_TEST(test_certificate_every_step) {
    struct { lipt_attn_kind a; lipt_lipnorm_kind n; int actnorm; lipt_spectral_bound_kind sb; const char *name; } cases[] = {
        {LIPT_ATTN_CONTRACTIVE_L2, LIPT_LIPNORM_INF, 0, LIPT_SPECTRAL_BOUND_GRAM, "contractive-l2 inf"},
        {LIPT_ATTN_CONTRACTIVE_L2, LIPT_LIPNORM_2, 0, LIPT_SPECTRAL_BOUND_GRAM, "contractive-l2 2"},
        {LIPT_ATTN_CLIPPED_DP, LIPT_LIPNORM_INF2, 1, LIPT_SPECTRAL_BOUND_GRAM, "clipped-dp inf2 + actnorm"},
        /* the Cholesky-verified spectral norms: tight (sigma(W f) / c near 1 when a normaliser is active), still <= */
        {LIPT_ATTN_CONTRACTIVE_L2, LIPT_LIPNORM_2, 0, LIPT_SPECTRAL_BOUND_CHOLESKY, "contractive-l2 2, cholesky"},
        {LIPT_ATTN_CLIPPED_DP, LIPT_LIPNORM_INF2, 1, LIPT_SPECTRAL_BOUND_CHOLESKY, "clipped-dp inf2, cholesky"},
    };
    double worst_old = 0;
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        cert_result r = train_and_check(cases[i].a, cases[i].n, cases[i].actnorm, cases[i].sb, 300, 7 + i);
        printf("%-28s 300 steps, lr 1e-2, power_iters 1: max exact sigma(W f)/c = %.9f (certified factor), "
               "%.6f (power-iteration factor, the old rule); max measured Jacobian / certificate %.4f\n",
               cases[i].name, r.worst_new, r.worst_old, r.worst_jac);
        worst_old = fmax(worst_old, r.worst_old);
    }
    /* the test has teeth: the old rule breaks the guarantee on these runs */
    ck_assert_msg(worst_old > 1.0, "the power-iteration rule stayed within c (%.6f): the runs do not stress it", worst_old);
}
END_TEST

/* uᵀ W_b v for column block b of a row-major [R, C] matrix with cb columns per block, in double. */
static double block_form(const float *w, int R, int C, int b, int cb, const float *u, const float *v) {
    double q = 0;
    for (int i = 0; i < R; i++)
        for (int j = 0; j < cb; j++) q += (double)u[i] * w[(size_t)i * C + b * cb + j] * v[j];
    return q;
}

/* The training step's vectors with spectral_bound = cholesky (lipt_spectral_req.steer): from random vectors, one
 * lipt_train_step leaves every certified block's (u, v) at its top singular pair of the weights the step certified
 * (u_bᵀ W_b v_b within 1e-6 of the exact sigma, both unit), W1, W2 and the attention's W^Q, W^K, W^V blocks and
 * W^O alike. Control: with spectral_bound = gram the one power round after the step leaves them far from it. */
START_TEST(test_certificate_steered_vectors) {
    double worst[2] = {0, 0};
    for (int sb = 0; sb < 2; sb++) {
        lipt_config cfg;
        lipt_config_default(&cfg);
        cfg.vocab_size = 13, cfg.d_model = 16, cfg.n_heads = 2, cfg.d_ff = 40, cfg.n_layers = 2, cfg.seq_len = 8;
        cfg.attention = LIPT_ATTN_CLIPPED_DP, cfg.ffn = LIPT_FFN_CONTRACTIVE, cfg.activation = LIPT_ACT_MAXMIN;
        cfg.lip_norm = LIPT_LIPNORM_INF2, cfg.power_iters = 1;
        cfg.spectral_bound = sb ? LIPT_SPECTRAL_BOUND_CHOLESKY : LIPT_SPECTRAL_BOUND_GRAM;
        lipt_model m;
        lipt_error err = {0};
        ck_assert_msg(lipt_model_init(&m, &cfg, &err) == LIPT_OK, "init: %s", err.msg);
        lipt_rng rng;
        lipt_rng_seed(&rng, 31);
        enum { NW = 6 };
        for (int l = 0; l < cfg.n_layers; l++) { /* random vectors: steering must not rely on converged ones */
            lipt_layer *L = &m.layers[l];
            lipt_tensor *vec[] = {L->sn1_u, L->sn1_v, L->sn2_u, L->sn2_v, L->bv[0], L->bv[1], L->bv[2], L->bv[3],
                                  L->bv[4], L->bv[5], L->bv[6], L->bv[7]};
            for (size_t k = 0; k < sizeof vec / sizeof vec[0]; k++) {
                ck_assert_msg(vec[k] != NULL, "layer %d vector %zu missing", l, k);
                for (size_t i = 0; i < vec[k]->numel; i++) vec[k]->data[i] = (float)lipt_rng_normal(&rng);
            }
        }
        /* the weights the step certifies (AdamW moves them afterwards) */
        float *before[2][NW];
        for (int l = 0; l < cfg.n_layers; l++) {
            lipt_layer *L = &m.layers[l];
            lipt_tensor *w[NW] = {L->w1, L->w2, L->wq, L->wk, L->wv, L->wo};
            for (int k = 0; k < NW; k++) {
                before[l][k] = malloc(sizeof(float) * w[k]->numel);
                memcpy(before[l][k], w[k]->data, sizeof(float) * w[k]->numel);
            }
        }
        lipt_adamw_config ac = lipt_adamw_defaults();
        lipt_adamw opt;
        lipt_adamw_init(&opt, &ac);
        lipt_ctx ctx;
        lipt_ctx_init(&ctx, 1 << 22, 5);
        const int B = 4, T = cfg.seq_len;
        int tok[4 * 9], ids[32], tgt[32];
        markov(&rng, cfg.vocab_size, B * (T + 1), tok);
        for (int b = 0; b < B; b++)
            for (int t = 0; t < T; t++) ids[b * T + t] = tok[b * (T + 1) + t], tgt[b * T + t] = tok[b * (T + 1) + t + 1];
        const lipt_step_opts so = {1e-3, 1.0, cfg.power_iters, NULL, 0, 0, NULL, 0};
        lipt_step_result sr;
        ck_assert_msg(lipt_train_step(&ctx, &m, &opt, ids, tgt, B, T, &so, &sr, &err) == LIPT_OK, "step: %s", err.msg);
        for (int l = 0; l < cfg.n_layers; l++) {
            lipt_layer *L = &m.layers[l];
            lipt_tensor *w[NW] = {L->w1, L->w2, L->wq, L->wk, L->wv, L->wo};
            const float *u[NW] = {L->sn1_u->data, L->sn2_u->data, L->bv[0]->data, L->bv[6]->data, L->bv[2]->data,
                                  L->bv[4]->data};
            const float *v[NW] = {L->sn1_v->data, L->sn2_v->data, L->bv[1]->data, L->bv[7]->data, L->bv[3]->data,
                                  L->bv[5]->data};
            const int nb[NW] = {1, 1, cfg.n_heads, cfg.n_heads, cfg.n_heads, 1};
            for (int k = 0; k < NW; k++) {
                const int R = w[k]->shape[0], C = w[k]->shape[1], cb = C / nb[k];
                for (int b = 0; b < nb[k]; b++) {
                    float *blk = malloc(sizeof(float) * (size_t)R * cb);
                    for (int i = 0; i < R; i++) memcpy(blk + (size_t)i * cb, before[l][k] + (size_t)i * C + b * cb, sizeof(float) * cb);
                    const double se = exact_sigma(blk, R, cb, 1.0);
                    free(blk);
                    const float *ub = u[k] + (size_t)b * R, *vb = v[k] + (size_t)b * cb;
                    double nu = 0, nv = 0;
                    for (int i = 0; i < R; i++) nu += (double)ub[i] * ub[i];
                    for (int j = 0; j < cb; j++) nv += (double)vb[j] * vb[j];
                    const double rel = 1 - block_form(before[l][k], R, C, b, cb, ub, vb) / se;
                    worst[sb] = fmax(worst[sb], rel);
                    if (sb)
                        ck_assert_msg(rel <= 1e-6 && fabs(nu - 1) <= 1e-6 && fabs(nv - 1) <= 1e-6,
                                      "layer %d matrix %d block %d: u^T W v / sigma = 1 - %.3e, |u|^2 %.9f, |v|^2 %.9f",
                                      l, k, b, rel, nu, nv);
                }
                free(before[l][k]);
            }
        }
        lipt_ctx_free(&ctx);
        lipt_model_free(&m);
    }
    ck_assert_msg(worst[0] > 1e-3, "control: one power round from random vectors came within %.2e of sigma", worst[0]);
    printf("steered vectors after one training step: u^T W v within %.2e of the exact sigma (cholesky); %.2e after "
           "one power round (gram, the control)\n", worst[1], worst[0]);
}
END_TEST

int main(void) {
    Suite *s = suite_create("certificate");
    TCase *tc = tcase_create("all");
    tcase_set_timeout(tc, 600);
    tcase_add_test(tc, test_certificate_every_step);
    tcase_add_test(tc, test_certificate_steered_vectors);
    suite_add_tcase(s, tc);
    return tu_run_suite(s);
}
