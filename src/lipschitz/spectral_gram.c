/* The certified upper bound of a block's spectral norm by Gram iteration (lipt_spectral_ub), with the argument for
 * its rounding margin: the Gram matrix in double from register tiles, the squarings in float with rescaling, and the
 * Cholesky-verified bound (spectral_verify.c) tried first when asked for. */
#include "lipt/ops.h"

#include <float.h>
#include <math.h>
#include <omp.h>
#include <stdlib.h>
#include <string.h>

#include "kernels/kernels.h"
#include "lipschitz/spectral_impl.h"

/* ---- Certified upper bound by Gram iteration ----
 *
 * Why the returned double is >= the exact sigma of the float block A (m×n after choosing the smaller Gram side,
 * n <= m), assuming IEEE arithmetic with round-to-nearest: u = 2^-53 in double, u_f = 2^-24 in float.  Notation:
 * rho = spectral radius; for a symmetric X, rho(X) = ‖X‖₂ <= ‖X‖_F, ‖|X|‖₂ <= ‖|X|‖_∞ (the largest row sum of |X|:
 * a symmetric matrix's row and column sums agree), ‖X‖₂ <= ‖|X|‖₂, 0 <= X <= Y entrywise gives ‖X‖₂ <= ‖Y‖₂, and
 * Weyl gives rho(X) <= rho(X + Y) + ‖Y‖₂ for symmetric Y.  gamma_k = k u / (1 - k u) (gamma_f_k with u_f): any order
 * of a k-term dot product, with or without FMA, errs by <= gamma_k Σ|a||b| plus, for products that underflow, at
 * most k half-units of the smallest subnormal.
 *  - H_0 = fl(AᵀA) in double (lipt_spectral_gram: each entry m exact float products summed in double in some
 *    order; the upper triangle mirrored: symmetric).  The float entries are exact in double, so
 *    ‖H_0 - AᵀA‖₂ <= gamma_m ‖|A|ᵀ|A|‖_F <= gamma_m ‖A‖_F² =: e_0 and sigma² <= rho(H_0) + e_0.
 *  - Level 0: G_0 = fl_f(2^-e_0 H_0), the scaled matrix (exact in double) rounded to float: symmetric, and
 *    ‖2^-e_0 H_0 - G_0‖₂ <= u_f / (1 - u_f) min(‖G_0‖_F, ‖|G_0|‖_∞) + n 2^-150 =: d_0 (each entry of 2^-e_0 H_0 is
 *    off by <= u_f of itself, hence by <= u_f / (1 - u_f) of its rounded value, or by <= 2^-150 when subnormal).
 *  - Squarings, in float: X_k = fl_f(G_k G_k) (gram_upper: ssyrk, or two ssyrk and an sgemm; mirrored, symmetric),
 *    F_k = X_k - G_k² with ‖F_k‖₂ <= gamma_f_n ‖|G_k| |G_k|‖₂ + n² 2^-149 <= gamma_f_n min(‖G_k‖_F, ‖|G_k|‖_∞)² +
 *    n² 2^-149 =: f_k; then G_{k+1} = 2^-e_{k+1} X_k, exact but for subnormal results: off by d_{k+1} = n 2^-149.
 *  - Hence rho(H_0) <= 2^e_0 (rho(G_0) + d_0), rho(G_k) = sqrt(rho(G_k²)) <= sqrt(rho(X_k) + f_k) and
 *    rho(X_k) <= 2^e_{k+1} (rho(G_{k+1}) + d_{k+1}), and at the end rho(G_t) <= ‖G_t‖_F.  Nesting these from t
 *    down to 0 gives the bound; without the error terms it is ‖H_0^(2^t)‖_F^(1/2^(t+1)), the Gram iteration
 *    bound itself.  (t = 0: sigma² <= ‖H_0‖_F + e_0, no float level.)
 *  - Each scalar step (sum, product, sqrt) is rounded once to nearest and then moved up one ulp (lipt_ub_up()),
 *    which is >= the exact result; sums of N nonnegative terms (squares, absolute values; taken in lanes, an order whose error is
 *    bounded as any other's) are inflated by 1/(1 - gamma_N) <= 1 + 2 gamma_N plus an underflow slack.  ldexp by
 *    2^e_k is exact unless the result is subnormal (then moved up too).
 * Rescaling so that ‖G_k‖_F is in [1/2, 1) (up to the rounding to float) keeps every level near unit size
 * (rho(G_k) >= 1/(2 sqrt n)), so neither the matrices nor the nested bound overflow or underflow for any t; H_0
 * itself is at most m (2^128)² <= 2^288 and at least 2^-298 when nonzero, far inside double's range.
 * Why the squarings are in float: they are two thirds of the certificate's work at the invertible models' shapes
 * (256×1024, t = 8) and run twice as fast; the first product, whose error term would be gamma_f_m ‖|A|ᵀ|A|‖, stays
 * in double.  Size of the margin over the exact Gram bound: e_0 / sigma² <= gamma_m r as before (r = rank;
 * 1e-11), d_0 adds at most u_f sqrt(n) / 2 relative, and f_k / rho(G_k)² <= gamma_f_n min(r_s, κ²) (r_s =
 * ‖G_k‖_F² / rho², κ = ‖|G_k|‖_∞ / rho, both small for the Gram matrices met in practice: a flat spectrum makes G_k
 * a multiple of the identity, κ = 1), weighted 2^-(k+2) on the way back: the tests measure 3e-6 on rank-one
 * blocks, 3e-5 on the 1024 identity and up to 1e-4 on Gaussian blocks of order 256 (whose dense Gram matrices have
 * κ² near 10); cf. the Gram bound's own slack r^(1/2^(t+2)) - 1. */

/* Lanes of the sums of squares below: four vectors of doubles. */
#define SPEC_VD LIPT_VDW
#define SPEC_LANES (4 * SPEC_VD)

/* Σ x_i² of N doubles, in SPEC_LANES lanes (each a recursive sum of every SPEC_LANES-th square) added lane by lane,
 * the tail last: a summation order whose error is bounded as any other's (lipt_ub_sum_bound), and which does not
 * wait on one addition per element. With sc != 1, x is first scaled in place by sc (a power of two here). */
static double scale_sumsq(double *x, size_t N, double sc) {
    lipt_vdh a[4] = {{0}};
    size_t i = 0;
    for (; i + SPEC_LANES <= N; i += SPEC_LANES)
        for (int k = 0; k < 4; k++) {
            lipt_vdh v;
            memcpy(&v, x + i + k * SPEC_VD, sizeof v);
            if (sc != 1) {
                v *= sc;
                memcpy(x + i + k * SPEC_VD, &v, sizeof v);
            }
            a[k] += v * v;
        }
    double s = 0;
    for (int k = 0; k < 4; k++)
        for (int l = 0; l < SPEC_VD; l++) s += a[k][l];
    for (; i < N; i++) {
        if (sc != 1) x[i] *= sc;
        s += x[i] * x[i];
    }
    return s;
}

/* |v| lane by lane (clears the sign bits) */
static lipt_vdh vdh_abs(lipt_vdh v) {
    typedef long long vlh __attribute__((vector_size(sizeof(lipt_vdh))));
    vlh b;
    memcpy(&b, &v, sizeof b);
    b &= 0x7fffffffffffffffLL;
    memcpy(&v, &b, sizeof v);
    return v;
}

/* Sums over an n×n matrix of one precision level: Σ x² (in SPEC_VD-lane vectors, the tail last), and the largest row
 * sum of |x| (each row in lanes): both sums of nonnegative doubles, bounded by lipt_ub_sum_bound. */
typedef struct {
    double ssq, rmax;
} level_sums;

/* Level 0: f = fl_f(sc h) for the double n×n h (sc a power of two: sc h is exact). */
static void level0_to_float(const double *h, int n, double sc, float *f) {
    for (size_t i = 0; i < (size_t)n * n; i++) f[i] = (float)(h[i] * sc);
}

/* Σ x² of the float n×n f in double (float squares are exact in double); with sc != 1 (a power of two) f is first
 * scaled in place, and *s then also gets the largest row sum of |x|. */
static double level_float(float *f, int n, float sc, level_sums *s) {
    lipt_vdh q = {0};
    double t = 0, rmax = 0;
    for (int i = 0; i < n; i++) {
        float *fr = f + (size_t)i * n;
        lipt_vdh r = {0};
        double r1 = 0;
        int j = 0;
        for (; j + SPEC_VD <= n; j += SPEC_VD) {
            lipt_vfh vf = lipt_vfh_load(fr + j);
            if (sc != 1.0f) {
                vf *= sc;
                lipt_vfh_store(fr + j, vf);
            }
            const lipt_vdh w = __builtin_convertvector(vf, lipt_vdh);
            q += w * w;
            r += vdh_abs(w);
        }
        for (; j < n; j++) {
            if (sc != 1.0f) fr[j] *= sc;
            const double w = fr[j];
            t += w * w;
            r1 += fabs(w);
        }
        for (int l = 0; l < SPEC_VD; l++) r1 += r[l];
        rmax = fmax(rmax, r1);
    }
    for (int l = 0; l < SPEC_VD; l++) t += q[l];
    if (s) s->ssq = t, s->rmax = rmax;
    return t;
}

/* An upper bound of min(‖X‖_F, ‖|X|‖_∞) from the sums of an n×n level. */
static double level_norm_bound(const level_sums *s, int n) {
    return fmin(lipt_ub_up(sqrt(lipt_ub_sum_bound(s->ssq, (size_t)n * n))), lipt_ub_sum_bound(s->rmax, (size_t)n));
}

/* The upper triangle of the row-major n×n C, written by ?syrk, copied to the lower one (in tiles: a column of
 * the upper triangle is read with stride n). */
#define DEFINE_MIRROR_UPPER(name, T)                                                                                \
    static void name(T *c, int n) {                                                                                 \
        enum { TILE = 32 };                                                                                         \
        for (int i0 = 0; i0 < n; i0 += TILE) {                                                                      \
            const int i1 = i0 + TILE < n ? i0 + TILE : n;                                                           \
            for (int j0 = 0; j0 <= i0; j0 += TILE)                                                                  \
                for (int i = i0; i < i1; i++) {                                                                     \
                    const int j1 = j0 + TILE < i ? j0 + TILE : i;                                                   \
                    for (int j = j0; j < j1; j++) c[(size_t)i * n + j] = c[(size_t)j * n + i];                      \
                }                                                                                                   \
        }                                                                                                           \
    }
DEFINE_MIRROR_UPPER(mirror_upper, double)
DEFINE_MIRROR_UPPER(mirror_upper_f, float)

/* ---- H_0, the double Gram matrix, straight from the float block ----
 * Every entry is Σ_k a_ki a_kj of AᵀA (a tall block; a wide one, whose Gram matrix is A Aᵀ, is transposed first):
 * m products of floats, each exact in double, summed in double in k order (with FMA, whose product is then exact
 * anyway): all the error analysis above assumes of H_0 (gamma_m, any order). No double copy of the block and no
 * packing: dsyrk's packing and the copy were a fifth of a 256×1024 certificate, and at these orders (the block in
 * L2) register tiles reading the floats where they are, widened in registers, measured 20-50 % faster than copy +
 * dsyrk / dgemm. (Dot products along the rows of a wide block, lanes along k, were 10 % slower than the transpose
 * and these tiles: twice the conversions per multiply-add.) Rows of tiles are independent (each entry's order does
 * not depend on the tiling's partition), so two threads may share them without changing a bit. */
#if LIPT_VDW == 8
#define GT_R 8 /* GT_R rows × GT_V vectors of columns, rank-one updates along k (24 accumulators) */
#define GT_V 3
#else
#define GT_R 4
#define GT_V 2
#endif
_Static_assert(GT_R <= LIPT_SPECTRAL_GRAM_SLAB, "lipt_spectral_gram_scratch must cover two slabs of GT_R rows");

/* t [m×n] = aᵀ for the n×m float a (row stride lda): 8×8 blocks through registers with AVX (a scalar copy with the
 * row stride of W1, 4 KiB, took three times as long), scalars at the edges. */
static void transpose_f(const float *a, int n, int m, int lda, float *t) {
    int i0 = 0;
#if defined(__AVX__)
    for (; i0 + 8 <= n; i0 += 8) {
        int k = 0;
        for (; k + 8 <= m; k += 8) {
            const float *p = a + (size_t)i0 * lda + k;
            __m256 r[8], u[8], v[8];
            for (int q = 0; q < 8; q++) r[q] = _mm256_loadu_ps(p + (size_t)q * lda);
            for (int q = 0; q < 4; q++) {
                u[2 * q] = _mm256_unpacklo_ps(r[2 * q], r[2 * q + 1]);
                u[2 * q + 1] = _mm256_unpackhi_ps(r[2 * q], r[2 * q + 1]);
            }
            for (int q = 0; q < 2; q++) { /* rows 4q..4q+3: columns (0, 1), (2, 3) of each 128-bit half */
                v[4 * q] = _mm256_shuffle_ps(u[4 * q], u[4 * q + 2], 0x44);
                v[4 * q + 1] = _mm256_shuffle_ps(u[4 * q], u[4 * q + 2], 0xEE);
                v[4 * q + 2] = _mm256_shuffle_ps(u[4 * q + 1], u[4 * q + 3], 0x44);
                v[4 * q + 3] = _mm256_shuffle_ps(u[4 * q + 1], u[4 * q + 3], 0xEE);
            }
            float *o = t + (size_t)k * n + i0;
            for (int q = 0; q < 4; q++) {
                _mm256_storeu_ps(o + (size_t)q * n, _mm256_permute2f128_ps(v[q], v[q + 4], 0x20));
                _mm256_storeu_ps(o + (size_t)(q + 4) * n, _mm256_permute2f128_ps(v[q], v[q + 4], 0x31));
            }
        }
        for (; k < m; k++)
            for (int i = i0; i < i0 + 8; i++) t[(size_t)k * n + i] = a[(size_t)i * lda + k];
    }
#endif
    for (; i0 < n; i0++)
        for (int k = 0; k < m; k++) t[(size_t)k * n + i0] = a[(size_t)i0 * lda + k];
}

/* Tall: c[i0 + r][j..] = Σ_k a_k,i0+r a_k,j (first) or c[i0 + r][j..] + Σ_k ... (a later panel of k: the running
 * sums continue from where the last panel stored them, exactly) for r < mr, nv vectors of columns from j (constants
 * at every call), each entry one running sum in k order. xs: the rows' column slab in double (xs[k GT_R + r] =
 * a_k,i0+r), converted once per row of tiles: a broadcast from it is a load, where one from the float was a
 * conversion as well. */
LIPT_VINLINE void gram_tall_tile(const float *a, int lda, int m, const double *xs, double *c, int n, int i0, int j,
                                 int mr, int nv, int first) {
    lipt_vdh acc[GT_R][GT_V];
    for (int r = 0; r < mr; r++)
        for (int v = 0; v < nv; v++) {
            if (first) acc[r][v] = (lipt_vdh){0};
            else memcpy(&acc[r][v], c + (size_t)(i0 + r) * n + j + v * LIPT_VDW, sizeof acc[r][v]);
        }
    for (int k = 0; k < m; k++) {
        const float *ak = a + (size_t)k * lda + j;
        lipt_vdh y[GT_V];
        for (int v = 0; v < nv; v++) y[v] = lipt_vdh_loadf(ak + v * LIPT_VDW);
        for (int r = 0; r < mr; r++) {
            const lipt_vdh x = lipt_vdh_splat(xs[(size_t)k * GT_R + r]);
            for (int v = 0; v < nv; v++) acc[r][v] = lipt_vdh_fma(x, y[v], acc[r][v]);
        }
    }
    for (int r = 0; r < mr; r++)
        for (int v = 0; v < nv; v++) memcpy(c + (size_t)(i0 + r) * n + j + v * LIPT_VDW, &acc[r][v], sizeof acc[r][v]);
}

/* Tall, the mr rows (a constant) from i0, every column from i0 on, over the m rows of a (a panel of k): full tiles,
 * one-vector tiles, then scalars; the tiles start up to LIPT_VDW - 1 columns left of i0 so that they end at n
 * (entries left of the diagonal: the mirroring overwrites them; every panel writes the same ones). */
LIPT_VINLINE void gram_tall_rows(const float *a, int lda, int m, double *xs, double *c, int n, int i0, int mr,
                                 int first) {
    for (int k = 0; k < m; k++)
        for (int r = 0; r < mr; r++) xs[(size_t)k * GT_R + r] = a[(size_t)k * lda + i0 + r];
    const int w = (n - i0 + LIPT_VDW - 1) / LIPT_VDW * LIPT_VDW;
    int j = n - w >= 0 ? n - w : i0;
    for (; j + GT_V * LIPT_VDW <= n; j += GT_V * LIPT_VDW) gram_tall_tile(a, lda, m, xs, c, n, i0, j, mr, GT_V, first);
    for (; j + LIPT_VDW <= n; j += LIPT_VDW) gram_tall_tile(a, lda, m, xs, c, n, i0, j, mr, 1, first);
    for (; j < n; j++)
        for (int r = 0; r < mr; r++) {
            double t = first ? 0 : c[(size_t)(i0 + r) * n + j];
            for (int k = 0; k < m; k++) t += xs[(size_t)k * GT_R + r] * a[(size_t)k * lda + j];
            c[(size_t)(i0 + r) * n + j] = t;
        }
}

/* Work (multiply-adds) from which lipt_spectral_gram uses two threads outside a parallel region. */
#define GRAM_PAR_WORK ((size_t)1 << 22)

/* Rows of k per panel: the tiles sweep a panel (GRAM_PANEL n floats: 128 KiB at n = 256) once per row of tiles
 * while it stays in L2, where a 256 x 1024 block's whole megabyte came from L3 32 times over; a wide block's panel
 * is transposed into the scratch just before (its whole transpose, written and read back through L3, was 15 % of
 * its certificate). Each entry's sum runs on across panels from the stored partial: the same bits as one pass. */
#define GRAM_PANEL 128

/* See spectral_impl.h. xs: a slab of GT_R m doubles per thread (two at most), then a wide block's panel transposed
 * (GRAM_PANEL n floats, within the n m floats the scratch has room for). */
void lipt_spectral_gram(int trans, int n, int m, const float *w, int lda, double *c, double *xs) {
    float *t = (float *)(xs + 2 * LIPT_SPECTRAL_GRAM_SLAB * (size_t)m);
    const int ng = (n + GT_R - 1) / GT_R;
    const int par = !omp_in_parallel() && omp_get_max_threads() > 1 && (size_t)n * n * m / 2 >= GRAM_PAR_WORK;
    for (int k0 = 0; k0 < m; k0 += GRAM_PANEL) {
        const int kk = m - k0 < GRAM_PANEL ? m - k0 : GRAM_PANEL, first = k0 == 0;
        const float *a = w + (size_t)k0 * lda; /* the panel, rows k0.. of the tall block */
        int la = lda;
        if (!trans) { /* A Aᵀ = (Aᵀ)ᵀ Aᵀ: columns k0.. of the wide block, transposed */
            transpose_f(w + k0, n, kk, lda, t);
            a = t;
            la = n;
        }
#pragma omp parallel for schedule(dynamic, 1) num_threads(2) if (par)
        for (int g = 0; g < ng; g++) {
            const int i0 = g * GT_R;
            double *x = xs + (size_t)omp_get_thread_num() * LIPT_SPECTRAL_GRAM_SLAB * m;
            if (i0 + GT_R <= n) gram_tall_rows(a, la, kk, x, c, n, i0, GT_R, first);
            else
                for (int i = i0; i < n; i++) gram_tall_rows(a, la, kk, x, c, n, i, 1, first);
        }
    }
}

/* Gram matrices of at least this order are formed in three products (gram_upper). */
#define GRAM_SPLIT_MIN 128

/* C (upper triangle) = op(A) op(A)ᵀ, op(A) [n, m]; and C [h, n-h] = op(A_1) op(A_2)ᵀ, in float, beta 0. Each on
 * the calling thread alone (the kernels' serial BLAS calls): OpenBLAS would split ssyrk from n = 65 on by the thread
 * count, and how it splits can change an entry's sum on some kernel sets. */
static void syrk_up(int trans, int n, int m, const float *a, int lda, float *c, int ldc) {
    lipt_ssyrk_upper_serial(trans, n, m, a, lda, c, ldc);
}
static void gemm_abt(int trans, int M, int N, int K, const float *a1, const float *a2, int lda, float *c, int ldc) {
    lipt_sgemm_serial(trans, !trans, M, N, K, 1.0f, a1, lda, a2, lda, 0.0f, c, ldc);
}

/* The upper triangle of the n×n row-major float C = op(A) op(A)ᵀ, op(A) = A [n×m] (trans 0) or Aᵀ with A [m×n]
 * (trans 1), row stride lda (the Gram iteration's squarings); C's other entries are left alone.
 * From order GRAM_SPLIT_MIN on it is three products: with h = n/2 and A_1, A_2 the first h and the other n - h rows
 * of op(A), the diagonal blocks' triangles A_1 A_1ᵀ and A_2 A_2ᵀ (ssyrk, one task) and the off-diagonal block
 * A_1 A_2ᵀ (sgemm, the other task, of the same work): each on one thread, the two tasks side by side when threads
 * allow. OpenBLAS's own threading of ?syrk at these orders gained nothing on two threads (1.0 ms either way for
 * dsyrk at n = 256 on the bench machine), and its waiting threads spun in sched_yield. Which product forms an entry
 * depends only on n, so the result does not depend on the thread count. Every entry is a dot product of n terms,
 * which is all the error analysis of lipt_spectral_ub assumes (any order, with or without FMA). Each task zeroes
 * what it writes first: beta = 0 should make BLAS ignore C, and zeroing makes that independent of the
 * implementation. */
static void gram_upper(int trans, int n, int m, const float *a, int lda, float *c) {
    const int op = trans;
#define GRAM_ZERO(i, j0, len) memset(c + (size_t)(i) * n + (size_t)(j0), 0, (size_t)(len) * sizeof(float))
    if (n < GRAM_SPLIT_MIN) {
        for (int i = 0; i < n; i++) GRAM_ZERO(i, i, n - i);
        syrk_up(op, n, m, a, lda, c, n);
        return;
    }
    const int h = n / 2;
    const float *a1 = a, *a2 = a + (trans ? (size_t)h : (size_t)h * lda);
    const int par = !omp_in_parallel() && omp_get_max_threads() > 1 && lipt_blas_nests_safely();
#pragma omp parallel for schedule(static) num_threads(2) if (par)
    for (int task = 0; task < 2; task++) {
        if (task == 0) { /* C[0:h, h:n] = A_1 A_2ᵀ */
            for (int i = 0; i < h; i++) GRAM_ZERO(i, h, n - h);
            gemm_abt(trans, h, n - h, m, a1, a2, lda, c + h, n);
        } else { /* the triangles of C[0:h, 0:h] and C[h:n, h:n] */
            for (int i = 0; i < h; i++) GRAM_ZERO(i, i, h - i);
            for (int i = h; i < n; i++) GRAM_ZERO(i, i, n - i);
            syrk_up(op, h, m, a1, lda, c, n);
            syrk_up(op, n - h, m, a2, lda, c + (size_t)h * n + h, n);
        }
    }
#undef GRAM_ZERO
}

/* Scratch for any block whose larger side is at most m and whose Gram matrix has order at most n, with t squarings
 * at most and (chol) the Cholesky-verified bound. */
lipt_ub_scratch lipt_ub_scratch_alloc_for(lipt_arena *ar, size_t m, size_t n, int t, int chol, int steer) {
    lipt_ub_scratch s;
    const size_t vw_doubles = chol ? lipt_spectral_verify_scratch((int)n) : 0;
    s.vw = vw_doubles ? lipt_arena_alloc(ar, vw_doubles * sizeof(double)) : NULL;
    s.pv = steer ? lipt_arena_alloc(ar, 3 * m * sizeof(double)) : NULL;
    s.xs = lipt_arena_alloc(ar, lipt_spectral_gram_scratch(n, m) * sizeof(double));
    s.g = lipt_arena_alloc(ar, n * n * sizeof(double));
    s.h = lipt_arena_alloc(ar, n * n * sizeof(double));
    s.ek = lipt_arena_alloc(ar, (size_t)(t + 1) * sizeof(int));
    s.fk = lipt_arena_alloc(ar, (size_t)(t + 1) * sizeof(double));
    s.dk = lipt_arena_alloc(ar, (size_t)(t + 1) * sizeof(double));
    return s;
}

static lipt_ub_scratch ub_scratch_alloc(lipt_arena *ar, int R, int cb, int gram_arg) {
    return lipt_ub_scratch_alloc_for(ar, (size_t)(cb > R ? cb : R), (size_t)(cb > R ? R : cb),
                                gram_arg & ~LIPT_SPECTRAL_CHOLESKY, (gram_arg & LIPT_SPECTRAL_CHOLESKY) != 0, 0);
}

/* The exponent e with sqrt(s) in [2^(e-1), 2^e): scaling by 2^-e brings a matrix with ‖.‖_F² = s into [1/2, 1). */
static int frob_exponent(double s) {
    int e = 0;
    if (s > 0 && isfinite(s)) frexp(sqrt(s), &e);
    return e;
}

/* An upper bound of rho(H_0) for the mirrored n×n double Gram matrix g (scaled in place), by t Gram-iteration
 * squarings in float (t = 0: ‖H_0‖_F) with the error terms of the argument above; scratch from sc_. */
static double gram_rho_bound(double *g, int n, int t, lipt_ub_scratch sc_) {
    const size_t nn = (size_t)n * n;
    if (t == 0) return lipt_ub_up(sqrt(lipt_ub_sum_bound(scale_sumsq(g, nn, 1.0), nn)));
    double *fk = sc_.fk, *dk = sc_.dk;
    float *gf = (float *)sc_.h, *hf = gf + nn; /* the float levels: G_k and X_k */
    int *ek = sc_.ek;
    const double gam_f = lipt_ub_gamma_f(n), under_f = ldexp((double)nn, -149), sub_f = ldexp((double)n, -149);
    for (int k = 0; k < t; k++) {
        level_sums sf;
        if (k == 0) { /* G_0 = fl_f(2^-e H_0), off by <= u_f / (1 - u_f) <= 2^-24 (1 + 2^-23) of itself */
            ek[0] = frob_exponent(scale_sumsq(g, nn, 1.0));
            level0_to_float(g, n, ldexp(1.0, -ek[0]), gf);
            level_float(gf, n, 1.0f, &sf);
            dk[0] = lipt_ub_up(lipt_ub_up(0x1p-24 * (1 + 0x1p-23) * level_norm_bound(&sf, n)) + sub_f);
        } else { /* G_k = 2^-e X_{k-1}, in place */
            ek[k] = frob_exponent(level_float(gf, n, 1.0f, NULL));
            level_float(gf, n, ldexpf(1.0f, -ek[k]), &sf);
            dk[k] = sub_f;
        }
        const double nb = level_norm_bound(&sf, n);
        fk[k] = lipt_ub_up(lipt_ub_up(gam_f * lipt_ub_up(nb * nb)) + under_f);
        gram_upper(0, n, n, gf, n, hf); /* X_k = G_k G_kᵀ = G_k² */
        mirror_upper_f(hf, n);
        float *tmp = gf;
        gf = hf;
        hf = tmp;
    }
    /* from rho(G_t) <= ‖G_t‖_F back to rho(H_0) */
    double c = lipt_ub_up(sqrt(lipt_ub_sum_bound(level_float(gf, n, 1.0f, NULL), nn)));
    for (int k = t - 1; k >= 0; k--) {
        c = lipt_ub_up(sqrt(lipt_ub_up(c + fk[k]))); /* >= rho(G_k) */
        c = lipt_ub_up(c + dk[k]);                  /* >= rho(2^-e_k X_{k-1}), or of 2^-e_0 H_0 */
        c = ldexp(c, ek[k]);                        /* >= rho(X_{k-1}), or rho(H_0) */
        if (c < DBL_MIN) c = lipt_ub_up(c);         /* ldexp rounded (subnormal result) */
    }
    return c;
}

/* start: the block's power-iteration vector of the Gram side's order (u_b for a wide block, v_b otherwise), a
 * start for Lanczos (LIPT_SPECTRAL_CHOLESKY), or NULL. ritz (n doubles or NULL): lipt_spectral_verify_top's, NaN in
 * ritz[0] when the bound did not come from it. */
double lipt_spectral_ub_core(const float *w, int R, int C, int c0, int cb, int gram_arg, const float *start,
                               lipt_ub_scratch sc_, double *ritz) {
    if (ritz) ritz[0] = NAN;
    const int rows = cb > R; /* Gram matrix of the smaller side: W_b W_bᵀ when the block is wide */
    const int n = rows ? R : cb, m = rows ? cb : R;
    const size_t nn = (size_t)n * n;

    lipt_spectral_gram(!rows, n, m, w + c0, C, sc_.g, sc_.xs);
    /* The block's squared Frobenius norm as the trace of H_0: every entry's square (exact in double) is a term of
     * exactly one diagonal entry, so this is a sum of the R cb squares in some order, which lipt_ub_sum_bound bounds
     * as any other (and a separate pass over the block cost 3 % of the certificate). It is finite iff every entry
     * is: a float's square cannot overflow a double, nor can a sum of fewer than 2^800 of them. */
    double fa = 0;
    for (int i = 0; i < n; i++) fa += sc_.g[(size_t)i * n + i];
    if (!isfinite(fa)) return INFINITY;
    if (fa == 0) return 0; /* all zero: a nonzero float square is >= 2^-298, so the sum cannot vanish otherwise */
    const double fa_up = lipt_ub_sum_bound(fa, (size_t)R * cb);
    const double e0 = lipt_ub_up(lipt_ub_up(lipt_ub_gamma(m) * fa_up) + lipt_ub_tiny_slack((double)nn));
    mirror_upper(sc_.g, n);
    /* c bounds λ_max(H_0), all the last step needs (Weyl): proven by Cholesky when asked for and found
     * (spectral_verify.c), else Gram iteration's bound of rho(H_0) */
    double c = gram_arg & LIPT_SPECTRAL_CHOLESKY ? lipt_spectral_verify_top(sc_.g, n, start, sc_.vw, ritz) : 0;
    if (!(c > 0)) c = gram_rho_bound(sc_.g, n, gram_arg & ~LIPT_SPECTRAL_CHOLESKY, sc_);
    double result = lipt_ub_up(sqrt(lipt_ub_up(c + e0))); /* sigma² <= rho(H_0) + e_0 */
    return isnan(result) ? INFINITY : result;
}

void lipt_spectral_ub_check(int R, int C, int c0, int cb, int gram_iters) {
    LIPT_CHECK(R > 0 && cb > 0 && c0 >= 0 && c0 + cb <= C, "spectral_ub: block [%d, %d) x %d rows outside [%d, %d]",
               c0, c0 + cb, R, R, C);
    LIPT_CHECK(gram_iters >= 0 && (gram_iters & ~LIPT_SPECTRAL_CHOLESKY) < LIPT_SPECTRAL_CHOLESKY,
               "spectral_ub: gram_iters %d out of range", gram_iters);
}

double lipt_spectral_ub(lipt_ctx *ctx, const float *w, int R, int C, int c0, int cb, int gram_iters) {
    lipt_spectral_ub_check(R, C, c0, cb, gram_iters);
    lipt_arena_mark mk = lipt_arena_get_mark(&ctx->arena);
    const lipt_ub_scratch sc = ub_scratch_alloc(&ctx->arena, R, cb, gram_iters);
    const double r = lipt_spectral_ub_core(w, R, C, c0, cb, gram_iters, NULL, sc, NULL);
    lipt_arena_release(&ctx->arena, mk);
    return r;
}

