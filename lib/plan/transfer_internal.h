/* What the two halves of transfer planning share (SPEC §2.6):
 * transfer.c checks the request, chooses the sources, writes the join and
 * plans by lowering, sorting and batching (any target memory);
 * transfer_direct.c plans a pooled target straight from the pools and
 * both block tables in plan order, without a bound binding or a sort,
 * where the walk allows it. Both end in reshard__transfer_finish. Internal
 * to lib/plan. */
#ifndef RESHARD_PLAN_TRANSFER_INTERNAL_H
#define RESHARD_PLAN_TRANSFER_INTERNAL_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "plan/plan_internal.h"
#include "reshard/join.h"
#include "reshard/transfer.h"

/* One plan's state, filled by transfer.c in the order the work is known
 * (checks, source choice, join, sources, target memory), then read by
 * whichever path lowers. Everything it points to lives in `arena`. */
typedef struct reshard__transfer {
  const reshard_transfer_request *request;
  reshard_arena *arena;
  reshard_error *err;
  const reshard_placement_part *target; /* the target's part */
  uint64_t source_dp;
  /* request.pools by participant id (transfer.c's). */
  struct reshard__transfer_by_participant *pools;
  /* Shard s (a chosen source participant, in participant id order) is
   * shard_part[s]; the join is written by choose_sources, in the arena. */
  size_t shard_count;
  const reshard_placement_part **shard_part;
  reshard_join *join;
  /* Per shard: its ordinal among the sources read, SIZE_MAX if unread. */
  size_t *shard_source;
  /* Per source ordinal: its part and its pool. */
  const reshard_placement_part **source_part;
  const reshard_transfer_pool **source_pool;
  size_t source_count;
  uint64_t block_size;
  reshard_bound_binding bound; /* the target's, on the sorting path */
  uint64_t head_bytes[2];
} reshard__transfer;

static inline reshard_status
reshard__transfer_no_memory(const reshard__transfer *t) {
  return reshard_error_set(t->err, RESHARD_RESOURCE_EXHAUSTED,
                           "plan: out of memory");
}

static inline bool
reshard__transfer_stop_requested(const reshard_transfer_request *request) {
  return request->should_stop != NULL &&
         request->should_stop(request->should_stop_context);
}

/* The index of `layer` among the part's sorted layer ids, -1 if absent. */
ptrdiff_t reshard__transfer_layer_index(const reshard_placement_part *part,
                                        uint64_t layer);

/* Where each read source region starts on one line through every source
 * region in (source, region) order: a copy's place on it orders copies as
 * (source, source region, source offset), and no two copies of one plan
 * read the same byte. *out, per region in that order, in the arena. False
 * when memory runs out or the regions' sizes add up past 64 bits. */
bool reshard__transfer_region_bases(const reshard__transfer *t, uint64_t **out);

/* max_operations (on the lowered copies) and max_bytes, before any copy
 * is written: RESOURCE_EXHAUSTED naming the limit. */
reshard_status reshard__transfer_check_counts(const reshard__transfer *t,
                                              uint64_t copies, uint64_t bytes);

/* What both paths return besides the batches (out->copies, batches,
 * copy_count and batch_count set): sources, batch_source, stats, and the
 * runs when the request asks for them. `copies` and `bytes` are the
 * lowered counts before coalescing. */
reshard_status reshard__transfer_finish(reshard__transfer *t, uint64_t copies,
                                        uint64_t bytes,
                                        reshard_transfer_plan *out);

/* The response's varint columns, written as the batcher closes batches
 * (transfer_columns.c): each batch's copies are encoded when it closes,
 * while they are still in cache (a batch is at most
 * max_batch_operations copies, 4096 by default: 192 KiB of copies), not
 * read again after planning. */
typedef struct reshard__transfer_columns {
  reshard__column_encoder encoder;
  const reshard__batcher *batcher;
  size_t encoded_batches;
  size_t *batch_source; /* per encoded batch, its copies' source */
} reshard__transfer_columns;

/* Whether the plan writes columns: request.varint_columns without runs. */
static inline bool
reshard__transfer_wants_columns(const reshard_transfer_request *request) {
  return request->varint_columns && !request->runs;
}

/* Sizes the encoder for the batcher's batches (at most `max_copies`
 * copies in `max_batches` batches); the bytes go to
 * request.column_arena, else the plan's arena. */
reshard_status reshard__transfer_columns_init(const reshard__transfer *t,
                                              reshard__transfer_columns *c,
                                              const reshard__batcher *batcher,
                                              size_t max_copies,
                                              size_t max_batches);

/* Encodes every batch the batcher closed since the last call. */
reshard_status reshard__transfer_columns_drain(reshard__transfer_columns *c,
                                               reshard_error *err);

/* Encodes the batches the batcher closed since the last drain, which
 * hold no copy: each is closed batch `like`, then `like` + 1, ..., with
 * every part and region index renamed to `part_index` and
 * `region_index` (a region written as a remembered one renamed, whose
 * batches it closes whole: reshard__walk_repeat_write). */
reshard_status reshard__transfer_columns_repeat(reshard__transfer_columns *c,
                                                size_t like,
                                                uint64_t part_index,
                                                uint64_t region_index,
                                                reshard_error *err);

/* The first copy (plan order) a later drain may read: the open batch's
 * copies not yet encoded, and those of the last batches a later batch is
 * compared with (it may repeat one of them renamed). */
size_t reshard__transfer_columns_read_from(const reshard__transfer_columns *c);

/* Plans a pooled target (request.pooled) straight from the pools in plan
 * order (transfer_direct.c). *done is true when it did (out is the plan,
 * out->direct set, or the status says why not); false when the walk is
 * not in plan order or could not be prepared, and then nothing is
 * returned and the caller plans by binding and sorting (what the walk
 * wrote stays in the arena). Limits fail here, before any copy is
 * written, as on the sorting path. */
reshard_status reshard__transfer_plan_direct(reshard__transfer *t,
                                             reshard_transfer_plan *out,
                                             bool *done);

#endif
