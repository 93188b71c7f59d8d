/* Checkpoints: zlib sections with CRC-32s, atomic write, read fully verified before loading (docs/CHECKPOINT.md). */
#include "lipt/checkpoint.h"

#include <errno.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <zlib.h>

#include "io/atomic_file.h"

#define HDR_BYTES 32
#define SEC_BYTES 32
#define MAX_SECTIONS 64
#define CODEC_RAW 0u
#define CODEC_ZLIB 1u
#define MAX_NAME 4096
#define MAX_TENSORS (1 << 20)
#define MAX_FLOATS ((uint64_t)1 << 40)
#define STAT_BYTES 24
#define RNG_BYTES 32
#define CHUNK (256 * 1024)

/* The sections a version-1 file holds, in write order; readers skip unknown tags. */
static const struct { char tag[5]; const char *what; int required; } SECTIONS[] = {
    {"CONF", "model config", 1},     {"VOCB", "vocabulary", 1},         {"STAT", "training state", 1},
    {"RNGS", "RNG states", 1},       {"XTRA", "extra data", 1},         {"TIDX", "tensor index", 1},
    {"TVAL", "trainable values", 1}, {"TBUF", "buffer values", 1},      {"ADMM", "Adam first moments", 0},
    {"ADMV", "Adam second moments", 0},
};
enum { S_CONF, S_VOCB, S_STAT, S_RNGS, S_XTRA, S_TIDX, S_TVAL, S_TBUF, S_ADMM, S_ADMV, S_COUNT };
_Static_assert(sizeof SECTIONS / sizeof SECTIONS[0] == S_COUNT, "section table");

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

static int cmp_names(const void *a, const void *b) {
    return strcmp(*(const char *const *)a, *(const char *const *)b);
}

/* Duplicate names would make loading ambiguous: sort a copy of the name pointers and compare neighbours. */
static const char *find_duplicate(const char **names, int n) {
    qsort(names, (size_t)n, sizeof *names, cmp_names);
    for (int i = 1; i < n; i++)
        if (!strcmp(names[i - 1], names[i])) return names[i];
    return NULL;
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
        const char *dup = find_duplicate(names, p->n);
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

static const char *tag_str(const unsigned char *t, char *buf) {
    for (int i = 0; i < 4; i++) buf[i] = (t[i] >= 32 && t[i] < 127 && t[i] != '\'') ? (char)t[i] : '?';
    buf[4] = 0;
    return buf;
}

/* Inflates exactly dlen bytes from exactly slen bytes; anything else is a corrupt section. */
static const char *inflate_exact(const unsigned char *src, size_t slen, unsigned char *dst, size_t dlen) {
    z_stream zs;
    memset(&zs, 0, sizeof zs);
    if (inflateInit(&zs) != Z_OK) return "inflateInit failed";
    size_t in_left = slen, out_done = 0;
    unsigned char scratch;
    const char *why = NULL;
    zs.next_in = (Bytef *)src;
    for (;;) {
        if (zs.avail_in == 0 && in_left) {
            zs.avail_in = in_left > (1u << 30) ? (1u << 30) : (uInt)in_left;
            in_left -= zs.avail_in;
        }
        int into_scratch = out_done == dlen;
        if (into_scratch) { /* room for one byte too many, to notice it */
            zs.next_out = &scratch;
            zs.avail_out = 1;
        } else {
            size_t room = dlen - out_done;
            zs.next_out = dst + out_done;
            zs.avail_out = room > (1u << 30) ? (1u << 30) : (uInt)room;
        }
        uInt before = zs.avail_out;
        int ret = inflate(&zs, Z_NO_FLUSH);
        size_t got = before - zs.avail_out;
        if (into_scratch && got) { why = "data inflates to more than the declared size"; break; }
        out_done += got;
        if (ret == Z_STREAM_END) {
            if (out_done != dlen) why = "data inflates to less than the declared size";
            else if (zs.avail_in || in_left) why = "bytes after the end of the zlib stream";
            break;
        }
        if (ret == Z_OK) continue;
        if (ret == Z_BUF_ERROR && (zs.avail_in || in_left) && !into_scratch) continue;
        why = ret == Z_BUF_ERROR ? "zlib stream ends early" : (zs.msg ? zs.msg : "zlib data error");
        break;
    }
    inflateEnd(&zs);
    return why;
}

typedef struct {
    unsigned char *raw; /* raw_size + 1 bytes, NUL-terminated */
    size_t size;
    int present;
} section;

static void free_sections(section *s) {
    for (int i = 0; i < S_COUNT; i++) free(s[i].raw);
}

static void shape_str(int ndim, const int *shape, char *buf, size_t len) {
    size_t o = 0;
    o += (size_t)snprintf(buf + o, len - o, "[");
    for (int d = 0; d < ndim && o < len; d++) o += (size_t)snprintf(buf + o, len - o, d ? ",%d" : "%d", shape[d]);
    if (o < len) snprintf(buf + o, len - o, "]");
}

/* Parses the tensor index; offsets come from the order, trainables and buffers each packed in turn. */
static lipt_status parse_index(const section *s, const char *name, lipt_ckpt *ck, lipt_error *err) {
    const unsigned char *b = s->raw, *end = s->raw + s->size;
#define NEED(k, what)                                                                                           \
    do {                                                                                                        \
        if ((size_t)(end - b) < (size_t)(k))                                                                    \
            return lipt_fail(err, LIPT_ERR_FORMAT, "%s: tensor index ends inside %s: file is corrupt", name, what); \
    } while (0)
    NEED(4, "the tensor count");
    uint32_t n = lipt_get_u32(b);
    b += 4;
    if (n > MAX_TENSORS || n > s->size / 12)
        return lipt_fail(err, LIPT_ERR_FORMAT, "%s: tensor index declares an absurd %u tensors in %zu bytes", name, n,
                         s->size);
    ck->tensors = calloc(n ? n : 1, sizeof *ck->tensors);
    if (!ck->tensors) return lipt_fail(err, LIPT_ERR_NOMEM, "%s: no memory for %u tensor entries", name, n);
    uint64_t off_tr = 0, off_b = 0;
    for (uint32_t i = 0; i < n; i++) {
        lipt_ckpt_tensor *t = &ck->tensors[i];
        NEED(4, "a name length");
        uint32_t l = lipt_get_u32(b);
        b += 4;
        if (l == 0 || l > MAX_NAME)
            return lipt_fail(err, LIPT_ERR_FORMAT, "%s: tensor #%u has an absurd name length %u", name, i, l);
        NEED(l, "a tensor name");
        if (memchr(b, 0, l))
            return lipt_fail(err, LIPT_ERR_FORMAT, "%s: tensor #%u has a NUL byte in its name", name, i);
        t->name = malloc(l + 1);
        if (!t->name) return lipt_fail(err, LIPT_ERR_NOMEM, "%s: no memory for tensor names", name);
        memcpy(t->name, b, l);
        t->name[l] = 0;
        ck->n_tensors = (int)i + 1; /* so close() frees the names read so far */
        b += l;
        NEED(8, "flags and rank");
        uint32_t flags = lipt_get_u32(b), ndim = lipt_get_u32(b + 4);
        b += 8;
        if (flags > (LIPT_PARAM_NO_DECAY | LIPT_PARAM_BUFFER))
            return lipt_fail(err, LIPT_ERR_FORMAT, "%s: tensor '%s' has unknown flags 0x%x", name, t->name, flags);
        if (ndim < 1 || ndim > LIPT_MAX_DIMS)
            return lipt_fail(err, LIPT_ERR_FORMAT, "%s: tensor '%s' has %u dims (1..%d allowed)", name, t->name, ndim,
                             LIPT_MAX_DIMS);
        NEED(4 * ndim, "a shape");
        uint64_t numel = 1;
        for (uint32_t d = 0; d < ndim; d++, b += 4) {
            uint32_t v = lipt_get_u32(b);
            if (v > INT_MAX)
                return lipt_fail(err, LIPT_ERR_FORMAT, "%s: tensor '%s' has an absurd dimension %u", name, t->name, v);
            t->shape[d] = (int)v;
            numel = v == 0 || numel == 0 ? 0 : (numel > MAX_FLOATS / v ? MAX_FLOATS + 1 : numel * v);
        }
        if (numel > MAX_FLOATS)
            return lipt_fail(err, LIPT_ERR_FORMAT, "%s: tensor '%s' has an absurd size", name, t->name);
        t->ndim = (int)ndim;
        t->flags = (int)flags;
        t->numel = (size_t)numel;
        uint64_t *off = (flags & LIPT_PARAM_BUFFER) ? &off_b : &off_tr;
        t->offset = (size_t)*off;
        *off += numel;
        if (*off > MAX_FLOATS)
            return lipt_fail(err, LIPT_ERR_FORMAT, "%s: tensor index totals an absurd size", name);
    }
    if (b != end)
        return lipt_fail(err, LIPT_ERR_FORMAT, "%s: %zu stray bytes after the tensor index: file is corrupt", name,
                         (size_t)(end - b));
#undef NEED
    if (n > 1) {
        const char **names = malloc(n * sizeof *names);
        if (!names) return lipt_fail(err, LIPT_ERR_NOMEM, "%s: no memory checking tensor names", name);
        for (uint32_t i = 0; i < n; i++) names[i] = ck->tensors[i].name;
        const char *dup = find_duplicate(names, (int)n);
        lipt_status st = dup ? lipt_fail(err, LIPT_ERR_FORMAT, "%s: tensor '%s' appears twice in the index", name, dup)
                             : LIPT_OK;
        free(names);
        if (st) return st;
    }
    ck->n_train = (size_t)off_tr;
    ck->n_buf = (size_t)off_b;
    return LIPT_OK;
}

static lipt_status parse(const unsigned char *d, size_t n, const char *name, lipt_ckpt *ck, lipt_error *err) {
    if (!lipt_host_little_endian())
        return lipt_fail(err, LIPT_ERR_INTERNAL, "checkpoints are little-endian; this host is not supported");
    if (n == 0)
        return lipt_fail(err, LIPT_ERR_FORMAT, "%s: empty file (0 bytes), not a checkpoint: was the save interrupted?",
                         name);
    const size_t mlen = n < 8 ? n : 8;
    if (memcmp(d, LIPT_CKPT_MAGIC, mlen) != 0) {
        char found[9];
        for (size_t i = 0; i < 8; i++) found[i] = i < n && d[i] >= 32 && d[i] < 127 ? (char)d[i] : '.';
        found[mlen] = 0;
        return lipt_fail(err, LIPT_ERR_FORMAT,
                         "%s: bad magic \"%s\" (want \"" LIPT_CKPT_MAGIC "\"). HINT: not a lipt checkpoint; "
                         "pass a .ckpt file written by lipt",
                         name, found);
    }
    if (n < HDR_BYTES)
        return lipt_fail(err, LIPT_ERR_FORMAT, "%s: truncated: %zu bytes, the header alone needs %d", name, n,
                         HDR_BYTES);
    const uint32_t version = lipt_get_u32(d + 8);
    const uint32_t hcrc = lipt_crc32(0, d, 28), hcrc_stored = lipt_get_u32(d + 28);
    if (version != LIPT_CKPT_VERSION) {
        if (hcrc == hcrc_stored)
            return lipt_fail(err, LIPT_ERR_FORMAT,
                             "%s: checkpoint format version %u is not supported: this build reads version %u only "
                             "(use the lipt that wrote it)",
                             name, version, LIPT_CKPT_VERSION);
        return lipt_fail(err, LIPT_ERR_FORMAT,
                         "%s: header CRC mismatch and unknown format version %u (this build reads version %u): "
                         "file is corrupt",
                         name, version, LIPT_CKPT_VERSION);
    }
    if (hcrc != hcrc_stored)
        return lipt_fail(err, LIPT_ERR_FORMAT, "%s: header CRC mismatch (stored %08x, computed %08x): file is corrupt",
                         name, hcrc_stored, hcrc);
    const uint64_t fsize = lipt_get_u64(d + 16);
    const uint32_t n_sec = lipt_get_u32(d + 12);
    if (fsize > n)
        return lipt_fail(err, LIPT_ERR_FORMAT,
                         "%s: truncated: the header says %llu bytes, the file has %zu (%llu missing): "
                         "incomplete copy or interrupted write",
                         name, (unsigned long long)fsize, n, (unsigned long long)(fsize - n));
    if (fsize < n)
        return lipt_fail(err, LIPT_ERR_FORMAT, "%s: %zu bytes but the header says %llu: %zu bytes of trailing data",
                         name, n, (unsigned long long)fsize, n - (size_t)fsize);
    if (n_sec > MAX_SECTIONS)
        return lipt_fail(err, LIPT_ERR_FORMAT, "%s: header declares an absurd %u sections (at most %d)", name, n_sec,
                         MAX_SECTIONS);
    if (lipt_get_u32(d + 24) != 0)
        return lipt_fail(err, LIPT_ERR_FORMAT, "%s: unknown header flags 0x%08x (written by a newer lipt?)", name,
                         lipt_get_u32(d + 24));

    section sec[S_COUNT];
    memset(sec, 0, sizeof sec);
    size_t pos = HDR_BYTES;
    lipt_status st = LIPT_OK;
    for (uint32_t k = 0; k < n_sec && !st; k++) {
        char tb[5];
        if (n - pos < SEC_BYTES) {
            st = lipt_fail(err, LIPT_ERR_FORMAT, "%s: truncated: section %u header needs %d bytes at offset %zu, %zu left",
                           name, k, SEC_BYTES, pos, n - pos);
            break;
        }
        const unsigned char *h = d + pos;
        if (lipt_crc32(0, h, 28) != lipt_get_u32(h + 28)) {
            st = lipt_fail(err, LIPT_ERR_FORMAT, "%s: CRC mismatch in the header of section %u ('%s') at offset %zu: "
                           "file is corrupt", name, k, tag_str(h, tb), pos);
            break;
        }
        int id = -1;
        for (int s = 0; s < S_COUNT; s++)
            if (!memcmp(h, SECTIONS[s].tag, 4)) id = s;
        const char *what = id >= 0 ? SECTIONS[id].what : "unknown";
        const uint32_t codec = lipt_get_u32(h + 4);
        const uint64_t raw = lipt_get_u64(h + 8), stored = lipt_get_u64(h + 16);
        pos += SEC_BYTES;
        if (stored > n - pos) {
            st = lipt_fail(err, LIPT_ERR_FORMAT, "%s: section '%s' (%s) claims %llu bytes at offset %zu but %zu remain: "
                           "file is corrupt or truncated", name, tag_str(h, tb), what, (unsigned long long)stored,
                           pos, n - pos);
            break;
        }
        if (codec != CODEC_RAW && codec != CODEC_ZLIB) {
            st = lipt_fail(err, LIPT_ERR_FORMAT, "%s: section '%s' uses unknown codec %u", name, tag_str(h, tb), codec);
            break;
        }
        /* deflate cannot expand data by more than about 1032:1 */
        if ((codec == CODEC_RAW && raw != stored) ||
            (codec == CODEC_ZLIB && raw > stored * 1100 + 1024) || raw > MAX_FLOATS * 4) {
            st = lipt_fail(err, LIPT_ERR_FORMAT, "%s: section '%s' (%s) declares an absurd size: %llu bytes from %llu "
                           "stored", name, tag_str(h, tb), what, (unsigned long long)raw, (unsigned long long)stored);
            break;
        }
        const unsigned char *payload = d + pos;
        pos += (size_t)stored;
        if (lipt_crc32(0, payload, (size_t)stored) != lipt_get_u32(h + 24)) {
            st = lipt_fail(err, LIPT_ERR_FORMAT, "%s: CRC mismatch in section '%s' (%s): file is corrupt", name,
                           tag_str(h, tb), what);
            break;
        }
        if (id < 0) continue; /* a later minor revision's section: verified, not needed */
        if (sec[id].present) {
            st = lipt_fail(err, LIPT_ERR_FORMAT, "%s: section '%s' appears twice", name, SECTIONS[id].tag);
            break;
        }
        sec[id].present = 1;
        sec[id].size = (size_t)raw;
        sec[id].raw = malloc((size_t)raw + 1);
        if (!sec[id].raw) {
            st = lipt_fail(err, LIPT_ERR_NOMEM, "%s: no memory for section '%s' (%llu bytes)", name, SECTIONS[id].tag,
                           (unsigned long long)raw);
            break;
        }
        sec[id].raw[raw] = 0;
        if (codec == CODEC_RAW) {
            memcpy(sec[id].raw, payload, (size_t)raw);
        } else {
            const char *why = inflate_exact(payload, (size_t)stored, sec[id].raw, (size_t)raw);
            if (why)
                st = lipt_fail(err, LIPT_ERR_FORMAT, "%s: decompressing section '%s' (%s) failed: %s", name,
                               SECTIONS[id].tag, what, why);
        }
    }
    if (!st && pos != n)
        st = lipt_fail(err, LIPT_ERR_FORMAT, "%s: %zu bytes after the last of %u sections: file is corrupt", name,
                       n - pos, n_sec);
    for (int s = 0; s < S_COUNT && !st; s++)
        if (SECTIONS[s].required && !sec[s].present)
            st = lipt_fail(err, LIPT_ERR_FORMAT, "%s: section '%s' (%s) is missing", name, SECTIONS[s].tag,
                           SECTIONS[s].what);
    if (!st && sec[S_STAT].size != STAT_BYTES)
        st = lipt_fail(err, LIPT_ERR_FORMAT, "%s: training state section has %zu bytes, want %d", name,
                       sec[S_STAT].size, STAT_BYTES);
    if (!st && (sec[S_RNGS].size % RNG_BYTES || sec[S_RNGS].size / RNG_BYTES > INT_MAX))
        st = lipt_fail(err, LIPT_ERR_FORMAT, "%s: RNG section size %zu is not a whole number of states", name,
                       sec[S_RNGS].size);
    if (!st && memchr(sec[S_CONF].raw, 0, sec[S_CONF].size))
        st = lipt_fail(err, LIPT_ERR_FORMAT, "%s: model config text contains a NUL byte", name);
    if (!st) st = parse_index(&sec[S_TIDX], name, ck, err);
    if (!st) {
        const unsigned char *sb = sec[S_STAT].raw;
        ck->step = (int64_t)lipt_get_u64(sb);
        ck->adam_t = (int64_t)lipt_get_u64(sb + 8);
        uint32_t has_opt = lipt_get_u32(sb + 16);
        if (has_opt > 1 || lipt_get_u32(sb + 20) != 0)
            st = lipt_fail(err, LIPT_ERR_FORMAT, "%s: training state has bad flags", name);
        else if (has_opt != (uint32_t)sec[S_ADMM].present || has_opt != (uint32_t)sec[S_ADMV].present)
            st = lipt_fail(err, LIPT_ERR_FORMAT, "%s: optimizer flag and Adam moment sections disagree", name);
        ck->has_optimizer = (int)has_opt;
    }
    const struct { int id; size_t floats; } sized[] = {
        {S_TVAL, ck->n_train}, {S_TBUF, ck->n_buf}, {S_ADMM, ck->n_train}, {S_ADMV, ck->n_train}};
    for (int i = 0; i < 4 && !st; i++)
        if (sec[sized[i].id].present && sec[sized[i].id].size != sized[i].floats * sizeof(float))
            st = lipt_fail(err, LIPT_ERR_FORMAT, "%s: section '%s' (%s) holds %zu bytes, the tensor index needs %zu",
                           name, SECTIONS[sized[i].id].tag, SECTIONS[sized[i].id].what, sec[sized[i].id].size,
                           sized[i].floats * sizeof(float));
    if (st) {
        free_sections(sec);
        return st;
    }
    /* Hand the buffers over to ck. */
    ck->version = version;
    ck->config_text = (char *)sec[S_CONF].raw;
    ck->config_len = sec[S_CONF].size;
    ck->vocab = sec[S_VOCB].raw;
    ck->vocab_len = sec[S_VOCB].size;
    ck->extra = sec[S_XTRA].raw;
    ck->extra_len = sec[S_XTRA].size;
    ck->values = (float *)(void *)sec[S_TVAL].raw;
    ck->bufs = (float *)(void *)sec[S_TBUF].raw;
    ck->m = (float *)(void *)sec[S_ADMM].raw;
    ck->v = (float *)(void *)sec[S_ADMV].raw;
    ck->n_rngs = (int)(sec[S_RNGS].size / RNG_BYTES);
    ck->rngs = malloc((size_t)ck->n_rngs * sizeof *ck->rngs + 1);
    if (!ck->rngs) {
        free(sec[S_RNGS].raw);
        free(sec[S_STAT].raw);
        free(sec[S_TIDX].raw);
        return lipt_fail(err, LIPT_ERR_NOMEM, "%s: no memory for RNG states", name);
    }
    for (int i = 0; i < ck->n_rngs; i++)
        for (int k = 0; k < 4; k++) ck->rngs[i].s[k] = lipt_get_u64(sec[S_RNGS].raw + (size_t)i * RNG_BYTES + 8 * k);
    free(sec[S_RNGS].raw);
    free(sec[S_STAT].raw);
    free(sec[S_TIDX].raw);
    return LIPT_OK;
}

lipt_status lipt_ckpt_open_mem(const void *data, size_t len, lipt_ckpt *ck, lipt_error *err) {
    memset(ck, 0, sizeof *ck);
    lipt_status st = parse(data, len, "checkpoint (in memory)", ck, err);
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
    FILE *f = fopen(path, "rb");
    if (!f) {
        int e = errno;
        return lipt_fail(err, LIPT_ERR_IO, "cannot open checkpoint %s: %s", path, strerror(e));
    }
    struct stat sb;
    if (fstat(fileno(f), &sb) != 0 || !S_ISREG(sb.st_mode)) {
        fclose(f);
        return lipt_fail(err, LIPT_ERR_IO, "checkpoint %s is not a regular file", path);
    }
    size_t n = (size_t)sb.st_size;
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
    lipt_status st = parse(buf, n, path, ck, err);
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
