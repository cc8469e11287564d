/* Runtime binding rules (SPEC §1.5, §2.3) through reshard_binding_validate:
 * one failing input per rule, the disjointness and tiling proofs, the
 * overflow edges near 2^64, and the work limits checked before the work.
 *
 * The base binding: descriptor layers [0..3], itemsize 2, page 4, 4 heads,
 * K dim 4 (hb 8 bytes), V dim 2 (hb 4 bytes); participant "r1" owns layers
 * [1, 2] and heads [2, 4); 2 pages, so the token span is [0, 8). Four NHD
 * ranges, each tokens [0, 8) x heads [2, 4), packed into region "kv":
 *   ranges[0] L1 K  offset   0  token stride 16  head stride 8  [0, 128)
 *   ranges[1] L1 V  offset 128  token stride  8  head stride 4  [128, 192)
 *   ranges[2] L2 K  offset 192                                  [192, 320)
 *   ranges[3] L2 V  offset 320                                  [320, 384)
 * Region "aux" is present but unused. */
#include <criterion/criterion.h>
#include <criterion/parameterized.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include "reshard/arena.h"
#include "reshard/binding.h"

#include "assert_error.h"

enum { CAPACITY = 64 };
#define K RESHARD_COMPONENT_KEY
#define V RESHARD_COMPONENT_VALUE
#define KV_ADDRESS UINT64_C(0x10000)

static reshard_arena arena;

/* The request under test; tests break one field and call validate(). */
static struct {
  reshard_descriptor descriptor;
  reshard_placement_part part;
  reshard_binding binding;
  reshard_limits limits;
  uint64_t pages;
  reshard_bound_binding out;
  reshard_error err;
} fx;

static uint64_t descriptor_layers[] = {0, 1, 2, 3};
static uint64_t owned_layers[] = {1, 2};

static reshard_binding_range *
add_range(uint64_t layer, reshard_component component, uint64_t token_start,
          uint64_t token_count, uint64_t head_start, uint64_t head_count,
          const char *region, uint64_t offset, uint64_t token_stride,
          uint64_t head_stride) {
  cr_assert_lt(fx.binding.range_count, CAPACITY);
  reshard_binding_range *r = &fx.binding.ranges[fx.binding.range_count++];
  *r = (reshard_binding_range){
      .global_layer_id = layer,
      .component = component,
      .token_start = token_start,
      .token_count = token_count,
      .head_start = head_start,
      .head_count = head_count,
      .region_id = region,
      .offset_bytes = offset,
      .token_stride_bytes = token_stride,
      .head_stride_bytes = head_stride,
  };
  return r;
}

static reshard_region *add_region(const char *id, uint64_t address,
                                  uint64_t nbytes) {
  cr_assert_lt(fx.binding.region_count, CAPACITY);
  reshard_region *r = &fx.binding.regions[fx.binding.region_count++];
  *r = (reshard_region){.region_id = id, .address = address, .nbytes = nbytes};
  return r;
}

/* Everything but the ranges. */
static void empty_base(void) {
  reshard_arena_init(&arena, 0);
  memset(&fx, 0, sizeof fx);
  fx.descriptor = (reshard_descriptor){
      .global_layer_ids = descriptor_layers,
      .layer_count = 4,
      .dtype = "bf16",
      .itemsize = 2,
      .page_size = 4,
      .total_kv_heads = 4,
      .key_head_dim = 4,
      .value_head_dim = 2,
  };
  fx.part = (reshard_placement_part){
      .participant_id = "r1",
      .rank = {0, 0, 1},
      .layer_ids = owned_layers,
      .layer_count = 2,
      .head_start = 2,
      .head_count = 2,
      .replica_ordinal = 0,
      .replica_count = 1,
  };
  fx.binding = (reshard_binding){
      .participant_id = "r1",
      .endpoint = "host:1",
      .regions = RESHARD_ARENA_NEW(&arena, reshard_region, CAPACITY),
      .ranges = RESHARD_ARENA_NEW(&arena, reshard_binding_range, CAPACITY),
  };
  fx.limits = reshard_limits_default();
  fx.pages = 2;
  add_region("kv", KV_ADDRESS, 4096);
  add_region("aux", 0x20000, 4096);
}

static void base(void) {
  empty_base();
  add_range(1, K, 0, 8, 2, 2, "kv", 0, 16, 8);
  add_range(1, V, 0, 8, 2, 2, "kv", 128, 8, 4);
  add_range(2, K, 0, 8, 2, 2, "kv", 192, 16, 8);
  add_range(2, V, 0, 8, 2, 2, "kv", 320, 8, 4);
}

static void teardown(void) {
  reshard_arena_destroy(&arena);
}

TestSuite(binding, .init = base, .fini = teardown);

static reshard_status validate(void) {
  return reshard_binding_validate(&fx.binding, &fx.descriptor, &fx.part,
                                  fx.pages, &fx.limits, &arena, &fx.out,
                                  &fx.err);
}

static void validate_ok(void) {
  cr_assert_eq(validate(), RESHARD_OK, "%s", fx.err.message);
}

#define ASSERT_INVALID(...)                                                    \
  ASSERT_FAILS(validate(), fx.err, RESHARD_INVALID_ARGUMENT, __VA_ARGS__)

/* ---- valid bindings --------------------------------------------------- */

Test(binding, base_binding_is_valid) {
  validate_ok();
  cr_assert_eq(fx.out.part, &fx.part);
  cr_assert_eq(fx.out.token_span, 8);
  cr_assert_eq(fx.out.range_count, 4);
  cr_assert_eq(fx.out.group_count, 4);
  for (size_t g = 0; g <= 4; g++) {
    cr_assert_eq(fx.out.group_start[g], g);
  }
  const reshard_bound_range *r = &fx.out.ranges[3];
  cr_assert_eq(r->layer_index, 1);
  cr_assert_eq(r->component, V);
  cr_assert_eq(r->token_start, 0);
  cr_assert_eq(r->token_end, 8);
  cr_assert_eq(r->head_start, 2);
  cr_assert_eq(r->head_end, 4);
  cr_assert_eq(r->region_index, 0);
  cr_assert_eq(r->region_offset, 320);
  cr_assert_eq(r->token_stride, 8);
  cr_assert_eq(r->head_stride, 4);
  cr_assert_gt(fx.out.validation_work, 0);
}

Test(binding, ranges_are_grouped_whatever_their_input_order) {
  reshard_binding_range *r = fx.binding.ranges;
  reshard_binding_range swap = r[0];
  r[0] = r[3];
  r[3] = swap;
  swap = r[1];
  r[1] = r[2];
  r[2] = swap;
  r[0].region_id = "aux"; /* L2 V now in "aux" */
  validate_ok();
  cr_assert_eq(fx.out.ranges[0].layer_index, 0);
  cr_assert_eq(fx.out.ranges[0].component, K);
  cr_assert_eq(fx.out.ranges[3].layer_index, 1);
  cr_assert_eq(fx.out.ranges[3].component, V);
  cr_assert_eq(fx.out.ranges[3].region_index, 1);
}

Test(binding, regions_are_found_by_id_among_many_alike) {
  /* Ids that differ only in their last characters, ranges that name them
   * through copies of their own (a decoder's strings), in no order. */
  static char ids[40][24], names[4][24];
  fx.binding.region_count = 0;
  for (int i = 0; i < 40; i++) {
    snprintf(ids[i], sizeof ids[i], "reader/L%d", 39 - i);
    add_region(ids[i], KV_ADDRESS + 4096 * (uint64_t)i, 4096);
  }
  static const int named[4] = {17, 3, 17, 38};
  for (int r = 0; r < 4; r++) {
    snprintf(names[r], sizeof names[r], "reader/L%d", 39 - named[r]);
    fx.binding.ranges[r].region_id = names[r];
  }
  validate_ok();
  /* Bound ranges come sorted by (layer, component): L1 K, L1 V, L2 K, L2 V,
   * as listed. */
  for (int r = 0; r < 4; r++) {
    cr_assert_eq(fx.out.ranges[r].region_index, (uint64_t)named[r], "range %d",
                 r);
  }
  fx.binding.ranges[2].region_id = "reader/L40";
  ASSERT_INVALID("binding.ranges[2].region_id:", "is not a region");
}

Test(binding, regions_are_found_among_thousands) {
  /* More regions than validation keeps addresses for (4096 slots, four
   * per region): past that, lookups go by the id's hash. Ranges name the
   * regions through copies of their own, twice the same copy. */
  enum { MANY = 3000 };
  static reshard_region regions[MANY];
  static char ids[MANY][24], names[3][24];
  for (int i = 0; i < MANY; i++) {
    snprintf(ids[i], sizeof ids[i], "reader/%d", i);
    regions[i] =
        (reshard_region){ids[i], KV_ADDRESS + 4096 * (uint64_t)i, 4096};
  }
  fx.binding.regions = regions;
  fx.binding.region_count = MANY;
  static const int named[4] = {2999, 0, 1500, 2999};
  for (int r = 0; r < 3; r++) {
    snprintf(names[r], sizeof names[r], "reader/%d", named[r]);
  }
  for (int r = 0; r < 4; r++) {
    fx.binding.ranges[r].region_id = names[r % 3];
  }
  validate_ok();
  for (int r = 0; r < 4; r++) {
    cr_assert_eq(fx.out.ranges[r].region_index, (uint64_t)named[r], "range %d",
                 r);
  }
  snprintf(names[1], sizeof names[1], "reader/%d", MANY);
  ASSERT_INVALID("binding.ranges[1].region_id:", "is not a region");
}

Test(binding, paged_pool_with_one_range_per_page_is_valid) {
  /* 4-token blocks scattered in reverse order over both regions. */
  fx.binding.range_count = 0;
  uint64_t block = 0;
  for (uint64_t layer = 1; layer <= 2; layer++) {
    for (uint64_t page = 0; page < 2; page++) {
      const char *region = page == 0 ? "aux" : "kv";
      add_range(layer, K, page * 4, 4, 2, 2, region, 2048 - 64 * ++block, 16,
                8);
      add_range(layer, V, page * 4, 4, 2, 2, region, 2048 - 64 * ++block, 8, 4);
    }
  }
  validate_ok();
  cr_assert_eq(fx.out.range_count, 8);
  cr_assert_eq(fx.out.group_start[1], 2);
  cr_assert_lt(fx.out.ranges[0].token_start, fx.out.ranges[1].token_start);
}

Test(binding, reader_blocks_need_not_match_the_page_size) {
  /* 3-token blocks over 4-token pages: [0,3) [3,6) [6,8). */
  fx.binding.range_count = 0;
  uint64_t offset = 0;
  for (uint64_t layer = 1; layer <= 2; layer++) {
    for (unsigned c = K; c <= V; c++) {
      uint64_t hb = c == K ? 8 : 4;
      for (uint64_t t = 0; t < 8; t += 3) {
        uint64_t n = t + 3 <= 8 ? 3 : 8 - t;
        add_range(layer, (reshard_component)c, t, n, 2, 2, "kv", offset, 2 * hb,
                  hb);
        offset += 3 * 2 * hb;
      }
    }
  }
  validate_ok();
  cr_assert_eq(fx.out.range_count, 12);
}

Test(binding, one_range_per_head_is_valid) {
  /* HND: L1 K as one range per head, head-major. */
  fx.binding.ranges[0] = fx.binding.ranges[3];
  fx.binding.range_count = 3;
  add_range(1, K, 0, 8, 2, 1, "aux", 0, 8, 8);
  add_range(1, K, 0, 8, 3, 1, "aux", 64, 8, 8);
  validate_ok();
  cr_assert_eq(fx.out.range_count, 5);
  cr_assert_eq(fx.out.group_start[1], 2);
}

Test(binding, heads_may_be_split_differently_per_token_run) {
  fx.binding.ranges[0].token_count = 4; /* L1 K tokens [0, 4) */
  add_range(1, K, 4, 4, 2, 1, "aux", 0, 8, 8);
  add_range(1, K, 4, 4, 3, 1, "aux", 32, 8, 8);
  validate_ok();
}

Test(binding, wide_strides_and_padding_are_valid) {
  /* Row padding, head padding, and offsets anywhere in the region. */
  fx.binding.ranges[0].head_stride_bytes = 12;
  fx.binding.ranges[0].token_stride_bytes = 64;
  fx.binding.ranges[0].offset_bytes = 1000;
  fx.binding.ranges[0].region_id = "aux";
  validate_ok();
}

Test(binding, a_range_may_end_on_the_regions_last_byte) {
  /* L2 V extent 64 bytes: offset 4096 - 64 ends exactly at nbytes. */
  fx.binding.ranges[3].offset_bytes = 4096 - 64;
  validate_ok();
}

Test(binding, single_tensor_cache_binds_keys_only) {
  fx.descriptor.value_head_dim = 0;
  fx.binding.ranges[1] = fx.binding.ranges[2];
  fx.binding.range_count = 2;
  validate_ok();
  cr_assert_eq(fx.out.range_count, 2);
  /* No V groups: each layer's K group, then an empty one. */
  static const size_t starts[] = {0, 1, 1, 2, 2};
  for (size_t g = 0; g <= 4; g++) {
    cr_assert_eq(fx.out.group_start[g], starts[g], "group %zu", g);
  }
}

Test(binding, interleaved_strided_ranges_without_shared_bytes_are_valid) {
  /* L1 K and V interleaved per token: K [24t, 24t+16), V [24t+16, 24t+24). */
  fx.binding.ranges[0].token_stride_bytes = 24;
  fx.binding.ranges[1].offset_bytes = 16;
  fx.binding.ranges[1].token_stride_bytes = 24;
  validate_ok();
}

Test(binding, interleaved_per_head_ranges_without_shared_bytes_are_valid) {
  /* L1 K as two one-head ranges interleaved per token. */
  fx.binding.ranges[0] = fx.binding.ranges[3];
  fx.binding.range_count = 3;
  add_range(1, K, 0, 8, 2, 1, "aux", 0, 16, 8);
  add_range(1, K, 0, 8, 3, 1, "aux", 8, 16, 8);
  validate_ok();
}

Test(binding, aliased_regions_are_valid_when_no_byte_is_shared) {
  /* "alias" maps the same memory as "kv"; L2 V moves there at the offset
   * it had, so it still occupies the same, unshared bytes. */
  add_region("alias", KV_ADDRESS, 4096);
  fx.binding.ranges[3].region_id = "alias";
  validate_ok();
  cr_assert_eq(fx.out.ranges[3].region_index, 2);
}

/* ---- regions ---------------------------------------------------------- */

Test(binding, rejects_empty_region_id) {
  fx.binding.regions[1].region_id = "";
  ASSERT_INVALID("binding.regions[1].region_id:", "must not be empty");
}

Test(binding, rejects_missing_region_id) {
  fx.binding.regions[0].region_id = NULL;
  ASSERT_INVALID("binding.regions[0].region_id:", "must not be empty");
}

Test(binding, rejects_duplicate_region_id) {
  add_region("kv", 0x40000, 64);
  ASSERT_INVALID("binding.regions[",
                 "].region_id:", "\"kv\" appears more than once");
}

Test(binding, rejects_region_address_zero) {
  fx.binding.regions[0].address = 0;
  ASSERT_INVALID("binding.regions[0].address:", "must be at least 1");
}

Test(binding, rejects_region_nbytes_zero) {
  fx.binding.regions[1].nbytes = 0;
  ASSERT_INVALID("binding.regions[1].nbytes:", "must be at least 1");
}

Test(binding, rejects_region_end_overflow) {
  fx.binding.regions[1].address = UINT64_MAX - 100;
  ASSERT_INVALID("binding.regions[1]:", "address + nbytes overflows 64 bits");
}

Test(binding, rejects_region_ending_exactly_at_two_to_the_64) {
  fx.binding.regions[1].address = UINT64_MAX - 4095; /* + 4096 = 2^64 */
  ASSERT_INVALID("binding.regions[1]:", "overflows 64 bits");
}

/* ---- per-range rules -------------------------------------------------- */

ParameterizedTestParameters(binding, rejects_layer_not_owned) {
  /* 0 and 3 are descriptor layers of other participants; 99 is none. */
  static uint64_t layers[] = {0, 3, 99, UINT64_MAX};
  return cr_make_param_array(uint64_t, layers,
                             sizeof layers / sizeof layers[0]);
}

ParameterizedTest(uint64_t *layer, binding, rejects_layer_not_owned) {
  fx.binding.ranges[2].global_layer_id = *layer;
  char expected[96];
  snprintf(expected, sizeof expected,
           "layer %llu is not owned by participant \"r1\"",
           (unsigned long long)*layer);
  ASSERT_INVALID("binding.ranges[2].global_layer_id:", expected);
}

ParameterizedTestParameters(binding, rejects_invalid_component) {
  static int components[] = {0, 3, 255};
  return cr_make_param_array(int, components,
                             sizeof components / sizeof components[0]);
}

ParameterizedTest(int *component, binding, rejects_invalid_component) {
  fx.binding.ranges[1].component = (reshard_component)*component;
  ASSERT_INVALID("binding.ranges[1].component:", "must be KEY or VALUE");
}

Test(binding, rejects_value_range_on_single_tensor_cache) {
  fx.descriptor.value_head_dim = 0;
  ASSERT_INVALID("binding.ranges[1].component:", "VALUE",
                 "no V component (value_head_dim 0)");
}

Test(binding, rejects_zero_token_count) {
  fx.binding.ranges[0].token_count = 0;
  ASSERT_INVALID("binding.ranges[0].token_count:", "must be at least 1");
}

Test(binding, rejects_zero_head_count) {
  fx.binding.ranges[3].head_count = 0;
  ASSERT_INVALID("binding.ranges[3].head_count:", "must be at least 1");
}

struct token_case {
  uint64_t token_start;
  uint64_t token_count;
  char expected[96];
};

ParameterizedTestParameters(binding, rejects_tokens_outside_the_span) {
  static struct token_case cases[] = {
      {4, 8,
       "binding.ranges[0]: tokens [4, +8) leave the request's span "
       "[0, 8)"},
      {8, 1, "binding.ranges[0]: tokens [8, +1) leave"},
      {0, 9, "binding.ranges[0]: tokens [0, +9) leave"},
      /* token_start + token_count wraps around 2^64 */
      {UINT64_MAX, 2, "binding.ranges[0]: tokens [18446744073709551615, +2)"},
      {2, UINT64_MAX, "binding.ranges[0]: tokens [2, +18446744073709551615)"},
  };
  return cr_make_param_array(struct token_case, cases,
                             sizeof cases / sizeof cases[0]);
}

ParameterizedTest(struct token_case *c, binding,
                  rejects_tokens_outside_the_span) {
  fx.binding.ranges[0].token_start = c->token_start;
  fx.binding.ranges[0].token_count = c->token_count;
  ASSERT_INVALID(c->expected, "span [0, 8)");
}

struct head_case {
  uint64_t head_start;
  uint64_t head_count;
  char expected[96];
};

ParameterizedTestParameters(binding, rejects_heads_outside_the_participant) {
  static struct head_case cases[] = {
      {1, 2,
       "binding.ranges[2]: heads [1, +2) leave participant \"r1\"'s "
       "heads [2, 4)"},
      {3, 2, "binding.ranges[2]: heads [3, +2) leave"},
      {0, 1, "binding.ranges[2]: heads [0, +1) leave"},
      {UINT64_MAX, 2, "binding.ranges[2]: heads [18446744073709551615, +2)"},
      {3, UINT64_MAX, "binding.ranges[2]: heads [3, +18446744073709551615)"},
  };
  return cr_make_param_array(struct head_case, cases,
                             sizeof cases / sizeof cases[0]);
}

ParameterizedTest(struct head_case *c, binding,
                  rejects_heads_outside_the_participant) {
  fx.binding.ranges[2].head_start = c->head_start;
  fx.binding.ranges[2].head_count = c->head_count;
  ASSERT_INVALID(c->expected, "heads [2, 4)");
}

Test(binding, rejects_unknown_region_id) {
  fx.binding.ranges[1].region_id = "nope";
  ASSERT_INVALID("binding.ranges[1].region_id:",
                 "\"nope\" is not a region of the binding");
}

Test(binding, rejects_empty_range_region_id) {
  fx.binding.ranges[1].region_id = "";
  ASSERT_INVALID("binding.ranges[1].region_id:");
}

Test(binding, rejects_missing_range_region_id) {
  fx.binding.ranges[1].region_id = NULL;
  ASSERT_INVALID("binding.ranges[1].region_id:", "must not be empty");
}

Test(binding, rejects_head_stride_below_head_bytes) {
  fx.binding.ranges[0].head_stride_bytes = 6; /* hb(K) = 8 */
  ASSERT_INVALID("binding.ranges[0]: head_stride_bytes 6 is below the head "
                 "width 8");
}

Test(binding, rejects_head_stride_below_head_bytes_for_one_head) {
  /* Even a one-head range must declare head_stride >= hb. */
  fx.binding.ranges[1].head_count = 1;
  fx.binding.ranges[1].head_stride_bytes = 2; /* hb(V) = 4 */
  ASSERT_INVALID("binding.ranges[1]: head_stride_bytes 2 is below the head "
                 "width 4");
}

Test(binding, rejects_token_stride_below_row_span) {
  /* The SPEC §3.4 example: L2 V, 2 heads, head stride 508: row span
   * (2 - 1) * 508 + 4 = 512. */
  fx.binding.ranges[3].head_stride_bytes = 508;
  fx.binding.ranges[3].token_stride_bytes = 256;
  ASSERT_INVALID(
      "binding.ranges[3]: token_stride_bytes 256 is below the row span 512");
}

Test(binding, rejects_token_stride_one_below_row_span) {
  fx.binding.ranges[0].token_stride_bytes = 14; /* row span 8 + 8 = 16 */
  ASSERT_INVALID(
      "binding.ranges[0]: token_stride_bytes 14 is below the row span 16");
}

Test(binding, rejects_row_span_overflow) {
  fx.binding.ranges[0].head_stride_bytes = UINT64_MAX - 1;
  fx.binding.ranges[0].token_stride_bytes = UINT64_MAX - 1;
  ASSERT_INVALID("binding.ranges[0]:", "row span overflows 64 bits");
}

struct outside_case {
  uint64_t offset;
  uint64_t token_stride;
};

ParameterizedTestParameters(binding, rejects_last_byte_outside_region) {
  static struct outside_case cases[] = {
      /* L0 K extent 128: one byte past the end (even offset, so only the
       * bound rule breaks) */
      {4096 - 126, 16},
      {4096, 16},
      /* offset near 2^64: offset + extent wraps */
      {UINT64_MAX - 1, 16},
      {UINT64_MAX - 127, 16},
      /* token stride near 2^64: (count - 1) * stride wraps */
      {0, UINT64_MAX - 1},
      {0, (UINT64_MAX / 7) & ~UINT64_C(1)},
  };
  return cr_make_param_array(struct outside_case, cases,
                             sizeof cases / sizeof cases[0]);
}

ParameterizedTest(struct outside_case *c, binding,
                  rejects_last_byte_outside_region) {
  fx.binding.ranges[0].offset_bytes = c->offset;
  fx.binding.ranges[0].token_stride_bytes = c->token_stride;
  ASSERT_INVALID("binding.ranges[0]:", "last byte lies outside region \"kv\"",
                 "4096 bytes");
}

Test(binding, rejects_offset_not_a_multiple_of_itemsize) {
  fx.binding.ranges[2].offset_bytes = 193;
  ASSERT_INVALID("binding.ranges[2].offset_bytes:",
                 "not a multiple of itemsize 2");
}

Test(binding, rejects_region_address_not_a_multiple_of_itemsize) {
  fx.binding.regions[1].address = 0x20001;
  fx.binding.ranges[3].region_id = "aux";
  fx.binding.ranges[3].offset_bytes = 0;
  ASSERT_INVALID("binding.ranges[3].offset_bytes:",
                 "region address + offset is not a multiple of itemsize 2");
}

/* itemsize 3, not a power of two, so multiples are found by division:
 * hb(K) 12 and hb(V) 6 bytes, the base's four ranges scaled, in a region
 * at an address that is a multiple of 3. Runs after the suite's base(). */
static void base_itemsize_3(void) {
  static const uint64_t offsets[] = {0, 192, 288, 480};
  fx.descriptor.itemsize = 3;
  fx.binding.regions[0].address = KV_ADDRESS + 2;
  for (size_t i = 0; i < 4; i++) {
    reshard_binding_range *r = &fx.binding.ranges[i];
    bool key = r->component == K;
    r->offset_bytes = offsets[i];
    r->token_stride_bytes = key ? 24 : 12;
    r->head_stride_bytes = key ? 12 : 6;
  }
}

Test(binding, an_itemsize_of_3_accepts_multiples_of_3,
     .init = base_itemsize_3) {
  validate_ok();
}

/* 484 is a multiple of 4 (and so passes a mask test for a power of two
 * near 3) but not of 3. */
Test(binding, an_itemsize_of_3_refuses_other_offsets, .init = base_itemsize_3) {
  fx.binding.ranges[3].offset_bytes = 484;
  ASSERT_INVALID("binding.ranges[3].offset_bytes:",
                 "not a multiple of itemsize 3");
}

Test(binding, an_itemsize_of_3_refuses_other_strides, .init = base_itemsize_3) {
  fx.binding.ranges[3].token_stride_bytes = 16;
  ASSERT_INVALID("binding.ranges[3].token_stride_bytes:",
                 "not a multiple of itemsize 3");
}

Test(binding, odd_address_plus_odd_offset_is_aligned) {
  fx.binding.regions[1].address = 0x20001;
  fx.binding.ranges[3].region_id = "aux";
  fx.binding.ranges[3].offset_bytes = 1;
  validate_ok();
}

Test(binding, rejects_token_stride_not_a_multiple_of_itemsize) {
  fx.binding.ranges[0].token_stride_bytes = 17;
  ASSERT_INVALID("binding.ranges[0]", "token_stride_bytes",
                 "multiple of itemsize 2");
}

Test(binding, rejects_head_stride_not_a_multiple_of_itemsize) {
  /* row span 9 + 8 = 17, token stride 18: only the head stride is bad. */
  fx.binding.ranges[0].head_stride_bytes = 9;
  fx.binding.ranges[0].token_stride_bytes = 18;
  ASSERT_INVALID("binding.ranges[0]", "head_stride_bytes",
                 "multiple of itemsize 2");
}

/* ---- no two values share a byte --------------------------------------- */

Test(binding, rejects_two_ranges_sharing_bytes) {
  fx.binding.ranges[1].offset_bytes = 120; /* into L1 K's last 8 bytes */
  ASSERT_INVALID("binding.ranges[0] and binding.ranges[1] share memory at "
                 "address 0x10078",
                 "no two values may share a byte");
}

Test(binding, rejects_a_range_inside_another) {
  fx.binding.ranges[3].offset_bytes = 200; /* inside L2 K [192, 320) */
  ASSERT_INVALID("binding.ranges[2] and binding.ranges[3] share memory");
}

Test(binding, rejects_interleaved_strided_ranges_sharing_a_byte) {
  /* K token t at [24t, 24t+16); V token t at [24t+14, 24t+18): the V
   * value of token t overlaps the K bytes 14..15 of the same token. */
  fx.binding.ranges[0].token_stride_bytes = 24;
  fx.binding.ranges[1].offset_bytes = 14;
  fx.binding.ranges[1].token_stride_bytes = 24;
  ASSERT_INVALID("binding.ranges[0] and binding.ranges[1] share memory",
                 "0x1000e");
}

Test(binding, rejects_interleaved_strided_ranges_sharing_only_the_last_row) {
  /* K rows of 16 bytes at 64t; V rows of 8 bytes at 40 + 60t drift left
   * through K's gaps [64t + 16, 64t + 64): V token 6 at [400, 408) just
   * follows K token 6 [384, 400), but V token 7 at [460, 468) overlaps the
   * last 4 bytes of K token 7 [448, 464). Only that pair shares bytes. */
  fx.binding.ranges[0].token_stride_bytes = 64;
  fx.binding.ranges[1].offset_bytes = 40;
  fx.binding.ranges[1].token_stride_bytes = 60;
  fx.binding.ranges[2].offset_bytes = 512; /* out of the way */
  fx.binding.ranges[3].offset_bytes = 640;
  ASSERT_INVALID("binding.ranges[0] and binding.ranges[1] share memory at "
                 "address 0x101cc");
}

Test(binding, interleaved_rows_that_only_touch_are_valid) {
  /* As above for tokens [0, 7) only: V rows at 40 + 60t end with token 6
   * at [400, 408), touching K token 6's end (400) without sharing a
   * byte. Token 7 of L1 K and V is bound in "aux". */
  fx.binding.ranges[0].token_stride_bytes = 64;
  fx.binding.ranges[0].token_count = 7;
  fx.binding.ranges[1].offset_bytes = 40;
  fx.binding.ranges[1].token_stride_bytes = 60;
  fx.binding.ranges[1].token_count = 7;
  fx.binding.ranges[2].offset_bytes = 512;
  fx.binding.ranges[3].offset_bytes = 640;
  add_range(1, K, 7, 1, 2, 2, "aux", 0, 16, 8);
  add_range(1, V, 7, 1, 2, 2, "aux", 16, 8, 4);
  validate_ok();
}

Test(binding, rejects_interleaved_per_head_ranges_sharing_a_byte) {
  fx.binding.ranges[0] = fx.binding.ranges[3];
  fx.binding.range_count = 3;
  add_range(1, K, 0, 8, 2, 1, "aux", 0, 16, 8);
  add_range(1, K, 0, 8, 3, 1, "aux", 6, 16, 8); /* head 3 overlaps head 2 */
  ASSERT_INVALID("binding.ranges[3] and binding.ranges[4] share memory",
                 "0x20006");
}

Test(binding, rejects_aliased_regions_sharing_bytes) {
  add_region("alias", KV_ADDRESS, 4096);
  fx.binding.ranges[3].region_id = "alias";
  fx.binding.ranges[3].offset_bytes = 0; /* the bytes of L1 K */
  /* Both spans start at 0x10000, so either may be named first. */
  ASSERT_INVALID("binding.ranges[0]", "binding.ranges[3]",
                 "share memory at address 0x10000");
}

Test(binding, rejects_partly_aliased_regions_sharing_bytes) {
  add_region("window", KV_ADDRESS + 100, 100);
  fx.binding.ranges[3].region_id = "window";
  fx.binding.ranges[3].offset_bytes = 0; /* [100, 164): L1 K and L1 V */
  ASSERT_INVALID("share memory", "no two values may share a byte");
}

/* A paged pool in one region: 1-token blocks, every (layer, component,
 * token) its own range, in the sorted order, at slots of 16 bytes taken
 * in a scattered order (7 is prime to the 48 slots), a third of the slots
 * left free. K blocks are 16 bytes, V blocks 8. The spans lie densely, so
 * the disjointness proof orders them by slot rather than by a sort. */
static void scattered_blocks(uint64_t region_bytes) {
  fx.binding.range_count = 0;
  fx.binding.regions[0].nbytes = region_bytes;
  unsigned slot = 0;
  for (uint64_t layer = 1; layer <= 2; layer++) {
    for (unsigned c = K; c <= V; c++) {
      uint64_t hb = c == K ? 8 : 4;
      for (uint64_t t = 0; t < 8; t++) {
        slot = (slot + 7) % 48;
        add_range(layer, (reshard_component)c, t, 1, 2, 2, "kv", 16 * slot,
                  2 * hb, hb);
      }
    }
  }
}

Test(binding, scattered_blocks_are_proved_apart) {
  scattered_blocks(4096);
  validate_ok();
  cr_assert_eq(fx.out.range_count, 32);
  for (size_t g = 0; g <= 4; g++) {
    cr_assert_eq(fx.out.group_start[g], 8 * g, "group %zu", g);
  }
  /* One work unit per range and region: no cluster was split. */
  cr_assert_eq(fx.out.validation_work, 32 + 2 + 4 * 8 * 3);
}

Test(binding, rejects_scattered_blocks_sharing_a_slot) {
  /* L1 V token 0 (8 bytes) starts 4 bytes into L1 K token 5's block: both
   * start in one 8-byte slot of the proof's table. */
  scattered_blocks(4096);
  fx.binding.ranges[8].offset_bytes = fx.binding.ranges[5].offset_bytes + 4;
  char message[96];
  snprintf(
      message, sizeof message,
      "binding.ranges[5] and binding.ranges[8] share memory at address "
      "0x%llx",
      (unsigned long long)(KV_ADDRESS + fx.binding.ranges[8].offset_bytes));
  ASSERT_INVALID(message, "no two values may share a byte");
}

Test(binding, rejects_scattered_blocks_overlapping_the_next_slot) {
  /* L2 K token 3 (16 bytes) starts 8 bytes into L1 K token 6's block: the
   * two start in neighbouring slots, and the pass over the slots finds the
   * first one ending past the second's start. */
  scattered_blocks(4096);
  fx.binding.ranges[19].offset_bytes = fx.binding.ranges[6].offset_bytes + 8;
  char message[96];
  snprintf(
      message, sizeof message,
      "binding.ranges[6] and binding.ranges[19] share memory at address 0x%llx",
      (unsigned long long)(KV_ADDRESS + fx.binding.ranges[19].offset_bytes));
  ASSERT_INVALID(message, "no two values may share a byte");
}

Test(binding, sparse_scattered_blocks_are_proved_apart_by_the_sort) {
  /* One block 1 MiB away: too few spans for a table of that many slots;
   * the sorted proof decides, with the same answers. */
  scattered_blocks(UINT64_C(1) << 21);
  fx.binding.ranges[12].offset_bytes = UINT64_C(1) << 20;
  validate_ok();
  fx.binding.ranges[13].offset_bytes = (UINT64_C(1) << 20) + 4;
  ASSERT_INVALID("binding.ranges[12] and binding.ranges[13] share memory");
}

Test(binding, neighbouring_ranges_of_other_regions_and_layers_are_told_apart) {
  /* Ranges alternate between regions named by one shared string each and
   * by copies, and between layers, so a remembered region or layer that
   * is not the range's own would show. */
  static char kv_copy[] = "kv", aux_copy[] = "aux";
  fx.binding.range_count = 0;
  add_range(1, K, 0, 4, 2, 2, "kv", 0, 16, 8);
  add_range(1, K, 4, 4, 2, 2, "aux", 0, 16, 8);
  add_range(1, V, 0, 4, 2, 2, aux_copy, 64, 8, 4);
  add_range(1, V, 4, 4, 2, 2, aux_copy, 96, 8, 4);
  add_range(2, K, 0, 4, 2, 2, kv_copy, 64, 16, 8);
  add_range(2, K, 4, 4, 2, 2, "kv", 128, 16, 8);
  add_range(2, V, 0, 8, 2, 2, "aux", 128, 8, 4);
  validate_ok();
  static const uint64_t regions[] = {0, 1, 1, 1, 0, 0, 1};
  static const uint64_t layers[] = {0, 0, 0, 0, 1, 1, 1};
  for (size_t r = 0; r < 7; r++) {
    cr_assert_eq(fx.out.ranges[r].region_index, regions[r], "range %zu", r);
    cr_assert_eq(fx.out.ranges[r].layer_index, layers[r], "range %zu", r);
  }
  fx.binding.ranges[5].global_layer_id = 3;
  ASSERT_INVALID("binding.ranges[5].global_layer_id: layer 3 is not owned");
}

/* ---- ranges shaped as the range before -------------------------------- */

/* Every group as two 4-token blocks shaped alike, one after another in
 * "kv": ranges[2g] is block [0, 4) of group g, ranges[2g + 1] block [4, 8),
 * which validation checks as the one before it moved. */
static void paged_alike(void) {
  fx.binding.range_count = 0;
  uint64_t offset = 0;
  for (uint64_t layer = 1; layer <= 2; layer++) {
    for (unsigned c = K; c <= V; c++) {
      uint64_t hb = c == K ? 8 : 4;
      for (uint64_t page = 0; page < 2; page++) {
        add_range(layer, (reshard_component)c, 4 * page, 4, 2, 2, "kv", offset,
                  2 * hb, hb);
        offset += 4 * 2 * hb;
      }
    }
  }
}

Test(binding, blocks_shaped_alike_bind_as_each_one_alone) {
  paged_alike();
  validate_ok();
  cr_assert_eq(fx.out.range_count, 8);
  for (size_t r = 0; r < 8; r++) {
    const reshard_bound_range *got = &fx.out.ranges[r];
    const reshard_binding_range *in = &fx.binding.ranges[r];
    cr_assert_eq(got->layer_index, r / 4, "range %zu", r);
    cr_assert_eq(got->component, in->component, "range %zu", r);
    cr_assert_eq(got->token_start, in->token_start, "range %zu", r);
    cr_assert_eq(got->token_end, in->token_start + 4, "range %zu", r);
    cr_assert_eq(got->head_start, 2, "range %zu", r);
    cr_assert_eq(got->head_end, 4, "range %zu", r);
    cr_assert_eq(got->region_index, 0, "range %zu", r);
    cr_assert_eq(got->region_offset, in->offset_bytes, "range %zu", r);
    cr_assert_eq(got->token_stride, in->token_stride_bytes, "range %zu", r);
    cr_assert_eq(got->head_stride, in->head_stride_bytes, "range %zu", r);
  }
  for (size_t g = 0; g <= 4; g++) {
    cr_assert_eq(fx.out.group_start[g], 2 * g, "group %zu", g);
  }
  /* One range a page in every group, each binding the page whole. */
  cr_assert_eq(fx.out.page_blocks, 4);
}

Test(binding, blocks_other_than_pages_are_not_page_blocks) {
  validate_ok(); /* the base: one range over both pages a group */
  cr_assert_eq(fx.out.page_blocks, 0);
  paged_alike();
  fx.binding.ranges[5].token_stride_bytes = 32; /* not shaped alike */
  fx.binding.ranges[5].offset_bytes = 1024;
  validate_ok();
  cr_assert_eq(fx.out.page_blocks, 0);
  /* Pages bound one head a range, in order. */
  fx.binding.range_count = 0;
  uint64_t offset = 0;
  for (uint64_t layer = 1; layer <= 2; layer++) {
    for (unsigned c = K; c <= V; c++) {
      uint64_t hb = c == K ? 8 : 4;
      for (uint64_t page = 0; page < 2; page++) {
        for (uint64_t head = 2; head < 4; head++) {
          add_range(layer, (reshard_component)c, 4 * page, 4, head, 1, "kv",
                    offset, hb, hb);
          offset += 4 * hb;
        }
      }
    }
  }
  validate_ok();
  cr_assert_eq(fx.out.page_blocks, 0);
}

/* whole_span lets the planner take every page as the page before moved
 * without comparing them: it must hold exactly when every range binds all
 * the span's tokens, however the heads are split. */
Test(binding, ranges_over_every_token_are_whole_span) {
  validate_ok(); /* the base: one range over both pages a group */
  cr_assert(fx.out.whole_span);
  /* L1 K bound one head a range, each over every token. */
  fx.binding.ranges[0].head_count = 1;
  add_range(1, K, 0, 8, 3, 1, "kv", 8, 16, 8);
  validate_ok();
  cr_assert(fx.out.whole_span);
  /* L2 V bound in two token halves: tiled, but not by whole-span ranges. */
  fx.binding.ranges[3].token_count = 4;
  add_range(2, V, 4, 4, 2, 2, "kv", 352, 8, 4);
  validate_ok();
  cr_assert_not(fx.out.whole_span);
  paged_alike();
  validate_ok();
  cr_assert_not(fx.out.whole_span);
}

Test(binding, blocks_shaped_alike_listed_out_of_order_are_sorted) {
  paged_alike();
  reshard_binding_range first = fx.binding.ranges[4];
  fx.binding.ranges[4] = fx.binding.ranges[5];
  fx.binding.ranges[5] = first;
  validate_ok();
  cr_assert_eq(fx.out.ranges[4].token_start, 0);
  cr_assert_eq(fx.out.ranges[4].region_offset, first.offset_bytes);
  cr_assert_eq(fx.out.ranges[5].token_start, 4);
  cr_assert_eq(fx.out.ranges[5].region_offset,
               fx.binding.ranges[4].offset_bytes);
  cr_assert_eq(fx.out.page_blocks, 4); /* sorted, each still a page */
}

/* paged_alike's blocks of `page_size` tokens, listed page by page, as a
 * reader walking its block table writes them: every range follows one of
 * another group, so each is shaped as its group's first, not as the range
 * before it. ranges[4 * page + 2 * (layer - 1) + component - 1]. */
static void paged_by_page(uint64_t page_size) {
  fx.descriptor.page_size = page_size;
  fx.binding.range_count = 0;
  for (uint64_t page = 0; page < 2; page++) {
    for (uint64_t layer = 1; layer <= 2; layer++) {
      for (unsigned c = K; c <= V; c++) {
        uint64_t hb = c == K ? 8 : 4;
        /* Each group's two blocks side by side, as in paged_alike. */
        uint64_t group = 2 * (layer - 1) + (c - 1);
        uint64_t offset =
            group * 2 * page_size * 16 + page * page_size * 2 * hb;
        add_range(layer, (reshard_component)c, page_size * page, page_size, 2,
                  2, "kv", offset, 2 * hb, hb);
      }
    }
  }
}

Test(binding, blocks_listed_page_by_page_are_sorted_page_blocks) {
  for (uint64_t page_size = 3; page_size <= 4; page_size++) {
    paged_by_page(page_size); /* 3: placed by division, 4: by a shift */
    validate_ok();
    cr_assert_eq(fx.out.page_blocks, page_size);
    for (size_t g = 0; g <= 4; g++) {
      cr_assert_eq(fx.out.group_start[g], 2 * g, "group %zu", g);
    }
    for (size_t r = 0; r < 8; r++) {
      const reshard_bound_range *got = &fx.out.ranges[r];
      const reshard_binding_range *in = &fx.binding.ranges[4 * (r % 2) + r / 2];
      cr_assert_eq(got->layer_index, r / 4, "range %zu", r);
      cr_assert_eq(got->component, in->component, "range %zu", r);
      cr_assert_eq(got->token_start, page_size * (r % 2), "range %zu", r);
      cr_assert_eq(got->token_end, got->token_start + page_size, "range %zu",
                   r);
      cr_assert_eq(got->head_start, 2, "range %zu", r);
      cr_assert_eq(got->head_end, 4, "range %zu", r);
      cr_assert_eq(got->region_offset, in->offset_bytes, "range %zu", r);
      cr_assert_eq(got->token_stride, in->token_stride_bytes, "range %zu", r);
      cr_assert_eq(got->head_stride, in->head_stride_bytes, "range %zu", r);
    }
  }
}

Test(binding, blocks_listed_page_by_page_in_two_shapes_are_not_page_blocks) {
  paged_by_page(4);
  fx.binding.ranges[6].token_stride_bytes = 32; /* L2 K's second block */
  fx.binding.ranges[6].offset_bytes = 1024;
  validate_ok();
  cr_assert_eq(fx.out.page_blocks, 0);
  cr_assert_eq(fx.out.ranges[5].token_stride, 32);
  cr_assert_eq(fx.out.ranges[5].region_offset, 1024);
}

/* Every group's two pages in a pool of 256-byte blocks, block-major as
 * one block table serves every layer: page p of group g at
 * slot[p] * 256 + 64 * g, page 0 in slot 1 and page 1 in slot 0, so each
 * page lies 256 bytes before the page before it. Listed in order, or
 * page by page. */
static void pages_in_one_table(bool page_by_page) {
  fx.binding.range_count = 0;
  const uint64_t slot[2] = {1, 0};
  for (uint64_t i = 0; i < 8; i++) {
    uint64_t page = page_by_page ? i / 4 : i % 2;
    uint64_t group = page_by_page ? i % 4 : i / 2;
    uint64_t hb = group % 2 == 0 ? 8 : 4;
    add_range(1 + group / 2, group % 2 == 0 ? K : V, 4 * page, 4, 2, 2, "kv",
              slot[page] * 256 + 64 * group, 2 * hb, hb);
  }
}

Test(binding, pages_of_one_block_table_are_aligned) {
  for (int page_by_page = 0; page_by_page <= 1; page_by_page++) {
    pages_in_one_table(page_by_page);
    validate_ok();
    cr_assert_eq(fx.out.page_blocks, 4);
    cr_assert(fx.out.pages_aligned, "page by page: %d", page_by_page);
  }
}

Test(binding, pages_moved_apart_in_one_group_are_not_aligned) {
  /* paged_alike: K's pages lie 64 bytes apart, V's 32. */
  paged_alike();
  validate_ok();
  cr_assert_eq(fx.out.page_blocks, 4);
  cr_assert_not(fx.out.pages_aligned);
  /* One table, but L2 V's page 1 in a slot of its own. */
  pages_in_one_table(false);
  fx.binding.ranges[7].offset_bytes = 2 * 256 + 64 * 3;
  validate_ok();
  cr_assert_eq(fx.out.page_blocks, 4);
  cr_assert_not(fx.out.pages_aligned);
}

Test(binding, pages_apart_by_one_amount_only_modulo_2_64_are_not_aligned) {
  /* L2 V in a region of nearly 2^64 bytes, its page 0 near the top and its
   * page 1 near the bottom: 256 bytes on modulo 2^64 as every other
   * group's page 1 lies 256 bytes on from its page 0, but backwards. */
  pages_in_one_table(false);
  add_region("far", 2, UINT64_MAX - 3);
  for (size_t r = 0; r < 6; r++) {
    fx.binding.ranges[r].offset_bytes = (r % 2) * 256 + 64 * (r / 2);
  }
  fx.binding.ranges[6].region_id = "far";
  fx.binding.ranges[6].offset_bytes = UINT64_MAX - 199;
  fx.binding.ranges[7].region_id = "far";
  fx.binding.ranges[7].offset_bytes = 56; /* 2^64 - 200 + 256 - 2^64 */
  validate_ok();
  cr_assert_eq(fx.out.page_blocks, 4);
  cr_assert_not(fx.out.pages_aligned);
  /* The same distance forwards in every group is aligned. */
  fx.binding.ranges[6].offset_bytes = 1000;
  fx.binding.ranges[7].offset_bytes = 1256;
  validate_ok();
  cr_assert(fx.out.pages_aligned);
}

/* ---- aligned page blocks proved apart ---------------------------------- */

/* A small deterministic generator: the cases are the same on every run. */
static uint64_t next_random(uint64_t *state) {
  *state = *state * 6364136223846793005ull + 1442695040888963407ull;
  return *state >> 33;
}

/* Aligned page blocks of the base's four groups over `pages` pages: page p
 * of group g at offset group_at[g] + page_at[p] of a 1 MiB "kv", each
 * block contiguous (K 64 bytes, V 32). Listed by group, page by page, or
 * in a shuffled order. */
static void aligned_blocks(uint64_t pages, const uint64_t *group_at,
                           const uint64_t *page_at, int listing,
                           uint64_t *state) {
  fx.pages = pages;
  fx.binding.range_count = 0;
  fx.binding.regions[0].nbytes = UINT64_C(1) << 20;
  for (uint64_t i = 0; i < 4 * pages; i++) {
    uint64_t page = listing == 1 ? i / 4 : i % pages;
    uint64_t group = listing == 1 ? i % 4 : i / pages;
    uint64_t hb = group % 2 == 0 ? 8 : 4;
    add_range(1 + group / 2, group % 2 == 0 ? K : V, 4 * page, 4, 2, 2, "kv",
              group_at[group] + page_at[page], 2 * hb, hb);
  }
  for (size_t i = fx.binding.range_count; listing == 2 && i > 1; i--) {
    size_t j = (size_t)(next_random(state) % i);
    reshard_binding_range swap = fx.binding.ranges[i - 1];
    fx.binding.ranges[i - 1] = fx.binding.ranges[j];
    fx.binding.ranges[j] = swap;
  }
}

/* Whether any two of the ranges' bytes meet, pair by pair. */
static bool any_blocks_meet(void) {
  for (size_t i = 0; i < fx.binding.range_count; i++) {
    for (size_t j = i + 1; j < fx.binding.range_count; j++) {
      const reshard_binding_range *a = &fx.binding.ranges[i];
      const reshard_binding_range *b = &fx.binding.ranges[j];
      uint64_t a_end = a->offset_bytes + 4 * a->token_stride_bytes;
      uint64_t b_end = b->offset_bytes + 4 * b->token_stride_bytes;
      if (a->offset_bytes < b_end && b->offset_bytes < a_end) {
        return true;
      }
    }
  }
  return false;
}

/* The aligned proof (lib/model/binding_disjoint.c) takes block-major and
 * layer-major layouts without a sort; neither may let two blocks that
 * share a byte through. Random layouts of each kind, some packed too
 * tight on purpose, and layouts at random, are held to a pairwise check
 * of every two blocks, in every listing order. */
Test(binding, aligned_page_blocks_pass_exactly_when_no_two_share_a_byte) {
  uint64_t state = 26;
  int passed[4] = {0}, refused[4] = {0};
  for (int round = 0; round < 4000; round++) {
    /* block-major, layer-major, a layer's K and V side by side in a
     * place of their own, at random */
    int kind = round % 4;
    uint64_t pages = 1 + next_random(&state) % 16;
    uint64_t group_at[4], page_at[16];
    /* Slots for the pages, in a shuffled order; a tight slot or group
     * stride makes some blocks meet. */
    uint64_t order[16];
    for (uint64_t p = 0; p < pages; p++) {
      order[p] = p;
    }
    for (uint64_t p = pages; p > 1; p--) {
      uint64_t q = next_random(&state) % p, swap = order[p - 1];
      order[p - 1] = order[q];
      order[q] = swap;
    }
    bool tight = next_random(&state) % 4 == 0;
    if (kind == 0) {
      /* One block of 192 bytes a page: every group's block in it. */
      uint64_t at[4] = {0, 64, 96, 160};
      for (int g = 0; g < 4; g++) {
        group_at[g] = 2048 + at[g] - (tight && g == 3 ? 8 : 0);
      }
      uint64_t stride = tight && next_random(&state) % 2 ? 184 : 192;
      for (uint64_t p = 0; p < pages; p++) {
        page_at[p] = (order[p] + next_random(&state) % 2) * stride * 2;
      }
    } else if (kind == 1) {
      /* Each group in a place of its own, its pages 64 bytes apart. */
      uint64_t apart = pages * 128;
      for (int g = 0; g < 4; g++) {
        group_at[g] = 1024 + g * apart - (tight && g == 2 ? 8 : 0);
      }
      uint64_t stride = tight && next_random(&state) % 2 ? 56 : 64;
      for (uint64_t p = 0; p < pages; p++) {
        page_at[p] = order[p] * stride * 2 + next_random(&state) % 2 * stride;
      }
    } else if (kind == 2) {
      /* A layer's K and V in one 96-byte block, each layer's blocks apart
       * from the other's. */
      uint64_t apart = pages * 192 + 64;
      for (int g = 0; g < 4; g++) {
        group_at[g] =
            1024 + g / 2 * apart + g % 2 * 64 - (tight && g == 1 ? 8 : 0);
      }
      uint64_t stride = tight && next_random(&state) % 2 ? 88 : 96;
      for (uint64_t p = 0; p < pages; p++) {
        page_at[p] = order[p] * stride * 2 + next_random(&state) % 2 * stride;
      }
    } else {
      for (int g = 0; g < 4; g++) {
        group_at[g] = 8 * (next_random(&state) % 256);
      }
      for (uint64_t p = 0; p < pages; p++) {
        page_at[p] = 8 * (next_random(&state) % 256);
      }
    }
    for (int listing = 0; listing < 3; listing++) {
      aligned_blocks(pages, group_at, page_at, listing, &state);
      bool meet = any_blocks_meet();
      reshard_status status = validate();
      if (meet) {
        cr_assert_eq(status, RESHARD_INVALID_ARGUMENT,
                     "round %d listing %d: blocks meet, yet it passed", round,
                     listing);
        cr_assert(strstr(fx.err.message, "share memory") != NULL,
                  "round %d: %s", round, fx.err.message);
        refused[kind]++;
      } else {
        cr_assert_eq(status, RESHARD_OK, "round %d listing %d: %s", round,
                     listing, fx.err.message);
        cr_assert(fx.out.pages_aligned, "round %d listing %d", round, listing);
        passed[kind]++;
      }
    }
  }
  for (int kind = 0; kind < 4; kind++) {
    cr_assert_gt(passed[kind], 300, "kind %d passed %d", kind, passed[kind]);
    cr_assert_gt(refused[kind], 100, "kind %d refused %d", kind, refused[kind]);
  }
}

Test(binding, rejects_a_page_block_listed_twice_in_order) {
  /* L1 K's second block at page 0 again: in order, a page long and
   * shaped alike, but not starting past the end of the one before. */
  paged_alike();
  fx.binding.ranges[1].token_start = 0;
  ASSERT_INVALID("binding.ranges[0] and binding.ranges[1] both bind layer 1 "
                 "component KEY token 0 head 2");
}

/* One field of ranges[5], the second block of L2 K, broken: a range
 * shaped as the one before in every other field is checked on its own. */
struct alike_case {
  size_t field;
  uint64_t value;
  char expected[112];
};

#define ALIKE_FIELD(name) offsetof(reshard_binding_range, name)

ParameterizedTestParameters(binding, rejects_a_block_shaped_alike_but_one) {
  static struct alike_case cases[] = {
      {ALIKE_FIELD(token_start), 5,
       "binding.ranges[5]: tokens [5, +4) leave the request's span [0, 8)"},
      {ALIKE_FIELD(token_start), UINT64_MAX - 1,
       "binding.ranges[5]: tokens [18446744073709551614, +4) leave"},
      {ALIKE_FIELD(token_start), 2,
       "binding.ranges[4] and binding.ranges[5] both bind layer 2 component "
       "KEY token 2 head 2"},
      {ALIKE_FIELD(token_count), 5, "binding.ranges[5]: tokens [4, +5) leave"},
      {ALIKE_FIELD(offset_bytes), 4096 - 62,
       "binding.ranges[5]: its last byte lies outside region \"kv\" of 4096 "
       "bytes"},
      {ALIKE_FIELD(offset_bytes), UINT64_MAX - 15,
       "binding.ranges[5]: its last byte lies outside region \"kv\""},
      {ALIKE_FIELD(offset_bytes), 4001,
       "binding.ranges[5].offset_bytes: region address + offset is not a "
       "multiple of itemsize 2"},
      {ALIKE_FIELD(global_layer_id), 3,
       "binding.ranges[5].global_layer_id: layer 3 is not owned"},
      {ALIKE_FIELD(head_start), 3,
       "binding.ranges[5]: heads [3, +2) leave participant"},
      {ALIKE_FIELD(head_count), 3,
       "binding.ranges[5]: heads [2, +3) leave participant"},
      {ALIKE_FIELD(head_stride_bytes), 6,
       "binding.ranges[5]: head_stride_bytes 6 is below the head width 8"},
      {ALIKE_FIELD(head_stride_bytes), 9,
       "binding.ranges[5]: token_stride_bytes 16 is below the row span 17"},
      {ALIKE_FIELD(token_stride_bytes), 14,
       "binding.ranges[5]: token_stride_bytes 14 is below the row span 16"},
      {ALIKE_FIELD(token_stride_bytes), 17,
       "binding.ranges[5].token_stride_bytes: 17 is not a multiple of "
       "itemsize 2"},
  };
  return cr_make_param_array(struct alike_case, cases,
                             sizeof cases / sizeof cases[0]);
}

ParameterizedTest(struct alike_case *c, binding,
                  rejects_a_block_shaped_alike_but_one) {
  paged_alike();
  memcpy((char *)&fx.binding.ranges[5] + c->field, &c->value, sizeof c->value);
  ASSERT_INVALID(c->expected);
}

Test(binding, rejects_a_block_shaped_alike_but_for_its_component) {
  /* ranges[3] is L1 V's second block; as a KEY it is below K's width. */
  paged_alike();
  fx.binding.ranges[3].component = K;
  ASSERT_INVALID("binding.ranges[3]: head_stride_bytes 4 is below the head "
                 "width 8");
}

Test(binding, rejects_a_block_shaped_alike_but_for_its_region) {
  paged_alike();
  fx.binding.ranges[5].region_id = "elsewhere";
  ASSERT_INVALID("binding.ranges[5].region_id: \"elsewhere\" is not a region");
}

Test(binding, a_block_shaped_alike_may_end_on_the_regions_last_byte) {
  /* L2 V's second block (32 bytes) moved to the region's end. */
  paged_alike();
  fx.binding.ranges[7].offset_bytes = 4096 - 32;
  validate_ok();
  fx.binding.ranges[7].offset_bytes = 4096 - 30;
  ASSERT_INVALID("binding.ranges[7]: its last byte lies outside region");
}

/* One field of ranges[6], L2 K's second block listed page by page,
 * broken: shaped as its group's first in every other field, it is checked
 * on its own, and the proofs over the sorted ranges name it by its place
 * in the request. */
ParameterizedTestParameters(binding,
                            rejects_a_block_listed_page_by_page_but_one) {
  static struct alike_case cases[] = {
      {ALIKE_FIELD(token_start), 5,
       "binding.ranges[6]: tokens [5, +4) leave the request's span [0, 8)"},
      {ALIKE_FIELD(token_start), 0,
       "binding.ranges[2] and binding.ranges[6] both bind layer 2 component "
       "KEY token 0 head 2"},
      {ALIKE_FIELD(token_start), 2,
       "binding.ranges[2] and binding.ranges[6] both bind layer 2 component "
       "KEY token 2 head 2"},
      {ALIKE_FIELD(offset_bytes), 4096 - 62,
       "binding.ranges[6]: its last byte lies outside region \"kv\" of 4096 "
       "bytes"},
      {ALIKE_FIELD(offset_bytes), 64,
       "binding.ranges[4] and binding.ranges[6] share memory"},
      {ALIKE_FIELD(head_start), 3,
       "binding.ranges[6]: heads [3, +2) leave participant"},
      {ALIKE_FIELD(token_stride_bytes), 14,
       "binding.ranges[6]: token_stride_bytes 14 is below the row span 16"},
  };
  return cr_make_param_array(struct alike_case, cases,
                             sizeof cases / sizeof cases[0]);
}

ParameterizedTest(struct alike_case *c, binding,
                  rejects_a_block_listed_page_by_page_but_one) {
  paged_by_page(4);
  memcpy((char *)&fx.binding.ranges[6] + c->field, &c->value, sizeof c->value);
  ASSERT_INVALID(c->expected);
}

/* ---- tiling ----------------------------------------------------------- */

Test(binding, rejects_a_token_left_unbound) {
  fx.binding.ranges[0].token_count = 7;
  ASSERT_INVALID(
      "binding: layer 1 component KEY:", "token 7 head 2 is not bound",
      "bind 14 of the 16", "tokens [0, 8) x heads [2, 4)", "exactly once");
}

Test(binding, rejects_a_head_left_unbound) {
  fx.binding.ranges[3].head_count = 1;
  ASSERT_INVALID(
      "binding: layer 2 component VALUE:", "token 0 head 3 is not bound",
      "bind 8 of the 16", "exactly once");
}

Test(binding, rejects_an_owned_layer_component_without_ranges) {
  fx.binding.range_count = 3; /* drop L2 V */
  ASSERT_INVALID("binding: layer 2 component VALUE:",
                 "token 0 head 2 is not bound", "bind 0 of the 16");
}

Test(binding, names_the_first_unbound_value_inside_the_span) {
  /* L1 K: tokens [0, 4) both heads, then head 3 alone on [4, 8) and head 2
   * only from token 6 on: tokens 4 and 5 of head 2 are holes. */
  fx.binding.ranges[0].token_count = 4;
  add_range(1, K, 4, 4, 3, 1, "aux", 32, 8, 8);
  add_range(1, K, 6, 2, 2, 1, "aux", 0, 8, 8);
  ASSERT_INVALID("binding: layer 1 component KEY:",
                 "token 4 head 2 is not bound", "bind 14 of the 16");
}

Test(binding, rejects_a_cell_bound_twice) {
  add_range(1, K, 4, 1, 3, 1, "aux", 0, 8, 8);
  ASSERT_INVALID("binding.ranges[0] and binding.ranges[4] both bind layer 1 "
                 "component KEY token 4 head 3");
}

Test(binding, rejects_overlap_hidden_by_an_equal_area) {
  /* [0,4) and [3,7) x heads [2,4): 16 cells like the span, but token 3 is
   * bound twice and token 7 never. */
  fx.binding.ranges[0].token_count = 4;
  add_range(1, K, 3, 4, 2, 2, "aux", 0, 16, 8);
  ASSERT_INVALID("binding.ranges[0] and binding.ranges[4] both bind layer 1 "
                 "component KEY token 3 head 2");
}

Test(binding, rejects_the_same_head_bound_by_two_one_head_ranges) {
  fx.binding.ranges[0] = fx.binding.ranges[3];
  fx.binding.range_count = 3;
  add_range(1, K, 0, 8, 2, 1, "aux", 0, 8, 8);
  add_range(1, K, 0, 8, 2, 1, "aux", 64, 8, 8); /* head 2 again */
  ASSERT_INVALID("both bind layer 1 component KEY token 0 head 2");
}

/* ---- limits ----------------------------------------------------------- */

Test(binding, max_ranges_bounds_the_ranges) {
  fx.limits.max_ranges = 3;
  ASSERT_FAILS(validate(), fx.err, RESHARD_RESOURCE_EXHAUSTED,
               "binding.ranges: 4 ranges exceed the limit max_ranges 3");
  fx.limits.max_ranges = 4;
  validate_ok();
}

Test(binding, max_ranges_bounds_the_regions) {
  add_region("r3", 0x30000, 64);
  add_region("r4", 0x31000, 64);
  add_region("r5", 0x32000, 64);
  fx.limits.max_ranges = 4;
  ASSERT_FAILS(validate(), fx.err, RESHARD_RESOURCE_EXHAUSTED,
               "binding.regions: 5 regions exceed the limit max_ranges 4");
}

Test(binding, max_ranges_is_checked_before_the_ranges) {
  fx.binding.ranges[3].region_id = "nope";
  fx.limits.max_ranges = 1;
  ASSERT_FAILS(validate(), fx.err, RESHARD_RESOURCE_EXHAUSTED, "max_ranges 1");
}

Test(binding, max_validation_work_is_exact) {
  validate_ok();
  uint64_t work = fx.out.validation_work;
  fx.limits.max_validation_work = work;
  validate_ok();
  cr_assert_eq(fx.out.validation_work, work);
  fx.limits.max_validation_work = work - 1;
  ASSERT_FAILS(validate(), fx.err, RESHARD_RESOURCE_EXHAUSTED, "binding",
               "max_validation_work");
}

Test(binding, max_validation_work_is_checked_before_the_ranges) {
  /* ranges[3] is also invalid; the work bound fails first. */
  fx.binding.ranges[3].region_id = "nope";
  fx.limits.max_validation_work = 1;
  ASSERT_FAILS(validate(), fx.err, RESHARD_RESOURCE_EXHAUSTED, "binding",
               "the limit max_validation_work 1");
}

Test(binding, disjointness_work_is_bounded_before_it_is_done) {
  /* 2^30 tokens; L1 K and V interleaved per token, so proving them
   * disjoint means comparing 2^31 rows. The bound must refuse this
   * up front (no 48 GB of scratch, no long loop). */
  fx.pages = UINT64_C(1) << 28;
  uint64_t tokens = fx.pages * fx.descriptor.page_size;
  fx.binding.regions[0].nbytes = UINT64_C(1) << 40;
  fx.binding.regions[1].nbytes = UINT64_C(1) << 40;
  fx.binding.range_count = 0;
  add_range(1, K, 0, tokens, 2, 2, "kv", 0, 24, 8);
  add_range(1, V, 0, tokens, 2, 2, "kv", 16, 24, 4);
  add_range(2, K, 0, tokens, 2, 2, "aux", 0, 16, 8);
  add_range(2, V, 0, tokens, 2, 2, "aux", 16 * tokens, 8, 4);
  ASSERT_FAILS(validate(), fx.err, RESHARD_RESOURCE_EXHAUSTED, "binding",
               "max_validation_work 10000000");
}

Test(binding, huge_spans_without_interleaving_need_little_work) {
  /* The same 2^30 tokens laid out contiguously: no cluster to split. */
  fx.pages = UINT64_C(1) << 28;
  uint64_t tokens = fx.pages * fx.descriptor.page_size;
  fx.binding.regions[0].nbytes = UINT64_C(1) << 40;
  fx.binding.range_count = 0;
  uint64_t offset = 0;
  for (uint64_t layer = 1; layer <= 2; layer++) {
    add_range(layer, K, 0, tokens, 2, 2, "kv", offset, 16, 8);
    offset += 16 * tokens;
    add_range(layer, V, 0, tokens, 2, 2, "kv", offset, 8, 4);
    offset += 8 * tokens;
  }
  fx.limits.max_validation_work = 100;
  validate_ok();
  cr_assert_eq(fx.out.token_span, tokens);
}

Test(binding, token_span_overflow_is_rejected) {
  fx.pages = UINT64_MAX / 2; /* * page_size 4 wraps */
  ASSERT_INVALID("page_keys:", "overflow 64 bits");
}
