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

/* copies[first .. first + count) form one batch of `bytes` bytes. */
typedef struct reshard_batch {
  size_t first;
  size_t count;
  uint64_t bytes;
} reshard_batch;

#endif
