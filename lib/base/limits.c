#include "reshard/limits.h"

#define RESHARD_TIB (1024ull * 1024 * 1024 * 1024)

reshard_limits reshard_limits_default(void) {
  reshard_limits limits = {
      .max_layout_parts = 100000,
      .max_layout_fragments = 100000,
      .max_layout_bytes = RESHARD_TIB,
      .max_ranges = 100000,
      .max_operations = 1000000,
      .max_bytes = RESHARD_TIB,
      .max_batch_operations = 4096,
      .max_batch_bytes = 64ull * 1024 * 1024,
      .max_validation_work = 10000000,
      .max_page_keys = 65536,
      .max_block_ids = 1048576,
      .max_pool_tensors = 100000,
  };
  return limits;
}

static uint64_t clamp_one(uint64_t cap, uint64_t requested) {
  return requested != 0 && requested < cap ? requested : cap;
}

reshard_limits reshard_limits_clamp(const reshard_limits *caps,
                                    const reshard_limits *requested) {
  reshard_limits out;
  out.max_layout_parts =
      clamp_one(caps->max_layout_parts, requested->max_layout_parts);
  out.max_layout_fragments =
      clamp_one(caps->max_layout_fragments, requested->max_layout_fragments);
  out.max_layout_bytes =
      clamp_one(caps->max_layout_bytes, requested->max_layout_bytes);
  out.max_ranges = clamp_one(caps->max_ranges, requested->max_ranges);
  out.max_operations =
      clamp_one(caps->max_operations, requested->max_operations);
  out.max_bytes = clamp_one(caps->max_bytes, requested->max_bytes);
  out.max_batch_operations =
      clamp_one(caps->max_batch_operations, requested->max_batch_operations);
  out.max_batch_bytes =
      clamp_one(caps->max_batch_bytes, requested->max_batch_bytes);
  out.max_validation_work =
      clamp_one(caps->max_validation_work, requested->max_validation_work);
  out.max_page_keys = clamp_one(caps->max_page_keys, requested->max_page_keys);
  out.max_block_ids = clamp_one(caps->max_block_ids, requested->max_block_ids);
  out.max_pool_tensors =
      clamp_one(caps->max_pool_tensors, requested->max_pool_tensors);
  return out;
}
