/* Vocabulary: byte-level or built from the training split; encode with unseen-symbol errors, decode, blob form. */
#include "lipt/data.h"

#include <stdio.h>
#include <string.h>

static void vocab_clear(lipt_vocab *v) {
    memset(v, 0, sizeof *v);
    for (int b = 0; b < 256; b++) v->id_of[b] = -1;
    v->unk_id = -1;
}

void lipt_vocab_init_bytes(lipt_vocab *v) {
    vocab_clear(v);
    v->kind = LIPT_VOCAB_BYTES;
    for (int b = 0; b < 256; b++) {
        v->sym[b] = (uint8_t)b;
        v->id_of[b] = (int16_t)b;
    }
    v->n_sym = v->size = 256;
}

void lipt_vocab_build(lipt_vocab *v, const uint8_t *text, size_t n) {
    vocab_clear(v);
    v->kind = LIPT_VOCAB_BUILT;
    uint8_t seen[256] = {0};
    for (size_t i = 0; i < n; i++) seen[text[i]] = 1;
    for (int b = 0; b < 256; b++)
        if (seen[b]) {
            v->id_of[b] = (int16_t)v->n_sym;
            v->sym[v->n_sym++] = (uint8_t)b;
        }
    v->size = v->n_sym;
}

void lipt_vocab_enable_unk(lipt_vocab *v) {
    if (v->unk_id >= 0) return;
    v->unk_id = v->n_sym;
    v->size = v->n_sym + 1;
}

int lipt_vocab_equal(const lipt_vocab *a, const lipt_vocab *b) {
    if (a->kind != b->kind || a->n_sym != b->n_sym || a->size != b->size || a->unk_id != b->unk_id ||
        a->ptb_form != b->ptb_form)
        return 0;
    if (memcmp(a->sym, b->sym, (size_t)a->n_sym) != 0) return 0;
    return memcmp(a->id_of, b->id_of, sizeof a->id_of) == 0;
}

/* 'x' for printable ASCII, '\n' style for common controls, else the byte value alone. */
static void describe_sym(uint8_t c, char *buf, size_t len) {
    if (c == '\n') snprintf(buf, len, "'\\n' (byte 0x0a)");
    else if (c == '\t') snprintf(buf, len, "'\\t' (byte 0x09)");
    else if (c == '\r') snprintf(buf, len, "'\\r' (byte 0x0d)");
    else if (c >= 32 && c < 127) snprintf(buf, len, "'%c' (byte 0x%02x)", c, c);
    else snprintf(buf, len, "byte 0x%02x", c);
}

static lipt_status encode_any(const lipt_vocab *v, const uint8_t *text, size_t n, int32_t *i32, lipt_tok *i16,
                              const char *label, lipt_error *err) {
    for (size_t i = 0; i < n; i++) {
        int id = v->id_of[text[i]];
        if (id < 0) {
            if (v->unk_id < 0) {
                size_t line = 1;
                for (size_t j = 0; j < i; j++) line += text[j] == '\n';
                char d[32];
                describe_sym(text[i], d, sizeof d);
                return lipt_fail(err, LIPT_ERR_FORMAT,
                                 "%s: symbol %s at position %zu (line %zu) is not in the vocabulary (%d symbols, built "
                                 "from the training split); train with --unk (an unknown-symbol id) "
                                 "to map unseen symbols to <unk>, or use the byte vocabulary (--vocab bytes)",
                                 label ? label : "text", d, i, line, v->n_sym);
            }
            id = v->unk_id;
        }
        if (i32) i32[i] = id;
        else i16[i] = (lipt_tok)id;
    }
    return LIPT_OK;
}

lipt_status lipt_vocab_encode(const lipt_vocab *v, const uint8_t *text, size_t n, int32_t *ids, const char *label,
                              lipt_error *err) {
    return encode_any(v, text, n, ids, NULL, label, err);
}

lipt_status lipt_vocab_encode_tok(const lipt_vocab *v, const uint8_t *text, size_t n, lipt_tok *ids,
                                  const char *label, lipt_error *err) {
    return encode_any(v, text, n, NULL, ids, label, err);
}

typedef struct {
    char *out;
    size_t cap, len;
} sink;

static void put(sink *s, const char *p, size_t k) {
    for (size_t i = 0; i < k; i++, s->len++)
        if (s->len + 1 < s->cap) s->out[s->len] = p[i];
}

static void decode_one(const lipt_vocab *v, int id, int flags, sink *s) {
    if (id < 0 || id >= v->size) {
        put(s, "<?>", 3);
    } else if (id == v->unk_id) {
        put(s, "<unk>", 5);
    } else {
        uint8_t c = v->sym[id];
        char e[8];
        if ((flags & LIPT_DECODE_ESCAPE) && (c < 32 || c == 127)) {
            if (c == '\n') put(s, "\\n", 2);
            else if (c == '\t') put(s, "\\t", 2);
            else if (c == '\r') put(s, "\\r", 2);
            else {
                snprintf(e, sizeof e, "\\x%02x", c);
                put(s, e, 4);
            }
        } else {
            put(s, (const char *)&c, 1);
        }
    }
    if (flags & LIPT_DECODE_PTB_FILE) put(s, " ", 1);
}

static size_t finish(sink *s) {
    if (s->cap) s->out[s->len < s->cap ? s->len : s->cap - 1] = 0;
    return s->len;
}

size_t lipt_vocab_decode(const lipt_vocab *v, const int32_t *ids, size_t n, int flags, char *out, size_t cap) {
    sink s = {out, cap, 0};
    for (size_t i = 0; i < n; i++) decode_one(v, ids[i], flags, &s);
    return finish(&s);
}

size_t lipt_vocab_decode_tok(const lipt_vocab *v, const lipt_tok *ids, size_t n, int flags, char *out, size_t cap) {
    sink s = {out, cap, 0};
    for (size_t i = 0; i < n; i++) decode_one(v, ids[i], flags, &s);
    return finish(&s);
}

/* ---- blob ---- */

#define VOCAB_BLOB_HEADER 10 /* "LVOC", version, kind, flags, n_sym (u16), reserved byte */

size_t lipt_vocab_blob_size(const lipt_vocab *v) { return VOCAB_BLOB_HEADER + (size_t)v->n_sym; }

size_t lipt_vocab_to_blob(const lipt_vocab *v, uint8_t *out, size_t cap) {
    size_t need = lipt_vocab_blob_size(v);
    if (!out || cap < need) return need;
    memcpy(out, "LVOC", 4);
    out[4] = 1;
    out[5] = (uint8_t)v->kind;
    out[6] = (uint8_t)((v->unk_id >= 0 ? 1 : 0) | (v->ptb_form ? 2 : 0));
    out[7] = (uint8_t)(v->n_sym & 0xff);
    out[8] = (uint8_t)(v->n_sym >> 8);
    out[9] = 0;
    memcpy(out + VOCAB_BLOB_HEADER, v->sym, (size_t)v->n_sym);
    return need;
}

lipt_status lipt_vocab_from_blob(lipt_vocab *v, const uint8_t *b, size_t n, lipt_error *err) {
    if (n < VOCAB_BLOB_HEADER || memcmp(b, "LVOC", 4) != 0)
        return lipt_fail(err, LIPT_ERR_FORMAT, "vocabulary blob: expected magic LVOC and at least %d bytes, got %zu bytes",
                         VOCAB_BLOB_HEADER, n);
    if (b[4] != 1) return lipt_fail(err, LIPT_ERR_FORMAT, "vocabulary blob: version %u, expected 1", b[4]);
    int kind = b[5], flags = b[6], n_sym = b[7] | (b[8] << 8);
    if (kind != LIPT_VOCAB_BYTES && kind != LIPT_VOCAB_BUILT)
        return lipt_fail(err, LIPT_ERR_FORMAT, "vocabulary blob: unknown kind %d", kind);
    if (flags & ~3) return lipt_fail(err, LIPT_ERR_FORMAT, "vocabulary blob: unknown flags 0x%02x", flags);
    if (n_sym < 1 || n_sym > 256 || n != (size_t)VOCAB_BLOB_HEADER + (size_t)n_sym)
        return lipt_fail(err, LIPT_ERR_FORMAT, "vocabulary blob: %d symbols do not fit a blob of %zu bytes", n_sym, n);
    const uint8_t *sy = b + VOCAB_BLOB_HEADER;
    lipt_vocab t;
    vocab_clear(&t);
    t.kind = (lipt_vocab_kind)kind;
    for (int i = 0; i < n_sym; i++) {
        /* built vocabularies are sorted and distinct; the byte vocabulary is the identity */
        if ((i > 0 && sy[i] <= sy[i - 1]) || (kind == LIPT_VOCAB_BYTES && sy[i] != i))
            return lipt_fail(err, LIPT_ERR_FORMAT, "vocabulary blob: symbol %d (byte 0x%02x) is out of order", i, sy[i]);
        t.sym[i] = sy[i];
        t.id_of[sy[i]] = (int16_t)i;
    }
    if (kind == LIPT_VOCAB_BYTES && n_sym != 256)
        return lipt_fail(err, LIPT_ERR_FORMAT, "vocabulary blob: byte vocabulary with %d symbols, expected 256", n_sym);
    t.n_sym = t.size = n_sym;
    if (flags & 1) lipt_vocab_enable_unk(&t);
    t.ptb_form = (flags & 2) != 0;
    *v = t;
    return LIPT_OK;
}
