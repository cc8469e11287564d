/* The PlanStore RPC (SPEC §2.5, §3.3): the request decoded off the loop
 * when it is large (its binding straight from its wire bytes, as
 * PlanLoad's), the manifest by key (cache, else catalog), the writer's
 * placement inline or by id, then reshard_plan_store on the loop (small
 * bindings) or the work pool, with the join template cached under the
 * same key a load of that participant uses (the two joins are the same).
 * The response is encoded straight from the plan (plan_response.h) where
 * the plan completes. */
#include <string.h>

#include "cache/inline_cache.h"
#include "observe/log.h"
#include "reshard/store.h"
#include "rpc/planner_internal.h"
#include "wire/binding_decode.h"
#include "wire/decode.h"
#include "wire/plan_response.h"
#include "wire/wire.h"

/* PlanStoreRequest.binding (proto/reshard/v1/planner.proto). */
enum { FIELD_BINDING = 5 };

typedef struct store_ctx {
  reshard_call *call;
  reshard_planner *planner;
  Reshard__V1__PlanStoreRequest *request;

  reshard__target target;
  uint64_t effective_dp_rank;
  reshard_binding binding;
  uint64_t binding_values; /* sum of token_count * head_count, saturated */
  reshard__pooled pooled;  /* the memory, when given as a pool */
  reshard_limits limits;   /* the request's, clamped to the planner's caps */

  reshard_shared_manifest *manifest;
  reshard_shared_join *join; /* cached template, or NULL */
  bool manifest_hit, join_hit;

  reshard_work work;
  /* Without runs, the planner's varint columns go here and are sent from
   * here (response_memory.h); NULL when it could not be had. */
  reshard_response_memory *response_memory;
  reshard_store_request store;
  reshard_store_plan plan;
  bool planned;
  bool plan_ran;
  reshard_status status;
  reshard_error err;
  uint64_t plan_us;
  uint64_t response_bytes;

  bool large; /* holds one of the planner's large places */
  /* The request's bytes still to decode; without its binding when
   * `binding_apart`, which reshard_binding_decode reads from `binding_bytes`.
   */
  const uint8_t *payload;
  size_t payload_length;
  reshard_wire_span binding_bytes;
  bool binding_apart;
} store_ctx;

static void store_release(store_ctx *ctx) {
  if (ctx->large) {
    ctx->large = false;
    reshard__planner_large_done(ctx->planner);
  }
  reshard_shared_unref(ctx->manifest ? &ctx->manifest->base : NULL);
  reshard_shared_unref(ctx->join ? &ctx->join->base : NULL);
  ctx->manifest = NULL;
  ctx->join = NULL;
  reshard__target_release(&ctx->target);
  reshard__pooled_release(&ctx->pooled);
}

static void store_fail(store_ctx *ctx, const reshard_error *err) {
  store_release(ctx);
  reshard_call_fail(ctx->call, err);
}

static void log_store(const store_ctx *ctx) {
  reshard_log_line line;
  if (!reshard_log_begin(&line, RESHARD_LOG_DEBUG, "store plan")) {
    return;
  }
  if (ctx->request->operation_id[0] != '\0') {
    reshard_log_str(&line, "operation_id", ctx->request->operation_id);
  }
  reshard_log_str(&line, "code", reshard_status_name(ctx->status));
  reshard_log_str(&line, "participant", ctx->binding.participant_id);
  reshard_log_u64(&line, "pages", ctx->request->page_count);
  if (ctx->status == RESHARD_OK) {
    reshard_log_u64(&line, "parts", ctx->plan.part_count);
    reshard_log_u64(&line, "operations", ctx->plan.operations);
    reshard_log_u64(&line, "bytes", ctx->plan.bytes);
    if (ctx->request->runs) {
      reshard_log_u64(&line, "runs", ctx->plan.runs.run_count);
    }
  }
  reshard_log_u64(&line, "manifest_hits", ctx->manifest_hit);
  reshard_log_u64(&line, "join_hits", ctx->join_hit);
  reshard_log_u64(&line, "plan_us", ctx->plan_us);
  reshard_log_end(&line);
}

static size_t write_response(void *response, uint8_t *out) {
  return reshard_store_response_write(response, out);
}

/* Packs the response of a plan that lives in `scratch`. */
static void encode_plan(store_ctx *ctx, reshard_arena *scratch) {
  reshard_call *call = ctx->call;
  if ((ctx->status = reshard__planner_check_planned(call, &ctx->err)) !=
      RESHARD_OK) {
    return;
  }
  reshard_store_response response;
  reshard_status measured = reshard_store_response_measure(
      &ctx->plan, &ctx->binding, ctx->manifest->layout_id, scratch, &response);
  if ((ctx->status = reshard__planner_pack_response(
           call, measured, ctx->response_memory, &response.batches,
           response.size, &response, reshard_store_response_write_pieces,
           write_response, &ctx->err)) == RESHARD_OK) {
    ctx->response_bytes = response.size;
  }
}

/* Worker thread (or the loop for small plans): plan and pack. Touches only
 * the context, the call's arena and response, and immutable shared data. */
static void store_work(reshard_work *work) {
  store_ctx *ctx = work->data;
  reshard_call *call = ctx->call;
  if ((ctx->status = reshard__planner_check_call(call, &ctx->err)) !=
      RESHARD_OK) {
    return;
  }
  /* The plan lives in a scratch arena freed once the response is
   * encoded, so a call waiting to send holds its response, not its plan;
   * only the plan's counts outlive it. */
  reshard_arena scratch;
  reshard_arena_init_from(&scratch, 64 * 1024,
                          reshard_call_arena(call)->source);
  ctx->response_memory = reshard__planner_column_memory(
      call, ctx->store.varint_columns, &ctx->store.column_arena);
  uint64_t start = uv_hrtime();
  ctx->status =
      reshard_plan_store(&ctx->store, &scratch, &ctx->plan, &ctx->err);
  ctx->plan_us = (uv_hrtime() - start) / 1000;
  ctx->plan_ran = true;
  if (ctx->status == RESHARD_OK) {
    ctx->planned = true;
    encode_plan(ctx, &scratch);
  }
  reshard_arena_destroy(&scratch);
  /* The response's slices hold what they point into. */
  reshard_response_memory_release(ctx->response_memory);
  ctx->response_memory = NULL;
  ctx->store.column_arena = NULL;
}

/* Loop: keep the join template the planner built, count the plan
 * (PlanLoad's families, method="PlanStore"), then answer. */
static void store_after_work(reshard_work *work) {
  store_ctx *ctx = work->data;
  if (ctx->planned && ctx->plan.built_join != NULL) {
    reshard__planner_keep_join(
        ctx->planner, ctx->plan.built_join, ctx->manifest->layout_id,
        &ctx->target, ctx->effective_dp_rank, ctx->binding.participant_id);
    ctx->plan.built_join = NULL;
  }
  log_store(ctx);
  if (ctx->plan_ran) {
    bool ok = ctx->planned;
    reshard_metrics_record_plan(
        ctx->planner->metrics,
        &(reshard_metrics_plan){
            .method = RESHARD_METRICS_PLAN_STORE,
            .ok = ok,
            .plan_us = ctx->plan_us,
            .copies = ok ? ctx->plan.operations : 0,
            .copies_before_coalescing =
                ok ? ctx->plan.copies_before_coalescing : 0,
            .bytes = ok ? ctx->plan.bytes : 0,
            .runs_requested = ok && ctx->store.runs,
            .runs = ok ? ctx->plan.runs.run_count : 0,
            .response_bytes = ctx->response_bytes,
        });
  }
  store_release(ctx);
  if (ctx->status != RESHARD_OK) {
    reshard_call_fail(ctx->call, &ctx->err);
  } else {
    reshard_call_send_packed(ctx->call);
  }
}

static void store_dispatch(reshard_call *call, const reshard_error *err,
                           void *data);

/* The manifest is resolved: attach a cached join and plan. */
static void store_plan(store_ctx *ctx) {
  const reshard_shared_manifest *manifest = ctx->manifest;
  reshard__planner_find_join(ctx->planner, manifest, &ctx->target,
                             ctx->effective_dp_rank,
                             ctx->binding.participant_id, &ctx->join);
  ctx->join_hit = ctx->join != NULL;
  ctx->store = (reshard_store_request){
      .placement = ctx->target.placement,
      .has_dp_rank = ctx->request->dp_rank != NULL,
      .dp_rank = ctx->request->dp_rank ? ctx->request->dp_rank->value : 0,
      .binding = &ctx->binding,
      .page_count = ctx->request->page_count,
      .layout = &manifest->manifest.layout,
      .layout_id = manifest->layout_id,
      .join = ctx->join ? ctx->join->join : NULL,
      .limits = ctx->limits,
      .runs = ctx->request->runs,
      /* The response is the runs or the columns, as for loads. */
      .varint_columns = !ctx->request->runs,
      .omit_copies = true,
      .pooled = ctx->pooled.ready ? &ctx->pooled.memory : NULL,
      .participant_field =
          reshard__pooled_participant_field(ctx->request->pooled),
  };
  /* The plan's memory is asked from --max-inflight-bytes before it is
   * spent, as for loads. */
  reshard_call_reserve(ctx->call,
                       reshard__planner_plan_reservation(
                           ctx->binding_values, ctx->limits.max_operations),
                       store_dispatch, ctx);
}

/* Plans on the loop or the pool once the plan's memory is granted. */
static void store_dispatch(reshard_call *call, const reshard_error *err,
                           void *data) {
  (void)call;
  store_ctx *ctx = data;
  if (err != NULL) {
    store_fail(ctx, err);
    return;
  }
  ctx->work.data = ctx;
  if (reshard__planner_run(ctx->planner, ctx->call, &ctx->work,
                           ctx->binding_values, store_work,
                           store_after_work) != 0) {
    reshard_error failure;
    reshard_error_set(&failure, RESHARD_UNAVAILABLE, "cannot queue the plan");
    store_fail(ctx, &failure);
  }
}

static void on_manifest_fetched(void *data, const reshard_error *err,
                                const reshard_catalog_record *records,
                                size_t count) {
  store_ctx *ctx = data;
  if (err->code != RESHARD_OK) {
    store_fail(ctx, err);
    return;
  }
  reshard_error failure;
  ctx->manifest = reshard__planner_manifest_found(
      ctx->planner, ctx->request->manifest_key, records, count, &failure);
  if (ctx->manifest == NULL) {
    store_fail(ctx, &failure);
    return;
  }
  store_plan(ctx);
}

/* Decodes the request and its binding; fills ctx->status and ctx->err.
 * Any thread. */
static void decode_request(store_ctx *ctx) {
  reshard_arena *arena = reshard_call_arena(ctx->call);
  ctx->request = (Reshard__V1__PlanStoreRequest *)reshard_wire_unpack(
      &reshard__v1__plan_store_request__descriptor, ctx->payload,
      ctx->payload_length, arena, &ctx->err);
  if (ctx->request == NULL) {
    ctx->status = ctx->err.code;
    return;
  }
  reshard_limits requested;
  reshard_wire_limits_from_pb(ctx->request->limits, &requested);
  ctx->limits = reshard_limits_clamp(&ctx->planner->caps, &requested);
  /* Decoding first, so that a request over a decode cap is refused as
   * such whatever else is wrong with it. */
  bool has_binding = ctx->request->binding != NULL || ctx->binding_apart;
  if (has_binding == (ctx->request->pooled != NULL)) {
    ctx->status = reshard_error_set(
        &ctx->err, RESHARD_INVALID_ARGUMENT,
        has_binding ? "binding, pooled: set exactly one of the two, not both"
                    : "binding, pooled: set exactly one of the two (the "
                      "writer's memory)");
    return;
  }
  char domain[RESHARD_DIGEST_HEX_LEN + 1];
  if (ctx->request->pooled != NULL) {
    ctx->status = reshard__pooled_check(ctx->request->pooled, &ctx->err);
    if (ctx->status == RESHARD_OK) {
      ctx->status = reshard__planner_parse_manifest_key(
          ctx->request->manifest_key, "manifest_key", domain, &ctx->err);
    }
    return;
  }
  const reshard_wire_span *bytes = &ctx->binding_bytes;
  ctx->status =
      ctx->binding_apart
          ? reshard_binding_decode(bytes->value, bytes->value_length, "binding",
                                   reshard_decode_caps(),
                                   reshard_decode_budget(bytes->value_length),
                                   arena, &ctx->binding, &ctx->err)
          : reshard_wire_binding_from_pb(ctx->request->binding, "binding",
                                         arena, &ctx->binding, &ctx->err);
  if (ctx->status != RESHARD_OK) {
    return;
  }
  /* An upper bound of the plan's size: one copy per bound value. */
  ctx->binding_values = reshard_binding_values(&ctx->binding);
  ctx->status = reshard__planner_parse_manifest_key(
      ctx->request->manifest_key, "manifest_key", domain, &ctx->err);
}

static void on_target(void *data, const reshard_error *err);

/* Loop: the request is decoded; resolve its target, its memory and its
 * manifest. */
static void continue_plan_store(store_ctx *ctx) {
  if (ctx->status != RESHARD_OK) {
    store_fail(ctx, &ctx->err);
    return;
  }
  const Reshard__V1__PlanStoreRequest *request = ctx->request;
  reshard__target_resolve(
      &ctx->target, ctx->planner, ctx->call,
      request->target_case == RESHARD__V1__PLAN_STORE_REQUEST__TARGET_PLACEMENT,
      request->placement,
      request->target_case ==
              RESHARD__V1__PLAN_STORE_REQUEST__TARGET_PLACEMENT_ID
          ? request->placement_id
          : NULL,
      on_target, ctx);
}

static void fetch_manifest(store_ctx *ctx);

static void on_pooled(void *data, const reshard_error *err) {
  store_ctx *ctx = data;
  if (err != NULL) {
    store_fail(ctx, err);
    return;
  }
  ctx->binding = ctx->pooled.binding;
  ctx->binding_values = ctx->pooled.values;
  fetch_manifest(ctx);
}

/* Loop: the target is resolved; resolve the memory and the manifest. */
static void on_target(void *data, const reshard_error *err) {
  store_ctx *ctx = data;
  if (err != NULL) {
    store_fail(ctx, err);
    return;
  }
  const Reshard__V1__PlanStoreRequest *request = ctx->request;
  ctx->effective_dp_rank =
      reshard__target_dp_rank(&ctx->target, request->dp_rank != NULL,
                              request->dp_rank ? request->dp_rank->value : 0);
  if (request->pooled != NULL) {
    uint64_t span = (uint64_t)request->page_count *
                    ctx->target.placement->descriptor.page_size;
    reshard__pooled_resolve(ctx->planner, ctx->call, request->pooled,
                            &ctx->target, span, &ctx->limits, &ctx->pooled,
                            on_pooled, ctx);
    return;
  }
  fetch_manifest(ctx);
}

static void fetch_manifest(store_ctx *ctx) {
  const char *key = ctx->request->manifest_key;
  reshard_shared *hit = reshard_cache_get(
      ctx->planner->cache, RESHARD_CACHE_MANIFEST, key, strlen(key));
  if (hit != NULL) {
    ctx->manifest = (reshard_shared_manifest *)hit;
    ctx->manifest_hit = true;
    store_plan(ctx);
    return;
  }
  const char *keys[1] = {key};
  ctx->planner->catalog->vtable->get_manifests(ctx->planner->catalog, keys, 1,
                                               on_manifest_fetched, ctx);
}

static void decode_work(reshard_work *work) {
  decode_request(work->data);
}

static void decode_after_work(reshard_work *work) {
  continue_plan_store(work->data);
}

static void start_plan_store(reshard_planner *planner, reshard_call *call,
                             bool large) {
  store_ctx *ctx = reshard__planner_call_alloc(call, sizeof *ctx);
  if (ctx == NULL) {
    if (large) {
      reshard__planner_large_done(planner);
    }
    return;
  }
  ctx->call = call;
  ctx->planner = planner;
  ctx->large = large;
  reshard_error err;
  if (reshard__planner_check_call(call, &err) != RESHARD_OK) {
    store_fail(ctx, &err);
    return;
  }
  size_t length;
  const uint8_t *payload = reshard_call_payload(call, &length);
  /* The binding, when there is exactly one, is decoded from its own bytes
   * (binding_decode.h); protobuf-c decodes the rest. */
  unsigned bindings;
  if (reshard_inline_find(payload, length, FIELD_BINDING, &ctx->binding_bytes,
                          &bindings) &&
      bindings == 1) {
    const reshard_wire_span *strip[1] = {&ctx->binding_bytes};
    size_t stripped_length;
    uint8_t *stripped = reshard_inline_strip(
        payload, length, strip, 1, reshard_call_arena(call), &stripped_length);
    if (stripped != NULL) {
      payload = stripped;
      length = stripped_length;
      ctx->binding_apart = true;
    }
  }
  ctx->payload = payload;
  ctx->payload_length = length;
  ctx->work.data = ctx;
  if (reshard__planner_decode(planner, ctx->call, &ctx->work, large,
                              decode_work, decode_after_work) != 0) {
    reshard_error failure;
    reshard_error_set(&failure, RESHARD_UNAVAILABLE,
                      "cannot queue the request");
    store_fail(ctx, &failure);
  }
}

void reshard__handle_plan_store(reshard_call *call, void *data) {
  reshard__planner_admit(data, call, start_plan_store);
}
