#include "server/health.h"

#include <stdlib.h>
#include <string.h>

#include "grpc/health/v1/health.pb-c.h"
#include "wire/wire.h"

typedef Grpc__Health__V1__HealthCheckResponse__ServingStatus serving_status;

typedef struct watcher {
  struct watcher *prev, *next;
  reshard_health *health;
  reshard_call *call;
  bool known;          /* the service name is one we report */
  serving_status sent; /* the last status written */
  bool has_sent;
} watcher;

struct reshard_health {
  bool serving;
  watcher *watchers;
};

static const char *const services[] = {"", "reshard.v1.Planner"};

static bool known_service(const char *name) {
  for (size_t i = 0; i < sizeof services / sizeof services[0]; i++) {
    if (strcmp(name, services[i]) == 0) {
      return true;
    }
  }
  return false;
}

static serving_status current(const reshard_health *health, bool known) {
  if (!known) {
    return GRPC__HEALTH__V1__HEALTH_CHECK_RESPONSE__SERVING_STATUS__SERVICE_UNKNOWN;
  }
  return health->serving
             ? GRPC__HEALTH__V1__HEALTH_CHECK_RESPONSE__SERVING_STATUS__SERVING
             : GRPC__HEALTH__V1__HEALTH_CHECK_RESPONSE__SERVING_STATUS__NOT_SERVING;
}

static Grpc__Health__V1__HealthCheckRequest *decode(reshard_call *call) {
  size_t length;
  const uint8_t *payload = reshard_call_payload(call, &length);
  reshard_error err;
  ProtobufCMessage *message =
      reshard_wire_unpack(&grpc__health__v1__health_check_request__descriptor,
                          payload, length, reshard_call_arena(call), &err);
  if (message == NULL) {
    reshard_call_fail(call, &err);
  }
  return (Grpc__Health__V1__HealthCheckRequest *)message;
}

static void on_check(reshard_call *call, void *data) {
  reshard_health *health = data;
  Grpc__Health__V1__HealthCheckRequest *request = decode(call);
  if (request == NULL) {
    return;
  }
  if (!known_service(request->service)) {
    reshard_error err;
    reshard_error_set(&err, RESHARD_NOT_FOUND, "service \"%s\": unknown",
                      request->service);
    reshard_call_fail(call, &err);
    return;
  }
  Grpc__Health__V1__HealthCheckResponse response =
      GRPC__HEALTH__V1__HEALTH_CHECK_RESPONSE__INIT;
  response.status = current(health, true);
  reshard_call_reply(call, &response.base);
}

static void watcher_write(watcher *w);

static void on_written(reshard_call *call, bool ok, void *data) {
  (void)call;
  watcher *w = data;
  if (ok) {
    watcher_write(w); /* the status may have changed meanwhile */
  }
}

/* Writes the current status when it differs from the last one sent and
 * the call can take a write. */
static void watcher_write(watcher *w) {
  serving_status status = current(w->health, w->known);
  if ((w->has_sent && w->sent == status) || !reshard_call_writable(w->call)) {
    return;
  }
  Grpc__Health__V1__HealthCheckResponse response =
      GRPC__HEALTH__V1__HEALTH_CHECK_RESPONSE__INIT;
  response.status = status;
  if (reshard_call_write(w->call, &response.base, on_written, w)) {
    w->sent = status;
    w->has_sent = true;
  }
}

static void on_watch_done(reshard_call *call, void *data) {
  (void)call;
  watcher *w = data;
  if (w->prev) {
    w->prev->next = w->next;
  } else {
    w->health->watchers = w->next;
  }
  if (w->next) {
    w->next->prev = w->prev;
  }
  free(w);
}

static void on_watch(reshard_call *call, void *data) {
  reshard_health *health = data;
  Grpc__Health__V1__HealthCheckRequest *request = decode(call);
  if (request == NULL) {
    return;
  }
  watcher *w = calloc(1, sizeof *w);
  if (w == NULL) {
    reshard_call_fail_code(call, RESHARD_RESOURCE_EXHAUSTED, "out of memory");
    return;
  }
  w->health = health;
  w->call = call;
  w->known = known_service(request->service);
  w->next = health->watchers;
  if (health->watchers) {
    health->watchers->prev = w;
  }
  health->watchers = w;
  reshard_call_on_done(call, on_watch_done, w);
  watcher_write(w);
}

reshard_health *reshard_health_create(reshard_server *server) {
  reshard_health *health = calloc(1, sizeof *health);
  if (health == NULL) {
    return NULL;
  }
  health->serving = true;
  reshard_server_add_method(server, "/grpc.health.v1.Health/Check",
                            RESHARD_METHOD_WHILE_DRAINING, on_check, health);
  reshard_server_add_method(server, "/grpc.health.v1.Health/Watch",
                            RESHARD_METHOD_WHILE_DRAINING |
                                RESHARD_METHOD_STREAMING,
                            on_watch, health);
  return health;
}

void reshard_health_set_serving(reshard_health *health, bool serving) {
  health->serving = serving;
  for (watcher *w = health->watchers; w != NULL; w = w->next) {
    watcher_write(w);
  }
}

void reshard_health_free(reshard_health *health) {
  free(health);
}
