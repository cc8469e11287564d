/* Whether two decoded requests hold the same values, field by field, for
 * the direct decoders' checks (daemon/wire/load_request.c and
 * transfer_request.c): their Criterion tests and the `rpc` fuzz target.
 * Only the shape those decoders read is compared; a request with an
 * inline placement, a binding, an inline pool or unknown fields is never
 * equal. Header-only: it needs the daemon's generated types, which the
 * support library does not link. */
#ifndef RESHARD_TEST_REQUEST_COMPARE_H
#define RESHARD_TEST_REQUEST_COMPARE_H

#include <stdbool.h>
#include <stdio.h>
#include <string.h>

#include "reshard/v1/planner.pb-c.h"

#define RESHARD_TEST_DIFFER(...)                                               \
  do {                                                                         \
    snprintf(why, why_size, __VA_ARGS__);                                      \
    return false;                                                              \
  } while (0)

static inline bool reshard_test_texts_equal(char *const *a, size_t a_count,
                                            char *const *b, size_t b_count,
                                            const char *name, char *why,
                                            size_t why_size) {
  if (a_count != b_count) {
    RESHARD_TEST_DIFFER("%s: %zu against %zu", name, a_count, b_count);
  }
  for (size_t i = 0; i < a_count; i++) {
    if (strcmp(a[i], b[i]) != 0) {
      RESHARD_TEST_DIFFER("%s[%zu]: \"%s\" against \"%s\"", name, i, a[i],
                          b[i]);
    }
  }
  return true;
}

static inline bool reshard_test_ids_equal(const uint32_t *a, size_t a_count,
                                          const uint32_t *b, size_t b_count,
                                          const char *name, char *why,
                                          size_t why_size) {
  if (a_count != b_count ||
      (a_count != 0 && memcmp(a, b, a_count * sizeof *a) != 0)) {
    RESHARD_TEST_DIFFER("%s: %zu against %zu ids, or other ids", name, a_count,
                        b_count);
  }
  return true;
}

static inline bool
reshard_test_dp_ranks_equal(const Google__Protobuf__UInt32Value *a,
                            const Google__Protobuf__UInt32Value *b,
                            const char *name, char *why, size_t why_size) {
  if ((a == NULL) != (b == NULL) || (a != NULL && a->value != b->value)) {
    RESHARD_TEST_DIFFER("%s", name);
  }
  return true;
}

static inline bool reshard_test_limits_equal(const Reshard__V1__Limits *a,
                                             const Reshard__V1__Limits *b,
                                             char *why, size_t why_size) {
  if ((a == NULL) != (b == NULL) ||
      (a != NULL && (a->max_operations != b->max_operations ||
                     a->max_bytes != b->max_bytes ||
                     a->max_batch_operations != b->max_batch_operations ||
                     a->max_batch_bytes != b->max_batch_bytes ||
                     a->max_ranges != b->max_ranges ||
                     a->max_validation_work != b->max_validation_work))) {
    RESHARD_TEST_DIFFER("limits");
  }
  return true;
}

static inline bool reshard_test_pooled_equal(const Reshard__V1__PooledMemory *a,
                                             const Reshard__V1__PooledMemory *b,
                                             char *why, size_t why_size) {
  if ((a == NULL) != (b == NULL)) {
    RESHARD_TEST_DIFFER("pooled: set in one only");
  }
  if (a == NULL) {
    return true;
  }
  if (a->base.n_unknown_fields != 0 || b->base.n_unknown_fields != 0 ||
      a->pool_case == RESHARD__V1__POOLED_MEMORY__POOL_INLINE_POOL ||
      b->pool_case == RESHARD__V1__POOLED_MEMORY__POOL_INLINE_POOL) {
    RESHARD_TEST_DIFFER("pooled: not the shape compared");
  }
  if (a->pool_case != b->pool_case ||
      (a->pool_case == RESHARD__V1__POOLED_MEMORY__POOL_MEMORY_ID &&
       strcmp(a->memory_id, b->memory_id) != 0)) {
    RESHARD_TEST_DIFFER("pooled.memory_id");
  }
  return reshard_test_ids_equal(a->block_ids, a->n_block_ids, b->block_ids,
                                b->n_block_ids, "pooled.block_ids", why,
                                why_size);
}

static inline bool
reshard_test_load_requests_equal(const Reshard__V1__PlanLoadRequest *a,
                                 const Reshard__V1__PlanLoadRequest *b,
                                 char *why, size_t why_size) {
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
  if (a->target_case != b->target_case ||
      (a->target_case == RESHARD__V1__PLAN_LOAD_REQUEST__TARGET_PLACEMENT_ID &&
       strcmp(a->placement_id, b->placement_id) != 0)) {
    RESHARD_TEST_DIFFER("target");
  }
  if (strcmp(a->operation_id, b->operation_id) != 0) {
    RESHARD_TEST_DIFFER("operation_id");
  }
  if (a->runs != b->runs) {
    RESHARD_TEST_DIFFER("runs: %d against %d", a->runs, b->runs);
  }
  return reshard_test_texts_equal(a->page_keys, a->n_page_keys, b->page_keys,
                                  b->n_page_keys, "page_keys", why, why_size) &&
         reshard_test_texts_equal(
             a->preferred_layout_ids, a->n_preferred_layout_ids,
             b->preferred_layout_ids, b->n_preferred_layout_ids,
             "preferred_layout_ids", why, why_size) &&
         reshard_test_dp_ranks_equal(a->target_dp_rank, b->target_dp_rank,
                                     "target_dp_rank", why, why_size) &&
         reshard_test_limits_equal(a->limits, b->limits, why, why_size) &&
         reshard_test_pooled_equal(a->pooled, b->pooled, why, why_size);
}

static inline bool
reshard_test_transfer_requests_equal(const Reshard__V1__PlanTransferRequest *a,
                                     const Reshard__V1__PlanTransferRequest *b,
                                     char *why, size_t why_size) {
  if (a->base.n_unknown_fields != 0 || b->base.n_unknown_fields != 0 ||
      a->binding != NULL || b->binding != NULL ||
      a->source_case ==
          RESHARD__V1__PLAN_TRANSFER_REQUEST__SOURCE_SOURCE_PLACEMENT ||
      b->source_case ==
          RESHARD__V1__PLAN_TRANSFER_REQUEST__SOURCE_SOURCE_PLACEMENT ||
      a->target_case ==
          RESHARD__V1__PLAN_TRANSFER_REQUEST__TARGET_TARGET_PLACEMENT ||
      b->target_case ==
          RESHARD__V1__PLAN_TRANSFER_REQUEST__TARGET_TARGET_PLACEMENT) {
    RESHARD_TEST_DIFFER("not the shape compared: unknown fields, a binding "
                        "or an inline placement");
  }
  if (a->source_case != b->source_case ||
      (a->source_case ==
           RESHARD__V1__PLAN_TRANSFER_REQUEST__SOURCE_SOURCE_PLACEMENT_ID &&
       strcmp(a->source_placement_id, b->source_placement_id) != 0)) {
    RESHARD_TEST_DIFFER("source");
  }
  if (a->target_case != b->target_case ||
      (a->target_case ==
           RESHARD__V1__PLAN_TRANSFER_REQUEST__TARGET_TARGET_PLACEMENT_ID &&
       strcmp(a->target_placement_id, b->target_placement_id) != 0)) {
    RESHARD_TEST_DIFFER("target");
  }
  if (a->token_count != b->token_count) {
    RESHARD_TEST_DIFFER("token_count");
  }
  if (strcmp(a->operation_id, b->operation_id) != 0) {
    RESHARD_TEST_DIFFER("operation_id");
  }
  if (a->runs != b->runs) {
    RESHARD_TEST_DIFFER("runs: %d against %d", a->runs, b->runs);
  }
  return reshard_test_texts_equal(a->source_memory_ids, a->n_source_memory_ids,
                                  b->source_memory_ids, b->n_source_memory_ids,
                                  "source_memory_ids", why, why_size) &&
         reshard_test_ids_equal(a->source_block_ids, a->n_source_block_ids,
                                b->source_block_ids, b->n_source_block_ids,
                                "source_block_ids", why, why_size) &&
         reshard_test_dp_ranks_equal(a->source_dp_rank, b->source_dp_rank,
                                     "source_dp_rank", why, why_size) &&
         reshard_test_dp_ranks_equal(a->target_dp_rank, b->target_dp_rank,
                                     "target_dp_rank", why, why_size) &&
         reshard_test_limits_equal(a->limits, b->limits, why, why_size) &&
         reshard_test_pooled_equal(a->pooled, b->pooled, why, why_size);
}

#undef RESHARD_TEST_DIFFER

#endif
