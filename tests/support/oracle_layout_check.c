/* Checks of what the library normalizes and plans before any load: a
 * layout in the canonical order of SPEC §1.3, and an upload plan against
 * SPEC §2.1 computed here (oracle.h). */
#include "oracle_internal.h"

#include <inttypes.h>

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
