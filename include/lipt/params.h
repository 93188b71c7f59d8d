/* defines: lipt_params, the persistent slab of parameters (value, grad, Adam m and v) and buffers. */
#ifndef LIPT_PARAMS_H
#define LIPT_PARAMS_H

#include "lipt/tensor.h"

#ifdef __cplusplus
extern "C" {
#endif

enum {
    LIPT_PARAM_NO_DECAY = 1 << 0,  /* excluded from weight decay (biases, norms, embeddings by choice) */
    LIPT_PARAM_BUFFER   = 1 << 1   /* persistent state, not trained (power-iteration vectors) */
};

typedef struct {
    lipt_tensor **list;   /* registration order = checkpoint order */
    int *flags;
    int n, cap;
    float *slab;          /* one allocation: values | grads | m | v  (trainable), then buffers */
    size_t n_train;       /* floats in trainable parameters */
    size_t n_buf;         /* floats in buffers */
    float *value, *grad, *m, *v, *buf; /* region starts inside slab */
    int finalized;
} lipt_params;

void lipt_params_init(lipt_params *p);
/* Register a tensor; its memory exists after lipt_params_finalize. The name is copied. */
lipt_tensor *lipt_param_add(lipt_params *p, const char *name, int ndim, const int *shape, int flags);
void lipt_params_finalize(lipt_params *p);      /* one allocation, everything zeroed */
void lipt_params_zero_grad(lipt_params *p);
void lipt_params_free(lipt_params *p);
lipt_tensor *lipt_param_find(const lipt_params *p, const char *name);
int lipt_param_flags(const lipt_params *p, const lipt_tensor *t);
size_t lipt_params_count(const lipt_params *p);  /* trainable floats */

#ifdef __cplusplus
}
#endif
#endif
