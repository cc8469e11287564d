/* Tests daemon/wire/transfer_request.c against the path it skips: the
 * bounded protobuf-c decode every request takes (reshard_wire_unpack).
 * Wherever the direct decoder returns a request, protobuf-c must decode
 * the same bytes under the same caps to the same values; where it
 * declines, the daemon decodes through protobuf-c, so declining is always
 * safe — but the requests decode instances send must not be declined. */
#include <criterion/criterion.h>
#include <stdbool.h>
#include <stdio.h>
#include <string.h>

#include "random_requests.h"
#include "request_compare.h"
#include "reshard/v1/planner.pb-c.h"
#include "wire/decode.h"
#include "wire/transfer_request.h"

static reshard_arena arena;

static void setup(void) {
  reshard_arena_init(&arena, 0);
}

static void teardown(void) {
  reshard_arena_destroy(&arena);
}

TestSuite(transfer_request, .init = setup, .fini = teardown);

/* ---- Requests written by hand ---- */

/* A run of block ids as field 5: packed, or one unpacked id. */
static void put_source_block_ids(wire *w) {
  if (below(4) == 0) {
    put_varint_field(w, 5, random_value());
    return;
  }
  wire packed = {.length = 0};
  unsigned ids = (unsigned)below(24);
  for (unsigned i = 0; i < ids; i++) {
    put_varint(&packed, random_value());
  }
  put_message(w, 5, &packed);
}

/* The fields of a PlanTransferRequest in any order and number: nested
 * messages at times twice, at times an inline placement or a binding. */
static void random_request(wire *w) {
  w->length = 0;
  unsigned fields = (unsigned)below(24);
  for (unsigned f = 0; f < fields; f++) {
    switch (below(16)) {
    case 0:
      put_text(w, 2);
      break;
    case 1:
      put_text(w, 8);
      break;
    case 2:
      put_text(w, 14);
      break;
    case 3:
      put_varint_field(w, 6, random_value());
      break;
    case 4:
      if (below(4) == 0) {
        put_wide_true(w, 13);
      } else {
        put_varint_field(w, 13, random_value());
      }
      break;
    case 5:
      put_dp_rank(w, below(2) == 0 ? 3 : 9);
      break;
    case 6:
      put_limits(w, 12);
      break;
    case 7:
      put_pooled(w, 11);
      break;
    case 8:
    case 9:
      put_source_block_ids(w);
      break;
    case 10:
      if (below(8) == 0) {
        wire inner = {.length = 0};
        put_text(&inner, 1);
        put_message(w, (uint64_t[]){1, 7, 10}[below(3)], &inner);
        break;
      }
      /* fall through */
    default:
      put_text(w, 4);
      break;
    }
    put_noise(w, 14);
  }
}

static void assert_same_request(const Reshard__V1__PlanTransferRequest *got,
                                const Reshard__V1__PlanTransferRequest *want) {
  char why[256];
  cr_assert(reshard_test_transfer_requests_equal(got, want, why, sizeof why),
            "%s", why);
}

/* The direct decoder and its comparison, as random_requests.h takes them. */
static const void *decode_directly(const uint8_t *data, size_t length,
                                   const reshard_limits *caps,
                                   reshard_arena *into) {
  return reshard_transfer_request_decode(data, length, caps, into);
}

static bool equal(const void *direct, const void *decoded, char *why,
                  size_t why_size) {
  return reshard_test_transfer_requests_equal(direct, decoded, why, why_size);
}

/* Requests from random_request, every other one mutated, every fifth under
 * caps of two source pools and six block ids (the source's and the
 * target's together): wherever the direct decoder returns a request,
 * protobuf-c returns the same. Both outcomes must be common, or the
 * comparison proves little. */
Test(transfer_request, agrees_with_protobuf_c_wherever_it_decodes) {
  reshard_limits small = reshard_limits_default();
  small.max_layout_parts = 2;
  small.max_block_ids = 6;
  assert_agree_with_protobuf_c(&reshard__v1__plan_transfer_request__descriptor,
                               random_request, decode_directly, equal, &small,
                               &arena);
}

/* Right at the caps, the source's and the target's block ids counted
 * together, as the pre-scan counts them: decoded at the cap, declined one
 * past it (where the pre-scan refuses). */
Test(transfer_request, counts_both_block_tables_against_one_cap) {
  reshard_limits caps = reshard_limits_default();
  caps.max_block_ids = 5;
  for (unsigned target_ids = 2; target_ids <= 3; target_ids++) {
    Reshard__V1__PlanTransferRequest request =
        RESHARD__V1__PLAN_TRANSFER_REQUEST__INIT;
    Reshard__V1__PooledMemory pooled = RESHARD__V1__POOLED_MEMORY__INIT;
    uint32_t source[3] = {7, 8, 9}, target[3] = {1, 2, 3};
    char *memory_ids[1] = {"prefill-0/kv"};
    request.source_case =
        RESHARD__V1__PLAN_TRANSFER_REQUEST__SOURCE_SOURCE_PLACEMENT_ID;
    request.source_placement_id = "sha256:aa";
    request.n_source_memory_ids = 1;
    request.source_memory_ids = memory_ids;
    request.n_source_block_ids = 3;
    request.source_block_ids = source;
    request.token_count = 48;
    request.target_case =
        RESHARD__V1__PLAN_TRANSFER_REQUEST__TARGET_TARGET_PLACEMENT_ID;
    request.target_placement_id = "sha256:bb";
    pooled.pool_case = RESHARD__V1__POOLED_MEMORY__POOL_MEMORY_ID;
    pooled.memory_id = "decode-0/kv";
    pooled.n_block_ids = target_ids;
    pooled.block_ids = target;
    request.pooled = &pooled;
    size_t length;
    uint8_t *bytes = protobuf_c_bytes(&request.base, &arena, &length);
    const Reshard__V1__PlanTransferRequest *got =
        reshard_transfer_request_decode(bytes, length, &caps, &arena);
    const Reshard__V1__PlanTransferRequest *want =
        through_protobuf_c(&reshard__v1__plan_transfer_request__descriptor,
                           bytes, length, &caps, &arena);
    if (target_ids == 2) {
      cr_assert_not_null(got);
      cr_assert_not_null(want);
      assert_same_request(got, want);
    } else {
      cr_assert_null(got, "5 block ids allowed, 6 decoded");
      cr_assert_null(want, "5 block ids allowed, 6 past the pre-scan");
    }
  }
}

/* Pooled requests as T1–T5 send them (SPEC §6: up to 16 source pools,
 * tables of up to 4 096 blocks), with and without each optional field,
 * packed by protobuf-c: all decoded directly, to what protobuf-c decodes. */
Test(transfer_request, decodes_every_pooled_request_protobuf_c_writes) {
  static char pool_ids[16][32];
  static char *pool_list[16];
  static uint32_t source_ids[4096], target_ids[4096];
  for (size_t i = 0; i < 16; i++) {
    snprintf(pool_ids[i], sizeof pool_ids[i], "prefill-%zu/kv", i);
    pool_list[i] = pool_ids[i];
  }
  for (unsigned round = 0; round < 600; round++) {
    Reshard__V1__PlanTransferRequest request =
        RESHARD__V1__PLAN_TRANSFER_REQUEST__INIT;
    Reshard__V1__PooledMemory pooled = RESHARD__V1__POOLED_MEMORY__INIT;
    Reshard__V1__Limits limits = RESHARD__V1__LIMITS__INIT;
    Google__Protobuf__UInt32Value source_rank =
        GOOGLE__PROTOBUF__UINT32_VALUE__INIT;
    Google__Protobuf__UInt32Value target_rank =
        GOOGLE__PROTOBUF__UINT32_VALUE__INIT;
    request.source_case =
        RESHARD__V1__PLAN_TRANSFER_REQUEST__SOURCE_SOURCE_PLACEMENT_ID;
    request.source_placement_id = "sha256:prefill";
    request.n_source_memory_ids = 1 + (size_t)below(16);
    request.source_memory_ids = pool_list;
    request.n_source_block_ids = (size_t)below(4097);
    for (size_t i = 0; i < request.n_source_block_ids; i++) {
      source_ids[i] = (uint32_t)random_value();
    }
    request.source_block_ids = source_ids;
    request.token_count = 1 + below(1u << 16);
    request.target_case =
        RESHARD__V1__PLAN_TRANSFER_REQUEST__TARGET_TARGET_PLACEMENT_ID;
    request.target_placement_id = "sha256:decode";
    pooled.pool_case = RESHARD__V1__POOLED_MEMORY__POOL_MEMORY_ID;
    pooled.memory_id = "decode-0/kv";
    pooled.n_block_ids = (size_t)below(4097);
    for (size_t i = 0; i < pooled.n_block_ids; i++) {
      target_ids[i] = (uint32_t)random_value();
    }
    pooled.block_ids = target_ids;
    request.pooled = &pooled;
    request.runs = round % 2;
    if (round % 3 == 0) {
      request.limits = &limits;
      limits.max_operations = random_value();
    }
    if (round % 5 == 0) {
      request.source_dp_rank = &source_rank;
      source_rank.value = (uint32_t)random_value();
    }
    if (round % 7 == 0) {
      request.target_dp_rank = &target_rank;
      target_rank.value = (uint32_t)random_value();
      request.operation_id = "op-7";
    }
    size_t length;
    uint8_t *bytes = protobuf_c_bytes(&request.base, &arena, &length);
    const Reshard__V1__PlanTransferRequest *got =
        reshard_transfer_request_decode(bytes, length, reshard_decode_caps(),
                                        &arena);
    cr_assert_not_null(got, "round %u: %zu pools, %zu + %zu blocks declined",
                       round, request.n_source_memory_ids,
                       request.n_source_block_ids, pooled.n_block_ids);
    const Reshard__V1__PlanTransferRequest *want =
        through_protobuf_c(&reshard__v1__plan_transfer_request__descriptor,
                           bytes, length, reshard_decode_caps(), &arena);
    cr_assert_not_null(want);
    assert_same_request(got, want);
    reshard_arena_destroy(&arena);
    reshard_arena_init(&arena, 0);
  }
}
