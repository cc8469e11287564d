/* Coalescing (SPEC §2.2 steps 3 and 4) proven minimal against a naive
 * reference: one copy per (token, head) from the SPEC formulas, sorted by
 * (page, part, part_offset, region, region_offset) and merged maximally in
 * that order. The plan's copies_after_coalescing must equal the reference
 * count, its copies (re-joined where batching split them) must be exactly
 * the reference copies, and copies_before_coalescing must follow step 3's
 * granularity rule: one per (token, head); one per token when both head
 * strides equal hb; one per block when, in addition, both token strides
 * equal the row width. */
#include <criterion/criterion.h>
#include <criterion/parameterized.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "oracle.h"

typedef struct coalesce_result {
  uint64_t before, after;
  uint64_t ref_before, ref_after;
  uint64_t hit_pages, sequence_pages;
} coalesce_result;

/* Re-joins the plan's copies in sorted order (batching may split a copy
 * at the byte budget) and compares them with the reference. */
static bool same_as_reference(const reshard_load_plan *plan,
                              const oracle_copy_list *ref, char *msg,
                              size_t msg_size) {
  oracle_copy_list got;
  memset(&got, 0, sizeof got);
  for (size_t i = 0; i < plan->copy_count; i++) {
    oracle_copy_list_push(&got, &plan->copies[i]);
  }
  oracle_copy_list_sort(&got);
  oracle_copy_list_merge(&got);
  bool ok = got.count == ref->count;
  size_t bad = 0;
  for (size_t i = 0; ok && i < got.count; i++) {
    ok = memcmp(&got.items[i], &ref->items[i], sizeof got.items[i]) == 0;
    bad = i;
  }
  if (!ok) {
    if (got.count != ref->count) {
      snprintf(msg, msg_size, "%zu joined copies, reference has %zu", got.count,
               ref->count);
    } else {
      const reshard_copy *a = &got.items[bad], *b = &ref->items[bad];
      snprintf(msg, msg_size,
               "copy %zu: got {page %" PRIu64 " part %" PRIu64 " off %" PRIu64
               " region %" PRIu64 " off %" PRIu64 " n %" PRIu64
               "}, reference {page %" PRIu64 " part %" PRIu64 " off %" PRIu64
               " region %" PRIu64 " off %" PRIu64 " n %" PRIu64 "}",
               bad, a->page_index, a->part_index, a->part_offset,
               a->region_index, a->region_offset, a->nbytes, b->page_index,
               b->part_index, b->part_offset, b->region_index, b->region_offset,
               b->nbytes);
    }
  }
  oracle_copy_list_free(&got);
  return ok;
}

/* Plans and executes the case, then compares with the reference. Fails
 * the test (after freeing everything) on any difference. */
static coalesce_result check_case(oracle_case *c) {
  reshard_arena plan_arena;
  reshard_load_plan plan;
  char msg[ORACLE_MSG_SIZE];
  coalesce_result res;
  memset(&res, 0, sizeof res);
  bool ok = oracle_case_run(c, &plan_arena, &plan, NULL, msg, sizeof msg);
  char detail[ORACLE_MSG_SIZE] = "";
  bool same = true, unsplit = true;
  if (ok) {
    oracle_copy_list ref;
    oracle_reference_plan(&c->request, &plan, &ref, &res.ref_before);
    res.ref_after = ref.count;
    res.before = plan.copies_before_coalescing;
    res.after = plan.copies_after_coalescing;
    res.hit_pages = plan.hit_pages;
    res.sequence_pages = plan.sequence_pages;
    same = same_as_reference(&plan, &ref, detail, sizeof detail);
    /* with the default 64 MiB budget nothing here needs splitting */
    if (plan.bytes <= c->request.limits.max_batch_bytes) {
      unsplit = plan.copy_count == ref.count;
    }
    oracle_copy_list_free(&ref);
  }
  oracle_plan_release(c, &plan_arena, &plan);
  char description[sizeof c->description];
  memcpy(description, c->description, sizeof description);
  oracle_case_destroy(c);
  cr_assert(ok, "%s", msg);
  cr_assert_eq(res.after, res.ref_after,
               "copies_after_coalescing %" PRIu64 ", minimal is %" PRIu64
               " [%s]",
               res.after, res.ref_after, description);
  cr_assert_eq(res.before, res.ref_before,
               "copies_before_coalescing %" PRIu64 ", step 3 gives %" PRIu64
               " [%s]",
               res.before, res.ref_before, description);
  cr_assert(same, "%s [%s]", detail, description);
  cr_assert(unsplit, "copies were split below the byte budget [%s]",
            description);
  return res;
}

/* ---- random cases on every format x memory style ---- */

ParameterizedTestParameters(coalesce, format_x_memory) {
  static oracle_matrix_param params[ORACLE_MATRIX_SIZE];
  oracle_fill_matrix(params, false);
  return cr_make_param_array(oracle_matrix_param, params, ORACLE_MATRIX_SIZE);
}

/* Builds and checks case `index` of the matrix cell `param`'s stream. */
static coalesce_result check_matrix_case(const oracle_matrix_param *param,
                                         unsigned index) {
  oracle_case_opts opts;
  memset(&opts, 0, sizeof opts);
  opts.format = param->format;
  opts.style = param->style;
  opts.max_sources = 1;
  uint64_t stream = 1000 + (uint64_t)param->format * 10 + param->style;
  uint64_t seed = oracle_case_seed(oracle_base_seed(), stream, index);
  oracle_case c;
  char msg[ORACLE_MSG_SIZE];
  bool built = oracle_case_build(&c, seed, &opts, msg, sizeof msg);
  if (!built) {
    oracle_case_destroy(&c);
  }
  cr_assert(built, "RESHARD_ORACLE_SEED=0x%016" PRIx64 " case %u: %s",
            oracle_base_seed(), index, msg);
  return check_case(&c);
}

ParameterizedTest(oracle_matrix_param *param, coalesce, format_x_memory) {
  uint64_t total_before = 0;
  for (unsigned i = 0; i < 16; i++) {
    total_before += check_matrix_case(param, i).before;
  }
  cr_assert_gt(total_before, 0, "no copies planned at all");
}

/* The planner lowers a page as strided sequences when they can stand for
 * its coalesced copies (lib/plan/sequences.c) and copy by copy otherwise. The
 * random cases above check every page against the reference either way;
 * this makes sure both ways are among them, on the same streams. */
Test(coalesce, both_lowering_paths_are_checked) {
  oracle_matrix_param params[ORACLE_MATRIX_SIZE];
  oracle_fill_matrix(params, false);
  uint64_t hit_pages = 0, sequence_pages = 0;
  for (size_t p = 0; p < ORACLE_MATRIX_SIZE; p++) {
    for (unsigned i = 0; i < 16; i++) {
      coalesce_result r = check_matrix_case(&params[p], i);
      hit_pages += r.hit_pages;
      sequence_pages += r.sequence_pages;
    }
  }
  cr_assert_gt(sequence_pages, 0, "no page was lowered as sequences");
  cr_assert_lt(sequence_pages, hit_pages,
               "every one of %" PRIu64 " pages was lowered as sequences",
               hit_pages);
}

/* ---- hand-computed cases (they also keep the reference honest) ---- */

static uint64_t layer0[] = {0};

/* One layer, 2 heads, dims 1/1, itemsize 1, page 2. */
static reshard_descriptor tiny_descriptor(void) {
  reshard_descriptor d;
  memset(&d, 0, sizeof d);
  d.global_layer_ids = layer0;
  d.layer_count = 1;
  d.dtype = "u8";
  d.itemsize = 1;
  d.page_size = 2;
  d.total_kv_heads = 2;
  d.key_head_dim = 1;
  d.value_head_dim = 1;
  return d;
}

static reshard_binding_range nhd(reshard_component c, uint64_t tokens,
                                 uint64_t offset) {
  reshard_binding_range r;
  memset(&r, 0, sizeof r);
  r.global_layer_id = 0;
  r.component = c;
  r.token_start = 0;
  r.token_count = tokens;
  r.head_start = 0;
  r.head_count = 2;
  r.region_id = "mem";
  r.offset_bytes = offset;
  r.token_stride_bytes = 2;
  r.head_stride_bytes = 1;
  return r;
}

static reshard_binding_range hnd(reshard_component c, uint64_t head,
                                 uint64_t offset) {
  reshard_binding_range r = nhd(c, 2, offset);
  r.head_start = head;
  r.head_count = 1;
  r.token_stride_bytes = 1;
  r.head_stride_bytes = 1;
  return r;
}

static coalesce_result manual(reshard_format format,
                              const reshard_shard *shards, size_t shard_count,
                              const reshard_binding_range *ranges, size_t n,
                              uint64_t region_bytes, uint64_t pages) {
  reshard_descriptor d = tiny_descriptor();
  reshard_region region = {"mem", 4096, region_bytes};
  oracle_case c;
  char msg[ORACLE_MSG_SIZE];
  bool ok = oracle_manual_case(&c, &d, format, shards, shard_count, &region, 1,
                               ranges, n, pages, msg, sizeof msg);
  if (!ok) {
    oracle_case_destroy(&c);
  }
  cr_assert(ok, "%s", msg);
  return check_case(&c);
}

/* PLHD [token, layer, head]: K is one 4-byte block, V the next; with the
 * reader's V right after its K, everything is one copy. */
Test(coalesce, kv_blocks_merge_when_adjacent) {
  reshard_binding_range r[2] = {nhd(RESHARD_COMPONENT_KEY, 2, 0),
                                nhd(RESHARD_COMPONENT_VALUE, 2, 4)};
  coalesce_result res = manual(RESHARD_FORMAT_PLHD, NULL, 0, r, 2, 8, 1);
  cr_assert_eq(res.before, 2);
  cr_assert_eq(res.after, 1);
}

Test(coalesce, kv_blocks_stay_apart_when_swapped) {
  reshard_binding_range r[2] = {nhd(RESHARD_COMPONENT_KEY, 2, 4),
                                nhd(RESHARD_COMPONENT_VALUE, 2, 0)};
  coalesce_result res = manual(RESHARD_FORMAT_PLHD, NULL, 0, r, 2, 8, 1);
  cr_assert_eq(res.before, 2);
  cr_assert_eq(res.after, 2);
}

/* PLHD source into [head, token] memory: the (token, head) order differs,
 * so only the last K value and the first V value join.
 * source K: t0h0@0 t0h1@1 t1h0@2 t1h1@3, V @4..7 alike;
 * reader K: h0 {t0@0 t1@1} h1 {t0@2 t1@3}, V @4..7 alike. */
Test(coalesce, transposed_heads_join_only_at_the_seam) {
  reshard_binding_range r[4] = {
      hnd(RESHARD_COMPONENT_KEY, 0, 0), hnd(RESHARD_COMPONENT_KEY, 1, 2),
      hnd(RESHARD_COMPONENT_VALUE, 0, 4), hnd(RESHARD_COMPONENT_VALUE, 1, 6)};
  coalesce_result res = manual(RESHARD_FORMAT_PLHD, NULL, 0, r, 4, 8, 1);
  cr_assert_eq(res.before, 8); /* per token: 2 per (fragment, range) */
  cr_assert_eq(res.after, 7);
}

/* HPLD [head, token, layer]: head stride P*L*hb = 2 != hb, so step 3 emits
 * one copy per (token, head); NHD memory joins only K's last and V's
 * first value. */
Test(coalesce, hpld_into_nhd_is_per_value) {
  reshard_binding_range r[2] = {nhd(RESHARD_COMPONENT_KEY, 2, 0),
                                nhd(RESHARD_COMPONENT_VALUE, 2, 4)};
  coalesce_result res = manual(RESHARD_FORMAT_HPLD, NULL, 0, r, 2, 8, 1);
  cr_assert_eq(res.before, 8);
  cr_assert_eq(res.after, 7);
}

/* HPLD [head, token, layer] with one layer read into [head, token] memory:
 * the head strides (P*L*hb = 2 in the Part) are not hb, so step 3 counts
 * one copy per (token, head) even though every run is contiguous; the
 * merge then joins all of K and V into one copy. */
Test(coalesce, hpld_into_hnd_counts_per_value_then_joins) {
  reshard_binding_range r[4] = {
      hnd(RESHARD_COMPONENT_KEY, 0, 0), hnd(RESHARD_COMPONENT_KEY, 1, 2),
      hnd(RESHARD_COMPONENT_VALUE, 0, 4), hnd(RESHARD_COMPONENT_VALUE, 1, 6)};
  coalesce_result res = manual(RESHARD_FORMAT_HPLD, NULL, 0, r, 4, 8, 1);
  cr_assert_eq(res.before, 8);
  cr_assert_eq(res.after, 1);
}

/* LPHD over two pages into one contiguous range per component: one block
 * copy per (page, component); pages never join. */
Test(coalesce, lphd_pages_are_blocks) {
  reshard_binding_range r[2] = {nhd(RESHARD_COMPONENT_KEY, 4, 0),
                                nhd(RESHARD_COMPONENT_VALUE, 4, 8)};
  coalesce_result res = manual(RESHARD_FORMAT_LPHD, NULL, 0, r, 2, 16, 2);
  cr_assert_eq(res.before, 4);
  cr_assert_eq(res.after, 4);
}

/* Two one-head shards read into a two-head NHD row: each token of each
 * shard is its own copy (row width hb, reader token stride 2 hb). */
Test(coalesce, head_split_shards_are_per_token) {
  reshard_shard shards[2];
  memset(shards, 0, sizeof shards);
  shards[0].layer_ids = layer0;
  shards[0].layer_count = 1;
  shards[0].head_start = 1;
  shards[0].head_count = 1;
  shards[0].key_suffix = "1";
  shards[1] = shards[0];
  shards[1].head_start = 0;
  shards[1].key_suffix = "0";
  reshard_binding_range r[2] = {nhd(RESHARD_COMPONENT_KEY, 2, 0),
                                nhd(RESHARD_COMPONENT_VALUE, 2, 4)};
  coalesce_result res = manual(RESHARD_FORMAT_LPHD, shards, 2, r, 2, 8, 1);
  cr_assert_eq(res.before, 8);
  cr_assert_eq(res.after, 8);
}

/* ---- SPEC §6 scenarios: counts against the reference and closed forms */

static coalesce_result scenario(int which, uint64_t pages, size_t participant,
                                size_t *layers) {
  oracle_case c;
  char msg[ORACLE_MSG_SIZE];
  bool ok =
      oracle_scenario_build(&c, which, pages, participant, msg, sizeof msg);
  if (!ok) {
    oracle_case_destroy(&c);
  }
  cr_assert(ok, "%s", msg);
  *layers = c.participant->layer_count;
  return check_case(&c);
}

Test(coalesce, scenario_counts) {
  size_t layers;
  /* S1: PLHD, one writer shard; each (page, layer, component, token) row of
   * the reader's 4 heads is one copy and nothing joins. */
  coalesce_result s1 = scenario(1, 2, 0, &layers);
  cr_assert_eq(s1.before, 2 * 32 * 2 * 16);
  cr_assert_eq(s1.after, 2 * 32 * 2 * 16);
  /* S2: LPHD one-head shards into 2-head NHD rows: per token. */
  coalesce_result s2 = scenario(2, 2, 0, &layers);
  cr_assert_eq(layers, 40);
  cr_assert_eq(s2.before, 2 * 40 * 2 * 2 * 64);
  cr_assert_eq(s2.after, 2 * 40 * 2 * 2 * 64);
  /* S3: HPLD head stride != hb: per (token, head), 1 head. */
  coalesce_result s3 = scenario(3, 2, 1, &layers);
  cr_assert_eq(s3.before, 2 * 80 * 2 * 32);
  /* S4: single tensor PLHD, 1 head: per token, K only. */
  coalesce_result s4 = scenario(4, 2, 3, &layers);
  cr_assert_eq(s4.before, 2 * layers * 64);
  /* S5: LPHD 1-head shards into 1-head 128-token blocks: one block per
   * (page, layer, component). */
  coalesce_result s5 = scenario(5, 2, 9, &layers);
  cr_assert_eq(s5.before, 2 * layers * 2);
  cr_assert_leq(s5.after, s5.before);
}

/* A page whose ranges meet it as the last page's did but for where they
 * lie in their regions reuses the last page's sequences, shifted
 * (lib/plan/lower.c). Here the two pages' ranges have the same tokens, strides
 * and region, but split the three heads differently ([0,1) [1,3) on page
 * 0, [0,2) [2,3) on page 1): page 1 must be lowered afresh. */
static reshard_binding_range split_heads(reshard_component c, uint64_t page,
                                         uint64_t head_start,
                                         uint64_t head_count, uint64_t offset) {
  reshard_binding_range r;
  memset(&r, 0, sizeof r);
  r.global_layer_id = 0;
  r.component = c;
  r.token_start = page * 4;
  r.token_count = 4;
  r.head_start = head_start;
  r.head_count = head_count;
  r.region_id = "mem";
  r.offset_bytes = offset;
  r.token_stride_bytes = 3;
  r.head_stride_bytes = 1;
  return r;
}

Test(coalesce, pages_of_other_head_splits_are_not_shifted) {
  reshard_descriptor d = tiny_descriptor();
  d.page_size = 4;
  d.total_kv_heads = 3;
  reshard_binding_range r[8];
  size_t n = 0;
  for (int k = 0; k < 2; k++) {
    reshard_component c = k ? RESHARD_COMPONENT_VALUE : RESHARD_COMPONENT_KEY;
    uint64_t base = (uint64_t)k * 96;
    r[n++] = split_heads(c, 0, 0, 1, base);
    r[n++] = split_heads(c, 0, 1, 2, base + 24);
    r[n++] = split_heads(c, 1, 0, 2, base + 48);
    r[n++] = split_heads(c, 1, 2, 1, base + 72);
  }
  reshard_region region = {"mem", 4096, 192};
  oracle_case c;
  char msg[ORACLE_MSG_SIZE];
  bool ok = oracle_manual_case(&c, &d, RESHARD_FORMAT_PLHD, NULL, 0, &region, 1,
                               r, n, 2, msg, sizeof msg);
  if (!ok) {
    oracle_case_destroy(&c);
  }
  cr_assert(ok, "%s", msg);
  coalesce_result res = check_case(&c);
  cr_assert_eq(res.hit_pages, 2);
  cr_assert_eq(res.sequence_pages, 2, "both pages must take the sequences");
}
