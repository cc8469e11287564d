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
  c->batch_source = RESHARD_ARENA_ARRAY(t->arena, size_t, max_batches + 1);
  if (c->batch_source == NULL) {
    return reshard__transfer_no_memory(t);
  }
  return reshard__column_encoder_init(
      &c->encoder, batch_room, max_batches, t->arena,
      request->column_arena != NULL ? request->column_arena : t->arena, t->err);
}

/* How many batches back a batch is looked for among those it repeats. */
enum { RENAMED_LOOKBACK = 4 };

/* The batch of the last RENAMED_LOOKBACK before batch b whose copies
 * equal b's (`copies`, `count`) but for their part and region indices,
 * else b. Where a batch holds whole layers, or a layer whole batches,
 * layers alike (transfer_direct.c, "Regions repeated") make such
 * batches: one layer back, or as many batches back as a layer holds.
 * The comparison stops at the first copy that differs, mostly the
 * first. */
static size_t renamed_batch(const reshard__batcher *batcher, size_t b,
                            const reshard_copy *copies, size_t count) {
  for (size_t back = 1; back <= RENAMED_LOOKBACK && back <= b; back++) {
    const reshard_batch *like = &batcher->batches[b - back];
    /* A batch repeated without its copies (reshard__transfer_columns_
     * repeat) holds none to compare. */
    if (like->count == count && like->first >= batcher->dropped &&
        reshard__copies_renamed(reshard__batcher_copy(batcher, like->first),
                                copies, count)) {
      return b - back;
    }
  }
  return b;
}

reshard_status reshard__transfer_columns_drain(reshard__transfer_columns *c,
                                               reshard_error *err) {
  const reshard__batcher *batcher = c->batcher;
  reshard__column_encoder *encoder = &c->encoder;
  for (; c->encoded_batches < batcher->batch_count; c->encoded_batches++) {
    size_t b = c->encoded_batches;
    const reshard_batch *batch = &batcher->batches[b];
    const reshard_copy *copies = reshard__batcher_copy(batcher, encoder->rows);
    size_t count = batch->first + batch->count - encoder->rows;
    /* A closed batch has a copy, and all of them read its source. */
    c->batch_source[b] = (size_t)copies[count - 1].page_index;
    reshard_status status;
    size_t like = renamed_batch(batcher, b, copies, count);
    if (like < b) {
      status =
          reshard__column_encoder_renamed(encoder, copies, count, like, err);
    } else {
      reshard__column_encoder_rows(encoder, copies, count);
      status = reshard__column_encoder_close(encoder, err);
    }
    if (status) {
      return status;
    }
  }
  return RESHARD_OK;
}

reshard_status reshard__transfer_columns_repeat(reshard__transfer_columns *c,
                                                size_t like,
                                                uint64_t part_index,
                                                uint64_t region_index,
                                                reshard_error *err) {
  const reshard__batcher *batcher = c->batcher;
  for (; c->encoded_batches < batcher->batch_count; c->encoded_batches++) {
    size_t b = c->encoded_batches;
    size_t count = batcher->batches[b].count;
    c->batch_source[b] = c->batch_source[like];
    reshard_status status = reshard__column_encoder_renamed_to(
        &c->encoder, count, like++, part_index, region_index, err);
    if (status) {
      return status;
    }
  }
  return RESHARD_OK;
}

size_t reshard__transfer_columns_read_from(const reshard__transfer_columns *c) {
  const reshard__batcher *batcher = c->batcher;
  size_t from = c->encoder.rows;
  if (batcher->batch_count < RENAMED_LOOKBACK) {
    return 0;
  }
  size_t oldest =
      batcher->batches[batcher->batch_count - RENAMED_LOOKBACK].first;
  return oldest < from ? oldest : from;
}
