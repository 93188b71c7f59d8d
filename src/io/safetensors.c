/* safetensors export: u64 little-endian header length, JSON header, then the raw little-endian F32 data. */
#include "lipt/safetensors.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "io/atomic_file.h"

typedef struct {
    char *s;
    size_t n, cap;
} sbuf;

static void sb_put(sbuf *b, const char *s, size_t n) {
    if (b->n + n + 1 > b->cap) {
        size_t cap = b->cap ? b->cap : 1024;
        while (cap < b->n + n + 1) cap *= 2;
        char *r = realloc(b->s, cap);
        LIPT_CHECK(r, "out of memory building a safetensors header (%zu bytes)", cap);
        b->s = r;
        b->cap = cap;
    }
    memcpy(b->s + b->n, s, n);
    b->n += n;
    b->s[b->n] = 0;
}

static void sb_str(sbuf *b, const char *s) { sb_put(b, s, strlen(s)); }

static void sb_u64(sbuf *b, unsigned long long v) {
    char t[24];
    int k = snprintf(t, sizeof t, "%llu", v);
    sb_put(b, t, (size_t)k);
}

/* Length of the valid UTF-8 sequence at s (0 if invalid): JSON must be UTF-8 for safetensors readers. */
static size_t utf8_len(const unsigned char *s) {
    unsigned c = s[0];
    size_t n;
    unsigned min;
    if (c < 0x80) return 1;
    if ((c & 0xE0) == 0xC0) n = 2, min = 0x80;
    else if ((c & 0xF0) == 0xE0) n = 3, min = 0x800;
    else if ((c & 0xF8) == 0xF0) n = 4, min = 0x10000;
    else return 0;
    unsigned cp = c & (0x7F >> n);
    for (size_t i = 1; i < n; i++) {
        if ((s[i] & 0xC0) != 0x80) return 0;
        cp = cp << 6 | (s[i] & 0x3F);
    }
    if (cp < min || cp > 0x10FFFF || (cp >= 0xD800 && cp <= 0xDFFF)) return 0;
    return n;
}

/* A JSON string literal; returns 0 on invalid UTF-8. */
static int sb_json(sbuf *b, const char *str) {
    const unsigned char *s = (const unsigned char *)str;
    sb_put(b, "\"", 1);
    while (*s) {
        unsigned c = *s;
        if (c == '"' || c == '\\') {
            char e[2] = {'\\', (char)c};
            sb_put(b, e, 2);
            s++;
        } else if (c < 0x20) {
            char e[8];
            const char *named = c == '\n' ? "\\n" : c == '\t' ? "\\t" : c == '\r' ? "\\r" : NULL;
            if (named) sb_str(b, named);
            else {
                snprintf(e, sizeof e, "\\u%04x", c);
                sb_str(b, e);
            }
            s++;
        } else {
            size_t k = utf8_len(s);
            if (!k) return 0;
            sb_put(b, (const char *)s, k);
            s += k;
        }
    }
    sb_put(b, "\"", 1);
    return 1;
}

lipt_status lipt_safetensors_save(const char *path, const lipt_params *p, const lipt_st_meta *meta, int n_meta,
                                  lipt_error *err) {
    if (!lipt_host_little_endian())
        return lipt_fail(err, LIPT_ERR_INTERNAL, "safetensors export needs a little-endian host");
    if (!p || !p->finalized) return lipt_fail(err, LIPT_ERR_ARG, "safetensors %s: parameters not finalized", path);
    if (n_meta < 0 || (n_meta && !meta)) return lipt_fail(err, LIPT_ERR_ARG, "safetensors %s: bad metadata list", path);
    for (int i = 0; i < p->n; i++) {
        if (!strcmp(p->list[i]->name, "__metadata__"))
            return lipt_fail(err, LIPT_ERR_ARG, "safetensors %s: a tensor may not be named __metadata__", path);
        for (int j = 0; j < i; j++)
            if (!strcmp(p->list[i]->name, p->list[j]->name))
                return lipt_fail(err, LIPT_ERR_ARG, "safetensors %s: two tensors are named '%s'", path,
                                 p->list[i]->name);
    }
    for (int i = 0; i < n_meta; i++) {
        if (!meta[i].key || !meta[i].value)
            return lipt_fail(err, LIPT_ERR_ARG, "safetensors %s: metadata entry %d has a NULL key or value", path, i);
        for (int j = 0; j < i; j++)
            if (!strcmp(meta[i].key, meta[j].key))
                return lipt_fail(err, LIPT_ERR_ARG, "safetensors %s: metadata key '%s' given twice", path, meta[i].key);
    }

    sbuf h = {0};
    int ok = 1;
    sb_str(&h, "{");
    if (n_meta) {
        sb_str(&h, "\"__metadata__\":{");
        for (int i = 0; i < n_meta && ok; i++) {
            if (i) sb_str(&h, ",");
            ok = sb_json(&h, meta[i].key);
            sb_str(&h, ":");
            ok = ok && sb_json(&h, meta[i].value);
            if (!ok) {
                free(h.s);
                return lipt_fail(err, LIPT_ERR_ARG, "safetensors %s: metadata entry %d is not valid UTF-8", path, i);
            }
        }
        sb_str(&h, "}");
    }
    unsigned long long off = 0;
    for (int i = 0; i < p->n; i++) {
        const lipt_tensor *t = p->list[i];
        if (n_meta || i) sb_str(&h, ",");
        if (!sb_json(&h, t->name)) {
            free(h.s);
            return lipt_fail(err, LIPT_ERR_ARG, "safetensors %s: tensor name #%d is not valid UTF-8", path, i);
        }
        sb_str(&h, ":{\"dtype\":\"F32\",\"shape\":[");
        for (int d = 0; d < t->ndim; d++) {
            if (d) sb_str(&h, ",");
            sb_u64(&h, (unsigned long long)t->shape[d]);
        }
        sb_str(&h, "],\"data_offsets\":[");
        sb_u64(&h, off);
        sb_str(&h, ",");
        off += (unsigned long long)t->numel * sizeof(float);
        sb_u64(&h, off);
        sb_str(&h, "]}");
    }
    sb_str(&h, "}");
    while ((8 + h.n) % 8) sb_str(&h, " "); /* trailing spaces are allowed; aligns the data */

    lipt_afile af;
    if (lipt_afile_open(&af, path, 0, err)) {
        free(h.s);
        return af.st;
    }
    unsigned char len[8];
    lipt_put_u64(len, (uint64_t)h.n);
    lipt_afile_write(&af, len, 8);
    lipt_afile_write(&af, h.s, h.n);
    free(h.s);
    for (int i = 0; i < p->n && af.st == LIPT_OK; i++)
        lipt_afile_write(&af, p->list[i]->data, p->list[i]->numel * sizeof(float));
    return lipt_afile_commit(&af);
}
