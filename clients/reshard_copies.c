/* reshard_copies: expanding a RangeBatch's entries into copies. */
#include "reshard_copies.h"

#include <stdbool.h>

/* Copy columns of one length; run columns empty or of that length. */
static bool columns_agree(const Reshard__V1__RangeBatch *b) {
  size_t n = b->n_nbytes;
  if (b->n_page_index != n || b->n_part_index != n || b->n_part_offset != n ||
      b->n_region_index != n || b->n_region_offset != n)
    return false;
  bool runs =
      b->n_run_count > 0 || b->n_part_stride > 0 || b->n_region_stride > 0;
  return !runs || (b->n_run_count == n && b->n_part_stride == n &&
                   b->n_region_stride == n);
}

void reshard_copy_iter_init(reshard_copy_iter *it,
                            const Reshard__V1__RangeBatch *batch) {
  it->batch = batch;
  it->entry = 0;
  it->step = 0;
}

int reshard_copy_iter_next(reshard_copy_iter *it, reshard_plan_copy *copy) {
  const Reshard__V1__RangeBatch *b = it->batch;
  if (!columns_agree(b))
    return -1;
  if (it->entry >= b->n_nbytes)
    return 0;
  size_t i = it->entry;
  uint64_t count = b->n_run_count ? b->run_count[i] : 1;
  if (count == 0)
    return -1;
  uint64_t k = it->step;
  uint64_t part_step = 0, region_step = 0;
  if (k > 0 && (__builtin_mul_overflow(k, b->part_stride[i], &part_step) ||
                __builtin_mul_overflow(k, b->region_stride[i], &region_step)))
    return -1;
  *copy = (reshard_plan_copy){
      .page_index = b->page_index[i],
      .part_index = b->part_index[i],
      .region_index = b->region_index[i],
      .nbytes = b->nbytes[i],
  };
  if (__builtin_add_overflow(b->part_offset[i], part_step,
                             &copy->part_offset) ||
      __builtin_add_overflow(b->region_offset[i], region_step,
                             &copy->region_offset))
    return -1;
  if (++it->step == count) {
    it->entry++;
    it->step = 0;
  }
  return 1;
}

int reshard_batch_copy_count(const Reshard__V1__RangeBatch *batch,
                             uint64_t *copies) {
  if (!columns_agree(batch))
    return -1;
  if (batch->n_run_count == 0) {
    *copies = batch->n_nbytes;
    return 0;
  }
  uint64_t total = 0;
  for (size_t i = 0; i < batch->n_run_count; i++) {
    if (batch->run_count[i] == 0 ||
        __builtin_add_overflow(total, batch->run_count[i], &total))
      return -1;
  }
  *copies = total;
  return 0;
}
