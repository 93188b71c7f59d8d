/* lipt_gemm_ksplit: the weight gradients' products (dW = xᵀ G: A transposed, a long sum over the tokens, a small
 * output) cut along the sum instead of the output.
 *
 * lipt_gemm cuts C into blocks of rows or columns, each block one single-thread call. For dW that is the wrong
 * dimension: C is small (192 ... 1024 on a side) and K long (the batch's tokens, 2048 ... 4096), so every block packs
 * a whole K-long panel of the other operand again, and the thin blocks run the library's kernels below their rate:
 * on the Intel AVX-512 CPU of docs/PERFORMANCE.md oneDNN's sgemm ran 256 x 768 x 2048 at 256 GFLOP/s in lipt_gemm's
 * column blocks against 294 in two halves of K (whole rows each), 192 x 576 x 4096 at 197 against 296. So the sum is
 * cut into chunks fixed by K alone (never by the thread count: the bits do not depend on --threads): chunk 0 is
 * computed into C with the caller's beta, chunk c >= 1 into its own scratch in the context's arena, and C then gets
 * the partial sums added in chunk order, each entry by one thread (tests/test_ops_gemm.c, test_gemm_ksplit).
 *
 * A transposed operand with a row stride of 1024 floats or more (4 KB: its rows fall on the same cache sets) runs
 * slowly in oneDNN's sgemm whatever the cut: 1024 x 256 x 2048 (W2's gradient at d_ff 1024) at 186-215 GFLOP/s, every
 * M from 1024 at 190-220 with N 128-512. When B's stride is the smaller one, the chunks compute Cᵀ = Bᵀ A instead
 * (253-272 GFLOP/s for those with M 1024 or 2048, transposition included), all into scratch, and C = beta C + the
 * partials transposed, in chunk order. */
#include "kernels/gemm.h"

#include "lipt/arena.h"

/* K per chunk: an even number of chunks (two threads share them evenly), about 1024 or more of K each, a multiple
 * of 16; 0 when the product is not cut so (K under twice the output's larger side or under 2048). */
int lipt_gemm_ksplit_chunk(int M, int N, int K) {
    const int side = M > N ? M : N;
    if (K < 2048 || K < 2 * side) return 0;
    const int n = 2 * ((K + 2047) / 2048);
    return ((K + n - 1) / n + 15) & ~15;
}

int lipt_gemm_ksplit_wanted(int ta, int tb, int M, int N, int K) {
    /* outside every parallel construct, even a one-thread one (omp_get_level, not omp_in_parallel): whether a product
     * is cut so must not depend on the thread count, and the partial sums come from the context's arena */
    return ta && !tb && lipt_gemm_on_dnnl(M, N, K) && lipt_gemm_ksplit_chunk(M, N, K) > 0 && omp_get_level() == 0;
}

void lipt_gemm_ksplit_sum(int M, int N, int nk, const float *P, float *C, int ldc) {
    const size_t mn = (size_t)M * N;
#pragma omp parallel for schedule(static) if (!omp_in_parallel() && mn * (size_t)nk >= ((size_t)1 << 14))
    for (int i = 0; i < M; i++) {
        float *ci = C + (size_t)i * ldc;
        for (int c = 1; c < nk; c++) {
            const float *pi = P + (size_t)(c - 1) * mn + (size_t)i * N;
            for (int j = 0; j < N; j++) ci[j] += pi[j];
        }
    }
}

/* C = beta C + Σ_c P_cᵀ over the nk partials P_c [N, M] (dense), in chunk order, each entry by one thread, in tiles
 * of 32 x 32 gathered in a local tile: P's rows are read along i (contiguous, vectorised) and the tile is written to
 * C's rows at the end. (Reading P_c[j][i] down j for each i, as this did before, walked M floats apart: at M = 1024
 * every read fell on the same cache sets, 1.7 % of the invertible model's step on the Zen 5.) Each entry is still
 * P_0 (beta C + P_0 with beta) plus P_1, P_2, ... in that order: the same bits. beta 0 never reads C. */
static void ksplit_sum_transposed(int M, int N, int nk, const float *P, float beta, float *C, int ldc) {
    const size_t mn = (size_t)M * N;
    enum { T = 32 };
#pragma omp parallel for schedule(static)
    for (int i0 = 0; i0 < M; i0 += T) {
        float tile[T][T]; /* tile[j - j0][i - i0] */
        const int wi = i0 + T < M ? T : M - i0;
        for (int j0 = 0; j0 < N; j0 += T) {
            const int wj = j0 + T < N ? T : N - j0;
            for (int j = 0; j < wj; j++) {
                const float *p = P + (size_t)(j0 + j) * M + i0;
                for (int i = 0; i < wi; i++) tile[j][i] = p[i];
            }
            if (beta != 0.0f)
                for (int i = 0; i < wi; i++) {
                    const float *ci = C + (size_t)(i0 + i) * ldc + j0;
                    for (int j = 0; j < wj; j++) tile[j][i] = beta * ci[j] + tile[j][i];
                }
            for (int c = 1; c < nk; c++)
                for (int j = 0; j < wj; j++) {
                    const float *p = P + (size_t)c * mn + (size_t)(j0 + j) * M + i0;
                    for (int i = 0; i < wi; i++) tile[j][i] += p[i];
                }
            for (int i = 0; i < wi; i++) {
                float *ci = C + (size_t)(i0 + i) * ldc + j0;
                for (int j = 0; j < wj; j++) ci[j] = tile[j][i];
            }
        }
    }
}

int lipt_gemm_ksplit_transposed(int lda, int ldb) {
    return lda >= 1024 && ldb < lda;
}

void lipt_gemm_ksplit(lipt_kctx *ctx, int M, int N, int K, float alpha, const float *A, int lda, const float *B,
                      int ldb, float beta, float *C, int ldc) {
    const int kc = lipt_gemm_ksplit_chunk(M, N, K), nk = kc > 0 ? (K + kc - 1) / kc : 1;
    if (nk < 2) {
        lipt_gemm(1, 0, M, N, K, alpha, A, lda, B, ldb, beta, C, ldc);
        return;
    }
    const lipt_arena_mark mk = lipt_arena_get_mark(ctx->arena);
    const size_t mn = (size_t)M * N;
    const int tr = lipt_gemm_ksplit_transposed(lda, ldb);
    /* the partials: chunks 1.. as [M, N]; transposed, every chunk's as [N, M] */
    float *P = lipt_arena_alloc(ctx->arena, (size_t)(tr ? nk : nk - 1) * mn * sizeof(float));
    const int nt = omp_get_max_threads(), team = nt < nk ? nt : nk;
#pragma omp parallel for schedule(static) num_threads(team) if (team > 1)
    for (int c = 0; c < nk; c++) {
        const int k0 = c * kc, kk = K - k0 < kc ? K - k0 : kc;
        const float *a = A + (size_t)k0 * lda, *b = B + (size_t)k0 * ldb; /* rows k0.. of A [K, M] and B [K, N] */
        const int saved = lipt_blas_serial_begin();
        if (tr) lipt_sgemm_block(1, 0, N, M, kk, alpha, b, ldb, a, lda, 0.0f, P + (size_t)c * mn, M);
        else if (c == 0) lipt_sgemm_block(1, 0, M, N, kk, alpha, a, lda, b, ldb, beta, C, ldc);
        else lipt_sgemm_block(1, 0, M, N, kk, alpha, a, lda, b, ldb, 0.0f, P + (size_t)(c - 1) * mn, N);
        lipt_blas_serial_end(saved);
    }
    if (tr) ksplit_sum_transposed(M, N, nk, P, beta, C, ldc);
    else lipt_gemm_ksplit_sum(M, N, nk, P, C, ldc);
    lipt_arena_release(ctx->arena, mk);
}
