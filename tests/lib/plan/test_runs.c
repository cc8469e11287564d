/* Tests lib/plan/runs.c (SPEC §2.2 step 7) on every oracle scenario: the random
 * format x memory, single-tensor, topology and small-batch cases and the
 * SPEC §6 scenarios, each with the reader's memory as generated and again
 * with one region per (layer, component) as vLLM allocates. The explicit
 * plan is executed by the oracle; then, per batch, the runs must expand
 * back to exactly that batch, match an independent greedy reference fold,
 * never let a run take the next run's first copy, and agree with the
 * batch's counts and bytes. */
#include <criterion/criterion.h>
#include <criterion/parameterized.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "oracle.h"
#include "plan/plan_internal.h"
#include "reshard/runs.h"

/* ---- an independent reference, written from the SPEC text ---- */

static int cmp_u64(uint64_t a, uint64_t b) {
  return (a > b) - (a < b);
}

/* The explicit key (page, part, part_offset, region, region_offset). */
static int explicit_order(const void *pa, const void *pb) {
  const reshard_copy *a = pa, *b = pb;
  int c;
  if ((c = cmp_u64(a->page_index, b->page_index)) ||
      (c = cmp_u64(a->part_index, b->part_index)) ||
      (c = cmp_u64(a->part_offset, b->part_offset)) ||
      (c = cmp_u64(a->region_index, b->region_index)) ||
      (c = cmp_u64(a->region_offset, b->region_offset))) {
    return c;
  }
  return cmp_u64(a->nbytes, b->nbytes);
}

typedef struct positioned {
  reshard_copy copy;
  size_t position; /* index in the batch */
} positioned;

/* Class (page, part, region, nbytes), then increasing part offset. */
static int class_order(const void *pa, const void *pb) {
  const reshard_copy *a = &((const positioned *)pa)->copy;
  const reshard_copy *b = &((const positioned *)pb)->copy;
  int c;
  if ((c = cmp_u64(a->page_index, b->page_index)) ||
      (c = cmp_u64(a->part_index, b->part_index)) ||
      (c = cmp_u64(a->region_index, b->region_index)) ||
      (c = cmp_u64(a->nbytes, b->nbytes))) {
    return c;
  }
  return cmp_u64(a->part_offset, b->part_offset);
}

static bool same_class(const reshard_copy *a, const reshard_copy *b) {
  return a->page_index == b->page_index && a->part_index == b->part_index &&
         a->region_index == b->region_index && a->nbytes == b->nbytes;
}

/* Pointers to runs: class, then first part offset. */
static int run_class_order(const void *pa, const void *pb) {
  positioned a = {(*(const reshard_run *const *)pa)->first, 0};
  positioned b = {(*(const reshard_run *const *)pb)->first, 0};
  return class_order(&a, &b);
}

typedef struct ref_run {
  reshard_run run;
  size_t position; /* of its first copy */
} ref_run;

static int position_order(const void *pa, const void *pb) {
  const ref_run *a = pa, *b = pb;
  return (a->position > b->position) - (a->position < b->position);
}

/* Step 7 literally: classes, each in increasing part offset, folded
 * greedily; entries ordered by their first copy. Returns the run count. */
static size_t reference_fold(const reshard_copy *copies, size_t count,
                             ref_run *out) {
  positioned *sorted = malloc((count + 1) * sizeof *sorted);
  cr_assert_not_null(sorted);
  for (size_t i = 0; i < count; i++) {
    sorted[i] = (positioned){copies[i], i};
  }
  qsort(sorted, count, sizeof *sorted, class_order);
  size_t n = 0;
  for (size_t i = 0; i < count; i++) {
    const reshard_copy *c = &sorted[i].copy;
    reshard_run *cur = n > 0 ? &out[n - 1].run : NULL;
    if (cur != NULL && same_class(&cur->first, c)) {
      if (cur->count == 1 && c->region_offset >= cur->first.region_offset) {
        cur->part_stride = c->part_offset - cur->first.part_offset;
        cur->region_stride = c->region_offset - cur->first.region_offset;
        cur->count = 2;
        continue;
      }
      if (cur->count > 1 &&
          c->part_offset ==
              cur->first.part_offset + cur->count * cur->part_stride &&
          c->region_offset ==
              cur->first.region_offset + cur->count * cur->region_stride) {
        cur->count++;
        continue;
      }
    }
    out[n++] = (ref_run){{*c, 1, 0, 0}, sorted[i].position};
  }
  free(sorted);
  qsort(out, n, sizeof *out, position_order);
  return n;
}

/* ---- checks ---- */

static void check_batch(const reshard_copy *copies, const reshard_batch *batch,
                        const reshard_run *runs, size_t run_count, size_t b) {
  /* Expanding and sorting gives back exactly the explicit batch. */
  size_t expanded = 0;
  uint64_t bytes = 0;
  for (size_t r = 0; r < run_count; r++) {
    cr_assert_geq(runs[r].count, 1, "batch %zu run %zu: empty run", b, r);
    if (runs[r].count == 1) {
      cr_assert(runs[r].part_stride == 0 && runs[r].region_stride == 0,
                "batch %zu run %zu: a single copy has strides 0", b, r);
    }
    expanded += runs[r].count;
    bytes += runs[r].count * runs[r].first.nbytes;
  }
  cr_assert_eq(expanded, batch->count, "batch %zu: %zu copies in runs, %zu", b,
               expanded, batch->count);
  cr_assert_eq(bytes, batch->bytes, "batch %zu: bytes differ", b);
  reshard_copy *got = malloc((expanded + 1) * sizeof *got);
  reshard_copy *want = malloc((expanded + 1) * sizeof *want);
  cr_assert(got && want);
  size_t k = 0;
  for (size_t r = 0; r < run_count; r++) {
    for (uint64_t i = 0; i < runs[r].count; i++) {
      got[k++] = reshard_run_copy(&runs[r], i);
    }
  }
  memcpy(want, copies + batch->first, expanded * sizeof *want);
  qsort(got, expanded, sizeof *got, explicit_order);
  qsort(want, expanded, sizeof *want, explicit_order);
  for (size_t i = 0; i < expanded; i++) {
    cr_assert(memcmp(&got[i], &want[i], sizeof got[i]) == 0,
              "batch %zu: expanded copy %zu differs from the explicit plan", b,
              i);
  }
  free(got);
  free(want);

  /* Entries are ordered by the explicit key of their first copy. */
  for (size_t r = 1; r < run_count; r++) {
    cr_assert_lt(explicit_order(&runs[r - 1].first, &runs[r].first), 0,
                 "batch %zu: run %zu is out of order", b, r);
  }

  /* Greedy: within a class, no run could have taken the next one's first
   * copy. Runs sorted by class then part offset put each run next to the
   * one after it in its class. */
  const reshard_run **by_class = malloc((run_count + 1) * sizeof *by_class);
  cr_assert_not_null(by_class);
  for (size_t r = 0; r < run_count; r++) {
    by_class[r] = &runs[r];
  }
  qsort(by_class, run_count, sizeof *by_class, run_class_order);
  for (size_t r = 0; r + 1 < run_count; r++) {
    const reshard_run *a = by_class[r];
    const reshard_copy *next = &by_class[r + 1]->first;
    if (!same_class(&a->first, next)) {
      continue;
    }
    if (a->count == 1) {
      cr_assert_lt(next->region_offset, a->first.region_offset,
                   "batch %zu: a run could have taken the next one", b);
    } else {
      cr_assert(!(next->part_offset ==
                      a->first.part_offset + a->count * a->part_stride &&
                  next->region_offset ==
                      a->first.region_offset + a->count * a->region_stride),
                "batch %zu: a run could have taken the next one", b);
    }
  }
  free(by_class);

  /* The same runs as the reference fold. */
  ref_run *ref = malloc((batch->count + 1) * sizeof *ref);
  cr_assert_not_null(ref);
  size_t ref_count = reference_fold(copies + batch->first, batch->count, ref);
  cr_assert_eq(ref_count, run_count, "batch %zu: %zu runs, the reference %zu",
               b, run_count, ref_count);
  for (size_t r = 0; r < run_count; r++) {
    cr_assert(memcmp(&ref[r].run, &runs[r], sizeof runs[r]) == 0,
              "batch %zu: run %zu differs from the reference", b, r);
  }
  free(ref);
}

/* Checks a plan made with request.runs; returns the run count. */
static size_t check_plan_runs(const reshard_load_plan *plan) {
  const reshard_runs *runs = &plan->runs;
  cr_assert_eq(runs->batch_count, plan->batch_count);
  if (plan->copy_count > 0) {
    cr_assert_not_null(runs->runs);
  }
  cr_assert_eq(runs->batch_first[0], 0);
  cr_assert_eq(runs->batch_first[runs->batch_count], runs->run_count);
  for (size_t b = 0; b < plan->batch_count; b++) {
    size_t first = runs->batch_first[b], end = runs->batch_first[b + 1];
    cr_assert_leq(first, end);
    check_batch(plan->copies, &plan->batches[b], runs->runs + first,
                end - first, b);
  }
  /* The library's public fold gives the same runs. */
  reshard_arena arena;
  reshard_arena_init(&arena, 0);
  reshard_runs again;
  reshard_error err;
  cr_assert_eq(reshard_runs_fold(plan->copies, plan->batches, plan->batch_count,
                                 &arena, &again, &err),
               RESHARD_OK, "%s", err.message);
  cr_assert_eq(again.run_count, runs->run_count);
  cr_assert(again.run_count == 0 ||
            memcmp(again.runs, runs->runs,
                   again.run_count * sizeof again.runs[0]) == 0);
  reshard_arena_destroy(&arena);
  return runs->run_count;
}

/* Gives every (region, layer, component) its own region at its own
 * address, offsets unchanged: the reader memory vLLM allocates, one tensor
 * per layer and component. */
static void region_per_group(oracle_case *c) {
  reshard_binding *binding = &c->binding;
  size_t count = binding->range_count;
  reshard_region *regions =
      RESHARD_ARENA_NEW(&c->arena, reshard_region, count + 1);
  size_t region_count = 0;
  for (size_t i = 0; i < count; i++) {
    reshard_binding_range *range = &binding->ranges[i];
    size_t source = 0;
    while (strcmp(binding->regions[source].region_id, range->region_id) != 0) {
      source++;
    }
    char id[96];
    snprintf(id, sizeof id, "%s/L%" PRIu64 "/%c", range->region_id,
             range->global_layer_id,
             range->component == RESHARD_COMPONENT_KEY ? 'K' : 'V');
    size_t r = 0;
    while (r < region_count && strcmp(regions[r].region_id, id) != 0) {
      r++;
    }
    if (r == region_count) {
      regions[r] = binding->regions[source];
      regions[r].region_id = reshard_arena_strdup(&c->arena, id);
      regions[r].address += (uint64_t)(r + 1) << 40;
      region_count++;
    }
    range->region_id = regions[r].region_id;
  }
  binding->regions = regions;
  binding->region_count = region_count;
}

typedef struct runs_totals {
  uint64_t copies;
  uint64_t runs;
} runs_totals;

/* Plans `c` with and without runs; the explicit plan must pass the oracle
 * and be the same either way, and the runs pass every check above. */
static void run_case(oracle_case *c, const char *what, runs_totals *totals) {
  char msg[ORACLE_MSG_SIZE];
  reshard_arena explicit_arena, runs_arena;
  reshard_load_plan explicit_plan, runs_plan;
  oracle_exec_stats stats;
  c->request.runs = false;
  bool ok = oracle_case_run(c, &explicit_arena, &explicit_plan, &stats, msg,
                            sizeof msg);
  cr_assert(ok, "%s: %s", what, msg);
  cr_assert_eq(explicit_plan.runs.runs, NULL);
  /* The oracle executed the explicit plan; the runs plan must carry the
   * very same copies. */
  c->request.runs = true;
  reshard_arena_init(&runs_arena, 0);
  reshard_error err;
  cr_assert_eq(reshard_plan_load(&c->request, &runs_arena, &runs_plan, &err),
               RESHARD_OK, "%s: %s", what, err.message);
  cr_assert_eq(runs_plan.copy_count, explicit_plan.copy_count);
  cr_assert_eq(runs_plan.batch_count, explicit_plan.batch_count);
  cr_assert(explicit_plan.copy_count == 0 ||
                memcmp(runs_plan.copies, explicit_plan.copies,
                       explicit_plan.copy_count * sizeof(reshard_copy)) == 0,
            "%s: runs changed the explicit plan", what);
  totals->runs += check_plan_runs(&runs_plan);
  totals->copies += runs_plan.copy_count;
  /* Asked for runs only (as the daemon asks), the plan need not write the
   * copies, and its runs and batches are the same. */
  reshard_arena only_arena;
  reshard_load_plan only_plan;
  reshard_arena_init(&only_arena, 0);
  c->request.omit_copies = true;
  cr_assert_eq(reshard_plan_load(&c->request, &only_arena, &only_plan, &err),
               RESHARD_OK, "%s: %s", what, err.message);
  c->request.omit_copies = false;
  cr_assert_eq(only_plan.copies, NULL);
  cr_assert_eq(only_plan.runs.run_count, runs_plan.runs.run_count, "%s", what);
  cr_assert(runs_plan.runs.run_count == 0 ||
                memcmp(only_plan.runs.runs, runs_plan.runs.runs,
                       runs_plan.runs.run_count * sizeof(reshard_run)) == 0,
            "%s: runs differ when only runs are asked for", what);
  cr_assert_eq(only_plan.batch_count, runs_plan.batch_count);
  for (size_t b = 0; b < runs_plan.batch_count; b++) {
    cr_assert_eq(only_plan.batches[b].count, runs_plan.batches[b].count);
    cr_assert_eq(only_plan.batches[b].bytes, runs_plan.batches[b].bytes);
    cr_assert_eq(only_plan.runs.batch_first[b], runs_plan.runs.batch_first[b]);
  }
  oracle_plan_release(c, &only_arena, &only_plan);
  oracle_plan_release(c, &runs_arena, &runs_plan);
  oracle_plan_release(c, &explicit_arena, &explicit_plan);
}

/* Cases first .. first + count - 1 of the oracle suite's stream `stream`
 * (tests/lib/plan/test_oracle.c builds the same cases from the same seeds). */
static runs_totals run_seeded(uint64_t stream, unsigned first, unsigned count,
                              const oracle_case_opts *opts) {
  runs_totals totals = {0, 0};
  for (unsigned i = first; i < first + count; i++) {
    uint64_t seed = oracle_case_seed(oracle_base_seed(), stream, i);
    for (int split = 0; split < 2; split++) {
      oracle_case c;
      char msg[ORACLE_MSG_SIZE];
      char what[160];
      snprintf(what, sizeof what,
               "RESHARD_ORACLE_SEED=0x%016" PRIx64 " stream %" PRIu64
               " case %u%s",
               oracle_base_seed(), stream, i,
               split ? ", one region per (layer, component)" : "");
      cr_assert(oracle_case_build(&c, seed, opts, msg, sizeof msg), "%s: %s",
                what, msg);
      if (split) {
        region_per_group(&c);
      }
      run_case(&c, what, &totals);
      oracle_case_destroy(&c);
    }
  }
  return totals;
}

/* The cases must have planned real copies, not just nothing. */
static void assert_planned(runs_totals totals) {
  cr_assert_gt(totals.copies, 0, "no copies planned");
  cr_assert_gt(totals.runs, 0);
}

/* ---- the random oracle cases ---- */

ParameterizedTestParameters(runs, format_x_memory) {
  static oracle_matrix_param params[ORACLE_MATRIX_SIZE];
  oracle_fill_matrix(params, false);
  return cr_make_param_array(oracle_matrix_param, params, ORACLE_MATRIX_SIZE);
}

/* The oracle suite's streams, so these are the very cases it executes. */
ParameterizedTest(oracle_matrix_param *param, runs, format_x_memory) {
  oracle_case_opts opts;
  unsigned count;
  uint64_t stream = oracle_matrix_stream(param, &opts, &count);
  assert_planned(run_seeded(stream, 0, count, &opts));
}

ParameterizedTestParameters(runs, single_tensor) {
  static oracle_matrix_param params[ORACLE_MATRIX_SIZE];
  oracle_fill_matrix(params, true);
  return cr_make_param_array(oracle_matrix_param, params, ORACLE_MATRIX_SIZE);
}

ParameterizedTest(oracle_matrix_param *param, runs, single_tensor) {
  oracle_case_opts opts;
  unsigned count;
  uint64_t stream = oracle_matrix_stream(param, &opts, &count);
  assert_planned(run_seeded(stream, 0, count, &opts));
}

static const oracle_topology topology_pairs[][2] = {
    {{1, 1, 1, 0}, {1, 1, 2, 0}},  {{1, 1, 4, 0}, {1, 1, 1, 0}},
    {{1, 1, 8, 0}, {1, 2, 4, 0}},  {{1, 2, 2, 0}, {1, 1, 4, 0}},
    {{1, 4, 1, 0}, {1, 2, 2, 0}},  {{2, 1, 2, 0}, {2, 1, 1, 0}},
    {{1, 1, 4, 2}, {1, 1, 3, 0}},  {{1, 1, 16, 0}, {1, 2, 4, 0}},
    {{1, 1, 1, 0}, {1, 1, 16, 0}}, {{1, 3, 1, 0}, {2, 2, 2, 1}},
};

Test(runs, topology_changes) {
  size_t pairs = sizeof topology_pairs / sizeof topology_pairs[0];
  for (size_t i = 0; i < pairs; i++) {
    for (int f = RESHARD_FORMAT_PLHD; f <= RESHARD_FORMAT_HPLD; f++) {
      oracle_case_opts opts;
      memset(&opts, 0, sizeof opts);
      opts.format = (reshard_format)f;
      opts.random_style = true;
      opts.max_sources = 2;
      opts.writer = &topology_pairs[i][0];
      opts.reader = &topology_pairs[i][1];
      assert_planned(run_seeded(300 + i * 3 + (uint64_t)(f - 1), 0, 8, &opts));
    }
  }
}

/* The oracle's selection_and_small_batches cases: up to four candidate
 * layouts, misses, and tiny batches that split classes and copies at
 * every turn, so no run may cross a batch. */
Test(runs, small_batches) {
  oracle_rng rng;
  oracle_rng_seed(&rng, oracle_case_seed(oracle_base_seed(), 400, 0));
  runs_totals all = {0, 0};
  for (unsigned i = 0; i < 120; i++) {
    oracle_case_opts opts;
    memset(&opts, 0, sizeof opts);
    opts.random_style = true;
    opts.max_sources = 4;
    opts.selection_twists = true;
    opts.format = (reshard_format)oracle_rng_between(&rng, RESHARD_FORMAT_PLHD,
                                                     RESHARD_FORMAT_HPLD);
    opts.max_batch_operations = oracle_rng_between(&rng, 1, 6);
    opts.max_batch_bytes = oracle_rng_between(&rng, 1, 400);
    runs_totals t = run_seeded(401, i, 1, &opts);
    all.copies += t.copies;
    all.runs += t.runs;
  }
  assert_planned(all);
}

/* ---- SPEC §6 scenarios ---- */

static runs_totals run_scenario(int scenario, uint64_t pages,
                                size_t participant, bool split) {
  oracle_case c;
  char msg[ORACLE_MSG_SIZE];
  cr_assert(
      oracle_scenario_build(&c, scenario, pages, participant, msg, sizeof msg),
      "S%d: %s", scenario, msg);
  if (split) {
    region_per_group(&c);
  }
  runs_totals totals = {0, 0};
  char what[64];
  snprintf(what, sizeof what, "S%d participant %zu%s", scenario, participant,
           split ? " (region per layer)" : "");
  run_case(&c, what, &totals);
  oracle_case_destroy(&c);
  return totals;
}

/* S1 is the SPEC's example: every (page, layer, component) is 16 copies of
 * 1 KiB at one stride on each side; one pool also chains the layers of a
 * token, 32 copies a run. */
Test(runs, scenario_s1_llama3_8b) {
  for (size_t who = 0; who < 2; who++) {
    runs_totals per_layer = run_scenario(1, 4, who, true);
    cr_assert_eq(per_layer.copies, 4 * 16 * 32 * 2);
    cr_assert_eq(per_layer.runs, per_layer.copies / 16, "%" PRIu64 " runs",
                 per_layer.runs);
    runs_totals pool = run_scenario(1, 4, who, false);
    cr_assert_eq(pool.copies, per_layer.copies);
    cr_assert_lt(pool.runs, per_layer.runs);
  }
}

Test(runs, scenario_s2_to_s5) {
  static const struct {
    int scenario;
    uint64_t pages;
    size_t who[3];
    size_t count;
  } cases[] = {
      {2, 2, {0, 5}, 2},
      {3, 2, {0, 1, 15}, 3},
      {4, 3, {0, 7}, 2},
      {5, 2, {0, 31}, 2},
  };
  for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
    for (size_t w = 0; w < cases[i].count; w++) {
      for (int split = 0; split < 2; split++) {
        runs_totals t = run_scenario(cases[i].scenario, cases[i].pages,
                                     cases[i].who[w], split);
        cr_assert_gt(t.copies, 0);
        cr_assert_leq(t.runs, t.copies);
      }
    }
  }
}

/* ---- the public fold on hand-made plans ---- */

Test(runs, fold_by_hand) {
  /* One class at part stride 100 whose region side turns back at the
   * fourth copy, a second class interleaved, and a batch boundary. */
  const reshard_copy copies[] = {
      {0, 0, 0, 0, 1000, 10},   {0, 0, 50, 1, 0, 10},
      {0, 0, 100, 0, 1064, 10}, {0, 0, 150, 1, 8, 10},
      {0, 0, 200, 0, 1128, 10}, {0, 0, 300, 0, 0, 10},
      {0, 0, 400, 0, 64, 10},   {0, 0, 500, 0, 128, 10},
  };
  const reshard_batch batches[] = {{0, 6, 60}, {6, 2, 20}};
  reshard_arena arena;
  reshard_arena_init(&arena, 0);
  reshard_runs runs;
  reshard_error err;
  cr_assert_eq(reshard_runs_fold(copies, batches, 2, &arena, &runs, &err),
               RESHARD_OK, "%s", err.message);
  const reshard_run want[] = {
      {copies[0], 3, 100, 64},
      {copies[1], 2, 100, 8},
      {copies[5], 1, 0, 0},
      {copies[6], 2, 100, 64}, /* the batch boundary cut the class */
  };
  cr_assert_eq(runs.run_count, 4);
  cr_assert_eq(runs.batch_count, 2);
  cr_assert_eq(runs.batch_first[1], 3);
  for (size_t r = 0; r < 4; r++) {
    cr_assert(memcmp(&runs.runs[r], &want[r], sizeof want[r]) == 0, "run %zu",
              r);
  }
  reshard_arena_destroy(&arena);
}

Test(runs, fold_many_classes) {
  /* More classes in a batch than the class table starts with, so it grows
   * while runs are open: every class keeps its run across the growth, and
   * the next batch starts each class afresh in the grown table. */
  enum { CLASSES = 300 };
  reshard_copy copies[3 * CLASSES];
  for (size_t k = 0; k < 3; k++) {
    for (size_t c = 0; c < CLASSES; c++) {
      copies[k * CLASSES + c] =
          (reshard_copy){0, 0, k * 100000 + c * 10, c, k * 64, 10};
    }
  }
  const reshard_batch batches[] = {{0, 2 * CLASSES, 20 * CLASSES},
                                   {2 * CLASSES, CLASSES, 10 * CLASSES}};
  reshard_arena arena;
  reshard_arena_init(&arena, 0);
  reshard_runs runs;
  reshard_error err;
  cr_assert_eq(reshard_runs_fold(copies, batches, 2, &arena, &runs, &err),
               RESHARD_OK, "%s", err.message);
  cr_assert_eq(runs.run_count, 2 * CLASSES);
  cr_assert_eq(runs.batch_first[1], CLASSES);
  for (size_t c = 0; c < CLASSES; c++) {
    const reshard_run first = {copies[c], 2, 100000, 64};
    const reshard_run second = {copies[2 * CLASSES + c], 1, 0, 0};
    cr_assert(memcmp(&runs.runs[c], &first, sizeof first) == 0, "run %zu", c);
    cr_assert(memcmp(&runs.runs[CLASSES + c], &second, sizeof second) == 0,
              "run %zu of batch 1", c);
  }
  reshard_arena_destroy(&arena);
}

Test(runs, fold_rejects_unordered_class) {
  const reshard_copy copies[] = {{0, 0, 100, 0, 0, 10}, {0, 0, 0, 0, 10, 10}};
  const reshard_batch batch = {0, 2, 20};
  reshard_arena arena;
  reshard_arena_init(&arena, 0);
  reshard_runs runs;
  reshard_error err;
  cr_assert_eq(reshard_runs_fold(copies, &batch, 1, &arena, &runs, &err),
               RESHARD_INVALID_ARGUMENT);
  cr_assert_not_null(strstr(err.message, "copy 1 of batch 0"), "%s",
                     err.message);
  cr_assert_eq(runs.runs, NULL);
  reshard_arena_destroy(&arena);
}

Test(runs, fold_of_nothing) {
  reshard_arena arena;
  reshard_arena_init(&arena, 0);
  reshard_runs runs;
  cr_assert_eq(reshard_runs_fold(NULL, NULL, 0, &arena, &runs, NULL),
               RESHARD_OK);
  cr_assert_eq(runs.run_count, 0);
  cr_assert_eq(runs.batch_count, 0);
  cr_assert_eq(runs.batch_first[0], 0);
  reshard_arena_destroy(&arena);
}

/* ---- group folds against copy-by-copy folds ---- */

/* The planner folds a page's strided sequences a group at a time
 * (reshard__run_folder_group) rather than copy by copy. Random groups
 * cover its three ways: sequences of one class with one region stride
 * (with steps that repeat, or all equal), sequences of distinct classes,
 * and mixed ones; some classes already have runs in the batch, some of
 * those with the sequence's own stride. Each must give exactly the runs of
 * folding the group's copies one by one in source order. */

/* Most groups are narrow; one in five is as wide as a paged reader's
 * (S3: one sequence per layer, 80), so the class table grows inside the
 * group and regions share the folder's recent-slot cache. */
enum { GROUP_NARROW = 12, GROUP_MAX = 160, PREFIX_MAX = 8 };

typedef struct random_group {
  reshard_run sequences[GROUP_MAX];
  size_t width;
  reshard_copy prefix[PREFIX_MAX]; /* copies folded before the group */
  size_t prefix_count;
} random_group;

static void make_group(oracle_rng *rng, random_group *g) {
  memset(g, 0, sizeof *g);
  g->width = (size_t)oracle_rng_between(
      rng, 1, oracle_rng_chance(rng, 20) ? GROUP_MAX : GROUP_NARROW);
  uint64_t count = oracle_rng_between(rng, g->width == 1 ? 1 : 2, 6);
  uint64_t nbytes = 8 * oracle_rng_between(rng, 1, 2);
  uint64_t gap = nbytes + 8 * oracle_rng_between(rng, 0, 2);
  unsigned regions = (unsigned)oracle_rng_between(rng, 0, 2);
  bool progression = oracle_rng_chance(rng, 50);
  uint64_t region_step = 8 * oracle_rng_between(rng, 0, 8);
  uint64_t region_stride = 8 * oracle_rng_between(rng, 0, 16);
  bool equal_steps = oracle_rng_chance(rng, 25);
  uint64_t part_stride = g->width * gap;
  if (equal_steps) {
    region_stride = g->width * region_step; /* every step the same */
  } else {
    part_stride += 8 * oracle_rng_between(rng, 0, 2);
  }
  for (size_t s = 0; s < g->width; s++) {
    reshard_run *sequence = &g->sequences[s];
    /* regions: 0 one region, 1 one per sequence, 2 two, mixed */
    uint64_t region = regions == 0   ? 0
                      : regions == 1 ? s
                                     : oracle_rng_between(rng, 0, 1);
    uint64_t region_offset = progression
                                 ? 1024 + s * region_step
                                 : 8 * oracle_rng_between(rng, 128, 512);
    sequence->first =
        (reshard_copy){0, 0, 65536 + s * gap, region, region_offset, nbytes};
    sequence->count = count;
    sequence->part_stride = count > 1 ? part_stride : 0;
    sequence->region_stride = count == 1 ? 0
                              : regions == 2 && oracle_rng_chance(rng, 30)
                                  ? region_stride + 8
                                  : region_stride;
  }
  /* Earlier copies of some of the classes, in increasing part offset; one
   * may sit exactly a stride before its sequence's first copy. */
  g->prefix_count = (size_t)oracle_rng_between(rng, 0, PREFIX_MAX);
  for (size_t i = 0; i < g->prefix_count; i++) {
    const reshard_run *sequence =
        &g->sequences[oracle_rng_between(rng, 0, g->width - 1)];
    reshard_copy copy = sequence->first;
    copy.part_offset = 100 * (i + 1);
    copy.region_offset = 8 * oracle_rng_between(rng, 0, 256);
    if (i + 1 == g->prefix_count && sequence->count > 1 &&
        oracle_rng_chance(rng, 50)) {
      copy.part_offset = sequence->first.part_offset - sequence->part_stride;
      copy.region_offset =
          sequence->first.region_offset - sequence->region_stride;
    }
    g->prefix[i] = copy;
  }
}

/* Folds the group's prefix and then the group, by groups or copy by copy,
 * as one batch. */
static reshard_runs fold_group(const random_group *g, bool by_group,
                               reshard_arena *arena) {
  reshard__run_folder folder;
  size_t copies = g->prefix_count + g->width * g->sequences[0].count;
  reshard_error err;
  cr_assert_eq(reshard__run_folder_init(&folder, copies, 1, arena, &err),
               RESHARD_OK);
  cr_assert_eq(
      reshard__run_folder_copies(&folder, g->prefix, g->prefix_count, &err),
      RESHARD_OK, "%s", err.message);
  if (by_group) {
    cr_assert_eq(
        reshard__run_folder_group(&folder, g->sequences, g->width, &err),
        RESHARD_OK, "%s", err.message);
  } else {
    for (uint64_t k = 0; k < g->sequences[0].count; k++) {
      for (size_t s = 0; s < g->width; s++) {
        reshard_copy copy = reshard_run_copy(&g->sequences[s], k);
        cr_assert_eq(reshard__run_folder_copies(&folder, &copy, 1, &err),
                     RESHARD_OK, "%s", err.message);
      }
    }
  }
  reshard__run_folder_close(&folder);
  reshard_runs runs;
  reshard__run_folder_finish(&folder, &runs);
  return runs;
}

/* Requires `got`, folded `how` in case `i`, to be `want`, the same case
 * folded copy by copy: the same runs in the same batches. */
static void assert_same_runs(const reshard_runs *got, const reshard_runs *want,
                             const char *how, unsigned i) {
  cr_assert_eq(got->run_count, want->run_count,
               "RESHARD_ORACLE_SEED=0x%016" PRIx64 " case %u: %zu runs %s, "
               "%zu copy by copy",
               oracle_base_seed(), i, got->run_count, how, want->run_count);
  cr_assert_eq(got->batch_count, want->batch_count);
  for (size_t b = 0; b <= want->batch_count; b++) {
    cr_assert_eq(got->batch_first[b], want->batch_first[b],
                 "case %u: batch %zu starts at another run %s", i, b, how);
  }
  for (size_t r = 0; r < want->run_count; r++) {
    cr_assert(memcmp(&got->runs[r], &want->runs[r], sizeof want->runs[r]) == 0,
              "RESHARD_ORACLE_SEED=0x%016" PRIx64 " case %u: run %zu differs "
              "%s",
              oracle_base_seed(), i, r, how);
  }
}

Test(runs, group_folds_equal_copy_by_copy_folds) {
  uint64_t multi_copy_runs = 0;
  for (unsigned i = 0; i < 4000; i++) {
    oracle_rng rng;
    oracle_rng_seed(&rng, oracle_case_seed(oracle_base_seed(), 9100, i));
    random_group g;
    make_group(&rng, &g);
    reshard_arena arena;
    reshard_arena_init(&arena, 0);
    reshard_runs by_group = fold_group(&g, true, &arena);
    reshard_runs by_copy = fold_group(&g, false, &arena);
    assert_same_runs(&by_group, &by_copy, "by group", i);
    for (size_t r = 0; r < by_copy.run_count; r++) {
      multi_copy_runs += by_copy.runs[r].count > 2;
    }
    reshard_arena_destroy(&arena);
  }
  /* The groups fold into long runs, not only single copies. */
  cr_assert_gt(multi_copy_runs, 1000);
}

/* ---- pages of sequences alone, cut by batches ---- */

/* A page whose sequences are runs of their own (reshard__run_folder_alone)
 * has its runs written piece by piece where batches cut it
 * (reshard__run_folder_alone_piece), without folding. Random pages of one
 * to three groups, cut where batches of a random size would cut them,
 * must give exactly the runs of folding their copies one by one in batch
 * order, batch by batch. Their sequences lie in distinct regions, or a
 * region per column (S3: a layer's region read by each group, the later
 * group's sequence starting back, forward, or where the earlier one's run
 * would go on), or in a few shared ones; pages that the fold would fold
 * otherwise, or refuses (a step back in the Part), must not be taken as
 * alone. */

enum { PAGE_GROUPS = 3, PAGE_ROWS = 9 };
enum { PAGE_COPIES = PAGE_GROUPS * GROUP_NARROW * PAGE_ROWS };

typedef struct random_page {
  reshard_run sequences[PAGE_GROUPS * GROUP_NARROW];
  size_t group_ends[PAGE_GROUPS];
  reshard__page_sequences page;
  /* Where batches start: at copy first_cut and every cut_every after
   * (none when first_cut is past the page), as increasing copy indices,
   * then the end. */
  uint64_t first_cut, cut_every;
  uint64_t cuts[PAGE_COPIES + 1];
  size_t cut_count;
  bool mates; /* a region read by sequences of two groups */
} random_page;

enum { REGIONS_DISTINCT, REGIONS_BY_COLUMN, REGIONS_SHARED };

/* Writes at sequence `at` a group of single copies of another class (Part
 * 1), one in the region of each of the `width` sequences of the group at
 * `before` (the first): after each one's last copy in its Part's
 * offsets, before where its run would go on, and far ahead in the
 * region. A planner that took the region's last sequence for its class's
 * would let a third group go on with the first one's runs unseen.
 * Returns the group's width. */
static size_t other_class_group(random_page *p, size_t before, size_t width,
                                size_t at) {
  for (size_t s = 0; s < width; s++) {
    const reshard_run *earlier = &p->sequences[before + s];
    reshard_copy last = reshard_run_copy(earlier, earlier->count - 1);
    last.part_index = 1;
    last.part_offset += 1;
    last.region_offset += earlier->region_stride + 64 * PAGE_ROWS;
    p->sequences[at + s] = (reshard_run){last, 1, 0, 0};
  }
  return width;
}

static void make_page(oracle_rng *rng, random_page *p) {
  memset(p, 0, sizeof *p);
  size_t groups = (size_t)oracle_rng_between(rng, 1, PAGE_GROUPS);
  int regions =
      oracle_rng_chance(rng, 50)
          ? REGIONS_BY_COLUMN
          : (oracle_rng_chance(rng, 50) ? REGIONS_DISTINCT : REGIONS_SHARED);
  size_t count = 0;
  uint64_t copies = 0;
  uint64_t part_offset = 4096;
  /* The group the next one's regions follow (the one before it, or the
   * one before a group of another class): its first sequence and width. */
  size_t before = 0, before_width = 0;
  bool after_other = false;
  for (size_t g = 0; g < groups; g++) {
    if (regions == REGIONS_BY_COLUMN && g == 1 && groups == 3 &&
        oracle_rng_chance(rng, 30)) {
      size_t width = other_class_group(p, before, before_width, count);
      count += width;
      copies += width;
      p->group_ends[g] = count;
      after_other = true;
      continue;
    }
    size_t width = (size_t)oracle_rng_between(rng, 1, GROUP_NARROW);
    uint64_t rows = oracle_rng_between(rng, 1, PAGE_ROWS);
    uint64_t nbytes = 8 * oracle_rng_between(rng, 1, 4);
    uint64_t part_stride = (width + oracle_rng_between(rng, 0, 2)) * nbytes;
    if (regions == REGIONS_BY_COLUMN && g > 0 && oracle_rng_chance(rng, 50)) {
      /* The earlier group's shape, so its runs may go on into this one. */
      width = before_width;
      rows = p->sequences[before].count;
      nbytes = p->sequences[before].first.nbytes;
      part_stride = rows > 1 ? p->sequences[before].part_stride : part_stride;
    }
    /* The Part's order broken: the fold refuses the page. */
    if (regions == REGIONS_BY_COLUMN && g > 0 && oracle_rng_chance(rng, 4)) {
      part_offset = p->sequences[before].first.part_offset;
    }
    size_t group_start = count;
    for (size_t s = 0; s < width; s++, count++) {
      reshard_run *sequence = &p->sequences[count];
      uint64_t region = count;
      if (regions == REGIONS_BY_COLUMN) {
        region = s;
      } else if (regions == REGIONS_SHARED && oracle_rng_chance(rng, 30)) {
        region = oracle_rng_between(rng, 0, 2);
      }
      uint64_t region_stride = nbytes * oracle_rng_between(rng, 0, 3);
      uint64_t region_offset = 1u << 20;
      if (regions == REGIONS_BY_COLUMN && g > 0 && s < before_width) {
        /* After the earlier group's sequence of this column's region:
         * where its run would go on, or a little back or forward. */
        const reshard_run *earlier = &p->sequences[before + s];
        p->mates = true;
        reshard_copy last = reshard_run_copy(earlier, earlier->count - 1);
        uint64_t go_on = last.region_offset + earlier->region_stride;
        int where = oracle_rng_chance(rng, after_other ? 50 : 5)
                        ? 0
                        : (int)oracle_rng_between(rng, 1, 3);
        region_offset = where == 0   ? go_on
                        : where == 1 ? last.region_offset - nbytes
                                     : go_on + nbytes * where;
        if (oracle_rng_chance(rng, 50)) {
          region_stride = earlier->region_stride;
        }
      }
      bool back =
          rows > 1 && regions != REGIONS_BY_COLUMN && oracle_rng_chance(rng, 3);
      sequence->first = (reshard_copy){
          0, 0, part_offset + s * nbytes, region, region_offset, nbytes};
      if (regions == REGIONS_SHARED && oracle_rng_chance(rng, 10)) {
        sequence->first.part_index = 1; /* another class in the region */
      }
      sequence->count = rows;
      /* A single copy's strides say nothing; runs of one copy have none. */
      bool strides = rows > 1 || oracle_rng_chance(rng, 50);
      sequence->part_stride = strides ? part_stride : 0;
      sequence->region_stride = strides ? region_stride : 0;
      if (back && oracle_rng_chance(rng, 50)) {
        sequence->region_stride = (uint64_t)0 - nbytes; /* steps back */
      } else if (back) {
        sequence->first.part_offset += rows * part_stride;
        sequence->part_stride = (uint64_t)0 - part_stride;
      }
    }
    /* The next group starts where this one's runs would go on in the
     * Part, or further. */
    part_offset += rows * part_stride + (oracle_rng_chance(rng, 50) ? 0 : 4096);
    copies += rows * width;
    p->group_ends[g] = count;
    before = group_start;
    before_width = width;
  }
  p->page = (reshard__page_sequences){
      .sequences = p->sequences,
      .count = count,
      .group_ends = p->group_ends,
      .group_count = groups,
      .copies = copies,
  };
  /* Batches of cut_every copies, the open one with first_cut left. */
  p->cut_every = oracle_rng_between(rng, 1, copies + 2);
  p->first_cut = oracle_rng_chance(rng, 20)
                     ? UINT64_MAX
                     : oracle_rng_between(rng, 1, p->cut_every);
  for (uint64_t at = p->first_cut; at < copies; at += p->cut_every) {
    p->cuts[p->cut_count++] = at;
  }
  p->cuts[p->cut_count] = copies;
}

/* The page's copy `index` in batch order: group by group, copy k of each
 * of a group's sequences in turn. */
static reshard_copy page_copy(const random_page *p, uint64_t index) {
  size_t first = 0;
  for (size_t g = 0;; g++) {
    size_t width = p->group_ends[g] - first;
    uint64_t group_copies = p->sequences[first].count * width;
    if (index < group_copies) {
      return reshard_run_copy(&p->sequences[first + index % width],
                              index / width);
    }
    index -= group_copies;
    first = p->group_ends[g];
  }
}

/* Folds the page piece by piece, each piece its own batch: alone (runs
 * written by reshard__run_folder_alone_piece) or copy by copy. False when
 * the copy-by-copy fold refuses the copies. */
static bool fold_page(const random_page *p, bool alone, reshard_arena *arena,
                      reshard_runs *out) {
  reshard__run_folder folder;
  reshard_error err;
  cr_assert_eq(reshard__run_folder_init(&folder, (size_t)p->page.copies,
                                        p->cut_count + 1, arena, &err),
               RESHARD_OK);
  uint64_t from = 0;
  for (size_t c = 0; c <= p->cut_count; c++) {
    uint64_t to = p->cuts[c];
    if (alone) {
      reshard__run_folder_alone_piece(&folder, &p->page, from, to);
    } else {
      for (uint64_t i = from; i < to; i++) {
        reshard_copy copy = page_copy(p, i);
        if (reshard__run_folder_copies(&folder, &copy, 1, &err) != RESHARD_OK) {
          return false;
        }
      }
    }
    reshard__run_folder_close(&folder);
    from = to;
  }
  reshard__run_folder_finish(&folder, out);
  return true;
}

/* The kinds of pages seen. */
typedef struct page_tally {
  unsigned alone, other, refused;
  unsigned alone_mates, other_mates, cut_mates; /* with a region shared */
  uint64_t cut_runs;
} page_tally;

/* Requires page `p` (case `i`), told `alone` or not, not to be refused by
 * the fold when alone, and then to fold as its pieces; tallies it. */
static void check_page(const random_page *p, bool alone, unsigned i,
                       page_tally *tally) {
  reshard_arena arena;
  reshard_arena_init(&arena, 0);
  reshard_runs by_copy;
  if (!fold_page(p, false, &arena, &by_copy)) {
    cr_assert(!alone,
              "RESHARD_ORACLE_SEED=0x%016" PRIx64 " case %u: a page the "
              "fold refuses is taken as alone",
              oracle_base_seed(), i);
    tally->refused++;
  } else if (!alone) {
    tally->other++;
    tally->other_mates += p->mates;
  } else {
    tally->alone++;
    tally->alone_mates += p->mates;
    tally->cut_mates += p->mates && p->cut_count > 0;
    reshard_runs by_piece;
    cr_assert(fold_page(p, true, &arena, &by_piece));
    assert_same_runs(&by_piece, &by_copy, "by piece", i);
    tally->cut_runs += p->cut_count > 0 ? by_copy.run_count : 0;
  }
  reshard_arena_destroy(&arena);
}

/* Moves each group's region offsets by one amount, as a page of the same
 * shape over other blocks does: none, a few copies' bytes either way, or
 * a block's. */
static void move_groups(oracle_rng *rng, random_page *p) {
  size_t first = 0;
  for (size_t g = 0; g < p->page.group_count; g++) {
    uint64_t nbytes = p->sequences[first].first.nbytes;
    uint64_t amount =
        oracle_rng_chance(rng, 30) ? 0 : nbytes * oracle_rng_between(rng, 1, 4);
    if (oracle_rng_chance(rng, 20)) {
      amount = 4096;
    }
    if (oracle_rng_chance(rng, 50)) {
      amount = (uint64_t)0 - amount;
    }
    for (size_t s = first; s < p->group_ends[g]; s++) {
      p->sequences[s].first.region_offset += amount;
    }
    first = p->group_ends[g];
  }
}

Test(runs, alone_pieces_equal_copy_by_copy_folds) {
  page_tally tally = {0}, moved = {0};
  unsigned by_pairs_yes = 0, by_pairs_no = 0;
  for (unsigned i = 0; i < 4000; i++) {
    oracle_rng rng;
    oracle_rng_seed(&rng, oracle_case_seed(oracle_base_seed(), 9200, i));
    random_page p;
    make_page(&rng, &p);
    reshard_arena arena;
    reshard_arena_init(&arena, 0);
    reshard__run_folder marks, fresh;
    reshard_error err;
    cr_assert_eq(reshard__run_folder_init(&marks, 1, 1, &arena, &err),
                 RESHARD_OK);
    cr_assert_eq(reshard__run_folder_init(&fresh, 1, 1, &arena, &err),
                 RESHARD_OK);
    bool alone =
        reshard__run_folder_alone(&marks, &p.page, p.first_cut, p.cut_every, 7);
    check_page(&p, alone, i, &tally);
    /* The page over other blocks, told from the pairs of the first where
     * it was alone: what a pass over its sequences tells. */
    move_groups(&rng, &p);
    bool by_pairs =
        reshard__run_folder_alone(&marks, &p.page, p.first_cut, p.cut_every, 7);
    bool want =
        reshard__run_folder_alone(&fresh, &p.page, p.first_cut, p.cut_every, 0);
    cr_assert_eq(by_pairs, want,
                 "RESHARD_ORACLE_SEED=0x%016" PRIx64 " case %u: the moved "
                 "page told %s from its pairs, %s from its sequences",
                 oracle_base_seed(), i, by_pairs ? "alone" : "not alone",
                 want ? "alone" : "not alone");
    if (alone) {
      by_pairs_yes += by_pairs;
      by_pairs_no += !by_pairs;
    }
    check_page(&p, want, i, &moved);
    reshard_arena_destroy(&arena);
  }
  /* Every kind of page came up: alone and cut, sharing a region or
   * stepping back in it, and refused by the fold. */
  cr_assert_gt(tally.alone, 1000);
  cr_assert_gt(tally.cut_runs, 10000);
  cr_assert_gt(tally.other, 200);
  cr_assert_gt(tally.refused, 50);
  /* Pages whose regions are read by two groups came up alone, cut too,
   * and not alone (a run going on into the later group). */
  cr_assert_gt(tally.alone_mates, 150);
  cr_assert_gt(tally.cut_mates, 100);
  cr_assert_gt(tally.other_mates, 300);
  /* Moved, such pages were told from their pairs both ways. */
  cr_assert_gt(moved.alone_mates, 100);
  cr_assert_gt(by_pairs_yes, 1000);
  cr_assert_gt(by_pairs_no, 10);
}

/* The folder's runs with the names `want` (batch_count of them), each
 * name holding: a batch's runs are its named batch's but for their part
 * and region indices. */
static void assert_named(reshard__run_folder *folder, const size_t *want,
                         size_t batch_count) {
  reshard_runs runs;
  reshard__run_folder_finish(folder, &runs);
  cr_assert_eq(runs.batch_count, batch_count);
  for (size_t b = 0; b < runs.batch_count; b++) {
    cr_assert_eq(runs.batch_like[b], want[b], "batch %zu named %zu, not %zu", b,
                 runs.batch_like[b], want[b]);
    size_t like = runs.batch_like[b], first = runs.batch_first[b];
    size_t count = runs.batch_first[b + 1] - first;
    cr_assert_eq(runs.batch_first[like + 1] - runs.batch_first[like], count);
    for (size_t r = 0; r < count; r++) {
      reshard_run run = runs.runs[first + r];
      const reshard_run *was = &runs.runs[runs.batch_first[like] + r];
      run.first.part_index = was->first.part_index;
      run.first.region_index = was->first.region_index;
      cr_assert(memcmp(&run, was, sizeof run) == 0, "batch %zu, run %zu", b, r);
    }
  }
}

/* A batch is named like a closed batch (reshard_runs.batch_like) when it
 * holds that whole batch's runs renamed and nothing else; otherwise it is
 * named as itself. */
Test(runs, names_a_batch_like_the_whole_batch_renamed_into_it_alone) {
  reshard_arena arena;
  reshard_arena_init(&arena, 0);
  reshard_error err;
  reshard__run_folder folder;
  cr_assert_eq(reshard__run_folder_init(&folder, 64, 8, &arena, &err),
               RESHARD_OK);
  reshard_copy three[3];
  for (uint64_t i = 0; i < 3; i++) {
    three[i] = (reshard_copy){.page_index = 0,
                              .part_index = 0,
                              .part_offset = 4096 * i,
                              .region_index = i,
                              .region_offset = 0,
                              .nbytes = 4096};
  }
  reshard_copy other = {.region_index = 9, .nbytes = 64};
  /* Batch 0: three runs. Batch 1: empty. */
  cr_assert_eq(reshard__run_folder_copies(&folder, three, 3, &err), RESHARD_OK);
  reshard__run_folder_close(&folder);
  cr_assert_eq(folder.batch_first[1], 3);
  reshard__run_folder_close(&folder);
  /* 2: batch 0 renamed, alone. 3: a run, then batch 0 renamed. 4: batch
   * 0 renamed, then a run. 5: part of batch 0. 6: batch 2 renamed. */
  reshard__run_folder_renamed(&folder, 0, 3, 1, 7);
  reshard__run_folder_close(&folder);
  cr_assert_eq(reshard__run_folder_copies(&folder, &other, 1, &err),
               RESHARD_OK);
  reshard__run_folder_renamed(&folder, 0, 3, 1, 7);
  reshard__run_folder_close(&folder);
  reshard__run_folder_renamed(&folder, 0, 3, 1, 7);
  cr_assert_eq(reshard__run_folder_copies(&folder, &other, 1, &err),
               RESHARD_OK);
  reshard__run_folder_close(&folder);
  reshard__run_folder_renamed(&folder, 0, 2, 1, 7);
  reshard__run_folder_close(&folder);
  reshard__run_folder_renamed(&folder, 3, 6, 2, 8);
  reshard__run_folder_close(&folder);
  static const size_t want[] = {0, 1, 0, 3, 4, 5, 2};
  assert_named(&folder, want, 7);
  reshard_arena_destroy(&arena);
}

/* Batches of runs renamed from the same origins are named alike
 * (reshard_runs.batch_like) across regions: a transfer's batch of several
 * layers, each written as an earlier layer renamed, starting anywhere in
 * the batch before. */
Test(runs, names_a_batch_like_one_before_it_of_the_same_origins) {
  reshard_arena arena;
  reshard_arena_init(&arena, 0);
  reshard_error err;
  reshard__run_folder folder;
  cr_assert_eq(reshard__run_folder_init(&folder, 128, 16, &arena, &err),
               RESHARD_OK);
  /* A region's copies: three runs (three parts' tensors at one offset). */
  reshard_copy layer[3], walked[3], more[3];
  for (uint64_t i = 0; i < 3; i++) {
    layer[i] = (reshard_copy){.part_index = i,
                              .part_offset = 4096 * i,
                              .region_index = 0,
                              .region_offset = 512 * i,
                              .nbytes = 512};
    walked[i] = layer[i];
    walked[i].region_index = 2;
    more[i] = layer[i];
    more[i].region_index = 5;
  }
  /* 0: region 0 walked [0, 3), renamed [3, 6), region 2 walked [6, 9). */
  cr_assert_eq(reshard__run_folder_copies(&folder, layer, 3, &err), RESHARD_OK);
  reshard__run_folder_renamed(&folder, 0, 3, 0, 1);
  cr_assert_eq(reshard__run_folder_copies(&folder, walked, 3, &err),
               RESHARD_OK);
  reshard__run_folder_close(&folder);
  cr_assert_eq(folder.batch_first[1], 9);
  /* 1: batch 0's regions renamed, the last from the region walked. */
  reshard__run_folder_renamed(&folder, 0, 3, 0, 3);
  reshard__run_folder_renamed(&folder, 3, 6, 0, 4);
  reshard__run_folder_renamed(&folder, 6, 9, 0, 5);
  reshard__run_folder_close(&folder);
  /* 2: batch 1's renamed again: its runs' origins are batch 0's. */
  reshard__run_folder_renamed(&folder, 9, 18, 0, 6);
  reshard__run_folder_close(&folder);
  /* 3: the same runs in another order. 4: with runs of its own. */
  reshard__run_folder_renamed(&folder, 0, 3, 0, 7);
  reshard__run_folder_renamed(&folder, 6, 9, 0, 8);
  reshard__run_folder_renamed(&folder, 3, 6, 0, 9);
  reshard__run_folder_close(&folder);
  reshard__run_folder_renamed(&folder, 0, 6, 0, 10);
  cr_assert_eq(reshard__run_folder_copies(&folder, more, 3, &err), RESHARD_OK);
  reshard__run_folder_close(&folder);
  /* 5: batch 0's origins in pieces that continue one another. 6: empty,
   * like the empty batch 7 after it is not named. */
  reshard__run_folder_renamed(&folder, 0, 2, 0, 11);
  reshard__run_folder_renamed(&folder, 2, 3, 0, 11);
  reshard__run_folder_renamed(&folder, 12, 15, 0, 12);
  reshard__run_folder_renamed(&folder, 15, 18, 0, 13);
  reshard__run_folder_close(&folder);
  reshard__run_folder_close(&folder);
  reshard__run_folder_close(&folder);
  /* 8 and 9: runs of the same origins, in the same order, as many, but
   * cut elsewhere: not alike. */
  reshard__run_folder_renamed(&folder, 0, 2, 0, 14);
  reshard__run_folder_renamed(&folder, 6, 7, 0, 15);
  reshard__run_folder_close(&folder);
  reshard__run_folder_renamed(&folder, 0, 1, 0, 14);
  reshard__run_folder_renamed(&folder, 6, 8, 0, 15);
  reshard__run_folder_close(&folder);
  /* 10: batch 3 renamed whole, farther back than the batches looked at. */
  reshard__run_folder_renamed(&folder, folder.batch_first[3],
                              folder.batch_first[4], 0, 16);
  reshard__run_folder_close(&folder);
  static const size_t want[] = {0, 0, 1, 3, 4, 2, 6, 7, 8, 9, 3};
  assert_named(&folder, want, 11);
  reshard_arena_destroy(&arena);
}
