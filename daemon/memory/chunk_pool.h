/* A pool of memory blocks shared by every thread of the daemon, behind the
 * per-call arenas (reshard_arena_source) and the response buffers. A call
 * that finishes gives its blocks back instead of freeing them, so the next
 * call reuses memory that is already mapped and touched: no page faults,
 * no mmap/munmap per call for a large plan. Blocks come in power-of-two
 * classes; at most `retain_bytes` are kept, so the daemon's resident memory
 * stays bounded by what calls in flight hold plus that amount. When the
 * pool is full, a block given back takes the place of blocks of the class
 * used longest ago, if that is older than its own: what is kept follows
 * the calls being served now. Thread-safe (one mutex, held for a list push
 * or pop, or an eviction). */
#ifndef RESHARD_CHUNK_POOL_H
#define RESHARD_CHUNK_POOL_H

#include <stddef.h>
#include <stdint.h>

#include "reshard/arena.h"

typedef struct reshard_chunk_pool reshard_chunk_pool;

/* Creates a pool keeping at most `retain_bytes` of free blocks. NULL when
 * out of memory. */
reshard_chunk_pool *reshard_chunk_pool_create(size_t retain_bytes);

/* Drops the caller's reference; the last one frees the pool and every
 * block it keeps. Blocks still out must not be given back after the last
 * reference is gone: a holder that may outlive the creator's reference (a
 * response buffer gRPC frees when it likes) takes its own. NULL is
 * accepted. */
void reshard_chunk_pool_free(reshard_chunk_pool *pool);

/* Takes another reference, dropped with reshard_chunk_pool_free. */
void reshard_chunk_pool_retain(reshard_chunk_pool *pool);

/* A block of at least `size` bytes; its real size goes to *capacity. NULL
 * when memory runs out. */
void *reshard_chunk_pool_take(reshard_chunk_pool *pool, size_t size,
                              size_t *capacity);

/* Gives back a block from reshard_chunk_pool_take with its capacity. */
void reshard_chunk_pool_give(reshard_chunk_pool *pool, void *block,
                             size_t capacity);

/* The source for reshard_arena_init_from; valid as long as the pool. */
const reshard_arena_source *
reshard_chunk_pool_source(const reshard_chunk_pool *pool);

typedef struct reshard_chunk_pool_stats {
  uint64_t takes;       /* blocks of the pool's classes handed out */
  uint64_t reuses;      /* of which were kept ones */
  uint64_t kept_bytes;  /* free blocks held now */
  uint64_t kept_blocks; /* their number */
} reshard_chunk_pool_stats;

void reshard_chunk_pool_get_stats(reshard_chunk_pool *pool,
                                  reshard_chunk_pool_stats *out);

#endif
