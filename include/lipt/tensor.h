/* defines: lipt_tensor (float32, up to 4 dims, contiguous), the bump arena, views. */
#ifndef LIPT_TENSOR_H
#define LIPT_TENSOR_H

#include <stddef.h>
#include "lipt/core.h"

#ifdef __cplusplus
extern "C" {
#endif

#define LIPT_MAX_DIMS 4

typedef struct lipt_tensor lipt_tensor;
struct lipt_tensor {
    float *data;          /* numel floats, contiguous, row-major */
    float *grad;          /* same size; NULL until backward reaches it (activations) or the param slab slot */
    lipt_tensor *base;    /* a view shares data and grad with its base; NULL when it owns them */
    int ndim;
    int shape[LIPT_MAX_DIMS];
    size_t numel;
    int requires_grad;
    const char *name;     /* parameters only */
};

/* Bump allocator: a list of blocks; reset keeps memory, and after a reset that found
 * more than one block they are merged into one, so a repeated step stops allocating. */
typedef struct lipt_arena_block lipt_arena_block;
typedef struct {
    lipt_arena_block *head;   /* current block */
    size_t used_total;        /* bytes handed out since the last reset */
    size_t peak;              /* largest used_total seen */
    size_t capacity;          /* bytes owned in all blocks */
    size_t n_block_mallocs;   /* how many times the arena called malloc */
} lipt_arena;

void   lipt_arena_init(lipt_arena *a, size_t initial_bytes);
void  *lipt_arena_alloc(lipt_arena *a, size_t bytes);        /* 64-byte aligned, uninitialised */
void  *lipt_arena_calloc(lipt_arena *a, size_t bytes);       /* zeroed */
void   lipt_arena_reset(lipt_arena *a);
void   lipt_arena_free(lipt_arena *a);
/* Scoped temporaries: everything allocated after a mark is released by lipt_arena_release.
 * Tape nodes recorded after the mark must not be used afterwards (use in no-grad mode). */
typedef struct { lipt_arena_block *block; size_t used, used_total; } lipt_arena_mark;
lipt_arena_mark lipt_arena_get_mark(const lipt_arena *a);
void   lipt_arena_release(lipt_arena *a, lipt_arena_mark m);

size_t lipt_shape_numel(int ndim, const int *shape);
/* "[2,3,4]" into buf; returns buf. */
const char *lipt_shape_str(const lipt_tensor *t, char *buf, size_t len);
int    lipt_same_shape(const lipt_tensor *a, const lipt_tensor *b);
/* Size of the last dimension, and the number of rows (numel / last). */
int    lipt_last_dim(const lipt_tensor *t);
size_t lipt_rows(const lipt_tensor *t);

#ifdef __cplusplus
}
#endif
#endif
