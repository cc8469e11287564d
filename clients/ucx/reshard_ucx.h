/* reshard_ucx: executes reshardd's transfer plans (SPEC §2.6) over UCX.
 *
 * A `reshard_ucx` is one UCP context with one worker, used by one thread.
 * On it a process registers its own memory (ucp_mem_map; the packed remote
 * key of every region is kept so the process can publish it), connects to
 * peers (an endpoint to the peer's worker address and the peer's regions
 * with their unpacked remote keys), and executes a PlanTransferResponse by
 * pulling: one ucp_get_nbx per copy — a run entry (run_count, both strides)
 * stands for run_count gets issued straight from its columns, never
 * expanded into a copy list — from the batch's source peer into the local
 * region, then one flush of that endpoint per batch. A process that only
 * serves its memory to others calls reshard_ucx_serve in a loop: peers
 * whose transport emulates RMA in software (TCP) need the server's worker
 * to progress.
 *
 * Ownership: the caller allocates the memory it registers and keeps it
 * mapped until the registration is released. Everything returned through
 * an out pointer is owned by the caller and released with its _release /
 * _close function; releasing a context releases nothing else, so release
 * memory and peers first. Every function that fails leaves nothing behind:
 * a registration of several regions either registers all of them or none,
 * a peer either gets its endpoint and every remote key or nothing.
 *
 * Errors: functions return 0 or -1 and fill the caller-owned
 * reshard_ucx_error (which may be NULL) with the UCX status, when the
 * failure came from UCX, and a message naming what failed: the batch and
 * copy of a plan, the region, the peer.
 *
 * PlanLoad plans (reshard_ucx_execute_load) run the same way from the
 * processes that serve Parts from their registered memory (a store). */
#ifndef RESHARD_UCX_H
#define RESHARD_UCX_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "reshard/v1/planner.pb-c.h"

typedef struct reshard_ucx_error {
  int ucs_status; /* the ucs_status_t that failed, 0 when not UCX's */
  char message[1024];
} reshard_ucx_error;

typedef struct reshard_ucx reshard_ucx;
typedef struct reshard_ucx_memory reshard_ucx_memory;
typedef struct reshard_ucx_peer reshard_ucx_peer;

/* Opens a context (RMA and wake-up features; UCX reads UCX_TLS and its
 * other variables from the environment) and one single-threaded worker. */
int reshard_ucx_open(reshard_ucx **out, reshard_ucx_error *err);

/* Destroys the worker and the context. NULL is accepted. */
void reshard_ucx_close(reshard_ucx *ux);

/* The worker's address, to give to peers. Owned by `ux`, valid until it
 * closes. */
void reshard_ucx_worker_address(const reshard_ucx *ux, const void **address,
                                size_t *length);

/* Progresses the worker until it is idle, then waits up to `timeout_ms`
 * for it to have work (a peer's request). For a process that serves its
 * memory: call it in a loop. Returns 0, or -1 when the wait fails. */
int reshard_ucx_serve(reshard_ucx *ux, int timeout_ms, reshard_ucx_error *err);

/* ---- Local memory ---- */

/* One region of a process's own memory: `nbytes` bytes at `address`,
 * called `region_id` as the pool or binding registered with reshardd
 * calls it. */
typedef struct reshard_ucx_region {
  const char *region_id;
  void *address;
  uint64_t nbytes;
} reshard_ucx_region;

/* Registers `count` regions with UCX (ucp_mem_map of the caller's memory)
 * and packs a remote key for each. The strings are copied. All or
 * nothing. */
int reshard_ucx_memory_register(reshard_ucx *ux,
                                const reshard_ucx_region *regions, size_t count,
                                reshard_ucx_memory **out,
                                reshard_ucx_error *err);

/* As reshard_ucx_memory_register, but UCX allocates each region's memory
 * (ucp_mem_map with UCP_MEM_MAP_ALLOCATE; the regions' addresses are
 * ignored): reshard_ucx_memory_region gives the address, and the memory
 * lives until the registration is released. UCX 1.13's shared-memory
 * transports (sysv, posix) reach only memory UCX allocated itself, so a
 * peer on the same machine then reads it through a mapping instead of
 * emulated gets. The memory's contents are undefined. */
int reshard_ucx_memory_allocate(reshard_ucx *ux,
                                const reshard_ucx_region *regions, size_t count,
                                reshard_ucx_memory **out,
                                reshard_ucx_error *err);

/* Unmaps every region and frees the packed keys. NULL is accepted. */
void reshard_ucx_memory_release(reshard_ucx_memory *memory);

size_t reshard_ucx_memory_count(const reshard_ucx_memory *memory);

/* Region `i` as registered and its packed remote key (owned by `memory`). */
const reshard_ucx_region *
reshard_ucx_memory_region(const reshard_ucx_memory *memory, size_t i,
                          const void **rkey, size_t *rkey_length);

/* ---- Peers ---- */

/* A peer's region as it published it: the bytes [address, address +
 * nbytes) of its memory that `rkey` (as ucp_rkey_pack made it) covers. */
typedef struct reshard_ucx_remote_region {
  const char *region_id;
  uint64_t address;
  uint64_t nbytes;
  const void *rkey;
  size_t rkey_length;
} reshard_ucx_remote_region;

/* Connects to participant `participant_id` (the id plans name as a
 * source): an endpoint to `worker_address` with peer failure handling (a
 * peer that disappears fails the operations in flight instead of hanging
 * them) and the remote keys of its `count` regions unpacked. The strings
 * and key bytes are copied. All or nothing. */
int reshard_ucx_peer_connect(reshard_ucx *ux, const char *participant_id,
                             const void *worker_address, size_t address_length,
                             const reshard_ucx_remote_region *regions,
                             size_t count, reshard_ucx_peer **out,
                             reshard_ucx_error *err);

/* Whether the endpoint got UCX's peer failure handling. UCX 1.13 gives it
 * only when every transport in use can detect a dead peer; its shared
 * memory transports (UCX_TLS=sm,self) cannot, and the endpoint is then
 * made without it (UCX logs the refusal): a peer that dies mid-batch is
 * seen as gets that stop completing (reshard_ucx_options.batch_timeout_ms),
 * and its requests in flight are abandoned to the worker. */
bool reshard_ucx_peer_detects_failure(const reshard_ucx_peer *peer);

/* Destroys the remote keys and closes the endpoint (forcibly when it
 * failed: nothing is left waiting on a dead peer). NULL is accepted. */
void reshard_ucx_peer_close(reshard_ucx_peer *peer);

/* ---- Executing a plan ---- */

typedef struct reshard_ucx_options {
  /* The longest a batch waits without any of its operations completing
   * (0: 60 s); then it fails with UCS_ERR_TIMED_OUT. This is how a dead
   * peer is seen on transports that cannot detect one. */
  int64_t batch_timeout_ms;
  /* Called before each get with the batch index and the get's ordinal
   * within the batch; NULL: none. Tests use it to stop the world at a
   * chosen point (a peer killed mid-batch). */
  void (*before_get)(void *arg, size_t batch, uint64_t get);
  void *arg;
} reshard_ucx_options;

typedef struct reshard_ucx_result {
  uint64_t bytes;   /* bytes whose get completed successfully */
  uint64_t gets;    /* gets completed successfully */
  uint64_t batches; /* batches whose flush completed */
} reshard_ucx_result;

/* Executes `plan` into `local` (the target participant's registered
 * memory; the plan's region_ids are looked up in it) from `peers` (found
 * by the plan's source participant ids; any order, extra peers allowed).
 *
 * The whole plan is checked before any byte moves: every column of equal
 * length, run counts ≥ 1, every source connected, every source region
 * published with a remote key that covers each copy's bytes (the address
 * the plan gives the region plus the copy's offset, through its last run
 * element), every target region registered and covering the copy. A
 * violation fails with a message naming the batch and the entry (and, for
 * runs, how many copies it stands for) before anything is sent.
 *
 * Then batch by batch: every get is posted, the batch's endpoint flushed
 * and every completion checked; a get or flush that fails stops the
 * execution after the operations in flight have completed or been
 * cancelled, with the UCX status named and the batch and copy (entry, and
 * copy k within a run) that failed. `result` (which may be NULL) holds what
 * completed, also on failure. `options` may be NULL. */
int reshard_ucx_execute_transfer(
    reshard_ucx *ux, const Reshard__V1__PlanTransferResponse *plan,
    reshard_ucx_peer *const *peers, size_t peer_count,
    const reshard_ucx_memory *local, const reshard_ucx_options *options,
    reshard_ucx_result *result, reshard_ucx_error *err);

/* ---- Executing a load plan ---- */

/* Where one Part a load plan reads is served (SPEC §2.2): Part
 * `part_index` of page `page_key`, stored in layout `layout_id` (NULL:
 * whatever the plan's page names), is `nbytes` bytes at `offset` within
 * region `region_id` of the serving `peer` (as the peer published it). */
typedef struct reshard_ucx_part {
  const char *page_key;
  uint64_t part_index;
  const char *layout_id;
  reshard_ucx_peer *peer;
  const char *region_id;
  uint64_t offset;
  uint64_t nbytes;
} reshard_ucx_part;

/* Executes a PlanLoad plan into `local` (the reader's registered memory)
 * by pulling each copy's bytes from the Part it names: each (page_index,
 * part_index) maps, through the plan's `pages` and `parts` (any order;
 * extra entries allowed; one entry per page key, part index and layout),
 * to a serving peer's remote address — its region's published address
 * plus the Part's offset plus the copy's part offset.
 *
 * Checked whole before any byte moves, as reshard_ucx_execute_transfer:
 * equal column lengths, run counts ≥ 1, every page and region index in
 * range, every (page, part) served (with the page's layout id), every
 * copy (through its last run element) inside its Part, the Part inside
 * its peer's region and that region's remote key, and inside a registered
 * target region; a violation names the batch and the entry.
 *
 * A batch may read Parts of several peers (a load batch is formed by
 * limits, not by peer): its gets are posted from the columns (runs
 * unexpanded), then each peer it read is flushed once, and every
 * completion is checked; failures name the batch, the copy and the UCX
 * status, and `result` holds what completed. `options` may be NULL. */
int reshard_ucx_execute_load(reshard_ucx *ux,
                             const Reshard__V1__PlanLoadResponse *plan,
                             const reshard_ucx_part *parts, size_t part_count,
                             const reshard_ucx_memory *local,
                             const reshard_ucx_options *options,
                             reshard_ucx_result *result,
                             reshard_ucx_error *err);

#endif /* RESHARD_UCX_H */
