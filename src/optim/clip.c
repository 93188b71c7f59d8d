/* Global gradient-norm clipping with torch.nn.utils.clip_grad_norm_ semantics. */
#include "lipt/optim.h"

#include <math.h>

#include "ops/vmath.h"

/* The sum of squares is split into a fixed number of blocks whatever the thread count, and the
 * block partials are added in order, so the norm (and hence a resumed run) is bit-reproducible. */
#define NORM_BLOCKS 256
#define NORM_PAR_MIN 65536

double lipt_grad_norm(const lipt_params *p) {
    LIPT_CHECK(p->finalized, "grad norm: parameters not finalized");
    const size_t n = p->n_train;
    const float *g = p->grad;
    double part[NORM_BLOCKS];
#pragma omp parallel for schedule(static) if (n >= NORM_PAR_MIN)
    for (int b = 0; b < NORM_BLOCKS; b++) {
        size_t lo = n / NORM_BLOCKS * (size_t)b + (n % NORM_BLOCKS < (size_t)b ? n % NORM_BLOCKS : (size_t)b);
        size_t hi = lo + n / NORM_BLOCKS + ((size_t)b < n % NORM_BLOCKS);
        /* four vector accumulators: a single running double sum is one add latency per element (the loop was
         * 0.4 % of a training step) */
        lipt_vdh acc[4] = {{0}};
        size_t i = lo;
        for (; i + 4 * LIPT_VDW <= hi; i += 4 * LIPT_VDW)
            for (int k = 0; k < 4; k++) {
                const lipt_vdh v = lipt_vdh_loadf(g + i + k * LIPT_VDW);
                acc[k] += v * v;
            }
        double s = 0;
        for (; i < hi; i++) s += (double)g[i] * g[i];
        const lipt_vdh t = (acc[0] + acc[1]) + (acc[2] + acc[3]);
        for (int k = 0; k < LIPT_VDW; k++) s += t[k];
        part[b] = s;
    }
    double s = 0;
    for (int b = 0; b < NORM_BLOCKS; b++) s += part[b];
    return sqrt(s);
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
