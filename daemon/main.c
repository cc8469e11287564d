/* reshardd: parse the configuration, wire the catalog, cache, services and
 * gRPC server to one libuv loop, run until SIGTERM/SIGINT, shut down
 * cleanly. Exit status: 0 after a clean shutdown, 1 on a runtime failure,
 * 2 on bad configuration. */
#include <errno.h>
#include <grpc/grpc.h>
#include <grpc/support/log.h>
#include <malloc.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <uv.h>

#include "cache/cache.h"
#include "catalog/catalog_open.h"
#include "catalog/catalog_timed.h"
#include "catalog/redis/redis_url.h"
#include "config.h"
#include "observe/log.h"
#include "observe/metrics.h"
#include "observe/metrics_http.h"
#include "rpc/planner_service.h"
#include "server/abseil.h"
#include "server/guard/accept_guard.h"
#include "server/health.h"
#include "server/server.h"
#include "server/tls.h"
#include "wire/decode.h"

#ifndef RESHARDD_VERSION
#define RESHARDD_VERSION "0.1.0"
#endif

typedef struct app {
  uv_loop_t loop;
  reshard_config config;
  reshard_catalog *catalog;
  reshard_cache *cache;
  reshard_server *server;
  reshard_health *health;
  reshard_planner *planner;
  uv_signal_t signals[6]; /* see SIGNALS */
  bool signals_open;
  reshard_metrics *metrics; /* NULL without --metrics-listen */
  reshard_metrics_http *metrics_http;
  uv_timer_t metrics_timer; /* publishes the cache figures */
  bool metrics_timer_open;
  reshard_tls *tls;                     /* NULL: plaintext */
  grpc_server_credentials *credentials; /* from tls */
} app;

/* SIGTERM, SIGINT and SIGQUIT drain (a second one cuts the drain short);
 * SIGHUP, SIGUSR1 and SIGUSR2 are logged and change nothing, so a stray
 * one never kills the daemon without its drain (docs/security.md). */
static const int SIGNALS[6] = {SIGTERM, SIGINT,  SIGQUIT,
                               SIGHUP,  SIGUSR1, SIGUSR2};

/* How often the loop publishes the cache's figures for scrapes. */
enum { METRICS_PUBLISH_MS = 1000 };

static const char *env_lookup(const char *name, void *data) {
  (void)data;
  return getenv(name);
}

/* gRPC's own log lines, in our format. */
static void grpc_log(gpr_log_func_args *args) {
  reshard_log_level level = RESHARD_LOG_INFO;
  if (args->severity == GPR_LOG_SEVERITY_DEBUG) {
    level = RESHARD_LOG_DEBUG;
  } else if (args->severity == GPR_LOG_SEVERITY_ERROR) {
    level = RESHARD_LOG_ERROR;
  }
  reshard_log_line line;
  if (reshard_log_begin(&line, level, args->message)) {
    reshard_log_str(&line, "component", "grpc");
    reshard_log_str(&line, "file", args->file);
    reshard_log_i64(&line, "line", args->line);
    reshard_log_end(&line);
  }
}

static void on_closed_handle(uv_handle_t *handle) {
  (void)handle;
}

static void on_catalog_closed(void *data) {
  (void)data;
}

/* Copies the cache's figures into the metrics registry (loop thread). */
static void publish_metrics(app *a) {
  if (a->metrics != NULL && a->cache != NULL) {
    reshard_cache_stats stats;
    reshard_cache_get_stats(a->cache, &stats);
    reshard_metrics_publish_cache(a->metrics, &stats);
  }
}

static void on_metrics_timer(uv_timer_t *timer) {
  publish_metrics(timer->data);
}

/* The server is gone: close what keeps the loop alive. */
static void on_server_closed(void *data) {
  app *a = data;
  if (a->metrics_timer_open) {
    publish_metrics(a);
    uv_close((uv_handle_t *)&a->metrics_timer, on_closed_handle);
    a->metrics_timer_open = false;
  }
  if (a->signals_open) {
    for (size_t i = 0; i < sizeof SIGNALS / sizeof SIGNALS[0]; i++) {
      uv_close((uv_handle_t *)&a->signals[i], on_closed_handle);
    }
    a->signals_open = false;
  }
}

static void on_drain(void *data) {
  app *a = data;
  reshard_health_set_serving(a->health, false);
  reshard_metrics_set_draining(a->metrics, true);
  publish_metrics(a);
}

static const char *signal_name(int signum) {
  switch (signum) {
  case SIGTERM:
    return "SIGTERM";
  case SIGINT:
    return "SIGINT";
  case SIGQUIT:
    return "SIGQUIT";
  case SIGHUP:
    return "SIGHUP";
  case SIGUSR1:
    return "SIGUSR1";
  default:
    return "SIGUSR2";
  }
}

static void on_signal(uv_signal_t *handle, int signum) {
  app *a = handle->data;
  bool drains = signum == SIGTERM || signum == SIGINT || signum == SIGQUIT;
  reshard_log_line line;
  if (reshard_log_begin(&line, RESHARD_LOG_INFO, "signal")) {
    reshard_log_str(&line, "signal", signal_name(signum));
    reshard_log_bool(&line, "draining", reshard_server_draining(a->server));
    if (!drains) {
      reshard_log_str(&line, "action",
                      "none (only SIGTERM, SIGINT and "
                      "SIGQUIT stop the daemon)");
    }
    reshard_log_end(&line);
  }
  if (drains) {
    reshard_server_drain(a->server, on_server_closed, a);
  }
}

/* Idle connections cost a descriptor each; the soft limit (often 1024)
 * is raised to the hard one so the daemon runs out much later. */
static void raise_fd_limit(void) {
  struct rlimit limit;
  if (getrlimit(RLIMIT_NOFILE, &limit) != 0 ||
      limit.rlim_cur >= limit.rlim_max) {
    return;
  }
  uint64_t soft = limit.rlim_cur;
  limit.rlim_cur = limit.rlim_max;
  reshard_log_line line;
  bool raised = setrlimit(RLIMIT_NOFILE, &limit) == 0;
  if (reshard_log_begin(&line, raised ? RESHARD_LOG_DEBUG : RESHARD_LOG_WARN,
                        raised ? "raised the descriptor limit"
                               : "cannot raise the descriptor limit")) {
    reshard_log_u64(&line, "soft", soft);
    reshard_log_u64(&line, "hard", limit.rlim_max);
    reshard_log_end(&line);
  }
}

/* The listen address with the bound port in place of the requested one. */
static void bound_address(const char *listen, int port, char *out,
                          size_t size) {
  if (strncmp(listen, "unix:", 5) == 0) {
    snprintf(out, size, "%s", listen);
    return;
  }
  const char *colon = strrchr(listen, ':');
  int host_length = colon ? (int)(colon - listen) : (int)strlen(listen);
  snprintf(out, size, "%.*s:%d", host_length, listen, port);
}

/* One line with what the cache did over the daemon's life. */
static void log_cache_stats(const reshard_cache *cache) {
  reshard_cache_stats stats;
  reshard_cache_get_stats(cache, &stats);
  reshard_log_line line;
  if (!reshard_log_begin(&line, RESHARD_LOG_INFO, "cache")) {
    return;
  }
  for (int kind = 0; kind < RESHARD_CACHE_KINDS; kind++) {
    char key[32];
    const char *name = reshard_cache_kind_name((reshard_cache_kind)kind);
    snprintf(key, sizeof key, "%s_hits", name);
    reshard_log_u64(&line, key, stats.hits[kind]);
    snprintf(key, sizeof key, "%s_misses", name);
    reshard_log_u64(&line, key, stats.misses[kind]);
    snprintf(key, sizeof key, "%s_evictions", name);
    reshard_log_u64(&line, key, stats.evictions[kind]);
  }
  reshard_log_u64(&line, "bytes", stats.total_bytes);
  reshard_log_u64(&line, "budget", stats.budget);
  reshard_log_end(&line);
}

static void teardown(app *a) {
  if (a->cache != NULL && a->server != NULL) {
    log_cache_stats(a->cache);
  }
  /* The HTTP thread reads the registry: stop it first. */
  reshard_metrics_http_stop(a->metrics_http);
  a->metrics_http = NULL;
  reshard_planner_free(a->planner);
  reshard_health_free(a->health);
  reshard_server_free(a->server);
  if (a->credentials != NULL) {
    grpc_server_credentials_release(a->credentials);
    a->credentials = NULL;
  }
  reshard_cache_destroy(a->cache);
  if (a->catalog != NULL) {
    a->catalog->vtable->close(a->catalog, on_catalog_closed, NULL);
  }
  /* Let close callbacks run, then the loop must be empty. */
  uv_run(&a->loop, UV_RUN_DEFAULT);
  if (uv_loop_close(&a->loop) != 0) {
    reshard_log_msg(RESHARD_LOG_ERROR, "loop still has handles at exit", NULL);
  }
  /* Catalog callbacks record into the registry until the catalog is gone. */
  reshard_metrics_free(a->metrics);
  a->metrics = NULL;
}

/* Tears down after gRPC was initialised; returns `code`. The certificate
 * fetcher may run on gRPC's threads until gRPC is shut down. */
static int stop(app *a, int code) {
  teardown(a);
  grpc_shutdown();
  reshard_tls_free(a->tls);
  a->tls = NULL;
  return code;
}

/* Reads --redis-password-file into `out` (wiped by the caller): the whole
 * file less one trailing newline. The message names the file, never what
 * it holds. */
static reshard_status read_password_file(const char *path,
                                         reshard_redis_url *out,
                                         reshard_error *err) {
  FILE *f = fopen(path, "rb");
  if (f == NULL) {
    return reshard_error_set(err, RESHARD_INVALID_ARGUMENT,
                             "--redis-password-file %s: %s", path,
                             strerror(errno));
  }
  size_t length = fread(out->password, 1, sizeof out->password, f);
  bool failed = ferror(f) != 0;
  fclose(f);
  while (length > 0 && (out->password[length - 1] == '\n' ||
                        out->password[length - 1] == '\r')) {
    length--;
  }
  if (failed || length == 0 || length >= sizeof out->password ||
      memchr(out->password, '\0', length) != NULL) {
    reshard_redis_url_wipe(out);
    return reshard_error_set(err, RESHARD_INVALID_ARGUMENT,
                             "--redis-password-file %s: %s", path,
                             failed ? "cannot read"
                                    : "must hold one password of 1 to 511 "
                                      "bytes");
  }
  out->password[length] = '\0';
  return RESHARD_OK;
}

/* The catalog as logs show it: a Redis URL without its credentials. */
static void catalog_for_logs(const char *catalog, char *out, size_t size) {
  reshard_redis_url url;
  if (strncmp(catalog, "redis://", 8) == 0 &&
      reshard_redis_url_split(catalog, &url)) {
    snprintf(out, size, "%s", url.address);
    reshard_redis_url_wipe(&url);
  } else {
    snprintf(out, size, "%s", catalog);
  }
}

/* gRPC reads each request into buffers from malloc. glibc maps any block
 * of 128 KiB or more afresh and unmaps it when freed (raising that
 * threshold only after freeing a larger mapped block), so a paged
 * reader's request (S1: 244 KB) cost page faults, and an unmap that every
 * core must hear about, on every call. Blocks under 1 MiB (the SPEC §6
 * paged requests are 0.2 to 0.8 MB) come from the heap instead, and up to
 * 2 MiB of free heap is kept at the top of each malloc arena. 4 and 8 MiB
 * kept S5's resident memory about half a MiB a call higher
 * (docs/performance.md, Round 12). */
static void keep_heap(void) {
  mallopt(M_MMAP_THRESHOLD, 1 << 20);
  mallopt(M_TRIM_THRESHOLD, 2 << 20);
}

int main(int argc, char **argv) {
  static app a;
  reshard_error err;
  if (reshard_config_parse(&a.config, argc, argv, env_lookup, NULL, &err) !=
      RESHARD_OK) {
    fprintf(stderr, "reshardd: %s\nTry 'reshardd --help'.\n", err.message);
    return 2;
  }
  if (a.config.help) {
    reshard_config_usage(stdout);
    return 0;
  }
  if (a.config.version) {
    printf("reshardd %s\n", RESHARDD_VERSION);
    return 0;
  }
  if (a.config.check_config) {
    /* Everything was validated exactly as for a start; nothing is bound
     * or opened. */
    reshard_config_print(&a.config, stdout);
    return 0;
  }
  reshard_log_set_level(a.config.log_level);
  keep_heap();
  signal(SIGPIPE, SIG_IGN);
  raise_fd_limit();
  reshard_accept_guard_init();

  if (uv_loop_init(&a.loop) != 0) {
    reshard_log_msg(RESHARD_LOG_ERROR, "cannot create the event loop", NULL);
    return 1;
  }
  reshard_redis_url secret = {0};
  reshard_status opened =
      a.config.redis_password_file != NULL
          ? read_password_file(a.config.redis_password_file, &secret, &err)
          : RESHARD_OK;
  if (opened == RESHARD_OK) {
    reshard_catalog_redis_options options = {
        .password = a.config.redis_password_file ? secret.password : NULL,
        .wait_replicas = (unsigned)a.config.redis_wait_replicas,
    };
    opened = reshard_catalog_open_with_options(&a.loop, a.config.catalog,
                                               &options, &a.catalog, &err);
  }
  reshard_redis_url_wipe(&secret);
  if (opened != RESHARD_OK) {
    fprintf(stderr, "reshardd: %s\n", err.message);
    uv_loop_close(&a.loop);
    return err.code == RESHARD_INVALID_ARGUMENT ? 2 : 1;
  }
  if (a.config.metrics_listen != NULL) {
    a.metrics =
        reshard_metrics_create(RESHARDD_VERSION, a.catalog->vtable->name);
    reshard_catalog *timed =
        a.metrics ? reshard_catalog_timed_wrap(a.catalog, a.metrics) : NULL;
    if (timed == NULL) {
      reshard_log_msg(RESHARD_LOG_ERROR, "out of memory", NULL);
      teardown(&a);
      return 1;
    }
    a.catalog = timed;
  }
  a.cache = reshard_cache_create(a.config.cache_bytes);
  if (a.cache == NULL) {
    reshard_log_msg(RESHARD_LOG_ERROR, "out of memory", NULL);
    teardown(&a);
    return 1;
  }

  gpr_set_log_function(grpc_log);
  gpr_set_log_verbosity(a.config.log_level == RESHARD_LOG_DEBUG
                            ? GPR_LOG_SEVERITY_INFO
                            : GPR_LOG_SEVERITY_ERROR);
  /* Before gRPC's threads take their first absl::Mutex (server/abseil.c
   * says why a daemon does not want abseil's lock-order checks). */
  if (!reshard_abseil_ignore_lock_cycles()) {
    reshard_log_msg(RESHARD_LOG_WARN,
                    "abseil's lock-order checks stay on: this abseil's "
                    "SetMutexDeadlockDetectionMode was not found",
                    NULL);
  }
  grpc_init();
  /* Every request is decoded under the same caps its handler applies. */
  reshard_decode_set_caps(&a.config.limits);

  if (a.config.tls_cert != NULL) {
    reshard_tls_files files = {a.config.tls_cert, a.config.tls_key,
                               a.config.tls_client_ca};
    a.tls = reshard_tls_create(&files, &err);
    if (a.tls == NULL) {
      fprintf(stderr, "reshardd: %s\n", err.message);
      return stop(&a, err.code == RESHARD_INVALID_ARGUMENT ? 2 : 1);
    }
    a.credentials = reshard_tls_server_credentials(a.tls);
    if (a.credentials == NULL) {
      reshard_log_msg(RESHARD_LOG_ERROR, "cannot create TLS credentials", NULL);
      return stop(&a, 1);
    }
  }
  reshard_server_options options = {
      .listen = a.config.listen,
      .max_request_bytes = a.config.max_request_bytes,
      .drain_timeout_ms = a.config.drain_timeout_ms,
      .metrics = a.metrics,
      .max_inflight_bytes = a.config.max_inflight_bytes,
      .default_deadline_ms = a.config.default_deadline_ms,
      .max_concurrent_streams = (unsigned)a.config.max_concurrent_streams,
      .keepalive_time_ms = a.config.keepalive_time_ms,
      .keepalive_timeout_ms = a.config.keepalive_timeout_ms,
      .max_connection_idle_ms = a.config.max_connection_idle_ms,
      .credentials = a.credentials,
  };
  a.server = reshard_server_create(&a.loop, &options, &err);
  if (a.server != NULL) {
    a.health = reshard_health_create(a.server);
    a.planner =
        reshard_planner_create(&a.loop, a.catalog, a.cache, &a.config.limits,
                               a.config.inline_plan_max_values);
  }
  if (a.server == NULL || a.health == NULL || a.planner == NULL) {
    reshard_log_msg(RESHARD_LOG_ERROR, "cannot create the server",
                    a.server ? "out of memory" : err.message);
    return stop(&a, 1);
  }
  reshard_planner_register(a.planner, a.server);
  reshard_planner_set_metrics(a.planner, a.metrics);
  reshard_server_on_drain(a.server, on_drain, &a);

  /* Metrics bind before gRPC does, so a bad --metrics-listen fails the
   * start before anything is served. */
  int metrics_port = 0;
  if (a.metrics != NULL) {
    a.metrics_http = reshard_metrics_http_start(a.config.metrics_listen,
                                                a.metrics, &metrics_port, &err);
    if (a.metrics_http == NULL) {
      reshard_log_msg(RESHARD_LOG_ERROR, "cannot serve metrics", err.message);
      return stop(&a, 1);
    }
  }

  int port = 0;
  if (reshard_server_start(a.server, &port, &err) != RESHARD_OK) {
    reshard_log_msg(RESHARD_LOG_ERROR, "cannot listen", err.message);
    return stop(&a, 1);
  }

  for (size_t i = 0; i < sizeof SIGNALS / sizeof SIGNALS[0]; i++) {
    uv_signal_init(&a.loop, &a.signals[i]);
    a.signals[i].data = &a;
    uv_signal_start(&a.signals[i], on_signal, SIGNALS[i]);
  }
  a.signals_open = true;

  char address[300];
  bound_address(a.config.listen, port, address, sizeof address);
  reshard_log_line line;
  if (reshard_log_begin(&line, RESHARD_LOG_INFO, "listening")) {
    reshard_log_str(&line, "address", address);
    reshard_log_str(&line, "version", RESHARDD_VERSION);
    char catalog[300];
    catalog_for_logs(a.config.catalog, catalog, sizeof catalog);
    reshard_log_str(&line, "catalog", catalog);
    reshard_log_str(&line, "tls",
                    a.tls == NULL                    ? "off"
                    : a.config.tls_client_ca != NULL ? "mutual"
                                                     : "on");
    reshard_log_u64(&line, "cache_bytes", a.config.cache_bytes);
    reshard_log_str(&line, "grpc", grpc_version_string());
    reshard_log_end(&line);
  }
  if (a.metrics != NULL) {
    /* Logged after the gRPC line, which tests read the port from. */
    bound_address(a.config.metrics_listen, metrics_port, address,
                  sizeof address);
    reshard_log_line served;
    if (reshard_log_begin(&served, RESHARD_LOG_INFO, "serving metrics")) {
      reshard_log_str(&served, "metrics_address", address);
      reshard_log_str(&served, "path", "/metrics");
      reshard_log_end(&served);
    }
    uv_timer_init(&a.loop, &a.metrics_timer);
    a.metrics_timer.data = &a;
    uv_timer_start(&a.metrics_timer, on_metrics_timer, 0, METRICS_PUBLISH_MS);
    a.metrics_timer_open = true;
  }

  uv_run(&a.loop, UV_RUN_DEFAULT);

  return stop(&a, 0);
}
