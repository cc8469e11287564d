/* The standard grpc.health.v1.Health service (Check and Watch) for the
 * empty service name and "reshard.v1.Planner": SERVING until the daemon
 * drains, NOT_SERVING afterwards. Loop thread only. */
#ifndef RESHARD_HEALTH_H
#define RESHARD_HEALTH_H

#include <stdbool.h>

#include "server/server.h"

typedef struct reshard_health reshard_health;

/* Registers Check and Watch on `server` (before it starts); the service
 * reports SERVING. NULL when out of memory. */
reshard_health *reshard_health_create(reshard_server *server);

/* Changes the status of every known service and tells every watcher. */
void reshard_health_set_serving(reshard_health *health, bool serving);

/* Frees the service after the server has closed (no watcher is left). */
void reshard_health_free(reshard_health *health);

#endif
