/* reshard-pd-prefill: the prefill side of a P/D transfer over UCX.
 *
 * Builds a SPEC §6 transfer scenario (T1 .. T5, `--tokens` of it), gives
 * every source participant of its DP rank a pool of real memory laid out
 * as the engine lays it out, registers the placement and the pools with
 * reshardd (RegisterPlacement, RegisterMemory) and with UCX, fills the
 * pools (noise everywhere, then the logical value of every (layer,
 * component, token, head, byte) at its block position; --no-fill leaves
 * the memory untouched, for the benchmark), publishes the worker address,
 * memory ids, remote keys and block table in the peers file
 * (reshard_ucx_peers.h) and serves until SIGTERM or SIGINT, then
 * unregisters everything (UCX, then ForgetMemory).
 *
 * One process stands for the whole prefill instance: every participant's
 * pool is served by the same worker. --short-rkey registers and publishes
 * the first region of the first pool with half its bytes, so an executor
 * meets a remote key that does not cover its copies. --ucx-allocate lets
 * UCX allocate the pools' memory (reshard_ucx_memory_allocate: ucp_mem_map
 * ALLOCATE), registered with reshardd at UCX's addresses, so UCX's
 * shared-memory transports can map it into the decode process.
 *
 *   reshard-pd-prefill --target HOST:PORT --scenario T1 --tokens 256
 *                      --peers FILE [--seed N] [--no-fill] [--short-rkey]
 *                      [--ucx-allocate]
 *
 * Exit status: 0 after a clean stop, 1 on any failure (printed). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "example_serve.h"
#include "pd_common.h"
#include "reshard_ucx_peers.h"

typedef struct options {
  pd_options pd;
  int fill, short_rkey, ucx_allocate;
} options;

static int parse(int argc, char **argv, options *o) {
  *o = (options){.pd = PD_OPTIONS_INIT, .fill = 1};
  for (int i = 1; i < argc; i++) {
    const char *a = argv[i];
    if (strcmp(a, "--no-fill") == 0) {
      o->fill = 0;
    } else if (strcmp(a, "--ucx-allocate") == 0) {
      o->ucx_allocate = 1;
    } else if (strcmp(a, "--short-rkey") == 0) {
      o->short_rkey = 1;
    } else if (!pd_parse_option(argc, argv, &i, &o->pd)) {
      fprintf(stderr, "prefill: unknown or incomplete option %s\n", a);
      return -1;
    }
  }
  if (o->pd.target == NULL || o->pd.peers == NULL) {
    fprintf(stderr, "usage: reshard-pd-prefill --target HOST:PORT --peers "
                    "FILE [--scenario T1] [--tokens N] [--seed N] "
                    "[--no-fill] [--short-rkey] [--ucx-allocate]\n");
    return -1;
  }
  return 0;
}

int main(int argc, char **argv) {
  options o;
  if (parse(argc, argv, &o) != 0) {
    return 2;
  }
  example_catch_stop_signals();
  char msg[2048] = "";
  int rc = 1;
  reshard_arena arena;
  reshard_arena_init(&arena, 1 << 20);
  const transfer_spec *spec;
  transfer_scenario t;
  reshard_client *client = NULL;
  reshard_ucx *ux = NULL;
  size_t n = 0, mapped = 0, registered = 0, known = 0;
  pd_memory *memory = NULL;
  reshard_ucx_memory **ucx_memory = NULL;
  char(*memory_ids)[RESHARD_ID_SIZE] = NULL;
  reshard_ucx_peer_file file = {0};
  reshard_ucx_error uerr = {0};

  if (pd_build(o.pd.scenario, o.pd.tokens, o.pd.seed, &arena, &spec, &t, msg,
               sizeof msg) != 0) {
    goto out;
  }
  n = t.pool_count;
  memory = calloc(n, sizeof *memory);
  ucx_memory = calloc(n, sizeof *ucx_memory);
  memory_ids = calloc(n, RESHARD_ID_SIZE);
  file.peers = calloc(n, sizeof *file.peers);
  client = reshard_client_open(o.pd.target, 30000);
  if (memory == NULL || ucx_memory == NULL || memory_ids == NULL ||
      file.peers == NULL || client == NULL) {
    snprintf(msg, sizeof msg, "no memory");
    goto out;
  }
  if (pd_register_placement(client, &t.source, t.source_placement_id, &arena,
                            msg, sizeof msg) != 0) {
    goto out;
  }
  if (reshard_ucx_open(&ux, &uerr) != 0) {
    snprintf(msg, sizeof msg, "%s", uerr.message);
    goto out;
  }
  const void *address;
  size_t address_length;
  reshard_ucx_worker_address(ux, &address, &address_length);
  for (size_t p = 0; p < n; p++) {
    reshard_pool *pool = &t.source_pools[p].pool;
    const reshard_placement_part *part =
        pd_find_part(&t.source, pool->participant_id);
    if (o.ucx_allocate) {
      /* UCX allocates the pool's memory (reshard_ucx_memory_allocate), and
       * the pool is registered with reshardd at UCX's addresses. */
      memory[p].bytes = calloc(pool->region_count + 1, sizeof(uint8_t *));
      memory[p].nbytes = calloc(pool->region_count + 1, sizeof(uint64_t));
      reshard_ucx_region *want = calloc(pool->region_count + 1, sizeof *want);
      mapped = p + 1;
      if (memory[p].bytes == NULL || memory[p].nbytes == NULL || want == NULL) {
        free(want);
        snprintf(msg, sizeof msg, "no memory");
        goto out;
      }
      for (size_t r = 0; r < pool->region_count; r++) {
        want[r] = (reshard_ucx_region){pool->regions[r].region_id, NULL,
                                       pool->regions[r].nbytes};
      }
      int ok = reshard_ucx_memory_allocate(ux, want, pool->region_count,
                                           &ucx_memory[p], &uerr);
      free(want);
      if (ok != 0) {
        snprintf(msg, sizeof msg, "%s: %s", pool->participant_id, uerr.message);
        goto out;
      }
      registered = p + 1;
      for (size_t r = 0; r < pool->region_count; r++) {
        const reshard_ucx_region *reg =
            reshard_ucx_memory_region(ucx_memory[p], r, NULL, NULL);
        memory[p].bytes[r] = reg->address;
        memory[p].nbytes[r] = reg->nbytes;
        pool->regions[r].address = (uint64_t)(uintptr_t)reg->address;
      }
      /* count stays 0: pd_memory_free must not unmap UCX's memory. */
      if (pd_register_pool(client, pool, t.source_placement_id, memory_ids[p],
                           &arena, msg, sizeof msg) != 0) {
        goto out;
      }
      known = p + 1;
      memory[p].count = pool->region_count;
    } else {
      if (pd_memory_map(pool, &memory[p], msg, sizeof msg) != 0) {
        goto out;
      }
      mapped = p + 1;
      if (pd_register_pool(client, pool, t.source_placement_id, memory_ids[p],
                           &arena, msg, sizeof msg) != 0) {
        goto out;
      }
      known = p + 1;
      reshard_ucx_region *regions = pd_ucx_regions(pool, &memory[p]);
      if (regions == NULL) {
        snprintf(msg, sizeof msg, "no memory");
        goto out;
      }
      if (o.short_rkey && p == 0) {
        regions[0].nbytes /= 2;
      }
      int ok = reshard_ucx_memory_register(ux, regions, pool->region_count,
                                           &ucx_memory[p], &uerr);
      free(regions);
      if (ok != 0) {
        snprintf(msg, sizeof msg, "%s: %s", pool->participant_id, uerr.message);
        goto out;
      }
    }
    registered = p + 1;
    if (o.fill) {
      pd_memory_noise(&memory[p], o.pd.seed + 7 + p);
      pd_fill(&t.source.descriptor, part, pool, t.source_block_ids, t.tokens,
              memory[p].bytes);
    }
    reshard_ucx_peer_record *rec = &file.peers[p];
    rec->participant_id = (char *)pool->participant_id;
    rec->memory_id = memory_ids[p];
    rec->worker_address = (uint8_t *)address;
    rec->worker_address_length = address_length;
    rec->region_count = pool->region_count;
    rec->regions = calloc(pool->region_count, sizeof *rec->regions);
    if (rec->regions == NULL) {
      snprintf(msg, sizeof msg, "no memory");
      goto out;
    }
    file.peer_count = p + 1;
    for (size_t r = 0; r < pool->region_count; r++) {
      const void *rkey;
      size_t rkey_length;
      const reshard_ucx_region *reg =
          reshard_ucx_memory_region(ucx_memory[p], r, &rkey, &rkey_length);
      rec->regions[r] = (reshard_ucx_remote_region){
          reg->region_id, (uint64_t)(uintptr_t)reg->address, reg->nbytes, rkey,
          rkey_length};
    }
  }
  file.placement_id = t.source_placement_id;
  file.block_ids = (uint32_t *)t.source_block_ids;
  file.block_count = t.source_block_count;
  if (reshard_ucx_peer_file_write(o.pd.peers, &file, msg, sizeof msg) != 0) {
    goto out;
  }
  printf("prefill: %s, %llu tokens, %zu participants served from pid %d\n",
         spec->name, (unsigned long long)t.tokens, n, (int)getpid());
  if (example_serve_until_stopped(ux, msg, sizeof msg) != 0) {
    goto out;
  }
  rc = 0;
out:
  if (rc != 0) {
    fprintf(stderr, "prefill: error: %s\n", msg);
  }
  if (o.pd.peers != NULL) {
    remove(o.pd.peers);
  }
  for (size_t p = 0; p < file.peer_count; p++) {
    free(file.peers[p].regions);
  }
  free(file.peers);
  for (size_t p = 0; p < registered; p++) {
    reshard_ucx_memory_release(ucx_memory[p]);
  }
  for (size_t p = 0; p < known; p++) {
    pd_forget_pool(client, memory_ids[p]);
  }
  for (size_t p = 0; p < mapped; p++) {
    if (o.ucx_allocate) {
      memory[p].count = 0; /* released with its UCX registration */
    }
    pd_memory_free(&memory[p]);
  }
  reshard_ucx_close(ux);
  reshard_client_close(client);
  free(memory);
  free(ucx_memory);
  free(memory_ids);
  reshard_arena_destroy(&arena);
  return rc;
}
