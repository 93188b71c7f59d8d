/* libFuzzer target: the checkpoint reader on arbitrary bytes, then what the binary does with a checkpoint that opens
 * (src/shell/run.c): the vocabulary blob, the training-state blob, the model config, the model built from it (under a
 * small LIPT_MAX_MODEL_GB cap) and lipt_ckpt_load_params, with and without the optimizer state.
 *
 * Every header and payload carries a CRC-32 (docs/CHECKPOINT.md), so random byte flips would only ever exercise the
 * CRC checks. The custom mutator below keeps inputs well-formed enough to get past them:
 *  - section mutation (most of the time): split the file into its sections, inflate one, mutate its contents with
 *    libFuzzer's own mutator, store it back either raw (codec 0, so that later byte-level mutations and libFuzzer's
 *    comparison hints act on the contents directly) or deflated, or drop / duplicate / swap / retag a section; then
 *    rewrite every size and CRC;
 *  - byte mutation with repair: any libFuzzer mutation of the whole image, then every CRC and the file size
 *    recomputed (the sizes are left as mutated, so the size checks are exercised too);
 *  - plain byte mutation, rarely, for the CRC checks themselves.
 * Seeds: tests/fuzz/corpus/checkpoint/ (tiny checkpoints written by lipt train). scripts/fuzz.sh checkpoint SECONDS. */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <zlib.h>

#include "io/checkpoint_format.h"
#include "lipt/checkpoint.h"
#include "lipt/config.h"
#include "lipt/data.h"
#include "lipt/model.h"
#include "run.h"

size_t LLVMFuzzerMutate(uint8_t *data, size_t size, size_t max_size);

int LLVMFuzzerInitialize(int *argc, char ***argv) {
    (void)argc, (void)argv;
    /* a crafted config may describe a big model: 50 MB is plenty for the tiny seeds and keeps every run fast */
    setenv("LIPT_MAX_MODEL_GB", "0.05", 1);
    lipt_set_threads(1); /* nothing here is worth a thread team; one thread keeps runs reproducible */
    return 0;
}

/* ------------------------------------------------------------------ the target */

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    lipt_ckpt ck;
    lipt_error err = {0};
    if (lipt_ckpt_open_mem(data, size, &ck, &err) != LIPT_OK) {
        if (!err.msg[0]) { fprintf(stderr, "fuzz_checkpoint: refused without a message\n"); abort(); }
        lipt_ckpt_close(&ck); /* documented as safe after a failed open */
        return 0;
    }
    /* what the reader promises about an opened checkpoint */
    if (ck.config_text[ck.config_len] != 0 || strlen(ck.config_text) != ck.config_len) abort();
    size_t have_t = 0, have_b = 0;
    for (int i = 0; i < ck.n_tensors; i++) {
        const lipt_ckpt_tensor *t = &ck.tensors[i];
        const int buf = t->flags & LIPT_PARAM_BUFFER;
        if (t->offset + t->numel > (buf ? ck.n_buf : ck.n_train)) abort();
        *(buf ? &have_b : &have_t) += t->numel;
        if (lipt_ckpt_find(&ck, t->name) != t) abort(); /* names are unique */
    }
    if (have_t != ck.n_train || have_b != ck.n_buf) abort();

    lipt_vocab vocab;
    (void)lipt_vocab_from_blob(&vocab, ck.vocab, ck.vocab_len, &err);
    run_extra x;
    if (run_extra_unpack(&x, ck.extra, ck.extra_len, &err) == LIPT_OK) {
        char v[256];
        (void)run_opt_get(x.opts_text, "data", v, sizeof v);
    }
    lipt_config cfg;
    if (lipt_config_parse(&cfg, ck.config_text, "fuzz.ckpt", &err) == LIPT_OK) {
        size_t want_t = 0, want_b = 0;
        if (lipt_config_param_floats(&cfg, &want_t, &want_b, &err) != LIPT_OK) abort(); /* validated already */
        /* as the binary does: build the model only for a config that describes the stored tensors; also small ones
         * that do not, so that load_params' own mismatch checks run */
        if ((want_t == have_t && want_b == have_b) || want_t + want_b < 20000) {
            lipt_model m;
            if (lipt_model_init(&m, &cfg, &err) == LIPT_OK) {
                if (lipt_ckpt_load_params(&ck, &m.params, ck.has_optimizer, &err) == LIPT_OK)
                    (void)lipt_ckpt_load_params(&ck, &m.params, 0, &err);
                lipt_model_free(&m);
            }
        }
    }
    lipt_ckpt_close(&ck);
    lipt_ckpt_close(&ck); /* twice is safe, says the header */
    return 0;
}

/* ------------------------------------------------------------------ the mutator */

static uint32_t rng_next(uint64_t *s) { /* splitmix64: the mutator must be a function of libFuzzer's seed */
    uint64_t z = (*s += 0x9E3779B97F4A7C15ull);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return (uint32_t)((z ^ (z >> 31)) >> 32);
}
static uint32_t get32(const uint8_t *p) { return (uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 | (uint32_t)p[3] << 24; }
static uint64_t get64(const uint8_t *p) { return (uint64_t)get32(p) | (uint64_t)get32(p + 4) << 32; }
static void put32(uint8_t *p, uint32_t v) { for (int i = 0; i < 4; i++) p[i] = (uint8_t)(v >> (8 * i)); }
static void put64(uint8_t *p, uint64_t v) { for (int i = 0; i < 8; i++) p[i] = (uint8_t)(v >> (8 * i)); }
static uint32_t crc(const uint8_t *p, size_t n) { return (uint32_t)crc32(0, p, (uInt)n); }

/* Recomputes every CRC and the file size of the image d[0..n), following the sections as far as they go. */
static void repair(uint8_t *d, size_t n) {
    if (n < HDR_BYTES || memcmp(d, LIPT_CKPT_MAGIC, 8) != 0) return;
    put64(d + 16, n);
    put32(d + 28, crc(d, 28));
    size_t pos = HDR_BYTES;
    for (uint32_t k = 0; k < MAX_SECTIONS && n - pos >= SEC_BYTES; k++) {
        uint8_t *h = d + pos;
        const uint64_t stored = get64(h + 16);
        const size_t avail = n - pos - SEC_BYTES, len = stored < avail ? (size_t)stored : avail;
        put32(h + 24, crc(h + SEC_BYTES, len));
        put32(h + 28, crc(h, 28));
        if (stored > avail) break;
        pos += SEC_BYTES + len;
    }
}

typedef struct {
    uint8_t tag[4];
    uint32_t codec;
    uint64_t raw;
    const uint8_t *payload;
    size_t stored;
} sec_view;

/* The sections of a well-formed-enough image (sizes within the file); their count, 0 when there are none. */
static int split_sections(const uint8_t *d, size_t n, sec_view *s) {
    if (n < HDR_BYTES || memcmp(d, LIPT_CKPT_MAGIC, 8) != 0) return 0;
    int k = 0;
    size_t pos = HDR_BYTES;
    while (k < MAX_SECTIONS && n - pos >= SEC_BYTES) {
        const uint8_t *h = d + pos;
        const uint64_t stored = get64(h + 16);
        if (stored > n - pos - SEC_BYTES) break;
        memcpy(s[k].tag, h, 4);
        s[k].codec = get32(h + 4);
        s[k].raw = get64(h + 8);
        s[k].payload = h + SEC_BYTES;
        s[k].stored = (size_t)stored;
        k++;
        pos += SEC_BYTES + (size_t)stored;
    }
    return k;
}

#define MAX_IMAGE (1u << 20)
static uint8_t content[MAX_IMAGE], packed[MAX_IMAGE], image[MAX_IMAGE];

/* Writes header + sections into image; its size, or 0 when it would not fit in cap. */
static size_t assemble(const uint8_t *hdr, const sec_view *s, int n, size_t cap) {
    size_t need = HDR_BYTES;
    for (int i = 0; i < n; i++) need += SEC_BYTES + s[i].stored;
    if (need > cap || need > MAX_IMAGE) return 0;
    memcpy(image, hdr, HDR_BYTES);
    put32(image + 12, (uint32_t)n);
    put32(image + 24, 0);
    size_t pos = HDR_BYTES;
    for (int i = 0; i < n; i++) {
        uint8_t *h = image + pos;
        memcpy(h, s[i].tag, 4);
        put32(h + 4, s[i].codec);
        put64(h + 8, s[i].raw);
        put64(h + 16, s[i].stored);
        memmove(h + SEC_BYTES, s[i].payload, s[i].stored); /* payloads may point into image's own source */
        pos += SEC_BYTES + s[i].stored;
    }
    repair(image, need);
    return need;
}

/* One structural or content mutation of a section; the new size, or 0 when the input has no sections to work on. */
static size_t mutate_section(uint8_t *data, size_t size, size_t max_size, uint64_t *rs) {
    static sec_view s[MAX_SECTIONS + 1];
    const int n = split_sections(data, size, s);
    if (n == 0) return 0;
    uint8_t hdr[HDR_BYTES];
    memcpy(hdr, data, HDR_BYTES);
    memcpy(packed, data, size); /* payloads now point into packed: data is rewritten last */
    for (int i = 0; i < n; i++) s[i].payload = packed + (s[i].payload - data);
    int cnt = n;
    const int i = (int)(rng_next(rs) % (uint32_t)n);
    const uint32_t op = rng_next(rs) % 16;
    if (op == 0 && n > 1) { /* drop */
        memmove(s + i, s + i + 1, (size_t)(n - i - 1) * sizeof *s);
        cnt--;
    } else if (op == 1 && n < MAX_SECTIONS) { /* duplicate */
        memmove(s + i + 1, s + i, (size_t)(n - i) * sizeof *s);
        cnt++;
    } else if (op == 2) { /* swap */
        const int j = (int)(rng_next(rs) % (uint32_t)n);
        const sec_view t = s[i];
        s[i] = s[j];
        s[j] = t;
    } else if (op == 3) { /* another known tag, or an unknown one */
        const uint32_t t = rng_next(rs) % (S_COUNT + 1);
        if (t < S_COUNT) memcpy(s[i].tag, SECTIONS[t].tag, 4);
        else put32(s[i].tag, rng_next(rs));
    } else { /* new contents: inflate, mutate, store raw or deflated */
        size_t len = 0;
        uLongf got = sizeof content;
        if (s[i].codec == CODEC_ZLIB && s[i].raw <= sizeof content / 2 &&
            uncompress(content, &got, s[i].payload, (uLong)s[i].stored) == Z_OK) {
            len = got;
        } else {
            len = s[i].stored < sizeof content / 2 ? s[i].stored : sizeof content / 2;
            memcpy(content, s[i].payload, len);
        }
        size_t room = size < max_size ? max_size - size + len : len; /* what the whole image can still take */
        if (room > sizeof content) room = sizeof content;
        if (room <= len) room = len + 1; /* libFuzzer's mutator needs room for at least one byte */
        len = LLVMFuzzerMutate(content, len, room);
        /* the payload goes after the copied image in packed, so the other sections' payloads stay valid */
        uint8_t *dst = packed + size;
        size_t cap = sizeof packed - size;
        if (rng_next(rs) % 4 != 0 || len > cap) { /* mostly raw: the next mutations then see the contents */
            if (len > cap) return 0;
            memcpy(dst, content, len);
            s[i].codec = CODEC_RAW;
            s[i].stored = len;
        } else {
            uLongf clen = (uLongf)cap;
            if (compress2(dst, &clen, content, (uLong)len, 1) != Z_OK) return 0;
            s[i].codec = CODEC_ZLIB;
            s[i].stored = clen;
        }
        s[i].payload = dst;
        s[i].raw = len;
    }
    const size_t out = assemble(hdr, s, cnt, max_size);
    if (out) memcpy(data, image, out);
    return out;
}

size_t LLVMFuzzerCustomMutator(uint8_t *data, size_t size, size_t max_size, unsigned int seed) {
    uint64_t rs = seed;
    const uint32_t what = rng_next(&rs) % 16;
    if (what < 10 && size <= MAX_IMAGE / 2) {
        const size_t out = mutate_section(data, size, max_size, &rs);
        if (out) return out;
    }
    const size_t out = LLVMFuzzerMutate(data, size, max_size);
    if (what != 15) repair(data, out);
    return out;
}
