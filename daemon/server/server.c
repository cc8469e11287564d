/* The server itself: creating it with its channel arguments, registering
 * methods, binding the port and starting the queue threads, the timers and
 * the request slots, freeing it, and its counters. The rest of the bridge
 * lives beside it (server_internal.h says which file owns what). */
#include <assert.h>
#include <grpc/grpc.h>
#include <grpc/grpc_security.h>
#include <grpc/support/time.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/eventfd.h>
#include <unistd.h>

#include "observe/log.h"
#include "server/server_internal.h"

enum {
  DEFAULT_REQUEST_SLOTS = 32,
  DEFAULT_MAX_CONCURRENT_STREAMS = 100,
  DEFAULT_KEEPALIVE_TIME_MS = 60 * 1000,
  DEFAULT_KEEPALIVE_TIMEOUT_MS = 20 * 1000,
  DEFAULT_MAX_CONNECTION_IDLE_MS = 5 * 60 * 1000,
};

/* Free arena blocks kept for the next calls: a few dozen calls' worth for
 * small plans, small next to the cache budget and to what 64 calls in
 * flight hold. Measured in docs/performance.md. */
#define CALL_POOL_RETAIN_BYTES ((size_t)16 << 20)

/* A timer of the server's; with `fn`, repeating every `ms` without keeping
 * the loop alive. */
static void init_timer(reshard_server *server, uv_timer_t *timer,
                       uv_timer_cb fn, uint64_t ms) {
  uv_timer_init(server->loop, timer);
  timer->data = server;
  if (fn != NULL) {
    uv_timer_start(timer, fn, ms, ms);
    uv_unref((uv_handle_t *)timer);
  }
}

static grpc_arg int_arg(const char *key, int value) {
  grpc_arg arg;
  memset(&arg, 0, sizeof arg);
  arg.type = GRPC_ARG_INTEGER;
  arg.key = (char *)key;
  arg.value.integer = value;
  return arg;
}

static int clamp_ms(uint64_t ms, uint64_t fallback) {
  if (ms == 0) {
    ms = fallback;
  }
  return ms > INT32_MAX ? INT32_MAX : (int)ms;
}

/* The transport's bounds (docs/security.md): every connection is probed
 * and closed when its peer stops answering or stays idle, streams per
 * connection are capped, and compressed messages are never inflated. */
static void server_channel_args(const reshard_server_options *options,
                                grpc_arg args[13], grpc_channel_args *out) {
  size_t n = 0;
  args[n++] = int_arg(GRPC_ARG_MAX_RECEIVE_MESSAGE_LENGTH,
                      options->max_request_bytes > INT32_MAX
                          ? INT32_MAX
                          : (int)options->max_request_bytes);
  args[n++] = int_arg(GRPC_ARG_MAX_SEND_MESSAGE_LENGTH, -1);
  /* A second daemon on the same port must fail, not share it. */
  args[n++] = int_arg(GRPC_ARG_ALLOW_REUSEPORT, 0);
  args[n++] = int_arg(GRPC_ARG_MAX_CONCURRENT_STREAMS,
                      options->max_concurrent_streams != 0
                          ? (int)options->max_concurrent_streams
                          : DEFAULT_MAX_CONCURRENT_STREAMS);
  args[n++] =
      int_arg(GRPC_ARG_KEEPALIVE_TIME_MS,
              clamp_ms(options->keepalive_time_ms, DEFAULT_KEEPALIVE_TIME_MS));
  args[n++] = int_arg(
      GRPC_ARG_KEEPALIVE_TIMEOUT_MS,
      clamp_ms(options->keepalive_timeout_ms, DEFAULT_KEEPALIVE_TIMEOUT_MS));
  /* Probe connections that carry no call too (half-sent headers, idle
   * sockets), and keep probing without data. */
  args[n++] = int_arg(GRPC_ARG_KEEPALIVE_PERMIT_WITHOUT_CALLS, 1);
  args[n++] = int_arg(GRPC_ARG_HTTP2_MAX_PINGS_WITHOUT_DATA, 0);
  args[n++] = int_arg(GRPC_ARG_MAX_CONNECTION_IDLE_MS,
                      clamp_ms(options->max_connection_idle_ms,
                               DEFAULT_MAX_CONNECTION_IDLE_MS));
  /* Compressed messages reach us compressed and are refused (on_recv). */
  args[n++] = int_arg(GRPC_ARG_ENABLE_PER_MESSAGE_DECOMPRESSION, 0);
  args[n++] = int_arg(GRPC_COMPRESSION_CHANNEL_ENABLED_ALGORITHMS_BITSET,
                      1 << GRPC_COMPRESS_NONE);
  args[n++] = int_arg(GRPC_ARG_MAX_METADATA_SIZE, 16 * 1024);
  /* Without BDP probing a stream whose request we have not asked for yet
   * (a call waiting for in-flight room) is granted only the default
   * window; with it, gRPC buffered ~8 MiB per waiting stream (measured:
   * 259 MiB instead of 64 MiB for 32 waiting 8 MiB calls). A request we
   * ask for still gets a window of its full size. */
  args[n++] = int_arg(GRPC_ARG_HTTP2_BDP_PROBE, 0);
  *out = (grpc_channel_args){n, args};
}

reshard_server *reshard_server_create(uv_loop_t *loop,
                                      const reshard_server_options *options,
                                      reshard_error *err) {
  reshard_server *server = calloc(1, sizeof *server);
  if (server == NULL) {
    reshard_error_set(err, RESHARD_INTERNAL, "server: out of memory");
    return NULL;
  }
  server->loop = loop;
  server->options = *options;
  if (server->options.request_slots == 0) {
    server->options.request_slots = DEFAULT_REQUEST_SLOTS;
  }
  server->shutdown_tag = (server_tag){NULL, TAG_SHUTDOWN, 0, server};
  server->queue_done_tag = (server_tag){NULL, TAG_QUEUE_DONE, 0, server};

  grpc_channel_args channel_args;
  grpc_arg args[13];
  server_channel_args(&server->options, args, &channel_args);
  reshard_inflight_init(&server->inflight, options->max_inflight_bytes);
  reshard_reset_guard_init(&server->reset_guard, RESETS_PER_SECOND_MAX);
  server->grpc = grpc_server_create(&channel_args, NULL);
  server->cq = grpc_completion_queue_create_for_next(NULL);
  grpc_completion_queue_attributes call_cq = {
      GRPC_CQ_CURRENT_VERSION, GRPC_CQ_NEXT, GRPC_CQ_NON_POLLING, NULL};
  server->call_cq = grpc_completion_queue_create(
      grpc_completion_queue_factory_lookup(&call_cq), &call_cq, NULL);
  server->pool = reshard_chunk_pool_create(CALL_POOL_RETAIN_BYTES);
  if (server->grpc == NULL || server->cq == NULL || server->call_cq == NULL ||
      server->pool == NULL) {
    reshard_error_set(err, RESHARD_INTERNAL, "server: cannot create");
    reshard_server_free(server);
    return NULL;
  }
  grpc_server_register_completion_queue(server->grpc, server->cq, NULL);
  return server;
}

void reshard_server_add_method(reshard_server *server, const char *path,
                               unsigned flags, reshard_method_fn fn,
                               void *data) {
  assert(server->phase == PHASE_NEW);
  assert(server->method_count < MAX_METHODS);
  server->methods[server->method_count++] = (method_entry){
      path, strlen(path), flags, fn, data, reshard_metrics_method_of(path)};
}

reshard_status reshard_server_start(reshard_server *server, int *port,
                                    reshard_error *err) {
  assert(server->phase == PHASE_NEW);
  grpc_server_credentials *credentials =
      server->options.credentials != NULL
          ? server->options.credentials
          : grpc_insecure_server_credentials_create();
  int bound = grpc_server_add_http2_port(server->grpc, server->options.listen,
                                         credentials);
  if (credentials != server->options.credentials) {
    grpc_server_credentials_release(credentials);
  }
  if (bound == 0) {
    return reshard_error_set(err, RESHARD_UNAVAILABLE,
                             "--listen %s: cannot bind (address in use or "
                             "not available)",
                             server->options.listen);
  }
  server->slots = calloc(server->options.request_slots, sizeof *server->slots);
  if (server->slots == NULL) {
    return reshard_error_set(err, RESHARD_INTERNAL, "server: out of memory");
  }
  if (uv_mutex_init(&server->lock) != 0) {
    free(server->slots);
    server->slots = NULL;
    return reshard_error_set(err, RESHARD_INTERNAL, "server: uv_mutex_init");
  }
  server->events_fd = eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
  if (server->events_fd < 0 ||
      uv_poll_init(server->loop, &server->events, server->events_fd) != 0) {
    if (server->events_fd >= 0) {
      close(server->events_fd);
    }
    uv_mutex_destroy(&server->lock);
    free(server->slots);
    server->slots = NULL;
    return reshard_error_set(err, RESHARD_INTERNAL,
                             "server: cannot create the event descriptor");
  }
  server->events.data = server;
  /* With a valid event mask, uv_poll_start cannot fail (libuv 1.44). */
  int started = uv_poll_start(&server->events, UV_READABLE, reshard__on_events);
  assert(started == 0);
  (void)started;
  init_timer(server, &server->timer, NULL, 0);
  init_timer(server, &server->sweep, reshard__on_sweep, SWEEP_MS);
  init_timer(server, &server->look, reshard__on_look, READ_GUARD_LOOK_MS);
  init_timer(server, &server->trim, NULL, 0);
  uv_unref((uv_handle_t *)&server->trim); /* a chore, never a reason to run */
  uv_idle_init(server->loop, &server->take);
  server->take.data = server;
  server->handles_open = true;

  grpc_server_start(server->grpc);
  server->phase = PHASE_SERVING;
  /* Counted before any starts: the last to finish reports it. */
  atomic_init(&server->threads_running, ALL_QUEUE_THREADS);
  for (unsigned i = 0; i < ALL_QUEUE_THREADS; i++) {
    queue_thread_state *state = &server->queue[i];
    state->server = server;
    state->cq = i == COMPLETION_THREAD ? server->call_cq : server->cq;
    atomic_init(&state->returned, 0);
    if (uv_thread_create(&state->thread, reshard__queue_thread, state) != 0) {
      /* Without the threads nothing can be served; abort loudly. */
      reshard_log_msg(RESHARD_LOG_ERROR, "cannot start the queue threads",
                      NULL);
      abort();
    }
    state->has_clock = pthread_getcpuclockid(state->thread, &state->clock) == 0;
  }
  /* A Unix socket keeps no count of bytes received: no read guard. */
  reshard_read_guard_init(
      &server->read_guard, QUEUE_THREADS,
      strncmp(server->options.listen, "unix:", 5) == 0 ? 0 : bound);
  server->slot_count = server->options.request_slots;
  for (unsigned i = 0; i < server->slot_count; i++) {
    server->slots[i].tag =
        (server_tag){NULL, TAG_REQUEST, 0, &server->slots[i]};
    reshard__arm_slot(server, &server->slots[i]);
  }
  *port = bound;
  return RESHARD_OK;
}

void reshard_server_free(reshard_server *server) {
  if (server == NULL) {
    return;
  }
  assert(!server->handles_open && "free after the closed callback");
  if (server->phase == PHASE_NEW) {
    /* Never started: no listener, no calls, no thread. */
    if (server->grpc != NULL) {
      grpc_server_destroy(server->grpc);
    }
    grpc_completion_queue *queues[] = {server->cq, server->call_cq};
    for (size_t i = 0; i < sizeof queues / sizeof *queues; i++) {
      if (queues[i] == NULL) {
        continue;
      }
      grpc_completion_queue_shutdown(queues[i]);
      while (grpc_completion_queue_next(
                 queues[i], gpr_inf_future(GPR_CLOCK_REALTIME), NULL)
                 .type != GRPC_QUEUE_SHUTDOWN) {
      }
      grpc_completion_queue_destroy(queues[i]);
    }
  } else {
    uv_mutex_destroy(&server->lock);
  }
  free(server->slots);
  reshard_read_guard_free(&server->read_guard);
  reshard_chunk_pool_free(server->pool);
  free(server);
}

void reshard_server_get_stats(const reshard_server *server,
                              reshard_server_stats *out) {
  *out = server->stats;
  out->in_flight = server->in_flight;
  out->inflight_bytes = server->inflight.used;
  out->inflight_waiting = server->inflight.waiting;
}
