/* The structures behind reshard_ucx.h, shared by its files:
 * reshard_ucx.c (context, worker, memory, peers), reshard_ucx_batch.c (the
 * batch machinery) and the two executors built on it,
 * reshard_ucx_transfer.c and reshard_ucx_load.c. Nothing outside
 * clients/ucx includes this. */
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
  bool undetectable; /* a peer of the batch cannot detect a dead peer */
} reshard__ucx_batch;

/* ---- Plan execution, shared by reshard_ucx_transfer.c and
 * reshard_ucx_load.c (defined in reshard_ucx_batch.c) ---- */

/* The end offset of the bytes [offset, offset + (n − 1)·stride + nbytes)
 * a run touches; false when it passes 2^64. */
bool reshard__ucx_run_end(uint64_t offset, uint64_t n, uint64_t stride,
                          uint64_t nbytes, uint64_t *end);

/* Sets out[r] to the registration in `local` (which may be NULL) of
 * region_ids[r], for the `n` ids; leaves it where none matches. */
void reshard__ucx_resolve_local(const reshard_ucx_memory *local,
                                char *const *region_ids, size_t n,
                                const reshard__ucx_local_region **out);

/* Names entry `i` of a batch for a check's message: "copy 7", or "entry 7
 * (a run of 12 copies)" when the batch has `runs` and the entry stands
 * for `n` ≠ 1 copies. */
void reshard__ucx_entry_name(char *out, size_t size, size_t i, uint64_t n,
                             bool runs);

/* Checks batch `b`'s column lengths: the `n_copy` copy columns' lengths
 * `copy` all equal, and the run columns' (run_count, source or part
 * stride, region stride) all 0 or that length. Returns 0, or -1 with
 * `err` filled. */
int reshard__ucx_check_columns(size_t b, const size_t *copy, size_t n_copy,
                               const size_t run[3], reshard_ucx_error *err);

/* Checks entry `what` of batch `b` against its target region `region_id`:
 * registered (`mine` not NULL) and holding its `count` copies of `nbytes`
 * at `offset`, `stride` apart. Returns 0, or -1 with `err` filled. */
int reshard__ucx_check_target(size_t b, const char *what, const char *region_id,
                              const reshard__ucx_local_region *mine,
                              uint64_t offset, uint64_t count, uint64_t stride,
                              uint64_t nbytes, reshard_ucx_error *err);

/* One entry of a batch as gets: `count` copies of `nbytes`, copy k read
 * from `src` + k·`src_stride` (covered by `remote`, a region of `peer`)
 * into `dst` + k·`dst_stride`. */
typedef struct reshard__ucx_entry {
  reshard_ucx_peer *peer;
  const reshard__ucx_remote *remote;
  uint64_t src, src_stride;
  uint8_t *dst;
  uint64_t dst_stride;
  uint64_t count, nbytes;
} reshard__ucx_entry;

/* Fills `out` with entry `i` of the batch being executed (checked
 * before); `arg` is the executor's. */
typedef void (*reshard__ucx_entry_fn)(const void *arg, size_t i,
                                      reshard__ucx_entry *out);

/* Executes batch `b`, of `n` entries given by `entry`: posts every get
 * (progressing the worker when too many are in flight), flushes each peer
 * it read once and checks every completion; after a failure, waits for,
 * cancels or abandons what is in flight (a peer whose requests are
 * abandoned is marked stuck and never used again). `used` holds the
 * `used_count` peers the batch reads whatever its entries (checked before any
 * get) and has room for every other peer an entry names. Adds the bytes and
 * gets that completed to `result`, and the batch when it completed. Returns 0
 * with the batch's first failure in `failed` (status UCS_OK: none), or -1 with
 * `err` filled when memory runs out. */
int reshard__ucx_run_batch(reshard_ucx *ux, size_t b, size_t n,
                           reshard__ucx_entry_fn entry, const void *arg,
                           reshard_ucx_peer **used, size_t used_count,
                           const reshard_ucx_options *opt,
                           reshard_ucx_result *result,
                           reshard__ucx_batch *failed, reshard_ucx_error *err);

/* Names copy `copy` of entry `entry` of batch `b` (of `n` entries) for a
 * failure: "batches[3] copy 17", "batches[3] entry 17 copy 2 of its run of
 * 8" (`run_count`: the batch's column, NULL without runs), or "batches[3]"
 * when `entry` is none of them (UINT64_MAX). Returns whether it named an
 * entry. */
bool reshard__ucx_copy_name(char *out, size_t size, size_t b, size_t n,
                            const uint64_t *run_count, uint64_t entry,
                            uint64_t copy);

/* Fills `err` with `failed`'s first failure at `where`: what failed, the
 * UCX status (its enum name, text and value), and `done` of the plan's
 * `total` bytes completed. Returns -1. */
int reshard__ucx_fail_batch(reshard_ucx_error *err, const char *where,
                            const reshard__ucx_batch *failed, uint64_t done,
                            uint64_t total);

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
