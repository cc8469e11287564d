/* The explicit plan's unit (SPEC §2.2 steps 3-5): byte copies grouped in
 * batches. Shared by load plans, runs and any other plan of the same shape. */
#ifndef RESHARD_COPY_H
#define RESHARD_COPY_H

#include <stddef.h>
#include <stdint.h>

/* One byte copy: Part bytes [part_offset, +nbytes) of page `page_index` go
 * to region `region_index` at [region_offset, +nbytes). */
typedef struct reshard_copy {
  uint64_t page_index;
  uint64_t part_index;
  uint64_t part_offset;
  uint64_t region_index;
  uint64_t region_offset;
  uint64_t nbytes;
} reshard_copy;

/* Copies are read and written as rows of six uint64_t in RangeBatch's
 * column order (SPEC §3.3 fields 1..6): the varint column encoder, the
 * copy writer and the daemon's response writer rely on it. */
#ifndef __cplusplus
_Static_assert(sizeof(reshard_copy) == 6 * sizeof(uint64_t) &&
                   offsetof(reshard_copy, page_index) == 0 &&
                   offsetof(reshard_copy, part_index) == 8 &&
                   offsetof(reshard_copy, part_offset) == 16 &&
                   offsetof(reshard_copy, region_index) == 24 &&
                   offsetof(reshard_copy, region_offset) == 32 &&
                   offsetof(reshard_copy, nbytes) == 40,
               "reshard_copy is six uint64_t in column order");
#endif

/* copies[first .. first + count) form one batch of `bytes` bytes. */
typedef struct reshard_batch {
  size_t first;
  size_t count;
  uint64_t bytes;
} reshard_batch;

#endif
