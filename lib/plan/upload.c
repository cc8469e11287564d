#include "reshard/upload.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "reshard/arena.h"
#include "reshard/identity.h"

/* A shard with the participant that writes it, sorted together. */
typedef struct written_shard {
  reshard_shard shard;
  const char *writer;
} written_shard;

static int compare_written(const void *a, const void *b) {
  const reshard_shard *x = &((const written_shard *)a)->shard;
  const reshard_shard *y = &((const written_shard *)b)->shard;
  size_t common =
      x->layer_count < y->layer_count ? x->layer_count : y->layer_count;
  for (size_t i = 0; i < common; i++) {
    if (x->layer_ids[i] != y->layer_ids[i]) {
      return x->layer_ids[i] < y->layer_ids[i] ? -1 : 1;
    }
  }
  if (x->layer_count != y->layer_count) {
    return x->layer_count < y->layer_count ? -1 : 1;
  }
  return (x->head_start > y->head_start) - (x->head_start < y->head_start);
}

reshard_status
reshard_plan_upload(const reshard_placement *placement, reshard_format format,
                    bool has_dp_rank, uint64_t dp_rank,
                    const reshard_limits *limits, reshard_arena *arena,
                    reshard_upload_plan *out, reshard_error *err) {
  if (reshard_format_name(format) == NULL) {
    return reshard_error_set(err, RESHARD_INVALID_ARGUMENT,
                             "format: must be PLHD, LPHD or HPLD");
  }
  if (!has_dp_rank) {
    dp_rank = reshard_placement_lowest_dp(placement);
  } else if (!reshard_placement_has_dp(placement, dp_rank)) {
    return reshard_error_set(err, RESHARD_INVALID_ARGUMENT,
                             "dp_rank: no participant of the placement has "
                             "dp rank %llu",
                             (unsigned long long)dp_rank);
  }
  size_t count = 0;
  for (size_t p = 0; p < placement->part_count; p++) {
    const reshard_placement_part *part = &placement->parts[p];
    if (part->rank.dp == dp_rank && part->replica_ordinal == 0 &&
        part->layer_count > 0) {
      count++;
    }
  }
  written_shard *written = RESHARD_ARENA_NEW(arena, written_shard, count);
  reshard_shard *shards = RESHARD_ARENA_NEW(arena, reshard_shard, count);
  const char **writers = RESHARD_ARENA_NEW(arena, const char *, count);
  if (written == NULL || shards == NULL || writers == NULL) {
    return reshard_error_set(err, RESHARD_RESOURCE_EXHAUSTED,
                             "plan_upload: out of memory");
  }
  size_t n = 0;
  for (size_t p = 0; p < placement->part_count; p++) {
    const reshard_placement_part *part = &placement->parts[p];
    if (part->rank.dp != dp_rank || part->replica_ordinal != 0 ||
        part->layer_count == 0) {
      continue;
    }
    char suffix[48];
    if (placement->pp_size > 1) {
      snprintf(suffix, sizeof suffix, "%llu_%llu",
               (unsigned long long)part->rank.tp,
               (unsigned long long)part->rank.pp);
    } else {
      snprintf(suffix, sizeof suffix, "%llu",
               (unsigned long long)part->rank.tp);
    }
    uint64_t *layers = RESHARD_ARENA_NEW(arena, uint64_t, part->layer_count);
    char *suffix_copy = reshard_arena_strdup(arena, suffix);
    if (layers == NULL || suffix_copy == NULL) {
      return reshard_error_set(err, RESHARD_RESOURCE_EXHAUSTED,
                               "plan_upload: out of memory");
    }
    memcpy(layers, part->layer_ids, part->layer_count * sizeof *layers);
    written[n++] = (written_shard){
        .shard = {.layer_ids = layers,
                  .layer_count = part->layer_count,
                  .head_start = part->head_start,
                  .head_count = part->head_count,
                  .key_suffix = suffix_copy},
        .writer = part->participant_id,
    };
  }
  qsort(written, n, sizeof *written, compare_written);
  for (size_t s = 0; s < n; s++) {
    shards[s] = written[s].shard;
    writers[s] = written[s].writer;
  }
  out->layout = (reshard_layout){
      .descriptor = placement->descriptor,
      .format = format,
      .shards = shards,
      .shard_count = n,
  };
  /* The descriptor's layer array is shared with the placement; normalizing
   * an already sorted list leaves it unchanged. */
  reshard_status status =
      reshard_layout_normalize(&out->layout, limits, "layout", arena, err);
  if (status) {
    return status;
  }
  out->part_writers = writers;
  return reshard_layout_id(&out->layout, out->layout_id, err);
}
