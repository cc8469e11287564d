/* Batching (SPEC §2.2 step 5): at most max_operations copies and
 * max_bytes bytes a batch; a copy that does not fit the rest of a batch is
 * split at the byte budget, so every batch but the last is full. */
#include "plan/plan_internal.h"

void reshard__batch_bounds(size_t count, uint64_t total_bytes,
                           const reshard__batching *limits, size_t *max_copies,
                           size_t *max_batches) {
  /* A split happens only where a batch fills its byte budget, so there are
   * at most total_bytes / max_bytes of them; batches close on a full op
   * count or a full byte budget, plus the last one. */
  uint64_t splits = total_bytes / limits->max_bytes;
  *max_copies = count + (size_t)splits;
  *max_batches = (size_t)(*max_copies / limits->max_operations + splits + 1);
}

void reshard__batcher_init(reshard__batcher *batcher,
                           const reshard__batching *limits, reshard_copy *out,
                           reshard_batch *batches) {
  *batcher = (reshard__batcher){
      .limits = *limits,
      .out = out,
      .batches = batches,
  };
}

static void close_batch(reshard__batcher *batcher) {
  batcher->batches[batcher->batch_count++] = (reshard_batch){
      batcher->batch_first, batcher->written - batcher->batch_first,
      batcher->batch_bytes};
  batcher->batch_first = batcher->written;
  batcher->batch_ops = 0;
  batcher->batch_bytes = 0;
}

void reshard__batcher_push(reshard__batcher *batcher,
                           const reshard_copy *copies, size_t count) {
  /* The state lives in locals for the loop; the common case, a copy that
   * fits the open batch, is one store and two additions. */
  reshard_copy *out = reshard__batcher_copy(batcher, batcher->written);
  uint64_t max_ops = batcher->limits.max_operations;
  uint64_t max_bytes = batcher->limits.max_bytes;
  uint64_t batch_ops = batcher->batch_ops;
  uint64_t batch_bytes = batcher->batch_bytes;
  for (size_t i = 0; i < count; i++) {
    reshard_copy piece = copies[i];
    for (;;) {
      uint64_t room = max_bytes - batch_bytes;
      bool whole = piece.nbytes <= room;
      uint64_t take = whole ? piece.nbytes : room;
      *out = piece;
      out->nbytes = take;
      out++;
      batch_ops++;
      batch_bytes += take;
      if (batch_ops == max_ops || batch_bytes == max_bytes) {
        batcher->written = (size_t)(out - batcher->out) + batcher->dropped;
        batcher->batch_bytes = batch_bytes;
        close_batch(batcher);
        batch_ops = 0;
        batch_bytes = 0;
      }
      if (whole) {
        break;
      }
      piece.part_offset += take;
      piece.region_offset += take;
      piece.nbytes -= take;
    }
  }
  batcher->written = (size_t)(out - batcher->out) + batcher->dropped;
  batcher->batch_ops = batch_ops;
  batcher->batch_bytes = batch_bytes;
  batcher->pushed += count;
}

bool reshard__batcher_fits(const reshard__batcher *batcher, size_t count,
                           uint64_t bytes) {
  return count <= batcher->limits.max_operations - batcher->batch_ops &&
         bytes <= batcher->limits.max_bytes - batcher->batch_bytes;
}

void reshard__batcher_commit(reshard__batcher *batcher, size_t count,
                             uint64_t bytes) {
  batcher->written += count;
  batcher->batch_ops += count;
  batcher->batch_bytes += bytes;
  batcher->pushed += count;
  /* As a push of the same copies would: the batch closes at its last copy
   * when that fills it. */
  if (batcher->batch_ops == batcher->limits.max_operations ||
      batcher->batch_bytes == batcher->limits.max_bytes) {
    close_batch(batcher);
  }
}

void reshard__batcher_finish(reshard__batcher *batcher) {
  if (batcher->batch_ops > 0) {
    close_batch(batcher);
  }
}
