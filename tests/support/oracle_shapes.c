/* Random but valid shapes for the oracle (oracle.h): descriptors,
 * DP x PP x TP topologies and their placements, hand-built layouts. */
#include "oracle_internal.h"

#include <inttypes.h>

/* Splits `total` into `n` sizes, each at least `min_each` (total >=
 * n * min_each). rng NULL: as even as possible, larger ones first. */
void oracle_split_sizes(oracle_rng *rng, uint64_t total, size_t n,
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
  oracle_split_sizes(rng, heads, (size_t)groups, 1, head_sizes);
  oracle_split_sizes(rng, topology->tp, (size_t)groups, 1, rank_sizes);
  oracle_split_sizes(rng, desc->layer_count, (size_t)topology->pp, 0,
                     stage_sizes);

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
    oracle_split_sizes(rng, n, group_count, 1, sizes);
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
    oracle_split_sizes(rng, heads, pieces, 1, head_sizes);
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
