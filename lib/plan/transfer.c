/* Transfer planning (SPEC §2.6), in the order the work is known:
 * request checks; source choice (per target layer and source head
 * interval, the replica at the target's replica ordinal); the logical
 * join, PlanLoad's own, of a layout whose shards are the chosen sources
 * with the target's part; the pools and the block table of the sources
 * the join reads; then lowering over both block tables, counted before it
 * is written; coalescing in the order (source, source region, source
 * offset, target region, target offset); batching with a batch closed at
 * every change of source; runs. */
#include "reshard/transfer.h"

#include <stdlib.h>
#include <string.h>

#include "base/keyed_sort.h"
#include "plan/plan_internal.h"
#include "reshard/checked.h"
#include "reshard/join.h"
#include "reshard/layout.h"

/* Something found by a participant id: a pool, a shard. */
typedef struct by_participant {
  const char *participant_id;
  size_t index;
} by_participant;

static int compare_by_participant(const void *a, const void *b) {
  return strcmp(((const by_participant *)a)->participant_id,
                ((const by_participant *)b)->participant_id);
}

typedef struct transfer {
  const reshard_transfer_request *request;
  reshard_arena *arena;
  reshard_error *err;
  const reshard_placement_part *target; /* the target's part */
  uint64_t source_dp;
  by_participant *pools; /* request.pools by participant id */
  /* The synthetic layout's shard s is source participant shard_part[s]. */
  reshard_layout layout;
  const reshard_placement_part **shard_part;
  reshard_join *join;
  /* Per shard: its ordinal among the sources read, SIZE_MAX if unread. */
  size_t *shard_source;
  /* Per source ordinal: its part and its pool. */
  const reshard_placement_part **source_part;
  const reshard_transfer_pool **source_pool;
  size_t source_count;
  uint64_t block_size;
  reshard_bound_binding bound; /* the target's */
  uint64_t head_bytes[2];
} transfer;

static reshard_status no_memory(const transfer *t) {
  return reshard_error_set(t->err, RESHARD_RESOURCE_EXHAUSTED,
                           "plan: out of memory");
}

static ptrdiff_t layer_index(const reshard_placement_part *part,
                             uint64_t layer) {
  size_t low = 0, high = part->layer_count;
  while (low < high) {
    size_t mid = low + (high - low) / 2;
    if (part->layer_ids[mid] < layer) {
      low = mid + 1;
    } else {
      high = mid;
    }
  }
  return low < part->layer_count && part->layer_ids[low] == layer
             ? (ptrdiff_t)low
             : -1;
}

/* The field that names the memory's participant, for messages. */
static const char *participant_field(const reshard_transfer_request *request) {
  return request->participant_field != NULL ? request->participant_field
                                            : "binding.participant_id";
}

static reshard_status check_target(transfer *t) {
  const reshard_transfer_request *request = t->request;
  const reshard_placement *placement = request->target_placement;
  reshard_error *err = t->err;
  const char *field;
  if (!reshard_descriptor_equal(&request->source_placement->descriptor,
                                &placement->descriptor, &field)) {
    return reshard_error_set(err, RESHARD_FAILED_PRECONDITION,
                             "source_placement: its descriptor differs from "
                             "the target placement's in %s (no byte "
                             "conversion is done)",
                             field);
  }
  if (request->token_count == 0) {
    return reshard_error_set(err, RESHARD_INVALID_ARGUMENT,
                             "token_count: must be at least 1");
  }
  const char *participant = request->binding->participant_id;
  if (participant == NULL || participant[0] == '\0') {
    return reshard_error_set(err, RESHARD_INVALID_ARGUMENT,
                             "%s: must not be empty",
                             participant_field(request));
  }
  t->target = reshard_placement_find_part(placement, participant);
  if (t->target == NULL) {
    return reshard_error_set(err, RESHARD_INVALID_ARGUMENT,
                             "%s: \"%s\" is not a "
                             "participant of the target placement",
                             participant_field(request), participant);
  }
  uint64_t dp = request->has_target_dp_rank
                    ? request->target_dp_rank
                    : reshard_placement_lowest_dp(placement);
  if (request->has_target_dp_rank && !reshard_placement_has_dp(placement, dp)) {
    return reshard_error_set(err, RESHARD_INVALID_ARGUMENT,
                             "target_dp_rank: no participant of the target "
                             "placement has dp rank %llu",
                             (unsigned long long)dp);
  }
  if (t->target->rank.dp != dp) {
    return reshard_error_set(err, RESHARD_INVALID_ARGUMENT,
                             "%s: participant \"%s\" has "
                             "dp rank %llu, not the target dp rank %llu",
                             participant_field(request), participant,
                             (unsigned long long)t->target->rank.dp,
                             (unsigned long long)dp);
  }
  const reshard_placement *source = request->source_placement;
  t->source_dp = request->has_source_dp_rank
                     ? request->source_dp_rank
                     : reshard_placement_lowest_dp(source);
  if (request->has_source_dp_rank &&
      !reshard_placement_has_dp(source, t->source_dp)) {
    return reshard_error_set(err, RESHARD_INVALID_ARGUMENT,
                             "source_dp_rank: no participant of the source "
                             "placement has dp rank %llu",
                             (unsigned long long)t->source_dp);
  }
  return RESHARD_OK;
}

/* Every pool is of a source participant, one per participant; their
 * order by participant id is kept for finding them. */
static reshard_status check_pools(transfer *t) {
  const reshard_transfer_request *request = t->request;
  t->pools =
      RESHARD_ARENA_ARRAY(t->arena, by_participant, request->pool_count + 1);
  if (t->pools == NULL) {
    return no_memory(t);
  }
  for (size_t i = 0; i < request->pool_count; i++) {
    const reshard_pool *pool = request->pools[i].pool;
    if (reshard_placement_find_part(request->source_placement,
                                    pool->participant_id) == NULL) {
      return reshard_error_set(
          t->err, RESHARD_INVALID_ARGUMENT,
          "source_memory_ids[%zu] (%s): participant \"%s\" is not in the "
          "source placement",
          i, request->pools[i].name, pool->participant_id);
    }
    t->pools[i] = (by_participant){pool->participant_id, i};
  }
  qsort(t->pools, request->pool_count, sizeof *t->pools,
        compare_by_participant);
  for (size_t i = 1; i < request->pool_count; i++) {
    size_t a = t->pools[i - 1].index, b = t->pools[i].index;
    if (strcmp(t->pools[i - 1].participant_id, t->pools[i].participant_id) ==
        0) {
      size_t first = a < b ? a : b, second = a < b ? b : a;
      return reshard_error_set(
          t->err, RESHARD_INVALID_ARGUMENT,
          "source_memory_ids[%zu] (%s): a second pool of participant \"%s\" "
          "(source_memory_ids[%zu] is one)",
          second, request->pools[second].name, t->pools[i].participant_id,
          first);
    }
  }
  return RESHARD_OK;
}

static const reshard_transfer_pool *find_pool(const transfer *t,
                                              const char *participant) {
  const reshard_transfer_request *request = t->request;
  size_t low = 0, high = request->pool_count;
  while (low < high) {
    size_t mid = low + (high - low) / 2;
    int order = strcmp(t->pools[mid].participant_id, participant);
    if (order == 0) {
      return &request->pools[t->pools[mid].index];
    }
    if (order < 0) {
      low = mid + 1;
    } else {
      high = mid;
    }
  }
  return NULL;
}

/* A source choice: participant `part` serves `layer`. */
typedef struct choice {
  const reshard_placement_part *part;
  uint64_t layer;
} choice;

static int compare_owners(const void *a, const void *b) {
  const reshard_placement_part *x = *(const reshard_placement_part *const *)a;
  const reshard_placement_part *y = *(const reshard_placement_part *const *)b;
  if (x->head_start != y->head_start) {
    return x->head_start < y->head_start ? -1 : 1;
  }
  if (x->replica_ordinal != y->replica_ordinal) {
    return x->replica_ordinal < y->replica_ordinal ? -1 : 1;
  }
  return strcmp(x->participant_id, y->participant_id);
}

static int compare_choices(const void *a, const void *b) {
  const choice *x = a, *y = b;
  int order = strcmp(x->part->participant_id, y->part->participant_id);
  if (order != 0) {
    return order;
  }
  return x->layer < y->layer ? -1 : x->layer > y->layer;
}

/* SPEC §2.6's source choice, as a layout: for every target layer and every
 * head interval of the source DP rank, the owner at position
 * target.replica_ordinal mod n of its n replicas sorted by
 * (replica_ordinal, participant_id); each chosen participant becomes a
 * shard of the layers it serves. The layout covers the target's layers
 * and every head, so it normalizes as any stored layout does, and the
 * join keeps only what the target holds. */
static reshard_status choose_sources(transfer *t) {
  const reshard_placement *source = t->request->source_placement;
  const reshard_placement_part *target = t->target;
  size_t layers = target->layer_count;
  const reshard_placement_part **owners = RESHARD_ARENA_ARRAY(
      t->arena, const reshard_placement_part *, source->part_count + 1);
  uint64_t choice_room;
  if (!reshard_mul(layers, source->part_count, &choice_room)) {
    return no_memory(t);
  }
  choice *choices = RESHARD_ARENA_ARRAY(t->arena, choice, choice_room + 1);
  if (owners == NULL || choices == NULL) {
    return no_memory(t);
  }
  size_t chosen = 0;
  for (size_t l = 0; l < layers; l++) {
    uint64_t layer = target->layer_ids[l];
    size_t n = 0;
    for (size_t p = 0; p < source->part_count; p++) {
      const reshard_placement_part *part = &source->parts[p];
      if (part->rank.dp == t->source_dp && layer_index(part, layer) >= 0) {
        owners[n++] = part;
      }
    }
    qsort(owners, n, sizeof *owners, compare_owners);
    for (size_t i = 0; i < n;) {
      size_t end = i + 1;
      while (end < n && owners[end]->head_start == owners[i]->head_start) {
        end++;
      }
      size_t replicas = end - i;
      choices[chosen++] =
          (choice){owners[i + target->replica_ordinal % replicas], layer};
      i = end;
    }
  }
  qsort(choices, chosen, sizeof *choices, compare_choices);
  size_t shard_count = 0;
  for (size_t i = 0; i < chosen; i++) {
    shard_count += i == 0 || choices[i].part != choices[i - 1].part;
  }
  reshard_shard *shards =
      RESHARD_ARENA_NEW(t->arena, reshard_shard, shard_count + 1);
  uint64_t *layer_ids = RESHARD_ARENA_ARRAY(t->arena, uint64_t, chosen + 1);
  if (shards == NULL || layer_ids == NULL) {
    return no_memory(t);
  }
  size_t s = SIZE_MAX;
  for (size_t i = 0; i < chosen; i++) {
    if (i == 0 || choices[i].part != choices[i - 1].part) {
      s = s == SIZE_MAX ? 0 : s + 1;
      shards[s] = (reshard_shard){
          .layer_ids = &layer_ids[i],
          .head_start = choices[i].part->head_start,
          .head_count = choices[i].part->head_count,
          .key_suffix = choices[i].part->participant_id,
      };
    }
    layer_ids[i] = choices[i].layer;
    shards[s].layer_count++;
  }
  t->layout = (reshard_layout){
      .descriptor = source->descriptor,
      .format = RESHARD_FORMAT_PLHD, /* any: only shards are read */
      .shards = shards,
      .shard_count = shard_count,
  };
  /* Only the target's layers: that is what the join reads. A copy, since
   * normalizing sorts it in place and the placement may be shared. */
  uint64_t *target_layers = RESHARD_ARENA_ARRAY(t->arena, uint64_t, layers + 1);
  if (target_layers == NULL) {
    return no_memory(t);
  }
  memcpy(target_layers, target->layer_ids, layers * sizeof *target_layers);
  t->layout.descriptor.global_layer_ids = target_layers;
  t->layout.descriptor.layer_count = layers;
  reshard_limits limits = t->request->limits;
  limits.max_layout_bytes = UINT64_MAX; /* no Part is ever stored */
  reshard_status status = reshard_layout_normalize(
      &t->layout, &limits, "source_placement", t->arena, t->err);
  if (status) {
    return status;
  }
  t->shard_part = RESHARD_ARENA_ARRAY(t->arena, const reshard_placement_part *,
                                      t->layout.shard_count + 1);
  if (t->shard_part == NULL) {
    return no_memory(t);
  }
  for (size_t i = 0; i < t->layout.shard_count; i++) {
    t->shard_part[i] =
        reshard_placement_find_part(source, t->layout.shards[i].key_suffix);
  }
  t->join = reshard_join_build(&t->layout, target, t->err);
  return t->join == NULL ? RESHARD_RESOURCE_EXHAUSTED : RESHARD_OK;
}

/* The sources the join reads, by participant id, with their pools: every
 * one needs a pool, and they share the block table, so one block size. */
static reshard_status find_sources(transfer *t) {
  size_t shards = t->layout.shard_count;
  const reshard_transfer_request *request = t->request;
  t->shard_source = RESHARD_ARENA_ARRAY(t->arena, size_t, shards + 1);
  by_participant *read =
      RESHARD_ARENA_ARRAY(t->arena, by_participant, shards + 1);
  t->source_part =
      RESHARD_ARENA_ARRAY(t->arena, const reshard_placement_part *, shards + 1);
  t->source_pool =
      RESHARD_ARENA_ARRAY(t->arena, const reshard_transfer_pool *, shards + 1);
  if (t->shard_source == NULL || read == NULL || t->source_part == NULL ||
      t->source_pool == NULL) {
    return no_memory(t);
  }
  for (size_t s = 0; s < shards; s++) {
    t->shard_source[s] = SIZE_MAX;
  }
  size_t count = 0;
  for (size_t e = 0; e < t->join->entry_count; e++) {
    size_t s = (size_t)t->join->entries[e].part_index;
    if (t->shard_source[s] == SIZE_MAX) {
      t->shard_source[s] = 0;
      read[count++] = (by_participant){t->shard_part[s]->participant_id, s};
    }
  }
  qsort(read, count, sizeof *read, compare_by_participant);
  for (size_t o = 0; o < count; o++) {
    const reshard_placement_part *part = t->shard_part[read[o].index];
    const reshard_transfer_pool *pool = find_pool(t, part->participant_id);
    if (pool == NULL) {
      return reshard_error_set(t->err, RESHARD_FAILED_PRECONDITION,
                               "source_memory_ids: source participant \"%s\" "
                               "holds values the target needs and has no "
                               "pool among them",
                               part->participant_id);
    }
    if (o == 0) {
      t->block_size = pool->bound->block_size;
    } else if (pool->bound->block_size != t->block_size) {
      return reshard_error_set(
          t->err, RESHARD_INVALID_ARGUMENT,
          "source_memory_ids[%zu] (%s): block_size %llu differs from the "
          "%llu of the other pools read; they share the source block table",
          (size_t)(pool - request->pools), pool->name,
          (unsigned long long)pool->bound->block_size,
          (unsigned long long)t->block_size);
    }
    t->shard_source[read[o].index] = o;
    t->source_part[o] = part;
    t->source_pool[o] = pool;
  }
  t->source_count = count;
  for (size_t o = 0; o < count; o++) {
    reshard_status status = reshard_block_table_check(
        t->block_size, t->source_pool[o]->bound->num_blocks,
        request->source_block_ids, request->source_block_count,
        request->token_count, &request->limits, "source_block_ids", t->arena,
        t->err);
    if (status) {
      return status;
    }
  }
  return RESHARD_OK;
}

/* What lowering produces: counted, and written when `out` is set. */
typedef struct lowering {
  uint64_t copies;
  uint64_t bytes;
  reshard_copy *out; /* NULL: count only */
  size_t written;
} lowering;

static void emit(lowering *low, uint64_t source, uint64_t region,
                 uint64_t source_region, uint64_t target, uint64_t nbytes,
                 uint64_t page) {
  if (low->out != NULL) {
    low->out[low->written++] =
        (reshard_copy){page, source_region, source, region, target, nbytes};
  }
  low->copies++;
  low->bytes += nbytes;
}

/* SPEC §2.2 step 3's granularity for tokens [t0, t1) and heads [h0, h1)
 * of one source block and one target range. */
static void lower_segment(lowering *low, uint64_t page,
                          const reshard_pool_group *source, uint64_t source_at,
                          const reshard_bound_range *range, uint64_t target_at,
                          uint64_t tokens, uint64_t heads, uint64_t hb) {
  bool rows = source->head_stride == hb && range->head_stride == hb;
  uint64_t row = heads * hb;
  if (rows && (tokens == 1 ||
               (source->token_stride == row && range->token_stride == row))) {
    emit(low, source_at, range->region_index, source->region_index, target_at,
         tokens * row, page);
    return;
  }
  for (uint64_t k = 0; k < tokens; k++) {
    uint64_t s = source_at + k * source->token_stride;
    uint64_t d = target_at + k * range->token_stride;
    if (rows) {
      emit(low, s, range->region_index, source->region_index, d, row, page);
      continue;
    }
    for (uint64_t h = 0; h < heads; h++) {
      emit(low, s + h * source->head_stride, range->region_index,
           source->region_index, d + h * range->head_stride, hb, page);
    }
  }
}

static bool stop_requested(const reshard_transfer_request *request) {
  return request->should_stop != NULL &&
         request->should_stop(request->should_stop_context);
}

/* One pass over every (target group, joined source, target range, source
 * block): counting when low->out is NULL, else writing. */
static reshard_status lower(transfer *t, lowering *low) {
  const reshard_join *join = t->join;
  const reshard_bound_binding *bound = &t->bound;
  const uint32_t *ids = t->request->source_block_ids;
  uint64_t bs = t->block_size;
  for (size_t g = 0; g < join->group_count; g++) {
    if (stop_requested(t->request)) {
      return reshard_error_set(t->err, RESHARD_DEADLINE_EXCEEDED,
                               "plan: abandoned (deadline or cancellation)");
    }
    uint64_t layer = t->target->layer_ids[g / 2];
    unsigned component = (unsigned)(g % 2);
    uint64_t hb = t->head_bytes[component];
    for (size_t e = join->group_start[g]; e < join->group_start[g + 1]; e++) {
      const reshard_join_entry *entry = &join->entries[e];
      size_t o = t->shard_source[entry->part_index];
      const reshard_placement_part *part = t->source_part[o];
      size_t source_group = (size_t)layer_index(part, layer) * 2 + component;
      const reshard_pool_group *source =
          &t->source_pool[o]->bound->groups[source_group];
      for (size_t r = bound->group_start[g]; r < bound->group_start[g + 1];
           r++) {
        const reshard_bound_range *range = &bound->ranges[r];
        uint64_t h0 = entry->head_start > range->head_start ? entry->head_start
                                                            : range->head_start;
        uint64_t h1 = entry->head_end < range->head_end ? entry->head_end
                                                        : range->head_end;
        if (h0 >= h1) {
          continue;
        }
        for (uint64_t i = range->token_start / bs; i * bs < range->token_end;
             i++) {
          uint64_t t0 =
              i * bs > range->token_start ? i * bs : range->token_start;
          uint64_t t1 =
              (i + 1) * bs < range->token_end ? (i + 1) * bs : range->token_end;
          uint64_t source_at = source->offset +
                               (uint64_t)ids[i] * source->block_stride +
                               (t0 - i * bs) * source->token_stride +
                               (h0 - part->head_start) * source->head_stride;
          uint64_t target_at = range->region_offset +
                               (t0 - range->token_start) * range->token_stride +
                               (h0 - range->head_start) * range->head_stride;
          lower_segment(low, o, source, source_at, range, target_at, t1 - t0,
                        h1 - h0, hb);
        }
      }
    }
  }
  return RESHARD_OK;
}

static int compare_copies(const void *a, const void *b) {
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

/* Where each read source region starts on one line through every source
 * region in (source, region) order: a copy's place on it orders copies as
 * (source, source region, source offset), and no two copies of one plan
 * read the same byte, so it is a sort key without ties. False when the
 * regions' sizes add up past 64 bits (then the copies are sorted by
 * comparison). */
static bool region_bases(const transfer *t, uint64_t **out) {
  size_t regions = 0;
  for (size_t o = 0; o < t->source_count; o++) {
    regions += t->source_pool[o]->pool->region_count;
  }
  uint64_t *bases = RESHARD_ARENA_ARRAY(t->arena, uint64_t, regions + 1);
  if (bases == NULL) {
    return false;
  }
  uint64_t at = 0;
  size_t i = 0;
  for (size_t o = 0; o < t->source_count; o++) {
    const reshard_pool *pool = t->source_pool[o]->pool;
    for (size_t r = 0; r < pool->region_count; r++) {
      bases[i++] = at;
      if (!reshard_add(at, pool->regions[r].nbytes, &at)) {
        return false;
      }
    }
  }
  *out = bases;
  return true;
}

/* SPEC §2.2 step 4 in the transfer's order: sorted (the planner's radix
 * sort on each copy's place among the source regions), then each copy
 * merged into the previous one when both its ends continue it. Returns
 * the coalesced copies, in the arena, and their count in *count. */
static reshard_copy *coalesce(const transfer *t, reshard_copy *copies,
                              size_t *count) {
  size_t n = *count;
  uint64_t *bases = NULL;
  size_t *first_region =
      RESHARD_ARENA_ARRAY(t->arena, size_t, t->source_count + 1);
  reshard__keyed *keyed = RESHARD_ARENA_ARRAY(t->arena, reshard__keyed, n + 1);
  reshard__keyed *spare = RESHARD_ARENA_ARRAY(t->arena, reshard__keyed, n + 1);
  reshard_copy *sorted = RESHARD_ARENA_ARRAY(t->arena, reshard_copy, n + 1);
  if (first_region != NULL && keyed != NULL && spare != NULL &&
      sorted != NULL && region_bases(t, &bases)) {
    size_t at = 0;
    for (size_t o = 0; o < t->source_count; o++) {
      first_region[o] = at;
      at += t->source_pool[o]->pool->region_count;
    }
    for (size_t i = 0; i < n; i++) {
      const reshard_copy *c = &copies[i];
      keyed[i] = (reshard__keyed){
          bases[first_region[c->page_index] + c->part_index] + c->part_offset,
          i};
    }
    const reshard__keyed *order = reshard__sort_keyed(keyed, spare, n);
    for (size_t i = 0; i < n; i++) {
      sorted[i] = copies[order[i].index];
    }
    copies = sorted;
  } else {
    qsort(copies, n, sizeof *copies, compare_copies);
  }
  size_t merged = 0;
  for (size_t i = 0; i < n; i++) {
    reshard_copy *last = merged > 0 ? &copies[merged - 1] : NULL;
    const reshard_copy *c = &copies[i];
    if (last != NULL && last->page_index == c->page_index &&
        last->part_index == c->part_index &&
        last->region_index == c->region_index &&
        last->part_offset + last->nbytes == c->part_offset &&
        last->region_offset + last->nbytes == c->region_offset) {
      last->nbytes += c->nbytes;
    } else {
      copies[merged++] = *c;
    }
  }
  *count = merged;
  return copies;
}

/* SPEC §2.2 step 5, a batch closed at every change of source. */
static reshard_status batch(transfer *t, const reshard_copy *copies,
                            size_t count, uint64_t bytes,
                            reshard_transfer_plan *out) {
  reshard__batching limits = {t->request->limits.max_batch_operations,
                              t->request->limits.max_batch_bytes};
  size_t max_copies, max_batches;
  reshard__batch_bounds(count, bytes, &limits, &max_copies, &max_batches);
  max_batches += t->source_count;
  out->copies = RESHARD_ARENA_ARRAY(t->arena, reshard_copy, max_copies + 1);
  out->batches = RESHARD_ARENA_ARRAY(t->arena, reshard_batch, max_batches + 1);
  if (out->copies == NULL || out->batches == NULL) {
    return no_memory(t);
  }
  reshard__batcher batcher;
  reshard__batcher_init(&batcher, &limits, out->copies, out->batches);
  for (size_t i = 0; i < count;) {
    size_t end = i;
    while (end < count && copies[end].page_index == copies[i].page_index) {
      end++;
    }
    reshard__batcher_push(&batcher, copies + i, end - i);
    reshard__batcher_finish(&batcher);
    i = end;
  }
  out->copy_count = batcher.written;
  out->batch_count = batcher.batch_count;
  out->batch_source =
      RESHARD_ARENA_ARRAY(t->arena, size_t, out->batch_count + 1);
  if (out->batch_source == NULL) {
    return no_memory(t);
  }
  for (size_t b = 0; b < out->batch_count; b++) {
    out->batch_source[b] =
        (size_t)out->copies[out->batches[b].first].page_index;
  }
  return RESHARD_OK;
}

static reshard_status bind_target(transfer *t) {
  const reshard_transfer_request *request = t->request;
  if (request->pooled != NULL) {
    /* The transfer lowers over bound ranges: one per block and group. */
    const reshard_pooled_memory *pooled = request->pooled;
    reshard_status status =
        reshard_pool_bind(pooled->pool, pooled->block_ids, pooled->block_count,
                          request->token_count, &request->limits, "pooled",
                          t->arena, &t->bound, t->err);
    t->bound.part = t->target;
    return status;
  }
  if (request->bound_binding != NULL) {
    t->bound = *request->bound_binding;
    t->bound.part = t->target;
    return RESHARD_OK;
  }
  /* The binding covers [0, token_count): the span of token_count pages of
   * one token. */
  reshard_descriptor descriptor = request->target_placement->descriptor;
  descriptor.page_size = 1;
  return reshard_binding_validate(request->binding, &descriptor, t->target,
                                  request->token_count, &request->limits,
                                  t->arena, &t->bound, t->err);
}

static reshard_status plan(transfer *t, reshard_transfer_plan *out) {
  const reshard_transfer_request *request = t->request;
  reshard_status status;
  if ((status = check_target(t)) || (status = check_pools(t)) ||
      (status = bind_target(t)) || (status = choose_sources(t)) ||
      (status = find_sources(t))) {
    return status;
  }
  const reshard_descriptor *descriptor = &request->target_placement->descriptor;
  t->head_bytes[0] = reshard_head_bytes(descriptor, RESHARD_COMPONENT_KEY);
  t->head_bytes[1] = reshard_head_bytes(descriptor, RESHARD_COMPONENT_VALUE);
  lowering count = {0};
  if ((status = lower(t, &count))) {
    return status;
  }
  if (count.copies > request->limits.max_operations) {
    return reshard_error_set(
        t->err, RESHARD_RESOURCE_EXHAUSTED,
        "plan: %llu copies exceed the limit "
        "max_operations %llu",
        (unsigned long long)count.copies,
        (unsigned long long)request->limits.max_operations);
  }
  if (count.bytes > request->limits.max_bytes) {
    return reshard_error_set(t->err, RESHARD_RESOURCE_EXHAUSTED,
                             "plan: %llu bytes exceed the limit max_bytes %llu",
                             (unsigned long long)count.bytes,
                             (unsigned long long)request->limits.max_bytes);
  }
  lowering write = {
      .out = RESHARD_ARENA_ARRAY(t->arena, reshard_copy, count.copies + 1)};
  if (write.out == NULL) {
    return no_memory(t);
  }
  if ((status = lower(t, &write))) {
    return status;
  }
  size_t coalesced = write.written;
  reshard_copy *ordered = coalesce(t, write.out, &coalesced);
  if ((status = batch(t, ordered, coalesced, write.bytes, out))) {
    return status;
  }
  out->sources = RESHARD_ARENA_ARRAY(t->arena, size_t, t->source_count + 1);
  if (out->sources == NULL) {
    return no_memory(t);
  }
  for (size_t o = 0; o < t->source_count; o++) {
    out->sources[o] = (size_t)(t->source_pool[o] - request->pools);
  }
  out->source_count = t->source_count;
  out->operations = out->copy_count;
  out->bytes = write.bytes;
  out->copies_before_coalescing = write.copies;
  out->participant = t->target;
  if (request->runs) {
    status = reshard_runs_fold(out->copies, out->batches, out->batch_count,
                               t->arena, &out->runs, t->err);
  }
  return status;
}

reshard_status reshard_plan_transfer(const reshard_transfer_request *request,
                                     reshard_arena *arena,
                                     reshard_transfer_plan *out,
                                     reshard_error *err) {
  memset(out, 0, sizeof *out);
  transfer t = {.request = request, .arena = arena, .err = err};
  reshard_status status = plan(&t, out);
  reshard_join_free(t.join);
  if (status) {
    memset(out, 0, sizeof *out);
  }
  return status;
}
