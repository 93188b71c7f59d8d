/* defines: lipt_arena, the bump allocator that holds activations, saved buffers and tape nodes between resets. */
#ifndef LIPT_ARENA_H
#define LIPT_ARENA_H

#include <stddef.h>

#include "lipt/core.h"

#ifdef __cplusplus
extern "C" {
#endif

/* Bump allocator: a list of blocks; reset keeps memory, and after a reset that found
 * more than one block they are merged into one, so a repeated step stops allocating. */
typedef struct lipt_arena_block lipt_arena_block;
typedef struct {
    lipt_arena_block *head;   /* current block */
    size_t used_total;        /* bytes handed out since the last reset */
    size_t peak;              /* largest used_total seen */
    size_t capacity;          /* bytes owned in all blocks */
    size_t n_block_mallocs;   /* how many times the arena called malloc */
    void *grow_fail;          /* NULL, or a jmp_buf * that a growth the system refuses (outside a parallel region)
                               * longjmps to instead of aborting: for a throwaway computation whose caller can give
                               * up on it (lipt_train_memory_estimate's probe step) */
} lipt_arena;

void   lipt_arena_init(lipt_arena *a, size_t initial_bytes);
/* An unused arena (nothing allocated since init or reset) given one block of at least `bytes` (address space
 * reserved, pages committed as they are first used), so that a step of that size never grows it; LIPT_ERR_NOMEM
 * (the arena unchanged) when the system refuses, where growing would have aborted. */
lipt_status lipt_arena_reserve(lipt_arena *a, size_t bytes, lipt_error *err);
void  *lipt_arena_alloc(lipt_arena *a, size_t bytes);        /* 64-byte aligned, uninitialised */
void  *lipt_arena_calloc(lipt_arena *a, size_t bytes);       /* zeroed */
void   lipt_arena_reset(lipt_arena *a);
void   lipt_arena_free(lipt_arena *a);
/* Scoped temporaries: everything allocated after a mark is released by lipt_arena_release.
 * Tape nodes recorded after the mark must not be used afterwards (use in no-grad mode). */
typedef struct { lipt_arena_block *block; size_t used, used_total; } lipt_arena_mark;
lipt_arena_mark lipt_arena_get_mark(const lipt_arena *a);
void   lipt_arena_release(lipt_arena *a, lipt_arena_mark m);

#ifdef __cplusplus
}
#endif
#endif
