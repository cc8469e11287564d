/* Opening a catalog by its --catalog spec (SPEC §3.2): the factory, and the
 * one file that knows every backend (memory/, lmdb/, redis/). The daemon
 * opens its catalog here and then talks to catalog.h only. */
#ifndef RESHARD_CATALOG_OPEN_H
#define RESHARD_CATALOG_OPEN_H

#include <uv.h>

#include "catalog/catalog.h"
#include "reshard/error.h"

/* Opens the catalog named by `spec` ("memory", "lmdb:PATH",
 * "redis://HOST:PORT[/DB]", "redis-cluster://HOST:PORT[,HOST:PORT...]") on
 * `loop`. Returns INVALID_ARGUMENT for a
 * malformed spec or a backend this build does not provide, UNAVAILABLE when
 * the backend cannot be opened. */
reshard_status reshard_catalog_open(uv_loop_t *loop, const char *spec,
                                    reshard_catalog **out, reshard_error *err);

/* The same, with `redis_password` (may be NULL) as the Redis catalog's
 * password in place of the URL's (--redis-password-file). */
reshard_status reshard_catalog_open_with_password(uv_loop_t *loop,
                                                  const char *spec,
                                                  const char *redis_password,
                                                  reshard_catalog **out,
                                                  reshard_error *err);

/* What the Redis catalogs take besides their URL. */
typedef struct reshard_catalog_redis_options {
  const char *password;   /* NULL: the URL's (--redis-password-file) */
  unsigned wait_replicas; /* --redis-wait-replicas; 0: writes do not WAIT */
} reshard_catalog_redis_options;

/* The same, with `options` (may be NULL: none) for redis:// and
 * redis-cluster:// ("redis-cluster://[[USER]:PASSWORD@]HOST:PORT[,...]",
 * seed nodes); other backends ignore them. */
reshard_status
reshard_catalog_open_with_options(uv_loop_t *loop, const char *spec,
                                  const reshard_catalog_redis_options *options,
                                  reshard_catalog **out, reshard_error *err);

#endif
