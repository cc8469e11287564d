#include "config.h"

#include <arpa/inet.h>
#include <ctype.h>
#include <errno.h>
#include <inttypes.h>
#include <netinet/in.h>
#include <stddef.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "catalog/redis/redis_url.h"

typedef enum option_kind {
  OPTION_LISTEN,
  OPTION_CATALOG,
  OPTION_SIZE,
  OPTION_COUNT,
  OPTION_LOG_LEVEL,
  OPTION_METRICS,
  OPTION_DURATION,
  OPTION_NUMBER, /* like COUNT, but 0 is allowed */
  OPTION_PATH,   /* a file name, not empty */
  OPTION_SWITCH, /* a bare flag; the variable takes true/false, 1/0 */
} option_kind;

typedef struct option {
  const char *flag; /* without the leading "--" */
  const char *env;
  option_kind kind;
  size_t offset; /* of the field in reshard_config */
  const char *value_name;
  const char *help;
} option;

#define FIELD(name) offsetof(reshard_config, name)
#define LIMIT(name)                                                            \
  (offsetof(reshard_config, limits) + offsetof(reshard_limits, name))

static const option options[] = {
    {"listen", "RESHARDD_LISTEN", OPTION_LISTEN, FIELD(listen), "ADDR",
     "gRPC listen address, HOST:PORT or unix:PATH "
     "(default " RESHARD_DEFAULT_LISTEN "; port 0 picks a free port)"},
    {"tls-cert", "RESHARDD_TLS_CERT", OPTION_PATH, FIELD(tls_cert), "FILE",
     "serve gRPC over TLS with this PEM certificate chain (re-read when it "
     "changes)"},
    {"tls-key", "RESHARDD_TLS_KEY", OPTION_PATH, FIELD(tls_key), "FILE",
     "the PEM private key of --tls-cert"},
    {"tls-client-ca", "RESHARDD_TLS_CLIENT_CA", OPTION_PATH,
     FIELD(tls_client_ca), "FILE",
     "require client certificates signed by these PEM CAs (mutual TLS)"},
    {"allow-insecure-remote", "RESHARDD_ALLOW_INSECURE_REMOTE", OPTION_SWITCH,
     FIELD(allow_insecure_remote), "",
     "allow plaintext gRPC or metrics on a non-loopback address"},
    {"catalog", "RESHARDD_CATALOG", OPTION_CATALOG, FIELD(catalog), "SPEC",
     "lmdb:PATH | redis://[[USER]:PASSWORD@]HOST:PORT[/DB] | "
     "redis-cluster://[[USER]:PASSWORD@]HOST:PORT[,HOST:PORT...] | memory "
     "(default " RESHARD_DEFAULT_CATALOG "; memory is for tests)"},
    {"redis-password-file", "RESHARDD_REDIS_PASSWORD_FILE", OPTION_PATH,
     FIELD(redis_password_file), "FILE",
     "the Redis catalog's password (AUTH on every connection)"},
    {"redis-wait-replicas", "RESHARDD_REDIS_WAIT_REPLICAS", OPTION_NUMBER,
     FIELD(redis_wait_replicas), "N",
     "answer a Redis catalog write only once WAIT counts N replicas with it, "
     "else UNAVAILABLE (default 0: no WAIT)"},
    {"cache-bytes", "RESHARDD_CACHE_BYTES", OPTION_SIZE, FIELD(cache_bytes),
     "SIZE", "in-memory cache budget (default 256M)"},
    {"log-level", "RESHARDD_LOG_LEVEL", OPTION_LOG_LEVEL, FIELD(log_level),
     "LEVEL", "debug | info | warn | error (default info)"},
    {"metrics-listen", "RESHARDD_METRICS_LISTEN", OPTION_METRICS,
     FIELD(metrics_listen), "ADDR",
     "Prometheus metrics address HOST:PORT (default: disabled)"},
    {"drain-timeout", "RESHARDD_DRAIN_TIMEOUT", OPTION_DURATION,
     FIELD(drain_timeout_ms), "DURATION",
     "how long in-flight calls may run after SIGTERM (default 20s)"},
    {"max-request-bytes", "RESHARDD_MAX_REQUEST_BYTES", OPTION_SIZE,
     FIELD(max_request_bytes), "SIZE",
     "largest request message accepted (default 16M)"},
    {"inline-plan-max-values", "RESHARDD_INLINE_PLAN_MAX_VALUES", OPTION_NUMBER,
     FIELD(inline_plan_max_values), "N",
     "plan PlanLoads binding at most N (token, head) values on the loop "
     "instead of the thread pool, and a lone call's up to 4M (default "
     "4096; 0: always the pool)"},
    {"max-inflight-bytes", "RESHARDD_MAX_INFLIGHT_BYTES", OPTION_SIZE,
     FIELD(max_inflight_bytes), "SIZE",
     "memory calls in flight may hold; others wait (default 1G)"},
    {"default-deadline", "RESHARDD_DEFAULT_DEADLINE", OPTION_DURATION,
     FIELD(default_deadline_ms), "DURATION",
     "deadline of calls sent without one (default 60s; 0: none)"},
    {"max-concurrent-streams", "RESHARDD_MAX_CONCURRENT_STREAMS", OPTION_COUNT,
     FIELD(max_concurrent_streams), "N",
     "concurrent calls per connection (default 100)"},
    {"keepalive-time", "RESHARDD_KEEPALIVE_TIME", OPTION_DURATION,
     FIELD(keepalive_time_ms), "DURATION",
     "ping a connection quiet this long (default 60s)"},
    {"keepalive-timeout", "RESHARDD_KEEPALIVE_TIMEOUT", OPTION_DURATION,
     FIELD(keepalive_timeout_ms), "DURATION",
     "close a connection whose ping goes unanswered this long "
     "(default 20s)"},
    {"max-connection-idle", "RESHARDD_MAX_CONNECTION_IDLE", OPTION_DURATION,
     FIELD(max_connection_idle_ms), "DURATION",
     "close a connection without calls after this long (default 5m)"},
    {"max-layout-parts", "RESHARDD_MAX_LAYOUT_PARTS", OPTION_COUNT,
     LIMIT(max_layout_parts), "N", "parts per layout (default 100000)"},
    {"max-layout-fragments", "RESHARDD_MAX_LAYOUT_FRAGMENTS", OPTION_COUNT,
     LIMIT(max_layout_fragments), "N", "fragments per layout (default 100000)"},
    {"max-layout-bytes", "RESHARDD_MAX_LAYOUT_BYTES", OPTION_SIZE,
     LIMIT(max_layout_bytes), "SIZE", "bytes per layout page (default 1T)"},
    {"max-ranges", "RESHARDD_MAX_RANGES", OPTION_COUNT, LIMIT(max_ranges), "N",
     "binding ranges per request (default 100000)"},
    {"max-operations", "RESHARDD_MAX_OPERATIONS", OPTION_COUNT,
     LIMIT(max_operations), "N", "copies per plan (default 1000000)"},
    {"max-bytes", "RESHARDD_MAX_BYTES", OPTION_SIZE, LIMIT(max_bytes), "SIZE",
     "bytes per plan (default 1T)"},
    {"max-batch-operations", "RESHARDD_MAX_BATCH_OPERATIONS", OPTION_COUNT,
     LIMIT(max_batch_operations), "N", "copies per batch (default 4096)"},
    {"max-batch-bytes", "RESHARDD_MAX_BATCH_BYTES", OPTION_SIZE,
     LIMIT(max_batch_bytes), "SIZE", "bytes per batch (default 64M)"},
    {"max-validation-work", "RESHARDD_MAX_VALIDATION_WORK", OPTION_COUNT,
     LIMIT(max_validation_work), "N",
     "binding validation work units (default 10000000)"},
    {"max-page-keys", "RESHARDD_MAX_PAGE_KEYS", OPTION_COUNT,
     LIMIT(max_page_keys), "N", "page keys per request (default 65536)"},
    {"max-block-ids", "RESHARDD_MAX_BLOCK_IDS", OPTION_COUNT,
     LIMIT(max_block_ids), "N", "block ids per block table (default 1048576)"},
    {"max-pool-tensors", "RESHARDD_MAX_POOL_TENSORS", OPTION_COUNT,
     LIMIT(max_pool_tensors), "N", "tensors per memory pool (default 100000)"},
};

#define OPTION_COUNT_ALL (sizeof options / sizeof options[0])

bool reshard_parse_size(const char *text, uint64_t *out) {
  if (text == NULL || !isdigit((unsigned char)text[0])) {
    return false;
  }
  errno = 0;
  char *end;
  unsigned long long value = strtoull(text, &end, 10);
  if (errno != 0) {
    return false;
  }
  unsigned shift = 0;
  if (*end != '\0') {
    switch (toupper((unsigned char)*end)) {
    case 'K':
      shift = 10;
      break;
    case 'M':
      shift = 20;
      break;
    case 'G':
      shift = 30;
      break;
    case 'T':
      shift = 40;
      break;
    case 'B':
      break;
    default:
      return false;
    }
    if (shift != 0) {
      end++;
    }
    if (strcasecmp(end, "") != 0 && strcasecmp(end, "B") != 0 &&
        (shift == 0 || strcasecmp(end, "iB") != 0)) {
      return false;
    }
  }
  if (shift != 0 && value > (UINT64_MAX >> shift)) {
    return false;
  }
  *out = (uint64_t)value << shift;
  return true;
}

bool reshard_parse_duration_ms(const char *text, uint64_t *out) {
  if (text == NULL || !isdigit((unsigned char)text[0])) {
    return false;
  }
  errno = 0;
  char *end;
  unsigned long long value = strtoull(text, &end, 10);
  if (errno != 0) {
    return false;
  }
  uint64_t scale;
  if (*end == '\0' || strcmp(end, "s") == 0) {
    scale = 1000;
  } else if (strcmp(end, "ms") == 0) {
    scale = 1;
  } else if (strcmp(end, "m") == 0) {
    scale = 60 * 1000;
  } else if (strcmp(end, "h") == 0) {
    scale = 3600 * 1000;
  } else {
    return false;
  }
  uint64_t ms;
  if (__builtin_mul_overflow((uint64_t)value, scale, &ms)) {
    return false;
  }
  *out = ms;
  return true;
}

static bool parse_port(const char *text) {
  if (*text == '\0' || strlen(text) > 5) {
    return false;
  }
  unsigned long port = 0;
  for (const char *p = text; *p; p++) {
    if (!isdigit((unsigned char)*p)) {
      return false;
    }
    port = port * 10 + (unsigned long)(*p - '0');
  }
  return port <= 65535;
}

bool reshard_parse_listen(const char *text, bool allow_unix) {
  if (text == NULL) {
    return false;
  }
  if (strncmp(text, "unix:", 5) == 0) {
    return allow_unix && text[5] != '\0';
  }
  const char *colon;
  if (text[0] == '[') {
    const char *close = strchr(text, ']');
    if (close == NULL || close == text + 1 || close[1] != ':') {
      return false;
    }
    colon = close + 1;
  } else {
    colon = strrchr(text, ':');
    if (colon == NULL || colon == text) {
      return false;
    }
    for (const char *p = text; p < colon; p++) {
      if (*p == ':' || isspace((unsigned char)*p) || *p == '/') {
        return false;
      }
    }
  }
  return parse_port(colon + 1);
}

/* "redis://HOST:PORT[/DB]" without credentials, DB a decimal number. */
static bool redis_address_valid(const char *text) {
  const char *hostport = text + 8;
  const char *slash = strchr(hostport, '/');
  size_t length = slash ? (size_t)(slash - hostport) : strlen(hostport);
  char buffer[256];
  if (length == 0 || length >= sizeof buffer) {
    return false;
  }
  memcpy(buffer, hostport, length);
  buffer[length] = '\0';
  if (!reshard_parse_listen(buffer, false)) {
    return false;
  }
  if (slash != NULL) {
    const char *db = slash + 1;
    if (*db == '\0' || strlen(db) > 9) {
      return false;
    }
    for (; *db; db++) {
      if (!isdigit((unsigned char)*db)) {
        return false;
      }
    }
  }
  return true;
}

/* "redis-cluster://HOST:PORT[,HOST:PORT...]" without credentials. */
static bool redis_cluster_address_valid(const char *text) {
  const char *p = text + 16;
  if (*p == '\0') {
    return false;
  }
  while (true) {
    const char *comma = strchr(p, ',');
    size_t length = comma ? (size_t)(comma - p) : strlen(p);
    char buffer[256];
    if (length == 0 || length >= sizeof buffer) {
      return false;
    }
    memcpy(buffer, p, length);
    buffer[length] = '\0';
    const char *colon = strrchr(buffer, ':');
    if (strchr(buffer, '/') != NULL || !reshard_parse_listen(buffer, false) ||
        colon == NULL || strcmp(colon, ":0") == 0) {
      return false;
    }
    if (comma == NULL) {
      return true;
    }
    p = comma + 1;
  }
}

static bool catalog_is_redis(const char *text) {
  return strncmp(text, "redis://", 8) == 0 ||
         strncmp(text, "redis-cluster://", 16) == 0;
}

bool reshard_parse_catalog(const char *text) {
  if (text == NULL) {
    return false;
  }
  if (strncmp(text, "redis-cluster://", 16) == 0) {
    reshard_redis_url url;
    bool valid = reshard_redis_url_split(text, &url) &&
                 redis_cluster_address_valid(url.address);
    reshard_redis_url_wipe(&url);
    return valid;
  }
  if (strcmp(text, "memory") == 0) {
    return true;
  }
  if (strncmp(text, "lmdb:", 5) == 0) {
    return text[5] != '\0';
  }
  if (strncmp(text, "redis://", 8) == 0) {
    reshard_redis_url url;
    bool valid =
        reshard_redis_url_split(text, &url) && redis_address_valid(url.address);
    reshard_redis_url_wipe(&url);
    return valid;
  }
  return false;
}

bool reshard_listen_is_local(const char *text) {
  if (strncmp(text, "unix:", 5) == 0) {
    return true;
  }
  char host[256];
  const char *start = text, *end = strrchr(text, ':');
  if (text[0] == '[') {
    start = text + 1;
    end = strchr(text, ']');
  }
  if (end == NULL || (size_t)(end - start) >= sizeof host) {
    return false;
  }
  memcpy(host, start, (size_t)(end - start));
  host[end - start] = '\0';
  if (strcasecmp(host, "localhost") == 0) {
    return true;
  }
  struct in_addr v4;
  if (inet_pton(AF_INET, host, &v4) == 1) {
    return (ntohl(v4.s_addr) >> 24) == 127;
  }
  struct in6_addr v6;
  if (inet_pton(AF_INET6, host, &v6) == 1) {
    return IN6_IS_ADDR_LOOPBACK(&v6) ||
           (IN6_IS_ADDR_V4MAPPED(&v6) && v6.s6_addr[12] == 127);
  }
  return false;
}

static bool parse_count(const char *text, uint64_t *out) {
  if (text == NULL || !isdigit((unsigned char)text[0])) {
    return false;
  }
  errno = 0;
  char *end;
  unsigned long long value = strtoull(text, &end, 10);
  if (errno != 0 || *end != '\0') {
    return false;
  }
  *out = value;
  return true;
}

/* Applies `value` to the option; `source` names where it came from for the
 * message ("--cache-bytes" or "RESHARDD_CACHE_BYTES"). */
static reshard_status apply(reshard_config *config, const option *opt,
                            const char *value, const char *source,
                            reshard_error *err) {
  char *field = (char *)config + opt->offset;
  uint64_t number = 0;
  switch (opt->kind) {
  case OPTION_LISTEN:
    if (!reshard_parse_listen(value, true)) {
      return reshard_error_set(
          err, RESHARD_INVALID_ARGUMENT,
          "%s: \"%s\" is not a listen address (HOST:PORT, [IPV6]:PORT or "
          "unix:PATH, port 0..65535)",
          source, value);
    }
    *(const char **)field = value;
    return RESHARD_OK;
  case OPTION_METRICS:
    if (value[0] == '\0') {
      *(const char **)field = NULL;
      return RESHARD_OK;
    }
    if (!reshard_parse_listen(value, false)) {
      return reshard_error_set(
          err, RESHARD_INVALID_ARGUMENT,
          "%s: \"%s\" is not a listen address (HOST:PORT or [IPV6]:PORT, "
          "port 0..65535)",
          source, value);
    }
    *(const char **)field = value;
    return RESHARD_OK;
  case OPTION_CATALOG:
    if (!reshard_parse_catalog(value)) {
      if (strchr(value, '@') != NULL) {
        /* Never echo what may be a password. */
        return reshard_error_set(
            err, RESHARD_INVALID_ARGUMENT,
            "%s: not a catalog (redis://[[USER]:PASSWORD@]HOST:PORT[/DB] or "
            "redis-cluster://[[USER]:PASSWORD@]HOST:PORT[,HOST:PORT...]; "
            "the value is not shown, it holds credentials)",
            source);
      }
      return reshard_error_set(
          err, RESHARD_INVALID_ARGUMENT,
          "%s: \"%s\" is not a catalog (memory, lmdb:PATH, "
          "redis://[[USER]:PASSWORD@]HOST:PORT[/DB] or "
          "redis-cluster://[[USER]:PASSWORD@]HOST:PORT[,HOST:PORT...])",
          source, value);
    }
    *(const char **)field = value;
    return RESHARD_OK;
  case OPTION_SIZE:
    if (!reshard_parse_size(value, &number)) {
      return reshard_error_set(err, RESHARD_INVALID_ARGUMENT,
                               "%s: \"%s\" is not a size (an integer with an "
                               "optional K, M, G or T suffix)",
                               source, value);
    }
    if (number == 0) {
      return reshard_error_set(err, RESHARD_INVALID_ARGUMENT,
                               "%s: must be at least 1", source);
    }
    *(uint64_t *)field = number;
    return RESHARD_OK;
  case OPTION_COUNT:
  case OPTION_NUMBER:
    if (!parse_count(value, &number)) {
      return reshard_error_set(err, RESHARD_INVALID_ARGUMENT,
                               "%s: \"%s\" is not a non-negative integer",
                               source, value);
    }
    if (number == 0 && opt->kind == OPTION_COUNT) {
      return reshard_error_set(err, RESHARD_INVALID_ARGUMENT,
                               "%s: must be at least 1", source);
    }
    *(uint64_t *)field = number;
    return RESHARD_OK;
  case OPTION_DURATION:
    if (!reshard_parse_duration_ms(value, &number)) {
      return reshard_error_set(err, RESHARD_INVALID_ARGUMENT,
                               "%s: \"%s\" is not a duration (e.g. 500ms, "
                               "30s, 2m; a bare number is seconds)",
                               source, value);
    }
    *(uint64_t *)field = number;
    return RESHARD_OK;
  case OPTION_PATH:
    if (value[0] == '\0') {
      return reshard_error_set(err, RESHARD_INVALID_ARGUMENT,
                               "%s: needs a file name", source);
    }
    *(const char **)field = value;
    return RESHARD_OK;
  case OPTION_SWITCH:
    if (strcasecmp(value, "true") == 0 || strcmp(value, "1") == 0 ||
        strcasecmp(value, "yes") == 0) {
      *(bool *)field = true;
    } else if (strcasecmp(value, "false") == 0 || strcmp(value, "0") == 0 ||
               strcasecmp(value, "no") == 0) {
      *(bool *)field = false;
    } else {
      return reshard_error_set(err, RESHARD_INVALID_ARGUMENT,
                               "%s: \"%s\" is not true or false", source,
                               value);
    }
    return RESHARD_OK;
  case OPTION_LOG_LEVEL: {
    reshard_log_level level;
    if (!reshard_log_level_parse(value, &level)) {
      return reshard_error_set(
          err, RESHARD_INVALID_ARGUMENT,
          "%s: \"%s\" is not a log level (debug, info, warn or error)", source,
          value);
    }
    *(reshard_log_level *)field = level;
    return RESHARD_OK;
  }
  }
  return reshard_error_set(err, RESHARD_INTERNAL, "%s: unknown option kind",
                           source);
}

/* SPEC §3.5: TLS needs both halves; plaintext stays on this machine unless
 * the operator says otherwise (like Redis' protected mode); a password
 * file needs a Redis catalog without a password of its own. */
static reshard_status check_security(const reshard_config *config,
                                     reshard_error *err) {
  if ((config->tls_cert == NULL) != (config->tls_key == NULL)) {
    return reshard_error_set(err, RESHARD_INVALID_ARGUMENT,
                             "--tls-cert and --tls-key: give both or neither");
  }
  if (config->tls_client_ca != NULL && config->tls_cert == NULL) {
    return reshard_error_set(err, RESHARD_INVALID_ARGUMENT,
                             "--tls-client-ca: needs --tls-cert and "
                             "--tls-key (mutual TLS is TLS first)");
  }
  if (config->tls_cert == NULL && !config->allow_insecure_remote &&
      !reshard_listen_is_local(config->listen)) {
    return reshard_error_set(
        err, RESHARD_INVALID_ARGUMENT,
        "--listen %s: plaintext gRPC on a non-loopback address; serve TLS "
        "with --tls-cert and --tls-key, listen on loopback or unix:, or "
        "accept the exposure with --allow-insecure-remote",
        config->listen);
  }
  if (config->metrics_listen != NULL && !config->allow_insecure_remote &&
      !reshard_listen_is_local(config->metrics_listen)) {
    return reshard_error_set(
        err, RESHARD_INVALID_ARGUMENT,
        "--metrics-listen %s: metrics are plaintext HTTP (--tls-cert covers "
        "gRPC only); listen on loopback or accept the exposure with "
        "--allow-insecure-remote",
        config->metrics_listen);
  }
  if (config->redis_wait_replicas > 0 && !catalog_is_redis(config->catalog)) {
    return reshard_error_set(err, RESHARD_INVALID_ARGUMENT,
                             "--redis-wait-replicas: needs a redis:// or "
                             "redis-cluster:// --catalog");
  }
  if (config->redis_wait_replicas > RESHARD_MAX_REDIS_WAIT_REPLICAS) {
    return reshard_error_set(err, RESHARD_INVALID_ARGUMENT,
                             "--redis-wait-replicas: %llu is above %d",
                             (unsigned long long)config->redis_wait_replicas,
                             RESHARD_MAX_REDIS_WAIT_REPLICAS);
  }
  if (config->redis_password_file != NULL) {
    reshard_redis_url url;
    bool redis = catalog_is_redis(config->catalog);
    bool has_password = redis &&
                        reshard_redis_url_split(config->catalog, &url) &&
                        url.password[0] != '\0';
    if (redis) {
      reshard_redis_url_wipe(&url);
    }
    if (!redis || has_password) {
      return reshard_error_set(
          err, RESHARD_INVALID_ARGUMENT, "--redis-password-file: %s",
          redis ? "the --catalog URL has a password already; give one of them"
                : "needs a redis:// or redis-cluster:// --catalog");
    }
  }
  return RESHARD_OK;
}

static const option *find_flag(const char *name, size_t length) {
  for (size_t i = 0; i < OPTION_COUNT_ALL; i++) {
    if (strlen(options[i].flag) == length &&
        strncmp(options[i].flag, name, length) == 0) {
      return &options[i];
    }
  }
  return NULL;
}

reshard_status reshard_config_parse(reshard_config *config, int argc,
                                    char *const *argv,
                                    reshard_getenv_fn getenv_fn,
                                    void *getenv_data, reshard_error *err) {
  memset(config, 0, sizeof *config);
  config->listen = RESHARD_DEFAULT_LISTEN;
  config->catalog = RESHARD_DEFAULT_CATALOG;
  config->cache_bytes = RESHARD_DEFAULT_CACHE_BYTES;
  config->log_level = RESHARD_LOG_INFO;
  config->metrics_listen = NULL;
  config->drain_timeout_ms = RESHARD_DEFAULT_DRAIN_TIMEOUT_MS;
  config->max_request_bytes = RESHARD_DEFAULT_MAX_REQUEST_BYTES;
  config->inline_plan_max_values = RESHARD_DEFAULT_INLINE_PLAN_MAX_VALUES;
  config->max_inflight_bytes = RESHARD_DEFAULT_MAX_INFLIGHT_BYTES;
  config->default_deadline_ms = RESHARD_DEFAULT_DEADLINE_MS;
  config->max_concurrent_streams = RESHARD_DEFAULT_MAX_CONCURRENT_STREAMS;
  config->keepalive_time_ms = RESHARD_DEFAULT_KEEPALIVE_TIME_MS;
  config->keepalive_timeout_ms = RESHARD_DEFAULT_KEEPALIVE_TIMEOUT_MS;
  config->max_connection_idle_ms = RESHARD_DEFAULT_MAX_CONNECTION_IDLE_MS;
  config->limits = reshard_limits_default();

  if (getenv_fn != NULL) {
    for (size_t i = 0; i < OPTION_COUNT_ALL; i++) {
      const char *value = getenv_fn(options[i].env, getenv_data);
      if (value != NULL) {
        reshard_status status =
            apply(config, &options[i], value, options[i].env, err);
        if (status != RESHARD_OK) {
          return status;
        }
      }
    }
  }

  for (int i = 1; i < argc; i++) {
    const char *arg = argv[i];
    if (strcmp(arg, "--help") == 0 || strcmp(arg, "-h") == 0) {
      config->help = true;
      return RESHARD_OK;
    }
    if (strcmp(arg, "--version") == 0) {
      config->version = true;
      return RESHARD_OK;
    }
    if (strcmp(arg, "--check-config") == 0) {
      config->check_config = true;
      continue;
    }
    if (strncmp(arg, "--", 2) != 0 || arg[2] == '\0') {
      return reshard_error_set(err, RESHARD_INVALID_ARGUMENT,
                               "unexpected argument \"%s\"", arg);
    }
    const char *name = arg + 2;
    const char *equals = strchr(name, '=');
    size_t length = equals ? (size_t)(equals - name) : strlen(name);
    const option *opt = find_flag(name, length);
    if (opt == NULL) {
      return reshard_error_set(err, RESHARD_INVALID_ARGUMENT,
                               "unknown flag --%.*s", (int)length, name);
    }
    const char *value;
    if (equals != NULL) {
      value = equals + 1;
    } else if (opt->kind == OPTION_SWITCH) {
      value = "true";
    } else if (i + 1 < argc) {
      value = argv[++i];
    } else {
      return reshard_error_set(err, RESHARD_INVALID_ARGUMENT,
                               "--%s: needs a value (%s)", opt->flag,
                               opt->value_name);
    }
    char source[64];
    snprintf(source, sizeof source, "--%s", opt->flag);
    reshard_status status = apply(config, opt, value, source, err);
    if (status != RESHARD_OK) {
      return status;
    }
  }

  /* Cross-field rules. */
  if (config->limits.max_batch_operations > config->limits.max_operations) {
    config->limits.max_batch_operations = config->limits.max_operations;
  }
  if (config->keepalive_time_ms == 0 || config->keepalive_timeout_ms == 0 ||
      config->max_connection_idle_ms == 0) {
    return reshard_error_set(err, RESHARD_INVALID_ARGUMENT,
                             "--keepalive-time, --keepalive-timeout and "
                             "--max-connection-idle: must be at least 1ms");
  }
  if (config->max_concurrent_streams > INT32_MAX) {
    return reshard_error_set(err, RESHARD_INVALID_ARGUMENT,
                             "--max-concurrent-streams: %" PRIu64
                             " exceeds 2147483647",
                             config->max_concurrent_streams);
  }
  if (config->max_request_bytes > INT32_MAX) {
    return reshard_error_set(err, RESHARD_INVALID_ARGUMENT,
                             "--max-request-bytes: %" PRIu64
                             " exceeds gRPC's message limit of 2G - 1",
                             config->max_request_bytes);
  }
  return check_security(config, err);
}

void reshard_config_usage(FILE *out) {
  fputs("Usage: reshardd [FLAGS]\n"
        "\n"
        "The KV-cache resharding planner daemon. Every flag also reads from\n"
        "the environment variable shown; flags win over the environment.\n"
        "\n",
        out);
  for (size_t i = 0; i < OPTION_COUNT_ALL; i++) {
    char left[64];
    snprintf(left, sizeof left, "--%s %s", options[i].flag,
             options[i].value_name);
    fprintf(out, "  %-32s %s\n  %-32s [%s]\n", left, options[i].help, "",
            options[i].env);
  }
  fputs(
      "  --check-config                   validate flags and environment,\n"
      "                                   print the effective configuration,\n"
      "                                   exit 0 (valid) or 2; binds nothing\n"
      "  --help                           show this text\n"
      "  --version                        print the version\n"
      "\n"
      "Sizes take K, M, G or T (binary) suffixes; durations take ms, s, m\n"
      "or h. Exit status: 0 after a clean shutdown (SIGTERM/SIGINT), 1 on\n"
      "a runtime failure, 2 on bad configuration.\n",
      out);
}

/* The catalog with any password replaced by "***". */
static void print_catalog(const char *catalog, FILE *out) {
  reshard_redis_url url;
  if (!catalog_is_redis(catalog) || !reshard_redis_url_split(catalog, &url)) {
    fputs(catalog, out);
    return;
  }
  if (url.password[0] != '\0') {
    size_t scheme = strncmp(catalog, "redis://", 8) == 0 ? 8 : 16;
    fprintf(out, "%.*s%s:***@%s", (int)scheme, catalog, url.user,
            url.address + scheme);
  } else {
    fputs(url.address, out);
  }
  reshard_redis_url_wipe(&url);
}

void reshard_config_print(const reshard_config *config, FILE *out) {
  for (size_t i = 0; i < OPTION_COUNT_ALL; i++) {
    const option *opt = &options[i];
    const char *field = (const char *)config + opt->offset;
    fprintf(out, "%s=", opt->flag);
    switch (opt->kind) {
    case OPTION_CATALOG:
      print_catalog(*(const char *const *)field, out);
      break;
    case OPTION_LISTEN:
    case OPTION_METRICS:
    case OPTION_PATH: {
      const char *value = *(const char *const *)field;
      fputs(value != NULL ? value : "", out);
      break;
    }
    case OPTION_SWITCH:
      fputs(*(const bool *)field ? "true" : "false", out);
      break;
    case OPTION_SIZE:
    case OPTION_COUNT:
    case OPTION_NUMBER:
      fprintf(out, "%" PRIu64, *(const uint64_t *)field);
      break;
    case OPTION_DURATION:
      fprintf(out, "%" PRIu64 "ms", *(const uint64_t *)field);
      break;
    case OPTION_LOG_LEVEL:
      fputs(reshard_log_level_name(*(const reshard_log_level *)field), out);
      break;
    }
    fputc('\n', out);
  }
}
