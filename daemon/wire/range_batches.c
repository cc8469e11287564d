#include "wire/range_batches.h"

#include <stdbool.h>
#include <stddef.h>
#include <string.h>

#include "reshard/checked.h"
#include "wire/wire_writer.h"

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
        !reshard_wire_add_size(&room, (size_t)column)) {
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
      if (!reshard_wire_add_size(&room, like_sizes[c])) {
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
        column > SIZE_MAX || !reshard_wire_add_size(&room, (size_t)column)) {
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
  size_t body = reshard_wire_scalar_size(batches->batches[b].bytes);
  if (batches->sources != NULL) {
    body += reshard_wire_scalar_size(batches->sources[b]);
  }
  const size_t *sizes = batches->column_bytes + b * RESHARD_RANGE_BATCH_COLUMNS;
  for (unsigned c = first_column(batches); count > 0 && c < width; c++) {
    if (!reshard_wire_add_nested(&body, sizes[c])) {
      return false;
    }
  }
  batches->body_bytes[b] = body;
  return true;
}

reshard_status reshard_range_batches_measure(
    const reshard_copy *copies, const reshard_batch *batches,
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
        !reshard_wire_add_nested(&out->size, out->body_bytes[b])) {
      return RESHARD_RESOURCE_EXHAUSTED;
    }
  }
  return RESHARD_OK;
}

void reshard_piece_sink_end(reshard_piece_sink *sink, const uint8_t *out) {
  if (out > sink->frame_start) {
    sink->pieces[sink->count++] = (reshard_response_piece){
        sink->frame_start, (size_t)(out - sink->frame_start)};
  }
  sink->frame_start = out;
}

/* The `length` column bytes at `bytes`, next in the response. */
static uint8_t *put_payload(uint8_t *out, const uint8_t *bytes, size_t length,
                            reshard_piece_sink *sink) {
  if (sink == NULL || length < sink->min_reference) {
    memcpy(out, bytes, length);
    return out + length;
  }
  reshard_piece_sink_end(sink, out);
  sink->pieces[sink->count++] = (reshard_response_piece){bytes, length};
  return out;
}

uint8_t *reshard_range_batches_write(const reshard_range_batches *batches,
                                     unsigned field, uint8_t *out,
                                     reshard_piece_sink *sink) {
  unsigned first = first_column(batches);
  for (size_t b = 0; b < batches->batch_count; b++) {
    size_t count;
    unsigned width;
    const uint64_t *rows = batch_rows(batches, b, &count, &width);
    const size_t *sizes =
        batches->column_bytes + b * RESHARD_RANGE_BATCH_COLUMNS;
    uint64_t bytes = batches->batches[b].bytes;
    out = reshard_wire_put_tag(out, field, RESHARD_WIRE_DELIMITED);
    out = reshard_varint_put(out, batches->body_bytes[b]);
    if (batches->sources != NULL) {
      out = reshard_wire_put_scalar(out, 1, batches->sources[b]);
    }
    if (count == 0) {
      out = reshard_wire_put_scalar(out, 7, bytes);
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
        out = reshard_wire_put_scalar(out, 7, bytes);
      }
      out = reshard_wire_put_tag(out, column_field(c), RESHARD_WIRE_DELIMITED);
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
      out = reshard_wire_put_scalar(out, 7, bytes);
    }
  }
  return out;
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

reshard_status reshard_response_pack_pieces(
    const reshard_range_batches *batches, size_t size, const void *response,
    reshard_response_pieces_fn *write, reshard_arena *frame_arena,
    reshard_arena *piece_arena, reshard_response_piece **pieces,
    size_t *count) {
  size_t frame_size, piece_room;
  reshard_response_measure_pieces(batches, size,
                                  RESHARD_RESPONSE_REFERENCE_MIN_BYTES,
                                  &frame_size, &piece_room);
  uint8_t *frame = RESHARD_ARENA_ARRAY(frame_arena, uint8_t, frame_size);
  *pieces =
      RESHARD_ARENA_ARRAY(piece_arena, reshard_response_piece, piece_room);
  if (frame == NULL || *pieces == NULL) {
    return RESHARD_RESOURCE_EXHAUSTED;
  }
  *count =
      write(response, RESHARD_RESPONSE_REFERENCE_MIN_BYTES, frame, *pieces);
  return RESHARD_OK;
}
