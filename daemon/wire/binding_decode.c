#include "wire/binding_decode.h"

#include <stdbool.h>
#include <stdio.h>
#include <string.h>

#include "cache/table.h"
#include "wire/wire.h"
#include "wire/wire_reader.h"

enum { PATH_SIZE = 160 };

/* RuntimeBinding's, Region's and BindingRange's field numbers
 * (proto/reshard/v1/planner.proto). */
enum {
  BINDING_PARTICIPANT_ID = 1,
  BINDING_ENDPOINT = 2,
  BINDING_REGIONS = 3,
  BINDING_RANGES = 4,
  REGION_ID = 1,
  REGION_ADDRESS = 2,
  REGION_NBYTES = 3,
  RANGE_LAYER = 1,
  RANGE_COMPONENT = 2,
  RANGE_TOKEN_START = 3,
  RANGE_TOKEN_COUNT = 4,
  RANGE_HEAD_START = 5,
  RANGE_HEAD_COUNT = 6,
  RANGE_REGION_ID = 7,
  RANGE_OFFSET = 8,
  RANGE_TOKEN_STRIDE = 9,
  RANGE_HEAD_STRIDE = 10,
};

/* A string field's bytes; `bytes` NULL when the field is absent. */
typedef struct text {
  const uint8_t *bytes;
  size_t length;
} text;

/* Skips the value of a field no one reads. */
static inline bool skip_value(reshard_wire_reader *r, unsigned wire) {
  reshard_wire_reader value;
  return reshard_wire_read_value(r, wire, &value);
}

/* A known field's value; false when it is malformed or of another wire
 * type than the field's (protobuf-c refuses both). */
static inline bool read_scalar(reshard_wire_reader *r, unsigned wire,
                               uint64_t *out) {
  return wire == RESHARD_WIRE_VARINT && reshard_wire_read_varint(r, out);
}

static inline bool read_text(reshard_wire_reader *r, unsigned wire, text *out) {
  reshard_wire_reader value;
  if (wire != RESHARD_WIRE_DELIMITED ||
      !reshard_wire_read_delimited(r, &value)) {
    return false;
  }
  out->bytes = value.at;
  out->length = (size_t)(value.end - value.at);
  return true;
}

typedef struct decoder {
  const char *path;
  const reshard_limits *caps;
  uint64_t left; /* of max_bytes */
  reshard_arena *arena;
  reshard_error *err;
  size_t length;         /* of the message, for errors */
  reshard_status status; /* of the first failed allocation */
} decoder;

static reshard_status malformed(decoder *d, const char *what, size_t index) {
  char where[PATH_SIZE];
  if (what == NULL) {
    snprintf(where, sizeof where, "%s", d->path);
  } else {
    snprintf(where, sizeof where, "%s.%s[%zu]", d->path, what, index);
  }
  return reshard_error_set(d->err, RESHARD_INVALID_ARGUMENT,
                           "%s: malformed RuntimeBinding message (%zu bytes)",
                           where, d->length);
}

static void *take(decoder *d, size_t bytes, size_t align) {
  if (bytes > d->left) {
    d->status =
        reshard_error_set(d->err, RESHARD_RESOURCE_EXHAUSTED,
                          "%s: decoding this RuntimeBinding (%zu bytes) would "
                          "take more than its budget",
                          d->path, d->length);
    return NULL;
  }
  void *memory = reshard_arena_alloc(d->arena, bytes > 0 ? bytes : 1, align);
  if (memory == NULL) {
    d->status =
        reshard_error_set(d->err, RESHARD_RESOURCE_EXHAUSTED,
                          "%s: out of memory decoding the binding", d->path);
    return NULL;
  }
  d->left -= bytes;
  return memory;
}

/* A NUL-terminated copy; "" for an absent or empty string. */
static const char *copy_text(decoder *d, text t) {
  if (t.length == 0) {
    return "";
  }
  char *copy = take(d, t.length + 1, 1);
  if (copy != NULL) {
    memcpy(copy, t.bytes, t.length);
    copy[t.length] = '\0';
  }
  return copy;
}

/* Region ids copied once each: a range names its region in every range
 * (S5's writer: 32 256 ranges over 63 regions, in any order), and
 * lib/model/binding.c finds a region by its id's address before hashing it.
 * Open addressing by the id's bytes, at most half full; grown from the
 * arena and charged to the budget like the rest of the binding. */
typedef struct id_slot {
  const char *id; /* NULL: free */
  size_t length;
  uint64_t hash;
} id_slot;

typedef struct id_table {
  id_slot *slots;
  size_t mask; /* capacity - 1; capacity 0 before the first id */
  size_t count;
} id_table;

enum { ID_TABLE_MIN = 64 };

static bool grow_ids(decoder *d, id_table *t) {
  size_t capacity = t->slots == NULL ? ID_TABLE_MIN : 2 * (t->mask + 1);
  id_slot *slots = take(d, capacity * sizeof *slots, 8);
  if (slots == NULL) {
    return false;
  }
  memset(slots, 0, capacity * sizeof *slots);
  for (size_t i = 0; t->slots != NULL && i <= t->mask; i++) {
    if (t->slots[i].id != NULL) {
      size_t j = t->slots[i].hash & (capacity - 1);
      while (slots[j].id != NULL) {
        j = (j + 1) & (capacity - 1);
      }
      slots[j] = t->slots[i];
    }
  }
  t->slots = slots;
  t->mask = capacity - 1;
  return true;
}

/* The one copy of id `s`, made on its first occurrence; "" when empty. */
static const char *intern_id(decoder *d, id_table *t, text s) {
  if (s.length == 0) {
    return "";
  }
  if ((t->slots == NULL || 2 * (t->count + 1) > t->mask + 1) &&
      !grow_ids(d, t)) {
    return NULL;
  }
  uint64_t hash = reshard_hash(s.bytes, s.length, 0);
  for (size_t i = hash & t->mask;; i = (i + 1) & t->mask) {
    id_slot *slot = &t->slots[i];
    if (slot->id == NULL) {
      const char *copy = copy_text(d, s);
      if (copy != NULL) {
        *slot = (id_slot){copy, s.length, hash};
        t->count++;
      }
      return copy;
    }
    if (slot->hash == hash && slot->length == s.length &&
        memcmp(slot->id, s.bytes, s.length) == 0) {
      return slot->id;
    }
  }
}

/* Whether two strings are equal. Region ids are short and compared once
 * per range: 8 bytes at a time here, where a call to memcmp cost more than
 * the compare. */
static inline bool same_text(text a, text b) {
  if (a.length != b.length) {
    return false;
  }
  if (a.length < sizeof(uint64_t)) {
    unsigned char differ = 0;
    for (size_t i = 0; i < a.length; i++) {
      differ |= a.bytes[i] ^ b.bytes[i];
    }
    return differ == 0;
  }
  uint64_t x, y;
  size_t at = 0;
  for (; at + sizeof x < a.length; at += sizeof x) {
    memcpy(&x, a.bytes + at, sizeof x);
    memcpy(&y, b.bytes + at, sizeof y);
    if (x != y) {
      return false;
    }
  }
  /* The last 8 bytes, overlapping the words before when the length is
   * not a multiple of 8. */
  memcpy(&x, a.bytes + a.length - sizeof x, sizeof x);
  memcpy(&y, b.bytes + b.length - sizeof y, sizeof y);
  return x == y;
}

static bool decode_region(reshard_wire_reader r, text *id,
                          reshard_region *out) {
  while (r.at < r.end) {
    uint64_t field;
    unsigned wire;
    if (!reshard_wire_read_tag(&r, &field, &wire)) {
      return false;
    }
    bool ok;
    switch (field) {
    case REGION_ID:
      ok = read_text(&r, wire, id);
      break;
    case REGION_ADDRESS:
      ok = read_scalar(&r, wire, &out->address);
      break;
    case REGION_NBYTES:
      ok = read_scalar(&r, wire, &out->nbytes);
      break;
    default:
      ok = skip_value(&r, wire);
      break;
    }
    if (!ok) {
      return false;
    }
  }
  return true;
}

/* Reads the value of field `field`, a varint, when its tag comes next;
 * leaves *value alone when another does. False only on bad bytes. Forced
 * inline at each of its nine uses: left to the compiler it became a call,
 * and a call per field cost S5's paged binding 15 % of its decode. */
__attribute__((always_inline)) static inline bool
next_varint(reshard_wire_reader *r, unsigned field, uint64_t *value) {
  if (r->at == r->end || *r->at != (uint8_t)(field << 3)) {
    return true;
  }
  r->at++;
  return reshard_wire_read_varint(r, value);
}

/* A range's fields as read, before they are narrowed into the binding
 * range: both in-order readers below fill one, and range_store is where
 * they meet the caller's types. The general loop checks each width
 * itself. */
typedef struct {
  uint64_t layer, kind, token_start, token_count, head_start, head_count;
  uint64_t offset, token_stride, head_stride;
  text id;
} range_fields;

__attribute__((always_inline)) static inline void
range_store(const range_fields *f, reshard_binding_range *out,
            int32_t *component, text *region) {
  out->global_layer_id = (uint32_t)f->layer;
  *component = (int32_t)(uint32_t)f->kind;
  out->token_start = f->token_start;
  out->token_count = f->token_count;
  out->head_start = (uint32_t)f->head_start;
  out->head_count = (uint32_t)f->head_count;
  out->offset_bytes = f->offset;
  out->token_stride_bytes = f->token_stride;
  out->head_stride_bytes = f->head_stride;
  *region = f->id;
}

/* One pass over a range whose fields come in field-number order, each at
 * most once and of its own wire type: what protobuf encoders write. Each
 * field is either next or absent, so the pass is a fixed sequence of tests
 * that predict well, and every value stays in a register. False for
 * anything else (another order, a repeated or unknown field, bad bytes),
 * which the general loop then decodes or refuses. */
static bool decode_range_in_order(reshard_wire_reader r,
                                  reshard_binding_range *out,
                                  int32_t *component, text *region) {
  range_fields f = {0};
  bool ok = next_varint(&r, RANGE_LAYER, &f.layer) &&
            next_varint(&r, RANGE_COMPONENT, &f.kind) &&
            next_varint(&r, RANGE_TOKEN_START, &f.token_start) &&
            next_varint(&r, RANGE_TOKEN_COUNT, &f.token_count) &&
            next_varint(&r, RANGE_HEAD_START, &f.head_start) &&
            next_varint(&r, RANGE_HEAD_COUNT, &f.head_count);
  if (ok && r.at < r.end &&
      *r.at == (RANGE_REGION_ID << 3 | RESHARD_WIRE_DELIMITED)) {
    r.at++;
    ok = read_text(&r, RESHARD_WIRE_DELIMITED, &f.id);
  }
  ok = ok && next_varint(&r, RANGE_OFFSET, &f.offset) &&
       next_varint(&r, RANGE_TOKEN_STRIDE, &f.token_stride) &&
       next_varint(&r, RANGE_HEAD_STRIDE, &f.head_stride) && r.at == r.end;
  if (!ok) {
    return false;
  }
  range_store(&f, out, component, region);
  return true;
}

/* The fast path below reads whole 8-byte words, little-endian; elsewhere
 * the byte-wise readers do all the work. */
#if defined(__BYTE_ORDER__) && __BYTE_ORDER__ == __ORDER_LITTLE_ENDIAN__
#define WORD_READS 1
#else
#define WORD_READS 0
#endif

#if WORD_READS
/* Bytes a word read may look at past the end of the range it decodes: a
 * range takes the word path only when the message holds that many more. */
enum { WORD_SLACK = sizeof(uint64_t) };

/* The varint at `b[*at]`, of at most 8 bytes, read as one word without a
 * branch on its length: the bytes after the first without a continuation
 * bit cleared, then the 7-bit groups packed in three steps. False for a
 * varint of 9 or 10 bytes, left to the bounded reader. The caller
 * guarantees 8 readable bytes from `b + *at`; a varint that ends past its
 * range leaves the caller's offset past the range's end, which its final
 * length check refuses. Read so for a field whose length changes from
 * range to range as the client lists them (a block's token start, one to
 * three bytes), where word_varint's branches mispredict once the ranges
 * come in another order than by token (S5 shuffled: 60 us a decode). */
__attribute__((always_inline)) static inline bool
word_varint_packed(const uint8_t *b, size_t *at, uint64_t *out) {
  uint64_t x;
  memcpy(&x, b + *at, sizeof x);
  uint64_t stops = ~x & 0x8080808080808080ull;
  if (stops == 0) {
    return false;
  }
  x &= stops ^ (stops - 1); /* the bytes up to the first stop */
  x = (x & 0x007f007f007f007full) | ((x & 0x7f007f007f007f00ull) >> 1);
  x = (x & 0x00003fff00003fffull) | ((x & 0x3fff00003fff0000ull) >> 2);
  x = (x & 0x000000000fffffffull) | ((x & 0x0fffffff00000000ull) >> 4);
  *at += ((unsigned)__builtin_ctzll(stops) + 1) >> 3;
  *out = x;
  return true;
}

/* word_varint_packed, but one to three bytes (S5's tags, counts, strides)
 * take a branch each, which predicts where a field's length is the same
 * in every range; four to eight (block offsets) are read as one word.
 * Against the bounded reader's loop (a limit, a shift and a bound test per
 * byte), S5's ranges decode in 15 ns instead of 18. */
__attribute__((always_inline)) static inline bool
word_varint(const uint8_t *b, size_t *at, uint64_t *out) {
  const uint8_t *p = b + *at;
  if (!(p[0] & 0x80)) {
    *out = p[0];
    *at += 1;
    return true;
  }
  if (!(p[1] & 0x80)) {
    *out = (uint64_t)(p[0] & 0x7f) | (uint64_t)p[1] << 7;
    *at += 2;
    return true;
  }
  if (!(p[2] & 0x80)) {
    *out = (uint64_t)(p[0] & 0x7f) | (uint64_t)(p[1] & 0x7f) << 7 |
           (uint64_t)p[2] << 14;
    *at += 3;
    return true;
  }
  return word_varint_packed(b, at, out);
}

/* Where a range's token start and offset values lie in its bytes, [at,
 * end) each; at 0 when the field was not written. */
typedef struct value_marks {
  size_t start_at, start_end, offset_at, offset_end;
} value_marks;

/* decode_range_in_order over the `n` bytes at `b` with word reads: the
 * same fields in the same order, each at most once, one-byte tags, a
 * region id shorter than 128 bytes; false for anything else, which
 * decode_range_in_order then decodes. Needs WORD_SLACK readable bytes past
 * b + n. Each field is looked for at offset `at` only while at < n, so no
 * read starts past b + n; a value that ran past the range leaves at != n.
 * Notes in `marks` where the token start and offset lie. */
__attribute__((always_inline)) static inline bool
decode_range_words(const uint8_t *b, size_t n, reshard_binding_range *out,
                   int32_t *component, text *region, value_marks *marks) {
  range_fields f = {0};
  size_t at = 0;
  *marks = (value_marks){0, 0, 0, 0};
#define WORD_FIELD(number, value, read)                                        \
  if (at < n && b[at] == (uint8_t)((number) << 3)) {                           \
    at++;                                                                      \
    if (!read(b, &at, &(value))) {                                             \
      return false;                                                            \
    }                                                                          \
  }
  WORD_FIELD(RANGE_LAYER, f.layer, word_varint)
  WORD_FIELD(RANGE_COMPONENT, f.kind, word_varint)
  /* Its length follows the block, not the field. */
  size_t start_tag = at;
  WORD_FIELD(RANGE_TOKEN_START, f.token_start, word_varint_packed)
  if (at != start_tag) {
    marks->start_at = start_tag + 1;
    marks->start_end = at;
  }
  WORD_FIELD(RANGE_TOKEN_COUNT, f.token_count, word_varint)
  WORD_FIELD(RANGE_HEAD_START, f.head_start, word_varint)
  WORD_FIELD(RANGE_HEAD_COUNT, f.head_count, word_varint)
  if (at < n && b[at] == (RANGE_REGION_ID << 3 | RESHARD_WIRE_DELIMITED)) {
    size_t length = b[at + 1]; /* at + 1 <= n: within the slack */
    if (length & 0x80) {
      return false;
    }
    f.id = (text){b + at + 2, length};
    at += 2 + length;
  }
  size_t offset_tag = at;
  WORD_FIELD(RANGE_OFFSET, f.offset, word_varint)
  if (at != offset_tag) {
    marks->offset_at = offset_tag + 1;
    marks->offset_end = at;
  }
  WORD_FIELD(RANGE_TOKEN_STRIDE, f.token_stride, word_varint)
  WORD_FIELD(RANGE_HEAD_STRIDE, f.head_stride, word_varint)
#undef WORD_FIELD
  if (at != n) {
    return false;
  }
  range_store(&f, out, component, region);
  return true;
}

/* A stretch of a template's bytes, [at, at + length), as compared: its
 * whole words, and the mask of the bytes of the word after them that
 * belong to it (0 when none do), worked out once per template. */
typedef struct stretch {
  size_t at, length, words;
  uint64_t last_mask;
} stretch;

static inline stretch stretch_of(size_t at, size_t length) {
  size_t rest = length % sizeof(uint64_t);
  /* Little-endian: a word's first bytes are its low ones. */
  return (stretch){at, length, length / sizeof(uint64_t),
                   rest == 0 ? 0 : ~0ull >> 8 * (sizeof(uint64_t) - rest)};
}

/* Whether the stretch's bytes at `a` and `b` are equal, a word at a time.
 * Reads the word past the whole ones even when no byte of it counts:
 * needs WORD_SLACK readable bytes past each, which the bytes of a range
 * that took the word path have. */
static inline bool same_stretch(const uint8_t *a, const uint8_t *b,
                                const stretch *s) {
  uint64_t x, y, differ = 0;
  size_t at = 0;
  for (size_t w = 0; w < s->words; w++, at += sizeof x) {
    memcpy(&x, a + at, sizeof x);
    memcpy(&y, b + at, sizeof y);
    differ |= x ^ y;
  }
  memcpy(&x, a + at, sizeof x);
  memcpy(&y, b + at, sizeof y);
  differ |= (x ^ y) & s->last_mask;
  return differ == 0;
}

/* A range decoded by words with both its token start and its offset
 * written, kept as the shape of those after it: a paged reader's blocks
 * of one layer encode byte for byte alike but for those two values. Its
 * bytes before the token start's value, between the two values and after
 * the offset's, worked out when a range is first compared with it
 * (`stretched`): in ranges listed in another order than by layer, each
 * is kept in turn and the next, of another layer, is told apart by its
 * first two bytes (may_be_alike) before anything is worked out. */
typedef struct range_template {
  const uint8_t *bytes; /* in the message; NULL: none yet */
  size_t length;
  value_marks marks;
  const reshard_binding_range *range; /* decoded, its region id shared */
  bool stretched;
  stretch before, between, after;
} range_template;

/* Whether the range at `b` may be alike template `t`: it starts with the
 * template's first two bytes (the layer's tag and its value's first
 * byte). Then the template's stretches are worked out, once. */
static inline bool may_be_alike(range_template *t, const uint8_t *b) {
  uint16_t head, template_head;
  memcpy(&head, b, sizeof head);
  memcpy(&template_head, t->bytes, sizeof template_head);
  if (head != template_head) {
    return false;
  }
  if (!t->stretched) {
    const value_marks *m = &t->marks;
    t->before = stretch_of(0, m->start_at);
    t->between = stretch_of(m->start_end, m->offset_at - m->start_end);
    t->after = stretch_of(m->offset_end, t->length - m->offset_end);
    t->stretched = true;
  }
  return true;
}

/* The `n` bytes at `b` as template `t` with another token start and
 * offset: every other byte, the tags of those two included, equal to the
 * template's, so every other field decodes as it did there (the fields in
 * the same order, the same region id). False for anything else, which
 * decode_range_words then decodes. Needs WORD_SLACK readable bytes past
 * b + n, and past the template's bytes, which come before them. */
static bool decode_range_as(const range_template *t, const uint8_t *b, size_t n,
                            reshard_binding_range *out) {
  if (n < t->before.length || !same_stretch(b, t->bytes, &t->before)) {
    return false;
  }
  size_t at = t->before.length;
  uint64_t token_start, offset;
  /* Ranges alike come in order, so their token starts' lengths repeat
   * and word_varint's branches predict. */
  if (!word_varint(b, &at, &token_start) || at > n ||
      n - at < t->between.length ||
      !same_stretch(b + at, t->bytes + t->between.at, &t->between)) {
    return false;
  }
  at += t->between.length;
  if (!word_varint(b, &at, &offset) || at > n || n - at != t->after.length ||
      !same_stretch(b + at, t->bytes + t->after.at, &t->after)) {
    return false;
  }
  *out = *t->range;
  out->token_start = token_start;
  out->offset_bytes = offset;
  return true;
}

#endif

/* One BindingRange's fields in any order, a later occurrence replacing an
 * earlier one; `component` as protobuf-c keeps an enum. */
static bool decode_range(reshard_wire_reader r, reshard_binding_range *out,
                         int32_t *component, text *region) {
  if (decode_range_in_order(r, out, component, region)) {
    return true;
  }
  uint64_t value = 0;
  while (r.at < r.end) {
    uint64_t field;
    unsigned wire;
    if (!reshard_wire_read_tag(&r, &field, &wire)) {
      return false;
    }
    if (field == RANGE_REGION_ID) {
      if (!read_text(&r, wire, region)) {
        return false;
      }
      continue;
    }
    if (field > RANGE_HEAD_STRIDE) {
      if (!skip_value(&r, wire)) {
        return false;
      }
      continue;
    }
    if (!read_scalar(&r, wire, &value)) {
      return false;
    }
    switch (field) {
    case RANGE_LAYER:
      out->global_layer_id = (uint32_t)value;
      break;
    case RANGE_COMPONENT:
      *component = (int32_t)(uint32_t)value;
      break;
    case RANGE_TOKEN_START:
      out->token_start = value;
      break;
    case RANGE_TOKEN_COUNT:
      out->token_count = value;
      break;
    case RANGE_HEAD_START:
      out->head_start = (uint32_t)value;
      break;
    case RANGE_HEAD_COUNT:
      out->head_count = (uint32_t)value;
      break;
    case RANGE_OFFSET:
      out->offset_bytes = value;
      break;
    case RANGE_TOKEN_STRIDE:
      out->token_stride_bytes = value;
      break;
    default: /* RANGE_HEAD_STRIDE */
      out->head_stride_bytes = value;
      break;
    }
  }
  return true;
}

/* Region ids met lately, by a fingerprint of their bytes: a client that
 * lists its ranges in another order than by region (scripts/load.py's
 * paged readers, shuffled) names a different region in nearly every
 * range, and the id table's hash and compare cost S5 such a binding 130
 * instructions a range. A slot is one compare; a miss takes the table. */
enum { RECENT_ID_BITS = 7 };

typedef struct recent_id {
  text bytes;     /* in the message */
  const char *id; /* the shared copy; NULL: free */
} recent_id;

static inline size_t recent_slot(text s) {
  uint64_t x = 0;
  if (s.length >= sizeof x) {
    memcpy(&x, s.bytes + s.length - sizeof x, sizeof x);
  } else {
    for (size_t i = 0; i < s.length; i++) {
      x = x << 8 | s.bytes[i];
    }
  }
  return (size_t)(((x + s.length) * 0x9e3779b97f4a7c15ull) >>
                  (64 - RECENT_ID_BITS));
}

/* What the ranges decoded so far leave for the next: the region id of the
 * last one, the ids met lately, and the first bad component. */
typedef struct range_state {
  text last_region;
  const char *last_region_id;
  recent_id recent[1u << RECENT_ID_BITS];
  id_table ids;
  size_t bad_index; /* SIZE_MAX: none yet */
  int32_t bad_value;
  reshard_binding *out;
} range_state;

/* Completes the decoded range out->ranges[out->range_count]: its component
 * and its region id's shared copy. False when memory or the budget ran out
 * (d->status). */
static inline bool add_range(decoder *d, range_state *s,
                             reshard_binding_range *range, int32_t component,
                             text region) {
  if (component == RESHARD__V1__COMPONENT__KEY) {
    range->component = RESHARD_COMPONENT_KEY;
  } else if (component == RESHARD__V1__COMPONENT__VALUE) {
    range->component = RESHARD_COMPONENT_VALUE;
  } else {
    /* Reported once the whole message decoded, as the protobuf-c path
     * reports it. */
    range->component = (reshard_component)0;
    if (s->bad_index == SIZE_MAX) {
      s->bad_index = s->out->range_count;
      s->bad_value = component;
    }
  }
  /* Every range of a region shares one copy of its id; neighbours in one
   * region find it without a hash. */
  if (!same_text(region, s->last_region)) {
    recent_id *recent = &s->recent[recent_slot(region)];
    if (recent->id == NULL || !same_text(region, recent->bytes)) {
      if ((recent->id = intern_id(d, &s->ids, region)) == NULL) {
        return false;
      }
      recent->bytes = region;
    }
    s->last_region_id = recent->id;
    s->last_region = region;
  }
  range->region_id = s->last_region_id;
  return true;
}

static reshard_status over_cap(decoder *d, const char *field) {
  return reshard_error_set(d->err, RESHARD_RESOURCE_EXHAUSTED,
                           "RuntimeBinding.%s: more than %llu entries exceed "
                           "the limit max_ranges (--max-ranges)",
                           field, (unsigned long long)d->caps->max_ranges);
}

/* Counts the message's regions and ranges, for the arrays the decode fills.
 * Like the daemon's pre-scan (decode.h), which runs before protobuf-c, it
 * refuses the first element past the cap; it stops at the first framing
 * error, which the decode reports. */
static reshard_status count_elements(decoder *d, const uint8_t *data,
                                     size_t length, size_t *regions,
                                     size_t *ranges) {
  uint64_t cap = d->caps != NULL ? d->caps->max_ranges : UINT64_MAX;
  reshard_wire_reader r = {data, data + length};
  *regions = *ranges = 0;
  while (r.at < r.end) {
    /* A range with a one-byte length, as encoders write nearly all of
     * them: counted without the general reader. */
    size_t left = (size_t)(r.end - r.at);
    if (left >= 2 &&
        r.at[0] == (BINDING_RANGES << 3 | RESHARD_WIRE_DELIMITED) &&
        r.at[1] < 0x80 && 2 + (size_t)r.at[1] <= left) {
      if (++*ranges > cap) {
        return over_cap(d, "ranges");
      }
      r.at += 2 + (size_t)r.at[1];
      continue;
    }
    uint64_t field;
    unsigned wire;
    if (!reshard_wire_read_tag(&r, &field, &wire) || !skip_value(&r, wire)) {
      break;
    }
    /* Of any wire type, as the pre-scan counts them (the decode refuses
     * all but length-delimited ones). */
    if (field == BINDING_REGIONS && ++*regions > cap) {
      return over_cap(d, "regions");
    }
    if (field == BINDING_RANGES && ++*ranges > cap) {
      return over_cap(d, "ranges");
    }
  }
  return RESHARD_OK;
}

reshard_status reshard_binding_decode(const uint8_t *data, size_t length,
                                      const char *path,
                                      const reshard_limits *caps,
                                      uint64_t max_bytes, reshard_arena *arena,
                                      reshard_binding *out,
                                      reshard_error *err) {
  decoder d = {path, caps, max_bytes, arena, err, length, RESHARD_OK};
  memset(out, 0, sizeof *out);
  size_t region_room, range_room;
  reshard_status status =
      count_elements(&d, data, length, &region_room, &range_room);
  if (status != RESHARD_OK) {
    return status;
  }
  /* Both counts are bounded by the message's length, so these products
   * cannot overflow. */
  out->regions = take(&d, region_room * sizeof *out->regions, 8);
  out->ranges = out->regions != NULL
                    ? take(&d, range_room * sizeof *out->ranges, 8)
                    : NULL;
  if (out->ranges == NULL) {
    return d.status;
  }
  text participant = {NULL, 0}, endpoint = {NULL, 0};
  range_state ranges = {
      .last_region = {NULL, 0},
      .last_region_id = "",
      .ids = {NULL, 0, 0},
      .bad_index = SIZE_MAX,
      .bad_value = 0,
      .out = out,
  };
  reshard_wire_reader r = {data, data + length};
#if WORD_READS
  range_template shape = {.bytes = NULL};
#endif
  while (r.at < r.end) {
#if WORD_READS
    /* A range as encoders write it, with a one-byte length and the word
     * slack after it: decoded by word reads. Anything else, or a range
     * those refuse, takes the general path below (which decides). */
    size_t left = (size_t)(r.end - r.at);
    if (left >= 2 + WORD_SLACK &&
        r.at[0] == (BINDING_RANGES << 3 | RESHARD_WIRE_DELIMITED) &&
        r.at[1] < 0x80 && 2 + (size_t)r.at[1] + WORD_SLACK <= left &&
        out->range_count < range_room) {
      reshard_binding_range *range = &out->ranges[out->range_count];
      const uint8_t *bytes = r.at + 2;
      size_t n = r.at[1];
      int32_t component;
      text region;
      value_marks marks;
      if (shape.bytes != NULL && may_be_alike(&shape, bytes) &&
          decode_range_as(&shape, bytes, n, range)) {
        out->range_count++;
        r.at += 2 + n;
        continue;
      }
      if (decode_range_words(bytes, n, range, &component, &region, &marks)) {
        if (!add_range(&d, &ranges, range, component, region)) {
          return d.status;
        }
        /* Kept when both values were written and it names a component:
         * a bad one is reported at its first range alone. */
        if (marks.start_at != 0 && marks.offset_at != 0 &&
            range->component != 0) {
          shape.bytes = bytes;
          shape.length = n;
          shape.marks = marks;
          shape.range = range;
          shape.stretched = false;
        }
        out->range_count++;
        r.at += 2 + n;
        continue;
      }
    }
#endif
    uint64_t field;
    unsigned wire;
    if (!reshard_wire_read_tag(&r, &field, &wire)) {
      return malformed(&d, NULL, 0);
    }
    bool ok = true;
    reshard_wire_reader value;
    switch (field) {
    case BINDING_PARTICIPANT_ID:
      ok = read_text(&r, wire, &participant);
      break;
    case BINDING_ENDPOINT:
      ok = read_text(&r, wire, &endpoint);
      break;
    case BINDING_REGIONS: {
      size_t i = out->region_count;
      text id = {NULL, 0};
      /* Past the counted room only where counting stopped: a framing
       * error right here. */
      if (wire != RESHARD_WIRE_DELIMITED || i >= region_room ||
          !reshard_wire_read_delimited(&r, &value)) {
        return malformed(&d, "regions", i);
      }
      reshard_region *region = &out->regions[i];
      memset(region, 0, sizeof *region);
      if (!decode_region(value, &id, region)) {
        return malformed(&d, "regions", i);
      }
      if ((region->region_id = intern_id(&d, &ranges.ids, id)) == NULL) {
        return d.status;
      }
      out->region_count++;
      break;
    }
    case BINDING_RANGES: {
      size_t i = out->range_count;
      if (wire != RESHARD_WIRE_DELIMITED || i >= range_room ||
          !reshard_wire_read_delimited(&r, &value)) {
        return malformed(&d, "ranges", i);
      }
      reshard_binding_range *range = &out->ranges[i];
      memset(range, 0, sizeof *range);
      int32_t component = 0;
      text region = {NULL, 0};
      if (!decode_range(value, range, &component, &region)) {
        return malformed(&d, "ranges", i);
      }
      if (!add_range(&d, &ranges, range, component, region)) {
        return d.status;
      }
      out->range_count++;
      break;
    }
    default:
      ok = skip_value(&r, wire);
      break;
    }
    if (!ok) {
      return malformed(&d, NULL, 0);
    }
  }
  if (ranges.bad_index != SIZE_MAX) {
    reshard_component ignored;
    return reshard_wire_component_from_pb(ranges.bad_value, path,
                                          ranges.bad_index, &ignored, err);
  }
  if ((out->participant_id = copy_text(&d, participant)) == NULL ||
      (out->endpoint = copy_text(&d, endpoint)) == NULL) {
    return d.status;
  }
  return RESHARD_OK;
}
