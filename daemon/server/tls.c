#include "server/tls.h"

#include <errno.h>
#include <openssl/bio.h>
#include <openssl/err.h>
#include <openssl/pem.h>
#include <openssl/x509.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <uv.h>

#include "observe/log.h"

/* PEM bundles are a few KiB; anything this large is not one. */
enum { MAX_PEM_BYTES = 1 << 20 };

enum { FILE_CERT, FILE_KEY, FILE_CA, FILE_COUNT };

static const char *const file_flags[FILE_COUNT] = {"--tls-cert", "--tls-key",
                                                   "--tls-client-ca"};

/* What tells one version of a file from the next: Kubernetes swaps a
 * symlink (new inode), editors and cert-manager's own tools rewrite in
 * place (new size or mtime). */
typedef struct file_identity {
  dev_t dev;
  ino_t ino;
  off_t size;
  struct timespec mtime;
} file_identity;

/* One loaded set of files. */
typedef struct pem_set {
  char *text[FILE_COUNT]; /* NUL-terminated; text[FILE_CA] NULL without CA */
  file_identity identity[FILE_COUNT];
} pem_set;

struct reshard_tls {
  char *path[FILE_COUNT]; /* path[FILE_CA] NULL without mutual TLS */
  uv_mutex_t lock;        /* the fetcher runs on gRPC's threads */
  pem_set current;        /* handed to gRPC at the next fetch when fresh */
  bool fresh;             /* current not yet handed to gRPC */
  file_identity rejected[FILE_COUNT]; /* a change already refused */
  bool has_rejected;
};

static bool same_identity(const file_identity *a, const file_identity *b) {
  return a->dev == b->dev && a->ino == b->ino && a->size == b->size &&
         a->mtime.tv_sec == b->mtime.tv_sec &&
         a->mtime.tv_nsec == b->mtime.tv_nsec;
}

static bool same_identities(const file_identity *a, const file_identity *b) {
  for (int i = 0; i < FILE_COUNT; i++) {
    if (!same_identity(&a[i], &b[i])) {
      return false;
    }
  }
  return true;
}

static reshard_status stat_file(const char *path, const char *flag,
                                file_identity *out, reshard_error *err) {
  memset(out, 0, sizeof *out);
  if (path == NULL) {
    return RESHARD_OK;
  }
  struct stat st;
  if (stat(path, &st) != 0) {
    return reshard_error_set(err, RESHARD_INVALID_ARGUMENT, "%s %s: %s", flag,
                             path, strerror(errno));
  }
  out->dev = st.st_dev;
  out->ino = st.st_ino;
  out->size = st.st_size;
  out->mtime = st.st_mtim;
  return RESHARD_OK;
}

static reshard_status read_file(const char *path, const char *flag, char **out,
                                reshard_error *err) {
  FILE *f = fopen(path, "rb");
  if (f == NULL) {
    return reshard_error_set(err, RESHARD_INVALID_ARGUMENT, "%s %s: %s", flag,
                             path, strerror(errno));
  }
  char *buffer = malloc(MAX_PEM_BYTES + 1);
  size_t length = buffer ? fread(buffer, 1, MAX_PEM_BYTES + 1, f) : 0;
  bool failed = buffer == NULL || ferror(f);
  fclose(f);
  if (failed || length > MAX_PEM_BYTES) {
    free(buffer);
    return reshard_error_set(err, RESHARD_INVALID_ARGUMENT, "%s %s: %s", flag,
                             path,
                             failed ? "cannot read" : "larger than 1 MiB");
  }
  buffer[length] = '\0';
  *out = buffer;
  return RESHARD_OK;
}

/* The certificate chain's first certificate and the key must be PEM that
 * OpenSSL parses and must belong together, and the CA bundle must hold a
 * certificate: gRPC would otherwise fail every handshake, later and
 * quietly. */
static reshard_status check_pem(char *const *text, reshard_tls *tls,
                                reshard_error *err) {
  reshard_status status = RESHARD_OK;
  BIO *cert_bio = BIO_new_mem_buf(text[FILE_CERT], -1);
  BIO *key_bio = BIO_new_mem_buf(text[FILE_KEY], -1);
  X509 *cert = cert_bio ? PEM_read_bio_X509(cert_bio, NULL, NULL, NULL) : NULL;
  EVP_PKEY *key =
      key_bio ? PEM_read_bio_PrivateKey(key_bio, NULL, NULL, NULL) : NULL;
  if (cert == NULL) {
    status = reshard_error_set(err, RESHARD_INVALID_ARGUMENT,
                               "--tls-cert %s: no PEM certificate",
                               tls->path[FILE_CERT]);
  } else if (key == NULL) {
    status = reshard_error_set(err, RESHARD_INVALID_ARGUMENT,
                               "--tls-key %s: no PEM private key",
                               tls->path[FILE_KEY]);
  } else if (X509_check_private_key(cert, key) != 1) {
    status = reshard_error_set(
        err, RESHARD_INVALID_ARGUMENT,
        "--tls-key %s: does not match the certificate of --tls-cert %s",
        tls->path[FILE_KEY], tls->path[FILE_CERT]);
  }
  X509_free(cert);
  EVP_PKEY_free(key);
  BIO_free(cert_bio);
  BIO_free(key_bio);
  if (status == RESHARD_OK && text[FILE_CA] != NULL) {
    BIO *ca_bio = BIO_new_mem_buf(text[FILE_CA], -1);
    X509 *ca = ca_bio ? PEM_read_bio_X509(ca_bio, NULL, NULL, NULL) : NULL;
    if (ca == NULL) {
      status = reshard_error_set(err, RESHARD_INVALID_ARGUMENT,
                                 "--tls-client-ca %s: no PEM certificate",
                                 tls->path[FILE_CA]);
    }
    X509_free(ca);
    BIO_free(ca_bio);
  }
  ERR_clear_error();
  return status;
}

static void pem_set_clear(pem_set *set) {
  for (int i = 0; i < FILE_COUNT; i++) {
    free(set->text[i]);
  }
  memset(set, 0, sizeof *set);
}

/* Loads every file into `out` (cleared first), identities taken before the
 * reads so a write racing with us shows as a change next time. */
static reshard_status load(reshard_tls *tls, pem_set *out, reshard_error *err) {
  memset(out, 0, sizeof *out);
  reshard_status status = RESHARD_OK;
  for (int i = 0; i < FILE_COUNT && status == RESHARD_OK; i++) {
    status = stat_file(tls->path[i], file_flags[i], &out->identity[i], err);
  }
  for (int i = 0; i < FILE_COUNT && status == RESHARD_OK; i++) {
    if (tls->path[i] != NULL) {
      status = read_file(tls->path[i], file_flags[i], &out->text[i], err);
    }
  }
  if (status == RESHARD_OK) {
    status = check_pem(out->text, tls, err);
  }
  if (status != RESHARD_OK) {
    pem_set_clear(out);
  }
  return status;
}

static grpc_ssl_server_certificate_config *make_config(const pem_set *set) {
  grpc_ssl_pem_key_cert_pair pair = {set->text[FILE_KEY], set->text[FILE_CERT]};
  /* gRPC 1.51 asserts that a fetched config has root certificates even when
   * no client certificate is asked for; they are then never used, so the
   * server's own chain stands in. */
  const char *roots =
      set->text[FILE_CA] != NULL ? set->text[FILE_CA] : set->text[FILE_CERT];
  return grpc_ssl_server_certificate_config_create(roots, &pair, 1);
}

/* gRPC's fetcher, called before each handshake on one of gRPC's threads
 * (and once while the port is added). */
static grpc_ssl_certificate_config_reload_status
fetch_config(void *data, grpc_ssl_server_certificate_config **config) {
  reshard_tls *tls = data;
  grpc_ssl_certificate_config_reload_status result =
      GRPC_SSL_CERTIFICATE_CONFIG_RELOAD_UNCHANGED;
  uv_mutex_lock(&tls->lock);
  file_identity now[FILE_COUNT];
  reshard_error err;
  bool readable = true, unchanged = true;
  for (int i = 0; i < FILE_COUNT && readable; i++) {
    readable =
        stat_file(tls->path[i], file_flags[i], &now[i], &err) == RESHARD_OK;
    unchanged = unchanged && same_identity(&now[i], &tls->current.identity[i]);
  }
  /* A file missing mid-rotation keeps what we serve; so does a change
   * already refused. */
  if (!tls->fresh && readable && !unchanged &&
      !(tls->has_rejected && same_identities(now, tls->rejected))) {
    pem_set next;
    if (load(tls, &next, &err) == RESHARD_OK) {
      pem_set_clear(&tls->current);
      tls->current = next;
      tls->fresh = true;
      tls->has_rejected = false;
      reshard_log_msg(RESHARD_LOG_INFO, "tls certificate reloaded", NULL);
    } else {
      memcpy(tls->rejected, now, sizeof now);
      tls->has_rejected = true;
      reshard_log_msg(RESHARD_LOG_WARN,
                      "tls files changed but cannot be used; keeping the "
                      "previous certificate",
                      err.message);
    }
  }
  if (tls->fresh) {
    *config = make_config(&tls->current);
    if (*config != NULL) {
      tls->fresh = false;
      result = GRPC_SSL_CERTIFICATE_CONFIG_RELOAD_NEW;
    } else {
      result = GRPC_SSL_CERTIFICATE_CONFIG_RELOAD_FAIL;
    }
  }
  uv_mutex_unlock(&tls->lock);
  return result;
}

reshard_tls *reshard_tls_create(const reshard_tls_files *files,
                                reshard_error *err) {
  reshard_tls *tls = calloc(1, sizeof *tls);
  if (tls == NULL) {
    reshard_error_set(err, RESHARD_INTERNAL, "tls: out of memory");
    return NULL;
  }
  const char *paths[FILE_COUNT] = {files->cert, files->key, files->client_ca};
  for (int i = 0; i < FILE_COUNT; i++) {
    if (paths[i] != NULL && (tls->path[i] = strdup(paths[i])) == NULL) {
      reshard_error_set(err, RESHARD_INTERNAL, "tls: out of memory");
      goto fail;
    }
  }
  if (uv_mutex_init(&tls->lock) != 0) {
    reshard_error_set(err, RESHARD_INTERNAL, "tls: uv_mutex_init");
    goto fail;
  }
  if (load(tls, &tls->current, err) != RESHARD_OK) {
    uv_mutex_destroy(&tls->lock);
    goto fail;
  }
  tls->fresh = true;
  return tls;
fail:
  for (int i = 0; i < FILE_COUNT; i++) {
    free(tls->path[i]);
  }
  free(tls);
  return NULL;
}

grpc_server_credentials *reshard_tls_server_credentials(reshard_tls *tls) {
  grpc_ssl_server_credentials_options *options =
      grpc_ssl_server_credentials_create_options_using_config_fetcher(
          tls->path[FILE_CA] != NULL
              ? GRPC_SSL_REQUEST_AND_REQUIRE_CLIENT_CERTIFICATE_AND_VERIFY
              : GRPC_SSL_DONT_REQUEST_CLIENT_CERTIFICATE,
          fetch_config, tls);
  return options ? grpc_ssl_server_credentials_create_with_options(options)
                 : NULL;
}

void reshard_tls_free(reshard_tls *tls) {
  if (tls == NULL) {
    return;
  }
  pem_set_clear(&tls->current);
  uv_mutex_destroy(&tls->lock);
  for (int i = 0; i < FILE_COUNT; i++) {
    free(tls->path[i]);
  }
  free(tls);
}
