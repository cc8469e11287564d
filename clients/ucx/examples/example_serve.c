/* Serving until SIGTERM or SIGINT: see example_serve.h. */
#include <signal.h>
#include <stdio.h>

#include "example_serve.h"

static volatile sig_atomic_t stop;

static void on_signal(int sig) {
  (void)sig;
  stop = 1;
}

void example_catch_stop_signals(void) {
  signal(SIGTERM, on_signal);
  signal(SIGINT, on_signal);
}

int example_serve_until_stopped(reshard_ucx *ux, char *msg, size_t msg_size) {
  fflush(stdout);
  reshard_ucx_error uerr = {0};
  while (!stop) {
    if (reshard_ucx_serve(ux, 100, &uerr) != 0) {
      snprintf(msg, msg_size, "%s", uerr.message);
      return -1;
    }
  }
  return 0;
}
