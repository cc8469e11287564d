#include "store_oracle.h"

#include <inttypes.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static bool failf(char *msg, size_t msg_size, const char *format, ...) {
  va_list args;
  va_start(args, format);
  vsnprintf(msg, msg_size, format, args);
  va_end(args);
  return false;
}

static void *xcalloc(size_t count, size_t size) {
  void *p = calloc(count ? count : 1, size ? size : 1);
  if (p == NULL) {
    fprintf(stderr, "store oracle: out of memory\n");
    abort();
  }
  return p;
}

static uint64_t dim_of(const reshard_descriptor *d, reshard_component c) {
  return c == RESHARD_COMPONENT_KEY ? d->key_head_dim : d->value_head_dim;
}

static size_t region_of(const reshard_binding *binding, const char *id) {
  for (size_t i = 0; i < binding->region_count; i++) {
    if (strcmp(binding->regions[i].region_id, id) == 0) {
      return i;
    }
  }
  fprintf(stderr, "store oracle: a range names an unknown region\n");
  abort();
}

void oracle_memory_alloc(const reshard_binding *binding, uint8_t fill,
                         oracle_memory *out) {
  out->count = binding->region_count;
  out->regions = xcalloc(out->count, sizeof *out->regions);
  for (size_t i = 0; i < out->count; i++) {
    out->regions[i] = xcalloc((size_t)binding->regions[i].nbytes, 1);
    memset(out->regions[i], fill, (size_t)binding->regions[i].nbytes);
  }
}

void oracle_memory_free(oracle_memory *memory) {
  for (size_t i = 0; i < memory->count; i++) {
    free(memory->regions[i]);
  }
  free(memory->regions);
  memset(memory, 0, sizeof *memory);
}

/* Visits every byte of every value the binding holds within the span:
 * `fill` writes it, otherwise it is compared. */
static bool walk_values(const reshard_descriptor *d,
                        const reshard_binding *binding, uint64_t page_count,
                        uint8_t **regions, bool fill, char *msg,
                        size_t msg_size) {
  uint64_t P = d->page_size, itemsize = d->itemsize;
  uint64_t span = page_count * P;
  for (size_t ri = 0; ri < binding->range_count; ri++) {
    const reshard_binding_range *r = &binding->ranges[ri];
    size_t region = region_of(binding, r->region_id);
    uint64_t dim = dim_of(d, r->component);
    uint64_t t_end = r->token_start + r->token_count;
    for (uint64_t t = r->token_start; t < t_end && t < span; t++) {
      for (uint64_t h = r->head_start; h < r->head_start + r->head_count; h++) {
        uint8_t *value = regions[region] + r->offset_bytes +
                         (t - r->token_start) * r->token_stride_bytes +
                         (h - r->head_start) * r->head_stride_bytes;
        for (uint64_t e = 0; e < dim; e++) {
          uint64_t hash = oracle_element_hash(t / P, t % P, r->global_layer_id,
                                              h, r->component, e);
          for (uint64_t k = 0; k < itemsize; k++) {
            uint8_t want = (uint8_t)(hash >> (8 * (k % 8)));
            uint8_t *byte = value + e * itemsize + k;
            if (fill) {
              *byte = want;
            } else if (*byte != want) {
              return failf(msg, msg_size,
                           "memory: range %zu layer %" PRIu64
                           " %s token %" PRIu64 " head %" PRIu64
                           " element %" PRIu64 " byte %" PRIu64
                           " holds 0x%02x, want 0x%02x",
                           ri, r->global_layer_id,
                           r->component == RESHARD_COMPONENT_KEY ? "K" : "V", t,
                           h, e, k, *byte, want);
            }
          }
        }
      }
    }
  }
  return true;
}

void oracle_memory_fill_values(const reshard_descriptor *desc,
                               const reshard_binding *binding,
                               uint64_t page_count, oracle_memory *memory) {
  walk_values(desc, binding, page_count, memory->regions, true, NULL, 0);
}

bool oracle_memory_check_values(const reshard_descriptor *desc,
                                const reshard_binding *binding,
                                uint64_t page_count,
                                const oracle_memory *memory, char *msg,
                                size_t msg_size) {
  return walk_values(desc, binding, page_count, memory->regions, false, msg,
                     msg_size);
}

/* Layer sets compared as sets: the oracle does not rely on the library's
 * sorting of either list. */
static bool same_layers(const uint64_t *a, size_t a_count, const uint64_t *b,
                        size_t b_count) {
  if (a_count != b_count) {
    return false;
  }
  for (size_t i = 0; i < a_count; i++) {
    bool found = false;
    for (size_t j = 0; j < b_count && !found; j++) {
      found = a[i] == b[j];
    }
    if (!found) {
      return false;
    }
  }
  return true;
}

size_t oracle_store_expected_parts(const reshard_layout *layout,
                                   const reshard_placement_part *part,
                                   uint64_t *out, size_t room) {
  if (part->replica_ordinal != 0 || part->layer_count == 0) {
    return 0;
  }
  size_t n = 0;
  for (size_t s = 0; s < layout->shard_count; s++) {
    const reshard_shard *shard = &layout->shards[s];
    if (shard->head_start == part->head_start &&
        shard->head_count == part->head_count &&
        same_layers(shard->layer_ids, shard->layer_count, part->layer_ids,
                    part->layer_count) &&
        n < room) {
      out[n++] = s;
    }
  }
  return n;
}

void oracle_store_init(oracle_store *store, const reshard_layout *layout,
                       uint64_t page_count) {
  store->layout = layout;
  store->page_count = page_count;
  size_t slots = (size_t)page_count * layout->shard_count;
  store->parts = xcalloc(slots, sizeof *store->parts);
  store->writes = xcalloc(slots, sizeof *store->writes);
}

void oracle_store_free(oracle_store *store) {
  size_t slots = (size_t)store->page_count * store->layout->shard_count;
  for (size_t i = 0; i < slots; i++) {
    free(store->parts[i]);
    free(store->writes[i]);
  }
  free(store->parts);
  free(store->writes);
  memset(store, 0, sizeof *store);
}

static size_t slot_of(const oracle_store *store, uint64_t page, uint64_t part) {
  return (size_t)(page * store->layout->shard_count + part);
}

/* SPEC §2.2 step 5: batches tile the copies in order, within both limits,
 * and every batch but the last is full in copies or in bytes. */
static bool check_batches(const reshard_store_plan *plan,
                          const reshard_limits *limits, char *msg,
                          size_t msg_size) {
  size_t next = 0;
  uint64_t total = 0;
  for (size_t b = 0; b < plan->batch_count; b++) {
    const reshard_batch *batch = &plan->batches[b];
    if (batch->first != next || batch->count == 0) {
      return failf(msg, msg_size, "batch %zu: starts at copy %zu, want %zu", b,
                   batch->first, next);
    }
    uint64_t bytes = 0;
    for (size_t i = batch->first; i < batch->first + batch->count; i++) {
      bytes += plan->copies[i].nbytes;
    }
    if (bytes != batch->bytes) {
      return failf(msg, msg_size,
                   "batch %zu: says %" PRIu64 " bytes, copies sum %" PRIu64, b,
                   batch->bytes, bytes);
    }
    bool last = b + 1 == plan->batch_count;
    bool full = batch->count == limits->max_batch_operations ||
                bytes == limits->max_batch_bytes;
    if (batch->count > limits->max_batch_operations ||
        bytes > limits->max_batch_bytes || (!last && !full)) {
      return failf(msg, msg_size,
                   "batch %zu: %zu copies, %" PRIu64
                   " bytes against limits %" PRIu64 " / %" PRIu64
                   " (every batch but the last is full)",
                   b, batch->count, bytes, limits->max_batch_operations,
                   limits->max_batch_bytes);
    }
    total += bytes;
    next += batch->count;
  }
  if (next != plan->copy_count || plan->operations != plan->copy_count ||
      total != plan->bytes) {
    return failf(msg, msg_size,
                 "batches cover %zu of %zu copies, operations %" PRIu64
                 ", bytes %" PRIu64 " of %" PRIu64,
                 next, plan->copy_count, plan->operations, total, plan->bytes);
  }
  return true;
}

bool oracle_store_execute(const reshard_store_request *request,
                          const reshard_store_plan *plan,
                          const oracle_memory *memory, oracle_store *store,
                          char *msg, size_t msg_size) {
  const reshard_layout *layout = request->layout;
  const reshard_placement_part *part = NULL;
  for (size_t p = 0; p < request->placement->part_count; p++) {
    if (strcmp(request->placement->parts[p].participant_id,
               request->binding->participant_id) == 0) {
      part = &request->placement->parts[p];
    }
  }
  if (part == NULL) {
    return failf(msg, msg_size, "oracle: participant not in the placement");
  }
  uint64_t expected[4];
  size_t expected_count =
      oracle_store_expected_parts(layout, part, expected, 4);
  if (plan->part_count != expected_count ||
      (expected_count == 1 && plan->part_indexes[0] != expected[0])) {
    return failf(msg, msg_size,
                 "part_indexes: %zu Parts (first %" PRIu64
                 "), the writer writes %zu (first %" PRIu64 ")",
                 plan->part_count,
                 plan->part_count ? plan->part_indexes[0] : UINT64_MAX,
                 expected_count, expected_count ? expected[0] : UINT64_MAX);
  }
  if (!check_batches(plan, &request->limits, msg, msg_size)) {
    return false;
  }
  for (size_t i = 0; i < plan->copy_count; i++) {
    const reshard_copy *c = &plan->copies[i];
    bool owned = false;
    for (size_t k = 0; k < plan->part_count; k++) {
      owned = owned || plan->part_indexes[k] == c->part_index;
    }
    if (!owned || c->page_index >= store->page_count ||
        c->region_index >= memory->count || c->nbytes == 0) {
      return failf(msg, msg_size,
                   "copy %zu: page %" PRIu64 " part %" PRIu64 " region %" PRIu64
                   " is not a Part this writer writes or out of range",
                   i, c->page_index, c->part_index, c->region_index);
    }
    uint64_t part_size = oracle_part_size(layout, (size_t)c->part_index);
    uint64_t region_size = request->binding->regions[c->region_index].nbytes;
    if (c->part_offset + c->nbytes > part_size ||
        c->region_offset + c->nbytes > region_size) {
      return failf(msg, msg_size,
                   "copy %zu: [%" PRIu64 ", +%" PRIu64 ") leaves Part (%" PRIu64
                   " bytes) or region (%" PRIu64 " bytes)",
                   i, c->part_offset, c->nbytes, part_size, region_size);
    }
    size_t slot = slot_of(store, c->page_index, c->part_index);
    if (store->parts[slot] == NULL) {
      store->parts[slot] = xcalloc((size_t)part_size, 1);
      store->writes[slot] = xcalloc((size_t)part_size, 1);
    }
    memcpy(store->parts[slot] + c->part_offset,
           memory->regions[c->region_index] + c->region_offset,
           (size_t)c->nbytes);
    for (uint64_t b = 0; b < c->nbytes; b++) {
      if (store->writes[slot][c->part_offset + b]++ != 0) {
        return failf(msg, msg_size,
                     "copy %zu: writes page %" PRIu64 " Part %" PRIu64
                     " byte %" PRIu64 " a second time",
                     i, c->page_index, c->part_index, c->part_offset + b);
      }
    }
  }
  return true;
}

bool oracle_store_check_parts(const oracle_store *store,
                              const uint64_t *part_indexes, size_t part_count,
                              char *msg, size_t msg_size) {
  const reshard_layout *layout = store->layout;
  for (uint64_t page = 0; page < store->page_count; page++) {
    for (size_t k = 0; k < part_count; k++) {
      size_t part = (size_t)part_indexes[k];
      size_t slot = slot_of(store, page, part);
      uint64_t size = oracle_part_size(layout, part);
      if (store->parts[slot] == NULL) {
        return failf(msg, msg_size, "page %" PRIu64 " Part %zu: never written",
                     page, part);
      }
      uint8_t *want = xcalloc((size_t)size, 1);
      oracle_fill_part(layout, part, page, want);
      for (uint64_t b = 0; b < size; b++) {
        if (store->writes[slot][b] != 1 || store->parts[slot][b] != want[b]) {
          uint8_t got = store->parts[slot][b], writes = store->writes[slot][b];
          uint8_t expected = want[b];
          free(want);
          return failf(msg, msg_size,
                       "page %" PRIu64 " Part %zu byte %" PRIu64
                       ": 0x%02x written %u times, want 0x%02x once",
                       page, part, b, got, writes, expected);
        }
      }
      free(want);
    }
  }
  return true;
}

bool oracle_store_load(const oracle_store *store, const reshard_load_plan *plan,
                       const reshard_binding *binding, oracle_memory *memory,
                       char *msg, size_t msg_size) {
  for (size_t i = 0; i < plan->copy_count; i++) {
    const reshard_copy *c = &plan->copies[i];
    if (c->page_index >= store->page_count ||
        c->part_index >= store->layout->shard_count ||
        c->region_index >= binding->region_count) {
      return failf(msg, msg_size, "load copy %zu: out of range", i);
    }
    const uint8_t *part =
        store->parts[slot_of(store, c->page_index, c->part_index)];
    uint64_t part_size = oracle_part_size(store->layout, (size_t)c->part_index);
    if (part == NULL || c->part_offset + c->nbytes > part_size ||
        c->region_offset + c->nbytes >
            binding->regions[c->region_index].nbytes) {
      return failf(msg, msg_size,
                   "load copy %zu: page %" PRIu64 " Part %" PRIu64
                   " was not stored, or the copy leaves it or its region",
                   i, c->page_index, c->part_index);
    }
    memcpy(memory->regions[c->region_index] + c->region_offset,
           part + c->part_offset, (size_t)c->nbytes);
  }
  return true;
}
