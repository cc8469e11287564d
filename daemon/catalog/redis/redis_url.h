/* Credentials in a Redis catalog URL (SPEC §3.5):
 * "redis://[[USER]:PASSWORD@]HOST:PORT[/DB]" or
 * "redis-cluster://[[USER]:PASSWORD@]HOST:PORT[,HOST:PORT...]". Split here,
 * once, so the password is kept apart from the address that logs, messages,
 * --check-config and metrics show. Pure. */
#ifndef RESHARD_REDIS_URL_H
#define RESHARD_REDIS_URL_H

#include <stdbool.h>

typedef struct reshard_redis_url {
  char address[300];  /* "redis://HOST:PORT[/DB]" (or the cluster's
                         "redis-cluster://HOST:PORT,..."): safe to show */
  char user[128];     /* empty: the default user */
  char password[512]; /* empty: none in the URL */
} reshard_redis_url;

/* Splits `spec` into `out`. Returns false when the credentials part is
 * malformed (no ':' before the password, an empty password, a field too
 * long); the address part is not checked here. A spec without credentials
 * is copied to out->address. The caller wipes `out` when done
 * (reshard_redis_url_wipe). */
bool reshard_redis_url_split(const char *spec, reshard_redis_url *out);

/* Overwrites the credentials so they do not linger in memory. */
void reshard_redis_url_wipe(reshard_redis_url *url);

#endif
