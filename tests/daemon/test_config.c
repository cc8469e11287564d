/* Tests daemon/config.c: defaults, precedence, every value parser and the
 * messages a bad configuration produces. */
#include <criterion/criterion.h>
#include <criterion/parameterized.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "config.h"

typedef struct fake_env {
  const char *names[8];
  const char *values[8];
} fake_env;

static const char *fake_getenv(const char *name, void *data) {
  const fake_env *env = data;
  for (size_t i = 0; i < 8 && env->names[i]; i++) {
    if (strcmp(env->names[i], name) == 0) {
      return env->values[i];
    }
  }
  return NULL;
}

static reshard_status parse(reshard_config *config, fake_env *env, int argc,
                            char **argv, reshard_error *err) {
  return reshard_config_parse(config, argc, argv, env ? fake_getenv : NULL, env,
                              err);
}

Test(config, defaults) {
  reshard_config config;
  reshard_error err;
  char *argv[] = {"reshardd"};
  cr_assert_eq(parse(&config, NULL, 1, argv, &err), RESHARD_OK);
  cr_assert_str_eq(config.listen, "127.0.0.1:50051");
  cr_assert_str_eq(config.catalog, "lmdb:./reshardd-data");
  cr_assert_eq(config.cache_bytes, 256ull << 20);
  cr_assert_eq(config.log_level, RESHARD_LOG_INFO);
  cr_assert_null(config.metrics_listen);
  cr_assert_eq(config.drain_timeout_ms, 20000);
  cr_assert_eq(config.max_request_bytes, 16ull << 20);
  cr_assert_eq(config.inline_plan_max_values, 4096);
  reshard_limits defaults = reshard_limits_default();
  cr_assert_eq(memcmp(&config.limits, &defaults, sizeof defaults), 0);
  cr_assert(!config.help);
}

Test(config, environment_then_flags) {
  fake_env env = {{"RESHARDD_LISTEN", "RESHARDD_CACHE_BYTES",
                   "RESHARDD_LOG_LEVEL", "RESHARDD_MAX_OPERATIONS"},
                  {"0.0.0.0:7000", "1G", "debug", "500"}};
  reshard_config config;
  reshard_error err;
  char *argv[] = {"reshardd",          "--listen",        "127.0.0.1:0",
                  "--cache-bytes=64M", "--drain-timeout", "1500ms"};
  cr_assert_eq(parse(&config, &env, 6, argv, &err), RESHARD_OK, "%s",
               err.message);
  cr_assert_str_eq(config.listen, "127.0.0.1:0");
  cr_assert_eq(config.cache_bytes, 64ull << 20);
  cr_assert_eq(config.log_level, RESHARD_LOG_DEBUG);
  cr_assert_eq(config.limits.max_operations, 500);
  cr_assert_eq(config.drain_timeout_ms, 1500);
  /* The per-batch cap never exceeds the per-plan cap. */
  cr_assert_eq(config.limits.max_batch_operations, 500);
}

Test(config, every_limit_flag) {
  reshard_config config;
  reshard_error err;
  char *argv[] = {"reshardd",
                  "--max-layout-parts=1",
                  "--max-layout-fragments=2",
                  "--max-layout-bytes=3K",
                  "--max-ranges=4",
                  "--max-operations=50",
                  "--max-bytes=6M",
                  "--max-batch-operations=7",
                  "--max-batch-bytes=8",
                  "--max-validation-work=9",
                  "--max-page-keys=10",
                  "--max-request-bytes=1M",
                  "--metrics-listen=127.0.0.1:9090",
                  "--catalog=memory",
                  "--inline-plan-max-values=0"};
  cr_assert_eq(parse(&config, NULL, 15, argv, &err), RESHARD_OK, "%s",
               err.message);
  cr_assert_eq(config.limits.max_layout_parts, 1);
  cr_assert_eq(config.limits.max_layout_fragments, 2);
  cr_assert_eq(config.limits.max_layout_bytes, 3072);
  cr_assert_eq(config.limits.max_ranges, 4);
  cr_assert_eq(config.limits.max_operations, 50);
  cr_assert_eq(config.limits.max_bytes, 6ull << 20);
  cr_assert_eq(config.limits.max_batch_operations, 7);
  cr_assert_eq(config.limits.max_batch_bytes, 8);
  cr_assert_eq(config.limits.max_validation_work, 9);
  cr_assert_eq(config.limits.max_page_keys, 10);
  cr_assert_eq(config.max_request_bytes, 1ull << 20);
  cr_assert_str_eq(config.metrics_listen, "127.0.0.1:9090");
  cr_assert_eq(config.inline_plan_max_values, 0);
}

Test(config, help_and_version) {
  reshard_config config;
  reshard_error err;
  char *help[] = {"reshardd", "--help", "--bogus"};
  cr_assert_eq(parse(&config, NULL, 3, help, &err), RESHARD_OK);
  cr_assert(config.help);
  char *version[] = {"reshardd", "--version"};
  cr_assert_eq(parse(&config, NULL, 2, version, &err), RESHARD_OK);
  cr_assert(config.version);
}

/* Parameters are copied into the test process, so they hold their text
 * instead of pointing at it. */
typedef struct bad_case {
  char argv[2][32];
  char env_name[32];
  char env_value[32];
  char message[64]; /* a substring the error must contain */
} bad_case;

ParameterizedTestParameters(config, rejects) {
  static bad_case cases[] = {
      {{"--cache-bytes", "abc"},
       "",
       "",
       "--cache-bytes: \"abc\" is not a size"},
      {{"--cache-bytes", "0"}, "", "", "--cache-bytes: must be at least 1"},
      {{"--listen", "localhost"},
       "",
       "",
       "--listen: \"localhost\" is not a listen address"},
      {{"--listen", "h:70000"}, "", "", "is not a listen address"},
      {{"--metrics-listen", "unix:/x"}, "", "", "--metrics-listen"},
      {{"--catalog", "sqlite"},
       "",
       "",
       "--catalog: \"sqlite\" is not a catalog"},
      {{"--log-level", "loud"},
       "",
       "",
       "--log-level: \"loud\" is not a log level"},
      {{"--drain-timeout", "1d"},
       "",
       "",
       "--drain-timeout: \"1d\" is not a duration"},
      {{"--max-operations", "0"},
       "",
       "",
       "--max-operations: must be at least 1"},
      {{"--max-operations", "-3"}, "", "", "--max-operations: \"-3\" is not"},
      {{"--max-request-bytes", "4G"}, "", "", "exceeds gRPC's message limit"},
      {{"--frobnicate", "1"}, "", "", "unknown flag --frobnicate"},
      {{"--listen"}, "", "", "--listen: needs a value"},
      {{"stray"}, "", "", "unexpected argument \"stray\""},
      {{""},
       "RESHARDD_CACHE_BYTES",
       "lots",
       "RESHARDD_CACHE_BYTES: \"lots\" is not a size"},
      {{""}, "RESHARDD_LOG_LEVEL", "chatty", "RESHARDD_LOG_LEVEL"},
  };
  return cr_make_param_array(bad_case, cases, sizeof cases / sizeof cases[0]);
}

ParameterizedTest(bad_case *c, config, rejects) {
  fake_env env = {{c->env_name[0] ? c->env_name : NULL}, {c->env_value}};
  char *argv[3] = {"reshardd"};
  int argc = 1;
  for (int i = 0; i < 2 && c->argv[i][0]; i++) {
    argv[argc++] = c->argv[i];
  }
  reshard_config config;
  reshard_error err;
  cr_assert_eq(parse(&config, &env, argc, argv, &err),
               RESHARD_INVALID_ARGUMENT);
  cr_assert(strstr(err.message, c->message) != NULL,
            "message \"%s\" lacks \"%s\"", err.message, c->message);
}

typedef struct size_case {
  char text[32];
  bool ok;
  uint64_t value;
} size_case;

ParameterizedTestParameters(config, sizes) {
  static size_case cases[] = {
      {"1", true, 1},
      {"4096", true, 4096},
      {"4K", true, 4096},
      {"4k", true, 4096},
      {"4KiB", true, 4096},
      {"4KB", true, 4096},
      {"64M", true, 64ull << 20},
      {"2g", true, 2ull << 30},
      {"1T", true, 1ull << 40},
      {"10B", true, 10},
      {"", false, 0},
      {"K", false, 0},
      {"-1", false, 0},
      {"1X", false, 0},
      {"1Kx", false, 0},
      {" 1", false, 0},
      {"99999999999999999999", false, 0},
      {"17179869184G", false, 0},
  };
  return cr_make_param_array(size_case, cases, sizeof cases / sizeof cases[0]);
}

ParameterizedTest(size_case *c, config, sizes) {
  uint64_t value = 0;
  cr_assert_eq(reshard_parse_size(c->text, &value), c->ok, "\"%s\"", c->text);
  if (c->ok) {
    cr_assert_eq(value, c->value, "\"%s\"", c->text);
  }
}

Test(config, durations) {
  uint64_t ms = 0;
  cr_assert(reshard_parse_duration_ms("500ms", &ms) && ms == 500);
  cr_assert(reshard_parse_duration_ms("30s", &ms) && ms == 30000);
  cr_assert(reshard_parse_duration_ms("2m", &ms) && ms == 120000);
  cr_assert(reshard_parse_duration_ms("1h", &ms) && ms == 3600000);
  cr_assert(reshard_parse_duration_ms("5", &ms) && ms == 5000);
  cr_assert(reshard_parse_duration_ms("0", &ms) && ms == 0);
  cr_assert(!reshard_parse_duration_ms("1d", &ms));
  cr_assert(!reshard_parse_duration_ms("ms", &ms));
  cr_assert(!reshard_parse_duration_ms("", &ms));
  cr_assert(!reshard_parse_duration_ms("18446744073709551615h", &ms));
}

Test(config, listen_addresses) {
  cr_assert(reshard_parse_listen("127.0.0.1:0", false));
  cr_assert(reshard_parse_listen("0.0.0.0:50051", false));
  cr_assert(reshard_parse_listen("localhost:80", false));
  cr_assert(reshard_parse_listen("[::1]:50051", false));
  cr_assert(reshard_parse_listen("[::]:0", false));
  cr_assert(reshard_parse_listen("unix:/tmp/reshardd.sock", true));
  cr_assert(!reshard_parse_listen("unix:/tmp/reshardd.sock", false));
  cr_assert(!reshard_parse_listen("unix:", true));
  cr_assert(!reshard_parse_listen("127.0.0.1", false));
  cr_assert(!reshard_parse_listen(":80", false));
  cr_assert(!reshard_parse_listen("host:", false));
  cr_assert(!reshard_parse_listen("host:65536", false));
  cr_assert(!reshard_parse_listen("host:8o", false));
  cr_assert(!reshard_parse_listen("::1:80", false));
  cr_assert(!reshard_parse_listen("[::1]80", false));
  cr_assert(!reshard_parse_listen("[]:80", false));
}

Test(config, catalogs) {
  cr_assert(reshard_parse_catalog("memory"));
  cr_assert(reshard_parse_catalog("lmdb:./reshardd-data"));
  cr_assert(reshard_parse_catalog("redis://redis:6379"));
  cr_assert(reshard_parse_catalog("redis://10.0.0.1:6379/3"));
  cr_assert(!reshard_parse_catalog("lmdb:"));
  cr_assert(!reshard_parse_catalog("redis://redis"));
  cr_assert(!reshard_parse_catalog("redis://redis:6379/"));
  cr_assert(!reshard_parse_catalog("redis://redis:6379/x"));
  cr_assert(!reshard_parse_catalog("Memory"));
  cr_assert(!reshard_parse_catalog(""));
}

Test(config, usage_lists_every_flag_and_variable) {
  char buffer[8192];
  FILE *out = fmemopen(buffer, sizeof buffer, "w");
  cr_assert_not_null(out);
  reshard_config_usage(out);
  fclose(out);
  const char *expected[] = {"--listen",         "RESHARDD_LISTEN",
                            "--catalog",        "--cache-bytes",
                            "--log-level",      "--metrics-listen",
                            "--drain-timeout",  "--max-request-bytes",
                            "--max-operations", "RESHARDD_MAX_PAGE_KEYS"};
  for (size_t i = 0; i < sizeof expected / sizeof expected[0]; i++) {
    cr_assert(strstr(buffer, expected[i]) != NULL, "usage lacks %s",
              expected[i]);
  }
}

Test(config, check_config_validates_everything_and_prints_it) {
  fake_env env = {{"RESHARDD_METRICS_LISTEN", "RESHARDD_DRAIN_TIMEOUT"},
                  {"0.0.0.0:9464", "2m"}};
  reshard_config config;
  reshard_error err;
  /* --check-config does not stop parsing: later flags are still checked. */
  char *argv[] = {"reshardd",
                  "--check-config",
                  "--listen=0.0.0.0:50051",
                  "--cache-bytes",
                  "1G",
                  "--allow-insecure-remote"};
  cr_assert_eq(parse(&config, &env, 6, argv, &err), RESHARD_OK, "%s",
               err.message);
  cr_assert(config.check_config);
  char *bad[] = {"reshardd", "--check-config", "--cache-bytes", "lots"};
  cr_assert_eq(parse(&config, NULL, 4, bad, &err), RESHARD_INVALID_ARGUMENT);
  cr_assert(strstr(err.message, "--cache-bytes") != NULL);

  cr_assert_eq(parse(&config, &env, 6, argv, &err), RESHARD_OK);
  char *text = NULL;
  size_t length = 0;
  FILE *out = open_memstream(&text, &length);
  reshard_config_print(&config, out);
  fclose(out);
  cr_assert(strstr(text, "listen=0.0.0.0:50051\n") == text, "%s", text);
  cr_assert(strstr(text, "\ncache-bytes=1073741824\n") != NULL);
  cr_assert(strstr(text, "\nmetrics-listen=0.0.0.0:9464\n") != NULL);
  cr_assert(strstr(text, "\ndrain-timeout=120000ms\n") != NULL);
  cr_assert(strstr(text, "\nlog-level=info\n") != NULL);
  cr_assert(strstr(text, "\nmax-page-keys=65536\n") != NULL);
  free(text);

  /* Metrics off: an empty value. */
  char *plain[] = {"reshardd"};
  cr_assert_eq(parse(&config, NULL, 1, plain, &err), RESHARD_OK);
  out = open_memstream(&text, &length);
  reshard_config_print(&config, out);
  fclose(out);
  cr_assert(strstr(text, "\nmetrics-listen=\n") != NULL, "%s", text);
  free(text);
}

Test(config, resource_bounds) {
  reshard_config config;
  reshard_error err;
  char *defaults[] = {"reshardd"};
  cr_assert_eq(parse(&config, NULL, 1, defaults, &err), RESHARD_OK);
  cr_assert_eq(config.max_inflight_bytes, 1ull << 30);
  cr_assert_eq(config.default_deadline_ms, 60000);
  cr_assert_eq(config.max_concurrent_streams, 100);
  cr_assert_eq(config.keepalive_time_ms, 60000);
  cr_assert_eq(config.keepalive_timeout_ms, 20000);
  cr_assert_eq(config.max_connection_idle_ms, 300000);

  char *set[] = {"reshardd",
                 "--max-inflight-bytes=64M",
                 "--default-deadline=0",
                 "--max-concurrent-streams=8",
                 "--keepalive-time=1s",
                 "--keepalive-timeout=500ms",
                 "--max-connection-idle=2m"};
  cr_assert_eq(parse(&config, NULL, 7, set, &err), RESHARD_OK, "%s",
               err.message);
  cr_assert_eq(config.max_inflight_bytes, 64ull << 20);
  cr_assert_eq(config.default_deadline_ms, 0);
  cr_assert_eq(config.max_concurrent_streams, 8);
  cr_assert_eq(config.keepalive_time_ms, 1000);
  cr_assert_eq(config.keepalive_timeout_ms, 500);
  cr_assert_eq(config.max_connection_idle_ms, 120000);

  char *zero_keepalive[] = {"reshardd", "--keepalive-time=0"};
  cr_assert_eq(parse(&config, NULL, 2, zero_keepalive, &err),
               RESHARD_INVALID_ARGUMENT);
  cr_assert(strstr(err.message, "--keepalive-time"), "%s", err.message);
  char *zero_streams[] = {"reshardd", "--max-concurrent-streams=0"};
  cr_assert_eq(parse(&config, NULL, 2, zero_streams, &err),
               RESHARD_INVALID_ARGUMENT);
}

/* SPEC §3.5: plaintext only where this machine alone can reach it. */
Test(config, plaintext_stays_on_loopback) {
  const char *local[] = {"127.0.0.1:0",      "127.8.9.10:1",
                         "[::1]:5",          "localhost:7",
                         "unix:/tmp/r.sock", "[::ffff:127.0.0.1]:9"};
  for (size_t i = 0; i < sizeof local / sizeof *local; i++) {
    cr_assert(reshard_listen_is_local(local[i]), "%s", local[i]);
  }
  const char *remote[] = {"0.0.0.0:1",   "[::]:1",
                          "10.0.0.1:1",  "example.com:1",
                          "128.0.0.1:1", "[::ffff:10.0.0.1]:1"};
  for (size_t i = 0; i < sizeof remote / sizeof *remote; i++) {
    cr_assert(!reshard_listen_is_local(remote[i]), "%s", remote[i]);
  }

  reshard_config config;
  reshard_error err;
  char *grpc[] = {"reshardd", "--listen", "0.0.0.0:50051"};
  cr_assert_eq(parse(&config, NULL, 3, grpc, &err), RESHARD_INVALID_ARGUMENT);
  cr_assert(strstr(err.message, "--tls-cert") != NULL, "%s", err.message);
  cr_assert(strstr(err.message, "--allow-insecure-remote") != NULL);
  cr_assert(strstr(err.message, "0.0.0.0:50051") != NULL);

  char *metrics[] = {"reshardd", "--metrics-listen", "0.0.0.0:9464"};
  cr_assert_eq(parse(&config, NULL, 3, metrics, &err),
               RESHARD_INVALID_ARGUMENT);
  cr_assert(strstr(err.message, "--metrics-listen") != NULL, "%s", err.message);
  cr_assert(strstr(err.message, "--tls-cert") != NULL);
  cr_assert(strstr(err.message, "--allow-insecure-remote") != NULL);

  /* TLS covers gRPC, not the metrics endpoint. */
  char *tls[] = {"reshardd", "--listen",  "0.0.0.0:1", "--tls-cert",
                 "c.pem",    "--tls-key", "k.pem",     "--metrics-listen",
                 "0.0.0.0:2"};
  cr_assert_eq(parse(&config, NULL, 7, tls, &err), RESHARD_OK, "%s",
               err.message);
  cr_assert_str_eq(config.tls_cert, "c.pem");
  cr_assert_eq(parse(&config, NULL, 9, tls, &err), RESHARD_INVALID_ARGUMENT);
  cr_assert(strstr(err.message, "--metrics-listen") != NULL);

  fake_env env = {{"RESHARDD_ALLOW_INSECURE_REMOTE"}, {"yes"}};
  cr_assert_eq(parse(&config, &env, 3, grpc, &err), RESHARD_OK, "%s",
               err.message);
  cr_assert(config.allow_insecure_remote);
  fake_env off = {{"RESHARDD_ALLOW_INSECURE_REMOTE"}, {"0"}};
  cr_assert_eq(parse(&config, &off, 3, grpc, &err), RESHARD_INVALID_ARGUMENT);
  fake_env bad = {{"RESHARDD_ALLOW_INSECURE_REMOTE"}, {"maybe"}};
  cr_assert_eq(parse(&config, &bad, 1, grpc, &err), RESHARD_INVALID_ARGUMENT);
  cr_assert(strstr(err.message, "RESHARDD_ALLOW_INSECURE_REMOTE") != NULL);
}

Test(config, tls_files_come_in_pairs) {
  reshard_config config;
  reshard_error err;
  char *cert_only[] = {"reshardd", "--tls-cert", "c.pem"};
  cr_assert_eq(parse(&config, NULL, 3, cert_only, &err),
               RESHARD_INVALID_ARGUMENT);
  cr_assert(strstr(err.message, "--tls-key") != NULL, "%s", err.message);
  char *ca_only[] = {"reshardd", "--tls-client-ca", "ca.pem"};
  cr_assert_eq(parse(&config, NULL, 3, ca_only, &err),
               RESHARD_INVALID_ARGUMENT);
  cr_assert(strstr(err.message, "--tls-client-ca") != NULL, "%s", err.message);
  char *empty[] = {"reshardd", "--tls-cert="};
  cr_assert_eq(parse(&config, NULL, 2, empty, &err), RESHARD_INVALID_ARGUMENT);
  fake_env env = {
      {"RESHARDD_TLS_CERT", "RESHARDD_TLS_KEY", "RESHARDD_TLS_CLIENT_CA"},
      {"c.pem", "k.pem", "ca.pem"}};
  char *none[] = {"reshardd"};
  cr_assert_eq(parse(&config, &env, 1, none, &err), RESHARD_OK, "%s",
               err.message);
  cr_assert_str_eq(config.tls_client_ca, "ca.pem");
}

/* SPEC §3.5: the password reaches Redis, never the output. */
Test(config, redis_password_is_never_printed) {
  reshard_config config;
  reshard_error err;
  char *url[] = {"reshardd", "--catalog", "redis://:s3cret@db:6379/2"};
  cr_assert_eq(parse(&config, NULL, 3, url, &err), RESHARD_OK, "%s",
               err.message);
  char *text = NULL;
  size_t length = 0;
  FILE *out = open_memstream(&text, &length);
  reshard_config_print(&config, out);
  fclose(out);
  cr_assert(strstr(text, "s3cret") == NULL, "%s", text);
  cr_assert(strstr(text, "\ncatalog=redis://:***@db:6379/2\n") != NULL, "%s",
            text);
  free(text);

  char *user[] = {"reshardd", "--catalog", "redis://app:p@ss@db:1"};
  cr_assert_eq(parse(&config, NULL, 3, user, &err), RESHARD_OK, "%s",
               err.message);

  /* A malformed URL with credentials: the message does not repeat it. */
  char *bad[] = {"reshardd", "--catalog", "redis://:s3cret@db"};
  cr_assert_eq(parse(&config, NULL, 3, bad, &err), RESHARD_INVALID_ARGUMENT);
  cr_assert(strstr(err.message, "s3cret") == NULL, "%s", err.message);
  cr_assert(strstr(err.message, "--catalog") != NULL);
  char *no_colon[] = {"reshardd", "--catalog", "redis://s3cret@db:1"};
  cr_assert_eq(parse(&config, NULL, 3, no_colon, &err),
               RESHARD_INVALID_ARGUMENT);
  cr_assert(strstr(err.message, "s3cret") == NULL, "%s", err.message);

  char *file[] = {"reshardd", "--catalog", "redis://db:1",
                  "--redis-password-file", "/run/secret"};
  cr_assert_eq(parse(&config, NULL, 5, file, &err), RESHARD_OK, "%s",
               err.message);
  char *both[] = {"reshardd", "--catalog", "redis://:x@db:1",
                  "--redis-password-file", "/run/secret"};
  cr_assert_eq(parse(&config, NULL, 5, both, &err), RESHARD_INVALID_ARGUMENT);
  cr_assert(strstr(err.message, "--redis-password-file") != NULL);
  char *lmdb[] = {"reshardd", "--redis-password-file", "/run/secret"};
  cr_assert_eq(parse(&config, NULL, 3, lmdb, &err), RESHARD_INVALID_ARGUMENT);
  cr_assert(strstr(err.message, "redis://") != NULL, "%s", err.message);
}
