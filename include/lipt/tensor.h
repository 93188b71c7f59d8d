/* defines: lipt_tensor (float32, up to 4 dims, contiguous), views, shapes. The arena: lipt/arena.h. */
#ifndef LIPT_TENSOR_H
#define LIPT_TENSOR_H

#include <stddef.h>
#include "lipt/arena.h"
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
    const void *lowp;     /* at a low precision, data already converted for the products by the op that wrote it
                           * (as lipt_lowp_pack_p packs rows of the last dimension), or NULL: a consumer's product
                           * takes it instead of converting data again */
};

size_t lipt_shape_numel(int ndim, const int *shape);
/* "[2,3,4]" into buf; returns buf. */
const char *lipt_shape_str(const lipt_tensor *t, char *buf, size_t len);
int    lipt_same_shape(const lipt_tensor *a, const lipt_tensor *b);
/* Size of the last dimension, and the number of rows (numel / last). */
int    lipt_last_dim(const lipt_tensor *t);
size_t lipt_rows(const lipt_tensor *t);
/* The tensor that owns t's data and gradient: t's base for a view, else t. */
static inline lipt_tensor *lipt_tensor_root(lipt_tensor *t) { return t->base ? t->base : t; }

#ifdef __cplusplus
}
#endif
#endif
