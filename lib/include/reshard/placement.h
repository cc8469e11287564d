/* Topologies and complete placements: who owns which layers and heads
 * (SPEC §1.2). */
#ifndef RESHARD_PLACEMENT_H
#define RESHARD_PLACEMENT_H

#include <stddef.h>
#include <stdint.h>

#include "reshard/descriptor.h"
#include "reshard/error.h"
#include "reshard/limits.h"

typedef struct reshard_rank {
  uint64_t dp, pp, tp;
} reshard_rank;

typedef struct reshard_placement_part {
  const char *participant_id;
  reshard_rank rank;
  uint64_t *layer_ids; /* subset of the descriptor's; may be empty */
  size_t layer_count;
  uint64_t head_start;
  uint64_t head_count;
  uint64_t replica_ordinal;
  uint64_t replica_count; /* 0 reads as 1 */
} reshard_placement_part;

/* Storage is owned by the builder (request arena or a cached object). */
typedef struct reshard_placement {
  const char *resource_id;
  const char *revision;
  const char *placement_set_id;
  uint64_t dp_size, pp_size, tp_size;
  reshard_descriptor descriptor;
  reshard_placement_part *parts;
  size_t part_count;
} reshard_placement;

/* Validates the whole placement (descriptor, topology, exact tiling of
 * heads per DP rank and layer, replica sets) and canonicalises it in place:
 * descriptor layers sorted, each part's layers sorted, parts sorted by
 * participant_id, replica_count 0 replaced by 1. Messages start with
 * "placement". `scratch` provides temporary memory. */
typedef struct reshard_arena reshard_arena;
reshard_status reshard_placement_normalize(reshard_placement *placement,
                                           reshard_arena *scratch,
                                           reshard_error *err);

/* Holds a placement to the layout caps of `caps` (SPEC §2.3) before its
 * validation or identity costs anything: parts at most max_layout_parts;
 * layer ids over all parts, and parts × descriptor layers (the identity
 * repeats the descriptor in every part), at most max_layout_fragments.
 * RESOURCE_EXHAUSTED naming the limit; nothing is allocated. */
reshard_status
reshard_placement_check_limits(const reshard_placement *placement,
                               const reshard_limits *caps, reshard_error *err);

/* The lowest DP rank among the parts. Requires at least one part. */
uint64_t reshard_placement_lowest_dp(const reshard_placement *placement);

/* True when some part has DP rank `dp`. */
bool reshard_placement_has_dp(const reshard_placement *placement, uint64_t dp);

/* The part whose participant_id equals `participant_id`, or NULL. Parts are
 * sorted after normalisation, so this is a binary search. */
const reshard_placement_part *
reshard_placement_find_part(const reshard_placement *placement,
                            const char *participant_id);

#endif
