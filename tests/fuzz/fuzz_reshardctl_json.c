/* libFuzzer target: reshardctl's JSON input (clients/reshard_pbjson.c).
 * The first byte picks the message type a command reads; the rest is the
 * JSON text. A message that converts is converted back to JSON and
 * serialised, as `reshardctl plan --format json` prints. */
#include <jansson.h>
#include <stdint.h>
#include <stdlib.h>

#include "reshard/v1/planner.pb-c.h"
#include "reshard_pbjson.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static const ProtobufCMessageDescriptor *const types[] = {
    &reshard__v1__store_manifest__descriptor,
    &reshard__v1__placement__descriptor,
    &reshard__v1__plan_upload_request__descriptor,
    &reshard__v1__plan_load_request__descriptor,
    &reshard__v1__plan_store_request__descriptor,
    &reshard__v1__plan_load_response__descriptor,
    /* register-memory and --pooled (appended: seeds keep their types) */
    &reshard__v1__memory_pool__descriptor,
    &reshard__v1__register_memory_request__descriptor,
    &reshard__v1__pooled_memory__descriptor,
};

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  if (size < 1) {
    return 0;
  }
  const ProtobufCMessageDescriptor *type =
      types[data[0] % (sizeof types / sizeof *types)];
  json_error_t jerr;
  json_t *json =
      json_loadb((const char *)data + 1, size - 1, JSON_DECODE_ANY, &jerr);
  if (json == NULL) {
    return 0;
  }
  char err[512];
  ProtobufCMessage *m = reshard_pbjson_to_message(json, type, err, sizeof err);
  json_decref(json);
  if (m != NULL) {
    json_t *back = reshard_pbjson_from_message(m);
    if (back != NULL) {
      free(json_dumps(back, JSON_COMPACT));
      json_decref(back);
    }
    uint8_t *packed = malloc(protobuf_c_message_get_packed_size(m) + 1);
    if (packed != NULL) {
      protobuf_c_message_pack(m, packed);
      free(packed);
    }
    protobuf_c_message_free_unpacked(m, NULL);
  }
  return 0;
}
