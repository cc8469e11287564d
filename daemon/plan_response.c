#include "plan_response.h"

#include <stddef.h>
#include <string.h>

/* Wire types of the protobuf encoding. */
enum { WIRE_VARINT = 0, WIRE_LENGTH = 2 };

static size_t varint_size(uint64_t value) {
  /* 7 bits a byte; 0 still takes one byte. */
  unsigned bits = 64 - (unsigned)__builtin_clzll(value | 1);
  return (bits + 6) / 7;
}

static uint8_t *put_varint(uint8_t *out, uint64_t value) {
  while (value >= 0x80) {
    *out++ = (uint8_t)(value | 0x80);
    value >>= 7;
  }
  *out++ = (uint8_t)value;
  return out;
}

static uint8_t *put_tag(uint8_t *out, unsigned field, unsigned wire_type) {
  return put_varint(out, ((uint64_t)field << 3) | wire_type);
}

static const char *text(const char *value) {
  return value ? value : "";
}

/* proto3 leaves zero scalars and empty strings out; repeated strings are
 * always written. */
static size_t scalar_size(uint64_t value) {
  return value ? 1 + varint_size(value) : 0;
}

static size_t string_size(const char *value, int always) {
  size_t length = strlen(text(value));
  return length || always ? 1 + varint_size(length) + length : 0;
}

static size_t nested_size(size_t body) {
  return 1 + varint_size(body) + body;
}

static uint8_t *put_scalar(uint8_t *out, unsigned field, uint64_t value) {
  if (value == 0) {
    return out;
  }
  out = put_tag(out, field, WIRE_VARINT);
  return put_varint(out, value);
}

static uint8_t *put_string(uint8_t *out, unsigned field, const char *value,
                           int always) {
  size_t length = strlen(text(value));
  if (length == 0 && !always) {
    return out;
  }
  out = put_tag(out, field, WIRE_LENGTH);
  out = put_varint(out, length);
  memcpy(out, text(value), length);
  return out + length;
}

static uint32_t clamp_u32(uint64_t value) {
  return value > UINT32_MAX ? UINT32_MAX : (uint32_t)value;
}

static size_t page_body(const reshard_wire_plan_names *names, size_t source,
                        size_t page) {
  return string_size(names->page_keys[page], 0) +
         string_size(names->manifest_keys[source], 0) +
         string_size(names->sources[source].layout_id, 0);
}

/* RangeBatch fields 1..6 are the six uint64 fields of reshard_copy in
 * declaration order, so column c of a copy is its c-th field. */
_Static_assert(sizeof(reshard_copy) == 6 * sizeof(uint64_t) &&
                   offsetof(reshard_copy, page_index) == 0 &&
                   offsetof(reshard_copy, part_index) == 8 &&
                   offsetof(reshard_copy, part_offset) == 16 &&
                   offsetof(reshard_copy, region_index) == 24 &&
                   offsetof(reshard_copy, region_offset) == 32 &&
                   offsetof(reshard_copy, nbytes) == 40,
               "reshard_copy must mirror RangeBatch fields 1..6");

static uint64_t column(const reshard_copy *copy, unsigned c) {
  return ((const uint64_t *)copy)[c];
}

/* Payload bytes of each packed column of a batch. */
static void column_sizes(const reshard_copy *copies, size_t count,
                         size_t sizes[6]) {
  memset(sizes, 0, 6 * sizeof sizes[0]);
  for (size_t i = 0; i < count; i++) {
    for (unsigned c = 0; c < 6; c++) {
      sizes[c] += varint_size(column(&copies[i], c));
    }
  }
}

static size_t batch_body(const reshard_batch *batch, const size_t sizes[6]) {
  size_t body = scalar_size(batch->bytes);
  if (batch->count > 0) {
    for (unsigned c = 0; c < 6; c++) {
      body += nested_size(sizes[c]);
    }
  }
  return body;
}

static size_t stats_body(const reshard_load_plan *plan) {
  return scalar_size(plan->operations) + scalar_size(plan->bytes) +
         scalar_size(plan->copies_before_coalescing);
}

size_t reshard_plan_response_size(const reshard_load_plan *plan,
                                  const reshard_wire_plan_names *names) {
  size_t size = scalar_size(clamp_u32(plan->hit_pages));
  for (size_t p = 0; p < plan->hit_pages; p++) {
    size += nested_size(page_body(names, plan->page_source[p], p));
  }
  for (size_t r = 0; r < names->binding->region_count; r++) {
    size += string_size(names->binding->regions[r].region_id, 1);
  }
  for (size_t b = 0; b < plan->batch_count; b++) {
    const reshard_batch *batch = &plan->batches[b];
    size_t sizes[6];
    column_sizes(plan->copies + batch->first, batch->count, sizes);
    size += nested_size(batch_body(batch, sizes));
  }
  size += nested_size(stats_body(plan));
  size += string_size(names->placement_id, 0);
  return size;
}

size_t reshard_plan_response_write(const reshard_load_plan *plan,
                                   const reshard_wire_plan_names *names,
                                   uint8_t *out) {
  uint8_t *start = out;
  out = put_scalar(out, 1, clamp_u32(plan->hit_pages));
  for (size_t p = 0; p < plan->hit_pages; p++) {
    size_t source = plan->page_source[p];
    out = put_tag(out, 2, WIRE_LENGTH);
    out = put_varint(out, page_body(names, source, p));
    out = put_string(out, 1, names->page_keys[p], 0);
    out = put_string(out, 2, names->manifest_keys[source], 0);
    out = put_string(out, 3, names->sources[source].layout_id, 0);
  }
  for (size_t r = 0; r < names->binding->region_count; r++) {
    out = put_string(out, 3, names->binding->regions[r].region_id, 1);
  }
  for (size_t b = 0; b < plan->batch_count; b++) {
    const reshard_batch *batch = &plan->batches[b];
    const reshard_copy *copies = plan->copies + batch->first;
    size_t sizes[6];
    column_sizes(copies, batch->count, sizes);
    out = put_tag(out, 4, WIRE_LENGTH);
    out = put_varint(out, batch_body(batch, sizes));
    if (batch->count > 0) {
      for (unsigned c = 0; c < 6; c++) {
        out = put_tag(out, c + 1, WIRE_LENGTH);
        out = put_varint(out, sizes[c]);
        for (size_t i = 0; i < batch->count; i++) {
          out = put_varint(out, column(&copies[i], c));
        }
      }
    }
    out = put_scalar(out, 7, batch->bytes);
  }
  out = put_tag(out, 5, WIRE_LENGTH);
  out = put_varint(out, stats_body(plan));
  out = put_scalar(out, 1, plan->operations);
  out = put_scalar(out, 2, plan->bytes);
  out = put_scalar(out, 3, plan->copies_before_coalescing);
  out = put_string(out, 6, names->placement_id, 0);
  return (size_t)(out - start);
}
