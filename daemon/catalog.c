#include "catalog.h"

#include "catalog_lmdb.h"
#include "catalog_redis.h"

#include <string.h>

reshard_status reshard_catalog_open(uv_loop_t *loop, const char *spec,
                                    reshard_catalog **out, reshard_error *err) {
  if (strcmp(spec, "memory") == 0) {
    return reshard_catalog_memory_open(loop, out, err);
  }
  if (strncmp(spec, "lmdb:", 5) == 0) {
    return reshard_catalog_lmdb_open(loop, spec + 5, 0, out, err);
  }
  if (strncmp(spec, "redis://", 8) == 0) {
    return reshard_catalog_redis_open(loop, spec, out, err);
  }
  return reshard_error_set(err, RESHARD_INVALID_ARGUMENT,
                           "--catalog \"%s\": not a catalog (memory, "
                           "lmdb:PATH or redis://HOST:PORT[/DB])",
                           spec);
}
