/* Protobuf wire bytes written by hand for the decoders' tests
 * (test_binding_decode.c, test_load_request.c), so that they hold what
 * protobuf encoders never write but an attacker may: non-canonical
 * varints, repeated scalars, unknown fields of every wire type, known
 * fields of the wrong wire type, ten-byte varints into uint32 fields; and
 * then bytes flipped, cut and inserted (mutate). One random sequence per
 * test file, from a fixed seed. */
#ifndef RESHARD_TEST_RANDOM_WIRE_H
#define RESHARD_TEST_RANDOM_WIRE_H

#include <criterion/criterion.h>
#include <stdint.h>
#include <string.h>

typedef struct wire {
  uint8_t data[8192];
  size_t length;
} wire;

static uint64_t state = 0x9e3779b97f4a7c15ull;

static uint64_t next(void) {
  state ^= state << 13;
  state ^= state >> 7;
  state ^= state << 17;
  return state;
}

static uint64_t below(uint64_t n) {
  return next() % n;
}

static void put_byte(wire *w, uint8_t byte) {
  cr_assert_lt(w->length, sizeof w->data);
  w->data[w->length++] = byte;
}

/* `value` as a varint, now and then padded with continuation bytes (past
 * what either decoder accepts, at times). */
static void put_varint(wire *w, uint64_t value) {
  unsigned padding = below(128) == 0 ? 1 + (unsigned)below(5) : 0;
  while (value >= 0x80) {
    put_byte(w, (uint8_t)(value | 0x80));
    value >>= 7;
  }
  if (padding == 0) {
    put_byte(w, (uint8_t)value);
    return;
  }
  put_byte(w, (uint8_t)(value | 0x80));
  for (unsigned i = 1; i < padding; i++) {
    put_byte(w, 0x80);
  }
  put_byte(w, 0x00);
}

static void put_tag(wire *w, uint64_t field, unsigned type) {
  put_varint(w, field << 3 | type);
}

static uint64_t random_value(void) {
  switch (below(5)) {
  case 0:
    return below(3);
  case 1:
    return below(200);
  case 2:
    return below(1u << 20);
  case 3:
    return next() >> below(64); /* reaches past 32 bits: uint32 fields */
  default:
    return UINT64_MAX - below(3);
  }
}

static void put_text(wire *w, uint64_t field) {
  static const char *names[] = {"kv0", "kv1", "pool", "", "kv\0x", "\xff\xfe"};
  size_t which = below(6);
  size_t length = which == 4 ? 4 : strlen(names[which]);
  put_tag(w, field, 2);
  put_varint(w, length);
  for (size_t i = 0; i < length; i++) {
    put_byte(w, (uint8_t)names[which][i]);
  }
}

/* Once in a while: a field no one knows, or a known one of the wrong wire
 * type. */
static void put_noise(wire *w, uint64_t known_fields) {
  if (below(16) != 0) {
    return;
  }
  uint64_t field = below(24) == 0 ? 1 + below(known_fields) : 11 + below(3000);
  unsigned type = (unsigned[]){0, 1, 2, 5}[below(4)];
  put_tag(w, field, type);
  switch (type) {
  case 0:
    put_varint(w, random_value());
    break;
  case 1:
  case 5:
    for (unsigned i = 0; i < (type == 1 ? 8u : 4u); i++) {
      put_byte(w, (uint8_t)next());
    }
    break;
  default:
    put_varint(w, 2);
    put_byte(w, 0x08);
    put_byte(w, 0x01);
    break;
  }
}

/* A nested message: its bytes first, then the tag and length. */
static void put_message(wire *w, uint64_t field, const wire *inner) {
  put_tag(w, field, 2);
  put_varint(w, inner->length);
  cr_assert_leq(w->length + inner->length, sizeof w->data);
  memcpy(w->data + w->length, inner->data, inner->length);
  w->length += inner->length;
}

static void mutate(wire *w) {
  unsigned count = (unsigned)below(4);
  for (unsigned m = 0; m < count && w->length > 0; m++) {
    size_t at = below(w->length);
    switch (below(3)) {
    case 0:
      w->data[at] ^= (uint8_t)(1u << below(8));
      break;
    case 1:
      w->length = at;
      break;
    default:
      if (w->length < sizeof w->data) {
        memmove(w->data + at + 1, w->data + at, w->length - at);
        w->data[at] = (uint8_t)next();
        w->length++;
      }
      break;
    }
  }
}

#endif
