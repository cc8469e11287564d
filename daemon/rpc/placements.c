/* The placement RPCs (SPEC §3.3, §2.1): RegisterPlacement stores a
 * normalized placement as a catalog record under its id (SPEC §3.2, so
 * every daemon of a fleet resolves it) and keeps it in the cache;
 * PlanUpload plans a writer's layout for a placement. Also how every
 * handler decodes a request's placement and resolves a plan's target:
 * inline, from the cache, or from the catalog. */
#include <string.h>

#include "google/protobuf/wrappers.pb-c.h"
#include "observe/log.h"
#include "reshard/upload.h"
#include "rpc/planner_internal.h"
#include "wire/decode.h"
#include "wire/wire.h"

reshard_status reshard__planner_decode_placement(
    const Reshard__V1__Placement *pb, const reshard_limits *caps,
    reshard_arena *arena, reshard_placement *out, char id[RESHARD_ID_SIZE],
    reshard_error *err) {
  reshard_status status =
      reshard_wire_placement_from_pb(pb, "placement", arena, out, err);
  if (status == RESHARD_OK) {
    status = reshard_placement_check_limits(out, caps, err);
  }
  if (status == RESHARD_OK) {
    status = reshard_placement_normalize(out, arena, err);
  }
  if (status == RESHARD_OK && id != NULL) {
    status = reshard_placement_id(out, id, err);
  }
  return status;
}

reshard_shared_placement *
reshard__planner_cache_placement(reshard_planner *planner,
                                 const reshard_placement *normalized,
                                 const char *id, reshard_error *err) {
  reshard_shared *hit = reshard_cache_get(
      planner->cache, RESHARD_CACHE_PLACEMENT, id, strlen(id));
  if (hit != NULL) {
    return (reshard_shared_placement *)hit;
  }
  reshard_shared_placement *shared =
      reshard_shared_placement_create(normalized, id);
  if (shared == NULL) {
    reshard_error_set(err, RESHARD_RESOURCE_EXHAUSTED,
                      "placement %s: out of memory", id);
    return NULL;
  }
  /* A placement too large for the cache is still served to this call. */
  reshard_cache_put(planner->cache, RESHARD_CACHE_PLACEMENT, id, strlen(id),
                    &shared->base);
  return shared;
}

uint8_t *reshard__planner_placement_record(const reshard_placement *placement,
                                           reshard_arena *arena,
                                           size_t *length) {
  Reshard__V1__Placement *canonical =
      reshard_wire_placement_to_pb(placement, arena);
  return canonical ? reshard_wire_pack(&canonical->base, arena, length) : NULL;
}

reshard_shared_placement *reshard__planner_placement_from_pb(
    reshard_planner *planner, const Reshard__V1__Placement *pb,
    const char *expected_id, const char *what, reshard_error *err) {
  reshard_arena scratch;
  reshard_arena_init(&scratch, 4096);
  reshard_placement placement;
  char id[RESHARD_ID_SIZE];
  reshard_shared_placement *shared = NULL;
  if (reshard__planner_decode_placement(pb, &planner->caps, &scratch,
                                        &placement, id, err) != RESHARD_OK) {
    reshard_error_prefix(err, "%s", what);
    if (err != NULL) {
      err->code = RESHARD_INTERNAL;
    }
  } else if (expected_id != NULL && strcmp(id, expected_id) != 0) {
    reshard_error_set(err, RESHARD_INTERNAL, "%s: holds placement %s", what,
                      id);
  } else {
    shared = reshard__planner_cache_placement(planner, &placement, id, err);
  }
  reshard_arena_destroy(&scratch);
  return shared;
}

/* ---- RegisterPlacement ---- */

typedef struct register_ctx {
  reshard_call *call;
  reshard_planner *planner;
  reshard_placement placement;
  char id[RESHARD_ID_SIZE];
} register_ctx;

static void on_placement_stored(void *data, const reshard_error *err,
                                bool created) {
  register_ctx *ctx = data;
  if (err->code != RESHARD_OK) {
    reshard_call_fail(ctx->call, err);
    return;
  }
  reshard_error failure;
  reshard_shared_placement *shared = reshard__planner_cache_placement(
      ctx->planner, &ctx->placement, ctx->id, &failure);
  if (shared == NULL) {
    reshard_call_fail(ctx->call, &failure);
    return;
  }
  reshard_shared_unref(&shared->base);
  reshard_log_line line;
  if (created &&
      reshard_log_begin(&line, RESHARD_LOG_INFO, "placement registered")) {
    reshard_log_str(&line, "placement_id", ctx->id);
    reshard_log_end(&line);
  }
  Reshard__V1__RegisterPlacementResponse response =
      RESHARD__V1__REGISTER_PLACEMENT_RESPONSE__INIT;
  response.placement_id = ctx->id;
  reshard_call_reply(ctx->call, &response.base);
}

void reshard__handle_register_placement(reshard_planner *planner,
                                        reshard_call *call, void *message) {
  Reshard__V1__RegisterPlacementRequest *request = message;
  register_ctx *ctx = reshard__planner_call_alloc(call, sizeof *ctx);
  if (ctx == NULL) {
    return;
  }
  ctx->call = call;
  ctx->planner = planner;
  reshard_error err;
  if (reshard__planner_decode_placement(
          request->placement, reshard_decode_caps(), reshard_call_arena(call),
          &ctx->placement, ctx->id, &err) != RESHARD_OK) {
    reshard_call_fail(call, &err);
    return;
  }
  /* The record is the canonical form, so every daemon stores the same
   * bytes for the same placement. */
  size_t length = 0;
  uint8_t *record = reshard__planner_placement_record(
      &ctx->placement, reshard_call_arena(call), &length);
  if (record == NULL) {
    reshard_call_fail_code(call, RESHARD_RESOURCE_EXHAUSTED, "out of memory");
    return;
  }
  planner->catalog->vtable->put_object(
      planner->catalog, RESHARD_CATALOG_OBJECT_PLACEMENT, ctx->id, record,
      length, on_placement_stored, ctx);
}

void reshard__handle_plan_upload(reshard_planner *planner, reshard_call *call,
                                 void *message) {
  Reshard__V1__PlanUploadRequest *request = message;
  reshard_arena *arena = reshard_call_arena(call);
  reshard_error err;
  reshard_placement placement;
  reshard_format format;
  reshard_upload_plan plan;
  if (reshard__planner_decode_placement(request->placement,
                                        reshard_decode_caps(), arena,
                                        &placement, NULL, &err) != RESHARD_OK ||
      reshard_wire_format_from_pb(request->format, "format", &format, &err) !=
          RESHARD_OK ||
      reshard_plan_upload(&placement, format, request->dp_rank != NULL,
                          request->dp_rank ? request->dp_rank->value : 0,
                          &planner->caps, arena, &plan, &err) != RESHARD_OK) {
    reshard_call_fail(call, &err);
    return;
  }
  Reshard__V1__PlanUploadResponse response =
      RESHARD__V1__PLAN_UPLOAD_RESPONSE__INIT;
  response.layout = reshard_wire_layout_to_pb(&plan.layout, arena);
  if (response.layout == NULL) {
    reshard_call_fail_code(call, RESHARD_RESOURCE_EXHAUSTED, "out of memory");
    return;
  }
  response.layout_id = plan.layout_id;
  response.n_part_writers = plan.layout.shard_count;
  response.part_writers = (char **)plan.part_writers;
  reshard_call_reply(call, &response.base);
}

/* A registered target being fetched from the catalog. */
typedef struct target_fetch {
  reshard__target *target;
  reshard_planner *planner;
  const char *id;
  reshard__target_done *done;
  void *data;
} target_fetch;

static void on_target_fetched(void *data, const reshard_error *err,
                              const reshard_catalog_record *records,
                              size_t count) {
  target_fetch *fetch = data;
  reshard_error failure;
  if (err->code != RESHARD_OK) {
    fetch->done(fetch->data, err);
    return;
  }
  if (count != 1 || !records[0].found) {
    reshard_error_set(&failure, RESHARD_NOT_FOUND,
                      "placement_id %.80s: not registered (call "
                      "RegisterPlacement first)",
                      fetch->id);
    fetch->done(fetch->data, &failure);
    return;
  }
  reshard_arena scratch;
  reshard_arena_init(&scratch, 4096);
  ProtobufCMessage *message =
      reshard_wire_unpack(&reshard__v1__placement__descriptor, records[0].data,
                          records[0].length, &scratch, &failure);
  reshard_shared_placement *shared =
      message == NULL
          ? NULL
          : reshard__planner_placement_from_pb(
                fetch->planner, (Reshard__V1__Placement *)message, fetch->id,
                "catalog record of the placement", &failure);
  reshard_arena_destroy(&scratch);
  if (shared == NULL) {
    failure.code = RESHARD_INTERNAL;
    fetch->done(fetch->data, &failure);
    return;
  }
  reshard__target_take(fetch->target, shared);
  fetch->done(fetch->data, NULL);
}

void reshard__target_resolve(reshard__target *target, reshard_planner *planner,
                             reshard_call *call, bool given_inline,
                             const Reshard__V1__Placement *pb, const char *id,
                             reshard__target_done *done, void *data) {
  reshard_error err;
  if (given_inline) {
    target->placement = &target->inline_placement;
    if (reshard__planner_decode_placement(
            pb, reshard_decode_caps(), reshard_call_arena(call),
            &target->inline_placement, target->id, &err) != RESHARD_OK) {
      done(data, &err);
      return;
    }
    done(data, NULL);
    return;
  }
  if (id == NULL) {
    reshard_error_set(&err, RESHARD_INVALID_ARGUMENT,
                      "target: set placement or placement_id");
    done(data, &err);
    return;
  }
  if (reshard__planner_check_id(id, "placement_id", &err) != RESHARD_OK) {
    done(data, &err);
    return;
  }
  reshard_shared *hit = reshard_cache_get(
      planner->cache, RESHARD_CACHE_PLACEMENT, id, strlen(id));
  if (hit != NULL) {
    reshard__target_take(target, (reshard_shared_placement *)hit);
    done(data, NULL);
    return;
  }
  target_fetch *fetch = reshard_arena_alloc(
      reshard_call_arena(call), sizeof *fetch, _Alignof(target_fetch));
  if (fetch == NULL) {
    reshard_error_set(&err, RESHARD_RESOURCE_EXHAUSTED, "out of memory");
    done(data, &err);
    return;
  }
  *fetch = (target_fetch){target, planner, id, done, data};
  const char *ids[1] = {id};
  planner->catalog->vtable->get_objects(planner->catalog,
                                        RESHARD_CATALOG_OBJECT_PLACEMENT, ids,
                                        1, on_target_fetched, fetch);
}

void reshard__target_take(reshard__target *target,
                          reshard_shared_placement *shared) {
  target->ref = shared;
  target->placement = &shared->placement;
  /* Both are RESHARD_ID_SIZE arrays holding a terminated id. */
  memcpy(target->id, shared->placement_id, sizeof target->id);
}

void reshard__target_release(reshard__target *target) {
  reshard_shared_unref(target->ref ? &target->ref->base : NULL);
  target->ref = NULL;
}

uint64_t reshard__target_dp_rank(const reshard__target *target,
                                 bool has_dp_rank, uint64_t dp_rank) {
  return has_dp_rank || target->placement->part_count == 0
             ? dp_rank
             : reshard_placement_lowest_dp(target->placement);
}
