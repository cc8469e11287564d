/* Memory pools and block tables (SPEC §1.5a) through reshard_pool_validate
 * and reshard_pool_bind: the engines' layouts accepted, one failing input
 * per rule, and — the point of a pool — the bound binding a pool and a
 * block table give is the one the equivalent explicit binding validates
 * to, range for range, so both plan the same bytes; the oracle executes
 * pooled plans over random shapes and checks every target byte.
 *
 * The fixed pool: descriptor layers [0..3], itemsize 2, page 4, 4 heads,
 * K dim 4 (hb 8), V dim 4 (hb 8); participant "r1" owns layers [1, 2] and
 * heads [2, 4). vLLM's layout, one region per layer, [2, blocks, block,
 * heads, dim]: 8 blocks of 2 tokens, so a block is 2 * 2 * 8 = 32 bytes
 * and a component 256. */
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

#define K RESHARD_COMPONENT_KEY
#define V RESHARD_COMPONENT_VALUE

static reshard_arena arena;

static struct {
  reshard_descriptor descriptor;
  reshard_placement_part part;
  reshard_region regions[4];
  reshard_pool_tensor tensors[8];
  reshard_pool pool;
  reshard_limits limits;
  reshard_bound_pool bound;
  reshard_error err;
} fx;

static uint64_t descriptor_layers[] = {0, 1, 2, 3};
static uint64_t owned_layers[] = {1, 2};

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
  fx.regions[0] = (reshard_region){"layer1", 0x10000, 512};
  fx.regions[1] = (reshard_region){"layer2", 0x20000, 512};
  for (int l = 0; l < 2; l++) {
    for (int c = 0; c < 2; c++) {
      fx.tensors[l * 2 + c] = (reshard_pool_tensor){
          .global_layer_id = owned_layers[l],
          .component = c == 0 ? K : V,
          .region_id = fx.regions[l].region_id,
          .offset_bytes = (uint64_t)c * 256,
          .block_stride_bytes = 32,
          .token_stride_bytes = 16,
          .head_stride_bytes = 8,
      };
    }
  }
  fx.pool = (reshard_pool){
      .participant_id = "r1",
      .endpoint = "10.0.0.1:7000",
      .regions = fx.regions,
      .region_count = 2,
      .block_size = 2,
      .num_blocks = 8,
      .tensors = fx.tensors,
      .tensor_count = 4,
  };
  fx.limits = reshard_limits_default();
}

static void teardown(void) {
  reshard_arena_destroy(&arena);
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
  for (int t = 0; t < 4; t++) {
    fx.tensors[t].offset_bytes = t % 2 == 0 ? 0 : 32;
    fx.tensors[t].block_stride_bytes = 64;
    fx.tensors[t].head_stride_bytes = 16;
    fx.tensors[t].token_stride_bytes = 8;
  }
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
  setup();
  fx.tensors[2].token_stride_bytes = 12; /* inside the head row's 16 */
  ASSERT_FAILS(validate(), fx.err, RESHARD_INVALID_ARGUMENT,
               "pool.tensors[2].token_stride_bytes: 12 is below 16",
               "share bytes");
  setup();
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
  setup();
  fx.tensors[3].block_stride_bytes = 33;
  fx.regions[1].nbytes = 4096;
  ASSERT_FAILS(validate(), fx.err, RESHARD_INVALID_ARGUMENT,
               "pool.tensors[3].block_stride_bytes", "multiple of itemsize");
}

Test(pool, refuses_missing_duplicate_and_foreign_tensors) {
  fx.pool.tensor_count = 3;
  ASSERT_FAILS(validate(), fx.err, RESHARD_INVALID_ARGUMENT,
               "pool.tensors: no tensor for layer 2 VALUE");
  setup();
  fx.tensors[3] = fx.tensors[2];
  ASSERT_FAILS(validate(), fx.err, RESHARD_INVALID_ARGUMENT, "pool.tensors[3]",
               "layer 2 KEY", "pool.tensors[2]");
  setup();
  fx.tensors[0].global_layer_id = 3;
  ASSERT_FAILS(validate(), fx.err, RESHARD_INVALID_ARGUMENT,
               "pool.tensors[0].global_layer_id", "layer 3 is not owned");
}

Test(pool, refuses_bad_regions_and_counts) {
  fx.tensors[0].region_id = "nowhere";
  ASSERT_FAILS(validate(), fx.err, RESHARD_INVALID_ARGUMENT,
               "pool.tensors[0].region_id", "\"nowhere\"");
  setup();
  fx.regions[1].region_id = "layer1";
  ASSERT_FAILS(validate(), fx.err, RESHARD_INVALID_ARGUMENT,
               "pool.regions[1].region_id", "more than once");
  setup();
  fx.pool.num_blocks = 0;
  ASSERT_FAILS(validate(), fx.err, RESHARD_INVALID_ARGUMENT, "pool.num_blocks");
  setup();
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

/* The explicit binding SPEC §1.5 writes for `pool` and a table: per owned
 * (layer, component) one range per block of the span — one per block and
 * head when heads lie outside tokens. */
static void explicit_binding(const reshard_pool *pool,
                             const reshard_descriptor *descriptor,
                             const reshard_placement_part *part,
                             const uint32_t *ids, uint64_t span,
                             reshard_arena *a, reshard_binding *out) {
  uint64_t blocks = (span + pool->block_size - 1) / pool->block_size;
  size_t room = pool->tensor_count * blocks * part->head_count;
  reshard_binding_range *ranges =
      RESHARD_ARENA_NEW(a, reshard_binding_range, room + 1);
  size_t n = 0;
  for (size_t t = 0; t < pool->tensor_count; t++) {
    const reshard_pool_tensor *tensor = &pool->tensors[t];
    uint64_t hb = reshard_head_bytes(descriptor, tensor->component);
    uint64_t hs = part->head_count > 1 ? tensor->head_stride_bytes : hb;
    uint64_t row = (part->head_count - 1) * hs + hb;
    uint64_t ts = pool->block_size > 1 ? tensor->token_stride_bytes : row;
    bool per_head = ts < row;
    for (uint64_t i = 0; i < blocks; i++) {
      uint64_t start = i * pool->block_size;
      uint64_t count =
          span - start < pool->block_size ? span - start : pool->block_size;
      for (uint64_t h = 0; h < (per_head ? part->head_count : 1); h++) {
        ranges[n++] = (reshard_binding_range){
            .global_layer_id = tensor->global_layer_id,
            .component = tensor->component,
            .token_start = start,
            .token_count = count,
            .head_start = part->head_start + h,
            .head_count = per_head ? 1 : part->head_count,
            .region_id = tensor->region_id,
            .offset_bytes = tensor->offset_bytes +
                            (uint64_t)ids[i] * tensor->block_stride_bytes +
                            h * hs,
            .token_stride_bytes = ts,
            .head_stride_bytes = per_head ? hb : hs,
        };
      }
    }
  }
  *out = (reshard_binding){pool->participant_id, pool->endpoint, pool->regions,
                           pool->region_count,   ranges,         n};
}

static void assert_same_bound(const reshard_bound_binding *a,
                              const reshard_bound_binding *b) {
  cr_assert_eq(a->range_count, b->range_count);
  cr_assert_eq(a->group_count, b->group_count);
  cr_assert_eq(a->token_span, b->token_span);
  for (size_t g = 0; g <= a->group_count; g++) {
    cr_assert_eq(a->group_start[g], b->group_start[g], "group %zu", g);
  }
  for (size_t i = 0; i < a->range_count; i++) {
    cr_assert(memcmp(&a->ranges[i], &b->ranges[i], sizeof a->ranges[i]) == 0,
              "range %zu differs", i);
  }
}

Test(pool, binds_as_the_explicit_binding_validates) {
  /* vLLM NHD, then FlashInfer HND (one range per head). */
  for (int hnd = 0; hnd < 2; hnd++) {
    setup();
    if (hnd) {
      for (int t = 0; t < 4; t++) {
        fx.tensors[t].offset_bytes = t % 2 == 0 ? 0 : 32;
        fx.tensors[t].block_stride_bytes = 64;
        fx.tensors[t].head_stride_bytes = 16;
        fx.tensors[t].token_stride_bytes = 8;
      }
    }
    cr_assert_eq(validate(), RESHARD_OK, "%s", fx.err.message);
    uint32_t ids[] = {6, 1, 4, 2, 7};
    reshard_bound_binding pooled, explicit_bound;
    reshard_binding binding;
    /* Two pages of 4 tokens: 8 tokens in 2-token blocks. */
    cr_assert_eq(bind(ids, 5, 8, &pooled), RESHARD_OK, "%s", fx.err.message);
    explicit_binding(&fx.pool, &fx.descriptor, &fx.part, ids, 8, &arena,
                     &binding);
    cr_assert_eq(reshard_binding_validate(&binding, &fx.descriptor, &fx.part, 2,
                                          &fx.limits, &arena, &explicit_bound,
                                          &fx.err),
                 RESHARD_OK, "%s", fx.err.message);
    assert_same_bound(&pooled, &explicit_bound);
  }
}

/* ---- The oracle over random shapes ---- */

typedef enum pool_style {
  POOL_VLLM,       /* per layer [2, blocks, block, heads, dim], NHD */
  POOL_FLASHINFER, /* per layer [blocks, 2, heads, block, dim], HND */
  POOL_PAGE_FIRST, /* one region [blocks, layers, 2, block, heads, dim] */
  POOL_STYLE_COUNT
} pool_style;

/* A pool of `style` for the case's participant, blocks of `block_size`
 * tokens, `num_blocks` of them; regions get fake aligned addresses. */
static void build_pool(const oracle_case *c, pool_style style,
                       uint64_t block_size, uint64_t num_blocks,
                       reshard_arena *a, reshard_pool *out) {
  const reshard_placement_part *part = c->participant;
  const reshard_descriptor *d = &c->descriptor;
  unsigned components = reshard_component_count(d);
  uint64_t slot = reshard_head_bytes(d, K);
  if (components == 2 && reshard_head_bytes(d, V) > slot) {
    slot = reshard_head_bytes(d, V);
  }
  uint64_t heads = part->head_count;
  uint64_t component_block = block_size * heads * slot;
  size_t layers = part->layer_count;
  size_t region_count = style == POOL_PAGE_FIRST ? 1 : layers;
  reshard_region *regions =
      RESHARD_ARENA_NEW(a, reshard_region, region_count + 1);
  reshard_pool_tensor *tensors =
      RESHARD_ARENA_NEW(a, reshard_pool_tensor, layers * components + 1);
  uint64_t layer_bytes = num_blocks * components * component_block;
  for (size_t r = 0; r < region_count; r++) {
    char *id = reshard_arena_alloc(a, 32, 1);
    snprintf(id, 32, "r%zu", r);
    uint64_t bytes =
        style == POOL_PAGE_FIRST ? layer_bytes * layers : layer_bytes;
    regions[r] = (reshard_region){id, (uint64_t)(r + 1) << 40, bytes};
  }
  size_t n = 0;
  for (size_t l = 0; l < layers; l++) {
    for (unsigned comp = 0; comp < components; comp++) {
      reshard_pool_tensor *t = &tensors[n++];
      t->global_layer_id = part->layer_ids[l];
      t->component = comp == 0 ? K : V;
      t->region_id = regions[style == POOL_PAGE_FIRST ? 0 : l].region_id;
      switch (style) {
      case POOL_VLLM:
        t->offset_bytes = comp * num_blocks * component_block;
        t->block_stride_bytes = component_block;
        t->token_stride_bytes = heads * slot;
        t->head_stride_bytes = slot;
        break;
      case POOL_FLASHINFER:
        t->offset_bytes = comp * component_block;
        t->block_stride_bytes = components * component_block;
        t->token_stride_bytes = slot;
        t->head_stride_bytes = block_size * slot;
        break;
      default:
        t->offset_bytes = (l * components + comp) * component_block;
        t->block_stride_bytes = layers * components * component_block;
        t->token_stride_bytes = heads * slot;
        t->head_stride_bytes = slot;
        break;
      }
    }
  }
  *out = (reshard_pool){part->participant_id, "peer",     regions, region_count,
                        block_size,           num_blocks, tensors, n};
}

Test(pool_oracle, pooled_plans_execute_exactly_and_equal_explicit_ones) {
  uint64_t base = oracle_base_seed();
  unsigned cases = 0;
  for (uint64_t i = 0; i < 60; i++) {
    uint64_t seed = oracle_case_seed(base, 0x9001, i);
    oracle_rng rng;
    oracle_rng_seed(&rng, seed);
    oracle_case_opts opts = {
        .format = (reshard_format)(1 + i % 3),
        .style = ORACLE_MEM_CONTIGUOUS,
        .max_sources = 1,
        .single_tensor = i % 5 == 4,
    };
    oracle_case c;
    char msg[2048];
    cr_assert(oracle_case_build(&c, seed, &opts, msg, sizeof msg), "%s", msg);
    if (c.participant->layer_count == 0) {
      oracle_case_destroy(&c);
      continue;
    }
    uint64_t page = c.descriptor.page_size;
    uint64_t choices[] = {page, page > 1 ? page / 2 : 1, 2 * page,
                          oracle_rng_between(&rng, 1, 3 * page)};
    uint64_t block_size = choices[oracle_rng_between(&rng, 0, 3)];
    uint64_t span = c.request.page_count * page;
    uint64_t needed = (span + block_size - 1) / block_size;
    uint64_t num_blocks = needed + oracle_rng_between(&rng, 0, 8);
    pool_style style = (pool_style)(i % POOL_STYLE_COUNT);
    reshard_pool pool;
    build_pool(&c, style, block_size, num_blocks, &c.arena, &pool);
    uint32_t *ids = RESHARD_ARENA_NEW(&c.arena, uint32_t, num_blocks + 1);
    for (uint64_t b = 0; b < num_blocks; b++) {
      ids[b] = (uint32_t)b;
    }
    oracle_rng_shuffle(&rng, ids, num_blocks, sizeof *ids);
    size_t table = (size_t)oracle_rng_between(&rng, needed, num_blocks);

    reshard_limits limits = reshard_limits_default();
    reshard_bound_pool bound;
    reshard_bound_binding pooled;
    reshard_error err;
    cr_assert_eq(reshard_pool_validate(&pool, &c.descriptor, c.participant,
                                       &limits, "pool", &c.arena, &bound, &err),
                 RESHARD_OK, "%s: %s", c.description, err.message);
    cr_assert_eq(reshard_pool_bind(&bound, ids, table, span, &limits, "pooled",
                                   &c.arena, &pooled, &err),
                 RESHARD_OK, "%s: %s", c.description, err.message);

    /* Explicit first: the oracle checks the bytes the binding covers. */
    reshard_binding binding;
    explicit_binding(&pool, &c.descriptor, c.participant, ids, span, &c.arena,
                     &binding);
    c.binding = binding;
    c.request.binding = &c.binding;
    reshard_arena explicit_arena, pooled_arena;
    reshard_load_plan explicit_plan, pooled_plan;
    oracle_exec_stats stats;
    cr_assert(oracle_case_run(&c, &explicit_arena, &explicit_plan, &stats, msg,
                              sizeof msg),
              "explicit, style %d: %s", style, msg);
    c.request.bound_binding = &pooled;
    cr_assert(oracle_case_run(&c, &pooled_arena, &pooled_plan, &stats, msg,
                              sizeof msg),
              "pooled, style %d: %s", style, msg);
    cr_assert_gt(stats.covered_bytes, 0, "%s", c.description);
    cr_assert_eq(pooled_plan.copy_count, explicit_plan.copy_count, "%s",
                 c.description);
    cr_assert_eq(pooled_plan.batch_count, explicit_plan.batch_count);
    cr_assert_eq(pooled_plan.copies_before_coalescing,
                 explicit_plan.copies_before_coalescing);
    cr_assert(memcmp(pooled_plan.copies, explicit_plan.copies,
                     pooled_plan.copy_count * sizeof *pooled_plan.copies) == 0,
              "pooled copies differ from explicit ones: %s", c.description);
    oracle_plan_release(&c, &pooled_arena, &pooled_plan);
    oracle_plan_release(&c, &explicit_arena, &explicit_plan);
    oracle_case_destroy(&c);
    cases++;
  }
  cr_assert_gt(cases, 30);
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
  setup();
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
