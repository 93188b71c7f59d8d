/* Private: a Jacobian session (private context, constant weights, one forward shared by many VJPs), used by
 * jacobian.c and ascent.c. */
#ifndef LIPT_LIPSCHITZ_JAC_SESSION_H
#define LIPT_LIPSCHITZ_JAC_SESSION_H

#include "lipt/jacobian.h"

typedef struct lipt_jac_sess_s {
    lipt_jac_map map;
    size_t n;
    lipt_ctx ctx;          /* the forward under study and its VJPs; reset at every eval */
    lipt_ctx probe;        /* the first forward, kept alive so flags of views it made can be restored */
    lipt_tensor *x, *out;  /* of the last eval, in ctx */
    lipt_tensor **leaf;    /* tensors whose requires_grad was cleared, with their old flags */
    int *leaf_flag;
    int n_leaf;
    float **gbuf;          /* gradient buffers on the current tape, zeroed between VJPs */
    size_t *glen;
    int n_gbuf, cap_gbuf;
    int n_vjp_tape;        /* VJPs done on the current tape */
    lipt_arena_mark mark;  /* after the first VJP on the tape (grad buffers live below it) */
    float *seed;           /* n zeros (one-hot seeds are set and cleared in place) */
    long n_forward, n_vjp;
    struct lipt_jac_sess_s *workers; /* per-thread sessions for parallel row passes (no probe of their own) */
    int n_workers;
} lipt_jac_sess;

lipt_status lipt_jac_sess_open(lipt_jac_sess *s, const lipt_jac_map *m, lipt_error *err);
void lipt_jac_sess_close(lipt_jac_sess *s);
/* Forward at x (n floats). *fx (may be NULL) points at f(x), valid until the next eval. */
lipt_status lipt_jac_sess_eval(lipt_jac_sess *s, const float *x, const float **fx, lipt_error *err);
/* seedᵀ J at the last eval point, into g (n floats; pointer valid until the next VJP or eval).
 * seed NULL with row >= 0: the one-hot row (g = ∇f_row). */
lipt_status lipt_jac_sess_vjp(lipt_jac_sess *s, const float *seed, long row, const float **g, lipt_error *err);

/* Every row of J at x: sink(r, ∇f_r, arg) once per row r, possibly from several threads at once (distinct rows).
 * Afterwards the session's last eval point is undefined (eval again before a vjp). */
typedef void (*lipt_jac_row_sink)(size_t row, const float *g, void *arg);
lipt_status lipt_jac_sess_rows(lipt_jac_sess *s, const float *x, lipt_jac_row_sink sink, void *arg, lipt_error *err);
/* The full Jacobian (n × n, row-major) and its absolute row sums at x, through lipt_jac_sess_rows. */
lipt_status lipt_jac_sess_full(lipt_jac_sess *s, const float *x, double *J, lipt_error *err);
lipt_status lipt_jac_sess_row_sums(lipt_jac_sess *s, const float *x, double *rs, lipt_error *err);

#endif
