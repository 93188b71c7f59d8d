/* Data-parallel collectives over MPI; without LIPT_HAVE_MPI every call is the one-rank identity. */
#include "lipt/dist.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "watchdog.h"

#ifdef LIPT_HAVE_MPI
#include <mpi.h>
#endif

#ifdef LIPT_HAVE_MPI
static double now_s(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}
#endif

int lipt_dist_available(void) {
#ifdef LIPT_HAVE_MPI
    return 1;
#else
    return 0;
#endif
}

static int env_int(const char *name) {
    const char *v = getenv(name);
    if (!v || !*v) return 0;
    char *end = NULL;
    long n = strtol(v, &end, 10);
    return (end && !*end && n > 0 && n < 1000000) ? (int)n : 0;
}

int lipt_dist_launcher_size(void) {
    static const char *vars[] = {"OMPI_COMM_WORLD_SIZE", "PMI_SIZE", "PMIX_SIZE", "MPI_LOCALNRANKS"};
    for (size_t i = 0; i < sizeof vars / sizeof vars[0]; i++) {
        int n = env_int(vars[i]);
        if (n) return n;
    }
    /* PMIx launchers (Open MPI 5) set PMIX_RANK but not always a size */
    return getenv("PMIX_RANK") ? 1 : 0;
}

/* Seconds for the watchdog: 0 (none) or 1 to 1e7, the whole text a number. */
static lipt_status parse_timeout(const char *text, const char *name, double *out, lipt_error *err) {
    char *end = NULL;
    const double v = text && *text ? strtod(text, &end) : NAN;
    if (!end || *end || !isfinite(v) || (v != 0 && (v < 1 || v > 1e7)))
        return lipt_fail(err, LIPT_ERR_ARG,
                         "%s expects seconds a rank may wait in a collective before the job stops: 0 (no limit) or "
                         "from 1 to 1e7, got '%s'", name, text ? text : "");
    *out = v;
    return LIPT_OK;
}

lipt_status lipt_dist_set_timeout(lipt_dist *d, const char *text, const char *name, lipt_error *err) {
    double v = 0;
    const lipt_status st = parse_timeout(text, name, &v, err);
    if (st != LIPT_OK) return st;
    d->timeout_s = v;
    if (d->watch) lipt_watch_set_timeout(d->watch, v);
    else if (d->active && d->size > 1 && v > 0) return lipt_watch_start(&d->watch, d->rank, d->size, v, err);
    return LIPT_OK;
}

lipt_status lipt_dist_init(lipt_dist *d, int *argc, char ***argv, lipt_error *err) {
    memset(d, 0, sizeof *d);
    d->size = d->local_size = 1;
    d->timeout_s = LIPT_DIST_TIMEOUT_DEFAULT;
    int launched = lipt_dist_launcher_size();
#ifdef LIPT_HAVE_MPI
    if (!launched) return LIPT_OK; /* a plain run: no MPI at all, so its behaviour is the non-MPI build's */
    const char *env = getenv("LIPT_MPI_TIMEOUT");
    if (env && *env && parse_timeout(env, "LIPT_MPI_TIMEOUT", &d->timeout_s, err) != LIPT_OK) return err->status;
    int ok = 0;
    MPI_Initialized(&ok);
    int provided = 0;
    /* only the main thread calls MPI, outside OpenMP regions */
    if (!ok && MPI_Init_thread(argc, argv, MPI_THREAD_FUNNELED, &provided) != MPI_SUCCESS)
        return lipt_fail(err, LIPT_ERR_IO, "MPI_Init failed (is this process started by mpirun?)");
    d->active = 1;
    MPI_Comm_rank(MPI_COMM_WORLD, &d->rank);
    MPI_Comm_size(MPI_COMM_WORLD, &d->size);
    /* errors come back as codes, so a failure prints lipt's message before the job is taken down */
    MPI_Comm_set_errhandler(MPI_COMM_WORLD, MPI_ERRORS_RETURN);
    if (d->size > 1 && d->timeout_s > 0 && lipt_watch_start(&d->watch, d->rank, d->size, d->timeout_s, err) != LIPT_OK)
        return err->status;
    MPI_Comm node;
    lipt_watch_begin(d->watch, "MPI_Comm_split_type (finding the ranks on this machine)");
    const int split = MPI_Comm_split_type(MPI_COMM_WORLD, MPI_COMM_TYPE_SHARED, d->rank, MPI_INFO_NULL, &node);
    lipt_watch_end(d->watch);
    if (split == MPI_SUCCESS) {
        MPI_Comm_size(node, &d->local_size);
        MPI_Comm_free(&node);
    }
    return LIPT_OK;
#else
    (void)argc;
    (void)argv;
    if (launched > 1)
        return lipt_fail(err, LIPT_ERR_ARG,
                         "started as one of %d ranks, but this lipt was built without MPI: rebuild with libopenmpi-dev "
                         "installed (cmake -DLIPT_MPI=ON) or run one process",
                         launched);
    return LIPT_OK;
#endif
}

void lipt_dist_finalize(lipt_dist *d) {
#ifdef LIPT_HAVE_MPI
    if (d->active) {
        lipt_watch_begin(d->watch, "MPI_Finalize (waiting for the other ranks to finish)");
        MPI_Finalize();
        lipt_watch_end(d->watch);
    }
#endif
    lipt_watch_stop(&d->watch);
    d->active = 0;
}

_Noreturn void lipt_dist_abort(lipt_dist *d, int code) {
#ifdef LIPT_HAVE_MPI
    if (d->active && d->size > 1) MPI_Abort(MPI_COMM_WORLD, code);
    if (d->active) MPI_Finalize();
#endif
    (void)d;
    exit(code);
}

#ifdef LIPT_HAVE_MPI
static lipt_status mpi_fail(lipt_error *err, int rc, const char *what) {
    char msg[MPI_MAX_ERROR_STRING];
    int len = 0;
    if (MPI_Error_string(rc, msg, &len) != MPI_SUCCESS) strcpy(msg, "unknown MPI error");
    return lipt_fail(err, LIPT_ERR_IO, "%s failed: %s (another rank may have died)", what, msg);
}
#endif

lipt_status lipt_dist_mean_f32(lipt_dist *d, float *x, size_t n, size_t bucket_floats, lipt_error *err) {
    if (!d->active || d->size == 1 || n == 0) return LIPT_OK;
#ifdef LIPT_HAVE_MPI
    double t0 = now_s();
    size_t step = bucket_floats ? bucket_floats : n;
    if (step > (size_t)1 << 30) step = (size_t)1 << 30; /* MPI counts are int */
    for (size_t off = 0; off < n; off += step) {
        int cnt = (int)(n - off < step ? n - off : step);
        lipt_watch_begin(d->watch, "MPI_Allreduce of the gradients");
        int rc = MPI_Allreduce(MPI_IN_PLACE, x + off, cnt, MPI_FLOAT, MPI_SUM, MPI_COMM_WORLD);
        lipt_watch_end(d->watch);
        if (rc != MPI_SUCCESS) return mpi_fail(err, rc, "MPI_Allreduce of the gradients");
    }
    d->comm_seconds += now_s() - t0;
    const float inv = 1.0f / (float)d->size;
    const long nl = (long)n;
#pragma omp parallel for schedule(static) if (nl >= 65536)
    for (long i = 0; i < nl; i++) x[i] *= inv;
    return LIPT_OK;
#else
    (void)x;
    (void)bucket_floats;
    (void)err;
    return LIPT_OK;
#endif
}

lipt_status lipt_dist_sum_f64(lipt_dist *d, double *x, int n, lipt_error *err) {
    if (!d->active || d->size == 1 || n <= 0) return LIPT_OK;
#ifdef LIPT_HAVE_MPI
    double t0 = now_s();
    /* the callers: a step's loss and stop flag (every step, before the gradients), an evaluation's totals */
    lipt_watch_begin(d->watch, "MPI_Allreduce of a sum (a step's loss and stop flag, or an evaluation's totals)");
    int rc = MPI_Allreduce(MPI_IN_PLACE, x, n, MPI_DOUBLE, MPI_SUM, MPI_COMM_WORLD);
    lipt_watch_end(d->watch);
    d->comm_seconds += now_s() - t0;
    if (rc != MPI_SUCCESS) return mpi_fail(err, rc, "MPI_Allreduce");
    return LIPT_OK;
#else
    (void)x;
    (void)err;
    return LIPT_OK;
#endif
}

lipt_status lipt_dist_minmax_u64(lipt_dist *d, uint64_t v, uint64_t *vmin, uint64_t *vmax, lipt_error *err) {
    *vmin = *vmax = v;
    if (!d->active || d->size == 1) return LIPT_OK;
#ifdef LIPT_HAVE_MPI
    double t0 = now_s();
    lipt_watch_begin(d->watch, "MPI_Allreduce of the parameter checksum");
    int rc = MPI_Allreduce(&v, vmin, 1, MPI_UINT64_T, MPI_MIN, MPI_COMM_WORLD);
    if (rc == MPI_SUCCESS) rc = MPI_Allreduce(&v, vmax, 1, MPI_UINT64_T, MPI_MAX, MPI_COMM_WORLD);
    lipt_watch_end(d->watch);
    d->comm_seconds += now_s() - t0;
    if (rc != MPI_SUCCESS) return mpi_fail(err, rc, "MPI_Allreduce of the parameter checksum");
    return LIPT_OK;
#else
    (void)err;
    return LIPT_OK;
#endif
}
