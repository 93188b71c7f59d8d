/* data: PTB char parsing on the real files, zip (built here with zlib) and gzip readers, corpus lookup and
 * splits, vocabulary blob and unseen-symbol errors, batcher determinism, evaluation windows covering every symbol. */
#include "testutil.h"

#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>
#include <zlib.h>

#include "lipt/data.h"

/* ---------------------------------------------------------------- helpers */

static char *make_tmpdir(char *buf, size_t len) {
    snprintf(buf, len, "/tmp/lipt_test_data_XXXXXX");
    ck_assert_ptr_nonnull(mkdtemp(buf));
    return buf;
}

static void write_file(const char *path, const void *data, size_t n) {
    FILE *f = fopen(path, "wb");
    ck_assert_msg(f != NULL, "cannot create %s", path);
    ck_assert_uint_eq(fwrite(data, 1, n, f), n);
    fclose(f);
}

static void rm_rf(const char *dir) {
    char cmd[1200];
    if (strncmp(dir, "/tmp/lipt_test_data_", 20) != 0) return; /* only what this test made */
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", dir);
    if (system(cmd) != 0) fprintf(stderr, "could not remove %s\n", dir);
}

/* The folder that holds ../shared/data's corpora, or NULL (with a printed skip note). */
static const char *shared_root(char *buf, size_t len, const char *probe, const char *test) {
    char p[1024];
    if (!tu_shared_data(probe, p, sizeof p)) {
        printf("%s: SKIPPED, %s not found in $LIPT_SHARED_DATA or ../shared/data\n", test, probe);
        return NULL;
    }
    size_t k = strlen(p) - strlen(probe);
    snprintf(buf, len, "%.*s", (int)(k > 0 ? k - 1 : 0), p);
    return buf;
}

typedef struct {
    const char *name;
    const uint8_t *data;
    size_t len;
    int method; /* 0 stored, 8 deflate, -1 directory entry */
} zmember;

static void w16(uint8_t *p, unsigned v) { p[0] = (uint8_t)v; p[1] = (uint8_t)(v >> 8); }
static void w32(uint8_t *p, uint32_t v) { for (int i = 0; i < 4; i++) p[i] = (uint8_t)(v >> (8 * i)); }

/* A zip archive written the way the format says: local headers + data, central directory, end record. */
static uint8_t *build_zip(const zmember *m, int count, size_t *out_len) {
    size_t cap = 1024;
    for (int i = 0; i < count; i++) cap += 200 + 2 * strlen(m[i].name) + compressBound((uLong)m[i].len);
    uint8_t *z = malloc(cap), *cd = malloc(64 * 1024);
    size_t n = 0, cn = 0;
    for (int i = 0; i < count; i++) {
        size_t nl = strlen(m[i].name);
        uint32_t crc = (uint32_t)crc32(crc32(0L, Z_NULL, 0), m[i].data, (uInt)m[i].len);
        int method = m[i].method < 0 ? 0 : m[i].method;
        size_t off = n, csize;
        uint8_t *lh = z + n;
        n += 30 + nl;
        memcpy(lh + 30, m[i].name, nl);
        if (method == 8) {
            z_stream zs;
            memset(&zs, 0, sizeof zs);
            ck_assert_int_eq(deflateInit2(&zs, 6, Z_DEFLATED, -MAX_WBITS, 8, Z_DEFAULT_STRATEGY), Z_OK);
            zs.next_in = (Bytef *)m[i].data;
            zs.avail_in = (uInt)m[i].len;
            zs.next_out = z + n;
            zs.avail_out = (uInt)(cap - n);
            ck_assert_int_eq(deflate(&zs, Z_FINISH), Z_STREAM_END);
            csize = zs.total_out;
            deflateEnd(&zs);
        } else {
            memcpy(z + n, m[i].data, m[i].len);
            csize = m[i].len;
        }
        n += csize;
        memset(lh, 0, 30);
        w32(lh, 0x04034b50u);
        w16(lh + 4, 20);
        w16(lh + 8, (unsigned)method);
        w32(lh + 14, crc);
        w32(lh + 18, (uint32_t)csize);
        w32(lh + 22, (uint32_t)m[i].len);
        w16(lh + 26, (unsigned)nl);
        uint8_t *ce = cd + cn;
        memset(ce, 0, 46);
        w32(ce, 0x02014b50u);
        w16(ce + 4, 20);
        w16(ce + 6, 20);
        w16(ce + 10, (unsigned)method);
        w32(ce + 16, crc);
        w32(ce + 20, (uint32_t)csize);
        w32(ce + 24, (uint32_t)m[i].len);
        w16(ce + 28, (unsigned)nl);
        w32(ce + 42, (uint32_t)off);
        memcpy(ce + 46, m[i].name, nl);
        cn += 46 + nl;
    }
    memcpy(z + n, cd, cn);
    uint8_t *e = z + n + cn;
    memset(e, 0, 22);
    w32(e, 0x06054b50u);
    w16(e + 8, (unsigned)count);
    w16(e + 10, (unsigned)count);
    w32(e + 12, (uint32_t)cn);
    w32(e + 16, (uint32_t)n);
    *out_len = n + cn + 22;
    free(cd);
    return z;
}

/* ---------------------------------------------------------------- PTB */

START_TEST(test_ptb_real) {
    char root[1024];
    if (!shared_root(root, sizeof root, "ptb/ptb.char.train.txt", "ptb_real")) return;
    setenv("LIPT_DATA", root, 1);
    lipt_error err = {0};
    lipt_dataset ds;
    lipt_status s = lipt_dataset_load("ptb", NULL, &ds, &err);
    ck_assert_msg(s == LIPT_OK, "load ptb: %s", err.msg);
    ck_assert_int_eq(ds.loc.kind, LIPT_CORPUS_PTB);
    const size_t want[3] = {5017482, 393042, 442423};
    const size_t lines[3] = {42068, 3370, 3761}; /* word-level line counts in PROVENANCE.md */
    for (int sp = 0; sp < 3; sp++) {
        ck_assert_uint_eq(ds.len[sp], want[sp]);
        size_t nl = 0;
        for (size_t i = 0; i < ds.len[sp]; i++) nl += ds.tok[sp][i] == ds.vocab.id_of['\n'];
        ck_assert_uint_eq(nl, lines[sp]);
        /* decoding in file form gives the file back byte for byte */
        lipt_bytes file;
        ck_assert_int_eq(lipt_read_plain(ds.loc.path[sp], &file, &err), LIPT_OK);
        ck_assert_uint_eq(file.len, 2 * want[sp]);
        char *dec = malloc(file.len + 1);
        size_t dl = lipt_vocab_decode_tok(&ds.vocab, ds.tok[sp], ds.len[sp], LIPT_DECODE_PTB_FILE, dec, file.len + 1);
        ck_assert_uint_eq(dl, file.len);
        ck_assert_msg(memcmp(dec, file.data, file.len) == 0, "%s split does not decode to its file",
                      lipt_split_name(sp));
        free(dec);
        lipt_bytes_free(&file);
    }
    ck_assert_int_eq(ds.vocab.n_sym, 50);
    ck_assert_int_eq(ds.vocab.size, 50);
    ck_assert_int_eq(ds.vocab.kind, LIPT_VOCAB_BUILT);
    ck_assert_int_eq(ds.vocab.ptb_form, 1);
    ck_assert_int_eq(ds.vocab.sym[0], '\n');
    ck_assert_int_eq(ds.vocab.id_of[' '], -1); /* the separator is never a symbol */
    /* the context symbol before each split: '\n' before train, the previous split's last symbol otherwise */
    ck_assert_int_eq(ds.tok[0][-1], ds.vocab.id_of['\n']);
    ck_assert_int_eq(ds.tok[1][-1], ds.tok[0][ds.len[0] - 1]);
    char head[64];
    lipt_vocab_decode_tok(&ds.vocab, ds.tok[0], 21, LIPT_DECODE_ESCAPE, head, sizeof head);
    ck_assert_str_eq(head, "aer_banknote_berlitz_");
    char desc[1024];
    lipt_dataset_describe(&ds, desc, sizeof desc);
    printf("ptb_real: %s\n", desc);
    lipt_dataset_free(&ds);

    /* the same through a path, and a fraction split is refused */
    char p[1100];
    snprintf(p, sizeof p, "%s/ptb", root);
    lipt_corpus_loc loc;
    ck_assert_int_eq(lipt_corpus_locate(p, NULL, &loc, &err), LIPT_OK);
    ck_assert_int_eq(loc.kind, LIPT_CORPUS_PTB);
    lipt_data_opts o = {.split = LIPT_SPLIT_FRACTIONS};
    ck_assert_int_eq(lipt_dataset_load(p, &o, &ds, &err), LIPT_ERR_ARG);
    printf("ptb_real: fraction split refused: %s\n", err.msg);

    /* without $LIPT_DATA the library's own source tree is the repo: <repo>/../shared/data/ptb */
    unsetenv("LIPT_DATA");
    s = lipt_corpus_locate("ptb", NULL, &loc, &err);
    printf("ptb_real: default lookup: %s\n", s ? err.msg : loc.note);
    const char *src = getenv("LIPT_SOURCE_DIR");
    char q[1100];
    snprintf(q, sizeof q, "%s/../shared/data/ptb/ptb.char.train.txt", src ? src : "");
    if (src && access(q, R_OK) == 0) ck_assert_int_eq(s, LIPT_OK);
}
END_TEST

START_TEST(test_ptb_parse_small) {
    const char *txt = "a _ b \n c \n ";
    lipt_bytes out;
    lipt_error err = {0};
    ck_assert_int_eq(lipt_ptb_parse((const uint8_t *)txt, strlen(txt), "mini", &out, &err), LIPT_OK);
    ck_assert_uint_eq(out.len, 6);
    ck_assert_mem_eq(out.data, "a_b\nc\n", 6);
    lipt_bytes_free(&out);
    /* CRLF line ends and a missing final space still parse */
    const char *crlf = "x y\r\n z\n";
    ck_assert_int_eq(lipt_ptb_parse((const uint8_t *)crlf, strlen(crlf), "crlf", &out, &err), LIPT_OK);
    ck_assert_uint_eq(out.len, 5);
    ck_assert_mem_eq(out.data, "xy\nz\n", 5);
    lipt_bytes_free(&out);
    /* the word-level format is caught, naming file, line and column */
    const char *words = "a b\nthe cat\n";
    ck_assert_int_eq(lipt_ptb_parse((const uint8_t *)words, strlen(words), "ptb.train.txt", &out, &err), LIPT_ERR_FORMAT);
    ck_assert_ptr_nonnull(strstr(err.msg, "ptb.train.txt:2:2"));
    printf("ptb_parse_small: word-level input: %s\n", err.msg);
}
END_TEST

/* ---------------------------------------------------------------- zip */

START_TEST(test_zip_enwik8) {
    char root[1024], p[1100];
    if (!shared_root(root, sizeof root, "enwik8/enwik8.head4154064", "zip_enwik8")) return;
    lipt_error err = {0};
    lipt_bytes orig, got;
    snprintf(p, sizeof p, "%s/enwik8/enwik8.head4154064", root);
    ck_assert_int_eq(lipt_read_plain(p, &orig, &err), LIPT_OK);
    ck_assert_uint_eq(orig.len, 4154064);

    char tmp[64], dir[128], zp[160];
    make_tmpdir(tmp, sizeof tmp);
    snprintf(dir, sizeof dir, "%s/enwik8", tmp);
    ck_assert_int_eq(mkdir(dir, 0700), 0);
    snprintf(zp, sizeof zp, "%s/enwik8.zip", dir);
    size_t zn;
    uint8_t *z = build_zip(&(zmember){"enwik8", orig.data, orig.len, 8}, 1, &zn);
    write_file(zp, z, zn);
    printf("zip_enwik8: built %s, %zu bytes for %zu\n", zp, zn, orig.len);

    ck_assert_int_eq(lipt_read_zip_member(zp, NULL, &got, &err), LIPT_OK);
    ck_assert_uint_eq(got.len, orig.len);
    ck_assert_msg(memcmp(got.data, orig.data, orig.len) == 0, "zip member differs from the original");
    lipt_bytes_free(&got);
    ck_assert_int_eq(lipt_read_zip_member(zp, "enwik8", &got, &err), LIPT_OK);
    ck_assert_uint_eq(got.len, orig.len);
    ck_assert_msg(memcmp(got.data, orig.data, orig.len) == 0, "named zip member differs");
    lipt_bytes_free(&got);
    ck_assert_int_eq(lipt_read_auto(zp, &got, &err), LIPT_OK);
    ck_assert_msg(got.len == orig.len && memcmp(got.data, orig.data, orig.len) == 0, "auto-read zip differs");
    lipt_bytes_free(&got);
    ck_assert_int_eq(lipt_read_zip_member(zp, "nope", &got, &err), LIPT_ERR_FORMAT);
    ck_assert_ptr_nonnull(strstr(err.msg, "enwik8"));

    /* corruption: CRC field in the central directory, a data byte, a truncated file */
    uint8_t *bad = malloc(zn);
    memcpy(bad, z, zn);
    size_t cd_off = (size_t)z[zn - 6] | ((size_t)z[zn - 5] << 8) | ((size_t)z[zn - 4] << 16) | ((size_t)z[zn - 3] << 24);
    bad[cd_off + 16] ^= 1;
    ck_assert_int_eq(lipt_unzip_mem(bad, zn, NULL, "bad.zip", &got, &err), LIPT_ERR_FORMAT);
    ck_assert_ptr_nonnull(strstr(err.msg, "CRC-32"));
    printf("zip_enwik8: bad CRC: %s\n", err.msg);
    memcpy(bad, z, zn);
    bad[30 + 6 + 1000000] ^= 0x55;
    ck_assert_int_eq(lipt_unzip_mem(bad, zn, NULL, "bad.zip", &got, &err), LIPT_ERR_FORMAT);
    printf("zip_enwik8: flipped data byte: %s\n", err.msg);
    ck_assert_int_eq(lipt_unzip_mem(z, zn / 2, NULL, "half.zip", &got, &err), LIPT_ERR_FORMAT);
    printf("zip_enwik8: truncated: %s\n", err.msg);
    free(bad);

    /* several members: stored + deflate + a directory; the one named like the archive is chosen */
    const char *readme = "not the corpus\n";
    zmember ms[3] = {{"docs/", (const uint8_t *)"", 0, -1},
                     {"README", (const uint8_t *)readme, strlen(readme), 0},
                     {"enwik8", orig.data, 100000, 8}};
    size_t zn2;
    uint8_t *z2 = build_zip(ms, 3, &zn2);
    ck_assert_int_eq(lipt_unzip_mem(z2, zn2, NULL, "x/enwik8.zip", &got, &err), LIPT_OK);
    ck_assert_uint_eq(got.len, 100000);
    ck_assert_mem_eq(got.data, orig.data, 100000);
    lipt_bytes_free(&got);
    ck_assert_int_eq(lipt_unzip_mem(z2, zn2, "README", "x/enwik8.zip", &got, &err), LIPT_OK);
    ck_assert_str_eq((const char *)got.data, readme);
    lipt_bytes_free(&got);
    ck_assert_int_eq(lipt_unzip_mem(z2, zn2, NULL, "x/other.zip", &got, &err), LIPT_ERR_FORMAT);
    printf("zip_enwik8: ambiguous: %s\n", err.msg);
    free(z2);

    /* the corpus layer on that zip: name lookup finds it, the standard split is refused, fractions work */
    setenv("LIPT_DATA", tmp, 1);
    lipt_corpus_loc loc;
    ck_assert_int_eq(lipt_corpus_locate("enwik8", "/nonexistent", &loc, &err), LIPT_OK);
    ck_assert_str_eq(loc.path[0], zp);
    ck_assert_int_eq(loc.is_prefix, 0);
    lipt_dataset ds;
    lipt_data_opts o = {.repo_root = "/nonexistent"};
    ck_assert_int_eq(lipt_dataset_load("enwik8", &o, &ds, &err), LIPT_ERR_ARG);
    ck_assert_ptr_nonnull(strstr(err.msg, "100,000,000"));
    ck_assert_ptr_nonnull(strstr(err.msg, "fraction"));
    printf("zip_enwik8: standard split: %s\n", err.msg);
    o.split = LIPT_SPLIT_FRACTIONS;
    ck_assert_msg(lipt_dataset_load("enwik8", &o, &ds, &err) == LIPT_OK, "%s", err.msg);
    ck_assert_int_eq(ds.vocab.kind, LIPT_VOCAB_BYTES);
    ck_assert_int_eq(ds.vocab.size, 256);
    ck_assert_uint_eq(ds.len[0], 3738657); /* floor(0.9 * 4154064) */
    ck_assert_uint_eq(ds.len[1], 3946360 - 3738657);
    ck_assert_uint_eq(ds.len[0] + ds.len[1] + ds.len[2], orig.len);
    size_t bad_tok = 0; /* (one assertion: each ck_assert costs a pipe write in fork mode) */
    for (size_t i = 0; i < orig.len; i++) bad_tok += ds.tok[0][i] != orig.data[i]; /* splits are contiguous */
    ck_assert_uint_eq(bad_tok, 0);
    lipt_dataset_free(&ds);

    /* the shared prefix itself is found by name and reported as a prefix */
    setenv("LIPT_DATA", root, 1);
    ck_assert_int_eq(lipt_corpus_locate("enwik8", "/nonexistent", &loc, &err), LIPT_OK);
    ck_assert_int_eq(loc.is_prefix, 1);
    ck_assert_ptr_nonnull(strstr(loc.note, "PREFIX"));
    printf("zip_enwik8: %s\n", loc.note);
    free(z);
    lipt_bytes_free(&orig);
    rm_rf(tmp);
}
END_TEST

/* ---------------------------------------------------------------- gzip */

START_TEST(test_gzip_roundtrip) {
    char tmp[64], gp[128], pp[128];
    make_tmpdir(tmp, sizeof tmp);
    snprintf(gp, sizeof gp, "%s/t.gz", tmp);
    snprintf(pp, sizeof pp, "%s/plain.txt", tmp);
    lipt_rng rng;
    lipt_rng_seed(&rng, 42);
    size_t n = 3000017;
    uint8_t *data = malloc(n);
    for (size_t i = 0; i < n; i++) /* compressible but not trivial: text-like with random bytes mixed in */
        data[i] = (i % 97 == 0) ? (uint8_t)lipt_rng_u64(&rng) : (uint8_t)("the quick brown fox "[lipt_rng_below(&rng, 20)]);
    /* two gzip members back to back: a reader must read both */
    size_t half = n / 3;
    gzFile g = gzopen(gp, "wb");
    ck_assert_int_eq(gzwrite(g, data, (unsigned)half), (int)half);
    gzclose(g);
    g = gzopen(gp, "ab");
    ck_assert_int_eq(gzwrite(g, data + half, (unsigned)(n - half)), (int)(n - half));
    gzclose(g);
    lipt_error err = {0};
    lipt_bytes got;
    ck_assert_msg(lipt_read_gzip(gp, &got, &err) == LIPT_OK, "%s", err.msg);
    ck_assert_uint_eq(got.len, n);
    ck_assert_msg(memcmp(got.data, data, n) == 0, "gzip round trip differs");
    lipt_bytes_free(&got);
    ck_assert_int_eq(lipt_read_auto(gp, &got, &err), LIPT_OK);
    ck_assert_msg(got.len == n && memcmp(got.data, data, n) == 0, "auto gzip differs");
    lipt_bytes_free(&got);

    /* truncated gzip is an error, not silently short data */
    lipt_bytes whole;
    ck_assert_int_eq(lipt_read_plain(gp, &whole, &err), LIPT_OK);
    write_file(gp, whole.data, whole.len - 1000);
    ck_assert_int_eq(lipt_read_gzip(gp, &got, &err), LIPT_ERR_FORMAT);
    ck_assert_ptr_nonnull(strstr(err.msg, gp));
    printf("gzip_roundtrip: truncated: %s\n", err.msg);
    lipt_bytes_free(&whole);

    /* a plain file: read_auto returns it as is, read_gzip refuses it */
    write_file(pp, data, 5000);
    ck_assert_int_eq(lipt_read_auto(pp, &got, &err), LIPT_OK);
    ck_assert_uint_eq(got.len, 5000);
    ck_assert_mem_eq(got.data, data, 5000);
    lipt_bytes_free(&got);
    ck_assert_int_eq(lipt_read_gzip(pp, &got, &err), LIPT_ERR_FORMAT);
    ck_assert_ptr_nonnull(strstr(err.msg, "1f 8b"));
    char missing[160];
    snprintf(missing, sizeof missing, "%s/missing.txt", tmp);
    ck_assert_int_eq(lipt_read_auto(missing, &got, &err), LIPT_ERR_IO);
    ck_assert_ptr_nonnull(strstr(err.msg, missing));
    printf("gzip_roundtrip: %zu bytes in two members ok; missing file: %s\n", n, err.msg);

    /* a gzip file is a corpus too */
    lipt_dataset ds;
    lipt_data_opts o = {.vocab = LIPT_VOCAB_BYTES};
    g = gzopen(gp, "wb");
    gzwrite(g, data, 100000);
    gzclose(g);
    ck_assert_msg(lipt_dataset_load(gp, &o, &ds, &err) == LIPT_OK, "%s", err.msg);
    ck_assert_uint_eq(ds.len[0] + ds.len[1] + ds.len[2], 100000);
    ck_assert_uint_eq(ds.len[0], 90000);
    lipt_dataset_free(&ds);
    free(data);
    rm_rf(tmp);
}
END_TEST

/* ---------------------------------------------------------------- vocabulary */

START_TEST(test_vocab) {
    const char *train = "hello world\nhow are you\n";
    lipt_vocab v, w;
    lipt_vocab_build(&v, (const uint8_t *)train, strlen(train));
    ck_assert_int_eq(v.n_sym, 12); /* \n, ' ', a d e h l o r u w y */
    ck_assert_int_eq(v.sym[0], '\n');
    ck_assert_int_eq(v.sym[1], ' ');
    for (int i = 1; i < v.n_sym; i++) ck_assert_int_lt(v.sym[i - 1], v.sym[i]);
    uint8_t blob[300];
    size_t bn = lipt_vocab_to_blob(&v, blob, sizeof blob);
    ck_assert_uint_eq(bn, lipt_vocab_blob_size(&v));
    lipt_error err = {0};
    ck_assert_int_eq(lipt_vocab_from_blob(&w, blob, bn, &err), LIPT_OK);
    ck_assert(lipt_vocab_equal(&v, &w));
    /* corrupt blobs are refused */
    ck_assert_int_eq(lipt_vocab_from_blob(&w, blob, bn - 1, &err), LIPT_ERR_FORMAT);
    uint8_t b2[300];
    memcpy(b2, blob, bn);
    b2[0] = 'X';
    ck_assert_int_eq(lipt_vocab_from_blob(&w, b2, bn, &err), LIPT_ERR_FORMAT);
    memcpy(b2, blob, bn);
    uint8_t t = b2[12];
    b2[12] = b2[13];
    b2[13] = t;
    ck_assert_int_eq(lipt_vocab_from_blob(&w, b2, bn, &err), LIPT_ERR_FORMAT);
    printf("vocab: swapped symbols in blob: %s\n", err.msg);

    /* unseen symbol: error with symbol and position; with <unk>: mapped */
    const char *valid = "hello\nwhy zoo";
    int32_t ids[256];
    ck_assert_int_eq(lipt_vocab_encode(&v, (const uint8_t *)valid, strlen(valid), ids, "valid split", &err), LIPT_ERR_FORMAT);
    ck_assert_ptr_nonnull(strstr(err.msg, "'z'"));
    ck_assert_ptr_nonnull(strstr(err.msg, "position 10"));
    ck_assert_ptr_nonnull(strstr(err.msg, "line 2"));
    ck_assert_ptr_nonnull(strstr(err.msg, "valid split"));
    printf("vocab: unseen: %s\n", err.msg);
    lipt_vocab_enable_unk(&v);
    ck_assert_int_eq(v.size, 13);
    ck_assert_int_eq(v.unk_id, 12);
    ck_assert_int_eq(lipt_vocab_encode(&v, (const uint8_t *)valid, strlen(valid), ids, "valid split", &err), LIPT_OK);
    ck_assert_int_eq(ids[10], 12);
    ck_assert_int_eq(ids[0], v.id_of['h']);
    bn = lipt_vocab_to_blob(&v, blob, sizeof blob);
    ck_assert_int_eq(lipt_vocab_from_blob(&w, blob, bn, &err), LIPT_OK);
    ck_assert(lipt_vocab_equal(&v, &w));
    ck_assert_int_eq(w.unk_id, 12);

    /* decoding: raw, escaped, PTB file form, truncation like snprintf */
    char out[64];
    size_t L = lipt_vocab_decode(&v, ids, strlen(valid), 0, out, sizeof out);
    ck_assert_str_eq(out, "hello\nwhy <unk>oo");
    ck_assert_uint_eq(L, strlen(out));
    lipt_vocab_decode(&v, ids, strlen(valid), LIPT_DECODE_ESCAPE, out, sizeof out);
    ck_assert_str_eq(out, "hello\\nwhy <unk>oo");
    lipt_vocab_decode(&v, ids, 7, LIPT_DECODE_PTB_FILE, out, sizeof out);
    ck_assert_str_eq(out, "h e l l o \n w ");
    L = lipt_vocab_decode(&v, ids, strlen(valid), 0, out, 4);
    ck_assert_str_eq(out, "hel");
    ck_assert_uint_eq(L, 17);
    int32_t badid = 99;
    lipt_vocab_decode(&v, &badid, 1, 0, out, sizeof out);
    ck_assert_str_eq(out, "<?>");

    /* byte vocabulary: identity, blob round trip */
    lipt_vocab_init_bytes(&v);
    bn = lipt_vocab_to_blob(&v, blob, sizeof blob);
    ck_assert_uint_eq(bn, 266);
    ck_assert_int_eq(lipt_vocab_from_blob(&w, blob, bn, &err), LIPT_OK);
    ck_assert(lipt_vocab_equal(&v, &w));
    uint8_t all[256];
    for (int i = 0; i < 256; i++) all[i] = (uint8_t)(255 - i);
    ck_assert_int_eq(lipt_vocab_encode(&v, all, 256, ids, "x", &err), LIPT_OK);
    ck_assert_int_eq(ids[0], 255);
    ck_assert_int_eq(ids[31], 224);

    /* at dataset level, plain text by default: the whole text's bytes (nanoGPT's vocabulary), so a symbol first seen
     * in valid has an id */
    const char *text = "abababababababababab" "ababc";
    lipt_dataset ds;
    lipt_data_opts o = {.frac = {0.8, 0.2, 0}};
    ck_assert_int_eq(lipt_dataset_from_text((const uint8_t *)text, strlen(text), "mem.txt", &o, &ds, &err), LIPT_OK);
    ck_assert_int_eq(ds.vocab.size, 3);
    ck_assert_int_eq(ds.vocab_whole, 1);
    ck_assert_int_eq(ds.tok[1][4], ds.vocab.id_of['c']);
    lipt_dataset_free(&ds);
    /* the training split's vocabulary (--vocab built): a symbol only in valid is an error naming that split, unless
     * <unk> is on */
    o.vocab = LIPT_VOCAB_BUILT;
    ck_assert_int_eq(lipt_dataset_from_text((const uint8_t *)text, strlen(text), "mem.txt", &o, &ds, &err), LIPT_ERR_FORMAT);
    ck_assert_ptr_nonnull(strstr(err.msg, "valid split"));
    ck_assert_ptr_nonnull(strstr(err.msg, "'c'"));
    ck_assert_ptr_nonnull(strstr(err.msg, "position 4"));
    printf("vocab: dataset: %s\n", err.msg);
    o.unk = 1;
    ck_assert_int_eq(lipt_dataset_from_text((const uint8_t *)text, strlen(text), "mem.txt", &o, &ds, &err), LIPT_OK);
    ck_assert_int_eq(ds.vocab.size, 3);
    ck_assert_int_eq(ds.tok[1][4], ds.vocab.unk_id);
    /* a checkpoint's vocabulary is used as given */
    lipt_vocab saved = ds.vocab;
    lipt_dataset_free(&ds);
    lipt_data_opts o2 = {.frac = {0.5, 0.5, 0}, .use_vocab = &saved};
    ck_assert_int_eq(lipt_dataset_from_text((const uint8_t *)"ccab", 4, "m2", &o2, &ds, &err), LIPT_OK);
    ck_assert(lipt_vocab_equal(&ds.vocab, &saved));
    ck_assert_int_eq(ds.tok[0][0], saved.unk_id);
    lipt_dataset_free(&ds);
}
END_TEST

/* ---------------------------------------------------------------- splits, lookup */

START_TEST(test_fraction_split) {
    static uint8_t buf[1115394];
    lipt_rng rng;
    lipt_rng_seed(&rng, 7);
    for (size_t i = 0; i < sizeof buf; i++) buf[i] = (uint8_t)('a' + lipt_rng_below(&rng, 26));
    struct { size_t n; double f[3]; size_t want[3]; } cases[] = {
        {1000, {0, 0, 0}, {900, 50, 50}},
        {10, {0.7, 0.2, 0.1}, {7, 2, 1}},
        {10, {0.7, 0.1, 0.2}, {7, 1, 2}},        /* 10 * (0.7 + 0.1) = 7.999... in double */
        {100, {0.29, 0.01, 0.7}, {29, 1, 70}},   /* 100 * 0.29 = 28.999... */
        {1115394, {0, 0, 0}, {1003854, 55770, 55770}}, /* nanoGPT's int(0.9 n) for tiny-shakespeare */
        {1115394, {0.8, 0.1, 0.1}, {892315, 111539, 111540}},
        {101, {0.5, 0.25, 0}, {50, 25, 0}},
        {7, {1, 0, 0}, {7, 0, 0}},
    };
    lipt_error err = {0};
    for (size_t c = 0; c < sizeof cases / sizeof cases[0]; c++) {
        lipt_dataset ds;
        lipt_data_opts o = {.frac = {cases[c].f[0], cases[c].f[1], cases[c].f[2]}, .vocab = LIPT_VOCAB_BYTES};
        ck_assert_msg(lipt_dataset_from_text(buf, cases[c].n, "mem", &o, &ds, &err) == LIPT_OK, "%s", err.msg);
        size_t off = 0;
        for (int s = 0; s < 3; s++) {
            ck_assert_msg(ds.len[s] == cases[c].want[s], "case %zu split %d: %zu, want %zu", c, s, ds.len[s],
                          cases[c].want[s]);
            ck_assert_uint_eq(ds.offset[s], off);
            size_t bad_sym = 0;
            for (size_t i = 0; i < ds.len[s]; i++) bad_sym += ds.vocab.sym[ds.tok[s][i]] != buf[off + i];
            ck_assert_uint_eq(bad_sym, 0);
            off += ds.len[s];
        }
        lipt_dataset_free(&ds);
    }
    printf("fraction_split: %zu cases match floor(n f) boundaries\n", sizeof cases / sizeof cases[0]);
    lipt_dataset ds;
    lipt_data_opts bad = {.frac = {0.9, 0.2, 0}};
    ck_assert_int_eq(lipt_dataset_from_text(buf, 100, "mem", &bad, &ds, &err), LIPT_ERR_ARG);
    lipt_data_opts bad2 = {.frac = {0, 0.5, 0.5}};
    ck_assert_int_eq(lipt_dataset_from_text(buf, 100, "mem", &bad2, &ds, &err), LIPT_ERR_ARG);
    lipt_data_opts bad3 = {.split = LIPT_SPLIT_STANDARD};
    ck_assert_int_eq(lipt_dataset_from_text(buf, 100, "mem", &bad3, &ds, &err), LIPT_ERR_ARG);
    printf("fraction_split: standard split on plain text: %s\n", err.msg);

    /* command-line forms */
    lipt_data_opts po = {0};
    ck_assert_int_eq(lipt_data_parse_split("0.8,0.1,0.1", &po, &err), LIPT_OK);
    ck_assert_int_eq(po.split, LIPT_SPLIT_FRACTIONS);
    ck_assert(po.frac[0] == 0.8 && po.frac[1] == 0.1 && po.frac[2] == 0.1);
    ck_assert_int_eq(lipt_data_parse_split("0.9,0.1", &po, &err), LIPT_OK);
    ck_assert(po.frac[2] >= 0 && po.frac[2] < 1e-12);
    ck_assert_int_eq(lipt_data_parse_split("standard", &po, &err), LIPT_OK);
    ck_assert_int_eq(po.split, LIPT_SPLIT_STANDARD);
    ck_assert_int_eq(lipt_data_parse_split("0.9", &po, &err), LIPT_ERR_ARG);
    ck_assert_int_eq(lipt_data_parse_split("0.9,x", &po, &err), LIPT_ERR_ARG);
    ck_assert_int_eq(lipt_data_parse_split("0.9,", &po, &err), LIPT_ERR_ARG);
    ck_assert_int_eq(lipt_data_parse_split("0.9,0.05,0.05,0", &po, &err), LIPT_ERR_ARG);
    ck_assert_int_eq(lipt_data_parse_vocab("bytes", &po, &err), LIPT_OK);
    ck_assert_int_eq(po.vocab, LIPT_VOCAB_BYTES);
    ck_assert_int_eq(lipt_data_parse_vocab("chars", &po, &err), LIPT_ERR_ARG);

    /* lookup errors list where they looked */
    setenv("LIPT_DATA", "/nonexistent/lipt", 1);
    lipt_corpus_loc loc;
    ck_assert_int_eq(lipt_corpus_locate("ptb", "/nonexistent/repo", &loc, &err), LIPT_ERR_IO);
    ck_assert_ptr_nonnull(strstr(err.msg, "/nonexistent/lipt/ptb"));
    ck_assert_ptr_nonnull(strstr(err.msg, "/nonexistent/repo/data/ptb"));
    ck_assert_ptr_nonnull(strstr(err.msg, "/nonexistent/repo/../shared/data/ptb"));
    printf("fraction_split: lookup failure: %s\n", err.msg);

    /* real corpora through name lookup, when present */
    char root[1024];
    if (!shared_root(root, sizeof root, "tinyshakespeare/input.txt", "fraction_split")) return;
    setenv("LIPT_DATA", root, 1);
    lipt_data_opts o = {.repo_root = "/nonexistent"};
    ck_assert_msg(lipt_dataset_load("tinyshakespeare", &o, &ds, &err) == LIPT_OK, "%s", err.msg);
    ck_assert_uint_eq(ds.len[0], 1003854);
    ck_assert_uint_eq(ds.len[1], 55770);
    ck_assert_uint_eq(ds.len[2], 55770);
    ck_assert_int_eq(ds.vocab.n_sym, 65); /* the whole file's bytes are the training split's: nanoGPT's 65 */
    char desc[1024];
    lipt_dataset_describe(&ds, desc, sizeof desc);
    printf("fraction_split: %s\n", desc);
    lipt_dataset_free(&ds);
    /* War and Peace: its Gutenberg licence at the end holds '$', '%' and '@', which the training part does not; the
     * whole text's vocabulary reads it (the training split's refused it) */
    if (lipt_dataset_load("warandpeace", &o, &ds, &err) != LIPT_ERR_IO) {
        ck_assert_msg(ds.len[0] > 0, "%s", err.msg);
        ck_assert_int_eq(ds.vocab.n_sym, 113);
        ck_assert_int_ge(ds.vocab.id_of['%'], 0);
        lipt_dataset_free(&ds);
    }
    /* text8 prefix: the standard split is refused, fractions give a 27-symbol vocabulary */
    lipt_status st = lipt_dataset_load("text8", &o, &ds, &err);
    if (st == LIPT_ERR_IO) return; /* no text8 copy */
    ck_assert_int_eq(st, LIPT_ERR_ARG);
    ck_assert_ptr_nonnull(strstr(err.msg, "prefix"));
    printf("fraction_split: text8: %s\n", err.msg);
    o.split = LIPT_SPLIT_FRACTIONS;
    ck_assert_msg(lipt_dataset_load("text8", &o, &ds, &err) == LIPT_OK, "%s", err.msg);
    ck_assert_int_eq(ds.vocab.n_sym, 27);
    ck_assert_int_eq(ds.tok[0][-1], ds.vocab.id_of[' ']); /* no newline in text8: the boundary is a space */
    ck_assert_int_eq(ds.loc.is_prefix, 1);
    lipt_dataset_free(&ds);
}
END_TEST

/* ---------------------------------------------------------------- batcher */

START_TEST(test_batcher) {
    enum { N = 1000, B = 5, T = 16 };
    lipt_tok tok[N];
    lipt_rng rng;
    lipt_rng_seed(&rng, 3);
    for (int i = 0; i < N; i++) tok[i] = (lipt_tok)lipt_rng_below(&rng, 50);
    lipt_batcher a, b, c;
    lipt_error err = {0};
    ck_assert_int_eq(lipt_batcher_init(&a, tok, N, B, T, 1234, &err), LIPT_OK);
    ck_assert_int_eq(lipt_batcher_init(&b, tok, N, B, T, 1234, &err), LIPT_OK);
    ck_assert_int_eq(lipt_batcher_init(&c, tok, N, B, T, 1235, &err), LIPT_OK);
    int32_t in1[B * T], tg1[B * T], in2[B * T], tg2[B * T];
    size_t s1[B], s2[B];
    int differ = 0;
    lipt_batcher_state mid;
    uint8_t packed[LIPT_BATCHER_STATE_BYTES];
    for (int it = 0; it < 50; it++) {
        if (it == 20) {
            mid = a.st;
            lipt_batcher_state_pack(&a.st, packed);
        }
        lipt_batcher_next(&a, in1, tg1, s1);
        lipt_batcher_next(&b, in2, tg2, s2);
        ck_assert_mem_eq(in1, in2, sizeof in1);
        ck_assert_mem_eq(tg1, tg2, sizeof tg1);
        ck_assert_mem_eq(s1, s2, sizeof s1);
        for (int r = 0; r < B; r++) {
            ck_assert_uint_le(s1[r], N - T - 1);
            for (int t = 0; t < T; t++) {
                ck_assert_int_eq(in1[r * T + t], tok[s1[r] + t]);
                ck_assert_int_eq(tg1[r * T + t], tok[s1[r] + t + 1]);
                if (t + 1 < T) ck_assert_int_eq(tg1[r * T + t], in1[r * T + t + 1]);
            }
        }
        lipt_batcher_next(&c, in2, tg2, s2);
        differ += memcmp(s1, s2, sizeof s1) != 0;
    }
    ck_assert_int_gt(differ, 45);
    ck_assert_uint_eq(a.st.batches, 50);
    /* resuming from a copied or packed state replays the same stream */
    int32_t ref[30][B];
    lipt_batcher_state end = a.st;
    a.st = mid;
    for (int it = 0; it < 30; it++) {
        lipt_batcher_next(&a, in1, tg1, s1);
        for (int r = 0; r < B; r++) ref[it][r] = (int32_t)s1[r];
    }
    ck_assert_mem_eq(&a.st, &end, sizeof end);
    lipt_batcher_state un;
    ck_assert_int_eq(lipt_batcher_state_unpack(&un, packed, sizeof packed, &err), LIPT_OK);
    ck_assert_uint_eq(un.batches, 20);
    ck_assert_uint_eq(un.seed, 1234);
    c.st = un;
    for (int it = 0; it < 30; it++) {
        lipt_batcher_next(&c, in1, tg1, s1);
        for (int r = 0; r < B; r++) ck_assert_int_eq(ref[it][r], (int32_t)s1[r]);
    }
    packed[0] = 'X';
    ck_assert_int_eq(lipt_batcher_state_unpack(&un, packed, sizeof packed, &err), LIPT_ERR_FORMAT);
    /* every start in [0, n-T-1] is reachable, including both ends */
    lipt_batcher d;
    ck_assert_int_eq(lipt_batcher_init(&d, tok, T + 3, 1, T, 9, &err), LIPT_OK);
    int seen[3] = {0};
    for (int it = 0; it < 200; it++) {
        lipt_batcher_next(&d, in1, tg1, s1);
        ck_assert_uint_lt(s1[0], 3);
        seen[s1[0]]++;
    }
    ck_assert(seen[0] && seen[1] && seen[2]);
    ck_assert_int_eq(lipt_batcher_init(&d, tok, T, 1, T, 9, &err), LIPT_ERR_ARG);
    printf("batcher: identical streams for equal seeds, %d/50 batches differ for seeds 1234/1235; %s\n", differ, err.msg);
}
END_TEST

/* ---------------------------------------------------------------- evaluation windows */

static void check_protocol(size_t n, int T, int S, size_t *windows, int *min_ctx) {
    lipt_eval_iter it;
    lipt_error err = {0};
    ck_assert_int_eq(lipt_eval_iter_init(&it, n, T, S, &err), LIPT_OK);
    size_t expect_w = lipt_eval_iter_count(&it);
    int *hits = calloc(n + 1, sizeof(int));
    lipt_eval_window w;
    size_t k = 0;
    *min_ctx = 1 << 30;
    while (lipt_eval_iter_next(&it, &w)) {
        ck_assert_int_ge(w.len, 1);
        ck_assert_int_le(w.len, T);
        ck_assert_int_ge(w.score_from, 0);
        ck_assert_int_lt(w.score_from, w.len);
        ck_assert_uint_le(w.start + (size_t)w.len, n - 1);
        if (S == T) ck_assert_int_eq(w.score_from, 0);
        for (int p = w.score_from; p < w.len; p++) {
            hits[w.start + 1 + (size_t)p]++;
            /* context of a scored symbol inside its window: p + 1 tokens */
            if (k > 0 && S < T && w.len == T && p + 1 < *min_ctx) *min_ctx = p + 1;
        }
        k++;
    }
    ck_assert_uint_eq(k, expect_w);
    ck_assert_int_eq(hits[0], 0);
    for (size_t j = 1; j < n; j++)
        if (hits[j] != 1) ck_abort_msg("n %zu T %d S %d: target %zu scored %d times", n, T, S, j, hits[j]);
    if (S < T && *min_ctx != (1 << 30)) ck_assert_int_ge(*min_ctx, T - S + 1);
    free(hits);
    *windows = k;
}

START_TEST(test_eval_iter) {
    /* hand-checked: 10 targets, window 4 */
    lipt_eval_iter it;
    lipt_eval_window w;
    lipt_error err = {0};
    ck_assert_int_eq(lipt_eval_iter_init(&it, 11, 4, 2, &err), LIPT_OK);
    const int slide[4][3] = {{0, 4, 0}, {2, 4, 2}, {4, 4, 2}, {6, 4, 2}};
    for (int i = 0; i < 4; i++) {
        ck_assert(lipt_eval_iter_next(&it, &w));
        ck_assert_uint_eq(w.start, (size_t)slide[i][0]);
        ck_assert_int_eq(w.len, slide[i][1]);
        ck_assert_int_eq(w.score_from, slide[i][2]);
    }
    ck_assert(!lipt_eval_iter_next(&it, &w));
    ck_assert_int_eq(lipt_eval_iter_init(&it, 11, 4, 4, &err), LIPT_OK);
    const int nonov[3][3] = {{0, 4, 0}, {4, 4, 0}, {8, 2, 0}}; /* tail shorter than a window */
    for (int i = 0; i < 3; i++) {
        ck_assert(lipt_eval_iter_next(&it, &w));
        ck_assert_uint_eq(w.start, (size_t)nonov[i][0]);
        ck_assert_int_eq(w.len, nonov[i][1]);
        ck_assert_int_eq(w.score_from, nonov[i][2]);
    }
    ck_assert(!lipt_eval_iter_next(&it, &w));
    /* sliding, 12 targets, window 4, stride 3: the tail window scores fewer than a stride */
    ck_assert_int_eq(lipt_eval_iter_init(&it, 13, 4, 3, &err), LIPT_OK);
    const int tail[4][3] = {{0, 4, 0}, {3, 4, 1}, {6, 4, 1}, {8, 4, 2}};
    for (int i = 0; i < 4; i++) {
        ck_assert(lipt_eval_iter_next(&it, &w));
        ck_assert_uint_eq(w.start, (size_t)tail[i][0]);
        ck_assert_int_eq(w.len, tail[i][1]);
        ck_assert_int_eq(w.score_from, tail[i][2]);
    }
    ck_assert(!lipt_eval_iter_next(&it, &w));

    /* every target exactly once, over many sizes, including arrays shorter than a window */
    const size_t ns[] = {1, 2, 3, 5, 17, 64, 65, 100, 101, 257, 1000};
    const int Ts[] = {1, 2, 4, 7, 16, 33};
    size_t total = 0;
    for (size_t a = 0; a < sizeof ns / sizeof ns[0]; a++)
        for (size_t b = 0; b < sizeof Ts / sizeof Ts[0]; b++) {
            int T = Ts[b];
            int strides[4] = {1, T / 2 > 0 ? T / 2 : 1, T > 1 ? T - 1 : 1, T};
            for (int c = 0; c < 4; c++) {
                size_t nw;
                int mc;
                check_protocol(ns[a], T, strides[c], &nw, &mc);
                total++;
                if (strides[c] == T && ns[a] > 1) ck_assert_uint_eq(nw, (ns[a] - 1 + (size_t)T - 1) / (size_t)T);
            }
        }
    ck_assert_int_eq(lipt_eval_iter_init(&it, 10, 4, 5, &err), LIPT_ERR_ARG);
    ck_assert_int_eq(lipt_eval_iter_init(&it, 10, 4, 0, &err), LIPT_ERR_ARG);

    /* on a dataset: the split's first symbol is scored with the previous symbol as context */
    const char *text = "0123456789abcdefghij";
    lipt_dataset ds;
    lipt_data_opts o = {.frac = {0.5, 0.25, 0.25}, .vocab = LIPT_VOCAB_BYTES};
    ck_assert_int_eq(lipt_dataset_from_text((const uint8_t *)text, 20, "mem", &o, &ds, &err), LIPT_OK);
    size_t n;
    const lipt_tok *ev = lipt_dataset_eval_tokens(&ds, LIPT_VALID, &n);
    ck_assert_uint_eq(n, 6);
    ck_assert_int_eq(ev[0], '9');
    ck_assert_int_eq(lipt_eval_iter_init(&it, n, 3, 3, &err), LIPT_OK);
    int32_t in[3], tg[3];
    char scored[8] = "";
    while (lipt_eval_iter_next(&it, &w)) {
        lipt_eval_window_fill(ev, &w, in, tg);
        for (int p = 0; p < w.len; p++) {
            ck_assert_int_eq(in[p], ev[w.start + (size_t)p]);
            ck_assert_int_eq(tg[p], ev[w.start + (size_t)p + 1]);
        }
        for (int p = w.score_from; p < w.len; p++) scored[strlen(scored)] = (char)tg[p];
    }
    ck_assert_str_eq(scored, "abcde");
    ev = lipt_dataset_eval_tokens(&ds, LIPT_TRAIN, &n);
    ck_assert_int_eq(ev[0], ds.vocab.id_of['\n']);
    lipt_dataset_free(&ds);
    printf("eval_iter: %zu (n, window, stride) protocols score every symbol exactly once\n", total);
}
END_TEST

int main(void) {
    Suite *s = suite_create("data");
    TCase *tc = tcase_create("data");
    tcase_set_timeout(tc, 120);
    tcase_add_test(tc, test_ptb_real);
    tcase_add_test(tc, test_ptb_parse_small);
    tcase_add_test(tc, test_zip_enwik8);
    tcase_add_test(tc, test_gzip_roundtrip);
    tcase_add_test(tc, test_vocab);
    tcase_add_test(tc, test_fraction_split);
    tcase_add_test(tc, test_batcher);
    tcase_add_test(tc, test_eval_iter);
    suite_add_tcase(s, tc);
    return tu_run_suite(s);
}
