/* The naive reference plan of SPEC §2.2 (one copy per (token, head),
 * sorted and merged maximally), used to prove coalescing minimal, and
 * the check of the plan's source selection (oracle.h). */
#include "oracle_internal.h"

#include <inttypes.h>

/* ------------------------------------------------------------------ */
/* Reference copies                                                    */
/* ------------------------------------------------------------------ */

void oracle_copy_list_push(oracle_copy_list *list, const reshard_copy *copy) {
  if (list->count == list->capacity) {
    list->capacity = list->capacity ? list->capacity * 2 : 256;
    list->items = realloc(list->items, list->capacity * sizeof *list->items);
    if (list->items == NULL) {
      die("out of memory");
    }
  }
  list->items[list->count++] = *copy;
}

void oracle_copy_list_free(oracle_copy_list *list) {
  free(list->items);
  memset(list, 0, sizeof *list);
}

static int cmp_copy(const void *a, const void *b) {
  const reshard_copy *x = a, *y = b;
#define ORACLE_CMP_FIELD(f)                                                    \
  if (x->f != y->f)                                                            \
    return x->f < y->f ? -1 : 1;
  ORACLE_CMP_FIELD(page_index)
  ORACLE_CMP_FIELD(part_index)
  ORACLE_CMP_FIELD(part_offset)
  ORACLE_CMP_FIELD(region_index)
  ORACLE_CMP_FIELD(region_offset)
  ORACLE_CMP_FIELD(nbytes)
#undef ORACLE_CMP_FIELD
  return 0;
}

void oracle_copy_list_sort(oracle_copy_list *list) {
  if (list->count > 1) {
    qsort(list->items, list->count, sizeof *list->items, cmp_copy);
  }
}

void oracle_copy_list_merge(oracle_copy_list *list) {
  if (list->count == 0) {
    return;
  }
  size_t w = 0;
  for (size_t i = 1; i < list->count; i++) {
    reshard_copy *prev = &list->items[w];
    const reshard_copy *cur = &list->items[i];
    if (cur->page_index == prev->page_index &&
        cur->part_index == prev->part_index &&
        cur->part_offset == prev->part_offset + prev->nbytes &&
        cur->region_index == prev->region_index &&
        cur->region_offset == prev->region_offset + prev->nbytes) {
      prev->nbytes += cur->nbytes;
    } else {
      list->items[++w] = *cur;
    }
  }
  list->count = w + 1;
}

void oracle_reference_page(const reshard_layout *layout,
                           const reshard_placement_part *part,
                           const reshard_binding *binding, uint64_t page,
                           oracle_copy_list *fine, uint64_t *before) {
  const reshard_descriptor *d = &layout->descriptor;
  uint64_t P = d->page_size;
  uint64_t count = 0;
  uint64_t p0 = part->head_start, p1 = part->head_start + part->head_count;
  for (size_t ri = 0; ri < binding->range_count; ri++) {
    const reshard_binding_range *r = &binding->ranges[ri];
    uint64_t hb = head_bytes(d, r->component);
    uint64_t t0 = max_u64(page * P, r->token_start);
    uint64_t t1 = min_u64((page + 1) * P, r->token_start + r->token_count);
    if (t0 >= t1 || hb == 0) {
      continue;
    }
    size_t region = region_index_of(binding, r->region_id);
    for (size_t si = 0; si < layout->shard_count; si++) {
      const reshard_shard *s = &layout->shards[si];
      ptrdiff_t l =
          find_sorted(s->layer_ids, s->layer_count, r->global_layer_id);
      if (l < 0) {
        continue;
      }
      /* joined fragment: shard heads clipped to the participant, then to
       * the range */
      uint64_t h0 = max_u64(max_u64(s->head_start, p0), r->head_start);
      uint64_t h1 = min_u64(min_u64(s->head_start + s->head_count, p1),
                            r->head_start + r->head_count);
      if (h0 >= h1) {
        continue;
      }
      uint64_t fts, fhs;
      uint64_t base = oracle_fragment_offset(layout, si, (size_t)l,
                                             r->component, &fts, &fhs);
      uint64_t nt = t1 - t0, nh = h1 - h0, row = nh * hb;
      uint64_t rts = r->token_stride_bytes, rhs = r->head_stride_bytes;
      if (fhs == hb && rhs == hb) {
        count += fts == row && rts == row ? 1 : nt;
      } else {
        count += nt * nh;
      }
      if (fine == NULL) {
        continue;
      }
      for (uint64_t t = t0; t < t1; t++) {
        for (uint64_t h = h0; h < h1; h++) {
          reshard_copy c;
          c.page_index = page;
          c.part_index = si;
          c.part_offset =
              base + (t - page * P) * fts + (h - s->head_start) * fhs;
          c.region_index = region;
          c.region_offset = r->offset_bytes + (t - r->token_start) * rts +
                            (h - r->head_start) * rhs;
          c.nbytes = hb;
          oracle_copy_list_push(fine, &c);
        }
      }
    }
  }
  if (before != NULL) {
    *before = count;
  }
}

const reshard_placement_part *
oracle_request_participant(const reshard_load_request *request) {
  const reshard_placement *pl = request->placement;
  for (size_t i = 0; i < pl->part_count; i++) {
    if (strcmp(pl->parts[i].participant_id, request->binding->participant_id) ==
        0) {
      return &pl->parts[i];
    }
  }
  return NULL;
}

void oracle_reference_plan(const reshard_load_request *request,
                           const reshard_load_plan *plan, oracle_copy_list *out,
                           uint64_t *before) {
  const reshard_placement_part *part = oracle_request_participant(request);
  uint64_t total = 0;
  memset(out, 0, sizeof *out);
  for (uint64_t p = 0; p < plan->hit_pages; p++) {
    const reshard_layout *layout =
        request->sources[plan->page_source[p]].layout;
    uint64_t b = 0;
    oracle_reference_page(layout, part, request->binding, p, out, &b);
    total += b;
  }
  oracle_copy_list_sort(out);
  oracle_copy_list_merge(out);
  if (before != NULL) {
    *before = total;
  }
}

/* Coalesced copies of one page from one layout: the "physical operations"
 * used to choose among several layouts. */
static uint64_t reference_page_ops(const reshard_layout *layout,
                                   const reshard_placement_part *part,
                                   const reshard_binding *binding,
                                   uint64_t page) {
  oracle_copy_list list;
  memset(&list, 0, sizeof list);
  oracle_reference_page(layout, part, binding, page, &list, NULL);
  oracle_copy_list_sort(&list);
  oracle_copy_list_merge(&list);
  uint64_t n = list.count;
  oracle_copy_list_free(&list);
  return n;
}

/* ------------------------------------------------------------------ */
/* Source selection                                                    */
/* ------------------------------------------------------------------ */

static bool source_matches(const reshard_load_request *request, size_t src) {
  return oracle_descriptor_same(&request->sources[src].layout->descriptor,
                                &request->placement->descriptor);
}

uint64_t oracle_expected_hits(const reshard_load_request *request) {
  for (uint64_t p = 0; p < request->page_count; p++) {
    bool hit = false;
    for (size_t i = request->page_source_start[p];
         i < request->page_source_start[p + 1]; i++) {
      hit = hit || source_matches(request, request->page_sources[i]);
    }
    if (!hit) {
      return p;
    }
  }
  return request->page_count;
}

bool oracle_check_selection(const reshard_load_request *request,
                            const reshard_load_plan *plan, char *msg,
                            size_t msg_size) {
  uint64_t hits = oracle_expected_hits(request);
  if (plan->hit_pages != hits) {
    return failf(msg, msg_size, "hit_pages %" PRIu64 ", expected %" PRIu64,
                 plan->hit_pages, hits);
  }
  const reshard_placement_part *part = oracle_request_participant(request);
  if (part == NULL) {
    return failf(msg, msg_size, "oracle: participant not in placement");
  }
  if (plan->participant != NULL &&
      strcmp(plan->participant->participant_id, part->participant_id) != 0) {
    return failf(msg, msg_size, "plan participant %s, expected %s",
                 plan->participant->participant_id, part->participant_id);
  }
  for (uint64_t p = 0; p < hits; p++) {
    size_t first = request->page_source_start[p];
    size_t last = request->page_source_start[p + 1];
    size_t chosen = plan->page_source[p];
    bool candidate = false;
    for (size_t i = first; i < last; i++) {
      candidate = candidate || request->page_sources[i] == chosen;
    }
    if (chosen >= request->source_count || !candidate) {
      return failf(msg, msg_size,
                   "page %" PRIu64 ": page_source %zu is not a candidate", p,
                   chosen);
    }
    if (!source_matches(request, chosen)) {
      return failf(msg, msg_size,
                   "page %" PRIu64 ": chose source %zu whose descriptor "
                   "differs from the target's",
                   p, chosen);
    }
    const char *want = NULL;
    const char *why = NULL;
    for (size_t k = 0; k < request->preferred_count && want == NULL; k++) {
      for (size_t i = first; i < last; i++) {
        size_t s = request->page_sources[i];
        if (source_matches(request, s) &&
            strcmp(request->sources[s].layout_id,
                   request->preferred_layout_ids[k]) == 0) {
          want = request->sources[s].layout_id;
          why = "first preferred layout";
          break;
        }
      }
    }
    uint64_t best_ops = UINT64_MAX, chosen_ops = UINT64_MAX;
    if (want == NULL) {
      why = "fewest operations, then smallest layout id";
      for (size_t i = first; i < last; i++) {
        size_t s = request->page_sources[i];
        if (!source_matches(request, s)) {
          continue;
        }
        uint64_t ops = reference_page_ops(request->sources[s].layout, part,
                                          request->binding, p);
        if (s == chosen) {
          chosen_ops = ops;
        }
        if (ops < best_ops ||
            (ops == best_ops &&
             strcmp(request->sources[s].layout_id, want) < 0)) {
          best_ops = ops;
          want = request->sources[s].layout_id;
        }
      }
    }
    if (strcmp(request->sources[chosen].layout_id, want) != 0) {
      return failf(msg, msg_size,
                   "page %" PRIu64 ": chose %s (reference ops %" PRIu64
                   "), expected %s by rule \"%s\" (reference ops %" PRIu64 ")",
                   p, request->sources[chosen].layout_id, chosen_ops, want, why,
                   best_ops);
    }
  }
  return true;
}
