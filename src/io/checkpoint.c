/* Checkpoints: zlib sections with CRC-32s, atomic write, read fully verified before loading (docs/CHECKPOINT.md).
 * This file writes them and holds the reader's entry points; checkpoint_parse.c verifies a file's image. */
#include "lipt/checkpoint.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <zlib.h>

#include "io/atomic_file.h"
#include "io/checkpoint_format.h"

#define CHUNK (256 * 1024)

/* ------------------------------------------------------------------ writing */

typedef struct { const void *p; size_t n; } piece;

/* One section: a placeholder header, the deflate stream (CRC and size counted on the way out), then the
 * real header patched in, so memory stays at one chunk whatever the tensor sizes. */
static lipt_status write_section(lipt_afile *af, int id, const piece *pc, int n_pc, int level, unsigned char *out) {
    unsigned char hdr[SEC_BYTES] = {0};
    const uint64_t start = af->pos;
    if (lipt_afile_write(af, hdr, SEC_BYTES)) return af->st;
    z_stream zs;
    memset(&zs, 0, sizeof zs);
    if (deflateInit(&zs, level) != Z_OK)
        return af->st = lipt_fail(af->err, LIPT_ERR_NOMEM, "zlib deflateInit failed writing %s", af->tmp);
    uint64_t raw = 0, stored = 0;
    uint32_t crc = lipt_crc32(0, NULL, 0);
    for (int k = 0; k <= n_pc; k++) {
        const int finish = k == n_pc;
        const unsigned char *src = finish ? NULL : pc[k].p;
        size_t left = finish ? 0 : pc[k].n;
        raw += left;
        for (;;) {
            uInt feed = left > (1u << 30) ? (1u << 30) : (uInt)left;
            zs.next_in = (Bytef *)src;
            zs.avail_in = feed;
            int ret;
            do {
                zs.next_out = out;
                zs.avail_out = CHUNK;
                ret = deflate(&zs, finish ? Z_FINISH : Z_NO_FLUSH);
                if (ret == Z_STREAM_ERROR) {
                    deflateEnd(&zs);
                    return af->st = lipt_fail(af->err, LIPT_ERR_INTERNAL, "zlib deflate failed writing %s", af->tmp);
                }
                size_t got = CHUNK - zs.avail_out;
                if (got) {
                    crc = lipt_crc32(crc, out, got);
                    stored += got;
                    if (lipt_afile_write(af, out, got)) {
                        deflateEnd(&zs);
                        return af->st;
                    }
                }
            } while (finish ? ret != Z_STREAM_END : zs.avail_out == 0);
            size_t used = feed - zs.avail_in;
            src += used;
            left -= used;
            if (finish || left == 0) break;
        }
    }
    deflateEnd(&zs);
    memcpy(hdr, SECTIONS[id].tag, 4);
    lipt_put_u32(hdr + 4, CODEC_ZLIB);
    lipt_put_u64(hdr + 8, raw);
    lipt_put_u64(hdr + 16, stored);
    lipt_put_u32(hdr + 24, crc);
    lipt_put_u32(hdr + 28, lipt_crc32(0, hdr, 28));
    const uint64_t end = af->pos;
    if (lipt_afile_seek(af, start) || lipt_afile_write(af, hdr, SEC_BYTES) || lipt_afile_seek(af, end)) return af->st;
    return LIPT_OK;
}

static unsigned char *build_index(const lipt_params *p, size_t *len) {
    size_t n = 4;
    for (int i = 0; i < p->n; i++) n += 12 + strlen(p->list[i]->name) + 4 * (size_t)p->list[i]->ndim;
    unsigned char *b = lipt_xmalloc(n), *q = b;
    lipt_put_u32(q, (uint32_t)p->n);
    q += 4;
    for (int i = 0; i < p->n; i++) {
        const lipt_tensor *t = p->list[i];
        size_t l = strlen(t->name);
        lipt_put_u32(q, (uint32_t)l);
        memcpy(q + 4, t->name, l);
        q += 4 + l;
        lipt_put_u32(q, (uint32_t)p->flags[i]);
        lipt_put_u32(q + 4, (uint32_t)t->ndim);
        q += 8;
        for (int d = 0; d < t->ndim; d++, q += 4) lipt_put_u32(q, (uint32_t)t->shape[d]);
    }
    *len = n;
    return b;
}

lipt_status lipt_ckpt_save(const char *path, const lipt_ckpt_contents *c, lipt_error *err) {
    if (!lipt_host_little_endian())
        return lipt_fail(err, LIPT_ERR_INTERNAL, "checkpoints are little-endian; this host is not supported");
    const lipt_params *p = c->params;
    if (!p || !p->finalized) return lipt_fail(err, LIPT_ERR_ARG, "checkpoint %s: parameters missing or not finalized", path);
    if (c->n_rngs < 0 || (c->n_rngs && !c->rngs) || (c->vocab_len && !c->vocab) || (c->extra_len && !c->extra))
        return lipt_fail(err, LIPT_ERR_ARG, "checkpoint %s: a blob length without its pointer", path);
    if (c->compression < 0 || c->compression > 9)
        return lipt_fail(err, LIPT_ERR_ARG, "checkpoint %s: compression level %d not in 0..9", path, c->compression);
    for (int i = 0; i < p->n; i++)
        if (strlen(p->list[i]->name) > MAX_NAME || !*p->list[i]->name)
            return lipt_fail(err, LIPT_ERR_ARG, "checkpoint %s: tensor #%d has an empty or over-long name", path, i);
    if (p->n > 1) {
        const char **names = lipt_xmalloc((size_t)p->n * sizeof *names);
        for (int i = 0; i < p->n; i++) names[i] = p->list[i]->name;
        const char *dup = lipt_ckpt_find_duplicate(names, p->n);
        lipt_status st = dup ? lipt_fail(err, LIPT_ERR_ARG, "checkpoint %s: two tensors are named '%s'", path, dup)
                             : LIPT_OK;
        free(names);
        if (st) return st;
    }
    const int level = c->compression ? c->compression : 1;
    const char *conf = c->config_text ? c->config_text : "";

    lipt_afile af;
    if (lipt_afile_open(&af, path, c->test_fail_after_bytes, err)) return af.st;
    unsigned char hdr[HDR_BYTES] = {0};
    lipt_afile_write(&af, hdr, HDR_BYTES); /* patched at the end, once the size is known */

    unsigned char stat[STAT_BYTES] = {0};
    lipt_put_u64(stat, (uint64_t)c->step);
    lipt_put_u64(stat + 8, (uint64_t)(c->with_optimizer ? c->adam_t : 0));
    lipt_put_u32(stat + 16, c->with_optimizer ? 1u : 0u);
    unsigned char *rngs = lipt_xmalloc((size_t)c->n_rngs * RNG_BYTES + 1);
    for (int i = 0; i < c->n_rngs; i++)
        for (int k = 0; k < 4; k++) lipt_put_u64(rngs + (size_t)i * RNG_BYTES + 8 * k, c->rngs[i].s[k]);
    size_t idx_len;
    unsigned char *idx = build_index(p, &idx_len);
    unsigned char *out = lipt_xmalloc(CHUNK);

    const piece sec[S_COUNT] = {
        [S_CONF] = {conf, strlen(conf)},
        [S_VOCB] = {c->vocab, c->vocab_len},
        [S_STAT] = {stat, STAT_BYTES},
        [S_RNGS] = {rngs, (size_t)c->n_rngs * RNG_BYTES},
        [S_XTRA] = {c->extra, c->extra_len},
        [S_TIDX] = {idx, idx_len},
        [S_TVAL] = {p->value, p->n_train * sizeof(float)},
        [S_TBUF] = {p->buf, p->n_buf * sizeof(float)},
        [S_ADMM] = {p->m, p->n_train * sizeof(float)},
        [S_ADMV] = {p->v, p->n_train * sizeof(float)},
    };
    const int n_sec = c->with_optimizer ? S_COUNT : S_ADMM;
    for (int s = 0; s < n_sec && af.st == LIPT_OK; s++) write_section(&af, s, &sec[s], 1, level, out);
    free(out);
    free(idx);
    free(rngs);

    memcpy(hdr, LIPT_CKPT_MAGIC, 8);
    lipt_put_u32(hdr + 8, LIPT_CKPT_VERSION);
    lipt_put_u32(hdr + 12, (uint32_t)n_sec);
    lipt_put_u64(hdr + 16, af.end);
    lipt_put_u32(hdr + 24, 0);
    lipt_put_u32(hdr + 28, lipt_crc32(0, hdr, 28));
    lipt_afile_seek(&af, 0);
    lipt_afile_write(&af, hdr, HDR_BYTES);
    return lipt_afile_commit(&af);
}

/* ------------------------------------------------------------------ reading */

static void shape_str(int ndim, const int *shape, char *buf, size_t len) {
    size_t o = 0;
    o += (size_t)snprintf(buf + o, len - o, "[");
    for (int d = 0; d < ndim && o < len; d++) o += (size_t)snprintf(buf + o, len - o, d ? ",%d" : "%d", shape[d]);
    if (o < len) snprintf(buf + o, len - o, "]");
}

lipt_status lipt_ckpt_open_mem(const void *data, size_t len, lipt_ckpt *ck, lipt_error *err) {
    memset(ck, 0, sizeof *ck);
    lipt_status st = lipt_ckpt_parse(data, len, "checkpoint (in memory)", ck, err);
    if (st) lipt_ckpt_close(ck);
    return st;
}

lipt_status lipt_ckpt_open(const char *path, lipt_ckpt *ck, lipt_error *err) {
    memset(ck, 0, sizeof *ck);
    struct stat pre;
    /* stat first: opening a FIFO would wait forever for a writer */
    if (stat(path, &pre) == 0 && !S_ISREG(pre.st_mode))
        return lipt_fail(err, LIPT_ERR_IO, "checkpoint %s exists but is not a regular file (%s)", path,
                         S_ISDIR(pre.st_mode) ? "a folder: give the .ckpt file inside it"
                         : S_ISFIFO(pre.st_mode) ? "a FIFO" : "a device or special file");
    uint64_t size = 0;
    lipt_error oe = {0};
    FILE *f = lipt_open_regular(path, &size, &oe); /* O_NONBLOCK + fstat: a FIFO swapped in since is not waited on */
    if (!f) return lipt_fail(err, LIPT_ERR_IO, "checkpoint: %s", oe.msg);
    size_t n = (size_t)size;
    unsigned char *buf = malloc(n ? n : 1);
    if (!buf) {
        fclose(f);
        return lipt_fail(err, LIPT_ERR_NOMEM, "no memory to read checkpoint %s (%zu bytes)", path, n);
    }
    size_t got = fread(buf, 1, n, f);
    int rerr = ferror(f);
    fclose(f);
    if (got != n || rerr) {
        free(buf);
        return lipt_fail(err, LIPT_ERR_IO, "reading checkpoint %s: got %zu of %zu bytes", path, got, n);
    }
    lipt_status st = lipt_ckpt_parse(buf, n, path, ck, err);
    free(buf);
    if (st) lipt_ckpt_close(ck);
    return st;
}

const lipt_ckpt_tensor *lipt_ckpt_find(const lipt_ckpt *ck, const char *name) {
    for (int i = 0; i < ck->n_tensors; i++)
        if (!strcmp(ck->tensors[i].name, name)) return &ck->tensors[i];
    return NULL;
}

lipt_status lipt_ckpt_load_params(const lipt_ckpt *ck, lipt_params *p, int load_optimizer, lipt_error *err) {
    char s1[64], s2[64];
    if (!p->finalized) return lipt_fail(err, LIPT_ERR_ARG, "load checkpoint: the model's parameters are not finalized");
    if (load_optimizer && !ck->has_optimizer)
        return lipt_fail(err, LIPT_ERR_ARG,
                         "checkpoint holds no optimizer state (saved without it): load with the optimizer reset");
    for (int i = 0; i < p->n; i++) {
        const lipt_tensor *t = p->list[i];
        const lipt_ckpt_tensor *c = lipt_ckpt_find(ck, t->name);
        shape_str(t->ndim, t->shape, s1, sizeof s1);
        if (!c)
            return lipt_fail(err, LIPT_ERR_ARG,
                             "checkpoint lacks tensor '%s' %s that the model has: was it saved with another config?",
                             t->name, s1);
        const int mb = p->flags[i] & LIPT_PARAM_BUFFER, cb = c->flags & LIPT_PARAM_BUFFER;
        if (mb != cb)
            return lipt_fail(err, LIPT_ERR_ARG, "tensor '%s' is a %s in the checkpoint but a %s in the model", t->name,
                             cb ? "buffer" : "trainable parameter", mb ? "buffer" : "trainable parameter");
        shape_str(c->ndim, c->shape, s2, sizeof s2);
        if (c->ndim != t->ndim || memcmp(c->shape, t->shape, (size_t)t->ndim * sizeof(int)) != 0)
            return lipt_fail(err, LIPT_ERR_ARG, "tensor '%s' has shape %s in the checkpoint but %s in the model",
                             t->name, s2, s1);
    }
    for (int i = 0; i < ck->n_tensors; i++)
        if (!lipt_param_find(p, ck->tensors[i].name)) {
            shape_str(ck->tensors[i].ndim, ck->tensors[i].shape, s2, sizeof s2);
            return lipt_fail(err, LIPT_ERR_ARG,
                             "checkpoint tensor '%s' %s is not in the model: was it saved with another config?",
                             ck->tensors[i].name, s2);
        }
    for (int i = 0; i < p->n; i++) {
        lipt_tensor *t = p->list[i];
        const lipt_ckpt_tensor *c = lipt_ckpt_find(ck, t->name);
        const size_t bytes = t->numel * sizeof(float);
        if (p->flags[i] & LIPT_PARAM_BUFFER) {
            if (bytes) memcpy(t->data, ck->bufs + c->offset, bytes);
            continue;
        }
        if (bytes) memcpy(t->data, ck->values + c->offset, bytes);
        if (load_optimizer && bytes) {
            const size_t off = (size_t)(t->data - p->value);
            memcpy(p->m + off, ck->m + c->offset, bytes);
            memcpy(p->v + off, ck->v + c->offset, bytes);
        }
    }
    return LIPT_OK;
}

void lipt_ckpt_close(lipt_ckpt *ck) {
    free(ck->config_text);
    free(ck->vocab);
    free(ck->extra);
    free(ck->rngs);
    free(ck->values);
    free(ck->bufs);
    free(ck->m);
    free(ck->v);
    for (int i = 0; i < ck->n_tensors; i++) free(ck->tensors[i].name);
    free(ck->tensors);
    memset(ck, 0, sizeof *ck);
}
