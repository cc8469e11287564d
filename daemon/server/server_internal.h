/* What the server's files share (daemon/server/): the server and call
 * structs, the completion-queue tags, the constants more than one file
 * reads, and the functions one file calls in another. Internal to
 * server/; everything here runs on the loop unless it says so.
 *
 * Who owns what: server.c creates, starts and frees the server; queue.c
 * hands gRPC's events to the loop; call.c is the life of a call, from
 * its arrival to its free; response.c packs responses; sweep.c ends calls
 * past deadlines gRPC does not know; flood.c is the server's side of the
 * guards (guard/); drain.c drains and shuts down. */
#ifndef RESHARD_SERVER_INTERNAL_H
#define RESHARD_SERVER_INTERNAL_H

#include <grpc/grpc.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>
#include <time.h>
#include <uv.h>

#include "memory/chunk_pool.h"
#include "memory/inflight.h"
#include "observe/metrics.h"
#include "server/guard/read_guard.h"
#include "server/guard/reset_guard.h"
#include "server/server.h"

enum {
  MAX_METHODS = 16,
  /* How often deadlines of calls gRPC cannot see are checked: calls
   * waiting for their request under the default deadline, and calls
   * waiting for in-flight room. */
  SWEEP_MS = 100,
  /* How often the read guard looks at the queue threads: threads held by
   * a flood are found after two looks (guard/read_guard.h), while every look
   * costs two clock reads. */
  READ_GUARD_LOOK_MS = 25,
  /* An admitted call holds room for the largest request; one whose
   * request has not arrived this long after admission gives it back
   * (DEADLINE_EXCEEDED), so silent streams cannot hold the room. */
  REQUEST_READ_MS = 10 * 1000,
  /* ...and only this long while other calls wait for the room: a client
   * sends its request with its headers, so a silent stream is not one
   * worth keeping others waiting for. */
  REQUEST_READ_CONTENDED_MS = 1000,
  /* Threads waiting on the completion queue. gRPC reads connections on
   * the threads that wait on it, and a thread reading a connection whose
   * bytes keep coming does not return until they stop: with one, a client
   * flooding a connection held back every other call's events, health
   * checks included (docs/security.md, rapid reset). */
  QUEUE_THREADS = 2,
  /* ...and, after them in server->queue, the thread waiting on call_cq
   * (the completion thread), which reads no socket. */
  COMPLETION_THREAD = QUEUE_THREADS,
  ALL_QUEUE_THREADS = QUEUE_THREADS + 1,
  /* Calls a connection may have reset before sending their requests, in
   * one second, before the daemon closes it (guard/reset_guard.h). */
  RESETS_PER_SECOND_MAX = 1000,
};

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
  size_t path_length; /* compared against each call's path */
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
  bool close_watched; /* RECV_CLOSE_ON_SERVER started in its own batch */
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
  grpc_completion_queue *cq; /* the queue it waits on */
  uv_thread_t thread;
  _Alignas(64) atomic_uint_fast64_t returned; /* completions returned */
  clockid_t clock;                            /* its CPU time */
  bool has_clock;
} queue_thread_state;

struct reshard_server {
  uv_loop_t *loop;
  reshard_server_options options;
  grpc_server *grpc;
  /* Request slots and the server's own tags: gRPC reads sockets on the
   * threads that wait on it (the queue threads). */
  grpc_completion_queue *cq;
  /* Every call's batches: a queue that polls nothing, so the loop never
   * reads a socket (queue.c). */
  grpc_completion_queue *call_cq; /* shut down at PHASE_DESTROYED */
  /* A batch that completed inside the loop's grpc_call_start_batch, caught
   * there (queue.c), waits here for the next turn of the loop. */
  server_tag *ready_head, *ready_tail;
  uint64_t events_taken; /* call_cq's events the loop caught itself */
  uv_idle_t take;        /* started while `ready` holds events */
  server_phase phase;

  method_entry methods[MAX_METHODS];
  size_t method_count;

  request_slot *slots;
  unsigned slot_count;
  unsigned slots_pending;

  /* The queue threads and their hand-off list; the completion thread
   * (queue[COMPLETION_THREAD]) waits on call_cq for what the loop did not
   * take itself. */
  queue_thread_state queue[ALL_QUEUE_THREADS];
  atomic_uint threads_running; /* not yet past their last event */
  uv_mutex_t lock;
  server_tag *events_head, *events_tail;
  /* Readable when the list went from empty to non-empty (queue.c says
   * why not uv_async_send). */
  int events_fd;
  uv_poll_t events;
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
  uint64_t in_flight;   /* live calls that hold up the drain */
  uint64_t unary_calls; /* live calls but streams (call.c, is_unary) */

  reshard_drain_fn drain_fn;
  void *drain_data;
  void (*closed_fn)(void *data);
  void *closed_data;

  reshard_server_stats stats;
  reshard_reset_guard reset_guard;
  reshard_read_guard read_guard;
};

/* ---- The completion queue (queue.c) ---- */

/* A queue thread's body: `arg` is its queue_thread_state. Its own thread. */
void reshard__queue_thread(void *arg);

/* Runs the events the queue threads handed over (server->events). */
void reshard__on_events(uv_poll_t *poll, int status, int events);

/* Starts `ops` on `call` with `tag`; a completion that happens inside
 * grpc_call_start_batch is kept for the loop's next turn instead of going
 * through call_cq and the completion thread. Loop thread only. */
grpc_call_error reshard__start_batch(reshard_server *server, grpc_call *call,
                                     const grpc_op *ops, size_t count,
                                     server_tag *tag);

/* Runs the events reshard__start_batch kept (server->take). */
void reshard__on_take(uv_idle_t *idle);

/* ---- Calls (call.c) ---- */

/* Asks gRPC for the next call on `slot`. */
void reshard__arm_slot(reshard_server *server, request_slot *slot);

/* The completions of a slot's request and of a call's batches, by tag
 * kind. */
void reshard__on_request(reshard_server *server, request_slot *slot,
                         int success);
void reshard__call_on_recv(reshard_call *call, int success);
void reshard__call_on_close(reshard_call *call);
void reshard__call_on_send(reshard_call *call);
void reshard__call_on_write(reshard_call *call, int success);

/* Finishes the call with `code` (a handler's reply or failure does it
 * through this); `message` is copied. */
void reshard__call_finish(reshard_call *call, grpc_status_code code,
                          const char *message);

/* Ends a call waiting for in-flight room with `code`. */
void reshard__call_end_waiting(reshard_call *call, grpc_status_code code,
                               const char *message);

/* ---- Deadlines (sweep.c) ---- */

/* The sweep timer's callback (server->sweep, every SWEEP_MS). */
void reshard__on_sweep(uv_timer_t *timer);

/* ---- Floods (flood.c) ---- */

/* The read guard's timer callback (server->look, every
 * READ_GUARD_LOOK_MS). */
void reshard__on_look(uv_timer_t *timer);

/* The call's client reset it before its request was read. */
void reshard__note_reset(reshard_server *server, reshard_call *call);

/* ---- Drain and shutdown (drain.c) ---- */

/* Ends the drain of a draining server (else does nothing): when its last
 * Planner call is freed, at the drain timeout, or when asked again. */
void reshard__begin_shutdown(reshard_server *server);

/* Destroys the gRPC server and shuts the queue down once the server is
 * shut down and every call and slot is gone. */
void reshard__maybe_finish_shutdown(reshard_server *server);

/* The shutdown tag and the queue-done tag came back. */
void reshard__on_shutdown_notified(reshard_server *server);
void reshard__on_queue_done(reshard_server *server);

#endif
