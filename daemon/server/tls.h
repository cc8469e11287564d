/* TLS for the gRPC listener (SPEC §3.5): the server certificate and key,
 * and optionally the CA that client certificates must chain to (mutual
 * TLS). The files are re-read when they change, without a restart: gRPC's
 * certificate-config fetcher asks this module before each new connection's
 * handshake, and a file whose identity (device, inode, size, modification
 * time) changed since the last load is read again. Connections already
 * open keep the certificate they were made with. */
#ifndef RESHARD_TLS_H
#define RESHARD_TLS_H

#include <grpc/grpc_security.h>

#include "reshard/error.h"

typedef struct reshard_tls reshard_tls;

/* Paths to PEM files; `client_ca` may be NULL (no client certificates
 * asked for). The strings are copied. */
typedef struct reshard_tls_files {
  const char *cert;
  const char *key;
  const char *client_ca;
} reshard_tls_files;

/* Reads and checks the files now (each readable, each PEM that OpenSSL
 * parses, the key matching the certificate), so a bad file fails the start
 * with INVALID_ARGUMENT naming its flag. Returns NULL with `err` set on a
 * bad file or when memory runs out. */
reshard_tls *reshard_tls_create(const reshard_tls_files *files,
                                reshard_error *err);

/* New server credentials that fetch their certificate config from `tls`;
 * the caller releases them (grpc_server_credentials_release) and keeps
 * `tls` alive until the gRPC server using them is destroyed. */
grpc_server_credentials *reshard_tls_server_credentials(reshard_tls *tls);

/* Frees `tls`; NULL is accepted. */
void reshard_tls_free(reshard_tls *tls);

#endif
