/* The wire layer: conversions between protobuf-c messages of
 * reshard.v1 (proto/reshard/v1/planner.proto) and the library's domain
 * types. Everything it allocates comes from the caller's arena; decoded
 * domain structs point into the decoded message (same arena), so both die
 * together. Decoding checks structure only (required messages present, enums
 * set and known); the library's normalize/validate functions check the
 * rules. Messages carry the field path, e.g.
 * "binding.ranges[3].component: must be KEY or VALUE". */
#ifndef RESHARD_WIRE_H
#define RESHARD_WIRE_H

#include <protobuf-c/protobuf-c.h>

#include "reshard/arena.h"
#include "reshard/binding.h"
#include "reshard/descriptor.h"
#include "reshard/error.h"
#include "reshard/layout.h"
#include "reshard/limits.h"
#include "reshard/manifest.h"
#include "reshard/placement.h"
#include "reshard/plan.h"
#include "reshard/pool.h"
#include "reshard/store.h"
#include "reshard/upload.h"
#include "reshard/v1/planner.pb-c.h"

/* A protobuf-c allocator drawing from `arena`; its free is a no-op, so
 * messages it decoded are never passed to *_free_unpacked. */
ProtobufCAllocator reshard_wire_allocator(reshard_arena *arena);

/* Decodes `length` bytes as a message of `descriptor` into `arena` through
 * reshard_decode (decode.h), under the budget of a request that size and
 * the process's decode caps. On malformed input returns NULL with
 * INVALID_ARGUMENT naming the message type; RESOURCE_EXHAUSTED naming the
 * limit or budget a request would pass. Every RPC decodes through this. */
ProtobufCMessage *reshard_wire_unpack(const ProtobufCMessageDescriptor *type,
                                      const uint8_t *data, size_t length,
                                      reshard_arena *arena, reshard_error *err);

/* Encodes `message` into the arena; NULL when memory runs out. */
uint8_t *reshard_wire_pack(const ProtobufCMessage *message,
                           reshard_arena *arena, size_t *length);

/* Message → domain. `path` prefixes every error message; a NULL message is
 * reported as "<path>: required". */
reshard_status
reshard_wire_descriptor_from_pb(const Reshard__V1__Descriptor *pb,
                                const char *path, reshard_arena *arena,
                                reshard_descriptor *out, reshard_error *err);
reshard_status reshard_wire_format_from_pb(Reshard__V1__StoreFormat pb,
                                           const char *path,
                                           reshard_format *out,
                                           reshard_error *err);
reshard_status reshard_wire_layout_from_pb(const Reshard__V1__StoreLayout *pb,
                                           const char *path,
                                           reshard_arena *arena,
                                           reshard_layout *out,
                                           reshard_error *err);
reshard_status
reshard_wire_manifest_from_pb(const Reshard__V1__StoreManifest *pb,
                              const char *path, reshard_arena *arena,
                              reshard_manifest *out, reshard_error *err);
reshard_status reshard_wire_placement_from_pb(const Reshard__V1__Placement *pb,
                                              const char *path,
                                              reshard_arena *arena,
                                              reshard_placement *out,
                                              reshard_error *err);
/* The component of binding range `index` under `path` ("binding"):
 * KEY or VALUE, else INVALID_ARGUMENT naming "<path>.ranges[index]". */
reshard_status reshard_wire_component_from_pb(int32_t pb, const char *path,
                                              size_t index,
                                              reshard_component *out,
                                              reshard_error *err);
reshard_status
reshard_wire_binding_from_pb(const Reshard__V1__RuntimeBinding *pb,
                             const char *path, reshard_arena *arena,
                             reshard_binding *out, reshard_error *err);
/* A memory pool under `path` ("pool", "pooled.inline_pool"): structure
 * only; reshard_pool_validate checks the rules. */
reshard_status reshard_wire_pool_from_pb(const Reshard__V1__MemoryPool *pb,
                                         const char *path, reshard_arena *arena,
                                         reshard_pool *out, reshard_error *err);
/* NULL reads as all zeros ("server defaults"). */
void reshard_wire_limits_from_pb(const Reshard__V1__Limits *pb,
                                 reshard_limits *out);

/* Domain → message, allocated in `arena`; NULL when memory runs out.
 * Strings are shared with the domain struct, not copied. */
Reshard__V1__Descriptor *
reshard_wire_descriptor_to_pb(const reshard_descriptor *descriptor,
                              reshard_arena *arena);
Reshard__V1__StoreLayout *
reshard_wire_layout_to_pb(const reshard_layout *layout, reshard_arena *arena);
Reshard__V1__StoreManifest *
reshard_wire_manifest_to_pb(const reshard_manifest *manifest,
                            reshard_arena *arena);
Reshard__V1__Placement *
reshard_wire_placement_to_pb(const reshard_placement *placement,
                             reshard_arena *arena);
/* Regions as messages (their strings shared), in the arena. */
Reshard__V1__Region **reshard_wire_regions_to_pb(const reshard_region *regions,
                                                 size_t count,
                                                 reshard_arena *arena);
Reshard__V1__MemoryPool *reshard_wire_pool_to_pb(const reshard_pool *pool,
                                                 reshard_arena *arena);
Reshard__V1__RuntimeBinding *
reshard_wire_binding_to_pb(const reshard_binding *binding,
                           reshard_arena *arena);

/* What a PlanLoad response names besides the plan itself. */
typedef struct reshard_wire_plan_names {
  const char *const *page_keys;       /* the request's page keys */
  const char *const *manifest_keys;   /* per plan source */
  const reshard_plan_source *sources; /* layout ids per source */
  const reshard_binding *binding;     /* region ids */
  const char *placement_id;
} reshard_wire_plan_names;

/* Builds the PlanLoad response: one PageSource per hit page, the binding's
 * region ids, one RangeBatch per plan batch as packed columns (one entry
 * per copy, or per run when the plan carries runs: plan->runs.batch_first
 * non-NULL) and the stats. The daemon sends the same bytes without this
 * message (plan_response.c encodes them straight from the plan); this is
 * the readable definition that encoder is tested against. */
Reshard__V1__PlanLoadResponse *
reshard_wire_plan_to_pb(const reshard_load_plan *plan,
                        const reshard_wire_plan_names *names,
                        reshard_arena *arena);

/* Builds the PlanStore response: the Parts written, the binding's region
 * ids and the copies (region to Part) in the RangeBatch columns of a load,
 * built by reshard_wire_plan_to_pb so both directions encode alike. As for
 * loads, the daemon sends these bytes without the message
 * (reshard_store_response_write); this is the definition that encoder is
 * tested against. */
Reshard__V1__PlanStoreResponse *
reshard_wire_store_plan_to_pb(const reshard_store_plan *plan,
                              const reshard_binding *binding,
                              const char *layout_id, reshard_arena *arena);

#endif
