/* Where signals are delivered (docs/RELIABILITY.md, "Signals").
 *
 * oneDNN 2.6.3's JIT sgemm kernels (what lipt_gemm runs for products of 4M multiply-adds and more) point the stack
 * pointer at a heap workspace while they run (oneDNN issue 4845, fixed upstream after 2.6.3). A signal handled on a
 * thread inside one of them has its frame written there, which corrupts the heap: SIGTERM during lipt train of a
 * ptb-* model aborted in free() ("corrupted size vs. prev_size") in 2 of 9 runs, a no-op SIGUSR1 handler every 20 ms
 * in 8 of 8. Any handler does it, lipt's or one a preloaded library installed without SA_ONSTACK, and the signal can
 * land on the main thread or on any OpenMP worker.
 *
 * So no thread that computes ever receives an asynchronous signal: lipt_signals_isolate blocks them in the calling
 * thread before any other thread exists (OpenMP, OpenBLAS, oneDNN and MPI threads inherit the mask of the thread that
 * creates them, which is that one or one of its descendants), and starts one thread that does nothing but receive
 * them, on an ordinary stack and with an alternate signal stack besides. The kernel delivers a process-directed signal
 * to a thread that does not block it: that one. Nothing is delayed and nothing is spent per product (compare blocking
 * around each product: two system calls per block, per thread). The synchronous signals (a fault of the thread's own
 * instruction, SIGPIPE and SIGXFSZ of its own write) are left alone: they go to the thread that caused them, and a
 * thread inside oneDNN does not write to files. */
#define _XOPEN_SOURCE 700 /* sigaltstack, SA_ONSTACK */
#include "lipt/core.h"

#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

/* The mask the process was started with, carried across lipt's own re-execution (lipt_signals_hold_for_exec):
 * execve keeps the mask and pending signals but resets every handler, so between the exec and the constructors of
 * the new image (a preloaded library's handler among them) a signal would meet its default action. */
#define EXEC_MASK_VAR "LIPT_EXEC_SIGMASK"
#define MASK_SIGS 64

/* Every signal except those a thread causes itself (faults, abort, SIGPIPE / SIGXFSZ on its write); SIGKILL and
 * SIGSTOP cannot be blocked and are ignored by sigprocmask. */
static void async_set(sigset_t *set) {
    static const int sync_sigs[] = {SIGSEGV, SIGBUS, SIGFPE, SIGILL, SIGTRAP, SIGSYS, SIGABRT, SIGPIPE, SIGXFSZ};
    sigfillset(set);
    for (size_t i = 0; i < sizeof sync_sigs / sizeof sync_sigs[0]; i++) sigdelset(set, sync_sigs[i]);
}

/* 64 KiB: an AVX-512 signal frame is about 3.5 KiB, SIGSTKSZ (8 KiB) was sized before it; a handler's own frames
 * (a third party's may print or unwind) get the rest. */
#define ALT_STACK_BYTES (64 * 1024)
#define THREAD_STACK_BYTES (1024 * 1024)

static void *signal_thread(void *arg) {
    (void)arg;
    /* the alternate stack lives in this frame, which never returns; a handler with SA_ONSTACK runs there */
    char alt[ALT_STACK_BYTES];
    stack_t ss;
    memset(&ss, 0, sizeof ss);
    ss.ss_sp = alt;
    ss.ss_size = sizeof alt;
    sigaltstack(&ss, NULL);
    for (;;) pause(); /* returns after each handler; the default actions (terminate, stop) act on the process */
    return NULL;
}

int lipt_signals_hold_for_exec(void) {
    sigset_t async, old;
    async_set(&async);
    if (sigprocmask(SIG_BLOCK, &async, &old) != 0) return -1;
    char bits[MASK_SIGS + 1];
    for (int s = 1; s <= MASK_SIGS; s++) bits[s - 1] = sigismember(&old, s) == 1 ? '1' : '0';
    bits[MASK_SIGS] = 0;
    if (setenv(EXEC_MASK_VAR, bits, 1) != 0) {
        sigprocmask(SIG_SETMASK, &old, NULL);
        return -1;
    }
    return 0;
}

void lipt_signals_release_after_failed_exec(void) {
    const char *bits = getenv(EXEC_MASK_VAR);
    if (!bits) return;
    sigset_t old;
    sigemptyset(&old);
    for (int s = 1; s <= MASK_SIGS && bits[s - 1]; s++)
        if (bits[s - 1] == '1') sigaddset(&old, s);
    unsetenv(EXEC_MASK_VAR);
    sigprocmask(SIG_SETMASK, &old, NULL);
}

lipt_status lipt_signals_isolate(lipt_error *err) {
    /* re-executed by lipt itself: the signals it held since before the exec get the mask the process was started
     * with back, now that this image's handlers are in place (whatever is pending is delivered here, to them) */
    lipt_signals_release_after_failed_exec();
    /* the thread first: it inherits the mask the process was started with, so it receives exactly what the process
     * received before (a signal its parent blocked stays blocked); a signal in between reaches a thread that does not
     * compute yet */
    pthread_attr_t attr;
    pthread_t th;
    int rc = pthread_attr_init(&attr);
    if (rc == 0) {
        pthread_attr_setstacksize(&attr, THREAD_STACK_BYTES); /* the default (ulimit -s, often 8 MiB) is a waste */
        pthread_attr_setdetachstate(&attr, PTHREAD_CREATE_DETACHED);
        rc = pthread_create(&th, &attr, signal_thread, NULL);
        pthread_attr_destroy(&attr);
    }
    if (rc != 0)
        return lipt_fail(err, LIPT_ERR_INTERNAL, "cannot start the signal thread: %s (a signal during a large matrix "
                         "product may then corrupt memory)", strerror(rc));
    sigset_t async;
    async_set(&async);
    rc = pthread_sigmask(SIG_BLOCK, &async, NULL); /* then every thread this one creates inherits the block */
    if (rc != 0) return lipt_fail(err, LIPT_ERR_INTERNAL, "cannot block signals: %s", strerror(rc));
    return LIPT_OK;
}

int lipt_signals_catch(int sig, void (*handler)(int)) {
    struct sigaction sa;
    memset(&sa, 0, sizeof sa);
    if (handler) {
        sa.sa_handler = handler;
        /* on the alternate stack of the thread that runs it, wherever its stack pointer is; the other asynchronous
         * signals wait until it returns */
        sa.sa_flags = SA_ONSTACK | SA_RESTART;
        async_set(&sa.sa_mask);
    } else {
        sa.sa_handler = SIG_DFL;
        sigemptyset(&sa.sa_mask);
    }
    return sigaction(sig, &sa, NULL);
}

void lipt_signals_unblock(void) {
    sigset_t async;
    async_set(&async);
    pthread_sigmask(SIG_UNBLOCK, &async, NULL);
}
