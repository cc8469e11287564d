/* Plans the SPEC §6 scenarios and prints, per scenario, copies before and
 * after coalescing, bytes, median and p99 plan time with and without a
 * cached join template, and peak memory. A second table puts planning and
 * response encoding side by side, with and without runs (SPEC §2.2 step
 * 7), for the pool the scenarios register and for one region per (layer,
 * component). With the daemon built, a third times the reader's binding
 * decoded from its wire bytes and validated, per range; then the pooled
 * reader of SPEC §6 (bench/scenario.h) beside the explicit binding of the
 * same memory and block table: the PlanLoad request's bytes, the pool's
 * registration (decoded, validated: once), and per call the decoding, the
 * validation or the block table's binding, and the planning. Last, the
 * transfer plans of §6's T rows (SPEC §2.6): copies, batches, sources
 * read, bytes, cold and warm planning, with and without runs. Figures
 * only, except that a pooled plan whose copies differ from the explicit
 * plan's, or transfer runs that do not expand to the explicit transfer
 * plan's copies, print MISMATCH and fail the run (exit 1). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>

#include "plan/plan_internal.h"
#include "reshard/join.h"
#include "scenario.h"
#include "timing.h"

#ifdef RESHARD_BENCH_ENCODE
#include "memory/chunk_pool.h"
#include "reshard/identity.h"
#include "wire/binding_decode.h"
#include "wire/decode.h"
#include "wire/plan_response.h"
#include "wire/transfer_response.h"
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

/* Times encoding `plan`'s PlanLoadResponse as the daemon encodes it
 * (reshard__planner_pack_response) into *ns: measured, then with runs
 * written whole into a buffer of its own, without them as pieces
 * (reshard_response_pack_pieces, the daemon's own call) into the plan's
 * arena. What the daemon then hands gRPC is not timed. *bytes is
 * the response's size. Everything goes into `arena`; false, with `err`
 * set, when it cannot grow. */
static bool time_daemon_encoding(const reshard_load_plan *plan,
                                 const reshard_wire_plan_names *names,
                                 reshard_arena *arena, double *ns,
                                 size_t *bytes, reshard_error *err) {
  double start = bench_now_ns();
  reshard_plan_response response;
  bool ok = reshard_plan_response_measure(plan, names, arena, &response) ==
            RESHARD_OK;
  uint8_t *whole = NULL;
  if (ok && plan->runs.batch_first != NULL) {
    /* Into a buffer of its own, as the daemon's slice (malloc'd past 128
     * KiB, pooled below; both warm after the first call). */
    whole = malloc(response.size + 1);
    ok = whole != NULL;
    if (ok) {
      reshard_plan_response_write(&response, whole);
    }
  } else if (ok) {
    reshard_response_piece *pieces;
    size_t count;
    ok = reshard_response_pack_pieces(&response.batches, response.size,
                                      &response,
                                      reshard_plan_response_write_pieces, arena,
                                      arena, &pieces, &count) == RESHARD_OK;
  }
  *ns = bench_now_ns() - start;
  free(whole);
  *bytes = ok ? response.size : 0;
  if (!ok) {
    reshard_error_set(err, RESHARD_RESOURCE_EXHAUSTED,
                      "encoding the response: out of memory");
  }
  return ok;
}

/* Plans once per run and encodes the plan as the daemon does
 * (time_daemon_encoding), timing the two apart: the plan's arena takes its
 * chunks from a pool as the daemon's calls do (16 MiB kept, as reshardd
 * keeps), so neither side pays for faulting in fresh pages. `columns`: the
 * planner encodes varint columns as it batches (what the daemon asks
 * without runs) and the response sends the long ones as pieces, else the
 * encoder reads the copies. */
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
      plan_ns[r] = bench_now_ns() - start;
      reshard_wire_plan_names names = bench_names(s, &arena);
      if (names.page_keys == NULL ||
          !time_daemon_encoding(&plan, &names, &arena, &encode_ns[r],
                                &out->bytes, &err)) {
        fprintf(stderr, "encoding failed: %s\n",
                names.page_keys == NULL ? "out of memory" : err.message);
        failed = 1;
      }
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
  printf("%-16s %-8s | %9s %9s %6s %9s %10s %5s | %9s %9s %9s | %9s %9s "
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
  printf("%-16s %-8s | %7.1fus %7.1fus %6.2f %7.1fus %10zu %5.1f | %7.1fus "
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
    printf("%-16s %-8s | %10zu %7zu | %8.1fus %7.1f | %8.1fus %7.1f\n", name,
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

/* ---- The pooled reader (SPEC §1.5a, §6) ---- */

static size_t varint_bytes(uint64_t value) {
  size_t n = 1;
  while (value >= 0x80) {
    value >>= 7;
    n++;
  }
  return n;
}

/* A field of `length` bytes behind a one-byte tag, as protobuf sends it. */
static size_t field_bytes(size_t length) {
  return 1 + varint_bytes(length) + length;
}

static uint64_t fnv1a(const void *data, size_t length) {
  const unsigned char *bytes = data;
  uint64_t hash = 0xcbf29ce484222325ull;
  for (size_t i = 0; i < length; i++) {
    hash = (hash ^ bytes[i]) * 0x100000001b3ull;
  }
  return hash;
}

static double median_of(double *samples, int count) {
  bench_sort_samples(samples, (size_t)count);
  return bench_median(samples, (size_t)count);
}

/* What one scenario's pooled row prints. */
typedef struct pooled_figures {
  size_t blocks, ranges, copies, runs;
  /* wire: the whole PlanLoad request, placement by id, 64-hex page keys */
  size_t explicit_bytes, pooled_bytes, inline_bytes, keys_bytes, ids_bytes,
      ids_payload;
  /* medians, ns */
  double register_decode, register_validate;
  double explicit_decode, explicit_validate, explicit_plan;
  double pooled_decode, pooled_check, pooled_plan, pooled_runs;
  double pooled_columns; /* varint columns, no copies: the daemon's plan */
  /* Each of the daemon's two pooled plans' own response, encoded as the
   * daemon encodes it (time_daemon_encoding). */
  double pooled_columns_encode, pooled_runs_encode;
  uint64_t reused_pages; /* pooled pages planned as the page before them */
  uint64_t hash;
  bool same;
} pooled_figures;

/* ---- The floor of a plan's output ---- */

typedef struct store_floor_row {
  const char *name;
  uint64_t copies;
} store_floor_row;

/* Median ns of writing `count` copies as the planner writes them
 * (reshard__group_expand: three 16-byte stores a copy), `runs` times into
 * `out`, which was written before. */
static double time_stores(reshard_copy *out, uint64_t count, bool streamed,
                          int runs, double *samples) {
  reshard_run sequence = {
      .first = {.page_index = 1,
                .part_index = 2,
                .region_index = 3,
                .nbytes = 256},
      .count = count,
      .part_stride = 256,
      .region_stride = 512,
  };
  for (int r = 0; r < runs; r++) {
    double start = bench_now_ns();
    reshard__group_expand(&sequence, 1, out, streamed);
    if (streamed) {
      reshard__stream_fence();
    }
    samples[r] = bench_now_ns() - start;
  }
  bench_sort_samples(samples, (size_t)runs);
  return bench_median(samples, (size_t)runs);
}

/* This machine's floor for each plan's copies: the stores alone, cached
 * and streamed (lib/plan/sequences.c streams a plan's copies from
 * RESHARD__STREAM_COPIES_MIN_BYTES on). */
static int print_store_floor(const store_floor_row *rows, size_t count,
                             int runs) {
  printf("\nthe planner's stores alone (reshard__group_expand, into memory "
         "written before; medians): this machine's floor for a plan's copies; "
         "plans of %zu MiB of copies or more stream them\n",
         RESHARD__STREAM_COPIES_MIN_BYTES >> 20);
  printf("%-16s %9s %8s | %10s %7s | %10s %7s\n", "scenario", "copies", "MB",
         "cached", "ns/cp", "streamed", "ns/cp");
  double *samples = malloc(sizeof(double) * (size_t)runs);
  if (samples == NULL) {
    return 1;
  }
  for (size_t i = 0; i < count; i++) {
    size_t bytes = (size_t)rows[i].copies * sizeof(reshard_copy);
    reshard_copy *out = aligned_alloc(64, (bytes + 63) / 64 * 64);
    if (out == NULL) {
      free(samples);
      return 1;
    }
    memset(out, 0, bytes);
    double cached = time_stores(out, rows[i].copies, false, runs, samples);
    double streamed = time_stores(out, rows[i].copies, true, runs, samples);
    printf("%-16s %9llu %8.1f | %8.1fus %7.2f | %8.1fus %7.2f\n", rows[i].name,
           (unsigned long long)rows[i].copies, (double)bytes / 1e6,
           cached / 1e3, cached / (double)rows[i].copies, streamed / 1e3,
           streamed / (double)rows[i].copies);
    free(out);
  }
  free(samples);
  return 0;
}

/* The pooled plans, each behind a function of its own, so that an
 * instruction count can take one form alone (docs/performance.md):
 *   valgrind --tool=callgrind --toggle-collect='bench_plan_pooled_copies*' \
 *     build/bench/reshard-bench 5 S5
 * (the '*' takes the compiler's clones too). Each plans from a copy of
 * the request: a plain forward compiles to a jump, which the toggle does
 * not follow. */
__attribute__((noinline)) static reshard_status
bench_plan_pooled_copies(const reshard_load_request *request,
                         reshard_arena *arena, reshard_load_plan *plan,
                         reshard_error *err) {
  reshard_load_request pooled = *request;
  return reshard_plan_load(&pooled, arena, plan, err);
}

/* The explicit binding's plan, bound before the call. Its body must
 * differ from bench_plan_pooled_copies's, else the compiler folds the two
 * into one symbol and callgrind cannot tell them apart. */
__attribute__((noinline)) static reshard_status
bench_plan_explicit_copies(const reshard_load_request *request,
                           reshard_arena *arena, reshard_load_plan *plan,
                           reshard_error *err) {
  reshard_load_request explicit_request = *request;
  explicit_request.pooled = NULL; /* the binding's memory, not a pool's */
  return reshard_plan_load(&explicit_request, arena, plan, err);
}

/* With runs and no copies, as the daemon asks for them. */
__attribute__((noinline)) static reshard_status
bench_plan_pooled_runs(const reshard_load_request *request,
                       reshard_arena *arena, reshard_load_plan *plan,
                       reshard_error *err) {
  reshard_load_request runs = *request;
  runs.runs = true;
  runs.omit_copies = true;
  return reshard_plan_load(&runs, arena, plan, err);
}

/* Without runs as the daemon answers: varint columns, no copies. */
__attribute__((noinline)) static reshard_status
bench_plan_pooled_columns(const reshard_load_request *request,
                          reshard_arena *arena, reshard_load_plan *plan,
                          reshard_error *err) {
  reshard_load_request columns = *request;
  columns.omit_copies = true;
  columns.varint_columns = true;
  return reshard_plan_load(&columns, arena, plan, err);
}

/* Pooled and explicit forms of one scenario's reader memory, the same
 * bytes: built, checked to plan the same copies, measured over `count`
 * runs with arena chunks from a pool (as the daemon's calls have them). */
static int pooled_measure(const scenario_spec *spec, size_t index,
                          uint64_t pages, int count, pooled_figures *out) {
  memset(out, 0, sizeof *out);
  reshard_arena arena;
  reshard_arena_init(&arena, 0);
  reshard_error err;
  scenario s;
  scenario_pool sp;
  reshard_join *template_join = NULL;
  reshard_chunk_pool *chunks = reshard_chunk_pool_create(16u << 20);
  enum { SAMPLE_KINDS = 12 };
  double *samples[SAMPLE_KINDS] = {0};
  int failed = chunks == NULL;
  for (int i = 0; i < SAMPLE_KINDS; i++) {
    samples[i] = malloc(sizeof(double) * (size_t)count);
    failed |= samples[i] == NULL;
  }
  if (failed || scenario_build(spec, pages, 0, 42 + index, &arena, &s, &err) ||
      scenario_build_pool(spec, &s, 7 + index, &arena, &sp, &err)) {
    fprintf(stderr, "%s: pooled: %s\n", spec->name,
            failed ? "out of memory" : err.message);
    failed = 1;
    goto done;
  }
  /* The explicit form is the pool's own memory and table. */
  s.binding = sp.binding;
  const reshard_placement_part *part =
      reshard_placement_find_part(&s.reader, sp.pool.participant_id);
  template_join = reshard_join_build(&s.upload.layout, part, &err);
  char placement_id[RESHARD_ID_SIZE], memory_id[RESHARD_ID_SIZE];
  reshard_bound_pool bound_pool;
  const reshard_limits *limits = &s.request.limits;
  uint64_t span = s.request.page_count * spec->page_size;
  if (template_join == NULL ||
      reshard_pool_validate(&sp.pool, &s.reader.descriptor, part, limits,
                            "pool", &arena, &bound_pool, &err) ||
      reshard_placement_id(&s.reader, placement_id, &err) ||
      reshard_memory_id(&sp.pool, placement_id, memory_id, &err)) {
    fprintf(stderr, "%s: pooled: %s\n", spec->name, err.message);
    failed = 1;
    goto done;
  }
  s.source.join = template_join;
  out->blocks = sp.block_count;
  out->ranges = sp.binding.range_count;

  /* ---- The wire ---- */
  reshard_wire_plan_names names = bench_names(&s, &arena);
  Reshard__V1__PlanLoadRequest wire = RESHARD__V1__PLAN_LOAD_REQUEST__INIT;
  wire.model_domain =
      "0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef";
  wire.n_page_keys = (size_t)s.request.page_count;
  wire.page_keys = (char **)names.page_keys;
  wire.target_case = RESHARD__V1__PLAN_LOAD_REQUEST__TARGET_PLACEMENT_ID;
  wire.placement_id = placement_id;
  Reshard__V1__MemoryPool *pool_pb = reshard_wire_pool_to_pb(&sp.pool, &arena);
  Reshard__V1__RuntimeBinding *binding_pb =
      reshard_wire_binding_to_pb(&sp.binding, &arena);
  Reshard__V1__PooledMemory pooled_pb = RESHARD__V1__POOLED_MEMORY__INIT;
  pooled_pb.pool_case = RESHARD__V1__POOLED_MEMORY__POOL_MEMORY_ID;
  pooled_pb.memory_id = memory_id;
  pooled_pb.n_block_ids = sp.block_count;
  pooled_pb.block_ids = sp.block_ids;
  if (names.page_keys == NULL || pool_pb == NULL || binding_pb == NULL) {
    failed = 1;
    goto done;
  }
  wire.binding = binding_pb;
  out->explicit_bytes = protobuf_c_message_get_packed_size(&wire.base);
  wire.binding = NULL;
  wire.pooled = &pooled_pb;
  out->pooled_bytes = protobuf_c_message_get_packed_size(&wire.base);
  Reshard__V1__PooledMemory inline_pb = pooled_pb;
  inline_pb.pool_case = RESHARD__V1__POOLED_MEMORY__POOL_INLINE_POOL;
  inline_pb.inline_pool = pool_pb;
  wire.pooled = &inline_pb;
  out->inline_bytes = protobuf_c_message_get_packed_size(&wire.base);
  for (size_t p = 0; p < wire.n_page_keys; p++) {
    out->keys_bytes += field_bytes(strlen(wire.page_keys[p]));
  }
  for (size_t i = 0; i < sp.block_count; i++) {
    out->ids_payload += varint_bytes(sp.block_ids[i]);
  }
  out->ids_bytes = field_bytes(out->ids_payload);
  size_t pool_length = 0, pooled_length = 0, binding_length = 0;
  uint8_t *pool_bytes = reshard_wire_pack(&pool_pb->base, &arena, &pool_length);
  uint8_t *pooled_bytes =
      reshard_wire_pack(&pooled_pb.base, &arena, &pooled_length);
  uint8_t *binding_bytes =
      reshard_wire_pack(&binding_pb->base, &arena, &binding_length);
  if (pool_bytes == NULL || pooled_bytes == NULL || binding_bytes == NULL) {
    failed = 1;
    goto done;
  }

  /* ---- The same plan either way ---- */
  reshard_binding shell = {
      .participant_id = sp.pool.participant_id,
      .endpoint = sp.pool.endpoint,
      .regions = sp.pool.regions,
      .region_count = sp.pool.region_count,
  };
  {
    reshard_arena a, b;
    reshard_load_plan explicit_plan, pooled_plan;
    reshard_pooled_memory memory = {&bound_pool, sp.block_ids, sp.block_count};
    reshard_load_request pooled_request = s.request;
    pooled_request.binding = &shell;
    pooled_request.pooled = &memory;
    reshard_arena_init(&a, 0);
    reshard_arena_init(&b, 0);
    bool planned_a = false, planned_b = false;
    if (reshard_plan_load(&s.request, &a, &explicit_plan, &err) == RESHARD_OK) {
      planned_a = true;
      if (reshard_plan_load(&pooled_request, &b, &pooled_plan, &err) ==
          RESHARD_OK) {
        planned_b = true;
        out->reused_pages = pooled_plan.reused_pages;
      }
    }
    if (!planned_a || !planned_b) {
      fprintf(stderr, "%s: pooled check: %s\n", spec->name, err.message);
      failed = 1;
    } else {
      size_t length = explicit_plan.copy_count * sizeof(reshard_copy);
      uint64_t pooled_hash = fnv1a(
          pooled_plan.copies, pooled_plan.copy_count * sizeof(reshard_copy));
      out->copies = explicit_plan.copy_count;
      out->hash = fnv1a(explicit_plan.copies, length);
      out->same =
          pooled_plan.copy_count == explicit_plan.copy_count &&
          pooled_plan.batch_count == explicit_plan.batch_count &&
          pooled_plan.bytes == explicit_plan.bytes &&
          pooled_hash == out->hash &&
          memcmp(pooled_plan.copies, explicit_plan.copies, length) == 0 &&
          memcmp(pooled_plan.batches, explicit_plan.batches,
                 explicit_plan.batch_count * sizeof(reshard_batch)) == 0;
      if (!out->same) {
        fprintf(stderr,
                "%s: MISMATCH: the pooled plan has %zu copies (hash "
                "%016llx), the explicit one %zu (hash %016llx)\n",
                spec->name, pooled_plan.copy_count,
                (unsigned long long)pooled_hash, explicit_plan.copy_count,
                (unsigned long long)out->hash);
      }
    }
    if (planned_a) {
      reshard_load_plan_free_joins(&explicit_plan, 1);
    }
    if (planned_b) {
      reshard_load_plan_free_joins(&pooled_plan, 1);
    }
    reshard_arena_destroy(&a);
    reshard_arena_destroy(&b);
    if (failed) {
      goto done;
    }
  }

  /* ---- Timed, explicit and pooled in turn ---- */
  for (int r = 0; !failed && r < count; r++) {
    reshard_arena a;
    reshard_arena_init_from(&a, 64 * 1024, reshard_chunk_pool_source(chunks));
    double t0 = bench_now_ns();
    /* Registration: the MemoryPool decoded, then validated. */
    Reshard__V1__MemoryPool *pool_in =
        (Reshard__V1__MemoryPool *)reshard_decode(
            &reshard__v1__memory_pool__descriptor, pool_bytes, pool_length,
            reshard_decode_budget(pool_length), limits, &a, &err);
    reshard_pool pool;
    reshard_bound_pool validated;
    if (pool_in == NULL ||
        reshard_wire_pool_from_pb(pool_in, "pool", &a, &pool, &err)) {
      failed = 1;
      break;
    }
    double t1 = bench_now_ns();
    if (reshard_pool_validate(&pool, &s.reader.descriptor, part, limits, "pool",
                              &a, &validated, &err)) {
      failed = 1;
      break;
    }
    double t2 = bench_now_ns();
    samples[0][r] = t1 - t0;
    samples[1][r] = t2 - t1;
    reshard_arena_destroy(&a);

    /* Explicit: the binding decoded, validated, then planned. */
    reshard_arena_init_from(&a, 64 * 1024, reshard_chunk_pool_source(chunks));
    reshard_binding binding;
    reshard_bound_binding bound;
    reshard_load_plan plan;
    t0 = bench_now_ns();
    if (reshard_binding_decode(binding_bytes, binding_length, "binding", limits,
                               reshard_decode_budget(binding_length), &a,
                               &binding, &err)) {
      failed = 1;
      break;
    }
    t1 = bench_now_ns();
    if (reshard_binding_validate(&binding, &s.reader.descriptor, part,
                                 s.request.page_count, limits, &a, &bound,
                                 &err)) {
      failed = 1;
      break;
    }
    t2 = bench_now_ns();
    reshard_load_request request = s.request;
    request.binding = &binding;
    request.bound_binding = &bound;
    if (bench_plan_explicit_copies(&request, &a, &plan, &err)) {
      failed = 1;
      break;
    }
    double t3 = bench_now_ns();
    samples[2][r] = t1 - t0;
    samples[3][r] = t2 - t1;
    samples[4][r] = t3 - t2;
    reshard_load_plan_free_joins(&plan, 1);
    reshard_arena_destroy(&a);

    /* Pooled: memory id and block table decoded, bound, then planned. */
    reshard_arena_init_from(&a, 64 * 1024, reshard_chunk_pool_source(chunks));
    t0 = bench_now_ns();
    Reshard__V1__PooledMemory *pooled_in =
        (Reshard__V1__PooledMemory *)reshard_decode(
            &reshard__v1__pooled_memory__descriptor, pooled_bytes,
            pooled_length, reshard_decode_budget(pooled_length), limits, &a,
            &err);
    if (pooled_in == NULL) {
      failed = 1;
      break;
    }
    t1 = bench_now_ns();
    /* The plan checks the table itself; timed alone here to show its
     * share, and not counted twice in the total. */
    if (reshard_block_table_check(bound_pool.block_size, bound_pool.num_blocks,
                                  pooled_in->block_ids, pooled_in->n_block_ids,
                                  span, limits, "pooled.block_ids", &a, &err)) {
      failed = 1;
      break;
    }
    t2 = bench_now_ns();
    reshard_pooled_memory memory = {&bound_pool, pooled_in->block_ids,
                                    pooled_in->n_block_ids};
    request.binding = &shell;
    request.bound_binding = NULL;
    request.pooled = &memory;
    if (bench_plan_pooled_copies(&request, &a, &plan, &err)) {
      failed = 1;
      break;
    }
    t3 = bench_now_ns();
    samples[5][r] = t1 - t0;
    samples[6][r] = t2 - t1;
    samples[7][r] = t3 - t2;
    reshard_load_plan_free_joins(&plan, 1);
    reshard_arena_destroy(&a);

    /* Pooled with runs (SPEC §2.2 step 7), as the daemon asks for them. */
    reshard_arena_init_from(&a, 64 * 1024, reshard_chunk_pool_source(chunks));
    memory = (reshard_pooled_memory){&bound_pool, sp.block_ids, sp.block_count};
    t0 = bench_now_ns();
    if (bench_plan_pooled_runs(&request, &a, &plan, &err)) {
      failed = 1;
      break;
    }
    samples[8][r] = bench_now_ns() - t0;
    out->runs = plan.runs.run_count;
    size_t bytes;
    if (!time_daemon_encoding(&plan, &names, &a, &samples[10][r], &bytes,
                              &err)) {
      failed = 1;
      break;
    }
    reshard_load_plan_free_joins(&plan, 1);
    reshard_arena_destroy(&a);

    /* Pooled without runs as the daemon answers it: the copies' varint
     * columns written while batching, the copies themselves never. */
    reshard_arena_init_from(&a, 64 * 1024, reshard_chunk_pool_source(chunks));
    t0 = bench_now_ns();
    if (bench_plan_pooled_columns(&request, &a, &plan, &err)) {
      failed = 1;
      break;
    }
    samples[9][r] = bench_now_ns() - t0;
    if (!time_daemon_encoding(&plan, &names, &a, &samples[11][r], &bytes,
                              &err)) {
      failed = 1;
      break;
    }
    reshard_load_plan_free_joins(&plan, 1);
    reshard_arena_destroy(&a);
  }
  if (failed) {
    fprintf(stderr, "%s: pooled: %s\n", spec->name, err.message);
    goto done;
  }
  double *medians[SAMPLE_KINDS] = {
      &out->register_decode,    &out->register_validate,
      &out->explicit_decode,    &out->explicit_validate,
      &out->explicit_plan,      &out->pooled_decode,
      &out->pooled_check,       &out->pooled_plan,
      &out->pooled_runs,        &out->pooled_columns,
      &out->pooled_runs_encode, &out->pooled_columns_encode};
  for (int i = 0; i < SAMPLE_KINDS; i++) {
    *medians[i] = median_of(samples[i], count);
  }
done:
  for (int i = 0; i < SAMPLE_KINDS; i++) {
    free(samples[i]);
  }
  reshard_join_free(template_join);
  reshard_chunk_pool_free(chunks);
  reshard_arena_destroy(&arena);
  return failed ? -1 : 0;
}

/* The pooled form beside the explicit binding of the same memory, per
 * selected scenario: the wire, the decoding and validation, the planning.
 * Returns the rows that failed; a pooled plan that differs from the
 * explicit one prints MISMATCH and fails. */
static int pooled_tables(const char *only, uint64_t pages, int count) {
  size_t n = sizeof scenario_specs / sizeof scenario_specs[0];
  pooled_figures *rows = calloc(n, sizeof *rows);
  bool *ok = calloc(n, sizeof *ok);
  int failures = 0;
  if (rows == NULL || ok == NULL) {
    free(rows);
    free(ok);
    return 1;
  }
  for (size_t i = 0; i < n; i++) {
    if (scenario_selected(&scenario_specs[i], only)) {
      ok[i] =
          pooled_measure(&scenario_specs[i], i, pages, count, &rows[i]) == 0;
      if (!ok[i] || !rows[i].same) {
        failures++;
      }
    }
  }
  printf("\npooled reader (SPEC §1.5a, §6: one region per layer; vLLM "
         "[2, blocks, block, heads, dim], S3 FlashInfer HND [blocks, 2, "
         "heads, block, dim], S4 MLA [blocks, block, 576] K only; twice the "
         "blocks needed, table scattered) against the explicit binding of "
         "the same memory\n");
  printf("the PlanLoad request on the wire (placement by id, 64-hex page "
         "keys): explicit binding | pooled by memory id | inline pool\n");
  printf("%-16s %6s %7s | %10s | %8s %8s %8s %5s %6s %7s | %9s\n", "scenario",
         "blocks", "ranges", "explicit", "pooled", "keys", "ids", "B/id",
         "rest", "ex/pool", "inline");
  for (size_t i = 0; i < n; i++) {
    if (!ok[i]) {
      continue;
    }
    const pooled_figures *f = &rows[i];
    printf("%-16s %6zu %7zu | %10zu | %8zu %8zu %8zu %5.2f %6zu %6.1fx | "
           "%9zu\n",
           scenario_specs[i].name, f->blocks, f->ranges, f->explicit_bytes,
           f->pooled_bytes, f->keys_bytes, f->ids_bytes,
           (double)f->ids_payload / (double)f->blocks,
           f->pooled_bytes - f->keys_bytes - f->ids_bytes,
           (double)f->explicit_bytes / (double)f->pooled_bytes,
           f->inline_bytes);
  }
  printf(
      "\ndecoded, validated and planned (medians, warm template, arena "
      "chunks from a pool): registration once | explicit per call | "
      "pooled per call (its plan checks the block table, timed alone in "
      "check) | pooled as the daemon answers without runs (varint columns, "
      "no copies), then its response encoded as the daemon sends it | pooled "
      "with runs, then its response | copies, and pages planned as the page "
      "before them with other blocks\n");
  printf("%-16s %8s %8s | %8s %8s %8s %7s %8s | %8s %8s %6s %8s %7s %8s %6s "
         "| %8s %7s %8s | %8s %6s %7s %8s | %s\n",
         "scenario", "decode", "validate", "decode", "validate", "plan",
         "ns/cp", "total", "decode", "check", "ns/id", "plan", "ns/cp", "total",
         "fewer", "columns", "ns/cp", "encode", "plan", "runs", "ns/run",
         "encode", "copies");
  for (size_t i = 0; i < n; i++) {
    if (!ok[i]) {
      continue;
    }
    const pooled_figures *f = &rows[i];
    double copies = f->copies ? (double)f->copies : 1.0;
    double explicit_total =
        f->explicit_decode + f->explicit_validate + f->explicit_plan;
    /* The plan includes the table check. */
    double pooled_total = f->pooled_decode + f->pooled_plan;
    printf(
        "%-16s %6.1fus %6.1fus | %6.1fus %6.1fus %6.1fus %7.2f %6.1fus | "
        "%6.1fus %6.1fus %6.2f %6.1fus %7.2f %6.1fus %5.1fx | %6.1fus %7.2f "
        "%6.1fus | %6.1fus %6zu %7.2f %6.1fus | %s %zu (%016llx) %llu\n",
        scenario_specs[i].name, f->register_decode / 1e3,
        f->register_validate / 1e3, f->explicit_decode / 1e3,
        f->explicit_validate / 1e3, f->explicit_plan / 1e3,
        f->explicit_plan / copies, explicit_total / 1e3, f->pooled_decode / 1e3,
        f->pooled_check / 1e3, f->pooled_check / (double)f->blocks,
        f->pooled_plan / 1e3, f->pooled_plan / copies, pooled_total / 1e3,
        explicit_total / pooled_total, f->pooled_columns / 1e3,
        f->pooled_columns / copies, f->pooled_columns_encode / 1e3,
        f->pooled_runs / 1e3, f->runs,
        f->pooled_runs / (double)(f->runs ? f->runs : 1),
        f->pooled_runs_encode / 1e3, f->same ? "same" : "MISMATCH", f->copies,
        (unsigned long long)f->hash, (unsigned long long)f->reused_pages);
  }
  free(rows);
  free(ok);
  return failures;
}

typedef int (*memory_row)(const char *name, const char *memory, scenario *s,
                          int count);

/* Prints `row` for each selected scenario three times: with the pool it
 * registers, with one region per (layer, component), and with those
 * regions and the ranges listed in a random order. Returns the rows that
 * failed. */
static int each_reader_memory(const char *only, uint64_t pages, int count,
                              memory_row row) {
  int failures = 0;
  for (size_t i = 0; i < sizeof scenario_specs / sizeof scenario_specs[0];
       i++) {
    const scenario_spec *spec = &scenario_specs[i];
    if (!scenario_selected(spec, only)) {
      continue;
    }
    for (int split = 0; split < 3; split++) {
      static const char *const memories[] = {"pool", "layer", "shuffled"};
      const char *memory = memories[split];
      reshard_arena arena;
      reshard_arena_init(&arena, 0);
      reshard_error err;
      scenario s;
      bool built = scenario_build(spec, pages, 0, 42 + i, &arena, &s, &err) ==
                       RESHARD_OK &&
                   (split == 0 ||
                    scenario_region_per_layer(&s, &arena, &err) == RESHARD_OK);
      if (built && split == 2) {
        scenario_shuffle_ranges(&s, 7 + i);
      }
      if (!built || row(spec->name, memory, &s, count) != 0) {
        fprintf(stderr, "%s (%s): failed\n", spec->name, memory);
        failures++;
      }
      reshard_arena_destroy(&arena);
    }
  }
  return failures;
}
#endif

/* ---- Transfer plans (SPEC §2.6, the T rows of §6) ---- */

typedef struct transfer_timing {
  double cold_ns; /* the first call */
  double warm_ns; /* median of the others */
  size_t copies, before, batches, sources, runs, expanded;
  uint64_t bytes;
  bool runs_match;   /* with runs: they expand to the explicit copies */
  bool direct;       /* with runs: emitted by the walk, no copy written */
  uint64_t repeated; /* regions written as the one before them renamed */
} transfer_timing;

static int compare_transfer_copies(const void *a, const void *b) {
  const reshard_copy *x = a, *y = b;
  const uint64_t kx[5] = {x->page_index, x->part_index, x->part_offset,
                          x->region_index, x->region_offset};
  const uint64_t ky[5] = {y->page_index, y->part_index, y->part_offset,
                          y->region_index, y->region_offset};
  for (int i = 0; i < 5; i++) {
    if (kx[i] != ky[i]) {
      return kx[i] < ky[i] ? -1 : 1;
    }
  }
  return 0;
}

/* Whether runs-only `plan`'s runs stand for exactly the copies of the
 * explicit plan of the same request, planned here apart (with copies,
 * without runs): the same batches, and each batch's runs, expanded and
 * sorted by the explicit key, its copies. *expanded: the copies the
 * runs stand for. */
static bool transfer_runs_match(transfer_scenario *t,
                                const reshard_transfer_plan *plan,
                                size_t *expanded) {
  reshard_arena arena;
  reshard_arena_init(&arena, 0);
  reshard_error err;
  reshard_transfer_plan explicit_plan;
  reshard_pooled_memory target = {&t->target_bound, t->target_pool.block_ids,
                                  t->target_pool.block_count};
  reshard_transfer_request request = t->request;
  request.pooled = &target;
  request.runs = false;
  request.omit_copies = false;
  bool match = reshard_plan_transfer(&request, &arena, &explicit_plan, &err) ==
                   RESHARD_OK &&
               plan->runs.batch_count == explicit_plan.batch_count &&
               plan->batch_count == explicit_plan.batch_count;
  reshard_copy *copies =
      RESHARD_ARENA_ARRAY(&arena, reshard_copy, explicit_plan.copy_count + 1);
  match = match && copies != NULL;
  *expanded = 0;
  for (size_t b = 0; match && b < explicit_plan.batch_count; b++) {
    const reshard_batch *batch = &explicit_plan.batches[b];
    size_t n = 0;
    for (size_t i = plan->runs.batch_first[b];
         match && i < plan->runs.batch_first[b + 1]; i++) {
      const reshard_run *run = &plan->runs.runs[i];
      for (uint64_t k = 0; match && k < run->count; k++) {
        match = n < batch->count;
        if (match) {
          copies[n++] = reshard_run_copy(run, k);
        }
      }
    }
    *expanded += n;
    match = match && n == batch->count;
    if (match) {
      qsort(copies, n, sizeof *copies, compare_transfer_copies);
      match = memcmp(copies, explicit_plan.copies + batch->first,
                     n * sizeof *copies) == 0;
    }
  }
  match = match && *expanded == explicit_plan.copy_count;
  reshard_arena_destroy(&arena);
  return match;
}

/* Plans `t` `count` times, each call binding the target's block table
 * over its pool (as the daemon does per call) and planning in a fresh
 * arena; with `runs` the plan is of runs only (omit_copies, as the
 * daemon asks), and the first one's runs are checked against the
 * explicit plan (transfer_runs_match). */
static int time_transfer(transfer_scenario *t, bool runs, int count,
                         transfer_timing *out) {
  double *samples = malloc(sizeof(double) * (size_t)count);
  if (samples == NULL) {
    return -1;
  }
  memset(out, 0, sizeof *out);
  out->runs_match = true;
  t->request.runs = runs;
  t->request.omit_copies = runs;
  int failed = 0;
  for (int r = 0; r < count && !failed; r++) {
    reshard_arena arena;
    reshard_arena_init(&arena, 0);
    reshard_error err;
    reshard_transfer_plan plan;
    reshard_pooled_memory target = {&t->target_bound, t->target_pool.block_ids,
                                    t->target_pool.block_count};
    t->request.pooled = &target; /* as the daemon gives it */
    double start = bench_now_ns();
    reshard_status status =
        reshard_plan_transfer(&t->request, &arena, &plan, &err);
    samples[r] = bench_now_ns() - start;
    t->request.pooled = NULL;
    if (status != RESHARD_OK) {
      fprintf(stderr, "transfer plan failed: %s: %s\n",
              reshard_status_name(status), err.message);
      failed = 1;
    } else if (r == 0) {
      out->copies = plan.copy_count;
      out->before = (size_t)plan.copies_before_coalescing;
      out->batches = plan.batch_count;
      out->sources = plan.source_count;
      out->bytes = plan.bytes;
      out->repeated = plan.regions_repeated;
      if (runs) {
        /* Runs stand for exactly the explicit copies, batch by batch. */
        out->runs = plan.runs.run_count;
        out->direct = plan.direct;
        out->runs_match = transfer_runs_match(t, &plan, &out->expanded);
      }
    }
    reshard_arena_destroy(&arena);
  }
  t->request.runs = false;
  t->request.omit_copies = false;
  if (!failed) {
    out->cold_ns = samples[0];
    bench_sort_samples(samples + 1, (size_t)(count - 1));
    out->warm_ns = bench_median(samples + 1, (size_t)(count - 1));
  }
  free(samples);
  return failed ? -1 : 0;
}

#ifdef RESHARD_BENCH_ENCODE
/* The daemon's transfer plan without runs (varint columns, no copies)
 * behind a function of its own, for an instruction count of it alone
 * (`--toggle-collect='bench_plan_transfer_columns*'`). */
__attribute__((noinline)) static reshard_status
bench_plan_transfer_columns(const reshard_transfer_request *request,
                            reshard_arena *arena, reshard_transfer_plan *plan,
                            reshard_error *err) {
  reshard_transfer_request columns = *request;
  return reshard_plan_transfer(&columns, arena, plan, err);
}

/* Plans `t` `count` times and encodes the PlanTransferResponse as the
 * daemon does without runs, timing both: with `columns` the planner
 * writes the varint columns while batching and the response is written
 * around them; without, the response is encoded from the copies after
 * planning. *warm_ns is the median of all but the first call; the first
 * call's response bytes go to *bytes (malloc'd, *size long), the most
 * copies its plan held at once to *held (0: it kept them all), its
 * regions repeated as whole batches without their copies to *whole. */
static int time_transfer_response(transfer_scenario *t, bool columns, int count,
                                  double *warm_ns, uint8_t **bytes,
                                  size_t *size, size_t *held, uint64_t *whole) {
  double *samples = malloc(sizeof(double) * (size_t)count);
  if (samples == NULL) {
    return -1;
  }
  *bytes = NULL;
  *size = 0;
  /* The daemon's form keeps no copy: the planner drops them once
   * encoded. */
  t->request.varint_columns = columns;
  t->request.omit_copies = columns;
  int failed = 0;
  for (int r = 0; r < count && !failed; r++) {
    reshard_arena arena;
    reshard_arena_init(&arena, 0);
    reshard_error err;
    reshard_transfer_plan plan;
    reshard_pooled_memory target = {&t->target_bound, t->target_pool.block_ids,
                                    t->target_pool.block_count};
    t->request.pooled = &target;
    reshard_transfer_response response;
    uint8_t *out = NULL;
    double start = bench_now_ns();
    reshard_status status =
        columns ? bench_plan_transfer_columns(&t->request, &arena, &plan, &err)
                : reshard_plan_transfer(&t->request, &arena, &plan, &err);
    if (status == RESHARD_OK &&
        (status = reshard_transfer_response_measure(
             &plan, t->pools, &t->target_shell, t->source_placement_id,
             t->target_placement_id, columns ? &plan.columns : NULL, &arena,
             &response)) == RESHARD_OK &&
        (out = malloc(response.size + 1)) != NULL) {
      reshard_transfer_response_write(&response, out);
    }
    samples[r] = bench_now_ns() - start;
    t->request.pooled = NULL;
    if (status != RESHARD_OK || out == NULL) {
      fprintf(stderr, "transfer response failed: %s\n",
              reshard_status_name(status));
      failed = 1;
    } else if (r == 0) {
      *bytes = out;
      *size = response.size;
      *held = plan.copies_held;
      *whole = plan.regions_unwritten;
      out = NULL;
    }
    free(out);
    reshard_arena_destroy(&arena);
  }
  t->request.varint_columns = false;
  t->request.omit_copies = false;
  if (!failed) {
    bench_sort_samples(samples + 1, (size_t)(count - 1));
    *warm_ns = bench_median(samples + 1, (size_t)(count - 1));
  }
  free(samples);
  return failed ? -1 : 0;
}

/* The median time to encode the PlanTransferResponse of `t`'s plan with
 * runs (runs only, as the daemon asks), measured and written as the daemon
 * does: the encoder's arena from a chunk pool, the plan made once per
 * call and not timed. */
static int time_transfer_runs_response(transfer_scenario *t, int count,
                                       double *median_ns) {
  double *samples = malloc(sizeof(double) * (size_t)count);
  reshard_chunk_pool *pool = reshard_chunk_pool_create(16u << 20);
  uint8_t *out = NULL;
  size_t room = 0;
  int failed = samples == NULL || pool == NULL;
  t->request.runs = true;
  t->request.omit_copies = true;
  for (int r = 0; r < count && !failed; r++) {
    reshard_arena arena;
    reshard_arena_init_from(&arena, 64 * 1024, reshard_chunk_pool_source(pool));
    reshard_error err;
    reshard_transfer_plan plan;
    reshard_pooled_memory target = {&t->target_bound, t->target_pool.block_ids,
                                    t->target_pool.block_count};
    t->request.pooled = &target;
    reshard_status status =
        reshard_plan_transfer(&t->request, &arena, &plan, &err);
    t->request.pooled = NULL;
    reshard_transfer_response response;
    double start = bench_now_ns();
    if (status == RESHARD_OK &&
        (status = reshard_transfer_response_measure(
             &plan, t->pools, &t->target_shell, t->source_placement_id,
             t->target_placement_id, NULL, &arena, &response)) == RESHARD_OK) {
      if (response.size > room) {
        /* Outside the timing: the daemon writes into its send buffer. */
        free(out);
        room = response.size;
        out = malloc(room);
        start = bench_now_ns();
        status = reshard_transfer_response_measure(
            &plan, t->pools, &t->target_shell, t->source_placement_id,
            t->target_placement_id, NULL, &arena, &response);
      }
      if (out != NULL && status == RESHARD_OK) {
        reshard_transfer_response_write(&response, out);
      }
    }
    samples[r] = bench_now_ns() - start;
    if (status != RESHARD_OK || out == NULL) {
      fprintf(stderr, "transfer runs response failed: %s\n",
              reshard_status_name(status));
      failed = 1;
    }
    reshard_arena_destroy(&arena);
  }
  t->request.runs = false;
  t->request.omit_copies = false;
  if (!failed) {
    bench_sort_samples(samples, (size_t)count);
    *median_ns = bench_median(samples, (size_t)count);
  }
  free(out);
  reshard_chunk_pool_free(pool);
  free(samples);
  return failed ? -1 : 0;
}

#else
/* Without the daemon's encoder (-DRESHARD_BUILD_DAEMON=OFF) the response
 * columns are not timed: they print as zero. */
static int time_transfer_response(transfer_scenario *t, bool columns, int count,
                                  double *warm_ns, uint8_t **bytes,
                                  size_t *size, size_t *held, uint64_t *whole) {
  (void)t, (void)columns, (void)count;
  *warm_ns = 0;
  *held = 0;
  *whole = 0;
  *bytes = NULL;
  *size = 0;
  return 0;
}

static int time_transfer_runs_response(transfer_scenario *t, int count,
                                       double *median_ns) {
  (void)t, (void)count;
  *median_ns = 0;
  return 0;
}
#endif

/* One row per selected T scenario: the explicit plan and the plan with
 * runs. Returns the rows that failed; runs that do not expand to the
 * explicit plan's copies print MISMATCH and fail. */
static int transfer_table(const char *only, uint64_t tokens, int count) {
  int failures = 0;
  bool header = false;
  /* RESHARD_BENCH_TRANSFER_FORM=explicit or =runs: that form `count`
   * times, the other twice, no response tables, so a profile or an
   * instruction count is of one form (docs/performance.md, Round 23). */
  const char *form = getenv("RESHARD_BENCH_TRANSFER_FORM");
  bool form_explicit = form != NULL && strcmp(form, "explicit") == 0;
  bool form_runs = form != NULL && strcmp(form, "runs") == 0;
  for (size_t i = 0; i < sizeof transfer_specs / sizeof transfer_specs[0];
       i++) {
    const transfer_spec *spec = &transfer_specs[i];
    if (!transfer_selected(spec, only)) {
      continue;
    }
    if (!header) {
      printf("\ntransfer plans (SPEC §2.6, §6 T rows: source pools of every "
             "prefill participant, one shared scattered table; the first "
             "decode participant's pool and table; per call the target table "
             "bound, then the plan; fresh arena; cold = first call, warm = "
             "median of the other %d): explicit | runs only (no copies "
             "kept, as the daemon asks; checked against the explicit plan) | "
             "plan and response without runs, warm: encoded from the copies "
             "after planning, or around the varint columns the planner "
             "wrote while batching, dropping each copy once encoded (the "
             "daemon's; the same bytes, checked; held: the most copies it "
             "held at once; whole: regions repeated as whole batches, their "
             "copies never written) | the response with runs, encoded from the "
             "runs "
             "(median, the plan not timed) | regions written as the region "
             "before them renamed, not walked: explicit / runs only\n",
             count - 1);
      printf("%-16s %6s %7s %5s %8s %8s %7s %12s | %9s %9s %7s | %7s %9s "
             "%9s %7s %6s | %9s %9s %7s %5s %8s %5s | %9s %7s | %9s\n",
             "scenario", "tokens", "pools", "read", "before", "after",
             "batches", "bytes", "cold", "warm", "ns/cp", "runs", "cold",
             "warm", "ns/run", "cp/run", "copies", "columns", "ns/cp", "x",
             "held", "whole", "runs enc", "ns/run", "repeated");
      header = true;
    }
    reshard_arena arena;
    reshard_arena_init(&arena, 0);
    reshard_error err;
    transfer_scenario t;
    transfer_timing plain, runs;
    double from_copies_ns = 0, columns_ns = 0, runs_response_ns = 0;
    uint8_t *from_copies = NULL, *from_columns = NULL;
    size_t from_copies_size = 0, from_columns_size = 0, held = 0, unused;
    uint64_t whole = 0, unused_whole;
    if (transfer_scenario_build(spec, tokens, 42 + i, &arena, &t, &err)) {
      fprintf(stderr, "%s: %s\n", spec->name, err.message);
      failures++;
    } else if (time_transfer(&t, false, form_runs ? 2 : count, &plain) ||
               time_transfer(&t, true, form_explicit ? 2 : count, &runs) ||
               (form == NULL &&
                (time_transfer_response(&t, false, count, &from_copies_ns,
                                        &from_copies, &from_copies_size,
                                        &unused, &unused_whole) ||
                 time_transfer_response(&t, true, count, &columns_ns,
                                        &from_columns, &from_columns_size,
                                        &held, &whole) ||
                 time_transfer_runs_response(&t, count, &runs_response_ns)))) {
      failures++;
    } else {
      bool same = runs.runs_match && runs.copies == plain.copies;
      bool same_bytes =
          from_copies_size == from_columns_size &&
          (from_copies_size == 0 ||
           memcmp(from_copies, from_columns, from_copies_size) == 0);
      double copies = plain.copies ? (double)plain.copies : 1.0;
      double entries = runs.runs ? (double)runs.runs : 1.0;
      printf("%-16s %6llu %7zu %5zu %8zu %8zu %7zu %12llu | %7.1fus "
             "%7.1fus %7.2f | %7zu %7.1fus %7.1fus %7.2f %6.1f | %7.1fus "
             "%7.1fus %7.2f %5.2f %8zu %5llu | %7.1fus %7.2f | "
             "%4llu/%4llu%s%s%s\n",
             spec->name, (unsigned long long)t.tokens, t.pool_count,
             plain.sources, plain.before, plain.copies, plain.batches,
             (unsigned long long)plain.bytes, plain.cold_ns / 1e3,
             plain.warm_ns / 1e3, plain.warm_ns / copies, runs.runs,
             runs.cold_ns / 1e3, runs.warm_ns / 1e3, runs.warm_ns / entries,
             copies / entries, from_copies_ns / 1e3, columns_ns / 1e3,
             columns_ns / copies,
             columns_ns > 0 ? from_copies_ns / columns_ns : 0.0, held,
             (unsigned long long)whole, runs_response_ns / 1e3,
             runs_response_ns / entries, (unsigned long long)plain.repeated,
             (unsigned long long)runs.repeated,
             runs.direct ? "" : "  (runs sorted)", same ? "" : "  MISMATCH",
             same_bytes ? "" : "  RESPONSE MISMATCH");
      if (!same_bytes) {
        fprintf(stderr,
                "%s: RESPONSE MISMATCH: %zu bytes from the copies, %zu from "
                "the columns\n",
                spec->name, from_copies_size, from_columns_size);
        failures++;
      }
      if (!same) {
        fprintf(stderr,
                "%s: MISMATCH: the runs expand to %zu copies, the explicit "
                "plan has %zu\n",
                spec->name, runs.expanded, plain.copies);
        failures++;
      }
    }
    free(from_copies);
    free(from_columns);
    reshard_arena_destroy(&arena);
  }
  return failures;
}

int main(int argc, char **argv) {
  /* reshard-bench [RUNS [SCENARIO [PAGES]]]: SCENARIO picks rows by name
   * prefix, e.g. "S5" or "T1"; PAGES plans that many pages instead of the
   * spec's (8 is scripts/load.py's S1-8), and for a T scenario that many
   * tokens (128: scripts/load.py's T1-128). */
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
  store_floor_row floor_rows[sizeof scenario_specs / sizeof scenario_specs[0]];
  size_t floor_count = 0;
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
      floor_rows[floor_count++] =
          (store_floor_row){spec->name, (uint64_t)plan.copies_after_coalescing};
    }
    reshard_join_free(template_join);
    reshard_arena_destroy(&arena);
  }
  failures += print_store_floor(floor_rows, floor_count, runs);
#ifdef RESHARD_BENCH_ENCODE
  print_encoding_header();
  failures += each_reader_memory(only, pages, runs, encoding_memory_row);
  printf("\nthe reader's binding, decoded from its wire bytes "
         "(daemon/binding_decode.c) and validated (medians)\n");
  printf("%-16s %-8s | %10s %7s | %10s %7s | %10s %7s\n", "scenario", "memory",
         "bytes", "ranges", "decode", "ns/rng", "validate", "ns/rng");
  failures += each_reader_memory(only, pages, runs, decode_row);
  failures += pooled_tables(only, pages, runs);
#endif
  failures +=
      transfer_table(only, only != NULL && only[0] == 'T' ? pages : 0, runs);
  struct rusage usage;
  getrusage(RUSAGE_SELF, &usage);
  printf("process peak RSS: %.1f MiB\n", (double)usage.ru_maxrss / 1024.0);
  return failures ? 1 : 0;
}
