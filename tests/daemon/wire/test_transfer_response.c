/* Tests daemon/wire/transfer_response.c: the PlanTransferResponse
 * encoder on random plans (explicit copies, varint columns whole and as
 * pieces, runs, runs without copies) against protobuf-c's packing of the
 * message built field by field; the empty plan; and column sizes past
 * SIZE_MAX refused rather than wrapped. */
#include <criterion/criterion.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "reshard/v1/planner.pb-c.h"
#include "response_pieces.h"
#include "wire/transfer_response.h"

/* splitmix64: every random plan is reproducible from its seed. */
static uint64_t next_random(uint64_t *state) {
  uint64_t z = (*state += 0x9e3779b97f4a7c15ull);
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
  return z ^ (z >> 31);
}

static uint64_t below(uint64_t *state, uint64_t n) {
  return next_random(state) % n;
}

/* A value of exactly `bits` bits (0: the value 0), so that a column drawn
 * at one width has varints of one length. */
static uint64_t of_bits(uint64_t *state, unsigned bits) {
  if (bits == 0) {
    return 0;
  }
  uint64_t top = 1ull << (bits - 1);
  return top | (next_random(state) & (top - 1));
}

/* Column values, drawn per column: of one width (put_fixed's loop); of
 * one varint length but widths that differ, so that the column's AND is
 * shorter than its OR (put_fixed's loop still, or put_mixed's for run
 * columns, which tell the lengths apart by that AND); or of a width drawn
 * per value up to the column's (0 to 64 bits), zeros included. */
typedef enum { DRAW_WIDTH, DRAW_LENGTH, DRAW_ANY, DRAW_KINDS } draw_kind;

typedef struct column_draw {
  draw_kind kind;
  unsigned bits;
} column_draw;

static column_draw random_draw(uint64_t *state) {
  return (column_draw){(draw_kind)below(state, DRAW_KINDS),
                       (unsigned)below(state, 65)};
}

static uint64_t draw(uint64_t *state, column_draw d) {
  switch (d.kind) {
  case DRAW_WIDTH:
    return of_bits(state, d.bits);
  case DRAW_LENGTH: {
    if (d.bits == 0) {
      return 0;
    }
    /* Widths of d.bits's varint length: 7 (length - 1) + 1 .. 7 length. */
    unsigned low = (d.bits - 1) / 7 * 7 + 1;
    unsigned high = low + 6 < 64 ? low + 6 : 64;
    return of_bits(state, low + (unsigned)below(state, high - low + 1));
  }
  default:
    return of_bits(state, (unsigned)below(state, d.bits + 1));
  }
}

static const char *draw_string(uint64_t *state, reshard_arena *arena,
                               const char *stem, size_t i) {
  switch (below(state, 5)) {
  case 0:
    return NULL; /* left out as "" is */
  case 1:
    return "";
  case 2: {
    /* Long enough for a two-byte length. */
    char *long_id = reshard_arena_alloc(arena, 301, 1);
    memset(long_id, 'x', 300);
    long_id[300] = '\0';
    return long_id;
  }
  default: {
    char buffer[64];
    snprintf(buffer, sizeof buffer, "%s-%zu-%llu", stem, i,
             (unsigned long long)below(state, 1000));
    return reshard_arena_strdup(arena, buffer);
  }
  }
}

static reshard_region *draw_regions(uint64_t *state, reshard_arena *arena,
                                    const char *stem, size_t count) {
  reshard_region *regions = RESHARD_ARENA_NEW(arena, reshard_region, count + 1);
  for (size_t r = 0; r < count; r++) {
    regions[r].region_id = draw_string(state, arena, stem, r);
    regions[r].address = of_bits(state, (unsigned)below(state, 65));
    regions[r].nbytes = of_bits(state, (unsigned)below(state, 65));
  }
  return regions;
}

/* A random transfer plan with what its response names: the pools its
 * sources index (more pools than sources, in another order), the target
 * binding's regions, the two ids. */
typedef struct random_transfer {
  reshard_transfer_plan plan;
  reshard_transfer_pool *pools;
  size_t pool_count;
  reshard_binding binding;
  const char *source_placement_id;
  const char *target_placement_id;
  reshard_varint_batches columns; /* the copies as varint columns */
} random_transfer;

/* The copies' six fields of each batch as LEB128 columns, as the planner
 * would encode them while batching (reshard/varint_columns.h). */
static void encode_columns(random_transfer *t, reshard_arena *arena) {
  const reshard_transfer_plan *plan = &t->plan;
  t->columns.batch_count = plan->batch_count;
  t->columns.columns = RESHARD_ARENA_NEW(
      arena, const uint8_t *, (plan->batch_count + 1) * RESHARD_COPY_COLUMNS);
  t->columns.column_bytes = RESHARD_ARENA_NEW(
      arena, size_t, (plan->batch_count + 1) * RESHARD_COPY_COLUMNS);
  for (size_t b = 0; b < plan->batch_count; b++) {
    const reshard_batch *batch = &plan->batches[b];
    uint8_t *bytes = reshard_arena_alloc(
        arena, batch->count * RESHARD_COPY_COLUMNS * 10 + 1, 1);
    for (unsigned c = 0; c < RESHARD_COPY_COLUMNS; c++) {
      uint8_t *start = bytes;
      t->columns.columns[b * RESHARD_COPY_COLUMNS + c] = start;
      for (size_t i = 0; i < batch->count; i++) {
        const uint64_t *row = (const uint64_t *)&plan->copies[batch->first + i];
        bytes = reshard_varint_put(bytes, row[c]);
      }
      t->columns.column_bytes[b * RESHARD_COPY_COLUMNS + c] =
          (size_t)(bytes - start);
    }
  }
}

static void draw_transfer(uint64_t seed, bool runs, reshard_arena *arena,
                          random_transfer *out) {
  uint64_t state = seed;
  memset(out, 0, sizeof *out);
  reshard_transfer_plan *plan = &out->plan;

  /* Pools: the plan reads some of them, by participant order. */
  out->pool_count = 1 + below(&state, 5);
  out->pools =
      RESHARD_ARENA_NEW(arena, reshard_transfer_pool, out->pool_count + 1);
  for (size_t i = 0; i < out->pool_count; i++) {
    reshard_pool *pool = RESHARD_ARENA_NEW(arena, reshard_pool, 1);
    pool->participant_id = draw_string(&state, arena, "prefill", i);
    pool->endpoint = draw_string(&state, arena, "10.0.0.1:1234", i);
    pool->region_count = below(&state, 4);
    pool->regions = draw_regions(&state, arena, "src", pool->region_count);
    out->pools[i].name = draw_string(&state, arena, "sha256:memory", i);
    out->pools[i].pool = pool;
  }
  plan->source_count = 1 + below(&state, out->pool_count);
  plan->sources = RESHARD_ARENA_NEW(arena, size_t, plan->source_count + 1);
  for (size_t o = 0; o < plan->source_count; o++) {
    plan->sources[o] = (o * 7 + (size_t)seed) % out->pool_count;
  }

  out->binding.region_count = below(&state, 5);
  out->binding.regions =
      draw_regions(&state, arena, "dst", out->binding.region_count);
  out->source_placement_id = draw_string(&state, arena, "sha256:source", 0);
  out->target_placement_id = draw_string(&state, arena, "sha256:target", 0);

  /* Batches of 0 to 60 copies (an empty one included now and then), every
   * copy of a batch from the batch's source. */
  plan->batch_count = below(&state, 7);
  plan->batches =
      RESHARD_ARENA_NEW(arena, reshard_batch, plan->batch_count + 1);
  plan->batch_source = RESHARD_ARENA_NEW(arena, size_t, plan->batch_count + 1);
  size_t copy_room = 0;
  for (size_t b = 0; b < plan->batch_count; b++) {
    plan->batches[b].first = copy_room;
    plan->batches[b].count = below(&state, 8) == 0 ? 0 : below(&state, 61);
    plan->batches[b].bytes = of_bits(&state, (unsigned)below(&state, 65));
    plan->batch_source[b] = below(&state, plan->source_count);
    copy_room += plan->batches[b].count;
  }
  plan->copies = RESHARD_ARENA_NEW(arena, reshard_copy, copy_room + 1);
  plan->copy_count = copy_room;
  for (size_t b = 0; b < plan->batch_count; b++) {
    column_draw d[RESHARD_COPY_COLUMNS];
    for (unsigned c = 0; c < RESHARD_COPY_COLUMNS; c++) {
      d[c] = random_draw(&state);
    }
    for (size_t i = 0; i < plan->batches[b].count; i++) {
      reshard_copy *copy = &plan->copies[plan->batches[b].first + i];
      copy->page_index = plan->batch_source[b];
      copy->part_index = draw(&state, d[1]);
      copy->part_offset = draw(&state, d[2]);
      copy->region_index = draw(&state, d[3]);
      copy->region_offset = draw(&state, d[4]);
      copy->nbytes = draw(&state, d[5]);
    }
  }
  plan->operations = of_bits(&state, (unsigned)below(&state, 65));
  plan->bytes = of_bits(&state, (unsigned)below(&state, 65));
  plan->copies_before_coalescing = of_bits(&state, (unsigned)below(&state, 65));

  if (runs) {
    /* Runs of their own (the encoder only reads them): up to 20 a batch,
     * batch_first set even for an empty plan, as reshard_runs_fold does. */
    reshard_runs *r = &plan->runs;
    r->batch_count = plan->batch_count;
    r->batch_first = RESHARD_ARENA_NEW(arena, size_t, plan->batch_count + 1);
    size_t room = 0;
    size_t *counts = RESHARD_ARENA_NEW(arena, size_t, plan->batch_count + 1);
    for (size_t b = 0; b < plan->batch_count; b++) {
      counts[b] = plan->batches[b].count == 0 ? 0 : 1 + below(&state, 20);
      room += counts[b];
    }
    /* Now and then a batch repeats one of the four before it but for the
     * part and region indices (a transfer's layers alike: the writer
     * takes the other columns' bytes from that batch), and sometimes a
     * repeat has one other value changed too (then it must not). Drawn
     * from a stream of its own, so the rest of the plan stays as it
     * was. */
    uint64_t repeat_state = seed ^ UINT64_C(0x7e9ea7);
    size_t *repeats = RESHARD_ARENA_NEW(arena, size_t, plan->batch_count + 1);
    for (size_t b = 0; b < plan->batch_count; b++) {
      repeats[b] = b;
      if (b > 0 && below(&repeat_state, 2) == 0) {
        size_t like = b - 1 - below(&repeat_state, b < 4 ? b : 4);
        if (counts[like] > 0 && plan->batches[b].count > 0) {
          room += counts[like] - counts[b];
          counts[b] = counts[like];
          repeats[b] = like;
        }
      }
    }
    r->runs = RESHARD_ARENA_NEW(arena, reshard_run, room + 1);
    for (size_t b = 0; b < plan->batch_count; b++) {
      r->batch_first[b] = r->run_count;
      if (repeats[b] < b) {
        const reshard_run *like = &r->runs[r->batch_first[repeats[b]]];
        column_draw index[2] = {random_draw(&repeat_state),
                                random_draw(&repeat_state)};
        for (size_t i = 0; i < counts[b]; i++) {
          reshard_run *run = &r->runs[r->run_count++];
          *run = like[i];
          run->first.page_index = plan->batch_source[b];
          run->first.part_index = draw(&repeat_state, index[0]);
          run->first.region_index = draw(&repeat_state, index[1]);
        }
        if (below(&repeat_state, 3) == 0) {
          reshard_run *run =
              &r->runs[r->batch_first[b] + below(&repeat_state, counts[b])];
          static const unsigned kept[] = {2, 4, 5, 6, 7, 8};
          uint64_t *word = (uint64_t *)run + kept[below(&repeat_state, 6)];
          *word ^= 1 + below(&repeat_state, 1000);
        }
        continue;
      }
      column_draw d[9];
      for (unsigned c = 0; c < 9; c++) {
        d[c] = random_draw(&state);
      }
      for (size_t i = 0; i < counts[b]; i++) {
        reshard_run *run = &r->runs[r->run_count++];
        run->first.page_index = plan->batch_source[b];
        run->first.part_index = draw(&state, d[1]);
        run->first.part_offset = draw(&state, d[2]);
        run->first.region_index = draw(&state, d[3]);
        run->first.region_offset = draw(&state, d[4]);
        run->first.nbytes = draw(&state, d[5]);
        run->count = draw(&state, d[6]);
        run->part_stride = draw(&state, d[7]);
        run->region_stride = draw(&state, d[8]);
      }
    }
    r->batch_first[plan->batch_count] = r->run_count;
  }
  encode_columns(out, arena);
}

static const char *text_or_empty(const char *value) {
  return value ? value : "";
}

static uint64_t *column_of(reshard_arena *arena, size_t n) {
  return RESHARD_ARENA_NEW(arena, uint64_t, n + 1);
}

/* The message field by field, as the daemon built it for protobuf-c before
 * its response was written by hand. */
static Reshard__V1__PlanTransferResponse *
transfer_to_pb(const random_transfer *t, reshard_arena *arena) {
  const reshard_transfer_plan *plan = &t->plan;
  bool runs = plan->runs.batch_first != NULL;
  Reshard__V1__PlanTransferResponse *pb =
      RESHARD_ARENA_NEW(arena, Reshard__V1__PlanTransferResponse, 1);
  reshard__v1__plan_transfer_response__init(pb);
  pb->n_sources = plan->source_count;
  pb->sources = RESHARD_ARENA_NEW(arena, Reshard__V1__TransferSource *,
                                  plan->source_count + 1);
  for (size_t o = 0; o < plan->source_count; o++) {
    const reshard_transfer_pool *source = &t->pools[plan->sources[o]];
    Reshard__V1__TransferSource *s =
        RESHARD_ARENA_NEW(arena, Reshard__V1__TransferSource, 1);
    reshard__v1__transfer_source__init(s);
    s->participant_id = (char *)source->pool->participant_id;
    s->endpoint = (char *)source->pool->endpoint;
    s->memory_id = (char *)source->name;
    s->n_regions = source->pool->region_count;
    s->regions = RESHARD_ARENA_NEW(arena, Reshard__V1__Region *,
                                   source->pool->region_count + 1);
    for (size_t r = 0; r < source->pool->region_count; r++) {
      const reshard_region *region = &source->pool->regions[r];
      Reshard__V1__Region *rpb =
          RESHARD_ARENA_NEW(arena, Reshard__V1__Region, 1);
      reshard__v1__region__init(rpb);
      rpb->region_id = (char *)region->region_id;
      rpb->address = region->address;
      rpb->nbytes = region->nbytes;
      s->regions[r] = rpb;
    }
    pb->sources[o] = s;
  }
  pb->n_region_ids = t->binding.region_count;
  pb->region_ids =
      RESHARD_ARENA_NEW(arena, char *, t->binding.region_count + 1);
  for (size_t r = 0; r < t->binding.region_count; r++) {
    pb->region_ids[r] = (char *)text_or_empty(t->binding.regions[r].region_id);
  }
  pb->n_batches = plan->batch_count;
  pb->batches = RESHARD_ARENA_NEW(arena, Reshard__V1__TransferBatch *,
                                  plan->batch_count + 1);
  for (size_t b = 0; b < plan->batch_count; b++) {
    Reshard__V1__TransferBatch *batch =
        RESHARD_ARENA_NEW(arena, Reshard__V1__TransferBatch, 1);
    reshard__v1__transfer_batch__init(batch);
    batch->source_index = plan->batch_source[b];
    batch->bytes = plan->batches[b].bytes;
    size_t first = runs ? plan->runs.batch_first[b] : plan->batches[b].first;
    size_t n =
        runs ? plan->runs.batch_first[b + 1] - first : plan->batches[b].count;
    uint64_t *columns[8];
    for (int c = 0; c < 8; c++) {
      columns[c] = column_of(arena, n);
    }
    for (size_t i = 0; i < n; i++) {
      const reshard_copy *copy =
          runs ? &plan->runs.runs[first + i].first : &plan->copies[first + i];
      columns[0][i] = copy->part_index;
      columns[1][i] = copy->part_offset;
      columns[2][i] = copy->region_index;
      columns[3][i] = copy->region_offset;
      columns[4][i] = copy->nbytes;
      if (runs) {
        columns[5][i] = plan->runs.runs[first + i].count;
        columns[6][i] = plan->runs.runs[first + i].part_stride;
        columns[7][i] = plan->runs.runs[first + i].region_stride;
      }
    }
    batch->n_source_region_index = batch->n_source_offset =
        batch->n_region_index = batch->n_region_offset = batch->n_nbytes = n;
    batch->source_region_index = columns[0];
    batch->source_offset = columns[1];
    batch->region_index = columns[2];
    batch->region_offset = columns[3];
    batch->nbytes = columns[4];
    if (runs) {
      batch->n_run_count = batch->n_source_stride = batch->n_region_stride = n;
      batch->run_count = columns[5];
      batch->source_stride = columns[6];
      batch->region_stride = columns[7];
    }
    pb->batches[b] = batch;
  }
  Reshard__V1__PlanStats *stats =
      RESHARD_ARENA_NEW(arena, Reshard__V1__PlanStats, 1);
  reshard__v1__plan_stats__init(stats);
  stats->operations = plan->operations;
  stats->bytes = plan->bytes;
  stats->copies_before_coalescing = plan->copies_before_coalescing;
  stats->runs = plan->runs.run_count;
  pb->stats = stats;
  pb->source_placement_id = (char *)t->source_placement_id;
  pb->target_placement_id = (char *)t->target_placement_id;
  return pb;
}

/* One random plan: measured and written from its copies (or runs) and from
 * its varint columns, whole and as pieces, the bytes protobuf-c packs. */
static void assert_transfer_matches(uint64_t seed, bool runs) {
  reshard_arena arena;
  reshard_arena_init(&arena, 0);
  random_transfer t;
  draw_transfer(seed, runs, &arena, &t);
  Reshard__V1__PlanTransferResponse *message = transfer_to_pb(&t, &arena);
  size_t want_size = protobuf_c_message_get_packed_size(&message->base);
  uint8_t *want = malloc(want_size + 1);
  cr_assert_eq(protobuf_c_message_pack(&message->base, want), want_size);
  /* And the bytes are that message: protobuf-c reads them back. */
  Reshard__V1__PlanTransferResponse *back =
      reshard__v1__plan_transfer_response__unpack(NULL, want_size, want);
  cr_assert_not_null(back, "seed %llu", (unsigned long long)seed);
  cr_assert_eq(back->n_batches, t.plan.batch_count);
  reshard__v1__plan_transfer_response__free_unpacked(back, NULL);

  for (int from_columns = 0; from_columns < 2; from_columns++) {
    reshard_transfer_response response;
    cr_assert_eq(reshard_transfer_response_measure(
                     &t.plan, t.pools, &t.binding, t.source_placement_id,
                     t.target_placement_id, from_columns ? &t.columns : NULL,
                     &arena, &response),
                 RESHARD_OK);
    cr_assert_eq(response.size, want_size,
                 "seed %llu%s: size %zu, protobuf-c packs %zu",
                 (unsigned long long)seed, from_columns ? " (columns)" : "",
                 response.size, want_size);
    uint8_t *got = malloc(response.size + 1);
    cr_assert_eq(reshard_transfer_response_write(&response, got),
                 response.size);
    for (size_t i = 0; i < response.size; i++) {
      cr_assert_eq(got[i], want[i], "seed %llu%s: byte %zu of %zu differs",
                   (unsigned long long)seed, from_columns ? " (columns)" : "",
                   i, response.size);
    }
    free(got);
    /* With runs the columns are not the batches: they must not be used. */
    cr_assert_eq(response.batches.columns != NULL, from_columns && !runs);
    assert_same_pieces_at_every_minimum(&response.batches, &response,
                                        reshard_transfer_response_write_pieces,
                                        want, want_size);
  }
  if (runs) {
    /* A runs-only plan, as the daemon asks for (request.omit_copies): no
     * copies at all, and the runs alone give the same bytes. */
    reshard_transfer_plan runs_only = t.plan;
    runs_only.copies = NULL;
    reshard_transfer_response response;
    cr_assert_eq(reshard_transfer_response_measure(
                     &runs_only, t.pools, &t.binding, t.source_placement_id,
                     t.target_placement_id, NULL, &arena, &response),
                 RESHARD_OK);
    cr_assert_eq(response.size, want_size, "seed %llu (runs only)",
                 (unsigned long long)seed);
    uint8_t *got = malloc(response.size + 1);
    cr_assert_eq(reshard_transfer_response_write(&response, got),
                 response.size);
    cr_assert(memcmp(got, want, want_size) == 0, "seed %llu (runs only)",
              (unsigned long long)seed);
    free(got);
    assert_same_pieces_at_every_minimum(&response.batches, &response,
                                        reshard_transfer_response_write_pieces,
                                        want, want_size);
  }
  free(want);
  reshard_arena_destroy(&arena);
}

Test(transfer_response, transfer_matches_protobuf_c_on_random_plans) {
  for (uint64_t seed = 1; seed <= 300; seed++) {
    assert_transfer_matches(seed, false);
    assert_transfer_matches(seed, true);
  }
}

/* Nothing planned: no sources, regions, batches or ids; the stats are
 * still there (empty), as the message always carries them. */
Test(transfer_response, empty_transfer_plan) {
  reshard_arena arena;
  reshard_arena_init(&arena, 0);
  random_transfer t;
  memset(&t, 0, sizeof t);
  Reshard__V1__PlanTransferResponse *message = transfer_to_pb(&t, &arena);
  uint8_t want[16], got[16];
  size_t want_size = protobuf_c_message_get_packed_size(&message->base);
  cr_assert_eq(want_size, 2); /* the empty stats: tag, length 0 */
  protobuf_c_message_pack(&message->base, want);
  reshard_transfer_response response;
  cr_assert_eq(reshard_transfer_response_measure(&t.plan, NULL, &t.binding,
                                                 NULL, "", NULL, &arena,
                                                 &response),
               RESHARD_OK);
  cr_assert_eq(response.size, want_size);
  cr_assert_eq(reshard_transfer_response_write(&response, got), want_size);
  cr_assert_arr_eq(got, want, want_size);
  reshard_arena_destroy(&arena);
}

/* A column size the arena could not hold is refused by the whole
 * response's measure, not wrapped (range_batches' test holds the batches
 * to every such case). */
Test(transfer_response, sizes_past_size_max_are_refused) {
  reshard_arena arena;
  reshard_arena_init(&arena, 0);
  reshard_copy copy = {0};
  reshard_batch batch = {.first = 0, .count = 1, .bytes = 1};
  size_t source = 0, batch_source = 0;
  reshard_pool pool = {.participant_id = "p"};
  const reshard_transfer_pool pools[1] = {{"m", &pool, NULL}};
  const reshard_transfer_plan plan = {
      .sources = &source,
      .source_count = 1,
      .copies = &copy,
      .copy_count = 1,
      .batches = &batch,
      .batch_count = 1,
      .batch_source = &batch_source,
  };
  const uint8_t *never_read[1] = {NULL};
  size_t column_bytes[RESHARD_COPY_COLUMNS] = {1, 1, 1, 1, 1, SIZE_MAX - 5};
  const reshard_varint_batches columns = {never_read, column_bytes, 1};
  const reshard_binding binding = {0};
  reshard_transfer_response response;
  cr_assert_eq(reshard_transfer_response_measure(&plan, pools, &binding, "s",
                                                 "t", &columns, &arena,
                                                 &response),
               RESHARD_RESOURCE_EXHAUSTED);
  reshard_arena_destroy(&arena);
}
