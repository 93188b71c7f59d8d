/* attention_l2 and attention_l2_tied: forward against naive loops of SPEC §1 (logits -|q_i - k_j|²/s, tied values
 * Q_h W^{Q,h}ᵀ W^{V,h}/s and the equivalent P X A_h W^{V,h}), tied = untied with k = q and those values, backward
 * against finite differences (odd D and H, T = 1, B > 1, aliased inputs, input subsets), exact causality. */
#include "attention_ref.h"

/* Tied values in double: V_h = Q_h M_h, M_h[a][c] = Σ_r W^Q[r][h d + a] W^V[r][h d + c] / s. */
static void ref_tied_values(const float *q, const float *wq, const float *wv, int B, int T, int D, int H, double *V) {
    const int d = D / H;
    const double s = sqrt((double)d);
    double *M = malloc((size_t)d * d * sizeof(double));
    for (int h = 0; h < H; h++) {
        for (int a = 0; a < d; a++)
            for (int c = 0; c < d; c++) {
                double m = 0;
                for (int r = 0; r < D; r++) m += (double)wq[(size_t)r * D + h * d + a] * wv[(size_t)r * D + h * d + c];
                M[a * d + c] = m / s;
            }
        for (int b = 0; b < B; b++)
            for (int t = 0; t < T; t++)
                for (int c = 0; c < d; c++) {
                    double x = 0;
                    for (int a = 0; a < d; a++) x += (double)q[IDX(b, t, h * d + a)] * M[a * d + c];
                    V[IDX(b, t, h * d + c)] = x;
                }
    }
    free(M);
}

START_TEST(test_l2_forward) {
    const double worst = attn_check_forward(lipt_attention_l2, 1, "l2");
    printf("attention_l2 (untied) forward: worst rel err %.3e (tol 1e-5)\n", worst);
}
END_TEST

/* Tied forward against (a) the SPEC formula from q, wq, wv, (b) the untied op with k = q and v = Q_h M_h,
 * (c) P X A_h W^{V,h} from X with q = X W^Q. */
START_TEST(test_tied_forward) {
    double worst_ref = 0, worst_untied = 0, worst_x = 0;
    for (size_t si = 0; si < NSH(fwd_shapes); si++)
        for (int causal = 0; causal < 2; causal++)
            for (uint64_t seed = 1; seed <= 2; seed++) {
                const int B = fwd_shapes[si][0], T = fwd_shapes[si][1], D = fwd_shapes[si][2], H = fwd_shapes[si][3];
                const int d = D / H;
                lipt_rng rng;
                lipt_rng_seed(&rng, seed * 53 + si);
                const int sh[3] = {B, T, D}, wsh[2] = {D, D};
                lipt_tensor *X = tu_tensor(&rng, 3, sh, 1.0f, 0);
                lipt_tensor *wq = tu_tensor(&rng, 2, wsh, wq_std(D), 1), *wv = tu_tensor(&rng, 2, wsh, 1.0f, 1);
                lipt_tensor *q = tu_tensor(NULL, 3, sh, 0.0f, 1);
                const size_t n = q->numel;
                for (int b = 0; b < B; b++)
                    for (int t = 0; t < T; t++)
                        for (int c = 0; c < D; c++) {
                            double x = 0;
                            for (int r = 0; r < D; r++) x += (double)X->data[IDX(b, t, r)] * wq->data[(size_t)r * D + c];
                            q->data[IDX(b, t, c)] = (float)x;
                        }
                double *V = malloc(n * sizeof(double)), *ref = malloc(n * sizeof(double));
                ref_tied_values(q->data, wq->data, wv->data, B, T, D, H, V);
                attn_ref(q->data, q->data, V, B, T, D, H, causal, 1, ref);
                lipt_ctx ctx;
                lipt_ctx_init(&ctx, 1 << 16, 1);
                lipt_tensor *o = lipt_attention_l2_tied(&ctx, q, wq, wv, H, causal);
                ck_assert_int_eq(o->shape[0], B);
                ck_assert_int_eq(o->shape[1], T);
                ck_assert_int_eq(o->shape[2], D);
                double e = tu_max_rel_err(o->data, ref, n, 1e-6);
                ck_assert_msg(e < 1e-5, "tied forward B%d T%d D%d H%d causal%d: rel err %.3e", B, T, D, H, causal, e);
                if (e > worst_ref) worst_ref = e;
                lipt_no_grad_push(&ctx);
                lipt_tensor *o2 = lipt_attention_l2_tied(&ctx, q, wq, wv, H, causal);
                lipt_no_grad_pop(&ctx);
                ck_assert_msg(memcmp(o->data, o2->data, n * sizeof(float)) == 0, "no-grad tied forward differs");

                /* (b) untied op with k = q and the tied values */
                lipt_tensor *vt = tu_tensor(NULL, 3, sh, 0.0f, 0);
                for (size_t i = 0; i < n; i++) vt->data[i] = (float)V[i];
                lipt_tensor *ou = lipt_attention_l2(&ctx, q, q, vt, H, causal);
                e = tu_max_rel_err_f(o->data, ou->data, n, 1e-6);
                ck_assert_msg(e < 1e-5, "tied vs untied(k=q, v=QM) B%d T%d D%d H%d causal%d: %.3e", B, T, D, H,
                              causal, e);
                if (e > worst_untied) worst_untied = e;

                /* (c) f^h(X) = P X A_h W^{V,h} with A_h = W^{Q,h} W^{Q,h}ᵀ / s formed explicitly (D×D) */
                double *XA = malloc(n * sizeof(double)), *A = malloc((size_t)D * D * sizeof(double));
                double *xa = malloc((size_t)D * sizeof(double));
                const double s = sqrt((double)d);
                for (int h = 0; h < H; h++) {
                    for (int r = 0; r < D; r++)
                        for (int u = 0; u < D; u++) {
                            double acc = 0;
                            for (int a = 0; a < d; a++)
                                acc += (double)wq->data[(size_t)r * D + h * d + a] * wq->data[(size_t)u * D + h * d + a];
                            A[(size_t)r * D + u] = acc / s;
                        }
                    for (int b = 0; b < B; b++)
                        for (int t = 0; t < T; t++) {
                            for (int u = 0; u < D; u++) {
                                double acc = 0;
                                for (int r = 0; r < D; r++) acc += (double)X->data[IDX(b, t, r)] * A[(size_t)r * D + u];
                                xa[u] = acc;
                            }
                            for (int c = 0; c < d; c++) {
                                double acc = 0;
                                for (int u = 0; u < D; u++) acc += xa[u] * wv->data[(size_t)u * D + h * d + c];
                                XA[IDX(b, t, h * d + c)] = acc;
                            }
                        }
                }
                /* P from the float q the op saw (q = X W^Q rounded), values from X directly */
                double *refx = malloc(n * sizeof(double));
                attn_ref(q->data, q->data, XA, B, T, D, H, causal, 1, refx);
                free(A);
                free(xa);
                e = tu_max_rel_err(o->data, refx, n, 1e-6);
                ck_assert_msg(e < 1e-5, "tied vs P X A W^V B%d T%d D%d H%d causal%d: %.3e", B, T, D, H, causal, e);
                if (e > worst_x) worst_x = e;
                free(XA);
                free(refx);
                lipt_ctx_free(&ctx);
                free(V);
                free(ref);
                tu_free(vt);
                tu_free(X);
                tu_free(q);
                tu_free(wq);
                tu_free(wv);
            }
    printf("attention_l2_tied forward: worst rel err %.3e vs SPEC formula, %.3e vs untied(k=q, v=QM), %.3e vs "
           "P X A W^V (tol 1e-5)\n",
           worst_ref, worst_untied, worst_x);
}
END_TEST

START_TEST(test_l2_gradcheck) {
    double worst_alias;
    const double worst = attn_check_grad(lipt_attention_l2, 0, 97, "attention_l2", attn_build_kq, "k=q",
                                         (const int[]){0, 2}, 2, &worst_alias);
    printf("attention_l2 gradcheck: worst rel err %.3e, with k aliasing q %.3e (tol 5e-3)\n", worst, worst_alias);
}
END_TEST

START_TEST(test_tied_gradcheck) {
    const double worst =
        attn_check_grad(lipt_attention_l2_tied, 1, 131, "attention_l2_tied", NULL, NULL, NULL, 0, NULL);
    printf("attention_l2_tied gradcheck: worst rel err %.3e (tol 5e-3)\n", worst);
}
END_TEST

/* Only some inputs need a gradient (the others get lipt_grad_of = NULL and are skipped). */
START_TEST(test_grad_subsets) {
    double worst = 0;
    for (int tied = 0; tied < 2; tied++)
        for (int mask = 1; mask < 7; mask++)
            for (int causal = 0; causal < 2; causal++) {
                lipt_rng rng;
                lipt_rng_seed(&rng, 700 + mask + 10 * tied);
                lipt_tensor *in[3];
                attn_inputs(&rng, tied, (const int[]){2, 6, 6}, mask, in);
                attn_args a = {tied ? lipt_attention_l2_tied : lipt_attention_l2, 3, causal};
                char label[96];
                snprintf(label, sizeof label, "attention_%s grads %d%d%d causal%d", tied ? "l2_tied" : "l2",
                         mask & 1, (mask >> 1) & 1, (mask >> 2) & 1, causal);
                const double g =
                    tu_gradcheck(label, attn_build, &a, in, 3, &(tu_gradcheck_opts){.seed = 9, .tol = 5e-3});
                if (g > worst) worst = g;
                for (int i = 0; i < 3; i++) tu_free(in[i]);
            }
    printf("attention_l2 / l2_tied subset gradcheck: worst rel err %.3e (tol 5e-3)\n", worst);
}
END_TEST

/* Backward accumulates: with gradients already holding values, it adds the same amount as from zero. */
START_TEST(test_accumulates) {
    double worst = 0;
    for (int tied = 0; tied < 2; tied++)
        for (int causal = 0; causal < 2; causal++) {
            lipt_rng rng;
            lipt_rng_seed(&rng, 99 + causal + 2 * tied);
            lipt_tensor *in[3];
            attn_inputs(&rng, tied, (const int[]){2, 130, 6}, 7, in);
            const double e = attn_check_accumulates(tied ? lipt_attention_l2_tied : lipt_attention_l2, in, causal,
                                                    &rng, tied ? "tied " : "untied ");
            if (e > worst) worst = e;
            for (int i = 0; i < 3; i++) tu_free(in[i]);
        }
    printf("attention_l2 / l2_tied accumulation into existing gradients: worst rel err %.3e\n", worst);
}
END_TEST

/* Causal: changing rows t > t0 of the [B,T,D] inputs leaves output rows <= t0 bit-identical, and a loss on
 * rows <= t0 gives exactly zero gradient at rows > t0 (the weights of the tied op keep a gradient). */
START_TEST(test_causal_future) {
    const int shapes[][5] = {{2, 7, 6, 3, 3}, {1, 130, 8, 2, 70}, {1, 5, 5, 1, 0}, {2, 9, 4, 4, 8}}; /* B T D H t0 */
    for (int tied = 0; tied < 2; tied++)
        for (size_t si = 0; si < NSH(shapes); si++) {
            lipt_rng rng;
            lipt_rng_seed(&rng, 77 + si);
            lipt_tensor *in[3];
            attn_inputs(&rng, tied, shapes[si], 7, in);
            attn_check_causal_future(tied ? lipt_attention_l2_tied : lipt_attention_l2, in, tied, shapes[si][3],
                                     shapes[si][4], &rng, tied ? "tied: " : "untied: ");
            for (int i = 0; i < 3; i++) tu_free(in[i]);
        }
    printf("attention_l2 / l2_tied causal: future inputs change no earlier output bit and get exactly zero "
           "gradient\n");
}
END_TEST

/* One thread and two threads (the parallel (batch, head) loop): the same bits, forward and backward. */
START_TEST(test_threads) {
    double worst = 0;
    for (int tied = 0; tied < 2; tied++) {
        lipt_rng rng;
        lipt_rng_seed(&rng, 31337 + tied);
        lipt_tensor *in[3];
        attn_inputs(&rng, tied, (const int[]){3, 40, 24}, 7, in);
        const double e = attn_check_threads(tied ? lipt_attention_l2_tied : lipt_attention_l2, in,
                                            tied ? "tied: " : "untied: ");
        if (e > worst) worst = e;
        for (int i = 0; i < 3; i++) tu_free(in[i]);
    }
    lipt_set_threads(2);
    printf("attention_l2 / l2_tied threads 1 vs 2: the same bits (worst rel diff %.3e)\n", worst);
}
END_TEST

/* Heads as wide as the model's (d = 32, 64, 128: the float32 products take src/kernels/gemm_small.c's kernels, which
 * the small shapes above never reach): forward against the SPEC formula, gradcheck, and 1 vs 2 threads bit for bit. */
START_TEST(test_tied_wide_heads) {
    static const int shapes[][4] = {{2, 33, 64, 2}, {1, 19, 128, 2}, {1, 9, 256, 2}};
    double worst_fwd = 0, worst_grad = 0;
    for (size_t si = 0; si < NSH(shapes); si++) {
        const int B = shapes[si][0], T = shapes[si][1], D = shapes[si][2], H = shapes[si][3];
        lipt_rng rng;
        lipt_rng_seed(&rng, 4242 + si);
        lipt_tensor *in[3];
        attn_inputs(&rng, 1, (const int[]){B, T, D}, 7, in);
        const size_t n = in[0]->numel;
        double *V = malloc(n * sizeof(double)), *ref = malloc(n * sizeof(double));
        ref_tied_values(in[0]->data, in[1]->data, in[2]->data, B, T, D, H, V);
        attn_ref(in[0]->data, in[0]->data, V, B, T, D, H, 1, 1, ref);
        float *out[2], *grads[2][3];
        for (int th = 1; th <= 2; th++) {
            lipt_set_threads(th);
            lipt_ctx ctx;
            lipt_ctx_init(&ctx, 1 << 20, 1);
            for (int i = 0; i < 3; i++) in[i]->grad = NULL; /* the gradients live in ctx: fresh ones per run */
            lipt_tensor *o = lipt_attention_l2_tied(&ctx, in[0], in[1], in[2], H, 1);
            const double e = tu_max_rel_err(o->data, ref, n, 1e-6);
            ck_assert_msg(e < 1e-5, "tied forward B%d T%d D%d H%d: rel err %.3e", B, T, D, H, e);
            if (e > worst_fwd) worst_fwd = e;
            out[th - 1] = malloc(n * sizeof(float));
            memcpy(out[th - 1], o->data, n * sizeof(float));
            float *seed = malloc(n * sizeof(float));
            for (size_t i = 0; i < n; i++) seed[i] = (float)ref[i] * 0.5f + 0.1f;
            lipt_backward_seeded(&ctx, o, seed);
            for (int i = 0; i < 3; i++) {
                grads[th - 1][i] = malloc(in[i]->numel * sizeof(float));
                memcpy(grads[th - 1][i], lipt_grad_of(&ctx, in[i]), in[i]->numel * sizeof(float));
            }
            free(seed);
            lipt_ctx_free(&ctx);
            for (int i = 0; i < 3; i++) in[i]->grad = NULL;
        }
        lipt_set_threads(2);
        ck_assert_msg(memcmp(out[0], out[1], n * sizeof(float)) == 0, "D%d: forward differs on 1 and 2 threads", D);
        for (int i = 0; i < 3; i++)
            ck_assert_msg(memcmp(grads[0][i], grads[1][i], in[i]->numel * sizeof(float)) == 0,
                          "D%d: gradient of input %d differs on 1 and 2 threads", D, i);
        attn_args a = {lipt_attention_l2_tied, H, 1};
        char label[96];
        snprintf(label, sizeof label, "attention_l2_tied wide B%d T%d D%d H%d", B, T, D, H);
        const double g = tu_gradcheck(label, attn_build, &a, in, 3, &(tu_gradcheck_opts){.seed = 3, .tol = 5e-3});
        if (g > worst_grad) worst_grad = g;
        for (int th = 0; th < 2; th++) {
            free(out[th]);
            for (int i = 0; i < 3; i++) free(grads[th][i]);
        }
        for (int i = 0; i < 3; i++) tu_free(in[i]);
        free(V), free(ref);
    }
    printf("attention_l2_tied wide heads: forward worst rel err %.3e (tol 1e-5), gradcheck %.3e (tol 5e-3)\n",
           worst_fwd, worst_grad);
}
END_TEST

int main(void) {
    lipt_set_threads(2);
    Suite *s = suite_create("ops_attention_l2");
    TCase *tc = tcase_create("attention_l2");
    tcase_set_timeout(tc, 120);
    tcase_add_test(tc, test_l2_forward);
    tcase_add_test(tc, test_tied_forward);
    tcase_add_test(tc, test_l2_gradcheck);
    tcase_add_test(tc, test_tied_gradcheck);
    tcase_add_test(tc, test_grad_subsets);
    tcase_add_test(tc, test_accumulates);
    tcase_add_test(tc, test_causal_future);
    tcase_add_test(tc, test_threads);
    tcase_add_test(tc, test_tied_wide_heads);
    suite_add_tcase(s, tc);
    return tu_run_suite(s);
}
