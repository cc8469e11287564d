/* The catalog: where published manifests and page bindings live (SPEC
 * §3.2). A backend implements the vtable below; the daemon talks to the
 * interface only, with a cache in front (cache.h).
 *
 * Who depends on whom: this header (and catalog.c, the helpers the
 * backends share) depends on no backend. The backends (memory/, lmdb/,
 * redis/) and the timing decorator (catalog_timed.h) implement it;
 * catalog_open.h opens a backend by its --catalog spec and is the only file
 * that knows them all.
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
 *   names the key involved. An unknown object is no error (`found` and
 *   `removed` say so).
 *
 * Records: a manifest is stored as the protobuf encoding of its canonical
 * reshard.v1.StoreManifest, under its manifest key, and belongs to the model
 * domain inside that key. Manifests are content-addressed and immutable: a
 * second put of the same key is a no-op. A binding ties (model domain, page
 * key) to a manifest key; adding an existing binding is a no-op, removing a
 * missing one too.
 *
 * Objects: registered placements and memory pools are records of their own
 * kind (reshard_catalog_object_kind), stored as the bytes the caller gives
 * under their id. Like manifests they are content-addressed and immutable:
 * a put stores only when the id is not there yet (SET NX), so a second put
 * of the same id is a no-op that reports created=false and leaves the
 * stored bytes as they were. Unlike manifests they can be forgotten (the
 * engine that owned a pool left). Ids are unique per kind: a placement and
 * a memory pool may share one. */
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
typedef void (*reshard_catalog_removed_cb)(void *data, const reshard_error *err,
                                           bool removed);

/* The kinds of object records (docs/catalog.md lists their keys). */
typedef enum reshard_catalog_object_kind {
  RESHARD_CATALOG_OBJECT_PLACEMENT = 0, /* a registered placement */
  RESHARD_CATALOG_OBJECT_MEMORY_POOL,   /* a registered memory pool */
} reshard_catalog_object_kind;

#define RESHARD_CATALOG_OBJECT_KINDS 2

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

  /* Stores `record` as the object `id` of `kind` unless that id exists;
   * `created` says which (false, with the stored bytes unchanged, for an id
   * already there). */
  void (*put_object)(reshard_catalog *catalog, reshard_catalog_object_kind kind,
                     const char *id, const uint8_t *record, size_t length,
                     reshard_catalog_put_cb cb, void *data);

  /* Fetches `count` objects of `kind`; records[i] answers ids[i], with
   * `found` false for an unknown id. */
  void (*get_objects)(reshard_catalog *catalog,
                      reshard_catalog_object_kind kind, const char *const *ids,
                      size_t count, reshard_catalog_get_cb cb, void *data);

  /* Removes the object `id` of `kind`; `removed` is false when there was
   * none (not an error). */
  void (*forget_object)(reshard_catalog *catalog,
                        reshard_catalog_object_kind kind, const char *id,
                        reshard_catalog_removed_cb cb, void *data);

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

/* ---- Helpers shared by the backends (catalog.c) ---- */

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

/* The kind as messages name it ("placement", "memory pool"); "object" for
 * a value outside the enum. */
const char *reshard_catalog_object_kind_name(reshard_catalog_object_kind kind);

/* Grows the malloc'd `*array` of `*capacity` elements of `size` bytes to
 * hold at least `need`, doubling; false (array unchanged) when out of
 * memory. */
bool reshard_catalog_grow(void **array, size_t *capacity, size_t need,
                          size_t size);

#endif
