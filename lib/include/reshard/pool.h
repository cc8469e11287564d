/* Memory pools and block tables (SPEC §1.5a): one participant's KV memory
 * as an engine allocates it — num_blocks blocks of block_size tokens, one
 * tensor per owned (layer, component) — registered once, and the block
 * table a request names its blocks with. A validated pool plus a block
 * table give the same bound binding (binding.h) an explicit binding with
 * one range per block, layer and component would, without that binding's
 * validation: the pool's rules were proven once, and a table's are checked
 * in one pass over its ids. */
#ifndef RESHARD_POOL_H
#define RESHARD_POOL_H

#include <stddef.h>
#include <stdint.h>

#include "reshard/binding.h"
#include "reshard/descriptor.h"
#include "reshard/error.h"
#include "reshard/limits.h"
#include "reshard/placement.h"

/* Value (block b, slot s, head h) of the tensor starts at the region's
 * address + offset_bytes + b * block_stride_bytes + s * token_stride_bytes
 * + (h - head_start) * head_stride_bytes, head_start being the
 * participant's: a tensor always holds the participant's whole head
 * interval. */
typedef struct reshard_pool_tensor {
  uint64_t global_layer_id;
  reshard_component component;
  const char *region_id;
  uint64_t offset_bytes;
  uint64_t block_stride_bytes;
  uint64_t token_stride_bytes;
  uint64_t head_stride_bytes;
} reshard_pool_tensor;

/* As decoded from the request; storage owned by the builder. */
typedef struct reshard_pool {
  const char *participant_id;
  const char *endpoint;
  reshard_region *regions;
  size_t region_count;
  uint64_t block_size; /* tokens per block */
  uint64_t num_blocks;
  reshard_pool_tensor *tensors;
  size_t tensor_count;
} reshard_pool;

/* One owned (layer, component) of a validated pool, in the planner's
 * terms. Strides of an axis of count 1 take no part in addressing; they
 * are set to what a packed axis would have (head: the head's bytes;
 * token: the head row's extent), so the pool lowers exactly like the
 * explicit binding a client would write for it. */
typedef struct reshard_pool_group {
  uint64_t region_index; /* into the pool's regions, in their order */
  uint64_t offset;       /* region offset of block 0, slot 0, first head */
  uint64_t block_stride;
  uint64_t token_stride;
  uint64_t head_stride;
  uint64_t head_bytes; /* of the component */
  size_t tensor;       /* index into pool.tensors, for messages */
  bool present;        /* false for V of a single-tensor cache */
} reshard_pool_group;

/* A pool after validation. `groups` has part->layer_count * 2 entries,
 * group g = layer_index * 2 + (component - 1) as in reshard_bound_binding;
 * it lives in the arena given to reshard_pool_validate. */
typedef struct reshard_bound_pool {
  const reshard_placement_part *part;
  uint64_t block_size;
  uint64_t num_blocks;
  size_t region_count;
  reshard_pool_group *groups;
  size_t group_count;
} reshard_bound_pool;

/* Validates `pool` against the participant's `part` of a normalized
 * placement whose descriptor is `descriptor`: every rule of SPEC §1.5a
 * (one tensor per owned layer and component and none other; strides that
 * nest; the last block inside its region; alignment to itemsize; no two
 * tensors sharing a byte, interleaved K/V per block included), with the
 * tensor count held to limits->max_pool_tensors and the regions to
 * limits->max_ranges before any work. Messages start with `path` (e.g.
 * "pool" or "pooled.inline_pool"). The pool is not changed; `out` points
 * into `arena` and into `part`. Cost: O(tensors · log tensors). */
reshard_status reshard_pool_validate(const reshard_pool *pool,
                                     const reshard_descriptor *descriptor,
                                     const reshard_placement_part *part,
                                     const reshard_limits *limits,
                                     const char *path, reshard_arena *arena,
                                     reshard_bound_pool *out,
                                     reshard_error *err);

/* Checks a block table of `count` ids for pools of `num_blocks` blocks
 * of `block_size` tokens over the token span [0, token_span): at most
 * limits->max_block_ids ids (checked first), each below num_blocks, none
 * repeated (entries past the span included), at least
 * ceil(token_span / block_size) of them. One pass; `scratch` holds a
 * bitmap or a sorted copy. Messages name `path` ("pooled.block_ids",
 * "source_block_ids") and the entry. */
reshard_status reshard_block_table_check(
    uint64_t block_size, uint64_t num_blocks, const uint32_t *block_ids,
    size_t count, uint64_t token_span, const reshard_limits *limits,
    const char *path, reshard_arena *scratch, reshard_error *err);

/* A validated pool and a block table, as plan requests take memory that
 * an engine holds as blocks (SPEC §1.5a): the planner reads the ranges
 * the table stands for page by page (reshard_pool_window_ranges) rather
 * than a bound binding of every block. The caller owns all three. */
typedef struct reshard_pooled_memory {
  const reshard_bound_pool *pool;
  const uint32_t *block_ids;
  size_t block_count;
} reshard_pooled_memory;

/* Checks `pooled`'s block table (reshard_block_table_check) for
 * `page_count` pages of `page_size` tokens, naming "pooled.block_ids";
 * INVALID_ARGUMENT when the span overflows. `scratch` holds the check's
 * bitmap or sorted copy. */
reshard_status reshard_pooled_check(const reshard_pooled_memory *pooled,
                                    uint64_t page_count, uint64_t page_size,
                                    const reshard_limits *limits,
                                    reshard_arena *scratch, reshard_error *err);

/* How many ranges one block of group `group` stands for: 0 for an absent
 * group, one per head where the head axis lies outside the token axis
 * (HND), else 1. */
size_t reshard_pool_ranges_per_block(const reshard_bound_pool *pool,
                                     size_t group);

/* Writes to `out` the bound ranges group `group` of `pool` stands for in
 * the token window [window_start, window_end), which must lie inside the
 * span a checked block table covers: per block meeting the window its
 * ranges (reshard_pool_ranges_per_block), cut to the window, in the
 * order of reshard_bound_binding. Returns how many; `out` has room for
 * that many (blocks the window meets × ranges a block). O(ranges). */
size_t reshard_pool_window_ranges(const reshard_bound_pool *pool, size_t group,
                                  const uint32_t *block_ids,
                                  uint64_t window_start, uint64_t window_end,
                                  reshard_bound_range *out);

/* The (layer, component, token, head) values the pool's memory holds
 * over [0, token_span): the span × the part's heads × the groups present,
 * what a binding of the same memory would bind. UINT64_MAX on overflow. */
uint64_t reshard_pool_values(const reshard_bound_pool *pool,
                             uint64_t token_span);

/* Checks a block table against a validated pool for the request's token
 * span [0, token_span) — every id below num_blocks and none repeated,
 * entries past the span included; at least ceil(token_span / block_size)
 * of them; at most limits->max_block_ids, checked first — and fills `out`
 * with the bound binding it stands for: per owned (layer, component) one
 * range per block of the span, tokens past the span cut off. Messages
 * start with `path` ("pooled" names pooled.block_ids[i]). `out` lives in
 * `arena` and points into `pool` and its part. */
reshard_status reshard_pool_bind(
    const reshard_bound_pool *pool, const uint32_t *block_ids, size_t count,
    uint64_t token_span, const reshard_limits *limits, const char *path,
    reshard_arena *arena, reshard_bound_binding *out, reshard_error *err);

#endif
