/* defines: lipt_train_step, one optimizer step of a model (the step `lipt train`, `lipt bench` and the golden test run). */
#ifndef LIPT_TRAIN_H
#define LIPT_TRAIN_H

#include <stddef.h>

#include "lipt/autograd.h"
#include "lipt/dist.h"
#include "lipt/model.h"
#include "lipt/optim.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct {
    double lr;          /* this step's learning rate (a schedule's value) */
    double clip;        /* global gradient-norm clipping; <= 0: none (the norm is still measured) */
    int power_iters;    /* norm-refresh rounds after the update (normally cfg.power_iters; 0 leaves them out) */
    lipt_dist *dist;    /* data-parallel ranks: the loss and the gradient are averaged over them; NULL: one process */
    size_t bucket;      /* floats per gradient all-reduce call; 0: 4 Mi (16 MiB) */
    int flag;           /* this rank's flag (e.g. "a stop signal arrived"), ORed over the ranks so that they agree */
    lipt_muon *muon;    /* NULL: AdamW on every tensor; else Muon on its matrices at muon_lr, AdamW on the rest */
    double muon_lr;     /* this step's Muon learning rate (its schedule's value) */
} lipt_step_opts;

typedef struct {
    double loss;        /* the batch's mean loss (the mean over ranks), before the update */
    double grad_norm;   /* the global gradient norm before clipping */
    int flag_any;       /* some rank set opts.flag */
} lipt_step_result;

/* One step on the batch in[B*T] -> tg[B*T]: forward with the loss (ctx->training set: dropout on), the loss and
 * flag agreed across ranks, zero grad, backward, the gradient averaged across ranks, clipping, the arena reset,
 * AdamW at opts->lr (with opts->muon: Muon on its matrices at opts->muon_lr), the Lipschitz norm refresh. ctx's
 * arena is reset on return.
 * LIPT_ERR_NUMERIC when the loss or the gradient norm is not finite: the parameters are then unchanged (res holds
 * what was measured); other statuses from the forward pass (bad ids) or the collectives. */
lipt_status lipt_train_step(lipt_ctx *ctx, lipt_model *m, lipt_adamw *opt, const int *in, const int *tg, int B, int T,
                            const lipt_step_opts *opts, lipt_step_result *res, lipt_error *err);

/* What a training run of cfg at batch B per rank on `ranks` ranks (local_ranks of them on this machine) needs in
 * memory, against what this process may still use; recompute: --memory recompute; rev non-NULL: --memory invert. */
typedef struct {
    double need;           /* bytes, margins included */
    double room;           /* bytes this process may still use (the tightest limit; INFINITY when none is known) */
    const char *room_what; /* the limit that gives room */
    double model;          /* the model's weights, gradients and Adam state */
    double arena;          /* a training step's arena high-water mark at the batch; 0: not measured (the model alone
                              does not fit) */
    double reserve;        /* the arena to reserve for the run */
    long most;             /* the largest batch that fits; 0: unknown, or none */
    int ran_out;           /* 1: the probe's own step at a small batch did not fit (need is then INFINITY) */
} lipt_train_memory;

/* Measures a real step of a throwaway model at two small batches and extrapolates to B. LIPT_OK, or why the probe
 * failed (its own allocations included). */
lipt_status lipt_train_memory_estimate(const lipt_config *cfg, long B, int ranks, int local_ranks, int recompute,
                                       const lipt_reversible *rev, lipt_train_memory *out, lipt_error *err);

#ifdef __cplusplus
}
#endif
#endif
