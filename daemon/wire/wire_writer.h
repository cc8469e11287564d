/* Writing protobuf wire bytes, the counterpart of wire_reader.h: the
 * response encoders (range_batches.c, plan_response.c,
 * transfer_response.c) measure a message's size field by field, then
 * write it into a buffer of exactly that size. Measuring adds up checked
 * sizes (false once a sum would pass SIZE_MAX), so a response too large
 * to build is refused rather than wrapped. Writing never checks room: the
 * caller measured it. Fields are proto3's: a zero scalar or an empty
 * string is left out, a repeated string is always written. Inline: these
 * are the encoders' innermost steps. */
#ifndef RESHARD_WIRE_WRITER_H
#define RESHARD_WIRE_WRITER_H

#include <assert.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include "reshard/binding.h"
#include "reshard/varint_columns.h"
#include "wire/wire_reader.h"

/* Field numbers here are below 16, so a tag is one byte. */
static inline uint8_t *reshard_wire_put_tag(uint8_t *out, unsigned field,
                                            unsigned wire_type) {
  assert(field >= 1 && field < 16);
  *out = (uint8_t)((field << 3) | wire_type);
  return out + 1;
}

static inline const char *reshard_wire_text(const char *value) {
  return value ? value : "";
}

/* proto3 leaves zero scalars and empty strings out; repeated strings are
 * always written. */
static inline size_t reshard_wire_scalar_size(uint64_t value) {
  return value ? 1 + reshard_varint_length(value) : 0;
}

static inline size_t reshard_wire_string_size(const char *value, int always) {
  size_t length = strlen(reshard_wire_text(value));
  return length || always ? 1 + reshard_varint_length(length) + length : 0;
}

static inline size_t reshard_wire_nested_size(size_t body) {
  return 1 + reshard_varint_length(body) + body;
}

/* Sizes added up while measuring, checked: false once the sum would pass
 * SIZE_MAX (the response could not be built; measure says so). */
static inline bool reshard_wire_add_size(size_t *sum, size_t more) {
  if (more > SIZE_MAX - *sum) {
    return false;
  }
  *sum += more;
  return true;
}

/* A length-delimited field of `body` bytes: a one-byte tag, at most ten
 * bytes of length, the body. */
static inline bool reshard_wire_add_nested(size_t *sum, size_t body) {
  return body <= SIZE_MAX - 11 &&
         reshard_wire_add_size(sum, reshard_wire_nested_size(body));
}

static inline bool reshard_wire_add_string(size_t *sum, const char *value,
                                           int always) {
  size_t length = strlen(reshard_wire_text(value));
  return (length == 0 && !always) || reshard_wire_add_nested(sum, length);
}

static inline uint8_t *reshard_wire_put_scalar(uint8_t *out, unsigned field,
                                               uint64_t value) {
  if (value == 0) {
    return out;
  }
  out = reshard_wire_put_tag(out, field, RESHARD_WIRE_VARINT);
  return reshard_varint_put(out, value);
}

/* A string field of `length` bytes at `value`; proto3 leaves an empty
 * one out unless `always`. */
static inline uint8_t *reshard_wire_put_text(uint8_t *out, unsigned field,
                                             const char *value, size_t length,
                                             int always) {
  if (length == 0 && !always) {
    return out;
  }
  out = reshard_wire_put_tag(out, field, RESHARD_WIRE_DELIMITED);
  out = reshard_varint_put(out, length);
  memcpy(out, reshard_wire_text(value), length);
  return out + length;
}

static inline uint8_t *reshard_wire_put_string(uint8_t *out, unsigned field,
                                               const char *value, int always) {
  return reshard_wire_put_text(out, field, value,
                               strlen(reshard_wire_text(value)), always);
}

static inline uint32_t reshard_wire_clamp_u32(uint64_t value) {
  return value > UINT32_MAX ? UINT32_MAX : (uint32_t)value;
}

/* Region ids: every binding region's, in order. */
static inline bool reshard_wire_add_region_ids(size_t *size,
                                               const reshard_binding *binding) {
  for (size_t r = 0; r < binding->region_count; r++) {
    if (!reshard_wire_add_string(size, binding->regions[r].region_id, 1)) {
      return false;
    }
  }
  return true;
}

static inline uint8_t *
reshard_wire_put_region_ids(uint8_t *out, unsigned field,
                            const reshard_binding *binding) {
  for (size_t r = 0; r < binding->region_count; r++) {
    out = reshard_wire_put_string(out, field, binding->regions[r].region_id, 1);
  }
  return out;
}

#endif
