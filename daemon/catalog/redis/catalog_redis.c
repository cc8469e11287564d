/* The Redis catalog: see catalog_redis.h for the contract and
 * docs/catalog.md for the keys.
 *
 * Keys ({D} is a model domain, braces included: a Redis Cluster hash tag,
 * so one domain's keys share a slot):
 *   reshard:manifest:<manifest key>   STRING, the record, written SET NX
 *   reshard:domains                   SET of domains with a manifest
 *   reshard:{D}:manifests             SET of the domain's manifest keys
 *   reshard:{D}:page:<page key>       SET of the manifest keys bound
 * Writes are MULTI/EXEC transactions, so no daemon ever sees half of one.
 *
 * Connection states: RESOLVING (host name on the thread pool), CONNECTING
 * (TCP, then SELECT), READY. Operations wait in `waiting` only until the
 * first attempt after a READY period ends; while the catalog is down they
 * fail at once. Operations sent wait in `inflight`, oldest first, so the
 * watchdog sees the oldest unanswered request. hiredis calls every
 * outstanding reply callback with a NULL reply when a connection ends, so
 * each operation completes exactly once: on its reply or on that NULL. */
#include "catalog/catalog_redis.h"

#include <arpa/inet.h>
#include <errno.h>
#include <hiredis/adapters/libuv.h>
#include <hiredis/async.h>
#include <hiredis/hiredis.h>
#include <inttypes.h>
#include <netdb.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>

#include "cache/table.h"
#include "catalog/redis_reply.h"
#include "catalog/redis_url.h"
#include "observe/log.h"

#define VERIFIED_MAX 4096
#define WATCHDOG_MS 50
/* Arrays a reply may hold whatever was asked: the manifests bound to one
 * page (SMEMBERS), which only a fleet publishing tens of thousands of
 * layouts of one page could pass. */
#define MIN_REPLY_ELEMENTS 65536

typedef enum conn_state {
  CONN_DOWN,
  CONN_RESOLVING,
  CONN_CONNECTING,
  CONN_READY,
} conn_state;

typedef enum op_kind {
  OP_PUT,
  OP_GET,
  OP_CHECK, /* first half of add_pages: is the manifest published? */
  OP_ADD,
  OP_FORGET,
  OP_LOOKUP,
} op_kind;

typedef struct redis_catalog redis_catalog;

/* One operation, allocated in one block with copies of its inputs. */
typedef struct redis_op {
  struct redis_op *prev, *next; /* in `waiting` or `inflight` */
  redis_catalog *r;
  op_kind kind;
  bool listed;
  uint64_t sent_ms;
  const char *manifest_key; /* NULL: forget every binding */
  const char *domain;
  const uint8_t *record;
  size_t length;
  const char **keys; /* page keys, or manifest keys for OP_GET */
  size_t key_count;
  reshard_catalog_put_cb put_cb;
  reshard_catalog_get_cb get_cb;
  reshard_catalog_count_cb count_cb;
  reshard_catalog_lookup_cb lookup_cb;
  void *data;
} redis_op;

typedef struct op_list {
  redis_op *head, *tail;
} op_list;

/* A manifest this connection saw published in a domain. */
typedef struct verified_entry {
  reshard_table_node node;
  char key[]; /* domain '\n' manifest key */
} verified_entry;

static void free_verified(reshard_table_node *node, void *data) {
  (void)data;
  free(node);
}

struct redis_catalog {
  reshard_catalog base;
  char spec[300]; /* the address without credentials: what messages show */
  char host[256];
  int port;
  int db;
  reshard_redis_url credentials; /* sent with AUTH on every connection */
  /* The largest array reply the connection accepts: what the largest
   * command sent so far can answer, and never less than
   * MIN_REPLY_ELEMENTS (redis_reply.h says why replies need a bound). */
  reshard_redis_reply_bound reply_bound;

  conn_state state;
  redisAsyncContext *ac;
  bool failed_since_ready; /* fail at once instead of waiting */
  uint64_t attempt_ms;     /* when the current attempt started */
  uint64_t down_ms;        /* when the outage started */
  uint64_t backoff_ms;
  char last_error[160];
  bool ever_ready;

  op_list waiting, inflight;

  uv_getaddrinfo_t resolve;
  bool resolving;
  uv_timer_t retry;
  uv_timer_t watchdog;
  int open_timers;

  reshard_table verified;

  bool closing, close_started;
  reshard_catalog_close_cb close_cb;
  void *close_data;
};

/* ---- Lists ---- */

static void list_push(op_list *list, redis_op *op) {
  op->prev = list->tail;
  op->next = NULL;
  if (list->tail != NULL) {
    list->tail->next = op;
  } else {
    list->head = op;
  }
  list->tail = op;
  op->listed = true;
}

static void list_remove(op_list *list, redis_op *op) {
  if (op->prev != NULL) {
    op->prev->next = op->next;
  } else {
    list->head = op->next;
  }
  if (op->next != NULL) {
    op->next->prev = op->prev;
  } else {
    list->tail = op->prev;
  }
  op->prev = op->next = NULL;
  op->listed = false;
}

/* ---- Loop references ---- */

/* The socket's poll handle keeps the loop alive only while a reply is
 * awaited, so an idle catalog never holds the loop open. */
static void update_ref(redis_catalog *r) {
  if (r->ac == NULL || r->ac->ev.data == NULL) {
    return;
  }
  uv_handle_t *poll =
      (uv_handle_t *)&((redisLibuvEvents *)r->ac->ev.data)->handle;
  if (r->inflight.head != NULL || r->waiting.head != NULL) {
    uv_ref(poll);
  } else {
    uv_unref(poll);
  }
}

/* ---- Completion ---- */

static void maybe_finish_close(redis_catalog *r);

static void op_complete(redis_op *op, const reshard_error *err) {
  redis_catalog *r = op->r;
  switch (op->kind) {
  case OP_PUT:
    op->put_cb(op->data, err, false);
    break;
  case OP_GET:
    op->get_cb(op->data, err, NULL, 0);
    break;
  case OP_CHECK:
  case OP_ADD:
  case OP_FORGET:
    op->count_cb(op->data, err, 0);
    break;
  case OP_LOOKUP:
    op->lookup_cb(op->data, err, NULL);
    break;
  }
  free(op);
  update_ref(r);
  maybe_finish_close(r);
}

static void op_fail_unavailable(redis_op *op) {
  redis_catalog *r = op->r;
  reshard_error err;
  if (r->closing) {
    reshard_error_set(&err, RESHARD_UNAVAILABLE, "catalog %s: closing",
                      r->spec);
  } else {
    reshard_error_set(&err, RESHARD_UNAVAILABLE,
                      "catalog %s: unreachable (%s); retrying", r->spec,
                      r->last_error[0] ? r->last_error : "not connected");
  }
  op_complete(op, &err);
}

/* Maps a Redis error reply to a status. */
static void reply_error(redis_catalog *r, reshard_error *err, const char *what,
                        const char *message) {
  static const char *const busy[] = {"LOADING",   "READONLY", "MASTERDOWN",
                                     "BUSY",      "TRYAGAIN", "CLUSTERDOWN",
                                     "NOREPLICAS"};
  reshard_status code = RESHARD_INTERNAL;
  if (strncmp(message, "OOM", 3) == 0) {
    code = RESHARD_RESOURCE_EXHAUSTED;
  }
  for (size_t i = 0; i < sizeof busy / sizeof busy[0]; i++) {
    if (strncmp(message, busy[i], strlen(busy[i])) == 0) {
      code = RESHARD_UNAVAILABLE;
    }
  }
  reshard_error_set(err, code, "catalog %s: %s: %s", r->spec, what, message);
}

/* Checks an EXEC reply: an array of `expected` elements, none an error. */
static bool exec_ok(redis_catalog *r, const redisReply *reply, size_t expected,
                    const char *what, reshard_error *err) {
  if (reply->type == REDIS_REPLY_ERROR) {
    reply_error(r, err, what, reply->str);
    return false;
  }
  if (reply->type != REDIS_REPLY_ARRAY || reply->elements != expected) {
    reshard_error_set(err, RESHARD_INTERNAL,
                      "catalog %s: %s: unexpected reply (type %d)", r->spec,
                      what, reply->type);
    return false;
  }
  for (size_t i = 0; i < expected; i++) {
    if (reply->element[i]->type == REDIS_REPLY_ERROR) {
      reply_error(r, err, what, reply->element[i]->str);
      return false;
    }
  }
  return true;
}

/* ---- Connection ---- */

static uint64_t now_ms(redis_catalog *r) {
  return uv_now(r->base.loop);
}

static void set_error(redis_catalog *r, const char *message) {
  snprintf(r->last_error, sizeof r->last_error, "%s",
           message && message[0] ? message : "connection closed");
}

static void connect_start(redis_catalog *r);

static void on_retry(uv_timer_t *timer) {
  redis_catalog *r = timer->data;
  if (!r->closing && r->state == CONN_DOWN) {
    connect_start(r);
  }
}

/* The connection is gone (r->ac already detached): fail what waits, log
 * the outage once, and retry after the backoff. */
static void go_down(redis_catalog *r) {
  r->state = CONN_DOWN;
  if (!r->failed_since_ready) {
    r->failed_since_ready = true;
    r->down_ms = now_ms(r);
    reshard_log_line line;
    if (!r->closing &&
        reshard_log_begin(&line, RESHARD_LOG_WARN,
                          r->ever_ready ? "catalog unreachable"
                                        : "catalog not reached")) {
      reshard_log_str(&line, "catalog", r->spec);
      reshard_log_str(&line, "error", r->last_error);
      reshard_log_u64(&line, "retry_ms", r->backoff_ms);
      reshard_log_end(&line);
    }
  } else {
    reshard_log_line line;
    if (!r->closing && reshard_log_begin(&line, RESHARD_LOG_DEBUG,
                                         "catalog reconnect failed")) {
      reshard_log_str(&line, "catalog", r->spec);
      reshard_log_str(&line, "error", r->last_error);
      reshard_log_u64(&line, "retry_ms", r->backoff_ms);
      reshard_log_end(&line);
    }
  }
  while (r->waiting.head != NULL) {
    redis_op *op = r->waiting.head;
    list_remove(&r->waiting, op);
    op_fail_unavailable(op);
  }
  if (!r->closing) {
    uv_timer_start(&r->retry, on_retry, r->backoff_ms, 0);
    r->backoff_ms *= 2;
    if (r->backoff_ms > RESHARD_CATALOG_REDIS_BACKOFF_MAX_MS) {
      r->backoff_ms = RESHARD_CATALOG_REDIS_BACKOFF_MAX_MS;
    }
  }
}

/* Drops the current connection on our initiative. Its outstanding reply
 * callbacks then run with NULL replies (now, or when the hiredis callback
 * we are in returns) and fail their operations. */
static void drop_connection(redis_catalog *r) {
  redisAsyncContext *ac = r->ac;
  r->ac = NULL;
  if (ac != NULL) {
    ac->data = NULL;
    redisAsyncFree(ac);
  }
  go_down(r);
}

/* hiredis ended the connection `ac` (a NULL reply or the disconnect
 * callback); it frees the context itself. */
static void connection_lost(redis_catalog *r, const redisAsyncContext *ac) {
  if (r->ac != ac) {
    return;
  }
  r->ac = NULL;
  set_error(r, ac->errstr);
  go_down(r);
}

static void send_op(redis_op *op);

static void became_ready(redis_catalog *r) {
  r->state = CONN_READY;
  r->backoff_ms = RESHARD_CATALOG_REDIS_BACKOFF_MIN_MS;
  /* A restarted Redis may have lost what this connection saw. */
  reshard_table_clear(&r->verified, free_verified, NULL);
  reshard_log_line line;
  if (reshard_log_begin(&line, RESHARD_LOG_INFO,
                        r->failed_since_ready && r->ever_ready
                            ? "catalog reconnected"
                            : "catalog connected")) {
    reshard_log_str(&line, "catalog", r->spec);
    if (r->failed_since_ready) {
      reshard_log_u64(&line, "down_ms", now_ms(r) - r->down_ms);
    }
    reshard_log_end(&line);
  }
  r->failed_since_ready = false;
  r->ever_ready = true;
  r->last_error[0] = '\0';
  while (r->waiting.head != NULL && r->state == CONN_READY) {
    redis_op *op = r->waiting.head;
    list_remove(&r->waiting, op);
    send_op(op);
  }
  update_ref(r);
}

static void on_auth(redisAsyncContext *ac, void *reply_ptr, void *privdata) {
  redis_catalog *r = privdata;
  redisReply *reply = reply_ptr;
  if (r->ac != ac || reply == NULL) {
    return; /* on_select sees the lost connection */
  }
  if (reply->type == REDIS_REPLY_ERROR) {
    /* Redis' AUTH errors name no secret ("WRONGPASS invalid
     * username-password pair..."). */
    char message[160];
    snprintf(message, sizeof message, "AUTH: %s", reply->str);
    set_error(r, message);
    drop_connection(r);
  }
}

static void on_select(redisAsyncContext *ac, void *reply_ptr, void *privdata) {
  redis_catalog *r = privdata;
  redisReply *reply = reply_ptr;
  if (r->ac != ac) {
    return;
  }
  if (reply == NULL) {
    connection_lost(r, ac);
    return;
  }
  if (reply->type == REDIS_REPLY_ERROR) {
    char message[160];
    snprintf(message, sizeof message, "SELECT %d: %s", r->db, reply->str);
    set_error(r, message);
    drop_connection(r);
    return;
  }
  became_ready(r);
}

static void on_connect(const redisAsyncContext *ac, int status) {
  redis_catalog *r = ac->data;
  if (r == NULL || r->ac != ac || status == REDIS_OK) {
    return; /* READY once SELECT answers */
  }
  connection_lost(r, ac);
}

static void on_disconnect(const redisAsyncContext *ac, int status) {
  (void)status;
  redis_catalog *r = ac->data;
  if (r != NULL) {
    connection_lost(r, ac);
  }
}

static void connect_to(redis_catalog *r, const char *ip) {
  redisAsyncContext *ac = redisAsyncConnect(ip, r->port);
  if (ac == NULL) {
    set_error(r, "out of memory");
    go_down(r);
    return;
  }
  if (ac->err) {
    set_error(r, ac->errstr);
    redisAsyncFree(ac);
    go_down(r);
    return;
  }
  if (!reshard_redis_reader_bound(ac->c.reader, &r->reply_bound)) {
    set_error(r, "cannot bound the reply reader (out of memory)");
    redisAsyncFree(ac);
    go_down(r);
    return;
  }
  if (redisLibuvAttach(ac, r->base.loop) != REDIS_OK) {
    set_error(r, "cannot watch the socket");
    redisAsyncFree(ac);
    go_down(r);
    return;
  }
  ac->data = r;
  redisAsyncSetConnectCallback(ac, on_connect);
  redisAsyncSetDisconnectCallback(ac, on_disconnect);
  r->ac = ac;
  r->state = CONN_CONNECTING;
  r->attempt_ms = now_ms(r);
  /* AUTH, then SELECT, is the handshake: it also makes hiredis finish the
   * connect. Pipelined: SELECT's reply says when the connection is ready. */
  if (r->credentials.password[0] != '\0') {
    const char *auth[3] = {"AUTH"};
    size_t auth_lengths[3] = {4};
    int n = 1;
    if (r->credentials.user[0] != '\0') {
      auth[n] = r->credentials.user;
      auth_lengths[n++] = strlen(r->credentials.user);
    }
    auth[n] = r->credentials.password;
    auth_lengths[n++] = strlen(r->credentials.password);
    if (redisAsyncCommandArgv(ac, on_auth, r, n, auth, auth_lengths) !=
        REDIS_OK) {
      set_error(r, "cannot send AUTH");
      drop_connection(r);
      return;
    }
  }
  char db[16];
  int n = snprintf(db, sizeof db, "%d", r->db);
  const char *argv[] = {"SELECT", db};
  size_t lengths[] = {6, (size_t)n};
  if (redisAsyncCommandArgv(ac, on_select, r, 2, argv, lengths) != REDIS_OK) {
    set_error(r, "cannot send SELECT");
    drop_connection(r);
    return;
  }
  update_ref(r);
}

static void on_resolved(uv_getaddrinfo_t *req, int status,
                        struct addrinfo *res) {
  redis_catalog *r = req->data;
  r->resolving = false;
  if (r->closing) {
    uv_freeaddrinfo(res);
    maybe_finish_close(r);
    return;
  }
  char ip[INET6_ADDRSTRLEN] = "";
  if (status == 0 && res != NULL) {
    const void *addr =
        res->ai_family == AF_INET6
            ? (const void *)&((struct sockaddr_in6 *)res->ai_addr)->sin6_addr
            : (const void *)&((struct sockaddr_in *)res->ai_addr)->sin_addr;
    inet_ntop(res->ai_family, addr, ip, sizeof ip);
  }
  uv_freeaddrinfo(res);
  if (ip[0] == '\0') {
    char message[160];
    snprintf(message, sizeof message, "cannot resolve %.80s: %s", r->host,
             status ? uv_strerror(status) : "no address");
    set_error(r, message);
    go_down(r);
    return;
  }
  connect_to(r, ip);
}

static void connect_start(redis_catalog *r) {
  unsigned char buffer[sizeof(struct in6_addr)];
  if (inet_pton(AF_INET, r->host, buffer) == 1 ||
      inet_pton(AF_INET6, r->host, buffer) == 1) {
    connect_to(r, r->host);
    return;
  }
  struct addrinfo hints;
  memset(&hints, 0, sizeof hints);
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  r->resolve.data = r;
  r->state = CONN_RESOLVING;
  r->attempt_ms = now_ms(r);
  int rc = uv_getaddrinfo(r->base.loop, &r->resolve, on_resolved, r->host, NULL,
                          &hints);
  if (rc != 0) {
    char message[160];
    snprintf(message, sizeof message, "cannot resolve %.80s: %s", r->host,
             uv_strerror(rc));
    set_error(r, message);
    go_down(r);
    return;
  }
  r->resolving = true;
}

/* Drops a connection that went silent: a connect that does not finish or a
 * request without a reply within the timeout. */
static void on_watchdog(uv_timer_t *timer) {
  redis_catalog *r = timer->data;
  uint64_t now = now_ms(r);
  /* hiredis always watches the socket of a live connection (for writing
   * while connecting, for reading after). The 0.14 libuv adapter drops
   * libuv's error event (a refused connect, a reset), which leaves the
   * poll handle stopped: that is how a socket error shows. */
  if (r->ac != NULL && r->ac->ev.data != NULL &&
      (r->state == CONN_CONNECTING || r->state == CONN_READY) &&
      !uv_is_active(
          (uv_handle_t *)&((redisLibuvEvents *)r->ac->ev.data)->handle)) {
    int error = 0;
    socklen_t length = sizeof error;
    if (getsockopt(r->ac->c.fd, SOL_SOCKET, SO_ERROR, &error, &length) != 0) {
      error = errno;
    }
    set_error(r, error ? strerror(error) : "socket error");
    drop_connection(r);
    return;
  }
  if (r->state == CONN_CONNECTING &&
      now - r->attempt_ms > RESHARD_CATALOG_REDIS_TIMEOUT_MS) {
    set_error(r, "connect timed out");
    drop_connection(r);
  } else if (r->state == CONN_READY && r->inflight.head != NULL &&
             now - r->inflight.head->sent_ms >
                 RESHARD_CATALOG_REDIS_TIMEOUT_MS) {
    set_error(r, "no reply within the request timeout");
    drop_connection(r);
  }
}

/* ---- Commands ---- */

/* Arguments of one command, built into one growing text buffer. */
typedef struct args {
  size_t count, capacity;
  size_t *offsets;
  size_t *lengths;
  const char **argv;
  char *text;
  size_t used, size;
  bool failed;
} args;

static void args_reset(args *a) {
  a->count = 0;
  a->used = 0;
}

static void args_free(args *a) {
  free(a->offsets);
  free(a->lengths);
  free(a->argv);
  free(a->text);
}

/* Appends one argument, the concatenation of up to three parts. */
static void args_add(args *a, const void *p1, size_t n1, const void *p2,
                     size_t n2, const void *p3, size_t n3) {
  if (a->failed) {
    return;
  }
  if (a->count == a->capacity) {
    size_t next = a->capacity ? a->capacity * 2 : 16;
    size_t *offsets = realloc(a->offsets, next * sizeof *offsets);
    if (offsets != NULL) {
      a->offsets = offsets;
    }
    size_t *lengths = realloc(a->lengths, next * sizeof *lengths);
    if (lengths != NULL) {
      a->lengths = lengths;
    }
    const char **argv = realloc(a->argv, next * sizeof *argv);
    if (argv != NULL) {
      a->argv = argv;
    }
    if (offsets == NULL || lengths == NULL || argv == NULL) {
      a->failed = true;
      return;
    }
    a->capacity = next;
  }
  size_t n = n1 + n2 + n3;
  if (a->used + n > a->size) {
    size_t next = a->size ? a->size * 2 : 256;
    while (next < a->used + n) {
      next *= 2;
    }
    char *text = realloc(a->text, next);
    if (text == NULL) {
      a->failed = true;
      return;
    }
    a->text = text;
    a->size = next;
  }
  char *at = a->text + a->used;
  if (n1) {
    memcpy(at, p1, n1);
  }
  if (n2) {
    memcpy(at + n1, p2, n2);
  }
  if (n3) {
    memcpy(at + n1 + n2, p3, n3);
  }
  a->offsets[a->count] = a->used;
  a->lengths[a->count] = n;
  a->count++;
  a->used += n;
}

static void args_word(args *a, const char *word) {
  args_add(a, word, strlen(word), NULL, 0, NULL, 0);
}

#define LIT(s) s, sizeof(s) - 1

/* reshard:{D}:<suffix><tail> */
static void args_domain_key(args *a, const char *domain, const char *suffix,
                            const char *tail) {
  char head[128];
  int n = snprintf(head, sizeof head, "reshard:{%s}:", domain);
  if (n < 0 || (size_t)n >= sizeof head) {
    a->failed = true;
    return;
  }
  args_add(a, head, (size_t)n, suffix, strlen(suffix), tail,
           tail ? strlen(tail) : 0);
}

static void args_manifest_key(args *a, const char *manifest_key) {
  args_add(a, LIT("reshard:manifest:"), manifest_key, strlen(manifest_key),
           NULL, 0);
}

/* Sends the command in `a`; false when it could not be queued. */
static bool send_args(redis_catalog *r, args *a, redisCallbackFn *fn,
                      void *privdata) {
  if (a->failed || r->ac == NULL) {
    return false;
  }
  for (size_t i = 0; i < a->count; i++) {
    a->argv[i] = a->text + a->offsets[i];
  }
  bool ok = redisAsyncCommandArgv(r->ac, fn, privdata, (int)a->count, a->argv,
                                  a->lengths) == REDIS_OK;
  args_reset(a);
  return ok;
}

static void on_reply(redisAsyncContext *ac, void *reply, void *privdata);

/* Queues the operation's commands on the connection. */
static bool send_commands(redis_op *op) {
  redis_catalog *r = op->r;
  args a = {0};
  bool ok = true;
  bool multi = op->kind != OP_GET;
  /* The largest array this operation's reply holds: MGET's values, or
   * EXEC's results (at most two commands a key, plus two). */
  size_t reply_elements =
      op->key_count <= (SIZE_MAX - 4) / 2 ? 2 * op->key_count + 4 : SIZE_MAX;
  if (reply_elements > r->reply_bound.max_elements) {
    r->reply_bound.max_elements = reply_elements;
  }
  if (multi) {
    args_word(&a, "MULTI");
    ok = send_args(r, &a, NULL, NULL);
    if (!ok) {
      args_free(&a);
      return false;
    }
  }
  switch (op->kind) {
  case OP_PUT:
    args_word(&a, "SET");
    args_manifest_key(&a, op->manifest_key);
    args_add(&a, op->record, op->length, NULL, 0, NULL, 0);
    args_word(&a, "NX");
    ok = ok && send_args(r, &a, NULL, NULL);
    args_word(&a, "SADD");
    args_word(&a, "reshard:domains");
    args_word(&a, op->domain);
    ok = ok && send_args(r, &a, NULL, NULL);
    args_word(&a, "SADD");
    args_domain_key(&a, op->domain, "manifests", NULL);
    args_word(&a, op->manifest_key);
    ok = ok && send_args(r, &a, NULL, NULL);
    break;
  case OP_GET:
    args_word(&a, "MGET");
    for (size_t i = 0; i < op->key_count; i++) {
      args_manifest_key(&a, op->keys[i]);
    }
    ok = send_args(r, &a, on_reply, op);
    break;
  case OP_CHECK:
    args_word(&a, "SISMEMBER");
    args_domain_key(&a, op->domain, "manifests", NULL);
    args_word(&a, op->manifest_key);
    ok = ok && send_args(r, &a, NULL, NULL);
    args_word(&a, "EXISTS");
    args_manifest_key(&a, op->manifest_key);
    ok = ok && send_args(r, &a, NULL, NULL);
    break;
  case OP_ADD:
  case OP_FORGET:
    for (size_t i = 0; i < op->key_count && ok; i++) {
      if (op->kind == OP_ADD || op->manifest_key != NULL) {
        args_word(&a, op->kind == OP_ADD ? "SADD" : "SREM");
        args_domain_key(&a, op->domain, "page:", op->keys[i]);
        args_word(&a, op->manifest_key);
        ok = send_args(r, &a, NULL, NULL);
      } else {
        args_word(&a, "SCARD");
        args_domain_key(&a, op->domain, "page:", op->keys[i]);
        ok = send_args(r, &a, NULL, NULL);
        args_word(&a, "DEL");
        args_domain_key(&a, op->domain, "page:", op->keys[i]);
        ok = ok && send_args(r, &a, NULL, NULL);
      }
    }
    break;
  case OP_LOOKUP:
    args_word(&a, "SISMEMBER");
    args_word(&a, "reshard:domains");
    args_word(&a, op->domain);
    ok = ok && send_args(r, &a, NULL, NULL);
    for (size_t i = 0; i < op->key_count && ok; i++) {
      args_word(&a, "SMEMBERS");
      args_domain_key(&a, op->domain, "page:", op->keys[i]);
      ok = send_args(r, &a, NULL, NULL);
    }
    break;
  }
  if (multi) {
    if (ok) {
      args_word(&a, "EXEC");
      ok = send_args(r, &a, on_reply, op);
    }
    if (!ok) {
      /* The connection is inside an unfinished MULTI: drop it. */
      set_error(r, "cannot queue a command (out of memory)");
      args_free(&a);
      drop_connection(r);
      return false;
    }
  }
  args_free(&a);
  return ok;
}

static void send_op(redis_op *op) {
  redis_catalog *r = op->r;
  if (r->state != CONN_READY || !send_commands(op)) {
    op_fail_unavailable(op);
    return;
  }
  op->sent_ms = now_ms(r);
  list_push(&r->inflight, op);
  update_ref(r);
}

/* Starts an operation: now when connected, after the first connection
 * attempt when one is under way, or not at all while Redis is down. */
static void start_op(redis_op *op) {
  redis_catalog *r = op->r;
  if (r->state == CONN_READY) {
    send_op(op);
  } else if (!r->failed_since_ready && !r->closing &&
             (r->state == CONN_CONNECTING || r->state == CONN_RESOLVING)) {
    list_push(&r->waiting, op);
    update_ref(r);
  } else {
    op_fail_unavailable(op);
  }
}

/* ---- Replies ---- */

static int compare_keys(const void *a, const void *b) {
  return strcmp(*(const char *const *)a, *(const char *const *)b);
}

static bool verified_matches(const reshard_table_node *node, const void *key) {
  return strcmp(((const verified_entry *)node)->key, key) == 0;
}

/* "domain\nmanifest key" into a new buffer. */
static char *verified_key(const char *domain, const char *manifest_key,
                          size_t *length) {
  size_t d = strlen(domain), m = strlen(manifest_key);
  char *key = malloc(d + m + 2);
  if (key != NULL) {
    memcpy(key, domain, d);
    key[d] = '\n';
    memcpy(key + d + 1, manifest_key, m + 1);
    *length = d + m + 1;
  }
  return key;
}

static verified_entry *find_verified(redis_catalog *r, const char *key,
                                     uint64_t hash) {
  return (verified_entry *)reshard_table_find(&r->verified, hash,
                                              verified_matches, key);
}

static bool is_verified(redis_catalog *r, const char *domain,
                        const char *manifest_key) {
  size_t length;
  char *key = verified_key(domain, manifest_key, &length);
  if (key == NULL) {
    return false;
  }
  bool found = find_verified(r, key, reshard_hash(key, length, 7)) != NULL;
  free(key);
  return found;
}

static void remember_verified(redis_catalog *r, const char *domain,
                              const char *manifest_key) {
  if (r->verified.count >= VERIFIED_MAX) {
    return;
  }
  size_t length;
  char *key = verified_key(domain, manifest_key, &length);
  if (key == NULL) {
    return;
  }
  uint64_t hash = reshard_hash(key, length, 7);
  verified_entry *entry = NULL;
  if (find_verified(r, key, hash) == NULL &&
      (entry = malloc(sizeof *entry + length + 1)) != NULL) {
    memcpy(entry->key, key, length + 1);
    entry->node.hash = hash;
    reshard_table_insert(&r->verified, &entry->node);
  }
  free(key);
}

static void reply_put(redis_op *op, const redisReply *reply) {
  reshard_error err;
  reshard_error_clear(&err);
  if (!exec_ok(op->r, reply, 3, "storing the manifest", &err)) {
    op_complete(op, &err);
    return;
  }
  bool created = reply->element[0]->type == REDIS_REPLY_STATUS;
  redis_catalog *r = op->r;
  op->put_cb(op->data, &err, created);
  free(op);
  update_ref(r);
  maybe_finish_close(r);
}

static void reply_get(redis_op *op, const redisReply *reply) {
  reshard_error err;
  reshard_error_clear(&err);
  redis_catalog *r = op->r;
  if (reply->type == REDIS_REPLY_ERROR) {
    reply_error(r, &err, "reading manifests", reply->str);
    op_complete(op, &err);
    return;
  }
  if (reply->type != REDIS_REPLY_ARRAY || reply->elements != op->key_count) {
    reshard_error_set(&err, RESHARD_INTERNAL,
                      "catalog %s: reading manifests: unexpected reply",
                      r->spec);
    op_complete(op, &err);
    return;
  }
  reshard_catalog_record *records =
      calloc(op->key_count ? op->key_count : 1, sizeof *records);
  if (records == NULL) {
    reshard_error_set(&err, RESHARD_INTERNAL, "catalog: out of memory");
    op_complete(op, &err);
    return;
  }
  for (size_t i = 0; i < op->key_count; i++) {
    const redisReply *element = reply->element[i];
    if (element->type == REDIS_REPLY_STRING) {
      records[i].found = true;
      records[i].data = (const uint8_t *)element->str;
      records[i].length = element->len;
    }
  }
  op->get_cb(op->data, &err, records, op->key_count);
  free(records);
  free(op);
  update_ref(r);
  maybe_finish_close(r);
}

static void reply_check(redis_op *op, const redisReply *reply) {
  reshard_error err;
  reshard_error_clear(&err);
  redis_catalog *r = op->r;
  if (!exec_ok(r, reply, 2, "checking the manifest", &err)) {
    op_complete(op, &err);
    return;
  }
  if (reply->element[0]->integer == 1) {
    remember_verified(r, op->domain, op->manifest_key);
    op->kind = OP_ADD;
    start_op(op);
    return;
  }
  if (reply->element[1]->integer == 1) {
    reshard_error_set(&err, RESHARD_INVALID_ARGUMENT,
                      "manifest_key %s: belongs to another model domain than "
                      "%s",
                      op->manifest_key, op->domain);
  } else {
    reshard_error_set(&err, RESHARD_NOT_FOUND,
                      "manifest_key %s: no such manifest is published",
                      op->manifest_key);
  }
  op_complete(op, &err);
}

static void reply_count(redis_op *op, const redisReply *reply) {
  reshard_error err;
  reshard_error_clear(&err);
  redis_catalog *r = op->r;
  bool forget_all = op->kind == OP_FORGET && op->manifest_key == NULL;
  size_t expected = forget_all ? 2 * op->key_count : op->key_count;
  if (!exec_ok(r, reply, expected,
               op->kind == OP_ADD ? "binding pages" : "forgetting pages",
               &err)) {
    op_complete(op, &err);
    return;
  }
  uint64_t count = 0;
  for (size_t i = 0; i < expected; i += forget_all ? 2 : 1) {
    if (reply->element[i]->type == REDIS_REPLY_INTEGER &&
        reply->element[i]->integer > 0) {
      count += (uint64_t)reply->element[i]->integer;
    }
  }
  op->count_cb(op->data, &err, count);
  free(op);
  update_ref(r);
  maybe_finish_close(r);
}

static void reply_lookup(redis_op *op, const redisReply *reply) {
  reshard_error err;
  reshard_error_clear(&err);
  redis_catalog *r = op->r;
  size_t pages = op->key_count;
  if (!exec_ok(r, reply, pages + 1, "looking up pages", &err)) {
    op_complete(op, &err);
    return;
  }
  size_t total = 0;
  for (size_t i = 0; i < pages; i++) {
    const redisReply *set = reply->element[i + 1];
    if (set->type != REDIS_REPLY_ARRAY) {
      reshard_error_set(&err, RESHARD_INTERNAL,
                        "catalog %s: looking up page_keys[%zu]: not a set",
                        r->spec, i);
      op_complete(op, &err);
      return;
    }
    total += set->elements;
  }
  size_t *start = malloc((pages + 1) * sizeof *start);
  const char **keys = malloc((total ? total : 1) * sizeof *keys);
  if (start == NULL || keys == NULL) {
    free(start);
    free(keys);
    reshard_error_set(&err, RESHARD_INTERNAL, "catalog: out of memory");
    op_complete(op, &err);
    return;
  }
  size_t at = 0;
  for (size_t i = 0; i < pages; i++) {
    const redisReply *set = reply->element[i + 1];
    start[i] = at;
    for (size_t j = 0; j < set->elements; j++) {
      if (set->element[j]->type == REDIS_REPLY_STRING) {
        keys[at++] = set->element[j]->str;
      }
    }
    /* SMEMBERS has no order; sort so every daemon reports the same. */
    qsort(keys + start[i], at - start[i], sizeof *keys, compare_keys);
  }
  start[pages] = at;
  reshard_catalog_pages result = {
      .domain_known = reply->element[0]->integer == 1,
      .page_count = pages,
      .start = start,
      .manifest_keys = keys,
  };
  op->lookup_cb(op->data, &err, &result);
  free(start);
  free(keys);
  free(op);
  update_ref(r);
  maybe_finish_close(r);
}

static void on_reply(redisAsyncContext *ac, void *reply_ptr, void *privdata) {
  redis_op *op = privdata;
  redis_catalog *r = op->r;
  redisReply *reply = reply_ptr;
  if (op->listed) {
    list_remove(&r->inflight, op);
  }
  if (reply == NULL) {
    connection_lost(r, ac);
    op_fail_unavailable(op);
    return;
  }
  switch (op->kind) {
  case OP_PUT:
    reply_put(op, reply);
    break;
  case OP_GET:
    reply_get(op, reply);
    break;
  case OP_CHECK:
    reply_check(op, reply);
    break;
  case OP_ADD:
  case OP_FORGET:
    reply_count(op, reply);
    break;
  case OP_LOOKUP:
    reply_lookup(op, reply);
    break;
  }
}

/* ---- Operations ---- */

static redis_op *op_new(redis_catalog *r, op_kind kind,
                        const char *manifest_key, const char *domain,
                        const uint8_t *record, size_t length,
                        const char *const *keys, size_t key_count) {
  reshard_catalog_args copy;
  reshard_catalog_args in = {manifest_key,        domain,   record, length,
                             (const char **)keys, key_count};
  redis_op *op = reshard_catalog_op_alloc(sizeof *op, &in, &copy);
  if (op == NULL) {
    return NULL;
  }
  op->r = r;
  op->kind = kind;
  op->manifest_key = copy.manifest_key;
  op->domain = copy.domain;
  op->record = copy.record;
  op->length = copy.length;
  op->keys = copy.keys;
  op->key_count = copy.key_count;
  return op;
}

static void oom(reshard_error *err) {
  reshard_error_set(err, RESHARD_INTERNAL, "catalog: out of memory");
}

static void redis_put_manifest(reshard_catalog *catalog,
                               const char *manifest_key,
                               const char *model_domain, const uint8_t *record,
                               size_t length, reshard_catalog_put_cb cb,
                               void *data) {
  redis_catalog *r = (redis_catalog *)catalog;
  redis_op *op =
      op_new(r, OP_PUT, manifest_key, model_domain, record, length, NULL, 0);
  if (op == NULL) {
    reshard_error err;
    oom(&err);
    cb(data, &err, false);
    return;
  }
  op->put_cb = cb;
  op->data = data;
  start_op(op);
}

static void redis_get_manifests(reshard_catalog *catalog,
                                const char *const *keys, size_t count,
                                reshard_catalog_get_cb cb, void *data) {
  redis_catalog *r = (redis_catalog *)catalog;
  reshard_error err;
  reshard_error_clear(&err);
  if (count == 0) {
    reshard_catalog_record none = {0};
    cb(data, &err, &none, 0);
    return;
  }
  redis_op *op = op_new(r, OP_GET, NULL, NULL, NULL, 0, keys, count);
  if (op == NULL) {
    oom(&err);
    cb(data, &err, NULL, 0);
    return;
  }
  op->get_cb = cb;
  op->data = data;
  start_op(op);
}

static void redis_add_pages(reshard_catalog *catalog, const char *model_domain,
                            const char *manifest_key,
                            const char *const *page_keys, size_t page_count,
                            reshard_catalog_count_cb cb, void *data) {
  redis_catalog *r = (redis_catalog *)catalog;
  bool known = is_verified(r, model_domain, manifest_key);
  redis_op *op = op_new(r, known ? OP_ADD : OP_CHECK, manifest_key,
                        model_domain, NULL, 0, page_keys, page_count);
  if (op == NULL) {
    reshard_error err;
    oom(&err);
    cb(data, &err, 0);
    return;
  }
  op->count_cb = cb;
  op->data = data;
  start_op(op);
}

static void redis_forget_pages(reshard_catalog *catalog,
                               const char *model_domain,
                               const char *manifest_key,
                               const char *const *page_keys, size_t page_count,
                               reshard_catalog_count_cb cb, void *data) {
  redis_catalog *r = (redis_catalog *)catalog;
  redis_op *op = op_new(r, OP_FORGET, manifest_key, model_domain, NULL, 0,
                        page_keys, page_count);
  if (op == NULL) {
    reshard_error err;
    oom(&err);
    cb(data, &err, 0);
    return;
  }
  op->count_cb = cb;
  op->data = data;
  start_op(op);
}

static void redis_lookup_pages(reshard_catalog *catalog,
                               const char *model_domain,
                               const char *const *page_keys, size_t page_count,
                               reshard_catalog_lookup_cb cb, void *data) {
  redis_catalog *r = (redis_catalog *)catalog;
  redis_op *op =
      op_new(r, OP_LOOKUP, NULL, model_domain, NULL, 0, page_keys, page_count);
  if (op == NULL) {
    reshard_error err;
    oom(&err);
    cb(data, &err, NULL);
    return;
  }
  op->lookup_cb = cb;
  op->data = data;
  start_op(op);
}

/* ---- Closing ---- */

static void on_timer_closed(uv_handle_t *handle) {
  redis_catalog *r = handle->data;
  if (--r->open_timers > 0) {
    return;
  }
  reshard_table_clear(&r->verified, free_verified, NULL);
  reshard_table_destroy(&r->verified);
  reshard_catalog_close_cb cb = r->close_cb;
  void *data = r->close_data;
  reshard_redis_url_wipe(&r->credentials);
  free(r);
  if (cb != NULL) {
    cb(data);
  }
}

static void maybe_finish_close(redis_catalog *r) {
  if (!r->closing || r->close_started || r->inflight.head != NULL ||
      r->waiting.head != NULL) {
    return;
  }
  if (r->resolving) {
    uv_cancel((uv_req_t *)&r->resolve); /* on_resolved comes back here */
    return;
  }
  r->close_started = true;
  redisAsyncContext *ac = r->ac;
  r->ac = NULL;
  r->state = CONN_DOWN;
  if (ac != NULL) {
    ac->data = NULL;
    redisAsyncFree(ac);
  }
  uv_close((uv_handle_t *)&r->retry, on_timer_closed);
  uv_close((uv_handle_t *)&r->watchdog, on_timer_closed);
}

static void redis_close(reshard_catalog *catalog, reshard_catalog_close_cb cb,
                        void *data) {
  redis_catalog *r = (redis_catalog *)catalog;
  r->closing = true;
  r->close_cb = cb;
  r->close_data = data;
  uv_timer_stop(&r->retry);
  while (r->waiting.head != NULL) {
    redis_op *op = r->waiting.head;
    list_remove(&r->waiting, op);
    op_fail_unavailable(op);
  }
  maybe_finish_close(r);
}

static const reshard_catalog_vtable redis_vtable = {
    .name = "redis",
    .lookups_are_local = false,
    .put_manifest = redis_put_manifest,
    .get_manifests = redis_get_manifests,
    .add_pages = redis_add_pages,
    .forget_pages = redis_forget_pages,
    .lookup_pages = redis_lookup_pages,
    .close = redis_close,
};

bool reshard_catalog_redis_connected(const reshard_catalog *catalog) {
  return ((const redis_catalog *)catalog)->state == CONN_READY;
}

/* ---- Opening ---- */

/* Parses "redis://HOST:PORT[/DB]" (HOST may be [IPV6]). */
static bool parse_spec(const char *spec, char *host, size_t host_size,
                       int *port, int *db) {
  if (strncmp(spec, "redis://", 8) != 0) {
    return false;
  }
  const char *at = spec + 8;
  const char *slash = strchr(at, '/');
  const char *end = slash ? slash : at + strlen(at);
  const char *colon;
  const char *host_start = at, *host_end;
  if (*at == '[') {
    const char *close = memchr(at, ']', (size_t)(end - at));
    if (close == NULL || close[1] != ':') {
      return false;
    }
    host_start = at + 1;
    host_end = close;
    colon = close + 1;
  } else {
    colon = NULL;
    for (const char *p = at; p < end; p++) {
      if (*p == ':') {
        colon = p;
      }
    }
    if (colon == NULL) {
      return false;
    }
    host_end = colon;
  }
  size_t host_length = (size_t)(host_end - host_start);
  if (host_length == 0 || host_length >= host_size) {
    return false;
  }
  memcpy(host, host_start, host_length);
  host[host_length] = '\0';
  long value = 0;
  const char *p = colon + 1;
  if (p == end) {
    return false;
  }
  for (; p < end; p++) {
    if (*p < '0' || *p > '9' || (value = value * 10 + (*p - '0')) > 65535) {
      return false;
    }
  }
  if (value == 0) {
    return false;
  }
  *port = (int)value;
  *db = 0;
  if (slash != NULL) {
    long number = 0;
    p = slash + 1;
    if (*p == '\0') {
      return false;
    }
    for (; *p; p++) {
      if (*p < '0' || *p > '9' ||
          (number = number * 10 + (*p - '0')) > 1000000) {
        return false;
      }
    }
    *db = (int)number;
  }
  return true;
}

reshard_status reshard_catalog_redis_open(uv_loop_t *loop, const char *spec,
                                          const char *password,
                                          reshard_catalog **out,
                                          reshard_error *err) {
  *out = NULL;
  redis_catalog *r = calloc(1, sizeof *r);
  if (r == NULL) {
    return reshard_error_set(err, RESHARD_INTERNAL, "catalog: out of memory");
  }
  r->reply_bound.max_elements = MIN_REPLY_ELEMENTS;
  /* Messages show the address only, never the credentials. */
  if (!reshard_redis_url_split(spec, &r->credentials) ||
      strlen(r->credentials.address) >= sizeof r->spec ||
      !parse_spec(r->credentials.address, r->host, sizeof r->host, &r->port,
                  &r->db) ||
      (password != NULL &&
       strlen(password) >= sizeof r->credentials.password)) {
    bool secret = strchr(spec, '@') != NULL;
    reshard_redis_url_wipe(&r->credentials);
    free(r);
    return reshard_error_set(
        err, RESHARD_INVALID_ARGUMENT,
        "--catalog \"%s\": not redis://[[USER]:PASSWORD@]HOST:PORT[/DB] "
        "(port 1..65535; a password below 512 bytes)",
        secret ? "(not shown: it holds credentials)" : spec);
  }
  if (password != NULL) {
    snprintf(r->credentials.password, sizeof r->credentials.password, "%s",
             password);
  }
  snprintf(r->spec, sizeof r->spec, "%s", r->credentials.address);
  if (!reshard_table_init(&r->verified, 64)) {
    reshard_redis_url_wipe(&r->credentials);
    free(r);
    return reshard_error_set(err, RESHARD_INTERNAL, "catalog: out of memory");
  }
  r->base.vtable = &redis_vtable;
  r->base.loop = loop;
  r->backoff_ms = RESHARD_CATALOG_REDIS_BACKOFF_MIN_MS;
  uv_timer_init(loop, &r->retry);
  uv_timer_init(loop, &r->watchdog);
  r->retry.data = r->watchdog.data = r;
  r->open_timers = 2;
  uv_unref((uv_handle_t *)&r->retry);
  uv_unref((uv_handle_t *)&r->watchdog);
  uv_timer_start(&r->watchdog, on_watchdog, WATCHDOG_MS, WATCHDOG_MS);
  r->state = CONN_DOWN;
  connect_start(r);
  *out = &r->base;
  return RESHARD_OK;
}
