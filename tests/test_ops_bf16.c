/* --precision: bf16 rounding (ties to even, NaN, Inf, subnormals, the largest floats) against a reference in
 * double; the bf16-emulated product against sgemm on pre-rounded operands, bit for bit (also from two threads at
 * once); the oneDNN wrapper with float32 operands against sgemm (all transposes, padded rows, alpha, beta, the
 * primitive cache and its eviction), which leaves only the data type untested on a CPU without AVX512_BF16; the real
 * bf16 path against bf16-emulated where the CPU has AVX512_BF16 (1 and 2 threads, each product twice: the same bits
 * on the same thread count; else skipped, saying so, and the error checked);
 * models at bf16-emulated: the loss near float32's, gradients by finite differences and against float32's, the
 * decoder against the forward pass. */
#include "testutil.h"

#include <cblas.h>
#include <float.h>
#include <math.h>
#include <omp.h>
#include <stdlib.h>
#include <string.h>

#include "lipt/decode.h"
#include "lipt/model.h"
#include "autograd/kctx.h"
#include "kernels/kernels.h"

static uint32_t bits_of(float x) {
    uint32_t u;
    memcpy(&u, &x, sizeof u);
    return u;
}

static float float_of(uint32_t u) {
    float x;
    memcpy(&x, &u, sizeof x);
    return x;
}

/* The nearest bf16 by comparing distances in double (ties to the even pattern); NaN -> any NaN. Above the largest
 * bf16, Inf counts as the next value up (2^128), as in IEEE rounding. */
static uint16_t ref_bits(uint32_t u) {
    const float x = float_of(u);
    if (isnan(x)) return 0x7FC0;
    const uint16_t lo = (uint16_t)(u >> 16); /* truncation: toward zero */
    if ((u & 0xFFFF) == 0) return lo;
    const uint16_t hi = (uint16_t)(lo + 1); /* away from zero (for an Inf input the low half is 0: returned above) */
    const double mag = fabs((double)x);
    const double a = fabs((double)float_of((uint32_t)lo << 16));
    const double b = ((hi & 0x7FFF) == 0x7F80) ? ldexp(1.0, 128) : fabs((double)float_of((uint32_t)hi << 16));
    if (mag - a < b - mag) return lo;
    if (mag - a > b - mag) return hi;
    return (lo & 1) ? hi : lo;
}

START_TEST(test_rounding) {
    struct { uint32_t in; uint16_t out; const char *what; } cases[] = {
        {0x3F800000, 0x3F80, "1 exact"},
        {0x3F808000, 0x3F80, "1 + half an ulp: tie to even (down)"},
        {0x3F818000, 0x3F82, "tie to even (up)"},
        {0x3F808001, 0x3F81, "just above the tie"},
        {0x3F807FFF, 0x3F80, "just below the tie"},
        {0xBF808000, 0xBF80, "negative tie"},
        {0xBF818000, 0xBF82, "negative tie up"},
        {0x7F800000, 0x7F80, "+Inf"},
        {0xFF800000, 0xFF80, "-Inf"},
        {0x7F7FFFFF, 0x7F80, "FLT_MAX rounds to Inf"},
        {0xFF7FFFFF, 0xFF80, "-FLT_MAX rounds to -Inf"},
        {0x7F7F7FFF, 0x7F7F, "just below the midpoint to Inf: the largest bf16"},
        {0x7F7F8000, 0x7F80, "the midpoint to Inf: ties to even = Inf"},
        {0x00000000, 0x0000, "+0"},
        {0x80000000, 0x8000, "-0"},
        {0x00000001, 0x0000, "smallest subnormal rounds to 0"},
        {0x00008000, 0x0000, "subnormal tie to even (0)"},
        {0x00018000, 0x0002, "subnormal tie to even (up)"},
        {0x00010000, 0x0001, "smallest bf16 subnormal, exact"},
        {0x007FFFFF, 0x0080, "largest subnormal rounds up to the smallest normal"},
        {0x80008001, 0x8001, "negative subnormal above the tie"},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        const uint16_t got = lipt_bf16_bits(float_of(cases[i].in));
        ck_assert_msg(got == cases[i].out, "%s: 0x%08x -> 0x%04x, want 0x%04x", cases[i].what, cases[i].in, got,
                      cases[i].out);
        ck_assert_msg(got == ref_bits(cases[i].in), "reference disagrees on %s", cases[i].what);
    }
    /* NaN stays NaN, sign kept, even when its payload is only in the low half (which the carry would make Inf) */
    const uint32_t nans[] = {0x7FC00000, 0x7F800001, 0x7F80FFFF, 0xFF800001, 0xFFFFFFFF, 0x7FBFFFFF};
    for (size_t i = 0; i < sizeof nans / sizeof nans[0]; i++) {
        const float r = lipt_bf16_round(float_of(nans[i]));
        ck_assert_msg(isnan(r) && signbit(r) == signbit(float_of(nans[i])), "NaN 0x%08x -> 0x%08x", nans[i],
                      bits_of(r));
    }
    /* every low half under a few high halves (normal, subnormal, near the top), and random floats */
    const uint32_t highs[] = {0x3F80, 0x0000, 0x0012, 0x7F7F, 0xC2F7, 0x8001, 0x4B00};
    long n = 0;
    for (size_t h = 0; h < sizeof highs / sizeof highs[0]; h++)
        for (uint32_t lo = 0; lo < 0x10000; lo++, n++) {
            const uint32_t u = highs[h] << 16 | lo;
            ck_assert_msg(lipt_bf16_bits(float_of(u)) == ref_bits(u), "0x%08x", u);
        }
    lipt_rng rng;
    lipt_rng_seed(&rng, 5);
    for (int i = 0; i < 1 << 20; i++, n++) {
        const uint32_t u = (uint32_t)lipt_rng_u64(&rng);
        if (isnan(float_of(u))) continue;
        ck_assert_msg(lipt_bf16_bits(float_of(u)) == ref_bits(u), "0x%08x", u);
    }
    /* the array conversions (the vectorised loops) agree with the scalar one, NaNs included, with a padded stride */
    enum { R = 37, Cn = 45, LD = 51 };
    float *src = malloc(sizeof(float) * R * LD), *dst = malloc(sizeof(float) * R * Cn);
    uint16_t *dh = malloc(sizeof(uint16_t) * R * Cn);
    for (int i = 0; i < R * LD; i++) src[i] = float_of((uint32_t)lipt_rng_u64(&rng));
    src[3] = float_of(0x7F800001);
    lipt_lowp_pack(LIPT_PACK_ROUND, src, R, Cn, LD, dst);
    lipt_lowp_pack(LIPT_PACK_BF16, src, R, Cn, LD, dh);
    for (int r = 0; r < R; r++)
        for (int c = 0; c < Cn; c++) {
            const uint16_t want = lipt_bf16_bits(src[r * LD + c]);
            ck_assert(bits_of(dst[r * Cn + c]) == (uint32_t)want << 16 && dh[r * Cn + c] == want);
        }
    free(src);
    free(dst);
    free(dh);
    printf("bf16 rounding: %ld inputs equal the double-precision reference (ties to even, NaN, Inf, subnormals)\n", n);
}
END_TEST

/* A [rows, ld] matrix of normals (the padding too). */
static float *rand_mat(lipt_rng *rng, int rows, int ld) {
    float *m = malloc(sizeof(float) * (size_t)(rows > 0 ? rows : 1) * (ld > 0 ? ld : 1));
    lipt_rng_fill_normal(rng, m, (size_t)rows * ld, 1.0f);
    return m;
}

static void round_all(float *m, size_t n) {
    for (size_t i = 0; i < n; i++) m[i] = lipt_bf16_round(m[i]);
}

/* One product at bf16-emulated against sgemm on the same operands rounded beforehand: the same bits. Returns the
 * largest relative difference from the float32 product (how much the rounding moved it). */
static double emulated_case(lipt_ctx *ctx, lipt_rng *rng, int ta, int tb, int M, int N, int K, int pad, float alpha,
                            float beta) {
    const int ra = ta ? K : M, ca = ta ? M : K, rb = tb ? N : K, cb = tb ? K : N;
    const int lda = ca + pad, ldb = cb + pad, ldc = N + pad;
    float *A = rand_mat(rng, ra, lda), *B = rand_mat(rng, rb, ldb), *C0 = rand_mat(rng, M, ldc);
    const size_t nc = sizeof(float) * (size_t)M * ldc;
    float *C1 = malloc(nc), *C2 = malloc(nc), *C3 = malloc(nc);
    memcpy(C1, C0, sizeof(float) * M * ldc);
    memcpy(C2, C0, sizeof(float) * M * ldc);
    memcpy(C3, C0, sizeof(float) * M * ldc);
    float *Ar = malloc(sizeof(float) * ra * lda), *Br = malloc(sizeof(float) * rb * ldb);
    memcpy(Ar, A, sizeof(float) * ra * lda);
    memcpy(Br, B, sizeof(float) * rb * ldb);
    round_all(Ar, (size_t)ra * lda);
    round_all(Br, (size_t)rb * ldb);
    lipt_gemm_p(LIPT_KC(ctx), ta, tb, M, N, K, alpha, A, lda, B, ldb, beta, C1, ldc);
    lipt_gemm(ta, tb, M, N, K, alpha, Ar, lda, Br, ldb, beta, C2, ldc); /* the float32 product emulation runs on */
    ck_assert_msg(memcmp(C1, C2, sizeof(float) * M * ldc) == 0, "emulated differs from lipt_gemm on rounded operands: "
                  "ta %d tb %d M %d N %d K %d pad %d", ta, tb, M, N, K, pad);
    lipt_gemm(ta, tb, M, N, K, alpha, A, lda, B, ldb, beta, C3, ldc);
    double dmax = 0, smax = 0;
    for (int i = 0; i < M; i++)
        for (int j = 0; j < N; j++) {
            dmax = fmax(dmax, fabs((double)C1[i * ldc + j] - C3[i * ldc + j]));
            smax = fmax(smax, fabs((double)C3[i * ldc + j]));
        }
    free(A), free(B), free(C0), free(C1), free(C2), free(C3), free(Ar), free(Br);
    return smax > 0 ? dmax / smax : 0;
}

START_TEST(test_emulated_gemm) {
    lipt_ctx ctx;
    lipt_ctx_init(&ctx, 1 << 12, 1);
    lipt_error err = {0};
    ck_assert(lipt_ctx_set_precision(&ctx, LIPT_PRECISION_BF16_EMULATED, &err) == LIPT_OK);
    lipt_rng rng;
    lipt_rng_seed(&rng, 3);
    const int shapes[][3] = {{1, 1, 1}, {7, 5, 3}, {33, 17, 64}, {64, 128, 32}, {300, 257, 129}, {1, 40, 9}};
    double moved = 0;
    int n = 0;
    for (size_t s = 0; s < sizeof shapes / sizeof shapes[0]; s++)
        for (int t = 0; t < 4; t++)
            for (int pad = 0; pad <= 3; pad += 3) {
                moved = fmax(moved, emulated_case(&ctx, &rng, t & 1, t >> 1, shapes[s][0], shapes[s][1], shapes[s][2],
                                                  pad, pad ? 0.37f : 1.0f, (t + s) % 2 ? 1.0f : 0.0f));
                n++;
            }
    /* the rounding really happened, at bf16's scale (8 significant bits: a relative 2^-9 per operand) */
    ck_assert_msg(moved > 1e-4 && moved < 5e-2, "emulated moved the product by %.3g of its scale", moved);
    /* two threads at once, each on its own scratch: still the same bits */
    omp_set_max_active_levels(1);
#pragma omp parallel num_threads(2)
    {
        lipt_rng r;
        lipt_rng_seed(&r, 100 + (uint64_t)omp_get_thread_num());
        for (int i = 0; i < 20; i++)
            emulated_case(&ctx, &r, i & 1, (i >> 1) & 1, 40 + i, 33, 70 - i, i % 3, 1.0f, 0.0f);
    }
    lipt_ctx_free(&ctx);
    printf("bf16-emulated GEMM: %d cases equal sgemm on pre-rounded operands bit for bit (2 threads too); largest "
           "relative move from float32: %.3g\n", n, moved);
}
END_TEST

/* The oneDNN wrapper with float32 operands against sgemm; guard values around C's rows must survive. */
static double dnnl_case(lipt_dnnl *d, lipt_rng *rng, int ta, int tb, int M, int N, int K, int pad, float alpha,
                        float beta) {
    const int ra = ta ? K : M, ca = ta ? M : K, rb = tb ? N : K, cb = tb ? K : N;
    const int lda = ca + pad, ldb = cb + pad, ldc = N + pad;
    float *A = rand_mat(rng, ra, lda), *B = rand_mat(rng, rb, ldb), *C1 = rand_mat(rng, M, ldc);
    float *C2 = malloc(sizeof(float) * (size_t)M * ldc);
    if (beta == 0.0f) C1[0] = NAN; /* beta 0 overwrites, as BLAS */
    memcpy(C2, C1, sizeof(float) * (size_t)M * ldc);
    lipt_error err = {0};
    const lipt_status st = lipt_dnnl_gemm(d, LIPT_DNNL_F32, ta, tb, M, N, K, alpha, A, lda, B, ldb, beta, C1, ldc, &err);
    ck_assert_msg(st == LIPT_OK, "%s", err.msg);
    if (beta == 0.0f) C2[0] = 0.0f;
    if (K > 0)
        cblas_sgemm(CblasRowMajor, ta ? CblasTrans : CblasNoTrans, tb ? CblasTrans : CblasNoTrans, M, N, K, alpha, A,
                    lda, B, ldb, beta, C2, ldc);
    else
        for (int i = 0; i < M; i++)
            for (int j = 0; j < N; j++) C2[i * ldc + j] *= beta;
    double e = 0, scale = 1e-6;
    for (int i = 0; i < M; i++)
        for (int j = 0; j < ldc; j++) {
            const double x = C1[i * ldc + j], y = C2[i * ldc + j];
            if (j >= N) ck_assert_msg(x == y, "oneDNN wrote outside C's rows (column %d of ldc %d)", j, ldc);
            scale = fmax(scale, fabs(y));
            e = fmax(e, fabs(x - y));
            ck_assert_msg(!isnan(x), "NaN in C (ta %d tb %d M %d N %d K %d beta %g)", ta, tb, M, N, K, beta);
        }
    free(A), free(B), free(C1), free(C2);
    return e / scale;
}

START_TEST(test_dnnl_f32) {
    lipt_dnnl *d = NULL;
    lipt_error err = {0};
    if (!lipt_have_dnnl()) {
        ck_assert(lipt_dnnl_create(&d, &err) == LIPT_ERR_ARG && strstr(err.msg, "built without oneDNN"));
        printf("SKIP oneDNN wrapper: this build has no oneDNN (LIPT_DNNL=OFF or libdnnl-dev missing); the wrapper "
               "refuses with: %s\n", err.msg);
        return;
    }
    ck_assert_msg(lipt_dnnl_create(&d, &err) == LIPT_OK, "%s", err.msg);
    lipt_rng rng;
    lipt_rng_seed(&rng, 11);
    const int shapes[][3] = {{1, 1, 1}, {5, 7, 3}, {17, 33, 64}, {64, 128, 64}, {130, 67, 200}, {1, 50, 9}, {6, 4, 0}};
    const float alphas[] = {1.0f, 0.37f}, betas[] = {0.0f, 1.0f, -0.5f};
    double worst = 0;
    int n = 0;
    for (size_t s = 0; s < sizeof shapes / sizeof shapes[0]; s++)
        for (int t = 0; t < 4; t++)
            for (int ab = 0; ab < 6; ab++, n++) {
                const int pad = (int)(s + t) % 3 == 0 ? 0 : 5;
                worst = fmax(worst, dnnl_case(d, &rng, t & 1, t >> 1, shapes[s][0], shapes[s][1], shapes[s][2], pad,
                                              alphas[ab % 2], betas[ab / 2]));
            }
    /* the cache: 24 products of distinct keys (fewer than it holds), twice; the second round only hits */
    for (int round = 0; round < 2; round++) {
        lipt_dnnl_stats before, after;
        lipt_dnnl_get_stats(d, &before);
        for (int i = 0; i < 24; i++)
            worst = fmax(worst, dnnl_case(d, &rng, i & 1, (i >> 1) & 1, 9 + i / 4, 6, 11, i % 3, i % 5 ? 1.0f : 2.0f,
                                          i % 7 ? 0.0f : 1.0f));
        lipt_dnnl_get_stats(d, &after);
        if (round == 1)
            ck_assert_msg(after.misses == before.misses && after.hits - before.hits == 24,
                          "repeated products: %ld misses, %ld hits of 24", after.misses - before.misses,
                          after.hits - before.hits);
    }
    ck_assert_msg(worst < 1e-5, "oneDNN f32 matmul vs sgemm: relative error %.3g", worst);
    /* more shapes than the cache holds: evictions, still right */
    lipt_dnnl_stats st;
    for (int i = 0; i < LIPT_DNNL_CACHE + 10; i++)
        worst = fmax(worst, dnnl_case(d, &rng, 0, 1, 3 + i, 4, 5, 0, 1.0f, 0.0f));
    lipt_dnnl_get_stats(d, &st);
    ck_assert(st.evictions > 0 && st.entries == LIPT_DNNL_CACHE && worst < 1e-5);
    lipt_dnnl_free(d);
    printf("oneDNN matmul wrapper, float32 operands: %d cases (4 transposes, padded rows, alpha 1 / 0.37, beta "
           "0 / 1 / -0.5, K = 0) within %.3g of sgemm; cache hits on repeats, evictions past %d primitives\n", n, worst,
           LIPT_DNNL_CACHE);
}
END_TEST

/* The real bf16 path where it can run; elsewhere the error it gives. */
START_TEST(test_bf16_real) {
    lipt_error err = {0};
    lipt_ctx ctx;
    lipt_ctx_init(&ctx, 1 << 12, 1);
    const lipt_status st = lipt_ctx_set_precision(&ctx, LIPT_PRECISION_BF16, &err);
    if (!lipt_have_dnnl() || !lipt_cpu_has_avx512_bf16()) {
        ck_assert(st == LIPT_ERR_ARG && ctx.precision == LIPT_PRECISION_FLOAT32);
        ck_assert_msg(strstr(err.msg, lipt_have_dnnl() ? "AVX512_BF16" : "built without oneDNN"), "%s", err.msg);
        printf("SKIP real bf16 vs bf16-emulated: %s (this CPU %s AVX512_BF16); the error: %s\n",
               lipt_have_dnnl() ? "built with oneDNN" : "built without oneDNN",
               lipt_cpu_has_avx512_bf16() ? "has" : "lacks", err.msg);
        lipt_ctx_free(&ctx);
        return;
    }
    ck_assert_msg(st == LIPT_OK, "%s", err.msg);
    lipt_ctx emu;
    lipt_ctx_init(&emu, 1 << 12, 1);
    ck_assert(lipt_ctx_set_precision(&emu, LIPT_PRECISION_BF16_EMULATED, &err) == LIPT_OK);
    lipt_rng rng;
    lipt_rng_seed(&rng, 17);
    double worst = 0;
    /* one product, then two large enough to be cut into blocks (by rows, by columns), on 1 and 2 threads, and a
     * weight gradient's (a long K: with A transposed and B not, cut along K on 2 threads); the large ones also with
     * a bias and with the shared operand already packed */
    const int shapes[4][3] = {{67, 45, 130}, {300, 257, 129}, {64, 1100, 96}, {96, 80, 2100}};
    for (int si = 0; si < 4; si++)
        for (int t = 0; t < 4; t++)
            for (int th = 1; th <= 2; th++)
                for (int bias = 0; bias <= (si > 0); bias++) {
                    const int ta = t & 1, tb = t >> 1, M = shapes[si][0], N = shapes[si][1], K = shapes[si][2], pad = 3;
                    const int lda = (ta ? M : K) + pad, ldb = (tb ? K : N) + pad, ldc = N + pad;
                    float *A = rand_mat(&rng, ta ? K : M, lda), *B = rand_mat(&rng, tb ? N : K, ldb);
                    float *C1 = rand_mat(&rng, M, ldc), *bv = rand_mat(&rng, 1, N);
                    float *C2 = malloc(sizeof(float) * M * ldc);
                    memcpy(C2, C1, sizeof(float) * M * ldc);
                    lipt_set_threads(th);
                    if (bias) {
                        /* B packed beforehand when the cut is by rows (the operand every block shares), else A */
                        const int rows = M >= N;
                        lipt_kctx *kc = LIPT_KC(&ctx);
                        const void *Apk = rows ? NULL : lipt_lowp_pack_arena(kc, A, ta ? K : M, ta ? M : K, lda);
                        const void *Bpk = rows ? lipt_lowp_pack_arena(kc, B, tb ? N : K, tb ? K : N, ldb) : NULL;
                        lipt_gemm_lowp_bias(kc, ta, tb, M, N, K, A, Apk ? (ta ? M : K) : lda, Apk, B,
                                            Bpk ? (tb ? K : N) : ldb, Bpk, bv, 0.5f, C1, ldc);
                        lipt_gemm_lowp_bias(LIPT_KC(&emu), ta, tb, M, N, K, A, lda, NULL, B, ldb, NULL, bv, 0.5f, C2,
                                            ldc);
                    } else {
                        /* twice on the same thread count: the same bits (what bf16 promises; another thread count
                         * only within the summation bound, below) */
                        float *C1b = malloc(sizeof(float) * M * ldc);
                        memcpy(C1b, C1, sizeof(float) * M * ldc);
                        lipt_gemm_p(LIPT_KC(&ctx), ta, tb, M, N, K, 0.5f, A, lda, B, ldb, 1.0f, C1, ldc);
                        lipt_gemm_p(LIPT_KC(&ctx), ta, tb, M, N, K, 0.5f, A, lda, B, ldb, 1.0f, C1b, ldc);
                        ck_assert_msg(memcmp(C1, C1b, sizeof(float) * M * ldc) == 0, "bf16: two runs of ta %d tb %d "
                                      "%dx%dx%d on %d threads differ", ta, tb, M, N, K, th);
                        free(C1b);
                        lipt_gemm_p(LIPT_KC(&emu), ta, tb, M, N, K, 0.5f, A, lda, B, ldb, 1.0f, C2, ldc);
                    }
                    const double e = tu_max_rel_err_f(C1, C2, (size_t)M * ldc, 1e-6);
                    ck_assert_msg(e < 1e-5, "bf16 (oneDNN) vs bf16-emulated: ta %d tb %d %dx%dx%d, %d threads, bias "
                                  "%d: relative error %.3g", ta, tb, M, N, K, th, bias, e);
                    worst = fmax(worst, e);
                    free(A), free(B), free(C1), free(C2), free(bv);
                }
    lipt_set_threads(2);
    /* the same exact products summed in another order, in float32 */
    ck_assert_msg(worst < 1e-5, "bf16 (oneDNN) vs bf16-emulated: relative error %.3g", worst);
    printf("real bf16 matmul (oneDNN) equals bf16-emulated to %.3g (summation order)\n", worst);
    lipt_ctx_free(&emu);
    lipt_ctx_free(&ctx);
}
END_TEST

/* The linear op at a low precision packs x once in the forward (kept for dw) and the output gradient once for
 * both dx and dw. At bf16-emulated that must be float32's linear on the rounded x, w and gradient, bit for bit
 * (the bias gradient sums the unrounded one); real bf16 equals it to summation order. Also with w frozen (x packed
 * per product, not kept) and with no gradient at all. */
enum { RUN_LINEAR, RUN_MATMUL, RUN_LINEAR_GELU, RUN_GELU_LINEAR };
static void linear_run(lipt_precision p, lipt_tensor **in, const float *seed, float *y, float **g, int kind) {
    lipt_ctx ctx;
    lipt_ctx_init(&ctx, 1 << 16, 1);
    lipt_error err = {0};
    ck_assert_msg(lipt_ctx_set_precision(&ctx, p, &err) == LIPT_OK, "%s", err.msg);
    for (int k = 0; k < 3; k++) in[k]->grad = g[k];
    lipt_tensor *out = kind == RUN_MATMUL        ? lipt_matmul(&ctx, in[0], in[1], 0, 0)
                       : kind == RUN_LINEAR_GELU ? lipt_linear_gelu(&ctx, in[0], in[1], in[2])
                       : kind == RUN_GELU_LINEAR ? lipt_gelu(&ctx, lipt_linear(&ctx, in[0], in[1], in[2]))
                                                 : lipt_linear(&ctx, in[0], in[1], in[2]);
    memcpy(y, out->data, out->numel * sizeof(float));
    if (out->requires_grad) lipt_backward_seeded(&ctx, out, seed);
    for (int k = 0; k < 3; k++) in[k]->grad = NULL;
    lipt_ctx_free(&ctx);
}

START_TEST(test_linear_packed) {
    const int shapes[][3] = {{7, 5, 9}, {64, 33, 70}, {300, 130, 17}}; /* M, K, N */
    const int real = lipt_have_dnnl() && lipt_cpu_has_avx512_bf16();
    double worst_real = 0;
    for (int mm = 0; mm < 2; mm++) /* the linear op, then the bias-free projection lipt_matmul(x, w) */
    for (size_t si = 0; si < sizeof shapes / sizeof shapes[0]; si++)
        for (int mode = 0; mode < 3; mode++) { /* 0: x and w train, 1: w frozen, 2: nothing trains */
            const int M = shapes[si][0], K = shapes[si][1], N = shapes[si][2];
            lipt_rng rng;
            lipt_rng_seed(&rng, 90 + si);
            lipt_tensor *X = tu_tensor(&rng, 2, (int[]){M, K}, 1.0f, mode < 2),
                        *W = tu_tensor(&rng, 2, (int[]){K, N}, 1.0f, mode == 0),
                        *Bv = tu_tensor(&rng, 1, (int[]){N}, 1.0f, mode == 0);
            lipt_tensor *Xr = tu_tensor(&rng, 2, (int[]){M, K}, 1.0f, mode < 2),
                        *Wr = tu_tensor(&rng, 2, (int[]){K, N}, 1.0f, mode == 0);
            memcpy(Xr->data, X->data, X->numel * sizeof(float));
            memcpy(Wr->data, W->data, W->numel * sizeof(float));
            round_all(Xr->data, Xr->numel);
            round_all(Wr->data, Wr->numel);
            const size_t n = (size_t)M * N, sz[3] = {(size_t)M * K, (size_t)K * N, (size_t)N};
            float *r = malloc(n * sizeof(float)), *rr = malloc(n * sizeof(float));
            lipt_rng_fill_normal(&rng, r, n, 1.0f);
            memcpy(rr, r, n * sizeof(float));
            round_all(rr, n);
            /* [0] emulated, [1] float32 on rounded operands, [2] float32 with the unrounded seed (bias), [3] bf16 */
            float *y[4], *g[4][3];
            for (int v = 0; v < 4; v++) {
                y[v] = malloc(n * sizeof(float));
                for (int k = 0; k < 3; k++) g[v][k] = calloc(sz[k], sizeof(float));
            }
            linear_run(LIPT_PRECISION_BF16_EMULATED, (lipt_tensor *[]){X, W, Bv}, r, y[0], g[0], mm);
            linear_run(LIPT_PRECISION_FLOAT32, (lipt_tensor *[]){Xr, Wr, Bv}, rr, y[1], g[1], mm);
            linear_run(LIPT_PRECISION_FLOAT32, (lipt_tensor *[]){Xr, Wr, Bv}, r, y[2], g[2], mm);
            ck_assert_msg(memcmp(y[0], y[1], n * sizeof(float)) == 0, "%s %dx%dx%d mode %d: forward",
                          mm ? "matmul" : "linear", M, K, N, mode);
            for (int k = 0; k < 2; k++)
                ck_assert_msg(memcmp(g[0][k], g[1][k], sz[k] * sizeof(float)) == 0,
                              "%s %dx%dx%d mode %d: gradient of input %d", mm ? "matmul" : "linear", M, K, N, mode, k);
            ck_assert_msg(memcmp(g[0][2], g[2][2], sz[2] * sizeof(float)) == 0, "linear mode %d: bias gradient", mode);
            if (real) {
                linear_run(LIPT_PRECISION_BF16, (lipt_tensor *[]){X, W, Bv}, r, y[3], g[3], mm);
                worst_real = fmax(worst_real, tu_max_rel_err_f(y[3], y[0], n, 1e-6));
                for (int k = 0; k < 3; k++) worst_real = fmax(worst_real, tu_max_rel_err_f(g[3][k], g[0][k], sz[k], 1e-6));
            }
            for (int v = 0; v < 4; v++) {
                free(y[v]);
                for (int k = 0; k < 3; k++) free(g[v][k]);
            }
            free(r), free(rr);
            tu_free(X), tu_free(W), tu_free(Bv), tu_free(Xr), tu_free(Wr);
        }
    ck_assert_msg(worst_real < 1e-5, "linear at bf16 vs bf16-emulated: relative error %.3g", worst_real);
    if (real) printf("linear and matmul projections (x packed in the forward, G once for dx and dw): bf16-emulated "
                     "equals float32 on rounded operands bit for bit; real bf16 within %.3g of it\n", worst_real);
    else printf("linear and matmul projections (x packed in the forward, G once for dx and dw): bf16-emulated equals "
                "float32 on rounded operands bit for bit; SKIP real bf16 (%s)\n",
                lipt_have_dnnl() ? "no AVX512_BF16" : "no oneDNN");
}
END_TEST

/* lipt_linear_gelu at bf16-emulated and (where the CPU has AVX512_BF16) bf16: the bits of
 * lipt_gelu(lipt_linear(...)) at the same precision, forward and the gradients of x and w (the same packed products
 * and GELU), b's within one float (its sum adds in another order), with w frozen too (x packed per product). */
START_TEST(test_linear_gelu_lowp) {
    const int shapes[][3] = {{7, 5, 9}, {64, 33, 70}, {300, 130, 17}, {256, 64, 600}}; /* M, K, N */
    const int real = lipt_have_dnnl() && lipt_cpu_has_avx512_bf16();
    const lipt_precision ps[2] = {LIPT_PRECISION_BF16_EMULATED, LIPT_PRECISION_BF16};
    for (int pi = 0; pi < 1 + real; pi++)
        for (size_t si = 0; si < sizeof shapes / sizeof shapes[0]; si++)
            for (int mode = 0; mode < 2; mode++) { /* 0: everything trains, 1: w frozen */
                const int M = shapes[si][0], K = shapes[si][1], N = shapes[si][2];
                lipt_rng rng;
                lipt_rng_seed(&rng, 130 + si);
                lipt_tensor *in[3] = {tu_tensor(&rng, 2, (int[]){M, K}, 1.0f, 1),
                                      tu_tensor(&rng, 2, (int[]){K, N}, 0.3f, mode == 0),
                                      tu_tensor(&rng, 1, (int[]){N}, 1.0f, 1)};
                const size_t n = (size_t)M * N;
                float *r = malloc(n * sizeof(float)), *y[2], *g[2][3];
                lipt_rng_fill_normal(&rng, r, n, 1.0f);
                for (int v = 0; v < 2; v++) {
                    y[v] = malloc(n * sizeof(float));
                    for (int k = 0; k < 3; k++) g[v][k] = calloc(in[k]->numel, sizeof(float));
                    linear_run(ps[pi], in, r, y[v], g[v], v ? RUN_GELU_LINEAR : RUN_LINEAR_GELU);
                }
                ck_assert_msg(memcmp(y[0], y[1], n * sizeof(float)) == 0, "linear_gelu %s %dx%dx%d: forward",
                              lipt_precision_name(ps[pi]), M, K, N);
                for (int k = 0; k < 3; k++) /* the bias sum adds in another order: within one float */
                    ck_assert_msg(tu_max_ulps(g[0][k], g[1][k], in[k]->numel) <= (k == 2),
                                  "linear_gelu %s %dx%dx%d mode %d: gradient of input %d",
                                  lipt_precision_name(ps[pi]), M, K, N, mode, k);
                for (int v = 0; v < 2; v++) {
                    free(y[v]);
                    for (int k = 0; k < 3; k++) free(g[v][k]);
                }
                free(r);
                for (int k = 0; k < 3; k++) tu_free(in[k]);
            }
    printf("linear_gelu equals gelu(linear) at bf16-emulated%s (bit for bit, the bias gradient within one float)\n",
           real ? " and bf16" : lipt_have_dnnl() ? "; SKIP bf16 (no AVX512_BF16)" : "; SKIP bf16 (no oneDNN)");
}
END_TEST

/* LayerNorm and the fused linear + GELU write their outputs converted for the next product (lipt_tensor.lowp) while
 * the rows are in cache: LN -> linear_gelu -> linear must give the bits of the same chain with those copies dropped
 * (each product converting its input itself), forward and every gradient, at bf16-emulated and bf16. */
static void chain_run(lipt_precision p, lipt_tensor **in, const float *seed, int drop, float *z, float **g) {
    lipt_ctx ctx;
    lipt_ctx_init(&ctx, 1 << 16, 1);
    lipt_error err = {0};
    ck_assert_msg(lipt_ctx_set_precision(&ctx, p, &err) == LIPT_OK, "%s", err.msg);
    for (int k = 0; k < 5; k++) in[k]->grad = g[k];
    lipt_tensor *h = lipt_layernorm(&ctx, in[0], NULL, NULL, 1e-5f);
    ck_assert_ptr_nonnull(h->lowp); /* else the comparison below would be vacuous */
    if (drop) h->lowp = NULL;
    lipt_tensor *y = lipt_linear_gelu(&ctx, h, in[1], in[2]);
    ck_assert_ptr_nonnull(y->lowp);
    if (drop) y->lowp = NULL;
    lipt_tensor *out = lipt_linear(&ctx, y, in[3], in[4]);
    memcpy(z, out->data, out->numel * sizeof(float));
    lipt_backward_seeded(&ctx, out, seed);
    for (int k = 0; k < 5; k++) in[k]->grad = NULL;
    lipt_ctx_free(&ctx);
}

START_TEST(test_producer_lowp) {
    const int real = lipt_have_dnnl() && lipt_cpu_has_avx512_bf16();
    const lipt_precision ps[2] = {LIPT_PRECISION_BF16_EMULATED, LIPT_PRECISION_BF16};
    const int M = 70, D = 48, F = 130;
    for (int pi = 0; pi < 1 + real; pi++) {
        lipt_rng rng;
        lipt_rng_seed(&rng, 211);
        lipt_tensor *in[5] = {tu_tensor(&rng, 2, (int[]){M, D}, 1.0f, 1), tu_tensor(&rng, 2, (int[]){D, F}, 0.3f, 1),
                              tu_tensor(&rng, 1, (int[]){F}, 0.1f, 1), tu_tensor(&rng, 2, (int[]){F, D}, 0.3f, 1),
                              tu_tensor(&rng, 1, (int[]){D}, 0.1f, 1)};
        float *r = malloc((size_t)M * D * sizeof(float)), *z[2], *g[2][5];
        lipt_rng_fill_normal(&rng, r, (size_t)M * D, 1.0f);
        for (int v = 0; v < 2; v++) {
            z[v] = malloc((size_t)M * D * sizeof(float));
            for (int k = 0; k < 5; k++) g[v][k] = calloc(in[k]->numel, sizeof(float));
            chain_run(ps[pi], in, r, v, z[v], g[v]);
        }
        ck_assert_msg(memcmp(z[0], z[1], (size_t)M * D * sizeof(float)) == 0, "%s: forward",
                      lipt_precision_name(ps[pi]));
        for (int k = 0; k < 5; k++)
            ck_assert_msg(memcmp(g[0][k], g[1][k], in[k]->numel * sizeof(float)) == 0, "%s: gradient of input %d",
                          lipt_precision_name(ps[pi]), k);
        for (int v = 0; v < 2; v++) {
            free(z[v]);
            for (int k = 0; k < 5; k++) free(g[v][k]);
        }
        free(r);
        for (int k = 0; k < 5; k++) tu_free(in[k]);
    }
    printf("layernorm and linear_gelu's converted outputs give the bits of converting at the product, bf16-emulated%s\n",
           real ? " and bf16" : lipt_have_dnnl() ? "; SKIP bf16 (no AVX512_BF16)" : "; SKIP bf16 (no oneDNN)");
}
END_TEST

/* ---------------------------------------------------------------- models */

static void small_model(lipt_model *m, lipt_attn_kind attn, uint64_t seed) {
    lipt_config cfg;
    lipt_config_default(&cfg);
    cfg.vocab_size = 13;
    cfg.d_model = 16;
    cfg.n_heads = 2;
    cfg.d_ff = 24;
    cfg.n_layers = 2;
    cfg.seq_len = 10;
    cfg.attention = attn;
    cfg.init_seed = seed;
    if (lipt_attn_contractive(attn)) {
        cfg.ffn = LIPT_FFN_CONTRACTIVE;
        cfg.activation = LIPT_ACT_ELU;
        cfg.lip_norm = LIPT_LIPNORM_INF2;
    }
    lipt_error err = {0};
    ck_assert_msg(lipt_model_init(m, &cfg, &err) == LIPT_OK, "%s", err.msg);
    /* weights at unit scale: at the GPT-2 init (std 0.02) the products are too small for bf16 to show */
    lipt_rng rng;
    lipt_rng_seed(&rng, seed + 1);
    for (int i = 0; i < m->params.n; i++) {
        lipt_tensor *t = m->params.list[i];
        if ((m->params.flags[i] & LIPT_PARAM_BUFFER) || t->ndim != 2) continue;
        lipt_rng_fill_normal(&rng, t->data, t->numel, 1.0f / sqrtf((float)t->shape[0]));
    }
}

typedef struct { lipt_model *m; const int *ids, *tg; int B, T; } loss_user;

static lipt_tensor *build_loss(lipt_ctx *ctx, lipt_tensor **in, void *user) {
    (void)in;
    loss_user *u = user;
    lipt_tensor *loss = NULL;
    ck_assert(lipt_model_forward(ctx, u->m, u->ids, u->B, u->T, u->tg, NULL, &loss, NULL) == LIPT_OK);
    return loss;
}

/* The loss and the gradient of every trainable parameter at precision p (tiled attention when tiled). */
static double loss_and_grad(lipt_model *m, loss_user *u, lipt_precision p, int tiled, float *grad) {
    lipt_ctx ctx;
    lipt_ctx_init(&ctx, 1 << 20, 1);
    ctx.attn_tiled = tiled;
    lipt_error err = {0};
    ck_assert(lipt_ctx_set_precision(&ctx, p, &err) == LIPT_OK);
    ctx.training = 1;
    lipt_params_zero_grad(&m->params);
    lipt_tensor *loss = build_loss(&ctx, NULL, u);
    const double l = loss->data[0];
    lipt_backward(&ctx, loss);
    memcpy(grad, m->params.grad, sizeof(float) * m->params.n_train);
    lipt_ctx_free(&ctx);
    return l;
}

START_TEST(test_model_emulated) {
    /* dp-softcap: a logit map, whose backward recomputes the logits from the packed q and k */
    const lipt_attn_kind kinds[] = {LIPT_ATTN_DP, LIPT_ATTN_L2, LIPT_ATTN_L2_TIED, LIPT_ATTN_CLIPPED_DP,
                                    LIPT_ATTN_DP_SOFTCAP};
    enum { B = 3, T = 10 };
    double worst_loss = 0, worst_grad = 0, worst_entry = 0;
    for (size_t k = 0; k < sizeof kinds / sizeof kinds[0]; k++) {
        lipt_model m;
        small_model(&m, kinds[k], 40 + k);
        lipt_rng rng;
        lipt_rng_seed(&rng, 7 + k);
        int ids[B * T], tg[B * T];
        for (int i = 0; i < B * T; i++) {
            ids[i] = (int)lipt_rng_below(&rng, 13);
            tg[i] = (int)lipt_rng_below(&rng, 13);
        }
        loss_user u = {&m, ids, tg, B, T};
        const size_t n = m.params.n_train;
        float *g32 = malloc(sizeof(float) * n), *g16 = malloc(sizeof(float) * n), *g16t = malloc(sizeof(float) * n);
        const double l32 = loss_and_grad(&m, &u, LIPT_PRECISION_FLOAT32, 0, g32);
        const double l16 = loss_and_grad(&m, &u, LIPT_PRECISION_BF16_EMULATED, 0, g16);
        const double l16t = loss_and_grad(&m, &u, LIPT_PRECISION_BF16_EMULATED, 1, g16t);
        /* bf16 moves the loss, by about its 8-bit precision and no more; the tiled kernel too */
        const double dl = fabs(l16 - l32) / l32, dlt = fabs(l16t - l32) / l32;
        ck_assert_msg(dl > 0 && dl < 1e-2 && dlt < 1e-2, "%s: loss float32 %.7f, emulated %.7f, tiled %.7f",
                      lipt_attn_name(kinds[k]), l32, l16, l16t);
        /* the gradient stays the float32 one to bf16's precision */
        double dn = 0, gn = 0, dnt = 0;
        for (size_t i = 0; i < n; i++) {
            dn += ((double)g16[i] - g32[i]) * ((double)g16[i] - g32[i]);
            dnt += ((double)g16t[i] - g32[i]) * ((double)g16t[i] - g32[i]);
            gn += (double)g32[i] * g32[i];
        }
        const double dg = sqrt(dn / gn), dgt = sqrt(dnt / gn);
        ck_assert_msg(dg < 5e-2 && dgt < 5e-2, "%s: gradient moved by %.3g (tiled %.3g) of its norm",
                      lipt_attn_name(kinds[k]), dg, dgt);
        /* Element by element too, relative to the largest entry (tu_max_rel_err's measure). Finite differences,
         * the other tests' check, do not apply here: the emulated loss is piecewise constant at bf16's steps (with
         * these models a central difference misses the gradient by 0.4-0.8 of it at every eps from 1e-3 to 1e-1,
         * where float32's agrees with its gradient to 1e-3 .. 4e-2 at eps 1e-3). The backward is the products'
         * float32 gradient formulas at bf16 operands, as in any bf16 training. */
        const double de = fmax(tu_max_rel_err_f(g16, g32, n, 1e-6), tu_max_rel_err_f(g16t, g32, n, 1e-6));
        ck_assert_msg(de < 5e-2, "%s: a gradient entry moved by %.3g of the largest", lipt_attn_name(kinds[k]), de);
        printf("%-10s loss float32 %.6f, bf16-emulated %.6f (rel %.2e), tiled %.6f (rel %.2e); gradient moved %.2e "
               "(tiled %.2e) of its norm, %.2e of its largest entry at most\n", lipt_attn_name(kinds[k]), l32, l16, dl,
               l16t, dlt, dg, dgt, de);
        if (lipt_have_dnnl() && lipt_cpu_has_avx512_bf16()) {
            /* real bf16 (oneDNN, with the linear's and the attention's pre-packed operands and the bias inside the
             * product) against the emulation: float32 sums in another order, which can move an operand's bf16
             * rounding by one step further down the network, and no more */
            float *gr = malloc(sizeof(float) * n);
            const double lr = loss_and_grad(&m, &u, LIPT_PRECISION_BF16, 0, gr);
            double dr = 0;
            for (size_t i = 0; i < n; i++) dr += ((double)gr[i] - g16[i]) * ((double)gr[i] - g16[i]);
            const double dlr = fabs(lr - l16) / l16, dgr = sqrt(dr / gn);
            ck_assert_msg(dlr < 1e-5 && dgr < 1e-3, "%s: real bf16 loss %.7f vs emulated %.7f, gradient moved %.3g",
                          lipt_attn_name(kinds[k]), lr, l16, dgr);
            printf("%-10s real bf16 loss %.6f (rel %.2e from emulated), gradient %.2e of its norm from emulated\n",
                   lipt_attn_name(kinds[k]), lr, dlr, dgr);
            free(gr);
        }
        worst_loss = fmax(worst_loss, fmax(dl, dlt));
        worst_grad = fmax(worst_grad, fmax(dg, dgt));
        worst_entry = fmax(worst_entry, de);
        free(g32), free(g16), free(g16t);
        lipt_model_free(&m);
    }
    printf("bf16-emulated models: loss within %.2e of float32's, gradients within %.2e of their norm and %.2e of "
           "their largest entry\n", worst_loss, worst_grad, worst_entry);
}
END_TEST

/* The decoder at bf16-emulated: its logits are the emulated forward pass's, to float rounding. */
START_TEST(test_decoder_emulated) {
    const lipt_attn_kind kinds[] = {LIPT_ATTN_DP, LIPT_ATTN_L2_TIED, LIPT_ATTN_CLIPPED_DP, LIPT_ATTN_DP_SOFTCAP};
    for (size_t k = 0; k < sizeof kinds / sizeof kinds[0]; k++) {
        lipt_model m;
        small_model(&m, kinds[k], 60 + k);
        m.cfg.precision = LIPT_PRECISION_BF16_EMULATED;
        lipt_decoder *dec = NULL;
        lipt_error err = {0};
        ck_assert_msg(lipt_decoder_create(&m, 1, &dec, &err) == LIPT_OK, "%s", err.msg);
        lipt_ctx ctx;
        lipt_ctx_init(&ctx, 1 << 20, 1);
        ck_assert(lipt_ctx_set_precision(&ctx, LIPT_PRECISION_BF16_EMULATED, &err) == LIPT_OK);
        lipt_no_grad_push(&ctx);
        int ids[10] = {1, 5, 2, 9, 12, 0, 3, 3, 7, 11};
        double worst = 0, moved = 0;
        for (int t = 0; t < 10; t++) {
            const float *lg = NULL;
            ck_assert(lipt_decoder_append(dec, &ids[t], 1, &lg, &err) == LIPT_OK);
            lipt_tensor *logits = NULL;
            lipt_ctx_reset(&ctx);
            ck_assert(lipt_model_forward(&ctx, &m, ids, 1, t + 1, NULL, &logits, NULL, &err) == LIPT_OK);
            const float *ref = logits->data + (size_t)t * 13;
            worst = fmax(worst, tu_max_rel_err_f(lg, ref, 13, 1e-3));
            /* against float32's forward: bf16 shows */
            lipt_ctx f32;
            lipt_ctx_init(&f32, 1 << 20, 1);
            lipt_no_grad_push(&f32);
            lipt_tensor *l32 = NULL;
            ck_assert(lipt_model_forward(&f32, &m, ids, 1, t + 1, NULL, &l32, NULL, &err) == LIPT_OK);
            moved = fmax(moved, tu_max_rel_err_f(lg, l32->data + (size_t)t * 13, 13, 1e-3));
            lipt_ctx_free(&f32);
        }
        ck_assert_msg(worst < 1e-4 && moved > 10 * worst, "%s: decoder vs emulated forward %.3g, vs float32 %.3g",
                      lipt_attn_name(kinds[k]), worst, moved);
        printf("decoder %-10s at bf16-emulated: logits within %.2e of the emulated forward (%.2e from float32's)\n",
               lipt_attn_name(kinds[k]), worst, moved);
        lipt_ctx_free(&ctx);
        lipt_decoder_free(dec);
        lipt_model_free(&m);
    }
}
END_TEST

START_TEST(test_precision_api) {
    lipt_error err = {0};
    for (int p = 0; p < LIPT_PRECISION_COUNT; p++) {
        lipt_config cfg;
        lipt_config_default(&cfg);
        ck_assert(lipt_config_set(&cfg, "precision", lipt_precision_name((lipt_precision)p), &err) == LIPT_OK);
        ck_assert_int_eq(cfg.precision, p);
        char text[2048];
        lipt_config_to_text(&cfg, text, sizeof text);
        lipt_config back;
        ck_assert(lipt_config_parse(&back, text, "t", &err) == LIPT_OK && back.precision == cfg.precision);
        /* written only when not float32: float32 runs' configs and checkpoints stay readable by older binaries */
        ck_assert_msg((strstr(text, "precision") != NULL) == (p != LIPT_PRECISION_FLOAT32), "%s", text);
    }
    lipt_config cfg;
    lipt_config_default(&cfg);
    ck_assert(cfg.precision == LIPT_PRECISION_FLOAT32);
    ck_assert(lipt_config_set(&cfg, "precision", "fp16", &err) == LIPT_ERR_ARG);
    ck_assert_msg(strstr(err.msg, "float32, bf16, bf16-emulated"), "%s", err.msg);
    ck_assert(lipt_config_parse(&cfg, "precision = half\n", "x.cfg", &err) == LIPT_ERR_ARG);
    ck_assert_msg(strstr(err.msg, "x.cfg:1"), "%s", err.msg);
    ck_assert(lipt_precision_check(LIPT_PRECISION_BF16_EMULATED, &err) == LIPT_OK);
    ck_assert(lipt_precision_check((lipt_precision)7, &err) == LIPT_ERR_ARG);
    printf("precision key: round trip, unknown values listed (%s)\n", "float32, bf16, bf16-emulated");
}
END_TEST

int main(void) {
    Suite *s = suite_create("ops_bf16");
    TCase *tc = tcase_create("bf16");
    tcase_add_test(tc, test_rounding);
    tcase_add_test(tc, test_emulated_gemm);
    tcase_add_test(tc, test_dnnl_f32);
    tcase_add_test(tc, test_bf16_real);
    tcase_add_test(tc, test_linear_packed);
    tcase_add_test(tc, test_linear_gelu_lowp);
    tcase_add_test(tc, test_producer_lowp);
    tcase_add_test(tc, test_model_emulated);
    tcase_add_test(tc, test_decoder_emulated);
    tcase_add_test(tc, test_precision_api);
    suite_add_tcase(s, tc);
    return tu_run_suite(s);
}
