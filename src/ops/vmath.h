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

/* e^x with a relative error below 2e-7 over the normal range (Cody-Waite reduction x = n ln2 + r, |r| <= ln2/2,
 * then the degree-7 minimax polynomial of Cephes' expf, then 2^n put into the exponent bits). Below the smallest
 * normal result it returns 0 (no denormals), above FLT_MAX +inf, NaN stays NaN. */
static inline lipt_vf lipt_vexp(lipt_vf x) {
    const float lo = -87.33654475f, hi = 88.37626266f; /* ln(FLT_MIN), 127.5 ln 2 (keeps n <= 127) */
    const lipt_vi under = x < lo, over = x > hi;
    x = lipt_vsel(under, lipt_vset1(lo), x);
    x = lipt_vsel(over, lipt_vset1(hi), x);
    /* round(x / ln2) by the 1.5·2^23 trick: exact for |x / ln2| < 2^22 in round-to-nearest (no contraction in C11) */
    const float magic = 12582912.0f;
    const lipt_vf fn = (x * 1.44269504088896341f + magic) - magic;
    lipt_vf r = x - fn * 0.693359375f; /* ln2 split: the high part has few bits, so fn * it is exact */
    r = r - fn * -2.12194440e-4f;
    lipt_vf p = r * 1.9875691500e-4f + 1.3981999507e-3f;
    p = p * r + 8.3334519073e-3f;
    p = p * r + 4.1665795894e-2f;
    p = p * r + 1.6666665459e-1f;
    p = p * r + 5.0000001201e-1f;
    p = p * (r * r) + r + 1.0f;
    const lipt_vi n = __builtin_convertvector(fn, lipt_vi);
    lipt_vf y = p * (lipt_vf)((n + 127) << 23);
    y = lipt_vsel(under, lipt_vset1(0.0f), y);
    return lipt_vsel(over, lipt_vset1(__builtin_inff()), y);
}

/* The logistic function 1/(1 + e^-z) without overflow: e = e^-|z| <= 1, then 1/(1+e) or e/(1+e) by the sign. */
static inline lipt_vf lipt_vsigmoid(lipt_vf z) {
    const lipt_vf e = lipt_vexp(-lipt_vabs(z)), r = 1.0f / (e + 1.0f);
    return lipt_vsel(z >= 0.0f, r, e * r);
}

/* Φ(x), the standard normal CDF, as erfc(|x|/√2)/2 taken from the tail side so both tails keep their relative
 * accuracy (1 - erf would cancel). erfc(z), z >= 0, is the Chebyshev fit of Numerical Recipes' erfcc (fractional
 * error below 1.2e-7), which needs one exp. */
static inline lipt_vf lipt_vnormal_cdf(lipt_vf x) {
    const lipt_vf z = lipt_vabs(x) * 0.70710678118654752440f;
    const lipt_vf t = 1.0f / (z * 0.5f + 1.0f);
    lipt_vf p = t * 0.17087277f - 0.82215223f;
    p = p * t + 1.48851587f;
    p = p * t - 1.13520398f;
    p = p * t + 0.27886807f;
    p = p * t - 0.18628806f;
    p = p * t + 0.09678418f;
    p = p * t + 0.37409196f;
    p = p * t + 1.00002368f;
    p = p * t - 1.26551223f;
    const lipt_vf e = t * lipt_vexp(p - z * z) * 0.5f;
    return lipt_vsel(x < 0.0f, e, 1.0f - e);
}

/* y = x Φ(x) over n floats (y may be x); cdf, if not NULL, receives Φ(x) for the backward. One thread. */
static inline void lipt_vgelu(const float *x, float *y, float *cdf, size_t n) {
    for (size_t i = 0; i < n; i += LIPT_VW) {
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
    for (size_t j = 0; j < n; j += LIPT_VW) {
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
