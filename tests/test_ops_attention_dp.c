/* attention_dp: forward against a naive triple loop of SPEC §1 (causal and full), backward against finite
 * differences over shapes with odd D and H, T = 1 and B > 1, exact causality, large inputs, threads. */
#include "attention_ref.h"

START_TEST(test_dp_forward) {
    const double worst = attn_check_forward(lipt_attention_dp, 0, "dp");
    printf("attention_dp forward: worst rel err %.3e (tol 1e-5)\n", worst);
}
END_TEST

START_TEST(test_dp_gradcheck) {
    double worst_alias;
    const double worst = attn_check_grad(lipt_attention_dp, 0, 97, "attention_dp", attn_build_self, "q=k=v",
                                         (const int[]){0}, 1, &worst_alias);
    printf("attention_dp gradcheck: worst rel err %.3e, with q = k = v %.3e (tol 5e-3)\n", worst, worst_alias);
}
END_TEST

/* Only some inputs need a gradient: the others are skipped (lipt_grad_of gives NULL) and the rest stay right. */
START_TEST(test_dp_grad_subsets) {
    double worst = 0;
    for (int mask = 1; mask < 7; mask++)
        for (int causal = 0; causal < 2; causal++) {
            lipt_rng rng;
            lipt_rng_seed(&rng, 500 + mask);
            const int sh[3] = {2, 6, 6};
            lipt_tensor *in[3];
            attn_inputs(&rng, 0, sh, mask, in);
            attn_args a = {lipt_attention_dp, 3, causal};
            char label[96];
            snprintf(label, sizeof label, "attention_dp grads q%d k%d v%d causal%d", mask & 1, (mask >> 1) & 1,
                     (mask >> 2) & 1, causal);
            const double g = tu_gradcheck(label, attn_build, &a, in, 3, &(tu_gradcheck_opts){.seed = 9, .tol = 5e-3});
            if (g > worst) worst = g;
            for (int i = 0; i < 3; i++) tu_free(in[i]);
        }
    printf("attention_dp subset gradcheck: worst rel err %.3e (tol 5e-3)\n", worst);
}
END_TEST

/* Backward accumulates: with gradients already holding values, it adds the same amount as from zero. */
START_TEST(test_dp_accumulates) {
    double worst = 0;
    for (int causal = 0; causal < 2; causal++) {
        lipt_rng rng;
        lipt_rng_seed(&rng, 99 + causal);
        lipt_tensor *in[3];
        attn_inputs(&rng, 0, (const int[]){2, 130, 6}, 7, in);
        const double e = attn_check_accumulates(lipt_attention_dp, in, causal, &rng, "");
        if (e > worst) worst = e;
        for (int i = 0; i < 3; i++) tu_free(in[i]);
    }
    printf("attention_dp accumulation into existing gradients: worst rel err %.3e\n", worst);
}
END_TEST

/* Causal: changing rows t > t0 of q, k, v leaves output rows <= t0 bit-identical, and a loss on rows <= t0
 * gives exactly zero gradient at rows > t0. */
START_TEST(test_dp_causal_future) {
    const int shapes[][5] = {{2, 7, 6, 3, 3}, {1, 130, 8, 2, 70}, {1, 5, 5, 1, 0}, {2, 9, 4, 4, 8}}; /* B T D H t0 */
    for (size_t si = 0; si < NSH(shapes); si++) {
        lipt_rng rng;
        lipt_rng_seed(&rng, 77 + si);
        lipt_tensor *in[3];
        attn_inputs(&rng, 0, shapes[si], 7, in);
        attn_check_causal_future(lipt_attention_dp, in, 0, shapes[si][3], shapes[si][4], &rng, "");
        for (int i = 0; i < 3; i++) tu_free(in[i]);
    }
    printf("attention_dp causal: future inputs change no earlier output bit and get exactly zero gradient\n");
}
END_TEST

/* DP logits grow without bound (SPEC §1, Theorem 3.1) but the softmax must stay finite: each output is a
 * convex combination of value rows. */
START_TEST(test_dp_large_inputs) {
    lipt_rng rng;
    lipt_rng_seed(&rng, 4242);
    const int sh[3] = {2, 17, 8};
    lipt_tensor *q = tu_tensor(&rng, 3, sh, 200.0f, 0), *k = tu_tensor(&rng, 3, sh, 200.0f, 0),
                *v = tu_tensor(&rng, 3, sh, 1.0f, 0);
    float vmax = 0;
    for (size_t i = 0; i < v->numel; i++) vmax = fmaxf(vmax, fabsf(v->data[i]));
    lipt_ctx ctx;
    lipt_ctx_init(&ctx, 1 << 16, 1);
    for (int causal = 0; causal < 2; causal++) {
        lipt_tensor *o = lipt_attention_dp(&ctx, q, k, v, 2, causal);
        double *vd = attn_to_double(v->data, v->numel), *ref = malloc(o->numel * sizeof(double));
        attn_ref(q->data, k->data, vd, 2, 17, 8, 2, causal, 0, ref);
        for (size_t i = 0; i < o->numel; i++) {
            ck_assert_msg(isfinite(o->data[i]) && fabsf(o->data[i]) <= vmax * (1 + 1e-6f), "non-convex output %g",
                          o->data[i]);
        }
        /* near-one-hot rows: the argmax can flip on float rounding of huge logits, so only a loose check */
        const double e = tu_max_rel_err(o->data, ref, o->numel, 1e-6);
        printf("attention_dp large logits causal%d: rel err vs double %.3e\n", causal, e);
        free(vd);
        free(ref);
    }
    lipt_ctx_free(&ctx);
    tu_free(q);
    tu_free(k);
    tu_free(v);
}
END_TEST

/* One thread and two threads (the parallel (batch, head) loop): the same bits, forward and backward. */
START_TEST(test_dp_threads) {
    lipt_rng rng;
    lipt_rng_seed(&rng, 31337);
    lipt_tensor *in[3];
    attn_inputs(&rng, 0, (const int[]){3, 40, 24}, 7, in);
    const double worst = attn_check_threads(lipt_attention_dp, in, "");
    printf("attention_dp threads 1 vs 2: the same bits (worst rel diff %.3e)\n", worst);
    lipt_set_threads(2);
    for (int i = 0; i < 3; i++) tu_free(in[i]);
}
END_TEST

int main(void) {
    lipt_set_threads(2);
    Suite *s = suite_create("ops_attention_dp");
    TCase *tc = tcase_create("attention_dp");
    tcase_set_timeout(tc, 120);
    tcase_add_test(tc, test_dp_forward);
    tcase_add_test(tc, test_dp_gradcheck);
    tcase_add_test(tc, test_dp_grad_subsets);
    tcase_add_test(tc, test_dp_accumulates);
    tcase_add_test(tc, test_dp_causal_future);
    tcase_add_test(tc, test_dp_large_inputs);
    tcase_add_test(tc, test_dp_threads);
    suite_add_tcase(s, tc);
    return tu_run_suite(s);
}
