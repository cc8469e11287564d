/* Memory per page binding, per catalog backend (SPEC §7: a registered page
 * binding costs at most 64 bytes plus its key; ten million bindings fit in
 * 2 GiB). Drives the catalog interface (daemon/catalog/catalog.h) directly
 * on a libuv loop, as the daemon does, without gRPC in between, so ten
 * million bindings take seconds to minutes rather than hours.
 *
 * Every binding is a distinct (model domain, page key) bound to one
 * manifest: page keys are 64 hex digits, as content-addressed page keys
 * (sha256 of the tokens' prefix) are; domains are 64 hex digits too, each
 * with its manifests published under realistic keys
 * (kv/<domain>/manifests/<64 hex>, 142 bytes). What is measured, after the
 * manifests are published and before the first binding, against after the
 * last one:
 * - memory: the process's resident set (VmRSS) growth, the allocator's
 *   bytes in use (mallinfo2) and the backend's own accounting;
 * - lmdb: data.mdb growth (bytes the file grew), with the process's VmRSS
 *   growth beside it (pages of the map read by lookups);
 * - redis: used_memory growth (INFO memory) of a private redis-server
 *   (no persistence), started on a free loopback port when redis-server is
 *   on PATH, and MEMORY USAGE of sample keys for the decomposition.
 * "Beyond the key" subtracts the page keys' bytes (64 per binding) from
 * the growth; the total is the growth itself. Figures only, never a
 * timed test: the ctest smoke runs a small count.
 *
 *   reshard-bench-catalog [--bindings N] [--domains D] [--manifests M]
 *                         [--batch B] [--backends memory,lmdb,redis]
 *                         [--dir DIR] [--keep-redis] */
#define _GNU_SOURCE
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <hiredis/hiredis.h>
#include <inttypes.h>
#include <lmdb.h>
#include <malloc.h>
#include <netinet/in.h>
#include <signal.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>
#include <uv.h>

#include "catalog/catalog.h"
#include "catalog/catalog_open.h"
#include "catalog/lmdb/catalog_lmdb.h"
#include "catalog/memory/catalog_memory.h"
#include "catalog/redis/catalog_redis.h"

#define KEY_HEX 64
#define GOAL_BEYOND_KEY 64.0
#define GOAL_TOTAL (2.0 * 1024 * 1024 * 1024)
#define GOAL_BINDINGS 10000000.0

typedef struct options {
  uint64_t bindings;
  unsigned domains, manifests;
  size_t batch;
  unsigned in_flight;
  bool memory, lmdb, redis;
  const char *dir; /* NULL: a fresh directory under $TMPDIR */
} options;

/* ---- Keys ---- */

/* splitmix64's finalizer: a bijection, so distinct indices give distinct
 * first words and so distinct page keys. */
static uint64_t mix64(uint64_t x) {
  x ^= x >> 30;
  x *= 0xbf58476d1ce4e5b9ull;
  x ^= x >> 27;
  x *= 0x94d049bb133111ebull;
  x ^= x >> 31;
  return x;
}

/* 64 hex digits and a NUL for `index` in the key family `salt`. */
static void hex_key(char out[KEY_HEX + 1], uint64_t salt, uint64_t index) {
  static const char digits[] = "0123456789abcdef";
  uint64_t word = mix64(index ^ salt);
  for (int w = 0; w < 4; w++) {
    for (int i = 0; i < 16; i++) {
      out[w * 16 + i] = digits[(word >> (60 - 4 * i)) & 15];
    }
    word = mix64(word + 0x9e3779b97f4a7c15ull + (uint64_t)w);
  }
  out[KEY_HEX] = '\0';
}

#define SALT_PAGE 0x243f6a8885a308d3ull
#define SALT_DOMAIN 0x13198a2e03707344ull
#define SALT_LAYOUT 0xa4093822299f31d0ull

typedef struct names {
  unsigned domains, manifests;
  char (*domain)[KEY_HEX + 1];
  char (*manifest)[160]; /* [domain * manifests + m] */
} names;

static bool names_init(names *n, const options *o) {
  n->domains = o->domains;
  n->manifests = o->manifests;
  n->domain = calloc(o->domains, sizeof *n->domain);
  n->manifest = calloc((size_t)o->domains * o->manifests, sizeof *n->manifest);
  if (n->domain == NULL || n->manifest == NULL) {
    return false;
  }
  for (unsigned d = 0; d < o->domains; d++) {
    hex_key(n->domain[d], SALT_DOMAIN, d);
    for (unsigned m = 0; m < o->manifests; m++) {
      char layout[KEY_HEX + 1];
      hex_key(layout, SALT_LAYOUT, (uint64_t)d * o->manifests + m);
      snprintf(n->manifest[d * o->manifests + m], sizeof n->manifest[0],
               "kv/%s/manifests/%s", n->domain[d], layout);
    }
  }
  return true;
}

static void names_free(names *n) {
  free(n->domain);
  free(n->manifest);
}

/* ---- Measurements ---- */

static double now_s(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

/* This process's resident set in bytes (VmRSS), 0 when unreadable. */
static uint64_t rss_bytes(void) {
  FILE *f = fopen("/proc/self/status", "r");
  if (f == NULL) {
    return 0;
  }
  char line[256];
  uint64_t kib = 0;
  while (fgets(line, sizeof line, f) != NULL) {
    if (sscanf(line, "VmRSS: %" SCNu64, &kib) == 1) {
      break;
    }
  }
  fclose(f);
  return kib * 1024;
}

/* Bytes the allocator has handed out (small blocks and mmapped ones). */
static uint64_t heap_bytes(void) {
#if defined(__GLIBC__) && (__GLIBC__ > 2 || __GLIBC_MINOR__ >= 33)
  struct mallinfo2 mi = mallinfo2();
  return (uint64_t)mi.uordblks + (uint64_t)mi.hblkhd;
#else
  return 0;
#endif
}

static uint64_t file_bytes(const char *path) {
  struct stat st;
  return stat(path, &st) == 0 ? (uint64_t)st.st_size : 0;
}

/* ---- Driving the catalog ---- */

typedef struct driver {
  reshard_catalog *catalog;
  uv_loop_t *loop;
  const options *o;
  const names *n;
  char (*keys)[KEY_HEX + 1]; /* one batch per operation in flight */
  const char **key_ptrs;
  bool *slot_busy;
  uint64_t issued, done, added;
  unsigned in_flight;
  bool issuing, failed;
  reshard_error err;
  /* put_manifest / close */
  unsigned pending;
  bool closed;
} driver;

typedef struct op_ctx {
  driver *d;
  unsigned slot;
  uint64_t count;
} op_ctx;

static void issue(driver *d);

static void on_added(void *data, const reshard_error *err, uint64_t count) {
  op_ctx *c = data;
  driver *d = c->d;
  if (err->code != RESHARD_OK && !d->failed) {
    d->failed = true;
    d->err = *err;
  }
  d->added += count;
  d->done += c->count;
  d->in_flight--;
  d->slot_busy[c->slot] = false;
  free(c);
  if (!d->issuing) {
    issue(d);
  }
}

/* Starts add_pages operations until `in_flight` are pending or every
 * binding is issued. Batch k holds bindings [k·B, (k+1)·B) of domain
 * k mod D and manifest (k / D) mod M, so domains and manifests interleave
 * as a fleet's registrations would. A backend that answers synchronously
 * calls on_added inside add_pages; the loop here goes on instead of
 * recursing. */
static void issue(driver *d) {
  d->issuing = true;
  while (!d->failed && d->issued < d->o->bindings &&
         d->in_flight < d->o->in_flight) {
    unsigned slot = 0;
    while (d->slot_busy[slot]) {
      slot++;
    }
    uint64_t first = d->issued;
    uint64_t count = d->o->bindings - first;
    if (count > d->o->batch) {
      count = d->o->batch;
    }
    uint64_t k = first / d->o->batch;
    unsigned domain = (unsigned)(k % d->n->domains);
    unsigned manifest = (unsigned)((k / d->n->domains) % d->n->manifests);
    char(*keys)[KEY_HEX + 1] = d->keys + (size_t)slot * d->o->batch;
    const char **ptrs = d->key_ptrs + (size_t)slot * d->o->batch;
    for (uint64_t i = 0; i < count; i++) {
      hex_key(keys[i], SALT_PAGE, first + i);
      ptrs[i] = keys[i];
    }
    op_ctx *c = malloc(sizeof *c);
    if (c == NULL) {
      d->failed = true;
      reshard_error_set(&d->err, RESHARD_INTERNAL, "bench: out of memory");
      break;
    }
    *c = (op_ctx){d, slot, count};
    d->slot_busy[slot] = true;
    d->issued += count;
    d->in_flight++;
    d->catalog->vtable->add_pages(
        d->catalog, d->n->domain[domain],
        d->n->manifest[domain * d->n->manifests + manifest], ptrs,
        (size_t)count, on_added, c);
  }
  d->issuing = false;
}

static void run_until(driver *d, bool (*done)(const driver *)) {
  while (!done(d)) {
    uv_run(d->loop, UV_RUN_ONCE);
  }
}

static bool all_added(const driver *d) {
  return d->in_flight == 0 && (d->failed || d->done >= d->o->bindings);
}

static bool none_pending(const driver *d) {
  return d->pending == 0;
}

static bool is_closed(const driver *d) {
  return d->closed;
}

static void on_put(void *data, const reshard_error *err, bool created) {
  driver *d = data;
  (void)created;
  if (err->code != RESHARD_OK && !d->failed) {
    d->failed = true;
    d->err = *err;
  }
  d->pending--;
}

static void on_closed(void *data) {
  ((driver *)data)->closed = true;
}

static bool publish_all(driver *d) {
  static const uint8_t record[200] = {0x0a};
  for (unsigned dom = 0; dom < d->n->domains; dom++) {
    for (unsigned m = 0; m < d->n->manifests; m++) {
      d->pending++;
      d->catalog->vtable->put_manifest(
          d->catalog, d->n->manifest[dom * d->n->manifests + m],
          d->n->domain[dom], record, sizeof record, on_put, d);
    }
  }
  run_until(d, none_pending);
  return !d->failed;
}

/* Binds every page; returns the seconds it took, or -1 on failure. */
static double bind_all(driver *d) {
  double t0 = now_s();
  issue(d);
  run_until(d, all_added);
  if (d->failed) {
    return -1;
  }
  if (d->added != d->o->bindings) {
    reshard_error_set(&d->err, RESHARD_INTERNAL,
                      "bench: %" PRIu64 " bindings added of %" PRIu64, d->added,
                      d->o->bindings);
    d->failed = true;
    return -1;
  }
  return now_s() - t0;
}

static bool driver_init(driver *d, const options *o, const names *n,
                        uv_loop_t *loop) {
  memset(d, 0, sizeof *d);
  d->o = o;
  d->n = n;
  d->loop = loop;
  size_t slots = (size_t)o->in_flight * o->batch;
  d->keys = malloc(slots * sizeof *d->keys);
  d->key_ptrs = malloc(slots * sizeof *d->key_ptrs);
  d->slot_busy = calloc(o->in_flight, sizeof *d->slot_busy);
  reshard_error_clear(&d->err);
  return d->keys != NULL && d->key_ptrs != NULL && d->slot_busy != NULL;
}

/* Closes the catalog (once) and frees the batches; may be called again. */
static void driver_close(driver *d) {
  if (d->catalog != NULL) {
    d->catalog->vtable->close(d->catalog, on_closed, d);
    run_until(d, is_closed);
    d->catalog = NULL;
  }
  free(d->keys);
  free(d->key_ptrs);
  free(d->slot_busy);
  d->keys = NULL;
  d->key_ptrs = NULL;
  d->slot_busy = NULL;
}

/* ---- Printing ---- */

static void print_header(void) {
  printf("%-7s %-36s %11s %10s %14s %16s %8s\n", "backend", "measured as",
         "bindings", "total MiB", "B/binding", "B beyond key", "seconds");
}

/* One row: `growth` bytes for the run's bindings. */
static void print_row(const char *backend, const char *what, const options *o,
                      uint64_t growth, double seconds) {
  double n = (double)o->bindings;
  double per = (double)growth / n;
  double beyond = per - KEY_HEX;
  printf("%-7s %-36s %11" PRIu64 " %10.1f %14.1f %11.1f %-4s %8.2f\n", backend,
         what, o->bindings, (double)growth / 1048576.0, per, beyond,
         beyond <= GOAL_BEYOND_KEY ? "ok" : "OVER", seconds);
}

/* The total at ten million bindings, scaled from this run, against 2 GiB
 * (exact when the run is ten million). */
static void print_total(const char *backend, const options *o,
                        uint64_t growth) {
  double at10m = (double)growth / (double)o->bindings * GOAL_BINDINGS;
  printf("%-7s total for 10 000 000 bindings%s: %.2f GiB (goal <= 2 GiB: "
         "%s)\n",
         backend, o->bindings == 10000000 ? "" : " (scaled from this run)",
         at10m / 1073741824.0, at10m <= GOAL_TOTAL ? "ok" : "OVER");
}

/* ---- memory ---- */

static int bench_memory(const options *o, const names *n) {
  uv_loop_t loop;
  uv_loop_init(&loop);
  driver d;
  if (!driver_init(&d, o, n, &loop)) {
    fprintf(stderr, "memory: out of memory\n");
    return 1;
  }
  reshard_error err;
  int rc = 0;
  if (reshard_catalog_open(&loop, "memory", &d.catalog, &err) != RESHARD_OK) {
    fprintf(stderr, "memory: %s\n", err.message);
    driver_close(&d);
    return 1;
  }
  if (!publish_all(&d)) {
    fprintf(stderr, "memory: %s\n", d.err.message);
    rc = 1;
    goto out;
  }
  uint64_t rss0 = rss_bytes(), heap0 = heap_bytes();
  double seconds = bind_all(&d);
  if (seconds < 0) {
    fprintf(stderr, "memory: %s\n", d.err.message);
    rc = 1;
    goto out;
  }
  uint64_t rss1 = rss_bytes(), heap1 = heap_bytes();
  reshard_catalog_memory_usage usage;
  reshard_catalog_memory_usage_get(d.catalog, &usage);
  print_row("memory", "VmRSS growth", o, rss1 > rss0 ? rss1 - rss0 : 0,
            seconds);
  if (heap1 > heap0) { /* not under a sanitizer's allocator */
    print_row("memory", "malloc in use growth (mallinfo2)", o, heap1 - heap0,
              seconds);
  }
  print_row("memory", "catalog accounting (written bytes)", o,
            usage.binding_bytes + usage.key_bytes, seconds);
  printf("memory  %.1f ns per binding; arena reserved %.1f MiB (written "
         "%.1f)\n",
         seconds * 1e9 / (double)o->bindings,
         (double)usage.arena_bytes / 1048576.0,
         (double)(usage.binding_bytes + usage.key_bytes) / 1048576.0);
  print_total("memory", o, rss1 > rss0 ? rss1 - rss0 : 0);
out:
  driver_close(&d);
  uv_loop_close(&loop);
  return rc;
}

/* ---- lmdb ---- */

/* `dir`/`name` into `out`; false (a message printed) when it is too long. */
static bool join_path(char *out, size_t size, const char *dir,
                      const char *name) {
  int n = snprintf(out, size, "%s/%s", dir, name);
  if (n < 0 || (size_t)n >= size) {
    fprintf(stderr, "bench: path %s/%s too long\n", dir, name);
    return false;
  }
  return true;
}

static void remove_tree(const char *path) {
  DIR *dir = opendir(path);
  if (dir != NULL) {
    struct dirent *e;
    while ((e = readdir(dir)) != NULL) {
      if (strcmp(e->d_name, ".") != 0 && strcmp(e->d_name, "..") != 0) {
        char child[4096];
        if (join_path(child, sizeof child, path, e->d_name)) {
          unlink(child);
        }
      }
    }
    closedir(dir);
  }
  rmdir(path);
}

/* Where LMDB's bytes go, read from the closed catalog in `dir`: the pages
 * database's leaf and branch pages per binding (B-tree leaves filled by
 * random keys), and the size of a compacting copy (leaves full, no free
 * pages) in `copy_dir`, as `mdb_copy -c` makes it. */
static void lmdb_decompose(const char *dir, const char *copy_dir,
                           const options *o, uint64_t file0) {
  MDB_env *env = NULL;
  MDB_txn *txn = NULL;
  MDB_dbi dbi;
  MDB_stat st;
  int rc = mdb_env_create(&env);
  if (rc == 0) {
    mdb_env_set_maxdbs(env, 8);
    mdb_env_set_mapsize(env, (size_t)RESHARD_CATALOG_LMDB_DEFAULT_MAP_SIZE);
    rc = mdb_env_open(env, dir, MDB_RDONLY, 0600);
  }
  if (rc == 0 && (rc = mdb_txn_begin(env, NULL, MDB_RDONLY, &txn)) == 0 &&
      (rc = mdb_dbi_open(txn, "pages", 0, &dbi)) == 0 &&
      (rc = mdb_stat(txn, dbi, &st)) == 0) {
    double n = (double)o->bindings;
    printf("lmdb    pages database: %zu entries, %zu leaf + %zu branch pages "
           "of %u B: %.1f B per binding in leaves, %.1f in branches\n",
           st.ms_entries, st.ms_leaf_pages, st.ms_branch_pages, st.ms_psize,
           (double)st.ms_leaf_pages * st.ms_psize / n,
           (double)st.ms_branch_pages * st.ms_psize / n);
  }
  if (txn != NULL) {
    mdb_txn_abort(txn);
  }
  char copy[4096];
  if (rc == 0 && mkdir(copy_dir, 0700) == 0 &&
      (rc = mdb_env_copy2(env, copy_dir, MDB_CP_COMPACT)) == 0 &&
      join_path(copy, sizeof copy, copy_dir, "data.mdb")) {
    print_row("lmdb", "data.mdb compacted (mdb_copy -c)", o,
              file_bytes(copy) - file0, 0);
  }
  if (rc != 0) {
    printf("lmdb    decomposition: %s\n", mdb_strerror(rc));
  }
  mdb_env_close(env);
}

static int bench_lmdb(const options *o, const names *n, const char *root) {
  char dir[4096], data[4096], copy_dir[4096];
  if (!join_path(dir, sizeof dir, root, "lmdb") ||
      !join_path(data, sizeof data, dir, "data.mdb") ||
      !join_path(copy_dir, sizeof copy_dir, root, "lmdb-compacted")) {
    return 1;
  }
  uv_loop_t loop;
  uv_loop_init(&loop);
  driver d;
  if (!driver_init(&d, o, n, &loop)) {
    fprintf(stderr, "lmdb: out of memory\n");
    return 1;
  }
  reshard_error err;
  int rc = 0;
  if (reshard_catalog_lmdb_open(&loop, dir, 0, &d.catalog, &err) !=
      RESHARD_OK) {
    fprintf(stderr, "lmdb: %s\n", err.message);
    driver_close(&d);
    uv_loop_close(&loop);
    return 1;
  }
  if (!publish_all(&d)) {
    fprintf(stderr, "lmdb: %s\n", d.err.message);
    rc = 1;
    goto out;
  }
  uint64_t file0 = file_bytes(data), rss0 = rss_bytes();
  double seconds = bind_all(&d);
  if (seconds < 0) {
    fprintf(stderr, "lmdb: %s\n", d.err.message);
    rc = 1;
    goto out;
  }
  uint64_t file1 = file_bytes(data), rss1 = rss_bytes();
  reshard_catalog_lmdb_stats stats;
  reshard_catalog_lmdb_stats_get(d.catalog, &stats);
  print_row("lmdb", "data.mdb growth", o, file1 - file0, seconds);
  print_row("lmdb", "VmRSS growth (map pages read)", o,
            rss1 > rss0 ? rss1 - rss0 : 0, seconds);
  printf("lmdb    %" PRIu64 " commits for %" PRIu64 " writes\n", stats.commits,
         stats.writes);
  print_total("lmdb", o, file1 - file0);
  driver_close(&d);
  lmdb_decompose(dir, copy_dir, o, file0);
out:
  driver_close(&d);
  uv_loop_close(&loop);
  remove_tree(dir);
  remove_tree(copy_dir);
  return rc;
}

/* ---- redis ---- */

static int free_port(void) {
  int fd = socket(AF_INET, SOCK_STREAM, 0);
  if (fd < 0) {
    return -1;
  }
  struct sockaddr_in addr = {.sin_family = AF_INET};
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  socklen_t length = sizeof addr;
  int port = -1;
  if (bind(fd, (struct sockaddr *)&addr, sizeof addr) == 0 &&
      getsockname(fd, (struct sockaddr *)&addr, &length) == 0) {
    port = ntohs(addr.sin_port);
  }
  close(fd);
  return port;
}

/* True when `name` is an executable file in a directory of PATH. */
static bool on_path(const char *name) {
  const char *path = getenv("PATH");
  if (path == NULL) {
    return false;
  }
  char *copy = strdup(path);
  bool found = false;
  for (char *save = NULL, *dir = strtok_r(copy, ":", &save);
       dir != NULL && !found; dir = strtok_r(NULL, ":", &save)) {
    char file[4096];
    int length = snprintf(file, sizeof file, "%s/%s", dir, name);
    found =
        length > 0 && (size_t)length < sizeof file && access(file, X_OK) == 0;
  }
  free(copy);
  return found;
}

/* Starts redis-server without persistence on `port`, its working
 * directory `dir`; the child dies with this process. */
static pid_t redis_start(int port, const char *dir) {
  char port_text[16];
  snprintf(port_text, sizeof port_text, "%d", port);
  pid_t pid = fork();
  if (pid == 0) {
    prctl(PR_SET_PDEATHSIG, SIGKILL);
    int null = open("/dev/null", O_RDWR);
    dup2(null, 0);
    dup2(null, 1);
    dup2(null, 2);
    char *argv[] = {"redis-server",
                    "--port",
                    port_text,
                    "--bind",
                    "127.0.0.1",
                    "--save",
                    "",
                    "--appendonly",
                    "no",
                    "--dir",
                    (char *)dir,
                    "--logfile",
                    "",
                    NULL};
    execvp("redis-server", argv);
    _exit(127);
  }
  return pid;
}

static redisContext *redis_connect(int port, pid_t pid) {
  for (int i = 0; i < 500; i++) {
    redisContext *c = redisConnect("127.0.0.1", port);
    if (c != NULL && c->err == 0) {
      return c;
    }
    redisFree(c);
    if (waitpid(pid, NULL, WNOHANG) != 0) {
      return NULL;
    }
    usleep(10000);
  }
  return NULL;
}

/* The number after "field:" in INFO `section`, 0 when missing. */
static double info_number(redisContext *c, const char *section,
                          const char *field) {
  redisReply *r = redisCommand(c, "INFO %s", section);
  double value = 0;
  if (r != NULL && r->type == REDIS_REPLY_STRING) {
    char want[64];
    snprintf(want, sizeof want, "\n%s:", field);
    const char *at = strstr(r->str, want);
    if (at != NULL) {
      value = strtod(at + strlen(want), NULL);
    }
  }
  freeReplyObject(r);
  return value;
}

/* The server's CPU seconds so far (user and system). */
static double redis_cpu(redisContext *c) {
  return info_number(c, "cpu", "used_cpu_user") +
         info_number(c, "cpu", "used_cpu_sys");
}

/* The integer after "field:" in INFO memory, 0 when missing. */
static uint64_t info_field(redisContext *c, const char *field) {
  redisReply *r = redisCommand(c, "INFO memory");
  uint64_t value = 0;
  if (r != NULL && r->type == REDIS_REPLY_STRING) {
    char want[64];
    snprintf(want, sizeof want, "\n%s:", field);
    const char *at = strstr(r->str, want);
    if (at != NULL) {
      value = strtoull(at + strlen(want), NULL, 10);
    }
  }
  freeReplyObject(r);
  return value;
}

/* MEMORY USAGE, OBJECT ENCODING and HLEN of the buckets holding sample
 * page keys (docs/catalog.md "Page bindings on Redis"), and INFO's split
 * of used_memory, for the decomposition in docs/catalog.md. */
static void redis_decompose(redisContext *c, const options *o, const names *n) {
  uint64_t samples = o->bindings < 5 ? o->bindings : 5;
  double usage_sum = 0, fields_sum = 0;
  size_t name_length = 0;
  char encoding[32] = "?";
  for (uint64_t s = 0; s < samples; s++) {
    uint64_t index = s * (o->bindings / samples);
    uint64_t k = index / o->batch;
    unsigned domain = (unsigned)(k % n->domains);
    char page[KEY_HEX + 1], bucket[32], key[256];
    hex_key(page, SALT_PAGE, index);
    if (!reshard_catalog_redis_page_bucket(page, bucket, sizeof bucket)) {
      continue;
    }
    snprintf(key, sizeof key, "reshard:{%s}:%s", n->domain[domain], bucket);
    name_length = strlen(key);
    redisReply *r = redisCommand(c, "MEMORY USAGE %s SAMPLES 0", key);
    if (r != NULL && r->type == REDIS_REPLY_INTEGER) {
      usage_sum += (double)r->integer;
    }
    freeReplyObject(r);
    r = redisCommand(c, "HLEN %s", key);
    if (r != NULL && r->type == REDIS_REPLY_INTEGER) {
      fields_sum += (double)r->integer;
    }
    freeReplyObject(r);
    r = redisCommand(c, "OBJECT ENCODING %s", key);
    if (r != NULL && r->type == REDIS_REPLY_STRING) {
      snprintf(encoding, sizeof encoding, "%s", r->str);
    }
    freeReplyObject(r);
  }
  redisReply *r = redisCommand(c, "DBSIZE");
  long long keys = r != NULL && r->type == REDIS_REPLY_INTEGER ? r->integer : 0;
  freeReplyObject(r);
  printf("redis   decomposition: bucket key name %zu B "
         "(reshard:{<domain>}:pages:<bucket>), encoding %s, %.1f fields "
         "(bindings) a bucket, MEMORY USAGE of a bucket %.0f B (%.1f B a "
         "field; mean of %" PRIu64 "); %lld keys; used_memory_dataset %" PRIu64
         " B, used_memory_overhead %" PRIu64 " B\n",
         name_length, encoding, samples ? fields_sum / (double)samples : 0.0,
         samples ? usage_sum / (double)samples : 0.0,
         fields_sum > 0 ? usage_sum / fields_sum : 0.0, samples, keys,
         info_field(c, "used_memory_dataset"),
         info_field(c, "used_memory_overhead"));
}

static int bench_redis(const options *o, const names *n, const char *root) {
  if (!on_path("redis-server")) {
    printf("redis   skipped: no redis-server on PATH\n");
    return 0;
  }
  char dir[4096];
  if (!join_path(dir, sizeof dir, root, "redis")) {
    return 1;
  }
  if (mkdir(dir, 0700) != 0 && errno != EEXIST) {
    fprintf(stderr, "redis: mkdir %s: %s\n", dir, strerror(errno));
    return 1;
  }
  int port = free_port();
  pid_t pid = port > 0 ? redis_start(port, dir) : -1;
  redisContext *sync = pid > 0 ? redis_connect(port, pid) : NULL;
  if (sync == NULL) {
    fprintf(stderr, "redis: redis-server did not start on port %d\n", port);
    if (pid > 0) {
      kill(pid, SIGKILL);
      waitpid(pid, NULL, 0);
    }
    remove_tree(dir);
    return 1;
  }
  uv_loop_t loop;
  uv_loop_init(&loop);
  driver d;
  int rc = 0;
  char spec[64];
  snprintf(spec, sizeof spec, "redis://127.0.0.1:%d", port);
  reshard_error err;
  if (!driver_init(&d, o, n, &loop)) {
    fprintf(stderr, "redis: out of memory\n");
    rc = 1;
    goto out;
  }
  if (reshard_catalog_open(&loop, spec, &d.catalog, &err) != RESHARD_OK) {
    fprintf(stderr, "redis: %s\n", err.message);
    rc = 1;
    goto out;
  }
  if (!publish_all(&d)) {
    fprintf(stderr, "redis: %s\n", d.err.message);
    rc = 1;
    goto out;
  }
  uint64_t used0 = info_field(sync, "used_memory");
  double cpu0 = redis_cpu(sync);
  double seconds = bind_all(&d);
  if (seconds < 0) {
    fprintf(stderr, "redis: %s\n", d.err.message);
    rc = 1;
    goto out;
  }
  uint64_t used1 = info_field(sync, "used_memory");
  print_row("redis", "used_memory growth (INFO memory)", o,
            used1 > used0 ? used1 - used0 : 0, seconds);
  printf("redis   server CPU binding them %.1f s (%.2f us a binding; the "
         "seconds column is wall time, client included)\n",
         redis_cpu(sync) - cpu0,
         (redis_cpu(sync) - cpu0) * 1e6 / (double)o->bindings);
  printf("redis   used_memory_rss %.1f MiB\n",
         (double)info_field(sync, "used_memory_rss") / 1048576.0);
  redis_decompose(sync, o, n);
  print_total("redis", o, used1 > used0 ? used1 - used0 : 0);
out:
  driver_close(&d);
  uv_loop_close(&loop);
  redisFree(sync);
  kill(pid, SIGTERM);
  waitpid(pid, NULL, 0);
  remove_tree(dir);
  return rc;
}

/* ---- main ---- */

static bool parse_u64(const char *text, uint64_t min, uint64_t max,
                      uint64_t *out) {
  char *end;
  errno = 0;
  unsigned long long v = strtoull(text, &end, 10);
  if (errno != 0 || *end != '\0' || text[0] == '-' || v < min || v > max) {
    return false;
  }
  *out = v;
  return true;
}

static int usage(void) {
  fprintf(stderr, "usage: reshard-bench-catalog [--bindings N] [--domains D] "
                  "[--manifests M] [--batch B] [--in-flight F] "
                  "[--backends memory,lmdb,redis] [--dir DIR]\n");
  return 2;
}

int main(int argc, char **argv) {
  options o = {.bindings = 100000,
               .domains = 4,
               .manifests = 8,
               .batch = 1024,
               .in_flight = 16,
               .memory = true,
               .lmdb = true,
               .redis = true};
  for (int i = 1; i < argc; i++) {
    uint64_t v;
    const char *value = i + 1 < argc ? argv[i + 1] : NULL;
    if (value == NULL) {
      return usage();
    }
    if (strcmp(argv[i], "--bindings") == 0 &&
        parse_u64(value, 1, UINT64_C(1) << 32, &v)) {
      o.bindings = v;
    } else if (strcmp(argv[i], "--domains") == 0 &&
               parse_u64(value, 1, 4096, &v)) {
      o.domains = (unsigned)v;
    } else if (strcmp(argv[i], "--manifests") == 0 &&
               parse_u64(value, 1, 4096, &v)) {
      o.manifests = (unsigned)v;
    } else if (strcmp(argv[i], "--batch") == 0 &&
               parse_u64(value, 1, 65536, &v)) {
      o.batch = (size_t)v;
    } else if (strcmp(argv[i], "--in-flight") == 0 &&
               parse_u64(value, 1, 256, &v)) {
      o.in_flight = (unsigned)v;
    } else if (strcmp(argv[i], "--backends") == 0) {
      o.memory = strstr(value, "memory") != NULL;
      o.lmdb = strstr(value, "lmdb") != NULL;
      o.redis = strstr(value, "redis") != NULL;
    } else if (strcmp(argv[i], "--dir") == 0) {
      o.dir = value;
    } else {
      return usage();
    }
    i++;
  }
  if ((uint64_t)o.domains * o.manifests > UINT32_MAX) {
    return usage();
  }
  /* A row as soon as its backend is done, also into a file. */
  setvbuf(stdout, NULL, _IOLBF, 0);
  names n;
  if (!names_init(&n, &o)) {
    fprintf(stderr, "bench: out of memory\n");
    return 1;
  }
  char root[4096];
  bool made_root = o.dir == NULL;
  if (made_root) {
    const char *tmp = getenv("TMPDIR");
    snprintf(root, sizeof root, "%s/reshard-bench-catalog-XXXXXX",
             tmp != NULL && tmp[0] != '\0' ? tmp : "/tmp");
    if (mkdtemp(root) == NULL) {
      fprintf(stderr, "bench: mkdtemp %s: %s\n", root, strerror(errno));
      names_free(&n);
      return 1;
    }
  } else {
    snprintf(root, sizeof root, "%s", o.dir);
  }
  printf("catalog bench: %" PRIu64 " bindings per backend, each a distinct "
         "(model domain, page key) bound to one manifest; page keys %d hex "
         "digits (content-addressed); %u model domains (64 hex) x %u "
         "manifests (keys kv/<domain>/manifests/<64 hex>, %zu B); %zu pages "
         "per add_pages, %u in flight\n",
         o.bindings, KEY_HEX, o.domains, o.manifests, strlen(n.manifest[0]),
         o.batch, o.in_flight);
  printf("B beyond key = (growth - %d B of page key per binding) / bindings; "
         "goal <= 64; total goal <= 2 GiB at 10 000 000\n",
         KEY_HEX);
  print_header();
  int rc = 0;
  if (o.memory) {
    rc |= bench_memory(&o, &n);
  }
  if (o.lmdb) {
    rc |= bench_lmdb(&o, &n, root);
  }
  if (o.redis) {
    rc |= bench_redis(&o, &n, root);
  }
  if (made_root) {
    rmdir(root);
  }
  names_free(&n);
  return rc;
}
