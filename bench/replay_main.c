/* reshard-replay: the replay server (replay_server.h) in a process of its
 * own, so that the transport floor it measures crosses processes as the
 * daemon's round trip does. `reshard-roundtrip` starts it and drives it
 * over a pipe:
 *
 *   stdout, once:  the address it serves, then a newline
 *   stdin, per row: the response's length (8 bytes, little-endian), then
 *                   its bytes; it answers "ok\n" on stdout once every
 *                   later call gets them
 *
 * It stops at the end of stdin, so it never outlives its driver. */
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>

#include "replay_server.h"

/* Reads exactly `length` bytes; false at the end of the input. */
static bool read_exactly(FILE *in, uint8_t *bytes, size_t length) {
  return fread(bytes, 1, length, in) == length;
}

int main(int argc, char **argv) {
  if (argc != 2) {
    fprintf(stderr, "usage: reshard-replay LISTEN (127.0.0.1:0 or "
                    "unix:PATH)\n");
    return 2;
  }
  char target[128];
  replay_server *server = replay_server_start(argv[1], target, sizeof target);
  if (server == NULL) {
    fprintf(stderr, "reshard-replay: cannot listen on %s\n", argv[1]);
    return 1;
  }
  printf("%s\n", target);
  fflush(stdout);
  int status = 0;
  uint8_t header[8];
  while (read_exactly(stdin, header, sizeof header)) {
    uint64_t length = 0;
    for (int i = 7; i >= 0; i--) {
      length = length << 8 | header[i];
    }
    uint8_t *bytes = length <= SIZE_MAX ? malloc(length ? length : 1) : NULL;
    if (bytes == NULL || !read_exactly(stdin, bytes, (size_t)length)) {
      fprintf(stderr,
              "reshard-replay: a response of %llu bytes cut short "
              "or too large\n",
              (unsigned long long)length);
      free(bytes);
      status = 1;
      break;
    }
    replay_server_set_response(server, bytes, (size_t)length);
    free(bytes);
    printf("ok\n");
    fflush(stdout);
  }
  replay_server_stop(server);
  return status;
}
