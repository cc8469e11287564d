/* A gRPC server that answers every unary call with one fixed message: the
 * transport alone, for the round-trip benchmark to put next to the
 * daemon's round trip of the same request and response bytes. */
#ifndef RESHARD_BENCH_REPLAY_SERVER_H
#define RESHARD_BENCH_REPLAY_SERVER_H

#include <stddef.h>
#include <stdint.h>

typedef struct replay_server replay_server;

/* Starts a server on `listen` (127.0.0.1:0, or unix:PATH) with its own
 * thread and writes its address into `target`. NULL when it cannot start.
 * The caller stops it with replay_server_stop. */
replay_server *replay_server_start(const char *listen, char *target,
                                   size_t target_size);

/* The message every later call is answered with; the server keeps its own
 * copy. Call it only between calls. */
void replay_server_set_response(replay_server *server, const uint8_t *bytes,
                                size_t length);

/* Shuts the server down, waits for its thread and frees it. */
void replay_server_stop(replay_server *server);

#endif
