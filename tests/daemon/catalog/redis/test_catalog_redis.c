/* Tests daemon/catalog/redis/ through the catalog interface on a real
 * libuv loop against a real redis-server, which each test starts on a free
 * loopback port (no persistence) and stops: manifests, idempotent bindings,
 * lookups, forgetting, two catalogs sharing one Redis, SELECT, an outage
 * with UNAVAILABLE and recovery without reopening the catalog, and objects
 * (placements and memory pools) under their documented keys.
 *
 * Needs redis-server on PATH (Debian's redis-server, installed by
 * scripts/install-deps.sh). */
#define _GNU_SOURCE
#include <arpa/inet.h>
#include <criterion/criterion.h>
#include <fcntl.h>
#include <hiredis/hiredis.h>
#include <netinet/in.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "catalog/catalog_open.h"
#include "catalog/redis/catalog_redis.h"

/* ---- redis-server ---- */

static pid_t redis_pid;
static int redis_port;

static int free_port(void) {
  int fd = socket(AF_INET, SOCK_STREAM, 0);
  cr_assert_geq(fd, 0);
  struct sockaddr_in addr = {.sin_family = AF_INET};
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  cr_assert_eq(bind(fd, (struct sockaddr *)&addr, sizeof addr), 0);
  socklen_t length = sizeof addr;
  cr_assert_eq(getsockname(fd, (struct sockaddr *)&addr, &length), 0);
  close(fd);
  return ntohs(addr.sin_port);
}

static bool port_open(int port) {
  int fd = socket(AF_INET, SOCK_STREAM, 0);
  struct sockaddr_in addr = {.sin_family = AF_INET,
                             .sin_port = htons((uint16_t)port)};
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  bool open = connect(fd, (struct sockaddr *)&addr, sizeof addr) == 0;
  close(fd);
  return open;
}

static void sleep_ms(long ms) {
  struct timespec ts = {ms / 1000, (ms % 1000) * 1000000L};
  nanosleep(&ts, NULL);
}

static void redis_start(void) {
  char port[16];
  snprintf(port, sizeof port, "%d", redis_port);
  char *argv[] = {"redis-server", "--port",    port,        "--bind",
                  "127.0.0.1",    "--save",    "",          "--appendonly",
                  "no",           "--logfile", "/dev/null", NULL};
  redis_pid = fork();
  cr_assert_geq(redis_pid, 0);
  if (redis_pid == 0) {
    /* Dies with the test process, even when that one crashes, and holds
     * none of its output pipes. */
    prctl(PR_SET_PDEATHSIG, SIGKILL);
    int null = open("/dev/null", O_RDWR);
    dup2(null, 0);
    dup2(null, 1);
    dup2(null, 2);
    execvp("redis-server", argv);
    _exit(127);
  }
  for (int i = 0; i < 500 && !port_open(redis_port); i++) {
    int status;
    cr_assert_eq(waitpid(redis_pid, &status, WNOHANG), 0,
                 "redis-server exited: install Debian's redis-server "
                 "(scripts/install-deps.sh)");
    sleep_ms(10);
  }
  cr_assert(port_open(redis_port), "redis-server did not listen on %d",
            redis_port);
}

static void redis_stop(void) {
  if (redis_pid > 0) {
    kill(redis_pid, SIGKILL);
    waitpid(redis_pid, NULL, 0);
    redis_pid = 0;
  }
}

/* ---- Loop helpers ---- */

#define CATALOG_TEST_RECORD "r\0ec"
#include "../catalog_results.h"

typedef catalog_result result;

static uv_loop_t loop;
static reshard_catalog *catalog;
static char spec[64];
static const char *const domain = "d0";

typedef struct waiter {
  uv_timer_t timer;
  const int *calls;
  int want;
  reshard_catalog *connected; /* or wait until this one is connected */
  uint64_t deadline;
} waiter;

static void on_tick(uv_timer_t *timer) {
  waiter *w = timer->data;
  bool done = w->connected ? reshard_catalog_redis_connected(w->connected)
                           : *w->calls >= w->want;
  if (done || uv_now(&loop) > w->deadline) {
    uv_timer_stop(timer);
  }
}

/* Runs the loop until `*calls` reaches `want` (or `connected` connects),
 * for at most `timeout_ms`. */
static void run_until(const int *calls, int want, reshard_catalog *connected,
                      uint64_t timeout_ms) {
  waiter w = {.calls = calls, .want = want, .connected = connected};
  w.deadline = uv_now(&loop) + timeout_ms;
  uv_timer_init(&loop, &w.timer);
  w.timer.data = &w;
  uv_timer_start(&w.timer, on_tick, 1, 5);
  uv_run(&loop, UV_RUN_DEFAULT);
  uv_close((uv_handle_t *)&w.timer, NULL);
  uv_run(&loop, UV_RUN_DEFAULT);
}

static void wait_calls(result *r, int want) {
  run_until(&r->calls, want, NULL, 10000);
  cr_assert_eq(r->calls, want, "callback count %d, want %d", r->calls, want);
}

static void closed(void *data) {
  *(int *)data += 1;
}

static void close_one(reshard_catalog *c) {
  int done = 0;
  c->vtable->close(c, closed, &done);
  uv_run(&loop, UV_RUN_DEFAULT);
  cr_assert_eq(done, 1);
}

static reshard_catalog *open_spec(const char *text) {
  reshard_catalog *c = NULL;
  reshard_error err;
  cr_assert_eq(reshard_catalog_open(&loop, text, &c, &err), RESHARD_OK, "%s",
               err.message);
  cr_assert_str_eq(c->vtable->name, "redis");
  return c;
}

static void setup(void) {
  cr_assert_eq(uv_loop_init(&loop), 0);
  redis_port = free_port();
  redis_start();
  snprintf(spec, sizeof spec, "redis://127.0.0.1:%d", redis_port);
  catalog = open_spec(spec);
}

static void teardown(void) {
  if (catalog != NULL) {
    close_one(catalog);
    catalog = NULL;
  }
  redis_stop();
  cr_assert_eq(uv_loop_close(&loop), 0);
}

TestSuite(catalog_redis, .init = setup, .fini = teardown, .timeout = 60);

/* ---- Operations (each waits for its callback) ---- */

static void publish_on(reshard_catalog *c, const char *key,
                       const char *in_domain, result *r) {
  int want = r->calls + 1;
  c->vtable->put_manifest(c, key, in_domain, (const uint8_t *)"r\0ec", 4,
                          on_put, r);
  wait_calls(r, want);
}

static void add_on(reshard_catalog *c, const char *key,
                   const char *const *pages, size_t n, result *r) {
  int want = r->calls + 1;
  c->vtable->add_pages(c, domain, key, pages, n, on_count, r);
  wait_calls(r, want);
}

static void forget_on(reshard_catalog *c, const char *key,
                      const char *const *pages, size_t n, result *r) {
  int want = r->calls + 1;
  c->vtable->forget_pages(c, domain, key, pages, n, on_count, r);
  wait_calls(r, want);
}

static void lookup_on(reshard_catalog *c, const char *in_domain,
                      const char *const *pages, size_t n, result *r) {
  int want = r->calls + 1;
  c->vtable->lookup_pages(c, in_domain, pages, n, on_lookup, r);
  wait_calls(r, want);
}

static void get_on(reshard_catalog *c, const char *const *keys, size_t n,
                   result *r) {
  int want = r->calls + 1;
  c->vtable->get_manifests(c, keys, n, on_get, r);
  wait_calls(r, want);
}

Test(catalog_redis, manifests_are_stored_once) {
  result r = {0};
  /* Issued before the connection is up: it waits for it. */
  publish_on(catalog, "m1", domain, &r);
  cr_assert_eq(r.err.code, RESHARD_OK, "%s", r.err.message);
  cr_assert(r.created);
  publish_on(catalog, "m1", domain, &r);
  cr_assert_eq(r.err.code, RESHARD_OK);
  cr_assert(!r.created);
  const char *keys[] = {"m1", "m2"};
  get_on(catalog, keys, 2, &r);
  cr_assert_eq(r.err.code, RESHARD_OK, "%s", r.err.message);
  cr_assert_eq(r.found, 1);
}

Test(catalog_redis, bindings) {
  result r = {0};
  const char *pages[] = {"p0", "p1", "p2"};
  add_on(catalog, "m1", pages, 2, &r);
  cr_assert_eq(r.err.code, RESHARD_NOT_FOUND, "%s", r.err.message);
  cr_assert(strstr(r.err.message, "m1") != NULL);

  publish_on(catalog, "m1", domain, &r);
  publish_on(catalog, "m2", domain, &r);
  publish_on(catalog, "m3", "other", &r);
  add_on(catalog, "m3", pages, 1, &r);
  cr_assert_eq(r.err.code, RESHARD_INVALID_ARGUMENT, "%s", r.err.message);

  add_on(catalog, "m1", pages, 2, &r);
  cr_assert_eq(r.err.code, RESHARD_OK, "%s", r.err.message);
  cr_assert_eq(r.count, 2);
  add_on(catalog, "m1", pages, 2, &r);
  cr_assert_eq(r.count, 0); /* idempotent */
  add_on(catalog, "m2", pages + 1, 1, &r);
  cr_assert_eq(r.count, 1);

  lookup_on(catalog, domain, pages, 3, &r);
  cr_assert_eq(r.err.code, RESHARD_OK, "%s", r.err.message);
  cr_assert(r.domain_known);
  cr_assert_eq(r.page_start[0], 0);
  cr_assert_eq(r.page_start[1], 1);
  cr_assert_eq(r.page_start[2], 3);
  cr_assert_eq(r.page_start[3], 3);
  cr_assert_str_eq(r.keys[0], "m1");
  cr_assert_str_eq(r.keys[1], "m1"); /* sorted within a page */
  cr_assert_str_eq(r.keys[2], "m2");

  forget_on(catalog, "m1", pages + 1, 1, &r);
  cr_assert_eq(r.count, 1);
  forget_on(catalog, "m1", pages + 1, 1, &r);
  cr_assert_eq(r.count, 0);
  forget_on(catalog, NULL, pages, 3, &r);
  cr_assert_eq(r.count, 2);
  lookup_on(catalog, domain, pages, 3, &r);
  cr_assert(r.domain_known);
  cr_assert_eq(r.page_start[3], 0);

  lookup_on(catalog, "unknown", pages, 3, &r);
  cr_assert(!r.domain_known);
  cr_assert_eq(r.page_start[3], 0);
}

Test(catalog_redis, two_catalogs_share_one_redis) {
  reshard_catalog *other = open_spec(spec);
  result r = {0};
  publish_on(catalog, "m1", domain, &r);
  publish_on(other, "m1", domain, &r);
  cr_assert(!r.created);
  const char *pages[] = {"a", "b"};
  add_on(other, "m1", pages, 2, &r);
  cr_assert_eq(r.count, 2);
  lookup_on(catalog, domain, pages, 2, &r);
  cr_assert_eq(r.page_start[2], 2);
  forget_on(catalog, NULL, pages, 1, &r);
  cr_assert_eq(r.count, 1);
  lookup_on(other, domain, pages, 2, &r);
  cr_assert_eq(r.page_start[1], 0);
  cr_assert_eq(r.page_start[2], 1);
  close_one(other);
}

Test(catalog_redis, select_keeps_databases_apart) {
  char db3[80];
  snprintf(db3, sizeof db3, "%s/3", spec);
  reshard_catalog *third = open_spec(db3);
  result r = {0};
  publish_on(third, "m1", domain, &r);
  cr_assert(r.created);
  publish_on(catalog, "m1", domain, &r);
  cr_assert(r.created, "database 0 must not see database 3's manifest");
  close_one(third);

  /* A database Redis does not have: UNAVAILABLE naming SELECT. */
  char bad[80];
  snprintf(bad, sizeof bad, "%s/999", spec);
  reshard_catalog *missing = open_spec(bad);
  publish_on(missing, "m1", domain, &r);
  cr_assert_eq(r.err.code, RESHARD_UNAVAILABLE);
  cr_assert(strstr(r.err.message, "SELECT") != NULL, "%s", r.err.message);
  close_one(missing);
}

Test(catalog_redis, outage_is_unavailable_then_recovers) {
  result r = {0};
  publish_on(catalog, "m1", domain, &r);
  cr_assert_eq(r.err.code, RESHARD_OK);
  redis_stop();

  /* The loss is noticed by the next request at the latest. */
  const char *pages[] = {"p"};
  for (int i = 0; i < 3; i++) {
    add_on(catalog, "m1", pages, 1, &r);
    if (r.err.code == RESHARD_UNAVAILABLE) {
      break;
    }
  }
  cr_assert_eq(r.err.code, RESHARD_UNAVAILABLE, "%s", r.err.message);
  cr_assert(strstr(r.err.message, spec) != NULL, "%s", r.err.message);
  cr_assert(strstr(r.err.message, "unreachable") != NULL, "%s", r.err.message);
  lookup_on(catalog, domain, pages, 1, &r);
  cr_assert_eq(r.err.code, RESHARD_UNAVAILABLE);
  get_on(catalog, pages, 1, &r);
  cr_assert_eq(r.err.code, RESHARD_UNAVAILABLE);
  cr_assert(!reshard_catalog_redis_connected(catalog));

  /* A while down (reconnect attempts are refused), then back on the same
   * port (empty: no persistence): the catalog reconnects by itself. */
  int never = 0;
  run_until(&never, 1, NULL, 400);
  lookup_on(catalog, domain, pages, 1, &r);
  cr_assert_eq(r.err.code, RESHARD_UNAVAILABLE);
  cr_assert(strstr(r.err.message, "refused") != NULL, "%s", r.err.message);
  redis_start();
  run_until(NULL, 0, catalog, 15000);
  cr_assert(reshard_catalog_redis_connected(catalog));
  publish_on(catalog, "m1", domain, &r);
  cr_assert_eq(r.err.code, RESHARD_OK, "%s", r.err.message);
  cr_assert(r.created);
  add_on(catalog, "m1", pages, 1, &r);
  cr_assert_eq(r.err.code, RESHARD_OK, "%s", r.err.message);
  cr_assert_eq(r.count, 1);
}

Test(catalog_redis, unreachable_from_the_start) {
  close_one(catalog);
  catalog = NULL;
  redis_stop();
  reshard_catalog *c = open_spec(spec);
  result r = {0};
  publish_on(c, "m1", domain, &r);
  cr_assert_eq(r.err.code, RESHARD_UNAVAILABLE);
  cr_assert(strstr(r.err.message, "unreachable") != NULL, "%s", r.err.message);
  close_one(c);
}

Test(catalog_redis, silent_redis_times_out) {
  result r = {0};
  publish_on(catalog, "m1", domain, &r);
  kill(redis_pid, SIGSTOP);
  const char *keys[] = {"m1"};
  get_on(catalog, keys, 1, &r);
  kill(redis_pid, SIGCONT);
  cr_assert_eq(r.err.code, RESHARD_UNAVAILABLE);
  cr_assert(strstr(r.err.message, "no reply") != NULL, "%s", r.err.message);
  run_until(NULL, 0, catalog, 15000);
  get_on(catalog, keys, 1, &r);
  cr_assert_eq(r.err.code, RESHARD_OK, "%s", r.err.message);
  cr_assert_eq(r.found, 1);
}

Test(catalog_redis, close_answers_pending_operations_first) {
  result r = {0};
  publish_on(catalog, "m1", domain, &r);
  const char *page = "p";
  result pending = {0};
  catalog->vtable->add_pages(catalog, domain, "m1", &page, 1, on_count,
                             &pending);
  close_one(catalog);
  catalog = NULL;
  cr_assert_eq(pending.calls, 1);
  cr_assert_eq(pending.err.code, RESHARD_OK, "%s", pending.err.message);
  cr_assert_eq(pending.count, 1);
}

Test(catalog_redis, malformed_specs) {
  reshard_catalog *c = NULL;
  reshard_error err;
  cr_assert_eq(reshard_catalog_open(&loop, "redis://nohost", &c, &err),
               RESHARD_INVALID_ARGUMENT);
  cr_assert_eq(reshard_catalog_open(&loop, "redis://h:0", &c, &err),
               RESHARD_INVALID_ARGUMENT);
  cr_assert_eq(reshard_catalog_open(&loop, "redis://h:1/x", &c, &err),
               RESHARD_INVALID_ARGUMENT);
  cr_assert_null(c);
}

/* ---- Objects: placements and memory pools ---- */

#define PLACEMENT RESHARD_CATALOG_OBJECT_PLACEMENT
#define POOL RESHARD_CATALOG_OBJECT_MEMORY_POOL

static void put_object_on(reshard_catalog *c, reshard_catalog_object_kind kind,
                          const char *id, result *r) {
  int want = r->calls + 1;
  c->vtable->put_object(c, kind, id, (const uint8_t *)"r\0ec", 4, on_put, r);
  wait_calls(r, want);
}

static void get_objects_on(reshard_catalog *c, reshard_catalog_object_kind kind,
                           const char *const *ids, size_t n, result *r) {
  int want = r->calls + 1;
  c->vtable->get_objects(c, kind, ids, n, on_get, r);
  wait_calls(r, want);
}

static void forget_object_on(reshard_catalog *c,
                             reshard_catalog_object_kind kind, const char *id,
                             result *r) {
  int want = r->calls + 1;
  c->vtable->forget_object(c, kind, id, on_removed, r);
  wait_calls(r, want);
}

/* A synchronous connection of the test's own, to look at the keys. */
static long long redis_integer(const char *command, const char *key) {
  redisContext *ctx = redisConnect("127.0.0.1", redis_port);
  cr_assert(ctx != NULL && !ctx->err);
  redisReply *reply = redisCommand(ctx, "%s %s", command, key);
  cr_assert_not_null(reply);
  cr_assert_eq(reply->type, REDIS_REPLY_INTEGER);
  long long value = reply->integer;
  freeReplyObject(reply);
  redisFree(ctx);
  return value;
}

static void expect_value(const char *key, const char *value, size_t length) {
  redisContext *ctx = redisConnect("127.0.0.1", redis_port);
  cr_assert(ctx != NULL && !ctx->err);
  redisReply *reply = redisCommand(ctx, "GET %s", key);
  cr_assert_not_null(reply);
  cr_assert_eq(reply->type, REDIS_REPLY_STRING, "%s", key);
  cr_assert_eq(reply->len, length);
  cr_assert_eq(memcmp(reply->str, value, length), 0);
  freeReplyObject(reply);
  redisFree(ctx);
}

Test(catalog_redis, objects) {
  result r = {0};
  put_object_on(catalog, PLACEMENT, "sha256:p1", &r);
  cr_assert_eq(r.err.code, RESHARD_OK, "%s", r.err.message);
  cr_assert(r.created);
  put_object_on(catalog, PLACEMENT, "sha256:p1", &r);
  cr_assert_eq(r.err.code, RESHARD_OK, "%s", r.err.message);
  cr_assert(!r.created);
  expect_value("reshard:placement:sha256:p1", "r\0ec", 4);

  const char *ids[] = {"sha256:p1", "sha256:unknown"};
  get_objects_on(catalog, PLACEMENT, ids, 2, &r);
  cr_assert_eq(r.err.code, RESHARD_OK, "%s", r.err.message);
  cr_assert_eq(r.found, 1);
  get_objects_on(catalog, POOL, ids, 2, &r);
  cr_assert_eq(r.found, 0, "kinds are kept apart");
  put_object_on(catalog, POOL, "sha256:p1", &r);
  cr_assert(r.created);
  expect_value("reshard:memory:sha256:p1", "r\0ec", 4);

  /* Another daemon on the same Redis sees them and cannot store twice. */
  reshard_catalog *other = open_spec(spec);
  put_object_on(other, POOL, "sha256:p1", &r);
  cr_assert_eq(r.err.code, RESHARD_OK, "%s", r.err.message);
  cr_assert(!r.created);

  forget_object_on(other, PLACEMENT, "sha256:p1", &r);
  cr_assert_eq(r.err.code, RESHARD_OK, "%s", r.err.message);
  cr_assert(r.removed);
  forget_object_on(catalog, PLACEMENT, "sha256:p1", &r);
  cr_assert_eq(r.err.code, RESHARD_OK, "%s", r.err.message);
  cr_assert(!r.removed);
  cr_assert_eq(redis_integer("EXISTS", "reshard:placement:sha256:p1"), 0);
  get_objects_on(catalog, PLACEMENT, ids, 2, &r);
  cr_assert_eq(r.found, 0);
  get_objects_on(catalog, POOL, ids, 1, &r);
  cr_assert_eq(r.found, 1);
  close_one(other);
}

Test(catalog_redis, objects_are_unavailable_in_an_outage) {
  result r = {0};
  put_object_on(catalog, PLACEMENT, "sha256:p1", &r);
  cr_assert_eq(r.err.code, RESHARD_OK, "%s", r.err.message);
  redis_stop();
  const char *ids[] = {"sha256:p1"};
  for (int i = 0; i < 3; i++) {
    get_objects_on(catalog, PLACEMENT, ids, 1, &r);
    if (r.err.code == RESHARD_UNAVAILABLE) {
      break;
    }
  }
  cr_assert_eq(r.err.code, RESHARD_UNAVAILABLE, "%s", r.err.message);
  cr_assert(strstr(r.err.message, "unreachable") != NULL, "%s", r.err.message);
  put_object_on(catalog, POOL, "sha256:m1", &r);
  cr_assert_eq(r.err.code, RESHARD_UNAVAILABLE, "%s", r.err.message);
  cr_assert(!r.created);
  forget_object_on(catalog, PLACEMENT, "sha256:p1", &r);
  cr_assert_eq(r.err.code, RESHARD_UNAVAILABLE, "%s", r.err.message);
  cr_assert(!r.removed);
}

/* A Redis error reply is the operation's error, naming the object's key. */
Test(catalog_redis, object_errors_name_the_object) {
  redisContext *ctx = redisConnect("127.0.0.1", redis_port);
  cr_assert(ctx != NULL && !ctx->err);
  /* A full server (maxmemory reached, no eviction) refuses SET with OOM:
   * RESOURCE_EXHAUSTED, like every other operation. */
  redisReply *reply = redisCommand(ctx, "CONFIG SET maxmemory 1");
  cr_assert_not_null(reply);
  freeReplyObject(reply);
  reply = redisCommand(ctx, "CONFIG SET maxmemory-policy noeviction");
  freeReplyObject(reply);
  result r = {0};
  put_object_on(catalog, PLACEMENT, "sha256:p1", &r);
  cr_assert_eq(r.err.code, RESHARD_RESOURCE_EXHAUSTED, "%s", r.err.message);
  cr_assert(strstr(r.err.message, "storing placement sha256:p1") != NULL, "%s",
            r.err.message);
  cr_assert(strstr(r.err.message, spec) != NULL, "%s", r.err.message);
  reply = redisCommand(ctx, "CONFIG SET maxmemory 0");
  freeReplyObject(reply);
  redisFree(ctx);
  put_object_on(catalog, PLACEMENT, "sha256:p1", &r);
  cr_assert_eq(r.err.code, RESHARD_OK, "%s", r.err.message);
  cr_assert(r.created);
}

/* ---- The page layout (docs/catalog.md "Page bindings on Redis") ---- */

static void add_in(const char *in_domain, const char *key,
                   const char *const *pages, size_t n, result *r) {
  int want = r->calls + 1;
  catalog->vtable->add_pages(catalog, in_domain, key, pages, n, on_count, r);
  wait_calls(r, want);
}

static void forget_in(const char *in_domain, const char *key,
                      const char *const *pages, size_t n, result *r) {
  int want = r->calls + 1;
  catalog->vtable->forget_pages(catalog, in_domain, key, pages, n, on_count, r);
  wait_calls(r, want);
}

/* The bucket key of `page` in `in_domain`. */
static void bucket_key(char *out, size_t size, const char *in_domain,
                       const char *page) {
  char bucket[32];
  cr_assert(reshard_catalog_redis_page_bucket(page, bucket, sizeof bucket));
  snprintf(out, size, "reshard:{%s}:%s", in_domain, bucket);
}

/* HGET of a binary field; NULL when missing (the caller frees). */
static char *hget(const char *key, const void *field, size_t length) {
  redisContext *ctx = redisConnect("127.0.0.1", redis_port);
  cr_assert(ctx != NULL && !ctx->err);
  redisReply *reply = redisCommand(ctx, "HGET %s %b", key, field, length);
  cr_assert_not_null(reply);
  char *value = reply->type == REDIS_REPLY_STRING ? strdup(reply->str) : NULL;
  cr_assert(value != NULL || reply->type == REDIS_REPLY_NIL);
  freeReplyObject(reply);
  redisFree(ctx);
  return value;
}

static void redis_do(const char *command) {
  redisContext *ctx = redisConnect("127.0.0.1", redis_port);
  cr_assert(ctx != NULL && !ctx->err);
  redisReply *reply = redisCommand(ctx, command);
  cr_assert_not_null(reply);
  cr_assert_neq(reply->type, REDIS_REPLY_ERROR, "%s: %s", command, reply->str);
  freeReplyObject(reply);
  redisFree(ctx);
}

static void expect_field(const char *page, const void *field, size_t length,
                         const char *want) {
  char key[160];
  bucket_key(key, sizeof key, domain, page);
  char *value = hget(key, field, length);
  if (want == NULL) {
    cr_assert_null(value, "%s: %s", page, value);
  } else {
    cr_assert_not_null(value, "%s: not stored in %s", page, key);
    cr_assert_str_eq(value, want, "%s", page);
  }
  free(value);
}

/* Packed and raw page keys side by side, a raw key with the bytes of a
 * packed one, several manifests per page, forgetting one of them and
 * every binding, read through the catalog and from the keys themselves. */
Test(catalog_redis, page_layout) {
  static const char hex64[] =
      "00112233445566778899aabbccddeeff00112233445566778899aabbccddeeff";
  const char *pages[] = {hex64, "4142", "AB", "00", "abc", "ABCD", "0A"};
  result r = {0};
  publish_on(catalog, "m1", domain, &r);
  publish_on(catalog, "m2", domain, &r);
  add_on(catalog, "m1", pages, 7, &r);
  cr_assert_eq(r.err.code, RESHARD_OK, "%s", r.err.message);
  cr_assert_eq(r.count, 7);
  add_on(catalog, "m2", pages, 2, &r);
  cr_assert_eq(r.count, 2);
  add_on(catalog, "m2", pages, 2, &r);
  cr_assert_eq(r.count, 0); /* idempotent */

  /* m1 is the domain's manifest id 1, m2 id 2. */
  uint8_t packed[32];
  for (int i = 0; i < 32; i++) {
    packed[i] = (uint8_t)((i % 16) * 0x11);
  }
  expect_field(hex64, packed, 32, "1,2");
  expect_field("4142", "AB", 2, "1,2");
  expect_field("AB", "AB", 2, "1");
  expect_field("00", "\0", 1, "1");
  expect_field("abc", "abc", 3, "1");
  expect_field("ABCD", "ABCD", 4, "1");
  expect_field("0A", "0A", 2, "1");
  char key[160], raw[160];
  bucket_key(key, sizeof key, domain, "4142");
  bucket_key(raw, sizeof raw, domain, "AB");
  cr_assert(strstr(key, ":pages:") != NULL, "%s", key);
  cr_assert(strstr(raw, ":pages-raw:") != NULL, "%s", raw);
  cr_assert_eq(redis_integer("HLEN", "reshard:{d0}:manifest-ids"), 2);

  lookup_on(catalog, domain, pages, 3, &r);
  cr_assert_eq(r.err.code, RESHARD_OK, "%s", r.err.message);
  cr_assert_eq(r.page_start[1], 2);
  cr_assert_eq(r.page_start[2], 4);
  cr_assert_eq(r.page_start[3], 5);
  cr_assert_str_eq(r.keys[2], "m1");
  cr_assert_str_eq(r.keys[3], "m2");
  cr_assert_str_eq(r.keys[4], "m1"); /* "AB" is not "4142" */

  /* Forgetting m1 of "4142" leaves m2 there and "AB" bound to m1. */
  forget_on(catalog, "m1", pages + 1, 1, &r);
  cr_assert_eq(r.count, 1);
  expect_field("4142", "AB", 2, "2");
  forget_on(catalog, "m1", pages + 1, 1, &r);
  cr_assert_eq(r.count, 0);
  lookup_on(catalog, domain, pages + 1, 2, &r);
  cr_assert_eq(r.page_start[1], 1);
  cr_assert_eq(r.page_start[2], 2);
  cr_assert_str_eq(r.keys[0], "m2");
  cr_assert_str_eq(r.keys[1], "m1");

  /* Every binding: 2 + 1 + 5, and nothing stays behind. */
  forget_on(catalog, NULL, pages, 7, &r);
  cr_assert_eq(r.err.code, RESHARD_OK, "%s", r.err.message);
  cr_assert_eq(r.count, 8);
  for (size_t i = 0; i < 7; i++) {
    bucket_key(key, sizeof key, domain, pages[i]);
    cr_assert_eq(redis_integer("EXISTS", key), 0, "%s", key);
  }
  lookup_on(catalog, domain, pages, 7, &r);
  cr_assert(r.domain_known);
  cr_assert_eq(r.page_start[7], 0);
  /* Bound again, m2 keeps its id. */
  add_on(catalog, "m2", pages, 1, &r);
  cr_assert_eq(r.count, 1);
  expect_field(hex64, packed, 32, "2");
}

/* One page bound to eight manifests, forgotten one by one. */
Test(catalog_redis, eight_manifests_on_one_page) {
  const char *pages[] = {"0123"};
  char names[8][8];
  result r = {0};
  for (int i = 0; i < 8; i++) {
    snprintf(names[i], sizeof names[i], "m%d", 7 - i);
    publish_on(catalog, names[i], domain, &r);
    add_on(catalog, names[i], pages, 1, &r);
    cr_assert_eq(r.err.code, RESHARD_OK, "%s", r.err.message);
    cr_assert_eq(r.count, 1);
  }
  expect_field("0123", "\x01\x23", 2, "1,2,3,4,5,6,7,8");
  lookup_on(catalog, domain, pages, 1, &r);
  cr_assert_eq(r.page_start[1], 8);
  cr_assert_str_eq(r.keys[0], "m0");
  cr_assert_str_eq(r.keys[7], "m7");
  for (int i = 0; i < 8; i++) {
    forget_on(catalog, names[i], pages, 1, &r);
    cr_assert_eq(r.count, 1);
    lookup_on(catalog, domain, pages, 1, &r);
    cr_assert_eq(r.page_start[1], (size_t)(7 - i));
    if (i < 7) {
      cr_assert_str_eq(r.keys[0], "m0");
    }
  }
  expect_field("0123", "\x01\x23", 2, NULL);
}

/* A domain written by a reshardd keeping a key per page, and one marked
 * with an unknown layout, are refused by every page operation with a
 * message saying what to do; nothing of them is changed. */
Test(catalog_redis, other_layouts_are_refused) {
  result r = {0};
  /* What the previous layout leaves: the record, the sets, a page key. */
  redis_do("SET reshard:manifest:m9 rec");
  redis_do("SADD reshard:domains old");
  redis_do("SADD reshard:{old}:manifests m9");
  redis_do("SADD reshard:{old}:page:p0 m9");
  const char *pages[] = {"p0", "0a0b"};
  add_in("old", "m9", pages, 2, &r);
  cr_assert_eq(r.err.code, RESHARD_FAILED_PRECONDITION, "%s", r.err.message);
  cr_assert(strstr(r.err.message, "model domain old") != NULL, "%s",
            r.err.message);
  cr_assert(strstr(r.err.message, "older reshardd") != NULL, "%s",
            r.err.message);
  cr_assert(strstr(r.err.message, spec) != NULL, "%s", r.err.message);
  lookup_on(catalog, "old", pages, 2, &r);
  cr_assert_eq(r.err.code, RESHARD_FAILED_PRECONDITION, "%s", r.err.message);
  forget_in("old", "m9", pages, 2, &r);
  cr_assert_eq(r.err.code, RESHARD_FAILED_PRECONDITION, "%s", r.err.message);
  forget_in("old", NULL, pages, 2, &r);
  cr_assert_eq(r.err.code, RESHARD_FAILED_PRECONDITION, "%s", r.err.message);
  /* A new manifest published there does not mark the domain. */
  publish_on(catalog, "m8", "old", &r);
  cr_assert_eq(r.err.code, RESHARD_OK, "%s", r.err.message);
  add_in("old", "m8", pages, 2, &r);
  cr_assert_eq(r.err.code, RESHARD_FAILED_PRECONDITION, "%s", r.err.message);
  cr_assert_eq(redis_integer("EXISTS", "reshard:{old}:layout"), 0);
  cr_assert_eq(redis_integer("SCARD", "reshard:{old}:page:p0"), 1);
  cr_assert_eq(redis_integer("EXISTS", "reshard:{old}:manifest-ids"), 0);

  /* A layout this reshardd does not know. */
  publish_on(catalog, "m1", domain, &r);
  redis_do("SET reshard:{d0}:layout future");
  add_on(catalog, "m1", pages, 2, &r);
  cr_assert_eq(r.err.code, RESHARD_FAILED_PRECONDITION, "%s", r.err.message);
  cr_assert(strstr(r.err.message, "\"future\"") != NULL, "%s", r.err.message);
  lookup_on(catalog, domain, pages, 2, &r);
  cr_assert_eq(r.err.code, RESHARD_FAILED_PRECONDITION, "%s", r.err.message);
}
