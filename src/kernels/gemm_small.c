/* Register-tiled float32 products with one small operand (kernels/gemm_small.h): a tile of GS_R rows x GS_CV vectors of
 * C stays in registers while k runs over the whole reduction, each step one broadcast of A per row and one load of
 * B per vector. Nothing is packed: B (d x d, in L1) and the rows of A are read where they are. */
#include "kernels/gemm_small.h"

#include <stddef.h>

#include "kernels/vmath.h"

/* Tile shape: GS_R x GS_CV accumulators, plus GS_CV vectors of B and a broadcast, within the register file (32
 * registers with AVX-512, 16 otherwise). With AVX-512, 6 x 4 measured 5-20 % faster than 4 x 4 and than OpenBLAS
 * on the d = 64 shapes (8 x 4, 32 accumulators, leaves no register for B and was slower). */
#if LIPT_VW == 16
#define GS_R 6
#define GS_CV 4
#else
#define GS_R 4
#define GS_CV 2
#endif

/* How far ahead the TN tile prefetches its two streams, in rows of k (about a DRAM latency of FMAs). */
#define GS_PF_K 16

/* One tile: C[r, v] for r < R rows, v < CV vectors, = alpha Σ_k A(r, k) B[k, v] + beta C, where A(r, k) is
 * A[r·lda + k] (NN) or, with TN, A[k·lda + r]. R, CV and TN are constants at every call (always inlined), so the
 * accumulators are registers. */
LIPT_VINLINE void gs_tile(const int R, const int CV, const int TN, int K, const float *A, ptrdiff_t lda,
                          const float *B, ptrdiff_t ldb, float alpha, float beta, float *C, ptrdiff_t ldc) {
    lipt_vf acc[GS_R][GS_CV];
    for (int r = 0; r < R; r++)
        for (int v = 0; v < CV; v++) acc[r][v] = (lipt_vf){0};
    for (int k = 0; k < K; k++) {
        const float *bk = B + k * ldb;
        if (TN) {
            /* A and B are both read down K, rows lda and ldb apart (the heads' column blocks of [B·T, D]): a
             * stride the hardware prefetcher follows poorly when they come from memory */
            const int kp = k + GS_PF_K < K ? k + GS_PF_K : K - 1;
            __builtin_prefetch(A + kp * lda);
            for (int v = 0; v < CV; v++) __builtin_prefetch(B + kp * ldb + v * LIPT_VW);
        }
        lipt_vf b[GS_CV];
        for (int v = 0; v < CV; v++) b[v] = lipt_vload(bk + v * LIPT_VW);
        for (int r = 0; r < R; r++) {
            const lipt_vf a = lipt_vset1(TN ? A[k * lda + r] : A[r * lda + k]);
            for (int v = 0; v < CV; v++) acc[r][v] = lipt_vf_fma(a, b[v], acc[r][v]);
        }
    }
    for (int r = 0; r < R; r++)
        for (int v = 0; v < CV; v++) {
            float *c = C + r * ldc + v * LIPT_VW;
            lipt_vf out = alpha == 1.0f ? acc[r][v] : alpha * acc[r][v];
            if (beta == 1.0f) out = lipt_vload(c) + out;
            else if (beta != 0.0f) out = beta * lipt_vload(c) + out;
            lipt_vstore(c, out);
        }
}

/* A row block of R rows across all N / LIPT_VW vectors: GS_CV at a time, then single vectors. */
LIPT_VINLINE void gs_rows(const int R, const int TN, int nv, int K, const float *A, ptrdiff_t lda, const float *B,
                          ptrdiff_t ldb, float alpha, float beta, float *C, ptrdiff_t ldc) {
    int v = 0;
    for (; v + GS_CV <= nv; v += GS_CV)
        gs_tile(R, GS_CV, TN, K, A, lda, B + v * LIPT_VW, ldb, alpha, beta, C + v * LIPT_VW, ldc);
    for (; v < nv; v++) gs_tile(R, 1, TN, K, A, lda, B + v * LIPT_VW, ldb, alpha, beta, C + v * LIPT_VW, ldc);
}

/* C[M, N] = alpha A(·,·) B[K, N] + beta C, GS_R rows of C at a time. */
LIPT_VINLINE void gs_product(const int TN, int M, int N, int K, const float *A, ptrdiff_t lda, const float *B,
                             ptrdiff_t ldb, float alpha, float beta, float *C, ptrdiff_t ldc) {
    const int nv = N / LIPT_VW;
    const ptrdiff_t ars = TN ? 1 : lda; /* A's step from one row of C to the next */
    int m = 0;
    for (; m + GS_R <= M; m += GS_R) {
        if (!TN) {
            /* NN: the next tile's rows of A and C (strided rows of the heads' blocks), while this one computes */
            const int mp = m + GS_R + GS_R <= M ? m + GS_R : m;
            for (int r = 0; r < GS_R; r++) {
                for (int k = 0; k < K; k += 64 / (int)sizeof(float)) __builtin_prefetch(A + (mp + r) * lda + k);
                for (int n = 0; n < N; n += 64 / (int)sizeof(float)) __builtin_prefetch(C + (mp + r) * ldc + n, 1);
            }
        }
        gs_rows(GS_R, TN, nv, K, A + m * ars, lda, B, ldb, alpha, beta, C + m * ldc, ldc);
    }
    /* the last M % GS_R rows as one tile of that height: a TN product streams all of K once per tile */
    const float *Am = A + m * ars;
    float *Cm = C + m * ldc;
    switch (M - m) {
#define GS_TAIL(r)                                                                                                  \
    case r: gs_rows(r, TN, nv, K, Am, lda, B, ldb, alpha, beta, Cm, ldc); break;
        GS_TAIL(1)
        GS_TAIL(2)
        GS_TAIL(3)
#if GS_R > 4
        GS_TAIL(4)
        GS_TAIL(5)
#endif
#if GS_R > 6
        GS_TAIL(6)
        GS_TAIL(7)
#endif
#undef GS_TAIL
    default: break;
    }
}

int lipt_gemm_small_ok(int ta, int tb, int M, int N, int K) {
    if (ta && tb) return 0;
    if (M < 1 || N < 1 || K < 1 || N % LIPT_VW != 0 || N > LIPT_GS_MAX) return 0;
    if (tb && K > LIPT_GS_MAX) return 0;
    if (ta && M > LIPT_GS_MAX) return 0;
    return 1;
}

void lipt_gemm_small(int ta, int tb, int M, int N, int K, float alpha, const float *A, int lda, const float *B,
                     int ldb, float beta, float *C, int ldc) {
    if (tb) {
        /* op(B) = Bᵀ with B [N, K]: transposed once into [K, N] rows (at most LIPT_GS_MAX² floats, d² work against
         * the product's M·d²), so the tile loads whole vectors of a row. */
        float Bt[LIPT_GS_MAX * LIPT_GS_MAX] __attribute__((aligned(64)));
        for (int n = 0; n < N; n++)
            for (int k = 0; k < K; k++) Bt[(size_t)k * N + n] = B[(size_t)n * ldb + k];
        gs_product(0, M, N, K, A, lda, Bt, N, alpha, beta, C, ldc);
    } else if (ta) {
        gs_product(1, M, N, K, A, lda, B, ldb, alpha, beta, C, ldc);
    } else {
        gs_product(0, M, N, K, A, lda, B, ldb, alpha, beta, C, ldc);
    }
}
