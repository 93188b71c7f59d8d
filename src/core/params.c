/* The parameter slab: every trainable float, its gradient and Adam moments in one allocation. */
#include "lipt/params.h"

#include <stdlib.h>
#include <string.h>

void lipt_params_init(lipt_params *p) { memset(p, 0, sizeof *p); }

lipt_tensor *lipt_param_add(lipt_params *p, const char *name, int ndim, const int *shape, int flags) {
    LIPT_CHECK(!p->finalized, "parameter %s added after finalize", name);
    LIPT_CHECK(ndim >= 1 && ndim <= LIPT_MAX_DIMS, "parameter %s with %d dims", name, ndim);
    if (p->n == p->cap) {
        p->cap = p->cap ? 2 * p->cap : 32;
        p->list = realloc(p->list, (size_t)p->cap * sizeof *p->list);
        p->flags = realloc(p->flags, (size_t)p->cap * sizeof *p->flags);
        LIPT_CHECK(p->list && p->flags, "out of memory registering parameters");
    }
    lipt_tensor *t = lipt_xcalloc(1, sizeof *t);
    t->ndim = ndim;
    memcpy(t->shape, shape, (size_t)ndim * sizeof *shape);
    t->numel = lipt_shape_numel(ndim, shape);
    size_t len = strlen(name) + 1;
    char *nm = lipt_xmalloc(len);
    memcpy(nm, name, len);
    t->name = nm;
    t->requires_grad = !(flags & LIPT_PARAM_BUFFER);
    p->list[p->n] = t;
    p->flags[p->n] = flags;
    p->n++;
    if (flags & LIPT_PARAM_BUFFER) p->n_buf += t->numel;
    else p->n_train += t->numel;
    return t;
}

void lipt_params_finalize(lipt_params *p) {
    LIPT_CHECK(!p->finalized, "parameters finalized twice");
    size_t total = 4 * p->n_train + p->n_buf;
    p->slab = lipt_xaligned(total * sizeof(float));
    memset(p->slab, 0, total * sizeof(float));
    p->value = p->slab;
    p->grad = p->value + p->n_train;
    p->m = p->grad + p->n_train;
    p->v = p->m + p->n_train;
    p->buf = p->v + p->n_train;
    size_t off = 0, boff = 0;
    for (int i = 0; i < p->n; i++) {
        lipt_tensor *t = p->list[i];
        if (p->flags[i] & LIPT_PARAM_BUFFER) {
            t->data = p->buf + boff;
            boff += t->numel;
        } else {
            t->data = p->value + off;
            t->grad = p->grad + off;
            off += t->numel;
        }
    }
    p->finalized = 1;
}

void lipt_params_zero_grad(lipt_params *p) { memset(p->grad, 0, p->n_train * sizeof(float)); }

void lipt_params_free(lipt_params *p) {
    for (int i = 0; i < p->n; i++) {
        free((void *)p->list[i]->name);
        free(p->list[i]);
    }
    free(p->list);
    free(p->flags);
    free(p->slab);
    memset(p, 0, sizeof *p);
}

lipt_tensor *lipt_param_find(const lipt_params *p, const char *name) {
    for (int i = 0; i < p->n; i++)
        if (strcmp(p->list[i]->name, name) == 0) return p->list[i];
    return NULL;
}

int lipt_param_flags(const lipt_params *p, const lipt_tensor *t) {
    for (int i = 0; i < p->n; i++)
        if (p->list[i] == t) return p->flags[i];
    return -1;
}

size_t lipt_params_count(const lipt_params *p) { return p->n_train; }
