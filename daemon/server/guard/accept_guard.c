#define _GNU_SOURCE
#include "server/guard/accept_guard.h"

#include <errno.h>
#include <fcntl.h>
#include <stdatomic.h>
#include <sys/socket.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

#include "observe/log.h"

static atomic_int spare_fd = -1;
static atomic_uint_fast64_t refused;
static atomic_uint_fast64_t last_warning_s;

void reshard_accept_guard_init(void) {
  atomic_store(&spare_fd, open("/dev/null", O_RDONLY | O_CLOEXEC));
}

uint64_t reshard_accept_guard_refused(void) {
  return atomic_load(&refused);
}

static void warn_once_a_second(void) {
  struct timespec now;
  clock_gettime(CLOCK_MONOTONIC, &now);
  uint_fast64_t last = atomic_load(&last_warning_s);
  if ((uint_fast64_t)now.tv_sec != last &&
      atomic_compare_exchange_strong(&last_warning_s, &last,
                                     (uint_fast64_t)now.tv_sec)) {
    reshard_log_line line;
    if (reshard_log_begin(&line, RESHARD_LOG_WARN,
                          "out of file descriptors; closing new connections "
                          "unserved")) {
      reshard_log_u64(&line, "refused_total", atomic_load(&refused));
      reshard_log_end(&line);
    }
  }
}

int accept4(int fd, struct sockaddr *addr, socklen_t *addrlen, int flags) {
  int accepted = (int)syscall(SYS_accept4, fd, addr, addrlen, flags);
  if (accepted >= 0 || (errno != EMFILE && errno != ENFILE)) {
    return accepted;
  }
  /* Shed the backlog with the reserve so the listener's readiness is
   * consumed; one thread at a time owns the reserve. */
  int spare = atomic_exchange(&spare_fd, -1);
  for (int i = 0; spare >= 0 && i < 4096; i++) {
    close(spare);
    int shed = (int)syscall(SYS_accept4, fd, NULL, NULL, SOCK_CLOEXEC);
    int saved = errno;
    if (shed >= 0) {
      close(shed);
      atomic_fetch_add(&refused, 1);
    }
    spare = open("/dev/null", O_RDONLY | O_CLOEXEC);
    if (shed < 0 && saved != EINTR) {
      break; /* EAGAIN: the backlog is empty */
    }
  }
  atomic_store(&spare_fd, spare);
  warn_once_a_second();
  errno = EAGAIN;
  return -1;
}
