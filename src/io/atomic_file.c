/* Atomic file replacement (write PATH.tmp, fsync, rename, fsync the directory) and a CRC-32 helper. */
#include "io/atomic_file.h"

#include <errno.h>
#include <fcntl.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/types.h>
#include <unistd.h>
#include <zlib.h>

uint32_t lipt_crc32(uint32_t crc, const void *buf, size_t n) {
    const unsigned char *p = buf;
    uLong c = crc;
    while (n > 0) { /* crc32 takes a uInt length */
        uInt k = n > (1u << 30) ? (1u << 30) : (uInt)n;
        c = crc32(c, p, k);
        p += k;
        n -= k;
    }
    return (uint32_t)c;
}

/* A new file at path for writing: whatever held the name (a leftover, or a planted symlink, never followed; not a
 * folder) is removed first, then the file is created with O_EXCL | O_NOFOLLOW, so nothing that appears there in
 * between is written through. NULL on failure, errno set. The temporary of every file lipt writes whole. */
static FILE *create_fresh(const char *path, const char *mode) {
    struct stat sb;
    if (lstat(path, &sb) == 0 && !S_ISDIR(sb.st_mode)) (void)unlink(path);
    const int fd = open(path, O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0666);
    if (fd < 0) return NULL;
    FILE *f = fdopen(fd, mode);
    if (!f) {
        const int e = errno;
        close(fd);
        (void)unlink(path);
        errno = e;
    }
    return f;
}

/* What a file that is not a regular one is, for messages. */
static const char *kind_of(mode_t m) {
    return S_ISDIR(m) ? "a folder" : S_ISCHR(m) || S_ISBLK(m) ? "a device" : S_ISFIFO(m) ? "a FIFO"
         : S_ISSOCK(m) ? "a socket" : S_ISLNK(m) ? "a symbolic link" : "a special file";
}

/* fd (opened O_NONBLOCK) as a stream if it is a regular file; else closed, errno and err set. */
static FILE *regular_stream(int fd, const char *path, const char *mode, uint64_t *size, lipt_error *err) {
    struct stat sb;
    if (fstat(fd, &sb) != 0) {
        const int e = errno;
        close(fd);
        lipt_fail(err, LIPT_ERR_IO, "cannot read %s: %s", path, strerror(e));
        errno = e;
        return NULL;
    }
    if (!S_ISREG(sb.st_mode)) {
        close(fd);
        lipt_fail(err, LIPT_ERR_IO, "%s is %s, not a regular file: lipt %s regular files only", path,
                  kind_of(sb.st_mode), mode[0] == 'r' ? "reads" : "writes");
        errno = S_ISDIR(sb.st_mode) ? EISDIR : EINVAL;
        return NULL;
    }
    /* back to blocking: O_NONBLOCK was only there so that opening a FIFO could not wait for a writer */
    const int fl = fcntl(fd, F_GETFL);
    if (fl >= 0) (void)fcntl(fd, F_SETFL, fl & ~O_NONBLOCK);
    FILE *f = fdopen(fd, mode);
    if (!f) {
        const int e = errno;
        close(fd);
        lipt_fail(err, LIPT_ERR_NOMEM, "cannot read %s: %s", path, strerror(e));
        errno = e;
        return NULL;
    }
    if (size) *size = (uint64_t)sb.st_size;
    return f;
}

/* Refuses what exists at path and is not a regular file (following symlinks), before opening it: opening a device
 * can itself act (a tape rewinds, a watchdog arms). 0 when it is regular or missing. */
static int refuse_special(const char *path, const char *verb, lipt_error *err) {
    struct stat sb;
    if (stat(path, &sb) != 0 || S_ISREG(sb.st_mode)) return 0;
    lipt_fail(err, LIPT_ERR_IO, "%s is %s, not a regular file: lipt %s regular files only", path, kind_of(sb.st_mode),
              verb);
    errno = S_ISDIR(sb.st_mode) ? EISDIR : EINVAL;
    return -1;
}

FILE *lipt_open_regular(const char *path, uint64_t *size, lipt_error *err) {
    if (refuse_special(path, "reads", err)) return NULL;
    const int fd = open(path, O_RDONLY | O_NONBLOCK | O_CLOEXEC);
    if (fd < 0) {
        const int e = errno;
        lipt_fail(err, LIPT_ERR_IO, "cannot read %s: %s", path, strerror(e));
        errno = e;
        return NULL;
    }
    return regular_stream(fd, path, "rb", size, err); /* checked again on what was opened: the name may have changed */
}

FILE *lipt_open_append(const char *path, lipt_error *err) {
    /* O_NOFOLLOW: a symlink planted where lipt keeps its log would make it append to the link's target */
    if (refuse_special(path, "appends to", err)) return NULL;
    const int fd = open(path, O_WRONLY | O_APPEND | O_CREAT | O_NOFOLLOW | O_NONBLOCK | O_CLOEXEC, 0666);
    if (fd < 0) {
        const int e = errno;
        if (e == ELOOP)
            lipt_fail(err, LIPT_ERR_IO, "%s is a symbolic link: lipt appends only to the regular file it created "
                      "(remove the link)", path);
        else
            lipt_fail(err, LIPT_ERR_IO, "cannot write %s: %s", path, strerror(e));
        errno = e;
        return NULL;
    }
    return regular_stream(fd, path, "a", NULL, err);
}

static char *dup_str(const char *s, const char *suffix) {
    size_t a = strlen(s), b = strlen(suffix);
    char *r = lipt_xmalloc(a + b + 1);
    memcpy(r, s, a);
    memcpy(r + a, suffix, b + 1);
    return r;
}

lipt_status lipt_afile_open(lipt_afile *af, const char *path, size_t fail_after, lipt_error *err) {
    memset(af, 0, sizeof *af);
    af->err = err;
    af->fail_after = fail_after;
    if (!path || !*path) return af->st = lipt_fail(err, LIPT_ERR_ARG, "no output path given");
    af->path = dup_str(path, "");
    af->tmp = dup_str(path, ".tmp");
    struct stat sb;
    /* only regular files are replaced (a symlink is replaced itself, never its target): not a device, FIFO, folder */
    if (lstat(path, &sb) == 0 && !S_ISREG(sb.st_mode) && !S_ISLNK(sb.st_mode)) {
        af->st = lipt_fail(err, LIPT_ERR_ARG, "%s exists and is not a regular file (%s): lipt writes regular files only",
                           path, kind_of(sb.st_mode));
        lipt_afile_discard(af);
        return af->st;
    }
    af->f = create_fresh(af->tmp, "wb"); /* created, never opened through a leftover or planted symlink */
    if (af->f) af->created = 1;
    if (!af->f) {
        int e = errno;
        af->st = lipt_fail(err, LIPT_ERR_IO, "cannot create %s: %s (does the directory exist and is it writable?)",
                           af->tmp, strerror(e));
        lipt_afile_discard(af);
        return af->st;
    }
    return LIPT_OK;
}

lipt_status lipt_afile_write(lipt_afile *af, const void *buf, size_t n) {
    if (af->st != LIPT_OK) return af->st;
    if (n == 0) return LIPT_OK;
    size_t want = n;
    int simulate = 0;
    if (af->fail_after && af->written + n > af->fail_after) {
        want = af->written < af->fail_after ? (size_t)(af->fail_after - af->written) : 0;
        simulate = 1;
    }
    size_t got = want ? fwrite(buf, 1, want, af->f) : 0;
    af->written += got;
    af->pos += got;
    if (af->pos > af->end) af->end = af->pos;
    if (simulate)
        return af->st = lipt_fail(af->err, LIPT_ERR_IO, "write to %s failed after %llu bytes (simulated fault)",
                                  af->tmp, (unsigned long long)af->written);
    if (got != want) {
        int e = errno;
        return af->st = lipt_fail(af->err, LIPT_ERR_IO, "write to %s failed after %llu bytes: %s (disk full?)",
                                  af->tmp, (unsigned long long)af->written, strerror(e));
    }
    return LIPT_OK;
}

lipt_status lipt_afile_seek(lipt_afile *af, uint64_t off) {
    if (af->st != LIPT_OK) return af->st;
    if (off > af->end || fseeko(af->f, (off_t)off, SEEK_SET) != 0) {
        int e = errno;
        return af->st = lipt_fail(af->err, LIPT_ERR_IO, "seek in %s to %llu failed: %s", af->tmp,
                                  (unsigned long long)off, strerror(e));
    }
    af->pos = off;
    return LIPT_OK;
}

/* Make the rename itself durable. Some file systems refuse fsync on a directory: not an error then. */
static void fsync_parent(const char *path) {
    const char *slash = strrchr(path, '/');
    char *dir;
    if (!slash) dir = dup_str(".", "");
    else if (slash == path) dir = dup_str("/", "");
    else {
        size_t n = (size_t)(slash - path);
        dir = lipt_xmalloc(n + 1);
        memcpy(dir, path, n);
        dir[n] = 0;
    }
    int fd = open(dir, O_RDONLY | O_DIRECTORY);
    if (fd >= 0) {
        (void)fsync(fd);
        close(fd);
    }
    free(dir);
}

lipt_status lipt_afile_commit(lipt_afile *af) {
    if (af->st != LIPT_OK) {
        lipt_afile_discard(af);
        return af->st;
    }
    if (fflush(af->f) != 0 || fsync(fileno(af->f)) != 0) {
        int e = errno;
        af->st = lipt_fail(af->err, LIPT_ERR_IO, "flushing %s failed: %s (disk full?)", af->tmp, strerror(e));
        lipt_afile_discard(af);
        return af->st;
    }
    FILE *f = af->f;
    af->f = NULL;
    if (fclose(f) != 0) {
        int e = errno;
        af->st = lipt_fail(af->err, LIPT_ERR_IO, "closing %s failed: %s", af->tmp, strerror(e));
        lipt_afile_discard(af);
        return af->st;
    }
    if (rename(af->tmp, af->path) != 0) {
        int e = errno;
        af->st = lipt_fail(af->err, LIPT_ERR_IO, "cannot rename %s to %s: %s", af->tmp, af->path, strerror(e));
        lipt_afile_discard(af);
        return af->st;
    }
    fsync_parent(af->path);
    free(af->tmp);
    free(af->path);
    af->tmp = af->path = NULL;
    return LIPT_OK;
}

lipt_status lipt_move_aside(const char *from, const char *to, lipt_error *err) {
    if (link(from, to) == 0) {
        if (unlink(from) != 0) {
            const int e = errno;
            unlink(to);
            return lipt_fail(err, LIPT_ERR_IO, "cannot move %s to %s: %s", from, to, strerror(e));
        }
        fsync_parent(to);
        return LIPT_OK;
    }
    int e = errno;
    if (e == EEXIST) return lipt_fail(err, LIPT_ERR_IO, "cannot move %s aside: %s already exists", from, to);
    /* no hard links here (some network and FAT file systems): a rename, to a name checked free */
    if ((e == EPERM || e == ENOTSUP || e == ENOSYS) && access(to, F_OK) != 0 && errno == ENOENT) {
        if (rename(from, to) == 0) {
            fsync_parent(to);
            return LIPT_OK;
        }
        e = errno;
    }
    return lipt_fail(err, LIPT_ERR_IO, "cannot move %s to %s: %s", from, to, strerror(e));
}

void lipt_afile_discard(lipt_afile *af) {
    if (af->f) {
        fclose(af->f);
        af->f = NULL;
    }
    if (af->tmp && af->created) remove(af->tmp);
    af->created = 0;
    free(af->tmp);
    free(af->path);
    af->tmp = af->path = NULL;
}

/* The public face of the writer above for text outputs (figures, tables, run.cfg): the stream is the temporary's. */
lipt_status lipt_output_open(lipt_output *o, const char *path, lipt_error *err) {
    o->f = NULL;
    lipt_afile *af = lipt_xcalloc(1, sizeof *af);
    o->state = af;
    if (lipt_afile_open(af, path, 0, err) != LIPT_OK) {
        const lipt_status st = af->st;
        free(af);
        o->state = NULL;
        return st;
    }
    o->f = af->f;
    return LIPT_OK;
}

lipt_status lipt_output_commit(lipt_output *o, lipt_error *err) {
    lipt_afile *af = o->state;
    if (!af) return lipt_fail(err, LIPT_ERR_INTERNAL, "lipt_output_commit without a successful open");
    af->err = err;
    /* what the caller wrote went through stdio straight to the stream: its error flag is the record of a failure */
    if (af->st == LIPT_OK && ferror(af->f))
        af->st = lipt_fail(err, LIPT_ERR_IO, "write to %s failed: %s (disk full?)", af->tmp, strerror(errno));
    const lipt_status st = lipt_afile_commit(af);
    free(af);
    o->state = NULL;
    o->f = NULL;
    return st;
}

void lipt_output_discard(lipt_output *o) {
    if (!o->state) return;
    lipt_afile_discard(o->state);
    free(o->state);
    o->state = NULL;
    o->f = NULL;
}
