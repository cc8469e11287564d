/* libFuzzer target: every RPC's request bytes through decode, validation
 * and, where the request carries what it needs, planning — in process, no
 * network. The first byte picks the RPC, the rest is the request message.
 *
 * The seam is the daemon's wire layer (daemon/wire.h): reshard_wire_unpack
 * and the *_from_pb conversions, then the library's normalize/validate and
 * planners, in the order the handlers in daemon/rpc/ call them. When request
 * decoding moves behind another entry point (budgets while decoding), only
 * decode_request() below changes. */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "binding_compare.h"
#include "cache/inline_cache.h"
#include "grpc/health/v1/health.pb-c.h"
#include "reshard/arena.h"
#include "reshard/identity.h"
#include "reshard/plan.h"
#include "reshard/upload.h"
#include "wire/binding_decode.h"
#include "wire/decode.h"
#include "wire/wire.h"

/* Planning limits small enough that one input runs in milliseconds; the
 * checks they guard are the same at any size. */
static reshard_limits fuzz_caps(void) {
  reshard_limits caps = reshard_limits_default();
  caps.max_operations = 1u << 16;
  caps.max_validation_work = 1u << 20;
  caps.max_ranges = 1u << 12;
  caps.max_page_keys = 64;
  caps.max_layout_parts = 1u << 10;
  caps.max_layout_fragments = 1u << 12;
  return caps;
}

/* The daemon decodes a PlanLoad's or PlanStore's binding (field
 * `binding_field` of the request) with reshard_binding_decode
 * (rpc/plan_load.c, rpc/plan_store.c), not protobuf-c: both paths take the
 * binding's bytes here and must agree — equal bindings, or the same error
 * (a message both over a cap and malformed may be refused for either). */
static void binding_paths_agree(const uint8_t *data, size_t size,
                                unsigned binding_field, reshard_arena *arena) {
  reshard_wire_span binding;
  unsigned bindings;
  if (!reshard_inline_find(data, size, binding_field, &binding, &bindings) ||
      bindings != 1) {
    return;
  }
  reshard_limits caps = fuzz_caps();
  const uint8_t *bytes = binding.value;
  size_t length = binding.value_length;
  reshard_binding direct, decoded;
  reshard_error direct_err, decoded_err;
  reshard_status direct_status = reshard_binding_decode(
      bytes, length, "binding", &caps, UINT64_MAX, arena, &direct, &direct_err);
  ProtobufCMessage *m =
      reshard_decode(&reshard__v1__runtime_binding__descriptor, bytes, length,
                     UINT64_MAX, &caps, arena, &decoded_err);
  reshard_status decoded_status =
      m == NULL ? decoded_err.code
                : reshard_wire_binding_from_pb((const void *)m, "binding",
                                               arena, &decoded, &decoded_err);
  char why[256];
  if (direct_status == RESHARD_OK && decoded_status == RESHARD_OK) {
    if (!reshard_test_bindings_equal(&direct, &decoded, why, sizeof why)) {
      fprintf(stderr, "binding paths differ: %s\n", why);
      abort();
    }
    return;
  }
  bool cap = strstr(direct_err.message, "max_ranges") != NULL ||
             strstr(decoded_err.message, "max_ranges") != NULL;
  if (direct_status != decoded_status &&
      (direct_status == RESHARD_OK || decoded_status == RESHARD_OK || !cap)) {
    fprintf(stderr,
            "binding paths differ: direct %d \"%s\", protobuf-c %d "
            "\"%s\"\n",
            direct_status, direct_status ? direct_err.message : "",
            decoded_status, decoded_status ? decoded_err.message : "");
    abort();
  }
}

static ProtobufCMessage *decode_request(const ProtobufCMessageDescriptor *type,
                                        const uint8_t *data, size_t size,
                                        reshard_arena *arena) {
  reshard_error err;
  return reshard_wire_unpack(type, data, size, arena, &err);
}

static bool placement(const Reshard__V1__Placement *pb, reshard_arena *arena,
                      reshard_placement *out) {
  reshard_error err;
  return reshard_wire_placement_from_pb(pb, "placement", arena, out, &err) ==
             RESHARD_OK &&
         reshard_placement_normalize(out, arena, &err) == RESHARD_OK;
}

static void publish(const ProtobufCMessage *m, reshard_arena *arena) {
  const Reshard__V1__PublishManifestRequest *req = (const void *)m;
  reshard_limits caps = fuzz_caps();
  reshard_manifest manifest;
  reshard_error err;
  char id[RESHARD_ID_SIZE], domain[RESHARD_ID_SIZE];
  char key[RESHARD_MANIFEST_KEY_SIZE];
  if (reshard_wire_manifest_from_pb(req->manifest, "manifest", arena, &manifest,
                                    &err) == RESHARD_OK &&
      reshard_manifest_normalize(&manifest, &caps, arena, &err) == RESHARD_OK) {
    (void)reshard_layout_id(&manifest.layout, id, &err);
    (void)reshard_model_domain(&manifest, domain, &err);
    (void)reshard_manifest_key(&manifest, key, &err);
  }
}

static void register_placement(const ProtobufCMessage *m,
                               reshard_arena *arena) {
  const Reshard__V1__RegisterPlacementRequest *req = (const void *)m;
  reshard_placement p;
  reshard_error err;
  char id[RESHARD_ID_SIZE];
  if (placement(req->placement, arena, &p)) {
    (void)reshard_placement_id(&p, id, &err);
  }
}

static void plan_upload(const ProtobufCMessage *m, reshard_arena *arena) {
  const Reshard__V1__PlanUploadRequest *req = (const void *)m;
  reshard_limits caps = fuzz_caps();
  reshard_placement p;
  reshard_format format;
  reshard_upload_plan plan;
  reshard_error err;
  if (placement(req->placement, arena, &p) &&
      reshard_wire_format_from_pb(req->format, "format", &format, &err) ==
          RESHARD_OK) {
    (void)reshard_plan_upload(&p, format, req->dp_rank != NULL,
                              req->dp_rank ? req->dp_rank->value : 0, &caps,
                              arena, &plan, &err);
  }
}

/* Plans the request's binding against the layout its own placement
 * uploads: the fuzzer reaches lowering, coalescing and batching with
 * bindings it shaped. */
static void plan_against_self(const reshard_placement *p,
                              const Reshard__V1__RuntimeBinding *binding_pb,
                              const Reshard__V1__Limits *limits_pb,
                              const Google__Protobuf__UInt32Value *dp_rank,
                              uint64_t page_count, reshard_arena *arena) {
  reshard_limits caps = fuzz_caps(), asked;
  reshard_binding binding;
  reshard_upload_plan upload;
  reshard_error err;
  if (reshard_wire_binding_from_pb(binding_pb, "binding", arena, &binding,
                                   &err) != RESHARD_OK ||
      reshard_plan_upload(p, RESHARD_FORMAT_PLHD, dp_rank != NULL,
                          dp_rank ? dp_rank->value : 0, &caps, arena, &upload,
                          &err) != RESHARD_OK) {
    return;
  }
  if (page_count > caps.max_page_keys) {
    page_count = caps.max_page_keys;
  }
  reshard_wire_limits_from_pb(limits_pb, &asked);
  reshard_plan_source source = {&upload.layout, upload.layout_id, NULL};
  size_t *start = reshard_arena_array(arena, page_count + 1, sizeof *start);
  size_t *sources = reshard_arena_array(arena, page_count + 1, sizeof *sources);
  if (start == NULL || sources == NULL) {
    return;
  }
  for (size_t i = 0; i <= page_count; i++) {
    start[i] = i;
    sources[i] = 0;
  }
  reshard_load_request request = {
      .placement = p,
      .has_dp_rank = dp_rank != NULL,
      .dp_rank = dp_rank ? dp_rank->value : 0,
      .binding = &binding,
      .page_count = page_count,
      .sources = &source,
      .source_count = 1,
      .page_source_start = start,
      .page_sources = sources,
      .limits = reshard_limits_clamp(&caps, &asked),
  };
  reshard_load_plan plan;
  if (reshard_plan_load(&request, arena, &plan, &err) == RESHARD_OK) {
    reshard_load_plan_free_joins(&plan, 1);
  }
}

static void plan_load(const ProtobufCMessage *m, reshard_arena *arena) {
  const Reshard__V1__PlanLoadRequest *req = (const void *)m;
  reshard_placement p;
  if (req->target_case == RESHARD__V1__PLAN_LOAD_REQUEST__TARGET_PLACEMENT &&
      placement(req->placement, arena, &p)) {
    plan_against_self(&p, req->binding, req->limits, req->target_dp_rank,
                      req->n_page_keys, arena);
  }
}

static void plan_store(const ProtobufCMessage *m, reshard_arena *arena) {
  const Reshard__V1__PlanStoreRequest *req = (const void *)m;
  reshard_placement p;
  if (req->target_case == RESHARD__V1__PLAN_STORE_REQUEST__TARGET_PLACEMENT &&
      placement(req->placement, arena, &p)) {
    plan_against_self(&p, req->binding, req->limits, req->dp_rank,
                      req->page_count, arena);
  }
}

/* Requests that are strings only: decoding is their whole path here. */
static void decoded(const ProtobufCMessage *m, reshard_arena *arena) {
  (void)m;
  (void)arena;
}

static const struct {
  const ProtobufCMessageDescriptor *request;
  void (*check)(const ProtobufCMessage *, reshard_arena *);
} rpcs[] = {
    {&reshard__v1__publish_manifest_request__descriptor, publish},
    {&reshard__v1__get_manifest_request__descriptor, decoded},
    {&reshard__v1__register_pages_request__descriptor, decoded},
    {&reshard__v1__forget_pages_request__descriptor, decoded},
    {&reshard__v1__register_placement_request__descriptor, register_placement},
    {&reshard__v1__plan_upload_request__descriptor, plan_upload},
    {&reshard__v1__plan_load_request__descriptor, plan_load},
    {&reshard__v1__plan_store_request__descriptor, plan_store},
    {&grpc__health__v1__health_check_request__descriptor, decoded},
};

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  if (size < 1) {
    return 0;
  }
  size_t which = data[0] % (sizeof rpcs / sizeof *rpcs);
  reshard_arena arena;
  reshard_arena_init(&arena, 4096);
  if (rpcs[which].request == &reshard__v1__plan_load_request__descriptor ||
      rpcs[which].request == &reshard__v1__plan_store_request__descriptor) {
    const ProtobufCFieldDescriptor *binding =
        protobuf_c_message_descriptor_get_field_by_name(rpcs[which].request,
                                                        "binding");
    binding_paths_agree(data + 1, size - 1, binding->id, &arena);
  }
  ProtobufCMessage *m =
      decode_request(rpcs[which].request, data + 1, size - 1, &arena);
  if (m != NULL) {
    rpcs[which].check(m, &arena);
  }
  reshard_arena_destroy(&arena);
  return 0;
}
