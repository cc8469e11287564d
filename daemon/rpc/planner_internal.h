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

#include "cache.h"
#include "catalog/catalog.h"
#include "inline_cache.h"
#include "metrics.h"
#include "reshard/identity.h"
#include "reshard/limits.h"
#include "reshard/placement.h"
#include "reshard/v1/planner.pb-c.h"
#include "rpc/planner_service.h"
#include "server.h"
#include "shared.h"

struct reshard_planner {
  uv_loop_t *loop;
  reshard_catalog *catalog;
  reshard_cache *cache;
  reshard_limits caps;
  uint64_t inline_max_values;
  bool cache_bindings;      /* a binding cache sits in front of the catalog */
  reshard_metrics *metrics; /* may be NULL */

  reshard_inline_recent recent_bindings; /* inline_cache.h */
  /* Large PlanLoads being decoded or planned, and those waiting their
   * turn as raw bytes (see "Where plans run" in docs/daemon.md). */
  unsigned large_active;
  unsigned max_large;
  bool dequeuing;
  struct queued_load *queue_head, *queue_tail;
};

/* ---- Request helpers (planner_service.c) ---- */

/* Decodes the call's request as `type`; on failure the call is failed and
 * NULL returned. */
void *reshard__planner_decode(reshard_call *call,
                              const ProtobufCMessageDescriptor *type);

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

/* ---- Placements (placements.c) ---- */

/* Decodes and normalizes a request's placement into the call's arena;
 * `id` (may be NULL) receives its placement_id. */
reshard_status reshard__planner_decode_placement(
    reshard_call *call, const Reshard__V1__Placement *pb,
    reshard_placement *out, char id[RESHARD_ID_SIZE], reshard_error *err);

/* ---- The handlers; `data` is the planner ---- */

void reshard__handle_publish_manifest(reshard_call *call, void *data);
void reshard__handle_get_manifest(reshard_call *call, void *data);
void reshard__handle_register_pages(reshard_call *call, void *data);
void reshard__handle_forget_pages(reshard_call *call, void *data);
void reshard__handle_register_placement(reshard_call *call, void *data);
void reshard__handle_plan_upload(reshard_call *call, void *data);
void reshard__handle_plan_load(reshard_call *call,
                               void *data); /* plan_load.c */
void reshard__handle_plan_store(reshard_call *call,
                                void *data); /* plan_store.c */

#endif
