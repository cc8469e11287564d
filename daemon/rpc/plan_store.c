/* The PlanStore RPC (SPEC §2.5, §3.3): the manifest by key (cache, else
 * catalog), the writer's placement inline or by id, then
 * reshard_plan_store on the loop (small bindings) or libuv's thread pool,
 * with the join template cached under the same key a load of that
 * participant uses (the two joins are the same). The response is built
 * with protobuf-c by the wire layer and packed where the plan completes. */
#include <string.h>

#include "log.h"
#include "reshard/store.h"
#include "rpc/planner_internal.h"
#include "wire.h"

typedef struct store_ctx {
  reshard_call *call;
  reshard_planner *planner;
  Reshard__V1__PlanStoreRequest *request;

  reshard__target target;
  uint64_t effective_dp_rank;
  reshard_binding binding;
  uint64_t binding_values; /* sum of token_count * head_count, saturated */

  reshard_shared_manifest *manifest;
  reshard_shared_join *join; /* cached template, or NULL */
  bool manifest_hit, join_hit;

  reshard_work work;
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
  ctx->manifest = NULL;
  ctx->join = NULL;
  reshard__target_release(&ctx->target);
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

/* Worker thread (or the loop for small plans): plan and pack. Touches only
 * the context, the call's arena and response, and immutable shared data. */
static void store_work(reshard_work *work) {
  store_ctx *ctx = work->data;
  reshard_call *call = ctx->call;
  if ((ctx->status = reshard__planner_check_call(call, &ctx->err)) !=
      RESHARD_OK) {
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
static void store_after_work(reshard_work *work) {
  store_ctx *ctx = work->data;
  if (ctx->planned && ctx->plan.built_join != NULL) {
    reshard__planner_keep_join(
        ctx->planner, ctx->plan.built_join, ctx->manifest->layout_id,
        &ctx->target, ctx->effective_dp_rank, ctx->binding.participant_id);
    ctx->plan.built_join = NULL;
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
  reshard__planner_find_join(ctx->planner, manifest, &ctx->target,
                             ctx->effective_dp_rank,
                             ctx->binding.participant_id, &ctx->join);
  ctx->join_hit = ctx->join != NULL;
  reshard_limits requested;
  reshard_wire_limits_from_pb(ctx->request->limits, &requested);
  ctx->store = (reshard_store_request){
      .placement = ctx->target.placement,
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
  if (reshard__planner_run(ctx->planner, &ctx->work, ctx->binding_values,
                           store_work, store_after_work) != 0) {
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

void reshard__handle_plan_store(reshard_planner *planner, reshard_call *call,
                                void *message) {
  Reshard__V1__PlanStoreRequest *request = message;
  reshard_arena *arena = reshard_call_arena(call);
  store_ctx *ctx = reshard__planner_call_alloc(call, sizeof *ctx);
  if (ctx == NULL) {
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
      reshard__target_resolve(
          &ctx->target, planner, call,
          request->target_case ==
              RESHARD__V1__PLAN_STORE_REQUEST__TARGET_PLACEMENT,
          request->placement,
          request->target_case ==
                  RESHARD__V1__PLAN_STORE_REQUEST__TARGET_PLACEMENT_ID
              ? request->placement_id
              : NULL,
          &err) != RESHARD_OK) {
    store_fail(ctx, &err);
    return;
  }
  /* An upper bound of the plan's size: one copy per bound value. */
  ctx->binding_values = reshard_binding_values(&ctx->binding);
  ctx->effective_dp_rank =
      reshard__target_dp_rank(&ctx->target, request->dp_rank != NULL,
                              request->dp_rank ? request->dp_rank->value : 0);

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
