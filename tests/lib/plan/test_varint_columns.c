/* Tests lib/plan/varint_columns.c through reshard_plan_load: a plan asked for
 * varint columns must carry the same copies and batches as one that is not
 * (the oracle executes the latter), and every batch's columns must decode,
 * with a decoder written here from the LEB128 rules, to exactly that
 * batch's copies, field by field, with no byte left over. Cases: the
 * oracle suite's random cases, tiny batches that split pages and copies
 * (so batches close in the middle of a page's copies), and the SPEC §6
 * scenarios; the group encoder alone on random groups whose offsets
 * are one byte long (a word written for one would reach the next row),
 * cross a varint length inside a sequence, or reach eight bytes; and rows
 * written column by column in stretches of every shape plain_column
 * tells apart. */
#include <criterion/criterion.h>
#include <inttypes.h>
#include <stdio.h>
#include <string.h>

#include "oracle.h"
#include "plan/plan_internal.h"
#include "reshard/runs.h"
#include "reshard/varint_columns.h"

/* Decodes one LEB128 varint at *at, before `end`. */
static uint64_t decode_varint(const uint8_t **at, const uint8_t *end,
                              const char *what) {
  uint64_t value = 0;
  for (unsigned shift = 0; shift < 64; shift += 7) {
    cr_assert_lt(*at, end, "%s: a column ends inside a varint", what);
    uint8_t byte = *(*at)++;
    value |= (uint64_t)(byte & 0x7f) << shift;
    if ((byte & 0x80) == 0) {
      /* Minimal, as protobuf writes it: no trailing zero group. */
      cr_assert(byte != 0 || shift == 0, "%s: a padded varint", what);
      return value;
    }
  }
  cr_assert_fail("%s: a varint longer than 10 bytes", what);
  return 0;
}

static uint64_t field(const reshard_copy *copy, unsigned c) {
  const uint64_t values[RESHARD_COPY_COLUMNS] = {
      copy->page_index,   copy->part_index,    copy->part_offset,
      copy->region_index, copy->region_offset, copy->nbytes};
  return values[c];
}

/* The columns of `plan` must encode `copies`, batch by batch. */
static void check_columns(const reshard_load_plan *plan,
                          const reshard_copy *copies, const char *what) {
  const reshard_varint_batches *columns = &plan->columns;
  cr_assert_not_null(columns->columns, "%s: no columns", what);
  cr_assert_eq(columns->batch_count, plan->batch_count, "%s", what);
  for (size_t b = 0; b < plan->batch_count; b++) {
    const reshard_batch *batch = &plan->batches[b];
    for (unsigned c = 0; c < RESHARD_COPY_COLUMNS; c++) {
      const uint8_t *at = columns->columns[b * RESHARD_COPY_COLUMNS + c];
      const uint8_t *end =
          at + columns->column_bytes[b * RESHARD_COPY_COLUMNS + c];
      for (size_t i = 0; i < batch->count; i++) {
        uint64_t want = field(&copies[batch->first + i], c);
        uint64_t got = decode_varint(&at, end, what);
        cr_assert_eq(got, want,
                     "%s: batch %zu column %u row %zu is %" PRIu64
                     ", the copy has %" PRIu64,
                     what, b, c, i, got, want);
      }
      cr_assert_eq(at, end, "%s: batch %zu column %u has %td bytes too many",
                   what, b, c, end - at);
    }
  }
}

/* The encoder's first closed batch must decode to `copies`, column by
 * column, with no byte left over. */
static void check_first_batch(const reshard__column_encoder *encoder,
                              const reshard_copy *copies, size_t count,
                              unsigned trial) {
  char what[32];
  snprintf(what, sizeof what, "trial %u", trial);
  for (unsigned c = 0; c < RESHARD_COPY_COLUMNS; c++) {
    const uint8_t *at = encoder->out.columns[c];
    const uint8_t *end = at + encoder->out.column_bytes[c];
    for (size_t i = 0; i < count; i++) {
      uint64_t got = decode_varint(&at, end, what);
      cr_assert_eq(got, field(&copies[i], c),
                   "%s: column %u row %zu is %" PRIu64 ", want %" PRIu64, what,
                   c, i, got, field(&copies[i], c));
    }
    cr_assert_eq(at, end, "%s: column %u has %td bytes too many", what, c,
                 end - at);
  }
}

/* Plans `c` without columns (executed by the oracle) and with; returns
 * the copies checked. */
static size_t run_case(oracle_case *c, const char *what) {
  char msg[ORACLE_MSG_SIZE];
  reshard_arena plain_arena, columns_arena;
  reshard_load_plan plain, with_columns;
  oracle_exec_stats stats;
  c->request.varint_columns = false;
  cr_assert(oracle_case_run(c, &plain_arena, &plain, &stats, msg, sizeof msg),
            "%s: %s", what, msg);
  cr_assert_null(plain.columns.columns);
  c->request.varint_columns = true;
  reshard_arena_init(&columns_arena, 0);
  reshard_error err;
  cr_assert_eq(
      reshard_plan_load(&c->request, &columns_arena, &with_columns, &err),
      RESHARD_OK, "%s: %s", what, err.message);
  cr_assert_eq(with_columns.copy_count, plain.copy_count, "%s", what);
  cr_assert_eq(with_columns.batch_count, plain.batch_count, "%s", what);
  cr_assert(plain.copy_count == 0 ||
                memcmp(with_columns.copies, plain.copies,
                       plain.copy_count * sizeof(reshard_copy)) == 0,
            "%s: columns changed the copies", what);
  cr_assert(plain.batch_count == 0 ||
                memcmp(with_columns.batches, plain.batches,
                       plain.batch_count * sizeof(reshard_batch)) == 0,
            "%s: columns changed the batches", what);
  check_columns(&with_columns, plain.copies, what);
  /* Asked for the columns only (as the daemon asks), the plan need not
   * write the copies; the columns are the same. */
  reshard_arena only_arena, bytes_arena;
  reshard_load_plan only_columns;
  reshard_arena_init(&only_arena, 0);
  reshard_arena_init(&bytes_arena, 0);
  c->request.omit_copies = true;
  /* As the daemon asks, with the columns' bytes in an arena of their own
   * that outlives the planning scratch. */
  c->request.column_arena = &bytes_arena;
  cr_assert_eq(reshard_plan_load(&c->request, &only_arena, &only_columns, &err),
               RESHARD_OK, "%s: %s", what, err.message);
  c->request.omit_copies = false;
  c->request.column_arena = NULL;
  size_t column_total = 0;
  for (size_t i = 0; i < only_columns.batch_count * RESHARD_COPY_COLUMNS; i++) {
    column_total += only_columns.columns.column_bytes[i];
  }
  cr_assert_geq(bytes_arena.total_bytes, column_total,
                "%s: the columns' bytes are not in their arena", what);
  cr_assert_null(only_columns.copies, "%s", what);
  cr_assert_eq(only_columns.batch_count, plain.batch_count, "%s", what);
  cr_assert(plain.batch_count == 0 ||
                memcmp(only_columns.batches, plain.batches,
                       plain.batch_count * sizeof(reshard_batch)) == 0,
            "%s: omitting the copies changed the batches", what);
  check_columns(&only_columns, plain.copies, what);
  oracle_plan_release(c, &only_arena, &only_columns);
  reshard_arena_destroy(&bytes_arena);
  size_t copies = with_columns.copy_count;
  oracle_plan_release(c, &columns_arena, &with_columns);
  oracle_plan_release(c, &plain_arena, &plain);
  return copies;
}

static size_t run_seeded(uint64_t stream, unsigned count,
                         const oracle_case_opts *opts) {
  size_t copies = 0;
  for (unsigned i = 0; i < count; i++) {
    uint64_t seed = oracle_case_seed(oracle_base_seed(), stream, i);
    oracle_case c;
    char msg[ORACLE_MSG_SIZE];
    char what[128];
    snprintf(what, sizeof what,
             "RESHARD_ORACLE_SEED=0x%016" PRIx64 " stream %" PRIu64 " case %u",
             oracle_base_seed(), stream, i);
    cr_assert(oracle_case_build(&c, seed, opts, msg, sizeof msg), "%s: %s",
              what, msg);
    copies += run_case(&c, what);
    oracle_case_destroy(&c);
  }
  return copies;
}

/* The oracle suite's format x memory streams, a few cases each. */
Test(varint_columns, random_cases) {
  size_t copies = 0;
  for (int f = RESHARD_FORMAT_PLHD; f <= RESHARD_FORMAT_HPLD; f++) {
    for (int s = 0; s < ORACLE_MEM_STYLE_COUNT; s++) {
      oracle_case_opts opts;
      memset(&opts, 0, sizeof opts);
      opts.format = (reshard_format)f;
      opts.style = (oracle_memory_style)s;
      opts.max_sources = 3;
      opts.selection_twists = true;
      copies += run_seeded(100 + (uint64_t)f * 10 + (uint64_t)s, 8, &opts);
    }
  }
  cr_assert_gt(copies, 0);
}

/* Batches of one to six copies and at most 400 bytes: batches close
 * inside a page's copies and split copies at the byte budget. */
Test(varint_columns, small_batches) {
  oracle_rng rng;
  oracle_rng_seed(&rng, oracle_case_seed(oracle_base_seed(), 400, 0));
  size_t copies = 0;
  for (unsigned i = 0; i < 60; i++) {
    oracle_case_opts opts;
    memset(&opts, 0, sizeof opts);
    opts.random_style = true;
    opts.max_sources = 4;
    opts.selection_twists = true;
    opts.format = (reshard_format)oracle_rng_between(&rng, RESHARD_FORMAT_PLHD,
                                                     RESHARD_FORMAT_HPLD);
    opts.max_batch_operations = oracle_rng_between(&rng, 1, 6);
    opts.max_batch_bytes = oracle_rng_between(&rng, 1, 400);
    copies += run_seeded(401 + i, 1, &opts);
  }
  cr_assert_gt(copies, 0);
}

Test(varint_columns, spec_scenarios) {
  for (int scenario = 1; scenario <= 5; scenario++) {
    oracle_case c;
    char msg[ORACLE_MSG_SIZE];
    cr_assert(oracle_scenario_build(&c, scenario, 3, 0, msg, sizeof msg),
              "S%d: %s", scenario, msg);
    char what[16];
    snprintf(what, sizeof what, "S%d", scenario);
    cr_assert_gt(run_case(&c, what), 0);
    oracle_case_destroy(&c);
  }
}

/* S2 and S3 at their §6 page counts keep more than
 * RESHARD__STREAM_COPIES_MIN_BYTES of copies, which the plan writes
 * streamed: executed by the oracle, and equal to the columns of the plans
 * that keep none. */
Test(varint_columns, spec_scenarios_streamed) {
  static const struct {
    int scenario;
    uint64_t pages;
  } sizes[] = {{2, 32}, {3, 64}};
  for (size_t i = 0; i < sizeof sizes / sizeof sizes[0]; i++) {
    oracle_case c;
    char msg[ORACLE_MSG_SIZE];
    cr_assert(oracle_scenario_build(&c, sizes[i].scenario, sizes[i].pages, 0,
                                    msg, sizeof msg),
              "S%d: %s", sizes[i].scenario, msg);
    char what[32];
    snprintf(what, sizeof what, "S%d, %llu pages", sizes[i].scenario,
             (unsigned long long)sizes[i].pages);
    size_t copies = run_case(&c, what);
    cr_assert_geq(copies * sizeof(reshard_copy),
                  RESHARD__STREAM_COPIES_MIN_BYTES,
                  "%s: %zu copies are not streamed", what, copies);
    oracle_case_destroy(&c);
  }
}

/* An offset for the group encoder: lengths 1 to 9 bytes, boundaries close. */
static uint64_t random_offset(oracle_rng *rng) {
  unsigned bits = (unsigned)oracle_rng_between(rng, 0, 62);
  uint64_t value = bits == 0 ? 0 : (uint64_t)1 << bits;
  return value - oracle_rng_between(rng, 0, value < 64 ? value : 64);
}

static uint64_t random_stride(oracle_rng *rng) {
  switch (oracle_rng_between(rng, 0, 3)) {
  case 0:
    return oracle_rng_between(rng, 0, 3);
  case 1:
    return oracle_rng_between(rng, 1, 200);
  default:
    return (uint64_t)1 << oracle_rng_between(rng, 4, 30);
  }
}

/* reshard__column_encoder_group against the group's copies (copy k of
 * each sequence in turn) decoded from the closed batch. */
Test(varint_columns, group_encoder) {
  oracle_rng rng;
  oracle_rng_seed(&rng, oracle_case_seed(oracle_base_seed(), 500, 0));
  enum { MAX_WIDTH = 80, MAX_ROWS = 12, GROUPS = 3 };
  reshard_run group[MAX_WIDTH];
  /* Aligned, so that odd trials write their copies streamed. */
  _Alignas(16) reshard_copy copies[GROUPS * MAX_WIDTH * MAX_ROWS];
  for (unsigned trial = 0; trial < 3000; trial++) {
    reshard_arena arena;
    reshard_arena_init(&arena, 0);
    reshard__column_encoder encoder;
    reshard_error err;
    cr_assert_eq(reshard__column_encoder_init(&encoder,
                                              GROUPS * MAX_WIDTH * MAX_ROWS, 1,
                                              &arena, &arena, &err),
                 RESHARD_OK);
    size_t count = 0;
    for (unsigned g = 0; g < GROUPS; g++) {
      size_t width = (size_t)oracle_rng_between(&rng, 1, MAX_WIDTH);
      uint64_t rows = oracle_rng_between(&rng, 1, MAX_ROWS);
      bool small = oracle_rng_between(&rng, 0, 2) == 0;
      for (size_t s = 0; s < width; s++) {
        group[s] = (reshard_run){
            .first = {.page_index = oracle_rng_between(&rng, 0, 300),
                      .part_index = oracle_rng_between(&rng, 0, 3),
                      .part_offset = small ? oracle_rng_between(&rng, 0, 40)
                                           : random_offset(&rng),
                      .region_index = oracle_rng_between(&rng, 0, 200),
                      .region_offset = small ? oracle_rng_between(&rng, 0, 40)
                                             : random_offset(&rng),
                      .nbytes = oracle_rng_between(&rng, 1, 1 << 20)},
            .count = rows,
            .part_stride =
                small ? oracle_rng_between(&rng, 0, 6) : random_stride(&rng),
            .region_stride =
                small ? oracle_rng_between(&rng, 0, 6) : random_stride(&rng),
        };
      }
      reshard__column_encoder_group(&encoder, group, width);
      count = (size_t)(reshard__group_expand(group, width, copies + count,
                                             trial % 2 == 1) -
                       copies);
    }
    reshard__stream_fence();
    cr_assert_eq(reshard__column_encoder_close(&encoder, &err), RESHARD_OK);
    check_first_batch(&encoder, copies, count, trial);
    reshard_arena_destroy(&arena);
  }
}

/* Groups of a few copies, and groups of one row at any width, are written
 * copy by copy rather than column by column (S5's groups are one
 * whole-block copy each); the bytes must be the same. Here every field
 * takes any length up to the full ten bytes, and groups of both kinds
 * follow larger ones in one batch, so the cursors must carry over. */
Test(varint_columns, small_groups_copy_by_copy) {
  oracle_rng rng;
  oracle_rng_seed(&rng, oracle_case_seed(oracle_base_seed(), 600, 0));
  enum { MAX_WIDTH = 12, MAX_ROWS = 9, GROUPS = 6 };
  reshard_run group[MAX_WIDTH];
  reshard_copy copies[GROUPS * MAX_WIDTH * MAX_ROWS];
  size_t small = 0, large = 0;
  for (unsigned trial = 0; trial < 2000; trial++) {
    reshard_arena arena;
    reshard_arena_init(&arena, 0);
    reshard__column_encoder encoder;
    reshard_error err;
    cr_assert_eq(reshard__column_encoder_init(&encoder,
                                              GROUPS * MAX_WIDTH * MAX_ROWS, 1,
                                              &arena, &arena, &err),
                 RESHARD_OK);
    size_t count = 0;
    for (unsigned g = 0; g < GROUPS; g++) {
      size_t width = (size_t)oracle_rng_between(&rng, 1, MAX_WIDTH);
      uint64_t rows = oracle_rng_between(&rng, 0, 2) == 0
                          ? 1
                          : oracle_rng_between(&rng, 1, MAX_ROWS);
      if (rows == 1 || rows * width <= 8) {
        small++;
      } else {
        large++;
      }
      for (size_t s = 0; s < width; s++) {
        /* Offsets and strides kept below 2^63 so no offset wraps. */
        group[s] = (reshard_run){
            .first = {.page_index = random_offset(&rng) |
                                    (oracle_rng_between(&rng, 0, 9) == 0
                                         ? UINT64_C(1) << 63
                                         : 0),
                      .part_index = random_offset(&rng),
                      .part_offset = random_offset(&rng) >> 1,
                      .region_index = random_offset(&rng),
                      .region_offset = random_offset(&rng) >> 1,
                      .nbytes = oracle_rng_between(&rng, 0, 9) == 0
                                    ? UINT64_MAX
                                    : random_offset(&rng) + 1},
            .count = rows,
            .part_stride = random_stride(&rng),
            .region_stride = random_stride(&rng),
        };
      }
      reshard__column_encoder_group(&encoder, group, width);
      count =
          (size_t)(reshard__group_expand(group, width, copies + count, false) -
                   copies);
      cr_assert_eq(encoder.rows, count);
    }
    cr_assert_eq(reshard__column_encoder_close(&encoder, &err), RESHARD_OK);
    check_first_batch(&encoder, copies, count, trial);
    reshard_arena_destroy(&arena);
  }
  /* Both encoders took part. */
  cr_assert_gt(small, 1000);
  cr_assert_gt(large, 1000);
}

/* A batch of rows pushed with nothing new (as the planner drains after
 * each group) leaves the columns as they were. */
Test(varint_columns, rows_of_nothing_leave_the_columns) {
  reshard_arena arena;
  reshard_arena_init(&arena, 0);
  reshard__column_encoder encoder;
  reshard_error err;
  cr_assert_eq(
      reshard__column_encoder_init(&encoder, 4, 1, &arena, &arena, &err),
      RESHARD_OK);
  reshard_copy copies[2] = {{1, 2, 300, 4, 70000, 6}, {7, 0, 1, 2, 3, 200}};
  reshard__column_encoder_rows(&encoder, copies, 1);
  reshard__column_encoder_rows(&encoder, copies + 1, 0);
  reshard_run run = {.first = copies[1], .count = 1};
  reshard__column_encoder_group(&encoder, &run, 1);
  reshard__column_encoder_rows(&encoder, copies, 0);
  cr_assert_eq(encoder.rows, 2);
  cr_assert_eq(reshard__column_encoder_close(&encoder, &err), RESHARD_OK);
  static const size_t want_sizes[RESHARD_COPY_COLUMNS] = {2, 2, 3, 2, 4, 3};
  static const uint8_t want[] = {1, 7,    2,    0,    0xac, 0x02, 1,    4,
                                 2, 0xf0, 0xa2, 0x04, 3,    6,    0xc8, 0x01};
  size_t total = 0;
  for (unsigned c = 0; c < RESHARD_COPY_COLUMNS; c++) {
    cr_assert_eq(encoder.out.column_bytes[c], want_sizes[c], "column %u", c);
    total += want_sizes[c];
  }
  cr_assert_eq(total, sizeof want);
  /* A batch written in the scratch is packed into one block. */
  for (unsigned c = 1; c < RESHARD_COPY_COLUMNS; c++) {
    cr_assert_eq(encoder.out.columns[c],
                 encoder.out.columns[c - 1] + want_sizes[c - 1], "column %u",
                 c);
  }
  cr_assert_arr_eq(encoder.out.columns[0], want, sizeof want);
  reshard_arena_destroy(&arena);
}

/* A batch encoded as a closed batch renamed (reshard__column_encoder_
 * renamed) decodes to its own copies; reshard__copies_renamed tells
 * batches that differ in anything but the part and region indices, at any
 * copy, from those that do not. Indices and offsets take every varint
 * length, so the renamed columns differ in length from the batch's. The
 * columns the two batches agree on are stored once. */
Test(varint_columns, renamed_batches) {
  oracle_rng rng;
  oracle_rng_seed(&rng, oracle_case_seed(oracle_base_seed(), 700, 0));
  enum { MAX_COPIES = 300 };
  reshard_copy like[MAX_COPIES], copies[MAX_COPIES];
  for (unsigned trial = 0; trial < 1000; trial++) {
    reshard_arena arena;
    reshard_arena_init(&arena, 0);
    reshard__column_encoder encoder;
    reshard_error err;
    cr_assert_eq(reshard__column_encoder_init(&encoder, MAX_COPIES, 2, &arena,
                                              &arena, &err),
                 RESHARD_OK);
    size_t count = (size_t)oracle_rng_between(&rng, 1, MAX_COPIES);
    for (size_t i = 0; i < count; i++) {
      like[i] = (reshard_copy){
          .page_index = oracle_rng_between(&rng, 0, 3),
          .part_index = random_offset(&rng),
          .part_offset = random_offset(&rng),
          .region_index = random_offset(&rng),
          .region_offset = random_offset(&rng),
          .nbytes = oracle_rng_between(&rng, 1, 1 << 20),
      };
      copies[i] = like[i];
      copies[i].part_index = random_offset(&rng);
      copies[i].region_index = random_offset(&rng);
    }
    cr_assert(reshard__copies_renamed(like, copies, count));
    /* Any other field different at any copy is another batch. */
    size_t at = (size_t)oracle_rng_between(&rng, 0, count - 1);
    static const size_t kept[] = {0, 2, 4, 5}; /* reshard_copy fields */
    size_t f = kept[oracle_rng_between(&rng, 0, 3)];
    uint64_t *word = (uint64_t *)&copies[at] + f;
    *word += 1;
    cr_assert_not(reshard__copies_renamed(like, copies, count),
                  "trial %u: field %zu of copy %zu differs", trial, f, at);
    *word -= 1;

    reshard__column_encoder_rows(&encoder, like, count);
    cr_assert_eq(reshard__column_encoder_close(&encoder, &err), RESHARD_OK);
    cr_assert_eq(
        reshard__column_encoder_renamed(&encoder, copies, count, 0, &err),
        RESHARD_OK);
    cr_assert_eq(encoder.out.batch_count, 2);
    cr_assert_eq(encoder.rows, 2 * count);
    char what[32];
    snprintf(what, sizeof what, "trial %u", trial);
    for (size_t b = 0; b < 2; b++) {
      const reshard_copy *want = b == 0 ? like : copies;
      for (unsigned c = 0; c < RESHARD_COPY_COLUMNS; c++) {
        const uint8_t *p = encoder.out.columns[b * RESHARD_COPY_COLUMNS + c];
        const uint8_t *end =
            p + encoder.out.column_bytes[b * RESHARD_COPY_COLUMNS + c];
        for (size_t i = 0; i < count; i++) {
          uint64_t got = decode_varint(&p, end, what);
          cr_assert_eq(got, field(&want[i], c),
                       "%s: batch %zu column %u row %zu is %" PRIu64
                       ", want %" PRIu64,
                       what, b, c, i, got, field(&want[i], c));
        }
        cr_assert_eq(p, end, "%s: batch %zu column %u has %td bytes too many",
                     what, b, c, end - p);
      }
    }
    /* The renamed batch's other four columns are the first batch's bytes,
     * shared, not copied; its two index columns are its own. */
    for (unsigned c = 0; c < RESHARD_COPY_COLUMNS; c++) {
      bool index = c == 1 || c == 3;
      cr_assert_eq(encoder.out.columns[RESHARD_COPY_COLUMNS + c] ==
                       encoder.out.columns[c],
                   !index, "%s: column %u", what, c);
    }
    reshard_arena_destroy(&arena);
  }
}

/* Fills `count` values of field `f` of `rows` with stretches of the shapes
 * plain_column tells apart: one value repeated (up to 600 times, so a
 * 2- or 3-byte value repeats past 512 bytes), progressions that cross a
 * varint length or end at UINT64_MAX, and scattered values. */
static void fill_stretches(oracle_rng *rng, reshard_copy *rows, size_t count,
                           unsigned f) {
  for (size_t i = 0; i < count;) {
    size_t n = (size_t)oracle_rng_between(rng, 1, 600);
    n = n < count - i ? n : count - i;
    unsigned length = (unsigned)oracle_rng_between(rng, 1, 9);
    uint64_t boundary = UINT64_C(1) << (7 * length);
    uint64_t value = 0, stride = 0;
    bool scattered = false;
    switch (oracle_rng_between(rng, 0, 3)) {
    case 0: /* repeated */
      value = random_offset(rng);
      break;
    case 1: /* a progression up to and past a varint length */
      stride = oracle_rng_between(rng, 1, 200);
      value = boundary - stride * oracle_rng_between(rng, 1, 8) -
              oracle_rng_between(rng, 0, stride - 1);
      n = n < 20 ? n : (size_t)oracle_rng_between(rng, 1, 20);
      break;
    case 2: /* a progression that ends at the largest value */
      stride = oracle_rng_between(rng, 1, 3);
      value = UINT64_MAX - stride * (n < 20 ? n - 1 : 19);
      n = n < 20 ? n : 20;
      break;
    default:
      scattered = true;
      n = n < 20 ? n : (size_t)oracle_rng_between(rng, 1, 20);
      break;
    }
    for (size_t k = 0; k < n; k++, i++) {
      uint64_t *word = (uint64_t *)&rows[i] + f;
      *word = scattered ? random_offset(rng) : value + stride * k;
    }
  }
}

/* Rows written column by column (four or more pushed at once), each column
 * a random mix of stretches, decode to their values. */
Test(varint_columns, rows_in_stretches) {
  oracle_rng rng;
  oracle_rng_seed(&rng, oracle_case_seed(oracle_base_seed(), 800, 0));
  enum { MAX_COPIES = 1500 };
  static reshard_copy rows[MAX_COPIES];
  for (unsigned trial = 0; trial < 300; trial++) {
    reshard_arena arena;
    reshard_arena_init(&arena, 0);
    reshard__column_encoder encoder;
    reshard_error err;
    cr_assert_eq(reshard__column_encoder_init(&encoder, MAX_COPIES, 1, &arena,
                                              &arena, &err),
                 RESHARD_OK);
    size_t count = (size_t)oracle_rng_between(&rng, 4, MAX_COPIES);
    for (unsigned c = 0; c < RESHARD_COPY_COLUMNS; c++) {
      fill_stretches(&rng, rows, count, c);
    }
    reshard__column_encoder_rows(&encoder, rows, count);
    cr_assert_eq(reshard__column_encoder_close(&encoder, &err), RESHARD_OK);
    check_first_batch(&encoder, rows, count, trial);
    reshard_arena_destroy(&arena);
  }
}
