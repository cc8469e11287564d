/* Plans the SPEC §6 scenarios and prints, per scenario, copies before and
 * after coalescing, bytes, median and p99 plan time with and without a
 * cached join template, and peak memory. Figures only; nothing asserts. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <time.h>

#include "reshard/join.h"
#include "scenario.h"

static double now_ns(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec * 1e9 + (double)ts.tv_nsec;
}

static int compare_double(const void *a, const void *b) {
  double x = *(const double *)a, y = *(const double *)b;
  return (x > y) - (x < y);
}

typedef struct timing {
  double median_ns;
  double p99_ns;
  size_t peak_bytes;
} timing;

/* Runs the plan `runs` times, each in a fresh arena as the daemon does. */
static int time_plans(scenario *s, const reshard_join *template_join, int runs,
                      timing *out, reshard_load_plan *last) {
  double *samples = malloc(sizeof(double) * (size_t)runs);
  if (samples == NULL) {
    return -1;
  }
  s->source.join = template_join;
  out->peak_bytes = 0;
  for (int r = 0; r < runs; r++) {
    reshard_arena arena;
    reshard_arena_init(&arena, 0);
    reshard_error err;
    reshard_load_plan plan;
    double start = now_ns();
    reshard_status status = reshard_plan_load(&s->request, &arena, &plan, &err);
    samples[r] = now_ns() - start;
    if (status) {
      fprintf(stderr, "plan failed: %s: %s\n", reshard_status_name(status),
              err.message);
      free(samples);
      reshard_arena_destroy(&arena);
      return -1;
    }
    size_t bytes = arena.total_bytes;
    if (plan.built_joins[0] != NULL) {
      bytes += plan.built_joins[0]->memory_bytes;
    }
    if (bytes > out->peak_bytes) {
      out->peak_bytes = bytes;
    }
    if (r == runs - 1) {
      *last = plan;
      last->copies = NULL;
      last->batches = NULL;
      last->page_source = NULL;
      last->built_joins = NULL;
    }
    reshard_load_plan_free_joins(&plan, 1);
    reshard_arena_destroy(&arena);
  }
  qsort(samples, (size_t)runs, sizeof *samples, compare_double);
  out->median_ns = samples[runs / 2];
  out->p99_ns = samples[(size_t)((double)runs * 0.99)];
  free(samples);
  return 0;
}

int main(int argc, char **argv) {
  /* reshard-bench [RUNS [SCENARIO]]: SCENARIO picks rows by name prefix,
   * e.g. "S5". */
  int runs = argc > 1 ? atoi(argv[1]) : 50;
  const char *only = argc > 2 ? argv[2] : NULL;
  if (runs < 2) {
    runs = 2;
  }
  printf("reshard-bench: %d plans per scenario, one core, fresh arena per "
         "plan\n",
         runs);
  printf("%-16s %7s %9s %9s %9s %12s %8s | %10s %10s %7s | %10s %10s %7s | "
         "%9s\n",
         "scenario", "ranges", "before", "after", "ops", "bytes", "batches",
         "cold med", "cold p99", "ns/cp", "warm med", "warm p99", "ns/cp",
         "peak mem");
  int failures = 0;
  for (size_t i = 0; i < sizeof scenario_specs / sizeof scenario_specs[0];
       i++) {
    const scenario_spec *spec = &scenario_specs[i];
    if (only != NULL && strncmp(spec->name, only, strlen(only)) != 0) {
      continue;
    }
    reshard_arena arena;
    reshard_arena_init(&arena, 0);
    reshard_error err;
    scenario s;
    if (scenario_build(spec, 0, 0, 42 + i, &arena, &s, &err)) {
      fprintf(stderr, "%s: %s\n", spec->name, err.message);
      failures++;
      reshard_arena_destroy(&arena);
      continue;
    }
    reshard_join *template_join =
        reshard_join_build(&s.upload.layout, &s.reader.parts[0], &err);
    timing cold, warm;
    reshard_load_plan plan;
    if (template_join == NULL ||
        time_plans(&s, NULL, runs, &cold, &plan) != 0 ||
        time_plans(&s, template_join, runs, &warm, &plan) != 0) {
      failures++;
    } else {
      double copies = (double)plan.copies_after_coalescing;
      printf("%-16s %7zu %9llu %9llu %9llu %12llu %8zu | %8.1fus %8.1fus "
             "%7.2f | %8.1fus %8.1fus %7.2f | %7.1fMiB\n",
             spec->name, s.binding.range_count,
             (unsigned long long)plan.copies_before_coalescing,
             (unsigned long long)plan.copies_after_coalescing,
             (unsigned long long)plan.operations,
             (unsigned long long)plan.bytes, plan.batch_count,
             cold.median_ns / 1e3, cold.p99_ns / 1e3, cold.median_ns / copies,
             warm.median_ns / 1e3, warm.p99_ns / 1e3, warm.median_ns / copies,
             (double)warm.peak_bytes / (1024.0 * 1024.0));
    }
    reshard_join_free(template_join);
    reshard_arena_destroy(&arena);
  }
  struct rusage usage;
  getrusage(RUSAGE_SELF, &usage);
  printf("process peak RSS: %.1f MiB\n", (double)usage.ru_maxrss / 1024.0);
  return failures ? 1 : 0;
}
