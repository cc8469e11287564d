#include "wire/load_request.h"

#include <stdbool.h>
#include <string.h>

#include "wire/request_fields.h"

/* PlanLoadRequest's field numbers (proto/reshard/v1/planner.proto). */
enum {
  MODEL_DOMAIN = 1,
  PAGE_KEYS = 2,
  PLACEMENT_ID = 4,
  TARGET_DP_RANK = 5,
  LIMITS = 7,
  PREFERRED_LAYOUT_IDS = 8,
  OPERATION_ID = 9,
  RUNS = 10,
  POOLED = 11,
};

/* What the first walk found: the counts of the lists, the strings' bytes
 * and the one occurrence of each nested message. */
typedef struct shape {
  size_t page_keys, layout_ids, block_ids, text_bytes;
  reshard_wire_reader dp_rank, limits, pooled;
  bool has_dp_rank, has_limits, has_pooled;
} shape;

static bool read_shape(const uint8_t *data, size_t length, shape *s) {
  memset(s, 0, sizeof *s);
  reshard_wire_reader r = {data, data + length};
  while (r.at < r.end) {
    reshard_request_field f;
    if (!reshard_request_next_field(&r, &f)) {
      return false;
    }
    bool ours;
    switch (f.number) {
    case PAGE_KEYS:
      s->page_keys++;
      ours = reshard_request_take_text(&f, &s->text_bytes);
      break;
    case PREFERRED_LAYOUT_IDS:
      s->layout_ids++;
      ours = reshard_request_take_text(&f, &s->text_bytes);
      break;
    case MODEL_DOMAIN:
    case PLACEMENT_ID:
    case OPERATION_ID:
      ours = reshard_request_take_text(&f, &s->text_bytes);
      break;
    case RUNS:
      ours = f.wire == RESHARD_WIRE_VARINT;
      break;
    case TARGET_DP_RANK:
      ours = reshard_request_take_once(&f, &s->dp_rank, &s->has_dp_rank);
      break;
    case LIMITS:
      ours = reshard_request_take_once(&f, &s->limits, &s->has_limits);
      break;
    case POOLED:
      ours =
          reshard_request_take_once(&f, &s->pooled, &s->has_pooled) &&
          reshard_request_pooled_shape(f.value, &s->block_ids, &s->text_bytes);
      break;
    default:
      ours = false; /* the inline placement, the binding, or not ours */
      break;
    }
    if (!ours) {
      return false;
    }
  }
  return true;
}

Reshard__V1__PlanLoadRequest *
reshard_load_request_decode(const uint8_t *data, size_t length,
                            const reshard_limits *caps, reshard_arena *arena) {
  shape s;
  if (!read_shape(data, length, &s) || s.page_keys > caps->max_page_keys ||
      s.block_ids > caps->max_block_ids) {
    return NULL;
  }
  Reshard__V1__PlanLoadRequest *request =
      reshard_arena_alloc(arena, sizeof *request, 16);
  reshard_request_texts texts;
  if (request == NULL ||
      !reshard_request_texts_init(&texts, s.text_bytes, arena)) {
    return NULL;
  }
  reshard__v1__plan_load_request__init(request);
  if (!reshard_request_text_list(s.page_keys, arena, &request->page_keys) ||
      !reshard_request_text_list(s.layout_ids, arena,
                                 &request->preferred_layout_ids) ||
      (s.has_dp_rank && (request->target_dp_rank = reshard_request_dp_rank(
                             s.dp_rank, arena)) == NULL) ||
      (s.has_limits &&
       (request->limits = reshard_request_limits(s.limits, arena)) == NULL) ||
      (s.has_pooled && (request->pooled = reshard_request_pooled(
                            s.pooled, s.block_ids, &texts, arena)) == NULL)) {
    return NULL;
  }
  reshard_wire_reader r = {data, data + length};
  while (r.at < r.end) {
    reshard_request_field f;
    if (!reshard_request_next_field(&r, &f)) {
      return NULL; /* read_shape has read the same bytes */
    }
    switch (f.number) {
    case MODEL_DOMAIN:
      request->model_domain = reshard_request_copy_text(&texts, &f);
      break;
    case PAGE_KEYS:
      request->page_keys[request->n_page_keys++] =
          reshard_request_copy_text(&texts, &f);
      break;
    case PLACEMENT_ID:
      request->target_case =
          RESHARD__V1__PLAN_LOAD_REQUEST__TARGET_PLACEMENT_ID;
      request->placement_id = reshard_request_copy_text(&texts, &f);
      break;
    case PREFERRED_LAYOUT_IDS:
      request->preferred_layout_ids[request->n_preferred_layout_ids++] =
          reshard_request_copy_text(&texts, &f);
      break;
    case OPERATION_ID:
      request->operation_id = reshard_request_copy_text(&texts, &f);
      break;
    case RUNS:
      request->runs = reshard_request_bool(&f);
      break;
    default:
      break; /* the nested messages, decoded above */
    }
  }
  return request;
}
