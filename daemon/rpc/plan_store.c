/* The PlanStore RPC (SPEC §2.5, §3.3): the manifest by key (cache, else
 * catalog), the writer's placement inline or by id, then
 * reshard_plan_store on the loop (small bindings) or libuv's thread pool,
 * with the join template cached under the same key a load of that
 * participant uses (the two joins are the same). The response is built
 * with protobuf-c by the wire layer and packed where the plan completes. */
#include <stdio.h>
#include <string.h>

#include "log.h"
#include "reshard/checked.h"
#include "reshard/store.h"
#include "rpc/planner_internal.h"
#include "wire.h"

typedef struct store_ctx {
  reshard_call *call;
  reshard_planner *planner;
  Reshard__V1__PlanStoreRequest *request;

  reshard_shared_placement *placement_ref; /* when given by id */
  reshard_placement inline_placement;
  const reshard_placement *placement;
  char placement_id[RESHARD_ID_SIZE];
  uint64_t effective_dp_rank;
  reshard_binding binding;
  uint64_t binding_values; /* sum of token_count * head_count, saturated */

  reshard_shared_manifest *manifest;
  reshard_shared_join *join; /* cached template, or NULL */
  bool manifest_hit, join_hit;

  uv_work_t work;
  reshard_store_request store;
  reshard_store_plan plan;
  bool planned;
  bool plan_ran;
  reshard_status status;
  reshard_error err;
  uint64_t plan_us;
} store_ctx;

static void store_release(store_ctx *ctx) {
  reshard_shared_unref(ctx->manifest ? &ctx->manifest->base : NULL);
  reshard_shared_unref(ctx->join ? &ctx->join->base : NULL);
  reshard_shared_unref(ctx->placement_ref ? &ctx->placement_ref->base : NULL);
  ctx->manifest = NULL;
  ctx->join = NULL;
  ctx->placement_ref = NULL;
}

static void store_fail(store_ctx *ctx, const reshard_error *err) {
  store_release(ctx);
  reshard_call_fail(ctx->call, err);
}

static void store_fail_code(store_ctx *ctx, reshard_status code,
                            const char *message) {
  reshard_error err;
  reshard_error_set(&err, code, "%s", message);
  store_fail(ctx, &err);
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

/* Worker thread (or the loop for small plans): plan and pack. Touches only
 * the context, the call's arena and response, and immutable shared data. */
static void store_work(uv_work_t *work) {
  store_ctx *ctx = work->data;
  reshard_call *call = ctx->call;
  if (reshard_call_cancelled(call)) {
    ctx->status = reshard_error_set(&ctx->err, RESHARD_UNAVAILABLE,
                                    "the call was cancelled before planning");
    return;
  }
  if (reshard_call_expired(call)) {
    ctx->status = reshard_error_set(&ctx->err, RESHARD_DEADLINE_EXCEEDED,
                                    "deadline exceeded before planning");
    return;
  }
  reshard_arena *arena = reshard_call_arena(call);
  uint64_t start = uv_hrtime();
  ctx->status = reshard_plan_store(&ctx->store, arena, &ctx->plan, &ctx->err);
  ctx->plan_us = (uv_hrtime() - start) / 1000;
  ctx->plan_ran = true;
  if (ctx->status != RESHARD_OK) {
    return;
  }
  ctx->planned = true;
  if (reshard_call_expired(call)) {
    ctx->status = reshard_error_set(&ctx->err, RESHARD_DEADLINE_EXCEEDED,
                                    "deadline exceeded while planning; the "
                                    "plan was discarded");
    return;
  }
  Reshard__V1__PlanStoreResponse *response = reshard_wire_store_plan_to_pb(
      &ctx->plan, &ctx->binding, ctx->manifest->layout_id, arena);
  if (response == NULL || reshard_call_pack(call, &response->base)) {
    ctx->status = reshard_error_set(&ctx->err, RESHARD_RESOURCE_EXHAUSTED,
                                    "out of memory building the response");
  }
}

/* Loop: keep the join template the planner built, then answer. */
static void store_after_work(uv_work_t *work, int status) {
  store_ctx *ctx = work->data;
  if (status != 0) {
    ctx->status = reshard_error_set(&ctx->err, RESHARD_UNAVAILABLE,
                                    "planning was cancelled (shutting down)");
  }
  if (ctx->planned && ctx->plan.built_join != NULL) {
    reshard_shared_join *shared =
        reshard_shared_join_wrap(ctx->plan.built_join);
    ctx->plan.built_join = NULL;
    char key[RESHARD_ID_SIZE * 2 + 512];
    size_t length = reshard_cache_join_key(
        key, sizeof key, ctx->manifest->layout_id, ctx->placement_id,
        ctx->effective_dp_rank, ctx->binding.participant_id);
    if (shared != NULL && length > 0 && status == 0) {
      reshard_cache_put(ctx->planner->cache, RESHARD_CACHE_JOIN, key, length,
                        &shared->base);
    }
    reshard_shared_unref(shared ? &shared->base : NULL);
  }
  log_store(ctx);
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
  const char *participant = ctx->binding.participant_id;
  const reshard_placement_part *part =
      participant ? reshard_placement_find_part(ctx->placement, participant)
                  : NULL;
  if (part != NULL &&
      reshard_descriptor_equal(&manifest->manifest.layout.descriptor,
                               &ctx->placement->descriptor, NULL)) {
    char key[RESHARD_ID_SIZE * 2 + 512];
    size_t length = reshard_cache_join_key(key, sizeof key, manifest->layout_id,
                                           ctx->placement_id,
                                           ctx->effective_dp_rank, participant);
    reshard_shared *hit =
        length > 0 ? reshard_cache_get(ctx->planner->cache, RESHARD_CACHE_JOIN,
                                       key, length)
                   : NULL;
    ctx->join = (reshard_shared_join *)hit;
    ctx->join_hit = hit != NULL;
  }
  reshard_limits requested;
  reshard_wire_limits_from_pb(ctx->request->limits, &requested);
  ctx->store = (reshard_store_request){
      .placement = ctx->placement,
      .has_dp_rank = ctx->request->dp_rank != NULL,
      .dp_rank = ctx->request->dp_rank ? ctx->request->dp_rank->value : 0,
      .binding = &ctx->binding,
      .page_count = ctx->request->page_count,
      .layout = &manifest->manifest.layout,
      .layout_id = manifest->layout_id,
      .join = ctx->join ? ctx->join->join : NULL,
      .limits = reshard_limits_clamp(&ctx->planner->caps, &requested),
      .runs = ctx->request->runs,
  };
  /* The plan's memory is asked from --max-inflight-bytes before it is
   * spent, as for loads. */
  reshard_call_reserve(
      ctx->call,
      reshard__planner_plan_reservation(ctx->binding_values,
                                        ctx->store.limits.max_operations),
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
  if (ctx->binding_values <= ctx->planner->inline_max_values) {
    /* Small plans cost less than the hop to the pool and back. */
    store_work(&ctx->work);
    store_after_work(&ctx->work, 0);
    return;
  }
  if (uv_queue_work(ctx->planner->loop, &ctx->work, store_work,
                    store_after_work)) {
    store_fail_code(ctx, RESHARD_UNAVAILABLE, "cannot queue the plan");
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
  const char *key = ctx->request->manifest_key;
  if (count != 1 || !records[0].found) {
    reshard_error not_found;
    reshard_error_set(&not_found, RESHARD_NOT_FOUND,
                      "manifest_key %s: no such manifest is published", key);
    store_fail(ctx, &not_found);
    return;
  }
  reshard_error failure;
  ctx->manifest = reshard__planner_manifest_from_record(
      ctx->planner, key, records[0].data, records[0].length, &failure);
  if (ctx->manifest == NULL) {
    store_fail(ctx, &failure);
    return;
  }
  reshard__planner_cache_manifest(ctx->planner, ctx->manifest);
  store_plan(ctx);
}

/* Resolves the oneof target into ctx->placement and its id. */
static reshard_status resolve_placement(store_ctx *ctx, reshard_error *err) {
  Reshard__V1__PlanStoreRequest *request = ctx->request;
  switch (request->target_case) {
  case RESHARD__V1__PLAN_STORE_REQUEST__TARGET_PLACEMENT: {
    reshard_status status = reshard__planner_decode_placement(
        ctx->call, request->placement, &ctx->inline_placement,
        ctx->placement_id, err);
    ctx->placement = &ctx->inline_placement;
    return status;
  }
  case RESHARD__V1__PLAN_STORE_REQUEST__TARGET_PLACEMENT_ID: {
    const char *id = request->placement_id;
    reshard_shared *hit = reshard_cache_get(
        ctx->planner->cache, RESHARD_CACHE_PLACEMENT, id, strlen(id));
    if (hit == NULL) {
      return reshard_error_set(err, RESHARD_NOT_FOUND,
                               "placement_id %.80s: not registered (call "
                               "RegisterPlacement first)",
                               id);
    }
    ctx->placement_ref = (reshard_shared_placement *)hit;
    ctx->placement = &ctx->placement_ref->placement;
    snprintf(ctx->placement_id, sizeof ctx->placement_id, "%s",
             ctx->placement_ref->placement_id);
    return RESHARD_OK;
  }
  default:
    return reshard_error_set(err, RESHARD_INVALID_ARGUMENT,
                             "target: set placement or placement_id");
  }
}

void reshard__handle_plan_store(reshard_call *call, void *data) {
  reshard_planner *planner = data;
  Reshard__V1__PlanStoreRequest *request = reshard__planner_decode(
      call, &reshard__v1__plan_store_request__descriptor);
  if (request == NULL) {
    return;
  }
  reshard_arena *arena = reshard_call_arena(call);
  store_ctx *ctx = RESHARD_ARENA_NEW(arena, store_ctx, 1);
  if (ctx == NULL) {
    reshard_call_fail_code(call, RESHARD_RESOURCE_EXHAUSTED, "out of memory");
    return;
  }
  ctx->call = call;
  ctx->planner = planner;
  ctx->request = request;
  reshard_error err;
  char domain[RESHARD_DIGEST_HEX_LEN + 1];
  if (reshard__planner_parse_manifest_key(request->manifest_key, "manifest_key",
                                          domain, &err) != RESHARD_OK ||
      reshard_wire_binding_from_pb(request->binding, "binding", arena,
                                   &ctx->binding, &err) != RESHARD_OK ||
      resolve_placement(ctx, &err) != RESHARD_OK) {
    store_fail(ctx, &err);
    return;
  }
  /* An upper bound of the plan's size: one copy per bound value. */
  for (size_t i = 0; i < ctx->binding.range_count; i++) {
    const reshard_binding_range *range = &ctx->binding.ranges[i];
    uint64_t values;
    if (!reshard_mul(range->token_count, range->head_count, &values) ||
        !reshard_add(ctx->binding_values, values, &ctx->binding_values)) {
      ctx->binding_values = UINT64_MAX;
      break;
    }
  }
  ctx->effective_dp_rank =
      request->dp_rank != NULL || ctx->placement->part_count == 0
          ? (request->dp_rank ? request->dp_rank->value : 0)
          : reshard_placement_lowest_dp(ctx->placement);

  const char *key = request->manifest_key;
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
