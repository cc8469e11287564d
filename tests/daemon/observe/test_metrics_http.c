/* Tests daemon/metrics_http.c: the libmicrohttpd endpoint on 127.0.0.1:0
 * answers GET /metrics with the exposition, 404 and 405 otherwise, and the
 * process figures read from /proc are plausible. */
#include <arpa/inet.h>
#include <criterion/criterion.h>
#include <netinet/in.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include "observe/metrics_http.h"

/* Sends `request` to 127.0.0.1:port and returns the whole response
 * (the server closes the connection: requests say "Connection: close"). */
static char *http(int port, const char *request) {
  int fd = socket(AF_INET, SOCK_STREAM, 0);
  cr_assert_geq(fd, 0);
  struct sockaddr_in address = {.sin_family = AF_INET,
                                .sin_port = htons((uint16_t)port)};
  address.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  cr_assert_eq(connect(fd, (struct sockaddr *)&address, sizeof address), 0);
  size_t length = strlen(request);
  cr_assert_eq(write(fd, request, length), (ssize_t)length);
  size_t capacity = 1 << 16, used = 0;
  char *out = malloc(capacity);
  for (;;) {
    if (used + 4096 > capacity) {
      capacity *= 2;
      out = realloc(out, capacity);
    }
    ssize_t n = read(fd, out + used, capacity - used - 1);
    cr_assert_geq(n, 0);
    if (n == 0) {
      break;
    }
    used += (size_t)n;
  }
  out[used] = '\0';
  close(fd);
  return out;
}

Test(metrics_http, serves_the_exposition_on_a_free_port) {
  reshard_metrics *m = reshard_metrics_create("9.9.9", "memory");
  reshard_metrics_call_started(m, RESHARD_METRICS_METHOD_PLAN_LOAD);
  reshard_metrics_call_finished(m, RESHARD_METRICS_METHOD_PLAN_LOAD, 0, 77);
  reshard_error err;
  int port = 0;
  reshard_metrics_http *server =
      reshard_metrics_http_start("127.0.0.1:0", m, &port, &err);
  cr_assert_not_null(server, "%s", err.message);
  cr_assert_gt(port, 0);

  char *ok = http(port, "GET /metrics HTTP/1.1\r\nHost: x\r\n"
                        "Connection: close\r\n\r\n");
  cr_assert(strncmp(ok, "HTTP/1.1 200", 12) == 0, "%.200s", ok);
  cr_assert(strstr(ok, "text/plain; version=0.0.4") != NULL, "%.400s", ok);
  cr_assert(strstr(ok, "reshard_requests_total{service=\"reshard.v1.Planner\","
                       "method=\"PlanLoad\",code=\"OK\"} 1\n") != NULL);
  cr_assert(strstr(ok, "reshard_build_info{version=\"9.9.9\"") != NULL);
  cr_assert(strstr(ok, "process_resident_memory_bytes ") != NULL);
  free(ok);

  char *missing = http(port, "GET /nope HTTP/1.1\r\nHost: x\r\n"
                             "Connection: close\r\n\r\n");
  cr_assert(strncmp(missing, "HTTP/1.1 404", 12) == 0, "%.200s", missing);
  free(missing);

  char *post = http(port, "POST /metrics HTTP/1.1\r\nHost: x\r\n"
                          "Content-Length: 3\r\nConnection: close\r\n\r\nabc");
  cr_assert(strncmp(post, "HTTP/1.1 405", 12) == 0, "%.200s", post);
  cr_assert(strstr(post, "GET, HEAD") != NULL);
  free(post);

  reshard_metrics_http_stop(server);
  reshard_metrics_free(m);
}

Test(metrics_http, refuses_a_port_in_use) {
  reshard_metrics *m = reshard_metrics_create("v", "memory");
  reshard_error err;
  int port = 0;
  reshard_metrics_http *first =
      reshard_metrics_http_start("127.0.0.1:0", m, &port, &err);
  cr_assert_not_null(first, "%s", err.message);
  char listen[64];
  snprintf(listen, sizeof listen, "127.0.0.1:%d", port);
  int second_port = 0;
  cr_assert_null(reshard_metrics_http_start(listen, m, &second_port, &err));
  cr_assert_eq(err.code, RESHARD_UNAVAILABLE);
  cr_assert(strstr(err.message, "--metrics-listen") != NULL, "%s", err.message);
  reshard_metrics_http_stop(first);
  reshard_metrics_free(m);
}

Test(metrics_http, process_figures_are_plausible) {
  reshard_metrics_process p;
  reshard_metrics_read_process(&p);
  cr_assert(p.valid);
  cr_assert_gt(p.resident_bytes, 1 << 20);
  cr_assert_geq(p.virtual_bytes, p.resident_bytes);
  cr_assert_gt(p.start_time_s, 1500000000);
  cr_assert_geq(p.open_fds, 3);
}
