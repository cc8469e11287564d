#include "memory/chunk_pool.h"

#include <stdatomic.h>
#include <stdbool.h>
#include <stdlib.h>
#include <uv.h>

/* Classes from 2^14 (16 KiB, a call arena's first chunk) to 2^26 (64 MiB),
 * four per octave (2^k times 1, 1.25, 1.5, 1.75), so a block is at most
 * 25 % larger than asked for. Larger blocks are malloc'd and freed as they
 * come. */
enum { SMALLEST_SHIFT = 14, LARGEST_SHIFT = 26, STEPS = 4 };
#define CLASS_COUNT ((LARGEST_SHIFT - SMALLEST_SHIFT) * STEPS + 1)

typedef struct free_block {
  struct free_block *next;
} free_block;

struct reshard_chunk_pool {
  atomic_size_t references;
  uv_mutex_t lock;
  free_block *free[CLASS_COUNT];
  uint64_t last_take[CLASS_COUNT]; /* `takes` when the class last served */
  size_t retain_bytes;
  size_t kept_bytes;
  uint64_t kept_blocks;
  uint64_t takes;
  uint64_t reuses;
  reshard_arena_source source;
};

static void *source_take(void *context, size_t size, size_t *capacity) {
  return reshard_chunk_pool_take(context, size, capacity);
}

static void source_give(void *context, void *block, size_t capacity) {
  reshard_chunk_pool_give(context, block, capacity);
}

reshard_chunk_pool *reshard_chunk_pool_create(size_t retain_bytes) {
  reshard_chunk_pool *pool = calloc(1, sizeof *pool);
  if (pool == NULL) {
    return NULL;
  }
  if (uv_mutex_init(&pool->lock) != 0) {
    free(pool);
    return NULL;
  }
  atomic_init(&pool->references, 1);
  pool->retain_bytes = retain_bytes;
  pool->source = (reshard_arena_source){source_take, source_give, pool};
  return pool;
}

void reshard_chunk_pool_retain(reshard_chunk_pool *pool) {
  atomic_fetch_add_explicit(&pool->references, 1, memory_order_relaxed);
}

void reshard_chunk_pool_free(reshard_chunk_pool *pool) {
  if (pool == NULL || atomic_fetch_sub_explicit(&pool->references, 1,
                                                memory_order_acq_rel) > 1) {
    return;
  }
  for (int c = 0; c < CLASS_COUNT; c++) {
    for (free_block *block = pool->free[c]; block != NULL;) {
      free_block *next = block->next;
      free(block);
      block = next;
    }
  }
  uv_mutex_destroy(&pool->lock);
  free(pool);
}

/* The smallest class holding `size` bytes, or -1 when none does. */
static int class_of(size_t size) {
  if (size <= (size_t)1 << SMALLEST_SHIFT) {
    return 0;
  }
  if (size > (size_t)1 << LARGEST_SHIFT) {
    return -1;
  }
  int shift = 63 - __builtin_clzll((unsigned long long)(size - 1));
  size_t step = (size_t)1 << (shift - 2);
  size_t steps = (size - 1) / step + 1; /* 5..8 quarter octaves */
  return (shift - SMALLEST_SHIFT) * STEPS + (int)steps - STEPS;
}

static size_t class_size(int c) {
  int shift = SMALLEST_SHIFT + c / STEPS;
  return ((size_t)1 << shift) + (size_t)(c % STEPS) * ((size_t)1 << shift) / 4;
}

void *reshard_chunk_pool_take(reshard_chunk_pool *pool, size_t size,
                              size_t *capacity) {
  int c = class_of(size);
  if (c < 0) {
    *capacity = size;
    return malloc(size);
  }
  size_t block_size = class_size(c);
  uv_mutex_lock(&pool->lock);
  pool->takes++;
  pool->last_take[c] = pool->takes;
  free_block *block = pool->free[c];
  if (block != NULL) {
    pool->free[c] = block->next;
    pool->kept_bytes -= block_size;
    pool->kept_blocks--;
    pool->reuses++;
  }
  uv_mutex_unlock(&pool->lock);
  if (block == NULL) {
    block = malloc(block_size);
  }
  *capacity = block_size;
  return block;
}

/* The kept class used longest ago, if it was used before class `c`: the
 * one to give up for a block of `c`, so that what is kept follows the
 * calls being served now (a burst of large plans must not leave the pool
 * full of their blocks for good). -1 when there is none. */
static int stalest_class(const reshard_chunk_pool *pool, int c) {
  int stalest = -1;
  for (int other = 0; other < CLASS_COUNT; other++) {
    if (other != c && pool->free[other] != NULL &&
        pool->last_take[other] < pool->last_take[c] &&
        (stalest < 0 || pool->last_take[other] < pool->last_take[stalest])) {
      stalest = other;
    }
  }
  return stalest;
}

static bool has_room(const reshard_chunk_pool *pool, size_t capacity) {
  return pool->kept_bytes <= pool->retain_bytes &&
         pool->retain_bytes - pool->kept_bytes >= capacity;
}

void reshard_chunk_pool_give(reshard_chunk_pool *pool, void *block,
                             size_t capacity) {
  if (block == NULL) {
    return;
  }
  int c = class_of(capacity);
  bool keep = false;
  free_block *evicted = NULL;
  if (c >= 0 && capacity == class_size(c) && capacity <= pool->retain_bytes) {
    uv_mutex_lock(&pool->lock);
    /* Blocks given up before room is found stay given up: they were staler
     * than a class in use. */
    while (!has_room(pool, capacity)) {
      int stalest = stalest_class(pool, c);
      if (stalest < 0) {
        break;
      }
      free_block *node = pool->free[stalest];
      pool->free[stalest] = node->next;
      pool->kept_bytes -= class_size(stalest);
      pool->kept_blocks--;
      node->next = evicted;
      evicted = node;
    }
    keep = has_room(pool, capacity);
    if (keep) {
      free_block *node = block;
      node->next = pool->free[c];
      pool->free[c] = node;
      pool->kept_bytes += capacity;
      pool->kept_blocks++;
    }
    uv_mutex_unlock(&pool->lock);
  }
  while (evicted != NULL) {
    free_block *next = evicted->next;
    free(evicted);
    evicted = next;
  }
  if (!keep) {
    free(block);
  }
}

const reshard_arena_source *
reshard_chunk_pool_source(const reshard_chunk_pool *pool) {
  return &pool->source;
}

void reshard_chunk_pool_get_stats(reshard_chunk_pool *pool,
                                  reshard_chunk_pool_stats *out) {
  uv_mutex_lock(&pool->lock);
  *out = (reshard_chunk_pool_stats){
      .takes = pool->takes,
      .reuses = pool->reuses,
      .kept_bytes = pool->kept_bytes,
      .kept_blocks = pool->kept_blocks,
  };
  uv_mutex_unlock(&pool->lock);
}
