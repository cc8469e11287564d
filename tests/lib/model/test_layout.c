/* Store layout rules (SPEC §1.3, §1.4, §2.3): one failing input per rule,
 * the layout limits, the canonical shard order, Part and K-block sizes,
 * and the fragment strides and offsets of the three axis orders checked
 * against numbers computed by hand from the SPEC §1.3 table. */
#include <criterion/criterion.h>
#include <criterion/parameterized.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include "reshard/arena.h"
#include "reshard/layout.h"
#include "reshard/manifest.h"

#include "assert_error.h"

#define PATH "manifest.layout"

static reshard_arena arena;

static void setup(void) {
  reshard_arena_init(&arena, 0);
}

static void teardown(void) {
  reshard_arena_destroy(&arena);
}

TestSuite(layout, .init = setup, .fini = teardown);
TestSuite(manifest, .init = setup, .fini = teardown);

/* Arena copy of `count` ids. */
static uint64_t *ids(const uint64_t *values, size_t count) {
  uint64_t *copy = RESHARD_ARENA_NEW(&arena, uint64_t, count + 1);
  memcpy(copy, values, count * sizeof *copy);
  return copy;
}

static reshard_shard shard(const uint64_t *layers, size_t count,
                           uint64_t head_start, uint64_t head_count,
                           const char *suffix) {
  return (reshard_shard){
      .layer_ids = ids(layers, count),
      .layer_count = count,
      .head_start = head_start,
      .head_count = head_count,
      .key_suffix = suffix,
  };
}

/* Layers [0..3] (given unsorted), bf16 (itemsize 2), page 16, 4 heads,
 * K dim 8 (hb 16 bytes), V dim 4 (hb 8 bytes). Written by TP2 x PP2: four
 * shards of L = 2 layers and H = 2 heads, given out of canonical order.
 * Canonical: ([0,1] h0 "0_0"), ([0,1] h2 "1_0"), ([2,3] h0 "0_1"),
 * ([2,3] h2 "1_1"). Each Part: L*P*H*(16+8) = 2*16*2*24 = 1536 bytes,
 * K block 2*16*2*16 = 1024. */
static reshard_layout base_layout(reshard_format format) {
  static const uint64_t all[] = {3, 1, 0, 2};
  static const uint64_t low[] = {1, 0};
  static const uint64_t high[] = {2, 3};
  reshard_shard *shards = RESHARD_ARENA_NEW(&arena, reshard_shard, 4);
  shards[0] = shard(high, 2, 2, 2, "1_1");
  shards[1] = shard(low, 2, 2, 2, "1_0");
  shards[2] = shard(high, 2, 0, 2, "0_1");
  shards[3] = shard(low, 2, 0, 2, "0_0");
  return (reshard_layout){
      .descriptor =
          {
              .global_layer_ids = ids(all, 4),
              .layer_count = 4,
              .dtype = "bf16",
              .itemsize = 2,
              .page_size = 16,
              .total_kv_heads = 4,
              .key_head_dim = 8,
              .value_head_dim = 4,
          },
      .format = format,
      .shards = shards,
      .shard_count = 4,
  };
}

static reshard_status normalize_with(reshard_layout *layout,
                                     const reshard_limits *limits,
                                     reshard_error *err) {
  return reshard_layout_normalize(layout, limits, PATH, &arena, err);
}

static reshard_status normalize(reshard_layout *layout, reshard_error *err) {
  reshard_limits limits = reshard_limits_default();
  return normalize_with(layout, &limits, err);
}

static void normalize_ok(reshard_layout *layout) {
  reshard_error err = {0};
  cr_assert_eq(normalize(layout, &err), RESHARD_OK, "%s", err.message);
}

/* ---- canonical form and sizes ----------------------------------------- */

Test(layout, format_names) {
  cr_assert_str_eq(reshard_format_name(RESHARD_FORMAT_PLHD), "PLHD");
  cr_assert_str_eq(reshard_format_name(RESHARD_FORMAT_LPHD), "LPHD");
  cr_assert_str_eq(reshard_format_name(RESHARD_FORMAT_HPLD), "HPLD");
  cr_assert_null(reshard_format_name((reshard_format)0));
  cr_assert_null(reshard_format_name((reshard_format)4));
}

Test(layout, normalize_puts_shards_in_canonical_order) {
  reshard_layout layout = base_layout(RESHARD_FORMAT_LPHD);
  normalize_ok(&layout);
  const char *suffixes[] = {"0_0", "1_0", "0_1", "1_1"};
  const uint64_t first_layer[] = {0, 0, 2, 2};
  const uint64_t head_start[] = {0, 2, 0, 2};
  for (size_t i = 0; i < 4; i++) {
    const reshard_shard *s = &layout.shards[i];
    cr_assert_str_eq(s->key_suffix, suffixes[i]);
    cr_assert_eq(s->layer_ids[0], first_layer[i]);
    cr_assert_eq(s->layer_ids[1], first_layer[i] + 1);
    cr_assert_eq(s->head_start, head_start[i]);
    cr_assert_eq(layout.descriptor.global_layer_ids[i], i);
  }
}

Test(layout, canonical_order_compares_layer_lists_lexicographically) {
  /* Layers [0,1,2], 4 heads: A [0] h0+2, B [0,1] h2+2, C [1,2] h0+2,
   * D [2] h2+2. Lexicographic: [0] < [0,1] < [1,2] < [2] (a prefix sorts
   * first), whatever the input order and each shard's own layer order. */
  static const uint64_t l0[] = {0}, l01[] = {1, 0}, l12[] = {2, 1}, l2[] = {2};
  static const uint64_t all[] = {0, 1, 2};
  reshard_layout layout = base_layout(RESHARD_FORMAT_PLHD);
  layout.descriptor.global_layer_ids = ids(all, 3);
  layout.descriptor.layer_count = 3;
  layout.shards[0] = shard(l2, 1, 2, 2, "D");
  layout.shards[1] = shard(l12, 2, 0, 2, "C");
  layout.shards[2] = shard(l01, 2, 2, 2, "B");
  layout.shards[3] = shard(l0, 1, 0, 2, "A");
  normalize_ok(&layout);
  const char *order[] = {"A", "B", "C", "D"};
  for (size_t i = 0; i < 4; i++) {
    cr_assert_str_eq(layout.shards[i].key_suffix, order[i]);
  }
  cr_assert_eq(layout.shards[1].layer_ids[0], 0);
  cr_assert_eq(layout.shards[1].layer_ids[1], 1);
  cr_assert_eq(layout.shards[2].layer_ids[0], 1);
  cr_assert_eq(layout.shards[2].layer_ids[1], 2);
}

Test(layout, part_and_key_block_sizes) {
  reshard_layout layout = base_layout(RESHARD_FORMAT_HPLD);
  normalize_ok(&layout);
  for (size_t i = 0; i < 4; i++) {
    cr_assert_eq(reshard_layout_part_bytes(&layout, i), 1536);
    cr_assert_eq(reshard_layout_key_block_bytes(&layout, i), 1024);
  }
}

Test(layout, uneven_shards_have_their_own_sizes) {
  /* One shard of 3 layers x 1 head, one of 3 layers x 3 heads, one of
   * layer 3 x 4 heads: L*P*H*24 = 1152, 3456, 1536. */
  static const uint64_t l012[] = {0, 1, 2}, l3[] = {3};
  reshard_layout layout = base_layout(RESHARD_FORMAT_PLHD);
  layout.shards[0] = shard(l012, 3, 0, 1, "a");
  layout.shards[1] = shard(l012, 3, 1, 3, "b");
  layout.shards[2] = shard(l3, 1, 0, 4, "c");
  layout.shard_count = 3;
  normalize_ok(&layout);
  cr_assert_eq(reshard_layout_part_bytes(&layout, 0), 3 * 16 * 1 * 24);
  cr_assert_eq(reshard_layout_key_block_bytes(&layout, 0), 3 * 16 * 1 * 16);
  cr_assert_eq(reshard_layout_part_bytes(&layout, 1), 3 * 16 * 3 * 24);
  cr_assert_eq(reshard_layout_key_block_bytes(&layout, 1), 3 * 16 * 3 * 16);
  cr_assert_eq(reshard_layout_part_bytes(&layout, 2), 1 * 16 * 4 * 24);
  cr_assert_eq(reshard_layout_key_block_bytes(&layout, 2), 1 * 16 * 4 * 16);
}

/* Single-tensor cache (MLA latent): 1 head of 576, V absent. Part =
 * K block = L*P*H*hb(K) = 2*16*1*1152 = 36864; no V block. */
static reshard_layout single_tensor_layout(reshard_format format) {
  static const uint64_t low[] = {0, 1}, high[] = {2, 3};
  reshard_layout layout = base_layout(format);
  layout.descriptor.total_kv_heads = 1;
  layout.descriptor.key_head_dim = 576;
  layout.descriptor.value_head_dim = 0;
  layout.shards[0] = shard(low, 2, 0, 1, "0_0");
  layout.shards[1] = shard(high, 2, 0, 1, "0_1");
  layout.shard_count = 2;
  return layout;
}

Test(layout, single_tensor_parts_have_no_value_block) {
  reshard_layout layout = single_tensor_layout(RESHARD_FORMAT_PLHD);
  normalize_ok(&layout);
  for (size_t i = 0; i < 2; i++) {
    cr_assert_eq(reshard_layout_part_bytes(&layout, i), 36864);
    cr_assert_eq(reshard_layout_key_block_bytes(&layout, i), 36864);
  }
  reshard_fragment f;
  reshard_layout_fragment(&layout, 1, 1, RESHARD_COMPONENT_KEY, &f);
  cr_assert_eq(f.layer, 3);
  cr_assert_eq(f.part_offset, 1152);  /* layer stride H*hb */
  cr_assert_eq(f.token_stride, 2304); /* L*H*hb */
  cr_assert_eq(f.head_stride, 1152);  /* hb */
}

/* ---- fragments against the SPEC §1.3 table ----------------------------- */

/* Fragment (shard 3 = layers [2,3] heads [2,4), local layer 1 = global 3)
 * of the base layout. `byte` is element 1 of token 5, head 2; `last` is
 * the last element of token 15, head 3, which ends every block. */
struct fragment_case {
  reshard_format format;
  reshard_component component;
  uint64_t part_offset;
  uint64_t token_stride;
  uint64_t head_stride;
  uint64_t byte;
  uint64_t last;
};

ParameterizedTestParameters(layout, fragment_matches_the_spec_table) {
  static struct fragment_case cases[] = {
      /* PLHD K: layer stride H*hb = 32, token L*H*hb = 64, head hb = 16.
       * byte = 32 + 5*64 + 0*16 + 1*2 = 354; last = 32+15*64+16+7*2. */
      {RESHARD_FORMAT_PLHD, RESHARD_COMPONENT_KEY, 32, 64, 16, 354, 1022},
      /* PLHD V: hb 8; offset 1*16 + K block 1024 = 1040, token 32,
       * head 8; byte = 1040 + 160 + 2 = 1202; last = 1040+480+8+6. */
      {RESHARD_FORMAT_PLHD, RESHARD_COMPONENT_VALUE, 1040, 32, 8, 1202, 1534},
      /* LPHD K: layer stride P*H*hb = 512, token H*hb = 32, head 16;
       * byte = 512 + 160 + 2 = 674. */
      {RESHARD_FORMAT_LPHD, RESHARD_COMPONENT_KEY, 512, 32, 16, 674, 1022},
      /* LPHD V: layer stride 256 + 1024 = 1280, token 16, head 8;
       * byte = 1280 + 80 + 2 = 1362. */
      {RESHARD_FORMAT_LPHD, RESHARD_COMPONENT_VALUE, 1280, 16, 8, 1362, 1534},
      /* HPLD K: layer stride hb = 16, token L*hb = 32, head P*L*hb = 512;
       * byte = 16 + 160 + 2 = 178; last = 16+480+512+14. */
      {RESHARD_FORMAT_HPLD, RESHARD_COMPONENT_KEY, 16, 32, 512, 178, 1022},
      /* HPLD V: 8 + 1024 = 1032, token 16, head 256; byte = 1032+80+2. */
      {RESHARD_FORMAT_HPLD, RESHARD_COMPONENT_VALUE, 1032, 16, 256, 1114, 1534},
  };
  return cr_make_param_array(struct fragment_case, cases,
                             sizeof cases / sizeof cases[0]);
}

ParameterizedTest(struct fragment_case *c, layout,
                  fragment_matches_the_spec_table) {
  reshard_layout layout = base_layout(c->format);
  normalize_ok(&layout);
  reshard_fragment f;
  reshard_layout_fragment(&layout, 3, 1, c->component, &f);
  cr_assert_eq(f.layer, 3);
  cr_assert_eq(f.component, c->component);
  cr_assert_eq(f.part_index, 3);
  cr_assert_eq(f.head_start, 2);
  cr_assert_eq(f.head_count, 2);
  cr_assert_eq(f.part_offset, c->part_offset);
  cr_assert_eq(f.token_stride, c->token_stride);
  cr_assert_eq(f.head_stride, c->head_stride);
  cr_assert_eq(reshard_fragment_byte(&f, 2, 5, 2, 1), c->byte);
  uint64_t last_element =
      c->component == RESHARD_COMPONENT_KEY ? 7 : 3; /* dims 8 and 4 */
  cr_assert_eq(reshard_fragment_byte(&f, 2, 15, 3, last_element), c->last);

  /* Local layer 0 of shard 0 starts its component block. */
  reshard_layout_fragment(&layout, 0, 0, c->component, &f);
  cr_assert_eq(f.layer, 0);
  cr_assert_eq(f.head_start, 0);
  cr_assert_eq(f.part_offset, c->component == RESHARD_COMPONENT_KEY ? 0 : 1024);
}

/* Every element of every Part lands on its own itemsize-aligned slot and
 * the slots fill [0, part size) exactly: the axis order is a bijection. */
struct bijection_case {
  reshard_format format;
  int single_tensor;
};

ParameterizedTestParameters(layout, fragments_tile_each_part_exactly) {
  static struct bijection_case cases[] = {
      {RESHARD_FORMAT_PLHD, 0}, {RESHARD_FORMAT_LPHD, 0},
      {RESHARD_FORMAT_HPLD, 0}, {RESHARD_FORMAT_PLHD, 1},
      {RESHARD_FORMAT_LPHD, 1}, {RESHARD_FORMAT_HPLD, 1},
  };
  return cr_make_param_array(struct bijection_case, cases,
                             sizeof cases / sizeof cases[0]);
}

ParameterizedTest(struct bijection_case *c, layout,
                  fragments_tile_each_part_exactly) {
  reshard_layout layout = c->single_tensor ? single_tensor_layout(c->format)
                                           : base_layout(c->format);
  normalize_ok(&layout);
  const reshard_descriptor *d = &layout.descriptor;
  unsigned components = reshard_component_count(d);
  for (size_t p = 0; p < layout.shard_count; p++) {
    const reshard_shard *s = &layout.shards[p];
    uint64_t part_bytes = reshard_layout_part_bytes(&layout, p);
    size_t slots = part_bytes / d->itemsize;
    unsigned char *seen = RESHARD_ARENA_NEW(&arena, unsigned char, slots);
    size_t filled = 0;
    for (size_t l = 0; l < s->layer_count; l++) {
      for (unsigned comp = 1; comp <= components; comp++) {
        reshard_fragment f;
        reshard_layout_fragment(&layout, p, l, (reshard_component)comp, &f);
        uint64_t dim = comp == 1 ? d->key_head_dim : d->value_head_dim;
        for (uint64_t t = 0; t < d->page_size; t++) {
          for (uint64_t h = s->head_start; h < s->head_start + s->head_count;
               h++) {
            for (uint64_t e = 0; e < dim; e++) {
              uint64_t at = reshard_fragment_byte(&f, d->itemsize, t, h, e);
              cr_assert_lt(at, part_bytes, "part %zu layer %zu comp %u", p, l,
                           comp);
              cr_assert_eq(at % d->itemsize, 0);
              cr_assert_not(seen[at / d->itemsize], "byte %llu twice",
                            (unsigned long long)at);
              seen[at / d->itemsize] = 1;
              filled++;
            }
          }
        }
      }
    }
    cr_assert_eq(filled, slots);
  }
}

/* ---- one failing input per rule --------------------------------------- */

ParameterizedTestParameters(layout, rejects_invalid_format) {
  static int formats[] = {0, 4, 99};
  return cr_make_param_array(int, formats, sizeof formats / sizeof formats[0]);
}

ParameterizedTest(int *format, layout, rejects_invalid_format) {
  reshard_layout layout = base_layout((reshard_format)*format);
  reshard_error err = {0};
  ASSERT_FAILS(normalize(&layout, &err), err, RESHARD_INVALID_ARGUMENT,
               PATH ".format:", "must be PLHD, LPHD or HPLD");
}

Test(layout, rejects_an_invalid_descriptor_with_its_path) {
  reshard_layout layout = base_layout(RESHARD_FORMAT_PLHD);
  layout.descriptor.key_head_dim = 0;
  reshard_error err = {0};
  ASSERT_FAILS(normalize(&layout, &err), err, RESHARD_INVALID_ARGUMENT,
               PATH ".descriptor.key_head_dim:", "must be at least 1");
}

Test(layout, rejects_empty_shards) {
  reshard_layout layout = base_layout(RESHARD_FORMAT_PLHD);
  layout.shard_count = 0;
  reshard_error err = {0};
  ASSERT_FAILS(normalize(&layout, &err), err, RESHARD_INVALID_ARGUMENT,
               PATH ".shards:", "must not be empty");
}

Test(layout, rejects_shard_without_layers) {
  reshard_layout layout = base_layout(RESHARD_FORMAT_PLHD);
  layout.shards[2].layer_count = 0;
  reshard_error err = {0};
  ASSERT_FAILS(normalize(&layout, &err), err, RESHARD_INVALID_ARGUMENT,
               PATH ".shards[2].layer_ids:", "must not be empty");
}

Test(layout, rejects_duplicate_layer_in_shard) {
  reshard_layout layout = base_layout(RESHARD_FORMAT_PLHD);
  layout.shards[1].layer_ids[0] = 0; /* [0, 0] */
  reshard_error err = {0};
  ASSERT_FAILS(
      normalize(&layout, &err), err, RESHARD_INVALID_ARGUMENT,
      PATH ".shards[1].layer_ids:", "layer id 0 appears more than once");
}

Test(layout, rejects_shard_layer_not_in_descriptor) {
  reshard_layout layout = base_layout(RESHARD_FORMAT_PLHD);
  layout.shards[1].layer_ids[1] = 7;
  reshard_error err = {0};
  ASSERT_FAILS(
      normalize(&layout, &err), err, RESHARD_INVALID_ARGUMENT,
      PATH ".shards[1].layer_ids:", "layer 7 is not in the descriptor");
}

Test(layout, rejects_zero_head_count) {
  reshard_layout layout = base_layout(RESHARD_FORMAT_PLHD);
  layout.shards[0].head_count = 0;
  reshard_error err = {0};
  ASSERT_FAILS(normalize(&layout, &err), err, RESHARD_INVALID_ARGUMENT,
               PATH ".shards[0].head_count:", "must be at least 1");
}

struct head_case {
  uint64_t head_start;
  uint64_t head_count;
  char expected[96];
};

ParameterizedTestParameters(layout, rejects_heads_past_total) {
  static struct head_case cases[] = {
      {3, 2, PATH ".shards[3]: heads [3, +2) exceed total_kv_heads 4"},
      {UINT64_MAX - 1, 4,
       PATH ".shards[3]: heads [18446744073709551614, +4) exceed"},
      {1, UINT64_MAX, PATH ".shards[3]: heads [1, +18446744073709551615)"},
  };
  return cr_make_param_array(struct head_case, cases,
                             sizeof cases / sizeof cases[0]);
}

ParameterizedTest(struct head_case *c, layout, rejects_heads_past_total) {
  reshard_layout layout = base_layout(RESHARD_FORMAT_PLHD);
  layout.shards[3].head_start = c->head_start;
  layout.shards[3].head_count = c->head_count;
  reshard_error err = {0};
  ASSERT_FAILS(normalize(&layout, &err), err, RESHARD_INVALID_ARGUMENT,
               c->expected, "total_kv_heads 4");
}

Test(layout, rejects_empty_key_suffix) {
  reshard_layout layout = base_layout(RESHARD_FORMAT_PLHD);
  layout.shards[2].key_suffix = "";
  reshard_error err = {0};
  ASSERT_FAILS(normalize(&layout, &err), err, RESHARD_INVALID_ARGUMENT,
               PATH ".shards[2].key_suffix:", "must not be empty");
}

Test(layout, rejects_missing_key_suffix) {
  reshard_layout layout = base_layout(RESHARD_FORMAT_PLHD);
  layout.shards[0].key_suffix = NULL;
  reshard_error err = {0};
  ASSERT_FAILS(normalize(&layout, &err), err, RESHARD_INVALID_ARGUMENT,
               PATH ".shards[0].key_suffix:", "must not be empty");
}

Test(layout, rejects_duplicate_key_suffix) {
  reshard_layout layout = base_layout(RESHARD_FORMAT_PLHD);
  layout.shards[0].key_suffix = "0_0";
  reshard_error err = {0};
  ASSERT_FAILS(normalize(&layout, &err), err, RESHARD_INVALID_ARGUMENT,
               PATH ".shards", "key_suffix \"0_0\" appears more than once");
}

Test(layout, rejects_coverage_gap_in_heads) {
  reshard_layout layout = base_layout(RESHARD_FORMAT_PLHD);
  layout.shards[1].head_count = 1; /* [0,1] keeps heads [2, 3) only */
  reshard_error err = {0};
  ASSERT_FAILS(normalize(&layout, &err), err, RESHARD_INVALID_ARGUMENT,
               PATH ".shards:", "layer 0 head 3 is stored in no shard");
}

Test(layout, rejects_coverage_gap_at_head_zero) {
  reshard_layout layout = base_layout(RESHARD_FORMAT_PLHD);
  layout.shards[2].head_start = 1; /* [2,3] heads [1, 3) and [2, 4) */
  reshard_error err = {0};
  ASSERT_FAILS(normalize(&layout, &err), err, RESHARD_INVALID_ARGUMENT,
               PATH ".shards:", "layer 2 head 0 is stored in no shard");
}

Test(layout, rejects_layer_stored_nowhere) {
  reshard_layout layout = base_layout(RESHARD_FORMAT_PLHD);
  layout.shards[0].layer_count = 1; /* [2,3] -> [2] */
  layout.shards[2].layer_count = 1;
  reshard_error err = {0};
  ASSERT_FAILS(normalize(&layout, &err), err, RESHARD_INVALID_ARGUMENT,
               PATH ".shards:", "layer 3 head 0 is stored in no shard");
}

Test(layout, rejects_coverage_overlap_in_heads) {
  reshard_layout layout = base_layout(RESHARD_FORMAT_PLHD);
  layout.shards[1].head_start = 1; /* [0,1] heads [1, 4) and [0, 2) */
  layout.shards[1].head_count = 3;
  reshard_error err = {0};
  ASSERT_FAILS(normalize(&layout, &err), err, RESHARD_INVALID_ARGUMENT,
               PATH ".shards:", "layer 0 head 1 is stored in more than one",
               "\"1_0\"");
}

Test(layout, rejects_identical_shards_with_other_suffixes) {
  reshard_layout layout = base_layout(RESHARD_FORMAT_PLHD);
  layout.shards[0].head_start = 0; /* "1_1" duplicates "0_1" */
  reshard_error err = {0};
  ASSERT_FAILS(normalize(&layout, &err), err, RESHARD_INVALID_ARGUMENT,
               PATH ".shards:", "layer 2 head 0 is stored in more than one");
}

Test(layout, rejects_a_layer_in_two_shard_layer_lists) {
  reshard_layout layout = base_layout(RESHARD_FORMAT_PLHD);
  layout.shards[2].layer_ids[0] = 1; /* "0_1" holds [1, 3] */
  reshard_error err = {0};
  ASSERT_FAILS(normalize(&layout, &err), err, RESHARD_INVALID_ARGUMENT,
               PATH ".shards:", "layer 1 head 0 is stored in more than one");
}

/* ---- limits ----------------------------------------------------------- */

struct limit_case {
  size_t offset;   /* field of reshard_limits */
  uint64_t fails;  /* the limit value that must fail */
  uint64_t passes; /* the smallest value that passes */
  int single_tensor;
  char expected[96];
};

ParameterizedTestParameters(layout, limits) {
  static struct limit_case cases[] = {
      {offsetof(reshard_limits, max_layout_parts), 3, 4, 0,
       PATH ".shards: 4 parts exceed the limit max_layout_parts 3"},
      /* 4 shards x 2 layers x {K, V} */
      {offsetof(reshard_limits, max_layout_fragments), 15, 16, 0,
       PATH ".shards: 16 fragments exceed the limit max_layout_fragments 15"},
      /* single tensor: 2 shards x 2 layers x {K} */
      {offsetof(reshard_limits, max_layout_fragments), 3, 4, 1,
       "4 fragments exceed the limit max_layout_fragments 3"},
      /* 4 Parts of 1536 bytes */
      {offsetof(reshard_limits, max_layout_bytes), 6143, 6144, 0,
       "the limit max_layout_bytes 6143"},
      /* 2 Parts of 36864 bytes */
      {offsetof(reshard_limits, max_layout_bytes), 73727, 73728, 1,
       "the limit max_layout_bytes 73727"},
  };
  return cr_make_param_array(struct limit_case, cases,
                             sizeof cases / sizeof cases[0]);
}

ParameterizedTest(struct limit_case *c, layout, limits) {
  reshard_limits limits = reshard_limits_default();
  uint64_t *field = (uint64_t *)((char *)&limits + c->offset);

  reshard_layout layout = c->single_tensor
                              ? single_tensor_layout(RESHARD_FORMAT_LPHD)
                              : base_layout(RESHARD_FORMAT_LPHD);
  *field = c->fails;
  reshard_error err = {0};
  ASSERT_FAILS(normalize_with(&layout, &limits, &err), err,
               RESHARD_RESOURCE_EXHAUSTED, c->expected);

  layout = c->single_tensor ? single_tensor_layout(RESHARD_FORMAT_LPHD)
                            : base_layout(RESHARD_FORMAT_LPHD);
  *field = c->passes;
  cr_assert_eq(normalize_with(&layout, &limits, &err), RESHARD_OK, "%s",
               err.message);
}

Test(layout, count_limits_are_checked_before_the_shards) {
  /* The shards are also invalid; the limit is reported first because it
   * is checked before any per-shard work. */
  reshard_limits limits = reshard_limits_default();
  limits.max_layout_parts = 1;
  reshard_layout layout = base_layout(RESHARD_FORMAT_PLHD);
  layout.shards[3].key_suffix = "";
  reshard_error err = {0};
  ASSERT_FAILS(normalize_with(&layout, &limits, &err), err,
               RESHARD_RESOURCE_EXHAUSTED, "max_layout_parts 1");

  limits = reshard_limits_default();
  limits.max_layout_fragments = 1;
  layout = base_layout(RESHARD_FORMAT_PLHD);
  layout.shards[3].key_suffix = "";
  ASSERT_FAILS(normalize_with(&layout, &limits, &err), err,
               RESHARD_RESOURCE_EXHAUSTED, "max_layout_fragments 1");
}

Test(layout, part_bytes_overflow_is_rejected) {
  /* L*P*H*row = 2 * 2^62 * 2 * 24 overflows 64 bits. */
  reshard_layout layout = base_layout(RESHARD_FORMAT_PLHD);
  layout.descriptor.page_size = UINT64_C(1) << 62;
  reshard_limits limits = reshard_limits_default();
  limits.max_layout_bytes = UINT64_MAX;
  reshard_error err = {0};
  ASSERT_FAILS(normalize_with(&layout, &limits, &err), err,
               RESHARD_RESOURCE_EXHAUSTED, PATH ".shards[0]",
               "max_layout_bytes");
}

Test(layout, total_bytes_overflow_across_parts_is_rejected) {
  /* Each Part is 2^63 bytes; the sum of two wraps to 0. */
  static const uint64_t l0[] = {0};
  reshard_layout layout = base_layout(RESHARD_FORMAT_PLHD);
  layout.descriptor.global_layer_ids = ids(l0, 1);
  layout.descriptor.layer_count = 1;
  layout.descriptor.total_kv_heads = 2;
  layout.descriptor.itemsize = 1;
  layout.descriptor.key_head_dim = UINT64_C(1) << 62;
  layout.descriptor.value_head_dim = UINT64_C(1) << 62;
  layout.descriptor.page_size = 1;
  layout.shards[0] = shard(l0, 1, 0, 1, "a");
  layout.shards[1] = shard(l0, 1, 1, 1, "b");
  layout.shard_count = 2;
  reshard_limits limits = reshard_limits_default();
  limits.max_layout_bytes = UINT64_MAX;
  reshard_error err = {0};
  ASSERT_FAILS(normalize_with(&layout, &limits, &err), err,
               RESHARD_RESOURCE_EXHAUSTED, PATH ".shards[1]",
               "max_layout_bytes");
}

Test(layout, default_limits_accept_a_large_real_layout) {
  /* SPEC §6 S2 writer: 80 layers, 8 heads, 128/128 bf16, page 64, TP8:
   * 8 Parts of 80*64*1*512 = 2.5 MiB. */
  reshard_layout layout = base_layout(RESHARD_FORMAT_LPHD);
  uint64_t *all = RESHARD_ARENA_NEW(&arena, uint64_t, 80);
  for (uint64_t l = 0; l < 80; l++) {
    all[l] = l;
  }
  layout.descriptor.global_layer_ids = all;
  layout.descriptor.layer_count = 80;
  layout.descriptor.total_kv_heads = 8;
  layout.descriptor.key_head_dim = 128;
  layout.descriptor.value_head_dim = 128;
  layout.descriptor.page_size = 64;
  reshard_shard *shards = RESHARD_ARENA_NEW(&arena, reshard_shard, 8);
  static const char *suffixes[] = {"0", "1", "2", "3", "4", "5", "6", "7"};
  for (size_t i = 0; i < 8; i++) {
    shards[i] = shard(all, 80, i, 1, suffixes[i]);
  }
  layout.shards = shards;
  layout.shard_count = 8;
  normalize_ok(&layout);
  cr_assert_eq(reshard_layout_part_bytes(&layout, 7), 80 * 64 * 1 * 512);
  cr_assert_eq(reshard_layout_key_block_bytes(&layout, 7), 80 * 64 * 256);
}

/* ---- manifests -------------------------------------------------------- */

static reshard_manifest base_manifest(void) {
  return (reshard_manifest){
      .name_space = "ns",
      .model_id = "model",
      .model_revision = "rev",
      .semantic_fingerprint = "fp",
      .layout = base_layout(RESHARD_FORMAT_PLHD),
  };
}

Test(manifest, valid_manifest_normalizes_its_layout) {
  reshard_manifest m = base_manifest();
  reshard_limits limits = reshard_limits_default();
  reshard_error err = {0};
  cr_assert_eq(reshard_manifest_normalize(&m, &limits, &arena, &err),
               RESHARD_OK, "%s", err.message);
  cr_assert_str_eq(m.layout.shards[0].key_suffix, "0_0");
}

struct text_case {
  char field[32];
  size_t offset;
  int null;
};

ParameterizedTestParameters(manifest, rejects_empty_text) {
  static struct text_case cases[] = {
      {"namespace", offsetof(reshard_manifest, name_space), 0},
      {"namespace", offsetof(reshard_manifest, name_space), 1},
      {"model_id", offsetof(reshard_manifest, model_id), 0},
      {"model_id", offsetof(reshard_manifest, model_id), 1},
      {"model_revision", offsetof(reshard_manifest, model_revision), 0},
      {"model_revision", offsetof(reshard_manifest, model_revision), 1},
      {"semantic_fingerprint", offsetof(reshard_manifest, semantic_fingerprint),
       0},
      {"semantic_fingerprint", offsetof(reshard_manifest, semantic_fingerprint),
       1},
  };
  return cr_make_param_array(struct text_case, cases,
                             sizeof cases / sizeof cases[0]);
}

ParameterizedTest(struct text_case *c, manifest, rejects_empty_text) {
  reshard_manifest m = base_manifest();
  *(const char **)((char *)&m + c->offset) = c->null ? NULL : "";
  reshard_limits limits = reshard_limits_default();
  reshard_error err = {0};
  char path[64];
  snprintf(path, sizeof path, "manifest.%s:", c->field);
  ASSERT_FAILS(reshard_manifest_normalize(&m, &limits, &arena, &err), err,
               RESHARD_INVALID_ARGUMENT, path, "must not be empty");
}

Test(manifest, layout_errors_carry_the_manifest_path) {
  reshard_manifest m = base_manifest();
  m.layout.shards[1].head_count = 0;
  reshard_limits limits = reshard_limits_default();
  reshard_error err = {0};
  ASSERT_FAILS(reshard_manifest_normalize(&m, &limits, &arena, &err), err,
               RESHARD_INVALID_ARGUMENT,
               "manifest.layout.shards[1].head_count:", "must be at least 1");
}
