/* Tests daemon/inline_cache.c: finding the inline targets in a
 * PlanLoadRequest's wire bytes, decoding what is left without them, the
 * binding keys and the shared validated binding. */
#include <criterion/criterion.h>
#include <string.h>

#include "cache/inline_cache.h"
#include "scenario.h"
#include "wire/wire.h"

static reshard_arena arena;
static scenario s;
static Reshard__V1__PlanLoadRequest request;
static char *page_keys[] = {"page-0", "page-1"};

static void setup(void) {
  reshard_arena_init(&arena, 0);
  reshard_error err;
  cr_assert_eq(scenario_build(&scenario_specs[0], 2, 0, 3, &arena, &s, &err),
               RESHARD_OK, "%s", err.message);
  reshard__v1__plan_load_request__init(&request);
  request.model_domain = "domain";
  request.n_page_keys = 2;
  request.page_keys = page_keys;
  request.target_case = RESHARD__V1__PLAN_LOAD_REQUEST__TARGET_PLACEMENT;
  request.placement = reshard_wire_placement_to_pb(&s.reader, &arena);
  request.binding = reshard_wire_binding_to_pb(&s.binding, &arena);
  request.operation_id = "op";
  cr_assert(request.placement != NULL && request.binding != NULL);
}

static void teardown(void) {
  reshard_arena_destroy(&arena);
}

TestSuite(inline_cache, .init = setup, .fini = teardown);

static uint8_t *pack(size_t *length) {
  return reshard_wire_pack(&request.base, &arena, length);
}

/* The wire bytes of one sub-message, as the request carries them. */
static uint8_t *pack_part(const ProtobufCMessage *message, size_t *length) {
  return reshard_wire_pack(message, &arena, length);
}

Test(inline_cache, finds_the_targets_and_decodes_the_rest_without_them) {
  Reshard__V1__Limits limits = RESHARD__V1__LIMITS__INIT;
  limits.max_batch_operations = 100;
  request.limits = &limits;
  size_t length;
  uint8_t *bytes = pack(&length);
  reshard_inline_fields fields;
  cr_assert(reshard_inline_scan(bytes, length, &fields));
  cr_assert_eq(fields.page_count, 2);
  size_t placement_length, binding_length, limits_length;
  uint8_t *placement = pack_part(&request.placement->base, &placement_length);
  uint8_t *binding = pack_part(&request.binding->base, &binding_length);
  uint8_t *limit_bytes = pack_part(&limits.base, &limits_length);
  cr_assert_eq(fields.placement.value_length, placement_length);
  cr_assert_eq(memcmp(fields.placement.value, placement, placement_length), 0);
  cr_assert_eq(fields.binding.value_length, binding_length);
  cr_assert_eq(memcmp(fields.binding.value, binding, binding_length), 0);
  cr_assert_eq(fields.limits.value_length, limits_length);
  cr_assert_eq(memcmp(fields.limits.value, limit_bytes, limits_length), 0);

  const reshard_wire_span *strip[] = {&fields.placement, &fields.binding};
  size_t rest_length;
  uint8_t *rest =
      reshard_inline_strip(bytes, length, strip, 2, &arena, &rest_length);
  cr_assert_not_null(rest);
  cr_assert_lt(rest_length, length - placement_length - binding_length);
  reshard_error err;
  Reshard__V1__PlanLoadRequest *decoded =
      (Reshard__V1__PlanLoadRequest *)reshard_wire_unpack(
          &reshard__v1__plan_load_request__descriptor, rest, rest_length,
          &arena, &err);
  cr_assert_not_null(decoded, "%s", err.message);
  cr_assert_null(decoded->placement);
  cr_assert_null(decoded->binding);
  cr_assert_eq(decoded->target_case,
               RESHARD__V1__PLAN_LOAD_REQUEST__TARGET__NOT_SET);
  cr_assert_str_eq(decoded->model_domain, "domain");
  cr_assert_eq(decoded->n_page_keys, 2);
  cr_assert_str_eq(decoded->page_keys[1], "page-1");
  cr_assert_str_eq(decoded->operation_id, "op");
  cr_assert_not_null(decoded->limits);
  cr_assert_eq(decoded->limits->max_batch_operations, 100);
}

Test(inline_cache, leaves_requests_it_cannot_key_to_the_decoder) {
  size_t length;
  uint8_t *bytes = pack(&length);
  reshard_inline_fields fields;
  cr_assert_not(reshard_inline_scan(bytes, length - 1, &fields),
                "truncated bytes");

  /* A repeated singular message is merged by the decoder. */
  uint8_t *twice = reshard_arena_alloc(&arena, 2 * length, 1);
  memcpy(twice, bytes, length);
  memcpy(twice + length, bytes, length);
  cr_assert_not(reshard_inline_scan(twice, 2 * length, &fields));

  request.target_case = RESHARD__V1__PLAN_LOAD_REQUEST__TARGET_PLACEMENT_ID;
  request.placement_id = "sha256:00";
  bytes = pack(&length);
  cr_assert_not(reshard_inline_scan(bytes, length, &fields), "by id");

  request.target_case = RESHARD__V1__PLAN_LOAD_REQUEST__TARGET__NOT_SET;
  bytes = pack(&length);
  cr_assert_not(reshard_inline_scan(bytes, length, &fields), "no target");
}

Test(inline_cache, binding_keys_differ_with_placement_pages_and_limits) {
  size_t length;
  uint8_t *bytes = pack(&length);
  reshard_inline_fields fields;
  cr_assert(reshard_inline_scan(bytes, length, &fields));
  size_t a_length, b_length, c_length, d_length;
  char *a = reshard_inline_binding_key(&fields, "sha256:aa", &arena, &a_length);
  char *b = reshard_inline_binding_key(&fields, "sha256:ab", &arena, &b_length);
  reshard_inline_fields more = fields;
  more.page_count = 3;
  char *c = reshard_inline_binding_key(&more, "sha256:aa", &arena, &c_length);
  static const uint8_t limit_bytes[] = {0x18, 0x64};
  reshard_inline_fields limited = fields;
  limited.limits.value = limit_bytes;
  limited.limits.value_length = sizeof limit_bytes;
  char *d =
      reshard_inline_binding_key(&limited, "sha256:aa", &arena, &d_length);
  cr_assert(a && b && c && d);
  cr_assert(a_length != b_length || memcmp(a, b, a_length) != 0);
  cr_assert(a_length != c_length || memcmp(a, c, a_length) != 0);
  cr_assert(a_length != d_length || memcmp(a, d, a_length) != 0);
  char *again =
      reshard_inline_binding_key(&fields, "sha256:aa", &arena, &a_length);
  cr_assert_eq(memcmp(a, again, a_length), 0);
}

Test(inline_cache, shares_a_binding_only_when_it_validates) {
  size_t length;
  uint8_t *bytes = pack(&length);
  reshard_inline_fields fields;
  cr_assert(reshard_inline_scan(bytes, length, &fields));
  reshard_limits limits = reshard_limits_default();
  reshard_shared_binding *shared =
      reshard_shared_binding_create(&fields, &s.reader, &limits);
  cr_assert_not_null(shared);
  cr_assert_eq(shared->binding.range_count, s.binding.range_count);
  cr_assert_eq(shared->bound.range_count, s.binding.range_count);
  cr_assert_eq(shared->values, reshard_binding_values(&s.binding));
  cr_assert_gt(shared->base.bytes, 0);
  reshard_shared_unref(&shared->base);

  /* A stride below the row: the planner must report it, not the cache. */
  request.binding->ranges[0]->token_stride_bytes = 2;
  bytes = pack(&length);
  cr_assert(reshard_inline_scan(bytes, length, &fields));
  cr_assert_null(reshard_shared_binding_create(&fields, &s.reader, &limits));
}

Test(inline_cache, a_binding_key_is_seen_the_second_time) {
  reshard_inline_recent recent = {{0}};
  cr_assert_not(reshard_inline_seen(&recent, "key one", 7));
  cr_assert(reshard_inline_seen(&recent, "key one", 7));
  cr_assert_not(reshard_inline_seen(&recent, "key two", 7));
}
