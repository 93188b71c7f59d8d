/* defines: the checkpoint file layout shared by the writer (checkpoint.c) and the reader (checkpoint_parse.c):
 * sizes, limits, codecs, the section table; private to src/io (docs/CHECKPOINT.md describes the format). */
#ifndef LIPT_IO_CHECKPOINT_FORMAT_H
#define LIPT_IO_CHECKPOINT_FORMAT_H

#include <stddef.h>
#include <stdint.h>

#include "lipt/checkpoint.h"

#define HDR_BYTES 32
#define SEC_BYTES 32
#define MAX_SECTIONS 64
#define CODEC_RAW 0u
#define CODEC_ZLIB 1u
#define MAX_NAME 4096
#define MAX_TENSORS (1 << 20)
#define MAX_FLOATS ((uint64_t)1 << 40)
#define STAT_BYTES 24
#define RNG_BYTES 32

/* The sections a version-1 file holds, in write order; readers skip unknown tags. Static: a small table each of
 * the two files keeps its own copy of (nothing exported from the library). */
#define MiB ((uint64_t)1 << 20)
#define MAX_FLOAT_SECTION ((uint64_t)16 << 30) /* 4 Gi floats per section: a 4-billion-parameter model */
/* max: the largest inflated size a reader accepts (docs/CHECKPOINT.md), checked before anything is allocated, so a
 * small crafted file cannot ask for gigabytes */
static const struct { char tag[5]; const char *what; int required; uint64_t max; } SECTIONS[] = {
    {"CONF", "model config", 1, 1 * MiB},
    {"VOCB", "vocabulary", 1, 64 * 1024},
    {"STAT", "training state", 1, 4096},
    {"RNGS", "RNG states", 1, 1 * MiB},
    {"XTRA", "extra data", 1, 16 * MiB},
    {"TIDX", "tensor index", 1, 256 * MiB},
    {"TVAL", "trainable values", 1, MAX_FLOAT_SECTION},
    {"TBUF", "buffer values", 1, MAX_FLOAT_SECTION},
    {"ADMM", "Adam first moments", 0, MAX_FLOAT_SECTION},
    {"ADMV", "Adam second moments", 0, MAX_FLOAT_SECTION},
};
enum { S_CONF, S_VOCB, S_STAT, S_RNGS, S_XTRA, S_TIDX, S_TVAL, S_TBUF, S_ADMM, S_ADMV, S_COUNT };
_Static_assert(sizeof SECTIONS / sizeof SECTIONS[0] == S_COUNT, "section table");

/* The first name that occurs twice in names[0..n) (sorted in place), or NULL: duplicate tensor names would make
 * loading ambiguous, so neither the writer nor the reader accepts them. */
const char *lipt_ckpt_find_duplicate(const char **names, int n);

/* Verifies the memory image d[0..n) of a checkpoint file (header, sizes, every CRC, decompression, tensor index)
 * and fills ck; name labels the messages. On failure ck may hold part of the tensor index: lipt_ckpt_close it.
 * (checkpoint_parse.c) */
lipt_status lipt_ckpt_parse(const unsigned char *d, size_t n, const char *name, lipt_ckpt *ck, lipt_error *err);

#endif
