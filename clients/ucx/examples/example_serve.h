/* What the example programs that serve their memory (pd_prefill.c,
 * ucx_store.c) share: serving it until SIGTERM or SIGINT. It needs only
 * the executor, so the store links it without the P/D programs' support. */
#ifndef RESHARD_EXAMPLE_SERVE_H
#define RESHARD_EXAMPLE_SERVE_H

#include <stddef.h>

#include "reshard_ucx.h"

/* Catches SIGTERM and SIGINT from now on: a program calls it before it
 * sets anything up, so a signal during setup still ends it through its
 * cleanup once example_serve_until_stopped is reached. */
void example_catch_stop_signals(void);

/* Flushes stdout (what the program printed about itself is read while it
 * serves), then serves `ux` (reshard_ucx_serve, 100 ms at a time) until a
 * caught signal arrives. Returns 0, or -1 with UCX's message in `msg`. */
int example_serve_until_stopped(reshard_ucx *ux, char *msg, size_t msg_size);

#endif
