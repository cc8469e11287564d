/* The UCP context and worker, registered memory and connected peers of
 * reshard_ucx.h. Plan execution is in reshard_ucx_transfer.c and
 * reshard_ucx_load.c, on reshard_ucx_batch.c's batch machinery. */
#include <errno.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "reshard_ucx_internal.h"

/* How long closing an endpoint may wait for its flush before the endpoint
 * is abandoned (a peer that died without UCX noticing yet). */
#define CLOSE_WAIT_NS (5ll * 1000 * 1000 * 1000)

int reshard__ucx_fail(reshard_ucx_error *err, ucs_status_t status,
                      const char *fmt, ...) {
  if (err != NULL) {
    err->ucs_status = (int)status;
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(err->message, sizeof err->message, fmt, ap);
    va_end(ap);
  }
  return -1;
}

static int64_t now_ns(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (int64_t)ts.tv_sec * 1000000000ll + ts.tv_nsec;
}

bool reshard__ucx_abandon(reshard_ucx *ux, void *state) {
  void **grown =
      realloc(ux->abandoned, (ux->abandoned_count + 1) * sizeof *grown);
  if (grown == NULL) {
    return false;
  }
  ux->abandoned = grown;
  ux->abandoned[ux->abandoned_count++] = state;
  return true;
}

int reshard_ucx_open(reshard_ucx **out, reshard_ucx_error *err) {
  *out = NULL;
  reshard_ucx *ux = calloc(1, sizeof *ux);
  if (ux == NULL) {
    return reshard__ucx_fail(err, UCS_ERR_NO_MEMORY, "reshard_ucx: no memory");
  }
  ucp_config_t *config = NULL;
  ucs_status_t status = ucp_config_read(NULL, NULL, &config);
  if (status != UCS_OK) {
    free(ux);
    return reshard__ucx_fail(err, status, "ucp_config_read: %s",
                             ucs_status_string(status));
  }
  /* Requests carry the executor's per-get record (reshard_ucx_batch.c),
   * so a completion callback knows which copy it finished without a table
   * on the side. */
  ucp_params_t params = {
      .field_mask = UCP_PARAM_FIELD_FEATURES | UCP_PARAM_FIELD_REQUEST_SIZE,
      .features = UCP_FEATURE_RMA | UCP_FEATURE_WAKEUP,
      .request_size = 64,
  };
  status = ucp_init(&params, config, &ux->context);
  ucp_config_release(config);
  if (status != UCS_OK) {
    free(ux);
    return reshard__ucx_fail(err, status, "ucp_init: %s",
                             ucs_status_string(status));
  }
  ucp_worker_params_t wparams = {
      .field_mask = UCP_WORKER_PARAM_FIELD_THREAD_MODE,
      .thread_mode = UCS_THREAD_MODE_SINGLE,
  };
  status = ucp_worker_create(ux->context, &wparams, &ux->worker);
  if (status != UCS_OK) {
    ucp_cleanup(ux->context);
    free(ux);
    return reshard__ucx_fail(err, status, "ucp_worker_create: %s",
                             ucs_status_string(status));
  }
  const char *what = "ucp_worker_get_address";
  status =
      ucp_worker_get_address(ux->worker, &ux->address, &ux->address_length);
  if (status == UCS_OK) {
    what = "ucp_worker_get_efd";
    status = ucp_worker_get_efd(ux->worker, &ux->event_fd);
  }
  if (status != UCS_OK) {
    reshard_ucx_close(ux);
    return reshard__ucx_fail(err, status, "%s: %s", what,
                             ucs_status_string(status));
  }
  *out = ux;
  return 0;
}

void reshard_ucx_close(reshard_ucx *ux) {
  if (ux == NULL) {
    return;
  }
  if (ux->address != NULL) {
    ucp_worker_release_address(ux->worker, ux->address);
  }
  ucp_worker_destroy(ux->worker);
  ucp_cleanup(ux->context);
  for (size_t i = 0; i < ux->abandoned_count; i++) {
    free(ux->abandoned[i]);
  }
  free(ux->abandoned);
  free(ux);
}

void reshard_ucx_worker_address(const reshard_ucx *ux, const void **address,
                                size_t *length) {
  *address = ux->address;
  *length = ux->address_length;
}

int reshard_ucx_serve(reshard_ucx *ux, int timeout_ms, reshard_ucx_error *err) {
  while (ucp_worker_progress(ux->worker) != 0) {
  }
  ucs_status_t status = ucp_worker_arm(ux->worker);
  if (status == UCS_ERR_BUSY) {
    return 0; /* events arrived meanwhile: the caller progresses again */
  }
  if (status != UCS_OK) {
    return reshard__ucx_fail(err, status, "ucp_worker_arm: %s",
                             ucs_status_string(status));
  }
  struct pollfd pfd = {.fd = ux->event_fd, .events = POLLIN};
  if (poll(&pfd, 1, timeout_ms) < 0 && errno != EINTR) {
    return reshard__ucx_fail(err, UCS_ERR_IO_ERROR, "poll: %s",
                             strerror(errno));
  }
  return 0;
}

/* ---- Local memory ---- */

void reshard_ucx_memory_release(reshard_ucx_memory *memory) {
  if (memory == NULL) {
    return;
  }
  for (size_t i = 0; i < memory->count; i++) {
    reshard__ucx_local_region *r = &memory->regions[i];
    if (r->rkey != NULL) {
      ucp_rkey_buffer_release(r->rkey);
    }
    if (r->memh != NULL) {
      ucp_mem_unmap(memory->ux->context, r->memh);
    }
    free((char *)r->region.region_id);
  }
  free(memory->regions);
  free(memory);
}

static int memory_map(reshard_ucx *ux, const reshard_ucx_region *regions,
                      size_t count, bool allocate, reshard_ucx_memory **out,
                      reshard_ucx_error *err) {
  *out = NULL;
  reshard_ucx_memory *m = calloc(1, sizeof *m);
  if (m == NULL ||
      (m->regions = calloc(count ? count : 1, sizeof *m->regions)) == NULL) {
    free(m);
    return reshard__ucx_fail(err, UCS_ERR_NO_MEMORY, "reshard_ucx: no memory");
  }
  m->ux = ux;
  /* Each region is counted as soon as it holds anything, so a failure
   * part-way releases exactly what was made. */
  for (size_t i = 0; i < count; i++) {
    const reshard_ucx_region *in = &regions[i];
    reshard__ucx_local_region *r = &m->regions[i];
    m->count = i + 1;
    r->region = *in;
    r->region.region_id = strdup(in->region_id);
    if (r->region.region_id == NULL) {
      reshard_ucx_memory_release(m);
      return reshard__ucx_fail(err, UCS_ERR_NO_MEMORY,
                               "reshard_ucx: no memory");
    }
    if ((!allocate && in->address == NULL) || in->nbytes == 0) {
      reshard_ucx_memory_release(m);
      return reshard__ucx_fail(err, UCS_ERR_INVALID_PARAM,
                               "regions[%zu] (%s): no memory to register "
                               "(address %p, %llu bytes)",
                               i, in->region_id, in->address,
                               (unsigned long long)in->nbytes);
    }
    ucp_mem_map_params_t params = {
        .field_mask =
            UCP_MEM_MAP_PARAM_FIELD_ADDRESS | UCP_MEM_MAP_PARAM_FIELD_LENGTH,
        .address = in->address,
        .length = in->nbytes,
    };
    if (allocate) {
      /* UCX allocates: its shared-memory transports can then map it into
       * a peer (sysv, posix) instead of emulating the gets. */
      params.field_mask |= UCP_MEM_MAP_PARAM_FIELD_FLAGS;
      params.address = NULL;
      params.flags = UCP_MEM_MAP_ALLOCATE;
    }
    ucp_mem_h memh = NULL;
    ucs_status_t status = ucp_mem_map(ux->context, &params, &memh);
    const char *what = "ucp_mem_map";
    if (status == UCS_OK && allocate) {
      r->memh = memh;
      ucp_mem_attr_t attr = {.field_mask = UCP_MEM_ATTR_FIELD_ADDRESS |
                                           UCP_MEM_ATTR_FIELD_LENGTH};
      what = "ucp_mem_query";
      status = ucp_mem_query(memh, &attr);
      if (status == UCS_OK && attr.length < in->nbytes) {
        status = UCS_ERR_NO_MEMORY;
      }
      r->region.address = attr.address;
    }
    if (status == UCS_OK) {
      r->memh = memh;
      void *rkey = NULL;
      what = "ucp_rkey_pack";
      status = ucp_rkey_pack(ux->context, memh, &rkey, &r->rkey_length);
      if (status == UCS_OK) {
        r->rkey = rkey;
      }
    }
    if (status != UCS_OK) {
      reshard_ucx_memory_release(m);
      return reshard__ucx_fail(err, status, "regions[%zu] (%s): %s: %s", i,
                               in->region_id, what, ucs_status_string(status));
    }
  }
  *out = m;
  return 0;
}

int reshard_ucx_memory_register(reshard_ucx *ux,
                                const reshard_ucx_region *regions, size_t count,
                                reshard_ucx_memory **out,
                                reshard_ucx_error *err) {
  return memory_map(ux, regions, count, false, out, err);
}

int reshard_ucx_memory_allocate(reshard_ucx *ux,
                                const reshard_ucx_region *regions, size_t count,
                                reshard_ucx_memory **out,
                                reshard_ucx_error *err) {
  return memory_map(ux, regions, count, true, out, err);
}

size_t reshard_ucx_memory_count(const reshard_ucx_memory *memory) {
  return memory->count;
}

const reshard_ucx_region *
reshard_ucx_memory_region(const reshard_ucx_memory *memory, size_t i,
                          const void **rkey, size_t *rkey_length) {
  const reshard__ucx_local_region *r = &memory->regions[i];
  if (rkey != NULL) {
    *rkey = r->rkey;
  }
  if (rkey_length != NULL) {
    *rkey_length = r->rkey_length;
  }
  return &r->region;
}

/* ---- Peers ---- */

static void peer_failed(void *arg, ucp_ep_h ep, ucs_status_t status) {
  (void)ep;
  reshard_ucx_peer *peer = arg;
  if (peer->failure == UCS_OK) {
    peer->failure = status;
  }
}

/* Closes `ep`: flushed when the peer is healthy, forcibly when it failed;
 * waits a bounded time for the close to complete. */
static void close_endpoint(reshard_ucx *ux, ucp_ep_h ep, bool force) {
  ucp_request_param_t param = {.op_attr_mask = UCP_OP_ATTR_FIELD_FLAGS,
                               .flags = force ? UCP_EP_CLOSE_FLAG_FORCE : 0};
  ucs_status_ptr_t req = ucp_ep_close_nbx(ep, &param);
  if (req == NULL || UCS_PTR_IS_ERR(req)) {
    return;
  }
  int64_t deadline = now_ns() + CLOSE_WAIT_NS;
  while (ucp_request_check_status(req) == UCS_INPROGRESS &&
         now_ns() < deadline) {
    ucp_worker_progress(ux->worker);
  }
  if (ucp_request_check_status(req) != UCS_INPROGRESS) {
    ucp_request_free(req);
  }
  /* A close that never completed is abandoned: its request belongs to the
   * worker, which frees it when it is destroyed. */
}

bool reshard_ucx_peer_detects_failure(const reshard_ucx_peer *peer) {
  return !peer->no_failure_detection;
}

void reshard_ucx_peer_close(reshard_ucx_peer *peer) {
  if (peer == NULL) {
    return;
  }
  for (size_t i = 0; i < peer->count; i++) {
    if (peer->regions[i].rkey != NULL) {
      ucp_rkey_destroy(peer->regions[i].rkey);
    }
    free(peer->regions[i].region_id);
  }
  if (peer->ep != NULL && !peer->stuck) {
    close_endpoint(peer->ux, peer->ep, peer->failure != UCS_OK);
  }
  free(peer->regions);
  free(peer->participant_id);
  free(peer);
}

int reshard_ucx_peer_connect(reshard_ucx *ux, const char *participant_id,
                             const void *worker_address, size_t address_length,
                             const reshard_ucx_remote_region *regions,
                             size_t count, reshard_ucx_peer **out,
                             reshard_ucx_error *err) {
  *out = NULL;
  (void)address_length; /* UCX reads the address's own length */
  reshard_ucx_peer *peer = calloc(1, sizeof *peer);
  if (peer == NULL ||
      (peer->regions = calloc(count ? count : 1, sizeof *peer->regions)) ==
          NULL ||
      (peer->participant_id = strdup(participant_id)) == NULL) {
    if (peer != NULL) {
      free(peer->regions);
    }
    free(peer);
    return reshard__ucx_fail(err, UCS_ERR_NO_MEMORY, "reshard_ucx: no memory");
  }
  peer->ux = ux;
  /* Peer failure handling first; UCX 1.13 refuses it when the transports
   * in use cannot detect a dead peer (UCX_TLS=sm,self: sysv and posix have
   * no failure handler), and logs that refusal itself. The endpoint is then
   * made without it, and a dead peer shows as gets that stop completing
   * (reshard_ucx_options.batch_timeout_ms). */
  ucp_ep_params_t params = {
      .field_mask = UCP_EP_PARAM_FIELD_REMOTE_ADDRESS |
                    UCP_EP_PARAM_FIELD_ERR_HANDLING_MODE |
                    UCP_EP_PARAM_FIELD_ERR_HANDLER,
      .address = worker_address,
      .err_mode = UCP_ERR_HANDLING_MODE_PEER,
      .err_handler = {.cb = peer_failed, .arg = peer},
  };
  ucs_status_t status = ucp_ep_create(ux->worker, &params, &peer->ep);
  if (status == UCS_ERR_UNREACHABLE) {
    params.err_mode = UCP_ERR_HANDLING_MODE_NONE;
    peer->no_failure_detection = true;
    status = ucp_ep_create(ux->worker, &params, &peer->ep);
  }
  if (status != UCS_OK) {
    peer->ep = NULL;
    reshard_ucx_peer_close(peer);
    return reshard__ucx_fail(err, status, "peer %s: ucp_ep_create: %s",
                             participant_id, ucs_status_string(status));
  }
  for (size_t i = 0; i < count; i++) {
    reshard__ucx_remote *r = &peer->regions[i];
    peer->count = i + 1;
    r->address = regions[i].address;
    r->nbytes = regions[i].nbytes;
    if ((r->region_id = strdup(regions[i].region_id)) == NULL) {
      reshard_ucx_peer_close(peer);
      return reshard__ucx_fail(err, UCS_ERR_NO_MEMORY,
                               "reshard_ucx: no memory");
    }
    status = ucp_ep_rkey_unpack(peer->ep, regions[i].rkey, &r->rkey);
    if (status != UCS_OK) {
      r->rkey = NULL;
      reshard_ucx_peer_close(peer);
      return reshard__ucx_fail(
          err, status, "peer %s: region %s: ucp_ep_rkey_unpack: %s",
          participant_id, regions[i].region_id, ucs_status_string(status));
    }
  }
  *out = peer;
  return 0;
}
