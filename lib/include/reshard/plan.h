/* Load planning (SPEC §2.2): source selection, lowering, coalescing and
 * batching for one reader participant. */
#ifndef RESHARD_PLAN_H
#define RESHARD_PLAN_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "reshard/binding.h"
#include "reshard/copy.h"
#include "reshard/error.h"
#include "reshard/join.h"
#include "reshard/layout.h"
#include "reshard/limits.h"
#include "reshard/placement.h"
#include "reshard/pool.h"
#include "reshard/runs.h"
#include "reshard/varint_columns.h"

/* A stored layout the pages may come from. `join` may carry a prebuilt
 * join of this layout with the request's participant (a cached template);
 * NULL lets the planner build one. */
typedef struct reshard_plan_source {
  const reshard_layout *layout;
  const char *layout_id;
  const reshard_join *join;
} reshard_plan_source;

typedef struct reshard_load_request {
  const reshard_placement *placement; /* normalized target placement */
  bool has_dp_rank;
  uint64_t dp_rank;
  const reshard_binding *binding;
  uint64_t page_count;
  /* Candidates of page p are sources[page_sources[i]] for i in
   * [page_source_start[p], page_source_start[p + 1]); page_source_start has
   * page_count + 1 entries. A page with no candidate is a miss. */
  const reshard_plan_source *sources;
  size_t source_count;
  const size_t *page_source_start;
  const size_t *page_sources;
  const char *const *preferred_layout_ids;
  size_t preferred_count;
  reshard_limits limits; /* already clamped to the server caps */
  /* Also fold each batch into strided runs (SPEC §2.2 step 7). The
   * explicit copies and batches are returned either way. */
  bool runs;
  /* With runs or varint_columns: the caller reads only those and the
   * batches' counts and bytes, not the copies, so the plan writes copies
   * only where it needs them itself; the plan's `copies` is then NULL. */
  bool omit_copies;
  /* Also encode each batch's copies as varint columns (the plan's
   * `columns`), right after batching it: what a PlanLoad response without
   * runs carries. */
  bool varint_columns;
  /* Optional: where the varint columns' bytes go (NULL: the plan's arena).
   * A caller that sends them as they lie keeps them past the planning's
   * scratch. */
  reshard_arena *column_arena;
  /* Optional: `binding` as reshard_binding_validate validated it earlier
   * for this placement's participant part, this page_count and these
   * limits (a caller's cache of identical bindings). The planner then
   * skips validation and only reads it, so one may serve concurrent
   * plans. NULL: the planner validates `binding`. */
  const reshard_bound_binding *bound_binding;
  /* Optional: the memory as a validated pool of `binding`'s participant
   * and a block table (SPEC §1.5a) instead of `binding`'s ranges, which
   * are then not read (`binding` still names the participant). The
   * table is checked here (messages name "pooled.block_ids"); the pool
   * is never expanded into a binding: each page's ranges are written
   * from the table as lowering needs them, and a page that starts where
   * an earlier one did in its block reuses that page's plan with only
   * its blocks' addresses substituted. */
  const reshard_pooled_memory *pooled;
  /* Optional: the request field that names the participant, for
   * messages ("pooled.inline_pool.participant_id"); NULL reads as
   * "binding.participant_id". */
  const char *participant_field;
  /* Optional: polled between pages; when it returns true the planner
   * abandons the work and fails with DEADLINE_EXCEEDED. Called on the
   * planning thread. */
  bool (*should_stop)(void *context);
  void *should_stop_context;
} reshard_load_request;

/* The plan. All arrays live in the arena given to reshard_plan_load, except
 * built_joins[i], which the caller owns (free or cache them). */
typedef struct reshard_load_plan {
  uint64_t hit_pages;
  size_t *page_source;  /* chosen source index per hit page */
  reshard_copy *copies; /* in batch order; NULL with request.omit_copies */
  size_t copy_count;
  reshard_batch *batches;
  size_t batch_count;
  uint64_t operations; /* copy_count: what the client executes */
  uint64_t bytes;
  uint64_t copies_before_coalescing;
  uint64_t copies_after_coalescing; /* before batch splitting */
  /* Hit pages lowered as strided sequences rather than copy by copy (the
   * same plan either way; this says how often the faster path applied). */
  uint64_t sequence_pages;
  /* Of those, pages planned as the page before them shifted: the same
   * blocks but for their addresses (a pooled page that starts where the
   * one before it did in its block, whatever its blocks). */
  uint64_t reused_pages;
  /* With request.runs: of those, pages whose runs were the runs of the
   * page before them moved to their blocks, not folded again (both pages
   * wholly inside one batch, each region's ranges moved by one amount;
   * the same runs either way). */
  uint64_t run_template_pages;
  /* With request.varint_columns: of the reused pages, those whose part,
   * part offset, region and size columns were the bytes written for the
   * page before them (both pages wholly inside one batch, each region's
   * ranges moved by one amount; the same columns either way). */
  uint64_t column_template_pages;
  /* With request.runs and without copies (request.omit_copies): of the
   * reused pages, those cut by batch boundaries whose runs were the runs
   * of an earlier page that started at the same place in its batch,
   * moved to their blocks (every page between them the one before it
   * shifted, each region's ranges moved by one amount; the same runs
   * either way). */
  uint64_t run_template_cut_pages;
  reshard_join **built_joins; /* per source; non-NULL where built here */
  /* With request.runs: the batches folded into runs (runs.batch_count ==
   * batch_count, runs.batch_first non-NULL even for an empty plan); all
   * zero otherwise. */
  reshard_runs runs;
  /* With request.varint_columns: every batch as varint columns
   * (columns.batch_count == batch_count); all zero otherwise. */
  reshard_varint_batches columns;
  const reshard_placement_part *participant;
} reshard_load_plan;

/* Plans a load. Validates the binding (SPEC §1.5) against the participant
 * named in it, selects sources, lowers, coalesces, batches and, when the
 * request asks for runs, folds each batch into runs. Errors:
 * INVALID_ARGUMENT for bad input (including a participant that is not in
 * the placement or not in the target DP rank), FAILED_PRECONDITION when the
 * first page is bound only to layouts with another descriptor,
 * RESOURCE_EXHAUSTED naming the limit (max_operations bounds the copies
 * before coalescing too, so memory is bounded before lowering starts),
 * DEADLINE_EXCEEDED when should_stop said so.
 * On failure nothing is left for the caller to free. */
typedef struct reshard_arena reshard_arena;
reshard_status reshard_plan_load(const reshard_load_request *request,
                                 reshard_arena *arena, reshard_load_plan *out,
                                 reshard_error *err);

/* Frees the joins built by a plan that the caller does not keep. */
void reshard_load_plan_free_joins(reshard_load_plan *plan, size_t source_count);

#endif
