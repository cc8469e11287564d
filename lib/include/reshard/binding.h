/* Runtime bindings: where one reader participant's registered memory holds
 * each (layer, component, token, head) value (SPEC §1.5). */
#ifndef RESHARD_BINDING_H
#define RESHARD_BINDING_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "reshard/descriptor.h"
#include "reshard/error.h"
#include "reshard/limits.h"
#include "reshard/placement.h"

typedef struct reshard_region {
  const char *region_id;
  uint64_t address;
  uint64_t nbytes;
} reshard_region;

typedef struct reshard_binding_range {
  uint64_t global_layer_id;
  reshard_component component;
  uint64_t token_start;
  uint64_t token_count;
  uint64_t head_start;
  uint64_t head_count;
  const char *region_id;
  uint64_t offset_bytes;
  uint64_t token_stride_bytes;
  uint64_t head_stride_bytes;
} reshard_binding_range;

/* As decoded from the request; storage owned by the builder. */
typedef struct reshard_binding {
  const char *participant_id;
  const char *endpoint;
  reshard_region *regions;
  size_t region_count;
  reshard_binding_range *ranges;
  size_t range_count;
} reshard_binding;

/* A validated range in the planner's terms: half-open token and head
 * intervals and the region by index. */
typedef struct reshard_bound_range {
  uint64_t layer_index; /* index into the participant's sorted layer ids */
  reshard_component component;
  uint64_t token_start, token_end;
  uint64_t head_start, head_end;
  uint64_t region_index;
  uint64_t region_offset; /* offset of (token_start, head_start) */
  uint64_t token_stride;
  uint64_t head_stride;
} reshard_bound_range;

/* The binding after validation, ready for lowering. Arrays live in the
 * arena passed to reshard_binding_validate. */
typedef struct reshard_bound_binding {
  const reshard_placement_part *part; /* the participant's placement part */
  uint64_t token_span;                /* pages * page_size */
  reshard_bound_range *ranges;        /* sorted by (layer_index, component,
                                         token_start, head_start) */
  size_t range_count;
  /* ranges of group g = layer_index * 2 + (component - 1) are
   * ranges[group_start[g] .. group_start[g + 1]) */
  size_t *group_start;
  size_t group_count;
  size_t region_count; /* every range's region_index is below it */
  /* Nonzero when each group binds every page as one range of all the
   * participant's heads, each shaped as the group's first but for where
   * it lies (a paged reader whose blocks are pages): the page size. Then
   * page p's range of group g is ranges[group_start[g] + p], and every
   * page meets its ranges as the page before it did. */
  uint64_t page_blocks;
  /* With page_blocks: every group's page p lies as far from its page 0,
   * in bytes and direction, as the first group's page p from its own (the
   * groups share one block table, as a pool's tensors do). Then a page
   * moves every range by one amount from the page before. */
  bool pages_aligned;
  /* Every range binds all the span's tokens, [0, token_span) (a
   * contiguous reader's tensors): every page opens every range, and meets
   * it as the page before did, a page's rows further into its region. */
  bool whole_span;
  uint64_t validation_work; /* work units spent, for stats */
} reshard_bound_binding;

/* Validates `binding` against the participant's `part` of a normalized
 * placement whose descriptor is `descriptor`, for `page_count` pages, under
 * `limits` (max_ranges and max_validation_work are checked before the work
 * they bound). Every rule of SPEC §1.5; messages start with "binding".
 * On success fills `out`, with memory from `arena`. */
typedef struct reshard_arena reshard_arena;
reshard_status reshard_binding_validate(
    const reshard_binding *binding, const reshard_descriptor *descriptor,
    const reshard_placement_part *part, uint64_t page_count,
    const reshard_limits *limits, reshard_arena *arena,
    reshard_bound_binding *out, reshard_error *err);

#endif
