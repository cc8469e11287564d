/* reshard-roundtrip: the PlanLoad round trip against a live daemon, next to
 * the planning it contains (SPEC §7: a round trip costs at most 1.5 ×
 * (planning + the transport floor) with an explicit binding, 1.2 × with
 * pooled memory). It starts reshardd on 127.0.0.1:0 (or, with --unix, on a Unix
 * socket, as a client in the daemon's own pod can reach it) with the memory
 * catalog,
 * publishes every SPEC §6 scenario's manifest, registers its pages and asks
 * for its plan over gRPC with the C client, once with the paged reader of
 * §6, once with a contiguous NHD reader (one range per layer and
 * component, all in one region: the memory the Python comparison
 * uses) and once with §6's pooled reader (bench/scenario.h: registered
 * once with RegisterPlacement and RegisterMemory, then each PlanLoad names
 * the placement and the pool by id and sends the block table). Per row it
 * prints the request's size, the median round trip (the encoded response
 * received, not decoded), the median in-process planning time of the same
 * request with a warm join template (as the daemon has it; pooled: the
 * validated pool and the block table, planned without a binding), both per
 * copy, and their ratio. Next to them, the transport alone: the same request
 * bytes sent by the same client to an in-process gRPC server that answers
 * with the daemon's response bytes, stored (bench/replay_server.c), and
 * that floor's ratio to the planning: what a round trip would cost if
 * the daemon took no time at all; and SPEC §7's ratio, round trip / (planning
 * + replay). The same server runs a second time in a process of its own
 * (reshard-replay, bench/replay_main.c), as the daemon does: the
 * in-process floor is mostly the lower one, by a median ×1.22 and up to
 * 1.4 ms for a 4 MB response (docs/performance.md, Round 41), so both are
 * printed, and the round trip's ratio to each. Then the T rows of §6 (SPEC
 * §2.6): both placements and every pool registered once, then PlanTransfer by
 * ids and block tables, with and without runs, beside the in-process transfer
 * plan and the replay floor. The client process keeps its heap (mallopt in
 * main), so neither figure pays for glibc returning and refaulting the client's
 * response buffers. Figures only: it fails (exit 1) when a call fails, the
 * daemon's plan differs from the in-process one or a replay server's answer
 * from the daemon's, never on time. */
#include <dirent.h>
#include <errno.h>
#include <malloc.h>
#include <signal.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "memory/chunk_pool.h"
#include "replay_server.h"
#include "reshard/identity.h"
#include "reshard/join.h"
#include "reshard/pool.h"
#include "reshard_client.h"
#include "scenario.h"
#include "timing.h"
#include "wire/wire.h"

#ifndef RESHARD_DAEMON_PATH
#define RESHARD_DAEMON_PATH "reshardd"
#endif
#ifndef RESHARD_REPLAY_PATH
#define RESHARD_REPLAY_PATH "reshard-replay"
#endif

/* The reader's memory: the paged binding of §6, one contiguous range per
 * layer and component, or §6's pooled reader (a registered MemoryPool
 * named by its memory id, plus a block table: bench/scenario.h). */
typedef enum reader_memory {
  READER_PAGED,
  READER_CONTIGUOUS,
  READER_POOLED,
  READER_MEMORY_COUNT
} reader_memory;

static const char *const reader_names[READER_MEMORY_COUNT] = {
    "paged", "contiguous", "pooled"};

/* ---- The daemon ---- */

typedef struct daemon_proc {
  pid_t pid;
  char log_path[64];
  char socket_path[80]; /* with --unix */
  char target[96];
} daemon_proc;

/* Starts `path` on 127.0.0.1:0, or on a Unix socket next to its log when
 * `unix_socket`, and reads the bound address from its `msg=listening` log
 * line. */
static int daemon_start(const char *path, bool unix_socket, daemon_proc *d) {
  snprintf(d->log_path, sizeof d->log_path, "/tmp/reshard-roundtrip-XXXXXX");
  int fd = mkstemp(d->log_path);
  if (fd < 0) {
    perror("mkstemp");
    return -1;
  }
  char listen[96] = "127.0.0.1:0";
  d->socket_path[0] = '\0';
  if (unix_socket) {
    snprintf(d->socket_path, sizeof d->socket_path, "%s.sock", d->log_path);
    snprintf(listen, sizeof listen, "unix:%s", d->socket_path);
  }
  d->pid = fork();
  if (d->pid < 0) {
    perror("fork");
    close(fd);
    return -1;
  }
  if (d->pid == 0) {
    dup2(fd, STDERR_FILENO);
    execl(path, path, "--listen", listen, "--catalog", "memory",
          "--cache-bytes", "256M", (char *)NULL);
    fprintf(stderr, "exec %s: %s\n", path, strerror(errno));
    _exit(127);
  }
  close(fd);
  for (int tries = 0; tries < 200; tries++) {
    FILE *log = fopen(d->log_path, "r");
    char line[1024];
    while (log != NULL && fgets(line, sizeof line, log) != NULL) {
      const char *at = strstr(line, "msg=listening address=");
      if (at != NULL) {
        at += strlen("msg=listening address=");
        size_t n = strcspn(at, " \n");
        if (n < sizeof d->target) {
          memcpy(d->target, at, n);
          d->target[n] = '\0';
          fclose(log);
          return 0;
        }
      }
    }
    if (log != NULL) {
      fclose(log);
    }
    int status;
    if (waitpid(d->pid, &status, WNOHANG) == d->pid) {
      fprintf(stderr, "reshardd exited before listening (see %s)\n",
              d->log_path);
      d->pid = -1;
      return -1;
    }
    usleep(50 * 1000);
  }
  fprintf(stderr, "reshardd did not listen within 10 s (see %s)\n",
          d->log_path);
  return -1;
}

static int daemon_stop(daemon_proc *d) {
  int status = 0;
  if (d->pid > 0) {
    kill(d->pid, SIGTERM);
    waitpid(d->pid, &status, 0);
  }
  unlink(d->log_path);
  if (d->socket_path[0] != '\0') {
    unlink(d->socket_path);
  }
  return WIFEXITED(status) && WEXITSTATUS(status) == 0 ? 0 : -1;
}

/* ---- The replay servers ---- */

/* reshard-replay (bench/replay_main.c) as a child: its address, and the
 * pipe that hands it each row's response. */
typedef struct replay_proc {
  pid_t pid;
  FILE *to;   /* its stdin */
  FILE *from; /* its stdout */
  char target[128];
} replay_proc;

/* Starts `path` listening on `listen` and reads the address it serves. */
static int replay_proc_start(const char *path, const char *listen,
                             replay_proc *rp) {
  *rp = (replay_proc){.pid = -1};
  int in[2], out[2];
  if (pipe(in) != 0) {
    perror("pipe");
    return -1;
  }
  if (pipe(out) != 0) {
    perror("pipe");
    close(in[0]);
    close(in[1]);
    return -1;
  }
  rp->pid = fork();
  if (rp->pid == 0) {
    dup2(in[0], STDIN_FILENO);
    dup2(out[1], STDOUT_FILENO);
    close(in[0]);
    close(in[1]);
    close(out[0]);
    close(out[1]);
    execl(path, path, listen, (char *)NULL);
    fprintf(stderr, "exec %s: %s\n", path, strerror(errno));
    _exit(127);
  }
  close(in[0]);
  close(out[1]);
  if (rp->pid < 0) {
    perror("fork");
    close(in[1]);
    close(out[0]);
    return -1;
  }
  /* Without both streams the child's stdin is closed here, so that it
   * stops and replay_proc_stop's wait returns. */
  rp->to = fdopen(in[1], "w");
  rp->from = fdopen(out[0], "r");
  if (rp->to == NULL) {
    close(in[1]);
  }
  if (rp->from == NULL) {
    close(out[0]);
  }
  if (rp->to == NULL || rp->from == NULL ||
      fgets(rp->target, sizeof rp->target, rp->from) == NULL) {
    fprintf(stderr, "%s did not start\n", path);
    return -1;
  }
  rp->target[strcspn(rp->target, "\n")] = '\0';
  return 0;
}

/* Hands the child `bytes` as the response to every later call; returns
 * once it has them. */
static int replay_proc_set_response(replay_proc *rp, const uint8_t *bytes,
                                    size_t length) {
  uint8_t header[8];
  for (int i = 0; i < 8; i++) {
    header[i] = (uint8_t)((uint64_t)length >> (8 * i));
  }
  char answer[8];
  if (fwrite(header, 1, sizeof header, rp->to) != sizeof header ||
      fwrite(bytes, 1, length, rp->to) != length || fflush(rp->to) != 0 ||
      fgets(answer, sizeof answer, rp->from) == NULL ||
      strcmp(answer, "ok\n") != 0) {
    fprintf(stderr, "reshard-replay did not take the response\n");
    return -1;
  }
  return 0;
}

/* Ends the child's input, which stops it, and waits for it. */
static int replay_proc_stop(replay_proc *rp) {
  int status = 0;
  if (rp->to != NULL) {
    fclose(rp->to);
  }
  if (rp->from != NULL) {
    fclose(rp->from);
  }
  if (rp->pid > 0) {
    waitpid(rp->pid, &status, 0);
  }
  return WIFEXITED(status) && WEXITSTATUS(status) == 0 ? 0 : -1;
}

/* The two floors of a row: the replay server in this process (SPEC §7's
 * replay, `in_process`), and in a process of its own (`own`), where its
 * calls cross processes as the daemon's do. */
typedef struct replay_floors {
  replay_server *in_process;
  reshard_client *in_process_client;
  replay_proc own;
  reshard_client *own_client;
} replay_floors;

/* ---- Requests ---- */

/* Replaces the scenario's paged binding by one range per (layer,
 * component) over the whole token span, NHD, all in one region. */
static reshard_status contiguous_binding(const scenario_spec *spec,
                                         uint64_t pages, scenario *s,
                                         reshard_arena *arena,
                                         reshard_error *err) {
  const reshard_placement_part *part =
      reshard_placement_find_part(&s->reader, s->binding.participant_id);
  unsigned components = spec->value_dim == 0 ? 1 : 2;
  uint64_t tokens = pages * spec->page_size;
  uint64_t groups = part->layer_count * components;
  reshard_binding_range *ranges =
      RESHARD_ARENA_NEW(arena, reshard_binding_range, groups);
  reshard_region *region = RESHARD_ARENA_NEW(arena, reshard_region, 1);
  if (ranges == NULL || region == NULL) {
    return reshard_error_set(err, RESHARD_RESOURCE_EXHAUSTED, "out of memory");
  }
  uint64_t offset = 0;
  for (uint64_t l = 0; l < part->layer_count; l++) {
    for (unsigned c = 0; c < components; c++) {
      uint64_t hb = (c == 0 ? spec->key_dim : spec->value_dim) * spec->itemsize;
      ranges[l * components + c] = (reshard_binding_range){
          .global_layer_id = part->layer_ids[l],
          .component = c == 0 ? RESHARD_COMPONENT_KEY : RESHARD_COMPONENT_VALUE,
          .token_start = 0,
          .token_count = tokens,
          .head_start = part->head_start,
          .head_count = part->head_count,
          .region_id = "kv",
          .offset_bytes = offset,
          .token_stride_bytes = part->head_count * hb,
          .head_stride_bytes = hb,
      };
      offset += tokens * part->head_count * hb;
    }
  }
  *region = (reshard_region){"kv", 1ull << 20, offset};
  s->binding.regions = region;
  s->binding.region_count = 1;
  s->binding.ranges = ranges;
  s->binding.range_count = groups;
  return RESHARD_OK;
}

/* Publishes the scenario's manifest and registers its pages; fills the
 * PlanLoad request (inline placement, as an inference engine sends it). */
static int set_up(reshard_client *client, const scenario_spec *spec,
                  uint64_t pages, const scenario *s, reshard_arena *arena,
                  Reshard__V1__PlanLoadRequest *plan_load) {
  reshard_manifest manifest = {
      .name_space = "reshard-roundtrip",
      .model_id = spec->name,
      .model_revision = "r1",
      .semantic_fingerprint = "kv",
      .layout = s->upload.layout,
  };
  Reshard__V1__PublishManifestRequest publish =
      RESHARD__V1__PUBLISH_MANIFEST_REQUEST__INIT;
  publish.manifest = reshard_wire_manifest_to_pb(&manifest, arena);
  reshard_client_status st;
  Reshard__V1__PublishManifestResponse *published = NULL;
  if (publish.manifest == NULL ||
      reshard_client_publish_manifest(client, &publish, 0, &published, &st) !=
          RESHARD_STATUS_OK) {
    fprintf(stderr, "%s: PublishManifest: %s\n", spec->name, st.message);
    return -1;
  }
  char **page_keys = RESHARD_ARENA_NEW(arena, char *, pages);
  for (uint64_t p = 0; page_keys != NULL && p < pages; p++) {
    char key[64];
    snprintf(key, sizeof key, "%.2s-page-%05llu", spec->name,
             (unsigned long long)p);
    page_keys[p] = reshard_arena_strdup(arena, key);
  }
  Reshard__V1__RegisterPagesRequest registered =
      RESHARD__V1__REGISTER_PAGES_REQUEST__INIT;
  registered.manifest_key =
      reshard_arena_strdup(arena, published->manifest_key);
  registered.n_page_keys = pages;
  registered.page_keys = page_keys;
  reshard__v1__plan_load_request__init(plan_load);
  plan_load->model_domain =
      reshard_arena_strdup(arena, published->model_domain);
  reshard__v1__publish_manifest_response__free_unpacked(published, NULL);
  Reshard__V1__RegisterPagesResponse *added = NULL;
  if (page_keys == NULL ||
      reshard_client_register_pages(client, &registered, 0, &added, &st) !=
          RESHARD_STATUS_OK) {
    fprintf(stderr, "%s: RegisterPages: %s\n", spec->name, st.message);
    return -1;
  }
  reshard__v1__register_pages_response__free_unpacked(added, NULL);
  plan_load->n_page_keys = pages;
  plan_load->page_keys = page_keys;
  plan_load->target_case = RESHARD__V1__PLAN_LOAD_REQUEST__TARGET_PLACEMENT;
  plan_load->placement = reshard_wire_placement_to_pb(&s->reader, arena);
  plan_load->binding = reshard_wire_binding_to_pb(&s->binding, arena);
  plan_load->operation_id = "roundtrip";
  return plan_load->placement != NULL && plan_load->binding != NULL ? 0 : -1;
}

/* Registers the reader's placement and its pool (RegisterPlacement,
 * RegisterMemory) and turns `plan_load` into the pooled request: the
 * placement by id, the pool by its memory id, the block table. The ids the
 * daemon answers must be the ones computed here (SPEC §1.5a, §1.6). */
static int set_up_pooled(reshard_client *client, const scenario_spec *spec,
                         const scenario *s, const scenario_pool *sp,
                         reshard_arena *arena,
                         Reshard__V1__PlanLoadRequest *plan_load) {
  reshard_error err;
  char placement_id[RESHARD_ID_SIZE], memory_id[RESHARD_ID_SIZE];
  if (reshard_placement_id(&s->reader, placement_id, &err) != RESHARD_OK ||
      reshard_memory_id(&sp->pool, placement_id, memory_id, &err) !=
          RESHARD_OK) {
    fprintf(stderr, "%s: ids: %s\n", spec->name, err.message);
    return -1;
  }
  reshard_client_status st;
  Reshard__V1__RegisterPlacementRequest placement =
      RESHARD__V1__REGISTER_PLACEMENT_REQUEST__INIT;
  placement.placement = plan_load->placement;
  Reshard__V1__RegisterPlacementResponse *placed = NULL;
  if (reshard_client_register_placement(client, &placement, 0, &placed, &st) !=
      RESHARD_STATUS_OK) {
    fprintf(stderr, "%s: RegisterPlacement: %s\n", spec->name, st.message);
    return -1;
  }
  bool same_placement = strcmp(placed->placement_id, placement_id) == 0;
  reshard__v1__register_placement_response__free_unpacked(placed, NULL);
  Reshard__V1__RegisterMemoryRequest memory =
      RESHARD__V1__REGISTER_MEMORY_REQUEST__INIT;
  memory.pool = reshard_wire_pool_to_pb(&sp->pool, arena);
  memory.target_case =
      RESHARD__V1__REGISTER_MEMORY_REQUEST__TARGET_PLACEMENT_ID;
  memory.placement_id = placement_id;
  Reshard__V1__RegisterMemoryResponse *registered = NULL;
  if (memory.pool == NULL ||
      reshard_client_register_memory(client, &memory, 0, &registered, &st) !=
          RESHARD_STATUS_OK) {
    fprintf(stderr, "%s: RegisterMemory: %s\n", spec->name, st.message);
    return -1;
  }
  bool same_memory = strcmp(registered->memory_id, memory_id) == 0;
  reshard__v1__register_memory_response__free_unpacked(registered, NULL);
  if (!same_placement || !same_memory) {
    fprintf(stderr,
            "%s: the daemon's placement or memory id differs from "
            "the one computed here\n",
            spec->name);
    return -1;
  }
  Reshard__V1__PooledMemory *pooled =
      RESHARD_ARENA_NEW(arena, Reshard__V1__PooledMemory, 1);
  char *id = reshard_arena_strdup(arena, placement_id);
  char *mid = reshard_arena_strdup(arena, memory_id);
  if (pooled == NULL || id == NULL || mid == NULL) {
    return -1;
  }
  reshard__v1__pooled_memory__init(pooled);
  pooled->pool_case = RESHARD__V1__POOLED_MEMORY__POOL_MEMORY_ID;
  pooled->memory_id = mid;
  pooled->n_block_ids = sp->block_count;
  pooled->block_ids = sp->block_ids;
  plan_load->binding = NULL;
  plan_load->pooled = pooled;
  plan_load->target_case = RESHARD__V1__PLAN_LOAD_REQUEST__TARGET_PLACEMENT_ID;
  plan_load->placement_id = id;
  return 0;
}

/* ---- One row ---- */

static const char PLAN_LOAD[] = "/reshard.v1.Planner/PlanLoad";
static const char PLAN_TRANSFER[] = "/reshard.v1.Planner/PlanTransfer";

typedef struct row {
  uint64_t copies;
  size_t request_bytes;
  size_t response_bytes;
  double plan_ns;       /* median in-process planning as the daemon plans,
                           warm join template (with the pooled reader: the
                           block table bound, then the plan) */
  double round_ns;      /* median round trip */
  double replay_ns;     /* median round trip of the replay server */
  double own_replay_ns; /* the same, the server in a process of its own */
} row;

/* ---- What the daemon and the own replay server cost (--daemon-stats) ---- */

/* What a process spent, summed over its threads: CPU (each thread's run
 * time in /proc/PID/task/TID/schedstat, in ns), minor faults
 * (/proc/PID/stat) and context switches, voluntary and not (each thread's
 * status). */
typedef struct process_usage {
  double cpu_us;
  double minor_faults;
  double voluntary, involuntary;
} process_usage;

static pid_t stats_pid = -1; /* the daemon, with --daemon-stats */

/* `pid`'s usage so far: the daemon's, or the own replay server's. */
static void read_usage(pid_t pid, process_usage *u) {
  *u = (process_usage){0};
  char path[64];
  snprintf(path, sizeof path, "/proc/%d/stat", (int)pid);
  FILE *f = fopen(path, "r");
  char line[1024];
  if (f != NULL && fgets(line, sizeof line, f) != NULL) {
    /* Fields after the command's closing parenthesis, from field 3. */
    const char *at = strrchr(line, ')');
    unsigned long long minor = 0;
    if (at != NULL &&
        sscanf(at + 2, "%*c %*d %*d %*d %*d %*d %*u %llu", &minor) == 1) {
      u->minor_faults = (double)minor;
    }
  }
  if (f != NULL) {
    fclose(f);
  }
  snprintf(path, sizeof path, "/proc/%d/task", (int)pid);
  DIR *tasks = opendir(path);
  struct dirent *task;
  while (tasks != NULL && (task = readdir(tasks)) != NULL) {
    if (task->d_name[0] == '.') {
      continue;
    }
    char status_path[sizeof path + sizeof task->d_name + 16];
    snprintf(status_path, sizeof status_path, "%s/%s/schedstat", path,
             task->d_name);
    FILE *st = fopen(status_path, "r");
    unsigned long long run_ns;
    if (st != NULL && fscanf(st, "%llu", &run_ns) == 1) {
      u->cpu_us += (double)run_ns / 1e3;
    }
    if (st != NULL) {
      fclose(st);
    }
    snprintf(status_path, sizeof status_path, "%s/%s/status", path,
             task->d_name);
    st = fopen(status_path, "r");
    while (st != NULL && fgets(line, sizeof line, st) != NULL) {
      unsigned long long n;
      if (sscanf(line, "voluntary_ctxt_switches: %llu", &n) == 1) {
        u->voluntary += (double)n;
      } else if (sscanf(line, "nonvoluntary_ctxt_switches: %llu", &n) == 1) {
        u->involuntary += (double)n;
      }
    }
    if (st != NULL) {
      fclose(st);
    }
  }
  if (tasks != NULL) {
    closedir(tasks);
  }
}

/* Prints `who`'s (`pid`'s) usage per call between `before` and now.
 * Threads that exited in between are not counted. */
static void print_usage(pid_t pid, const char *who, const char *name,
                        const char *reader, const process_usage *before,
                        int calls) {
  process_usage after;
  read_usage(pid, &after);
  double n = calls > 0 ? calls : 1;
  printf("  %s per call (%s %s): cpu %.1f us, minor faults %.2f, "
         "context switches %.2f voluntary + %.2f involuntary\n",
         who, name, reader, (after.cpu_us - before->cpu_us) / n,
         (after.minor_faults - before->minor_faults) / n,
         (after.voluntary - before->voluntary) / n,
         (after.involuntary - before->involuntary) / n);
}

/* Median round trip of `runs` calls of `request` on `client` (after two
 * unmeasured ones); the last response is left in `response` for the
 * caller to free. Returns 0, or -1 after printing why a call failed. */
static int time_calls(reshard_client *client, const char *name,
                      const char *path, const uint8_t *request, size_t length,
                      int runs, double *samples, double *median,
                      uint8_t **response, size_t *response_length) {
  for (int r = -2; r < runs; r++) {
    reshard_client_status st;
    free(*response);
    *response = NULL;
    double start = bench_now_ns();
    int code = reshard_client_call_raw(client, path, request, length, 60000,
                                       response, response_length, &st);
    double elapsed = bench_now_ns() - start;
    if (code != RESHARD_STATUS_OK) {
      fprintf(stderr, "%s: %s: %s: %s\n", name, path,
              reshard_status_code_name(code), st.message);
      return -1;
    }
    if (r >= 0) {
      samples[r] = elapsed;
    }
  }
  bench_sort_samples(samples, (size_t)runs);
  *median = bench_median(samples, (size_t)runs);
  return 0;
}

/* Times the replay of `request` (`runs` calls) with `response` as its
 * answer on both replay servers, into out->replay_ns and
 * out->own_replay_ns. Returns 0, or -1 after printing why. */
static int time_replays(replay_floors *r, const char *name, const char *reader,
                        const char *path, const uint8_t *request, size_t length,
                        int runs, double *samples, const uint8_t *response,
                        size_t response_length, row *out) {
  replay_server_set_response(r->in_process, response, response_length);
  if (replay_proc_set_response(&r->own, response, response_length) != 0) {
    return -1;
  }
  reshard_client *clients[2] = {r->in_process_client, r->own_client};
  double *medians[2] = {&out->replay_ns, &out->own_replay_ns};
  for (int i = 0; i < 2; i++) {
    uint8_t *answer = NULL;
    size_t answer_length = 0;
    /* With --daemon-stats, the own server's usage too: what a server
     * that only sends the bytes spends per call, beside the daemon's. */
    process_usage usage;
    bool own_stats = stats_pid > 0 && i == 1;
    if (own_stats) {
      read_usage(r->own.pid, &usage);
    }
    int failed = time_calls(clients[i], name, path, request, length, runs,
                            samples, medians[i], &answer, &answer_length);
    if (own_stats && !failed) {
      print_usage(r->own.pid, "own replay", name, reader, &usage, runs + 2);
    }
    if (failed) {
      free(answer);
      return -1;
    }
    bool same = answer_length == response_length &&
                memcmp(answer, response, response_length) == 0;
    free(answer);
    if (!same) {
      fprintf(stderr,
              "%s: the replay server's answer (%zu bytes) differs from the "
              "daemon's response (%zu bytes)\n",
              name, answer_length, response_length);
      return -1;
    }
  }
  return 0;
}

static int measure(reshard_client *client, replay_floors *floors,
                   const scenario_spec *spec, uint64_t pages,
                   reader_memory memory, int runs, row *out) {
  reshard_arena arena;
  reshard_arena_init(&arena, 0);
  reshard_error err;
  scenario s;
  scenario_pool sp;
  reshard_bound_pool bound_pool;
  /* The binding the daemon plans a pool with: its regions, no ranges. */
  reshard_binding shell;
  int result = -1;
  double *samples = malloc(sizeof(double) * (size_t)runs);
  reshard_join *join = NULL;
  reshard_chunk_pool *pool = NULL;
  Reshard__V1__PlanLoadRequest request;
  if (samples == NULL ||
      scenario_build(spec, pages, 0, 42, &arena, &s, &err) != RESHARD_OK ||
      (memory == READER_CONTIGUOUS &&
       contiguous_binding(spec, pages ? pages : spec->pages, &s, &arena,
                          &err) != RESHARD_OK) ||
      (memory == READER_POOLED &&
       scenario_build_pool(spec, &s, 7, &arena, &sp, &err) != RESHARD_OK)) {
    fprintf(stderr, "%s: %s\n", spec->name, err.message);
    goto done;
  }
  if (memory == READER_POOLED) {
    /* The pool is validated once, as RegisterMemory does. */
    if (reshard_pool_validate(
            &sp.pool, &s.reader.descriptor,
            reshard_placement_find_part(&s.reader, sp.pool.participant_id),
            &s.request.limits, "pool", &arena, &bound_pool,
            &err) != RESHARD_OK) {
      fprintf(stderr, "%s: pool: %s\n", spec->name, err.message);
      goto done;
    }
    shell = (reshard_binding){
        .participant_id = sp.pool.participant_id,
        .endpoint = sp.pool.endpoint,
        .regions = sp.pool.regions,
        .region_count = sp.pool.region_count,
    };
    s.binding = sp.binding; /* what set_up encodes, then replaces */
    s.request.binding = &shell;
  }
  join = reshard_join_build(
      &s.upload.layout,
      reshard_placement_find_part(&s.reader, s.binding.participant_id), &err);
  if (join == NULL) {
    fprintf(stderr, "%s: join: %s\n", spec->name, err.message);
    goto done;
  }
  s.source.join = join;
  /* The arena takes its blocks from a pool as the daemon's calls do, so
   * planning pays no page faults for fresh memory there either. */
  pool = reshard_chunk_pool_create(16u << 20);
  if (pool == NULL) {
    goto done;
  }
  /* As the daemon plans the call (daemon/rpc/plan_load.c): the varint
   * columns only, never the copies (before Round 33, the plan with its
   * copies). */
  s.request.omit_copies = true;
  s.request.varint_columns = true;
  for (int r = 0; r < runs; r++) {
    reshard_arena scratch;
    reshard_arena_init_from(&scratch, 64 * 1024,
                            reshard_chunk_pool_source(pool));
    reshard_load_plan plan;
    reshard_pooled_memory pooled = {&bound_pool, sp.block_ids, sp.block_count};
    /* As the daemon plans a pooled call: the pool and the table. */
    s.request.pooled = memory == READER_POOLED ? &pooled : NULL;
    double start = bench_now_ns();
    reshard_status status =
        reshard_plan_load(&s.request, &scratch, &plan, &err);
    samples[r] = bench_now_ns() - start;
    s.request.pooled = NULL;
    if (status == RESHARD_OK) {
      out->copies = plan.operations;
    }
    reshard_arena_destroy(&scratch);
    if (status != RESHARD_OK) {
      fprintf(stderr, "%s: plan: %s\n", spec->name, err.message);
      goto done;
    }
  }
  s.request.omit_copies = false;
  s.request.varint_columns = false;
  bench_sort_samples(samples, (size_t)runs);
  out->plan_ns = bench_median(samples, (size_t)runs);

  if (set_up(client, spec, s.request.page_count, &s, &arena, &request) != 0 ||
      (memory == READER_POOLED &&
       set_up_pooled(client, spec, &s, &sp, &arena, &request) != 0)) {
    goto done;
  }
  size_t length = protobuf_c_message_get_packed_size(&request.base);
  uint8_t *bytes = reshard_arena_alloc(&arena, length, 16);
  if (bytes == NULL) {
    goto done;
  }
  protobuf_c_message_pack(&request.base, bytes);
  out->request_bytes = length;
  /* The first calls build and cache the join template, as in production
   * the first request of a reader shape does. */
  uint8_t *response = NULL;
  size_t response_length = 0;
  process_usage usage;
  if (stats_pid > 0) {
    read_usage(stats_pid, &usage);
  }
  if (time_calls(client, spec->name, PLAN_LOAD, bytes, length, runs, samples,
                 &out->round_ns, &response, &response_length) != 0) {
    free(response);
    goto done;
  }
  if (stats_pid > 0) {
    print_usage(stats_pid, "daemon", spec->name, reader_names[memory], &usage,
                runs + 2);
  }
  Reshard__V1__PlanLoadResponse *decoded =
      reshard__v1__plan_load_response__unpack(NULL, response_length, response);
  bool same = decoded != NULL && decoded->stats != NULL &&
              decoded->stats->operations == out->copies;
  if (decoded != NULL) {
    reshard__v1__plan_load_response__free_unpacked(decoded, NULL);
  }
  if (!same) {
    fprintf(stderr, "%s: the daemon's plan differs from the local one\n",
            spec->name);
    free(response);
    goto done;
  }
  out->response_bytes = response_length;
  int replayed =
      time_replays(floors, spec->name, reader_names[memory], PLAN_LOAD, bytes,
                   length, runs, samples, response, response_length, out);
  free(response);
  if (replayed != 0) {
    goto done;
  }
  result = 0;
done:
  reshard_chunk_pool_free(pool);
  reshard_join_free(join);
  free(samples);
  reshard_arena_destroy(&arena);
  return result;
}

/* ---- Transfer rows (SPEC §2.6, §6's T rows) ---- */

/* The two forms of a T row, as printed: explicit copies, runs. */
static const char *const transfer_form_names[2] = {"transfer", "xfer runs"};

static int register_placement(reshard_client *client, const char *name,
                              const reshard_placement *placement,
                              const char *want, reshard_arena *arena) {
  Reshard__V1__RegisterPlacementRequest request =
      RESHARD__V1__REGISTER_PLACEMENT_REQUEST__INIT;
  request.placement = reshard_wire_placement_to_pb(placement, arena);
  reshard_client_status st;
  Reshard__V1__RegisterPlacementResponse *placed = NULL;
  if (request.placement == NULL ||
      reshard_client_register_placement(client, &request, 0, &placed, &st) !=
          RESHARD_STATUS_OK) {
    fprintf(stderr, "%s: RegisterPlacement: %s\n", name, st.message);
    return -1;
  }
  bool same = strcmp(placed->placement_id, want) == 0;
  reshard__v1__register_placement_response__free_unpacked(placed, NULL);
  if (!same) {
    fprintf(stderr, "%s: the daemon's placement id differs from %s\n", name,
            want);
  }
  return same ? 0 : -1;
}

static int register_pool(reshard_client *client, const char *name,
                         const reshard_pool *pool, const char *placement_id,
                         const char *want, reshard_arena *arena) {
  Reshard__V1__RegisterMemoryRequest request =
      RESHARD__V1__REGISTER_MEMORY_REQUEST__INIT;
  request.pool = reshard_wire_pool_to_pb(pool, arena);
  request.target_case =
      RESHARD__V1__REGISTER_MEMORY_REQUEST__TARGET_PLACEMENT_ID;
  request.placement_id = (char *)placement_id;
  reshard_client_status st;
  Reshard__V1__RegisterMemoryResponse *registered = NULL;
  if (request.pool == NULL ||
      reshard_client_register_memory(client, &request, 0, &registered, &st) !=
          RESHARD_STATUS_OK) {
    fprintf(stderr, "%s: RegisterMemory: %s\n", name, st.message);
    return -1;
  }
  bool same = strcmp(registered->memory_id, want) == 0;
  reshard__v1__register_memory_response__free_unpacked(registered, NULL);
  if (!same) {
    fprintf(stderr, "%s: the daemon's memory id differs from %s\n", name, want);
  }
  return same ? 0 : -1;
}

/* Registers both placements and every pool of `t` once, then fills
 * `request` as an engine sends it: placements and pools by id, the two
 * block tables. */
static int set_up_transfer(reshard_client *client, const char *name,
                           transfer_scenario *t, reshard_arena *arena,
                           Reshard__V1__PlanTransferRequest *request) {
  if (register_placement(client, name, &t->source, t->source_placement_id,
                         arena) != 0 ||
      register_placement(client, name, &t->target, t->target_placement_id,
                         arena) != 0) {
    return -1;
  }
  char **memory_ids = RESHARD_ARENA_NEW(arena, char *, t->pool_count);
  Reshard__V1__PooledMemory *pooled =
      RESHARD_ARENA_NEW(arena, Reshard__V1__PooledMemory, 1);
  if (memory_ids == NULL || pooled == NULL) {
    return -1;
  }
  for (size_t p = 0; p < t->pool_count; p++) {
    if (register_pool(client, name, &t->source_pools[p].pool,
                      t->source_placement_id, t->memory_ids[p], arena) != 0) {
      return -1;
    }
    memory_ids[p] = t->memory_ids[p];
  }
  if (register_pool(client, name, &t->target_pool.pool, t->target_placement_id,
                    t->target_memory_id, arena) != 0) {
    return -1;
  }
  reshard__v1__pooled_memory__init(pooled);
  pooled->pool_case = RESHARD__V1__POOLED_MEMORY__POOL_MEMORY_ID;
  pooled->memory_id = t->target_memory_id;
  pooled->n_block_ids = t->target_pool.block_count;
  pooled->block_ids = t->target_pool.block_ids;
  reshard__v1__plan_transfer_request__init(request);
  request->source_case =
      RESHARD__V1__PLAN_TRANSFER_REQUEST__SOURCE_SOURCE_PLACEMENT_ID;
  request->source_placement_id = t->source_placement_id;
  request->n_source_memory_ids = t->pool_count;
  request->source_memory_ids = memory_ids;
  request->n_source_block_ids = t->source_block_count;
  request->source_block_ids = (uint32_t *)t->source_block_ids;
  request->token_count = t->tokens;
  request->target_case =
      RESHARD__V1__PLAN_TRANSFER_REQUEST__TARGET_TARGET_PLACEMENT_ID;
  request->target_placement_id = t->target_placement_id;
  request->pooled = pooled;
  request->operation_id = "roundtrip-transfer";
  return 0;
}

/* Median in-process planning of `t` (the validated target pool and its
 * table, as the daemon plans per call: with runs, the runs only, without
 * them the varint columns only, never the explicit copies; arena chunks
 * from a pool): copies and runs of the last plan in `copies` and
 * `entries`. */
static int plan_transfer_locally(transfer_scenario *t, bool runs, int count,
                                 double *samples, double *median,
                                 uint64_t *copies, uint64_t *entries) {
  reshard_chunk_pool *pool = reshard_chunk_pool_create(16u << 20);
  if (pool == NULL) {
    return -1;
  }
  t->request.runs = runs;
  t->request.omit_copies = true;
  t->request.varint_columns = !runs;
  int failed = 0;
  for (int r = 0; r < count && !failed; r++) {
    reshard_arena scratch;
    reshard_arena_init_from(&scratch, 64 * 1024,
                            reshard_chunk_pool_source(pool));
    reshard_error err;
    reshard_transfer_plan plan;
    reshard_pooled_memory target = {&t->target_bound, t->target_pool.block_ids,
                                    t->target_pool.block_count};
    t->request.pooled = &target; /* as the daemon gives it */
    double start = bench_now_ns();
    reshard_status status =
        reshard_plan_transfer(&t->request, &scratch, &plan, &err);
    samples[r] = bench_now_ns() - start;
    t->request.pooled = NULL;
    if (status != RESHARD_OK) {
      fprintf(stderr, "transfer plan: %s\n", err.message);
      failed = 1;
    } else {
      *copies = plan.operations;
      *entries = runs ? plan.runs.run_count : 0;
    }
    reshard_arena_destroy(&scratch);
  }
  t->request.runs = false;
  t->request.omit_copies = false;
  t->request.varint_columns = false;
  reshard_chunk_pool_free(pool);
  if (!failed) {
    bench_sort_samples(samples, (size_t)count);
    *median = bench_median(samples, (size_t)count);
  }
  return failed ? -1 : 0;
}

/* The rows of one T scenario after one registration: explicit copies
 * (out[0]) and runs (out[1]), or only `form`'s (-1: both). */
static int measure_transfer(reshard_client *client, replay_floors *floors,
                            const transfer_spec *spec, uint64_t tokens,
                            int form, int runs, row out[2]) {
  reshard_arena arena;
  reshard_arena_init(&arena, 0);
  reshard_error err;
  transfer_scenario t;
  Reshard__V1__PlanTransferRequest request;
  int result = -1;
  double *samples = malloc(sizeof(double) * (size_t)runs);
  if (samples == NULL || transfer_scenario_build(spec, tokens, 42, &arena, &t,
                                                 &err) != RESHARD_OK) {
    fprintf(stderr, "%s: %s\n", spec->name,
            samples == NULL ? "out of memory" : err.message);
    goto done;
  }
  if (set_up_transfer(client, spec->name, &t, &arena, &request) != 0) {
    goto done;
  }
  for (int with_runs = 0; with_runs < 2; with_runs++) {
    if (form >= 0 && with_runs != form) {
      continue;
    }
    row *o = &out[with_runs];
    uint64_t entries = 0;
    if (plan_transfer_locally(&t, with_runs, runs, samples, &o->plan_ns,
                              &o->copies, &entries) != 0) {
      goto done;
    }
    request.runs = with_runs;
    size_t length = protobuf_c_message_get_packed_size(&request.base);
    uint8_t *bytes = reshard_arena_alloc(&arena, length + 1, 16);
    if (bytes == NULL) {
      goto done;
    }
    protobuf_c_message_pack(&request.base, bytes);
    o->request_bytes = length;
    uint8_t *response = NULL;
    size_t response_length = 0;
    process_usage usage;
    if (stats_pid > 0) {
      read_usage(stats_pid, &usage);
    }
    if (time_calls(client, spec->name, PLAN_TRANSFER, bytes, length, runs,
                   samples, &o->round_ns, &response, &response_length) != 0) {
      free(response);
      goto done;
    }
    if (stats_pid > 0) {
      print_usage(stats_pid, "daemon", spec->name,
                  transfer_form_names[with_runs], &usage, runs + 2);
    }
    Reshard__V1__PlanTransferResponse *decoded =
        reshard__v1__plan_transfer_response__unpack(NULL, response_length,
                                                    response);
    bool same = decoded != NULL && decoded->stats != NULL &&
                decoded->stats->operations == o->copies &&
                decoded->stats->runs == entries;
    if (decoded != NULL) {
      reshard__v1__plan_transfer_response__free_unpacked(decoded, NULL);
    }
    if (!same) {
      fprintf(stderr,
              "%s: the daemon's transfer plan differs from the local "
              "one\n",
              spec->name);
      free(response);
      goto done;
    }
    o->response_bytes = response_length;
    int replayed = time_replays(
        floors, spec->name, transfer_form_names[with_runs], PLAN_TRANSFER,
        bytes, length, runs, samples, response, response_length, o);
    free(response);
    if (replayed != 0) {
      goto done;
    }
  }
  result = 0;
done:
  free(samples);
  reshard_arena_destroy(&arena);
  return result;
}

static void print_row(const char *name, const char *reader, const row *r) {
  double copies = r->copies ? (double)r->copies : 1.0;
  printf("%-16s %-10s %9llu %9.1fKB %9.1fKB | %8.1fus %8.1f | %8.1fus "
         "%8.1f | %6.2f | %8.1fus %6.2f | %8.2f | %8.1fus %8.2f\n",
         name, reader, (unsigned long long)r->copies,
         (double)r->request_bytes / 1e3, (double)r->response_bytes / 1e3,
         r->plan_ns / 1e3, r->plan_ns / copies, r->round_ns / 1e3,
         r->round_ns / copies, r->round_ns / r->plan_ns, r->replay_ns / 1e3,
         r->replay_ns / r->plan_ns, r->round_ns / (r->plan_ns + r->replay_ns),
         r->own_replay_ns / 1e3, r->round_ns / (r->plan_ns + r->own_replay_ns));
  fflush(stdout);
}

static void usage(void) {
  fprintf(stderr,
          "usage: reshard-roundtrip [--daemon PATH] [--runs N] [--pages N] "
          "[--scenario PREFIX] [--reader paged|contiguous|pooled] [--tokens N] "
          "[--form explicit|runs] [--unix] [--short] [--daemon-stats] "
          "[--replay PATH]\n"
          "  --scenario: rows whose name starts with PREFIX (S1, T, T5...)\n"
          "  --reader: only the S rows of this reader's memory (to profile "
          "one)\n"
          "  --tokens: tokens of the T (PlanTransfer) rows\n"
          "  --form: only the T rows' explicit copies, or only their runs\n"
          "  --daemon-stats: after each row, the daemon's CPU, minor "
          "faults\n    and context switches per call (/proc), and the own "
          "replay server's\n"
          "  --unix: the daemon and the replay servers on Unix sockets\n"
          "  --replay: the replay server run in a process of its own "
          "(reshard-replay)\n"
          "  --short: 3 runs, 4 pages per scenario (CI keeps it running)\n");
}

int main(int argc, char **argv) {
  /* The client keeps its heap. By default glibc gives each freed response
   * buffer back to the kernel and faults the next one in again, a cost of
   * this client's allocator rather than of the daemon or the transport:
   * on S1 with the paged reader it was 1.5 ms of a 2.7 ms round trip
   * (docs/performance.md, Round 9). The daemon, exec'd, keeps its own. */
  mallopt(M_MMAP_THRESHOLD, 64 << 20);
  mallopt(M_TRIM_THRESHOLD, 256 << 20);
  /* A replay child that died is reported by the failed write, not by the
   * signal. */
  signal(SIGPIPE, SIG_IGN);
  const char *daemon_path = RESHARD_DAEMON_PATH;
  const char *replay_path = RESHARD_REPLAY_PATH;
  const char *only = NULL;
  int runs = 30;
  uint64_t pages = 0;
  uint64_t tokens_flag = 0; /* T rows: tokens moved (0: the spec's) */
  bool unix_socket = false;
  int reader = -1; /* every reader */
  bool daemon_stats = false;
  int form = -1; /* T rows: both forms */
  for (int i = 1; i < argc; i++) {
    if (strcmp(argv[i], "--unix") == 0) {
      unix_socket = true;
    } else if (strcmp(argv[i], "--short") == 0) {
      runs = 3;
      pages = 4;
    } else if (i + 1 < argc && strcmp(argv[i], "--daemon") == 0) {
      daemon_path = argv[++i];
    } else if (i + 1 < argc && strcmp(argv[i], "--replay") == 0) {
      replay_path = argv[++i];
    } else if (i + 1 < argc && strcmp(argv[i], "--runs") == 0) {
      runs = atoi(argv[++i]);
    } else if (i + 1 < argc && strcmp(argv[i], "--pages") == 0) {
      pages = strtoull(argv[++i], NULL, 10);
    } else if (i + 1 < argc && strcmp(argv[i], "--tokens") == 0) {
      tokens_flag = strtoull(argv[++i], NULL, 10);
    } else if (i + 1 < argc && strcmp(argv[i], "--scenario") == 0) {
      only = argv[++i];
    } else if (i + 1 < argc && strcmp(argv[i], "--form") == 0) {
      const char *name = argv[++i];
      form = strcmp(name, "explicit") == 0 ? 0
             : strcmp(name, "runs") == 0   ? 1
                                           : -2;
      if (form == -2) {
        usage();
        return 2;
      }
    } else if (strcmp(argv[i], "--daemon-stats") == 0) {
      daemon_stats = true;
    } else if (i + 1 < argc && strcmp(argv[i], "--reader") == 0) {
      const char *name = argv[++i];
      for (int m = READER_PAGED; m < READER_MEMORY_COUNT; m++) {
        if (strcmp(name, reader_names[m]) == 0) {
          reader = m;
        }
      }
      if (reader < 0) {
        usage();
        return 2;
      }
    } else {
      usage();
      return 2;
    }
  }
  if (runs < 1) {
    runs = 1;
  }
  daemon_proc daemon;
  if (daemon_start(daemon_path, unix_socket, &daemon) != 0) {
    return 1;
  }
  if (daemon_stats) {
    stats_pid = daemon.pid;
  }
  reshard_client *client = reshard_client_open(daemon.target, 60000);
  char listen[2][96] = {"127.0.0.1:0", "127.0.0.1:0"};
  if (unix_socket) {
    snprintf(listen[0], sizeof listen[0], "unix:%s.replay", daemon.socket_path);
    snprintf(listen[1], sizeof listen[1], "unix:%s.replay-own",
             daemon.socket_path);
  }
  replay_floors floors = {.own = {.pid = -1}};
  char replay_target[96];
  floors.in_process =
      replay_server_start(listen[0], replay_target, sizeof replay_target);
  if (floors.in_process != NULL) {
    floors.in_process_client = reshard_client_open(replay_target, 60000);
  }
  if (replay_proc_start(replay_path, listen[1], &floors.own) == 0) {
    floors.own_client = reshard_client_open(floors.own.target, 60000);
  }
  printf("reshard-roundtrip: reshardd at %s, %d calls per row, one client, "
         "medians; replay: the same bytes from a server that stores the "
         "response, in this process (SPEC §7's) and in its own (own)\n",
         daemon.target, runs);
  printf("ratio = round trip / plan; floor = replay / plan; vs floor = round "
         "trip / (plan + replay), SPEC §7's (goal: 1.5 explicit, 1.2 "
         "pooled); vs own = round trip / (plan + own replay)\n");
  printf("%-16s %-10s %9s %11s %11s | %10s %8s | %10s %8s | %6s | %10s %6s | "
         "%8s | %10s %8s\n",
         "scenario", "reader", "copies", "request", "response", "plan", "ns/cp",
         "round trip", "ns/cp", "ratio", "replay", "floor", "vs floor",
         "own replay", "vs own");
  bool ready = client != NULL && floors.in_process_client != NULL &&
               floors.own_client != NULL;
  int failures = !ready;
  for (size_t i = 0;
       ready && i < sizeof scenario_specs / sizeof scenario_specs[0]; i++) {
    const scenario_spec *spec = &scenario_specs[i];
    if (!scenario_selected(spec, only)) {
      continue;
    }
    for (int m = READER_PAGED; m < READER_MEMORY_COUNT; m++) {
      if (reader >= 0 && m != reader) {
        continue;
      }
      row r = {0};
      if (measure(client, &floors, spec, pages, (reader_memory)m, runs, &r) !=
          0) {
        failures++;
        continue;
      }
      print_row(spec->name, reader_names[m], &r);
    }
  }
  for (size_t i = 0;
       ready && i < sizeof transfer_specs / sizeof transfer_specs[0]; i++) {
    const transfer_spec *spec = &transfer_specs[i];
    if (!transfer_selected(spec, only)) {
      continue;
    }
    /* --pages N: N pages of the shape's page size (--short: 4). */
    uint64_t tokens = pages * scenario_specs[spec->shape].page_size;
    if (tokens_flag != 0) {
      tokens = tokens_flag;
    }
    row r[2] = {{0}};
    if (measure_transfer(client, &floors, spec, tokens, form, runs, r) != 0) {
      failures++;
      continue;
    }
    for (int f = 0; f < 2; f++) {
      if (form < 0 || f == form) {
        print_row(spec->name, transfer_form_names[f], &r[f]);
      }
    }
  }
  reshard_client_close(floors.in_process_client);
  replay_server_stop(floors.in_process);
  reshard_client_close(floors.own_client);
  if (replay_proc_stop(&floors.own) != 0) {
    fprintf(stderr, "reshard-replay did not exit cleanly\n");
    failures++;
  }
  if (unix_socket) {
    for (int i = 0; i < 2; i++) {
      unlink(listen[i] + strlen("unix:"));
    }
  }
  reshard_client_close(client);
  if (daemon_stop(&daemon) != 0) {
    fprintf(stderr, "reshardd did not exit cleanly after SIGTERM\n");
    failures++;
  }
  return failures ? 1 : 0;
}
