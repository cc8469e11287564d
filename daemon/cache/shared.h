/* Immutable, reference-counted objects shared between the loop thread and
 * the planning workers: normalized manifests, registered placements, join
 * templates and cached page bindings. Once created they never change, so
 * any thread holding a reference may read them without locks; the count is
 * atomic. Only the loop thread creates objects and puts them in caches. */
#ifndef RESHARD_SHARED_H
#define RESHARD_SHARED_H

#include <stdatomic.h>
#include <stddef.h>

#include "reshard/arena.h"
#include "reshard/error.h"
#include "reshard/identity.h"
#include "reshard/join.h"
#include "reshard/manifest.h"
#include "reshard/placement.h"
#include "reshard/pool.h"

typedef struct reshard_shared {
  atomic_size_t refs;
  size_t bytes; /* memory owned by the object, for cache accounting */
  void (*destroy)(struct reshard_shared *shared);
} reshard_shared;

/* Takes another reference; returns `shared` for chaining. */
static inline reshard_shared *reshard_shared_ref(reshard_shared *shared) {
  atomic_fetch_add_explicit(&shared->refs, 1, memory_order_relaxed);
  return shared;
}

/* Drops a reference; the last one destroys the object. NULL is allowed.
 * Safe from any thread. */
void reshard_shared_unref(reshard_shared *shared);

/* A published manifest: normalized, with its identities. */
typedef struct reshard_shared_manifest {
  reshard_shared base;
  reshard_manifest manifest;
  char manifest_key[RESHARD_MANIFEST_KEY_SIZE];
  char layout_id[RESHARD_ID_SIZE];
  char model_domain[RESHARD_DIGEST_HEX_LEN + 1];
  reshard_arena arena; /* owns every array and string of `manifest` */
} reshard_shared_manifest;

/* Deep-copies a normalized manifest and its identities into a new object
 * with one reference. Returns NULL when memory runs out. */
reshard_shared_manifest *
reshard_shared_manifest_create(const reshard_manifest *normalized,
                               const char *manifest_key, const char *layout_id,
                               const char *model_domain);

/* A registered target placement. */
typedef struct reshard_shared_placement {
  reshard_shared base;
  reshard_placement placement;
  char placement_id[RESHARD_ID_SIZE];
  reshard_arena arena;
} reshard_shared_placement;

/* Deep-copies a normalized placement; NULL when memory runs out. */
reshard_shared_placement *
reshard_shared_placement_create(const reshard_placement *normalized,
                                const char *placement_id);

/* A registered memory pool (SPEC §1.5a), validated against the part of
 * the placement it was registered for, which it holds. */
typedef struct reshard_shared_pool {
  reshard_shared base;
  reshard_pool pool; /* as registered, every array in `arena` */
  char memory_id[RESHARD_ID_SIZE];
  reshard_shared_placement *placement; /* a reference */
  reshard_bound_pool bound;            /* in `arena`, its part in `placement` */
  uint64_t read_ns; /* uv_hrtime when its record was written or read */
  reshard_arena arena;
} reshard_shared_pool;

/* Deep-copies `pool`, validates it against its participant's part of
 * `placement` under `caps` (reshard_pool_validate; messages start with
 * `path`) and takes a reference to `placement`. NULL with `err` when the
 * pool is refused or memory runs out. */
reshard_shared_pool *
reshard_shared_pool_create(const reshard_pool *pool, const char *memory_id,
                           reshard_shared_placement *placement,
                           const reshard_limits *caps, const char *path,
                           reshard_error *err);

/* A join template (SPEC §2.2 step 2) built by the planner. */
typedef struct reshard_shared_join {
  reshard_shared base;
  reshard_join *join;
} reshard_shared_join;

/* Takes ownership of `join` (freed with reshard_join_free when the last
 * reference goes). On allocation failure frees `join` and returns NULL. */
reshard_shared_join *reshard_shared_join_wrap(reshard_join *join);

/* The manifests one page key is bound to, as cached in front of a remote
 * catalog. Keys are stored in one block after the struct. */
typedef struct reshard_shared_keys {
  reshard_shared base;
  size_t count;
  const char **keys;
} reshard_shared_keys;

reshard_shared_keys *reshard_shared_keys_create(const char *const *keys,
                                                size_t count);

/* Deep copies into `arena`; false when memory runs out. Exposed for tests
 * and for building request-local copies. */
bool reshard_copy_descriptor(reshard_arena *arena, reshard_descriptor *dst,
                             const reshard_descriptor *src);
bool reshard_copy_layout(reshard_arena *arena, reshard_layout *dst,
                         const reshard_layout *src);
bool reshard_copy_manifest(reshard_arena *arena, reshard_manifest *dst,
                           const reshard_manifest *src);
bool reshard_copy_placement(reshard_arena *arena, reshard_placement *dst,
                            const reshard_placement *src);

#endif
