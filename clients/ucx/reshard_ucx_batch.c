/* The batch machinery both executors share (reshard_ucx_internal.h):
 * the checks common to a PlanTransfer and a PlanLoad batch, posting gets
 * and flushes, completions, timeouts, draining after a failure, and the
 * loop that executes one batch from its entries. reshard_ucx_transfer.c
 * and reshard_ucx_load.c resolve their plans and say where each entry
 * reads. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "reshard_ucx_internal.h"

/* Gets in flight per batch before the executor progresses the worker:
 * transports that emulate RMA in software queue every get, and a batch may
 * hold 4 096 copies, or many more with runs. */
#define MAX_IN_FLIGHT 1024

static int64_t now_ns(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (int64_t)ts.tv_sec * 1000000000ll + ts.tv_nsec;
}

/* The enum name of the statuses a transfer meets, next to UCX's own text. */
static const char *status_name(ucs_status_t status) {
  switch (status) {
  case UCS_OK:
    return "UCS_OK";
  case UCS_ERR_IO_ERROR:
    return "UCS_ERR_IO_ERROR";
  case UCS_ERR_NO_MEMORY:
    return "UCS_ERR_NO_MEMORY";
  case UCS_ERR_INVALID_PARAM:
    return "UCS_ERR_INVALID_PARAM";
  case UCS_ERR_UNREACHABLE:
    return "UCS_ERR_UNREACHABLE";
  case UCS_ERR_TIMED_OUT:
    return "UCS_ERR_TIMED_OUT";
  case UCS_ERR_CANCELED:
    return "UCS_ERR_CANCELED";
  case UCS_ERR_UNSUPPORTED:
    return "UCS_ERR_UNSUPPORTED";
  case UCS_ERR_REJECTED:
    return "UCS_ERR_REJECTED";
  case UCS_ERR_NOT_CONNECTED:
    return "UCS_ERR_NOT_CONNECTED";
  case UCS_ERR_CONNECTION_RESET:
    return "UCS_ERR_CONNECTION_RESET";
  case UCS_ERR_ENDPOINT_TIMEOUT:
    return "UCS_ERR_ENDPOINT_TIMEOUT";
  case UCS_ERR_SHMEM_SEGMENT:
    return "UCS_ERR_SHMEM_SEGMENT";
  case UCS_ERR_NO_RESOURCE:
    return "UCS_ERR_NO_RESOURCE";
  default:
    return "UCS_ERR";
  }
}

/* The bytes [offset, offset + (n − 1)·stride + nbytes) a run touches, as
 * an end offset; false when it passes 2^64. */
bool reshard__ucx_run_end(uint64_t offset, uint64_t n, uint64_t stride,
                          uint64_t nbytes, uint64_t *end) {
  uint64_t span;
  return !__builtin_mul_overflow(n - 1, stride, &span) &&
         !__builtin_add_overflow(span, nbytes, &span) &&
         !__builtin_add_overflow(offset, span, end);
}

/* ---- Posting and completing ---- */

/* Lives in the request's reserved space (ucp_params.request_size in
 * reshard_ucx_open): which copy a completing get was. */
typedef struct get_record {
  uint64_t entry, copy, nbytes;
  bool is_flush;
} get_record;

_Static_assert(sizeof(get_record) <= 64, "request_size in reshard_ucx_open");

/* Records the batch's first failure; later ones are ignored. */
static void note_failure(reshard__ucx_batch *st, ucs_status_t status,
                         const char *what, uint64_t entry, uint64_t copy) {
  if (st->status == UCS_OK) {
    st->status = status;
    st->failed_what = what;
    st->failed_entry = entry;
    st->failed_copy = copy;
  }
}

static void completed(void *request, ucs_status_t status, void *user_data) {
  reshard__ucx_batch *st = user_data;
  get_record *rec = request;
  if (status == UCS_OK) {
    if (!rec->is_flush) {
      st->bytes += rec->nbytes;
      st->gets++;
    }
  } else {
    note_failure(st, status, rec->is_flush ? "ucp_ep_flush_nbx" : "ucp_get_nbx",
                 rec->is_flush ? UINT64_MAX : rec->entry, rec->copy);
  }
  st->pending--;
  ucp_request_free(request);
}

/* Progresses until at most `limit` operations are pending. Fails the batch
 * with UCS_ERR_TIMED_OUT when none completes for `timeout_ns`: a peer
 * that stopped answering. */
static void wait_pending(reshard_ucx *ux, reshard__ucx_batch *st,
                         uint64_t limit, int64_t timeout_ns) {
  int64_t deadline = now_ns() + timeout_ns;
  uint64_t seen = st->pending;
  while (st->pending > limit) {
    ucp_worker_progress(ux->worker);
    if (st->pending < seen) {
      seen = st->pending;
      deadline = now_ns() + timeout_ns;
    } else if (now_ns() > deadline) {
      note_failure(st, UCS_ERR_TIMED_OUT, "waiting for completions",
                   st->oldest_entry, st->oldest_copy);
      return;
    }
  }
}

/* Posts one get of `nbytes` from `src` (covered by `remote`'s key) into
 * `dst`; false when the batch has failed. */
static bool post_get(reshard_ucx_peer *peer, const reshard__ucx_remote *remote,
                     void *dst, uint64_t src, uint64_t nbytes, uint64_t entry,
                     uint64_t copy, reshard__ucx_batch *st) {
  ucp_request_param_t param = {
      .op_attr_mask = UCP_OP_ATTR_FIELD_CALLBACK | UCP_OP_ATTR_FIELD_USER_DATA,
      .cb = {.send = completed},
      .user_data = st,
  };
  ucs_status_ptr_t req =
      ucp_get_nbx(peer->ep, dst, nbytes, src, remote->rkey, &param);
  if (req == NULL) {
    st->bytes += nbytes;
    st->gets++;
    return true;
  }
  if (UCS_PTR_IS_ERR(req)) {
    note_failure(st, UCS_PTR_STATUS(req), "ucp_get_nbx", entry, copy);
    return false;
  }
  /* Single-threaded worker: the callback runs only inside a later
   * progress, so the record is complete before it can be read. */
  get_record *rec = req;
  *rec = (get_record){.entry = entry, .copy = copy, .nbytes = nbytes};
  st->pending++;
  if (!st->any_pending) {
    st->any_pending = true;
    st->oldest_entry = entry;
    st->oldest_copy = copy;
  }
  return st->status == UCS_OK;
}

/* Posts the flush of `peer`'s endpoint into `st`. */
static void post_flush(reshard_ucx_peer *peer, reshard__ucx_batch *st) {
  ucp_request_param_t param = {
      .op_attr_mask = UCP_OP_ATTR_FIELD_CALLBACK | UCP_OP_ATTR_FIELD_USER_DATA,
      .cb = {.send = completed},
      .user_data = st,
  };
  ucs_status_ptr_t req = ucp_ep_flush_nbx(peer->ep, &param);
  if (req == NULL) {
    return;
  }
  if (UCS_PTR_IS_ERR(req)) {
    note_failure(st, UCS_PTR_STATUS(req), "ucp_ep_flush_nbx", UINT64_MAX, 0);
    return;
  }
  get_record *rec = req;
  *rec = (get_record){.is_flush = true};
  st->pending++;
}

/* After a failure, every request in flight must be finished with before
 * the call returns. A failed peer's requests complete with its error; if
 * they do not, every endpoint of the batch with failure detection is
 * closed forcibly, which cancels them. What still remains (a peer without
 * failure detection) is abandoned with its state, and the batch's
 * endpoints never used again. Returns whether `st` may be freed. */
static bool drain(reshard_ucx *ux, reshard_ucx_peer *const *peers,
                  size_t peer_count, reshard__ucx_batch *st,
                  int64_t timeout_ns) {
  wait_pending(ux, st, 0, timeout_ns);
  if (st->pending == 0) {
    return true;
  }
  for (size_t p = 0; p < peer_count; p++) {
    reshard_ucx_peer *peer = peers[p];
    if (peer->failure == UCS_OK) {
      peer->failure = st->status;
    }
    if (peer->no_failure_detection || peer->ep == NULL) {
      continue;
    }
    ucp_request_param_t param = {.op_attr_mask = UCP_OP_ATTR_FIELD_FLAGS,
                                 .flags = UCP_EP_CLOSE_FLAG_FORCE};
    ucs_status_ptr_t req = ucp_ep_close_nbx(peer->ep, &param);
    peer->ep = NULL;
    int64_t deadline = now_ns() + timeout_ns;
    bool closing = req != NULL && !UCS_PTR_IS_ERR(req);
    while ((st->pending > 0 ||
            (closing && ucp_request_check_status(req) == UCS_INPROGRESS)) &&
           now_ns() < deadline) {
      ucp_worker_progress(ux->worker);
    }
    if (closing && ucp_request_check_status(req) != UCS_INPROGRESS) {
      ucp_request_free(req);
    }
  }
  if (st->pending == 0) {
    return true;
  }
  for (size_t p = 0; p < peer_count; p++) {
    peers[p]->stuck = true;
  }
  reshard__ucx_abandon(ux, st);
  return false;
}

/* ---- Checking a batch ---- */

void reshard__ucx_resolve_local(const reshard_ucx_memory *local,
                                char *const *region_ids, size_t n,
                                const reshard__ucx_local_region **out) {
  for (size_t r = 0; local != NULL && r < n; r++) {
    for (size_t k = 0; k < local->count; k++) {
      if (strcmp(local->regions[k].region.region_id, region_ids[r]) == 0) {
        out[r] = &local->regions[k];
        break;
      }
    }
  }
}

/* "copy 7" for a copy, "entry 7 (a run of 12 copies)" for a run. */
void reshard__ucx_entry_name(char *out, size_t size, size_t i, uint64_t n,
                             bool runs) {
  if (runs && n != 1) {
    snprintf(out, size, "entry %zu (a run of %llu copies)", i,
             (unsigned long long)n);
  } else {
    snprintf(out, size, "copy %zu", i);
  }
}

int reshard__ucx_check_columns(size_t b, const size_t *copy, size_t n_copy,
                               const size_t run[3], reshard_ucx_error *err) {
  size_t n = copy[0];
  for (size_t c = 1; c < n_copy; c++) {
    if (copy[c] != n) {
      return reshard__ucx_fail(err, 0,
                               "batches[%zu]: the copy columns have different "
                               "lengths",
                               b);
    }
  }
  if ((run[0] != 0 || run[1] != 0 || run[2] != 0) &&
      (run[0] != n || run[1] != n || run[2] != n)) {
    return reshard__ucx_fail(err, 0,
                             "batches[%zu]: the run columns are neither empty "
                             "nor of the copy columns' length",
                             b);
  }
  return 0;
}

int reshard__ucx_check_target(size_t b, const char *what, const char *region_id,
                              const reshard__ucx_local_region *mine,
                              uint64_t offset, uint64_t count, uint64_t stride,
                              uint64_t nbytes, reshard_ucx_error *err) {
  if (mine == NULL) {
    return reshard__ucx_fail(err, 0,
                             "batches[%zu] %s: target region %s is not "
                             "registered with this executor",
                             b, what, region_id);
  }
  uint64_t end = 0;
  if (!reshard__ucx_run_end(offset, count, stride, nbytes, &end) ||
      end > mine->region.nbytes) {
    return reshard__ucx_fail(err, 0,
                             "batches[%zu] %s: target region %s: offsets up "
                             "to %llu pass its %llu registered bytes",
                             b, what, region_id, (unsigned long long)end,
                             (unsigned long long)mine->region.nbytes);
  }
  return 0;
}

/* ---- Executing a batch ---- */

/* False, with the batch failed, when `peer` failed earlier. */
static bool usable(reshard_ucx_peer *peer, reshard__ucx_batch *st) {
  if (peer->ep == NULL || peer->stuck || peer->failure != UCS_OK) {
    note_failure(st, peer->failure != UCS_OK ? peer->failure : UCS_ERR_CANCELED,
                 "an earlier failure of the endpoint", UINT64_MAX, 0);
    return false;
  }
  return true;
}

/* Adds `peer` to the batch's `*count` peers in `used`; false when it
 * cannot be used. */
static bool use_peer(reshard_ucx_peer **used, size_t *count,
                     reshard_ucx_peer *peer, reshard__ucx_batch *st) {
  for (size_t k = *count; k > 0; k--) {
    if (used[k - 1] == peer) {
      return true;
    }
  }
  used[(*count)++] = peer;
  return usable(peer, st);
}

int reshard__ucx_run_batch(reshard_ucx *ux, size_t b, size_t n,
                           reshard__ucx_entry_fn entry, const void *arg,
                           reshard_ucx_peer **used, size_t used_count,
                           const reshard_ucx_options *opt,
                           reshard_ucx_result *result,
                           reshard__ucx_batch *failed, reshard_ucx_error *err) {
  int64_t timeout_ns =
      (opt->batch_timeout_ms > 0 ? opt->batch_timeout_ms : 60000) * 1000000ll;
  reshard__ucx_batch *st = calloc(1, sizeof *st);
  if (st == NULL) {
    return reshard__ucx_fail(err, UCS_ERR_NO_MEMORY, "reshard_ucx: no memory");
  }
  st->status = UCS_OK;
  for (size_t p = 0; p < used_count && st->status == UCS_OK; p++) {
    usable(used[p], st);
  }
  uint64_t get = 0;
  for (size_t i = 0; i < n && st->status == UCS_OK; i++) {
    reshard__ucx_entry e;
    entry(arg, i, &e);
    if (!use_peer(used, &used_count, e.peer, st)) {
      break;
    }
    for (uint64_t k = 0; k < e.count; k++, get++) {
      if (opt->before_get != NULL) {
        opt->before_get(opt->arg, b, get);
      }
      if (e.peer->failure != UCS_OK) {
        note_failure(st, e.peer->failure, "the endpoint", i, k);
        break;
      }
      if (!post_get(e.peer, e.remote, e.dst + k * e.dst_stride,
                    e.src + k * e.src_stride, e.nbytes, i, k, st)) {
        break;
      }
      if (st->pending >= MAX_IN_FLIGHT) {
        wait_pending(ux, st, MAX_IN_FLIGHT / 2, timeout_ns);
        if (st->status != UCS_OK) {
          break;
        }
      }
    }
  }
  /* One flush per peer the batch read completes it. */
  for (size_t p = 0; p < used_count && st->status == UCS_OK; p++) {
    post_flush(used[p], st);
  }
  if (st->status == UCS_OK) {
    wait_pending(ux, st, 0, timeout_ns);
  }
  bool undetectable = false;
  for (size_t p = 0; p < used_count; p++) {
    if (st->status == UCS_OK && used[p]->failure != UCS_OK) {
      note_failure(st, used[p]->failure, "the endpoint", UINT64_MAX, 0);
    }
    undetectable = undetectable || used[p]->no_failure_detection;
  }
  bool owned =
      st->status == UCS_OK || drain(ux, used, used_count, st, timeout_ns);
  result->bytes += st->bytes;
  result->gets += st->gets;
  *failed = *st;
  failed->undetectable = undetectable;
  if (owned) {
    free(st);
  }
  if (failed->status == UCS_OK) {
    result->batches++;
  }
  return 0;
}

bool reshard__ucx_copy_name(char *out, size_t size, size_t b, size_t n,
                            const uint64_t *run_count, uint64_t entry,
                            uint64_t copy) {
  if (entry == UINT64_MAX || entry >= n) {
    snprintf(out, size, "batches[%zu]", b);
    return false;
  }
  if (run_count != NULL && run_count[entry] != 1) {
    snprintf(out, size, "batches[%zu] entry %llu copy %llu of its run of %llu",
             b, (unsigned long long)entry, (unsigned long long)copy,
             (unsigned long long)run_count[entry]);
  } else {
    snprintf(out, size, "batches[%zu] copy %llu", b, (unsigned long long)entry);
  }
  return true;
}

int reshard__ucx_fail_batch(reshard_ucx_error *err, const char *where,
                            const reshard__ucx_batch *failed, uint64_t done,
                            uint64_t total) {
  return reshard__ucx_fail(
      err, failed->status,
      "%s: %s failed: %s (%s, %d)%s; %llu of the plan's %llu bytes completed",
      where, failed->failed_what, status_name(failed->status),
      ucs_status_string(failed->status), (int)failed->status,
      failed->status == UCS_ERR_TIMED_OUT
          ? (failed->undetectable
                 ? " (no get completed for the batch timeout; these "
                   "transports cannot detect a dead peer)"
                 : " (no get completed for the batch timeout)")
          : "",
      (unsigned long long)done, (unsigned long long)total);
}
