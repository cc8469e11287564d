/* Memory pools for the oracles (SPEC §1.5a), written from the SPEC's
 * formulas and independent of lib/model/pool.c: pools laid out as the
 * engines lay them out, scattered block tables, the explicit binding
 * (SPEC §1.5) a pool and a table stand for, and field-by-field
 * comparisons of what the two forms give — bound bindings, load plans and
 * store plans — since both forms must plan the same bytes.
 *
 * The explicit binding is what the oracles execute against: it says which
 * region bytes hold which logical value, from the pool formula
 * address + offset + b·block_stride + s·token_stride + (h − h0)·head_stride
 * with b = block_ids[t / block_size] and s = t % block_size, for the
 * request's span only (tokens of the last block past it are not bound, so
 * the oracle checks they are never written, as every block outside the
 * table). */
#ifndef RESHARD_TEST_POOL_ORACLE_H
#define RESHARD_TEST_POOL_ORACLE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "oracle.h"
#include "reshard/pool.h"
#include "reshard/store.h"

typedef enum oracle_pool_style {
  /* vLLM: a region per layer, [2, blocks, block, heads, dim] (NHD) */
  ORACLE_POOL_VLLM = 0,
  /* FlashInfer HND: a region per layer, [blocks, 2, heads, block, dim],
   * K and V of a block side by side */
  ORACLE_POOL_FLASHINFER,
  /* SGLang page-first host pool: one region, [blocks, layers, 2, block,
   * heads, dim], every layer of a block together */
  ORACLE_POOL_PAGE_FIRST,
  /* MLA latent cache, layer-first in one region: [layers, blocks, block,
   * heads, dim] per component, token rows padded to 16 bytes and blocks
   * to 64 (a single-tensor cache has K only) */
  ORACLE_POOL_LATENT,
} oracle_pool_style;
#define ORACLE_POOL_STYLE_COUNT 4

const char *oracle_pool_style_name(oracle_pool_style style);

/* Bytes one block takes over all of the pool's tensors. */
uint64_t oracle_pool_block_bytes(const reshard_descriptor *desc,
                                 const reshard_placement_part *part,
                                 oracle_pool_style style, uint64_t block_size);

/* Where a pool's memory sits: its endpoint, and region r (in the pool's
 * order) named "{region_prefix}{first_region + r}" at the fake address
 * address + r * address_step. The pool points at `endpoint`, which must
 * outlive it; the region names are drawn from the arena. */
typedef struct oracle_pool_site {
  const char *endpoint;
  const char *region_prefix;
  size_t first_region;
  uint64_t address;
  uint64_t address_step;
} oracle_pool_site;

/* A pool of `style` for `part` (of a normalized placement of `desc`):
 * `num_blocks` blocks of `block_size` tokens, one tensor per owned
 * (layer, component) in layer order, K before V, regions (one per owned
 * layer, or one for the page-first and latent styles) sized to the last
 * block, at `site`. Every slot of K and V is as wide as the wider of the
 * two heads, as engines that allocate one head size do. Regions and
 * tensors are drawn from `arena`. */
void oracle_build_pool_at(const reshard_descriptor *desc,
                          const reshard_placement_part *part,
                          oracle_pool_style style, uint64_t block_size,
                          uint64_t num_blocks, const oracle_pool_site *site,
                          reshard_arena *arena, reshard_pool *out);

/* oracle_build_pool_at at endpoint "oracle://pool", regions "pool0",
 * "pool1", ... at 1 << 40, 2 << 40, ... */
void oracle_build_pool(const reshard_descriptor *desc,
                       const reshard_placement_part *part,
                       oracle_pool_style style, uint64_t block_size,
                       uint64_t num_blocks, reshard_arena *arena,
                       reshard_pool *out);

/* Every block id of [0, num_blocks) once, in random order: any prefix of
 * at least ceil(span / block_size) entries is a valid, scattered table. */
uint32_t *oracle_block_table(oracle_rng *rng, reshard_arena *arena,
                             uint64_t num_blocks);

/* Every block id of [0, num_blocks) once, in runs of one to three
 * consecutive ids in random order: some neighbours in the table lie back
 * to back in the pool and others do not, so pages alike in their blocks
 * are moved by other amounts block by block, and some of them coalesce
 * across blocks where the page before did not. */
uint32_t *oracle_block_table_in_runs(oracle_rng *rng, reshard_arena *arena,
                                     uint64_t num_blocks);

/* The explicit binding of `pool` with table `ids` over tokens [0, span):
 * per tensor one range per block of the span, or one per block and head
 * when the head rows do not fit in the token stride (HND). */
void oracle_pool_binding(const reshard_pool *pool,
                         const reshard_descriptor *desc,
                         const reshard_placement_part *part,
                         const uint32_t *ids, uint64_t span,
                         reshard_arena *arena, reshard_binding *out);

/* Field-by-field equality (the structs have padding, so never memcmp);
 * false with the first difference in `msg`. */
bool oracle_same_bound(const reshard_bound_binding *a,
                       const reshard_bound_binding *b, char *msg,
                       size_t msg_size);

/* Two plans of one request: hit prefix and sources, copies (when both
 * have them), batches, totals, counts and runs. */
bool oracle_same_load_plans(const reshard_load_plan *a,
                            const reshard_load_plan *b, char *msg,
                            size_t msg_size);
bool oracle_same_store_plans(const reshard_store_plan *a,
                             const reshard_store_plan *b, char *msg,
                             size_t msg_size);

/* Checks `runs` against the library's fold of the explicit copies and
 * batches (the fold itself is proven by tests/lib/plan/test_runs.c). */
bool oracle_check_runs_fold(const reshard_copy *copies,
                            const reshard_batch *batches, size_t batch_count,
                            const reshard_runs *runs, char *msg,
                            size_t msg_size);

#endif
