/* The execution oracle of SPEC §2.4 run over random shapes: every format x
 * TP/PP/DP/replica change x reader memory style x single-tensor caches, plus
 * the SPEC §6 scenarios at reduced page counts. Each case normalizes its
 * placements and layouts through the library, plans a load and executes
 * it byte by byte (see tests/support/oracle.h).
 *
 * Seeds: every case derives its seed from RESHARD_ORACLE_SEED (default
 * ORACLE_DEFAULT_SEED), the test's stream and the case index; a failure
 * prints all three and the case's per-case seed and shape. */
#include <criterion/criterion.h>
#include <criterion/parameterized.h>
#include <inttypes.h>
#include <stdio.h>
#include <string.h>

#include "oracle.h"

typedef struct run_totals {
  unsigned cases;
  uint64_t copies;
  uint64_t bytes;
} run_totals;

/* Cases whose reader ranges validation finds page blocks of more than
 * one page, their pages aligned across groups or apart
 * (reshard_bound_binding). */
typedef struct page_block_tally {
  unsigned aligned, apart;
} page_block_tally;

static void tally_page_blocks(const oracle_case *c, page_block_tally *tally) {
  reshard_arena arena;
  reshard_arena_init(&arena, 0);
  reshard_bound_binding bound;
  reshard_error err;
  reshard_error_clear(&err);
  cr_assert_eq(reshard_binding_validate(&c->binding, &c->reader.descriptor,
                                        c->participant, c->request.page_count,
                                        &c->request.limits, &arena, &bound,
                                        &err),
               RESHARD_OK, "%s", err.message);
  if (bound.page_blocks != 0 && c->request.page_count > 1) {
    tally->aligned += bound.pages_aligned;
    tally->apart += !bound.pages_aligned;
  }
  reshard_arena_destroy(&arena);
}

/* Builds, plans, executes and checks one random case; fails the test with
 * a reproducible message. With `tally`, counts the case's page blocks. */
static void run_one_tallied(uint64_t stream, unsigned index,
                            const oracle_case_opts *opts, run_totals *totals,
                            page_block_tally *tally) {
  uint64_t base = oracle_base_seed();
  uint64_t seed = oracle_case_seed(base, stream, index);
  oracle_case c;
  char msg[ORACLE_MSG_SIZE];
  bool ok = oracle_case_build(&c, seed, opts, msg, sizeof msg);
  oracle_exec_stats stats;
  memset(&stats, 0, sizeof stats);
  if (ok && tally != NULL) {
    tally_page_blocks(&c, tally);
  }
  if (ok) {
    reshard_arena plan_arena;
    reshard_load_plan plan;
    ok = oracle_case_run(&c, &plan_arena, &plan, &stats, msg, sizeof msg);
    oracle_plan_release(&c, &plan_arena, &plan);
  }
  oracle_case_destroy(&c);
  cr_assert(
      ok, "RESHARD_ORACLE_SEED=0x%016" PRIx64 " stream %" PRIu64 " case %u: %s",
      base, stream, index, msg);
  totals->cases++;
  totals->copies += stats.copies;
  totals->bytes += stats.bytes;
}

static void run_one(uint64_t stream, unsigned index,
                    const oracle_case_opts *opts, run_totals *totals) {
  run_one_tallied(stream, index, opts, totals, NULL);
}

static void run_many(uint64_t stream, unsigned count,
                     const oracle_case_opts *opts) {
  run_totals totals = {0, 0, 0};
  for (unsigned i = 0; i < count; i++) {
    run_one(stream, i, opts, &totals);
  }
  cr_assert_eq(totals.cases, count);
  /* The cases must have moved real bytes, not just planned nothing. */
  cr_assert_gt(totals.copies, 0, "no copies executed in %u cases", count);
  cr_assert_gt(totals.bytes, 0);
}

/* ---- format x memory style ---- */

ParameterizedTestParameters(oracle, format_x_memory) {
  static oracle_matrix_param params[ORACLE_MATRIX_SIZE];
  oracle_fill_matrix(params, false);
  return cr_make_param_array(oracle_matrix_param, params, ORACLE_MATRIX_SIZE);
}

/* 18 x 60 = 1080 cases (oracle_matrix_stream says which). */
ParameterizedTest(oracle_matrix_param *param, oracle, format_x_memory) {
  oracle_case_opts opts;
  unsigned count;
  uint64_t stream = oracle_matrix_stream(param, &opts, &count);
  run_many(stream, count, &opts);
}

ParameterizedTestParameters(oracle, single_tensor) {
  static oracle_matrix_param params[ORACLE_MATRIX_SIZE];
  oracle_fill_matrix(params, true);
  return cr_make_param_array(oracle_matrix_param, params, ORACLE_MATRIX_SIZE);
}

/* 18 x 6 = 108 cases with value_head_dim = 0 (MLA-style latent caches). */
ParameterizedTest(oracle_matrix_param *param, oracle, single_tensor) {
  oracle_case_opts opts;
  unsigned count;
  uint64_t stream = oracle_matrix_stream(param, &opts, &count);
  run_many(stream, count, &opts);
}

/* Paged and HND memory whose blocks are scattered in runs of one to three
 * (oracle_memory_opts.scatter_in_runs), every format: pages alike but
 * moved by other amounts block by block, where blocks, or one layer's
 * last and the next layer's first, lie back to back on some pages and
 * apart on others. A page planned from the page before must coalesce as
 * the reference does (lib/plan/sequences.c, sorted_region_free). */
Test(oracle, blocks_back_to_back_on_some_pages) {
  const oracle_memory_style styles[] = {ORACLE_MEM_PAGED_SMALL, ORACLE_MEM_HND};
  for (int f = RESHARD_FORMAT_PLHD; f <= RESHARD_FORMAT_HPLD; f++) {
    for (size_t s = 0; s < 2; s++) {
      oracle_case_opts opts;
      memset(&opts, 0, sizeof opts);
      opts.format = (reshard_format)f;
      opts.style = styles[s];
      opts.max_sources = 1;
      opts.scatter_in_runs = true;
      run_many(0x7700 + (uint64_t)f * 2 + s, 40, &opts);
    }
  }
}

/* Reader memory of one-page blocks in one region, laid out layer-major
 * (each group's blocks scattered on their own) or block-major (a block
 * holds every group's page): block-major pages lie alike in every group
 * (pages_aligned), and the planner moves each such page's ranges by the
 * first group's one amount (lib/plan/lower.c, note_aligned_page_shift).
 * Every format; both kinds must occur, or the test proves nothing. */
Test(oracle, page_blocks_aligned_across_groups_or_not) {
  page_block_tally tally = {0, 0};
  run_totals totals = {0, 0, 0};
  for (int f = RESHARD_FORMAT_PLHD; f <= RESHARD_FORMAT_HPLD; f++) {
    oracle_case_opts opts;
    memset(&opts, 0, sizeof opts);
    opts.format = (reshard_format)f;
    opts.style = ORACLE_MEM_PAGED_SMALL;
    opts.max_sources = 2;
    opts.page_blocks = true;
    for (unsigned i = 0; i < 60; i++) {
      run_one_tallied(0x7800 + (uint64_t)f, i, &opts, &totals, &tally);
    }
  }
  cr_assert_gt(tally.aligned, 10, "%u cases with aligned pages", tally.aligned);
  cr_assert_gt(tally.apart, 10, "%u cases with page blocks apart", tally.apart);
  cr_assert_gt(totals.copies, 0);
}

/* ---- explicit TP/PP/DP/replica changes ---- */

typedef struct topology_param {
  oracle_topology writer;
  oracle_topology reader;
  reshard_format format;
  unsigned id;
} topology_param;

static const oracle_topology topology_pairs[][2] = {
    /* writer {dp, pp, tp, groups}, reader {dp, pp, tp, groups} */
    {{1, 1, 1, 0}, {1, 1, 2, 0}},  /* TP1 -> TP2 */
    {{1, 1, 4, 0}, {1, 1, 1, 0}},  /* TP4 -> TP1 */
    {{1, 1, 8, 0}, {1, 2, 4, 0}},  /* TP8 (replicas) -> TP4 PP2 */
    {{1, 2, 2, 0}, {1, 1, 4, 0}},  /* TP2 PP2 -> TP4 */
    {{1, 4, 1, 0}, {1, 2, 2, 0}},  /* PP4 -> TP2 PP2 */
    {{2, 1, 2, 0}, {2, 1, 1, 0}},  /* DP2 TP2 -> DP2 TP1 */
    {{1, 1, 4, 2}, {1, 1, 3, 0}},  /* TP4 as 2x2 replicas -> TP3 */
    {{1, 1, 16, 0}, {1, 2, 4, 0}}, /* TP16 (replicas) -> TP4 PP2 */
    {{1, 1, 1, 0}, {1, 1, 16, 0}}, /* TP1 -> TP16 (replicas) */
    {{1, 3, 1, 0}, {2, 2, 2, 1}},  /* PP3 -> DP2 PP2 TP2 fully replicated */
};
#define TOPOLOGY_PAIRS (sizeof topology_pairs / sizeof topology_pairs[0])

ParameterizedTestParameters(oracle, topology_changes) {
  static topology_param params[TOPOLOGY_PAIRS * 3];
  size_t k = 0;
  for (size_t i = 0; i < TOPOLOGY_PAIRS; i++) {
    for (int f = RESHARD_FORMAT_PLHD; f <= RESHARD_FORMAT_HPLD; f++) {
      params[k].writer = topology_pairs[i][0];
      params[k].reader = topology_pairs[i][1];
      params[k].format = (reshard_format)f;
      params[k].id = (unsigned)k;
      k++;
    }
  }
  return cr_make_param_array(topology_param, params, TOPOLOGY_PAIRS * 3);
}

/* 30 x 8 = 240 cases; the memory style is random per case. */
ParameterizedTest(topology_param *param, oracle, topology_changes) {
  oracle_case_opts opts;
  memset(&opts, 0, sizeof opts);
  opts.format = param->format;
  opts.random_style = true;
  opts.max_sources = 2;
  opts.writer = &param->writer;
  opts.reader = &param->reader;
  run_many(300 + param->id, 8, &opts);
}

/* ---- source selection ---- */

/* 120 cases with up to 4 candidates per page, misses, preferences and
 * candidates whose descriptor differs; small random batch limits. */
Test(oracle, selection_and_small_batches) {
  oracle_case_opts opts;
  memset(&opts, 0, sizeof opts);
  opts.random_style = true;
  opts.max_sources = 4;
  opts.selection_twists = true;
  run_totals totals = {0, 0, 0};
  oracle_rng rng;
  oracle_rng_seed(&rng, oracle_case_seed(oracle_base_seed(), 400, 0));
  for (unsigned i = 0; i < 120; i++) {
    opts.format = (reshard_format)oracle_rng_between(&rng, RESHARD_FORMAT_PLHD,
                                                     RESHARD_FORMAT_HPLD);
    opts.max_batch_operations = oracle_rng_between(&rng, 1, 6);
    opts.max_batch_bytes = oracle_rng_between(&rng, 1, 400);
    run_one(401, i, &opts, &totals);
  }
  cr_assert_eq(totals.cases, 120);
  cr_assert_gt(totals.copies, 0);
}

/* Builds a default case with several sources for the hand-edited
 * selection tests; returns false when the seed gave fewer than `min`
 * sources (the caller tries the next seed). */
static bool selection_case(oracle_case *c, uint64_t seed, size_t min) {
  oracle_case_opts opts;
  memset(&opts, 0, sizeof opts);
  opts.format = RESHARD_FORMAT_LPHD;
  opts.random_style = true;
  opts.max_sources = 4;
  char msg[ORACLE_MSG_SIZE];
  bool ok = oracle_case_build(c, seed, &opts, msg, sizeof msg);
  cr_assert(ok, "%s", msg);
  if (c->source_count < min) {
    oracle_case_destroy(c);
    return false;
  }
  return true;
}

/* Every page bound to every source. */
static void bind_all_pages(oracle_case *c) {
  uint64_t pages = c->request.page_count;
  size_t n = c->source_count;
  size_t *start = reshard_arena_calloc(&c->arena, pages + 1, sizeof *start);
  size_t *cands = reshard_arena_calloc(&c->arena, pages * n, sizeof *cands);
  cr_assert(start != NULL && cands != NULL);
  for (uint64_t p = 0; p < pages; p++) {
    start[p] = p * n;
    for (size_t s = 0; s < n; s++) {
      cands[p * n + s] = (s + p) % n;
    }
  }
  start[pages] = pages * n;
  c->request.page_source_start = start;
  c->request.page_sources = cands;
}

Test(oracle, preferred_layout_is_chosen) {
  unsigned checked = 0;
  for (uint64_t i = 0; checked < 12 && i < 400; i++) {
    oracle_case c;
    if (!selection_case(&c, oracle_case_seed(oracle_base_seed(), 500, i), 2)) {
      continue;
    }
    bind_all_pages(&c);
    /* prefer an unknown id, then the last source, then the first */
    const char *preferred[3] = {
        "sha256:ffffffffffffffffffffffffffffffffffffffffffffffffffffffffffff"
        "ffff",
        c.layout_ids[c.source_count - 1], c.layout_ids[0]};
    c.request.preferred_layout_ids = preferred;
    c.request.preferred_count = 3;
    reshard_arena plan_arena;
    reshard_load_plan plan;
    char msg[ORACLE_MSG_SIZE];
    bool ok = oracle_case_run(&c, &plan_arena, &plan, NULL, msg, sizeof msg);
    bool all_last = ok && plan.hit_pages == c.request.page_count;
    for (uint64_t p = 0; all_last && p < plan.hit_pages; p++) {
      all_last = plan.page_source[p] == c.source_count - 1;
    }
    oracle_plan_release(&c, &plan_arena, &plan);
    oracle_case_destroy(&c);
    cr_assert(ok, "%s", msg);
    cr_assert(all_last, "seed index %" PRIu64 ": preferred layout not chosen",
              i);
    checked++;
  }
  cr_assert_eq(checked, 12, "too few multi-source cases generated");
}

/* Guards against a vacuous selection check: on a page with several
 * candidates, any other choice than the plan's (which the oracle accepted)
 * must be rejected unless it names the same layout. */
Test(oracle, selection_check_rejects_other_choices) {
  unsigned checked = 0;
  for (uint64_t i = 0; checked < 10 && i < 400; i++) {
    oracle_case c;
    if (!selection_case(&c, oracle_case_seed(oracle_base_seed(), 550, i), 2)) {
      continue;
    }
    bind_all_pages(&c);
    reshard_arena plan_arena;
    reshard_load_plan plan;
    char msg[ORACLE_MSG_SIZE];
    bool ok = oracle_case_run(&c, &plan_arena, &plan, NULL, msg, sizeof msg);
    bool all_rejected = true;
    if (ok) {
      size_t chosen = plan.page_source[0];
      for (size_t s = 0; s < c.source_count; s++) {
        if (s == chosen) {
          continue;
        }
        plan.page_source[0] = s;
        char other[ORACLE_MSG_SIZE];
        all_rejected =
            all_rejected &&
            !oracle_check_selection(&c.request, &plan, other, sizeof other);
      }
      plan.page_source[0] = chosen;
    }
    oracle_plan_release(&c, &plan_arena, &plan);
    oracle_case_destroy(&c);
    cr_assert(ok, "%s", msg);
    cr_assert(all_rejected, "case %" PRIu64 ": another choice was accepted", i);
    checked++;
  }
  cr_assert_eq(checked, 10);
}

Test(oracle, miss_ends_hit_prefix) {
  for (uint64_t i = 0; i < 24; i++) {
    oracle_case c;
    selection_case(&c, oracle_case_seed(oracle_base_seed(), 600, i), 1);
    bind_all_pages(&c);
    uint64_t pages = c.request.page_count;
    uint64_t miss = i % pages; /* includes a miss on the very first page */
    size_t n = c.source_count;
    /* Page `miss` loses its candidates; later pages keep theirs. */
    size_t *start = (size_t *)c.request.page_source_start;
    size_t *cands = (size_t *)c.request.page_sources;
    size_t w = 0;
    for (uint64_t p = 0; p < pages; p++) {
      size_t first = w;
      if (p != miss) {
        for (size_t s = 0; s < n; s++) {
          cands[w++] = cands[start[p] + s];
        }
      }
      start[p] = first;
    }
    start[pages] = w;
    reshard_arena plan_arena;
    reshard_load_plan plan;
    char msg[ORACLE_MSG_SIZE];
    bool ok = oracle_case_run(&c, &plan_arena, &plan, NULL, msg, sizeof msg);
    uint64_t hits = plan.hit_pages;
    size_t copies = plan.copy_count;
    oracle_plan_release(&c, &plan_arena, &plan);
    oracle_case_destroy(&c);
    cr_assert(ok, "%s", msg);
    cr_assert_eq(hits, miss, "hit_pages %" PRIu64 ", miss at %" PRIu64, hits,
                 miss);
    if (miss == 0) {
      cr_assert_eq(copies, 0, "an empty hit prefix must plan no copies");
    }
  }
}

/* Adds a copy of source 0 whose descriptor differs in one field. */
static size_t add_mismatched_source(oracle_case *c, int field) {
  size_t i = c->source_count;
  cr_assert_lt(i, ORACLE_MAX_SOURCES);
  c->layouts[i] = c->layouts[0];
  c->layouts[i].descriptor =
      oracle_descriptor_clone(&c->arena, NULL, &c->layouts[0].descriptor);
  if (field == 0) {
    c->layouts[i].descriptor.dtype = "int-other";
  } else {
    c->layouts[i].descriptor.page_size *= 2;
  }
  reshard_error err;
  reshard_error_clear(&err);
  cr_assert_eq(reshard_layout_id(&c->layouts[i], c->layout_ids[i], &err),
               RESHARD_OK, "%s", err.message);
  c->sources[i].layout = &c->layouts[i];
  c->sources[i].layout_id = c->layout_ids[i];
  c->sources[i].join = NULL;
  c->source_count++;
  c->request.source_count = c->source_count;
  return i;
}

Test(oracle, first_page_with_other_descriptor_fails) {
  for (uint64_t i = 0; i < 8; i++) {
    oracle_case c;
    selection_case(&c, oracle_case_seed(oracle_base_seed(), 700, i), 1);
    int field = (int)(i % 2);
    size_t bad = add_mismatched_source(&c, field);
    size_t *start = (size_t *)c.request.page_source_start;
    size_t *cands =
        reshard_arena_calloc(&c.arena, c.request.page_count + 1, sizeof *cands);
    cr_assert(cands != NULL);
    /* page 0: only the mismatched layout; the others: source 0 */
    for (uint64_t p = 0; p < c.request.page_count; p++) {
      start[p] = p;
      cands[p] = p == 0 ? bad : 0;
    }
    start[c.request.page_count] = c.request.page_count;
    c.request.page_sources = cands;
    reshard_arena plan_arena;
    reshard_arena_init(&plan_arena, 0);
    reshard_load_plan plan;
    memset(&plan, 0, sizeof plan);
    reshard_error err;
    reshard_error_clear(&err);
    reshard_status st = reshard_plan_load(&c.request, &plan_arena, &plan, &err);
    if (st == RESHARD_OK) {
      reshard_load_plan_free_joins(&plan, c.source_count);
    }
    reshard_arena_destroy(&plan_arena);
    oracle_case_destroy(&c);
    cr_assert_eq(st, RESHARD_FAILED_PRECONDITION, "status %s: %s",
                 reshard_status_name(st), err.message);
    const char *name = field == 0 ? "dtype" : "page_size";
    cr_assert(strstr(err.message, name) != NULL,
              "message \"%s\" does not name %s", err.message, name);
  }
}

Test(oracle, other_descriptor_candidates_are_ignored) {
  for (uint64_t i = 0; i < 16; i++) {
    oracle_case c;
    selection_case(&c, oracle_case_seed(oracle_base_seed(), 800, i), 1);
    size_t bad = add_mismatched_source(&c, (int)(i % 2));
    uint64_t pages = c.request.page_count;
    /* every page: the mismatched layout first, then source 0; the last page
     * (when there are several) only the mismatched one: a miss */
    size_t *start = reshard_arena_calloc(&c.arena, pages + 1, sizeof *start);
    size_t *cands = reshard_arena_calloc(&c.arena, 2 * pages, sizeof *cands);
    cr_assert(start != NULL && cands != NULL);
    size_t w = 0;
    for (uint64_t p = 0; p < pages; p++) {
      start[p] = w;
      cands[w++] = bad;
      if (p == 0 || p + 1 < pages) {
        cands[w++] = 0;
      }
    }
    start[pages] = w;
    c.request.page_source_start = start;
    c.request.page_sources = cands;
    /* even when preferred, a layout with another descriptor is not used */
    const char *preferred[1] = {c.layout_ids[bad]};
    c.request.preferred_layout_ids = preferred;
    c.request.preferred_count = 1;
    reshard_arena plan_arena;
    reshard_load_plan plan;
    char msg[ORACLE_MSG_SIZE];
    bool ok = oracle_case_run(&c, &plan_arena, &plan, NULL, msg, sizeof msg);
    uint64_t hits = plan.hit_pages;
    oracle_plan_release(&c, &plan_arena, &plan);
    oracle_case_destroy(&c);
    cr_assert(ok, "%s", msg);
    cr_assert_eq(hits, pages == 1 ? 1 : pages - 1);
  }
}

/* A participant whose pipeline stage holds no layers (more stages than
 * layers) has nothing to load: the plan succeeds with every page a hit and
 * no copies. */
Test(oracle, participant_without_layers_plans_nothing) {
  for (uint64_t i = 0; i < 6; i++) {
    oracle_case c;
    selection_case(&c, oracle_case_seed(oracle_base_seed(), 650, i), 1);
    oracle_topology t = {1, c.descriptor.layer_count + 1, 2, 0};
    oracle_build_placement(&c.arena, NULL, &c.descriptor, &t, "e", &c.reader);
    reshard_error err;
    reshard_error_clear(&err);
    reshard_status st = reshard_placement_normalize(&c.reader, &c.arena, &err);
    cr_assert_eq(st, RESHARD_OK, "%s", err.message);
    const reshard_placement_part *empty = NULL;
    for (size_t k = 0; k < c.reader.part_count; k++) {
      if (c.reader.parts[k].layer_count == 0) {
        empty = &c.reader.parts[k];
      }
    }
    cr_assert(empty != NULL);
    /* prebuilt joins were made for the old participant */
    for (size_t s = 0; s < c.source_count; s++) {
      c.sources[s].join = NULL;
    }
    static reshard_region region = {"spare", 64, 64};
    memset(&c.binding, 0, sizeof c.binding);
    c.binding.participant_id = empty->participant_id;
    c.binding.endpoint = "oracle://empty";
    c.binding.regions = &region;
    c.binding.region_count = 1;
    c.participant = empty;
    c.request.has_dp_rank = false;
    reshard_arena plan_arena;
    reshard_load_plan plan;
    char msg[ORACLE_MSG_SIZE];
    bool ok = oracle_case_run(&c, &plan_arena, &plan, NULL, msg, sizeof msg);
    uint64_t hits = plan.hit_pages, pages = c.request.page_count;
    size_t copies = plan.copy_count;
    oracle_plan_release(&c, &plan_arena, &plan);
    oracle_case_destroy(&c);
    cr_assert(ok, "%s", msg);
    cr_assert_eq(hits, pages);
    cr_assert_eq(copies, 0);
  }
}

/* ---- SPEC §6 scenarios, byte-exact at reduced page counts ---- */

static void run_scenario(int scenario, uint64_t pages,
                         const size_t *participants, size_t count,
                         bool by_sequences) {
  for (size_t i = 0; i < count; i++) {
    oracle_case c;
    char msg[ORACLE_MSG_SIZE];
    bool ok = oracle_scenario_build(&c, scenario, pages, participants[i], msg,
                                    sizeof msg);
    oracle_exec_stats stats;
    memset(&stats, 0, sizeof stats);
    uint64_t hits = 0, sequence_pages = 0;
    if (ok) {
      reshard_arena plan_arena;
      reshard_load_plan plan;
      ok = oracle_case_run(&c, &plan_arena, &plan, &stats, msg, sizeof msg);
      hits = plan.hit_pages;
      sequence_pages = plan.sequence_pages;
      oracle_plan_release(&c, &plan_arena, &plan);
    }
    const reshard_placement_part *part = c.participant;
    uint64_t expect_bytes = 0;
    if (ok) {
      uint64_t hb_sum =
          (c.descriptor.key_head_dim + c.descriptor.value_head_dim) *
          c.descriptor.itemsize;
      expect_bytes = pages * c.descriptor.page_size * part->layer_count *
                     part->head_count * hb_sum;
    }
    oracle_case_destroy(&c);
    cr_assert(ok, "S%d participant #%zu: %s", scenario, participants[i], msg);
    cr_assert_eq(hits, pages);
    /* Which lowering the pages took, so the byte-exact check above proves
     * that one: strided sequences (lib/plan/sequences.c), or copy by copy
     * where a page's blocks are single copies and the plan is too short
     * for its pages to be taken from the page before (S5 over 2 pages: as
     * many sequences as copies, nothing to gain; over 8, each page is the
     * one before it with other blocks). */
    cr_assert_eq(sequence_pages, by_sequences ? pages : 0,
                 "S%d: %" PRIu64 " of %" PRIu64 " pages lowered as sequences",
                 scenario, sequence_pages, pages);
    /* the participant's whole share of every page arrived */
    cr_assert_eq(stats.bytes, expect_bytes,
                 "S%d: copied %" PRIu64 " bytes, expected %" PRIu64, scenario,
                 stats.bytes, expect_bytes);
  }
}

Test(oracle, scenario_s1_llama3_8b) {
  const size_t who[] = {0, 1};
  run_scenario(1, 4, who, 2, true);
}

Test(oracle, scenario_s2_llama3_70b) {
  const size_t who[] = {0, 5};
  run_scenario(2, 2, who, 2, true);
}

Test(oracle, scenario_s3_qwen2_5_72b) {
  const size_t who[] = {0, 1, 15};
  run_scenario(3, 2, who, 3, true);
}

Test(oracle, scenario_s4_deepseek_v3) {
  const size_t who[] = {0, 7};
  run_scenario(4, 3, who, 2, true);
}

Test(oracle, scenario_s5_llama3_405b) {
  const size_t who[] = {0, 31};
  run_scenario(5, 2, who, 2, false);
  run_scenario(5, 8, who, 2, true);
}

/* A contiguous reader (one range per layer and component over every
 * page) meets each page further into the same ranges: from the second
 * page on, each is the page before moved by a page's rows, so it is not
 * lowered again. The plan is executed byte for byte as any other. */
Test(oracle, scenario_contiguous_readers_take_the_page_before) {
  const int scenarios[] = {1, 5};
  for (size_t i = 0; i < sizeof scenarios / sizeof scenarios[0]; i++) {
    oracle_case c;
    char msg[ORACLE_MSG_SIZE];
    cr_assert(oracle_scenario_build_memory(&c, scenarios[i], 8, 0,
                                           ORACLE_MEM_CONTIGUOUS, msg,
                                           sizeof msg),
              "%s", msg);
    reshard_arena plan_arena;
    reshard_load_plan plan;
    bool ok = oracle_case_run(&c, &plan_arena, &plan, NULL, msg, sizeof msg);
    uint64_t hits = plan.hit_pages, sequence_pages = plan.sequence_pages,
             reused = plan.reused_pages;
    if (ok) {
      oracle_plan_release(&c, &plan_arena, &plan);
    }
    oracle_case_destroy(&c);
    cr_assert(ok, "S%d contiguous: %s", scenarios[i], msg);
    cr_assert_eq(hits, 8);
    cr_assert_eq(sequence_pages, 8, "S%d contiguous: %" PRIu64 " of 8 pages",
                 scenarios[i], sequence_pages);
    cr_assert_eq(reused, 7, "S%d contiguous: %" PRIu64 " of 7 pages reused",
                 scenarios[i], reused);
  }
}

/* ---- the oracle itself ---- */

/* Guards against an oracle that accepts anything: a corrupted plan must be
 * rejected. */
Test(oracle, rejects_corrupted_plans) {
  unsigned rejected = 0;
  for (uint64_t i = 0; i < 8; i++) {
    oracle_case_opts opts;
    memset(&opts, 0, sizeof opts);
    opts.format = (reshard_format)(1 + i % 3);
    opts.style = (oracle_memory_style)(i % ORACLE_MEM_STYLE_COUNT);
    oracle_case c;
    char msg[ORACLE_MSG_SIZE];
    cr_assert(oracle_case_build(&c,
                                oracle_case_seed(oracle_base_seed(), 900, i),
                                &opts, msg, sizeof msg),
              "%s", msg);
    reshard_arena plan_arena;
    reshard_load_plan plan;
    bool ok = oracle_case_run(&c, &plan_arena, &plan, NULL, msg, sizeof msg);
    cr_assert(ok, "%s", msg);
    cr_assert_gt(plan.copy_count, 0);
    reshard_copy saved = plan.copies[0];
    /* shift the destination by one element */
    plan.copies[0].region_offset += c.descriptor.itemsize;
    bool shifted = oracle_execute(&c.request, &plan, NULL, msg, sizeof msg);
    plan.copies[0] = saved;
    /* drop one byte */
    plan.copies[0].nbytes -= 1;
    plan.bytes -= 1;
    plan.batches[0].bytes -= 1;
    bool shortened = oracle_execute(&c.request, &plan, NULL, msg, sizeof msg);
    plan.copies[0] = saved;
    plan.bytes += 1;
    plan.batches[0].bytes += 1;
    /* drop the last copy */
    reshard_batch *last = &plan.batches[plan.batch_count - 1];
    reshard_copy dropped = plan.copies[plan.copy_count - 1];
    last->count--;
    last->bytes -= dropped.nbytes;
    plan.copy_count--;
    plan.operations--;
    plan.bytes -= dropped.nbytes;
    bool truncated = oracle_execute(&c.request, &plan, NULL, msg, sizeof msg);
    last->count++;
    last->bytes += dropped.nbytes;
    plan.copy_count++;
    plan.operations++;
    plan.bytes += dropped.nbytes;
    /* exchange the sources of two equal-sized copies */
    bool exchanged = false;
    for (size_t k = 1; k < plan.copy_count; k++) {
      reshard_copy *a = &plan.copies[0], *b = &plan.copies[k];
      if (a->nbytes == b->nbytes &&
          (a->part_offset != b->part_offset || a->part_index != b->part_index ||
           a->page_index != b->page_index)) {
        reshard_copy x = *a, y = *b;
        a->part_offset = y.part_offset;
        a->part_index = y.part_index;
        a->page_index = y.page_index;
        b->part_offset = x.part_offset;
        b->part_index = x.part_index;
        b->page_index = x.page_index;
        exchanged = oracle_execute(&c.request, &plan, NULL, msg, sizeof msg);
        *a = x;
        *b = y;
        break;
      }
    }
    bool intact = oracle_execute(&c.request, &plan, NULL, msg, sizeof msg);
    oracle_plan_release(&c, &plan_arena, &plan);
    oracle_case_destroy(&c);
    cr_assert(!shifted, "a shifted copy was accepted");
    cr_assert(!shortened, "a shortened copy was accepted");
    cr_assert(!truncated, "a plan missing its last copy was accepted");
    cr_assert(!exchanged, "copies with exchanged sources were accepted");
    cr_assert(intact, "restored plan rejected: %s", msg);
    rejected++;
  }
  cr_assert_eq(rejected, 8);
}
