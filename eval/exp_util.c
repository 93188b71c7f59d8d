/* Helpers shared by the experiments: directories, number lists, files replaced atomically. */
#include "exp_util.h"

#include <errno.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

lipt_status mkdir_p(const char *dir, lipt_error *err) {
    char path[1024];
    const size_t n = strlen(dir);
    if (n == 0 || n >= sizeof path) return lipt_fail(err, LIPT_ERR_ARG, "bad output directory '%s'", dir);
    memcpy(path, dir, n + 1);
    for (size_t i = 1; i <= n; i++) {
        if (path[i] != '/' && path[i] != 0) continue;
        const char c = path[i];
        path[i] = 0;
        if (mkdir(path, 0777) != 0 && errno != EEXIST)
            return lipt_fail(err, LIPT_ERR_IO, "cannot create %s: %s", path, strerror(errno));
        path[i] = c;
    }
    struct stat sb;
    if (stat(dir, &sb) != 0 || !S_ISDIR(sb.st_mode)) return lipt_fail(err, LIPT_ERR_IO, "%s is not a directory", dir);
    return LIPT_OK;
}

/* Comma-separated numbers into out (at most cap). Returns the count, or -1 on a malformed list. */
int parse_list(const char *s, double *out, int cap) {
    int n = 0;
    if (!s || !*s) return -1;
    for (const char *p = s;;) {
        char *end = NULL;
        errno = 0;
        const double v = strtod(p, &end);
        if (errno || end == p || !isfinite(v) || n >= cap) return -1;
        out[n++] = v;
        while (*end == ' ') end++;
        if (*end == 0) break;
        if (*end != ',') return -1;
        p = end + 1;
    }
    return n;
}

/* A FILE on path.tmp, renamed over path by commit_file (readers never see a partial file). */
lipt_status open_file(out_file *o, const char *path, lipt_error *err) {
    snprintf(o->path, sizeof o->path, "%s", path);
    snprintf(o->tmp, sizeof o->tmp, "%s.tmp", path);
    o->f = fopen(o->tmp, "w");
    if (!o->f) return lipt_fail(err, LIPT_ERR_IO, "cannot write %s: %s", o->tmp, strerror(errno));
    return LIPT_OK;
}

lipt_status commit_file(out_file *o, lipt_error *err) {
    const int bad = ferror(o->f) != 0;
    if (fclose(o->f) != 0 || bad) {
        remove(o->tmp);
        return lipt_fail(err, LIPT_ERR_IO, "write error on %s", o->tmp);
    }
    if (rename(o->tmp, o->path) != 0) {
        remove(o->tmp);
        return lipt_fail(err, LIPT_ERR_IO, "cannot rename %s: %s", o->tmp, strerror(errno));
    }
    return LIPT_OK;
}
