/* What the planner's RPC files share (daemon/rpc/): the planner's state,
 * the request checks every handler needs, and the handlers themselves,
 * which reshard_planner_register (planner_service.c) installs. Internal
 * to the daemon; everything here runs on the loop unless it says so. */
#ifndef RESHARD_PLANNER_INTERNAL_H
#define RESHARD_PLANNER_INTERNAL_H

#include <protobuf-c/protobuf-c.h>
#include <stdbool.h>
#include <stdint.h>
#include <uv.h>

#include "cache/cache.h"
#include "cache/inline_cache.h"
#include "cache/shared.h"
#include "catalog/catalog.h"
#include "memory/work_pool.h"
#include "observe/metrics.h"
#include "reshard/identity.h"
#include "reshard/limits.h"
#include "reshard/placement.h"
#include "reshard/v1/planner.pb-c.h"
#include "rpc/planner_service.h"
#include "server/server.h"
#include "wire/plan_response.h"

/* A handler of an RPC whose request the planner decodes before calling it:
 * `message` is that request, in the call's arena. */
typedef void reshard__planner_rpc(reshard_planner *planner, reshard_call *call,
                                  void *message);

/* What the server hands back for such an RPC (reshard_planner_register). */
typedef struct reshard__planner_method {
  reshard_planner *planner;
  const ProtobufCMessageDescriptor *request;
  reshard__planner_rpc *handle;
} reshard__planner_method;

/* The RPCs but PlanLoad and PlanStore, which decode their requests
 * themselves (plan_load.c, plan_store.c). */
enum { RESHARD__PLANNER_DECODED_RPCS = 8 };

struct reshard_planner {
  uv_loop_t *loop;
  reshard_catalog *catalog;
  reshard_cache *cache;
  reshard_limits caps;
  uint64_t inline_max_values;
  reshard_work_pool *pool;  /* decoding and planning off the loop */
  bool cache_bindings;      /* a binding cache sits in front of the catalog */
  reshard_metrics *metrics; /* may be NULL */

  reshard_inline_recent recent_bindings; /* inline_cache.h */
  /* Large PlanLoads and PlanStores being decoded or planned, and those
   * waiting their turn as raw bytes (see "Where plans run" in
   * docs/daemon.md). */
  unsigned large_active;
  unsigned max_large;
  bool dequeuing;
  struct reshard__queued_call *queue_head, *queue_tail;

  reshard__planner_method methods[RESHARD__PLANNER_DECODED_RPCS];
};

/* ---- Request helpers (planner_service.c) ---- */

/* `size` zeroed bytes from the call's arena, aligned for any object: a
 * handler's context. NULL after failing the call (RESOURCE_EXHAUSTED) when
 * memory runs out. */
void *reshard__planner_call_alloc(reshard_call *call, size_t size);

/* Checks a model domain field: required, 64 lowercase hex digits
 * (INVALID_ARGUMENT naming `path`). */
reshard_status reshard__planner_check_domain(const char *domain,
                                             const char *path,
                                             reshard_error *err);

/* Checks "kv/{domain}/manifests/{digest}" (INVALID_ARGUMENT naming `path`)
 * and extracts the domain. */
reshard_status
reshard__planner_parse_manifest_key(const char *key, const char *path,
                                    char domain[RESHARD_DIGEST_HEX_LEN + 1],
                                    reshard_error *err);

/* Checks a request's page keys: at most caps->max_page_keys, none empty. */
reshard_status reshard__planner_check_page_keys(char *const *keys, size_t count,
                                                const reshard_limits *caps,
                                                reshard_error *err);

/* The bytes a plan (load or store) may hold, asked from
 * --max-inflight-bytes with reshard_call_reserve before planning starts. */
uint64_t reshard__planner_plan_reservation(uint64_t binding_values,
                                           uint64_t max_operations);

/* ---- Manifests (manifests.c) ---- */

/* A catalog record of manifest `key`, decoded, normalized and checked to
 * be that manifest; NULL with `err` (INTERNAL) otherwise. The caller owns
 * the reference. */
reshard_shared_manifest *
reshard__planner_manifest_from_record(const reshard_planner *planner,
                                      const char *key, const uint8_t *data,
                                      size_t length, reshard_error *err);

/* Puts a manifest in the cache (the cache takes its own reference). */
void reshard__planner_cache_manifest(reshard_planner *planner,
                                     reshard_shared_manifest *manifest);

/* ---- Pages (pages.c) ---- */

/* The binding cache's key for a page: "domain|page key" into `out`
 * (capacity `size`); 0 when it does not fit (such pages are never cached).
 * The model domain alone (no '|') marks the domain as known. */
size_t reshard__planner_bindings_key(char *out, size_t size, const char *domain,
                                     const char *page_key);

/* A catalog answer to a read of manifest `key` alone: the manifest,
 * cached and owned by the caller, or NULL with `err` (NOT_FOUND when it is
 * not published, INTERNAL for a bad record). */
reshard_shared_manifest *
reshard__planner_manifest_found(reshard_planner *planner, const char *key,
                                const reshard_catalog_record *records,
                                size_t count, reshard_error *err);

/* ---- Placements (placements.c) ---- */

/* Decodes placement message `pb` into `arena`, checks it against `caps`
 * and normalizes it there; `id` (may be NULL) receives its placement_id.
 * On failure `err` is what the failing step set (INVALID_ARGUMENT, or
 * RESOURCE_EXHAUSTED over a cap; paths start at "placement"). Handlers
 * pass the call's arena and the caps the request was decoded under
 * (reshard_decode_caps); a catalog record is decoded into scratch under
 * the planner's caps (reshard__planner_placement_from_pb, below). */
reshard_status
reshard__planner_decode_placement(const Reshard__V1__Placement *pb,
                                  const reshard_limits *caps,
                                  reshard_arena *arena, reshard_placement *out,
                                  char id[RESHARD_ID_SIZE], reshard_error *err);

/* The placement a plan (load or store) targets. */
typedef struct reshard__target {
  reshard_shared_placement *ref; /* held when registered or found by bytes */
  reshard_placement inline_placement; /* decoded from the request */
  const reshard_placement *placement; /* one of the two */
  char id[RESHARD_ID_SIZE];
} reshard__target;

/* Runs once a target is resolved: `err` NULL when it is, else why not. */
typedef void reshard__target_done(void *data, const reshard_error *err);

/* Resolves a request's `target` oneof: the inline placement `pb` when
 * `given_inline`, else the registered placement `id` (NULL: neither is
 * set), from the cache or, on a miss, the catalog (registered by any
 * daemon of the fleet). INVALID_ARGUMENT for neither or a bad placement,
 * NOT_FOUND for an id never registered. `done` runs exactly once, maybe
 * before this returns. */
void reshard__target_resolve(reshard__target *target, reshard_planner *planner,
                             reshard_call *call, bool given_inline,
                             const Reshard__V1__Placement *pb, const char *id,
                             reshard__target_done *done, void *data);
/* Targets the shared placement `shared` (takes the reference). */
void reshard__target_take(reshard__target *target,
                          reshard_shared_placement *shared);

/* The shared placement `id` (normalized): the cached one, else a new one,
 * which the cache keeps when it fits. The caller owns the reference; NULL
 * with `err` when memory runs out. */
reshard_shared_placement *
reshard__planner_cache_placement(reshard_planner *planner,
                                 const reshard_placement *normalized,
                                 const char *id, reshard_error *err);
/* A placement's catalog record: its canonical protobuf, in `arena`. */
uint8_t *reshard__planner_placement_record(const reshard_placement *placement,
                                           reshard_arena *arena,
                                           size_t *length);
/* A placement message from a catalog record, normalized and cached; when
 * `expected_id` is non-NULL it must be that placement. NULL with `err`
 * (INTERNAL, prefixed with `what`) otherwise. */
reshard_shared_placement *reshard__planner_placement_from_pb(
    reshard_planner *planner, const Reshard__V1__Placement *pb,
    const char *expected_id, const char *what, reshard_error *err);
/* Drops the reference the target holds, if any. */
void reshard__target_release(reshard__target *target);

/* The data-parallel rank a plan reads or writes as: the request's, else
 * the placement's lowest (SPEC §2.2); the join templates are cached under
 * it. */
uint64_t reshard__target_dp_rank(const reshard__target *target,
                                 bool has_dp_rank, uint64_t dp_rank);

/* ---- Memory pools (memory.c) ---- */

/* A plan's memory given as a pool and a block table (SPEC §1.5a). */
typedef struct reshard__pooled {
  reshard_shared_pool *ref; /* held when named by memory id */
  /* What the planner reads of the memory besides the pool and the
   * table: the participant, the endpoint and the pool's regions, in its
   * order. */
  reshard_binding binding;
  reshard_pooled_memory memory; /* the pool and the request's table */
  bool ready;
  uint64_t values; /* bound values, as reshard_binding_values counts them */
} reshard__pooled;

/* A placement or memory id's form: "sha256:" and 64 lowercase hex
 * digits (INVALID_ARGUMENT naming `path`). Anything else names no record
 * and is refused before it reaches the catalog as a key. */
reshard_status reshard__planner_check_id(const char *id, const char *path,
                                         reshard_error *err);

/* A catalog record of memory pool `id` (RegisterMemory's), decoded,
 * validated and checked to be that pool, its placement cached; the caller
 * owns the reference. NULL with `err` (INTERNAL) otherwise. */
reshard_shared_pool *reshard__planner_pool_from_record(reshard_planner *planner,
                                                       const char *id,
                                                       const uint8_t *data,
                                                       size_t length,
                                                       reshard_error *err);

/* Whether a cached pool may be used without reading its record again:
 * always in front of a catalog of this machine only, else for a second
 * after the record was last read (a ForgetMemory through another daemon
 * of the fleet reaches this one's plans within that). */
bool reshard__planner_pool_current(const reshard_planner *planner,
                                   const reshard_shared_pool *pool);

/* Runs once the memory is resolved: `err` NULL when it is. */
typedef void reshard__pooled_done(void *data, const reshard_error *err);

/* What can be checked of a PooledMemory before anything is resolved:
 * exactly one of memory_id and inline_pool. Any thread. */
reshard_status reshard__pooled_check(const Reshard__V1__PooledMemory *pb,
                                     reshard_error *err);

/* Resolves `pb` for a plan of `target` over tokens [0, token_span): the
 * inline pool, validated now, or the registered pool, from the cache or
 * the catalog, which must have been registered for the target placement;
 * then binds its block table under `limits` into `out` (its memory in the
 * call's arena). `done` runs exactly once, maybe before this returns. */
void reshard__pooled_resolve(reshard_planner *planner, reshard_call *call,
                             const Reshard__V1__PooledMemory *pb,
                             const reshard__target *target, uint64_t token_span,
                             const reshard_limits *limits, reshard__pooled *out,
                             reshard__pooled_done *done, void *data);

/* The field naming the participant of a plan whose memory is `pb` (NULL:
 * a binding), for the planner's messages. */
const char *
reshard__pooled_participant_field(const Reshard__V1__PooledMemory *pb);

/* Drops what `pooled` holds; safe on one never resolved. */
void reshard__pooled_release(reshard__pooled *pooled);

/* ---- Planning (planner_service.c), shared by PlanLoad and PlanStore ---- */

/* Whether planning may start: UNAVAILABLE once the call is cancelled,
 * DEADLINE_EXCEEDED once its deadline passed. Any thread. */
reshard_status reshard__planner_check_call(reshard_call *call,
                                           reshard_error *err);

/* The cached join template of `participant` (may be NULL) reading
 * `manifest` in `target` at `dp_rank`, into *join (a reference, or NULL on
 * a miss). False when no template can exist: the participant has no part
 * in the placement or the layout's descriptor is not the placement's. */
bool reshard__planner_find_join(reshard_planner *planner,
                                const reshard_shared_manifest *manifest,
                                const reshard__target *target, uint64_t dp_rank,
                                const char *participant,
                                reshard_shared_join **join);

/* Keeps the template the planner built (takes `built`) under the key
 * reshard__planner_find_join reads. */
void reshard__planner_keep_join(reshard_planner *planner, reshard_join *built,
                                const char *layout_id,
                                const reshard__target *target, uint64_t dp_rank,
                                const char *participant);

/* With `varint_columns`, memory for the response whose columns the
 * planner writes into *column_arena (its arena) to send them from there;
 * else, or when out of memory, NULL and *column_arena NULL, and the
 * response is copied whole. The caller releases it once the response is
 * packed. Any thread. */
reshard_response_memory *
reshard__planner_column_memory(reshard_call *call, bool varint_columns,
                               reshard_arena **column_arena);

/* Whether a plan, made, may be answered: DEADLINE_EXCEEDED once the
 * call's deadline passed while it planned (the caller discards the plan).
 * Any thread. */
reshard_status reshard__planner_check_planned(reshard_call *call,
                                              reshard_error *err);

/* Packs a measured response (`batches`, `size`) into the call's send
 * buffer. With `memory`, where the planner wrote the varint columns, the
 * long columns are sent from there (`write` is the response's
 * reshard_response_pieces_fn); without, `write_whole` copies it all.
 * `measured` is the measuring's status: when it or the packing failed
 * (out of memory, either), RESOURCE_EXHAUSTED with `err` set. Any
 * thread, as reshard_call_pack. */
reshard_status reshard__planner_pack_response(
    reshard_call *call, reshard_status measured,
    reshard_response_memory *memory, const reshard_range_batches *batches,
    size_t size, void *response, reshard_response_pieces_fn *write,
    size_t (*write_whole)(void *response, uint8_t *out), reshard_error *err);

/* Plans `call`'s request: `fn` runs on the loop now when the binding
 * covers at most the planner's inline_max_values values, or at most
 * RESHARD__PLANNER_ALONE_MAX_VALUES while the call is alone
 * (reshard_call_alone; not when inline_max_values is 0), else on the
 * planner's work pool; then `after` runs on the loop. Non-zero (a negative
 * errno) when it cannot be queued: then nothing runs. */
int reshard__planner_run(reshard_planner *planner, reshard_call *call,
                         reshard_work *work, uint64_t binding_values,
                         reshard_work_fn fn, reshard_after_work_fn after);

/* Decodes `call`'s request: `fn` (the decoding) and then `after` on the
 * loop now, or, for a `large` request, `fn` on the work pool and `after`
 * back on the loop; a large request of at most
 * RESHARD__PLANNER_ALONE_MAX_REQUEST_BYTES is decoded on the loop while
 * the call is alone, as reshard__planner_run plans.
 * Non-zero (a negative errno) when it cannot be queued: then nothing
 * runs. */
int reshard__planner_decode(reshard_planner *planner, reshard_call *call,
                            reshard_work *work, bool large, reshard_work_fn fn,
                            reshard_after_work_fn after);

/* Starts a plan's call whose request is still raw bytes: `large` when
 * the request is at least RESHARD__PLANNER_LARGE_REQUEST_BYTES long, and
 * then it holds one of the planner's large places until it calls
 * reshard__planner_large_done (also when it fails). */
typedef void reshard__planner_start(reshard_planner *planner,
                                    reshard_call *call, bool large);

/* A large request is decoded only when fewer than one per core
 * (planner->max_large) others are in hand: decoded, one S5 request (a
 * paged binding of 16 384 ranges) takes about 4 MiB against its 0.6 MiB of
 * wire bytes, and 64 of them decoded at once held 7 MiB per call in
 * flight (docs/performance.md). Planning is CPU-bound, so more at once
 * than there are cores only holds memory. Small requests never wait
 * behind large ones. */
enum { RESHARD__PLANNER_LARGE_REQUEST_BYTES = 64 * 1024 };

/* What a lone call may still do on the loop (reshard__planner_run,
 * _decode): a call that arrives meanwhile waits for it. A plan has at
 * most one copy per value, so 4M values bound it to about 10 ms at the
 * planner's 2-3 ns a copy; S1-S5's plans bind 0.12M-2M values and take
 * 0.1-2.3 ms, S3's 615 KB binding 0.8 ms to decode. */
enum {
  RESHARD__PLANNER_ALONE_MAX_VALUES = 1 << 22,
  RESHARD__PLANNER_ALONE_MAX_REQUEST_BYTES = 1024 * 1024,
};

/* Runs `start` on the call now when its request is small or a large place
 * is free, else when one is given back; loads and stores share the
 * places, in arrival order. Loop thread. */
void reshard__planner_admit(reshard_planner *planner, reshard_call *call,
                            reshard__planner_start *start);

/* A large call finished (answered or failed): let the next one in. */
void reshard__planner_large_done(reshard_planner *planner);

/* ---- The handlers ---- */

reshard__planner_rpc reshard__handle_publish_manifest; /* manifests.c */
reshard__planner_rpc reshard__handle_get_manifest;
reshard__planner_rpc reshard__handle_register_pages; /* pages.c */
reshard__planner_rpc reshard__handle_forget_pages;
reshard__planner_rpc reshard__handle_register_placement; /* placements.c */
reshard__planner_rpc reshard__handle_plan_upload;
reshard__planner_rpc reshard__handle_register_memory; /* memory.c */
reshard__planner_rpc reshard__handle_forget_memory;
/* plan_load.c and plan_store.c: they decode their requests themselves;
 * `data` is the planner. */
void reshard__handle_plan_load(reshard_call *call, void *data);
void reshard__handle_plan_store(reshard_call *call, void *data);
void reshard__handle_plan_transfer(reshard_call *call, void *data);

#endif
