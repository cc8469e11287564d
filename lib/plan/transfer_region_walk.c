/* Transfer planning into a pooled target: the direct walk's regions of
 * one-row segments (see transfer_walk.h and transfer_direct.c). */
#include "plan/transfer_walk.h"

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

/* The shape of the job's segments of `tokens` tokens; one_row says
 * whether region_walk takes them. Out of line: a region's segments are
 * mostly of one shape. */
static __attribute__((noinline)) void
region_job_shape(region_job *rj, uint64_t tokens, bool runs) {
  const direct_shape *sh =
      reshard__walk_job_shape(rj->job, tokens, rj->job->single_heads);
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
bool reshard__walk_region_jobs(direct_job *jobs, size_t count, uint64_t tokens,
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
 * stands in the batcher's `out` (the explicit path's pending copy lies at
 * out + written; no copy is dropped inside a region) and the line's end.
 * pushed moves with written in the walk, so it is kept as their
 * difference. */
typedef struct piece_state {
  size_t written;                /* the batcher's written - dropped */
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
  return (piece_state){.written = b->written - b->dropped,
                       .ops_left = b->limits.max_operations - b->batch_ops,
                       .bytes_left = b->limits.max_bytes - b->batch_bytes,
                       .pushed_over = b->pushed - b->written,
                       .end = d->end,
                       .has_pending = d->has_pending};
}

static inline void pieces_store(direct *d, const piece_state *s) {
  reshard__batcher *b = &d->batcher;
  b->written = s->written + b->dropped;
  b->batch_ops = b->limits.max_operations - s->ops_left;
  b->batch_bytes = b->limits.max_bytes - s->bytes_left;
  b->pushed = s->pushed_over + b->written;
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
  reshard__walk_unstage(d);
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
  reshard__walk_unstage(d);
  return cursor_load(d, row.first.region_index);
}

/* A segment of another shape, the general way (direct_heads). */
static __attribute__((noinline)) piece_state
region_segment(direct *d, piece_state s, const region_job *j,
               uint64_t source_at, uint64_t target_at, uint64_t tokens) {
  pieces_store(d, &s);
  reshard__walk_heads(d, j->job, source_at, target_at, tokens,
                      j->job->single_heads);
  return pieces_load(d);
}

static __attribute__((noinline)) region_state
region_segment_runs(direct *d, region_state s, const region_job *j,
                    uint64_t source_at, uint64_t target_at, uint64_t tokens) {
  region_store(d, &s);
  reshard__walk_heads(d, j->job, source_at, target_at, tokens,
                      j->job->single_heads);
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
void reshard__walk_region_copies(direct *d, region_job *rj, size_t jobs,
                                 bool by_block) {
  region_walk(d, rj, jobs, by_block, false);
}

void reshard__walk_region_runs(direct *d, region_job *rj, size_t jobs,
                               bool by_block) {
  region_walk(d, rj, jobs, by_block, true);
}
