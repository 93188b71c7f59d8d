/* src/kernels/vmath.h, the vectorised exp, sigmoid, normal CDF, GELU (and its saved derivative), LipSwish and softmax
 * row: accuracy against double references over dense sweeps, GELU's table lanes against a scalar evaluation, the
 * special values (0, under/overflow, ±inf, NaN), loop tails of every length (the zero- or -inf-padded copies must
 * not leak into the results), in-place use, and that lipt_gelu and lipt_lipswish (with its β gradient) give the
 * same bits on 1 and 2 threads. */
#include "testutil.h"

#include <float.h>
#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "kernels/kernels.h"

static float vexp1(float x) { return lipt_vexp(lipt_vset1(x))[0]; }
static float vcdf1(float x) { return lipt_vnormal_cdf(lipt_vset1(x))[0]; }
static double ref_cdf(double x) { return 0.5 * erfc(-x / sqrt(2.0)); }

/* Relative error below 2e-7 wherever the result is a normal float (measured: 8.0e-8). */
START_TEST(test_vexp_accuracy) {
    double worst = 0, at = 0;
    for (double x = -87.3; x <= 88.3; x += 3.3e-4) {
        const float xf = (float)x;
        const double want = exp((double)xf), e = fabs(vexp1(xf) - want) / want;
        if (!(e <= worst)) worst = e, at = xf;
    }
    printf("vexp: worst relative error %.3e at x = %.4f\n", worst, at);
    ck_assert_msg(worst < 2e-7, "vexp relative error %.3e at x = %g", worst, at);
}
END_TEST

START_TEST(test_vexp_special) {
    ck_assert(vexp1(0.0f) == 1.0f);
    ck_assert(vexp1(-0.0f) == 1.0f);
    ck_assert(vexp1(-88.0f) == 0.0f); /* below FLT_MIN: flushed to 0, never a denormal or garbage */
    ck_assert(vexp1(-1e30f) == 0.0f);
    ck_assert(vexp1(-INFINITY) == 0.0f);
    ck_assert(isinf(vexp1(89.0f)) && vexp1(89.0f) > 0);
    ck_assert(isinf(vexp1(INFINITY)));
    ck_assert(isnan(vexp1(NAN)));
    /* the two ends of the computed range stay finite and accurate */
    ck_assert(fabs(vexp1(-87.3f) - exp((double)-87.3f)) / exp((double)-87.3f) < 1e-6);
    ck_assert(fabs(vexp1(88.37f) - exp((double)88.37f)) / exp((double)88.37f) < 1e-6);
    /* each lane on its own */
    lipt_vf v;
    for (int i = 0; i < LIPT_VW; i++) v[i] = (float)(i - 3) * 5.0f;
    v[0] = NAN;
    const lipt_vf y = lipt_vexp(v);
    ck_assert(isnan(y[0]));
    for (int i = 1; i < LIPT_VW; i++) ck_assert(fabs(y[i] - exp((double)v[i])) <= 2e-7 * exp((double)v[i]));
}
END_TEST

/* Φ: relative error from both tails. Below |x| = LIPT_GELU_TABLE_MAX the tables are good to 9e-8 (measured 9.2e-8 in
 * float); beyond, the erfcc form's exp(p - z²) loses about z² ulps of its argument, so the bound grows with x²
 * (measured 1.9e-5 at x = -12.8, where Φ ≈ 1e-37). */
START_TEST(test_vnormal_cdf_accuracy) {
    double worst_core = 0, worst_tail = 0;
    for (double x = -12.5; x <= 12.5; x += 1.7e-4) {
        const float xf = (float)x;
        const double want = ref_cdf(xf), e = fabs(vcdf1(xf) - want) / want;
        if (fabsf(xf) < LIPT_GELU_TABLE_MAX) {
            if (!(e <= worst_core)) worst_core = e;
            ck_assert_msg(e < 1.2e-7, "Phi(%g) relative error %.3e", xf, e);
        } else if (!(e <= worst_tail)) {
            worst_tail = e;
        }
        ck_assert_msg(e < 1e-6 + 1.5e-7 * xf * xf, "Phi(%g) relative error %.3e", xf, e);
    }
    printf("vnormal_cdf: worst relative error %.3e for |x| < %g, %.3e for %g <= |x| <= 12.5\n", worst_core,
           LIPT_GELU_TABLE_MAX, worst_tail, LIPT_GELU_TABLE_MAX);
    ck_assert(vcdf1(0.0f) == 0.5f && vcdf1(-0.0f) == 0.5f);
    ck_assert(vcdf1(INFINITY) == 1.0f);
    ck_assert(vcdf1(-INFINITY) == 0.0f);
    ck_assert(vcdf1(-20.0f) == 0.0f && vcdf1(20.0f) == 1.0f);
    ck_assert(isnan(vcdf1(NAN)));
}
END_TEST

/* GELU'(x) = Φ(x) + x φ(x) in double. */
#define SQRT_2PI 2.50662827463100050242
static double ref_gelu_grad(double x) { return ref_cdf(x) + x * exp(-0.5 * x * x) / SQRT_2PI; }

/* lipt_vgelu's y = x Φ(x) and saved GELU'(x) on a dense grid of 1.6e7 points over [-20, 20] against double:
 * relative error of y, and GELU''s error relative to Φ(x) + |x| φ(x), the size of its two terms (it crosses zero
 * at x ≈ -0.75). Inside the tables' range: y within 1.6e-7 (measured 1.45e-7), GELU' within 1.4e-7 (1.27e-7); the
 * erfcc form beyond within its x²-growing bound (1.9e-5 and 4.0e-6 at most, measured); the flushed far tail
 * (Φ or φ below FLT_MIN) skipped. Breaking one table coefficient or the Horner order fails here. */
START_TEST(test_vgelu_dense_accuracy) {
    enum { B = 4096 };
    const long N = 16000000;
    static float x[B], y[B], d[B];
    double wy[2] = {0}, wd[2] = {0};
    float ay[2] = {0}, ad[2] = {0};
    for (long k0 = 0; k0 <= N; k0 += B) {
        int nb = 0;
        for (long k = k0; k <= N && nb < B; k++) x[nb++] = (float)(-20.0 + 40.0 * (double)k / (double)N);
        lipt_vgelu(x, y, d, (size_t)nb);
        for (int i = 0; i < nb; i++) {
            const double xd = x[i], P = ref_cdf(xd), e2 = exp(-0.5 * xd * xd);
            if (P < FLT_MIN || e2 < FLT_MIN) continue;
            const int tail = !(fabsf(x[i]) < LIPT_GELU_TABLE_MAX);
            const double ey = xd == 0 ? fabs(y[i]) : fabs(y[i] - xd * P) / fabs(xd * P);
            const double ed = fabs(d[i] - ref_gelu_grad(xd)) / (P + fabs(xd) * e2 / SQRT_2PI);
            if (!(ey <= wy[tail])) wy[tail] = ey, ay[tail] = x[i];
            if (!(ed <= wd[tail])) wd[tail] = ed, ad[tail] = x[i];
        }
    }
    printf("vgelu dense grid: |x| < %g: y rel err %.3e (x = %g), GELU' err %.3e (x = %g); beyond: %.3e (x = %g), "
           "%.3e (x = %g)\n",
           LIPT_GELU_TABLE_MAX, wy[0], ay[0], wd[0], ad[0], wy[1], ay[1], wd[1], ad[1]);
    ck_assert_msg(wy[0] < 1.6e-7, "gelu rel err %.3e at x = %g", wy[0], ay[0]);
    ck_assert_msg(wd[0] < 1.4e-7, "gelu' err %.3e at x = %g", wd[0], ad[0]);
    ck_assert_msg(wy[1] < 2.5e-5, "gelu rel err %.3e at x = %g (tail)", wy[1], ay[1]);
    ck_assert_msg(wd[1] < 6e-6, "gelu' err %.3e at x = %g (tail)", wd[1], ad[1]);
}
END_TEST

/* The tables' evaluation written out one float at a time (no vectors): what each lane of lipt_vgelu_table_n must
 * compute, so its bits cannot depend on the vector width (16, 8, 4 or scalar). */
static void scalar_table(float x, float *cdf, float *der) {
    const float magic = 12582912.0f, a = fabsf(x), w = a * 8.0f, r = w + magic, u = w - (r - magic);
    int32_t bits;
    memcpy(&bits, &r, sizeof bits);
    const int i = bits & 31;
    const float(*S)[32] = lipt_gelu_tab_S, (*D)[32] = lipt_gelu_tab_D;
    float s = S[6][i] * u + S[5][i];
    s = s * u + S[4][i];
    s = s * u + S[3][i];
    s = s * u + S[2][i];
    s = S[0][i] + (s * u + S[1][i]);
    float d = D[4][i] * u + D[3][i];
    d = d * u + D[2][i];
    d = d * u + D[1][i];
    d = d * u + D[0][i];
    *cdf = x < 0 ? s : 1.0f - s;
    *der = x < 0 ? d : 1.0f - d;
}

/* Every lane on its own: for x over the tables' range (every 17th float bit pattern there, both signs), the bits of
 * the scalar evaluation above, whatever the other lanes hold (in-range values, or values that send the vector
 * through the erfcc path: 5, -30, inf, NaN); lipt_vgelu's y = x Φ and GELU' likewise. */
START_TEST(test_vgelu_lanes_independent) {
    const float fill[] = {0.3f, 5.0f, -30.0f, INFINITY, NAN};
    long checked = 0;
    const float lim = LIPT_GELU_TABLE_MAX;
    uint32_t lim_bits;
    memcpy(&lim_bits, &lim, sizeof lim_bits);
    for (uint32_t b = 0; b < lim_bits; b += 17 * 4099)
        for (int sign = 0; sign < 2; sign++) {
            const uint32_t bb = b | (sign ? 0x80000000u : 0);
            float xv, c1, d1;
            memcpy(&xv, &bb, sizeof xv);
            scalar_table(xv, &c1, &d1);
            for (int f = 0; f < 5; f++) {
                float in[LIPT_VW], y[LIPT_VW], d[LIPT_VW];
                const int lane = (int)(b % LIPT_VW);
                for (int l = 0; l < LIPT_VW; l++) in[l] = fill[f];
                in[lane] = xv;
                const lipt_vf c = lipt_vnormal_cdf(lipt_vload(in));
                lipt_vgelu(in, y, d, LIPT_VW);
                ck_assert_msg(memcmp(&c[lane], &c1, sizeof c1) == 0, "Phi(%a) fill %g: %a vs %a", xv, fill[f], c[lane],
                              c1);
                const float y1 = xv * c1;
                ck_assert_msg(memcmp(&y[lane], &y1, sizeof y1) == 0 && memcmp(&d[lane], &d1, sizeof d1) == 0,
                              "gelu(%a) fill %g", xv, fill[f]);
                checked++;
            }
        }
    ck_assert(checked > 10000);
}
END_TEST

/* The logistic function from both sides: relative error (the small side is e^-|z| / (1 + e^-|z|), kept accurate
 * far into the tail), exact 1/2 at 0, saturation without overflow, NaN through. */
START_TEST(test_vsigmoid) {
    double worst = 0, at = 0;
    for (double z = -87.0; z <= 87.0; z += 1.1e-3) {
        const float zf = (float)z;
        const double want = 1.0 / (1.0 + exp(-(double)zf)), e = fabs(lipt_vsigmoid(lipt_vset1(zf))[0] - want) / want;
        if (!(e <= worst)) worst = e, at = zf;
    }
    printf("vsigmoid: worst relative error %.3e at z = %.3f\n", worst, at);
    ck_assert_msg(worst < 4e-7, "sigmoid relative error %.3e at %g", worst, at);
    ck_assert(lipt_vsigmoid(lipt_vset1(0.0f))[0] == 0.5f);
    ck_assert(lipt_vsigmoid(lipt_vset1(1e30f))[0] == 1.0f && lipt_vsigmoid(lipt_vset1(INFINITY))[0] == 1.0f);
    ck_assert(lipt_vsigmoid(lipt_vset1(-1e30f))[0] == 0.0f && lipt_vsigmoid(lipt_vset1(-INFINITY))[0] == 0.0f);
    ck_assert(isnan(lipt_vsigmoid(lipt_vset1(NAN))[0]));
}
END_TEST

/* lipt_vgelu on every length 0..3 vectors + 1, against the double GELU and against itself in place; y is x times
 * lipt_vnormal_cdf's Φ, the saved GELU' matches the double one; nothing past n is written. */
START_TEST(test_vgelu_tails) {
    enum { MAXN = 3 * LIPT_VW + 1 };
    float x[MAXN + 1], y[MAXN + 1], c[MAXN + 1], z[MAXN + 1];
    for (int n = 0; n <= MAXN; n++) {
        for (int i = 0; i <= MAXN; i++) x[i] = (float)(0.37 * i - 4.1), y[i] = c[i] = -7.0f;
        lipt_vgelu(x, y, c, (size_t)n);
        for (int i = 0; i < n; i++) {
            const double want = x[i] * ref_cdf(x[i]);
            ck_assert_msg(fabs(y[i] - want) <= 1e-6 * fmax(1.0, fabs(want)), "n %d i %d: %g vs %g", n, i, y[i], want);
            ck_assert(y[i] == x[i] * vcdf1(x[i]));
            ck_assert_msg(fabs(c[i] - ref_gelu_grad(x[i])) <= 1e-6, "n %d i %d: gelu' %g", n, i, c[i]);
        }
        for (int i = n; i <= MAXN; i++) ck_assert_msg(y[i] == -7.0f && c[i] == -7.0f, "n %d: wrote past the end", n);
        memcpy(z, x, sizeof z);
        lipt_vgelu(z, z, NULL, (size_t)n);
        ck_assert(memcmp(z, y, (size_t)n * sizeof(float)) == 0);
    }
}
END_TEST

/* Softmax rows of every length against a double softmax, with and without the subtracted kn term; large logits
 * (a naive exp would overflow) and entries past n untouched. */
START_TEST(test_vsoftmax_row) {
    enum { MAXN = 3 * LIPT_VW + 2 };
    float row[MAXN + 1], kn[MAXN + 1];
    double worst = 0;
    lipt_rng rng;
    lipt_rng_seed(&rng, 5);
    for (int use_kn = 0; use_kn < 2; use_kn++)
        for (int n = 1; n <= MAXN; n++)
            for (int scale = 0; scale < 2; scale++) {
                lipt_rng_fill_normal(&rng, row, MAXN + 1, scale ? 40.0f : 2.0f);
                lipt_rng_fill_normal(&rng, kn, MAXN + 1, 1.0f);
                if (scale) row[n / 2] += 500.0f;
                double ref[MAXN], mx = -INFINITY, sum = 0;
                for (int j = 0; j < n; j++) {
                    ref[j] = (double)row[j] - (use_kn ? kn[j] : 0);
                    mx = fmax(mx, ref[j]);
                }
                for (int j = 0; j < n; j++) sum += (ref[j] = exp(ref[j] - mx));
                const float sentinel = row[n];
                lipt_vsoftmax_row(row, (size_t)n, use_kn ? kn : NULL);
                double total = 0;
                for (int j = 0; j < n; j++) {
                    const double e = fabs(row[j] - ref[j] / sum);
                    if (!(e <= worst)) worst = e;
                    total += row[j];
                }
                ck_assert_msg(fabs(total - 1) < 1e-6, "n %d: row sums to %.9f", n, total);
                ck_assert(row[n] == sentinel);
            }
    printf("vsoftmax_row: worst absolute error %.3e\n", worst);
    ck_assert_msg(worst < 3e-7, "softmax row error %.3e", worst);
}
END_TEST

/* lipt_vlipswish on every length against the double reference, in place, nothing written past n. */
START_TEST(test_vlipswish_tails) {
    enum { MAXN = 3 * LIPT_VW + 1 };
    float x[MAXN + 1], y[MAXN + 1];
    for (int n = 0; n <= MAXN; n++) {
        for (int i = 0; i <= MAXN; i++) x[i] = (float)(0.61 * i - 7.3), y[i] = -7.0f;
        lipt_vlipswish(x, y, (size_t)n, 0.8f, 1.1f);
        for (int i = 0; i < n; i++) {
            const double want = x[i] / (1.0 + exp(-0.8 * (double)x[i])) / 1.1;
            ck_assert_msg(fabs(y[i] - want) <= 1e-6 * fmax(1.0, fabs(want)), "n %d i %d: %g vs %g", n, i, y[i], want);
        }
        for (int i = n; i <= MAXN; i++) ck_assert_msg(y[i] == -7.0f, "n %d: wrote past the end", n);
        lipt_vlipswish(x, x, (size_t)n, 0.8f, 1.1f);
        ck_assert(memcmp(x, y, (size_t)n * sizeof(float)) == 0);
    }
}
END_TEST

/* The ops split their work in fixed chunks (and LipSwish sums its β gradient chunk by chunk in order), so the
 * thread count cannot change a bit of the result. */
static void activation_threads_bitwise(int lipswish) {
    lipt_rng rng;
    lipt_rng_seed(&rng, 9);
    lipt_tensor *X = tu_tensor(&rng, 2, (int[]){37, 1001}, 3.0f, 1);
    lipt_tensor *Beta = tu_tensor(NULL, 1, (int[]){1}, 0, 1);
    Beta->data[0] = 1.3f;
    float *out[2], *grad[2], dbeta[2];
    for (int t = 0; t < 2; t++) {
        lipt_set_threads(t + 1);
        lipt_ctx ctx;
        lipt_ctx_init(&ctx, 1 << 20, 1);
        Beta->grad = NULL;
        lipt_tensor *Y = lipswish ? lipt_lipswish(&ctx, X, Beta) : lipt_gelu(&ctx, X);
        float *r = malloc(Y->numel * sizeof(float));
        for (size_t i = 0; i < Y->numel; i++) r[i] = (float)((i % 7) - 3);
        X->grad = NULL;
        lipt_backward_seeded(&ctx, Y, r);
        out[t] = malloc(X->numel * sizeof(float));
        grad[t] = malloc(X->numel * sizeof(float));
        memcpy(out[t], Y->data, X->numel * sizeof(float));
        memcpy(grad[t], X->grad, X->numel * sizeof(float));
        dbeta[t] = lipswish ? Beta->grad[0] : 0.0f;
        X->grad = Beta->grad = NULL;
        free(r);
        lipt_ctx_free(&ctx);
    }
    ck_assert(memcmp(out[0], out[1], X->numel * sizeof(float)) == 0);
    ck_assert(memcmp(grad[0], grad[1], X->numel * sizeof(float)) == 0);
    ck_assert(dbeta[0] == dbeta[1]);
    for (int t = 0; t < 2; t++) free(out[t]), free(grad[t]);
    tu_free(X);
    tu_free(Beta);
}
/* The interleaved forms (LIPT_VIL vectors at a time, used by the GELU and the softmax rows) give the
 * bits of the one-vector forms, lane by lane, over a dense sweep with the special values mixed in; and the GELU's
 * interleaved main loop the bits of its one-vector tail loop. */
START_TEST(test_interleaved_bitwise) {
    const float special[] = {0.0f, -0.0f, NAN, INFINITY, -INFINITY, -88.0f, 89.0f, -1e30f, 1e30f, 1e-40f};
    const int ns = (int)(sizeof special / sizeof special[0]);
    long checked = 0;
    for (int base = 0; base < 40000; base += LIPT_VIL * LIPT_VW) {
        lipt_vf x[LIPT_VIL], ex[LIPT_VIL], cd[LIPT_VIL];
        for (int k = 0; k < LIPT_VIL; k++)
            for (int l = 0; l < LIPT_VW; l++) {
                const int i = base + k * LIPT_VW + l;
                x[k][l] = i % 97 == 0 ? special[(i / 97) % ns] : (float)((i * 7919) % 40000) * 2.5e-3f - 50.0f;
            }
        memcpy(ex, x, sizeof x);
        memcpy(cd, x, sizeof x);
        lipt_vexp_n(ex, LIPT_VIL);
        lipt_vnormal_cdf_n(cd, LIPT_VIL);
        for (int k = 0; k < LIPT_VIL; k++) {
            const lipt_vf e1 = lipt_vexp(x[k]), c1 = lipt_vnormal_cdf(x[k]);
            ck_assert(memcmp(&e1, &ex[k], sizeof e1) == 0);
            ck_assert(memcmp(&c1, &cd[k], sizeof c1) == 0);
            checked += LIPT_VW;
        }
    }
    ck_assert(checked >= 40000);
    /* lipt_vgelu on n floats: the first n - n % (LIPT_VIL * LIPT_VW) through the interleaved loop; the same floats
     * one at a time (n = 1, the tail loop) must agree */
    enum { N = 3 * LIPT_VIL * LIPT_VW + 5 };
    float in[N], y[N], c[N], y1, c1;
    for (int i = 0; i < N; i++) in[i] = (float)(i - N / 2) * 0.37f;
    lipt_vgelu(in, y, c, N);
    for (int i = 0; i < N; i++) {
        lipt_vgelu(in + i, &y1, &c1, 1);
        ck_assert(memcmp(&y1, &y[i], sizeof y1) == 0 && memcmp(&c1, &c[i], sizeof c1) == 0);
    }
}
END_TEST

START_TEST(test_gelu_threads_bitwise) { activation_threads_bitwise(0); }
END_TEST
START_TEST(test_lipswish_threads_bitwise) { activation_threads_bitwise(1); }
END_TEST

int main(void) {
    lipt_set_threads(2);
    Suite *s = suite_create("ops_vmath");
    TCase *tc = tcase_create("vmath");
    tcase_add_test(tc, test_vexp_accuracy);
    tcase_add_test(tc, test_vexp_special);
    tcase_add_test(tc, test_vnormal_cdf_accuracy);
    tcase_add_test(tc, test_vsigmoid);
    tcase_add_test(tc, test_vgelu_tails);
    tcase_add_test(tc, test_vgelu_dense_accuracy);
    tcase_add_test(tc, test_vgelu_lanes_independent);
    tcase_add_test(tc, test_vlipswish_tails);
    tcase_add_test(tc, test_vsoftmax_row);
    tcase_add_test(tc, test_interleaved_bitwise);
    tcase_add_test(tc, test_gelu_threads_bitwise);
    tcase_add_test(tc, test_lipswish_threads_bitwise);
    suite_add_tcase(s, tc);
    return tu_run_suite(s);
}
