/* Store planning (SPEC §2.5). A writer's Part holds exactly the writer's
 * layers and heads (SPEC §2.1), so the join of the layout with the writer's
 * placement part yields that Part's fragments and nothing else: the store
 * plan is the load planner's plan of the writer's own Part with the copies
 * read the other way. This file only decides who writes what and checks
 * the request in the store's terms; the copies come from reshard_plan_load,
 * so both directions share one join, lowering, coalescing and batching. */
#include "reshard/store.h"

#include <string.h>

#include "reshard/arena.h"
#include "reshard/checked.h"

static bool is_writer(const reshard_placement_part *part) {
  return part->replica_ordinal == 0 && part->layer_count > 0;
}

/* Index of the shard holding exactly the part's layers and heads, or
 * SIZE_MAX. Both layer lists are sorted after normalisation. */
static size_t written_shard(const reshard_layout *layout,
                            const reshard_placement_part *part) {
  for (size_t s = 0; s < layout->shard_count; s++) {
    const reshard_shard *shard = &layout->shards[s];
    if (shard->head_start == part->head_start &&
        shard->head_count == part->head_count &&
        shard->layer_count == part->layer_count &&
        memcmp(shard->layer_ids, part->layer_ids,
               part->layer_count * sizeof *part->layer_ids) == 0) {
      return s;
    }
  }
  return SIZE_MAX;
}

/* The field that names the memory's participant, for messages. */
static const char *participant_field(const reshard_store_request *request) {
  return request->participant_field != NULL ? request->participant_field
                                            : "binding.participant_id";
}

static reshard_status check_request(const reshard_store_request *request,
                                    const reshard_placement_part **out,
                                    reshard_error *err) {
  const reshard_placement *placement = request->placement;
  if (request->page_count == 0) {
    return reshard_error_set(err, RESHARD_INVALID_ARGUMENT,
                             "page_count: must be at least 1");
  }
  if (request->page_count > request->limits.max_page_keys) {
    return reshard_error_set(err, RESHARD_RESOURCE_EXHAUSTED,
                             "page_count: %llu pages exceed the limit "
                             "max_page_keys %llu",
                             (unsigned long long)request->page_count,
                             (unsigned long long)request->limits.max_page_keys);
  }
  uint64_t span;
  if (!reshard_mul(request->page_count, placement->descriptor.page_size,
                   &span)) {
    return reshard_error_set(
        err, RESHARD_INVALID_ARGUMENT,
        "page_count: %llu pages of %llu tokens overflow "
        "64 bits",
        (unsigned long long)request->page_count,
        (unsigned long long)placement->descriptor.page_size);
  }
  const char *participant = request->binding->participant_id;
  if (participant == NULL || participant[0] == '\0') {
    return reshard_error_set(err, RESHARD_INVALID_ARGUMENT,
                             "%s: must not be empty",
                             participant_field(request));
  }
  const reshard_placement_part *part =
      reshard_placement_find_part(placement, participant);
  if (part == NULL) {
    return reshard_error_set(err, RESHARD_INVALID_ARGUMENT,
                             "%s: \"%s\" is not a "
                             "participant of the placement",
                             participant_field(request), participant);
  }
  uint64_t dp = request->has_dp_rank ? request->dp_rank
                                     : reshard_placement_lowest_dp(placement);
  if (request->has_dp_rank && !reshard_placement_has_dp(placement, dp)) {
    return reshard_error_set(err, RESHARD_INVALID_ARGUMENT,
                             "dp_rank: no participant of the placement has dp "
                             "rank %llu",
                             (unsigned long long)dp);
  }
  if (part->rank.dp != dp) {
    return reshard_error_set(err, RESHARD_INVALID_ARGUMENT,
                             "%s: participant \"%s\" has dp rank %llu, not the "
                             "writing dp rank %llu",
                             participant_field(request), participant,
                             (unsigned long long)part->rank.dp,
                             (unsigned long long)dp);
  }
  const char *field;
  if (!reshard_descriptor_equal(&request->layout->descriptor,
                                &placement->descriptor, &field)) {
    return reshard_error_set(err, RESHARD_FAILED_PRECONDITION,
                             "manifest: its descriptor differs from the "
                             "placement's in %s (layout %s)",
                             field, request->layout_id);
  }
  *out = part;
  return RESHARD_OK;
}

/* A participant that writes nothing still sends a binding; it is held to
 * the same rules, so a malformed request is never answered with a plan
 * (a pooled one's table was checked already). */
static reshard_status plan_nothing(const reshard_store_request *request,
                                   const reshard_placement_part *part,
                                   reshard_arena *arena,
                                   reshard_store_plan *out,
                                   reshard_error *err) {
  if (request->pooled == NULL && request->bound_binding == NULL) {
    reshard_bound_binding bound;
    reshard_status status = reshard_binding_validate(
        request->binding, &request->placement->descriptor, part,
        request->page_count, &request->limits, arena, &bound, err);
    if (status) {
      return status;
    }
  }
  out->participant = part;
  return RESHARD_OK;
}

reshard_status reshard_plan_store(const reshard_store_request *request,
                                  reshard_arena *arena, reshard_store_plan *out,
                                  reshard_error *err) {
  memset(out, 0, sizeof *out);
  const reshard_placement_part *part = NULL;
  reshard_status status = check_request(request, &part, err);
  if (status) {
    return status;
  }
  /* The table before the layout, as a binding is checked before it: a
   * bad request is refused for its own fields first. (The load below
   * checks it again, in O(blocks).) */
  if (request->pooled != NULL &&
      (status = reshard_pooled_check(request->pooled, request->page_count,
                                     request->placement->descriptor.page_size,
                                     &request->limits, arena, err))) {
    return status;
  }
  if (!is_writer(part)) {
    return plan_nothing(request, part, arena, out, err);
  }
  size_t shard = written_shard(request->layout, part);
  if (shard == SIZE_MAX) {
    return reshard_error_set(
        err, RESHARD_INVALID_ARGUMENT,
        "manifest: layout %s has no Part holding exactly the %zu layers and "
        "heads [%llu, %llu) of participant \"%s\"; it was not planned from "
        "this placement (SPEC §2.1)",
        request->layout_id, part->layer_count,
        (unsigned long long)part->head_start,
        (unsigned long long)(part->head_start + part->head_count),
        part->participant_id);
  }
  /* Every page is a hit of the one layout. */
  size_t pages = (size_t)request->page_count;
  size_t *page_start = RESHARD_ARENA_ARRAY(arena, size_t, pages + 1);
  size_t *page_sources = RESHARD_ARENA_NEW(arena, size_t, pages);
  out->part_indexes = RESHARD_ARENA_ARRAY(arena, uint64_t, 1);
  if (page_start == NULL || page_sources == NULL || out->part_indexes == NULL) {
    memset(out, 0, sizeof *out);
    return reshard_error_set(err, RESHARD_RESOURCE_EXHAUSTED,
                             "plan: out of memory");
  }
  for (size_t p = 0; p <= pages; p++) {
    page_start[p] = p;
  }
  reshard_plan_source source = {
      .layout = request->layout,
      .layout_id = request->layout_id,
      .join = request->join,
  };
  reshard_load_request load = {
      .placement = request->placement,
      .has_dp_rank = true,
      .dp_rank = part->rank.dp,
      .binding = request->binding,
      .bound_binding = request->bound_binding,
      .pooled = request->pooled,
      .participant_field = request->participant_field,
      .page_count = request->page_count,
      .sources = &source,
      .source_count = 1,
      .page_source_start = page_start,
      .page_sources = page_sources,
      .limits = request->limits,
      .runs = request->runs,
      .varint_columns = request->varint_columns,
      .column_arena = request->column_arena,
      .omit_copies = request->omit_copies,
      .should_stop = request->should_stop,
      .should_stop_context = request->should_stop_context,
  };
  reshard_load_plan plan;
  if ((status = reshard_plan_load(&load, arena, &plan, err))) {
    memset(out, 0, sizeof *out);
    return status;
  }
  out->part_indexes[0] = shard;
  out->part_count = 1;
  out->copies = plan.copies;
  out->copy_count = plan.copy_count;
  out->batches = plan.batches;
  out->batch_count = plan.batch_count;
  out->operations = plan.operations;
  out->bytes = plan.bytes;
  out->copies_before_coalescing = plan.copies_before_coalescing;
  out->copies_after_coalescing = plan.copies_after_coalescing;
  out->runs = plan.runs;
  out->columns = plan.columns;
  out->built_join = plan.built_joins[0];
  out->participant = part;
  return RESHARD_OK;
}
