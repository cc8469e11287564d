/* Whether two decoded PlanLoadRequests hold the same values, field by
 * field, for the direct decoder's checks (daemon/wire/load_request.c):
 * tests/daemon/wire/test_load_request.c and the `rpc` fuzz target. Only
 * the shape that decoder reads is compared; a request with an inline
 * placement, a binding, an inline pool or unknown fields is never equal.
 * Header-only: it needs the daemon's generated types, which the support
 * library does not link. */
#ifndef RESHARD_TEST_LOAD_REQUEST_COMPARE_H
#define RESHARD_TEST_LOAD_REQUEST_COMPARE_H

#include <stdbool.h>
#include <stdio.h>
#include <string.h>

#include "reshard/v1/planner.pb-c.h"

static bool reshard_test_texts_equal(char *const *a, size_t a_count,
                                     char *const *b, size_t b_count,
                                     const char *name, char *why,
                                     size_t why_size) {
  if (a_count != b_count) {
    snprintf(why, why_size, "%s: %zu against %zu", name, a_count, b_count);
    return false;
  }
  for (size_t i = 0; i < a_count; i++) {
    if (strcmp(a[i], b[i]) != 0) {
      snprintf(why, why_size, "%s[%zu]: \"%s\" against \"%s\"", name, i, a[i],
               b[i]);
      return false;
    }
  }
  return true;
}

static bool
reshard_test_load_requests_equal(const Reshard__V1__PlanLoadRequest *a,
                                 const Reshard__V1__PlanLoadRequest *b,
                                 char *why, size_t why_size) {
#define RESHARD_TEST_DIFFER(...)                                               \
  do {                                                                         \
    snprintf(why, why_size, __VA_ARGS__);                                      \
    return false;                                                              \
  } while (0)
  if (a->base.n_unknown_fields != 0 || b->base.n_unknown_fields != 0 ||
      a->binding != NULL || b->binding != NULL ||
      a->target_case == RESHARD__V1__PLAN_LOAD_REQUEST__TARGET_PLACEMENT ||
      b->target_case == RESHARD__V1__PLAN_LOAD_REQUEST__TARGET_PLACEMENT) {
    RESHARD_TEST_DIFFER("not the shape compared: unknown fields, a binding "
                        "or an inline placement");
  }
  if (strcmp(a->model_domain, b->model_domain) != 0) {
    RESHARD_TEST_DIFFER("model_domain");
  }
  if (!reshard_test_texts_equal(a->page_keys, a->n_page_keys, b->page_keys,
                                b->n_page_keys, "page_keys", why, why_size) ||
      !reshard_test_texts_equal(
          a->preferred_layout_ids, a->n_preferred_layout_ids,
          b->preferred_layout_ids, b->n_preferred_layout_ids,
          "preferred_layout_ids", why, why_size)) {
    return false;
  }
  if (a->target_case != b->target_case ||
      (a->target_case == RESHARD__V1__PLAN_LOAD_REQUEST__TARGET_PLACEMENT_ID &&
       strcmp(a->placement_id, b->placement_id) != 0)) {
    RESHARD_TEST_DIFFER("target");
  }
  if ((a->target_dp_rank == NULL) != (b->target_dp_rank == NULL) ||
      (a->target_dp_rank != NULL &&
       a->target_dp_rank->value != b->target_dp_rank->value)) {
    RESHARD_TEST_DIFFER("target_dp_rank");
  }
  if ((a->limits == NULL) != (b->limits == NULL) ||
      (a->limits != NULL &&
       (a->limits->max_operations != b->limits->max_operations ||
        a->limits->max_bytes != b->limits->max_bytes ||
        a->limits->max_batch_operations != b->limits->max_batch_operations ||
        a->limits->max_batch_bytes != b->limits->max_batch_bytes ||
        a->limits->max_ranges != b->limits->max_ranges ||
        a->limits->max_validation_work != b->limits->max_validation_work))) {
    RESHARD_TEST_DIFFER("limits");
  }
  if (strcmp(a->operation_id, b->operation_id) != 0) {
    RESHARD_TEST_DIFFER("operation_id");
  }
  if (a->runs != b->runs) {
    RESHARD_TEST_DIFFER("runs: %d against %d", a->runs, b->runs);
  }
  if ((a->pooled == NULL) != (b->pooled == NULL)) {
    RESHARD_TEST_DIFFER("pooled: set in one only");
  }
  if (a->pooled == NULL) {
    return true;
  }
  const Reshard__V1__PooledMemory *pa = a->pooled, *pb = b->pooled;
  if (pa->base.n_unknown_fields != 0 || pb->base.n_unknown_fields != 0 ||
      pa->pool_case == RESHARD__V1__POOLED_MEMORY__POOL_INLINE_POOL ||
      pb->pool_case == RESHARD__V1__POOLED_MEMORY__POOL_INLINE_POOL) {
    RESHARD_TEST_DIFFER("pooled: not the shape compared");
  }
  if (pa->pool_case != pb->pool_case ||
      (pa->pool_case == RESHARD__V1__POOLED_MEMORY__POOL_MEMORY_ID &&
       strcmp(pa->memory_id, pb->memory_id) != 0)) {
    RESHARD_TEST_DIFFER("pooled.memory_id");
  }
  if (pa->n_block_ids != pb->n_block_ids ||
      (pa->n_block_ids != 0 &&
       memcmp(pa->block_ids, pb->block_ids,
              pa->n_block_ids * sizeof *pa->block_ids) != 0)) {
    RESHARD_TEST_DIFFER("pooled.block_ids: %zu against %zu", pa->n_block_ids,
                        pb->n_block_ids);
  }
  return true;
#undef RESHARD_TEST_DIFFER
}

#endif
