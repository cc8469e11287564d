/* Store planning (SPEC §2.5) from a PooledMemory (SPEC §1.5a): every
 * participant of the writing DP rank holds its values in a memory pool
 * (tests/support/pool_oracle.h: vLLM NHD, FlashInfer HND, page-first, MLA
 * latent) addressed by a scattered block table, sometimes longer than the
 * span. Each plans its store twice, with the pooled bound binding and with
 * the explicit binding the pool and the table stand for: the plans must be
 * equal copy for copy, batch for batch and run for run, and executing
 * either into zeroed Parts must yield exactly the Parts of SPEC §1.3 —
 * every byte once, none from a block outside the table or past the span.
 * Participants that write no Part (replicas) get empty plans both ways.
 * Then readers of another topology, their memory pools too, load from the
 * stored Parts and must hold the writers' values (the cycle with pools at
 * both ends).
 *
 * Parameters: format x pool style (12); each runs six writer topologies
 * (TP1, TP4, PP2 TP2, DP2 TP2 writing DP 1, TP8 in four replicated head
 * groups, MLA single tensor TP4) x block size smaller than, equal to and
 * larger than the page: 216 writer cases. Seeds derive from
 * RESHARD_ORACLE_SEED as in tests/lib/plan/test_oracle.c. */
#include <criterion/criterion.h>
#include <criterion/parameterized.h>
#include <inttypes.h>
#include <stdio.h>
#include <string.h>

#include "oracle.h"
#include "pool_oracle.h"
#include "reshard/pool.h"
#include "reshard/store.h"
#include "store_oracle.h"

typedef struct writer_topology {
  const char *name;
  oracle_topology writer;
  oracle_topology reader;
  bool single_tensor;
  uint64_t dp_rank; /* the writing DP rank */
} writer_topology;

static const writer_topology topologies[] = {
    {"TP1 -> TP2", {1, 1, 1, 0}, {1, 1, 2, 0}, false, 0},
    {"TP4 -> PP2 TP1", {1, 1, 4, 0}, {1, 2, 1, 0}, false, 0},
    {"PP2 TP2 -> TP4", {1, 2, 2, 0}, {1, 1, 4, 0}, false, 0},
    {"DP2 TP2 writing dp 1 -> TP1", {2, 1, 2, 0}, {1, 1, 1, 0}, false, 1},
    {"TP8 in 4 head groups -> TP16", {1, 1, 8, 4}, {1, 1, 16, 0}, false, 0},
    {"MLA TP4 -> PP2 TP2", {1, 1, 4, 0}, {1, 2, 2, 0}, true, 0},
};
#define TOPOLOGIES (sizeof topologies / sizeof topologies[0])

typedef enum block_relation {
  BLOCK_SMALLER,
  BLOCK_EQUAL,
  BLOCK_LARGER
} block_relation;
#define BLOCK_RELATIONS 3

static const char *relation_name(block_relation relation) {
  static const char *names[] = {"block < page", "block = page", "block > page"};
  return names[relation];
}

/* The case's pools stay below this many bytes each. */
#define POOL_BUDGET (UINT64_C(2) << 20)

typedef struct pooled_case {
  reshard_arena arena;
  oracle_rng rng;
  reshard_descriptor descriptor;
  reshard_placement placement; /* the writers', normalized */
  reshard_upload_plan upload;
  uint64_t dp_rank;
  uint64_t pages;
  reshard_limits limits;
  oracle_pool_style style;
  block_relation relation;
  bool runs;
  char description[768];
} pooled_case;

static void pooled_case_build(pooled_case *w, uint64_t seed,
                              reshard_format format, oracle_pool_style style,
                              const writer_topology *t,
                              block_relation relation) {
  memset(w, 0, sizeof *w);
  reshard_arena_init(&w->arena, 0);
  oracle_rng_seed(&w->rng, seed);
  /* A block below the page needs pages of two tokens or more. */
  do {
    oracle_random_descriptor(&w->rng, &w->arena, t->single_tensor,
                             &w->descriptor);
  } while (relation == BLOCK_SMALLER && w->descriptor.page_size < 2);
  oracle_build_placement(&w->arena, &w->rng, &w->descriptor, &t->writer, "w",
                         &w->placement);
  reshard_error err;
  reshard_error_clear(&err);
  cr_assert_eq(reshard_placement_normalize(&w->placement, &w->arena, &err),
               RESHARD_OK, "%s", err.message);
  w->dp_rank = t->dp_rank;
  reshard_limits limits = reshard_limits_default();
  cr_assert_eq(reshard_plan_upload(&w->placement, format, true, w->dp_rank,
                                   &limits, &w->arena, &w->upload, &err),
               RESHARD_OK, "%s", err.message);
  w->pages = oracle_rng_between(&w->rng, 1, 3);
  w->limits = reshard_limits_default();
  if (oracle_rng_chance(&w->rng, 40)) {
    w->limits.max_batch_operations = oracle_rng_between(&w->rng, 1, 32);
    w->limits.max_batch_bytes = oracle_rng_between(&w->rng, 1, 4096);
  }
  w->style = style;
  w->relation = relation;
  w->runs = oracle_rng_chance(&w->rng, 60);
  snprintf(w->description, sizeof w->description,
           "RESHARD_ORACLE_SEED=0x%016" PRIx64 " case seed 0x%016" PRIx64
           ": %s %s, pool %s, %s; %zu layers %" PRIu64 " heads dims %" PRIu64
           "/%" PRIu64 " itemsize %" PRIu64 " page %" PRIu64 ", %" PRIu64
           " pages, batches of %" PRIu64 " copies / %" PRIu64 " bytes%s",
           oracle_base_seed(), seed, t->name, reshard_format_name(format),
           oracle_pool_style_name(style), relation_name(relation),
           w->descriptor.layer_count, w->descriptor.total_kv_heads,
           w->descriptor.key_head_dim, w->descriptor.value_head_dim,
           w->descriptor.itemsize, w->descriptor.page_size, w->pages,
           w->limits.max_batch_operations, w->limits.max_batch_bytes,
           w->runs ? ", runs" : "");
}

static uint64_t block_size_for(oracle_rng *rng, uint64_t page,
                               block_relation relation) {
  switch (relation) {
  case BLOCK_SMALLER:
    return page % 2 == 0 && oracle_rng_chance(rng, 50)
               ? page / 2
               : oracle_rng_between(rng, 1, page - 1);
  case BLOCK_LARGER:
    return oracle_rng_between(rng, page + 1, 3 * page);
  default:
    return page;
  }
}

/* A participant's memory as a pool and a table, and what they stand for. */
typedef struct pooled_memory {
  reshard_pool pool;
  uint32_t *ids;
  size_t table;
  uint64_t block_size;
  reshard_binding binding; /* the explicit form */
  reshard_bound_pool bound_pool;
  reshard_bound_binding bound;
  reshard_pooled_memory memory; /* the pool and the table, unbound */
  char what[160];
} pooled_memory;

static void pooled_memory_build(pooled_case *w,
                                const reshard_placement_part *part,
                                oracle_pool_style style, pooled_memory *m) {
  uint64_t page = w->descriptor.page_size;
  uint64_t span = w->pages * page;
  m->block_size = block_size_for(&w->rng, page, w->relation);
  uint64_t needed = (span + m->block_size - 1) / m->block_size;
  uint64_t room = POOL_BUDGET / oracle_pool_block_bytes(&w->descriptor, part,
                                                        style, m->block_size);
  uint64_t extra = oracle_rng_between(&w->rng, 0, 6);
  if (room < needed + extra) {
    extra = room > needed ? room - needed : 0;
  }
  uint64_t num_blocks = needed + extra;
  oracle_build_pool(&w->descriptor, part, style, m->block_size, num_blocks,
                    &w->arena, &m->pool);
  m->ids = oracle_block_table(&w->rng, &w->arena, num_blocks);
  m->table = (size_t)oracle_rng_between(&w->rng, needed, num_blocks);
  snprintf(m->what, sizeof m->what,
           "%s: pool %s of %" PRIu64 " blocks of %" PRIu64 " tokens, table %zu"
           " for %" PRIu64 " needed",
           part->participant_id, oracle_pool_style_name(style), num_blocks,
           m->block_size, m->table, needed);
  reshard_limits limits = reshard_limits_default();
  reshard_error err;
  reshard_error_clear(&err);
  cr_assert_eq(reshard_pool_validate(&m->pool, &w->descriptor, part, &limits,
                                     "pool", &w->arena, &m->bound_pool, &err),
               RESHARD_OK, "%s: %s [%s]", m->what, err.message, w->description);
  m->memory = (reshard_pooled_memory){&m->bound_pool, m->ids, m->table};
  cr_assert_eq(reshard_pool_bind(&m->bound_pool, m->ids, m->table, span,
                                 &limits, "pooled", &w->arena, &m->bound, &err),
               RESHARD_OK, "%s: %s [%s]", m->what, err.message, w->description);
  oracle_pool_binding(&m->pool, &w->descriptor, part, m->ids, span, &w->arena,
                      &m->binding);
  reshard_bound_binding explicit_bound;
  cr_assert_eq(reshard_binding_validate(&m->binding, &w->descriptor, part,
                                        w->pages, &limits, &w->arena,
                                        &explicit_bound, &err),
               RESHARD_OK, "%s: explicit binding: %s [%s]", m->what,
               err.message, w->description);
  char msg[ORACLE_MSG_SIZE];
  cr_assert(oracle_same_bound(&m->bound, &explicit_bound, msg, sizeof msg),
            "%s: pooled bound binding against the explicit one: %s [%s]",
            m->what, msg, w->description);
}

/* Plans the participant's store one way, executes it from `memory` into
 * `store` and checks its Parts. Returns the plan (in `arena`). */
static reshard_store_plan store_once(pooled_case *w,
                                     const reshard_store_request *request,
                                     const oracle_memory *memory,
                                     oracle_store *store, reshard_arena *arena,
                                     const char *how, const char *what) {
  reshard_arena_init(arena, 0);
  reshard_store_plan plan;
  reshard_error err;
  reshard_error_clear(&err);
  cr_assert_eq(reshard_plan_store(request, arena, &plan, &err), RESHARD_OK,
               "%s, %s: %s [%s]", what, how, err.message, w->description);
  char msg[ORACLE_MSG_SIZE] = "";
  cr_assert(
      oracle_store_execute(request, &plan, memory, store, msg, sizeof msg) &&
          oracle_store_check_parts(store, plan.part_indexes, plan.part_count,
                                   msg, sizeof msg),
      "%s, %s: %s [%s]", what, how, msg, w->description);
  if (plan.part_count == 0) {
    cr_assert_eq(plan.copy_count, 0, "%s, %s writes no Part [%s]", what, how,
                 w->description);
  }
  return plan;
}

/* Every participant of the writing DP rank stores from its pool, both
 * ways; `store` receives the pooled plans' bytes. Returns the copies. */
static uint64_t store_all(pooled_case *w, oracle_store *store) {
  uint64_t copies = 0;
  size_t written = 0;
  for (size_t p = 0; p < w->placement.part_count; p++) {
    const reshard_placement_part *part = &w->placement.parts[p];
    if (part->rank.dp != w->dp_rank || part->layer_count == 0) {
      continue;
    }
    pooled_memory m;
    pooled_memory_build(w, part, w->style, &m);
    oracle_memory memory;
    oracle_memory_alloc(&m.binding, ORACLE_SENTINEL, &memory);
    oracle_memory_fill_values(&w->descriptor, &m.binding, w->pages, &memory);
    reshard_store_request request = {
        .placement = &w->placement,
        .has_dp_rank = true,
        .dp_rank = w->dp_rank,
        .binding = &m.binding,
        .page_count = w->pages,
        .layout = &w->upload.layout,
        .layout_id = w->upload.layout_id,
        .limits = w->limits,
        .runs = w->runs,
    };
    /* The explicit plan into a store of its own, then the pooled one. */
    oracle_store explicit_store;
    oracle_store_init(&explicit_store, &w->upload.layout, w->pages);
    reshard_arena explicit_arena, pooled_arena;
    reshard_store_plan explicit_plan =
        store_once(w, &request, &memory, &explicit_store, &explicit_arena,
                   "explicit binding", m.what);
    /* The bound pool, into a store of its own too. */
    oracle_store bound_store;
    oracle_store_init(&bound_store, &w->upload.layout, w->pages);
    reshard_arena bound_arena;
    request.bound_binding = &m.bound;
    reshard_store_plan bound_plan =
        store_once(w, &request, &memory, &bound_store, &bound_arena,
                   "pooled memory, bound", m.what);
    request.bound_binding = NULL;
    request.pooled = &m.memory;
    reshard_store_plan pooled_plan = store_once(
        w, &request, &memory, store, &pooled_arena, "pooled memory", m.what);
    char msg[ORACLE_MSG_SIZE];
    cr_assert(
        oracle_same_store_plans(&pooled_plan, &explicit_plan, msg, sizeof msg),
        "%s: pooled plan against explicit plan: %s [%s]", m.what, msg,
        w->description);
    cr_assert(
        oracle_same_store_plans(&bound_plan, &explicit_plan, msg, sizeof msg),
        "%s: bound pooled plan against explicit plan: %s [%s]", m.what, msg,
        w->description);
    reshard_join_free(bound_plan.built_join);
    reshard_arena_destroy(&bound_arena);
    oracle_store_free(&bound_store);
    if (w->runs && pooled_plan.copy_count > 0) {
      cr_assert(oracle_check_runs_fold(pooled_plan.copies, pooled_plan.batches,
                                       pooled_plan.batch_count,
                                       &pooled_plan.runs, msg, sizeof msg),
                "%s: %s [%s]", m.what, msg, w->description);
    }
    copies += pooled_plan.copy_count;
    written += pooled_plan.part_count;
    reshard_join_free(explicit_plan.built_join);
    reshard_join_free(pooled_plan.built_join);
    reshard_arena_destroy(&explicit_arena);
    reshard_arena_destroy(&pooled_arena);
    oracle_store_free(&explicit_store);
    oracle_memory_free(&memory);
  }
  /* Every Part of the layout has exactly one writer. */
  cr_assert_eq(written, w->upload.layout.shard_count, "[%s]", w->description);
  return copies;
}

/* Every reader participant of `topology` loads all pages from `store`
 * into its own pool (in the next style) and must hold the writers'
 * values. */
static void load_all(pooled_case *w, const oracle_topology *topology,
                     const oracle_store *store) {
  reshard_placement reader;
  oracle_build_placement(&w->arena, &w->rng, &w->descriptor, topology, "r",
                         &reader);
  reshard_error err;
  reshard_error_clear(&err);
  cr_assert_eq(reshard_placement_normalize(&reader, &w->arena, &err),
               RESHARD_OK, "%s", err.message);
  size_t *starts = RESHARD_ARENA_NEW(&w->arena, size_t, w->pages + 1);
  size_t *sources = RESHARD_ARENA_NEW(&w->arena, size_t, w->pages);
  cr_assert(starts != NULL && sources != NULL);
  for (uint64_t pg = 0; pg <= w->pages; pg++) {
    starts[pg] = pg;
  }
  reshard_plan_source source = {&w->upload.layout, w->upload.layout_id, NULL};
  oracle_pool_style style =
      (oracle_pool_style)((w->style + 1) % ORACLE_POOL_STYLE_COUNT);
  size_t readers = 0;
  for (size_t p = 0; p < reader.part_count; p++) {
    const reshard_placement_part *part = &reader.parts[p];
    if (part->layer_count == 0) {
      continue;
    }
    pooled_memory m;
    pooled_memory_build(w, part, style, &m);
    reshard_load_request load = {
        .placement = &reader,
        .has_dp_rank = true,
        .dp_rank = part->rank.dp,
        .binding = &m.binding,
        .pooled = &m.memory,
        .page_count = w->pages,
        .sources = &source,
        .source_count = 1,
        .page_source_start = starts,
        .page_sources = sources,
        .limits = reshard_limits_default(),
    };
    reshard_arena plan_arena;
    reshard_arena_init(&plan_arena, 0);
    reshard_load_plan plan;
    cr_assert_eq(reshard_plan_load(&load, &plan_arena, &plan, &err), RESHARD_OK,
                 "reader %s: %s [%s]", m.what, err.message, w->description);
    oracle_memory memory;
    oracle_memory_alloc(&m.binding, ORACLE_SENTINEL, &memory);
    char msg[ORACLE_MSG_SIZE] = "";
    bool ok =
        oracle_store_load(store, &plan, &m.binding, &memory, msg, sizeof msg) &&
        oracle_memory_check_values(&w->descriptor, &m.binding, w->pages,
                                   &memory, msg, sizeof msg);
    reshard_load_plan_free_joins(&plan, 1);
    reshard_arena_destroy(&plan_arena);
    oracle_memory_free(&memory);
    cr_assert(ok, "reader %s: %s [%s]", m.what, msg, w->description);
    readers++;
  }
  cr_assert_gt(readers, 0);
}

typedef struct pooled_param {
  reshard_format format;
  oracle_pool_style style;
} pooled_param;

#define PARAMS (3 * ORACLE_POOL_STYLE_COUNT)

ParameterizedTestParameters(store_pooled, format_x_pool_style) {
  static pooled_param params[PARAMS];
  size_t k = 0;
  for (int f = RESHARD_FORMAT_PLHD; f <= RESHARD_FORMAT_HPLD; f++) {
    for (int s = 0; s < ORACLE_POOL_STYLE_COUNT; s++) {
      params[k++] = (pooled_param){(reshard_format)f, (oracle_pool_style)s};
    }
  }
  return cr_make_param_array(pooled_param, params, PARAMS);
}

/* 12 x 6 topologies x 3 block sizes = 216 writer cases. */
ParameterizedTest(pooled_param *param, store_pooled, format_x_pool_style) {
  uint64_t stream = 0x5700 + (uint64_t)param->format * 16 + param->style;
  uint64_t copies = 0;
  unsigned index = 0;
  for (size_t t = 0; t < TOPOLOGIES; t++) {
    for (unsigned r = 0; r < BLOCK_RELATIONS; r++, index++) {
      pooled_case w;
      pooled_case_build(&w, oracle_case_seed(oracle_base_seed(), stream, index),
                        param->format, param->style, &topologies[t],
                        (block_relation)r);
      oracle_store store;
      oracle_store_init(&store, &w.upload.layout, w.pages);
      copies += store_all(&w, &store);
      load_all(&w, &topologies[t].reader, &store);
      oracle_store_free(&store);
      reshard_arena_destroy(&w.arena);
    }
  }
  cr_assert_gt(copies, 0);
}
