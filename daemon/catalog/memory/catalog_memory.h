/* The memory catalog (catalog_memory.c): everything in this process, lost
 * at exit. For tests and for trying the daemon out. */
#ifndef RESHARD_CATALOG_MEMORY_H
#define RESHARD_CATALOG_MEMORY_H

#include <stdint.h>
#include <uv.h>

#include "catalog/catalog.h"

/* Opens an empty memory catalog on `loop`; INTERNAL when out of memory. */
reshard_status reshard_catalog_memory_open(uv_loop_t *loop,
                                           reshard_catalog **out,
                                           reshard_error *err);

/* Memory the memory backend uses, for tests and benchmarks of SPEC §7's
 * binding cost. `page_entries` is the number of (model domain, page key)
 * with a binding. `binding_bytes` counts every byte written for them but
 * the page keys: record headers and padding, forgotten records awaiting
 * compaction, the slot table, manifest id lists of pages bound more than
 * once. `key_bytes` counts the page keys. `arena_bytes` is the record
 * arena's capacity, of which what is not yet written is reserved address
 * space only (never touched, so not resident). Manifests, domains and
 * objects are not counted. */
typedef struct reshard_catalog_memory_usage {
  uint64_t bindings;
  uint64_t page_entries;
  uint64_t binding_bytes;
  uint64_t key_bytes;
  uint64_t arena_bytes;
} reshard_catalog_memory_usage;
void reshard_catalog_memory_usage_get(const reshard_catalog *catalog,
                                      reshard_catalog_memory_usage *out);

#endif
