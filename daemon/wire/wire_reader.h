/* Reading protobuf wire bytes: varints, tags and field values, each
 * bounds-checked and each refused where protobuf-c refuses it (and field 0
 * wherever it is), so that a walk over a request here and protobuf-c's
 * decode of it agree on where every field is. The request pre-scan (decode.c),
 * the inline-target scan (inline_cache.c) and the binding decoder
 * (binding_decode.c) all read through these; they are inline because they are
 * the decoders' innermost loops. Nothing here allocates: a reader points into
 * the caller's bytes. */
#ifndef RESHARD_WIRE_READER_H
#define RESHARD_WIRE_READER_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

/* The bytes left to read: [at, end). */
typedef struct reshard_wire_reader {
  const uint8_t *at, *end;
} reshard_wire_reader;

enum {
  RESHARD_WIRE_VARINT = 0,
  RESHARD_WIRE_FIXED64 = 1,
  RESHARD_WIRE_DELIMITED = 2,
  RESHARD_WIRE_FIXED32 = 5,
  /* protobuf-c's bounds on the encoding of a tag, of a length and of any
   * other varint. */
  RESHARD_WIRE_TAG_BYTES_MAX = 5,
  RESHARD_WIRE_LENGTH_BYTES_MAX = 5,
  RESHARD_WIRE_VARINT_BYTES_MAX = 10,
};

/* Reads a varint of at most `max_bytes` bytes; false when it does not end
 * within them or within the bytes left (the reader then has not moved). */
static inline bool reshard_wire_read_varint_bytes(reshard_wire_reader *r,
                                                  unsigned max_bytes,
                                                  uint64_t *out) {
  /* Most tags, lengths and values of a request are one byte. */
  if (r->at < r->end && !(*r->at & 0x80)) {
    *out = *r->at++;
    return true;
  }
  uint64_t value = 0;
  unsigned limit = max_bytes;
  if ((size_t)(r->end - r->at) < limit) {
    limit = (unsigned)(r->end - r->at);
  }
  for (unsigned i = 0; i < limit; i++) {
    uint8_t byte = r->at[i];
    /* A tenth byte holds bit 63 only; protobuf-c drops the rest too. */
    value |= i < 9 ? (uint64_t)(byte & 0x7f) << (7 * i) : (uint64_t)byte << 63;
    if (!(byte & 0x80)) {
      r->at += i + 1;
      *out = value;
      return true;
    }
  }
  return false;
}

/* Reads a varint value (up to ten bytes). */
static inline bool reshard_wire_read_varint(reshard_wire_reader *r,
                                            uint64_t *out) {
  return reshard_wire_read_varint_bytes(r, RESHARD_WIRE_VARINT_BYTES_MAX, out);
}

/* Reads a field's tag: its number and wire type. Refuses a tag of more
 * than five bytes, and the group and reserved wire types (no reshard.v1
 * message has a group; protobuf-c refuses them). Refuses field 0 however it
 * is written: protobuf-c refuses it in a one-byte tag only and keeps a
 * longer one as an unknown field, but the number is invalid in protobuf, and
 * the request pre-scan refusing it spares each decoder the question. */
static inline bool reshard_wire_read_tag(reshard_wire_reader *r,
                                         uint64_t *field, unsigned *wire) {
  uint64_t tag;
  if (!reshard_wire_read_varint_bytes(r, RESHARD_WIRE_TAG_BYTES_MAX, &tag)) {
    return false;
  }
  *field = tag >> 3;
  *wire = (unsigned)(tag & 7);
  return *field != 0 &&
         (*wire == RESHARD_WIRE_VARINT || *wire == RESHARD_WIRE_FIXED64 ||
          *wire == RESHARD_WIRE_DELIMITED || *wire == RESHARD_WIRE_FIXED32);
}

/* Reads a length-delimited value into `value`, past it in `r`. */
static inline bool reshard_wire_read_delimited(reshard_wire_reader *r,
                                               reshard_wire_reader *value) {
  uint64_t length;
  if (!reshard_wire_read_varint_bytes(r, RESHARD_WIRE_LENGTH_BYTES_MAX,
                                      &length) ||
      length > (uint64_t)(r->end - r->at)) {
    return false;
  }
  value->at = r->at;
  value->end = r->at + length;
  r->at = value->end;
  return true;
}

/* Reads the value of a field of wire type `wire` (one read_tag accepted)
 * into `value`: a delimited value's bytes without their length, any other
 * value's bytes as they are. */
static inline bool reshard_wire_read_value(reshard_wire_reader *r,
                                           unsigned wire,
                                           reshard_wire_reader *value) {
  uint64_t ignored;
  size_t size;
  switch (wire) {
  case RESHARD_WIRE_DELIMITED:
    return reshard_wire_read_delimited(r, value);
  case RESHARD_WIRE_VARINT:
    value->at = r->at;
    if (!reshard_wire_read_varint(r, &ignored)) {
      return false;
    }
    value->end = r->at;
    return true;
  default:
    size = wire == RESHARD_WIRE_FIXED64 ? 8 : 4;
    if ((size_t)(r->end - r->at) < size) {
      return false;
    }
    value->at = r->at;
    value->end = r->at += size;
    return true;
  }
}

#endif
