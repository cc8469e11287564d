/* A batched plan's copies as varint columns: each batch's six copy fields
 * (page_index, part_index, part_offset, region_index, region_offset,
 * nbytes) as LEB128 varints, one column after another. That is the packed
 * encoding of RangeBatch fields 1..6, so a response encoder only copies
 * these bytes. The planner encodes each batch right after it is batched,
 * while its copies are still in cache; re-reading a large plan's copies
 * later (48 bytes each, megabytes that no longer fit the core's caches)
 * cost more than the encoding itself. */
#ifndef RESHARD_VARINT_COLUMNS_H
#define RESHARD_VARINT_COLUMNS_H

#include <stddef.h>
#include <stdint.h>

/* Fields of reshard_copy, in declaration order. */
#define RESHARD_COPY_COLUMNS 6

/* Column c of batch b starts at columns[b * RESHARD_COPY_COLUMNS + c]
 * and is column_bytes[b * RESHARD_COPY_COLUMNS + c] bytes long. A batch
 * encoded as an earlier one renamed (other part and region indices)
 * points its other four columns at that batch's bytes, shared, not
 * copied. Everything lives in the plan's arena. */
typedef struct reshard_varint_batches {
  const uint8_t **columns;
  size_t *column_bytes;
  size_t batch_count;
} reshard_varint_batches;

/* Bytes of `value` as a LEB128 varint, 1 to 10. */
static inline size_t reshard_varint_length(uint64_t value) {
  /* 7 bits a byte, 0 still one byte: ceil(bits / 7) as (bits * 9 + 64) / 64,
   * exact for 1..64 bits and free of a division. */
  unsigned bits = 64 - (unsigned)__builtin_clzll(value | 1);
  return (bits * 9 + 64) >> 6;
}

/* Writes `value` as a LEB128 varint (1 to 10 bytes) at `out`; returns the
 * byte after it. */
static inline uint8_t *reshard_varint_put(uint8_t *out, uint64_t value) {
  /* Indexes and sizes are mostly one or two bytes: those skip the loop. */
  if (value < 0x80) {
    *out = (uint8_t)value;
    return out + 1;
  }
  if (value < 0x4000) {
    out[0] = (uint8_t)(value | 0x80);
    out[1] = (uint8_t)(value >> 7);
    return out + 2;
  }
  do {
    *out++ = (uint8_t)(value | 0x80);
    value >>= 7;
  } while (value >= 0x80);
  *out++ = (uint8_t)value;
  return out;
}

#endif
