#define _GNU_SOURCE /* SCHED_BATCH */
#include "server/server.h"

#include <assert.h>
#include <grpc/byte_buffer.h>
#include <grpc/byte_buffer_reader.h>
#include <grpc/grpc.h>
#include <grpc/grpc_security.h>
#include <grpc/slice.h>
#include <grpc/support/alloc.h>
#include <grpc/support/time.h>
#include <malloc.h>
#include <pthread.h>
#include <sched.h>
#include <stdatomic.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "memory/chunk_pool.h"
#include "memory/inflight.h"
#include "observe/log.h"
#include "server/guard/read_guard.h"
#include "server/guard/reset_guard.h"

enum {
  MAX_METHODS = 16,
  DEFAULT_REQUEST_SLOTS = 32,
  DEFAULT_MAX_CONCURRENT_STREAMS = 100,
  DEFAULT_KEEPALIVE_TIME_MS = 60 * 1000,
  DEFAULT_KEEPALIVE_TIMEOUT_MS = 20 * 1000,
  DEFAULT_MAX_CONNECTION_IDLE_MS = 5 * 60 * 1000,
  /* How often deadlines of calls gRPC cannot see are checked: calls
   * waiting for their request under the default deadline, and calls
   * waiting for in-flight room. */
  SWEEP_MS = 100,
  /* How often the read guard looks at the queue threads: threads held by
   * a flood are found after two looks (guard/read_guard.h), while every look
   * costs two clock reads. */
  READ_GUARD_LOOK_MS = 25,
  /* After a guard closed a flood's connection, and no other for this
   * long, the memory its calls held is given back to the system; again
   * as often as this while calls still arrive. */
  FLOOD_TRIM_DELAY_MS = 2000,
  FLOOD_TRIMS_MAX = 5,
  /* Charged to every admitted call besides its request's bytes (see
   * request_bytes): the first arena chunks. */
  CALL_BASE_BYTES = 64 * 1024,
  /* An admitted call holds room for the largest request; one whose
   * request has not arrived this long after admission gives it back
   * (DEADLINE_EXCEEDED), so silent streams cannot hold the room. */
  REQUEST_READ_MS = 10 * 1000,
  /* ...and only this long while other calls wait for the room: a client
   * sends its request with its headers, so a silent stream is not one
   * worth keeping others waiting for. */
  REQUEST_READ_CONTENDED_MS = 1000,
  /* A finished call whose client has not taken its response this long
   * while other calls wait for room is cancelled: a client that never
   * opens its flow-control window must not hold the room for good. Ten
   * seconds carry S2's 3.9 MB response at 400 KB/s. */
  RESPONSE_SEND_CONTENDED_MS = 10 * 1000,
  /* Once no Planner call is in flight, calls still sending their status
   * get this long before the rest are cancelled; connections that ignore
   * GOAWAY do not hold the exit for the whole drain timeout. */
  SHUTDOWN_GRACE_MS = 1000,
  /* Threads waiting on the completion queue. gRPC reads connections on
   * the threads that wait on it, and a thread reading a connection whose
   * bytes keep coming does not return until they stop: with one, a client
   * flooding a connection held back every other call's events, health
   * checks included (docs/security.md, rapid reset). */
  QUEUE_THREADS = 2,
  /* Calls a connection may have reset before sending their requests, in
   * one second, before the daemon closes it (guard/reset_guard.h). */
  RESETS_PER_SECOND_MAX = 1000,
};

/* Free arena blocks kept for the next calls: a few dozen calls' worth for
 * small plans, small next to the cache budget and to what 64 calls in
 * flight hold. Measured in docs/performance.md. */
#define CALL_POOL_RETAIN_BYTES ((size_t)16 << 20)

/* Every completion-queue tag is one of these, embedded in its owner. The
 * `next` link lets the queue thread hand tags to the loop without
 * allocating: a tag is pending at most once at a time. */
typedef enum tag_kind {
  TAG_REQUEST,    /* a request_call slot matched (or failed) */
  TAG_RECV,       /* a call's RECV_MESSAGE batch */
  TAG_CLOSE,      /* a call's RECV_CLOSE_ON_SERVER batch */
  TAG_SEND,       /* a call's final batch (status, maybe a message) */
  TAG_WRITE,      /* a streaming call's SEND_MESSAGE batch */
  TAG_SHUTDOWN,   /* grpc_server_shutdown_and_notify completed */
  TAG_QUEUE_DONE, /* the queue thread saw GRPC_QUEUE_SHUTDOWN and exits */
} tag_kind;

typedef struct server_tag {
  struct server_tag *next;
  tag_kind kind;
  int success;
  void *owner;
} server_tag;

typedef struct request_slot {
  server_tag tag;
  grpc_call *call;
  grpc_call_details details;
  grpc_metadata_array metadata;
} request_slot;

typedef struct method_entry {
  const char *path;
  unsigned flags;
  reshard_method_fn fn;
  void *data;
  reshard_metrics_method metric;
} method_entry;

typedef enum server_phase {
  PHASE_NEW,      /* created, not started */
  PHASE_SERVING,  /* started */
  PHASE_DRAINING, /* refusing new calls, waiting for in-flight ones */
  PHASE_SHUTDOWN, /* grpc_server_shutdown_and_notify called */
  PHASE_DESTROYED /* server destroyed, queue shutting down */
} server_phase;

struct reshard_call {
  reshard_server *server;
  grpc_call *call;
  const method_entry *method; /* NULL for an unknown method */
  reshard_metrics_method metric;
  char *method_path; /* in the arena */
  gpr_timespec deadline;
  uint64_t start_ns;
  reshard_arena arena;

  uint64_t request_deadline_ns; /* uv_hrtime: the request must arrive by */
  uint64_t admitted_ns;         /* uv_hrtime of admission; 0: not admitted */
  bool awaiting_request;        /* the RECV_MESSAGE batch is pending */
  bool holds_drain;             /* counted in server->in_flight */
  reshard_inflight_waiter waiter;
  uint64_t charged; /* bytes charged against --max-inflight-bytes */
  reshard_call_ready_fn ready_fn; /* set while a reservation is pending */
  void *ready_data;

  grpc_byte_buffer *recv_buffer;
  grpc_byte_buffer *send_buffer;  /* the response, owned until TAG_SEND */
  grpc_byte_buffer *write_buffer; /* a streamed message, until TAG_WRITE */
  const uint8_t *payload;
  size_t payload_length;
  int close_cancelled;
  atomic_bool cancelled;

  server_tag recv_tag, close_tag, send_tag, write_tag;
  unsigned pending;     /* batches started and not yet completed */
  bool finished;        /* the handler finished (status chosen) */
  bool status_sent;     /* the status batch was started */
  bool sending;         /* ...and has not completed */
  bool send_cut;        /* cancelled by us before its response went out */
  uint64_t finished_ns; /* uv_hrtime when the handler finished */
  bool metadata_sent;   /* initial metadata went out */
  bool write_pending;
  grpc_status_code code; /* the status chosen */
  const char *message;   /* its message, in the arena */

  reshard_write_fn write_fn;
  void *write_data;
  reshard_call_done_fn done_fn;
  void *done_data;

  struct reshard_call *prev, *next; /* the server's live calls */
};

/* A queue thread, and what the loop sees of it (guard/read_guard.h). */
typedef struct queue_thread_state {
  reshard_server *server;
  uv_thread_t thread;
  _Alignas(64) atomic_uint_fast64_t returned; /* completions returned */
  clockid_t clock;                            /* its CPU time */
  bool has_clock;
} queue_thread_state;

struct reshard_server {
  uv_loop_t *loop;
  reshard_server_options options;
  grpc_server *grpc;
  grpc_completion_queue *cq;
  server_phase phase;

  method_entry methods[MAX_METHODS];
  size_t method_count;

  request_slot *slots;
  unsigned slot_count;
  unsigned slots_pending;

  /* The queue threads and their hand-off list. */
  queue_thread_state queue[QUEUE_THREADS];
  atomic_uint threads_running; /* not yet past their last event */
  uv_mutex_t lock;
  server_tag *events_head, *events_tail;
  uv_async_t async;
  uv_timer_t timer; /* drain timeout, then the shutdown grace period */
  uv_timer_t sweep; /* deadlines gRPC does not know about */
  uv_timer_t look;  /* the read guard's */
  uv_timer_t trim;  /* gives memory back after a flood */
  uint64_t trim_calls_started; /* calls started when it was set */
  unsigned trims_again;        /* trims since the last closing */
  bool handles_open;
  unsigned handles_closing;

  server_tag shutdown_tag;
  server_tag queue_done_tag;
  bool shutdown_notified;
  uint64_t drain_deadline_ns;

  reshard_chunk_pool *pool; /* behind every call's arena */
  reshard_call *calls;      /* every live call */
  reshard_inflight inflight;
  uint64_t in_flight; /* live calls that hold up the drain */

  reshard_drain_fn drain_fn;
  void *drain_data;
  void (*closed_fn)(void *data);
  void *closed_data;

  reshard_server_stats stats;
  reshard_reset_guard reset_guard;
  reshard_read_guard read_guard;
};

static void begin_shutdown(reshard_server *server);
static void maybe_finish_shutdown(reshard_server *server);
static void arm_slot(reshard_server *server, request_slot *slot);

/* ---- The queue thread ---- */

static void push_event(reshard_server *server, server_tag *tag) {
  tag->next = NULL;
  uv_mutex_lock(&server->lock);
  bool was_empty = server->events_head == NULL;
  if (was_empty) {
    server->events_head = tag;
  } else {
    server->events_tail->next = tag;
  }
  server->events_tail = tag;
  uv_mutex_unlock(&server->lock);
  if (was_empty) {
    uv_async_send(&server->async);
  }
}

static void queue_thread(void *arg) {
  queue_thread_state *self = arg;
  reshard_server *server = self->server;
  /* gRPC wakes this thread whenever the loop starts a batch; as a normal
   * thread it preempted the loop on each of those wake-ups, about once per
   * PlanLoad. A batch thread waits for a free core or the end of the
   * loop's slice instead (docs/daemon.md). Best effort. */
  struct sched_param param = {0};
  (void)sched_setscheduler(0, SCHED_BATCH, &param);
  for (;;) {
    grpc_event event = grpc_completion_queue_next(
        server->cq, gpr_inf_future(GPR_CLOCK_REALTIME), NULL);
    atomic_fetch_add_explicit(&self->returned, 1, memory_order_relaxed);
    if (event.type == GRPC_QUEUE_SHUTDOWN) {
      break;
    }
    if (event.type == GRPC_OP_COMPLETE) {
      server_tag *tag = event.tag;
      tag->success = event.success;
      push_event(server, tag);
    }
  }
  if (atomic_fetch_sub(&server->threads_running, 1) == 1) {
    push_event(server, &server->queue_done_tag);
  }
}

/* ---- Calls ---- */

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

static grpc_call_error start_batch(reshard_call *call, const grpc_op *ops,
                                   size_t count, server_tag *tag) {
  grpc_call_error error =
      grpc_call_start_batch(call->call, ops, count, tag, NULL);
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

/* What the call ended as: a call the client cancelled (or whose
 * connection broke) before our status went out is CANCELLED, whatever
 * status we had chosen, which the client never saw. */
static grpc_status_code final_code(const reshard_call *call) {
  return call->close_cancelled && !call->send_cut ? GRPC_STATUS_CANCELLED
                                                  : call->code;
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

/* Calls the drain waits for: Planner work, not health checks or streams
 * (a busy prober must not hold the daemon up). */
static bool holds_drain(const reshard_call *call) {
  return call->method != NULL &&
         !(call->method->flags &
           (RESHARD_METHOD_STREAMING | RESHARD_METHOD_WHILE_DRAINING));
}

static void publish_inflight(reshard_server *server) {
  reshard_metrics_set_inflight(server->options.metrics, server->inflight.used,
                               server->inflight.waiting);
}

static void release_charge(reshard_call *call) {
  if (call->charged != 0) {
    reshard_inflight_release(&call->server->inflight, call->charged);
    call->charged = 0;
  }
  publish_inflight(call->server);
}

/* A flood's calls ended by the thousands: glibc keeps their freed memory
 * in its arenas (gigabytes after one, docs/security.md) unless asked.
 * Asking took 137 ms after 1.5 GB: on a thread of its own, not the loop. */
static void *trim_memory(void *unused) {
  (void)unused;
  malloc_trim(0);
  return NULL;
}

static void on_trim(uv_timer_t *timer) {
  reshard_server *server = timer->data;
  pthread_t thread;
  if (pthread_create(&thread, NULL, trim_memory, NULL) == 0) {
    pthread_detach(thread);
  }
  /* Calls still arriving may be the flood's backlog, whose memory is
   * freed after this trim: while they keep arriving, trim again 2 s
   * later, a few times at most. */
  if (server->stats.calls_started != server->trim_calls_started &&
      ++server->trims_again < FLOOD_TRIMS_MAX) {
    server->trim_calls_started = server->stats.calls_started;
    uv_timer_start(&server->trim, on_trim, FLOOD_TRIM_DELAY_MS, 0);
  }
}

static void after_flood_closed(reshard_server *server) {
  server->trim_calls_started = server->stats.calls_started;
  server->trims_again = 0;
  uv_timer_start(&server->trim, on_trim, FLOOD_TRIM_DELAY_MS, 0);
}

/* The call's client reset it before its request was read: count it
 * against its connection (guard/reset_guard.h). */
static void note_reset(reshard_server *server, reshard_call *call) {
  char *peer = grpc_call_get_peer(call->call);
  unsigned closed =
      reshard_reset_guard_note(&server->reset_guard, peer, uv_hrtime());
  if (closed > 0) {
    after_flood_closed(server);
    reshard_metrics_reset_close(server->options.metrics, closed);
    reshard_log_line line;
    if (reshard_log_begin(&line, RESHARD_LOG_WARN,
                          "closed a connection that reset its streams before "
                          "sending their requests (HTTP/2 rapid reset)")) {
      reshard_log_str(&line, "peer", peer);
      reshard_log_u64(&line, "limit_per_second", RESETS_PER_SECOND_MAX);
      reshard_log_u64(&line, "closed_total", server->reset_guard.closed);
      reshard_log_end(&line);
    }
  }
  gpr_free(peer);
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
  if (call->holds_drain) {
    server->in_flight--;
  }
  grpc_call_unref(call->call);
  reshard_arena_destroy(&call->arena);
  free(call);

  if (server->phase == PHASE_DRAINING && server->in_flight == 0) {
    begin_shutdown(server);
  }
  maybe_finish_shutdown(server);
}

static void maybe_free(reshard_call *call) {
  if (call->status_sent && call->pending == 0) {
    call_free(call);
  }
}

/* Starts the final batch: initial metadata when not yet sent, the packed
 * response when there is one, and the status. */
static void send_status(reshard_call *call) {
  grpc_op ops[3];
  size_t count = 0;
  memset(ops, 0, sizeof ops);
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

static void finish(reshard_call *call, grpc_status_code code,
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

static size_t pack_message(void *context, uint8_t *out) {
  return protobuf_c_message_pack(context, out);
}

reshard_status reshard_call_pack(reshard_call *call,
                                 const ProtobufCMessage *message) {
  return reshard_call_pack_encoded(call,
                                   protobuf_c_message_get_packed_size(message),
                                   pack_message, (void *)message);
}

/* A response buffer from the call pool: gRPC frees the slice on whichever
 * thread sends it last, maybe after the server is gone, so the buffer
 * keeps the pool alive. Reusing these blocks spares a mid-size response
 * the page faults of fresh memory (S1x8's 90 KB response cost the
 * planner's thread ~4 % of the daemon's CPU in faults). Larger responses
 * are malloc'd as before: S5's 278 KB ones, pooled, crowded the arenas'
 * blocks out of the pool's 16 MiB and resident memory grew by 19.5 MiB
 * under load (scripts/load.py --scenario S5 fails past 16). */
enum { POOLED_RESPONSE_MAX_BYTES = 128 * 1024 };
typedef struct pooled_response {
  reshard_chunk_pool *pool;
  size_t capacity;
  max_align_t align; /* the bytes start after this header, aligned */
} pooled_response;

static void give_response(void *block) {
  pooled_response *header = block;
  reshard_chunk_pool *pool = header->pool;
  reshard_chunk_pool_give(pool, block, header->capacity);
  reshard_chunk_pool_free(pool);
}

static bool pooled_slice(reshard_chunk_pool *pool, size_t size,
                         grpc_slice *out) {
  size_t capacity;
  size_t offset = offsetof(pooled_response, align);
  if (size > SIZE_MAX - offset) {
    return false;
  }
  pooled_response *header =
      reshard_chunk_pool_take(pool, offset + size, &capacity);
  if (header == NULL) {
    return false;
  }
  header->pool = pool;
  header->capacity = capacity;
  reshard_chunk_pool_retain(pool);
  *out = grpc_slice_new_with_user_data((uint8_t *)header + offset, size,
                                       give_response, header);
  return true;
}

/* The packed response replaces any packed before; NULL is out of
 * memory. */
static reshard_status set_send_buffer(reshard_call *call,
                                      grpc_byte_buffer *buffer) {
  if (buffer == NULL) {
    return RESHARD_RESOURCE_EXHAUSTED;
  }
  if (call->send_buffer != NULL) {
    grpc_byte_buffer_destroy(call->send_buffer);
  }
  call->send_buffer = buffer;
  return RESHARD_OK;
}

reshard_status reshard_call_pack_encoded(reshard_call *call, size_t size,
                                         size_t (*write)(void *context,
                                                         uint8_t *out),
                                         void *context) {
  grpc_slice slice;
  if (size > POOLED_RESPONSE_MAX_BYTES) {
    slice = grpc_slice_malloc(size);
  } else if (!pooled_slice(call->server->pool, size, &slice)) {
    return RESHARD_RESOURCE_EXHAUSTED;
  }
  size_t written = write(context, GRPC_SLICE_START_PTR(slice));
  assert(written == size);
  (void)written;
  grpc_byte_buffer *buffer = grpc_raw_byte_buffer_create(&slice, 1);
  grpc_slice_unref(slice);
  return set_send_buffer(call, buffer);
}

reshard_response_memory *reshard_call_response_memory(reshard_call *call) {
  return reshard_response_memory_create(call->server->pool);
}

reshard_status reshard_call_pack_pieces(reshard_call *call,
                                        reshard_response_memory *memory,
                                        const reshard_response_piece *pieces,
                                        size_t count) {
  grpc_slice *slices = RESHARD_ARENA_ARRAY(&call->arena, grpc_slice, count);
  if (slices == NULL) {
    return RESHARD_RESOURCE_EXHAUSTED;
  }
  for (size_t i = 0; i < count; i++) {
    /* Bytes that fit inside a slice itself are copied there: no
     * reference to count, nothing for gRPC to free. */
    slices[i] = pieces[i].length <= GRPC_SLICE_INLINED_SIZE
                    ? grpc_slice_from_copied_buffer(
                          (const char *)pieces[i].bytes, pieces[i].length)
                    : reshard_response_memory_slice(memory, pieces[i].bytes,
                                                    pieces[i].length);
  }
  grpc_byte_buffer *buffer = grpc_raw_byte_buffer_create(slices, count);
  for (size_t i = 0; i < count; i++) {
    grpc_slice_unref(slices[i]);
  }
  return set_send_buffer(call, buffer);
}

void reshard_call_send_packed(reshard_call *call) {
  finish(call, GRPC_STATUS_OK, NULL);
}

void reshard_call_reply(reshard_call *call, const ProtobufCMessage *message) {
  if (reshard_call_pack(call, message) != RESHARD_OK) {
    finish(call, GRPC_STATUS_RESOURCE_EXHAUSTED,
           "response: out of memory packing the response");
    return;
  }
  finish(call, GRPC_STATUS_OK, NULL);
}

void reshard_call_fail(reshard_call *call, const reshard_error *err) {
  finish(call, grpc_code(err->code), err->message);
}

void reshard_call_fail_code(reshard_call *call, reshard_status code,
                            const char *message) {
  finish(call, grpc_code(code), message);
}

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

void reshard_call_on_done(reshard_call *call, reshard_call_done_fn fn,
                          void *data) {
  call->done_fn = fn;
  call->done_data = data;
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
    finish(call, GRPC_STATUS_RESOURCE_EXHAUSTED,
           "request: out of memory reading the request");
    return;
  }
  call->payload = payload;
  call->payload_length = length;
  if (reshard_call_expired(call)) {
    finish(call, GRPC_STATUS_DEADLINE_EXCEEDED,
           "deadline exceeded before the request was handled");
    return;
  }
  call->method->fn(call, call->method->data);
}

static void start_recv(reshard_call *call) {
  grpc_op recv_op;
  memset(&recv_op, 0, sizeof recv_op);
  recv_op.op = GRPC_OP_RECV_MESSAGE;
  recv_op.data.recv_message.recv_message = &call->recv_buffer;
  if (start_batch(call, &recv_op, 1, &call->recv_tag) != GRPC_CALL_OK) {
    finish(call, GRPC_STATUS_INTERNAL, "cannot receive the request");
    return;
  }
  call->awaiting_request = true;
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
  if (reshard_inflight_acquire(&call->server->inflight, &call->waiter, bytes,
                               call->charged, on_admitted)) {
    reservation_done(call, NULL);
    return;
  }
  publish_inflight(call->server);
}

/* Ends a call waiting for room with `code`: through its handler when the
 * handler asked (it owns state to release), else directly. */
static void end_waiting(reshard_call *call, grpc_status_code code,
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
  finish(call, code, message);
}

/* What a call holds for a request of `length` bytes: gRPC's buffer, our
 * copy, and its decoded form, which is rarely more than twice the wire
 * size (what it really takes is charged when the call finishes). */
static uint64_t request_bytes(uint64_t length) {
  return 4 * length + CALL_BASE_BYTES;
}

/* What a call is charged before its request is read: room for the
 * largest request. gRPC reads no more of a stream than its initial
 * flow-control window until the request is asked for (BDP probing is
 * off), so calls waiting for room hold almost nothing. */
static uint64_t admission_bytes(const reshard_server *server) {
  return request_bytes(server->options.max_request_bytes);
}

static void on_recv(reshard_call *call, int success) {
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
    finish(call, success ? GRPC_STATUS_INVALID_ARGUMENT : GRPC_STATUS_CANCELLED,
           success ? "request: the client sent no request message"
                   : "the call was cancelled before its request arrived");
    return;
  }
  if (call->recv_buffer->type != GRPC_BB_RAW ||
      call->recv_buffer->data.raw.compression != GRPC_COMPRESS_NONE) {
    /* Inflating would spend memory the request's size does not bound. */
    grpc_byte_buffer_destroy(call->recv_buffer);
    call->recv_buffer = NULL;
    finish(call, GRPC_STATUS_UNIMPLEMENTED,
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
    finish(call, GRPC_STATUS_RESOURCE_EXHAUSTED, message);
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

static void on_close(reshard_call *call) {
  call->pending--;
  if (call->close_cancelled) {
    atomic_store_explicit(&call->cancelled, true, memory_order_relaxed);
    /* gRPC still knows the peer here; by the call's end it forgot it. */
    if (call->payload == NULL && !call->send_cut) {
      note_reset(call->server, call);
    }
  }
  if (call->waiter.queued && !call->finished) {
    /* Gone while waiting for room: give its place up now. */
    end_waiting(call, GRPC_STATUS_CANCELLED,
                "the client went away while waiting");
    return;
  }
  if (call->method != NULL &&
      (call->method->flags & RESHARD_METHOD_STREAMING) && !call->finished) {
    /* The client went away from a stream: end our side too. */
    finish(call, GRPC_STATUS_CANCELLED, "the client cancelled the stream");
    return;
  }
  maybe_free(call);
}

static void on_write(reshard_call *call, int success) {
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

static void on_send(reshard_call *call) {
  call->pending--;
  call->sending = false;
  if (call->send_buffer != NULL) {
    grpc_byte_buffer_destroy(call->send_buffer);
    call->send_buffer = NULL;
  }
  maybe_free(call);
}

static const method_entry *find_method(const reshard_server *server,
                                       grpc_slice path) {
  size_t length = GRPC_SLICE_LENGTH(path);
  for (size_t i = 0; i < server->method_count; i++) {
    const char *name = server->methods[i].path;
    if (strlen(name) == length &&
        memcmp(name, GRPC_SLICE_START_PTR(path), length) == 0) {
      return &server->methods[i];
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

/* Queue threads held reading a connection that does not stop: shut the
 * busiest connections down (guard/read_guard.h). */
static void check_held_threads(reshard_server *server, uint64_t now) {
  uint64_t returned[QUEUE_THREADS], cpu_ns[QUEUE_THREADS];
  for (unsigned i = 0; i < QUEUE_THREADS; i++) {
    const queue_thread_state *state = &server->queue[i];
    struct timespec cpu = {0, 0};
    if (state->has_clock) {
      (void)clock_gettime(state->clock, &cpu);
    }
    returned[i] = atomic_load_explicit(&state->returned, memory_order_relaxed);
    cpu_ns[i] = (uint64_t)cpu.tv_sec * 1000000000u + (uint64_t)cpu.tv_nsec;
  }
  unsigned closed =
      reshard_read_guard_look(&server->read_guard, now, returned, cpu_ns);
  if (closed == 0) {
    return;
  }
  after_flood_closed(server);
  reshard_metrics_read_flood_close(server->options.metrics, closed);
  reshard_log_line line;
  if (reshard_log_begin(&line, RESHARD_LOG_WARN,
                        "closed the connections that kept the completion-"
                        "queue threads reading without end (a flood)")) {
    reshard_log_u64(&line, "closed", closed);
    reshard_log_u64(&line, "closed_total", server->read_guard.closed);
    reshard_log_end(&line);
  }
}

static void on_look(uv_timer_t *timer) {
  reshard_server *server = timer->data;
  if (server->phase == PHASE_SERVING || server->phase == PHASE_DRAINING) {
    check_held_threads(server, uv_hrtime());
  }
}

/* Ends the calls whose deadline passed while they waited for something
 * gRPC does not know about: their request (under the default deadline),
 * in-flight room, or a client that does not take its response (gRPC
 * enforces a deadline the client set, not the default one). */
static void on_sweep(uv_timer_t *timer) {
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
      end_waiting(call, GRPC_STATUS_RESOURCE_EXHAUSTED,
                  "in-flight memory limit (--max-inflight-bytes) still full "
                  "at the call's deadline");
    } else if (call->awaiting_request &&
               (now >= call->request_deadline_ns ||
                (server->inflight.waiting != 0 && call->admitted_ns != 0 &&
                 now - call->admitted_ns >=
                     (uint64_t)REQUEST_READ_CONTENDED_MS * 1000000))) {
      finish(call, GRPC_STATUS_DEADLINE_EXCEEDED,
             "request message not received in time (--default-deadline; "
             "10 s after admission, 1 s while other calls wait)");
    }
    call = next;
  }
}

/* A request slot matched: take the call over and re-arm the slot. */
static void on_request(reshard_server *server, request_slot *slot,
                       int success) {
  server->slots_pending--;
  if (!success) {
    /* The server is shutting down; the slot is not re-armed. */
    grpc_call_details_destroy(&slot->details);
    grpc_metadata_array_destroy(&slot->metadata);
    maybe_finish_shutdown(server);
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
    arm_slot(server, slot);
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
    arm_slot(server, slot);
  }

  call->next = server->calls;
  if (server->calls) {
    server->calls->prev = call;
  }
  server->calls = call;
  server->stats.calls_started++;
  call->metric = call->method != NULL ? call->method->metric
                                      : RESHARD_METRICS_METHOD_UNKNOWN;
  reshard_metrics_call_started(server->options.metrics, call->metric);

  grpc_op close_op;
  memset(&close_op, 0, sizeof close_op);
  close_op.op = GRPC_OP_RECV_CLOSE_ON_SERVER;
  close_op.data.recv_close_on_server.cancelled = &call->close_cancelled;
  if (start_batch(call, &close_op, 1, &call->close_tag) != GRPC_CALL_OK) {
    finish(call, GRPC_STATUS_INTERNAL, "cannot start the call");
    return;
  }
  if (call->method == NULL) {
    char message[320];
    snprintf(message, sizeof message, "unknown method %s", call->method_path);
    finish(call, GRPC_STATUS_UNIMPLEMENTED, message);
    return;
  }
  if (server->phase != PHASE_SERVING &&
      !(call->method->flags & RESHARD_METHOD_WHILE_DRAINING)) {
    finish(call, GRPC_STATUS_UNAVAILABLE,
           "reshardd is shutting down; retry on another instance");
    return;
  }
  if (reshard_call_expired(call)) {
    finish(call, GRPC_STATUS_DEADLINE_EXCEEDED,
           "deadline exceeded before the call started");
    return;
  }
  /* Health checks are tiny and must answer under any load. */
  if (call->method->flags & RESHARD_METHOD_WHILE_DRAINING) {
    start_recv(call);
    return;
  }
  uint64_t bytes = admission_bytes(server);
  if (reshard_inflight_acquire(&server->inflight, &call->waiter, bytes, 0,
                               on_admitted)) {
    admitted(call, bytes);
  }
  /* Otherwise on_admitted runs, or the sweep ends the call at its
   * deadline. */
  publish_inflight(server);
}

static void arm_slot(reshard_server *server, request_slot *slot) {
  grpc_call_details_init(&slot->details);
  grpc_metadata_array_init(&slot->metadata);
  slot->call = NULL;
  grpc_call_error error = grpc_server_request_call(
      server->grpc, &slot->call, &slot->details, &slot->metadata, server->cq,
      server->cq, &slot->tag);
  if (error != GRPC_CALL_OK) {
    grpc_call_details_destroy(&slot->details);
    grpc_metadata_array_destroy(&slot->metadata);
    reshard_log_msg(RESHARD_LOG_ERROR, "grpc_server_request_call",
                    grpc_call_error_to_string(error));
    return;
  }
  server->slots_pending++;
}

/* ---- The loop side of the queue ---- */

static void on_handle_closed(uv_handle_t *handle) {
  reshard_server *server = handle->data;
  if (--server->handles_closing == 0) {
    server->handles_open = false;
    reshard_log_msg(RESHARD_LOG_INFO, "stopped", NULL);
    if (server->closed_fn != NULL) {
      server->closed_fn(server->closed_data);
    }
  }
}

static void on_queue_done(reshard_server *server) {
  /* The threads returned from their last grpc_completion_queue_next. */
  grpc_completion_queue_destroy(server->cq);
  server->cq = NULL;
  for (unsigned i = 0; i < QUEUE_THREADS; i++) {
    uv_thread_join(&server->queue[i].thread);
  }
  server->handles_closing = 5;
  uv_close((uv_handle_t *)&server->async, on_handle_closed);
  uv_close((uv_handle_t *)&server->timer, on_handle_closed);
  uv_close((uv_handle_t *)&server->sweep, on_handle_closed);
  uv_close((uv_handle_t *)&server->look, on_handle_closed);
  uv_close((uv_handle_t *)&server->trim, on_handle_closed);
}

static void dispatch(reshard_server *server, server_tag *tag) {
  switch (tag->kind) {
  case TAG_REQUEST:
    on_request(server, tag->owner, tag->success);
    break;
  case TAG_RECV:
    on_recv(tag->owner, tag->success);
    break;
  case TAG_CLOSE:
    on_close(tag->owner);
    break;
  case TAG_SEND:
    on_send(tag->owner);
    break;
  case TAG_WRITE:
    on_write(tag->owner, tag->success);
    break;
  case TAG_SHUTDOWN:
    server->shutdown_notified = true;
    uv_timer_stop(&server->timer);
    maybe_finish_shutdown(server);
    break;
  case TAG_QUEUE_DONE:
    on_queue_done(server);
    break;
  }
}

static void on_async(uv_async_t *async) {
  reshard_server *server = async->data;
  uv_mutex_lock(&server->lock);
  server_tag *tag = server->events_head;
  server->events_head = server->events_tail = NULL;
  uv_mutex_unlock(&server->lock);
  while (tag != NULL) {
    server_tag *next = tag->next;
    dispatch(server, tag);
    tag = next;
  }
}

/* ---- Shutdown ---- */

static void maybe_finish_shutdown(reshard_server *server) {
  if (server->phase != PHASE_SHUTDOWN || !server->shutdown_notified ||
      server->calls != NULL || server->slots_pending != 0) {
    return;
  }
  server->phase = PHASE_DESTROYED;
  grpc_server_destroy(server->grpc);
  server->grpc = NULL;
  grpc_completion_queue_shutdown(server->cq);
}

static void on_grace_timeout(uv_timer_t *timer) {
  reshard_server *server = timer->data;
  if (server->phase == PHASE_SHUTDOWN && !server->shutdown_notified) {
    reshard_log_msg(RESHARD_LOG_WARN, "cancelling calls still running", NULL);
    grpc_server_cancel_all_calls(server->grpc);
  }
}

static void begin_shutdown(reshard_server *server) {
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
      end_waiting(call, GRPC_STATUS_UNAVAILABLE, "reshardd is shutting down");
    } else if (!call->finished && (streaming || call->awaiting_request)) {
      finish(call, GRPC_STATUS_UNAVAILABLE, "reshardd is shutting down");
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

static void on_drain_timeout(uv_timer_t *timer) {
  reshard_server *server = timer->data;
  reshard_log_line line;
  if (reshard_log_begin(&line, RESHARD_LOG_WARN, "drain timeout")) {
    reshard_log_u64(&line, "in_flight", server->in_flight);
    reshard_log_end(&line);
  }
  server->drain_deadline_ns = uv_hrtime();
  begin_shutdown(server);
}

void reshard_server_drain(reshard_server *server, void (*closed)(void *data),
                          void *data) {
  if (server->phase == PHASE_DRAINING) {
    /* Asked again: stop waiting. */
    server->drain_deadline_ns = uv_hrtime();
    begin_shutdown(server);
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
    begin_shutdown(server);
  } else {
    uv_timer_start(&server->timer, on_drain_timeout,
                   server->options.drain_timeout_ms, 0);
  }
}

bool reshard_server_draining(const reshard_server *server) {
  return server->phase >= PHASE_DRAINING;
}

void reshard_server_on_drain(reshard_server *server, reshard_drain_fn fn,
                             void *data) {
  server->drain_fn = fn;
  server->drain_data = data;
}

/* ---- Life cycle ---- */

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
  server->pool = reshard_chunk_pool_create(CALL_POOL_RETAIN_BYTES);
  if (server->grpc == NULL || server->cq == NULL || server->pool == NULL) {
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
  server->methods[server->method_count++] =
      (method_entry){path, flags, fn, data, reshard_metrics_method_of(path)};
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
  uv_async_init(server->loop, &server->async, on_async);
  server->async.data = server;
  init_timer(server, &server->timer, NULL, 0);
  init_timer(server, &server->sweep, on_sweep, SWEEP_MS);
  init_timer(server, &server->look, on_look, READ_GUARD_LOOK_MS);
  init_timer(server, &server->trim, NULL, 0);
  uv_unref((uv_handle_t *)&server->trim); /* a chore, never a reason to run */
  server->handles_open = true;

  grpc_server_start(server->grpc);
  server->phase = PHASE_SERVING;
  /* Counted before any starts: the last to finish reports it. */
  atomic_init(&server->threads_running, QUEUE_THREADS);
  for (unsigned i = 0; i < QUEUE_THREADS; i++) {
    queue_thread_state *state = &server->queue[i];
    state->server = server;
    atomic_init(&state->returned, 0);
    if (uv_thread_create(&state->thread, queue_thread, state) != 0) {
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
    arm_slot(server, &server->slots[i]);
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
    if (server->cq != NULL) {
      grpc_completion_queue_shutdown(server->cq);
      while (grpc_completion_queue_next(
                 server->cq, gpr_inf_future(GPR_CLOCK_REALTIME), NULL)
                 .type != GRPC_QUEUE_SHUTDOWN) {
      }
      grpc_completion_queue_destroy(server->cq);
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
