/* What a run folder records besides its checkpoints: run.cfg (the settings) and metrics.jsonl cut back to the
 * resumed step. */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "cli.h"
#include "lipt/checkpoint.h"
#include "run.h"
#include "train_run.h"
#include "train_setup.h"

/* Keep metrics.jsonl lines up to `step` (a resumed run rewrites what came after its checkpoint). */
lipt_status train_truncate_metrics(const char *path, int64_t step, lipt_error *err) {
    FILE *f = lipt_open_regular(path, NULL, err); /* a FIFO there is refused, never waited on */
    if (!f) return errno == ENOENT ? LIPT_OK : err->status; /* missing: no log yet */
    char line[4096];
    int later = 0; /* a line past the checkpoint's step: only then is there anything to rewrite */
    while (!later && fgets(line, sizeof line, f)) {
        const char *s = strstr(line, "\"step\":");
        later = s && atoll(s + 7) > step;
    }
    if (!later) {
        fclose(f);
        return LIPT_OK;
    }
    rewind(f);
    char tmp[1300];
    snprintf(tmp, sizeof tmp, "%s.tmp", path);
    FILE *g = lipt_create_fresh(tmp, "w"); /* never written through a planted symlink */
    if (!g) {
        const int e = errno;
        fclose(f);
        return lipt_fail(err, LIPT_ERR_IO, "cannot rewrite %s to step %lld: %s; nothing changed", path, (long long)step,
                         strerror(e));
    }
    int bad = 0;
    while (!bad && fgets(line, sizeof line, f)) {
        const char *s = strstr(line, "\"step\":");
        if ((s ? atoll(s + 7) : 0) <= step) bad = fputs(line, g) < 0;
    }
    fclose(f);
    /* the log is replaced only once its new contents are safely on disk (a full disk must not empty it) */
    bad = bad || fflush(g) != 0 || fsync(fileno(g)) != 0 || ferror(g);
    const int e = errno;
    bad = fclose(g) != 0 || bad;
    if (bad || rename(tmp, path) != 0) {
        const int e2 = bad ? e : errno;
        unlink(tmp);
        return lipt_fail(err, LIPT_ERR_IO, "cannot rewrite %s to step %lld: %s; nothing changed", path, (long long)step,
                         strerror(e2));
    }
    return LIPT_OK;
}

/* DIR/run.cfg: every setting of the run (model keys, then training keys as given, the corpus by its absolute path),
 * with the lipt version and git revision: `lipt train --config DIR/run.cfg --out OTHER` repeats the run. */
void train_write_run_cfg(const trainer *t) {
    char path[1300], text[4096], out[16384];
    snprintf(path, sizeof path, "%s/run.cfg", t->out);
    size_t k = (size_t)snprintf(out, sizeof out,
                                "# lipt %s (git %s): the settings of this run; lipt train --config %s --out DIR repeats "
                                "it\n\n# model\n", LIPT_VERSION_STR, LIPT_GIT_HASH_STR, path);
    lipt_config_to_text(&t->cfg, text, sizeof text);
    k += (size_t)snprintf(out + k, k < sizeof out ? sizeof out - k : 0, "%s\n# training\n", text);
    char abs[1100] = "";
    run_opt_get(t->opts_text, "data-abs", abs, sizeof abs);
    for (const char *p = t->opts_text; *p && k < sizeof out;) {
        const char *nl = strchr(p, '\n'), *eq = strchr(p, '=');
        const int len = nl ? (int)(nl - p) : (int)strlen(p);
        if (eq && eq < p + len) {
            const int kl = (int)(eq - p);
            char key[64];
            snprintf(key, sizeof key, "%.*s", kl, p);
            const size_t room = sizeof out - k;
            if (train_key_index(key) < 0) /* recorded, not a setting */
                k += (size_t)snprintf(out + k, room, "# %s = %.*s\n", key, len - kl - 1, eq + 1);
            else if (strcmp(key, "data") == 0 && abs[0])
                k += (size_t)snprintf(out + k, room, "data = %s    # given as %.*s\n", abs, len - kl - 1, eq + 1);
            else
                k += (size_t)snprintf(out + k, room, "%s = %.*s\n", key, len - kl - 1, eq + 1);
        }
        p += len + (nl ? 1 : 0);
    }
    lipt_error err = {0};
    if (k < sizeof out && run_replace_file(path, out, &err) != LIPT_OK)
        fprintf(stderr, "note: %s (the run goes on; its checkpoints hold the same settings)\n", err.msg);
}
