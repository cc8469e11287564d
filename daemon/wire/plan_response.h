/* Encodes plan responses straight from a plan into wire bytes, without
 * building the protobuf-c message first: for a large plan that message is
 * six (nine with runs) uint64 arrays per batch which protobuf-c would then
 * walk twice (size, then pack). The bytes are exactly what protobuf-c packs
 * for reshard_wire_plan_to_pb's message (tests/daemon/wire/test_plan_response.c
 * proves it on every SPEC §6 scenario, with and without runs), and for a
 * PlanTransferResponse what protobuf-c packs for the message of the same
 * plan (tests/daemon/wire/test_plan_response.c, on random plans).
 *
 * Encoding is measure, then write. A plan that carries its batches as
 * varint columns (reshard_load_request.varint_columns) is measured and
 * written from those: column sizes read, column bytes copied (or, written
 * as pieces, long columns referenced where they lie). Otherwise
 * measuring reads every copy (or run) once, row by row, and keeps each batch's
 * column sizes and whether all of a column's values share one varint length;
 * writing then fills a batch column by column (its rows stay in cache), with a
 * branch-free loop for the columns of one length.
 *
 * A TransferBatch is a RangeBatch whose first column, the source of every
 * copy (reshard_copy.page_index of a transfer plan), is one scalar for the
 * whole batch (source_index, field 1); fields 2..10 are RangeBatch's. Both
 * are encoded by the same code (reshard_range_batches.sources).
 *
 * Measuring checks every size it adds up: a response that would pass
 * SIZE_MAX bytes is RESHARD_RESOURCE_EXHAUSTED, never a wrapped size. */
#ifndef RESHARD_PLAN_RESPONSE_H
#define RESHARD_PLAN_RESPONSE_H

#include <stddef.h>
#include <stdint.h>

#include "reshard/arena.h"
#include "reshard/copy.h"
#include "reshard/plan.h"
#include "reshard/runs.h"
#include "reshard/store.h"
#include "reshard/transfer.h"
#include "reshard/varint_columns.h"
#include "wire/response_memory.h"
#include "wire/wire.h"

/* RangeBatch columns: fields 1..6 (copies) and 8..10 (runs). */
#define RESHARD_RANGE_BATCH_COLUMNS 9

/* The repeated RangeBatch (or TransferBatch) field of a response,
 * measured. `runs` NULL encodes one entry per copy (run columns empty),
 * from `columns` when non-NULL; otherwise one entry per run of runs->runs.
 * With `sources` the batches are TransferBatches: sources[b] is batch b's
 * source_index and the first column is left out. Everything points into
 * the caller's plan and arena. */
typedef struct reshard_range_batches {
  const reshard_copy *copies;
  const reshard_batch *batches;
  size_t batch_count;
  const reshard_runs *runs;
  const reshard_varint_batches *columns;
  /* With runs, per batch: its columns as varints, one after another, from
   * the first written on, in the measuring arena (copied when written). */
  const uint8_t **run_columns;
  const size_t *sources;  /* per batch, or NULL for RangeBatches */
  size_t *column_bytes;   /* per batch, RESHARD_RANGE_BATCH_COLUMNS payloads */
  uint8_t *column_length; /* per batch and column, of copies written from
                             the copies: the varint length every value
                             shares, 0 when lengths differ */
  size_t *body_bytes;     /* per batch, its message body */
  size_t size;            /* every batch with its tag and length */
} reshard_range_batches;

/* Measures the RangeBatches of a plan. `runs` and `columns` may be NULL;
 * `columns`, the same batches as varint columns, is used only without
 * `runs`. With `runs`, measuring writes their columns into `arena` (about
 * the batches' size again), so the arena must outlive the write. Returns
 * RESHARD_RESOURCE_EXHAUSTED when the arena cannot grow or the size would
 * pass SIZE_MAX. */
reshard_status
reshard_range_batches_measure(const reshard_copy *copies,
                              const reshard_batch *batches, size_t batch_count,
                              const reshard_runs *runs,
                              const reshard_varint_batches *columns,
                              reshard_arena *arena, reshard_range_batches *out);

/* Writes every batch as field `field` (1..15) of the enclosing message
 * into `out`, which has room for batches->size bytes; returns the end. */
uint8_t *reshard_range_batches_write(const reshard_range_batches *batches,
                                     unsigned field, uint8_t *out);

/* The PlanStats message body: `runs` is left out when 0, as proto3 does
 * (at most 44 bytes). */
size_t reshard_plan_stats_size(uint64_t operations, uint64_t bytes,
                               uint64_t copies_before_coalescing,
                               uint64_t runs);
/* Writes PlanStats as field `field` (1..15), tag and length included. */
uint8_t *reshard_plan_stats_write(uint8_t *out, unsigned field,
                                  uint64_t operations, uint64_t bytes,
                                  uint64_t copies_before_coalescing,
                                  uint64_t runs);

/* A PlanLoadResponse, measured and ready to write. With runs requested
 * (plan->runs.batch_first non-NULL) the batches carry runs. */
typedef struct reshard_plan_response {
  const reshard_load_plan *plan;
  const reshard_wire_plan_names *names;
  reshard_range_batches batches;
  size_t *page_key_bytes; /* strlen of each hit page's key, as measured */
  size_t size;            /* the whole encoded response */
} reshard_plan_response;

/* Measures the response for `plan` and `names`; both must outlive `out`.
 * RESHARD_RESOURCE_EXHAUSTED when the arena cannot grow. */
reshard_status
reshard_plan_response_measure(const reshard_load_plan *plan,
                              const reshard_wire_plan_names *names,
                              reshard_arena *arena, reshard_plan_response *out);

/* Writes the response into `out`, which has room for response->size
 * bytes; returns the bytes written (response->size). */
size_t reshard_plan_response_write(const reshard_plan_response *response,
                                   uint8_t *out);

/* A measured response (PlanLoad's or PlanStore's) as pieces
 * (response_memory.h), to send without copying the plan's varint columns:
 * each column payload of at least `min_reference` bytes is a piece of its
 * own, where the planner wrote it, and every other byte goes into a frame.
 * measure_pieces gives, from the response's batches and size, the frame's
 * size and the most pieces there can be. */
void reshard_response_measure_pieces(const reshard_range_batches *batches,
                                     size_t size, size_t min_reference,
                                     size_t *frame_size, size_t *piece_room);

/* Writes the frame at `frame` and the pieces into `pieces` (room as
 * measured); returns how many. `response` is a reshard_plan_response, or
 * a reshard_store_response for the second: the two share this signature
 * (reshard_response_pieces_fn) so that one packer serves both RPCs. */
typedef size_t reshard_response_pieces_fn(const void *response,
                                          size_t min_reference, uint8_t *frame,
                                          reshard_response_piece *pieces);
reshard_response_pieces_fn reshard_plan_response_write_pieces;

/* A PlanStoreResponse, measured and ready to write. With runs requested
 * (plan->runs.batch_first non-NULL) the batches carry runs. */
typedef struct reshard_store_response {
  const reshard_store_plan *plan;
  const reshard_binding *binding; /* its region ids name the regions */
  const char *layout_id;
  reshard_range_batches batches;
  size_t parts_size; /* the packed part_indexes payload */
  size_t size;       /* the whole encoded response */
} reshard_store_response;

/* Measures the response for `plan`; `plan`, `binding` and `layout_id` must
 * outlive `out`. The bytes are exactly what protobuf-c packs for
 * reshard_wire_store_plan_to_pb's message. RESHARD_RESOURCE_EXHAUSTED
 * when the arena cannot grow. */
reshard_status reshard_store_response_measure(const reshard_store_plan *plan,
                                              const reshard_binding *binding,
                                              const char *layout_id,
                                              reshard_arena *arena,
                                              reshard_store_response *out);

/* Writes the response into `out`, which has room for response->size
 * bytes; returns the bytes written (response->size). */
size_t reshard_store_response_write(const reshard_store_response *response,
                                    uint8_t *out);

/* The same response as pieces (reshard_response_pieces_fn above). */
reshard_response_pieces_fn reshard_store_response_write_pieces;

/* A PlanTransferResponse, measured and ready to write. With runs requested
 * (plan->runs.batch_first non-NULL) the batches carry runs, written from
 * the runs and the batches' bytes alone: plan->copies is not read and may
 * be NULL (a plan made with request.omit_copies). */
typedef struct reshard_transfer_response {
  const reshard_transfer_plan *plan;
  const reshard_transfer_pool *pools; /* the request's: plan->sources index
                                         them */
  const reshard_binding *binding;     /* the target's: its region ids */
  const char *source_placement_id;
  const char *target_placement_id;
  reshard_range_batches batches;
  size_t *source_bytes; /* per source, its TransferSource body */
  size_t size;          /* the whole encoded response */
} reshard_transfer_response;

/* Measures the response for `plan`, whose sources are entries of `pools`
 * (each source: participant, endpoint, memory id and every region of its
 * pool, in the pool's order), whose copies write the regions of `binding`
 * (region ids in its order) and whose batches are, when `columns` is
 * non-NULL and no runs were folded, those varint columns (the six copy
 * fields of each batch; today's reshard_plan_transfer writes none, so the
 * daemon passes NULL and the copies are read). The ids may be NULL or
 * empty (left out). Everything must outlive `out`. The bytes are exactly
 * what protobuf-c packs for the PlanTransferResponse of the same plan.
 * RESHARD_RESOURCE_EXHAUSTED when the arena cannot grow or the size would
 * pass SIZE_MAX. */
reshard_status reshard_transfer_response_measure(
    const reshard_transfer_plan *plan, const reshard_transfer_pool *pools,
    const reshard_binding *binding, const char *source_placement_id,
    const char *target_placement_id, const reshard_varint_batches *columns,
    reshard_arena *arena, reshard_transfer_response *out);

/* Writes the response into `out`, which has room for response->size
 * bytes; returns the bytes written (response->size). */
size_t
reshard_transfer_response_write(const reshard_transfer_response *response,
                                uint8_t *out);

/* The same response as pieces (reshard_response_pieces_fn above). */
reshard_response_pieces_fn reshard_transfer_response_write_pieces;

#endif
