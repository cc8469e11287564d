#include "cache/cache.h"

#include <stdlib.h>
#include <string.h>

#include "cache/table.h"

typedef struct cache_entry {
  reshard_table_node node;
  struct cache_entry *prev, *next; /* LRU: head is the most recent */
  reshard_shared *value;
  size_t bytes; /* entry + key + value->bytes */
  reshard_cache_kind kind;
  size_t key_length;
  char key[];
} cache_entry;

struct reshard_cache {
  reshard_table table;
  cache_entry *head, *tail;
  uint64_t budget;
  uint64_t total;
  reshard_cache_stats stats;
};

typedef struct lookup {
  reshard_cache_kind kind;
  const char *key;
  size_t length;
} lookup;

static uint64_t key_hash(reshard_cache_kind kind, const char *key,
                         size_t length) {
  return reshard_hash(key, length, 0x9e3779b97f4a7c15ull * (kind + 1));
}

static bool entry_matches(const reshard_table_node *node, const void *data) {
  const cache_entry *entry = (const cache_entry *)node;
  const lookup *want = data;
  return entry->kind == want->kind && entry->key_length == want->length &&
         memcmp(entry->key, want->key, want->length) == 0;
}

reshard_cache *reshard_cache_create(uint64_t budget_bytes) {
  reshard_cache *cache = calloc(1, sizeof *cache);
  if (cache == NULL) {
    return NULL;
  }
  if (!reshard_table_init(&cache->table, 1024)) {
    free(cache);
    return NULL;
  }
  cache->budget = budget_bytes;
  cache->stats.budget = budget_bytes;
  return cache;
}

static void lru_unlink(reshard_cache *cache, cache_entry *entry) {
  if (entry->prev) {
    entry->prev->next = entry->next;
  } else {
    cache->head = entry->next;
  }
  if (entry->next) {
    entry->next->prev = entry->prev;
  } else {
    cache->tail = entry->prev;
  }
  entry->prev = entry->next = NULL;
}

static void lru_push_front(reshard_cache *cache, cache_entry *entry) {
  entry->prev = NULL;
  entry->next = cache->head;
  if (cache->head) {
    cache->head->prev = entry;
  } else {
    cache->tail = entry;
  }
  cache->head = entry;
}

static void entry_drop(reshard_cache *cache, cache_entry *entry) {
  reshard_table_remove(&cache->table, &entry->node);
  lru_unlink(cache, entry);
  cache->total -= entry->bytes;
  cache->stats.entries[entry->kind]--;
  cache->stats.bytes[entry->kind] -= entry->bytes;
  reshard_shared_unref(entry->value);
  free(entry);
}

void reshard_cache_destroy(reshard_cache *cache) {
  if (cache == NULL) {
    return;
  }
  while (cache->head != NULL) {
    entry_drop(cache, cache->head);
  }
  reshard_table_destroy(&cache->table);
  free(cache);
}

static cache_entry *find(reshard_cache *cache, reshard_cache_kind kind,
                         const char *key, size_t length) {
  lookup want = {kind, key, length};
  return (cache_entry *)reshard_table_find(
      &cache->table, key_hash(kind, key, length), entry_matches, &want);
}

reshard_shared *reshard_cache_get(reshard_cache *cache, reshard_cache_kind kind,
                                  const char *key, size_t key_length) {
  cache_entry *entry = find(cache, kind, key, key_length);
  if (entry == NULL) {
    cache->stats.misses[kind]++;
    return NULL;
  }
  cache->stats.hits[kind]++;
  if (cache->head != entry) {
    lru_unlink(cache, entry);
    lru_push_front(cache, entry);
  }
  return reshard_shared_ref(entry->value);
}

bool reshard_cache_put(reshard_cache *cache, reshard_cache_kind kind,
                       const char *key, size_t key_length,
                       reshard_shared *value) {
  /* The bucket pointer the entry adds on average is counted too. */
  size_t bytes = sizeof(cache_entry) + key_length + sizeof(void *);
  if (value->bytes > SIZE_MAX - bytes) {
    return false;
  }
  bytes += value->bytes;
  cache_entry *old = find(cache, kind, key, key_length);
  if (old != NULL) {
    entry_drop(cache, old);
  }
  if (bytes > cache->budget) {
    return false;
  }
  while (cache->total + bytes > cache->budget && cache->tail != NULL) {
    cache->stats.evictions[cache->tail->kind]++;
    entry_drop(cache, cache->tail);
  }
  cache_entry *entry = malloc(sizeof *entry + key_length);
  if (entry == NULL) {
    return false;
  }
  entry->kind = kind;
  entry->key_length = key_length;
  memcpy(entry->key, key, key_length);
  entry->value = reshard_shared_ref(value);
  entry->bytes = bytes;
  entry->node.hash = key_hash(kind, key, key_length);
  reshard_table_insert(&cache->table, &entry->node);
  lru_push_front(cache, entry);
  cache->total += bytes;
  cache->stats.entries[kind]++;
  cache->stats.bytes[kind] += bytes;
  return true;
}

void reshard_cache_remove(reshard_cache *cache, reshard_cache_kind kind,
                          const char *key, size_t key_length) {
  cache_entry *entry = find(cache, kind, key, key_length);
  if (entry != NULL) {
    entry_drop(cache, entry);
  }
}

void reshard_cache_get_stats(const reshard_cache *cache,
                             reshard_cache_stats *out) {
  *out = cache->stats;
  out->total_bytes = cache->total;
}

const char *reshard_cache_kind_name(reshard_cache_kind kind) {
  switch (kind) {
  case RESHARD_CACHE_MANIFEST:
    return "manifest";
  case RESHARD_CACHE_PLACEMENT:
    return "placement";
  case RESHARD_CACHE_JOIN:
    return "join";
  case RESHARD_CACHE_BINDINGS:
    return "bindings";
  case RESHARD_CACHE_INLINE_PLACEMENT:
    return "inline_placement";
  case RESHARD_CACHE_BOUND_BINDING:
    return "bound_binding";
  case RESHARD_CACHE_MEMORY_POOL:
    return "memory_pool";
  }
  return "unknown";
}

size_t reshard_cache_key(char *out, size_t size, const char *const *parts,
                         size_t count) {
  if (size == 0) {
    return 0;
  }
  size_t at = 0;
  for (size_t i = 0; i < count; i++) {
    size_t length = strlen(parts[i]);
    size_t separator = i > 0;
    /* Room for the separator, the part and the terminating NUL. */
    if (size - at <= separator + length) {
      return 0;
    }
    if (separator) {
      out[at++] = '|';
    }
    memcpy(out + at, parts[i], length);
    at += length;
  }
  out[at] = '\0';
  return at;
}

size_t reshard_cache_join_key(char *out, size_t size, const char *layout_id,
                              const char *placement_id, uint64_t dp_rank,
                              const char *participant_id) {
  char digits[21]; /* UINT64_MAX has 20 */
  char *first = digits + sizeof digits - 1;
  *first = '\0';
  do {
    *--first = (char)('0' + dp_rank % 10);
    dp_rank /= 10;
  } while (dp_rank > 0);
  const char *parts[] = {layout_id, placement_id, first, participant_id};
  return reshard_cache_key(out, size, parts, 4);
}
