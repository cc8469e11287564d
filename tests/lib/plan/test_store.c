/* Store planning (SPEC §2.5) proven by execution: for every format x
 * TP/PP/DP/replica writer x writer memory style x random shapes, each
 * participant of the writing DP rank plans a store; executing the plans
 * into zeroed Part buffers yields exactly the Parts of SPEC §1.3, and
 * participants that write nothing get empty plans. The full cycle then has
 * readers of another topology load from the stored Parts. Coalescing is
 * proven minimal for the store order, and every rejection has its test.
 * Seeds derive from RESHARD_ORACLE_SEED like tests/lib/plan/test_oracle.c. */
#include <criterion/criterion.h>
#include <criterion/parameterized.h>
#include <inttypes.h>
#include <stdio.h>
#include <string.h>

#include "assert_error.h"
#include "oracle.h"
#include "reshard/store.h"
#include "store_oracle.h"

/* A writer placement (normalized) and the layout SPEC §2.1 gives it. */
typedef struct writer_case {
  reshard_arena arena;
  oracle_rng rng;
  reshard_descriptor descriptor;
  oracle_topology topology;
  reshard_placement placement;
  reshard_upload_plan upload;
  uint64_t dp_rank;
  uint64_t pages;
  reshard_limits limits; /* sometimes small batches, so copies split */
  char description[512];
} writer_case;

static void writer_case_build(writer_case *w, uint64_t seed,
                              reshard_format format, bool single_tensor,
                              const oracle_topology *topology) {
  memset(w, 0, sizeof *w);
  reshard_arena_init(&w->arena, 0);
  oracle_rng_seed(&w->rng, seed);
  oracle_random_descriptor(&w->rng, &w->arena, single_tensor, &w->descriptor);
  if (topology != NULL) {
    w->topology = *topology;
  } else {
    oracle_random_topology(&w->rng, &w->descriptor, &w->topology);
  }
  oracle_build_placement(&w->arena, &w->rng, &w->descriptor, &w->topology, "w",
                         &w->placement);
  reshard_error err;
  cr_assert_eq(reshard_placement_normalize(&w->placement, &w->arena, &err),
               RESHARD_OK, "%s", err.message);
  w->dp_rank = oracle_rng_between(&w->rng, 0, w->topology.dp - 1);
  reshard_limits limits = reshard_limits_default();
  cr_assert_eq(reshard_plan_upload(&w->placement, format, true, w->dp_rank,
                                   &limits, &w->arena, &w->upload, &err),
               RESHARD_OK, "%s", err.message);
  w->pages = oracle_rng_between(&w->rng, 1, 3);
  w->limits = reshard_limits_default();
  if (oracle_rng_chance(&w->rng, 30)) {
    w->limits.max_batch_operations = oracle_rng_between(&w->rng, 1, 64);
    w->limits.max_batch_bytes = oracle_rng_between(&w->rng, 1, 4096);
  }
  snprintf(w->description, sizeof w->description,
           "seed 0x%016" PRIx64 " %s dp %" PRIu64 " pp %" PRIu64 " tp %" PRIu64
           " groups %" PRIu64 " writing dp %" PRIu64 ", %zu layers %" PRIu64
           " heads page %" PRIu64 ", %" PRIu64 " pages, batches of %" PRIu64
           " copies / %" PRIu64 " bytes",
           seed, reshard_format_name(format), w->topology.dp, w->topology.pp,
           w->topology.tp, w->topology.head_groups, w->dp_rank,
           w->descriptor.layer_count, w->descriptor.total_kv_heads,
           w->descriptor.page_size, w->pages, w->limits.max_batch_operations,
           w->limits.max_batch_bytes);
}

static reshard_store_request store_request(const writer_case *w,
                                           const reshard_binding *binding) {
  return (reshard_store_request){
      .placement = &w->placement,
      .has_dp_rank = true,
      .dp_rank = w->dp_rank,
      .binding = binding,
      .page_count = w->pages,
      .layout = &w->upload.layout,
      .layout_id = w->upload.layout_id,
      .limits = w->limits,
  };
}

static oracle_memory_opts memory_of(oracle_memory_style style) {
  return (oracle_memory_opts){.style = style};
}

/* Every participant of the writing DP rank stores its Parts into `store`
 * from memory in `style`; returns the copies executed. */
static uint64_t store_all(writer_case *w, oracle_memory_style style,
                          oracle_store *store) {
  uint64_t copies = 0;
  size_t writers = 0;
  for (size_t p = 0; p < w->placement.part_count; p++) {
    const reshard_placement_part *part = &w->placement.parts[p];
    if (part->rank.dp != w->dp_rank) {
      continue;
    }
    reshard_binding binding;
    oracle_memory_opts opts = memory_of(style);
    oracle_build_binding(&w->rng, &w->arena, &w->descriptor, part, w->pages,
                         &opts, &binding);
    oracle_memory memory;
    oracle_memory_alloc(&binding, ORACLE_SENTINEL, &memory);
    oracle_memory_fill_values(&w->descriptor, &binding, w->pages, &memory);
    reshard_store_request request = store_request(w, &binding);
    reshard_arena plan_arena;
    reshard_arena_init(&plan_arena, 0);
    reshard_store_plan plan;
    reshard_error err;
    reshard_status status =
        reshard_plan_store(&request, &plan_arena, &plan, &err);
    char msg[ORACLE_MSG_SIZE] = "";
    bool ok = status == RESHARD_OK &&
              oracle_store_execute(&request, &plan, &memory, store, msg,
                                   sizeof msg) &&
              oracle_store_check_parts(store, plan.part_indexes,
                                       plan.part_count, msg, sizeof msg);
    bool empty_ok = plan.part_count > 0 || plan.copy_count == 0;
    copies += plan.copy_count;
    writers += plan.part_count;
    reshard_join_free(plan.built_join);
    reshard_arena_destroy(&plan_arena);
    oracle_memory_free(&memory);
    cr_assert_eq(status, RESHARD_OK, "%s: %s [%s]", part->participant_id,
                 err.message, w->description);
    cr_assert(ok, "%s %s: %s [%s]", part->participant_id,
              oracle_memory_style_name(style), msg, w->description);
    cr_assert(empty_ok, "%s writes no Part but got copies [%s]",
              part->participant_id, w->description);
  }
  /* Every Part of the layout has exactly one writer. */
  cr_assert_eq(writers, w->upload.layout.shard_count, "[%s]", w->description);
  return copies;
}

/* ---- format x memory x random writer topology ---- */

typedef struct matrix_param {
  reshard_format format;
  oracle_memory_style style;
} matrix_param;

#define MATRIX_SIZE (3 * ORACLE_MEM_STYLE_COUNT)

static matrix_param *matrix(void) {
  static matrix_param params[MATRIX_SIZE];
  size_t k = 0;
  for (int f = RESHARD_FORMAT_PLHD; f <= RESHARD_FORMAT_HPLD; f++) {
    for (int s = 0; s < ORACLE_MEM_STYLE_COUNT; s++) {
      params[k++] = (matrix_param){(reshard_format)f, (oracle_memory_style)s};
    }
  }
  return params;
}

ParameterizedTestParameters(store, format_x_memory) {
  return cr_make_param_array(matrix_param, matrix(), MATRIX_SIZE);
}

ParameterizedTest(matrix_param *param, store, format_x_memory) {
  uint64_t stream = 100 + (uint64_t)param->format * 16 + param->style;
  uint64_t copies = 0;
  for (unsigned i = 0; i < 12; i++) {
    writer_case w;
    writer_case_build(&w, oracle_case_seed(oracle_base_seed(), stream, i),
                      param->format, i % 4 == 3, NULL);
    oracle_store store;
    oracle_store_init(&store, &w.upload.layout, w.pages);
    copies += store_all(&w, param->style, &store);
    oracle_store_free(&store);
    reshard_arena_destroy(&w.arena);
  }
  cr_assert_gt(copies, 0);
}

/* ---- fixed topology changes, including replicas and DP ---- */

typedef struct topology_param {
  oracle_topology writer;
  oracle_topology reader;
} topology_param;

static const topology_param topologies[] = {
    {{1, 1, 1, 0}, {1, 1, 2, 0}},  {{1, 1, 8, 0}, {1, 2, 4, 0}},
    {{1, 1, 4, 0}, {1, 1, 16, 0}}, {{1, 2, 8, 0}, {1, 4, 8, 0}},
    {{2, 2, 2, 0}, {1, 1, 1, 0}},  {{1, 1, 8, 1}, {2, 2, 4, 1}},
    {{2, 3, 6, 2}, {1, 1, 3, 0}},
};
#define TOPOLOGY_COUNT (sizeof topologies / sizeof topologies[0])

ParameterizedTestParameters(store, write_then_read) {
  return cr_make_param_array(matrix_param, matrix(), MATRIX_SIZE);
}

/* Writers store with reshard_plan_store, then every reader participant of
 * another topology loads with reshard_plan_load from the stored bytes, and
 * its memory must hold the writers' values. */
ParameterizedTest(matrix_param *param, store, write_then_read) {
  uint64_t stream = 300 + (uint64_t)param->format * 16 + param->style;
  for (unsigned i = 0; i < TOPOLOGY_COUNT * 2; i++) {
    const topology_param *t = &topologies[i % TOPOLOGY_COUNT];
    writer_case w;
    writer_case_build(&w, oracle_case_seed(oracle_base_seed(), stream, i),
                      param->format, i % 5 == 4,
                      i < TOPOLOGY_COUNT ? &t->writer : NULL);
    oracle_store store;
    oracle_store_init(&store, &w.upload.layout, w.pages);
    store_all(&w, param->style, &store);

    oracle_topology reader_topology = t->reader;
    if (i >= TOPOLOGY_COUNT) {
      oracle_random_topology(&w.rng, &w.descriptor, &reader_topology);
    }
    reshard_placement reader;
    oracle_build_placement(&w.arena, &w.rng, &w.descriptor, &reader_topology,
                           "r", &reader);
    reshard_error err;
    cr_assert_eq(reshard_placement_normalize(&reader, &w.arena, &err),
                 RESHARD_OK, "%s", err.message);
    size_t readers = 0;
    for (size_t p = 0; p < reader.part_count; p++) {
      const reshard_placement_part *part = &reader.parts[p];
      if (part->layer_count == 0) {
        continue;
      }
      reshard_binding binding;
      oracle_memory_opts opts = memory_of(
          (oracle_memory_style)((param->style + p) % ORACLE_MEM_STYLE_COUNT));
      oracle_build_binding(&w.rng, &w.arena, &w.descriptor, part, w.pages,
                           &opts, &binding);
      size_t *starts = RESHARD_ARENA_NEW(&w.arena, size_t, w.pages + 1);
      size_t *sources = RESHARD_ARENA_NEW(&w.arena, size_t, w.pages);
      for (uint64_t pg = 0; pg <= w.pages; pg++) {
        starts[pg] = pg;
      }
      reshard_plan_source source = {&w.upload.layout, w.upload.layout_id, NULL};
      reshard_load_request load = {
          .placement = &reader,
          .has_dp_rank = true,
          .dp_rank = part->rank.dp,
          .binding = &binding,
          .page_count = w.pages,
          .sources = &source,
          .source_count = 1,
          .page_source_start = starts,
          .page_sources = sources,
          .limits = reshard_limits_default(),
      };
      reshard_arena plan_arena;
      reshard_arena_init(&plan_arena, 0);
      reshard_load_plan plan;
      reshard_status status =
          reshard_plan_load(&load, &plan_arena, &plan, &err);
      oracle_memory memory;
      oracle_memory_alloc(&binding, ORACLE_SENTINEL, &memory);
      char msg[ORACLE_MSG_SIZE] = "";
      bool ok = status == RESHARD_OK &&
                oracle_store_load(&store, &plan, &binding, &memory, msg,
                                  sizeof msg) &&
                oracle_memory_check_values(&w.descriptor, &binding, w.pages,
                                           &memory, msg, sizeof msg);
      if (status == RESHARD_OK) {
        reshard_load_plan_free_joins(&plan, 1);
      }
      reshard_arena_destroy(&plan_arena);
      oracle_memory_free(&memory);
      cr_assert_eq(status, RESHARD_OK, "%s [%s]", err.message, w.description);
      cr_assert(ok, "reader %s: %s [%s]", part->participant_id, msg,
                w.description);
      readers++;
    }
    cr_assert_gt(readers, 0);
    oracle_store_free(&store);
    reshard_arena_destroy(&w.arena);
  }
}

/* ---- coalescing is minimal in the store order ---- */

/* The store order is the load order: (page, part, part_offset, region,
 * region_offset). No two copies of one page write the same Part byte, so
 * the Part position alone orders them; the reference is one copy per
 * (token, head) from the SPEC formulas, sorted and merged maximally. */
Test(store, coalescing_is_minimal) {
  uint64_t total = 0;
  for (unsigned i = 0; i < 60; i++) {
    reshard_format format = (reshard_format)(RESHARD_FORMAT_PLHD + i % 3);
    writer_case w;
    writer_case_build(&w, oracle_case_seed(oracle_base_seed(), 500, i), format,
                      i % 7 == 6, NULL);
    for (size_t p = 0; p < w.placement.part_count; p++) {
      const reshard_placement_part *part = &w.placement.parts[p];
      if (part->rank.dp != w.dp_rank || part->replica_ordinal != 0 ||
          part->layer_count == 0) {
        continue;
      }
      reshard_binding binding;
      oracle_memory_opts opts =
          memory_of((oracle_memory_style)(i % ORACLE_MEM_STYLE_COUNT));
      oracle_build_binding(&w.rng, &w.arena, &w.descriptor, part, w.pages,
                           &opts, &binding);
      reshard_store_request request = store_request(&w, &binding);
      request.limits = reshard_limits_default(); /* nothing split */
      reshard_store_plan plan;
      reshard_error err;
      cr_assert_eq(reshard_plan_store(&request, &w.arena, &plan, &err),
                   RESHARD_OK, "%s [%s]", err.message, w.description);
      reshard_join_free(plan.built_join);
      oracle_copy_list ref;
      memset(&ref, 0, sizeof ref);
      uint64_t before = 0;
      for (uint64_t page = 0; page < w.pages; page++) {
        uint64_t page_before = 0;
        oracle_reference_page(&w.upload.layout, part, &binding, page, &ref,
                              &page_before);
        before += page_before;
      }
      oracle_copy_list_sort(&ref);
      oracle_copy_list_merge(&ref);
      /* The default 64 MiB batch budget splits nothing here. */
      bool same = plan.copy_count == ref.count &&
                  plan.copies_after_coalescing == ref.count;
      for (size_t k = 0; same && k < ref.count; k++) {
        same = memcmp(&plan.copies[k], &ref.items[k], sizeof ref.items[k]) == 0;
      }
      size_t ref_count = ref.count;
      oracle_copy_list_free(&ref);
      cr_assert(same, "%zu copies, minimal is %zu, or they differ [%s]",
                plan.copy_count, ref_count, w.description);
      cr_assert_eq(plan.copies_before_coalescing, before, "[%s]",
                   w.description);
      total += plan.copy_count;
    }
    reshard_arena_destroy(&w.arena);
  }
  cr_assert_gt(total, 0);
}

/* ---- rejections and edge cases on one small writer ----
 * Descriptor: layers 0,1, 2 heads, dims 4/4, itemsize 2, page 4. Writer
 * TP2: "w-0" heads [0,1), "w-1" heads [1,2), and "w-2", a replica of
 * w-1's heads ([1,2), ordinal 1). Memory of w-0: one region, one range
 * per (layer, component) over 2 pages, NHD. */

static struct {
  reshard_arena arena;
  reshard_descriptor descriptor;
  reshard_placement placement;
  reshard_upload_plan upload;
  reshard_region regions[2];
  reshard_binding_range ranges[8];
  reshard_binding binding;
  reshard_store_request request;
  reshard_store_plan plan;
  reshard_error err;
} fx;

static uint64_t all_layers[] = {0, 1};

static void setup(void) {
  memset(&fx, 0, sizeof fx);
  reshard_arena_init(&fx.arena, 0);
  oracle_fixed_descriptor(&fx.arena, 2, "bf16", 2, 4, 2, 4, 4, &fx.descriptor);
  reshard_placement_part *parts =
      RESHARD_ARENA_NEW(&fx.arena, reshard_placement_part, 3);
  parts[0] =
      (reshard_placement_part){"w-0", {0, 0, 0}, all_layers, 2, 0, 1, 0, 1};
  parts[1] =
      (reshard_placement_part){"w-1", {0, 0, 1}, all_layers, 2, 1, 1, 0, 2};
  parts[2] =
      (reshard_placement_part){"w-2", {0, 0, 2}, all_layers, 2, 1, 1, 1, 2};
  fx.placement = (reshard_placement){
      .resource_id = "res",
      .revision = "rev",
      .placement_set_id = "",
      .dp_size = 1,
      .pp_size = 1,
      .tp_size = 3,
      .descriptor = fx.descriptor,
      .parts = parts,
      .part_count = 3,
  };
  cr_assert_eq(reshard_placement_normalize(&fx.placement, &fx.arena, &fx.err),
               RESHARD_OK, "%s", fx.err.message);
  reshard_limits limits = reshard_limits_default();
  cr_assert_eq(reshard_plan_upload(&fx.placement, RESHARD_FORMAT_LPHD, false, 0,
                                   &limits, &fx.arena, &fx.upload, &fx.err),
               RESHARD_OK, "%s", fx.err.message);
  /* 2 layers x 2 components x 8 tokens x 8 bytes = 256 bytes */
  fx.regions[0] = (reshard_region){"mem", 4096, 256};
  fx.regions[1] = (reshard_region){"aux", 8192, 256};
  size_t n = 0;
  for (uint64_t l = 0; l < 2; l++) {
    for (int c = RESHARD_COMPONENT_KEY; c <= RESHARD_COMPONENT_VALUE; c++) {
      fx.ranges[n] = (reshard_binding_range){
          .global_layer_id = l,
          .component = (reshard_component)c,
          .token_start = 0,
          .token_count = 8,
          .head_start = 0,
          .head_count = 1,
          .region_id = "mem",
          .offset_bytes = n * 64,
          .token_stride_bytes = 8,
          .head_stride_bytes = 8,
      };
      n++;
    }
  }
  fx.binding = (reshard_binding){
      .participant_id = "w-0",
      .endpoint = "",
      .regions = fx.regions,
      .region_count = 2,
      .ranges = fx.ranges,
      .range_count = n,
  };
  fx.request = (reshard_store_request){
      .placement = &fx.placement,
      .binding = &fx.binding,
      .page_count = 2,
      .layout = &fx.upload.layout,
      .layout_id = fx.upload.layout_id,
      .limits = reshard_limits_default(),
  };
}

static void teardown(void) {
  reshard_join_free(fx.plan.built_join);
  reshard_arena_destroy(&fx.arena);
}

TestSuite(store_request, .init = setup, .fini = teardown);

static reshard_status plan_fx(void) {
  return reshard_plan_store(&fx.request, &fx.arena, &fx.plan, &fx.err);
}

#define ASSERT_STORE_FAILS(code, ...)                                          \
  ASSERT_FAILS(plan_fx(), fx.err, code, __VA_ARGS__)

Test(store_request, plans_and_executes_the_fixture) {
  cr_assert_eq(plan_fx(), RESHARD_OK, "%s", fx.err.message);
  cr_assert_eq(fx.plan.part_count, 1);
  cr_assert_eq(fx.plan.part_indexes[0], 0); /* heads [0,1) sort first */
  /* LPHD with one head: each (layer, component) block of a page is one
   * run in both memory and Part: 2 pages x 4 blocks, merged across pages
   * never (pages are separate objects). */
  cr_assert_eq(fx.plan.copies_after_coalescing, 8);
  oracle_memory memory;
  oracle_memory_alloc(&fx.binding, ORACLE_SENTINEL, &memory);
  oracle_memory_fill_values(&fx.descriptor, &fx.binding, 2, &memory);
  oracle_store store;
  oracle_store_init(&store, &fx.upload.layout, 2);
  char msg[ORACLE_MSG_SIZE] = "";
  bool ok = oracle_store_execute(&fx.request, &fx.plan, &memory, &store, msg,
                                 sizeof msg) &&
            oracle_store_check_parts(&store, fx.plan.part_indexes, 1, msg,
                                     sizeof msg);
  oracle_store_free(&store);
  oracle_memory_free(&memory);
  cr_assert(ok, "%s", msg);
}

Test(store_request, a_hole_names_the_first_unbound_value) {
  fx.ranges[2].token_count = 5; /* layer 1 K: tokens 5..7 unbound */
  ASSERT_STORE_FAILS(RESHARD_INVALID_ARGUMENT,
                     "binding: layer 1 component KEY: token 5 head 0 is not "
                     "bound");
}

Test(store_request, a_hole_in_the_middle_is_named) {
  fx.ranges[1].token_count = 3; /* layer 0 V: tokens [0,3) */
  fx.ranges[4] = fx.ranges[1];  /* and [6, 8) elsewhere: 3..5 unbound */
  fx.ranges[4].token_start = 6;
  fx.ranges[4].token_count = 2;
  fx.ranges[4].region_id = "aux";
  fx.ranges[4].offset_bytes = 0;
  fx.binding.range_count = 5;
  ASSERT_STORE_FAILS(RESHARD_INVALID_ARGUMENT,
                     "binding: layer 0 component VALUE: token 3 head 0 is not "
                     "bound");
}

Test(store_request, overlapping_memory_is_rejected) {
  fx.ranges[1].offset_bytes = 4; /* layer 0 V overlaps layer 0 K */
  ASSERT_STORE_FAILS(RESHARD_INVALID_ARGUMENT, "share");
}

Test(store_request, a_layer_the_writer_does_not_own_is_rejected) {
  fx.ranges[4] = fx.ranges[0];
  fx.ranges[4].global_layer_id = 7;
  fx.ranges[4].region_id = "aux";
  fx.ranges[4].offset_bytes = 0;
  fx.binding.range_count = 5;
  ASSERT_STORE_FAILS(RESHARD_INVALID_ARGUMENT, "binding.ranges[4]", "7");
}

Test(store_request, heads_the_writer_does_not_own_are_rejected) {
  fx.ranges[0].head_start = 1;
  ASSERT_STORE_FAILS(RESHARD_INVALID_ARGUMENT, "binding.ranges[0]");
}

Test(store_request, a_replica_writes_nothing) {
  fx.binding.participant_id = "w-2"; /* replica 1 of heads [1,2) */
  for (size_t i = 0; i < 4; i++) {
    fx.ranges[i].head_start = 1;
  }
  cr_assert_eq(plan_fx(), RESHARD_OK, "%s", fx.err.message);
  cr_assert_eq(fx.plan.part_count, 0);
  cr_assert_eq(fx.plan.copy_count, 0);
  cr_assert_eq(fx.plan.batch_count, 0);
  cr_assert_eq(fx.plan.bytes, 0);
  cr_assert_str_eq(fx.plan.participant->participant_id, "w-2");
}

Test(store_request, a_replica_binding_is_still_validated) {
  fx.binding.participant_id = "w-2";
  /* heads [0,1) are not w-2's */
  ASSERT_STORE_FAILS(RESHARD_INVALID_ARGUMENT, "binding.ranges[0]");
}

Test(store_request, the_replica_0_of_a_set_writes) {
  fx.binding.participant_id = "w-1";
  for (size_t i = 0; i < 4; i++) {
    fx.ranges[i].head_start = 1;
  }
  cr_assert_eq(plan_fx(), RESHARD_OK, "%s", fx.err.message);
  cr_assert_eq(fx.plan.part_count, 1);
  cr_assert_eq(fx.plan.part_indexes[0], 1);
  cr_assert_gt(fx.plan.copy_count, 0);
  for (size_t i = 0; i < fx.plan.copy_count; i++) {
    cr_assert_eq(fx.plan.copies[i].part_index, 1);
  }
}

Test(store_request, an_unknown_participant_is_rejected) {
  fx.binding.participant_id = "nobody";
  ASSERT_STORE_FAILS(RESHARD_INVALID_ARGUMENT, "binding.participant_id",
                     "\"nobody\"", "not a participant");
}

Test(store_request, an_absent_dp_rank_is_rejected) {
  fx.request.has_dp_rank = true;
  fx.request.dp_rank = 3;
  ASSERT_STORE_FAILS(RESHARD_INVALID_ARGUMENT, "dp_rank:", "3");
}

Test(store_request, zero_pages_are_rejected) {
  fx.request.page_count = 0;
  ASSERT_STORE_FAILS(RESHARD_INVALID_ARGUMENT, "page_count:", "at least 1");
}

Test(store_request, pages_beyond_the_limit_are_refused) {
  fx.request.limits.max_page_keys = 1;
  ASSERT_STORE_FAILS(RESHARD_RESOURCE_EXHAUSTED,
                     "page_count:", "max_page_keys 1");
}

Test(store_request, max_operations_is_checked_before_lowering) {
  fx.request.limits.max_operations = 3;
  ASSERT_STORE_FAILS(RESHARD_RESOURCE_EXHAUSTED, "max_operations 3");
}

Test(store_request, another_descriptor_is_a_failed_precondition) {
  reshard_layout other = fx.upload.layout;
  other.descriptor.dtype = "fp8";
  fx.request.layout = &other;
  ASSERT_STORE_FAILS(RESHARD_FAILED_PRECONDITION, "manifest:", "dtype");
}

Test(store_request, a_layout_of_another_placement_is_rejected) {
  /* One shard holding both heads: nobody of this TP2 placement wrote it. */
  reshard_shard whole = {all_layers, 2, 0, 2, "0"};
  reshard_layout other = fx.upload.layout;
  other.shards = &whole;
  other.shard_count = 1;
  fx.request.layout = &other;
  ASSERT_STORE_FAILS(RESHARD_INVALID_ARGUMENT,
                     "manifest:", "no Part holding exactly", "\"w-0\"");
}

Test(store_request, batches_follow_the_limits) {
  fx.request.limits.max_batch_operations = 3;
  fx.request.limits.max_batch_bytes = 40;
  cr_assert_eq(plan_fx(), RESHARD_OK, "%s", fx.err.message);
  uint64_t bytes = 0;
  for (size_t b = 0; b < fx.plan.batch_count; b++) {
    cr_assert_leq(fx.plan.batches[b].count, 3);
    cr_assert_leq(fx.plan.batches[b].bytes, 40);
    bytes += fx.plan.batches[b].bytes;
  }
  cr_assert_eq(bytes, 2 * 256 / 2); /* w-0 holds half of 2 pages x 256 B */
}

Test(store_request, a_cached_join_gives_the_same_plan) {
  cr_assert_eq(plan_fx(), RESHARD_OK, "%s", fx.err.message);
  reshard_store_plan first = fx.plan;
  cr_assert_not_null(first.built_join);
  fx.request.join = first.built_join;
  reshard_store_plan second;
  cr_assert_eq(reshard_plan_store(&fx.request, &fx.arena, &second, &fx.err),
               RESHARD_OK);
  cr_assert_null(second.built_join);
  cr_assert_eq(second.copy_count, first.copy_count);
  cr_assert_eq(memcmp(second.copies, first.copies,
                      first.copy_count * sizeof *first.copies),
               0);
}

Test(store_request, runs_are_the_fold_of_the_explicit_plan) {
  /* Small batches so that runs must stop at batch ends. */
  fx.request.limits.max_batch_operations = 3;
  fx.request.limits.max_batch_bytes = 40;
  cr_assert_eq(plan_fx(), RESHARD_OK, "%s", fx.err.message);
  reshard_store_plan explicit_plan = fx.plan;
  cr_assert_eq(explicit_plan.runs.batch_first, NULL);
  reshard_runs expected;
  cr_assert_eq(reshard_runs_fold(explicit_plan.copies, explicit_plan.batches,
                                 explicit_plan.batch_count, &fx.arena,
                                 &expected, &fx.err),
               RESHARD_OK, "%s", fx.err.message);
  /* The teardown frees the second plan's join only. */
  reshard_join_free(explicit_plan.built_join);
  explicit_plan.built_join = NULL;
  fx.request.runs = true;
  cr_assert_eq(plan_fx(), RESHARD_OK, "%s", fx.err.message);
  const reshard_runs *runs = &fx.plan.runs;
  /* The explicit columns are unchanged by asking for runs. */
  cr_assert_eq(fx.plan.copy_count, explicit_plan.copy_count);
  cr_assert_eq(memcmp(fx.plan.copies, explicit_plan.copies,
                      explicit_plan.copy_count * sizeof *explicit_plan.copies),
               0);
  cr_assert_eq(runs->batch_count, explicit_plan.batch_count);
  cr_assert_eq(runs->run_count, expected.run_count);
  cr_assert_eq(memcmp(runs->batch_first, expected.batch_first,
                      (runs->batch_count + 1) * sizeof *runs->batch_first),
               0);
  cr_assert_eq(
      memcmp(runs->runs, expected.runs, runs->run_count * sizeof *runs->runs),
      0);
}

Test(store_request, columns_land_in_the_given_arena) {
  /* As the daemon asks without runs: the copies left out, the varint
   * columns written into an arena of the caller's that outlives the
   * plan's, with the same bytes as in the plan's own. */
  fx.request.varint_columns = true;
  fx.request.omit_copies = true;
  cr_assert_eq(plan_fx(), RESHARD_OK, "%s", fx.err.message);
  reshard_store_plan own = fx.plan;
  reshard_join_free(own.built_join);
  reshard_arena columns;
  reshard_arena_init(&columns, 0);
  fx.request.column_arena = &columns;
  cr_assert_eq(plan_fx(), RESHARD_OK, "%s", fx.err.message);
  cr_assert_null(fx.plan.copies);
  cr_assert_eq(fx.plan.columns.batch_count, own.columns.batch_count);
  size_t total = 0;
  for (size_t i = 0; i < own.columns.batch_count * RESHARD_COPY_COLUMNS; i++) {
    size_t length = own.columns.column_bytes[i];
    cr_assert_eq(fx.plan.columns.column_bytes[i], length);
    cr_assert_neq(fx.plan.columns.columns[i], own.columns.columns[i]);
    cr_assert_eq(
        memcmp(fx.plan.columns.columns[i], own.columns.columns[i], length), 0,
        "batch %zu's column %zu differs", i / RESHARD_COPY_COLUMNS,
        i % RESHARD_COPY_COLUMNS);
    total += length;
  }
  cr_assert_gt(total, 0);
  cr_assert_geq(columns.total_bytes, total,
                "the columns' bytes are not in the given arena");
  reshard_arena_destroy(&columns);
}

static bool stop_now(void *context) {
  (void)context;
  return true;
}

Test(store_request, should_stop_abandons_the_plan) {
  fx.request.should_stop = stop_now;
  ASSERT_STORE_FAILS(RESHARD_DEADLINE_EXCEEDED, "deadline");
  cr_assert_null(fx.plan.built_join);
}
