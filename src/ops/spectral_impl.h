/* Private: power iteration on many matrices at once, for lipt_model_refresh_norms (src/nn/model.c). */
#ifndef LIPT_OPS_SPECTRAL_IMPL_H
#define LIPT_OPS_SPECTRAL_IMPL_H

/* A row-major [R, C] matrix split into n_blocks column blocks, with its persistent power-iteration vectors
 * u [n_blocks*R] and v [C] (as lipt_spectral_norm takes them). */
typedef struct {
    const float *w;
    int R, C, n_blocks;
    float *u, *v;
} lipt_power_job;

/* `iters` rounds of lipt_spectral_norm's power iteration on every block of every job, leaving u and v exactly as
 * that many lipt_spectral_norm calls would (without computing the norms). The blocks run in parallel, each on one
 * thread; the jobs must not share vectors. */
void lipt_spectral_power_jobs(const lipt_power_job *jobs, int n_jobs, int iters);

#endif
