/* A transfer plan's batches as varint columns, encoded as the batcher
 * closes them (see transfer_internal.h): the bytes a PlanTransferResponse
 * without runs carries, so the daemon copies them instead of reading
 * every copy of a plan that no longer fits the core's caches. */
#include "plan/transfer_internal.h"

reshard_status reshard__transfer_columns_init(const reshard__transfer *t,
                                              reshard__transfer_columns *c,
                                              const reshard__batcher *batcher,
                                              size_t max_copies,
                                              size_t max_batches) {
  const reshard_transfer_request *request = t->request;
  uint64_t per_batch = request->limits.max_batch_operations;
  size_t batch_room = per_batch < max_copies ? (size_t)per_batch : max_copies;
  c->batcher = batcher;
  c->encoded_batches = 0;
  return reshard__column_encoder_init(
      &c->encoder, batch_room, max_batches, t->arena,
      request->column_arena != NULL ? request->column_arena : t->arena, t->err);
}

reshard_status reshard__transfer_columns_drain(reshard__transfer_columns *c,
                                               reshard_error *err) {
  const reshard__batcher *batcher = c->batcher;
  reshard__column_encoder *encoder = &c->encoder;
  for (; c->encoded_batches < batcher->batch_count; c->encoded_batches++) {
    const reshard_batch *batch = &batcher->batches[c->encoded_batches];
    reshard__column_encoder_rows(encoder, batcher->out + encoder->rows,
                                 batch->first + batch->count - encoder->rows);
    reshard_status status = reshard__column_encoder_close(encoder, err);
    if (status) {
      return status;
    }
  }
  return RESHARD_OK;
}
