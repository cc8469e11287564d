/* Internal pieces of load planning shared by plan.c, lower.c, coalesce.c
 * and batch.c. Not installed; not part of the public API. */
#ifndef RESHARD_PLAN_INTERNAL_H
#define RESHARD_PLAN_INTERNAL_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "keyed_sort.h"
#include "reshard/arena.h"
#include "reshard/binding.h"
#include "reshard/join.h"
#include "reshard/plan.h"
#include "reshard/runs.h"
#include "reshard/varint_columns.h"

/* The binding ranges that overlap the current page, per (layer, component)
 * group. Pages are visited in increasing order, so each range is opened
 * once and closed once: the cost is linear in the (range, page) pairs. */
typedef struct reshard__range_cursor {
  const reshard_bound_binding *binding;
  size_t *next; /* per group: the next range not yet opened */
  size_t *open; /* per group g: open ranges in open[group_start[g]..] */
  size_t *open_count;
} reshard__range_cursor;

reshard_status reshard__cursor_init(reshard__range_cursor *cursor,
                                    const reshard_bound_binding *binding,
                                    reshard_arena *arena, reshard_error *err);
void reshard__cursor_reset(reshard__range_cursor *cursor);
/* Opens and closes ranges for the token window [page_start, page_end). */
void reshard__cursor_advance(reshard__range_cursor *cursor, uint64_t page_start,
                             uint64_t page_end);

/* What lowering one page produces, counted without producing it. */
typedef struct reshard__page_cost {
  uint64_t copies;
  uint64_t bytes;
} reshard__page_cost;

/* Context shared by counting and lowering one page. */
typedef struct reshard__page_lowering {
  const reshard_join *join;
  const reshard__range_cursor *cursor;
  uint64_t page_index;
  uint64_t page_size;
  uint64_t head_bytes[2]; /* by component - 1 */
} reshard__page_lowering;

/* Counts the copies (SPEC §2.2 step 3 granularity) and bytes of one page. */
reshard__page_cost reshard__lower_count(const reshard__page_lowering *page);

/* Writes the page's copies into `out` (room for the counted copies) in
 * lowering order; returns how many. */
size_t reshard__lower_page(const reshard__page_lowering *page,
                           reshard_copy *out);

/* Sorts the copies of one page by (part, part_offset) and merges those
 * whose source and destination both continue the previous copy, writing
 * the result to `out`; returns the number written. `keyed` and `spare` are
 * scratch with room for `count` entries. */
size_t reshard__coalesce_page(const reshard_copy *copies, size_t count,
                              const uint64_t *part_base, reshard__keyed *keyed,
                              reshard__keyed *spare, reshard_copy *out);

/* Splits coalesced copies into batches (SPEC §2.2 step 5). */
typedef struct reshard__batching {
  uint64_t max_operations; /* >= 1 */
  uint64_t max_bytes;      /* >= 1 */
} reshard__batching;

/* Upper bounds of the copies and batches batching can produce, for sizing
 * the output before writing it. */
void reshard__batch_bounds(size_t count, uint64_t total_bytes,
                           const reshard__batching *limits, size_t *max_copies,
                           size_t *max_batches);

/* Streams coalesced copies into batches: push them in plan order, then
 * finish. `out` and `batches` are sized by reshard__batch_bounds. */
typedef struct reshard__batcher {
  reshard__batching limits;
  reshard_copy *out;
  reshard_batch *batches;
  size_t written;     /* copies in `out` */
  size_t batch_count; /* closed batches */
  size_t batch_first;
  uint64_t batch_ops;
  uint64_t batch_bytes;
  uint64_t pushed; /* copies pushed: the count after coalescing */
} reshard__batcher;

void reshard__batcher_init(reshard__batcher *batcher,
                           const reshard__batching *limits, reshard_copy *out,
                           reshard_batch *batches);
void reshard__batcher_push(reshard__batcher *batcher,
                           const reshard_copy *copies, size_t count);
/* Whether `count` copies moving `bytes` in all fit the open batch with
 * room to spare, so none is split and no batch closes among them. */
bool reshard__batcher_fits(const reshard__batcher *batcher, size_t count,
                           uint64_t bytes);
/* Takes `count` copies moving `bytes` that the caller wrote at
 * out + written, after reshard__batcher_fits said they fit: what
 * reshard__batcher_push of the same copies would have done. */
void reshard__batcher_commit(reshard__batcher *batcher, size_t count,
                             uint64_t bytes);
void reshard__batcher_finish(reshard__batcher *batcher);

/* Folds batches into runs one at a time (SPEC §2.2 step 7), so the
 * planner can fold each batch while its copies are still in cache. */
struct fold_slot;
typedef struct reshard__run_folder {
  reshard_run *runs;
  size_t run_count;
  size_t *batch_first; /* batch_count + 1 entries once finished */
  size_t batch_count;
  struct fold_slot *slots; /* class table, mask + 1 slots */
  size_t mask;
  reshard_arena *arena; /* where the table grows */
} reshard__run_folder;

/* Sizes the folder for `max_copies` copies in all and `max_batches`
 * batches; the class table grows in `arena` as batches need. */
reshard_status reshard__run_folder_init(reshard__run_folder *folder,
                                        size_t max_copies, size_t max_batches,
                                        reshard_arena *arena,
                                        reshard_error *err);
/* Folds the next batch, `count` copies. */
reshard_status reshard__run_folder_batch(reshard__run_folder *folder,
                                         const reshard_copy *copies,
                                         size_t count, reshard_error *err);
void reshard__run_folder_finish(const reshard__run_folder *folder,
                                reshard_runs *out);

/* Encodes batches as varint columns (see reshard/varint_columns.h) as
 * the batcher writes their copies, so each copy is encoded while it is
 * still in cache: push the rows written since the last call, close a
 * batch when the batcher closed it. */
typedef struct reshard__column_encoder {
  reshard_varint_batches out;
  reshard_arena *arena;
  uint8_t *scratch;   /* RESHARD_COPY_COLUMNS columns of column_room bytes */
  size_t column_room; /* the longest column of a batch */
  uint8_t *cursor[RESHARD_COPY_COLUMNS]; /* the open batch's column ends */
  size_t rows;                           /* copies encoded */
} reshard__column_encoder;

/* Sizes the encoder for at most `max_batch_copies` copies in a batch and
 * `max_batches` batches. */
reshard_status reshard__column_encoder_init(reshard__column_encoder *encoder,
                                            size_t max_batch_copies,
                                            size_t max_batches,
                                            reshard_arena *arena,
                                            reshard_error *err);
/* Appends `count` copies to the open batch. */
void reshard__column_encoder_rows(reshard__column_encoder *encoder,
                                  const reshard_copy *copies, size_t count);
/* Closes the open batch. */
reshard_status reshard__column_encoder_close(reshard__column_encoder *encoder,
                                             reshard_error *err);

#endif
