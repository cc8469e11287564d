/* Tests daemon/wire_reader.h: each read takes exactly the bytes protobuf-c
 * takes and refuses what protobuf-c refuses (and field 0 however it is
 * written), checked against protobuf-c's own decode of the same bytes at
 * every encoding-length boundary. */
#include <criterion/criterion.h>
#include <string.h>

#include "google/protobuf/wrappers.pb-c.h"
#include "wire/wire_reader.h"

/* Whether the reader walks `data` to its end as a sequence of fields. */
static bool reader_walks(const uint8_t *data, size_t length) {
  reshard_wire_reader r = {data, data + length};
  while (r.at < r.end) {
    uint64_t number;
    unsigned wire;
    reshard_wire_reader value;
    if (!reshard_wire_read_tag(&r, &number, &wire) ||
        !reshard_wire_read_value(&r, wire, &value)) {
      return false;
    }
  }
  return true;
}

/* Whether protobuf-c decodes `data` as a StringValue (field 1, a string),
 * which keeps every other field it meets as unknown. */
static bool protobuf_c_decodes(const uint8_t *data, size_t length) {
  Google__Protobuf__StringValue *message =
      google__protobuf__string_value__unpack(NULL, length, data);
  if (message == NULL) {
    return false;
  }
  google__protobuf__string_value__free_unpacked(message, NULL);
  return true;
}

typedef struct wire_case {
  const char *name;
  uint8_t bytes[16];
  size_t length;
  bool valid;
} wire_case;

/* Field number 0 is invalid in protobuf; protobuf-c refuses it in a one-byte
 * tag only and takes a longer one as an unknown field. The reader refuses
 * it however it is written. */
static bool field_0_in_a_long_tag(const wire_case *c) {
  return strcmp(c->name, "field 0 in a long tag") == 0;
}

static const wire_case CASES[] = {
    {"one-byte tag", {0x0a, 0x01, 'x'}, 3, true},
    {"five-byte tag", {0x8a, 0x80, 0x80, 0x80, 0x00, 0x01, 'x'}, 7, true},
    {"six-byte tag", {0x8a, 0x80, 0x80, 0x80, 0x80, 0x00, 0x01, 'x'}, 8, false},
    {"field 0", {0x02, 0x01, 'x'}, 3, false},
    {"field 0 in a long tag", {0x82, 0x00, 0x01, 'x'}, 4, false},
    {"five-byte length", {0x0a, 0x81, 0x80, 0x80, 0x80, 0x00, 'x'}, 7, true},
    {"six-byte length",
     {0x0a, 0x81, 0x80, 0x80, 0x80, 0x80, 0x00, 'x'},
     8,
     false},
    {"length past the end", {0x0a, 0x02, 'x'}, 3, false},
    {"ten-byte varint",
     {0x10, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0x01},
     11,
     true},
    {"eleven-byte varint",
     {0x10, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0x01},
     12,
     false},
    {"unterminated varint", {0x10, 0x80}, 2, false},
    {"fixed64", {0x11, 1, 2, 3, 4, 5, 6, 7, 8}, 9, true},
    {"short fixed64", {0x11, 1, 2, 3, 4, 5, 6, 7}, 8, false},
    {"fixed32", {0x15, 1, 2, 3, 4}, 5, true},
    {"short fixed32", {0x15, 1, 2, 3}, 4, false},
    {"start group", {0x13, 0x14}, 2, false},
    {"wire type 6", {0x16, 0x00}, 2, false},
    {"wire type 7", {0x17, 0x00}, 2, false},
};

Test(wire_reader, refuses_what_protobuf_c_refuses_and_field_0) {
  for (size_t i = 0; i < sizeof CASES / sizeof CASES[0]; i++) {
    const wire_case *c = &CASES[i];
    cr_assert_eq(protobuf_c_decodes(c->bytes, c->length),
                 c->valid || field_0_in_a_long_tag(c), "protobuf-c on %s",
                 c->name);
    cr_assert_eq(reader_walks(c->bytes, c->length), c->valid, "reader on %s",
                 c->name);
  }
}

Test(wire_reader, values_span_their_bytes) {
  /* field 1 "ab", field 2 varint 300, field 3 fixed32, field 4 fixed64 */
  static const uint8_t bytes[] = {0x0a, 0x02, 'a', 'b', 0x10, 0xac, 0x02,
                                  0x1d, 1,    2,   3,   4,    0x21, 1,
                                  2,    3,    4,   5,   6,    7,    8};
  static const struct {
    uint64_t number;
    unsigned wire;
    size_t at, length;
  } fields[] = {
      {1, RESHARD_WIRE_DELIMITED, 2, 2},
      {2, RESHARD_WIRE_VARINT, 5, 2},
      {3, RESHARD_WIRE_FIXED32, 8, 4},
      {4, RESHARD_WIRE_FIXED64, 13, 8},
  };
  reshard_wire_reader r = {bytes, bytes + sizeof bytes};
  for (size_t i = 0; i < 4; i++) {
    uint64_t number;
    unsigned wire;
    reshard_wire_reader value;
    cr_assert(reshard_wire_read_tag(&r, &number, &wire));
    cr_assert_eq(number, fields[i].number);
    cr_assert_eq(wire, fields[i].wire);
    cr_assert(reshard_wire_read_value(&r, wire, &value));
    cr_assert_eq(value.at, bytes + fields[i].at, "field %zu", i);
    cr_assert_eq((size_t)(value.end - value.at), fields[i].length, "field %zu",
                 i);
  }
  cr_assert_eq(r.at, r.end);

  reshard_wire_reader varint = {bytes + 5, bytes + 7};
  uint64_t value;
  cr_assert(reshard_wire_read_varint(&varint, &value));
  cr_assert_eq(value, 300);
}

Test(wire_reader, a_tenth_byte_holds_bit_63_only) {
  /* 0x7f in the tenth byte: protobuf-c keeps its lowest bit, as here. */
  static const uint8_t bytes[] = {0x80, 0x80, 0x80, 0x80, 0x80,
                                  0x80, 0x80, 0x80, 0x80, 0x7f};
  reshard_wire_reader r = {bytes, bytes + sizeof bytes};
  uint64_t value;
  cr_assert(reshard_wire_read_varint(&r, &value));
  cr_assert_eq(value, UINT64_C(1) << 63);
  cr_assert_eq(r.at, r.end);

  static const uint8_t message[] = {0x08, 0x80, 0x80, 0x80, 0x80, 0x80,
                                    0x80, 0x80, 0x80, 0x80, 0x7f};
  Google__Protobuf__UInt64Value *decoded =
      google__protobuf__uint64_value__unpack(NULL, sizeof message, message);
  cr_assert_not_null(decoded);
  cr_assert_eq(decoded->value, value);
  google__protobuf__uint64_value__free_unpacked(decoded, NULL);
}

Test(wire_reader, a_refused_read_leaves_the_reader_where_it_was) {
  static const uint8_t bytes[] = {0x80, 0x80};
  reshard_wire_reader r = {bytes, bytes + sizeof bytes};
  uint64_t value;
  cr_assert_not(reshard_wire_read_varint(&r, &value));
  cr_assert_eq(r.at, bytes);
}

Test(wire_reader, only_the_four_wire_types_protobuf_c_reads) {
  for (unsigned wire = 0; wire < 8; wire++) {
    uint8_t tag = (uint8_t)(1 << 3 | wire);
    reshard_wire_reader r = {&tag, &tag + 1};
    uint64_t number;
    unsigned read;
    bool known = wire == 0 || wire == 1 || wire == 2 || wire == 5;
    cr_assert_eq(reshard_wire_read_tag(&r, &number, &read), known, "wire %u",
                 wire);
  }
}
