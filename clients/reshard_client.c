/* reshard_client: blocking unary calls over the gRPC C core API. One batch
 * per call carries every client op (send metadata, message, close; receive
 * metadata, message, status), and the call's own tag is plucked from the
 * client's completion queue. */
#include "reshard_client.h"

#include <grpc/byte_buffer.h>
#include <grpc/byte_buffer_reader.h>
#include <grpc/grpc.h>
#include <grpc/grpc_security.h>
#include <grpc/slice.h>
#include <grpc/support/time.h>

#include <stdarg.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

struct reshard_client {
  grpc_channel *channel;
  grpc_completion_queue *cq;
  int64_t default_timeout_ms;
};

static const char *const status_names[] = {
    "OK",
    "CANCELLED",
    "UNKNOWN",
    "INVALID_ARGUMENT",
    "DEADLINE_EXCEEDED",
    "NOT_FOUND",
    "ALREADY_EXISTS",
    "PERMISSION_DENIED",
    "RESOURCE_EXHAUSTED",
    "FAILED_PRECONDITION",
    "ABORTED",
    "OUT_OF_RANGE",
    "UNIMPLEMENTED",
    "INTERNAL",
    "UNAVAILABLE",
    "DATA_LOSS",
    "UNAUTHENTICATED",
};

const char *reshard_status_code_name(int code) {
  if (code < 0 || (size_t)code >= sizeof status_names / sizeof *status_names)
    return "UNKNOWN_CODE";
  return status_names[code];
}

static int set_status(reshard_client_status *st, int code, const char *fmt,
                      ...) {
  va_list ap;
  st->code = code;
  va_start(ap, fmt);
  vsnprintf(st->message, sizeof st->message, fmt, ap);
  va_end(ap);
  return code;
}

/* Reads a whole PEM file; NULL (and st set) when it cannot. */
static char *read_pem(const char *path, const char *what,
                      reshard_client_status *st) {
  FILE *f = fopen(path, "rb");
  if (f == NULL) {
    set_status(st, GRPC_STATUS_INVALID_ARGUMENT, "%s %s: cannot open", what,
               path);
    return NULL;
  }
  size_t cap = 4096, len = 0;
  char *text = malloc(cap);
  while (text != NULL) {
    len += fread(text + len, 1, cap - 1 - len, f);
    if (len < cap - 1 || ferror(f))
      break;
    char *grown = realloc(text, cap * 2);
    if (grown == NULL) {
      free(text);
      text = NULL;
      break;
    }
    text = grown;
    cap *= 2;
  }
  bool failed = text == NULL || ferror(f);
  fclose(f);
  if (failed) {
    free(text);
    set_status(st, GRPC_STATUS_INVALID_ARGUMENT, "%s %s: cannot read", what,
               path);
    return NULL;
  }
  text[len] = '\0';
  return text;
}

/* TLS channel credentials from the files `tls` names. */
static grpc_channel_credentials *tls_credentials(const reshard_client_tls *tls,
                                                 reshard_client_status *st) {
  if ((tls->cert_file == NULL) != (tls->key_file == NULL)) {
    set_status(st, GRPC_STATUS_INVALID_ARGUMENT,
               "--tls-cert and --tls-key: give both or neither");
    return NULL;
  }
  char *roots = NULL, *cert = NULL, *key = NULL;
  grpc_channel_credentials *creds = NULL;
  if (tls->ca_file != NULL &&
      (roots = read_pem(tls->ca_file, "--tls-ca", st)) == NULL)
    goto done;
  if (tls->cert_file != NULL &&
      ((cert = read_pem(tls->cert_file, "--tls-cert", st)) == NULL ||
       (key = read_pem(tls->key_file, "--tls-key", st)) == NULL))
    goto done;
  grpc_ssl_pem_key_cert_pair pair = {key, cert};
  creds = grpc_ssl_credentials_create(roots, cert ? &pair : NULL, NULL, NULL);
  if (creds == NULL)
    set_status(st, GRPC_STATUS_INTERNAL, "cannot create TLS credentials");
done:
  free(roots);
  free(cert);
  if (key != NULL) {
    memset(key, 0, strlen(key));
    free(key);
  }
  return creds;
}

reshard_client *reshard_client_open_tls(const char *target,
                                        int64_t default_timeout_ms,
                                        const reshard_client_tls *tls,
                                        reshard_client_status *st) {
  reshard_client *client = calloc(1, sizeof *client);
  if (client == NULL) {
    set_status(st, GRPC_STATUS_INTERNAL, "out of memory");
    return NULL;
  }
  grpc_init();
  grpc_channel_credentials *creds =
      tls ? tls_credentials(tls, st) : grpc_insecure_credentials_create();
  if (creds == NULL) {
    free(client);
    grpc_shutdown();
    return NULL;
  }
  /* Plans can be far larger than gRPC's 4 MiB default receive limit. */
  grpc_arg args[2];
  memset(args, 0, sizeof args);
  args[0].type = GRPC_ARG_INTEGER;
  args[0].key = GRPC_ARG_MAX_RECEIVE_MESSAGE_LENGTH;
  args[0].value.integer = -1;
  size_t arg_count = 1;
  if (tls != NULL && tls->server_name != NULL) {
    args[1].type = GRPC_ARG_STRING;
    args[1].key = GRPC_SSL_TARGET_NAME_OVERRIDE_ARG;
    args[1].value.string = (char *)tls->server_name;
    arg_count = 2;
  }
  grpc_channel_args channel_args = {arg_count, args};
  client->channel = grpc_channel_create(target, creds, &channel_args);
  grpc_channel_credentials_release(creds);
  client->cq = grpc_completion_queue_create_for_pluck(NULL);
  client->default_timeout_ms =
      default_timeout_ms > 0 ? default_timeout_ms : 10000;
  return client;
}

reshard_client *reshard_client_open(const char *target,
                                    int64_t default_timeout_ms) {
  reshard_client_status st;
  return reshard_client_open_tls(target, default_timeout_ms, NULL, &st);
}

void reshard_client_close(reshard_client *client) {
  if (client == NULL)
    return;
  grpc_channel_destroy(client->channel);
  grpc_completion_queue_shutdown(client->cq);
  /* Every call is plucked before it returns, so the queue holds nothing
   * but the shutdown notice. */
  for (;;) {
    grpc_event ev = grpc_completion_queue_pluck(
        client->cq, NULL, gpr_inf_future(GPR_CLOCK_REALTIME), NULL);
    if (ev.type == GRPC_QUEUE_SHUTDOWN)
      break;
  }
  grpc_completion_queue_destroy(client->cq);
  free(client);
  grpc_shutdown();
}

/* Copies a slice into a C string buffer, truncating when needed. */
static void slice_to_buffer(grpc_slice s, char *buf, size_t cap) {
  size_t n = GRPC_SLICE_LENGTH(s);
  if (n >= cap)
    n = cap - 1;
  memcpy(buf, GRPC_SLICE_START_PTR(s), n);
  buf[n] = '\0';
}

/* Performs the call with an already built request slice (ownership of
 * `request` passes to this function). On OK, *response is the received
 * message flattened into one slice (caller unrefs). */
static int unary_call(reshard_client *client, const char *method,
                      grpc_slice request, int64_t timeout_ms,
                      grpc_slice *response, reshard_client_status *st) {
  if (timeout_ms <= 0)
    timeout_ms = client->default_timeout_ms;
  gpr_timespec deadline =
      gpr_time_add(gpr_now(GPR_CLOCK_MONOTONIC),
                   gpr_time_from_millis(timeout_ms, GPR_TIMESPAN));
  grpc_slice method_slice = grpc_slice_from_copied_string(method);
  grpc_call *call =
      grpc_channel_create_call(client->channel, NULL, GRPC_PROPAGATE_DEFAULTS,
                               client->cq, method_slice, NULL, deadline, NULL);
  grpc_slice_unref(method_slice);
  grpc_byte_buffer *send = grpc_raw_byte_buffer_create(&request, 1);
  grpc_slice_unref(request);
  if (call == NULL) {
    grpc_byte_buffer_destroy(send);
    return set_status(st, RESHARD_STATUS_INTERNAL,
                      "client: cannot create a call for %s", method);
  }

  grpc_metadata_array initial_md, trailing_md;
  grpc_metadata_array_init(&initial_md);
  grpc_metadata_array_init(&trailing_md);
  grpc_byte_buffer *recv = NULL;
  grpc_status_code status = GRPC_STATUS_UNKNOWN;
  grpc_slice details = grpc_empty_slice();

  grpc_op ops[6];
  memset(ops, 0, sizeof ops);
  ops[0].op = GRPC_OP_SEND_INITIAL_METADATA;
  ops[1].op = GRPC_OP_SEND_MESSAGE;
  ops[1].data.send_message.send_message = send;
  ops[2].op = GRPC_OP_SEND_CLOSE_FROM_CLIENT;
  ops[3].op = GRPC_OP_RECV_INITIAL_METADATA;
  ops[3].data.recv_initial_metadata.recv_initial_metadata = &initial_md;
  ops[4].op = GRPC_OP_RECV_MESSAGE;
  ops[4].data.recv_message.recv_message = &recv;
  ops[5].op = GRPC_OP_RECV_STATUS_ON_CLIENT;
  ops[5].data.recv_status_on_client.trailing_metadata = &trailing_md;
  ops[5].data.recv_status_on_client.status = &status;
  ops[5].data.recv_status_on_client.status_details = &details;

  /* The tag only has to be unique on this queue while the call runs. */
  void *tag = &ops[0];
  grpc_call_error err = grpc_call_start_batch(call, ops, 6, tag, NULL);
  if (err != GRPC_CALL_OK) {
    set_status(st, RESHARD_STATUS_INTERNAL,
               "client: grpc_call_start_batch failed (%d)", (int)err);
  } else {
    /* RECV_STATUS_ON_CLIENT completes once the call is over; the call's
     * deadline bounds the wait. */
    grpc_event ev = grpc_completion_queue_pluck(
        client->cq, tag, gpr_inf_future(GPR_CLOCK_REALTIME), NULL);
    if (ev.type != GRPC_OP_COMPLETE) {
      set_status(st, RESHARD_STATUS_INTERNAL,
                 "client: completion queue returned event type %d",
                 (int)ev.type);
    } else {
      st->code = (int)status;
      slice_to_buffer(details, st->message, sizeof st->message);
      if (status == GRPC_STATUS_OK) {
        if (recv == NULL) {
          set_status(st, RESHARD_STATUS_INTERNAL,
                     "client: %s returned OK without a message", method);
        } else {
          grpc_byte_buffer_reader reader;
          if (!grpc_byte_buffer_reader_init(&reader, recv)) {
            set_status(st, RESHARD_STATUS_INTERNAL,
                       "client: cannot read the response of %s", method);
          } else {
            *response = grpc_byte_buffer_reader_readall(&reader);
            grpc_byte_buffer_reader_destroy(&reader);
          }
        }
      }
    }
  }

  grpc_metadata_array_destroy(&initial_md);
  grpc_metadata_array_destroy(&trailing_md);
  grpc_byte_buffer_destroy(send);
  if (recv != NULL)
    grpc_byte_buffer_destroy(recv);
  grpc_slice_unref(details);
  grpc_call_unref(call);
  return st->code;
}

int reshard_client_call_raw(reshard_client *client, const char *method,
                            const uint8_t *request, size_t request_len,
                            int64_t timeout_ms, uint8_t **response_bytes,
                            size_t *response_len, reshard_client_status *st) {
  *response_bytes = NULL;
  *response_len = 0;
  grpc_slice req =
      grpc_slice_from_copied_buffer((const char *)request, request_len);
  grpc_slice resp = grpc_empty_slice();
  if (unary_call(client, method, req, timeout_ms, &resp, st) !=
      RESHARD_STATUS_OK)
    return st->code;
  size_t n = GRPC_SLICE_LENGTH(resp);
  uint8_t *copy = malloc(n > 0 ? n : 1);
  if (copy == NULL) {
    grpc_slice_unref(resp);
    return set_status(st, RESHARD_STATUS_INTERNAL, "client: out of memory");
  }
  memcpy(copy, GRPC_SLICE_START_PTR(resp), n);
  grpc_slice_unref(resp);
  *response_bytes = copy;
  *response_len = n;
  return st->code;
}

int reshard_client_call(reshard_client *client, const char *method,
                        const ProtobufCMessage *request,
                        const ProtobufCMessageDescriptor *response_descriptor,
                        int64_t timeout_ms, ProtobufCMessage **response,
                        reshard_client_status *st) {
  *response = NULL;
  size_t n = protobuf_c_message_get_packed_size(request);
  grpc_slice req = grpc_slice_malloc(n);
  if (protobuf_c_message_pack(request, GRPC_SLICE_START_PTR(req)) != n) {
    grpc_slice_unref(req);
    return set_status(st, RESHARD_STATUS_INTERNAL,
                      "client: cannot serialise %s", request->descriptor->name);
  }
  grpc_slice resp = grpc_empty_slice();
  if (unary_call(client, method, req, timeout_ms, &resp, st) !=
      RESHARD_STATUS_OK)
    return st->code;
  ProtobufCMessage *msg = protobuf_c_message_unpack(response_descriptor, NULL,
                                                    GRPC_SLICE_LENGTH(resp),
                                                    GRPC_SLICE_START_PTR(resp));
  grpc_slice_unref(resp);
  if (msg == NULL)
    return set_status(st, RESHARD_STATUS_INTERNAL,
                      "client: cannot decode the %s response of %s",
                      response_descriptor->name, method);
  *response = msg;
  return st->code;
}

#define RESHARD_TYPED_CALL(fn, path, req_type, resp_type, resp_desc)           \
  int fn(reshard_client *client, const req_type *req, int64_t timeout_ms,      \
         resp_type **resp, reshard_client_status *st) {                        \
    ProtobufCMessage *msg = NULL;                                              \
    int code = reshard_client_call(client, path, &req->base, &resp_desc,       \
                                   timeout_ms, &msg, st);                      \
    *resp = (resp_type *)msg;                                                  \
    return code;                                                               \
  }

RESHARD_TYPED_CALL(reshard_client_publish_manifest,
                   "/reshard.v1.Planner/PublishManifest",
                   Reshard__V1__PublishManifestRequest,
                   Reshard__V1__PublishManifestResponse,
                   reshard__v1__publish_manifest_response__descriptor)
RESHARD_TYPED_CALL(reshard_client_get_manifest,
                   "/reshard.v1.Planner/GetManifest",
                   Reshard__V1__GetManifestRequest,
                   Reshard__V1__GetManifestResponse,
                   reshard__v1__get_manifest_response__descriptor)
RESHARD_TYPED_CALL(reshard_client_register_pages,
                   "/reshard.v1.Planner/RegisterPages",
                   Reshard__V1__RegisterPagesRequest,
                   Reshard__V1__RegisterPagesResponse,
                   reshard__v1__register_pages_response__descriptor)
RESHARD_TYPED_CALL(reshard_client_forget_pages,
                   "/reshard.v1.Planner/ForgetPages",
                   Reshard__V1__ForgetPagesRequest,
                   Reshard__V1__ForgetPagesResponse,
                   reshard__v1__forget_pages_response__descriptor)
RESHARD_TYPED_CALL(reshard_client_register_placement,
                   "/reshard.v1.Planner/RegisterPlacement",
                   Reshard__V1__RegisterPlacementRequest,
                   Reshard__V1__RegisterPlacementResponse,
                   reshard__v1__register_placement_response__descriptor)
RESHARD_TYPED_CALL(reshard_client_plan_upload, "/reshard.v1.Planner/PlanUpload",
                   Reshard__V1__PlanUploadRequest,
                   Reshard__V1__PlanUploadResponse,
                   reshard__v1__plan_upload_response__descriptor)
RESHARD_TYPED_CALL(reshard_client_plan_load, "/reshard.v1.Planner/PlanLoad",
                   Reshard__V1__PlanLoadRequest, Reshard__V1__PlanLoadResponse,
                   reshard__v1__plan_load_response__descriptor)
RESHARD_TYPED_CALL(reshard_client_plan_store, "/reshard.v1.Planner/PlanStore",
                   Reshard__V1__PlanStoreRequest,
                   Reshard__V1__PlanStoreResponse,
                   reshard__v1__plan_store_response__descriptor)
RESHARD_TYPED_CALL(reshard_client_register_memory,
                   "/reshard.v1.Planner/RegisterMemory",
                   Reshard__V1__RegisterMemoryRequest,
                   Reshard__V1__RegisterMemoryResponse,
                   reshard__v1__register_memory_response__descriptor)
RESHARD_TYPED_CALL(reshard_client_forget_memory,
                   "/reshard.v1.Planner/ForgetMemory",
                   Reshard__V1__ForgetMemoryRequest,
                   Reshard__V1__ForgetMemoryResponse,
                   reshard__v1__forget_memory_response__descriptor)
RESHARD_TYPED_CALL(reshard_client_plan_transfer,
                   "/reshard.v1.Planner/PlanTransfer",
                   Reshard__V1__PlanTransferRequest,
                   Reshard__V1__PlanTransferResponse,
                   reshard__v1__plan_transfer_response__descriptor)
RESHARD_TYPED_CALL(reshard_client_health_check, "/grpc.health.v1.Health/Check",
                   Grpc__Health__V1__HealthCheckRequest,
                   Grpc__Health__V1__HealthCheckResponse,
                   grpc__health__v1__health_check_response__descriptor)
