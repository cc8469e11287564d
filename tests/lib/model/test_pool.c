/* Memory pools and block tables (SPEC §1.5a) through reshard_pool_validate
 * and reshard_pool_bind: the engines' layouts accepted, one failing input
 * per rule, and — the point of a pool — the bound binding a pool and a
 * block table give is the one the equivalent explicit binding validates
 * to, range for range, so both plan the same bytes (test_pool_oracle.c
 * executes pooled plans over the format x topology x block size x pool
 * style matrix and checks every target byte).
 *
 * The fixed pool: descriptor layers [0..3], itemsize 2, page 4, 4 heads,
 * K dim 4 (hb 8), V dim 4 (hb 8); participant "r1" owns layers [1, 2] and
 * heads [2, 4). vLLM's layout, one region per layer, [2, blocks, block,
 * heads, dim]: 8 blocks of 2 tokens, so a block is 2 * 2 * 8 = 32 bytes
 * and a component 256. The pools are pool_oracle.h's, at endpoint
 * "10.0.0.1:7000" with regions "layer1" and "layer2" (512 bytes each) at
 * 0x10000 and 0x20000. */
#include <criterion/criterion.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include "identity/canonical_json.h"
#include "reshard/arena.h"
#include "reshard/binding.h"
#include "reshard/identity.h"
#include "reshard/plan.h"
#include "reshard/pool.h"

#include "assert_error.h"
#include "oracle.h"
#include "pool_oracle.h"

#define K RESHARD_COMPONENT_KEY
#define V RESHARD_COMPONENT_VALUE

static reshard_arena arena;

static struct {
  reshard_descriptor descriptor;
  reshard_placement_part part;
  reshard_region *regions;      /* fx.pool's, in the arena */
  reshard_pool_tensor *tensors; /* fx.pool's, in the arena */
  reshard_pool pool;
  reshard_limits limits;
  reshard_bound_pool bound;
  reshard_error err;
} fx;

static uint64_t descriptor_layers[] = {0, 1, 2, 3};
static uint64_t owned_layers[] = {1, 2};

/* The fixed pool in `style` (a block of 2 tokens, 8 blocks). */
static void build(oracle_pool_style style) {
  static const oracle_pool_site site = {"10.0.0.1:7000", "layer", 1, 0x10000,
                                        0x10000};
  oracle_build_pool_at(&fx.descriptor, &fx.part, style, 2, 8, &site, &arena,
                       &fx.pool);
  fx.regions = fx.pool.regions;
  fx.tensors = fx.pool.tensors;
}

static void setup(void) {
  reshard_arena_init(&arena, 0);
  memset(&fx, 0, sizeof fx);
  fx.descriptor =
      (reshard_descriptor){descriptor_layers, 4, "bf16", 2, 4, 4, 4, 4};
  fx.part = (reshard_placement_part){
      .participant_id = "r1",
      .layer_ids = owned_layers,
      .layer_count = 2,
      .head_start = 2,
      .head_count = 2,
      .replica_count = 1,
  };
  build(ORACLE_POOL_VLLM);
  fx.limits = reshard_limits_default();
}

static void teardown(void) {
  reshard_arena_destroy(&arena);
}

/* Back to the fixture within a test: the arena is freed first. */
static void reset(void) {
  teardown();
  setup();
}

static reshard_status validate(void) {
  return reshard_pool_validate(&fx.pool, &fx.descriptor, &fx.part, &fx.limits,
                               "pool", &arena, &fx.bound, &fx.err);
}

TestSuite(pool, .init = setup, .fini = teardown);

Test(pool, vllm_layout_is_valid) {
  cr_assert_eq(validate(), RESHARD_OK, "%s", fx.err.message);
  cr_assert_eq(fx.bound.group_count, 4);
  cr_assert(fx.bound.groups[3].present);
  cr_assert_eq(fx.bound.groups[3].region_index, 1);
  cr_assert_eq(fx.bound.groups[3].offset, 256);
}

Test(pool, flashinfer_interleaved_kv_is_valid) {
  /* [blocks, 2, heads, block, dim]: K and V of a block side by side, one
   * block 2 * 2 * 2 * 8 = 64 bytes; heads outside tokens (HND). */
  build(ORACLE_POOL_FLASHINFER);
  cr_assert_eq(validate(), RESHARD_OK, "%s", fx.err.message);
}

Test(pool, page_first_every_layer_in_one_block_is_valid) {
  /* [blocks, layers, 2, block, heads, dim] in one region. */
  for (int t = 0; t < 4; t++) {
    fx.tensors[t].region_id = "layer1";
    fx.tensors[t].offset_bytes = (uint64_t)t * 32;
    fx.tensors[t].block_stride_bytes = 128;
  }
  fx.regions[0].nbytes = 8 * 128;
  cr_assert_eq(validate(), RESHARD_OK, "%s", fx.err.message);
}

Test(pool, single_tensor_cache_has_key_tensors_only) {
  fx.descriptor.value_head_dim = 0;
  fx.tensors[1] = fx.tensors[2];
  fx.pool.tensor_count = 2;
  cr_assert_eq(validate(), RESHARD_OK, "%s", fx.err.message);
  cr_assert_not(fx.bound.groups[1].present);
  fx.tensors[1].component = V;
  ASSERT_FAILS(validate(), fx.err, RESHARD_INVALID_ARGUMENT,
               "pool.tensors[1].component", "value_head_dim 0");
}

Test(pool, refuses_kv_sharing_bytes) {
  fx.tensors[1].offset_bytes = 16; /* V starts inside K's first block */
  fx.tensors[1].region_id = "layer1";
  ASSERT_FAILS(validate(), fx.err, RESHARD_INVALID_ARGUMENT,
               "pool.tensors[0] and pool.tensors[1]", "share bytes");
}

Test(pool, refuses_interleaved_arcs_that_overlap) {
  for (int t = 0; t < 4; t++) {
    fx.tensors[t].offset_bytes = t % 2 == 0 ? 0 : 24; /* K's block is 32 */
    fx.tensors[t].block_stride_bytes = 64;
  }
  ASSERT_FAILS(validate(), fx.err, RESHARD_INVALID_ARGUMENT,
               "pool.tensors[0] and pool.tensors[1] share bytes");
}

Test(pool, refuses_overlap_across_block_strides) {
  fx.tensors[1].block_stride_bytes = 64; /* overlaps K, other stride */
  fx.tensors[1].offset_bytes = 200;
  fx.regions[0].nbytes = 1024;
  ASSERT_FAILS(validate(), fx.err, RESHARD_INVALID_ARGUMENT,
               "pool.tensors[0] and pool.tensors[1] share bytes",
               "one block stride");
}

Test(pool, refuses_strides_that_do_not_nest) {
  fx.tensors[2].token_stride_bytes = 8; /* tokens and heads collide */
  ASSERT_FAILS(validate(), fx.err, RESHARD_INVALID_ARGUMENT, "pool.tensors[2].",
               "is below 16", "share bytes");
  reset();
  fx.tensors[2].token_stride_bytes = 12; /* inside the head row's 16 */
  ASSERT_FAILS(validate(), fx.err, RESHARD_INVALID_ARGUMENT,
               "pool.tensors[2].token_stride_bytes: 12 is below 16",
               "share bytes");
  reset();
  fx.tensors[0].head_stride_bytes = 4; /* below the head's 8 bytes */
  ASSERT_FAILS(validate(), fx.err, RESHARD_INVALID_ARGUMENT,
               "pool.tensors[0].head_stride_bytes");
}

Test(pool, an_axis_of_one_is_free) {
  fx.pool.block_size = 1; /* token stride takes no part */
  for (int t = 0; t < 4; t++) {
    fx.tensors[t].token_stride_bytes = 0;
    fx.tensors[t].block_stride_bytes = 16;
    fx.tensors[t].offset_bytes = t % 2 == 0 ? 0 : 128;
  }
  cr_assert_eq(validate(), RESHARD_OK, "%s", fx.err.message);
  /* ...and binds like a packed axis: token stride = the head row. */
  cr_assert_eq(fx.bound.groups[0].token_stride, 16);
}

Test(pool, refuses_last_block_past_its_region) {
  fx.regions[1].nbytes = 511;
  ASSERT_FAILS(validate(), fx.err, RESHARD_INVALID_ARGUMENT, "pool.tensors[3]",
               "last byte of block 7", "region \"layer2\"");
}

Test(pool, refuses_misalignment) {
  fx.tensors[2].offset_bytes = 1;
  ASSERT_FAILS(validate(), fx.err, RESHARD_INVALID_ARGUMENT, "pool.tensors[2]",
               "multiple of itemsize 2");
  reset();
  fx.tensors[3].block_stride_bytes = 33;
  fx.regions[1].nbytes = 4096;
  ASSERT_FAILS(validate(), fx.err, RESHARD_INVALID_ARGUMENT,
               "pool.tensors[3].block_stride_bytes", "multiple of itemsize");
}

Test(pool, refuses_missing_duplicate_and_foreign_tensors) {
  fx.pool.tensor_count = 3;
  ASSERT_FAILS(validate(), fx.err, RESHARD_INVALID_ARGUMENT,
               "pool.tensors: no tensor for layer 2 VALUE");
  reset();
  fx.tensors[3] = fx.tensors[2];
  ASSERT_FAILS(validate(), fx.err, RESHARD_INVALID_ARGUMENT, "pool.tensors[3]",
               "layer 2 KEY", "pool.tensors[2]");
  reset();
  fx.tensors[0].global_layer_id = 3;
  ASSERT_FAILS(validate(), fx.err, RESHARD_INVALID_ARGUMENT,
               "pool.tensors[0].global_layer_id", "layer 3 is not owned");
}

Test(pool, refuses_bad_regions_and_counts) {
  fx.tensors[0].region_id = "nowhere";
  ASSERT_FAILS(validate(), fx.err, RESHARD_INVALID_ARGUMENT,
               "pool.tensors[0].region_id", "\"nowhere\"");
  reset();
  fx.regions[1].region_id = "layer1";
  ASSERT_FAILS(validate(), fx.err, RESHARD_INVALID_ARGUMENT,
               "pool.regions[1].region_id", "more than once");
  reset();
  fx.pool.num_blocks = 0;
  ASSERT_FAILS(validate(), fx.err, RESHARD_INVALID_ARGUMENT, "pool.num_blocks");
  reset();
  fx.limits.max_pool_tensors = 3;
  ASSERT_FAILS(validate(), fx.err, RESHARD_RESOURCE_EXHAUSTED,
               "max_pool_tensors 3");
}

Test(pool, extent_overflow_is_refused) {
  fx.pool.num_blocks = UINT32_MAX;
  fx.tensors[0].block_stride_bytes = UINT64_MAX / 2;
  ASSERT_FAILS(validate(), fx.err, RESHARD_INVALID_ARGUMENT, "pool.tensors[0]",
               "overflows 64 bits");
}

Test(pool, spans_joined_through_a_third_are_not_compared) {
  /* A single-tensor cache, itemsize 1, hb 1, one head, 3 blocks of 2
   * tokens, block stride 12 for all. Arcs: [0] [0, 2), [1] [2, 4), [2]
   * [4, 14) wrapping onto [0]'s. [0] spans [0, 26) and [2] [28, 62):
   * disjoint, though [1] ([14, 40)) overlaps both, its arc clear of
   * theirs. Values at 0 1 12 13 24 25 / 14 15 26 27 38 39 / 28 37 40 49
   * 52 61: the pool is valid. */
  uint64_t layers[] = {0, 1, 2};
  reshard_descriptor d = {layers, 3, "u8", 1, 2, 1, 1, 0};
  reshard_placement_part part = {
      .participant_id = "p",
      .layer_ids = layers,
      .layer_count = 3,
      .head_count = 1,
      .replica_count = 1,
  };
  reshard_region region = {"r", 4096, 64};
  reshard_pool_tensor tensors[3] = {
      {0, K, "r", 0, 12, 1, 1},
      {1, K, "r", 14, 12, 1, 1},
      {2, K, "r", 28, 12, 9, 1},
  };
  reshard_pool pool = {"p", "e", &region, 1, 2, 3, tensors, 3};
  cr_assert_eq(reshard_pool_validate(&pool, &d, &part, &fx.limits, "pool",
                                     &arena, &fx.bound, &fx.err),
               RESHARD_OK, "%s", fx.err.message);
  /* [2] one byte earlier: its arc [3, 13) meets [1]'s, and they do share
   * bytes 27 and 39; that pair is named, not [0] and [2]. */
  tensors[2].offset_bytes = 27;
  ASSERT_FAILS(reshard_pool_validate(&pool, &d, &part, &fx.limits, "pool",
                                     &arena, &fx.bound, &fx.err),
               fx.err, RESHARD_INVALID_ARGUMENT,
               "pool.tensors[1] and pool.tensors[2] share bytes");
}

/* ---- Block tables ---- */

static reshard_status bind(const uint32_t *ids, size_t count, uint64_t span,
                           reshard_bound_binding *out) {
  return reshard_pool_bind(&fx.bound, ids, count, span, &fx.limits, "pooled",
                           &arena, out, &fx.err);
}

Test(pool, block_table_rules) {
  cr_assert_eq(validate(), RESHARD_OK);
  reshard_bound_binding out;
  uint32_t ids[] = {3, 7, 0, 5};
  cr_assert_eq(bind(ids, 4, 8, &out), RESHARD_OK, "%s", fx.err.message);
  /* Entries past the span are validated, then unused. */
  cr_assert_eq(bind(ids, 4, 5, &out), RESHARD_OK);
  cr_assert_eq(out.range_count, 4 * 3);
  cr_assert_eq(out.ranges[2].token_start, 4);
  cr_assert_eq(out.ranges[2].token_end, 5);
  ASSERT_FAILS(bind(ids, 3, 8, &out), fx.err, RESHARD_INVALID_ARGUMENT,
               "pooled.block_ids", "4 blocks needed");
  uint32_t far[] = {3, 5000, 0, 5};
  ASSERT_FAILS(bind(far, 4, 8, &out), fx.err, RESHARD_INVALID_ARGUMENT,
               "pooled.block_ids[1]: block 5000 is not below num_blocks 8");
  uint32_t again[] = {3, 7, 0, 7, 1};
  ASSERT_FAILS(bind(again, 5, 8, &out), fx.err, RESHARD_INVALID_ARGUMENT,
               "pooled.block_ids[3]: block 7 appears already at "
               "pooled.block_ids[1]");
  uint32_t late[] = {3, 7, 0, 5, 3}; /* past the span, still checked */
  ASSERT_FAILS(bind(late, 5, 8, &out), fx.err, RESHARD_INVALID_ARGUMENT,
               "pooled.block_ids[4]");
  fx.limits.max_block_ids = 3;
  ASSERT_FAILS(bind(ids, 4, 8, &out), fx.err, RESHARD_RESOURCE_EXHAUSTED,
               "max_block_ids 3");
}

Test(pool, repeats_found_without_a_bitmap_in_a_huge_pool) {
  fx.pool.num_blocks = UINT32_MAX; /* far more blocks than the table */
  for (int t = 0; t < 4; t++) {
    fx.tensors[t].offset_bytes = t % 2 == 0 ? 0 : 16;
    fx.tensors[t].token_stride_bytes = 16;
    fx.tensors[t].block_stride_bytes = 32 * 2;
  }
  fx.pool.block_size = 1;
  fx.regions[0].nbytes = fx.regions[1].nbytes = UINT64_C(1) << 40;
  fx.regions[1].address = UINT64_C(1) << 41;
  cr_assert_eq(validate(), RESHARD_OK, "%s", fx.err.message);
  reshard_bound_binding out;
  uint32_t ids[] = {4000000000u, 9, 17, 9, 4000000000u};
  ASSERT_FAILS(bind(ids, 5, 5, &out), fx.err, RESHARD_INVALID_ARGUMENT,
               "pooled.block_ids[3]: block 9 appears already at "
               "pooled.block_ids[1]");
}

/* ---- Pools bind as their explicit bindings validate ---- */

Test(pool, binds_as_the_explicit_binding_validates) {
  /* vLLM NHD, then FlashInfer HND (one range per head). */
  for (int hnd = 0; hnd < 2; hnd++) {
    reset();
    if (hnd) {
      build(ORACLE_POOL_FLASHINFER);
    }
    cr_assert_eq(validate(), RESHARD_OK, "%s", fx.err.message);
    uint32_t ids[] = {6, 1, 4, 2, 7};
    reshard_bound_binding pooled, explicit_bound;
    reshard_binding binding;
    /* Two pages of 4 tokens: 8 tokens in 2-token blocks. */
    cr_assert_eq(bind(ids, 5, 8, &pooled), RESHARD_OK, "%s", fx.err.message);
    oracle_pool_binding(&fx.pool, &fx.descriptor, &fx.part, ids, 8, &arena,
                        &binding);
    cr_assert_eq(reshard_binding_validate(&binding, &fx.descriptor, &fx.part, 2,
                                          &fx.limits, &arena, &explicit_bound,
                                          &fx.err),
                 RESHARD_OK, "%s", fx.err.message);
    char msg[ORACLE_MSG_SIZE];
    cr_assert(oracle_same_bound(&pooled, &explicit_bound, msg, sizeof msg),
              "%s", msg);
  }
}

/* ---- Identity ---- */

Test(pool, memory_id_is_canonical) {
  char a[RESHARD_ID_SIZE], b[RESHARD_ID_SIZE];
  const char *placement = "sha256:00";
  cr_assert_eq(reshard_memory_id(&fx.pool, placement, a, &fx.err), RESHARD_OK,
               "%s", fx.err.message);
  cr_assert_eq(strncmp(a, "sha256:", 7), 0);
  /* Tensor order and region order do not change it... */
  reshard_pool_tensor swap = fx.tensors[0];
  fx.tensors[0] = fx.tensors[3];
  fx.tensors[3] = swap;
  reshard_region region = fx.regions[0];
  fx.regions[0] = fx.regions[1];
  fx.regions[1] = region;
  cr_assert_eq(reshard_memory_id(&fx.pool, placement, b, &fx.err), RESHARD_OK);
  cr_assert_str_eq(a, b);
  /* ...every field does. */
  fx.tensors[2].head_stride_bytes++;
  cr_assert_eq(reshard_memory_id(&fx.pool, placement, b, &fx.err), RESHARD_OK);
  cr_assert_str_neq(a, b);
  reset();
  cr_assert_eq(reshard_memory_id(&fx.pool, "sha256:01", b, &fx.err),
               RESHARD_OK);
  cr_assert_str_neq(a, b);
}

Test(pool, memory_pool_canonical_text) {
  fx.pool.tensor_count = 1;
  fx.pool.region_count = 1;
  reshard__json w;
  reshard__json_init(&w, &fx.err);
  reshard__json_memory_pool(&w, &fx.pool, "sha256:ab", "pool");
  const char *text;
  cr_assert_eq(reshard__json_finish(&w, &text, NULL), RESHARD_OK);
  cr_assert_str_eq(
      text,
      "{\"block_size\":2,\"endpoint\":\"10.0.0.1:7000\",\"num_blocks\":8,"
      "\"participant_id\":\"r1\",\"placement_id\":\"sha256:ab\","
      "\"regions\":[{\"address\":65536,\"nbytes\":512,\"region_id\":"
      "\"layer1\"}],\"schema\":\"kv-cache-memory-pool\",\"tensors\":[{"
      "\"block_stride_bytes\":32,\"component\":\"key\",\"global_layer_id\":1,"
      "\"head_stride_bytes\":8,\"offset_bytes\":0,\"region_id\":\"layer1\","
      "\"token_stride_bytes\":16}]}");
  reshard__json_free(&w);
}
