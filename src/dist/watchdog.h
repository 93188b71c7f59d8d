/* defines: the collectives' watchdog of a data-parallel job (internal to src/dist/). */
#ifndef LIPT_DIST_WATCHDOG_H
#define LIPT_DIST_WATCHDOG_H

#include "lipt/core.h"

typedef struct lipt_dist_watch lipt_dist_watch;

/* Starts a thread (every asynchronous signal blocked in it, no MPI call ever) that ends the process with a message
 * when a collective has waited timeout_s seconds; rank and size name this process in the message. */
lipt_status lipt_watch_start(lipt_dist_watch **w, int rank, int size, double timeout_s, lipt_error *err);
void lipt_watch_set_timeout(lipt_dist_watch *w, double timeout_s); /* 0: never fire */
/* Around one collective call: `what` (a string literal) names it in the message. w may be NULL. */
void lipt_watch_begin(lipt_dist_watch *w, const char *what);
void lipt_watch_end(lipt_dist_watch *w);
/* Stops and joins the thread; *w becomes NULL. */
void lipt_watch_stop(lipt_dist_watch **w);

#endif
