/* Load planning (SPEC §2.2): validate the binding, choose a source for each
 * page of the hit prefix, then lower, coalesce and batch page by page. */
#include "reshard/plan.h"

#include <stdlib.h>
#include <string.h>

#include "plan_internal.h"
#include "reshard/arena.h"
#include "reshard/checked.h"

typedef struct planner {
  const reshard_load_request *request;
  const reshard_placement_part *part;
  reshard_bound_binding binding;
  reshard__range_cursor cursor;
  const reshard_join **joins; /* per source, built on first use */
  reshard_join **built;       /* per source, what this plan built */
  uint64_t head_bytes[2];
  reshard_arena *arena;
  reshard_error *err;
  /* Growable scratch for comparing candidate layouts of one page. */
  reshard_copy *trial_copies;
  reshard_copy *trial_out;
  reshard__keyed *trial_keys;
  reshard__keyed *trial_spare;
  size_t trial_capacity;
  uint64_t *page_bytes; /* per hit page, what lowering it moves */
  reshard__sequence_scratch sequence_scratch;
  /* A stretch of a group cut at a batch boundary (sequence_scratch.room
   * entries, made the first time one is needed). */
  reshard_run *stretch;
  /* Pages whose sequences could not stand for their copies; past a few,
   * the plan stops trying and lowers copy by copy. */
  unsigned sequence_refusals;
  /* Whether the plan writes every copy: unless the caller reads only runs
   * or varint columns (request.omit_copies). */
  bool keep_copies;
} planner;

static reshard_status no_memory(planner *plan) {
  return reshard_error_set(plan->err, RESHARD_RESOURCE_EXHAUSTED,
                           "plan: out of memory");
}

static reshard_status source_join(planner *plan, size_t source,
                                  const reshard_join **out) {
  if (plan->joins[source] == NULL) {
    const reshard_plan_source *candidate = &plan->request->sources[source];
    reshard_join *join =
        reshard_join_build(candidate->layout, plan->part, plan->err);
    if (join == NULL) {
      return plan->err ? plan->err->code : RESHARD_RESOURCE_EXHAUSTED;
    }
    plan->built[source] = join;
    plan->joins[source] = join;
  }
  *out = plan->joins[source];
  return RESHARD_OK;
}

static reshard__page_lowering
page_lowering(const planner *plan, const reshard_join *join, uint64_t page) {
  return (reshard__page_lowering){
      .join = join,
      .cursor = &plan->cursor,
      .page_index = page,
      .page_size = plan->request->placement->descriptor.page_size,
      .head_bytes = {plan->head_bytes[0], plan->head_bytes[1]},
  };
}

static reshard_status grow_trial(planner *plan, size_t need) {
  if (need <= plan->trial_capacity) {
    return RESHARD_OK;
  }
  free(plan->trial_copies);
  free(plan->trial_out);
  free(plan->trial_keys);
  free(plan->trial_spare);
  plan->trial_copies = malloc(need * sizeof(reshard_copy));
  plan->trial_out = malloc(need * sizeof(reshard_copy));
  plan->trial_keys = malloc(need * sizeof(reshard__keyed));
  plan->trial_spare = malloc(need * sizeof(reshard__keyed));
  plan->trial_capacity = need;
  if (!plan->trial_copies || !plan->trial_out || !plan->trial_keys ||
      !plan->trial_spare) {
    plan->trial_capacity = 0;
    return no_memory(plan);
  }
  return RESHARD_OK;
}

/* Copies after coalescing of page `page` from `source`: the cost by which
 * candidate layouts are compared. */
static reshard_status trial_cost(planner *plan, size_t source, uint64_t page,
                                 uint64_t *out) {
  const reshard_join *join = NULL;
  reshard_status status = source_join(plan, source, &join);
  if (status) {
    return status;
  }
  reshard__page_lowering lowering = page_lowering(plan, join, page);
  reshard__page_cost cost = reshard__lower_count(&lowering);
  if (cost.copies > plan->request->limits.max_operations) {
    *out = UINT64_MAX;
    return RESHARD_OK;
  }
  if ((status = grow_trial(plan, (size_t)cost.copies + 1))) {
    return status;
  }
  size_t count = reshard__lower_page(&lowering, plan->trial_copies);
  *out = reshard__coalesce_page(plan->trial_copies, count, join->part_base,
                                plan->trial_keys, plan->trial_spare,
                                plan->trial_out);
  return RESHARD_OK;
}

/* Picks the source of page `page` among its candidates with the target's
 * descriptor: the caller's first preference, else the fewest operations,
 * ties to the smallest layout id. Sets *chosen to SIZE_MAX when no
 * candidate matches the target's descriptor. */
static reshard_status choose_source(planner *plan, uint64_t page,
                                    size_t *chosen) {
  const reshard_load_request *request = plan->request;
  const reshard_descriptor *target = &request->placement->descriptor;
  size_t first = request->page_source_start[page];
  size_t end = request->page_source_start[page + 1];
  size_t matching = 0;
  size_t only = SIZE_MAX;
  const char *differing = NULL;
  const char *differing_layout = NULL;
  for (size_t i = first; i < end; i++) {
    size_t source = request->page_sources[i];
    const char *field;
    if (reshard_descriptor_equal(&request->sources[source].layout->descriptor,
                                 target, &field)) {
      matching++;
      only = source;
    } else if (differing == NULL) {
      differing = field;
      differing_layout = request->sources[source].layout_id;
    }
  }
  *chosen = SIZE_MAX;
  if (matching == 0) {
    if (page == 0) {
      return reshard_error_set(
          plan->err, RESHARD_FAILED_PRECONDITION,
          "page_keys[0]: bound only to layouts whose descriptor differs from "
          "the target's in %s (layout %s); reshardd converts no bytes",
          differing, differing_layout ? differing_layout : "?");
    }
    return RESHARD_OK;
  }
  if (matching == 1) {
    *chosen = only;
    return RESHARD_OK;
  }
  for (size_t p = 0; p < request->preferred_count; p++) {
    for (size_t i = first; i < end; i++) {
      size_t source = request->page_sources[i];
      if (strcmp(request->sources[source].layout_id,
                 request->preferred_layout_ids[p]) == 0 &&
          reshard_descriptor_equal(&request->sources[source].layout->descriptor,
                                   target, NULL)) {
        *chosen = source;
        return RESHARD_OK;
      }
    }
  }
  uint64_t best_cost = UINT64_MAX;
  for (size_t i = first; i < end; i++) {
    size_t source = request->page_sources[i];
    if (!reshard_descriptor_equal(&request->sources[source].layout->descriptor,
                                  target, NULL)) {
      continue;
    }
    uint64_t cost;
    reshard_status status = trial_cost(plan, source, page, &cost);
    if (status) {
      return status;
    }
    if (*chosen == SIZE_MAX || cost < best_cost ||
        (cost == best_cost &&
         strcmp(request->sources[source].layout_id,
                request->sources[*chosen].layout_id) < 0)) {
      *chosen = source;
      best_cost = cost;
    }
  }
  return RESHARD_OK;
}

static reshard_status check_request(planner *plan) {
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
                             "binding.participant_id: must not be empty");
  }
  plan->part = reshard_placement_find_part(placement, participant);
  if (plan->part == NULL) {
    return reshard_error_set(err, RESHARD_INVALID_ARGUMENT,
                             "binding.participant_id: \"%s\" is not a "
                             "participant of the target placement",
                             participant);
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
    return reshard_error_set(
        err, RESHARD_INVALID_ARGUMENT,
        "binding.participant_id: participant \"%s\" has dp rank %llu, not the "
        "target dp rank %llu",
        participant, (unsigned long long)plan->part->rank.dp,
        (unsigned long long)dp);
  }
  return RESHARD_OK;
}

static bool stop_requested(const reshard_load_request *request) {
  return request->should_stop != NULL &&
         request->should_stop(request->should_stop_context);
}

static reshard_status deadline(planner *plan) {
  return reshard_error_set(plan->err, RESHARD_DEADLINE_EXCEEDED,
                           "plan: abandoned, the call's deadline passed");
}

/* Pass 1: the hit prefix, its sources, and what lowering it will cost, all
 * before any copy is materialised. */
static reshard_status select_and_count(planner *plan, reshard_load_plan *out,
                                       uint64_t *largest_page) {
  const reshard_load_request *request = plan->request;
  uint64_t page_size = request->placement->descriptor.page_size;
  uint64_t total_copies = 0, total_bytes = 0;
  *largest_page = 0;
  for (uint64_t page = 0; page < request->page_count; page++) {
    if (request->page_source_start[page] ==
        request->page_source_start[page + 1]) {
      break;
    }
    if (stop_requested(request)) {
      return deadline(plan);
    }
    reshard__cursor_advance(&plan->cursor, page * page_size,
                            (page + 1) * page_size);
    size_t source;
    reshard_status status = choose_source(plan, page, &source);
    if (status) {
      return status;
    }
    if (source == SIZE_MAX) {
      break;
    }
    const reshard_join *join = NULL;
    if ((status = source_join(plan, source, &join))) {
      return status;
    }
    reshard__page_lowering lowering = page_lowering(plan, join, page);
    reshard__page_cost cost = reshard__lower_count(&lowering);
    if (!reshard_add(total_copies, cost.copies, &total_copies) ||
        total_copies > request->limits.max_operations) {
      return reshard_error_set(
          plan->err, RESHARD_RESOURCE_EXHAUSTED,
          "plan: more than the limit max_operations %llu copies (before "
          "coalescing) by page %llu",
          (unsigned long long)request->limits.max_operations,
          (unsigned long long)page);
    }
    if (!reshard_add(total_bytes, cost.bytes, &total_bytes) ||
        total_bytes > request->limits.max_bytes) {
      return reshard_error_set(
          plan->err, RESHARD_RESOURCE_EXHAUSTED,
          "plan: more than the limit max_bytes %llu bytes by page %llu",
          (unsigned long long)request->limits.max_bytes,
          (unsigned long long)page);
    }
    if (cost.copies > *largest_page) {
      *largest_page = cost.copies;
    }
    plan->page_bytes[page] = cost.bytes;
    out->page_source[page] = source;
    out->hit_pages = page + 1;
  }
  out->copies_before_coalescing = total_copies;
  out->bytes = total_bytes;
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
static reshard_status fold_batched(planner *plan, batch_sinks *sinks) {
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
static reshard_status encode_batched(planner *plan, batch_sinks *sinks) {
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
static reshard_status drain_batched(planner *plan, batch_sinks *sinks) {
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
static reshard_status batch_stretch(planner *plan, const reshard_run *group,
                                    size_t width, uint64_t row, uint64_t rows,
                                    size_t column, batch_sinks *sinks) {
  /* The stretch as a group of its own: the sequences from `row` on, or
   * the single copies of one row from `column` on. */
  reshard__batcher *batcher = sinks->batcher;
  size_t first = rows == 1 ? column : 0;
  size_t stretch_width = width - first;
  bool whole = row == 0 && rows == group->count;
  if (!whole && plan->stretch == NULL &&
      (plan->stretch = RESHARD_ARENA_ARRAY(
           plan->arena, reshard_run, plan->sequence_scratch.room)) == NULL) {
    return no_memory(plan);
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

/* Batches a page lowered as sequences, a group at a time where a group
 * fits the open batch and in stretches of whole rows (or of one row's
 * copies) where a batch closes inside it. A page that could fill a
 * batch's byte budget goes through `scratch` and the batcher copy by copy
 * (a copy may be split there). */
static reshard_status batch_sequences(planner *plan,
                                      const reshard__page_sequences *sequences,
                                      uint64_t page_bytes, batch_sinks *sinks,
                                      reshard_copy *scratch) {
  reshard__batcher *batcher = sinks->batcher;
  const reshard__batching *limits = &batcher->limits;
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
      uint64_t rows = column == 0 ? room / width : 0;
      if (rows > count - row) {
        rows = count - row;
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
static reshard_status lower_pages(planner *plan, reshard_load_plan *out,
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
    return no_memory(plan);
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
    return no_memory(plan);
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
    if (stop_requested(request)) {
      return deadline(plan);
    }
    reshard__cursor_advance(&plan->cursor, page * page_size,
                            (page + 1) * page_size);
    const reshard_join *join = plan->joins[out->page_source[page]];
    reshard__page_lowering lowering = page_lowering(plan, join, page);
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
      status = batch_sequences(plan, &sequences, plan->page_bytes[page], &sinks,
                               coalesced);
    } else {
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

static reshard_status plan_load(planner *plan, reshard_load_plan *out) {
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
    return no_memory(plan);
  }
  const reshard_descriptor *descriptor = &request->placement->descriptor;
  plan->head_bytes[0] = reshard_head_bytes(descriptor, RESHARD_COMPONENT_KEY);
  plan->head_bytes[1] = reshard_head_bytes(descriptor, RESHARD_COMPONENT_VALUE);
  if (request->bound_binding != NULL) {
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
  if ((status = reshard__cursor_init(&plan->cursor, &plan->binding, plan->arena,
                                     plan->err))) {
    return status;
  }
  uint64_t largest_page = 0;
  if ((status = select_and_count(plan, out, &largest_page))) {
    return status;
  }
  return lower_pages(plan, out, largest_page);
}

reshard_status reshard_plan_load(const reshard_load_request *request,
                                 reshard_arena *arena, reshard_load_plan *out,
                                 reshard_error *err) {
  memset(out, 0, sizeof *out);
  size_t sources = request->source_count;
  planner plan = {
      .request = request,
      .keep_copies =
          !(request->omit_copies && (request->runs || request->varint_columns)),
      .arena = arena,
      .err = err,
      .joins = RESHARD_ARENA_NEW(arena, const reshard_join *, sources + 1),
      .built = RESHARD_ARENA_NEW(arena, reshard_join *, sources + 1),
  };
  if (plan.joins == NULL || plan.built == NULL) {
    return no_memory(&plan);
  }
  for (size_t s = 0; s < sources; s++) {
    plan.joins[s] = request->sources[s].join;
  }
  reshard_status status = plan_load(&plan, out);
  free(plan.trial_copies);
  free(plan.trial_out);
  free(plan.trial_keys);
  free(plan.trial_spare);
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
