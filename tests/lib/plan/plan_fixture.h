/* The fixture of test_plan.c and test_select.c: tiny load requests whose
 * copies are computed by hand (SPEC §2.2). Each test file includes it once
 * and declares its suites with setup and teardown below.
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
#ifndef RESHARD_TEST_PLAN_FIXTURE_H
#define RESHARD_TEST_PLAN_FIXTURE_H

#include <criterion/criterion.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include "reshard/arena.h"
#include "reshard/plan.h"

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

static inline reshard_descriptor target_descriptor(void) {
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

static inline void set_placement(uint64_t dp_size, uint64_t tp_size,
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

static inline void set_reader(const char *participant, uint64_t head_start,
                              uint64_t head_count) {
  fx.participant = participant;
  fx.head_start = head_start;
  fx.head_count = head_count;
}

/* A normalized layout of `descriptor` whose shards are the head
 * intervals [starts[i], starts[i + 1]) over all layers. */
static inline const reshard_layout *make_layout(reshard_descriptor descriptor,
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

static inline const reshard_layout *layout_a(void) {
  static const uint64_t starts[] = {0, 2};
  return make_layout(target_descriptor(), RESHARD_FORMAT_LPHD, starts, 1);
}

static inline const reshard_layout *layout_b(void) {
  static const uint64_t starts[] = {0, 1, 2};
  return make_layout(target_descriptor(), RESHARD_FORMAT_PLHD, starts, 2);
}

static inline size_t add_source(const reshard_layout *layout, const char *id) {
  cr_assert_lt(fx.source_count, MAX_SOURCES);
  fx.sources[fx.source_count] =
      (reshard_plan_source){.layout = layout, .layout_id = id, .join = NULL};
  return fx.source_count++;
}

/* Appends a page bound to the given sources (none: a miss). */
static inline void add_page_sources(const size_t *sources, size_t count) {
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
static inline void setup(void) {
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

static inline void teardown(void) {
  reshard_load_plan_free_joins(&fx.plan, fx.source_count);
  reshard_arena_destroy(&arena);
}

/* Builds the binding for the current page count and plans. Frees the
 * joins of a previous plan first. */
static inline reshard_status plan(void) {
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

static inline void plan_ok(void) {
  cr_assert_eq(plan(), RESHARD_OK, "%s", fx.err.message);
}

static inline void expect_copy(size_t i, uint64_t page, uint64_t part,
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
static inline void check_stats(void) {
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

#endif
