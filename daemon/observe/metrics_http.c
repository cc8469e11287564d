#include "observe/metrics_http.h"

#include <dirent.h>
#include <microhttpd.h>
#include <netdb.h>
#include <netinet/in.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <unistd.h>

#include "observe/log.h"

struct reshard_metrics_http {
  struct MHD_Daemon *daemon;
  const reshard_metrics *metrics;
};

static const char content_type[] = "text/plain; version=0.0.4; charset=utf-8";

/* ---- Process figures ---- */

static uint64_t boot_time_s(void) {
  FILE *f = fopen("/proc/stat", "r");
  if (f == NULL) {
    return 0;
  }
  char line[256];
  unsigned long long btime = 0;
  while (fgets(line, sizeof line, f) != NULL) {
    if (sscanf(line, "btime %llu", &btime) == 1) {
      break;
    }
  }
  fclose(f);
  return btime;
}

/* Field 22 of /proc/self/stat: start time in clock ticks after boot. */
static bool start_ticks(unsigned long long *out) {
  FILE *f = fopen("/proc/self/stat", "r");
  if (f == NULL) {
    return false;
  }
  char buffer[1024];
  size_t n = fread(buffer, 1, sizeof buffer - 1, f);
  fclose(f);
  buffer[n] = '\0';
  /* The command name may hold spaces and parentheses: start after the
   * last ')'. It is field 2; field 3 follows. */
  char *p = strrchr(buffer, ')');
  if (p == NULL) {
    return false;
  }
  p++;
  for (int field = 3; field < 22; field++) {
    p = strchr(p + 1, ' ');
    if (p == NULL) {
      return false;
    }
  }
  return sscanf(p, " %llu", out) == 1;
}

void reshard_metrics_read_process(reshard_metrics_process *out) {
  memset(out, 0, sizeof *out);
  long page = sysconf(_SC_PAGESIZE);
  FILE *f = fopen("/proc/self/statm", "r");
  if (f == NULL || page <= 0) {
    if (f != NULL) {
      fclose(f);
    }
    return;
  }
  unsigned long long size = 0, resident = 0;
  int fields = fscanf(f, "%llu %llu", &size, &resident);
  fclose(f);
  if (fields != 2) {
    return;
  }
  out->virtual_bytes = size * (uint64_t)page;
  out->resident_bytes = resident * (uint64_t)page;
  struct rusage usage;
  if (getrusage(RUSAGE_SELF, &usage) == 0) {
    out->cpu_us = (uint64_t)usage.ru_utime.tv_sec * 1000000 +
                  (uint64_t)usage.ru_utime.tv_usec +
                  (uint64_t)usage.ru_stime.tv_sec * 1000000 +
                  (uint64_t)usage.ru_stime.tv_usec;
  }
  unsigned long long ticks;
  long hz = sysconf(_SC_CLK_TCK);
  if (start_ticks(&ticks) && hz > 0) {
    out->start_time_s = boot_time_s() + ticks / (unsigned long long)hz;
  }
  DIR *fds = opendir("/proc/self/fd");
  if (fds != NULL) {
    struct dirent *entry;
    while ((entry = readdir(fds)) != NULL) {
      if (entry->d_name[0] != '.') {
        out->open_fds++;
      }
    }
    closedir(fds);
    out->open_fds--; /* the directory stream's own descriptor */
  }
  out->valid = true;
}

/* ---- HTTP ---- */

static enum MHD_Result respond(struct MHD_Connection *connection,
                               unsigned status, const char *type, char *body,
                               size_t length,
                               enum MHD_ResponseMemoryMode mode) {
  struct MHD_Response *response =
      MHD_create_response_from_buffer(length, body, mode);
  if (response == NULL) {
    if (mode == MHD_RESPMEM_MUST_FREE) {
      free(body);
    }
    return MHD_NO;
  }
  MHD_add_response_header(response, MHD_HTTP_HEADER_CONTENT_TYPE, type);
  if (status == MHD_HTTP_METHOD_NOT_ALLOWED) {
    MHD_add_response_header(response, MHD_HTTP_HEADER_ALLOW, "GET, HEAD");
  }
  enum MHD_Result result = MHD_queue_response(connection, status, response);
  MHD_destroy_response(response);
  return result;
}

static enum MHD_Result respond_static(struct MHD_Connection *connection,
                                      unsigned status, const char *text) {
  return respond(connection, status, "text/plain; charset=utf-8", (char *)text,
                 strlen(text), MHD_RESPMEM_PERSISTENT);
}

static enum MHD_Result on_request(void *cls, struct MHD_Connection *connection,
                                  const char *url, const char *method,
                                  const char *version, const char *upload_data,
                                  size_t *upload_data_size, void **req_cls) {
  (void)version;
  (void)upload_data;
  reshard_metrics_http *http = cls;
  /* The first call only announces the request (headers read); answer on
   * the second, once any body has been consumed. */
  static int seen;
  if (*req_cls == NULL) {
    *req_cls = &seen;
    return MHD_YES;
  }
  if (*upload_data_size != 0) {
    *upload_data_size = 0; /* a body is ignored */
    return MHD_YES;
  }
  if (strcmp(method, MHD_HTTP_METHOD_GET) != 0 &&
      strcmp(method, MHD_HTTP_METHOD_HEAD) != 0) {
    return respond_static(connection, MHD_HTTP_METHOD_NOT_ALLOWED,
                          "only GET and HEAD are served\n");
  }
  if (strcmp(url, "/") == 0) {
    return respond_static(connection, MHD_HTTP_OK,
                          "reshardd: metrics are at /metrics\n");
  }
  if (strcmp(url, "/metrics") != 0) {
    return respond_static(connection, MHD_HTTP_NOT_FOUND,
                          "not found; metrics are at /metrics\n");
  }
  reshard_metrics_process process;
  reshard_metrics_read_process(&process);
  reshard_metrics_text text = {0};
  if (!reshard_metrics_format(http->metrics, &process, &text)) {
    reshard_metrics_text_free(&text);
    return respond_static(connection, MHD_HTTP_INTERNAL_SERVER_ERROR,
                          "out of memory formatting the metrics\n");
  }
  /* MHD frees the text with free() once it is sent. */
  return respond(connection, MHD_HTTP_OK, content_type, text.data, text.length,
                 MHD_RESPMEM_MUST_FREE);
}

static void on_mhd_log(void *cls, const char *format, va_list args) {
  (void)cls;
  char message[512];
  vsnprintf(message, sizeof message, format, args);
  size_t length = strlen(message);
  while (length > 0 && (message[length - 1] == '\n')) {
    message[--length] = '\0';
  }
  reshard_log_line line;
  if (reshard_log_begin(&line, RESHARD_LOG_WARN, message)) {
    reshard_log_str(&line, "component", "metrics");
    reshard_log_end(&line);
  }
}

/* Splits "HOST:PORT" / "[IPV6]:PORT" and resolves it numerically first,
 * then by name (e.g. "localhost"). */
static bool resolve(const char *listen, struct sockaddr_storage *out,
                    reshard_error *err) {
  char host[256];
  const char *port;
  if (listen[0] == '[') {
    const char *close = strchr(listen, ']');
    if (close == NULL || close[1] != ':' ||
        (size_t)(close - listen - 1) >= sizeof host) {
      reshard_error_set(err, RESHARD_INVALID_ARGUMENT,
                        "--metrics-listen %s: not [IPV6]:PORT", listen);
      return false;
    }
    memcpy(host, listen + 1, (size_t)(close - listen - 1));
    host[close - listen - 1] = '\0';
    port = close + 2;
  } else {
    const char *colon = strrchr(listen, ':');
    if (colon == NULL || (size_t)(colon - listen) >= sizeof host) {
      reshard_error_set(err, RESHARD_INVALID_ARGUMENT,
                        "--metrics-listen %s: not HOST:PORT", listen);
      return false;
    }
    memcpy(host, listen, (size_t)(colon - listen));
    host[colon - listen] = '\0';
    port = colon + 1;
  }
  struct addrinfo hints;
  memset(&hints, 0, sizeof hints);
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  hints.ai_flags = AI_PASSIVE | AI_NUMERICSERV;
  struct addrinfo *found = NULL;
  int rc = getaddrinfo(host, port, &hints, &found);
  if (rc != 0 || found == NULL) {
    reshard_error_set(err, RESHARD_UNAVAILABLE,
                      "--metrics-listen %s: cannot resolve \"%s\": %s", listen,
                      host, gai_strerror(rc));
    return false;
  }
  memset(out, 0, sizeof *out);
  memcpy(out, found->ai_addr, found->ai_addrlen);
  freeaddrinfo(found);
  return true;
}

reshard_metrics_http *reshard_metrics_http_start(const char *listen,
                                                 const reshard_metrics *metrics,
                                                 int *port,
                                                 reshard_error *err) {
  struct sockaddr_storage address;
  if (!resolve(listen, &address, err)) {
    return NULL;
  }
  reshard_metrics_http *http = calloc(1, sizeof *http);
  if (http == NULL) {
    reshard_error_set(err, RESHARD_INTERNAL, "metrics: out of memory");
    return NULL;
  }
  http->metrics = metrics;
  unsigned flags =
      MHD_USE_INTERNAL_POLLING_THREAD | MHD_USE_AUTO | MHD_USE_ERROR_LOG;
  if (address.ss_family == AF_INET6) {
    flags |= MHD_USE_IPv6;
  }
  http->daemon = MHD_start_daemon(
      flags, 0, NULL, NULL, on_request, http, MHD_OPTION_EXTERNAL_LOGGER,
      on_mhd_log, NULL, MHD_OPTION_SOCK_ADDR, (struct sockaddr *)&address,
      MHD_OPTION_CONNECTION_LIMIT, (unsigned)64, MHD_OPTION_CONNECTION_TIMEOUT,
      (unsigned)10, MHD_OPTION_END);
  if (http->daemon == NULL) {
    free(http);
    reshard_error_set(err, RESHARD_UNAVAILABLE,
                      "--metrics-listen %s: cannot bind (address in use or "
                      "not available)",
                      listen);
    return NULL;
  }
  const union MHD_DaemonInfo *info =
      MHD_get_daemon_info(http->daemon, MHD_DAEMON_INFO_BIND_PORT);
  *port = info != NULL ? info->port : 0;
  return http;
}

void reshard_metrics_http_stop(reshard_metrics_http *http) {
  if (http == NULL) {
    return;
  }
  MHD_stop_daemon(http->daemon);
  free(http);
}
