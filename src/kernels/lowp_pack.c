/* The low-precision operands' packing and the growable scratch of kernels/lowp.h, apart from the products (issue 50):
 * the bf16 products (gemm_lowp.c) and the oneDNN wrapper (dnnl_gemm.c) both use them, and neither calls the other
 * back. */
#include "kernels/lowp.h"

#include <omp.h>
#include <stdlib.h>
#include <string.h>

#include "kernels/bf16.h"

/* Rows [r0, r1) of lipt_lowp_pack. */
static void pack_rows(lipt_pack_mode mode, const float *src, int r0, int r1, int cols, int ld, void *dst) {
    for (int r = r0; r < r1; r++) {
        const float *s = src + (size_t)r * ld;
        if (mode == LIPT_PACK_F32) {
            memcpy((float *)dst + (size_t)r * cols, s, (size_t)cols * sizeof(float));
        } else if (mode == LIPT_PACK_ROUND) {
            float *d = (float *)dst + (size_t)r * cols;
            for (int c = 0; c < cols; c++) {
                uint32_t u;
                memcpy(&u, s + c, sizeof u);
                u = lipt_bf16_round_bits(u);
                memcpy(d + c, &u, sizeof u);
            }
        } else {
            uint16_t *d = (uint16_t *)dst + (size_t)r * cols;
            for (int c = 0; c < cols; c++) {
                uint32_t u;
                memcpy(&u, s + c, sizeof u);
                d[c] = (uint16_t)(lipt_bf16_round_bits(u) >> 16);
            }
        }
    }
}

void lipt_lowp_pack(lipt_pack_mode mode, const float *src, int rows, int cols, int ld, void *dst) {
    /* small operands (the attention's per-head blocks, thousands per step) without an OpenMP region at all: even a
     * one-thread region costs a runtime call */
    if (rows <= 1 || (size_t)rows * (size_t)cols < LIPT_LOWP_PACK_PAR_MIN || omp_in_parallel()) {
        pack_rows(mode, src, 0, rows, cols, ld, dst);
        return;
    }
#pragma omp parallel
    {
        const int nt = omp_get_num_threads(), t = omp_get_thread_num();
        pack_rows(mode, src, (int)((long)rows * t / nt), (int)((long)rows * (t + 1) / nt), cols, ld, dst);
    }
}

void *lipt_lowp_reserve(void **buf, size_t *cap, size_t bytes) {
    if (bytes > *cap) {
        const size_t grown = *cap + *cap / 2, want = bytes > grown ? bytes : grown;
        free(*buf);
        *buf = lipt_xaligned(want);
        *cap = want;
    }
    return *buf;
}
