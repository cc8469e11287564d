/* libFuzzer target: what the daemon decodes from its catalogs. A manifest
 * record (the bytes after an LMDB manifest value's 8-byte header, or a
 * Redis GET/MGET string) goes through the path daemon/rpc/manifests.c takes for
 * a cache miss: unpack, convert, normalize, identities, and the key the
 * record must match. The first byte picks the framing: 0 the bare record,
 * 1 a RESP reply parsed by hiredis (each bulk string a record, as
 * catalog_redis.c hands them on), 2 an LMDB manifest value (header +
 * record; shorter values are refused as the catalog refuses them). */
#include <hiredis/hiredis.h>
#include <stdint.h>
#include <string.h>

#include "catalog/redis/redis_reply.h"
#include "reshard/arena.h"
#include "reshard/identity.h"
#include "wire/wire.h"

enum { LMDB_MANIFEST_HEADER = 8 };

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static void decode_record(const uint8_t *data, size_t size) {
  reshard_arena arena;
  reshard_arena_init(&arena, 4096);
  reshard_limits caps = reshard_limits_default();
  reshard_error err;
  reshard_manifest manifest;
  char id[RESHARD_ID_SIZE], domain[RESHARD_ID_SIZE];
  char key[RESHARD_MANIFEST_KEY_SIZE];
  ProtobufCMessage *m = reshard_wire_unpack(
      &reshard__v1__store_manifest__descriptor, data, size, &arena, &err);
  if (m != NULL &&
      reshard_wire_manifest_from_pb((Reshard__V1__StoreManifest *)m, "manifest",
                                    &arena, &manifest, &err) == RESHARD_OK &&
      reshard_manifest_normalize(&manifest, &caps, &arena, &err) ==
          RESHARD_OK &&
      reshard_layout_id(&manifest.layout, id, &err) == RESHARD_OK &&
      reshard_model_domain(&manifest, domain, &err) == RESHARD_OK &&
      reshard_manifest_key(&manifest, key, &err) == RESHARD_OK) {
    /* The catalog compares the key it asked for with the record's. */
    (void)strcmp(key, "kv/x/manifests/y");
  }
  reshard_arena_destroy(&arena);
}

static void walk_reply(const redisReply *reply, int depth) {
  if (reply->type == REDIS_REPLY_STRING) {
    decode_record((const uint8_t *)reply->str, reply->len);
  } else if (reply->type == REDIS_REPLY_ARRAY && depth < 4) {
    for (size_t i = 0; i < reply->elements; i++) {
      walk_reply(reply->element[i], depth + 1);
    }
  }
}

static void decode_resp(const uint8_t *data, size_t size) {
  /* The daemon's reader bound (catalog/redis_reply.h), at its floor. */
  static reshard_redis_reply_bound bound = {65536};
  redisReader *reader = redisReaderCreate();
  if (reader == NULL) {
    return;
  }
  if (!reshard_redis_reader_bound(reader, &bound)) {
    redisReaderFree(reader);
    return;
  }
  if (redisReaderFeed(reader, (const char *)data, size) == REDIS_OK) {
    void *reply = NULL;
    while (redisReaderGetReply(reader, &reply) == REDIS_OK && reply != NULL) {
      walk_reply(reply, 0);
      freeReplyObject(reply);
      reply = NULL;
    }
  }
  redisReaderFree(reader);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  if (size < 1) {
    return 0;
  }
  switch (data[0] % 3) {
  case 0:
    decode_record(data + 1, size - 1);
    break;
  case 1:
    decode_resp(data + 1, size - 1);
    break;
  default:
    if (size - 1 >= LMDB_MANIFEST_HEADER) {
      decode_record(data + 1 + LMDB_MANIFEST_HEADER,
                    size - 1 - LMDB_MANIFEST_HEADER);
    }
    break;
  }
  return 0;
}
