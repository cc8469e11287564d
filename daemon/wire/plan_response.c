#include "wire/plan_response.h"

#include <stdbool.h>
#include <stddef.h>
#include <string.h>

#include "wire/wire_writer.h"

/* ---- PlanStats ---- */

size_t reshard_plan_stats_size(uint64_t operations, uint64_t bytes,
                               uint64_t copies_before_coalescing,
                               uint64_t runs) {
  return reshard_wire_scalar_size(operations) +
         reshard_wire_scalar_size(bytes) +
         reshard_wire_scalar_size(copies_before_coalescing) +
         reshard_wire_scalar_size(runs);
}

uint8_t *reshard_plan_stats_write(uint8_t *out, unsigned field,
                                  uint64_t operations, uint64_t bytes,
                                  uint64_t copies_before_coalescing,
                                  uint64_t runs) {
  out = reshard_wire_put_tag(out, field, RESHARD_WIRE_DELIMITED);
  out = reshard_varint_put(
      out, reshard_plan_stats_size(operations, bytes, copies_before_coalescing,
                                   runs));
  out = reshard_wire_put_scalar(out, 1, operations);
  out = reshard_wire_put_scalar(out, 2, bytes);
  out = reshard_wire_put_scalar(out, 3, copies_before_coalescing);
  return reshard_wire_put_scalar(out, 4, runs);
}

/* ---- What both responses share: their batches ---- */

/* A plan's batches, measured from what it carries: its runs when it has
 * them, else its varint columns when it has them, else its copies. */
static reshard_status
measure_plan_batches(const reshard_copy *copies, const reshard_batch *batches,
                     size_t batch_count, const reshard_runs *runs,
                     const reshard_varint_batches *columns,
                     reshard_arena *arena, reshard_range_batches *out) {
  return reshard_range_batches_measure(
      copies, batches, batch_count, runs->batch_first ? runs : NULL,
      columns->columns != NULL ? columns : NULL, NULL, arena, out);
}

/* ---- PlanLoadResponse ---- */

/* A PageSource is the page's key, then its source's manifest key and
 * layout id: the same bytes for every page of one source, and pages of
 * one writer come one source after another (S5: 256 pages, one source).
 * So the key's length is measured once per page and kept, the source's
 * two fields once per stretch of pages of one source, and the write
 * copies those fields from where it wrote them for the stretch's first
 * page. Measuring every string three times and writing each with a
 * reshard_wire_put_string of its own had been 152 K of an S5 pooled call's 1.43
 * M instructions; this leaves 65 K (callgrind, docs/performance.md, Round 42).
 */

/* The source's two fields' bytes, checked. */
static bool source_fields_size(const reshard_wire_plan_names *names,
                               size_t source, size_t *size) {
  *size = 0;
  return reshard_wire_add_string(size, names->manifest_keys[source], 0) &&
         reshard_wire_add_string(size, names->sources[source].layout_id, 0);
}

/* Adds the PageSources to *size, keeping each key's length in
 * out->page_key_bytes (in `arena`). */
static bool add_pages(size_t *size, reshard_plan_response *out,
                      reshard_arena *arena) {
  const reshard_load_plan *plan = out->plan;
  const reshard_wire_plan_names *names = out->names;
  size_t pages = plan->hit_pages;
  out->page_key_bytes = RESHARD_ARENA_NEW(arena, size_t, pages + 1);
  if (out->page_key_bytes == NULL) {
    return false;
  }
  size_t source = SIZE_MAX, fields = 0;
  for (size_t p = 0; p < pages; p++) {
    size_t key_length = strlen(reshard_wire_text(names->page_keys[p]));
    out->page_key_bytes[p] = key_length;
    if (plan->page_source[p] != source) {
      source = plan->page_source[p];
      if (!source_fields_size(names, source, &fields)) {
        return false;
      }
    }
    size_t body = 0;
    if ((key_length > 0 && !reshard_wire_add_nested(&body, key_length)) ||
        !reshard_wire_add_size(&body, fields) ||
        !reshard_wire_add_nested(size, body)) {
      return false;
    }
  }
  return true;
}

/* Writes the PageSources add_pages measured. */
static uint8_t *put_pages(const reshard_plan_response *response, uint8_t *out) {
  const reshard_load_plan *plan = response->plan;
  const reshard_wire_plan_names *names = response->names;
  size_t source = SIZE_MAX, fields = 0;
  const uint8_t *written = NULL; /* the source's fields, as last written */
  for (size_t p = 0; p < plan->hit_pages; p++) {
    if (plan->page_source[p] != source) {
      source = plan->page_source[p];
      (void)source_fields_size(names, source, &fields); /* measured */
      written = NULL;
    }
    size_t key_length = response->page_key_bytes[p];
    out = reshard_wire_put_tag(out, 2, RESHARD_WIRE_DELIMITED);
    out = reshard_varint_put(
        out, (key_length ? reshard_wire_nested_size(key_length) : 0) + fields);
    out = reshard_wire_put_text(out, 1, names->page_keys[p], key_length, 0);
    if (written != NULL) {
      memcpy(out, written, fields);
      out += fields;
      continue;
    }
    written = out;
    out = reshard_wire_put_string(out, 2, names->manifest_keys[source], 0);
    out = reshard_wire_put_string(out, 3, names->sources[source].layout_id, 0);
  }
  return out;
}

static size_t stats_body(const reshard_load_plan *plan) {
  return reshard_plan_stats_size(plan->operations, plan->bytes,
                                 plan->copies_before_coalescing,
                                 plan->runs.run_count);
}

reshard_status reshard_plan_response_measure(
    const reshard_load_plan *plan, const reshard_wire_plan_names *names,
    reshard_arena *arena, reshard_plan_response *out) {
  *out = (reshard_plan_response){.plan = plan, .names = names};
  reshard_status status =
      measure_plan_batches(plan->copies, plan->batches, plan->batch_count,
                           &plan->runs, &plan->columns, arena, &out->batches);
  if (status) {
    return status;
  }
  size_t size =
      reshard_wire_scalar_size(reshard_wire_clamp_u32(plan->hit_pages));
  if (!add_pages(&size, out, arena) ||
      !reshard_wire_add_region_ids(&size, names->binding) ||
      !reshard_wire_add_size(&size, out->batches.size) ||
      !reshard_wire_add_nested(&size, stats_body(plan)) ||
      !reshard_wire_add_string(&size, names->placement_id, 0)) {
    return RESHARD_RESOURCE_EXHAUSTED;
  }
  out->size = size;
  return RESHARD_OK;
}

static size_t write_response(const reshard_plan_response *response,
                             uint8_t *out, reshard_piece_sink *sink) {
  const reshard_load_plan *plan = response->plan;
  const reshard_wire_plan_names *names = response->names;
  uint8_t *start = out;
  out =
      reshard_wire_put_scalar(out, 1, reshard_wire_clamp_u32(plan->hit_pages));
  out = put_pages(response, out);
  out = reshard_wire_put_region_ids(out, 3, names->binding);
  out = reshard_range_batches_write(&response->batches, 4, out, sink);
  out = reshard_plan_stats_write(out, 5, plan->operations, plan->bytes,
                                 plan->copies_before_coalescing,
                                 plan->runs.run_count);
  out = reshard_wire_put_string(out, 6, names->placement_id, 0);
  if (sink != NULL) {
    reshard_piece_sink_end(sink, out);
  }
  return (size_t)(out - start);
}

size_t reshard_plan_response_write(const reshard_plan_response *response,
                                   uint8_t *out) {
  return write_response(response, out, NULL);
}

size_t reshard_plan_response_write_pieces(const void *response,
                                          size_t min_reference, uint8_t *frame,
                                          reshard_response_piece *pieces) {
  reshard_piece_sink sink = {pieces, 0, frame, min_reference};
  write_response(response, frame, &sink);
  return sink.count;
}

/* ---- PlanStoreResponse ---- */

reshard_status reshard_store_response_measure(const reshard_store_plan *plan,
                                              const reshard_binding *binding,
                                              const char *layout_id,
                                              reshard_arena *arena,
                                              reshard_store_response *out) {
  *out = (reshard_store_response){
      .plan = plan, .binding = binding, .layout_id = layout_id};
  reshard_status status =
      measure_plan_batches(plan->copies, plan->batches, plan->batch_count,
                           &plan->runs, &plan->columns, arena, &out->batches);
  if (status) {
    return status;
  }
  /* At most 5 bytes per index in memory: the sum cannot wrap. */
  for (size_t i = 0; i < plan->part_count; i++) {
    out->parts_size +=
        reshard_varint_length(reshard_wire_clamp_u32(plan->part_indexes[i]));
  }
  /* A packed repeated field is left out when empty. */
  size_t size = 0;
  if ((plan->part_count && !reshard_wire_add_nested(&size, out->parts_size)) ||
      !reshard_wire_add_region_ids(&size, binding) ||
      !reshard_wire_add_size(&size, out->batches.size) ||
      !reshard_wire_add_nested(
          &size, reshard_plan_stats_size(plan->operations, plan->bytes,
                                         plan->copies_before_coalescing,
                                         plan->runs.run_count)) ||
      !reshard_wire_add_string(&size, layout_id, 0)) {
    return RESHARD_RESOURCE_EXHAUSTED;
  }
  out->size = size;
  return RESHARD_OK;
}

static size_t write_store_response(const reshard_store_response *response,
                                   uint8_t *out, reshard_piece_sink *sink) {
  const reshard_store_plan *plan = response->plan;
  uint8_t *start = out;
  if (plan->part_count) {
    out = reshard_wire_put_tag(out, 1, RESHARD_WIRE_DELIMITED);
    out = reshard_varint_put(out, response->parts_size);
    for (size_t i = 0; i < plan->part_count; i++) {
      out = reshard_varint_put(out,
                               reshard_wire_clamp_u32(plan->part_indexes[i]));
    }
  }
  out = reshard_wire_put_region_ids(out, 2, response->binding);
  out = reshard_range_batches_write(&response->batches, 3, out, sink);
  out = reshard_plan_stats_write(out, 4, plan->operations, plan->bytes,
                                 plan->copies_before_coalescing,
                                 plan->runs.run_count);
  out = reshard_wire_put_string(out, 5, response->layout_id, 0);
  if (sink != NULL) {
    reshard_piece_sink_end(sink, out);
  }
  return (size_t)(out - start);
}

size_t reshard_store_response_write(const reshard_store_response *response,
                                    uint8_t *out) {
  return write_store_response(response, out, NULL);
}

size_t reshard_store_response_write_pieces(const void *response,
                                           size_t min_reference, uint8_t *frame,
                                           reshard_response_piece *pieces) {
  reshard_piece_sink sink = {pieces, 0, frame, min_reference};
  write_store_response(response, frame, &sink);
  return sink.count;
}
