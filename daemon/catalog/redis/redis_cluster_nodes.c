/* The nodes of the Redis Cluster client (redis_cluster.h): the node
 * table, one asynchronous connection per node made on first use on the
 * daemon's loop (AUTH first when the URL has a password; commands are
 * pipelined behind the connect), host names resolved on the thread pool,
 * and a node dropped when its connection ends or goes silent, with a
 * backoff of 100 ms doubling to 1 s before it is connected again. Rules 3
 * and 7 of redis_cluster.c. */
#include <arpa/inet.h>
#include <errno.h>
#include <hiredis/adapters/libuv.h>
#include <netdb.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>

#include "catalog/redis/redis_cluster.h"
#include "observe/log.h"

/* ---- The node table ---- */

static bool host_numeric(const char *host) {
  unsigned char buffer[sizeof(struct in6_addr)];
  return inet_pton(AF_INET, host, buffer) == 1 ||
         inet_pton(AF_INET6, host, buffer) == 1;
}

static int node_find(const redis_cluster *c, const char *host, size_t length,
                     int port) {
  for (size_t i = 0; i < c->count; i++) {
    const redis_node *node = c->nodes[i];
    if (node->port == port && strlen(node->host) == length &&
        memcmp(node->host, host, length) == 0) {
      return (int)i;
    }
  }
  return -1;
}

int reshard__redis_node_get(redis_catalog *r, const char *host, size_t length,
                            int port) {
  redis_cluster *c = r->cluster;
  int found = node_find(c, host, length, port);
  if (found >= 0) {
    return found;
  }
  if (c->count >= RESHARD_REDIS_MAX_NODES || length == 0 ||
      length >= sizeof c->nodes[0]->host ||
      !reshard_catalog_grow((void **)&c->nodes, &c->capacity, c->count + 1,
                            sizeof *c->nodes)) {
    return -1;
  }
  redis_node *node = calloc(1, sizeof *node);
  if (node == NULL) {
    return -1;
  }
  node->r = r;
  memcpy(node->host, host, length);
  node->host[length] = '\0';
  node->port = port;
  node->numeric = length < sizeof node->ip && host_numeric(node->host);
  if (node->numeric) {
    memcpy(node->ip, node->host, length + 1);
  }
  node->backoff_ms = RESHARD_REDIS_NODE_BACKOFF_MIN_MS;
  node->resolve.data = node;
  c->nodes[c->count] = node;
  return (int)c->count++;
}

void reshard__redis_node_note_error(redis_catalog *r, const redis_node *node,
                                    const char *message) {
  snprintf(r->last_error, sizeof r->last_error, "node %.60s:%d: %.80s",
           node->host, node->port,
           message && message[0] ? message : "connection closed");
}

/* The connection of `node` is gone (hiredis frees it, or we do). */
static void node_down(redis_node *node, const char *message) {
  redis_catalog *r = node->r;
  node->ac = NULL;
  reshard__redis_node_note_error(r, node, message);
  node->retry_after_ms = reshard__redis_now_ms(r) + node->backoff_ms;
  node->backoff_ms *= 2;
  if (node->backoff_ms > RESHARD_REDIS_NODE_BACKOFF_MAX_MS) {
    node->backoff_ms = RESHARD_REDIS_NODE_BACKOFF_MAX_MS;
  }
  if (!node->numeric) {
    node->ip[0] = '\0'; /* resolve again: the name may point elsewhere */
  }
  r->cluster->want_refresh = true;
  reshard_log_line line;
  if (!node->down && !r->closing &&
      reshard_log_begin(&line, RESHARD_LOG_WARN, "catalog node unreachable")) {
    reshard_log_str(&line, "catalog", r->spec);
    reshard_log_str(&line, "error", r->last_error);
    reshard_log_end(&line);
  }
  node->down = true;
}

void reshard__redis_cluster_lost(redis_catalog *r, redisAsyncContext *ac) {
  redis_cluster *c = r->cluster;
  for (size_t i = 0; ac != NULL && i < c->count; i++) {
    if (c->nodes[i]->ac == ac) {
      node_down(c->nodes[i], ac->errstr);
      return;
    }
  }
}

void reshard__redis_node_drop(redis_node *node, const char *message) {
  redisAsyncContext *ac = node->ac;
  node_down(node, message);
  if (ac != NULL) {
    redisAsyncFree(ac);
  }
}

static void on_node_connect(const redisAsyncContext *ac, int status) {
  redis_node *node = ac->data;
  if (status != REDIS_OK && node != NULL && node->ac == ac) {
    node_down(node, ac->errstr);
  }
}

static void on_node_disconnect(const redisAsyncContext *ac, int status) {
  (void)status;
  redis_node *node = ac->data;
  if (node != NULL && node->ac == ac) {
    node_down(node, ac->errstr);
  }
}

static void on_node_auth(redisAsyncContext *ac, void *reply_ptr,
                         void *privdata) {
  redis_node *node = privdata;
  redisReply *reply = reply_ptr;
  if (reply != NULL && node->ac == ac && reply->type == REDIS_REPLY_ERROR) {
    char message[160];
    snprintf(message, sizeof message, "AUTH: %s", reply->str);
    reshard__redis_node_drop(node, message);
  }
}

static void on_node_resolved(uv_getaddrinfo_t *req, int status,
                             struct addrinfo *res) {
  redis_node *node = req->data;
  redis_catalog *r = node->r;
  node->resolving = false;
  r->cluster->resolving--;
  node->ip[0] = '\0';
  if (status == 0 && res != NULL) {
    const void *addr =
        res->ai_family == AF_INET6
            ? (const void *)&((struct sockaddr_in6 *)res->ai_addr)->sin6_addr
            : (const void *)&((struct sockaddr_in *)res->ai_addr)->sin_addr;
    inet_ntop(res->ai_family, addr, node->ip, sizeof node->ip);
  }
  uv_freeaddrinfo(res);
  if (r->closing) {
    reshard__redis_maybe_finish_close(r);
    return;
  }
  if (node->ip[0] == '\0') {
    char message[120];
    snprintf(message, sizeof message, "cannot resolve: %s",
             status ? uv_strerror(status) : "no address");
    node_down(node, message);
  }
}

bool reshard__redis_node_connect(redis_node *node) {
  redis_catalog *r = node->r;
  if (node->ac != NULL) {
    return true;
  }
  if (r->closing || reshard__redis_now_ms(r) < node->retry_after_ms ||
      node->resolving) {
    return false;
  }
  if (node->ip[0] == '\0') {
    struct addrinfo hints;
    memset(&hints, 0, sizeof hints);
    hints.ai_family = AF_UNSPEC;
    hints.ai_socktype = SOCK_STREAM;
    int rc = uv_getaddrinfo(r->base.loop, &node->resolve, on_node_resolved,
                            node->host, NULL, &hints);
    if (rc != 0) {
      node_down(node, uv_strerror(rc));
      return false;
    }
    node->resolving = true;
    r->cluster->resolving++;
    return false;
  }
  redisAsyncContext *ac = redisAsyncConnect(node->ip, node->port);
  if (ac == NULL || ac->err) {
    node_down(node, ac ? ac->errstr : "out of memory");
    if (ac != NULL) {
      redisAsyncFree(ac);
    }
    return false;
  }
  if (!reshard_redis_reader_bound(ac->c.reader, &r->reply_bound) ||
      redisLibuvAttach(ac, r->base.loop) != REDIS_OK) {
    redisAsyncFree(ac);
    node_down(node, "cannot watch the socket (out of memory)");
    return false;
  }
  ac->data = node;
  redisAsyncSetConnectCallback(ac, on_node_connect);
  redisAsyncSetDisconnectCallback(ac, on_node_disconnect);
  node->ac = ac;
  if (r->credentials.password[0] != '\0') {
    const char *argv[3] = {"AUTH"};
    size_t lengths[3] = {4};
    int n = 1;
    if (r->credentials.user[0] != '\0') {
      argv[n] = r->credentials.user;
      lengths[n++] = strlen(r->credentials.user);
    }
    argv[n] = r->credentials.password;
    lengths[n++] = strlen(r->credentials.password);
    if (redisAsyncCommandArgv(ac, on_node_auth, node, n, argv, lengths) !=
        REDIS_OK) {
      reshard__redis_node_drop(node, "cannot send AUTH");
      return false;
    }
  }
  return true;
}

/* ---- The watchdog ---- */

void reshard__redis_nodes_tick(redis_catalog *r, uint64_t now) {
  redis_cluster *c = r->cluster;
  for (size_t i = 0; i < c->count; i++) {
    redis_node *node = c->nodes[i];
    if (node->ac == NULL) {
      continue;
    }
    /* The 0.14 libuv adapter drops libuv's error event (a refused
     * connect, a reset): the poll handle stops, which is how it shows. */
    if (node->ac->ev.data != NULL &&
        !uv_is_active(
            (uv_handle_t *)&((redisLibuvEvents *)node->ac->ev.data)->handle)) {
      int error = 0;
      socklen_t length = sizeof error;
      if (getsockopt(node->ac->c.fd, SOL_SOCKET, SO_ERROR, &error, &length) !=
          0) {
        error = errno;
      }
      reshard__redis_node_drop(node, error ? strerror(error) : "socket error");
      continue;
    }
    if (node->inflight.head != NULL &&
        now - node->inflight.head->sent_ms > RESHARD_CATALOG_REDIS_TIMEOUT_MS) {
      reshard__redis_node_drop(node, "no reply within the request timeout");
    }
  }
}

/* ---- Loop references ---- */

void reshard__redis_cluster_update_ref(redis_catalog *r) {
  redis_cluster *c = r->cluster;
  for (size_t i = 0; i < c->count; i++) {
    redis_node *node = c->nodes[i];
    if (node->ac == NULL || node->ac->ev.data == NULL) {
      continue;
    }
    uv_handle_t *poll =
        (uv_handle_t *)&((redisLibuvEvents *)node->ac->ev.data)->handle;
    if (node->inflight.head != NULL) {
      uv_ref(poll);
    } else {
      uv_unref(poll);
    }
  }
  if (c->parked.head != NULL) {
    uv_ref((uv_handle_t *)&r->watchdog);
  } else {
    uv_unref((uv_handle_t *)&r->watchdog);
  }
}
