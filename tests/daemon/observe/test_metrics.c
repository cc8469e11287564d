/* Tests daemon/metrics.c: the registry's writers and the Prometheus text
 * exposition (format 0.0.4): series names, labels, cumulative histogram
 * buckets, sums in seconds, escaping, the plan families by method
 * (PlanLoad, PlanTransfer), and that every sample line belongs to a
 * declared metric. */
#include <criterion/criterion.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cache/cache.h"
#include "observe/metrics.h"

static char *format(const reshard_metrics *m,
                    const reshard_metrics_process *process) {
  reshard_metrics_text text = {0};
  cr_assert(reshard_metrics_format(m, process, &text));
  cr_assert_not_null(text.data);
  cr_assert_eq(strlen(text.data), text.length);
  return text.data;
}

/* The value of the sample line that starts with `series` followed by a
 * space; fails the test when there is none. */
static const char *sample(const char *text, const char *series) {
  size_t n = strlen(series);
  for (const char *line = text; *line;) {
    if (strncmp(line, series, n) == 0 && line[n] == ' ') {
      return line + n + 1;
    }
    const char *end = strchr(line, '\n');
    if (end == NULL) {
      break;
    }
    line = end + 1;
  }
  cr_assert_fail("no sample %s in:\n%s", series, text);
  return NULL;
}

static uint64_t value(const char *text, const char *series) {
  return strtoull(sample(text, series), NULL, 10);
}

static void assert_value_text(const char *text, const char *series,
                              const char *expected) {
  const char *v = sample(text, series);
  size_t n = strlen(expected);
  cr_assert(strncmp(v, expected, n) == 0 && v[n] == '\n',
            "%s: expected %s, got %.20s", series, expected, v);
}

#define PLAN_LOAD_OK                                                           \
  "reshard_requests_total{service=\"reshard.v1.Planner\",method=\"PlanLoad\"," \
  "code=\"OK\"}"

Test(metrics, seconds_are_exact_decimals) {
  char out[48];
  struct {
    uint64_t us;
    const char *text;
  } cases[] = {{0, "0"},        {10, "0.00001"},        {2500, "0.0025"},
               {1000000, "1"},  {1500000, "1.5"},       {25000, "0.025"},
               {1, "0.000001"}, {20000035, "20.000035"}};
  for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
    reshard_metrics_seconds(out, sizeof out, cases[i].us);
    cr_assert_str_eq(out, cases[i].text, "%" PRIu64 " us", cases[i].us);
  }
}

Test(metrics, method_paths_map_to_known_methods_only) {
  cr_assert_eq(reshard_metrics_method_of("/reshard.v1.Planner/PlanLoad"),
               RESHARD_METRICS_METHOD_PLAN_LOAD);
  cr_assert_eq(reshard_metrics_method_of("/grpc.health.v1.Health/Watch"),
               RESHARD_METRICS_METHOD_HEALTH_WATCH);
  cr_assert_eq(reshard_metrics_method_of("/reshard.v1.Planner/Nope"),
               RESHARD_METRICS_METHOD_UNKNOWN);
  cr_assert_eq(reshard_metrics_method_of(NULL), RESHARD_METRICS_METHOD_UNKNOWN);
}

Test(metrics, fresh_registry_reports_zeros) {
  reshard_metrics *m = reshard_metrics_create("1.2.3", "lmdb");
  cr_assert_not_null(m);
  char *text = format(m, NULL);
  cr_assert(strstr(text, "reshard_build_info{version=\"1.2.3\","
                         "catalog=\"lmdb\"} 1\n") != NULL);
  cr_assert_eq(value(text, "reshard_draining"), 0);
  cr_assert_eq(value(text, PLAN_LOAD_OK), 0);
  cr_assert_eq(value(text, "reshard_calls_in_flight"), 0);
  cr_assert_eq(value(text, "reshard_plan_copies_total{method=\"PlanLoad\"}"),
               0);
  cr_assert_eq(
      value(text, "reshard_plan_copies_total{method=\"PlanTransfer\"}"), 0);
  cr_assert_eq(value(text, "reshard_plans_total{method=\"PlanTransfer\","
                           "result=\"ok\"}"),
               0);
  cr_assert_eq(value(text, "reshard_reset_flood_connections_closed_total"), 0);
  cr_assert_eq(value(text, "reshard_read_flood_connections_closed_total"), 0);
  /* No unknown-method series until one is seen; no process series
   * without process figures. */
  cr_assert_null(strstr(text, "method=\"unknown\""));
  cr_assert_null(strstr(text, "process_resident_memory_bytes"));
  free(text);
  reshard_metrics_free(m);
}

Test(metrics, calls_by_method_and_code) {
  reshard_metrics *m = reshard_metrics_create("v", "memory");
  for (int i = 0; i < 5; i++) {
    reshard_metrics_call_started(m, RESHARD_METRICS_METHOD_PLAN_LOAD);
  }
  for (int i = 0; i < 3; i++) {
    reshard_metrics_call_finished(m, RESHARD_METRICS_METHOD_PLAN_LOAD, 0, 40);
  }
  reshard_metrics_call_finished(m, RESHARD_METRICS_METHOD_PLAN_LOAD, 3, 40);
  reshard_metrics_call_started(m, RESHARD_METRICS_METHOD_UNKNOWN);
  reshard_metrics_call_finished(m, RESHARD_METRICS_METHOD_UNKNOWN, 12, 5);
  /* An out-of-range code counts as UNKNOWN; an out-of-range method as
   * the unknown method. */
  reshard_metrics_call_started(m, (reshard_metrics_method)99);
  reshard_metrics_call_finished(m, (reshard_metrics_method)99, 99, 5);
  char *text = format(m, NULL);
  cr_assert_eq(value(text, PLAN_LOAD_OK), 3);
  cr_assert_eq(value(text, "reshard_requests_total{service=\"reshard.v1."
                           "Planner\",method=\"PlanLoad\",code=\"INVALID_"
                           "ARGUMENT\"}"),
               1);
  cr_assert_eq(value(text, "reshard_requests_started_total{service=\"reshard."
                           "v1.Planner\",method=\"PlanLoad\"}"),
               5);
  cr_assert_eq(value(text, "reshard_requests_total{service=\"unknown\","
                           "method=\"unknown\",code=\"UNIMPLEMENTED\"}"),
               1);
  cr_assert_eq(value(text, "reshard_requests_total{service=\"unknown\","
                           "method=\"unknown\",code=\"UNKNOWN\"}"),
               1);
  /* Codes that never occurred are left out. */
  cr_assert_null(strstr(text, "code=\"DATA_LOSS\""));
  /* Seven calls started, six finished. */
  cr_assert_eq(value(text, "reshard_calls_in_flight"), 1);
  free(text);
  reshard_metrics_free(m);
}

Test(metrics, histogram_buckets_are_cumulative) {
  reshard_metrics *m = reshard_metrics_create("v", "memory");
  reshard_metrics_call_finished(m, RESHARD_METRICS_METHOD_GET_MANIFEST, 0, 5);
  reshard_metrics_call_finished(m, RESHARD_METRICS_METHOD_GET_MANIFEST, 0, 10);
  reshard_metrics_call_finished(m, RESHARD_METRICS_METHOD_GET_MANIFEST, 0, 30);
  reshard_metrics_call_finished(m, RESHARD_METRICS_METHOD_GET_MANIFEST, 0,
                                20000000);
  char *text = format(m, NULL);
#define GET_BUCKET(le)                                                         \
  "reshard_request_duration_seconds_bucket{service=\"reshard.v1.Planner\","    \
  "method=\"GetManifest\",le=\"" le "\"}"
  /* Upper bounds are inclusive: 10 µs falls in le="0.00001". */
  cr_assert_eq(value(text, GET_BUCKET("0.00001")), 2);
  cr_assert_eq(value(text, GET_BUCKET("0.000025")), 2);
  cr_assert_eq(value(text, GET_BUCKET("0.00005")), 3);
  cr_assert_eq(value(text, GET_BUCKET("10")), 3);
  cr_assert_eq(value(text, GET_BUCKET("+Inf")), 4);
  assert_value_text(text,
                    "reshard_request_duration_seconds_sum{service=\"reshard."
                    "v1.Planner\",method=\"GetManifest\"}",
                    "20.000045");
  cr_assert_eq(value(text, "reshard_request_duration_seconds_count{service="
                           "\"reshard.v1.Planner\",method=\"GetManifest\"}"),
               4);
#undef GET_BUCKET
  free(text);
  reshard_metrics_free(m);
}

Test(metrics, plans_catalog_cache_and_drain) {
  reshard_metrics *m = reshard_metrics_create("v", "redis");
  reshard_metrics_record_plan(m, &(reshard_metrics_plan){
                                     .ok = true,
                                     .plan_us = 120,
                                     .pages = 8,
                                     .hit_pages = 6,
                                     .copies = 100,
                                     .copies_before_coalescing = 4000,
                                     .bytes = 1 << 20,
                                     .response_bytes = 1300,
                                 });
  reshard_metrics_record_plan(m, &(reshard_metrics_plan){
                                     .ok = true,
                                     .plan_us = 5,
                                     .copies = 32,
                                     .runs_requested = true,
                                     .runs = 2,
                                     .response_bytes = 70,
                                 });
  reshard_metrics_record_plan(
      m, &(reshard_metrics_plan){.ok = false, .plan_us = 3, .copies = 55});
  reshard_metrics_catalog_done(m, RESHARD_METRICS_CATALOG_LOOKUP_PAGES, 700,
                               true);
  reshard_metrics_catalog_done(m, RESHARD_METRICS_CATALOG_GET_MANIFESTS, 9,
                               false);
  reshard_metrics_catalog_done(m, (reshard_metrics_catalog_op)42, 9, false);
  reshard_cache_stats stats;
  memset(&stats, 0, sizeof stats);
  stats.hits[RESHARD_CACHE_JOIN] = 7;
  stats.misses[RESHARD_CACHE_MANIFEST] = 2;
  stats.evictions[RESHARD_CACHE_PLACEMENT] = 1;
  stats.entries[RESHARD_CACHE_JOIN] = 3;
  stats.bytes[RESHARD_CACHE_JOIN] = 4096;
  stats.budget = 1 << 30;
  reshard_metrics_publish_cache(m, &stats);
  reshard_metrics_set_draining(m, true);
  reshard_metrics_reset_close(m, 1);
  reshard_metrics_reset_close(m, 2);
  reshard_metrics_read_flood_close(m, 2);
  char *text = format(m, NULL);
#define LOAD "{method=\"PlanLoad\"}"
  cr_assert_eq(value(text, "reshard_plans_total{method=\"PlanLoad\","
                           "result=\"ok\"}"),
               2);
  cr_assert_eq(value(text, "reshard_plans_total{method=\"PlanLoad\","
                           "result=\"error\"}"),
               1);
  cr_assert_eq(value(text, "reshard_plan_copies_total" LOAD), 132);
  cr_assert_eq(value(text, "reshard_plan_runs_requested_total" LOAD), 1);
  cr_assert_eq(value(text, "reshard_plan_runs_total" LOAD), 2);
  cr_assert_eq(value(text, "reshard_plan_response_bytes_total" LOAD), 1370);
  cr_assert_eq(value(text, "reshard_plan_copies_before_coalescing_total" LOAD),
               4000);
  cr_assert_eq(value(text, "reshard_plan_bytes_total" LOAD), 1 << 20);
  cr_assert_eq(value(text, "reshard_plan_pages_total" LOAD), 8);
  cr_assert_eq(value(text, "reshard_plan_hit_pages_total" LOAD), 6);
  cr_assert_eq(value(text, "reshard_plan_duration_seconds_count" LOAD), 3);
  assert_value_text(text, "reshard_plan_duration_seconds_sum" LOAD, "0.000128");
  cr_assert_eq(value(text, "reshard_plan_duration_seconds_bucket{method=\""
                           "PlanLoad\",le=\"0.00001\"}"),
               2);
  /* PlanLoad's plans leave PlanTransfer's series at zero. */
  cr_assert_eq(
      value(text, "reshard_plan_copies_total{method=\"PlanTransfer\"}"), 0);
  cr_assert_eq(value(text, "reshard_plan_duration_seconds_count{method=\""
                           "PlanTransfer\"}"),
               0);
#undef LOAD
  cr_assert_eq(value(text, "reshard_catalog_operation_duration_seconds_count{"
                           "operation=\"lookup_pages\"}"),
               1);
  cr_assert_eq(value(text, "reshard_catalog_operation_duration_seconds_bucket{"
                           "operation=\"lookup_pages\",le=\"0.0005\"}"),
               0);
  cr_assert_eq(value(text, "reshard_catalog_operation_duration_seconds_bucket{"
                           "operation=\"lookup_pages\",le=\"0.001\"}"),
               1);
  cr_assert_eq(
      value(text, "reshard_catalog_errors_total{operation=\"get_manifests\"}"),
      1);
  cr_assert_eq(
      value(text, "reshard_catalog_errors_total{operation=\"lookup_pages\"}"),
      0);
  cr_assert_eq(value(text, "reshard_cache_hits_total{kind=\"join\"}"), 7);
  cr_assert_eq(value(text, "reshard_cache_misses_total{kind=\"manifest\"}"), 2);
  cr_assert_eq(value(text, "reshard_cache_evictions_total{kind=\"placement\"}"),
               1);
  cr_assert_eq(value(text, "reshard_cache_entries{kind=\"join\"}"), 3);
  cr_assert_eq(value(text, "reshard_cache_bytes{kind=\"join\"}"), 4096);
  cr_assert_eq(value(text, "reshard_cache_bytes{kind=\"bindings\"}"), 0);
  cr_assert_eq(value(text, "reshard_cache_budget_bytes"), 1 << 30);
  cr_assert_eq(value(text, "reshard_draining"), 1);
  cr_assert_eq(value(text, "reshard_reset_flood_connections_closed_total"), 3);
  cr_assert_eq(value(text, "reshard_read_flood_connections_closed_total"), 2);
  free(text);
  reshard_metrics_free(m);
}

/* PlanTransfer's plans count in the same families under their own method
 * label, apart from PlanLoad's; there are no page series for them. */
Test(metrics, transfer_plans_by_method) {
  reshard_metrics *m = reshard_metrics_create("v", "memory");
  reshard_metrics_record_plan(m, &(reshard_metrics_plan){
                                     .ok = true,
                                     .plan_us = 40,
                                     .copies = 10,
                                     .bytes = 4096,
                                 });
  reshard_metrics_record_plan(m, &(reshard_metrics_plan){
                                     .method = RESHARD_METRICS_PLAN_TRANSFER,
                                     .ok = true,
                                     .plan_us = 2000,
                                     .copies = 96,
                                     .copies_before_coalescing = 768,
                                     .bytes = 1 << 16,
                                     .runs_requested = true,
                                     .runs = 12,
                                     .response_bytes = 900,
                                 });
  reshard_metrics_record_plan(m, &(reshard_metrics_plan){
                                     .method = RESHARD_METRICS_PLAN_TRANSFER,
                                     .ok = false,
                                     .plan_us = 7,
                                     .copies = 5,
                                 });
  /* A method outside the enumeration is not recorded. */
  reshard_metrics_record_plan(
      m, &(reshard_metrics_plan){.method = (reshard_metrics_plan_method)9,
                                 .ok = true,
                                 .copies = 1000});
  char *text = format(m, NULL);
#define TRANSFER "{method=\"PlanTransfer\"}"
  cr_assert_eq(value(text, "reshard_plans_total{method=\"PlanTransfer\","
                           "result=\"ok\"}"),
               1);
  cr_assert_eq(value(text, "reshard_plans_total{method=\"PlanTransfer\","
                           "result=\"error\"}"),
               1);
  cr_assert_eq(value(text, "reshard_plan_copies_total" TRANSFER), 96);
  cr_assert_eq(
      value(text, "reshard_plan_copies_before_coalescing_total" TRANSFER), 768);
  cr_assert_eq(value(text, "reshard_plan_bytes_total" TRANSFER), 1 << 16);
  cr_assert_eq(value(text, "reshard_plan_runs_requested_total" TRANSFER), 1);
  cr_assert_eq(value(text, "reshard_plan_runs_total" TRANSFER), 12);
  cr_assert_eq(value(text, "reshard_plan_response_bytes_total" TRANSFER), 900);
  cr_assert_eq(value(text, "reshard_plan_duration_seconds_count" TRANSFER), 2);
  assert_value_text(text, "reshard_plan_duration_seconds_sum" TRANSFER,
                    "0.002007");
  cr_assert_eq(value(text, "reshard_plan_duration_seconds_bucket{method=\""
                           "PlanTransfer\",le=\"0.001\"}"),
               1);
  cr_assert_eq(value(text, "reshard_plan_duration_seconds_bucket{method=\""
                           "PlanTransfer\",le=\"0.0025\"}"),
               2);
  cr_assert_null(strstr(text, "reshard_plan_pages_total" TRANSFER));
  cr_assert_null(strstr(text, "reshard_plan_hit_pages_total" TRANSFER));
#undef TRANSFER
  /* PlanLoad's (the record that names no method) stay its own. */
  cr_assert_eq(value(text, "reshard_plan_copies_total{method=\"PlanLoad\"}"),
               10);
  cr_assert_eq(value(text, "reshard_plans_total{method=\"PlanLoad\","
                           "result=\"ok\"}"),
               1);
  free(text);
  reshard_metrics_free(m);
}

/* PlanStore's plans count under method="PlanStore", apart from PlanLoad's
 * and PlanTransfer's; there are no page series for them. */
Test(metrics, store_plans_by_method) {
  reshard_metrics *m = reshard_metrics_create("v", "memory");
  reshard_metrics_record_plan(m, &(reshard_metrics_plan){
                                     .method = RESHARD_METRICS_PLAN_STORE,
                                     .ok = true,
                                     .plan_us = 300,
                                     .copies = 64,
                                     .copies_before_coalescing = 512,
                                     .bytes = 1 << 20,
                                     .response_bytes = 777,
                                 });
  char *text = format(m, NULL);
#define STORE "{method=\"PlanStore\"}"
  cr_assert_eq(
      value(text, "reshard_plans_total{method=\"PlanStore\",result=\"ok\"}"),
      1);
  cr_assert_eq(value(text, "reshard_plan_copies_total" STORE), 64);
  cr_assert_eq(value(text, "reshard_plan_copies_before_coalescing_total" STORE),
               512);
  cr_assert_eq(value(text, "reshard_plan_bytes_total" STORE), 1 << 20);
  cr_assert_eq(value(text, "reshard_plan_response_bytes_total" STORE), 777);
  cr_assert_eq(value(text, "reshard_plan_duration_seconds_count" STORE), 1);
  cr_assert_null(strstr(text, "reshard_plan_pages_total" STORE));
#undef STORE
  cr_assert_eq(value(text, "reshard_plan_copies_total{method=\"PlanLoad\"}"),
               0);
  cr_assert_eq(
      value(text, "reshard_plan_copies_total{method=\"PlanTransfer\"}"), 0);
  free(text);
  reshard_metrics_free(m);
}

Test(metrics, build_info_labels_are_escaped) {
  reshard_metrics *m = reshard_metrics_create("a\"b\\c\nd", "memory");
  char *text = format(m, NULL);
  cr_assert(strstr(text, "reshard_build_info{version=\"a\\\"b\\\\c\\nd\","
                         "catalog=\"memory\"} 1\n") != NULL,
            "%s", text);
  free(text);
  reshard_metrics_free(m);
}

Test(metrics, null_registry_writers_do_nothing) {
  reshard_metrics_call_started(NULL, RESHARD_METRICS_METHOD_PLAN_LOAD);
  reshard_metrics_call_finished(NULL, RESHARD_METRICS_METHOD_PLAN_LOAD, 0, 1);
  reshard_metrics_record_plan(NULL, &(reshard_metrics_plan){.ok = true});
  reshard_metrics_catalog_done(NULL, RESHARD_METRICS_CATALOG_ADD_PAGES, 1,
                               true);
  reshard_metrics_publish_cache(NULL, NULL);
  reshard_metrics_set_draining(NULL, true);
  reshard_metrics_reset_close(NULL, 1);
  reshard_metrics_read_flood_close(NULL, 1);
  reshard_metrics_free(NULL);
}

Test(metrics, process_series) {
  reshard_metrics *m = reshard_metrics_create("v", "memory");
  reshard_metrics_process process = {
      .valid = true,
      .resident_bytes = 123456,
      .virtual_bytes = 999999,
      .cpu_us = 2500000,
      .start_time_s = 1700000000,
      .open_fds = 12,
  };
  char *text = format(m, &process);
  cr_assert_eq(value(text, "process_resident_memory_bytes"), 123456);
  cr_assert_eq(value(text, "process_virtual_memory_bytes"), 999999);
  assert_value_text(text, "process_cpu_seconds_total", "2.5");
  cr_assert_eq(value(text, "process_start_time_seconds"), 1700000000);
  cr_assert_eq(value(text, "process_open_fds"), 12);
  free(text);
  reshard_metrics_free(m);
}

/* Every line is a HELP or TYPE comment or a sample of a metric whose TYPE
 * came before it (histogram samples end in _bucket, _sum or _count); each
 * metric is declared once; label sets are well formed. */
Test(metrics, exposition_is_well_formed) {
  reshard_metrics *m = reshard_metrics_create("v", "memory");
  reshard_metrics_call_started(m, RESHARD_METRICS_METHOD_UNKNOWN);
  reshard_metrics_call_finished(m, RESHARD_METRICS_METHOD_UNKNOWN, 12, 5);
  reshard_metrics_process process = {.valid = true, .resident_bytes = 1};
  char *text = format(m, &process);
  cr_assert_eq(text[strlen(text) - 1], '\n');
  char declared[64][96];
  char types[64][16];
  size_t count = 0;
  char *copy = strdup(text);
  for (char *line = strtok(copy, "\n"); line; line = strtok(NULL, "\n")) {
    char name[96], type[16];
    if (strncmp(line, "# HELP ", 7) == 0) {
      continue;
    }
    if (sscanf(line, "# TYPE %95s %15s", name, type) == 2) {
      for (size_t i = 0; i < count; i++) {
        cr_assert_str_neq(declared[i], name, "%s declared twice", name);
      }
      cr_assert_lt(count, 64);
      snprintf(declared[count], sizeof declared[count], "%s", name);
      snprintf(types[count], sizeof types[count], "%s", type);
      count++;
      continue;
    }
    cr_assert_neq(line[0], '#', "unexpected comment: %s", line);
    cr_assert_gt(count, 0);
    const char *metric = declared[count - 1];
    size_t n = strlen(metric);
    cr_assert(strncmp(line, metric, n) == 0, "sample %s outside its metric %s",
              line, metric);
    const char *rest = line + n;
    if (strcmp(types[count - 1], "histogram") == 0) {
      if (strncmp(rest, "_bucket", 7) == 0) {
        rest += 7;
        cr_assert(strstr(rest, "le=\"") != NULL, "%s", line);
      } else if (strncmp(rest, "_sum", 4) == 0) {
        rest += 4;
      } else {
        cr_assert(strncmp(rest, "_count", 6) == 0, "%s", line);
        rest += 6;
      }
    }
    if (*rest == '{') {
      const char *close = strchr(rest, '}');
      cr_assert_not_null(close, "%s", line);
      rest = close + 1;
    }
    cr_assert_eq(*rest, ' ', "%s", line);
    char *end;
    strtod(rest + 1, &end);
    cr_assert(end != rest + 1 && *end == '\0', "bad value in %s", line);
  }
  free(copy);
  free(text);
  reshard_metrics_free(m);
}
