#include "inflight.h"

#include <stddef.h>

void reshard_inflight_init(reshard_inflight *inflight, uint64_t limit) {
  *inflight = (reshard_inflight){.limit = limit};
}

static bool fits(const reshard_inflight *inflight, uint64_t bytes) {
  return inflight->limit == 0 || inflight->used == 0 ||
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
  waiter->prev = waiter->next = NULL;
  waiter->queued = false;
  inflight->waiting--;
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
                              reshard_inflight_admit_fn admit) {
  waiter->bytes = bytes;
  waiter->admit = admit;
  if (inflight->head == NULL && fits(inflight, bytes)) {
    reshard_inflight_charge(inflight, bytes);
    return true;
  }
  waiter->next = NULL;
  waiter->prev = inflight->tail;
  if (inflight->tail != NULL) {
    inflight->tail->next = waiter;
  } else {
    inflight->head = waiter;
  }
  inflight->tail = waiter;
  waiter->queued = true;
  inflight->waiting++;
  return false;
}

void reshard_inflight_cancel(reshard_inflight *inflight,
                             reshard_inflight_waiter *waiter) {
  if (!waiter->queued) {
    return;
  }
  bool was_head = inflight->head == waiter;
  unlink_waiter(inflight, waiter);
  if (was_head) {
    admit_waiters(inflight);
  }
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
