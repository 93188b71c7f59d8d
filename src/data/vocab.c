/* Vocabulary: byte-level or built from the text (the training split, or all three splits); the text-to-symbol
 * mapping (PTB: a space is '_'), encode with unseen-symbol errors, decode, blob form. */
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

void lipt_vocab_build(lipt_vocab *v, const uint8_t *text, size_t n) { lipt_vocab_build_parts(v, &text, &n, 1); }

void lipt_vocab_build_parts(lipt_vocab *v, const uint8_t *const *parts, const size_t *lens, int n_parts) {
    vocab_clear(v);
    v->kind = LIPT_VOCAB_BUILT;
    uint8_t seen[256] = {0};
    for (int p = 0; p < n_parts; p++)
        for (size_t i = 0; i < lens[p]; i++) seen[parts[p][i]] = 1;
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

/* PTB char corpora have no space symbol: '_' is their word boundary, so ordinary text with spaces is read with '_'. */
static int space_as_underscore(const lipt_vocab *v) {
    return v->ptb_form && v->id_of[' '] < 0 && v->id_of['_'] >= 0;
}

uint8_t lipt_vocab_text_symbol(const lipt_vocab *v, uint8_t byte) {
    return byte == ' ' && space_as_underscore(v) ? (uint8_t)'_' : byte;
}

static int printable(uint8_t c) { return c > 32 && c < 127; }

/* 1 digit, 2 lower-case, 3 upper-case ASCII letter, 0 anything else: the symbols a listing shortens to "a..z". */
static int char_class(uint8_t c) {
    return c >= '0' && c <= '9' ? 1 : c >= 'a' && c <= 'z' ? 2 : c >= 'A' && c <= 'Z' ? 3 : 0;
}

/* One symbol of a listing: printable as itself, "space", or escaped. */
static size_t list_sym(uint8_t c, char *buf, size_t len) {
    int k;
    if (c == ' ') k = snprintf(buf, len, "space");
    else if (c == '\n') k = snprintf(buf, len, "\\n");
    else if (c == '\t') k = snprintf(buf, len, "\\t");
    else if (c == '\r') k = snprintf(buf, len, "\\r");
    else if (printable(c)) k = snprintf(buf, len, "%c", c);
    else k = snprintf(buf, len, "\\x%02x", c);
    return k < 0 ? 0 : (size_t)k;
}

/* The vocabulary's symbols for a message, space-separated, runs of 3 or more consecutive digits or letters as "a..z"
 * ("# $ & ' * - . / 0..9 < > N \ _ a..z \n" for PTB); cut with "..." when it does not fit cap. */
static void vocab_listing(const lipt_vocab *v, char *out, size_t cap) {
    size_t len = 0;
    out[0] = 0;
    for (int i = 0; i < v->n_sym;) {
        int j = i; /* the run of consecutive digits, lower-case or upper-case letters from symbol i */
        while (j + 1 < v->n_sym && v->sym[j + 1] == v->sym[j] + 1 && char_class(v->sym[i]) &&
               char_class(v->sym[j + 1]) == char_class(v->sym[i]))
            j++;
        char item[24];
        size_t k = list_sym(v->sym[i], item, sizeof item);
        if (j - i >= 2) {
            k += (size_t)snprintf(item + k, sizeof item - k, "..");
            k += list_sym(v->sym[j], item + k, sizeof item - k);
        } else {
            j = i;
        }
        if (len + k + 5 >= cap) { /* room for " ..." and the NUL */
            snprintf(out + len, cap - len, "%s...", len ? " " : "");
            return;
        }
        len += (size_t)snprintf(out + len, cap - len, "%s%s", len ? " " : "", item);
        i = j + 1;
    }
}

/* The error for an unseen symbol: typed text (user) lists what the model reads; a corpus advises on training. */
static lipt_status unseen_symbol(const lipt_vocab *v, const uint8_t *text, size_t i, int user, const char *label,
                                 lipt_error *err) {
    char d[32];
    describe_sym(text[i], d, sizeof d);
    if (!label) label = "text";
    if (user) {
        char list[300];
        vocab_listing(v, list, sizeof list);
        return lipt_fail(err, LIPT_ERR_FORMAT, "%s: symbol %s at position %zu is not in the model's vocabulary of %d "
                         "symbols: %s%s", label, d, i, v->n_sym, list,
                         space_as_underscore(v) ? " (a space is read as '_', the word boundary)" : "");
    }
    size_t line = 1;
    for (size_t j = 0; j < i; j++) line += text[j] == '\n';
    return lipt_fail(err, LIPT_ERR_FORMAT,
                     "%s: symbol %s at position %zu (line %zu) is not in the vocabulary (%d symbols); train with "
                     "--vocab whole (the bytes of all three splits), --unk (an unknown-symbol id that unseen "
                     "symbols map to) or --vocab bytes (every byte)",
                     label, d, i, line, v->n_sym);
}

static lipt_status encode_any(const lipt_vocab *v, const uint8_t *text, size_t n, int32_t *i32, lipt_tok *i16,
                              int user, const char *label, lipt_error *err) {
    for (size_t i = 0; i < n; i++) {
        int id = v->id_of[lipt_vocab_text_symbol(v, text[i])];
        if (id < 0) {
            if (v->unk_id < 0) return unseen_symbol(v, text, i, user, label, err);
            id = v->unk_id;
        }
        if (i32) i32[i] = id;
        else i16[i] = (lipt_tok)id;
    }
    return LIPT_OK;
}

lipt_status lipt_vocab_encode(const lipt_vocab *v, const uint8_t *text, size_t n, int32_t *ids, const char *label,
                              lipt_error *err) {
    return encode_any(v, text, n, ids, NULL, 0, label, err);
}

lipt_status lipt_vocab_encode_tok(const lipt_vocab *v, const uint8_t *text, size_t n, lipt_tok *ids,
                                  const char *label, lipt_error *err) {
    return encode_any(v, text, n, NULL, ids, 0, label, err);
}

lipt_status lipt_vocab_encode_text(const lipt_vocab *v, const uint8_t *text, size_t n, int32_t *ids,
                                   const char *label, lipt_error *err) {
    return encode_any(v, text, n, ids, NULL, 1, label, err);
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
