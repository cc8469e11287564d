/* Store planning figures for the SPEC §6 scenarios, next to the load
 * figures of the same scenario measured in the same run: per scenario one
 * "load" row (the §6 reader) and one "store" row (the first writer, its
 * memory in the §6 reader shape), each with copies before and after
 * coalescing, bytes, median and p99 plan time cold (join built) and warm
 * (cached join), ns per copy and peak memory. Figures only. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "reshard/join.h"
#include "scenario.h"
#include "timing.h"

/* What one row prints. */
typedef struct figures {
  size_t ranges;
  uint64_t before, after, ops, bytes;
  size_t batches;
  double median_ns[2], p99_ns[2]; /* cold, warm */
  size_t peak_bytes;
} figures;

/* One plan of either direction in a fresh arena; fills the counts and
 * returns the memory it held, or 0 on failure. */
typedef size_t (*plan_fn)(void *context, const reshard_join *join,
                          figures *out);

static size_t plan_load_once(void *context, const reshard_join *join,
                             figures *out) {
  scenario *s = context;
  s->source.join = join;
  reshard_arena arena;
  reshard_arena_init(&arena, 0);
  reshard_load_plan plan;
  reshard_error err;
  size_t bytes = 0;
  if (reshard_plan_load(&s->request, &arena, &plan, &err) == RESHARD_OK) {
    *out = (figures){.before = plan.copies_before_coalescing,
                     .after = plan.copies_after_coalescing,
                     .ops = plan.operations,
                     .bytes = plan.bytes,
                     .batches = plan.batch_count};
    bytes = arena.total_bytes +
            (plan.built_joins[0] ? plan.built_joins[0]->memory_bytes : 0);
    reshard_load_plan_free_joins(&plan, 1);
  } else {
    fprintf(stderr, "load: %s\n", err.message);
  }
  reshard_arena_destroy(&arena);
  return bytes;
}

static size_t plan_store_once(void *context, const reshard_join *join,
                              figures *out) {
  store_scenario *s = context;
  s->request.join = join;
  reshard_arena arena;
  reshard_arena_init(&arena, 0);
  reshard_store_plan plan;
  reshard_error err;
  size_t bytes = 0;
  if (reshard_plan_store(&s->request, &arena, &plan, &err) == RESHARD_OK) {
    *out = (figures){.before = plan.copies_before_coalescing,
                     .after = plan.copies_after_coalescing,
                     .ops = plan.operations,
                     .bytes = plan.bytes,
                     .batches = plan.batch_count};
    bytes = arena.total_bytes +
            (plan.built_join ? plan.built_join->memory_bytes : 0);
    reshard_join_free(plan.built_join);
  } else {
    fprintf(stderr, "store: %s\n", err.message);
  }
  reshard_arena_destroy(&arena);
  return bytes;
}

static int measure(plan_fn fn, void *context, const reshard_join *warm,
                   int runs, figures *out) {
  double *samples = malloc(sizeof(double) * (size_t)runs);
  if (samples == NULL) {
    return -1;
  }
  figures counts;
  size_t peak = 0;
  for (int pass = 0; pass < 2; pass++) {
    for (int r = 0; r < runs; r++) {
      double start = bench_now_ns();
      size_t bytes = fn(context, pass ? warm : NULL, &counts);
      samples[r] = bench_now_ns() - start;
      if (bytes == 0) {
        free(samples);
        return -1;
      }
      peak = bytes > peak ? bytes : peak;
    }
    bench_sort_samples(samples, (size_t)runs);
    out->median_ns[pass] = bench_median(samples, (size_t)runs);
    out->p99_ns[pass] = bench_p99(samples, (size_t)runs);
  }
  out->before = counts.before;
  out->after = counts.after;
  out->ops = counts.ops;
  out->bytes = counts.bytes;
  out->batches = counts.batches;
  out->peak_bytes = peak;
  free(samples);
  return 0;
}

static void print_row(const char *name, const char *direction,
                      const figures *f) {
  double copies = f->after ? (double)f->after : 1.0;
  printf("%-16s %-5s %7zu %9llu %9llu %9llu %12llu %7zu | %8.1fus %8.1fus "
         "%6.2f | %8.1fus %8.1fus %6.2f | %6.1fMiB\n",
         name, direction, f->ranges, (unsigned long long)f->before,
         (unsigned long long)f->after, (unsigned long long)f->ops,
         (unsigned long long)f->bytes, f->batches, f->median_ns[0] / 1e3,
         f->p99_ns[0] / 1e3, f->median_ns[0] / copies, f->median_ns[1] / 1e3,
         f->p99_ns[1] / 1e3, f->median_ns[1] / copies,
         (double)f->peak_bytes / (1024.0 * 1024.0));
}

int main(int argc, char **argv) {
  /* reshard-bench-store [RUNS [SCENARIO]]: SCENARIO picks rows by name
   * prefix, e.g. "S5". */
  int runs = argc > 1 ? atoi(argv[1]) : 50;
  const char *only = argc > 2 ? argv[2] : NULL;
  if (runs < 2) {
    runs = 2;
  }
  printf("reshard-bench-store: %d plans per row, one core, fresh arena per "
         "plan; load = the SPEC §6 reader, store = the first writer with its "
         "memory in the reader's shape\n",
         runs);
  printf("%-16s %-5s %7s %9s %9s %9s %12s %7s | %10s %10s %6s | %10s %10s "
         "%6s | %9s\n",
         "scenario", "dir", "ranges", "before", "after", "ops", "bytes",
         "batches", "cold med", "cold p99", "ns/cp", "warm med", "warm p99",
         "ns/cp", "peak mem");
  int failures = 0;
  for (size_t i = 0; i < sizeof scenario_specs / sizeof scenario_specs[0];
       i++) {
    const scenario_spec *spec = &scenario_specs[i];
    if (!scenario_selected(spec, only)) {
      continue;
    }
    reshard_arena arena;
    reshard_arena_init(&arena, 0);
    reshard_error err;
    store_scenario s;
    if (scenario_build_store(spec, 0, 42 + i, &arena, &s, &err)) {
      fprintf(stderr, "%s: %s\n", spec->name, err.message);
      failures++;
      reshard_arena_destroy(&arena);
      continue;
    }
    reshard_join *load_join = reshard_join_build(&s.load.upload.layout,
                                                 &s.load.reader.parts[0], &err);
    reshard_join *store_join =
        reshard_join_build(&s.load.upload.layout, s.writer_part, &err);
    figures load = {.ranges = s.load.binding.range_count};
    figures store = {.ranges = s.binding.range_count};
    if (load_join == NULL || store_join == NULL ||
        measure(plan_load_once, &s.load, load_join, runs, &load) != 0 ||
        measure(plan_store_once, &s, store_join, runs, &store) != 0) {
      failures++;
    } else {
      print_row(spec->name, "load", &load);
      print_row(spec->name, "store", &store);
    }
    reshard_join_free(load_join);
    reshard_join_free(store_join);
    reshard_arena_destroy(&arena);
  }
  return failures ? 1 : 0;
}
