/* Checks shared by the response encoders' tests
 * (test_plan_response.c, test_transfer_response.c): a measured response
 * written as pieces (range_batches.h) is byte for byte the response
 * written whole. */
#ifndef RESHARD_TEST_RESPONSE_PIECES_H
#define RESHARD_TEST_RESPONSE_PIECES_H

#include <criterion/criterion.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "wire/range_batches.h"

/* A response (`batches`, `want_size` bytes, written by `write`) as
 * pieces, with column payloads of at least `min_reference` bytes
 * referenced: the pieces in order are the bytes `want`, every byte not
 * referenced lies in the frame, which they fill exactly, and only payloads
 * that long lie outside it. A batch has six column payloads (five in a
 * TransferBatch), none when it has no copy. */
static void assert_same_pieces(const reshard_range_batches *batches,
                               const void *response,
                               reshard_response_pieces_fn *write,
                               const uint8_t *want, size_t want_size,
                               size_t min_reference) {
  size_t frame_size, room;
  reshard_response_measure_pieces(batches, want_size, min_reference,
                                  &frame_size, &room);
  uint8_t *frame = malloc(frame_size + 1);
  reshard_response_piece *pieces = malloc(room * sizeof *pieces);
  size_t count = write(response, min_reference, frame, pieces);
  cr_assert_leq(count, room);
  size_t at = 0, in_frame = 0, referenced = 0;
  for (size_t i = 0; i < count; i++) {
    size_t length = pieces[i].length;
    cr_assert_gt(length, 0, "piece %zu is empty", i);
    cr_assert_leq(at + length, want_size);
    cr_assert(memcmp(pieces[i].bytes, want + at, length) == 0,
              "piece %zu of %zu differs (minimum %zu)", i, count,
              min_reference);
    if (pieces[i].bytes >= frame &&
        pieces[i].bytes + length <= frame + frame_size) {
      in_frame += length;
    } else {
      cr_assert_geq(length, min_reference);
      referenced++;
    }
    at += length;
  }
  cr_assert_eq(at, want_size);
  cr_assert_eq(in_frame, frame_size);
  if (min_reference == 1 && batches->columns != NULL) {
    size_t payloads = batches->sources != NULL ? 5 : 6, filled = 0;
    for (size_t b = 0; b < batches->batch_count; b++) {
      filled += batches->batches[b].count > 0;
    }
    cr_assert_eq(referenced, payloads * filled,
                 "every column payload is referenced");
  }
  free(pieces);
  free(frame);
}

/* assert_same_pieces with every column, some, one in a thousand, none
 * referenced; and the pieces the daemon packs (reshard_response_pack_pieces,
 * its minimum reference) are the bytes `want` in order. */
static void assert_same_pieces_at_every_minimum(
    const reshard_range_batches *batches, const void *response,
    reshard_response_pieces_fn *write, const uint8_t *want, size_t want_size) {
  static const size_t minimums[] = {1, 16, 4096, SIZE_MAX};
  for (size_t m = 0; m < sizeof minimums / sizeof minimums[0]; m++) {
    assert_same_pieces(batches, response, write, want, want_size, minimums[m]);
  }
  reshard_arena arena;
  reshard_arena_init(&arena, 0);
  reshard_response_piece *pieces;
  size_t count, at = 0;
  cr_assert_eq(reshard_response_pack_pieces(batches, want_size, response, write,
                                            &arena, &arena, &pieces, &count),
               RESHARD_OK);
  for (size_t i = 0; i < count; i++) {
    cr_assert_leq(at + pieces[i].length, want_size);
    cr_assert(memcmp(pieces[i].bytes, want + at, pieces[i].length) == 0,
              "packed piece %zu of %zu differs", i, count);
    at += pieces[i].length;
  }
  cr_assert_eq(at, want_size);
  reshard_arena_destroy(&arena);
}

#endif
