#include "reshard/placement.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "reshard/arena.h"
#include "reshard/checked.h"

static int compare_parts_by_id(const void *a, const void *b) {
  const reshard_placement_part *x = a;
  const reshard_placement_part *y = b;
  return strcmp(x->participant_id, y->participant_id);
}

static int compare_ranks(const reshard_rank *x, const reshard_rank *y) {
  if (x->dp != y->dp) {
    return x->dp < y->dp ? -1 : 1;
  }
  if (x->pp != y->pp) {
    return x->pp < y->pp ? -1 : 1;
  }
  if (x->tp != y->tp) {
    return x->tp < y->tp ? -1 : 1;
  }
  return 0;
}

static int compare_rank_pointers(const void *a, const void *b) {
  return compare_ranks(*(const reshard_rank *const *)a,
                       *(const reshard_rank *const *)b);
}

/* One (DP rank, layer) ownership claim of a part, for the tiling proof. */
typedef struct ownership {
  uint64_t dp;
  uint64_t layer_index;
  uint64_t head_start;
  uint64_t head_count;
  uint64_t replica_ordinal;
  uint64_t replica_count;
  size_t part;
} ownership;

static int compare_ownership(const void *a, const void *b) {
  const ownership *x = a;
  const ownership *y = b;
#define RESHARD_CMP(field)                                                     \
  if (x->field != y->field) {                                                  \
    return x->field < y->field ? -1 : 1;                                       \
  }
  RESHARD_CMP(dp)
  RESHARD_CMP(layer_index)
  RESHARD_CMP(head_start)
  RESHARD_CMP(replica_ordinal)
  RESHARD_CMP(head_count)
#undef RESHARD_CMP
  return 0;
}

static int compare_u64(const void *a, const void *b) {
  uint64_t x = *(const uint64_t *)a;
  uint64_t y = *(const uint64_t *)b;
  return (x > y) - (x < y);
}

static bool string_empty(const char *text) {
  return text == NULL || text[0] == '\0';
}

static reshard_status validate_part(const reshard_placement *placement,
                                    reshard_placement_part *part, size_t index,
                                    reshard_error *err) {
  const reshard_descriptor *descriptor = &placement->descriptor;
  if (string_empty(part->participant_id)) {
    return reshard_error_set(err, RESHARD_INVALID_ARGUMENT,
                             "placement.parts[%zu].participant_id: must not be "
                             "empty",
                             index);
  }
  const struct {
    const char *name;
    uint64_t value, size;
  } coordinates[] = {{"dp", part->rank.dp, placement->dp_size},
                     {"pp", part->rank.pp, placement->pp_size},
                     {"tp", part->rank.tp, placement->tp_size}};
  for (size_t c = 0; c < 3; c++) {
    if (coordinates[c].value >= coordinates[c].size) {
      return reshard_error_set(
          err, RESHARD_INVALID_ARGUMENT,
          "placement.parts[%zu].rank.%s: %llu is not below %s_size %llu", index,
          coordinates[c].name, (unsigned long long)coordinates[c].value,
          coordinates[c].name, (unsigned long long)coordinates[c].size);
    }
  }
  char path[96];
  snprintf(path, sizeof path, "placement.parts[%zu].layer_ids", index);
  reshard_status status =
      reshard_sort_unique_ids(part->layer_ids, part->layer_count, path, err);
  if (status) {
    return status;
  }
  for (size_t l = 0; l < part->layer_count; l++) {
    if (reshard_descriptor_layer_index(descriptor, part->layer_ids[l]) < 0) {
      return reshard_error_set(err, RESHARD_INVALID_ARGUMENT,
                               "%s: layer %llu is not in the descriptor", path,
                               (unsigned long long)part->layer_ids[l]);
    }
  }
  uint64_t head_end;
  if (part->head_count == 0) {
    return reshard_error_set(err, RESHARD_INVALID_ARGUMENT,
                             "placement.parts[%zu].head_count: must be at "
                             "least 1",
                             index);
  }
  if (!reshard_add(part->head_start, part->head_count, &head_end) ||
      head_end > descriptor->total_kv_heads) {
    return reshard_error_set(
        err, RESHARD_INVALID_ARGUMENT,
        "placement.parts[%zu]: heads [%llu, +%llu) exceed total_kv_heads %llu",
        index, (unsigned long long)part->head_start,
        (unsigned long long)part->head_count,
        (unsigned long long)descriptor->total_kv_heads);
  }
  if (part->replica_count == 0) {
    part->replica_count = 1;
  }
  if (part->replica_ordinal >= part->replica_count) {
    return reshard_error_set(
        err, RESHARD_INVALID_ARGUMENT,
        "placement.parts[%zu].replica_ordinal: %llu is not below "
        "replica_count %llu",
        index, (unsigned long long)part->replica_ordinal,
        (unsigned long long)part->replica_count);
  }
  return RESHARD_OK;
}

/* Walks the claims of one (DP rank, layer), sorted by head_start, and proves
 * they tile [0, total_kv_heads) with exact replica sets. */
static reshard_status check_layer_tiling(const reshard_placement *placement,
                                         const ownership *claims, size_t count,
                                         uint64_t dp, uint64_t layer,
                                         reshard_error *err) {
  uint64_t total = placement->descriptor.total_kv_heads;
  uint64_t next_head = 0;
  size_t i = 0;
  while (i < count) {
    const ownership *first = &claims[i];
    if (first->head_start != next_head) {
      if (first->head_start > next_head) {
        return reshard_error_set(
            err, RESHARD_INVALID_ARGUMENT,
            "placement.parts: dp rank %llu layer %llu: heads [%llu, %llu) "
            "are owned by no participant",
            (unsigned long long)dp, (unsigned long long)layer,
            (unsigned long long)next_head,
            (unsigned long long)first->head_start);
      }
      return reshard_error_set(
          err, RESHARD_INVALID_ARGUMENT,
          "placement.parts: dp rank %llu layer %llu: participant \"%s\" heads "
          "[%llu, +%llu) overlap the interval before them without being an "
          "exact replica of it",
          (unsigned long long)dp, (unsigned long long)layer,
          placement->parts[first->part].participant_id,
          (unsigned long long)first->head_start,
          (unsigned long long)first->head_count);
    }
    size_t group_end = i;
    while (group_end < count && claims[group_end].head_start == next_head) {
      group_end++;
    }
    uint64_t replicas = group_end - i;
    /* Identical intervals first: a differing one is an overlap, whatever
     * the replica fields say. */
    for (size_t r = i; r < group_end; r++) {
      const ownership *claim = &claims[r];
      const char *id = placement->parts[claim->part].participant_id;
      if (claim->head_count != first->head_count) {
        return reshard_error_set(
            err, RESHARD_INVALID_ARGUMENT,
            "placement.parts: dp rank %llu layer %llu: participant \"%s\" "
            "heads [%llu, +%llu) overlap participant \"%s\" heads [%llu, "
            "+%llu) without being an exact replica",
            (unsigned long long)dp, (unsigned long long)layer, id,
            (unsigned long long)claim->head_start,
            (unsigned long long)claim->head_count,
            placement->parts[first->part].participant_id,
            (unsigned long long)first->head_start,
            (unsigned long long)first->head_count);
      }
    }
    for (size_t r = i; r < group_end; r++) {
      const ownership *claim = &claims[r];
      const char *id = placement->parts[claim->part].participant_id;
      if (claim->replica_count != replicas || claim->replica_ordinal != r - i) {
        return reshard_error_set(
            err, RESHARD_INVALID_ARGUMENT,
            "placement.parts: dp rank %llu layer %llu heads [%llu, +%llu): "
            "%llu participants share the interval, so replica_count must be "
            "%llu and ordinals 0..%llu each once; participant \"%s\" has "
            "ordinal %llu of %llu",
            (unsigned long long)dp, (unsigned long long)layer,
            (unsigned long long)first->head_start,
            (unsigned long long)first->head_count, (unsigned long long)replicas,
            (unsigned long long)replicas, (unsigned long long)(replicas - 1),
            id, (unsigned long long)claim->replica_ordinal,
            (unsigned long long)claim->replica_count);
      }
    }
    next_head = first->head_start + first->head_count;
    i = group_end;
  }
  if (next_head != total) {
    return reshard_error_set(
        err, RESHARD_INVALID_ARGUMENT,
        "placement.parts: dp rank %llu layer %llu: heads [%llu, %llu) are "
        "owned by no participant",
        (unsigned long long)dp, (unsigned long long)layer,
        (unsigned long long)next_head, (unsigned long long)total);
  }
  return RESHARD_OK;
}

static reshard_status check_tiling(const reshard_placement *placement,
                                   reshard_arena *scratch, reshard_error *err) {
  const reshard_descriptor *descriptor = &placement->descriptor;
  size_t claim_count = 0;
  for (size_t p = 0; p < placement->part_count; p++) {
    claim_count += placement->parts[p].layer_count;
  }
  ownership *claims = RESHARD_ARENA_NEW(scratch, ownership, claim_count + 1);
  if (claims == NULL) {
    return reshard_error_set(err, RESHARD_RESOURCE_EXHAUSTED,
                             "placement: out of memory for the tiling proof");
  }
  size_t n = 0;
  for (size_t p = 0; p < placement->part_count; p++) {
    const reshard_placement_part *part = &placement->parts[p];
    for (size_t l = 0; l < part->layer_count; l++) {
      claims[n++] = (ownership){
          .dp = part->rank.dp,
          .layer_index = (uint64_t)reshard_descriptor_layer_index(
              descriptor, part->layer_ids[l]),
          .head_start = part->head_start,
          .head_count = part->head_count,
          .replica_ordinal = part->replica_ordinal,
          .replica_count = part->replica_count,
          .part = p,
      };
    }
  }
  qsort(claims, n, sizeof *claims, compare_ownership);

  /* Every DP rank that has a participant must cover every layer. Parts are
   * visited in rank order through a sorted copy of the DP ranks. */
  uint64_t *dps = RESHARD_ARENA_NEW(scratch, uint64_t, placement->part_count);
  if (dps == NULL) {
    return reshard_error_set(err, RESHARD_RESOURCE_EXHAUSTED,
                             "placement: out of memory for the tiling proof");
  }
  for (size_t p = 0; p < placement->part_count; p++) {
    dps[p] = placement->parts[p].rank.dp;
  }
  size_t dp_count = placement->part_count;
  qsort(dps, dp_count, sizeof *dps, compare_u64);
  size_t cursor = 0;
  for (size_t d = 0; d < dp_count; d++) {
    if (d > 0 && dps[d] == dps[d - 1]) {
      continue;
    }
    for (size_t layer = 0; layer < descriptor->layer_count; layer++) {
      size_t start = cursor;
      while (cursor < n && claims[cursor].dp == dps[d] &&
             claims[cursor].layer_index == layer) {
        cursor++;
      }
      reshard_status status =
          check_layer_tiling(placement, claims + start, cursor - start, dps[d],
                             descriptor->global_layer_ids[layer], err);
      if (status) {
        return status;
      }
    }
  }
  return RESHARD_OK;
}

reshard_status
reshard_placement_check_limits(const reshard_placement *placement,
                               const reshard_limits *caps, reshard_error *err) {
  if (placement->part_count > caps->max_layout_parts) {
    return reshard_error_set(err, RESHARD_RESOURCE_EXHAUSTED,
                             "placement.parts: %zu parts exceed the limit "
                             "max_layout_parts of %llu",
                             placement->part_count,
                             (unsigned long long)caps->max_layout_parts);
  }
  uint64_t fragments = caps->max_layout_fragments;
  uint64_t repeated;
  if (!reshard_mul(placement->part_count, placement->descriptor.layer_count,
                   &repeated) ||
      repeated > fragments) {
    return reshard_error_set(err, RESHARD_RESOURCE_EXHAUSTED,
                             "placement: %zu parts × %zu descriptor layers "
                             "exceed the limit max_layout_fragments of %llu",
                             placement->part_count,
                             placement->descriptor.layer_count,
                             (unsigned long long)fragments);
  }
  uint64_t layers = 0;
  for (size_t i = 0; i < placement->part_count; i++) {
    if (!reshard_add(layers, placement->parts[i].layer_count, &layers) ||
        layers > fragments) {
      return reshard_error_set(err, RESHARD_RESOURCE_EXHAUSTED,
                               "placement.parts: more than %llu layer ids in "
                               "all parts exceed the limit "
                               "max_layout_fragments",
                               (unsigned long long)fragments);
    }
  }
  return RESHARD_OK;
}

reshard_status reshard_placement_normalize(reshard_placement *placement,
                                           reshard_arena *scratch,
                                           reshard_error *err) {
  reshard_status status = reshard_descriptor_normalize(
      &placement->descriptor, "placement.descriptor", err);
  if (status) {
    return status;
  }
  if (string_empty(placement->resource_id)) {
    return reshard_error_set(err, RESHARD_INVALID_ARGUMENT,
                             "placement.resource_id: must not be empty");
  }
  if (string_empty(placement->revision)) {
    return reshard_error_set(err, RESHARD_INVALID_ARGUMENT,
                             "placement.revision: must not be empty");
  }
  if (placement->placement_set_id == NULL) {
    placement->placement_set_id = "";
  }
  const struct {
    const char *name;
    uint64_t value;
  } sizes[] = {{"dp_size", placement->dp_size},
               {"pp_size", placement->pp_size},
               {"tp_size", placement->tp_size}};
  for (size_t s = 0; s < 3; s++) {
    if (sizes[s].value == 0) {
      return reshard_error_set(err, RESHARD_INVALID_ARGUMENT,
                               "placement.%s: must be at least 1",
                               sizes[s].name);
    }
  }
  if (placement->part_count == 0) {
    return reshard_error_set(err, RESHARD_INVALID_ARGUMENT,
                             "placement.parts: must not be empty");
  }
  for (size_t p = 0; p < placement->part_count; p++) {
    status = validate_part(placement, &placement->parts[p], p, err);
    if (status) {
      return status;
    }
  }
  qsort(placement->parts, placement->part_count, sizeof *placement->parts,
        compare_parts_by_id);
  for (size_t p = 1; p < placement->part_count; p++) {
    if (strcmp(placement->parts[p].participant_id,
               placement->parts[p - 1].participant_id) == 0) {
      return reshard_error_set(err, RESHARD_INVALID_ARGUMENT,
                               "placement.parts: participant_id \"%s\" "
                               "appears more than once",
                               placement->parts[p].participant_id);
    }
  }
  const reshard_rank **ranks =
      RESHARD_ARENA_NEW(scratch, const reshard_rank *, placement->part_count);
  if (ranks == NULL) {
    return reshard_error_set(err, RESHARD_RESOURCE_EXHAUSTED,
                             "placement: out of memory");
  }
  for (size_t p = 0; p < placement->part_count; p++) {
    ranks[p] = &placement->parts[p].rank;
  }
  qsort(ranks, placement->part_count, sizeof *ranks, compare_rank_pointers);
  for (size_t p = 1; p < placement->part_count; p++) {
    if (compare_ranks(ranks[p], ranks[p - 1]) == 0) {
      return reshard_error_set(
          err, RESHARD_INVALID_ARGUMENT,
          "placement.parts: rank (dp %llu, pp %llu, tp %llu) is held by more "
          "than one participant",
          (unsigned long long)ranks[p]->dp, (unsigned long long)ranks[p]->pp,
          (unsigned long long)ranks[p]->tp);
    }
  }
  return check_tiling(placement, scratch, err);
}

uint64_t reshard_placement_lowest_dp(const reshard_placement *placement) {
  uint64_t lowest = placement->parts[0].rank.dp;
  for (size_t p = 1; p < placement->part_count; p++) {
    if (placement->parts[p].rank.dp < lowest) {
      lowest = placement->parts[p].rank.dp;
    }
  }
  return lowest;
}

bool reshard_placement_has_dp(const reshard_placement *placement, uint64_t dp) {
  for (size_t p = 0; p < placement->part_count; p++) {
    if (placement->parts[p].rank.dp == dp) {
      return true;
    }
  }
  return false;
}

const reshard_placement_part *
reshard_placement_find_part(const reshard_placement *placement,
                            const char *participant_id) {
  size_t low = 0;
  size_t high = placement->part_count;
  while (low < high) {
    size_t mid = low + (high - low) / 2;
    int order = strcmp(placement->parts[mid].participant_id, participant_id);
    if (order == 0) {
      return &placement->parts[mid];
    }
    if (order < 0) {
      low = mid + 1;
    } else {
      high = mid;
    }
  }
  return NULL;
}
