/* Executing a PlanTransferResponse over UCX (reshard_ucx.h): the plan is
 * resolved against the connected peers and the registered memory and
 * checked whole, then each batch is posted as gets to its one source peer
 * and flushed. Runs are read from their columns; nothing is expanded. The
 * batch machinery (posting, completions, timeouts, draining after a
 * failure) is shared with reshard_ucx_load.c through
 * reshard_ucx_internal.h. */
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
const char *reshard__ucx_status_name(ucs_status_t status) {
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

/* A plan resolved against the executor's peers and memory: per source its
 * peer and, per source region, the remote key that claims it; per target
 * region the local registration. NULL where nothing matches (an error
 * only when a copy uses it). */
typedef struct resolved {
  reshard_ucx_peer **peer;                 /* [n_sources] */
  const reshard__ucx_remote **remote;      /* [total source regions] */
  size_t *remote_start;                    /* [n_sources]: into remote */
  const reshard__ucx_local_region **local; /* [n_region_ids] */
} resolved;

static void resolved_free(resolved *r) {
  free(r->peer);
  free(r->remote);
  free(r->remote_start);
  free(r->local);
}

static int resolve(const Reshard__V1__PlanTransferResponse *plan,
                   reshard_ucx_peer *const *peers, size_t peer_count,
                   const reshard_ucx_memory *local, resolved *out,
                   reshard_ucx_error *err) {
  memset(out, 0, sizeof *out);
  size_t total = 0;
  for (size_t s = 0; s < plan->n_sources; s++) {
    total += plan->sources[s]->n_regions;
  }
  out->peer = calloc(plan->n_sources + 1, sizeof *out->peer);
  out->remote = calloc(total + 1, sizeof *out->remote);
  out->remote_start = calloc(plan->n_sources + 1, sizeof *out->remote_start);
  out->local = calloc(plan->n_region_ids + 1, sizeof *out->local);
  if (out->peer == NULL || out->remote == NULL || out->remote_start == NULL ||
      out->local == NULL) {
    resolved_free(out);
    return reshard__ucx_fail(err, UCS_ERR_NO_MEMORY, "reshard_ucx: no memory");
  }
  size_t at = 0;
  for (size_t s = 0; s < plan->n_sources; s++) {
    const Reshard__V1__TransferSource *src = plan->sources[s];
    for (size_t p = 0; p < peer_count && out->peer[s] == NULL; p++) {
      if (strcmp(peers[p]->participant_id, src->participant_id) == 0) {
        out->peer[s] = peers[p];
      }
    }
    out->remote_start[s] = at;
    for (size_t j = 0; j < src->n_regions; j++, at++) {
      reshard_ucx_peer *peer = out->peer[s];
      for (size_t k = 0; peer != NULL && k < peer->count; k++) {
        if (strcmp(peer->regions[k].region_id, src->regions[j]->region_id) ==
            0) {
          out->remote[at] = &peer->regions[k];
          break;
        }
      }
    }
  }
  for (size_t r = 0; local != NULL && r < plan->n_region_ids; r++) {
    for (size_t k = 0; k < local->count; k++) {
      if (strcmp(local->regions[k].region.region_id, plan->region_ids[r]) ==
          0) {
        out->local[r] = &local->regions[k];
        break;
      }
    }
  }
  return 0;
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

/* "entry 7" for a copy, "entry 7 (a run of 12 copies)" for a run. */
static void entry_name(char *out, size_t size, size_t i, uint64_t n,
                       bool runs) {
  if (runs && n != 1) {
    snprintf(out, size, "entry %zu (a run of %llu copies)", i,
             (unsigned long long)n);
  } else {
    snprintf(out, size, "copy %zu", i);
  }
}

/* Checks batch `b` whole against the resolved plan. */
static int check_batch(const Reshard__V1__PlanTransferResponse *plan, size_t b,
                       const resolved *res, reshard_ucx_error *err) {
  const Reshard__V1__TransferBatch *batch = plan->batches[b];
  size_t n = batch->n_source_region_index;
  if (batch->n_source_offset != n || batch->n_region_index != n ||
      batch->n_region_offset != n || batch->n_nbytes != n) {
    return reshard__ucx_fail(err, 0,
                             "batches[%zu]: the copy columns have different "
                             "lengths",
                             b);
  }
  bool runs = batch->n_run_count != 0;
  if ((runs || batch->n_source_stride != 0 || batch->n_region_stride != 0) &&
      (batch->n_run_count != n || batch->n_source_stride != n ||
       batch->n_region_stride != n)) {
    return reshard__ucx_fail(err, 0,
                             "batches[%zu]: the run columns are neither empty "
                             "nor of the copy columns' length",
                             b);
  }
  if (batch->source_index >= plan->n_sources) {
    return reshard__ucx_fail(err, 0,
                             "batches[%zu]: source_index %llu is past the %zu "
                             "sources",
                             b, (unsigned long long)batch->source_index,
                             plan->n_sources);
  }
  const Reshard__V1__TransferSource *src = plan->sources[batch->source_index];
  reshard_ucx_peer *peer = res->peer[batch->source_index];
  if (peer == NULL) {
    return reshard__ucx_fail(err, 0,
                             "batches[%zu]: source participant %s is not a "
                             "connected peer",
                             b, src->participant_id);
  }
  for (size_t i = 0; i < n; i++) {
    uint64_t count = runs ? batch->run_count[i] : 1;
    char what[64];
    entry_name(what, sizeof what, i, count, runs);
    if (count == 0) {
      return reshard__ucx_fail(err, 0, "batches[%zu] %s: run_count is 0", b,
                               what);
    }
    uint64_t j = batch->source_region_index[i];
    uint64_t r = batch->region_index[i];
    if (j >= src->n_regions || r >= plan->n_region_ids) {
      return reshard__ucx_fail(err, 0,
                               "batches[%zu] %s: source region %llu or target "
                               "region %llu is out of range",
                               b, what, (unsigned long long)j,
                               (unsigned long long)r);
    }
    const Reshard__V1__Region *plan_region = src->regions[j];
    const reshard__ucx_remote *remote =
        res->remote[res->remote_start[batch->source_index] + j];
    if (remote == NULL) {
      return reshard__ucx_fail(err, 0,
                               "batches[%zu] %s: source region %s of "
                               "participant %s has no remote key from the peer",
                               b, what, plan_region->region_id,
                               src->participant_id);
    }
    uint64_t lo = 0, hi = 0;
    if (__builtin_add_overflow(plan_region->address, batch->source_offset[i],
                               &lo) ||
        !reshard__ucx_run_end(lo, count, runs ? batch->source_stride[i] : 0,
                              batch->nbytes[i], &hi) ||
        lo < remote->address || hi - remote->address > remote->nbytes) {
      return reshard__ucx_fail(
          err, 0,
          "batches[%zu] %s: source region %s of participant %s: bytes "
          "[0x%llx, 0x%llx) are not covered by its remote key [0x%llx, "
          "0x%llx)",
          b, what, plan_region->region_id, src->participant_id,
          (unsigned long long)lo, (unsigned long long)hi,
          (unsigned long long)remote->address,
          (unsigned long long)(remote->address + remote->nbytes));
    }
    const reshard__ucx_local_region *mine = res->local[r];
    if (mine == NULL) {
      return reshard__ucx_fail(err, 0,
                               "batches[%zu] %s: target region %s is not "
                               "registered with this executor",
                               b, what, plan->region_ids[r]);
    }
    uint64_t end = 0;
    if (!reshard__ucx_run_end(batch->region_offset[i], count,
                              runs ? batch->region_stride[i] : 0,
                              batch->nbytes[i], &end) ||
        end > mine->region.nbytes) {
      return reshard__ucx_fail(err, 0,
                               "batches[%zu] %s: target region %s: offsets up "
                               "to %llu pass its %llu registered bytes",
                               b, what, plan->region_ids[r],
                               (unsigned long long)end,
                               (unsigned long long)mine->region.nbytes);
    }
  }
  return 0;
}

/* ---- One batch ---- */

/* Lives in the request's reserved space (ucp_params.request_size in
 * reshard_ucx_open): which copy a completing get was. */
typedef struct get_record {
  uint64_t entry, copy, nbytes;
  bool is_flush;
} get_record;

_Static_assert(sizeof(get_record) <= 64, "request_size in reshard_ucx_open");

void reshard__ucx_note_failure(reshard__ucx_batch *st, ucs_status_t status,
                               const char *what, uint64_t entry,
                               uint64_t copy) {
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
    reshard__ucx_note_failure(
        st, status, rec->is_flush ? "ucp_ep_flush_nbx" : "ucp_get_nbx",
        rec->is_flush ? UINT64_MAX : rec->entry, rec->copy);
  }
  st->pending--;
  ucp_request_free(request);
}

/* Progresses until at most `limit` operations are pending. Fails the batch
 * with UCS_ERR_TIMED_OUT when none completes for `timeout_ns`: a peer
 * that stopped answering. */
void reshard__ucx_wait_pending(reshard_ucx *ux, reshard__ucx_batch *st,
                               uint64_t limit, int64_t timeout_ns) {
  int64_t deadline = now_ns() + timeout_ns;
  uint64_t seen = st->pending;
  while (st->pending > limit) {
    ucp_worker_progress(ux->worker);
    if (st->pending < seen) {
      seen = st->pending;
      deadline = now_ns() + timeout_ns;
    } else if (now_ns() > deadline) {
      reshard__ucx_note_failure(st, UCS_ERR_TIMED_OUT,
                                "waiting for completions", st->oldest_entry,
                                st->oldest_copy);
      return;
    }
  }
}

/* Posts one get; false when the batch has failed. */
bool reshard__ucx_post_get(reshard_ucx_peer *peer,
                           const reshard__ucx_remote *remote, void *dst,
                           uint64_t src, uint64_t nbytes, uint64_t entry,
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
    reshard__ucx_note_failure(st, UCS_PTR_STATUS(req), "ucp_get_nbx", entry,
                              copy);
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

void reshard__ucx_post_flush(reshard_ucx_peer *peer, reshard__ucx_batch *st) {
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
    reshard__ucx_note_failure(st, UCS_PTR_STATUS(req), "ucp_ep_flush_nbx",
                              UINT64_MAX, 0);
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
bool reshard__ucx_drain(reshard_ucx *ux, reshard_ucx_peer *const *peers,
                        size_t peer_count, reshard__ucx_batch *st,
                        int64_t timeout_ns) {
  reshard__ucx_wait_pending(ux, st, 0, timeout_ns);
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

/* "batches[3] copy 17" or "batches[3] entry 17 copy 2 of its run of 8". */
static void copy_name(const Reshard__V1__TransferBatch *batch, size_t b,
                      uint64_t entry, uint64_t copy, char *out, size_t size) {
  if (entry == UINT64_MAX || entry >= batch->n_nbytes) {
    snprintf(out, size, "batches[%zu]", b);
  } else if (batch->n_run_count != 0 && batch->run_count[entry] != 1) {
    snprintf(out, size, "batches[%zu] entry %llu copy %llu of its run of %llu",
             b, (unsigned long long)entry, (unsigned long long)copy,
             (unsigned long long)batch->run_count[entry]);
  } else {
    snprintf(out, size, "batches[%zu] copy %llu", b, (unsigned long long)entry);
  }
}

static int run_batch(reshard_ucx *ux,
                     const Reshard__V1__PlanTransferResponse *plan, size_t b,
                     const resolved *res, const reshard_ucx_options *opt,
                     reshard_ucx_result *result, reshard_ucx_error *err) {
  const Reshard__V1__TransferBatch *batch = plan->batches[b];
  const Reshard__V1__TransferSource *src = plan->sources[batch->source_index];
  reshard_ucx_peer *peer = res->peer[batch->source_index];
  int64_t timeout_ns =
      (opt->batch_timeout_ms > 0 ? opt->batch_timeout_ms : 60000) * 1000000ll;
  reshard__ucx_batch *st = calloc(1, sizeof *st);
  if (st == NULL) {
    return reshard__ucx_fail(err, UCS_ERR_NO_MEMORY, "reshard_ucx: no memory");
  }
  st->status = UCS_OK;
  bool runs = batch->n_run_count != 0;
  uint64_t get = 0;
  if (peer->ep == NULL || peer->stuck || peer->failure != UCS_OK) {
    reshard__ucx_note_failure(
        st, peer->failure != UCS_OK ? peer->failure : UCS_ERR_CANCELED,
        "an earlier failure of the endpoint", UINT64_MAX, 0);
  }
  for (size_t i = 0; i < batch->n_nbytes && st->status == UCS_OK; i++) {
    uint64_t count = runs ? batch->run_count[i] : 1;
    uint64_t j = batch->source_region_index[i];
    const reshard__ucx_remote *remote =
        res->remote[res->remote_start[batch->source_index] + j];
    uint64_t src_at = src->regions[j]->address + batch->source_offset[i];
    uint8_t *dst_at =
        (uint8_t *)res->local[batch->region_index[i]]->region.address +
        batch->region_offset[i];
    uint64_t src_stride = runs ? batch->source_stride[i] : 0;
    uint64_t dst_stride = runs ? batch->region_stride[i] : 0;
    for (uint64_t k = 0; k < count; k++, get++) {
      if (opt->before_get != NULL) {
        opt->before_get(opt->arg, b, get);
      }
      if (peer->failure != UCS_OK) {
        reshard__ucx_note_failure(st, peer->failure, "the endpoint", i, k);
        break;
      }
      if (!reshard__ucx_post_get(peer, remote, dst_at + k * dst_stride,
                                 src_at + k * src_stride, batch->nbytes[i], i,
                                 k, st)) {
        break;
      }
      if (st->pending >= MAX_IN_FLIGHT) {
        reshard__ucx_wait_pending(ux, st, MAX_IN_FLIGHT / 2, timeout_ns);
        if (st->status != UCS_OK) {
          break;
        }
      }
    }
  }
  /* One flush to one peer completes the batch. */
  if (st->status == UCS_OK) {
    reshard__ucx_post_flush(peer, st);
    reshard__ucx_wait_pending(ux, st, 0, timeout_ns);
  }
  if (st->status == UCS_OK && peer->failure != UCS_OK) {
    reshard__ucx_note_failure(st, peer->failure, "the endpoint", UINT64_MAX, 0);
  }
  bool owned =
      st->status == UCS_OK || reshard__ucx_drain(ux, &peer, 1, st, timeout_ns);
  result->bytes += st->bytes;
  result->gets += st->gets;
  reshard__ucx_batch failed = *st;
  if (owned) {
    free(st);
  }
  if (failed.status == UCS_OK) {
    result->batches++;
    return 0;
  }
  char where[128];
  copy_name(batch, b, failed.failed_entry, failed.failed_copy, where,
            sizeof where);
  uint64_t total = 0;
  for (size_t k = 0; k < plan->n_batches; k++) {
    total += plan->batches[k]->bytes;
  }
  return reshard__ucx_fail(
      err, failed.status,
      "%s (source participant %s): %s failed: %s (%s, %d)%s; %llu of the "
      "plan's %llu bytes completed",
      where, src->participant_id, failed.failed_what,
      reshard__ucx_status_name(failed.status), ucs_status_string(failed.status),
      (int)failed.status,
      failed.status == UCS_ERR_TIMED_OUT
          ? (peer->no_failure_detection
                 ? " (no get completed for the batch timeout; these "
                   "transports cannot detect a dead peer)"
                 : " (no get completed for the batch timeout)")
          : "",
      (unsigned long long)result->bytes, (unsigned long long)total);
}

int reshard_ucx_execute_transfer(
    reshard_ucx *ux, const Reshard__V1__PlanTransferResponse *plan,
    reshard_ucx_peer *const *peers, size_t peer_count,
    const reshard_ucx_memory *local, const reshard_ucx_options *options,
    reshard_ucx_result *result, reshard_ucx_error *err) {
  reshard_ucx_result scratch;
  if (result == NULL) {
    result = &scratch;
  }
  memset(result, 0, sizeof *result);
  reshard_ucx_options none = {0};
  if (options == NULL) {
    options = &none;
  }
  resolved res;
  if (resolve(plan, peers, peer_count, local, &res, err) != 0) {
    return -1;
  }
  int rc = 0;
  for (size_t b = 0; b < plan->n_batches && rc == 0; b++) {
    rc = check_batch(plan, b, &res, err);
  }
  for (size_t b = 0; b < plan->n_batches && rc == 0; b++) {
    rc = run_batch(ux, plan, b, &res, options, result, err);
  }
  resolved_free(&res);
  return rc;
}
