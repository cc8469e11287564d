/* reshard_client: a small blocking client for the reshardd Planner service
 * and the standard grpc.health.v1.Health service, over the gRPC C core API.
 *
 * Messages are the protobuf-c types generated from
 * proto/reshard/v1/planner.proto and grpc/health/v1/health.proto. Requests
 * stay owned by the caller; every response returned through an out pointer
 * is owned by the caller and freed with protobuf_c_message_free_unpacked(
 * &resp->base, NULL) (or the generated *__free_unpacked function).
 *
 * A client owns one channel and one pluck completion queue. Calls block the
 * calling thread until the call completes or its deadline passes. A client
 * is used by one thread at a time; open one client per thread for
 * concurrency.
 */
#ifndef RESHARD_CLIENT_H
#define RESHARD_CLIENT_H

#include <stddef.h>
#include <stdint.h>

#include <protobuf-c/protobuf-c.h>

#include "grpc/health/v1/health.pb-c.h"
#include "reshard/v1/planner.pb-c.h"

/* gRPC status codes (numerically identical to grpc_status_code, repeated
 * here so this header does not pull in grpc.h). */
enum {
  RESHARD_STATUS_OK = 0,
  RESHARD_STATUS_CANCELLED = 1,
  RESHARD_STATUS_UNKNOWN = 2,
  RESHARD_STATUS_INVALID_ARGUMENT = 3,
  RESHARD_STATUS_DEADLINE_EXCEEDED = 4,
  RESHARD_STATUS_NOT_FOUND = 5,
  RESHARD_STATUS_ALREADY_EXISTS = 6,
  RESHARD_STATUS_PERMISSION_DENIED = 7,
  RESHARD_STATUS_RESOURCE_EXHAUSTED = 8,
  RESHARD_STATUS_FAILED_PRECONDITION = 9,
  RESHARD_STATUS_ABORTED = 10,
  RESHARD_STATUS_OUT_OF_RANGE = 11,
  RESHARD_STATUS_UNIMPLEMENTED = 12,
  RESHARD_STATUS_INTERNAL = 13,
  RESHARD_STATUS_UNAVAILABLE = 14,
  RESHARD_STATUS_DATA_LOSS = 15,
  RESHARD_STATUS_UNAUTHENTICATED = 16
};

/* The outcome of one call: the gRPC status code and its message. Owned by
 * the caller (usually on the stack) and filled by every call. Failures that
 * happen inside the client (a request that cannot be serialised, a response
 * that cannot be decoded) are reported as INTERNAL with a message saying
 * so. */
typedef struct reshard_client_status {
  int code;
  char message[1024];
} reshard_client_status;

typedef struct reshard_client reshard_client;

/* Returns the canonical upper-case name of a gRPC status code, e.g.
 * "NOT_FOUND", or "UNKNOWN_CODE" for a number outside 0..16. The string is
 * static. */
const char *reshard_status_code_name(int code);

/* Opens a client for `target` ("HOST:PORT" or any gRPC target URI) over an
 * insecure channel. `default_timeout_ms` (> 0) is the deadline used by calls
 * that pass 0. The channel connects lazily, so an unreachable target is
 * reported by the first call (UNAVAILABLE), not here. Returns NULL only when
 * memory runs out. Initialises the gRPC library; reshard_client_close()
 * releases that reference. */
reshard_client *reshard_client_open(const char *target,
                                    int64_t default_timeout_ms);

/* TLS for a client (SPEC §3.5). Every member may be NULL. */
typedef struct reshard_client_tls {
  const char *ca_file;     /* PEM roots the server must chain to; NULL:
                              the system's roots */
  const char *cert_file;   /* PEM certificate for mutual TLS, with key_file */
  const char *key_file;    /* its PEM private key */
  const char *server_name; /* the name to verify the server's certificate
                              against instead of the target's host */
} reshard_client_tls;

/* Like reshard_client_open(), over TLS when `tls` is not NULL. The files
 * are read now: a file that cannot be read, or a certificate without its
 * key, returns NULL with st->code INVALID_ARGUMENT (3) and a message
 * naming the file; running out of memory returns NULL with INTERNAL.
 * `st` must not be NULL. */
reshard_client *reshard_client_open_tls(const char *target,
                                        int64_t default_timeout_ms,
                                        const reshard_client_tls *tls,
                                        reshard_client_status *st);

/* Closes the channel and frees the client. NULL is accepted. */
void reshard_client_close(reshard_client *client);

/* Performs one blocking unary call of `method` (the full path, e.g.
 * "/reshard.v1.Planner/PlanLoad"). `request` is serialised with protobuf-c;
 * on status OK the response is decoded with `response_descriptor` into
 * *response (caller-owned). `timeout_ms` <= 0 uses the client's default.
 * Returns the status code (also stored in st->code); *response is NULL
 * unless the code is OK. `st` must not be NULL. */
int reshard_client_call(reshard_client *client, const char *method,
                        const ProtobufCMessage *request,
                        const ProtobufCMessageDescriptor *response_descriptor,
                        int64_t timeout_ms, ProtobufCMessage **response,
                        reshard_client_status *st);

/* The same as reshard_client_call() with an already serialised request
 * (`request_len` bytes, which may be malformed on purpose: tests use this).
 * On OK the raw response bytes are returned in *response_bytes (malloc'd,
 * caller frees) and their length in *response_len. */
int reshard_client_call_raw(reshard_client *client, const char *method,
                            const uint8_t *request, size_t request_len,
                            int64_t timeout_ms, uint8_t **response_bytes,
                            size_t *response_len, reshard_client_status *st);

/* Typed wrappers for the Planner RPCs of SPEC §3.3 and Health/Check. Each
 * returns the status code and stores a caller-owned response in *resp on
 * OK (NULL otherwise). `timeout_ms` <= 0 uses the client's default. */
int reshard_client_publish_manifest(
    reshard_client *client, const Reshard__V1__PublishManifestRequest *req,
    int64_t timeout_ms, Reshard__V1__PublishManifestResponse **resp,
    reshard_client_status *st);
int reshard_client_get_manifest(reshard_client *client,
                                const Reshard__V1__GetManifestRequest *req,
                                int64_t timeout_ms,
                                Reshard__V1__GetManifestResponse **resp,
                                reshard_client_status *st);
int reshard_client_register_pages(reshard_client *client,
                                  const Reshard__V1__RegisterPagesRequest *req,
                                  int64_t timeout_ms,
                                  Reshard__V1__RegisterPagesResponse **resp,
                                  reshard_client_status *st);
int reshard_client_forget_pages(reshard_client *client,
                                const Reshard__V1__ForgetPagesRequest *req,
                                int64_t timeout_ms,
                                Reshard__V1__ForgetPagesResponse **resp,
                                reshard_client_status *st);
int reshard_client_register_placement(
    reshard_client *client, const Reshard__V1__RegisterPlacementRequest *req,
    int64_t timeout_ms, Reshard__V1__RegisterPlacementResponse **resp,
    reshard_client_status *st);
int reshard_client_plan_upload(reshard_client *client,
                               const Reshard__V1__PlanUploadRequest *req,
                               int64_t timeout_ms,
                               Reshard__V1__PlanUploadResponse **resp,
                               reshard_client_status *st);
int reshard_client_plan_load(reshard_client *client,
                             const Reshard__V1__PlanLoadRequest *req,
                             int64_t timeout_ms,
                             Reshard__V1__PlanLoadResponse **resp,
                             reshard_client_status *st);
int reshard_client_plan_store(reshard_client *client,
                              const Reshard__V1__PlanStoreRequest *req,
                              int64_t timeout_ms,
                              Reshard__V1__PlanStoreResponse **resp,
                              reshard_client_status *st);
/* SPEC §1.5a: validate a MemoryPool against a placement (inline or by id)
 * and store it; the response carries its memory_id and whether this call
 * created it. */
int reshard_client_register_memory(
    reshard_client *client, const Reshard__V1__RegisterMemoryRequest *req,
    int64_t timeout_ms, Reshard__V1__RegisterMemoryResponse **resp,
    reshard_client_status *st);
/* Forgets a registered pool; `removed` says whether it was known. */
int reshard_client_forget_memory(reshard_client *client,
                                 const Reshard__V1__ForgetMemoryRequest *req,
                                 int64_t timeout_ms,
                                 Reshard__V1__ForgetMemoryResponse **resp,
                                 reshard_client_status *st);
/* SPEC §2.6: plans the transfer of tokens [0, token_count) from a live
 * source instance's registered pools (`source_memory_ids`, the source DP
 * replica's `source_block_ids`) into one target participant's memory
 * (`binding` or `pooled`). Every batch of the response reads one source:
 * `source_index` into `sources` (participant, endpoint, memory id, the
 * pool's regions with addresses), `source_region_index` into that source's
 * regions, `region_index` into `region_ids`. */
int reshard_client_plan_transfer(reshard_client *client,
                                 const Reshard__V1__PlanTransferRequest *req,
                                 int64_t timeout_ms,
                                 Reshard__V1__PlanTransferResponse **resp,
                                 reshard_client_status *st);
int reshard_client_health_check(reshard_client *client,
                                const Grpc__Health__V1__HealthCheckRequest *req,
                                int64_t timeout_ms,
                                Grpc__Health__V1__HealthCheckResponse **resp,
                                reshard_client_status *st);

#endif /* RESHARD_CLIENT_H */
