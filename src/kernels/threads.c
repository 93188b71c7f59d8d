/* One thread knob for OpenMP and OpenBLAS. */
#include "lipt/core.h"

#include <math.h>
#include <omp.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/resource.h>
#include <time.h>
#include <unistd.h>

#ifdef LIPT_HAVE_OPENBLAS
/* Declared by OpenBLAS's cblas.h; repeated here so this file needs no BLAS header. */
void openblas_set_num_threads(int num_threads);
int openblas_get_num_threads(void);
int openblas_get_parallel(void);
#endif

/* Address space and threads. OpenBLAS (OpenMP flavour, 0.3.x) maps a GEMM buffer of BUFFER_SIZE = 128 MiB (x86-64,
 * arm64) for every thread as soon as openblas_set_num_threads raises the count, and another one for every GEMM called
 * at the same time from inside one of our parallel regions (attention over batch x heads). When such an mmap fails
 * (an address-space or data limit: ulimit -v, ulimit -d) its blas_memory_alloc retries forever: a silent hang at
 * 100 % CPU (OpenMathLib/OpenBLAS#5289). So a thread count is lowered, with a note, to what fits such a limit. */
#define BLAS_BUFFER_BYTES (((uint64_t)128 << 20) + ((uint64_t)64 << 10))

/* Per-thread buffers OpenBLAS has mapped: its count at load time, then the most we set (it never unmaps them). */
static int blas_mapped = 0;
/* Set while a default count is applied: lowered without a note, the user asked for nothing. */
static int default_count = 0;
/* The default count follows the load: the usable cores less those busy with other programs, counted at start-up
 * and again by lipt_threads_adapt (the training loop calls it); an explicit count (LIPT_THREADS, --threads) stays. */
static int auto_count = 0;
static double busy_seen = 0;
static struct timespec last_check;

/* A worker thread's stack: OMP_STACKSIZE (or GOMP_STACKSIZE; a number with an optional B, K, M or G suffix, K by
 * default) when set, else the default pthread stack (the soft stack limit, 8 MiB when unlimited); plus a guard page. */
static uint64_t stack_bytes(void) {
    const uint64_t guard = (uint64_t)64 << 10;
    const char *e = getenv("OMP_STACKSIZE");
    if (!e || !*e) e = getenv("GOMP_STACKSIZE");
    if (e && *e) {
        char *end = NULL;
        unsigned long long v = strtoull(e, &end, 10);
        while (end && *end == ' ') end++;
        unsigned shift = 10;
        if (end && (*end == 'B' || *end == 'b')) shift = 0;
        else if (end && (*end == 'M' || *end == 'm')) shift = 20;
        else if (end && (*end == 'G' || *end == 'g')) shift = 30;
        if (v > 0 && v < ((unsigned long long)1 << 40)) return ((uint64_t)v << shift) + guard;
    }
    struct rlimit rs;
    if (getrlimit(RLIMIT_STACK, &rs) == 0 && rs.rlim_cur != RLIM_INFINITY && rs.rlim_cur > 0)
        return (uint64_t)rs.rlim_cur + guard;
    return ((uint64_t)8 << 20) + guard;
}

/* Bytes still free under the address-space limit (ulimit -v) and the data limit (ulimit -d, which covers private
 * mappings since Linux 4.7); UINT64_MAX when neither is set. *which names the tighter one. */
static uint64_t room_left(const char **which) {
    struct rlimit rl[2];
    const int set[2] = {getrlimit(RLIMIT_AS, &rl[0]) == 0 && rl[0].rlim_cur != RLIM_INFINITY,
                        getrlimit(RLIMIT_DATA, &rl[1]) == 0 && rl[1].rlim_cur != RLIM_INFINITY};
    if (!set[0] && !set[1]) return UINT64_MAX;
    long pages[2] = {0, 0}, dummy;
    FILE *f = fopen("/proc/self/statm", "r"); /* size resident shared text lib data(+stack) dirty, in pages */
    if (f) {
        if (fscanf(f, "%ld %ld %ld %ld %ld %ld", &pages[0], &dummy, &dummy, &dummy, &dummy, &pages[1]) != 6)
            pages[0] = pages[1] = 0;
        fclose(f);
    }
    const long pg = sysconf(_SC_PAGESIZE) > 0 ? sysconf(_SC_PAGESIZE) : 4096;
    static const char *const names[2] = {"address-space limit (ulimit -v)", "data limit (ulimit -d)"};
    uint64_t room = UINT64_MAX;
    for (int i = 0; i < 2; i++) {
        if (!set[i]) continue;
        const uint64_t used = (uint64_t)pages[i] * (uint64_t)pg;
        const uint64_t left = (uint64_t)rl[i].rlim_cur > used ? (uint64_t)rl[i].rlim_cur - used : 0;
        if (left < room) {
            room = left;
            *which = names[i];
        }
    }
    return room;
}

/* New address space k threads may need: the per-thread buffers OpenBLAS has not mapped yet, one GEMM buffer per
 * thread for calls made inside our parallel regions, and the stacks. */
static uint64_t need_for(int k, uint64_t stack) {
    uint64_t blas = 0;
#ifdef LIPT_HAVE_OPENBLAS
    blas = BLAS_BUFFER_BYTES;
#endif
    const uint64_t fresh = k > blas_mapped ? (uint64_t)(k - blas_mapped) : 0;
    return fresh * blas + (uint64_t)k * (blas + stack);
}

/* The number of threads to use for a request of n: n, or fewer when what they need would not fit in half of the
 * room an address-space or data limit leaves (the other half is kept for the model, the data and the tape). */
static int threads_that_fit(int n) {
#ifdef LIPT_HAVE_OPENBLAS
    if (blas_mapped == 0) blas_mapped = openblas_get_num_threads();
#endif
    const char *which = "";
    const uint64_t room = room_left(&which);
    if (room == UINT64_MAX) return n;
    const uint64_t stack = stack_bytes();
    if (need_for(n, stack) <= room / 2) return n;
    int fit = 1;
    while (fit < n && need_for(fit + 1, stack) <= room / 2) fit++;
    if (!default_count)
        fprintf(stderr, "lipt: note: %d threads need about %.1f GiB more address space (OpenBLAS maps 128 MiB GEMM "
                "buffers per thread) but the %s leaves %.1f GiB: using %d thread%s (raise the limit or ask for fewer "
                "threads)\n", n, (double)need_for(n, stack) / (double)(1u << 30), which,
                (double)room / (double)(1u << 30), fit, fit == 1 ? "" : "s");
    return fit;
}

static void apply_threads(int n) {
    if (n < 1) n = 1;
    n = threads_that_fit(n);
    if (n > blas_mapped) blas_mapped = n;
    omp_set_num_threads(n);
    /* No nested teams: an inner parallel region (or an OpenMP BLAS call inside ours) runs on one thread. */
    omp_set_max_active_levels(1);
#ifdef LIPT_HAVE_OPENBLAS
    openblas_set_num_threads(n);
#endif
}

void lipt_set_threads(int n) {
    auto_count = 0; /* an explicit count is kept: no adapting to load */
    apply_threads(n);
}

int lipt_get_threads(void) { return omp_get_max_threads(); }

/* The default count: the usable CPUs (affinity mask) less those other programs keep busy, at least 1. A program
 * counts once it was runnable in 3/4 of the readings: a command that happens to run during them (a shell, a
 * compiler's short job) does not take a core from a long run. */
static int default_threads(double *busy) {
    const int n = lipt_cpus_usable();
    *busy = lipt_cpus_busy_elsewhere();
    const int k = n - (int)floor(*busy + 0.25);
    return k < 1 ? 1 : k > n ? n : k;
}

int lipt_threads_init(void) {
    const char *env = getenv("LIPT_THREADS");
    long n = 0;
    if (env && *env) {
        char *end = NULL;
        n = strtol(env, &end, 10);
        if (!end || *end || n < 1 || n > 4096) n = 0; /* ignored: callers validate user flags themselves */
    }
    auto_count = n == 0;
    if (auto_count) {
        n = default_threads(&busy_seen);
        clock_gettime(CLOCK_MONOTONIC, &last_check);
    }
    default_count = 1;
    apply_threads((int)n);
    default_count = 0;
    return lipt_get_threads();
}

void lipt_threads_note(void) {
    static int said = 0;
    const int n = lipt_get_threads();
    /* only about a count lipt chose: after --threads N (or LIPT_THREADS) the user knows it */
    if (said || !auto_count || n >= lipt_cpus_usable() || !isatty(2)) return;
    said = 1;
    fprintf(stderr, "lipt: note: other programs keep about %.1f of the %d cores busy: using %d thread%s (--threads or "
            "LIPT_THREADS to choose)\n", busy_seen, lipt_cpus_usable(), n, n == 1 ? "" : "s");
}

int lipt_threads_adapt(double every_s) {
    if (!auto_count) return 0;
    struct timespec now;
    clock_gettime(CLOCK_MONOTONIC, &now);
    if ((double)(now.tv_sec - last_check.tv_sec) + 1e-9 * (double)(now.tv_nsec - last_check.tv_nsec) < every_s)
        return 0;
    last_check = now;
    const int k = default_threads(&busy_seen);
    if (k == lipt_get_threads()) return 0;
    default_count = 1;
    apply_threads(k);
    default_count = 0;
    return 1;
}

int lipt_threads_default(double *busy) {
    if (busy) *busy = busy_seen;
    return auto_count;
}

void lipt_threads_describe(char *out, size_t n) {
    const int k = lipt_get_threads(), cores = lipt_cpus_usable();
    if (!auto_count) snprintf(out, n, "%d (set by LIPT_THREADS or --threads)", k);
    else if (k < cores)
        snprintf(out, n, "%d (default: %d cores, other programs keep about %.1f busy; LIPT_THREADS or --threads to "
                 "choose)", k, cores, busy_seen < cores ? busy_seen : (double)cores);
    else snprintf(out, n, "%d (default: all %d cores, none busy elsewhere; LIPT_THREADS or --threads to choose)", k,
                  cores);
}

int lipt_blas_nests_safely(void) {
#ifdef LIPT_HAVE_OPENBLAS
    return openblas_get_parallel() != 1; /* 0 sequential, 1 pthreads, 2 OpenMP */
#else
    return 0;
#endif
}
