/* Encodes batches of copies as varint columns (see
 * reshard/varint_columns.h). */
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include "plan/plan_internal.h"
#include "reshard/arena.h"
#include "reshard/checked.h"

/* Bytes of the longest LEB128 varint of a uint64_t. */
enum { VARINT_MAX = 10 };

static reshard_status no_memory(reshard_error *err) {
  return reshard_error_set(err, RESHARD_RESOURCE_EXHAUSTED,
                           "plan: out of memory for varint columns");
}

static void open_batch(reshard__column_encoder *encoder) {
  for (unsigned c = 0; c < RESHARD_COPY_COLUMNS; c++) {
    encoder->cursor[c] = encoder->scratch + c * encoder->column_room;
  }
}

reshard_status reshard__column_encoder_init(reshard__column_encoder *encoder,
                                            size_t max_batch_copies,
                                            size_t max_batches,
                                            reshard_arena *arena,
                                            reshard_arena *bytes_arena,
                                            reshard_error *err) {
  uint64_t room, scratch_size;
  *encoder =
      (reshard__column_encoder){.arena = arena, .bytes_arena = bytes_arena};
  if (!reshard_mul(max_batch_copies, VARINT_MAX, &room) ||
      !reshard_mul(room, RESHARD_COPY_COLUMNS, &scratch_size) ||
      scratch_size > SIZE_MAX ||
      (encoder->scratch =
           RESHARD_ARENA_ARRAY(arena, uint8_t, (size_t)scratch_size)) == NULL ||
      (encoder->out.columns = RESHARD_ARENA_ARRAY(
           arena, const uint8_t *, (max_batches + 1) * RESHARD_COPY_COLUMNS)) ==
          NULL ||
      (encoder->out.column_bytes = RESHARD_ARENA_ARRAY(
           arena, size_t, (max_batches + 1) * RESHARD_COPY_COLUMNS)) == NULL) {
    return no_memory(err);
  }
  encoder->column_room = (size_t)room;
  open_batch(encoder);
  return RESHARD_OK;
}

/* The open batch's six column ends, in locals that the compiler keeps in
 * registers. Through an array on the stack instead, the ends were stored
 * one by one and reloaded as vectors, a store-forwarding stall on every
 * call, and the planner calls thousands of times per plan. */
typedef struct row_cursors {
  uint8_t *c0, *c1, *c2, *c3, *c4, *c5;
} row_cursors;

static inline row_cursors load_cursors(const reshard__column_encoder *e) {
  return (row_cursors){e->cursor[0], e->cursor[1], e->cursor[2],
                       e->cursor[3], e->cursor[4], e->cursor[5]};
}

static inline void store_cursors(reshard__column_encoder *e, row_cursors c) {
  e->cursor[0] = c.c0;
  e->cursor[1] = c.c1;
  e->cursor[2] = c.c2;
  e->cursor[3] = c.c3;
  e->cursor[4] = c.c4;
  e->cursor[5] = c.c5;
}

/* `value` as a LEB128 varint at `out`, without a branch per byte: below
 * 2^56 its 7-bit groups are spread into the bytes of one word in three
 * steps (28-bit halves into 32-bit lanes, 14 into 16, 7 into 8), every
 * byte but the last gets its continuation bit, and the word is stored
 * whole. The loop in reshard_varint_put leaves at a length that varies
 * copy to copy in the offset columns (S5's part and region offsets), and
 * its mispredicted exits were most of an encoded row. The store's bytes
 * past the varint land where the column's next values go: a column of a
 * batch holds VARINT_MAX bytes a row, so value i ends its store at most
 * VARINT_MAX * i + 8 bytes in, inside the room. */
static inline uint8_t *put_varint_word(uint8_t *out, uint64_t value) {
  if (value < 0x80) {
    *out = (uint8_t)value;
    return out + 1;
  }
  if (value >> 56 != 0) {
    return reshard_varint_put(out, value);
  }
  uint64_t x = value;
  x = (x & UINT64_C(0x000000000FFFFFFF)) |
      ((x & UINT64_C(0x00FFFFFFF0000000)) << 4);
  x = (x & UINT64_C(0x00003FFF00003FFF)) |
      ((x & UINT64_C(0x0FFFC0000FFFC000)) << 2);
  x = (x & UINT64_C(0x007F007F007F007F)) |
      ((x & UINT64_C(0x3F803F803F803F80)) << 1);
  size_t length = reshard_varint_length(value); /* 2..8 */
  x |= UINT64_C(0x8080808080808080) & ((UINT64_C(1) << (8 * (length - 1))) - 1);
  memcpy(out, &x, sizeof x);
  return out + length;
}

/* Rows written column by column (plain_rows) when there are at least this
 * many: fewer and finding the progressions costs more than it saves. */
enum { PROGRESSION_ROWS_MIN = 4 };

static void plain_rows(reshard__column_encoder *encoder, const char *base,
                       size_t pitch, size_t count);

/* Writes one copy's six fields at the ends of the six columns. */
static inline void put_row(row_cursors *c, const reshard_copy *copy) {
  c->c0 = put_varint_word(c->c0, copy->page_index);
  c->c1 = put_varint_word(c->c1, copy->part_index);
  c->c2 = put_varint_word(c->c2, copy->part_offset);
  c->c3 = put_varint_word(c->c3, copy->region_index);
  c->c4 = put_varint_word(c->c4, copy->region_offset);
  c->c5 = put_varint_word(c->c5, copy->nbytes);
}

void reshard__column_encoder_rows(reshard__column_encoder *encoder,
                                  const reshard_copy *copies, size_t count) {
  /* The planner drains after every stretch it batches, mostly with
   * nothing new to encode (the stretch went through the group encoder):
   * S5's pooled pages are 62 single-copy groups each, and reloading and
   * storing the six cursors for nothing was a quarter of that plan. */
  if (count == 0) {
    return;
  }
  if (count >= PROGRESSION_ROWS_MIN) {
    /* Column by column, still while the copies are in cache. */
    plain_rows(encoder, (const char *)copies, sizeof *copies, count);
    return;
  }
  /* Row by row into the open batch's six scratch columns: each copy is
   * read once, right after the batcher wrote it. */
  row_cursors cursors = load_cursors(encoder);
  for (size_t i = 0; i < count; i++) {
    put_row(&cursors, &copies[i]);
  }
  store_cursors(encoder, cursors);
  encoder->rows += count;
}

/* Field `field` of a copy, in reshard_copy's declaration order. */
static uint64_t copy_field(const reshard_copy *copy, size_t field) {
  switch (field) {
  case 0:
    return copy->page_index;
  case 1:
    return copy->part_index;
  case 2:
    return copy->part_offset;
  case 3:
    return copy->region_index;
  case 4:
    return copy->region_offset;
  default:
    return copy->nbytes;
  }
}

/* Rows of at most a word that do not tile one, repeated in fewer bytes
 * than this, are written a word at a time; longer ones by doubling
 * memcpy, whose wide stores pay for its calls. */
enum { REPEAT_WORDS_MAX = 512 };

/* Fills `total` bytes from `out` with the `row_bytes`-byte row written at
 * its start, repeated. A row of at most 8 bytes is tiled into a word (its
 * first 8 bytes, the row repeating), stored every `step` bytes, the
 * largest multiple of the row that fits a word, so that each store starts
 * a row and overwrites what the last one spilled with the same bytes:
 * S5's pages repeat a 3-byte value 62 times, once a page in every column
 * that holds one value, and a memcpy call per doubling cost more than the
 * bytes. */
static uint8_t *repeat_row(uint8_t *out, size_t row_bytes, size_t total) {
  if (row_bytes == 1) {
    memset(out, out[0], total); /* a small index: one byte a copy */
    return out + total;
  }
  if (row_bytes <= sizeof(uint64_t) &&
      (sizeof(uint64_t) % row_bytes == 0 || total <= REPEAT_WORDS_MAX)) {
    static const uint8_t step_of[sizeof(uint64_t) + 1] = {0, 8, 8, 6, 8,
                                                          5, 6, 7, 8};
    size_t step = step_of[row_bytes];
    uint8_t tile[sizeof(uint64_t)];
    memcpy(tile, out, row_bytes);
    for (size_t at = row_bytes; at < sizeof tile; at++) {
      tile[at] = tile[at - row_bytes];
    }
    uint64_t word;
    memcpy(&word, tile, sizeof word);
    size_t done = 0;
    for (; done + sizeof word <= total; done += step) {
      memcpy(out + done, &word, sizeof word);
    }
    memcpy(out + done, &word, total - done);
    return out + total;
  }
  for (size_t done = row_bytes; done < total;) {
    size_t chunk = done < total - done ? done : total - done;
    memcpy(out + done, out, chunk);
    done += chunk;
  }
  return out + total;
}

/* Writes a column whose value depends on the sequence only: one row (a
 * value per sequence), then that row again for every later row. */
static uint8_t *repeated_column(uint8_t *out, const reshard_run *group,
                                size_t width, uint64_t rows, size_t field) {
  uint8_t *end = out;
  for (size_t s = 0; s < width; s++) {
    end = reshard_varint_put(end, copy_field(&group[s].first, field));
  }
  size_t row_bytes = (size_t)(end - out);
  return repeat_row(out, row_bytes, row_bytes * (size_t)rows);
}

/* Writes `rows` copies of `value` to a column. */
static uint8_t *repeated_value(uint8_t *out, uint64_t value, uint64_t rows) {
  if (rows == 0) {
    return out;
  }
  size_t length = (size_t)(reshard_varint_put(out, value) - out);
  return repeat_row(out, length, length * (size_t)rows);
}

/* The low 7 * length bits of `value` spread over `length` bytes, 7 to a
 * byte: a LEB128 varint's payload without its continuation bits. */
static inline uint64_t spread_7(uint64_t value, unsigned length) {
  uint64_t word = 0;
  for (unsigned b = 0; b < length; b++) {
    word |= ((value >> (7 * b)) & 0x7f) << (8 * b);
  }
  return word;
}

/* Writes first + k * stride for k < rows, each in exactly `length` bytes,
 * `pitch` bytes apart. Inlined with a constant length, the byte loop
 * unrolls into shifts and stores with no branch per value. `spill`: each
 * value is stored as one 8-byte word (length <= 8), whose bytes past
 * `length` land where the caller writes next. */
static inline void put_progression(uint8_t *out, uint64_t first,
                                   uint64_t stride, uint64_t rows, size_t pitch,
                                   unsigned length, bool spill) {
  if (spill) {
    /* Added in the encoded form, two operations a value: with the top bit
     * of every byte but the last set, a carry out of one byte's 7 payload
     * bits runs through that bit into the next byte, so adding the spread
     * stride gives the next value's payload; the top bits are set again
     * after each add. The last byte's top bit stays clear, ending the
     * varint: no carry reaches it, because every value of the progression
     * has `length` bytes (and so the stride fits in them too). */
    uint64_t continues = UINT64_C(0x8080808080808080) &
                         ((UINT64_C(1) << (8 * (length - 1))) - 1);
    uint64_t word = spread_7(first, length) | continues;
    uint64_t step = spread_7(stride, length);
    if (step == 0) {
      /* One value repeated (a page's index, a copy size): stores alone,
       * without the add and or that chain one value to the next. */
      for (uint64_t k = 0; k < rows; k++, out += pitch) {
        memcpy(out, &word, sizeof word);
      }
      return;
    }
    for (uint64_t k = 0; k < rows; k++, out += pitch) {
      memcpy(out, &word, sizeof word);
      word = (word + step) | continues;
    }
    return;
  }
  uint64_t value = first;
  for (uint64_t k = 0; k < rows; k++, value += stride, out += pitch) {
    for (unsigned b = 0; b + 1 < length; b++) {
      out[b] = (uint8_t)((value >> (7 * b)) | 0x80);
    }
    out[length - 1] = (uint8_t)(value >> (7 * (length - 1)));
  }
}

/* Field `field` (reshard_copy order) of row `i` of `count` copies laid
 * `pitch` bytes apart from `base`. */
static inline uint64_t row_field(const char *base, size_t pitch, size_t i,
                                 size_t field) {
  uint64_t value;
  memcpy(&value, base + i * pitch + field * sizeof(uint64_t), sizeof value);
  return value;
}

/* The largest value whose varint is `length` bytes long. */
static inline uint64_t varint_top(size_t length) {
  return length * 7 >= 64 ? UINT64_MAX : (UINT64_C(1) << (7 * length)) - 1;
}

/* Writes field `field` of `count` rows (copies `pitch` bytes apart from
 * `base`) as one column. Consecutive rows whose values form an arithmetic
 * progression of stride >= 0 and one varint length (S5's pages of single
 * whole-block copies: the page, part, size and region offset repeat, the
 * region index and part offset step by one layer) are written as
 * put_progression does, a few operations a value; the rest value by
 * value. Each stretch is scanned once and written once. */
static uint8_t *plain_column(uint8_t *out, const char *base, size_t pitch,
                             size_t count, size_t field) {
  for (size_t i = 0; i < count;) {
    uint64_t first = row_field(base, pitch, i, field);
    size_t length = reshard_varint_length(first);
    size_t end = i + 1;
    uint64_t stride = 0;
    if (end < count) {
      /* A stretch keeps the first value's length while its values stay
       * at or below `top`; strides are never negative, so bounding each
       * next value by it is the whole check, and nothing wraps. A stride
       * of 0 (S5's repeated page, size and region offset) needs no bound:
       * a loop of a load and a compare a row. */
      uint64_t top = varint_top(length);
      uint64_t next = row_field(base, pitch, end, field);
      if (next >= first && next <= top) {
        stride = next - first;
        end++;
        if (stride == 0) {
          while (end < count && row_field(base, pitch, end, field) == first) {
            end++;
          }
        } else {
          uint64_t last = next;
          while (end < count && last <= top - stride &&
                 row_field(base, pitch, end, field) == last + stride) {
            last += stride;
            end++;
          }
        }
      }
    }
    if (end - i >= PROGRESSION_ROWS_MIN && stride == 0) {
      out = repeated_value(out, first, end - i);
    } else if (end - i >= PROGRESSION_ROWS_MIN && length <= sizeof(uint64_t)) {
      put_progression(out, first, stride, end - i, length, (unsigned)length,
                      true);
      out += length * (end - i);
    } else {
      /* Too short to pay: value by value, and on past it while no three
       * values in a row step alike (scattered offsets: T3's and T4's
       * blocks), since looking for a stretch at every value costs several
       * times writing it. The window of three moves one load a value. Any
       * split gives the same bytes. */
      for (size_t k = i; k < end; k++) {
        out = put_varint_word(out, row_field(base, pitch, k, field));
      }
      if (end + 2 < count) {
        uint64_t a = row_field(base, pitch, end, field);
        uint64_t b = row_field(base, pitch, end + 1, field);
        for (; end + 2 < count; end++) {
          uint64_t c = row_field(base, pitch, end + 2, field);
          if (b >= a && c - b == b - a) {
            break;
          }
          out = put_varint_word(out, a);
          a = b;
          b = c;
        }
      }
    }
    i = end;
  }
  return out;
}

/* Writes `count` rows (copies `pitch` bytes apart from `base`) at the
 * ends of the open batch's six columns. Row by row, each row is six
 * varints of 20 operations or so; column by column, the progressions
 * that single copies form take a few. */
static void plain_rows(reshard__column_encoder *encoder, const char *base,
                       size_t pitch, size_t count) {
  for (size_t c = 0; c < RESHARD_COPY_COLUMNS; c++) {
    encoder->cursor[c] =
        plain_column(encoder->cursor[c], base, pitch, count, c);
  }
  encoder->rows += count;
}

/* Groups whose offsets take the fixed-length path: at most this wide (the
 * lengths live on the stack; S3's groups, the widest of SPEC §6, have 80), and
 * stretches of this many rows at least, below which working out each
 * sequence's length costs more than it saves. */
enum { FIXED_GROUP_MAX = 1024, FIXED_ROWS_MIN = 4 };

/* A sequence's stride in the Part, or in the region. */
static inline uint64_t sequence_stride(const reshard_run *sequence,
                                       bool region) {
  return region ? sequence->region_stride : sequence->part_stride;
}

/* Offset `k` of a sequence: its Part offset, or its region offset. */
static inline uint64_t sequence_offset(const reshard_run *sequence, uint64_t k,
                                       bool region) {
  uint64_t first =
      region ? sequence->first.region_offset : sequence->first.part_offset;
  return first + k * sequence_stride(sequence, region);
}

/* Writes rows [from, to) of an offset column value by value. */
static uint8_t *offset_rows(uint8_t *out, const reshard_run *group,
                            size_t width, uint64_t from, uint64_t to,
                            bool region) {
  for (uint64_t k = from; k < to; k++) {
    for (size_t s = 0; s < width; s++) {
      out = reshard_varint_put(out, sequence_offset(&group[s], k, region));
    }
  }
  return out;
}

/* Rows from `from` on, up to `to`, in which the sequence's offsets keep the
 * varint length they have at row `from`, which it stores in *length. Strides
 * are never negative, so that is up to the first row whose value reaches
 * the next length. */
static uint64_t same_length_until(const reshard_run *sequence, uint64_t from,
                                  uint64_t to, bool region, uint8_t *length) {
  uint64_t value = sequence_offset(sequence, from, region);
  size_t bytes = reshard_varint_length(value);
  *length = (uint8_t)bytes;
  /* The common case, and free of a division: the last row keeps it. */
  if (reshard_varint_length(sequence_offset(sequence, to - 1, region)) ==
      bytes) {
    return to;
  }
  /* The last row is longer, so the stride is positive and bytes < 10. The
   * first row at or past `limit` is ceil((limit - value) / stride) on, in
   * a form that cannot wrap and is at least one row, so stretches always
   * advance. */
  uint64_t stride = sequence_stride(sequence, region);
  uint64_t limit = (uint64_t)1 << (7 * bytes);
  return from + (limit - value - 1) / stride + 1;
}

/* fixed_rows for rows shorter than a word (at most 7 sequences): row by
 * row, every value stored as a whole word added in its encoded form, as
 * put_progression does. Each spill lands on values written after it, and
 * the last one's past the column's end but inside the batch's room: a
 * value at most VARINT_MAX bytes for each copy before it into the column
 * ends its 8-byte store before the room's VARINT_MAX bytes a copy do.
 * S2's groups are single sequences of 3- and 4-byte offsets: written byte
 * by byte they were half of its plan with columns. */
static uint8_t *narrow_rows(uint8_t *out, const reshard_run *group,
                            size_t width, uint64_t from, uint64_t to,
                            bool region, const uint8_t *lengths) {
  uint64_t word[sizeof(uint64_t)], step[sizeof(uint64_t)];
  uint64_t continues[sizeof(uint64_t)];
  for (size_t s = 0; s < width; s++) {
    continues[s] = UINT64_C(0x8080808080808080) &
                   ((UINT64_C(1) << (8 * (lengths[s] - 1))) - 1);
    word[s] = spread_7(sequence_offset(&group[s], from, region), lengths[s]) |
              continues[s];
    step[s] = spread_7(sequence_stride(&group[s], region), lengths[s]);
  }
  if (width == 1) {
    /* One sequence (S2's groups): its word stays in a register, where the
     * loop below reloads each sequence's from the array (40-50 us of S2's
     * 650 with columns). */
    for (uint64_t k = from; k < to; k++, out += lengths[0]) {
      memcpy(out, &word[0], sizeof word[0]);
      word[0] = (word[0] + step[0]) | continues[0];
    }
    return out;
  }
  for (uint64_t k = from; k < to; k++) {
    for (size_t s = 0; s < width; s++) {
      memcpy(out, &word[s], sizeof word[s]);
      out += lengths[s];
      word[s] = (word[s] + step[s]) | continues[s];
    }
  }
  return out;
}

/* Writes rows [from, to) of an offset column, in which every sequence s keeps
 * the varint length lengths[s]: each row is the same bytes long, so every
 * sequence is written down its own column of rows at a constant length. */
static uint8_t *fixed_rows(uint8_t *out, const reshard_run *group, size_t width,
                           uint64_t from, uint64_t to, bool region,
                           const uint8_t *lengths) {
  size_t row_bytes = 0;
  for (size_t s = 0; s < width; s++) {
    row_bytes += lengths[s];
  }
  if (row_bytes < sizeof(uint64_t)) {
    return narrow_rows(out, group, width, from, to, region, lengths);
  }
  /* A value's spill lands on later values of its row, written after it,
   * as long as the row has 8 bytes from the value's start; otherwise it
   * would reach the next row, whose earlier sequences are written, so
   * those values store their bytes exactly. */
  uint8_t *column = out;
  uint64_t rows = to - from;
  for (size_t s = 0; s < width; s++) {
    const reshard_run *sequence = &group[s];
    uint64_t first = sequence_offset(sequence, from, region);
    uint64_t stride = sequence_stride(sequence, region);
    bool spill = row_bytes - (size_t)(column - out) >= sizeof(uint64_t);
    switch (lengths[s]) {
    case 1:
      put_progression(column, first, stride, rows, row_bytes, 1, spill);
      break;
    case 2:
      put_progression(column, first, stride, rows, row_bytes, 2, spill);
      break;
    case 3:
      put_progression(column, first, stride, rows, row_bytes, 3, spill);
      break;
    case 4:
      put_progression(column, first, stride, rows, row_bytes, 4, spill);
      break;
    case 5:
      put_progression(column, first, stride, rows, row_bytes, 5, spill);
      break;
    default:
      put_progression(column, first, stride, rows, row_bytes, lengths[s],
                      spill && lengths[s] <= sizeof(uint64_t));
      break;
    }
    column += lengths[s];
  }
  return out + row_bytes * (size_t)rows;
}

/* Writes an offset column of a group (`region`: region offsets, else Part
 * offsets), copy k of each sequence in turn. The rows split into stretches
 * in which no sequence's offsets change varint length (a sequence that
 * crosses 2^7, 2^14, ... ends one): those take the fixed-length path, too
 * short ones go value by value. */
static uint8_t *offset_column(uint8_t *out, const reshard_run *group,
                              size_t width, uint64_t rows, bool region) {
  if (width > FIXED_GROUP_MAX || rows < FIXED_ROWS_MIN) {
    return offset_rows(out, group, width, 0, rows, region);
  }
  uint8_t lengths[FIXED_GROUP_MAX];
  for (uint64_t from = 0; from < rows;) {
    uint64_t to = rows;
    for (size_t s = 0; s < width; s++) {
      uint64_t until =
          same_length_until(&group[s], from, to, region, &lengths[s]);
      to = until < to ? until : to;
    }
    /* Each sequence keeps lengths[s] up to its own end, at or past `to`. */
    out = to - from >= FIXED_ROWS_MIN
              ? fixed_rows(out, group, width, from, to, region, lengths)
              : offset_rows(out, group, width, from, to, region);
    from = to;
  }
  return out;
}

/* Groups of at most this many copies are written copy by copy, as rows
 * are: column by column, a group costs six column walks (each repeated
 * column's row, each offset column's stretches and lengths) before its
 * first byte, which S5's groups, a single whole-block copy each, paid for
 * one copy. A group of one row is written this way at any width: its
 * columns repeat nothing. */
enum { SMALL_GROUP_COPIES = 8 };

/* Writes a group copy by copy (copy k of each sequence in turn). */
static void small_group(reshard__column_encoder *encoder,
                        const reshard_run *group, size_t width, uint64_t rows) {
  row_cursors cursors = load_cursors(encoder);
  for (uint64_t k = 0; k < rows; k++) {
    for (size_t s = 0; s < width; s++) {
      reshard_copy copy = reshard_run_copy(&group[s], k);
      put_row(&cursors, &copy);
    }
  }
  store_cursors(encoder, cursors);
  encoder->rows += (size_t)rows * width;
}

void reshard__column_encoder_group(reshard__column_encoder *encoder,
                                   const reshard_run *group, size_t width) {
  uint64_t rows = group->count;
  if (rows == 1 ||
      (rows <= SMALL_GROUP_COPIES && rows * width <= SMALL_GROUP_COPIES)) {
    small_group(encoder, group, width, rows);
    return;
  }
  /* Straight from the sequences, in source order (copy k of each in
   * turn), column by column: the page, part, region and size columns
   * repeat one row; only the two offsets are encoded per copy. */
  static const size_t repeated[] = {0, 1, 3, 5}; /* reshard_copy fields */
  for (size_t i = 0; i < sizeof repeated / sizeof repeated[0]; i++) {
    size_t c = repeated[i];
    encoder->cursor[c] =
        repeated_column(encoder->cursor[c], group, width, rows, c);
  }
  encoder->cursor[2] =
      offset_column(encoder->cursor[2], group, width, rows, false);
  encoder->cursor[4] =
      offset_column(encoder->cursor[4], group, width, rows, true);
  encoder->rows += (size_t)rows * width;
}

/* Closes the open batch, column c sizes[c] bytes (the batch's entry in
 * out.column_bytes) at from[c]: a `shared` column is a closed batch's
 * bytes and is pointed at; the others, written in the scratch, are
 * copied into one block of the bytes arena exactly as long as they are.
 * Opens the next batch. */
static reshard_status pack_batch(reshard__column_encoder *encoder,
                                 const uint8_t *const *from, const bool *shared,
                                 reshard_error *err) {
  size_t b = encoder->out.batch_count;
  const size_t *sizes = encoder->out.column_bytes + b * RESHARD_COPY_COLUMNS;
  const uint8_t **columns = encoder->out.columns + b * RESHARD_COPY_COLUMNS;
  size_t total = 0; /* at most the scratch's size: no wrap */
  for (unsigned c = 0; c < RESHARD_COPY_COLUMNS; c++) {
    total += shared[c] ? 0 : sizes[c];
  }
  uint8_t *bytes = RESHARD_ARENA_ARRAY(encoder->bytes_arena, uint8_t, total);
  if (bytes == NULL) {
    return no_memory(err);
  }
  for (unsigned c = 0; c < RESHARD_COPY_COLUMNS; c++) {
    if (shared[c]) {
      columns[c] = from[c];
    } else {
      memcpy(bytes, from[c], sizes[c]);
      columns[c] = bytes;
      bytes += sizes[c];
    }
  }
  encoder->out.batch_count = b + 1;
  /* The scratch is rewritten from its start: no page's bytes to reuse. */
  encoder->page_valid = false;
  open_batch(encoder);
  return RESHARD_OK;
}

reshard_status reshard__column_encoder_close(reshard__column_encoder *encoder,
                                             reshard_error *err) {
  size_t *sizes = encoder->out.column_bytes +
                  encoder->out.batch_count * RESHARD_COPY_COLUMNS;
  const uint8_t *from[RESHARD_COPY_COLUMNS];
  for (unsigned c = 0; c < RESHARD_COPY_COLUMNS; c++) {
    from[c] = encoder->scratch + c * encoder->column_room;
    sizes[c] = (size_t)(encoder->cursor[c] - from[c]);
  }
  static const bool none[RESHARD_COPY_COLUMNS] = {false};
  return pack_batch(encoder, from, none, err);
}

bool reshard__copies_renamed(const reshard_copy *a, const reshard_copy *b,
                             size_t count) {
  for (size_t i = 0; i < count; i++) {
    if (a[i].page_index != b[i].page_index ||
        a[i].part_offset != b[i].part_offset ||
        a[i].region_offset != b[i].region_offset ||
        a[i].nbytes != b[i].nbytes) {
      return false;
    }
  }
  return true;
}

/* reshard__column_encoder_renamed and _renamed_to: the part and region
 * index columns encoded from `copies`, or, without them, each one value
 * repeated (`indices`); the other columns copied from closed batch
 * `like`. */
static reshard_status renamed_batch(reshard__column_encoder *encoder,
                                    const reshard_copy *copies,
                                    const uint64_t indices[2], size_t count,
                                    size_t like, reshard_error *err) {
  /* Varints are canonical: equal values, equal bytes. So only the part
   * and region index columns are encoded (into the scratch); the others
   * are the closed batch's, shared: T2's plan renames 156 of its 160
   * batches, and copying their columns was a third of its planning
   * (docs/performance.md, Round 43). */
  static const bool shared[RESHARD_COPY_COLUMNS] = {true,  false, true,
                                                    false, true,  true};
  const size_t *like_sizes =
      encoder->out.column_bytes + like * RESHARD_COPY_COLUMNS;
  const uint8_t *const *like_columns =
      encoder->out.columns + like * RESHARD_COPY_COLUMNS;
  size_t *sizes = encoder->out.column_bytes +
                  encoder->out.batch_count * RESHARD_COPY_COLUMNS;
  const uint8_t *from[RESHARD_COPY_COLUMNS];
  for (unsigned c = 0; c < RESHARD_COPY_COLUMNS; c++) {
    if (!shared[c]) {
      uint8_t *start = encoder->scratch + c * encoder->column_room;
      uint8_t *end = copies != NULL
                         ? plain_column(start, (const char *)copies,
                                        sizeof *copies, count, c)
                         : repeated_value(start, indices[c == 3], count);
      sizes[c] = (size_t)(end - start);
      from[c] = start;
    } else {
      sizes[c] = like_sizes[c];
      from[c] = like_columns[c];
    }
  }
  encoder->rows += count;
  return pack_batch(encoder, from, shared, err);
}

reshard_status reshard__column_encoder_renamed(reshard__column_encoder *encoder,
                                               const reshard_copy *copies,
                                               size_t count, size_t like,
                                               reshard_error *err) {
  return renamed_batch(encoder, copies, NULL, count, like, err);
}

reshard_status reshard__column_encoder_renamed_to(
    reshard__column_encoder *encoder, size_t count, size_t like,
    uint64_t part_index, uint64_t region_index, reshard_error *err) {
  const uint64_t indices[2] = {part_index, region_index};
  return renamed_batch(encoder, NULL, indices, count, like, err);
}

/* The end of the stretch of `page`'s groups from group `g` (whose first
 * sequence is `first`) that are a single copy each: rows, consecutive in
 * its sequences. `g` when group g is not one. A page of as many groups
 * as sequences and as many copies as sequences is all such groups (S5's
 * pages: 62 whole blocks), known without walking them. */
static size_t single_stretch(const reshard__page_sequences *page, size_t g,
                             size_t first) {
  if (page->group_count == page->count && page->copies == page->count) {
    return page->group_count;
  }
  size_t end = g;
  while (end < page->group_count &&
         page->group_ends[end] - first == end - g + 1 &&
         page->sequences[page->group_ends[end] - 1].count == 1) {
    end++;
  }
  return end;
}

/* Writes the region offset column of a page's groups: what
 * reshard__column_encoder_page writes to column 4. */
static uint8_t *page_region_offsets(uint8_t *out,
                                    const reshard__page_sequences *page) {
  const reshard_run *sequences = page->sequences;
  const size_t *group_ends = page->group_ends;
  size_t group_count = page->group_count;
  size_t first = 0;
  for (size_t g = 0; g < group_count;) {
    size_t end = single_stretch(page, g, first);
    if (end > g) {
      out = plain_column(out, (const char *)&sequences[first].first,
                         sizeof(reshard_run), end - g, 4);
      first += end - g;
      g = end;
      continue;
    }
    size_t stop = group_ends[g];
    const reshard_run *group = sequences + first;
    size_t width = stop - first;
    uint64_t rows = group->count;
    if (rows == 1 ||
        (rows <= SMALL_GROUP_COPIES && rows * width <= SMALL_GROUP_COPIES)) {
      for (uint64_t k = 0; k < rows; k++) {
        for (size_t s = 0; s < width; s++) {
          out = put_varint_word(out, sequence_offset(&group[s], k, true));
        }
      }
    } else {
      out = offset_column(out, group, width, rows, true);
    }
    first = stop;
    g++;
  }
  return out;
}

void reshard__column_encoder_page(reshard__column_encoder *encoder,
                                  const reshard__page_sequences *page,
                                  uint64_t page_index) {
  const reshard_run *sequences = page->sequences;
  const size_t *group_ends = page->group_ends;
  size_t group_count = page->group_count;
  uint8_t *start[RESHARD_COPY_COLUMNS];
  memcpy(start, encoder->cursor, sizeof start);
  if (encoder->page_valid && page->shifted &&
      page->from_page == encoder->page_index &&
      page->copies == encoder->page_rows) {
    /* The page encoded last, in this batch, moved to another page index
     * and its region offsets moved: the same rows in the same order
     * (reshard__page_sequences.shifted), so its part, part offset,
     * region and size columns are the bytes written for it, still in the
     * open batch's scratch, and only the page and region offset columns
     * are written. */
    encoder->cursor[0] =
        repeated_value(encoder->cursor[0], page_index, page->copies);
    static const size_t same[] = {1, 2, 3, 5}; /* reshard_copy fields */
    for (size_t i = 0; i < sizeof same / sizeof same[0]; i++) {
      size_t c = same[i];
      size_t bytes = (size_t)(encoder->page_end[c] - encoder->page_start[c]);
      memcpy(encoder->cursor[c], encoder->page_start[c], bytes);
      encoder->cursor[c] += bytes;
    }
    encoder->cursor[4] = page_region_offsets(encoder->cursor[4], page);
    encoder->rows += (size_t)page->copies;
    encoder->template_pages++;
  } else {
    /* Groups of a single copy (S5's pages: 62 whole blocks, each its own
     * group) are written column by column, as rows are. */
    size_t first = 0;
    for (size_t g = 0; g < group_count;) {
      size_t end = single_stretch(page, g, first);
      if (end > g) {
        size_t rows = end - g;
        if (rows >= PROGRESSION_ROWS_MIN) {
          plain_rows(encoder, (const char *)&sequences[first].first,
                     sizeof(reshard_run), rows);
        } else {
          row_cursors cursors = load_cursors(encoder);
          for (size_t r = 0; r < rows; r++) {
            put_row(&cursors, &sequences[first + r].first);
          }
          store_cursors(encoder, cursors);
          encoder->rows += rows;
        }
        first += rows;
        g = end;
        continue;
      }
      size_t stop = group_ends[g];
      reshard__column_encoder_group(encoder, sequences + first, stop - first);
      first = stop;
      g++;
    }
  }
  memcpy(encoder->page_start, start, sizeof start);
  memcpy(encoder->page_end, encoder->cursor, sizeof start);
  encoder->page_index = page_index;
  encoder->page_rows = page->copies;
  encoder->page_valid = true;
}
