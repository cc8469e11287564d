/* What planner_service.c shares with the service's other RPC files
 * (plan_store_service.c): its environment and the few request helpers
 * every handler needs. Internal to the daemon; runs on the loop. */
#ifndef RESHARD_PLANNER_INTERNAL_H
#define RESHARD_PLANNER_INTERNAL_H

#include <protobuf-c/protobuf-c.h>
#include <stdint.h>
#include <uv.h>

#include "cache.h"
#include "catalog/catalog.h"
#include "metrics.h"
#include "reshard/identity.h"
#include "reshard/limits.h"
#include "reshard/placement.h"
#include "reshard/v1/planner.pb-c.h"
#include "rpc/planner_service.h"
#include "server.h"
#include "shared.h"

/* Borrowed views of the service's state. */
typedef struct reshard__planner_env {
  uv_loop_t *loop;
  reshard_catalog *catalog;
  reshard_cache *cache;
  const reshard_limits *caps;
  uint64_t inline_max_values;
  reshard_metrics *metrics; /* may be NULL */
} reshard__planner_env;

reshard__planner_env reshard__planner_env_of(reshard_planner *planner);

/* The bytes a plan (load or store) may hold, asked from
 * --max-inflight-bytes with reshard_call_reserve before planning starts. */
uint64_t reshard__planner_plan_reservation(uint64_t binding_values,
                                           uint64_t max_operations);

/* Decodes the call's request as `type`; on failure the call is failed and
 * NULL returned. */
void *reshard__planner_decode(reshard_call *call,
                              const ProtobufCMessageDescriptor *type);

/* Checks "kv/{domain}/manifests/{digest}" (INVALID_ARGUMENT naming `path`)
 * and extracts the domain. */
reshard_status
reshard__planner_parse_manifest_key(const char *key, const char *path,
                                    char domain[RESHARD_DIGEST_HEX_LEN + 1],
                                    reshard_error *err);

/* Decodes and normalizes a request's placement into the call's arena;
 * `id` (may be NULL) receives its placement_id. */
reshard_status reshard__planner_decode_placement(
    reshard_call *call, const Reshard__V1__Placement *pb,
    reshard_placement *out, char id[RESHARD_ID_SIZE], reshard_error *err);

/* A catalog record of manifest `key`, decoded, normalized and checked to
 * be that manifest; NULL with `err` (INTERNAL) otherwise. The caller owns
 * the reference. */
reshard_shared_manifest *
reshard__planner_manifest_from_record(reshard_planner *planner, const char *key,
                                      const uint8_t *data, size_t length,
                                      reshard_error *err);

/* Puts a manifest in the cache (the cache takes its own reference). */
void reshard__planner_cache_manifest(reshard_planner *planner,
                                     reshard_shared_manifest *manifest);

/* The PlanStore handler (plan_store_service.c); `data` is the planner. */
void reshard__handle_plan_store(reshard_call *call, void *data);

#endif
