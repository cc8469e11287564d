/* The catalog: where published manifests and page bindings live (SPEC
 * §3.2). A backend implements the vtable below; the daemon talks to the
 * interface only, with a cache in front (cache.h).
 *
 * Contract shared by every operation:
 * - Called on the loop thread. The callback is called exactly once, on the
 *   loop thread, with err->code == RESHARD_OK on success. It may run before
 *   the operation returns (the memory backend completes synchronously) or
 *   later (network backends), so callers start an operation as the last
 *   step of a function.
 * - Pointers passed in need only live until the operation returns; the
 *   backend copies what it keeps. Pointers handed to the callback are valid
 *   only during the callback.
 * - Errors: NOT_FOUND for an unknown manifest, UNAVAILABLE when the
 *   backend cannot be reached, INTERNAL for anything else; the message
 *   names the key involved.
 *
 * Records: a manifest is stored as the protobuf encoding of its canonical
 * reshard.v1.StoreManifest, under its manifest key, and belongs to the model
 * domain inside that key. Manifests are content-addressed and immutable: a
 * second put of the same key is a no-op. A binding ties (model domain, page
 * key) to a manifest key; adding an existing binding is a no-op, removing a
 * missing one too. */
#ifndef RESHARD_CATALOG_H
#define RESHARD_CATALOG_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <uv.h>

#include "reshard/error.h"

typedef struct reshard_catalog reshard_catalog;

/* One manifest record as found: `found` false means no such key. */
typedef struct reshard_catalog_record {
  bool found;
  const uint8_t *data;
  size_t length;
} reshard_catalog_record;

/* Bindings found for a list of page keys: the manifests of page i are
 * manifest_keys[start[i] .. start[i + 1]). `domain_known` is false when the
 * model domain has no published manifest at all. */
typedef struct reshard_catalog_pages {
  bool domain_known;
  size_t page_count;
  const size_t *start; /* page_count + 1 entries */
  const char *const *manifest_keys;
} reshard_catalog_pages;

typedef void (*reshard_catalog_put_cb)(void *data, const reshard_error *err,
                                       bool created);
typedef void (*reshard_catalog_get_cb)(void *data, const reshard_error *err,
                                       const reshard_catalog_record *records,
                                       size_t count);
typedef void (*reshard_catalog_count_cb)(void *data, const reshard_error *err,
                                         uint64_t count);
typedef void (*reshard_catalog_lookup_cb)(void *data, const reshard_error *err,
                                          const reshard_catalog_pages *pages);
typedef void (*reshard_catalog_close_cb)(void *data);

typedef struct reshard_catalog_vtable {
  /* "memory", "lmdb", "redis". */
  const char *name;
  /* True when lookups are answered on this machine (memory, LMDB) and so
   * are never UNAVAILABLE: the daemon then keeps no binding cache in front,
   * which would only duplicate them. */
  bool lookups_are_local;

  /* Stores `record` under `manifest_key` in `model_domain` unless the key
   * exists; `created` says which. */
  void (*put_manifest)(reshard_catalog *catalog, const char *manifest_key,
                       const char *model_domain, const uint8_t *record,
                       size_t length, reshard_catalog_put_cb cb, void *data);

  /* Fetches `count` manifest records; records[i] answers keys[i]. */
  void (*get_manifests)(reshard_catalog *catalog, const char *const *keys,
                        size_t count, reshard_catalog_get_cb cb, void *data);

  /* Binds each page key to `manifest_key` in `model_domain`; NOT_FOUND when
   * the manifest is not published. `count` is the number of new bindings. */
  void (*add_pages)(reshard_catalog *catalog, const char *model_domain,
                    const char *manifest_key, const char *const *page_keys,
                    size_t page_count, reshard_catalog_count_cb cb, void *data);

  /* Removes the bindings of each page key to `manifest_key`, or to every
   * manifest when `manifest_key` is NULL. `count` is the number removed. */
  void (*forget_pages)(reshard_catalog *catalog, const char *model_domain,
                       const char *manifest_key, const char *const *page_keys,
                       size_t page_count, reshard_catalog_count_cb cb,
                       void *data);

  /* Looks up the bindings of `page_count` page keys in `model_domain`. */
  void (*lookup_pages)(reshard_catalog *catalog, const char *model_domain,
                       const char *const *page_keys, size_t page_count,
                       reshard_catalog_lookup_cb cb, void *data);

  /* Releases the backend once no operation is pending; `cb` runs when it is
   * gone (possibly before close returns). The catalog is invalid then. */
  void (*close)(reshard_catalog *catalog, reshard_catalog_close_cb cb,
                void *data);
} reshard_catalog_vtable;

/* Every backend embeds this first. */
struct reshard_catalog {
  const reshard_catalog_vtable *vtable;
  uv_loop_t *loop;
};

/* ---- Helpers shared by the backends ---- */

/* The inputs of one catalog operation. Backends that answer after the call
 * returns keep a copy made by reshard_catalog_op_alloc. */
typedef struct reshard_catalog_args {
  const char *manifest_key; /* NULL when the operation has none */
  const char *domain;       /* NULL when the operation has none */
  const uint8_t *record;
  size_t length;
  const char **keys; /* page keys, or manifest keys for get_manifests */
  size_t key_count;
} reshard_catalog_args;

/* Allocates `op_size` zeroed bytes for a backend's operation record,
 * followed in the same block by copies of `in`, and describes the copies in
 * `*copy`. One free() releases everything. NULL when out of memory. */
void *reshard_catalog_op_alloc(size_t op_size, const reshard_catalog_args *in,
                               reshard_catalog_args *copy);

/* Grows the malloc'd `*array` of `*capacity` elements of `size` bytes to
 * hold at least `need`, doubling; false (array unchanged) when out of
 * memory. */
bool reshard_catalog_grow(void **array, size_t *capacity, size_t need,
                          size_t size);

/* Opens the catalog named by `spec` ("memory", "lmdb:PATH",
 * "redis://HOST:PORT[/DB]") on `loop`. Returns INVALID_ARGUMENT for a
 * malformed spec or a backend this build does not provide, UNAVAILABLE when
 * the backend cannot be opened. */
reshard_status reshard_catalog_open(uv_loop_t *loop, const char *spec,
                                    reshard_catalog **out, reshard_error *err);

/* The same, with `redis_password` (may be NULL) as the Redis catalog's
 * password in place of the URL's (--redis-password-file). */
reshard_status reshard_catalog_open_with_password(uv_loop_t *loop,
                                                  const char *spec,
                                                  const char *redis_password,
                                                  reshard_catalog **out,
                                                  reshard_error *err);

/* The memory backend (catalog_memory.c): everything in this process, lost
 * at exit. For tests and for trying the daemon out. */
reshard_status reshard_catalog_memory_open(uv_loop_t *loop,
                                           reshard_catalog **out,
                                           reshard_error *err);

/* Memory the memory backend uses, for tests of SPEC §7's binding cost:
 * `binding_bytes` counts page entries and their manifest lists, without the
 * page keys themselves; `key_bytes` counts the page keys. */
typedef struct reshard_catalog_memory_usage {
  uint64_t bindings;
  uint64_t page_entries;
  uint64_t binding_bytes;
  uint64_t key_bytes;
} reshard_catalog_memory_usage;
void reshard_catalog_memory_usage_get(const reshard_catalog *catalog,
                                      reshard_catalog_memory_usage *out);

#endif
