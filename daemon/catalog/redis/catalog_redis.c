/* The Redis catalog: see catalog_redis.h for the contract, docs/catalog.md
 * for the keys and redis_internal.h for how the files divide it.
 *
 * This file holds the connection's life cycle: resolving the host on the
 * thread pool, connecting, AUTH and SELECT, the watchdog, dropping a
 * connection and reconnecting with a backoff; starting operations on it;
 * closing; opening; and the vtable. */
#include "catalog/redis/catalog_redis.h"

#include <arpa/inet.h>
#include <errno.h>
#include <hiredis/adapters/libuv.h>
#include <netdb.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>

#include "catalog/redis/redis_internal.h"
#include "observe/log.h"

#define WATCHDOG_MS 50
/* Arrays a reply may hold whatever was asked: the manifests bound to one
 * page (SMEMBERS), which only a fleet publishing tens of thousands of
 * layouts of one page could pass. */
#define MIN_REPLY_ELEMENTS 65536

/* ---- Lists ---- */

void reshard__redis_list_push(op_list *list, redis_op *op) {
  op->list = list;
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

void reshard__redis_list_remove(op_list *list, redis_op *op) {
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
  op->list = NULL;
  op->listed = false;
}

/* ---- Loop references ---- */

/* The socket's poll handle keeps the loop alive only while a reply is
 * awaited, so an idle catalog never holds the loop open. */
void reshard__redis_update_ref(redis_catalog *r) {
  if (r->cluster != NULL) {
    reshard__redis_cluster_update_ref(r);
    return;
  }
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

/* ---- Failing operations ---- */

void reshard__redis_op_fail_unavailable(redis_op *op) {
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
  reshard__redis_op_complete(op, &err);
}

/* ---- Connection ---- */

static uint64_t now_ms(redis_catalog *r) {
  return uv_now(r->base.loop);
}

void reshard__redis_set_error(redis_catalog *r, const char *message) {
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
    reshard__redis_list_remove(&r->waiting, op);
    reshard__redis_op_fail_unavailable(op);
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
void reshard__redis_drop_connection(redis_catalog *r) {
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
void reshard__redis_connection_lost(redis_catalog *r,
                                    const redisAsyncContext *ac) {
  if (r->ac != ac) {
    return;
  }
  r->ac = NULL;
  reshard__redis_set_error(r, ac->errstr);
  go_down(r);
}

static void send_op(redis_op *op);

static void became_ready(redis_catalog *r) {
  r->state = CONN_READY;
  r->backoff_ms = RESHARD_CATALOG_REDIS_BACKOFF_MIN_MS;
  /* A restarted Redis may have lost what this connection saw. */
  reshard_table_clear(&r->verified, reshard__redis_free_verified, NULL);
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
    reshard__redis_list_remove(&r->waiting, op);
    send_op(op);
  }
  reshard__redis_update_ref(r);
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
    reshard__redis_set_error(r, message);
    reshard__redis_drop_connection(r);
  }
}

static void on_select(redisAsyncContext *ac, void *reply_ptr, void *privdata) {
  redis_catalog *r = privdata;
  redisReply *reply = reply_ptr;
  if (r->ac != ac) {
    return;
  }
  if (reply == NULL) {
    reshard__redis_connection_lost(r, ac);
    return;
  }
  if (reply->type == REDIS_REPLY_ERROR) {
    char message[160];
    snprintf(message, sizeof message, "SELECT %d: %s", r->db, reply->str);
    reshard__redis_set_error(r, message);
    reshard__redis_drop_connection(r);
    return;
  }
  became_ready(r);
}

static void on_connect(const redisAsyncContext *ac, int status) {
  redis_catalog *r = ac->data;
  if (r == NULL || r->ac != ac || status == REDIS_OK) {
    return; /* READY once SELECT answers */
  }
  reshard__redis_connection_lost(r, ac);
}

static void on_disconnect(const redisAsyncContext *ac, int status) {
  (void)status;
  redis_catalog *r = ac->data;
  if (r != NULL) {
    reshard__redis_connection_lost(r, ac);
  }
}

static void connect_to(redis_catalog *r, const char *ip) {
  redisAsyncContext *ac = redisAsyncConnect(ip, r->port);
  if (ac == NULL) {
    reshard__redis_set_error(r, "out of memory");
    go_down(r);
    return;
  }
  if (ac->err) {
    reshard__redis_set_error(r, ac->errstr);
    redisAsyncFree(ac);
    go_down(r);
    return;
  }
  if (!reshard_redis_reader_bound(ac->c.reader, &r->reply_bound)) {
    reshard__redis_set_error(r,
                             "cannot bound the reply reader (out of memory)");
    redisAsyncFree(ac);
    go_down(r);
    return;
  }
  if (redisLibuvAttach(ac, r->base.loop) != REDIS_OK) {
    reshard__redis_set_error(r, "cannot watch the socket");
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
      reshard__redis_set_error(r, "cannot send AUTH");
      reshard__redis_drop_connection(r);
      return;
    }
  }
  char db[16];
  int n = snprintf(db, sizeof db, "%d", r->db);
  const char *argv[] = {"SELECT", db};
  size_t lengths[] = {6, (size_t)n};
  if (redisAsyncCommandArgv(ac, on_select, r, 2, argv, lengths) != REDIS_OK) {
    reshard__redis_set_error(r, "cannot send SELECT");
    reshard__redis_drop_connection(r);
    return;
  }
  reshard__redis_update_ref(r);
}

static void on_resolved(uv_getaddrinfo_t *req, int status,
                        struct addrinfo *res) {
  redis_catalog *r = req->data;
  r->resolving = false;
  if (r->closing) {
    uv_freeaddrinfo(res);
    reshard__redis_maybe_finish_close(r);
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
    reshard__redis_set_error(r, message);
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
    reshard__redis_set_error(r, message);
    go_down(r);
    return;
  }
  r->resolving = true;
}

/* Drops a connection that went silent: a connect that does not finish or a
 * request without a reply within the timeout. */
static void on_watchdog(uv_timer_t *timer) {
  redis_catalog *r = timer->data;
  if (r->cluster != NULL) {
    reshard__redis_cluster_tick(r);
    return;
  }
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
    reshard__redis_set_error(r, error ? strerror(error) : "socket error");
    reshard__redis_drop_connection(r);
    return;
  }
  if (r->state == CONN_CONNECTING &&
      now - r->attempt_ms > RESHARD_CATALOG_REDIS_TIMEOUT_MS) {
    reshard__redis_set_error(r, "connect timed out");
    reshard__redis_drop_connection(r);
  } else if (r->state == CONN_READY && r->inflight.head != NULL &&
             now - r->inflight.head->sent_ms >
                 RESHARD_CATALOG_REDIS_TIMEOUT_MS) {
    reshard__redis_set_error(r, "no reply within the request timeout");
    reshard__redis_drop_connection(r);
  }
}

/* ---- Operations ---- */

static void send_op(redis_op *op) {
  redis_catalog *r = op->r;
  if (r->state != CONN_READY || !reshard__redis_send_commands(op)) {
    reshard__redis_op_fail_unavailable(op);
    return;
  }
  op->sent_ms = now_ms(r);
  reshard__redis_list_push(&r->inflight, op);
  reshard__redis_update_ref(r);
}

/* Starts an operation: now when connected, after the first connection
 * attempt when one is under way, or not at all while Redis is down. */
void reshard__redis_start_op(redis_op *op) {
  redis_catalog *r = op->r;
  if (r->cluster != NULL) {
    reshard__redis_cluster_start_op(op);
  } else if (r->state == CONN_READY) {
    send_op(op);
  } else if (!r->failed_since_ready && !r->closing &&
             (r->state == CONN_CONNECTING || r->state == CONN_RESOLVING)) {
    reshard__redis_list_push(&r->waiting, op);
    reshard__redis_update_ref(r);
  } else {
    reshard__redis_op_fail_unavailable(op);
  }
}

/* ---- Closing ---- */

static void on_timer_closed(uv_handle_t *handle) {
  redis_catalog *r = handle->data;
  if (--r->open_timers > 0) {
    return;
  }
  reshard_table_clear(&r->verified, reshard__redis_free_verified, NULL);
  reshard_table_destroy(&r->verified);
  reshard__redis_cluster_free(r);
  reshard_catalog_close_cb cb = r->close_cb;
  void *data = r->close_data;
  reshard_redis_url_wipe(&r->credentials);
  free(r);
  if (cb != NULL) {
    cb(data);
  }
}

void reshard__redis_maybe_finish_close(redis_catalog *r) {
  if (!r->closing || r->close_started || r->inflight.head != NULL ||
      r->waiting.head != NULL || r->live_ops > 0) {
    return;
  }
  if (r->cluster != NULL && !reshard__redis_cluster_idle(r)) {
    return; /* a name resolution comes back here */
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
    reshard__redis_list_remove(&r->waiting, op);
    reshard__redis_op_fail_unavailable(op);
  }
  if (r->cluster != NULL) {
    reshard__redis_cluster_idle(r); /* fails parked operations */
  }
  reshard__redis_maybe_finish_close(r);
}

static const reshard_catalog_vtable redis_vtable = {
    .name = "redis",
    .lookups_are_local = false,
    .put_manifest = reshard__redis_put_manifest,
    .get_manifests = reshard__redis_get_manifests,
    .add_pages = reshard__redis_add_pages,
    .forget_pages = reshard__redis_forget_pages,
    .lookup_pages = reshard__redis_lookup_pages,
    .put_object = reshard__redis_put_object,
    .get_objects = reshard__redis_get_objects,
    .forget_object = reshard__redis_forget_object,
    .close = redis_close,
};

static const reshard_catalog_vtable cluster_vtable = {
    .name = "redis-cluster",
    .lookups_are_local = false,
    .put_manifest = reshard__redis_put_manifest,
    .get_manifests = reshard__redis_get_manifests,
    .add_pages = reshard__redis_add_pages,
    .forget_pages = reshard__redis_forget_pages,
    .lookup_pages = reshard__redis_lookup_pages,
    .put_object = reshard__redis_put_object,
    .get_objects = reshard__redis_get_objects,
    .forget_object = reshard__redis_forget_object,
    .close = redis_close,
};

bool reshard_catalog_redis_connected(const reshard_catalog *catalog) {
  const redis_catalog *r = (const redis_catalog *)catalog;
  if (r->cluster != NULL) {
    return reshard__redis_cluster_connected(r);
  }
  return r->state == CONN_READY;
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
  return reshard_catalog_redis_open_options(loop, spec, password, 0, out, err);
}

reshard_status
reshard_catalog_redis_open_options(uv_loop_t *loop, const char *spec,
                                   const char *password, unsigned wait_replicas,
                                   reshard_catalog **out, reshard_error *err) {
  *out = NULL;
  bool cluster = strncmp(spec, "redis-cluster://", 16) == 0;
  redis_catalog *r = calloc(1, sizeof *r);
  if (r == NULL) {
    return reshard_error_set(err, RESHARD_INTERNAL, "catalog: out of memory");
  }
  r->reply_bound.max_elements = MIN_REPLY_ELEMENTS;
  r->wait_replicas = wait_replicas;
  /* Messages show the address only, never the credentials. */
  bool oom = false;
  if (!reshard_redis_url_split(spec, &r->credentials) ||
      strlen(r->credentials.address) >= sizeof r->spec ||
      (cluster ? !reshard__redis_cluster_open(r, r->credentials.address, &oom)
               : !parse_spec(r->credentials.address, r->host, sizeof r->host,
                             &r->port, &r->db)) ||
      (password != NULL &&
       strlen(password) >= sizeof r->credentials.password)) {
    bool secret = strchr(spec, '@') != NULL;
    reshard__redis_cluster_free(r);
    reshard_redis_url_wipe(&r->credentials);
    free(r);
    if (oom) {
      return reshard_error_set(err, RESHARD_INTERNAL, "catalog: out of memory");
    }
    return reshard_error_set(
        err, RESHARD_INVALID_ARGUMENT,
        "--catalog \"%s\": not %s (port 1..65535; a password below 512 "
        "bytes)",
        secret ? "(not shown: it holds credentials)" : spec,
        cluster ? "redis-cluster://[[USER]:PASSWORD@]HOST:PORT[,HOST:PORT...]"
                : "redis://[[USER]:PASSWORD@]HOST:PORT[/DB]");
  }
  if (password != NULL) {
    snprintf(r->credentials.password, sizeof r->credentials.password, "%s",
             password);
  }
  snprintf(r->spec, sizeof r->spec, "%s", r->credentials.address);
  if (!reshard_table_init(&r->verified, 64)) {
    reshard__redis_cluster_free(r);
    reshard_redis_url_wipe(&r->credentials);
    free(r);
    return reshard_error_set(err, RESHARD_INTERNAL, "catalog: out of memory");
  }
  r->base.vtable = cluster ? &cluster_vtable : &redis_vtable;
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
  if (cluster) {
    reshard__redis_cluster_start(r);
  } else {
    connect_start(r);
  }
  *out = &r->base;
  return RESHARD_OK;
}
