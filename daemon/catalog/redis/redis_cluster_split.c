/* Reads of keys of several slots on the Redis Cluster client (rule 1 of
 * redis_cluster.c): get_manifests of several domains and get_objects are
 * split into one read per slot, sent side by side, and their records
 * gathered back into the caller's order before its callback runs once. */
#include <stdlib.h>
#include <string.h>

#include "catalog/redis/redis_cluster.h"

typedef struct gather {
  reshard_catalog_get_cb cb;
  void *data;
  size_t count, pending;
  reshard_catalog_record *records;
  bool failed;
  reshard_error err;
} gather;

typedef struct gather_part {
  gather *g;
  size_t n;
  size_t positions[];
} gather_part;

static void gather_finish(gather *g) {
  reshard_error ok;
  reshard_error_clear(&ok);
  if (g->failed) {
    g->cb(g->data, &g->err, NULL, 0);
  } else {
    g->cb(g->data, &ok, g->records, g->count);
  }
  for (size_t i = 0; i < g->count; i++) {
    free((void *)g->records[i].data);
  }
  free(g->records);
  free(g);
}

static void on_part(void *data, const reshard_error *err,
                    const reshard_catalog_record *records, size_t count) {
  gather_part *part = data;
  gather *g = part->g;
  if (err->code != RESHARD_OK) {
    if (!g->failed) {
      g->failed = true;
      g->err = *err;
    }
  } else {
    for (size_t i = 0; i < count && i < part->n; i++) {
      if (!records[i].found) {
        continue;
      }
      uint8_t *copy = malloc(records[i].length ? records[i].length : 1);
      if (copy == NULL) {
        g->failed = true;
        reshard__redis_out_of_memory(&g->err);
        break;
      }
      memcpy(copy, records[i].data, records[i].length);
      reshard_catalog_record *to = &g->records[part->positions[i]];
      to->found = true;
      to->data = copy;
      to->length = records[i].length;
    }
  }
  free(part);
  if (--g->pending == 0) {
    gather_finish(g);
  }
}

typedef struct slot_key {
  uint16_t slot;
  size_t index;
} slot_key;

static int compare_slot_keys(const void *a, const void *b) {
  const slot_key *x = a, *y = b;
  if (x->slot != y->slot) {
    return x->slot < y->slot ? -1 : 1;
  }
  return x->index < y->index ? -1 : x->index > y->index;
}

bool reshard__redis_cluster_split_get(redis_catalog *r, op_kind kind,
                                      reshard_catalog_object_kind object,
                                      const char *const *keys, size_t count,
                                      reshard_catalog_get_cb cb, void *data) {
  if (count < 2) {
    return false;
  }
  reshard_error err;
  slot_key *order = malloc(count * sizeof *order);
  if (order == NULL) {
    return false; /* one read; its reply may then be CROSSSLOT */
  }
  size_t groups = 1;
  for (size_t i = 0; i < count; i++) {
    order[i].slot =
        reshard__redis_cluster_key_slot(r, kind, object, NULL, keys[i]);
    order[i].index = i;
    groups += i > 0 && order[i].slot != order[0].slot;
  }
  if (groups == 1) {
    free(order);
    return false;
  }
  qsort(order, count, sizeof *order, compare_slot_keys);
  groups = 1;
  for (size_t i = 1; i < count; i++) {
    groups += order[i].slot != order[i - 1].slot;
  }
  gather *g = calloc(1, sizeof *g);
  redis_op **ops = calloc(groups, sizeof *ops);
  const char **subset = malloc(count * sizeof *subset);
  bool ok = g != NULL && ops != NULL && subset != NULL &&
            (g->records = calloc(count, sizeof *g->records)) != NULL;
  size_t built = 0;
  for (size_t start = 0; ok && start < count; built++) {
    size_t end = start + 1;
    while (end < count && order[end].slot == order[start].slot) {
      end++;
    }
    gather_part *part =
        malloc(sizeof *part + (end - start) * sizeof part->positions[0]);
    if (part == NULL) {
      ok = false;
      break;
    }
    part->g = g;
    part->n = end - start;
    for (size_t i = start; i < end; i++) {
      part->positions[i - start] = order[i].index;
      subset[i - start] = keys[order[i].index];
    }
    ops[built] = reshard__redis_op_new(r, kind, NULL, NULL, NULL, 0, subset,
                                       end - start);
    if (ops[built] == NULL) {
      free(part);
      ok = false;
      break;
    }
    ops[built]->object = object;
    ops[built]->get_cb = on_part;
    ops[built]->data = part;
    start = end;
  }
  free(order);
  free(subset);
  if (!ok) {
    for (size_t i = 0; i < built; i++) {
      free(ops[i]->data);
      r->live_ops--;
      free(ops[i]);
    }
    free(ops);
    if (g != NULL) {
      free(g->records);
      free(g);
    }
    reshard__redis_out_of_memory(&err);
    cb(data, &err, NULL, 0);
    return true;
  }
  g->cb = cb;
  g->data = data;
  g->count = count;
  g->pending = groups;
  /* The last start may complete the gather and free it: nothing of it is
   * touched once the starts begin. */
  for (size_t i = 0; i < groups; i++) {
    reshard__redis_start_op(ops[i]);
  }
  free(ops);
  return true;
}
