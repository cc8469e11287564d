/* The gRPC bridge: a gRPC C-core server whose completion-queue events reach
 * the libuv loop, and the calls they carry.
 *
 * Threads. Two completion-queue threads block in grpc_completion_queue_next
 * on the server's queue (request slots, shutdown) and append each event's
 * tag to a mutex-guarded list; they wake the loop (an eventfd it polls)
 * only when the list goes from empty to non-empty, and the loop drains the
 * whole list on each wake-up. Calls' batches complete on a second queue
 * that polls nothing; a batch that completes inside the loop's
 * grpc_call_start_batch is caught there (gRPC's thread-local slot) and run
 * on the loop's next turn, and a completion thread hands the loop the rest
 * the same way. Everything else in this module runs on the loop thread,
 * except where a function says otherwise.
 *
 * Calls. Handlers are registered per method path ("/pkg.Service/Method")
 * and run on the loop with the request message already received. Every call
 * gets exactly one SEND_STATUS_FROM_SERVER and one RECV_CLOSE_ON_SERVER;
 * byte buffers are destroyed after the batch that used them completes. A
 * handler finishes its call exactly once (reshard_call_reply, _fail or
 * _send_packed); the call object is freed after that, once gRPC is done
 * with it, so handlers must not touch it afterwards.
 *
 * Shutdown (reshard_server_drain): new calls to methods not flagged
 * RESHARD_METHOD_WHILE_DRAINING get UNAVAILABLE, in-flight calls finish;
 * when none is left (or the drain timeout fires) the gRPC server is shut
 * down in the order grpc_server_shutdown_and_notify → grace timer →
 * grpc_server_cancel_all_calls → shutdown tag → grpc_server_destroy →
 * grpc_completion_queue_shutdown of both queues → drain to
 * GRPC_QUEUE_SHUTDOWN → destroy the queues → join their threads → close the
 * loop handles. The closed callback runs last; grpc_shutdown is the
 * caller's. */
#ifndef RESHARD_SERVER_H
#define RESHARD_SERVER_H

#include <grpc/grpc_security.h>
#include <protobuf-c/protobuf-c.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <uv.h>

#include "observe/metrics.h"
#include "reshard/arena.h"
#include "reshard/error.h"
#include "wire/response_memory.h"

typedef struct reshard_server reshard_server;
typedef struct reshard_call reshard_call;

/* Runs on the loop when a call's request has arrived. */
typedef void (*reshard_method_fn)(reshard_call *call, void *data);

enum {
  /* Still served while draining (health checks); such calls do not hold
   * the drain up. */
  RESHARD_METHOD_WHILE_DRAINING = 1u << 0,
  /* A long-lived server-streaming call: it does not hold up the drain and
   * is finished with UNAVAILABLE when the server shuts down. */
  RESHARD_METHOD_STREAMING = 1u << 1,
};

typedef struct reshard_server_options {
  const char *listen;         /* e.g. "127.0.0.1:0" */
  uint64_t max_request_bytes; /* larger requests get RESOURCE_EXHAUSTED */
  uint64_t drain_timeout_ms;  /* bound on in-flight calls after drain */
  unsigned request_slots;     /* outstanding request_call; 0 picks 32 */
  reshard_metrics *metrics;   /* calls are counted here; may be NULL */
  /* Resource bounds (SPEC §3.5, docs/security.md); 0 means the default
   * named, except where "off" is said. */
  uint64_t max_inflight_bytes;     /* 0: unlimited (off) */
  uint64_t default_deadline_ms;    /* unary calls sent without one; 0: off */
  unsigned max_concurrent_streams; /* per connection; 0 picks 100 */
  uint64_t keepalive_time_ms;      /* ping an idle connection; 0 picks 60 s */
  uint64_t keepalive_timeout_ms;   /* close when unanswered; 0 picks 20 s */
  uint64_t max_connection_idle_ms; /* close without calls; 0 picks 5 min */
  /* TLS (daemon/tls.h) for the listener; NULL serves plaintext. Owned by
   * the caller, released after reshard_server_free. */
  grpc_server_credentials *credentials;
} reshard_server_options;

/* Creates the server on `loop` (grpc_init must have been called). Returns
 * NULL with `err` set on failure. */
reshard_server *reshard_server_create(uv_loop_t *loop,
                                      const reshard_server_options *options,
                                      reshard_error *err);

/* Registers `fn` for `path` (a static string). Before start only. */
void reshard_server_add_method(reshard_server *server, const char *path,
                               unsigned flags, reshard_method_fn fn,
                               void *data);

/* Binds the listen address and starts serving. On success stores the bound
 * port (the real one for port 0) in *port. On failure the server is left
 * for reshard_server_free. */
reshard_status reshard_server_start(reshard_server *server, int *port,
                                    reshard_error *err);

/* Called once when draining starts, before any call is refused. */
typedef void (*reshard_drain_fn)(void *data);
void reshard_server_on_drain(reshard_server *server, reshard_drain_fn fn,
                             void *data);

/* Starts the graceful shutdown described above; `closed` runs on the loop
 * when every call, the queue, its thread and the loop handles are gone.
 * Calling it again shortens the drain: in-flight calls are cancelled now. */
void reshard_server_drain(reshard_server *server, void (*closed)(void *data),
                          void *data);

bool reshard_server_draining(const reshard_server *server);

/* Frees a server after `closed` ran, or one that never started. */
void reshard_server_free(reshard_server *server);

/* Counters for logs and, later, metrics. */
typedef struct reshard_server_stats {
  uint64_t calls_started;
  uint64_t calls_finished;
  uint64_t calls_by_code[17]; /* indexed by grpc_status_code */
  uint64_t in_flight;
  uint64_t inflight_bytes;   /* charged against --max-inflight-bytes */
  uint64_t inflight_waiting; /* calls waiting for room */
} reshard_server_stats;
void reshard_server_get_stats(const reshard_server *server,
                              reshard_server_stats *out);

/* ---- Calls ---- */

/* The full method path, e.g. "/reshard.v1.Planner/PlanLoad". */
const char *reshard_call_method(const reshard_call *call);

/* The per-request arena: decoding, planning scratch and the response all
 * come from it; it is destroyed with the call. */
reshard_arena *reshard_call_arena(reshard_call *call);

/* The request message bytes (contiguous, in the arena). */
const uint8_t *reshard_call_payload(const reshard_call *call, size_t *length);

/* True once the call's deadline has passed. Safe from any thread. */
bool reshard_call_expired(const reshard_call *call);

/* True once the client cancelled or the connection broke, as far as the
 * loop has learnt: a stream, and a unary call from the moment it waits in
 * a line (reshard_call_watch_cancel), learn it at once; other unary calls
 * with their final batch. Safe from any thread. */
bool reshard_call_cancelled(const reshard_call *call);

/* The call is about to wait in a line whose wait has no bound of its own
 * (room under --max-inflight-bytes, the line of large requests): from now
 * on the client's cancel reaches it at once: a call waiting for room leaves
 * the line, one in the line of large requests is skipped when its turn
 * comes (reshard_call_cancelled). Work on the pool, bounded by
 * the plan's limits, and catalog calls, bounded by their timeout, do not
 * ask: a cancel then arrives with the final batch, which saves every call
 * that never waits a completion crossing threads. Once per call; more
 * calls are no-ops. Loop only. */
void reshard_call_watch_cancel(reshard_call *call);

/* True when the server holds no other call but streams, in any stage:
 * nothing else needs the loop, so this call's work may run on it rather
 * than cross to the work pool and back, two wake-ups of an idle vCPU that
 * cost a lone client more than the work (docs/daemon.md). */
bool reshard_call_alone(const reshard_call *call);

/* Microseconds since the call arrived. Safe from any thread. */
uint64_t reshard_call_elapsed_us(const reshard_call *call);

/* Runs once a reservation is decided: `err` is NULL when the bytes are
 * charged; otherwise the call could not get them (its deadline passed
 * while it waited, the client went away, the server is shutting down) and
 * the handler finishes it, e.g. with reshard_call_fail(call, err). */
typedef void (*reshard_call_ready_fn)(reshard_call *call,
                                      const reshard_error *err, void *data);

/* Charges `bytes` more to the call under --max-inflight-bytes before the
 * handler spends them (a plan): `ready` runs at once when there is room,
 * else later, in arrival order with every other call waiting. Handlers
 * call it at most once at a time, on the loop; whatever happens, `ready`
 * runs exactly once. Without a limit, or for calls exempt from it (health),
 * `ready` runs at once. */
void reshard_call_reserve(reshard_call *call, uint64_t bytes,
                          reshard_call_ready_fn ready, void *data);

/* Packs `message` as the call's response. Safe from the one thread that
 * owns the call at the time (a worker while planning), because it touches
 * only the call's own fields. Returns RESOURCE_EXHAUSTED when out of
 * memory. */
reshard_status reshard_call_pack(reshard_call *call,
                                 const ProtobufCMessage *message);

/* Like reshard_call_pack for a response encoded by the caller: `write`
 * fills exactly `size` bytes at `out` (the call's send buffer) and returns
 * how many it wrote. Same threading rule as reshard_call_pack. */
reshard_status reshard_call_pack_encoded(reshard_call *call, size_t size,
                                         size_t (*write)(void *context,
                                                         uint8_t *out),
                                         void *context);

/* Memory for a response sent as it lies (response_memory.h), from the
 * server's chunk pool, with one reference for the caller. NULL when out
 * of memory. Safe from any thread. */
reshard_response_memory *reshard_call_response_memory(reshard_call *call);

/* Like reshard_call_pack_encoded for a response made of `count` pieces
 * that lie in `memory`'s arena (response_memory.h): each long piece is
 * sent from where it lies, holding the memory until gRPC drops it; short
 * ones are copied. The caller keeps its own reference. Same threading
 * rule as reshard_call_pack. */
reshard_status reshard_call_pack_pieces(reshard_call *call,
                                        reshard_response_memory *memory,
                                        const reshard_response_piece *pieces,
                                        size_t count);

/* Finishes the call with OK and the response packed by reshard_call_pack
 * or reshard_call_pack_encoded. */
void reshard_call_send_packed(reshard_call *call);

/* Packs and finishes with OK in one step. */
void reshard_call_reply(reshard_call *call, const ProtobufCMessage *message);

/* Finishes the call with the status and message of `err` (code != OK). */
void reshard_call_fail(reshard_call *call, const reshard_error *err);

/* Finishes with a code and message given directly. */
void reshard_call_fail_code(reshard_call *call, reshard_status code,
                            const char *message);

/* ---- Streaming calls (RESHARD_METHOD_STREAMING) ---- */

/* Called after a write completed (`ok` false when the call broke). */
typedef void (*reshard_write_fn)(reshard_call *call, bool ok, void *data);
/* Called once, just before the call is freed. */
typedef void (*reshard_call_done_fn)(reshard_call *call, void *data);

/* Sends one message on a streaming call; at most one write may be pending.
 * A call finished while a write is pending sends its status after the
 * write completes, and the write callback may still write once more (a
 * final update). Returns false when the status went out or a write is
 * pending. */
bool reshard_call_write(reshard_call *call, const ProtobufCMessage *message,
                        reshard_write_fn fn, void *data);

/* Registers the callback run just before the call is freed. */
void reshard_call_on_done(reshard_call *call, reshard_call_done_fn fn,
                          void *data);

/* True when the call can take a write now. */
bool reshard_call_writable(const reshard_call *call);

#endif
