#include "catalog/redis/redis_url.h"

#include <stdio.h>
#include <string.h>

bool reshard_redis_url_split(const char *spec, reshard_redis_url *out) {
  memset(out, 0, sizeof *out);
  const char *scheme = strncmp(spec, "redis-cluster://", 16) == 0
                           ? "redis-cluster://"
                           : "redis://";
  size_t scheme_length = strlen(scheme);
  /* The last '@' ends the credentials: a password may contain '@'. */
  const char *at = strncmp(spec, scheme, scheme_length) == 0
                       ? strrchr(spec + scheme_length, '@')
                       : NULL;
  if (at == NULL) {
    return (size_t)snprintf(out->address, sizeof out->address, "%s", spec) <
           sizeof out->address;
  }
  const char *user = spec + scheme_length;
  const char *colon = memchr(user, ':', (size_t)(at - user));
  if (colon == NULL || colon + 1 == at) {
    return false;
  }
  size_t user_length = (size_t)(colon - user);
  size_t password_length = (size_t)(at - colon - 1);
  if (user_length >= sizeof out->user ||
      password_length >= sizeof out->password ||
      (size_t)snprintf(out->address, sizeof out->address, "%s%s", scheme,
                       at + 1) >= sizeof out->address) {
    reshard_redis_url_wipe(out);
    return false;
  }
  memcpy(out->user, user, user_length);
  memcpy(out->password, colon + 1, password_length);
  return true;
}

void reshard_redis_url_wipe(reshard_redis_url *url) {
  /* volatile: a plain memset before the object dies may be dropped. */
  volatile char *p = (volatile char *)url;
  for (size_t i = 0; i < sizeof *url; i++) {
    p[i] = 0;
  }
}
