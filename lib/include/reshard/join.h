/* The logical join (SPEC §2.2 step 2): which fragments of a source layout
 * hold each (layer, component, head interval) a reader participant owns.
 * It depends only on (layout, placement part), so the daemon caches it as a
 * template and a repeated reader shape skips this step. */
#ifndef RESHARD_JOIN_H
#define RESHARD_JOIN_H

#include <stddef.h>
#include <stdint.h>

#include "reshard/error.h"
#include "reshard/layout.h"
#include "reshard/placement.h"

/* One fragment clipped to the participant's head interval. */
typedef struct reshard_join_entry {
  uint64_t part_index;
  uint64_t part_offset; /* of token 0, head `head_start`, element 0 */
  uint64_t head_start;  /* absolute, clipped */
  uint64_t head_end;
  uint64_t token_stride;
  uint64_t head_stride;
} reshard_join_entry;

/* Immutable once built; one malloc'd block, freed with reshard_join_free.
 * Safe to share between threads. */
typedef struct reshard_join {
  /* entries of group g = layer_index * 2 + (component - 1), where
   * layer_index indexes the participant's sorted layers, are
   * entries[group_start[g] .. group_start[g + 1]), sorted by head_start */
  size_t group_count;
  size_t *group_start;
  reshard_join_entry *entries;
  size_t entry_count;
  uint64_t page_bytes; /* sum of all Part sizes of one page */
  uint64_t *part_base; /* prefix sums of Part sizes, shard_count + 1 */
  size_t part_count;
  size_t memory_bytes; /* size of the block, for cache accounting */
} reshard_join;

/* Builds the join of a normalized `layout` with the participant `part`
 * (whose descriptor equals the layout's). Uses the per-layer interval index
 * of the layout, never a scan over all heads. Returns NULL with `err` set
 * when memory runs out. The caller owns the result. */
reshard_join *reshard_join_build(const reshard_layout *layout,
                                 const reshard_placement_part *part,
                                 reshard_error *err);

void reshard_join_free(reshard_join *join);

#endif
