/* The deadline sweep: every SWEEP_MS the loop ends the calls whose
 * deadline passed while they waited for something gRPC does not see, so
 * gRPC would not end them itself. */
#include <grpc/grpc.h>
#include <stdint.h>

#include "server/server_internal.h"

enum {
  /* A finished call whose client has not taken its response this long
   * while other calls wait for room is cancelled: a client that never
   * opens its flow-control window must not hold the room for good. Ten
   * seconds carry S2's 3.9 MB response at 400 KB/s. */
  RESPONSE_SEND_CONTENDED_MS = 10 * 1000,
};

/* Cancels a call whose response has not gone out: gRPC then completes its
 * batches and the call is freed, giving its room back. The log and the
 * metrics keep `code`, not CANCELLED. */
static void cut_send(reshard_call *call, grpc_status_code code,
                     const char *message) {
  call->send_cut = true;
  call->code = code;
  call->message = message;
  grpc_call_cancel_with_status(call->call, code, message, NULL);
}

/* Ends the calls whose deadline passed while they waited for something
 * gRPC does not know about: their request (under the default deadline),
 * in-flight room, or a client that does not take its response (gRPC
 * enforces a deadline the client set, not the default one). */
void reshard__on_sweep(uv_timer_t *timer) {
  reshard_server *server = timer->data;
  uint64_t now = uv_hrtime();
  for (reshard_call *call = server->calls; call != NULL;) {
    reshard_call *next = call->next;
    if (call->finished) {
      if (call->sending && !call->send_cut) {
        if (reshard_call_expired(call)) {
          cut_send(call, GRPC_STATUS_DEADLINE_EXCEEDED,
                   "response not taken by the client by the call's deadline");
        } else if (server->inflight.waiting != 0 &&
                   now - call->finished_ns >=
                       (uint64_t)RESPONSE_SEND_CONTENDED_MS * 1000000) {
          cut_send(call, GRPC_STATUS_DEADLINE_EXCEEDED,
                   "response not taken by the client within 10 s while "
                   "other calls wait for in-flight memory "
                   "(--max-inflight-bytes)");
        }
      }
    } else if (call->waiter.queued && reshard_call_expired(call)) {
      reshard__call_end_waiting(
          call, GRPC_STATUS_RESOURCE_EXHAUSTED,
          "in-flight memory limit (--max-inflight-bytes) still full "
          "at the call's deadline");
    } else if (call->awaiting_request &&
               (now >= call->request_deadline_ns ||
                (server->inflight.waiting != 0 && call->admitted_ns != 0 &&
                 now - call->admitted_ns >=
                     (uint64_t)REQUEST_READ_CONTENDED_MS * 1000000))) {
      reshard__call_finish(
          call, GRPC_STATUS_DEADLINE_EXCEEDED,
          "request message not received in time (--default-deadline; "
          "10 s after admission, 1 s while other calls wait)");
    }
    call = next;
  }
  /* Published here, not per event: a figure for operators, at most one
   * sweep old. */
  reshard_metrics_set_call_events(
      server->options.metrics, server->events_taken,
      atomic_load_explicit(&server->queue[COMPLETION_THREAD].returned,
                           memory_order_relaxed));
}
