/* The LMDB catalog: see catalog_lmdb.h for the contract, docs/catalog.md
 * for the record layout and lmdb_internal.h for how the files divide it.
 *
 * This file opens the environment (directory checks, the lock, the format
 * record, the named databases), maps LMDB errors, closes, and holds the
 * vtable; lmdb_internal.h lists the rest. */
#include "catalog/lmdb/catalog_lmdb.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <lmdb.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <sys/statvfs.h>
#include <unistd.h>

#include "catalog/lmdb/lmdb_internal.h"
#include "observe/log.h"

#define DB_META "meta"
#define DB_MANIFESTS "manifests"
#define DB_MANIFEST_KEYS "manifest_keys"
#define DB_DOMAINS "domains"
#define DB_PAGES "pages"
#define DB_PLACEMENTS "placements"
#define DB_MEMORY_POOLS "memory_pools"
#define META_FORMAT_KEY "format"

/* ---- Errors ---- */

/* LMDB reports a short write (what a full disk gives pwrite) as EIO; the
 * filesystem tells whether that is what happened. */
static bool disk_full(const char *path) {
  struct statvfs fs;
  return statvfs(path, &fs) == 0 &&
         (uint64_t)fs.f_bavail * fs.f_frsize < 1024 * 1024;
}

reshard_status reshard__lmdb_error(const lmdb_catalog *c, reshard_error *err,
                                   int rc, const char *what) {
  if (rc == MDB_MAP_FULL) {
    return reshard_error_set(
        err, RESHARD_RESOURCE_EXHAUSTED,
        "catalog lmdb:%s: full: %s needs more than the LMDB map of %" PRIu64
        " bytes holds",
        c->path, what, c->map_size);
  }
  if (rc == ENOSPC || rc == EDQUOT || (rc == EIO && disk_full(c->path))) {
    /* The client can retry elsewhere or later; nothing of ours broke. */
    return reshard_error_set(err, RESHARD_RESOURCE_EXHAUSTED,
                             "catalog lmdb:%s: %s: the disk is full (%s); "
                             "nothing of this request was stored",
                             c->path, what, mdb_strerror(rc));
  }
  return reshard_error_set(err, RESHARD_INTERNAL, "catalog lmdb:%s: %s: %s",
                           c->path, what, mdb_strerror(rc));
}

/* ---- Closing ---- */

/* Closes the environment, then lets the directory go to another daemon. */
static void close_env(lmdb_catalog *c) {
  mdb_env_close(c->env);
  close(c->dir_fd);
}

void reshard__lmdb_finish_close(uv_handle_t *handle) {
  lmdb_catalog *c = handle->data;
  if (c->read_txn != NULL) {
    mdb_txn_abort(c->read_txn);
  }
  close_env(c);
  uv_cond_destroy(&c->wake);
  uv_mutex_destroy(&c->lock);
  reshard_catalog_close_cb cb = c->close_cb;
  void *data = c->close_data;
  free(c);
  if (cb != NULL) {
    cb(data);
  }
}

static void lmdb_close(reshard_catalog *catalog, reshard_catalog_close_cb cb,
                       void *data) {
  lmdb_catalog *c = (lmdb_catalog *)catalog;
  c->closing = true;
  c->close_cb = cb;
  c->close_data = data;
  /* Keep the loop alive until the writer has drained its queue. */
  uv_ref((uv_handle_t *)&c->async);
  uv_mutex_lock(&c->lock);
  c->stopping = true;
  uv_cond_signal(&c->wake);
  uv_mutex_unlock(&c->lock);
}

static const reshard_catalog_vtable lmdb_vtable = {
    .name = "lmdb",
    .lookups_are_local = true,
    .put_manifest = reshard__lmdb_put_manifest,
    .get_manifests = reshard__lmdb_get_manifests,
    .add_pages = reshard__lmdb_add_pages,
    .forget_pages = reshard__lmdb_forget_pages,
    .lookup_pages = reshard__lmdb_lookup_pages,
    .put_object = reshard__lmdb_put_object,
    .get_objects = reshard__lmdb_get_objects,
    .forget_object = reshard__lmdb_forget_object,
    .close = lmdb_close,
};

void reshard_catalog_lmdb_stats_get(const reshard_catalog *catalog,
                                    reshard_catalog_lmdb_stats *out) {
  lmdb_catalog *c = (lmdb_catalog *)catalog;
  uv_mutex_lock(&c->lock);
  out->commits = c->commits;
  out->writes = c->writes;
  uv_mutex_unlock(&c->lock);
  out->writes_skipped = c->writes_skipped;
}

/* ---- Opening ---- */

/* Creates `path` and its missing parents (mkdir -p). */
static int make_dirs(const char *path) {
  size_t length = strlen(path);
  char *copy = malloc(length + 1);
  if (copy == NULL) {
    return ENOMEM;
  }
  memcpy(copy, path, length + 1);
  for (char *p = copy + 1; *p; p++) {
    if (*p == '/') {
      *p = '\0';
      if (mkdir(copy, 0700) != 0 && errno != EEXIST) {
        int saved = errno;
        free(copy);
        return saved;
      }
      *p = '/';
    }
  }
  /* The catalog is readable by the daemon's user only (SPEC §3.5). */
  int rc = mkdir(copy, 0700) != 0 && errno != EEXIST ? errno : 0;
  free(copy);
  return rc;
}

/* Makes sure `path` is a directory that holds nothing but LMDB's files. */
static reshard_status prepare_dir(const char *path, reshard_error *err) {
  struct stat st;
  if (stat(path, &st) != 0) {
    if (errno != ENOENT) {
      return reshard_error_set(err, RESHARD_INVALID_ARGUMENT,
                               "catalog lmdb:%s: %s", path, strerror(errno));
    }
    int rc = make_dirs(path);
    if (rc != 0) {
      return reshard_error_set(err, RESHARD_INVALID_ARGUMENT,
                               "catalog lmdb:%s: cannot create the directory: "
                               "%s",
                               path, strerror(rc));
    }
    return RESHARD_OK;
  }
  if (!S_ISDIR(st.st_mode)) {
    return reshard_error_set(err, RESHARD_INVALID_ARGUMENT,
                             "catalog lmdb:%s: not a directory (the LMDB "
                             "catalog is a directory holding data.mdb and "
                             "lock.mdb); refusing to use it",
                             path);
  }
  DIR *dir = opendir(path);
  if (dir == NULL) {
    return reshard_error_set(err, RESHARD_INVALID_ARGUMENT,
                             "catalog lmdb:%s: %s", path, strerror(errno));
  }
  reshard_status status = RESHARD_OK;
  struct dirent *entry;
  while ((entry = readdir(dir)) != NULL) {
    const char *name = entry->d_name;
    if (strcmp(name, ".") != 0 && strcmp(name, "..") != 0 &&
        strcmp(name, "data.mdb") != 0 && strcmp(name, "lock.mdb") != 0) {
      status = reshard_error_set(
          err, RESHARD_INVALID_ARGUMENT,
          "catalog lmdb:%s: the directory holds \"%s\", which is not part of "
          "a reshardd catalog; refusing to use it",
          path, name);
      break;
    }
  }
  closedir(dir);
  return status;
}

/* The version a format record names, when this build reads it; 0
 * otherwise. */
static unsigned format_version(const MDB_val *value) {
  for (unsigned v = RESHARD_CATALOG_LMDB_OLDEST_VERSION;
       v <= RESHARD_CATALOG_LMDB_VERSION; v++) {
    char format[64];
    int n = snprintf(format, sizeof format, "%s %u",
                     RESHARD_CATALOG_LMDB_FORMAT, v);
    if (value->mv_size == (size_t)n &&
        memcmp(value->mv_data, format, value->mv_size) == 0) {
      return v;
    }
  }
  return 0;
}

/* Checks the format record in a read-only transaction, so a foreign
 * environment is never written. Sets *fresh for an empty environment, and
 * *version to the catalog's format version otherwise. */
static reshard_status check_format(lmdb_catalog *c, bool *fresh,
                                   unsigned *version, reshard_error *err) {
  MDB_txn *txn;
  int rc = mdb_txn_begin(c->env, NULL, MDB_RDONLY, &txn);
  if (rc != 0) {
    return reshard_error_set(err, RESHARD_INVALID_ARGUMENT,
                             "catalog lmdb:%s: cannot read: %s", c->path,
                             mdb_strerror(rc));
  }
  reshard_status status = RESHARD_OK;
  MDB_dbi dbi;
  rc = mdb_dbi_open(txn, DB_META, 0, &dbi);
  *fresh = false;
  *version = 0;
  if (rc == MDB_NOTFOUND) {
    MDB_dbi main_db;
    MDB_stat stat;
    rc = mdb_dbi_open(txn, NULL, 0, &main_db);
    if (rc == 0) {
      rc = mdb_stat(txn, main_db, &stat);
    }
    if (rc == 0 && stat.ms_entries == 0) {
      *fresh = true;
    } else if (rc == 0) {
      status = reshard_error_set(
          err, RESHARD_INVALID_ARGUMENT,
          "catalog lmdb:%s: holds an LMDB environment that is not a reshardd "
          "catalog (no meta record); refusing to use it",
          c->path);
    }
  } else if (rc == 0) {
    MDB_val key = str_val(META_FORMAT_KEY), value;
    rc = mdb_get(txn, dbi, &key, &value);
    size_t prefix = strlen(RESHARD_CATALOG_LMDB_FORMAT);
    if (rc == MDB_NOTFOUND ||
        (rc == 0 &&
         (value.mv_size < prefix + 1 ||
          memcmp(value.mv_data, RESHARD_CATALOG_LMDB_FORMAT, prefix) != 0 ||
          ((const char *)value.mv_data)[prefix] != ' '))) {
      rc = 0;
      status = reshard_error_set(
          err, RESHARD_INVALID_ARGUMENT,
          "catalog lmdb:%s: holds an LMDB environment whose meta record is "
          "not reshardd's; refusing to use it",
          c->path);
    } else if (rc == 0 && (*version = format_version(&value)) == 0) {
      status = reshard_error_set(
          err, RESHARD_INVALID_ARGUMENT,
          "catalog lmdb:%s: catalog format \"%.*s\"; this reshardd reads "
          "\"%s %u\" and \"%s %u\" only; refusing to use it",
          c->path, (int)(value.mv_size > 40 ? 40 : value.mv_size),
          (const char *)value.mv_data, RESHARD_CATALOG_LMDB_FORMAT,
          RESHARD_CATALOG_LMDB_OLDEST_VERSION, RESHARD_CATALOG_LMDB_FORMAT,
          RESHARD_CATALOG_LMDB_VERSION);
    }
  }
  if (rc != 0 && status == RESHARD_OK) {
    status = reshard_error_set(
        err, RESHARD_INVALID_ARGUMENT,
        "catalog lmdb:%s: not a readable reshardd catalog (%s); refusing to "
        "use it",
        c->path, mdb_strerror(rc));
  }
  mdb_txn_abort(txn);
  return status;
}

/* Opens (creating them in a fresh environment) the named databases; in a
 * fresh one, writes the format record and sets *version to it. */
static reshard_status open_dbs(lmdb_catalog *c, bool fresh, unsigned *version,
                               reshard_error *err) {
  MDB_txn *txn;
  int rc = mdb_txn_begin(c->env, NULL, 0, &txn);
  if (rc != 0) {
    return reshard__lmdb_error(c, err, rc, "opening");
  }
  unsigned create = fresh ? MDB_CREATE : 0;
  if ((rc = mdb_dbi_open(txn, DB_META, create, &c->meta)) == 0 &&
      (rc = mdb_dbi_open(txn, DB_MANIFESTS, create, &c->manifests)) == 0 &&
      (rc = mdb_dbi_open(txn, DB_MANIFEST_KEYS, create | MDB_INTEGERKEY,
                         &c->manifest_keys)) == 0 &&
      (rc = mdb_dbi_open(txn, DB_DOMAINS, create, &c->domains)) == 0 &&
      (rc = mdb_dbi_open(txn, DB_PAGES,
                         create | MDB_DUPSORT | MDB_DUPFIXED | MDB_INTEGERDUP,
                         &c->pages)) == 0 &&
      /* Created in a catalog of a build that had no objects yet. */
      (rc = mdb_dbi_open(txn, DB_PLACEMENTS, MDB_CREATE,
                         &c->objects[RESHARD_CATALOG_OBJECT_PLACEMENT])) == 0 &&
      (rc = mdb_dbi_open(txn, DB_MEMORY_POOLS, MDB_CREATE,
                         &c->objects[RESHARD_CATALOG_OBJECT_MEMORY_POOL])) ==
          0 &&
      fresh) {
    char format[64];
    int n = snprintf(format, sizeof format, "%s %u",
                     RESHARD_CATALOG_LMDB_FORMAT, RESHARD_CATALOG_LMDB_VERSION);
    MDB_val key = str_val(META_FORMAT_KEY), value = {(size_t)n, format};
    /* Another daemon may have initialised it in the meantime, perhaps an
     * older one with format 1: its record is what the catalog is (on
     * MDB_KEYEXIST, `value` is the record stored). */
    rc = mdb_put(txn, c->meta, &key, &value, MDB_NOOVERWRITE);
    if (rc == MDB_KEYEXIST) {
      rc = 0;
      *version = format_version(&value);
      if (*version == 0) {
        mdb_txn_abort(txn);
        return reshard_error_set(err, RESHARD_INVALID_ARGUMENT,
                                 "catalog lmdb:%s: initialised meanwhile with "
                                 "a format this reshardd does not read; "
                                 "refusing to use it",
                                 c->path);
      }
    } else {
      *version = RESHARD_CATALOG_LMDB_VERSION;
    }
  }
  if (rc != 0) {
    mdb_txn_abort(txn);
    if (rc == MDB_NOTFOUND || rc == MDB_INCOMPATIBLE) {
      return reshard_error_set(err, RESHARD_INVALID_ARGUMENT,
                               "catalog lmdb:%s: a database of the catalog is "
                               "missing or of another kind (%s); refusing to "
                               "use it",
                               c->path, mdb_strerror(rc));
    }
    return reshard__lmdb_error(c, err, rc, "opening");
  }
  rc = mdb_txn_commit(txn);
  if (rc != 0) {
    return reshard__lmdb_error(c, err, rc, "initialising");
  }
  return RESHARD_OK;
}

static void log_opened(lmdb_catalog *c, bool fresh, int dead_readers) {
  reshard_log_line line;
  if (!reshard_log_begin(&line, RESHARD_LOG_INFO, "catalog opened")) {
    return;
  }
  MDB_txn *txn;
  MDB_stat manifests = {0}, pages = {0}, domains = {0}, placements = {0},
           pools = {0};
  if (mdb_txn_begin(c->env, NULL, MDB_RDONLY, &txn) == 0) {
    mdb_stat(txn, c->manifests, &manifests);
    mdb_stat(txn, c->pages, &pages);
    mdb_stat(txn, c->domains, &domains);
    mdb_stat(txn, c->objects[RESHARD_CATALOG_OBJECT_PLACEMENT], &placements);
    mdb_stat(txn, c->objects[RESHARD_CATALOG_OBJECT_MEMORY_POOL], &pools);
    mdb_txn_abort(txn);
  }
  reshard_log_str(&line, "catalog", "lmdb");
  reshard_log_str(&line, "path", c->path);
  reshard_log_bool(&line, "created", fresh);
  reshard_log_str(&line, "page_keys", c->packed_keys ? "packed-hex" : "raw");
  reshard_log_u64(&line, "domains", domains.ms_entries);
  reshard_log_u64(&line, "manifests", manifests.ms_entries);
  reshard_log_u64(&line, "bindings", pages.ms_entries);
  reshard_log_u64(&line, "placements", placements.ms_entries);
  reshard_log_u64(&line, "memory_pools", pools.ms_entries);
  reshard_log_u64(&line, "map_size", c->map_size);
  if (dead_readers > 0) {
    reshard_log_u64(&line, "stale_readers_cleared", (uint64_t)dead_readers);
  }
  reshard_log_end(&line);
}

/* LMDB lets processes share an environment, but a daemon's caches assume
 * that only it writes the catalog: a second reshardd on the same directory
 * is refused. flock on the directory itself leaves LMDB's own fcntl locks
 * on lock.mdb alone, and the kernel drops it when the holder dies. */
static reshard_status lock_dir(const char *path, int *fd, reshard_error *err) {
  *fd = open(path, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (*fd < 0) {
    return reshard_error_set(err, RESHARD_INVALID_ARGUMENT,
                             "catalog lmdb:%s: %s", path, strerror(errno));
  }
  if (flock(*fd, LOCK_EX | LOCK_NB) != 0) {
    int error = errno;
    close(*fd);
    return reshard_error_set(
        err, RESHARD_UNAVAILABLE,
        "catalog lmdb:%s: %s; one reshardd per catalog directory", path,
        error == EWOULDBLOCK ? "in use by another reshardd process"
                             : strerror(error));
  }
  return RESHARD_OK;
}

reshard_status reshard_catalog_lmdb_open(uv_loop_t *loop, const char *path,
                                         uint64_t map_size,
                                         reshard_catalog **out,
                                         reshard_error *err) {
  *out = NULL;
  if (path == NULL || path[0] == '\0') {
    return reshard_error_set(err, RESHARD_INVALID_ARGUMENT,
                             "catalog lmdb: needs a directory (lmdb:PATH)");
  }
  if (map_size == 0) {
    map_size = RESHARD_CATALOG_LMDB_DEFAULT_MAP_SIZE;
  }
  reshard_status status = prepare_dir(path, err);
  if (status != RESHARD_OK) {
    return status;
  }
  size_t path_length = strlen(path);
  lmdb_catalog *c = calloc(1, sizeof *c + path_length + 1);
  if (c == NULL) {
    return reshard_error_set(err, RESHARD_INTERNAL,
                             "catalog lmdb:%s: out of memory", path);
  }
  memcpy(c->path, path, path_length + 1);
  c->map_size = map_size;
  status = lock_dir(path, &c->dir_fd, err);
  if (status != RESHARD_OK) {
    free(c);
    return status;
  }
  int rc = mdb_env_create(&c->env);
  if (rc != 0) {
    close(c->dir_fd);
    free(c);
    return reshard_error_set(err, RESHARD_INTERNAL, "catalog lmdb:%s: %s", path,
                             mdb_strerror(rc));
  }
  /* Seven named databases (lmdb_internal.h) of eight; maxdbs is a setting
   * of this process, not of the file. */
  if ((rc = mdb_env_set_maxdbs(c->env, 8)) == 0) {
    rc = mdb_env_set_mapsize(c->env, (size_t)map_size);
  }
  if (rc == 0) {
    rc = mdb_env_open(c->env, path, MDB_NOTLS, 0600);
  }
  if (rc != 0) {
    close_env(c);
    free(c);
    if (rc == MDB_INVALID) {
      return reshard_error_set(err, RESHARD_INVALID_ARGUMENT,
                               "catalog lmdb:%s: data.mdb is not an LMDB "
                               "file (corrupted or foreign); refusing to use "
                               "it",
                               path);
    }
    if (rc == MDB_VERSION_MISMATCH) {
      return reshard_error_set(err, RESHARD_INVALID_ARGUMENT,
                               "catalog lmdb:%s: written by another LMDB "
                               "version (%s); refusing to use it",
                               path, mdb_strerror(rc));
    }
    if (rc == EROFS || rc == EACCES) {
      return reshard_error_set(err, RESHARD_INVALID_ARGUMENT,
                               "catalog lmdb:%s: the directory is not "
                               "writable (%s); reshardd writes its catalog "
                               "there: make it writable or choose another "
                               "--catalog",
                               path, mdb_strerror(rc));
    }
    return reshard_error_set(err, RESHARD_INVALID_ARGUMENT,
                             "catalog lmdb:%s: cannot open: %s", path,
                             mdb_strerror(rc));
  }
  /* Reader slots of a process that died (kill -9) are freed here. */
  int dead = 0;
  mdb_reader_check(c->env, &dead);
  c->max_key = mdb_env_get_maxkeysize(c->env);
  if (c->max_key > 512) {
    c->max_key = 512;
  }
  /* The env's map may be larger than asked for when the file is. */
  MDB_envinfo info;
  if (mdb_env_info(c->env, &info) == 0) {
    c->map_size = info.me_mapsize;
  }
  bool fresh = false;
  unsigned version = 0;
  status = check_format(c, &fresh, &version, err);
  if (status == RESHARD_OK) {
    status = open_dbs(c, fresh, &version, err);
  }
  /* The format decides for the catalog's whole life (lmdb_internal.h). */
  c->packed_keys = version >= 2;
  if (status != RESHARD_OK) {
    close_env(c);
    free(c);
    return status;
  }
  c->base.vtable = &lmdb_vtable;
  c->base.loop = loop;
  c->async.data = c;
  if (uv_mutex_init(&c->lock) != 0) {
    close_env(c);
    free(c);
    return reshard_error_set(err, RESHARD_INTERNAL,
                             "catalog lmdb:%s: cannot create a mutex", path);
  }
  if (uv_cond_init(&c->wake) != 0) {
    uv_mutex_destroy(&c->lock);
    close_env(c);
    free(c);
    return reshard_error_set(err, RESHARD_INTERNAL,
                             "catalog lmdb:%s: cannot create a condition",
                             path);
  }
  if (uv_async_init(loop, &c->async, reshard__lmdb_on_async) != 0) {
    uv_cond_destroy(&c->wake);
    uv_mutex_destroy(&c->lock);
    close_env(c);
    free(c);
    return reshard_error_set(err, RESHARD_INTERNAL,
                             "catalog lmdb:%s: cannot create an async handle",
                             path);
  }
  uv_unref((uv_handle_t *)&c->async);
  if (uv_thread_create(&c->writer, reshard__lmdb_writer_main, c) != 0) {
    /* Close the handle; reshard__lmdb_finish_close frees the rest (the writer
     * is not running, so nothing else refers to the catalog). */
    c->writer_joined = true;
    uv_close((uv_handle_t *)&c->async, reshard__lmdb_finish_close);
    return reshard_error_set(err, RESHARD_INTERNAL,
                             "catalog lmdb:%s: cannot start the writer thread",
                             path);
  }
  log_opened(c, fresh, dead);
  *out = &c->base;
  return RESHARD_OK;
}
