/* The execution oracle of SPEC §2.4. See oracle.h for the contract.
 *
 * Everything that decides what a correct plan is (Part byte positions,
 * fragment strides, granularity of step 3, coalescing, source choice) is
 * computed here from the SPEC's formulas; the library is only used to
 * normalize inputs, compute layout ids and produce the plan under test. */
#include "oracle.h"

#include <inttypes.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "reshard/checked.h"
#include "reshard/identity.h"

/* ------------------------------------------------------------------ */
/* Small utilities                                                     */
/* ------------------------------------------------------------------ */

static uint64_t mix64(uint64_t z) {
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
  return z ^ (z >> 31);
}

static bool failf(char *msg, size_t size, const char *format, ...)
    __attribute__((format(printf, 3, 4)));

static bool failf(char *msg, size_t size, const char *format, ...) {
  if (msg != NULL && size > 0) {
    va_list args;
    va_start(args, format);
    vsnprintf(msg, size, format, args);
    va_end(args);
  }
  return false;
}

static void die(const char *what) {
  fprintf(stderr, "oracle: %s\n", what);
  abort();
}

static void *xmalloc(size_t size) {
  void *p = malloc(size ? size : 1);
  if (p == NULL) {
    die("out of memory");
  }
  return p;
}

static void *xcalloc(size_t count, size_t size) {
  void *p = calloc(count ? count : 1, size ? size : 1);
  if (p == NULL) {
    die("out of memory");
  }
  return p;
}

static void *anew(reshard_arena *arena, size_t count, size_t size) {
  void *p = reshard_arena_calloc(arena, count ? count : 1, size);
  if (p == NULL) {
    die("arena out of memory");
  }
  return p;
}

static char *aprintf(reshard_arena *arena, const char *format, ...)
    __attribute__((format(printf, 2, 3)));

static char *aprintf(reshard_arena *arena, const char *format, ...) {
  char buf[256];
  va_list args;
  va_start(args, format);
  vsnprintf(buf, sizeof buf, format, args);
  va_end(args);
  char *out = reshard_arena_strdup(arena, buf);
  if (out == NULL) {
    die("arena out of memory");
  }
  return out;
}

static uint64_t min_u64(uint64_t a, uint64_t b) {
  return a < b ? a : b;
}

static uint64_t max_u64(uint64_t a, uint64_t b) {
  return a > b ? a : b;
}

static const char *component_name(reshard_component c) {
  return c == RESHARD_COMPONENT_KEY ? "K" : "V";
}

/* hb(component) from the SPEC: dim * itemsize. */
static uint64_t head_bytes(const reshard_descriptor *d, reshard_component c) {
  return (c == RESHARD_COMPONENT_KEY ? d->key_head_dim : d->value_head_dim) *
         d->itemsize;
}

static uint64_t component_dim(const reshard_descriptor *d,
                              reshard_component c) {
  return c == RESHARD_COMPONENT_KEY ? d->key_head_dim : d->value_head_dim;
}

static unsigned components_of(const reshard_descriptor *d) {
  return d->value_head_dim == 0 ? 1u : 2u;
}

static reshard_component component_at(unsigned i) {
  return i == 0 ? RESHARD_COMPONENT_KEY : RESHARD_COMPONENT_VALUE;
}

static const char *format_name(reshard_format f) {
  switch (f) {
  case RESHARD_FORMAT_PLHD:
    return "PLHD";
  case RESHARD_FORMAT_LPHD:
    return "LPHD";
  case RESHARD_FORMAT_HPLD:
    return "HPLD";
  }
  return "?";
}

static int cmp_u64(const void *a, const void *b) {
  uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;
  return x < y ? -1 : x > y;
}

/* ------------------------------------------------------------------ */
/* PRNG                                                                */
/* ------------------------------------------------------------------ */

void oracle_rng_seed(oracle_rng *rng, uint64_t seed) {
  rng->state = seed;
}

uint64_t oracle_rng_next(oracle_rng *rng) {
  rng->state += 0x9e3779b97f4a7c15ull;
  return mix64(rng->state);
}

uint64_t oracle_rng_between(oracle_rng *rng, uint64_t lo, uint64_t hi) {
  uint64_t span = hi - lo + 1;
  if (span == 0) {
    return oracle_rng_next(rng);
  }
  return lo + oracle_rng_next(rng) % span;
}

bool oracle_rng_chance(oracle_rng *rng, unsigned percent) {
  return oracle_rng_next(rng) % 100 < percent;
}

void oracle_rng_shuffle(oracle_rng *rng, void *base, size_t count,
                        size_t size) {
  unsigned char *bytes = base;
  for (size_t i = count; i > 1; i--) {
    size_t j = (size_t)oracle_rng_between(rng, 0, i - 1);
    if (j == i - 1) {
      continue;
    }
    unsigned char *a = bytes + (i - 1) * size, *b = bytes + j * size;
    for (size_t k = 0; k < size; k++) {
      unsigned char t = a[k];
      a[k] = b[k];
      b[k] = t;
    }
  }
}

uint64_t oracle_base_seed(void) {
  const char *text = getenv("RESHARD_ORACLE_SEED");
  if (text != NULL && *text != '\0') {
    char *end = NULL;
    unsigned long long v = strtoull(text, &end, 0);
    if (end != NULL && *end == '\0') {
      return (uint64_t)v;
    }
    fprintf(stderr, "oracle: ignoring malformed RESHARD_ORACLE_SEED=%s\n",
            text);
  }
  return ORACLE_DEFAULT_SEED;
}

uint64_t oracle_case_seed(uint64_t base, uint64_t stream, uint64_t index) {
  return mix64(base ^ mix64(stream * 0x2545f4914f6cdd1dull + 1) ^
               mix64(index + 0x9e3779b97f4a7c15ull));
}

/* Splits `total` into `n` sizes, each at least `min_each` (total >=
 * n * min_each). rng NULL: as even as possible, larger ones first. */
static void split_sizes(oracle_rng *rng, uint64_t total, size_t n,
                        uint64_t min_each, uint64_t *sizes) {
  uint64_t rest = total - (uint64_t)n * min_each;
  for (size_t i = 0; i < n; i++) {
    sizes[i] = min_each;
  }
  if (rng == NULL) {
    for (size_t i = 0; i < n; i++) {
      sizes[i] += rest / n + (i < rest % n ? 1 : 0);
    }
    return;
  }
  bool skewed = oracle_rng_chance(rng, 30);
  for (uint64_t u = 0; u < rest; u++) {
    size_t i = skewed && oracle_rng_chance(rng, 60)
                   ? 0
                   : (size_t)oracle_rng_between(rng, 0, n - 1);
    sizes[i]++;
  }
  if (skewed) {
    oracle_rng_shuffle(rng, sizes, n, sizeof *sizes);
  }
}

/* ------------------------------------------------------------------ */
/* Descriptors                                                         */
/* ------------------------------------------------------------------ */

static const char *dtype_for(uint64_t itemsize) {
  switch (itemsize) {
  case 1:
    return "fp8";
  case 2:
    return "bf16";
  case 4:
    return "fp32";
  default:
    return "raw";
  }
}

void oracle_random_descriptor(oracle_rng *rng, reshard_arena *arena,
                              bool single_tensor, reshard_descriptor *out) {
  memset(out, 0, sizeof *out);
  /* one case in ten is larger: more layers, heads, tokens and width */
  bool large = oracle_rng_chance(rng, 10);
  size_t n = (size_t)oracle_rng_between(rng, 1, large ? 16 : 8);
  uint64_t *ids = anew(arena, n, sizeof *ids);
  uint64_t next = oracle_rng_chance(rng, 15)
                      ? oracle_rng_between(rng, 1000000000ull, 1ull << 40)
                      : oracle_rng_between(rng, 0, 5);
  for (size_t i = 0; i < n; i++) {
    ids[i] = next;
    next += oracle_rng_chance(rng, 10) ? oracle_rng_between(rng, 100, 100000)
                                       : oracle_rng_between(rng, 1, 4);
  }
  static const uint64_t itemsizes[] = {1, 2, 4};
  out->global_layer_ids = ids;
  out->layer_count = n;
  out->itemsize = itemsizes[oracle_rng_between(rng, 0, 2)];
  out->dtype = dtype_for(out->itemsize);
  if (oracle_rng_chance(rng, 40)) {
    out->page_size = 1ull << oracle_rng_between(rng, 0, large ? 6 : 5);
  } else {
    out->page_size = oracle_rng_between(rng, 1, large ? 64 : 32);
  }
  out->total_kv_heads = oracle_rng_between(rng, 1, large ? 16 : 8);
  out->key_head_dim = oracle_rng_between(rng, 1, large ? 64 : 16);
  if (single_tensor || oracle_rng_chance(rng, 20)) {
    out->value_head_dim = 0;
  } else if (oracle_rng_chance(rng, 50)) {
    out->value_head_dim = out->key_head_dim;
  } else {
    out->value_head_dim = oracle_rng_between(rng, 1, large ? 64 : 16);
  }
}

void oracle_fixed_descriptor(reshard_arena *arena, size_t layer_count,
                             const char *dtype, uint64_t itemsize,
                             uint64_t page_size, uint64_t heads,
                             uint64_t key_dim, uint64_t value_dim,
                             reshard_descriptor *out) {
  memset(out, 0, sizeof *out);
  uint64_t *ids = anew(arena, layer_count, sizeof *ids);
  for (size_t i = 0; i < layer_count; i++) {
    ids[i] = i;
  }
  out->global_layer_ids = ids;
  out->layer_count = layer_count;
  out->dtype = dtype;
  out->itemsize = itemsize;
  out->page_size = page_size;
  out->total_kv_heads = heads;
  out->key_head_dim = key_dim;
  out->value_head_dim = value_dim;
}

reshard_descriptor oracle_descriptor_clone(reshard_arena *arena,
                                           oracle_rng *rng,
                                           const reshard_descriptor *src) {
  reshard_descriptor d = *src;
  d.global_layer_ids = anew(arena, src->layer_count, sizeof(uint64_t));
  memcpy(d.global_layer_ids, src->global_layer_ids,
         src->layer_count * sizeof(uint64_t));
  if (rng != NULL) {
    oracle_rng_shuffle(rng, d.global_layer_ids, d.layer_count,
                       sizeof(uint64_t));
  }
  return d;
}

bool oracle_descriptor_same(const reshard_descriptor *a,
                            const reshard_descriptor *b) {
  if (a->layer_count != b->layer_count || a->itemsize != b->itemsize ||
      a->page_size != b->page_size || a->total_kv_heads != b->total_kv_heads ||
      a->key_head_dim != b->key_head_dim ||
      a->value_head_dim != b->value_head_dim || strcmp(a->dtype, b->dtype)) {
    return false;
  }
  uint64_t *x = xmalloc(a->layer_count * sizeof *x);
  uint64_t *y = xmalloc(a->layer_count * sizeof *y);
  memcpy(x, a->global_layer_ids, a->layer_count * sizeof *x);
  memcpy(y, b->global_layer_ids, a->layer_count * sizeof *y);
  qsort(x, a->layer_count, sizeof *x, cmp_u64);
  qsort(y, a->layer_count, sizeof *y, cmp_u64);
  bool same = memcmp(x, y, a->layer_count * sizeof *x) == 0;
  free(x);
  free(y);
  return same;
}

/* ------------------------------------------------------------------ */
/* Topologies and placements                                           */
/* ------------------------------------------------------------------ */

void oracle_random_topology(oracle_rng *rng, const reshard_descriptor *desc,
                            oracle_topology *out) {
  uint64_t heads = desc->total_kv_heads;
  out->tp = oracle_rng_between(rng, 1, 8);
  if (oracle_rng_chance(rng, 25)) {
    out->tp = min_u64(16, heads * oracle_rng_between(rng, 2, 3));
  }
  out->pp = oracle_rng_chance(rng, 40) ? 1 : oracle_rng_between(rng, 2, 4);
  out->dp = oracle_rng_chance(rng, 25) ? 2 : 1;
  out->head_groups = 0;
  if (oracle_rng_chance(rng, 20)) {
    out->head_groups = oracle_rng_between(rng, 1, min_u64(out->tp, heads));
  }
}

void oracle_build_placement(reshard_arena *arena, oracle_rng *rng,
                            const reshard_descriptor *desc,
                            const oracle_topology *topology, const char *prefix,
                            reshard_placement *out) {
  memset(out, 0, sizeof *out);
  uint64_t heads = desc->total_kv_heads;
  uint64_t groups = topology->head_groups;
  uint64_t max_groups = min_u64(topology->tp, heads);
  if (groups == 0 || groups > max_groups) {
    groups = max_groups;
  }
  uint64_t *head_sizes = xmalloc(groups * sizeof *head_sizes);
  uint64_t *rank_sizes = xmalloc(groups * sizeof *rank_sizes);
  uint64_t *stage_sizes = xmalloc(topology->pp * sizeof *stage_sizes);
  split_sizes(rng, heads, (size_t)groups, 1, head_sizes);
  split_sizes(rng, topology->tp, (size_t)groups, 1, rank_sizes);
  split_sizes(rng, desc->layer_count, (size_t)topology->pp, 0, stage_sizes);

  /* Sorted layer ids, split into contiguous stage chunks. */
  uint64_t *sorted = xmalloc(desc->layer_count * sizeof *sorted);
  memcpy(sorted, desc->global_layer_ids, desc->layer_count * sizeof *sorted);
  qsort(sorted, desc->layer_count, sizeof *sorted, cmp_u64);

  out->resource_id = "res";
  out->revision = "rev";
  out->placement_set_id = "pset";
  out->dp_size = topology->dp;
  out->pp_size = topology->pp;
  out->tp_size = topology->tp;
  out->descriptor = oracle_descriptor_clone(arena, rng, desc);
  out->part_count = (size_t)(topology->dp * topology->pp * topology->tp);
  out->parts = anew(arena, out->part_count, sizeof *out->parts);
  size_t k = 0;
  for (uint64_t dp = 0; dp < topology->dp; dp++) {
    uint64_t layer_first = 0;
    for (uint64_t pp = 0; pp < topology->pp; pp++) {
      uint64_t head_first = 0, rank_first = 0;
      size_t g = 0;
      for (uint64_t tp = 0; tp < topology->tp; tp++) {
        if (tp >= rank_first + rank_sizes[g]) {
          head_first += head_sizes[g];
          rank_first += rank_sizes[g];
          g++;
        }
        reshard_placement_part *part = &out->parts[k++];
        part->participant_id =
            aprintf(arena, "%s-d%" PRIu64 "-p%" PRIu64 "-t%" PRIu64, prefix, dp,
                    pp, tp);
        part->rank.dp = dp;
        part->rank.pp = pp;
        part->rank.tp = tp;
        part->layer_count = (size_t)stage_sizes[pp];
        part->layer_ids = anew(arena, part->layer_count, sizeof(uint64_t));
        memcpy(part->layer_ids, sorted + layer_first,
               part->layer_count * sizeof(uint64_t));
        if (rng != NULL) {
          oracle_rng_shuffle(rng, part->layer_ids, part->layer_count,
                             sizeof(uint64_t));
        }
        part->head_start = head_first;
        part->head_count = head_sizes[g];
        part->replica_ordinal = tp - rank_first;
        part->replica_count = rank_sizes[g];
        if (part->replica_count == 1 && rng != NULL &&
            oracle_rng_chance(rng, 30)) {
          part->replica_count = 0; /* "0 reads as 1" */
        }
      }
      layer_first += stage_sizes[pp];
    }
  }
  if (rng != NULL) {
    oracle_rng_shuffle(rng, out->parts, out->part_count, sizeof *out->parts);
  }
  free(sorted);
  free(head_sizes);
  free(rank_sizes);
  free(stage_sizes);
}

/* ------------------------------------------------------------------ */
/* Layouts                                                             */
/* ------------------------------------------------------------------ */

void oracle_random_layout(oracle_rng *rng, reshard_arena *arena,
                          const reshard_descriptor *desc, reshard_format format,
                          reshard_layout *out) {
  memset(out, 0, sizeof *out);
  out->descriptor = oracle_descriptor_clone(arena, rng, desc);
  out->format = format;
  size_t n = desc->layer_count;
  uint64_t heads = desc->total_kv_heads;
  size_t group_count = (size_t)oracle_rng_between(rng, 1, n);
  size_t *group_of = xmalloc(n * sizeof *group_of);
  if (oracle_rng_chance(rng, 40)) {
    /* contiguous groups in sorted order */
    uint64_t *sizes = xmalloc(group_count * sizeof *sizes);
    split_sizes(rng, n, group_count, 1, sizes);
    size_t i = 0;
    for (size_t g = 0; g < group_count; g++) {
      for (uint64_t j = 0; j < sizes[g]; j++) {
        group_of[i++] = g;
      }
    }
    free(sizes);
  } else {
    for (size_t i = 0; i < n; i++) {
      group_of[i] = (size_t)oracle_rng_between(rng, 0, group_count - 1);
    }
  }
  uint64_t *sorted = xmalloc(n * sizeof *sorted);
  memcpy(sorted, desc->global_layer_ids, n * sizeof *sorted);
  qsort(sorted, n, sizeof *sorted, cmp_u64);

  reshard_shard *shards = anew(arena, n * heads, sizeof *shards);
  size_t shard_count = 0;
  uint64_t *head_sizes = xmalloc(heads * sizeof *head_sizes);
  for (size_t g = 0; g < group_count; g++) {
    size_t members = 0;
    for (size_t i = 0; i < n; i++) {
      members += group_of[i] == g;
    }
    if (members == 0) {
      continue;
    }
    size_t pieces = (size_t)oracle_rng_between(rng, 1, heads);
    split_sizes(rng, heads, pieces, 1, head_sizes);
    uint64_t h = 0;
    for (size_t p = 0; p < pieces; p++) {
      reshard_shard *s = &shards[shard_count++];
      s->layer_ids = anew(arena, members, sizeof(uint64_t));
      s->layer_count = 0;
      for (size_t i = 0; i < n; i++) {
        if (group_of[i] == g) {
          s->layer_ids[s->layer_count++] = sorted[i];
        }
      }
      oracle_rng_shuffle(rng, s->layer_ids, s->layer_count, sizeof(uint64_t));
      s->head_start = h;
      s->head_count = head_sizes[p];
      h += head_sizes[p];
      s->key_suffix = aprintf(arena, "g%zu_h%zu_%" PRIx64, g, p,
                              oracle_rng_next(rng) & 0xffff);
    }
  }
  oracle_rng_shuffle(rng, shards, shard_count, sizeof *shards);
  out->shards = shards;
  out->shard_count = shard_count;
  free(head_sizes);
  free(sorted);
  free(group_of);
}

static int cmp_layer_lists(const uint64_t *a, size_t na, const uint64_t *b,
                           size_t nb) {
  size_t n = na < nb ? na : nb;
  for (size_t i = 0; i < n; i++) {
    if (a[i] != b[i]) {
      return a[i] < b[i] ? -1 : 1;
    }
  }
  return na < nb ? -1 : na > nb;
}

/* Index of `layer` in a sorted list, or -1. */
static ptrdiff_t find_sorted(const uint64_t *ids, size_t n, uint64_t layer) {
  size_t lo = 0, hi = n;
  while (lo < hi) {
    size_t mid = lo + (hi - lo) / 2;
    if (ids[mid] < layer) {
      lo = mid + 1;
    } else {
      hi = mid;
    }
  }
  return lo < n && ids[lo] == layer ? (ptrdiff_t)lo : -1;
}

bool oracle_check_layout_canonical(const reshard_layout *layout, char *msg,
                                   size_t msg_size) {
  const reshard_descriptor *d = &layout->descriptor;
  for (size_t i = 1; i < d->layer_count; i++) {
    if (d->global_layer_ids[i - 1] >= d->global_layer_ids[i]) {
      return failf(msg, msg_size,
                   "normalized descriptor layers not strictly ascending at "
                   "%zu",
                   i);
    }
  }
  for (size_t i = 0; i < layout->shard_count; i++) {
    const reshard_shard *s = &layout->shards[i];
    if (s->layer_count == 0 || s->head_count == 0 ||
        s->head_start + s->head_count > d->total_kv_heads) {
      return failf(msg, msg_size, "shard %zu has an invalid shape", i);
    }
    for (size_t j = 1; j < s->layer_count; j++) {
      if (s->layer_ids[j - 1] >= s->layer_ids[j]) {
        return failf(msg, msg_size,
                     "normalized shard %zu: layers not ascending at %zu", i, j);
      }
    }
    if (i > 0) {
      const reshard_shard *p = &layout->shards[i - 1];
      int c = cmp_layer_lists(p->layer_ids, p->layer_count, s->layer_ids,
                              s->layer_count);
      if (c > 0 || (c == 0 && p->head_start >= s->head_start)) {
        return failf(msg, msg_size,
                     "normalized shards %zu and %zu are not in (layer_ids, "
                     "head_start) order",
                     i - 1, i);
      }
    }
  }
  for (size_t li = 0; li < d->layer_count; li++) {
    uint64_t layer = d->global_layer_ids[li];
    for (uint64_t h = 0; h < d->total_kv_heads; h++) {
      unsigned owners = 0;
      for (size_t i = 0; i < layout->shard_count; i++) {
        const reshard_shard *s = &layout->shards[i];
        if (h >= s->head_start && h < s->head_start + s->head_count &&
            find_sorted(s->layer_ids, s->layer_count, layer) >= 0) {
          owners++;
        }
      }
      if (owners != 1) {
        return failf(msg, msg_size,
                     "layout covers layer %" PRIu64 " head %" PRIu64
                     " %u times",
                     layer, h, owners);
      }
    }
  }
  return true;
}

static int cmp_part_ptr_by_shard(const void *a, const void *b) {
  const reshard_placement_part *x = *(const reshard_placement_part *const *)a;
  const reshard_placement_part *y = *(const reshard_placement_part *const *)b;
  int c = cmp_layer_lists(x->layer_ids, x->layer_count, y->layer_ids,
                          y->layer_count);
  if (c != 0) {
    return c;
  }
  return x->head_start < y->head_start ? -1 : x->head_start > y->head_start;
}

bool oracle_check_upload(const reshard_placement *placement,
                         reshard_format format, uint64_t dp_rank,
                         const reshard_upload_plan *plan, char *msg,
                         size_t msg_size) {
  const reshard_placement_part **writers =
      xcalloc(placement->part_count, sizeof *writers);
  size_t n = 0;
  for (size_t i = 0; i < placement->part_count; i++) {
    const reshard_placement_part *p = &placement->parts[i];
    if (p->rank.dp == dp_rank && p->replica_ordinal == 0 &&
        p->layer_count > 0) {
      writers[n++] = p;
    }
  }
  qsort(writers, n, sizeof *writers, cmp_part_ptr_by_shard);
  bool ok = true;
  const reshard_layout *l = &plan->layout;
  if (l->format != format) {
    ok = failf(msg, msg_size, "upload layout format %d, expected %d",
               (int)l->format, (int)format);
  } else if (!oracle_descriptor_same(&l->descriptor, &placement->descriptor)) {
    ok = failf(msg, msg_size, "upload layout descriptor differs");
  } else if (l->shard_count != n) {
    ok = failf(msg, msg_size, "upload layout has %zu shards, expected %zu",
               l->shard_count, n);
  }
  for (size_t i = 0; ok && i < n; i++) {
    const reshard_shard *s = &l->shards[i];
    const reshard_placement_part *p = writers[i];
    char suffix[64];
    if (placement->pp_size > 1) {
      snprintf(suffix, sizeof suffix, "%" PRIu64 "_%" PRIu64, p->rank.tp,
               p->rank.pp);
    } else {
      snprintf(suffix, sizeof suffix, "%" PRIu64, p->rank.tp);
    }
    if (cmp_layer_lists(s->layer_ids, s->layer_count, p->layer_ids,
                        p->layer_count) != 0 ||
        s->head_start != p->head_start || s->head_count != p->head_count) {
      ok = failf(msg, msg_size,
                 "upload shard %zu does not match writer %s (heads %" PRIu64
                 "+%" PRIu64 " vs %" PRIu64 "+%" PRIu64 ")",
                 i, p->participant_id, s->head_start, s->head_count,
                 p->head_start, p->head_count);
    } else if (strcmp(s->key_suffix, suffix) != 0) {
      ok = failf(msg, msg_size,
                 "upload shard %zu suffix \"%s\", expected \"%s\"", i,
                 s->key_suffix, suffix);
    } else if (plan->part_writers == NULL || plan->part_writers[i] == NULL ||
               strcmp(plan->part_writers[i], p->participant_id) != 0) {
      ok = failf(
          msg, msg_size, "upload part %zu writer \"%s\", expected \"%s\"", i,
          plan->part_writers && plan->part_writers[i] ? plan->part_writers[i]
                                                      : "(null)",
          p->participant_id);
    }
  }
  free(writers);
  return ok;
}

/* ------------------------------------------------------------------ */
/* Runtime bindings                                                    */
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

const char *oracle_memory_style_name(oracle_memory_style style) {
  switch (style) {
  case ORACLE_MEM_CONTIGUOUS:
    return "contiguous";
  case ORACLE_MEM_PAGED_SMALL:
    return "paged-small";
  case ORACLE_MEM_PAGED_LARGE:
    return "paged-large";
  case ORACLE_MEM_HND:
    return "hnd";
  case ORACLE_MEM_PADDED:
    return "padded";
  case ORACLE_MEM_INTERLEAVED:
    return "interleaved";
  }
  return "?";
}

typedef struct chunk {
  uint64_t size;
  size_t first_range;
  size_t range_count;
} chunk;

typedef struct builder {
  oracle_rng *rng;
  const reshard_descriptor *desc;
  const reshard_placement_part *part;
  uint64_t itemsize;
  bool padded;
  reshard_binding_range *ranges;
  size_t range_count, range_capacity;
  chunk *chunks;
  size_t chunk_count, chunk_capacity;
} builder;

static void builder_add_range(builder *b, uint64_t layer, reshard_component c,
                              uint64_t t0, uint64_t nt, uint64_t h0,
                              uint64_t nh, uint64_t offset, uint64_t ts,
                              uint64_t hs) {
  if (b->range_count == b->range_capacity) {
    b->range_capacity = b->range_capacity ? b->range_capacity * 2 : 64;
    b->ranges = realloc(b->ranges, b->range_capacity * sizeof *b->ranges);
    if (b->ranges == NULL) {
      die("out of memory");
    }
  }
  reshard_binding_range *r = &b->ranges[b->range_count++];
  memset(r, 0, sizeof *r);
  r->global_layer_id = layer;
  r->component = c;
  r->token_start = t0;
  r->token_count = nt;
  r->head_start = h0;
  r->head_count = nh;
  r->offset_bytes = offset; /* relative to the chunk for now */
  r->token_stride_bytes = ts;
  r->head_stride_bytes = hs;
}

static void builder_begin_chunk(builder *b) {
  if (b->chunk_count == b->chunk_capacity) {
    b->chunk_capacity = b->chunk_capacity ? b->chunk_capacity * 2 : 64;
    b->chunks = realloc(b->chunks, b->chunk_capacity * sizeof *b->chunks);
    if (b->chunks == NULL) {
      die("out of memory");
    }
  }
  chunk *c = &b->chunks[b->chunk_count++];
  c->size = 0;
  c->first_range = b->range_count;
  c->range_count = 0;
}

static void builder_end_chunk(builder *b, uint64_t size) {
  chunk *c = &b->chunks[b->chunk_count - 1];
  c->size = size;
  c->range_count = b->range_count - c->first_range;
}

/* A random padding of 0..max_units itemsizes when padding is on. */
static uint64_t builder_pad(builder *b, uint64_t max_units) {
  if (!b->padded || max_units == 0) {
    return 0;
  }
  return oracle_rng_between(b->rng, 0, max_units) * b->itemsize;
}

/* One NHD block [token, head, dim] of `block` token slots holding tokens
 * [t0, t0+nt) of (layer, c) at `base` within the current chunk; the
 * participant's heads may be described by several ranges sharing the row.
 * Returns the bytes used. */
static uint64_t builder_nhd_heads(builder *b, uint64_t layer,
                                  reshard_component c, uint64_t t0, uint64_t nt,
                                  uint64_t block, uint64_t base, uint64_t h0,
                                  uint64_t hc) {
  uint64_t hb = head_bytes(b->desc, c);
  uint64_t hs = hb + builder_pad(b, 2);
  uint64_t ts = (hc - 1) * hs + hb + builder_pad(b, 3);
  size_t pieces = 1;
  if (b->padded && hc > 1 && oracle_rng_chance(b->rng, 40)) {
    pieces = (size_t)oracle_rng_between(b->rng, 2, hc);
  }
  uint64_t sizes[64];
  uint64_t *piece_sizes = pieces <= 64 ? sizes : xmalloc(pieces * 8);
  split_sizes(b->rng, hc, pieces, 1, piece_sizes);
  uint64_t h = h0;
  for (size_t p = 0; p < pieces; p++) {
    builder_add_range(b, layer, c, t0, nt, h, piece_sizes[p],
                      base + (h - h0) * hs, ts, hs);
    h += piece_sizes[p];
  }
  if (piece_sizes != sizes) {
    free(piece_sizes);
  }
  return block * ts;
}

static uint64_t builder_nhd_block(builder *b, uint64_t layer,
                                  reshard_component c, uint64_t t0, uint64_t nt,
                                  uint64_t block, uint64_t base) {
  return builder_nhd_heads(b, layer, c, t0, nt, block, base,
                           b->part->head_start, b->part->head_count);
}

/* Every head piece of (layer, c) gets its own token blocking, so head
 * intervals of different ranges split at different tokens. */
static void builder_independent_heads(builder *b, uint64_t layer,
                                      reshard_component c, uint64_t span) {
  uint64_t hc = b->part->head_count;
  size_t pieces = (size_t)oracle_rng_between(b->rng, 2, hc);
  uint64_t sizes[64];
  uint64_t *piece_sizes = pieces <= 64 ? sizes : xmalloc(pieces * 8);
  split_sizes(b->rng, hc, pieces, 1, piece_sizes);
  uint64_t h = b->part->head_start;
  for (size_t p = 0; p < pieces; p++) {
    uint64_t block = oracle_rng_between(b->rng, 1, 2 * b->desc->page_size);
    for (uint64_t t0 = 0; t0 < span; t0 += block) {
      uint64_t nt = min_u64(block, span - t0);
      builder_begin_chunk(b);
      builder_end_chunk(b, builder_nhd_heads(b, layer, c, t0, nt, block, 0, h,
                                             piece_sizes[p]));
    }
    h += piece_sizes[p];
  }
  if (piece_sizes != sizes) {
    free(piece_sizes);
  }
}

/* One HND block [head, token, dim]: one range per head. */
static uint64_t builder_hnd_block(builder *b, uint64_t layer,
                                  reshard_component c, uint64_t t0, uint64_t nt,
                                  uint64_t block, uint64_t base) {
  uint64_t hb = head_bytes(b->desc, c);
  uint64_t h0 = b->part->head_start, hc = b->part->head_count;
  uint64_t ts = hb + builder_pad(b, 2);
  uint64_t head_block = block * ts + builder_pad(b, 4);
  for (uint64_t j = 0; j < hc; j++) {
    /* head_count is 1, so the head stride only has to be >= hb */
    uint64_t hs = hb + builder_pad(b, 5);
    builder_add_range(b, layer, c, t0, nt, h0 + j, 1, base + j * head_block, ts,
                      hs);
  }
  return hc * head_block;
}

void oracle_build_binding(oracle_rng *rng, reshard_arena *arena,
                          const reshard_descriptor *desc,
                          const reshard_placement_part *part,
                          uint64_t page_count, const oracle_memory_opts *opts,
                          reshard_binding *out) {
  builder b;
  memset(&b, 0, sizeof b);
  b.rng = rng;
  b.desc = desc;
  b.part = part;
  b.itemsize = desc->itemsize;
  uint64_t page = desc->page_size;
  uint64_t span = page_count * page;
  oracle_memory_style style = opts->style;
  b.padded = style == ORACLE_MEM_PADDED;

  uint64_t block = opts->block_tokens;
  if (block == 0) {
    switch (style) {
    case ORACLE_MEM_CONTIGUOUS:
      block = span;
      break;
    case ORACLE_MEM_PAGED_SMALL:
      if (page == 1) {
        block = 1;
      } else if (oracle_rng_chance(rng, 40) && page % 4 == 0) {
        block = page / 4;
      } else {
        block = oracle_rng_between(rng, 1, page - 1);
      }
      break;
    case ORACLE_MEM_PAGED_LARGE:
      block = oracle_rng_chance(rng, 40)
                  ? page * oracle_rng_between(rng, 2, 4)
                  : oracle_rng_between(rng, page + 1, 3 * page);
      break;
    case ORACLE_MEM_HND:
    case ORACLE_MEM_PADDED:
    case ORACLE_MEM_INTERLEAVED:
      block = oracle_rng_chance(rng, 20) ? span
                                         : oracle_rng_between(rng, 1, 2 * page);
      break;
    }
  }
  bool hnd = style == ORACLE_MEM_HND ||
             (style == ORACLE_MEM_PADDED && oracle_rng_chance(rng, 35));
  bool paged = style == ORACLE_MEM_PAGED_SMALL ||
               style == ORACLE_MEM_PAGED_LARGE || style == ORACLE_MEM_HND;

  unsigned ncomp = components_of(desc);
  uint64_t blocks = (span + block - 1) / block;
  bool layer_major = oracle_rng_chance(rng, 50);

  if (style == ORACLE_MEM_INTERLEAVED) {
    /* Token-major rows: every (layer, component) segment side by side. */
    size_t segs = part->layer_count * ncomp;
    size_t *order = xmalloc(segs * sizeof *order);
    for (size_t s = 0; s < segs; s++) {
      order[s] = s;
    }
    if (oracle_rng_chance(rng, 50)) {
      oracle_rng_shuffle(rng, order, segs, sizeof *order);
    }
    uint64_t *seg_off = xmalloc(segs * sizeof *seg_off);
    uint64_t row = 0;
    for (size_t k = 0; k < segs; k++) {
      size_t s = order[k];
      seg_off[s] = row;
      row += part->head_count * head_bytes(desc, component_at(s % ncomp));
    }
    for (uint64_t bi = 0; bi < blocks; bi++) {
      uint64_t t0 = bi * block, nt = min_u64(block, span - t0);
      builder_begin_chunk(&b);
      for (size_t s = 0; s < segs; s++) {
        reshard_component c = component_at(s % ncomp);
        builder_add_range(&b, part->layer_ids[s / ncomp], c, t0, nt,
                          part->head_start, part->head_count, seg_off[s], row,
                          head_bytes(desc, c));
      }
      builder_end_chunk(&b, block * row);
    }
    free(order);
    free(seg_off);
  } else if (layer_major) {
    /* One pool per (layer, component); every block its own chunk. */
    for (size_t li = 0; li < part->layer_count; li++) {
      for (unsigned ci = 0; ci < ncomp; ci++) {
        if (b.padded && !hnd && part->head_count > 1 &&
            oracle_rng_chance(rng, 40)) {
          builder_independent_heads(&b, part->layer_ids[li], component_at(ci),
                                    span);
          continue;
        }
        for (uint64_t bi = 0; bi < blocks; bi++) {
          uint64_t t0 = bi * block, nt = min_u64(block, span - t0);
          builder_begin_chunk(&b);
          uint64_t used =
              hnd ? builder_hnd_block(&b, part->layer_ids[li], component_at(ci),
                                      t0, nt, block, 0)
                  : builder_nhd_block(&b, part->layer_ids[li], component_at(ci),
                                      t0, nt, block, 0);
          builder_end_chunk(&b, used);
        }
      }
    }
  } else {
    /* Block-major: one chunk per block holding every (layer, component). */
    for (uint64_t bi = 0; bi < blocks; bi++) {
      uint64_t t0 = bi * block, nt = min_u64(block, span - t0);
      builder_begin_chunk(&b);
      uint64_t used = 0;
      for (size_t li = 0; li < part->layer_count; li++) {
        for (unsigned ci = 0; ci < ncomp; ci++) {
          used += builder_pad(&b, 3);
          used +=
              hnd ? builder_hnd_block(&b, part->layer_ids[li], component_at(ci),
                                      t0, nt, block, used)
                  : builder_nhd_block(&b, part->layer_ids[li], component_at(ci),
                                      t0, nt, block, used);
        }
      }
      builder_end_chunk(&b, used);
    }
  }

  /* Unused pool slots between the used ones. */
  if (paged && b.chunk_count > 0) {
    uint64_t holes = oracle_rng_between(rng, 0, min_u64(b.chunk_count, 8));
    uint64_t slot = b.chunks[0].size;
    for (uint64_t i = 0; i < holes; i++) {
      builder_begin_chunk(&b);
      builder_end_chunk(&b, slot);
    }
  }
  /* Scatter: chunks land in the regions in random order. */
  if (style != ORACLE_MEM_CONTIGUOUS || oracle_rng_chance(rng, 50)) {
    oracle_rng_shuffle(rng, b.chunks, b.chunk_count, sizeof *b.chunks);
  }

  size_t region_count = opts->region_count;
  if (region_count == 0) {
    if (style == ORACLE_MEM_PADDED || style == ORACLE_MEM_INTERLEAVED) {
      region_count = (size_t)oracle_rng_between(rng, 1, 3);
    } else {
      region_count = oracle_rng_chance(rng, 25) ? 2 : 1;
    }
  }
  uint64_t *cursor = xcalloc(region_count, sizeof *cursor);
  char **names = xcalloc(region_count, sizeof *names);
  for (size_t r = 0; r < region_count; r++) {
    names[r] =
        aprintf(arena, "region-%zu-%" PRIx64, r, oracle_rng_next(rng) & 0xfff);
  }
  reshard_binding_range *ranges = anew(arena, b.range_count, sizeof *ranges);
  size_t nr = 0;
  for (size_t ci = 0; ci < b.chunk_count; ci++) {
    const chunk *c = &b.chunks[ci];
    size_t r = region_count == 1
                   ? 0
                   : (size_t)oracle_rng_between(rng, 0, region_count - 1);
    cursor[r] += builder_pad(&b, 8);
    for (size_t k = 0; k < c->range_count; k++) {
      reshard_binding_range range = b.ranges[c->first_range + k];
      range.offset_bytes += cursor[r];
      range.region_id = names[r];
      ranges[nr++] = range;
    }
    cursor[r] += c->size;
  }
  oracle_rng_shuffle(rng, ranges, nr, sizeof *ranges);

  reshard_region *regions = anew(arena, region_count, sizeof *regions);
  for (size_t r = 0; r < region_count; r++) {
    regions[r].region_id = names[r];
    regions[r].address = ((uint64_t)(r + 1) << 32) +
                         oracle_rng_between(rng, 0, 64) * desc->itemsize;
    regions[r].nbytes = cursor[r] + builder_pad(&b, 5);
    if (regions[r].nbytes == 0) {
      regions[r].nbytes = desc->itemsize;
    }
  }
  oracle_rng_shuffle(rng, regions, region_count, sizeof *regions);

  memset(out, 0, sizeof *out);
  out->participant_id = part->participant_id;
  out->endpoint = "oracle://reader";
  out->regions = regions;
  out->region_count = region_count;
  out->ranges = ranges;
  out->range_count = nr;
  free(cursor);
  free(names);
  free(b.ranges);
  free(b.chunks);
}

/* ------------------------------------------------------------------ */
/* Values and Part bytes                                               */
/* ------------------------------------------------------------------ */

uint64_t oracle_element_hash(uint64_t page, uint64_t token, uint64_t layer,
                             uint64_t head, reshard_component component,
                             uint64_t element) {
  uint64_t h = mix64(page * 0x9e3779b97f4a7c15ull + token + 0x632be59bd9b4e019);
  h = mix64(h ^ (layer * 0xd6e8feb86659fd93ull + head));
  return mix64(h ^ ((uint64_t)component * 0xa0761d6478bd642full + element));
}

static uint8_t hash_byte(uint64_t hash, uint64_t k) {
  return (uint8_t)(hash >> (8 * (k % 8)));
}

/* Strides of SPEC §1.3's table for a shard of L layers, H heads, page P. */
static void format_strides(reshard_format f, uint64_t L, uint64_t P, uint64_t H,
                           uint64_t hb, uint64_t *layer_stride,
                           uint64_t *token_stride, uint64_t *head_stride) {
  switch (f) {
  case RESHARD_FORMAT_PLHD:
    *layer_stride = H * hb;
    *token_stride = L * H * hb;
    *head_stride = hb;
    return;
  case RESHARD_FORMAT_LPHD:
    *layer_stride = P * H * hb;
    *token_stride = H * hb;
    *head_stride = hb;
    return;
  case RESHARD_FORMAT_HPLD:
    *layer_stride = hb;
    *token_stride = L * hb;
    *head_stride = P * L * hb;
    return;
  }
  die("unknown format");
}

uint64_t oracle_part_size(const reshard_layout *layout, size_t part) {
  const reshard_descriptor *d = &layout->descriptor;
  const reshard_shard *s = &layout->shards[part];
  return s->layer_count * d->page_size * s->head_count *
         (head_bytes(d, RESHARD_COMPONENT_KEY) +
          head_bytes(d, RESHARD_COMPONENT_VALUE));
}

/* Offset of the fragment (shard, local layer, component) per SPEC §1.3. */
static uint64_t fragment_offset(const reshard_layout *layout, size_t part,
                                size_t local_layer, reshard_component c,
                                uint64_t *token_stride, uint64_t *head_stride) {
  const reshard_descriptor *d = &layout->descriptor;
  const reshard_shard *s = &layout->shards[part];
  uint64_t L = s->layer_count, P = d->page_size, H = s->head_count;
  uint64_t hb = head_bytes(d, c), ls;
  format_strides(layout->format, L, P, H, hb, &ls, token_stride, head_stride);
  uint64_t key_block = L * P * H * head_bytes(d, RESHARD_COMPONENT_KEY);
  return local_layer * ls + (c == RESHARD_COMPONENT_VALUE ? key_block : 0);
}

void oracle_fill_part(const reshard_layout *layout, size_t part, uint64_t page,
                      uint8_t *out) {
  const reshard_descriptor *d = &layout->descriptor;
  const reshard_shard *s = &layout->shards[part];
  uint64_t P = d->page_size, itemsize = d->itemsize;
  for (unsigned ci = 0; ci < components_of(d); ci++) {
    reshard_component c = component_at(ci);
    uint64_t dim = component_dim(d, c);
    for (size_t l = 0; l < s->layer_count; l++) {
      uint64_t ts, hs;
      uint64_t base = fragment_offset(layout, part, l, c, &ts, &hs);
      for (uint64_t t = 0; t < P; t++) {
        for (uint64_t h = 0; h < s->head_count; h++) {
          uint8_t *v = out + base + t * ts + h * hs;
          for (uint64_t e = 0; e < dim; e++) {
            uint64_t hash = oracle_element_hash(page, t, s->layer_ids[l],
                                                s->head_start + h, c, e);
            for (uint64_t k = 0; k < itemsize; k++) {
              v[e * itemsize + k] = hash_byte(hash, k);
            }
          }
        }
      }
    }
  }
}

void oracle_build_page(const reshard_layout *layout, uint64_t page,
                       uint8_t **out) {
  for (size_t i = 0; i < layout->shard_count; i++) {
    out[i] = xmalloc((size_t)oracle_part_size(layout, i));
    oracle_fill_part(layout, i, page, out[i]);
  }
}

/* ------------------------------------------------------------------ */
/* Reference copies                                                    */
/* ------------------------------------------------------------------ */

void oracle_copy_list_push(oracle_copy_list *list, const reshard_copy *copy) {
  if (list->count == list->capacity) {
    list->capacity = list->capacity ? list->capacity * 2 : 256;
    list->items = realloc(list->items, list->capacity * sizeof *list->items);
    if (list->items == NULL) {
      die("out of memory");
    }
  }
  list->items[list->count++] = *copy;
}

void oracle_copy_list_free(oracle_copy_list *list) {
  free(list->items);
  memset(list, 0, sizeof *list);
}

static int cmp_copy(const void *a, const void *b) {
  const reshard_copy *x = a, *y = b;
#define ORACLE_CMP_FIELD(f)                                                    \
  if (x->f != y->f)                                                            \
    return x->f < y->f ? -1 : 1;
  ORACLE_CMP_FIELD(page_index)
  ORACLE_CMP_FIELD(part_index)
  ORACLE_CMP_FIELD(part_offset)
  ORACLE_CMP_FIELD(region_index)
  ORACLE_CMP_FIELD(region_offset)
  ORACLE_CMP_FIELD(nbytes)
#undef ORACLE_CMP_FIELD
  return 0;
}

void oracle_copy_list_sort(oracle_copy_list *list) {
  if (list->count > 1) {
    qsort(list->items, list->count, sizeof *list->items, cmp_copy);
  }
}

void oracle_copy_list_merge(oracle_copy_list *list) {
  if (list->count == 0) {
    return;
  }
  size_t w = 0;
  for (size_t i = 1; i < list->count; i++) {
    reshard_copy *prev = &list->items[w];
    const reshard_copy *cur = &list->items[i];
    if (cur->page_index == prev->page_index &&
        cur->part_index == prev->part_index &&
        cur->part_offset == prev->part_offset + prev->nbytes &&
        cur->region_index == prev->region_index &&
        cur->region_offset == prev->region_offset + prev->nbytes) {
      prev->nbytes += cur->nbytes;
    } else {
      list->items[++w] = *cur;
    }
  }
  list->count = w + 1;
}

static size_t region_index_of(const reshard_binding *binding, const char *id) {
  for (size_t i = 0; i < binding->region_count; i++) {
    if (strcmp(binding->regions[i].region_id, id) == 0) {
      return i;
    }
  }
  die("binding range names an unknown region");
  return 0;
}

void oracle_reference_page(const reshard_layout *layout,
                           const reshard_placement_part *part,
                           const reshard_binding *binding, uint64_t page,
                           oracle_copy_list *fine, uint64_t *before) {
  const reshard_descriptor *d = &layout->descriptor;
  uint64_t P = d->page_size;
  uint64_t count = 0;
  uint64_t p0 = part->head_start, p1 = part->head_start + part->head_count;
  for (size_t ri = 0; ri < binding->range_count; ri++) {
    const reshard_binding_range *r = &binding->ranges[ri];
    uint64_t hb = head_bytes(d, r->component);
    uint64_t t0 = max_u64(page * P, r->token_start);
    uint64_t t1 = min_u64((page + 1) * P, r->token_start + r->token_count);
    if (t0 >= t1 || hb == 0) {
      continue;
    }
    size_t region = region_index_of(binding, r->region_id);
    for (size_t si = 0; si < layout->shard_count; si++) {
      const reshard_shard *s = &layout->shards[si];
      ptrdiff_t l =
          find_sorted(s->layer_ids, s->layer_count, r->global_layer_id);
      if (l < 0) {
        continue;
      }
      /* joined fragment: shard heads clipped to the participant, then to
       * the range */
      uint64_t h0 = max_u64(max_u64(s->head_start, p0), r->head_start);
      uint64_t h1 = min_u64(min_u64(s->head_start + s->head_count, p1),
                            r->head_start + r->head_count);
      if (h0 >= h1) {
        continue;
      }
      uint64_t fts, fhs;
      uint64_t base =
          fragment_offset(layout, si, (size_t)l, r->component, &fts, &fhs);
      uint64_t nt = t1 - t0, nh = h1 - h0, row = nh * hb;
      uint64_t rts = r->token_stride_bytes, rhs = r->head_stride_bytes;
      if (fhs == hb && rhs == hb) {
        count += fts == row && rts == row ? 1 : nt;
      } else {
        count += nt * nh;
      }
      if (fine == NULL) {
        continue;
      }
      for (uint64_t t = t0; t < t1; t++) {
        for (uint64_t h = h0; h < h1; h++) {
          reshard_copy c;
          c.page_index = page;
          c.part_index = si;
          c.part_offset =
              base + (t - page * P) * fts + (h - s->head_start) * fhs;
          c.region_index = region;
          c.region_offset = r->offset_bytes + (t - r->token_start) * rts +
                            (h - r->head_start) * rhs;
          c.nbytes = hb;
          oracle_copy_list_push(fine, &c);
        }
      }
    }
  }
  if (before != NULL) {
    *before = count;
  }
}

const reshard_placement_part *
oracle_request_participant(const reshard_load_request *request) {
  const reshard_placement *pl = request->placement;
  for (size_t i = 0; i < pl->part_count; i++) {
    if (strcmp(pl->parts[i].participant_id, request->binding->participant_id) ==
        0) {
      return &pl->parts[i];
    }
  }
  return NULL;
}

void oracle_reference_plan(const reshard_load_request *request,
                           const reshard_load_plan *plan, oracle_copy_list *out,
                           uint64_t *before) {
  const reshard_placement_part *part = oracle_request_participant(request);
  uint64_t total = 0;
  memset(out, 0, sizeof *out);
  for (uint64_t p = 0; p < plan->hit_pages; p++) {
    const reshard_layout *layout =
        request->sources[plan->page_source[p]].layout;
    uint64_t b = 0;
    oracle_reference_page(layout, part, request->binding, p, out, &b);
    total += b;
  }
  oracle_copy_list_sort(out);
  oracle_copy_list_merge(out);
  if (before != NULL) {
    *before = total;
  }
}

/* Coalesced copies of one page from one layout: the "physical operations"
 * used to choose among several layouts. */
static uint64_t reference_page_ops(const reshard_layout *layout,
                                   const reshard_placement_part *part,
                                   const reshard_binding *binding,
                                   uint64_t page) {
  oracle_copy_list list;
  memset(&list, 0, sizeof list);
  oracle_reference_page(layout, part, binding, page, &list, NULL);
  oracle_copy_list_sort(&list);
  oracle_copy_list_merge(&list);
  uint64_t n = list.count;
  oracle_copy_list_free(&list);
  return n;
}

/* ------------------------------------------------------------------ */
/* Source selection                                                    */
/* ------------------------------------------------------------------ */

static bool source_matches(const reshard_load_request *request, size_t src) {
  return oracle_descriptor_same(&request->sources[src].layout->descriptor,
                                &request->placement->descriptor);
}

uint64_t oracle_expected_hits(const reshard_load_request *request) {
  for (uint64_t p = 0; p < request->page_count; p++) {
    bool hit = false;
    for (size_t i = request->page_source_start[p];
         i < request->page_source_start[p + 1]; i++) {
      hit = hit || source_matches(request, request->page_sources[i]);
    }
    if (!hit) {
      return p;
    }
  }
  return request->page_count;
}

bool oracle_check_selection(const reshard_load_request *request,
                            const reshard_load_plan *plan, char *msg,
                            size_t msg_size) {
  uint64_t hits = oracle_expected_hits(request);
  if (plan->hit_pages != hits) {
    return failf(msg, msg_size, "hit_pages %" PRIu64 ", expected %" PRIu64,
                 plan->hit_pages, hits);
  }
  const reshard_placement_part *part = oracle_request_participant(request);
  if (part == NULL) {
    return failf(msg, msg_size, "oracle: participant not in placement");
  }
  if (plan->participant != NULL &&
      strcmp(plan->participant->participant_id, part->participant_id) != 0) {
    return failf(msg, msg_size, "plan participant %s, expected %s",
                 plan->participant->participant_id, part->participant_id);
  }
  for (uint64_t p = 0; p < hits; p++) {
    size_t first = request->page_source_start[p];
    size_t last = request->page_source_start[p + 1];
    size_t chosen = plan->page_source[p];
    bool candidate = false;
    for (size_t i = first; i < last; i++) {
      candidate = candidate || request->page_sources[i] == chosen;
    }
    if (chosen >= request->source_count || !candidate) {
      return failf(msg, msg_size,
                   "page %" PRIu64 ": page_source %zu is not a candidate", p,
                   chosen);
    }
    if (!source_matches(request, chosen)) {
      return failf(msg, msg_size,
                   "page %" PRIu64 ": chose source %zu whose descriptor "
                   "differs from the target's",
                   p, chosen);
    }
    const char *want = NULL;
    const char *why = NULL;
    for (size_t k = 0; k < request->preferred_count && want == NULL; k++) {
      for (size_t i = first; i < last; i++) {
        size_t s = request->page_sources[i];
        if (source_matches(request, s) &&
            strcmp(request->sources[s].layout_id,
                   request->preferred_layout_ids[k]) == 0) {
          want = request->sources[s].layout_id;
          why = "first preferred layout";
          break;
        }
      }
    }
    uint64_t best_ops = UINT64_MAX, chosen_ops = UINT64_MAX;
    if (want == NULL) {
      why = "fewest operations, then smallest layout id";
      for (size_t i = first; i < last; i++) {
        size_t s = request->page_sources[i];
        if (!source_matches(request, s)) {
          continue;
        }
        uint64_t ops = reference_page_ops(request->sources[s].layout, part,
                                          request->binding, p);
        if (s == chosen) {
          chosen_ops = ops;
        }
        if (ops < best_ops ||
            (ops == best_ops &&
             strcmp(request->sources[s].layout_id, want) < 0)) {
          best_ops = ops;
          want = request->sources[s].layout_id;
        }
      }
    }
    if (strcmp(request->sources[chosen].layout_id, want) != 0) {
      return failf(msg, msg_size,
                   "page %" PRIu64 ": chose %s (reference ops %" PRIu64
                   "), expected %s by rule \"%s\" (reference ops %" PRIu64 ")",
                   p, request->sources[chosen].layout_id, chosen_ops, want, why,
                   best_ops);
    }
  }
  return true;
}

/* ------------------------------------------------------------------ */
/* Execution and byte checks                                           */
/* ------------------------------------------------------------------ */

typedef struct dest_span {
  uint64_t region, offset, nbytes;
  size_t copy;
} dest_span;

static int cmp_dest(const void *a, const void *b) {
  const dest_span *x = a, *y = b;
  if (x->region != y->region) {
    return x->region < y->region ? -1 : 1;
  }
  if (x->offset != y->offset) {
    return x->offset < y->offset ? -1 : 1;
  }
  return 0;
}

/* The index of a copy that wrote byte `offset` of region `region`, or
 * SIZE_MAX. For messages only. */
static size_t find_writer(const reshard_load_plan *plan, uint64_t region,
                          uint64_t offset) {
  for (size_t i = 0; i < plan->copy_count; i++) {
    const reshard_copy *c = &plan->copies[i];
    if (c->region_index == region && offset >= c->region_offset &&
        offset - c->region_offset < c->nbytes) {
      return i;
    }
  }
  return SIZE_MAX;
}

static int describe_copy(char *buf, size_t size, const reshard_load_plan *plan,
                         size_t i) {
  if (i == SIZE_MAX || i >= plan->copy_count) {
    return snprintf(buf, size, "no copy");
  }
  const reshard_copy *c = &plan->copies[i];
  return snprintf(buf, size,
                  "copy %zu {page %" PRIu64 " part %" PRIu64 " off %" PRIu64
                  " -> region %" PRIu64 " off %" PRIu64 " n %" PRIu64 "}",
                  i, c->page_index, c->part_index, c->part_offset,
                  c->region_index, c->region_offset, c->nbytes);
}

typedef struct exec_state {
  size_t region_count;
  uint8_t **data;
  uint8_t **writes;
  uint8_t **covered;
  uint8_t **parts; /* hit_pages * max_shards, built lazily */
  size_t max_shards;
  dest_span *spans;
} exec_state;

static void exec_state_free(exec_state *st, uint64_t hit_pages) {
  for (size_t r = 0; r < st->region_count; r++) {
    free(st->data ? st->data[r] : NULL);
    free(st->writes ? st->writes[r] : NULL);
    free(st->covered ? st->covered[r] : NULL);
  }
  if (st->parts != NULL) {
    for (size_t i = 0; i < hit_pages * st->max_shards; i++) {
      free(st->parts[i]);
    }
  }
  free(st->data);
  free(st->writes);
  free(st->covered);
  free(st->parts);
  free(st->spans);
}

static bool exec_check_batches(const reshard_load_plan *plan,
                               const reshard_load_request *request, char *msg,
                               size_t msg_size) {
  size_t next = 0;
  uint64_t total = 0;
  for (size_t b = 0; b < plan->batch_count; b++) {
    const reshard_batch *batch = &plan->batches[b];
    if (batch->first != next) {
      return failf(msg, msg_size,
                   "batch %zu starts at copy %zu, expected %zu (batches must "
                   "tile the copies in order)",
                   b, batch->first, next);
    }
    if (batch->count == 0) {
      return failf(msg, msg_size, "batch %zu is empty", b);
    }
    if (batch->count > plan->copy_count - next) {
      return failf(msg, msg_size, "batch %zu runs past the copies", b);
    }
    uint64_t bytes = 0;
    for (size_t k = 0; k < batch->count; k++) {
      bytes += plan->copies[batch->first + k].nbytes;
    }
    if (bytes != batch->bytes) {
      return failf(msg, msg_size,
                   "batch %zu bytes %" PRIu64 ", its copies sum to %" PRIu64, b,
                   batch->bytes, bytes);
    }
    if (batch->count > request->limits.max_batch_operations ||
        batch->bytes > request->limits.max_batch_bytes) {
      return failf(msg, msg_size,
                   "batch %zu has %zu copies / %" PRIu64
                   " bytes, above the limits %" PRIu64 " / %" PRIu64,
                   b, batch->count, batch->bytes,
                   request->limits.max_batch_operations,
                   request->limits.max_batch_bytes);
    }
    total += bytes;
    next += batch->count;
  }
  if (next != plan->copy_count) {
    return failf(msg, msg_size, "batches cover %zu of %zu copies", next,
                 plan->copy_count);
  }
  if (plan->operations != plan->copy_count) {
    return failf(msg, msg_size, "operations %" PRIu64 " but %zu copies",
                 plan->operations, plan->copy_count);
  }
  if (plan->bytes != total) {
    return failf(msg, msg_size,
                 "plan bytes %" PRIu64 ", copies sum to %" PRIu64, plan->bytes,
                 total);
  }
  return true;
}

bool oracle_execute(const reshard_load_request *request,
                    const reshard_load_plan *plan, oracle_exec_stats *stats,
                    char *msg, size_t msg_size) {
  const reshard_descriptor *d = &request->placement->descriptor;
  const reshard_binding *binding = request->binding;
  uint64_t P = d->page_size, itemsize = d->itemsize;
  uint64_t hits = plan->hit_pages;
  if (!exec_check_batches(plan, request, msg, msg_size)) {
    return false;
  }
  if (hits > request->page_count) {
    return failf(msg, msg_size, "hit_pages %" PRIu64 " above page count", hits);
  }
  exec_state st;
  memset(&st, 0, sizeof st);
  st.region_count = binding->region_count;
  st.data = xcalloc(st.region_count, sizeof *st.data);
  st.writes = xcalloc(st.region_count, sizeof *st.writes);
  st.covered = xcalloc(st.region_count, sizeof *st.covered);
  for (size_t r = 0; r < st.region_count; r++) {
    size_t n = (size_t)binding->regions[r].nbytes;
    st.data[r] = xmalloc(n);
    memset(st.data[r], ORACLE_SENTINEL, n);
    st.writes[r] = xcalloc(n, 1);
    st.covered[r] = xcalloc(n, 1);
  }
  for (size_t s = 0; s < request->source_count; s++) {
    st.max_shards = st.max_shards > request->sources[s].layout->shard_count
                        ? st.max_shards
                        : request->sources[s].layout->shard_count;
  }
  st.parts = xcalloc((size_t)hits * st.max_shards + 1, sizeof *st.parts);
  st.spans = xcalloc(plan->copy_count + 1, sizeof *st.spans);

  bool ok = true;
  uint64_t total = 0;
  char what[256];
  for (size_t b = 0; ok && b < plan->batch_count; b++) {
    for (size_t k = 0; ok && k < plan->batches[b].count; k++) {
      size_t ci = plan->batches[b].first + k;
      const reshard_copy *c = &plan->copies[ci];
      describe_copy(what, sizeof what, plan, ci);
      uint64_t end;
      if (c->nbytes == 0) {
        ok = failf(msg, msg_size, "%s is empty", what);
        break;
      }
      if (c->page_index >= hits) {
        ok = failf(msg, msg_size, "%s: page beyond hit_pages %" PRIu64, what,
                   hits);
        break;
      }
      size_t src = plan->page_source[c->page_index];
      if (src >= request->source_count) {
        ok =
            failf(msg, msg_size, "%s: page_source %zu out of range", what, src);
        break;
      }
      const reshard_layout *layout = request->sources[src].layout;
      if (c->part_index >= layout->shard_count) {
        ok = failf(msg, msg_size, "%s: part beyond the layout's %zu parts",
                   what, layout->shard_count);
        break;
      }
      uint64_t part_size = oracle_part_size(layout, (size_t)c->part_index);
      if (!reshard_add(c->part_offset, c->nbytes, &end) || end > part_size) {
        ok = failf(msg, msg_size, "%s: reads past the Part (size %" PRIu64 ")",
                   what, part_size);
        break;
      }
      if (c->region_index >= st.region_count) {
        ok = failf(msg, msg_size, "%s: region out of range", what);
        break;
      }
      uint64_t region_size = binding->regions[c->region_index].nbytes;
      if (!reshard_add(c->region_offset, c->nbytes, &end) ||
          end > region_size) {
        ok = failf(msg, msg_size,
                   "%s: writes past the region (size %" PRIu64 ")", what,
                   region_size);
        break;
      }
      uint8_t **slot = &st.parts[c->page_index * st.max_shards + c->part_index];
      if (*slot == NULL) {
        *slot = xmalloc((size_t)part_size);
        oracle_fill_part(layout, (size_t)c->part_index, c->page_index, *slot);
      }
      memcpy(st.data[c->region_index] + c->region_offset,
             *slot + c->part_offset, (size_t)c->nbytes);
      uint8_t *w = st.writes[c->region_index] + c->region_offset;
      for (uint64_t i = 0; i < c->nbytes; i++) {
        if (w[i] < 255) {
          w[i]++;
        }
      }
      st.spans[ci].region = c->region_index;
      st.spans[ci].offset = c->region_offset;
      st.spans[ci].nbytes = c->nbytes;
      st.spans[ci].copy = ci;
      total += c->nbytes;
    }
  }

  /* The copies' destination intervals must be pairwise disjoint. */
  if (ok && plan->copy_count > 1) {
    qsort(st.spans, plan->copy_count, sizeof *st.spans, cmp_dest);
    for (size_t i = 1; i < plan->copy_count; i++) {
      const dest_span *a = &st.spans[i - 1], *b = &st.spans[i];
      if (a->region == b->region && a->offset + a->nbytes > b->offset) {
        char other[256];
        describe_copy(what, sizeof what, plan, a->copy);
        describe_copy(other, sizeof other, plan, b->copy);
        ok = failf(msg, msg_size, "destinations overlap: %s and %s", what,
                   other);
        break;
      }
    }
  }

  /* Every byte the binding covers. */
  uint64_t covered_bytes = 0;
  for (size_t ri = 0; ok && ri < binding->range_count; ri++) {
    const reshard_binding_range *r = &binding->ranges[ri];
    size_t region = region_index_of(binding, r->region_id);
    uint64_t dim = component_dim(d, r->component);
    uint64_t nbytes = binding->regions[region].nbytes;
    for (uint64_t t = r->token_start; ok && t < r->token_start + r->token_count;
         t++) {
      uint64_t page = t / P, token = t % P;
      bool hit = page < hits;
      for (uint64_t h = r->head_start; ok && h < r->head_start + r->head_count;
           h++) {
        uint64_t value = r->offset_bytes +
                         (t - r->token_start) * r->token_stride_bytes +
                         (h - r->head_start) * r->head_stride_bytes;
        for (uint64_t e = 0; ok && e < dim; e++) {
          uint64_t hash =
              hit ? oracle_element_hash(page, token, r->global_layer_id, h,
                                        r->component, e)
                  : 0;
          for (uint64_t k = 0; k < itemsize; k++) {
            uint64_t off = value + e * itemsize + k;
            if (off >= nbytes) {
              ok = failf(msg, msg_size,
                         "oracle bug: binding range %zu leaves its region", ri);
              break;
            }
            if (st.covered[region][off]) {
              ok = failf(msg, msg_size,
                         "oracle bug: binding ranges overlap at region %zu "
                         "offset %" PRIu64,
                         region, off);
              break;
            }
            st.covered[region][off] = 1;
            uint8_t writes = st.writes[region][off];
            uint8_t got = st.data[region][off];
            uint8_t want = hit ? hash_byte(hash, k) : (uint8_t)ORACLE_SENTINEL;
            if ((hit && (writes != 1 || got != want)) || (!hit && writes)) {
              describe_copy(what, sizeof what, plan,
                            find_writer(plan, region, off));
              ok = failf(msg, msg_size,
                         "%s byte: page %" PRIu64 " token %" PRIu64
                         " layer %" PRIu64 " head %" PRIu64 " %s element "
                         "%" PRIu64 " byte %" PRIu64 " at region %zu (%s) "
                         "offset %" PRIu64 " (range %zu): expected 0x%02x "
                         "written once, got 0x%02x written %u times; last "
                         "writer %s",
                         hit ? "hit" : "miss-page", page, token,
                         r->global_layer_id, h, component_name(r->component), e,
                         k, region, binding->regions[region].region_id, off, ri,
                         want, got, writes, what);
              break;
            }
            covered_bytes += hit;
          }
        }
      }
    }
  }
  /* No byte outside the binding was written. */
  for (size_t r = 0; ok && r < st.region_count; r++) {
    for (uint64_t off = 0; off < binding->regions[r].nbytes; off++) {
      if (!st.covered[r][off] && st.writes[r][off]) {
        describe_copy(what, sizeof what, plan, find_writer(plan, r, off));
        ok = failf(msg, msg_size,
                   "byte outside the binding written: region %zu offset "
                   "%" PRIu64 " by %s",
                   r, off, what);
        break;
      }
    }
  }
  if (ok && total != covered_bytes) {
    ok = failf(msg, msg_size,
               "copied %" PRIu64 " bytes but the hit pages cover %" PRIu64,
               total, covered_bytes);
  }
  if (stats != NULL) {
    stats->copies = plan->copy_count;
    stats->bytes = total;
    stats->covered_bytes = covered_bytes;
  }
  exec_state_free(&st, hits);
  return ok;
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

bool oracle_scenario_build(oracle_case *c, int scenario, uint64_t pages,
                           size_t participant, char *msg, size_t msg_size) {
  memset(c, 0, sizeof *c);
  reshard_arena_init(&c->arena, 0);
  c->seed = 0x5ce7a110ull + (uint64_t)scenario;
  oracle_rng rng;
  oracle_rng_seed(&rng, c->seed);
  reshard_error err;
  reshard_error_clear(&err);

  oracle_topology writer = {1, 1, 1, 0}, reader = {1, 1, 1, 0};
  reshard_format format = RESHARD_FORMAT_PLHD;
  oracle_memory_opts mem = {ORACLE_MEM_PAGED_SMALL, 0, 1};
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
  snprintf(c->description, sizeof c->description,
           "scenario S%d, %" PRIu64 " pages, participant #%zu; ", scenario,
           pages, participant);
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
