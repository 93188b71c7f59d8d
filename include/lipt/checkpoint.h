/* defines: the versioned checkpoint format (zlib sections, CRC-32, atomic write) and its two-phase reader. */
#ifndef LIPT_CHECKPOINT_H
#define LIPT_CHECKPOINT_H

#include <stddef.h>
#include <stdint.h>

#include "lipt/core.h"
#include "lipt/params.h"

#ifdef __cplusplus
extern "C" {
#endif

#define LIPT_CKPT_MAGIC "LIPTCKPT"
#define LIPT_CKPT_VERSION 1u

/* What a checkpoint holds. Pointers may be NULL when the matching length/count is 0. */
typedef struct {
    const char *config_text;  /* model config, `key = value` lines (NUL-terminated; stored verbatim) */
    const void *vocab;        /* vocabulary, opaque bytes */
    size_t vocab_len;
    const lipt_params *params;/* every tensor: name, shape, flags, values (trainable and buffers) */
    int with_optimizer;       /* store params->m, params->v and adam_t */
    int64_t adam_t;           /* lipt_adamw.t */
    int64_t step;             /* training step */
    const lipt_rng *rngs;     /* RNG states, in the caller's order */
    int n_rngs;
    const void *extra;        /* opaque (data cursor, ...) */
    size_t extra_len;
    int compression;          /* zlib level 1..9; 0 = default (1: float weights barely compress, speed wins) */
    /* Fault injection for tests: the temporary file "fails" once this many bytes were written (0 = off). */
    size_t test_fail_after_bytes;
} lipt_ckpt_contents;

/* Writes PATH.tmp, fflush + fsync, renames it over PATH, fsyncs the directory. On any failure the
 * temporary is removed and an existing PATH is left untouched. */
lipt_status lipt_ckpt_save(const char *path, const lipt_ckpt_contents *c, lipt_error *err);

/* One tensor as recorded in a checkpoint. */
typedef struct {
    char *name;
    int ndim;
    int shape[LIPT_MAX_DIMS];
    int flags;                /* LIPT_PARAM_* as saved */
    size_t numel;
    size_t offset;            /* in floats, into the trainable or the buffer region */
} lipt_ckpt_tensor;

/* An opened, fully verified checkpoint held in memory. Read the public fields, build the model from
 * config_text, then lipt_ckpt_load_params, then lipt_ckpt_close. */
typedef struct {
    uint32_t version;
    char *config_text;        /* NUL-terminated (config_len bytes before the NUL) */
    size_t config_len;
    unsigned char *vocab;
    size_t vocab_len;
    int64_t step;
    int has_optimizer;
    int64_t adam_t;
    lipt_rng *rngs;
    int n_rngs;
    unsigned char *extra;
    size_t extra_len;
    int n_tensors;
    lipt_ckpt_tensor *tensors;/* in saved (registration) order */
    size_t n_train, n_buf;    /* floats */
    float *values;            /* n_train trainable floats */
    float *bufs;              /* n_buf buffer floats */
    float *m, *v;             /* n_train each when has_optimizer, else NULL */
} lipt_ckpt;

/* Reads and verifies everything (header, sizes, every CRC, decompression, tensor index). On failure
 * ck holds nothing (closing it is still safe) and err says what is wrong in one line. */
lipt_status lipt_ckpt_open(const char *path, lipt_ckpt *ck, lipt_error *err);
/* The same from a memory image of a file (never reads outside [data, data+len)). */
lipt_status lipt_ckpt_open_mem(const void *data, size_t len, lipt_ckpt *ck, lipt_error *err);
/* Copies values (and m, v when load_optimizer) into a finalized params set, matching every tensor by
 * name, kind (buffer or trainable) and shape, in both directions. Nothing is copied unless all match. */
lipt_status lipt_ckpt_load_params(const lipt_ckpt *ck, lipt_params *p, int load_optimizer, lipt_error *err);
const lipt_ckpt_tensor *lipt_ckpt_find(const lipt_ckpt *ck, const char *name);
void lipt_ckpt_close(lipt_ckpt *ck);

#ifdef __cplusplus
}
#endif
#endif
