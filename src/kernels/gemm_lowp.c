/* The low-precision products of kernels/lowp.h: per-thread scratch in the context, bf16 rounding of the operands,
 * bf16-emulated through sgemm and bf16 through oneDNN; lipt_kctx_set_precision and the precision checks (cpuid, a
 * oneDNN probe). */
#include "kernels/lowp.h"

#include <omp.h>
#include <stdlib.h>
#include <string.h>

#include "kernels/bf16.h"
#include "kernels/gemm.h"

#if defined(__x86_64__) || defined(__i386__)
#include <cpuid.h>
#define LOWP_X86 1
#endif

/* Threads whose products can run at once in one context (the --threads limit). */
#define LOWP_MAX_THREADS 1024

typedef struct {
    void *buf;       /* bf16-emulated: both rounded operands, 64-byte aligned */
    size_t cap;      /* bytes in buf */
    lipt_dnnl *dnnl; /* bf16: this thread's oneDNN state, made by its first product */
    char pad[64 - 2 * sizeof(void *) - sizeof(size_t)]; /* one cache line per slot: no false sharing */
} lowp_slot;

struct lipt_lowp {
    lowp_slot slot[LOWP_MAX_THREADS];
};

/* The calling thread's slot: its number in the innermost active parallel region (inactive nested regions number
 * every thread 0, so omp_get_thread_num alone would let two threads share a slot). lipt runs one active level
 * (lipt_set_threads), which is what makes the number unique. */
static int thread_slot(void) {
    LIPT_CHECK(omp_get_active_level() <= 1, "internal: a low-precision product inside %d nested active parallel "
               "regions (lipt runs one)", omp_get_active_level());
    for (int l = omp_get_level(); l >= 1; l--)
        if (omp_get_team_size(l) > 1) {
            const int t = omp_get_ancestor_thread_num(l);
            LIPT_CHECK(t < LOWP_MAX_THREADS, "low-precision products support at most %d threads (thread %d)",
                       LOWP_MAX_THREADS, t);
            return t;
        }
    return 0;
}

/* floats rounded up to a whole cache line */
static size_t line_floats(size_t n) { return (n + 15) & ~(size_t)15; }

size_t lipt_lowp_packed_bytes(const lipt_kctx *ctx, int rows, int cols) {
    const size_t elem = ctx->precision == LIPT_PRECISION_BF16 ? sizeof(uint16_t) : sizeof(float);
    return ((size_t)(rows > 0 ? rows : 0) * (size_t)(cols > 0 ? cols : 0) * elem + 63) & ~(size_t)63;
}

/* The packing of ctx's (low) precision */
static lipt_pack_mode pack_mode(const lipt_kctx *ctx) {
    LIPT_CHECK(ctx->precision == LIPT_PRECISION_BF16 || ctx->precision == LIPT_PRECISION_BF16_EMULATED,
               "internal: a low-precision packing at precision %d", ctx->precision);
    return ctx->precision == LIPT_PRECISION_BF16 ? LIPT_PACK_BF16 : LIPT_PACK_ROUND;
}

void lipt_lowp_pack_p(const lipt_kctx *ctx, const float *src, int rows, int cols, int ld, void *dst) {
    lipt_lowp_pack(pack_mode(ctx), src, rows, cols, ld, dst);
}

void *lipt_lowp_pack_arena(lipt_kctx *ctx, const float *src, int rows, int cols, int ld) {
    void *dst = lipt_arena_alloc(ctx->arena, lipt_lowp_packed_bytes(ctx, rows, cols));
    lipt_lowp_pack_p(ctx, src, rows, cols, ld, dst);
    return dst;
}

void *lipt_lowp_arena_buf(lipt_kctx *ctx, int rows, int cols) {
    if (ctx->precision == LIPT_PRECISION_FLOAT32 || rows <= 0 || cols <= 0) return NULL;
    return lipt_arena_alloc(ctx->arena, lipt_lowp_packed_bytes(ctx, rows, cols));
}

void lipt_lowp_pack_span(const lipt_kctx *ctx, const float *src, size_t n, void *pk, size_t off) {
    const lipt_pack_mode mode = pack_mode(ctx);
    const size_t es = mode == LIPT_PACK_BF16 ? sizeof(uint16_t) : sizeof(float);
    lipt_lowp_pack(mode, src, 1, (int)n, (int)n, (char *)pk + off * es); /* one row: on this thread */
}

static void gemm_lowp(lipt_kctx *ctx, int ta, int tb, int M, int N, int K, float alpha, const float *A, int lda,
                      const void *Apk, const float *B, int ldb, const void *Bpk, const float *bias, float beta, float *C,
                      int ldc);

void lipt_gemm_lowp(lipt_kctx *ctx, int ta, int tb, int M, int N, int K, float alpha, const float *A, int lda,
                    const float *B, int ldb, float beta, float *C, int ldc) {
    lipt_gemm_lowp_pk(ctx, ta, tb, M, N, K, alpha, A, lda, NULL, B, ldb, NULL, beta, C, ldc);
}

void lipt_gemm_lowp_pk(lipt_kctx *ctx, int ta, int tb, int M, int N, int K, float alpha, const float *A, int lda,
                       const void *Apk, const float *B, int ldb, const void *Bpk, float beta, float *C, int ldc) {
    gemm_lowp(ctx, ta, tb, M, N, K, alpha, A, lda, Apk, B, ldb, Bpk, NULL, beta, C, ldc);
}

void lipt_gemm_lowp_bias(lipt_kctx *ctx, int ta, int tb, int M, int N, int K, const float *A, int lda, const void *Apk,
                         const float *B, int ldb, const void *Bpk, const float *bias, float beta, float *C, int ldc) {
    gemm_lowp(ctx, ta, tb, M, N, K, 1.0f, A, lda, Apk, B, ldb, Bpk, bias, beta, C, ldc);
}

/* Rows of C = beta C + bias (beta 0 overwrites), several threads for large C outside parallel regions. */
static void bias_rows(int M, int N, const float *bias, float beta, float *C, int ldc) {
    const int par = (size_t)M * N >= LIPT_LOWP_PACK_PAR_MIN && !omp_in_parallel();
#pragma omp parallel for schedule(static) if (par)
    for (int i = 0; i < M; i++) {
        float *c = C + (size_t)i * ldc;
        if (beta == 0.0f) memcpy(c, bias, (size_t)N * sizeof(float));
        else
            for (int j = 0; j < N; j++) c[j] = beta * c[j] + bias[j];
    }
}

/* One bf16 product through the calling thread's oneDNN state. */
static void gemm_bf16_one(lipt_kctx *ctx, int ta, int tb, int M, int N, int K, float alpha, const float *A, int lda,
                          const void *Apk, const float *B, int ldb, const void *Bpk, const float *bias, float beta,
                          float *C, int ldc) {
    lowp_slot *s = &ctx->lowp->slot[thread_slot()];
    lipt_error err = {0};
    if (!s->dnnl && lipt_dnnl_create(&s->dnnl, &err) != LIPT_OK) LIPT_DIE("--precision bf16: %s", err.msg);
    if (lipt_dnnl_gemm_pk(s->dnnl, LIPT_DNNL_BF16, ta, tb, M, N, K, alpha, A, lda, Apk, B, ldb, Bpk, bias, beta, C, ldc,
                          &err) != LIPT_OK)
        LIPT_DIE("--precision bf16: %s", err.msg);
}

/* A large bf16 product outside a parallel region, as lipt_gemm runs float32 ones on oneDNN: C cut into blocks of rows
 * (or columns), two per thread, each one single-thread product on its thread's oneDNN state, the operand the blocks
 * share converted once for all of them (oneDNN's own threading of the matmul spent about 7 % of the dp bf16 step
 * waiting at barriers). */
static void gemm_bf16_blocked(lipt_kctx *ctx, int nt, int ta, int tb, int M, int N, int K, float alpha, const float *A,
                              int lda, const void *Apk, const float *B, int ldb, const void *Bpk, const float *bias,
                              float beta, float *C, int ldc) {
    const lipt_gemm_cut cut = lipt_gemm_cut_for(M, N, nt);
    const lipt_arena_mark mk = lipt_arena_get_mark(ctx->arena);
    /* the shared operand packed once (its packed row stride: its width) */
    if (cut.by_rows && !Bpk) {
        Bpk = lipt_lowp_pack_arena(ctx, B, tb ? N : K, tb ? K : N, ldb);
        ldb = tb ? K : N;
    } else if (!cut.by_rows && !Apk) {
        Apk = lipt_lowp_pack_arena(ctx, A, ta ? K : M, ta ? M : K, lda);
        lda = ta ? M : K;
    }
    const char *ap = Apk, *bp = Bpk; /* bf16 elements of 2 bytes, at the same offsets */
#pragma omp parallel for schedule(static)
    for (int i = 0; i < cut.n; i++) {
        const lipt_gemm_block k = lipt_gemm_block_at(cut, i, ta, tb, M, N, lda, ldb, ldc);
        gemm_bf16_one(ctx, ta, tb, k.m, k.w, K, alpha, A + k.a, lda, ap ? ap + 2 * k.a : NULL, B + k.b, ldb,
                      bp ? bp + 2 * k.b : NULL, bias ? bias + k.bias : NULL, beta, C + k.c, ldc);
    }
    lipt_arena_release(ctx->arena, mk);
}

/* A weight gradient in bf16 (C [M,N] = alpha Aᵀ B + beta C, A [K,M], B [K,N]) cut along K as lipt_gemm_ksplit cuts
 * float32 ones: every chunk's operands and output dense. oneDNN 2.6 runs a transposed source on AMX
 * (brg:avx512_core_amx_bf16) only with dense strides; gemm_bf16_blocked's column blocks of C (row stride N, wider
 * than the block) sent the weight gradients to gemm:jit, 400-580 GFLOP/s on one thread against 690-720. */
static void gemm_bf16_ksplit(lipt_kctx *ctx, int kc, int M, int N, int K, float alpha, const float *A, int lda,
                             const void *Apk, const float *B, int ldb, const void *Bpk, float beta, float *C,
                             int ldc) {
    const int nk = (K + kc - 1) / kc;
    const lipt_arena_mark mk = lipt_arena_get_mark(ctx->arena);
    if (!Apk || lda != M) { /* dense packed operands: the chunks are runs of their rows */
        Apk = lipt_lowp_pack_arena(ctx, A, K, M, lda);
        lda = M;
    }
    if (!Bpk || ldb != N) {
        Bpk = lipt_lowp_pack_arena(ctx, B, K, N, ldb);
        ldb = N;
    }
    const size_t mn = (size_t)M * N;
    float *P = lipt_arena_alloc(ctx->arena, (size_t)(nk - 1) * mn * sizeof(float)); /* chunks 1.., [M, N] each */
    const char *ap = Apk, *bp = Bpk; /* bf16: 2 bytes an element */
#pragma omp parallel for schedule(static)
    for (int c = 0; c < nk; c++) {
        const int k0 = c * kc, kk = K - k0 < kc ? K - k0 : kc;
        const void *a = ap + 2 * (size_t)k0 * lda, *b = bp + 2 * (size_t)k0 * ldb;
        if (c == 0) gemm_bf16_one(ctx, 1, 0, M, N, kk, alpha, NULL, lda, a, NULL, ldb, b, NULL, beta, C, ldc);
        else gemm_bf16_one(ctx, 1, 0, M, N, kk, alpha, NULL, lda, a, NULL, ldb, b, NULL, 0.0f, P + (c - 1) * mn, N);
    }
    lipt_gemm_ksplit_sum(M, N, nk, P, C, ldc);
    lipt_arena_release(ctx->arena, mk);
}

static void gemm_lowp_run(lipt_kctx *ctx, int ta, int tb, int M, int N, int K, float alpha, const float *A, int lda,
                          const void *Apk, const float *B, int ldb, const void *Bpk, const float *bias, float beta,
                          float *C, int ldc);

/* lipt_gemm_lowp, _pk and _bias: gemm_lowp_run timed into ctx->products_s (kernels/kctx.h). */
static void gemm_lowp(lipt_kctx *ctx, int ta, int tb, int M, int N, int K, float alpha, const float *A, int lda,
                      const void *Apk, const float *B, int ldb, const void *Bpk, const float *bias, float beta, float *C,
                      int ldc) {
    double t0, *acc = lipt_kprof_begin(ctx, &t0);
    gemm_lowp_run(ctx, ta, tb, M, N, K, alpha, A, lda, Apk, B, ldb, Bpk, bias, beta, C, ldc);
    lipt_kprof_end(ctx, acc, t0, 0);
}

static void gemm_lowp_run(lipt_kctx *ctx, int ta, int tb, int M, int N, int K, float alpha, const float *A, int lda,
                          const void *Apk, const float *B, int ldb, const void *Bpk, const float *bias, float beta,
                          float *C, int ldc) {
    if (M <= 0 || N <= 0) return;
    LIPT_CHECK(ctx->lowp, "internal: a %s product in a context without lipt_kctx_set_precision",
               lipt_precision_name((lipt_precision)ctx->precision));
    if (ctx->precision == LIPT_PRECISION_BF16) {
        const int nt = omp_in_parallel() ? 1 : omp_get_max_threads();
        const int kc = ta && !tb && !bias && nt > 1 ? lipt_gemm_ksplit_chunk(M, N, K) : 0;
        if (kc > 0 && lipt_gemm_on_dnnl(M, N, K))
            gemm_bf16_ksplit(ctx, kc, M, N, K, alpha, A, lda, Apk, B, ldb, Bpk, beta, C, ldc);
        else if (nt > 1 && lipt_gemm_on_dnnl(M, N, K)) /* the sizes lipt_gemm gives oneDNN */
            gemm_bf16_blocked(ctx, nt, ta, tb, M, N, K, alpha, A, lda, Apk, B, ldb, Bpk, bias, beta, C, ldc);
        else
            gemm_bf16_one(ctx, ta, tb, M, N, K, alpha, A, lda, Apk, B, ldb, Bpk, bias, beta, C, ldc);
        return;
    }
    lowp_slot *s = &ctx->lowp->slot[thread_slot()];
    LIPT_CHECK(ctx->precision == LIPT_PRECISION_BF16_EMULATED, "internal: lipt_gemm_lowp at precision %d",
               ctx->precision);
    if (bias) { /* the bias first, then the product added to it: linear's float32 order */
        bias_rows(M, N, bias, beta, C, ldc);
        beta = 1.0f;
    }
    /* op(A) [M,K] is stored as ra rows of ca; likewise B */
    const int ra = ta ? K : M, ca = ta ? M : K, rb = tb ? N : K, cb = tb ? K : N;
    const size_t na = Apk ? 0 : line_floats((size_t)ra * ca), nb = Bpk ? 0 : (size_t)rb * cb;
    float *buf = na + nb ? lipt_lowp_reserve(&s->buf, &s->cap, (na + nb) * sizeof(float)) : NULL;
    const float *a = Apk ? Apk : buf, *b = Bpk ? Bpk : buf + na;
    if (!Apk) lipt_lowp_pack(LIPT_PACK_ROUND, A, ra, ca, lda, buf);
    if (!Bpk) lipt_lowp_pack(LIPT_PACK_ROUND, B, rb, cb, ldb, buf + na);
    /* a packed operand given by the caller keeps its row stride (a block of a larger packed matrix) */
    lipt_gemm(ta, tb, M, N, K, alpha, a, Apk ? lda : ca > 0 ? ca : 1, b, Bpk ? ldb : cb > 0 ? cb : 1, beta, C, ldc);
}

void lipt_lowp_free(struct lipt_lowp *lp) {
    if (!lp) return;
    for (int i = 0; i < LOWP_MAX_THREADS; i++) {
        free(lp->slot[i].buf);
        lipt_dnnl_free(lp->slot[i].dnnl);
    }
    free(lp);
}

/* ---------------------------------------------------------------- the checks */

int lipt_cpu_has_avx512_bf16(void) {
#ifdef LOWP_X86
    unsigned a, b, c, d;
    /* the OS must save the AVX-512 state (XCR0: SSE, AVX, opmask, ZMM upper halves, ZMM16-31) */
    if (!__get_cpuid(1, &a, &b, &c, &d) || !(c & (1u << 27))) return 0; /* OSXSAVE */
    unsigned xlo, xhi;
    __asm__ volatile("xgetbv" : "=a"(xlo), "=d"(xhi) : "c"(0));
    (void)xhi;
    if ((xlo & 0xE6u) != 0xE6u) return 0;
    if ((unsigned)__get_cpuid_max(0, NULL) < 7u) return 0;
    __cpuid_count(7, 0, a, b, c, d);
    if (!(b & (1u << 16)) || a < 1) return 0; /* AVX512F, and subleaf 1 exists */
    __cpuid_count(7, 1, a, b, c, d);
    return (a >> 5) & 1u; /* AVX512_BF16 */
#else
    return 0;
#endif
}

int lipt_have_dnnl(void) {
#ifdef LIPT_HAVE_DNNL
    return 1;
#else
    return 0;
#endif
}

/* The CPU's brand string, for messages. */
static void cpu_name(char *buf, size_t n) {
    snprintf(buf, n, "unknown CPU");
#ifdef LOWP_X86
    unsigned r[13] = {0};
    if ((unsigned)__get_cpuid_max(0x80000000u, NULL) < 0x80000004u) return;
    for (unsigned i = 0; i < 3; i++)
        __get_cpuid(0x80000002u + i, &r[4 * i], &r[4 * i + 1], &r[4 * i + 2], &r[4 * i + 3]);
    const char *s = (const char *)r;
    while (*s == ' ') s++;
    if (*s) snprintf(buf, n, "%s", s);
    for (size_t k = strlen(buf); k > 0 && buf[k - 1] == ' '; k--) buf[k - 1] = 0;
#endif
}

/* The CPU-feature error; unimplemented: the CPU claims AVX512_BF16 but oneDNN has no bf16 matmul for it. */
static lipt_status no_bf16_cpu(lipt_error *err, int unimplemented) {
    char cpu[64];
    cpu_name(cpu, sizeof cpu);
    return lipt_fail(err, LIPT_ERR_ARG,
                     "--precision bf16 needs a CPU with AVX512_BF16 (bf16 dot products; cpuid leaf 7 subleaf 1, EAX "
                     "bit 5)%s: %s (%s)%s; use --precision bf16-emulated for bf16's numerics (not faster) or float32",
                     unimplemented ? " that oneDNN runs bf16 matmuls on" : "",
                     unimplemented ? "oneDNN reports dnnl_unimplemented for them on this CPU" : "this CPU", cpu,
                     unimplemented ? "" : " lacks it");
}

/* oneDNN's own verdict on a small bf16 matmul, once per process: 1 runs, -1 unimplemented, -2 other failure. */
static int probe_state;
static char probe_msg[LIPT_ERRMSG_LEN];

static lipt_status bf16_check(lipt_error *err) {
    if (!lipt_have_dnnl()) return lipt_fail(err, LIPT_ERR_ARG, "%s", LIPT_NO_DNNL_MSG);
    if (!lipt_cpu_has_avx512_bf16()) return no_bf16_cpu(err, 0);
#pragma omp critical(lipt_bf16_probe)
    if (probe_state == 0) {
        lipt_error e = {0};
        lipt_dnnl *d = NULL;
        const float A[6] = {1, 2, 3, 4, 5, 6}, B[6] = {0.5f, -1, 2, 0.25f, 1, -3};
        float C[4] = {0};
        lipt_status st = lipt_dnnl_create(&d, &e);
        if (st == LIPT_OK) st = lipt_dnnl_gemm(d, LIPT_DNNL_BF16, 0, 0, 2, 2, 3, 1.0f, A, 3, B, 2, 0.0f, C, 2, &e);
        lipt_dnnl_free(d);
        probe_state = st == LIPT_OK ? 1 : st == LIPT_ERR_ARG ? -1 : -2;
        snprintf(probe_msg, sizeof probe_msg, "%s", e.msg);
    }
    if (probe_state == -1) return no_bf16_cpu(err, 1);
    if (probe_state == -2) return lipt_fail(err, LIPT_ERR_INTERNAL, "--precision bf16: %s", probe_msg);
    return LIPT_OK;
}

lipt_status lipt_precision_check(lipt_precision p, lipt_error *err) {
    switch (p) {
    case LIPT_PRECISION_FLOAT32:
    case LIPT_PRECISION_BF16_EMULATED: return LIPT_OK;
    case LIPT_PRECISION_BF16: return bf16_check(err);
    default: break;
    }
    return lipt_fail(err, LIPT_ERR_ARG, "precision %d is not one of: float32, bf16, bf16-emulated", (int)p);
}

lipt_status lipt_kctx_set_precision(lipt_kctx *ctx, lipt_precision p, lipt_error *err) {
    const lipt_status st = lipt_precision_check(p, err);
    if (st != LIPT_OK) return st;
    if (p != LIPT_PRECISION_FLOAT32 && !ctx->lowp) {
        ctx->lowp = lipt_xaligned(sizeof *ctx->lowp);
        memset(ctx->lowp, 0, sizeof *ctx->lowp);
    }
    ctx->precision = (int)p;
    return LIPT_OK;
}
