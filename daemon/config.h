/* The daemon's configuration: command-line flags with environment-variable
 * equivalents, parsed and validated before anything starts. Pure: no I/O
 * besides reading the environment through the caller's function. */
#ifndef RESHARD_CONFIG_H
#define RESHARD_CONFIG_H

#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>

#include "observe/log.h"
#include "reshard/error.h"
#include "reshard/limits.h"

#define RESHARD_DEFAULT_LISTEN "127.0.0.1:50051"
/* The durable embedded catalog, relative to the working directory (SPEC
 * §3.2, docs/catalog.md). */
#define RESHARD_DEFAULT_CATALOG "lmdb:./reshardd-data"
#define RESHARD_DEFAULT_CACHE_BYTES (256ull << 20)
#define RESHARD_DEFAULT_DRAIN_TIMEOUT_MS 20000ull
/* A call reads its request only once room for the largest one (four
 * times this: gRPC's buffer, our copy, the decoded form) is free under
 * --max-inflight-bytes; 16 MiB leaves 15 concurrent reads in the default
 * 1 GiB (measured: at 64 MiB, 3 reads at once cost S1-8 PlanLoad 15 % of
 * its throughput) and holds any request the default caps admit in
 * practice (65 536 page keys of 200 bytes and 100 000 ranges). */
#define RESHARD_DEFAULT_MAX_REQUEST_BYTES (16ull << 20)
/* PlanLoads whose binding covers at most this many (token, head) values are
 * planned on the loop thread; see docs/daemon.md for the measurement. */
#define RESHARD_DEFAULT_INLINE_PLAN_MAX_VALUES 4096ull
/* Resource bounds of SPEC §3.5; docs/security.md says why each. */
#define RESHARD_DEFAULT_MAX_INFLIGHT_BYTES (1ull << 30)
#define RESHARD_DEFAULT_DEADLINE_MS 60000ull
#define RESHARD_DEFAULT_MAX_CONCURRENT_STREAMS 100ull
#define RESHARD_DEFAULT_KEEPALIVE_TIME_MS 60000ull
#define RESHARD_DEFAULT_KEEPALIVE_TIMEOUT_MS 20000ull
#define RESHARD_DEFAULT_MAX_CONNECTION_IDLE_MS 300000ull
/* --redis-wait-replicas above this is a typo, not a topology. */
#define RESHARD_MAX_REDIS_WAIT_REPLICAS 64

/* Strings point into argv or the environment (or are static defaults); the
 * struct owns nothing. */
typedef struct reshard_config {
  const char *listen;
  const char *catalog;
  uint64_t cache_bytes;
  reshard_log_level log_level;
  const char *metrics_listen; /* NULL: metrics disabled */
  uint64_t drain_timeout_ms;
  uint64_t max_request_bytes;
  uint64_t inline_plan_max_values; /* 0: every plan on the thread pool */
  uint64_t max_inflight_bytes;
  uint64_t default_deadline_ms; /* 0: calls without a deadline keep none */
  uint64_t max_concurrent_streams;
  uint64_t keepalive_time_ms;
  uint64_t keepalive_timeout_ms;
  uint64_t max_connection_idle_ms;
  reshard_limits limits; /* server caps of SPEC §2.3 */
  /* SPEC §3.5: TLS files (NULL: plaintext), and whether plaintext may
   * listen beyond loopback. */
  const char *tls_cert;
  const char *tls_key;
  const char *tls_client_ca; /* NULL: no client certificates asked for */
  bool allow_insecure_remote;
  const char *redis_password_file; /* NULL: the URL's password, if any */
  uint64_t redis_wait_replicas;    /* 0: Redis writes do not WAIT */
  bool help;
  bool version;
  bool check_config; /* --check-config: validate, print, exit */
} reshard_config;

/* Looks up an environment variable; returns NULL when it is unset. */
typedef const char *(*reshard_getenv_fn)(const char *name, void *data);

/* Fills `config` from defaults, then the environment (through `getenv_fn`,
 * which may be NULL for none), then `argv[1..argc)`; later sources win.
 * Flags are `--name value` or `--name=value`. On a bad value or an unknown
 * flag returns INVALID_ARGUMENT with a message naming the flag (or the
 * variable) and the rule; `config` is then unspecified. `--help` and
 * `--version` set their fields and stop parsing. */
reshard_status reshard_config_parse(reshard_config *config, int argc,
                                    char *const *argv,
                                    reshard_getenv_fn getenv_fn,
                                    void *getenv_data, reshard_error *err);

/* Writes the --help text. */
void reshard_config_usage(FILE *out);

/* Writes the effective configuration, one `name=value` line per flag in
 * --help order (name without the dashes; sizes in bytes, durations in
 * milliseconds with "ms", log level by name, switches as true/false, an
 * unset address or file as an empty value, a Redis password as "***").
 * What --check-config prints. */
void reshard_config_print(const reshard_config *config, FILE *out);

/* Parsers shared with tests; each returns false on a malformed value. */
/* Sizes: a decimal integer with an optional binary suffix K, M, G or T
 * (also KiB, MiB, GiB, TiB; case-insensitive). */
bool reshard_parse_size(const char *text, uint64_t *out);
/* Durations: an integer with a unit ms, s, m or h; a bare integer is
 * seconds. Returns milliseconds. */
bool reshard_parse_duration_ms(const char *text, uint64_t *out);
/* "HOST:PORT" or "[IPV6]:PORT" with PORT in 0..65535; with allow_unix also
 * "unix:PATH" (gRPC's syntax). */
bool reshard_parse_listen(const char *text, bool allow_unix);
/* "memory", "lmdb:PATH", "redis://[[USER]:PASSWORD@]HOST:PORT[/DB]" or
 * "redis-cluster://[[USER]:PASSWORD@]HOST:PORT[,HOST:PORT...]" (port 1..). */
bool reshard_parse_catalog(const char *text);
/* True for a listen address only this machine can reach: unix:PATH, a
 * 127.0.0.0/8 or ::1 address (also IPv4-mapped), or "localhost". */
bool reshard_listen_is_local(const char *text);

#endif
