/* Tests daemon/guard/read_guard.c: threads that return no completion while they
 * run are held; when every one is held at two looks in a row, the
 * connections read at a flood's rate since the first are shut down, one
 * per thread, and no other; a connection read at the rate of requests
 * means the threads are working, and nothing is closed. Real sockets: the
 * guard finds them among the process's descriptors. */
#include <arpa/inet.h>
#include <criterion/criterion.h>
#include <netinet/in.h>
#include <poll.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include "loopback.h"
#include "server/guard/read_guard.h"

enum { CONNECTIONS = 3, LOOK_NS = 25 * 1000 * 1000 };

/* A listener on 127.0.0.1 and clients connected to it, with the accepted
 * sockets (what gRPC holds in the daemon). */
typedef struct connections {
  int listener, port;
  int client[CONNECTIONS], accepted[CONNECTIONS];
} connections;

static void connect_all(connections *c) {
  struct sockaddr_in address;
  c->listener = loopback_listen(&address);
  c->port = ntohs(address.sin_port);
  for (int i = 0; i < CONNECTIONS; i++) {
    loopback_connect(c->listener, &address, &c->client[i], &c->accepted[i]);
  }
}

static void close_all(connections *c) {
  for (int i = 0; i < CONNECTIONS; i++) {
    close(c->client[i]);
    close(c->accepted[i]);
  }
  close(c->listener);
}

/* Client `i` sends `bytes` and the daemon's side reads them all, as a
 * queue thread would. */
static void carry(connections *c, int i, size_t bytes) {
  static char buffer[64 * 1024];
  size_t sent = 0, taken = 0;
  while (taken < bytes) {
    if (sent < bytes) {
      size_t n = bytes - sent < sizeof buffer ? bytes - sent : sizeof buffer;
      ssize_t w = send(c->client[i], buffer, n, MSG_DONTWAIT);
      if (w > 0) {
        sent += (size_t)w;
      }
    }
    ssize_t r = recv(c->accepted[i], buffer, sizeof buffer, MSG_DONTWAIT);
    if (r > 0) {
      taken += (size_t)r;
    }
  }
}

/* Whether client `i` saw the daemon's side shut the connection down. */
static bool ended(const connections *c, int i) {
  struct pollfd p = {.fd = c->client[i], .events = POLLIN};
  char byte;
  return poll(&p, 1, 200) == 1 &&
         recv(c->client[i], &byte, 1, MSG_DONTWAIT) == 0;
}

/* The threads' counts as the server reads them: `returned` completions so
 * far, and CPU time that advances by the whole look when `busy`. */
typedef struct threads {
  uint64_t now;
  uint64_t returned[2], cpu[2];
} threads;

static unsigned look(reshard_read_guard *guard, threads *t, bool busy0,
                     bool returned0, bool busy1, bool returned1) {
  t->now += LOOK_NS;
  t->cpu[0] += busy0 ? LOOK_NS : LOOK_NS / 10;
  t->cpu[1] += busy1 ? LOOK_NS : LOOK_NS / 10;
  t->returned[0] += returned0;
  t->returned[1] += returned1;
  return reshard_read_guard_look(guard, t->now, t->returned, t->cpu);
}

/* Both threads running, neither returning anything. */
static unsigned look_held(reshard_read_guard *guard, threads *t) {
  return look(guard, t, true, false, true, false);
}

/* Every test: three connections to a port, a guard for two threads
 * serving it, and the threads' counts at a start time. */
static connections c;
static reshard_read_guard guard;
static threads t;

static void set_up(void) {
  connect_all(&c);
  reshard_read_guard_init(&guard, 2, c.port);
  t = (threads){.now = 1000000000u};
}

static void tear_down(void) {
  reshard_read_guard_free(&guard);
  close_all(&c);
}

TestSuite(read_guard, .init = set_up, .fini = tear_down);

Test(read_guard, closes_the_connections_a_flood_holds_every_thread_on) {
  cr_assert_eq(look_held(&guard, &t), 0, "the first look sees nothing yet");
  cr_assert_eq(look_held(&guard, &t), 0, "held once: sampled, not closed");
  /* A flood's pace, 100 KB in 25 ms, on two; a trickle on the third. */
  carry(&c, 0, 100 * 1024);
  carry(&c, 1, 60 * 1024);
  carry(&c, 2, 1000);
  cr_assert_eq(look_held(&guard, &t), 2, "held twice: one per thread");
  cr_assert_eq(guard.closed, 2);
  cr_assert(ended(&c, 0));
  cr_assert(ended(&c, 1));
  cr_assert_not(ended(&c, 2), "too little read to hold a thread");
  /* Held still, and the guard looks at once; a trickle is no flood. */
  carry(&c, 2, 1000);
  cr_assert_eq(look_held(&guard, &t), 0);
  cr_assert_not(ended(&c, 2));
}

Test(read_guard, a_connection_read_at_the_rate_of_requests_explains_them) {
  look_held(&guard, &t);
  look_held(&guard, &t);
  /* 4 MB in 25 ms is a request being read: the threads are busy with it,
   * and the connection beside it read at a flood's pace is left too. */
  carry(&c, 0, 4 * 1024 * 1024);
  carry(&c, 1, 100 * 1024);
  cr_assert_eq(look_held(&guard, &t), 0);
  cr_assert_not(ended(&c, 0));
  cr_assert_not(ended(&c, 1));
  /* Once nothing explains them, the flood's connection goes. */
  carry(&c, 1, 100 * 1024);
  cr_assert_eq(look_held(&guard, &t), 1);
  cr_assert(ended(&c, 1));
  cr_assert_not(ended(&c, 0));
}

Test(read_guard, threads_that_return_completions_or_wait_are_not_held) {
  for (int i = 0; i < 24; i++) {
    carry(&c, 0, 100 * 1024);
    /* Thread 0 returns a completion every other look; thread 1 waits,
     * running a tenth of the time. */
    cr_assert_eq(look(&guard, &t, true, i % 2 == 0, false, false), 0);
  }
  for (int i = 0; i < 24; i++) {
    carry(&c, 0, 100 * 1024);
    /* Both run; one of them returns something at every look. */
    cr_assert_eq(look(&guard, &t, true, i % 2 == 0, true, i % 2 == 1), 0);
  }
  cr_assert_not(ended(&c, 0));
  cr_assert_eq(guard.closed, 0);
}

Test(read_guard, one_thread_held_for_200_ms_loses_its_connection) {
  look_held(&guard, &t);
  /* Thread 0 held, thread 1 returning completions: the reset guard's
   * case, until thread 0 has been held for eight looks. */
  for (int i = 1; i < 8; i++) {
    carry(&c, 0, 100 * 1024);
    cr_assert_eq(look(&guard, &t, true, false, true, true), 0, "look %d", i);
  }
  carry(&c, 0, 100 * 1024);
  cr_assert_eq(look(&guard, &t, true, false, true, true), 1);
  cr_assert(ended(&c, 0));
  cr_assert_not(ended(&c, 1));
}

Test(read_guard, after_a_closing_one_look_finds_the_next) {
  look_held(&guard, &t);
  look_held(&guard, &t);
  carry(&c, 0, 100 * 1024);
  carry(&c, 1, 100 * 1024);
  /* More of the flood, queued and not read yet. */
  static char queued[50 * 1024];
  cr_assert_eq(send(c.client[0], queued, sizeof queued, 0),
               (ssize_t)sizeof queued);
  cr_assert_eq(look_held(&guard, &t), 2);
  /* The threads come back with what gRPC ended, then take the flood's
   * next connection, while gRPC reads what was queued before the end of
   * the stream it shut. */
  cr_assert_eq(look(&guard, &t, true, true, true, true), 0);
  size_t taken = 0;
  while (taken < sizeof queued) {
    ssize_t r = recv(c.accepted[0], queued, sizeof queued, 0);
    cr_assert_gt(r, 0);
    taken += (size_t)r;
  }
  carry(&c, 2, 100 * 1024);
  cr_assert_eq(look_held(&guard, &t), 1, "held at one look after a closing");
  cr_assert(ended(&c, 2));
  cr_assert_eq(guard.closed, 3, "a connection shut down is not counted again");
}

Test(read_guard, a_long_hold_closes_one_even_when_all_are_held_once) {
  look_held(&guard, &t);
  for (int i = 1; i < 8; i++) {
    cr_assert_eq(look(&guard, &t, true, false, true, true), 0, "look %d", i);
  }
  /* Thread 0's eighth look in a row, thread 1's first: one is due. */
  carry(&c, 0, 100 * 1024);
  carry(&c, 1, 60 * 1024);
  cr_assert_eq(look_held(&guard, &t), 1);
  cr_assert(ended(&c, 0));
  cr_assert_not(ended(&c, 1));
}

Test(read_guard, without_a_port_it_never_acts) {
  reshard_read_guard_init(&guard, 2, 0);
  for (int i = 0; i < 12; i++) {
    carry(&c, 0, 100 * 1024);
    cr_assert_eq(look_held(&guard, &t), 0);
  }
  cr_assert_not(ended(&c, 0));
}

Test(read_guard, a_port_without_connections_has_nothing_to_close) {
  struct sockaddr_in address;
  int listener = loopback_listen(&address);
  reshard_read_guard_init(&guard, 2, ntohs(address.sin_port));
  for (int i = 0; i < 4; i++) {
    cr_assert_eq(look_held(&guard, &t), 0);
  }
  cr_assert_eq(guard.sample_count, 0, "only the listener, not established");
  close(listener);
}
