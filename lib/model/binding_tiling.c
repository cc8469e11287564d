/* The head-tiling proof of binding validation (SPEC §1.5): the ranges of
 * each (layer, component) bind every (token, head) cell of the request's
 * tokens x the participant's heads exactly once. A sweep over tokens keeps
 * the ranges still open (at most one per head) and fails on the first two
 * that share a cell; equal total area then leaves no cell unbound, and when
 * it differs the message names the first unbound cell. */
#include <stdlib.h>

#include "model/binding_internal.h"
#include "reshard/arena.h"

static const char *component_name(reshard_component component) {
  return component == RESHARD_COMPONENT_KEY ? "KEY" : "VALUE";
}

static int compare_u64(const void *a, const void *b) {
  uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;
  return (x > y) - (x < y);
}

static int compare_head_start(const void *a, const void *b) {
  return compare_u64(&((const reshard_bound_range *)a)->head_start,
                     &((const reshard_bound_range *)b)->head_start);
}

/* The first (token, head) in token-then-head order that no range of a
 * group binds, when the group's ranges are pairwise disjoint but bind
 * fewer cells than the rectangle holds. A token stops being covered only
 * where some range ends, so only token 0 and the range ends are looked
 * at; the ranges open there are disjoint on that token, at most head_count
 * of them, which keeps the walk within the sweep's work bound. */
static reshard_status first_unbound(reshard__binding_validation *v,
                                    const reshard_bound_range *ranges,
                                    size_t count, uint64_t token_span,
                                    uint64_t *token, uint64_t *head) {
  const reshard_placement_part *part = v->part;
  uint64_t *stops = RESHARD_ARENA_ARRAY(v->arena, uint64_t, count + 1);
  reshard_bound_range *open =
      RESHARD_ARENA_ARRAY(v->arena, reshard_bound_range, count + 1);
  if (stops == NULL || open == NULL) {
    return reshard__binding_no_memory(v);
  }
  size_t stop_count = 0;
  stops[stop_count++] = 0;
  for (size_t r = 0; r < count; r++) {
    if (ranges[r].token_end < token_span) {
      stops[stop_count++] = ranges[r].token_end;
    }
  }
  qsort(stops, stop_count, sizeof *stops, compare_u64);
  size_t next = 0, open_count = 0;
  for (size_t s = 0; s < stop_count; s++) {
    uint64_t t = stops[s];
    if (s > 0 && t == stops[s - 1]) {
      continue;
    }
    size_t kept = 0;
    uint64_t heads = 0;
    for (size_t o = 0; o < open_count; o++) {
      if (open[o].token_end > t) {
        heads += open[o].head_end - open[o].head_start;
        open[kept++] = open[o];
      }
    }
    for (; next < count && ranges[next].token_start <= t; next++) {
      if (ranges[next].token_end > t) {
        heads += ranges[next].head_end - ranges[next].head_start;
        open[kept++] = ranges[next];
      }
    }
    open_count = kept;
    if (heads < part->head_count) {
      qsort(open, open_count, sizeof *open, compare_head_start);
      uint64_t h = part->head_start;
      for (size_t o = 0; o < open_count && open[o].head_start == h; o++) {
        h = open[o].head_end;
      }
      *token = t;
      *head = h;
      return RESHARD_OK;
    }
  }
  /* Unreachable for disjoint ranges that miss a cell. */
  *token = 0;
  *head = part->head_start;
  return RESHARD_OK;
}

/* The cells of a group whose ranges each bind every head of the
 * participant, one after another in token order (a paged reader's
 * blocks), or 0 when they are not such a group: then no two share a cell
 * without a sweep, as each starts at or past the end of the one before. */
static uint64_t whole_row_cells(const reshard_placement_part *part,
                                const reshard_bound_range *ranges,
                                size_t count) {
  uint64_t head_end = part->head_start + part->head_count;
  uint64_t end = 0, tokens = 0;
  for (size_t r = 0; r < count; r++) {
    const reshard_bound_range *range = &ranges[r];
    if (range->head_start != part->head_start || range->head_end != head_end ||
        range->token_start < end) {
      return 0;
    }
    tokens += range->token_end - range->token_start;
    end = range->token_end;
  }
  return tokens * part->head_count;
}

/* whole_row_cells for page blocks, each shaped as its group's first and a
 * page long (reshard_bound_binding.page_blocks): only the first range's
 * heads are read, and every range's start unless each is known to start
 * at or past the end of the one before (`apart`). */
static uint64_t page_block_cells(const reshard_placement_part *part,
                                 const reshard_bound_range *ranges,
                                 size_t count, uint64_t page_size, bool apart) {
  if (count == 0 || ranges[0].head_start != part->head_start ||
      ranges[0].head_end != part->head_start + part->head_count) {
    return 0;
  }
  uint64_t end = 0;
  for (size_t r = 0; !apart && r < count; r++) {
    if (ranges[r].token_start < end) {
      return 0;
    }
    end = ranges[r].token_start + page_size;
  }
  /* Apart and inside the token span: no more tokens than it holds. */
  return count * page_size * part->head_count;
}

/* Proves that the ranges of one (layer, component) tile the rectangle
 * [0, span) x [head_start, head_end) exactly: pairwise disjoint (a sweep
 * over tokens with the ranges still open, at most one per head) and of
 * equal total area. */
static reshard_status
check_group_tiling(reshard__binding_validation *v,
                   const reshard_bound_range *ranges, size_t base, size_t count,
                   uint64_t layer_index, unsigned component,
                   uint64_t token_span, uint64_t page_blocks, bool tokens_apart,
                   size_t *active) {
  const reshard_placement_part *part = v->part;
  uint64_t layer = part->layer_ids[layer_index];
  const char *name = component_name((reshard_component)component);
  size_t active_count = 0;
  uint64_t cells = page_blocks ? page_block_cells(part, ranges, count,
                                                  page_blocks, tokens_apart)
                               : whole_row_cells(part, ranges, count);
  size_t swept = cells == 0 ? count : 0;
  for (size_t r = 0; r < swept; r++) {
    const reshard_bound_range *range = &ranges[r];
    size_t kept = 0;
    for (size_t a = 0; a < active_count; a++) {
      const reshard_bound_range *open = &ranges[active[a]];
      if (open->token_end <= range->token_start) {
        continue;
      }
      if (open->head_start < range->head_end &&
          range->head_start < open->head_end) {
        uint64_t head = open->head_start > range->head_start
                            ? open->head_start
                            : range->head_start;
        return reshard_error_set(
            v->err, RESHARD_INVALID_ARGUMENT,
            "binding.ranges[%zu] and binding.ranges[%zu] both bind layer "
            "%llu component %s token %llu head %llu",
            reshard__binding_source(v, base + active[a]),
            reshard__binding_source(v, base + r), (unsigned long long)layer,
            name, (unsigned long long)range->token_start,
            (unsigned long long)head);
      }
      active[kept++] = active[a];
    }
    active_count = kept;
    active[active_count++] = r;
    cells += (range->token_end - range->token_start) *
             (range->head_end - range->head_start);
  }
  uint64_t expected = token_span * part->head_count;
  if (cells != expected) {
    uint64_t token = 0, head = 0;
    reshard_status status =
        first_unbound(v, ranges, count, token_span, &token, &head);
    if (status) {
      return status;
    }
    return reshard_error_set(
        v->err, RESHARD_INVALID_ARGUMENT,
        "binding: layer %llu component %s: token %llu head %llu is not bound; "
        "the ranges bind %llu of the %llu "
        "(token, head) cells of tokens [0, %llu) x heads [%llu, %llu); every "
        "cell must be bound exactly once",
        (unsigned long long)layer, name, (unsigned long long)token,
        (unsigned long long)head, (unsigned long long)cells,
        (unsigned long long)expected, (unsigned long long)token_span,
        (unsigned long long)part->head_start,
        (unsigned long long)(part->head_start + part->head_count));
  }
  return RESHARD_OK;
}

/* Charges the sweep's work bound, then proves each (layer, component)
 * group of the sorted ranges tiles its rectangle. */
reshard_status reshard__binding_check_tiling(
    reshard__binding_validation *v, const reshard_bound_range *ranges,
    const size_t *group_start, size_t group_count, uint64_t token_span,
    uint64_t page_blocks, bool tokens_apart, size_t *active) {
  const reshard_placement_part *part = v->part;
  uint64_t sweep_work = 0;
  for (size_t g = 0; g < group_count; g++) {
    uint64_t members = group_start[g + 1] - group_start[g];
    uint64_t open = members < part->head_count ? members : part->head_count;
    sweep_work += members * (open + 1);
  }
  reshard_status status =
      reshard__binding_spend_work(v, sweep_work, "the head-tiling proof");
  if (status) {
    return status;
  }
  unsigned components = reshard_component_count(v->descriptor);
  for (size_t g = 0; g < group_count; g++) {
    unsigned component = (unsigned)(g % 2) + 1;
    if (component > components) {
      continue;
    }
    status = check_group_tiling(v, ranges + group_start[g], group_start[g],
                                group_start[g + 1] - group_start[g], g / 2,
                                component, token_span, page_blocks,
                                tokens_apart, active);
    if (status) {
      return status;
    }
  }
  return RESHARD_OK;
}
