/* defines: AdamW and Muon over a lipt_params slab, global gradient-norm clipping, learning-rate schedules. */
#ifndef LIPT_OPTIM_H
#define LIPT_OPTIM_H

#include <stdint.h>

#include "lipt/core.h"
#include "lipt/params.h"

#ifdef __cplusplus
extern "C" {
#endif

/* Hyper-parameters in double, as PyTorch keeps them (Python floats); the kernel casts each
 * derived scalar to float at the point PyTorch does. */
typedef struct {
    double lr;            /* base learning rate (used by lipt_adamw_step; schedules pass their own) */
    double beta1, beta2;
    double eps;
    double weight_decay;  /* decoupled: p -= lr*wd*p, skipped for LIPT_PARAM_NO_DECAY tensors */
} lipt_adamw_config;

typedef struct {
    lipt_adamw_config cfg;
    int64_t t;            /* steps taken; saved in checkpoints (the moments live in params->m, params->v) */
} lipt_adamw;

/* PyTorch's torch.optim.AdamW defaults: lr 1e-3, betas (0.9, 0.999), eps 1e-8, weight_decay 1e-2. */
lipt_adamw_config lipt_adamw_defaults(void);
/* Rejects out-of-range values (lr < 0, betas outside [0,1), eps <= 0, wd < 0, non-finite) with a message. */
lipt_status lipt_adamw_config_check(const lipt_adamw_config *cfg, lipt_error *err);
void lipt_adamw_init(lipt_adamw *opt, const lipt_adamw_config *cfg);

/* One AdamW step over every trainable tensor of a finalized params set, at learning rate lr
 * (PyTorch order: decay, m = lerp(m, g, 1-b1), v = b2 v + (1-b2) g², p -= lr/(1-b1^t) * m / (sqrt(v)/sqrt(1-b2^t) + eps)).
 * Buffers are untouched. Increments opt->t first, so the first step uses t = 1. */
void lipt_adamw_step_lr(lipt_adamw *opt, lipt_params *p, double lr);
static inline void lipt_adamw_step(lipt_adamw *opt, lipt_params *p) { lipt_adamw_step_lr(opt, p, opt->cfg.lr); }
/* lipt_adamw_step_lr leaving alone the tensors k with skip[k] != 0 (skip: p->n entries, or NULL for none), whose
 * values and moments another optimizer owns (lipt_muon.owned). With skip NULL, or all 0, the same bits. */
void lipt_adamw_step_skip(lipt_adamw *opt, lipt_params *p, double lr, const unsigned char *skip);

/* Muon: momentum, then the update direction orthogonalised by a Newton–Schulz iteration (its singular values moved
 * to about 1), for the hidden layers' weight matrices; every other tensor stays with AdamW (lipt_adamw_step_skip).
 * Per owned matrix W [R, C] with gradient G:
 *   M <- mu M + G;  D = G + mu M (Nesterov) or M;  O = NS(D / (||D||_F + 1e-7));
 *   W <- W - lr wd W - lr s O,  s = 0.2 sqrt(max(R, C)).
 * The scale s gives O (R x C, singular values ~1) an RMS of 0.2, about that of an AdamW update, so AdamW's learning
 * rates and weight decays carry over: `lipt train --muon-lr` defaults to --lr.
 * The momentum M lives in params->m at the matrix's place (its params->v stays 0), so checkpoints store and restore it
 * with AdamW's moments (no format change): a run must resume with the optimizer it was saved with. */
typedef struct {
    double momentum;      /* mu, in [0, 1) */
    int nesterov;         /* 1: the direction is G + mu M; 0: M */
    int ns_steps;         /* Newton–Schulz iterations, >= 1 */
    double weight_decay;  /* decoupled: W -= lr*wd*W (the owned matrices never have LIPT_PARAM_NO_DECAY) */
} lipt_muon_config;

typedef struct {
    lipt_muon_config cfg;
    int n_mat;            /* matrices Muon updates */
    int *mat;             /* their indices into params->list */
    unsigned char *owned; /* params->n entries: 1 for those (the skip list of lipt_adamw_step_skip) */
    float *work;          /* Newton–Schulz scratch for the largest of them (lipt_muon_work_floats), allocated once */
} lipt_muon;

/* mu 0.95, Nesterov, 5 Newton–Schulz iterations, weight decay 0. */
lipt_muon_config lipt_muon_defaults(void);
lipt_status lipt_muon_config_check(const lipt_muon_config *cfg, lipt_error *err);
/* Whether Muon takes a tensor: a trainable 2-D matrix of a hidden layer (name "layers.*"), weight-decayed (so not a
 * bias such as attn.rel_bias). The embeddings, the output head, biases, norm gains and every 1-D tensor are AdamW's. */
int lipt_muon_takes(const lipt_tensor *t, int flags);
/* Selects the matrices of a finalized params set and allocates the scratch. LIPT_ERR_ARG (and nothing allocated) when
 * the set has no such matrix. */
lipt_status lipt_muon_init(lipt_muon *opt, const lipt_muon_config *cfg, const lipt_params *p, lipt_error *err);
void lipt_muon_free(lipt_muon *opt);
/* One Muon step at learning rate lr over the owned matrices (their gradients in p->grad, momenta in p->m); no
 * allocation. The products run on lipt_gemm: the same bits on any thread count. */
void lipt_muon_step(lipt_muon *opt, lipt_params *p, double lr);

/* Floats of scratch lipt_muon_orthogonalise needs for an R x C matrix. */
size_t lipt_muon_work_floats(int R, int C);
/* O = NS(D / (||D||_F + 1e-7)) with `steps` iterations of X <- a X + (b A + c A²) X, A = X Xᵀ, (a, b, c) =
 * (3.4445, -4.7750, 2.0315), on the orientation with rows <= columns. D [R, C] is read only; the result [R, C]
 * is returned inside work (lipt_muon_work_floats(R, C) floats). */
const float *lipt_muon_orthogonalise(const float *D, int R, int C, int steps, float *work);

/* Global L2 norm of all trainable gradients (accumulated in double; deterministic for any thread count). */
double lipt_grad_norm(const lipt_params *p);
/* torch.nn.utils.clip_grad_norm_: when norm > max_norm, scales every gradient by max_norm / (norm + 1e-6).
 * Returns the norm before clipping. A NaN or inf norm is returned as is and the gradients are left alone:
 * the caller should check isfinite() and skip the step. max_norm <= 0 only measures. */
double lipt_clip_grad_norm(lipt_params *p, double max_norm);

/* Learning-rate schedules, indexed by the 0-based step about to be taken. */
typedef enum {
    LIPT_LR_CONSTANT = 0, /* lr * min(1, (s+1)/W) (no warmup when W = 0) */
    LIPT_LR_INVSQRT,      /* lr * min((s+1)/W, sqrt(W/(s+1))); W = 0 acts as W = 1, i.e. lr / sqrt(s+1) */
    LIPT_LR_COSINE        /* lr * (s+1)/W for s < W, then cosine from lr to min_lr, reached at s = total-1 */
} lipt_lr_kind;

typedef struct {
    lipt_lr_kind kind;
    double lr;        /* peak learning rate */
    int64_t warmup;   /* W: linear warmup steps */
    int64_t total;    /* cosine only: total steps of the run */
    double min_lr;    /* cosine only: the floor */
} lipt_lr_schedule;

double lipt_lr_at(const lipt_lr_schedule *s, int64_t step);
lipt_status lipt_lr_schedule_check(const lipt_lr_schedule *s, lipt_error *err);
/* "constant", "invsqrt" (also "rsqrt"), "cosine". */
lipt_status lipt_lr_kind_parse(const char *name, lipt_lr_kind *out, lipt_error *err);
const char *lipt_lr_kind_name(lipt_lr_kind k);

#ifdef __cplusplus
}
#endif
#endif
