/* Draining and shutting down (reshard_server_drain), in the order
 * server.h gives: refuse new calls and wait for the in-flight ones (or
 * the drain timeout), shut the gRPC server down with a grace period,
 * destroy it once every call is gone, shut the queue down, join its
 * threads, close the loop handles, and report the server closed. */
#include <grpc/grpc.h>
#include <stdint.h>
#include <unistd.h>

#include "observe/log.h"
#include "server/server_internal.h"

enum {
  /* Once no Planner call is in flight, calls still sending their status
   * get this long before the rest are cancelled; connections that ignore
   * GOAWAY do not hold the exit for the whole drain timeout. */
  SHUTDOWN_GRACE_MS = 1000,
};

static void on_drain_timeout(uv_timer_t *timer);
static void on_grace_timeout(uv_timer_t *timer);
static void on_handle_closed(uv_handle_t *handle);

void reshard_server_on_drain(reshard_server *server, reshard_drain_fn fn,
                             void *data) {
  server->drain_fn = fn;
  server->drain_data = data;
}

void reshard_server_drain(reshard_server *server, void (*closed)(void *data),
                          void *data) {
  if (server->phase == PHASE_DRAINING) {
    /* Asked again: stop waiting. */
    server->drain_deadline_ns = uv_hrtime();
    reshard__begin_shutdown(server);
    return;
  }
  if (server->phase == PHASE_SHUTDOWN) {
    if (!server->shutdown_notified) {
      uv_timer_stop(&server->timer);
      grpc_server_cancel_all_calls(server->grpc);
    }
    return;
  }
  if (server->phase != PHASE_SERVING) {
    return;
  }
  server->closed_fn = closed;
  server->closed_data = data;
  server->phase = PHASE_DRAINING;
  server->drain_deadline_ns =
      uv_hrtime() + server->options.drain_timeout_ms * 1000000;
  reshard_log_line line;
  if (reshard_log_begin(&line, RESHARD_LOG_INFO, "draining")) {
    reshard_log_u64(&line, "in_flight", server->in_flight);
    reshard_log_u64(&line, "timeout_ms", server->options.drain_timeout_ms);
    reshard_log_end(&line);
  }
  if (server->drain_fn != NULL) {
    server->drain_fn(server->drain_data);
  }
  if (server->in_flight == 0) {
    reshard__begin_shutdown(server);
  } else {
    uv_timer_start(&server->timer, on_drain_timeout,
                   server->options.drain_timeout_ms, 0);
  }
}

bool reshard_server_draining(const reshard_server *server) {
  return server->phase >= PHASE_DRAINING;
}

static void on_drain_timeout(uv_timer_t *timer) {
  reshard_server *server = timer->data;
  reshard_log_line line;
  if (reshard_log_begin(&line, RESHARD_LOG_WARN, "drain timeout")) {
    reshard_log_u64(&line, "in_flight", server->in_flight);
    reshard_log_end(&line);
  }
  server->drain_deadline_ns = uv_hrtime();
  reshard__begin_shutdown(server);
}

void reshard__begin_shutdown(reshard_server *server) {
  if (server->phase != PHASE_DRAINING) {
    return;
  }
  server->phase = PHASE_SHUTDOWN;
  uv_timer_stop(&server->timer);
  /* Long-lived streams, and calls still waiting for their request or for
   * room, end now; nothing else would end them. */
  for (reshard_call *call = server->calls; call != NULL;) {
    reshard_call *next = call->next;
    bool streaming = call->method != NULL &&
                     (call->method->flags & RESHARD_METHOD_STREAMING);
    if (!call->finished && call->waiter.queued) {
      reshard__call_end_waiting(call, GRPC_STATUS_UNAVAILABLE,
                                "reshardd is shutting down");
    } else if (!call->finished && (streaming || call->awaiting_request)) {
      reshard__call_finish(call, GRPC_STATUS_UNAVAILABLE,
                           "reshardd is shutting down");
    }
    call = next;
  }
  grpc_server_shutdown_and_notify(server->grpc, server->cq,
                                  &server->shutdown_tag);
  uint64_t now = uv_hrtime();
  uint64_t grace_ms = server->drain_deadline_ns > now
                          ? (server->drain_deadline_ns - now) / 1000000
                          : 0;
  if (server->in_flight == 0 && grace_ms > SHUTDOWN_GRACE_MS) {
    grace_ms = SHUTDOWN_GRACE_MS;
  }
  if (grace_ms == 0) {
    grpc_server_cancel_all_calls(server->grpc);
  } else {
    uv_timer_start(&server->timer, on_grace_timeout, grace_ms, 0);
  }
}

static void on_grace_timeout(uv_timer_t *timer) {
  reshard_server *server = timer->data;
  if (server->phase == PHASE_SHUTDOWN && !server->shutdown_notified) {
    reshard_log_msg(RESHARD_LOG_WARN, "cancelling calls still running", NULL);
    grpc_server_cancel_all_calls(server->grpc);
  }
}

void reshard__on_shutdown_notified(reshard_server *server) {
  server->shutdown_notified = true;
  uv_timer_stop(&server->timer);
  reshard__maybe_finish_shutdown(server);
}

void reshard__maybe_finish_shutdown(reshard_server *server) {
  if (server->phase != PHASE_SHUTDOWN || !server->shutdown_notified ||
      server->calls != NULL || server->slots_pending != 0) {
    return;
  }
  server->phase = PHASE_DESTROYED;
  grpc_server_destroy(server->grpc);
  server->grpc = NULL;
  /* No call is left to start a batch on call_cq. */
  grpc_completion_queue_shutdown(server->call_cq);
  grpc_completion_queue_shutdown(server->cq);
}

void reshard__on_queue_done(reshard_server *server) {
  /* The threads returned from their last grpc_completion_queue_next. */
  grpc_completion_queue_destroy(server->cq);
  grpc_completion_queue_destroy(server->call_cq);
  server->cq = server->call_cq = NULL;
  for (unsigned i = 0; i < ALL_QUEUE_THREADS; i++) {
    uv_thread_join(&server->queue[i].thread);
  }
  server->handles_closing = 6;
  uv_close((uv_handle_t *)&server->take, on_handle_closed);
  uv_close((uv_handle_t *)&server->events, on_handle_closed);
  uv_close((uv_handle_t *)&server->timer, on_handle_closed);
  uv_close((uv_handle_t *)&server->sweep, on_handle_closed);
  uv_close((uv_handle_t *)&server->look, on_handle_closed);
  uv_close((uv_handle_t *)&server->trim, on_handle_closed);
}

static void on_handle_closed(uv_handle_t *handle) {
  reshard_server *server = handle->data;
  if (handle == (uv_handle_t *)&server->events) {
    close(server->events_fd); /* the loop no longer watches it */
    server->events_fd = -1;
  }
  if (--server->handles_closing == 0) {
    server->handles_open = false;
    reshard_log_msg(RESHARD_LOG_INFO, "stopped", NULL);
    if (server->closed_fn != NULL) {
      server->closed_fn(server->closed_data);
    }
  }
}
