/* optim: Muon. Newton–Schulz's singular values, the step (with AdamW on the other tensors) against a double
 * reference, which tensors it takes, the same bits on 1 and 3 threads, and AdamW's bits unchanged by an all-zero skip list. */
#include "testutil.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "lipt/optim.h"

/* Eigenvalues of a symmetric n x n matrix (cyclic Jacobi, in double; a is destroyed). */
static void sym_eigenvalues(double *a, int n, double *ev) {
    for (int sweep = 0; sweep < 100; sweep++) {
        double off = 0;
        for (int p = 0; p < n; p++)
            for (int q = p + 1; q < n; q++) off += a[p * n + q] * a[p * n + q];
        if (off < 1e-26) break;
        for (int p = 0; p < n; p++)
            for (int q = p + 1; q < n; q++) {
                const double apq = a[p * n + q];
                if (fabs(apq) < 1e-300) continue;
                const double th = (a[q * n + q] - a[p * n + p]) / (2 * apq);
                const double t = (th >= 0 ? 1 : -1) / (fabs(th) + sqrt(th * th + 1));
                const double c = 1 / sqrt(t * t + 1), s = t * c;
                for (int k = 0; k < n; k++) { /* columns p, q */
                    const double akp = a[k * n + p], akq = a[k * n + q];
                    a[k * n + p] = c * akp - s * akq;
                    a[k * n + q] = s * akp + c * akq;
                }
                for (int k = 0; k < n; k++) { /* rows p, q */
                    const double apk = a[p * n + k], aqk = a[q * n + k];
                    a[p * n + k] = c * apk - s * aqk;
                    a[q * n + k] = s * apk + c * aqk;
                }
            }
    }
    for (int i = 0; i < n; i++) ev[i] = a[i * n + i];
}

/* Smallest and largest singular value of X [R, C] (from the Gram matrix on the short side). */
static void sv_range(const float *X, int R, int C, double *lo, double *hi) {
    const int r = R < C ? R : C;
    double *g = calloc((size_t)r * r, sizeof *g), *ev = malloc((size_t)r * sizeof *ev);
    for (int i = 0; i < r; i++)
        for (int j = 0; j < r; j++) {
            double s = 0;
            if (R <= C)
                for (int k = 0; k < C; k++) s += (double)X[i * C + k] * X[j * C + k];
            else
                for (int k = 0; k < R; k++) s += (double)X[k * C + i] * X[k * C + j];
            g[i * r + j] = s;
        }
    sym_eigenvalues(g, r, ev);
    *lo = INFINITY, *hi = 0;
    for (int i = 0; i < r; i++) {
        const double s = sqrt(fmax(ev[i], 0));
        *lo = fmin(*lo, s), *hi = fmax(*hi, s);
    }
    free(g);
    free(ev);
}

/* Random rectangular matrices (both orientations) and a square one near the identity, at scales far from 1, their
 * singular values spread by a factor of 2 to 4: after 5 iterations every one is in [0.65, 1.2]. (The scalar
 * iteration x <- 3.4445 x - 4.7750 x³ + 2.0315 x⁵, 5 times, maps [0.005, 1] into [0.68, 1.14]; these inputs' singular
 * values, divided by the Frobenius norm, lie in [0.05, 0.5].) */
START_TEST(test_ns_singular_values) {
    const int shapes[][2] = {{16, 48}, {48, 16}, {32, 96}, {24, 24}};
    lipt_rng rng;
    lipt_rng_seed(&rng, 5);
    for (int s = 0; s < 4; s++) {
        const int R = shapes[s][0], C = shapes[s][1], n = R * C;
        float *d = malloc((size_t)n * sizeof *d), *work = malloc(lipt_muon_work_floats(R, C) * sizeof *work);
        lipt_rng_fill_normal(&rng, d, (size_t)n, s == 1 ? 30.0f : 1e-3f);
        if (R == C)
            for (int i = 0; i < R; i++) d[i * C + i] += 4e-3f * sqrtf((float)R);
        double lo0, hi0, lo, hi;
        sv_range(d, R, C, &lo0, &hi0);
        const float *o = lipt_muon_orthogonalise(d, R, C, 5, work);
        sv_range(o, R, C, &lo, &hi);
        printf("newton-schulz %dx%d: input singular values [%.3g, %.3g] (ratio %.2f), output [%.4f, %.4f]\n", R, C, lo0,
               hi0, hi0 / lo0, lo, hi);
        ck_assert_msg(hi0 / lo0 > 1.5, "%dx%d: the input is already near-orthogonal", R, C);
        ck_assert_msg(lo >= 0.65 && hi <= 1.2, "%dx%d: singular values [%.4f, %.4f] outside [0.65, 1.2]", R, C, lo, hi);
        free(d);
        free(work);
    }
}
END_TEST

/* A model-like params set: hidden matrices (square, wide, tall), a hidden bias, a no-decay 2-D bias of a layer, the
 * embedding, the head, a buffer. */
static void make_params(lipt_params *p) {
    lipt_params_init(p);
    lipt_param_add(p, "tok_emb", 2, (int[]){10, 6}, LIPT_PARAM_NO_DECAY);
    lipt_param_add(p, "layers.0.attn.wq", 2, (int[]){6, 6}, 0);
    lipt_param_add(p, "layers.0.attn.bo", 1, (int[]){6}, LIPT_PARAM_NO_DECAY);
    lipt_param_add(p, "layers.0.attn.rel_bias", 2, (int[]){2, 5}, LIPT_PARAM_NO_DECAY);
    lipt_param_add(p, "layers.0.ffn.w1", 2, (int[]){6, 11}, 0);
    lipt_param_add(p, "layers.0.ffn.sn1.u", 1, (int[]){6}, LIPT_PARAM_BUFFER);
    lipt_param_add(p, "layers.0.ffn.w2", 2, (int[]){11, 6}, 0);
    lipt_param_add(p, "head.w", 2, (int[]){6, 10}, 0);
    lipt_params_finalize(p);
}

START_TEST(test_muon_takes) {
    lipt_params p;
    make_params(&p);
    const char *want[] = {"layers.0.attn.wq", "layers.0.ffn.w1", "layers.0.ffn.w2"};
    lipt_muon o;
    lipt_error err = {0};
    lipt_muon_config mc = lipt_muon_defaults();
    ck_assert_int_eq(lipt_muon_init(&o, &mc, &p, &err), LIPT_OK);
    ck_assert_int_eq(o.n_mat, 3);
    for (int j = 0; j < 3; j++) ck_assert_str_eq(p.list[o.mat[j]]->name, want[j]);
    int owned = 0;
    for (int k = 0; k < p.n; k++) owned += o.owned[k];
    ck_assert_int_eq(owned, 3);
    lipt_muon_free(&o);
    lipt_params_free(&p);
    /* no hidden matrix: an error that says what to do */
    lipt_params_init(&p);
    lipt_param_add(&p, "head.w", 2, (int[]){4, 4}, 0);
    lipt_params_finalize(&p);
    ck_assert_int_eq(lipt_muon_init(&o, &mc, &p, &err), LIPT_ERR_ARG);
    ck_assert_ptr_nonnull(strstr(err.msg, "--optimizer adamw"));
    lipt_params_free(&p);
    mc.momentum = 1.0;
    ck_assert_int_eq(lipt_muon_config_check(&mc, &err), LIPT_ERR_ARG);
    printf("muon: takes wq, w1, w2; config check: %s\n", err.msg);
}
END_TEST

/* Newton–Schulz in double on the orientation with rows <= columns, by explicit transposes. */
static void ref_ns(const double *d, int R, int C, double *out) {
    const int wide = R <= C, r = wide ? R : C, c = wide ? C : R;
    double *x = malloc((size_t)r * c * sizeof *x), *a = malloc((size_t)r * r * sizeof *a),
           *b = malloc((size_t)r * r * sizeof *b), *y = malloc((size_t)r * c * sizeof *y);
    double ss = 0;
    for (int i = 0; i < R * C; i++) ss += d[i] * d[i];
    const double inv = 1 / (sqrt(ss) + 1e-7);
    for (int i = 0; i < R; i++)
        for (int j = 0; j < C; j++) x[wide ? i * C + j : j * R + i] = d[i * C + j] * inv;
    for (int it = 0; it < 5; it++) {
        for (int i = 0; i < r; i++)
            for (int j = 0; j < r; j++) {
                double s = 0;
                for (int k = 0; k < c; k++) s += x[i * c + k] * x[j * c + k];
                a[i * r + j] = s;
            }
        for (int i = 0; i < r; i++)
            for (int j = 0; j < r; j++) {
                double s = 0;
                for (int k = 0; k < r; k++) s += a[i * r + k] * a[k * r + j];
                b[i * r + j] = -4.7750 * a[i * r + j] + 2.0315 * s;
            }
        for (int i = 0; i < r; i++)
            for (int j = 0; j < c; j++) {
                double s = 0;
                for (int k = 0; k < r; k++) s += b[i * r + k] * x[k * c + j];
                y[i * c + j] = 3.4445 * x[i * c + j] + s;
            }
        memcpy(x, y, (size_t)r * c * sizeof *x);
    }
    for (int i = 0; i < R; i++)
        for (int j = 0; j < C; j++) out[i * C + j] = x[wide ? i * C + j : j * R + i];
    free(x), free(a), free(b), free(y);
}

/* Three steps of Muon (its matrices) and AdamW (the rest, skipping Muon's) against the formulas in double: momentum,
 * Nesterov direction, Newton–Schulz, the RMS-matched scale 0.2 sqrt(max(R, C)), decoupled decay; AdamW's moments of
 * Muon's matrices (v) stay 0 and their m is Muon's momentum. */
START_TEST(test_muon_step_reference) {
    lipt_params p;
    make_params(&p);
    lipt_rng rng;
    lipt_rng_seed(&rng, 21);
    lipt_rng_fill_normal(&rng, p.value, p.n_train, 0.1f);
    const size_t n = p.n_train;
    double *x = malloc(n * sizeof *x), *m = calloc(n, sizeof *m), *v = calloc(n, sizeof *v);
    double *dir = malloc(n * sizeof *dir), *o = malloc(n * sizeof *o);
    for (size_t i = 0; i < n; i++) x[i] = p.value[i];
    lipt_muon mu;
    lipt_error err = {0};
    lipt_muon_config mc = lipt_muon_defaults();
    mc.weight_decay = 0.1;
    ck_assert_int_eq(lipt_muon_init(&mu, &mc, &p, &err), LIPT_OK);
    lipt_adamw_config ac = {.lr = 0, .beta1 = 0.9, .beta2 = 0.98, .eps = 1e-8, .weight_decay = 0.1};
    lipt_adamw opt;
    lipt_adamw_init(&opt, &ac);
    const double lr_m = 0.02, lr_a = 3e-3;
    double worst = 0;
    for (int step = 1; step <= 3; step++) {
        lipt_rng_fill_normal(&rng, p.grad, n, 1.0f + 0.5f * (float)step);
        for (int k = 0; k < p.n; k++) {
            const lipt_tensor *t = p.list[k];
            if (p.flags[k] & LIPT_PARAM_BUFFER) continue;
            const size_t off = (size_t)(t->data - p.value), len = t->numel;
            if (mu.owned[k]) {
                const int R = t->shape[0], C = t->shape[1];
                for (size_t i = off; i < off + len; i++) {
                    m[i] = 0.95 * m[i] + p.grad[i];
                    dir[i] = p.grad[i] + 0.95 * m[i];
                }
                ref_ns(dir + off, R, C, o + off);
                const double s = 0.2 * sqrt((double)(R > C ? R : C));
                for (size_t i = off; i < off + len; i++) x[i] = x[i] - lr_m * 0.1 * x[i] - lr_m * s * o[i];
            } else {
                const int decay = !(p.flags[k] & LIPT_PARAM_NO_DECAY);
                const double bc1 = 1 - pow(0.9, step), bc2 = 1 - pow(0.98, step);
                for (size_t i = off; i < off + len; i++) {
                    if (decay) x[i] -= lr_a * 0.1 * x[i];
                    m[i] = 0.9 * m[i] + 0.1 * p.grad[i];
                    v[i] = 0.98 * v[i] + 0.02 * (double)p.grad[i] * p.grad[i];
                    x[i] -= lr_a * (m[i] / bc1) / (sqrt(v[i] / bc2) + 1e-8);
                }
            }
        }
        lipt_muon_step(&mu, &p, lr_m);
        lipt_adamw_step_skip(&opt, &p, lr_a, mu.owned);
        /* errors relative to one step's size (lr * 0.2 RMS ~ 1e-3 for Muon, lr_a for AdamW) */
        for (size_t i = 0; i < n; i++) {
            const double e = fabs(p.value[i] - x[i]) / lr_a;
            worst = fmax(worst, e);
            ck_assert_msg(e < 2e-3, "step %d, value %zu: %.9g, reference %.9g", step, i, p.value[i], x[i]);
            const double em = fabs(p.m[i] - m[i]) / fmax(1.0, fabs(m[i]));
            ck_assert_msg(em < 1e-5, "step %d, moment %zu: %.9g, reference %.9g", step, i, p.m[i], m[i]);
        }
        for (int k = 0; k < p.n; k++)
            if (mu.owned[k])
                for (size_t i = 0; i < p.list[k]->numel; i++) ck_assert(p.v[p.list[k]->data - p.value + (long)i] == 0);
    }
    printf("muon step vs double reference: worst |dx| / lr %.3e (tol 2e-3)\n", worst);
    lipt_muon_free(&mu);
    lipt_params_free(&p);
    free(x), free(m), free(v), free(dir), free(o);
}
END_TEST

/* Muon on matrices large enough for its parallel loops and lipt_gemm's blocks: the same bits on 1 and 3 threads. */
START_TEST(test_muon_threads_deterministic) {
    float *res[2];
    size_t n = 0;
    for (int run = 0; run < 2; run++) {
        lipt_set_threads(run == 0 ? 1 : 3);
        lipt_params p;
        lipt_params_init(&p);
        lipt_param_add(&p, "layers.0.ffn.w1", 2, (int[]){96, 384}, 0);
        lipt_param_add(&p, "layers.0.ffn.w2", 2, (int[]){384, 96}, 0);
        lipt_params_finalize(&p);
        lipt_rng rng;
        lipt_rng_seed(&rng, 3);
        lipt_rng_fill_normal(&rng, p.value, p.n_train, 0.05f);
        lipt_muon mu;
        lipt_error err = {0};
        lipt_muon_config mc = lipt_muon_defaults();
        mc.weight_decay = 0.01;
        ck_assert_int_eq(lipt_muon_init(&mu, &mc, &p, &err), LIPT_OK);
        for (int s = 0; s < 3; s++) {
            lipt_rng_fill_normal(&rng, p.grad, p.n_train, 1.0f);
            lipt_muon_step(&mu, &p, 0.01);
        }
        n = p.n_train;
        res[run] = malloc(2 * n * sizeof(float));
        memcpy(res[run], p.value, n * sizeof(float));
        memcpy(res[run] + n, p.m, n * sizeof(float));
        lipt_muon_free(&mu);
        lipt_params_free(&p);
    }
    ck_assert_msg(memcmp(res[0], res[1], 2 * n * sizeof(float)) == 0, "muon: 1 and 3 threads differ");
    free(res[0]);
    free(res[1]);
    lipt_set_threads(2);
}
END_TEST

/* AdamW with an all-zero skip list is lipt_adamw_step_lr, bit for bit. */
START_TEST(test_adamw_skip_none) {
    float *res[2];
    size_t n = 0;
    for (int run = 0; run < 2; run++) {
        lipt_params p;
        make_params(&p);
        lipt_rng rng;
        lipt_rng_seed(&rng, 8);
        lipt_rng_fill_normal(&rng, p.value, p.n_train, 0.1f);
        unsigned char *none = calloc((size_t)p.n, 1);
        lipt_adamw_config ac = lipt_adamw_defaults();
        lipt_adamw opt;
        lipt_adamw_init(&opt, &ac);
        for (int s = 0; s < 3; s++) {
            lipt_rng_fill_normal(&rng, p.grad, p.n_train, 1.0f);
            if (run == 0) lipt_adamw_step_lr(&opt, &p, 1e-2);
            else lipt_adamw_step_skip(&opt, &p, 1e-2, none);
        }
        n = p.n_train;
        res[run] = malloc(n * sizeof(float));
        memcpy(res[run], p.value, n * sizeof(float));
        free(none);
        lipt_params_free(&p);
    }
    ck_assert(memcmp(res[0], res[1], n * sizeof(float)) == 0);
    free(res[0]);
    free(res[1]);
}
END_TEST

int main(void) {
    lipt_set_threads(2);
    Suite *s = suite_create("optim_muon");
    TCase *tc = tcase_create("muon");
    tcase_add_test(tc, test_ns_singular_values);
    tcase_add_test(tc, test_muon_takes);
    tcase_add_test(tc, test_muon_step_reference);
    tcase_add_test(tc, test_muon_threads_deterministic);
    tcase_add_test(tc, test_adamw_skip_none);
    suite_add_tcase(s, tc);
    return tu_run_suite(s);
}
