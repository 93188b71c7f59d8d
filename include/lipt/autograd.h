/* defines: the context (arena + tape + RNG), tape nodes, the op table, backward, no-grad mode. */
#ifndef LIPT_AUTOGRAD_H
#define LIPT_AUTOGRAD_H

#include "lipt/tensor.h"

#ifdef __cplusplus
extern "C" {
#endif

/* The op list: one line per differentiable op. X(ENUM, name) declares
 *   LIPT_OP_<ENUM>, its printable name, and the backward `lipt_<name>_backward`,
 * which lives in src/ops/ beside the op's forward. Adding an op is one line here
 * plus its file. */
#define LIPT_OP_LIST(X)                 \
    X(MATMUL, matmul)                   \
    X(LINEAR, linear)                   \
    X(LINEAR_GELU, linear_gelu)         \
    X(LINEAR_MAXMIN, linear_maxmin)     \
    X(CONCAT_COLS, concat_cols)         \
    X(ADD, add)                         \
    X(SUB, sub)                         \
    X(MUL, mul)                         \
    X(SCALE, scale)                     \
    X(SUM, sum)                         \
    X(MEAN, mean)                       \
    X(EMBEDDING, embedding)             \
    X(LAYERNORM, layernorm)             \
    X(RELU, relu)                       \
    X(ELU, elu)                         \
    X(GELU, gelu)                       \
    X(LIPSWISH, lipswish)               \
    X(SOFTMAX, softmax)                 \
    X(CROSS_ENTROPY, cross_entropy)     \
    X(DROPOUT, dropout)                 \
    X(ATTENTION_DP, attention_dp)       \
    X(ATTENTION_L2, attention_l2)       \
    X(ATTENTION_L2_TIED, attention_l2_tied) \
    X(ATTENTION_DP_REL, attention_dp_rel) \
    X(CLIP_ROWS, clip_rows)             \
    X(EXP, exp)                         \
    X(MAXMIN, maxmin)                   \
    X(SPECTRAL_NORM, spectral_norm)     \
    X(SPECTRAL_NORM_UB, spectral_norm_ub) \
    X(NORM_INF, norm_inf)               \
    X(MAX, max)                         \
    X(SQRT, sqrt)                       \
    X(CONTRACT_FACTOR, contract_factor) \
    X(RECOMPUTE, recompute)             \
    X(REVERSIBLE, reversible)           \
    X(ROUND_GRID, round_grid)

typedef enum {
#define LIPT_X_ENUM(E, n) LIPT_OP_##E,
    LIPT_OP_LIST(LIPT_X_ENUM)
#undef LIPT_X_ENUM
    LIPT_OP_COUNT
} lipt_op_id;

#define LIPT_MAX_INPUTS 4
#define LIPT_NODE_IARGS 8
#define LIPT_NODE_FARGS 4

typedef struct lipt_node lipt_node;
struct lipt_node {
    lipt_op_id op;
    int n_in;
    lipt_tensor *in[LIPT_MAX_INPUTS];
    lipt_tensor *out;
    void *saved;                   /* op-specific buffers in the arena (softmax probs, masks, ...) */
    void *saved2;
    const int *ids;                /* integer inputs (token ids, targets), arena copy */
    int iarg[LIPT_NODE_IARGS];     /* op-specific integer arguments (dims, flags) */
    float farg[LIPT_NODE_FARGS];   /* op-specific float arguments */
    lipt_node *prev;
};

typedef struct lipt_ctx lipt_ctx;
typedef void (*lipt_backward_fn)(lipt_ctx *ctx, lipt_node *node);

/* Where a step's time goes (lipt bench --profile): with ctx->profile pointing to a zeroed lipt_profile, every op's
 * forward is charged the wall time since the op recorded before it (or since lipt_profile_mark: call it where the
 * forward starts), every node's backward its own wall time, and lipt_train_step adds its phases. Ops that another
 * op's backward reruns (--recompute) are charged to that backward. Off (NULL) by default: then nothing is timed. */
enum { LIPT_PHASE_FORWARD, LIPT_PHASE_BACKWARD, LIPT_PHASE_CLIP, LIPT_PHASE_OPTIMIZER, LIPT_PHASE_REFRESH,
       LIPT_PHASE_COUNT };
typedef struct lipt_profile {
    double fwd[LIPT_OP_COUNT], bwd[LIPT_OP_COUNT]; /* seconds, summed over calls */
    long calls[LIPT_OP_COUNT];                     /* forward calls */
    double phase[LIPT_PHASE_COUNT];                /* seconds: lipt_train_step's forward (to the loss), backward (the
                                                    * tape, gradient zeroing and averaging included), gradient clipping,
                                                    * optimizer, refresh after the step (norms, certificates) */
    double products, attention;                    /* seconds in the model's matrix products (the kernels' own
                                                    * account, src/kernels/kctx.h: each top-level product call on the
                                                    * context, the attention kernels' whole calls included), and the
                                                    * attention kernels' part of it */
    long steps;                                    /* lipt_train_step calls */
    double mark;                                   /* when the last op recorded */
    int in_backward;
} lipt_profile;
/* Seconds on a monotonic clock (the profile's). */
double lipt_profile_now(void);
/* Starts the forward's clock: the next op's forward is charged from here. */
static inline void lipt_profile_mark(lipt_profile *p) {
    if (p) p->mark = lipt_profile_now();
}
/* The forward of an op that recorded (lipt_record) before computing: the rest of its time, charged at its end. */
void lipt_profile_op_end(lipt_ctx *ctx, int op);
/* A profile's step in milliseconds per step: step, the sum of the phases; products, the time in the matrix products
 * (attention, the attention kernels' part of it); outside = step - products, and its fraction of the step (NaN when
 * no step was profiled). lipt bench --profile reports these. */
typedef struct lipt_profile_split {
    double step_ms, products_ms, attention_ms, outside_ms, outside_fraction;
} lipt_profile_split;
lipt_profile_split lipt_profile_split_of(const lipt_profile *p);

typedef struct {
    const char *name;
    lipt_backward_fn backward;
} lipt_op_info;

extern const lipt_op_info lipt_ops[LIPT_OP_COUNT];

/* The explicit context: all mutable state of a computation lives here. */
struct lipt_ctx {
    lipt_arena arena;      /* activations, saved buffers, tape nodes; reset every step */
    lipt_node *tape;       /* last recorded node */
    size_t n_nodes;
    int no_grad;           /* > 0: ops record nothing and outputs do not require grad */
    int training;          /* dropout active when set */
    lipt_rng rng;          /* dropout masks and other in-graph randomness */
    int attn_stats;        /* set: attention forwards raise attn_logit_spread (a pass over the logits; off by default) */
    float attn_logit_spread; /* the largest max - min of one row of attention logits (unmasked, after every bias,
                              * before the softmax) since the caller zeroed it: how peaked softmax can get */
    int attn_tiled;        /* attention kernels: -1 auto (tiled from a measured T on), 0 always the T×T probability
                            * matrix, 1 always tiled; lipt_ctx_init reads it from env LIPT_ATTN_TILED=auto|0|1 */
    int recompute;         /* set: lipt_model_block runs each residual half-block through lipt_recompute, keeping
                            * only the half-blocks' outputs between forward and backward (memory for compute) */
    int recompute_rows;    /* with recompute: the feed-forward half-block (row-wise) runs in pieces of this many
                            * tokens; 0: LIPT_RECOMPUTE_ROWS */
    int precision;         /* lipt_precision of the model's matrix products (matmul, linear, attention); set it with
                            * lipt_ctx_set_precision. Other contexts (bounds, Jacobians, inversion) keep float32 */
    struct lipt_lowp *lowp; /* the low-precision products' per-thread scratch and oneDNN state (NULL for float32) */
    lipt_profile *profile;  /* NULL, or where the ops' and the step's times are summed (the caller's) */
    struct lipt_reversible *rev; /* NULL, or reversible training (--memory invert): the model's blocks run through
                            * lipt_reversible, keeping no block input, with these options and statistics */
};

void lipt_ctx_init(lipt_ctx *ctx, size_t arena_bytes, uint64_t seed);
void lipt_ctx_free(lipt_ctx *ctx);
/* The precision of the model's products in this context: LIPT_OK, or the error of lipt_precision_check (the context
 * is then unchanged). Call outside parallel regions, before the context's first op at that precision. */
lipt_status lipt_ctx_set_precision(lipt_ctx *ctx, lipt_precision p, lipt_error *err);
/* End of a step: forget the tape and every activation (parameters are untouched). */
void lipt_ctx_reset(lipt_ctx *ctx);

/* No-grad mode nests: push/pop pairs. */
static inline void lipt_no_grad_push(lipt_ctx *ctx) { ctx->no_grad++; }
static inline void lipt_no_grad_pop(lipt_ctx *ctx)  { ctx->no_grad--; }

/* Tensors in the arena. */
lipt_tensor *lipt_tensor_new(lipt_ctx *ctx, int ndim, const int *shape);   /* uninitialised */
lipt_tensor *lipt_tensor_zeros(lipt_ctx *ctx, int ndim, const int *shape);
lipt_tensor *lipt_tensor_like(lipt_ctx *ctx, const lipt_tensor *t);
lipt_tensor *lipt_tensor_1d(lipt_ctx *ctx, int n0);
lipt_tensor *lipt_tensor_2d(lipt_ctx *ctx, int n0, int n1);
lipt_tensor *lipt_tensor_3d(lipt_ctx *ctx, int n0, int n1, int n2);
/* Wrap existing memory (not owned, no grad) as a tensor struct allocated in the arena. */
lipt_tensor *lipt_tensor_wrap(lipt_ctx *ctx, float *data, int ndim, const int *shape);
/* A view with another shape of the same numel; shares data and gradient. Not an op. */
lipt_tensor *lipt_reshape(lipt_ctx *ctx, lipt_tensor *t, int ndim, const int *shape);

/* Op plumbing, used by src/ops. */
int        lipt_should_record(const lipt_ctx *ctx, int n, lipt_tensor *const *in);
lipt_node *lipt_record(lipt_ctx *ctx, lipt_op_id op, lipt_tensor *out, int n, lipt_tensor *const *in);
/* Gradient buffer of t for accumulation (+=), allocated zeroed on first use; NULL if t needs none. */
float     *lipt_grad_of(lipt_ctx *ctx, lipt_tensor *t);
/* lipt_grad_of for a backward that writes every element of t's gradient: when the buffer is new (*fresh = 1) it is
 * not zeroed and the op must store (=) where it would accumulate (+=); *fresh = 0 otherwise (NULL: *fresh = 0).
 * The element-wise ops use it; products keep lipt_grad_of in float32, as OpenBLAS's beta = 0 pass over C cost more
 * than the arena's zeroing (profiled on a DP training step: memset 1.2 % before, 1.0 % after; with products on fresh
 * buffers too, memset 0.5 % but OpenBLAS's beta pass 0.7 -> 2.0 %), and use it at a low precision, where oneDNN's
 * beta = 0 costs nothing (src/ops/matmul.c, product_grad). */
float     *lipt_grad_of_fresh(lipt_ctx *ctx, lipt_tensor *t, int *fresh);
/* t's gradient becomes buf, when t (its root) has no gradient buffer yet: returns 1 if so, else 0 (nothing changed).
 * For an op whose input gradient equals its output gradient (a sum's operand): the output's gradient is complete
 * when the op's backward runs, and no node reads it afterwards (its consumers were recorded after the op and ran
 * before it), so the input can take the buffer over instead of copying it. Later contributions to t's gradient then
 * land in buf too; a second backward over the same tape (lipt_jac_sess) finds t->grad == buf. */
int        lipt_grad_adopt(lipt_tensor *t, float *buf);

/* Reverse pass from a one-element loss: dloss/dloss = 1 (or seed, if given, of loss->numel).
 * One backward per tape: intermediate gradients stay accumulated, so reset before the next one. */
void lipt_backward(lipt_ctx *ctx, lipt_tensor *loss);
void lipt_backward_seeded(lipt_ctx *ctx, lipt_tensor *out, const float *seed);

/* Activation recomputation (gradient checkpointing). lipt_recompute(ctx, fn, x, arg) returns fn(ctx, x, arg),
 * which must have x's shape, but runs fn without recording: only the output is kept. The backward runs fn again
 * from x, recording, with the RNG state it had the first time (same dropout masks), walks that sub-tape from the
 * output's gradient and releases it. The gradients are those of calling fn directly, bit for bit when x feeds
 * nothing but the segment (as in a chain of residual blocks). `arg` must live until the backward (the arena is
 * fine). Without anything to record, it is fn(ctx, x, arg). */
typedef lipt_tensor *(*lipt_segment_fn)(lipt_ctx *ctx, lipt_tensor *x, void *arg);
lipt_tensor *lipt_recompute(lipt_ctx *ctx, lipt_segment_fn fn, lipt_tensor *x, void *arg);
/* The same for a row-wise fn (each row of D = x's last dim depends on that row alone, e.g. a feed-forward block):
 * forward and backward run on pieces of at most chunk_rows rows, so the segment's inside never exists for more
 * than one piece. Pieces are whole sequences [k, T, D] when a sequence fits, else runs [1, n, D] of one sequence.
 * With more than one piece the weights' gradients are summed piece by piece: float rounding away from the plain
 * tape's, no longer bit for bit. chunk_rows <= 0 or x not larger: lipt_recompute. */
lipt_tensor *lipt_recompute_rows(lipt_ctx *ctx, lipt_segment_fn fn, lipt_tensor *x, void *arg, int chunk_rows);
#define LIPT_RECOMPUTE_ROWS 1024

/* Reversible chains (--memory invert, docs/PERFORMANCE.md "Memory from invertibility"). A chain of n segments
 * x_{k+1} = fn(ctx, x_k, args[k]), each invertible, is recorded as one node that keeps only the chain's input and
 * output (and per segment its RNG state: dropout masks are replayed). The backward walks the segments from the top:
 * inv reconstructs x_k from x_{k+1}, fn reruns on a sub-tape from it, the sub-tape is walked from x_{k+1}'s gradient
 * and released. Activation memory does not grow with n.
 *
 * inv(ctx, y, x_out, arg, info, err): writes the input whose segment output is y (y->numel floats) to x_out; on entry
 * ctx->rng holds the segment's RNG state from the forward (restore it before every evaluation of fn's randomness),
 * and no-grad mode is on. info: what it did (iterations, the a-posteriori bound ...). A failure is recorded in the
 * chain's lipt_reversible (status, message) and the walk goes on from inv's best x_out: the caller reports it. */
typedef struct {
    int iters;          /* branch evaluations spent (1 for an exact inverse) */
    int fallbacks;      /* accelerated steps rejected for plain ones */
    int converged;      /* the stopping rule was met */
    double bound;       /* a-posteriori bound on the error of x_out, relative: ‖x̂ − x‖ / max(1, ‖x̂‖) (0: exact) */
    double work;        /* the evaluations in whole-input equivalents (fewer when only unfinished slices run) */
} lipt_inv_info;
typedef lipt_status (*lipt_segment_inv)(lipt_ctx *ctx, lipt_tensor *y, float *x_out, void *arg, lipt_inv_info *info,
                                        lipt_error *err);

/* Options and statistics of reversible chains; ctx->rev points to one while a caller trains with --memory invert. */
typedef struct lipt_reversible {
    double tol;         /* iterative inverses: the relative a-posteriori bound to reach (lipt_reversible_defaults) */
    double tol_lowp;    /* the same with low-precision products (bf16): their rounding sets a floor on the residual
                         * (about 6e-4 of the stream), so the bound to reach is max(tol, tol_lowp) */
    int max_iter;       /* iterative inverses: evaluations per segment at most */
    int accel;          /* iterative inverses: Anderson's history (0: plain iteration) */
    int keep_every;     /* also keep the true input of every k-th segment (k > 0) and restart the reconstruction from
                         * it: error cannot compound over more than k segments. 0: only the chain's input */
    int debug_truth;    /* keep every segment's true input anyway, measure each reconstruction against it (err_truth)
                         * and go on from the reconstruction (as without it): a debug run, memory as store-all */
    int cap;            /* length of the per-segment arrays below (0: none recorded) */
    int *iters;         /* [cap] the last backward's per-segment iterations (segment k at k), or NULL */
    double *bound;      /* [cap] its a-posteriori bounds, or NULL */
    double *err_truth;  /* [cap] with debug_truth: ‖x̂_k − x_k‖ / max(1, ‖x_k‖) (largest entry), or NULL */
    double *consistency; /* [cap] ‖fn(x̂_k) − x_{k+1}‖ / max(1, ‖x_{k+1}‖) (largest entry) of the rerun, or NULL */
    long inversions, evaluations, fallbacks, unconverged; /* totals since the caller zeroed them */
    double work;         /* evaluations in whole-input equivalents (lipt_inv_info.work), summed */
    double worst_bound;  /* the largest bound seen */
    lipt_status status;  /* the first failure (LIPT_OK: none); err its message */
    lipt_error err;
} lipt_reversible;

/* The defaults: tol 1e-5 (1e-3 with bf16 products), max_iter 100, accel LIPT_REV_ACCEL, keep_every 0, nothing
 * recorded. */
#define LIPT_REV_TOL 1e-5
#define LIPT_REV_TOL_LOWP 1e-3
#define LIPT_REV_MAX_ITER 100
#define LIPT_REV_ACCEL 5
void lipt_reversible_defaults(lipt_reversible *rev);
/* Optional, for segments whose inverse computes what their rerun would (a coupling block's branch reads only the half
 * it does not write, where output and input agree bit for bit): rebuilds the input into x_out AND records the segment
 * on ctx's tape, returning its output (values those of y) with in[0..*n_in) (at most 2) the recorded tensors whose
 * gradients sum to the input's; the chain then skips the rerun. NULL: not applicable here (inv and a rerun instead).
 * ctx->rng is the segment's RNG state on entry, as for inv. */
typedef lipt_tensor *(*lipt_segment_inv_taped)(lipt_ctx *ctx, lipt_tensor *y, float *x_out, void *arg,
                                               lipt_tensor **in, int *n_in);
lipt_tensor *lipt_reversible_chain(lipt_ctx *ctx, int n, lipt_segment_fn fn, lipt_segment_inv inv,
                                   lipt_segment_inv_taped inv_taped, void *const *args, lipt_tensor *x, int n_outside,
                                   lipt_tensor *const *outside);

#ifdef __cplusplus
}
#endif
#endif
