/* Store planning (SPEC §2.5): the copies that put a writer participant's
 * values, held in its registered memory, into the Parts it writes. */
#ifndef RESHARD_STORE_H
#define RESHARD_STORE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "reshard/binding.h"
#include "reshard/error.h"
#include "reshard/join.h"
#include "reshard/layout.h"
#include "reshard/limits.h"
#include "reshard/placement.h"
#include "reshard/plan.h"

typedef struct reshard_store_request {
  const reshard_placement *placement; /* normalized writer placement */
  bool has_dp_rank;
  uint64_t dp_rank;
  const reshard_binding *binding; /* the writer's memory (SPEC §1.5) */
  uint64_t page_count;            /* pages 0 .. page_count - 1 */
  /* The published manifest's layout (normalized) and its id; `join` may
   * carry a prebuilt join of this layout with the binding's participant
   * (the same template a load of that participant uses), NULL builds one. */
  const reshard_layout *layout;
  const char *layout_id;
  const reshard_join *join;
  reshard_limits limits; /* already clamped to the server caps */
  /* Also fold each batch into strided runs (SPEC §2.2 step 7), as loads do. */
  bool runs;
  /* As for reshard_load_request: encode each batch as varint columns
   * while batching (the plan's `columns`), and leave the copies out when
   * the caller reads only those or the runs (the plan's `copies` NULL). */
  bool varint_columns;
  bool omit_copies;
  /* Optional, as reshard_load_request.column_arena: where the varint
   * columns' bytes go (NULL: the plan's arena). */
  reshard_arena *column_arena;
  /* Optional, as reshard_load_request.bound_binding: the binding already
   * validated, or bound from a memory pool (reshard_pool_bind), for this
   * participant, page_count and limits; the planner only reads it. */
  const reshard_bound_binding *bound_binding;
  /* Optional, as reshard_load_request.pooled: the memory as a validated
   * pool and a block table, never expanded into a binding. */
  const reshard_pooled_memory *pooled;
  /* Optional: the request field that names the participant, for
   * messages ("pooled.inline_pool.participant_id"); NULL reads as
   * "binding.participant_id". */
  const char *participant_field;
  /* Optional, as for reshard_load_request. */
  bool (*should_stop)(void *context);
  void *should_stop_context;
} reshard_store_request;

/* The plan, in the columns of a load plan with the direction reversed:
 * copy i moves region bytes [region_offset, +nbytes) into Part
 * `part_index` of page `page_index` at [part_offset, +nbytes). Arrays live
 * in the arena given to reshard_plan_store; `built_join` is the caller's
 * (free or cache it). A participant that writes no Part gets
 * part_count == 0 and copy_count == 0. */
typedef struct reshard_store_plan {
  uint64_t *part_indexes; /* the Parts this participant writes, ascending */
  size_t part_count;
  reshard_copy *copies; /* in batch order */
  size_t copy_count;
  reshard_batch *batches;
  size_t batch_count;
  uint64_t operations; /* copy_count */
  uint64_t bytes;
  uint64_t copies_before_coalescing;
  uint64_t copies_after_coalescing; /* before batch splitting */
  /* With request.runs and a non-empty plan: the batches folded into runs,
   * as reshard_load_plan.runs; zeroed otherwise. */
  reshard_runs runs;
  /* With request.varint_columns: as reshard_load_plan.columns. */
  reshard_varint_batches columns;
  reshard_join *built_join; /* non-NULL when built here */
  const reshard_placement_part *participant;
} reshard_store_plan;

/* Plans a store. The writer of a Part is the participant whose SPEC §2.1
 * shard it is: DP rank `dp_rank`, replica ordinal 0, the Part's exact
 * layers and heads. The binding is validated with every rule of SPEC §1.5
 * before any copy exists; since those rules make the ranges tile every
 * owned (layer, component, token, head) exactly once, a hole is
 * INVALID_ARGUMENT naming the first unbound value. The copies are the
 * load planner's (join, lowering, coalescing ordered by the Part position,
 * batching), so limits apply as for loads. Errors: INVALID_ARGUMENT for
 * bad input (participant not in the placement or not of the DP rank,
 * page_count 0, a writer whose Part is not in the layout), FAILED_-
 * PRECONDITION when the layout's descriptor differs from the placement's,
 * RESOURCE_EXHAUSTED naming a limit, DEADLINE_EXCEEDED when should_stop
 * said so. On failure nothing is left for the caller to free. */
typedef struct reshard_arena reshard_arena;
reshard_status reshard_plan_store(const reshard_store_request *request,
                                  reshard_arena *arena, reshard_store_plan *out,
                                  reshard_error *err);

#endif
