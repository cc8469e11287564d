#include "wire/load_request.h"

#include <stdbool.h>
#include <string.h>

#include "wire/wire_reader.h"

/* Field numbers (proto/reshard/v1/planner.proto). */
enum {
  MODEL_DOMAIN = 1,
  PAGE_KEYS = 2,
  PLACEMENT_ID = 4,
  TARGET_DP_RANK = 5,
  LIMITS = 7,
  PREFERRED_LAYOUT_IDS = 8,
  OPERATION_ID = 9,
  RUNS = 10,
  POOLED = 11,
  POOL_MEMORY_ID = 1,
  POOL_BLOCK_IDS = 3,
  WRAPPER_VALUE = 1,
  LIMITS_FIELDS = 6,
};

typedef struct field {
  uint64_t number;
  unsigned wire;
  reshard_wire_reader value;
} field;

static inline bool next_field(reshard_wire_reader *r, field *f) {
  return reshard_wire_read_tag(r, &f->number, &f->wire) &&
         reshard_wire_read_value(r, f->wire, &f->value);
}

static bool is_text(const field *f) {
  return f->wire == RESHARD_WIRE_DELIMITED;
}

static size_t value_length(const field *f) {
  return (size_t)(f->value.end - f->value.at);
}

/* Every string of a request goes into one block, sized on the first walk:
 * one allocation, not one per string. */
typedef struct texts {
  char *at;
} texts;

static char *copy_text(texts *t, const field *f) {
  size_t length = value_length(f);
  char *text = t->at;
  memcpy(text, f->value.at, length);
  text[length] = '\0';
  t->at += length + 1;
  return text;
}

/* A varint field's value (read_value has checked it). */
static uint64_t varint(const field *f) {
  reshard_wire_reader r = f->value;
  uint64_t value = 0;
  reshard_wire_read_varint(&r, &value);
  return value;
}

/* protobuf-c reads a bool as set when any byte of its varint holds a value
 * bit, the tenth byte's high bits included, which a uint64 drops. */
static protobuf_c_boolean varint_bool(const field *f) {
  for (const uint8_t *at = f->value.at; at < f->value.end; at++) {
    if (*at & 0x7f) {
      return 1;
    }
  }
  return 0;
}

/* ---- The nested messages: each decoded from its one occurrence ---- */

static Google__Protobuf__UInt32Value *decode_dp_rank(reshard_wire_reader r,
                                                     reshard_arena *arena) {
  Google__Protobuf__UInt32Value *rank =
      reshard_arena_alloc(arena, sizeof *rank, 16);
  if (rank == NULL) {
    return NULL;
  }
  google__protobuf__uint32_value__init(rank);
  while (r.at < r.end) {
    field f;
    if (!next_field(&r, &f) || f.number != WRAPPER_VALUE ||
        f.wire != RESHARD_WIRE_VARINT) {
      return NULL;
    }
    rank->value = (uint32_t)varint(&f);
  }
  return rank;
}

static Reshard__V1__Limits *decode_limits(reshard_wire_reader r,
                                          reshard_arena *arena) {
  Reshard__V1__Limits *limits = reshard_arena_alloc(arena, sizeof *limits, 16);
  if (limits == NULL) {
    return NULL;
  }
  reshard__v1__limits__init(limits);
  uint64_t *values[LIMITS_FIELDS] = {
      &limits->max_operations,       &limits->max_bytes,
      &limits->max_batch_operations, &limits->max_batch_bytes,
      &limits->max_ranges,           &limits->max_validation_work};
  while (r.at < r.end) {
    field f;
    if (!next_field(&r, &f) || f.number > LIMITS_FIELDS ||
        f.wire != RESHARD_WIRE_VARINT) {
      return NULL;
    }
    *values[f.number - 1] = varint(&f);
  }
  return limits;
}

/* The varints in a packed run: the bytes that end one, eight at a time. */
static size_t count_varints(const uint8_t *at, const uint8_t *end) {
  size_t count = 0;
  for (; end - at >= 8; at += 8) {
    uint64_t word;
    memcpy(&word, at, sizeof word);
    count += (size_t)__builtin_popcountll(~word & 0x8080808080808080ull);
  }
  for (; at < end; at++) {
    count += !(*at & 0x80);
  }
  return count;
}

/* The first walk of a pool's bytes: it names its pool by id; counts its
 * block ids and adds its strings' bytes. */
static bool pooled_shape(reshard_wire_reader r, size_t *block_ids,
                         size_t *text_bytes) {
  size_t count = 0;
  while (r.at < r.end) {
    field f;
    if (!next_field(&r, &f)) {
      return false;
    }
    if (f.number == POOL_MEMORY_ID && is_text(&f)) {
      *text_bytes += value_length(&f) + 1;
    } else if (f.number == POOL_BLOCK_IDS && f.wire == RESHARD_WIRE_VARINT) {
      count++;
    } else if (f.number == POOL_BLOCK_IDS && f.wire == RESHARD_WIRE_DELIMITED) {
      /* protobuf-c refuses a packed run that ends inside a varint. */
      if (f.value.at < f.value.end && (f.value.end[-1] & 0x80)) {
        return false;
      }
      count += count_varints(f.value.at, f.value.end);
    } else {
      return false; /* an inline pool, or not ours */
    }
  }
  *block_ids = count;
  return true;
}

/* The second: the id and the `count` block ids pooled_shape counted. */
static Reshard__V1__PooledMemory *decode_pooled(reshard_wire_reader r,
                                                size_t count, texts *t,
                                                reshard_arena *arena) {
  Reshard__V1__PooledMemory *pooled =
      reshard_arena_alloc(arena, sizeof *pooled, 16);
  /* protobuf-c leaves an empty repeated field NULL; so does this. */
  uint32_t *ids =
      count != 0 ? reshard_arena_array(arena, count, sizeof *ids) : NULL;
  if (pooled == NULL || (count != 0 && ids == NULL)) {
    return NULL;
  }
  reshard__v1__pooled_memory__init(pooled);
  pooled->n_block_ids = count;
  pooled->block_ids = ids;
  size_t n = 0;
  while (r.at < r.end) {
    field f;
    if (!next_field(&r, &f)) {
      return NULL; /* pooled_shape has read the same bytes */
    }
    if (f.number == POOL_MEMORY_ID) {
      pooled->pool_case = RESHARD__V1__POOLED_MEMORY__POOL_MEMORY_ID;
      pooled->memory_id = copy_text(t, &f);
    } else if (f.wire == RESHARD_WIRE_VARINT) {
      ids[n++] = (uint32_t)varint(&f);
    } else {
      /* Each varint read takes one of the bytes counted; protobuf-c
       * refuses one longer than ten bytes, and so does the reader. */
      while (f.value.at < f.value.end) {
        uint64_t id;
        if (!reshard_wire_read_varint(&f.value, &id)) {
          return NULL;
        }
        ids[n++] = (uint32_t)id;
      }
    }
  }
  return pooled;
}

/* ---- The request ---- */

/* What the first walk found: the counts of the lists, the strings' bytes
 * and the one occurrence of each nested message. */
typedef struct shape {
  size_t page_keys, layout_ids, block_ids, text_bytes;
  reshard_wire_reader dp_rank, limits, pooled;
  bool has_dp_rank, has_limits, has_pooled;
} shape;

/* A nested message's one occurrence; false at a second (the pre-scan
 * refuses it) or at another wire type. */
static bool take_once(const field *f, reshard_wire_reader *span, bool *seen) {
  if (*seen || f->wire != RESHARD_WIRE_DELIMITED) {
    return false;
  }
  *seen = true;
  *span = f->value;
  return true;
}

/* A string field: its bytes and NUL go into the request's text block. */
static bool take_text(const field *f, shape *s) {
  s->text_bytes += value_length(f) + 1;
  return is_text(f);
}

static bool read_shape(const uint8_t *data, size_t length, shape *s) {
  memset(s, 0, sizeof *s);
  reshard_wire_reader r = {data, data + length};
  while (r.at < r.end) {
    field f;
    if (!next_field(&r, &f)) {
      return false;
    }
    bool ours;
    switch (f.number) {
    case PAGE_KEYS:
      s->page_keys++;
      ours = take_text(&f, s);
      break;
    case PREFERRED_LAYOUT_IDS:
      s->layout_ids++;
      ours = take_text(&f, s);
      break;
    case MODEL_DOMAIN:
    case PLACEMENT_ID:
    case OPERATION_ID:
      ours = take_text(&f, s);
      break;
    case RUNS:
      ours = f.wire == RESHARD_WIRE_VARINT;
      break;
    case TARGET_DP_RANK:
      ours = take_once(&f, &s->dp_rank, &s->has_dp_rank);
      break;
    case LIMITS:
      ours = take_once(&f, &s->limits, &s->has_limits);
      break;
    case POOLED:
      ours = take_once(&f, &s->pooled, &s->has_pooled) &&
             pooled_shape(f.value, &s->block_ids, &s->text_bytes);
      break;
    default:
      ours = false; /* the inline placement, the binding, or not ours */
      break;
    }
    if (!ours) {
      return false;
    }
  }
  return true;
}

static char **text_list(reshard_arena *arena, size_t count) {
  return count != 0 ? reshard_arena_array(arena, count, sizeof(char *)) : NULL;
}

Reshard__V1__PlanLoadRequest *
reshard_load_request_decode(const uint8_t *data, size_t length,
                            const reshard_limits *caps, reshard_arena *arena) {
  shape s;
  if (!read_shape(data, length, &s) || s.page_keys > caps->max_page_keys ||
      s.block_ids > caps->max_block_ids) {
    return NULL;
  }
  Reshard__V1__PlanLoadRequest *request =
      reshard_arena_alloc(arena, sizeof *request, 16);
  texts t = {s.text_bytes != 0 ? reshard_arena_alloc(arena, s.text_bytes, 1)
                               : NULL};
  if (request == NULL || (s.text_bytes != 0 && t.at == NULL)) {
    return NULL;
  }
  reshard__v1__plan_load_request__init(request);
  request->page_keys = text_list(arena, s.page_keys);
  request->preferred_layout_ids = text_list(arena, s.layout_ids);
  if ((s.page_keys != 0 && request->page_keys == NULL) ||
      (s.layout_ids != 0 && request->preferred_layout_ids == NULL) ||
      (s.has_dp_rank &&
       (request->target_dp_rank = decode_dp_rank(s.dp_rank, arena)) == NULL) ||
      (s.has_limits &&
       (request->limits = decode_limits(s.limits, arena)) == NULL) ||
      (s.has_pooled && (request->pooled = decode_pooled(s.pooled, s.block_ids,
                                                        &t, arena)) == NULL)) {
    return NULL;
  }
  reshard_wire_reader r = {data, data + length};
  while (r.at < r.end) {
    field f;
    if (!next_field(&r, &f)) {
      return NULL; /* read_shape has read the same bytes */
    }
    switch (f.number) {
    case MODEL_DOMAIN:
      request->model_domain = copy_text(&t, &f);
      break;
    case PAGE_KEYS:
      request->page_keys[request->n_page_keys++] = copy_text(&t, &f);
      break;
    case PLACEMENT_ID:
      request->target_case =
          RESHARD__V1__PLAN_LOAD_REQUEST__TARGET_PLACEMENT_ID;
      request->placement_id = copy_text(&t, &f);
      break;
    case PREFERRED_LAYOUT_IDS:
      request->preferred_layout_ids[request->n_preferred_layout_ids++] =
          copy_text(&t, &f);
      break;
    case OPERATION_ID:
      request->operation_id = copy_text(&t, &f);
      break;
    case RUNS:
      request->runs = varint_bool(&f);
      break;
    default:
      break; /* the nested messages, decoded above */
    }
  }
  return request;
}
