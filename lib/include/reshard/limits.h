/* Server caps and per-request limits (SPEC §2.3). */
#ifndef RESHARD_LIMITS_H
#define RESHARD_LIMITS_H

#include <stdint.h>

typedef struct reshard_limits {
  uint64_t max_layout_parts;
  uint64_t max_layout_fragments;
  uint64_t max_layout_bytes;
  uint64_t max_ranges;
  uint64_t max_operations;
  uint64_t max_bytes;
  uint64_t max_batch_operations;
  uint64_t max_batch_bytes;
  uint64_t max_validation_work;
  uint64_t max_page_keys;
  uint64_t max_block_ids;    /* per block table (SPEC §1.5a) */
  uint64_t max_pool_tensors; /* per memory pool */
} reshard_limits;

/* The defaults of SPEC §2.3. */
reshard_limits reshard_limits_default(void);

/* The limits a request gets: each field of `requested` that is non-zero
 * and below the cap replaces it; zero or larger values keep the cap. */
reshard_limits reshard_limits_clamp(const reshard_limits *caps,
                                    const reshard_limits *requested);

#endif
