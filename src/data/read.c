/* Corpus file readers: plain files, gzip (zlib gz*), zip members (own header parsing + raw inflate), PTB char. */
#include "lipt/data.h"

#include <errno.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>
#include <zlib.h>

void lipt_bytes_free(lipt_bytes *b) {
    if (!b) return;
    free(b->data);
    b->data = NULL;
    b->len = 0;
}

/* Own malloc + check: sizes come from files, so failure is a user-visible error, not an abort. */
static lipt_status alloc_bytes(lipt_bytes *out, size_t n, const char *path, lipt_error *err) {
    out->data = malloc(n + 1);
    out->len = 0;
    if (!out->data) return lipt_fail(err, LIPT_ERR_NOMEM, "%s: cannot allocate %zu bytes", path, n + 1);
    out->data[n] = 0;
    return LIPT_OK;
}

/* The documented cap on a corpus in memory, plain or decompressed: LIPT_MAX_CORPUS_GB (default 4; enwik8 is 0.1), so
 * that a small compressed file, or a large file named by mistake (or by a checkpoint's stored path), cannot fill the
 * memory unasked. */
size_t lipt_corpus_cap(void) {
    const char *e = getenv("LIPT_MAX_CORPUS_GB");
    const double gb = e && atof(e) > 0 ? atof(e) : 4.0;
    return gb * 1e9 >= (double)SIZE_MAX ? SIZE_MAX : (size_t)(gb * 1e9);
}

static lipt_status over_cap(const char *path, size_t n, lipt_error *err) {
    return lipt_fail(err, LIPT_ERR_FORMAT, "%s decompresses to more than %zu bytes, the cap on a corpus (set "
                     "LIPT_MAX_CORPUS_GB to raise it)", path, n);
}

lipt_status lipt_read_plain(const char *path, lipt_bytes *out, lipt_error *err) {
    out->data = NULL;
    out->len = 0;
    uint64_t size = 0;
    FILE *f = lipt_open_regular(path, &size, err); /* a FIFO or device is refused, never waited on */
    if (!f) return err ? err->status : LIPT_ERR_IO;
    if (size > lipt_corpus_cap()) { /* checked before allocating: a plain file is read whole */
        fclose(f);
        return lipt_fail(err, LIPT_ERR_FORMAT, "%s is %llu bytes, above the cap on a corpus of %zu bytes (set "
                         "LIPT_MAX_CORPUS_GB to raise it)", path, (unsigned long long)size, lipt_corpus_cap());
    }
    size_t n = (size_t)size;
    lipt_status s = alloc_bytes(out, n, path, err);
    if (s) {
        fclose(f);
        return s;
    }
    size_t got = n ? fread(out->data, 1, n, f) : 0;
    int bad = ferror(f);
    fclose(f);
    if (got != n || bad) {
        lipt_bytes_free(out);
        return lipt_fail(err, LIPT_ERR_IO, "%s: short read (%zu of %zu bytes)", path, got, n);
    }
    out->len = n;
    return LIPT_OK;
}

/* The first bytes of a corpus file (regular files only). LIPT_OK, or the reason in err. */
static lipt_status read_magic(const char *path, uint8_t m[4], size_t *got, lipt_error *err) {
    FILE *f = lipt_open_regular(path, NULL, err);
    if (!f) return err ? err->status : LIPT_ERR_IO;
    *got = fread(m, 1, 4, f);
    fclose(f);
    return LIPT_OK;
}

lipt_status lipt_read_gzip(const char *path, lipt_bytes *out, lipt_error *err) {
    out->data = NULL;
    out->len = 0;
    uint8_t m[4] = {0};
    size_t got = 0;
    lipt_status rs = read_magic(path, m, &got, err);
    if (rs != LIPT_OK) return rs;
    if (got < 2 || m[0] != 0x1f || m[1] != 0x8b)
        return lipt_fail(err, LIPT_ERR_FORMAT, "%s: not a gzip file (expected magic bytes 1f 8b)", path);
    /* opened as every input is (gzopen would wait on a FIFO swapped in since), then handed to zlib */
    FILE *f = lipt_open_regular(path, NULL, err);
    if (!f) return err ? err->status : LIPT_ERR_IO;
    const int fd = dup(fileno(f));
    fclose(f);
    gzFile g = fd >= 0 ? gzdopen(fd, "rb") : NULL;
    if (!g) {
        if (fd >= 0) close(fd);
        return lipt_fail(err, LIPT_ERR_IO, "%s: cannot read it as gzip (out of memory or descriptors)", path);
    }
    gzbuffer(g, 1 << 17);
    size_t cap = 1 << 20, n = 0;
    uint8_t *buf = malloc(cap + 1);
    if (!buf) {
        gzclose(g);
        return lipt_fail(err, LIPT_ERR_NOMEM, "%s: cannot allocate %zu bytes", path, cap + 1);
    }
    for (;;) {
        if (n == cap) {
            size_t nc = cap * 2;
            uint8_t *nb = realloc(buf, nc + 1);
            if (!nb) {
                free(buf);
                gzclose(g);
                return lipt_fail(err, LIPT_ERR_NOMEM, "%s: cannot allocate %zu bytes", path, nc + 1);
            }
            buf = nb;
            cap = nc;
        }
        size_t want = cap - n;
        if (want > (1u << 30)) want = 1u << 30;
        int r = gzread(g, buf + n, (unsigned)want);
        if (r < 0) break;
        if (r == 0) break;
        n += (size_t)r;
        if (n > lipt_corpus_cap()) {
            free(buf);
            gzclose(g);
            return over_cap(path, lipt_corpus_cap(), err);
        }
    }
    int zerr = Z_OK;
    const char *zmsg = gzerror(g, &zerr);
    char msg[128];
    snprintf(msg, sizeof msg, "%s", zmsg ? zmsg : "");
    int cl = gzclose(g);
    if (zerr != Z_OK || cl != Z_OK) {
        free(buf);
        if (zerr == Z_BUF_ERROR || cl == Z_BUF_ERROR)
            return lipt_fail(err, LIPT_ERR_FORMAT, "%s: gzip stream is truncated (%zu bytes decoded before the end)",
                             path, n);
        return lipt_fail(err, LIPT_ERR_FORMAT, "%s: corrupt gzip data after %zu bytes: %s", path, n,
                         msg[0] ? msg : "zlib error");
    }
    buf[n] = 0;
    out->data = buf;
    out->len = n;
    return LIPT_OK;
}

/* ---- zip ---- */

static uint16_t rd16(const uint8_t *p) { return (uint16_t)(p[0] | (p[1] << 8)); }
static uint32_t rd32(const uint8_t *p) { return (uint32_t)p[0] | ((uint32_t)p[1] << 8) | ((uint32_t)p[2] << 16) | ((uint32_t)p[3] << 24); }
static uint64_t rd64(const uint8_t *p) { return (uint64_t)rd32(p) | ((uint64_t)rd32(p + 4) << 32); }

typedef struct {
    const uint8_t *name;
    size_t name_len;
    uint16_t flags, method;
    uint32_t crc;
    uint64_t csize, usize, local_off;
} zip_entry;

static int name_is(const zip_entry *e, const char *s) {
    return strlen(s) == e->name_len && memcmp(e->name, s, e->name_len) == 0;
}

/* Directories end in '/'; macOS archivers add resource forks under __MACOSX/. */
static int is_data_member(const zip_entry *e) {
    if (e->name_len == 0 || e->name[e->name_len - 1] == '/') return 0;
    if (e->name_len >= 9 && memcmp(e->name, "__MACOSX/", 9) == 0) return 0;
    return 1;
}

/* Reads the central directory entry at *pos; fills e. Returns 0, or -1 when malformed. */
static int parse_central(const uint8_t *z, size_t n, size_t *pos, zip_entry *e) {
    size_t p = *pos;
    if (p > n || n - p < 46 || rd32(z + p) != 0x02014b50u) return -1;
    e->flags = rd16(z + p + 8);
    e->method = rd16(z + p + 10);
    e->crc = rd32(z + p + 16);
    e->csize = rd32(z + p + 20);
    e->usize = rd32(z + p + 24);
    size_t nl = rd16(z + p + 28), xl = rd16(z + p + 30), cl = rd16(z + p + 32);
    e->local_off = rd32(z + p + 42);
    if (n - p - 46 < nl + xl + cl) return -1;
    e->name = z + p + 46;
    e->name_len = nl;
    /* zip64 extra field (id 1): 8-byte values for whichever 32-bit fields are saturated, in this order */
    const uint8_t *x = z + p + 46 + nl, *xe = x + xl;
    while (xe - x >= 4) {
        uint16_t id = rd16(x), sz = rd16(x + 2);
        if (xe - x - 4 < sz) return -1;
        if (id == 1) {
            const uint8_t *q = x + 4, *qe = q + sz;
            if (e->usize == 0xffffffffu) { if (qe - q < 8) return -1; e->usize = rd64(q); q += 8; }
            if (e->csize == 0xffffffffu) { if (qe - q < 8) return -1; e->csize = rd64(q); q += 8; }
            if (e->local_off == 0xffffffffu) { if (qe - q < 8) return -1; e->local_off = rd64(q); q += 8; }
        }
        x += 4 + sz;
    }
    *pos = p + 46 + nl + xl + cl;
    return 0;
}

static lipt_status extract(const uint8_t *z, size_t n, const zip_entry *e, const char *label, lipt_bytes *out,
                           lipt_error *err) {
    char nm[256];
    snprintf(nm, sizeof nm, "%.*s", (int)(e->name_len < 200 ? e->name_len : 200), (const char *)e->name);
    if (e->flags & 1) return lipt_fail(err, LIPT_ERR_FORMAT, "%s: member %s is encrypted (not supported)", label, nm);
    if (e->method != 0 && e->method != 8)
        return lipt_fail(err, LIPT_ERR_FORMAT,
                         "%s: member %s uses compression method %u; only stored (0) and deflate (8) are supported",
                         label, nm, e->method);
    if (e->local_off > n || n - e->local_off < 30 || rd32(z + e->local_off) != 0x04034b50u)
        return lipt_fail(err, LIPT_ERR_FORMAT, "%s: member %s: no local file header at offset %llu", label, nm,
                         (unsigned long long)e->local_off);
    const uint8_t *lh = z + e->local_off;
    size_t lnl = rd16(lh + 26), lxl = rd16(lh + 28);
    size_t data_off = (size_t)e->local_off + 30 + lnl + lxl;
    if (data_off > n || n - data_off < e->csize)
        return lipt_fail(err, LIPT_ERR_FORMAT, "%s: member %s is truncated (needs %llu compressed bytes at offset %zu, file has %zu)",
                         label, nm, (unsigned long long)e->csize, data_off, n);
    if (lnl != e->name_len || memcmp(lh + 30, e->name, lnl) != 0)
        return lipt_fail(err, LIPT_ERR_FORMAT, "%s: member %s: local header name differs from the central directory", label, nm);
    if (e->usize > (uint64_t)SIZE_MAX - 1)
        return lipt_fail(err, LIPT_ERR_NOMEM, "%s: member %s is too large (%llu bytes)", label, nm, (unsigned long long)e->usize);
    size_t us = (size_t)e->usize;
    if (us > lipt_corpus_cap()) return over_cap(label, lipt_corpus_cap(), err);
    lipt_status s = alloc_bytes(out, us, label, err);
    if (s) return s;
    const uint8_t *src = z + data_off;
    if (e->method == 0) {
        if (e->csize != e->usize) {
            lipt_bytes_free(out);
            return lipt_fail(err, LIPT_ERR_FORMAT, "%s: stored member %s: sizes differ (%llu vs %llu)", label, nm,
                             (unsigned long long)e->csize, (unsigned long long)e->usize);
        }
        memcpy(out->data, src, us);
    } else {
        z_stream zs;
        memset(&zs, 0, sizeof zs);
        if (inflateInit2(&zs, -MAX_WBITS) != Z_OK) {
            lipt_bytes_free(out);
            return lipt_fail(err, LIPT_ERR_INTERNAL, "%s: inflateInit2 failed", label);
        }
        /* zlib counts in uInt: feed and drain in chunks so members over 4 GiB work too */
        size_t in_left = (size_t)e->csize, out_done = 0;
        int r = Z_OK, too_long = 0;
        zs.next_in = (Bytef *)src;
        while (r == Z_OK) {
            if (zs.avail_in == 0 && in_left) {
                zs.avail_in = (uInt)(in_left > (1u << 30) ? (1u << 30) : in_left);
                in_left -= zs.avail_in;
            }
            size_t room = us - out_done;
            zs.next_out = out->data + out_done;
            zs.avail_out = (uInt)(room > (1u << 30) ? (1u << 30) : room);
            uInt before = zs.avail_out;
            /* one spare byte past the end, so a stream longer than usize is noticed */
            uint8_t spare;
            if (room == 0) {
                zs.next_out = &spare;
                zs.avail_out = 1;
                before = 1;
            }
            r = inflate(&zs, Z_NO_FLUSH);
            size_t produced = before - zs.avail_out;
            if (room == 0 && produced) {
                too_long = 1;
                break;
            }
            out_done += produced;
            if (r == Z_BUF_ERROR && zs.avail_in == 0 && in_left == 0) break; /* input ran out */
            if (r == Z_BUF_ERROR) r = Z_OK;
        }
        inflateEnd(&zs);
        if (too_long || r != Z_STREAM_END || out_done != us) {
            lipt_bytes_free(out);
            if (too_long)
                return lipt_fail(err, LIPT_ERR_FORMAT, "%s: member %s: deflate stream is longer than the %zu bytes the directory says",
                                 label, nm, us);
            if (r == Z_STREAM_END || r == Z_BUF_ERROR)
                return lipt_fail(err, LIPT_ERR_FORMAT,
                                 "%s: member %s: deflate stream gives %zu bytes, the directory says %zu%s", label, nm,
                                 out_done, us, r == Z_STREAM_END ? "" : " (stream truncated)");
            return lipt_fail(err, LIPT_ERR_FORMAT, "%s: member %s: corrupt deflate data after %zu output bytes", label,
                             nm, out_done);
        }
    }
    /* CRC-32 over the whole member, in uInt-sized chunks */
    uLong c = crc32(0L, Z_NULL, 0);
    for (size_t off = 0; off < us;) {
        size_t k = us - off > (1u << 30) ? (1u << 30) : us - off;
        c = crc32(c, out->data + off, (uInt)k);
        off += k;
    }
    if ((uint32_t)c != e->crc) {
        lipt_bytes_free(out);
        return lipt_fail(err, LIPT_ERR_FORMAT, "%s: member %s: CRC-32 mismatch (data %08x, archive says %08x): corrupt archive",
                         label, nm, (unsigned)c, (unsigned)e->crc);
    }
    out->len = us;
    return LIPT_OK;
}

static const char *base_name(const char *p) {
    const char *s = strrchr(p, '/');
    return s ? s + 1 : p;
}

lipt_status lipt_unzip_mem(const uint8_t *z, size_t n, const char *member, const char *label, lipt_bytes *out,
                           lipt_error *err) {
    out->data = NULL;
    out->len = 0;
    if (!label) label = "zip archive";
    /* end of central directory: 22 bytes + a comment of up to 65535, so search backwards from the end */
    if (n < 22) return lipt_fail(err, LIPT_ERR_FORMAT, "%s: too short for a zip archive (%zu bytes)", label, n);
    size_t eocd = SIZE_MAX;
    size_t lo = n - 22 > 65535 ? n - 22 - 65535 : 0;
    for (size_t p = n - 22 + 1; p-- > lo;)
        if (rd32(z + p) == 0x06054b50u && p + 22 + rd16(z + p + 20) <= n) {
            eocd = p;
            break;
        }
    if (eocd == SIZE_MAX)
        return lipt_fail(err, LIPT_ERR_FORMAT, "%s: no zip end-of-central-directory record (not a zip, or truncated)", label);
    uint64_t entries = rd16(z + eocd + 10), cd_size = rd32(z + eocd + 12), cd_off = rd32(z + eocd + 16);
    if (entries == 0xffff || cd_size == 0xffffffffu || cd_off == 0xffffffffu) {
        /* zip64: a locator sits right before the classic record and points to the zip64 record */
        if (eocd < 20 || rd32(z + eocd - 20) != 0x07064b50u)
            return lipt_fail(err, LIPT_ERR_FORMAT, "%s: zip64 archive without a zip64 locator", label);
        uint64_t r64 = rd64(z + eocd - 20 + 8);
        if (r64 > n || n - r64 < 56 || rd32(z + r64) != 0x06064b50u)
            return lipt_fail(err, LIPT_ERR_FORMAT, "%s: bad zip64 end-of-central-directory record", label);
        entries = rd64(z + r64 + 32);
        cd_size = rd64(z + r64 + 40);
        cd_off = rd64(z + r64 + 48);
    }
    if (cd_off > n || n - cd_off < cd_size)
        return lipt_fail(err, LIPT_ERR_FORMAT, "%s: central directory (offset %llu, %llu bytes) lies outside the file (%zu bytes): truncated?",
                         label, (unsigned long long)cd_off, (unsigned long long)cd_size, n);

    const char *want = member;
    char stem[256] = "";
    const char *bn = base_name(label);
    size_t bl = strlen(bn);
    if (bl > 4 && bl < sizeof stem && strcmp(bn + bl - 4, ".zip") == 0) snprintf(stem, sizeof stem, "%.*s", (int)(bl - 4), bn);

    zip_entry found, e, only;
    int have = 0, n_data = 0, have_stem = 0;
    zip_entry stem_e;
    char names[256] = "";
    size_t pos = (size_t)cd_off, cd_end = (size_t)(cd_off + cd_size);
    for (uint64_t i = 0; i < entries; i++) {
        if (parse_central(z, cd_end, &pos, &e) != 0)
            return lipt_fail(err, LIPT_ERR_FORMAT, "%s: malformed central directory entry %llu", label, (unsigned long long)i);
        if (want) {
            if (name_is(&e, want)) {
                found = e;
                have = 1;
                break;
            }
        } else if (is_data_member(&e)) {
            if (n_data == 0) only = e;
            n_data++;
            if (stem[0] && name_is(&e, stem)) {
                stem_e = e;
                have_stem = 1;
            }
        }
        if (is_data_member(&e) && strlen(names) + e.name_len + 3 < sizeof names) {
            if (names[0]) strcat(names, ", ");
            strncat(names, (const char *)e.name, e.name_len);
        }
    }
    if (want && !have)
        return lipt_fail(err, LIPT_ERR_FORMAT, "%s: no member named %s (members: %s)", label, want, names[0] ? names : "none");
    if (!want) {
        if (n_data == 1) found = only;
        else if (have_stem) found = stem_e;
        else if (n_data == 0) return lipt_fail(err, LIPT_ERR_FORMAT, "%s: the archive holds no file", label);
        else
            return lipt_fail(err, LIPT_ERR_FORMAT, "%s: %d members and none named %s; say which one (members: %s)", label,
                             n_data, stem[0] ? stem : "like the archive", names);
    }
    return extract(z, n, &found, label, out, err);
}

lipt_status lipt_read_zip_member(const char *path, const char *member, lipt_bytes *out, lipt_error *err) {
    lipt_bytes z;
    lipt_status s = lipt_read_plain(path, &z, err);
    if (s) {
        out->data = NULL;
        out->len = 0;
        return s;
    }
    s = lipt_unzip_mem(z.data, z.len, member, path, out, err);
    lipt_bytes_free(&z);
    return s;
}

lipt_status lipt_read_auto(const char *path, lipt_bytes *out, lipt_error *err) {
    uint8_t m[4] = {0};
    size_t got = 0;
    out->data = NULL;
    out->len = 0;
    const lipt_status rs = read_magic(path, m, &got, err);
    if (rs != LIPT_OK) return rs;
    if (got >= 2 && m[0] == 0x1f && m[1] == 0x8b) return lipt_read_gzip(path, out, err);
    if (got >= 4 && m[0] == 'P' && m[1] == 'K' && m[2] == 3 && m[3] == 4) return lipt_read_zip_member(path, NULL, out, err);
    /* other compressors: training on their bytes would silently learn the compressed stream */
    static const struct { uint8_t magic[4]; size_t n; const char *name, *undo; } other[] = {
        {{0xFD, '7', 'z', 'X'}, 4, "xz", "xz -dk"},          {{0x28, 0xB5, 0x2F, 0xFD}, 4, "zstd", "zstd -d"},
        {{'B', 'Z', 'h', 0}, 3, "bzip2", "bunzip2 -k"},       {{'7', 'z', 0xBC, 0xAF}, 4, "7-zip", "7z x"},
        {{0x04, 0x22, 0x4D, 0x18}, 4, "lz4", "lz4 -d"},       {{0x5D, 0x00, 0x00, 0}, 3, "lzma", "unlzma -k"},
    };
    for (size_t i = 0; i < sizeof other / sizeof other[0]; i++)
        if (got >= other[i].n && memcmp(m, other[i].magic, other[i].n) == 0)
            return lipt_fail(err, LIPT_ERR_FORMAT,
                             "%s is %s-compressed: lipt reads plain text, gzip and zip; decompress it first (%s %s)", path,
                             other[i].name, other[i].undo, path);
    return lipt_read_plain(path, out, err);
}

/* ---- PTB char ---- */

lipt_status lipt_ptb_parse(const uint8_t *buf, size_t n, const char *label, lipt_bytes *out, lipt_error *err) {
    if (!label) label = "PTB char data";
    lipt_status s = alloc_bytes(out, n, label, err);
    if (s) return s;
    size_t k = 0, line = 1, col = 0;
    int prev_sym = 0; /* previous byte was a symbol other than '\n' (so a separator must come next) */
    for (size_t i = 0; i < n; i++) {
        uint8_t c = buf[i];
        col++;
        if (c == ' ') {
            prev_sym = 0;
            continue;
        }
        if (c == '\r' && i + 1 < n && buf[i + 1] == '\n') continue;
        if (c == '\n') {
            out->data[k++] = '\n';
            prev_sym = 0;
            line++;
            col = 0;
            continue;
        }
        if (prev_sym) {
            lipt_bytes_free(out);
            return lipt_fail(err, LIPT_ERR_FORMAT,
                             "%s:%zu:%zu: symbols '%c%c' are not separated by a space; a PTB char file has one space "
                             "after every symbol (is this the word-level file?)",
                             label, line, col, buf[i - 1] >= 32 && buf[i - 1] < 127 ? buf[i - 1] : '?',
                             c >= 32 && c < 127 ? c : '?');
        }
        out->data[k++] = c;
        prev_sym = 1;
    }
    out->data[k] = 0;
    out->len = k;
    return LIPT_OK;
}
