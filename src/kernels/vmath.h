/* Vectorised exp, sigmoid and normal CDF for the element-wise kernels (GELU, LipSwish, softmax rows).
 *
 * Why: gcc does not vectorise a loop that calls libm's expf, and without -ffast-math it keeps the selects of a
 * hand-written scalar exp as branches, so a scalar loop runs one exp at a time (the GELU and its expf were a third
 * of an evaluation step). These use gcc vector extensions (LIPT_VW floats per vector): the same source becomes
 * AVX2 / AVX-512 code with -march=native and SSE pairs in a portable build, every select is a bitwise blend, and
 * no flag of the library changes. Results are deterministic and the same on every path, including loop tails
 * (which go through the same vector code on a zero-padded copy). */
#ifndef LIPT_KERNELS_VMATH_H
#define LIPT_KERNELS_VMATH_H

#include <stddef.h>
#include <stdint.h>
#include <string.h>
#if defined(__SSE__)
#include <immintrin.h>
#endif

/* Lanes per vector: what the target's registers hold (a wider generic vector would be split, and passing one
 * by value changes the ABI, which gcc warns about). Each lane is computed alone, so results do not depend on it. */
#if defined(__AVX512F__)
#define LIPT_VW 16
#elif defined(__AVX__)
#define LIPT_VW 8
#else
#define LIPT_VW 4
#endif
typedef float lipt_vf __attribute__((vector_size(LIPT_VW * sizeof(float))));
typedef int32_t lipt_vi __attribute__((vector_size(LIPT_VW * sizeof(int32_t))));
typedef double lipt_vd __attribute__((vector_size(LIPT_VW * sizeof(double))));

/* Half as many doubles (one register: 4 with AVX, 8 with AVX-512, 2 otherwise), for float data handled in double:
 * a lipt_vd of LIPT_VW doubles spans two registers and gcc splits its conversions poorly. */
#define LIPT_VDW (LIPT_VW / 2)
typedef double lipt_vdh __attribute__((vector_size(LIPT_VDW * sizeof(double))));
typedef float lipt_vfh __attribute__((vector_size(LIPT_VDW * sizeof(float))));

/* LIPT_VDW floats from p, widened to double (exact); and LIPT_VDW doubles rounded to float, stored at p. */
static inline lipt_vdh lipt_vdh_loadf(const float *p) {
#if LIPT_VDW == 8 /* one vcvtps2pd: gcc splits the generic conversion into two halves and an insert */
    return (lipt_vdh)_mm512_cvtps_pd(_mm256_loadu_ps(p));
#else
    lipt_vfh v;
    memcpy(&v, p, sizeof v);
    return __builtin_convertvector(v, lipt_vdh);
#endif
}
static inline void lipt_vdh_storef(float *p, lipt_vdh d) {
    const lipt_vfh v = __builtin_convertvector(d, lipt_vfh);
    memcpy(p, &v, sizeof v);
}
/* c + a b rounded once, for floats and doubles. C11 (no -ffp-contract) keeps a * b + c as two roundings and two
 * instructions, which halves the rate of the register-tiled products (gemm_small.c, spectral.c, spectral_verify.c);
 * without FMA (a portable SSE build) it stays two, which their error analyses allow as well. */
static inline lipt_vf lipt_vf_fma(lipt_vf a, lipt_vf b, lipt_vf c) {
#if LIPT_VW == 16
    return (lipt_vf)_mm512_fmadd_ps((__m512)a, (__m512)b, (__m512)c);
#elif LIPT_VW == 8 && defined(__FMA__)
    return (lipt_vf)_mm256_fmadd_ps((__m256)a, (__m256)b, (__m256)c);
#elif LIPT_VW == 4 && defined(__FMA__)
    return (lipt_vf)_mm_fmadd_ps((__m128)a, (__m128)b, (__m128)c);
#else
    return a * b + c;
#endif
}
static inline lipt_vdh lipt_vdh_fma(lipt_vdh a, lipt_vdh b, lipt_vdh c) {
#if LIPT_VDW == 8
    return (lipt_vdh)_mm512_fmadd_pd((__m512d)a, (__m512d)b, (__m512d)c);
#elif LIPT_VDW == 4 && defined(__FMA__)
    return (lipt_vdh)_mm256_fmadd_pd((__m256d)a, (__m256d)b, (__m256d)c);
#elif LIPT_VDW == 2 && defined(__FMA__)
    return (lipt_vdh)_mm_fmadd_pd((__m128d)a, (__m128d)b, (__m128d)c);
#else
    return a * b + c;
#endif
}
/* x in every lane: one broadcast ((lipt_vdh){0} + x costs an addition, 0 + -0 being +0, and gcc turns a loop over
 * the lanes into masked broadcasts). */
static inline lipt_vdh lipt_vdh_splat(double x) {
#if LIPT_VDW == 8
    return (lipt_vdh)_mm512_set1_pd(x);
#elif LIPT_VDW == 4 && defined(__AVX__)
    return (lipt_vdh)_mm256_set1_pd(x);
#elif LIPT_VDW == 2 && defined(__SSE2__)
    return (lipt_vdh)_mm_set1_pd(x);
#else
    lipt_vdh a;
    for (int l = 0; l < LIPT_VDW; l++) a[l] = x;
    return a;
#endif
}
static inline lipt_vfh lipt_vfh_load(const float *p) {
    lipt_vfh v;
    memcpy(&v, p, sizeof v);
    return v;
}
static inline void lipt_vfh_store(float *p, lipt_vfh v) { memcpy(p, &v, sizeof v); }

static inline lipt_vf lipt_vload(const float *p) {
    lipt_vf v;
    memcpy(&v, p, sizeof v);
    return v;
}
static inline void lipt_vstore(float *p, lipt_vf v) { memcpy(p, &v, sizeof v); }

/* The first n <= LIPT_VW floats of p, `fill` in the lanes after them (zeros for lipt_vload_n); and the inverse,
 * which writes only n floats. A full vector is one plain load or store. */
static inline lipt_vf lipt_vload_fill(const float *p, size_t n, float fill) {
    if (n == LIPT_VW) return lipt_vload(p);
    float buf[LIPT_VW];
    for (int i = 0; i < LIPT_VW; i++) buf[i] = fill;
    memcpy(buf, p, n * sizeof(float));
    return lipt_vload(buf);
}
static inline lipt_vf lipt_vload_n(const float *p, size_t n) { return lipt_vload_fill(p, n, 0.0f); }
static inline void lipt_vstore_n(float *p, lipt_vf v, size_t n) {
    if (n == LIPT_VW) {
        lipt_vstore(p, v);
        return;
    }
    float buf[LIPT_VW];
    lipt_vstore(buf, v);
    memcpy(p, buf, n * sizeof(float));
}

/* Lanes in [i, i + LIPT_VW) that lie below n (the loop bound of a blocked loop over n floats). */
static inline size_t lipt_vlanes(size_t i, size_t n) { return n - i < LIPT_VW ? n - i : LIPT_VW; }

/* By pointer: a 128-byte vector passed by value draws gcc's "ABI ... changed in GCC 4.6" note. */
static inline double lipt_vd_sum(const lipt_vd *v) {
    double s = 0;
    for (int i = 0; i < LIPT_VW; i++) s += (*v)[i];
    return s;
}

/* Σ a_i b_i of n floats (b = NULL: Σ a_i²) in double, every product exact: four sums of LIPT_VDW lanes (with FMA,
 * the same values: the products are exact), added pairwise, the lanes in order, the tail last. A single running
 * double sum waits one addition latency per element: row dot products written that way were the slowest part of
 * the attention's softmax backward and of the token clipping. */
static inline double lipt_dot_f64(const float *a, const float *b, size_t n) {
    lipt_vdh s[4] = {{0}, {0}, {0}, {0}};
    size_t i = 0;
    for (; i + 4 * LIPT_VDW <= n; i += 4 * LIPT_VDW)
        for (int k = 0; k < 4; k++) {
            const lipt_vdh x = lipt_vdh_loadf(a + i + k * LIPT_VDW);
            s[k] = lipt_vdh_fma(x, b ? lipt_vdh_loadf(b + i + k * LIPT_VDW) : x, s[k]);
        }
    for (; i + LIPT_VDW <= n; i += LIPT_VDW) {
        const lipt_vdh x = lipt_vdh_loadf(a + i);
        s[0] = lipt_vdh_fma(x, b ? lipt_vdh_loadf(b + i) : x, s[0]);
    }
    const lipt_vdh v = (s[0] + s[1]) + (s[2] + s[3]);
    double t = 0;
    for (int l = 0; l < LIPT_VDW; l++) t += v[l];
    for (; i < n; i++) t += (double)a[i] * (b ? b[i] : a[i]);
    return t;
}

/* m ? a : b lane by lane, m from a vector comparison (all ones or all zeros per lane). */
static inline lipt_vf lipt_vsel(lipt_vi m, lipt_vf a, lipt_vf b) { return (lipt_vf)((m & (lipt_vi)a) | (~m & (lipt_vi)b)); }

/* x < 0 ? a : b lane by lane: lipt_vsel(x < 0.0f, a, b), in two instructions with AVX-512 (gcc makes the generic
 * select of a comparison a compare, then two masked xors). */
static inline lipt_vf lipt_vsel_neg(lipt_vf x, lipt_vf a, lipt_vf b) {
#if defined(__AVX512F__)
    return (lipt_vf)_mm512_mask_blend_ps(_mm512_cmp_ps_mask((__m512)x, _mm512_setzero_ps(), _CMP_LT_OQ), (__m512)b,
                                         (__m512)a);
#else
    return lipt_vsel(x < 0.0f, a, b);
#endif
}

/* The larger of a and b lane by lane as signed integers (for the bits of non-negative floats and NaNs, the order of
 * their values with NaN above +inf). */
static inline lipt_vi lipt_vmaxi(lipt_vi a, lipt_vi b) {
#if defined(__AVX512F__)
    return (lipt_vi)_mm512_max_epi32((__m512i)a, (__m512i)b);
#elif defined(__AVX2__)
    return (lipt_vi)_mm256_max_epi32((__m256i)a, (__m256i)b);
#elif defined(__SSE4_1__) && LIPT_VW == 4
    return (lipt_vi)_mm_max_epi32((__m128i)a, (__m128i)b);
#else
    const lipt_vi m = a > b;
    return (m & a) | (~m & b);
#endif
}

static inline lipt_vf lipt_vset1(float a) { return (lipt_vf){0} + a; }

static inline lipt_vf lipt_vabs(lipt_vf x) { return (lipt_vf)((lipt_vi)x & 0x7fffffff); }

static inline lipt_vf lipt_vmax(lipt_vf a, lipt_vf b) { return lipt_vsel(a > b, a, b); }

/* The correctly rounded square root lane by lane (the bits of sqrtf; a loop calling sqrtf is not vectorised
 * without -fno-math-errno, since sqrtf of a negative sets errno). */
static inline lipt_vf lipt_vsqrt(lipt_vf x) {
#if defined(__AVX512F__)
    return (lipt_vf)_mm512_sqrt_ps((__m512)x);
#elif defined(__AVX__)
    return (lipt_vf)_mm256_sqrt_ps((__m256)x);
#elif defined(__SSE__)
    return (lipt_vf)_mm_sqrt_ps((__m128)x);
#else
    lipt_vf r;
    for (int i = 0; i < LIPT_VW; i++) r[i] = __builtin_sqrtf(x[i]);
    return r;
#endif
}

/* Interleaving. Each function below is one long chain of dependent operations per vector (a polynomial in Horner
 * form, then the exponent bits); a loop calling it on one vector at a time waits on that chain's latency, since the
 * out-of-order window holds little more than one call. The _n forms take n <= LIPT_VIL independent vectors and
 * apply every step to all of them before the next step (LIPT_EACH unrolls the loop over the vectors), so the
 * chains overlap; each lane still goes through exactly the same operations, so the results are those of the
 * one-vector forms, which are the _n forms with n = 1. */
#define LIPT_VIL 4
#define LIPT_EACH(n) _Pragma("GCC unroll 8") for (int k = 0; k < (n); k++)
/* Inlined always: the unrolling and the arrays' promotion to registers need n known at the call. */
#define LIPT_VINLINE static inline __attribute__((always_inline))

/* e^x with a relative error below 2e-7 over the normal range (Cody-Waite reduction x = n ln2 + r, |r| <= ln2/2,
 * then the degree-7 minimax polynomial of Cephes' expf, then 2^n put into the exponent bits). Below the smallest
 * normal result it returns 0 (no denormals), above FLT_MAX +inf, NaN stays NaN. In place on x[0..n). */
LIPT_VINLINE void lipt_vexp_n(lipt_vf *x, int n) {
    const float lo = -87.33654475f, hi = 88.37626266f; /* ln(FLT_MIN), 127.5 ln 2 (keeps n <= 127) */
    lipt_vi under[LIPT_VIL], over[LIPT_VIL];
    lipt_vf fn[LIPT_VIL], r[LIPT_VIL], p[LIPT_VIL];
    LIPT_EACH(n) {
        under[k] = x[k] < lo;
        over[k] = x[k] > hi;
        x[k] = lipt_vsel(under[k], lipt_vset1(lo), x[k]);
        x[k] = lipt_vsel(over[k], lipt_vset1(hi), x[k]);
    }
    /* round(x / ln2) by the 1.5·2^23 trick: exact for |x / ln2| < 2^22 in round-to-nearest (no contraction in C11) */
    const float magic = 12582912.0f;
    LIPT_EACH(n) fn[k] = (x[k] * 1.44269504088896341f + magic) - magic;
    LIPT_EACH(n) r[k] = x[k] - fn[k] * 0.693359375f; /* ln2 split: the high part has few bits, so fn * it is exact */
    LIPT_EACH(n) r[k] = r[k] - fn[k] * -2.12194440e-4f;
    LIPT_EACH(n) p[k] = r[k] * 1.9875691500e-4f + 1.3981999507e-3f;
    LIPT_EACH(n) p[k] = p[k] * r[k] + 8.3334519073e-3f;
    LIPT_EACH(n) p[k] = p[k] * r[k] + 4.1665795894e-2f;
    LIPT_EACH(n) p[k] = p[k] * r[k] + 1.6666665459e-1f;
    LIPT_EACH(n) p[k] = p[k] * r[k] + 5.0000001201e-1f;
    LIPT_EACH(n) p[k] = p[k] * (r[k] * r[k]) + r[k] + 1.0f;
    LIPT_EACH(n) {
        const lipt_vi e = __builtin_convertvector(fn[k], lipt_vi);
        const lipt_vf y = p[k] * (lipt_vf)((e + 127) << 23);
        x[k] = lipt_vsel(over[k], lipt_vset1(__builtin_inff()), lipt_vsel(under[k], lipt_vset1(0.0f), y));
    }
}

static inline lipt_vf lipt_vexp(lipt_vf x) {
    lipt_vexp_n(&x, 1);
    return x;
}

/* The logistic function 1/(1 + e^-z) without overflow: e = e^-|z| <= 1, then 1/(1+e) or e/(1+e) by the sign. */
static inline lipt_vf lipt_vsigmoid(lipt_vf z) {
    const lipt_vf e = lipt_vexp(-lipt_vabs(z)), r = 1.0f / (e + 1.0f);
    return lipt_vsel(z >= 0.0f, r, e * r);
}

/* Whether any lane of the mask m (from a vector comparison) is set: one test instruction, for a branch per whole
 * vector. */
static inline int lipt_vany(lipt_vi m) {
#if defined(__AVX512F__)
    return _mm512_test_epi32_mask((__m512i)m, (__m512i)m) != 0;
#elif defined(__AVX__)
    return !_mm256_testz_si256((__m256i)m, (__m256i)m);
#elif defined(__SSE__)
    return _mm_movemask_ps((__m128)m) != 0;
#else
    int r = 0;
    for (int i = 0; i < LIPT_VW; i++) r |= m[i] != 0;
    return r;
#endif
}

/* tab[i mod 32] lane by lane from a table of 32 floats (64-byte aligned): one two-table permute with AVX-512 (which
 * reads the index mod 32 itself), two permutes and a select with AVX; a scalar gather otherwise (the same values on
 * every path). */
static inline lipt_vf lipt_vlookup32(const float *tab, lipt_vi i) {
#if LIPT_VW == 16
    return __builtin_shuffle(lipt_vload(tab), lipt_vload(tab + 16), i);
#elif LIPT_VW == 8
    const lipt_vf lo = __builtin_shuffle(lipt_vload(tab), lipt_vload(tab + 8), i); /* index mod 16 */
    const lipt_vf hi = __builtin_shuffle(lipt_vload(tab + 16), lipt_vload(tab + 24), i);
    return lipt_vsel((i & 16) != 0, hi, lo);
#else
    lipt_vf r;
    for (int l = 0; l < LIPT_VW; l++) r[l] = tab[i[l] & 31];
    return r;
#endif
}

/* Φ(x), the standard normal CDF, over the whole float range, as erfc(|x|/√2)/2 taken from the tail side so both
 * tails keep their relative accuracy (1 - erf would cancel). erfc(z), z >= 0, is the Chebyshev fit of Numerical
 * Recipes' erfcc (fractional error below 1.2e-7 in exact arithmetic), which needs a division and one exp; in float,
 * exp(p - z²) loses about z² ulps of its argument (measured: 1.9e-6 relative at x = -3.9, 1.9e-5 at x = -12.8).
 * GELU used it everywhere before the tables below; now it serves the lanes beyond their range. c[k] = Φ(x[k]) for
 * n <= LIPT_VIL vectors; with der, der[k] = GELU'(x[k]) = Φ + x φ, φ from lipt_vexp (GELU's backward before the
 * tables). */
LIPT_VINLINE void lipt_vgelu_wide_n(const lipt_vf *x, lipt_vf *c, lipt_vf *der, int n) {
    lipt_vf z[LIPT_VIL], t[LIPT_VIL], p[LIPT_VIL], e[LIPT_VIL];
    LIPT_EACH(n) z[k] = lipt_vabs(x[k]) * 0.70710678118654752440f;
    LIPT_EACH(n) t[k] = 1.0f / (z[k] * 0.5f + 1.0f);
    LIPT_EACH(n) p[k] = t[k] * 0.17087277f - 0.82215223f;
    LIPT_EACH(n) p[k] = p[k] * t[k] + 1.48851587f;
    LIPT_EACH(n) p[k] = p[k] * t[k] - 1.13520398f;
    LIPT_EACH(n) p[k] = p[k] * t[k] + 0.27886807f;
    LIPT_EACH(n) p[k] = p[k] * t[k] - 0.18628806f;
    LIPT_EACH(n) p[k] = p[k] * t[k] + 0.09678418f;
    LIPT_EACH(n) p[k] = p[k] * t[k] + 0.37409196f;
    LIPT_EACH(n) p[k] = p[k] * t[k] + 1.00002368f;
    LIPT_EACH(n) p[k] = p[k] * t[k] - 1.26551223f;
    LIPT_EACH(n) e[k] = p[k] - z[k] * z[k];
    lipt_vexp_n(e, n);
    LIPT_EACH(n) {
        e[k] = t[k] * e[k] * 0.5f;
        c[k] = lipt_vsel(x[k] < 0.0f, e[k], 1.0f - e[k]);
    }
    if (der) {
        LIPT_EACH(n) e[k] = x[k] * x[k] * -0.5f;
        lipt_vexp_n(e, n);
        LIPT_EACH(n) der[k] = c[k] + x[k] * 0.39894228040143267794f * e[k];
    }
}

#include "kernels/gelu_tables.h"

/* |x| below this (8|x| < 31.5: the last interval's centre + 1/2) takes the tables. */
#define LIPT_GELU_TABLE_MAX 3.9375f

/* The tables' half of Φ and GELU': for the x[0..n) (n <= LIPT_VIL vectors), s = Φ(-|x|) and, if d is not NULL,
 * d = Φ(-|x|) - |x| φ(x), so that Φ(x) = s and GELU'(x) = Φ(x) + x φ(x) = d for x < 0, 1 - s and 1 - d for x >= 0.
 * Valid in the lanes with |x| < LIPT_GELU_TABLE_MAX (others get finite or non-finite garbage); returns whether some
 * lane of the n vectors is not (|x| too large or NaN), tested once for all of them.
 *
 * Why: the erfcc form above costs a division, a 9-term polynomial and an exp per vector (about 27 multiplies and
 * 24 adds, as gcc may not fuse them). Here [0, 4) is cut in 32 intervals of width 1/8 centred on i/8 (i = 8|x|
 * rounded to an integer by the 1.5·2^23 trick, whose low mantissa bits are then the table index; u = 8|x| - i in
 * [-1/2, 1/2], exact), and on each interval s is a degree-5 polynomial in u (relative error 9e-8 as evaluated in
 * float; the constant term a float pair) and d one of degree 4 (error 1.2e-7 of Φ(-|x|) + |x| φ(x)), fitted by
 * scripts/fit_gelu.py into src/kernels/gelu_tables.h: about half the instructions (one permute per coefficient), no
 * division or exp, and the small side of Φ keeps its relative accuracy (Zen 4, one core: GELU 0.88 -> 0.32 ns per
 * element, with GELU' 0.51). */
LIPT_VINLINE int lipt_vgelu_table_n(const lipt_vf *x, lipt_vf *s, lipt_vf *d, int n) {
    const float magic = 12582912.0f; /* 1.5·2^23 */
    lipt_vf u[LIPT_VIL];
    lipt_vi idx[LIPT_VIL], big = {0};
    LIPT_EACH(n) {
        const lipt_vf a = lipt_vabs(x[k]), w = a * 8.0f, r = w + magic;
        idx[k] = (lipt_vi)r; /* the integer in the low bits, read mod 32 by lipt_vlookup32 */
        u[k] = w - (r - magic);
        /* the largest |x| of the vectors by its bits (a NaN's are larger than any number's) */
        big = lipt_vmaxi(big, (lipt_vi)a);
    }
#define LIPT_TAB(T, j, k) lipt_vlookup32(lipt_gelu_tab_##T[j], idx[k])
    LIPT_EACH(n) s[k] = LIPT_TAB(S, 6, k) * u[k] + LIPT_TAB(S, 5, k);
    LIPT_EACH(n) s[k] = s[k] * u[k] + LIPT_TAB(S, 4, k);
    LIPT_EACH(n) s[k] = s[k] * u[k] + LIPT_TAB(S, 3, k);
    LIPT_EACH(n) s[k] = s[k] * u[k] + LIPT_TAB(S, 2, k);
    LIPT_EACH(n) s[k] = LIPT_TAB(S, 0, k) + (s[k] * u[k] + LIPT_TAB(S, 1, k)); /* c0 hi + (... + c0 lo) */
    if (d) {
        LIPT_EACH(n) d[k] = LIPT_TAB(D, 4, k) * u[k] + LIPT_TAB(D, 3, k);
        LIPT_EACH(n) d[k] = d[k] * u[k] + LIPT_TAB(D, 2, k);
        LIPT_EACH(n) d[k] = d[k] * u[k] + LIPT_TAB(D, 1, k);
        LIPT_EACH(n) d[k] = d[k] * u[k] + LIPT_TAB(D, 0, k);
    }
#undef LIPT_TAB
    union {
        float f;
        int32_t i;
    } lim = {LIPT_GELU_TABLE_MAX};
    return lipt_vany(big >= lim.i);
}

/* The lanes of x outside the tables' range (|x| >= LIPT_GELU_TABLE_MAX or NaN), all ones. */
static inline lipt_vi lipt_vgelu_wide_lanes(lipt_vf x) { return ~(lipt_vabs(x) < LIPT_GELU_TABLE_MAX); }

/* Φ(x) in place on x[0..n), n <= LIPT_VIL: the tables, and lipt_vgelu_wide_n in the lanes beyond their range
 * (computed only when the n vectors hold such a lane, for all n at once). A lane's result does not depend on the
 * path its vectors took, nor on the vector width. */
LIPT_VINLINE void lipt_vnormal_cdf_n(lipt_vf *x, int n) {
    lipt_vf s[LIPT_VIL], cw[LIPT_VIL];
    const int wide = lipt_vgelu_table_n(x, s, NULL, n);
    if (__builtin_expect(wide, 0)) lipt_vgelu_wide_n(x, cw, NULL, n);
    LIPT_EACH(n) {
        x[k] = wide ? lipt_vsel(lipt_vgelu_wide_lanes(x[k]), cw[k], lipt_vsel_neg(x[k], s[k], 1.0f - s[k]))
                    : lipt_vsel_neg(x[k], s[k], 1.0f - s[k]);
    }
}

static inline lipt_vf lipt_vnormal_cdf(lipt_vf x) {
    lipt_vnormal_cdf_n(&x, 1);
    return x;
}

/* y = x Φ(x) and, if der is not NULL, der = GELU'(x) for x[0..n), n <= LIPT_VIL (in place allowed). */
LIPT_VINLINE void lipt_vgelu_n(lipt_vf *x, lipt_vf *der, int n) {
    /* d, dw: only with der (zeroed for -Wmaybe-uninitialized) */
    lipt_vf s[LIPT_VIL], d[LIPT_VIL] = {{0}}, c[LIPT_VIL], dw[LIPT_VIL] = {{0}}, cw[LIPT_VIL];
    const int wide = lipt_vgelu_table_n(x, s, der ? d : NULL, n);
    LIPT_EACH(n) {
        c[k] = lipt_vsel_neg(x[k], s[k], 1.0f - s[k]);
        if (der) d[k] = lipt_vsel_neg(x[k], d[k], 1.0f - d[k]);
    }
    if (__builtin_expect(wide, 0)) {
        lipt_vgelu_wide_n(x, cw, der ? dw : NULL, n);
        LIPT_EACH(n) {
            const lipt_vi m = lipt_vgelu_wide_lanes(x[k]);
            c[k] = lipt_vsel(m, cw[k], c[k]);
            if (der) d[k] = lipt_vsel(m, dw[k], d[k]);
        }
    }
    LIPT_EACH(n) {
        if (der) der[k] = d[k];
        x[k] = x[k] * c[k];
    }
}

/* lipt_vgelu's loop, inlined once with der and once with NULL so that each copy is specialised. */
LIPT_VINLINE void lipt_vgelu_loop(const float *x, float *y, float *der, size_t n) {
    size_t i = 0;
    for (; i + LIPT_VIL * LIPT_VW <= n; i += LIPT_VIL * LIPT_VW) {
        lipt_vf v[LIPT_VIL], d[LIPT_VIL];
        LIPT_EACH(LIPT_VIL) v[k] = lipt_vload(x + i + k * LIPT_VW);
        lipt_vgelu_n(v, der ? d : NULL, LIPT_VIL);
        LIPT_EACH(LIPT_VIL) {
            if (der) lipt_vstore(der + i + k * LIPT_VW, d[k]);
            lipt_vstore(y + i + k * LIPT_VW, v[k]);
        }
    }
    for (; i < n; i += LIPT_VW) {
        const size_t len = lipt_vlanes(i, n);
        lipt_vf v = lipt_vload_n(x + i, len), d;
        lipt_vgelu_n(&v, der ? &d : NULL, 1);
        if (der) lipt_vstore_n(der + i, d, len);
        lipt_vstore_n(y + i, v, len);
    }
}

/* y = x Φ(x) over n floats (y may be x); der, if not NULL, receives GELU'(x) = Φ(x) + x φ(x) for the backward
 * (which is then dx = g der: no exp, and x is not read again). One thread. */
static inline void lipt_vgelu(const float *x, float *y, float *der, size_t n) {
    if (der)
        lipt_vgelu_loop(x, y, der, n);
    else
        lipt_vgelu_loop(x, y, NULL, n);
}

/* y = x sigmoid(βx) / scale (LipSwish) over n floats (y may be x). One thread. */
static inline void lipt_vlipswish(const float *x, float *y, size_t n, float beta, float scale) {
    for (size_t i = 0; i < n; i += LIPT_VW) {
        const size_t len = lipt_vlanes(i, n);
        const lipt_vf v = lipt_vload_n(x + i, len);
        lipt_vstore_n(y + i, v * lipt_vsigmoid(v * beta) / scale, len);
    }
}

/* Softmax of row[0..n), n >= 1, in place, after subtracting kn[j] from row[j] when kn is given (the |k_j|²/s
 * term of L2 attention): float max and exp, the normaliser summed in double. */
static inline void lipt_vsoftmax_row(float *row, size_t n, const float *kn) {
    const float ninf = -__builtin_inff();
    if (kn)
        for (size_t j = 0; j < n; j += LIPT_VW) {
            const size_t len = lipt_vlanes(j, n);
            lipt_vstore_n(row + j, lipt_vload_n(row + j, len) - lipt_vload_n(kn + j, len), len);
        }
    /* padding lanes of the tail hold -inf: no effect on the max, exp gives 0 */
    lipt_vf mv = lipt_vset1(ninf);
    for (size_t j = 0; j < n; j += LIPT_VW) mv = lipt_vmax(mv, lipt_vload_fill(row + j, lipt_vlanes(j, n), ninf));
    float mx = mv[0];
    for (int i = 1; i < LIPT_VW; i++) mx = mv[i] > mx ? mv[i] : mx;
    lipt_vd acc = {0};
    size_t j = 0;
    for (; j + LIPT_VIL * LIPT_VW <= n; j += LIPT_VIL * LIPT_VW) { /* the exps interleaved, the sum in order */
        lipt_vf e[LIPT_VIL];
        LIPT_EACH(LIPT_VIL) e[k] = lipt_vload(row + j + k * LIPT_VW) - mx;
        lipt_vexp_n(e, LIPT_VIL);
        LIPT_EACH(LIPT_VIL) {
            lipt_vstore(row + j + k * LIPT_VW, e[k]);
            acc += __builtin_convertvector(e[k], lipt_vd);
        }
    }
    for (; j < n; j += LIPT_VW) {
        const size_t len = lipt_vlanes(j, n);
        const lipt_vf e = lipt_vexp(lipt_vload_fill(row + j, len, ninf) - mx);
        lipt_vstore_n(row + j, e, len);
        acc += __builtin_convertvector(e, lipt_vd);
    }
    const float inv = (float)(1.0 / lipt_vd_sum(&acc));
    for (size_t j = 0; j < n; j += LIPT_VW) {
        const size_t len = lipt_vlanes(j, n);
        lipt_vstore_n(row + j, lipt_vload_n(row + j, len) * inv, len);
    }
}

#endif
