/* Vectorised exp, sigmoid and normal CDF for the element-wise kernels (GELU, LipSwish, softmax rows).
 *
 * Why: gcc does not vectorise a loop that calls libm's expf, and without -ffast-math it keeps the selects of a
 * hand-written scalar exp as branches, so a scalar loop runs one exp at a time (the GELU and its expf were a third
 * of an evaluation step). These use gcc vector extensions (LIPT_VW floats per vector): the same source becomes
 * AVX2 / AVX-512 code with -march=native and SSE pairs in a portable build, every select is a bitwise blend, and
 * no flag of the library changes. Results are deterministic and the same on every path, including loop tails
 * (which go through the same vector code on a zero-padded copy). */
#ifndef LIPT_OPS_VMATH_H
#define LIPT_OPS_VMATH_H

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
    lipt_vfh v;
    memcpy(&v, p, sizeof v);
    return __builtin_convertvector(v, lipt_vdh);
}
static inline void lipt_vdh_storef(float *p, lipt_vdh d) {
    const lipt_vfh v = __builtin_convertvector(d, lipt_vfh);
    memcpy(p, &v, sizeof v);
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

static inline double lipt_vd_sum(lipt_vd v) {
    double s = 0;
    for (int i = 0; i < LIPT_VW; i++) s += v[i];
    return s;
}

/* m ? a : b lane by lane, m from a vector comparison (all ones or all zeros per lane). */
static inline lipt_vf lipt_vsel(lipt_vi m, lipt_vf a, lipt_vf b) { return (lipt_vf)((m & (lipt_vi)a) | (~m & (lipt_vi)b)); }

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

/* Φ(x), the standard normal CDF, as erfc(|x|/√2)/2 taken from the tail side so both tails keep their relative
 * accuracy (1 - erf would cancel). erfc(z), z >= 0, is the Chebyshev fit of Numerical Recipes' erfcc (fractional
 * error below 1.2e-7), which needs one exp. x[0..n) are replaced by Φ(x). */
LIPT_VINLINE void lipt_vnormal_cdf_n(lipt_vf *x, int n) {
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
        x[k] = lipt_vsel(x[k] < 0.0f, e[k], 1.0f - e[k]);
    }
}

static inline lipt_vf lipt_vnormal_cdf(lipt_vf x) {
    lipt_vnormal_cdf_n(&x, 1);
    return x;
}

/* y = x Φ(x) over n floats (y may be x); cdf, if not NULL, receives Φ(x) for the backward. One thread. */
static inline void lipt_vgelu(const float *x, float *y, float *cdf, size_t n) {
    size_t i = 0;
    for (; i + LIPT_VIL * LIPT_VW <= n; i += LIPT_VIL * LIPT_VW) {
        lipt_vf v[LIPT_VIL], c[LIPT_VIL];
        LIPT_EACH(LIPT_VIL) c[k] = v[k] = lipt_vload(x + i + k * LIPT_VW);
        lipt_vnormal_cdf_n(c, LIPT_VIL);
        LIPT_EACH(LIPT_VIL) {
            if (cdf) lipt_vstore(cdf + i + k * LIPT_VW, c[k]);
            lipt_vstore(y + i + k * LIPT_VW, v[k] * c[k]);
        }
    }
    for (; i < n; i += LIPT_VW) {
        const size_t len = lipt_vlanes(i, n);
        const lipt_vf v = lipt_vload_n(x + i, len), c = lipt_vnormal_cdf(v);
        if (cdf) lipt_vstore_n(cdf + i, c, len);
        lipt_vstore_n(y + i, v * c, len);
    }
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
    const float inv = (float)(1.0 / lipt_vd_sum(acc));
    for (size_t j = 0; j < n; j += LIPT_VW) {
        const size_t len = lipt_vlanes(j, n);
        lipt_vstore_n(row + j, lipt_vload_n(row + j, len) * inv, len);
    }
}

#endif
