/* The placement RPCs (SPEC §3.3, §2.1): RegisterPlacement keeps a
 * normalized placement in the cache under its id, PlanUpload plans a
 * writer's layout for a placement. Also how every handler decodes a
 * request's placement. */
#include <stdio.h>
#include <string.h>

#include "google/protobuf/wrappers.pb-c.h"
#include "reshard/upload.h"
#include "rpc/planner_internal.h"
#include "wire/decode.h"
#include "wire/wire.h"

/* Decodes and normalizes the request's placement into the call's arena. */
reshard_status reshard__planner_decode_placement(
    reshard_call *call, const Reshard__V1__Placement *pb,
    reshard_placement *out, char id[RESHARD_ID_SIZE], reshard_error *err) {
  reshard_arena *arena = reshard_call_arena(call);
  reshard_status status =
      reshard_wire_placement_from_pb(pb, "placement", arena, out, err);
  if (status == RESHARD_OK) {
    /* The caps the request was decoded under (the planner's). */
    status = reshard_placement_check_limits(out, reshard_decode_caps(), err);
  }
  if (status == RESHARD_OK) {
    status = reshard_placement_normalize(out, arena, err);
  }
  if (status == RESHARD_OK && id != NULL) {
    status = reshard_placement_id(out, id, err);
  }
  return status;
}

void reshard__handle_register_placement(reshard_planner *planner,
                                        reshard_call *call, void *message) {
  Reshard__V1__RegisterPlacementRequest *request = message;
  reshard_error err;
  reshard_placement placement;
  char id[RESHARD_ID_SIZE];
  if (reshard__planner_decode_placement(call, request->placement, &placement,
                                        id, &err) != RESHARD_OK) {
    reshard_call_fail(call, &err);
    return;
  }
  reshard_shared *hit = reshard_cache_get(
      planner->cache, RESHARD_CACHE_PLACEMENT, id, strlen(id));
  if (hit == NULL) {
    reshard_shared_placement *shared =
        reshard_shared_placement_create(&placement, id);
    bool cached = shared != NULL &&
                  reshard_cache_put(planner->cache, RESHARD_CACHE_PLACEMENT, id,
                                    strlen(id), &shared->base);
    reshard_shared_unref(shared ? &shared->base : NULL);
    if (!cached) {
      reshard_error_set(&err, RESHARD_RESOURCE_EXHAUSTED,
                        "placement: does not fit the cache (--cache-bytes)");
      reshard_call_fail(call, &err);
      return;
    }
  }
  reshard_shared_unref(hit);
  Reshard__V1__RegisterPlacementResponse response =
      RESHARD__V1__REGISTER_PLACEMENT_RESPONSE__INIT;
  response.placement_id = id;
  reshard_call_reply(call, &response.base);
}

void reshard__handle_plan_upload(reshard_planner *planner, reshard_call *call,
                                 void *message) {
  Reshard__V1__PlanUploadRequest *request = message;
  reshard_arena *arena = reshard_call_arena(call);
  reshard_error err;
  reshard_placement placement;
  reshard_format format;
  reshard_upload_plan plan;
  if (reshard__planner_decode_placement(call, request->placement, &placement,
                                        NULL, &err) != RESHARD_OK ||
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

reshard_status reshard__target_resolve(reshard__target *target,
                                       reshard_planner *planner,
                                       reshard_call *call, bool given_inline,
                                       const Reshard__V1__Placement *pb,
                                       const char *id, reshard_error *err) {
  if (given_inline) {
    target->placement = &target->inline_placement;
    return reshard__planner_decode_placement(
        call, pb, &target->inline_placement, target->id, err);
  }
  if (id == NULL) {
    return reshard_error_set(err, RESHARD_INVALID_ARGUMENT,
                             "target: set placement or placement_id");
  }
  reshard_shared *hit = reshard_cache_get(
      planner->cache, RESHARD_CACHE_PLACEMENT, id, strlen(id));
  if (hit == NULL) {
    return reshard_error_set(err, RESHARD_NOT_FOUND,
                             "placement_id %.80s: not registered (call "
                             "RegisterPlacement first)",
                             id);
  }
  reshard__target_take(target, (reshard_shared_placement *)hit);
  return RESHARD_OK;
}

void reshard__target_take(reshard__target *target,
                          reshard_shared_placement *shared) {
  target->ref = shared;
  target->placement = &shared->placement;
  snprintf(target->id, sizeof target->id, "%s", shared->placement_id);
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
