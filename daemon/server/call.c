/* The life of a call, top to bottom: it arrives on a request slot, is
 * admitted under --max-inflight-bytes (or waits for room), reads its
 * request, runs its handler, which may reserve more room and finishes it
 * once (reply, fail, or a stream's writes and then its status), and is
 * freed once gRPC has completed every batch. Loop thread, but for the
 * accessors that say otherwise (server.h). */
#include <assert.h>
#include <grpc/byte_buffer.h>
#include <grpc/byte_buffer_reader.h>
#include <grpc/grpc.h>
#include <grpc/slice.h>
#include <grpc/support/time.h>
#include <stdatomic.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "observe/log.h"
#include "server/server_internal.h"

enum {
  /* Charged to every admitted call besides its request's bytes (see
   * request_bytes): the first arena chunks. */
  CALL_BASE_BYTES = 64 * 1024,
};

static const method_entry *find_method(const reshard_server *server,
                                       grpc_slice path);
static void apply_default_deadline(const reshard_server *server,
                                   reshard_call *call);
static grpc_call_error start_batch(reshard_call *call, const grpc_op *ops,
                                   size_t count, server_tag *tag);
static uint64_t admission_bytes(const reshard_server *server);
static uint64_t request_bytes(uint64_t length);
static void on_admitted(reshard_inflight_waiter *waiter);
static bool acquire_room(reshard_call *call, uint64_t bytes, uint64_t held);
static void admitted(reshard_call *call, uint64_t bytes);
static void start_recv(reshard_call *call);
static bool holds_drain(const reshard_call *call);
static bool is_unary(const reshard_call *call);
static void start_handler(reshard_call *call);
static bool watch_close(reshard_call *call);
static void on_closed(reshard_call *call);
static void reservation_done(reshard_call *call, const reshard_error *err);
static void publish_inflight(reshard_server *server);
static grpc_status_code grpc_code(reshard_status status);
static void send_status(reshard_call *call);
static void maybe_free(reshard_call *call);
static void call_free(reshard_call *call);
static void release_charge(reshard_call *call);
static void log_call(const reshard_call *call);
static grpc_status_code final_code(const reshard_call *call);

/* ---- Arrival ---- */

void reshard__arm_slot(reshard_server *server, request_slot *slot) {
  grpc_call_details_init(&slot->details);
  grpc_metadata_array_init(&slot->metadata);
  slot->call = NULL;
  grpc_call_error error = grpc_server_request_call(
      server->grpc, &slot->call, &slot->details, &slot->metadata,
      server->call_cq, server->cq, &slot->tag);
  if (error != GRPC_CALL_OK) {
    grpc_call_details_destroy(&slot->details);
    grpc_metadata_array_destroy(&slot->metadata);
    reshard_log_msg(RESHARD_LOG_ERROR, "grpc_server_request_call",
                    grpc_call_error_to_string(error));
    return;
  }
  server->slots_pending++;
}

/* A request slot matched: take the call over and re-arm the slot. */
void reshard__on_request(reshard_server *server, request_slot *slot,
                         int success) {
  server->slots_pending--;
  if (!success) {
    /* The server is shutting down; the slot is not re-armed. */
    grpc_call_details_destroy(&slot->details);
    grpc_metadata_array_destroy(&slot->metadata);
    reshard__maybe_finish_shutdown(server);
    return;
  }
  reshard_call *call = calloc(1, sizeof *call);
  if (call == NULL) {
    /* Nothing to answer with; let gRPC fail the call. */
    grpc_call_cancel_with_status(slot->call, GRPC_STATUS_RESOURCE_EXHAUSTED,
                                 "server out of memory", NULL);
    grpc_call_unref(slot->call);
    grpc_call_details_destroy(&slot->details);
    grpc_metadata_array_destroy(&slot->metadata);
    reshard__arm_slot(server, slot);
    return;
  }
  call->server = server;
  call->call = slot->call;
  call->start_ns = uv_hrtime();
  /* Kept on the monotonic clock so any thread can compare it. */
  call->deadline =
      slot->details.deadline.clock_type == GPR_TIMESPAN
          ? gpr_inf_future(GPR_CLOCK_MONOTONIC)
          : gpr_convert_clock_type(slot->details.deadline, GPR_CLOCK_MONOTONIC);
  call->request_deadline_ns = UINT64_MAX;
  atomic_init(&call->cancelled, false);
  reshard_arena_init_from(&call->arena, 16 * 1024,
                          reshard_chunk_pool_source(server->pool));
  call->recv_tag = (server_tag){NULL, TAG_RECV, 0, call};
  call->close_tag = (server_tag){NULL, TAG_CLOSE, 0, call};
  call->send_tag = (server_tag){NULL, TAG_SEND, 0, call};
  call->write_tag = (server_tag){NULL, TAG_WRITE, 0, call};
  call->method = find_method(server, slot->details.method);
  /* Known paths are static: a call waiting for its request holds no
   * arena chunk. */
  call->method_path =
      call->method != NULL
          ? (char *)call->method->path
          : reshard_arena_strndup(
                &call->arena,
                (const char *)GRPC_SLICE_START_PTR(slot->details.method),
                GRPC_SLICE_LENGTH(slot->details.method));
  if (call->method_path == NULL) {
    call->method_path = "?";
  }
  apply_default_deadline(server, call);
  /* Nothing of the metadata is kept; the details were copied above. */
  grpc_call_details_destroy(&slot->details);
  grpc_metadata_array_destroy(&slot->metadata);
  slot->call = NULL;
  if (server->phase == PHASE_SERVING || server->phase == PHASE_DRAINING) {
    reshard__arm_slot(server, slot);
  }

  call->next = server->calls;
  if (server->calls) {
    server->calls->prev = call;
  }
  server->calls = call;
  /* Counted from arrival: under load, calls wait for their requests and
   * their closes on the loop too, so a lone call is one with no other
   * call anywhere in its life. */
  server->unary_calls += is_unary(call);
  server->stats.calls_started++;
  call->metric = call->method != NULL ? call->method->metric
                                      : RESHARD_METRICS_METHOD_UNKNOWN;
  reshard_metrics_call_started(server->options.metrics, call->metric);

  /* A stream waits for its client's cancel from the start; a unary call
   * only while it waits in a line (reshard_call_watch_cancel). */
  if (!is_unary(call) && !watch_close(call)) {
    reshard__call_finish(call, GRPC_STATUS_INTERNAL, "cannot start the call");
    return;
  }
  if (call->method == NULL) {
    char message[320];
    snprintf(message, sizeof message, "unknown method %s", call->method_path);
    reshard__call_finish(call, GRPC_STATUS_UNIMPLEMENTED, message);
    return;
  }
  if (server->phase != PHASE_SERVING &&
      !(call->method->flags & RESHARD_METHOD_WHILE_DRAINING)) {
    reshard__call_finish(
        call, GRPC_STATUS_UNAVAILABLE,
        "reshardd is shutting down; retry on another instance");
    return;
  }
  if (reshard_call_expired(call)) {
    reshard__call_finish(call, GRPC_STATUS_DEADLINE_EXCEEDED,
                         "deadline exceeded before the call started");
    return;
  }
  /* Health checks are tiny and must answer under any load. */
  if (call->method->flags & RESHARD_METHOD_WHILE_DRAINING) {
    start_recv(call);
    return;
  }
  uint64_t bytes = admission_bytes(server);
  if (acquire_room(call, bytes, 0)) {
    admitted(call, bytes);
  }
  /* Otherwise on_admitted runs, or the sweep ends the call at its
   * deadline. */
  publish_inflight(server);
}

static const method_entry *find_method(const reshard_server *server,
                                       grpc_slice path) {
  size_t length = GRPC_SLICE_LENGTH(path);
  for (size_t i = 0; i < server->method_count; i++) {
    const method_entry *method = &server->methods[i];
    if (method->path_length == length &&
        memcmp(method->path, GRPC_SLICE_START_PTR(path), length) == 0) {
      return method;
    }
  }
  return NULL;
}

/* gRPC ends calls at the deadline their client set; a call sent without
 * one gets --default-deadline. Streams (Watch) live on once started, but
 * their request must still arrive by then. */
static void apply_default_deadline(const reshard_server *server,
                                   reshard_call *call) {
  uint64_t ms = server->options.default_deadline_ms;
  if (ms == 0) {
    return;
  }
  call->request_deadline_ns = call->start_ns + ms * 1000000;
  bool unbounded =
      gpr_time_cmp(call->deadline, gpr_inf_future(GPR_CLOCK_MONOTONIC)) == 0;
  bool streaming =
      call->method != NULL && (call->method->flags & RESHARD_METHOD_STREAMING);
  if (unbounded && !streaming) {
    call->deadline =
        gpr_time_add(gpr_now(GPR_CLOCK_MONOTONIC),
                     gpr_time_from_millis((int64_t)ms, GPR_TIMESPAN));
  }
}

static grpc_call_error start_batch(reshard_call *call, const grpc_op *ops,
                                   size_t count, server_tag *tag) {
  grpc_call_error error =
      reshard__start_batch(call->server, call->call, ops, count, tag);
  if (error == GRPC_CALL_OK) {
    call->pending++;
  } else {
    reshard_log_line line;
    if (reshard_log_begin(&line, RESHARD_LOG_ERROR, "grpc_call_start_batch")) {
      reshard_log_str(&line, "method", call->method_path);
      reshard_log_str(&line, "error", grpc_call_error_to_string(error));
      reshard_log_end(&line);
    }
  }
  return error;
}

/* ---- Admission: room for the largest request, then the request ---- */

/* What a call is charged before its request is read: room for the
 * largest request. gRPC reads no more of a stream than its initial
 * flow-control window until the request is asked for (BDP probing is
 * off), so calls waiting for room hold almost nothing. */
static uint64_t admission_bytes(const reshard_server *server) {
  return request_bytes(server->options.max_request_bytes);
}

/* What a call holds for a request of `length` bytes: gRPC's buffer, our
 * copy, and its decoded form, which is rarely more than twice the wire
 * size (what it really takes is charged when the call finishes). */
static uint64_t request_bytes(uint64_t length) {
  return 4 * length + CALL_BASE_BYTES;
}

/* Charges `bytes` when they fit now (true); else the call joins the line
 * for room (on_admitted runs later) and watches its client's cancel, so
 * that a client gone meanwhile gives its place up at once
 * (reshard__call_on_close). */
static bool acquire_room(reshard_call *call, uint64_t bytes, uint64_t held) {
  if (reshard_inflight_acquire(&call->server->inflight, &call->waiter, bytes,
                               held, on_admitted)) {
    return true;
  }
  reshard_call_watch_cancel(call);
  return false;
}

/* Room came free for a call waiting in line: its admission, or the
 * reservation its handler asked for (reshard_call_reserve). */
static void on_admitted(reshard_inflight_waiter *waiter) {
  reshard_call *call =
      (reshard_call *)((char *)waiter - offsetof(reshard_call, waiter));
  if (call->ready_fn != NULL) {
    reservation_done(call, NULL);
    return;
  }
  admitted(call, waiter->bytes);
  publish_inflight(call->server);
}

/* Admitted with `bytes` charged: read the request, within a bound. */
static void admitted(reshard_call *call, uint64_t bytes) {
  call->charged = bytes;
  call->admitted_ns = uv_hrtime();
  uint64_t read_by = call->admitted_ns + (uint64_t)REQUEST_READ_MS * 1000000;
  if (read_by < call->request_deadline_ns) {
    call->request_deadline_ns = read_by;
  }
  start_recv(call);
}

static void start_recv(reshard_call *call) {
  grpc_op recv_op;
  memset(&recv_op, 0, sizeof recv_op);
  recv_op.op = GRPC_OP_RECV_MESSAGE;
  recv_op.data.recv_message.recv_message = &call->recv_buffer;
  if (start_batch(call, &recv_op, 1, &call->recv_tag) != GRPC_CALL_OK) {
    reshard__call_finish(call, GRPC_STATUS_INTERNAL,
                         "cannot receive the request");
    return;
  }
  call->awaiting_request = true;
}

/* ---- The request and the handler ---- */

void reshard__call_on_recv(reshard_call *call, int success) {
  call->pending--;
  call->awaiting_request = false;
  if (call->finished) {
    /* Ended while waiting (deadline, shutdown): nothing to handle. */
    if (call->recv_buffer != NULL) {
      grpc_byte_buffer_destroy(call->recv_buffer);
      call->recv_buffer = NULL;
    }
    maybe_free(call);
    return;
  }
  if (!success || call->recv_buffer == NULL) {
    if (call->recv_buffer != NULL) {
      grpc_byte_buffer_destroy(call->recv_buffer);
      call->recv_buffer = NULL;
    }
    /* A client that cancels also lands here with success; the close
     * batch tells, and the call is logged CANCELLED then. */
    reshard__call_finish(
        call, success ? GRPC_STATUS_INVALID_ARGUMENT : GRPC_STATUS_CANCELLED,
        success ? "request: the client sent no request message"
                : "the call was cancelled before its request arrived");
    return;
  }
  if (call->recv_buffer->type != GRPC_BB_RAW ||
      call->recv_buffer->data.raw.compression != GRPC_COMPRESS_NONE) {
    /* Inflating would spend memory the request's size does not bound. */
    grpc_byte_buffer_destroy(call->recv_buffer);
    call->recv_buffer = NULL;
    reshard__call_finish(
        call, GRPC_STATUS_UNIMPLEMENTED,
        "request: compressed messages are not accepted; send them "
        "uncompressed (grpc-encoding identity)");
    return;
  }
  size_t length = grpc_byte_buffer_length(call->recv_buffer);
  if (length > call->server->options.max_request_bytes) {
    grpc_byte_buffer_destroy(call->recv_buffer);
    call->recv_buffer = NULL;
    char message[160];
    snprintf(message, sizeof message,
             "request: %zu bytes exceed the server's limit of %llu bytes "
             "(--max-request-bytes)",
             length,
             (unsigned long long)call->server->options.max_request_bytes);
    reshard__call_finish(call, GRPC_STATUS_RESOURCE_EXHAUSTED, message);
    return;
  }
  if (holds_drain(call)) {
    call->holds_drain = true;
    call->server->in_flight++;
  }
  if (call->charged != 0) {
    /* Now the size is known: give the rest back to calls waiting. */
    uint64_t keep = request_bytes(length);
    if (keep < call->charged) {
      uint64_t excess = call->charged - keep;
      call->charged = keep;
      reshard_inflight_release(&call->server->inflight, excess);
      publish_inflight(call->server);
    }
  }
  start_handler(call);
}

/* Every call but a stream: its method does not change, so it is counted
 * in and out the same. */
static bool is_unary(const reshard_call *call) {
  return call->method == NULL ||
         !(call->method->flags & RESHARD_METHOD_STREAMING);
}

bool reshard_call_alone(const reshard_call *call) {
  return call->server->unary_calls <= 1;
}

/* Calls the drain waits for: Planner work, not health checks or streams
 * (a busy prober must not hold the daemon up). */
static bool holds_drain(const reshard_call *call) {
  return call->method != NULL &&
         !(call->method->flags &
           (RESHARD_METHOD_STREAMING | RESHARD_METHOD_WHILE_DRAINING));
}

/* Copies the admitted request into the arena and runs the handler. */
static void start_handler(reshard_call *call) {
  size_t length = grpc_byte_buffer_length(call->recv_buffer);
  uint8_t *payload = reshard_arena_alloc(&call->arena, length, 16);
  grpc_byte_buffer_reader reader;
  bool ok = payload != NULL &&
            grpc_byte_buffer_reader_init(&reader, call->recv_buffer) != 0;
  if (ok) {
    size_t at = 0;
    grpc_slice slice;
    while (grpc_byte_buffer_reader_next(&reader, &slice) != 0) {
      size_t n = GRPC_SLICE_LENGTH(slice);
      if (n > length - at) {
        n = length - at; /* cannot happen: length counted these slices */
      }
      memcpy(payload + at, GRPC_SLICE_START_PTR(slice), n);
      at += n;
      grpc_slice_unref(slice);
    }
    grpc_byte_buffer_reader_destroy(&reader);
    length = at;
  }
  grpc_byte_buffer_destroy(call->recv_buffer);
  call->recv_buffer = NULL;
  if (!ok) {
    reshard__call_finish(call, GRPC_STATUS_RESOURCE_EXHAUSTED,
                         "request: out of memory reading the request");
    return;
  }
  call->payload = payload;
  call->payload_length = length;
  if (reshard_call_expired(call)) {
    reshard__call_finish(call, GRPC_STATUS_DEADLINE_EXCEEDED,
                         "deadline exceeded before the request was handled");
    return;
  }
  call->method->fn(call, call->method->data);
}

/* ---- More room for the handler (reshard_call_reserve) ---- */

void reshard_call_reserve(reshard_call *call, uint64_t bytes,
                          reshard_call_ready_fn ready, void *data) {
  assert(call->ready_fn == NULL && !call->waiter.queued);
  call->ready_fn = ready;
  call->ready_data = data;
  if (call->charged == 0) {
    /* Exempt from the budget (health): never held back. */
    call->waiter.bytes = 0;
    reservation_done(call, NULL);
    return;
  }
  /* More than the whole budget is never asked: such a call runs alone. */
  uint64_t limit = call->server->inflight.limit;
  if (limit != 0 && bytes > limit) {
    bytes = limit;
  }
  if (acquire_room(call, bytes, call->charged)) {
    reservation_done(call, NULL);
    return;
  }
  publish_inflight(call->server);
}

/* Ends a pending reservation: charges it (err NULL) or reports why not. */
static void reservation_done(reshard_call *call, const reshard_error *err) {
  reshard_call_ready_fn ready = call->ready_fn;
  call->ready_fn = NULL;
  if (err == NULL) {
    call->charged += call->waiter.bytes;
  }
  publish_inflight(call->server);
  ready(call, err, call->ready_data);
}

/* Ends a call waiting for room with `code`: through its handler when the
 * handler asked (it owns state to release), else directly. */
void reshard__call_end_waiting(reshard_call *call, grpc_status_code code,
                               const char *message) {
  reshard_inflight_cancel(&call->server->inflight, &call->waiter);
  publish_inflight(call->server);
  if (call->ready_fn != NULL) {
    reshard_error err;
    reshard_error_set(&err,
                      code == GRPC_STATUS_UNAVAILABLE
                          ? RESHARD_UNAVAILABLE
                          : RESHARD_RESOURCE_EXHAUSTED,
                      "%s", message);
    reservation_done(call, &err);
    return;
  }
  reshard__call_finish(call, code, message);
}

static void publish_inflight(reshard_server *server) {
  reshard_metrics_set_inflight(server->options.metrics, server->inflight.used,
                               server->inflight.waiting);
}

/* ---- Finishing: the status and the response ---- */

void reshard_call_send_packed(reshard_call *call) {
  reshard__call_finish(call, GRPC_STATUS_OK, NULL);
}

void reshard_call_reply(reshard_call *call, const ProtobufCMessage *message) {
  if (reshard_call_pack(call, message) != RESHARD_OK) {
    reshard__call_finish(call, GRPC_STATUS_RESOURCE_EXHAUSTED,
                         "response: out of memory packing the response");
    return;
  }
  reshard__call_finish(call, GRPC_STATUS_OK, NULL);
}

void reshard_call_fail(reshard_call *call, const reshard_error *err) {
  reshard__call_finish(call, grpc_code(err->code), err->message);
}

void reshard_call_fail_code(reshard_call *call, reshard_status code,
                            const char *message) {
  reshard__call_finish(call, grpc_code(code), message);
}

static grpc_status_code grpc_code(reshard_status status) {
  switch (status) {
  case RESHARD_OK:
    return GRPC_STATUS_OK;
  case RESHARD_INVALID_ARGUMENT:
    return GRPC_STATUS_INVALID_ARGUMENT;
  case RESHARD_NOT_FOUND:
    return GRPC_STATUS_NOT_FOUND;
  case RESHARD_FAILED_PRECONDITION:
    return GRPC_STATUS_FAILED_PRECONDITION;
  case RESHARD_RESOURCE_EXHAUSTED:
    return GRPC_STATUS_RESOURCE_EXHAUSTED;
  case RESHARD_UNAVAILABLE:
    return GRPC_STATUS_UNAVAILABLE;
  case RESHARD_DEADLINE_EXCEEDED:
    return GRPC_STATUS_DEADLINE_EXCEEDED;
  case RESHARD_INTERNAL:
    return GRPC_STATUS_INTERNAL;
  }
  return GRPC_STATUS_UNKNOWN;
}

void reshard__call_finish(reshard_call *call, grpc_status_code code,
                          const char *message) {
  assert(!call->finished && "a call is finished exactly once");
  call->finished = true;
  call->finished_ns = uv_hrtime();
  call->code = code;
  call->message = message ? reshard_arena_strdup(&call->arena, message) : NULL;
  if (call->message == NULL && message != NULL) {
    call->message = "out of memory";
  }
  if (code != GRPC_STATUS_OK && call->send_buffer != NULL) {
    grpc_byte_buffer_destroy(call->send_buffer);
    call->send_buffer = NULL;
  }
  if (call->charged != 0) {
    /* Until it is freed the call holds its arena and its response. */
    uint64_t holds = call->arena.total_bytes;
    if (call->send_buffer != NULL) {
      holds += grpc_byte_buffer_length(call->send_buffer);
    }
    if (holds > call->charged) {
      reshard_inflight_charge(&call->server->inflight, holds - call->charged);
      call->charged = holds;
      publish_inflight(call->server);
    }
  }
  if (call->write_pending) {
    return; /* sent when the write completes */
  }
  send_status(call);
  maybe_free(call);
}

/* Starts the final batch: initial metadata when not yet sent, the packed
 * response when there is one, the status, and the close when nothing
 * waited for it (watch_close). */
static void send_status(reshard_call *call) {
  grpc_op ops[4];
  size_t count = 0;
  memset(ops, 0, sizeof ops);
  if (!call->close_watched) {
    ops[count].op = GRPC_OP_RECV_CLOSE_ON_SERVER;
    ops[count].data.recv_close_on_server.cancelled = &call->close_cancelled;
    count++;
  }
  if (!call->metadata_sent) {
    ops[count].op = GRPC_OP_SEND_INITIAL_METADATA;
    count++;
    call->metadata_sent = true;
  }
  if (call->send_buffer != NULL) {
    ops[count].op = GRPC_OP_SEND_MESSAGE;
    ops[count].data.send_message.send_message = call->send_buffer;
    count++;
  }
  grpc_slice details =
      grpc_slice_from_copied_string(call->message != NULL ? call->message : "");
  ops[count].op = GRPC_OP_SEND_STATUS_FROM_SERVER;
  ops[count].data.send_status_from_server.status = call->code;
  ops[count].data.send_status_from_server.status_details = &details;
  count++;
  call->status_sent = true;
  grpc_call_error error = start_batch(call, ops, count, &call->send_tag);
  call->sending = error == GRPC_CALL_OK;
  /* The details are not retained past grpc_call_start_batch. */
  grpc_slice_unref(details);
  if (error != GRPC_CALL_OK && call->send_buffer != NULL) {
    grpc_byte_buffer_destroy(call->send_buffer);
    call->send_buffer = NULL;
  }
}

void reshard__call_on_send(reshard_call *call) {
  call->pending--;
  call->sending = false;
  if (call->send_buffer != NULL) {
    grpc_byte_buffer_destroy(call->send_buffer);
    call->send_buffer = NULL;
  }
  if (!call->close_watched) {
    on_closed(call); /* the close was part of this batch */
  }
  maybe_free(call);
}

/* ---- Streaming calls ---- */

bool reshard_call_writable(const reshard_call *call) {
  /* A finished stream still takes writes until its status goes out, so the
   * last update (NOT_SERVING on drain) is not lost behind the status. */
  return !call->status_sent && !call->write_pending;
}

bool reshard_call_write(reshard_call *call, const ProtobufCMessage *message,
                        reshard_write_fn fn, void *data) {
  if (!reshard_call_writable(call)) {
    return false;
  }
  size_t size = protobuf_c_message_get_packed_size(message);
  grpc_slice slice = grpc_slice_malloc(size);
  protobuf_c_message_pack(message, GRPC_SLICE_START_PTR(slice));
  call->write_buffer = grpc_raw_byte_buffer_create(&slice, 1);
  grpc_slice_unref(slice);
  grpc_op ops[2];
  size_t count = 0;
  memset(ops, 0, sizeof ops);
  if (!call->metadata_sent) {
    ops[count].op = GRPC_OP_SEND_INITIAL_METADATA;
    count++;
  }
  ops[count].op = GRPC_OP_SEND_MESSAGE;
  ops[count].data.send_message.send_message = call->write_buffer;
  count++;
  if (start_batch(call, ops, count, &call->write_tag) != GRPC_CALL_OK) {
    grpc_byte_buffer_destroy(call->write_buffer);
    call->write_buffer = NULL;
    return false;
  }
  call->metadata_sent = true;
  call->write_pending = true;
  call->write_fn = fn;
  call->write_data = data;
  return true;
}

void reshard__call_on_write(reshard_call *call, int success) {
  call->pending--;
  call->write_pending = false;
  grpc_byte_buffer_destroy(call->write_buffer);
  call->write_buffer = NULL;
  if (call->write_fn != NULL) {
    reshard_write_fn fn = call->write_fn;
    call->write_fn = NULL;
    fn(call, success != 0, call->write_data);
  }
  if (call->finished && !call->status_sent && !call->write_pending) {
    send_status(call);
  }
  maybe_free(call);
}

void reshard_call_on_done(reshard_call *call, reshard_call_done_fn fn,
                          void *data) {
  call->done_fn = fn;
  call->done_data = data;
}

/* ---- The close: cancellation ---- */

/* Starts the call's RECV_CLOSE_ON_SERVER batch on its own, once, so that
 * the client's cancel reaches the call at once. A unary call that waits in
 * no line sends it with its final batch instead (send_status): a close of
 * its own would complete beside that batch, and gRPC's thread-local slot
 * keeps only one of the two for the loop (queue.c); the other would cross
 * through call_cq and the completion thread. False when gRPC refused the
 * batch; the final batch then carries the close. */
static bool watch_close(reshard_call *call) {
  if (call->close_watched) {
    return true;
  }
  grpc_op close_op;
  memset(&close_op, 0, sizeof close_op);
  close_op.op = GRPC_OP_RECV_CLOSE_ON_SERVER;
  close_op.data.recv_close_on_server.cancelled = &call->close_cancelled;
  call->close_watched =
      start_batch(call, &close_op, 1, &call->close_tag) == GRPC_CALL_OK;
  return call->close_watched;
}

void reshard_call_watch_cancel(reshard_call *call) {
  (void)watch_close(call);
}

/* What the close tells, from its own batch or the final one. */
static void on_closed(reshard_call *call) {
  if (call->close_cancelled) {
    atomic_store_explicit(&call->cancelled, true, memory_order_relaxed);
    /* gRPC still knows the peer here; by the call's end it forgot it. */
    if (call->payload == NULL && !call->send_cut) {
      reshard__note_reset(call->server, call);
    }
  }
}

void reshard__call_on_close(reshard_call *call) {
  call->pending--;
  on_closed(call);
  if (call->waiter.queued && !call->finished) {
    /* Gone while waiting for room: give its place up now. */
    reshard__call_end_waiting(call, GRPC_STATUS_CANCELLED,
                              "the client went away while waiting");
    return;
  }
  if (call->method != NULL &&
      (call->method->flags & RESHARD_METHOD_STREAMING) && !call->finished) {
    /* The client went away from a stream: end our side too. */
    reshard__call_finish(call, GRPC_STATUS_CANCELLED,
                         "the client cancelled the stream");
    return;
  }
  maybe_free(call);
}

/* ---- Freeing ---- */

static void maybe_free(reshard_call *call) {
  if (call->status_sent && call->pending == 0) {
    call_free(call);
  }
}

static void call_free(reshard_call *call) {
  reshard_server *server = call->server;
  if (call->done_fn != NULL) {
    call->done_fn(call, call->done_data);
  }
  log_call(call);
  grpc_status_code code = final_code(call);
  reshard_metrics_call_finished(server->options.metrics, call->metric,
                                (unsigned)code, reshard_call_elapsed_us(call));
  server->stats.calls_finished++;
  if ((unsigned)code < 17) {
    server->stats.calls_by_code[code]++;
  }
  reshard_inflight_cancel(&server->inflight, &call->waiter);
  release_charge(call);
  if (call->prev) {
    call->prev->next = call->next;
  } else {
    server->calls = call->next;
  }
  if (call->next) {
    call->next->prev = call->prev;
  }
  server->unary_calls -= is_unary(call);
  if (call->holds_drain) {
    server->in_flight--;
  }
  grpc_call_unref(call->call);
  reshard_arena_destroy(&call->arena);
  free(call);

  if (server->phase == PHASE_DRAINING && server->in_flight == 0) {
    reshard__begin_shutdown(server);
  }
  reshard__maybe_finish_shutdown(server);
}

static void release_charge(reshard_call *call) {
  if (call->charged != 0) {
    reshard_inflight_release(&call->server->inflight, call->charged);
    call->charged = 0;
  }
  publish_inflight(call->server);
}

static void log_call(const reshard_call *call) {
  /* Successes are routine; refusals are worth a line; our own failures
   * are errors. */
  grpc_status_code code = final_code(call);
  reshard_log_level level = RESHARD_LOG_DEBUG;
  if (code == GRPC_STATUS_INTERNAL || code == GRPC_STATUS_UNKNOWN) {
    level = RESHARD_LOG_ERROR;
  } else if (code != GRPC_STATUS_OK && code != GRPC_STATUS_CANCELLED) {
    level = RESHARD_LOG_INFO;
  }
  reshard_log_line line;
  if (reshard_log_begin(&line, level, "rpc")) {
    reshard_log_str(&line, "method", call->method_path);
    reshard_log_str(&line, "code", reshard_grpc_code_name((int)code));
    reshard_log_u64(&line, "duration_us", reshard_call_elapsed_us(call));
    if (code == GRPC_STATUS_CANCELLED && call->code != code) {
      reshard_log_str(&line, "error", "the client cancelled the call");
    } else if (call->message != NULL && call->message[0] != '\0') {
      reshard_log_str(&line, "error", call->message);
    }
    reshard_log_end(&line);
  }
}

/* What the call ended as: a call the client cancelled (or whose
 * connection broke) before our status went out is CANCELLED, whatever
 * status we had chosen, which the client never saw. */
static grpc_status_code final_code(const reshard_call *call) {
  return call->close_cancelled && !call->send_cut ? GRPC_STATUS_CANCELLED
                                                  : call->code;
}

/* ---- Accessors ---- */

const char *reshard_call_method(const reshard_call *call) {
  return call->method_path;
}

reshard_arena *reshard_call_arena(reshard_call *call) {
  return &call->arena;
}

const uint8_t *reshard_call_payload(const reshard_call *call, size_t *length) {
  *length = call->payload_length;
  return call->payload;
}

bool reshard_call_expired(const reshard_call *call) {
  return gpr_time_cmp(gpr_now(GPR_CLOCK_MONOTONIC), call->deadline) >= 0;
}

bool reshard_call_cancelled(const reshard_call *call) {
  return atomic_load_explicit(&call->cancelled, memory_order_relaxed);
}

uint64_t reshard_call_elapsed_us(const reshard_call *call) {
  return (uv_hrtime() - call->start_ns) / 1000;
}
