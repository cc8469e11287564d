/* Executing a PlanTransferResponse over UCX (reshard_ucx.h): the plan is
 * resolved against the connected peers and the registered memory and
 * checked whole, then each batch is posted as gets to its one source peer
 * and flushed. Runs are read from their columns; nothing is expanded. The
 * batch machinery (the checks both plans share, posting, completions,
 * timeouts, draining after a failure) is reshard_ucx_batch.c's. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "reshard_ucx_internal.h"

/* A plan resolved against the executor's peers and memory: per source its
 * peer and, per source region, the remote key that claims it; per target
 * region the local registration. NULL where nothing matches (an error
 * only when a copy uses it). */
typedef struct resolved {
  const Reshard__V1__PlanTransferResponse *plan;
  const Reshard__V1__TransferBatch *batch; /* the batch being executed */
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
  out->plan = plan;
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
  reshard__ucx_resolve_local(local, plan->region_ids, plan->n_region_ids,
                             out->local);
  return 0;
}

/* Checks batch `b` whole against the resolved plan. */
static int check_batch(const Reshard__V1__PlanTransferResponse *plan, size_t b,
                       const resolved *res, reshard_ucx_error *err) {
  const Reshard__V1__TransferBatch *batch = plan->batches[b];
  size_t n = batch->n_nbytes;
  size_t copy[] = {n, batch->n_source_region_index, batch->n_source_offset,
                   batch->n_region_index, batch->n_region_offset};
  size_t run[] = {batch->n_run_count, batch->n_source_stride,
                  batch->n_region_stride};
  if (reshard__ucx_check_columns(b, copy, sizeof copy / sizeof *copy, run,
                                 err) != 0) {
    return -1;
  }
  bool runs = batch->n_run_count != 0;
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
    reshard__ucx_entry_name(what, sizeof what, i, count, runs);
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
    if (reshard__ucx_check_target(b, what, plan->region_ids[r], res->local[r],
                                  batch->region_offset[i], count,
                                  runs ? batch->region_stride[i] : 0,
                                  batch->nbytes[i], err) != 0) {
      return -1;
    }
  }
  return 0;
}

/* Entry `i` of the batch being executed: its one source peer. */
static void transfer_entry(const void *arg, size_t i, reshard__ucx_entry *e) {
  const resolved *res = arg;
  const Reshard__V1__TransferBatch *batch = res->batch;
  const Reshard__V1__TransferSource *src =
      res->plan->sources[batch->source_index];
  bool runs = batch->n_run_count != 0;
  uint64_t j = batch->source_region_index[i];
  *e = (reshard__ucx_entry){
      .peer = res->peer[batch->source_index],
      .remote = res->remote[res->remote_start[batch->source_index] + j],
      .src = src->regions[j]->address + batch->source_offset[i],
      .src_stride = runs ? batch->source_stride[i] : 0,
      .dst = (uint8_t *)res->local[batch->region_index[i]]->region.address +
             batch->region_offset[i],
      .dst_stride = runs ? batch->region_stride[i] : 0,
      .count = runs ? batch->run_count[i] : 1,
      .nbytes = batch->nbytes[i],
  };
}

static int run_batch(reshard_ucx *ux,
                     const Reshard__V1__PlanTransferResponse *plan, size_t b,
                     resolved *res, const reshard_ucx_options *opt,
                     reshard_ucx_result *result, reshard_ucx_error *err) {
  const Reshard__V1__TransferBatch *batch = plan->batches[b];
  const Reshard__V1__TransferSource *src = plan->sources[batch->source_index];
  reshard_ucx_peer *peer = res->peer[batch->source_index];
  res->batch = batch;
  reshard__ucx_batch failed;
  if (reshard__ucx_run_batch(ux, b, batch->n_nbytes, transfer_entry, res, &peer,
                             1, opt, result, &failed, err) != 0) {
    return -1;
  }
  if (failed.status == UCS_OK) {
    return 0;
  }
  char copy[128], where[512];
  reshard__ucx_copy_name(copy, sizeof copy, b, batch->n_nbytes,
                         batch->n_run_count != 0 ? batch->run_count : NULL,
                         failed.failed_entry, failed.failed_copy);
  snprintf(where, sizeof where, "%s (source participant %s)", copy,
           src->participant_id);
  uint64_t total = 0;
  for (size_t k = 0; k < plan->n_batches; k++) {
    total += plan->batches[k]->bytes;
  }
  return reshard__ucx_fail_batch(err, where, &failed, result->bytes, total);
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
