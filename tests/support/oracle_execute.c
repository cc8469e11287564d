/* Executing a plan batch by batch into sentinel-filled region buffers
 * and checking every byte the binding covers, and every one it does
 * not (oracle.h). */
#include "oracle_internal.h"

#include <inttypes.h>

#include "reshard/checked.h"

/* ------------------------------------------------------------------ */
/* Execution and byte checks                                           */
/* ------------------------------------------------------------------ */

typedef struct dest_span {
  uint64_t region, offset, nbytes;
  size_t copy;
} dest_span;

static int cmp_dest(const void *a, const void *b) {
  const dest_span *x = a, *y = b;
  if (x->region != y->region) {
    return x->region < y->region ? -1 : 1;
  }
  if (x->offset != y->offset) {
    return x->offset < y->offset ? -1 : 1;
  }
  return 0;
}

/* The index of a copy that wrote byte `offset` of region `region`, or
 * SIZE_MAX. For messages only. */
static size_t find_writer(const reshard_load_plan *plan, uint64_t region,
                          uint64_t offset) {
  for (size_t i = 0; i < plan->copy_count; i++) {
    const reshard_copy *c = &plan->copies[i];
    if (c->region_index == region && offset >= c->region_offset &&
        offset - c->region_offset < c->nbytes) {
      return i;
    }
  }
  return SIZE_MAX;
}

static int describe_copy(char *buf, size_t size, const reshard_load_plan *plan,
                         size_t i) {
  if (i == SIZE_MAX || i >= plan->copy_count) {
    return snprintf(buf, size, "no copy");
  }
  const reshard_copy *c = &plan->copies[i];
  return snprintf(buf, size,
                  "copy %zu {page %" PRIu64 " part %" PRIu64 " off %" PRIu64
                  " -> region %" PRIu64 " off %" PRIu64 " n %" PRIu64 "}",
                  i, c->page_index, c->part_index, c->part_offset,
                  c->region_index, c->region_offset, c->nbytes);
}

typedef struct exec_state {
  size_t region_count;
  uint8_t **data;
  uint8_t **writes;
  uint8_t **covered;
  uint8_t **parts; /* hit_pages * max_shards, built lazily */
  size_t max_shards;
  dest_span *spans;
} exec_state;

static void exec_state_free(exec_state *st, uint64_t hit_pages) {
  for (size_t r = 0; r < st->region_count; r++) {
    free(st->data ? st->data[r] : NULL);
    free(st->writes ? st->writes[r] : NULL);
    free(st->covered ? st->covered[r] : NULL);
  }
  if (st->parts != NULL) {
    for (size_t i = 0; i < hit_pages * st->max_shards; i++) {
      free(st->parts[i]);
    }
  }
  free(st->data);
  free(st->writes);
  free(st->covered);
  free(st->parts);
  free(st->spans);
}

static bool exec_check_batches(const reshard_load_plan *plan,
                               const reshard_load_request *request, char *msg,
                               size_t msg_size) {
  size_t next = 0;
  uint64_t total = 0;
  for (size_t b = 0; b < plan->batch_count; b++) {
    const reshard_batch *batch = &plan->batches[b];
    if (batch->first != next) {
      return failf(msg, msg_size,
                   "batch %zu starts at copy %zu, expected %zu (batches must "
                   "tile the copies in order)",
                   b, batch->first, next);
    }
    if (batch->count == 0) {
      return failf(msg, msg_size, "batch %zu is empty", b);
    }
    if (batch->count > plan->copy_count - next) {
      return failf(msg, msg_size, "batch %zu runs past the copies", b);
    }
    uint64_t bytes = 0;
    for (size_t k = 0; k < batch->count; k++) {
      bytes += plan->copies[batch->first + k].nbytes;
    }
    if (bytes != batch->bytes) {
      return failf(msg, msg_size,
                   "batch %zu bytes %" PRIu64 ", its copies sum to %" PRIu64, b,
                   batch->bytes, bytes);
    }
    if (batch->count > request->limits.max_batch_operations ||
        batch->bytes > request->limits.max_batch_bytes) {
      return failf(msg, msg_size,
                   "batch %zu has %zu copies / %" PRIu64
                   " bytes, above the limits %" PRIu64 " / %" PRIu64,
                   b, batch->count, batch->bytes,
                   request->limits.max_batch_operations,
                   request->limits.max_batch_bytes);
    }
    total += bytes;
    next += batch->count;
  }
  if (next != plan->copy_count) {
    return failf(msg, msg_size, "batches cover %zu of %zu copies", next,
                 plan->copy_count);
  }
  if (plan->operations != plan->copy_count) {
    return failf(msg, msg_size, "operations %" PRIu64 " but %zu copies",
                 plan->operations, plan->copy_count);
  }
  if (plan->bytes != total) {
    return failf(msg, msg_size,
                 "plan bytes %" PRIu64 ", copies sum to %" PRIu64, plan->bytes,
                 total);
  }
  return true;
}

bool oracle_execute(const reshard_load_request *request,
                    const reshard_load_plan *plan, oracle_exec_stats *stats,
                    char *msg, size_t msg_size) {
  const reshard_descriptor *d = &request->placement->descriptor;
  const reshard_binding *binding = request->binding;
  uint64_t P = d->page_size, itemsize = d->itemsize;
  uint64_t hits = plan->hit_pages;
  if (!exec_check_batches(plan, request, msg, msg_size)) {
    return false;
  }
  if (hits > request->page_count) {
    return failf(msg, msg_size, "hit_pages %" PRIu64 " above page count", hits);
  }
  exec_state st;
  memset(&st, 0, sizeof st);
  st.region_count = binding->region_count;
  st.data = xcalloc(st.region_count, sizeof *st.data);
  st.writes = xcalloc(st.region_count, sizeof *st.writes);
  st.covered = xcalloc(st.region_count, sizeof *st.covered);
  for (size_t r = 0; r < st.region_count; r++) {
    size_t n = (size_t)binding->regions[r].nbytes;
    st.data[r] = xmalloc(n);
    memset(st.data[r], ORACLE_SENTINEL, n);
    st.writes[r] = xcalloc(n, 1);
    st.covered[r] = xcalloc(n, 1);
  }
  for (size_t s = 0; s < request->source_count; s++) {
    st.max_shards = st.max_shards > request->sources[s].layout->shard_count
                        ? st.max_shards
                        : request->sources[s].layout->shard_count;
  }
  st.parts = xcalloc((size_t)hits * st.max_shards + 1, sizeof *st.parts);
  st.spans = xcalloc(plan->copy_count + 1, sizeof *st.spans);

  bool ok = true;
  uint64_t total = 0;
  char what[256];
  for (size_t b = 0; ok && b < plan->batch_count; b++) {
    for (size_t k = 0; ok && k < plan->batches[b].count; k++) {
      size_t ci = plan->batches[b].first + k;
      const reshard_copy *c = &plan->copies[ci];
      describe_copy(what, sizeof what, plan, ci);
      uint64_t end;
      if (c->nbytes == 0) {
        ok = failf(msg, msg_size, "%s is empty", what);
        break;
      }
      if (c->page_index >= hits) {
        ok = failf(msg, msg_size, "%s: page beyond hit_pages %" PRIu64, what,
                   hits);
        break;
      }
      size_t src = plan->page_source[c->page_index];
      if (src >= request->source_count) {
        ok =
            failf(msg, msg_size, "%s: page_source %zu out of range", what, src);
        break;
      }
      const reshard_layout *layout = request->sources[src].layout;
      if (c->part_index >= layout->shard_count) {
        ok = failf(msg, msg_size, "%s: part beyond the layout's %zu parts",
                   what, layout->shard_count);
        break;
      }
      uint64_t part_size = oracle_part_size(layout, (size_t)c->part_index);
      if (!reshard_add(c->part_offset, c->nbytes, &end) || end > part_size) {
        ok = failf(msg, msg_size, "%s: reads past the Part (size %" PRIu64 ")",
                   what, part_size);
        break;
      }
      if (c->region_index >= st.region_count) {
        ok = failf(msg, msg_size, "%s: region out of range", what);
        break;
      }
      uint64_t region_size = binding->regions[c->region_index].nbytes;
      if (!reshard_add(c->region_offset, c->nbytes, &end) ||
          end > region_size) {
        ok = failf(msg, msg_size,
                   "%s: writes past the region (size %" PRIu64 ")", what,
                   region_size);
        break;
      }
      uint8_t **slot = &st.parts[c->page_index * st.max_shards + c->part_index];
      if (*slot == NULL) {
        *slot = xmalloc((size_t)part_size);
        oracle_fill_part(layout, (size_t)c->part_index, c->page_index, *slot);
      }
      memcpy(st.data[c->region_index] + c->region_offset,
             *slot + c->part_offset, (size_t)c->nbytes);
      uint8_t *w = st.writes[c->region_index] + c->region_offset;
      for (uint64_t i = 0; i < c->nbytes; i++) {
        if (w[i] < 255) {
          w[i]++;
        }
      }
      st.spans[ci].region = c->region_index;
      st.spans[ci].offset = c->region_offset;
      st.spans[ci].nbytes = c->nbytes;
      st.spans[ci].copy = ci;
      total += c->nbytes;
    }
  }

  /* The copies' destination intervals must be pairwise disjoint. */
  if (ok && plan->copy_count > 1) {
    qsort(st.spans, plan->copy_count, sizeof *st.spans, cmp_dest);
    for (size_t i = 1; i < plan->copy_count; i++) {
      const dest_span *a = &st.spans[i - 1], *b = &st.spans[i];
      if (a->region == b->region && a->offset + a->nbytes > b->offset) {
        char other[256];
        describe_copy(what, sizeof what, plan, a->copy);
        describe_copy(other, sizeof other, plan, b->copy);
        ok = failf(msg, msg_size, "destinations overlap: %s and %s", what,
                   other);
        break;
      }
    }
  }

  /* Every byte the binding covers. */
  uint64_t covered_bytes = 0;
  for (size_t ri = 0; ok && ri < binding->range_count; ri++) {
    const reshard_binding_range *r = &binding->ranges[ri];
    size_t region = region_index_of(binding, r->region_id);
    uint64_t dim = component_dim(d, r->component);
    uint64_t nbytes = binding->regions[region].nbytes;
    for (uint64_t t = r->token_start; ok && t < r->token_start + r->token_count;
         t++) {
      uint64_t page = t / P, token = t % P;
      bool hit = page < hits;
      for (uint64_t h = r->head_start; ok && h < r->head_start + r->head_count;
           h++) {
        uint64_t value = r->offset_bytes +
                         (t - r->token_start) * r->token_stride_bytes +
                         (h - r->head_start) * r->head_stride_bytes;
        for (uint64_t e = 0; ok && e < dim; e++) {
          uint64_t hash =
              hit ? oracle_element_hash(page, token, r->global_layer_id, h,
                                        r->component, e)
                  : 0;
          for (uint64_t k = 0; k < itemsize; k++) {
            uint64_t off = value + e * itemsize + k;
            if (off >= nbytes) {
              ok = failf(msg, msg_size,
                         "oracle bug: binding range %zu leaves its region", ri);
              break;
            }
            if (st.covered[region][off]) {
              ok = failf(msg, msg_size,
                         "oracle bug: binding ranges overlap at region %zu "
                         "offset %" PRIu64,
                         region, off);
              break;
            }
            st.covered[region][off] = 1;
            uint8_t writes = st.writes[region][off];
            uint8_t got = st.data[region][off];
            uint8_t want = hit ? hash_byte(hash, k) : (uint8_t)ORACLE_SENTINEL;
            if ((hit && (writes != 1 || got != want)) || (!hit && writes)) {
              describe_copy(what, sizeof what, plan,
                            find_writer(plan, region, off));
              ok = failf(msg, msg_size,
                         "%s byte: page %" PRIu64 " token %" PRIu64
                         " layer %" PRIu64 " head %" PRIu64 " %s element "
                         "%" PRIu64 " byte %" PRIu64 " at region %zu (%s) "
                         "offset %" PRIu64 " (range %zu): expected 0x%02x "
                         "written once, got 0x%02x written %u times; last "
                         "writer %s",
                         hit ? "hit" : "miss-page", page, token,
                         r->global_layer_id, h, component_name(r->component), e,
                         k, region, binding->regions[region].region_id, off, ri,
                         want, got, writes, what);
              break;
            }
            covered_bytes += hit;
          }
        }
      }
    }
  }
  /* No byte outside the binding was written. */
  for (size_t r = 0; ok && r < st.region_count; r++) {
    for (uint64_t off = 0; off < binding->regions[r].nbytes; off++) {
      if (!st.covered[r][off] && st.writes[r][off]) {
        describe_copy(what, sizeof what, plan, find_writer(plan, r, off));
        ok = failf(msg, msg_size,
                   "byte outside the binding written: region %zu offset "
                   "%" PRIu64 " by %s",
                   r, off, what);
        break;
      }
    }
  }
  if (ok && total != covered_bytes) {
    ok = failf(msg, msg_size,
               "copied %" PRIu64 " bytes but the hit pages cover %" PRIu64,
               total, covered_bytes);
  }
  if (stats != NULL) {
    stats->copies = plan->copy_count;
    stats->bytes = total;
    stats->covered_bytes = covered_bytes;
  }
  exec_state_free(&st, hits);
  return ok;
}
