/* The repeated RangeBatch (or TransferBatch) field of a plan response,
 * encoded straight from the plan into wire bytes, without building the
 * protobuf-c message first: for a large plan that message is six (nine
 * with runs) uint64 arrays per batch which protobuf-c would then walk twice
 * (size, then pack). The three responses (plan_response.h,
 * transfer_response.h) write their other fields around these.
 *
 * Encoding is measure, then write. A plan that carries its batches as
 * varint columns (reshard_load_request.varint_columns) is measured and
 * written from those: column sizes read, column bytes copied (or, written
 * as pieces, long columns referenced where they lie). Otherwise measuring
 * reads every copy (or run) once, row by row, and keeps each batch's column
 * sizes and whether all of a column's values share one varint length;
 * writing then fills a batch column by column (its rows stay in cache),
 * with a branch-free loop for the columns of one length.
 *
 * A TransferBatch is a RangeBatch whose first column, the source of every
 * copy (reshard_copy.page_index of a transfer plan), is one scalar for the
 * whole batch (source_index, field 1); fields 2..10 are RangeBatch's. Both
 * are encoded by the same code (reshard_range_batches.sources).
 *
 * Measuring checks every size it adds up: batches that would pass SIZE_MAX
 * bytes are RESHARD_RESOURCE_EXHAUSTED, never a wrapped size. */
#ifndef RESHARD_RANGE_BATCHES_H
#define RESHARD_RANGE_BATCHES_H

#include <stddef.h>
#include <stdint.h>

#include "reshard/arena.h"
#include "reshard/copy.h"
#include "reshard/plan.h"
#include "reshard/runs.h"
#include "reshard/varint_columns.h"
#include "wire/response_memory.h"

/* RangeBatch columns: fields 1..6 (copies) and 8..10 (runs). */
#define RESHARD_RANGE_BATCH_COLUMNS 9

/* The batches of a response, measured. `runs` NULL encodes one entry per
 * copy (run columns empty), from `columns` when non-NULL; otherwise one
 * entry per run of runs->runs. With `sources` the batches are
 * TransferBatches: sources[b] is batch b's source_index and the first
 * column is left out. Everything points into the caller's plan and arena. */
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

/* Measures the batches of a plan: RangeBatches, or TransferBatches when
 * `sources` (per batch, the caller's) is non-NULL. `runs` and `columns`
 * may be NULL; `columns`, the same batches as varint columns, is used only
 * without `runs`. With `runs`, measuring writes their columns into `arena`
 * (about the batches' size again), so the arena must outlive the write.
 * Returns RESHARD_RESOURCE_EXHAUSTED when the arena cannot grow or the
 * size would pass SIZE_MAX. */
reshard_status reshard_range_batches_measure(
    const reshard_copy *copies, const reshard_batch *batches,
    size_t batch_count, const reshard_runs *runs,
    const reshard_varint_batches *columns, const size_t *sources,
    reshard_arena *arena, reshard_range_batches *out);

/* Where the long column payloads of a response sent as pieces
 * (response_memory.h) go: each is a piece of its own, where the planner
 * wrote it, between pieces of the frame that holds every other byte. The
 * writer of a whole response starts one at its frame and ends it
 * (reshard_piece_sink_end) where the response ends. */
typedef struct reshard_piece_sink {
  reshard_response_piece *pieces; /* room as reshard_response_measure_pieces
                                     says */
  size_t count;
  const uint8_t *frame_start; /* of the frame piece being written */
  size_t min_reference;       /* shorter payloads are copied */
} reshard_piece_sink;

/* Ends the frame piece at `out`, if it has bytes. */
void reshard_piece_sink_end(reshard_piece_sink *sink, const uint8_t *out);

/* Writes every batch as field `field` (1..15) of the enclosing message
 * into `out`, which has room for batches->size bytes (less what `sink`
 * takes); returns the end. `sink` NULL copies every payload into `out`. */
uint8_t *reshard_range_batches_write(const reshard_range_batches *batches,
                                     unsigned field, uint8_t *out,
                                     reshard_piece_sink *sink);

/* Column payloads at least this long are sent where the planner wrote
 * them (the daemon's minimum reference); shorter ones cost less to copy
 * than a slice of their own. */
#define RESHARD_RESPONSE_REFERENCE_MIN_BYTES 4096

/* A measured response of `size` bytes whose batches are `batches`, as
 * pieces, to send without copying the plan's varint columns: each column
 * payload of at least `min_reference` bytes is a piece of its own, and
 * every other byte goes into a frame. Gives the frame's size and the most
 * pieces there can be. */
void reshard_response_measure_pieces(const reshard_range_batches *batches,
                                     size_t size, size_t min_reference,
                                     size_t *frame_size, size_t *piece_room);

/* Writes a measured response's frame at `frame` and its pieces into
 * `pieces` (room as measured); returns how many. `response` is a
 * reshard_plan_response, a reshard_store_response or a
 * reshard_transfer_response, each with its own function of this type, so
 * that one packer serves every RPC. */
typedef size_t reshard_response_pieces_fn(const void *response,
                                          size_t min_reference, uint8_t *frame,
                                          reshard_response_piece *pieces);

/* Writes a measured response of `size` bytes (its `batches`, written by
 * `write`) as the daemon sends it: each column payload of
 * RESHARD_RESPONSE_REFERENCE_MIN_BYTES or more referenced where the
 * planner wrote it, the frame in `frame_arena` (the planner's column arena,
 * so that what holds the columns holds the frame too), the piece list in
 * `piece_arena`. Sets *pieces and *count; RESHARD_RESOURCE_EXHAUSTED when
 * an arena cannot grow. */
reshard_status reshard_response_pack_pieces(
    const reshard_range_batches *batches, size_t size, const void *response,
    reshard_response_pieces_fn *write, reshard_arena *frame_arena,
    reshard_arena *piece_arena, reshard_response_piece **pieces, size_t *count);

#endif
