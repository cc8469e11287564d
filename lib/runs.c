/* Strided runs (SPEC §2.2 step 7): one pass over each batch, a small
 * open-addressing table finding each copy's class, so folding costs at most
 * a hash probe per copy and writes one entry per run. A batch has few classes
 * (S1 read into one region per layer: 32 a page), so the table starts small
 * enough to stay in L1 and doubles when half full, rather than being sized
 * for a batch of all-distinct classes (512 KiB, zeroed per plan, for
 * batches of 4 096 copies). */
#include "reshard/runs.h"

#include <string.h>

#include "plan_internal.h"

/* A class, its current run and where the run's last copy lies, so the
 * progression test is a subtraction (no multiplication that could wrap).
 * One cache line; the key is kept here so a probe reads nothing else. */
typedef struct fold_slot {
  uint64_t stamp; /* the batch this slot belongs to; stale otherwise */
  uint64_t page_index, part_index, region_index, nbytes; /* the class */
  size_t run;
  uint64_t last_part;
  uint64_t last_region;
} fold_slot;

static bool in_class(const fold_slot *slot, const reshard_copy *copy) {
  return slot->page_index == copy->page_index &&
         slot->part_index == copy->part_index &&
         slot->region_index == copy->region_index &&
         slot->nbytes == copy->nbytes;
}

static size_t class_hash(const reshard_copy *copy) {
  uint64_t h = copy->page_index * 0x9e3779b97f4a7c15ull;
  h ^= copy->part_index * 0xc2b2ae3d27d4eb4full;
  h ^= copy->region_index * 0x165667b19e3779f9ull;
  h ^= copy->nbytes * 0xd6e8feb86659fd93ull;
  h ^= h >> 29;
  h *= 0xbf58476d1ce4e5b9ull;
  return (size_t)(h ^ (h >> 32));
}

/* 64 slots of 64 bytes: 4 KiB. */
enum { INITIAL_SLOTS = 64, RECENT = 64 };

/* The slot of `copy`'s class in the batch `stamp`: its live slot, or the
 * free slot where it belongs. */
static fold_slot *find_slot(fold_slot *slots, size_t mask, uint64_t stamp,
                            const reshard_copy *copy) {
  size_t at = class_hash(copy) & mask;
  for (;;) {
    fold_slot *slot = &slots[at];
    if (slot->stamp != stamp || in_class(slot, copy)) {
      return slot;
    }
    at = (at + 1) & mask;
  }
}

/* Doubles the table, moving the live slots of batch `stamp` (the others
 * are stale). The old table stays in the arena until the plan ends; the
 * tables add up to less than twice the last one. */
static reshard_status grow_slots(reshard__run_folder *folder, uint64_t stamp,
                                 reshard_error *err) {
  size_t old_count = folder->mask + 1;
  fold_slot *grown = RESHARD_ARENA_NEW(folder->arena, fold_slot, 2 * old_count);
  if (grown == NULL) {
    return reshard_error_set(err, RESHARD_RESOURCE_EXHAUSTED,
                             "runs: out of memory");
  }
  size_t mask = 2 * old_count - 1;
  for (size_t i = 0; i < old_count; i++) {
    const fold_slot *slot = &folder->slots[i];
    if (slot->stamp == stamp) {
      reshard_copy key = {.page_index = slot->page_index,
                          .part_index = slot->part_index,
                          .region_index = slot->region_index,
                          .nbytes = slot->nbytes};
      *find_slot(grown, mask, stamp, &key) = *slot;
    }
  }
  folder->slots = grown;
  folder->mask = mask;
  return RESHARD_OK;
}

reshard_status reshard__run_folder_init(reshard__run_folder *folder,
                                        size_t max_copies, size_t max_batches,
                                        reshard_arena *arena,
                                        reshard_error *err) {
  memset(folder, 0, sizeof *folder);
  folder->arena = arena;
  folder->runs = RESHARD_ARENA_ARRAY(arena, reshard_run, max_copies + 1);
  folder->batch_first = RESHARD_ARENA_ARRAY(arena, size_t, max_batches + 1);
  folder->slots = RESHARD_ARENA_NEW(arena, fold_slot, INITIAL_SLOTS);
  folder->mask = INITIAL_SLOTS - 1;
  if (folder->runs == NULL || folder->batch_first == NULL ||
      folder->slots == NULL) {
    return reshard_error_set(err, RESHARD_RESOURCE_EXHAUSTED,
                             "runs: out of memory");
  }
  folder->batch_first[0] = 0;
  return RESHARD_OK;
}

reshard_status reshard__run_folder_batch(reshard__run_folder *folder,
                                         const reshard_copy *copies,
                                         size_t count, reshard_error *err) {
  reshard_run *runs = folder->runs;
  size_t written = folder->run_count;
  /* Stamps start at 1 so the zeroed table holds no live slot. */
  uint64_t stamp = ++folder->batch_count;
  size_t live = 0; /* classes of this batch in the table */
  /* The last slot seen per region (modulo RECENT), valid for this batch
   * and this table only: copies in source order visit one region per layer
   * in turn, token after token, and each finds its class here without
   * hashing. */
  fold_slot *recent[RECENT] = {0};
  for (size_t i = 0; i < count; i++) {
    const reshard_copy *copy = &copies[i];
    fold_slot **cached = &recent[copy->region_index % RECENT];
    fold_slot *slot = *cached;
    if (slot == NULL || !in_class(slot, copy)) {
      slot = find_slot(folder->slots, folder->mask, stamp, copy);
      if (slot->stamp != stamp && 2 * (live + 1) > folder->mask + 1) {
        reshard_status status = grow_slots(folder, stamp, err);
        if (status) {
          return status;
        }
        /* The cached slots are in the old table. */
        memset(recent, 0, sizeof recent);
        slot = find_slot(folder->slots, folder->mask, stamp, copy);
      }
    }
    if (slot->stamp == stamp) {
      reshard_run *run = &runs[slot->run];
      if (copy->part_offset <= slot->last_part) {
        return reshard_error_set(
            err, RESHARD_INVALID_ARGUMENT,
            "runs: copy %zu of batch %zu: part_offset %llu does not follow "
            "%llu of its class; copies must be in increasing part offset",
            i, folder->batch_count - 1, (unsigned long long)copy->part_offset,
            (unsigned long long)slot->last_part);
      }
      uint64_t part_step = copy->part_offset - slot->last_part;
      uint64_t region_step = copy->region_offset - slot->last_region;
      bool forward = copy->region_offset >= slot->last_region;
      if (forward && run->count == 1) {
        run->part_stride = part_step;
        run->region_stride = region_step;
        run->count = 2;
      } else if (forward && part_step == run->part_stride &&
                 region_step == run->region_stride) {
        run->count++;
      } else {
        slot->run = written;
        runs[written++] = (reshard_run){*copy, 1, 0, 0};
      }
    } else {
      live++;
      *slot = (fold_slot){stamp,
                          copy->page_index,
                          copy->part_index,
                          copy->region_index,
                          copy->nbytes,
                          written,
                          0,
                          0};
      runs[written++] = (reshard_run){*copy, 1, 0, 0};
    }
    slot->last_part = copy->part_offset;
    slot->last_region = copy->region_offset;
    *cached = slot;
  }
  folder->run_count = written;
  folder->batch_first[folder->batch_count] = written;
  return RESHARD_OK;
}

void reshard__run_folder_finish(const reshard__run_folder *folder,
                                reshard_runs *out) {
  *out = (reshard_runs){
      .runs = folder->runs,
      .run_count = folder->run_count,
      .batch_first = folder->batch_first,
      .batch_count = folder->batch_count,
  };
}

reshard_status reshard_runs_fold(const reshard_copy *copies,
                                 const reshard_batch *batches,
                                 size_t batch_count, reshard_arena *arena,
                                 reshard_runs *out, reshard_error *err) {
  memset(out, 0, sizeof *out);
  size_t total = 0;
  for (size_t b = 0; b < batch_count; b++) {
    total += batches[b].count;
  }
  reshard__run_folder folder;
  reshard_status status =
      reshard__run_folder_init(&folder, total, batch_count, arena, err);
  for (size_t b = 0; status == RESHARD_OK && b < batch_count; b++) {
    status = reshard__run_folder_batch(&folder, copies + batches[b].first,
                                       batches[b].count, err);
  }
  if (status == RESHARD_OK) {
    reshard__run_folder_finish(&folder, out);
  }
  return status;
}
