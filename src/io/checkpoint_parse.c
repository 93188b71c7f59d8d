/* The checkpoint reader's verification: a file's memory image checked whole (header, sizes, every CRC,
 * decompression, tensor index) before anything is handed to the caller (docs/CHECKPOINT.md). */
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <zlib.h>

#include "io/atomic_file.h"
#include "io/checkpoint_format.h"

static int cmp_names(const void *a, const void *b) {
    return strcmp(*(const char *const *)a, *(const char *const *)b);
}

/* Sorts the name pointers (the callers pass a copy) and compares neighbours. */
const char *lipt_ckpt_find_duplicate(const char **names, int n) {
    qsort(names, (size_t)n, sizeof *names, cmp_names);
    for (int i = 1; i < n; i++)
        if (!strcmp(names[i - 1], names[i])) return names[i];
    return NULL;
}

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
        const char *dup = lipt_ckpt_find_duplicate(names, (int)n);
        lipt_status st = dup ? lipt_fail(err, LIPT_ERR_FORMAT, "%s: tensor '%s' appears twice in the index", name, dup)
                             : LIPT_OK;
        free(names);
        if (st) return st;
    }
    ck->n_train = (size_t)off_tr;
    ck->n_buf = (size_t)off_b;
    return LIPT_OK;
}

/* The file header: magic, version, CRC, size, section count, flags. */
static lipt_status check_header(const unsigned char *d, size_t n, const char *name, uint32_t *version_out,
                                uint32_t *n_sec_out, lipt_error *err) {
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
    *version_out = version;
    *n_sec_out = n_sec;
    return LIPT_OK;
}

/* Section k at *pos (advanced past it): header CRC, size, codec and payload CRC checked, a known section stored
 * into sec[] (inflated), an unknown one skipped. */
static lipt_status read_section(const unsigned char *d, size_t n, size_t *pos, uint32_t k, const char *name,
                                section *sec, lipt_error *err) {
    char tb[5];
    if (n - *pos < SEC_BYTES)
        return lipt_fail(err, LIPT_ERR_FORMAT, "%s: truncated: section %u header needs %d bytes at offset %zu, %zu left",
                         name, k, SEC_BYTES, *pos, n - *pos);
    const unsigned char *h = d + *pos;
    if (lipt_crc32(0, h, 28) != lipt_get_u32(h + 28))
        return lipt_fail(err, LIPT_ERR_FORMAT, "%s: CRC mismatch in the header of section %u ('%s') at offset %zu: "
                         "file is corrupt", name, k, tag_str(h, tb), *pos);
    int id = -1;
    for (int s = 0; s < S_COUNT; s++)
        if (!memcmp(h, SECTIONS[s].tag, 4)) id = s;
    const char *what = id >= 0 ? SECTIONS[id].what : "unknown";
    const uint32_t codec = lipt_get_u32(h + 4);
    const uint64_t raw = lipt_get_u64(h + 8), stored = lipt_get_u64(h + 16);
    *pos += SEC_BYTES;
    if (stored > n - *pos)
        return lipt_fail(err, LIPT_ERR_FORMAT, "%s: section '%s' (%s) claims %llu bytes at offset %zu but %zu remain: "
                         "file is corrupt or truncated", name, tag_str(h, tb), what, (unsigned long long)stored,
                         *pos, n - *pos);
    if (codec != CODEC_RAW && codec != CODEC_ZLIB)
        return lipt_fail(err, LIPT_ERR_FORMAT, "%s: section '%s' uses unknown codec %u", name, tag_str(h, tb), codec);
    /* deflate cannot expand data by more than about 1032:1 */
    if ((codec == CODEC_RAW && raw != stored) ||
        (codec == CODEC_ZLIB && raw > stored * 1100 + 1024) || raw > MAX_FLOATS * 4)
        return lipt_fail(err, LIPT_ERR_FORMAT, "%s: section '%s' (%s) declares an absurd size: %llu bytes from %llu "
                         "stored", name, tag_str(h, tb), what, (unsigned long long)raw, (unsigned long long)stored);
    const unsigned char *payload = d + *pos;
    *pos += (size_t)stored;
    if (lipt_crc32(0, payload, (size_t)stored) != lipt_get_u32(h + 24))
        return lipt_fail(err, LIPT_ERR_FORMAT, "%s: CRC mismatch in section '%s' (%s): file is corrupt", name,
                         tag_str(h, tb), what);
    if (id < 0) return LIPT_OK; /* a later minor revision's section: verified, not needed */
    if (raw > SECTIONS[id].max)
        return lipt_fail(err, LIPT_ERR_FORMAT, "%s: section '%s' (%s) declares %llu bytes, more than the cap of %llu "
                         "for that section (docs/CHECKPOINT.md): file is corrupt or not a lipt checkpoint", name,
                         SECTIONS[id].tag, what, (unsigned long long)raw, (unsigned long long)SECTIONS[id].max);
    if (sec[id].present) return lipt_fail(err, LIPT_ERR_FORMAT, "%s: section '%s' appears twice", name, SECTIONS[id].tag);
    sec[id].present = 1;
    sec[id].size = (size_t)raw;
    sec[id].raw = malloc((size_t)raw + 1);
    if (!sec[id].raw)
        return lipt_fail(err, LIPT_ERR_NOMEM, "%s: no memory for section '%s' (%llu bytes)", name, SECTIONS[id].tag,
                         (unsigned long long)raw);
    sec[id].raw[raw] = 0;
    if (codec == CODEC_RAW) {
        memcpy(sec[id].raw, payload, (size_t)raw);
    } else {
        const char *why = inflate_exact(payload, (size_t)stored, sec[id].raw, (size_t)raw);
        if (why)
            return lipt_fail(err, LIPT_ERR_FORMAT, "%s: decompressing section '%s' (%s) failed: %s", name,
                             SECTIONS[id].tag, what, why);
    }
    return LIPT_OK;
}

/* What the sections must hold together: the required ones, the training state's and the RNG states' sizes, a config
 * without NUL, a valid tensor index (parsed into ck) and value sections of the sizes it implies. */
static lipt_status check_sections(const section *sec, const char *name, lipt_ckpt *ck, lipt_error *err) {
    lipt_status st = LIPT_OK;
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
        else if (ck->step < 0 || ck->adam_t < 0) /* a resumed run would otherwise fail later, misleadingly */
            st = lipt_fail(err, LIPT_ERR_FORMAT, "%s: training state has a negative step (%lld) or Adam step (%lld): file "
                           "is corrupt", name, (long long)ck->step, (long long)ck->adam_t);
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
    return st;
}

/* Hand the buffers over to ck (the decoded ones freed). */
static lipt_status take_sections(section *sec, uint32_t version, const char *name, lipt_ckpt *ck, lipt_error *err) {
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

lipt_status lipt_ckpt_parse(const unsigned char *d, size_t n, const char *name, lipt_ckpt *ck, lipt_error *err) {
    uint32_t version = 0, n_sec = 0;
    lipt_status st = check_header(d, n, name, &version, &n_sec, err);
    if (st) return st;
    section sec[S_COUNT];
    memset(sec, 0, sizeof sec);
    size_t pos = HDR_BYTES;
    for (uint32_t k = 0; k < n_sec && !st; k++) st = read_section(d, n, &pos, k, name, sec, err);
    if (!st && pos != n)
        st = lipt_fail(err, LIPT_ERR_FORMAT, "%s: %zu bytes after the last of %u sections: file is corrupt", name,
                       n - pos, n_sec);
    if (!st) st = check_sections(sec, name, ck, err);
    if (st) {
        free_sections(sec);
        return st;
    }
    return take_sections(sec, version, name, ck, err);
}
