/* The daemon's bounded in-memory cache (SPEC §3.2, §7): normalized
 * manifests by manifest key, registered placements by placement id, join
 * templates by (layout id, placement id, dp rank, participant) and, in front
 * of remote catalogs, page bindings by (model domain, page key). One LRU
 * list and one byte budget cover every kind. Values are reference-counted
 * shared objects, so evicting an entry a worker still reads only drops the
 * cache's reference. Loop thread only. */
#ifndef RESHARD_CACHE_H
#define RESHARD_CACHE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "cache/shared.h"

typedef enum reshard_cache_kind {
  RESHARD_CACHE_MANIFEST = 0,
  RESHARD_CACHE_PLACEMENT = 1,
  RESHARD_CACHE_JOIN = 2,
  RESHARD_CACHE_BINDINGS = 3,
  /* Inline PlanLoad targets by their wire bytes (inline_cache.h). */
  RESHARD_CACHE_INLINE_PLACEMENT = 4,
  RESHARD_CACHE_BOUND_BINDING = 5,
  /* Registered memory pools by memory id (SPEC §1.5a). */
  RESHARD_CACHE_MEMORY_POOL = 6,
} reshard_cache_kind;

#define RESHARD_CACHE_KINDS 7

typedef struct reshard_cache_stats {
  uint64_t hits[RESHARD_CACHE_KINDS];
  uint64_t misses[RESHARD_CACHE_KINDS];
  uint64_t evictions[RESHARD_CACHE_KINDS];
  uint64_t entries[RESHARD_CACHE_KINDS];
  uint64_t bytes[RESHARD_CACHE_KINDS];
  uint64_t total_bytes;
  uint64_t budget;
} reshard_cache_stats;

typedef struct reshard_cache reshard_cache;

/* Creates an empty cache that holds at most `budget_bytes` (entry
 * overhead, keys and value bytes all counted). NULL when out of memory. */
reshard_cache *reshard_cache_create(uint64_t budget_bytes);

/* Drops every entry (values live on while others hold references). */
void reshard_cache_destroy(reshard_cache *cache);

/* Returns a new reference to the value cached under (kind, key) and marks
 * it most recently used, or NULL on a miss. Counts the hit or miss. */
reshard_shared *reshard_cache_get(reshard_cache *cache, reshard_cache_kind kind,
                                  const char *key, size_t key_length);

/* Caches `value` under (kind, key), taking a reference of its own and
 * replacing any previous value; evicts least recently used entries until
 * the budget holds. Returns false, caching nothing, when the entry alone is
 * larger than the budget or memory runs out. */
bool reshard_cache_put(reshard_cache *cache, reshard_cache_kind kind,
                       const char *key, size_t key_length,
                       reshard_shared *value);

/* Drops the entry for (kind, key), if any. */
void reshard_cache_remove(reshard_cache *cache, reshard_cache_kind kind,
                          const char *key, size_t key_length);

void reshard_cache_get_stats(const reshard_cache *cache,
                             reshard_cache_stats *out);

/* "manifest", "placement", "join", "bindings", "inline_placement",
 * "bound_binding" or "memory_pool". */
const char *reshard_cache_kind_name(reshard_cache_kind kind);

/* Joins `count` strings with '|' into `out` (capacity `size`), NUL-
 * terminated; returns the key's length, or 0 when it does not fit. Cache
 * keys are built on every call, so without printf's format parsing. */
size_t reshard_cache_key(char *out, size_t size, const char *const *parts,
                         size_t count);

/* Builds the join-template key "layout_id|placement_id|dp|participant" into
 * `out` (capacity `size`); returns its length, or 0 when it does not fit. */
size_t reshard_cache_join_key(char *out, size_t size, const char *layout_id,
                              const char *placement_id, uint64_t dp_rank,
                              const char *participant_id);

#endif
