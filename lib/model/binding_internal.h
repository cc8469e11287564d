/* Internal: the state of one reshard_binding_validate call (SPEC §1.5)
 * and the steps that share it: the counts, region index and per-range rules
 * (binding.c), the head-tiling proof (binding_tiling.c) and the physical
 * disjointness proof (binding_disjoint.c), which both run over the ranges
 * sorted by (layer, component, token start, head start). Not installed;
 * not part of the public API. */
#ifndef RESHARD_BINDING_INTERNAL_H
#define RESHARD_BINDING_INTERNAL_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "reshard/arena.h"
#include "reshard/binding.h"
#include "reshard/error.h"

struct reshard__region_address; /* binding.c's index of region ids */

/* The bytes one range's values lie within, [start, end), at absolute
 * addresses. */
typedef struct reshard__binding_span {
  uint64_t start, end;
} reshard__binding_span;

typedef struct reshard__binding_validation {
  const reshard_binding *binding;
  const reshard_descriptor *descriptor;
  const reshard_placement_part *part;
  const reshard_limits *limits;
  reshard_arena *arena;
  reshard_error *err;
  uint64_t work;
  /* Bound range -> binding.ranges index; NULL when the ranges arrived in
   * the sorted order, each its own index (reshard__binding_source). */
  size_t *source_index;
  /* Each range's bounding span, filled while the ranges are checked:
   * spans[i + 1] is binding.ranges[i]'s; spans[0] is a sentinel that
   * binding_disjoint.c's table pass reads for an empty slot. With the
   * lowest start, the highest end and the shortest span, they let the
   * disjointness proof order the spans without a sort. */
  reshard__binding_span *spans;
  uint64_t span_low, span_high, span_shortest;
  /* Regions found by their id's address (index -1: no such region), open
   * addressing, at most half full; addresses past that are not kept.
   * Decoders share one string among ranges of one region (the daemon's
   * among all of them), so most ranges name an address seen before and
   * cost neither a hash of the id nor a strcmp. */
  struct reshard__region_address *by_address;
  size_t address_mask, address_count;
  /* Worked out once rather than per range (a call for the head's bytes,
   * three 64-bit divisions by itemsize): with itemsize a power of two, as
   * every dtype's is, a multiple is a mask test. */
  uint64_t head_bytes[RESHARD_COMPONENT_VALUE + 1];
  bool item_power_of_two;
  uint64_t item_mask; /* itemsize - 1 then */
  /* The last range's region id and layer, and where they were found
   * (last_layer_index -1: none yet). */
  const char *last_region_id;
  ptrdiff_t last_region;
  uint64_t last_layer;
  ptrdiff_t last_layer_index;
} reshard__binding_validation;

/* The binding.ranges index of sorted bound range `bound`, for messages. */
static inline size_t
reshard__binding_source(const reshard__binding_validation *v, size_t bound) {
  return v->source_index != NULL ? v->source_index[bound] : bound;
}

/* Charges `units` of validation work to `step`; fails once the total
 * passes max_validation_work. */
reshard_status reshard__binding_spend_work(reshard__binding_validation *v,
                                           uint64_t units, const char *step);
reshard_status reshard__binding_no_memory(reshard__binding_validation *v);

/* Proves the sorted `ranges` tile each (layer, component) group's rectangle
 * [0, token_span) x the participant's heads exactly, after charging the
 * sweep's work: group g is ranges [group_start[g], group_start[g + 1]),
 * layer g / 2, component g % 2 + 1. `page_blocks` is the page size when
 * every range is shaped as its group's first, a page long, else 0; with
 * `tokens_apart`, each of a group's ranges starts at or past the end of
 * the one before, and page blocks are proved by their count. `active` is
 * scratch with room for an index per sorted range. */
reshard_status reshard__binding_check_tiling(
    reshard__binding_validation *v, const reshard_bound_range *ranges,
    const size_t *group_start, size_t group_count, uint64_t token_span,
    uint64_t page_blocks, bool tokens_apart, size_t *active);

/* Where sorted, tiled page blocks lie when every group's pages lie as the
 * first non-empty group's do (reshard_bound_binding.pages_aligned): that
 * group's page p at places[(group_start[first] + p) * stride], group g
 * the sorted ranges [group_start[g], group_start[g + 1]). */
typedef struct reshard__aligned_pages {
  const uint64_t *places;
  size_t stride;
  const size_t *group_start;
  size_t group_count;
} reshard__aligned_pages;

/* Proves no two of the `count` sorted ranges' values share a byte,
 * charging the work of each cluster of overlapping spans it compares.
 * Aligned pages (`aligned`, else NULL) are proved apart first from their
 * first group's pages and every group's page 0; spans that lie densely in
 * v->spans, from a table of them; both in linear time and at no charge (no
 * cluster has two members then). Otherwise, and whenever spans overlap,
 * the sorted proof decides, so its result and messages are the only
 * ones. */
reshard_status
reshard__binding_check_disjoint(reshard__binding_validation *v,
                                const reshard_bound_range *ranges, size_t count,
                                const reshard__aligned_pages *aligned);

#endif
