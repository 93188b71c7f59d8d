/* The packed attention ops (q, k, v as the column blocks of one [B,T,3D] tensor) against the same ops on three
 * tensors: output and gradients bit for bit, for dp, l2 and dp with a relative bias, through the materialising and
 * the tiled kernels, at float32 and bf16-emulated (whose packed operands are built from the strided blocks, and
 * converted once in the forward for the backward too: lipt_tensor.lowp);
 * concat_cols against finite differences and its layout. */
#include "testutil.h"

#include <signal.h>
#include <string.h>

enum { KIND_DP, KIND_L2, KIND_DP_REL, N_KINDS };
static const char *const kind_name[N_KINDS] = {"dp", "l2", "dp_rel"};

static lipt_tensor *run_op(lipt_ctx *ctx, int kind, lipt_tensor *q, lipt_tensor *k, lipt_tensor *v,
                           lipt_tensor *qkv, lipt_tensor *rel, int H, int causal) {
    switch (kind) {
    case KIND_DP: return qkv ? lipt_attention_dp_packed(ctx, qkv, H, causal) : lipt_attention_dp(ctx, q, k, v, H, causal);
    case KIND_L2: return qkv ? lipt_attention_l2_packed(ctx, qkv, H, causal) : lipt_attention_l2(ctx, q, k, v, H, causal);
    default: return qkv ? lipt_attention_dp_rel_packed(ctx, qkv, rel, H) : lipt_attention_dp_rel(ctx, q, k, v, rel, H);
    }
}

/* Runs one kind both ways on the same numbers; returns the number of differing output and gradient floats. */
static long compare(int kind, int B, int T, int D, int H, int causal, int tiled, lipt_precision prec, uint64_t seed) {
    lipt_rng rng;
    lipt_rng_seed(&rng, seed);
    const int sh[3] = {B, T, D}, sh3[3] = {B, T, 3 * D}, shr[2] = {H, T + 3};
    lipt_tensor *x[3], *qkv = tu_tensor(&rng, 3, sh3, 1.0f, 1), *rel = tu_tensor(&rng, 2, shr, 0.5f, 1);
    lipt_tensor *rel2 = tu_tensor(&rng, 2, shr, 0.5f, 1);
    memcpy(rel2->data, rel->data, rel->numel * sizeof(float));
    for (int i = 0; i < 3; i++) {
        x[i] = tu_tensor(&rng, 3, sh, 1.0f, 1);
        for (size_t r = 0; r < (size_t)B * T; r++) /* block i of packed row r is row r of x[i] */
            memcpy(x[i]->data + r * D, qkv->data + r * 3 * D + (size_t)i * D, (size_t)D * sizeof(float));
    }
    lipt_tensor *seedt = tu_tensor(&rng, 3, sh, 1.0f, 0);
    /* two contexts: the gradients of these tensors live in the arena of the context that ran the backward */
    lipt_ctx ctx[2];
    lipt_tensor *o[2];
    for (int w = 0; w < 2; w++) {
        lipt_ctx_init(&ctx[w], 64u << 20, 1);
        lipt_error err;
        ck_assert_int_eq(lipt_ctx_set_precision(&ctx[w], prec, &err), LIPT_OK);
        ctx[w].attn_tiled = tiled;
        o[w] = w ? run_op(&ctx[w], kind, NULL, NULL, NULL, qkv, rel2, H, causal)
                 : run_op(&ctx[w], kind, x[0], x[1], x[2], NULL, rel, H, causal);
        lipt_backward_seeded(&ctx[w], o[w], seedt->data);
    }
    long diff = 0;
    for (size_t i = 0; i < o[0]->numel; i++) diff += o[0]->data[i] != o[1]->data[i];
    for (size_t r = 0; r < (size_t)B * T; r++)
        for (int i = 0; i < 3; i++)
            for (int c = 0; c < D; c++) diff += x[i]->grad[r * D + c] != qkv->grad[r * 3 * D + (size_t)i * D + c];
    if (kind == KIND_DP_REL)
        for (size_t i = 0; i < rel->numel; i++) diff += rel->grad[i] != rel2->grad[i];
    for (int w = 0; w < 2; w++) lipt_ctx_free(&ctx[w]);
    for (int i = 0; i < 3; i++) tu_free(x[i]);
    tu_free(qkv);
    tu_free(rel);
    tu_free(rel2);
    tu_free(seedt);
    return diff;
}

START_TEST(test_packed_equals_separate) {
    /* B T D H: T = 130 crosses the materialising kernel's 64-row blocks and the tiled kernel's row tiles */
    static const int shapes[][4] = {{2, 130, 12, 3}, {3, 7, 8, 2}, {1, 1, 6, 1}};
    static const lipt_precision precs[2] = {LIPT_PRECISION_FLOAT32, LIPT_PRECISION_BF16_EMULATED};
    int cases = 0;
    for (int kind = 0; kind < N_KINDS; kind++)
        for (size_t s = 0; s < sizeof shapes / sizeof shapes[0]; s++)
            for (int tiled = 0; tiled < 2; tiled++)
                for (int p = 0; p < 2; p++)
                    for (int causal = 0; causal < 2; causal++) {
                        if (kind == KIND_DP_REL && !causal) continue; /* the relative bias is causal only */
                        const int *S = shapes[s];
                        const long d = compare(kind, S[0], S[1], S[2], S[3], causal, tiled, precs[p], 40 + s);
                        ck_assert_msg(d == 0, "%s B%d T%d D%d H%d causal %d tiled %d %s: %ld floats differ",
                                      kind_name[kind], S[0], S[1], S[2], S[3], causal, tiled,
                                      lipt_precision_name(precs[p]), d);
                        cases++;
                    }
    printf("packed attention: %d cases bit-identical to three tensors (output and every gradient)\n", cases);
}
END_TEST

/* The packed shape is checked: a width that is not 3D, or D not divisible into the heads. */
START_TEST(test_packed_shape_checked) {
    lipt_rng rng;
    lipt_rng_seed(&rng, 5);
    lipt_tensor *bad = tu_tensor(&rng, 3, (const int[]){1, 4, 10}, 1.0f, 0);
    lipt_ctx ctx;
    lipt_ctx_init(&ctx, 1u << 20, 1);
    lipt_attention_dp_packed(&ctx, bad, 1, 1);
    lipt_ctx_free(&ctx);
    tu_free(bad);
}
END_TEST

static lipt_tensor *concat_build(lipt_ctx *ctx, lipt_tensor **in, void *user) {
    (void)user;
    /* through a product, as the model uses it: x [W0 W1 W2] */
    return lipt_matmul(ctx, in[3], lipt_concat_cols(ctx, 3, in), 0, 0);
}

START_TEST(test_concat_cols) {
    lipt_rng rng;
    lipt_rng_seed(&rng, 77);
    lipt_tensor *in[4] = {tu_tensor(&rng, 2, (const int[]){5, 2}, 1.0f, 1), tu_tensor(&rng, 2, (const int[]){5, 3}, 1.0f, 1),
                          tu_tensor(&rng, 2, (const int[]){5, 1}, 1.0f, 1), tu_tensor(&rng, 2, (const int[]){4, 5}, 1.0f, 1)};
    lipt_ctx ctx;
    lipt_ctx_init(&ctx, 1u << 20, 1);
    lipt_tensor *c = lipt_concat_cols(&ctx, 3, in);
    ck_assert_int_eq(c->shape[0], 5);
    ck_assert_int_eq(c->shape[1], 6);
    for (int r = 0; r < 5; r++)
        for (int j = 0; j < 6; j++) {
            const float want = j < 2 ? in[0]->data[r * 2 + j] : j < 5 ? in[1]->data[r * 3 + j - 2] : in[2]->data[r];
            ck_assert_msg(c->data[r * 6 + j] == want, "concat_cols (%d, %d)", r, j);
        }
    lipt_ctx_free(&ctx);
    const double g = tu_gradcheck("concat_cols through matmul", concat_build, NULL, in, 4,
                                  &(tu_gradcheck_opts){.seed = 3, .tol = 1e-3});
    ck_assert_msg(g < 1e-3, "concat_cols gradcheck %.3e", g);
    for (int i = 0; i < 4; i++) tu_free(in[i]);
}
END_TEST

int main(void) {
    lipt_set_threads(2);
    Suite *s = suite_create("ops_attention_packed");
    TCase *tc = tcase_create("attention_packed");
    tcase_set_timeout(tc, 120);
    tcase_add_test(tc, test_packed_equals_separate);
    tcase_add_test_raise_signal(tc, test_packed_shape_checked, SIGABRT);
    tcase_add_test(tc, test_concat_cols);
    suite_add_tcase(s, tc);
    return tu_run_suite(s);
}
