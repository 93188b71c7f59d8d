/* Fault injection for tests/fault_test.sh: an LD_PRELOAD shim that makes writes, fsync and rename fail like a full or
 * failing disk, on chosen files only.
 *
 *   LIPT_FAULT=SPEC[,SPEC...]   SPEC = OP:ERRNO[:after=N]
 *     write:ENOSPC:after=N   the first N bytes written to matching files succeed (a write that crosses N is cut short
 *                            at N, as the kernel does), every later write fails with the error: the disk stays full
 *     fsync:EIO:after=N      the first N fsync/fdatasync calls on matching files succeed, the later ones fail
 *     rename:EIO:after=N     the same for rename() when either name matches
 *     ERRNO: ENOSPC, EIO, EDQUOT, EFBIG, EROFS, EACCES, EPERM or a number; after defaults to 0 (fail at once)
 *   LIPT_FAULT_PATH=SUBSTRING  only files whose path contains SUBSTRING (default: every regular file); descriptors
 *                              0, 1 and 2 are never touched, so stdout and stderr keep working
 *   LIPT_FAULT_LOG=FILE        one line appended per injected failure (so a test can tell the fault fired), and at
 *                              exit one line "pid P: counted B bytes, F fsync, R rename" of the matching traffic (a
 *                              dry run with a large after= measures what a command writes), and with rename armed
 *                              one line "pid P: renamed PATH at B bytes" per rename it lets through
 *
 * Writes are counted and failed both at the system call (write, pwrite) and at the stdio calls a program makes
 * (fwrite, fputs, fputc, putc, fprintf, vfprintf): glibc's stdio calls its internal write directly, which an
 * LD_PRELOAD shim cannot interpose, so a stream's bytes are counted when the program hands them to stdio. A stream
 * whose write failed stays failed (fwrite, fflush and fclose report the error, and ferror() is set), as a real stream
 * does after its buffer could not be written. Byte and call counts are per process. */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <errno.h>
#include <fcntl.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/types.h>
#include <sys/uio.h>
#include <unistd.h>

enum { OP_WRITE, OP_FSYNC, OP_RENAME, N_OPS };
static const char *const op_names[N_OPS] = {"write", "fsync", "rename"};

typedef struct {
    int on;
    int err;
    unsigned long long after; /* bytes (write) or calls (fsync, rename) that succeed first */
    unsigned long long used;
} fault;

static fault faults[N_OPS];
static const char *path_sub;
static const char *log_path;
static int initialised;

static ssize_t (*real_write)(int, const void *, size_t);
static ssize_t (*real_pwrite)(int, const void *, size_t, off_t);
static int (*real_fsync)(int);
static int (*real_fdatasync)(int);
static int (*real_rename)(const char *, const char *);
static size_t (*real_fwrite)(const void *, size_t, size_t, FILE *);
static int (*real_fflush)(FILE *);
static int (*real_fclose)(FILE *);
static int (*real_fputs)(const char *, FILE *);
static int (*real_fputc)(int, FILE *);
static int (*real_vfprintf)(FILE *, const char *, va_list);

static void *next_sym(const char *name) { return dlsym(RTLD_NEXT, name); }

static int parse_errno(const char *s, size_t n) {
    static const struct {
        const char *name;
        int e;
    } names[] = {{"ENOSPC", ENOSPC}, {"EIO", EIO},       {"EDQUOT", EDQUOT}, {"EFBIG", EFBIG},
                 {"EROFS", EROFS},   {"EACCES", EACCES}, {"EPERM", EPERM}};
    for (size_t i = 0; i < sizeof names / sizeof names[0]; i++)
        if (strlen(names[i].name) == n && strncmp(s, names[i].name, n) == 0) return names[i].e;
    char *end;
    long v = strtol(s, &end, 10);
    return end == s + n && v > 0 ? (int)v : 0;
}

static void bad_spec(const char *spec) {
    static const char msg[] = "fault_shim: cannot parse LIPT_FAULT (OP:ERRNO[:after=N],... with OP write|fsync|rename)\n";
    (void)spec;
    if (real_write) (void)real_write(2, msg, sizeof msg - 1);
    _exit(99);
}

static void init(void) {
    if (initialised) return;
    initialised = 1;
    real_write = (ssize_t (*)(int, const void *, size_t))next_sym("write");
    real_pwrite = (ssize_t (*)(int, const void *, size_t, off_t))next_sym("pwrite");
    real_fsync = (int (*)(int))next_sym("fsync");
    real_fdatasync = (int (*)(int))next_sym("fdatasync");
    real_rename = (int (*)(const char *, const char *))next_sym("rename");
    real_fwrite = (size_t (*)(const void *, size_t, size_t, FILE *))next_sym("fwrite");
    real_fflush = (int (*)(FILE *))next_sym("fflush");
    real_fclose = (int (*)(FILE *))next_sym("fclose");
    real_fputs = (int (*)(const char *, FILE *))next_sym("fputs");
    real_fputc = (int (*)(int, FILE *))next_sym("fputc");
    real_vfprintf = (int (*)(FILE *, const char *, va_list))next_sym("vfprintf");
    const char *p = getenv("LIPT_FAULT_PATH");
    path_sub = p && *p ? p : NULL;
    p = getenv("LIPT_FAULT_LOG");
    log_path = p && *p ? p : NULL;
    const char *spec = getenv("LIPT_FAULT");
    if (!spec || !*spec) return;
    for (const char *s = spec; *s;) {
        const char *end = strchr(s, ',');
        if (!end) end = s + strlen(s);
        const char *c1 = memchr(s, ':', (size_t)(end - s));
        if (!c1) bad_spec(spec);
        int op = -1;
        for (int i = 0; i < N_OPS; i++)
            if (strlen(op_names[i]) == (size_t)(c1 - s) && strncmp(s, op_names[i], (size_t)(c1 - s)) == 0) op = i;
        if (op < 0) bad_spec(spec);
        const char *e = c1 + 1, *c2 = memchr(e, ':', (size_t)(end - e));
        const char *e_end = c2 ? c2 : end;
        fault *f = &faults[op];
        f->err = parse_errno(e, (size_t)(e_end - e));
        if (!f->err) bad_spec(spec);
        if (c2) {
            if (strncmp(c2 + 1, "after=", 6) != 0) bad_spec(spec);
            char *num_end;
            f->after = strtoull(c2 + 7, &num_end, 10);
            if (num_end != end || num_end == c2 + 7) bad_spec(spec);
        }
        f->on = 1;
        s = *end ? end + 1 : end;
    }
}

static int name_matches(const char *path) { return !path_sub || (path && strstr(path, path_sub) != NULL); }

/* Does descriptor fd name a file the faults apply to? Its path is read back from /proc/self/fd. */
static int fd_matches(int fd) {
    if (fd <= 2) return 0;
    struct stat sb;
    if (fstat(fd, &sb) != 0 || !S_ISREG(sb.st_mode)) return 0;
    if (!path_sub) return 1;
    char link[64], path[4096];
    snprintf(link, sizeof link, "/proc/self/fd/%d", fd);
    ssize_t n = readlink(link, path, sizeof path - 1);
    if (n <= 0) return 0;
    path[n] = 0;
    return strstr(path, path_sub) != NULL;
}

static void log_fault(int op, const char *detail) {
    if (!log_path) return;
    int fd = open(log_path, O_WRONLY | O_APPEND | O_CREAT | O_CLOEXEC, 0644);
    if (fd < 0) return;
    char line[4400];
    int n = snprintf(line, sizeof line, "pid %ld: %s failed (%s) on %s after %llu %s\n", (long)getpid(), op_names[op],
                     strerror(faults[op].err), detail ? detail : "?", faults[op].used, op == OP_WRITE ? "bytes" : "calls");
    if (n > 0) (void)real_write(fd, line, (size_t)n < sizeof line ? (size_t)n : sizeof line - 1);
    close(fd);
}

static void fd_path(int fd, char *buf, size_t n) {
    char link[64];
    snprintf(link, sizeof link, "/proc/self/fd/%d", fd);
    ssize_t k = readlink(link, buf, n - 1);
    buf[k > 0 ? k : 0] = 0;
}

/* How many of n bytes may still be written (n: all of them); 0 with the fault armed: fail. */
static size_t write_budget(size_t n) {
    fault *f = &faults[OP_WRITE];
    if (f->used >= f->after) return 0;
    unsigned long long left = f->after - f->used;
    return n < left ? n : (size_t)left;
}

/* ---- system calls */

ssize_t write(int fd, const void *buf, size_t n) {
    init();
    if (!faults[OP_WRITE].on || n == 0 || !fd_matches(fd)) return real_write(fd, buf, n);
    size_t k = write_budget(n);
    if (k == 0) {
        char p[4096];
        fd_path(fd, p, sizeof p);
        log_fault(OP_WRITE, p);
        errno = faults[OP_WRITE].err;
        return -1;
    }
    ssize_t r = real_write(fd, buf, k); /* short write at the limit, as the kernel returns; the next one fails */
    if (r > 0) faults[OP_WRITE].used += (unsigned long long)r;
    return r;
}

ssize_t pwrite(int fd, const void *buf, size_t n, off_t off) {
    init();
    if (!faults[OP_WRITE].on || n == 0 || !fd_matches(fd)) return real_pwrite(fd, buf, n, off);
    size_t k = write_budget(n);
    if (k == 0) {
        char p[4096];
        fd_path(fd, p, sizeof p);
        log_fault(OP_WRITE, p);
        errno = faults[OP_WRITE].err;
        return -1;
    }
    ssize_t r = real_pwrite(fd, buf, k, off);
    if (r > 0) faults[OP_WRITE].used += (unsigned long long)r;
    return r;
}

static int sync_common(int fd, int (*real)(int)) {
    if (!faults[OP_FSYNC].on || !fd_matches(fd)) return real(fd);
    fault *f = &faults[OP_FSYNC];
    if (f->used < f->after) {
        f->used++;
        return real(fd);
    }
    char p[4096];
    fd_path(fd, p, sizeof p);
    log_fault(OP_FSYNC, p);
    errno = f->err;
    return -1;
}

int fsync(int fd) {
    init();
    return sync_common(fd, real_fsync);
}

int fdatasync(int fd) {
    init();
    return sync_common(fd, real_fdatasync);
}

int rename(const char *from, const char *to) {
    init();
    if (!faults[OP_RENAME].on || !(name_matches(from) || name_matches(to))) return real_rename(from, to);
    fault *f = &faults[OP_RENAME];
    if (f->used < f->after) {
        f->used++;
        int r = real_rename(from, to);
        if (log_path) { /* where one file ends in the byte count, for a dry run */
            int fd = open(log_path, O_WRONLY | O_APPEND | O_CREAT | O_CLOEXEC, 0644);
            char line[4400];
            int n = snprintf(line, sizeof line, "pid %ld: renamed %s at %llu bytes\n", (long)getpid(), to,
                             faults[OP_WRITE].used);
            if (fd >= 0 && n > 0) (void)real_write(fd, line, (size_t)n < sizeof line ? (size_t)n : sizeof line - 1);
            if (fd >= 0) close(fd);
        }
        return r;
    }
    log_fault(OP_RENAME, to);
    errno = f->err;
    return -1;
}

/* ---- stdio: streams on matching files */

#define MAX_FAILED 64
static FILE *failed[MAX_FAILED];

static int stream_failed(FILE *s) {
    for (int i = 0; i < MAX_FAILED; i++)
        if (s && failed[i] == s) return 1;
    return 0;
}

static void mark_failed(FILE *s) {
    if (stream_failed(s)) return;
    for (int i = 0; i < MAX_FAILED; i++)
        if (!failed[i]) {
            failed[i] = s;
            break;
        }
#ifdef __GLIBC__
    s->_flags |= 0x20; /* _IO_ERR_SEEN: ferror() reports it, as after a real failed write */
#endif
}

static void unmark(FILE *s) {
    for (int i = 0; i < MAX_FAILED; i++)
        if (failed[i] == s) failed[i] = NULL;
}

static int stream_matches(FILE *s) { return s && faults[OP_WRITE].on && fd_matches(fileno(s)); }

/* Hand n bytes to the stream within the write budget. The number of bytes accepted; fewer than n: errno set. */
static size_t stream_write(FILE *s, const void *buf, size_t n) {
    if (stream_failed(s)) {
        errno = faults[OP_WRITE].err;
        return 0;
    }
    size_t k = write_budget(n);
    size_t got = k ? real_fwrite(buf, 1, k, s) : 0;
    faults[OP_WRITE].used += got;
    if (got == n) return n;
    if (got == k) { /* the budget, not the real stream, cut it short */
        char p[4096];
        fd_path(fileno(s), p, sizeof p);
        log_fault(OP_WRITE, p);
        mark_failed(s);
        errno = faults[OP_WRITE].err;
    }
    return got;
}

size_t fwrite(const void *buf, size_t size, size_t nmemb, FILE *s) {
    init();
    if (!stream_matches(s) || size == 0 || nmemb == 0) return real_fwrite(buf, size, nmemb, s);
    if (nmemb > (size_t)-1 / size) return real_fwrite(buf, size, nmemb, s);
    return stream_write(s, buf, size * nmemb) / size;
}

int fputs(const char *str, FILE *s) {
    init();
    if (!stream_matches(s)) return real_fputs(str, s);
    size_t n = strlen(str);
    return stream_write(s, str, n) == n ? 1 : EOF;
}

int fputc(int c, FILE *s) {
    init();
    if (!stream_matches(s)) return real_fputc(c, s);
    unsigned char ch = (unsigned char)c;
    return stream_write(s, &ch, 1) == 1 ? ch : EOF;
}

int putc(int c, FILE *s) { return fputc(c, s); }

int vfprintf(FILE *s, const char *fmt, va_list ap) {
    init();
    if (!stream_matches(s)) return real_vfprintf(s, fmt, ap);
    char small[1024], *buf = small;
    va_list aq;
    va_copy(aq, ap);
    int n = vsnprintf(small, sizeof small, fmt, aq);
    va_end(aq);
    if (n < 0) return n;
    if ((size_t)n >= sizeof small) {
        buf = malloc((size_t)n + 1);
        if (!buf) {
            errno = ENOMEM;
            return -1;
        }
        vsnprintf(buf, (size_t)n + 1, fmt, ap);
    }
    size_t got = stream_write(s, buf, (size_t)n);
    if (buf != small) free(buf);
    return got == (size_t)n ? n : -1;
}

int fprintf(FILE *s, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    int r = vfprintf(s, fmt, ap);
    va_end(ap);
    return r;
}

int fflush(FILE *s) {
    init();
    if (s && stream_failed(s)) {
        errno = faults[OP_WRITE].err;
        return EOF;
    }
    return real_fflush(s);
}

int fclose(FILE *s) {
    init();
    const int was_failed = stream_failed(s);
    unmark(s);
    int r = real_fclose(s);
    if (was_failed) {
        errno = faults[OP_WRITE].err;
        return EOF;
    }
    return r;
}

/* The matching traffic of this process, for a dry run (LIPT_FAULT_LOG). */
__attribute__((destructor)) static void report_counts(void) {
    if (!log_path || !initialised) return;
    int fd = open(log_path, O_WRONLY | O_APPEND | O_CREAT | O_CLOEXEC, 0644);
    if (fd < 0) return;
    char line[256];
    int n = snprintf(line, sizeof line, "pid %ld: counted %llu bytes, %llu fsync, %llu rename\n", (long)getpid(),
                     faults[OP_WRITE].used, faults[OP_FSYNC].used, faults[OP_RENAME].used);
    if (n > 0) (void)real_write(fd, line, (size_t)n);
    close(fd);
}
