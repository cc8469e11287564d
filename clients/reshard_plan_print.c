/* reshard_plan_print: table and JSON forms of a plan (docs/clients.md). */
#include "reshard_plan_print.h"

#include <inttypes.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include <jansson.h>

static int check_fail(char *err, size_t errcap, const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(err, errcap, fmt, ap);
  va_end(ap);
  return -1;
}

bool reshard_plan_has_runs(const Reshard__V1__PlanLoadResponse *plan) {
  for (size_t b = 0; b < plan->n_batches; b++)
    if (plan->batches[b]->n_run_count > 0)
      return true;
  return false;
}

int reshard_plan_check(const Reshard__V1__PlanLoadResponse *plan, char *err,
                       size_t errcap) {
  if (plan->hit_pages != plan->n_pages)
    return check_fail(err, errcap,
                      "hit_pages %" PRIu32 " differs from %zu pages",
                      plan->hit_pages, plan->n_pages);
  bool runs = reshard_plan_has_runs(plan);
  uint64_t entries = 0;
  for (size_t b = 0; b < plan->n_batches; b++) {
    const Reshard__V1__RangeBatch *rb = plan->batches[b];
    size_t n = rb->n_page_index;
    if (rb->n_part_index != n || rb->n_part_offset != n ||
        rb->n_region_index != n || rb->n_region_offset != n ||
        rb->n_nbytes != n)
      return check_fail(err, errcap,
                        "batches[%zu]: columns have different lengths", b);
    size_t want_runs = runs ? n : 0;
    if (rb->n_run_count != want_runs || rb->n_part_stride != want_runs ||
        rb->n_region_stride != want_runs)
      return check_fail(err, errcap, "batches[%zu]: run columns must be %s", b,
                        runs ? "as long as the others in every batch"
                             : "empty");
    entries += n;
    uint64_t sum = 0;
    for (size_t i = 0; i < n; i++) {
      uint64_t count = runs ? rb->run_count[i] : 1, moved;
      if (count == 0)
        return check_fail(err, errcap,
                          "batches[%zu].run_count[%zu]: must be at least 1", b,
                          i);
      if (__builtin_mul_overflow(count, rb->nbytes[i], &moved) ||
          __builtin_add_overflow(sum, moved, &sum))
        return check_fail(err, errcap, "batches[%zu]: bytes overflow", b);
      if (rb->page_index[i] >= plan->n_pages)
        return check_fail(err, errcap,
                          "batches[%zu].page_index[%zu]: %" PRIu64
                          " is not below %zu pages",
                          b, i, rb->page_index[i], plan->n_pages);
      if (rb->region_index[i] >= plan->n_region_ids)
        return check_fail(err, errcap,
                          "batches[%zu].region_index[%zu]: %" PRIu64
                          " is not below %zu region ids",
                          b, i, rb->region_index[i], plan->n_region_ids);
    }
    if (sum != rb->bytes)
      return check_fail(err, errcap,
                        "batches[%zu]: bytes %" PRIu64
                        " differs from the sum of nbytes %" PRIu64,
                        b, rb->bytes, sum);
  }
  uint64_t stated = plan->stats ? plan->stats->runs : 0;
  if (stated != (runs ? entries : 0))
    return check_fail(err, errcap,
                      "stats.runs %" PRIu64 " differs from %" PRIu64
                      " run entries",
                      stated, runs ? entries : 0);
  return 0;
}

/* ---- JSON ---- */

/* Writes a JSON string with jansson's escaping. */
static int put_string(FILE *out, const char *s) {
  json_t *j = json_string(s != NULL ? s : "");
  if (j == NULL)
    return -1;
  int rc = json_dumpf(j, out, JSON_ENCODE_ANY);
  json_decref(j);
  return rc;
}

static int put_key_string(FILE *out, const char *key, const char *value,
                          bool comma) {
  if (fprintf(out, "%s\"%s\":", comma ? "," : "", key) < 0)
    return -1;
  return put_string(out, value);
}

static int put_key_u64(FILE *out, const char *key, uint64_t v, bool comma) {
  return fprintf(out, "%s\"%s\":%" PRIu64, comma ? "," : "", key, v) < 0 ? -1
                                                                         : 0;
}

/* The document's keys are written in sorted order by construction:
 * top level: batches, hit_pages, pages, placement_id, region_ids, stats;
 * batch: bytes, copies (or runs); copy: nbytes, page_index, page_key, part,
 * part_offset, region_id, region_index, region_offset; a run adds count,
 * part_stride and region_stride; page: layout_id, manifest_key, page_key;
 * stats: bytes, copies_before_coalescing, operations (and runs). */
int reshard_plan_print_json(FILE *out,
                            const Reshard__V1__PlanLoadResponse *plan) {
  bool runs = reshard_plan_has_runs(plan);
  if (fputs("{\"batches\":[", out) < 0)
    return -1;
  for (size_t b = 0; b < plan->n_batches; b++) {
    const Reshard__V1__RangeBatch *rb = plan->batches[b];
    if (fprintf(out, "%s{\"bytes\":%" PRIu64 ",\"%s\":[", b ? "," : "",
                rb->bytes, runs ? "runs" : "copies") < 0)
      return -1;
    for (size_t i = 0; i < rb->n_nbytes; i++) {
      const Reshard__V1__PageSource *page = plan->pages[rb->page_index[i]];
      if (fputs(i ? ",{" : "{", out) < 0 ||
          (runs && put_key_u64(out, "count", rb->run_count[i], false) < 0) ||
          put_key_u64(out, "nbytes", rb->nbytes[i], runs) < 0 ||
          put_key_u64(out, "page_index", rb->page_index[i], true) < 0 ||
          put_key_string(out, "page_key", page->page_key, true) < 0 ||
          put_key_u64(out, "part", rb->part_index[i], true) < 0 ||
          put_key_u64(out, "part_offset", rb->part_offset[i], true) < 0 ||
          (runs &&
           put_key_u64(out, "part_stride", rb->part_stride[i], true) < 0) ||
          put_key_string(out, "region_id",
                         plan->region_ids[rb->region_index[i]], true) < 0 ||
          put_key_u64(out, "region_index", rb->region_index[i], true) < 0 ||
          put_key_u64(out, "region_offset", rb->region_offset[i], true) < 0 ||
          (runs &&
           put_key_u64(out, "region_stride", rb->region_stride[i], true) < 0) ||
          fputc('}', out) == EOF)
        return -1;
    }
    if (fputs("]}", out) < 0)
      return -1;
  }
  if (fprintf(out, "],\"hit_pages\":%" PRIu32 ",\"pages\":[", plan->hit_pages) <
      0)
    return -1;
  for (size_t p = 0; p < plan->n_pages; p++) {
    const Reshard__V1__PageSource *page = plan->pages[p];
    if (fputs(p ? ",{" : "{", out) < 0 ||
        put_key_string(out, "layout_id", page->layout_id, false) < 0 ||
        put_key_string(out, "manifest_key", page->manifest_key, true) < 0 ||
        put_key_string(out, "page_key", page->page_key, true) < 0 ||
        fputc('}', out) == EOF)
      return -1;
  }
  if (fputs("]", out) < 0 ||
      put_key_string(out, "placement_id", plan->placement_id, true) < 0 ||
      fputs(",\"region_ids\":[", out) < 0)
    return -1;
  for (size_t r = 0; r < plan->n_region_ids; r++) {
    if ((r && fputc(',', out) == EOF) || put_string(out, plan->region_ids[r]))
      return -1;
  }
  const Reshard__V1__PlanStats *st = plan->stats;
  if (fputs("],\"stats\":{", out) < 0 ||
      put_key_u64(out, "bytes", st ? st->bytes : 0, false) < 0 ||
      put_key_u64(out, "copies_before_coalescing",
                  st ? st->copies_before_coalescing : 0, true) < 0 ||
      put_key_u64(out, "operations", st ? st->operations : 0, true) < 0 ||
      (runs && put_key_u64(out, "runs", st ? st->runs : 0, true) < 0) ||
      fputs("}}\n", out) < 0)
    return -1;
  return 0;
}

/* ---- table ---- */

/* Columns of the explicit table, then the runs table's: the same with
 * PART_STRIDE, REGION_STRIDE and COUNT. */
enum { COLS = 7, RUN_COLS = 10 };
static const char *const headers[COLS] = {
    "BATCH",     "PAGE_KEY",      "PART",  "PART_OFFSET",
    "REGION_ID", "REGION_OFFSET", "NBYTES"};
static const char *const run_headers[RUN_COLS] = {
    "BATCH",     "PAGE_KEY",      "PART",          "PART_OFFSET", "PART_STRIDE",
    "REGION_ID", "REGION_OFFSET", "REGION_STRIDE", "NBYTES",      "COUNT"};
/* String columns are left-aligned, numeric ones right-aligned. */
static const bool left_aligned[COLS] = {false, true,  false, false,
                                        true,  false, false};
static const bool run_left_aligned[RUN_COLS] = {
    false, true, false, false, false, true, false, false, false, false};

static int put_cell(FILE *out, const char *text, size_t width, bool left,
                    bool first) {
  size_t len = strlen(text);
  size_t pad = width > len ? width - len : 0;
  if (!first && fputs("  ", out) < 0)
    return -1;
  if (!left && fprintf(out, "%*s", (int)pad, "") < 0)
    return -1;
  if (fputs(text, out) < 0)
    return -1;
  if (left && fprintf(out, "%*s", (int)pad, "") < 0)
    return -1;
  return 0;
}

/* The cells of entry i of batch b: numbers formatted into `cells`, strings
 * pointed to. */
static void row_cells(const Reshard__V1__PlanLoadResponse *plan, size_t b,
                      size_t i, bool runs, char cells[RUN_COLS][24],
                      const char *text[RUN_COLS]) {
  const Reshard__V1__RangeBatch *rb = plan->batches[b];
  const char *page_key = plan->pages[rb->page_index[i]]->page_key;
  const char *region_id = plan->region_ids[rb->region_index[i]];
  snprintf(cells[0], sizeof cells[0], "%zu", b);
  snprintf(cells[2], sizeof cells[2], "%" PRIu64, rb->part_index[i]);
  snprintf(cells[3], sizeof cells[3], "%" PRIu64, rb->part_offset[i]);
  if (!runs) {
    snprintf(cells[5], sizeof cells[5], "%" PRIu64, rb->region_offset[i]);
    snprintf(cells[6], sizeof cells[6], "%" PRIu64, rb->nbytes[i]);
    const char *row[COLS] = {cells[0],  page_key, cells[2], cells[3],
                             region_id, cells[5], cells[6]};
    memcpy(text, row, sizeof row);
    return;
  }
  snprintf(cells[4], sizeof cells[4], "%" PRIu64, rb->part_stride[i]);
  snprintf(cells[6], sizeof cells[6], "%" PRIu64, rb->region_offset[i]);
  snprintf(cells[7], sizeof cells[7], "%" PRIu64, rb->region_stride[i]);
  snprintf(cells[8], sizeof cells[8], "%" PRIu64, rb->nbytes[i]);
  snprintf(cells[9], sizeof cells[9], "%" PRIu64, rb->run_count[i]);
  const char *row[RUN_COLS] = {cells[0], page_key,  cells[2], cells[3],
                               cells[4], region_id, cells[6], cells[7],
                               cells[8], cells[9]};
  memcpy(text, row, sizeof row);
}

int reshard_plan_print_table(FILE *out,
                             const Reshard__V1__PlanLoadResponse *plan) {
  bool runs = reshard_plan_has_runs(plan);
  int cols = runs ? RUN_COLS : COLS;
  const char *const *head = runs ? run_headers : headers;
  const bool *left = runs ? run_left_aligned : left_aligned;
  size_t width[RUN_COLS];
  char cells[RUN_COLS][24];
  const char *text[RUN_COLS];
  for (int c = 0; c < cols; c++)
    width[c] = strlen(head[c]);
  for (size_t b = 0; b < plan->n_batches; b++) {
    for (size_t i = 0; i < plan->batches[b]->n_nbytes; i++) {
      row_cells(plan, b, i, runs, cells, text);
      for (int c = 0; c < cols; c++)
        if (strlen(text[c]) > width[c])
          width[c] = strlen(text[c]);
    }
  }

  if (fprintf(out, "# hit_pages=%" PRIu32 " placement_id=%s\n", plan->hit_pages,
              plan->placement_id) < 0)
    return -1;
  for (size_t p = 0; p < plan->n_pages; p++) {
    const Reshard__V1__PageSource *page = plan->pages[p];
    if (fprintf(out, "# page %zu page_key=%s manifest_key=%s layout_id=%s\n", p,
                page->page_key, page->manifest_key, page->layout_id) < 0)
      return -1;
  }
  /* The last column is right-aligned, so no line has trailing blanks. */
  for (int c = 0; c < cols; c++)
    if (put_cell(out, head[c], width[c], left[c], c == 0) < 0)
      return -1;
  if (fputc('\n', out) == EOF)
    return -1;
  for (size_t b = 0; b < plan->n_batches; b++) {
    for (size_t i = 0; i < plan->batches[b]->n_nbytes; i++) {
      row_cells(plan, b, i, runs, cells, text);
      for (int c = 0; c < cols; c++)
        if (put_cell(out, text[c], width[c], left[c], c == 0) < 0)
          return -1;
      if (fputc('\n', out) == EOF)
        return -1;
    }
  }
  const Reshard__V1__PlanStats *st = plan->stats;
  if (fprintf(out,
              "# batches=%zu operations=%" PRIu64 " bytes=%" PRIu64
              " copies_before_coalescing=%" PRIu64,
              plan->n_batches, st ? st->operations : 0, st ? st->bytes : 0,
              st ? st->copies_before_coalescing : 0) < 0 ||
      (runs && fprintf(out, " runs=%" PRIu64, st ? st->runs : 0) < 0) ||
      fputc('\n', out) == EOF)
    return -1;
  return 0;
}

/* ---- transfer plans (SPEC §2.6) ---- */

bool reshard_transfer_plan_has_runs(
    const Reshard__V1__PlanTransferResponse *plan) {
  for (size_t b = 0; b < plan->n_batches; b++)
    if (plan->batches[b]->n_run_count > 0)
      return true;
  return false;
}

int reshard_transfer_plan_check(const Reshard__V1__PlanTransferResponse *plan,
                                char *err, size_t errcap) {
  bool runs = reshard_transfer_plan_has_runs(plan);
  uint64_t entries = 0;
  for (size_t b = 0; b < plan->n_batches; b++) {
    const Reshard__V1__TransferBatch *tb = plan->batches[b];
    size_t n = tb->n_nbytes;
    if (tb->n_source_region_index != n || tb->n_source_offset != n ||
        tb->n_region_index != n || tb->n_region_offset != n)
      return check_fail(err, errcap,
                        "batches[%zu]: columns have different lengths", b);
    size_t want_runs = runs ? n : 0;
    if (tb->n_run_count != want_runs || tb->n_source_stride != want_runs ||
        tb->n_region_stride != want_runs)
      return check_fail(err, errcap, "batches[%zu]: run columns must be %s", b,
                        runs ? "as long as the others in every batch"
                             : "empty");
    if (tb->source_index >= plan->n_sources)
      return check_fail(err, errcap,
                        "batches[%zu].source_index: %" PRIu64
                        " is not below %zu sources",
                        b, tb->source_index, plan->n_sources);
    const Reshard__V1__TransferSource *src = plan->sources[tb->source_index];
    entries += n;
    uint64_t sum = 0;
    for (size_t i = 0; i < n; i++) {
      uint64_t count = runs ? tb->run_count[i] : 1, moved;
      if (count == 0)
        return check_fail(err, errcap,
                          "batches[%zu].run_count[%zu]: must be at least 1", b,
                          i);
      if (__builtin_mul_overflow(count, tb->nbytes[i], &moved) ||
          __builtin_add_overflow(sum, moved, &sum))
        return check_fail(err, errcap, "batches[%zu]: bytes overflow", b);
      if (tb->source_region_index[i] >= src->n_regions)
        return check_fail(err, errcap,
                          "batches[%zu].source_region_index[%zu]: %" PRIu64
                          " is not below the %zu regions of source %s",
                          b, i, tb->source_region_index[i], src->n_regions,
                          src->participant_id);
      if (tb->region_index[i] >= plan->n_region_ids)
        return check_fail(err, errcap,
                          "batches[%zu].region_index[%zu]: %" PRIu64
                          " is not below %zu region ids",
                          b, i, tb->region_index[i], plan->n_region_ids);
    }
    if (sum != tb->bytes)
      return check_fail(err, errcap,
                        "batches[%zu]: bytes %" PRIu64
                        " differs from the sum of nbytes %" PRIu64,
                        b, tb->bytes, sum);
  }
  uint64_t stated = plan->stats ? plan->stats->runs : 0;
  if (stated != (runs ? entries : 0))
    return check_fail(err, errcap,
                      "stats.runs %" PRIu64 " differs from %" PRIu64
                      " run entries",
                      stated, runs ? entries : 0);
  return 0;
}

/* Copies a batch stands for (runs counted in full); the batch has passed
 * the check, so the sum fits. */
static uint64_t transfer_batch_copies(const Reshard__V1__TransferBatch *tb) {
  if (tb->n_run_count == 0)
    return tb->n_nbytes;
  uint64_t total = 0;
  for (size_t i = 0; i < tb->n_run_count; i++)
    total += tb->run_count[i];
  return total;
}

static int put_stats(FILE *out, const Reshard__V1__PlanStats *st, bool runs) {
  if (fputs(",\"stats\":{", out) < 0 ||
      put_key_u64(out, "bytes", st ? st->bytes : 0, false) < 0 ||
      put_key_u64(out, "copies_before_coalescing",
                  st ? st->copies_before_coalescing : 0, true) < 0 ||
      put_key_u64(out, "operations", st ? st->operations : 0, true) < 0 ||
      (runs && put_key_u64(out, "runs", st ? st->runs : 0, true) < 0) ||
      fputc('}', out) == EOF)
    return -1;
  return 0;
}

/* The document's keys in sorted order by construction: top level:
 * batches, region_ids, source_placement_id, sources, stats,
 * target_placement_id; batch: bytes, copies, endpoint, participant_id,
 * source_index (with runs: bytes, endpoint, participant_id, runs,
 * source_index); copy: nbytes, region_id, region_index, region_offset,
 * source_offset, source_region_id, source_region_index (a run adds count,
 * region_stride and source_stride); source: endpoint, memory_id,
 * participant_id, regions; region: address, nbytes, region_id. */
static int put_transfer_entry(FILE *out,
                              const Reshard__V1__PlanTransferResponse *plan,
                              const Reshard__V1__TransferBatch *tb, size_t i,
                              bool runs) {
  const Reshard__V1__TransferSource *src = plan->sources[tb->source_index];
  const char *source_region =
      src->regions[tb->source_region_index[i]]->region_id;
  if (fputs(i ? ",{" : "{", out) < 0 ||
      (runs && put_key_u64(out, "count", tb->run_count[i], false) < 0) ||
      put_key_u64(out, "nbytes", tb->nbytes[i], runs) < 0 ||
      put_key_string(out, "region_id", plan->region_ids[tb->region_index[i]],
                     true) < 0 ||
      put_key_u64(out, "region_index", tb->region_index[i], true) < 0 ||
      put_key_u64(out, "region_offset", tb->region_offset[i], true) < 0 ||
      (runs &&
       put_key_u64(out, "region_stride", tb->region_stride[i], true) < 0) ||
      put_key_u64(out, "source_offset", tb->source_offset[i], true) < 0 ||
      put_key_string(out, "source_region_id", source_region, true) < 0 ||
      put_key_u64(out, "source_region_index", tb->source_region_index[i],
                  true) < 0 ||
      (runs &&
       put_key_u64(out, "source_stride", tb->source_stride[i], true) < 0) ||
      fputc('}', out) == EOF)
    return -1;
  return 0;
}

int reshard_transfer_plan_print_json(
    FILE *out, const Reshard__V1__PlanTransferResponse *plan) {
  bool runs = reshard_transfer_plan_has_runs(plan);
  if (fputs("{\"batches\":[", out) < 0)
    return -1;
  for (size_t b = 0; b < plan->n_batches; b++) {
    const Reshard__V1__TransferBatch *tb = plan->batches[b];
    const Reshard__V1__TransferSource *src = plan->sources[tb->source_index];
    if (fprintf(out, "%s{\"bytes\":%" PRIu64, b ? "," : "", tb->bytes) < 0)
      return -1;
    if (!runs && fputs(",\"copies\":[", out) < 0)
      return -1;
    if (!runs)
      for (size_t i = 0; i < tb->n_nbytes; i++)
        if (put_transfer_entry(out, plan, tb, i, false) < 0)
          return -1;
    if ((!runs && fputc(']', out) == EOF) ||
        put_key_string(out, "endpoint", src->endpoint, true) < 0 ||
        put_key_string(out, "participant_id", src->participant_id, true) < 0)
      return -1;
    if (runs) {
      if (fputs(",\"runs\":[", out) < 0)
        return -1;
      for (size_t i = 0; i < tb->n_nbytes; i++)
        if (put_transfer_entry(out, plan, tb, i, true) < 0)
          return -1;
      if (fputc(']', out) == EOF)
        return -1;
    }
    if (put_key_u64(out, "source_index", tb->source_index, true) < 0 ||
        fputc('}', out) == EOF)
      return -1;
  }
  if (fputs("],\"region_ids\":[", out) < 0)
    return -1;
  for (size_t r = 0; r < plan->n_region_ids; r++)
    if ((r && fputc(',', out) == EOF) || put_string(out, plan->region_ids[r]))
      return -1;
  if (fputc(']', out) == EOF ||
      put_key_string(out, "source_placement_id", plan->source_placement_id,
                     true) < 0 ||
      fputs(",\"sources\":[", out) < 0)
    return -1;
  for (size_t s = 0; s < plan->n_sources; s++) {
    const Reshard__V1__TransferSource *src = plan->sources[s];
    if (fputs(s ? ",{" : "{", out) < 0 ||
        put_key_string(out, "endpoint", src->endpoint, false) < 0 ||
        put_key_string(out, "memory_id", src->memory_id, true) < 0 ||
        put_key_string(out, "participant_id", src->participant_id, true) < 0 ||
        fputs(",\"regions\":[", out) < 0)
      return -1;
    for (size_t r = 0; r < src->n_regions; r++) {
      const Reshard__V1__Region *reg = src->regions[r];
      if (fputs(r ? ",{" : "{", out) < 0 ||
          put_key_u64(out, "address", reg->address, false) < 0 ||
          put_key_u64(out, "nbytes", reg->nbytes, true) < 0 ||
          put_key_string(out, "region_id", reg->region_id, true) < 0 ||
          fputc('}', out) == EOF)
        return -1;
    }
    if (fputs("]}", out) < 0)
      return -1;
  }
  if (fputc(']', out) == EOF || put_stats(out, plan->stats, runs) < 0 ||
      put_key_string(out, "target_placement_id", plan->target_placement_id,
                     true) < 0 ||
      fputs("}\n", out) < 0)
    return -1;
  return 0;
}

/* Columns of the explicit transfer table, then the runs table's. */
enum { TCOLS = 7, TRUN_COLS = 10 };
static const char *const transfer_headers[TCOLS] = {
    "BATCH",     "SOURCE",        "SOURCE_REGION", "SOURCE_OFFSET",
    "REGION_ID", "REGION_OFFSET", "NBYTES"};
static const char *const transfer_run_headers[TRUN_COLS] = {
    "BATCH",         "SOURCE",    "SOURCE_REGION", "SOURCE_OFFSET",
    "SOURCE_STRIDE", "REGION_ID", "REGION_OFFSET", "REGION_STRIDE",
    "NBYTES",        "COUNT"};
static const bool transfer_left[TCOLS] = {false, true,  true, false,
                                          true,  false, false};
static const bool transfer_run_left[TRUN_COLS] = {
    false, true, true, false, false, true, false, false, false, false};

static void transfer_row_cells(const Reshard__V1__PlanTransferResponse *plan,
                               size_t b, size_t i, bool runs,
                               char cells[TRUN_COLS][24],
                               const char *text[TRUN_COLS]) {
  const Reshard__V1__TransferBatch *tb = plan->batches[b];
  const Reshard__V1__TransferSource *src = plan->sources[tb->source_index];
  const char *source_region =
      src->regions[tb->source_region_index[i]]->region_id;
  const char *region_id = plan->region_ids[tb->region_index[i]];
  snprintf(cells[0], sizeof cells[0], "%zu", b);
  snprintf(cells[3], sizeof cells[3], "%" PRIu64, tb->source_offset[i]);
  if (!runs) {
    snprintf(cells[5], sizeof cells[5], "%" PRIu64, tb->region_offset[i]);
    snprintf(cells[6], sizeof cells[6], "%" PRIu64, tb->nbytes[i]);
    const char *row[TCOLS] = {cells[0], src->participant_id, source_region,
                              cells[3], region_id,           cells[5],
                              cells[6]};
    memcpy(text, row, sizeof row);
    return;
  }
  snprintf(cells[4], sizeof cells[4], "%" PRIu64, tb->source_stride[i]);
  snprintf(cells[6], sizeof cells[6], "%" PRIu64, tb->region_offset[i]);
  snprintf(cells[7], sizeof cells[7], "%" PRIu64, tb->region_stride[i]);
  snprintf(cells[8], sizeof cells[8], "%" PRIu64, tb->nbytes[i]);
  snprintf(cells[9], sizeof cells[9], "%" PRIu64, tb->run_count[i]);
  const char *row[TRUN_COLS] = {cells[0],      src->participant_id,
                                source_region, cells[3],
                                cells[4],      region_id,
                                cells[6],      cells[7],
                                cells[8],      cells[9]};
  memcpy(text, row, sizeof row);
}

int reshard_transfer_plan_print_table(
    FILE *out, const Reshard__V1__PlanTransferResponse *plan) {
  bool runs = reshard_transfer_plan_has_runs(plan);
  int cols = runs ? TRUN_COLS : TCOLS;
  const char *const *head = runs ? transfer_run_headers : transfer_headers;
  const bool *left = runs ? transfer_run_left : transfer_left;
  size_t width[TRUN_COLS];
  char cells[TRUN_COLS][24];
  const char *text[TRUN_COLS];
  for (int c = 0; c < cols; c++)
    width[c] = strlen(head[c]);
  for (size_t b = 0; b < plan->n_batches; b++) {
    for (size_t i = 0; i < plan->batches[b]->n_nbytes; i++) {
      transfer_row_cells(plan, b, i, runs, cells, text);
      for (int c = 0; c < cols; c++)
        if (strlen(text[c]) > width[c])
          width[c] = strlen(text[c]);
    }
  }

  if (fprintf(out, "# source_placement_id=%s target_placement_id=%s\n",
              plan->source_placement_id, plan->target_placement_id) < 0)
    return -1;
  for (size_t s = 0; s < plan->n_sources; s++) {
    const Reshard__V1__TransferSource *src = plan->sources[s];
    if (fprintf(out,
                "# source %zu participant_id=%s endpoint=%s memory_id=%s\n", s,
                src->participant_id, src->endpoint, src->memory_id) < 0)
      return -1;
    for (size_t r = 0; r < src->n_regions; r++) {
      const Reshard__V1__Region *reg = src->regions[r];
      if (fprintf(out,
                  "# source %zu region %zu region_id=%s address=%" PRIu64
                  " nbytes=%" PRIu64 "\n",
                  s, r, reg->region_id, reg->address, reg->nbytes) < 0)
        return -1;
    }
  }
  for (size_t r = 0; r < plan->n_region_ids; r++)
    if (fprintf(out, "# region %zu region_id=%s\n", r, plan->region_ids[r]) < 0)
      return -1;
  for (size_t b = 0; b < plan->n_batches; b++) {
    const Reshard__V1__TransferBatch *tb = plan->batches[b];
    const Reshard__V1__TransferSource *src = plan->sources[tb->source_index];
    if (fprintf(out,
                "# batch %zu source=%" PRIu64
                " participant_id=%s endpoint=%s copies=%" PRIu64
                " bytes=%" PRIu64,
                b, tb->source_index, src->participant_id, src->endpoint,
                transfer_batch_copies(tb), tb->bytes) < 0 ||
        (runs && fprintf(out, " runs=%zu", tb->n_run_count) < 0) ||
        fputc('\n', out) == EOF)
      return -1;
  }
  for (int c = 0; c < cols; c++)
    if (put_cell(out, head[c], width[c], left[c], c == 0) < 0)
      return -1;
  if (fputc('\n', out) == EOF)
    return -1;
  for (size_t b = 0; b < plan->n_batches; b++) {
    for (size_t i = 0; i < plan->batches[b]->n_nbytes; i++) {
      transfer_row_cells(plan, b, i, runs, cells, text);
      for (int c = 0; c < cols; c++)
        if (put_cell(out, text[c], width[c], left[c], c == 0) < 0)
          return -1;
      if (fputc('\n', out) == EOF)
        return -1;
    }
  }
  const Reshard__V1__PlanStats *st = plan->stats;
  if (fprintf(out,
              "# batches=%zu operations=%" PRIu64 " bytes=%" PRIu64
              " copies_before_coalescing=%" PRIu64,
              plan->n_batches, st ? st->operations : 0, st ? st->bytes : 0,
              st ? st->copies_before_coalescing : 0) < 0 ||
      (runs && fprintf(out, " runs=%" PRIu64, st ? st->runs : 0) < 0) ||
      fputc('\n', out) == EOF)
    return -1;
  return 0;
}
