/* Request-level rules of reshard_plan_load (SPEC §2.2, §2.3): page list,
 * participant and DP rank checks, source selection (descriptor mismatch,
 * hit prefix, preference, fewest operations, ties), plan limits,
 * cancellation, reshard_limits_clamp, stats, and the ownership of built
 * joins. The byte-exact oracle lives in test_oracle.c; here the copies of
 * a few tiny plans are checked against offsets computed by hand.
 *
 * Target descriptor: layer [0], bf16 (itemsize 2), page 2, 2 heads, K and
 * V dim 2 (hb 4 bytes). The target placement is TP2: "r0" owns head 0,
 * "r1" head 1. Sources:
 *   A  LPHD, one shard ([0], heads [0, 2), "0"): Part 0 is 32 bytes,
 *      K block 16; K(t, h) at 8t + 4h, V(t, h) at 16 + 8t + 4h.
 *   B  PLHD, shards ([0], head 0, "0") and ([0], head 1, "1"): each Part
 *      16 bytes, K(t) at 4t, V(t) at 8 + 4t.
 * The reader's binding (participant P with heads [h0, h0 + n)) puts K of
 * tokens [0, 2 * pages) contiguously (NHD) at offset 0 of region "m" and V
 * right after it. */
#include <criterion/criterion.h>
#include <criterion/parameterized.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include "reshard/arena.h"
#include "reshard/plan.h"

#include "assert_error.h"

enum { MAX_SOURCES = 8, MAX_PAGES = 16 };

static reshard_arena arena;

static struct {
  reshard_placement placement;
  /* the reader */
  const char *participant;
  uint64_t head_start, head_count;
  reshard_region region;
  reshard_binding_range ranges[2];
  reshard_binding binding;
  /* sources and pages */
  reshard_plan_source sources[MAX_SOURCES];
  size_t source_count;
  size_t page_source_start[MAX_PAGES + 1];
  size_t page_sources[MAX_PAGES * MAX_SOURCES];
  uint64_t pages;
  reshard_load_request request;
  reshard_load_plan plan;
  reshard_error err;
} fx;

static uint64_t target_layers[] = {0};

static reshard_descriptor target_descriptor(void) {
  return (reshard_descriptor){
      .global_layer_ids = target_layers,
      .layer_count = 1,
      .dtype = "bf16",
      .itemsize = 2,
      .page_size = 2,
      .total_kv_heads = 2,
      .key_head_dim = 2,
      .value_head_dim = 2,
  };
}

/* One participant of the target placement; layers = all of layer [0]. */
typedef struct part_spec {
  const char *id;
  uint64_t dp, tp;
  uint64_t head_start, head_count;
  uint64_t ordinal, replicas;
} part_spec;

static void set_placement(uint64_t dp_size, uint64_t tp_size,
                          const part_spec *specs, size_t n) {
  reshard_placement_part *parts =
      RESHARD_ARENA_NEW(&arena, reshard_placement_part, n);
  for (size_t i = 0; i < n; i++) {
    uint64_t *layers = RESHARD_ARENA_NEW(&arena, uint64_t, 1);
    layers[0] = 0;
    parts[i] = (reshard_placement_part){
        .participant_id = specs[i].id,
        .rank = {specs[i].dp, 0, specs[i].tp},
        .layer_ids = layers,
        .layer_count = 1,
        .head_start = specs[i].head_start,
        .head_count = specs[i].head_count,
        .replica_ordinal = specs[i].ordinal,
        .replica_count = specs[i].replicas,
    };
  }
  fx.placement = (reshard_placement){
      .resource_id = "res",
      .revision = "rev",
      .dp_size = dp_size,
      .pp_size = 1,
      .tp_size = tp_size,
      .descriptor = target_descriptor(),
      .parts = parts,
      .part_count = n,
  };
  reshard_error err = {0};
  cr_assert_eq(reshard_placement_normalize(&fx.placement, &arena, &err),
               RESHARD_OK, "%s", err.message);
}

static void set_reader(const char *participant, uint64_t head_start,
                       uint64_t head_count) {
  fx.participant = participant;
  fx.head_start = head_start;
  fx.head_count = head_count;
}

/* A normalized layout of `descriptor` whose shards are the head
 * intervals [starts[i], starts[i + 1]) over all layers. */
static const reshard_layout *make_layout(reshard_descriptor descriptor,
                                         reshard_format format,
                                         const uint64_t *starts,
                                         size_t shard_count) {
  static const char *suffixes[] = {"0", "1", "2", "3"};
  reshard_layout *layout = RESHARD_ARENA_NEW(&arena, reshard_layout, 1);
  reshard_shard *shards = RESHARD_ARENA_NEW(&arena, reshard_shard, shard_count);
  for (size_t i = 0; i < shard_count; i++) {
    shards[i] = (reshard_shard){
        .layer_ids = descriptor.global_layer_ids,
        .layer_count = descriptor.layer_count,
        .head_start = starts[i],
        .head_count = starts[i + 1] - starts[i],
        .key_suffix = suffixes[i],
    };
  }
  *layout = (reshard_layout){
      .descriptor = descriptor,
      .format = format,
      .shards = shards,
      .shard_count = shard_count,
  };
  reshard_limits limits = reshard_limits_default();
  reshard_error err = {0};
  cr_assert_eq(
      reshard_layout_normalize(layout, &limits, "layout", &arena, &err),
      RESHARD_OK, "%s", err.message);
  return layout;
}

static const reshard_layout *layout_a(void) {
  static const uint64_t starts[] = {0, 2};
  return make_layout(target_descriptor(), RESHARD_FORMAT_LPHD, starts, 1);
}

static const reshard_layout *layout_b(void) {
  static const uint64_t starts[] = {0, 1, 2};
  return make_layout(target_descriptor(), RESHARD_FORMAT_PLHD, starts, 2);
}

static size_t add_source(const reshard_layout *layout, const char *id) {
  cr_assert_lt(fx.source_count, MAX_SOURCES);
  fx.sources[fx.source_count] =
      (reshard_plan_source){.layout = layout, .layout_id = id, .join = NULL};
  return fx.source_count++;
}

/* Appends a page bound to the given sources (none: a miss). */
static void add_page_sources(const size_t *sources, size_t count) {
  cr_assert_lt(fx.pages, MAX_PAGES);
  size_t at = fx.page_source_start[fx.pages];
  for (size_t i = 0; i < count; i++) {
    fx.page_sources[at + i] = sources[i];
  }
  fx.page_source_start[++fx.pages] = at + count;
}

#define ADD_PAGE(...)                                                          \
  do {                                                                         \
    const size_t sources_[] = {__VA_ARGS__};                                   \
    add_page_sources(sources_, sizeof sources_ / sizeof sources_[0]);          \
  } while (0)
#define ADD_MISS() add_page_sources(NULL, 0)

/* TP2 target, reader "r1" (head 1), default limits, no pages yet. */
static void setup(void) {
  reshard_arena_init(&arena, 0);
  memset(&fx, 0, sizeof fx);
  static const part_spec tp2[] = {
      {"r0", 0, 0, 0, 1, 0, 1},
      {"r1", 0, 1, 1, 1, 0, 1},
  };
  set_placement(1, 2, tp2, 2);
  set_reader("r1", 1, 1);
  fx.request.limits = reshard_limits_default();
}

static void teardown(void) {
  reshard_load_plan_free_joins(&fx.plan, fx.source_count);
  reshard_arena_destroy(&arena);
}

TestSuite(plan, .init = setup, .fini = teardown);
TestSuite(limits);

/* Builds the binding for the current page count and plans. Frees the
 * joins of a previous plan first. */
static reshard_status plan(void) {
  reshard_load_plan_free_joins(&fx.plan, fx.source_count);
  uint64_t tokens = fx.pages * 2;
  uint64_t row = fx.head_count * 4;
  fx.region = (reshard_region){"m", 4096, 4096};
  fx.ranges[0] = (reshard_binding_range){
      .global_layer_id = 0,
      .component = RESHARD_COMPONENT_KEY,
      .token_start = 0,
      .token_count = tokens ? tokens : 1,
      .head_start = fx.head_start,
      .head_count = fx.head_count,
      .region_id = "m",
      .offset_bytes = 0,
      .token_stride_bytes = row,
      .head_stride_bytes = 4,
  };
  fx.ranges[1] = fx.ranges[0];
  fx.ranges[1].component = RESHARD_COMPONENT_VALUE;
  fx.ranges[1].offset_bytes = tokens * row;
  fx.binding = (reshard_binding){
      .participant_id = fx.participant,
      .endpoint = "reader:1",
      .regions = &fx.region,
      .region_count = 1,
      .ranges = fx.ranges,
      .range_count = 2,
  };
  fx.request.placement = &fx.placement;
  fx.request.binding = &fx.binding;
  fx.request.page_count = fx.pages;
  fx.request.sources = fx.sources;
  fx.request.source_count = fx.source_count;
  fx.request.page_source_start = fx.page_source_start;
  fx.request.page_sources = fx.page_sources;
  return reshard_plan_load(&fx.request, &arena, &fx.plan, &fx.err);
}

static void plan_ok(void) {
  cr_assert_eq(plan(), RESHARD_OK, "%s", fx.err.message);
}

static void expect_copy(size_t i, uint64_t page, uint64_t part,
                        uint64_t part_offset, uint64_t region_offset,
                        uint64_t nbytes) {
  cr_assert_lt(i, fx.plan.copy_count);
  const reshard_copy *c = &fx.plan.copies[i];
  cr_assert_eq(c->page_index, page, "copy %zu page", i);
  cr_assert_eq(c->part_index, part, "copy %zu part", i);
  cr_assert_eq(c->part_offset, part_offset, "copy %zu part_offset", i);
  cr_assert_eq(c->region_index, 0, "copy %zu region", i);
  cr_assert_eq(c->region_offset, region_offset, "copy %zu region_offset", i);
  cr_assert_eq(c->nbytes, nbytes, "copy %zu nbytes", i);
}

/* The stats agree with the copies and batches. */
static void check_stats(void) {
  const reshard_load_plan *p = &fx.plan;
  cr_assert_eq(p->operations, p->copy_count);
  uint64_t bytes = 0;
  for (size_t i = 0; i < p->copy_count; i++) {
    cr_assert_gt(p->copies[i].nbytes, 0);
    bytes += p->copies[i].nbytes;
  }
  cr_assert_eq(p->bytes, bytes);
  size_t next = 0;
  uint64_t batch_bytes = 0;
  for (size_t b = 0; b < p->batch_count; b++) {
    const reshard_batch *batch = &p->batches[b];
    cr_assert_eq(batch->first, next);
    cr_assert_gt(batch->count, 0);
    cr_assert_leq(batch->count, fx.request.limits.max_batch_operations);
    cr_assert_leq(batch->bytes, fx.request.limits.max_batch_bytes);
    uint64_t sum = 0;
    for (size_t i = batch->first; i < batch->first + batch->count; i++) {
      sum += p->copies[i].nbytes;
    }
    cr_assert_eq(batch->bytes, sum);
    batch_bytes += sum;
    next += batch->count;
  }
  cr_assert_eq(next, p->copy_count);
  cr_assert_eq(batch_bytes, p->bytes);
  cr_assert_geq(p->copies_before_coalescing, p->copies_after_coalescing);
  cr_assert_leq(p->copies_after_coalescing, p->copy_count);
}

/* ---- tiny plans checked by hand --------------------------------------- */

Test(plan, lphd_single_page_copies_by_hand) {
  /* Head 1 of A: K at 8t + 4 = 4, 12 (source rows are 8 bytes apart, the
   * reader's 4 apart: one copy per token); V at 20, 28. Destination K at
   * 0, 4 and V at 8, 12. No two are contiguous on both sides. */
  add_source(layout_a(), "sha256:a");
  ADD_PAGE(0);
  plan_ok();
  cr_assert_eq(fx.plan.hit_pages, 1);
  cr_assert_eq(fx.plan.page_source[0], 0);
  cr_assert_eq(fx.plan.copy_count, 4);
  expect_copy(0, 0, 0, 4, 0, 4);
  expect_copy(1, 0, 0, 12, 4, 4);
  expect_copy(2, 0, 0, 20, 8, 4);
  expect_copy(3, 0, 0, 28, 12, 4);
  cr_assert_eq(fx.plan.batch_count, 1);
  cr_assert_eq(fx.plan.batches[0].count, 4);
  cr_assert_eq(fx.plan.batches[0].bytes, 16);
  cr_assert_eq(fx.plan.bytes, 16);
  cr_assert_eq(fx.plan.copies_before_coalescing, 4);
  cr_assert_eq(fx.plan.copies_after_coalescing, 4);
  cr_assert_str_eq(fx.plan.participant->participant_id, "r1");
  check_stats();
}

Test(plan, reader_r0_reads_head_zero) {
  set_reader("r0", 0, 1);
  add_source(layout_a(), "sha256:a");
  ADD_PAGE(0);
  plan_ok();
  expect_copy(0, 0, 0, 0, 0, 4);
  expect_copy(1, 0, 0, 8, 4, 4);
  expect_copy(2, 0, 0, 16, 8, 4);
  expect_copy(3, 0, 0, 24, 12, 4);
  check_stats();
}

Test(plan, a_binding_validated_before_gives_the_same_plan) {
  add_source(layout_a(), "sha256:a");
  ADD_PAGE(0);
  plan_ok();
  reshard_copy first[16];
  size_t count = fx.plan.copy_count;
  cr_assert_leq(count, 16);
  memcpy(first, fx.plan.copies, count * sizeof *first);

  /* Validated by the caller, e.g. from a cache of identical bindings, into
   * memory the planner must only read. */
  reshard_bound_binding bound;
  const reshard_placement_part *part =
      reshard_placement_find_part(&fx.placement, fx.participant);
  cr_assert_eq(reshard_binding_validate(&fx.binding, &fx.placement.descriptor,
                                        part, fx.pages, &fx.request.limits,
                                        &arena, &bound, &fx.err),
               RESHARD_OK, "%s", fx.err.message);
  reshard_bound_binding copy = bound;
  fx.request.bound_binding = &bound;
  plan_ok();
  cr_assert_eq(fx.plan.copy_count, count);
  cr_assert_eq(memcmp(fx.plan.copies, first, count * sizeof *first), 0);
  cr_assert_eq(memcmp(&bound, &copy, sizeof bound), 0, "bound was written");
  check_stats();
}

Test(plan, plhd_two_pages_copies_by_hand) {
  /* Part 1 of B holds head 1: K [0, 8), V [8, 16) per page, whole blocks.
   * Reader: K tokens 0..3 at [0, 16), V at [16, 32). Per page, K and V
   * are contiguous in the Part but not in the region: 2 copies a page. */
  add_source(layout_b(), "sha256:b");
  ADD_PAGE(0);
  ADD_PAGE(0);
  plan_ok();
  cr_assert_eq(fx.plan.hit_pages, 2);
  cr_assert_eq(fx.plan.copy_count, 4);
  expect_copy(0, 0, 1, 0, 0, 8);
  expect_copy(1, 0, 1, 8, 16, 8);
  expect_copy(2, 1, 1, 0, 8, 8);
  expect_copy(3, 1, 1, 8, 24, 8);
  cr_assert_eq(fx.plan.bytes, 32);
  cr_assert_eq(fx.plan.copies_before_coalescing, 4);
  check_stats();
}

Test(plan, plhd_single_page_coalesces_k_and_v) {
  /* One page: K to [0, 8), V to [8, 16): contiguous on both sides. */
  add_source(layout_b(), "sha256:b");
  ADD_PAGE(0);
  plan_ok();
  cr_assert_eq(fx.plan.copy_count, 1);
  expect_copy(0, 0, 1, 0, 0, 16);
  cr_assert_eq(fx.plan.copies_before_coalescing, 2);
  cr_assert_eq(fx.plan.copies_after_coalescing, 1);
  /* K's single copy runs into V's: lowered as sequences, the two merge as
   * coalescing merges them. */
  cr_assert_eq(fx.plan.sequence_pages, 1);
  check_stats();
}

Test(plan, replicas_plan_their_own_binding) {
  /* TP4 over 2 heads: "q1" is replica 1 of head 0 and reads head 0. */
  static const part_spec tp4[] = {
      {"q0", 0, 0, 0, 1, 0, 2},
      {"q1", 0, 1, 0, 1, 1, 2},
      {"q2", 0, 2, 1, 1, 0, 2},
      {"q3", 0, 3, 1, 1, 1, 2},
  };
  set_placement(1, 4, tp4, 4);
  set_reader("q1", 0, 1);
  add_source(layout_a(), "sha256:a");
  ADD_PAGE(0);
  plan_ok();
  cr_assert_str_eq(fx.plan.participant->participant_id, "q1");
  expect_copy(0, 0, 0, 0, 0, 4);
  expect_copy(3, 0, 0, 24, 12, 4);
  check_stats();
}

/* ---- request checks --------------------------------------------------- */

Test(plan, rejects_empty_page_list) {
  add_source(layout_a(), "sha256:a");
  ASSERT_FAILS(plan(), fx.err, RESHARD_INVALID_ARGUMENT,
               "page_keys: must not be empty");
}

Test(plan, max_page_keys_bounds_the_pages) {
  add_source(layout_a(), "sha256:a");
  ADD_PAGE(0);
  ADD_PAGE(0);
  fx.request.limits.max_page_keys = 1;
  ASSERT_FAILS(plan(), fx.err, RESHARD_RESOURCE_EXHAUSTED,
               "page_keys: 2 keys exceed the limit max_page_keys 1");
  fx.request.limits.max_page_keys = 2;
  plan_ok();
}

Test(plan, max_page_keys_is_checked_before_allocating_per_page) {
  /* A page count far beyond the limit must be refused by the limit, not
   * by an allocation sized by the page count. The page arrays are never
   * read when the limit is checked first. */
  add_source(layout_a(), "sha256:a");
  ADD_PAGE(0);
  fx.request.limits.max_page_keys = 1000;
  reshard_status status = plan(); /* builds the binding for 1 page */
  cr_assert_eq(status, RESHARD_OK, "%s", fx.err.message);
  reshard_load_plan_free_joins(&fx.plan, fx.source_count);
  fx.request.page_count = UINT64_C(1) << 62;
  ASSERT_FAILS(reshard_plan_load(&fx.request, &arena, &fx.plan, &fx.err),
               fx.err, RESHARD_RESOURCE_EXHAUSTED,
               "page_keys:", "max_page_keys 1000");
}

Test(plan, rejects_participant_not_in_placement) {
  set_reader("zz", 1, 1);
  add_source(layout_a(), "sha256:a");
  ADD_PAGE(0);
  ASSERT_FAILS(plan(), fx.err, RESHARD_INVALID_ARGUMENT,
               "binding.participant_id:",
               "\"zz\" is not a participant of the target placement");
}

Test(plan, rejects_empty_participant) {
  set_reader("", 1, 1);
  add_source(layout_a(), "sha256:a");
  ADD_PAGE(0);
  ASSERT_FAILS(plan(), fx.err, RESHARD_INVALID_ARGUMENT,
               "binding.participant_id:", "must not be empty");
}

Test(plan, binding_errors_are_reported_with_their_path) {
  set_reader("r1", 0, 2); /* r1 owns head 1 only */
  add_source(layout_a(), "sha256:a");
  ADD_PAGE(0);
  ASSERT_FAILS(plan(), fx.err, RESHARD_INVALID_ARGUMENT, "binding.ranges[0]:",
               "heads [0, +2) leave participant \"r1\"'s heads [1, 2)");
}

/* DP2 x TP2: "a0", "a1" on DP 0; "b0", "b1" on DP 1. */
static void dp2(void) {
  static const part_spec specs[] = {
      {"a0", 0, 0, 0, 1, 0, 1},
      {"a1", 0, 1, 1, 1, 0, 1},
      {"b0", 1, 0, 0, 1, 0, 1},
      {"b1", 1, 1, 1, 1, 0, 1},
  };
  set_placement(2, 2, specs, 4);
  set_reader("b1", 1, 1);
  add_source(layout_a(), "sha256:a");
  ADD_PAGE(0);
}

Test(plan, rejects_participant_of_another_dp_rank) {
  dp2(); /* no target_dp_rank: the lowest, 0 */
  ASSERT_FAILS(plan(), fx.err, RESHARD_INVALID_ARGUMENT,
               "binding.participant_id:",
               "\"b1\" has dp rank 1, not the target dp rank 0");
}

Test(plan, rejects_participant_of_another_explicit_dp_rank) {
  dp2();
  set_reader("a1", 1, 1);
  fx.request.has_dp_rank = true;
  fx.request.dp_rank = 1;
  ASSERT_FAILS(plan(), fx.err, RESHARD_INVALID_ARGUMENT,
               "binding.participant_id:",
               "\"a1\" has dp rank 0, not the target dp rank 1");
}

Test(plan, explicit_target_dp_rank_is_honoured) {
  dp2();
  fx.request.has_dp_rank = true;
  fx.request.dp_rank = 1;
  plan_ok();
  cr_assert_eq(fx.plan.copy_count, 4);
  cr_assert_str_eq(fx.plan.participant->participant_id, "b1");
}

ParameterizedTestParameters(plan, rejects_unknown_target_dp_rank) {
  static uint64_t ranks[] = {2, 5, UINT64_MAX};
  return cr_make_param_array(uint64_t, ranks, sizeof ranks / sizeof ranks[0]);
}

ParameterizedTest(uint64_t *rank, plan, rejects_unknown_target_dp_rank) {
  dp2();
  fx.request.has_dp_rank = true;
  fx.request.dp_rank = *rank;
  char expected[64];
  snprintf(expected, sizeof expected, "dp rank %llu",
           (unsigned long long)*rank);
  ASSERT_FAILS(plan(), fx.err, RESHARD_INVALID_ARGUMENT,
               "target_dp_rank:", expected);
}

/* ---- descriptor mismatch and the hit prefix ---------------------------- */

struct mismatch_case {
  char field[32];
};

static uint64_t two_layers[] = {0, 1};

/* A single-shard layout whose descriptor differs from the target's in
 * `field` only. */
static const reshard_layout *mismatched_layout(const char *field) {
  reshard_descriptor d = target_descriptor();
  if (strcmp(field, "dtype") == 0) {
    d.dtype = "fp16";
  } else if (strcmp(field, "itemsize") == 0) {
    d.itemsize = 4;
  } else if (strcmp(field, "page_size") == 0) {
    d.page_size = 4;
  } else if (strcmp(field, "total_kv_heads") == 0) {
    d.total_kv_heads = 4;
  } else if (strcmp(field, "key_head_dim") == 0) {
    d.key_head_dim = 4;
  } else if (strcmp(field, "value_head_dim") == 0) {
    d.value_head_dim = 0;
  } else if (strcmp(field, "global_layer_ids") == 0) {
    d.global_layer_ids = two_layers;
    d.layer_count = 2;
  } else {
    cr_assert_fail("unknown field %s", field);
  }
  uint64_t starts[] = {0, d.total_kv_heads};
  return make_layout(d, RESHARD_FORMAT_PLHD, starts, 1);
}

ParameterizedTestParameters(plan, first_page_with_other_descriptor_fails) {
  static struct mismatch_case cases[] = {
      {"dtype"},
      {"itemsize"},
      {"page_size"},
      {"total_kv_heads"},
      {"key_head_dim"},
      {"value_head_dim"},
      {"global_layer_ids"},
  };
  return cr_make_param_array(struct mismatch_case, cases,
                             sizeof cases / sizeof cases[0]);
}

ParameterizedTest(struct mismatch_case *c, plan,
                  first_page_with_other_descriptor_fails) {
  add_source(mismatched_layout(c->field), "sha256:c");
  ADD_PAGE(0);
  ADD_PAGE(0);
  ASSERT_FAILS(plan(), fx.err, RESHARD_FAILED_PRECONDITION, "page_keys[0]",
               c->field, "sha256:c");
}

Test(plan, first_page_with_two_other_descriptors_fails) {
  add_source(mismatched_layout("page_size"), "sha256:c");
  add_source(mismatched_layout("dtype"), "sha256:d");
  ADD_PAGE(0, 1);
  ASSERT_FAILS(plan(), fx.err, RESHARD_FAILED_PRECONDITION, "page_keys[0]",
               "page_size");
}

Test(plan, a_later_page_with_other_descriptor_ends_the_hit_prefix) {
  size_t a = add_source(layout_a(), "sha256:a");
  size_t c = add_source(mismatched_layout("key_head_dim"), "sha256:c");
  ADD_PAGE(a);
  ADD_PAGE(a);
  ADD_PAGE(c);
  ADD_PAGE(a);
  plan_ok();
  cr_assert_eq(fx.plan.hit_pages, 2);
  for (size_t i = 0; i < fx.plan.copy_count; i++) {
    cr_assert_lt(fx.plan.copies[i].page_index, 2);
  }
  cr_assert_eq(fx.plan.copy_count, 8);
  check_stats();
}

Test(plan, an_unbound_page_ends_the_hit_prefix) {
  size_t a = add_source(layout_a(), "sha256:a");
  ADD_PAGE(a);
  ADD_MISS();
  ADD_PAGE(a);
  plan_ok();
  cr_assert_eq(fx.plan.hit_pages, 1);
  cr_assert_eq(fx.plan.copy_count, 4);
  check_stats();
}

Test(plan, an_unbound_first_page_is_an_empty_plan) {
  size_t a = add_source(layout_a(), "sha256:a");
  ADD_MISS();
  ADD_PAGE(a);
  plan_ok();
  cr_assert_eq(fx.plan.hit_pages, 0);
  cr_assert_eq(fx.plan.copy_count, 0);
  cr_assert_eq(fx.plan.batch_count, 0);
  cr_assert_eq(fx.plan.bytes, 0);
  cr_assert_eq(fx.plan.operations, 0);
}

Test(plan, mismatched_candidates_beside_a_match_are_ignored) {
  size_t c = add_source(mismatched_layout("dtype"), "sha256:0");
  size_t a = add_source(layout_a(), "sha256:a");
  ADD_PAGE(c, a);
  plan_ok();
  cr_assert_eq(fx.plan.hit_pages, 1);
  cr_assert_eq(fx.plan.page_source[0], a);
}

/* ---- choosing among layouts ------------------------------------------- */

Test(plan, fewest_operations_wins_without_preference) {
  /* A costs 4 copies, B 1; A has the smaller id, so only cost explains B. */
  size_t a = add_source(layout_a(), "sha256:aaaa");
  size_t b = add_source(layout_b(), "sha256:bbbb");
  ADD_PAGE(a, b);
  plan_ok();
  cr_assert_eq(fx.plan.page_source[0], b);
  cr_assert_eq(fx.plan.copy_count, 1);
  expect_copy(0, 0, 1, 0, 0, 16);
}

Test(plan, a_preferred_layout_wins) {
  size_t a = add_source(layout_a(), "sha256:aaaa");
  size_t b = add_source(layout_b(), "sha256:bbbb");
  ADD_PAGE(b, a);
  const char *preferred[] = {"sha256:aaaa"};
  fx.request.preferred_layout_ids = preferred;
  fx.request.preferred_count = 1;
  plan_ok();
  cr_assert_eq(fx.plan.page_source[0], a);
  cr_assert_eq(fx.plan.copy_count, 4);
}

Test(plan, the_first_available_preference_wins) {
  size_t a = add_source(layout_a(), "sha256:aaaa");
  size_t b = add_source(layout_b(), "sha256:bbbb");
  ADD_PAGE(a, b);
  const char *preferred[] = {"sha256:none", "sha256:bbbb", "sha256:aaaa"};
  fx.request.preferred_layout_ids = preferred;
  fx.request.preferred_count = 3;
  plan_ok();
  cr_assert_eq(fx.plan.page_source[0], b);

  const char *other[] = {"sha256:none", "sha256:aaaa", "sha256:bbbb"};
  fx.request.preferred_layout_ids = other;
  plan_ok();
  cr_assert_eq(fx.plan.page_source[0], a);
}

Test(plan, unavailable_preferences_fall_back_to_cost) {
  size_t a = add_source(layout_a(), "sha256:aaaa");
  size_t b = add_source(layout_b(), "sha256:bbbb");
  ADD_PAGE(a, b);
  const char *preferred[] = {"sha256:none"};
  fx.request.preferred_layout_ids = preferred;
  fx.request.preferred_count = 1;
  plan_ok();
  cr_assert_eq(fx.plan.page_source[0], b);
}

Test(plan, a_preferred_layout_with_another_descriptor_is_not_used) {
  size_t c = add_source(mismatched_layout("page_size"), "sha256:cccc");
  size_t a = add_source(layout_a(), "sha256:aaaa");
  size_t b = add_source(layout_b(), "sha256:bbbb");
  ADD_PAGE(c, a, b);
  const char *preferred[] = {"sha256:cccc", "sha256:aaaa"};
  fx.request.preferred_layout_ids = preferred;
  fx.request.preferred_count = 2;
  plan_ok();
  cr_assert_eq(fx.plan.page_source[0], a);
}

Test(plan, equal_cost_goes_to_the_smallest_layout_id) {
  const reshard_layout *a = layout_a();
  size_t high = add_source(a, "sha256:ffff");
  size_t low = add_source(a, "sha256:0000");
  ADD_PAGE(high, low);
  plan_ok();
  cr_assert_eq(fx.plan.page_source[0], low);
}

Test(plan, equal_cost_tie_does_not_depend_on_candidate_order) {
  const reshard_layout *a = layout_a();
  size_t low = add_source(a, "sha256:0000");
  size_t high = add_source(a, "sha256:ffff");
  ADD_PAGE(high, low);
  ADD_PAGE(low, high);
  plan_ok();
  cr_assert_eq(fx.plan.page_source[0], low);
  cr_assert_eq(fx.plan.page_source[1], low);
}

Test(plan, each_page_chooses_among_its_own_candidates) {
  size_t a = add_source(layout_a(), "sha256:aaaa");
  size_t b = add_source(layout_b(), "sha256:bbbb");
  ADD_PAGE(a);
  ADD_PAGE(a, b);
  ADD_PAGE(a);
  plan_ok();
  cr_assert_eq(fx.plan.hit_pages, 3);
  cr_assert_eq(fx.plan.page_source[0], a);
  cr_assert_eq(fx.plan.page_source[1], b);
  cr_assert_eq(fx.plan.page_source[2], a);
  check_stats();
}

/* ---- plan limits and cancellation ------------------------------------- */

Test(plan, max_operations_bounds_the_copies) {
  add_source(layout_a(), "sha256:a");
  ADD_PAGE(0);
  fx.request.limits.max_operations = 3;
  ASSERT_FAILS(plan(), fx.err, RESHARD_RESOURCE_EXHAUSTED,
               "the limit max_operations 3");
  fx.request.limits.max_operations = 4;
  plan_ok();
}

Test(plan, max_operations_counts_the_copies_batching_adds) {
  /* B: 1 copy of 16 bytes, split by 4-byte batches into 4 copies. */
  add_source(layout_b(), "sha256:b");
  ADD_PAGE(0);
  fx.request.limits.max_batch_bytes = 4;
  fx.request.limits.max_operations = 3;
  ASSERT_FAILS(plan(), fx.err, RESHARD_RESOURCE_EXHAUSTED,
               "the limit max_operations 3");
  fx.request.limits.max_operations = 4;
  plan_ok();
  cr_assert_eq(fx.plan.copy_count, 4);
  cr_assert_eq(fx.plan.batch_count, 4);
  check_stats();
}

Test(plan, max_bytes_bounds_the_bytes) {
  add_source(layout_a(), "sha256:a");
  ADD_PAGE(0);
  fx.request.limits.max_bytes = 15;
  ASSERT_FAILS(plan(), fx.err, RESHARD_RESOURCE_EXHAUSTED,
               "the limit max_bytes 15");
  fx.request.limits.max_bytes = 16;
  plan_ok();
}

Test(plan, limits_fail_on_a_later_page_without_a_partial_plan) {
  add_source(layout_a(), "sha256:a");
  ADD_PAGE(0);
  ADD_PAGE(0);
  ADD_PAGE(0);
  fx.request.limits.max_bytes = 40; /* 16 bytes a page */
  ASSERT_FAILS(plan(), fx.err, RESHARD_RESOURCE_EXHAUSTED, "max_bytes 40");
  cr_assert_eq(fx.plan.copy_count, 0);
  cr_assert_null(fx.plan.copies);
  cr_assert_eq(fx.plan.hit_pages, 0);
}

static bool stop_now(void *context) {
  (void)context;
  return true;
}

static bool stop_on_second_call(void *context) {
  int *calls = context;
  return ++*calls >= 2;
}

Test(plan, should_stop_abandons_the_plan) {
  add_source(layout_a(), "sha256:a");
  ADD_PAGE(0);
  fx.request.should_stop = stop_now;
  ASSERT_FAILS(plan(), fx.err, RESHARD_DEADLINE_EXCEEDED, "deadline");
  cr_assert_eq(fx.plan.copy_count, 0);
}

Test(plan, should_stop_after_joins_were_built) {
  /* The first page builds the join; the stop on the second page must
   * still leave nothing to free (ASan reports a leaked join). */
  add_source(layout_a(), "sha256:a");
  ADD_PAGE(0);
  ADD_PAGE(0);
  int calls = 0;
  fx.request.should_stop = stop_on_second_call;
  fx.request.should_stop_context = &calls;
  ASSERT_FAILS(plan(), fx.err, RESHARD_DEADLINE_EXCEEDED, "deadline");
  cr_assert_eq(calls, 2);
  cr_assert_null(fx.plan.built_joins);
}

Test(plan, should_stop_returning_false_changes_nothing) {
  int calls = -1000;
  add_source(layout_a(), "sha256:a");
  ADD_PAGE(0);
  fx.request.should_stop = stop_on_second_call;
  fx.request.should_stop_context = &calls;
  plan_ok();
  cr_assert_gt(calls, -1000);
  cr_assert_eq(fx.plan.copy_count, 4);
}

/* ---- stats and joins --------------------------------------------------- */

Test(plan, stats_agree_with_copies_and_batches) {
  add_source(layout_a(), "sha256:a");
  for (int p = 0; p < 5; p++) {
    ADD_PAGE(0);
  }
  fx.request.limits.max_batch_operations = 3;
  fx.request.limits.max_batch_bytes = 10;
  plan_ok();
  cr_assert_eq(fx.plan.hit_pages, 5);
  cr_assert_eq(fx.plan.bytes, 5 * 16);
  cr_assert_eq(fx.plan.copies_before_coalescing, 5 * 4);
  check_stats();
  /* Batches are full except the last: 80 bytes in batches of <= 10. */
  for (size_t b = 0; b + 1 < fx.plan.batch_count; b++) {
    const reshard_batch *batch = &fx.plan.batches[b];
    cr_assert(batch->count == 3 || batch->bytes == 10, "batch %zu short", b);
  }
}

Test(plan, built_joins_belong_to_the_caller) {
  size_t a = add_source(layout_a(), "sha256:a");
  size_t b = add_source(layout_b(), "sha256:b");
  ADD_PAGE(a);
  (void)b;
  plan_ok();
  cr_assert_not_null(fx.plan.built_joins);
  cr_assert_not_null(fx.plan.built_joins[a]);
  cr_assert_null(fx.plan.built_joins[b]); /* never a candidate */
  reshard_load_plan_free_joins(&fx.plan, fx.source_count);
  cr_assert_null(fx.plan.built_joins[a]);
  /* Freeing twice is harmless. */
  reshard_load_plan_free_joins(&fx.plan, fx.source_count);
}

Test(plan, a_prebuilt_join_is_used_and_not_rebuilt) {
  const reshard_layout *a = layout_a();
  reshard_error err = {0};
  const reshard_placement_part *part =
      reshard_placement_find_part(&fx.placement, "r1");
  reshard_join *join = reshard_join_build(a, part, &err);
  cr_assert_not_null(join, "%s", err.message);
  size_t s = add_source(a, "sha256:a");
  fx.sources[s].join = join;
  ADD_PAGE(s);
  plan_ok();
  cr_assert_null(fx.plan.built_joins[s]);
  expect_copy(0, 0, 0, 4, 0, 4);
  reshard_join_free(join);
}

Test(plan, every_compared_candidate_join_is_returned) {
  size_t a = add_source(layout_a(), "sha256:aaaa");
  size_t b = add_source(layout_b(), "sha256:bbbb");
  ADD_PAGE(a, b);
  plan_ok();
  /* Both were costed; both joins are the caller's to free (teardown). */
  cr_assert_not_null(fx.plan.built_joins[a]);
  cr_assert_not_null(fx.plan.built_joins[b]);
}

/* ---- reshard_limits_clamp --------------------------------------------- */

static const size_t limit_fields[] = {
    offsetof(reshard_limits, max_layout_parts),
    offsetof(reshard_limits, max_layout_fragments),
    offsetof(reshard_limits, max_layout_bytes),
    offsetof(reshard_limits, max_ranges),
    offsetof(reshard_limits, max_operations),
    offsetof(reshard_limits, max_bytes),
    offsetof(reshard_limits, max_batch_operations),
    offsetof(reshard_limits, max_batch_bytes),
    offsetof(reshard_limits, max_validation_work),
    offsetof(reshard_limits, max_page_keys),
};

static uint64_t *field(reshard_limits *limits, size_t i) {
  return (uint64_t *)((char *)limits + limit_fields[i]);
}

Test(limits, defaults_match_the_spec) {
  reshard_limits d = reshard_limits_default();
  cr_assert_eq(d.max_layout_parts, 100000);
  cr_assert_eq(d.max_layout_fragments, 100000);
  cr_assert_eq(d.max_layout_bytes, UINT64_C(1) << 40);
  cr_assert_eq(d.max_ranges, 100000);
  cr_assert_eq(d.max_operations, 1000000);
  cr_assert_eq(d.max_bytes, UINT64_C(1) << 40);
  cr_assert_eq(d.max_batch_operations, 4096);
  cr_assert_eq(d.max_batch_bytes, UINT64_C(64) << 20);
  cr_assert_eq(d.max_validation_work, 10000000);
  cr_assert_eq(d.max_page_keys, 65536);
}

Test(limits, clamp_zero_keeps_the_cap) {
  reshard_limits caps = reshard_limits_default();
  reshard_limits requested;
  memset(&requested, 0, sizeof requested);
  reshard_limits out = reshard_limits_clamp(&caps, &requested);
  cr_assert_arr_eq(&out, &caps, sizeof out);
}

ParameterizedTestParameters(limits, clamp_each_field) {
  static size_t indices[] = {0, 1, 2, 3, 4, 5, 6, 7, 8, 9};
  return cr_make_param_array(size_t, indices,
                             sizeof indices / sizeof indices[0]);
}

ParameterizedTest(size_t *index, limits, clamp_each_field) {
  reshard_limits caps = reshard_limits_default();
  uint64_t cap = *field(&caps, *index);
  uint64_t values[] = {0, 1, cap - 1, cap, cap + 1, UINT64_MAX};
  uint64_t expected[] = {cap, 1, cap - 1, cap, cap, cap};
  for (size_t v = 0; v < sizeof values / sizeof values[0]; v++) {
    reshard_limits requested;
    memset(&requested, 0, sizeof requested);
    *field(&requested, *index) = values[v];
    reshard_limits out = reshard_limits_clamp(&caps, &requested);
    for (size_t f = 0; f < sizeof limit_fields / sizeof limit_fields[0]; f++) {
      uint64_t want = f == *index ? expected[v] : *field(&caps, f);
      cr_assert_eq(*field(&out, f), want, "field %zu, requested %llu", f,
                   (unsigned long long)values[v]);
    }
  }
}
