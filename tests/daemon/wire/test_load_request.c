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

#include "random_requests.h"
#include "request_compare.h"
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
      put_dp_rank(w, 5);
      break;
    case 6:
      put_limits(w, 7);
      break;
    case 7:
    case 8:
      put_pooled(w, 11);
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

/* The direct decoder and its comparison, as random_requests.h takes them. */
static const void *decode_directly(const uint8_t *data, size_t length,
                                   const reshard_limits *caps,
                                   reshard_arena *into) {
  return reshard_load_request_decode(data, length, caps, into);
}

static bool equal(const void *direct, const void *decoded, char *why,
                  size_t why_size) {
  return reshard_test_load_requests_equal(direct, decoded, why, why_size);
}

/* Requests from random_request, every other one mutated, every fifth under
 * caps of three page keys and five block ids: wherever the direct decoder
 * returns a request, protobuf-c returns the same. Both outcomes must be
 * common, or the comparison proves little. */
Test(load_request, agrees_with_protobuf_c_wherever_it_decodes) {
  reshard_limits small = reshard_limits_default();
  small.max_page_keys = 3;
  small.max_block_ids = 5;
  assert_agree_with_protobuf_c(&reshard__v1__plan_load_request__descriptor,
                               random_request, decode_directly, equal, &small,
                               &arena);
}

/* ---- What engines send: protobuf-c's own bytes ---- */

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
    uint8_t *bytes = protobuf_c_bytes(&request.base, &arena, &length);
    const Reshard__V1__PlanLoadRequest *got = reshard_load_request_decode(
        bytes, length, reshard_decode_caps(), &arena);
    cr_assert_not_null(got, "round %u: %zu pages, %zu blocks declined", round,
                       request.n_page_keys, pooled.n_block_ids);
    const Reshard__V1__PlanLoadRequest *want =
        through_protobuf_c(&reshard__v1__plan_load_request__descriptor, bytes,
                           length, reshard_decode_caps(), &arena);
    cr_assert_not_null(want);
    assert_same_request(got, want);
    reshard_arena_destroy(&arena);
    reshard_arena_init(&arena, 0);
  }
}
