/* The training-step pattern (forward, backward, reset) makes no heap allocation once warm.
 * Linked with -Wl,--wrap=malloc,... so every malloc from lipt's static code and this test is counted
 * (shared libraries—OpenBLAS, OpenMP—are outside the wrap and manage their own pools). */
#include "testutil.h"

#include <stdlib.h>

void *__real_malloc(size_t n);
void *__real_calloc(size_t n, size_t s);
void *__real_realloc(void *p, size_t n);
void *__real_aligned_alloc(size_t a, size_t n);
int __real_posix_memalign(void **p, size_t a, size_t n);

static volatile size_t n_allocs; /* test-only instrumentation; volatile: GCC assumes malloc touches no globals */
void *__wrap_malloc(size_t n) { n_allocs++; return __real_malloc(n); }
void *__wrap_calloc(size_t n, size_t s) { n_allocs++; return __real_calloc(n, s); }
void *__wrap_realloc(void *p, size_t n) { n_allocs++; return __real_realloc(p, n); }
void *__wrap_aligned_alloc(size_t a, size_t n) { n_allocs++; return __real_aligned_alloc(a, n); }
int __wrap_posix_memalign(void **p, size_t a, size_t n) { n_allocs++; return __real_posix_memalign(p, a, n); }

enum { V = 11, T = 9, B = 3, D = 12, H = 3, F = 20 };

typedef struct {
    lipt_params p;
    lipt_tensor *emb, *wq, *wk, *wv, *wq2, *wv2, *wo, *g, *b, *w1, *w2, *beta, *head;
    float u[3 * D], v[D];
} toy_model;

static void toy_init(toy_model *m) {
    lipt_params_init(&m->p);
    m->emb = lipt_param_add(&m->p, "emb", 2, (int[]){V, D}, 0);
    m->wq = lipt_param_add(&m->p, "wq", 2, (int[]){D, D}, 0);
    m->wk = lipt_param_add(&m->p, "wk", 2, (int[]){D, D}, 0);
    m->wv = lipt_param_add(&m->p, "wv", 2, (int[]){D, D}, 0);
    m->wq2 = lipt_param_add(&m->p, "wq2", 2, (int[]){D, D}, 0);
    m->wv2 = lipt_param_add(&m->p, "wv2", 2, (int[]){D, D}, 0);
    m->wo = lipt_param_add(&m->p, "wo", 2, (int[]){D, D}, 0);
    m->g = lipt_param_add(&m->p, "ln.g", 1, (int[]){D}, 0);
    m->b = lipt_param_add(&m->p, "ln.b", 1, (int[]){D}, 0);
    m->w1 = lipt_param_add(&m->p, "w1", 2, (int[]){D, F}, 0);
    m->w2 = lipt_param_add(&m->p, "w2", 2, (int[]){F, D}, 0);
    m->beta = lipt_param_add(&m->p, "beta", 1, (int[]){1}, 0);
    m->head = lipt_param_add(&m->p, "head", 2, (int[]){D, V}, 0);
    lipt_params_finalize(&m->p);
    lipt_rng rng;
    lipt_rng_seed(&rng, 9);
    lipt_rng_fill_normal(&rng, m->p.value, m->p.n_train, 0.3f);
    for (int i = 0; i < D; i++) m->g->data[i] = 1;
    m->beta->data[0] = 1;
    lipt_rng_fill_normal(&rng, m->u, 3 * D, 1);
    lipt_rng_fill_normal(&rng, m->v, D, 1);
}

/* One step exercising every op family. */
static float toy_step(lipt_ctx *ctx, toy_model *m, const int *ids, const int *tg) {
    int sh[3] = {B, T, D};
    lipt_tensor *x = lipt_embedding(ctx, m->emb, ids, 3, sh);
    lipt_tensor *h = lipt_layernorm(ctx, x, m->g, m->b, 1e-5f);
    lipt_tensor *q = lipt_matmul(ctx, h, m->wq, 0, 0);
    lipt_tensor *k = lipt_matmul(ctx, h, m->wk, 0, 0);
    lipt_tensor *v = lipt_matmul(ctx, h, m->wv, 0, 0);
    lipt_tensor *a1 = lipt_attention_dp(ctx, q, k, v, H, 1);
    lipt_tensor *a2 = lipt_attention_l2(ctx, q, k, v, H, 1);
    lipt_tensor *q2 = lipt_matmul(ctx, h, m->wq2, 0, 0);
    lipt_tensor *a3 = lipt_attention_l2_tied(ctx, q2, m->wq2, m->wv2, H, 1);
    lipt_tensor *sig = lipt_spectral_norm(ctx, m->wo, m->u, m->v, 1, 1);
    lipt_tensor *ninf = lipt_norm_inf(ctx, m->wq2, 1, H);
    lipt_tensor *fac = lipt_contract_factor(ctx, lipt_mul(ctx, sig, lipt_sqrt(ctx, lipt_max(ctx, ninf))), 0.9f);
    lipt_tensor *att = lipt_add(ctx, lipt_add(ctx, a1, a2), lipt_sub(ctx, a3, lipt_scale(ctx, a1, 0.5f)));
    lipt_tensor *o = lipt_mul(ctx, lipt_matmul(ctx, att, m->wo, 0, 0), fac);
    x = lipt_add(ctx, x, lipt_dropout(ctx, o, 0.1f));
    lipt_tensor *f = lipt_matmul(ctx, x, m->w1, 0, 0);
    f = lipt_add(ctx, lipt_gelu(ctx, f), lipt_add(ctx, lipt_relu(ctx, f), lipt_elu(ctx, f)));
    f = lipt_lipswish(ctx, f, m->beta);
    x = lipt_add(ctx, x, lipt_matmul(ctx, f, m->w2, 0, 0));
    lipt_tensor *logits = lipt_matmul(ctx, x, m->head, 0, 0);
    lipt_tensor *sm = lipt_softmax(ctx, logits);
    lipt_tensor *loss = lipt_cross_entropy(ctx, logits, tg, NULL);
    loss = lipt_add(ctx, loss, lipt_scale(ctx, lipt_mean(ctx, sm), 0.01f));
    loss = lipt_add(ctx, loss, lipt_scale(ctx, lipt_sum(ctx, sm), 0.0f));
    lipt_params_zero_grad(&m->p);
    lipt_backward(ctx, loss);
    float l = loss->data[0];
    lipt_ctx_reset(ctx);
    return l;
}

/* Warm steps at a precision (bf16-emulated: the products' rounding scratch grows once per thread, then stays). */
static void warm_steps(lipt_precision precision) {
    lipt_set_threads(2);
    toy_model m;
    toy_init(&m);
    lipt_ctx ctx;
    lipt_ctx_init(&ctx, 4096, 1); /* deliberately small: the arena must grow, then settle */
    lipt_error err = {0};
    ck_assert(lipt_ctx_set_precision(&ctx, precision, &err) == LIPT_OK);
    ctx.training = 1;
    int ids[B * T], tg[B * T];
    for (int i = 0; i < B * T; i++) { ids[i] = (i * 7) % V; tg[i] = (i * 5 + 1) % V; }
    for (int w = 0; w < 2; w++) toy_step(&ctx, &m, ids, tg);
    size_t before = n_allocs, blocks = ctx.arena.n_block_mallocs;
    float l = 0;
    for (int s = 0; s < 5; s++) l = toy_step(&ctx, &m, ids, tg);
    size_t grew = n_allocs - before;
    printf("warm steps (%s): %zu heap allocations, arena %zu bytes peak, loss %.4f\n", lipt_precision_name(precision),
           grew, ctx.arena.peak, l);
    ck_assert_msg(grew == 0, "%zu allocations during warm training steps", grew);
    ck_assert_uint_eq(ctx.arena.n_block_mallocs, blocks);
    /* sanity: the counter works (Check's own assertions allocate, so count right around one malloc) */
    size_t c0 = n_allocs;
    void *volatile p = malloc(16);
    size_t c1 = n_allocs;
    ck_assert_uint_eq(c1 - c0, 1);
    free(p);
    lipt_ctx_free(&ctx);
    lipt_params_free(&m.p);
}

START_TEST(test_step_allocates_nothing_when_warm) { warm_steps(LIPT_PRECISION_FLOAT32); }
END_TEST

START_TEST(test_emulated_step_allocates_nothing_when_warm) { warm_steps(LIPT_PRECISION_BF16_EMULATED); }
END_TEST

int main(void) {
    Suite *s = suite_create("alloc");
    TCase *tc = tcase_create("alloc");
    tcase_add_test(tc, test_step_allocates_nothing_when_warm);
    tcase_add_test(tc, test_emulated_step_allocates_nothing_when_warm);
    suite_add_tcase(s, tc);
    return tu_run_suite(s);
}
