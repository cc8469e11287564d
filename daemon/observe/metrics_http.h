/* The metrics endpoint: GNU libmicrohttpd serving GET /metrics (Prometheus
 * text format 0.0.4) on its own thread. The thread only reads the registry
 * (metrics.h), so a scrape never blocks the event loop, and a busy loop
 * never blocks a scrape. docs/operations.md explains the choice of library.
 *
 * Paths: /metrics → the exposition; / → a one-line pointer to /metrics;
 * anything else → 404. Methods other than GET and HEAD → 405. */
#ifndef RESHARD_METRICS_HTTP_H
#define RESHARD_METRICS_HTTP_H

#include "observe/metrics.h"
#include "reshard/error.h"

typedef struct reshard_metrics_http reshard_metrics_http;

/* Binds `listen` ("HOST:PORT" or "[IPV6]:PORT"; port 0 picks a free one)
 * and starts the HTTP thread serving `metrics`, which must outlive the
 * server. Stores the bound port in *port. Returns NULL with `err` set
 * (UNAVAILABLE) when the address cannot be bound or resolved. */
reshard_metrics_http *reshard_metrics_http_start(const char *listen,
                                                 const reshard_metrics *metrics,
                                                 int *port, reshard_error *err);

/* Stops the thread (waiting for a scrape in progress) and frees the
 * server. NULL is a no-op. */
void reshard_metrics_http_stop(reshard_metrics_http *http);

/* Reads this process's figures from /proc and getrusage. Exposed for
 * tests. */
void reshard_metrics_read_process(reshard_metrics_process *out);

#endif
