#include "wire/request_fields.h"

/* Field numbers (proto/reshard/v1/planner.proto). */
enum {
  POOL_MEMORY_ID = 1,
  POOL_BLOCK_IDS = 3,
  WRAPPER_VALUE = 1,
  LIMITS_FIELDS = 6,
};

bool reshard_request_texts_init(reshard_request_texts *texts, size_t bytes,
                                reshard_arena *arena) {
  texts->at = bytes != 0 ? reshard_arena_alloc(arena, bytes, 1) : NULL;
  return bytes == 0 || texts->at != NULL;
}

bool reshard_request_text_list(size_t count, reshard_arena *arena,
                               char ***list) {
  *list = count != 0 ? reshard_arena_array(arena, count, sizeof **list) : NULL;
  return count == 0 || *list != NULL;
}

bool reshard_request_id_list(size_t count, reshard_arena *arena,
                             uint32_t **list) {
  *list = count != 0 ? reshard_arena_array(arena, count, sizeof **list) : NULL;
  return count == 0 || *list != NULL;
}

bool reshard_request_count_ids(const reshard_request_field *f, size_t *count) {
  if (f->wire == RESHARD_WIRE_VARINT) {
    ++*count;
    return true;
  }
  const uint8_t *at = f->value.at, *end = f->value.end;
  if (f->wire != RESHARD_WIRE_DELIMITED || (at < end && (end[-1] & 0x80))) {
    return false;
  }
  /* Packed: the bytes that end a varint, eight at a time (a block table
   * is a few hundred of them on every call). */
  size_t n = 0;
  for (; end - at >= 8; at += 8) {
    uint64_t word;
    memcpy(&word, at, sizeof word);
    n += (size_t)__builtin_popcountll(~word & 0x8080808080808080ull);
  }
  for (; at < end; at++) {
    n += !(*at & 0x80);
  }
  *count += n;
  return true;
}

bool reshard_request_take_ids(const reshard_request_field *f, uint32_t **ids) {
  if (f->wire == RESHARD_WIRE_VARINT) {
    *(*ids)++ = (uint32_t)reshard_request_varint(f);
    return true;
  }
  /* Each read takes exactly one of the bytes counted. */
  reshard_wire_reader r = f->value;
  while (r.at < r.end) {
    uint64_t id;
    if (!reshard_wire_read_varint(&r, &id)) {
      return false;
    }
    *(*ids)++ = (uint32_t)id;
  }
  return true;
}

Google__Protobuf__UInt32Value *
reshard_request_dp_rank(reshard_wire_reader bytes, reshard_arena *arena) {
  Google__Protobuf__UInt32Value *rank =
      reshard_arena_alloc(arena, sizeof *rank, 16);
  if (rank == NULL) {
    return NULL;
  }
  google__protobuf__uint32_value__init(rank);
  while (bytes.at < bytes.end) {
    reshard_request_field f;
    if (!reshard_request_next_field(&bytes, &f) || f.number != WRAPPER_VALUE ||
        f.wire != RESHARD_WIRE_VARINT) {
      return NULL;
    }
    rank->value = (uint32_t)reshard_request_varint(&f);
  }
  return rank;
}

Reshard__V1__Limits *reshard_request_limits(reshard_wire_reader bytes,
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
  while (bytes.at < bytes.end) {
    reshard_request_field f;
    if (!reshard_request_next_field(&bytes, &f) || f.number > LIMITS_FIELDS ||
        f.wire != RESHARD_WIRE_VARINT) {
      return NULL;
    }
    *values[f.number - 1] = reshard_request_varint(&f);
  }
  return limits;
}

bool reshard_request_pooled_shape(reshard_wire_reader bytes, size_t *block_ids,
                                  size_t *text_bytes) {
  size_t count = 0;
  while (bytes.at < bytes.end) {
    reshard_request_field f;
    if (!reshard_request_next_field(&bytes, &f)) {
      return false;
    }
    if (f.number == POOL_MEMORY_ID && reshard_request_is_text(&f)) {
      *text_bytes += reshard_request_value_length(&f) + 1;
    } else if (f.number != POOL_BLOCK_IDS ||
               !reshard_request_count_ids(&f, &count)) {
      return false; /* an inline pool, or not ours */
    }
  }
  *block_ids = count;
  return true;
}

Reshard__V1__PooledMemory *reshard_request_pooled(reshard_wire_reader bytes,
                                                  size_t block_ids,
                                                  reshard_request_texts *texts,
                                                  reshard_arena *arena) {
  Reshard__V1__PooledMemory *pooled =
      reshard_arena_alloc(arena, sizeof *pooled, 16);
  uint32_t *ids;
  if (pooled == NULL || !reshard_request_id_list(block_ids, arena, &ids)) {
    return NULL;
  }
  reshard__v1__pooled_memory__init(pooled);
  pooled->n_block_ids = block_ids;
  pooled->block_ids = ids;
  while (bytes.at < bytes.end) {
    reshard_request_field f;
    if (!reshard_request_next_field(&bytes, &f)) {
      return NULL; /* reshard_request_pooled_shape read the same bytes */
    }
    if (f.number == POOL_MEMORY_ID) {
      pooled->pool_case = RESHARD__V1__POOLED_MEMORY__POOL_MEMORY_ID;
      pooled->memory_id = reshard_request_copy_text(texts, &f);
    } else if (!reshard_request_take_ids(&f, &ids)) {
      return NULL;
    }
  }
  return pooled;
}
