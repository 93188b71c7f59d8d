/* The activations' passes of kernels/act.h. */
#include "kernels/act.h"

#include "kernels/kernels.h"

void lipt_gelu_pass_pk(const lipt_kctx *ctx, const float *x, float *y, float *der, size_t n, void *pk) {
    const size_t nchunk = lipt_act_nchunk(n);
#pragma omp parallel for if (n >= LIPT_ACT_PAR_MIN) schedule(static)
    for (size_t c = 0; c < nchunk; c++) {
        const size_t i = c * LIPT_ACT_CHUNK, len = lipt_act_chunk_len(n, c);
        lipt_vgelu(x + i, y + i, der ? der + i : NULL, len);
        if (pk) lipt_lowp_pack_span(ctx, y + i, len, pk, i);
    }
}

void lipt_gelu_pass(const float *x, float *y, float *der, size_t n) { lipt_gelu_pass_pk(NULL, x, y, der, n, NULL); }

/* GELU's backward rows and the bias's column sums in one pass (lipt_rows_colsum) */
typedef struct {
    const float *der, *g;
    size_t P;
} gelu_rows;

static void gelu_grad_row(size_t r, void *arg, float *dst) {
    const gelu_rows *a = arg;
    lipt_gelu_grad(a->der + r * a->P, a->g + r * a->P, dst, a->P, 1);
}

void lipt_gelu_grad_colsum(lipt_kctx *ctx, const float *der, const float *g, float *dx, size_t rows, size_t P,
                           float *db, void *pk) {
    gelu_rows a = {der, g, P};
    lipt_rows_colsum(ctx, dx, rows, P, db, LIPT_ACT_PAR_MIN, gelu_grad_row, &a, pk);
}

/* Pieces of MAXMIN_CHUNK floats (whole vectors, so whole pairs) per iteration of the threads' loop. */
#define MAXMIN_CHUNK ((size_t)LIPT_VW * 256)

/* y = maxmin(a) over n floats (n even; y may be a) on the context's threads. */
void lipt_maxmin_pass(const float *a, float *y, size_t n) {
    const size_t nchunk = (n + MAXMIN_CHUNK - 1) / MAXMIN_CHUNK;
#pragma omp parallel for schedule(static) if (n >= (1u << 17))
    for (size_t c = 0; c < nchunk; c++) {
        const size_t i = c * MAXMIN_CHUNK;
        lipt_maxmin_row(a + i, y + i, n - i < MAXMIN_CHUNK ? n - i : MAXMIN_CHUNK);
    }
}

void lipt_maxmin_grad(const float *a, const float *g, float *dx, size_t n, int fresh, lipt_vi ix) {
    for (size_t i = 0; i < n; i += LIPT_VW) {
        const size_t len = lipt_vlanes(i, n);
        const lipt_vf av = lipt_vload_n(a + i, len), gv = lipt_vload_n(g + i, len);
        const lipt_vf r = lipt_vsel(lipt_pair_keep_mask(av, lipt_pair_swap(av, ix)), gv, lipt_pair_swap(gv, ix));
        lipt_vstore_n(dx + i, fresh ? r : lipt_vload_n(dx + i, len) + r, len);
    }
}

typedef struct {
    const float *a, *g;
    size_t P;
    lipt_vi ix;
} maxmin_rows;

static void maxmin_grad_row(size_t r, void *arg, float *dst) {
    const maxmin_rows *m = arg;
    lipt_maxmin_grad(m->a + r * m->P, m->g + r * m->P, dst, m->P, 1, m->ix);
}

void lipt_maxmin_grad_colsum(lipt_kctx *ctx, const float *a, const float *g, float *dx, size_t rows, size_t P,
                             float *db, void *pk) {
    LIPT_CHECK(P % 2 == 0, "maxmin_grad_colsum: odd row length %zu", P);
    maxmin_rows m = {a, g, P, lipt_pair_swap_idx()};
    lipt_rows_colsum(ctx, dx, rows, P, db, (size_t)1 << 17, maxmin_grad_row, &m, pk);
}
