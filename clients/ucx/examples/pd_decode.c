/* reshard-pd-decode: the decode side of a P/D transfer over UCX.
 *
 * Reads the prefill's peers file (reshard_ucx_peers.h; waits for it to
 * appear), connects to its worker with the published remote keys, and for
 * every participant of the decode instance (or the one --participant
 * names): gives it a zeroed pool of real memory, registers the pool with
 * reshardd and with UCX, asks reshardd for the PlanTransfer plan by memory
 * ids and block tables — explicit, then with runs — executes it with
 * reshard_ucx_execute_transfer and checks every byte of the pool against
 * the oracle: the logical value of every (layer, component, token, head,
 * byte) at its block position, zero everywhere else. Then unregisters the
 * pool (UCX, then ForgetMemory) before the next participant.
 *
 *   reshard-pd-decode --target HOST:PORT --scenario T1 --tokens 256
 *                     --peers FILE [--seed N] [--participant I]
 *                     [--mode both|explicit|runs]
 *                     [--batch-timeout-ms MS]  a batch fails when no get
 *                                           completes for MS (default
 *                                           60 s)
 *                     [--skip-register]     register all regions but the
 *                                           first with UCX: the plan
 *                                           names memory the executor
 *                                           does not have
 *                     [--pause-at B:G --pause-file PATH]
 *                                           before get G of batch B,
 *                                           create PATH and wait until it
 *                                           is removed (a test kills the
 *                                           prefill meanwhile)
 *
 * Prints one line per plan executed. Exit status 0 when every byte
 * verified, 1 on any failure (printed as "decode: error: ..."). */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "pd_common.h"
#include "reshard_ucx_peers.h"

typedef struct options {
  pd_options pd;
  const char *mode, *pause_file;
  int64_t batch_timeout_ms;
  long participant; /* -1: all */
  int skip_register;
  long pause_batch;
  uint64_t pause_get;
  int paused;
} options;

static int parse(int argc, char **argv, options *o) {
  *o = (options){.pd = PD_OPTIONS_INIT,
                 .participant = -1,
                 .mode = "both",
                 .pause_batch = -1};
  for (int i = 1; i < argc; i++) {
    const char *a = argv[i];
    const char *v = i + 1 < argc ? argv[i + 1] : NULL;
    if (strcmp(a, "--skip-register") == 0) {
      o->skip_register = 1;
    } else if (v != NULL && strcmp(a, "--participant") == 0) {
      o->participant = strtol(argv[++i], NULL, 10);
    } else if (v != NULL && strcmp(a, "--batch-timeout-ms") == 0) {
      o->batch_timeout_ms = strtoll(argv[++i], NULL, 10);
    } else if (v != NULL && strcmp(a, "--mode") == 0) {
      o->mode = argv[++i];
    } else if (v != NULL && strcmp(a, "--pause-at") == 0) {
      unsigned long long g = 0;
      if (sscanf(argv[++i], "%ld:%llu", &o->pause_batch, &g) != 2) {
        fprintf(stderr, "decode: --pause-at wants BATCH:GET\n");
        return -1;
      }
      o->pause_get = g;
    } else if (v != NULL && strcmp(a, "--pause-file") == 0) {
      o->pause_file = argv[++i];
    } else if (!pd_parse_option(argc, argv, &i, &o->pd)) {
      fprintf(stderr, "decode: unknown or incomplete option %s\n", a);
      return -1;
    }
  }
  if (o->pd.target == NULL || o->pd.peers == NULL ||
      (o->pause_batch >= 0 && o->pause_file == NULL) ||
      (strcmp(o->mode, "both") != 0 && strcmp(o->mode, "explicit") != 0 &&
       strcmp(o->mode, "runs") != 0)) {
    fprintf(stderr, "usage: reshard-pd-decode --target HOST:PORT --peers FILE "
                    "[--scenario T1] [--tokens N] [--seed N] "
                    "[--participant I] [--mode both|explicit|runs] "
                    "[--skip-register] [--pause-at B:G --pause-file PATH]\n");
    return -1;
  }
  return 0;
}

static void sleep_ms(long ms) {
  struct timespec ts = {ms / 1000, (ms % 1000) * 1000000l};
  nanosleep(&ts, NULL);
}

/* The fault-injection hook: stop the world once at the chosen get. */
static void pause_hook(void *arg, size_t batch, uint64_t get) {
  options *o = arg;
  if (o->paused || (long)batch != o->pause_batch || get != o->pause_get) {
    return;
  }
  o->paused = 1;
  FILE *f = fopen(o->pause_file, "w");
  if (f != NULL) {
    fprintf(f, "%d\n", (int)getpid());
    fclose(f);
  }
  fprintf(stderr, "decode: paused before get %llu of batch %zu\n",
          (unsigned long long)get, batch);
  for (int i = 0; i < 6000 && access(o->pause_file, F_OK) == 0; i++) {
    sleep_ms(10);
  }
}

typedef struct decode {
  options *o;
  const transfer_spec *spec;
  transfer_scenario t;
  reshard_arena *arena;
  reshard_client *client;
  reshard_ucx *ux;
  reshard_ucx_peer_file file;
  reshard_ucx_peer **peers;
  size_t peer_count;
} decode;

static int execute_one(decode *d, const scenario_pool *sp,
                       const reshard_placement_part *part,
                       const char *memory_id, reshard_ucx_memory *local,
                       pd_memory *memory, int runs, char *msg,
                       size_t msg_size) {
  Reshard__V1__PooledMemory pooled;
  Reshard__V1__PlanTransferRequest req;
  char **ids =
      pd_transfer_request(&d->file, &d->t, sp, memory_id, runs, &pooled, &req);
  if (ids == NULL) {
    snprintf(msg, msg_size, "no memory");
    return -1;
  }
  req.operation_id = "pd-decode";
  reshard_client_status st = {0};
  Reshard__V1__PlanTransferResponse *plan = NULL;
  int rc = reshard_client_plan_transfer(d->client, &req, 60000, &plan, &st);
  free(ids);
  if (rc != RESHARD_STATUS_OK) {
    snprintf(msg, msg_size, "PlanTransfer %s: %s: %s", part->participant_id,
             reshard_status_code_name(st.code), st.message);
    return -1;
  }
  reshard_ucx_options opt = {.batch_timeout_ms = d->o->batch_timeout_ms,
                             .before_get = pause_hook,
                             .arg = d->o};
  reshard_ucx_result result;
  reshard_ucx_error uerr = {0};
  rc = reshard_ucx_execute_transfer(d->ux, plan, d->peers, d->peer_count, local,
                                    &opt, &result, &uerr);
  uint64_t entries = 0;
  for (size_t b = 0; b < plan->n_batches; b++) {
    entries += plan->batches[b]->n_nbytes;
  }
  if (rc != 0) {
    snprintf(msg, msg_size, "%s %s: %s", part->participant_id,
             runs ? "runs" : "explicit", uerr.message);
  } else {
    int64_t checked =
        pd_verify(&d->t.target.descriptor, part, &sp->pool, sp->block_ids,
                  d->t.tokens, memory, msg, msg_size);
    if (checked < 0 || (uint64_t)checked != plan->stats->bytes ||
        result.bytes != plan->stats->bytes) {
      if (checked >= 0) {
        snprintf(msg, msg_size,
                 "%s: %lld bytes verified, the plan moves %llu, UCX moved "
                 "%llu",
                 part->participant_id, (long long)checked,
                 (unsigned long long)plan->stats->bytes,
                 (unsigned long long)result.bytes);
      }
      rc = -1;
    } else {
      printf("decode: %s %s %s: %zu batches, %llu entries, %llu gets, %llu "
             "bytes over UCX from %zu sources; every byte verified\n",
             d->spec->name, part->participant_id, runs ? "runs" : "explicit",
             plan->n_batches, (unsigned long long)entries,
             (unsigned long long)result.gets, (unsigned long long)result.bytes,
             plan->n_sources);
      fflush(stdout);
    }
  }
  reshard__v1__plan_transfer_response__free_unpacked(plan, NULL);
  return rc;
}

static int run_participant(decode *d, size_t index, char *msg,
                           size_t msg_size) {
  scenario_pool sp;
  const reshard_placement_part *part = &d->t.target.parts[index];
  if (pd_target_pool(d->spec, &d->t, index, d->o->pd.seed + 1 + index, d->arena,
                     &sp, msg, msg_size) != 0) {
    return -1;
  }
  pd_memory memory;
  if (pd_memory_map(&sp.pool, &memory, msg, msg_size) != 0) {
    return -1;
  }
  pd_memory_zero(&memory);
  int rc = -1;
  char memory_id[RESHARD_ID_SIZE];
  reshard_ucx_memory *local = NULL;
  reshard_ucx_region *regions = NULL;
  if (pd_register_pool(d->client, &sp.pool, d->t.target_placement_id, memory_id,
                       d->arena, msg, msg_size) != 0) {
    goto unmap;
  }
  /* Named so a test can check the pool is forgotten on every exit. */
  fprintf(stderr, "decode: %s registered memory %s\n", part->participant_id,
          memory_id);
  regions = pd_ucx_regions(&sp.pool, &memory);
  reshard_ucx_error uerr = {0};
  size_t skip = d->o->skip_register ? 1 : 0;
  if (regions == NULL || reshard_ucx_memory_register(
                             d->ux, regions + skip, sp.pool.region_count - skip,
                             &local, &uerr) != 0) {
    snprintf(msg, msg_size, "%s: %s", part->participant_id,
             regions ? uerr.message : "no memory");
    goto forget;
  }
  rc = 0;
  for (int runs = 0; runs <= 1 && rc == 0; runs++) {
    if ((runs && strcmp(d->o->mode, "explicit") == 0) ||
        (!runs && strcmp(d->o->mode, "runs") == 0)) {
      continue;
    }
    pd_memory_zero(&memory);
    rc = execute_one(d, &sp, part, memory_id, local, &memory, runs, msg,
                     msg_size);
  }
  reshard_ucx_memory_release(local);
forget:
  /* The pool leaves reshardd's catalog with the memory: nothing stays
   * registered for an engine that is gone. */
  pd_forget_pool(d->client, memory_id);
unmap:
  free(regions);
  pd_memory_free(&memory);
  return rc;
}

int main(int argc, char **argv) {
  options o;
  if (parse(argc, argv, &o) != 0) {
    return 2;
  }
  char msg[2048] = "";
  int rc = 1;
  reshard_arena arena;
  reshard_arena_init(&arena, 1 << 20);
  decode d = {.o = &o, .arena = &arena};
  reshard_ucx_error uerr = {0};

  if (pd_build(o.pd.scenario, o.pd.tokens, o.pd.seed, &arena, &d.spec, &d.t,
               msg, sizeof msg) != 0) {
    goto out;
  }
  for (int i = 0; i < 600 && access(o.pd.peers, F_OK) != 0; i++) {
    sleep_ms(100);
  }
  if (reshard_ucx_peer_file_read(o.pd.peers, &d.file, msg, sizeof msg) != 0) {
    goto out;
  }
  if (d.file.placement_id == NULL ||
      strcmp(d.file.placement_id, d.t.source_placement_id) != 0) {
    snprintf(msg, sizeof msg,
             "the peers file's placement %s is not the scenario's %s "
             "(another --scenario, --tokens or --seed?)",
             d.file.placement_id, d.t.source_placement_id);
    goto out;
  }
  d.client = reshard_client_open(o.pd.target, 30000);
  d.peers = calloc(d.file.peer_count + 1, sizeof *d.peers);
  if (d.client == NULL || d.peers == NULL) {
    snprintf(msg, sizeof msg, "no memory");
    goto out;
  }
  if (pd_register_placement(d.client, &d.t.target, d.t.target_placement_id,
                            &arena, msg, sizeof msg) != 0) {
    goto out;
  }
  if (reshard_ucx_open(&d.ux, &uerr) != 0) {
    snprintf(msg, sizeof msg, "%s", uerr.message);
    goto out;
  }
  for (size_t p = 0; p < d.file.peer_count; p++) {
    const reshard_ucx_peer_record *r = &d.file.peers[p];
    if (reshard_ucx_peer_connect(d.ux, r->participant_id, r->worker_address,
                                 r->worker_address_length, r->regions,
                                 r->region_count, &d.peers[p], &uerr) != 0) {
      snprintf(msg, sizeof msg, "%s", uerr.message);
      goto out;
    }
    d.peer_count = p + 1;
    if (!reshard_ucx_peer_detects_failure(d.peers[p])) {
      fprintf(stderr,
              "decode: peer %s: these UCX transports cannot detect a dead "
              "peer; a batch fails after --batch-timeout-ms without a "
              "completion\n",
              r->participant_id);
    }
  }
  size_t first = o.participant >= 0 ? (size_t)o.participant : 0;
  size_t last = o.participant >= 0 ? first + 1 : d.t.target.part_count;
  for (size_t i = first; i < last; i++) {
    if (run_participant(&d, i, msg, sizeof msg) != 0) {
      goto out;
    }
  }
  rc = 0;
out:
  if (rc != 0) {
    fprintf(stderr, "decode: error: %s\n", msg);
  }
  for (size_t p = 0; p < d.peer_count; p++) {
    reshard_ucx_peer_close(d.peers[p]);
  }
  free(d.peers);
  reshard_ucx_close(d.ux);
  reshard_client_close(d.client);
  reshard_ucx_peer_file_free(&d.file);
  reshard_arena_destroy(&arena);
  return rc;
}
