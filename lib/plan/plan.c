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
 * page twice. A plan of at least REUSE_PAGES pages keeps a page's worth
 * of sequences (see lower_pages). */
enum { MAX_SEQUENCE_REFUSALS = 4, SEQUENCE_ROOM_DIVISOR = 4, REUSE_PAGES = 8 };

/* Where batched copies go besides the batcher: the run folder and the
 * column encoder, each NULL unless the plan asks for it, and how far each
 * has taken them (the encoder counts its rows itself). Pages lowered copy
 * by copy are drained from the batcher's copies; stretches of sequences
 * are folded and encoded as they are batched, before the drain. */
typedef struct batch_sinks {
  reshard__batcher *batcher;
  uint64_t stretch_bytes; /* bytes batch_stretch committed, in all */
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
 * that fits the open batch. The sinks take it as sequences; the copies
 * are written only when the plan keeps them. */
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
  /* Written out only for a sink that reads it: a page whose runs come
   * after it is batched (batch_cut_alone) needs only its bytes. */
  bool written = !whole && (plan->keep_copies || sinks->folder != NULL ||
                            sinks->encoder != NULL);
  if (written && plan->stretch == NULL &&
      (plan->stretch = RESHARD_ARENA_ARRAY(
           plan->arena, reshard_run, plan->sequence_scratch.room)) == NULL) {
    return reshard__plan_no_memory(plan);
  }
  reshard_run *scratch = plan->stretch;
  const reshard_run *stretch = whole ? group : scratch;
  uint64_t bytes = 0;
  for (size_t s = 0; s < stretch_width; s++) {
    const reshard_run *sequence = &group[first + s];
    if (written) {
      scratch[s] = (reshard_run){reshard_run_copy(sequence, row), rows,
                                 rows > 1 ? sequence->part_stride : 0,
                                 rows > 1 ? sequence->region_stride : 0};
    }
    bytes += rows * sequence->first.nbytes;
  }
  if (plan->keep_copies) {
    reshard__group_expand(stretch, stretch_width,
                          batcher->out + batcher->written, plan->stream_copies);
  }
  reshard__batcher_commit(batcher, (size_t)rows * stretch_width, bytes);
  sinks->stretch_bytes += bytes;
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

static reshard_status cut_templates_init(reshard__planner *plan);
static bool template_shift(reshard__planner *plan, const uint64_t *offsets,
                           const reshard__page_sequences *sequences);

/* Whether page `sequences`, wholly inside the open batch and the page
 * before it shifted, may take the runs of the last whole page folded
 * (plan->whole_template): every page since was the one before it
 * shifted (same chain), so its sequences are that page's but for their
 * page and region offsets, and each region moved by one amount; then
 * plan->cut_shift holds the amounts. A whole page's fold depends only on
 * its copies (a run's class includes its page), not on where in its
 * batch it lies. */
static bool whole_template_applies(reshard__planner *plan,
                                   const reshard__page_sequences *sequences) {
  return sequences->shifted && plan->whole_template.valid &&
         plan->whole_template.chain == plan->cut_chain &&
         plan->whole_template.count == sequences->count &&
         template_shift(plan, plan->whole_template.region_offsets, sequences);
}

/* Keeps page `sequences`, just folded into runs [first, end) wholly
 * inside one batch, as plan->whole_template. */
static reshard_status
whole_template_record(reshard__planner *plan,
                      const reshard__page_sequences *sequences, size_t first,
                      size_t end) {
  reshard_status status = cut_templates_init(plan);
  if (status) {
    return status;
  }
  if (plan->whole_template.room < sequences->count) {
    /* Pages of one shape reuse it. */
    plan->whole_template.valid = false;
    plan->whole_template.region_offsets =
        RESHARD_ARENA_ARRAY(plan->arena, uint64_t, sequences->count);
    if (plan->whole_template.region_offsets == NULL) {
      return reshard__plan_no_memory(plan);
    }
    plan->whole_template.room = sequences->count;
  }
  for (size_t i = 0; i < sequences->count; i++) {
    plan->whole_template.region_offsets[i] =
        sequences->sequences[i].first.region_offset;
  }
  plan->whole_template.valid = true;
  plan->whole_template.chain = plan->cut_chain;
  plan->whole_template.first = first;
  plan->whole_template.end = end;
  plan->whole_template.count = sequences->count;
  return RESHARD_OK;
}

/* Folds page `sequences`, wholly inside the open batch: its runs written
 * as they are when its sequences are runs of their own, else its groups
 * folded. */
static reshard_status fold_whole_page(reshard__planner *plan,
                                      const reshard__page_sequences *sequences,
                                      reshard__run_folder *folder) {
  if (reshard__run_folder_alone(folder, sequences, UINT64_MAX, 0,
                                sequences->shape)) {
    reshard__run_folder_alone_piece(folder, sequences, 0, sequences->copies);
    return RESHARD_OK;
  }
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
  return RESHARD_OK;
}

/* Batches page `page`, lowered as sequences, when it fits the open batch
 * whole: what batching it group by group does, since the batch can close
 * only at its last copy. Its runs are the page before's moved when this
 * page is that one shifted one amount per region and that one was folded
 * whole too, else the last whole page's folded in the same chain
 * (whole_template_applies: pages cut by batches may lie between); else
 * its groups are folded, and its runs become the template for the next
 * page and for later whole pages of its chain. */
static reshard_status batch_whole_page(reshard__planner *plan,
                                       const reshard__page_sequences *sequences,
                                       uint64_t page, uint64_t page_bytes,
                                       batch_sinks *sinks,
                                       reshard_load_plan *out) {
  reshard__batcher *batcher = sinks->batcher;
  if (plan->keep_copies) {
    reshard__page_sequences_expand(sequences, batcher->out + batcher->written,
                                   plan->stream_copies);
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
    } else if (whole_template_applies(plan, sequences)) {
      reshard__run_folder_shifted(folder, plan->whole_template.first,
                                  plan->whole_template.end, page,
                                  plan->cut_shift, sequences->copies);
      out->run_template_pages++;
    } else {
      reshard_status status = fold_whole_page(plan, sequences, folder);
      if (status == RESHARD_OK) {
        status = whole_template_record(plan, sequences, first_run,
                                       folder->run_count);
      }
      if (status) {
        return status;
      }
    }
    plan->run_template.page = page;
    plan->run_template.first = first_run;
    plan->run_template.end = folder->run_count;
    plan->run_template.valid = true;
    sinks->folded_copies = batcher->written;
  }
  if (sinks->encoder != NULL) {
    reshard__column_encoder_page(sinks->encoder, sequences, page);
  }
  return drain_batched(plan, sinks);
}

/* Runs of a page cut by batch boundaries, as a template. Such a page's
 * fold is the fold of each of its pieces (the copies it has in one
 * batch) alone, a run's class including its page; a later page that is
 * it shifted one amount per region, and starts at the same place in its
 * batch (copies and bytes), is cut into the same pieces, so its runs are
 * these moved (reshard__run_folder_shifted). S2's pages span two and a
 * half batches: every other page starts where one did. */
enum { CUT_TEMPLATES = 4, CUT_PIECES = 8, CUT_MISSES = 2 * CUT_TEMPLATES };

typedef struct cut_piece {
  uint64_t copies, bytes;
  size_t run_first, run_end; /* its runs in the folder */
} cut_piece;

struct reshard__cut_template {
  bool valid;
  uint64_t chain;                  /* plan->cut_chain when it was recorded */
  uint64_t batch_ops, batch_bytes; /* where the page started */
  size_t count;                    /* its sequences */
  uint64_t *region_offsets;        /* each sequence's first, in order */
  size_t region_room;              /* entries region_offsets holds */
  size_t piece_count;
  cut_piece pieces[CUT_PIECES];
};

/* A cut page's template while its pieces are recorded: the piece that
 * began at copy `piece_start` (the batcher's count), `piece_bytes` (the
 * sinks' stretch bytes) and run `piece_runs`, and the batches closed so
 * far. `on` is false when the page is not recorded. */
typedef struct cut_recording {
  bool on;
  struct reshard__cut_template cut;
  size_t piece_start;
  uint64_t piece_bytes;
  size_t piece_runs;
  size_t closed;
} cut_recording;

/* Notes the piece of a cut page written since it began (copies, bytes and
 * runs) and starts the next one there; false when the template has no
 * room left for it, and the page is then not recorded. */
static bool cut_add_piece(cut_recording *recording,
                          const reshard__batcher *batcher,
                          const batch_sinks *sinks) {
  struct reshard__cut_template *cut = &recording->cut;
  if (cut->piece_count == CUT_PIECES) {
    return false;
  }
  cut->pieces[cut->piece_count++] = (cut_piece){
      batcher->written - recording->piece_start,
      sinks->stretch_bytes - recording->piece_bytes,
      recording->piece_runs,
      sinks->folder->run_count,
  };
  recording->piece_start = batcher->written;
  recording->piece_bytes = sinks->stretch_bytes;
  recording->piece_runs = sinks->folder->run_count;
  return true;
}

/* Whether pages cut by batches may take or leave templates: with runs
 * only (no copies to write, no columns to encode: those follow the
 * pieces' sequences). */
static bool cut_templates_apply(const reshard__planner *plan,
                                const batch_sinks *sinks) {
  return sinks->folder != NULL && sinks->encoder == NULL && !plan->keep_copies;
}

static reshard_status cut_templates_init(reshard__planner *plan) {
  if (plan->cut_templates != NULL) {
    return RESHARD_OK;
  }
  size_t regions = plan->sequence_scratch.memo.region_count + 1;
  plan->cut_templates = RESHARD_ARENA_NEW(
      plan->arena, struct reshard__cut_template, CUT_TEMPLATES);
  plan->cut_shift = RESHARD_ARENA_ARRAY(plan->arena, uint64_t, regions);
  plan->cut_mark = RESHARD_ARENA_NEW(plan->arena, uint64_t, regions);
  if (plan->cut_templates == NULL || plan->cut_shift == NULL ||
      plan->cut_mark == NULL) {
    return reshard__plan_no_memory(plan);
  }
  return RESHARD_OK;
}

/* Whether each region of page `sequences` moved by one amount, as an
 * integer (the modular difference and its sign), from a page of the same
 * sequences whose first region offsets were `offsets`: then
 * plan->cut_shift holds each region's amount. */
static bool template_shift(reshard__planner *plan, const uint64_t *offsets,
                           const reshard__page_sequences *sequences) {
  uint64_t serial = ++plan->cut_serial;
  for (size_t i = 0; i < sequences->count; i++) {
    const reshard_copy *first = &sequences->sequences[i].first;
    uint64_t now = first->region_offset;
    uint64_t then = offsets[i];
    uint64_t shift = now - then;
    uint64_t mark = serial << 1 | (uint64_t)(now < then);
    uint64_t region = first->region_index;
    if (plan->cut_mark[region] >> 1 != serial) {
      plan->cut_mark[region] = mark;
      plan->cut_shift[region] = shift;
    } else if (plan->cut_mark[region] != mark ||
               plan->cut_shift[region] != shift) {
      return false;
    }
  }
  return true;
}

/* The template that page `sequences` may take at the open batch's place,
 * with plan->cut_shift set to each region's shift from it; NULL when
 * none. Every page since the template's was the one before it shifted
 * (same chain), so the sequences are the template's but for their page
 * and region offsets; whether each region moved by one amount, as an
 * integer (the modular difference and its sign), is checked here. */
static const struct reshard__cut_template *
cut_template_find(reshard__planner *plan,
                  const reshard__page_sequences *sequences,
                  const reshard__batcher *batcher) {
  const struct reshard__cut_template *found = NULL;
  for (size_t t = 0; t < CUT_TEMPLATES; t++) {
    const struct reshard__cut_template *template = &plan->cut_templates[t];
    if (template->valid && template->chain == plan->cut_chain &&
        template->batch_ops == batcher->batch_ops &&
        template->batch_bytes == batcher->batch_bytes &&
        template->count == sequences->count) {
      found = template;
      break;
    }
  }
  if (found == NULL ||
      !template_shift(plan, found->region_offsets, sequences)) {
    return NULL;
  }
  return found;
}

/* Batches page `page` as the template's pieces, each piece's runs moved
 * by one amount per region (plan->cut_shift, cut_template_find); its
 * copies committed, the batch closed where the template's was. */
static reshard_status
cut_template_take(reshard__planner *plan,
                  const struct reshard__cut_template *template, uint64_t page,
                  batch_sinks *sinks) {
  for (size_t i = 0; i < template->piece_count; i++) {
    const cut_piece *piece = &template->pieces[i];
    reshard__run_folder_shifted(sinks->folder, piece->run_first, piece->run_end,
                                page, plan->cut_shift, piece->copies);
    reshard__batcher_commit(sinks->batcher, (size_t)piece->copies,
                            piece->bytes);
    sinks->folded_copies = sinks->batcher->written;
    reshard_status status = drain_batched(plan, sinks);
    if (status) {
      return status;
    }
  }
  return RESHARD_OK;
}

/* Keeps `cut`, page `sequences` just recorded, among the cut templates:
 * in the slot of a template that started at the same place in its batch,
 * else in the next slot in turn. */
static reshard_status
cut_template_keep(reshard__planner *plan,
                  const reshard__page_sequences *sequences,
                  struct reshard__cut_template *cut) {
  size_t slot = plan->cut_next;
  for (size_t t = 0; t < CUT_TEMPLATES; t++) {
    const struct reshard__cut_template *held = &plan->cut_templates[t];
    if (held->valid && held->batch_ops == cut->batch_ops &&
        held->batch_bytes == cut->batch_bytes) {
      slot = t;
      break;
    }
  }
  if (slot == plan->cut_next) {
    plan->cut_next = (plan->cut_next + 1) % CUT_TEMPLATES;
  }
  struct reshard__cut_template *template = &plan->cut_templates[slot];
  cut->region_offsets = template->region_offsets;
  cut->region_room = template->region_room;
  if (cut->region_room < sequences->count) {
    /* A page's sequences, not its copies: S2's 160, where the sequence
     * scratch holds a page's 10 256. Pages of one shape reuse it. */
    cut->region_offsets =
        RESHARD_ARENA_ARRAY(plan->arena, uint64_t, sequences->count);
    if (cut->region_offsets == NULL) {
      return reshard__plan_no_memory(plan);
    }
    cut->region_room = sequences->count;
  }
  for (size_t i = 0; i < sequences->count; i++) {
    cut->region_offsets[i] = sequences->sequences[i].first.region_offset;
  }
  cut->valid = true;
  *template = *cut;
  return RESHARD_OK;
}

/* Batches the groups of page `sequences`, cut by batches: a group at a
 * time where it fits the open batch, else in stretches of whole rows (or
 * of one row's copies). With `recording` on, each batch closed ends a
 * piece of its template. */
static reshard_status batch_groups(reshard__planner *plan,
                                   const reshard__page_sequences *sequences,
                                   batch_sinks *sinks,
                                   cut_recording *recording) {
  reshard__batcher *batcher = sinks->batcher;
  const reshard__batching *limits = &batcher->limits;
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
      if (recording != NULL && recording->on &&
          batcher->batch_count != recording->closed) {
        /* A batch closed at the end of this stretch (a stretch fits the
         * open batch): a piece ends. */
        recording->on = cut_add_piece(recording, batcher, sinks);
        recording->closed = batcher->batch_count;
      }
    }
    first = end;
  }
  return RESHARD_OK;
}

/* Batches page `sequences`, cut by batches, whose sequences are runs of
 * their own (reshard__run_folder_alone): its copies first, with no folder
 * to take them, then its runs piece by piece, each batch closed where
 * the batcher closed it. Cheaper than a template: no class is looked up,
 * no run copied twice. */
static reshard_status batch_cut_alone(reshard__planner *plan,
                                      const reshard__page_sequences *sequences,
                                      batch_sinks *sinks) {
  reshard__batcher *batcher = sinks->batcher;
  reshard__run_folder *folder = sinks->folder;
  size_t page_first = batcher->written;
  size_t closed = batcher->batch_count;
  sinks->folder = NULL;
  reshard_status status = batch_groups(plan, sequences, sinks, NULL);
  sinks->folder = folder;
  if (status) {
    return status;
  }
  uint64_t from = 0;
  for (size_t b = closed; b < batcher->batch_count; b++) {
    const reshard_batch *batch = &batcher->batches[b];
    uint64_t to = batch->first + batch->count - page_first;
    reshard__run_folder_alone_piece(folder, sequences, from, to);
    reshard__run_folder_close(folder);
    from = to;
  }
  reshard__run_folder_alone_piece(folder, sequences, from, sequences->copies);
  sinks->folded_batches = batcher->batch_count;
  sinks->folded_copies = batcher->written;
  return RESHARD_OK;
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
  if (!sequences->shifted) {
    /* Not the page before moved: templates of earlier pages are not it
     * moved either. */
    plan->cut_chain++;
  }
  if (reshard__batcher_fits(batcher, (size_t)sequences->copies, page_bytes)) {
    return batch_whole_page(plan, sequences, page, page_bytes, sinks, out);
  }
  /* Runs split across batches are no whole page's template. */
  plan->run_template.valid = false;
  if (page_bytes > limits->max_bytes - batcher->batch_bytes) {
    reshard__page_sequences_expand(sequences, scratch, false);
    reshard__batcher_push(batcher, scratch, (size_t)sequences->copies);
    return drain_batched(plan, sinks);
  }
  /* A page whose sequences are runs of their own is batched first, its
   * runs then written piece by piece where the batches cut it. */
  uint64_t max_ops = limits->max_operations;
  if (sinks->folder != NULL &&
      reshard__run_folder_alone(sinks->folder, sequences,
                                max_ops - batcher->batch_ops, max_ops,
                                sequences->shape)) {
    return batch_cut_alone(plan, sequences, sinks);
  }
  /* A page cut by batches: its runs are an earlier page's moved when
   * that one started at the same place in its batch, else it may become
   * such a template, its pieces noted as the batches close. */
  cut_recording recording = {
      .piece_start = batcher->written,
      .piece_bytes = sinks->stretch_bytes,
      .closed = batcher->batch_count,
  };
  if (cut_templates_apply(plan, sinks)) {
    reshard_status status = cut_templates_init(plan);
    if (status) {
      return status;
    }
    if (sequences->shifted) {
      const struct reshard__cut_template *template =
          cut_template_find(plan, sequences, batcher);
      if (template != NULL) {
        out->run_template_cut_pages++;
        plan->cut_misses = 0;
        return cut_template_take(plan, template, page, sinks);
      }
    }
    /* Pages whose places in their batches do not repeat within a few
     * stop leaving templates that no page takes. */
    recording.on = plan->cut_misses < CUT_MISSES;
    plan->cut_misses += recording.on;
    recording.cut = (struct reshard__cut_template){
        .chain = plan->cut_chain,
        .batch_ops = batcher->batch_ops,
        .batch_bytes = batcher->batch_bytes,
        .count = sequences->count,
    };
    recording.piece_runs = sinks->folder->run_count;
  }
  reshard_status status = batch_groups(plan, sequences, sinks, &recording);
  if (status) {
    return status;
  }
  if (recording.on && batcher->written > recording.piece_start) {
    recording.on = cut_add_piece(&recording, batcher, sinks);
  }
  if (recording.on) {
    return cut_template_keep(plan, sequences, &recording.cut);
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
  plan->stream_copies =
      plan->keep_copies &&
      max_copies >= RESHARD__STREAM_COPIES_MIN_BYTES / sizeof(reshard_copy);
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
  if (plan->cursor.pooled != NULL || out->hit_pages >= REUSE_PAGES) {
    /* Over a pool, and over a paged binding, the next page is usually
     * this one with other blocks: its sequences, even one per copy (S5's
     * 62), are kept to be shifted rather than lowered and sorted again.
     * A page's worth of scratch, which over REUSE_PAGES pages or more
     * stays a fraction of the plan's copies. */
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
  /* One amount per region, to tell when a shifted page is the last one
   * moved (reshard__sequence_memo.uniform). */
  reshard__sequence_memo *memo = &sequence->memo;
  memo->region_count = plan->cursor.binding->region_count;
  memo->region_shift =
      RESHARD_ARENA_ARRAY(plan->arena, uint64_t, memo->region_count + 1);
  memo->region_mark =
      RESHARD_ARENA_NEW(plan->arena, uint64_t, memo->region_count + 1);
  if (!memo->region_shift || !memo->region_mark) {
    return reshard__plan_no_memory(plan);
  }
  if (plan->cursor.pooled != NULL) {
    const reshard_bound_pool *pool = plan->cursor.pooled->pool;
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
    /* A page meets at most page_size / block_size + 2 blocks (one more
     * where it starts inside one); the fast shift needs one amount each
     * and a page block per range ordinal (a uint32_t: pages of more
     * blocks take the slow shift). */
    if (memo->one_stride) {
      uint64_t blocks = page_size / pool->block_size + 2;
      uint64_t room = sequence_room < UINT32_MAX ? sequence_room : UINT32_MAX;
      memo->block_room = (size_t)(blocks < room ? blocks : room);
      memo->block_shift =
          RESHARD_ARENA_ARRAY(plan->arena, uint64_t, memo->block_room);
      memo->ordinal_block =
          RESHARD_ARENA_ARRAY(plan->arena, uint32_t, sequence_room);
      if (!memo->block_shift || !memo->ordinal_block) {
        return reshard__plan_no_memory(plan);
      }
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
      plan->cut_chain++;
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
  if (plan->stream_copies) {
    reshard__stream_fence();
  }
  if (request->runs) {
    reshard__run_folder_finish(&folder, &out->runs);
  }
  if (request->varint_columns) {
    out->columns = encoder.out;
    out->column_template_pages = encoder.template_pages;
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
  plan->page_alike =
      RESHARD_ARENA_NEW(plan->arena, bool, (size_t)request->page_count);
  if (out->page_source == NULL || plan->page_bytes == NULL ||
      plan->page_alike == NULL) {
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
