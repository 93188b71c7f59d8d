/* A third party's signal handler, for tests/signal_test.sh: preloaded with LD_PRELOAD, it installs a SIGUSR1 handler
 * that does nothing, without SA_ONSTACK, the way a profiler, a job scheduler's agent or a debugging library would.
 * lipt cannot change how such a handler runs; it can only make sure the signal is not delivered to a thread whose stack
 * pointer a library has pointed somewhere else (oneDNN 2.6.3's JIT sgemm kernels point it at a heap workspace, so a
 * signal frame pushed there corrupts the heap). A test tool only, never installed. */
#define _POSIX_C_SOURCE 200809L
#include <signal.h>
#include <string.h>

static void lipt_test_usr1_noop(int sig) { (void)sig; }

__attribute__((constructor)) static void lipt_test_usr1_install(void) {
    struct sigaction sa;
    memset(&sa, 0, sizeof sa);
    sa.sa_handler = lipt_test_usr1_noop;
    sa.sa_flags = SA_RESTART; /* no SA_ONSTACK: the frame goes wherever the stack pointer is */
    sigemptyset(&sa.sa_mask);
    sigaction(SIGUSR1, &sa, NULL);
}
