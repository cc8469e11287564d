#include "wire/transfer_request.h"

#include <stdbool.h>
#include <string.h>

#include "wire/request_fields.h"

/* PlanTransferRequest's field numbers (proto/reshard/v1/planner.proto). */
enum {
  SOURCE_PLACEMENT_ID = 2,
  SOURCE_DP_RANK = 3,
  SOURCE_MEMORY_IDS = 4,
  SOURCE_BLOCK_IDS = 5,
  TOKEN_COUNT = 6,
  TARGET_PLACEMENT_ID = 8,
  TARGET_DP_RANK = 9,
  POOLED = 11,
  LIMITS = 12,
  RUNS = 13,
  OPERATION_ID = 14,
};

/* What the first walk found: the counts of the lists, the strings' bytes
 * and the one occurrence of each nested message. */
typedef struct shape {
  size_t memory_ids, source_block_ids, target_block_ids, text_bytes;
  reshard_wire_reader source_dp_rank, target_dp_rank, pooled, limits;
  bool has_source_dp_rank, has_target_dp_rank, has_pooled, has_limits;
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
    case SOURCE_MEMORY_IDS:
      s->memory_ids++;
      ours = reshard_request_take_text(&f, &s->text_bytes);
      break;
    case SOURCE_PLACEMENT_ID:
    case TARGET_PLACEMENT_ID:
    case OPERATION_ID:
      ours = reshard_request_take_text(&f, &s->text_bytes);
      break;
    case SOURCE_BLOCK_IDS:
      ours = reshard_request_count_ids(&f, &s->source_block_ids);
      break;
    case TOKEN_COUNT:
    case RUNS:
      ours = f.wire == RESHARD_WIRE_VARINT;
      break;
    case SOURCE_DP_RANK:
      ours = reshard_request_take_once(&f, &s->source_dp_rank,
                                       &s->has_source_dp_rank);
      break;
    case TARGET_DP_RANK:
      ours = reshard_request_take_once(&f, &s->target_dp_rank,
                                       &s->has_target_dp_rank);
      break;
    case LIMITS:
      ours = reshard_request_take_once(&f, &s->limits, &s->has_limits);
      break;
    case POOLED:
      ours = reshard_request_take_once(&f, &s->pooled, &s->has_pooled) &&
             reshard_request_pooled_shape(f.value, &s->target_block_ids,
                                          &s->text_bytes);
      break;
    default:
      ours = false; /* an inline placement, the binding, or not ours */
      break;
    }
    if (!ours) {
      return false;
    }
  }
  return true;
}

/* The pre-scan's caps: the source's pool ids count as placement parts, and
 * the source's and the target's block ids count together. */
static bool within_caps(const shape *s, const reshard_limits *caps) {
  return s->memory_ids <= caps->max_layout_parts &&
         s->source_block_ids <= caps->max_block_ids &&
         s->target_block_ids <= caps->max_block_ids - s->source_block_ids;
}

/* The nested messages, from their one occurrence each. */
static bool decode_nested(const shape *s, reshard_request_texts *texts,
                          reshard_arena *arena,
                          Reshard__V1__PlanTransferRequest *request) {
  return (!s->has_source_dp_rank ||
          (request->source_dp_rank =
               reshard_request_dp_rank(s->source_dp_rank, arena)) != NULL) &&
         (!s->has_target_dp_rank ||
          (request->target_dp_rank =
               reshard_request_dp_rank(s->target_dp_rank, arena)) != NULL) &&
         (!s->has_limits || (request->limits = reshard_request_limits(
                                 s->limits, arena)) != NULL) &&
         (!s->has_pooled ||
          (request->pooled = reshard_request_pooled(
               s->pooled, s->target_block_ids, texts, arena)) != NULL);
}

Reshard__V1__PlanTransferRequest *
reshard_transfer_request_decode(const uint8_t *data, size_t length,
                                const reshard_limits *caps,
                                reshard_arena *arena) {
  shape s;
  if (!read_shape(data, length, &s) || !within_caps(&s, caps)) {
    return NULL;
  }
  Reshard__V1__PlanTransferRequest *request =
      reshard_arena_alloc(arena, sizeof *request, 16);
  reshard_request_texts texts;
  if (request == NULL ||
      !reshard_request_texts_init(&texts, s.text_bytes, arena)) {
    return NULL;
  }
  reshard__v1__plan_transfer_request__init(request);
  uint32_t *ids;
  if (!reshard_request_text_list(s.memory_ids, arena,
                                 &request->source_memory_ids) ||
      !reshard_request_id_list(s.source_block_ids, arena, &ids)) {
    return NULL;
  }
  request->source_block_ids = ids;
  request->n_source_block_ids = s.source_block_ids;
  if (!decode_nested(&s, &texts, arena, request)) {
    return NULL;
  }
  reshard_wire_reader r = {data, data + length};
  while (r.at < r.end) {
    reshard_request_field f;
    if (!reshard_request_next_field(&r, &f)) {
      return NULL; /* read_shape has read the same bytes */
    }
    switch (f.number) {
    case SOURCE_PLACEMENT_ID:
      request->source_case =
          RESHARD__V1__PLAN_TRANSFER_REQUEST__SOURCE_SOURCE_PLACEMENT_ID;
      request->source_placement_id = reshard_request_copy_text(&texts, &f);
      break;
    case SOURCE_MEMORY_IDS:
      request->source_memory_ids[request->n_source_memory_ids++] =
          reshard_request_copy_text(&texts, &f);
      break;
    case SOURCE_BLOCK_IDS:
      if (!reshard_request_take_ids(&f, &ids)) {
        return NULL;
      }
      break;
    case TOKEN_COUNT:
      request->token_count = reshard_request_varint(&f);
      break;
    case TARGET_PLACEMENT_ID:
      request->target_case =
          RESHARD__V1__PLAN_TRANSFER_REQUEST__TARGET_TARGET_PLACEMENT_ID;
      request->target_placement_id = reshard_request_copy_text(&texts, &f);
      break;
    case RUNS:
      request->runs = reshard_request_bool(&f);
      break;
    case OPERATION_ID:
      request->operation_id = reshard_request_copy_text(&texts, &f);
      break;
    default:
      break; /* the nested messages, decoded above */
    }
  }
  return request;
}
