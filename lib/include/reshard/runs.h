/* Strided runs (SPEC §2.2 step 7): the copies of each batch of an explicit
 * plan folded into entries a 2-D copy engine executes in one call. Used by
 * load plans (reshard_plan_load with request.runs) and by any other plan
 * made of reshard_copy and reshard_batch arrays, the store direction
 * included: the fold only reads the six copy fields and the batch bounds. */
#ifndef RESHARD_RUNS_H
#define RESHARD_RUNS_H

#include <stddef.h>
#include <stdint.h>

#include "reshard/arena.h"
#include "reshard/copy.h"
#include "reshard/error.h"

/* `count` copies: copy k (0 <= k < count) moves first.nbytes bytes from
 * Part offset first.part_offset + k * part_stride to region offset
 * first.region_offset + k * region_stride, page, part and region as in
 * `first`. A run of one copy has both strides 0. As a 2-D copy: height =
 * count, width = first.nbytes, source pitch = part_stride, destination
 * pitch = region_stride (for a store plan the two ends swap roles). */
typedef struct reshard_run {
  reshard_copy first;
  uint64_t count;
  uint64_t part_stride;
  uint64_t region_stride;
} reshard_run;

/* The runs of a batched plan. Batch b's runs are runs[batch_first[b] ..
 * batch_first[b + 1]); batch_first has batch_count + 1 entries. A run never
 * crosses a batch, so the batches' byte totals are the explicit plan's.
 * batch_like, when the planner kept it (else NULL), names per batch an
 * earlier batch whose runs are its own but for their part and region
 * indices (a transfer's regions written as ones before them, renamed), or
 * the batch itself: an encoder takes that batch's other columns as they
 * are. */
typedef struct reshard_runs {
  reshard_run *runs;
  size_t run_count;
  size_t *batch_first;
  size_t batch_count;
  size_t *batch_like;
} reshard_runs;

/* Folds an explicit batched plan into runs: within each batch, copies of
 * equal (page, part, region, nbytes) form a class, and each class is
 * folded greedily in the batch's order — a copy extends its class's
 * current run when both its offsets continue that run's progression with
 * strides >= 0 (the run's second copy fixes them), otherwise it starts the
 * class's next run. Runs are in the order of their first copies.
 *
 * `copies` and `batches` are the explicit plan (batches[b] covers copies
 * [first, first + count)); they are only read. Within a batch the copies of
 * one class must come in strictly increasing part offset, as every plan
 * ordered by its explicit key does (SPEC §2.2 step 4, §2.5); otherwise the
 * fold fails with INVALID_ARGUMENT naming the copy. Everything `out`
 * points to lives in `arena`; RESOURCE_EXHAUSTED when it cannot grow.
 * On failure *out is zeroed. */
reshard_status reshard_runs_fold(const reshard_copy *copies,
                                 const reshard_batch *batches,
                                 size_t batch_count, reshard_arena *arena,
                                 reshard_runs *out, reshard_error *err);

/* Copy k (0 <= k < run->count) of a run. */
static inline reshard_copy reshard_run_copy(const reshard_run *run,
                                            uint64_t k) {
  reshard_copy copy = run->first;
  copy.part_offset += k * run->part_stride;
  copy.region_offset += k * run->region_stride;
  return copy;
}

#endif
