/* The reshard.v1.Planner service (SPEC §3.3): the eight RPCs over the
 * catalog, the cache and the planning library. Handlers run on the loop;
 * PlanLoad plans on libuv's thread pool over reference-counted manifests,
 * placements and join templates, and sends from the after-work callback. */
#ifndef RESHARD_PLANNER_SERVICE_H
#define RESHARD_PLANNER_SERVICE_H

#include <uv.h>

#include "cache/cache.h"
#include "catalog/catalog.h"
#include "observe/metrics.h"
#include "reshard/limits.h"
#include "server/server.h"

typedef struct reshard_planner reshard_planner;

/* Creates the service. `catalog` and `cache` are borrowed and must outlive
 * it; `caps` are the server's limits (SPEC §2.3). A PlanLoad whose binding
 * covers at most `inline_max_values` (token, head) values is planned on the
 * loop itself; larger ones go to the thread pool (0: always the pool).
 * NULL when out of memory. */
reshard_planner *reshard_planner_create(uv_loop_t *loop,
                                        reshard_catalog *catalog,
                                        reshard_cache *cache,
                                        const reshard_limits *caps,
                                        uint64_t inline_max_values);

/* Registers the eight methods on `server` (before it starts). */
void reshard_planner_register(reshard_planner *planner, reshard_server *server);

/* Records PlanLoad figures (plan latency, copies, bytes) in `metrics`,
 * which must outlive the service; NULL (the default) records nothing. */
void reshard_planner_set_metrics(reshard_planner *planner,
                                 reshard_metrics *metrics);

/* Frees the service once the server has closed (no call is left). */
void reshard_planner_free(reshard_planner *planner);

#endif
