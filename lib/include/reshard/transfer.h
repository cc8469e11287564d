/* Transfer planning (SPEC §2.6): the KV of tokens [0, token_count) from a
 * live source instance's memory pools to one target participant's memory,
 * for prefill/decode disaggregation between instances of different
 * layouts. The logical join is PlanLoad's (reshard_join_build over a
 * layout whose shards are the chosen source participants); lowering walks
 * both block tables; coalescing, batching and runs are the load plan's
 * rules with the source in place of the stored page. */
#ifndef RESHARD_TRANSFER_H
#define RESHARD_TRANSFER_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "reshard/arena.h"
#include "reshard/binding.h"
#include "reshard/copy.h"
#include "reshard/error.h"
#include "reshard/limits.h"
#include "reshard/placement.h"
#include "reshard/pool.h"
#include "reshard/runs.h"
#include "reshard/varint_columns.h"

/* One source pool as the request names it. */
typedef struct reshard_transfer_pool {
  const char *name;         /* its memory id, for messages */
  const reshard_pool *pool; /* participant, endpoint, regions */
  /* Validated against the pool participant's part of a placement equal to
   * the request's source placement (the caller checks that it is the
   * same placement); its part pointer is not read. */
  const reshard_bound_pool *bound;
} reshard_transfer_pool;

typedef struct reshard_transfer_request {
  const reshard_placement *source_placement; /* normalized */
  bool has_source_dp_rank;
  uint64_t source_dp_rank;
  /* Any order; at most one per source participant; pools of participants
   * the plan does not read are allowed. */
  const reshard_transfer_pool *pools;
  size_t pool_count;
  /* The source DP replica's block table, shared by its pools. */
  const uint32_t *source_block_ids;
  size_t source_block_count;
  uint64_t token_count;                      /* >= 1 */
  const reshard_placement *target_placement; /* normalized */
  bool has_target_dp_rank;
  uint64_t target_dp_rank;
  /* The target's memory: its participant and regions. Its ranges are
   * validated over [0, token_count) unless `bound_binding` is given (a
   * pooled target bound by reshard_pool_bind over that span), or
   * `pooled` is (a validated pool and its block table: its table is
   * checked as reshard_pool_bind checks it, and the plan is lowered
   * straight from the pool where it can be, else bound here). `pooled`
   * is read first, then `bound_binding`, then `binding`. */
  const reshard_binding *binding;
  const reshard_bound_binding *bound_binding;
  const reshard_pooled_memory *pooled;
  /* Optional: the request field that names the participant, for
   * messages ("pooled.inline_pool.participant_id"); NULL reads as
   * "binding.participant_id". */
  const char *participant_field;
  reshard_limits limits; /* already clamped to the server caps */
  bool runs;             /* also fold each batch into strided runs */
  /* The caller reads the batches' counts, bytes and sources and either
   * the runs or the varint columns, not the copies, so the plan's
   * `copies` is NULL. With runs, a pooled target walked in plan order
   * then emits the runs straight from the walk, never writing a copy
   * (the same runs and batches as folding the explicit plan); with
   * varint_columns, the walk drops copies once encoded, holding a few
   * batches of them at a time (copies_held). Ignored with neither. */
  bool omit_copies;
  /* Also encode each batch's copies as varint columns (the plan's
   * `columns`) right after it is batched, while its copies are in cache:
   * what a PlanTransferResponse without runs carries, so the caller sends
   * those bytes instead of reading every copy again. Column 0 is the
   * source ordinal (reshard_copy.page_index), which a TransferBatch
   * carries as one scalar, so an encoder skips it. Ignored with runs. */
  bool varint_columns;
  /* Optional: where the columns' bytes go (NULL: the plan's arena), for
   * a caller that sends them as they lie, past the planning's scratch. */
  reshard_arena *column_arena;
  bool (*should_stop)(void *context);
  void *should_stop_context;
} reshard_transfer_request;

/* The plan. Copies use reshard_copy with the source in place of the
 * stored page: page_index is the source's ordinal (into `sources`),
 * part_index the region's index in that source's pool, part_offset the
 * offset in that region; region_index and region_offset are the
 * target's. Every batch reads one source (batch_source). Arrays live in
 * the arena given to reshard_plan_transfer. */
typedef struct reshard_transfer_plan {
  size_t *sources; /* indices into request.pools, by participant id */
  size_t source_count;
  /* In batch order; NULL with request.omit_copies (and runs or
   * varint_columns). */
  reshard_copy *copies;
  size_t copy_count;
  reshard_batch *batches;
  size_t batch_count;
  size_t *batch_source; /* per batch: the source ordinal */
  uint64_t operations;  /* copy_count */
  uint64_t bytes;
  uint64_t copies_before_coalescing;
  reshard_runs runs; /* with request.runs; all zero otherwise */
  /* With request.varint_columns and without runs: every batch as varint
   * columns (columns.batch_count == batch_count); all zero otherwise. */
  reshard_varint_batches columns;
  const reshard_placement_part *participant; /* the target's part */
  /* True when the copies were lowered straight from the pools and both
   * block tables in plan order (a `pooled` target whose pieces come out
   * in order), false when they were lowered, then sorted. The same plan
   * either way; for tests and figures. */
  bool direct;
  /* Of a direct plan, the regions written as an earlier region's copies
   * or runs with the region indices renamed, not walked (every layer's
   * tensors alike); for tests and figures. */
  uint64_t regions_repeated;
  /* Of a direct plan that dropped its copies (omit_copies with varint
   * columns), the most it held at once, against copy_count; 0 for other
   * plans. For tests and figures. */
  size_t copies_held;
  /* Of regions_repeated, those whose copies were never written: a
   * region walked as whole batches, repeated as whole batches encoded
   * from those (omit_copies with varint columns). For tests and
   * figures. */
  uint64_t regions_unwritten;
} reshard_transfer_plan;

/* Plans a transfer. Errors (SPEC §2.6): FAILED_PRECONDITION when the
 * descriptors differ (naming the field) or a source participant the plan
 * reads has no pool (naming it); INVALID_ARGUMENT for a pool of a
 * participant outside the source placement, two pools of one participant,
 * pools read with different block sizes (naming the pool), a bad source
 * block table, a target participant outside the target placement or its
 * DP rank, a bad target binding; RESOURCE_EXHAUSTED naming the limit
 * (max_operations and max_bytes are checked on counts, before any copy is
 * written); DEADLINE_EXCEEDED when should_stop says so. Nothing is
 * returned on failure (*out zeroed). */
reshard_status reshard_plan_transfer(const reshard_transfer_request *request,
                                     reshard_arena *arena,
                                     reshard_transfer_plan *out,
                                     reshard_error *err);

#endif
