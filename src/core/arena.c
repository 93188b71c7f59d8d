/* Bump arena for activations and the tape. */
#define _DEFAULT_SOURCE /* MAP_NORESERVE, MAP_ANONYMOUS, _SC_PHYS_PAGES */
#include "lipt/arena.h"

#include <omp.h>
#include <setjmp.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include "lipt/core.h"

struct lipt_arena_block {
    lipt_arena_block *next;  /* older block */
    size_t size, used;
    unsigned char *mem;
    int mapped;              /* mem is a reservation from block_reserve (munmap), not malloc */
};

/* Arenas that start at least this large (a training step's) reserve address space instead of a malloc'd block. */
#define ARENA_RESERVE_MIN ((size_t)16 << 20)

/* One block as large as the machine's RAM, reserved but not committed: pages become resident only when the bump
 * pointer first reaches them, so the resident memory of an arena is its high-water mark. A chain of doubling
 * blocks instead leaves each outgrown block's touched tail resident, up to twice the peak in the first step
 * (and for good when marks are released across blocks). NULL where the system refuses (strict overcommit, a
 * small address space under a tool): the arena then grows by malloc'd blocks. */
static lipt_arena_block *block_map(lipt_arena *a, size_t size) {
    void *mem = mmap(NULL, size, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
    if (mem == MAP_FAILED) return NULL;
    lipt_arena_block *b = malloc(sizeof *b);
    if (!b) {
        munmap(mem, size);
        return NULL;
    }
    b->mem = mem; /* page-aligned */
    b->size = size;
    b->used = 0;
    b->next = NULL;
    b->mapped = 1;
    a->capacity += size;
    return b;
}

static lipt_arena_block *block_reserve(lipt_arena *a) {
    const long pages = sysconf(_SC_PHYS_PAGES), page = sysconf(_SC_PAGESIZE);
    if (pages <= 0 || page <= 0) return NULL;
    return block_map(a, (size_t)pages * (size_t)page);
}

static void block_free(lipt_arena_block *b) {
    if (b->mapped) munmap(b->mem, b->size);
    else free(b->mem);
    free(b);
}

/* A malloc'd block of size bytes, or NULL when the system refuses. */
static lipt_arena_block *block_try(lipt_arena *a, size_t size) {
    void *mem = NULL;
    if (posix_memalign(&mem, 64, (size + 63) & ~(size_t)63) != 0 || !mem) return NULL;
    lipt_arena_block *b = lipt_xmalloc(sizeof *b);
    b->mem = mem;
    b->size = size;
    b->used = 0;
    b->next = NULL;
    b->mapped = 0;
    a->capacity += size;
    a->n_block_mallocs++;
    return b;
}

/* A block of at least need bytes, doubling the current one when the system allows (fewer blocks), else exactly need;
 * when even that is refused: a longjmp to a->grow_fail where one is set (outside parallel regions), else the abort
 * of lipt_xaligned. */
static lipt_arena_block *block_grow(lipt_arena *a, size_t cur, size_t need) {
    size_t sz = cur * 2;
    if (sz < need) sz = need;
    lipt_arena_block *b = block_try(a, sz);
    if (!b && sz > need) b = block_try(a, need);
    if (b) return b;
    if (a->grow_fail && !omp_in_parallel()) longjmp(*(jmp_buf *)a->grow_fail, 1);
    lipt_die(__FILE__, __LINE__, "out of memory allocating %zu aligned bytes", need);
}

void lipt_arena_init(lipt_arena *a, size_t initial_bytes) {
    memset(a, 0, sizeof *a);
    if (initial_bytes < 4096) initial_bytes = 4096;
    a->head = initial_bytes >= ARENA_RESERVE_MIN ? block_reserve(a) : NULL;
    if (!a->head) a->head = block_grow(a, 0, initial_bytes);
}

lipt_status lipt_arena_reserve(lipt_arena *a, size_t bytes, lipt_error *err) {
    if (a->head->size >= bytes && !a->head->next) return LIPT_OK;
    if (a->used_total != 0)
        return lipt_fail(err, LIPT_ERR_INTERNAL, "lipt_arena_reserve on an arena in use (%zu bytes)", a->used_total);
    const size_t capacity = a->capacity;
    a->capacity = 0;
    /* as lipt_arena_init: the machine's RAM as address space when it covers the request (room to grow past it
     * without a chain of blocks), else exactly the request */
    lipt_arena_block *b = block_reserve(a);
    if (b && b->size < bytes) {
        block_free(b);
        b = NULL;
        a->capacity = 0;
    }
    if (!b) b = block_map(a, bytes);
    if (!b) {
        a->capacity = capacity;
        return lipt_fail(err, LIPT_ERR_NOMEM, "cannot reserve %.1f MB of address space for a step's activations",
                         (double)bytes / 1048576.0);
    }
    for (lipt_arena_block *o = a->head; o;) {
        lipt_arena_block *n = o->next;
        block_free(o);
        o = n;
    }
    a->head = b;
    a->peak = 0;
    return LIPT_OK;
}

void *lipt_arena_alloc(lipt_arena *a, size_t bytes) {
    size_t need = (bytes + 63) & ~(size_t)63;
    if (need == 0) need = 64;
    if (a->head->used + need > a->head->size) {
        lipt_arena_block *b = block_grow(a, a->head->size, need);
        b->next = a->head;
        a->head = b;
    }
    void *p = a->head->mem + a->head->used;
    a->head->used += need;
    a->used_total += need;
    if (a->used_total > a->peak) a->peak = a->used_total;
    return p;
}

/* Zeroing above this size is split over the threads (gradient buffers of activations are megabytes; one thread
 * clearing them left the others waiting). */
#define ARENA_PAR_ZERO ((size_t)1 << 20)
#define ARENA_ZERO_CHUNK ((size_t)1 << 16)

void *lipt_arena_calloc(lipt_arena *a, size_t bytes) {
    unsigned char *p = lipt_arena_alloc(a, bytes);
    if (bytes < ARENA_PAR_ZERO) {
        memset(p, 0, bytes);
        return p;
    }
    const size_t nchunk = (bytes + ARENA_ZERO_CHUNK - 1) / ARENA_ZERO_CHUNK;
#pragma omp parallel for schedule(static)
    for (size_t c = 0; c < nchunk; c++) {
        const size_t off = c * ARENA_ZERO_CHUNK, len = bytes - off < ARENA_ZERO_CHUNK ? bytes - off : ARENA_ZERO_CHUNK;
        memset(p + off, 0, len);
    }
    return p;
}

void lipt_arena_reset(lipt_arena *a) {
    if (a->head->next) {
        /* The step needed more than one block: replace them all by one that fits the peak. */
        size_t total = a->peak + a->peak / 8;
        lipt_arena_block *b = a->head;
        while (b) { lipt_arena_block *n = b->next; block_free(b); b = n; }
        a->capacity = 0;
        a->head = block_try(a, total);
        if (!a->head) lipt_die(__FILE__, __LINE__, "out of memory allocating %zu aligned bytes", total);
    }
    a->head->used = 0;
    a->used_total = 0;
}

void lipt_arena_free(lipt_arena *a) {
    lipt_arena_block *b = a->head;
    while (b) { lipt_arena_block *n = b->next; block_free(b); b = n; }
    memset(a, 0, sizeof *a);
}

lipt_arena_mark lipt_arena_get_mark(const lipt_arena *a) {
    lipt_arena_mark m = {a->head, a->head->used, a->used_total};
    return m;
}

void lipt_arena_release(lipt_arena *a, lipt_arena_mark m) {
    if (a->head == m.block) {
        a->head->used = m.used;
    } else {
        /* Blocks opened after the mark hold only released data. Keep allocating from the newest
         * (largest) one from its start; the next reset merges them all, so a loop of
         * mark/work/release stops calling malloc after its first round. */
        a->head->used = 0;
    }
    a->used_total = m.used_total;
}
