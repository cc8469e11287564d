/* The PlanTransfer RPC (SPEC §2.6, §3.3): KV from a live prefill
 * instance's registered pools to a decode participant's memory. Its call
 * takes PlanLoad's path: admitted and, when large, decoded on the work
 * pool; then, on the loop, the source and target placements (inline, the
 * cache, the catalog), the source pools by memory id (the cache, else one
 * catalog read for every one missing) and the target's memory (a binding,
 * or a pool as PlanLoad's pooled); reserved under --max-inflight-bytes;
 * planned by reshard_plan_transfer on the loop or the work pool, which
 * without runs writes the batches' varint columns as it batches; encoded
 * around those (or from the runs) into the send buffer, long columns
 * sent where the planner wrote them (reshard_transfer_response_write,
 * no protobuf-c message) and sent; its plan metrics recorded as PlanLoad's
 * are, under method="PlanTransfer". */
#include <stdio.h>
#include <string.h>

#include "google/protobuf/wrappers.pb-c.h"
#include "observe/log.h"
#include "reshard/transfer.h"
#include "rpc/planner_internal.h"
#include "wire/decode.h"
#include "wire/transfer_request.h"
#include "wire/transfer_response.h"
#include "wire/wire.h"

typedef struct transfer_ctx {
  reshard_call *call;
  reshard_planner *planner;
  Reshard__V1__PlanTransferRequest *request;
  bool large; /* holds one of the planner's large places */
  reshard_status status;
  reshard_error err;

  reshard__target source, target;
  reshard_shared_pool **pools; /* per source_memory_ids entry, held */
  size_t missing;              /* pools being read from the catalog */
  const char **missing_ids;
  size_t *missing_index;
  reshard_binding binding; /* the target's, decoded, or the pool's */
  reshard__pooled pooled;
  uint64_t binding_values;
  reshard_limits limits;

  reshard_transfer_pool *source_pools;
  reshard_transfer_request plan_request;
  reshard_transfer_plan plan;
  reshard_work work;
  /* Without runs: where the planner writes the response's varint
   * columns, sent from there (NULL: they are copied with the rest). */
  reshard_response_memory *response_memory;
  uint64_t plan_us;
  bool plan_ran; /* reshard_plan_transfer ran: its metrics are recorded */
  bool planned;  /* and it returned a plan */
  uint64_t response_bytes;
} transfer_ctx;

static void transfer_release(transfer_ctx *ctx) {
  if (ctx->large) {
    ctx->large = false;
    reshard__planner_large_done(ctx->planner);
  }
  reshard__target_release(&ctx->source);
  reshard__target_release(&ctx->target);
  reshard__pooled_release(&ctx->pooled);
  for (size_t i = 0;
       ctx->pools != NULL && i < ctx->request->n_source_memory_ids; i++) {
    reshard_shared_unref(ctx->pools[i] ? &ctx->pools[i]->base : NULL);
    ctx->pools[i] = NULL;
  }
}

static void transfer_fail(transfer_ctx *ctx, const reshard_error *err) {
  transfer_release(ctx);
  reshard_call_fail(ctx->call, err);
}

static void log_transfer(const transfer_ctx *ctx) {
  reshard_log_line line;
  if (!reshard_log_begin(&line, RESHARD_LOG_DEBUG, "transfer plan")) {
    return;
  }
  if (ctx->request->operation_id[0] != '\0') {
    reshard_log_str(&line, "operation_id", ctx->request->operation_id);
  }
  reshard_log_str(&line, "code", reshard_status_name(ctx->status));
  reshard_log_str(&line, "participant", ctx->binding.participant_id);
  reshard_log_u64(&line, "tokens", ctx->request->token_count);
  if (ctx->status == RESHARD_OK) {
    reshard_log_u64(&line, "sources", ctx->plan.source_count);
    reshard_log_u64(&line, "operations", ctx->plan.operations);
    reshard_log_u64(&line, "bytes", ctx->plan.bytes);
    if (ctx->request->runs) {
      reshard_log_u64(&line, "runs", ctx->plan.runs.run_count);
    }
    reshard_log_u64(&line, "response_bytes", ctx->response_bytes);
  }
  reshard_log_u64(&line, "plan_us", ctx->plan_us);
  reshard_log_end(&line);
}

/* ---- The response ---- */

static size_t write_transfer_response(void *context, uint8_t *out) {
  return reshard_transfer_response_write(context, out);
}

/* Worker thread (or the loop, for small plans): the plan into the
 * response, written straight into the send buffer (transfer_response.h)
 * without a protobuf-c message; fills ctx->status and ctx->err on
 * failure. `arena` holds the plan and what measuring keeps. */
static void encode_transfer(transfer_ctx *ctx, reshard_arena *arena) {
  reshard_call *call = ctx->call;
  if ((ctx->status = reshard__planner_check_planned(call, &ctx->err)) !=
      RESHARD_OK) {
    return;
  }
  /* Without runs the batches are the varint columns the planner wrote
   * while batching (long ones sent where they lie, in the response
   * memory); with runs they are written from the runs alone (the plan
   * has no copies then). */
  reshard_transfer_response response;
  reshard_status measured = reshard_transfer_response_measure(
      &ctx->plan, ctx->source_pools, &ctx->binding, ctx->source.id,
      ctx->target.id,
      ctx->plan.columns.columns != NULL ? &ctx->plan.columns : NULL, arena,
      &response);
  if ((ctx->status = reshard__planner_pack_response(
           call, measured, ctx->response_memory, &response.batches,
           response.size, &response, reshard_transfer_response_write_pieces,
           write_transfer_response, &ctx->err)) == RESHARD_OK) {
    ctx->response_bytes = response.size;
  }
}

/* ---- Planning ---- */

/* Worker thread (or the loop for small plans): plan and encode. Touches
 * only the context, the call's arena and response, and immutable shared
 * data. */
static void transfer_work(reshard_work *work) {
  transfer_ctx *ctx = work->data;
  reshard_call *call = ctx->call;
  if ((ctx->status = reshard__planner_check_call(call, &ctx->err)) !=
      RESHARD_OK) {
    return;
  }
  reshard_arena scratch;
  reshard_arena_init_from(&scratch, 64 * 1024,
                          reshard_call_arena(call)->source);
  uint64_t start = uv_hrtime();
  ctx->response_memory = reshard__planner_column_memory(
      call, ctx->plan_request.varint_columns, &ctx->plan_request.column_arena);
  ctx->status = reshard_plan_transfer(&ctx->plan_request, &scratch, &ctx->plan,
                                      &ctx->err);
  ctx->plan_us = (uv_hrtime() - start) / 1000;
  ctx->plan_ran = true;
  if (ctx->status == RESHARD_OK) {
    ctx->planned = true;
    encode_transfer(ctx, &scratch);
  }
  /* The encoded response is the call's; the plan goes with its scratch
   * (its figures stay in ctx->plan for the log and the metrics). */
  reshard_arena_destroy(&scratch);
  /* The response's pieces hold what they point into. */
  reshard_response_memory_release(ctx->response_memory);
  ctx->response_memory = NULL;
  ctx->plan_request.column_arena = NULL;
  ctx->plan.columns = (reshard_varint_batches){0};
  ctx->plan.sources = NULL;
  ctx->plan.copies = NULL;
  ctx->plan.batches = NULL;
  ctx->plan.batch_source = NULL;
  ctx->plan.runs.runs = NULL;
  ctx->plan.runs.batch_first = NULL;
}

/* Loop: the plan's metrics (PlanLoad's families, method="PlanTransfer"),
 * then the answer. */
static void transfer_after_work(reshard_work *work) {
  transfer_ctx *ctx = work->data;
  log_transfer(ctx);
  if (ctx->plan_ran) {
    bool ok = ctx->planned;
    reshard_metrics_record_plan(
        ctx->planner->metrics,
        &(reshard_metrics_plan){
            .method = RESHARD_METRICS_PLAN_TRANSFER,
            .ok = ok,
            .plan_us = ctx->plan_us,
            .copies = ok ? ctx->plan.operations : 0,
            .copies_before_coalescing =
                ok ? ctx->plan.copies_before_coalescing : 0,
            .bytes = ok ? ctx->plan.bytes : 0,
            .runs_requested = ok && ctx->request->runs,
            .runs = ok ? ctx->plan.runs.run_count : 0,
            .response_bytes = ctx->response_bytes,
        });
  }
  transfer_release(ctx);
  if (ctx->status != RESHARD_OK) {
    reshard_call_fail(ctx->call, &ctx->err);
  } else {
    reshard_call_send_packed(ctx->call);
  }
}

static void transfer_dispatch(reshard_call *call, const reshard_error *err,
                              void *data) {
  (void)call;
  transfer_ctx *ctx = data;
  if (err != NULL) {
    transfer_fail(ctx, err);
    return;
  }
  ctx->work.data = ctx;
  if (reshard__planner_run(ctx->planner, ctx->call, &ctx->work,
                           ctx->binding_values, transfer_work,
                           transfer_after_work) != 0) {
    reshard_error failure;
    reshard_error_set(&failure, RESHARD_UNAVAILABLE, "cannot queue the plan");
    transfer_fail(ctx, &failure);
  }
}

/* Everything is resolved: the request for the planner, then its memory. */
static void transfer_plan(transfer_ctx *ctx) {
  const Reshard__V1__PlanTransferRequest *request = ctx->request;
  size_t count = request->n_source_memory_ids;
  ctx->source_pools = RESHARD_ARENA_NEW(reshard_call_arena(ctx->call),
                                        reshard_transfer_pool, count + 1);
  if (ctx->source_pools == NULL) {
    reshard_error failure;
    reshard_error_set(&failure, RESHARD_RESOURCE_EXHAUSTED, "out of memory");
    transfer_fail(ctx, &failure);
    return;
  }
  for (size_t i = 0; i < count; i++) {
    reshard_shared_pool *pool = ctx->pools[i];
    if (strcmp(pool->placement->placement_id, ctx->source.id) != 0) {
      reshard_error failure;
      reshard_error_set(&failure, RESHARD_INVALID_ARGUMENT,
                        "source_memory_ids[%zu] (%s): registered for "
                        "placement %s, not the source placement %s",
                        i, pool->memory_id, pool->placement->placement_id,
                        ctx->source.id);
      transfer_fail(ctx, &failure);
      return;
    }
    ctx->source_pools[i] =
        (reshard_transfer_pool){pool->memory_id, &pool->pool, &pool->bound};
  }
  ctx->plan_request = (reshard_transfer_request){
      .source_placement = ctx->source.placement,
      .has_source_dp_rank = request->source_dp_rank != NULL,
      .source_dp_rank =
          request->source_dp_rank ? request->source_dp_rank->value : 0,
      .pools = ctx->source_pools,
      .pool_count = count,
      .source_block_ids = request->source_block_ids,
      .source_block_count = request->n_source_block_ids,
      .token_count = request->token_count,
      .target_placement = ctx->target.placement,
      .has_target_dp_rank = request->target_dp_rank != NULL,
      .target_dp_rank =
          request->target_dp_rank ? request->target_dp_rank->value : 0,
      .binding = &ctx->binding,
      .pooled = ctx->pooled.ready ? &ctx->pooled.memory : NULL,
      .participant_field = reshard__pooled_participant_field(request->pooled),
      .limits = ctx->limits,
      .runs = request->runs,
      /* The response is written from the runs, or from the copies'
       * varint columns the planner writes as it batches, never from the
       * copies (reshard_transfer_response_measure reads none then): the
       * planner need not keep them. */
      .omit_copies = true,
      .varint_columns = !request->runs,
  };
  reshard_call_reserve(ctx->call,
                       reshard__planner_plan_reservation(
                           ctx->binding_values, ctx->limits.max_operations),
                       transfer_dispatch, ctx);
}

static void on_target_memory(void *data, const reshard_error *err) {
  transfer_ctx *ctx = data;
  if (err != NULL) {
    transfer_fail(ctx, err);
    return;
  }
  ctx->binding = ctx->pooled.binding;
  ctx->binding_values = ctx->pooled.values;
  transfer_plan(ctx);
}

/* The source pools are resolved: the target's memory next. */
static void pools_ready(transfer_ctx *ctx) {
  const Reshard__V1__PlanTransferRequest *request = ctx->request;
  if (request->pooled != NULL) {
    reshard__pooled_resolve(ctx->planner, ctx->call, request->pooled,
                            &ctx->target, request->token_count, &ctx->limits,
                            &ctx->pooled, on_target_memory, ctx);
    return;
  }
  transfer_plan(ctx);
}

static void on_pools_fetched(void *data, const reshard_error *err,
                             const reshard_catalog_record *records,
                             size_t count) {
  transfer_ctx *ctx = data;
  if (err->code != RESHARD_OK) {
    transfer_fail(ctx, err);
    return;
  }
  for (size_t m = 0; m < ctx->missing && m < count; m++) {
    size_t i = ctx->missing_index[m];
    const char *id = ctx->missing_ids[m];
    reshard_error failure;
    if (!records[m].found) {
      reshard_cache_remove(ctx->planner->cache, RESHARD_CACHE_MEMORY_POOL, id,
                           strlen(id));
      reshard_error_set(&failure, RESHARD_NOT_FOUND,
                        "source_memory_ids[%zu] %s: not registered (call "
                        "RegisterMemory first)",
                        i, id);
      transfer_fail(ctx, &failure);
      return;
    }
    reshard_shared_pool *pool = reshard__planner_pool_from_record(
        ctx->planner, id, records[m].data, records[m].length, &failure);
    if (pool == NULL) {
      transfer_fail(ctx, &failure);
      return;
    }
    reshard_cache_put(ctx->planner->cache, RESHARD_CACHE_MEMORY_POOL, id,
                      strlen(id), &pool->base);
    ctx->pools[i] = pool;
  }
  pools_ready(ctx);
}

/* The source pools: the cache's, then one catalog read for the rest. */
static void resolve_pools(transfer_ctx *ctx) {
  const Reshard__V1__PlanTransferRequest *request = ctx->request;
  reshard_arena *arena = reshard_call_arena(ctx->call);
  size_t count = request->n_source_memory_ids;
  ctx->pools = RESHARD_ARENA_NEW(arena, reshard_shared_pool *, count + 1);
  ctx->missing_ids = RESHARD_ARENA_NEW(arena, const char *, count + 1);
  ctx->missing_index = RESHARD_ARENA_NEW(arena, size_t, count + 1);
  if (ctx->pools == NULL || ctx->missing_ids == NULL ||
      ctx->missing_index == NULL) {
    reshard_error failure;
    reshard_error_set(&failure, RESHARD_RESOURCE_EXHAUSTED, "out of memory");
    transfer_fail(ctx, &failure);
    return;
  }
  for (size_t i = 0; i < count; i++) {
    const char *id = request->source_memory_ids[i];
    reshard_shared *hit = reshard_cache_get(
        ctx->planner->cache, RESHARD_CACHE_MEMORY_POOL, id, strlen(id));
    if (hit != NULL && reshard__planner_pool_current(
                           ctx->planner, (reshard_shared_pool *)hit)) {
      ctx->pools[i] = (reshard_shared_pool *)hit;
    } else {
      reshard_shared_unref(hit); /* read again: it may have been forgotten */
      ctx->missing_ids[ctx->missing] = id;
      ctx->missing_index[ctx->missing++] = i;
    }
  }
  if (ctx->missing == 0) {
    pools_ready(ctx);
    return;
  }
  ctx->planner->catalog->vtable->get_objects(
      ctx->planner->catalog, RESHARD_CATALOG_OBJECT_MEMORY_POOL,
      ctx->missing_ids, ctx->missing, on_pools_fetched, ctx);
}

static void on_target(void *data, const reshard_error *err) {
  transfer_ctx *ctx = data;
  if (err != NULL) {
    reshard_error failure = *err;
    if (err->code == RESHARD_INVALID_ARGUMENT) {
      reshard_error_prefix(&failure, "target");
    }
    transfer_fail(ctx, &failure);
    return;
  }
  resolve_pools(ctx);
}

static void on_source(void *data, const reshard_error *err) {
  transfer_ctx *ctx = data;
  if (err != NULL) {
    reshard_error failure = *err;
    if (err->code == RESHARD_INVALID_ARGUMENT) {
      reshard_error_prefix(&failure, "source");
    }
    transfer_fail(ctx, &failure);
    return;
  }
  const Reshard__V1__PlanTransferRequest *request = ctx->request;
  reshard__target_resolve(
      &ctx->target, ctx->planner, ctx->call,
      request->target_case ==
          RESHARD__V1__PLAN_TRANSFER_REQUEST__TARGET_TARGET_PLACEMENT,
      request->target_placement,
      request->target_case ==
              RESHARD__V1__PLAN_TRANSFER_REQUEST__TARGET_TARGET_PLACEMENT_ID
          ? request->target_placement_id
          : NULL,
      on_target, ctx);
}

/* ---- The request ---- */

/* Decodes the request and checks what needs no shared state; fills
 * ctx->status and ctx->err. Any thread. */
static void decode_request(transfer_ctx *ctx) {
  reshard_arena *arena = reshard_call_arena(ctx->call);
  size_t length;
  const uint8_t *payload = reshard_call_payload(ctx->call, &length);
  /* A decode instance's every call, pooled, skips protobuf-c
   * (transfer_request.h). */
  Reshard__V1__PlanTransferRequest *request = reshard_transfer_request_decode(
      payload, length, reshard_decode_caps(), arena);
  if (request == NULL) {
    request = (Reshard__V1__PlanTransferRequest *)reshard_wire_unpack(
        &reshard__v1__plan_transfer_request__descriptor, payload, length, arena,
        &ctx->err);
  }
  if (request == NULL) {
    ctx->status = ctx->err.code;
    return;
  }
  ctx->request = request;
  if (request->source_case ==
          RESHARD__V1__PLAN_TRANSFER_REQUEST__SOURCE__NOT_SET ||
      request->target_case ==
          RESHARD__V1__PLAN_TRANSFER_REQUEST__TARGET__NOT_SET) {
    ctx->status = reshard_error_set(
        &ctx->err, RESHARD_INVALID_ARGUMENT,
        request->source_case ==
                RESHARD__V1__PLAN_TRANSFER_REQUEST__SOURCE__NOT_SET
            ? "source: set source_placement or source_placement_id"
            : "target: set target_placement or target_placement_id");
    return;
  }
  bool has_binding = request->binding != NULL;
  if (has_binding == (request->pooled != NULL)) {
    ctx->status = reshard_error_set(
        &ctx->err, RESHARD_INVALID_ARGUMENT,
        has_binding ? "binding, pooled: set exactly one of the two, not both"
                    : "binding, pooled: set exactly one of the two (the "
                      "target's memory)");
    return;
  }
  if (request->n_source_memory_ids == 0) {
    ctx->status = reshard_error_set(&ctx->err, RESHARD_INVALID_ARGUMENT,
                                    "source_memory_ids: name the source "
                                    "instance's registered pools");
    return;
  }
  for (size_t i = 0; i < request->n_source_memory_ids; i++) {
    char path[48];
    snprintf(path, sizeof path, "source_memory_ids[%zu]", i);
    if ((ctx->status = reshard__planner_check_id(
             request->source_memory_ids[i], path, &ctx->err)) != RESHARD_OK) {
      return;
    }
  }
  if (request->token_count == 0) {
    ctx->status = reshard_error_set(&ctx->err, RESHARD_INVALID_ARGUMENT,
                                    "token_count: must be at least 1");
    return;
  }
  if (request->pooled != NULL) {
    ctx->status = reshard__pooled_check(request->pooled, &ctx->err);
  } else {
    ctx->status = reshard_wire_binding_from_pb(request->binding, "binding",
                                               arena, &ctx->binding, &ctx->err);
    ctx->binding_values = reshard_binding_values(&ctx->binding);
  }
  if (ctx->status != RESHARD_OK) {
    return;
  }
  reshard_limits requested;
  reshard_wire_limits_from_pb(request->limits, &requested);
  ctx->limits = reshard_limits_clamp(&ctx->planner->caps, &requested);
}

static void decode_work(reshard_work *work) {
  decode_request(work->data);
}

/* Loop: the request is decoded; resolve the source placement first. */
static void decode_after_work(reshard_work *work) {
  transfer_ctx *ctx = work->data;
  if (ctx->status != RESHARD_OK) {
    transfer_fail(ctx, &ctx->err);
    return;
  }
  const Reshard__V1__PlanTransferRequest *request = ctx->request;
  reshard__target_resolve(
      &ctx->source, ctx->planner, ctx->call,
      request->source_case ==
          RESHARD__V1__PLAN_TRANSFER_REQUEST__SOURCE_SOURCE_PLACEMENT,
      request->source_placement,
      request->source_case ==
              RESHARD__V1__PLAN_TRANSFER_REQUEST__SOURCE_SOURCE_PLACEMENT_ID
          ? request->source_placement_id
          : NULL,
      on_source, ctx);
}

static void start_plan_transfer(reshard_planner *planner, reshard_call *call,
                                bool large) {
  transfer_ctx *ctx = reshard__planner_call_alloc(call, sizeof *ctx);
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
    transfer_fail(ctx, &err);
    return;
  }
  ctx->work.data = ctx;
  if (reshard__planner_decode(planner, ctx->call, &ctx->work, large,
                              decode_work, decode_after_work) != 0) {
    reshard_error_set(&err, RESHARD_UNAVAILABLE, "cannot queue the request");
    transfer_fail(ctx, &err);
  }
}

void reshard__handle_plan_transfer(reshard_call *call, void *data) {
  reshard__planner_admit(data, call, start_plan_transfer);
}
