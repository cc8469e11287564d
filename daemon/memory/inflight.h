/* The in-flight memory bound (--max-inflight-bytes, SPEC §3.5): the bytes
 * held by calls in flight are counted against one limit, and a call that
 * would pass it waits, in arrival order, until earlier calls give room
 * back. Loop thread only; owns nothing but its counters (waiters are
 * embedded in their calls).
 *
 * A call asks for what it will hold before it holds it (its request and
 * the scratch to decode and plan it), may charge more once it knows (its
 * response), and releases everything when it is freed. Order is strict:
 * a small call never overtakes a large one waiting ahead of it, so a
 * large call cannot starve. A call that already holds bytes may wait for
 * more (its plan); such calls queue ahead of calls holding nothing, so no
 * new call starts while started ones wait to finish. To keep calls
 * holding and waiting from blocking each other for good, the head of the
 * queue is admitted whenever every byte in use is held by waiting calls,
 * even past the limit: a call larger than the whole limit runs alone
 * rather than never, and what is in use passes the limit by at most what
 * the waiting calls hold. */
#ifndef RESHARD_INFLIGHT_H
#define RESHARD_INFLIGHT_H

#include <stdbool.h>
#include <stdint.h>

typedef struct reshard_inflight_waiter reshard_inflight_waiter;

/* Runs when a waiting call is admitted (its bytes are then charged). */
typedef void (*reshard_inflight_admit_fn)(reshard_inflight_waiter *waiter);

struct reshard_inflight_waiter {
  reshard_inflight_waiter *prev, *next;
  uint64_t bytes;
  uint64_t held; /* charged to this call already, while it waits */
  reshard_inflight_admit_fn admit;
  bool queued;
};

typedef struct reshard_inflight {
  uint64_t limit;
  uint64_t used;         /* bytes charged by admitted calls */
  uint64_t waiting;      /* calls queued */
  uint64_t held_waiting; /* bytes held by queued calls */
  reshard_inflight_waiter *head, *tail;
  reshard_inflight_waiter *last_holding; /* last queued with held != 0 */
} reshard_inflight;

/* `limit` 0 means unlimited. */
void reshard_inflight_init(reshard_inflight *inflight, uint64_t limit);

/* Asks for `bytes` for a call already holding `held` of the bytes in use.
 * Returns true when they are charged now; otherwise queues `waiter` and
 * returns false, and `admit` runs once they are charged (possibly before
 * this returns, when the call's own holding was all that was in use, or
 * later from reshard_inflight_release or _cancel) unless
 * reshard_inflight_cancel takes the waiter out first. */
bool reshard_inflight_acquire(reshard_inflight *inflight,
                              reshard_inflight_waiter *waiter, uint64_t bytes,
                              uint64_t held, reshard_inflight_admit_fn admit);

/* Takes a queued waiter out of the queue (its deadline passed); waiters
 * behind it may now be admitted. A waiter not queued is left alone. */
void reshard_inflight_cancel(reshard_inflight *inflight,
                             reshard_inflight_waiter *waiter);

/* Charges `bytes` more to an admitted call, without waiting: what it
 * holds already exists. */
void reshard_inflight_charge(reshard_inflight *inflight, uint64_t bytes);

/* Gives `bytes` back and admits waiters, in order, while they fit. */
void reshard_inflight_release(reshard_inflight *inflight, uint64_t bytes);

#endif
