/* Tests daemon/binding_decode.c against the path it replaces: the bounded
 * protobuf-c decode (reshard_decode) followed by
 * reshard_wire_binding_from_pb, on messages written by hand
 * (random_wire.h). */
#include <criterion/criterion.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "binding_compare.h"
#include "random_wire.h"
#include "reshard/v1/planner.pb-c.h"
#include "wire/binding_decode.h"
#include "wire/decode.h"
#include "wire/wire.h"

static reshard_arena arena;

static void setup(void) {
  reshard_arena_init(&arena, 0);
}

static void teardown(void) {
  reshard_arena_destroy(&arena);
}

TestSuite(binding_decode, .init = setup, .fini = teardown);

static void put_region(wire *w) {
  wire inner = {.length = 0};
  for (unsigned f = 0; f < 4; f++) {
    uint64_t field = 1 + below(3);
    if (field == 1) {
      put_text(&inner, 1);
    } else {
      put_tag(&inner, field, 0);
      put_varint(&inner, random_value());
    }
    put_noise(&inner, 3);
  }
  put_message(w, 3, &inner);
}

static void put_range(wire *w) {
  wire inner = {.length = 0};
  /* A component first: later ones are rare, so most ranges decode. */
  put_tag(&inner, 2, 0);
  put_varint(&inner, 1 + below(2));
  unsigned fields = (unsigned)below(14);
  for (unsigned f = 0; f < fields; f++) {
    uint64_t field = 1 + below(10);
    if (field == 2 && below(8) != 0) {
      field = 3;
    }
    if (field == 7) {
      put_text(&inner, 7);
    } else {
      put_tag(&inner, field, 0);
      put_varint(&inner, random_value());
    }
    put_noise(&inner, 10);
  }
  put_message(w, 4, &inner);
}

static void random_binding(wire *w) {
  w->length = 0;
  unsigned fields = (unsigned)below(40);
  for (unsigned f = 0; f < fields; f++) {
    switch (below(8)) {
    case 0:
      put_text(w, 1 + below(2));
      break;
    case 1:
    case 2:
      put_region(w);
      break;
    default:
      put_range(w);
      break;
    }
    put_noise(w, 4);
  }
}

typedef struct outcome {
  reshard_status status;
  reshard_error err;
  reshard_binding binding;
} outcome;

static outcome through_protobuf_c(const wire *w, const reshard_limits *caps) {
  outcome o;
  memset(&o, 0, sizeof o);
  ProtobufCMessage *message =
      reshard_decode(&reshard__v1__runtime_binding__descriptor, w->data,
                     w->length, UINT64_MAX, caps, &arena, &o.err);
  o.status = message == NULL ? o.err.code
                             : reshard_wire_binding_from_pb(
                                   (const Reshard__V1__RuntimeBinding *)message,
                                   "binding", &arena, &o.binding, &o.err);
  return o;
}

static outcome directly(const wire *w, const reshard_limits *caps) {
  outcome o;
  memset(&o, 0, sizeof o);
  o.status = reshard_binding_decode(w->data, w->length, "binding", caps,
                                    UINT64_MAX, &arena, &o.binding, &o.err);
  return o;
}

/* Equal bindings, or the same error code; the same message where both
 * paths name the rule in the same words (components, caps). A message both
 * over a cap and malformed may be refused for either (binding_decode.h). */
static void assert_same_outcome(const wire *w, const reshard_limits *caps,
                                unsigned *accepted, unsigned *refused) {
  outcome want = through_protobuf_c(w, caps);
  outcome got = directly(w, caps);
  bool either = want.status != RESHARD_OK && got.status != RESHARD_OK &&
                (strstr(want.err.message, "max_ranges") != NULL ||
                 strstr(got.err.message, "max_ranges") != NULL);
  if (either && got.status != want.status) {
    ++*refused;
    return;
  }
  cr_assert_eq(got.status, want.status,
               "protobuf-c: %d \"%s\"; direct: %d "
               "\"%s\"",
               want.status, want.err.message, got.status, got.err.message);
  if (want.status == RESHARD_OK) {
    char why[256];
    cr_assert(reshard_test_bindings_equal(&got.binding, &want.binding, why,
                                          sizeof why),
              "%s", why);
    ++*accepted;
    return;
  }
  ++*refused;
  if (strstr(want.err.message, "component") != NULL ||
      (strstr(want.err.message, "max_ranges") != NULL &&
       strstr(got.err.message, "max_ranges") != NULL)) {
    cr_assert_str_eq(got.err.message, want.err.message);
  }
}

/* `rounds` bindings from `build`, every other one mutated, every
 * `caps_every`-th (0: none) decoded under a max_ranges of `cap`: both
 * decoders must agree on each. Both kinds of outcome must be common, or
 * the comparison proves little. */
static void assert_agree(void (*build)(wire *), unsigned rounds,
                         unsigned caps_every, uint64_t cap,
                         unsigned min_refused) {
  reshard_limits small = reshard_limits_default();
  small.max_ranges = cap;
  unsigned accepted = 0, refused = 0;
  for (unsigned round = 0; round < rounds; round++) {
    wire w;
    build(&w);
    if (round % 2 == 1) {
      mutate(&w);
    }
    const reshard_limits *caps =
        caps_every != 0 && round % caps_every == 0 ? &small : NULL;
    assert_same_outcome(&w, caps, &accepted, &refused);
    if (round % 64 == 63) {
      reshard_arena_destroy(&arena);
      reshard_arena_init(&arena, 0);
    }
  }
  cr_assert_gt(accepted, 5000, "%u accepted", accepted);
  cr_assert_gt(refused, min_refused, "%u refused", refused);
}

Test(binding_decode, agrees_with_protobuf_c_on_random_and_mutated_bytes) {
  assert_agree(random_binding, 40000, 5, 6, 5000);
}

Test(binding_decode, ranges_of_one_region_share_its_string) {
  wire w = {.length = 0};
  for (int i = 0; i < 3; i++) {
    wire inner = {.length = 0};
    put_byte(&inner, 0x10); /* component */
    put_byte(&inner, 0x01);
    put_byte(&inner, 0x3a); /* region_id */
    put_byte(&inner, 0x03);
    put_byte(&inner, 'k');
    put_byte(&inner, 'v');
    put_byte(&inner, (uint8_t)(i < 2 ? '0' : '1'));
    put_message(&w, 4, &inner);
  }
  reshard_binding b;
  reshard_error err;
  cr_assert_eq(reshard_binding_decode(w.data, w.length, "binding", NULL,
                                      UINT64_MAX, &arena, &b, &err),
               RESHARD_OK);
  cr_assert_eq(b.range_count, 3);
  cr_assert_eq(b.ranges[0].region_id, b.ranges[1].region_id);
  cr_assert_str_eq(b.ranges[2].region_id, "kv1");
  cr_assert_str_eq(b.participant_id, "");
}

/* A range of component KEY in region `id` (`length` bytes), as encoders
 * write it: canonical, with a one-byte length, so the decoder reads it by
 * words. */
static void put_range_in(wire *w, const char *id, size_t length) {
  wire inner = {.length = 0};
  put_byte(&inner, 0x10); /* component */
  put_byte(&inner, 0x01);
  put_byte(&inner, 0x3a); /* region_id */
  put_byte(&inner, (uint8_t)length);
  for (size_t k = 0; k < length; k++) {
    put_byte(&inner, (uint8_t)id[k]);
  }
  put_byte(w, 0x22); /* ranges */
  put_byte(w, (uint8_t)inner.length);
  for (size_t k = 0; k < inner.length; k++) {
    put_byte(w, inner.data[k]);
  }
}

/* Ranges that name 300 regions in a random order, as a client that lists
 * its blocks from a hash map does: more ids than the decoder's table of
 * recent ones has slots, so ids share slots and evict each other. Each
 * range keeps its own region's id, one string per region. */
Test(binding_decode, ranges_in_any_order_share_their_regions_strings) {
  enum { REGIONS = 300, RANGES = 420 }; /* within a wire's 8 KiB */
  static wire w;
  static char ids[REGIONS][16];
  static size_t named[RANGES];
  w.length = 0;
  for (size_t r = 0; r < REGIONS; r++) {
    /* Short ids too, which the decoder fingerprints byte by byte. */
    snprintf(ids[r], sizeof ids[r], r % 3 == 0 ? "r%zu" : "region-%zu", r);
  }
  for (size_t i = 0; i < RANGES; i++) {
    named[i] = (size_t)below(REGIONS);
    put_range_in(&w, ids[named[i]], strlen(ids[named[i]]));
  }
  reshard_binding b;
  reshard_error err;
  cr_assert_eq(reshard_binding_decode(w.data, w.length, "binding", NULL,
                                      UINT64_MAX, &arena, &b, &err),
               RESHARD_OK, "%s", err.message);
  cr_assert_eq(b.range_count, RANGES);
  const char *first[REGIONS] = {NULL};
  for (size_t i = 0; i < RANGES; i++) {
    const char *got = b.ranges[i].region_id;
    cr_assert_str_eq(got, ids[named[i]], "range %zu", i);
    if (first[named[i]] == NULL) {
      first[named[i]] = got;
    }
    cr_assert_eq(got, first[named[i]], "range %zu: a second copy of \"%s\"", i,
                 got);
  }
}

/* Neighbouring ranges whose region ids have one length and differ in one
 * byte, anywhere, for every length up to 40: each range keeps its own. */
Test(binding_decode, neighbours_ids_that_differ_in_one_byte_stay_apart) {
  for (size_t length = 1; length <= 40; length++) {
    for (size_t differ = 0; differ < length; differ++) {
      wire w = {.length = 0};
      char ids[2][41];
      for (int i = 0; i < 2; i++) {
        memset(ids[i], 'r', length);
        ids[i][length] = '\0';
        ids[i][differ] = (char)('0' + i);
        put_range_in(&w, ids[i], length);
      }
      reshard_binding b;
      reshard_error err;
      cr_assert_eq(reshard_binding_decode(w.data, w.length, "binding", NULL,
                                          UINT64_MAX, &arena, &b, &err),
                   RESHARD_OK, "%s", err.message);
      cr_assert_eq(b.range_count, 2);
      cr_assert_str_eq(b.ranges[0].region_id, ids[0], "length %zu byte %zu",
                       length, differ);
      cr_assert_str_eq(b.ranges[1].region_id, ids[1], "length %zu byte %zu",
                       length, differ);
    }
  }
}

Test(binding_decode, refuses_past_its_budget) {
  wire w = {.length = 0};
  for (int i = 0; i < 100; i++) {
    put_byte(&w, 0x22); /* a range of keys, nothing else set */
    put_byte(&w, 0x02);
    put_byte(&w, 0x10);
    put_byte(&w, 0x01);
  }
  reshard_binding b;
  reshard_error err;
  cr_assert_eq(reshard_binding_decode(w.data, w.length, "binding", NULL,
                                      100 * sizeof(reshard_binding_range) - 1,
                                      &arena, &b, &err),
               RESHARD_RESOURCE_EXHAUSTED);
  cr_assert(strstr(err.message, "binding") != NULL, "%s", err.message);
  cr_assert_eq(reshard_binding_decode(w.data, w.length, "binding", NULL,
                                      100 * sizeof(reshard_binding_range) + 64,
                                      &arena, &b, &err),
               RESHARD_OK);
  cr_assert_eq(b.range_count, 100);
}

/* Region ids of many lengths: none, short ones that neighbours share, and
 * ones of 127 and 128 bytes around the one-byte length the word path
 * takes. */
static const char *canonical_id(char *buffer, size_t size) {
  static const size_t lengths[] = {0, 1, 4, 7, 8, 9, 12, 16, 31, 127, 128};
  size_t length = lengths[below(sizeof lengths / sizeof lengths[0])];
  cr_assert_lt(length, size);
  memset(buffer, 'r', length);
  if (length > 0) {
    buffer[length - 1] = (char)('0' + below(3));
  }
  buffer[length] = '\0';
  return buffer;
}

/* Values of every varint length, 1 to 10 bytes, zero (not written) too. */
static uint64_t canonical_value(void) {
  switch (below(6)) {
  case 0:
    return 0;
  case 1:
    return below(128);
  case 2:
    return 128 + below(1u << 14);
  case 3:
    return next() >> (7 * below(9)); /* up to 8 bytes */
  case 4:
    return next() | 1ull << 63; /* 10 bytes */
  default:
    return below(1u << 21);
  }
}

/* A binding of `ranges` over one region, "pool", packed by protobuf-c. */
static void pack_pool_binding(wire *w, Reshard__V1__BindingRange **ranges,
                              size_t count, const char *endpoint) {
  Reshard__V1__Region region;
  Reshard__V1__Region *region_list[1] = {&region};
  reshard__v1__region__init(&region);
  region.region_id = "pool";
  region.address = 4096;
  region.nbytes = 1u << 20;
  Reshard__V1__RuntimeBinding binding;
  reshard__v1__runtime_binding__init(&binding);
  binding.participant_id = "pp00-tp00";
  binding.endpoint = (char *)endpoint;
  binding.n_regions = 1;
  binding.regions = region_list;
  binding.n_ranges = count;
  binding.ranges = ranges;
  w->length = protobuf_c_message_get_packed_size(&binding.base);
  cr_assert_leq(w->length, sizeof w->data);
  protobuf_c_message_pack(&binding.base, w->data);
}

/* A binding as protobuf-c writes it (fields in order, each at most once,
 * zero values left out): the form the word path of binding_decode.c
 * decodes. Then now and then mutated, where the word path must refuse, or
 * fall back, exactly where protobuf-c does. */
static void canonical_binding(wire *w) {
  enum { RANGES_MAX = 48 };
  Reshard__V1__BindingRange ranges[RANGES_MAX];
  Reshard__V1__BindingRange *range_list[RANGES_MAX];
  char ids[RANGES_MAX][160];
  size_t count = below(RANGES_MAX + 1);
  bool same_id = below(2) == 0;
  for (size_t i = 0; i < count; i++) {
    Reshard__V1__BindingRange *r = &ranges[i];
    reshard__v1__binding_range__init(r);
    r->global_layer_id = (uint32_t)canonical_value();
    r->component =
        (Reshard__V1__Component)(below(16) == 0 ? below(4) : 1 + below(2));
    r->token_start = canonical_value();
    r->token_count = canonical_value();
    r->head_start = (uint32_t)canonical_value();
    r->head_count = (uint32_t)canonical_value();
    r->region_id = same_id && i > 0 ? ranges[i - 1].region_id
                                    : (char *)canonical_id(ids[i], 160);
    r->offset_bytes = canonical_value();
    r->token_stride_bytes = canonical_value();
    r->head_stride_bytes = canonical_value();
    range_list[i] = r;
  }
  pack_pool_binding(w, range_list, count, below(2) ? "bench" : "");
}

Test(binding_decode, agrees_with_protobuf_c_on_canonical_and_mutated_bytes) {
  assert_agree(canonical_binding, 20000, 7, 20, 2000);
}

/* Runs of ranges alike but for their token start and offset, of every
 * varint length, zero (not written) among them, as a paged reader lists
 * a layer's blocks: binding_decode.c decodes a range alike the last one
 * it kept by comparing bytes. Now and then one other field differs by a
 * value of the same length (same_stretch must see it), or the bytes are
 * mutated; protobuf-c decides every outcome. */
static void alike_binding(wire *w) {
  enum { RANGES_MAX = 32 }; /* of up to 200 bytes: within the buffer */
  Reshard__V1__BindingRange ranges[RANGES_MAX];
  Reshard__V1__BindingRange *range_list[RANGES_MAX];
  char ids[2][160];
  const char *id = canonical_id(ids[0], 160);
  size_t count = below(RANGES_MAX + 1);
  for (size_t i = 0; i < count; i++) {
    Reshard__V1__BindingRange *r = &ranges[i];
    if (i == 0 || below(12) == 0) { /* a new shape */
      reshard__v1__binding_range__init(r);
      r->global_layer_id = (uint32_t)canonical_value();
      r->component = (Reshard__V1__Component)(1 + below(2));
      r->token_count = canonical_value();
      r->head_start = (uint32_t)canonical_value();
      r->head_count = (uint32_t)canonical_value();
      r->region_id = (char *)id;
      r->token_stride_bytes = canonical_value();
      r->head_stride_bytes = canonical_value();
    } else {
      *r = ranges[i - 1];
    }
    r->token_start = canonical_value();
    r->offset_bytes = canonical_value();
    switch (below(16)) {
    case 0:
      r->head_count ^= 1; /* one length, another value */
      break;
    case 1:
      r->head_stride_bytes ^= 1;
      break;
    case 2:
      r->global_layer_id ^= 1;
      break;
    case 3: /* another id of the same length */
      strcpy(ids[1], id);
      if (ids[1][0] != '\0') {
        ids[1][0] ^= 1;
      }
      r->region_id = ids[1];
      break;
    default:
      break;
    }
    range_list[i] = r;
  }
  pack_pool_binding(w, range_list, count, "");
}

Test(binding_decode, agrees_with_protobuf_c_on_ranges_alike) {
  assert_agree(alike_binding, 20000, 0, 0, 2000);
}

/* Ranges that end the message, or end a few bytes before it, with a last
 * value of every varint length, in a buffer of exactly the message's size:
 * the word path, and the ranges alike the one before it, read nothing
 * past the message (the sanitizer build catches a byte over), and they
 * decode them as protobuf-c does. */
Test(binding_decode, reads_nothing_past_the_message) {
  for (unsigned bytes = 1; bytes <= 10; bytes++) {
    for (unsigned tail = 0; tail <= 10; tail++) {
      wire w = {.length = 0};
      for (int i = 0; i < 3; i++) {
        wire inner = {.length = 0};
        put_byte(&inner, 0x10); /* component KEY */
        put_byte(&inner, 0x01);
        /* A token start of its own: the later ranges are the first's
         * alike (decode_range_as). */
        put_byte(&inner, 0x18);
        put_byte(&inner, (uint8_t)(4 * i + 1));
        put_byte(&inner, 0x40); /* offset_bytes, `bytes` long */
        for (unsigned k = 1; k < bytes; k++) {
          put_byte(&inner, 0x81);
        }
        put_byte(&inner, bytes == 10 ? 0x01 : 0x02);
        put_byte(&w, 0x22); /* ranges, with a one-byte length */
        put_byte(&w, (uint8_t)inner.length);
        for (size_t k = 0; k < inner.length; k++) {
          put_byte(&w, inner.data[k]);
        }
      }
      for (unsigned k = 0; k < tail / 2; k++) {
        put_byte(&w, 0x08); /* participant_id as a varint: refused */
        put_byte(&w, 0x00);
      }
      if (tail % 2 == 1) {
        put_byte(&w, 0x12); /* endpoint "" */
        put_byte(&w, 0x00);
      }
      uint8_t *exact = malloc(w.length);
      cr_assert_not_null(exact);
      memcpy(exact, w.data, w.length);
      reshard_binding b;
      reshard_error err;
      reshard_status status = reshard_binding_decode(
          exact, w.length, "binding", NULL, UINT64_MAX, &arena, &b, &err);
      outcome want = through_protobuf_c(&w, NULL);
      cr_assert_eq(status, want.status, "%u bytes, tail %u: %s", bytes, tail,
                   err.message);
      if (status == RESHARD_OK) {
        char why[256];
        cr_assert(
            reshard_test_bindings_equal(&b, &want.binding, why, sizeof why),
            "%u bytes, tail %u: %s", bytes, tail, why);
      }
      free(exact);
    }
  }
}
