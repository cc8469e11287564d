/* A catalog decorator that times every operation of another catalog and
 * records it in the metrics registry (reshard_catalog_operation_duration_
 * seconds, reshard_catalog_errors_total). It forwards each call unchanged
 * and reports the same name and binding placement as the catalog it wraps,
 * so the services cannot tell it is there. */
#ifndef RESHARD_CATALOG_TIMED_H
#define RESHARD_CATALOG_TIMED_H

#include "catalog/catalog.h"
#include "observe/metrics.h"

/* Wraps `inner`, which the wrapper then owns: closing the wrapper closes
 * `inner` first. `metrics` is borrowed and must outlive the wrapper. NULL
 * when out of memory (`inner` is left to the caller then). Each operation
 * allocates one small record for its duration. */
reshard_catalog *reshard_catalog_timed_wrap(reshard_catalog *inner,
                                            reshard_metrics *metrics);

#endif
