/* Source selection, pass 1 of load planning (SPEC §2.2): which layout
 * serves each page of the hit prefix, and what lowering the prefix will
 * cost, counted before any copy is materialised. Among a page's candidates
 * of the target's descriptor, the caller's first preference wins, else the
 * one whose copies of that page coalesce to the fewest (a trial lowering in
 * scratch this file owns). */
#include <stdlib.h>
#include <string.h>

#include "plan/plan_internal.h"
#include "reshard/checked.h"
#include "reshard/descriptor.h"

static reshard_status source_join(reshard__planner *plan, size_t source,
                                  const reshard_join **out) {
  if (plan->joins[source] == NULL) {
    const reshard_plan_source *candidate = &plan->request->sources[source];
    reshard_join *join =
        reshard_join_build(candidate->layout, plan->part, plan->err);
    if (join == NULL) {
      return plan->err ? plan->err->code : RESHARD_RESOURCE_EXHAUSTED;
    }
    plan->built[source] = join;
    plan->joins[source] = join;
  }
  *out = plan->joins[source];
  return RESHARD_OK;
}

static reshard_status grow_trial(reshard__planner *plan, size_t need) {
  if (need <= plan->trial_capacity) {
    return RESHARD_OK;
  }
  free(plan->trial_copies);
  free(plan->trial_out);
  free(plan->trial_keys);
  free(plan->trial_spare);
  plan->trial_copies = malloc(need * sizeof(reshard_copy));
  plan->trial_out = malloc(need * sizeof(reshard_copy));
  plan->trial_keys = malloc(need * sizeof(reshard__keyed));
  plan->trial_spare = malloc(need * sizeof(reshard__keyed));
  plan->trial_capacity = need;
  if (!plan->trial_copies || !plan->trial_out || !plan->trial_keys ||
      !plan->trial_spare) {
    plan->trial_capacity = 0;
    return reshard__plan_no_memory(plan);
  }
  return RESHARD_OK;
}

/* Copies after coalescing of page `page` from `source`: the cost by which
 * candidate layouts are compared. */
static reshard_status trial_cost(reshard__planner *plan, size_t source,
                                 uint64_t page, uint64_t *out) {
  const reshard_join *join = NULL;
  reshard_status status = source_join(plan, source, &join);
  if (status) {
    return status;
  }
  reshard__page_lowering lowering =
      reshard__plan_page_lowering(plan, join, page);
  reshard__page_cost cost = reshard__lower_count(&lowering);
  if (cost.copies > plan->request->limits.max_operations) {
    *out = UINT64_MAX;
    return RESHARD_OK;
  }
  if ((status = grow_trial(plan, (size_t)cost.copies + 1))) {
    return status;
  }
  size_t count = reshard__lower_page(&lowering, plan->trial_copies);
  *out = reshard__coalesce_page(plan->trial_copies, count, join->part_base,
                                plan->trial_keys, plan->trial_spare,
                                plan->trial_out);
  return RESHARD_OK;
}

/* Whether source `source`'s descriptor is the target's, compared once per
 * descriptor in a row; `field` as reshard_descriptor_equal's. */
static bool source_matches(reshard__planner *plan, size_t source,
                           const char **field) {
  const reshard_descriptor *descriptor =
      &plan->request->sources[source].layout->descriptor;
  if (descriptor == plan->matching_descriptor) {
    return true;
  }
  if (!reshard_descriptor_equal(descriptor,
                                &plan->request->placement->descriptor, field)) {
    return false;
  }
  plan->matching_descriptor = descriptor;
  return true;
}

/* Picks the source of page `page` among its candidates with the target's
 * descriptor: the caller's first preference, else the fewest operations,
 * ties to the smallest layout id. Sets *chosen to SIZE_MAX when no
 * candidate matches the target's descriptor. */
static reshard_status choose_source(reshard__planner *plan, uint64_t page,
                                    size_t *chosen) {
  const reshard_load_request *request = plan->request;
  size_t first = request->page_source_start[page];
  size_t end = request->page_source_start[page + 1];
  size_t matching = 0;
  size_t only = SIZE_MAX;
  const char *differing = NULL;
  const char *differing_layout = NULL;
  for (size_t i = first; i < end; i++) {
    size_t source = request->page_sources[i];
    const char *field;
    if (source_matches(plan, source, &field)) {
      matching++;
      only = source;
    } else if (differing == NULL) {
      differing = field;
      differing_layout = request->sources[source].layout_id;
    }
  }
  *chosen = SIZE_MAX;
  if (matching == 0) {
    if (page == 0) {
      return reshard_error_set(
          plan->err, RESHARD_FAILED_PRECONDITION,
          "page_keys[0]: bound only to layouts whose descriptor differs from "
          "the target's in %s (layout %s); reshardd converts no bytes",
          differing, differing_layout ? differing_layout : "?");
    }
    return RESHARD_OK;
  }
  if (matching == 1) {
    *chosen = only;
    return RESHARD_OK;
  }
  for (size_t p = 0; p < request->preferred_count; p++) {
    for (size_t i = first; i < end; i++) {
      size_t source = request->page_sources[i];
      if (strcmp(request->sources[source].layout_id,
                 request->preferred_layout_ids[p]) == 0 &&
          source_matches(plan, source, NULL)) {
        *chosen = source;
        return RESHARD_OK;
      }
    }
  }
  uint64_t best_cost = UINT64_MAX;
  for (size_t i = first; i < end; i++) {
    size_t source = request->page_sources[i];
    if (!source_matches(plan, source, NULL)) {
      continue;
    }
    uint64_t cost;
    reshard_status status = trial_cost(plan, source, page, &cost);
    if (status) {
      return status;
    }
    if (*chosen == SIZE_MAX || cost < best_cost ||
        (cost == best_cost &&
         strcmp(request->sources[source].layout_id,
                request->sources[*chosen].layout_id) < 0)) {
      *chosen = source;
      best_cost = cost;
    }
  }
  return RESHARD_OK;
}

/* Whether ranges `now`, open on the page starting at token `now_start`,
 * and `then`, open on the page at `then_start` (pages of `page_size`
 * tokens), meet their pages alike but for where they lie in their
 * regions: the same tokens of the page (each clipped to its page, as
 * lowering clips it), the same heads, the same strides. Then a join
 * entry's block with one lowers to the same copies as with the other but
 * for their region offsets, which differ as the region offsets of the
 * ranges' first tokens on their pages do (range_page_offset, lower.c). */
static inline bool ranges_meet_alike(const reshard_bound_range *now,
                                     uint64_t now_start,
                                     const reshard_bound_range *then,
                                     uint64_t then_start, uint64_t page_size) {
  uint64_t now_first =
      now->token_start > now_start ? now->token_start - now_start : 0;
  uint64_t then_first =
      then->token_start > then_start ? then->token_start - then_start : 0;
  uint64_t now_end = now->token_end - now_start < page_size
                         ? now->token_end - now_start
                         : page_size;
  uint64_t then_end = then->token_end - then_start < page_size
                          ? then->token_end - then_start
                          : page_size;
  return now_first == then_first && now_end == then_end &&
         now->head_start == then->head_start &&
         now->head_end == then->head_end &&
         now->token_stride == then->token_stride &&
         now->head_stride == then->head_stride;
}

/* Over a binding: whether the cursor's open ranges meet the page at
 * `page_start` (of `page_size` tokens) as the counted page's met it, but
 * for where they lie in their regions: each group as many, each in the
 * same region, covering the same tokens of its page and the same heads
 * at the same strides. Lowering counts nothing else, so the page costs
 * what that one did (a paged reader's pages, S5's 62 ranges each,
 * counted once); and every page since was alike too, so this page is
 * alike the page before it (plan->page_alike). */
static bool counted_shape(const reshard__planner *plan, uint64_t page_start,
                          uint64_t page_size) {
  const reshard__range_cursor *cursor = &plan->cursor;
  const reshard_bound_binding *binding = cursor->binding;
  const reshard_bound_range *ranges = binding->ranges;
  uint64_t then_start = plan->counted_start;
  size_t ordinal = 0;
  for (size_t g = 0; g < binding->group_count; g++) {
    size_t open = cursor->open_count[g];
    if (open != plan->counted_open[g]) {
      return false;
    }
    const size_t *now_open = cursor->open + binding->group_start[g];
    for (size_t o = 0; o < open; o++, ordinal++) {
      const reshard_bound_range *now = &ranges[now_open[o]];
      const reshard_bound_range *then = &ranges[plan->counted_ranges[ordinal]];
      if (now->region_index != then->region_index ||
          !ranges_meet_alike(now, page_start, then, then_start, page_size)) {
        return false;
      }
    }
  }
  return true;
}

/* Remembers the cursor's open ranges as the counted page's; when memory
 * for them runs out, forgets the page instead (every page is counted). */
static void remember_counted(reshard__planner *plan, uint64_t page_start) {
  const reshard__range_cursor *cursor = &plan->cursor;
  const reshard_bound_binding *binding = cursor->binding;
  size_t total = 0;
  for (size_t g = 0; g < binding->group_count; g++) {
    total += cursor->open_count[g]; /* at most the binding's ranges */
  }
  if (plan->counted_open == NULL) {
    plan->counted_open =
        RESHARD_ARENA_ARRAY(plan->arena, size_t, binding->group_count + 1);
  }
  if (total > plan->counted_room) {
    size_t room =
        total > 2 * plan->counted_room ? total : 2 * plan->counted_room;
    plan->counted_ranges = RESHARD_ARENA_ARRAY(plan->arena, size_t, room);
    plan->counted_room = plan->counted_ranges != NULL ? room : 0;
  }
  if (plan->counted_open == NULL || plan->counted_ranges == NULL) {
    plan->counted_join = NULL;
    return;
  }
  size_t ordinal = 0;
  for (size_t g = 0; g < binding->group_count; g++) {
    const size_t *open = cursor->open + binding->group_start[g];
    plan->counted_open[g] = cursor->open_count[g];
    for (size_t o = 0; o < cursor->open_count[g]; o++) {
      plan->counted_ranges[ordinal++] = open[o];
    }
  }
  plan->counted_start = page_start;
}

/* Pass 1: the hit prefix, its sources, and what lowering it will cost, all
 * before any copy is materialised. */
/* What lowering the page from `join` costs. Over pooled memory a page
 * that starts where the last counted one did in its block costs what that
 * one did, whatever its blocks: counted once per (source, place); over a
 * binding, a page whose ranges meet it as the last counted page's met
 * that one (counted_shape; without comparing, over page blocks and
 * whole-span ranges, whose every page does). */
static reshard__page_cost page_cost(reshard__planner *plan,
                                    const reshard_join *join, uint64_t page) {
  const reshard_pooled_memory *pooled = plan->cursor.pooled;
  uint64_t page_size = plan->request->placement->descriptor.page_size;
  uint64_t page_start = page * page_size;
  uint64_t phase = 0;
  if (pooled != NULL) {
    phase = page_start % pooled->pool->block_size;
    if (plan->counted_join == join && plan->counted_phase == phase) {
      return plan->counted;
    }
  } else if (plan->counted_join == join &&
             (plan->cursor.binding->page_blocks != 0 ||
              plan->cursor.binding->whole_span ||
              counted_shape(plan, page_start, page_size))) {
    plan->page_alike[page] = true;
    return plan->counted;
  }
  reshard__page_lowering lowering =
      reshard__plan_page_lowering(plan, join, page);
  reshard__page_cost cost = reshard__lower_count(&lowering);
  plan->counted_join = join;
  plan->counted_phase = phase;
  plan->counted = cost;
  if (pooled == NULL) {
    remember_counted(plan, page_start);
  }
  return cost;
}

reshard_status reshard__select_sources(reshard__planner *plan,
                                       reshard_load_plan *out,
                                       uint64_t *largest_page) {
  const reshard_load_request *request = plan->request;
  uint64_t page_size = request->placement->descriptor.page_size;
  uint64_t total_copies = 0, total_bytes = 0;
  *largest_page = 0;
  for (uint64_t page = 0; page < request->page_count; page++) {
    if (request->page_source_start[page] ==
        request->page_source_start[page + 1]) {
      break;
    }
    if (reshard__plan_stop_requested(request)) {
      return reshard__plan_deadline(plan);
    }
    reshard__cursor_advance(&plan->cursor, page * page_size,
                            (page + 1) * page_size);
    size_t source;
    reshard_status status = choose_source(plan, page, &source);
    if (status) {
      return status;
    }
    if (source == SIZE_MAX) {
      break;
    }
    const reshard_join *join = NULL;
    if ((status = source_join(plan, source, &join))) {
      return status;
    }
    reshard__page_cost cost = page_cost(plan, join, page);
    if (!reshard_add(total_copies, cost.copies, &total_copies) ||
        total_copies > request->limits.max_operations) {
      return reshard_error_set(
          plan->err, RESHARD_RESOURCE_EXHAUSTED,
          "plan: more than the limit max_operations %llu copies (before "
          "coalescing) by page %llu",
          (unsigned long long)request->limits.max_operations,
          (unsigned long long)page);
    }
    if (!reshard_add(total_bytes, cost.bytes, &total_bytes) ||
        total_bytes > request->limits.max_bytes) {
      return reshard_error_set(
          plan->err, RESHARD_RESOURCE_EXHAUSTED,
          "plan: more than the limit max_bytes %llu bytes by page %llu",
          (unsigned long long)request->limits.max_bytes,
          (unsigned long long)page);
    }
    if (cost.copies > *largest_page) {
      *largest_page = cost.copies;
    }
    plan->page_bytes[page] = cost.bytes;
    out->page_source[page] = source;
    out->hit_pages = page + 1;
  }
  out->copies_before_coalescing = total_copies;
  out->bytes = total_bytes;
  return RESHARD_OK;
}

/* Frees the scratch of trial_cost. */
void reshard__plan_free_trial(reshard__planner *plan) {
  free(plan->trial_copies);
  free(plan->trial_out);
  free(plan->trial_keys);
  free(plan->trial_spare);
}
