#include "catalog/catalog_open.h"

#include <string.h>

#include "catalog/lmdb/catalog_lmdb.h"
#include "catalog/memory/catalog_memory.h"
#include "catalog/redis/catalog_redis.h"

reshard_status reshard_catalog_open(uv_loop_t *loop, const char *spec,
                                    reshard_catalog **out, reshard_error *err) {
  return reshard_catalog_open_with_password(loop, spec, NULL, out, err);
}

reshard_status reshard_catalog_open_with_password(uv_loop_t *loop,
                                                  const char *spec,
                                                  const char *redis_password,
                                                  reshard_catalog **out,
                                                  reshard_error *err) {
  reshard_catalog_redis_options options = {.password = redis_password};
  return reshard_catalog_open_with_options(loop, spec, &options, out, err);
}

reshard_status
reshard_catalog_open_with_options(uv_loop_t *loop, const char *spec,
                                  const reshard_catalog_redis_options *options,
                                  reshard_catalog **out, reshard_error *err) {
  const char *redis_password = options ? options->password : NULL;
  unsigned wait_replicas = options ? options->wait_replicas : 0;
  if (strcmp(spec, "memory") == 0) {
    return reshard_catalog_memory_open(loop, out, err);
  }
  if (strncmp(spec, "lmdb:", 5) == 0) {
    return reshard_catalog_lmdb_open(loop, spec + 5, 0, out, err);
  }
  if (strncmp(spec, "redis://", 8) == 0 ||
      strncmp(spec, "redis-cluster://", 16) == 0) {
    return reshard_catalog_redis_open_options(loop, spec, redis_password,
                                              wait_replicas, out, err);
  }
  return reshard_error_set(err, RESHARD_INVALID_ARGUMENT,
                           "--catalog \"%s\": not a catalog (memory, "
                           "lmdb:PATH, redis://HOST:PORT[/DB] or "
                           "redis-cluster://HOST:PORT[,HOST:PORT...])",
                           spec);
}
