/* The completion-queue threads and the hand-off of their events to the
 * loop (server.h, "Threads"): each thread appends the tags gRPC returns
 * to a mutex-guarded list and wakes the loop when the list was empty; the
 * loop takes the whole list and routes each tag to its owner.
 *
 * The wake-up is a write to an eventfd the loop polls, not uv_async_send:
 * libuv's (1.44) marks the handle busy, writes its own eventfd, then
 * marks it done, and the loop spins (997 pauses, then sched_yield, again)
 * on a handle still busy. A queue thread runs under SCHED_BATCH, so the
 * loop it wakes preempts it right inside that write, and then spun until
 * the scheduler ran the queue thread again: 287 sched_yield calls a second
 * on the loop with one client planning S1x8 pooled (perf sched_switch),
 * beside 366 preemptions of the queue threads in that write. The work
 * pool hands its work back the same way, for the same reason
 * (memory/work_pool.h).
 *
 * Calls' batches complete on a second queue, call_cq, which polls
 * nothing, so the loop never reads a socket: a flooding connection holds
 * the queue threads, which the read guard watches, never the loop. A
 * batch often completes inside grpc_call_start_batch (a request's message
 * that came with its headers, a reply written at once). Pushed onto
 * call_cq, such an event cost a kick of the completion thread, and the
 * loop's take of the then empty queue was a futex wait with a past
 * deadline that did not return at once: the loop slept 28 us a take on
 * this machine's vCPUs (a trace of its futex calls). gRPC
 * can instead keep one such completion in a thread-local slot
 * (grpc_completion_queue_thread_local_cache_init/_flush, the C++ library's
 * own way to skip the queue): reshard__start_batch opens the slot around
 * each grpc_call_start_batch and hands what it caught to the loop's next
 * turn. Everything else completes on call_cq, where the completion thread
 * waits for it and hands it over like the queue threads. */
#define _GNU_SOURCE /* SCHED_BATCH */
#include <errno.h>
#include <grpc/grpc.h>
#include <grpc/support/time.h>
#include <sched.h>
#include <stdatomic.h>
#include <stddef.h>
#include <stdint.h>
#include <unistd.h>

#include "server/server_internal.h"

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
    /* The loop reads the list after the eventfd, so a preempted writer
     * holds nothing up. The counter cannot overflow: the loop resets it
     * on every wake-up. */
    uint64_t one = 1;
    while (write(server->events_fd, &one, sizeof one) < 0 && errno == EINTR) {
    }
  }
}

void reshard__queue_thread(void *arg) {
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
        self->cq, gpr_inf_future(GPR_CLOCK_REALTIME), NULL);
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

/* ---- The loop side of the queue ---- */

static void dispatch(reshard_server *server, server_tag *tag) {
  switch (tag->kind) {
  case TAG_REQUEST:
    reshard__on_request(server, tag->owner, tag->success);
    break;
  case TAG_RECV:
    reshard__call_on_recv(tag->owner, tag->success);
    break;
  case TAG_CLOSE:
    reshard__call_on_close(tag->owner);
    break;
  case TAG_SEND:
    reshard__call_on_send(tag->owner);
    break;
  case TAG_WRITE:
    reshard__call_on_write(tag->owner, tag->success);
    break;
  case TAG_SHUTDOWN:
    reshard__on_shutdown_notified(server);
    break;
  case TAG_QUEUE_DONE:
    reshard__on_queue_done(server);
    break;
  }
}

void reshard__on_events(uv_poll_t *poll, int status, int events) {
  (void)status;
  (void)events;
  reshard_server *server = poll->data;
  uint64_t count;
  while (read(server->events_fd, &count, sizeof count) < 0 && errno == EINTR) {
  }
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

grpc_call_error reshard__start_batch(reshard_server *server, grpc_call *call,
                                     const grpc_op *ops, size_t count,
                                     server_tag *tag) {
  grpc_completion_queue_thread_local_cache_init(server->call_cq);
  grpc_call_error error = grpc_call_start_batch(call, ops, count, tag, NULL);
  void *caught;
  int ok;
  /* Always flushed: the slot belongs to this thread until then. It holds
   * at most one event, this batch's or another call's that completed in
   * the same pass through gRPC; the rest went to call_cq. */
  if (grpc_completion_queue_thread_local_cache_flush(server->call_cq, &caught,
                                                     &ok)) {
    server_tag *done = caught;
    done->success = ok;
    done->next = NULL;
    /* Run on the next turn, not here: the caller is in the middle of the
     * call's state change, and the handler an event runs may free it. */
    if (server->ready_head == NULL) {
      server->ready_head = done;
      uv_idle_start(&server->take, reshard__on_take);
    } else {
      server->ready_tail->next = done;
    }
    server->ready_tail = done;
    server->events_taken++;
  }
  return error;
}

void reshard__on_take(uv_idle_t *idle) {
  reshard_server *server = idle->data;
  /* What is there now; what these events' handlers catch waits for the
   * next turn, so sockets and timers are served in between. */
  server_tag *tag = server->ready_head;
  server->ready_head = server->ready_tail = NULL;
  uv_idle_stop(idle);
  while (tag != NULL) {
    server_tag *next = tag->next;
    dispatch(server, tag);
    tag = next;
  }
}
