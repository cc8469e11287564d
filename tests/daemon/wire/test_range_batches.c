/* Tests daemon/wire/range_batches.c beyond what the responses' tests
 * cover: column sizes past SIZE_MAX refused rather than wrapped, for
 * RangeBatches and TransferBatches; and run columns of one value
 * throughout a batch, written once and repeated, at every varint length.
 * The encoder's bytes against protobuf-c's on whole plans are
 * test_plan_response.c's and test_transfer_response.c's. */
#include <criterion/criterion.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "reshard/v1/planner.pb-c.h"
#include "wire/range_batches.h"

/* Column sizes the arena could not hold are refused, not wrapped: a
 * column near SIZE_MAX, and two that only pass it together; as
 * RangeBatches and as TransferBatches (one source). */
Test(range_batches, sizes_past_size_max_are_refused) {
  reshard_arena arena;
  reshard_arena_init(&arena, 0);
  reshard_copy copy = {0};
  reshard_batch batch = {.first = 0, .count = 1, .bytes = 1};
  const uint8_t *bytes[1] = {NULL}; /* measuring never reads them */
  size_t near[RESHARD_COPY_COLUMNS] = {1, 1, 1, 1, 1, SIZE_MAX - 5};
  size_t halves[RESHARD_COPY_COLUMNS] = {1, 1, 1, SIZE_MAX / 2, SIZE_MAX / 2,
                                         1};
  size_t *cases[] = {near, halves};
  const size_t source = 0;
  const size_t *sources[] = {NULL, &source};
  for (size_t i = 0; i < 2; i++) {
    reshard_varint_batches columns = {bytes, cases[i], 1};
    for (size_t s = 0; s < 2; s++) {
      reshard_range_batches batches;
      cr_assert_eq(reshard_range_batches_measure(&copy, &batch, 1, NULL,
                                                 &columns, sources[s], &arena,
                                                 &batches),
                   RESHARD_RESOURCE_EXHAUSTED, "case %zu, sources %zu", i, s);
    }
  }
  reshard_arena_destroy(&arena);
}

/* Run columns of one value throughout a batch are written once and
 * repeated: every varint length from 1 to 10 bytes, in batches of 1 to 17
 * runs (repeating doubles the bytes written, so the odd counts end on a
 * partial copy), beside columns of one length and of mixed lengths, and a
 * batch repeating the one before it but for its part and region (written
 * from that batch's bytes). The bytes must be protobuf-c's for the same
 * RangeBatches. */
Test(range_batches, repeated_run_columns_match_protobuf_c) {
  static const uint64_t values[] = {0,
                                    1,
                                    127,
                                    128,
                                    16383,
                                    16384,
                                    (1ull << 21) - 1,
                                    1ull << 21,
                                    1ull << 35,
                                    1ull << 42,
                                    1ull << 49,
                                    1ull << 56,
                                    1ull << 63,
                                    UINT64_MAX};
  enum { VALUES = sizeof values / sizeof values[0], BATCHES = 2 * VALUES };
  static const size_t counts[] = {1, 2, 3, 5, 7, 16, 17};
  reshard_arena arena;
  reshard_arena_init(&arena, 0);
  reshard_run runs[BATCHES * 17];
  reshard_batch batches[BATCHES];
  size_t batch_first[BATCHES + 1];
  Reshard__V1__RangeBatch messages[BATCHES];
  Reshard__V1__RangeBatch *message_list[BATCHES];
  uint64_t columns[BATCHES][9][17];
  size_t at = 0;
  for (size_t b = 0; b < BATCHES; b++) {
    /* Odd batches repeat the batch before them but for the part and the
     * region; every batch's run count and strides are one value each. */
    size_t count = b % 2 == 1 ? batches[b - 1].count
                              : counts[b % (sizeof counts / sizeof counts[0])];
    uint64_t value = values[b / 2];
    batch_first[b] = at;
    batches[b] = (reshard_batch){.first = at, .count = count, .bytes = 0};
    for (size_t i = 0; i < count; i++) {
      reshard_run run = {
          .first = {.page_index = value,
                    .part_index = b % 2 == 1 ? b : value,
                    .part_offset = i * 1000003u + value % 7,
                    .region_index = b,
                    .region_offset = (i % 2 ? 300u : 5u) * (i + 1),
                    .nbytes = 4096},
          .count = value,
          .part_stride = value,
          .region_stride = 1ull << 20,
      };
      if (b % 2 == 1) {
        run = runs[batch_first[b - 1] + i];
        run.first.part_index = b;
        run.first.region_index = b + 1;
      }
      runs[at++] = run;
      const uint64_t *row = (const uint64_t *)&runs[at - 1];
      for (unsigned c = 0; c < 9; c++) {
        columns[b][c][i] = row[c];
      }
      batches[b].bytes += 1;
    }
    Reshard__V1__RangeBatch m = RESHARD__V1__RANGE_BATCH__INIT;
    uint64_t *cols[9];
    for (unsigned c = 0; c < 9; c++) {
      cols[c] = columns[b][c];
    }
    m.n_page_index = m.n_part_index = m.n_part_offset = m.n_region_index =
        m.n_region_offset = m.n_nbytes = m.n_run_count = m.n_part_stride =
            m.n_region_stride = count;
    m.page_index = cols[0];
    m.part_index = cols[1];
    m.part_offset = cols[2];
    m.region_index = cols[3];
    m.region_offset = cols[4];
    m.nbytes = cols[5];
    m.run_count = cols[6];
    m.part_stride = cols[7];
    m.region_stride = cols[8];
    m.bytes = batches[b].bytes;
    messages[b] = m;
    message_list[b] = &messages[b];
  }
  batch_first[BATCHES] = at;
  /* The batches alike found by comparing (no batch_like), named by the
   * planner (each odd batch the one before it), and named where the
   * counts differ, which the encoder must not take. */
  size_t named[BATCHES], miscounted[BATCHES];
  for (size_t b = 0; b < BATCHES; b++) {
    named[b] = b % 2 == 1 ? b - 1 : b;
    miscounted[b] =
        b % 2 == 0 && b > 0 && batches[b - 1].count != batches[b].count ? b - 1
                                                                        : b;
  }
  size_t *likes[] = {NULL, named, miscounted};
  Reshard__V1__PlanLoadResponse response =
      RESHARD__V1__PLAN_LOAD_RESPONSE__INIT;
  response.n_batches = BATCHES;
  response.batches = message_list;
  size_t want_size = protobuf_c_message_get_packed_size(&response.base);
  uint8_t *want = malloc(want_size + 1);
  protobuf_c_message_pack(&response.base, want);
  for (size_t l = 0; l < sizeof likes / sizeof likes[0]; l++) {
    reshard_runs plan_runs = {runs, at, batch_first, BATCHES, likes[l]};
    reshard_range_batches measured;
    cr_assert_eq(reshard_range_batches_measure(NULL, batches, BATCHES,
                                               &plan_runs, NULL, NULL, &arena,
                                               &measured),
                 RESHARD_OK);
    cr_assert_eq(measured.size, want_size,
                 "likes %zu: size %zu, protobuf-c packs %zu", l, measured.size,
                 want_size);
    uint8_t *got = malloc(want_size + 1);
    uint8_t *end = reshard_range_batches_write(&measured, 4, got, NULL);
    cr_assert_eq((size_t)(end - got), want_size);
    for (size_t i = 0; i < want_size; i++) {
      cr_assert_eq(got[i], want[i], "likes %zu: byte %zu of %zu differs", l, i,
                   want_size);
    }
    free(got);
  }
  free(want);
  reshard_arena_destroy(&arena);
}
