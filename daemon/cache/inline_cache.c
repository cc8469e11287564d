#include "cache/inline_cache.h"

#include <stdlib.h>
#include <string.h>

#include "cache/table.h"
#include "reshard/checked.h"
#include "wire/binding_decode.h"
#include "wire/decode.h"
#include "wire/wire_reader.h"

enum {
  FIELD_PAGE_KEYS = 2,
  FIELD_PLACEMENT = 3,
  FIELD_PLACEMENT_ID = 4,
  FIELD_BINDING = 6,
  FIELD_LIMITS = 7,
};

/* The next top-level field of a message: its number, wire type and the
 * span it covers. 1: a field; 0: the end; -1: the bytes do not parse as
 * protobuf-c would parse them. */
static int next_field(const uint8_t *data, reshard_wire_reader *r,
                      uint64_t *number, unsigned *wire,
                      reshard_wire_span *span) {
  if (r->at == r->end) {
    return 0;
  }
  const uint8_t *start = r->at;
  reshard_wire_reader value;
  if (!reshard_wire_read_tag(r, number, wire) ||
      !reshard_wire_read_value(r, *wire, &value)) {
    return -1;
  }
  *span = (reshard_wire_span){(size_t)(start - data), (size_t)(r->at - data),
                              value.at, (size_t)(value.end - value.at)};
  return 1;
}

bool reshard_inline_scan(const uint8_t *data, size_t length,
                         reshard_inline_fields *out) {
  memset(out, 0, sizeof *out);
  unsigned placements = 0, placement_ids = 0, limits = 0;
  reshard_wire_reader r = {data, data + length};
  uint64_t number;
  unsigned wire;
  reshard_wire_span span;
  int more;
  while ((more = next_field(data, &r, &number, &wire, &span)) > 0) {
    if (wire != RESHARD_WIRE_DELIMITED) {
      continue;
    }
    switch (number) {
    case FIELD_PAGE_KEYS:
      out->page_count++;
      break;
    case FIELD_PLACEMENT:
      placements++;
      out->placement = span;
      break;
    case FIELD_PLACEMENT_ID:
      placement_ids++;
      break;
    case FIELD_BINDING:
      out->bindings++;
      out->binding = span;
      break;
    case FIELD_LIMITS:
      limits++;
      out->limits = span;
      break;
    default:
      break;
    }
  }
  if (more < 0) {
    return false;
  }
  out->parsed = true;
  return placements == 1 && placement_ids == 0 && out->bindings <= 1 &&
         limits <= 1;
}

bool reshard_inline_find(const uint8_t *data, size_t length, unsigned field,
                         reshard_wire_span *last, unsigned *count) {
  memset(last, 0, sizeof *last);
  *count = 0;
  reshard_wire_reader r = {data, data + length};
  uint64_t number;
  unsigned wire;
  reshard_wire_span span;
  int more;
  while ((more = next_field(data, &r, &number, &wire, &span)) > 0) {
    if (wire == RESHARD_WIRE_DELIMITED && number == field) {
      *last = span;
      (*count)++;
    }
  }
  return more == 0;
}

uint8_t *reshard_inline_strip(const uint8_t *data, size_t length,
                              const reshard_wire_span *const *spans,
                              size_t span_count, reshard_arena *arena,
                              size_t *out_length) {
  uint8_t *out = reshard_arena_alloc(arena, length, 16);
  if (out == NULL) {
    return NULL;
  }
  size_t from = 0, written = 0;
  for (size_t i = 0; i < span_count; i++) {
    if (spans[i]->value == NULL) {
      continue;
    }
    memcpy(out + written, data + from, spans[i]->start - from);
    written += spans[i]->start - from;
    from = spans[i]->end;
  }
  memcpy(out + written, data + from, length - from);
  *out_length = written + length - from;
  return out;
}

char *reshard_inline_binding_key(const reshard_inline_fields *fields,
                                 const char *placement_id, reshard_arena *arena,
                                 size_t *key_length) {
  size_t id_length = strlen(placement_id) + 1; /* the NUL separates */
  size_t length = fields->binding.value_length + id_length +
                  sizeof fields->page_count + fields->limits.value_length;
  char *key = reshard_arena_alloc(arena, length, 8);
  if (key == NULL) {
    return NULL;
  }
  char *at = key;
  memcpy(at, fields->binding.value, fields->binding.value_length);
  at += fields->binding.value_length;
  memcpy(at, placement_id, id_length);
  at += id_length;
  memcpy(at, &fields->page_count, sizeof fields->page_count);
  at += sizeof fields->page_count;
  if (fields->limits.value_length > 0) {
    memcpy(at, fields->limits.value, fields->limits.value_length);
  }
  *key_length = length;
  return key;
}

uint64_t reshard_binding_values(const reshard_binding *binding) {
  uint64_t total = 0;
  for (size_t i = 0; i < binding->range_count; i++) {
    const reshard_binding_range *range = &binding->ranges[i];
    uint64_t values;
    if (!reshard_mul(range->token_count, range->head_count, &values) ||
        !reshard_add(total, values, &total)) {
      return UINT64_MAX;
    }
  }
  return total;
}

static void binding_destroy(reshard_shared *shared) {
  reshard_shared_binding *b = (reshard_shared_binding *)shared;
  reshard_arena_destroy(&b->arena);
  free(b);
}

reshard_shared_binding *
reshard_shared_binding_create(const reshard_inline_fields *fields,
                              const reshard_placement *placement,
                              const reshard_limits *limits) {
  reshard_shared_binding *b = calloc(1, sizeof *b);
  if (b == NULL) {
    return NULL;
  }
  atomic_init(&b->base.refs, 1);
  b->base.destroy = binding_destroy;
  reshard_arena_init(&b->arena, 0);
  const reshard_placement_part *part = NULL;
  bool ok = reshard_binding_decode(
                fields->binding.value, fields->binding.value_length, "binding",
                reshard_decode_caps(),
                reshard_decode_budget(fields->binding.value_length), &b->arena,
                &b->binding, NULL) == RESHARD_OK;
  if (ok) {
    part = reshard_placement_find_part(placement, b->binding.participant_id);
    ok = part != NULL &&
         reshard_binding_validate(&b->binding, &placement->descriptor, part,
                                  fields->page_count, limits, &b->arena,
                                  &b->bound, NULL) == RESHARD_OK;
  }
  if (!ok) {
    binding_destroy(&b->base);
    return NULL;
  }
  b->values = reshard_binding_values(&b->binding);
  b->base.bytes = sizeof *b + b->arena.total_bytes;
  return b;
}

bool reshard_inline_seen(reshard_inline_recent *recent, const char *key,
                         size_t key_length) {
  uint64_t hash = reshard_hash(key, key_length, 0x5eed);
  uint64_t *slot = &recent->hashes[hash % 256];
  bool seen = *slot == hash;
  *slot = hash;
  return seen;
}
