/* Transfer planning into a pooled target, lowered straight from the
 * source pools and both block tables in plan order (SPEC §2.6; see
 * transfer.c for the request checks, the source choice and the join this
 * starts from, and for the sorting path it falls back to). */
#include <stdlib.h>
#include <string.h>

#include "base/keyed_sort.h"
#include "plan/transfer_walk.h"

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

/* The writers the walk's files share out of line (transfer_walk.h). */

void reshard__walk_unstage(direct *d) {
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

void reshard__walk_take_cut(direct *d, reshard_copy first, uint64_t count,
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

const direct_shape *reshard__walk_job_shape(direct_job *job, uint64_t tokens,
                                            uint64_t heads) {
  return job_shape(job, tokens, heads);
}

void reshard__walk_heads(direct *d, direct_job *job, uint64_t source_at,
                         uint64_t target_at, uint64_t tokens, uint64_t heads) {
  direct_heads(d, job, source_at, target_at, tokens, heads);
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

/* Fewer dead copies than this are not worth a move; and the dead must be
 * DROP_DEAD_PER_LIVE times the live ones moved: with 1, the moves were
 * 40 % of T1's instructions (each copy moved about once), with 3 the
 * plan holds at most four times what it reads again (T1, T2: 65 536
 * copies, 3 MiB) and T1 plans in 0.9 ms instead of 1.05–1.4. */
enum { DROP_COPIES_MIN = 64, DROP_DEAD_PER_LIVE = 3 };

/* Between regions, with the plan's copies not kept (d->drop_copies): the
 * copies before the first one anything still reads (a later drain of the
 * columns, a remembered region written again renamed) are dropped, and
 * those after it moved to the front of the batcher's `out`, once the
 * dropped ones are DROP_DEAD_PER_LIVE times as many. So a plan that
 * writes megabytes of copies holds a few batches' worth, in cache, and
 * touches only the front of the array it reserved: T2's 31 MB of copies
 * were 7 700 page faults a call in the daemon. A region is walked whole:
 * inside it the walk holds places in `out`. */
static void drop_read_copies(direct *d, const region_repeat repeat[2]) {
  reshard__batcher *b = &d->batcher;
  size_t from = reshard__transfer_columns_read_from(d->columns);
  for (int i = 0; i < 2; i++) {
    if (repeat[i].jobs != NULL && repeat[i].first < from) {
      from = repeat[i].first;
    }
  }
  /* What a region repeated as whole batches left unwritten is dropped
   * already (reshard__walk_repeat_write). */
  if (from < b->dropped) {
    from = b->dropped;
  }
  /* No copy is pending between regions: a region's last goes to the
   * batcher at its end (region_close), a repeated one writes none. */
  size_t end = b->written;
  if (end - b->dropped > d->held_most) {
    d->held_most = end - b->dropped;
  }
  size_t dead = from - b->dropped, live = end - from;
  if (dead < DROP_COPIES_MIN || dead / DROP_DEAD_PER_LIVE < live) {
    return;
  }
  memmove(b->out, reshard__batcher_copy(b, from), live * sizeof *b->out);
  b->dropped = from;
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
    region_start start = reshard__walk_region_start(d);
    const region_repeat *r =
        reshard__walk_repeat_find(d, repeat, &jobs[a], b - a);
    if (r != NULL) {
      reshard__walk_repeat_write(d, r, &jobs[a]);
    } else if (reshard__walk_region_jobs(&jobs[a], b - a, d->pair[0].tokens,
                                         d->runs, rj)) {
      if (d->runs) {
        reshard__walk_region_runs(d, rj, b - a, by_block);
      } else {
        reshard__walk_region_copies(d, rj, b - a, by_block);
      }
    } else {
      for (size_t x = 0; x < xs && d->ordered; x++) {
        for (size_t y = 0; y < ys && d->ordered; y++) {
          direct_block(d, &jobs[a + (by_block ? y : x)], by_block ? x : y);
        }
      }
    }
    /* A region written renamed is remembered in place of the one it
     * repeats (its output is what walking it would have written), so the
     * region remembered is always a recent one, and copies before it can
     * be dropped. */
    reshard__walk_region_end(d, repeat, &jobs[a], b - a, &start);
    if (b == d->job_count || jobs[b].source != jobs[a].source) {
      direct_flush(d);
    }
    if (d->drop_copies && d->ordered) {
      drop_read_copies(d, repeat);
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
    d->drop_copies = t->request->omit_copies;
  }
  if ((status = direct_walk(d)) || (status = d->status) || !d->ordered ||
      (d->runs && d->folder.run_count > d->run_room)) {
    return status;
  }
  *done = true;
  out->copies = copies;
  if (d->drop_copies) {
    out->copies = NULL;
    out->batch_source = columns.batch_source;
    out->copies_held = d->held_most;
    out->regions_unwritten = d->regions_unwritten;
  }
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
