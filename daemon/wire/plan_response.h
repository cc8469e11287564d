/* Encodes the PlanLoadResponse and the PlanStoreResponse straight from a
 * plan into wire bytes, without building the protobuf-c message first:
 * their batches as range_batches.h writes them, the other fields around
 * them. The bytes are exactly what protobuf-c packs for
 * reshard_wire_plan_to_pb's message and for reshard_wire_store_plan_to_pb's
 * (tests/daemon/wire/test_plan_response.c proves it on every SPEC §6
 * scenario, with and without runs). PlanStats, which every plan response
 * carries, is written here too (transfer_response.h writes the third).
 *
 * Encoding is measure, then write; measuring checks every size it adds up:
 * a response that would pass SIZE_MAX bytes is RESHARD_RESOURCE_EXHAUSTED,
 * never a wrapped size. */
#ifndef RESHARD_PLAN_RESPONSE_H
#define RESHARD_PLAN_RESPONSE_H

#include <stddef.h>
#include <stdint.h>

#include "reshard/arena.h"
#include "reshard/plan.h"
#include "reshard/store.h"
#include "wire/range_batches.h"
#include "wire/wire.h"

/* The PlanStats message body: `runs` is left out when 0, as proto3 does
 * (at most 44 bytes). */
size_t reshard_plan_stats_size(uint64_t operations, uint64_t bytes,
                               uint64_t copies_before_coalescing,
                               uint64_t runs);
/* Writes PlanStats as field `field` (1..15), tag and length included. */
uint8_t *reshard_plan_stats_write(uint8_t *out, unsigned field,
                                  uint64_t operations, uint64_t bytes,
                                  uint64_t copies_before_coalescing,
                                  uint64_t runs);

/* A PlanLoadResponse, measured and ready to write. With runs requested
 * (plan->runs.batch_first non-NULL) the batches carry runs. */
typedef struct reshard_plan_response {
  const reshard_load_plan *plan;
  const reshard_wire_plan_names *names;
  reshard_range_batches batches;
  size_t *page_key_bytes; /* strlen of each hit page's key, as measured */
  size_t size;            /* the whole encoded response */
} reshard_plan_response;

/* Measures the response for `plan` and `names`; both must outlive `out`.
 * RESHARD_RESOURCE_EXHAUSTED when the arena cannot grow. */
reshard_status
reshard_plan_response_measure(const reshard_load_plan *plan,
                              const reshard_wire_plan_names *names,
                              reshard_arena *arena, reshard_plan_response *out);

/* Writes the response into `out`, which has room for response->size
 * bytes; returns the bytes written (response->size). */
size_t reshard_plan_response_write(const reshard_plan_response *response,
                                   uint8_t *out);

/* The same response as pieces (reshard_response_pieces_fn). */
reshard_response_pieces_fn reshard_plan_response_write_pieces;

/* A PlanStoreResponse, measured and ready to write. With runs requested
 * (plan->runs.batch_first non-NULL) the batches carry runs. */
typedef struct reshard_store_response {
  const reshard_store_plan *plan;
  const reshard_binding *binding; /* its region ids name the regions */
  const char *layout_id;
  reshard_range_batches batches;
  size_t parts_size; /* the packed part_indexes payload */
  size_t size;       /* the whole encoded response */
} reshard_store_response;

/* Measures the response for `plan`; `plan`, `binding` and `layout_id` must
 * outlive `out`. The bytes are exactly what protobuf-c packs for
 * reshard_wire_store_plan_to_pb's message. RESHARD_RESOURCE_EXHAUSTED
 * when the arena cannot grow. */
reshard_status reshard_store_response_measure(const reshard_store_plan *plan,
                                              const reshard_binding *binding,
                                              const char *layout_id,
                                              reshard_arena *arena,
                                              reshard_store_response *out);

/* Writes the response into `out`, which has room for response->size
 * bytes; returns the bytes written (response->size). */
size_t reshard_store_response_write(const reshard_store_response *response,
                                    uint8_t *out);

/* The same response as pieces (reshard_response_pieces_fn). */
reshard_response_pieces_fn reshard_store_response_write_pieces;

#endif
