/* Runs a libFuzzer target's LLVMFuzzerTestOneInput over files and
 * directories of inputs, without libFuzzer: ctest replays the committed
 * seeds and every regression input in the ordinary and sanitizer builds,
 * built with any compiler. Exit status 0 when every input ran. */
#include <dirent.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static int run_file(const char *path) {
  FILE *f = fopen(path, "rb");
  if (f == NULL) {
    perror(path);
    return 1;
  }
  size_t cap = 4096, len = 0;
  uint8_t *buffer = malloc(cap);
  size_t n;
  while (buffer != NULL && (n = fread(buffer + len, 1, cap - len, f)) > 0) {
    len += n;
    if (len == cap) {
      uint8_t *grown = realloc(buffer, cap * 2);
      if (grown == NULL) {
        free(buffer);
        buffer = NULL;
      }
      buffer = grown;
      cap *= 2;
    }
  }
  fclose(f);
  if (buffer == NULL) {
    fprintf(stderr, "%s: out of memory\n", path);
    return 1;
  }
  LLVMFuzzerTestOneInput(buffer, len);
  free(buffer);
  return 0;
}

static int run_path(const char *path, size_t *count) {
  struct stat st;
  if (stat(path, &st) != 0) {
    perror(path);
    return 1;
  }
  if (!S_ISDIR(st.st_mode)) {
    ++*count;
    return run_file(path);
  }
  DIR *dir = opendir(path);
  if (dir == NULL) {
    perror(path);
    return 1;
  }
  int failures = 0;
  struct dirent *entry;
  while ((entry = readdir(dir)) != NULL) {
    if (entry->d_name[0] == '.') {
      continue;
    }
    char child[4096];
    snprintf(child, sizeof child, "%s/%s", path, entry->d_name);
    failures += run_path(child, count);
  }
  closedir(dir);
  return failures;
}

int main(int argc, char **argv) {
  size_t count = 0;
  int failures = 0;
  for (int i = 1; i < argc; i++) {
    failures += run_path(argv[i], &count);
  }
  printf("%zu inputs replayed\n", count);
  return failures == 0 && count > 0 ? 0 : 1;
}
