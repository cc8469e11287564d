/* Reader memory for the oracle (oracle.h): valid runtime bindings in
 * every memory style (contiguous, paged with blocks smaller or larger
 * than the store page, HND, padded, interleaved), scattered over
 * regions with fake addresses. */
#include "oracle_internal.h"

#include <inttypes.h>

/* ------------------------------------------------------------------ */
/* Runtime bindings                                                    */
/* ------------------------------------------------------------------ */

const char *oracle_memory_style_name(oracle_memory_style style) {
  switch (style) {
  case ORACLE_MEM_CONTIGUOUS:
    return "contiguous";
  case ORACLE_MEM_PAGED_SMALL:
    return "paged-small";
  case ORACLE_MEM_PAGED_LARGE:
    return "paged-large";
  case ORACLE_MEM_HND:
    return "hnd";
  case ORACLE_MEM_PADDED:
    return "padded";
  case ORACLE_MEM_INTERLEAVED:
    return "interleaved";
  }
  return "?";
}

typedef struct chunk {
  uint64_t size;
  size_t first_range;
  size_t range_count;
} chunk;

typedef struct builder {
  oracle_rng *rng;
  const reshard_descriptor *desc;
  const reshard_placement_part *part;
  uint64_t itemsize;
  bool padded;
  reshard_binding_range *ranges;
  size_t range_count, range_capacity;
  chunk *chunks;
  size_t chunk_count, chunk_capacity;
} builder;

static void builder_add_range(builder *b, uint64_t layer, reshard_component c,
                              uint64_t t0, uint64_t nt, uint64_t h0,
                              uint64_t nh, uint64_t offset, uint64_t ts,
                              uint64_t hs) {
  if (b->range_count == b->range_capacity) {
    b->range_capacity = b->range_capacity ? b->range_capacity * 2 : 64;
    b->ranges = realloc(b->ranges, b->range_capacity * sizeof *b->ranges);
    if (b->ranges == NULL) {
      die("out of memory");
    }
  }
  reshard_binding_range *r = &b->ranges[b->range_count++];
  memset(r, 0, sizeof *r);
  r->global_layer_id = layer;
  r->component = c;
  r->token_start = t0;
  r->token_count = nt;
  r->head_start = h0;
  r->head_count = nh;
  r->offset_bytes = offset; /* relative to the chunk for now */
  r->token_stride_bytes = ts;
  r->head_stride_bytes = hs;
}

static void builder_begin_chunk(builder *b) {
  if (b->chunk_count == b->chunk_capacity) {
    b->chunk_capacity = b->chunk_capacity ? b->chunk_capacity * 2 : 64;
    b->chunks = realloc(b->chunks, b->chunk_capacity * sizeof *b->chunks);
    if (b->chunks == NULL) {
      die("out of memory");
    }
  }
  chunk *c = &b->chunks[b->chunk_count++];
  c->size = 0;
  c->first_range = b->range_count;
  c->range_count = 0;
}

static void builder_end_chunk(builder *b, uint64_t size) {
  chunk *c = &b->chunks[b->chunk_count - 1];
  c->size = size;
  c->range_count = b->range_count - c->first_range;
}

/* A random padding of 0..max_units itemsizes when padding is on. */
static uint64_t builder_pad(builder *b, uint64_t max_units) {
  if (!b->padded || max_units == 0) {
    return 0;
  }
  return oracle_rng_between(b->rng, 0, max_units) * b->itemsize;
}

/* One NHD block [token, head, dim] of `block` token slots holding tokens
 * [t0, t0+nt) of (layer, c) at `base` within the current chunk; the
 * participant's heads may be described by several ranges sharing the row.
 * Returns the bytes used. */
static uint64_t builder_nhd_heads(builder *b, uint64_t layer,
                                  reshard_component c, uint64_t t0, uint64_t nt,
                                  uint64_t block, uint64_t base, uint64_t h0,
                                  uint64_t hc) {
  uint64_t hb = head_bytes(b->desc, c);
  uint64_t hs = hb + builder_pad(b, 2);
  uint64_t ts = (hc - 1) * hs + hb + builder_pad(b, 3);
  size_t pieces = 1;
  if (b->padded && hc > 1 && oracle_rng_chance(b->rng, 40)) {
    pieces = (size_t)oracle_rng_between(b->rng, 2, hc);
  }
  uint64_t sizes[64];
  uint64_t *piece_sizes = pieces <= 64 ? sizes : xmalloc(pieces * 8);
  oracle_split_sizes(b->rng, hc, pieces, 1, piece_sizes);
  uint64_t h = h0;
  for (size_t p = 0; p < pieces; p++) {
    builder_add_range(b, layer, c, t0, nt, h, piece_sizes[p],
                      base + (h - h0) * hs, ts, hs);
    h += piece_sizes[p];
  }
  if (piece_sizes != sizes) {
    free(piece_sizes);
  }
  return block * ts;
}

static uint64_t builder_nhd_block(builder *b, uint64_t layer,
                                  reshard_component c, uint64_t t0, uint64_t nt,
                                  uint64_t block, uint64_t base) {
  return builder_nhd_heads(b, layer, c, t0, nt, block, base,
                           b->part->head_start, b->part->head_count);
}

/* Every head piece of (layer, c) gets its own token blocking, so head
 * intervals of different ranges split at different tokens. */
static void builder_independent_heads(builder *b, uint64_t layer,
                                      reshard_component c, uint64_t span) {
  uint64_t hc = b->part->head_count;
  size_t pieces = (size_t)oracle_rng_between(b->rng, 2, hc);
  uint64_t sizes[64];
  uint64_t *piece_sizes = pieces <= 64 ? sizes : xmalloc(pieces * 8);
  oracle_split_sizes(b->rng, hc, pieces, 1, piece_sizes);
  uint64_t h = b->part->head_start;
  for (size_t p = 0; p < pieces; p++) {
    uint64_t block = oracle_rng_between(b->rng, 1, 2 * b->desc->page_size);
    for (uint64_t t0 = 0; t0 < span; t0 += block) {
      uint64_t nt = min_u64(block, span - t0);
      builder_begin_chunk(b);
      builder_end_chunk(b, builder_nhd_heads(b, layer, c, t0, nt, block, 0, h,
                                             piece_sizes[p]));
    }
    h += piece_sizes[p];
  }
  if (piece_sizes != sizes) {
    free(piece_sizes);
  }
}

/* One HND block [head, token, dim]: one range per head. */
static uint64_t builder_hnd_block(builder *b, uint64_t layer,
                                  reshard_component c, uint64_t t0, uint64_t nt,
                                  uint64_t block, uint64_t base) {
  uint64_t hb = head_bytes(b->desc, c);
  uint64_t h0 = b->part->head_start, hc = b->part->head_count;
  uint64_t ts = hb + builder_pad(b, 2);
  uint64_t head_block = block * ts + builder_pad(b, 4);
  for (uint64_t j = 0; j < hc; j++) {
    /* head_count is 1, so the head stride only has to be >= hb */
    uint64_t hs = hb + builder_pad(b, 5);
    builder_add_range(b, layer, c, t0, nt, h0 + j, 1, base + j * head_block, ts,
                      hs);
  }
  return hc * head_block;
}

void oracle_build_binding(oracle_rng *rng, reshard_arena *arena,
                          const reshard_descriptor *desc,
                          const reshard_placement_part *part,
                          uint64_t page_count, const oracle_memory_opts *opts,
                          reshard_binding *out) {
  builder b;
  memset(&b, 0, sizeof b);
  b.rng = rng;
  b.desc = desc;
  b.part = part;
  b.itemsize = desc->itemsize;
  uint64_t page = desc->page_size;
  uint64_t span = page_count * page;
  oracle_memory_style style = opts->style;
  b.padded = style == ORACLE_MEM_PADDED;

  uint64_t block = opts->block_tokens;
  if (block == 0) {
    switch (style) {
    case ORACLE_MEM_CONTIGUOUS:
      block = span;
      break;
    case ORACLE_MEM_PAGED_SMALL:
      if (page == 1) {
        block = 1;
      } else if (oracle_rng_chance(rng, 40) && page % 4 == 0) {
        block = page / 4;
      } else {
        block = oracle_rng_between(rng, 1, page - 1);
      }
      break;
    case ORACLE_MEM_PAGED_LARGE:
      block = oracle_rng_chance(rng, 40)
                  ? page * oracle_rng_between(rng, 2, 4)
                  : oracle_rng_between(rng, page + 1, 3 * page);
      break;
    case ORACLE_MEM_HND:
    case ORACLE_MEM_PADDED:
    case ORACLE_MEM_INTERLEAVED:
      block = oracle_rng_chance(rng, 20) ? span
                                         : oracle_rng_between(rng, 1, 2 * page);
      break;
    }
  }
  bool hnd = style == ORACLE_MEM_HND ||
             (style == ORACLE_MEM_PADDED && oracle_rng_chance(rng, 35));
  bool paged = style == ORACLE_MEM_PAGED_SMALL ||
               style == ORACLE_MEM_PAGED_LARGE || style == ORACLE_MEM_HND;

  unsigned ncomp = components_of(desc);
  uint64_t blocks = (span + block - 1) / block;
  bool layer_major = oracle_rng_chance(rng, 50);

  if (style == ORACLE_MEM_INTERLEAVED) {
    /* Token-major rows: every (layer, component) segment side by side. */
    size_t segs = part->layer_count * ncomp;
    size_t *order = xmalloc(segs * sizeof *order);
    for (size_t s = 0; s < segs; s++) {
      order[s] = s;
    }
    if (oracle_rng_chance(rng, 50)) {
      oracle_rng_shuffle(rng, order, segs, sizeof *order);
    }
    uint64_t *seg_off = xmalloc(segs * sizeof *seg_off);
    uint64_t row = 0;
    for (size_t k = 0; k < segs; k++) {
      size_t s = order[k];
      seg_off[s] = row;
      row += part->head_count * head_bytes(desc, component_at(s % ncomp));
    }
    for (uint64_t bi = 0; bi < blocks; bi++) {
      uint64_t t0 = bi * block, nt = min_u64(block, span - t0);
      builder_begin_chunk(&b);
      for (size_t s = 0; s < segs; s++) {
        reshard_component c = component_at(s % ncomp);
        builder_add_range(&b, part->layer_ids[s / ncomp], c, t0, nt,
                          part->head_start, part->head_count, seg_off[s], row,
                          head_bytes(desc, c));
      }
      builder_end_chunk(&b, block * row);
    }
    free(order);
    free(seg_off);
  } else if (layer_major) {
    /* One pool per (layer, component); every block its own chunk. */
    for (size_t li = 0; li < part->layer_count; li++) {
      for (unsigned ci = 0; ci < ncomp; ci++) {
        if (b.padded && !hnd && part->head_count > 1 &&
            oracle_rng_chance(rng, 40)) {
          builder_independent_heads(&b, part->layer_ids[li], component_at(ci),
                                    span);
          continue;
        }
        for (uint64_t bi = 0; bi < blocks; bi++) {
          uint64_t t0 = bi * block, nt = min_u64(block, span - t0);
          builder_begin_chunk(&b);
          uint64_t used =
              hnd ? builder_hnd_block(&b, part->layer_ids[li], component_at(ci),
                                      t0, nt, block, 0)
                  : builder_nhd_block(&b, part->layer_ids[li], component_at(ci),
                                      t0, nt, block, 0);
          builder_end_chunk(&b, used);
        }
      }
    }
  } else {
    /* Block-major: one chunk per block holding every (layer, component). */
    for (uint64_t bi = 0; bi < blocks; bi++) {
      uint64_t t0 = bi * block, nt = min_u64(block, span - t0);
      builder_begin_chunk(&b);
      uint64_t used = 0;
      for (size_t li = 0; li < part->layer_count; li++) {
        for (unsigned ci = 0; ci < ncomp; ci++) {
          used += builder_pad(&b, 3);
          used +=
              hnd ? builder_hnd_block(&b, part->layer_ids[li], component_at(ci),
                                      t0, nt, block, used)
                  : builder_nhd_block(&b, part->layer_ids[li], component_at(ci),
                                      t0, nt, block, used);
        }
      }
      builder_end_chunk(&b, used);
    }
  }

  /* Unused pool slots between the used ones. */
  if (paged && b.chunk_count > 0) {
    uint64_t holes = oracle_rng_between(rng, 0, min_u64(b.chunk_count, 8));
    uint64_t slot = b.chunks[0].size;
    for (uint64_t i = 0; i < holes; i++) {
      builder_begin_chunk(&b);
      builder_end_chunk(&b, slot);
    }
  }
  /* Scatter: chunks land in the regions in random order. */
  if (opts->scatter_in_runs) {
    oracle_rng_shuffle_in_runs(rng, b.chunks, b.chunk_count, sizeof *b.chunks);
  } else if (style != ORACLE_MEM_CONTIGUOUS || oracle_rng_chance(rng, 50)) {
    oracle_rng_shuffle(rng, b.chunks, b.chunk_count, sizeof *b.chunks);
  }

  size_t region_count = opts->region_count;
  if (region_count == 0) {
    if (style == ORACLE_MEM_PADDED || style == ORACLE_MEM_INTERLEAVED) {
      region_count = (size_t)oracle_rng_between(rng, 1, 3);
    } else {
      region_count = oracle_rng_chance(rng, 25) ? 2 : 1;
    }
  }
  uint64_t *cursor = xcalloc(region_count, sizeof *cursor);
  char **names = xcalloc(region_count, sizeof *names);
  for (size_t r = 0; r < region_count; r++) {
    names[r] =
        aprintf(arena, "region-%zu-%" PRIx64, r, oracle_rng_next(rng) & 0xfff);
  }
  reshard_binding_range *ranges = anew(arena, b.range_count, sizeof *ranges);
  size_t nr = 0;
  for (size_t ci = 0; ci < b.chunk_count; ci++) {
    const chunk *c = &b.chunks[ci];
    size_t r = region_count == 1
                   ? 0
                   : (size_t)oracle_rng_between(rng, 0, region_count - 1);
    cursor[r] += builder_pad(&b, 8);
    for (size_t k = 0; k < c->range_count; k++) {
      reshard_binding_range range = b.ranges[c->first_range + k];
      range.offset_bytes += cursor[r];
      range.region_id = names[r];
      ranges[nr++] = range;
    }
    cursor[r] += c->size;
  }
  oracle_rng_shuffle(rng, ranges, nr, sizeof *ranges);

  reshard_region *regions = anew(arena, region_count, sizeof *regions);
  for (size_t r = 0; r < region_count; r++) {
    regions[r].region_id = names[r];
    regions[r].address = ((uint64_t)(r + 1) << 32) +
                         oracle_rng_between(rng, 0, 64) * desc->itemsize;
    regions[r].nbytes = cursor[r] + builder_pad(&b, 5);
    if (regions[r].nbytes == 0) {
      regions[r].nbytes = desc->itemsize;
    }
  }
  oracle_rng_shuffle(rng, regions, region_count, sizeof *regions);

  memset(out, 0, sizeof *out);
  out->participant_id = part->participant_id;
  out->endpoint = "oracle://reader";
  out->regions = regions;
  out->region_count = region_count;
  out->ranges = ranges;
  out->range_count = nr;
  free(cursor);
  free(names);
  free(b.ranges);
  free(b.chunks);
}
