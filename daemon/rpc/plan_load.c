/* The PlanLoad RPC (SPEC §2.2, §3.3): the request's target (inline, by id,
 * or found by its bytes in the inline cache), the page bindings (catalog,
 * or the binding cache during an outage), the distinct manifests they
 * name (cache, else catalog), then reshard_plan_load on the loop (small
 * bindings) or libuv's thread pool, with the join templates it built kept
 * in the cache. Large requests are decoded off the loop, a few at a time
 * (see "Where plans run" in docs/daemon.md). The pages and their manifests
 * are plan_load_pages.c's; a pooled memory is resolved by memory.c. */
#include <stdio.h>
#include <string.h>

#include "cache/inline_cache.h"
#include "google/protobuf/wrappers.pb-c.h"
#include "observe/log.h"
#include "reshard/plan.h"
#include "rpc/plan_load_internal.h"
#include "rpc/planner_internal.h"
#include "wire/binding_decode.h"
#include "wire/decode.h"
#include "wire/load_request.h"
#include "wire/plan_response.h"
#include "wire/wire.h"

/* Inline targets larger than these are not cached by content: a binding
 * of a million bytes is a paged pool that changes with every call. */
enum {
  INLINE_PLACEMENT_MAX_BYTES = 64 * 1024,
  INLINE_BINDING_MAX_BYTES = 256 * 1024,
};

static void load_release_targets(load_ctx *ctx) {
  reshard__target_release(&ctx->target);
  reshard__pooled_release(&ctx->pooled);
  reshard_shared_unref(ctx->binding_ref ? &ctx->binding_ref->base : NULL);
  ctx->binding_ref = NULL;
}

/* Plans with a binding decoded and validated before (takes `shared`). */
static void use_shared_binding(load_ctx *ctx, reshard_shared_binding *shared) {
  ctx->binding_ref = shared;
  ctx->binding = shared->binding;
  ctx->binding_values = shared->values;
}

static void load_release(load_ctx *ctx) {
  if (ctx->large) {
    ctx->large = false;
    reshard__planner_large_done(ctx->planner);
  }
  for (size_t i = 0; ctx->manifests && i < ctx->manifest_count; i++) {
    reshard_shared_unref(ctx->manifests[i] ? &ctx->manifests[i]->base : NULL);
  }
  for (size_t i = 0; ctx->joins && i < ctx->source_count; i++) {
    reshard_shared_unref(ctx->joins[i] ? &ctx->joins[i]->base : NULL);
  }
  ctx->manifests = NULL;
  ctx->joins = NULL;
  load_release_targets(ctx);
}

void reshard__load_fail(load_ctx *ctx, const reshard_error *err) {
  load_release(ctx);
  reshard_call_fail(ctx->call, err);
}

void reshard__load_fail_code(load_ctx *ctx, reshard_status code,
                             const char *message) {
  reshard_error err;
  reshard_error_set(&err, code, "%s", message);
  reshard__load_fail(ctx, &err);
}

static void log_plan(const load_ctx *ctx) {
  reshard_log_line line;
  if (!reshard_log_begin(&line, RESHARD_LOG_DEBUG, "plan")) {
    return;
  }
  if (ctx->operation_id[0] != '\0') {
    reshard_log_str(&line, "operation_id", ctx->operation_id);
  }
  reshard_log_str(&line, "code", reshard_status_name(ctx->status));
  reshard_log_u64(&line, "pages", ctx->request->n_page_keys);
  if (ctx->status == RESHARD_OK) {
    reshard_log_u64(&line, "hit_pages", ctx->plan.hit_pages);
    reshard_log_u64(&line, "operations", ctx->plan.operations);
    reshard_log_u64(&line, "bytes", ctx->plan.bytes);
    if (ctx->load.runs) {
      reshard_log_u64(&line, "runs", ctx->plan.runs.run_count);
    }
    reshard_log_u64(&line, "response_bytes", ctx->response_bytes);
  }
  reshard_log_u64(&line, "manifest_hits", ctx->manifest_hits);
  reshard_log_u64(&line, "manifest_misses", ctx->manifest_misses);
  reshard_log_u64(&line, "join_hits", ctx->join_hits);
  reshard_log_u64(&line, "join_misses", ctx->join_misses);
  reshard_log_u64(&line, "plan_us", ctx->plan_us);
  reshard_log_end(&line);
}

/* Worker thread: plan, then build and pack the response. Touches only the
 * context, the call's arena and response, and immutable shared objects. */

static size_t write_plan_response(void *context, uint8_t *out) {
  return reshard_plan_response_write(context, out);
}

static void encode_plan(load_ctx *ctx);

/* Plans on the work pool are the large ones; the loop answers small plans
 * and does every call's I/O. */
static void load_work(reshard_work *work) {
  load_ctx *ctx = work->data;
  reshard_call *call = ctx->call;
  if ((ctx->status = reshard__planner_check_call(call, &ctx->err)) !=
      RESHARD_OK) {
    return;
  }
  uint64_t start = uv_hrtime();
  reshard_arena_init_from(&ctx->scratch, 64 * 1024,
                          reshard_call_arena(call)->source);
  ctx->response_memory = reshard__planner_column_memory(
      call, ctx->load.varint_columns, &ctx->load.column_arena);
  ctx->status =
      reshard_plan_load(&ctx->load, &ctx->scratch, &ctx->plan, &ctx->err);
  ctx->plan_us = (uv_hrtime() - start) / 1000;
  ctx->plan_ran = true;
  if (ctx->status == RESHARD_OK) {
    ctx->planned = true;
    memcpy(ctx->built_joins, ctx->plan.built_joins,
           ctx->source_count * sizeof *ctx->built_joins);
    encode_plan(ctx);
  }
  reshard_arena_destroy(&ctx->scratch);
  /* The response's slices hold what they point into. */
  reshard_response_memory_release(ctx->response_memory);
  ctx->response_memory = NULL;
  ctx->load.column_arena = NULL;
  ctx->plan.page_source = NULL;
  ctx->plan.copies = NULL;
  ctx->plan.batches = NULL;
  ctx->plan.built_joins = NULL;
}

/* Worker thread (or loop, for small plans): the plan into the response. */
static void encode_plan(load_ctx *ctx) {
  reshard_call *call = ctx->call;
  if ((ctx->status = reshard__planner_check_planned(call, &ctx->err)) !=
      RESHARD_OK) {
    return;
  }
  reshard_wire_plan_names names = {
      .page_keys = (const char *const *)ctx->request->page_keys,
      .manifest_keys = ctx->source_keys,
      .sources = ctx->sources,
      .binding = &ctx->binding,
      .placement_id = ctx->placement_id,
  };
  reshard_plan_response response;
  /* Measured in the plan's arena, as PlanStore and PlanTransfer are: with
   * runs measuring writes their columns there, which must not stay with
   * the call while its response goes out. */
  reshard_status measured = reshard_plan_response_measure(
      &ctx->plan, &names, &ctx->scratch, &response);
  if ((ctx->status = reshard__planner_pack_response(
           call, measured, ctx->response_memory, &response.batches,
           response.size, &response, reshard_plan_response_write_pieces,
           write_plan_response, &ctx->err)) == RESHARD_OK) {
    ctx->response_bytes = response.size;
  }
}

/* Loop: keep the join templates the planner built, then answer. */
static void load_dispatch(reshard_call *call, const reshard_error *err,
                          void *data);

static void load_after_work(reshard_work *work) {
  load_ctx *ctx = work->data;
  reshard_planner *planner = ctx->planner;
  const char *participant = ctx->binding.participant_id;
  if (ctx->planned) {
    for (size_t i = 0; i < ctx->source_count; i++) {
      reshard_join *built = ctx->built_joins[i];
      if (built == NULL) {
        continue;
      }
      ctx->built_joins[i] = NULL;
      reshard__planner_keep_join(planner, built, ctx->sources[i].layout_id,
                                 &ctx->target, ctx->effective_dp_rank,
                                 participant);
    }
  }
  log_plan(ctx);
  if (ctx->plan_ran) {
    reshard_metrics_record_plan(
        planner->metrics,
        &(reshard_metrics_plan){
            .ok = ctx->planned,
            .plan_us = ctx->plan_us,
            .pages = ctx->request->n_page_keys,
            .hit_pages = ctx->planned ? ctx->plan.hit_pages : 0,
            .copies = ctx->planned ? ctx->plan.operations : 0,
            .copies_before_coalescing =
                ctx->planned ? ctx->plan.copies_before_coalescing : 0,
            .bytes = ctx->planned ? ctx->plan.bytes : 0,
            .runs_requested = ctx->planned && ctx->load.runs,
            .runs = ctx->planned ? ctx->plan.runs.run_count : 0,
            .response_bytes = ctx->response_bytes,
        });
  }
  load_release(ctx);
  if (ctx->status != RESHARD_OK) {
    reshard_call_fail(ctx->call, &ctx->err);
  } else {
    reshard_call_send_packed(ctx->call);
  }
}

/* Every manifest is resolved (or missing): build the sources, attach the
 * cached join templates and hand the plan to the thread pool. */
void reshard__load_plan(load_ctx *ctx) {
  reshard_planner *planner = ctx->planner;
  reshard_arena *arena = reshard_call_arena(ctx->call);
  size_t page_count = ctx->request->n_page_keys;
  size_t *source_of = RESHARD_ARENA_NEW(arena, size_t, ctx->manifest_count);
  ctx->sources =
      RESHARD_ARENA_NEW(arena, reshard_plan_source, ctx->manifest_count);
  ctx->source_keys =
      RESHARD_ARENA_NEW(arena, const char *, ctx->manifest_count);
  ctx->joins =
      RESHARD_ARENA_NEW(arena, reshard_shared_join *, ctx->manifest_count);
  ctx->built_joins =
      RESHARD_ARENA_NEW(arena, reshard_join *, ctx->manifest_count);
  ctx->page_source_start = RESHARD_ARENA_NEW(arena, size_t, page_count + 1);
  size_t bound = ctx->page_manifest_start[page_count];
  ctx->page_sources = RESHARD_ARENA_NEW(arena, size_t, bound);
  if (source_of == NULL || ctx->sources == NULL || ctx->source_keys == NULL ||
      ctx->joins == NULL || ctx->built_joins == NULL ||
      ctx->page_source_start == NULL || ctx->page_sources == NULL) {
    reshard__load_fail_code(ctx, RESHARD_RESOURCE_EXHAUSTED, "out of memory");
    return;
  }
  ctx->source_count = 0;
  for (size_t m = 0; m < ctx->manifest_count; m++) {
    const reshard_shared_manifest *manifest = ctx->manifests[m];
    if (manifest == NULL) {
      source_of[m] = SIZE_MAX;
      continue;
    }
    size_t s = ctx->source_count++;
    source_of[m] = s;
    ctx->sources[s].layout = &manifest->manifest.layout;
    ctx->sources[s].layout_id = manifest->layout_id;
    ctx->source_keys[s] = manifest->manifest_key;
    if (reshard__planner_find_join(
            planner, manifest, &ctx->target, ctx->effective_dp_rank,
            ctx->binding.participant_id, &ctx->joins[s])) {
      if (ctx->joins[s] != NULL) {
        ctx->sources[s].join = ctx->joins[s]->join;
        ctx->join_hits++;
      } else {
        ctx->join_misses++;
      }
    }
  }
  size_t at = 0;
  for (size_t p = 0; p < page_count; p++) {
    ctx->page_source_start[p] = at;
    for (size_t i = ctx->page_manifest_start[p];
         i < ctx->page_manifest_start[p + 1]; i++) {
      size_t s = source_of[ctx->page_manifests[i]];
      if (s != SIZE_MAX) {
        ctx->page_sources[at++] = s;
      }
    }
  }
  ctx->page_source_start[page_count] = at;

  ctx->load = (reshard_load_request){
      .placement = ctx->target.placement,
      .has_dp_rank = ctx->has_dp_rank,
      .dp_rank = ctx->dp_rank,
      .binding = &ctx->binding,
      .page_count = page_count,
      .sources = ctx->sources,
      .source_count = ctx->source_count,
      .page_source_start = ctx->page_source_start,
      .page_sources = ctx->page_sources,
      .preferred_layout_ids =
          (const char *const *)ctx->request->preferred_layout_ids,
      .preferred_count = ctx->request->n_preferred_layout_ids,
      .participant_field =
          reshard__pooled_participant_field(ctx->request->pooled),
      .limits = ctx->limits,
      .runs = ctx->request->runs,
      .omit_copies = true, /* the response is the runs or the columns */
      /* Without runs the response is the copies' varint columns. */
      .varint_columns = !ctx->request->runs,
      .bound_binding = ctx->binding_ref ? &ctx->binding_ref->bound : NULL,
      .pooled = ctx->pooled.ready ? &ctx->pooled.memory : NULL,
  };
  if (reshard_call_expired(ctx->call)) {
    reshard__load_fail_code(ctx, RESHARD_DEADLINE_EXCEEDED,
                            "deadline exceeded before planning");
    return;
  }
  reshard_call_reserve(ctx->call,
                       reshard__planner_plan_reservation(
                           ctx->binding_values, ctx->limits.max_operations),
                       load_dispatch, ctx);
}

/* Plans on the loop or the pool once the plan's memory is granted. */
static void load_dispatch(reshard_call *call, const reshard_error *err,
                          void *data) {
  (void)call;
  load_ctx *ctx = data;
  reshard_planner *planner = ctx->planner;
  if (err != NULL) {
    reshard__load_fail(ctx, err);
    return;
  }
  ctx->work.data = ctx;
  if (reshard__planner_run(planner, ctx->call, &ctx->work, ctx->binding_values,
                           load_work, load_after_work) != 0) {
    reshard__load_fail_code(ctx, RESHARD_UNAVAILABLE, "cannot queue the plan");
  }
}

/* Looks the request's inline placement up by its bytes and, when found,
 * its binding too; adds what is found to the spans left out of the bytes
 * still to be decoded. */
static void use_cached_targets(load_ctx *ctx,
                               const reshard_inline_fields *fields,
                               const reshard_wire_span **strip,
                               size_t *strip_count) {
  reshard_planner *planner = ctx->planner;
  reshard_shared *placement = reshard_cache_get(
      planner->cache, RESHARD_CACHE_INLINE_PLACEMENT,
      (const char *)fields->placement.value, fields->placement.value_length);
  if (placement == NULL) {
    return;
  }
  reshard__target_take(&ctx->target, (reshard_shared_placement *)placement);
  strip[(*strip_count)++] = &fields->placement;
  /* Bindings past INLINE_BINDING_MAX_BYTES are never kept, so looking one
   * up would only copy and hash it on the loop (S5's 640 KB: a measurable
   * share of the loop while small plans wait). */
  if (fields->binding.value != NULL &&
      fields->binding.value_length <= INLINE_BINDING_MAX_BYTES) {
    size_t key_length;
    const char *key = reshard_inline_binding_key(
        fields, ctx->target.id, reshard_call_arena(ctx->call), &key_length);
    reshard_shared *binding =
        key ? reshard_cache_get(planner->cache, RESHARD_CACHE_BOUND_BINDING,
                                key, key_length)
            : NULL;
    if (binding != NULL) {
      use_shared_binding(ctx, (reshard_shared_binding *)binding);
    }
  }
}

/* The bytes still to decode: the request without its cached targets, and
 * without its binding, which reshard_binding_decode reads faster than
 * protobuf-c (binding_decode.h). A binding that occurs more than once
 * stays for the decoder to refuse. */
static void strip_request(load_ctx *ctx, const uint8_t **payload,
                          size_t *length) {
  const reshard_inline_fields *fields = &ctx->fields;
  const reshard_wire_span *strip[2];
  size_t strip_count = 0;
  if (ctx->by_content) {
    use_cached_targets(ctx, fields, strip, &strip_count);
  }
  bool binding_apart = fields->parsed && fields->bindings == 1;
  if (binding_apart) {
    strip[strip_count++] = &fields->binding;
    if (strip_count == 2 && strip[1]->start < strip[0]->start) {
      strip[1] = strip[0];
      strip[0] = &fields->binding;
    }
  }
  if (strip_count == 0) {
    return;
  }
  size_t stripped_length;
  uint8_t *stripped =
      reshard_inline_strip(*payload, *length, strip, strip_count,
                           reshard_call_arena(ctx->call), &stripped_length);
  if (stripped == NULL) {
    /* Decode it all after all; a target found by its bytes is ignored. */
    load_release_targets(ctx);
    return;
  }
  *payload = stripped;
  *length = stripped_length;
  ctx->binding_apart = binding_apart;
}

/* The placement was decoded and normalized: keep it under its bytes. */
static void cache_inline_placement(load_ctx *ctx,
                                   const reshard_inline_fields *fields) {
  if (fields->placement.value_length > INLINE_PLACEMENT_MAX_BYTES) {
    return;
  }
  reshard_shared_placement *shared =
      reshard_shared_placement_create(ctx->target.placement, ctx->target.id);
  if (shared != NULL) {
    reshard_cache_put(ctx->planner->cache, RESHARD_CACHE_INLINE_PLACEMENT,
                      (const char *)fields->placement.value,
                      fields->placement.value_length, &shared->base);
    reshard_shared_unref(&shared->base);
  }
}

/* A binding seen lately is decoded and validated once more, into an entry
 * of its own, and this call uses that entry too. */
static void cache_binding(load_ctx *ctx, const reshard_inline_fields *fields) {
  reshard_planner *planner = ctx->planner;
  if (fields->binding.value_length > INLINE_BINDING_MAX_BYTES) {
    return;
  }
  size_t key_length;
  const char *key = reshard_inline_binding_key(
      fields, ctx->target.id, reshard_call_arena(ctx->call), &key_length);
  if (key == NULL ||
      !reshard_inline_seen(&planner->recent_bindings, key, key_length)) {
    return;
  }
  reshard_shared_binding *shared = reshard_shared_binding_create(
      fields, ctx->target.placement, &ctx->limits);
  if (shared == NULL) {
    return; /* the planner validates it and reports what is wrong */
  }
  reshard_cache_put(planner->cache, RESHARD_CACHE_BOUND_BINDING, key,
                    key_length, &shared->base);
  use_shared_binding(ctx, shared);
}

static void target_ready(load_ctx *ctx);

static void on_target(void *data, const reshard_error *err) {
  load_ctx *ctx = data;
  if (err != NULL) {
    reshard__load_fail(ctx, err);
    return;
  }
  if (ctx->request->target_case ==
          RESHARD__V1__PLAN_LOAD_REQUEST__TARGET_PLACEMENT &&
      ctx->by_content) {
    cache_inline_placement(ctx, &ctx->fields);
  }
  target_ready(ctx);
}

/* The request's target: its inline placement or a registered one; then
 * target_ready, unless the call failed. */
static void resolve_target(load_ctx *ctx) {
  const Reshard__V1__PlanLoadRequest *request = ctx->request;
  reshard__target_resolve(
      &ctx->target, ctx->planner, ctx->call,
      request->target_case == RESHARD__V1__PLAN_LOAD_REQUEST__TARGET_PLACEMENT,
      request->placement,
      request->target_case ==
              RESHARD__V1__PLAN_LOAD_REQUEST__TARGET_PLACEMENT_ID
          ? request->placement_id
          : NULL,
      on_target, ctx);
}

/* Decodes what the inline cache left of the request and checks what needs
 * no shared state; fills ctx->status and ctx->err. Any thread. */
static void decode_request(load_ctx *ctx) {
  reshard_planner *planner = ctx->planner;
  reshard_arena *arena = reshard_call_arena(ctx->call);
  /* An engine's every call, pooled, skips protobuf-c (load_request.h). */
  Reshard__V1__PlanLoadRequest *request = reshard_load_request_decode(
      ctx->payload, ctx->payload_length, reshard_decode_caps(), arena);
  if (request == NULL) {
    request = (Reshard__V1__PlanLoadRequest *)reshard_wire_unpack(
        &reshard__v1__plan_load_request__descriptor, ctx->payload,
        ctx->payload_length, arena, &ctx->err);
  }
  if (request == NULL) {
    ctx->status = ctx->err.code;
    return;
  }
  ctx->request = request;
  ctx->operation_id = request->operation_id;
  /* Decoding first, so that a request over a decode cap is refused as
   * such whatever else is wrong with it. */
  bool has_binding = request->binding != NULL || ctx->binding_apart ||
                     ctx->binding_ref != NULL;
  if (has_binding == (request->pooled != NULL)) {
    ctx->status = reshard_error_set(
        &ctx->err, RESHARD_INVALID_ARGUMENT,
        has_binding ? "binding, pooled: set exactly one of the two, not both"
                    : "binding, pooled: set exactly one of the two (the "
                      "reader's memory)");
    return;
  }
  if (request->pooled != NULL) {
    ctx->status = reshard__pooled_check(request->pooled, &ctx->err);
    if (ctx->status != RESHARD_OK) {
      return;
    }
  } else if (ctx->binding_ref == NULL) {
    const reshard_wire_span *bytes = &ctx->fields.binding;
    ctx->status =
        ctx->binding_apart
            ? reshard_binding_decode(bytes->value, bytes->value_length,
                                     "binding", reshard_decode_caps(),
                                     reshard_decode_budget(bytes->value_length),
                                     arena, &ctx->binding, &ctx->err)
            : reshard_wire_binding_from_pb(request->binding, "binding", arena,
                                           &ctx->binding, &ctx->err);
    if (ctx->status != RESHARD_OK) {
      return;
    }
    ctx->binding_values = reshard_binding_values(&ctx->binding);
  }
  if ((ctx->status = reshard__planner_check_domain(
           request->model_domain, "model_domain", &ctx->err)) != RESHARD_OK ||
      (ctx->status = reshard__planner_check_page_keys(
           request->page_keys, request->n_page_keys, &planner->caps,
           &ctx->err)) != RESHARD_OK) {
    return;
  }
  reshard_limits requested;
  reshard_wire_limits_from_pb(request->limits, &requested);
  ctx->limits = reshard_limits_clamp(&planner->caps, &requested);
}

static void decode_work(reshard_work *work) {
  decode_request(work->data);
}

static void continue_plan_load(load_ctx *ctx);

static void decode_after_work(reshard_work *work) {
  continue_plan_load(work->data);
}

/* Loop: the request is decoded; resolve its target and look its pages
 * up. */
static void continue_plan_load(load_ctx *ctx) {
  if (ctx->status != RESHARD_OK) {
    reshard__load_fail(ctx, &ctx->err);
    return;
  }
  /* An inline placement found by its bytes is resolved already. */
  if (ctx->target.ref == NULL) {
    resolve_target(ctx);
    return;
  }
  target_ready(ctx);
}

static void on_pooled(void *data, const reshard_error *err);

/* Loop: the target is resolved; resolve the memory, then look the pages
 * up. */
static void target_ready(load_ctx *ctx) {
  if (ctx->by_content && ctx->binding_ref == NULL &&
      ctx->fields.binding.value != NULL) {
    cache_binding(ctx, &ctx->fields);
  }
  const Reshard__V1__PlanLoadRequest *request = ctx->request;
  ctx->has_dp_rank = request->target_dp_rank != NULL;
  ctx->dp_rank = ctx->has_dp_rank ? request->target_dp_rank->value : 0;
  ctx->effective_dp_rank =
      reshard__target_dp_rank(&ctx->target, ctx->has_dp_rank, ctx->dp_rank);
  if (request->pooled != NULL) {
    uint64_t span = (uint64_t)request->n_page_keys *
                    ctx->target.placement->descriptor.page_size;
    reshard__pooled_resolve(ctx->planner, ctx->call, request->pooled,
                            &ctx->target, span, &ctx->limits, &ctx->pooled,
                            on_pooled, ctx);
    return;
  }
  ctx->planner->catalog->vtable->lookup_pages(
      ctx->planner->catalog, request->model_domain,
      (const char *const *)request->page_keys, request->n_page_keys,
      reshard__load_on_pages_found, ctx);
}

static void on_pooled(void *data, const reshard_error *err) {
  load_ctx *ctx = data;
  if (err != NULL) {
    reshard__load_fail(ctx, err);
    return;
  }
  ctx->binding = ctx->pooled.binding;
  ctx->binding_values = ctx->pooled.values;
  const Reshard__V1__PlanLoadRequest *request = ctx->request;
  ctx->planner->catalog->vtable->lookup_pages(
      ctx->planner->catalog, request->model_domain,
      (const char *const *)request->page_keys, request->n_page_keys,
      reshard__load_on_pages_found, ctx);
}

static void start_plan_load(reshard_planner *planner, reshard_call *call,
                            bool large) {
  load_ctx *ctx = reshard__planner_call_alloc(call, sizeof *ctx);
  if (ctx == NULL) {
    if (large) {
      reshard__planner_large_done(planner);
    }
    return;
  }
  ctx->call = call;
  ctx->planner = planner;
  ctx->large = large;
  ctx->placement_id = ctx->target.id;
  reshard_error err;
  if (reshard__planner_check_call(call, &err) != RESHARD_OK) {
    reshard__load_fail(ctx, &err);
    return;
  }
  size_t length;
  const uint8_t *payload = reshard_call_payload(call, &length);
  /* Inline targets seen before are not decoded again (inline_cache.h). */
  ctx->by_content = reshard_inline_scan(payload, length, &ctx->fields);
  strip_request(ctx, &payload, &length);
  ctx->payload = payload;
  ctx->payload_length = length;
  ctx->work.data = ctx;
  if (reshard__planner_decode(planner, call, &ctx->work, large, decode_work,
                              decode_after_work) != 0) {
    reshard__load_fail_code(ctx, RESHARD_UNAVAILABLE,
                            "cannot queue the request");
  }
}

void reshard__handle_plan_load(reshard_call *call, void *data) {
  reshard__planner_admit(data, call, start_plan_load);
}
