/* The direct walk's state and how it writes copies and runs (SPEC
 * §2.6), shared by the files that walk a pooled target in plan order:
 * transfer_direct.c (the walk, its segments and its preparation),
 * transfer_region_walk.c (regions of one-row segments) and
 * transfer_repeat.c (regions written as one walked before, renamed).
 * Internal to those three files: the names are theirs. */
#ifndef RESHARD_PLAN_TRANSFER_WALK_H
#define RESHARD_PLAN_TRANSFER_WALK_H

#include "plan/plan_internal.h"
#include "plan/transfer_internal.h"
#include "reshard/checked.h"

/* A segment's copies: `copies` as lower_segment lowers it, and what the
 * walk writes, `outer` × `inner` pieces of `unit` bytes, the axes whose
 * copies continue one another on both sides taken whole (what coalescing
 * would merge them into), the inner axis the one of the smaller source
 * stride. It depends on the job's strides, the tokens and the heads
 * only, so the count is computed per job, not per segment. */
typedef struct direct_shape {
  uint64_t copies, unit;
  uint64_t span; /* from its first source byte to past its last */
  uint64_t inner, inner_s, inner_d;
  uint64_t outer, outer_s, outer_d;
} direct_shape;

/* A (source block, target block) pair: the blocks' ids, where their
 * shared tokens start in each, and how many. */
typedef struct direct_pair {
  uint64_t source_id, source_token;
  uint64_t target_id, target_token;
  uint64_t tokens;
} direct_pair;

/* One source tensor the join reads for one target group. */
typedef struct direct_job {
  size_t source;                    /* ordinal */
  size_t group;                     /* the target group */
  const reshard_join_entry *entry;  /* the heads it gives */
  const reshard_pool_group *tensor; /* in the source's pool */
  uint64_t head_start;              /* the source part's */
  uint64_t line;                    /* its region's start on the line */
  const reshard_pool_group *target; /* the target group's */
  /* The target's ranges of a block (reshard_pool_window_ranges): one per
   * head of [range_first, range_last) when split (HND), else one, over
   * the target's heads; only heads the entry gives are walked. */
  bool range_split;
  uint64_t range_first, range_last;
  uint64_t range_head_stride;
  uint64_t target_head_start, target_head_end;
  /* The shape of the job's last segment and its tokens and heads: most
   * blocks of a tensor meet their target blocks alike. */
  direct_shape shape;
  uint64_t shape_tokens, shape_heads;
  /* What direct_block reads per pair, copied out of the pool groups
   * once (direct_prepare) so the walk chases no pointer: the source
   * tensor's and target group's offsets and strides, the head bytes,
   * and, where the range loop meets just one range sharing heads with
   * the entry (`single`: a target range per block, or an entry of one
   * head), that range's heads and where they start in the block and in
   * the target block. */
  uint64_t s_offset, s_block_stride, s_token_stride;
  uint64_t g_offset, g_block_stride, g_token_stride;
  uint64_t source_region, target_region, hb;
  bool single;
  uint64_t single_heads, single_source, single_target;
} direct_job;

typedef struct direct {
  reshard__transfer *t;
  const reshard_pooled_memory *target;
  direct_job *jobs;
  size_t job_count;
  struct region_job *region_jobs; /* region_walk's, per job */
  size_t *order;                  /* source table indices of the span, by id */
  const uint32_t *source_ids, *target_ids; /* the two block tables */
  /* The (source block, target block) pairs in walk order: source block
   * order[k]'s are pair[pair_first[k] .. pair_first[k + 1]), read in
   * sequence by every job instead of indexing the tables by a scattered
   * block per job. */
  direct_pair *pair;
  size_t *pair_first;
  size_t blocks; /* source blocks of the span */
  /* Tokens: source block i holds [block_start[i], block_start[i + 1]),
   * target block j [target_start[j], target_start[j + 1]); source block
   * i meets target blocks [target_first[i], target_end[i]). Computed
   * once, for the counts and the pairs (d->pair), so the walk divides
   * nothing. */
  uint64_t *block_start, *target_start;
  size_t *target_first, *target_end;
  /* The (source block, target block) pairs of the span by how many
   * tokens they share: key the tokens, index how many pairs. */
  reshard__keyed *overlap;
  size_t overlap_count;
  bool ordered;           /* no segment began before the last one ended */
  uint64_t end;           /* the line's end of the last segment */
  uint64_t copies, bytes; /* lowered as SPEC §2.2 step 3 counts them */
  uint64_t pieces;        /* what the walk writes before coalescing */
  uint64_t rows;          /* segments' outer rows: the runs path's bound */
  reshard__batcher batcher;
  /* The last coalesced copy, not yet batched, at batcher.out + written
   * (the explicit path) or the pending row (the runs path). */
  bool has_pending;
  /* With runs and omit_copies the copies are never written: each row of
   * a segment goes on as a strided sequence (pending_row, the coalesced
   * copies not yet batched), is cut where the batcher would close or
   * split a batch, and each piece is folded (`folder`) as its copies one
   * by one would be. The batcher then only counts (its `out` is NULL). */
  bool runs;
  reshard_run pending_row;
  reshard__run_folder folder;
  reshard_copy *stage; /* single copies not yet folded, RUNS_STAGE room */
  size_t staged;
  size_t *batch_source;  /* per closed batch */
  size_t source;         /* the source being walked */
  size_t run_room;       /* the folder's runs array */
  reshard_status status; /* a fold's failure; the walk stops */
  /* With varint columns: each batch encoded when the batcher closes it
   * (only direct_batch's slow path and the flush can close one). */
  reshard__transfer_columns *columns;
  /* With the columns and request.omit_copies: copies encoded that nothing
   * reads again are dropped between regions (transfer_direct.c), and
   * held_most is the most copies held at once. */
  bool drop_copies;
  size_t held_most;
  uint64_t regions_unwritten; /* repeated as whole batches, no copy */
  uint64_t regions_repeated;  /* written as a region before them renamed */
} direct;

/* A job's per-pair constants (see direct_job), the start of its target
 * range added to both bases, and the shape of its segments of `tokens`
 * tokens (job_shape's). */
typedef struct region_job {
  direct_job *job;
  uint64_t source_base, source_block, source_token;
  uint64_t target_base, target_block, target_token;
  uint64_t line, source, source_region, target_region;
  uint64_t tokens, unit, span, inner, inner_s, inner_d;
  bool one_row; /* the shape is one row (one piece without runs) */
} region_job;

/* A region walked, for the regions after it: its jobs (one target
 * region; jobs[0].line is where it lies on the line), where its last
 * segment ended, where its copies (explicit) or runs start and how many,
 * the batcher before and after it (the batches it closed are the
 * batcher's [before.batch_count, after.batch_count)) and the folder's
 * open copies after it. jobs NULL: none. */
typedef struct region_repeat {
  const direct_job *jobs;
  size_t job_count;
  uint64_t end;
  size_t first, count;
  reshard__batcher before, after;
  size_t open_copies; /* the folder's after it (runs) */
} region_repeat;

/* Where the walk stood as a region started: its output so far (copies
 * written, or runs) and the batcher. */
typedef struct region_start {
  size_t output;
  reshard__batcher batcher;
} region_start;

/* ---- Runs without the copies ----
 *
 * The explicit path writes a row's copies one by one through direct_put
 * (coalescing with the last copy) and direct_batch (the batcher), and
 * reshard__transfer_finish folds each batch (reshard_runs_fold). Here the
 * same stream goes by in strided sequences: a row of a segment is
 * `inner` copies of one class none of which coalesces with the next
 * (shape_of merged those axes), so within the stream only a row's first
 * copy can merge into the copy before it; the batcher closes a batch
 * after a known number of equal copies or splits one; and folding a
 * stretch of a sequence in one step (reshard__run_folder_group, one
 * sequence) is folding its copies in turn, since no other copy comes
 * between them. So the batches and runs are the explicit plan's, entry
 * for entry, at a cost per row and per batch, not per copy. */

enum { RUNS_STAGE = 64 };

/* Folds the staged single copies, in order (each adds at most a run; see
 * runs_fold for the room). */
void reshard__walk_unstage(direct *d);

/* `count` coalesced copies, copy k at first + k strides, to the batcher
 * and the folder: what direct_batch of each in turn, then folding each
 * batch, gives. A stretch that fits the open batch is one fold; the
 * batcher closes the batch at its last copy when that fills it; a copy
 * that does not fit the bytes left is split at them, as
 * reshard__batcher_push splits it, each piece its own copy. */
void reshard__walk_take_cut(direct *d, reshard_copy first, uint64_t count,
                            uint64_t part_stride, uint64_t region_stride);

/* Closes the open batch on the folder's side when the batcher closed it
 * (the batcher's batch count moved past the folder's). */
static inline void runs_sync(direct *d) {
  if (d->folder.batch_count < d->batcher.batch_count) {
    reshard__walk_unstage(d);
  }
  while (d->folder.batch_count < d->batcher.batch_count) {
    d->batch_source[d->folder.batch_count] = d->source;
    reshard__run_folder_close(&d->folder);
  }
}

static inline void runs_fold(direct *d, const reshard_copy *first,
                             uint64_t count, uint64_t part_stride,
                             uint64_t region_stride) {
  /* Mostly the sequence's class is the last its region saw (the walk
   * meets one class per region in turn): folded in line, after the
   * staged copies before it, with the room checked as below both before
   * the staged copies (each adds at most a run) and after them (the fast
   * fold adds at most two). */
  if (d->folder.run_count <= d->run_room) {
    reshard__walk_unstage(d);
    if (d->folder.run_count <= d->run_room &&
        reshard__run_folder_fast(&d->folder, first, count, part_stride,
                                 region_stride)) {
      return;
    }
  }
  /* Single copies the fast fold does not take (a class's first in its
   * batch, mostly) are staged and folded RUNS_STAGE at a time, in the
   * folder's own loop, rather than a call each. */
  if (count == 1) {
    if (d->staged == RUNS_STAGE) {
      reshard__walk_unstage(d);
    }
    d->stage[d->staged++] = *first;
    return;
  }
  reshard__walk_unstage(d);
  /* A fold adds at most two runs (the sequence's first copy may start
   * one, its second another), a staged copy one; the folder has room for
   * run_room + RUNS_STAGE + 2. run_room bounds the plan's runs
   * (runs_prepare); should it ever be short, the walk stops and the
   * sorting path plans. */
  if (d->folder.run_count > d->run_room) {
    d->ordered = false;
    return;
  }
  reshard_run sequence = {*first, count, part_stride, region_stride};
  reshard_status status =
      reshard__run_folder_group(&d->folder, &sequence, 1, d->t->err);
  if (status) {
    d->status = status;
    d->ordered = false; /* stops the walk; plan_direct reports status */
  }
}

/* runs_take_cut, in line where the stretch fits the open batch without
 * filling it (what reshard__batcher_commit does then, minus the call):
 * every stretch but about one a batch. */
static inline void runs_take(direct *d, reshard_copy first, uint64_t count,
                             uint64_t part_stride, uint64_t region_stride) {
  reshard__batcher *b = &d->batcher;
  uint64_t bytes;
  if (count < b->limits.max_operations - b->batch_ops &&
      reshard_mul(count, first.nbytes, &bytes) &&
      bytes < b->limits.max_bytes - b->batch_bytes) {
    runs_fold(d, &first, count, part_stride, region_stride);
    b->written += (size_t)count;
    b->batch_ops += count;
    b->batch_bytes += bytes;
    b->pushed += count;
    return;
  }
  reshard__walk_take_cut(d, first, count, part_stride, region_stride);
}

/* Whether `c` continues `p` on both sides: coalescing merges them. The
 * source is the same one (the walk flushes at each change). */
static inline bool copy_continues(const reshard_copy *p,
                                  const reshard_copy *c) {
  return p->part_index == c->part_index && p->region_index == c->region_index &&
         p->part_offset + p->nbytes == c->part_offset &&
         p->region_offset + p->nbytes == c->region_offset;
}

/* A row of `count` copies (first + k strides) after the pending ones:
 * direct_put's coalescing, by sequences. Only the pending row's last
 * copy and the row's first can merge (see above); the merged copy is of
 * its own size, so it goes alone, and the rest of the row is pending. */
static inline void runs_put(direct *d, const reshard_copy *first,
                            uint64_t count, uint64_t part_stride,
                            uint64_t region_stride) {
  reshard_run *p = &d->pending_row;
  if (d->has_pending && count == 1 && p->count == 1) {
    /* Single copies after a single copy (segments of one copy: T3–T5):
     * the same as below, without the sequence arithmetic. */
    if (copy_continues(&p->first, first)) {
      p->first.nbytes += first->nbytes;
      return;
    }
    runs_take(d, p->first, 1, 0, 0);
    p->first = *first;
    return;
  }
  if (d->has_pending) {
    reshard_copy last = reshard_run_copy(p, p->count - 1);
    if (copy_continues(&last, first)) {
      if (p->count > 1) {
        runs_take(d, p->first, p->count - 1, p->part_stride, p->region_stride);
      }
      last.nbytes += first->nbytes;
      if (count == 1) {
        *p = (reshard_run){last, 1, 0, 0};
        return;
      }
      runs_take(d, last, 1, 0, 0);
      reshard_run row = {*first, count, part_stride, region_stride};
      *p = (reshard_run){reshard_run_copy(&row, 1), count - 1, part_stride,
                         region_stride};
      return;
    }
    runs_take(d, p->first, p->count, p->part_stride, p->region_stride);
  }
  *p = (reshard_run){*first, count, part_stride, region_stride};
  d->has_pending = true;
}

/* The pending copy (the last coalesced one, at out + written: written in
 * place, so batching it is a count, not a 48-byte move) to the batcher.
 * One that fits the open batch without filling it is what
 * reshard__batcher_push does with it, three additions, done here in
 * line; anything else (a batch to close, a copy to split) is the
 * batcher's, from a copy of it, since the batcher writes where it lies. */
static inline void direct_batch(direct *d) {
  reshard__batcher *b = &d->batcher;
  uint64_t nbytes = reshard__batcher_copy(b, b->written)->nbytes;
  if (b->batch_ops + 1 < b->limits.max_operations &&
      nbytes < b->limits.max_bytes - b->batch_bytes) {
    b->written++;
    b->batch_ops++;
    b->batch_bytes += nbytes;
    b->pushed++;
    return;
  }
  reshard_copy c = *reshard__batcher_copy(b, b->written);
  reshard__batcher_push(b, &c, 1);
  if (d->columns != NULL && d->status == RESHARD_OK &&
      (d->status = reshard__transfer_columns_drain(d->columns, d->t->err))) {
    d->ordered = false; /* stops the walk; plan_direct reports status */
  }
}

/* Coalescing against the pending copy (copy_continues). The copy is
 * written where the batcher would write it (out has a slot past its
 * bound for it). */
static inline void direct_put(direct *d, const reshard_copy *c) {
  reshard__batcher *b = &d->batcher;
  if (d->has_pending) {
    reshard_copy *p = reshard__batcher_copy(b, b->written);
    if (copy_continues(p, c)) {
      p->nbytes += c->nbytes;
      return;
    }
    direct_batch(d);
  }
  *reshard__batcher_copy(b, b->written) = *c;
  d->has_pending = true;
}

/* ---- Across the walk's files ---- */

/* The shape of a job's segment of `tokens` tokens and `heads` heads
 * (transfer_direct.c's job_shape: the job's last unless they changed). */
const direct_shape *reshard__walk_job_shape(direct_job *job, uint64_t tokens,
                                            uint64_t heads);
/* One segment of a job the general way: `tokens` tokens of `heads` heads
 * at source_at and target_at (transfer_direct.c). */
void reshard__walk_heads(direct *d, direct_job *job, uint64_t source_at,
                         uint64_t target_at, uint64_t tokens, uint64_t heads);

/* transfer_region_walk.c: the region_jobs of jobs [0, count), their
 * shapes at `tokens` tokens; false when region_walk does not take the
 * region. Then the region walked, for copies or for runs (block by block
 * or tensor by tensor, as direct_walk's general loop). */
bool reshard__walk_region_jobs(direct_job *jobs, size_t count, uint64_t tokens,
                               bool runs, region_job *out);
void reshard__walk_region_copies(direct *d, region_job *rj, size_t jobs,
                                 bool by_block);
void reshard__walk_region_runs(direct *d, region_job *rj, size_t jobs,
                               bool by_block);

/* transfer_repeat.c: the remembered region (repeat[0] closed no batch,
 * repeat[1] some) the region of jobs [0, count) repeats, or NULL; that
 * region's output written renamed into it. Else the region is walked.
 * Either way it lies between reshard__walk_region_start and
 * reshard__walk_region_end, which sends its last copy to the batcher and
 * remembers it when it can stand for a later region (a region written
 * renamed replaces the one it repeats). */
const region_repeat *reshard__walk_repeat_find(const direct *d,
                                               const region_repeat repeat[2],
                                               const direct_job *jobs,
                                               size_t count);
void reshard__walk_repeat_write(direct *d, const region_repeat *r,
                                const direct_job *jobs);
region_start reshard__walk_region_start(const direct *d);
void reshard__walk_region_end(direct *d, region_repeat repeat[2],
                              const direct_job *jobs, size_t count,
                              const region_start *start);

#endif
