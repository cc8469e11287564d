#include "wire/plan_response.h"

#include <assert.h>
#include <stdbool.h>
#include <stddef.h>
#include <string.h>

#include "reshard/checked.h"

/* Wire types of the protobuf encoding. */
enum { WIRE_VARINT = 0, WIRE_LENGTH = 2 };

/* Field numbers here are below 16, so a tag is one byte. */
static uint8_t *put_tag(uint8_t *out, unsigned field, unsigned wire_type) {
  assert(field >= 1 && field < 16);
  *out = (uint8_t)((field << 3) | wire_type);
  return out + 1;
}

static const char *text(const char *value) {
  return value ? value : "";
}

/* proto3 leaves zero scalars and empty strings out; repeated strings are
 * always written. */
static size_t scalar_size(uint64_t value) {
  return value ? 1 + reshard_varint_length(value) : 0;
}

static size_t string_size(const char *value, int always) {
  size_t length = strlen(text(value));
  return length || always ? 1 + reshard_varint_length(length) + length : 0;
}

static size_t nested_size(size_t body) {
  return 1 + reshard_varint_length(body) + body;
}

/* Sizes added up while measuring, checked: false once the sum would pass
 * SIZE_MAX (the response could not be built; measure says so). */
static bool add_size(size_t *sum, size_t more) {
  if (more > SIZE_MAX - *sum) {
    return false;
  }
  *sum += more;
  return true;
}

/* A length-delimited field of `body` bytes: a one-byte tag, at most ten
 * bytes of length, the body. */
static bool add_nested(size_t *sum, size_t body) {
  return body <= SIZE_MAX - 11 && add_size(sum, nested_size(body));
}

static bool add_string(size_t *sum, const char *value, int always) {
  size_t length = strlen(text(value));
  return (length == 0 && !always) || add_nested(sum, length);
}

static uint8_t *put_scalar(uint8_t *out, unsigned field, uint64_t value) {
  if (value == 0) {
    return out;
  }
  out = put_tag(out, field, WIRE_VARINT);
  return reshard_varint_put(out, value);
}

/* A string field of `length` bytes at `value`; proto3 leaves an empty
 * one out unless `always`. */
static uint8_t *put_text(uint8_t *out, unsigned field, const char *value,
                         size_t length, int always) {
  if (length == 0 && !always) {
    return out;
  }
  out = put_tag(out, field, WIRE_LENGTH);
  out = reshard_varint_put(out, length);
  memcpy(out, text(value), length);
  return out + length;
}

static uint8_t *put_string(uint8_t *out, unsigned field, const char *value,
                           int always) {
  return put_text(out, field, value, strlen(text(value)), always);
}

static uint32_t clamp_u32(uint64_t value) {
  return value > UINT32_MAX ? UINT32_MAX : (uint32_t)value;
}

/* ---- RangeBatch ---- */

/* A copy is RangeBatch fields 1..6 in declaration order (reshard/copy.h
 * asserts it), a run fields 1..6 then 8..10, so a batch's entries are
 * rows of 6 or 9 uint64 whose c-th word is column c. */
_Static_assert(sizeof(reshard_run) == 9 * sizeof(uint64_t) &&
                   offsetof(reshard_run, first) == 0 &&
                   offsetof(reshard_run, count) == 48 &&
                   offsetof(reshard_run, part_stride) == 56 &&
                   offsetof(reshard_run, region_stride) == 64,
               "reshard_run must mirror RangeBatch fields 1..6, 8..10");

enum { COPY_WIDTH = 6, RUN_WIDTH = 9 };

static unsigned column_field(unsigned c) {
  return c < 6 ? c + 1 : c + 2;
}

/* The first column written: a TransferBatch carries its source as one
 * scalar (field 1) instead of RangeBatch's page_index column. */
static unsigned first_column(const reshard_range_batches *batches) {
  return batches->sources != NULL ? 1 : 0;
}

/* The rows of batch b: where they start, how many, how wide. */
static const uint64_t *batch_rows(const reshard_range_batches *batches,
                                  size_t b, size_t *count, unsigned *width) {
  if (batches->runs != NULL) {
    size_t first = batches->runs->batch_first[b];
    *count = batches->runs->batch_first[b + 1] - first;
    *width = RUN_WIDTH;
    return (const uint64_t *)(batches->runs->runs + first);
  }
  *count = batches->batches[b].count;
  *width = COPY_WIDTH;
  if (batches->copies == NULL) {
    return NULL; /* a plan that kept only its varint columns */
  }
  return (const uint64_t *)(batches->copies + batches->batches[b].first);
}

/* Copies, measured value by value (runs are written while measuring, see
 * below). Inlined with a constant width and first column, so the column
 * loop unrolls. Also ORs each column's values: the OR has the longest
 * value's bit length. No sum wraps: the rows lie in memory, 48 bytes each,
 * and add at most 10 bytes to a column. */
static inline void measure_rows(const uint64_t *rows, size_t count,
                                unsigned width, unsigned first, size_t *sizes,
                                uint64_t *any) {
  for (size_t i = 0; i < count; i++, rows += width) {
    for (unsigned c = first; c < width; c++) {
      sizes[c] += reshard_varint_length(rows[c]);
      any[c] |= rows[c];
    }
  }
}

/* Writes one column of `count` rows whose varints all have `length`
 * bytes: with the length fixed per loop, each value is a few shifts and
 * stores, free of the per-value branches that offsets of mixed lengths
 * would mispredict. */
static inline uint8_t *put_fixed(uint8_t *out, const uint64_t *rows,
                                 size_t count, unsigned width,
                                 unsigned length) {
  for (size_t i = 0; i < count; i++, rows += width) {
    uint64_t value = *rows;
    for (unsigned k = 0; k + 1 < length; k++) {
      out[k] = (uint8_t)((value >> (7 * k)) | 0x80);
    }
    out[length - 1] = (uint8_t)(value >> (7 * (length - 1)));
    out += length;
  }
  return out;
}

/* Any column, a varint at a time. */
static uint8_t *put_varints(uint8_t *out, const uint64_t *rows, size_t count,
                            unsigned width) {
  for (size_t i = 0; i < count; i++, rows += width) {
    out = reshard_varint_put(out, *rows);
  }
  return out;
}

#if defined(__BYTE_ORDER__) && __BYTE_ORDER__ == __ORDER_LITTLE_ENDIAN__
/* The continuation bits of a varint spread over a little-endian word
 * whose top `empty` bytes are zero: 0x80 in each of its 7 - empty bytes
 * below the last. */
static const uint64_t continuation_below[8] = {
    UINT64_C(0x0080808080808080), UINT64_C(0x0000808080808080),
    UINT64_C(0x0000008080808080), UINT64_C(0x0000000080808080),
    UINT64_C(0x0000000000808080), UINT64_C(0x0000000000008080),
    UINT64_C(0x0000000000000080), UINT64_C(0),
};

/* Stores a value whose seven-bit groups lie spread over the bytes of the
 * little-endian `word` as its varint: the bytes below the one holding the
 * highest set bit get their continuation bits, the whole word is stored
 * (eight bytes at `out`: the caller leaves that room after the column)
 * and the varint's end is returned, with no branch on the value. */
static inline uint8_t *put_spread(uint8_t *out, uint64_t word) {
  unsigned empty = (unsigned)__builtin_clzll(word | 1) >> 3;
  word |= continuation_below[empty];
  memcpy(out, &word, sizeof word);
  return out + 8 - empty;
}
#endif

/* Writes one column of values at most `longest` (2..8) bytes long, not all
 * of one length (a run column's offsets across a pool of gigabytes take 3
 * or 4 bytes): each value's seven-bit groups spread over the bytes of a
 * word by shifts, then put_spread. Big-endian builds take the varint
 * loop. */
static inline uint8_t *put_mixed(uint8_t *out, const uint64_t *rows,
                                 size_t count, unsigned width,
                                 unsigned longest) {
#if defined(__BYTE_ORDER__) && __BYTE_ORDER__ == __ORDER_LITTLE_ENDIAN__
  for (size_t i = 0; i < count; i++, rows += width) {
    uint64_t value = *rows;
    uint64_t word = value & 0x7f;
    for (unsigned k = 1; k < longest; k++) {
      word |= (value << k) & (UINT64_C(0x7f) << (8 * k));
    }
    out = put_spread(out, word);
  }
  return out;
#else
  (void)longest;
  return put_varints(out, rows, count, width);
#endif
}

/* BMI2's pdep spreads a value's seven-bit groups over a word's bytes in
 * one instruction, where put_mixed takes three a byte. AMD's families 15h
 * and 17h (up to Zen 2) run it in microcode, tens to hundreds of cycles
 * a value, so they keep the shifts, as do CPUs without BMI2 and builds
 * for other architectures or compilers.
 * RESHARD_PORTABLE_VARINTS builds without it (the encoder's tests run
 * both). */
#if defined(__x86_64__) && defined(__GNUC__) &&                                \
    !defined(RESHARD_PORTABLE_VARINTS)
#include <immintrin.h>
#define RESHARD_DEPOSIT 1

static bool deposit_is_fast(void) {
  return __builtin_cpu_supports("bmi2") && !__builtin_cpu_is("amdfam15h") &&
         !__builtin_cpu_is("amdfam17h");
}

/* put_mixed for values below 2^56, whatever their lengths. */
__attribute__((target("bmi2"))) static uint8_t *
put_deposited(uint8_t *out, const uint64_t *rows, size_t count,
              unsigned width) {
  for (size_t i = 0; i < count; i++, rows += width) {
    out = put_spread(out, _pdep_u64(*rows, UINT64_C(0x7f7f7f7f7f7f7f7f)));
  }
  return out;
}
#endif

/* Column `rows[0], rows[width], ...` of varints at most `longest` bytes
 * long (0: not known), all of that length unless `mixed`. Each case has
 * its loop inlined with the length constant; other columns take the
 * varint loop. */
static uint8_t *write_column(uint8_t *out, const uint64_t *rows, size_t count,
                             unsigned width, unsigned longest, bool mixed) {
  if (mixed) {
#ifdef RESHARD_DEPOSIT
    if (longest <= 8 && deposit_is_fast()) {
      return put_deposited(out, rows, count, width);
    }
#endif
    switch (longest) {
    case 2:
      return put_mixed(out, rows, count, width, 2);
    case 3:
      return put_mixed(out, rows, count, width, 3);
    case 4:
      return put_mixed(out, rows, count, width, 4);
    case 5:
      return put_mixed(out, rows, count, width, 5);
    case 6:
      return put_mixed(out, rows, count, width, 6);
    case 7:
      return put_mixed(out, rows, count, width, 7);
    case 8:
      return put_mixed(out, rows, count, width, 8);
    default:
      break;
    }
  } else {
    switch (longest) {
    case 1:
      return put_fixed(out, rows, count, width, 1);
    case 2:
      return put_fixed(out, rows, count, width, 2);
    case 3:
      return put_fixed(out, rows, count, width, 3);
    case 4:
      return put_fixed(out, rows, count, width, 4);
    case 5:
      return put_fixed(out, rows, count, width, 5);
    default:
      break;
    }
  }
  return put_varints(out, rows, count, width);
}

/* `count` copies of `value`'s varint: written once, then doubled. A run
 * column is often one value throughout its batch (a batch's run count,
 * its strides, its part): a few copies of bytes instead of a varint a
 * row. */
static uint8_t *put_repeated(uint8_t *out, uint64_t value, size_t count) {
  uint8_t *end = reshard_varint_put(out, value);
  size_t length = (size_t)(end - out);
  if (length == 1) {
    memset(out, out[0], count);
    return out + count;
  }
  size_t total = length * count; /* within the room the caller counted */
  for (size_t done = length; done < total;) {
    size_t more = done < total - done ? done : total - done;
    memcpy(out + done, out, more);
    done += more;
  }
  return out + total;
}

/* A run column from its values' OR (`any`) and AND (`all`): one value
 * throughout when the two agree, since a bit set in one value and clear
 * in another would be in the OR alone; else write_column, of one length
 * when the AND is as long as the OR (every value lies between them), and
 * mixed otherwise. The AND stands in for the least value because it folds
 * into the same vector pass as the OR; a column of one length whose AND
 * is shorter is written mixed, which puts the same bytes. */
static uint8_t *write_run_column(uint8_t *out, const uint64_t *rows,
                                 size_t count, unsigned width, uint64_t any,
                                 uint64_t all) {
  if (any == all) {
    return put_repeated(out, any, count);
  }
  unsigned longest = (unsigned)reshard_varint_length(any);
  return write_column(out, rows, count, width, longest,
                      reshard_varint_length(all) != longest);
}

/* ---- Run columns, written while measuring ---- */

/* A run column's varints differ in length more often than not, so a
 * response with runs is not measured value by value and written again:
 * each batch's columns are written once while measuring, then copied into
 * the response. */

/* Columns `first`..width-1 of `count` (> 0) rows written into `arena`, one
 * after another, each column's size into sizes[c]; NULL when the arena
 * cannot grow. One pass over the rows finds each column's OR and AND:
 * a column of one value is written once and repeated, one of one length
 * a value at a time, others a word a value (write_run_column).
 * Inlined with a constant width and first column, so the loops unroll
 * and the pass runs on vector registers. */
static inline const uint8_t *write_run_columns(const uint64_t *rows,
                                               size_t count, unsigned width,
                                               unsigned first, size_t *sizes,
                                               reshard_arena *arena) {
  uint64_t any[RESHARD_RANGE_BATCH_COLUMNS] = {0};
  uint64_t all[RESHARD_RANGE_BATCH_COLUMNS];
  for (unsigned c = 0; c < RESHARD_RANGE_BATCH_COLUMNS; c++) {
    all[c] = UINT64_MAX;
  }
  const uint64_t *row = rows;
  for (size_t i = 0; i < count; i++, row += width) {
    for (unsigned c = first; c < width; c++) {
      any[c] |= row[c];
      all[c] &= row[c];
    }
  }
  /* Room for every value at its column's longest, and for put_mixed's
   * last word. */
  unsigned longest[RESHARD_RANGE_BATCH_COLUMNS];
  size_t room = sizeof(uint64_t);
  for (unsigned c = first; c < width; c++) {
    longest[c] = (unsigned)reshard_varint_length(any[c]);
    uint64_t column;
    if (!reshard_mul(count, longest[c], &column) || column > SIZE_MAX ||
        !add_size(&room, (size_t)column)) {
      return NULL;
    }
  }
  uint8_t *start = RESHARD_ARENA_ARRAY(arena, uint8_t, room);
  uint8_t *out = start;
  for (unsigned c = first; start != NULL && c < width; c++) {
    uint8_t *column = out;
    out = write_run_column(out, rows + c, count, width, any[c], all[c]);
    sizes[c] = (size_t)(out - column);
  }
  return start;
}

/* How many batches back a batch of runs is looked for among those it
 * repeats but for its part and region indices. */
enum { RENAMED_LOOKBACK = 4 };

/* Whether `count` runs at `a` and at `b` (RUN_WIDTH words each) agree in
 * columns `first`.. but the part and region indices (columns 1 and 3):
 * equal values are equal varints, so those columns' bytes are the same.
 * A run's words are compared all at once, the two indices masked out, so
 * the compare runs on vector registers; it stops at the first run that
 * differs. Inlined with a constant first column. */
static inline bool runs_renamed(const uint64_t *a, const uint64_t *b,
                                size_t count, unsigned first) {
  uint64_t compared[RUN_WIDTH];
  for (unsigned c = 0; c < RUN_WIDTH; c++) {
    compared[c] = c < first || c == 1 || c == 3 ? 0 : UINT64_MAX;
  }
  for (size_t i = 0; i < count; i++, a += RUN_WIDTH, b += RUN_WIDTH) {
    uint64_t differ = 0;
    for (unsigned c = 0; c < RUN_WIDTH; c++) {
      differ |= (a[c] ^ b[c]) & compared[c];
    }
    if (differ != 0) {
      return false;
    }
  }
  return true;
}

/* The batch of the last RENAMED_LOOKBACK before batch b (whose runs are
 * `rows`, `count` of them) whose runs agree with b's but for the part and
 * region indices, else b. A transfer's layers alike give such batches
 * (the planner writes them as the layer before renamed): one layer back
 * where a batch holds whole layers, as many batches back as a layer holds
 * where a layer holds whole batches. */
static size_t renamed_runs_batch(const reshard_range_batches *batches, size_t b,
                                 const uint64_t *rows, size_t count,
                                 unsigned first) {
  for (size_t back = 1; back <= RENAMED_LOOKBACK && back <= b; back++) {
    size_t like_count;
    unsigned width;
    const uint64_t *like = batch_rows(batches, b - back, &like_count, &width);
    if (like_count == count &&
        (first == 0 ? runs_renamed(like, rows, count, 0)
                    : runs_renamed(like, rows, count, 1))) {
      return b - back;
    }
  }
  return b;
}

/* The batch the planner named (reshard_runs.batch_like), taken without
 * comparing, else renamed_runs_batch's: the planner writes a transfer's
 * layers as layers before them renamed, and names a batch whose runs all
 * come from the same runs as an earlier batch's; comparing those run by
 * run was 60 % of encoding T1's and T2's runs and 17 % of T3's
 * (callgrind). */
static size_t like_runs_batch(const reshard_range_batches *batches, size_t b,
                              const uint64_t *rows, size_t count,
                              unsigned first) {
  const size_t *named = batches->runs->batch_like;
  if (named != NULL && named[b] < b) {
    size_t like_count;
    unsigned width;
    batch_rows(batches, named[b], &like_count, &width);
    if (like_count == count) {
      return named[b];
    }
  }
  return renamed_runs_batch(batches, b, rows, count, first);
}

/* write_run_columns for `count` (> 0) runs that agree with closed batch
 * `like`'s but for the part and region indices (renamed_runs_batch): those
 * two columns written, the others copied from `like`'s bytes. */
static const uint8_t *renamed_run_columns(const reshard_range_batches *batches,
                                          size_t like, const uint64_t *rows,
                                          size_t count, unsigned first,
                                          size_t *sizes, reshard_arena *arena) {
  const size_t *like_sizes =
      batches->column_bytes + like * RESHARD_RANGE_BATCH_COLUMNS;
  uint64_t any[4] = {0}, all[4] = {0};
  size_t room = sizeof(uint64_t);
  for (unsigned c = first; c < RUN_WIDTH; c++) {
    if (c != 1 && c != 3) {
      if (!add_size(&room, like_sizes[c])) {
        return NULL;
      }
      continue;
    }
    all[c] = UINT64_MAX;
    for (size_t i = 0; i < count; i++) {
      uint64_t value = rows[i * RUN_WIDTH + c];
      any[c] |= value;
      all[c] &= value;
    }
    uint64_t column;
    if (!reshard_mul(count, reshard_varint_length(any[c]), &column) ||
        column > SIZE_MAX || !add_size(&room, (size_t)column)) {
      return NULL;
    }
  }
  uint8_t *start = RESHARD_ARENA_ARRAY(arena, uint8_t, room);
  if (start == NULL) {
    return NULL;
  }
  const uint8_t *from = batches->run_columns[like];
  uint8_t *out = start;
  for (unsigned c = first; c < RUN_WIDTH; c++) {
    if (c == 1 || c == 3) {
      uint8_t *column = out;
      out = write_run_column(out, rows + c, count, RUN_WIDTH, any[c], all[c]);
      sizes[c] = (size_t)(out - column);
    } else {
      memcpy(out, from, like_sizes[c]);
      sizes[c] = like_sizes[c];
      out += like_sizes[c];
    }
    from += like_sizes[c];
  }
  return start;
}

/* Batch b's message body into body_bytes[b], from its column sizes:
 * source_index (TransferBatch), the columns (none when it has no entry)
 * and `bytes`, each with its tag and length. False when it would pass
 * SIZE_MAX. */
static bool measure_batch_body(reshard_range_batches *batches, size_t b) {
  size_t count;
  unsigned width;
  batch_rows(batches, b, &count, &width);
  size_t body = scalar_size(batches->batches[b].bytes);
  if (batches->sources != NULL) {
    body += scalar_size(batches->sources[b]);
  }
  const size_t *sizes = batches->column_bytes + b * RESHARD_RANGE_BATCH_COLUMNS;
  for (unsigned c = first_column(batches); count > 0 && c < width; c++) {
    if (!add_nested(&body, sizes[c])) {
      return false;
    }
  }
  batches->body_bytes[b] = body;
  return true;
}

/* Measures RangeBatches (`sources` NULL) or TransferBatches. */
static reshard_status
measure_batches(const reshard_copy *copies, const reshard_batch *batches,
                size_t batch_count, const reshard_runs *runs,
                const reshard_varint_batches *columns, const size_t *sources,
                reshard_arena *arena, reshard_range_batches *out) {
  *out = (reshard_range_batches){
      .copies = copies,
      .batches = batches,
      .batch_count = batch_count,
      .runs = runs,
      .columns = runs == NULL ? columns : NULL,
      .sources = sources,
  };
  /* The cell count is checked here, RESHARD_ARENA_NEW checks it times the
   * type's size. */
  if (batch_count >= SIZE_MAX / RESHARD_RANGE_BATCH_COLUMNS) {
    return RESHARD_RESOURCE_EXHAUSTED;
  }
  size_t cells = (batch_count + 1) * RESHARD_RANGE_BATCH_COLUMNS;
  out->column_bytes = RESHARD_ARENA_NEW(arena, size_t, cells);
  out->column_length = RESHARD_ARENA_NEW(arena, uint8_t, cells);
  out->body_bytes = RESHARD_ARENA_NEW(arena, size_t, batch_count + 1);
  if (runs != NULL) {
    out->run_columns =
        RESHARD_ARENA_NEW(arena, const uint8_t *, batch_count + 1);
  }
  if (out->column_bytes == NULL || out->column_length == NULL ||
      out->body_bytes == NULL || (runs != NULL && out->run_columns == NULL)) {
    return RESHARD_RESOURCE_EXHAUSTED;
  }
  unsigned first = first_column(out);
  for (size_t b = 0; b < batch_count; b++) {
    size_t count;
    unsigned width;
    const uint64_t *rows = batch_rows(out, b, &count, &width);
    size_t *sizes = out->column_bytes + b * RESHARD_RANGE_BATCH_COLUMNS;
    if (out->columns != NULL) {
      memcpy(sizes, out->columns->column_bytes + b * RESHARD_COPY_COLUMNS,
             RESHARD_COPY_COLUMNS * sizeof *sizes);
    } else if (out->run_columns != NULL) {
      size_t like = count > 0 ? like_runs_batch(out, b, rows, count, first) : b;
      if (like < b) {
        out->run_columns[b] =
            renamed_run_columns(out, like, rows, count, first, sizes, arena);
      } else if (count > 0) {
        out->run_columns[b] =
            first == 0
                ? write_run_columns(rows, count, RUN_WIDTH, 0, sizes, arena)
                : write_run_columns(rows, count, RUN_WIDTH, 1, sizes, arena);
      }
      if (count > 0 && out->run_columns[b] == NULL) {
        return RESHARD_RESOURCE_EXHAUSTED;
      }
    } else {
      uint64_t any[RESHARD_RANGE_BATCH_COLUMNS] = {0};
      if (first == 0) {
        measure_rows(rows, count, COPY_WIDTH, 0, sizes, any);
      } else {
        measure_rows(rows, count, COPY_WIDTH, 1, sizes, any);
      }
      /* Every value is as long as the longest exactly when the column's
       * size is count times that length (at most 10 * count: no wrap). */
      uint8_t *lengths = out->column_length + b * RESHARD_RANGE_BATCH_COLUMNS;
      for (unsigned c = first; c < width; c++) {
        size_t longest = reshard_varint_length(any[c]);
        lengths[c] = sizes[c] == count * longest ? (uint8_t)longest : 0;
      }
    }
    if (!measure_batch_body(out, b) ||
        !add_nested(&out->size, out->body_bytes[b])) {
      return RESHARD_RESOURCE_EXHAUSTED;
    }
  }
  return RESHARD_OK;
}

reshard_status reshard_range_batches_measure(
    const reshard_copy *copies, const reshard_batch *batches,
    size_t batch_count, const reshard_runs *runs,
    const reshard_varint_batches *columns, reshard_arena *arena,
    reshard_range_batches *out) {
  return measure_batches(copies, batches, batch_count, runs, columns, NULL,
                         arena, out);
}

/* Where the long column payloads of a response sent as pieces go: each
 * is a piece of its own, where it lies, between pieces of the frame that
 * holds every other byte. NULL: they are copied into the frame. */
typedef struct piece_sink {
  reshard_response_piece *pieces;
  size_t count;
  const uint8_t *frame_start; /* of the frame piece being written */
  size_t min_reference;
} piece_sink;

/* Ends the frame piece at `out`, if it has bytes. */
static void end_frame_piece(piece_sink *sink, const uint8_t *out) {
  if (out > sink->frame_start) {
    sink->pieces[sink->count++] = (reshard_response_piece){
        sink->frame_start, (size_t)(out - sink->frame_start)};
  }
  sink->frame_start = out;
}

/* The `length` column bytes at `bytes`, next in the response. */
static uint8_t *put_payload(uint8_t *out, const uint8_t *bytes, size_t length,
                            piece_sink *sink) {
  if (sink == NULL || length < sink->min_reference) {
    memcpy(out, bytes, length);
    return out + length;
  }
  end_frame_piece(sink, out);
  sink->pieces[sink->count++] = (reshard_response_piece){bytes, length};
  return out;
}

static uint8_t *write_batches(const reshard_range_batches *batches,
                              unsigned field, uint8_t *out, piece_sink *sink) {
  unsigned first = first_column(batches);
  for (size_t b = 0; b < batches->batch_count; b++) {
    size_t count;
    unsigned width;
    const uint64_t *rows = batch_rows(batches, b, &count, &width);
    const size_t *sizes =
        batches->column_bytes + b * RESHARD_RANGE_BATCH_COLUMNS;
    uint64_t bytes = batches->batches[b].bytes;
    out = put_tag(out, field, WIRE_LENGTH);
    out = reshard_varint_put(out, batches->body_bytes[b]);
    if (batches->sources != NULL) {
      out = put_scalar(out, 1, batches->sources[b]);
    }
    if (count == 0) {
      out = put_scalar(out, 7, bytes);
      continue;
    }
    /* Column by column, `bytes` (field 7) between the copy and the run
     * columns; a batch's rows stay in cache across its columns. Varint
     * columns a TransferBatch leaves out are skipped. */
    const uint8_t *lengths =
        batches->column_length + b * RESHARD_RANGE_BATCH_COLUMNS;
    const uint8_t *encoded = NULL; /* run columns, one after another */
    const uint8_t *const *varint_columns = NULL;
    if (batches->run_columns != NULL) {
      /* Written by measure into its arena, which need not outlive the
       * send: copied. */
      encoded = batches->run_columns[b];
    } else if (batches->columns != NULL) {
      varint_columns = batches->columns->columns + b * RESHARD_COPY_COLUMNS;
    }
    for (unsigned c = first; c < width; c++) {
      if (c == COPY_WIDTH) {
        out = put_scalar(out, 7, bytes);
      }
      out = put_tag(out, column_field(c), WIRE_LENGTH);
      out = reshard_varint_put(out, sizes[c]);
      if (varint_columns != NULL) {
        out = put_payload(out, varint_columns[c], sizes[c], sink);
      } else if (encoded != NULL) {
        out = put_payload(out, encoded, sizes[c], NULL);
        encoded += sizes[c];
      } else {
        out = write_column(out, rows + c, count, width, lengths[c], false);
      }
    }
    if (width == COPY_WIDTH) {
      out = put_scalar(out, 7, bytes);
    }
  }
  return out;
}

uint8_t *reshard_range_batches_write(const reshard_range_batches *batches,
                                     unsigned field, uint8_t *out) {
  return write_batches(batches, field, out, NULL);
}

/* ---- PlanStats ---- */

size_t reshard_plan_stats_size(uint64_t operations, uint64_t bytes,
                               uint64_t copies_before_coalescing,
                               uint64_t runs) {
  return scalar_size(operations) + scalar_size(bytes) +
         scalar_size(copies_before_coalescing) + scalar_size(runs);
}

uint8_t *reshard_plan_stats_write(uint8_t *out, unsigned field,
                                  uint64_t operations, uint64_t bytes,
                                  uint64_t copies_before_coalescing,
                                  uint64_t runs) {
  out = put_tag(out, field, WIRE_LENGTH);
  out = reshard_varint_put(
      out, reshard_plan_stats_size(operations, bytes, copies_before_coalescing,
                                   runs));
  out = put_scalar(out, 1, operations);
  out = put_scalar(out, 2, bytes);
  out = put_scalar(out, 3, copies_before_coalescing);
  return put_scalar(out, 4, runs);
}

/* ---- What both responses share ---- */

/* A plan's batches, measured from what it carries: its runs when it has
 * them, else its varint columns when it has them, else its copies. */
static reshard_status
measure_plan_batches(const reshard_copy *copies, const reshard_batch *batches,
                     size_t batch_count, const reshard_runs *runs,
                     const reshard_varint_batches *columns,
                     reshard_arena *arena, reshard_range_batches *out) {
  return reshard_range_batches_measure(
      copies, batches, batch_count, runs->batch_first ? runs : NULL,
      columns->columns != NULL ? columns : NULL, arena, out);
}

/* Region ids: every binding region's, in order. */

static bool add_region_ids(size_t *size, const reshard_binding *binding) {
  for (size_t r = 0; r < binding->region_count; r++) {
    if (!add_string(size, binding->regions[r].region_id, 1)) {
      return false;
    }
  }
  return true;
}

static uint8_t *put_region_ids(uint8_t *out, unsigned field,
                               const reshard_binding *binding) {
  for (size_t r = 0; r < binding->region_count; r++) {
    out = put_string(out, field, binding->regions[r].region_id, 1);
  }
  return out;
}

/* ---- PlanLoadResponse ---- */

/* A PageSource is the page's key, then its source's manifest key and
 * layout id: the same bytes for every page of one source, and pages of
 * one writer come one source after another (S5: 256 pages, one source).
 * So the key's length is measured once per page and kept, the source's
 * two fields once per stretch of pages of one source, and the write
 * copies those fields from where it wrote them for the stretch's first
 * page. Measuring every string three times and writing each with a
 * put_string of its own had been 152 K of an S5 pooled call's 1.43 M
 * instructions; this leaves 65 K (callgrind, docs/performance.md, Round
 * 42). */

/* The source's two fields' bytes, checked. */
static bool source_fields_size(const reshard_wire_plan_names *names,
                               size_t source, size_t *size) {
  *size = 0;
  return add_string(size, names->manifest_keys[source], 0) &&
         add_string(size, names->sources[source].layout_id, 0);
}

/* Adds the PageSources to *size, keeping each key's length in
 * out->page_key_bytes (in `arena`). */
static bool add_pages(size_t *size, reshard_plan_response *out,
                      reshard_arena *arena) {
  const reshard_load_plan *plan = out->plan;
  const reshard_wire_plan_names *names = out->names;
  size_t pages = plan->hit_pages;
  out->page_key_bytes = RESHARD_ARENA_NEW(arena, size_t, pages + 1);
  if (out->page_key_bytes == NULL) {
    return false;
  }
  size_t source = SIZE_MAX, fields = 0;
  for (size_t p = 0; p < pages; p++) {
    size_t key_length = strlen(text(names->page_keys[p]));
    out->page_key_bytes[p] = key_length;
    if (plan->page_source[p] != source) {
      source = plan->page_source[p];
      if (!source_fields_size(names, source, &fields)) {
        return false;
      }
    }
    size_t body = 0;
    if ((key_length > 0 && !add_nested(&body, key_length)) ||
        !add_size(&body, fields) || !add_nested(size, body)) {
      return false;
    }
  }
  return true;
}

/* Writes the PageSources add_pages measured. */
static uint8_t *put_pages(const reshard_plan_response *response, uint8_t *out) {
  const reshard_load_plan *plan = response->plan;
  const reshard_wire_plan_names *names = response->names;
  size_t source = SIZE_MAX, fields = 0;
  const uint8_t *written = NULL; /* the source's fields, as last written */
  for (size_t p = 0; p < plan->hit_pages; p++) {
    if (plan->page_source[p] != source) {
      source = plan->page_source[p];
      (void)source_fields_size(names, source, &fields); /* measured */
      written = NULL;
    }
    size_t key_length = response->page_key_bytes[p];
    out = put_tag(out, 2, WIRE_LENGTH);
    out = reshard_varint_put(out, (key_length ? nested_size(key_length) : 0) +
                                      fields);
    out = put_text(out, 1, names->page_keys[p], key_length, 0);
    if (written != NULL) {
      memcpy(out, written, fields);
      out += fields;
      continue;
    }
    written = out;
    out = put_string(out, 2, names->manifest_keys[source], 0);
    out = put_string(out, 3, names->sources[source].layout_id, 0);
  }
  return out;
}

static size_t stats_body(const reshard_load_plan *plan) {
  return reshard_plan_stats_size(plan->operations, plan->bytes,
                                 plan->copies_before_coalescing,
                                 plan->runs.run_count);
}

reshard_status reshard_plan_response_measure(
    const reshard_load_plan *plan, const reshard_wire_plan_names *names,
    reshard_arena *arena, reshard_plan_response *out) {
  *out = (reshard_plan_response){.plan = plan, .names = names};
  reshard_status status =
      measure_plan_batches(plan->copies, plan->batches, plan->batch_count,
                           &plan->runs, &plan->columns, arena, &out->batches);
  if (status) {
    return status;
  }
  size_t size = scalar_size(clamp_u32(plan->hit_pages));
  if (!add_pages(&size, out, arena) || !add_region_ids(&size, names->binding) ||
      !add_size(&size, out->batches.size) ||
      !add_nested(&size, stats_body(plan)) ||
      !add_string(&size, names->placement_id, 0)) {
    return RESHARD_RESOURCE_EXHAUSTED;
  }
  out->size = size;
  return RESHARD_OK;
}

static size_t write_response(const reshard_plan_response *response,
                             uint8_t *out, piece_sink *sink) {
  const reshard_load_plan *plan = response->plan;
  const reshard_wire_plan_names *names = response->names;
  uint8_t *start = out;
  out = put_scalar(out, 1, clamp_u32(plan->hit_pages));
  out = put_pages(response, out);
  out = put_region_ids(out, 3, names->binding);
  out = write_batches(&response->batches, 4, out, sink);
  out = reshard_plan_stats_write(out, 5, plan->operations, plan->bytes,
                                 plan->copies_before_coalescing,
                                 plan->runs.run_count);
  out = put_string(out, 6, names->placement_id, 0);
  if (sink != NULL) {
    end_frame_piece(sink, out);
  }
  return (size_t)(out - start);
}

size_t reshard_plan_response_write(const reshard_plan_response *response,
                                   uint8_t *out) {
  return write_response(response, out, NULL);
}

void reshard_response_measure_pieces(const reshard_range_batches *batches,
                                     size_t size, size_t min_reference,
                                     size_t *frame_size, size_t *piece_room) {
  size_t frame = size, references = 0;
  for (size_t b = 0; batches->columns != NULL && b < batches->batch_count;
       b++) {
    const size_t *sizes =
        batches->column_bytes + b * RESHARD_RANGE_BATCH_COLUMNS;
    for (unsigned c = first_column(batches); c < RESHARD_COPY_COLUMNS; c++) {
      if (sizes[c] >= min_reference) {
        frame -= sizes[c];
        references++;
      }
    }
  }
  *frame_size = frame;
  /* A frame piece before each reference, and one after the last. */
  *piece_room = 2 * references + 1;
}

size_t reshard_plan_response_write_pieces(const void *response,
                                          size_t min_reference, uint8_t *frame,
                                          reshard_response_piece *pieces) {
  piece_sink sink = {pieces, 0, frame, min_reference};
  write_response(response, frame, &sink);
  return sink.count;
}

/* ---- PlanStoreResponse ---- */

reshard_status reshard_store_response_measure(const reshard_store_plan *plan,
                                              const reshard_binding *binding,
                                              const char *layout_id,
                                              reshard_arena *arena,
                                              reshard_store_response *out) {
  *out = (reshard_store_response){
      .plan = plan, .binding = binding, .layout_id = layout_id};
  reshard_status status =
      measure_plan_batches(plan->copies, plan->batches, plan->batch_count,
                           &plan->runs, &plan->columns, arena, &out->batches);
  if (status) {
    return status;
  }
  /* At most 5 bytes per index in memory: the sum cannot wrap. */
  for (size_t i = 0; i < plan->part_count; i++) {
    out->parts_size += reshard_varint_length(clamp_u32(plan->part_indexes[i]));
  }
  /* A packed repeated field is left out when empty. */
  size_t size = 0;
  if ((plan->part_count && !add_nested(&size, out->parts_size)) ||
      !add_region_ids(&size, binding) || !add_size(&size, out->batches.size) ||
      !add_nested(&size, reshard_plan_stats_size(plan->operations, plan->bytes,
                                                 plan->copies_before_coalescing,
                                                 plan->runs.run_count)) ||
      !add_string(&size, layout_id, 0)) {
    return RESHARD_RESOURCE_EXHAUSTED;
  }
  out->size = size;
  return RESHARD_OK;
}

static size_t write_store_response(const reshard_store_response *response,
                                   uint8_t *out, piece_sink *sink) {
  const reshard_store_plan *plan = response->plan;
  uint8_t *start = out;
  if (plan->part_count) {
    out = put_tag(out, 1, WIRE_LENGTH);
    out = reshard_varint_put(out, response->parts_size);
    for (size_t i = 0; i < plan->part_count; i++) {
      out = reshard_varint_put(out, clamp_u32(plan->part_indexes[i]));
    }
  }
  out = put_region_ids(out, 2, response->binding);
  out = write_batches(&response->batches, 3, out, sink);
  out = reshard_plan_stats_write(out, 4, plan->operations, plan->bytes,
                                 plan->copies_before_coalescing,
                                 plan->runs.run_count);
  out = put_string(out, 5, response->layout_id, 0);
  if (sink != NULL) {
    end_frame_piece(sink, out);
  }
  return (size_t)(out - start);
}

size_t reshard_store_response_write(const reshard_store_response *response,
                                    uint8_t *out) {
  return write_store_response(response, out, NULL);
}

size_t reshard_store_response_write_pieces(const void *response,
                                           size_t min_reference, uint8_t *frame,
                                           reshard_response_piece *pieces) {
  piece_sink sink = {pieces, 0, frame, min_reference};
  write_store_response(response, frame, &sink);
  return sink.count;
}

/* ---- PlanTransferResponse ---- */

/* A Region message body: region_id (1), address (2), nbytes (3). */
static bool add_region(size_t *size, const reshard_region *region) {
  size_t body = scalar_size(region->address) + scalar_size(region->nbytes);
  return add_string(&body, region->region_id, 0) && add_nested(size, body);
}

static size_t region_body(const reshard_region *region) {
  return string_size(region->region_id, 0) + scalar_size(region->address) +
         scalar_size(region->nbytes);
}

/* The pool source o of the plan reads. */
static const reshard_transfer_pool *
source_pool(const reshard_transfer_response *response, size_t o) {
  return &response->pools[response->plan->sources[o]];
}

/* A TransferSource body: participant_id (1), endpoint (2), memory_id (3),
 * every region of the pool (4), in its order. */
static bool add_source_body(size_t *body, const reshard_transfer_pool *source) {
  const reshard_pool *pool = source->pool;
  if (!add_string(body, pool->participant_id, 0) ||
      !add_string(body, pool->endpoint, 0) ||
      !add_string(body, source->name, 0)) {
    return false;
  }
  for (size_t r = 0; r < pool->region_count; r++) {
    if (!add_region(body, &pool->regions[r])) {
      return false;
    }
  }
  return true;
}

static size_t transfer_stats_body(const reshard_transfer_plan *plan) {
  return reshard_plan_stats_size(plan->operations, plan->bytes,
                                 plan->copies_before_coalescing,
                                 plan->runs.run_count);
}

reshard_status reshard_transfer_response_measure(
    const reshard_transfer_plan *plan, const reshard_transfer_pool *pools,
    const reshard_binding *binding, const char *source_placement_id,
    const char *target_placement_id, const reshard_varint_batches *columns,
    reshard_arena *arena, reshard_transfer_response *out) {
  *out = (reshard_transfer_response){
      .plan = plan,
      .pools = pools,
      .binding = binding,
      .source_placement_id = source_placement_id,
      .target_placement_id = target_placement_id,
      .source_bytes = RESHARD_ARENA_NEW(arena, size_t, plan->source_count + 1),
  };
  if (out->source_bytes == NULL) {
    return RESHARD_RESOURCE_EXHAUSTED;
  }
  const reshard_runs *runs = plan->runs.batch_first ? &plan->runs : NULL;
  reshard_status status =
      measure_batches(plan->copies, plan->batches, plan->batch_count, runs,
                      columns, plan->batch_source, arena, &out->batches);
  if (status) {
    return status;
  }
  size_t size = 0;
  for (size_t o = 0; o < plan->source_count; o++) {
    if (!add_source_body(&out->source_bytes[o], source_pool(out, o)) ||
        !add_nested(&size, out->source_bytes[o])) {
      return RESHARD_RESOURCE_EXHAUSTED;
    }
  }
  if (!add_region_ids(&size, binding) || !add_size(&size, out->batches.size) ||
      !add_nested(&size, transfer_stats_body(plan)) ||
      !add_string(&size, source_placement_id, 0) ||
      !add_string(&size, target_placement_id, 0)) {
    return RESHARD_RESOURCE_EXHAUSTED;
  }
  out->size = size;
  return RESHARD_OK;
}

static size_t write_transfer_response(const reshard_transfer_response *response,
                                      uint8_t *out, piece_sink *sink) {
  const reshard_transfer_plan *plan = response->plan;
  uint8_t *start = out;
  for (size_t o = 0; o < plan->source_count; o++) {
    const reshard_transfer_pool *source = source_pool(response, o);
    const reshard_pool *pool = source->pool;
    out = put_tag(out, 1, WIRE_LENGTH);
    out = reshard_varint_put(out, response->source_bytes[o]);
    out = put_string(out, 1, pool->participant_id, 0);
    out = put_string(out, 2, pool->endpoint, 0);
    out = put_string(out, 3, source->name, 0);
    for (size_t r = 0; r < pool->region_count; r++) {
      const reshard_region *region = &pool->regions[r];
      out = put_tag(out, 4, WIRE_LENGTH);
      out = reshard_varint_put(out, region_body(region));
      out = put_string(out, 1, region->region_id, 0);
      out = put_scalar(out, 2, region->address);
      out = put_scalar(out, 3, region->nbytes);
    }
  }
  out = put_region_ids(out, 2, response->binding);
  out = write_batches(&response->batches, 3, out, sink);
  out = reshard_plan_stats_write(out, 4, plan->operations, plan->bytes,
                                 plan->copies_before_coalescing,
                                 plan->runs.run_count);
  out = put_string(out, 5, response->source_placement_id, 0);
  out = put_string(out, 6, response->target_placement_id, 0);
  if (sink != NULL) {
    end_frame_piece(sink, out);
  }
  return (size_t)(out - start);
}

size_t
reshard_transfer_response_write(const reshard_transfer_response *response,
                                uint8_t *out) {
  return write_transfer_response(response, out, NULL);
}

size_t reshard_transfer_response_write_pieces(const void *response,
                                              size_t min_reference,
                                              uint8_t *frame,
                                              reshard_response_piece *pieces) {
  piece_sink sink = {pieces, 0, frame, min_reference};
  write_transfer_response(response, frame, &sink);
  return sink.count;
}
