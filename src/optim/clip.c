/* Global gradient-norm clipping with torch.nn.utils.clip_grad_norm_ semantics. */
#include "lipt/optim.h"

#include <math.h>

#include "kernels/kernels.h"

/* Elements from which the clipping's scaling runs on the thread team. */
#define NORM_PAR_MIN 65536

/* Σ g² by lipt_sum_f32 (fixed chunks whatever the thread count: the norm, hence a resumed run, is bit-reproducible). */
double lipt_grad_norm(const lipt_params *p) {
    LIPT_CHECK(p->finalized, "grad norm: parameters not finalized");
    return sqrt(lipt_sum_f32(p->grad, p->grad, p->n_train));
}

double lipt_clip_grad_norm(lipt_params *p, double max_norm) {
    double norm = lipt_grad_norm(p);
    if (!isfinite(norm) || max_norm <= 0 || norm <= max_norm) return norm;
    const float scale = (float)(max_norm / (norm + 1e-6));
    float *g = p->grad;
    const long n = (long)p->n_train;
#pragma omp parallel for schedule(static) if (n >= NORM_PAR_MIN)
    for (long i = 0; i < n; i++) g[i] *= scale;
    return norm;
}
