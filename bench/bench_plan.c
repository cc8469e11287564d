/* Plans the SPEC §6 scenarios and prints, per scenario, copies before and
 * after coalescing, bytes, median and p99 plan time with and without a
 * cached join template, and peak memory. A second table puts planning and
 * response encoding side by side, with and without runs (SPEC §2.2 step
 * 7), for the pool the scenarios register and for one region per (layer,
 * component). With the daemon built, a third times the reader's binding
 * decoded from its wire bytes and validated, per range. Figures only;
 * nothing asserts. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>

#include "reshard/join.h"
#include "scenario.h"
#include "timing.h"

#ifdef RESHARD_BENCH_ENCODE
#include "memory/chunk_pool.h"
#include "wire/binding_decode.h"
#include "wire/decode.h"
#include "wire/plan_response.h"
#include "wire/wire.h"
#endif

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
    double start = bench_now_ns();
    reshard_status status = reshard_plan_load(&s->request, &arena, &plan, &err);
    samples[r] = bench_now_ns() - start;
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
  bench_sort_samples(samples, (size_t)runs);
  out->median_ns = bench_median(samples, (size_t)runs);
  out->p99_ns = bench_p99(samples, (size_t)runs);
  free(samples);
  return 0;
}

#ifdef RESHARD_BENCH_ENCODE
/* Names as long as real ones: 64-hex page keys, a manifest key and layout
 * id of the daemon's shapes. */
static reshard_wire_plan_names bench_names(const scenario *s,
                                           reshard_arena *arena) {
  uint64_t pages = s->request.page_count;
  char **keys = RESHARD_ARENA_NEW(arena, char *, pages + 1);
  for (uint64_t p = 0; keys && p < pages; p++) {
    char key[80];
    snprintf(key, sizeof key, "%016llx%048llx", (unsigned long long)p,
             (unsigned long long)(p * 0x9e3779b97f4a7c15ull));
    keys[p] = reshard_arena_strdup(arena, key);
  }
  static const char *const manifest_keys[] = {
      "kv/0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef/"
      "manifests/0123456789abcdef0123456789abcdef0123456789abcdef01234567"};
  return (reshard_wire_plan_names){
      .page_keys = (const char *const *)keys,
      .manifest_keys = manifest_keys,
      .sources = &s->source,
      .binding = &s->binding,
      .placement_id = "sha256:0123456789abcdef0123456789abcdef0123456789abcdef"
                      "0123456789abcdef",
  };
}

typedef struct encoding {
  double plan_ns;   /* median, warm template */
  double encode_ns; /* median, measure + write */
  size_t bytes;     /* encoded response */
  size_t entries;   /* copies, or runs */
  size_t copies;
} encoding;

/* Plans once per run and encodes the plan as the daemon does, timing the
 * two apart: the plan's arena takes its chunks from a pool as the daemon's
 * calls do (16 MiB kept, as reshardd keeps), so neither side pays for
 * faulting in fresh pages. `columns`: the planner encodes varint columns as it
 * batches (what the daemon asks without runs), else the encoder reads the
 * copies. */
static int time_encoding(scenario *s, const reshard_join *template_join,
                         bool runs, bool columns, int count, encoding *out) {
  double *plan_ns = malloc(sizeof(double) * (size_t)count);
  double *encode_ns = malloc(sizeof(double) * (size_t)count);
  int failed = plan_ns == NULL || encode_ns == NULL;
  s->source.join = template_join;
  s->request.runs = runs;
  /* As the daemon asks, unless the encoder is to read the copies. */
  s->request.omit_copies = runs || columns;
  s->request.varint_columns = columns;
  reshard_chunk_pool *pool = reshard_chunk_pool_create(16u << 20);
  failed |= pool == NULL;
  for (int r = 0; !failed && r < count; r++) {
    reshard_arena arena;
    reshard_arena_init_from(&arena, 64 * 1024, reshard_chunk_pool_source(pool));
    reshard_error err;
    reshard_load_plan plan;
    double start = bench_now_ns();
    if (reshard_plan_load(&s->request, &arena, &plan, &err)) {
      fprintf(stderr, "plan failed: %s\n", err.message);
      failed = 1;
    } else {
      double planned = bench_now_ns();
      reshard_wire_plan_names names = bench_names(s, &arena);
      reshard_plan_response response;
      uint8_t *buffer = NULL;
      if (names.page_keys == NULL ||
          reshard_plan_response_measure(&plan, &names, &arena, &response) ||
          (buffer = malloc(response.size + 1)) == NULL) {
        failed = 1;
      } else {
        out->bytes = reshard_plan_response_write(&response, buffer);
        encode_ns[r] = bench_now_ns() - planned;
        plan_ns[r] = planned - start;
      }
      free(buffer);
      out->copies = plan.copy_count;
      out->entries = runs ? plan.runs.run_count : plan.copy_count;
      reshard_load_plan_free_joins(&plan, 1);
    }
    reshard_arena_destroy(&arena);
  }
  if (!failed) {
    bench_sort_samples(plan_ns, (size_t)count);
    bench_sort_samples(encode_ns, (size_t)count);
    out->plan_ns = bench_median(plan_ns, (size_t)count);
    out->encode_ns = bench_median(encode_ns, (size_t)count);
  }
  s->request.runs = false;
  s->request.omit_copies = false;
  s->request.varint_columns = false;
  reshard_chunk_pool_free(pool);
  free(plan_ns);
  free(encode_ns);
  return failed ? -1 : 0;
}

static void print_encoding_header(void) {
  printf("\nplanning and response encoding (warm template, medians): "
         "explicit, columns encoded while batching | explicit, encoded from "
         "the copies | with runs\n");
  printf("%-16s %-6s | %9s %9s %6s %9s %10s %5s | %9s %9s %9s | %9s %9s "
         "%7s %5s %9s %9s %6s\n",
         "scenario", "memory", "plan", "encode", "enc/pl", "total", "bytes",
         "B/cp", "plan", "encode", "total", "plan", "encode", "runs", "cp/r",
         "bytes", "B/run", "fewer");
}

/* One row: the scenario's reader memory as `memory`. */
static int encoding_row(const char *name, const char *memory, scenario *s,
                        const reshard_join *template_join, int count) {
  encoding plain, rows, runs;
  if (time_encoding(s, template_join, false, true, count, &plain) ||
      time_encoding(s, template_join, false, false, count, &rows) ||
      time_encoding(s, template_join, true, false, count, &runs)) {
    return -1;
  }
  printf("%-16s %-6s | %7.1fus %7.1fus %6.2f %7.1fus %10zu %5.1f | %7.1fus "
         "%7.1fus %7.1fus | %7.1fus %7.1fus %7zu %5.1f %9zu %9.1f %5.1fx\n",
         name, memory, plain.plan_ns / 1e3, plain.encode_ns / 1e3,
         plain.encode_ns / plain.plan_ns,
         (plain.plan_ns + plain.encode_ns) / 1e3, plain.bytes,
         (double)plain.bytes / (double)plain.copies, rows.plan_ns / 1e3,
         rows.encode_ns / 1e3, (rows.plan_ns + rows.encode_ns) / 1e3,
         runs.plan_ns / 1e3, runs.encode_ns / 1e3, runs.entries,
         (double)runs.copies / (double)runs.entries, runs.bytes,
         (double)runs.bytes / (double)runs.entries,
         (double)plain.bytes / (double)runs.bytes);
  return 0;
}

/* The binding a paged reader sends with every PlanLoad (its blocks move
 * between calls, so no cache saves this): decoded from its wire bytes as
 * the daemon decodes it, then validated, each timed over `count` runs with
 * arena chunks from a pool. */
static int decode_row(const char *name, const char *memory, scenario *s,
                      int count) {
  reshard_arena wire_arena;
  reshard_arena_init(&wire_arena, 0);
  Reshard__V1__RuntimeBinding *pb =
      reshard_wire_binding_to_pb(&s->binding, &wire_arena);
  size_t length = 0;
  uint8_t *bytes =
      pb == NULL ? NULL : reshard_wire_pack(&pb->base, &wire_arena, &length);
  double *decode_ns = malloc(sizeof(double) * (size_t)count);
  double *validate_ns = malloc(sizeof(double) * (size_t)count);
  reshard_chunk_pool *pool = reshard_chunk_pool_create(16u << 20);
  int failed =
      bytes == NULL || decode_ns == NULL || validate_ns == NULL || pool == NULL;
  const reshard_load_request *request = &s->request;
  for (int r = 0; !failed && r < count; r++) {
    reshard_arena arena;
    reshard_arena_init_from(&arena, 64 * 1024, reshard_chunk_pool_source(pool));
    reshard_binding binding;
    reshard_bound_binding bound;
    reshard_error err;
    double start = bench_now_ns();
    if (reshard_binding_decode(bytes, length, "binding", &request->limits,
                               reshard_decode_budget(length), &arena, &binding,
                               &err) != RESHARD_OK) {
      fprintf(stderr, "%s: decode: %s\n", name, err.message);
      failed = 1;
    } else {
      double decoded = bench_now_ns();
      if (reshard_binding_validate(&binding, &request->placement->descriptor,
                                   &s->reader.parts[0], request->page_count,
                                   &request->limits, &arena, &bound,
                                   &err) != RESHARD_OK) {
        fprintf(stderr, "%s: validate: %s\n", name, err.message);
        failed = 1;
      }
      decode_ns[r] = decoded - start;
      validate_ns[r] = bench_now_ns() - decoded;
    }
    reshard_arena_destroy(&arena);
  }
  if (!failed) {
    bench_sort_samples(decode_ns, (size_t)count);
    bench_sort_samples(validate_ns, (size_t)count);
    double ranges = (double)s->binding.range_count;
    double decode = bench_median(decode_ns, (size_t)count);
    double validate = bench_median(validate_ns, (size_t)count);
    printf("%-16s %-6s | %10zu %7zu | %8.1fus %7.1f | %8.1fus %7.1f\n", name,
           memory, length, s->binding.range_count, decode / 1e3,
           decode / ranges, validate / 1e3, validate / ranges);
  }
  reshard_chunk_pool_free(pool);
  free(decode_ns);
  free(validate_ns);
  reshard_arena_destroy(&wire_arena);
  return failed ? -1 : 0;
}

/* encoding_row with the scenario's join template built for it. */
static int encoding_memory_row(const char *name, const char *memory,
                               scenario *s, int count) {
  reshard_error err;
  reshard_join *template_join =
      reshard_join_build(&s->upload.layout, &s->reader.parts[0], &err);
  int status = template_join == NULL
                   ? -1
                   : encoding_row(name, memory, s, template_join, count);
  reshard_join_free(template_join);
  return status;
}

typedef int (*memory_row)(const char *name, const char *memory, scenario *s,
                          int count);

/* Prints `row` for each selected scenario twice: with the pool it
 * registers, and with one region per (layer, component). Returns the rows
 * that failed. */
static int each_reader_memory(const char *only, uint64_t pages, int count,
                              memory_row row) {
  int failures = 0;
  for (size_t i = 0; i < sizeof scenario_specs / sizeof scenario_specs[0];
       i++) {
    const scenario_spec *spec = &scenario_specs[i];
    if (!scenario_selected(spec, only)) {
      continue;
    }
    for (int split = 0; split < 2; split++) {
      const char *memory = split ? "layer" : "pool";
      reshard_arena arena;
      reshard_arena_init(&arena, 0);
      reshard_error err;
      scenario s;
      if (scenario_build(spec, pages, 0, 42 + i, &arena, &s, &err) ||
          (split && scenario_region_per_layer(&s, &arena, &err)) ||
          row(spec->name, memory, &s, count) != 0) {
        fprintf(stderr, "%s (%s): failed\n", spec->name, memory);
        failures++;
      }
      reshard_arena_destroy(&arena);
    }
  }
  return failures;
}
#endif

int main(int argc, char **argv) {
  /* reshard-bench [RUNS [SCENARIO [PAGES]]]: SCENARIO picks rows by name
   * prefix, e.g. "S5"; PAGES plans that many pages instead of the spec's
   * (8 is scripts/load.py's S1-8). */
  int runs = argc > 1 ? atoi(argv[1]) : 50;
  const char *only = argc > 2 ? argv[2] : NULL;
  uint64_t pages = argc > 3 ? strtoull(argv[3], NULL, 10) : 0;
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
    if (!scenario_selected(spec, only)) {
      continue;
    }
    reshard_arena arena;
    reshard_arena_init(&arena, 0);
    reshard_error err;
    scenario s;
    if (scenario_build(spec, pages, 0, 42 + i, &arena, &s, &err)) {
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
#ifdef RESHARD_BENCH_ENCODE
  print_encoding_header();
  failures += each_reader_memory(only, pages, runs, encoding_memory_row);
  printf("\nthe reader's binding, decoded from its wire bytes "
         "(daemon/binding_decode.c) and validated (medians)\n");
  printf("%-16s %-6s | %10s %7s | %10s %7s | %10s %7s\n", "scenario", "memory",
         "bytes", "ranges", "decode", "ns/rng", "validate", "ns/rng");
  failures += each_reader_memory(only, pages, runs, decode_row);
#endif
  struct rusage usage;
  getrusage(RUSAGE_SELF, &usage);
  printf("process peak RSS: %.1f MiB\n", (double)usage.ru_maxrss / 1024.0);
  return failures ? 1 : 0;
}
