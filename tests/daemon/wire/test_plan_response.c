/* Tests daemon/wire/plan_response.c: the hand-written PlanLoadResponse
 * encoder must produce exactly the bytes protobuf-c packs for the message
 * reshard_wire_plan_to_pb builds, on every SPEC §6 scenario with and
 * without runs (and without runs both from the copies and from the varint
 * columns the planner encodes while batching, whole and as pieces sent from
 * where the columns lie), with many small batches and with the edge cases
 * proto3 encodes specially (zero values and empty strings left out,
 * repeated strings always written); the PlanStoreResponse encoder the
 * same way. */
#include <criterion/criterion.h>
#include <criterion/parameterized.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "response_pieces.h"
#include "scenario.h"
#include "wire/plan_response.h"
#include "wire/wire.h"

typedef struct encoder_case {
  size_t scenario;
  uint64_t pages;
  uint64_t max_batch_operations;
  uint64_t max_batch_bytes;
  bool runs;
} encoder_case;

static void assert_same_bytes(const reshard_load_plan *plan,
                              const reshard_wire_plan_names *names,
                              reshard_arena *arena) {
  Reshard__V1__PlanLoadResponse *message =
      reshard_wire_plan_to_pb(plan, names, arena);
  cr_assert_not_null(message);
  size_t want_size = protobuf_c_message_get_packed_size(&message->base);
  uint8_t *want = malloc(want_size + 1);
  cr_assert_eq(protobuf_c_message_pack(&message->base, want), want_size);

  reshard_plan_response response;
  cr_assert_eq(reshard_plan_response_measure(plan, names, arena, &response),
               RESHARD_OK);
  size_t size = response.size;
  cr_assert_eq(size, want_size, "size %zu, protobuf-c packs %zu", size,
               want_size);
  uint8_t *got = malloc(size + 1);
  cr_assert_eq(reshard_plan_response_write(&response, got), size);
  for (size_t i = 0; i < size; i++) {
    cr_assert_eq(got[i], want[i], "byte %zu of %zu differs", i, size);
  }
  if (response.batches.columns != NULL) {
    assert_same_pieces_at_every_minimum(&response.batches, &response,
                                        reshard_plan_response_write_pieces,
                                        want, want_size);
  }
  free(got);
  free(want);
}

/* Page keys, manifest keys and names for a plan built from a scenario. */
static void names_for(const scenario *s, const reshard_load_plan *plan,
                      const char *placement_id, reshard_arena *arena,
                      reshard_wire_plan_names *out) {
  char **page_keys = RESHARD_ARENA_NEW(arena, char *, plan->hit_pages + 1);
  for (uint64_t p = 0; p < plan->hit_pages; p++) {
    char key[32];
    snprintf(key, sizeof key, "page-%llu", (unsigned long long)p);
    page_keys[p] = reshard_arena_strdup(arena, key);
  }
  static const char *const manifest_keys[] = {"kv/domain/manifests/m0"};
  *out = (reshard_wire_plan_names){
      .page_keys = (const char *const *)page_keys,
      .manifest_keys = manifest_keys,
      .sources = &s->source,
      .binding = &s->binding,
      .placement_id = placement_id,
  };
}

static void run_case(const encoder_case *c, const char *placement_id,
                     bool varint_columns) {
  reshard_arena arena;
  reshard_arena_init(&arena, 0);
  reshard_error err;
  scenario s;
  cr_assert_eq(scenario_build(&scenario_specs[c->scenario], c->pages, 0, 7,
                              &arena, &s, &err),
               RESHARD_OK, "%s", err.message);
  s.request.limits.max_batch_operations = c->max_batch_operations;
  s.request.limits.max_batch_bytes = c->max_batch_bytes;
  s.request.runs = c->runs;
  s.request.varint_columns = varint_columns;
  reshard_load_plan plan;
  cr_assert_eq(reshard_plan_load(&s.request, &arena, &plan, &err), RESHARD_OK,
               "%s", err.message);
  cr_assert_gt(plan.copy_count, 0);
  cr_assert_eq(plan.columns.columns != NULL, varint_columns);
  if (c->runs && c->max_batch_operations >= 100) {
    /* With room in the batches runs fold something on every scenario, so
     * the run columns differ from the copy columns. */
    cr_assert_lt(plan.runs.run_count, plan.copy_count, "scenario %zu: %zu runs",
                 c->scenario, plan.runs.run_count);
  }
  reshard_wire_plan_names names;
  names_for(&s, &plan, placement_id, &arena, &names);
  assert_same_bytes(&plan, &names, &arena);
  reshard_load_plan_free_joins(&plan, 1);
  reshard_arena_destroy(&arena);
}

ParameterizedTestParameters(plan_response, matches_protobuf_c) {
  static encoder_case cases[] = {
      {0, 2, 4096, 64ull << 20, false},
      {1, 2, 4096, 64ull << 20, false},
      {2, 2, 4096, 64ull << 20, false},
      {3, 2, 4096, 64ull << 20, false},
      {4, 2, 4096, 64ull << 20, false},
      {0, 3, 3, 1000, false},
      {2, 2, 7, 300, false},
      {4, 1, 1, 64ull << 20, false},
      {3, 1, 5, 4096, false},
      {0, 2, 4096, 64ull << 20, true},
      {1, 2, 4096, 64ull << 20, true},
      {2, 2, 4096, 64ull << 20, true},
      {3, 2, 4096, 64ull << 20, true},
      {4, 2, 4096, 64ull << 20, true},
      {0, 3, 7, 5000, true},
      {2, 2, 7, 300, true},
      {1, 1, 100, 64ull << 20, true},
  };
  return cr_make_param_array(encoder_case, cases,
                             sizeof cases / sizeof cases[0]);
}

ParameterizedTest(encoder_case *c, plan_response, matches_protobuf_c) {
  run_case(c, "sha256:0123456789abcdef", false);
  /* The daemon asks for varint columns when runs are not requested; with
   * runs they are encoded but the response must not use them. */
  run_case(c, "sha256:0123456789abcdef", true);
}

Test(plan_response, empty_placement_id_is_left_out) {
  encoder_case c = {0, 1, 4096, 64ull << 20, false};
  run_case(&c, "", false);
  run_case(&c, NULL, true);
  c.runs = true;
  run_case(&c, "", false);
}

Test(plan_response, a_plan_with_no_hit_pages) {
  reshard_load_plan plan;
  memset(&plan, 0, sizeof plan);
  reshard_region regions[2] = {{"", 1, 1}, {"r1", 1, 1}};
  reshard_binding binding = {.regions = regions, .region_count = 2};
  reshard_wire_plan_names names = {.binding = &binding, .placement_id = "p"};
  reshard_arena arena;
  reshard_arena_init(&arena, 0);
  assert_same_bytes(&plan, &names, &arena);
  /* Runs requested, nothing to fold: the stats say 0 runs. */
  size_t batch_first = 0;
  plan.runs.batch_first = &batch_first;
  assert_same_bytes(&plan, &names, &arena);
  reshard_arena_destroy(&arena);
}

/* Pages of several sources, in stretches and back again, with empty keys,
 * manifest keys and layout ids (proto3 leaves those out): each page's
 * source fields are written for a stretch's first page and copied for the
 * others. */
Test(plan_response, pages_of_several_sources_and_empty_names) {
  reshard_load_plan plan;
  memset(&plan, 0, sizeof plan);
  size_t page_source[] = {0, 0, 1, 1, 0, 2, 2, 1};
  plan.hit_pages = sizeof page_source / sizeof page_source[0];
  plan.page_source = page_source;
  static const char *const page_keys[] = {
      "page-0",
      "",
      "page-2",
      "a page key longer than one hundred and "
      "twenty-seven bytes, so that its length takes two "
      "bytes of varint: page-3 ....................",
      "page-4",
      "page-5",
      NULL,
      "page-7"};
  static const char *const manifest_keys[] = {"kv/m0", "", "kv/manifests/m2"};
  reshard_plan_source sources[] = {
      {.layout_id = "layout-0"}, {.layout_id = "layout-1"}, {.layout_id = ""}};
  reshard_region regions[1] = {{"r0", 1, 1}};
  reshard_binding binding = {.regions = regions, .region_count = 1};
  reshard_wire_plan_names names = {
      .page_keys = page_keys,
      .manifest_keys = manifest_keys,
      .sources = sources,
      .binding = &binding,
      .placement_id = "p",
  };
  reshard_arena arena;
  reshard_arena_init(&arena, 0);
  assert_same_bytes(&plan, &names, &arena);
  reshard_arena_destroy(&arena);
}

/* ---- PlanStoreResponse ---- */

typedef struct store_case {
  size_t scenario;
  uint64_t pages;
  uint64_t max_batch_operations;
  bool runs;
} store_case;

ParameterizedTestParameters(plan_response, store_matches_protobuf_c) {
  static store_case cases[] = {
      {0, 2, 4096, false}, {1, 2, 4096, false}, {2, 2, 4096, false},
      {3, 2, 4096, false}, {4, 2, 4096, false}, {0, 3, 7, false},
      {0, 2, 4096, true},  {1, 2, 4096, true},  {2, 2, 4096, true},
      {3, 2, 4096, true},  {4, 2, 4096, true},  {2, 2, 7, true},
  };
  return cr_make_param_array(store_case, cases, sizeof cases / sizeof cases[0]);
}

static void run_store_case(const store_case *c, bool varint_columns) {
  reshard_arena arena;
  reshard_arena_init(&arena, 0);
  reshard_error err;
  store_scenario s;
  cr_assert_eq(scenario_build_store(&scenario_specs[c->scenario], c->pages, 7,
                                    &arena, &s, &err),
               RESHARD_OK, "%s", err.message);
  s.request.limits.max_batch_operations = c->max_batch_operations;
  s.request.runs = c->runs;
  s.request.varint_columns = varint_columns;
  reshard_store_plan plan;
  cr_assert_eq(reshard_plan_store(&s.request, &arena, &plan, &err), RESHARD_OK,
               "%s", err.message);
  cr_assert_gt(plan.copy_count, 0);
  cr_assert_gt(plan.part_count, 0);
  cr_assert_eq(plan.columns.columns != NULL, varint_columns);
  const char *layout_id = s.request.layout_id;

  Reshard__V1__PlanStoreResponse *message =
      reshard_wire_store_plan_to_pb(&plan, &s.binding, layout_id, &arena);
  cr_assert_not_null(message);
  size_t want_size = protobuf_c_message_get_packed_size(&message->base);
  uint8_t *want = malloc(want_size + 1);
  cr_assert_eq(protobuf_c_message_pack(&message->base, want), want_size);

  reshard_store_response response;
  cr_assert_eq(reshard_store_response_measure(&plan, &s.binding, layout_id,
                                              &arena, &response),
               RESHARD_OK);
  cr_assert_eq(response.size, want_size, "size %zu, protobuf-c packs %zu",
               response.size, want_size);
  uint8_t *got = malloc(response.size + 1);
  cr_assert_eq(reshard_store_response_write(&response, got), response.size);
  for (size_t i = 0; i < response.size; i++) {
    cr_assert_eq(got[i], want[i], "byte %zu of %zu differs", i, response.size);
  }
  cr_assert_eq(response.batches.columns != NULL, varint_columns && !c->runs);
  if (response.batches.columns != NULL) {
    assert_same_pieces_at_every_minimum(&response.batches, &response,
                                        reshard_store_response_write_pieces,
                                        want, want_size);
  }
  free(got);
  free(want);
  reshard_join_free(plan.built_join);
  reshard_arena_destroy(&arena);
}

ParameterizedTest(store_case *c, plan_response, store_matches_protobuf_c) {
  /* From the copies, and from the columns encoded while batching (what the
   * daemon asks for without runs; with runs the response must not use
   * them). */
  run_store_case(c, false);
  run_store_case(c, true);
}

/* proto3's empty cases: no Parts, no regions, no layout id. */
Test(plan_response, store_empty_fields_are_left_out) {
  reshard_arena arena;
  reshard_arena_init(&arena, 0);
  reshard_store_plan plan = {0};
  reshard_binding binding = {0};
  Reshard__V1__PlanStoreResponse *message =
      reshard_wire_store_plan_to_pb(&plan, &binding, "", &arena);
  cr_assert_not_null(message);
  size_t want_size = protobuf_c_message_get_packed_size(&message->base);
  uint8_t want[64], got[64];
  cr_assert_leq(want_size, sizeof want);
  protobuf_c_message_pack(&message->base, want);
  reshard_store_response response;
  cr_assert_eq(
      reshard_store_response_measure(&plan, &binding, "", &arena, &response),
      RESHARD_OK);
  cr_assert_eq(response.size, want_size);
  cr_assert_eq(reshard_store_response_write(&response, got), want_size);
  cr_assert_arr_eq(got, want, want_size);
  reshard_arena_destroy(&arena);
}
