/* Checkpoint-to-model loading and the extra blob of training checkpoints. */
#include "run.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

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

lipt_status run_load_model(const char *path, lipt_model *m, lipt_vocab *vocab, int64_t *step, lipt_error *err) {
    lipt_ckpt ck;
    lipt_status st = lipt_ckpt_open(path, &ck, err);
    if (st != LIPT_OK) return st;
    lipt_config cfg;
    st = lipt_config_parse(&cfg, ck.config_text, path, err);
    if (st == LIPT_OK && vocab) st = lipt_vocab_from_blob(vocab, ck.vocab, ck.vocab_len, err);
    if (st == LIPT_OK && vocab && vocab->size != cfg.vocab_size)
        st = lipt_fail(err, LIPT_ERR_FORMAT, "%s: vocabulary has %d symbols but the model %d", path, vocab->size,
                       cfg.vocab_size);
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
