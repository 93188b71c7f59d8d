/* checkpoint + safetensors: round trips, model matching, every kind of damaged file rejected with a message,
 * atomic replacement under write faults, safetensors header and data read back (also by python). */
#include "testutil.h"

#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>
#include <zlib.h>

#include "lipt/checkpoint.h"
#include "lipt/safetensors.h"

static const char *CONFIG = "d_model = 6\nn_layers = 1\nattention = l2_tied\ncoeff = 0.9\n";
static const unsigned char VOCAB[] = {0, 'a', 'b', '\n', 0xff, '_', ' '};

/* ------------------------------------------------------------------ helpers */

static char tmpdir[64];

static void make_tmpdir(void) {
    snprintf(tmpdir, sizeof tmpdir, "/tmp/lipt_test_ckpt_XXXXXX");
    ck_assert_ptr_nonnull(mkdtemp(tmpdir));
}

static void rm_tmpdir(void) {
    char cmd[128];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", tmpdir);
    ck_assert_int_eq(system(cmd), 0);
}

static const char *tpath(const char *name, char *buf) {
    snprintf(buf, 160, "%s/%s", tmpdir, name);
    return buf;
}

static unsigned char *read_all(const char *path, size_t *n) {
    FILE *f = fopen(path, "rb");
    ck_assert_msg(f != NULL, "cannot open %s", path);
    fseek(f, 0, SEEK_END);
    long len = ftell(f);
    fseek(f, 0, SEEK_SET);
    unsigned char *b = malloc(len ? (size_t)len : 1);
    ck_assert_int_eq(fread(b, 1, (size_t)len, f), (size_t)len);
    fclose(f);
    *n = (size_t)len;
    return b;
}

static void write_all(const char *path, const void *b, size_t n) {
    FILE *f = fopen(path, "wb");
    ck_assert_ptr_nonnull(f);
    ck_assert_int_eq(fwrite(b, 1, n, f), n);
    fclose(f);
}

static int file_exists(const char *path) {
    struct stat sb;
    return stat(path, &sb) == 0;
}

/* Tensors of 1..4 dims with size-1 dims, no-decay flags and two buffers; `order` permutes registration
 * (loading matches by name); `big` adds a tensor whose compressed data spans many zlib chunks. */
static void make_params(lipt_params *p, int order, int big) {
    static const struct { const char *name; int ndim; int shape[4]; int flags; } T[] = {
        {"embed", 2, {11, 6}, LIPT_PARAM_NO_DECAY},
        {"blk0.wq", 2, {6, 6}, 0},
        {"blk0.bias", 1, {6}, LIPT_PARAM_NO_DECAY},
        {"blk0.sn_u", 1, {6}, LIPT_PARAM_BUFFER},
        {"blk0.w4d", 4, {2, 1, 3, 2}, 0},
        {"ln.g", 1, {1}, LIPT_PARAM_NO_DECAY},
        {"blk0.sn_v", 2, {1, 3}, LIPT_PARAM_BUFFER},
    };
    const int n = (int)(sizeof T / sizeof T[0]);
    lipt_params_init(p);
    for (int k = 0; k < n; k++) {
        int i = order ? n - 1 - k : k;
        lipt_param_add(p, T[i].name, T[i].ndim, T[i].shape, T[i].flags);
    }
    if (big) lipt_param_add(p, "big", 2, (int[]){400, 301}, 0);
    lipt_params_finalize(p);
}

static void fill_params(lipt_params *p, uint64_t seed) {
    lipt_rng r;
    lipt_rng_seed(&r, seed);
    lipt_rng_fill_normal(&r, p->value, p->n_train, 1.0f);
    lipt_rng_fill_normal(&r, p->grad, p->n_train, 1.0f);
    lipt_rng_fill_normal(&r, p->m, p->n_train, 0.1f);
    lipt_rng_fill_uniform(&r, p->v, p->n_train, 0.0f, 0.01f);
    lipt_rng_fill_normal(&r, p->buf, p->n_buf, 1.0f);
}

typedef struct {
    lipt_rng rngs[3];
    unsigned char extra[40];
} fixture_blobs;

static lipt_ckpt_contents contents(const lipt_params *p, fixture_blobs *fb, int64_t step, int with_opt) {
    for (int i = 0; i < 3; i++) lipt_rng_seed(&fb->rngs[i], 100 + (uint64_t)i);
    lipt_rng_u64(&fb->rngs[1]);
    for (int i = 0; i < 40; i++) fb->extra[i] = (unsigned char)(i * 37 + 1);
    return (lipt_ckpt_contents){.config_text = CONFIG, .vocab = VOCAB, .vocab_len = sizeof VOCAB, .params = p,
                                .with_optimizer = with_opt, .adam_t = step + 7, .step = step, .rngs = fb->rngs,
                                .n_rngs = 3, .extra = fb->extra, .extra_len = 40};
}

/* A small valid checkpoint image. */
static unsigned char *small_image(size_t *n, int with_opt) {
    char path[160];
    lipt_params p;
    make_params(&p, 0, 0);
    fill_params(&p, 1);
    fixture_blobs fb;
    lipt_ckpt_contents c = contents(&p, &fb, 77, with_opt);
    lipt_error err = {0};
    ck_assert_int_eq(lipt_ckpt_save(tpath("small.ckpt", path), &c, &err), LIPT_OK);
    lipt_params_free(&p);
    return read_all(path, n);
}

/* Opens an exactly sized heap copy, so the sanitizer sees any read outside the image. */
static lipt_status open_copy(const unsigned char *img, size_t n, lipt_error *err) {
    unsigned char *b = malloc(n ? n : 1);
    memcpy(b, img, n);
    lipt_ckpt ck;
    memset(err, 0, sizeof *err);
    lipt_status st = lipt_ckpt_open_mem(b, n, &ck, err);
    if (st == LIPT_OK) {
        /* Whatever opened must be self-consistent enough to load into a model built from its own index. */
        lipt_params q;
        lipt_params_init(&q);
        for (int i = 0; i < ck.n_tensors; i++)
            lipt_param_add(&q, ck.tensors[i].name, ck.tensors[i].ndim, ck.tensors[i].shape, ck.tensors[i].flags);
        lipt_params_finalize(&q);
        lipt_error e2 = {0};
        ck_assert_int_eq(lipt_ckpt_load_params(&ck, &q, ck.has_optimizer, &e2), LIPT_OK);
        lipt_params_free(&q);
    } else {
        ck_assert_msg(err->msg[0] != 0, "status %d without a message", st);
        ck_assert_msg(strchr(err->msg, '\n') == NULL, "message is not one line: %s", err->msg);
        ck_assert_ptr_null(ck.tensors);
    }
    lipt_ckpt_close(&ck);
    free(b);
    return st;
}

/* Splitting an image into its sections and joining them back with fresh CRCs lets the tests corrupt the
 * *contents* of a section while every checksum stays valid (the documented layout, see docs/CHECKPOINT.md). */
typedef struct {
    char tag[4];
    unsigned char *raw;
    size_t n;
} tsec;

static int split_image(const unsigned char *img, size_t n, tsec *out, int max) {
    (void)n;
    uint32_t ns = (uint32_t)img[12] | (uint32_t)img[13] << 8;
    size_t pos = 32;
    ck_assert_int_le((int)ns, max);
    for (uint32_t k = 0; k < ns; k++) {
        const unsigned char *h = img + pos;
        uint64_t raw = 0, stored = 0;
        for (int i = 7; i >= 0; i--) raw = raw << 8 | h[8 + i], stored = stored << 8 | h[16 + i];
        memcpy(out[k].tag, h, 4);
        out[k].n = (size_t)raw;
        out[k].raw = malloc(raw + 1);
        uLongf dl = (uLongf)raw;
        ck_assert_int_eq(uncompress(out[k].raw, &dl, h + 32, (uLong)stored), Z_OK);
        ck_assert_int_eq(dl, raw);
        pos += 32 + (size_t)stored;
    }
    ck_assert_int_eq(pos, n);
    return (int)ns;
}

static void put32(unsigned char *p, uint32_t v) {
    for (int i = 0; i < 4; i++) p[i] = (unsigned char)(v >> 8 * i);
}
static void put64(unsigned char *p, uint64_t v) {
    for (int i = 0; i < 8; i++) p[i] = (unsigned char)(v >> 8 * i);
}

static unsigned char *join_image(const tsec *s, int ns, uint32_t version, size_t *n) {
    size_t cap = 32;
    for (int k = 0; k < ns; k++) cap += 32 + compressBound((uLong)s[k].n);
    unsigned char *img = calloc(1, cap);
    size_t pos = 32;
    for (int k = 0; k < ns; k++) {
        unsigned char *h = img + pos;
        uLongf cl = compressBound((uLong)s[k].n);
        ck_assert_int_eq(compress2(h + 32, &cl, s[k].raw, (uLong)s[k].n, 6), Z_OK);
        memcpy(h, s[k].tag, 4);
        put32(h + 4, 1);
        put64(h + 8, s[k].n);
        put64(h + 16, cl);
        put32(h + 24, (uint32_t)crc32(0, h + 32, (uInt)cl));
        put32(h + 28, (uint32_t)crc32(0, h, 28));
        pos += 32 + cl;
    }
    memcpy(img, "LIPTCKPT", 8);
    put32(img + 8, version);
    put32(img + 12, (uint32_t)ns);
    put64(img + 16, pos);
    put32(img + 28, (uint32_t)crc32(0, img, 28));
    *n = pos;
    return img;
}

static void free_secs(tsec *s, int ns) {
    for (int k = 0; k < ns; k++) free(s[k].raw);
}

static int find_sec(const tsec *s, int ns, const char *tag) {
    for (int k = 0; k < ns; k++)
        if (!memcmp(s[k].tag, tag, 4)) return k;
    return -1;
}

/* ------------------------------------------------------------------ round trips */

static void check_same_tensor(const lipt_params *a, const lipt_params *b, const char *name, int with_opt) {
    lipt_tensor *ta = lipt_param_find(a, name), *tb = lipt_param_find(b, name);
    ck_assert_ptr_nonnull(ta);
    ck_assert_ptr_nonnull(tb);
    ck_assert_msg(memcmp(ta->data, tb->data, ta->numel * sizeof(float)) == 0, "values of %s differ", name);
    if (with_opt && !(lipt_param_flags(a, ta) & LIPT_PARAM_BUFFER)) {
        size_t oa = (size_t)(ta->data - a->value), ob = (size_t)(tb->data - b->value);
        ck_assert_msg(memcmp(a->m + oa, b->m + ob, ta->numel * sizeof(float)) == 0, "m of %s differs", name);
        ck_assert_msg(memcmp(a->v + oa, b->v + ob, ta->numel * sizeof(float)) == 0, "v of %s differs", name);
    }
}

START_TEST(test_roundtrip) {
    make_tmpdir();
    for (int big = 0; big < 2; big++) {
        char path[160], tmp[170];
        lipt_params p;
        make_params(&p, 0, big);
        fill_params(&p, 7 + (uint64_t)big);
        fixture_blobs fb;
        lipt_ckpt_contents c = contents(&p, &fb, 1234, 1);
        c.compression = big ? 6 : 0;
        lipt_error err = {0};
        ck_assert_int_eq(lipt_ckpt_save(tpath("a.ckpt", path), &c, &err), LIPT_OK);
        snprintf(tmp, sizeof tmp, "%s.tmp", path);
        ck_assert_msg(!file_exists(tmp), "temporary left behind");

        lipt_ckpt ck;
        ck_assert_msg(lipt_ckpt_open(path, &ck, &err) == LIPT_OK, "open: %s", err.msg);
        ck_assert_uint_eq(ck.version, LIPT_CKPT_VERSION);
        ck_assert_str_eq(ck.config_text, CONFIG);
        ck_assert_uint_eq(ck.config_len, strlen(CONFIG));
        ck_assert_uint_eq(ck.vocab_len, sizeof VOCAB);
        ck_assert(memcmp(ck.vocab, VOCAB, sizeof VOCAB) == 0);
        ck_assert_int_eq((int)ck.step, 1234);
        ck_assert_int_eq(ck.has_optimizer, 1);
        ck_assert_int_eq((int)ck.adam_t, 1241);
        ck_assert_int_eq(ck.n_rngs, 3);
        ck_assert(memcmp(ck.rngs, fb.rngs, sizeof fb.rngs) == 0);
        ck_assert_uint_eq(ck.extra_len, 40);
        ck_assert(memcmp(ck.extra, fb.extra, 40) == 0);
        ck_assert_int_eq(ck.n_tensors, p.n);
        for (int i = 0; i < p.n; i++) { /* index in registration order with flags */
            ck_assert_str_eq(ck.tensors[i].name, p.list[i]->name);
            ck_assert_int_eq(ck.tensors[i].flags, p.flags[i]);
            ck_assert_int_eq(ck.tensors[i].ndim, p.list[i]->ndim);
        }
        const lipt_ckpt_tensor *w4 = lipt_ckpt_find(&ck, "blk0.w4d");
        ck_assert_ptr_nonnull(w4);
        ck_assert_int_eq(w4->shape[3], 2);
        ck_assert_ptr_null(lipt_ckpt_find(&ck, "nope"));

        /* A model registered in the opposite order: matched by name. */
        lipt_params q;
        make_params(&q, 1, big);
        ck_assert_msg(lipt_ckpt_load_params(&ck, &q, 1, &err) == LIPT_OK, "load: %s", err.msg);
        for (int i = 0; i < p.n; i++) check_same_tensor(&p, &q, p.list[i]->name, 1);
        lipt_params_free(&q);

        /* Without the optimizer: m and v stay as they were (zero). */
        make_params(&q, 0, big);
        ck_assert_int_eq(lipt_ckpt_load_params(&ck, &q, 0, &err), LIPT_OK);
        ck_assert(memcmp(q.value, p.value, p.n_train * sizeof(float)) == 0);
        ck_assert(memcmp(q.buf, p.buf, p.n_buf * sizeof(float)) == 0);
        for (size_t i = 0; i < q.n_train; i++) ck_assert(q.m[i] == 0 && q.v[i] == 0);
        lipt_params_free(&q);
        lipt_ckpt_close(&ck);
        lipt_ckpt_close(&ck); /* idempotent */

        size_t n;
        free(read_all(path, &n));
        printf("checkpoint round trip%s: %zu floats trainable, %zu buffer, file %zu bytes: bit-exact\n",
               big ? " (big, level 6)" : "", p.n_train, p.n_buf, n);
        lipt_params_free(&p);
    }

    /* No optimizer, no blobs, no RNGs. */
    {
        char path[160];
        lipt_params p;
        make_params(&p, 0, 0);
        fill_params(&p, 3);
        lipt_ckpt_contents c = {.params = &p, .step = 5};
        lipt_error err = {0};
        ck_assert_int_eq(lipt_ckpt_save(tpath("b.ckpt", path), &c, &err), LIPT_OK);
        lipt_ckpt ck;
        ck_assert_int_eq(lipt_ckpt_open(path, &ck, &err), LIPT_OK);
        ck_assert_int_eq(ck.has_optimizer, 0);
        ck_assert_ptr_null(ck.m);
        ck_assert_int_eq(ck.n_rngs, 0);
        ck_assert_uint_eq(ck.vocab_len, 0);
        ck_assert_uint_eq(ck.extra_len, 0);
        ck_assert_str_eq(ck.config_text, "");
        lipt_params q;
        make_params(&q, 0, 0);
        ck_assert_int_eq(lipt_ckpt_load_params(&ck, &q, 1, &err), LIPT_ERR_ARG);
        ck_assert_ptr_nonnull(strstr(err.msg, "no optimizer state"));
        printf("load_optimizer without state: %s\n", err.msg);
        ck_assert_int_eq(lipt_ckpt_load_params(&ck, &q, 0, &err), LIPT_OK);
        ck_assert(memcmp(q.value, p.value, p.n_train * sizeof(float)) == 0);
        lipt_params_free(&q);
        lipt_ckpt_close(&ck);
        lipt_params_free(&p);
    }
    rm_tmpdir();
}
END_TEST

/* ------------------------------------------------------------------ model mismatch */

static lipt_status load_into(const lipt_ckpt *ck, lipt_params *q, lipt_error *err) {
    lipt_status st = lipt_ckpt_load_params(ck, q, 1, err);
    if (st) { /* nothing copied on failure */
        for (size_t i = 0; i < q->n_train; i++) ck_assert(q->value[i] == 0 && q->m[i] == 0);
        printf("  mismatch rejected: %s\n", err->msg);
    }
    return st;
}

START_TEST(test_mismatch) {
    make_tmpdir();
    char path[160];
    lipt_params p;
    make_params(&p, 0, 0);
    fill_params(&p, 11);
    fixture_blobs fb;
    lipt_ckpt_contents c = contents(&p, &fb, 10, 1);
    lipt_error err = {0};
    ck_assert_int_eq(lipt_ckpt_save(tpath("m.ckpt", path), &c, &err), LIPT_OK);
    lipt_ckpt ck;
    ck_assert_int_eq(lipt_ckpt_open(path, &ck, &err), LIPT_OK);

    lipt_params q;
    /* Shape differs. */
    lipt_params_init(&q);
    lipt_param_add(&q, "embed", 2, (int[]){11, 6}, 0);
    lipt_param_add(&q, "blk0.wq", 2, (int[]){6, 7}, 0);
    lipt_params_finalize(&q);
    ck_assert_int_eq(load_into(&ck, &q, &err), LIPT_ERR_ARG);
    ck_assert_ptr_nonnull(strstr(err.msg, "'blk0.wq'"));
    ck_assert_ptr_nonnull(strstr(err.msg, "[6,6]"));
    ck_assert_ptr_nonnull(strstr(err.msg, "[6,7]"));
    lipt_params_free(&q);
    /* Rank differs. */
    lipt_params_init(&q);
    lipt_param_add(&q, "blk0.bias", 2, (int[]){1, 6}, 0);
    lipt_params_finalize(&q);
    ck_assert_int_eq(load_into(&ck, &q, &err), LIPT_ERR_ARG);
    ck_assert_ptr_nonnull(strstr(err.msg, "'blk0.bias'"));
    lipt_params_free(&q);
    /* Model has a tensor the checkpoint lacks. */
    make_params(&q, 0, 1);
    ck_assert_int_eq(load_into(&ck, &q, &err), LIPT_ERR_ARG);
    ck_assert_ptr_nonnull(strstr(err.msg, "lacks tensor 'big'"));
    lipt_params_free(&q);
    /* Checkpoint has a tensor the model lacks. */
    lipt_params_init(&q);
    lipt_param_add(&q, "embed", 2, (int[]){11, 6}, LIPT_PARAM_NO_DECAY);
    lipt_params_finalize(&q);
    ck_assert_int_eq(load_into(&ck, &q, &err), LIPT_ERR_ARG);
    ck_assert_ptr_nonnull(strstr(err.msg, "is not in the model"));
    lipt_params_free(&q);
    /* Buffer in the checkpoint, trainable in the model. */
    lipt_params_init(&q);
    lipt_param_add(&q, "blk0.sn_u", 1, (int[]){6}, 0);
    lipt_params_finalize(&q);
    ck_assert_int_eq(load_into(&ck, &q, &err), LIPT_ERR_ARG);
    ck_assert_ptr_nonnull(strstr(err.msg, "'blk0.sn_u' is a buffer in the checkpoint"));
    lipt_params_free(&q);
    /* Not finalized. */
    lipt_params_init(&q);
    ck_assert_int_eq(lipt_ckpt_load_params(&ck, &q, 0, &err), LIPT_ERR_ARG);
    lipt_params_free(&q);
    lipt_ckpt_close(&ck);

    /* Saving duplicate names is refused. */
    lipt_params d;
    lipt_params_init(&d);
    lipt_param_add(&d, "w", 1, (int[]){2}, 0);
    lipt_param_add(&d, "w", 1, (int[]){3}, 0);
    lipt_params_finalize(&d);
    lipt_ckpt_contents cd = {.params = &d};
    ck_assert_int_eq(lipt_ckpt_save(tpath("d.ckpt", path), &cd, &err), LIPT_ERR_ARG);
    ck_assert_ptr_nonnull(strstr(err.msg, "'w'"));
    ck_assert(!file_exists(path));
    lipt_params_free(&d);
    lipt_params_free(&p);
    rm_tmpdir();
}
END_TEST

/* ------------------------------------------------------------------ damaged files */

START_TEST(test_empty_missing_foreign) {
    make_tmpdir();
    char path[160];
    lipt_error err = {0};
    lipt_ckpt ck;

    write_all(tpath("empty.ckpt", path), "", 0);
    ck_assert_int_eq(lipt_ckpt_open(path, &ck, &err), LIPT_ERR_FORMAT);
    ck_assert_ptr_nonnull(strstr(err.msg, "empty"));
    printf("empty: %s\n", err.msg);

    ck_assert_int_eq(lipt_ckpt_open(tpath("missing.ckpt", path), &ck, &err), LIPT_ERR_IO);
    ck_assert_ptr_nonnull(strstr(err.msg, "missing.ckpt"));
    printf("missing: %s\n", err.msg);

    ck_assert_int_eq(lipt_ckpt_open(tmpdir, &ck, &err), LIPT_ERR_IO);
    printf("directory: %s\n", err.msg);

    const char *text = "d_model = 64\nn_layers = 2\nThis is a config file, not a checkpoint.\n";
    write_all(tpath("text.txt", path), text, strlen(text));
    ck_assert_int_eq(lipt_ckpt_open(path, &ck, &err), LIPT_ERR_FORMAT);
    ck_assert_ptr_nonnull(strstr(err.msg, "HINT: not a lipt checkpoint"));
    printf("text file: %s\n", err.msg);

    /* A zlib stream and a safetensors file: also foreign. */
    unsigned char z[256];
    uLongf zl = sizeof z;
    ck_assert_int_eq(compress2(z, &zl, (const Bytef *)text, (uLong)strlen(text), 9), Z_OK);
    ck_assert_int_eq(open_copy(z, zl, &err), LIPT_ERR_FORMAT);
    ck_assert_ptr_nonnull(strstr(err.msg, "HINT"));
    lipt_params p;
    make_params(&p, 0, 0);
    ck_assert_int_eq(lipt_safetensors_save(tpath("x.safetensors", path), &p, NULL, 0, &err), LIPT_OK);
    ck_assert_int_eq(lipt_ckpt_open(path, &ck, &err), LIPT_ERR_FORMAT);
    ck_assert_ptr_nonnull(strstr(err.msg, "HINT"));
    printf("safetensors file: %s\n", err.msg);
    lipt_params_free(&p);

    /* Three bytes that happen to start like the magic: truncated, not foreign. */
    ck_assert_int_eq(open_copy((const unsigned char *)"LIP", 3, &err), LIPT_ERR_FORMAT);
    ck_assert_ptr_nonnull(strstr(err.msg, "truncated"));
    rm_tmpdir();
}
END_TEST

START_TEST(test_truncated) {
    make_tmpdir();
    size_t n;
    unsigned char *img = small_image(&n, 1);
    lipt_error err;
    ck_assert_int_eq(open_copy(img, n, &err), LIPT_OK);
    const size_t cuts[] = {1, 4, 7, 8, 12, 16, 27, 31, 32, 33, 48, 63, 64, 65, 100, n / 3, n / 2, n - 33, n - 1};
    for (size_t i = 0; i < sizeof cuts / sizeof cuts[0]; i++) {
        size_t k = cuts[i];
        ck_assert_int_eq(open_copy(img, k, &err), LIPT_ERR_FORMAT);
        ck_assert_msg(strstr(err.msg, "truncated") != NULL, "cut at %zu: %s", k, err.msg);
        if (k >= 32) { /* says how many bytes were expected and found */
            char want[64];
            snprintf(want, sizeof want, "says %zu bytes, the file has %zu", n, k);
            ck_assert_msg(strstr(err.msg, want) != NULL, "cut at %zu: %s", k, err.msg);
        }
    }
    printf("truncated (at %zu of %zu bytes): %s\n", n / 2, n, (open_copy(img, n / 2, &err), err.msg));
    /* And data appended after a valid file. */
    unsigned char *longer = malloc(n + 5);
    memcpy(longer, img, n);
    memcpy(longer + n, "junk!", 5);
    ck_assert_int_eq(open_copy(longer, n + 5, &err), LIPT_ERR_FORMAT);
    ck_assert_ptr_nonnull(strstr(err.msg, "trailing"));
    printf("trailing data: %s\n", err.msg);
    free(longer);
    free(img);
    rm_tmpdir();
}
END_TEST

START_TEST(test_bit_flips) {
    make_tmpdir();
    size_t n;
    unsigned char *img = small_image(&n, 1);
    unsigned char *b = malloc(n);
    lipt_error err;
    /* Every bit of every byte of a small file (or a stride through a larger one). */
    size_t stride = n <= 4096 ? 1 : n / 4096 + 1;
    int tried = 0, kinds[5] = {0};
    for (size_t pos = 0; pos < n; pos += stride)
        for (int bit = 0; bit < 8; bit++) {
            memcpy(b, img, n);
            b[pos] ^= (unsigned char)(1u << bit);
            lipt_status st = open_copy(b, n, &err);
            ck_assert_msg(st == LIPT_ERR_FORMAT, "flip at byte %zu bit %d: status %d (%s)", pos, bit, st, err.msg);
            tried++;
            if (strstr(err.msg, "magic")) kinds[0]++;
            else if (strstr(err.msg, "version")) kinds[1]++;
            else if (strstr(err.msg, "CRC mismatch in section")) kinds[2]++;
            else if (strstr(err.msg, "CRC")) kinds[3]++;
            else kinds[4]++;
        }
    printf("bit flips: %d single-bit flips of a %zu-byte file all rejected: magic %d, version %d, section CRC %d, "
           "header CRCs %d, other %d\n",
           tried, n, kinds[0], kinds[1], kinds[2], kinds[3], kinds[4]);
    /* A flipped payload bit names its section. */
    memcpy(b, img, n);
    b[32 + 32 + 2] ^= 4; /* first section's payload: the config */
    ck_assert_int_eq(open_copy(b, n, &err), LIPT_ERR_FORMAT);
    ck_assert_ptr_nonnull(strstr(err.msg, "'CONF' (model config)"));
    printf("payload flip: %s\n", err.msg);
    b[32 + 32 + 2] ^= 4;
    b[20] ^= 1; /* a header size byte */
    ck_assert_int_eq(open_copy(b, n, &err), LIPT_ERR_FORMAT);
    ck_assert_ptr_nonnull(strstr(err.msg, "header CRC mismatch"));
    free(b);
    free(img);
    rm_tmpdir();
}
END_TEST

START_TEST(test_version_and_absurd) {
    make_tmpdir();
    size_t n;
    unsigned char *img = small_image(&n, 0);
    unsigned char *b = malloc(n);
    lipt_error err;

    /* Version 2 with a valid header CRC: say which version is supported. */
    memcpy(b, img, n);
    put32(b + 8, 2);
    put32(b + 28, (uint32_t)crc32(0, b, 28));
    ck_assert_int_eq(open_copy(b, n, &err), LIPT_ERR_FORMAT);
    ck_assert_ptr_nonnull(strstr(err.msg, "version 2 is not supported"));
    ck_assert_ptr_nonnull(strstr(err.msg, "version 1"));
    printf("wrong version: %s\n", err.msg);
    put32(b + 8, 0); /* ... and with a stale CRC */
    ck_assert_int_eq(open_copy(b, n, &err), LIPT_ERR_FORMAT);
    ck_assert_ptr_nonnull(strstr(err.msg, "version 0"));

    /* Absurd section count, valid CRC. */
    memcpy(b, img, n);
    put32(b + 12, 100000);
    put32(b + 28, (uint32_t)crc32(0, b, 28));
    ck_assert_int_eq(open_copy(b, n, &err), LIPT_ERR_FORMAT);
    ck_assert_ptr_nonnull(strstr(err.msg, "absurd"));
    printf("absurd section count: %s\n", err.msg);

    /* Absurd uncompressed size in a section header with a valid CRC. */
    memcpy(b, img, n);
    put64(b + 32 + 8, (uint64_t)1 << 50);
    put32(b + 32 + 28, (uint32_t)crc32(0, b + 32, 28));
    ck_assert_int_eq(open_copy(b, n, &err), LIPT_ERR_FORMAT);
    ck_assert_ptr_nonnull(strstr(err.msg, "absurd size"));
    printf("absurd size: %s\n", err.msg);
    /* Stored size beyond the end of the file. */
    memcpy(b, img, n);
    put64(b + 32 + 16, n);
    put32(b + 32 + 28, (uint32_t)crc32(0, b + 32, 28));
    ck_assert_int_eq(open_copy(b, n, &err), LIPT_ERR_FORMAT);
    ck_assert_ptr_nonnull(strstr(err.msg, "remain"));
    printf("stored size past the end: %s\n", err.msg);
    /* Declared raw size one too large (decompresses short) and one too small. */
    for (int d = -1; d <= 1; d += 2) {
        memcpy(b, img, n);
        uint64_t raw = strlen(CONFIG) + (uint64_t)(int64_t)d;
        put64(b + 32 + 8, raw);
        put32(b + 32 + 28, (uint32_t)crc32(0, b + 32, 28));
        ck_assert_int_eq(open_copy(b, n, &err), LIPT_ERR_FORMAT);
        ck_assert_ptr_nonnull(strstr(err.msg, "decompressing section 'CONF'"));
        printf("raw size %+d: %s\n", d, err.msg);
    }
    /* Garbage zlib payload with a valid CRC. */
    memcpy(b, img, n);
    uint64_t stored = 0;
    for (int i = 7; i >= 0; i--) stored = stored << 8 | b[32 + 16 + i];
    for (uint64_t i = 0; i < stored; i++) b[64 + i] = (unsigned char)(0xA5 ^ (i * 31));
    put32(b + 32 + 24, (uint32_t)crc32(0, b + 64, (uInt)stored));
    put32(b + 32 + 28, (uint32_t)crc32(0, b + 32, 28));
    ck_assert_int_eq(open_copy(b, n, &err), LIPT_ERR_FORMAT);
    ck_assert_ptr_nonnull(strstr(err.msg, "decompressing"));
    printf("bad zlib data: %s\n", err.msg);
    /* Unknown codec. */
    memcpy(b, img, n);
    put32(b + 32 + 4, 7);
    put32(b + 32 + 28, (uint32_t)crc32(0, b + 32, 28));
    ck_assert_int_eq(open_copy(b, n, &err), LIPT_ERR_FORMAT);
    ck_assert_ptr_nonnull(strstr(err.msg, "codec"));
    free(b);
    free(img);
    rm_tmpdir();
}
END_TEST

/* Section contents corrupted behind valid CRCs: the structural checks, not the checksums, must catch it. */
START_TEST(test_inconsistent_sections) {
    make_tmpdir();
    size_t n, m;
    unsigned char *img = small_image(&n, 1);
    tsec s[16];
    int ns = split_image(img, n, s, 16);
    lipt_error err;
    /* Rejoined unchanged: valid (and the test's writer agrees with the library's reader). */
    unsigned char *j = join_image(s, ns, 1, &m);
    ck_assert_int_eq(open_copy(j, m, &err), LIPT_OK);
    free(j);

    struct { const char *what, *drop, *expect; } drops[] = {
        {"no tensor index", "TIDX", "'TIDX' (tensor index) is missing"},
        {"no values", "TVAL", "is missing"},
        {"no m", "ADMM", "disagree"},
    };
    for (size_t d = 0; d < sizeof drops / sizeof drops[0]; d++) {
        tsec t[16];
        int nt = 0;
        for (int k = 0; k < ns; k++)
            if (memcmp(s[k].tag, drops[d].drop, 4)) t[nt++] = s[k];
        j = join_image(t, nt, 1, &m);
        ck_assert_int_eq(open_copy(j, m, &err), LIPT_ERR_FORMAT);
        ck_assert_msg(strstr(err.msg, drops[d].expect) != NULL, "%s: %s", drops[d].what, err.msg);
        printf("%s: %s\n", drops[d].what, err.msg);
        free(j);
    }
    /* Duplicate section, and an unknown one (accepted: skipped). */
    {
        tsec t[17];
        memcpy(t, s, (size_t)ns * sizeof *t);
        t[ns] = s[0];
        j = join_image(t, ns + 1, 1, &m);
        ck_assert_int_eq(open_copy(j, m, &err), LIPT_ERR_FORMAT);
        ck_assert_ptr_nonnull(strstr(err.msg, "twice"));
        free(j);
        memcpy(t[ns].tag, "FUTR", 4);
        j = join_image(t, ns + 1, 1, &m);
        ck_assert_msg(open_copy(j, m, &err) == LIPT_OK, "unknown section: %s", err.msg);
        free(j);
    }
    /* Sizes that disagree with the index. */
    const char *shrink[] = {"TVAL", "TBUF", "ADMV", "STAT", "RNGS"};
    for (size_t i = 0; i < 5; i++) {
        int k = find_sec(s, ns, shrink[i]);
        ck_assert_int_ge(k, 0);
        s[k].n -= 4;
        j = join_image(s, ns, 1, &m);
        ck_assert_int_eq(open_copy(j, m, &err), LIPT_ERR_FORMAT);
        printf("short %s: %s\n", shrink[i], err.msg);
        s[k].n += 4;
        free(j);
    }
    /* A NUL inside the config text. */
    int kc = find_sec(s, ns, "CONF");
    s[kc].raw[3] = 0;
    j = join_image(s, ns, 1, &m);
    ck_assert_int_eq(open_copy(j, m, &err), LIPT_ERR_FORMAT);
    ck_assert_ptr_nonnull(strstr(err.msg, "NUL"));
    free(j);
    s[kc].raw[3] = CONFIG[3];

    /* Tensor index: every truncation, and random byte damage (any outcome but a crash or a bad read). */
    int ki = find_sec(s, ns, "TIDX");
    const size_t idx_n = s[ki].n;
    unsigned char *idx = malloc(idx_n);
    memcpy(idx, s[ki].raw, idx_n);
    for (size_t cut = 0; cut < idx_n; cut++) {
        s[ki].n = cut;
        j = join_image(s, ns, 1, &m);
        ck_assert_msg(open_copy(j, m, &err) == LIPT_ERR_FORMAT, "index cut at %zu accepted", cut);
        free(j);
    }
    s[ki].n = idx_n;
    lipt_rng r;
    lipt_rng_seed(&r, 99);
    int accepted = 0, rejected = 0;
    for (int it = 0; it < 400; it++) {
        memcpy(s[ki].raw, idx, idx_n);
        int nb = 1 + (int)lipt_rng_below(&r, 4);
        for (int q = 0; q < nb; q++) {
            size_t at = (size_t)lipt_rng_below(&r, idx_n);
            uint64_t how = lipt_rng_below(&r, 3);
            s[ki].raw[at] = how == 0 ? (unsigned char)lipt_rng_u64(&r) : how == 1 ? 0xff : 0;
        }
        j = join_image(s, ns, 1, &m);
        if (open_copy(j, m, &err) == LIPT_OK) accepted++;
        else rejected++;
        free(j);
    }
    printf("tensor index fuzz behind valid CRCs: %d rejected, %d still consistent (e.g. a renamed tensor); last: %s\n",
           rejected, accepted, err.msg);
    free(idx);
    free_secs(s, ns);
    free(img);
    rm_tmpdir();
}
END_TEST

/* Random multi-byte damage and truncation of the raw file image. */
START_TEST(test_fuzz) {
    make_tmpdir();
    size_t n;
    unsigned char *img = small_image(&n, 1);
    unsigned char *b = malloc(n);
    lipt_rng r;
    lipt_rng_seed(&r, 2024);
    lipt_error err;
    int done = 0;
    for (int it = 0; it < 3000; it++) {
        memcpy(b, img, n);
        int nb = 1 + (int)lipt_rng_below(&r, 8);
        int changed = 0;
        for (int q = 0; q < nb; q++) {
            size_t at = (size_t)lipt_rng_below(&r, n);
            unsigned char nv = (unsigned char)lipt_rng_u64(&r);
            changed |= nv != b[at];
            b[at] = nv;
        }
        size_t len = lipt_rng_below(&r, 4) == 0 ? (size_t)lipt_rng_below(&r, n + 1) : n;
        if (!changed && len == n) continue;
        lipt_status st = open_copy(b, len, &err);
        ck_assert_msg(st == LIPT_ERR_FORMAT, "fuzz %d: status %d (%s)", it, st, err.msg);
        done++;
    }
    printf("fuzz: %d random damaged images rejected\n", done);
    free(b);
    free(img);
    rm_tmpdir();
}
END_TEST

/* ------------------------------------------------------------------ atomic replacement */

static int64_t saved_step(const char *path) {
    lipt_ckpt ck;
    lipt_error err = {0};
    ck_assert_msg(lipt_ckpt_open(path, &ck, &err) == LIPT_OK, "old file damaged: %s", err.msg);
    int64_t s = ck.step;
    lipt_ckpt_close(&ck);
    return s;
}

START_TEST(test_atomic_write) {
    make_tmpdir();
    char path[160], tmp[170];
    lipt_params p;
    make_params(&p, 0, 1);
    fill_params(&p, 5);
    fixture_blobs fb;
    lipt_error err = {0};
    lipt_ckpt_contents c = contents(&p, &fb, 1, 1);
    ck_assert_int_eq(lipt_ckpt_save(tpath("run.ckpt", path), &c, &err), LIPT_OK);
    snprintf(tmp, sizeof tmp, "%s.tmp", path);
    size_t full;
    free(read_all(path, &full));

    /* A write that fails part-way (header, first section, mid-tensor, last bytes) leaves the old file. */
    const size_t faults[] = {1, 31, 32, 100, full / 2, full - 1};
    for (size_t i = 0; i < sizeof faults / sizeof faults[0]; i++) {
        lipt_ckpt_contents c2 = contents(&p, &fb, 2, 1);
        c2.test_fail_after_bytes = faults[i];
        ck_assert_int_eq(lipt_ckpt_save(path, &c2, &err), LIPT_ERR_IO);
        ck_assert_ptr_nonnull(strstr(err.msg, "simulated"));
        ck_assert_int_eq((int)saved_step(path), 1);
        ck_assert_msg(!file_exists(tmp), "temporary left after a failed write");
    }
    printf("fault injection: %s; old checkpoint intact\n", err.msg);

    /* A stale temporary from a crashed run is simply replaced. */
    write_all(tmp, "stale", 5);
    lipt_ckpt_contents c3 = contents(&p, &fb, 3, 1);
    ck_assert_int_eq(lipt_ckpt_save(path, &c3, &err), LIPT_OK);
    ck_assert_int_eq((int)saved_step(path), 3);
    ck_assert(!file_exists(tmp));

    /* A planted symlink PATH.tmp -> victim: the victim is not written through (the link is removed, the temporary
     * created afresh with O_EXCL | O_NOFOLLOW). */
    char victim[200];
    tpath("victim.txt", victim);
    write_all(victim, "precious", 8);
    ck_assert_int_eq(symlink(victim, tmp), 0);
    lipt_ckpt_contents c5 = contents(&p, &fb, 5, 1);
    ck_assert_int_eq(lipt_ckpt_save(path, &c5, &err), LIPT_OK);
    size_t vn;
    unsigned char *vb = read_all(victim, &vn);
    ck_assert_msg(vn == 8 && memcmp(vb, "precious", 8) == 0, "the symlink's target was overwritten");
    free(vb);
    ck_assert_int_eq((int)saved_step(path), 5);

    /* A target that is not a regular file (a FIFO here; a device or a folder likewise) is refused, untouched. */
    char fifo[200];
    tpath("pipe.ckpt", fifo);
    ck_assert_int_eq(mkfifo(fifo, 0600), 0);
    ck_assert_int_eq(lipt_ckpt_save(fifo, &c5, &err), LIPT_ERR_ARG);
    ck_assert_ptr_nonnull(strstr(err.msg, "not a regular file"));
    struct stat fs;
    ck_assert(stat(fifo, &fs) == 0 && S_ISFIFO(fs.st_mode));
    printf("non-regular target: %s\n", err.msg);
    ck_assert_int_eq(lipt_ckpt_save(tmpdir, &c5, &err), LIPT_ERR_ARG); /* a folder */

    /* Caps and sanity before anything is allocated: a config section past its 1 MiB cap, a negative step. */
    char *big = malloc((2u << 20) + 1);
    memset(big, '#', 2u << 20);
    big[2u << 20] = 0;
    lipt_ckpt_contents c6 = contents(&p, &fb, 6, 1);
    c6.config_text = big;
    char capped[200];
    tpath("capped.ckpt", capped);
    ck_assert_int_eq(lipt_ckpt_save(capped, &c6, &err), LIPT_OK); /* the writer does not judge */
    lipt_ckpt ckc;
    ck_assert_int_eq(lipt_ckpt_open(capped, &ckc, &err), LIPT_ERR_FORMAT);
    ck_assert_msg(strstr(err.msg, "cap"), "no cap in: %s", err.msg);
    lipt_ckpt_close(&ckc);
    free(big);
    printf("section cap: %s\n", err.msg);
    lipt_ckpt_contents c7 = contents(&p, &fb, -5, 1);
    ck_assert_int_eq(lipt_ckpt_save(capped, &c7, &err), LIPT_OK);
    ck_assert_int_eq(lipt_ckpt_open(capped, &ckc, &err), LIPT_ERR_FORMAT);
    ck_assert_msg(strstr(err.msg, "negative step"), "%s", err.msg);
    lipt_ckpt_close(&ckc);
    printf("negative step: %s\n", err.msg);

    /* A directory that does not exist. */
    char bad[200];
    snprintf(bad, sizeof bad, "%s/no/such/dir/x.ckpt", tmpdir);
    ck_assert_int_eq(lipt_ckpt_save(bad, &c3, &err), LIPT_ERR_IO);
    ck_assert_ptr_nonnull(strstr(err.msg, "cannot create"));
    printf("missing directory: %s\n", err.msg);

    /* A read-only directory (meaningless as root, who may write anyway). */
    if (geteuid() != 0) {
        ck_assert_int_eq(chmod(tmpdir, 0500), 0);
        lipt_ckpt_contents c4 = contents(&p, &fb, 4, 1);
        lipt_status st = lipt_ckpt_save(path, &c4, &err);
        chmod(tmpdir, 0700);
        ck_assert_int_eq(st, LIPT_ERR_IO);
        ck_assert_int_eq((int)saved_step(path), 3);
        printf("read-only directory: %s\n", err.msg);
    } else {
        printf("read-only directory check skipped: running as root (fault injection covers it)\n");
    }
    lipt_params_free(&p);
    rm_tmpdir();
}
END_TEST

/* ------------------------------------------------------------------ safetensors */

/* Finds `"name":{` in the JSON and reads the shape and offsets that follow (our writer's fixed layout). */
static int st_entry(const char *json, const char *name, int *shape, int *ndim, unsigned long long off[2]) {
    char key[128];
    snprintf(key, sizeof key, "\"%s\":{\"dtype\":\"F32\",\"shape\":[", name);
    const char *q = strstr(json, key);
    if (!q) return 0;
    q += strlen(key);
    *ndim = 0;
    while (*q != ']') {
        char *e;
        shape[(*ndim)++] = (int)strtol(q, &e, 10);
        q = *e == ',' ? e + 1 : e;
    }
    if (strncmp(q, "],\"data_offsets\":[", 18)) return 0;
    q += 18;
    char *e;
    off[0] = strtoull(q, &e, 10);
    off[1] = strtoull(e + 1, &e, 10);
    return *e == ']';
}

START_TEST(test_safetensors) {
    make_tmpdir();
    char path[160], cfgpath[160], pypath[160];
    lipt_params p;
    make_params(&p, 0, 0);
    fill_params(&p, 21);
    const char *cfg = "d_model = 6\nname = \"quoted\" \\ back\tslash\nnote = caf\xc3\xa9\n";
    lipt_st_meta meta[] = {{"config", cfg}, {"format", "lipt"}};
    lipt_error err = {0};
    ck_assert_int_eq(lipt_safetensors_save(tpath("m.safetensors", path), &p, meta, 2, &err), LIPT_OK);
    size_t n;
    unsigned char *f = read_all(path, &n);
    uint64_t hl = 0;
    for (int i = 7; i >= 0; i--) hl = hl << 8 | f[i];
    ck_assert_msg(8 + hl <= n, "header length %llu past the file", (unsigned long long)hl);
    ck_assert_int_eq((8 + hl) % 8, 0);
    char *json = malloc(hl + 1);
    memcpy(json, f + 8, hl);
    json[hl] = 0;
    ck_assert_int_eq(json[0], '{');
    ck_assert_ptr_nonnull(strstr(json, "\"__metadata__\":{\"config\":\"d_model = 6\\nname = \\\"quoted\\\" \\\\ "
                                       "back\\tslash\\nnote = caf\xc3\xa9\\n\",\"format\":\"lipt\"}"));
    unsigned long long expect_off = 0;
    const char *prev = json;
    for (int i = 0; i < p.n; i++) { /* registration order, contiguous offsets, same bytes */
        const lipt_tensor *t = p.list[i];
        int shape[4], nd;
        unsigned long long off[2];
        ck_assert_msg(st_entry(json, t->name, shape, &nd, off), "tensor %s missing from header", t->name);
        char key[64];
        snprintf(key, sizeof key, "\"%s\":", t->name);
        const char *at = strstr(json, key);
        ck_assert_msg(at > prev, "tensor %s out of registration order", t->name);
        prev = at;
        ck_assert_int_eq(nd, t->ndim);
        for (int d = 0; d < nd; d++) ck_assert_int_eq(shape[d], t->shape[d]);
        ck_assert_uint_eq(off[0], expect_off);
        ck_assert_uint_eq(off[1] - off[0], t->numel * sizeof(float));
        ck_assert(memcmp(f + 8 + hl + off[0], t->data, t->numel * sizeof(float)) == 0);
        expect_off = off[1];
    }
    ck_assert_uint_eq(8 + hl + expect_off, n);
    printf("safetensors: %d tensors, header %llu bytes, file %zu bytes: offsets, shapes and data check out\n", p.n,
           (unsigned long long)hl, n);

    /* Invalid UTF-8 metadata and duplicate keys are refused. */
    lipt_st_meta badm[] = {{"config", "bad \xc3\x28 byte"}};
    ck_assert_int_eq(lipt_safetensors_save(tpath("bad.safetensors", cfgpath), &p, badm, 1, &err), LIPT_ERR_ARG);
    ck_assert_ptr_nonnull(strstr(err.msg, "UTF-8"));
    lipt_st_meta dupm[] = {{"a", "1"}, {"a", "2"}};
    ck_assert_int_eq(lipt_safetensors_save(cfgpath, &p, dupm, 2, &err), LIPT_ERR_ARG);
    ck_assert(!file_exists(cfgpath));

    /* An independent reader: python's json (+ numpy.frombuffer when numpy is there, else struct). */
    if (access("/usr/bin/python3", X_OK) == 0) {
        write_all(tpath("cfg.txt", cfgpath), cfg, strlen(cfg));
        const char *py =
            "import json, struct, sys\n"
            "f = open(sys.argv[1], 'rb').read()\n"
            "n = struct.unpack('<Q', f[:8])[0]\n"
            "h = json.loads(f[8:8 + n].decode('utf-8'))\n"
            "t = h[sys.argv[2]]\n"
            "a, b = t['data_offsets']\n"
            "buf = f[8 + n + a:8 + n + b]\n"
            "k = int(sys.argv[3])\n"
            "try:\n"
            "    import numpy as np\n"
            "    x = np.frombuffer(buf, dtype='<f4').reshape(t['shape'])\n"
            "    v, how = float(x.reshape(-1)[k]), 'numpy'\n"
            "except ImportError:\n"
            "    v, how = struct.unpack_from('<f', buf, 4 * k)[0], 'struct'\n"
            "ok = h['__metadata__']['config'] == open(sys.argv[4], encoding='utf-8').read()\n"
            "print(how, 'x'.join(map(str, t['shape'])), repr(v), int(ok), len(h) - 1)\n";
        write_all(tpath("read.py", pypath), py, strlen(py));
        const char *names[] = {"blk0.w4d", "blk0.sn_v", "embed"};
        const int ks[] = {7, 2, 65};
        for (int i = 0; i < 3; i++) {
            char cmd[600], how[16], shp[32], line[256];
            snprintf(cmd, sizeof cmd, "/usr/bin/python3 '%s' '%s' '%s' %d '%s' 2>&1", pypath, path, names[i], ks[i],
                     cfgpath);
            FILE *pp = popen(cmd, "r");
            ck_assert_ptr_nonnull(pp);
            char *got = fgets(line, sizeof line, pp);
            pclose(pp);
            ck_assert_msg(got != NULL, "python printed nothing");
            double val;
            int ok, ntens;
            ck_assert_msg(sscanf(line, "%15s %31s %lf %d %d", how, shp, &val, &ok, &ntens) == 5, "python: %s", line);
            const lipt_tensor *t = lipt_param_find(&p, names[i]);
            char want[32] = "";
            for (int d = 0; d < t->ndim; d++)
                snprintf(want + strlen(want), sizeof want - strlen(want), d ? "x%d" : "%d", t->shape[d]);
            ck_assert_str_eq(shp, want);
            ck_assert_msg((float)val == t->data[ks[i]], "%s[%d]: python %.9g, lipt %.9g", names[i], ks[i], val,
                          t->data[ks[i]]);
            ck_assert_int_eq(ok, 1);
            ck_assert_int_eq(ntens, p.n);
            if (i == 0) printf("python (%s) read %s[%d] = %.9g, shape %s, metadata config matches\n", how, names[i],
                               ks[i], val, shp);
        }
    } else {
        printf("safetensors python check skipped: /usr/bin/python3 not found\n");
    }
    free(json);
    free(f);
    lipt_params_free(&p);
    rm_tmpdir();
}
END_TEST

int main(void) {
    lipt_set_threads(2);
    Suite *s = suite_create("checkpoint");
    TCase *tc = tcase_create("checkpoint");
    tcase_set_timeout(tc, 120);
    tcase_add_test(tc, test_roundtrip);
    tcase_add_test(tc, test_mismatch);
    tcase_add_test(tc, test_empty_missing_foreign);
    tcase_add_test(tc, test_truncated);
    tcase_add_test(tc, test_bit_flips);
    tcase_add_test(tc, test_version_and_absurd);
    tcase_add_test(tc, test_inconsistent_sections);
    tcase_add_test(tc, test_fuzz);
    tcase_add_test(tc, test_atomic_write);
    tcase_add_test(tc, test_safetensors);
    suite_add_tcase(s, tc);
    return tu_run_suite(s);
}
