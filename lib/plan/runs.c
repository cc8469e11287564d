/* Strided runs (SPEC §2.2 step 7): one pass over each batch, a small
 * open-addressing table finding each copy's class, so folding costs at most
 * a hash probe per copy and writes one entry per run. A batch has few classes
 * (S1 read into one region per layer: 32 a page), so the table starts small
 * enough to stay in L1 and doubles when half full, rather than being sized
 * for a batch of all-distinct classes (512 KiB, zeroed per plan, for
 * batches of 4 096 copies). */
#include "reshard/runs.h"

#include <string.h>

#include "plan/plan_internal.h"

/* fold_slot (a class, its current run and where the run's last copy
 * lies) is in plan_internal.h, for reshard__run_folder_fast. */
typedef struct fold_slot fold_slot;

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
enum { INITIAL_SLOTS = 64 };

/* The slot of `copy`'s class, whose class_hash is `hash`, in the batch
 * `stamp`: its live slot, or the free slot where it belongs. */
static fold_slot *find_slot(fold_slot *slots, size_t mask, uint64_t stamp,
                            const reshard_copy *copy, size_t hash) {
  size_t at = hash & mask;
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
      *find_slot(grown, mask, stamp, &key, class_hash(&key)) = *slot;
    }
  }
  folder->slots = grown;
  folder->mask = mask;
  /* The cached slots are in the old table. */
  memset(folder->recent, 0, sizeof folder->recent);
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
  folder->batch_like = RESHARD_ARENA_ARRAY(arena, size_t, max_batches + 1);
  folder->batch_segment = RESHARD_ARENA_ARRAY(arena, size_t, max_batches + 1);
  folder->open_like = SIZE_MAX;
  folder->slots = RESHARD_ARENA_NEW(arena, fold_slot, INITIAL_SLOTS);
  folder->mask = INITIAL_SLOTS - 1;
  if (folder->runs == NULL || folder->batch_first == NULL ||
      folder->batch_like == NULL || folder->batch_segment == NULL ||
      folder->slots == NULL) {
    return reshard_error_set(err, RESHARD_RESOURCE_EXHAUSTED,
                             "runs: out of memory");
  }
  folder->batch_first[0] = 0;
  folder->batch_segment[0] = 0;
  return RESHARD_OK;
}

/* ---- Where runs came from (plan_internal.h, segment_start) ---- */

/* Appends to the open batch's segments the one starting at run `start`
 * with runs from `origin` on, or lengthens the last when it continues
 * it. False when the arena cannot grow them. */
static bool segment_push(reshard__run_folder *folder, size_t start,
                         size_t origin) {
  size_t count = folder->segment_count;
  if (count > folder->batch_segment[folder->batch_count] &&
      folder->segment_origin[count - 1] +
              (start - folder->segment_start[count - 1]) ==
          origin) {
    return true;
  }
  if (count == folder->segment_room) {
    /* The old arrays stay in the arena until the plan ends. */
    size_t room = count < 32 ? 64 : 2 * count;
    size_t *starts = RESHARD_ARENA_ARRAY(folder->arena, size_t, room);
    size_t *origins = RESHARD_ARENA_ARRAY(folder->arena, size_t, room);
    if (starts == NULL || origins == NULL) {
      return false;
    }
    if (count > 0) {
      memcpy(starts, folder->segment_start, count * sizeof *starts);
      memcpy(origins, folder->segment_origin, count * sizeof *origins);
    }
    folder->segment_start = starts;
    folder->segment_origin = origins;
    folder->segment_room = room;
  }
  folder->segment_start[count] = start;
  folder->segment_origin[count] = origin;
  folder->segment_count = count + 1;
  return true;
}

/* The runs appended since the segments last ended are the folder's own. */
static void segments_catch_up(reshard__run_folder *folder) {
  if (folder->segments_lost || folder->segments_end == folder->run_count) {
    return;
  }
  folder->segments_lost =
      !segment_push(folder, folder->segments_end, folder->segments_end);
  folder->segments_end = folder->run_count;
}

/* The segments of runs [first, end) (< segments_end) appended for the
 * same runs renamed at run_count. */
static void segments_renamed(reshard__run_folder *folder, size_t first,
                             size_t end) {
  segments_catch_up(folder);
  if (folder->segments_lost || first >= end) {
    return;
  }
  /* The segment holding `first`: the last starting at or before it. */
  size_t low = 0, high = folder->segment_count;
  while (high - low > 1) {
    size_t mid = low + (high - low) / 2;
    if (folder->segment_start[mid] <= first) {
      low = mid;
    } else {
      high = mid;
    }
  }
  /* Read up to the segments there are now; those pushed start at `to`. */
  size_t to = folder->run_count, count = folder->segment_count;
  for (size_t k = low, r = first; r < end && !folder->segments_lost; k++) {
    size_t stop = k + 1 < count ? folder->segment_start[k + 1] : to;
    folder->segments_lost = !segment_push(folder, to + (r - first),
                                          folder->segment_origin[k] +
                                              (r - folder->segment_start[k]));
    r = stop < end ? stop : end;
  }
  folder->segments_end = to + (end - first);
}

/* How many batches back a batch is looked for among those of the same
 * origins: a transfer's batches repeat with its layers, and a layer holds
 * one batch or a few. */
enum { SAME_ORIGIN_LOOKBACK = 4 };

/* Whether closed batch `a` and the open batch (its segments caught up)
 * hold runs of the same origins. */
static bool same_origins(const reshard__run_folder *folder, size_t a) {
  size_t b = folder->batch_count;
  size_t a_first = folder->batch_first[a], b_first = folder->batch_first[b];
  size_t a_seg = folder->batch_segment[a], b_seg = folder->batch_segment[b];
  size_t segments = folder->segment_count - b_seg;
  if (folder->batch_first[a + 1] - a_first != folder->run_count - b_first ||
      folder->batch_segment[a + 1] - a_seg != segments) {
    return false;
  }
  for (size_t k = 0; k < segments; k++) {
    if (folder->segment_origin[a_seg + k] !=
            folder->segment_origin[b_seg + k] ||
        folder->segment_start[a_seg + k] - a_first !=
            folder->segment_start[b_seg + k] - b_first) {
      return false;
    }
  }
  return true;
}

/* The open batch's name (reshard_runs.batch_like): an earlier batch of
 * the same origins, looked for in the closed batch last renamed whole
 * into it (however far back) and in the few just before it; else
 * itself. */
static size_t open_batch_like(reshard__run_folder *folder) {
  size_t like = folder->open_like, b = folder->batch_count;
  segments_catch_up(folder);
  if (folder->run_count == folder->batch_first[b] || folder->segments_lost) {
    return b;
  }
  if (like != SIZE_MAX && same_origins(folder, like)) {
    return like;
  }
  for (size_t back = 1; back <= SAME_ORIGIN_LOOKBACK && back <= b; back++) {
    if (same_origins(folder, b - back)) {
      return b - back;
    }
  }
  return b;
}

/* Stamps start at 1 so the zeroed table holds no live slot. */
static uint64_t open_stamp(const reshard__run_folder *folder) {
  return folder->batch_count + 1;
}

/* The slot of `copy`'s class in the open batch without hashing when the
 * region's last class is it (recent[] holds live slots of the open batch
 * and the current table only), else its live slot or the free slot where
 * it belongs; *hash is set to its class_hash when it was computed (and
 * left alone otherwise). */
static fold_slot *lookup_slot(const reshard__run_folder *folder,
                              const reshard_copy *copy, size_t *hash,
                              bool *hashed) {
  fold_slot *slot = folder->recent[copy->region_index % RESHARD__FOLD_RECENT];
  if (slot != NULL && in_class(slot, copy)) {
    return slot;
  }
  if (!*hashed) {
    *hash = class_hash(copy);
    *hashed = true;
  }
  return find_slot(folder->slots, folder->mask, open_stamp(folder), copy,
                   *hash);
}

/* Folds one copy into the open batch at `slot`, its class's slot as
 * lookup_slot found it in the current table (nothing inserted since);
 * *out is the slot, whose run now ends with the copy. `hash`, `hashed`:
 * as lookup_slot left them (the table may grow here). */
static inline reshard_status fold_copy_at(reshard__run_folder *folder,
                                          fold_slot *slot,
                                          const reshard_copy *copy, size_t hash,
                                          bool hashed, fold_slot **out,
                                          reshard_error *err) {
  uint64_t stamp = open_stamp(folder);
  reshard_run *runs = folder->runs;
  if (slot->stamp == stamp) {
    reshard_run *run = &runs[slot->run];
    if (copy->part_offset <= slot->last_part) {
      return reshard_error_set(
          err, RESHARD_INVALID_ARGUMENT,
          "runs: copy %zu of batch %zu: part_offset %llu does not follow "
          "%llu of its class; copies must be in increasing part offset",
          folder->open_copies, folder->batch_count,
          (unsigned long long)copy->part_offset,
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
      slot->run = folder->run_count;
      runs[folder->run_count++] = (reshard_run){*copy, 1, 0, 0};
    }
  } else {
    if (2 * (folder->live + 1) > folder->mask + 1) {
      reshard_status status = grow_slots(folder, stamp, err);
      if (status) {
        return status;
      }
      slot = find_slot(folder->slots, folder->mask, stamp, copy,
                       hashed ? hash : class_hash(copy));
    }
    folder->live++;
    *slot = (fold_slot){stamp,
                        copy->page_index,
                        copy->part_index,
                        copy->region_index,
                        copy->nbytes,
                        folder->run_count,
                        0,
                        0};
    runs[folder->run_count++] = (reshard_run){*copy, 1, 0, 0};
  }
  slot->last_part = copy->part_offset;
  slot->last_region = copy->region_offset;
  folder->open_copies++;
  folder->recent[copy->region_index % RESHARD__FOLD_RECENT] = slot;
  *out = slot;
  return RESHARD_OK;
}

/* Folds one copy into the open batch; *out is the slot of its class, whose
 * run now ends with the copy. `hash`: the copy's class_hash when the
 * caller has it, else NULL. */
static reshard_status fold_copy(reshard__run_folder *folder,
                                const reshard_copy *copy, const size_t *hash,
                                fold_slot **out, reshard_error *err) {
  size_t h = hash != NULL ? *hash : 0;
  bool hashed = hash != NULL;
  fold_slot *slot = lookup_slot(folder, copy, &h, &hashed);
  return fold_copy_at(folder, slot, copy, h, hashed, out, err);
}

reshard_status reshard__run_folder_copies(reshard__run_folder *folder,
                                          const reshard_copy *copies,
                                          size_t count, reshard_error *err) {
  for (size_t i = 0; i < count; i++) {
    fold_slot *slot;
    reshard_status status = fold_copy(folder, &copies[i], NULL, &slot, err);
    if (status) {
      return status;
    }
  }
  return RESHARD_OK;
}

/* Folds the copies after the first of `sequence`, whose first copy just
 * joined the run of `slot`: every later copy
 * steps by the sequence's strides, so once the second joins a run (the
 * first's, or a new one) the rest follow it. */
static inline void fold_sequence_rest(reshard__run_folder *folder,
                                      fold_slot *slot,
                                      const reshard_run *sequence) {
  if (sequence->count == 1) {
    return;
  }
  uint64_t rest = sequence->count - 1;
  reshard_run *run = &folder->runs[slot->run];
  if (run->count == 1) {
    run->part_stride = sequence->part_stride;
    run->region_stride = sequence->region_stride;
    run->count += rest;
  } else if (run->part_stride == sequence->part_stride &&
             run->region_stride == sequence->region_stride) {
    run->count += rest;
  } else {
    slot->run = folder->run_count;
    folder->runs[folder->run_count++] = (reshard_run){
        reshard_run_copy(sequence, 1),
        rest,
        rest > 1 ? sequence->part_stride : 0,
        rest > 1 ? sequence->region_stride : 0,
    };
  }
  reshard_copy last = reshard_run_copy(sequence, rest);
  folder->open_copies += rest;
  slot->last_part = last.part_offset;
  slot->last_region = last.region_offset;
}

/* Folds one sequence's copies. `hash` as for fold_copy. */
static reshard_status fold_sequence(reshard__run_folder *folder,
                                    const reshard_run *sequence,
                                    const size_t *hash, reshard_error *err) {
  fold_slot *slot = NULL; /* set when the fold succeeds */
  reshard_status status = fold_copy(folder, &sequence->first, hash, &slot, err);
  if (status == RESHARD_OK) {
    fold_sequence_rest(folder, slot, sequence);
  }
  return status;
}

/* The step from one copy of a group to the next in source order, and how
 * many steps in a row (cyclically) equal it. */
typedef struct fold_step {
  uint64_t part, region;
  bool forward;
  uint64_t repeats; /* UINT64_MAX: every step of the group is this one */
} fold_step;

static reshard_status group_scratch(reshard__run_folder *folder, size_t width,
                                    reshard_error *err) {
  if (width <= folder->group_room) {
    return RESHARD_OK;
  }
  size_t room = width > 2 * folder->group_room ? width : 2 * folder->group_room;
  folder->steps = RESHARD_ARENA_ARRAY(folder->arena, fold_step, room);
  folder->keys = RESHARD_ARENA_ARRAY(folder->arena, reshard__keyed, room);
  folder->spare_keys = RESHARD_ARENA_ARRAY(folder->arena, reshard__keyed, room);
  folder->hashes = RESHARD_ARENA_ARRAY(folder->arena, size_t, room);
  folder->found = RESHARD_ARENA_ARRAY(folder->arena, struct fold_slot *, room);
  if (!folder->steps || !folder->keys || !folder->spare_keys ||
      !folder->hashes || !folder->found) {
    folder->group_room = 0;
    return reshard_error_set(err, RESHARD_RESOURCE_EXHAUSTED,
                             "runs: out of memory");
  }
  folder->group_room = room;
  return RESHARD_OK;
}

static bool same_class(const reshard_copy *a, const reshard_copy *b) {
  return a->page_index == b->page_index && a->part_index == b->part_index &&
         a->region_index == b->region_index && a->nbytes == b->nbytes;
}

/* Whether sequence `sequence`, its class's only one in its group, folds
 * with all its runs started at its first copy: true unless that copy joins
 * a run whose stride (then) is not the sequence's, which would start a run
 * at the second copy, after the other sequences' first copies. `slot`:
 * its class's slot in the open batch, live or free. */
static bool starts_runs_first_at(const reshard__run_folder *folder,
                                 const fold_slot *slot,
                                 const reshard_run *sequence) {
  const reshard_copy *first = &sequence->first;
  if (slot->stamp != open_stamp(folder) || sequence->count == 1) {
    return true;
  }
  if (first->part_offset <= slot->last_part ||
      first->region_offset < slot->last_region) {
    return true; /* an error or a new run, either way at the first copy */
  }
  const reshard_run *run = &folder->runs[slot->run];
  uint64_t part_step = first->part_offset - slot->last_part;
  uint64_t region_step = first->region_offset - slot->last_region;
  if (run->count > 1 &&
      (part_step != run->part_stride || region_step != run->region_stride)) {
    return true; /* the first copy starts a new run */
  }
  return part_step == sequence->part_stride &&
         region_step == sequence->region_stride;
}

static bool starts_runs_first(const reshard__run_folder *folder,
                              const reshard_run *sequence, size_t hash) {
  return starts_runs_first_at(folder,
                              find_slot(folder->slots, folder->mask,
                                        open_stamp(folder), &sequence->first,
                                        hash),
                              sequence);
}

struct reshard__region_mark *
reshard__run_folder_region_mark(reshard__run_folder *folder, uint64_t region) {
  if (region >= folder->region_room) {
    if (region >= SIZE_MAX / (4 * sizeof *folder->region_group)) {
      return NULL;
    }
    size_t room = 2 * (size_t)region + 16;
    struct reshard__region_mark *grown =
        RESHARD_ARENA_NEW(folder->arena, struct reshard__region_mark, room);
    if (grown == NULL) {
      return NULL;
    }
    if (folder->region_room > 0) {
      memcpy(grown, folder->region_group, folder->region_room * sizeof *grown);
    }
    folder->region_group = grown;
    folder->region_room = room;
  }
  return &folder->region_group[region];
}

/* Marks `region` for the group `serial`; false when the group marked it
 * already, or the marks cannot grow. */
static bool mark_region(reshard__run_folder *folder, uint64_t region,
                        uint64_t serial) {
  struct reshard__region_mark *mark =
      reshard__run_folder_region_mark(folder, region);
  if (mark == NULL || mark->serial == serial) {
    return false;
  }
  mark->serial = serial;
  return true;
}

/* Whether the group's sequences all lie in distinct regions, so in
 * distinct classes: one mark per region index, no sort. False when two
 * share a region (their classes may still differ) or the marks cannot
 * grow. */
static bool distinct_regions(reshard__run_folder *folder,
                             const reshard_run *group, size_t width) {
  uint64_t serial = ++folder->group_serial;
  for (size_t s = 0; s < width; s++) {
    if (!mark_region(folder, group[s].first.region_index, serial)) {
      return false;
    }
  }
  return true;
}

/* Folds a group whose sequences lie in distinct regions (so in distinct
 * classes) one sequence at a time when that is folding its copies in
 * order (see folds_by_sequence), finding each class's slot once: the
 * check looks every slot up (recent[] first, a hash only on a miss) and
 * the fold takes it, looking it up again only where the table grew or an
 * earlier sequence of the group took the free slot it was to fill (a
 * free slot still free is still the first free one on its probe path:
 * nothing leaves the table within a batch). *folded is false when the
 * group does not fold so; then nothing was folded. */
static reshard_status fold_distinct(reshard__run_folder *folder,
                                    const reshard_run *group, size_t width,
                                    bool *folded, reshard_error *err) {
  fold_slot **found = folder->found;
  *folded = false;
  for (size_t s = 0; s < width; s++) {
    size_t hash = 0;
    bool hashed = false;
    found[s] = lookup_slot(folder, &group[s].first, &hash, &hashed);
    if (!starts_runs_first_at(folder, found[s], &group[s])) {
      return RESHARD_OK;
    }
  }
  *folded = true;
  uint64_t stamp = open_stamp(folder);
  const fold_slot *table = folder->slots;
  for (size_t s = 0; s < width; s++) {
    const reshard_copy *first = &group[s].first;
    fold_slot *slot = found[s];
    size_t hash = 0;
    bool hashed = false;
    if (folder->slots != table ||
        (slot->stamp == stamp && !in_class(slot, first))) {
      hash = class_hash(first);
      hashed = true;
      slot = find_slot(folder->slots, folder->mask, stamp, first, hash);
      table = folder->slots;
    }
    reshard_status status =
        fold_copy_at(folder, slot, first, hash, hashed, &slot, err);
    if (status) {
      return status;
    }
    fold_sequence_rest(folder, slot, &group[s]);
  }
  return RESHARD_OK;
}

/* Whether folding the group one sequence at a time is folding its copies
 * in order: each sequence is its class's only one in the group (so its
 * class sees only its copies, in its order) and starts its runs at its
 * first copy (so runs come in the order of their first copies).
 * Conservative on hash collisions. Leaves each sequence's class_hash in
 * folder->hashes. */
static bool folds_by_sequence(reshard__run_folder *folder,
                              const reshard_run *group, size_t width) {
  for (size_t s = 0; s < width; s++) {
    size_t hash = class_hash(&group[s].first);
    if (!starts_runs_first(folder, &group[s], hash)) {
      return false;
    }
    folder->hashes[s] = hash;
  }
  for (size_t s = 0; s < width; s++) {
    folder->keys[s] = (reshard__keyed){folder->hashes[s], s};
  }
  const reshard__keyed *order =
      reshard__sort_keyed(folder->keys, folder->spare_keys, width);
  for (size_t s = 1; s < width; s++) {
    if (order[s].key == order[s - 1].key) {
      return false;
    }
  }
  return true;
}

/* Whether the group is one class with one region stride, so the steps
 * between its copies repeat with the group's width. */
static bool one_class(const reshard_run *group, size_t width) {
  for (size_t s = 1; s < width; s++) {
    if (!same_class(&group[s].first, &group[0].first) ||
        group[s].region_stride != group[0].region_stride) {
      return false;
    }
  }
  return true;
}

/* Folds a one-class group run by run. Its copies in order are c(i),
 * i = k * width + s, copy k of sequence s; the step after c(i) depends on
 * i mod width only. The greedy fold either starts a run or extends the
 * current one over the longest stretch of steps equal to its stride, which
 * is the precomputed repeat count: work per run, not per copy. */
static reshard_status fold_one_class(reshard__run_folder *folder,
                                     const reshard_run *group, size_t width,
                                     reshard_error *err) {
  fold_step *steps = folder->steps;
  for (size_t s = 0; s < width; s++) {
    reshard_copy from = group[s].first;
    reshard_copy to =
        s + 1 < width ? group[s + 1].first : reshard_run_copy(&group[0], 1);
    steps[s] = (fold_step){to.part_offset - from.part_offset,
                           to.region_offset - from.region_offset,
                           to.region_offset >= from.region_offset, 1};
  }
  size_t differs = width; /* a step unlike the next, if any */
  for (size_t s = 0; s < width && differs == width; s++) {
    const fold_step *next = &steps[(s + 1) % width];
    if (steps[s].part != next->part || steps[s].region != next->region) {
      differs = s;
    }
  }
  if (differs == width) {
    for (size_t s = 0; s < width; s++) {
      steps[s].repeats = UINT64_MAX;
    }
  } else {
    for (size_t n = 1, s = differs; n < width; n++) {
      size_t previous = (s + width - 1) % width;
      const fold_step *at = &steps[s];
      fold_step *before = &steps[previous];
      before->repeats = before->part == at->part && before->region == at->region
                            ? at->repeats + 1
                            : 1;
      s = previous;
    }
  }
  fold_slot *slot;
  reshard_status status = fold_copy(folder, &group[0].first, NULL, &slot, err);
  if (status) {
    return status;
  }
  uint64_t total = group[0].count * width;
  uint64_t i = 0; /* the last copy folded */
  while (i + 1 < total) {
    reshard_run *run = &folder->runs[slot->run];
    const fold_step *step = &steps[i % width];
    uint64_t left = total - 1 - i;
    uint64_t stretch = step->repeats < left ? step->repeats : left;
    if (step->forward && run->count == 1) {
      run->part_stride = step->part;
      run->region_stride = step->region;
      run->count += stretch;
      i += stretch;
    } else if (step->forward && step->part == run->part_stride &&
               step->region == run->region_stride) {
      run->count += stretch;
      i += stretch;
    } else {
      i++;
      slot->run = folder->run_count;
      folder->runs[folder->run_count++] = (reshard_run){
          reshard_run_copy(&group[i % width], i / width), 1, 0, 0};
    }
  }
  reshard_copy last = reshard_run_copy(&group[width - 1], group[0].count - 1);
  folder->open_copies += total - 1;
  slot->last_part = last.part_offset;
  slot->last_region = last.region_offset;
  return RESHARD_OK;
}

reshard_status reshard__run_folder_group(reshard__run_folder *folder,
                                         const reshard_run *group, size_t width,
                                         reshard_error *err) {
  for (size_t s = 0; s < width; s++) {
    if (group[s].count > 1 && group[s].part_stride == 0) {
      return reshard_error_set(err, RESHARD_INVALID_ARGUMENT,
                               "runs: batch %zu: a sequence of %llu copies "
                               "with part_stride 0 repeats its part offset",
                               folder->batch_count,
                               (unsigned long long)group[s].count);
    }
  }
  if (width == 1) {
    return fold_sequence(folder, group, NULL, err);
  }
  reshard_status status = group_scratch(folder, width, err);
  if (status) {
    return status;
  }
  if (one_class(group, width)) {
    return fold_one_class(folder, group, width, err);
  }
  /* A paged reader's group reads one region per layer and component. */
  if (distinct_regions(folder, group, width)) {
    bool folded;
    status = fold_distinct(folder, group, width, &folded, err);
    if (status || folded) {
      return status;
    }
  } else if (folds_by_sequence(folder, group, width)) {
    for (size_t s = 0; status == RESHARD_OK && s < width; s++) {
      status = fold_sequence(folder, &group[s], &folder->hashes[s], err);
    }
    return status;
  }
  for (uint64_t k = 0; k < group[0].count; k++) {
    for (size_t s = 0; s < width; s++) {
      reshard_copy copy = reshard_run_copy(&group[s], k);
      fold_slot *slot;
      if ((status = fold_copy(folder, &copy, NULL, &slot, err))) {
        return status;
      }
    }
  }
  return RESHARD_OK;
}

void reshard__run_folder_shifted(reshard__run_folder *folder, size_t first,
                                 size_t end, uint64_t page_index,
                                 const uint64_t *region_shift,
                                 uint64_t copies) {
  /* Strides are differences of two copies of one region, which moved
   * alike, so only the first copies move. The classes of the new page
   * stay out of the table: no later copy is of its page. */
  reshard_run *runs = folder->runs;
  reshard_run *out = runs + folder->run_count;
  for (size_t r = first; r < end; r++, out++) {
    *out = runs[r];
    out->first.page_index = page_index;
    out->first.region_offset += region_shift[out->first.region_index];
  }
  folder->run_count += end - first;
  folder->open_copies += (size_t)copies;
}

/* The closed batch whose runs are exactly runs[first, end) (first < end),
 * or SIZE_MAX. batch_first rises; equal entries are empty batches, and
 * the batch a run starts is the last of those equal to its index. */
static size_t closed_batch_of(const reshard__run_folder *folder, size_t first,
                              size_t end) {
  size_t low = 0, high = folder->batch_count; /* batches [low, high) */
  while (low < high) {
    size_t mid = low + (high - low) / 2;
    if (folder->batch_first[mid] <= first) {
      low = mid + 1;
    } else {
      high = mid;
    }
  }
  /* low: the first batch starting past `first`; the one before it holds
   * run `first`. */
  if (low == 0 || folder->batch_first[low - 1] != first ||
      folder->batch_first[low] != end) {
    return SIZE_MAX;
  }
  return low - 1;
}

void reshard__run_folder_renamed(reshard__run_folder *folder, size_t first,
                                 size_t end, uint64_t part_index,
                                 uint64_t region_index) {
  /* A whole closed batch renamed: the open batch may be like it, however
   * far back (checked at close). */
  if (first < end) {
    folder->open_like = closed_batch_of(folder, first, end);
  }
  segments_renamed(folder, first, end);
  reshard_run *runs = folder->runs;
  reshard_run *out = runs + folder->run_count;
  for (size_t r = first; r < end; r++, out++) {
    *out = runs[r];
    out->first.part_index = part_index;
    out->first.region_index = region_index;
  }
  folder->run_count += end - first;
}

void reshard__run_folder_close(reshard__run_folder *folder) {
  folder->batch_like[folder->batch_count] = open_batch_like(folder);
  folder->open_like = SIZE_MAX;
  folder->batch_first[++folder->batch_count] = folder->run_count;
  folder->batch_segment[folder->batch_count] = folder->segment_count;
  folder->live = 0;
  folder->open_copies = 0;
  memset(folder->recent, 0, sizeof folder->recent);
}

void reshard__run_folder_finish(const reshard__run_folder *folder,
                                reshard_runs *out) {
  *out = (reshard_runs){
      .runs = folder->runs,
      .run_count = folder->run_count,
      .batch_first = folder->batch_first,
      .batch_count = folder->batch_count,
      .batch_like = folder->batch_like,
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
    status = reshard__run_folder_copies(&folder, copies + batches[b].first,
                                        batches[b].count, err);
    reshard__run_folder_close(&folder);
  }
  if (status == RESHARD_OK) {
    reshard__run_folder_finish(&folder, out);
  }
  return status;
}
