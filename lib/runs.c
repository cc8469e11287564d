/* Strided runs (SPEC §2.2 step 7): one pass over each batch, a small
 * open-addressing table finding each copy's class, so folding costs a hash
 * probe per copy and writes one entry per run. */
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

reshard_status
reshard__run_folder_init(reshard__run_folder *folder, size_t max_copies,
                         size_t max_batch_copies, size_t max_batches,
                         reshard_arena *arena, reshard_error *err) {
  memset(folder, 0, sizeof *folder);
  size_t slots = 16;
  while (slots < 2 * max_batch_copies) {
    slots *= 2;
  }
  folder->runs = RESHARD_ARENA_ARRAY(arena, reshard_run, max_copies + 1);
  folder->batch_first = RESHARD_ARENA_ARRAY(arena, size_t, max_batches + 1);
  folder->slots = RESHARD_ARENA_NEW(arena, fold_slot, slots);
  folder->mask = slots - 1;
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
  fold_slot *slots = folder->slots;
  size_t written = folder->run_count;
  /* Stamps start at 1 so the zeroed table holds no live slot. */
  uint64_t stamp = ++folder->batch_count;
  /* The slot of the previous copy: consecutive copies of one class (a
   * single pool read layer after layer) skip the probe. */
  fold_slot *recent = NULL;
  for (size_t i = 0; i < count; i++) {
    const reshard_copy *copy = &copies[i];
    fold_slot *slot = recent;
    if (slot == NULL || !in_class(slot, copy)) {
      size_t at = class_hash(copy) & folder->mask;
      for (;;) {
        slot = &slots[at];
        if (slot->stamp != stamp || in_class(slot, copy)) {
          break;
        }
        at = (at + 1) & folder->mask;
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
    recent = slot;
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
  size_t total = 0, largest = 0;
  for (size_t b = 0; b < batch_count; b++) {
    total += batches[b].count;
    if (batches[b].count > largest) {
      largest = batches[b].count;
    }
  }
  reshard__run_folder folder;
  reshard_status status = reshard__run_folder_init(&folder, total, largest,
                                                   batch_count, arena, err);
  for (size_t b = 0; status == RESHARD_OK && b < batch_count; b++) {
    status = reshard__run_folder_batch(&folder, copies + batches[b].first,
                                       batches[b].count, err);
  }
  if (status == RESHARD_OK) {
    reshard__run_folder_finish(&folder, out);
  }
  return status;
}
