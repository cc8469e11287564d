#include "wire/decode.h"

#include <stdbool.h>
#include <string.h>

#include "reshard/v1/planner.pb-c.h"
#include "wire/wire_reader.h"

enum {
  /* Our schema nests five deep (PlanLoadRequest → Placement →
   * PlacementPart → Rank); anything deeper is not ours. */
  MAX_DEPTH = 16,
  /* Fields of the widest message we scan (bitmaps below). */
  MAX_FIELDS = 64,
  /* Every arena allocation may waste this much to alignment. */
  ALLOC_SLACK = 16,
  /* protobuf-c's ScannedMember, kept in slabs that double: at most two
   * per field occurrence once a message has more than 16. */
  SCANNED_MEMBER = 32,
  SCANNED_INLINE = 16,
};

uint64_t reshard_decode_budget(size_t length) {
  uint64_t budget = 1024 * 1024;
  uint64_t per_byte = (uint64_t)length * 16;
  return per_byte / 16 == length ? budget + per_byte : UINT64_MAX;
}

/* ---- Count caps ---- */

typedef enum cap_kind {
  CAP_RANGES,
  CAP_REGIONS,
  CAP_PAGE_KEYS,
  CAP_SHARDS,
  CAP_PARTS,
  CAP_SHARD_LAYERS,
  CAP_PART_LAYERS,
  CAP_DESCRIPTOR_LAYERS,
  CAP_POOL_TENSORS,
  CAP_BLOCK_IDS,
  CAP_KINDS
} cap_kind;

typedef struct cap_entry {
  const ProtobufCMessageDescriptor *message;
  uint32_t field;
  cap_kind kind;
} cap_entry;

static const cap_entry CAPS[] = {
    {&reshard__v1__runtime_binding__descriptor, 4, CAP_RANGES},
    {&reshard__v1__runtime_binding__descriptor, 3, CAP_REGIONS},
    {&reshard__v1__plan_load_request__descriptor, 2, CAP_PAGE_KEYS},
    {&reshard__v1__register_pages_request__descriptor, 2, CAP_PAGE_KEYS},
    {&reshard__v1__forget_pages_request__descriptor, 2, CAP_PAGE_KEYS},
    {&reshard__v1__store_layout__descriptor, 3, CAP_SHARDS},
    {&reshard__v1__placement__descriptor, 7, CAP_PARTS},
    {&reshard__v1__store_shard__descriptor, 1, CAP_SHARD_LAYERS},
    {&reshard__v1__placement_part__descriptor, 3, CAP_PART_LAYERS},
    {&reshard__v1__descriptor__descriptor, 1, CAP_DESCRIPTOR_LAYERS},
    {&reshard__v1__memory_pool__descriptor, 3, CAP_REGIONS},
    {&reshard__v1__memory_pool__descriptor, 6, CAP_POOL_TENSORS},
    {&reshard__v1__pooled_memory__descriptor, 3, CAP_BLOCK_IDS},
    {&reshard__v1__plan_transfer_request__descriptor, 4, CAP_PARTS},
    {&reshard__v1__plan_transfer_request__descriptor, 5, CAP_BLOCK_IDS},
};

static uint64_t cap_value(const reshard_limits *caps, cap_kind kind,
                          const char **flag) {
  switch (kind) {
  case CAP_RANGES:
  case CAP_REGIONS:
    *flag = "max_ranges (--max-ranges)";
    return caps->max_ranges;
  case CAP_PAGE_KEYS:
    *flag = "max_page_keys (--max-page-keys)";
    return caps->max_page_keys;
  case CAP_SHARDS:
  case CAP_PARTS:
    *flag = "max_layout_parts (--max-layout-parts)";
    return caps->max_layout_parts;
  case CAP_POOL_TENSORS:
    *flag = "max_pool_tensors (--max-pool-tensors)";
    return caps->max_pool_tensors;
  case CAP_BLOCK_IDS:
    *flag = "max_block_ids (--max-block-ids)";
    return caps->max_block_ids;
  case CAP_SHARD_LAYERS:
  case CAP_PART_LAYERS:
  case CAP_DESCRIPTOR_LAYERS:
  case CAP_KINDS:
    break;
  }
  *flag = "max_layout_fragments (--max-layout-fragments)";
  return caps->max_layout_fragments;
}

static reshard_limits process_caps;
static bool process_caps_set;

void reshard_decode_set_caps(const reshard_limits *caps) {
  process_caps = *caps;
  process_caps_set = true;
}

const reshard_limits *reshard_decode_caps(void) {
  if (!process_caps_set) {
    process_caps = reshard_limits_default();
    process_caps_set = true;
  }
  return &process_caps;
}

/* ---- The pre-scan ---- */

typedef struct scan {
  const reshard_limits *caps;
  uint64_t counts[CAP_KINDS];
  uint64_t cost;
  uint64_t max_bytes;
  const char *type_name; /* the request's type, for messages */
  size_t length;         /* the request's size, for messages */
  reshard_error *err;
} scan;

static reshard_status malformed(scan *s) {
  return reshard_error_set(s->err, RESHARD_INVALID_ARGUMENT,
                           "request: malformed %s message (%zu bytes)",
                           s->type_name, s->length);
}

static reshard_status add_cost(scan *s, uint64_t bytes) {
  s->cost = s->cost + bytes < s->cost ? UINT64_MAX : s->cost + bytes;
  /* The arena's chunks may be left a quarter unused. */
  uint64_t with_waste = s->cost + s->cost / 4;
  if (with_waste < s->cost || with_waste > s->max_bytes) {
    return reshard_error_set(
        s->err, RESHARD_RESOURCE_EXHAUSTED,
        "request: decoding this %s would take more than %llu bytes, the "
        "budget of a request its size (16 bytes per request byte + 1 MiB)",
        s->type_name, (unsigned long long)s->max_bytes);
  }
  return RESHARD_OK;
}

static reshard_status count_capped(scan *s,
                                   const ProtobufCMessageDescriptor *message,
                                   const ProtobufCFieldDescriptor *field,
                                   uint64_t elements) {
  if (s->caps == NULL) {
    return RESHARD_OK;
  }
  for (size_t i = 0; i < sizeof CAPS / sizeof CAPS[0]; i++) {
    if (CAPS[i].message != message || CAPS[i].field != field->id) {
      continue;
    }
    const char *flag;
    uint64_t cap = cap_value(s->caps, CAPS[i].kind, &flag);
    uint64_t *count = &s->counts[CAPS[i].kind];
    *count += elements;
    if (*count > cap) {
      return reshard_error_set(s->err, RESHARD_RESOURCE_EXHAUSTED,
                               "%s.%s: more than %llu entries exceed the "
                               "limit %s",
                               message->short_name, field->name,
                               (unsigned long long)cap, flag);
    }
    /* A placement's identity repeats its descriptor in every part. */
    uint64_t parts = s->counts[CAP_PARTS];
    uint64_t layers = s->counts[CAP_DESCRIPTOR_LAYERS];
    uint64_t fragments = s->caps->max_layout_fragments;
    if (parts != 0 && layers > fragments / parts) {
      return reshard_error_set(
          s->err, RESHARD_RESOURCE_EXHAUSTED,
          "placement: %llu parts × %llu descriptor layers exceed the limit "
          "max_layout_fragments (--max-layout-fragments) of %llu",
          (unsigned long long)parts, (unsigned long long)layers,
          (unsigned long long)fragments);
    }
    return RESHARD_OK;
  }
  return RESHARD_OK;
}

/* Elements in a packed run of `length` bytes. */
static uint64_t packed_elements(const ProtobufCFieldDescriptor *field,
                                const uint8_t *data, size_t length) {
  switch (field->type) {
  case PROTOBUF_C_TYPE_FIXED32:
  case PROTOBUF_C_TYPE_SFIXED32:
  case PROTOBUF_C_TYPE_FLOAT:
    return length / 4;
  case PROTOBUF_C_TYPE_FIXED64:
  case PROTOBUF_C_TYPE_SFIXED64:
  case PROTOBUF_C_TYPE_DOUBLE:
    return length / 8;
  default: {
    uint64_t n = 0;
    for (size_t i = 0; i < length; i++) {
      n += !(data[i] & 0x80);
    }
    return n;
  }
  }
}

static size_t element_size(const ProtobufCFieldDescriptor *field) {
  switch (field->type) {
  case PROTOBUF_C_TYPE_BYTES:
    return sizeof(ProtobufCBinaryData);
  case PROTOBUF_C_TYPE_STRING:
  case PROTOBUF_C_TYPE_MESSAGE:
    return sizeof(void *);
  default:
    return sizeof(uint64_t);
  }
}

static bool is_scalar(const ProtobufCFieldDescriptor *field) {
  return field->type != PROTOBUF_C_TYPE_STRING &&
         field->type != PROTOBUF_C_TYPE_BYTES &&
         field->type != PROTOBUF_C_TYPE_MESSAGE;
}

static reshard_status scan_message(scan *s,
                                   const ProtobufCMessageDescriptor *type,
                                   const uint8_t *data, size_t length,
                                   unsigned depth);

/* One length-delimited occurrence of a known field. */
static reshard_status scan_delimited(scan *s,
                                     const ProtobufCMessageDescriptor *type,
                                     const ProtobufCFieldDescriptor *field,
                                     const uint8_t *data, size_t length,
                                     uint64_t *elements, unsigned depth) {
  if (field->label == PROTOBUF_C_LABEL_REPEATED && is_scalar(field)) {
    *elements = packed_elements(field, data, length);
    return count_capped(s, type, field, *elements);
  }
  *elements = 1;
  reshard_status status = count_capped(s, type, field, 1);
  if (status != RESHARD_OK) {
    return status;
  }
  switch (field->type) {
  case PROTOBUF_C_TYPE_STRING:
    return add_cost(s, (uint64_t)length + 1 + ALLOC_SLACK);
  case PROTOBUF_C_TYPE_BYTES:
    return add_cost(s, (uint64_t)length + ALLOC_SLACK);
  case PROTOBUF_C_TYPE_MESSAGE:
    return scan_message(s, field->descriptor, data, length, depth + 1);
  default:
    return RESHARD_OK; /* a wire-type mismatch protobuf-c will refuse */
  }
}

static reshard_status scan_message(scan *s,
                                   const ProtobufCMessageDescriptor *type,
                                   const uint8_t *data, size_t length,
                                   unsigned depth) {
  if (depth > MAX_DEPTH || type->n_fields > MAX_FIELDS) {
    return malformed(s);
  }
  reshard_status status = add_cost(s, type->sizeof_message + ALLOC_SLACK);
  if (status != RESHARD_OK) {
    return status;
  }
  uint64_t repeated[MAX_FIELDS] = {0};
  bool seen[MAX_FIELDS] = {false};
  uint64_t occurrences = 0, unknown = 0;
  reshard_wire_reader r = {data, data + length};
  while (r.at < r.end) {
    uint64_t number;
    unsigned wire;
    reshard_wire_reader value;
    if (!reshard_wire_read_tag(&r, &number, &wire) ||
        !reshard_wire_read_value(&r, wire, &value)) {
      return malformed(s);
    }
    size_t value_length = (size_t)(value.end - value.at);
    occurrences++;
    const ProtobufCFieldDescriptor *field =
        protobuf_c_message_descriptor_get_field(type, (unsigned)number);
    if (field == NULL) {
      /* protobuf-c keeps unknown fields: one record and a copy each. */
      unknown++;
      status = add_cost(s, (uint64_t)value_length + ALLOC_SLACK);
    } else {
      size_t index = (size_t)(field - type->fields);
      uint64_t elements = 0;
      if (wire == RESHARD_WIRE_DELIMITED) {
        status = scan_delimited(s, type, field, value.at, value_length,
                                &elements, depth);
      } else if (field->label == PROTOBUF_C_LABEL_REPEATED) {
        elements = 1;
        status = count_capped(s, type, field, 1);
      }
      if (status == RESHARD_OK && field->type == PROTOBUF_C_TYPE_MESSAGE &&
          field->label != PROTOBUF_C_LABEL_REPEATED) {
        if (seen[index]) {
          return reshard_error_set(
              s->err, RESHARD_INVALID_ARGUMENT,
              "%s.%s: occurs more than once; a singular message field may "
              "appear at most once in a request",
              type->short_name, field->name);
        }
        seen[index] = true;
      }
      if (field->label == PROTOBUF_C_LABEL_REPEATED) {
        repeated[index] += elements;
      }
    }
    if (status != RESHARD_OK) {
      return status;
    }
  }
  uint64_t extra = 0;
  for (unsigned i = 0; i < type->n_fields; i++) {
    if (repeated[i] != 0) {
      extra += repeated[i] * element_size(&type->fields[i]) + ALLOC_SLACK;
    }
  }
  if (unknown != 0) {
    extra += unknown * sizeof(ProtobufCMessageUnknownField) + ALLOC_SLACK;
  }
  if (occurrences > SCANNED_INLINE) {
    extra += 2 * occurrences * SCANNED_MEMBER + 64 * ALLOC_SLACK;
  }
  return add_cost(s, extra);
}

/* ---- Decoding under the budget ---- */

typedef struct budget_allocator {
  reshard_arena *arena;
  uint64_t left;
  bool failed;
} budget_allocator;

static void *budget_alloc(void *data, size_t size) {
  budget_allocator *state = data;
  uint64_t charge = (uint64_t)size + ALLOC_SLACK;
  void *memory = NULL;
  if (charge >= size && charge <= state->left) {
    memory = reshard_arena_alloc(state->arena, size, 16);
  }
  if (memory == NULL) {
    state->failed = true;
    return NULL;
  }
  state->left -= charge;
  return memory;
}

static void budget_free(void *data, void *pointer) {
  (void)data;
  (void)pointer;
}

ProtobufCMessage *reshard_decode(const ProtobufCMessageDescriptor *type,
                                 const uint8_t *data, size_t length,
                                 uint64_t max_bytes, const reshard_limits *caps,
                                 reshard_arena *arena, reshard_error *err) {
  scan s;
  memset(&s, 0, sizeof s);
  s.caps = caps;
  s.max_bytes = max_bytes;
  s.type_name = type->name;
  s.length = length;
  s.err = err;
  if (scan_message(&s, type, data, length, 0) != RESHARD_OK) {
    return NULL;
  }
  budget_allocator state = {arena, max_bytes, false};
  ProtobufCAllocator allocator = {budget_alloc, budget_free, &state};
  ProtobufCMessage *message =
      protobuf_c_message_unpack(type, &allocator, length, data);
  if (message == NULL) {
    if (state.failed) {
      reshard_error_set(err, RESHARD_RESOURCE_EXHAUSTED,
                        "request: decoding this %s (%zu bytes) ran past its "
                        "budget of %llu bytes",
                        type->name, length, (unsigned long long)max_bytes);
    } else {
      reshard_error_set(err, RESHARD_INVALID_ARGUMENT,
                        "request: malformed %s message (%zu bytes)", type->name,
                        length);
    }
  }
  return message;
}
