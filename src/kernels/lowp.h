/* Private: the low-precision matrix products behind lipt_gemm_p (kernels/gemm.h) and the oneDNN matmul wrapper they use
 * for --precision bf16. No BLAS or oneDNN header needed (the tests include it). */
#ifndef LIPT_KERNELS_LOWP_H
#define LIPT_KERNELS_LOWP_H

#include <stdint.h>

#include "kernels/kctx.h"

/* The message of every bf16 request in a build without oneDNN. */
#define LIPT_NO_DNNL_MSG                                                                                            \
    "lipt was built without oneDNN (LIPT_DNNL=OFF or libdnnl-dev missing): --precision bf16 is unavailable; "        \
    "bf16-emulated gives the numerics"

/* C = alpha op(A) op(B) + beta C (as lipt_gemm) at ctx->precision, which must not be float32: the operands rounded to
 * bf16 (bf16-emulated: into float32 scratch, then sgemm; bf16: converted to bf16 for oneDNN), float32 accumulation
 * and result. Callable from inside an OpenMP region: each thread has its own scratch in ctx->lowp, grown when a
 * product needs more and then reused (no allocation once warm). A oneDNN failure here, after the startup probe of
 * lipt_kctx_set_precision passed, is not recoverable: it stops the process with oneDNN's status. */
void lipt_gemm_lowp(lipt_kctx *ctx, int ta, int tb, int M, int N, int K, float alpha, const float *A, int lda,
                    const float *B, int ldb, float beta, float *C, int ldc);
/* Operands packed once for several products (the linear op packs its input in the forward for the backward's dW,
 * and the output gradient once for both dX and dW): lipt_lowp_pack_p writes rows x cols of src (row stride ld) as
 * lipt_gemm_lowp would pack that operand at ctx->precision (a low one), into dst of lipt_lowp_packed_bytes bytes
 * (64-byte aligned); lipt_gemm_lowp_pk is lipt_gemm_lowp with either operand given so packed (Apk / Bpk non-NULL:
 * A / B are then unused, and lda / ldb are the packed operand's row stride in elements, so that a block of a larger
 * packed matrix can be passed). A packed operand is the same whether a product transposes it or not. */
size_t lipt_lowp_packed_bytes(const lipt_kctx *ctx, int rows, int cols);
void lipt_lowp_pack_p(const lipt_kctx *ctx, const float *src, int rows, int cols, int ld, void *dst);
/* The [rows, cols] src (row stride ld) packed by lipt_lowp_pack_p into ctx's arena (the caller's mark or reset frees
 * it); the packed copy has row stride cols. */
void *lipt_lowp_pack_arena(lipt_kctx *ctx, const float *src, int rows, int cols, int ld);
/* For an op that writes its output's converted copy itself (lipt_tensor.lowp), row by row while in cache:
 * lipt_lowp_arena_buf is an uninitialised buffer for a packed [rows, cols] in ctx's arena (NULL in float32 or when
 * empty); lipt_lowp_pack_span converts the n floats at src into it from element off on (rows are contiguous in the
 * packed layout), as lipt_lowp_pack_p would. */
void *lipt_lowp_arena_buf(lipt_kctx *ctx, int rows, int cols);
/* Element off of a packed matrix at ctx's precision (bf16: 2 bytes an element, bf16-emulated: 4); NULL stays NULL. */
static inline const void *lipt_lowp_at(const lipt_kctx *ctx, const void *pk, size_t off) {
    return pk ? (const char *)pk + off * (ctx->precision == LIPT_PRECISION_BF16 ? 2 : 4) : NULL;
}
void lipt_lowp_pack_span(const lipt_kctx *ctx, const float *src, size_t n, void *pk, size_t off);
void lipt_gemm_lowp_pk(lipt_kctx *ctx, int ta, int tb, int M, int N, int K, float alpha, const float *A, int lda,
                       const void *Apk, const float *B, int ldb, const void *Bpk, float beta, float *C, int ldc);
/* lipt_gemm_lowp_pk plus a bias row: C = op(A) op(B) + bias + beta C (alpha 1; bias N floats). bf16 adds the bias
 * inside oneDNN's product; bf16-emulated writes C = beta C + bias first, then sgemm with beta 1. */
void lipt_gemm_lowp_bias(lipt_kctx *ctx, int ta, int tb, int M, int N, int K, const float *A, int lda, const void *Apk,
                         const float *B, int ldb, const void *Bpk, const float *bias, float beta, float *C, int ldc);
/* Frees what lipt_kctx_set_precision and the products allocated (lipt_ctx_free calls it). */
void lipt_lowp_free(struct lipt_lowp *lp);

/* rows x cols floats of src (row stride ld) into packed rows at dst (row stride cols), converted: */
/* Operands from this many elements are converted by several threads (outside a parallel region only); bias rows of
 * as many elements likewise. */
#define LIPT_LOWP_PACK_PAR_MIN ((size_t)1 << 16)
typedef enum {
    LIPT_PACK_F32 = 0,   /* copied (float dst) */
    LIPT_PACK_ROUND,     /* rounded to bf16, kept as float32 (float dst) */
    LIPT_PACK_BF16       /* rounded to bf16, stored as its 16 bits (uint16_t dst) */
} lipt_pack_mode;
void lipt_lowp_pack(lipt_pack_mode mode, const float *src, int rows, int cols, int ld, void *dst);
/* *buf (64-byte aligned, *cap bytes) grown to at least `bytes` (to 1.5 times its size at least, so that a thread's
 * scratch settles after a few products), its old contents dropped; returns *buf. */
void *lipt_lowp_reserve(void **buf, size_t *cap, size_t bytes);

/* ---- the oneDNN matmul wrapper (src/kernels/dnnl_gemm.c) ----
 * One lipt_dnnl per thread (engine, stream, conversion scratch and a bounded cache of matmul primitives keyed by
 * data type, transposes, shape, the destination's row stride, alpha and beta; least recently used evicted). The data
 * type of the operands is a parameter so that the identical code runs with float32 operands on any CPU (the tests
 * compare it with sgemm there); the model uses LIPT_DNNL_BF16. Without oneDNN in the build every call fails with
 * LIPT_NO_DNNL_MSG. */
typedef enum { LIPT_DNNL_F32 = 0, LIPT_DNNL_BF16 } lipt_dnnl_type;
typedef struct lipt_dnnl lipt_dnnl;
#define LIPT_DNNL_CACHE 48 /* primitives per thread: a model's products take a few dozen shapes */

lipt_status lipt_dnnl_create(lipt_dnnl **out, lipt_error *err);
void lipt_dnnl_free(lipt_dnnl *d);
/* C = alpha op(A) op(B) + beta C, as lipt_gemm: A and B converted to `type` (packed copies; the transposes become
 * the memory descriptors' strides), C float32 in place with row stride ldc (beta through a sum post-op, alpha
 * through output scales). LIPT_ERR_ARG when oneDNN has no such matmul on this CPU (dnnl_unimplemented: bf16 without
 * AVX512_BF16), LIPT_ERR_INTERNAL for its other failures. */
lipt_status lipt_dnnl_gemm(lipt_dnnl *d, lipt_dnnl_type type, int ta, int tb, int M, int N, int K, float alpha,
                           const float *A, int lda, const float *B, int ldb, float beta, float *C, int ldc,
                           lipt_error *err);
/* lipt_dnnl_gemm with either operand already converted to `type` and packed (Apk / Bpk non-NULL; as lipt_lowp_pack
 * with LIPT_PACK_BF16 or LIPT_PACK_F32 writes it), and an optional float32 bias (N floats added to every row:
 * C = op(A) op(B) + bias + beta C; alpha must be 1 then), which oneDNN adds as it writes C. */
lipt_status lipt_dnnl_gemm_pk(lipt_dnnl *d, lipt_dnnl_type type, int ta, int tb, int M, int N, int K, float alpha,
                              const float *A, int lda, const void *Apk, const float *B, int ldb, const void *Bpk,
                              const float *bias, float beta, float *C, int ldc, lipt_error *err);
typedef struct {
    long hits, misses, evictions; /* primitive cache lookups */
    int entries;                  /* primitives held now */
} lipt_dnnl_stats;
void lipt_dnnl_get_stats(const lipt_dnnl *d, lipt_dnnl_stats *s);

#endif
