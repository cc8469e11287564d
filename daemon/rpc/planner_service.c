/* The planner service (SPEC §3.3): its life cycle, the method table that
 * decodes each request before its handler runs, and what the RPC files
 * share (planner_internal.h): request checks and the planning steps of
 * PlanLoad and PlanStore. The handlers live one concept per file:
 * manifests.c, pages.c, placements.c, plan_load.c and plan_store.c. */
#include "rpc/planner_service.h"

#include <inttypes.h>
#include <stdlib.h>
#include <string.h>

#include "reshard/checked.h"
#include "rpc/planner_internal.h"
#include "wire/wire.h"

/* What planning holds per copy, for the in-flight reservation: reshard-
 * bench measures 54-67 bytes of arena per copy at its peak on S1-S4
 * (copies, sort scratch, batches), and the encoded response adds 10-30. */
enum { PLAN_BYTES_PER_COPY = 96 };

/* Large plans and decodes run on one worker per CPU the daemon may run
 * on, at most WORK_POOL_THREADS_MAX (libuv's pool size), at nice
 * +WORK_POOL_NICE, so on a machine with fewer cores than busy threads the
 * kernel runs the loop and the gRPC thread first and large plans do not
 * stall small ones; they still get the CPU the loop leaves. Planning
 * gains nothing from more workers than CPUs, and each idle one is a
 * futex wake-up for the loop when work comes: on two vCPUs, four workers
 * took 1.28-1.55 futex calls a PlanLoad under h2load and two 0.87-0.97,
 * at 24 500-29 500 against 30 300-31 000 S1x8 PlanLoads a second with
 * runs (docs/performance.md, Round 37). */
enum { WORK_POOL_THREADS_MAX = 4, WORK_POOL_NICE = 10 };

/* Decodes the call's request as `type`; on failure the call is failed and
 * NULL returned. */
static void *decode(reshard_call *call,
                    const ProtobufCMessageDescriptor *type) {
  size_t length;
  const uint8_t *payload = reshard_call_payload(call, &length);
  reshard_error err;
  ProtobufCMessage *message = reshard_wire_unpack(
      type, payload, length, reshard_call_arena(call), &err);
  if (message == NULL) {
    reshard_call_fail(call, &err);
  }
  return message;
}

void *reshard__planner_call_alloc(reshard_call *call, size_t size) {
  void *memory = reshard_arena_calloc(reshard_call_arena(call), 1, size);
  if (memory == NULL) {
    reshard_call_fail_code(call, RESHARD_RESOURCE_EXHAUSTED, "out of memory");
  }
  return memory;
}

static bool is_digest(const char *text) {
  size_t i = 0;
  for (; text[i] != '\0'; i++) {
    char c = text[i];
    if (!((c >= '0' && c <= '9') || (c >= 'a' && c <= 'f'))) {
      return false;
    }
  }
  return i == RESHARD_DIGEST_HEX_LEN;
}

/* Checks a model domain field: required, 64 lowercase hex digits. */
reshard_status reshard__planner_check_domain(const char *domain,
                                             const char *path,
                                             reshard_error *err) {
  if (domain[0] == '\0') {
    return reshard_error_set(err, RESHARD_INVALID_ARGUMENT, "%s: required",
                             path);
  }
  if (!is_digest(domain)) {
    return reshard_error_set(err, RESHARD_INVALID_ARGUMENT,
                             "%s: \"%.80s\" is not a model domain (64 "
                             "lowercase hex digits)",
                             path, domain);
  }
  return RESHARD_OK;
}

/* Checks "kv/{domain}/manifests/{digest}" and extracts the domain. */
reshard_status
reshard__planner_parse_manifest_key(const char *key, const char *path,
                                    char domain[RESHARD_DIGEST_HEX_LEN + 1],
                                    reshard_error *err) {
  static const char prefix[] = "kv/";
  static const char middle[] = "/manifests/";
  if (key[0] == '\0') {
    return reshard_error_set(err, RESHARD_INVALID_ARGUMENT, "%s: required",
                             path);
  }
  size_t length = strlen(key);
  const size_t d = RESHARD_DIGEST_HEX_LEN;
  bool ok = length == 3 + d + 11 + d && memcmp(key, prefix, 3) == 0 &&
            memcmp(key + 3 + d, middle, 11) == 0;
  if (ok) {
    char part[RESHARD_DIGEST_HEX_LEN + 1];
    memcpy(part, key + 3, d);
    part[d] = '\0';
    ok = is_digest(part) && is_digest(key + 3 + d + 11);
    if (ok) {
      memcpy(domain, part, d + 1);
    }
  }
  if (!ok) {
    return reshard_error_set(err, RESHARD_INVALID_ARGUMENT,
                             "%s: \"%.160s\" is not a manifest key "
                             "(kv/{model_domain}/manifests/{layout digest})",
                             path, key);
  }
  return RESHARD_OK;
}

reshard_status reshard__planner_check_page_keys(char *const *keys, size_t count,
                                                const reshard_limits *caps,
                                                reshard_error *err) {
  if (count > caps->max_page_keys) {
    return reshard_error_set(err, RESHARD_RESOURCE_EXHAUSTED,
                             "page_keys: %zu keys exceed the limit "
                             "max_page_keys %" PRIu64,
                             count, caps->max_page_keys);
  }
  for (size_t i = 0; i < count; i++) {
    if (keys[i][0] == '\0') {
      return reshard_error_set(err, RESHARD_INVALID_ARGUMENT,
                               "page_keys[%zu]: must not be empty", i);
    }
  }
  return RESHARD_OK;
}

uint64_t reshard__planner_plan_reservation(uint64_t binding_values,
                                           uint64_t max_operations) {
  /* The binding's values bound the copies a plan can produce, and so does
   * the operations limit. */
  uint64_t copies =
      binding_values < max_operations ? binding_values : max_operations;
  uint64_t bytes;
  return reshard_mul(copies, PLAN_BYTES_PER_COPY, &bytes) ? bytes : UINT64_MAX;
}

/* ---- Planning, shared by PlanLoad and PlanStore ---- */

reshard_status reshard__planner_check_call(reshard_call *call,
                                           reshard_error *err) {
  if (reshard_call_cancelled(call)) {
    return reshard_error_set(err, RESHARD_UNAVAILABLE,
                             "the call was cancelled before planning");
  }
  if (reshard_call_expired(call)) {
    return reshard_error_set(err, RESHARD_DEADLINE_EXCEEDED,
                             "deadline exceeded before planning");
  }
  return RESHARD_OK;
}

bool reshard__planner_find_join(reshard_planner *planner,
                                const reshard_shared_manifest *manifest,
                                const reshard__target *target, uint64_t dp_rank,
                                const char *participant,
                                reshard_shared_join **join) {
  *join = NULL;
  const reshard_placement *placement = target->placement;
  if (participant == NULL ||
      reshard_placement_find_part(placement, participant) == NULL ||
      !reshard_descriptor_equal(&manifest->manifest.layout.descriptor,
                                &placement->descriptor, NULL)) {
    return false;
  }
  char key[RESHARD_ID_SIZE * 2 + 512];
  size_t length = reshard_cache_join_key(key, sizeof key, manifest->layout_id,
                                         target->id, dp_rank, participant);
  if (length > 0) {
    *join = (reshard_shared_join *)reshard_cache_get(
        planner->cache, RESHARD_CACHE_JOIN, key, length);
  }
  return true;
}

void reshard__planner_keep_join(reshard_planner *planner, reshard_join *built,
                                const char *layout_id,
                                const reshard__target *target, uint64_t dp_rank,
                                const char *participant) {
  reshard_shared_join *shared = reshard_shared_join_wrap(built);
  char key[RESHARD_ID_SIZE * 2 + 512];
  size_t length = reshard_cache_join_key(key, sizeof key, layout_id, target->id,
                                         dp_rank, participant);
  if (shared != NULL && length > 0) {
    reshard_cache_put(planner->cache, RESHARD_CACHE_JOIN, key, length,
                      &shared->base);
  }
  reshard_shared_unref(shared ? &shared->base : NULL);
}

reshard_response_memory *
reshard__planner_column_memory(reshard_call *call, bool varint_columns,
                               reshard_arena **column_arena) {
  reshard_response_memory *memory =
      varint_columns ? reshard_call_response_memory(call) : NULL;
  *column_arena = memory != NULL ? reshard_response_memory_arena(memory) : NULL;
  return memory;
}

reshard_status reshard__planner_check_planned(reshard_call *call,
                                              reshard_error *err) {
  if (reshard_call_expired(call)) {
    return reshard_error_set(err, RESHARD_DEADLINE_EXCEEDED,
                             "deadline exceeded while planning; the plan "
                             "was discarded");
  }
  return RESHARD_OK;
}

static reshard_status
pack_measured(reshard_call *call, reshard_response_memory *memory,
              const reshard_range_batches *batches, size_t size, void *response,
              reshard_response_pieces_fn *write,
              size_t (*write_whole)(void *response, uint8_t *out)) {
  if (memory == NULL) {
    return reshard_call_pack_encoded(call, size, write_whole, response);
  }
  reshard_response_piece *pieces;
  size_t count;
  if (reshard_response_pack_pieces(
          batches, size, response, write, reshard_response_memory_arena(memory),
          reshard_call_arena(call), &pieces, &count) != RESHARD_OK) {
    return RESHARD_RESOURCE_EXHAUSTED;
  }
  return reshard_call_pack_pieces(call, memory, pieces, count);
}

reshard_status reshard__planner_pack_response(
    reshard_call *call, reshard_status measured,
    reshard_response_memory *memory, const reshard_range_batches *batches,
    size_t size, void *response, reshard_response_pieces_fn *write,
    size_t (*write_whole)(void *response, uint8_t *out), reshard_error *err) {
  if (measured != RESHARD_OK ||
      pack_measured(call, memory, batches, size, response, write,
                    write_whole) != RESHARD_OK) {
    return reshard_error_set(err, RESHARD_RESOURCE_EXHAUSTED,
                             "out of memory building the response");
  }
  return RESHARD_OK;
}

/* `fn` then `after` on the loop now, or `fn` on the work pool. */
static int run_here_or_pool(reshard_planner *planner, reshard_work *work,
                            bool here, reshard_work_fn fn,
                            reshard_after_work_fn after) {
  if (here) {
    fn(work);
    after(work);
    return 0;
  }
  return reshard_work_pool_submit(planner->pool, work, fn, after);
}

/* A lone call's work runs on the loop: with nothing else for the loop
 * to do, the hop to the pool and back is two wake-ups of an idle vCPU.
 * --inline-plan-max-values 0 keeps every plan on the pool. */
static bool alone(const reshard_planner *planner, const reshard_call *call) {
  return planner->inline_max_values > 0 && reshard_call_alone(call);
}

int reshard__planner_run(reshard_planner *planner, reshard_call *call,
                         reshard_work *work, uint64_t binding_values,
                         reshard_work_fn fn, reshard_after_work_fn after) {
  /* Small plans cost less than the hop to the pool and back. */
  bool here = binding_values <= planner->inline_max_values ||
              (binding_values <= RESHARD__PLANNER_ALONE_MAX_VALUES &&
               alone(planner, call));
  return run_here_or_pool(planner, work, here, fn, after);
}

int reshard__planner_decode(reshard_planner *planner, reshard_call *call,
                            reshard_work *work, bool large, reshard_work_fn fn,
                            reshard_after_work_fn after) {
  /* Decoding a large request takes milliseconds: not on the loop, unless
   * nothing else waits for it. */
  size_t length;
  reshard_call_payload(call, &length);
  bool here = !large || (length <= RESHARD__PLANNER_ALONE_MAX_REQUEST_BYTES &&
                         alone(planner, call));
  return run_here_or_pool(planner, work, here, fn, after);
}

/* ---- Large requests ---- */

typedef struct reshard__queued_call {
  struct reshard__queued_call *next;
  reshard_call *call;
  reshard__planner_start *start;
} reshard__queued_call;

void reshard__planner_admit(reshard_planner *planner, reshard_call *call,
                            reshard__planner_start *start) {
  size_t length;
  reshard_call_payload(call, &length);
  if (length < RESHARD__PLANNER_LARGE_REQUEST_BYTES) {
    start(planner, call, false);
    return;
  }
  if (planner->large_active < planner->max_large) {
    planner->large_active++;
    start(planner, call, true);
    return;
  }
  reshard__queued_call *node =
      reshard__planner_call_alloc(call, sizeof(reshard__queued_call));
  if (node == NULL) {
    return;
  }
  node->call = call;
  node->start = start;
  if (planner->queue_tail != NULL) {
    planner->queue_tail->next = node;
  } else {
    planner->queue_head = node;
  }
  planner->queue_tail = node;
  /* Gone while in line: known when its turn comes, and skipped. */
  reshard_call_watch_cancel(call);
}

void reshard__planner_large_done(reshard_planner *planner) {
  planner->large_active--;
  if (planner->dequeuing) {
    return; /* the loop below is running further up the stack */
  }
  planner->dequeuing = true;
  while (planner->queue_head != NULL &&
         planner->large_active < planner->max_large) {
    reshard__queued_call *next = planner->queue_head;
    planner->queue_head = next->next;
    if (planner->queue_head == NULL) {
      planner->queue_tail = NULL;
    }
    planner->large_active++;
    next->start(planner, next->call, true);
  }
  planner->dequeuing = false;
}

/* ---- Life cycle ---- */

reshard_planner *reshard_planner_create(uv_loop_t *loop,
                                        reshard_catalog *catalog,
                                        reshard_cache *cache,
                                        const reshard_limits *caps,
                                        uint64_t inline_max_values) {
  reshard_planner *planner = calloc(1, sizeof *planner);
  if (planner == NULL) {
    return NULL;
  }
  planner->loop = loop;
  planner->catalog = catalog;
  planner->cache = cache;
  planner->caps = *caps;
  planner->inline_max_values = inline_max_values;
  planner->cache_bindings = !catalog->vtable->lookups_are_local;
  planner->max_large = uv_available_parallelism();
  unsigned workers = planner->max_large < WORK_POOL_THREADS_MAX
                         ? planner->max_large
                         : WORK_POOL_THREADS_MAX;
  planner->pool = reshard_work_pool_create(loop, workers, WORK_POOL_NICE);
  if (planner->pool == NULL) {
    free(planner);
    return NULL;
  }
  return planner;
}

/* Decodes the request, then hands it to the method's handler. */
static void serve(reshard_call *call, void *data) {
  const reshard__planner_method *method = data;
  void *request = decode(call, method->request);
  if (request != NULL) {
    method->handle(method->planner, call, request);
  }
}

void reshard_planner_register(reshard_planner *planner,
                              reshard_server *server) {
  static const struct {
    const char *path;
    const ProtobufCMessageDescriptor *request;
    reshard__planner_rpc *handle;
  } rpcs[RESHARD__PLANNER_DECODED_RPCS] = {
      {"/reshard.v1.Planner/PublishManifest",
       &reshard__v1__publish_manifest_request__descriptor,
       reshard__handle_publish_manifest},
      {"/reshard.v1.Planner/GetManifest",
       &reshard__v1__get_manifest_request__descriptor,
       reshard__handle_get_manifest},
      {"/reshard.v1.Planner/RegisterPages",
       &reshard__v1__register_pages_request__descriptor,
       reshard__handle_register_pages},
      {"/reshard.v1.Planner/ForgetPages",
       &reshard__v1__forget_pages_request__descriptor,
       reshard__handle_forget_pages},
      {"/reshard.v1.Planner/RegisterPlacement",
       &reshard__v1__register_placement_request__descriptor,
       reshard__handle_register_placement},
      {"/reshard.v1.Planner/PlanUpload",
       &reshard__v1__plan_upload_request__descriptor,
       reshard__handle_plan_upload},
      {"/reshard.v1.Planner/RegisterMemory",
       &reshard__v1__register_memory_request__descriptor,
       reshard__handle_register_memory},
      {"/reshard.v1.Planner/ForgetMemory",
       &reshard__v1__forget_memory_request__descriptor,
       reshard__handle_forget_memory},
  };
  for (size_t i = 0; i < RESHARD__PLANNER_DECODED_RPCS; i++) {
    planner->methods[i] = (reshard__planner_method){
        .planner = planner,
        .request = rpcs[i].request,
        .handle = rpcs[i].handle,
    };
    reshard_server_add_method(server, rpcs[i].path, 0, serve,
                              &planner->methods[i]);
  }
  reshard_server_add_method(server, "/reshard.v1.Planner/PlanLoad", 0,
                            reshard__handle_plan_load, planner);
  reshard_server_add_method(server, "/reshard.v1.Planner/PlanStore", 0,
                            reshard__handle_plan_store, planner);
  reshard_server_add_method(server, "/reshard.v1.Planner/PlanTransfer", 0,
                            reshard__handle_plan_transfer, planner);
}

void reshard_planner_set_metrics(reshard_planner *planner,
                                 reshard_metrics *metrics) {
  planner->metrics = metrics;
}

void reshard_planner_free(reshard_planner *planner) {
  if (planner != NULL) {
    reshard_work_pool_close(planner->pool);
  }
  free(planner);
}
