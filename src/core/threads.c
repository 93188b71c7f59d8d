/* One thread knob for OpenMP and OpenBLAS. */
#include "lipt/core.h"

#include <omp.h>
#include <stdlib.h>
#include <unistd.h>

#ifdef LIPT_HAVE_OPENBLAS
/* Declared by OpenBLAS's cblas.h; repeated here so this file needs no BLAS header. */
void openblas_set_num_threads(int num_threads);
int openblas_get_parallel(void);
#endif

void lipt_set_threads(int n) {
    if (n < 1) n = 1;
    omp_set_num_threads(n);
    /* No nested teams: an inner parallel region (or an OpenMP BLAS call inside ours) runs on one thread. */
    omp_set_max_active_levels(1);
#ifdef LIPT_HAVE_OPENBLAS
    openblas_set_num_threads(n);
#endif
}

int lipt_get_threads(void) { return omp_get_max_threads(); }

int lipt_threads_init(void) {
    const char *env = getenv("LIPT_THREADS");
    long n = 0;
    if (env && *env) {
        char *end = NULL;
        n = strtol(env, &end, 10);
        if (!end || *end || n < 1 || n > 4096) n = 0; /* ignored: callers validate user flags themselves */
    }
    if (n == 0) n = sysconf(_SC_NPROCESSORS_ONLN);
    if (n < 1) n = 1;
    lipt_set_threads((int)n);
    return (int)n;
}

int lipt_blas_nests_safely(void) {
#ifdef LIPT_HAVE_OPENBLAS
    return openblas_get_parallel() != 1; /* 0 sequential, 1 pthreads, 2 OpenMP */
#else
    return 0;
#endif
}
