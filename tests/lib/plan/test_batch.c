/* Batching invariants (SPEC §2.2 step 5): every batch holds at most
 * max_batch_operations copies and max_batch_bytes bytes; batch.bytes is
 * the sum of its copies; every batch but the last is filled (reaches the
 * operation count or the byte budget exactly); a copy that does not fit
 * the rest of a batch is split at the byte budget, and nowhere else; the
 * total bytes and the byte-exact result are unchanged by batching. */
#include <criterion/criterion.h>
#include <criterion/parameterized.h>
#include <inttypes.h>
#include <stdio.h>
#include <string.h>

#include "oracle.h"

static bool continues(const reshard_copy *a, const reshard_copy *b) {
  return a->page_index == b->page_index && a->part_index == b->part_index &&
         a->part_offset + a->nbytes == b->part_offset &&
         a->region_index == b->region_index &&
         a->region_offset + a->nbytes == b->region_offset;
}

static int key_cmp(const reshard_copy *a, const reshard_copy *b) {
#define BATCH_CMP(f)                                                           \
  if (a->f != b->f)                                                            \
    return a->f < b->f ? -1 : 1;
  BATCH_CMP(page_index)
  BATCH_CMP(part_index)
  BATCH_CMP(part_offset)
  BATCH_CMP(region_index)
  BATCH_CMP(region_offset)
#undef BATCH_CMP
  return 0;
}

/* Checks every invariant of step 5 on an executed plan; on a violation
 * writes it to msg and returns false. */
static bool batching_ok(const reshard_load_request *request,
                        const reshard_load_plan *plan, char *msg,
                        size_t msg_size) {
  uint64_t max_ops = request->limits.max_batch_operations;
  uint64_t max_bytes = request->limits.max_batch_bytes;
  /* batch of each copy, for the split rule */
  size_t next = 0;
  for (size_t b = 0; b < plan->batch_count; b++) {
    const reshard_batch *batch = &plan->batches[b];
    uint64_t bytes = 0;
    for (size_t k = 0; k < batch->count; k++) {
      bytes += plan->copies[batch->first + k].nbytes;
    }
    if (batch->first != next || batch->count == 0 || batch->count > max_ops ||
        batch->bytes > max_bytes || bytes != batch->bytes) {
      snprintf(msg, msg_size,
               "batch %zu: first %zu count %zu bytes %" PRIu64
               " (copies sum %" PRIu64 "), limits %" PRIu64 " ops / %" PRIu64
               " bytes",
               b, batch->first, batch->count, batch->bytes, bytes, max_ops,
               max_bytes);
      return false;
    }
    if (b + 1 < plan->batch_count && batch->count != max_ops &&
        batch->bytes != max_bytes) {
      snprintf(msg, msg_size,
               "batch %zu of %zu is short: %zu copies, %" PRIu64
               " bytes (limits %" PRIu64 " / %" PRIu64 ")",
               b, plan->batch_count, batch->count, batch->bytes, max_ops,
               max_bytes);
      return false;
    }
    for (size_t k = 0; k + 1 < batch->count; k++) {
      const reshard_copy *x = &plan->copies[batch->first + k];
      const reshard_copy *y = &plan->copies[batch->first + k + 1];
      if (continues(x, y)) {
        snprintf(msg, msg_size,
                 "batch %zu: copies %zu and %zu continue each other (split "
                 "inside a batch)",
                 b, batch->first + k, batch->first + k + 1);
        return false;
      }
    }
    if (b + 1 < plan->batch_count) {
      const reshard_copy *x = &plan->copies[batch->first + batch->count - 1];
      const reshard_copy *y = &plan->copies[batch->first + batch->count];
      if (continues(x, y) && batch->bytes != max_bytes) {
        snprintf(msg, msg_size,
                 "copy split between batches %zu and %zu although batch %zu "
                 "holds %" PRIu64 " < %" PRIu64 " bytes",
                 b, b + 1, b, batch->bytes, max_bytes);
        return false;
      }
    }
    next += batch->count;
  }
  if (next != plan->copy_count) {
    snprintf(msg, msg_size, "batches cover %zu of %zu copies", next,
             plan->copy_count);
    return false;
  }
  for (size_t i = 1; i < plan->copy_count; i++) {
    if (key_cmp(&plan->copies[i - 1], &plan->copies[i]) >= 0) {
      snprintf(msg, msg_size,
               "copies %zu and %zu are not in (page, part, part_offset, "
               "region, region_offset) order",
               i - 1, i);
      return false;
    }
  }
  /* Re-joining the split pieces in emitted order gives back exactly the
   * coalesced reference. */
  oracle_copy_list joined, ref;
  memset(&joined, 0, sizeof joined);
  for (size_t i = 0; i < plan->copy_count; i++) {
    oracle_copy_list_push(&joined, &plan->copies[i]);
  }
  oracle_copy_list_merge(&joined);
  oracle_reference_plan(request, plan, &ref, NULL);
  uint64_t ref_bytes = 0;
  for (size_t i = 0; i < ref.count; i++) {
    ref_bytes += ref.items[i].nbytes;
  }
  bool same = joined.count == ref.count &&
              (ref.count == 0 || memcmp(joined.items, ref.items,
                                        ref.count * sizeof *ref.items) == 0);
  size_t joined_count = joined.count, ref_count = ref.count;
  oracle_copy_list_free(&joined);
  oracle_copy_list_free(&ref);
  if (!same) {
    snprintf(msg, msg_size,
             "re-joined copies (%zu) differ from the coalesced reference "
             "(%zu)",
             joined_count, ref_count);
    return false;
  }
  if (plan->copies_after_coalescing != ref_count) {
    snprintf(msg, msg_size,
             "copies_after_coalescing %" PRIu64 ", reference %zu",
             plan->copies_after_coalescing, ref_count);
    return false;
  }
  if (plan->bytes != ref_bytes) {
    snprintf(msg, msg_size, "plan bytes %" PRIu64 ", reference %" PRIu64,
             plan->bytes, ref_bytes);
    return false;
  }
  return true;
}

typedef struct batch_outcome {
  size_t batch_count;
  size_t copy_count;
  uint64_t bytes;
} batch_outcome;

/* Runs an already built case (limits set), executes byte-exactly and
 * checks the batching; destroys the case. */
static batch_outcome run_case(oracle_case *c) {
  reshard_arena plan_arena;
  reshard_load_plan plan;
  char msg[ORACLE_MSG_SIZE];
  batch_outcome out = {0, 0, 0};
  bool ok = oracle_case_run(c, &plan_arena, &plan, NULL, msg, sizeof msg);
  bool batched = true;
  char detail[ORACLE_MSG_SIZE] = "";
  if (ok) {
    batched = batching_ok(&c->request, &plan, detail, sizeof detail);
    out.batch_count = plan.batch_count;
    out.copy_count = plan.copy_count;
    out.bytes = plan.bytes;
  }
  oracle_plan_release(c, &plan_arena, &plan);
  char description[sizeof c->description];
  memcpy(description, c->description, sizeof description);
  oracle_case_destroy(c);
  cr_assert(ok, "%s", msg);
  cr_assert(batched, "%s [%s]", detail, description);
  return out;
}

ParameterizedTestParameters(batch, format_x_memory) {
  static oracle_matrix_param params[ORACLE_MATRIX_SIZE];
  oracle_fill_matrix(params, false);
  return cr_make_param_array(oracle_matrix_param, params, ORACLE_MATRIX_SIZE);
}

/* 18 x 12 cases: 8 with 3 operations / 100 bytes, 4 with random small
 * limits (odd byte budgets split inside elements). */
ParameterizedTest(oracle_matrix_param *param, batch, format_x_memory) {
  oracle_rng rng;
  uint64_t stream = 2000 + (uint64_t)param->format * 10 + param->style;
  oracle_rng_seed(&rng, oracle_case_seed(oracle_base_seed(), stream, 999));
  size_t batches = 0;
  for (unsigned i = 0; i < 12; i++) {
    oracle_case_opts opts;
    memset(&opts, 0, sizeof opts);
    opts.format = param->format;
    opts.style = param->style;
    opts.max_sources = 2;
    opts.selection_twists = i % 3 == 0;
    opts.max_batch_operations = i < 8 ? 3 : oracle_rng_between(&rng, 1, 5);
    opts.max_batch_bytes = i < 8 ? 100 : oracle_rng_between(&rng, 1, 300);
    oracle_case c;
    char msg[ORACLE_MSG_SIZE];
    uint64_t seed = oracle_case_seed(oracle_base_seed(), stream, i);
    bool built = oracle_case_build(&c, seed, &opts, msg, sizeof msg);
    if (!built) {
      oracle_case_destroy(&c);
    }
    cr_assert(built, "RESHARD_ORACLE_SEED=0x%016" PRIx64 " case %u: %s",
              oracle_base_seed(), i, msg);
    batches += run_case(&c).batch_count;
  }
  cr_assert_gt(batches, 0);
}

/* One layer, one head, dims 64/64 of 2 bytes, page 4: PLHD K and V blocks
 * are 512 bytes each and, read into adjacent K and V ranges, coalesce to
 * one 1024-byte copy. */
static batch_outcome one_big_copy(uint64_t max_ops, uint64_t max_bytes) {
  uint64_t layers[] = {7};
  reshard_descriptor d;
  memset(&d, 0, sizeof d);
  d.global_layer_ids = layers;
  d.layer_count = 1;
  d.dtype = "bf16";
  d.itemsize = 2;
  d.page_size = 4;
  d.total_kv_heads = 1;
  d.key_head_dim = 64;
  d.value_head_dim = 64;
  reshard_region region = {"pool", 1 << 20, 1024};
  reshard_binding_range r[2];
  memset(r, 0, sizeof r);
  for (int i = 0; i < 2; i++) {
    r[i].global_layer_id = 7;
    r[i].component = i == 0 ? RESHARD_COMPONENT_KEY : RESHARD_COMPONENT_VALUE;
    r[i].token_start = 0;
    r[i].token_count = 4;
    r[i].head_start = 0;
    r[i].head_count = 1;
    r[i].region_id = "pool";
    r[i].offset_bytes = (uint64_t)i * 512;
    r[i].token_stride_bytes = 128;
    r[i].head_stride_bytes = 128;
  }
  oracle_case c;
  char msg[ORACLE_MSG_SIZE];
  bool ok = oracle_manual_case(&c, &d, RESHARD_FORMAT_PLHD, NULL, 0, &region, 1,
                               r, 2, 1, msg, sizeof msg);
  if (!ok) {
    oracle_case_destroy(&c);
  }
  cr_assert(ok, "%s", msg);
  c.request.limits.max_batch_operations = max_ops;
  c.request.limits.max_batch_bytes = max_bytes;
  return run_case(&c);
}

Test(batch, large_copy_split_at_byte_budget) {
  batch_outcome o = one_big_copy(3, 100);
  cr_assert_eq(o.bytes, 1024);
  cr_assert_eq(o.batch_count, 11); /* 10 x 100 + 24 */
  cr_assert_eq(o.copy_count, 11);

  o = one_big_copy(3, 1000);
  cr_assert_eq(o.batch_count, 2);
  cr_assert_eq(o.copy_count, 2);

  o = one_big_copy(3, 1024);
  cr_assert_eq(o.batch_count, 1);
  cr_assert_eq(o.copy_count, 1);

  o = one_big_copy(1, 7); /* budget not a multiple of the itemsize */
  cr_assert_eq(o.batch_count, (1024 + 6) / 7);
  cr_assert_eq(o.bytes, 1024);
}

/* The transposed tiny case of test_coalesce has 7 copies of 1-2 bytes:
 * with 3 operations per batch they fill 3 + 3 + 1. */
Test(batch, operation_limit_fills_batches) {
  uint64_t layers[] = {0};
  reshard_descriptor d;
  memset(&d, 0, sizeof d);
  d.global_layer_ids = layers;
  d.layer_count = 1;
  d.dtype = "u8";
  d.itemsize = 1;
  d.page_size = 2;
  d.total_kv_heads = 2;
  d.key_head_dim = 1;
  d.value_head_dim = 1;
  reshard_region region = {"mem", 4096, 8};
  reshard_binding_range r[4];
  memset(r, 0, sizeof r);
  for (int i = 0; i < 4; i++) {
    r[i].global_layer_id = 0;
    r[i].component = i < 2 ? RESHARD_COMPONENT_KEY : RESHARD_COMPONENT_VALUE;
    r[i].token_start = 0;
    r[i].token_count = 2;
    r[i].head_start = (uint64_t)(i % 2);
    r[i].head_count = 1;
    r[i].region_id = "mem";
    r[i].offset_bytes = (uint64_t)i * 2;
    r[i].token_stride_bytes = 1;
    r[i].head_stride_bytes = 1;
  }
  oracle_case c;
  char msg[ORACLE_MSG_SIZE];
  bool ok = oracle_manual_case(&c, &d, RESHARD_FORMAT_PLHD, NULL, 0, &region, 1,
                               r, 4, 1, msg, sizeof msg);
  if (!ok) {
    oracle_case_destroy(&c);
  }
  cr_assert(ok, "%s", msg);
  c.request.limits.max_batch_operations = 3;
  c.request.limits.max_batch_bytes = 100;
  batch_outcome o = run_case(&c);
  cr_assert_eq(o.copy_count, 7);
  cr_assert_eq(o.batch_count, 3);
  cr_assert_eq(o.bytes, 8);
}
