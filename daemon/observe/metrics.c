#include "observe/metrics.h"

#include <inttypes.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cache/cache.h"

const uint64_t reshard_metrics_bucket_us[RESHARD_METRICS_BUCKETS] = {
    10,     25,      50,      100,     250,     500,    1000,
    2500,   5000,    10000,   25000,   50000,   100000, 250000,
    500000, 1000000, 2500000, 5000000, 10000000};

typedef _Atomic uint64_t counter;

/* Non-cumulative bucket counts (the last is +Inf) and the sum; the
 * exposition accumulates them, so _count always equals the +Inf bucket. */
typedef struct histogram {
  counter buckets[RESHARD_METRICS_BUCKETS + 1];
  counter sum_us;
} histogram;

/* The reshard_plan_* figures of one planning method. */
typedef struct plan_counters {
  histogram duration;
  counter ok, failed;
  counter pages, hit_pages;
  counter copies, copies_before, bytes;
  counter runs_requested, runs, response_bytes;
} plan_counters;

struct reshard_metrics {
  char version[32];
  char catalog[16];

  counter started[RESHARD_METRICS_METHODS];
  counter finished[RESHARD_METRICS_METHODS][RESHARD_METRICS_CODES];
  histogram duration[RESHARD_METRICS_METHODS];

  plan_counters plans[RESHARD_METRICS_PLAN_METHODS];

  histogram catalog_duration[RESHARD_METRICS_CATALOG_OPS];
  counter catalog_errors[RESHARD_METRICS_CATALOG_OPS];

  counter cache_hits[RESHARD_CACHE_KINDS];
  counter cache_misses[RESHARD_CACHE_KINDS];
  counter cache_evictions[RESHARD_CACHE_KINDS];
  counter cache_entries[RESHARD_CACHE_KINDS];
  counter cache_bytes[RESHARD_CACHE_KINDS];
  counter cache_budget;

  atomic_bool draining;
  counter inflight_bytes, inflight_waiting;
  counter reset_closes;
  counter read_flood_closes;
  counter call_events_taken, call_events_handed;
};

static const struct {
  const char *path;
  const char *service;
  const char *method;
} methods[RESHARD_METRICS_METHODS] = {
    [RESHARD_METRICS_METHOD_UNKNOWN] = {NULL, "unknown", "unknown"},
    [RESHARD_METRICS_METHOD_PUBLISH_MANIFEST] =
        {"/reshard.v1.Planner/PublishManifest", "reshard.v1.Planner",
         "PublishManifest"},
    [RESHARD_METRICS_METHOD_GET_MANIFEST] = {"/reshard.v1.Planner/GetManifest",
                                             "reshard.v1.Planner",
                                             "GetManifest"},
    [RESHARD_METRICS_METHOD_REGISTER_PAGES] =
        {"/reshard.v1.Planner/RegisterPages", "reshard.v1.Planner",
         "RegisterPages"},
    [RESHARD_METRICS_METHOD_FORGET_PAGES] = {"/reshard.v1.Planner/ForgetPages",
                                             "reshard.v1.Planner",
                                             "ForgetPages"},
    [RESHARD_METRICS_METHOD_REGISTER_PLACEMENT] =
        {"/reshard.v1.Planner/RegisterPlacement", "reshard.v1.Planner",
         "RegisterPlacement"},
    [RESHARD_METRICS_METHOD_PLAN_UPLOAD] = {"/reshard.v1.Planner/PlanUpload",
                                            "reshard.v1.Planner", "PlanUpload"},
    [RESHARD_METRICS_METHOD_PLAN_LOAD] = {"/reshard.v1.Planner/PlanLoad",
                                          "reshard.v1.Planner", "PlanLoad"},
    [RESHARD_METRICS_METHOD_HEALTH_CHECK] = {"/grpc.health.v1.Health/Check",
                                             "grpc.health.v1.Health", "Check"},
    [RESHARD_METRICS_METHOD_HEALTH_WATCH] = {"/grpc.health.v1.Health/Watch",
                                             "grpc.health.v1.Health", "Watch"},
    [RESHARD_METRICS_METHOD_PLAN_STORE] = {"/reshard.v1.Planner/PlanStore",
                                           "reshard.v1.Planner", "PlanStore"},
    [RESHARD_METRICS_METHOD_REGISTER_MEMORY] =
        {"/reshard.v1.Planner/RegisterMemory", "reshard.v1.Planner",
         "RegisterMemory"},
    [RESHARD_METRICS_METHOD_FORGET_MEMORY] =
        {"/reshard.v1.Planner/ForgetMemory", "reshard.v1.Planner",
         "ForgetMemory"},
    [RESHARD_METRICS_METHOD_PLAN_TRANSFER] =
        {"/reshard.v1.Planner/PlanTransfer", "reshard.v1.Planner",
         "PlanTransfer"},
};

/* The `method` label of the reshard_plan_* series: the RPC's name, as in
 * reshard_requests_total. */
static const char *const plan_method_names[RESHARD_METRICS_PLAN_METHODS] = {
    [RESHARD_METRICS_PLAN_LOAD] = "PlanLoad",
    [RESHARD_METRICS_PLAN_TRANSFER] = "PlanTransfer",
    [RESHARD_METRICS_PLAN_STORE] = "PlanStore",
};

static const char *const code_names[RESHARD_METRICS_CODES] = {
    "OK",
    "CANCELLED",
    "UNKNOWN",
    "INVALID_ARGUMENT",
    "DEADLINE_EXCEEDED",
    "NOT_FOUND",
    "ALREADY_EXISTS",
    "PERMISSION_DENIED",
    "RESOURCE_EXHAUSTED",
    "FAILED_PRECONDITION",
    "ABORTED",
    "OUT_OF_RANGE",
    "UNIMPLEMENTED",
    "INTERNAL",
    "UNAVAILABLE",
    "DATA_LOSS",
    "UNAUTHENTICATED"};

const char *reshard_grpc_code_name(int code) {
  if (code < 0 || code >= RESHARD_METRICS_CODES) {
    return "UNKNOWN";
  }
  return code_names[code];
}

static const char *const catalog_op_names[RESHARD_METRICS_CATALOG_OPS] = {
    "put_manifest", "get_manifests", "add_pages",   "forget_pages",
    "lookup_pages", "put_object",    "get_objects", "forget_object"};

/* ---- Registry ---- */

reshard_metrics *reshard_metrics_create(const char *version,
                                        const char *catalog_backend) {
  reshard_metrics *metrics = calloc(1, sizeof *metrics);
  if (metrics == NULL) {
    return NULL;
  }
  /* calloc's zero bytes are a valid initial value for every atomic here
   * (C11 atomics of integer types have the representation of the type on
   * every platform we build for); atomic_init makes the intent explicit
   * for the one flag. */
  atomic_init(&metrics->draining, false);
  snprintf(metrics->version, sizeof metrics->version, "%s",
           version ? version : "");
  snprintf(metrics->catalog, sizeof metrics->catalog, "%s",
           catalog_backend ? catalog_backend : "");
  return metrics;
}

void reshard_metrics_free(reshard_metrics *metrics) {
  free(metrics);
}

reshard_metrics_method reshard_metrics_method_of(const char *path) {
  if (path != NULL) {
    for (int i = 1; i < RESHARD_METRICS_METHODS; i++) {
      if (strcmp(path, methods[i].path) == 0) {
        return (reshard_metrics_method)i;
      }
    }
  }
  return RESHARD_METRICS_METHOD_UNKNOWN;
}

/* ---- Writers ---- */

static void add(counter *c, uint64_t n) {
  atomic_fetch_add_explicit(c, n, memory_order_relaxed);
}

static void put(counter *c, uint64_t v) {
  atomic_store_explicit(c, v, memory_order_relaxed);
}

static uint64_t get(const counter *c) {
  return atomic_load_explicit((counter *)c, memory_order_relaxed);
}

static void observe(histogram *h, uint64_t us) {
  size_t b = 0;
  while (b < RESHARD_METRICS_BUCKETS && us > reshard_metrics_bucket_us[b]) {
    b++;
  }
  add(&h->buckets[b], 1);
  add(&h->sum_us, us);
}

static unsigned method_index(reshard_metrics_method method) {
  return (unsigned)method < RESHARD_METRICS_METHODS
             ? (unsigned)method
             : RESHARD_METRICS_METHOD_UNKNOWN;
}

void reshard_metrics_call_started(reshard_metrics *metrics,
                                  reshard_metrics_method method) {
  if (metrics != NULL) {
    add(&metrics->started[method_index(method)], 1);
  }
}

void reshard_metrics_call_finished(reshard_metrics *metrics,
                                   reshard_metrics_method method, unsigned code,
                                   uint64_t duration_us) {
  if (metrics == NULL) {
    return;
  }
  unsigned m = method_index(method);
  add(&metrics->finished[m][code < RESHARD_METRICS_CODES ? code : 2], 1);
  observe(&metrics->duration[m], duration_us);
}

void reshard_metrics_record_plan(reshard_metrics *metrics,
                                 const reshard_metrics_plan *plan) {
  if (metrics == NULL ||
      (unsigned)plan->method >= RESHARD_METRICS_PLAN_METHODS) {
    return;
  }
  plan_counters *c = &metrics->plans[plan->method];
  observe(&c->duration, plan->plan_us);
  if (!plan->ok) {
    add(&c->failed, 1);
    return;
  }
  add(&c->ok, 1);
  add(&c->pages, plan->pages);
  add(&c->hit_pages, plan->hit_pages);
  add(&c->copies, plan->copies);
  add(&c->copies_before, plan->copies_before_coalescing);
  add(&c->bytes, plan->bytes);
  add(&c->runs_requested, plan->runs_requested ? 1 : 0);
  add(&c->runs, plan->runs);
  add(&c->response_bytes, plan->response_bytes);
}

void reshard_metrics_catalog_done(reshard_metrics *metrics,
                                  reshard_metrics_catalog_op op,
                                  uint64_t duration_us, bool ok) {
  if (metrics == NULL || (unsigned)op >= RESHARD_METRICS_CATALOG_OPS) {
    return;
  }
  observe(&metrics->catalog_duration[op], duration_us);
  if (!ok) {
    add(&metrics->catalog_errors[op], 1);
  }
}

void reshard_metrics_publish_cache(reshard_metrics *metrics,
                                   const struct reshard_cache_stats *stats) {
  if (metrics == NULL) {
    return;
  }
  for (int k = 0; k < RESHARD_CACHE_KINDS; k++) {
    put(&metrics->cache_hits[k], stats->hits[k]);
    put(&metrics->cache_misses[k], stats->misses[k]);
    put(&metrics->cache_evictions[k], stats->evictions[k]);
    put(&metrics->cache_entries[k], stats->entries[k]);
    put(&metrics->cache_bytes[k], stats->bytes[k]);
  }
  put(&metrics->cache_budget, stats->budget);
}

void reshard_metrics_set_draining(reshard_metrics *metrics, bool draining) {
  if (metrics != NULL) {
    atomic_store_explicit(&metrics->draining, draining, memory_order_relaxed);
  }
}

void reshard_metrics_set_inflight(reshard_metrics *metrics, uint64_t bytes,
                                  uint64_t waiting) {
  if (metrics != NULL) {
    put(&metrics->inflight_bytes, bytes);
    put(&metrics->inflight_waiting, waiting);
  }
}

void reshard_metrics_set_call_events(reshard_metrics *metrics, uint64_t taken,
                                     uint64_t handed) {
  if (metrics != NULL) {
    put(&metrics->call_events_taken, taken);
    put(&metrics->call_events_handed, handed);
  }
}

void reshard_metrics_reset_close(reshard_metrics *metrics, uint64_t closed) {
  if (metrics != NULL) {
    add(&metrics->reset_closes, closed);
  }
}

void reshard_metrics_read_flood_close(reshard_metrics *metrics,
                                      uint64_t closed) {
  if (metrics != NULL) {
    add(&metrics->read_flood_closes, closed);
  }
}

/* ---- Text ---- */

static void text_reserve(reshard_metrics_text *out, size_t more) {
  if (out->failed || out->length + more + 1 <= out->capacity) {
    return;
  }
  size_t capacity = out->capacity ? out->capacity : 16384;
  while (capacity < out->length + more + 1) {
    capacity *= 2;
  }
  char *data = realloc(out->data, capacity);
  if (data == NULL) {
    out->failed = true;
    return;
  }
  out->data = data;
  out->capacity = capacity;
}

#if defined(__GNUC__)
__attribute__((format(printf, 2, 3)))
#endif
static void
text_printf(reshard_metrics_text *out, const char *fmt, ...) {
  if (out->failed) {
    return;
  }
  va_list args;
  va_start(args, fmt);
  char small[512];
  int n = vsnprintf(small, sizeof small, fmt, args);
  va_end(args);
  if (n < 0) {
    out->failed = true;
    return;
  }
  text_reserve(out, (size_t)n);
  if (out->failed) {
    return;
  }
  if ((size_t)n < sizeof small) {
    memcpy(out->data + out->length, small, (size_t)n + 1);
  } else {
    va_start(args, fmt);
    vsnprintf(out->data + out->length, (size_t)n + 1, fmt, args);
    va_end(args);
  }
  out->length += (size_t)n;
}

void reshard_metrics_text_free(reshard_metrics_text *text) {
  free(text->data);
  memset(text, 0, sizeof *text);
}

size_t reshard_metrics_seconds(char *out, size_t size, uint64_t us) {
  char buffer[48];
  int n = snprintf(buffer, sizeof buffer, "%" PRIu64 ".%06" PRIu64,
                   us / 1000000, us % 1000000);
  while (n > 0 && buffer[n - 1] == '0') {
    n--;
  }
  if (n > 0 && buffer[n - 1] == '.') {
    n--;
  }
  buffer[n] = '\0';
  return (size_t)snprintf(out, size, "%s", buffer);
}

/* Label values here are fixed strings of ours, except build info, which is
 * escaped as the format requires (backslash, quote, newline). */
static void escaped(reshard_metrics_text *out, const char *value) {
  for (const char *p = value; *p; p++) {
    if (*p == '\\' || *p == '"') {
      text_printf(out, "\\%c", *p);
    } else if (*p == '\n') {
      text_printf(out, "\\n");
    } else {
      text_printf(out, "%c", *p);
    }
  }
}

static void header(reshard_metrics_text *out, const char *name,
                   const char *type, const char *help) {
  text_printf(out, "# HELP %s %s\n# TYPE %s %s\n", name, help, name, type);
}

/* One histogram's series; `labels` is "" or `key="value",...` without
 * braces. */
static void histogram_series(reshard_metrics_text *out, const char *name,
                             const char *labels, const histogram *h) {
  const char *comma = labels[0] ? "," : "";
  uint64_t cumulative = 0;
  char le[48];
  for (size_t b = 0; b < RESHARD_METRICS_BUCKETS; b++) {
    cumulative += get(&h->buckets[b]);
    reshard_metrics_seconds(le, sizeof le, reshard_metrics_bucket_us[b]);
    text_printf(out, "%s_bucket{%s%sle=\"%s\"} %" PRIu64 "\n", name, labels,
                comma, le, cumulative);
  }
  cumulative += get(&h->buckets[RESHARD_METRICS_BUCKETS]);
  text_printf(out, "%s_bucket{%s%sle=\"+Inf\"} %" PRIu64 "\n", name, labels,
              comma, cumulative);
  char sum[48];
  reshard_metrics_seconds(sum, sizeof sum, get(&h->sum_us));
  if (labels[0]) {
    text_printf(out, "%s_sum{%s} %s\n%s_count{%s} %" PRIu64 "\n", name, labels,
                sum, name, labels, cumulative);
  } else {
    text_printf(out, "%s_sum %s\n%s_count %" PRIu64 "\n", name, sum, name,
                cumulative);
  }
}

static void format_calls(const reshard_metrics *m, reshard_metrics_text *out) {
  header(out, "reshard_requests_started_total", "counter",
         "RPCs received, by service and method.");
  for (int i = 0; i < RESHARD_METRICS_METHODS; i++) {
    uint64_t n = get(&m->started[i]);
    if (i == RESHARD_METRICS_METHOD_UNKNOWN && n == 0) {
      continue;
    }
    text_printf(out,
                "reshard_requests_started_total{service=\"%s\",method=\"%s\"} "
                "%" PRIu64 "\n",
                methods[i].service, methods[i].method, n);
  }

  /* OK is always present for every known method (a client reading
   * before/after needs a zero to start from); other codes appear once
   * they occur. */
  header(out, "reshard_requests_total", "counter",
         "RPCs finished, by service, method and gRPC status code; errors are "
         "the series with code!=\"OK\".");
  for (int i = 0; i < RESHARD_METRICS_METHODS; i++) {
    for (int c = 0; c < RESHARD_METRICS_CODES; c++) {
      uint64_t n = get(&m->finished[i][c]);
      if (n == 0 && (c != 0 || i == RESHARD_METRICS_METHOD_UNKNOWN)) {
        continue;
      }
      text_printf(out,
                  "reshard_requests_total{service=\"%s\",method=\"%s\","
                  "code=\"%s\"} %" PRIu64 "\n",
                  methods[i].service, methods[i].method, code_names[c], n);
    }
  }

  header(out, "reshard_request_duration_seconds", "histogram",
         "Time from a call's arrival to its status, by service and method "
         "(for Health/Watch: the life of the stream).");
  for (int i = 0; i < RESHARD_METRICS_METHODS; i++) {
    if (i == RESHARD_METRICS_METHOD_UNKNOWN && get(&m->started[i]) == 0) {
      continue;
    }
    char labels[128];
    snprintf(labels, sizeof labels, "service=\"%s\",method=\"%s\"",
             methods[i].service, methods[i].method);
    histogram_series(out, "reshard_request_duration_seconds", labels,
                     &m->duration[i]);
  }

  /* Finished counts are read before started ones, and both only grow, so
   * the difference never goes negative. */
  uint64_t finished = 0, started = 0;
  for (int i = 0; i < RESHARD_METRICS_METHODS; i++) {
    for (int c = 0; c < RESHARD_METRICS_CODES; c++) {
      finished += get(&m->finished[i][c]);
    }
  }
  for (int i = 0; i < RESHARD_METRICS_METHODS; i++) {
    started += get(&m->started[i]);
  }
  header(out, "reshard_calls_in_flight", "gauge",
         "Calls received and not yet finished (Health/Watch streams "
         "included).");
  text_printf(out, "reshard_calls_in_flight %" PRIu64 "\n",
              started >= finished ? started - finished : 0);
}

/* Every reshard_plan_* family has a series per planning method
 * (method="PlanLoad", "PlanTransfer", "PlanStore"), zero until it plans;
 * families only PlanLoad's, the one method that plans pages. */
static void format_plans(const reshard_metrics *m, reshard_metrics_text *out) {
  header(out, "reshard_plan_duration_seconds", "histogram",
         "Time spent in the planner per plan (the planning itself, without "
         "queueing or response building), by method.");
  for (int p = 0; p < RESHARD_METRICS_PLAN_METHODS; p++) {
    char labels[64];
    snprintf(labels, sizeof labels, "method=\"%s\"", plan_method_names[p]);
    histogram_series(out, "reshard_plan_duration_seconds", labels,
                     &m->plans[p].duration);
  }
  header(out, "reshard_plans_total", "counter",
         "Calls that ran the planner, by method and result.");
  for (int p = 0; p < RESHARD_METRICS_PLAN_METHODS; p++) {
    text_printf(out,
                "reshard_plans_total{method=\"%s\",result=\"ok\"} %" PRIu64 "\n"
                "reshard_plans_total{method=\"%s\",result=\"error\"} %" PRIu64
                "\n",
                plan_method_names[p], get(&m->plans[p].ok),
                plan_method_names[p], get(&m->plans[p].failed));
  }
  static const struct {
    const char *name, *help;
    size_t offset;
    bool load_only;
  } plain[] = {
      {"reshard_plan_pages_total",
       "Page keys asked for by successful plans (PlanLoad).",
       offsetof(plan_counters, pages), true},
      {"reshard_plan_hit_pages_total",
       "Pages planned (the hit prefixes) by successful plans (PlanLoad).",
       offsetof(plan_counters, hit_pages), true},
      {"reshard_plan_copies_total",
       "Byte-range copies planned, after coalescing, by method.",
       offsetof(plan_counters, copies), false},
      {"reshard_plan_copies_before_coalescing_total",
       "Byte-range copies planned, before coalescing, by method.",
       offsetof(plan_counters, copies_before), false},
      {"reshard_plan_bytes_total",
       "KV bytes the planned copies move, by "
       "method.",
       offsetof(plan_counters, bytes), false},
      {"reshard_plan_runs_requested_total",
       "Successful plans that asked for strided runs, by method.",
       offsetof(plan_counters, runs_requested), false},
      {"reshard_plan_runs_total",
       "Strided runs returned (entries of plans that asked for runs), by "
       "method.",
       offsetof(plan_counters, runs), false},
      {"reshard_plan_response_bytes_total",
       "Encoded bytes of the plan responses sent, by method.",
       offsetof(plan_counters, response_bytes), false},
  };
  for (size_t i = 0; i < sizeof plain / sizeof plain[0]; i++) {
    header(out, plain[i].name, "counter", plain[i].help);
    int methods_shown = plain[i].load_only ? 1 : RESHARD_METRICS_PLAN_METHODS;
    for (int p = 0; p < methods_shown; p++) {
      const counter *c =
          (const counter *)((const char *)&m->plans[p] + plain[i].offset);
      text_printf(out, "%s{method=\"%s\"} %" PRIu64 "\n", plain[i].name,
                  plan_method_names[p], get(c));
    }
  }
}

static void format_catalog(const reshard_metrics *m,
                           reshard_metrics_text *out) {
  header(out, "reshard_catalog_operation_duration_seconds", "histogram",
         "Catalog operations from start to completion on the loop, by "
         "operation.");
  for (int op = 0; op < RESHARD_METRICS_CATALOG_OPS; op++) {
    char labels[64];
    snprintf(labels, sizeof labels, "operation=\"%s\"", catalog_op_names[op]);
    histogram_series(out, "reshard_catalog_operation_duration_seconds", labels,
                     &m->catalog_duration[op]);
  }
  header(out, "reshard_catalog_errors_total", "counter",
         "Catalog operations that failed (unknown manifests included), by "
         "operation.");
  for (int op = 0; op < RESHARD_METRICS_CATALOG_OPS; op++) {
    text_printf(out,
                "reshard_catalog_errors_total{operation=\"%s\"} %" PRIu64 "\n",
                catalog_op_names[op], get(&m->catalog_errors[op]));
  }
}

static void format_cache(const reshard_metrics *m, reshard_metrics_text *out) {
  static const struct {
    const char *name, *type, *help;
    size_t offset;
  } series[] = {
      {"reshard_cache_hits_total", "counter", "Cache lookups that hit.",
       offsetof(reshard_metrics, cache_hits)},
      {"reshard_cache_misses_total", "counter", "Cache lookups that missed.",
       offsetof(reshard_metrics, cache_misses)},
      {"reshard_cache_evictions_total", "counter",
       "Entries evicted to keep the cache within its budget.",
       offsetof(reshard_metrics, cache_evictions)},
      {"reshard_cache_entries", "gauge", "Entries in the cache.",
       offsetof(reshard_metrics, cache_entries)},
      {"reshard_cache_bytes", "gauge",
       "Bytes the cache's entries account for (keys, values, overhead).",
       offsetof(reshard_metrics, cache_bytes)},
  };
  for (size_t s = 0; s < sizeof series / sizeof series[0]; s++) {
    header(out, series[s].name, series[s].type, series[s].help);
    const counter *values =
        (const counter *)((const char *)m + series[s].offset);
    for (int k = 0; k < RESHARD_CACHE_KINDS; k++) {
      text_printf(out, "%s{kind=\"%s\"} %" PRIu64 "\n", series[s].name,
                  reshard_cache_kind_name((reshard_cache_kind)k),
                  get(&values[k]));
    }
  }
  header(out, "reshard_cache_budget_bytes", "gauge",
         "The cache's byte budget (--cache-bytes).");
  text_printf(out, "reshard_cache_budget_bytes %" PRIu64 "\n",
              get(&m->cache_budget));
}

static void format_process(const reshard_metrics_process *p,
                           reshard_metrics_text *out) {
  char cpu[48];
  reshard_metrics_seconds(cpu, sizeof cpu, p->cpu_us);
  header(out, "process_cpu_seconds_total", "counter",
         "User and system CPU time spent, in seconds.");
  text_printf(out, "process_cpu_seconds_total %s\n", cpu);
  header(out, "process_resident_memory_bytes", "gauge",
         "Resident memory size in bytes.");
  text_printf(out, "process_resident_memory_bytes %" PRIu64 "\n",
              p->resident_bytes);
  header(out, "process_virtual_memory_bytes", "gauge",
         "Virtual memory size in bytes.");
  text_printf(out, "process_virtual_memory_bytes %" PRIu64 "\n",
              p->virtual_bytes);
  header(out, "process_open_fds", "gauge", "Open file descriptors.");
  text_printf(out, "process_open_fds %" PRIu64 "\n", p->open_fds);
  header(out, "process_start_time_seconds", "gauge",
         "Start time of the process since the Unix epoch, in seconds.");
  text_printf(out, "process_start_time_seconds %" PRIu64 "\n", p->start_time_s);
}

bool reshard_metrics_format(const reshard_metrics *m,
                            const reshard_metrics_process *process,
                            reshard_metrics_text *out) {
  header(out, "reshard_build_info", "gauge",
         "Always 1; the labels name the version and the catalog backend.");
  text_printf(out, "reshard_build_info{version=\"");
  escaped(out, m->version);
  text_printf(out, "\",catalog=\"");
  escaped(out, m->catalog);
  text_printf(out, "\"} 1\n");
  header(out, "reshard_draining", "gauge",
         "1 once the daemon is draining (SIGTERM/SIGINT received), else 0.");
  text_printf(
      out, "reshard_draining %d\n",
      atomic_load_explicit((atomic_bool *)&m->draining, memory_order_relaxed)
          ? 1
          : 0);
  header(out, "reshard_inflight_bytes", "gauge",
         "Bytes held by calls in flight, counted against "
         "--max-inflight-bytes.");
  text_printf(out, "reshard_inflight_bytes %" PRIu64 "\n",
              get(&m->inflight_bytes));
  header(out, "reshard_inflight_waiting_calls", "gauge",
         "Calls waiting for room under --max-inflight-bytes.");
  text_printf(out, "reshard_inflight_waiting_calls %" PRIu64 "\n",
              get(&m->inflight_waiting));
  header(out, "reshard_reset_flood_connections_closed_total", "counter",
         "Connections closed for resetting their streams before sending "
         "requests (HTTP/2 rapid reset).");
  text_printf(out, "reshard_reset_flood_connections_closed_total %" PRIu64 "\n",
              get(&m->reset_closes));
  header(out, "reshard_read_flood_connections_closed_total", "counter",
         "Connections closed for keeping every completion-queue thread "
         "reading without end (a flood on many connections).");
  text_printf(out, "reshard_read_flood_connections_closed_total %" PRIu64 "\n",
              get(&m->read_flood_closes));
  header(out, "reshard_call_events_total", "counter",
         "Completions of calls' gRPC batches, by the thread that took them: "
         "the loop as they completed, or the completion thread.");
  text_printf(out,
              "reshard_call_events_total{taken_by=\"loop\"} %" PRIu64 "\n"
              "reshard_call_events_total{taken_by=\"thread\"} %" PRIu64 "\n",
              get(&m->call_events_taken), get(&m->call_events_handed));
  format_calls(m, out);
  format_plans(m, out);
  format_catalog(m, out);
  format_cache(m, out);
  if (process != NULL && process->valid) {
    format_process(process, out);
  }
  if (out->data == NULL && !out->failed) {
    text_reserve(out, 0);
  }
  return !out->failed;
}
