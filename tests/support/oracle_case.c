/* Whole cases of the oracle (oracle.h): random cases from a seed, the
 * SPEC §6 scenarios S1..S5 and hand-made cases, each built through the
 * library's normalization and checked by running reshard_plan_load;
 * and the format x memory-style matrix the oracle suites replay. */
#include "oracle_internal.h"

#include <inttypes.h>

#include "reshard/identity.h"

/* ------------------------------------------------------------------ */
/* The format x memory-style matrix                                    */
/* ------------------------------------------------------------------ */

void oracle_fill_matrix(oracle_matrix_param *params, bool single_tensor) {
  size_t k = 0;
  for (int f = RESHARD_FORMAT_PLHD; f <= RESHARD_FORMAT_HPLD; f++) {
    for (int s = 0; s < ORACLE_MEM_STYLE_COUNT; s++) {
      params[k++] = (oracle_matrix_param){
          (reshard_format)f, (oracle_memory_style)s, single_tensor};
    }
  }
}

uint64_t oracle_matrix_stream(const oracle_matrix_param *param,
                              oracle_case_opts *opts, unsigned *count) {
  memset(opts, 0, sizeof *opts);
  opts->format = param->format;
  opts->style = param->style;
  uint64_t base;
  if (param->single_tensor) {
    /* 18 x 6 cases with no V component anywhere. */
    opts->max_sources = 2;
    opts->single_tensor = true;
    base = 200;
    *count = 6;
  } else {
    /* 18 x 60 cases: random topologies on both sides, 1-3 candidate
     * layouts, misses, preferences and mismatched candidates. */
    opts->max_sources = 3;
    opts->selection_twists = true;
    base = 100;
    *count = 60;
  }
  return base + (uint64_t)param->format * 10 + param->style;
}

/* ------------------------------------------------------------------ */
/* Whole cases                                                         */
/* ------------------------------------------------------------------ */

static bool lib_failed(char *msg, size_t msg_size, const char *step,
                       const reshard_error *err) {
  return failf(msg, msg_size, "%s rejected a valid input: %s: %s", step,
               reshard_status_name(err->code), err->message);
}

static void describe_topology(char *buf, size_t size,
                              const oracle_topology *t) {
  snprintf(buf, size,
           "dp%" PRIu64 " pp%" PRIu64 " tp%" PRIu64 " groups%" PRIu64, t->dp,
           t->pp, t->tp, t->head_groups);
}

static void append(char *buf, size_t size, const char *format, ...)
    __attribute__((format(printf, 3, 4)));

static void append(char *buf, size_t size, const char *format, ...) {
  size_t used = strlen(buf);
  if (used + 1 >= size) {
    return;
  }
  va_list args;
  va_start(args, format);
  vsnprintf(buf + used, size - used, format, args);
  va_end(args);
}

static void describe_descriptor(char *buf, size_t size,
                                const reshard_descriptor *d) {
  append(buf, size,
         "layers %zu [%" PRIu64 "..%" PRIu64 "] %s itemsize %" PRIu64
         " page %" PRIu64 " heads %" PRIu64 " dims %" PRIu64 "/%" PRIu64 "; ",
         d->layer_count, d->global_layer_ids[0],
         d->global_layer_ids[d->layer_count - 1], d->dtype, d->itemsize,
         d->page_size, d->total_kv_heads, d->key_head_dim, d->value_head_dim);
}

/* Adds a layout as a source of the case when its id is new. */
static bool case_add_source(oracle_case *c, const reshard_layout *layout,
                            char *msg, size_t msg_size, bool *added) {
  reshard_error err;
  reshard_error_clear(&err);
  size_t i = c->source_count;
  *added = false;
  if (i >= ORACLE_MAX_SOURCES) {
    return true;
  }
  c->layouts[i] = *layout;
  if (reshard_layout_id(&c->layouts[i], c->layout_ids[i], &err)) {
    return lib_failed(msg, msg_size, "reshard_layout_id", &err);
  }
  for (size_t k = 0; k < i; k++) {
    if (strcmp(c->layout_ids[k], c->layout_ids[i]) == 0) {
      return true;
    }
  }
  c->sources[i].layout = &c->layouts[i];
  c->sources[i].layout_id = c->layout_ids[i];
  c->sources[i].join = NULL;
  c->source_count++;
  *added = true;
  return true;
}

static bool case_upload_layout(oracle_case *c, oracle_rng *rng,
                               const oracle_topology *writer,
                               reshard_format format, reshard_layout *out,
                               char *msg, size_t msg_size) {
  reshard_error err;
  reshard_error_clear(&err);
  reshard_placement *wp = anew(&c->arena, 1, sizeof *wp);
  oracle_build_placement(&c->arena, rng, &c->descriptor, writer, "w", wp);
  if (reshard_placement_normalize(wp, &c->arena, &err)) {
    return lib_failed(msg, msg_size, "reshard_placement_normalize(writer)",
                      &err);
  }
  bool has_dp = rng != NULL && oracle_rng_chance(rng, 50);
  uint64_t dp = has_dp ? oracle_rng_between(rng, 0, writer->dp - 1) : 0;
  reshard_upload_plan up;
  memset(&up, 0, sizeof up);
  reshard_limits limits = reshard_limits_default();
  if (reshard_plan_upload(wp, format, has_dp, dp, &limits, &c->arena, &up,
                          &err)) {
    return lib_failed(msg, msg_size, "reshard_plan_upload", &err);
  }
  if (!oracle_check_upload(wp, format, dp, &up, msg, msg_size)) {
    return false;
  }
  *out = up.layout;
  return true;
}

static bool case_finish(oracle_case *c, char *msg, size_t msg_size) {
  for (size_t s = 0; s < c->source_count; s++) {
    if (!oracle_check_layout_canonical(&c->layouts[s], msg, msg_size)) {
      return false;
    }
  }
  return true;
}

bool oracle_case_build(oracle_case *c, uint64_t seed,
                       const oracle_case_opts *opts, char *msg,
                       size_t msg_size) {
  memset(c, 0, sizeof *c);
  reshard_arena_init(&c->arena, 0);
  c->seed = seed;
  oracle_rng rng;
  oracle_rng_seed(&rng, seed);
  reshard_error err;
  reshard_error_clear(&err);
  char topo[128];

  oracle_random_descriptor(&rng, &c->arena, opts->single_tensor,
                           &c->descriptor);
  snprintf(c->description, sizeof c->description, "seed 0x%016" PRIx64 "; ",
           seed);
  describe_descriptor(c->description, sizeof c->description, &c->descriptor);

  oracle_topology reader;
  if (opts->reader != NULL) {
    reader = *opts->reader;
  } else {
    oracle_random_topology(&rng, &c->descriptor, &reader);
  }
  oracle_build_placement(&c->arena, &rng, &c->descriptor, &reader, "r",
                         &c->reader);
  if (reshard_placement_normalize(&c->reader, &c->arena, &err)) {
    return lib_failed(msg, msg_size, "reshard_placement_normalize(reader)",
                      &err);
  }
  describe_topology(topo, sizeof topo, &reader);
  append(c->description, sizeof c->description, "reader %s; ", topo);

  /* The reader participant: one with layers. */
  size_t with_layers = 0;
  for (size_t i = 0; i < c->reader.part_count; i++) {
    with_layers += c->reader.parts[i].layer_count > 0;
  }
  size_t pick = (size_t)oracle_rng_between(&rng, 0, with_layers - 1);
  for (size_t i = 0; i < c->reader.part_count; i++) {
    if (c->reader.parts[i].layer_count > 0 && pick-- == 0) {
      c->participant = &c->reader.parts[i];
      break;
    }
  }
  append(c->description, sizeof c->description,
         "participant %s heads %" PRIu64 "+%" PRIu64 " replica %" PRIu64
         "/%" PRIu64 " layers %zu; ",
         c->participant->participant_id, c->participant->head_start,
         c->participant->head_count, c->participant->replica_ordinal,
         c->participant->replica_count, c->participant->layer_count);

  /* Sources. */
  unsigned max_sources = opts->max_sources ? opts->max_sources : 1;
  if (max_sources > ORACLE_MAX_SOURCES - 1) {
    max_sources = ORACLE_MAX_SOURCES - 1;
  }
  unsigned want = (unsigned)oracle_rng_between(&rng, 1, max_sources);
  for (unsigned s = 0; s < want; s++) {
    reshard_format format =
        s == 0 ? opts->format
               : (reshard_format)oracle_rng_between(&rng, RESHARD_FORMAT_PLHD,
                                                    RESHARD_FORMAT_HPLD);
    reshard_layout layout;
    const char *origin;
    if (oracle_rng_chance(&rng, 50)) {
      oracle_topology writer;
      if (opts->writer != NULL) {
        writer = *opts->writer;
      } else {
        oracle_random_topology(&rng, &c->descriptor, &writer);
      }
      if (!case_upload_layout(c, &rng, &writer, format, &layout, msg,
                              msg_size)) {
        return false;
      }
      describe_topology(topo, sizeof topo, &writer);
      origin = "upload";
    } else {
      oracle_random_layout(&rng, &c->arena, &c->descriptor, format, &layout);
      reshard_limits limits = reshard_limits_default();
      if (reshard_layout_normalize(&layout, &limits, "layout", &c->arena,
                                   &err)) {
        return lib_failed(msg, msg_size, "reshard_layout_normalize", &err);
      }
      snprintf(topo, sizeof topo, "%zu shards", layout.shard_count);
      origin = "random";
    }
    bool added;
    if (!case_add_source(c, &layout, msg, msg_size, &added)) {
      return false;
    }
    if (added) {
      append(c->description, sizeof c->description, "source %zu %s %s (%s); ",
             c->source_count - 1, format_name(format), origin, topo);
    }
  }
  size_t good = c->source_count;

  /* A candidate whose descriptor differs from the target's. */
  size_t mismatched = SIZE_MAX;
  if (opts->selection_twists && oracle_rng_chance(&rng, 25)) {
    reshard_layout other = c->layouts[0];
    other.descriptor =
        oracle_descriptor_clone(&c->arena, NULL, &c->layouts[0].descriptor);
    switch (oracle_rng_between(&rng, 0, 2)) {
    case 0:
      other.descriptor.dtype = "int-other";
      break;
    case 1:
      other.descriptor.page_size += 1;
      break;
    default:
      other.descriptor.key_head_dim += 1;
      break;
    }
    bool added;
    if (!case_add_source(c, &other, msg, msg_size, &added)) {
      return false;
    }
    if (added) {
      mismatched = c->source_count - 1;
      append(c->description, sizeof c->description,
             "source %zu mismatched descriptor; ", mismatched);
    }
  }

  /* Pages and their candidates. */
  uint64_t pages = oracle_rng_between(&rng, 1, 4);
  size_t *start = anew(&c->arena, pages + 1, sizeof *start);
  size_t *cands = anew(&c->arena, pages * (c->source_count + 1), sizeof *cands);
  uint64_t miss = UINT64_MAX;
  if (opts->selection_twists && oracle_rng_chance(&rng, 30)) {
    miss = oracle_rng_between(&rng, 0, pages - 1);
    if (miss == 0 && !oracle_rng_chance(&rng, 15)) {
      miss = UINT64_MAX;
    }
  }
  size_t n = 0;
  for (uint64_t p = 0; p < pages; p++) {
    start[p] = n;
    size_t first = n;
    if (p == miss) {
      /* no candidate at all, or (not on the first page) only one whose
       * descriptor differs */
      if (p > 0 && mismatched != SIZE_MAX && oracle_rng_chance(&rng, 50)) {
        cands[n++] = mismatched;
      }
    } else {
      for (size_t s = 0; s < good; s++) {
        if (oracle_rng_chance(&rng, 60)) {
          cands[n++] = s;
        }
      }
      if (n == first) {
        cands[n++] = (size_t)oracle_rng_between(&rng, 0, good - 1);
      }
      if (mismatched != SIZE_MAX && oracle_rng_chance(&rng, 40)) {
        cands[n++] = mismatched;
      }
      oracle_rng_shuffle(&rng, cands + first, n - first, sizeof *cands);
    }
  }
  start[pages] = n;
  append(c->description, sizeof c->description, "pages %" PRIu64, pages);
  if (miss != UINT64_MAX) {
    append(c->description, sizeof c->description, " (miss at %" PRIu64 ")",
           miss);
  }
  append(c->description, sizeof c->description, "; ");

  /* Preferences. */
  const char **preferred = NULL;
  size_t preferred_count = 0;
  if (opts->selection_twists && oracle_rng_chance(&rng, 35)) {
    preferred = anew(&c->arena, c->source_count + 2, sizeof *preferred);
    if (oracle_rng_chance(&rng, 30)) {
      preferred[preferred_count++] =
          "sha256:0000000000000000000000000000000000000000000000000000000000000"
          "000";
    }
    if (mismatched != SIZE_MAX && oracle_rng_chance(&rng, 50)) {
      preferred[preferred_count++] = c->layout_ids[mismatched];
    }
    size_t *order = xmalloc(good * sizeof *order);
    for (size_t s = 0; s < good; s++) {
      order[s] = s;
    }
    oracle_rng_shuffle(&rng, order, good, sizeof *order);
    size_t k = (size_t)oracle_rng_between(&rng, 1, good);
    for (size_t i = 0; i < k; i++) {
      preferred[preferred_count++] = c->layout_ids[order[i]];
    }
    free(order);
    append(c->description, sizeof c->description, "%zu preferred ids; ",
           preferred_count);
  }

  /* Reader memory. */
  oracle_memory_opts mem;
  memset(&mem, 0, sizeof mem);
  mem.style = opts->random_style ? (oracle_memory_style)oracle_rng_between(
                                       &rng, 0, ORACLE_MEM_STYLE_COUNT - 1)
                                 : opts->style;
  mem.scatter_in_runs = opts->scatter_in_runs;
  if (opts->page_blocks) {
    mem.block_tokens = c->descriptor.page_size;
    mem.region_count = 1;
  }
  oracle_build_binding(&rng, &c->arena, &c->descriptor, c->participant, pages,
                       &mem, &c->binding);
  append(c->description, sizeof c->description,
         "memory %s (%zu regions, %zu ranges); ",
         oracle_memory_style_name(mem.style), c->binding.region_count,
         c->binding.range_count);

  /* Some sources come with a prebuilt join (a cached template). */
  for (size_t s = 0; s < good; s++) {
    if (oracle_rng_chance(&rng, 25)) {
      c->prebuilt[s] = reshard_join_build(&c->layouts[s], c->participant, &err);
      if (c->prebuilt[s] == NULL) {
        return lib_failed(msg, msg_size, "reshard_join_build", &err);
      }
      c->sources[s].join = c->prebuilt[s];
      append(c->description, sizeof c->description, "join %zu prebuilt; ", s);
    }
  }

  reshard_load_request *q = &c->request;
  memset(q, 0, sizeof *q);
  q->placement = &c->reader;
  uint64_t lowest = UINT64_MAX;
  for (size_t i = 0; i < c->reader.part_count; i++) {
    lowest = min_u64(lowest, c->reader.parts[i].rank.dp);
  }
  q->has_dp_rank =
      c->participant->rank.dp != lowest || oracle_rng_chance(&rng, 50);
  q->dp_rank = c->participant->rank.dp;
  q->binding = &c->binding;
  q->page_count = pages;
  q->sources = c->sources;
  q->source_count = c->source_count;
  q->page_source_start = start;
  q->page_sources = cands;
  q->preferred_layout_ids = preferred;
  q->preferred_count = preferred_count;
  q->limits = reshard_limits_default();
  if (opts->max_batch_operations) {
    q->limits.max_batch_operations = opts->max_batch_operations;
  }
  if (opts->max_batch_bytes) {
    q->limits.max_batch_bytes = opts->max_batch_bytes;
  }
  append(c->description, sizeof c->description,
         "batch limits %" PRIu64 " ops / %" PRIu64 " bytes",
         q->limits.max_batch_operations, q->limits.max_batch_bytes);
  return case_finish(c, msg, msg_size);
}

static bool scenario_build(oracle_case *c, int scenario, uint64_t pages,
                           size_t participant, const oracle_memory_style *style,
                           char *msg, size_t msg_size) {
  memset(c, 0, sizeof *c);
  reshard_arena_init(&c->arena, 0);
  c->seed = 0x5ce7a110ull + (uint64_t)scenario;
  oracle_rng rng;
  oracle_rng_seed(&rng, c->seed);
  reshard_error err;
  reshard_error_clear(&err);

  oracle_topology writer = {1, 1, 1, 0}, reader = {1, 1, 1, 0};
  reshard_format format = RESHARD_FORMAT_PLHD;
  oracle_memory_opts mem = {ORACLE_MEM_PAGED_SMALL, 0, 1, false};
  switch (scenario) {
  case 1: /* llama3-8b */
    oracle_fixed_descriptor(&c->arena, 32, "bf16", 2, 16, 8, 128, 128,
                            &c->descriptor);
    writer.tp = 1;
    reader.tp = 2;
    format = RESHARD_FORMAT_PLHD;
    mem.block_tokens = 16;
    break;
  case 2: /* llama3-70b */
    oracle_fixed_descriptor(&c->arena, 80, "bf16", 2, 64, 8, 128, 128,
                            &c->descriptor);
    writer.tp = 8;
    reader.tp = 4;
    reader.pp = 2;
    format = RESHARD_FORMAT_LPHD;
    mem.block_tokens = 64;
    break;
  case 3: /* qwen2.5-72b */
    oracle_fixed_descriptor(&c->arena, 80, "bf16", 2, 32, 8, 128, 128,
                            &c->descriptor);
    writer.tp = 4;
    reader.tp = 16;
    reader.head_groups = 8;
    format = RESHARD_FORMAT_HPLD;
    mem.style = ORACLE_MEM_HND;
    mem.block_tokens = 16;
    break;
  case 4: /* deepseek-v3 MLA */
    oracle_fixed_descriptor(&c->arena, 61, "bf16", 2, 64, 1, 576, 0,
                            &c->descriptor);
    writer.tp = 8;
    reader.tp = 4;
    reader.pp = 2;
    format = RESHARD_FORMAT_PLHD;
    mem.block_tokens = 64;
    break;
  case 5: /* llama3-405b */
    oracle_fixed_descriptor(&c->arena, 126, "fp8", 1, 128, 8, 128, 128,
                            &c->descriptor);
    writer.tp = 8;
    writer.pp = 2;
    reader.tp = 8;
    reader.pp = 4;
    format = RESHARD_FORMAT_LPHD;
    mem.block_tokens = 128;
    break;
  default:
    return failf(msg, msg_size, "unknown scenario %d", scenario);
  }
  if (style != NULL) {
    mem.style = *style;
  }
  snprintf(c->description, sizeof c->description,
           "scenario S%d, %" PRIu64 " pages, participant #%zu, memory %s; ",
           scenario, pages, participant, oracle_memory_style_name(mem.style));
  describe_descriptor(c->description, sizeof c->description, &c->descriptor);

  oracle_build_placement(&c->arena, NULL, &c->descriptor, &reader, "r",
                         &c->reader);
  if (reshard_placement_normalize(&c->reader, &c->arena, &err)) {
    return lib_failed(msg, msg_size, "reshard_placement_normalize(reader)",
                      &err);
  }
  c->participant = &c->reader.parts[participant % c->reader.part_count];
  append(c->description, sizeof c->description,
         "participant %s heads %" PRIu64 "+%" PRIu64 " replica %" PRIu64
         "/%" PRIu64 " layers %zu; ",
         c->participant->participant_id, c->participant->head_start,
         c->participant->head_count, c->participant->replica_ordinal,
         c->participant->replica_count, c->participant->layer_count);

  reshard_layout layout;
  if (!case_upload_layout(c, NULL, &writer, format, &layout, msg, msg_size)) {
    return false;
  }
  bool added;
  if (!case_add_source(c, &layout, msg, msg_size, &added)) {
    return false;
  }
  oracle_build_binding(&rng, &c->arena, &c->descriptor, c->participant, pages,
                       &mem, &c->binding);
  size_t *start = anew(&c->arena, pages + 1, sizeof *start);
  size_t *cands = anew(&c->arena, pages, sizeof *cands);
  for (uint64_t p = 0; p < pages; p++) {
    start[p] = p;
    cands[p] = 0;
  }
  start[pages] = pages;

  reshard_load_request *q = &c->request;
  memset(q, 0, sizeof *q);
  q->placement = &c->reader;
  q->binding = &c->binding;
  q->page_count = pages;
  q->sources = c->sources;
  q->source_count = c->source_count;
  q->page_source_start = start;
  q->page_sources = cands;
  q->limits = reshard_limits_default();
  append(c->description, sizeof c->description, "%zu ranges",
         c->binding.range_count);
  return case_finish(c, msg, msg_size);
}

bool oracle_scenario_build(oracle_case *c, int scenario, uint64_t pages,
                           size_t participant, char *msg, size_t msg_size) {
  return scenario_build(c, scenario, pages, participant, NULL, msg, msg_size);
}

bool oracle_scenario_build_memory(oracle_case *c, int scenario, uint64_t pages,
                                  size_t participant, oracle_memory_style style,
                                  char *msg, size_t msg_size) {
  return scenario_build(c, scenario, pages, participant, &style, msg, msg_size);
}

bool oracle_manual_case(oracle_case *c, const reshard_descriptor *desc,
                        reshard_format format, const reshard_shard *shards,
                        size_t shard_count, const reshard_region *regions,
                        size_t region_count,
                        const reshard_binding_range *ranges, size_t range_count,
                        uint64_t pages, char *msg, size_t msg_size) {
  memset(c, 0, sizeof *c);
  reshard_arena_init(&c->arena, 0);
  reshard_error err;
  reshard_error_clear(&err);
  c->descriptor = oracle_descriptor_clone(&c->arena, NULL, desc);
  qsort(c->descriptor.global_layer_ids, c->descriptor.layer_count,
        sizeof(uint64_t), cmp_u64);
  snprintf(c->description, sizeof c->description, "manual %s case; ",
           format_name(format));
  describe_descriptor(c->description, sizeof c->description, &c->descriptor);
  oracle_topology reader = {1, 1, 1, 0};
  oracle_build_placement(&c->arena, NULL, &c->descriptor, &reader, "r",
                         &c->reader);
  if (reshard_placement_normalize(&c->reader, &c->arena, &err)) {
    return lib_failed(msg, msg_size, "reshard_placement_normalize(reader)",
                      &err);
  }
  c->participant = &c->reader.parts[0];

  reshard_layout layout;
  memset(&layout, 0, sizeof layout);
  layout.descriptor = oracle_descriptor_clone(&c->arena, NULL, desc);
  layout.format = format;
  if (shards == NULL) {
    reshard_shard *one = anew(&c->arena, 1, sizeof *one);
    one->layer_ids = anew(&c->arena, desc->layer_count, sizeof(uint64_t));
    memcpy(one->layer_ids, desc->global_layer_ids,
           desc->layer_count * sizeof(uint64_t));
    one->layer_count = desc->layer_count;
    one->head_start = 0;
    one->head_count = desc->total_kv_heads;
    one->key_suffix = "0";
    layout.shards = one;
    layout.shard_count = 1;
  } else {
    layout.shards = anew(&c->arena, shard_count, sizeof *layout.shards);
    for (size_t i = 0; i < shard_count; i++) {
      layout.shards[i] = shards[i];
      layout.shards[i].layer_ids =
          anew(&c->arena, shards[i].layer_count, sizeof(uint64_t));
      memcpy(layout.shards[i].layer_ids, shards[i].layer_ids,
             shards[i].layer_count * sizeof(uint64_t));
    }
    layout.shard_count = shard_count;
  }
  reshard_limits limits = reshard_limits_default();
  if (reshard_layout_normalize(&layout, &limits, "layout", &c->arena, &err)) {
    return lib_failed(msg, msg_size, "reshard_layout_normalize", &err);
  }
  bool added;
  if (!case_add_source(c, &layout, msg, msg_size, &added)) {
    return false;
  }

  memset(&c->binding, 0, sizeof c->binding);
  c->binding.participant_id = c->participant->participant_id;
  c->binding.endpoint = "oracle://manual";
  c->binding.regions = anew(&c->arena, region_count, sizeof(reshard_region));
  memcpy(c->binding.regions, regions, region_count * sizeof(reshard_region));
  c->binding.region_count = region_count;
  c->binding.ranges =
      anew(&c->arena, range_count, sizeof(reshard_binding_range));
  memcpy(c->binding.ranges, ranges,
         range_count * sizeof(reshard_binding_range));
  c->binding.range_count = range_count;

  size_t *start = anew(&c->arena, pages + 1, sizeof *start);
  size_t *cands = anew(&c->arena, pages, sizeof *cands);
  for (uint64_t p = 0; p < pages; p++) {
    start[p] = p;
    cands[p] = 0;
  }
  start[pages] = pages;
  reshard_load_request *q = &c->request;
  memset(q, 0, sizeof *q);
  q->placement = &c->reader;
  q->binding = &c->binding;
  q->page_count = pages;
  q->sources = c->sources;
  q->source_count = c->source_count;
  q->page_source_start = start;
  q->page_sources = cands;
  q->limits = reshard_limits_default();
  return case_finish(c, msg, msg_size);
}

bool oracle_case_run(oracle_case *c, reshard_arena *plan_arena,
                     reshard_load_plan *plan, oracle_exec_stats *stats,
                     char *msg, size_t msg_size) {
  reshard_arena_init(plan_arena, 0);
  memset(plan, 0, sizeof *plan);
  reshard_error err;
  reshard_error_clear(&err);
  if (reshard_plan_load(&c->request, plan_arena, plan, &err)) {
    memset(plan, 0, sizeof *plan);
    return failf(msg, msg_size, "reshard_plan_load failed: %s: %s [%s]",
                 reshard_status_name(err.code), err.message, c->description);
  }
  char inner[ORACLE_MSG_SIZE];
  if (!oracle_check_selection(&c->request, plan, inner, sizeof inner) ||
      !oracle_execute(&c->request, plan, stats, inner, sizeof inner)) {
    return failf(msg, msg_size, "%s [%s]", inner, c->description);
  }
  return true;
}

void oracle_plan_release(oracle_case *c, reshard_arena *plan_arena,
                         reshard_load_plan *plan) {
  if (plan->built_joins != NULL) {
    reshard_load_plan_free_joins(plan, c->source_count);
  }
  memset(plan, 0, sizeof *plan);
  reshard_arena_destroy(plan_arena);
}

void oracle_case_destroy(oracle_case *c) {
  for (size_t s = 0; s < ORACLE_MAX_SOURCES; s++) {
    if (c->prebuilt[s] != NULL) {
      reshard_join_free(c->prebuilt[s]);
      c->prebuilt[s] = NULL;
    }
  }
  reshard_arena_destroy(&c->arena);
}
