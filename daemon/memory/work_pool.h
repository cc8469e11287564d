/* Worker threads for the loop's CPU-heavy work: decoding large requests
 * and planning. Work is submitted on the loop; it runs on a worker at a
 * lower priority (nice +`nice`, so the loop and the gRPC thread come first
 * on a machine with few cores) and its `after` callback runs back on the
 * loop.
 *
 * Why not uv_queue_work: libuv's pool reports completions with
 * uv_async_send, whose two-step protocol makes the loop spin (pause, then
 * sched_yield) while a sender is between its steps. A low-priority worker
 * that wakes the loop with the first step is preempted by it right there,
 * and the loop then spins until the scheduler runs the worker again: 16 %
 * of the loop thread under a mixed S1-1 + S5 load. Here a worker appends
 * the finished work to a list under a mutex, releases it, and writes an
 * eventfd; the loop reads the list. Nothing waits on a preempted worker.
 *
 * The pool keeps the loop alive only while work is outstanding. */
#ifndef RESHARD_WORK_POOL_H
#define RESHARD_WORK_POOL_H

#include <stddef.h>
#include <uv.h>

typedef struct reshard_work reshard_work;
typedef void (*reshard_work_fn)(reshard_work *work);
typedef void (*reshard_after_work_fn)(reshard_work *work);

/* One piece of work; the caller owns it (typically inside its call
 * context) until `after` ran. */
struct reshard_work {
  reshard_work_fn work;        /* on a worker */
  reshard_after_work_fn after; /* on the loop */
  void *data;                  /* the caller's */
  reshard_work *next;          /* the pool's */
};

typedef struct reshard_work_pool reshard_work_pool;

/* Starts `threads` workers (at least 1) for `loop`. NULL on failure. */
reshard_work_pool *reshard_work_pool_create(uv_loop_t *loop, unsigned threads,
                                            int nice);

/* Queues `work` (loop thread only). Returns 0, or a negative errno when
 * the pool is closing. */
int reshard_work_pool_submit(reshard_work_pool *pool, reshard_work *work,
                             reshard_work_fn fn, reshard_after_work_fn after);

/* Stops and joins the workers and closes the loop handle; the pool is
 * freed once the loop has run the close callback. Call with no work
 * outstanding (after the loop ran dry). NULL is accepted. */
void reshard_work_pool_close(reshard_work_pool *pool);

#endif
