/* Tests daemon/decode.c: the pre-scan's count caps, repeated singular
 * message fields, the decoded-size budget, and that valid requests decode
 * exactly as protobuf-c decodes them. Inputs are built on the wire, as an
 * attacker would send them. */
#include <criterion/criterion.h>
#include <stdlib.h>
#include <string.h>

#include "reshard/v1/planner.pb-c.h"
#include "wire/decode.h"

static reshard_arena arena;
static reshard_limits caps;

/* A growable wire buffer. */
typedef struct wire {
  uint8_t *data;
  size_t length, capacity;
} wire;

static void setup(void) {
  reshard_arena_init(&arena, 0);
  caps = reshard_limits_default();
}

static void teardown(void) {
  reshard_arena_destroy(&arena);
}

TestSuite(decode, .init = setup, .fini = teardown);

static void put(wire *w, const void *bytes, size_t n) {
  if (n == 0) {
    return;
  }
  if (w->length + n > w->capacity) {
    w->capacity = (w->length + n) * 2;
    w->data = realloc(w->data, w->capacity);
    cr_assert_not_null(w->data);
  }
  memcpy(w->data + w->length, bytes, n);
  w->length += n;
}

static void put_varint(wire *w, uint64_t value) {
  uint8_t byte;
  do {
    byte = (uint8_t)(value & 0x7f);
    value >>= 7;
    if (value != 0) {
      byte |= 0x80;
    }
    put(w, &byte, 1);
  } while (value != 0);
}

/* Field `id` as a length-delimited value. */
static void put_field(wire *w, unsigned id, const void *bytes, size_t n) {
  put_varint(w, (uint64_t)id << 3 | 2);
  put_varint(w, n);
  put(w, bytes, n);
}

static ProtobufCMessage *decode(const ProtobufCMessageDescriptor *type,
                                const wire *w, reshard_error *err) {
  return reshard_decode(type, w->data, w->length,
                        reshard_decode_budget(w->length), &caps, &arena, err);
}

Test(decode, budget_grows_with_the_request) {
  cr_assert_eq(reshard_decode_budget(0), 1024 * 1024);
  cr_assert_eq(reshard_decode_budget(1000), 1024 * 1024 + 16000);
}

Test(decode, a_valid_request_decodes_like_protobuf_c) {
  /* A PlanLoad with a binding of three ranges and two page keys. */
  wire binding = {0}, request = {0};
  uint8_t range[] = {0x08, 0x03, 0x10, 0x01, 0x20, 0x10, 0x30, 0x02};
  for (int i = 0; i < 3; i++) {
    put_field(&binding, 4, range, sizeof range);
  }
  put_field(&binding, 1, "r-a", 3);
  put_field(&request, 2, "p0", 2);
  put_field(&request, 2, "p1", 2);
  put_field(&request, 6, binding.data, binding.length);
  reshard_error err;
  Reshard__V1__PlanLoadRequest *decoded =
      (Reshard__V1__PlanLoadRequest *)decode(
          &reshard__v1__plan_load_request__descriptor, &request, &err);
  cr_assert_not_null(decoded, "%s", err.message);
  cr_assert_eq(decoded->n_page_keys, 2);
  cr_assert_str_eq(decoded->page_keys[1], "p1");
  cr_assert_eq(decoded->binding->n_ranges, 3);
  cr_assert_eq(decoded->binding->ranges[2]->global_layer_id, 3);
  cr_assert_eq(decoded->binding->ranges[2]->token_count, 16);
  cr_assert_str_eq(decoded->binding->participant_id, "r-a");
  free(binding.data);
  free(request.data);
}

Test(decode, a_repeated_singular_message_field_is_refused) {
  /* The 160 KB request, scaled down: `binding` 1 000 times. */
  wire request = {0};
  uint8_t one_range[] = {0x22, 0x00};
  for (int i = 0; i < 1000; i++) {
    put_field(&request, 6, one_range, sizeof one_range);
  }
  reshard_error err;
  cr_assert_null(
      decode(&reshard__v1__plan_load_request__descriptor, &request, &err));
  cr_assert_eq(err.code, RESHARD_INVALID_ARGUMENT);
  cr_assert_str_eq(err.message,
                   "PlanLoadRequest.binding: occurs more than once; a "
                   "singular message field may appear at most once in a "
                   "request");
  free(request.data);
}

Test(decode, a_repeated_singular_scalar_keeps_the_last) {
  wire request = {0};
  put_field(&request, 1, "first", 5);
  put_field(&request, 1, "second", 6);
  reshard_error err;
  Reshard__V1__PlanLoadRequest *decoded =
      (Reshard__V1__PlanLoadRequest *)decode(
          &reshard__v1__plan_load_request__descriptor, &request, &err);
  cr_assert_not_null(decoded, "%s", err.message);
  cr_assert_str_eq(decoded->model_domain, "second");
  free(request.data);
}

Test(decode, ranges_are_counted_before_decoding) {
  caps.max_ranges = 10;
  wire binding = {0}, request = {0};
  for (int i = 0; i < 11; i++) {
    put_field(&binding, 4, "", 0);
  }
  put_field(&request, 6, binding.data, binding.length);
  reshard_error err;
  cr_assert_null(
      decode(&reshard__v1__plan_load_request__descriptor, &request, &err));
  cr_assert_eq(err.code, RESHARD_RESOURCE_EXHAUSTED);
  cr_assert_str_eq(err.message,
                   "RuntimeBinding.ranges: more than 10 entries exceed the "
                   "limit max_ranges (--max-ranges)");
  /* Nothing was decoded: the arena is untouched. */
  cr_assert_eq(arena.total_bytes, 0);
  free(binding.data);
  free(request.data);
}

Test(decode, page_keys_are_counted_in_every_request_that_has_them) {
  caps.max_page_keys = 3;
  const ProtobufCMessageDescriptor *types[] = {
      &reshard__v1__plan_load_request__descriptor,
      &reshard__v1__register_pages_request__descriptor,
      &reshard__v1__forget_pages_request__descriptor,
  };
  wire request = {0};
  for (int i = 0; i < 4; i++) {
    put_field(&request, 2, "", 0);
  }
  for (size_t t = 0; t < 3; t++) {
    reshard_error err;
    cr_assert_null(decode(types[t], &request, &err));
    cr_assert_eq(err.code, RESHARD_RESOURCE_EXHAUSTED);
    cr_assert(strstr(err.message, "max_page_keys (--max-page-keys)"), "%s",
              err.message);
  }
  free(request.data);
}

/* A RegisterPlacement of `parts` parts of `layers_per_part` layer ids and
 * a descriptor of `descriptor_layers` layers. */
static wire placement_request(unsigned parts, unsigned layers_per_part,
                              unsigned descriptor_layers) {
  wire descriptor = {0}, part = {0}, placement = {0}, request = {0};
  wire ids = {0};
  for (unsigned i = 0; i < descriptor_layers; i++) {
    put_varint(&ids, i);
  }
  put_field(&descriptor, 1, ids.data, ids.length);
  ids.length = 0;
  for (unsigned i = 0; i < layers_per_part; i++) {
    put_varint(&ids, i);
  }
  if (layers_per_part > 0) {
    put_field(&part, 3, ids.data, ids.length);
  }
  put_field(&placement, 6, descriptor.data, descriptor.length);
  for (unsigned i = 0; i < parts; i++) {
    put_field(&placement, 7, part.data, part.length);
  }
  put_field(&request, 1, placement.data, placement.length);
  free(descriptor.data);
  free(part.data);
  free(placement.data);
  free(ids.data);
  return request;
}

Test(decode, placement_parts_layers_and_their_product_are_capped) {
  caps.max_layout_parts = 100;
  caps.max_layout_fragments = 1000;
  reshard_error err;
  const ProtobufCMessageDescriptor *type =
      &reshard__v1__register_placement_request__descriptor;

  wire fits = placement_request(10, 10, 100);
  cr_assert_not_null(decode(type, &fits, &err), "%s", err.message);

  wire parts = placement_request(101, 0, 1);
  cr_assert_null(decode(type, &parts, &err));
  cr_assert_eq(err.code, RESHARD_RESOURCE_EXHAUSTED);
  cr_assert(strstr(err.message, "Placement.parts: more than 100 entries"), "%s",
            err.message);

  wire layers = placement_request(20, 60, 1);
  cr_assert_null(decode(type, &layers, &err));
  cr_assert(strstr(err.message, "PlacementPart.layer_ids: more than 1000"),
            "%s", err.message);

  /* The identity repeats the descriptor in every part. */
  wire product = placement_request(11, 0, 100);
  cr_assert_null(decode(type, &product, &err));
  cr_assert_str_eq(err.message,
                   "placement: 11 parts × 100 descriptor layers exceed the "
                   "limit max_layout_fragments (--max-layout-fragments) of "
                   "1000");
  free(fits.data);
  free(parts.data);
  free(layers.data);
  free(product.data);
}

Test(decode, unknown_fields_count_against_the_budget) {
  /* 2-byte unknown fields cost ~100 bytes each decoded: far past 16 per
   * wire byte once the 1 MiB constant is spent. */
  wire request = {0};
  uint8_t unknown[] = {0xf8, 0x01, 0x00}; /* field 31, varint 0 */
  for (int i = 0; i < 200000; i++) {
    put(&request, unknown, sizeof unknown);
  }
  reshard_error err;
  cr_assert_null(
      decode(&reshard__v1__plan_load_request__descriptor, &request, &err));
  cr_assert_eq(err.code, RESHARD_RESOURCE_EXHAUSTED);
  cr_assert(strstr(err.message, "would take more than"), "%s", err.message);
  cr_assert_eq(arena.total_bytes, 0);
  free(request.data);
}

Test(decode, the_allocator_stops_at_the_budget) {
  /* A budget below what a valid request needs: the scan refuses it, and
   * so would the allocator behind it. */
  wire request = {0};
  put_field(&request, 1, "domain", 6);
  reshard_error err;
  cr_assert_null(reshard_decode(&reshard__v1__plan_load_request__descriptor,
                                request.data, request.length, 64, &caps, &arena,
                                &err));
  cr_assert_eq(err.code, RESHARD_RESOURCE_EXHAUSTED);
  free(request.data);
}

Test(decode, malformed_input_is_invalid_argument) {
  static const uint8_t groups[] = {0x0b, 0x0c}; /* start/end group */
  static const uint8_t truncated[] = {0x32, 0x05, 0x22};
  static const uint8_t long_varint[] = {0x08, 0xff, 0xff, 0xff, 0xff, 0xff,
                                        0xff, 0xff, 0xff, 0xff, 0xff, 0x01};
  const uint8_t *inputs[] = {groups, truncated, long_varint};
  size_t lengths[] = {sizeof groups, sizeof truncated, sizeof long_varint};
  for (size_t i = 0; i < 3; i++) {
    reshard_error err;
    cr_assert_null(reshard_decode(
        &reshard__v1__plan_load_request__descriptor, inputs[i], lengths[i],
        reshard_decode_budget(lengths[i]), &caps, &arena, &err));
    cr_assert_eq(err.code, RESHARD_INVALID_ARGUMENT, "input %zu", i);
  }
}
