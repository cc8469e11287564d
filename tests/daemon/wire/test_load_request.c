/* Tests daemon/wire/load_request.c against the path it skips: the bounded
 * protobuf-c decode every request takes (reshard_wire_unpack). Wherever
 * the direct decoder returns a request, protobuf-c must decode the same
 * bytes under the same caps to the same values; where it declines, the
 * daemon decodes through protobuf-c, so declining is always safe — but the
 * requests engines send must not be declined. */
#include <criterion/criterion.h>
#include <stdbool.h>
#include <stdio.h>
#include <string.h>

#include "load_request_compare.h"
#include "random_wire.h"
#include "reshard/v1/planner.pb-c.h"
#include "wire/decode.h"
#include "wire/load_request.h"

static reshard_arena arena;

static void setup(void) {
  reshard_arena_init(&arena, 0);
}

static void teardown(void) {
  reshard_arena_destroy(&arena);
}

TestSuite(load_request, .init = setup, .fini = teardown);

/* ---- Requests written by hand ---- */

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

static void put_pooled(wire *w) {
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
  put_message(w, 11, &inner);
}

static void put_limits(wire *w) {
  wire inner = {.length = 0};
  unsigned fields = (unsigned)below(8);
  for (unsigned f = 0; f < fields; f++) {
    put_varint_field(&inner, 1 + below(6), random_value());
    put_noise(&inner, 6);
  }
  put_message(w, 7, &inner);
}

static void put_dp_rank(wire *w) {
  wire inner = {.length = 0};
  unsigned fields = (unsigned)below(3);
  for (unsigned f = 0; f < fields; f++) {
    put_varint_field(&inner, 1, random_value());
    put_noise(&inner, 1);
  }
  put_message(w, 5, &inner);
}

/* The fields of a PlanLoadRequest in any order and number: nested
 * messages at times twice, at times an inline placement or a binding. */
static void random_request(wire *w) {
  w->length = 0;
  unsigned fields = (unsigned)below(24);
  for (unsigned f = 0; f < fields; f++) {
    switch (below(20)) {
    case 0:
      put_text(w, 1);
      break;
    case 1:
      put_text(w, 4);
      break;
    case 2:
      put_text(w, 8);
      break;
    case 3:
      put_text(w, 9);
      break;
    case 4:
      if (below(4) == 0) {
        put_wide_true(w, 10);
      } else {
        put_varint_field(w, 10, random_value());
      }
      break;
    case 5:
      put_dp_rank(w);
      break;
    case 6:
      put_limits(w);
      break;
    case 7:
    case 8:
      put_pooled(w);
      break;
    case 9:
      if (below(8) == 0) {
        wire inner = {.length = 0};
        put_text(&inner, 1);
        put_message(w, below(2) == 0 ? 3 : 6, &inner);
        break;
      }
      /* fall through */
    default:
      put_text(w, 2);
      break;
    }
    put_noise(w, 11);
  }
}

/* ---- The comparison ---- */

static void assert_same_request(const Reshard__V1__PlanLoadRequest *got,
                                const Reshard__V1__PlanLoadRequest *want) {
  char why[256];
  cr_assert(reshard_test_load_requests_equal(got, want, why, sizeof why), "%s",
            why);
}

static const Reshard__V1__PlanLoadRequest *
through_protobuf_c(const uint8_t *data, size_t length,
                   const reshard_limits *caps) {
  reshard_error err;
  return (const Reshard__V1__PlanLoadRequest *)reshard_decode(
      &reshard__v1__plan_load_request__descriptor, data, length,
      reshard_decode_budget(length), caps, &arena, &err);
}

/* Requests from random_request, every other one mutated, every fifth under
 * caps of three page keys and five block ids: wherever the direct decoder
 * returns a request, protobuf-c returns the same. Both outcomes must be
 * common, or the comparison proves little. */
Test(load_request, agrees_with_protobuf_c_wherever_it_decodes) {
  reshard_limits small = reshard_limits_default();
  small.max_page_keys = 3;
  small.max_block_ids = 5;
  const reshard_limits *defaults = reshard_decode_caps();
  unsigned decoded = 0, declined = 0, capped = 0;
  for (unsigned round = 0; round < 40000; round++) {
    wire w;
    random_request(&w);
    if (round % 2 == 1) {
      mutate(&w);
    }
    const reshard_limits *caps = round % 5 == 0 ? &small : defaults;
    const Reshard__V1__PlanLoadRequest *got =
        reshard_load_request_decode(w.data, w.length, caps, &arena);
    if (got == NULL) {
      declined++;
    } else {
      const Reshard__V1__PlanLoadRequest *want =
          through_protobuf_c(w.data, w.length, caps);
      cr_assert_not_null(want,
                         "round %u: decoded directly, refused by the "
                         "pre-scan or protobuf-c",
                         round);
      assert_same_request(got, want);
      decoded++;
      capped += caps == &small;
    }
    if (round % 64 == 63) {
      reshard_arena_destroy(&arena);
      reshard_arena_init(&arena, 0);
    }
  }
  cr_assert_gt(decoded, 8000, "%u decoded", decoded);
  cr_assert_gt(declined, 8000, "%u declined", declined);
  cr_assert_gt(capped, 500, "%u decoded under the small caps", capped);
}

/* ---- What engines send: protobuf-c's own bytes ---- */

static uint8_t *pack(const Reshard__V1__PlanLoadRequest *request,
                     size_t *length) {
  *length = protobuf_c_message_get_packed_size(&request->base);
  uint8_t *bytes = reshard_arena_alloc(&arena, *length + 1, 1);
  cr_assert_not_null(bytes);
  cr_assert_eq(protobuf_c_message_pack(&request->base, bytes), *length);
  return bytes;
}

/* Pooled requests of every size up to S5's 256 pages, with and without
 * each optional field, packed by protobuf-c: all decoded directly, to what
 * protobuf-c decodes. */
Test(load_request, decodes_every_pooled_request_protobuf_c_writes) {
  static char keys[256][65];
  static char *key_list[256];
  static uint32_t ids[4096];
  for (size_t i = 0; i < 256; i++) {
    snprintf(keys[i], sizeof keys[i], "%064llx",
             (unsigned long long)i * 0x9e3779b97f4a7c15ull);
    key_list[i] = keys[i];
  }
  for (unsigned round = 0; round < 600; round++) {
    Reshard__V1__PlanLoadRequest request = RESHARD__V1__PLAN_LOAD_REQUEST__INIT;
    Reshard__V1__PooledMemory pooled = RESHARD__V1__POOLED_MEMORY__INIT;
    Reshard__V1__Limits limits = RESHARD__V1__LIMITS__INIT;
    Google__Protobuf__UInt32Value rank = GOOGLE__PROTOBUF__UINT32_VALUE__INIT;
    char *layouts[2] = {"layout-a", ""};
    request.model_domain = "llama3-8b";
    request.n_page_keys = (size_t)below(257);
    request.page_keys = key_list;
    request.target_case = RESHARD__V1__PLAN_LOAD_REQUEST__TARGET_PLACEMENT_ID;
    request.placement_id = "sha256:0123";
    pooled.pool_case = RESHARD__V1__POOLED_MEMORY__POOL_MEMORY_ID;
    pooled.memory_id = "engine-0/kv";
    pooled.n_block_ids = (size_t)below(4097);
    for (size_t i = 0; i < pooled.n_block_ids; i++) {
      ids[i] = (uint32_t)random_value();
    }
    pooled.block_ids = ids;
    request.pooled = &pooled;
    request.runs = round % 2;
    if (round % 3 == 0) {
      request.limits = &limits;
      limits.max_operations = random_value();
      limits.max_batch_bytes = random_value();
    }
    if (round % 5 == 0) {
      request.target_dp_rank = &rank;
      rank.value = (uint32_t)random_value();
    }
    if (round % 7 == 0) {
      request.n_preferred_layout_ids = 2;
      request.preferred_layout_ids = layouts;
      request.operation_id = "op-7";
    }
    size_t length;
    uint8_t *bytes = pack(&request, &length);
    const Reshard__V1__PlanLoadRequest *got = reshard_load_request_decode(
        bytes, length, reshard_decode_caps(), &arena);
    cr_assert_not_null(got, "round %u: %zu pages, %zu blocks declined", round,
                       request.n_page_keys, pooled.n_block_ids);
    const Reshard__V1__PlanLoadRequest *want =
        through_protobuf_c(bytes, length, reshard_decode_caps());
    cr_assert_not_null(want);
    assert_same_request(got, want);
    reshard_arena_destroy(&arena);
    reshard_arena_init(&arena, 0);
  }
}
