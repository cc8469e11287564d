/* Source selection, pass 1 of reshard_plan_load (lib/plan/select.c, SPEC
 * §2.2 step 1): the hit prefix and what ends it (an unbound page, a page
 * bound only to layouts of another descriptor, FAILED_PRECONDITION on the
 * first page naming the field), the choice among a page's layouts (the
 * first available preference, else the fewest operations, ties to the
 * smallest layout id, page by page), the limits pass 1 holds the prefix to
 * before any copy exists (max_operations before coalescing, max_bytes),
 * and the joins built to compare candidates. The tiny requests and their
 * hand-computed copies are plan_fixture.h's; the oracle's selection checks
 * over random cases live in test_oracle.c. */
#include <criterion/criterion.h>
#include <criterion/parameterized.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include "reshard/arena.h"
#include "reshard/plan.h"

#include "assert_error.h"
#include "plan_fixture.h"

TestSuite(select, .init = setup, .fini = teardown);

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

ParameterizedTestParameters(select, first_page_with_other_descriptor_fails) {
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

ParameterizedTest(struct mismatch_case *c, select,
                  first_page_with_other_descriptor_fails) {
  add_source(mismatched_layout(c->field), "sha256:c");
  ADD_PAGE(0);
  ADD_PAGE(0);
  ASSERT_FAILS(plan(), fx.err, RESHARD_FAILED_PRECONDITION, "page_keys[0]",
               c->field, "sha256:c");
}

Test(select, first_page_with_two_other_descriptors_fails) {
  add_source(mismatched_layout("page_size"), "sha256:c");
  add_source(mismatched_layout("dtype"), "sha256:d");
  ADD_PAGE(0, 1);
  ASSERT_FAILS(plan(), fx.err, RESHARD_FAILED_PRECONDITION, "page_keys[0]",
               "page_size");
}

Test(select, a_later_page_with_other_descriptor_ends_the_hit_prefix) {
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

Test(select, an_unbound_page_ends_the_hit_prefix) {
  size_t a = add_source(layout_a(), "sha256:a");
  ADD_PAGE(a);
  ADD_MISS();
  ADD_PAGE(a);
  plan_ok();
  cr_assert_eq(fx.plan.hit_pages, 1);
  cr_assert_eq(fx.plan.copy_count, 4);
  check_stats();
}

Test(select, an_unbound_first_page_is_an_empty_plan) {
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

Test(select, mismatched_candidates_beside_a_match_are_ignored) {
  size_t c = add_source(mismatched_layout("dtype"), "sha256:0");
  size_t a = add_source(layout_a(), "sha256:a");
  ADD_PAGE(c, a);
  plan_ok();
  cr_assert_eq(fx.plan.hit_pages, 1);
  cr_assert_eq(fx.plan.page_source[0], a);
}

/* ---- choosing among layouts ------------------------------------------- */

Test(select, fewest_operations_wins_without_preference) {
  /* A costs 4 copies, B 1; A has the smaller id, so only cost explains B. */
  size_t a = add_source(layout_a(), "sha256:aaaa");
  size_t b = add_source(layout_b(), "sha256:bbbb");
  ADD_PAGE(a, b);
  plan_ok();
  cr_assert_eq(fx.plan.page_source[0], b);
  cr_assert_eq(fx.plan.copy_count, 1);
  expect_copy(0, 0, 1, 0, 0, 16);
}

Test(select, a_preferred_layout_wins) {
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

Test(select, the_first_available_preference_wins) {
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

Test(select, unavailable_preferences_fall_back_to_cost) {
  size_t a = add_source(layout_a(), "sha256:aaaa");
  size_t b = add_source(layout_b(), "sha256:bbbb");
  ADD_PAGE(a, b);
  const char *preferred[] = {"sha256:none"};
  fx.request.preferred_layout_ids = preferred;
  fx.request.preferred_count = 1;
  plan_ok();
  cr_assert_eq(fx.plan.page_source[0], b);
}

Test(select, a_preferred_layout_with_another_descriptor_is_not_used) {
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

Test(select, equal_cost_goes_to_the_smallest_layout_id) {
  const reshard_layout *a = layout_a();
  size_t high = add_source(a, "sha256:ffff");
  size_t low = add_source(a, "sha256:0000");
  ADD_PAGE(high, low);
  plan_ok();
  cr_assert_eq(fx.plan.page_source[0], low);
}

Test(select, equal_cost_tie_does_not_depend_on_candidate_order) {
  const reshard_layout *a = layout_a();
  size_t low = add_source(a, "sha256:0000");
  size_t high = add_source(a, "sha256:ffff");
  ADD_PAGE(high, low);
  ADD_PAGE(low, high);
  plan_ok();
  cr_assert_eq(fx.plan.page_source[0], low);
  cr_assert_eq(fx.plan.page_source[1], low);
}

Test(select, each_page_chooses_among_its_own_candidates) {
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

/* ---- limits of the hit prefix, before any copy exists ----------------- */

Test(select, max_operations_bounds_the_copies) {
  add_source(layout_a(), "sha256:a");
  ADD_PAGE(0);
  fx.request.limits.max_operations = 3;
  ASSERT_FAILS(plan(), fx.err, RESHARD_RESOURCE_EXHAUSTED,
               "the limit max_operations 3");
  fx.request.limits.max_operations = 4;
  plan_ok();
}

Test(select, max_bytes_bounds_the_bytes) {
  add_source(layout_a(), "sha256:a");
  ADD_PAGE(0);
  fx.request.limits.max_bytes = 15;
  ASSERT_FAILS(plan(), fx.err, RESHARD_RESOURCE_EXHAUSTED,
               "the limit max_bytes 15");
  fx.request.limits.max_bytes = 16;
  plan_ok();
}

Test(select, limits_fail_on_a_later_page_without_a_partial_plan) {
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

/* ---- joins built to compare candidates --------------------------------- */

Test(select, every_compared_candidate_join_is_returned) {
  size_t a = add_source(layout_a(), "sha256:aaaa");
  size_t b = add_source(layout_b(), "sha256:bbbb");
  ADD_PAGE(a, b);
  plan_ok();
  /* Both were costed; both joins are the caller's to free (teardown). */
  cr_assert_not_null(fx.plan.built_joins[a]);
  cr_assert_not_null(fx.plan.built_joins[b]);
}
