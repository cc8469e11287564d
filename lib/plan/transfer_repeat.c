/* Transfer planning into a pooled target: regions written as a region
 * walked before, renamed, not walked (see transfer_walk.h and
 * transfer_direct.c). */
#include "plan/transfer_walk.h"

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
    reshard__walk_unstage(d);
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
      .end = d->end,
      .first = first,
      .count = region_output(d) - first,
      .before = *before,
      .after = *b,
      .open_copies = d->folder.open_copies,
  };
}

/* The batches `r`'s region closed. */
static size_t closed_batches(const region_repeat *r) {
  return r->after.batch_count - r->before.batch_count;
}

/* Whether a region written as `r` renamed needs no copy of it: the plan
 * keeps none (d->drop_copies), and `r` began a batch and ended one (so,
 * having output, it closed some), so its output is whole batches, each
 * a batch of `r`'s renamed, whose columns are that batch's with its one
 * part index and one region index replaced
 * (reshard__transfer_columns_repeat). */
static bool repeats_whole_batches(const direct *d, const region_repeat *r) {
  return d->drop_copies && r->before.batch_ops == 0 && r->after.batch_ops == 0;
}

/* Whether the region of jobs [0, count), which the walk can write renamed
 * from where it stands (reshard__walk_repeat_find), writes what `r`
 * wrote. */
static bool region_repeat_takes(const direct *d, const region_repeat *r,
                                const direct_job *jobs, size_t count) {
  const reshard__batcher *b = &d->batcher;
  if (r->jobs == NULL || r->job_count != count ||
      (d->runs && r->count > d->run_room - d->folder.run_count)) {
    return false;
  }
  /* Its copies are read again unless whole batches repeat: they must be
   * held (not dropped, nor never written). */
  if (!repeats_whole_batches(d, r) && r->first < b->dropped) {
    return false;
  }
  bool same_batch = b->batch_ops == r->before.batch_ops &&
                    b->batch_bytes == r->before.batch_bytes;
  if (closed_batches(r) > 0 && !same_batch) {
    return false;
  }
  uint64_t ops = r->after.batch_ops - r->before.batch_ops;
  uint64_t bytes = r->after.batch_bytes - r->before.batch_bytes;
  if (closed_batches(r) == 0 && !same_batch &&
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
const region_repeat *reshard__walk_repeat_find(const direct *d,
                                               const region_repeat repeat[2],
                                               const direct_job *jobs,
                                               size_t count) {
  /* What the region needs of the walk, whichever region it repeats. */
  if (d->has_pending || jobs[0].line < d->end ||
      (d->runs && (d->staged != 0 || d->folder.run_count > d->run_room)) ||
      !one_target_region(jobs, count)) {
    return NULL;
  }
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
void reshard__walk_repeat_write(direct *d, const region_repeat *r,
                                const direct_job *jobs) {
  uint64_t part_index = jobs[0].source_region;
  uint64_t region_index = jobs[0].target_region;
  reshard__batcher *b = &d->batcher;
  size_t first_closed = r->before.batch_count, closed = closed_batches(r);
  size_t shift = b->written - r->before.written;
  bool whole = repeats_whole_batches(d, r);
  if (d->runs) {
    reshard__run_folder *f = &d->folder;
    size_t from = r->first;
    for (size_t k = 1; k <= closed; k++) {
      size_t to = f->batch_first[first_closed + k];
      reshard__run_folder_renamed(f, from, to, part_index, region_index);
      d->batch_source[f->batch_count] = d->source;
      reshard__run_folder_close(f);
      from = to;
    }
    reshard__run_folder_renamed(f, from, r->first + r->count, part_index,
                                region_index);
    f->open_copies =
        closed > 0 ? r->open_copies
                   : f->open_copies + (r->after.written - r->before.written);
  } else if (!whole) {
    const reshard_copy *from = reshard__batcher_copy(b, r->first);
    reshard_copy *to = reshard__batcher_copy(b, b->written);
    for (size_t i = 0; i < r->count; i++) {
      to[i] = from[i];
      to[i].part_index = part_index;
      to[i].region_index = region_index;
    }
  }
  for (size_t k = 0; k < closed; k++) {
    reshard_batch batch = b->batches[first_closed + k];
    batch.first += shift;
    b->batches[b->batch_count++] = batch;
  }
  b->written += r->after.written - r->before.written;
  b->pushed += r->after.pushed - r->before.pushed;
  if (closed > 0) {
    b->batch_first = r->after.batch_first + shift;
    b->batch_ops = r->after.batch_ops;
    b->batch_bytes = r->after.batch_bytes;
  } else {
    b->batch_ops += r->after.batch_ops - r->before.batch_ops;
    b->batch_bytes += r->after.batch_bytes - r->before.batch_bytes;
  }
  /* r->end >= its line: the region wrote a segment. */
  d->end = jobs[0].line + (r->end - r->jobs[0].line);
  d->regions_repeated++;
  if (whole) {
    /* Nothing was written, and nothing before is read again but the
     * remembered regions that repeat whole batches too (see above). */
    b->dropped = b->written;
    d->regions_unwritten++;
  }
  /* The batches it closed, encoded: from the batches they repeat when
   * no copy was written, else from their copies. */
  if (closed > 0 && d->columns != NULL && d->status == RESHARD_OK &&
      (d->status =
           whole ? reshard__transfer_columns_repeat(d->columns, first_closed,
                                                    part_index, region_index,
                                                    d->t->err)
                 : reshard__transfer_columns_drain(d->columns, d->t->err))) {
    d->ordered = false; /* stops the walk; plan_direct reports status */
  }
}

region_start reshard__walk_region_start(const direct *d) {
  return (region_start){region_output(d), d->batcher};
}

void reshard__walk_region_end(direct *d, region_repeat repeat[2],
                              const direct_job *jobs, size_t count,
                              const region_start *start) {
  if (d->ordered) {
    region_close(d);
  }
  region_repeat_note(d, repeat, jobs, count, start->output, &start->batcher);
}
