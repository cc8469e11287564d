/* Load planning (SPEC §2.2): check the request and validate the binding,
 * choose a source for each page of the hit prefix (pass 1, select.c),
 * then lower, coalesce and batch page by page (pass 2), feeding the run
 * folder and the column encoder as the batches fill. */
#include "reshard/plan.h"

#include <string.h>

#include "plan/plan_internal.h"
#include "reshard/arena.h"
#include "reshard/checked.h"

reshard_status reshard__plan_no_memory(reshard__planner *plan) {
  return reshard_error_set(plan->err, RESHARD_RESOURCE_EXHAUSTED,
                           "plan: out of memory");
}

reshard_status reshard__plan_deadline(reshard__planner *plan) {
  return reshard_error_set(plan->err, RESHARD_DEADLINE_EXCEEDED,
                           "plan: abandoned, the call's deadline passed");
}

/* The field that names the memory's participant, for messages. */
static const char *participant_field(const reshard_load_request *request) {
  return request->participant_field != NULL ? request->participant_field
                                            : "binding.participant_id";
}

static reshard_status check_request(reshard__planner *plan) {
  const reshard_load_request *request = plan->request;
  const reshard_placement *placement = request->placement;
  reshard_error *err = plan->err;
  if (request->page_count == 0) {
    return reshard_error_set(err, RESHARD_INVALID_ARGUMENT,
                             "page_keys: must not be empty");
  }
  if (request->page_count > request->limits.max_page_keys) {
    return reshard_error_set(err, RESHARD_RESOURCE_EXHAUSTED,
                             "page_keys: %llu keys exceed the limit "
                             "max_page_keys %llu",
                             (unsigned long long)request->page_count,
                             (unsigned long long)request->limits.max_page_keys);
  }
  const char *participant = request->binding->participant_id;
  if (participant == NULL || participant[0] == '\0') {
    return reshard_error_set(err, RESHARD_INVALID_ARGUMENT,
                             "%s: must not be empty",
                             participant_field(request));
  }
  plan->part = reshard_placement_find_part(placement, participant);
  if (plan->part == NULL) {
    return reshard_error_set(err, RESHARD_INVALID_ARGUMENT,
                             "%s: \"%s\" is not a "
                             "participant of the target placement",
                             participant_field(request), participant);
  }
  uint64_t dp = request->has_dp_rank ? request->dp_rank
                                     : reshard_placement_lowest_dp(placement);
  if (request->has_dp_rank && !reshard_placement_has_dp(placement, dp)) {
    return reshard_error_set(err, RESHARD_INVALID_ARGUMENT,
                             "target_dp_rank: no participant of the placement "
                             "has dp rank %llu",
                             (unsigned long long)dp);
  }
  if (plan->part->rank.dp != dp) {
    return reshard_error_set(err, RESHARD_INVALID_ARGUMENT,
                             "%s: participant \"%s\" has dp rank %llu, not the "
                             "target dp rank %llu",
                             participant_field(request), participant,
                             (unsigned long long)plan->part->rank.dp,
                             (unsigned long long)dp);
  }
  return RESHARD_OK;
}

/* A plan whose pages keep refusing sequences (shapes that coalesce
 * across them) stops trying after this many, rather than lowering each
 * page twice. */
enum { MAX_SEQUENCE_REFUSALS = 4, SEQUENCE_ROOM_DIVISOR = 4 };

/* Where batched copies go besides the batcher: the run folder and the
 * column encoder, each NULL unless the plan asks for it, and how far each
 * has taken them (the encoder counts its rows itself). Pages lowered copy
 * by copy are drained from the batcher's copies; stretches of sequences
 * are folded and encoded as they are batched, before the drain. */
typedef struct batch_sinks {
  reshard__batcher *batcher;
  reshard__run_folder *folder;
  size_t folded_batches;
  size_t folded_copies;
  reshard__column_encoder *encoder;
  size_t encoded_batches;
} batch_sinks;

/* Folds the copies batched since the last call into runs, closing the
 * batches the batcher closed since. */
static reshard_status fold_batched(reshard__planner *plan, batch_sinks *sinks) {
  const reshard__batcher *batcher = sinks->batcher;
  for (; sinks->folded_batches < batcher->batch_count;
       sinks->folded_batches++) {
    const reshard_batch *batch = &batcher->batches[sinks->folded_batches];
    size_t end = batch->first + batch->count;
    reshard_status status = reshard__run_folder_copies(
        sinks->folder, batcher->out + sinks->folded_copies,
        end - sinks->folded_copies, plan->err);
    if (status) {
      return status;
    }
    sinks->folded_copies = end;
    reshard__run_folder_close(sinks->folder);
  }
  reshard_status status = reshard__run_folder_copies(
      sinks->folder, batcher->out + sinks->folded_copies,
      batcher->written - sinks->folded_copies, plan->err);
  sinks->folded_copies = batcher->written;
  return status;
}

/* Encodes the copies batched since the last call as varint columns,
 * closing the batches the batcher closed since. */
static reshard_status encode_batched(reshard__planner *plan,
                                     batch_sinks *sinks) {
  const reshard__batcher *batcher = sinks->batcher;
  reshard__column_encoder *encoder = sinks->encoder;
  for (; sinks->encoded_batches < batcher->batch_count;
       sinks->encoded_batches++) {
    const reshard_batch *batch = &batcher->batches[sinks->encoded_batches];
    reshard__column_encoder_rows(encoder, batcher->out + encoder->rows,
                                 batch->first + batch->count - encoder->rows);
    reshard_status status = reshard__column_encoder_close(encoder, plan->err);
    if (status) {
      return status;
    }
  }
  reshard__column_encoder_rows(encoder, batcher->out + encoder->rows,
                               batcher->written - encoder->rows);
  return RESHARD_OK;
}

/* Folds and encodes what was batched since the last call, while it is
 * still in cache. */
static reshard_status drain_batched(reshard__planner *plan,
                                    batch_sinks *sinks) {
  reshard_status status = RESHARD_OK;
  if (sinks->folder != NULL) {
    status = fold_batched(plan, sinks);
  }
  if (status == RESHARD_OK && sinks->encoder != NULL) {
    status = encode_batched(plan, sinks);
  }
  return status;
}

/* Batches copy k of each of the `width` sequences at `group`, k in
 * [row, row + rows), from column `column` of the first row on: a stretch
 * that fits the open batch. The sinks take it as sequences; the copies are
 * written only when the plan keeps them. */
static reshard_status batch_stretch(reshard__planner *plan,
                                    const reshard_run *group, size_t width,
                                    uint64_t row, uint64_t rows, size_t column,
                                    batch_sinks *sinks) {
  /* The stretch as a group of its own: the sequences from `row` on, or
   * the single copies of one row from `column` on. */
  reshard__batcher *batcher = sinks->batcher;
  size_t first = rows == 1 ? column : 0;
  size_t stretch_width = width - first;
  bool whole = row == 0 && rows == group->count;
  if (!whole && plan->stretch == NULL &&
      (plan->stretch = RESHARD_ARENA_ARRAY(
           plan->arena, reshard_run, plan->sequence_scratch.room)) == NULL) {
    return reshard__plan_no_memory(plan);
  }
  reshard_run *scratch = plan->stretch;
  const reshard_run *stretch = whole ? group : scratch;
  uint64_t bytes = 0;
  for (size_t s = 0; s < stretch_width; s++) {
    const reshard_run *sequence = &group[first + s];
    if (!whole) {
      scratch[s] = (reshard_run){reshard_run_copy(sequence, row), rows,
                                 rows > 1 ? sequence->part_stride : 0,
                                 rows > 1 ? sequence->region_stride : 0};
    }
    bytes += rows * sequence->first.nbytes;
  }
  if (plan->keep_copies) {
    reshard__group_expand(stretch, stretch_width,
                          batcher->out + batcher->written);
  }
  reshard__batcher_commit(batcher, (size_t)rows * stretch_width, bytes);
  if (sinks->folder != NULL) {
    reshard_status status = reshard__run_folder_group(sinks->folder, stretch,
                                                      stretch_width, plan->err);
    if (status) {
      return status;
    }
    sinks->folded_copies = batcher->written;
  }
  if (sinks->encoder != NULL) {
    reshard__column_encoder_group(sinks->encoder, stretch, stretch_width);
  }
  return drain_batched(plan, sinks);
}

/* Batches page `page`, lowered as sequences, when it fits the open batch
 * whole: what batching it group by group does, since the batch can close
 * only at its last copy. Its runs are the page before's moved when this
 * page is that one shifted one amount per region and that one was folded
 * whole too; else its groups are folded, and its runs become the
 * template for the next page. */
static reshard_status batch_whole_page(reshard__planner *plan,
                                       const reshard__page_sequences *sequences,
                                       uint64_t page, uint64_t page_bytes,
                                       batch_sinks *sinks,
                                       reshard_load_plan *out) {
  reshard__batcher *batcher = sinks->batcher;
  if (plan->keep_copies) {
    reshard__page_sequences_expand(sequences, batcher->out + batcher->written);
  }
  reshard__batcher_commit(batcher, (size_t)sequences->copies, page_bytes);
  reshard__run_folder *folder = sinks->folder;
  if (folder != NULL) {
    size_t first_run = folder->run_count;
    if (sequences->shifted && plan->run_template.valid &&
        plan->run_template.page == sequences->from_page) {
      reshard__run_folder_shifted(folder, plan->run_template.first,
                                  plan->run_template.end, page,
                                  sequences->region_shift, sequences->copies);
      out->run_template_pages++;
    } else {
      size_t first = 0;
      for (size_t g = 0; g < sequences->group_count; g++) {
        size_t end = sequences->group_ends[g];
        reshard_status status = reshard__run_folder_group(
            folder, sequences->sequences + first, end - first, plan->err);
        if (status) {
          return status;
        }
        first = end;
      }
    }
    plan->run_template.page = page;
    plan->run_template.first = first_run;
    plan->run_template.end = folder->run_count;
    plan->run_template.valid = true;
    sinks->folded_copies = batcher->written;
  }
  if (sinks->encoder != NULL) {
    size_t first = 0;
    for (size_t g = 0; g < sequences->group_count; g++) {
      size_t end = sequences->group_ends[g];
      reshard__column_encoder_group(sinks->encoder,
                                    sequences->sequences + first, end - first);
      first = end;
    }
  }
  return drain_batched(plan, sinks);
}

/* Batches page `page`, lowered as sequences: whole when it fits the open
 * batch, else a group at a time where a group fits the open batch and in
 * stretches of whole rows (or of one row's copies) where a batch closes
 * inside it. A page that could fill a batch's byte budget goes through
 * `scratch` and the batcher copy by copy (a copy may be split there). */
static reshard_status batch_sequences(reshard__planner *plan,
                                      const reshard__page_sequences *sequences,
                                      uint64_t page, uint64_t page_bytes,
                                      batch_sinks *sinks, reshard_copy *scratch,
                                      reshard_load_plan *out) {
  reshard__batcher *batcher = sinks->batcher;
  const reshard__batching *limits = &batcher->limits;
  if (reshard__batcher_fits(batcher, (size_t)sequences->copies, page_bytes)) {
    return batch_whole_page(plan, sequences, page, page_bytes, sinks, out);
  }
  /* Runs split across batches are no page's template. */
  plan->run_template.valid = false;
  if (page_bytes > limits->max_bytes - batcher->batch_bytes) {
    reshard__page_sequences_expand(sequences, scratch);
    reshard__batcher_push(batcher, scratch, (size_t)sequences->copies);
    return drain_batched(plan, sinks);
  }
  size_t first = 0;
  for (size_t g = 0; g < sequences->group_count; g++) {
    size_t end = sequences->group_ends[g];
    const reshard_run *group = sequences->sequences + first;
    size_t width = end - first;
    uint64_t count = group->count;
    uint64_t row = 0;
    size_t column = 0;
    while (row < count) {
      uint64_t room = limits->max_operations - batcher->batch_ops;
      /* Whole rows that fit; no division where the rest of the group
       * does (left * width is at most the page's copies: no wrap). */
      uint64_t left = count - row;
      uint64_t rows = 0;
      if (column == 0) {
        rows = left * width <= room ? left : room / width;
      }
      reshard_status status;
      if (rows > 0) {
        status = batch_stretch(plan, group, width, row, rows, 0, sinks);
        row += rows;
      } else {
        /* Less than the rest of a row fits: as much of it as fits. */
        size_t take = width - column < room ? width - column : (size_t)room;
        status =
            batch_stretch(plan, group, column + take, row, 1, column, sinks);
        column += take;
        if (column == width) {
          column = 0;
          row++;
        }
      }
      if (status) {
        return status;
      }
    }
    first = end;
  }
  return RESHARD_OK;
}

/* Lowers, coalesces and batches a page copy by copy. */
static void batch_copies(const reshard__page_lowering *lowering,
                         uint64_t page_bytes, reshard__batcher *batcher,
                         reshard_copy *lowered, reshard__keyed *keys,
                         reshard__keyed *spare, reshard_copy *coalesced) {
  const uint64_t *part_base = lowering->join->part_base;
  size_t count = reshard__lower_page(lowering, lowered);
  if (reshard__batcher_fits(batcher, count, page_bytes)) {
    /* No batch closes inside this page: coalesce straight into the
     * batched copies rather than through a copy of the page. */
    count = reshard__coalesce_page(lowered, count, part_base, keys, spare,
                                   batcher->out + batcher->written);
    reshard__batcher_commit(batcher, count, page_bytes);
  } else {
    count = reshard__coalesce_page(lowered, count, part_base, keys, spare,
                                   coalesced);
    reshard__batcher_push(batcher, coalesced, count);
  }
}

/* Pass 2: lower, coalesce and batch each hit page in turn; only one page's
 * copies exist before batching. */
static reshard_status lower_pages(reshard__planner *plan,
                                  reshard_load_plan *out,
                                  uint64_t largest_page) {
  const reshard_load_request *request = plan->request;
  const reshard_limits *limits = &request->limits;
  uint64_t page_size = request->placement->descriptor.page_size;
  reshard__batching batching = {
      .max_operations =
          limits->max_batch_operations ? limits->max_batch_operations : 1,
      .max_bytes = limits->max_batch_bytes ? limits->max_batch_bytes : 1,
  };
  size_t max_copies, max_batches;
  reshard__batch_bounds((size_t)out->copies_before_coalescing, out->bytes,
                        &batching, &max_copies, &max_batches);
  size_t page_room = (size_t)largest_page + 1;
  reshard_copy *lowered =
      RESHARD_ARENA_ARRAY(plan->arena, reshard_copy, page_room);
  reshard_copy *coalesced =
      RESHARD_ARENA_ARRAY(plan->arena, reshard_copy, page_room);
  reshard__keyed *keys =
      RESHARD_ARENA_ARRAY(plan->arena, reshard__keyed, page_room);
  reshard__keyed *spare =
      RESHARD_ARENA_ARRAY(plan->arena, reshard__keyed, page_room);
  out->copies = RESHARD_ARENA_ARRAY(plan->arena, reshard_copy, max_copies + 1);
  out->batches =
      RESHARD_ARENA_ARRAY(plan->arena, reshard_batch, max_batches + 1);
  if (!lowered || !coalesced || !keys || !spare || !out->copies ||
      !out->batches) {
    return reshard__plan_no_memory(plan);
  }
  reshard__batcher batcher;
  reshard__batcher_init(&batcher, &batching, out->copies, out->batches);
  reshard__run_folder folder;
  reshard__column_encoder encoder = {0};
  batch_sinks sinks = {
      .batcher = &batcher,
      .folder = request->runs ? &folder : NULL,
      .encoder = request->varint_columns ? &encoder : NULL,
  };
  size_t batch_room = batching.max_operations < max_copies
                          ? (size_t)batching.max_operations
                          : max_copies;
  /* Sequences pay off when they are a few times fewer than the copies;
   * a page with more goes copy by copy, so the scratch stays a fraction of
   * the page's copies (the in-flight reservation counts per copy). */
  size_t sequence_room = page_room / SEQUENCE_ROOM_DIVISOR + 16;
  if (plan->cursor.pooled != NULL) {
    /* Over a pool, the next page is usually this one with other blocks:
     * its sequences, even one per copy, are kept to be shifted rather
     * than lowered and sorted again. A page's worth of scratch. */
    sequence_room = page_room + 16;
  }
  reshard__sequence_scratch *sequence = &plan->sequence_scratch;
  *sequence = (reshard__sequence_scratch){
      .lowered = RESHARD_ARENA_ARRAY(plan->arena, reshard_run, sequence_room),
      .order = RESHARD_ARENA_ARRAY(plan->arena, size_t, sequence_room),
      .sorted = RESHARD_ARENA_ARRAY(plan->arena, reshard_run, sequence_room),
      .keys = keys,
      .spare = spare,
      .group_ends = RESHARD_ARENA_ARRAY(plan->arena, size_t, sequence_room),
      .room = sequence_room,
      .memo =
          {
              .origin = RESHARD_ARENA_ARRAY(plan->arena, size_t, sequence_room),
              .ranges = RESHARD_ARENA_ARRAY(plan->arena, size_t, sequence_room),
              .shift =
                  RESHARD_ARENA_ARRAY(plan->arena, uint64_t, sequence_room),
              .room = sequence_room,
          },
  };
  if (!sequence->lowered || !sequence->order || !sequence->sorted ||
      !sequence->group_ends || !sequence->memo.origin ||
      !sequence->memo.ranges || !sequence->memo.shift) {
    return reshard__plan_no_memory(plan);
  }
  if (plan->cursor.pooled != NULL) {
    /* One amount per region, to tell when a shifted page is the last one
     * moved (reshard__sequence_memo.uniform). */
    const reshard_bound_pool *pool = plan->cursor.pooled->pool;
    reshard__sequence_memo *memo = &sequence->memo;
    memo->region_count = pool->region_count;
    memo->region_shift =
        RESHARD_ARENA_ARRAY(plan->arena, uint64_t, memo->region_count + 1);
    memo->region_mark =
        RESHARD_ARENA_NEW(plan->arena, uint64_t, memo->region_count + 1);
    if (!memo->region_shift || !memo->region_mark) {
      return reshard__plan_no_memory(plan);
    }
    memo->one_stride = true;
    bool seen = false;
    for (size_t g = 0; g < pool->group_count; g++) {
      size_t per_block = plan->cursor.ranges_per_block[g];
      if (per_block == 0) {
        continue;
      }
      memo->ranges_per_page_block += per_block; /* < the cursor's room */
      if (seen && pool->groups[g].block_stride != memo->block_stride) {
        memo->one_stride = false;
      }
      memo->block_stride = pool->groups[g].block_stride;
      seen = true;
    }
  }
  if (request->runs) {
    reshard_status status = reshard__run_folder_init(
        &folder, max_copies, max_batches, plan->arena, plan->err);
    if (status) {
      return status;
    }
  }
  if (request->varint_columns) {
    reshard_status status = reshard__column_encoder_init(
        &encoder, batch_room, max_batches, plan->arena,
        request->column_arena != NULL ? request->column_arena : plan->arena,
        plan->err);
    if (status) {
      return status;
    }
  }
  reshard__cursor_reset(&plan->cursor);
  for (uint64_t page = 0; page < out->hit_pages; page++) {
    if (reshard__plan_stop_requested(request)) {
      return reshard__plan_deadline(plan);
    }
    reshard__cursor_advance(&plan->cursor, page * page_size,
                            (page + 1) * page_size);
    const reshard_join *join = plan->joins[out->page_source[page]];
    reshard__page_lowering lowering =
        reshard__plan_page_lowering(plan, join, page);
    reshard__page_sequences sequences;
    bool by_sequences = false;
    if (plan->sequence_refusals < MAX_SEQUENCE_REFUSALS) {
      by_sequences = reshard__sequence_page(&lowering, &plan->sequence_scratch,
                                            &sequences);
      plan->sequence_refusals += !by_sequences;
    }
    reshard_status status;
    if (by_sequences) {
      out->sequence_pages++;
      out->reused_pages += sequences.reused;
      status = batch_sequences(plan, &sequences, page, plan->page_bytes[page],
                               &sinks, coalesced, out);
    } else {
      plan->run_template.valid = false;
      batch_copies(&lowering, plan->page_bytes[page], &batcher, lowered, keys,
                   spare, coalesced);
      status = drain_batched(plan, &sinks);
    }
    if (status) {
      return status;
    }
  }
  reshard__batcher_finish(&batcher);
  reshard_status status = drain_batched(plan, &sinks);
  if (status) {
    return status;
  }
  if (request->runs) {
    reshard__run_folder_finish(&folder, &out->runs);
  }
  if (request->varint_columns) {
    out->columns = encoder.out;
  }
  if (batcher.written > limits->max_operations) {
    return reshard_error_set(
        plan->err, RESHARD_RESOURCE_EXHAUSTED,
        "plan: %zu copies after batching exceed the limit max_operations %llu",
        batcher.written, (unsigned long long)limits->max_operations);
  }
  out->copy_count = batcher.written;
  if (!plan->keep_copies) {
    out->copies = NULL;
  }
  out->batch_count = batcher.batch_count;
  out->operations = batcher.written;
  out->copies_after_coalescing = batcher.pushed;
  return RESHARD_OK;
}

/* Checks the block table of pooled memory and sets the cursor on it. */
static reshard_status bind_pooled(reshard__planner *plan) {
  const reshard_load_request *request = plan->request;
  const reshard_pooled_memory *pooled = request->pooled;
  const reshard_bound_pool *pool = pooled->pool;
  if (strcmp(pool->part->participant_id, plan->part->participant_id) != 0 ||
      pool->part->layer_count != plan->part->layer_count) {
    return reshard_error_set(plan->err, RESHARD_INVALID_ARGUMENT,
                             "pooled: the pool is participant \"%s\"'s, not "
                             "\"%s\"'s",
                             pool->part->participant_id,
                             plan->part->participant_id);
  }
  uint64_t page_size = request->placement->descriptor.page_size;
  reshard_status status =
      reshard_pooled_check(pooled, request->page_count, page_size,
                           &request->limits, plan->arena, plan->err);
  if (status) {
    return status;
  }
  uint64_t token_span = request->page_count * page_size; /* checked */
  return reshard__cursor_init_pooled(&plan->cursor, pooled, plan->part,
                                     token_span, page_size, plan->arena,
                                     plan->err);
}

static reshard_status plan_load(reshard__planner *plan,
                                reshard_load_plan *out) {
  const reshard_load_request *request = plan->request;
  reshard_status status = check_request(plan);
  if (status) {
    return status;
  }
  out->page_source =
      RESHARD_ARENA_ARRAY(plan->arena, size_t, (size_t)request->page_count);
  plan->page_bytes =
      RESHARD_ARENA_ARRAY(plan->arena, uint64_t, (size_t)request->page_count);
  if (out->page_source == NULL || plan->page_bytes == NULL) {
    return reshard__plan_no_memory(plan);
  }
  const reshard_descriptor *descriptor = &request->placement->descriptor;
  plan->head_bytes[0] = reshard_head_bytes(descriptor, RESHARD_COMPONENT_KEY);
  plan->head_bytes[1] = reshard_head_bytes(descriptor, RESHARD_COMPONENT_VALUE);
  if (request->pooled != NULL) {
    status = bind_pooled(plan);
    if (status) {
      return status;
    }
  } else if (request->bound_binding != NULL) {
    plan->binding = *request->bound_binding;
    /* The same part, maybe in another copy of the same placement. */
    plan->binding.part = plan->part;
  } else {
    status = reshard_binding_validate(request->binding, descriptor, plan->part,
                                      request->page_count, &request->limits,
                                      plan->arena, &plan->binding, plan->err);
    if (status) {
      return status;
    }
  }
  if (request->pooled == NULL &&
      (status = reshard__cursor_init(&plan->cursor, &plan->binding, plan->arena,
                                     plan->err))) {
    return status;
  }
  uint64_t largest_page = 0;
  if ((status = reshard__select_sources(plan, out, &largest_page))) {
    return status;
  }
  return lower_pages(plan, out, largest_page);
}

reshard_status reshard_plan_load(const reshard_load_request *request,
                                 reshard_arena *arena, reshard_load_plan *out,
                                 reshard_error *err) {
  memset(out, 0, sizeof *out);
  size_t sources = request->source_count;
  reshard__planner plan = {
      .request = request,
      .keep_copies =
          !(request->omit_copies && (request->runs || request->varint_columns)),
      .arena = arena,
      .err = err,
      .joins = RESHARD_ARENA_NEW(arena, const reshard_join *, sources + 1),
      .built = RESHARD_ARENA_NEW(arena, reshard_join *, sources + 1),
  };
  if (plan.joins == NULL || plan.built == NULL) {
    return reshard__plan_no_memory(&plan);
  }
  for (size_t s = 0; s < sources; s++) {
    plan.joins[s] = request->sources[s].join;
  }
  reshard_status status = plan_load(&plan, out);
  reshard__plan_free_trial(&plan);
  out->built_joins = plan.built;
  if (status) {
    reshard_load_plan_free_joins(out, sources);
    memset(out, 0, sizeof *out);
    return status;
  }
  out->participant = plan.part;
  return RESHARD_OK;
}

void reshard_load_plan_free_joins(reshard_load_plan *plan,
                                  size_t source_count) {
  if (plan->built_joins == NULL) {
    return;
  }
  for (size_t s = 0; s < source_count; s++) {
    reshard_join_free(plan->built_joins[s]);
    plan->built_joins[s] = NULL;
  }
}
