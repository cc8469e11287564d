/* The daemon's metrics registry and their Prometheus text exposition
 * (format 0.0.4). docs/operations.md lists every metric with its type and
 * labels.
 *
 * Threads. Every counter is a C11 atomic. The loop thread (and only it)
 * records events with the reshard_metrics_* writers below, using relaxed
 * atomic additions; reshard_metrics_format reads with relaxed loads from
 * any thread (the metrics HTTP thread), so a scrape never takes a lock the
 * loop could wait on. A scrape sees each value as of some instant; values
 * of different series may be a few events apart. Cache figures are a
 * snapshot the loop publishes (reshard_metrics_publish_cache).
 *
 * Every writer accepts a NULL registry and does nothing then, so code can
 * record unconditionally whether metrics are enabled or not. */
#ifndef RESHARD_METRICS_H
#define RESHARD_METRICS_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

struct reshard_cache_stats;

typedef struct reshard_metrics reshard_metrics;

/* The RPC methods metrics are kept for; any other path counts as
 * RESHARD_METRICS_METHOD_UNKNOWN, so a client cannot grow the label set. */
typedef enum reshard_metrics_method {
  RESHARD_METRICS_METHOD_UNKNOWN = 0,
  RESHARD_METRICS_METHOD_PUBLISH_MANIFEST,
  RESHARD_METRICS_METHOD_GET_MANIFEST,
  RESHARD_METRICS_METHOD_REGISTER_PAGES,
  RESHARD_METRICS_METHOD_FORGET_PAGES,
  RESHARD_METRICS_METHOD_REGISTER_PLACEMENT,
  RESHARD_METRICS_METHOD_PLAN_UPLOAD,
  RESHARD_METRICS_METHOD_PLAN_LOAD,
  RESHARD_METRICS_METHOD_HEALTH_CHECK,
  RESHARD_METRICS_METHOD_HEALTH_WATCH,
  RESHARD_METRICS_METHOD_PLAN_STORE,
  RESHARD_METRICS_METHOD_REGISTER_MEMORY,
  RESHARD_METRICS_METHOD_FORGET_MEMORY,
  RESHARD_METRICS_METHOD_PLAN_TRANSFER,
} reshard_metrics_method;

#define RESHARD_METRICS_METHODS 14

/* gRPC status codes 0 (OK) .. 16 (UNAUTHENTICATED). */
#define RESHARD_METRICS_CODES 17

/* The canonical name of gRPC status `code` ("OK", "INVALID_ARGUMENT", ...),
 * the label value of the metrics and the `code` of the call logs; "UNKNOWN"
 * for a code outside 0..16. */
const char *reshard_grpc_code_name(int code);

typedef enum reshard_metrics_catalog_op {
  RESHARD_METRICS_CATALOG_PUT_MANIFEST = 0,
  RESHARD_METRICS_CATALOG_GET_MANIFESTS,
  RESHARD_METRICS_CATALOG_ADD_PAGES,
  RESHARD_METRICS_CATALOG_FORGET_PAGES,
  RESHARD_METRICS_CATALOG_LOOKUP_PAGES,
  RESHARD_METRICS_CATALOG_PUT_OBJECT,
  RESHARD_METRICS_CATALOG_GET_OBJECTS,
  RESHARD_METRICS_CATALOG_FORGET_OBJECT,
} reshard_metrics_catalog_op;

#define RESHARD_METRICS_CATALOG_OPS 8

/* Histogram bucket upper bounds in microseconds (10 µs .. 10 s), shared by
 * every latency histogram; a +Inf bucket follows. */
#define RESHARD_METRICS_BUCKETS 19
extern const uint64_t reshard_metrics_bucket_us[RESHARD_METRICS_BUCKETS];

/* Creates a zeroed registry. `version` and `catalog_backend` ("memory",
 * "lmdb", "redis") are copied into reshard_build_info's labels. NULL when
 * out of memory. */
reshard_metrics *reshard_metrics_create(const char *version,
                                        const char *catalog_backend);

/* Frees the registry; no thread may use it any more. NULL is a no-op. */
void reshard_metrics_free(reshard_metrics *metrics);

/* Maps a gRPC method path ("/reshard.v1.Planner/PlanLoad") to its index;
 * unknown paths give RESHARD_METRICS_METHOD_UNKNOWN. */
reshard_metrics_method reshard_metrics_method_of(const char *path);

/* ---- Writers (the loop thread) ---- */

/* A call to `method` arrived. */
void reshard_metrics_call_started(reshard_metrics *metrics,
                                  reshard_metrics_method method);

/* A call to `method` finished with gRPC status `code` after
 * `duration_us`. Codes above 16 are counted as UNKNOWN (2). */
void reshard_metrics_call_finished(reshard_metrics *metrics,
                                   reshard_metrics_method method, unsigned code,
                                   uint64_t duration_us);

/* The RPCs whose plans the reshard_plan_* families count, by the value of
 * their `method` label. PlanLoad is 0, so a record that names no method
 * is PlanLoad's. */
typedef enum reshard_metrics_plan_method {
  RESHARD_METRICS_PLAN_LOAD = 0,
  RESHARD_METRICS_PLAN_TRANSFER,
  RESHARD_METRICS_PLAN_STORE,
} reshard_metrics_plan_method;

#define RESHARD_METRICS_PLAN_METHODS 3

/* One call that ran the planner (reshard_plan_load for PlanLoad,
 * reshard_plan_transfer for PlanTransfer, reshard_plan_store for
 * PlanStore): how long planning took, and for
 * a successful plan (`ok`) what it produced. A method outside
 * reshard_metrics_plan_method is not recorded. */
typedef struct reshard_metrics_plan {
  reshard_metrics_plan_method method;
  bool ok;
  uint64_t plan_us;
  uint64_t pages;     /* page keys asked for (PlanLoad only) */
  uint64_t hit_pages; /* the hit prefix planned (PlanLoad only) */
  uint64_t copies;    /* after coalescing */
  uint64_t copies_before_coalescing;
  uint64_t bytes;
  bool runs_requested;     /* the request set `runs` */
  uint64_t runs;           /* entries returned when runs were requested */
  uint64_t response_bytes; /* the encoded response */
} reshard_metrics_plan;
void reshard_metrics_record_plan(reshard_metrics *metrics,
                                 const reshard_metrics_plan *plan);

/* One catalog operation completed after `duration_us`; `ok` false when it
 * failed (NOT_FOUND of a manifest included). */
void reshard_metrics_catalog_done(reshard_metrics *metrics,
                                  reshard_metrics_catalog_op op,
                                  uint64_t duration_us, bool ok);

/* Publishes the cache's counters and sizes for the next scrape. */
void reshard_metrics_publish_cache(reshard_metrics *metrics,
                                   const struct reshard_cache_stats *stats);

/* Records whether the daemon is draining (SIGTERM received). */
void reshard_metrics_set_draining(reshard_metrics *metrics, bool draining);

/* The in-flight memory bound's figures (loop thread; may be NULL):
 * bytes charged by calls in flight and calls waiting for room. */
void reshard_metrics_set_inflight(reshard_metrics *metrics, uint64_t bytes,
                                  uint64_t waiting);

/* Events of calls' batches so far (loop thread; may be NULL): taken by
 * the loop itself as they completed, and handed to it by the completion
 * thread (server/queue.c). */
void reshard_metrics_set_call_events(reshard_metrics *metrics, uint64_t taken,
                                     uint64_t handed);

/* `closed` more connections closed by the reset guard (guard/reset_guard.h). */
void reshard_metrics_reset_close(reshard_metrics *metrics, uint64_t closed);

/* `closed` more connections closed by the read guard (guard/read_guard.h). */
void reshard_metrics_read_flood_close(reshard_metrics *metrics,
                                      uint64_t closed);

/* ---- Exposition (any thread) ---- */

/* Process figures the HTTP thread reads from the kernel at scrape time;
 * `valid` false leaves the process_* series out. */
typedef struct reshard_metrics_process {
  bool valid;
  uint64_t resident_bytes;
  uint64_t virtual_bytes;
  uint64_t cpu_us; /* user + system */
  uint64_t start_time_s;
  uint64_t open_fds;
} reshard_metrics_process;

/* A growable text buffer; `failed` once an allocation failed. */
typedef struct reshard_metrics_text {
  char *data; /* NUL-terminated, malloc'ed */
  size_t length;
  size_t capacity;
  bool failed;
} reshard_metrics_text;

/* Appends the whole exposition to `out` (which may start zeroed). Returns
 * false when memory ran out; `out` must be freed either way. */
bool reshard_metrics_format(const reshard_metrics *metrics,
                            const reshard_metrics_process *process,
                            reshard_metrics_text *out);

void reshard_metrics_text_free(reshard_metrics_text *text);

/* Writes `us` microseconds as decimal seconds without trailing zeros
 * ("0.0025", "1", "0.00001") into `out`; returns the length. Exposed for
 * tests. */
size_t reshard_metrics_seconds(char *out, size_t size, uint64_t us);

#endif
