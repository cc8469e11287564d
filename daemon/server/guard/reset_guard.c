#include "server/guard/reset_guard.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>

#include "server/guard/sockets.h"

enum { WINDOW_NS = 1000000000 };

void reshard_reset_guard_init(reshard_reset_guard *guard, uint32_t limit) {
  memset(guard, 0, sizeof *guard);
  guard->limit = limit;
}

/* The entry of `peer`, or the one to reuse for it: a free one, else the
 * one whose window started longest ago. */
static reshard_reset_peer *entry_of(reshard_reset_guard *guard,
                                    const char *peer) {
  reshard_reset_peer *reuse = &guard->peers[0];
  for (size_t i = 0; i < RESHARD_RESET_GUARD_PEERS; i++) {
    reshard_reset_peer *entry = &guard->peers[i];
    if (strcmp(entry->peer, peer) == 0) {
      return entry;
    }
    if (reuse->peer[0] != '\0' &&
        (entry->peer[0] == '\0' ||
         entry->window_start_ns < reuse->window_start_ns)) {
      reuse = entry;
    }
  }
  snprintf(reuse->peer, sizeof reuse->peer, "%s", peer);
  reuse->count = 0;
  reuse->window_start_ns = 0;
  return reuse;
}

unsigned reshard_reset_guard_note(reshard_reset_guard *guard, const char *peer,
                                  uint64_t now_ns) {
  if (peer == NULL || strncmp(peer, "ip", 2) != 0 ||
      strlen(peer) >= RESHARD_RESET_GUARD_PEER_MAX) {
    return 0; /* unix sockets share one name */
  }
  reshard_reset_peer *entry = entry_of(guard, peer);
  if (entry->count == 0 || now_ns - entry->window_start_ns >= WINDOW_NS) {
    entry->window_start_ns = now_ns;
    entry->count = 0;
  }
  if (++entry->count < guard->limit) {
    return 0;
  }
  entry->count = 0;
  unsigned closed = reshard_reset_guard_close_peer(peer);
  guard->closed += closed;
  return closed;
}

/* Parses "ipv4:ADDR:PORT" or "ipv6:[ADDR]:PORT" into an IPv6 address
 * (IPv4 as mapped) and a port, the form connected_to compares. */
static bool parse_peer(const char *peer, struct in6_addr *address,
                       in_port_t *port) {
  char host[INET6_ADDRSTRLEN];
  const char *colon;
  if (strncmp(peer, "ipv4:", 5) == 0) {
    colon = strrchr(peer + 5, ':');
    size_t length = colon != NULL ? (size_t)(colon - (peer + 5)) : 0;
    struct in_addr v4;
    if (length == 0 || length >= sizeof host) {
      return false;
    }
    memcpy(host, peer + 5, length);
    host[length] = '\0';
    if (inet_pton(AF_INET, host, &v4) != 1) {
      return false;
    }
    memset(address, 0, sizeof *address);
    address->s6_addr[10] = address->s6_addr[11] = 0xff;
    memcpy(&address->s6_addr[12], &v4, sizeof v4);
  } else if (strncmp(peer, "ipv6:[", 6) == 0) {
    const char *close = strchr(peer + 6, ']');
    size_t length = close != NULL ? (size_t)(close - (peer + 6)) : 0;
    if (length == 0 || length >= sizeof host || close[1] != ':') {
      return false;
    }
    memcpy(host, peer + 6, length);
    host[length] = '\0';
    if (inet_pton(AF_INET6, host, address) != 1) {
      return false;
    }
    colon = close + 1;
  } else {
    return false;
  }
  char *end;
  unsigned long value = strtoul(colon + 1, &end, 10);
  if (*end != '\0' || value == 0 || value > 65535) {
    return false;
  }
  *port = htons((in_port_t)value);
  return true;
}

/* Whether socket `fd` is connected to `address`:`port`. */
static bool connected_to(int fd, const struct in6_addr *address,
                         in_port_t port) {
  struct sockaddr_storage storage;
  socklen_t length = sizeof storage;
  if (getpeername(fd, (struct sockaddr *)&storage, &length) != 0) {
    return false;
  }
  struct in6_addr peer;
  in_port_t peer_port;
  if (storage.ss_family == AF_INET) {
    const struct sockaddr_in *v4 = (const struct sockaddr_in *)&storage;
    memset(&peer, 0, sizeof peer);
    peer.s6_addr[10] = peer.s6_addr[11] = 0xff;
    memcpy(&peer.s6_addr[12], &v4->sin_addr, sizeof v4->sin_addr);
    peer_port = v4->sin_port;
  } else if (storage.ss_family == AF_INET6) {
    const struct sockaddr_in6 *v6 = (const struct sockaddr_in6 *)&storage;
    peer = v6->sin6_addr;
    peer_port = v6->sin6_port;
  } else {
    return false;
  }
  return peer_port == port && memcmp(&peer, address, sizeof peer) == 0;
}

/* The peer to close and how many of its sockets were shut down. */
typedef struct peer_close {
  struct in6_addr address;
  in_port_t port;
  unsigned closed;
} peer_close;

static bool close_if_connected(int fd, void *data) {
  peer_close *target = data;
  /* gRPC sees the end of the stream, closes the transport and ends its
   * calls; the descriptor stays gRPC's to close. One shut down already is
   * no longer established. */
  if (connected_to(fd, &target->address, target->port) &&
      reshard_socket_established(fd) && shutdown(fd, SHUT_RDWR) == 0) {
    target->closed++;
  }
  return true;
}

unsigned reshard_reset_guard_close_peer(const char *peer) {
  peer_close target = {.closed = 0};
  if (!parse_peer(peer, &target.address, &target.port)) {
    return 0;
  }
  reshard_each_fd(close_if_connected, &target);
  return target.closed;
}
