#include "memory/inflight.h"

#include <stddef.h>

void reshard_inflight_init(reshard_inflight *inflight, uint64_t limit) {
  *inflight = (reshard_inflight){.limit = limit};
}

/* Room for `bytes` now, or every byte in use is held by calls waiting (so
 * nothing running would ever give room back). */
static bool fits(const reshard_inflight *inflight, uint64_t bytes) {
  return inflight->limit == 0 || inflight->used <= inflight->held_waiting ||
         (bytes <= inflight->limit &&
          inflight->used <= inflight->limit - bytes);
}

static void unlink_waiter(reshard_inflight *inflight,
                          reshard_inflight_waiter *waiter) {
  if (waiter->prev != NULL) {
    waiter->prev->next = waiter->next;
  } else {
    inflight->head = waiter->next;
  }
  if (waiter->next != NULL) {
    waiter->next->prev = waiter->prev;
  } else {
    inflight->tail = waiter->prev;
  }
  if (inflight->last_holding == waiter) {
    inflight->last_holding =
        waiter->prev != NULL && waiter->prev->held != 0 ? waiter->prev : NULL;
  }
  waiter->prev = waiter->next = NULL;
  waiter->queued = false;
  inflight->waiting--;
  inflight->held_waiting -= waiter->held;
}

/* Admits from the head while the head fits. */
static void admit_waiters(reshard_inflight *inflight) {
  while (inflight->head != NULL && fits(inflight, inflight->head->bytes)) {
    reshard_inflight_waiter *waiter = inflight->head;
    unlink_waiter(inflight, waiter);
    reshard_inflight_charge(inflight, waiter->bytes);
    waiter->admit(waiter);
  }
}

bool reshard_inflight_acquire(reshard_inflight *inflight,
                              reshard_inflight_waiter *waiter, uint64_t bytes,
                              uint64_t held, reshard_inflight_admit_fn admit) {
  waiter->bytes = bytes;
  waiter->held = held;
  waiter->admit = admit;
  if (inflight->head == NULL && fits(inflight, bytes)) {
    reshard_inflight_charge(inflight, bytes);
    return true;
  }
  /* Calls holding bytes go after those holding bytes, ahead of the rest. */
  reshard_inflight_waiter *after =
      held != 0 ? inflight->last_holding : inflight->tail;
  waiter->prev = after;
  waiter->next = after != NULL ? after->next : inflight->head;
  if (waiter->next != NULL) {
    waiter->next->prev = waiter;
  } else {
    inflight->tail = waiter;
  }
  if (after != NULL) {
    after->next = waiter;
  } else {
    inflight->head = waiter;
  }
  if (held != 0) {
    inflight->last_holding = waiter;
  }
  waiter->queued = true;
  inflight->waiting++;
  inflight->held_waiting += held;
  /* The bytes this call holds may be the last ones in use. */
  admit_waiters(inflight);
  return false;
}

void reshard_inflight_cancel(reshard_inflight *inflight,
                             reshard_inflight_waiter *waiter) {
  if (!waiter->queued) {
    return;
  }
  unlink_waiter(inflight, waiter);
  admit_waiters(inflight);
}

void reshard_inflight_charge(reshard_inflight *inflight, uint64_t bytes) {
  inflight->used = inflight->used + bytes < inflight->used
                       ? UINT64_MAX
                       : inflight->used + bytes;
}

void reshard_inflight_release(reshard_inflight *inflight, uint64_t bytes) {
  inflight->used = bytes < inflight->used ? inflight->used - bytes : 0;
  admit_waiters(inflight);
}
