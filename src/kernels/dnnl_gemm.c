/* The oneDNN matmul wrapper of kernels/lowp.h (the C API of oneDNN 2.x, dnnl.h): operands converted to the requested
 * data type in packed scratch, transposes as memory-descriptor strides, float32 destination in place, alpha as output
 * scales, beta as a sum post-op, primitives cached by everything that shapes them. Without LIPT_HAVE_DNNL
 * (LIPT_DNNL=OFF or no libdnnl) every entry point fails with LIPT_NO_DNNL_MSG. */
#include "kernels/lowp.h"

#include <omp.h>
#include <stdlib.h>
#include <math.h>
#include <string.h>

#ifdef LIPT_HAVE_DNNL
#include <dnnl.h>

/* Everything a primitive depends on (the data pointers are set per call). Only int fields: compared with memcmp. */
typedef struct {
    int32_t type, ta, tb, M, N, K, lda, ldb, ldc, bias; /* lda, ldb: the row strides of the packed operands */
    int32_t threads;      /* omp_get_max_threads() when made: oneDNN fixes a primitive's thread split at creation, so
                           * one made inside a parallel region (1 thread) must not serve a product outside it */
    uint32_t alpha, beta; /* the floats' bits: 1.0 and 0.0 in practice, a few attention scales otherwise */
} prim_key;

typedef struct {
    int used;
    prim_key key;
    dnnl_primitive_t prim;
    dnnl_memory_t ma, mb, mc, ms, mbias; /* memory objects without data: handles set before each execution */
    size_t scratch;               /* bytes of scratchpad it needs (ms is NULL when none) */
    unsigned long long last;  /* the lookup tick of its last use (least recently used is evicted) */
} prim_entry;

struct lipt_dnnl {
    dnnl_engine_t engine;
    dnnl_stream_t stream;
    prim_entry cache[LIPT_DNNL_CACHE];
    unsigned long long tick;
    long hits, misses, evictions;
    void *buf; /* the converted operands, 64-byte aligned */
    size_t cap;
    /* The primitives' scratchpad (user mode): one buffer per thread that grows to the largest need and is reused,
     * so that the training loop's products allocate nothing once warm, whatever oneDNN's build does in its
     * default library mode. */
    void *scratch;
    size_t scratch_cap;
    void *acc; /* the unscaled product of a scaled, accumulating one (see lipt_dnnl_gemm_pk) */
    size_t acc_cap;
};

static const char *status_name(dnnl_status_t s) {
    switch (s) {
    case dnnl_success: return "success";
    case dnnl_out_of_memory: return "out of memory";
    case dnnl_invalid_arguments: return "invalid arguments";
    case dnnl_unimplemented: return "unimplemented";
    case dnnl_iterator_ends: return "iterator ends";
    case dnnl_runtime_error: return "runtime error";
    case dnnl_not_required: return "not required";
    default: return "unknown status";
    }
}

static lipt_status dnnl_failed(lipt_error *err, const char *what, dnnl_status_t s) {
    const dnnl_version_t *v = dnnl_version();
    return lipt_fail(err, LIPT_ERR_INTERNAL, "oneDNN %d.%d.%d: %s failed (%s)", v->major, v->minor, v->patch, what,
                     status_name(s));
}

lipt_status lipt_dnnl_create(lipt_dnnl **out, lipt_error *err) {
    *out = NULL;
    lipt_dnnl *d = lipt_xcalloc(1, sizeof *d);
    dnnl_status_t s = dnnl_engine_create(&d->engine, dnnl_cpu, 0);
    if (s != dnnl_success) {
        free(d);
        return dnnl_failed(err, "creating a CPU engine", s);
    }
    if ((s = dnnl_stream_create(&d->stream, d->engine, dnnl_stream_default_flags)) != dnnl_success) {
        dnnl_engine_destroy(d->engine);
        free(d);
        return dnnl_failed(err, "creating a stream", s);
    }
    *out = d;
    return LIPT_OK;
}

static void entry_clear(prim_entry *e) {
    if (!e->used) return;
    dnnl_primitive_destroy(e->prim);
    dnnl_memory_destroy(e->ma);
    dnnl_memory_destroy(e->mb);
    dnnl_memory_destroy(e->mc);
    if (e->ms) dnnl_memory_destroy(e->ms);
    if (e->mbias) dnnl_memory_destroy(e->mbias);
    memset(e, 0, sizeof *e);
}

void lipt_dnnl_free(lipt_dnnl *d) {
    if (!d) return;
    for (int i = 0; i < LIPT_DNNL_CACHE; i++) entry_clear(&d->cache[i]);
    dnnl_stream_destroy(d->stream);
    dnnl_engine_destroy(d->engine);
    free(d->buf);
    free(d->scratch);
    free(d->acc);
    free(d);
}

void lipt_dnnl_get_stats(const lipt_dnnl *d, lipt_dnnl_stats *s) {
    memset(s, 0, sizeof *s);
    if (!d) return;
    s->hits = d->hits;
    s->misses = d->misses;
    s->evictions = d->evictions;
    for (int i = 0; i < LIPT_DNNL_CACHE; i++) s->entries += d->cache[i].used;
}

/* A matmul primitive and its memory objects for key k into e (empty). The operands are packed: A as ra rows of ca,
 * B as rb rows of cb, so op(A) [M,K] has strides {K, 1} or, transposed, {1, M}; C keeps the caller's row stride. */
static lipt_status entry_make(lipt_dnnl *d, const prim_key *k, float alpha, float beta, prim_entry *e,
                              lipt_error *err) {
    const dnnl_data_type_t dt = k->type == LIPT_DNNL_BF16 ? dnnl_bf16 : dnnl_f32;
    const dnnl_dims_t da = {k->M, k->K}, db = {k->K, k->N}, dc = {k->M, k->N};
    const dnnl_dims_t sa = {k->ta ? 1 : k->lda, k->ta ? k->lda : 1}, sb = {k->tb ? 1 : k->ldb, k->tb ? k->ldb : 1},
                      sc = {k->ldc, 1};
    const dnnl_dims_t dbias = {1, k->N}, sbias = {k->N, 1};
    dnnl_memory_desc_t ma, mb, mc, mbias;
    dnnl_status_t s;
    if ((s = dnnl_memory_desc_init_by_strides(&ma, 2, da, dt, sa)) != dnnl_success ||
        (s = dnnl_memory_desc_init_by_strides(&mb, 2, db, dt, sb)) != dnnl_success ||
        (s = dnnl_memory_desc_init_by_strides(&mc, 2, dc, dnnl_f32, sc)) != dnnl_success ||
        (s = dnnl_memory_desc_init_by_strides(&mbias, 2, dbias, dnnl_f32, sbias)) != dnnl_success)
        return dnnl_failed(err, "describing the operands", s);
    dnnl_matmul_desc_t md;
    if ((s = dnnl_matmul_desc_init(&md, &ma, &mb, k->bias ? &mbias : NULL, &mc)) != dnnl_success)
        return dnnl_failed(err, "describing the matmul", s);
    dnnl_primitive_attr_t attr = NULL;
    dnnl_post_ops_t po = NULL;
    dnnl_primitive_desc_t pd = NULL;
    s = dnnl_primitive_attr_create(&attr);
    if (s == dnnl_success) s = dnnl_primitive_attr_set_scratchpad_mode(attr, dnnl_scratchpad_mode_user);
    if (s == dnnl_success && alpha != 1.0f) s = dnnl_primitive_attr_set_output_scales(attr, 1, 0, &alpha);
    if (s == dnnl_success && beta != 0.0f) {
        s = dnnl_post_ops_create(&po);
        if (s == dnnl_success) s = dnnl_post_ops_append_sum(po, beta); /* C = alpha A B + beta C */
        if (s == dnnl_success) s = dnnl_primitive_attr_set_post_ops(attr, po);
    }
    if (s != dnnl_success) {
        if (po) dnnl_post_ops_destroy(po);
        if (attr) dnnl_primitive_attr_destroy(attr);
        return dnnl_failed(err, "setting alpha and beta", s);
    }
    s = dnnl_primitive_desc_create(&pd, &md, attr, d->engine, NULL);
    if (po) dnnl_post_ops_destroy(po);
    dnnl_primitive_attr_destroy(attr);
    if (s == dnnl_unimplemented) {
        const dnnl_version_t *v = dnnl_version();
        return lipt_fail(err, LIPT_ERR_ARG, "oneDNN %d.%d.%d has no %s matmul for this CPU (dnnl_unimplemented)",
                         v->major, v->minor, v->patch, k->type == LIPT_DNNL_BF16 ? "bf16" : "float32");
    }
    if (s != dnnl_success) return dnnl_failed(err, "creating the matmul's primitive descriptor", s);
    const dnnl_memory_desc_t *smd = dnnl_primitive_desc_query_md(pd, dnnl_query_scratchpad_md, 0);
    dnnl_memory_desc_t sd;
    e->scratch = smd ? dnnl_memory_desc_get_size(smd) : 0;
    if (e->scratch) sd = *smd;
    s = dnnl_primitive_create(&e->prim, pd);
    dnnl_primitive_desc_destroy(pd);
    if (s != dnnl_success) return dnnl_failed(err, "creating the matmul primitive", s);
    e->ma = e->mb = e->mc = e->ms = e->mbias = NULL;
    if ((s = dnnl_memory_create(&e->ma, &ma, d->engine, DNNL_MEMORY_NONE)) != dnnl_success ||
        (s = dnnl_memory_create(&e->mb, &mb, d->engine, DNNL_MEMORY_NONE)) != dnnl_success ||
        (s = dnnl_memory_create(&e->mc, &mc, d->engine, DNNL_MEMORY_NONE)) != dnnl_success ||
        (e->scratch && (s = dnnl_memory_create(&e->ms, &sd, d->engine, DNNL_MEMORY_NONE)) != dnnl_success) ||
        (k->bias && (s = dnnl_memory_create(&e->mbias, &mbias, d->engine, DNNL_MEMORY_NONE)) != dnnl_success)) {
        dnnl_primitive_destroy(e->prim);
        if (e->ms) dnnl_memory_destroy(e->ms);
        if (e->ma) dnnl_memory_destroy(e->ma);
        if (e->mb) dnnl_memory_destroy(e->mb);
        if (e->mc) dnnl_memory_destroy(e->mc);
        return dnnl_failed(err, "creating memory objects", s);
    }
    e->key = *k;
    e->used = 1;
    return LIPT_OK;
}

/* The cached entry for k, made (evicting the least recently used one when full) on a miss. */
static lipt_status entry_for(lipt_dnnl *d, const prim_key *k, float alpha, float beta, prim_entry **out,
                             lipt_error *err) {
    prim_entry *free_e = NULL, *lru = NULL;
    d->tick++;
    for (int i = 0; i < LIPT_DNNL_CACHE; i++) {
        prim_entry *e = &d->cache[i];
        if (!e->used) {
            if (!free_e) free_e = e;
            continue;
        }
        if (memcmp(&e->key, k, sizeof *k) == 0) {
            e->last = d->tick;
            d->hits++;
            *out = e;
            return LIPT_OK;
        }
        if (!lru || e->last < lru->last) lru = e;
    }
    d->misses++;
    if (!free_e) {
        entry_clear(lru);
        d->evictions++;
        free_e = lru;
    }
    const lipt_status st = entry_make(d, k, alpha, beta, free_e, err);
    if (st != LIPT_OK) return st;
    free_e->last = d->tick;
    *out = free_e;
    return LIPT_OK;
}

/* C = alpha T + beta C over M rows of N (T's row stride N; T NULL: T is C, so C = alpha C): the output scale and
 * accumulation of a product, applied after it (see below); with accumulation one rounding (a fused multiply-add). */
static void scale_acc_rows(float *C, int ldc, const float *T, int M, int N, float alpha, float beta) {
    for (int i = 0; i < M; i++) {
        float *c = C + (size_t)i * ldc;
        const float *t = T ? T + (size_t)i * N : c;
        if (beta == 0.0f)
            for (int j = 0; j < N; j++) c[j] = alpha * t[j];
        else
            for (int j = 0; j < N; j++) c[j] = fmaf(alpha, t[j], beta * c[j]);
    }
}

lipt_status lipt_dnnl_gemm_pk(lipt_dnnl *d, lipt_dnnl_type type, int ta, int tb, int M, int N, int K, float alpha,
                              const float *A, int lda, const void *Apk, const float *B, int ldb, const void *Bpk,
                              const float *bias, float beta, float *C, int ldc, lipt_error *err) {
    if (M <= 0 || N <= 0) return LIPT_OK;
    if (alpha != 1.0f && !bias && K > 0) {
        /* oneDNN 2.6 applies an output scale to small products (the attention's per-head products, scaled by 1/√d)
         * in a scalar loop that took 14 % of a bf16 training step (dp, 1 thread); the unscaled product and one
         * vectorised pass are faster. Without accumulation the bits are the same (alpha times the same float32
         * sum, rounded once); with it the unscaled product goes to a scratch first, and oneDNN's own path (another
         * kernel) may differ in the last bit. */
        float *T = NULL;
        if (beta != 0.0f) T = lipt_lowp_reserve(&d->acc, &d->acc_cap, (size_t)M * N * sizeof(float));
        const lipt_status st = lipt_dnnl_gemm_pk(d, type, ta, tb, M, N, K, 1.0f, A, lda, Apk, B, ldb, Bpk, NULL, 0.0f,
                                                 T ? T : C, T ? N : ldc, err);
        if (st == LIPT_OK) scale_acc_rows(C, ldc, T, M, N, alpha, beta);
        return st;
    }
    if (bias && alpha != 1.0f) return lipt_fail(err, LIPT_ERR_ARG, "internal: a bias with alpha %g (needs 1)", alpha);
    if (K <= 0) { /* an empty sum: C = beta C (+ bias), as BLAS (beta 0 overwrites, NaN included) */
        for (int i = 0; i < M; i++)
            for (int j = 0; j < N; j++) {
                float *c = C + (size_t)i * ldc + j;
                *c = beta == 0.0f ? 0.0f : beta * *c;
                if (bias) *c += bias[j];
            }
        return LIPT_OK;
    }
    const size_t elem = type == LIPT_DNNL_BF16 ? sizeof(uint16_t) : sizeof(float);
    const int ra = ta ? K : M, ca = ta ? M : K, rb = tb ? N : K, cb = tb ? K : N;
    /* scratch only for the operands that come unpacked */
    const size_t bytes_a = Apk ? 0 : ((size_t)ra * ca * elem + 63) & ~(size_t)63, bytes_b = Bpk ? 0 : (size_t)rb * cb * elem;
    char *buf = bytes_a + bytes_b ? lipt_lowp_reserve(&d->buf, &d->cap, bytes_a + bytes_b) : NULL;
    const lipt_pack_mode mode = type == LIPT_DNNL_BF16 ? LIPT_PACK_BF16 : LIPT_PACK_F32;
    void *a = (void *)Apk, *b = (void *)Bpk; /* oneDNN's handles are not const; it only reads them */
    if (!Apk) lipt_lowp_pack(mode, A, ra, ca, lda, a = buf);
    if (!Bpk) lipt_lowp_pack(mode, B, rb, cb, ldb, b = buf + bytes_a);
    prim_key k;
    memset(&k, 0, sizeof k);
    k.type = (int32_t)type;
    k.ta = ta != 0;
    k.tb = tb != 0;
    k.M = M;
    k.N = N;
    k.K = K;
    k.lda = Apk ? lda : ca; /* packed here: rows of ca (K, or M transposed) */
    k.ldb = Bpk ? ldb : cb;
    k.ldc = ldc;
    k.bias = bias != NULL;
    k.threads = omp_get_max_threads();
    memcpy(&k.alpha, &alpha, sizeof alpha);
    memcpy(&k.beta, &beta, sizeof beta);
    prim_entry *e;
    lipt_status st = entry_for(d, &k, alpha, beta, &e, err);
    if (st != LIPT_OK) return st;
    dnnl_status_t s;
    if ((s = dnnl_memory_set_data_handle(e->ma, a)) != dnnl_success ||
        (s = dnnl_memory_set_data_handle(e->mb, b)) != dnnl_success ||
        (s = dnnl_memory_set_data_handle(e->mc, C)) != dnnl_success ||
        (e->ms && (s = dnnl_memory_set_data_handle(
                       e->ms, lipt_lowp_reserve(&d->scratch, &d->scratch_cap, e->scratch))) != dnnl_success) ||
        (e->mbias && (s = dnnl_memory_set_data_handle(e->mbias, (void *)bias)) != dnnl_success))
        return dnnl_failed(err, "setting the data handles", s);
    dnnl_exec_arg_t args[5] = {{DNNL_ARG_SRC, e->ma}, {DNNL_ARG_WEIGHTS, e->mb}, {DNNL_ARG_DST, e->mc}};
    int nargs = 3;
    if (e->ms) args[nargs++] = (dnnl_exec_arg_t){DNNL_ARG_SCRATCHPAD, e->ms};
    if (e->mbias) args[nargs++] = (dnnl_exec_arg_t){DNNL_ARG_BIAS, e->mbias};
    if ((s = dnnl_primitive_execute(e->prim, d->stream, nargs, args)) != dnnl_success)
        return dnnl_failed(err, "executing the matmul", s);
    if ((s = dnnl_stream_wait(d->stream)) != dnnl_success) return dnnl_failed(err, "waiting for the matmul", s);
    return LIPT_OK;
}

lipt_status lipt_dnnl_gemm(lipt_dnnl *d, lipt_dnnl_type type, int ta, int tb, int M, int N, int K, float alpha,
                           const float *A, int lda, const float *B, int ldb, float beta, float *C, int ldc,
                           lipt_error *err) {
    return lipt_dnnl_gemm_pk(d, type, ta, tb, M, N, K, alpha, A, lda, NULL, B, ldb, NULL, NULL, beta, C, ldc, err);
}

#else /* no oneDNN in this build */

lipt_status lipt_dnnl_create(lipt_dnnl **out, lipt_error *err) {
    *out = NULL;
    return lipt_fail(err, LIPT_ERR_ARG, "%s", LIPT_NO_DNNL_MSG);
}

void lipt_dnnl_free(lipt_dnnl *d) { (void)d; }

void lipt_dnnl_get_stats(const lipt_dnnl *d, lipt_dnnl_stats *s) {
    (void)d;
    memset(s, 0, sizeof *s);
}

lipt_status lipt_dnnl_gemm_pk(lipt_dnnl *d, lipt_dnnl_type type, int ta, int tb, int M, int N, int K, float alpha,
                              const float *A, int lda, const void *Apk, const float *B, int ldb, const void *Bpk,
                              const float *bias, float beta, float *C, int ldc, lipt_error *err) {
    (void)d, (void)type, (void)ta, (void)tb, (void)M, (void)N, (void)K, (void)alpha, (void)A, (void)lda, (void)B;
    (void)ldb, (void)beta, (void)C, (void)ldc, (void)Apk, (void)Bpk, (void)bias;
    return lipt_fail(err, LIPT_ERR_ARG, "%s", LIPT_NO_DNNL_MSG);
}

lipt_status lipt_dnnl_gemm(lipt_dnnl *d, lipt_dnnl_type type, int ta, int tb, int M, int N, int K, float alpha,
                           const float *A, int lda, const float *B, int ldb, float beta, float *C, int ldc,
                           lipt_error *err) {
    return lipt_dnnl_gemm_pk(d, type, ta, tb, M, N, K, alpha, A, lda, NULL, B, ldb, NULL, NULL, beta, C, ldc, err);
}

#endif
