#include "server/guard/sockets.h"

#include <dirent.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <stdlib.h>
#include <sys/socket.h>

bool reshard_each_fd(reshard_each_fd_fn fn, void *data) {
  DIR *fds = opendir("/proc/self/fd");
  if (fds == NULL) {
    return false;
  }
  struct dirent *entry;
  while ((entry = readdir(fds)) != NULL) {
    char *end;
    long fd = strtol(entry->d_name, &end, 10);
    if (*end != '\0' || end == entry->d_name || fd == dirfd(fds)) {
      continue;
    }
    if (!fn((int)fd, data)) {
      break;
    }
  }
  closedir(fds);
  return true;
}

bool reshard_socket_established(int fd) {
  struct tcp_info info;
  socklen_t length = sizeof info;
  return getsockopt(fd, IPPROTO_TCP, TCP_INFO, &info, &length) == 0 &&
         info.tcpi_state == TCP_ESTABLISHED;
}
