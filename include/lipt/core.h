/* defines: status codes and error messages, checked allocation, fresh files for write-then-rename, the RNG, thread
 * control. */
#ifndef LIPT_CORE_H
#define LIPT_CORE_H

#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#ifdef __cplusplus
extern "C" {
#endif

/* Every fallible library call returns one of these; the message is in a lipt_error. */
typedef enum {
    LIPT_OK = 0,
    LIPT_ERR_ARG,      /* bad argument or value (from a user, a config file or a flag) */
    LIPT_ERR_IO,       /* file missing, unreadable, short write */
    LIPT_ERR_FORMAT,   /* file present but malformed: corrupt, truncated, wrong version */
    LIPT_ERR_NOMEM,    /* allocation failed */
    LIPT_ERR_NUMERIC,  /* NaN/inf, or an iteration that did not converge */
    LIPT_ERR_INTERNAL
} lipt_status;

#define LIPT_ERRMSG_LEN 512
typedef struct {
    lipt_status status;
    char msg[LIPT_ERRMSG_LEN];
} lipt_error;

/* Record an error (printf-style) and return its status, so callers can write
 * `return lipt_fail(err, LIPT_ERR_ARG, "...", ...)`. err may be NULL. */
lipt_status lipt_fail(lipt_error *err, lipt_status st, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
const char *lipt_status_name(lipt_status st);

/* Programming errors (shape mismatch in an op, broken invariant): print and abort.
 * Never used for user input. */
_Noreturn void lipt_die(const char *file, int line, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
#define LIPT_DIE(...) lipt_die(__FILE__, __LINE__, __VA_ARGS__)
#define LIPT_CHECK(cond, ...) do { if (!(cond)) lipt_die(__FILE__, __LINE__, __VA_ARGS__); } while (0)

/* Allocation that aborts with the size and call site on failure (out of memory is not recoverable here). */
void *lipt_xmalloc_at(size_t bytes, const char *file, int line);
void *lipt_xcalloc_at(size_t n, size_t size, const char *file, int line);
void *lipt_xaligned_at(size_t bytes, const char *file, int line); /* 64-byte aligned, free with free() */
#define lipt_xmalloc(b) lipt_xmalloc_at((b), __FILE__, __LINE__)
#define lipt_xcalloc(n, s) lipt_xcalloc_at((n), (s), __FILE__, __LINE__)
#define lipt_xaligned(b) lipt_xaligned_at((b), __FILE__, __LINE__)

/* A file lipt reads but did not just create (a corpus, a config, a checkpoint, a run's metrics.jsonl or run.cfg),
 * for reading ("rb"): opened with O_NONBLOCK, so that a FIFO cannot block the open, then checked with fstat on what
 * was opened (not the name, which could change in between): only a regular file is read. Its size in *size (may be
 * NULL). NULL on failure, with errno (ENOENT when missing) and a message in err naming the path and the reason
 * ("cannot read P: No such file or directory", "P is a FIFO, not a regular file: lipt reads regular files only"). */
FILE *lipt_open_regular(const char *path, uint64_t *size, lipt_error *err);
/* A log lipt appends to (a run's metrics.jsonl): created when missing, never opened through a symlink (O_NOFOLLOW:
 * "P is a symbolic link ..."), regular files only, as above. NULL on failure, errno and err set. */
FILE *lipt_open_append(const char *path, lipt_error *err);

/* An output written whole or not at all (a figure, a table, run.cfg, the rewritten metrics.jsonl): lipt_output_open
 * refuses a path that exists and is not a regular file or a symlink (a device, a FIFO, a folder is never replaced)
 * and creates PATH.tmp fresh (a leftover or a planted symlink of that name is unlinked, then O_CREAT | O_EXCL |
 * O_NOFOLLOW); write to o->f; lipt_output_commit checks the stream, flushes, fsyncs, renames the temporary over PATH
 * (a symlink there is replaced, never followed) and fsyncs the folder; on any failure the temporary is removed and
 * PATH is as it was. lipt_output_discard abandons it. The checkpoints' writer, for text: every file lipt writes whole
 * goes through it. */
typedef struct {
    FILE *f;
    void *state;
} lipt_output;
lipt_status lipt_output_open(lipt_output *o, const char *path, lipt_error *err);
lipt_status lipt_output_commit(lipt_output *o, lipt_error *err);
void lipt_output_discard(lipt_output *o);
/* Moves a file to a new name in its folder without ever replacing what is there (link, then unlink; rename only where
 * the file system has no hard links, after checking the name is free): how a run folder keeps a file aside. LIPT_OK,
 * or the reason in err ("P already exists" when the name is taken). */
lipt_status lipt_move_aside(const char *from, const char *to, lipt_error *err);

/* xoshiro256** generator: small, fast, state fits in a checkpoint. */
typedef struct { uint64_t s[4]; } lipt_rng;
void     lipt_rng_seed(lipt_rng *r, uint64_t seed);
uint64_t lipt_rng_u64(lipt_rng *r);
double   lipt_rng_uniform(lipt_rng *r);           /* [0, 1) */
float    lipt_rng_normal(lipt_rng *r);            /* standard normal */
uint64_t lipt_rng_below(lipt_rng *r, uint64_t n); /* uniform in [0, n) */
void     lipt_rng_fill_normal(lipt_rng *r, float *x, size_t n, float std);
void     lipt_rng_fill_uniform(lipt_rng *r, float *x, size_t n, float lo, float hi);

/* Threads: one knob for OpenMP and OpenBLAS. lipt_threads_init reads LIPT_THREADS and applies it; without it, the
 * default is the usable cores less those other programs keep busy (at least 1), and lipt_threads_adapt (at most
 * every every_s seconds; 1 when it changed the count) follows the load while a long command runs. lipt_set_threads
 * applies an explicit count, which then stays. lipt_threads_describe says which it is, for info and logs. */
int  lipt_threads_init(void);
void lipt_set_threads(int n);
int  lipt_get_threads(void);
int  lipt_threads_adapt(double every_s);
/* On a terminal, once: "other programs keep about X of the N cores busy: using K threads", when the default count
 * (neither LIPT_THREADS nor lipt_set_threads) is below the usable cores. Commands call it after their --threads. */
void lipt_threads_note(void);
void lipt_threads_describe(char *out, size_t n);
int  lipt_threads_default(double *busy); /* 1 when the count is the default; *busy: the CPUs others kept busy */
/* The CPUs this process may run on (its affinity mask), and how many of them other programs keep busy: runnable
 * tasks on the system less this process's own, averaged over 8 readings 1 ms apart; 0 under a cpuset that leaves
 * part of the machine to others (load there cannot be told apart). */
int    lipt_cpus_usable(void);
double lipt_cpus_busy_elsewhere(void);
/* The CPUs of lipt_cpus_usable() shared by `ranks` processes on this machine (MPI ranks started side by side, each
 * with the same mask): their count / ranks, at least 1. */
int    lipt_cpus_per_rank(int ranks);
/* True when a BLAS call made inside our own OpenMP region runs single-threaded
 * (OpenBLAS built for OpenMP), so kernels may parallelise over heads around GEMMs. */
int  lipt_blas_nests_safely(void);

/* Signals. oneDNN 2.6.3's JIT sgemm kernels (the large float32 products) point the stack pointer at a heap workspace
 * while they run, so a signal handled on a thread inside one corrupts the heap. lipt_signals_isolate, called before
 * the program starts any thread (first thing in main), blocks the asynchronous signals in the calling thread, and so
 * in every thread created after it (OpenMP, OpenBLAS, oneDNN, MPI), and starts one thread that receives them all:
 * every handler, lipt's or a preloaded library's, runs there. LIPT_ERR_INTERNAL (signals left as they were) when
 * the thread cannot start. lipt_signals_catch installs handler for sig on an alternate signal stack with the other
 * asynchronous signals blocked while it runs (NULL: the default action); 0, or -1 with errno.
 * lipt_signals_unblock undoes the blocking in the calling thread: a forked child calls it before exec. */
lipt_status lipt_signals_isolate(lipt_error *err);
int  lipt_signals_catch(int sig, void (*handler)(int));
void lipt_signals_unblock(void);
/* Around lipt's re-execution of itself (lipt_blas_coretype_startup): hold blocks the asynchronous signals and records
 * the previous mask in the environment, because execve resets handlers but keeps the mask; lipt_signals_isolate in
 * the new image (or release, when execv failed) restores that mask. hold returns 0, or -1 when nothing was held. */
int  lipt_signals_hold_for_exec(void);
void lipt_signals_release_after_failed_exec(void);

/* The arithmetic of the model's matrix products (the config key `precision`, --precision on train, eval, sample
 * and bench). Only those products change: master weights, optimizer state, softmax, norms, losses, and every
 * bound, certificate, Jacobian and inversion stay float32/float64. */
typedef enum {
    LIPT_PRECISION_FLOAT32 = 0,   /* "float32": OpenBLAS sgemm (the default) */
    LIPT_PRECISION_BF16,          /* "bf16": operands converted to bf16, float32 accumulation and result, through
                                   * oneDNN's matmul (needs a LIPT_DNNL build and a CPU with AVX512_BF16) */
    LIPT_PRECISION_BF16_EMULATED, /* "bf16-emulated": operands rounded to bf16 (nearest even) in float32, then
                                   * sgemm: bf16's numerics on any CPU, to measure their effect; not faster */
    LIPT_PRECISION_COUNT
} lipt_precision;
/* "float32", "bf16", "bf16-emulated" ("?" outside the enum). */
const char *lipt_precision_name(lipt_precision p);
/* LIPT_OK when this build on this CPU can run p; else LIPT_ERR_ARG with what is missing (no oneDNN in the build,
 * no AVX512_BF16 on the CPU) and the alternatives. Cheap after the first call for bf16 (a probe primitive). */
lipt_status lipt_precision_check(lipt_precision p, lipt_error *err);
/* Whether this build has oneDNN (LIPT_DNNL), and whether the CPU (and the OS) support AVX512_BF16 instructions
 * (cpuid leaf 7 subleaf 1, EAX bit 5, with AVX-512 state enabled in XCR0). */
int  lipt_have_dnnl(void);
int  lipt_cpu_has_avx512_bf16(void);

/* The verdict of lipt's GEMM self-test (src/kernels/blas_selftest.c) on one OpenBLAS kernel set on this CPU. */
#define LIPT_BLAS_DETAIL_MAX 192
typedef struct {
    char core[32];                /* the core type tested (as OPENBLAS_CORETYPE spells it); "" when none was */
    int state;                    /* 1 passed, -1 failed (wrong results, a crash, a hang), 0 not tested */
    long long when;               /* when the test ran (Unix time) */
    int cached;                   /* 1: the verdict came from the cache, not from a test run by this command */
    char detail[LIPT_BLAS_DETAIL_MAX]; /* what was tested, or the first failure */
} lipt_blas_verdict;

/* The CPU and the kernels the libraries run on it (src/kernels/cpuinfo.c): for lipt info --system, lipt bench and
 * the start-up check. Features count only when the OS saves their registers (XCR0). */
typedef struct {
    char cpu[64];                 /* the brand string */
    int family, model;            /* cpuid's display family and model */
    int sse3, avx, fma, avx2, avx512f, avx512cd, avx512bw, avx512dq, avx512vl, avx512_vnni, avx512_bf16, avx512_fp16,
        amx_tile, amx_bf16;
    const char *best_core;        /* the best OpenBLAS core type the features allow: "SkylakeX", "Haswell",
                                   * "Sandybridge", or "" */
    int best_class;               /* its class: 3 AVX-512, 2 AVX2, 1 AVX, -1 none of these */
    char blas_core[32];           /* openblas_get_corename(): the kernels OpenBLAS runs */
    char blas_config[192];        /* openblas_get_config() */
    int blas_class;               /* blas_core's class as best_class (0: generic SSE kernels; -1 a name not known) */
    int blas_generic;             /* 1 when OpenBLAS runs kernels of a lower class than the CPU allows */
    int blas_dynamic;             /* 1 for a DYNAMIC_ARCH build (the one that reads OPENBLAS_CORETYPE) */
    const char *blas_threading;   /* "OpenMP", "pthreads", "none" */
    char coretype_env[32];        /* OPENBLAS_CORETYPE as set, or "" */
    const char *coretype_source;  /* who chose the kernels: "OpenBLAS" (its own detection), "user" (OPENBLAS_CORETYPE
                                   * set by hand), "lipt" (lipt_blas_coretype_startup) */
    lipt_blas_verdict selftest;   /* the self-test of best_core, when the start-up check ran one (state 0: none) */
    const char *recommend;        /* best_core when OpenBLAS runs slower kernels and best_core passed the self-test,
                                   * else "": the only kernel set lipt recommends */
    char dnnl_version[16];        /* oneDNN's version, "" in a build without it */
    const char *dnnl_isa;         /* dnnl_get_effective_cpu_isa(): "avx512_core_amx", "avx2", ...; "" without oneDNN */
} lipt_cpuinfo;
void lipt_cpuinfo_get(lipt_cpuinfo *ci);
/* The features that are on, space-separated ("avx avx2 ... amx_bf16"), into out (n bytes). */
void lipt_cpuinfo_features(const lipt_cpuinfo *ci, char *out, size_t n);
/* Runs lipt's GEMM self-test on the kernels `core` in a child process and sets *v (src/io/blas_verdict.c:
 * lipt_blas_verify, cached per CPU, OpenBLAS build and core type). */
typedef void (*lipt_blas_verify_fn)(const lipt_cpuinfo *ci, const char *core, lipt_blas_verdict *v);
/* Call first thing in main, before any thread exists: when OpenBLAS (a DYNAMIC_ARCH build) runs kernels of a lower
 * class than the CPU runs (its generic Prescott ones on a CPU newer than its table, or a user's OPENBLAS_CORETYPE),
 * has verify check the best core type (lipt_cpuinfo.best_core) and leaves the verdict for lipt_cpuinfo_get. When
 * OPENBLAS_CORETYPE is unset and the best core type passed, sets OPENBLAS_CORETYPE to it, says so once on stderr
 * when it is a terminal (scripts keep one-line errors; lipt_cpuinfo.coretype_source says "lipt") and re-executes
 * the program (/proc/self/exe, the same argv): OpenBLAS reads the variable only in its library constructor, before
 * main. When it failed, OpenBLAS's own choice stays. Returns when there is nothing to do, when OPENBLAS_CORETYPE is
 * the user's (never overridden), or when the re-execution fails (with a note). verify NULL: nothing is re-executed.
 * LIPT_TEST_PRETEND_GENERIC=1 makes it take OpenBLAS's choice for "Prescott" and say so on any stderr (a test
 * hook). */
void lipt_blas_coretype_startup(char *const *argv, lipt_blas_verify_fn verify);
/* The self-test in this process, on the kernels OpenBLAS loaded with, on `threads` threads: 1 passed, 0 failed,
 * with what was tested or the first wrong entry in detail (n bytes). LIPT_TEST_BLAS_SELFTEST_FAIL=1 corrupts one
 * result, as a bad kernel would (a test hook only). */
int lipt_blas_selftest(int threads, char *detail, size_t n);
/* The hidden command `lipt --blas-selftest` (the child lipt_blas_verify runs): the self-test on 2 to 4 threads, one
 * line "pass|fail MS ms: DETAIL" on stdout; exit status 0 when it passed. */
#define LIPT_BLAS_SELFTEST_ARG "--blas-selftest"
int lipt_blas_selftest_main(void);
/* lipt_blas_verify_fn: the verdict cached under $XDG_CACHE_HOME/lipt (else ~/.cache/lipt), else from a child
 * `/proc/self/exe --blas-selftest` with OPENBLAS_CORETYPE=core, killed after 15 s; a crash (SIGSEGV, SIGILL) or a
 * hang fails. A cache that cannot be read or written costs a test per call, never an error.
 * LIPT_TEST_BLAS_SELFTEST_FAIL=1 bypasses the cache. */
void lipt_blas_verify(const lipt_cpuinfo *ci, const char *core, lipt_blas_verdict *v);

/* Names a user types (options, config keys, commands, corpora): '_' and '-' are the same character. */
int lipt_name_eq(const char *a, const char *b);
/* The name among names[0..n) closest to word (edit distance with transpositions, case and '_'/'-' folded; at most a
 * third of word's length away), else the first that word (3+ characters) is a prefix of, else NULL: the "did you
 * mean" of a lookup that failed. NULL entries are skipped. */
const char *lipt_nearest_name(const char *word, const char *const *names, int n);

#ifdef __cplusplus
}
#endif
#endif
