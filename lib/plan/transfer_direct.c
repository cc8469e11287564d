/* Transfer planning into a pooled target, lowered straight from the
 * source pools and both block tables in plan order (SPEC §2.6; see
 * transfer.c for the request checks, the source choice and the join this
 * starts from, and for the sorting path it falls back to). */
#include <stdlib.h>

#include "base/keyed_sort.h"
#include "plan/plan_internal.h"
#include "plan/transfer_internal.h"
#include "reshard/checked.h"

/* A pooled target needs neither a bound binding nor a sort. Lowering
 * meets one source tensor (a join entry of a target group), one source
 * block and one target range at a time, and that *segment*'s copies are
 * one or two regular axes (tokens, heads) whose source offsets grow with
 * the axis of the larger source stride outermost, since the pool's
 * strides nest. So when the segments themselves come out in plan order,
 * each past the last byte the one before it reads, writing each
 * segment's copies in turn is the sorted order, coalescing is a compare
 * with the last copy written, and the batcher takes each coalesced copy
 * once. The walk that gives that order for the pools engines use: per
 * source, its tensors by (region, offset); within a region, tensor by
 * tensor (vLLM's K then V halves, one layer a region) or, where the
 * region's tensors share a block stride and lie within one stride of each
 * other (FlashInfer's K and V inside each block), block by block; the
 * blocks of the span by increasing id, the order the shared table gives
 * every tensor. The count (for max_operations and max_bytes, before any
 * copy is written) needs no walk: a segment's shape depends on its tensor,
 * tokens and heads only (direct_count). The walk checks the order as it
 * writes; one it refutes (a source block split by target blocks in an
 * HND source, a per-head target over an NHD source) stops, and the plan
 * is made by binding the target and sorting, as for any binding.
 *
 * Most of what engines hold walks as segments of one row each (a
 * source block's tokens of one head range: one piece, contiguous on
 * both sides, or a copy per token): a region whose every job is so is
 * walked by region_walk, with the walk's state in locals rather than in
 * `direct`, which every copy or run written may alias. */

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

static int compare_jobs(const void *a, const void *b) {
  const direct_job *x = a, *y = b;
  const uint64_t kx[4] = {x->source, x->tensor->region_index, x->tensor->offset,
                          x->entry->head_start};
  const uint64_t ky[4] = {y->source, y->tensor->region_index, y->tensor->offset,
                          y->entry->head_start};
  for (int i = 0; i < 4; i++) {
    if (kx[i] != ky[i]) {
      return kx[i] < ky[i] ? -1 : 1;
    }
  }
  return x->group < y->group ? -1 : x->group > y->group;
}

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
  uint64_t regions_repeated; /* written as a region before them renamed */
} direct;

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
static void runs_unstage(direct *d) {
  if (d->staged == 0) {
    return;
  }
  if (d->folder.run_count > d->run_room) {
    d->ordered = false;
    d->staged = 0;
    return;
  }
  reshard_status status =
      reshard__run_folder_copies(&d->folder, d->stage, d->staged, d->t->err);
  d->staged = 0;
  if (status) {
    d->status = status;
    d->ordered = false; /* stops the walk; plan_direct reports status */
  }
}

/* Closes the open batch on the folder's side when the batcher closed it
 * (the batcher's batch count moved past the folder's). */
static inline void runs_sync(direct *d) {
  if (d->folder.batch_count < d->batcher.batch_count) {
    runs_unstage(d);
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
    runs_unstage(d);
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
      runs_unstage(d);
    }
    d->stage[d->staged++] = *first;
    return;
  }
  runs_unstage(d);
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

/* `count` coalesced copies, copy k at first + k strides, to the batcher
 * and the folder: what direct_batch of each in turn, then folding each
 * batch, gives. A stretch that fits the open batch is one fold; the
 * batcher closes the batch at its last copy when that fills it; a copy
 * that does not fit the bytes left is split at them, as
 * reshard__batcher_push splits it, each piece its own copy. */
static void runs_take_cut(direct *d, reshard_copy first, uint64_t count,
                          uint64_t part_stride, uint64_t region_stride) {
  reshard__batcher *b = &d->batcher;
  while (count > 0 && d->status == RESHARD_OK) {
    uint64_t ops = b->limits.max_operations - b->batch_ops;
    uint64_t room = b->limits.max_bytes - b->batch_bytes;
    /* Mostly the whole stretch fits: no division (tens of cycles). */
    uint64_t fit, bytes;
    if (count <= ops && reshard_mul(count, first.nbytes, &bytes) &&
        bytes <= room) {
      fit = count;
    } else {
      fit = room / first.nbytes;
      fit = fit < ops ? fit : ops;
      fit = fit < count ? fit : count;
    }
    if (fit > 0) {
      runs_fold(d, &first, fit, part_stride, region_stride);
      reshard__batcher_commit(b, (size_t)fit, fit * first.nbytes);
      runs_sync(d);
      first.part_offset += fit * part_stride;
      first.region_offset += fit * region_stride;
      count -= fit;
      continue;
    }
    /* The copy is larger than the bytes left: pieces, each filling the
     * open batch but the last. */
    reshard_copy piece = first;
    while (piece.nbytes > 0 && d->status == RESHARD_OK) {
      uint64_t left = b->limits.max_bytes - b->batch_bytes;
      reshard_copy take = piece;
      take.nbytes = piece.nbytes < left ? piece.nbytes : left;
      runs_fold(d, &take, 1, 0, 0);
      reshard__batcher_commit(b, 1, take.nbytes);
      runs_sync(d);
      piece.part_offset += take.nbytes;
      piece.region_offset += take.nbytes;
      piece.nbytes -= take.nbytes;
    }
    first.part_offset += part_stride;
    first.region_offset += region_stride;
    count--;
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
  runs_take_cut(d, first, count, part_stride, region_stride);
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
  uint64_t nbytes = b->out[b->written].nbytes;
  if (b->batch_ops + 1 < b->limits.max_operations &&
      nbytes < b->limits.max_bytes - b->batch_bytes) {
    b->written++;
    b->batch_ops++;
    b->batch_bytes += nbytes;
    b->pushed++;
    return;
  }
  reshard_copy c = b->out[b->written];
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
    reshard_copy *p = &b->out[b->written];
    if (copy_continues(p, c)) {
      p->nbytes += c->nbytes;
      return;
    }
    direct_batch(d);
  }
  b->out[b->written] = *c;
  d->has_pending = true;
}

static void direct_flush(direct *d) {
  if (d->has_pending && d->runs) {
    runs_take(d, d->pending_row.first, d->pending_row.count,
              d->pending_row.part_stride, d->pending_row.region_stride);
    d->has_pending = false;
  }
  if (d->has_pending) {
    direct_batch(d);
    d->has_pending = false;
  }
  reshard__batcher_finish(&d->batcher);
  if (d->runs) {
    runs_sync(d); /* unstages when the batch closed */
  }
  if (d->columns != NULL && d->status == RESHARD_OK &&
      (d->status = reshard__transfer_columns_drain(d->columns, d->t->err))) {
    d->ordered = false;
  }
}

static direct_shape shape_of(const direct_job *job, uint64_t tokens,
                             uint64_t heads, uint64_t hb) {
  const reshard_pool_group *s = job->tensor;
  uint64_t token_d = job->target->token_stride;
  uint64_t head_d = job->range_head_stride;
  bool rows = s->head_stride == hb && head_d == hb;
  uint64_t row = heads * hb;
  direct_shape sh = {.inner = 1, .outer = 1};
  if (rows && (tokens == 1 || (s->token_stride == row && token_d == row))) {
    sh.copies = 1;
    sh.unit = sh.span = tokens * row;
    return sh;
  }
  if (rows) {
    sh.copies = tokens;
    sh.unit = row;
    sh.inner = tokens;
    sh.inner_s = s->token_stride;
    sh.inner_d = token_d;
  } else {
    sh.copies = tokens * heads;
    sh.unit = hb;
    bool heads_inner =
        heads > 1 && (tokens == 1 || s->head_stride < s->token_stride);
    sh.inner = heads_inner ? heads : tokens;
    sh.inner_s = heads_inner ? s->head_stride : s->token_stride;
    sh.inner_d = heads_inner ? head_d : token_d;
    sh.outer = heads_inner ? tokens : heads;
    sh.outer_s = heads_inner ? s->token_stride : s->head_stride;
    sh.outer_d = heads_inner ? token_d : head_d;
  }
  if (sh.inner > 1 && sh.inner_s == sh.unit && sh.inner_d == sh.unit) {
    sh.unit *= sh.inner;
    sh.inner = 1;
  }
  if (sh.inner == 1) {
    sh.inner = sh.outer;
    sh.inner_s = sh.outer_s;
    sh.inner_d = sh.outer_d;
    sh.outer = 1;
    sh.outer_s = sh.outer_d = 0;
    if (sh.inner > 1 && sh.inner_s == sh.unit && sh.inner_d == sh.unit) {
      sh.unit *= sh.inner;
      sh.inner = 1;
    }
  }
  sh.span = (sh.outer - 1) * sh.outer_s + (sh.inner - 1) * sh.inner_s + sh.unit;
  return sh;
}

/* A segment's copies one by one to direct_put. Out of line, so the
 * walk's loop, whose segments are mostly one piece (T3-T5: a source
 * block's tokens of one head), keeps its state in registers. */
static __attribute__((noinline)) void
direct_segment_copies(direct *d, const direct_job *job, uint64_t source_at,
                      uint64_t target_at, const direct_shape *sh) {
  for (uint64_t a = 0; a < sh->outer; a++) {
    reshard_copy c = {job->source,
                      job->source_region,
                      source_at + a * sh->outer_s,
                      job->target_region,
                      target_at + a * sh->outer_d,
                      sh->unit};
    for (uint64_t b = 0; b < sh->inner; b++) {
      direct_put(d, &c);
      c.part_offset += sh->inner_s;
      c.region_offset += sh->inner_d;
    }
  }
}

/* One segment written in source order, after checking that it starts
 * past the last byte the one before it reads (else the walk is not in
 * plan order and stops). With runs, each row goes on as a strided
 * sequence (runs_put). */
static inline void direct_segment(direct *d, const direct_job *job,
                                  uint64_t source_at, uint64_t target_at,
                                  const direct_shape *sh) {
  uint64_t first = job->line + source_at;
  if (first < d->end) {
    d->ordered = false;
    return;
  }
  d->end = first + sh->span;
  reshard_copy c = {job->source,        job->source_region, source_at,
                    job->target_region, target_at,          sh->unit};
  if (d->runs) {
    for (uint64_t a = 0; a < sh->outer; a++) {
      runs_put(d, &c, sh->inner, sh->inner_s, sh->inner_d);
      c.part_offset += sh->outer_s;
      c.region_offset += sh->outer_d;
    }
  } else if (sh->inner == 1 && sh->outer == 1) {
    direct_put(d, &c);
  } else {
    direct_segment_copies(d, job, source_at, target_at, sh);
  }
}

/* The heads a job's target range over head `h` (of its range loop)
 * shares with its entry: [*h0, *h1), empty when *h0 >= *h1. */
static inline void range_heads(const direct_job *job, uint64_t h, uint64_t *h0,
                               uint64_t *h1) {
  uint64_t start = job->range_split ? h : job->target_head_start;
  uint64_t end = job->range_split ? h + 1 : job->target_head_end;
  *h0 = job->entry->head_start > start ? job->entry->head_start : start;
  *h1 = job->entry->head_end < end ? job->entry->head_end : end;
}

/* The first pass: every job meets every (source block, target block)
 * pair of the span, and a segment's shape depends on its tokens, so the
 * count is a sum over the pairs' distinct token counts (d->overlap). */
static void direct_count(direct *d) {
  d->copies = d->bytes = d->pieces = d->rows = 0;
  for (size_t j = 0; j < d->job_count; j++) {
    const direct_job *job = &d->jobs[j];
    uint64_t hb = d->t->head_bytes[job->group % 2];
    for (uint64_t h = job->range_first; h < job->range_last; h++) {
      uint64_t h0, h1;
      range_heads(job, h, &h0, &h1);
      if (h0 >= h1) {
        continue;
      }
      for (size_t o = 0; o < d->overlap_count; o++) {
        uint64_t tokens = d->overlap[o].key, times = d->overlap[o].index;
        direct_shape sh = shape_of(job, tokens, h1 - h0, hb);
        uint64_t copies, pieces, bytes, rows;
        /* Saturated: a sum past 64 bits fails the limits, as it must. */
        if (!reshard_mul(times, sh.copies, &copies) ||
            !reshard_add(d->copies, copies, &d->copies) ||
            !reshard_mul3(times, sh.inner, sh.outer, &pieces) ||
            !reshard_add(d->pieces, pieces, &d->pieces) ||
            !reshard_mul(times, sh.outer, &rows) ||
            !reshard_add(d->rows, rows, &d->rows) ||
            !reshard_mul3(times, tokens, (h1 - h0) * hb, &bytes) ||
            !reshard_add(d->bytes, bytes, &d->bytes)) {
          d->copies = d->bytes = d->pieces = d->rows = UINT64_MAX;
          return;
        }
      }
    }
  }
}

/* The shape of a job's segment of `tokens` tokens and `heads` heads: the
 * job's last unless the tokens or heads changed (most blocks of a tensor
 * meet their target blocks alike). */
static inline __attribute__((always_inline)) const direct_shape *
job_shape(direct_job *job, uint64_t tokens, uint64_t heads) {
  if (tokens != job->shape_tokens || heads != job->shape_heads) {
    job->shape_tokens = tokens;
    job->shape_heads = heads;
    job->shape = shape_of(job, tokens, heads, job->hb);
  }
  return &job->shape;
}

/* Where a pair's shared tokens start in the job's source tensor and in
 * its target group (before the heads' offsets). */
static inline uint64_t pair_source(const direct_job *job,
                                   const direct_pair *pq) {
  return job->s_offset + pq->source_id * job->s_block_stride +
         pq->source_token * job->s_token_stride;
}

static inline uint64_t pair_target(const direct_job *job,
                                   const direct_pair *pq) {
  return job->g_offset + pq->target_id * job->g_block_stride +
         pq->target_token * job->g_token_stride;
}

/* One segment of a job: `tokens` tokens of heads [h0, h1) at source_at
 * and target_at (its shape from job_shape). */
static inline void direct_heads(direct *d, direct_job *job, uint64_t source_at,
                                uint64_t target_at, uint64_t tokens,
                                uint64_t heads) {
  direct_segment(d, job, source_at, target_at, job_shape(job, tokens, heads));
}

/* The source block of walk position k of one tensor, against the
 * target blocks it meets (d->pair), whose ranges are those
 * reshard_pool_window_ranges writes for the target block's window (what
 * reshard_pool_bind binds), made here from the job's target group
 * without a division or a stored range. */
static inline void direct_block(direct *d, direct_job *job, size_t k) {
  const direct_pair *pair = d->pair;
  for (size_t q = d->pair_first[k]; q < d->pair_first[k + 1]; q++) {
    const direct_pair *pq = &pair[q];
    uint64_t source_t0 = pair_source(job, pq);
    uint64_t target_t0 = pair_target(job, pq);
    uint64_t tokens = pq->tokens;
    if (job->single) {
      direct_heads(d, job, source_t0 + job->single_source,
                   target_t0 + job->single_target, tokens, job->single_heads);
      continue;
    }
    for (uint64_t h = job->range_first; h < job->range_last; h++) {
      uint64_t h0, h1;
      range_heads(job, h, &h0, &h1);
      if (h0 >= h1) {
        continue;
      }
      /* The range of head h starts at its head (HND), else at the
       * target's first; h0 is where the segment starts in both. */
      uint64_t range_head = job->range_split ? h : job->target_head_start;
      uint64_t source_at =
          source_t0 + (h0 - job->head_start) * job->tensor->head_stride;
      uint64_t target_at =
          target_t0 +
          (range_head - job->target_head_start) * job->target->head_stride +
          (h0 - range_head) * job->range_head_stride;
      direct_heads(d, job, source_at, target_at, tokens, h1 - h0);
    }
  }
}

/* The per-job constants direct_block reads (see direct_job). */
static void direct_job_constants(const direct *d, direct_job *job) {
  const reshard_pool_group *s = job->tensor, *g = job->target;
  job->s_offset = s->offset;
  job->s_block_stride = s->block_stride;
  job->s_token_stride = s->token_stride;
  job->g_offset = g->offset;
  job->g_block_stride = g->block_stride;
  job->g_token_stride = g->token_stride;
  job->source_region = s->region_index;
  job->target_region = g->region_index;
  job->hb = d->t->head_bytes[job->group % 2];
  size_t ranges = 0;
  for (uint64_t h = job->range_first; h < job->range_last; h++) {
    uint64_t h0, h1;
    range_heads(job, h, &h0, &h1);
    if (h0 < h1) {
      uint64_t range_head = job->range_split ? h : job->target_head_start;
      job->single_heads = h1 - h0;
      job->single_source = (h0 - job->head_start) * s->head_stride;
      job->single_target =
          (range_head - job->target_head_start) * g->head_stride +
          (h0 - range_head) * job->range_head_stride;
      ranges++;
    }
  }
  job->single = ranges == 1;
}

/* ---- Regions of one-row segments ----
 *
 * Most of what engines hold walks as segments of one row each: one piece
 * (FlashInfer's HND blocks into NHD, one-head participants, MLA, equal
 * TP) or, with runs, a copy per token (a TP change over NHD blocks). A
 * region whose every job meets one target range per block (job->single)
 * and whose segments are so is walked by region_walk. The walk's state
 * (region_state: the batcher's counts, the pending copy or row, the
 * fold's cursor) is in locals: in `d` it would be reloaded after every
 * copy or run written, which the compiler must assume may alias it (all
 * are 64-bit words). What the walk reads of a job per pair is copied
 * out once per region (region_job), with the shape of its segments, so
 * a segment reads one record. A segment of another shape, a copy that
 * closes or splits a batch, a row of a class other than the cursor's go
 * the general way, between a store and a reload of the state. */

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

/* The shape of the job's segments of `tokens` tokens; one_row says
 * whether region_walk takes them. Out of line: a region's segments are
 * mostly of one shape. */
static __attribute__((noinline)) void
region_job_shape(region_job *rj, uint64_t tokens, bool runs) {
  const direct_shape *sh = job_shape(rj->job, tokens, rj->job->single_heads);
  rj->tokens = tokens;
  rj->unit = sh->unit;
  rj->span = sh->span;
  rj->inner = sh->inner;
  rj->inner_s = sh->inner_s;
  rj->inner_d = sh->inner_d;
  rj->one_row = sh->outer == 1 && (sh->inner == 1 || runs);
}

/* The region_jobs of jobs [0, count), their shapes at `tokens` tokens;
 * false when region_walk does not take the region (a job of several
 * target ranges per block, or segments of another shape). */
static bool region_jobs(direct_job *jobs, size_t count, uint64_t tokens,
                        bool runs, region_job *out) {
  for (size_t j = 0; j < count; j++) {
    direct_job *job = &jobs[j];
    if (!job->single) {
      return false;
    }
    out[j] = (region_job){
        .job = job,
        .source_base = job->s_offset + job->single_source,
        .source_block = job->s_block_stride,
        .source_token = job->s_token_stride,
        .target_base = job->g_offset + job->single_target,
        .target_block = job->g_block_stride,
        .target_token = job->g_token_stride,
        .line = job->line,
        .source = job->source,
        .source_region = job->source_region,
        .target_region = job->target_region,
    };
    region_job_shape(&out[j], tokens, runs);
    if (!out[j].one_row) {
      return false;
    }
  }
  return true;
}

/* The walk's state in a region: the batcher's counts as what the open
 * batch has room for (one compare a copy, no limit held), where written
 * stands and the line's end (the explicit path's pending copy lies at
 * out + written). pushed moves with written in the walk, so it is kept
 * as their difference. */
typedef struct piece_state {
  size_t written;
  uint64_t ops_left, bytes_left; /* the open batch's */
  uint64_t pushed_over;          /* pushed - written */
  uint64_t end;
  bool has_pending;
} piece_state;

/* With runs, a cursor: a copy of the folder's slot for the class last
 * folded (the walk meets one class per region in turn), with the runs'
 * count, so a row of that class is folded without reading `d`. */
typedef struct run_cursor {
  struct fold_slot slot;
  struct fold_slot *slot_at; /* where `slot` goes back; NULL: none */
  size_t run_count, open_copies;
} run_cursor;

typedef struct region_state {
  piece_state batch;
  reshard_run row; /* with runs, the pending row */
  run_cursor cursor;
} region_state;

static inline piece_state pieces_load(const direct *d) {
  const reshard__batcher *b = &d->batcher;
  return (piece_state){.written = b->written,
                       .ops_left = b->limits.max_operations - b->batch_ops,
                       .bytes_left = b->limits.max_bytes - b->batch_bytes,
                       .pushed_over = b->pushed - b->written,
                       .end = d->end,
                       .has_pending = d->has_pending};
}

static inline void pieces_store(direct *d, const piece_state *s) {
  reshard__batcher *b = &d->batcher;
  b->written = s->written;
  b->batch_ops = b->limits.max_operations - s->ops_left;
  b->batch_bytes = b->limits.max_bytes - s->bytes_left;
  b->pushed = s->pushed_over + s->written;
  d->end = s->end;
  d->has_pending = s->has_pending;
}

/* The cursor on the folder's slot for `region_index`'s class when
 * nothing waits to be folded before it (no staged copies). */
static inline run_cursor cursor_load(const direct *d, uint64_t region_index) {
  run_cursor c;
  c.run_count = d->folder.run_count;
  c.open_copies = d->folder.open_copies;
  c.slot_at = d->staged == 0
                  ? reshard__run_folder_recent(&d->folder, region_index)
                  : NULL;
  c.slot = c.slot_at != NULL ? *c.slot_at : (struct fold_slot){0};
  return c;
}

static inline void cursor_store(direct *d, const run_cursor *c) {
  if (c->slot_at != NULL) {
    *c->slot_at = c->slot;
  }
  d->folder.run_count = c->run_count;
  d->folder.open_copies = c->open_copies;
}

/* Field by field, not as one initializer: that would clear the whole
 * record first (a `rep stos` on the general paths). */
static inline region_state region_load(const direct *d, uint64_t region_index) {
  region_state s;
  s.batch = pieces_load(d);
  s.row = d->pending_row;
  s.cursor = cursor_load(d, region_index);
  return s;
}

static inline void region_store(direct *d, const region_state *s) {
  pieces_store(d, &s->batch);
  d->pending_row = s->row;
  cursor_store(d, &s->cursor);
}

/* The pending copy to the batcher when it closes or splits a batch
 * (direct_batch), between a store and a reload of the state. The state goes by
 * value, so the caller's never escapes. */
static __attribute__((noinline)) piece_state pieces_cut(direct *d,
                                                        piece_state s) {
  pieces_store(d, &s);
  direct_batch(d); /* the copy at out + written */
  d->has_pending = false;
  return pieces_load(d);
}

/* A row that closes or splits a batch, the general way (runs_take); the
 * row is folded at once (unstaged), so the cursor may go on, on the
 * row's class. */
static __attribute__((noinline)) region_state
region_take(direct *d, region_state s, reshard_run row) {
  region_store(d, &s);
  runs_take(d, row.first, row.count, row.part_stride, row.region_stride);
  runs_unstage(d);
  return region_load(d, row.first.region_index);
}

/* A row that fits the open batch but not the cursor's class (the first
 * of a region, a copy merged with the next, of another size), to the
 * folder the general way (runs_fold), folded at once; the cursor then on
 * the row's class. Only the cursor goes back and forth: the batcher's
 * side is the caller's. */
static __attribute__((noinline)) run_cursor region_fold(direct *d, run_cursor c,
                                                        reshard_run row) {
  cursor_store(d, &c);
  runs_fold(d, &row.first, row.count, row.part_stride, row.region_stride);
  runs_unstage(d);
  return cursor_load(d, row.first.region_index);
}

/* A segment of another shape, the general way (direct_heads). */
static __attribute__((noinline)) piece_state
region_segment(direct *d, piece_state s, const region_job *j,
               uint64_t source_at, uint64_t target_at, uint64_t tokens) {
  pieces_store(d, &s);
  direct_heads(d, j->job, source_at, target_at, tokens, j->job->single_heads);
  return pieces_load(d);
}

static __attribute__((noinline)) region_state
region_segment_runs(direct *d, region_state s, const region_job *j,
                    uint64_t source_at, uint64_t target_at, uint64_t tokens) {
  region_store(d, &s);
  direct_heads(d, j->job, source_at, target_at, tokens, j->job->single_heads);
  return region_load(d, j->target_region);
}

/* A row to the batcher and the folder: what runs_take does, in line when
 * the row fits the open batch without filling it, and its fold too when
 * the row is of the cursor's class (what reshard__run_folder_fast does
 * then). False when the walk stopped. */
static inline bool region_emit_row(direct *d, region_state *s,
                                   reshard_run *runs, const reshard_run *row) {
  piece_state *b = &s->batch;
  run_cursor *c = &s->cursor;
  uint64_t bytes;
  if (row->count >= b->ops_left ||
      !reshard_mul(row->count, row->first.nbytes, &bytes) ||
      bytes >= b->bytes_left) {
    *s = region_take(d, *s, *row);
    return d->ordered;
  }
  if (c->slot_at != NULL && c->run_count <= d->run_room &&
      reshard__fold_slot_takes(&c->slot, &row->first)) {
    /* A row of one copy (one-piece segments) is folded without the
     * sequence arithmetic. */
    if (row->count == 1) {
      reshard__fold_slot_extend(&c->slot, runs, &c->run_count, &row->first, 1,
                                0, 0);
    } else {
      reshard__fold_slot_extend(&c->slot, runs, &c->run_count, &row->first,
                                row->count, row->part_stride,
                                row->region_stride);
    }
    c->open_copies += (size_t)row->count;
  } else {
    *c = region_fold(d, *c, *row);
    if (!d->ordered) {
      return false;
    }
  }
  b->written += (size_t)row->count;
  b->ops_left -= row->count;
  b->bytes_left -= bytes;
  return true;
}

/* A row after the pending one: runs_put's coalescing, by sequences. Only
 * the pending row's last copy and the row's first can merge; the merged
 * copy goes alone unless the row is one copy, and the rest of the row
 * waits. False when the walk stopped. */
static inline bool region_put_row(direct *d, region_state *s, reshard_run *runs,
                                  const reshard_run *row) {
  reshard_run *p = &s->row;
  if (!s->batch.has_pending) {
    *p = *row;
    s->batch.has_pending = true;
    return true;
  }
  if (p->count == 1 && row->count == 1) {
    if (copy_continues(&p->first, &row->first)) {
      p->first.nbytes += row->first.nbytes;
      return true;
    }
  } else {
    reshard_copy last = reshard_run_copy(p, p->count - 1);
    if (copy_continues(&last, &row->first)) {
      last.nbytes += row->first.nbytes;
      reshard_run rest = {p->first, p->count - 1, p->part_stride,
                          p->region_stride};
      reshard_run merged = {last, 1, 0, 0};
      if (p->count > 1 && !region_emit_row(d, s, runs, &rest)) {
        return false;
      }
      if (row->count == 1) {
        *p = merged;
        return true;
      }
      if (!region_emit_row(d, s, runs, &merged)) {
        return false;
      }
      *p = (reshard_run){reshard_run_copy(row, 1), row->count - 1,
                         row->part_stride, row->region_stride};
      return true;
    }
  }
  if (!region_emit_row(d, s, runs, p)) {
    return false;
  }
  *p = *row;
  return true;
}

/* A one-piece segment's copy after the pending one: direct_put's
 * coalescing, the batching in line as direct_batch's. False when the
 * walk stopped. */
static inline bool region_put_copy(direct *d, piece_state *s, reshard_copy *out,
                                   const reshard_copy *c) {
  if (s->has_pending) {
    reshard_copy *p = &out[s->written];
    if (copy_continues(p, c)) {
      p->nbytes += c->nbytes;
      return true;
    }
    if (s->ops_left > 1 && p->nbytes < s->bytes_left) {
      s->written++;
      s->ops_left--;
      s->bytes_left -= p->nbytes;
    } else {
      *s = pieces_cut(d, *s);
      if (!d->ordered) {
        return false;
      }
    }
  }
  out[s->written] = *c;
  s->has_pending = true;
  return true;
}

/* The walk of one region (see above): block by block (each block's pairs
 * for each job in turn) or tensor by tensor (every pair for each job in
 * turn), as direct_walk's general loop; `runs` says which path. */
static inline __attribute__((always_inline)) void
region_walk(direct *d, region_job *rj, size_t jobs, bool by_block, bool runs) {
  const direct_pair *pairs = d->pair;
  const size_t *pair_first = d->pair_first;
  reshard_copy *out = d->batcher.out;
  reshard_run *run_out = d->folder.runs;
  size_t xs = by_block ? d->blocks : jobs;
  size_t ys = by_block ? jobs : 1;
  region_state s;
  if (runs) {
    /* The cursor on the pending row's class: the row from the region
     * before, if any, is the first to be folded. */
    s = region_load(d, d->has_pending ? d->pending_row.first.region_index
                                      : rj[0].target_region);
  } else {
    s.batch = pieces_load(d);
  }
  for (size_t x = 0; x < xs; x++) {
    for (size_t y = 0; y < ys; y++) {
      region_job *j = &rj[by_block ? y : x];
      size_t q_end = pair_first[by_block ? x + 1 : d->blocks];
      for (size_t q = by_block ? pair_first[x] : 0; q < q_end; q++) {
        const direct_pair *pq = &pairs[q];
        if (pq->tokens != j->tokens) {
          region_job_shape(j, pq->tokens, runs);
        }
        uint64_t source_at = j->source_base + pq->source_id * j->source_block +
                             pq->source_token * j->source_token;
        uint64_t target_at = j->target_base + pq->target_id * j->target_block +
                             pq->target_token * j->target_token;
        if (!j->one_row) {
          if (runs) {
            s = region_segment_runs(d, s, j, source_at, target_at, pq->tokens);
          } else {
            s.batch =
                region_segment(d, s.batch, j, source_at, target_at, pq->tokens);
          }
          if (!d->ordered) {
            return;
          }
          continue;
        }
        uint64_t first = j->line + source_at;
        bool going = first >= s.batch.end;
        if (going) {
          s.batch.end = first + j->span;
          reshard_copy c = {j->source,        j->source_region, source_at,
                            j->target_region, target_at,        j->unit};
          going = runs ? region_put_row(d, &s, run_out,
                                        &(reshard_run){c, j->inner, j->inner_s,
                                                       j->inner_d})
                       : region_put_copy(d, &s.batch, out, &c);
        } else {
          d->ordered = false;
        }
        if (!going) {
          /* The walk stops; the state stays whole. */
          runs ? region_store(d, &s) : pieces_store(d, &s.batch);
          return;
        }
      }
    }
  }
  runs ? region_store(d, &s) : pieces_store(d, &s.batch);
}

/* region_walk compiled for each path, so neither tests which it is on
 * every copy. */
static __attribute__((noinline)) void
region_copies(direct *d, region_job *rj, size_t jobs, bool by_block) {
  region_walk(d, rj, jobs, by_block, false);
}

static __attribute__((noinline)) void region_runs(direct *d, region_job *rj,
                                                  size_t jobs, bool by_block) {
  region_walk(d, rj, jobs, by_block, true);
}

/* ---- Regions repeated ----
 *
 * Engines give every layer the same tensors at the same offsets in a
 * region of its own, so a region's jobs mostly read the pairs with the
 * last region's strides and offsets; only the region indices and where
 * the region lies on the line differ. What such a region writes is the
 * last one's copies or runs with the indices renamed, provided its walk
 * would meet the same state: nothing pending from before (each region's
 * last copy goes to the batcher at its end: no copy of another region
 * continues it), no class of it met before (a class names its source
 * region, walked once), the region past the last segment's end on the
 * line (its own segments then follow one another as the last region's
 * did), and either room in the open batch for all of it (no batch closes
 * inside) or the open batch as full as it was before the last region
 * (the batches close at the same copies, and the runs are cut there
 * alike). Then the region is written as a move of its output, not
 * walked: every layer after the first, where batches hold whole layers
 * or a layer holds whole batches. */

/* A region walked, for the regions after it: its jobs (one target
 * region), where it lies on the line and where its last segment ended,
 * where its copies (explicit) or runs start and how many, what it added
 * to the open batch or, where it closed batches, the batcher and folder
 * before it and the batches it closed, [batch, batch + closed). jobs
 * NULL: none. */
typedef struct region_repeat {
  const direct_job *jobs;
  size_t job_count;
  uint64_t line, end;
  size_t first, count;
  reshard__batcher before, after;
  size_t batch, closed;
  size_t open_copies; /* the folder's after it (runs) */
} region_repeat;

/* What the walk of a job reads, but its regions and line: two jobs alike
 * write the same copies into their regions. */
static bool jobs_alike(const direct_job *x, const direct_job *y) {
  return x->source == y->source && x->hb == y->hb &&
         x->head_start == y->head_start &&
         x->entry->head_start == y->entry->head_start &&
         x->entry->head_end == y->entry->head_end &&
         x->s_offset == y->s_offset && x->s_block_stride == y->s_block_stride &&
         x->s_token_stride == y->s_token_stride &&
         x->tensor->head_stride == y->tensor->head_stride &&
         x->g_offset == y->g_offset && x->g_block_stride == y->g_block_stride &&
         x->g_token_stride == y->g_token_stride &&
         x->target->head_stride == y->target->head_stride &&
         x->range_split == y->range_split && x->range_first == y->range_first &&
         x->range_last == y->range_last &&
         x->range_head_stride == y->range_head_stride;
}

/* Whether jobs [0, count) all write into one target region, so renaming
 * a region's output is one substitution. */
static bool one_target_region(const direct_job *jobs, size_t count) {
  for (size_t j = 1; j < count; j++) {
    if (jobs[j].target_region != jobs[0].target_region) {
      return false;
    }
  }
  return count > 0;
}

/* The last copy of a region, pending, to the batcher (and, with runs, the
 * staged copies to the folder): what the next region's first copy, which
 * cannot continue it, would do. */
static void region_close(direct *d) {
  if (d->has_pending) {
    if (d->runs) {
      runs_take(d, d->pending_row.first, d->pending_row.count,
                d->pending_row.part_stride, d->pending_row.region_stride);
    } else {
      direct_batch(d);
    }
    d->has_pending = false;
  }
  if (d->runs) {
    runs_unstage(d);
  }
}

/* Where the output of a region starts: the copies written or the runs. */
static size_t region_output(const direct *d) {
  return d->runs ? d->folder.run_count : d->batcher.written;
}

/* Remembers the region of jobs [0, count), just walked from `first` (its
 * output's start) and batcher state `before`, when its output can stand
 * for a later region's (see above): in repeat[0] when it closed no batch,
 * else in repeat[1], so that where batches hold several layers, the
 * layers between closes and those a batch closes in both repeat. */
static void region_repeat_note(const direct *d, region_repeat repeat[2],
                               const direct_job *jobs, size_t count,
                               size_t first, const reshard__batcher *before) {
  const reshard__batcher *b = &d->batcher;
  if (!d->ordered || d->status != RESHARD_OK || b->written == before->written ||
      (d->runs && d->folder.batch_count != b->batch_count) ||
      !one_target_region(jobs, count)) {
    return;
  }
  repeat[b->batch_count > before->batch_count] = (region_repeat){
      .jobs = jobs,
      .job_count = count,
      .line = jobs[0].line,
      .end = d->end,
      .first = first,
      .count = region_output(d) - first,
      .before = *before,
      .after = *b,
      .batch = before->batch_count,
      .closed = b->batch_count - before->batch_count,
      .open_copies = d->folder.open_copies,
  };
}

/* Whether the region of jobs [0, count) writes what `r` wrote, renamed,
 * from where the walk stands. */
static bool region_repeat_takes(const direct *d, const region_repeat *r,
                                const direct_job *jobs, size_t count) {
  const reshard__batcher *b = &d->batcher;
  if (r->jobs == NULL || r->job_count != count || d->has_pending ||
      jobs[0].line < d->end ||
      (d->runs && (d->staged != 0 || d->folder.run_count > d->run_room ||
                   r->count > d->run_room - d->folder.run_count)) ||
      !one_target_region(jobs, count)) {
    return false;
  }
  bool same_batch = b->batch_ops == r->before.batch_ops &&
                    b->batch_bytes == r->before.batch_bytes;
  if (r->closed > 0 && !same_batch) {
    return false;
  }
  uint64_t ops = r->after.batch_ops - r->before.batch_ops;
  uint64_t bytes = r->after.batch_bytes - r->before.batch_bytes;
  if (r->closed == 0 && !same_batch &&
      (ops >= b->limits.max_operations - b->batch_ops ||
       bytes >= b->limits.max_bytes - b->batch_bytes)) {
    return false;
  }
  for (size_t j = 0; j < count; j++) {
    if (!jobs_alike(&jobs[j], &r->jobs[j])) {
      return false;
    }
  }
  return true;
}

/* The remembered region the region of jobs [0, count) repeats, or NULL. */
static const region_repeat *region_repeat_find(const direct *d,
                                               const region_repeat repeat[2],
                                               const direct_job *jobs,
                                               size_t count) {
  for (int i = 0; i < 2; i++) {
    if (region_repeat_takes(d, &repeat[i], jobs, count)) {
      return &repeat[i];
    }
  }
  return NULL;
}

/* Writes `r`'s output renamed into the region of `jobs` (see above): its
 * copies or runs, and the batches it closed, each as far on as the
 * region's output starts past `r`'s. */
static void region_repeat_write(direct *d, const region_repeat *r,
                                const direct_job *jobs) {
  uint64_t part_index = jobs[0].source_region;
  uint64_t region_index = jobs[0].target_region;
  reshard__batcher *b = &d->batcher;
  size_t shift = b->written - r->before.written;
  if (d->runs) {
    reshard__run_folder *f = &d->folder;
    size_t from = r->first;
    for (size_t k = 1; k <= r->closed; k++) {
      size_t to = f->batch_first[r->batch + k];
      reshard__run_folder_renamed(f, from, to, part_index, region_index);
      d->batch_source[f->batch_count] = d->source;
      reshard__run_folder_close(f);
      from = to;
    }
    reshard__run_folder_renamed(f, from, r->first + r->count, part_index,
                                region_index);
    f->open_copies =
        r->closed > 0 ? r->open_copies
                      : f->open_copies + (r->after.written - r->before.written);
  } else {
    const reshard_copy *from = b->out + r->first;
    reshard_copy *to = b->out + b->written;
    for (size_t i = 0; i < r->count; i++) {
      to[i] = from[i];
      to[i].part_index = part_index;
      to[i].region_index = region_index;
    }
  }
  for (size_t k = 0; k < r->closed; k++) {
    reshard_batch batch = b->batches[r->batch + k];
    batch.first += shift;
    b->batches[b->batch_count++] = batch;
  }
  b->written += r->after.written - r->before.written;
  b->pushed += r->after.pushed - r->before.pushed;
  if (r->closed > 0) {
    b->batch_first = r->after.batch_first + shift;
    b->batch_ops = r->after.batch_ops;
    b->batch_bytes = r->after.batch_bytes;
  } else {
    b->batch_ops += r->after.batch_ops - r->before.batch_ops;
    b->batch_bytes += r->after.batch_bytes - r->before.batch_bytes;
  }
  /* r->end >= r->line: the region wrote a segment. */
  d->end = jobs[0].line + (r->end - r->line);
  d->regions_repeated++;
  if (r->closed > 0 && d->columns != NULL && d->status == RESHARD_OK &&
      (d->status = reshard__transfer_columns_drain(d->columns, d->t->err))) {
    d->ordered = false; /* stops the walk; plan_direct reports status */
  }
}

/* The walk (see above), writing through the batcher; d->ordered false
 * when a segment began before the last one ended (the walk stops). */
static reshard_status direct_walk(direct *d) {
  direct_job *jobs = d->jobs;
  region_repeat repeat[2] = {{0}}; /* regions that closed no batch, some */
  d->end = 0;
  d->ordered = true;
  for (size_t a = 0; a < d->job_count && d->ordered;) {
    if (reshard__transfer_stop_requested(d->t->request)) {
      return reshard_error_set(d->t->err, RESHARD_DEADLINE_EXCEEDED,
                               "plan: abandoned (deadline or cancellation)");
    }
    const reshard_pool_group *first = jobs[a].tensor;
    d->source = jobs[a].source;
    size_t b = a + 1;
    bool one_stride = true;
    while (b < d->job_count && jobs[b].source == jobs[a].source &&
           jobs[b].tensor->region_index == first->region_index) {
      one_stride =
          one_stride && jobs[b].tensor->block_stride == first->block_stride;
      b++;
    }
    /* Block by block (x a block, y a tensor) or tensor by tensor (x a
     * tensor, y a block): one loop, so direct_block is written in line
     * once. */
    bool by_block =
        b - a > 1 && one_stride &&
        jobs[b - 1].tensor->offset - first->offset < first->block_stride;
    size_t xs = by_block ? d->blocks : b - a;
    size_t ys = by_block ? b - a : d->blocks;
    /* Regions whose segments are one row are walked by region_walk (the
     * first pair's shape says; a block cut short that is not goes the
     * general way there). */
    region_job *rj = &d->region_jobs[a];
    const region_repeat *r = region_repeat_find(d, repeat, &jobs[a], b - a);
    if (r != NULL) {
      region_repeat_write(d, r, &jobs[a]);
    } else {
      size_t output = region_output(d);
      reshard__batcher before = d->batcher;
      if (region_jobs(&jobs[a], b - a, d->pair[0].tokens, d->runs, rj)) {
        if (d->runs) {
          region_runs(d, rj, b - a, by_block);
        } else {
          region_copies(d, rj, b - a, by_block);
        }
      } else {
        for (size_t x = 0; x < xs && d->ordered; x++) {
          for (size_t y = 0; y < ys && d->ordered; y++) {
            direct_block(d, &jobs[a + (by_block ? y : x)], by_block ? x : y);
          }
        }
      }
      if (d->ordered) {
        region_close(d);
      }
      region_repeat_note(d, repeat, &jobs[a], b - a, output, &before);
    }
    if (b == d->job_count || jobs[b].source != jobs[a].source) {
      direct_flush(d);
    }
    a = b;
  }
  return RESHARD_OK;
}

/* The jobs by (source, region, offset), the span's source blocks by id,
 * a target block's range buffer. False when memory runs out or the
 * regions do not fit one 64-bit line (then the sorting path plans). */
static bool direct_prepare(reshard__transfer *t, direct *d) {
  const reshard_join *join = t->join;
  d->t = t;
  d->target = t->request->pooled;
  uint64_t *bases = NULL;
  size_t *first_region =
      RESHARD_ARENA_ARRAY(t->arena, size_t, t->source_count + 1);
  d->jobs = RESHARD_ARENA_ARRAY(t->arena, direct_job, join->entry_count + 1);
  d->region_jobs =
      RESHARD_ARENA_ARRAY(t->arena, region_job, join->entry_count + 1);
  if (first_region == NULL || d->jobs == NULL || d->region_jobs == NULL ||
      !reshard__transfer_region_bases(t, &bases)) {
    return false;
  }
  const reshard_bound_pool *target = d->target->pool;
  uint64_t target_head_start = target->part->head_start;
  uint64_t target_head_end = target_head_start + target->part->head_count;
  size_t at = 0;
  for (size_t o = 0; o < t->source_count; o++) {
    first_region[o] = at;
    at += t->source_pool[o]->pool->region_count;
  }
  d->job_count = 0;
  for (size_t g = 0; g < join->group_count; g++) {
    uint64_t layer = t->target->layer_ids[g / 2];
    for (size_t e = join->group_start[g]; e < join->group_start[g + 1]; e++) {
      const reshard_join_entry *entry = &join->entries[e];
      size_t o = t->shard_source[entry->part_index];
      const reshard_placement_part *part = t->source_part[o];
      size_t source_group =
          (size_t)reshard__transfer_layer_index(part, layer) * 2 + g % 2;
      const reshard_pool_group *tensor =
          &t->source_pool[o]->bound->groups[source_group];
      size_t per_block = reshard_pool_ranges_per_block(target, g);
      bool split = per_block > 1;
      uint64_t first = split && entry->head_start > target_head_start
                           ? entry->head_start
                           : target_head_start;
      uint64_t last = !split                              ? first + per_block
                      : entry->head_end < target_head_end ? entry->head_end
                                                          : target_head_end;
      d->jobs[d->job_count++] = (direct_job){
          .source = o,
          .group = g,
          .entry = entry,
          .tensor = tensor,
          .head_start = part->head_start,
          .line = bases[first_region[o] + tensor->region_index],
          .target = &target->groups[g],
          .range_split = split,
          .range_first = first,
          .range_last = last > first ? last : first,
          .range_head_stride = split ? target->groups[g].head_bytes
                                     : target->groups[g].head_stride,
          .target_head_start = target_head_start,
          .target_head_end = target_head_end,
      };
    }
  }
  /* Built in the target's order, which is mostly the source's too (same
   * layer and tensor order): then the sort, a tenth of a small transfer's
   * planning (T1 at 128 tokens), is skipped. */
  bool in_order = true;
  for (size_t j = 1; in_order && j < d->job_count; j++) {
    in_order = compare_jobs(&d->jobs[j - 1], &d->jobs[j]) <= 0;
  }
  if (!in_order) {
    qsort(d->jobs, d->job_count, sizeof *d->jobs, compare_jobs);
  }
  for (size_t j = 0; j < d->job_count; j++) {
    direct_job_constants(d, &d->jobs[j]);
  }
  d->source_ids = t->request->source_block_ids;
  d->target_ids = d->target->block_ids;
  uint64_t n = t->request->token_count;
  d->blocks = (size_t)(n / t->block_size + (n % t->block_size != 0));
  reshard__keyed *keyed =
      RESHARD_ARENA_ARRAY(t->arena, reshard__keyed, d->blocks + 1);
  reshard__keyed *spare =
      RESHARD_ARENA_ARRAY(t->arena, reshard__keyed, d->blocks + 1);
  d->order = RESHARD_ARENA_ARRAY(t->arena, size_t, d->blocks + 1);
  uint64_t bt = target->block_size;
  size_t target_blocks = (size_t)(n / bt + (n % bt != 0));
  d->block_start = RESHARD_ARENA_ARRAY(t->arena, uint64_t, d->blocks + 1);
  d->target_first = RESHARD_ARENA_ARRAY(t->arena, size_t, d->blocks + 1);
  d->target_end = RESHARD_ARENA_ARRAY(t->arena, size_t, d->blocks + 1);
  d->target_start = RESHARD_ARENA_ARRAY(t->arena, uint64_t, target_blocks + 1);
  if (keyed == NULL || spare == NULL || d->order == NULL ||
      d->block_start == NULL || d->target_first == NULL ||
      d->target_end == NULL || d->target_start == NULL) {
    return false;
  }
  /* Both tables cover [0, n) (checked), so no block start overflows. */
  for (size_t i = 0; i < d->blocks; i++) {
    uint64_t start = (uint64_t)i * t->block_size;
    uint64_t end = n - start > t->block_size ? start + t->block_size : n;
    d->block_start[i] = start;
    d->target_first[i] = (size_t)(start / bt);
    d->target_end[i] = (size_t)((end - 1) / bt + 1);
  }
  d->block_start[d->blocks] = n;
  for (size_t j = 0; j < target_blocks; j++) {
    d->target_start[j] = (uint64_t)j * bt;
  }
  d->target_start[target_blocks] = n;
  size_t pairs = 0;
  for (size_t i = 0; i < d->blocks; i++) {
    pairs += d->target_end[i] - d->target_first[i];
  }
  reshard__keyed *tokens =
      RESHARD_ARENA_ARRAY(t->arena, reshard__keyed, pairs + 1);
  reshard__keyed *tokens_spare =
      RESHARD_ARENA_ARRAY(t->arena, reshard__keyed, pairs + 1);
  if (tokens == NULL || tokens_spare == NULL) {
    return false;
  }
  size_t p = 0;
  for (size_t i = 0; i < d->blocks; i++) {
    for (size_t j = d->target_first[i]; j < d->target_end[i]; j++) {
      uint64_t start = d->block_start[i] > d->target_start[j]
                           ? d->block_start[i]
                           : d->target_start[j];
      uint64_t end = d->block_start[i + 1] < d->target_start[j + 1]
                         ? d->block_start[i + 1]
                         : d->target_start[j + 1];
      tokens[p++] = (reshard__keyed){end - start, 0};
    }
  }
  reshard__keyed *sorted_tokens =
      reshard__sort_keyed(tokens, tokens_spare, pairs);
  d->overlap = tokens_spare == sorted_tokens ? tokens : tokens_spare;
  d->overlap_count = 0;
  for (size_t q = 0; q < pairs; q++) {
    if (d->overlap_count > 0 &&
        d->overlap[d->overlap_count - 1].key == sorted_tokens[q].key) {
      d->overlap[d->overlap_count - 1].index++;
    } else {
      d->overlap[d->overlap_count++] =
          (reshard__keyed){sorted_tokens[q].key, 1};
    }
  }
  for (size_t i = 0; i < d->blocks; i++) {
    keyed[i] = (reshard__keyed){t->request->source_block_ids[i], i};
  }
  const reshard__keyed *sorted = reshard__sort_keyed(keyed, spare, d->blocks);
  for (size_t i = 0; i < d->blocks; i++) {
    d->order[i] = (size_t)sorted[i].index;
  }
  d->pair = RESHARD_ARENA_ARRAY(t->arena, direct_pair, pairs + 1);
  d->pair_first = RESHARD_ARENA_ARRAY(t->arena, size_t, d->blocks + 1);
  if (d->pair == NULL || d->pair_first == NULL) {
    return false;
  }
  p = 0;
  for (size_t k = 0; k < d->blocks; k++) {
    size_t i = d->order[k];
    d->pair_first[k] = p;
    uint64_t start = d->block_start[i], end = d->block_start[i + 1];
    for (size_t j = d->target_first[i]; j < d->target_end[i]; j++) {
      uint64_t token_start = d->target_start[j];
      uint64_t t0 = start > token_start ? start : token_start;
      uint64_t t1 = end < d->target_start[j + 1] ? end : d->target_start[j + 1];
      d->pair[p++] = (direct_pair){d->source_ids[i], t0 - start,
                                   d->target_ids[j], t0 - token_start, t1 - t0};
    }
  }
  d->pair_first[d->blocks] = p;
  return true;
}

/* The folder and the batch sources of the runs path. Runs: each fold
 * adds at most two; a row the walk puts makes at most two stretches to
 * take (the pending row's rest, a merged copy), a flush one; a stretch
 * is folded in one piece per batch it fills plus one, and a copy split
 * at a batch's end in a piece per batch it fills plus one. So at most
 * 2 × (2 × rows + sources + 3 × batches) runs, and never more than
 * copies. */
static reshard_status runs_prepare(reshard__transfer *t, direct *d,
                                   size_t max_copies, size_t max_batches) {
  uint64_t takes, folds, room;
  if (reshard_mul(2, d->rows, &takes) &&
      reshard_add(takes, t->source_count, &takes) &&
      reshard_mul(3, max_batches, &folds) &&
      reshard_add(folds, takes, &folds) && reshard_mul(2, folds, &room) &&
      room < max_copies) {
    d->run_room = (size_t)room;
  } else {
    d->run_room = max_copies;
  }
  d->batch_source = RESHARD_ARENA_ARRAY(t->arena, size_t, max_batches + 1);
  if (d->batch_source == NULL) {
    return reshard__transfer_no_memory(t);
  }
  d->stage = RESHARD_ARENA_ARRAY(t->arena, reshard_copy, RUNS_STAGE);
  if (d->stage == NULL) {
    return reshard__transfer_no_memory(t);
  }
  return reshard__run_folder_init(&d->folder, d->run_room + RUNS_STAGE + 1,
                                  max_batches, t->arena, t->err);
}

/* The direct walk, after direct_count: limits, then each coalesced copy
 * written once, by the batcher. *done is false when the walk turned out
 * not to be in plan order (nothing is returned then; the caller plans
 * by sorting, and what was written stays in the arena). */
static reshard_status plan_direct(reshard__transfer *t, direct *d,
                                  reshard_transfer_plan *out, bool *done) {
  reshard_status status =
      reshard__transfer_check_counts(t, d->copies, d->bytes);
  if (status) {
    return status;
  }
  reshard__batching limits = {t->request->limits.max_batch_operations,
                              t->request->limits.max_batch_bytes};
  size_t max_copies, max_batches;
  reshard__batch_bounds((size_t)d->pieces, d->bytes, &limits, &max_copies,
                        &max_batches);
  max_batches += t->source_count;
  d->runs = t->request->runs && t->request->omit_copies;
  reshard_copy *copies =
      d->runs ? NULL
              : RESHARD_ARENA_ARRAY(t->arena, reshard_copy, max_copies + 1);
  reshard_batch *batches =
      RESHARD_ARENA_ARRAY(t->arena, reshard_batch, max_batches + 1);
  if ((copies == NULL && !d->runs) || batches == NULL) {
    return reshard__transfer_no_memory(t);
  }
  if (d->runs && (status = runs_prepare(t, d, max_copies, max_batches))) {
    return status;
  }
  reshard__batcher_init(&d->batcher, &limits, copies, batches);
  reshard__transfer_columns columns;
  if (!d->runs && reshard__transfer_wants_columns(t->request)) {
    if ((status = reshard__transfer_columns_init(t, &columns, &d->batcher,
                                                 max_copies, max_batches))) {
      return status;
    }
    d->columns = &columns;
  }
  if ((status = direct_walk(d)) || (status = d->status) || !d->ordered ||
      (d->runs && d->folder.run_count > d->run_room)) {
    return status;
  }
  *done = true;
  out->copies = copies;
  out->batches = batches;
  out->copy_count = d->batcher.written;
  out->batch_count = d->batcher.batch_count;
  out->direct = true;
  out->regions_repeated = d->regions_repeated;
  if (d->columns != NULL) {
    out->columns = columns.encoder.out;
  }
  if (d->runs) {
    out->batch_source = d->batch_source;
    reshard__run_folder_finish(&d->folder, &out->runs);
  }
  return reshard__transfer_finish(t, d->copies, d->bytes, out);
}

reshard_status reshard__transfer_plan_direct(reshard__transfer *t,
                                             reshard_transfer_plan *out,
                                             bool *done) {
  *done = false;
  direct d = {0};
  if (!direct_prepare(t, &d)) {
    return RESHARD_OK;
  }
  direct_count(&d);
  return plan_direct(t, &d, out, done);
}
