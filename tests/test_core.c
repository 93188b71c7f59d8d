/* Core: arena, RNG, parameter slab, reshape views, tape recording, no-grad mode, backward accumulation. */
#define _GNU_SOURCE /* sched_setaffinity */
#include "testutil.h"

#include <math.h>
#include <sched.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

START_TEST(test_arena_alignment_and_growth) {
    lipt_arena a;
    lipt_arena_init(&a, 4096);
    size_t mallocs0 = a.n_block_mallocs;
    for (int i = 1; i < 200; i++) {
        void *p = lipt_arena_alloc(&a, (size_t)i * 37);
        ck_assert_msg(((uintptr_t)p & 63) == 0, "allocation %d not 64-byte aligned", i);
        memset(p, 0xab, (size_t)i * 37); /* the sanitizer build catches overruns */
    }
    ck_assert_uint_gt(a.n_block_mallocs, mallocs0);
    size_t peak = a.peak;
    lipt_arena_reset(&a);
    size_t after_merge = a.n_block_mallocs;
    /* the same pattern again fits in the merged block: no more mallocs */
    for (int round = 0; round < 3; round++) {
        for (int i = 1; i < 200; i++) lipt_arena_alloc(&a, (size_t)i * 37);
        lipt_arena_reset(&a);
    }
    ck_assert_uint_eq(a.n_block_mallocs, after_merge);
    ck_assert_uint_ge(a.capacity, peak);
    lipt_arena_free(&a);
}
END_TEST

START_TEST(test_arena_marks) {
    lipt_arena a;
    lipt_arena_init(&a, 4096);
    float *keep = lipt_arena_alloc(&a, 100 * sizeof(float));
    for (int i = 0; i < 100; i++) keep[i] = (float)i;
    size_t mallocs = 0;
    for (int it = 0; it < 50; it++) {
        lipt_arena_mark m = lipt_arena_get_mark(&a);
        float *tmp = lipt_arena_alloc(&a, 3000 * sizeof(float)); /* larger than the first block */
        memset(tmp, 0, 3000 * sizeof(float));
        lipt_arena_release(&a, m);
        if (it == 1) mallocs = a.n_block_mallocs;
    }
    ck_assert_uint_eq(a.n_block_mallocs, mallocs); /* released memory is reused */
    for (int i = 0; i < 100; i++) ck_assert(keep[i] == (float)i);
    lipt_arena_free(&a);
}
END_TEST

/* A large arena reserves address space: it grows past its initial size without a malloc'd block, and only
 * what was written is resident. (Where the system refuses the reservation it falls back to blocks.) */
START_TEST(test_arena_reservation) {
    lipt_arena a;
    lipt_arena_init(&a, (size_t)32 << 20);
    const int reserved = a.n_block_mallocs == 0;
    printf("arena of 32 MB: %s, capacity %zu MB\n", reserved ? "reserved address space" : "malloc'd block (fallback)",
           a.capacity >> 20);
    unsigned char *first = lipt_arena_alloc(&a, 1000);
    memset(first, 7, 1000);
    for (int i = 0; i < 12; i++) { /* 96 MB in all: past the initial size */
        unsigned char *p = lipt_arena_alloc(&a, (size_t)8 << 20);
        ck_assert(((uintptr_t)p & 63) == 0);
        memset(p, i, (size_t)8 << 20);
    }
    if (reserved) ck_assert_uint_eq(a.n_block_mallocs, 0);
    ck_assert_uint_ge(a.capacity, a.peak);
    for (int i = 0; i < 1000; i++) ck_assert_uint_eq(first[i], 7);
    lipt_arena_mark m = lipt_arena_get_mark(&a);
    lipt_arena_alloc(&a, (size_t)40 << 20);
    lipt_arena_release(&a, m);
    lipt_arena_reset(&a);
    unsigned char *again = lipt_arena_alloc(&a, 1000);
    ck_assert_ptr_eq(again, first); /* reset starts over at the same place */
    lipt_arena_free(&a);
}
END_TEST

START_TEST(test_rng) {
    lipt_rng a, b;
    lipt_rng_seed(&a, 42);
    lipt_rng_seed(&b, 42);
    for (int i = 0; i < 100; i++) ck_assert_uint_eq(lipt_rng_u64(&a), lipt_rng_u64(&b));
    lipt_rng_seed(&b, 43);
    ck_assert_uint_ne(lipt_rng_u64(&a), lipt_rng_u64(&b));
    /* moments of the normal generator */
    double s = 0, s2 = 0;
    const int n = 200000;
    for (int i = 0; i < n; i++) {
        double x = lipt_rng_normal(&a);
        s += x;
        s2 += x * x;
    }
    ck_assert_msg(fabs(s / n) < 0.01, "normal mean %g", s / n);
    ck_assert_msg(fabs(s2 / n - 1) < 0.02, "normal variance %g", s2 / n);
    int counts[7] = {0};
    for (int i = 0; i < 70000; i++) counts[lipt_rng_below(&a, 7)]++;
    for (int i = 0; i < 7; i++) ck_assert_msg(abs(counts[i] - 10000) < 500, "below(7) bucket %d: %d", i, counts[i]);
}
END_TEST

START_TEST(test_params_slab) {
    lipt_params p;
    lipt_params_init(&p);
    lipt_tensor *w = lipt_param_add(&p, "w", 2, (int[]){3, 4}, 0);
    lipt_tensor *b = lipt_param_add(&p, "b", 1, (int[]){4}, LIPT_PARAM_NO_DECAY);
    lipt_tensor *u = lipt_param_add(&p, "u", 1, (int[]){3}, LIPT_PARAM_BUFFER);
    lipt_params_finalize(&p);
    ck_assert_uint_eq(lipt_params_count(&p), 16);
    ck_assert_ptr_eq(w->data, p.value);
    ck_assert_ptr_eq(b->data, p.value + 12);
    ck_assert_ptr_eq(w->grad, p.grad);
    ck_assert_ptr_eq(u->data, p.buf);
    ck_assert_ptr_null(u->grad);
    ck_assert(!u->requires_grad && w->requires_grad);
    ck_assert_ptr_eq(lipt_param_find(&p, "b"), b);
    ck_assert_ptr_null(lipt_param_find(&p, "nope"));
    ck_assert_int_eq(lipt_param_flags(&p, b), LIPT_PARAM_NO_DECAY);
    for (size_t i = 0; i < w->numel; i++) ck_assert(w->data[i] == 0 && w->grad[i] == 0);
    lipt_params_free(&p);
}
END_TEST

START_TEST(test_tape_records_and_no_grad) {
    lipt_ctx ctx;
    lipt_ctx_init(&ctx, 1 << 16, 1);
    lipt_rng rng;
    lipt_rng_seed(&rng, 3);
    lipt_tensor *a = tu_tensor(&rng, 2, (int[]){2, 3}, 1, 1);
    lipt_tensor *b = tu_tensor(&rng, 2, (int[]){3, 2}, 1, 0);
    lipt_tensor *c = lipt_matmul(&ctx, a, b, 0, 0);
    ck_assert_uint_eq(ctx.n_nodes, 1);
    ck_assert(c->requires_grad);
    ck_assert_str_eq(lipt_ops[ctx.tape->op].name, "matmul");
    /* inputs needing no grad: nothing recorded */
    lipt_tensor *d = lipt_matmul(&ctx, b, b, 1, 0);
    ck_assert_uint_eq(ctx.n_nodes, 1);
    ck_assert(!d->requires_grad);
    /* no-grad mode: nothing recorded even with grad-requiring inputs */
    lipt_no_grad_push(&ctx);
    lipt_tensor *e = lipt_matmul(&ctx, a, b, 0, 0);
    lipt_no_grad_pop(&ctx);
    ck_assert_uint_eq(ctx.n_nodes, 1);
    ck_assert(!e->requires_grad);
    for (size_t i = 0; i < c->numel; i++) ck_assert(c->data[i] == e->data[i]);
    lipt_ctx_reset(&ctx);
    ck_assert_uint_eq(ctx.n_nodes, 0);
    ck_assert_ptr_null(ctx.tape);
    lipt_ctx_free(&ctx);
    tu_free(a);
    tu_free(b);
}
END_TEST

/* A tensor used twice accumulates both contributions; a reshape view shares the gradient. */
START_TEST(test_backward_accumulates_through_views) {
    lipt_ctx ctx;
    lipt_ctx_init(&ctx, 1 << 16, 1);
    lipt_rng rng;
    lipt_rng_seed(&rng, 5);
    lipt_tensor *a = tu_tensor(&rng, 2, (int[]){2, 3}, 1, 1);
    /* c = view(a) view(a)ᵀ with a seen as [1,2,3]: seeded with ones, da[i,k] = 2 * sum_r a[r,k] */
    lipt_tensor *av = lipt_reshape(&ctx, a, 3, (int[]){1, 2, 3});
    lipt_tensor *c = lipt_matmul(&ctx, av, a, 0, 1);
    ck_assert_int_eq(c->ndim, 3);
    float ones[4] = {1, 1, 1, 1};
    lipt_backward_seeded(&ctx, c, ones);
    for (int i = 0; i < 2; i++)
        for (int k = 0; k < 3; k++) {
            double ref = 2.0 * (a->data[0 * 3 + k] + a->data[1 * 3 + k]);
            ck_assert_msg(fabs(a->grad[i * 3 + k] - ref) < 1e-5, "grad[%d,%d] %g vs %g", i, k, a->grad[i * 3 + k], ref);
        }
    ck_assert_ptr_eq(av->grad, a->grad);
    lipt_ctx_free(&ctx);
    tu_free(a);
}
END_TEST

/* The ops that write a new gradient buffer with = instead of zeroing it and adding (lipt_grad_of_fresh) give the bits
 * of the zero-and-accumulate path, and write all of it: the arena is filled with NaN first, so an element left
 * unwritten would show. The graph uses each op on a fresh buffer and on one already written (a tensor used twice,
 * x * x, x xᵀ), with and without threads. */
enum { FR_B = 2, FR_T = 5, FR_D = 8, FR_F = 12, FR_N = 16 };

static lipt_tensor *fresh_graph(lipt_ctx *ctx, lipt_tensor **p, lipt_tensor **mid, const int *tg) {
    int n = 0;
    lipt_tensor *h = mid[n++] = lipt_layernorm(ctx, p[0], p[3], p[4], 1e-5f);
    lipt_tensor *t = mid[n++] = lipt_linear(ctx, h, p[1], p[2]);               /* [B, T, F] */
    lipt_tensor *u = mid[n++] = lipt_gelu(ctx, t);
    lipt_tensor *m = mid[n++] = lipt_maxmin(ctx, t);                          /* t's second use: accumulates */
    lipt_tensor *c = mid[n++] = lipt_clip_rows(ctx, u, 0.5f);
    lipt_tensor *s = mid[n++] = lipt_add(ctx, c, m);
    lipt_tensor *q = mid[n++] = lipt_mul(ctx, s, s);                          /* a == b */
    lipt_tensor *r = mid[n++] = lipt_scale(ctx, q, 0.5f);
    lipt_tensor *g = mid[n++] = lipt_matmul(ctx, r, r, 0, 1);                 /* batched r rᵀ, [B, T, T] */
    lipt_tensor *gv = mid[n++] = lipt_reshape(ctx, g, 2, (int[]){FR_B * FR_T, FR_T});
    lipt_tensor *hv = mid[n++] = lipt_reshape(ctx, h, 2, (int[]){FR_B * FR_T, FR_D});
    lipt_tensor *z = mid[n++] = lipt_matmul(ctx, hv, p[5], 0, 0);            /* h's second use, 2-D */
    lipt_tensor *zz = mid[n++] = lipt_sub(ctx, z, lipt_scale(ctx, gv, 0.25f)); /* sub's db, scale's da */
    ck_assert_int_le(n, FR_N);
    return lipt_cross_entropy(ctx, zz, tg, NULL);
}

static lipt_tensor *fresh_build(lipt_ctx *ctx, lipt_tensor **in, void *user) {
    lipt_tensor *mid[FR_N] = {0};
    return fresh_graph(ctx, in, mid, user);
}

START_TEST(test_fresh_gradients) {
    lipt_rng rng;
    lipt_rng_seed(&rng, 77);
    lipt_tensor *p[6] = {
        tu_tensor(&rng, 3, (int[]){FR_B, FR_T, FR_D}, 1, 1), tu_tensor(&rng, 2, (int[]){FR_D, FR_F}, 0.5f, 1),
        tu_tensor(&rng, 1, (int[]){FR_F}, 0.1f, 1),           tu_tensor(&rng, 1, (int[]){FR_D}, 1, 1),
        tu_tensor(&rng, 1, (int[]){FR_D}, 0.1f, 1),           tu_tensor(&rng, 2, (int[]){FR_D, FR_T}, 0.5f, 1)};
    for (int k = 0; k < FR_D; k++) p[3]->data[k] += 1.0f;
    int tg[FR_B * FR_T];
    for (int i = 0; i < FR_B * FR_T; i++) tg[i] = (int)lipt_rng_below(&rng, FR_T);
    float *ref[6] = {0};
    int n_cmp = 0;
    /* float32, and bf16's numerics (emulated: any CPU), where the products also store into fresh buffers */
    const lipt_precision precs[2] = {LIPT_PRECISION_FLOAT32, LIPT_PRECISION_BF16_EMULATED};
    for (int pi = 0; pi < 2; pi++) {
        for (int k = 0; k < 6; k++) free(ref[k]), ref[k] = NULL;
        for (int threads = 1; threads <= 2; threads++) {
            lipt_set_threads(threads);
            for (int pass = 0; pass < 2; pass++) { /* 0: fresh buffers (as in training); 1: all zeroed beforehand */
                lipt_ctx ctx;
                lipt_ctx_init(&ctx, 1 << 20, 1);
                lipt_error err;
                ck_assert_int_eq(lipt_ctx_set_precision(&ctx, precs[pi], &err), LIPT_OK);
                const size_t poison = 1 << 19;
                lipt_arena_mark mk = lipt_arena_get_mark(&ctx.arena);
                float *nan = lipt_arena_alloc(&ctx.arena, poison);
                for (size_t i = 0; i < poison / sizeof(float); i++) nan[i] = NAN;
                lipt_arena_release(&ctx.arena, mk);
                for (int k = 0; k < 6; k++) p[k]->grad = NULL; /* the inputs' gradients live in the context's arena */
                lipt_tensor *mid[FR_N] = {0};
                lipt_tensor *loss = fresh_graph(&ctx, p, mid, tg);
                if (pass == 1) {
                    for (int k = 0; k < FR_N; k++)
                        if (mid[k]) lipt_grad_of(&ctx, mid[k]);
                    for (int k = 0; k < 6; k++) lipt_grad_of(&ctx, p[k]);
                }
                lipt_backward(&ctx, loss);
                for (int k = 0; k < 6; k++) {
                    for (size_t i = 0; i < p[k]->numel; i++)
                        ck_assert_msg(isfinite(p[k]->grad[i]), "input %d grad %zu", k, i);
                    if (!ref[k]) {
                        ref[k] = malloc(p[k]->numel * sizeof(float));
                        memcpy(ref[k], p[k]->grad, p[k]->numel * sizeof(float));
                        continue;
                    }
                    for (size_t i = 0; i < p[k]->numel; i++, n_cmp++)
                        ck_assert_msg(p[k]->grad[i] == ref[k][i],
                                      "%s threads %d pass %d: input %d grad %zu: %.9g vs %.9g",
                                      pi ? "bf16-emulated" : "float32", threads, pass, k, i, p[k]->grad[i], ref[k][i]);
                }
                lipt_ctx_free(&ctx);
                for (int k = 0; k < 6; k++) p[k]->grad = NULL;
            }
        }
    }
    /* and the gradients themselves against finite differences (an op storing where it must add would agree with
     * itself above) */
    lipt_set_threads(2);
    double e = tu_gradcheck("fresh-buffer graph", fresh_build, tg, p, 6, &(tu_gradcheck_opts){8, 1e-3, 1e-2, 5});
    ck_assert_msg(e < 1e-2, "gradient check %.3e", e);
    printf("fresh gradient buffers: %d gradient values equal to the zero-and-accumulate path's (float32 and "
           "bf16-emulated, 1 and 2 threads), "
           "none left unwritten\n", n_cmp);
    for (int k = 0; k < 6; k++) {
        free(ref[k]);
        tu_free(p[k]);
    }
}
END_TEST

START_TEST(test_op_table) {
    for (int i = 0; i < LIPT_OP_COUNT; i++) {
        ck_assert_ptr_nonnull(lipt_ops[i].name);
        ck_assert_ptr_nonnull(lipt_ops[i].backward);
        for (int j = 0; j < i; j++) ck_assert_str_ne(lipt_ops[i].name, lipt_ops[j].name);
    }
    ck_assert_str_eq(lipt_ops[LIPT_OP_ATTENTION_L2_TIED].name, "attention_l2_tied");
}
END_TEST

START_TEST(test_threads_knob) {
    lipt_set_threads(1);
    ck_assert_int_eq(lipt_get_threads(), 1);
    lipt_set_threads(2);
    ck_assert_int_eq(lipt_get_threads(), 2);
    setenv("LIPT_THREADS", "1", 1);
    ck_assert_int_eq(lipt_threads_init(), 1);
    ck_assert_int_eq(lipt_get_threads(), 1);
    unsetenv("LIPT_THREADS");
}
END_TEST

/* The ranks of one machine share the CPUs of their affinity mask, not every CPU online: pinned to one CPU, one rank
 * gets one thread however many the machine has. */
START_TEST(test_cpus_per_rank) {
    const int usable = lipt_cpus_usable();
    ck_assert_int_ge(usable, 1);
    ck_assert_int_eq(lipt_cpus_per_rank(1), usable);
    ck_assert_int_eq(lipt_cpus_per_rank(0), usable);
    ck_assert_int_eq(lipt_cpus_per_rank(2), usable / 2 > 1 ? usable / 2 : 1);
    ck_assert_int_eq(lipt_cpus_per_rank(usable + 1), 1);
    cpu_set_t was, one;
    ck_assert_int_eq(sched_getaffinity(0, sizeof was, &was), 0);
    int first = 0;
    while (!CPU_ISSET(first, &was)) first++;
    CPU_ZERO(&one);
    CPU_SET(first, &one);
    ck_assert_int_eq(sched_setaffinity(0, sizeof one, &one), 0);
    const int pinned = lipt_cpus_per_rank(1), pinned2 = lipt_cpus_per_rank(2);
    ck_assert_int_eq(sched_setaffinity(0, sizeof was, &was), 0);
    ck_assert_int_eq(pinned, 1);
    ck_assert_int_eq(pinned2, 1);
}
END_TEST

START_TEST(test_errors) {
    lipt_error err = {0};
    lipt_status st = lipt_fail(&err, LIPT_ERR_ARG, "%s:%d: expected %s", "f.cfg", 3, "an integer");
    ck_assert_int_eq(st, LIPT_ERR_ARG);
    ck_assert_int_eq(err.status, LIPT_ERR_ARG);
    ck_assert_str_eq(err.msg, "f.cfg:3: expected an integer");
    ck_assert_int_eq(lipt_fail(NULL, LIPT_ERR_IO, "x"), LIPT_ERR_IO);
    ck_assert_str_eq(lipt_status_name(LIPT_ERR_FORMAT), "bad format");
}
END_TEST

int main(void) {
    Suite *s = suite_create("core");
    TCase *tc = tcase_create("core");
    tcase_add_test(tc, test_arena_alignment_and_growth);
    tcase_add_test(tc, test_arena_marks);
    tcase_add_test(tc, test_arena_reservation);
    tcase_add_test(tc, test_rng);
    tcase_add_test(tc, test_params_slab);
    tcase_add_test(tc, test_tape_records_and_no_grad);
    tcase_add_test(tc, test_backward_accumulates_through_views);
    tcase_add_test(tc, test_fresh_gradients);
    tcase_add_test(tc, test_op_table);
    tcase_add_test(tc, test_threads_knob);
    tcase_add_test(tc, test_cpus_per_rank);
    tcase_add_test(tc, test_errors);
    suite_add_tcase(s, tc);
    return tu_run_suite(s);
}
