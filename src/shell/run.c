/* Checkpoint-to-model loading and the extra blob of training checkpoints. */
#define _XOPEN_SOURCE 700 /* realpath */
#include "run.h"

#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>
#include <zlib.h>

#define EXTRA_MAGIC "LRX1"

unsigned char *run_extra_pack(const run_extra *x, size_t *len) {
    size_t tl = x->opts_text ? strlen(x->opts_text) : 0;
    size_t n = 4 + LIPT_BATCHER_STATE_BYTES + 8 + 8 + tl + 1;
    unsigned char *b = lipt_xmalloc(n), *p = b;
    memcpy(p, EXTRA_MAGIC, 4);
    p += 4;
    lipt_batcher_state_pack(&x->batcher, p);
    p += LIPT_BATCHER_STATE_BYTES;
    memcpy(p, &x->best_bpc, 8); /* host order: checkpoints are little-endian x86/ARM files in practice */
    p += 8;
    memcpy(p, &x->best_step, 8);
    p += 8;
    if (tl) memcpy(p, x->opts_text, tl);
    p[tl] = 0;
    *len = n;
    return b;
}

lipt_status run_extra_unpack(run_extra *x, const unsigned char *blob, size_t len, lipt_error *err) {
    memset(x, 0, sizeof *x);
    size_t head = 4 + LIPT_BATCHER_STATE_BYTES + 16;
    if (!blob || len < head + 1 || memcmp(blob, EXTRA_MAGIC, 4) != 0 || blob[len - 1] != 0)
        return lipt_fail(err, LIPT_ERR_FORMAT,
                         "checkpoint has no training state (it was not written by lipt train, or is from another version)");
    lipt_status st = lipt_batcher_state_unpack(&x->batcher, blob + 4, LIPT_BATCHER_STATE_BYTES, err);
    if (st != LIPT_OK) return st;
    memcpy(&x->best_bpc, blob + 4 + LIPT_BATCHER_STATE_BYTES, 8);
    memcpy(&x->best_step, blob + 4 + LIPT_BATCHER_STATE_BYTES + 8, 8);
    x->opts_text = (const char *)blob + head;
    return LIPT_OK;
}

lipt_status run_ckpt_config(const lipt_ckpt *ck, const char *path, lipt_config *cfg, lipt_vocab *vocab,
                            lipt_error *err) {
    lipt_status st = lipt_config_parse(cfg, ck->config_text, path, err);
    if (st == LIPT_OK && vocab) st = lipt_vocab_from_blob(vocab, ck->vocab, ck->vocab_len, err);
    if (st == LIPT_OK && vocab && vocab->size != cfg->vocab_size)
        st = lipt_fail(err, LIPT_ERR_FORMAT, "%s: its vocabulary has %d symbols but its model %d: not a consistent "
                       "checkpoint", path, vocab->size, cfg->vocab_size);
    return st;
}

lipt_status run_load_model(const char *path, lipt_model *m, lipt_vocab *vocab, int64_t *step, lipt_error *err) {
    lipt_ckpt ck;
    lipt_status st = lipt_ckpt_open(path, &ck, err);
    if (st != LIPT_OK) return st;
    lipt_config cfg;
    st = run_ckpt_config(&ck, path, &cfg, vocab, err);
    if (st == LIPT_OK) {
        /* the stored tensors must be the ones the stored config describes, checked before anything is allocated */
        size_t want_t = 0, want_b = 0, have_t = 0, have_b = 0;
        st = lipt_config_param_floats(&cfg, &want_t, &want_b, err);
        for (int i = 0; i < ck.n_tensors; i++) *(ck.tensors[i].flags & LIPT_PARAM_BUFFER ? &have_b : &have_t) += ck.tensors[i].numel;
        if (st == LIPT_OK && (want_t != have_t || want_b != have_b))
            st = lipt_fail(err, LIPT_ERR_FORMAT, "%s: its config describes %zu trainable and %zu buffer floats but it "
                           "stores %zu and %zu: not a consistent checkpoint", path, want_t, want_b, have_t, have_b);
    }
    if (st == LIPT_OK) st = lipt_model_init(m, &cfg, err);
    if (st == LIPT_OK) {
        st = lipt_ckpt_load_params(&ck, &m->params, 0, err);
        /* the power-iteration vectors come from the checkpoint as they were: the loaded model is
         * exactly the trained function (refreshing them would move its contraction factors) */
        if (st != LIPT_OK) lipt_model_free(m);
    }
    if (step) *step = ck.step;
    lipt_ckpt_close(&ck);
    return st;
}

lipt_status run_mkdir(const char *dir, lipt_error *err) {
    /* mkdir -p: every missing parent too (run directories and the experiments' output folders) */
    char path[1024];
    size_t n = strlen(dir);
    if (n == 0 || n >= sizeof path) return lipt_fail(err, LIPT_ERR_ARG, "bad directory name '%s'", dir);
    memcpy(path, dir, n + 1);
    for (size_t i = 1; i <= n; i++) {
        if (path[i] != '/' && path[i] != 0) continue;
        char c = path[i];
        path[i] = 0;
        if (mkdir(path, 0777) != 0 && errno != EEXIST)
            return lipt_fail(err, LIPT_ERR_IO, "cannot create directory %s: %s", path, strerror(errno));
        path[i] = c;
    }
    struct stat sb;
    if (stat(dir, &sb) != 0 || !S_ISDIR(sb.st_mode)) return lipt_fail(err, LIPT_ERR_IO, "%s exists and is not a directory", dir);
    return LIPT_OK;
}

/* ---- a run folder ---- */

lipt_status run_lock(const char *dir, int *fd, lipt_error *err) {
    char lock_path[1300];
    snprintf(lock_path, sizeof lock_path, "%s/.lock", dir);
    /* O_NOFOLLOW: a symlink planted there would make the lock create (or lock) its target; O_NONBLOCK: a FIFO there
     * must not block; anything but a regular file is refused */
    *fd = open(lock_path, O_RDWR | O_CREAT | O_NOFOLLOW | O_NONBLOCK | O_CLOEXEC, 0666);
    struct stat lsb;
    if (*fd < 0 && errno == ELOOP)
        return lipt_fail(err, LIPT_ERR_IO, "%s is a symbolic link: the lock of a run folder is a regular file lipt "
                         "creates (remove the link)", lock_path);
    if (*fd < 0 && errno != ENXIO)
        return lipt_fail(err, LIPT_ERR_IO, "cannot create the lock %s: %s", lock_path, strerror(errno));
    if (*fd < 0 || fstat(*fd, &lsb) != 0 || !S_ISREG(lsb.st_mode))
        return lipt_fail(err, LIPT_ERR_IO, "%s is not a regular file: the lock of a run folder is a regular file lipt "
                         "creates (remove it)", lock_path);
    if (flock(*fd, LOCK_EX | LOCK_NB) != 0)
        return lipt_fail(err, LIPT_ERR_IO, "%s is in use by another lipt train (lock %s); wait for it or choose another "
                         "--out", dir, lock_path);
    return LIPT_OK;
}

const char *run_folder_checkpoint(const char *dir) {
    static const char *const ckpts[] = {"last.ckpt", "best.ckpt"};
    char path[1300];
    for (int i = 0; i < 2; i++) {
        snprintf(path, sizeof path, "%s/%s", dir, ckpts[i]);
        if (access(path, F_OK) == 0) return ckpts[i];
    }
    return NULL;
}

lipt_status run_resolve_ckpt(const char *given, char *out, size_t n, lipt_error *err) {
    struct stat sb;
    const char *held = NULL;
    if (stat(given, &sb) == 0 && S_ISDIR(sb.st_mode)) {
        static const char *const ckpts[] = {"best.ckpt", "last.ckpt"}; /* the best weights first */
        char path[PATH_MAX + 16];
        for (int i = 0; i < 2 && !held; i++) {
            snprintf(path, sizeof path, "%s/%s", given, ckpts[i]);
            if (access(path, F_OK) == 0) held = ckpts[i];
        }
        if (!held)
            return lipt_fail(err, LIPT_ERR_ARG, "%s holds no best.ckpt or last.ckpt (a run folder has them once its "
                             "training saved a checkpoint): give a checkpoint file, or a run folder that has one", given);
    }
    const int w = held ? snprintf(out, n, "%s/%s", given, held) : snprintf(out, n, "%s", given);
    if (w < 0 || (size_t)w >= n) return lipt_fail(err, LIPT_ERR_ARG, "%s: the path is too long", given);
    return LIPT_OK;
}

int run_ckpt_option(cli_args *a, const char *cmd) {
    for (int k = 0; k < a->n_opts; k++) {
        if (strcmp(a->opts[k].name, "ckpt") != 0 || !a->set[k] || !a->val[k]) continue;
        lipt_error err = {0};
        if (run_resolve_ckpt(a->val[k], a->ckpt_path, sizeof a->ckpt_path, &err) != LIPT_OK)
            return cli_error(cmd, "--ckpt %s", err.msg);
        a->val[k] = a->ckpt_path;
    }
    return 0;
}

static int ends_with(const char *s, const char *tail) {
    const size_t a = strlen(s), b = strlen(tail);
    return a >= b && strcmp(s + a - b, tail) == 0;
}

int run_owned_path(const char *path, char *why, size_t n) {
    const char *slash = strrchr(path, '/'), *b = slash ? slash + 1 : path;
    char dir[1100], probe[1300], magic[8];
    snprintf(dir, sizeof dir, "%.*s", slash ? (int)(slash - path) : 1, slash ? path : ".");
    if (!dir[0]) snprintf(dir, sizeof dir, "/");
    lipt_error err = {0};
    FILE *f = lipt_open_regular(path, NULL, &err);
    const int is_ckpt = f && fread(magic, 1, 8, f) == 8 && memcmp(magic, LIPT_CKPT_MAGIC, 8) == 0;
    if (f) fclose(f);
    if (is_ckpt) return snprintf(why, n, "%s is a lipt checkpoint", path), 1;
    if (ends_with(b, ".ckpt")) return snprintf(why, n, "%s has a checkpoint's name (*.ckpt)", path), 1;
    snprintf(probe, sizeof probe, "%s/run.cfg", dir);
    int run = run_folder_checkpoint(dir) != NULL || access(probe, F_OK) == 0;
    snprintf(probe, sizeof probe, "%s/metrics.jsonl", dir);
    run = run || access(probe, F_OK) == 0;
    const int record = strcmp(b, ".lock") == 0 || ends_with(b, ".tmp") ||
                       (strncmp(b, "metrics", 7) == 0 && ends_with(b, ".jsonl")) ||
                       (strncmp(b, "run", 3) == 0 && ends_with(b, ".cfg"));
    if (run && record) return snprintf(why, n, "%s is a record lipt train keeps in the run folder %s", path, dir), 1;
    return 0;
}

/* ---- the corpus a checkpoint was trained on ---- */

int run_opt_get(const char *opts_text, const char *key, char *out, size_t n) {
    if (!opts_text) return -1;
    const size_t kl = strlen(key);
    for (const char *p = opts_text; *p;) {
        const char *nl = strchr(p, '\n');
        const size_t ll = nl ? (size_t)(nl - p) : strlen(p);
        if (ll > kl && strncmp(p, key, kl) == 0 && p[kl] == '=') {
            const size_t vl = ll - kl - 1;
            if (vl == 0 || vl >= n) return -1;
            memcpy(out, p + kl + 1, vl);
            out[vl] = 0;
            return 0;
        }
        if (!nl) break;
        p = nl + 1;
    }
    return -1;
}

char *run_ckpt_opts(const char *ckpt) {
    lipt_ckpt ck;
    lipt_error e;
    if (lipt_ckpt_open(ckpt, &ck, &e) != LIPT_OK) return NULL;
    run_extra x;
    char *r = NULL;
    if (run_extra_unpack(&x, ck.extra, ck.extra_len, &e) == LIPT_OK && x.opts_text) r = strdup(x.opts_text);
    lipt_ckpt_close(&ck);
    return r;
}

int run_ckpt_opt(const char *ckpt, const char *key, char *out, size_t n) {
    char *opts = run_ckpt_opts(ckpt);
    const int rc = run_opt_get(opts, key, out, n);
    free(opts);
    return rc;
}

/* CRC-32 and size of a file's bytes. 0, or -1 when it cannot be read or is above the cap on a corpus: the loader then
 * says so at once, where the checksum of a 1 TiB sparse file would have read zeros for most of an hour. */
static int file_crc(const char *path, uint32_t *crc, uint64_t *bytes) {
    uint64_t size = 0;
    FILE *f = lipt_open_regular(path, &size, NULL); /* never a FIFO: the CRC must not wait for a writer */
    if (!f) return -1;
    if (size > lipt_corpus_cap()) {
        fclose(f);
        return -1;
    }
    unsigned char buf[1 << 16];
    uLong c = *crc;
    size_t got;
    while ((got = fread(buf, 1, sizeof buf, f)) > 0) {
        c = crc32(c, buf, (uInt)got);
        *bytes += got;
    }
    const int bad = ferror(f);
    fclose(f);
    *crc = (uint32_t)c;
    return bad ? -1 : 0;
}

int run_corpus_identity(const lipt_dataset *ds, char *text, size_t n) {
    char abs[PATH_MAX], first[PATH_MAX];
    if (!realpath(ds->loc.path[0], first)) return -1;
    if (ds->loc.kind == LIPT_CORPUS_PTB) { /* three files in one folder: the folder names the corpus */
        char *slash = strrchr(first, '/');
        if (slash && slash != first) *slash = 0;
    }
    snprintf(abs, sizeof abs, "%s", first);
    uint32_t crc = (uint32_t)crc32(0L, Z_NULL, 0);
    uint64_t bytes = 0;
    for (int s = 0; s < 3; s++) {
        int seen = 0; /* each distinct file once */
        for (int r = 0; r < s; r++) seen |= strcmp(ds->loc.path[r], ds->loc.path[s]) == 0;
        if (!seen && file_crc(ds->loc.path[s], &crc, &bytes) != 0) return -1;
    }
    const int w = snprintf(text, n, "data-abs=%s\ndata-bytes=%llu\ndata-crc32=%08x\n", abs, (unsigned long long)bytes,
                           (unsigned)crc);
    return w < 0 || (size_t)w >= n ? -1 : 0;
}

lipt_status run_load_corpus(const char *ckpt, const char *data, const char *split, const lipt_vocab *vocab, int quiet,
                            lipt_dataset *ds, lipt_error *err) {
    char *opts = run_ckpt_opts(ckpt);
    const lipt_status st = run_load_corpus_opts(ckpt, opts, data, split, vocab, quiet, ds, err);
    free(opts);
    return st;
}

/* Warns when `data`, the run's own corpus, no longer has the CRC-32 stored in the checkpoint. Called before the corpus
 * is encoded: a changed file can hold a symbol the vocabulary lacks, and that error must not come without the reason. */
static void warn_if_changed(const char *ckpt, const char *opts, const char *data) {
    char now[PATH_MAX + 128], was_crc[32], crc_now[32] = "";
    lipt_dataset at;
    lipt_error e = {0};
    memset(&at, 0, sizeof at);
    if (run_opt_get(opts, "data-crc32", was_crc, sizeof was_crc) != 0 ||
        lipt_corpus_locate(data, NULL, &at.loc, &e) != LIPT_OK || run_corpus_identity(&at, now, sizeof now) != 0)
        return;
    run_opt_get(now, "data-crc32", crc_now, sizeof crc_now);
    if (strcmp(crc_now, was_crc) != 0)
        fprintf(stderr, "warning: %s differs from the corpus %s was trained on (CRC-32 %s, trained on %s): the "
                        "file changed since training\n", cli_shown(data), cli_shown(ckpt), crc_now, was_crc);
}

/* A symbol the checkpoint's vocabulary lacks: say which corpus the checkpoint was trained on (the data layer's hint,
 * to train with --unk or bytes, is for a new run, not for a trained model). */
static void vocab_note(lipt_error *err, const char *ckpt, const char *trained_on, const lipt_vocab *v) {
    const char *p = v ? strstr(err->msg, " is not in the vocabulary") : NULL;
    if (!p) return;
    char head[LIPT_ERRMSG_LEN];
    snprintf(head, sizeof head, "%.*s", (int)(p - err->msg), err->msg);
    lipt_fail(err, err->status, "%s is not in the vocabulary of %s (%d symbols): this checkpoint was trained on %s; "
              "evaluate it on that corpus or on text made of the same symbols", head, ckpt, v->n_sym, trained_on);
}

lipt_status run_load_corpus_opts(const char *ckpt, const char *opts, const char *data, const char *split,
                                 const lipt_vocab *vocab, int quiet, lipt_dataset *ds, lipt_error *err) {
    char stored_abs[PATH_MAX] = "", stored_spec[PATH_MAX] = "", stored_split[256] = "";
    const int has_abs = run_opt_get(opts, "data-abs", stored_abs, sizeof stored_abs) == 0;
    const int has_spec = run_opt_get(opts, "data", stored_spec, sizeof stored_spec) == 0;
    const int own = !data; /* the run's own corpus */
    if (own) {
        if (!has_abs && !has_spec)
            return lipt_fail(err, LIPT_ERR_ARG, "%s does not say which corpus it was trained on: give --data", ckpt);
        data = has_abs ? stored_abs : stored_spec;
    }
    lipt_data_opts o = {0};
    o.use_vocab = vocab;
    /* the training run's split, unless another corpus was named */
    if (!split && (own || (has_spec && strcmp(data, stored_spec) == 0) || (has_abs && strcmp(data, stored_abs) == 0)) &&
        run_opt_get(opts, "data-split", stored_split, sizeof stored_split) == 0)
        split = stored_split;
    lipt_status st = split ? lipt_data_parse_split(split, &o, err) : LIPT_OK;
    const int same_corpus = own || (has_abs && strcmp(data, stored_abs) == 0);
    if (st == LIPT_OK && same_corpus) warn_if_changed(ckpt, opts, data);
    if (st == LIPT_OK) st = lipt_dataset_load(data, &o, ds, err);
    if (st != LIPT_OK) {
        vocab_note(err, ckpt, has_abs ? stored_abs : has_spec ? stored_spec : "another corpus", vocab);
        if (own) {
            char why[LIPT_ERRMSG_LEN + 64];
            snprintf(why, sizeof why, " (the corpus stored in %s; --data names another)", ckpt);
            run_blame_corpus(err, why);
        }
        return st;
    }
    if (own && !quiet) fprintf(stderr, "data: the run's own corpus, %s\n", cli_shown(data));
    return LIPT_OK;
}

void run_blame_corpus(lipt_error *err, const char *origin) {
    if (!err || !origin || !*origin) return;
    char msg[LIPT_ERRMSG_LEN];
    const char *m = err->msg;
    const int typed = strncmp(m, "--data ", 7) == 0; /* "--data PATH: ...", but the path was not typed as --data */
    snprintf(msg, sizeof msg, "%s", typed ? m + 7 : m);
    lipt_fail(err, err->status, "%s%s%s", typed ? "corpus " : "", msg, origin);
}

lipt_status run_replace_file(const char *path, const char *text, lipt_error *err) {
    lipt_output o;
    const lipt_status st = lipt_output_open(&o, path, err);
    if (st != LIPT_OK) return st;
    fputs(text, o.f);
    return lipt_output_commit(&o, err);
}
