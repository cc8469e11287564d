/* Transfer plans (SPEC §2.6) through reshard_plan_transfer, proven by
 * executing them: source pools filled with the logical value of every
 * (token, layer, head, component, element) at its block position, target
 * memory zeroed, the plan's copies run batch by batch between real
 * buffers, and every target byte of tokens below token_count checked to
 * hold its value and to have been written exactly once, with no other byte
 * written. Random shapes over every TP/PP/DP/replica change on either side,
 * MLA, block sizes that differ both ways, vLLM NHD, FlashInfer HND and
 * page-first pools on either side, a target given as a pool and as the
 * explicit binding it stands for (the same plan); the replica spreading
 * rule; every refusal §2.6 names. */
#include <criterion/criterion.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "reshard/arena.h"
#include "reshard/placement.h"
#include "reshard/pool.h"
#include "reshard/transfer.h"

#include "assert_error.h"
#include "oracle.h"
#include "pool_oracle.h"

#define K RESHARD_COMPONENT_KEY
#define V RESHARD_COMPONENT_VALUE

/* The pools of the tests have the styles of the first three
 * oracle_pool_style values (vLLM NHD, FlashInfer HND, page-first). */
#define POOL_STYLES (ORACLE_POOL_PAGE_FIRST + 1)

/* A pool of `style` for `part` (pool_oracle.h) at endpoint "peer", its
 * regions "{participant}-r0", "-r1", ... at fake aligned addresses from
 * `base` up, 1 << 32 apart (each participant's memory is its own). */
static void build_pool(reshard_arena *a, const reshard_descriptor *d,
                       const reshard_placement_part *part,
                       oracle_pool_style style, uint64_t block_size,
                       uint64_t num_blocks, uint64_t base, reshard_pool *out) {
  char prefix[64];
  snprintf(prefix, sizeof prefix, "%s-r", part->participant_id);
  const oracle_pool_site site = {"peer", prefix, 0, base, UINT64_C(1) << 32};
  oracle_build_pool_at(d, part, style, block_size, num_blocks, &site, a, out);
}

/* Moves the tensors of a pool's region r (a region per layer) `step` × r
 * bytes into it, as an engine whose layers differ in padding would: the
 * regions are alike but for their tensors' offsets, so none is written
 * as another renamed. */
static void stagger_layers(reshard_pool *pool, uint64_t step) {
  for (size_t r = 0; pool->region_count > 1 && r < pool->region_count; r++) {
    for (size_t i = 0; i < pool->tensor_count; i++) {
      reshard_pool_tensor *t = &pool->tensors[i];
      if (strcmp(pool->regions[r].region_id, t->region_id) == 0) {
        t->offset_bytes += step * r;
      }
    }
    pool->regions[r].nbytes += step * r;
  }
}

/* Puts the layers of a pool with a region per layer two to a region:
 * region r's tensors after region r - 1's when r is odd. A region's
 * tensors then write into two target regions of a target with a region
 * per layer. */
static void pair_layers(reshard_pool *pool) {
  size_t kept = 0;
  for (size_t r = 0; pool->region_count > 1 && r < pool->region_count; r++) {
    if (r % 2 == 0) {
      pool->regions[kept++] = pool->regions[r];
      continue;
    }
    reshard_region *into = &pool->regions[kept - 1];
    for (size_t i = 0; i < pool->tensor_count; i++) {
      reshard_pool_tensor *t = &pool->tensors[i];
      if (strcmp(pool->regions[r].region_id, t->region_id) == 0) {
        t->region_id = into->region_id;
        t->offset_bytes += into->nbytes;
      }
    }
    into->nbytes += pool->regions[r].nbytes;
  }
  if (kept > 0) {
    pool->region_count = kept;
  }
}

/* The region offset of (token, head) of the pool's tensor of (layer,
 * component), under `table`. */
static bool pool_offset(const reshard_pool *pool,
                        const reshard_placement_part *part,
                        const uint32_t *table, uint64_t layer,
                        reshard_component component, uint64_t token,
                        uint64_t head, size_t *region, uint64_t *offset) {
  for (size_t i = 0; i < pool->tensor_count; i++) {
    const reshard_pool_tensor *t = &pool->tensors[i];
    if (t->global_layer_id != layer || t->component != component) {
      continue;
    }
    for (size_t r = 0; r < pool->region_count; r++) {
      if (strcmp(pool->regions[r].region_id, t->region_id) == 0) {
        *region = r;
      }
    }
    uint64_t block = table[token / pool->block_size];
    *offset = t->offset_bytes + block * t->block_stride_bytes +
              (token % pool->block_size) * t->token_stride_bytes +
              (head - part->head_start) * t->head_stride_bytes;
    return true;
  }
  return false;
}

static uint8_t value_byte(uint64_t token, uint64_t layer, uint64_t head,
                          reshard_component component, uint64_t element,
                          uint64_t k) {
  uint64_t hash =
      oracle_element_hash(0, token, layer, head, component, element);
  return (uint8_t)(hash >> (8 * (k % 8)));
}

/* Host buffers for a pool's regions. */
typedef struct buffers {
  uint8_t **bytes;
  uint8_t **written;
  size_t count;
} buffers;

static void buffers_make(const reshard_pool *pool, buffers *out) {
  out->count = pool->region_count;
  out->bytes = calloc(out->count, sizeof *out->bytes);
  out->written = calloc(out->count, sizeof *out->written);
  for (size_t r = 0; r < out->count; r++) {
    out->bytes[r] = calloc(1, pool->regions[r].nbytes);
    out->written[r] = calloc(1, pool->regions[r].nbytes);
    cr_assert(out->bytes[r] != NULL && out->written[r] != NULL);
  }
}

static void buffers_free(buffers *b) {
  for (size_t r = 0; r < b->count; r++) {
    free(b->bytes[r]);
    free(b->written[r]);
  }
  free(b->bytes);
  free(b->written);
}

/* Writes every logical value of tokens [0, tokens) that `part` holds. */
static void fill_source(const reshard_descriptor *d,
                        const reshard_placement_part *part,
                        const reshard_pool *pool, const uint32_t *table,
                        uint64_t tokens, buffers *b) {
  for (uint64_t t = 0; t < tokens; t++) {
    for (size_t l = 0; l < part->layer_count; l++) {
      for (unsigned c = 1; c <= reshard_component_count(d); c++) {
        uint64_t hb = reshard_head_bytes(d, (reshard_component)c);
        for (uint64_t h = part->head_start;
             h < part->head_start + part->head_count; h++) {
          size_t region = 0;
          uint64_t at = 0;
          cr_assert(pool_offset(pool, part, table, part->layer_ids[l],
                                (reshard_component)c, t, h, &region, &at));
          for (uint64_t k = 0; k < hb; k++) {
            b->bytes[region][at + k] =
                value_byte(t, part->layer_ids[l], h, (reshard_component)c,
                           k / d->itemsize, k % d->itemsize);
          }
        }
      }
    }
  }
}

/* One random case: the placements, the pools, the tables. */
typedef struct transfer_case {
  reshard_arena arena;
  reshard_descriptor descriptor;
  reshard_placement source, target;
  const reshard_placement_part *reader;
  reshard_pool *source_pools;
  reshard_bound_pool *source_bound;
  reshard_transfer_pool *pools;
  size_t pool_count;
  uint32_t *source_table;
  size_t source_table_count;
  reshard_pool target_pool;
  reshard_bound_pool target_bound;
  uint32_t *target_table;
  size_t target_table_count;
  uint64_t tokens;
  uint64_t source_dp;
  char description[512];
} transfer_case;

/* A scattered table of `num_blocks` (pool_oracle.h), of which the first
 * *count, at least `needed`, are given. */
static uint32_t *random_table(oracle_rng *rng, reshard_arena *a,
                              uint64_t num_blocks, uint64_t needed,
                              size_t *count) {
  uint32_t *ids = oracle_block_table(rng, a, num_blocks);
  *count = (size_t)oracle_rng_between(rng, needed, num_blocks);
  return ids;
}

static uint64_t pick_block(oracle_rng *rng, uint64_t page) {
  uint64_t choices[] = {page, page > 1 ? page / 2 : 1, 2 * page,
                        oracle_rng_between(rng, 1, 3 * page)};
  return choices[oracle_rng_between(rng, 0, 3)];
}

static void case_build(transfer_case *c, uint64_t seed,
                       const oracle_topology *source_topology,
                       const oracle_topology *target_topology) {
  oracle_rng rng;
  oracle_rng_seed(&rng, seed);
  reshard_arena_init(&c->arena, 0);
  reshard_arena *a = &c->arena;
  reshard_error err;
  /* Its own draws, so the cases the others make stay as they were. */
  oracle_rng stagger;
  oracle_rng_seed(&stagger, seed ^ UINT64_C(0x57a66e5));
  oracle_random_descriptor(&rng, a, oracle_rng_chance(&rng, 20),
                           &c->descriptor);
  oracle_topology st, tt;
  if (source_topology) {
    st = *source_topology;
  } else {
    oracle_random_topology(&rng, &c->descriptor, &st);
  }
  if (target_topology) {
    tt = *target_topology;
  } else {
    oracle_random_topology(&rng, &c->descriptor, &tt);
  }
  reshard_descriptor sd = oracle_descriptor_clone(a, &rng, &c->descriptor);
  reshard_descriptor td = oracle_descriptor_clone(a, &rng, &c->descriptor);
  oracle_build_placement(a, &rng, &sd, &st, "p", &c->source);
  oracle_build_placement(a, &rng, &td, &tt, "d", &c->target);
  cr_assert_eq(reshard_placement_normalize(&c->source, a, &err), RESHARD_OK,
               "%s", err.message);
  cr_assert_eq(reshard_placement_normalize(&c->target, a, &err), RESHARD_OK,
               "%s", err.message);
  const reshard_descriptor *d = &c->source.descriptor;
  uint64_t page = d->page_size;
  c->tokens = oracle_rng_between(&rng, 1, 3 * page + 5);
  c->source_dp = oracle_rng_between(&rng, 0, st.dp - 1);
  /* A reader with layers (a pipeline stage may have none). */
  do {
    c->reader =
        &c->target.parts[oracle_rng_between(&rng, 0, c->target.part_count - 1)];
  } while (c->reader->layer_count == 0);

  uint64_t source_block = pick_block(&rng, page);
  uint64_t needed = (c->tokens + source_block - 1) / source_block;
  uint64_t num_blocks = needed + oracle_rng_between(&rng, 0, 6);
  c->source_table =
      random_table(&rng, a, num_blocks, needed, &c->source_table_count);
  c->pool_count = c->source.part_count;
  c->source_pools = RESHARD_ARENA_NEW(a, reshard_pool, c->pool_count + 1);
  c->source_bound = RESHARD_ARENA_NEW(a, reshard_bound_pool, c->pool_count + 1);
  c->pools = RESHARD_ARENA_NEW(a, reshard_transfer_pool, c->pool_count + 1);
  reshard_limits limits = reshard_limits_default();
  size_t n = 0;
  for (size_t p = 0; p < c->source.part_count; p++) {
    const reshard_placement_part *part = &c->source.parts[p];
    if (part->layer_count == 0) {
      continue; /* a stage without layers has no KV memory */
    }
    oracle_pool_style style =
        (oracle_pool_style)oracle_rng_between(&rng, 0, POOL_STYLES - 1);
    build_pool(a, d, part, style, source_block, num_blocks,
               (uint64_t)(p + 1) << 44, &c->source_pools[n]);
    if (oracle_rng_chance(&stagger, 25)) {
      stagger_layers(&c->source_pools[n], 64);
    } else if (oracle_rng_chance(&stagger, 25)) {
      pair_layers(&c->source_pools[n]);
    }
    cr_assert_eq(reshard_pool_validate(&c->source_pools[n], d, part, &limits,
                                       "pool", a, &c->source_bound[n], &err),
                 RESHARD_OK, "%s", err.message);
    c->pools[n] = (reshard_transfer_pool){
        part->participant_id, &c->source_pools[n], &c->source_bound[n]};
    n++;
  }
  c->pool_count = n;
  oracle_rng_shuffle(&rng, c->pools, n, sizeof *c->pools);

  uint64_t target_block = pick_block(&rng, page);
  uint64_t target_needed = (c->tokens + target_block - 1) / target_block;
  uint64_t target_blocks = target_needed + oracle_rng_between(&rng, 0, 6);
  c->target_table = random_table(&rng, a, target_blocks, target_needed,
                                 &c->target_table_count);
  oracle_pool_style target_style =
      (oracle_pool_style)oracle_rng_between(&rng, 0, POOL_STYLES - 1);
  build_pool(a, d, c->reader, target_style, target_block, target_blocks,
             (uint64_t)1 << 60, &c->target_pool);
  if (oracle_rng_chance(&stagger, 25)) {
    stagger_layers(&c->target_pool, 64);
  }
  cr_assert_eq(reshard_pool_validate(&c->target_pool, d, c->reader, &limits,
                                     "pool", a, &c->target_bound, &err),
               RESHARD_OK, "%s", err.message);
  snprintf(c->description, sizeof c->description,
           "seed %llu: source tp%llu pp%llu dp%llu, target tp%llu pp%llu "
           "dp%llu reader %s, %llu tokens, blocks %llu -> %llu, target "
           "style %d, %zu layers, %llu heads, dims %llu/%llu",
           (unsigned long long)seed, (unsigned long long)st.tp,
           (unsigned long long)st.pp, (unsigned long long)st.dp,
           (unsigned long long)tt.tp, (unsigned long long)tt.pp,
           (unsigned long long)tt.dp, c->reader->participant_id,
           (unsigned long long)c->tokens, (unsigned long long)source_block,
           (unsigned long long)target_block, target_style, d->layer_count,
           (unsigned long long)d->total_kv_heads,
           (unsigned long long)d->key_head_dim,
           (unsigned long long)d->value_head_dim);
}

static reshard_transfer_request case_request(transfer_case *c,
                                             reshard_binding *binding,
                                             reshard_bound_binding *bound) {
  *binding = (reshard_binding){
      c->reader->participant_id,   "peer", c->target_pool.regions,
      c->target_pool.region_count, NULL,   0};
  return (reshard_transfer_request){
      .source_placement = &c->source,
      .has_source_dp_rank = true,
      .source_dp_rank = c->source_dp,
      .pools = c->pools,
      .pool_count = c->pool_count,
      .source_block_ids = c->source_table,
      .source_block_count = c->source_table_count,
      .token_count = c->tokens,
      .target_placement = &c->target,
      .has_target_dp_rank = true,
      .target_dp_rank = c->reader->rank.dp,
      .binding = binding,
      .bound_binding = bound,
      .limits = reshard_limits_default(),
      /* Every plan without runs also carries its varint columns, checked
       * against its copies (columns_match_copies). */
      .varint_columns = true,
  };
}

/* Runs the plan and checks every target byte. */
static void execute_and_check(transfer_case *c,
                              const reshard_transfer_plan *plan) {
  const reshard_descriptor *d = &c->source.descriptor;
  buffers *sources = calloc(c->pool_count, sizeof *sources);
  for (size_t i = 0; i < c->pool_count; i++) {
    buffers_make(c->pools[i].pool, &sources[i]);
    const reshard_placement_part *part = reshard_placement_find_part(
        &c->source, c->pools[i].pool->participant_id);
    fill_source(d, part, c->pools[i].pool, c->source_table, c->tokens,
                &sources[i]);
  }
  buffers target;
  buffers_make(&c->target_pool, &target);
  for (size_t b = 0; b < plan->batch_count; b++) {
    const reshard_batch *batch = &plan->batches[b];
    uint64_t bytes = 0;
    for (size_t i = batch->first; i < batch->first + batch->count; i++) {
      const reshard_copy *copy = &plan->copies[i];
      cr_assert_eq(copy->page_index, plan->batch_source[b],
                   "batch %zu mixes sources: %s", b, c->description);
      size_t pool = plan->sources[copy->page_index];
      const reshard_pool *source = c->pools[pool].pool;
      cr_assert_lt(copy->part_index, source->region_count);
      cr_assert_lt(copy->region_index, c->target_pool.region_count);
      cr_assert_leq(copy->part_offset + copy->nbytes,
                    source->regions[copy->part_index].nbytes, "%s",
                    c->description);
      cr_assert_leq(copy->region_offset + copy->nbytes,
                    c->target_pool.regions[copy->region_index].nbytes, "%s",
                    c->description);
      memcpy(target.bytes[copy->region_index] + copy->region_offset,
             sources[pool].bytes[copy->part_index] + copy->part_offset,
             copy->nbytes);
      for (uint64_t k = 0; k < copy->nbytes; k++) {
        target.written[copy->region_index][copy->region_offset + k]++;
      }
      bytes += copy->nbytes;
    }
    cr_assert_eq(bytes, batch->bytes);
  }
  uint64_t expected = 0;
  const reshard_placement_part *reader = c->reader;
  for (uint64_t t = 0; t < c->tokens; t++) {
    for (size_t l = 0; l < reader->layer_count; l++) {
      for (unsigned comp = 1; comp <= reshard_component_count(d); comp++) {
        uint64_t hb = reshard_head_bytes(d, (reshard_component)comp);
        for (uint64_t h = reader->head_start;
             h < reader->head_start + reader->head_count; h++) {
          size_t region = 0;
          uint64_t at = 0;
          cr_assert(pool_offset(&c->target_pool, reader, c->target_table,
                                reader->layer_ids[l], (reshard_component)comp,
                                t, h, &region, &at));
          for (uint64_t k = 0; k < hb; k++) {
            uint8_t want =
                value_byte(t, reader->layer_ids[l], h, (reshard_component)comp,
                           k / d->itemsize, k % d->itemsize);
            cr_assert_eq(target.bytes[region][at + k], want,
                         "token %llu layer %llu head %llu comp %u byte %llu: "
                         "%s",
                         (unsigned long long)t,
                         (unsigned long long)reader->layer_ids[l],
                         (unsigned long long)h, comp, (unsigned long long)k,
                         c->description);
            cr_assert_eq(target.written[region][at + k], 1, "%s",
                         c->description);
          }
          expected += hb;
        }
      }
    }
  }
  /* Each expected byte written once and nothing more: no other byte. */
  cr_assert_eq(plan->bytes, expected, "%s", c->description);
  for (size_t i = 0; i < c->pool_count; i++) {
    buffers_free(&sources[i]);
  }
  free(sources);
  buffers_free(&target);
}

/* The explicit binding a target pool stands for over [0, tokens). */
static void explicit_target(transfer_case *c, reshard_binding *out) {
  reshard_bound_binding bound;
  reshard_error err;
  reshard_limits limits = reshard_limits_default();
  cr_assert_eq(reshard_pool_bind(&c->target_bound, c->target_table,
                                 c->target_table_count, c->tokens, &limits,
                                 "pooled", &c->arena, &bound, &err),
               RESHARD_OK, "%s", err.message);
  reshard_binding_range *ranges = RESHARD_ARENA_NEW(
      &c->arena, reshard_binding_range, bound.range_count + 1);
  for (size_t i = 0; i < bound.range_count; i++) {
    const reshard_bound_range *r = &bound.ranges[i];
    ranges[i] = (reshard_binding_range){
        .global_layer_id = c->reader->layer_ids[r->layer_index],
        .component = r->component,
        .token_start = r->token_start,
        .token_count = r->token_end - r->token_start,
        .head_start = r->head_start,
        .head_count = r->head_end - r->head_start,
        .region_id = c->target_pool.regions[r->region_index].region_id,
        .offset_bytes = r->region_offset,
        .token_stride_bytes = r->token_stride,
        .head_stride_bytes = r->head_stride,
    };
  }
  *out = (reshard_binding){
      c->reader->participant_id,   "peer", c->target_pool.regions,
      c->target_pool.region_count, ranges, bound.range_count};
}

static int compare_copies(const void *a, const void *b) {
  const reshard_copy *x = a, *y = b;
  const uint64_t kx[5] = {x->page_index, x->part_index, x->part_offset,
                          x->region_index, x->region_offset};
  const uint64_t ky[5] = {y->page_index, y->part_index, y->part_offset,
                          y->region_index, y->region_offset};
  for (int i = 0; i < 5; i++) {
    if (kx[i] != ky[i]) {
      return kx[i] < ky[i] ? -1 : 1;
    }
  }
  return 0;
}

/* Two plans of one transfer are the same plan: copies, batches, sources,
 * stats (runs compared by the caller). */
static void plans_equal(const reshard_transfer_plan *a,
                        const reshard_transfer_plan *b, bool runs,
                        const char *description) {
  cr_assert_eq(a->copy_count, b->copy_count, "%s", description);
  cr_assert(memcmp(a->copies, b->copies, a->copy_count * sizeof *a->copies) ==
                0,
            "%s", description);
  cr_assert_eq(a->batch_count, b->batch_count, "%s", description);
  cr_assert(
      memcmp(a->batches, b->batches, a->batch_count * sizeof *a->batches) == 0,
      "%s", description);
  cr_assert(memcmp(a->batch_source, b->batch_source,
                   a->batch_count * sizeof *a->batch_source) == 0,
            "%s", description);
  cr_assert_eq(a->source_count, b->source_count, "%s", description);
  cr_assert(
      memcmp(a->sources, b->sources, a->source_count * sizeof *a->sources) == 0,
      "%s", description);
  cr_assert_eq(a->operations, b->operations, "%s", description);
  cr_assert_eq(a->bytes, b->bytes, "%s", description);
  cr_assert_eq(a->copies_before_coalescing, b->copies_before_coalescing, "%s",
               description);
  cr_assert_eq(a->participant, b->participant, "%s", description);
  cr_assert_eq(b->runs.batch_count, runs ? b->batch_count : 0, "%s",
               description);
}

/* Field `c` of a copy, in reshard_copy's declaration order. */
static uint64_t copy_column(const reshard_copy *copy, unsigned c) {
  const uint64_t fields[RESHARD_COPY_COLUMNS] = {
      copy->page_index,   copy->part_index,    copy->part_offset,
      copy->region_index, copy->region_offset, copy->nbytes};
  return fields[c];
}

/* A plan made with request.varint_columns carries, per batch, exactly
 * the bytes the daemon's response encoder writes from its copies: each
 * of the six fields of the batch's copies as LEB128 varints, a column
 * after another (encoded here a byte at a time, as protobuf packs a
 * repeated uint64). */
static void columns_match_copies(const reshard_transfer_plan *plan,
                                 reshard_arena *arena,
                                 const char *description) {
  const reshard_varint_batches *columns = &plan->columns;
  cr_assert_not_null(columns->columns, "%s", description);
  cr_assert_eq(columns->batch_count, plan->batch_count, "%s", description);
  for (size_t b = 0; b < plan->batch_count; b++) {
    const reshard_batch *batch = &plan->batches[b];
    uint8_t *want = RESHARD_ARENA_ARRAY(
        arena, uint8_t, batch->count * 10 * RESHARD_COPY_COLUMNS + 1);
    for (unsigned c = 0; c < RESHARD_COPY_COLUMNS; c++) {
      const uint8_t *got = columns->columns[b * RESHARD_COPY_COLUMNS + c];
      size_t n = 0;
      for (size_t i = batch->first; i < batch->first + batch->count; i++) {
        uint64_t v = copy_column(&plan->copies[i], c);
        while (v >= 0x80) {
          want[n++] = (uint8_t)(v | 0x80);
          v >>= 7;
        }
        want[n++] = (uint8_t)v;
      }
      size_t length = columns->column_bytes[b * RESHARD_COPY_COLUMNS + c];
      cr_assert_eq(length, n, "batch %zu column %u: %s", b, c, description);
      cr_assert(memcmp(got, want, n) == 0, "batch %zu column %u: %s", b, c,
                description);
    }
  }
}

/* Every batch the planner names as like an earlier one (batch_like) is
 * that batch's runs but for their part and region indices. Returns how
 * many batches were named so. */
static size_t runs_like_as_named(const reshard_runs *runs,
                                 const char *description) {
  size_t named = 0;
  for (size_t b = 0; runs->batch_like != NULL && b < runs->batch_count; b++) {
    size_t like = runs->batch_like[b];
    cr_assert_leq(like, b, "batch %zu: %s", b, description);
    if (like == b) {
      continue;
    }
    named++;
    size_t first = runs->batch_first[b],
           count = runs->batch_first[b + 1] - first;
    size_t like_first = runs->batch_first[like];
    cr_assert_eq(runs->batch_first[like + 1] - like_first, count,
                 "batch %zu like %zu: %s", b, like, description);
    for (size_t r = 0; r < count; r++) {
      reshard_run run = runs->runs[first + r];
      const reshard_run *was = &runs->runs[like_first + r];
      run.first.part_index = was->first.part_index;
      run.first.region_index = was->first.region_index;
      cr_assert(memcmp(&run, was, sizeof run) == 0,
                "batch %zu like %zu, run %zu: %s", b, like, r, description);
    }
  }
  return named;
}

/* The runs of a batched plan expand to `explicit_plan`'s batches: a
 * batch's entries, expanded and sorted by the explicit key, are exactly
 * its copies. */
static void runs_expand_to(const reshard_transfer_plan *plan,
                           const reshard_transfer_plan *explicit_plan,
                           reshard_arena *arena, const char *description) {
  cr_assert_eq(plan->runs.batch_count, explicit_plan->batch_count, "%s",
               description);
  reshard_copy *expanded =
      RESHARD_ARENA_ARRAY(arena, reshard_copy, explicit_plan->copy_count + 1);
  for (size_t b = 0; b < explicit_plan->batch_count; b++) {
    const reshard_batch *batch = &explicit_plan->batches[b];
    size_t n = 0;
    for (size_t r = plan->runs.batch_first[b];
         r < plan->runs.batch_first[b + 1]; r++) {
      const reshard_run *run = &plan->runs.runs[r];
      for (uint64_t k = 0; k < run->count; k++) {
        cr_assert_lt(n, batch->count, "%s", description);
        expanded[n++] = reshard_run_copy(run, k);
      }
    }
    cr_assert_eq(n, batch->count, "%s", description);
    qsort(expanded, n, sizeof *expanded, compare_copies);
    cr_assert(memcmp(expanded, explicit_plan->copies + batch->first,
                     n * sizeof *expanded) == 0,
              "batch %zu: %s", b, description);
  }
  runs_like_as_named(&plan->runs, description);
}

/* A plan made for runs only (request.omit_copies) is `with_copies`, the
 * same request's plan with its copies: no copies, the same batches,
 * sources and stats, made the same way (direct or sorted), and the same
 * runs entry for entry and batch for batch; those expand to the
 * explicit batches, and executed run by run they write every target
 * byte exactly. Returns whether it was walked directly. */
static bool runs_only_equal(transfer_case *c,
                            const reshard_transfer_plan *runs_only,
                            const reshard_transfer_plan *with_copies) {
  const char *description = c->description;
  cr_assert_null(runs_only->copies, "%s", description);
  cr_assert_eq(runs_only->direct, with_copies->direct, "%d %d %s",
               runs_only->direct, with_copies->direct, description);
  cr_assert_eq(runs_only->copy_count, with_copies->copy_count, "%s",
               description);
  cr_assert_eq(runs_only->batch_count, with_copies->batch_count, "%s",
               description);
  cr_assert(memcmp(runs_only->batches, with_copies->batches,
                   with_copies->batch_count * sizeof *with_copies->batches) ==
                0,
            "%s", description);
  cr_assert(
      memcmp(runs_only->batch_source, with_copies->batch_source,
             with_copies->batch_count * sizeof *with_copies->batch_source) == 0,
      "%s", description);
  cr_assert_eq(runs_only->source_count, with_copies->source_count, "%s",
               description);
  cr_assert(memcmp(runs_only->sources, with_copies->sources,
                   with_copies->source_count * sizeof *with_copies->sources) ==
                0,
            "%s", description);
  cr_assert_eq(runs_only->operations, with_copies->operations, "%s",
               description);
  cr_assert_eq(runs_only->bytes, with_copies->bytes, "%s", description);
  cr_assert_eq(runs_only->copies_before_coalescing,
               with_copies->copies_before_coalescing, "%s", description);
  cr_assert_eq(runs_only->participant, with_copies->participant, "%s",
               description);
  const reshard_runs *a = &runs_only->runs, *b = &with_copies->runs;
  cr_assert_eq(a->batch_count, b->batch_count, "%s", description);
  cr_assert(memcmp(a->batch_first, b->batch_first,
                   (b->batch_count + 1) * sizeof *b->batch_first) == 0,
            "%s", description);
  cr_assert_eq(a->run_count, b->run_count, "%s", description);
  for (size_t r = 0; r < b->run_count; r++) {
    cr_assert(memcmp(&a->runs[r], &b->runs[r], sizeof a->runs[r]) == 0,
              "run %zu of %zu: %s", r, b->run_count, description);
  }
  runs_expand_to(runs_only, with_copies, &c->arena, description);
  /* Executed as a client would: each run's copies, batch by batch. */
  reshard_copy *expanded =
      RESHARD_ARENA_ARRAY(&c->arena, reshard_copy, runs_only->copy_count + 1);
  size_t n = 0;
  for (size_t r = 0; r < a->run_count; r++) {
    for (uint64_t k = 0; k < a->runs[r].count; k++) {
      expanded[n++] = reshard_run_copy(&a->runs[r], k);
    }
  }
  cr_assert_eq(n, runs_only->copy_count, "%s", description);
  reshard_transfer_plan executed = *runs_only;
  executed.copies = expanded;
  execute_and_check(c, &executed);
  return runs_only->direct;
}

/* A plan made for its varint columns only (request.omit_copies without
 * runs) is `with_copies`, the same request's plan with its copies: no
 * copies, the same batches, sources, stats and column bytes, made the
 * same way; its columns decoded are copies that write every target byte
 * exactly. Returns whether it dropped copies as it went (held fewer than
 * it wrote); counts into *unwritten whether it repeated regions as whole
 * batches, never writing their copies. */
static bool columns_only_equal(transfer_case *c,
                               const reshard_transfer_plan *columns_only,
                               const reshard_transfer_plan *with_copies,
                               int *unwritten) {
  const char *description = c->description;
  cr_assert_null(columns_only->copies, "%s", description);
  cr_assert_eq(columns_only->direct, with_copies->direct, "%s", description);
  cr_assert_leq(columns_only->regions_unwritten, columns_only->regions_repeated,
                "%s", description);
  *unwritten += columns_only->regions_unwritten > 0;
  cr_assert_eq(columns_only->regions_repeated, with_copies->regions_repeated,
               "%s", description);
  reshard_transfer_plan compared = *columns_only;
  compared.copies = with_copies->copies;
  plans_equal(with_copies, &compared, false, description);
  const reshard_varint_batches *a = &columns_only->columns,
                               *b = &with_copies->columns;
  cr_assert_eq(a->batch_count, b->batch_count, "%s", description);
  reshard_copy *decoded = RESHARD_ARENA_ARRAY(&c->arena, reshard_copy,
                                              columns_only->copy_count + 1);
  size_t n = 0;
  for (size_t batch = 0; batch < a->batch_count; batch++) {
    const size_t *sizes = a->column_bytes + batch * RESHARD_COPY_COLUMNS;
    const uint8_t *const *columns = a->columns + batch * RESHARD_COPY_COLUMNS;
    for (unsigned k = 0; k < RESHARD_COPY_COLUMNS; k++) {
      size_t i = batch * RESHARD_COPY_COLUMNS + k;
      cr_assert_eq(sizes[k], b->column_bytes[i], "batch %zu column %u: %s",
                   batch, k, description);
      cr_assert(memcmp(columns[k], b->columns[i], sizes[k]) == 0,
                "batch %zu column %u: %s", batch, k, description);
    }
    /* Decoded as a client would: column k of copy i is the i-th varint
     * of column k. */
    size_t count = columns_only->batches[batch].count;
    for (unsigned k = 0; k < RESHARD_COPY_COLUMNS; k++) {
      const uint8_t *at = columns[k];
      for (size_t i = 0; i < count; i++) {
        uint64_t value = 0;
        for (unsigned shift = 0;; shift += 7) {
          value |= (uint64_t)(*at & 0x7f) << shift;
          if (!(*at++ & 0x80)) {
            break;
          }
        }
        uint64_t *field = (uint64_t *)&decoded[n + i] + k;
        *field = value;
      }
    }
    n += count;
  }
  cr_assert_eq(n, columns_only->copy_count, "%s", description);
  reshard_transfer_plan executed = *columns_only;
  executed.copies = decoded;
  execute_and_check(c, &executed);
  return columns_only->copies_held > 0 &&
         columns_only->copies_held < columns_only->copy_count;
}

/* A batch's limits, operations and bytes. */
typedef struct batch_limit {
  uint64_t operations, bytes;
} batch_limit;

/* What the direct plans of a case took: plans lowered straight from the
 * pools, those of them made for runs only (their runs emitted by the
 * walk), and the explicit and runs-only plans that wrote regions as an
 * earlier region renamed. */
typedef struct walk_tally {
  int direct, runs_only, repeated, repeated_runs_only, dropped, unwritten;
  int named_runs; /* runs-only plans naming batches like earlier ones */
} walk_tally;

/* Plans one case every way and checks each, counting into `tally`. */
static void run_case(uint64_t seed, const oracle_topology *source,
                     const oracle_topology *target, walk_tally *tally) {
  int *direct_plans = &tally->direct, *runs_only_direct = &tally->runs_only;
  int runs_direct = 0;
  transfer_case c;
  case_build(&c, seed, source, target);
  reshard_error err;
  reshard_binding binding;
  reshard_bound_binding bound;
  reshard_limits limits = reshard_limits_default();
  cr_assert_eq(reshard_pool_bind(&c.target_bound, c.target_table,
                                 c.target_table_count, c.tokens, &limits,
                                 "pooled", &c.arena, &bound, &err),
               RESHARD_OK, "%s", err.message);
  reshard_transfer_request request = case_request(&c, &binding, &bound);
  reshard_transfer_plan pooled;
  cr_assert_eq(reshard_plan_transfer(&request, &c.arena, &pooled, &err),
               RESHARD_OK, "%s: %s", c.description, err.message);
  execute_and_check(&c, &pooled);
  columns_match_copies(&pooled, &c.arena, c.description);

  /* The pool and its table as the daemon gives them (request.pooled, no
   * binding) plan the same plan, whether lowered straight from the pools
   * in plan order or bound and sorted. */
  reshard_pooled_memory pooled_target = {&c.target_bound, c.target_table,
                                         c.target_table_count};
  request.bound_binding = NULL;
  request.pooled = &pooled_target;
  for (int runs = 0; runs < 2; runs++) {
    request.runs = runs;
    reshard_transfer_plan direct;
    cr_assert_eq(reshard_plan_transfer(&request, &c.arena, &direct, &err),
                 RESHARD_OK, "%s: %s", c.description, err.message);
    if (!runs) {
      execute_and_check(&c, &direct);
      columns_match_copies(&direct, &c.arena, c.description);
      tally->repeated += direct.regions_repeated > 0;
      /* Columns only, as the daemon asks without runs. */
      reshard_transfer_plan columns_only;
      request.omit_copies = true;
      cr_assert_eq(
          reshard_plan_transfer(&request, &c.arena, &columns_only, &err),
          RESHARD_OK, "%s: %s", c.description, err.message);
      tally->dropped +=
          columns_only_equal(&c, &columns_only, &direct, &tally->unwritten);
      request.omit_copies = false;
    } else {
      cr_assert_null(direct.columns.columns, "%s", c.description);
    }
    plans_equal(&pooled, &direct, runs, c.description);
    *direct_plans += direct.direct;
    if (runs) {
      reshard_transfer_plan bound_runs;
      request.pooled = NULL;
      request.bound_binding = &bound;
      cr_assert_eq(reshard_plan_transfer(&request, &c.arena, &bound_runs, &err),
                   RESHARD_OK, "%s: %s", c.description, err.message);
      cr_assert_eq(bound_runs.runs.run_count, direct.runs.run_count, "%s",
                   c.description);
      cr_assert(memcmp(bound_runs.runs.runs, direct.runs.runs,
                       direct.runs.run_count * sizeof *direct.runs.runs) == 0,
                "%s", c.description);
      cr_assert(memcmp(bound_runs.runs.batch_first, direct.runs.batch_first,
                       (direct.runs.batch_count + 1) *
                           sizeof *direct.runs.batch_first) == 0,
                "%s", c.description);
      /* Runs only, as the daemon asks: from the walk, never writing a
       * copy, or from the sorting path; the same plan either way. */
      reshard_transfer_plan runs_only;
      request.omit_copies = true;
      cr_assert_eq(reshard_plan_transfer(&request, &c.arena, &runs_only, &err),
                   RESHARD_OK, "%s: %s", c.description, err.message);
      runs_only_equal(&c, &runs_only, &bound_runs);
      request.pooled = &pooled_target;
      request.bound_binding = NULL;
      cr_assert_eq(reshard_plan_transfer(&request, &c.arena, &runs_only, &err),
                   RESHARD_OK, "%s: %s", c.description, err.message);
      runs_direct += runs_only_equal(&c, &runs_only, &direct);
      tally->repeated_runs_only += runs_only.regions_repeated > 0;
      tally->named_runs +=
          runs_like_as_named(&runs_only.runs, c.description) > 0;
      request.omit_copies = false;
    }
  }
  /* Small batches, so the batcher closes batches and splits copies
   * inside the walk's writing: the same batches as the sorting path's.
   * Twice: few operations and bytes a batch, then many operations and a
   * few heads' bytes, so that stretches of whole heads fill a batch's
   * bytes exactly as often as they pass them. Then batches of about a
   * few regions' copies and bytes: most regions fit the open batch and
   * are written as the region before them renamed, some are cut. Last,
   * batches of the first region's copies (or bytes) times one to three,
   * or half of them: batches close where they closed in the region
   * before, so regions that close batches are written renamed too. */
  uint64_t hb = reshard_head_bytes(&c.source.descriptor, RESHARD_COMPONENT_KEY);
  uint64_t region_copies = 0, region_bytes = 0;
  for (size_t i = 0; i < pooled.copy_count; i++) {
    const reshard_copy *first = &pooled.copies[0], *copy = &pooled.copies[i];
    if (copy->page_index == first->page_index &&
        copy->part_index == first->part_index) {
      region_copies++;
      region_bytes += copy->nbytes;
    }
  }
  uint64_t times = 1 + seed % 3;
  bool half = seed % 4 == 0 && region_copies > 1;
  const batch_limit small[5] = {
      {1 + seed % 7, 3000 + seed % 5000},
      {4096, hb * (1 + seed % 5)},
      {2 + seed % (pooled.copy_count + 1),
       pooled.bytes / (1 + seed % 5) + 1 + seed % 4096},
      {half ? region_copies / 2 : region_copies * times, UINT64_MAX / 2},
      {UINT32_MAX, half ? region_bytes / 2 + 1 : region_bytes * times},
  };
  for (int l = 0; l < 5; l++) {
    request.runs = false;
    request.pooled = &pooled_target;
    request.bound_binding = NULL;
    request.limits.max_batch_operations = small[l].operations;
    request.limits.max_batch_bytes = small[l].bytes;
    reshard_transfer_plan small_direct, small_bound;
    cr_assert_eq(reshard_plan_transfer(&request, &c.arena, &small_direct, &err),
                 RESHARD_OK, "%s: %s", c.description, err.message);
    request.pooled = NULL;
    request.bound_binding = &bound;
    cr_assert_eq(reshard_plan_transfer(&request, &c.arena, &small_bound, &err),
                 RESHARD_OK, "%s: %s", c.description, err.message);
    plans_equal(&small_bound, &small_direct, false, c.description);
    columns_match_copies(&small_direct, &c.arena, c.description);
    columns_match_copies(&small_bound, &c.arena, c.description);
    /* Columns only: the walk drops copies between regions, mostly where
     * batches are small; the sorting path keeps them, unseen. */
    reshard_transfer_plan small_columns;
    request.omit_copies = true;
    cr_assert_eq(
        reshard_plan_transfer(&request, &c.arena, &small_columns, &err),
        RESHARD_OK, "%s: %s", c.description, err.message);
    columns_only_equal(&c, &small_columns, &small_bound, &tally->unwritten);
    request.pooled = &pooled_target;
    request.bound_binding = NULL;
    cr_assert_eq(
        reshard_plan_transfer(&request, &c.arena, &small_columns, &err),
        RESHARD_OK, "%s: %s", c.description, err.message);
    tally->dropped += columns_only_equal(&c, &small_columns, &small_direct,
                                         &tally->unwritten);
    request.omit_copies = false;
    if (l == 0) {
      *direct_plans += small_direct.direct;
    }
    tally->repeated += small_direct.regions_repeated > 0;
    /* Runs only with those batches: the walk's runs cut where the batcher
     * closes and splits, the same as folding the small explicit batches. */
    request.runs = true;
    request.pooled = &pooled_target;
    request.bound_binding = NULL;
    reshard_transfer_plan small_runs, small_runs_only;
    cr_assert_eq(reshard_plan_transfer(&request, &c.arena, &small_runs, &err),
                 RESHARD_OK, "%s: %s", c.description, err.message);
    runs_expand_to(&small_runs, &small_bound, &c.arena, c.description);
    request.omit_copies = true;
    cr_assert_eq(
        reshard_plan_transfer(&request, &c.arena, &small_runs_only, &err),
        RESHARD_OK, "%s: %s", c.description, err.message);
    runs_direct += runs_only_equal(&c, &small_runs_only, &small_runs);
    tally->repeated_runs_only += small_runs_only.regions_repeated > 0;
    tally->named_runs +=
        runs_like_as_named(&small_runs_only.runs, c.description) > 0;
    request.omit_copies = false;
  }
  request.runs = false;
  request.pooled = NULL;
  request.bound_binding = &bound;
  request.limits = reshard_limits_default();
  *runs_only_direct += runs_direct;

  /* The explicit binding of the same memory plans the same copies. */
  reshard_binding explicit_binding;
  explicit_target(&c, &explicit_binding);
  request.binding = &explicit_binding;
  request.bound_binding = NULL;
  reshard_transfer_plan explicit_plan;
  cr_assert_eq(reshard_plan_transfer(&request, &c.arena, &explicit_plan, &err),
               RESHARD_OK, "%s: %s", c.description, err.message);
  cr_assert_eq(explicit_plan.copy_count, pooled.copy_count, "%s",
               c.description);
  cr_assert(memcmp(explicit_plan.copies, pooled.copies,
                   pooled.copy_count * sizeof *pooled.copies) == 0,
            "%s", c.description);
  columns_match_copies(&explicit_plan, &c.arena, c.description);

  /* Runs expand to the explicit batches, and the explicit binding's
   * runs only are its runs. */
  request.runs = true;
  reshard_transfer_plan with_runs;
  cr_assert_eq(reshard_plan_transfer(&request, &c.arena, &with_runs, &err),
               RESHARD_OK, "%s", err.message);
  runs_expand_to(&with_runs, &with_runs, &c.arena, c.description);
  request.omit_copies = true;
  reshard_transfer_plan explicit_runs_only;
  cr_assert_eq(
      reshard_plan_transfer(&request, &c.arena, &explicit_runs_only, &err),
      RESHARD_OK, "%s", err.message);
  runs_only_equal(&c, &explicit_runs_only, &with_runs);
  reshard_arena_destroy(&c.arena);
}

Test(transfer, random_shapes_execute_exactly) {
  uint64_t base = oracle_base_seed();
  walk_tally tally = {0};
  for (uint64_t i = 0; i < 150; i++) {
    run_case(oracle_case_seed(base, 0x7a5f, i), NULL, NULL, &tally);
  }
  /* Four runs-only plans a case: walked as often as their explicit plans
   * (runs_only_equal requires it), so in most cases. */
  cr_assert_gt(tally.runs_only, 200, "%d of 600 runs-only plans direct",
               tally.runs_only);
  /* Both ways a pooled target is planned occur (three plans a case): most
   * walks are in order; an HND side split by the other's blocks, or a
   * per-head target over an NHD source, is not. */
  cr_assert_gt(tally.direct, 225, "%d of 450 pooled plans direct",
               tally.direct);
  cr_assert_lt(tally.direct, 450, "%d of 450 pooled plans direct",
               tally.direct);
  /* Regions written as the one before them renamed (about one case in
   * four has a region per layer on both sides), explicit and runs only. */
  cr_assert_gt(tally.repeated, 20, "%d plans repeated regions", tally.repeated);
  cr_assert_gt(tally.repeated_runs_only, 20,
               "%d runs-only plans repeated regions", tally.repeated_runs_only);
  cr_assert_gt(tally.named_runs, 20,
               "%d runs-only plans named batches like earlier ones",
               tally.named_runs);
  /* Columns-only plans that dropped copies between regions (held fewer
   * than they wrote): those of many regions, mostly with small batches. */
  cr_assert_gt(tally.dropped, 20, "%d columns-only plans dropped copies",
               tally.dropped);
  /* And that repeated regions as whole batches, never writing their
   * copies: where a batch is a region's copies (or bytes) or a whole
   * multiple of them. */
  cr_assert_gt(tally.unwritten, 10,
               "%d columns-only plans repeated whole batches", tally.unwritten);
}

Test(transfer, the_layout_changes_engines_need) {
  /* TP up, TP down, PP on the source, the target and both, replicas on
   * either side, DP choice. */
  const oracle_topology shapes[][2] = {
      {{1, 1, 1, 0}, {1, 1, 2, 0}},  {{1, 1, 8, 0}, {1, 2, 4, 0}},
      {{1, 2, 4, 0}, {1, 4, 8, 0}},  {{1, 1, 4, 0}, {1, 1, 16, 0}},
      {{1, 1, 16, 0}, {1, 1, 4, 0}}, {{2, 1, 2, 0}, {1, 2, 1, 0}},
      {{1, 3, 2, 0}, {2, 1, 3, 0}},
  };
  uint64_t base = oracle_base_seed();
  walk_tally tally = {0};
  for (size_t s = 0; s < sizeof shapes / sizeof shapes[0]; s++) {
    for (uint64_t i = 0; i < 12; i++) {
      run_case(oracle_case_seed(base, 0x7a60 + s, i), &shapes[s][0],
               &shapes[s][1], &tally);
    }
  }
  cr_assert_gt(tally.direct, 0);
  cr_assert_gt(tally.runs_only, 0);
}

/* ---- A fixed shape for the rules ---- */

static struct {
  transfer_case c;
  reshard_binding binding;
  reshard_bound_binding bound;
  reshard_transfer_request request;
  reshard_transfer_plan plan;
  reshard_error err;
} fx;

/* Source TP8 over 4 heads (replicas of 2), target TP4 over 4 heads (one
 * each): target replica ordinals are all 0... use target TP8 too for the
 * spreading rule. */
static void fixed_setup(uint64_t source_tp, uint64_t target_tp) {
  memset(&fx, 0, sizeof fx);
  transfer_case *c = &fx.c;
  reshard_arena_init(&c->arena, 0);
  reshard_arena *a = &c->arena;
  oracle_fixed_descriptor(a, 2, "bf16", 2, 4, 4, 4, 4, &c->descriptor);
  oracle_topology st = {1, 1, source_tp, 0}, tt = {1, 1, target_tp, 0};
  oracle_build_placement(a, NULL, &c->descriptor, &st, "p", &c->source);
  oracle_build_placement(a, NULL, &c->descriptor, &tt, "d", &c->target);
  cr_assert_eq(reshard_placement_normalize(&c->source, a, &fx.err), RESHARD_OK);
  cr_assert_eq(reshard_placement_normalize(&c->target, a, &fx.err), RESHARD_OK);
  c->tokens = 10;
  c->reader = &c->target.parts[c->target.part_count - 1];
  static uint32_t table[] = {3, 0, 2, 1};
  c->source_table = table;
  c->source_table_count = 3; /* 3 blocks of 4 tokens */
  c->pool_count = c->source.part_count;
  c->source_pools = RESHARD_ARENA_NEW(a, reshard_pool, c->pool_count);
  c->source_bound = RESHARD_ARENA_NEW(a, reshard_bound_pool, c->pool_count);
  c->pools = RESHARD_ARENA_NEW(a, reshard_transfer_pool, c->pool_count);
  reshard_limits limits = reshard_limits_default();
  for (size_t p = 0; p < c->pool_count; p++) {
    const reshard_placement_part *part = &c->source.parts[p];
    build_pool(a, &c->descriptor, part, ORACLE_POOL_VLLM, 4, 4, (p + 1) << 40,
               &c->source_pools[p]);
    cr_assert_eq(reshard_pool_validate(&c->source_pools[p], &c->descriptor,
                                       part, &limits, "pool", a,
                                       &c->source_bound[p], &fx.err),
                 RESHARD_OK, "%s", fx.err.message);
    c->pools[p] = (reshard_transfer_pool){
        part->participant_id, &c->source_pools[p], &c->source_bound[p]};
  }
  static uint32_t target_table[] = {1, 0, 2};
  c->target_table = target_table;
  c->target_table_count = 3;
  build_pool(a, &c->descriptor, c->reader, ORACLE_POOL_VLLM, 4, 3, 1ull << 60,
             &c->target_pool);
  cr_assert_eq(reshard_pool_validate(&c->target_pool, &c->descriptor, c->reader,
                                     &limits, "pool", a, &c->target_bound,
                                     &fx.err),
               RESHARD_OK);
  cr_assert_eq(reshard_pool_bind(&c->target_bound, target_table, 3, 10, &limits,
                                 "pooled", a, &fx.bound, &fx.err),
               RESHARD_OK);
  fx.request = case_request(c, &fx.binding, &fx.bound);
  fx.request.has_source_dp_rank = false;
}

static void fixed_teardown(void) {
  reshard_arena_destroy(&fx.c.arena);
}

static reshard_status plan_fixed(void) {
  return reshard_plan_transfer(&fx.request, &fx.c.arena, &fx.plan, &fx.err);
}

TestSuite(transfer_rules, .fini = fixed_teardown);

Test(transfer_rules, replicas_spread_by_target_ordinal) {
  /* Source TP8 and target TP8 over 4 heads: replicas of 2 on both sides;
   * each target replica reads the source replica of its ordinal. */
  fixed_setup(8, 8);
  for (size_t p = 0; p < fx.c.target.part_count; p++) {
    const reshard_placement_part *reader = &fx.c.target.parts[p];
    fx.binding.participant_id = reader->participant_id;
    reshard_limits limits = reshard_limits_default();
    reshard_bound_pool bound_pool;
    reshard_pool pool;
    build_pool(&fx.c.arena, &fx.c.descriptor, reader, ORACLE_POOL_VLLM, 4, 3,
               1ull << 60, &pool);
    cr_assert_eq(reshard_pool_validate(&pool, &fx.c.descriptor, reader, &limits,
                                       "pool", &fx.c.arena, &bound_pool,
                                       &fx.err),
                 RESHARD_OK);
    cr_assert_eq(reshard_pool_bind(&bound_pool, fx.c.target_table, 3, 10,
                                   &limits, "pooled", &fx.c.arena, &fx.bound,
                                   &fx.err),
                 RESHARD_OK);
    fx.binding.regions = pool.regions;
    cr_assert_eq(plan_fixed(), RESHARD_OK, "%s", fx.err.message);
    cr_assert_eq(fx.plan.source_count, 1);
    const reshard_placement_part *source = reshard_placement_find_part(
        &fx.c.source, fx.c.pools[fx.plan.sources[0]].pool->participant_id);
    cr_assert_eq(source->head_start, reader->head_start);
    cr_assert_eq(source->replica_ordinal, reader->replica_ordinal,
                 "reader %s read %s", reader->participant_id,
                 source->participant_id);
  }
}

Test(transfer_rules, tp_down_is_walked_directly) {
  /* Target TP1 over source TP2: each target layer's entries alternate
   * between the two sources, so the walk sorts its jobs into the sources'
   * order first. Out of that order it would stop and plan the
   * bound-and-sorted way, the same plan slower: only `direct` tells. */
  fixed_setup(2, 1);
  reshard_pooled_memory pooled = {&fx.c.target_bound, fx.c.target_table,
                                  fx.c.target_table_count};
  fx.request.pooled = &pooled;
  fx.request.bound_binding = NULL;
  for (int runs = 0; runs < 2; runs++) {
    fx.request.runs = runs;
    cr_assert_eq(plan_fixed(), RESHARD_OK, "%s", fx.err.message);
    cr_assert(fx.plan.direct, "runs %d", runs);
    cr_assert_eq(fx.plan.source_count, 2);
    execute_and_check(&fx.c, &fx.plan);
  }
}

Test(transfer_rules, refusals) {
  fixed_setup(2, 4);
  cr_assert_eq(plan_fixed(), RESHARD_OK, "%s", fx.err.message);
  execute_and_check(&fx.c, &fx.plan);

  fx.c.pools[0].pool = fx.c.pools[1].pool; /* two pools of one participant */
  ASSERT_FAILS(plan_fixed(), fx.err, RESHARD_INVALID_ARGUMENT,
               "source_memory_ids[1]", "a second pool of participant");
  fixed_teardown();

  fixed_setup(2, 4);
  /* The reader (the last of TP4) reads the second source: leave it out. */
  fx.request.pool_count = 1;
  const char *missing = fx.c.pools[1].pool->participant_id;
  ASSERT_FAILS(plan_fixed(), fx.err, RESHARD_FAILED_PRECONDITION,
               "source participant", missing, "has no pool");
  fixed_teardown();

  fixed_setup(2, 4);
  reshard_pool foreign = *fx.c.pools[0].pool;
  foreign.participant_id = "elsewhere";
  fx.c.pools[0].pool = &foreign;
  ASSERT_FAILS(plan_fixed(), fx.err, RESHARD_INVALID_ARGUMENT,
               "source_memory_ids[0]", "\"elsewhere\" is not in the source");
  fixed_teardown();

  fixed_setup(2, 1); /* the reader holds every head: both sources */
  reshard_bound_pool other = *fx.c.pools[1].bound;
  other.block_size = 8;
  fx.c.pools[1].bound = &other;
  ASSERT_FAILS(plan_fixed(), fx.err, RESHARD_INVALID_ARGUMENT,
               "block_size 8 differs");
  fixed_teardown();

  fixed_setup(2, 4);
  fx.request.source_block_count = 2; /* 8 tokens of 10 */
  ASSERT_FAILS(plan_fixed(), fx.err, RESHARD_INVALID_ARGUMENT,
               "source_block_ids: 2 blocks of 4 tokens", "3 blocks needed");
  fx.request.source_block_count = 4;
  ((uint32_t *)fx.c.source_table)[3] = 9; /* past the span, still checked */
  ASSERT_FAILS(plan_fixed(), fx.err, RESHARD_INVALID_ARGUMENT,
               "source_block_ids[3]: block 9 is not below num_blocks 4");
  ((uint32_t *)fx.c.source_table)[3] = 1;
  fixed_teardown();

  fixed_setup(2, 4);
  fx.request.token_count = 0;
  ASSERT_FAILS(plan_fixed(), fx.err, RESHARD_INVALID_ARGUMENT, "token_count");
  fx.request.token_count = 10;
  fx.request.target_dp_rank = 1;
  ASSERT_FAILS(plan_fixed(), fx.err, RESHARD_INVALID_ARGUMENT,
               "target_dp_rank");
  fx.request.target_dp_rank = 0;
  fx.request.source_dp_rank = 3;
  fx.request.has_source_dp_rank = true;
  ASSERT_FAILS(plan_fixed(), fx.err, RESHARD_INVALID_ARGUMENT,
               "source_dp_rank");
  fixed_teardown();

  fixed_setup(2, 4);
  reshard_placement other_target = fx.c.target;
  other_target.descriptor.key_head_dim = 8;
  fx.request.target_placement = &other_target;
  ASSERT_FAILS(plan_fixed(), fx.err, RESHARD_FAILED_PRECONDITION,
               "descriptor differs", "key_head_dim");
  fx.request.target_placement = &fx.c.target;
  fx.request.limits.max_operations = 1;
  ASSERT_FAILS(plan_fixed(), fx.err, RESHARD_RESOURCE_EXHAUSTED,
               "max_operations 1");
  fx.request.limits = reshard_limits_default();
  /* What normalizing the source choice as a layout would refuse. */
  fixed_teardown();
  fixed_setup(2, 1); /* the reader holds every head: two sources */
  fx.request.limits.max_layout_parts = 1;
  ASSERT_FAILS(plan_fixed(), fx.err, RESHARD_RESOURCE_EXHAUSTED,
               "source_placement.shards: 2 parts exceed the limit "
               "max_layout_parts 1");
  fx.request.limits = reshard_limits_default();
  fx.request.limits.max_layout_fragments = 3; /* 2 layers x 2 sources x 2 */
  ASSERT_FAILS(plan_fixed(), fx.err, RESHARD_RESOURCE_EXHAUSTED,
               "source_placement.shards: 8 fragments exceed the limit "
               "max_layout_fragments 3");
  fixed_teardown();

  /* A pooled target (as the daemon gives it) is refused as
   * reshard_pool_bind refuses its table, in the same words, and by the
   * same limits on the plan. */
  fixed_setup(2, 4);
  reshard_pooled_memory pooled = {&fx.c.target_bound, fx.c.target_table,
                                  fx.c.target_table_count};
  fx.request.pooled = &pooled;
  fx.request.bound_binding = NULL;
  cr_assert_eq(plan_fixed(), RESHARD_OK, "%s", fx.err.message);
  cr_assert(fx.plan.direct);
  execute_and_check(&fx.c, &fx.plan);
  static const uint32_t repeated[] = {1, 0, 1};
  static const uint32_t outside[] = {1, 0, 2, 7};
  const struct {
    const uint32_t *ids;
    size_t count;
    reshard_limits limits;
  } tables[] = {
      {repeated, 3, reshard_limits_default()},
      {outside, 4, reshard_limits_default()},
      {fx.c.target_table, 2, reshard_limits_default()},
      {fx.c.target_table, 3, reshard_limits_default()},
  };
  for (size_t i = 0; i < sizeof tables / sizeof tables[0]; i++) {
    reshard_limits limits = tables[i].limits;
    if (i == 3) {
      limits.max_validation_work = 2; /* 3 blocks x 4 ranges a block */
    }
    reshard_error want;
    reshard_bound_binding unused;
    reshard_status code =
        reshard_pool_bind(&fx.c.target_bound, tables[i].ids, tables[i].count,
                          10, &limits, "pooled", &fx.c.arena, &unused, &want);
    cr_assert_neq(code, RESHARD_OK, "table %zu", i);
    pooled.block_ids = tables[i].ids;
    pooled.block_count = tables[i].count;
    fx.request.limits = limits;
    cr_assert_eq(plan_fixed(), code, "table %zu", i);
    cr_assert_str_eq(fx.err.message, want.message, "table %zu", i);
  }
  pooled.block_ids = fx.c.target_table;
  pooled.block_count = fx.c.target_table_count;
  fx.request.limits = reshard_limits_default();
  fx.request.limits.max_operations = 1;
  ASSERT_FAILS(plan_fixed(), fx.err, RESHARD_RESOURCE_EXHAUSTED,
               "max_operations 1");
  fx.request.limits = reshard_limits_default();
  fx.request.limits.max_bytes = 1;
  ASSERT_FAILS(plan_fixed(), fx.err, RESHARD_RESOURCE_EXHAUSTED, "max_bytes 1");
}
