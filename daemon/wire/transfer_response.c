#include "wire/transfer_response.h"

#include <stdbool.h>
#include <stddef.h>
#include <string.h>

#include "wire/plan_response.h"
#include "wire/wire_writer.h"

/* A Region message body: region_id (1), address (2), nbytes (3). */
static bool add_region(size_t *size, const reshard_region *region) {
  size_t body = reshard_wire_scalar_size(region->address) +
                reshard_wire_scalar_size(region->nbytes);
  return reshard_wire_add_string(&body, region->region_id, 0) &&
         reshard_wire_add_nested(size, body);
}

static size_t region_body(const reshard_region *region) {
  return reshard_wire_string_size(region->region_id, 0) +
         reshard_wire_scalar_size(region->address) +
         reshard_wire_scalar_size(region->nbytes);
}

/* The pool source o of the plan reads. */
static const reshard_transfer_pool *
source_pool(const reshard_transfer_response *response, size_t o) {
  return &response->pools[response->plan->sources[o]];
}

/* A TransferSource body: participant_id (1), endpoint (2), memory_id (3),
 * every region of the pool (4), in its order. */
static bool add_source_body(size_t *body, const reshard_transfer_pool *source) {
  const reshard_pool *pool = source->pool;
  if (!reshard_wire_add_string(body, pool->participant_id, 0) ||
      !reshard_wire_add_string(body, pool->endpoint, 0) ||
      !reshard_wire_add_string(body, source->name, 0)) {
    return false;
  }
  for (size_t r = 0; r < pool->region_count; r++) {
    if (!add_region(body, &pool->regions[r])) {
      return false;
    }
  }
  return true;
}

static size_t transfer_stats_body(const reshard_transfer_plan *plan) {
  return reshard_plan_stats_size(plan->operations, plan->bytes,
                                 plan->copies_before_coalescing,
                                 plan->runs.run_count);
}

reshard_status reshard_transfer_response_measure(
    const reshard_transfer_plan *plan, const reshard_transfer_pool *pools,
    const reshard_binding *binding, const char *source_placement_id,
    const char *target_placement_id, const reshard_varint_batches *columns,
    reshard_arena *arena, reshard_transfer_response *out) {
  *out = (reshard_transfer_response){
      .plan = plan,
      .pools = pools,
      .binding = binding,
      .source_placement_id = source_placement_id,
      .target_placement_id = target_placement_id,
      .source_bytes = RESHARD_ARENA_NEW(arena, size_t, plan->source_count + 1),
  };
  if (out->source_bytes == NULL) {
    return RESHARD_RESOURCE_EXHAUSTED;
  }
  const reshard_runs *runs = plan->runs.batch_first ? &plan->runs : NULL;
  reshard_status status = reshard_range_batches_measure(
      plan->copies, plan->batches, plan->batch_count, runs, columns,
      plan->batch_source, arena, &out->batches);
  if (status) {
    return status;
  }
  size_t size = 0;
  for (size_t o = 0; o < plan->source_count; o++) {
    if (!add_source_body(&out->source_bytes[o], source_pool(out, o)) ||
        !reshard_wire_add_nested(&size, out->source_bytes[o])) {
      return RESHARD_RESOURCE_EXHAUSTED;
    }
  }
  if (!reshard_wire_add_region_ids(&size, binding) ||
      !reshard_wire_add_size(&size, out->batches.size) ||
      !reshard_wire_add_nested(&size, transfer_stats_body(plan)) ||
      !reshard_wire_add_string(&size, source_placement_id, 0) ||
      !reshard_wire_add_string(&size, target_placement_id, 0)) {
    return RESHARD_RESOURCE_EXHAUSTED;
  }
  out->size = size;
  return RESHARD_OK;
}

static size_t write_transfer_response(const reshard_transfer_response *response,
                                      uint8_t *out, reshard_piece_sink *sink) {
  const reshard_transfer_plan *plan = response->plan;
  uint8_t *start = out;
  for (size_t o = 0; o < plan->source_count; o++) {
    const reshard_transfer_pool *source = source_pool(response, o);
    const reshard_pool *pool = source->pool;
    out = reshard_wire_put_tag(out, 1, RESHARD_WIRE_DELIMITED);
    out = reshard_varint_put(out, response->source_bytes[o]);
    out = reshard_wire_put_string(out, 1, pool->participant_id, 0);
    out = reshard_wire_put_string(out, 2, pool->endpoint, 0);
    out = reshard_wire_put_string(out, 3, source->name, 0);
    for (size_t r = 0; r < pool->region_count; r++) {
      const reshard_region *region = &pool->regions[r];
      out = reshard_wire_put_tag(out, 4, RESHARD_WIRE_DELIMITED);
      out = reshard_varint_put(out, region_body(region));
      out = reshard_wire_put_string(out, 1, region->region_id, 0);
      out = reshard_wire_put_scalar(out, 2, region->address);
      out = reshard_wire_put_scalar(out, 3, region->nbytes);
    }
  }
  out = reshard_wire_put_region_ids(out, 2, response->binding);
  out = reshard_range_batches_write(&response->batches, 3, out, sink);
  out = reshard_plan_stats_write(out, 4, plan->operations, plan->bytes,
                                 plan->copies_before_coalescing,
                                 plan->runs.run_count);
  out = reshard_wire_put_string(out, 5, response->source_placement_id, 0);
  out = reshard_wire_put_string(out, 6, response->target_placement_id, 0);
  if (sink != NULL) {
    reshard_piece_sink_end(sink, out);
  }
  return (size_t)(out - start);
}

size_t
reshard_transfer_response_write(const reshard_transfer_response *response,
                                uint8_t *out) {
  return write_transfer_response(response, out, NULL);
}

size_t reshard_transfer_response_write_pieces(const void *response,
                                              size_t min_reference,
                                              uint8_t *frame,
                                              reshard_response_piece *pieces) {
  reshard_piece_sink sink = {pieces, 0, frame, min_reference};
  write_transfer_response(response, frame, &sink);
  return sink.count;
}
