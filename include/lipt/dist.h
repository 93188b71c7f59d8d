/* defines: lipt_dist, the data-parallel context (MPI when built with it and launched by mpirun; one process otherwise). */
#ifndef LIPT_DIST_H
#define LIPT_DIST_H

#include <stddef.h>
#include <stdint.h>

#include "lipt/core.h"

#ifdef __cplusplus
extern "C" {
#endif

/* rank/size describe the job; active is 1 when MPI was initialised here (size may still be 1). comm_seconds
 * accumulates wall time spent inside collective calls, so callers can report communication per step. */
typedef struct {
    int rank, size;
    int local_size;       /* ranks on this machine (for the default thread count) */
    int active;
    double comm_seconds;
    double timeout_s;     /* a collective waiting this long stops the job (a frozen rank); 0: wait forever */
    struct lipt_dist_watch *watch; /* the thread that enforces it (src/dist/watchdog.c); NULL when none */
} lipt_dist;

/* The collectives' watchdog: LIPT_MPI_TIMEOUT's seconds by default (unset: LIPT_DIST_TIMEOUT_DEFAULT). */
#define LIPT_DIST_TIMEOUT_DEFAULT 600.0

/* 1 when lipt was built with MPI. */
int lipt_dist_available(void);
/* Ranks announced by a launcher's environment (Open MPI, MPICH/Hydra, PMIx, Slurm), 0 when none: lets a
 * binary built without MPI refuse to run K copies that would all train the same directory. */
int lipt_dist_launcher_size(void);

/* Initialises MPI only when a launcher started this process; otherwise (or without MPI) a single rank.
 * Fails when the launcher asks for several ranks and lipt was built without MPI, or LIPT_MPI_TIMEOUT is malformed.
 * With several ranks a watchdog thread (no MPI call, no signal ever handled there) ends this process with a message
 * naming the collective when one call waits timeout_s seconds; the launcher then stops the job, as when a rank dies.
 * Only a rank waiting in a collective stops, never one in the middle of a write. */
lipt_status lipt_dist_init(lipt_dist *d, int *argc, char ***argv, lipt_error *err);
/* The watchdog's timeout from text (seconds: 0 for none, else 1 to 1e7); `name` ("--mpi-timeout") names it in the
 * error. Accepted without MPI too (no effect there). */
lipt_status lipt_dist_set_timeout(lipt_dist *d, const char *text, const char *name, lipt_error *err);
/* MPI_Finalize (watched: it waits for every rank), then the watchdog stops. */
void lipt_dist_finalize(lipt_dist *d);
/* Ends every rank of the job now (MPI_Abort); with one process, exit(code). */
_Noreturn void lipt_dist_abort(lipt_dist *d, int code);

/* In-place mean across ranks (sum, then / size): the gradient of the global batch from each rank's. It goes in
 * buckets of at most bucket_floats (0: one call), so a large gradient is never copied whole and messages stay
 * within what the transport moves efficiently. */
lipt_status lipt_dist_mean_f32(lipt_dist *d, float *x, size_t n, size_t bucket_floats, lipt_error *err);
/* In-place sum across ranks. */
lipt_status lipt_dist_sum_f64(lipt_dist *d, double *x, int n, lipt_error *err);
/* Minimum and maximum of a 64-bit value over ranks (a checksum agrees when min == max). */
lipt_status lipt_dist_minmax_u64(lipt_dist *d, uint64_t v, uint64_t *vmin, uint64_t *vmax, lipt_error *err);

#ifdef __cplusplus
}
#endif
#endif
