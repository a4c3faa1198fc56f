/*
 * Resizes a live RocksDB block cache (and, where the library exports it, a write-buffer manager)
 * owned by RocksJava, through the RocksDB C API that is compiled into, and exported by, the
 * RocksDB JNI library Flink has already loaded (frocksdbjni 6.20.3 for Flink 1.20, 8.10.0 for
 * Flink 2.x, or ForSt's forstjni 0.1.8 for Flink 2.2's ForSt backend, which exports the same C API
 * for its org.forstdb objects). No RocksDB header is needed: docs/flink-plugin.md, "Resizing in place", says why
 * the handle conversion below is sound and how the Java side checks it at start-up.
 *
 * Handles. RocksJava's LRUCache/WriteBufferManager constructors return, as the Java object's
 * nativeHandle_, the address of a heap-allocated std::shared_ptr<rocksdb::Cache> (resp.
 * std::shared_ptr<rocksdb::WriteBufferManager>). The C API's types are
 *     struct rocksdb_cache_t { std::shared_ptr<Cache> rep; };
 *     struct rocksdb_write_buffer_manager_t { std::shared_ptr<WriteBufferManager> rep; };
 * i.e. a struct whose only member, at offset 0, is that same shared_ptr. The C functions used here
 * only read `rep` (set/get capacity; set_buffer_size) and never copy, reset or free it, so the
 * address of RocksJava's shared_ptr is a valid rocksdb_cache_t* for them: no reference count is
 * taken, none is dropped. The object stays alive for the call because the Java side holds the
 * lock that RocksJava's close() of the same object must take (ResizableCache, ResizableWBM).
 */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <link.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include "dev_hybridscaler_flink_resize_NativeResize.h"

/* Opaque C API types: only ever passed by address, never dereferenced here. */
typedef struct rocksdb_cache_t rocksdb_cache_t;
typedef struct rocksdb_write_buffer_manager_t rocksdb_write_buffer_manager_t;

typedef void (*set_capacity_fn)(rocksdb_cache_t *, size_t);
typedef size_t (*get_capacity_fn)(rocksdb_cache_t *);
typedef void (*set_buffer_size_fn)(rocksdb_write_buffer_manager_t *, size_t);
typedef size_t (*buffer_size_fn)(rocksdb_write_buffer_manager_t *);
typedef rocksdb_cache_t *(*create_lru_fn)(size_t);
typedef void (*destroy_cache_fn)(rocksdb_cache_t *);

static set_capacity_fn set_capacity;
static get_capacity_fn get_capacity;
static set_buffer_size_fn set_buffer_size; /* NULL on 6.20.3: not in its C API */
static buffer_size_fn buffer_size;         /* likewise */
static create_lru_fn create_lru;
static destroy_cache_fn destroy_cache;
static char library[4096];
static char error[4096 + 512]; /* room for a full path */

/*
 * Whether a loaded object is the JNI library of the flavour asked for: "librocksdbjni" (RocksDB,
 * FRocksDB) or "libforstjni" (ForSt). A ForSt TaskManager may also have RocksDB's loaded: each
 * handle belongs to its own flavour's library, so only that one is looked for.
 */
static int is_jni_of(const char *path, const char *prefix) {
    const char *base = strrchr(path, '/');
    base = base ? base + 1 : path;
    return strncmp(base, prefix, strlen(prefix)) == 0;
}

struct found {
    const char *prefix;
    int count;
    char path[4096];
};

static int visit(struct dl_phdr_info *info, size_t size, void *data) {
    (void) size;
    struct found *f = data;
    if (info->dlpi_name != NULL && info->dlpi_name[0] != '\0' && is_jni_of(info->dlpi_name, f->prefix)) {
        if (f->count == 0) {
            snprintf(f->path, sizeof f->path, "%s", info->dlpi_name);
        }
        f->count++;
    }
    return 0;
}

/*
 * Binds the C API of the one RocksDB JNI library loaded in this process. Returns NULL on success,
 * else why not. The library is looked up, never loaded: RTLD_NOLOAD fails unless it is resident,
 * so the shim cannot pull in a second, different RocksDB.
 */
JNIEXPORT jstring JNICALL Java_dev_hybridscaler_flink_resize_NativeResize_bind(
        JNIEnv *env, jclass cls, jstring library_prefix) {
    (void) cls;
    if (library_prefix == NULL) {
        return (*env)->NewStringUTF(env, "no JNI library named");
    }
    char prefix[64];
    jsize n = (*env)->GetStringUTFLength(env, library_prefix);
    if (n <= 0 || (size_t) n >= sizeof prefix) {
        return (*env)->NewStringUTF(env, "the JNI library's name is empty or too long");
    }
    (*env)->GetStringUTFRegion(env, library_prefix, 0, (*env)->GetStringLength(env, library_prefix), prefix);
    prefix[n] = '\0';
    if (library[0] != '\0') {
        if (is_jni_of(library, prefix)) {
            return NULL; /* already bound to this flavour's library */
        }
        snprintf(error, sizeof error, "the shim is bound to %s already, not to a %s* library",
                 library, prefix);
        return (*env)->NewStringUTF(env, error);
    }
    struct found f = {0};
    f.prefix = prefix;
    dl_iterate_phdr(visit, &f);
    if (f.count == 0) {
        snprintf(error, sizeof error, "no %s* JNI library is loaded", prefix);
        return (*env)->NewStringUTF(env, error);
    }
    if (f.count > 1) {
        snprintf(error, sizeof error,
                 "%d %s* JNI libraries are loaded (first %s); cannot tell which owns a handle",
                 f.count, prefix, f.path);
        return (*env)->NewStringUTF(env, error);
    }
    void *lib = dlopen(f.path, RTLD_NOW | RTLD_NOLOAD);
    if (lib == NULL) {
        snprintf(error, sizeof error, "dlopen(%s, RTLD_NOLOAD): %s", f.path, dlerror());
        return (*env)->NewStringUTF(env, error);
    }
    set_capacity_fn set = (set_capacity_fn) dlsym(lib, "rocksdb_cache_set_capacity");
    get_capacity_fn get = (get_capacity_fn) dlsym(lib, "rocksdb_cache_get_capacity");
    if (set == NULL || get == NULL) {
        snprintf(error, sizeof error, "%s exports no rocksdb_cache_set_capacity/get_capacity", f.path);
        dlclose(lib);
        return (*env)->NewStringUTF(env, error);
    }
    create_lru_fn create = (create_lru_fn) dlsym(lib, "rocksdb_cache_create_lru");
    destroy_cache_fn destroy = (destroy_cache_fn) dlsym(lib, "rocksdb_cache_destroy");
    if (create == NULL || destroy == NULL) {
        snprintf(error, sizeof error, "%s exports no rocksdb_cache_create_lru/destroy", f.path);
        dlclose(lib);
        return (*env)->NewStringUTF(env, error);
    }
    set_capacity = set;
    get_capacity = get;
    create_lru = create;
    destroy_cache = destroy;
    set_buffer_size = (set_buffer_size_fn) dlsym(lib, "rocksdb_write_buffer_manager_set_buffer_size");
    buffer_size = (buffer_size_fn) dlsym(lib, "rocksdb_write_buffer_manager_buffer_size");
    if (buffer_size == NULL) {
        set_buffer_size = NULL; /* a resize that cannot be read back is not done */
    }
    snprintf(library, sizeof library, "%s", f.path);
    /* The dlopen reference is kept on purpose: the library must outlive every call. */
    return NULL;
}

JNIEXPORT jstring JNICALL Java_dev_hybridscaler_flink_resize_NativeResize_library(JNIEnv *env, jclass cls) {
    (void) cls;
    return library[0] ? (*env)->NewStringUTF(env, library) : NULL;
}

JNIEXPORT jboolean JNICALL Java_dev_hybridscaler_flink_resize_NativeResize_canResizeWriteBuffers(
        JNIEnv *env, jclass cls) {
    (void) env;
    (void) cls;
    return set_buffer_size != NULL ? JNI_TRUE : JNI_FALSE;
}

JNIEXPORT jlong JNICALL Java_dev_hybridscaler_flink_resize_NativeResize_cacheCapacity(
        JNIEnv *env, jclass cls, jlong handle) {
    (void) env;
    (void) cls;
    if (get_capacity == NULL || handle == 0) {
        return -1;
    }
    return (jlong) get_capacity((rocksdb_cache_t *) (intptr_t) handle);
}

JNIEXPORT jboolean JNICALL Java_dev_hybridscaler_flink_resize_NativeResize_setCacheCapacity(
        JNIEnv *env, jclass cls, jlong handle, jlong bytes) {
    (void) env;
    (void) cls;
    if (set_capacity == NULL || handle == 0 || bytes <= 0) {
        return JNI_FALSE;
    }
    set_capacity((rocksdb_cache_t *) (intptr_t) handle, (size_t) bytes);
    return JNI_TRUE;
}

JNIEXPORT jboolean JNICALL Java_dev_hybridscaler_flink_resize_NativeResize_setWriteBufferSize(
        JNIEnv *env, jclass cls, jlong handle, jlong bytes) {
    (void) env;
    (void) cls;
    if (set_buffer_size == NULL || handle == 0 || bytes <= 0) {
        return JNI_FALSE;
    }
    set_buffer_size((rocksdb_write_buffer_manager_t *) (intptr_t) handle, (size_t) bytes);
    return JNI_TRUE;
}

JNIEXPORT jlong JNICALL Java_dev_hybridscaler_flink_resize_NativeResize_writeBufferSize(
        JNIEnv *env, jclass cls, jlong handle) {
    (void) env;
    (void) cls;
    if (buffer_size == NULL || handle == 0) {
        return -1;
    }
    return (jlong) buffer_size((rocksdb_write_buffer_manager_t *) (intptr_t) handle);
}

/*
 * Reads one pointer-sized word at addr without faulting: the kernel copies it into a pipe and
 * reports EFAULT for an unmapped address, where a plain load would crash the TaskManager.
 */
static int probe(const void *addr, void **out) {
    int fds[2];
    if (addr == NULL || pipe(fds) != 0) {
        return 0;
    }
    int ok = write(fds[1], addr, sizeof *out) == (ssize_t) sizeof *out
             && read(fds[0], out, sizeof *out) == (ssize_t) sizeof *out;
    close(fds[0]);
    close(fds[1]);
    return ok;
}

/*
 * Checks, before any call through it, that a RocksJava cache handle has the layout the C API
 * assumes: a shared_ptr whose element is an LRUCache of the bound library, i.e. whose vtable is
 * the one of a cache the C API itself creates (rocksdb_cache_create_lru). Null when it matches.
 * Nothing is dereferenced except through probe().
 */
JNIEXPORT jstring JNICALL Java_dev_hybridscaler_flink_resize_NativeResize_verifyCacheHandle(
        JNIEnv *env, jclass cls, jlong handle) {
    (void) cls;
    void *element = NULL;
    void *vtable = NULL;
    if (create_lru == NULL) {
        return (*env)->NewStringUTF(env, "the shim is not bound");
    }
    if (!probe((void *) (intptr_t) handle, &element) || !probe(element, &vtable)) {
        return (*env)->NewStringUTF(env, "the cache handle does not point to a readable shared_ptr");
    }
    rocksdb_cache_t *reference = create_lru(1 << 20);
    void *ref_element = NULL;
    void *ref_vtable = NULL;
    int readable = probe(reference, &ref_element) && probe(ref_element, &ref_vtable);
    destroy_cache(reference);
    if (!readable) {
        return (*env)->NewStringUTF(env, "a cache created by the C API is not a readable shared_ptr");
    }
    if (vtable != ref_vtable) {
        return (*env)->NewStringUTF(env,
                "the cache handle's object is not an LRUCache of the bound RocksDB library");
    }
    return NULL;
}
