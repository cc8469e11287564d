/* Logical values and the bytes of every Part per format (SPEC §1.3):
 * each element encodes its identity (page, token, layer, head,
 * component, element), so a misplaced byte names where it came from
 * (oracle.h). */
#include "oracle_internal.h"

/* ------------------------------------------------------------------ */
/* Values and Part bytes                                               */
/* ------------------------------------------------------------------ */

uint64_t oracle_element_hash(uint64_t page, uint64_t token, uint64_t layer,
                             uint64_t head, reshard_component component,
                             uint64_t element) {
  uint64_t h = mix64(page * 0x9e3779b97f4a7c15ull + token + 0x632be59bd9b4e019);
  h = mix64(h ^ (layer * 0xd6e8feb86659fd93ull + head));
  return mix64(h ^ ((uint64_t)component * 0xa0761d6478bd642full + element));
}

/* Strides of SPEC §1.3's table for a shard of L layers, H heads, page P. */
static void format_strides(reshard_format f, uint64_t L, uint64_t P, uint64_t H,
                           uint64_t hb, uint64_t *layer_stride,
                           uint64_t *token_stride, uint64_t *head_stride) {
  switch (f) {
  case RESHARD_FORMAT_PLHD:
    *layer_stride = H * hb;
    *token_stride = L * H * hb;
    *head_stride = hb;
    return;
  case RESHARD_FORMAT_LPHD:
    *layer_stride = P * H * hb;
    *token_stride = H * hb;
    *head_stride = hb;
    return;
  case RESHARD_FORMAT_HPLD:
    *layer_stride = hb;
    *token_stride = L * hb;
    *head_stride = P * L * hb;
    return;
  }
  die("unknown format");
}

uint64_t oracle_part_size(const reshard_layout *layout, size_t part) {
  const reshard_descriptor *d = &layout->descriptor;
  const reshard_shard *s = &layout->shards[part];
  return s->layer_count * d->page_size * s->head_count *
         (head_bytes(d, RESHARD_COMPONENT_KEY) +
          head_bytes(d, RESHARD_COMPONENT_VALUE));
}

/* Offset of the fragment (shard, local layer, component) per SPEC §1.3. */
uint64_t oracle_fragment_offset(const reshard_layout *layout, size_t part,
                                size_t local_layer, reshard_component c,
                                uint64_t *token_stride, uint64_t *head_stride) {
  const reshard_descriptor *d = &layout->descriptor;
  const reshard_shard *s = &layout->shards[part];
  uint64_t L = s->layer_count, P = d->page_size, H = s->head_count;
  uint64_t hb = head_bytes(d, c), ls;
  format_strides(layout->format, L, P, H, hb, &ls, token_stride, head_stride);
  uint64_t key_block = L * P * H * head_bytes(d, RESHARD_COMPONENT_KEY);
  return local_layer * ls + (c == RESHARD_COMPONENT_VALUE ? key_block : 0);
}

void oracle_fill_part(const reshard_layout *layout, size_t part, uint64_t page,
                      uint8_t *out) {
  const reshard_descriptor *d = &layout->descriptor;
  const reshard_shard *s = &layout->shards[part];
  uint64_t P = d->page_size, itemsize = d->itemsize;
  for (unsigned ci = 0; ci < components_of(d); ci++) {
    reshard_component c = component_at(ci);
    uint64_t dim = component_dim(d, c);
    for (size_t l = 0; l < s->layer_count; l++) {
      uint64_t ts, hs;
      uint64_t base = oracle_fragment_offset(layout, part, l, c, &ts, &hs);
      for (uint64_t t = 0; t < P; t++) {
        for (uint64_t h = 0; h < s->head_count; h++) {
          uint8_t *v = out + base + t * ts + h * hs;
          for (uint64_t e = 0; e < dim; e++) {
            uint64_t hash = oracle_element_hash(page, t, s->layer_ids[l],
                                                s->head_start + h, c, e);
            for (uint64_t k = 0; k < itemsize; k++) {
              v[e * itemsize + k] = hash_byte(hash, k);
            }
          }
        }
      }
    }
  }
}

void oracle_build_page(const reshard_layout *layout, uint64_t page,
                       uint8_t **out) {
  for (size_t i = 0; i < layout->shard_count; i++) {
    out[i] = xmalloc((size_t)oracle_part_size(layout, i));
    oracle_fill_part(layout, i, page, out[i]);
  }
}
