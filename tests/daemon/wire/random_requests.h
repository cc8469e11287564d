/* For the direct decoders' tests (test_load_request.c,
 * test_transfer_request.c; request_fields.h): the nested messages the
 * engines' per-call requests share, written by hand (a pooled memory,
 * limits, a dp rank, and the scalars protobuf-c reads in its own way), and
 * the path the decoders are compared with. */
#ifndef RESHARD_TEST_RANDOM_REQUESTS_H
#define RESHARD_TEST_RANDOM_REQUESTS_H

#include <protobuf-c/protobuf-c.h>

#include "random_wire.h"
#include "reshard/arena.h"
#include "reshard/limits.h"
#include "wire/decode.h"

static void put_varint_field(wire *w, uint64_t field, uint64_t value) {
  put_tag(w, field, 0);
  put_varint(w, value);
}

/* A bool as a ten-byte varint whose last byte holds more than bit 63:
 * protobuf-c reads it as true, a uint64 would read 0. */
static void put_wide_true(wire *w, uint64_t field) {
  put_tag(w, field, 0);
  for (int i = 0; i < 9; i++) {
    put_byte(w, 0x80);
  }
  put_byte(w, 0x02);
}

/* A PooledMemory as field `field`: a memory id, block ids packed and not,
 * now and then an inline pool. */
static void put_pooled(wire *w, uint64_t field) {
  wire inner = {.length = 0};
  unsigned fields = (unsigned)below(8);
  for (unsigned f = 0; f < fields; f++) {
    switch (below(6)) {
    case 0:
      put_text(&inner, 1);
      break;
    case 1:
      put_varint_field(&inner, 3, random_value());
      break;
    case 2:
      if (below(16) == 0) {
        wire pool = {.length = 0}; /* an inline pool: not the direct path */
        put_text(&pool, 1);
        put_message(&inner, 2, &pool);
        break;
      }
      /* fall through */
    default: {
      wire packed = {.length = 0};
      unsigned ids = (unsigned)below(40);
      for (unsigned i = 0; i < ids; i++) {
        put_varint(&packed, random_value());
      }
      put_message(&inner, 3, &packed);
      break;
    }
    }
    put_noise(&inner, 3);
  }
  put_message(w, field, &inner);
}

/* A message of varint fields 1..`numbers` as field `field`: fewer than
 * `most` of them, any of them repeated, with noise between. */
static void put_varint_message(wire *w, uint64_t field, uint64_t numbers,
                               uint64_t most) {
  wire inner = {.length = 0};
  unsigned fields = (unsigned)below(most);
  for (unsigned f = 0; f < fields; f++) {
    put_varint_field(&inner, numbers > 1 ? 1 + below(numbers) : 1,
                     random_value());
    put_noise(&inner, numbers);
  }
  put_message(w, field, &inner);
}

/* A Limits (six uint64 fields) as field `field`. */
static void put_limits(wire *w, uint64_t field) {
  put_varint_message(w, field, 6, 8);
}

/* A UInt32Value as field `field`. */
static void put_dp_rank(wire *w, uint64_t field) {
  put_varint_message(w, field, 1, 3);
}

/* The request through the pre-scan and protobuf-c, as the daemon decodes
 * what the direct decoders decline; NULL where that path refuses it. */
static const void *through_protobuf_c(const ProtobufCMessageDescriptor *type,
                                      const uint8_t *data, size_t length,
                                      const reshard_limits *caps,
                                      reshard_arena *arena) {
  reshard_error err;
  return reshard_decode(type, data, length, reshard_decode_budget(length), caps,
                        arena, &err);
}

/* `message` as protobuf-c writes it, in `arena`. */
static uint8_t *protobuf_c_bytes(const ProtobufCMessage *message,
                                 reshard_arena *arena, size_t *length) {
  *length = protobuf_c_message_get_packed_size(message);
  uint8_t *bytes = reshard_arena_alloc(arena, *length + 1, 1);
  cr_assert_not_null(bytes);
  cr_assert_eq(protobuf_c_message_pack(message, bytes), *length);
  return bytes;
}

/* A direct decoder, and the comparison of what it and protobuf-c decode
 * (request_compare.h), behind one signature for every request type. */
typedef const void *direct_decoder(const uint8_t *data, size_t length,
                                   const reshard_limits *caps,
                                   reshard_arena *arena);
typedef bool requests_equal(const void *direct, const void *decoded, char *why,
                            size_t why_size);

/* 40 000 requests from `build`, every other one mutated, every fifth under
 * the `small` caps: wherever `decode` returns a request, the pre-scan and
 * protobuf-c return the same (`type`, compared by `equal`). Both outcomes
 * must be common, or the comparison proves little. */
static void assert_agree_with_protobuf_c(const ProtobufCMessageDescriptor *type,
                                         void (*build)(wire *),
                                         direct_decoder *decode,
                                         requests_equal *equal,
                                         const reshard_limits *small,
                                         reshard_arena *arena) {
  const reshard_limits *defaults = reshard_decode_caps();
  unsigned decoded = 0, declined = 0, capped = 0;
  for (unsigned round = 0; round < 40000; round++) {
    wire w;
    build(&w);
    if (round % 2 == 1) {
      mutate(&w);
    }
    const reshard_limits *caps = round % 5 == 0 ? small : defaults;
    const void *got = decode(w.data, w.length, caps, arena);
    if (got == NULL) {
      declined++;
    } else {
      const void *want =
          through_protobuf_c(type, w.data, w.length, caps, arena);
      cr_assert_not_null(want,
                         "round %u: decoded directly, refused by the "
                         "pre-scan or protobuf-c",
                         round);
      char why[256];
      cr_assert(equal(got, want, why, sizeof why), "round %u: %s", round, why);
      decoded++;
      capped += caps == small;
    }
    if (round % 64 == 63) {
      reshard_arena_destroy(arena);
      reshard_arena_init(arena, 0);
    }
  }
  cr_assert_gt(decoded, 8000, "%u decoded", decoded);
  cr_assert_gt(declined, 8000, "%u declined", declined);
  cr_assert_gt(capped, 500, "%u decoded under the small caps", capped);
}

#endif
