/* Connections over 127.0.0.1 for the guards' tests: the guards find the
 * accepted sockets among the process's descriptors, as the daemon finds
 * the ones gRPC accepted. */
#ifndef RESHARD_TEST_LOOPBACK_H
#define RESHARD_TEST_LOOPBACK_H

#include <arpa/inet.h>
#include <criterion/criterion.h>
#include <netinet/in.h>
#include <sys/socket.h>

/* A listener on 127.0.0.1, at the port the kernel chose, in `address`. */
static inline int loopback_listen(struct sockaddr_in *address) {
  *address = (struct sockaddr_in){.sin_family = AF_INET};
  address->sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  socklen_t length = sizeof *address;
  int listener = socket(AF_INET, SOCK_STREAM, 0);
  cr_assert_geq(listener, 0);
  cr_assert_eq(bind(listener, (struct sockaddr *)address, length), 0);
  cr_assert_eq(listen(listener, 8), 0);
  cr_assert_eq(getsockname(listener, (struct sockaddr *)address, &length), 0);
  return listener;
}

/* A client connected to `listener` at `address`, and the socket the
 * listener accepted for it. */
static inline void loopback_connect(int listener,
                                    const struct sockaddr_in *address,
                                    int *client, int *accepted) {
  *client = socket(AF_INET, SOCK_STREAM, 0);
  cr_assert_eq(
      connect(*client, (const struct sockaddr *)address, sizeof *address), 0);
  *accepted = accept(listener, NULL, NULL);
  cr_assert_geq(*accepted, 0);
}

#endif
