/* defines: lipt_afile, a file written under PATH.tmp and renamed over PATH on commit (internal to src/io). */
#ifndef LIPT_IO_ATOMIC_FILE_H
#define LIPT_IO_ATOMIC_FILE_H

#include <stdint.h>
#include <stdio.h>

#include "lipt/core.h"

typedef struct {
    FILE *f;
    char *path, *tmp;
    uint64_t pos;         /* current offset */
    uint64_t end;         /* bytes in the file */
    uint64_t written;     /* bytes handed to fwrite, counted for fault injection */
    size_t fail_after;    /* simulate a write failure past this many bytes (0 = off) */
    lipt_status st;       /* sticky: the first failure, later calls do nothing */
    int created;          /* the temporary was created by this open (so discard may remove it) */
    lipt_error *err;
} lipt_afile;

lipt_status lipt_afile_open(lipt_afile *af, const char *path, size_t fail_after, lipt_error *err);
lipt_status lipt_afile_write(lipt_afile *af, const void *buf, size_t n);
lipt_status lipt_afile_seek(lipt_afile *af, uint64_t off);  /* absolute, within what was written */
/* fflush + fsync + close, rename PATH.tmp over PATH, fsync the directory. Discards on any earlier failure. */
lipt_status lipt_afile_commit(lipt_afile *af);
/* Close and remove the temporary; PATH is untouched. Safe after commit (does nothing then). */
void lipt_afile_discard(lipt_afile *af);

/* CRC-32 (zlib) over any length. */
uint32_t lipt_crc32(uint32_t crc, const void *buf, size_t n);

static inline void lipt_put_u32(unsigned char *p, uint32_t v) {
    for (int i = 0; i < 4; i++) p[i] = (unsigned char)(v >> (8 * i));
}
static inline void lipt_put_u64(unsigned char *p, uint64_t v) {
    for (int i = 0; i < 8; i++) p[i] = (unsigned char)(v >> (8 * i));
}
static inline uint32_t lipt_get_u32(const unsigned char *p) {
    return (uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 | (uint32_t)p[3] << 24;
}
static inline uint64_t lipt_get_u64(const unsigned char *p) {
    return (uint64_t)lipt_get_u32(p) | (uint64_t)lipt_get_u32(p + 4) << 32;
}
/* Float payloads are stored as the host's bytes; the formats are little-endian. */
static inline int lipt_host_little_endian(void) {
    const uint16_t x = 1;
    return *(const unsigned char *)&x == 1;
}

#endif
