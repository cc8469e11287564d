/* libFuzzer target: the daemon's flag and environment parsing. The input
 * is NUL-separated strings: those before the first empty string are argv
 * (after "reshardd"), the rest NAME=VALUE environment entries. A parse
 * that succeeds is printed as --check-config prints it, and every Redis
 * URL goes through the credential splitter. */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "catalog/redis/redis_url.h"
#include "config.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

enum { MAX_STRINGS = 32 };

typedef struct fuzz_env {
  char *names[MAX_STRINGS];
  char *values[MAX_STRINGS];
  size_t count;
} fuzz_env;

static const char *lookup(const char *name, void *data) {
  const fuzz_env *env = data;
  for (size_t i = 0; i < env->count; i++) {
    if (strcmp(env->names[i], name) == 0) {
      return env->values[i];
    }
  }
  return NULL;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  char *text = malloc(size + 1);
  if (text == NULL) {
    return 0;
  }
  memcpy(text, data, size);
  text[size] = '\0';
  char *argv[MAX_STRINGS + 1] = {"reshardd"};
  int argc = 1;
  fuzz_env env = {{0}, {0}, 0};
  bool in_env = false;
  for (char *at = text; at <= text + size && argc < MAX_STRINGS;
       at += strlen(at) + 1) {
    if (*at == '\0') {
      in_env = true;
    } else if (!in_env) {
      argv[argc++] = at;
    } else if (env.count < MAX_STRINGS) {
      char *equals = strchr(at, '=');
      if (equals != NULL) {
        *equals = '\0';
        env.names[env.count] = at;
        env.values[env.count++] = equals + 1;
      }
    }
  }
  reshard_config config;
  reshard_error err;
  if (reshard_config_parse(&config, argc, argv, lookup, &env, &err) ==
      RESHARD_OK) {
    FILE *out = fopen("/dev/null", "w");
    if (out != NULL) {
      reshard_config_print(&config, out);
      fclose(out);
    }
  }
  for (int i = 1; i < argc; i++) {
    reshard_redis_url url;
    if (reshard_redis_url_split(argv[i], &url)) {
      reshard_redis_url_wipe(&url);
    }
    uint64_t number;
    (void)reshard_parse_size(argv[i], &number);
    (void)reshard_parse_duration_ms(argv[i], &number);
    (void)reshard_listen_is_local(argv[i]);
  }
  free(text);
  return 0;
}
