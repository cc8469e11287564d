/* Executing a PlanLoadResponse over UCX (reshard_ucx.h): each (page,
 * part) of the plan is resolved to the peer that serves the Part and the
 * peer's region holding it, the plan is checked whole, then each batch is
 * posted as gets to the peers it reads and every one of them flushed. Runs
 * are read from their columns; nothing is expanded. The checks both plans
 * share, posting, completions, timeouts and draining are
 * reshard_ucx_batch.c's. */
#define _GNU_SOURCE /* qsort_r */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "reshard_ucx_internal.h"

/* One Part as the plan reads it: the table entry and the peer's region it
 * lies in (NULL when the peer did not publish that region). */
typedef struct served {
  const reshard_ucx_part *part;
  const reshard__ucx_remote *remote;
} served;

typedef struct load_resolved {
  const Reshard__V1__PlanLoadResponse *plan;
  const Reshard__V1__RangeBatch *batch; /* the batch being executed */
  served **page_parts;                  /* [n_pages]: indexed by part index */
  size_t *page_part_count;              /* [n_pages] */
  const reshard__ucx_local_region **local; /* [n_region_ids] */
  reshard_ucx_peer **used;                 /* scratch: a batch's peers */
} load_resolved;

static void load_resolved_free(load_resolved *r, size_t n_pages) {
  for (size_t p = 0; r->page_parts != NULL && p < n_pages; p++) {
    free(r->page_parts[p]);
  }
  free(r->page_parts);
  free(r->page_part_count);
  free(r->local);
  free(r->used);
}

static int by_page_part(const void *a, const void *b, void *arg) {
  const reshard_ucx_part *parts = arg;
  const reshard_ucx_part *x = &parts[*(const size_t *)a];
  const reshard_ucx_part *y = &parts[*(const size_t *)b];
  int c = strcmp(x->page_key, y->page_key);
  if (c != 0) {
    return c;
  }
  return x->part_index < y->part_index ? -1 : x->part_index > y->part_index;
}

static int resolve_load(const Reshard__V1__PlanLoadResponse *plan,
                        const reshard_ucx_part *parts, size_t part_count,
                        const reshard_ucx_memory *local, load_resolved *out,
                        reshard_ucx_error *err) {
  memset(out, 0, sizeof *out);
  out->plan = plan;
  size_t *order = calloc(part_count + 1, sizeof *order);
  out->page_parts = calloc(plan->n_pages + 1, sizeof *out->page_parts);
  out->page_part_count =
      calloc(plan->n_pages + 1, sizeof *out->page_part_count);
  out->local = calloc(plan->n_region_ids + 1, sizeof *out->local);
  out->used = calloc(part_count + 1, sizeof *out->used);
  if (order == NULL || out->page_parts == NULL ||
      out->page_part_count == NULL || out->local == NULL || out->used == NULL) {
    goto no_memory;
  }
  for (size_t i = 0; i < part_count; i++) {
    order[i] = i;
  }
  qsort_r(order, part_count, sizeof *order, by_page_part, (void *)parts);
  for (size_t p = 0; p < plan->n_pages; p++) {
    const Reshard__V1__PageSource *page = plan->pages[p];
    /* The first entry of the page key: a lower bound. */
    size_t lo = 0, hi = part_count;
    while (lo < hi) {
      size_t mid = lo + (hi - lo) / 2;
      if (strcmp(parts[order[mid]].page_key, page->page_key) < 0) {
        lo = mid + 1;
      } else {
        hi = mid;
      }
    }
    size_t end = lo, slots = 0;
    while (end < part_count &&
           strcmp(parts[order[end]].page_key, page->page_key) == 0) {
      const reshard_ucx_part *e = &parts[order[end]];
      if ((e->layout_id == NULL ||
           strcmp(e->layout_id, page->layout_id) == 0) &&
          e->part_index + 1 > slots) {
        slots = (size_t)e->part_index + 1;
      }
      end++;
    }
    if (slots == 0) {
      continue;
    }
    served *row = calloc(slots, sizeof *row);
    if (row == NULL) {
      goto no_memory;
    }
    out->page_parts[p] = row;
    out->page_part_count[p] = slots;
    for (size_t k = lo; k < end; k++) {
      const reshard_ucx_part *e = &parts[order[k]];
      if ((e->layout_id != NULL &&
           strcmp(e->layout_id, page->layout_id) != 0) ||
          row[e->part_index].part != NULL) {
        continue;
      }
      row[e->part_index].part = e;
      for (size_t g = 0; e->peer != NULL && g < e->peer->count; g++) {
        if (strcmp(e->peer->regions[g].region_id, e->region_id) == 0) {
          row[e->part_index].remote = &e->peer->regions[g];
          break;
        }
      }
    }
  }
  reshard__ucx_resolve_local(local, plan->region_ids, plan->n_region_ids,
                             out->local);
  free(order);
  return 0;
no_memory:
  free(order);
  load_resolved_free(out, plan->n_pages);
  memset(out, 0, sizeof *out);
  return reshard__ucx_fail(err, UCS_ERR_NO_MEMORY, "reshard_ucx: no memory");
}

static const served *lookup(const load_resolved *res, uint64_t page,
                            uint64_t part) {
  if (part >= res->page_part_count[page] ||
      res->page_parts[page][part].part == NULL) {
    return NULL;
  }
  return &res->page_parts[page][part];
}

static int check_load_batch(const Reshard__V1__PlanLoadResponse *plan, size_t b,
                            const load_resolved *res, reshard_ucx_error *err) {
  const Reshard__V1__RangeBatch *batch = plan->batches[b];
  size_t n = batch->n_nbytes;
  size_t copy[] = {n,
                   batch->n_page_index,
                   batch->n_part_index,
                   batch->n_part_offset,
                   batch->n_region_index,
                   batch->n_region_offset};
  size_t run[] = {batch->n_run_count, batch->n_part_stride,
                  batch->n_region_stride};
  if (reshard__ucx_check_columns(b, copy, sizeof copy / sizeof *copy, run,
                                 err) != 0) {
    return -1;
  }
  bool runs = batch->n_run_count != 0;
  for (size_t i = 0; i < n; i++) {
    uint64_t count = runs ? batch->run_count[i] : 1;
    char what[64];
    reshard__ucx_entry_name(what, sizeof what, i, count, runs);
    if (count == 0) {
      return reshard__ucx_fail(err, 0, "batches[%zu] %s: run_count is 0", b,
                               what);
    }
    uint64_t page = batch->page_index[i], r = batch->region_index[i];
    if (page >= plan->n_pages || r >= plan->n_region_ids) {
      return reshard__ucx_fail(err, 0,
                               "batches[%zu] %s: page %llu or target region "
                               "%llu is out of range",
                               b, what, (unsigned long long)page,
                               (unsigned long long)r);
    }
    const Reshard__V1__PageSource *src = plan->pages[page];
    const served *s = lookup(res, page, batch->part_index[i]);
    if (s == NULL || s->part->peer == NULL) {
      return reshard__ucx_fail(err, 0,
                               "batches[%zu] %s: part %llu of page %s (layout "
                               "%s) is served by no peer",
                               b, what,
                               (unsigned long long)batch->part_index[i],
                               src->page_key, src->layout_id);
    }
    const reshard_ucx_part *part = s->part;
    if (s->remote == NULL) {
      return reshard__ucx_fail(err, 0,
                               "batches[%zu] %s: part %llu of page %s: peer %s "
                               "published no region %s",
                               b, what, (unsigned long long)part->part_index,
                               src->page_key, part->peer->participant_id,
                               part->region_id);
    }
    uint64_t end = 0, part_end = 0;
    if (!reshard__ucx_run_end(batch->part_offset[i], count,
                              runs ? batch->part_stride[i] : 0,
                              batch->nbytes[i], &end) ||
        end > part->nbytes) {
      return reshard__ucx_fail(err, 0,
                               "batches[%zu] %s: part %llu of page %s: offsets "
                               "up to %llu pass its %llu bytes",
                               b, what, (unsigned long long)part->part_index,
                               src->page_key, (unsigned long long)end,
                               (unsigned long long)part->nbytes);
    }
    if (__builtin_add_overflow(part->offset, part->nbytes, &part_end) ||
        part_end > s->remote->nbytes) {
      return reshard__ucx_fail(
          err, 0,
          "batches[%zu] %s: part %llu of page %s: bytes [%llu, +%llu) of "
          "region %s of peer %s are not covered by its remote key (%llu "
          "bytes)",
          b, what, (unsigned long long)part->part_index, src->page_key,
          (unsigned long long)part->offset, (unsigned long long)part->nbytes,
          part->region_id, part->peer->participant_id,
          (unsigned long long)s->remote->nbytes);
    }
    if (reshard__ucx_check_target(b, what, plan->region_ids[r], res->local[r],
                                  batch->region_offset[i], count,
                                  runs ? batch->region_stride[i] : 0,
                                  batch->nbytes[i], err) != 0) {
      return -1;
    }
  }
  return 0;
}

/* Entry `i` of the batch being executed: the peer serving its Part. */
static void load_entry(const void *arg, size_t i, reshard__ucx_entry *e) {
  const load_resolved *res = arg;
  const Reshard__V1__RangeBatch *batch = res->batch;
  const served *s = lookup(res, batch->page_index[i], batch->part_index[i]);
  bool runs = batch->n_run_count != 0;
  *e = (reshard__ucx_entry){
      .peer = s->part->peer,
      .remote = s->remote,
      .src = s->remote->address + s->part->offset + batch->part_offset[i],
      .src_stride = runs ? batch->part_stride[i] : 0,
      .dst = (uint8_t *)res->local[batch->region_index[i]]->region.address +
             batch->region_offset[i],
      .dst_stride = runs ? batch->region_stride[i] : 0,
      .count = runs ? batch->run_count[i] : 1,
      .nbytes = batch->nbytes[i],
  };
}

static int run_load_batch(reshard_ucx *ux,
                          const Reshard__V1__PlanLoadResponse *plan, size_t b,
                          load_resolved *res, const reshard_ucx_options *opt,
                          reshard_ucx_result *result, reshard_ucx_error *err) {
  const Reshard__V1__RangeBatch *batch = plan->batches[b];
  res->batch = batch;
  reshard__ucx_batch failed;
  if (reshard__ucx_run_batch(ux, b, batch->n_nbytes, load_entry, res, res->used,
                             0, opt, result, &failed, err) != 0) {
    return -1;
  }
  if (failed.status == UCS_OK) {
    return 0;
  }
  char copy[128], where[256];
  uint64_t e = failed.failed_entry;
  if (reshard__ucx_copy_name(copy, sizeof copy, b, batch->n_nbytes,
                             batch->n_run_count != 0 ? batch->run_count : NULL,
                             e, failed.failed_copy)) {
    const served *s = lookup(res, batch->page_index[e], batch->part_index[e]);
    snprintf(where, sizeof where, "%s (part %llu of page %s, peer %s)", copy,
             (unsigned long long)batch->part_index[e],
             plan->pages[batch->page_index[e]]->page_key,
             s->part->peer->participant_id);
  } else {
    snprintf(where, sizeof where, "%s", copy);
  }
  uint64_t total = 0;
  for (size_t k = 0; k < plan->n_batches; k++) {
    total += plan->batches[k]->bytes;
  }
  return reshard__ucx_fail_batch(err, where, &failed, result->bytes, total);
}

int reshard_ucx_execute_load(reshard_ucx *ux,
                             const Reshard__V1__PlanLoadResponse *plan,
                             const reshard_ucx_part *parts, size_t part_count,
                             const reshard_ucx_memory *local,
                             const reshard_ucx_options *options,
                             reshard_ucx_result *result,
                             reshard_ucx_error *err) {
  reshard_ucx_result scratch;
  if (result == NULL) {
    result = &scratch;
  }
  memset(result, 0, sizeof *result);
  reshard_ucx_options none = {0};
  if (options == NULL) {
    options = &none;
  }
  if (plan->hit_pages != plan->n_pages) {
    return reshard__ucx_fail(err, 0, "plan: hit_pages %u but %zu pages",
                             plan->hit_pages, plan->n_pages);
  }
  load_resolved res;
  if (resolve_load(plan, parts, part_count, local, &res, err) != 0) {
    return -1;
  }
  int rc = 0;
  for (size_t b = 0; b < plan->n_batches && rc == 0; b++) {
    rc = check_load_batch(plan, b, &res, err);
  }
  for (size_t b = 0; b < plan->n_batches && rc == 0; b++) {
    rc = run_load_batch(ux, plan, b, &res, options, result, err);
  }
  load_resolved_free(&res, plan->n_pages);
  return rc;
}
