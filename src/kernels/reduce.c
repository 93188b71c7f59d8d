/* The reductions of kernels/reduce.h. */
#include "kernels/reduce.h"

#include <omp.h>
#include <string.h>

#include "kernels/kernels.h"

/* Below this many elements a reduction runs on one thread (as the element-wise ops' loops: RED_PAR_MIN there). */
#define RED_PAR_MIN ((size_t)1 << 15)
/* Column block of lipt_reduce_rows_acc: at most this many columns per thread's range (its sums stay in L1). */
#define RED_COLS 512

/* Chunks of lipt_sum_f32: at most this many, of at least EW_SUM_CHUNK elements. */
#define EW_SUM_MAXC 256
#define EW_SUM_CHUNK ((size_t)4096)

/* Why chunks and lanes: one running double sum per thread had waited one addition latency per element (0.6 % of an
 * invertible model's training step, the gradients of its weights' normalising factors; 0.4 % of a dp step in the
 * gradient norm). */
double lipt_sum_f32(const float *g, const float *w, size_t n) {
    size_t cs = (n + EW_SUM_MAXC - 1) / EW_SUM_MAXC;
    if (cs < EW_SUM_CHUNK) cs = EW_SUM_CHUNK;
    const size_t nc = (n + cs - 1) / cs;
    double part[EW_SUM_MAXC];
#pragma omp parallel for schedule(static) if (n >= RED_PAR_MIN && nc > 1)
    for (size_t c = 0; c < nc; c++) {
        const size_t i0 = c * cs, i1 = n - i0 < cs ? n : i0 + cs;
        lipt_vdh acc[2] = {{0}};
        size_t i = i0;
        for (; i + 2 * LIPT_VDW <= i1; i += 2 * LIPT_VDW)
            for (int k = 0; k < 2; k++) {
                lipt_vdh t = lipt_vdh_loadf(g + i + k * LIPT_VDW);
                if (w) t *= lipt_vdh_loadf(w + i + k * LIPT_VDW); /* float products are exact in double */
                acc[k] += t;
            }
        double s = 0;
        for (int k = 0; k < 2; k++)
            for (int l = 0; l < LIPT_VDW; l++) s += acc[k][l];
        for (; i < i1; i++) s += w ? (double)g[i] * w[i] : (double)g[i];
        part[c] = s;
    }
    double s = 0;
    for (size_t c = 0; c < nc; c++) s += part[c];
    return s;
}

void lipt_reduce_rows_acc(float *db, const float *g, const float *w, size_t rows, size_t P, double sign) {
    if (P == 1) {
        db[0] += (float)(sign * lipt_sum_f32(g, w, rows));
        return;
    }
    /* Column ranges: each thread owns whole columns, so no two threads write the same db[j], and each column is
     * summed in row order whatever the split (the same bits on any thread count). A range streams the rows'
     * contiguous segments with its sums in L1 (narrow blocks read at a stride of P floats, which for P = 1024 is
     * 4 KiB: every row of a block in the same cache set). */
    const int nthr = omp_get_max_threads();
    size_t cols = (P + (size_t)nthr - 1) / (size_t)nthr;
    cols = (cols + 2 * LIPT_VDW - 1) / (2 * LIPT_VDW) * (2 * LIPT_VDW);
    if (cols > RED_COLS) cols = RED_COLS;
    const size_t nblk = (P + cols - 1) / cols;
#pragma omp parallel for if (rows * P >= RED_PAR_MIN && nblk > 1) schedule(static)
    for (size_t blk = 0; blk < nblk; blk++) {
        const size_t j0 = blk * cols, nj = P - j0 < cols ? P - j0 : cols;
        lipt_vdh acc[RED_COLS / LIPT_VDW];
        memset(acc, 0, sizeof acc);
        for (size_t r = 0; r < rows; r++) lipt_colsum_acc(acc, g + r * P + j0, w ? w + r * P + j0 : NULL, nj);
        for (size_t j = 0; j < nj; j++) db[j0 + j] += (float)(sign * acc[j / LIPT_VDW][j % LIPT_VDW]);
    }
}

void lipt_rows_colsum(lipt_kctx *ctx, float *dx, size_t rows, size_t P, float *db, size_t par_min,
                      void (*row)(size_t r, void *arg, float *dst), void *arg, void *pk) {
    const size_t nc = (rows + LIPT_COLSUM_ROWS - 1) / LIPT_COLSUM_ROWS, nvd = (P + LIPT_VDW - 1) / LIPT_VDW;
    const lipt_arena_mark mk = lipt_arena_get_mark(ctx->arena);
    lipt_vdh *part = db ? lipt_arena_alloc(ctx->arena, nc * nvd * sizeof(lipt_vdh)) : NULL;
    /* without dx, each thread's rows go through one row of scratch (padded to a cache line) */
    const size_t ps = (P + 15) & ~(size_t)15;
    float *scr = dx ? NULL : lipt_arena_alloc(ctx->arena, (size_t)omp_get_max_threads() * ps * sizeof(float));
#pragma omp parallel for if (rows * P >= par_min && nc > 1) schedule(static)
    for (size_t c = 0; c < nc; c++) {
        lipt_vdh *acc = part ? part + c * nvd : NULL;
        if (acc) memset(acc, 0, nvd * sizeof *acc);
        const size_t r1 = rows - c * LIPT_COLSUM_ROWS < LIPT_COLSUM_ROWS ? rows : (c + 1) * LIPT_COLSUM_ROWS;
        for (size_t r = c * LIPT_COLSUM_ROWS; r < r1; r++) {
            float *d = dx ? dx + r * P : scr + (size_t)omp_get_thread_num() * ps;
            row(r, arg, d);
            if (acc) lipt_colsum_acc(acc, d, NULL, P);
            if (pk) lipt_lowp_pack_span(ctx, d, P, pk, r * P);
        }
    }
    if (part) {
        for (size_t c = 1; c < nc; c++)
            for (size_t k = 0; k < nvd; k++) part[k] += part[c * nvd + k];
        for (size_t j = 0; j < P; j++) db[j] += (float)part[j / LIPT_VDW][j % LIPT_VDW];
    }
    lipt_arena_release(ctx->arena, mk);
}
