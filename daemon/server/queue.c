/* The completion-queue threads and the hand-off of their events to the
 * loop (server.h, "Threads"): each thread appends the tags gRPC returns
 * to a mutex-guarded list and wakes the loop when the list was empty; the
 * loop takes the whole list and routes each tag to its owner. */
#define _GNU_SOURCE /* SCHED_BATCH */
#include <grpc/grpc.h>
#include <grpc/support/time.h>
#include <sched.h>
#include <stdatomic.h>
#include <stddef.h>

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
    uv_async_send(&server->async);
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

void reshard__on_async(uv_async_t *async) {
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
