/* lipt_blas_verify: the verdict of lipt's GEMM self-test on an OpenBLAS kernel set, from a cache so that it costs once
 * per machine, else from a child process: OPENBLAS_CORETYPE takes effect only when OpenBLAS loads, and a bad kernel
 * may crash (SIGSEGV, SIGILL) or hang, which the child survives for us.
 *
 * The cache: one small text file per key under $XDG_CACHE_HOME/lipt (else ~/.cache/lipt), named by a hash of the key
 * and holding the key itself, written whole (src/io/atomic_file.c). The key is what the verdict depends on: the CPU
 * (brand, family, model, features), OpenBLAS's build (its config string, which names its version, without the core
 * it runs now), the core type tested and the self-test's own version. A cache that cannot be read or written is not
 * an error: the test then runs again next time. */
#include "io/atomic_file.h"

#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <spawn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

extern char **environ;

/* Bumped whenever the self-test's cases change, so that an old verdict is not trusted for the new test. */
#define SELFTEST_VERSION 1
#define TIMEOUT_MS 15000
#define PLANT_VAR "LIPT_TEST_BLAS_SELFTEST_FAIL"

/* The key: lines of text; the OpenBLAS config without the core type it runs now (which depends on the caller). */
static void make_key(const lipt_cpuinfo *ci, const char *core, char *key, size_t n) {
    char feat[256], cfg[sizeof ci->blas_config];
    lipt_cpuinfo_features(ci, feat, sizeof feat);
    snprintf(cfg, sizeof cfg, "%s", ci->blas_config);
    char *at = ci->blas_core[0] ? strstr(cfg, ci->blas_core) : NULL;
    if (at) memmove(at, at + strlen(ci->blas_core), strlen(at + strlen(ci->blas_core)) + 1);
    snprintf(key, n, "lipt blas self-test %d\ncpu %s, family %d, model %d: %s\nopenblas %s\ncore %s\n",
             SELFTEST_VERSION, ci->cpu, ci->family, ci->model, feat, cfg, core);
}

/* $XDG_CACHE_HOME/lipt/blas-selftest-HASH (created as needed), or 0 when there is no such folder to be had. */
static int cache_path(const char *key, char *path, size_t n) {
    const char *xdg = getenv("XDG_CACHE_HOME"), *home = getenv("HOME");
    char dir[4096];
    if (xdg && xdg[0] == '/') snprintf(dir, sizeof dir, "%s", xdg);
    else if (home && home[0] == '/') snprintf(dir, sizeof dir, "%s/.cache", home);
    else return 0;
    (void)mkdir(dir, 0700); /* the cache folder itself may not exist yet */
    const size_t len = strlen(dir);
    if (len + 5 >= sizeof dir) return 0;
    snprintf(dir + len, sizeof dir - len, "/lipt");
    if (mkdir(dir, 0700) != 0 && errno != EEXIST) return 0;
    unsigned long long h = 14695981039346656037ULL; /* FNV-1a */
    for (const char *p = key; *p; p++) h = (h ^ (unsigned char)*p) * 1099511628211ULL;
    return snprintf(path, n, "%s/blas-selftest-%016llx", dir, h) < (int)n;
}

/* The verdict stored for key at path: 1 when there is a complete one. */
static int cache_read(const char *path, const char *key, lipt_blas_verdict *v) {
    FILE *f = fopen(path, "r");
    if (!f) return 0;
    char buf[2048];
    const size_t got = fread(buf, 1, sizeof buf - 1, f);
    fclose(f);
    buf[got] = 0;
    const size_t kn = strlen(key);
    if (strncmp(buf, key, kn) != 0) return 0; /* another key with the same hash, or a torn file */
    char state[8] = "";
    long long when = 0;
    int used = 0;
    if (sscanf(buf + kn, "verdict %7s %lld\ndetail %n", state, &when, &used) != 2 || used == 0) return 0;
    const char *detail = buf + kn + used, *end = strstr(detail, "\nend\n");
    if (!end || (strcmp(state, "pass") != 0 && strcmp(state, "fail") != 0)) return 0;
    v->state = state[0] == 'p' ? 1 : -1;
    v->when = when;
    v->cached = 1;
    snprintf(v->detail, sizeof v->detail, "%.*s", (int)(end - detail), detail);
    return 1;
}

static void cache_write(const char *path, const char *key, const lipt_blas_verdict *v) {
    char buf[2048];
    const int n = snprintf(buf, sizeof buf, "%sverdict %s %lld\ndetail %s\nend\n", key, v->state > 0 ? "pass" : "fail",
                           v->when, v->detail);
    if (n <= 0 || n >= (int)sizeof buf) return;
    lipt_afile af;
    if (lipt_afile_open(&af, path, 0, NULL) != LIPT_OK) return; /* no cache here: the test runs again next time */
    if (lipt_afile_write(&af, buf, (size_t)n) != LIPT_OK || lipt_afile_commit(&af) != LIPT_OK) lipt_afile_discard(&af);
}

/* The environment of the child: this one's without lipt's start-up variables and OpenBLAS's core type, plus
 * OPENBLAS_CORETYPE=core. NULL when out of memory. */
static char **child_env(const char *core, char *coretype, size_t n) {
    size_t k = 0;
    while (environ && environ[k]) k++;
    char **env = malloc((k + 2) * sizeof *env);
    if (!env) return NULL;
    size_t j = 0;
    for (size_t i = 0; i < k; i++)
        if (strncmp(environ[i], "OPENBLAS_CORETYPE=", 18) != 0 && strncmp(environ[i], "LIPT_OPENBLAS_", 14) != 0)
            env[j++] = environ[i];
    snprintf(coretype, n, "OPENBLAS_CORETYPE=%s", core);
    env[j++] = coretype;
    env[j] = NULL;
    return env;
}

static long long now_ms(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (long long)t.tv_sec * 1000 + t.tv_nsec / 1000000;
}

/* Reads the child's line from fd until EOF or the deadline: 0 when the deadline passed first. */
static int read_line(int fd, char *out, size_t n, long long deadline) {
    size_t got = 0;
    for (;;) {
        const long long left = deadline - now_ms();
        if (left <= 0) return 0;
        struct pollfd p = {fd, POLLIN, 0};
        const int r = poll(&p, 1, (int)left);
        if (r < 0 && errno == EINTR) continue;
        if (r <= 0) return r == 0 ? 0 : 1;
        char buf[256];
        const ssize_t k = read(fd, buf, sizeof buf);
        if (k < 0 && errno == EINTR) continue;
        if (k <= 0) return 1;
        for (ssize_t i = 0; i < k && got + 1 < n; i++) out[got++] = buf[i];
        out[got] = 0;
    }
}

/* The child's exit, or SIGKILL once the deadline has passed: its wait status, -1 when it could not be waited for. */
static int reap(pid_t pid, long long deadline, int *timed_out) {
    int st = 0;
    for (;;) {
        const pid_t r = waitpid(pid, &st, WNOHANG);
        if (r == pid) return st;
        if (r < 0 && errno != EINTR) return -1;
        if (now_ms() >= deadline) break;
        nanosleep(&(struct timespec){0, 5000000}, NULL);
    }
    *timed_out = 1;
    kill(pid, SIGKILL);
    while (waitpid(pid, &st, 0) < 0)
        if (errno != EINTR) return -1;
    return st;
}

/* Starts /proc/self/exe --blas-selftest with OPENBLAS_CORETYPE=core, its stdout into a pipe (*fd), its stderr to
 * /dev/null. The pid, or -1 with why in v->detail. */
static pid_t spawn_child(const char *core, int *fd, lipt_blas_verdict *v) {
    int p[2];
    char coretype[64];
    if (pipe(p) != 0) {
        snprintf(v->detail, sizeof v->detail, "could not run the self-test: pipe: %s", strerror(errno));
        return -1;
    }
    (void)fcntl(p[0], F_SETFD, FD_CLOEXEC);
    (void)fcntl(p[1], F_SETFD, FD_CLOEXEC);
    char **env = child_env(core, coretype, sizeof coretype);
    char *argv[] = {"lipt", LIPT_BLAS_SELFTEST_ARG, NULL};
    posix_spawn_file_actions_t fa;
    posix_spawnattr_t at;
    sigset_t none;
    sigemptyset(&none);
    posix_spawn_file_actions_init(&fa);
    posix_spawn_file_actions_adddup2(&fa, p[1], STDOUT_FILENO);
    posix_spawn_file_actions_addopen(&fa, STDERR_FILENO, "/dev/null", O_WRONLY, 0);
    posix_spawnattr_init(&at);
    posix_spawnattr_setsigmask(&at, &none);
    posix_spawnattr_setflags(&at, POSIX_SPAWN_SETSIGMASK);
    pid_t pid = -1;
    const int e = env ? posix_spawn(&pid, "/proc/self/exe", &fa, &at, argv, env) : ENOMEM;
    posix_spawn_file_actions_destroy(&fa);
    posix_spawnattr_destroy(&at);
    free(env);
    close(p[1]);
    if (e != 0) {
        close(p[0]);
        snprintf(v->detail, sizeof v->detail, "could not run the self-test: %s", strerror(e));
        return -1;
    }
    *fd = p[0];
    return pid;
}

/* Runs the child and sets v->state and v->detail. 1 when the outcome is a verdict on the kernels (to be cached), 0
 * when the test could not run at all. */
static int run_child(const char *core, lipt_blas_verdict *v) {
    int fd = -1, timed_out = 0;
    const pid_t pid = spawn_child(core, &fd, v);
    v->state = -1;
    if (pid < 0) return 0;
    const long long deadline = now_ms() + TIMEOUT_MS;
    char line[LIPT_BLAS_DETAIL_MAX + 32] = "";
    (void)read_line(fd, line, sizeof line, deadline);
    close(fd);
    const int st = reap(pid, deadline, &timed_out);
    line[strcspn(line, "\n")] = 0;
    const char *what = strstr(line, " ms: "); /* "pass|fail MS ms: DETAIL": the detail */
    what = what ? what + 5 : line;
    if (st == -1) {
        snprintf(v->detail, sizeof v->detail, "could not wait for the self-test: %s", strerror(errno));
        return 0;
    }
    if (timed_out) snprintf(v->detail, sizeof v->detail, "the self-test hung (killed after %d s)", TIMEOUT_MS / 1000);
    else if (WIFSIGNALED(st))
        snprintf(v->detail, sizeof v->detail, "the self-test crashed: signal %d (%s)", WTERMSIG(st),
                 strsignal(WTERMSIG(st)));
    else if (WIFEXITED(st) && WEXITSTATUS(st) == 0 && strncmp(line, "pass ", 5) == 0) {
        v->state = 1;
        snprintf(v->detail, sizeof v->detail, "%.*s", (int)sizeof v->detail - 1, what);
    } else if (strncmp(line, "fail ", 5) == 0)
        snprintf(v->detail, sizeof v->detail, "wrong result: %.*s", (int)sizeof v->detail - 15, what);
    else snprintf(v->detail, sizeof v->detail, "the self-test exited with status %d", WIFEXITED(st) ? WEXITSTATUS(st) : -1);
    return 1;
}

void lipt_blas_verify(const lipt_cpuinfo *ci, const char *core, lipt_blas_verdict *v) {
    memset(v, 0, sizeof *v);
    snprintf(v->core, sizeof v->core, "%s", core ? core : "");
    if (!core || !*core) return;
    const char *plant = getenv(PLANT_VAR);
    const int planted = plant && *plant; /* a planted failure is never cached, nor read from it */
    char key[1024], path[4200];
    make_key(ci, core, key, sizeof key);
    const int cache = !planted && cache_path(key, path, sizeof path);
    if (cache && cache_read(path, key, v)) return;
    v->when = (long long)time(NULL);
    if (run_child(core, v) && cache) cache_write(path, key, v);
}
