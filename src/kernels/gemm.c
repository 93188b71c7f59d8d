/* lipt_gemm: the float32 GEMM every product in lipt runs on, and the choice of library behind it.
 *
 * OpenBLAS 0.3.21's sgemm reaches 140-190 GFLOP/s on the model's large products at 2 threads on the Zen 4 machines
 * (its packing and partition suit 1024^3 better than 2048 x 256 x 1024), oneDNN 2.6's sgemm 200-220 on most of them
 * (docs/PERFORMANCE.md has the table); on the attention's per-head blocks (a few hundred thousand multiply-adds, one
 * thread each) OpenBLAS's small-matrix kernels are faster. So products from LIPT_GEMM_DNNL_MIN multiply-adds go to
 * oneDNN when the build has it, the rest to OpenBLAS.
 *
 * Neither library threads a product of lipt_gemm's. A library splits a product by the thread count, and how it splits
 * can change an entry's sum: oneDNN's gemm driver may split the sum over K, OpenBLAS's Haswell and Prescott kernels
 * gave other bits on 1, 2 and 3 threads for 128 x 128 x 64 (its SkylakeX and Zen kernels happened to agree). Cutting
 * C into blocks per thread is not enough either: a single-thread call's sum for an entry can depend on where the
 * block's tail falls (oneDNN's AVX2 kernels, 300 x 257 x 129 cut for 2 and for 3 threads; its AVX-512 ones agreed).
 * So the product is cut into blocks fixed by its shape (lipt_gemm_cut_fixed), each one single-thread call
 * (lipt_blas_serial), and lipt's threads take the blocks: every thread count makes the same calls, and the bits do not
 * depend on the thread count whatever kernels the libraries pick for the CPU. test_ops_gemm checks 1, 2 and 3 threads
 * and calls from inside a parallel region; tests/kernels_test.sh runs it under OpenBLAS's Prescott, Haswell and
 * SkylakeX kernels and oneDNN's AVX2 ones. */
#include "kernels/gemm.h"

#include <cblas.h>
#include <omp.h>

#ifdef LIPT_HAVE_DNNL
#include <oneapi/dnnl/dnnl.h>
#endif

static void sgemm_openblas(int ta, int tb, int M, int N, int K, float alpha, const float *A, int lda, const float *B,
                           int ldb, float beta, float *C, int ldc) {
    cblas_sgemm(CblasRowMajor, ta ? CblasTrans : CblasNoTrans, tb ? CblasTrans : CblasNoTrans, M, N, K, alpha, A, lda,
                B, ldb, beta, C, ldc);
}

/* One product's arguments, for the block calls; rows: lipt_gemm_rows's pass over a block's rows (or NULL). */
typedef struct {
    int ta, tb, M, N, K, lda, ldb, ldc;
    float alpha, beta;
    const float *A, *B;
    float *C;
    lipt_gemm_rows_fn rows;
    void *rows_arg;
} gemm_args;

/* Block k of g as one library call on the calling thread (lipt_blas_serial). */
typedef void (*block_call)(const gemm_args *g, const lipt_gemm_block *k);

static void block_openblas(const gemm_args *g, const lipt_gemm_block *k) {
    const int saved = lipt_blas_serial_begin();
    sgemm_openblas(g->ta, g->tb, k->m, k->w, g->K, g->alpha, g->A + k->a, g->lda, g->B + k->b, g->ldb, g->beta,
                   g->C + k->c, g->ldc);
    lipt_blas_serial_end(saved);
}

void lipt_sgemm_block(int ta, int tb, int M, int N, int K, float alpha, const float *A, int lda, const float *B,
                      int ldb, float beta, float *C, int ldc) {
#ifdef LIPT_HAVE_DNNL
    if (dnnl_sgemm(ta ? 'T' : 'N', tb ? 'T' : 'N', M, N, K, alpha, A, lda, B, ldb, beta, C, ldc) == dnnl_success)
        return; /* else arguments it rejects: OpenBLAS */
#endif
    sgemm_openblas(ta, tb, M, N, K, alpha, A, lda, B, ldb, beta, C, ldc);
}

#ifdef LIPT_HAVE_DNNL
static void block_dnnl(const gemm_args *g, const lipt_gemm_block *k) {
    const int saved = lipt_blas_serial_begin();
    lipt_sgemm_block(g->ta, g->tb, k->m, k->w, g->K, g->alpha, g->A + k->a, g->lda, g->B + k->b, g->ldb, g->beta,
                     g->C + k->c, g->ldc);
    lipt_blas_serial_end(saved);
}
#endif

/* The one row of C = op(A) B (M = 1, A not transposed) through sgemv: B's rows (tb) or columns of the block. */
static void block_gemv(const gemm_args *g, const lipt_gemm_block *k) {
    const int saved = lipt_blas_serial_begin();
    if (g->tb)
        cblas_sgemv(CblasRowMajor, CblasNoTrans, k->w, g->K, g->alpha, g->B + k->b, g->ldb, g->A, 1, g->beta,
                    g->C + k->c, 1);
    else
        cblas_sgemv(CblasRowMajor, CblasTrans, g->K, k->w, g->alpha, g->B + k->b, g->ldb, g->A, 1, g->beta,
                    g->C + k->c, 1);
    lipt_blas_serial_end(saved);
}

/* g in lipt_gemm_cut_fixed's blocks, one call each: shared by all of lipt's threads (at most one per block) outside
 * a parallel region, in turn on the calling thread inside one or on one thread. A parallel construct is entered only
 * for a team of two or more: even an if(false) one sets up a one-thread libgomp team (allocations included), which
 * the attention's per-head products, inside a parallel region, would pay for every call. */
static void run_blocks(const gemm_args *g, block_call call) {
    const lipt_gemm_cut cut = lipt_gemm_cut_fixed(g->M, g->N, g->K);
    const int nt = omp_in_parallel() ? 1 : omp_get_max_threads(), team = nt < cut.n ? nt : cut.n;
    /* a block of whole rows gets the rows pass on its thread at once, while in cache */
    const lipt_gemm_rows_fn rows = cut.by_rows ? g->rows : NULL;
    if (team > 1) {
#pragma omp parallel for schedule(static) num_threads(team)
        for (int i = 0; i < cut.n; i++) {
            const lipt_gemm_block k = lipt_gemm_block_at(cut, i, g->ta, g->tb, g->M, g->N, g->lda, g->ldb, g->ldc);
            call(g, &k);
            if (rows) rows(g->rows_arg, i * cut.side, i * cut.side + k.m);
        }
    } else {
        for (int i = 0; i < cut.n; i++) {
            const lipt_gemm_block k = lipt_gemm_block_at(cut, i, g->ta, g->tb, g->M, g->N, g->lda, g->ldb, g->ldc);
            call(g, &k);
            if (rows) rows(g->rows_arg, i * cut.side, i * cut.side + k.m);
        }
    }
    if (g->rows && !cut.by_rows) { /* blocks of columns: the rows pass after all of them, in fixed runs of rows */
        enum { RUN = 32 };
        const int runs = (g->M + RUN - 1) / RUN;
#pragma omp parallel for schedule(static) if (team > 1 && (size_t)g->M * g->N >= ((size_t)1 << 15))
        for (int r = 0; r < runs; r++) g->rows(g->rows_arg, r * RUN, r * RUN + RUN < g->M ? r * RUN + RUN : g->M);
    }
}

void lipt_gemm_rows(int ta, int tb, int M, int N, int K, float alpha, const float *A, int lda, const float *B,
                    int ldb, float beta, float *C, int ldc, lipt_gemm_rows_fn rows, void *rows_arg) {
    if (M <= 0 || N <= 0) return;
    const gemm_args g = {ta, tb, M, N, K, lda, ldb, ldc, alpha, beta, A, B, C, rows, rows_arg};
#ifdef LIPT_HAVE_DNNL
    if (lipt_gemm_on_dnnl(M, N, K)) {
        run_blocks(&g, block_dnnl);
        return;
    }
#endif
    run_blocks(&g, block_openblas);
}

void lipt_gemm(int ta, int tb, int M, int N, int K, float alpha, const float *A, int lda, const float *B, int ldb,
               float beta, float *C, int ldc) {
    lipt_gemm_rows(ta, tb, M, N, K, alpha, A, lda, B, ldb, beta, C, ldc, NULL, NULL);
}

void lipt_gemm_gemv(int ta, int tb, int M, int N, int K, float alpha, const float *A, int lda, const float *B, int ldb,
                    float beta, float *C, int ldc) {
    if (!(M == 1 && N > 0 && !ta)) {
        lipt_gemm(ta, tb, M, N, K, alpha, A, lda, B, ldb, beta, C, ldc);
        return;
    }
    /* C's one row in blocks of columns (lipt_gemm_cut_fixed cuts 1 x N by columns when N > 1) */
    const gemm_args g = {ta, tb, 1, N, K, lda, ldb, ldc, alpha, beta, A, B, C, NULL, NULL};
    run_blocks(&g, block_gemv);
}

int lipt_sgemm_lib(int lib, int ta, int tb, int M, int N, int K, float alpha, const float *A, int lda, const float *B,
                   int ldb, float beta, float *C, int ldc) {
    if (lib == 0) {
        if (M > 0 && N > 0) sgemm_openblas(ta, tb, M, N, K, alpha, A, lda, B, ldb, beta, C, ldc);
        return 0;
    }
#ifdef LIPT_HAVE_DNNL
    if (lib == 1) {
        if (M > 0 && N > 0 &&
            dnnl_sgemm(ta ? 'T' : 'N', tb ? 'T' : 'N', M, N, K, alpha, A, lda, B, ldb, beta, C, ldc) != dnnl_success)
            return -1;
        return 0;
    }
#endif
    return -1;
}
