/* The structures behind reshard_ucx.h, shared by its files:
 * reshard_ucx.c (context, worker, memory, peers) and reshard_ucx_transfer.c
 * (plan execution). Nothing outside clients/ucx includes this. */
#ifndef RESHARD_UCX_INTERNAL_H
#define RESHARD_UCX_INTERNAL_H

#include <stdarg.h>
#include <stdbool.h>

#include <ucp/api/ucp.h>

#include "reshard_ucx.h"

struct reshard_ucx {
  ucp_context_h context;
  ucp_worker_h worker;
  ucp_address_t *address;
  size_t address_length;
  int event_fd; /* the worker's wake-up descriptor, for reshard_ucx_serve */
  /* Batch states whose gets never completed and could not be cancelled
   * (a peer without failure detection that stopped answering): their
   * requests may still complete into them, so they are freed only after
   * the worker is destroyed. */
  void **abandoned;
  size_t abandoned_count;
};

typedef struct reshard__ucx_local_region {
  reshard_ucx_region region; /* region_id owned (copied) */
  ucp_mem_h memh;
  void *rkey;
  size_t rkey_length;
} reshard__ucx_local_region;

struct reshard_ucx_memory {
  reshard_ucx *ux;
  reshard__ucx_local_region *regions;
  size_t count;
};

typedef struct reshard__ucx_remote {
  char *region_id;
  uint64_t address;
  uint64_t nbytes;
  ucp_rkey_h rkey;
} reshard__ucx_remote;

struct reshard_ucx_peer {
  reshard_ucx *ux;
  char *participant_id;
  ucp_ep_h ep;
  /* Set by the endpoint's error handler: the peer is gone or unreachable;
   * the endpoint is then closed forcibly. */
  ucs_status_t failure;
  /* UCP_ERR_HANDLING_MODE_PEER could not be had (UCX 1.13's shared-memory
   * transports have no peer failure handler): a dead peer is then seen
   * only as gets that stop completing, and its endpoint cannot be closed
   * forcibly. */
  bool no_failure_detection;
  /* Requests of this endpoint were abandoned: it is never used again. */
  bool stuck;
  reshard__ucx_remote *regions;
  size_t count;
};

/* Heap-allocated per batch: when a peer without failure detection stops
 * answering, its requests can neither complete nor be cancelled, and the
 * state they complete into must outlive the call (reshard__ucx_abandon). */
typedef struct reshard__ucx_batch {
  uint64_t pending; /* gets and the flush posted, not yet completed */
  uint64_t bytes;   /* completed successfully */
  uint64_t gets;
  ucs_status_t status;                /* the first failure */
  const char *failed_what;            /* "ucp_get_nbx", "ucp_ep_flush_nbx" */
  uint64_t failed_entry, failed_copy; /* UINT64_MAX: no copy */
  uint64_t oldest_entry, oldest_copy; /* the first get that went pending */
  bool any_pending;
} reshard__ucx_batch;

/* ---- Plan execution, shared by reshard_ucx_transfer.c and
 * reshard_ucx_load.c (defined in the first) ---- */

/* The enum name of a status ("UCS_ERR_TIMED_OUT"). */
const char *reshard__ucx_status_name(ucs_status_t status);

/* The end offset of the bytes [offset, offset + (n − 1)·stride + nbytes)
 * a run touches; false when it passes 2^64. */
bool reshard__ucx_run_end(uint64_t offset, uint64_t n, uint64_t stride,
                          uint64_t nbytes, uint64_t *end);

/* Records the batch's first failure; later ones are ignored. */
void reshard__ucx_note_failure(reshard__ucx_batch *st, ucs_status_t status,
                               const char *what, uint64_t entry, uint64_t copy);

/* Progresses until at most `limit` operations of `st` are pending; fails
 * the batch with UCS_ERR_TIMED_OUT when none completes for `timeout_ns`. */
void reshard__ucx_wait_pending(reshard_ucx *ux, reshard__ucx_batch *st,
                               uint64_t limit, int64_t timeout_ns);

/* Posts one get of `nbytes` from `src` (covered by `remote`'s key) into
 * `dst`; false when the batch has failed. */
bool reshard__ucx_post_get(reshard_ucx_peer *peer,
                           const reshard__ucx_remote *remote, void *dst,
                           uint64_t src, uint64_t nbytes, uint64_t entry,
                           uint64_t copy, reshard__ucx_batch *st);

/* Posts the flush of `peer`'s endpoint into `st`. */
void reshard__ucx_post_flush(reshard_ucx_peer *peer, reshard__ucx_batch *st);

/* After a failure: waits for, cancels or abandons what `st` has in flight
 * on `peers` (the batch's endpoints). Returns whether `st` may be freed. */
bool reshard__ucx_drain(reshard_ucx *ux, reshard_ucx_peer *const *peers,
                        size_t peer_count, reshard__ucx_batch *st,
                        int64_t timeout_ns);

/* Keeps `state` (malloc'd) until the worker is destroyed; false when
 * memory runs out (the state is then leaked on purpose: freeing it could
 * let a late completion write into freed memory). */
bool reshard__ucx_abandon(reshard_ucx *ux, void *state);

/* Fills `err` (when not NULL) with `status` and the formatted message;
 * returns -1. */
int reshard__ucx_fail(reshard_ucx_error *err, ucs_status_t status,
                      const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));

#endif /* RESHARD_UCX_INTERNAL_H */
