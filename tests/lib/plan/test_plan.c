/* Request-level rules of reshard_plan_load (SPEC §2.2, §2.3): page list,
 * participant and DP rank checks, the copies batching adds against
 * max_operations, cancellation, reshard_limits_clamp, stats, and the
 * ownership of built joins; a few tiny plans are checked by hand against
 * offsets computed in plan_fixture.h. Source selection (lib/plan/select.c:
 * the hit prefix, descriptor mismatches, preferences, cost, the limits of
 * pass 1) is tested in test_select.c; the byte-exact oracle lives in
 * test_oracle.c. */
#include <criterion/criterion.h>
#include <criterion/parameterized.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include "reshard/arena.h"
#include "reshard/plan.h"

#include "assert_error.h"
#include "plan_fixture.h"

TestSuite(plan, .init = setup, .fini = teardown);
TestSuite(limits);

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

/* ---- limits after batching, and cancellation ------------------------- */

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
