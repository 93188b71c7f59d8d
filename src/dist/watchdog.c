/* The collectives' watchdog: a frozen rank (stopped, swapped out, stuck in the kernel) never dies, so MPI never
 * reports it and every other rank would wait in its next collective forever. A thread of its own measures how long the
 * main thread has been inside one collective call and ends the process when that passes the timeout; the launcher
 * (mpirun) then takes the whole job down, as when a rank dies. It fires only while this rank waits in a collective, so
 * this rank is never in the middle of a write; the rank that writes checkpoints (rank 0) may be, and its writes are
 * atomic (a temporary renamed over the old file), so the last complete checkpoint survives. */
#include "watchdog.h"

#include <errno.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

struct lipt_dist_watch {
    pthread_mutex_t mu;
    pthread_cond_t cv;
    pthread_t th;
    int rank, size, stop;
    double timeout;     /* seconds; 0: never fire */
    unsigned long gen;  /* bumped by every begin: tells one collective from the next */
    int in;             /* the main thread is inside a collective call */
    double since;       /* when it entered (monotonic seconds) */
    const char *what;
};

static double mono_s(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

/* How often the thread looks: an eighth of the timeout, between 50 ms and 1 s (a wake a second costs nothing). */
static double tick_for(double timeout) {
    const double t = timeout / 8;
    return t < 0.05 ? 0.05 : t > 1 ? 1 : t;
}

static _Noreturn void fire(const lipt_dist_watch *w, double waited) {
    char msg[768];
    const int n = snprintf(msg, sizeof msg,
                           "lipt: rank %d of %d waited %.1f s in %s and the other ranks did not all join: one is frozen "
                           "(stopped, swapped out, stuck on a file system) or far slower. Stopping the job (timeout "
                           "%g s: --mpi-timeout or LIPT_MPI_TIMEOUT, 0 for none); the checkpoints already written are "
                           "complete (each is written whole, then renamed)\n",
                           w->rank, w->size, waited, w->what ? w->what : "a collective", w->timeout);
    /* one write, so the line is not interleaved with another rank's output; nothing else of the process runs
     * (no atexit handler, no MPI call from this thread: MPI was initialised for the main thread only) */
    if (n > 0) {
        ssize_t r = write(STDERR_FILENO, msg, (size_t)n < sizeof msg ? (size_t)n : sizeof msg - 1);
        (void)r;
    }
    _exit(1);
}

/* Time counts only while the thread itself runs: a gap of more than two ticks (plus a second of slack) between two
 * looks means the whole process was stopped (Ctrl-Z on mpirun stops every rank) or starved, and counts as one tick,
 * so resuming a suspended job does not fire every rank at once. */
static void *watch_thread(void *arg) {
    lipt_dist_watch *w = arg;
    pthread_mutex_lock(&w->mu);
    double last = mono_s(), waited = 0;
    unsigned long seen = 0;
    int counting = 0;
    while (!w->stop) {
        const double tick = tick_for(w->timeout), wake = mono_s() + tick;
        struct timespec ts = {(time_t)wake, (long)((wake - (double)(time_t)wake) * 1e9)};
        pthread_cond_timedwait(&w->cv, &w->mu, &ts); /* early on stop or a new timeout; spurious wakes are harmless */
        const double now = mono_s(), gap = now - last, g = gap > 2 * tick + 1 ? tick : gap;
        last = now;
        if (w->stop || !w->in || w->timeout <= 0) {
            counting = 0;
            continue;
        }
        if (!counting || seen != w->gen) { /* a collective that began since the last look */
            counting = 1;
            seen = w->gen;
            waited = now - w->since < g ? now - w->since : g;
        } else {
            waited += g;
        }
        if (waited >= w->timeout) fire(w, waited);
    }
    pthread_mutex_unlock(&w->mu);
    return NULL;
}

lipt_status lipt_watch_start(lipt_dist_watch **out, int rank, int size, double timeout_s, lipt_error *err) {
    *out = NULL;
    lipt_dist_watch *w = calloc(1, sizeof *w);
    if (!w) return lipt_fail(err, LIPT_ERR_NOMEM, "out of memory for the MPI watchdog");
    w->rank = rank;
    w->size = size;
    w->timeout = timeout_s;
    pthread_condattr_t ca;
    pthread_condattr_init(&ca);
    pthread_condattr_setclock(&ca, CLOCK_MONOTONIC);
    pthread_mutex_init(&w->mu, NULL);
    pthread_cond_init(&w->cv, &ca);
    pthread_condattr_destroy(&ca);
    /* no signal is ever handled here (the signal thread takes them: src/core/signals.c) */
    sigset_t all, old;
    sigfillset(&all);
    pthread_sigmask(SIG_BLOCK, &all, &old);
    pthread_attr_t attr;
    int rc = pthread_attr_init(&attr);
    if (rc == 0) {
        pthread_attr_setstacksize(&attr, (size_t)256 << 10);
        rc = pthread_create(&w->th, &attr, watch_thread, w);
        pthread_attr_destroy(&attr);
    }
    pthread_sigmask(SIG_SETMASK, &old, NULL);
    if (rc != 0) {
        pthread_cond_destroy(&w->cv);
        pthread_mutex_destroy(&w->mu);
        free(w);
        return lipt_fail(err, LIPT_ERR_INTERNAL,
                         "cannot start the MPI watchdog thread: %s (LIPT_MPI_TIMEOUT=0 runs without it)", strerror(rc));
    }
    *out = w;
    return LIPT_OK;
}

void lipt_watch_set_timeout(lipt_dist_watch *w, double timeout_s) {
    if (!w) return;
    pthread_mutex_lock(&w->mu);
    w->timeout = timeout_s;
    pthread_cond_signal(&w->cv);
    pthread_mutex_unlock(&w->mu);
}

void lipt_watch_begin(lipt_dist_watch *w, const char *what) {
    if (!w) return;
    pthread_mutex_lock(&w->mu);
    w->gen++;
    w->in = 1;
    w->since = mono_s();
    w->what = what;
    pthread_mutex_unlock(&w->mu);
}

void lipt_watch_end(lipt_dist_watch *w) {
    if (!w) return;
    pthread_mutex_lock(&w->mu);
    w->in = 0;
    pthread_mutex_unlock(&w->mu);
}

void lipt_watch_stop(lipt_dist_watch **pw) {
    lipt_dist_watch *w = *pw;
    if (!w) return;
    pthread_mutex_lock(&w->mu);
    w->stop = 1;
    pthread_cond_signal(&w->cv);
    pthread_mutex_unlock(&w->mu);
    pthread_join(w->th, NULL);
    pthread_cond_destroy(&w->cv);
    pthread_mutex_destroy(&w->mu);
    free(w);
    *pw = NULL;
}
