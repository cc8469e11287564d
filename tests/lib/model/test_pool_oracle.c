/* The execution oracle (SPEC §2.4) over memory pools (SPEC §1.5a): for a
 * random case's reader participant a pool is laid out as an engine lays
 * it out (tests/support/pool_oracle.h: vLLM NHD, FlashInfer HND with K
 * and V interleaved per block, SGLang page-first, MLA latent), a
 * scattered block table is bound with reshard_pool_bind, and the load is
 * planned three times: with the pooled bound binding, with the pool and
 * the table themselves (request.pooled: no binding, each page's ranges
 * written from the table, pages alike in their blocks planned from a
 * remembered one), and with the explicit binding the pool and the table
 * stand for. The plans must be equal
 * copy for copy, batch for batch and run for run (with request.runs), the
 * pooled bound binding must be the one the explicit binding validates to,
 * and the oracle executes both plans and checks every byte — the bytes of
 * the span's blocks hold their logical values, no other byte of the pool
 * (blocks outside the table, the tail of the last block, padding) is
 * written.
 *
 * The matrix: format (PLHD, LPHD, HPLD) x writer/reader topology (TP up,
 * TP down, PP on the writer side, PP on the reader side, a reader of DP
 * rank 1 chosen by target dp rank, reader head replicas, MLA single
 * tensor) x block size against page size (smaller, equal, larger) x pool
 * style (the MLA latent pool only for the single-tensor topology, which
 * takes every style), four cases each: a table exactly as long as the
 * span, with runs; a longer table, two candidate layouts, misses and
 * preferences; an exact table with runs and small batch limits; a longer
 * table with all of those. 198 parameters, 792 cases; then 60 cases of
 * random topologies and styles. Last, the oracle of validation itself:
 * 20000 random small pools, accepted exactly when SPEC §1.5a's pairwise
 * disjointness rule accepts them. Seeds derive from RESHARD_ORACLE_SEED
 * as in tests/lib/plan/test_oracle.c. */
#include <criterion/criterion.h>
#include <criterion/parameterized.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "reshard/arena.h"
#include "reshard/binding.h"
#include "reshard/plan.h"
#include "reshard/pool.h"

#include "oracle.h"
#include "pool_oracle.h"

typedef enum block_relation {
  BLOCK_SMALLER, /* 1 <= block < page (pages of 2+ tokens) */
  BLOCK_EQUAL,
  BLOCK_LARGER, /* page < block <= 3 * page */
  BLOCK_ANY,    /* one of the above at random */
} block_relation;
#define BLOCK_RELATIONS 3

static const char *relation_name(block_relation relation) {
  static const char *names[] = {"block < page", "block = page", "block > page",
                                "block random"};
  return names[relation];
}

/* Which reader participant plans: any with layers, one of DP rank 1 (the
 * request then names target dp rank 1), or a head replica (ordinal > 0)
 * when the reader has one. */
typedef enum pick_rule { PICK_ANY, PICK_DP1, PICK_REPLICA } pick_rule;

typedef struct topology_case {
  const char *name;
  oracle_topology writer, reader; /* {dp, pp, tp, head groups} */
  bool single_tensor;
  pick_rule pick;
} topology_case;

static const topology_case topologies[] = {
    {"TP1 -> TP4", {1, 1, 1, 0}, {1, 1, 4, 0}, false, PICK_ANY},
    {"TP8 -> TP2", {1, 1, 8, 0}, {1, 1, 2, 0}, false, PICK_ANY},
    {"PP3 TP2 -> TP4", {1, 3, 2, 0}, {1, 1, 4, 0}, false, PICK_ANY},
    {"TP4 -> PP3 TP2", {1, 1, 4, 0}, {1, 3, 2, 0}, false, PICK_ANY},
    {"DP2 TP2 -> DP2 PP2, target dp 1",
     {2, 1, 2, 0},
     {2, 2, 1, 0},
     false,
     PICK_DP1},
    {"TP2 -> TP16 replicas", {1, 1, 2, 0}, {1, 1, 16, 0}, false, PICK_REPLICA},
    {"MLA TP8 -> PP2 TP4", {1, 1, 8, 0}, {1, 2, 4, 0}, true, PICK_ANY},
};
#define TOPOLOGIES (sizeof topologies / sizeof topologies[0])

/* One pooled case: the oracle case's options and what the pool adds. */
typedef struct pool_spec {
  oracle_case_opts opts;
  pick_rule pick;
  block_relation relation;
  oracle_pool_style style;
  bool random_style;
  bool longer_table;  /* entries past the span */
  bool table_in_runs; /* oracle_block_table_in_runs, not a shuffle */
  bool runs;
  bool small_batches;
} pool_spec;

typedef struct pool_result {
  uint64_t covered_bytes;
  uint64_t copies;
  bool picked; /* the pick rule found its participant */
  /* Pages cut by batches whose runs (runs without copies) were an
   * earlier page's moved. */
  uint64_t cut_pages;
} pool_result;

/* The case's pool stays below this many bytes (extra blocks are dropped
 * first), so the oracle's byte maps stay small under sanitizers. */
#define POOL_BUDGET (UINT64_C(4) << 20)
#define SEED_ATTEMPTS 64

static bool pick_matches(const reshard_placement_part *part, pick_rule rule) {
  switch (rule) {
  case PICK_DP1:
    return part->rank.dp == 1;
  case PICK_REPLICA:
    return part->replica_ordinal > 0;
  default:
    return true;
  }
}

/* Makes the case plan for a participant the rule wants; returns whether
 * one was found (else the case keeps its own). */
static bool repick(oracle_case *c, pick_rule rule, oracle_rng *rng) {
  if (rule == PICK_ANY) {
    return true;
  }
  size_t matching = 0;
  for (size_t i = 0; i < c->reader.part_count; i++) {
    const reshard_placement_part *part = &c->reader.parts[i];
    matching += part->layer_count > 0 && pick_matches(part, rule);
  }
  if (matching == 0) {
    return false;
  }
  size_t pick = (size_t)oracle_rng_between(rng, 0, matching - 1);
  const reshard_placement_part *chosen = NULL;
  for (size_t i = 0; i < c->reader.part_count && chosen == NULL; i++) {
    const reshard_placement_part *part = &c->reader.parts[i];
    if (part->layer_count > 0 && pick_matches(part, rule) && pick-- == 0) {
      chosen = part;
    }
  }
  if (chosen != c->participant) {
    /* Prebuilt joins were made for the other participant. */
    for (size_t s = 0; s < c->source_count; s++) {
      c->sources[s].join = NULL;
    }
    c->participant = chosen;
  }
  uint64_t lowest = UINT64_MAX;
  for (size_t i = 0; i < c->reader.part_count; i++) {
    if (c->reader.parts[i].rank.dp < lowest) {
      lowest = c->reader.parts[i].rank.dp;
    }
  }
  c->request.has_dp_rank = rule == PICK_DP1 || chosen->rank.dp != lowest;
  c->request.dp_rank = chosen->rank.dp;
  size_t used = strlen(c->description);
  snprintf(c->description + used, sizeof c->description - used,
           "; planned by %s (heads %" PRIu64 "+%" PRIu64 " replica %" PRIu64
           "/%" PRIu64 ", dp %" PRIu64 ")",
           chosen->participant_id, chosen->head_start, chosen->head_count,
           chosen->replica_ordinal, chosen->replica_count, chosen->rank.dp);
  return true;
}

static uint64_t block_size_for(oracle_rng *rng, uint64_t page,
                               block_relation relation) {
  if (relation == BLOCK_ANY) {
    relation = page > 1 ? (block_relation)oracle_rng_between(rng, 0, 2)
                        : (block_relation)oracle_rng_between(rng, 1, 2);
  }
  switch (relation) {
  case BLOCK_SMALLER:
    /* Often a divisor of the page (engines' 16 against 64), else not. */
    if (page % 2 == 0 && oracle_rng_chance(rng, 50)) {
      return page / 2;
    }
    return oracle_rng_between(rng, 1, page - 1);
  case BLOCK_LARGER:
    if (oracle_rng_chance(rng, 50)) {
      return 2 * page;
    }
    return oracle_rng_between(rng, page + 1, 3 * page);
  default:
    return page;
  }
}

/* Plans the case's load with `memory` and expects it refused. */
static void expect_refused(oracle_case *c, const reshard_pooled_memory *memory,
                           const char *what, const char *fragment) {
  reshard_arena arena;
  reshard_arena_init(&arena, 0);
  reshard_load_plan plan;
  reshard_error err;
  reshard_error_clear(&err);
  c->request.pooled = memory;
  reshard_status status = reshard_plan_load(&c->request, &arena, &plan, &err);
  cr_assert_eq(status, RESHARD_INVALID_ARGUMENT, "%s: status %s: %s", what,
               reshard_status_name(status), err.message);
  cr_assert(strstr(err.message, fragment) != NULL,
            "%s: message lacks \"%s\": %s", what, fragment, err.message);
  reshard_arena_destroy(&arena);
}

/* A block table the pool's rules refuse, and a pool of another
 * participant, are refused by the plan itself, naming the entry. */
static void refuse_bad_tables(oracle_case *c,
                              const reshard_pooled_memory *memory,
                              uint64_t needed, uint64_t num_blocks,
                              const char *what) {
  uint32_t *ids = RESHARD_ARENA_NEW(&c->arena, uint32_t, memory->block_count);
  cr_assert_not_null(ids);
  memcpy(ids, memory->block_ids, memory->block_count * sizeof *ids);
  reshard_pooled_memory bad = *memory;
  bad.block_ids = ids;
  ids[0] = (uint32_t)num_blocks;
  expect_refused(c, &bad, what, "pooled.block_ids[0]");
  ids[0] = memory->block_ids[0];
  if (needed > 1) {
    ids[1] = ids[0];
    expect_refused(c, &bad, what, "pooled.block_ids[1]");
    ids[1] = memory->block_ids[1];
  }
  bad.block_count = (size_t)needed - 1;
  expect_refused(c, &bad, what, "pooled.block_ids");
  bad.block_count = memory->block_count;
  for (size_t p = 0; p < c->reader.part_count; p++) {
    const reshard_placement_part *other = &c->reader.parts[p];
    if (other != c->participant && other->layer_count > 0) {
      reshard_bound_pool foreign = *memory->pool;
      foreign.part = other;
      bad.pool = &foreign;
      expect_refused(c, &bad, what, "pooled: the pool is participant");
      break;
    }
  }
}

/* Gives each layer's region of a per-layer pool (vLLM, FlashInfer) a
 * block stride of its own, layer l's padded by 16 * l items a block, as
 * an engine that aligns each layer's blocks differently would: then the
 * regions of one page move by different amounts from page to page, and
 * the planner must move each by its own (and cannot take one shift for
 * the whole page). Returns whether it padded. */
static bool pad_layer_strides(reshard_pool *pool, oracle_pool_style style,
                              uint64_t itemsize) {
  if (style != ORACLE_POOL_VLLM && style != ORACLE_POOL_FLASHINFER) {
    return false;
  }
  size_t components = pool->tensor_count / pool->region_count;
  for (size_t t = 0; t < pool->tensor_count; t++) {
    reshard_pool_tensor *tensor = &pool->tensors[t];
    size_t layer = t / components, component = t % components;
    uint64_t stride = tensor->block_stride_bytes + 16 * itemsize * layer;
    tensor->block_stride_bytes = stride;
    if (style == ORACLE_POOL_VLLM) {
      /* [2, blocks, block, heads, dim]: V after all of K's blocks. */
      tensor->offset_bytes = component * pool->num_blocks * stride;
      pool->regions[layer].nbytes = components * pool->num_blocks * stride;
    } else {
      pool->regions[layer].nbytes = pool->num_blocks * stride;
    }
  }
  return true;
}

/* Pages p >= 1 of the plan whose copies, and page p - 1's, each lie in
 * one batch (with `same_batch`: the same one for both): the pages whose
 * columns take page p - 1's bytes, when every page is the one before it
 * shifted one amount per region. Without `same_batch` and with
 * `any_before`, pages p whose copies lie in one batch after any such
 * page (not only p - 1): the pages whose runs are an earlier whole
 * page's moved. */
static uint64_t page_pairs(const reshard_load_plan *plan, bool same_batch,
                           bool any_before) {
  size_t pages = (size_t)plan->hit_pages;
  size_t *first = calloc(pages + 1, sizeof *first);
  size_t *last = calloc(pages + 1, sizeof *last);
  cr_assert(first != NULL && last != NULL);
  for (size_t b = 0; b < plan->batch_count; b++) {
    const reshard_batch *batch = &plan->batches[b];
    for (size_t i = batch->first; i < batch->first + batch->count; i++) {
      size_t p = (size_t)plan->copies[i].page_index;
      cr_assert_lt(p, pages);
      if (first[p] == 0) {
        first[p] = b + 1;
      }
      last[p] = b + 1;
    }
  }
  uint64_t pairs = 0;
  bool whole_before = pages > 0 && first[0] == last[0];
  for (size_t p = 1; p < pages; p++) {
    bool before = any_before ? whole_before : first[p - 1] == last[p - 1];
    pairs += before && first[p] == last[p] &&
             (!same_batch || last[p - 1] == first[p]);
    whole_before |= first[p] == last[p];
  }
  free(first);
  free(last);
  return pairs;
}

/* The varint columns of `plan` must encode `copies` (the plain plan's),
 * batch by batch, each value a minimal LEB128 varint. */
static void expect_columns(const reshard_load_plan *plan,
                           const reshard_load_plan *plain, const char *what) {
  const reshard_varint_batches *columns = &plan->columns;
  cr_assert_not_null(columns->columns, "%s: no columns", what);
  cr_assert_eq(columns->batch_count, plain->batch_count, "%s", what);
  for (size_t b = 0; b < plain->batch_count; b++) {
    const reshard_batch *batch = &plain->batches[b];
    for (unsigned c = 0; c < 6; c++) {
      const uint8_t *at = columns->columns[b * 6 + c];
      const uint8_t *end = at + columns->column_bytes[b * 6 + c];
      for (size_t i = 0; i < batch->count; i++) {
        const reshard_copy *copy = &plain->copies[batch->first + i];
        const uint64_t fields[6] = {copy->page_index,    copy->part_index,
                                    copy->part_offset,   copy->region_index,
                                    copy->region_offset, copy->nbytes};
        uint64_t value = 0;
        for (unsigned shift = 0;; shift += 7) {
          cr_assert(shift < 64 && at < end,
                    "%s: batch %zu column %u row %zu: a bad varint", what, b, c,
                    i);
          uint8_t byte = *at++;
          value |= (uint64_t)(byte & 0x7f) << shift;
          if ((byte & 0x80) == 0) {
            cr_assert(byte != 0 || shift == 0, "%s: a padded varint", what);
            break;
          }
        }
        cr_assert_eq(value, fields[c],
                     "%s: batch %zu column %u row %zu is %" PRIu64
                     ", the copy has %" PRIu64,
                     what, b, c, i, value, fields[c]);
      }
      cr_assert_eq(at, end, "%s: batch %zu column %u: bytes too many", what, b,
                   c);
    }
  }
}

/* The same batches and runs. */
static void expect_same_runs(const reshard_load_plan *a,
                             const reshard_load_plan *b, const char *what) {
  cr_assert_eq(a->batch_count, b->batch_count, "%s: batches", what);
  cr_assert_eq(
      memcmp(a->batches, b->batches, a->batch_count * sizeof *a->batches), 0,
      "%s: batches differ", what);
  cr_assert_eq(a->runs.run_count, b->runs.run_count, "%s: runs", what);
  cr_assert_eq(a->runs.batch_count, b->runs.batch_count, "%s: run batches",
               what);
  cr_assert_eq(memcmp(a->runs.batch_first, b->runs.batch_first,
                      (a->runs.batch_count + 1) * sizeof *a->runs.batch_first),
               0, "%s: runs per batch differ", what);
  for (size_t r = 0; r < a->runs.run_count; r++) {
    cr_assert_eq(
        memcmp(&a->runs.runs[r], &b->runs.runs[r], sizeof a->runs.runs[r]), 0,
        "%s: run %zu differs", what, r);
  }
}

/* Builds, binds, plans both ways, executes and compares one case. */
static void run_pool_case(const pool_spec *spec, uint64_t stream,
                          unsigned index, pool_result *result) {
  uint64_t base = oracle_base_seed();
  char msg[ORACLE_MSG_SIZE];
  oracle_case c;
  uint64_t seed = 0;
  bool built = false;
  for (unsigned attempt = 0; attempt < SEED_ATTEMPTS && !built; attempt++) {
    seed = oracle_case_seed(base, stream, index + attempt * 1000u);
    cr_assert(oracle_case_build(&c, seed, &spec->opts, msg, sizeof msg),
              "RESHARD_ORACLE_SEED=0x%016" PRIx64 " stream %" PRIu64
              " case %u: %s",
              base, stream, index, msg);
    /* A block below the page needs pages of two tokens or more. */
    built = spec->relation != BLOCK_SMALLER || c.descriptor.page_size > 1;
    if (!built) {
      oracle_case_destroy(&c);
    }
  }
  cr_assert(built, "stream %" PRIu64 " case %u: no seed with pages > 1", stream,
            index);
  oracle_rng rng;
  oracle_rng_seed(&rng, seed ^ 0x9001c0de5eedull);
  result->picked = repick(&c, spec->pick, &rng);
  const reshard_placement_part *part = c.participant;

  uint64_t page = c.descriptor.page_size;
  uint64_t block_size = block_size_for(&rng, page, spec->relation);
  oracle_pool_style style = spec->random_style
                                ? (oracle_pool_style)oracle_rng_between(
                                      &rng, 0, ORACLE_POOL_STYLE_COUNT - 1)
                                : spec->style;
  uint64_t span = c.request.page_count * page;
  uint64_t needed = (span + block_size - 1) / block_size;
  uint64_t block_bytes =
      oracle_pool_block_bytes(&c.descriptor, part, style, block_size);
  uint64_t room = POOL_BUDGET / block_bytes; /* blocks that fit */
  uint64_t extra = oracle_rng_between(&rng, 1, 8);
  if (room < needed + extra) {
    extra = room > needed + 1 ? room - needed : 1;
  }
  uint64_t num_blocks = needed + extra;
  size_t table = spec->longer_table
                     ? (size_t)oracle_rng_between(&rng, needed + 1, num_blocks)
                     : (size_t)needed;
  reshard_pool pool;
  oracle_build_pool(&c.descriptor, part, style, block_size, num_blocks,
                    &c.arena, &pool);
  /* Drawn apart from `rng`, so the rest of the case is what it was. */
  oracle_rng pad_rng;
  oracle_rng_seed(&pad_rng, seed ^ 0x5ad5ad5ad5ull);
  bool padded = oracle_rng_chance(&pad_rng, 50) &&
                pad_layer_strides(&pool, style, c.descriptor.itemsize);
  uint32_t *ids = spec->table_in_runs
                      ? oracle_block_table_in_runs(&rng, &c.arena, num_blocks)
                      : oracle_block_table(&rng, &c.arena, num_blocks);
  char what[1536];
  snprintf(what, sizeof what,
           "RESHARD_ORACLE_SEED=0x%016" PRIx64 " stream %" PRIu64
           " case %u: pool %s in place of the case's memory, %s (%" PRIu64
           " tokens, page %" PRIu64 "), %" PRIu64
           " blocks, table %zu for %" PRIu64 " needed%s%s%s [%s]",
           base, stream, index, oracle_pool_style_name(style),
           relation_name(spec->relation), block_size, page, num_blocks, table,
           needed, padded ? ", layer strides padded" : "",
           spec->runs ? ", runs" : "",
           spec->small_batches ? ", small batches" : "", c.description);

  reshard_limits limits = reshard_limits_default();
  reshard_bound_pool bound;
  reshard_bound_binding pooled, explicit_bound;
  reshard_error err;
  reshard_error_clear(&err);
  cr_assert_eq(reshard_pool_validate(&pool, &c.descriptor, part, &limits,
                                     "pool", &c.arena, &bound, &err),
               RESHARD_OK, "%s: %s", what, err.message);
  cr_assert_eq(reshard_pool_bind(&bound, ids, table, span, &limits, "pooled",
                                 &c.arena, &pooled, &err),
               RESHARD_OK, "%s: %s", what, err.message);

  /* The explicit form: what the oracle checks the bytes against. */
  oracle_pool_binding(&pool, &c.descriptor, part, ids, span, &c.arena,
                      &c.binding);
  c.request.binding = &c.binding;
  cr_assert_eq(reshard_binding_validate(&c.binding, &c.descriptor, part,
                                        c.request.page_count, &limits, &c.arena,
                                        &explicit_bound, &err),
               RESHARD_OK, "%s: explicit binding: %s", what, err.message);
  cr_assert(oracle_same_bound(&pooled, &explicit_bound, msg, sizeof msg),
            "%s: pooled bound binding against the explicit one: %s", what, msg);

  c.request.runs = spec->runs;
  reshard_arena explicit_arena, pooled_arena;
  reshard_load_plan explicit_plan, pooled_plan;
  oracle_exec_stats stats;
  memset(&stats, 0, sizeof stats);
  c.request.bound_binding = NULL;
  cr_assert(oracle_case_run(&c, &explicit_arena, &explicit_plan, &stats, msg,
                            sizeof msg),
            "%s: explicit plan: %s", what, msg);
  c.request.bound_binding = &pooled;
  cr_assert(
      oracle_case_run(&c, &pooled_arena, &pooled_plan, &stats, msg, sizeof msg),
      "%s: pooled plan: %s", what, msg);
  cr_assert(
      oracle_same_load_plans(&pooled_plan, &explicit_plan, msg, sizeof msg),
      "%s: pooled plan against explicit plan: %s", what, msg);
  /* The pool and the table as the daemon gives them: never bound, each
   * page's ranges written from the table, pages that start alike in
   * their blocks planned from the remembered page. */
  reshard_pooled_memory memory = {&bound, ids, table};
  reshard_arena table_arena;
  reshard_load_plan table_plan;
  c.request.bound_binding = NULL;
  c.request.pooled = &memory;
  cr_assert(
      oracle_case_run(&c, &table_arena, &table_plan, &stats, msg, sizeof msg),
      "%s: plan from the pool and the table: %s", what, msg);
  /* Over a pool, pages keep their sequences even one per copy (to be
   * shifted on the next page): as often as the explicit plan, or more. */
  uint64_t table_sequence_pages = table_plan.sequence_pages;
  cr_assert_geq(table_sequence_pages, explicit_plan.sequence_pages,
                "%s: pages lowered as sequences", what);
  table_plan.sequence_pages = explicit_plan.sequence_pages;
  cr_assert(
      oracle_same_load_plans(&table_plan, &explicit_plan, msg, sizeof msg),
      "%s: plan from the pool and the table against the explicit plan: "
      "%s",
      what, msg);
  /* A page that starts where the last did in its block, or lies inside
   * one block as the last did, is always the last one shifted, with or
   * without a range cut where the span ends. */
  cr_assert_geq(table_plan.reused_pages, explicit_plan.reused_pages,
                "%s: pages planned as the page before them shifted", what);
  /* Every page inside one block (blocks of a page or of several): each is
   * the one before it shifted. */
  if (block_size % page == 0 && spec->opts.max_sources == 1 &&
      table_sequence_pages == table_plan.hit_pages &&
      table_plan.hit_pages > 1) {
    cr_assert_eq(table_plan.reused_pages, table_sequence_pages - 1,
                 "%s: pages planned as the page before them shifted", what);
  }
  /* Runs taken from an earlier whole page, moved
   * (reshard__run_folder_shifted): only for shifted pages, and, where
   * every page is the one before it with one block per page (each region
   * then moves by one amount: its tensors share a block stride), for
   * every page that lies wholly in one batch after a page that did, with
   * or without pages cut by batches between them. */
  cr_assert_leq(table_plan.run_template_pages, table_plan.reused_pages,
                "%s: pages whose runs were the page before's moved", what);
  if (!spec->runs) {
    cr_assert_eq(table_plan.run_template_pages, 0, "%s", what);
  } else if (block_size == page && spec->opts.max_sources == 1 &&
             table_sequence_pages == table_plan.hit_pages) {
    cr_assert_eq(table_plan.run_template_pages,
                 page_pairs(&table_plan, false, true),
                 "%s: pages whose runs were the page before's moved", what);
  }
  if (spec->runs) {
    /* As the daemon asks: runs without the copies, the same batches and
     * runs. */
    reshard_arena runs_arena;
    reshard_load_plan runs_plan;
    reshard_arena_init(&runs_arena, 0);
    c.request.omit_copies = true;
    reshard_status status =
        reshard_plan_load(&c.request, &runs_arena, &runs_plan, &err);
    c.request.omit_copies = false;
    cr_assert_eq(status, RESHARD_OK, "%s: runs without copies: %s", what,
                 err.message);
    cr_assert_null(runs_plan.copies, "%s", what);
    cr_assert_eq(runs_plan.run_template_pages, table_plan.run_template_pages,
                 "%s: runs without copies", what);
    /* Pages cut by batches take an earlier page's runs only when they
     * are reused: the page before them shifted, or the same sequences
     * moved by amounts of their own (two blocks a page). */
    cr_assert_leq(runs_plan.run_template_cut_pages, runs_plan.reused_pages,
                  "%s: cut pages whose runs were an earlier page's", what);
    cr_assert_eq(table_plan.run_template_cut_pages, 0,
                 "%s: cut pages take templates only without copies", what);
    result->cut_pages += runs_plan.run_template_cut_pages;
    expect_same_runs(&runs_plan, &table_plan, what);
    oracle_plan_release(&c, &runs_arena, &runs_plan);
  }
  {
    /* As the daemon asks without runs: varint columns, no copies. A page
     * that is the one before it shifted, both in one batch, takes that
     * page's bytes for the columns the shift leaves alone. */
    reshard_arena columns_arena;
    reshard_load_plan columns_plan;
    reshard_arena_init(&columns_arena, 0);
    c.request.runs = false;
    c.request.varint_columns = true;
    c.request.omit_copies = true;
    reshard_status status =
        reshard_plan_load(&c.request, &columns_arena, &columns_plan, &err);
    c.request.runs = spec->runs;
    c.request.varint_columns = false;
    c.request.omit_copies = false;
    cr_assert_eq(status, RESHARD_OK, "%s: columns without copies: %s", what,
                 err.message);
    cr_assert_null(columns_plan.copies, "%s", what);
    cr_assert_eq(columns_plan.batch_count, table_plan.batch_count, "%s", what);
    cr_assert(table_plan.batch_count == 0 ||
                  memcmp(columns_plan.batches, table_plan.batches,
                         table_plan.batch_count * sizeof(reshard_batch)) == 0,
              "%s: columns without copies: other batches", what);
    expect_columns(&columns_plan, &table_plan, what);
    cr_assert_leq(columns_plan.column_template_pages, table_plan.reused_pages,
                  "%s: pages whose columns were the page before's", what);
    if (block_size == page && spec->opts.max_sources == 1 &&
        table_sequence_pages == table_plan.hit_pages) {
      cr_assert_eq(columns_plan.column_template_pages,
                   page_pairs(&table_plan, true, false),
                   "%s: pages whose columns were the page before's", what);
    }
    oracle_plan_release(&c, &columns_arena, &columns_plan);
  }
  oracle_plan_release(&c, &table_arena, &table_plan);
  if (index == 0) {
    refuse_bad_tables(&c, &memory, needed, num_blocks, what);
  }
  c.request.pooled = NULL;
  if (spec->runs) {
    cr_assert_not_null(pooled_plan.runs.batch_first, "%s", what);
    cr_assert(oracle_check_runs_fold(pooled_plan.copies, pooled_plan.batches,
                                     pooled_plan.batch_count, &pooled_plan.runs,
                                     msg, sizeof msg),
              "%s: %s", what, msg);
  } else {
    cr_assert_null(pooled_plan.runs.batch_first, "%s", what);
  }
  result->covered_bytes += stats.covered_bytes;
  result->copies += pooled_plan.copy_count;
  oracle_plan_release(&c, &pooled_arena, &pooled_plan);
  oracle_plan_release(&c, &explicit_arena, &explicit_plan);
  oracle_case_destroy(&c);
}

/* The cases a matrix parameter runs. */
static pool_spec spec_of(const topology_case *t, reshard_format format,
                         block_relation relation, oracle_pool_style style,
                         unsigned index, uint64_t stream) {
  pool_spec spec;
  memset(&spec, 0, sizeof spec);
  spec.opts.format = format;
  spec.opts.style = ORACLE_MEM_CONTIGUOUS; /* replaced by the pool */
  spec.opts.single_tensor = t->single_tensor;
  spec.opts.writer = &t->writer;
  spec.opts.reader = &t->reader;
  /* 0: exact table, runs; 1: longer table, two sources, misses and
   * preferences; 2: exact table, runs, small batches; 3: all of them. */
  bool twists = index % 2 == 1;
  spec.opts.max_sources = twists ? 2 : 1;
  spec.opts.selection_twists = twists;
  spec.pick = t->pick;
  spec.relation = relation;
  spec.style = style;
  spec.longer_table = twists;
  spec.runs = index != 1;
  spec.small_batches = index >= 2;
  if (spec.small_batches) {
    oracle_rng rng;
    oracle_rng_seed(&rng,
                    oracle_case_seed(oracle_base_seed(), stream, 77 + index));
    spec.opts.max_batch_operations = oracle_rng_between(&rng, 1, 24);
    spec.opts.max_batch_bytes = oracle_rng_between(&rng, 1, 2048);
  }
  return spec;
}

typedef struct matrix_param {
  reshard_format format;
  unsigned topology;
  block_relation relation;
  oracle_pool_style style;
  unsigned id;
} matrix_param;

#define MATRIX_SIZE                                                            \
  ((TOPOLOGIES - 1) * 3 * BLOCK_RELATIONS * 3 +                                \
   1 * 3 * BLOCK_RELATIONS * ORACLE_POOL_STYLE_COUNT)
#define MATRIX_CASES 4

ParameterizedTestParameters(pool_oracle, matrix) {
  static matrix_param params[MATRIX_SIZE];
  size_t k = 0;
  for (unsigned t = 0; t < TOPOLOGIES; t++) {
    /* The latent pool is a single-tensor cache's; that topology takes
     * every style. */
    unsigned styles = topologies[t].single_tensor ? ORACLE_POOL_STYLE_COUNT
                                                  : ORACLE_POOL_LATENT;
    for (int f = RESHARD_FORMAT_PLHD; f <= RESHARD_FORMAT_HPLD; f++) {
      for (unsigned r = 0; r < BLOCK_RELATIONS; r++) {
        for (unsigned s = 0; s < styles; s++) {
          params[k] = (matrix_param){(reshard_format)f, t, (block_relation)r,
                                     (oracle_pool_style)s, (unsigned)k};
          k++;
        }
      }
    }
  }
  cr_assert_eq(k, MATRIX_SIZE);
  return cr_make_param_array(matrix_param, params, MATRIX_SIZE);
}

ParameterizedTest(matrix_param *param, pool_oracle, matrix) {
  const topology_case *t = &topologies[param->topology];
  uint64_t stream = 0x9100 + param->id;
  pool_result result = {0, 0, false, 0};
  unsigned picked = 0;
  for (unsigned i = 0; i < MATRIX_CASES; i++) {
    pool_spec spec =
        spec_of(t, param->format, param->relation, param->style, i, stream);
    run_pool_case(&spec, stream, i, &result);
    picked += result.picked;
  }
  cr_assert_gt(result.covered_bytes, 0, "%s %s %s %s: no byte checked", t->name,
               reshard_format_name(param->format),
               relation_name(param->relation),
               oracle_pool_style_name(param->style));
  cr_assert_gt(picked, 0, "%s: no case had the participant it asks for",
               t->name);
}

/* Random topologies on both sides, random styles and block sizes, every
 * format, single-tensor caches now and then. */
Test(pool_oracle, random_topologies_and_styles) {
  pool_result result = {0, 0, false, 0};
  for (unsigned i = 0; i < 60; i++) {
    pool_spec spec;
    memset(&spec, 0, sizeof spec);
    spec.opts.format = (reshard_format)(RESHARD_FORMAT_PLHD + i % 3);
    spec.opts.style = ORACLE_MEM_CONTIGUOUS;
    spec.opts.max_sources = 1 + i % 3;
    spec.opts.selection_twists = i % 4 == 1;
    spec.opts.single_tensor = i % 5 == 4;
    spec.pick = PICK_ANY;
    spec.relation = BLOCK_ANY;
    spec.random_style = true;
    spec.longer_table = i % 2 == 1;
    spec.runs = i % 3 != 0;
    run_pool_case(&spec, 0x9001, i, &result);
  }
  cr_assert_gt(result.covered_bytes, 0);
  cr_assert_gt(result.copies, 0);
}

/* Pages cut by batch boundaries (batches of a few copies, bytes
 * unbounded) in every topology and format over vLLM pools of one block
 * a page: where a page starts at the place in its batch an earlier one
 * did, every page between them shifted, it takes that page's runs moved
 * (plan.c, cut templates), and its runs must still be the fold of its
 * copies (run_pool_case compares them with the plan's with copies). */
Test(pool_oracle, cut_pages_take_earlier_runs) {
  pool_result result = {0, 0, false, 0};
  for (unsigned t = 0; t < TOPOLOGIES; t++) {
    for (int f = RESHARD_FORMAT_PLHD; f <= RESHARD_FORMAT_HPLD; f++) {
      for (uint64_t ops = 3; ops <= 24; ops += 7) {
        uint64_t stream = 0x9300 + t * 64 + (uint64_t)f * 8 + ops;
        pool_spec spec = spec_of(&topologies[t], (reshard_format)f, BLOCK_EQUAL,
                                 ORACLE_POOL_VLLM, 0, stream);
        spec.small_batches = true;
        spec.opts.max_batch_operations = ops;
        spec.opts.max_batch_bytes = UINT64_C(1) << 40;
        run_pool_case(&spec, stream, 0, &result);
      }
    }
  }
  cr_assert_gt(result.covered_bytes, 0);
  cr_assert_gt(result.cut_pages, 0, "no cut page took an earlier page's runs");
}

/* Tables in runs of consecutive blocks, blocks below the page, in every
 * topology and format: a page's blocks lie back to back on some pages
 * and apart on others, so a page shifted from the one before by other
 * amounts block by block may coalesce where that page did not (and the
 * other way round). Pages planned from a remembered one must coalesce as
 * the reference does (lib/plan/sequences.c, sorted_region_free). */
Test(pool_oracle, blocks_back_to_back_on_some_pages) {
  pool_result result = {0, 0, false, 0};
  for (unsigned t = 0; t < TOPOLOGIES; t++) {
    for (int f = RESHARD_FORMAT_PLHD; f <= RESHARD_FORMAT_HPLD; f++) {
      for (unsigned i = 0; i < 4; i++) {
        uint64_t stream = 0x9500 + t * 16 + (uint64_t)f * 4 + i;
        pool_spec spec = spec_of(
            &topologies[t], (reshard_format)f, BLOCK_SMALLER,
            i < 2 ? ORACLE_POOL_VLLM : ORACLE_POOL_FLASHINFER, 0, stream);
        spec.table_in_runs = true;
        spec.runs = i % 2 == 0;
        run_pool_case(&spec, stream, i, &result);
      }
    }
  }
  cr_assert_gt(result.covered_bytes, 0);
  cr_assert_gt(result.copies, 0);
}

/* ---- Disjointness against SPEC §1.5a's pairwise rule ----
 * Random small pools, biased to crowd tensors into one region with one
 * block stride: the library accepts a pool exactly when every pair of its
 * tensors has disjoint byte spans, or lies in one region with one block
 * stride, block extents within the stride and per-block footprints
 * disjoint as arcs of that circle; and when it refuses, the pair it names
 * is one the rule cannot prove disjoint. The rule itself is checked
 * against the pools' bytes, enumerated one by one. */

#define RANDOM_POOL_TENSORS 16

typedef struct random_pool {
  uint64_t layers[RANDOM_POOL_TENSORS];
  reshard_descriptor descriptor;
  reshard_placement_part part;
  reshard_region regions[2];
  reshard_pool_tensor tensors[RANDOM_POOL_TENSORS];
  reshard_pool pool;
  /* per tensor, from the SPEC text */
  uint64_t start[RANDOM_POOL_TENSORS], end[RANDOM_POOL_TENSORS];
  uint64_t block_extent[RANDOM_POOL_TENSORS];
  size_t region[RANDOM_POOL_TENSORS];
} random_pool;

/* SPEC §1.5a's nesting: by increasing stride, each axis of count > 1
 * steps over the extent of those below it. Returns the tensor's extent,
 * or 0 when the strides do not nest. */
static uint64_t spec_extent(const uint64_t counts[3], const uint64_t strides[3],
                            uint64_t head_bytes) {
  size_t order[3] = {0, 1, 2};
  for (int pass = 0; pass < 2; pass++) {
    for (int i = 0; i < 2; i++) {
      if (strides[order[i]] > strides[order[i + 1]]) {
        size_t swap = order[i];
        order[i] = order[i + 1];
        order[i + 1] = swap;
      }
    }
  }
  uint64_t span = head_bytes;
  for (int i = 0; i < 3; i++) {
    size_t a = order[i];
    if (counts[a] > 1) {
      if (strides[a] < span) {
        return 0;
      }
      span += (counts[a] - 1) * strides[a];
    }
  }
  return span;
}

static void random_pool_build(oracle_rng *rng, random_pool *p) {
  memset(p, 0, sizeof *p);
  /* Mostly a few tensors, sometimes many in one sweep. */
  size_t layers =
      (size_t)(oracle_rng_chance(rng, 90)
                   ? oracle_rng_between(rng, 2, 6)
                   : oracle_rng_between(rng, 7, RANDOM_POOL_TENSORS));
  for (size_t l = 0; l < layers; l++) {
    p->layers[l] = l;
  }
  uint64_t heads = oracle_rng_between(rng, 1, 2);
  uint64_t hb = oracle_rng_between(rng, 1, 2); /* itemsize 1 */
  p->descriptor =
      (reshard_descriptor){p->layers, layers, "u8", 1, 4, heads, hb, 0};
  p->part = (reshard_placement_part){
      .participant_id = "p",
      .layer_ids = p->layers,
      .layer_count = layers,
      .head_count = heads,
      .replica_count = 1,
  };
  /* The second region is elsewhere, or aliases the first's addresses. */
  uint64_t second =
      oracle_rng_chance(rng, 70) ? 8192 : 4096 + oracle_rng_between(rng, 0, 64);
  p->regions[0] = (reshard_region){"a", 4096, 512};
  p->regions[1] = (reshard_region){"b", second, 512};
  uint64_t block_size = oracle_rng_between(rng, 1, 3);
  uint64_t num_blocks = oracle_rng_between(rng, 1, 4);
  uint64_t common = oracle_rng_between(rng, 2, 24);
  for (size_t t = 0; t < layers; t++) {
    reshard_pool_tensor *tensor = &p->tensors[t];
    uint64_t counts[3] = {num_blocks, block_size, heads}, strides[3], extent;
    do {
      strides[0] =
          oracle_rng_chance(rng, 80) ? common : oracle_rng_between(rng, 1, 30);
      if (num_blocks == 1 && oracle_rng_chance(rng, 10)) {
        strides[0] = 0; /* free: one block */
      }
      strides[1] = oracle_rng_between(rng, 1, 8);
      strides[2] = oracle_rng_between(rng, 1, 8);
      extent = spec_extent(counts, strides, hb);
    } while (extent == 0);
    p->region[t] = oracle_rng_chance(rng, 85) ? 0 : 1;
    *tensor = (reshard_pool_tensor){
        .global_layer_id = t,
        .component = RESHARD_COMPONENT_KEY,
        .region_id = p->regions[p->region[t]].region_id,
        .offset_bytes = oracle_rng_between(rng, 0, 60),
        .block_stride_bytes = strides[0],
        .token_stride_bytes = strides[1],
        .head_stride_bytes = strides[2],
    };
    p->start[t] = p->regions[p->region[t]].address + tensor->offset_bytes;
    p->end[t] = p->start[t] + extent;
    p->block_extent[t] = hb +
                         (block_size > 1 ? (block_size - 1) * strides[1] : 0) +
                         (heads > 1 ? (heads - 1) * strides[2] : 0);
  }
  p->pool = (reshard_pool){"p",        "e",        p->regions, 2,
                           block_size, num_blocks, p->tensors, layers};
}

/* Whether SPEC §1.5a proves tensors a and b disjoint. */
static bool spec_disjoint(const random_pool *p, size_t a, size_t b) {
  if (p->end[a] <= p->start[b] || p->end[b] <= p->start[a]) {
    return true;
  }
  uint64_t stride = p->tensors[a].block_stride_bytes;
  if (p->region[a] != p->region[b] ||
      stride != p->tensors[b].block_stride_bytes ||
      p->block_extent[a] > stride || p->block_extent[b] > stride) {
    return false;
  }
  uint64_t pa = p->tensors[a].offset_bytes % stride;
  uint64_t pb = p->tensors[b].offset_bytes % stride;
  return (pb + stride - pa) % stride >= p->block_extent[a] &&
         (pa + stride - pb) % stride >= p->block_extent[b];
}

/* Whether tensors a and b share a byte, value by value. */
static bool share_a_byte(const random_pool *p, size_t a, size_t b) {
  static uint8_t owner[8192 + 1024];
  memset(owner, 0, sizeof owner);
  const size_t pair[2] = {a, b};
  for (int k = 0; k < 2; k++) {
    const reshard_pool_tensor *t = &p->tensors[pair[k]];
    for (uint64_t blk = 0; blk < p->pool.num_blocks; blk++) {
      for (uint64_t s = 0; s < p->pool.block_size; s++) {
        for (uint64_t h = 0; h < p->part.head_count; h++) {
          for (uint64_t e = 0; e < p->descriptor.key_head_dim; e++) {
            uint64_t at = p->start[pair[k]] + blk * t->block_stride_bytes +
                          s * t->token_stride_bytes + h * t->head_stride_bytes +
                          e;
            if (owner[at - 4096] & (k == 0 ? 2 : 1)) {
              return true;
            }
            owner[at - 4096] |= (uint8_t)(k == 0 ? 1 : 2);
          }
        }
      }
    }
  }
  return false;
}

Test(pool_oracle, disjointness_follows_the_pairwise_rule) {
  oracle_rng rng;
  oracle_rng_seed(&rng, oracle_case_seed(oracle_base_seed(), 0x9002, 0));
  unsigned accepted = 0, refused = 0;
  for (unsigned i = 0; i < 20000; i++) {
    random_pool p;
    random_pool_build(&rng, &p);
    size_t n = p.pool.tensor_count;
    bool valid = true;
    for (size_t a = 0; a < n; a++) {
      for (size_t b = a + 1; b < n; b++) {
        bool proven = spec_disjoint(&p, a, b);
        bool overlap = p.start[a] < p.end[b] && p.start[b] < p.end[a];
        cr_assert(!proven || !overlap || !share_a_byte(&p, a, b),
                  "pool %u: the rule proves tensors %zu and %zu disjoint, "
                  "yet they share a byte",
                  i, a, b);
        valid = valid && proven;
      }
    }
    reshard_limits limits = reshard_limits_default();
    reshard_arena scratch;
    reshard_arena_init(&scratch, 0);
    reshard_bound_pool bound;
    reshard_error err;
    reshard_error_clear(&err);
    reshard_status status =
        reshard_pool_validate(&p.pool, &p.descriptor, &p.part, &limits, "pool",
                              &scratch, &bound, &err);
    reshard_arena_destroy(&scratch);
    char described[1024];
    int used = snprintf(described, sizeof described,
                        "pool %u: %zu tensors, %llu blocks of %llu tokens, "
                        "%llu heads, hb %llu; region b at %llu;",
                        i, n, (unsigned long long)p.pool.num_blocks,
                        (unsigned long long)p.pool.block_size,
                        (unsigned long long)p.part.head_count,
                        (unsigned long long)p.descriptor.key_head_dim,
                        (unsigned long long)p.regions[1].address);
    for (size_t t = 0; t < n && used > 0 && (size_t)used < sizeof described;
         t++) {
      const reshard_pool_tensor *x = &p.tensors[t];
      used += snprintf(described + used, sizeof described - (size_t)used,
                       " [%zu] %s +%llu strides %llu/%llu/%llu;", t,
                       x->region_id, (unsigned long long)x->offset_bytes,
                       (unsigned long long)x->block_stride_bytes,
                       (unsigned long long)x->token_stride_bytes,
                       (unsigned long long)x->head_stride_bytes);
    }
    if (valid) {
      cr_assert_eq(status, RESHARD_OK, "%s refused: %s", described,
                   err.message);
      accepted++;
      continue;
    }
    cr_assert_eq(status, RESHARD_INVALID_ARGUMENT, "%s accepted", described);
    size_t a, b;
    cr_assert_eq(
        sscanf(err.message, "pool.tensors[%zu] and pool.tensors[%zu]", &a, &b),
        2, "%s: %s", described, err.message);
    cr_assert(a < n && b < n && !spec_disjoint(&p, a, b),
              "%s refused naming a pair the rule proves disjoint: %s",
              described, err.message);
    refused++;
  }
  /* Both outcomes are common, so neither side is tested vacuously. */
  cr_assert_gt(accepted, 2000);
  cr_assert_gt(refused, 2000);
}
