/* Error recording and fatal aborts. */
#include "lipt/core.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>

lipt_status lipt_fail(lipt_error *err, lipt_status st, const char *fmt, ...) {
    if (err) {
        va_list ap;
        va_start(ap, fmt);
        vsnprintf(err->msg, sizeof err->msg, fmt, ap);
        va_end(ap);
        err->status = st;
    }
    return st;
}

const char *lipt_status_name(lipt_status st) {
    switch (st) {
    case LIPT_OK: return "ok";
    case LIPT_ERR_ARG: return "bad argument";
    case LIPT_ERR_IO: return "I/O error";
    case LIPT_ERR_FORMAT: return "bad format";
    case LIPT_ERR_NOMEM: return "out of memory";
    case LIPT_ERR_NUMERIC: return "numerical failure";
    case LIPT_ERR_INTERNAL: return "internal error";
    }
    return "unknown status";
}

void lipt_die(const char *file, int line, const char *fmt, ...) {
    va_list ap;
    fprintf(stderr, "lipt: internal error at %s:%d: ", file, line);
    va_start(ap, fmt);
    vfprintf(stderr, fmt, ap);
    va_end(ap);
    fputc('\n', stderr);
    abort();
}

void *lipt_xmalloc_at(size_t bytes, const char *file, int line) {
    void *p = malloc(bytes ? bytes : 1);
    if (!p) lipt_die(file, line, "out of memory allocating %zu bytes", bytes);
    return p;
}

void *lipt_xcalloc_at(size_t n, size_t size, const char *file, int line) {
    void *p = calloc(n ? n : 1, size ? size : 1);
    if (!p) lipt_die(file, line, "out of memory allocating %zu x %zu bytes", n, size);
    return p;
}

void *lipt_xaligned_at(size_t bytes, const char *file, int line) {
    void *p = NULL;
    size_t b = (bytes + 63) & ~(size_t)63;
    if (posix_memalign(&p, 64, b ? b : 64) != 0 || !p)
        lipt_die(file, line, "out of memory allocating %zu aligned bytes", bytes);
    return p;
}
