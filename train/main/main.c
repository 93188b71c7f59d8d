/* lipt: one binary, subcommands. */
#include <stdio.h>
#include <string.h>

#include "commands.h"
#include "lipt/core.h"
#include "lipt/dist.h"

static void usage(FILE *f) {
    fprintf(f, "usage: lipt <command> [options]   (lipt <command> --help for its options)\n\ncommands:\n");
    for (int i = 0; i < lipt_n_commands; i++) fprintf(f, "  %-11s %s\n", lipt_commands[i].name, lipt_commands[i].summary);
    fprintf(f, "\nlipt help TOPIC: config (model and training keys), files (a run folder), data (corpora), or a command\n");
    fprintf(f, "\nenvironment: LIPT_THREADS (threads for OpenMP and OpenBLAS; --threads overrides), LIPT_DATA (corpus folder),\n"
               "  LIPT_MAX_MODEL_GB (model memory cap, default 32),\n"
               "  LIPT_MAX_CORPUS_GB (cap on a corpus's size, plain or decompressed, default 4),\n"
               "  LIPT_ATTN_TILED (auto: attention without the T x T matrix from seq_len 1024 on; 0 never, 1 always)\n");
    fprintf(f, "exit status: 0 done, 1 failed while running, 2 a usage error (an unknown command, option or key, a bad "
               "value), 128+N stopped by signal N\n");
    fprintf(f, "data parallel: mpirun -np K lipt train ... (%s)\n", lipt_dist_available() ? "this build has MPI" : "this build has no MPI");
    fprintf(f, "bf16: --precision bf16 (%s, %s AVX512_BF16); --precision bf16-emulated: bf16's numerics, any CPU\n",
            lipt_have_dnnl() ? "this build has oneDNN" : "this build has no oneDNN",
            lipt_cpu_has_avx512_bf16() ? "this CPU has" : "this CPU lacks");
}

int main(int argc, char **argv) {
    /* the child the start-up check runs to self-test a kernel set (src/io/blas_verdict.c): nothing else */
    if (argc == 2 && strcmp(argv[1], LIPT_BLAS_SELFTEST_ARG) == 0) return lipt_blas_selftest_main();
    /* first of all (one process, no thread yet, the signal mask as given): OpenBLAS's generic kernels on a CPU with
     * better ones are corrected by re-executing lipt with OPENBLAS_CORETYPE set (read only when OpenBLAS loads), once
     * the better ones passed lipt's self-test on this CPU */
    lipt_blas_coretype_startup(argv, lipt_blas_verify);
    /* before any thread exists: no thread that computes ever runs a signal handler (src/core/signals.c: oneDNN's
     * sgemm kernels move the stack pointer into the heap, where a handler's frame would corrupt it) */
    lipt_error err = {0};
    if (lipt_signals_isolate(&err) != LIPT_OK) fprintf(stderr, "lipt: note: %s\n", err.msg);
    if (argc < 2) {
        usage(stderr);
        return 2;
    }
    if (strcmp(argv[1], "help") == 0 && argc > 2) return help_topic(argv[2]);
    if (strcmp(argv[1], "--help") == 0 || strcmp(argv[1], "-h") == 0 || strcmp(argv[1], "help") == 0) {
        usage(stdout);
        return 0;
    }
    if (strcmp(argv[1], "--version") == 0 || strcmp(argv[1], "version") == 0) {
        printf("lipt %s (git %s)\n", LIPT_VERSION_STR, LIPT_GIT_HASH_STR);
        return 0;
    }
    for (int i = 0; i < lipt_n_commands; i++)
        if (strcmp(argv[1], lipt_commands[i].name) == 0) {
            if (lipt_dist_launcher_size() > 1 && strcmp(argv[1], "train") != 0) {
                /* K copies of a one-process command would race on the same outputs */
                fprintf(stderr, "lipt %s: started as one of %d ranks by an MPI launcher; only lipt train runs on several "
                        "ranks (run it without mpirun)\n", argv[1], lipt_dist_launcher_size());
                return 2;
            }
            lipt_threads_init();
            return lipt_commands[i].run(argc - 2, argv + 2);
        }
    const char *names[64];
    int n = 0;
    for (int i = 0; i < lipt_n_commands && n < 64; i++) names[n++] = lipt_commands[i].name;
    const char *near = lipt_nearest_name(argv[1], names, n);
    if (near) fprintf(stderr, "lipt: unknown command '%s'; did you mean 'lipt %s'? (lipt --help lists them)\n", argv[1], near);
    else fprintf(stderr, "lipt: unknown command '%s' (lipt --help lists them)\n", argv[1]);
    return 2;
}
