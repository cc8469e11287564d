/* Tests daemon/guard/reset_guard.c: resets are counted per connection in
 * one-second windows, and a connection past the limit is found among the
 * process's sockets by its peer address and shut down, and no other. */
#include <arpa/inet.h>
#include <criterion/criterion.h>
#include <netinet/in.h>
#include <poll.h>
#include <stdio.h>
#include <sys/socket.h>
#include <unistd.h>

#include "loopback.h"
#include "server/guard/reset_guard.h"

/* A listener on 127.0.0.1, a client connected to it and the accepted
 * socket; `peer` is what gRPC calls the client ("ipv4:127.0.0.1:PORT"). */
typedef struct connection {
  int listener, client, accepted;
  char peer[64];
} connection;

static void connect_pair(connection *c) {
  struct sockaddr_in address;
  c->listener = loopback_listen(&address);
  loopback_connect(c->listener, &address, &c->client, &c->accepted);
  struct sockaddr_in mine;
  socklen_t length = sizeof mine;
  cr_assert_eq(getsockname(c->client, (struct sockaddr *)&mine, &length), 0);
  snprintf(c->peer, sizeof c->peer, "ipv4:127.0.0.1:%u",
           (unsigned)ntohs(mine.sin_port));
}

static void close_pair(connection *c) {
  close(c->client);
  close(c->accepted);
  close(c->listener);
}

/* Whether the other end of `fd` has shut the connection down: a read
 * returns end of stream at once. */
static bool ended(int fd) {
  struct pollfd p = {.fd = fd, .events = POLLIN};
  char byte;
  return poll(&p, 1, 1000) == 1 && recv(fd, &byte, 1, MSG_DONTWAIT) == 0;
}

Test(reset_guard, closes_the_connection_of_a_peer_past_the_limit) {
  connection c;
  connect_pair(&c);
  reshard_reset_guard guard;
  reshard_reset_guard_init(&guard, 100);
  uint64_t now = 5000000000u;
  for (int i = 0; i < 99; i++) {
    cr_assert_not(reshard_reset_guard_note(&guard, c.peer, now + i * 1000));
  }
  cr_assert(reshard_reset_guard_note(&guard, c.peer, now + 99 * 1000),
            "the 100th reset within a second closes");
  cr_assert_eq(guard.closed, 1, "only the accepted socket has this peer");
  cr_assert(ended(c.client), "the client sees its connection end");
  close_pair(&c);
}

Test(reset_guard, counts_in_one_second_windows) {
  connection c;
  connect_pair(&c);
  reshard_reset_guard guard;
  reshard_reset_guard_init(&guard, 100);
  uint64_t now = 5000000000u;
  for (int second = 0; second < 5; second++) {
    for (int i = 0; i < 99; i++) {
      cr_assert_not(reshard_reset_guard_note(
          &guard, c.peer, now + (uint64_t)second * 1000000000u + i));
    }
  }
  cr_assert_eq(guard.closed, 0, "99 a second, five seconds: under the limit");
  close_pair(&c);
}

Test(reset_guard, other_connections_are_left_alone) {
  connection attacker, other;
  connect_pair(&attacker);
  connect_pair(&other);
  reshard_reset_guard guard;
  reshard_reset_guard_init(&guard, 10);
  for (int i = 0; i < 9; i++) {
    cr_assert_not(reshard_reset_guard_note(&guard, other.peer, 1000 + i));
  }
  /* Closed at its 10th; five more count again from zero. */
  for (int i = 0; i < 15; i++) {
    reshard_reset_guard_note(&guard, attacker.peer, 1000 + i);
  }
  cr_assert_eq(guard.closed, 1);
  cr_assert(ended(attacker.client));
  struct pollfd p = {.fd = other.client, .events = POLLIN};
  cr_assert_eq(poll(&p, 1, 100), 0, "the other connection is still open");
  /* Its count went on apart from the attacker's. */
  cr_assert(reshard_reset_guard_note(&guard, other.peer, 2000));
  cr_assert(ended(other.client));
  close_pair(&attacker);
  close_pair(&other);
}

Test(reset_guard, unix_and_malformed_peers_are_never_closed) {
  reshard_reset_guard guard;
  reshard_reset_guard_init(&guard, 1);
  cr_assert_not(reshard_reset_guard_note(&guard, "unix:/run/reshardd.sock", 1));
  cr_assert_not(reshard_reset_guard_note(&guard, NULL, 1));
  cr_assert_eq(reshard_reset_guard_close_peer("ipv4:127.0.0.1"), 0);
  cr_assert_eq(reshard_reset_guard_close_peer("ipv4:not-an-address:80"), 0);
  cr_assert_eq(reshard_reset_guard_close_peer("ipv6:[::1]"), 0);
  cr_assert_eq(reshard_reset_guard_close_peer("ipv4:127.0.0.1:0"), 0);
}

Test(reset_guard, a_connection_shut_down_already_is_not_counted_again) {
  connection c;
  connect_pair(&c);
  reshard_reset_guard guard;
  reshard_reset_guard_init(&guard, 10);
  for (int i = 0; i < 10; i++) {
    reshard_reset_guard_note(&guard, c.peer, 1000 + i);
  }
  cr_assert_eq(guard.closed, 1);
  /* gRPC still holds the descriptor while it works through the calls the
   * connection sent before it ended: more of them past the limit find it
   * shut down already. */
  for (int i = 0; i < 10; i++) {
    cr_assert_not(reshard_reset_guard_note(&guard, c.peer, 2000 + i));
  }
  cr_assert_eq(guard.closed, 1);
  close_pair(&c);
}
