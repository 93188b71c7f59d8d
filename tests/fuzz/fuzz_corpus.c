/* libFuzzer target: the corpus readers on arbitrary bytes. Every input goes through all of them: the zip parser in
 * memory (zip and zip64, the member chosen by name or by the archive's own name), the PTB char parser, the readers
 * that take a path (plain, gzip, zip, auto-detect: the input is written to one in-memory file per process, a memfd
 * reached as /proc/self/fd/N), and the dataset builder (splits, vocabulary, encoding) on the raw bytes and on what
 * the readers decoded. The dataset's training split must decode back to its text.
 * Build and run: scripts/fuzz.sh corpus SECONDS. */
#define _GNU_SOURCE /* memfd_create */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include "lipt/data.h"

static int tmp_fd = -1;
static char tmp_path[64];

int LLVMFuzzerInitialize(int *argc, char ***argv) {
    (void)argc, (void)argv;
    /* a small cap on decompressed sizes: a few KB of deflate may claim megabytes, which only slows the fuzzer */
    setenv("LIPT_MAX_CORPUS_GB", "0.004", 1);
    /* in memory: truncating and rewriting a disk file for every input made the disk the bottleneck (20x slower) */
    tmp_fd = memfd_create("lipt-fuzz-corpus", 0);
    if (tmp_fd < 0) {
        const char *dir = getenv("TMPDIR");
        char tmpl[512];
        snprintf(tmpl, sizeof tmpl, "%s/lipt-fuzz-corpus-XXXXXX", dir && *dir ? dir : "/tmp");
        tmp_fd = mkstemp(tmpl);
        if (tmp_fd < 0) { perror("fuzz_corpus: mkstemp"); abort(); }
        unlink(tmpl); /* nothing left behind, even after a crash; the readers reopen it through /proc */
    }
    snprintf(tmp_path, sizeof tmp_path, "/proc/self/fd/%d", tmp_fd);
    return 0;
}

static void put_file(const uint8_t *data, size_t size) {
    if (ftruncate(tmp_fd, 0) != 0) abort();
    for (size_t off = 0; off < size;) {
        const ssize_t w = pwrite(tmp_fd, data + off, size - off, (off_t)off);
        if (w <= 0) abort();
        off += (size_t)w;
    }
}

/* Splits: the first line of the input when lipt_data_parse_split takes it, else one of a few fixed ones (edge cases
 * included: everything in train, an empty test split). Vocabulary kind and the unknown id from the last byte. */
static void pick_opts(const uint8_t *data, size_t size, lipt_data_opts *o) {
    memset(o, 0, sizeof *o);
    char line[64];
    size_t n = 0;
    while (n < size && n < sizeof line - 1 && data[n] != '\n' && data[n] != 0) line[n] = (char)data[n], n++;
    line[n] = 0;
    lipt_error err = {0};
    const uint8_t last = size ? data[size - 1] : 0;
    if (lipt_data_parse_split(line, o, &err) != LIPT_OK || o->split != LIPT_SPLIT_FRACTIONS) {
        static const double fr[][3] = {{0, 0, 0}, {1, 0, 0}, {0.5, 0.5, 0}, {0.7, 0.2, 0.1}, {1e-9, 0, 0}};
        memcpy(o->frac, fr[(last >> 4) % 5], sizeof o->frac);
        o->split = (last & 8) ? LIPT_SPLIT_FRACTIONS : LIPT_SPLIT_AUTO;
    }
    o->vocab = (lipt_vocab_kind)(last % 4);
    o->unk = (last >> 2) & 1;
}

static void dataset(const uint8_t *text, size_t n, const lipt_data_opts *o) {
    lipt_dataset ds;
    lipt_error err = {0};
    if (lipt_dataset_from_text(text, n, "fuzz.txt", o, &ds, &err) != LIPT_OK) return;
    /* without an unknown id every training symbol is in the vocabulary: decoding gives the text back */
    size_t nt = 0;
    const lipt_tok *tok = lipt_dataset_eval_tokens(&ds, LIPT_TRAIN, &nt);
    if (nt != ds.len[LIPT_TRAIN] + 1) abort();
    char *out = malloc(ds.len[LIPT_TRAIN] + 1);
    const size_t got = lipt_vocab_decode_tok(&ds.vocab, tok + 1, ds.len[LIPT_TRAIN], 0, out, ds.len[LIPT_TRAIN] + 1);
    if (ds.vocab.unk_id < 0 && (got != ds.len[LIPT_TRAIN] || memcmp(out, text, got) != 0)) {
        fprintf(stderr, "fuzz_corpus: the training split does not decode to its text\n");
        abort();
    }
    free(out);
    char desc[2048];
    lipt_dataset_describe(&ds, desc, sizeof desc);
    /* the vocabulary survives its checkpoint form */
    uint8_t blob[512];
    const size_t bn = lipt_vocab_to_blob(&ds.vocab, blob, sizeof blob);
    lipt_vocab back;
    if (bn > sizeof blob || lipt_vocab_from_blob(&back, blob, bn, &err) != LIPT_OK || !lipt_vocab_equal(&back, &ds.vocab)) {
        fprintf(stderr, "fuzz_corpus: the vocabulary does not round-trip through its blob: %s\n", err.msg);
        abort();
    }
    lipt_dataset_free(&ds);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    if (size > (1 << 16)) return 0;
    lipt_error err = {0};
    lipt_bytes out;
    lipt_data_opts o;
    pick_opts(data, size, &o);

    /* zip in memory: the only member, the one named like the archive, a named member */
    static const char *const labels[] = {"fuzz.zip", "enwik8.zip", "dir/text8.zip"};
    for (int i = 0; i < 3; i++) {
        if (lipt_unzip_mem(data, size, NULL, labels[i], &out, &err) == LIPT_OK) {
            if (i == 0) dataset(out.data, out.len, &o);
            lipt_bytes_free(&out);
        }
    }
    if (lipt_unzip_mem(data, size, "enwik8", NULL, &out, &err) == LIPT_OK) lipt_bytes_free(&out);

    if (lipt_ptb_parse(data, size, "fuzz.ptb", &out, &err) == LIPT_OK) {
        if (out.data[out.len] != 0) abort(); /* data[len] is always a readable 0 */
        dataset(out.data, out.len, &o);
        lipt_bytes_free(&out);
    }

    put_file(data, size);
    if (lipt_read_plain(tmp_path, &out, &err) == LIPT_OK) {
        if (out.len != size || (size && memcmp(out.data, data, size) != 0)) abort();
        lipt_bytes_free(&out);
    }
    if (lipt_read_gzip(tmp_path, &out, &err) == LIPT_OK) {
        if (out.data[out.len] != 0) abort();
        dataset(out.data, out.len, &o);
        lipt_bytes_free(&out);
    }
    if (lipt_read_zip_member(tmp_path, NULL, &out, &err) == LIPT_OK) lipt_bytes_free(&out);
    if (lipt_read_auto(tmp_path, &out, &err) == LIPT_OK) lipt_bytes_free(&out);

    dataset(data, size, &o);
    return 0;
}
