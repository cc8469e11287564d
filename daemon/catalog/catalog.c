/* The helpers every catalog backend shares (catalog.h): copying an
 * operation's inputs, naming object kinds and growing arrays. No backend is
 * known here. */
#include "catalog/catalog.h"

#include <stdlib.h>
#include <string.h>

void *reshard_catalog_op_alloc(size_t op_size, const reshard_catalog_args *in,
                               reshard_catalog_args *copy) {
  size_t key_bytes = in->manifest_key ? strlen(in->manifest_key) + 1 : 0;
  size_t domain_bytes = in->domain ? strlen(in->domain) + 1 : 0;
  size_t head = op_size + in->key_count * sizeof(char *);
  size_t strings = key_bytes + domain_bytes + in->length;
  for (size_t i = 0; i < in->key_count; i++) {
    strings += strlen(in->keys[i]) + 1;
  }
  char *block = malloc(head + strings);
  if (block == NULL) {
    return NULL;
  }
  memset(block, 0, op_size);
  *copy = (reshard_catalog_args){
      .keys = (const char **)(block + op_size),
      .key_count = in->key_count,
      .length = in->length,
  };
  char *at = block + head;
  if (in->manifest_key != NULL) {
    memcpy(at, in->manifest_key, key_bytes);
    copy->manifest_key = at;
    at += key_bytes;
  }
  if (in->domain != NULL) {
    memcpy(at, in->domain, domain_bytes);
    copy->domain = at;
    at += domain_bytes;
  }
  for (size_t i = 0; i < in->key_count; i++) {
    size_t n = strlen(in->keys[i]) + 1;
    memcpy(at, in->keys[i], n);
    copy->keys[i] = at;
    at += n;
  }
  if (in->length > 0) {
    memcpy(at, in->record, in->length);
  }
  copy->record = (const uint8_t *)at;
  return block;
}

const char *reshard_catalog_object_kind_name(reshard_catalog_object_kind kind) {
  switch (kind) {
  case RESHARD_CATALOG_OBJECT_PLACEMENT:
    return "placement";
  case RESHARD_CATALOG_OBJECT_MEMORY_POOL:
    return "memory pool";
  }
  return "object";
}

bool reshard_catalog_grow(void **array, size_t *capacity, size_t need,
                          size_t size) {
  if (need <= *capacity) {
    return true;
  }
  size_t next = *capacity ? *capacity * 2 : 16;
  while (next < need) {
    next *= 2;
  }
  void *grown = realloc(*array, next * size);
  if (grown == NULL) {
    return false;
  }
  *array = grown;
  *capacity = next;
  return true;
}
