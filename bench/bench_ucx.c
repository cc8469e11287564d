/* reshard-bench-ucx: SPEC §6's transfer plans (T1 .. T5) executed over UCX
 * on this machine, explicit against runs, next to the plan's round trip.
 *
 * It starts reshardd on 127.0.0.1:0 (memory catalog) and, per scenario, a
 * prefill process (reshard-pd-prefill --no-fill: every source pool
 * registered with reshardd and UCX, its memory mapped but untouched), then
 * plays the decode side in-process for the scenario's first target
 * participant: its pool zeroed and registered, PlanTransfer by memory ids
 * and block tables (the median round trip over --plans calls, explicit and
 * with runs), and the plan executed over UCX --reps times each (median
 * wall time, from the first get to the last batch's flush). Printed per
 * row and form: entries in the plan, gets issued (runs issue one get per
 * copy, read from the run's columns), bytes, the round trip, the
 * execution, bytes/s and gets/s. UCX_TLS (and the rest of UCX's
 * variables) select the transports, e.g. UCX_TLS=sm,self or tcp,self.
 * Figures only: it fails (exit 1) when a call or an execution fails, never
 * on time.
 *
 * --ucx-allocate has the prefill's pools allocated by UCX (ucp_mem_map
 * ALLOCATE), which UCX's sysv/posix transports can map into this process.
 *
 *   reshard-bench-ucx [--scenario T1] [--tokens N] [--reps 5] [--plans 20]
 *                     [--ucx-allocate]
 */
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "pd_common.h"
#include "reshard_ucx_peers.h"

#ifndef RESHARD_DAEMON_PATH
#define RESHARD_DAEMON_PATH "reshardd"
#endif
#ifndef RESHARD_PREFILL_PATH
#define RESHARD_PREFILL_PATH "reshard-pd-prefill"
#endif

static int ucx_allocate; /* --ucx-allocate, passed to the prefill */

static double now_s(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

static int cmp_double(const void *a, const void *b) {
  double x = *(const double *)a, y = *(const double *)b;
  return (x > y) - (x < y);
}

static double median(double *v, int n) {
  qsort(v, (size_t)n, sizeof *v, cmp_double);
  return v[n / 2];
}

/* Starts `argv` with stderr into `log` (NULL: inherited). */
static pid_t spawn(char *const argv[], const char *log) {
  fflush(stdout); /* the child must not print our buffered output again */
  pid_t pid = fork();
  if (pid == 0) {
    if (log != NULL && freopen(log, "w", stderr) == NULL) {
      _exit(127);
    }
    if (freopen("/dev/null", "w", stdout) == NULL) {
      _exit(127);
    }
    execv(argv[0], argv);
    _exit(127);
  }
  return pid;
}

static void stop(pid_t pid) {
  if (pid > 0) {
    kill(pid, SIGTERM);
    waitpid(pid, NULL, 0);
  }
}

/* Reads the daemon's bound address from its msg=listening log line. */
static int daemon_target(const char *log, char *target, size_t size) {
  for (int i = 0; i < 400; i++) {
    FILE *f = fopen(log, "r");
    char line[2048];
    while (f != NULL && fgets(line, sizeof line, f) != NULL) {
      char *at = strstr(line, "address=127.0.0.1:");
      if (strstr(line, "listening") != NULL && at != NULL) {
        int port = atoi(at + strlen("address=127.0.0.1:"));
        fclose(f);
        snprintf(target, size, "127.0.0.1:%d", port);
        return 0;
      }
    }
    if (f != NULL) {
      fclose(f);
    }
    usleep(50000);
  }
  return -1;
}

typedef struct form {
  double plan_s, exec_s;
  uint64_t entries, gets, bytes;
} form;

typedef struct bench {
  reshard_client *client;
  reshard_ucx *ux;
  reshard_ucx_peer_file file;
  reshard_ucx_peer **peers;
  transfer_scenario *t;
  scenario_pool *sp;
  char *memory_id;
  reshard_ucx_memory *local;
  int reps, plans;
} bench;

static int measure(bench *b, int runs, form *out, char *msg, size_t size) {
  Reshard__V1__PooledMemory pooled;
  Reshard__V1__PlanTransferRequest req;
  char **ids = pd_transfer_request(&b->file, b->t, b->sp, b->memory_id, runs,
                                   &pooled, &req);
  double *samples = calloc((size_t)(b->plans + b->reps + 1), sizeof *samples);
  if (ids == NULL || samples == NULL) {
    free(ids);
    free(samples);
    snprintf(msg, size, "no memory");
    return -1;
  }
  req.operation_id = "bench-ucx";
  Reshard__V1__PlanTransferResponse *plan = NULL;
  int rc = 0;
  for (int i = 0; i < b->plans && rc == 0; i++) {
    if (plan != NULL) {
      reshard__v1__plan_transfer_response__free_unpacked(plan, NULL);
      plan = NULL;
    }
    reshard_client_status st = {0};
    double t0 = now_s();
    if (reshard_client_plan_transfer(b->client, &req, 120000, &plan, &st) !=
        RESHARD_STATUS_OK) {
      snprintf(msg, size, "PlanTransfer: %s: %s",
               reshard_status_code_name(st.code), st.message);
      rc = -1;
    }
    samples[i] = now_s() - t0;
  }
  if (rc == 0) {
    out->plan_s = median(samples, b->plans);
    out->entries = 0;
    for (size_t k = 0; k < plan->n_batches; k++) {
      out->entries += plan->batches[k]->n_nbytes;
    }
  }
  for (int i = 0; i < b->reps && rc == 0; i++) {
    reshard_ucx_result result;
    reshard_ucx_error err = {0};
    double t0 = now_s();
    if (reshard_ucx_execute_transfer(b->ux, plan, b->peers, b->file.peer_count,
                                     b->local, NULL, &result, &err) != 0) {
      snprintf(msg, size, "execute: %s", err.message);
      rc = -1;
    }
    samples[i] = now_s() - t0;
    out->gets = result.gets;
    out->bytes = result.bytes;
  }
  if (rc == 0) {
    out->exec_s = median(samples, b->reps);
  }
  if (plan != NULL) {
    reshard__v1__plan_transfer_response__free_unpacked(plan, NULL);
  }
  free(ids);
  free(samples);
  return rc;
}

static void print_form(const char *name, const char *what, const form *f) {
  printf("%-15s %-8s %9llu %9llu %11llu %9.3f %9.3f %8.2f %10.2f\n", name, what,
         (unsigned long long)f->entries, (unsigned long long)f->gets,
         (unsigned long long)f->bytes, f->plan_s * 1e3, f->exec_s * 1e3,
         (double)f->bytes / f->exec_s / 1e9, (double)f->gets / f->exec_s / 1e6);
}

/* One T row: a prefill process, the decode side here. */
static int row(const char *target, const char *name, uint64_t tokens, int reps,
               int plans, char *msg, size_t size) {
  reshard_arena arena;
  reshard_arena_init(&arena, 1 << 20);
  const transfer_spec *spec;
  transfer_scenario t;
  scenario_pool sp;
  pd_memory memory = {0};
  char memory_id[RESHARD_ID_SIZE] = "";
  char peers[64], tok[32];
  snprintf(peers, sizeof peers, "/tmp/reshard-bench-ucx-%d.peers",
           (int)getpid());
  snprintf(tok, sizeof tok, "%llu", (unsigned long long)tokens);
  remove(peers);
  bench b = {
      .reps = reps, .plans = plans, .t = &t, .sp = &sp, .memory_id = memory_id};
  pid_t prefill = -1;
  int rc = -1;
  reshard_ucx_error err = {0};
  if (pd_build(name, tokens, 42, &arena, &spec, &t, msg, size) != 0) {
    goto out;
  }
  char *argv[] = {RESHARD_PREFILL_PATH,
                  "--target",
                  (char *)target,
                  "--scenario",
                  (char *)name,
                  "--tokens",
                  tok,
                  "--peers",
                  peers,
                  "--no-fill",
                  ucx_allocate ? "--ucx-allocate" : NULL,
                  NULL};
  prefill = spawn(argv, NULL);
  for (int i = 0; i < 1200 && access(peers, F_OK) != 0; i++) {
    if (waitpid(prefill, NULL, WNOHANG) == prefill) {
      prefill = -1;
      snprintf(msg, size, "%s: the prefill exited", name);
      goto out;
    }
    usleep(50000);
  }
  if (reshard_ucx_peer_file_read(peers, &b.file, msg, size) != 0 ||
      (b.client = reshard_client_open(target, 120000)) == NULL ||
      pd_register_placement(b.client, &t.target, t.target_placement_id, &arena,
                            msg, size) != 0 ||
      pd_target_pool(spec, &t, 0, 43, &arena, &sp, msg, size) != 0 ||
      pd_memory_map(&sp.pool, &memory, msg, size) != 0) {
    goto out;
  }
  pd_memory_zero(&memory);
  if (pd_register_pool(b.client, &sp.pool, t.target_placement_id, memory_id,
                       &arena, msg, size) != 0) {
    goto out;
  }
  b.peers = calloc(b.file.peer_count + 1, sizeof *b.peers);
  reshard_ucx_region *regions = pd_ucx_regions(&sp.pool, &memory);
  int ok = b.peers != NULL && regions != NULL &&
           reshard_ucx_open(&b.ux, &err) == 0 &&
           reshard_ucx_memory_register(b.ux, regions, sp.pool.region_count,
                                       &b.local, &err) == 0;
  free(regions);
  for (size_t p = 0; ok && p < b.file.peer_count; p++) {
    const reshard_ucx_peer_record *r = &b.file.peers[p];
    ok = reshard_ucx_peer_connect(b.ux, r->participant_id, r->worker_address,
                                  r->worker_address_length, r->regions,
                                  r->region_count, &b.peers[p], &err) == 0;
  }
  if (!ok) {
    snprintf(msg, size, "%s: %s", name, err.message);
    goto out;
  }
  form explicit_form, runs_form;
  if (measure(&b, 0, &explicit_form, msg, size) != 0 ||
      measure(&b, 1, &runs_form, msg, size) != 0) {
    goto out;
  }
  print_form(spec->name, "explicit", &explicit_form);
  print_form(spec->name, "runs", &runs_form);
  fflush(stdout);
  rc = 0;
out:
  for (size_t p = 0; b.peers != NULL && p < b.file.peer_count; p++) {
    reshard_ucx_peer_close(b.peers[p]);
  }
  free(b.peers);
  reshard_ucx_memory_release(b.local);
  reshard_ucx_close(b.ux);
  if (memory_id[0] != '\0') {
    pd_forget_pool(b.client, memory_id);
  }
  reshard_client_close(b.client);
  stop(prefill);
  remove(peers);
  reshard_ucx_peer_file_free(&b.file);
  pd_memory_free(&memory);
  reshard_arena_destroy(&arena);
  return rc;
}

int main(int argc, char **argv) {
  const char *only = NULL;
  uint64_t tokens = 0;
  int reps = 5, plans = 20;
  for (int i = 1; i < argc; i++) {
    if (i + 1 < argc && strcmp(argv[i], "--scenario") == 0) {
      only = argv[++i];
    } else if (i + 1 < argc && strcmp(argv[i], "--tokens") == 0) {
      tokens = strtoull(argv[++i], NULL, 10);
    } else if (strcmp(argv[i], "--ucx-allocate") == 0) {
      ucx_allocate = 1;
    } else if (i + 1 < argc && strcmp(argv[i], "--reps") == 0) {
      reps = atoi(argv[++i]);
    } else if (i + 1 < argc && strcmp(argv[i], "--plans") == 0) {
      plans = atoi(argv[++i]);
    } else {
      fprintf(stderr, "usage: reshard-bench-ucx [--scenario T1] [--tokens N] "
                      "[--reps 5] [--plans 20]\n");
      return 2;
    }
  }
  if (reps < 1 || plans < 1) {
    fprintf(stderr, "reshard-bench-ucx: --reps and --plans must be >= 1\n");
    return 2;
  }
  char log[64], target[64];
  snprintf(log, sizeof log, "/tmp/reshard-bench-ucx-%d.log", (int)getpid());
  char *dargv[] = {RESHARD_DAEMON_PATH, "--listen", "127.0.0.1:0",
                   "--catalog",         "memory",   NULL};
  pid_t daemon = spawn(dargv, log);
  if (daemon_target(log, target, sizeof target) != 0) {
    fprintf(stderr, "reshard-bench-ucx: reshardd did not listen (%s)\n", log);
    stop(daemon);
    return 1;
  }
  const char *tls = getenv("UCX_TLS");
  printf("UCX_TLS=%s; decode = the first target participant; medians of %d "
         "plans and %d executions\n",
         tls ? tls : "(UCX's default)", plans, reps);
  printf("%-15s %-8s %9s %9s %11s %9s %9s %8s %10s\n", "scenario", "form",
         "entries", "gets", "bytes", "plan ms", "exec ms", "GB/s", "Mgets/s");
  int rc = 0;
  for (size_t i = 0; i < sizeof transfer_specs / sizeof transfer_specs[0];
       i++) {
    if (!transfer_selected(&transfer_specs[i], only)) {
      continue;
    }
    char msg[2048] = "";
    if (row(target, transfer_specs[i].name, tokens, reps, plans, msg,
            sizeof msg) != 0) {
      fprintf(stderr, "reshard-bench-ucx: %s: %s\n", transfer_specs[i].name,
              msg);
      rc = 1;
    }
  }
  stop(daemon);
  remove(log);
  return rc;
}
