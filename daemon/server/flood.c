/* The server's side of the guards against floods (guard/): it feeds the
 * reset guard the calls reset before their requests, lets the read guard
 * look at the queue threads every READ_GUARD_LOOK_MS, and gives a flood's
 * memory back to the system after either closed a connection. */
#include <grpc/grpc.h>
#include <grpc/support/alloc.h>
#include <malloc.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdint.h>
#include <time.h>

#include "observe/log.h"
#include "server/server_internal.h"

enum {
  /* After a guard closed a flood's connection, and no other for this
   * long, the memory its calls held is given back to the system; again
   * as often as this while calls still arrive. */
  FLOOD_TRIM_DELAY_MS = 2000,
  FLOOD_TRIMS_MAX = 5,
};

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
void reshard__note_reset(reshard_server *server, reshard_call *call) {
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

void reshard__on_look(uv_timer_t *timer) {
  reshard_server *server = timer->data;
  if (server->phase == PHASE_SERVING || server->phase == PHASE_DRAINING) {
    check_held_threads(server, uv_hrtime());
  }
}
