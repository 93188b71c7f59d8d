/* defines: the corpus layer: readers (plain, gzip, zip member, PTB char), corpus lookup, splits, vocabulary,
 * the training batcher and the evaluation window iterator. Uses only core.h and zlib. */
#ifndef LIPT_DATA_H
#define LIPT_DATA_H

#include <stddef.h>
#include <stdint.h>

#include "lipt/core.h"

#ifdef __cplusplus
extern "C" {
#endif

/* ------------------------------------------------------------------ readers */

/* A heap buffer (free with lipt_bytes_free). data[len] is always a readable 0 byte. */
typedef struct {
    uint8_t *data;
    size_t len;
} lipt_bytes;
void lipt_bytes_free(lipt_bytes *b);

/* The cap on a corpus's bytes, plain or decompressed: LIPT_MAX_CORPUS_GB x 1e9 (default 4 GB). A reader of a corpus
 * file (a checksum too) compares the file's size with it first, so that a huge file named by mistake is refused at
 * once rather than read for minutes. */
size_t lipt_corpus_cap(void);
lipt_status lipt_read_plain(const char *path, lipt_bytes *out, lipt_error *err);
/* gzip file (magic 1f 8b; concatenated members allowed); a truncated stream is an error. */
lipt_status lipt_read_gzip(const char *path, lipt_bytes *out, lipt_error *err);
/* One member of a .zip archive, methods stored (0) and deflate (8), CRC-32 checked, zip64 sizes understood.
 * member NULL: the archive's only file (directories and __MACOSX/ entries do not count); if there are several,
 * the one named like the archive without ".zip" (enwik8.zip -> enwik8); otherwise an error listing them. */
lipt_status lipt_read_zip_member(const char *path, const char *member, lipt_bytes *out, lipt_error *err);
/* The same on an archive already in memory; label names it in messages. */
lipt_status lipt_unzip_mem(const uint8_t *zip, size_t n, const char *member, const char *label, lipt_bytes *out,
                           lipt_error *err);
/* By content: 1f 8b -> gzip, "PK\3\4" -> zip (member chosen as above), anything else -> plain bytes. */
lipt_status lipt_read_auto(const char *path, lipt_bytes *out, lipt_error *err);

/* Mikolov's PTB char format -> one byte per symbol. Spaces separate symbols, '\n' is itself a symbol (the
 * end-of-sentence symbol), a '\r' before '\n' is dropped. Two symbols not separated by a space are a format
 * error (that is what the word-level ptb.train.txt looks like). label names the input in messages. */
lipt_status lipt_ptb_parse(const uint8_t *buf, size_t n, const char *label, lipt_bytes *out, lipt_error *err);

/* --------------------------------------------------------------- vocabulary */

/* Every corpus here has single-byte symbols, so a token id needs at most 9 bits. */
typedef uint16_t lipt_tok;

typedef enum {
    LIPT_VOCAB_AUTO = 0, /* dataset default: BYTES for enwik8, WHOLE for plain text, BUILT for PTB and text8 */
    LIPT_VOCAB_BYTES,    /* 256 ids, id = byte value (nothing is ever unseen) */
    LIPT_VOCAB_BUILT,    /* the distinct bytes of the training split, sorted by byte value */
    LIPT_VOCAB_WHOLE     /* a request only (lipt_data_opts.vocab): the distinct bytes of all three splits, as nanoGPT
                            builds its character vocabulary from the whole file; the result is a BUILT vocabulary */
} lipt_vocab_kind;

typedef struct {
    lipt_vocab_kind kind;
    int n_sym;            /* symbol ids are 0 .. n_sym-1 */
    int size;             /* ids in use (embedding rows): n_sym, plus 1 when the unknown id is enabled */
    int unk_id;           /* -1: disabled, unseen symbols are an error; else == n_sym */
    int ptb_form;         /* symbols came from PTB char files (see lipt_vocab_text_symbol, LIPT_DECODE_PTB_FILE) */
    uint8_t sym[256];     /* id -> byte */
    int16_t id_of[256];   /* byte -> id, -1 when absent */
} lipt_vocab;

void lipt_vocab_init_bytes(lipt_vocab *v);
void lipt_vocab_build(lipt_vocab *v, const uint8_t *text, size_t n);
/* The distinct bytes of n_parts texts together (kind BUILT). */
void lipt_vocab_build_parts(lipt_vocab *v, const uint8_t *const *parts, const size_t *lens, int n_parts);
/* Reserve one more id (== n_sym) that every symbol outside the vocabulary maps to. */
void lipt_vocab_enable_unk(lipt_vocab *v);
int  lipt_vocab_equal(const lipt_vocab *a, const lipt_vocab *b);

/* The one mapping from text to a vocabulary's symbols, applied by every encoder below (so by lipt sample's prompt,
 * lipt invert's --text and every corpus read with a checkpoint's vocabulary): a PTB-style vocabulary (ptb_form, with
 * '_' and without a space symbol: PTB char files mark word boundaries with '_') reads a space as '_', so that
 * "the company said" is "the_company_said". Every other byte, and every byte for other vocabularies, is itself.
 * python/lipt_torch.py's Vocab.encode applies the same rule. */
uint8_t lipt_vocab_text_symbol(const lipt_vocab *v, uint8_t byte);

/* text -> ids through lipt_vocab_text_symbol. Unseen symbol without an unknown id: LIPT_ERR_FORMAT naming label, the
 * symbol, its position and line, and the training options that avoid it (for corpora). */
lipt_status lipt_vocab_encode(const lipt_vocab *v, const uint8_t *text, size_t n, int32_t *ids, const char *label,
                              lipt_error *err);
lipt_status lipt_vocab_encode_tok(const lipt_vocab *v, const uint8_t *text, size_t n, lipt_tok *ids,
                                  const char *label, lipt_error *err);
/* The same for text a user typed (a prompt, --text): an unseen symbol's message lists the symbols the model reads
 * (and says that a space is read as '_' where it is) instead of advising on training options. */
lipt_status lipt_vocab_encode_text(const lipt_vocab *v, const uint8_t *text, size_t n, int32_t *ids,
                                   const char *label, lipt_error *err);

/* Decoding flags. Default: the raw symbols (PTB: its symbol form, "aer_banknote\n"). */
#define LIPT_DECODE_ESCAPE   1  /* for display: newline -> "\n", tab -> "\t", CR -> "\r", other control bytes -> "\xHH" */
#define LIPT_DECODE_PTB_FILE 2  /* every symbol followed by one space: reproduces a PTB char file byte for byte */
/* Writes at most cap-1 bytes plus a NUL (when cap > 0) and returns the full length (like snprintf).
 * The unknown id decodes as "<unk>", an id out of range as "<?>". */
size_t lipt_vocab_decode(const lipt_vocab *v, const int32_t *ids, size_t n, int flags, char *out, size_t cap);
size_t lipt_vocab_decode_tok(const lipt_vocab *v, const lipt_tok *ids, size_t n, int flags, char *out, size_t cap);

/* Portable blob for checkpoints: "LVOC", version 1, kind, flags (bit0 unk, bit1 ptb), n_sym (u16 LE),
 * then the n_sym symbol bytes in id order. */
size_t lipt_vocab_blob_size(const lipt_vocab *v);
size_t lipt_vocab_to_blob(const lipt_vocab *v, uint8_t *out, size_t cap); /* returns bytes needed; writes if cap fits */
lipt_status lipt_vocab_from_blob(lipt_vocab *v, const uint8_t *blob, size_t n, lipt_error *err);

/* ------------------------------------------------------ corpus lookup, splits */

typedef enum { LIPT_CORPUS_TEXT = 0, LIPT_CORPUS_PTB, LIPT_CORPUS_ENWIK8, LIPT_CORPUS_TEXT8 } lipt_corpus_kind;
enum { LIPT_TRAIN = 0, LIPT_VALID = 1, LIPT_TEST = 2 };
const char *lipt_split_name(int split); /* "train", "valid", "test" */

#define LIPT_PATH_MAX 1024
typedef struct {
    lipt_corpus_kind kind;
    char name[64];                  /* "ptb", "enwik8", ..., or the file's base name */
    char path[3][LIPT_PATH_MAX];    /* file of each split; the same file three times unless PTB */
    int is_prefix;                  /* an enwik8/text8 prefix file (name contains ".head") */
    char note[512];                 /* what was found, e.g. that a file is only a prefix */
} lipt_corpus_loc;

/* spec: ptb | enwik8 | text8 | tinyshakespeare | warandpeace | any other folder name | PATH.
 * A name is looked up as a folder <root>/<name> in the roots $LIPT_DATA, <repo>/data, <repo>/../shared/data, in
 * that order (enwik8/text8: a full file — <name>, <name>.zip, <name>.gz — in any root wins over a prefix
 * <name>.head* in an earlier root). A PATH is a file (kind from its base name: ptb.char.*, enwik8*, text8*, else
 * plain text) or a folder (holding ptb.char.train.txt, or exactly one data file). repo_root NULL: $LIPT_REPO, else
 * the source tree this library was built from, else ".". Not found: LIPT_ERR_IO listing every place tried. */
lipt_status lipt_corpus_locate(const char *spec, const char *repo_root, lipt_corpus_loc *loc, lipt_error *err);

typedef enum {
    LIPT_SPLIT_AUTO = 0,   /* STANDARD for ptb/enwik8/text8, FRACTIONS for other text */
    LIPT_SPLIT_STANDARD,   /* ptb: its three files; enwik8/text8: bytes [0,90M) [90M,95M) [95M,100M) */
    LIPT_SPLIT_FRACTIONS   /* contiguous: train [0,b1), valid [b1,b2), test [b2,b3) */
} lipt_split_mode;

typedef struct {
    lipt_split_mode split;
    double frac[3];              /* FRACTIONS; all zero -> 0.9, 0.05, 0.05. b1 = floor(n f0), b2 = floor(n (f0+f1)),
                                    b3 = n when the three sum to 1, else floor(n (f0+f1+f2)) */
    lipt_vocab_kind vocab;       /* ignored when use_vocab is given */
    int unk;                     /* enable the unknown-symbol id on a vocabulary built here */
    const lipt_vocab *use_vocab; /* encode with this one (e.g. from a checkpoint) instead of building one */
    const char *repo_root;       /* see lipt_corpus_locate */
} lipt_data_opts;

/* Command-line helpers. split: "auto" | "standard" | "F0,F1[,F2]" (F2 omitted: 1 - F0 - F1), e.g. "0.9,0.05,0.05".
 * vocab: "auto" | "bytes" | "built" | "whole". Bad text: LIPT_ERR_ARG saying what was expected. */
lipt_status lipt_data_parse_split(const char *text, lipt_data_opts *o, lipt_error *err);
lipt_status lipt_data_parse_vocab(const char *text, lipt_data_opts *o, lipt_error *err);

typedef struct {
    lipt_corpus_loc loc;
    lipt_vocab vocab;
    size_t len[3];      /* symbols in each split */
    size_t offset[3];   /* first symbol of the split in its source (bytes for enwik8/text8/text, symbols for PTB) */
    lipt_tok *tok[3];   /* token ids of each split. tok[s][-1] is valid: the symbol just before the split
                           (end of the previous split; before train: '\n' if in the vocabulary, else ' ', else id 0),
                           so that evaluation can score the split's first symbol too */
    int vocab_whole;    /* 1: the vocabulary was built here from all three splits (LIPT_VOCAB_WHOLE) */
    lipt_tok *buf_;     /* one array: [boundary][train][valid][test] */
} lipt_dataset;

lipt_status lipt_dataset_load(const char *spec, const lipt_data_opts *opts, lipt_dataset *ds, lipt_error *err);
/* Splits and encodes text already in memory (kind TEXT, FRACTIONS). label names it in messages. */
lipt_status lipt_dataset_from_text(const uint8_t *text, size_t n, const char *label, const lipt_data_opts *opts,
                                   lipt_dataset *ds, lipt_error *err);
void lipt_dataset_free(lipt_dataset *ds);
/* The array an evaluation iterates over: split s with its one context symbol in front (n = len[s] + 1). */
const lipt_tok *lipt_dataset_eval_tokens(const lipt_dataset *ds, int split, size_t *n);
/* One line: name, split sizes, vocabulary, files, prefix note. */
void lipt_dataset_describe(const lipt_dataset *ds, char *out, size_t cap);

/* ------------------------------------------------------------------ batcher */

/* Everything that decides the next batch: copy it into a checkpoint and back to resume the same stream. */
typedef struct {
    lipt_rng rng;
    uint64_t seed;     /* the seed it started from */
    uint64_t batches;  /* batches drawn so far */
} lipt_batcher_state;

typedef struct {
    const lipt_tok *tok;
    size_t n;
    int B, T;
    lipt_batcher_state st;
} lipt_batcher;

/* Random windows of T+1 tokens, starts uniform in [0, n-T-1]. Needs n >= T+1. */
lipt_status lipt_batcher_init(lipt_batcher *b, const lipt_tok *tok, size_t n, int B, int T, uint64_t seed,
                              lipt_error *err);
/* inputs[b*T+t] = tok[s_b+t], targets[b*T+t] = tok[s_b+t+1]; starts (B entries) may be NULL. */
void lipt_batcher_next(lipt_batcher *b, int32_t *inputs, int32_t *targets, size_t *starts);

#define LIPT_BATCHER_STATE_BYTES 52 /* "LBS1", seed, batches, rng s[0..3], all u64 little-endian */
void lipt_batcher_state_pack(const lipt_batcher_state *st, uint8_t out[LIPT_BATCHER_STATE_BYTES]);
lipt_status lipt_batcher_state_unpack(lipt_batcher_state *st, const uint8_t *in, size_t n, lipt_error *err);

/* ------------------------------------------------------ evaluation windows */

/* Over a token array of n tokens whose first token is context only, the iterator scores targets 1 .. n-1, each
 * exactly once. A window has inputs tok[start .. start+len) and targets tok[start+1 .. start+len]; positions
 * score_from .. len-1 are scored.
 * stride == T: non-overlapping windows at 0, T, 2T, ..., all positions scored, the last one shorter.
 * stride <  T: sliding. The first window scores all its positions; each later one ends stride targets further on
 * (the last one possibly fewer), is as long as possible (len = T unless the array is shorter) and scores only its
 * last new targets, so every scored symbol after the first window sees at least T - stride symbols of context. */
typedef struct {
    size_t start;
    int len;
    int score_from;
} lipt_eval_window;

typedef struct {
    size_t n;
    int T, stride;
    size_t next;     /* the first target not scored yet */
} lipt_eval_iter;

lipt_status lipt_eval_iter_init(lipt_eval_iter *it, size_t n, int T, int stride, lipt_error *err);
int lipt_eval_iter_next(lipt_eval_iter *it, lipt_eval_window *w); /* 1: a window, 0: done */
size_t lipt_eval_iter_count(const lipt_eval_iter *it);            /* windows left */
void lipt_eval_window_fill(const lipt_tok *tok, const lipt_eval_window *w, int32_t *inputs, int32_t *targets);

#ifdef __cplusplus
}
#endif
#endif
