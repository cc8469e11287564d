/* Batching (SPEC §2.2 step 5): at most max_operations copies and
 * max_bytes bytes a batch; a copy that does not fit the rest of a batch is
 * split at the byte budget, so every batch but the last is full. */
#include "plan_internal.h"

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

size_t reshard__batch_write(const reshard_copy *copies, size_t count,
                            const reshard__batching *limits, reshard_copy *out,
                            reshard_batch *batches, size_t *out_batches) {
  size_t written = 0;
  size_t batch_count = 0;
  size_t batch_first = 0;
  uint64_t batch_ops = 0;
  uint64_t batch_bytes = 0;
  uint64_t max_ops = limits->max_operations;
  uint64_t max_bytes = limits->max_bytes;
  for (size_t i = 0; i < count; i++) {
    reshard_copy piece = copies[i];
    for (;;) {
      uint64_t room = max_bytes - batch_bytes;
      bool whole = piece.nbytes <= room;
      uint64_t take = whole ? piece.nbytes : room;
      out[written] = piece;
      out[written].nbytes = take;
      written++;
      batch_ops++;
      batch_bytes += take;
      if (batch_ops == max_ops || batch_bytes == max_bytes) {
        batches[batch_count++] =
            (reshard_batch){batch_first, written - batch_first, batch_bytes};
        batch_first = written;
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
  if (batch_ops > 0) {
    batches[batch_count++] =
        (reshard_batch){batch_first, written - batch_first, batch_bytes};
  }
  *out_batches = batch_count;
  return written;
}
