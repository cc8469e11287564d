/* Encodes batches of copies as varint columns (see
 * reshard/varint_columns.h). */
#include <stdint.h>
#include <string.h>

#include "plan_internal.h"
#include "reshard/arena.h"
#include "reshard/checked.h"

/* Bytes of the longest LEB128 varint of a uint64_t. */
enum { VARINT_MAX = 10 };

static reshard_status no_memory(reshard_error *err) {
  return reshard_error_set(err, RESHARD_RESOURCE_EXHAUSTED,
                           "plan: out of memory for varint columns");
}

static void open_batch(reshard__column_encoder *encoder) {
  for (unsigned c = 0; c < RESHARD_COPY_COLUMNS; c++) {
    encoder->cursor[c] = encoder->scratch + c * encoder->column_room;
  }
}

reshard_status reshard__column_encoder_init(reshard__column_encoder *encoder,
                                            size_t max_batch_copies,
                                            size_t max_batches,
                                            reshard_arena *arena,
                                            reshard_error *err) {
  uint64_t room, scratch_size;
  *encoder = (reshard__column_encoder){.arena = arena};
  if (!reshard_mul(max_batch_copies, VARINT_MAX, &room) ||
      !reshard_mul(room, RESHARD_COPY_COLUMNS, &scratch_size) ||
      scratch_size > SIZE_MAX ||
      (encoder->scratch =
           RESHARD_ARENA_ARRAY(arena, uint8_t, (size_t)scratch_size)) == NULL ||
      (encoder->out.bytes = RESHARD_ARENA_ARRAY(arena, const uint8_t *,
                                                max_batches + 1)) == NULL ||
      (encoder->out.column_bytes = RESHARD_ARENA_ARRAY(
           arena, size_t, (max_batches + 1) * RESHARD_COPY_COLUMNS)) == NULL) {
    return no_memory(err);
  }
  encoder->column_room = (size_t)room;
  open_batch(encoder);
  return RESHARD_OK;
}

void reshard__column_encoder_rows(reshard__column_encoder *encoder,
                                  const reshard_copy *copies, size_t count) {
  /* Row by row into the open batch's six scratch columns: each copy is
   * read once, right after the batcher wrote it. */
  uint8_t *c0 = encoder->cursor[0], *c1 = encoder->cursor[1];
  uint8_t *c2 = encoder->cursor[2], *c3 = encoder->cursor[3];
  uint8_t *c4 = encoder->cursor[4], *c5 = encoder->cursor[5];
  for (size_t i = 0; i < count; i++) {
    const reshard_copy *copy = &copies[i];
    c0 = reshard_varint_put(c0, copy->page_index);
    c1 = reshard_varint_put(c1, copy->part_index);
    c2 = reshard_varint_put(c2, copy->part_offset);
    c3 = reshard_varint_put(c3, copy->region_index);
    c4 = reshard_varint_put(c4, copy->region_offset);
    c5 = reshard_varint_put(c5, copy->nbytes);
  }
  uint8_t *cursor[RESHARD_COPY_COLUMNS] = {c0, c1, c2, c3, c4, c5};
  memcpy(encoder->cursor, cursor, sizeof cursor);
  encoder->rows += count;
}

void reshard__column_encoder_group(reshard__column_encoder *encoder,
                                   const reshard_run *group, size_t width) {
  /* Straight from the sequences, in source order (copy k of each in
   * turn): the copies are never written out and read back. */
  uint8_t *c0 = encoder->cursor[0], *c1 = encoder->cursor[1];
  uint8_t *c2 = encoder->cursor[2], *c3 = encoder->cursor[3];
  uint8_t *c4 = encoder->cursor[4], *c5 = encoder->cursor[5];
  for (uint64_t k = 0; k < group->count; k++) {
    for (size_t s = 0; s < width; s++) {
      const reshard_run *sequence = &group[s];
      c0 = reshard_varint_put(c0, sequence->first.page_index);
      c1 = reshard_varint_put(c1, sequence->first.part_index);
      c2 = reshard_varint_put(c2, sequence->first.part_offset +
                                      k * sequence->part_stride);
      c3 = reshard_varint_put(c3, sequence->first.region_index);
      c4 = reshard_varint_put(c4, sequence->first.region_offset +
                                      k * sequence->region_stride);
      c5 = reshard_varint_put(c5, sequence->first.nbytes);
    }
  }
  uint8_t *cursor[RESHARD_COPY_COLUMNS] = {c0, c1, c2, c3, c4, c5};
  memcpy(encoder->cursor, cursor, sizeof cursor);
  encoder->rows += (size_t)group->count * width;
}

reshard_status reshard__column_encoder_close(reshard__column_encoder *encoder,
                                             reshard_error *err) {
  /* The open batch's columns, packed into the arena exactly as long as
   * they are. */
  size_t b = encoder->out.batch_count;
  size_t *sizes = encoder->out.column_bytes + b * RESHARD_COPY_COLUMNS;
  size_t total = 0;
  for (unsigned c = 0; c < RESHARD_COPY_COLUMNS; c++) {
    const uint8_t *start = encoder->scratch + c * encoder->column_room;
    sizes[c] = (size_t)(encoder->cursor[c] - start);
    total += sizes[c];
  }
  uint8_t *bytes = RESHARD_ARENA_ARRAY(encoder->arena, uint8_t, total);
  if (bytes == NULL) {
    return no_memory(err);
  }
  encoder->out.bytes[b] = bytes;
  for (unsigned c = 0; c < RESHARD_COPY_COLUMNS; c++) {
    memcpy(bytes, encoder->scratch + c * encoder->column_room, sizes[c]);
    bytes += sizes[c];
  }
  encoder->out.batch_count = b + 1;
  open_batch(encoder);
  return RESHARD_OK;
}
