/* libFuzzer target: every RPC's request bytes through decode, validation
 * and, where the request carries what it needs, planning — in process, no
 * network. The first byte picks the RPC, the rest is the request message.
 *
 * The seam is the daemon's wire layer (daemon/wire.h): reshard_wire_unpack
 * and the *_from_pb conversions, then the library's normalize/validate and
 * planners, in the order the handlers in daemon/rpc/ call them. When request
 * decoding moves behind another entry point (budgets while decoding), only
 * decode_request() below changes.
 *
 * Memory pools (SPEC §1.5a) — RegisterMemory's pool, and a PlanLoad's or
 * PlanStore's pooled.inline_pool — are validated against their inline
 * placement (reshard_pool_validate) and survive the catalog record's round
 * trip with the same memory id; a valid pool with a valid block table
 * (reshard_pool_bind) must stand for exactly the explicit binding the
 * SPEC's formula gives (expand_pool below, independent of lib/model/
 * pool.c), which the binding rules of SPEC §1.5 must accept, and the pool
 * with its table, planned as the daemon plans it (request.pooled), must
 * plan like that binding. Pooled plans skip binding validation, so every
 * copy of one is also checked to lie inside its region. */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "binding_compare.h"
#include "cache/inline_cache.h"
#include "grpc/health/v1/health.pb-c.h"
#include "request_compare.h"
#include "reshard/arena.h"
#include "reshard/identity.h"
#include "reshard/join.h"
#include "reshard/plan.h"
#include "reshard/pool.h"
#include "reshard/store.h"
#include "reshard/upload.h"
#include "wire/binding_decode.h"
#include "wire/decode.h"
#include "wire/load_request.h"
#include "wire/transfer_request.h"
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
  caps.max_block_ids = 256;
  caps.max_pool_tensors = 64;
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

/* The daemon decodes PlanLoad and PlanTransfer requests of the engines'
 * shape with reshard_load_request_decode and
 * reshard_transfer_request_decode, and everything else through protobuf-c
 * (rpc/plan_load.c, rpc/plan_transfer.c): wherever a direct decoder
 * returns a request (`direct`), protobuf-c must decode the same bytes
 * under the same caps to the same values. */
static void direct_paths_agree(const ProtobufCMessageDescriptor *type,
                               const void *direct, const uint8_t *data,
                               size_t size, const reshard_limits *caps,
                               reshard_arena *arena) {
  if (direct == NULL) {
    return;
  }
  reshard_error err;
  const void *decoded = reshard_decode(
      type, data, size, reshard_decode_budget(size), caps, arena, &err);
  char why[256];
  if (decoded == NULL) {
    fprintf(stderr, "%s paths differ: direct decoded, protobuf-c \"%s\"\n",
            type->short_name, err.message);
    abort();
  }
  bool equal =
      type == &reshard__v1__plan_load_request__descriptor
          ? reshard_test_load_requests_equal(direct, decoded, why, sizeof why)
          : reshard_test_transfer_requests_equal(direct, decoded, why,
                                                 sizeof why);
  if (!equal) {
    fprintf(stderr, "%s paths differ: %s\n", type->short_name, why);
    abort();
  }
}

static void request_paths_agree(const ProtobufCMessageDescriptor *type,
                                const uint8_t *data, size_t size,
                                reshard_arena *arena) {
  reshard_limits caps = fuzz_caps();
  if (type == &reshard__v1__plan_load_request__descriptor) {
    direct_paths_agree(type,
                       reshard_load_request_decode(data, size, &caps, arena),
                       data, size, &caps, arena);
  } else if (type == &reshard__v1__plan_transfer_request__descriptor) {
    direct_paths_agree(
        type, reshard_transfer_request_decode(data, size, &caps, arena), data,
        size, &caps, arena);
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

/* ---- memory pools ---- */

static void disagree(const char *what, const char *detail) {
  fprintf(stderr, "pooled and explicit forms differ: %s%s%s\n", what,
          detail[0] != '\0' ? ": " : "", detail);
  abort();
}

/* A tensor's strides as the explicit ranges carry them. */
typedef struct tensor_axes {
  uint64_t hb, hs, ts;
  bool per_head;
} tensor_axes;

static tensor_axes axes_of(const reshard_pool_tensor *tensor,
                           const reshard_descriptor *d, uint64_t bs,
                           uint64_t hn) {
  tensor_axes a;
  a.hb = reshard_head_bytes(d, tensor->component);
  a.hs = hn > 1 ? tensor->head_stride_bytes : a.hb;
  uint64_t row = (hn - 1) * a.hs + a.hb;
  a.ts = bs > 1 ? tensor->token_stride_bytes : row;
  a.per_head = hn > 1 && a.ts < row;
  return a;
}

/* SPEC §1.5a's formula as SPEC §1.5 ranges, for tokens [0, span): per
 * tensor one range per block of the span (per block and head when the
 * participant's heads are not one row of the token stride), strides of an
 * axis of count 1 as a packed axis would have them. */
static bool expand_pool(const reshard_pool *pool, const reshard_descriptor *d,
                        const reshard_placement_part *part, const uint32_t *ids,
                        uint64_t span, reshard_arena *arena,
                        reshard_binding *out) {
  uint64_t bs = pool->block_size, hn = part->head_count;
  uint64_t needed = span / bs + (span % bs != 0);
  /* As many as reshard_pool_bind wrote, bounded by max_validation_work. */
  size_t count = 0;
  for (size_t t = 0; t < pool->tensor_count; t++) {
    tensor_axes a = axes_of(&pool->tensors[t], d, bs, hn);
    count += (size_t)needed * (a.per_head ? (size_t)hn : 1);
  }
  reshard_binding_range *ranges =
      reshard_arena_array(arena, count + 1, sizeof *ranges);
  if (ranges == NULL) {
    return false;
  }
  size_t n = 0;
  for (size_t t = 0; t < pool->tensor_count; t++) {
    const reshard_pool_tensor *tensor = &pool->tensors[t];
    tensor_axes a = axes_of(tensor, d, bs, hn);
    for (uint64_t j = 0; j < needed; j++) {
      uint64_t t0 = j * bs;
      uint64_t offset =
          tensor->offset_bytes + (uint64_t)ids[j] * tensor->block_stride_bytes;
      for (uint64_t h = 0; h < (a.per_head ? hn : 1); h++) {
        ranges[n++] = (reshard_binding_range){
            .global_layer_id = tensor->global_layer_id,
            .component = tensor->component,
            .token_start = t0,
            .token_count = span - t0 < bs ? span - t0 : bs,
            .head_start = part->head_start + h,
            .head_count = a.per_head ? 1 : hn,
            .region_id = tensor->region_id,
            .offset_bytes = offset + h * a.hs,
            .token_stride_bytes = a.ts,
            .head_stride_bytes = a.per_head ? a.hb : a.hs,
        };
      }
    }
  }
  *out = (reshard_binding){pool->participant_id, pool->endpoint, pool->regions,
                           pool->region_count,   ranges,         n};
  return true;
}

static void same_bound(const reshard_bound_binding *a,
                       const reshard_bound_binding *b) {
  char why[160] = "";
  if (a->range_count != b->range_count || a->token_span != b->token_span ||
      a->group_count != b->group_count) {
    snprintf(why, sizeof why,
             "%zu ranges over %llu tokens, explicit %zu over "
             "%llu",
             a->range_count, (unsigned long long)a->token_span, b->range_count,
             (unsigned long long)b->token_span);
    disagree("bound bindings", why);
  }
  for (size_t g = 0; g <= a->group_count; g++) {
    if (a->group_start[g] != b->group_start[g]) {
      disagree("bound bindings' groups", "");
    }
  }
  for (size_t i = 0; i < a->range_count; i++) {
    const reshard_bound_range *x = &a->ranges[i], *y = &b->ranges[i];
    if (x->layer_index != y->layer_index || x->component != y->component ||
        x->token_start != y->token_start || x->token_end != y->token_end ||
        x->head_start != y->head_start || x->head_end != y->head_end ||
        x->region_index != y->region_index ||
        x->region_offset != y->region_offset ||
        x->token_stride != y->token_stride ||
        x->head_stride != y->head_stride) {
      snprintf(why, sizeof why, "range %zu", i);
      disagree("bound bindings", why);
    }
  }
}

/* Every copy of a plan made without binding validation lies inside its
 * region; the two plans of one request, when both were made, are equal. */
static void check_copies(const reshard_copy *copies, size_t count,
                         const reshard_binding *memory) {
  for (size_t i = 0; i < count; i++) {
    const reshard_copy *c = &copies[i];
    if (c->region_index >= memory->region_count ||
        c->nbytes > memory->regions[c->region_index].nbytes ||
        c->region_offset >
            memory->regions[c->region_index].nbytes - c->nbytes) {
      fprintf(
          stderr, "pooled plan: copy %zu [%llu, +%llu) leaves region %llu\n", i,
          (unsigned long long)c->region_offset, (unsigned long long)c->nbytes,
          (unsigned long long)c->region_index);
      abort();
    }
  }
}

static void same_plans(const reshard_copy *a, size_t na,
                       const reshard_batch *ba, size_t nba,
                       const reshard_copy *b, size_t nb,
                       const reshard_batch *bb, size_t nbb) {
  if (na != nb || nba != nbb) {
    disagree("plans' sizes", "");
  }
  for (size_t i = 0; i < na; i++) {
    if (a[i].page_index != b[i].page_index ||
        a[i].part_index != b[i].part_index ||
        a[i].part_offset != b[i].part_offset ||
        a[i].region_index != b[i].region_index ||
        a[i].region_offset != b[i].region_offset ||
        a[i].nbytes != b[i].nbytes) {
      disagree("plans' copies", "");
    }
  }
  for (size_t i = 0; i < nba; i++) {
    if (ba[i].first != bb[i].first || ba[i].count != bb[i].count ||
        ba[i].bytes != bb[i].bytes) {
      disagree("plans' batches", "");
    }
  }
}

/* Plans `memory` (pre-bound when `bound`, else validated by the planner)
 * into the layout its own placement uploads, as a load or a store. */
typedef struct planned {
  reshard_status status;
  const reshard_copy *copies;
  size_t copy_count;
  const reshard_batch *batches;
  size_t batch_count;
} planned;

static planned
plan_memory(const reshard_placement *p, const reshard_upload_plan *upload,
            const reshard_binding *memory, const reshard_pooled_memory *pooled,
            const reshard_limits *limits, bool has_dp_rank, uint64_t dp_rank,
            uint64_t page_count, bool store, reshard_arena *arena) {
  reshard_error err;
  planned out = {RESHARD_INTERNAL, NULL, 0, NULL, 0};
  if (store) {
    reshard_store_request request = {
        .placement = p,
        .has_dp_rank = has_dp_rank,
        .dp_rank = dp_rank,
        .binding = memory,
        .page_count = page_count,
        .layout = &upload->layout,
        .layout_id = upload->layout_id,
        .limits = *limits,
        .pooled = pooled,
    };
    reshard_store_plan plan;
    out.status = reshard_plan_store(&request, arena, &plan, &err);
    if (out.status == RESHARD_OK) {
      out = (planned){RESHARD_OK, plan.copies, plan.copy_count, plan.batches,
                      plan.batch_count};
      reshard_join_free(plan.built_join);
    }
    return out;
  }
  reshard_plan_source source = {&upload->layout, upload->layout_id, NULL};
  size_t *start = reshard_arena_array(arena, page_count + 1, sizeof *start);
  size_t *sources = reshard_arena_array(arena, page_count + 1, sizeof *sources);
  if (start == NULL || sources == NULL) {
    return out;
  }
  for (size_t i = 0; i <= page_count; i++) {
    start[i] = i;
    sources[i] = 0;
  }
  reshard_load_request request = {
      .placement = p,
      .has_dp_rank = has_dp_rank,
      .dp_rank = dp_rank,
      .binding = memory,
      .page_count = page_count,
      .sources = &source,
      .source_count = 1,
      .page_source_start = start,
      .page_sources = sources,
      .limits = *limits,
      .pooled = pooled,
  };
  reshard_load_plan plan;
  out.status = reshard_plan_load(&request, arena, &plan, &err);
  if (out.status == RESHARD_OK) {
    out = (planned){RESHARD_OK, plan.copies, plan.copy_count, plan.batches,
                    plan.batch_count};
    reshard_load_plan_free_joins(&plan, 1);
  }
  return out;
}

/* As the daemon stores a pool (memory.c): the record is the pool and its
 * placement in canonical form; read back, it is the same pool, still
 * valid, with the same memory id. */
static void record_round_trip(const reshard_pool *pool,
                              const reshard_placement *p,
                              const reshard_placement_part *part,
                              const reshard_limits *caps,
                              reshard_arena *arena) {
  reshard_error err;
  reshard_error_clear(&err);
  char placement_id[RESHARD_ID_SIZE], id[RESHARD_ID_SIZE],
      again[RESHARD_ID_SIZE];
  if (reshard_placement_id(p, placement_id, &err) != RESHARD_OK ||
      reshard_memory_id(pool, placement_id, id, &err) != RESHARD_OK) {
    return;
  }
  Reshard__V1__MemoryPool *pb = reshard_wire_pool_to_pb(pool, arena);
  size_t length = 0;
  uint8_t *bytes =
      pb != NULL ? reshard_wire_pack(&pb->base, arena, &length) : NULL;
  if (bytes == NULL) {
    return;
  }
  const Reshard__V1__MemoryPool *back = (const void *)reshard_wire_unpack(
      &reshard__v1__memory_pool__descriptor, bytes, length, arena, &err);
  reshard_pool copy;
  reshard_bound_pool bound;
  if (back == NULL ||
      reshard_wire_pool_from_pb(back, "pool", arena, &copy, &err) !=
          RESHARD_OK ||
      reshard_pool_validate(&copy, &p->descriptor, part, caps, "pool", arena,
                            &bound, &err) != RESHARD_OK ||
      reshard_memory_id(&copy, placement_id, again, &err) != RESHARD_OK ||
      strcmp(id, again) != 0) {
    fprintf(stderr, "memory pool record: %s read back as %s (%s)\n", id,
            back == NULL ? "nothing" : again, err.message);
    abort();
  }
}

/* A pool against its inline placement; with a block table (`ids`, or
 * when NULL one made up from the pool) bound over `page_count` pages and
 * planned both ways. */
static void pool_against_self(const reshard_placement *p,
                              const Reshard__V1__MemoryPool *pool_pb,
                              const uint32_t *ids, size_t id_count,
                              uint64_t page_count,
                              const Reshard__V1__Limits *limits_pb,
                              const Google__Protobuf__UInt32Value *dp_rank,
                              bool store, reshard_arena *arena) {
  reshard_limits caps = fuzz_caps(), asked;
  reshard_pool pool;
  reshard_bound_pool bound;
  reshard_error err;
  const reshard_placement_part *part = NULL;
  if (reshard_wire_pool_from_pb(pool_pb, "pool", arena, &pool, &err) !=
          RESHARD_OK ||
      pool.participant_id == NULL ||
      (part = reshard_placement_find_part(p, pool.participant_id)) == NULL ||
      reshard_pool_validate(&pool, &p->descriptor, part, &caps, "pool", arena,
                            &bound, &err) != RESHARD_OK) {
    return;
  }
  record_round_trip(&pool, p, part, &caps, arena);
  uint64_t page = p->descriptor.page_size;
  if (ids == NULL) {
    /* RegisterMemory has no table: the pool's last blocks, backwards, for
     * as many whole pages as they hold (at most max_block_ids of them). */
    uint64_t blocks = pool.num_blocks < caps.max_block_ids ? pool.num_blocks
                                                           : caps.max_block_ids;
    page_count = page != 0 ? blocks * pool.block_size / page : 0;
    uint32_t *made = reshard_arena_array(arena, blocks + 1, sizeof *made);
    if (made == NULL) {
      return;
    }
    for (uint64_t i = 0; i < blocks; i++) {
      made[i] = (uint32_t)(pool.num_blocks - 1 - i);
    }
    ids = made;
    id_count = (size_t)blocks;
  }
  if (page_count > caps.max_page_keys) {
    page_count = caps.max_page_keys;
  }
  if (page_count == 0) {
    return;
  }
  reshard_wire_limits_from_pb(limits_pb, &asked);
  reshard_limits limits = reshard_limits_clamp(&caps, &asked);
  uint64_t span = page_count * page;
  reshard_bound_binding pooled, checked;
  if (reshard_pool_bind(&bound, ids, id_count, span, &limits, "pooled", arena,
                        &pooled, &err) != RESHARD_OK) {
    return;
  }
  reshard_binding explicit;
  if (!expand_pool(&pool, &p->descriptor, part, ids, span, arena, &explicit)) {
    return;
  }
  reshard_status validated =
      reshard_binding_validate(&explicit, &p->descriptor, part, page_count,
                               &limits, arena, &checked, &err);
  if (validated == RESHARD_OK) {
    same_bound(&pooled, &checked);
  } else if (validated != RESHARD_RESOURCE_EXHAUSTED) {
    disagree("the explicit binding of a valid pool is refused", err.message);
  }
  reshard_upload_plan upload;
  bool has_dp = dp_rank != NULL;
  uint64_t dp = has_dp ? dp_rank->value : 0;
  if (reshard_plan_upload(p, RESHARD_FORMAT_PLHD, has_dp, dp, &caps, arena,
                          &upload, &err) != RESHARD_OK) {
    return;
  }
  /* As the daemon plans a pool: its regions, no ranges, the pool and the
   * table. */
  reshard_binding memory = explicit;
  memory.ranges = NULL;
  memory.range_count = 0;
  reshard_pooled_memory table = {&bound, ids, id_count};
  planned a = plan_memory(p, &upload, &memory, &table, &limits, has_dp, dp,
                          page_count, store, arena);
  if (a.status == RESHARD_OK) {
    check_copies(a.copies, a.copy_count, &memory);
  }
  if (validated != RESHARD_OK) {
    return;
  }
  planned b = plan_memory(p, &upload, &explicit, NULL, &limits, has_dp, dp,
                          page_count, store, arena);
  if (a.status == RESHARD_OK && b.status == RESHARD_OK) {
    same_plans(a.copies, a.copy_count, a.batches, a.batch_count, b.copies,
               b.copy_count, b.batches, b.batch_count);
  } else if (a.status != b.status) {
    disagree("plans' statuses", "");
  }
}

static void register_memory(const ProtobufCMessage *m, reshard_arena *arena) {
  const Reshard__V1__RegisterMemoryRequest *req = (const void *)m;
  reshard_placement p;
  if (req->target_case ==
          RESHARD__V1__REGISTER_MEMORY_REQUEST__TARGET_PLACEMENT &&
      placement(req->placement, arena, &p)) {
    pool_against_self(&p, req->pool, NULL, 0, 0, NULL, NULL, false, arena);
  }
}

/* A plan's pooled.inline_pool with its block table, as a load or a store;
 * false when the request names its memory otherwise. */
static bool pooled_against_self(const reshard_placement *p,
                                const Reshard__V1__PooledMemory *pooled,
                                uint64_t page_count,
                                const Reshard__V1__Limits *limits,
                                const Google__Protobuf__UInt32Value *dp_rank,
                                bool store, reshard_arena *arena) {
  if (pooled == NULL) {
    return false;
  }
  if (pooled->pool_case == RESHARD__V1__POOLED_MEMORY__POOL_INLINE_POOL) {
    pool_against_self(p, pooled->inline_pool, pooled->block_ids,
                      pooled->n_block_ids, page_count, limits, dp_rank, store,
                      arena);
  }
  return true;
}

static void plan_load(const ProtobufCMessage *m, reshard_arena *arena) {
  const Reshard__V1__PlanLoadRequest *req = (const void *)m;
  reshard_placement p;
  if (req->target_case == RESHARD__V1__PLAN_LOAD_REQUEST__TARGET_PLACEMENT &&
      placement(req->placement, arena, &p) &&
      !pooled_against_self(&p, req->pooled, req->n_page_keys, req->limits,
                           req->target_dp_rank, false, arena)) {
    plan_against_self(&p, req->binding, req->limits, req->target_dp_rank,
                      req->n_page_keys, arena);
  }
}

static void plan_store(const ProtobufCMessage *m, reshard_arena *arena) {
  const Reshard__V1__PlanStoreRequest *req = (const void *)m;
  reshard_placement p;
  if (req->target_case == RESHARD__V1__PLAN_STORE_REQUEST__TARGET_PLACEMENT &&
      placement(req->placement, arena, &p) &&
      !pooled_against_self(&p, req->pooled, req->page_count, req->limits,
                           req->dp_rank, true, arena)) {
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
    /* Appended, so the committed seeds keep their first bytes' meaning. */
    {&reshard__v1__register_memory_request__descriptor, register_memory},
    {&reshard__v1__forget_memory_request__descriptor, decoded},
    {&reshard__v1__plan_transfer_request__descriptor, decoded},
};

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  if (size < 1) {
    return 0;
  }
  size_t which = data[0] % (sizeof rpcs / sizeof *rpcs);
  static bool capped;
  if (!capped) {
    /* The daemon decodes every request under its flags' caps: these. */
    reshard_limits caps = fuzz_caps();
    reshard_decode_set_caps(&caps);
    capped = true;
  }
  reshard_arena arena;
  reshard_arena_init(&arena, 4096);
  if (rpcs[which].request == &reshard__v1__plan_load_request__descriptor ||
      rpcs[which].request == &reshard__v1__plan_store_request__descriptor) {
    const ProtobufCFieldDescriptor *binding =
        protobuf_c_message_descriptor_get_field_by_name(rpcs[which].request,
                                                        "binding");
    binding_paths_agree(data + 1, size - 1, binding->id, &arena);
  }
  request_paths_agree(rpcs[which].request, data + 1, size - 1, &arena);
  ProtobufCMessage *m =
      decode_request(rpcs[which].request, data + 1, size - 1, &arena);
  if (m != NULL) {
    rpcs[which].check(m, &arena);
  }
  reshard_arena_destroy(&arena);
  return 0;
}
