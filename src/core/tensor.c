/* Shape helpers. */
#include "lipt/tensor.h"

#include <stdio.h>

size_t lipt_shape_numel(int ndim, const int *shape) {
    size_t n = 1;
    for (int i = 0; i < ndim; i++) n *= (size_t)shape[i];
    return n;
}

const char *lipt_shape_str(const lipt_tensor *t, char *buf, size_t len) {
    size_t off = 0;
    off += (size_t)snprintf(buf + off, len - off, "[");
    for (int i = 0; i < t->ndim && off < len; i++)
        off += (size_t)snprintf(buf + off, len - off, i ? ",%d" : "%d", t->shape[i]);
    if (off < len) snprintf(buf + off, len - off, "]");
    return buf;
}

int lipt_same_shape(const lipt_tensor *a, const lipt_tensor *b) {
    if (a->ndim != b->ndim) return 0;
    for (int i = 0; i < a->ndim; i++)
        if (a->shape[i] != b->shape[i]) return 0;
    return 1;
}

int lipt_last_dim(const lipt_tensor *t) { return t->ndim ? t->shape[t->ndim - 1] : 1; }

size_t lipt_rows(const lipt_tensor *t) {
    int last = lipt_last_dim(t);
    return last ? t->numel / (size_t)last : 0;
}
