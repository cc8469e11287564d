/* reshard_copies: the copies a RangeBatch stands for, one at a time.
 *
 * A PlanLoadResponse (or PlanStoreResponse) batch holds either one entry
 * per copy or, when the request set `runs`, one entry per strided run
 * (SPEC §2.2 step 7): entry i stands for the copies k = 0 .. run_count[i]-1
 * moving nbytes[i] bytes from part_offset[i] + k * part_stride[i] to
 * region_offset[i] + k * region_stride[i]. Executors that take runs as they
 * are (a 2-D copy per entry) read the columns directly; this iterator is for
 * those that execute one copy at a time. It reads the batch and never
 * changes or keeps it.
 *
 * Usage:
 *   reshard_copy_iter it;
 *   reshard_copy_iter_init(&it, batch);
 *   reshard_plan_copy copy;
 *   int rc;
 *   while ((rc = reshard_copy_iter_next(&it, &copy)) == 1)
 *     memcpy(region(copy.region_index) + copy.region_offset,
 *            part(copy.page_index, copy.part_index) + copy.part_offset,
 *            copy.nbytes);
 *   if (rc < 0) ... the batch is malformed
 */
#ifndef RESHARD_COPIES_H
#define RESHARD_COPIES_H

#include <stddef.h>
#include <stdint.h>

#include "reshard/v1/planner.pb-c.h"

typedef struct reshard_plan_copy {
  uint64_t page_index;
  uint64_t part_index;
  uint64_t part_offset;
  uint64_t region_index;
  uint64_t region_offset;
  uint64_t nbytes;
} reshard_plan_copy;

typedef struct reshard_copy_iter {
  const Reshard__V1__RangeBatch *batch; /* borrowed */
  size_t entry;                         /* the current entry */
  uint64_t step;                        /* the next copy within it */
} reshard_copy_iter;

/* Starts at the first copy of `batch`, which must outlive the iterator. */
void reshard_copy_iter_init(reshard_copy_iter *it,
                            const Reshard__V1__RangeBatch *batch);

/* Stores the next copy in *copy and returns 1; returns 0 after the last
 * copy, and -1 when the batch is malformed: the six copy columns of
 * different lengths, run columns neither empty nor of that length, a
 * run_count of 0, or an offset past 2^64. Copies come in entry order, each
 * run's copies in k order. */
int reshard_copy_iter_next(reshard_copy_iter *it, reshard_plan_copy *copy);

/* Checks the batch's columns as reshard_copy_iter_next does and stores in
 * *copies the number of copies the batch stands for (the sum of its
 * run_count, or its entry count without runs). Returns 0, or -1 when the
 * batch is malformed or the count passes 2^64. */
int reshard_batch_copy_count(const Reshard__V1__RangeBatch *batch,
                             uint64_t *copies);

#endif /* RESHARD_COPIES_H */
