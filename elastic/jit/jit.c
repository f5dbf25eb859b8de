/*
 * jit.c - the JIT front end: settings, compile-or-fetch, driver load, launch.
 *
 * eep_jit_compile builds the unit and its key (jit_source.c), reads the cache (jit_cache.c) and
 * only on a miss takes the per-key lock, re-reads (another process may have compiled it while we
 * waited) and runs the backend.  Loaded kernels are kept per (CUcontext, key) in a short list
 * under the jit's mutex: a process holds a handful of kernel shapes, and lookups are rare next
 * to launches, which need no lock at all.
 */
#include "elastic/jit/jit_int.h"

#include <dlfcn.h>
#include <errno.h>
#include <libgen.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "util/clock.h"
#include "util/config.h"
#include "elastic/gpu/cuda_sym.h"
#include "elastic/jit/jit_knobs.h"
#include "util/log.h"

#ifndef EEP_JIT_CUDA_HOME
#define EEP_JIT_CUDA_HOME "/usr/local/cuda"
#endif
#ifndef EEP_JIT_NCCL_INCLUDE
#define EEP_JIT_NCCL_INCLUDE EEP_JIT_CUDA_HOME "/include"
#endif
#ifndef EEP_JIT_DEFAULT_SOURCE_ROOT
#define EEP_JIT_DEFAULT_SOURCE_ROOT "."
#endif
/* The architecture EEP_JIT_ARCH=auto falls back to without a loaded driver or a device. */
#define EEP_JIT_FALLBACK_ARCH "sm_90"

/* ---- small shared helpers ------------------------------------------------------------------ */

static unsigned long  eep_jit_runs;
static pthread_key_t  eep_jit_log_key;
static pthread_once_t eep_jit_log_once = PTHREAD_ONCE_INIT;

int eep_jit_pathf(char *buf, size_t len, const char *fmt, ...)
{
    va_list ap;
    int     n;

    va_start(ap, fmt);
    n = vsnprintf(buf, len, fmt, ap);
    va_end(ap);
    if (n < 0 || (size_t)n >= len) {
        eep_error(EEP_SUBSYS_JIT, "path too long (more than %zu bytes): %s...", len, buf);
        return -1;
    }
    return 0;
}

unsigned long eep_jit_compiler_runs(void)
{
    return __atomic_load_n(&eep_jit_runs, __ATOMIC_RELAXED);
}

void eep_jit_count_compiler_run(void)
{
    __atomic_fetch_add(&eep_jit_runs, 1, __ATOMIC_RELAXED);
}

/* Foreground compiles (any thread but a prefetch worker), process-wide: how many run now, and
   when the last one ended (ms, eep_clock_ms).  Background compiles keep out of their way. */
static int          eep_jit_fg_active;
static int64_t      eep_jit_fg_end_ms;
static __thread int eep_jit_thread_is_worker;

void eep_jit_mark_worker_thread(void)
{
    eep_jit_thread_is_worker = 1;
}

double eep_jit_foreground_quiet_ms(void)
{
    if (__atomic_load_n(&eep_jit_fg_active, __ATOMIC_ACQUIRE) > 0) {
        return -1;
    }
    return eep_clock_ms() - (double)__atomic_load_n(&eep_jit_fg_end_ms, __ATOMIC_ACQUIRE);
}

static void eep_jit_foreground_begin(void)
{
    if (!eep_jit_thread_is_worker) {
        __atomic_fetch_add(&eep_jit_fg_active, 1, __ATOMIC_ACQ_REL);
    }
}

static void eep_jit_foreground_end(void)
{
    if (!eep_jit_thread_is_worker) {
        __atomic_store_n(&eep_jit_fg_end_ms, (int64_t)eep_clock_ms(), __ATOMIC_RELEASE);
        __atomic_fetch_sub(&eep_jit_fg_active, 1, __ATOMIC_ACQ_REL);
    }
}

static void eep_jit_log_key_create(void)
{
    pthread_key_create(&eep_jit_log_key, free);
}

void eep_jit_set_last_log(const char *log)
{
    pthread_once(&eep_jit_log_once, eep_jit_log_key_create);
    free(pthread_getspecific(eep_jit_log_key));
    pthread_setspecific(eep_jit_log_key, log != NULL ? strdup(log) : NULL);
}

const char *eep_jit_last_log(void)
{
    const char *log;

    pthread_once(&eep_jit_log_once, eep_jit_log_key_create);
    log = pthread_getspecific(eep_jit_log_key);
    return log != NULL ? log : "";
}

void eep_jit_keep_file(const eep_jit_t *jit, const char *key, const char *suffix, const char *text)
{
    char  path[PATH_MAX];
    FILE *f;

    if (eep_jit_pathf(path, sizeof(path), "%s/src", jit->cache_dir) != 0 ||
        eep_jit_mkdirs(path) != EEP_OK ||
        eep_jit_pathf(path, sizeof(path), "%s/src/%s%s", jit->cache_dir, key, suffix) != 0) {
        return;
    }
    f = fopen(path, "w");
    if (f == NULL) {
        eep_warn(EEP_SUBSYS_JIT, "cannot keep %s: %m", path);
        return;
    }
    fputs(text != NULL ? text : "", f);
    fclose(f);
    eep_info(EEP_SUBSYS_JIT, "kept %s", path);
}

/* ---- create / destroy ---------------------------------------------------------------------- */

static eep_status_t eep_jit_copy_path(char *dst, size_t len, const char *src, const char *what)
{
    if (snprintf(dst, len, "%s", src) >= (int)len) {
        eep_error(EEP_SUBSYS_JIT, "%s '%s' is too long", what, src);
        return EEP_ERR_INVALID_ARG;
    }
    return EEP_OK;
}

/* realpath when it exists (so lexical prefix tests work), else the path as given. */
static void eep_jit_canon(char *dst, size_t len, const char *src)
{
    char buf[PATH_MAX];

    eep_jit_pathf(dst, len, "%s", realpath(src, buf) != NULL ? buf : src);
}

static void eep_jit_find_nvcc(eep_jit_t *jit, const char *configured)
{
    const char *path = eep_config_system_env("PATH");
    char        cand[PATH_MAX], *dirs, *dir, *save;

    if (configured[0] != '\0' && access(configured, X_OK) == 0) {
        snprintf(jit->nvcc, sizeof(jit->nvcc), "%s", configured);
        return;
    }
    jit->nvcc[0] = '\0';
    dirs         = path != NULL ? strdup(path) : NULL;
    for (dir = dirs != NULL ? strtok_r(dirs, ":", &save) : NULL; dir != NULL;
         dir = strtok_r(NULL, ":", &save)) {
        snprintf(cand, sizeof(cand), "%s/nvcc", dir);
        if (access(cand, X_OK) == 0) {
            snprintf(jit->nvcc, sizeof(jit->nvcc), "%s", cand);
            break;
        }
    }
    free(dirs);
    if (configured[0] != '\0') {
        eep_debug(EEP_SUBSYS_JIT, "EEP_JIT_NVCC %s is not executable; %s", configured,
                  jit->nvcc[0] != '\0' ? jit->nvcc : "no nvcc on PATH either");
    }
}

static eep_status_t eep_jit_parse_backend(const char *name, eep_jit_backend_t *backend_p)
{
    if (strcmp(name, "auto") == 0 || name[0] == '\0') {
        *backend_p = EEP_JIT_BACKEND_AUTO;
    } else if (strcmp(name, "nvrtc") == 0) {
        *backend_p = EEP_JIT_BACKEND_NVRTC;
    } else if (strcmp(name, "nvcc") == 0) {
        *backend_p = EEP_JIT_BACKEND_NVCC;
    } else {
        eep_error(EEP_SUBSYS_JIT, "EEP_JIT_BACKEND '%s' is not auto, nvrtc or nvcc", name);
        return EEP_ERR_INVALID_ARG;
    }
    return EEP_OK;
}

static eep_status_t eep_jit_default_cache_dir(char *dst, size_t len)
{
    const char *xdg  = eep_config_system_env("XDG_CACHE_HOME");
    const char *home = eep_config_system_env("HOME");

    if (xdg != NULL && xdg[0] == '/') {
        return snprintf(dst, len, "%s/eep", xdg) < (int)len ? EEP_OK : EEP_ERR_INVALID_ARG;
    }
    if (home != NULL && home[0] != '\0') {
        return snprintf(dst, len, "%s/.cache/eep", home) < (int)len ? EEP_OK : EEP_ERR_INVALID_ARG;
    }
    eep_error(EEP_SUBSYS_JIT, "no JIT cache directory: set EEP_JIT_CACHE_DIR (neither "
                              "XDG_CACHE_HOME nor HOME is set)");
    return EEP_ERR_INVALID_ARG;
}

/* @return whether @p root/kernels is a directory (an installed or source tree of kernels). */
static int eep_jit_has_kernels(const char *root)
{
    char        path[PATH_MAX];
    struct stat st;

    return snprintf(path, sizeof(path), "%s/kernels", root) < (int)sizeof(path) &&
           stat(path, &st) == 0 && S_ISDIR(st.st_mode);
}

/* <dir of @p file>/../share/eep into @p dst when it holds kernels/. */
static int eep_jit_share_of(const char *file, char *dst, size_t len)
{
    char real[PATH_MAX], share[PATH_MAX + 16];

    if (file == NULL || file[0] == '\0' || realpath(file, real) == NULL) {
        return 0;
    }
    /* dirname may modify its argument: real is ours */
    if (snprintf(share, sizeof(share), "%s/../share/eep", dirname(real)) >= (int)sizeof(share) ||
        realpath(share, real) == NULL || !eep_jit_has_kernels(real)) {
        return 0;
    }
    return snprintf(dst, len, "%s", real) < (int)len;
}

eep_status_t eep_jit_default_source_root(char *buf, size_t len)
{
    Dl_info info;
    char    exe[PATH_MAX];
    ssize_t n;

    /* The object this function lives in: libeep.so, or the program that linked libeep.a (for the
     * main program dladdr may give a relative argv[0]: /proc/self/exe then). */
    if (dladdr((void *)eep_jit_default_source_root, &info) != 0 &&
        eep_jit_share_of(info.dli_fname, buf, len)) {
        return EEP_OK;
    }
    n = readlink("/proc/self/exe", exe, sizeof(exe) - 1);
    if (n > 0) {
        exe[n] = '\0';
        if (eep_jit_share_of(exe, buf, len)) {
            return EEP_OK;
        }
    }
    if (snprintf(buf, len, "%s", EEP_JIT_DEFAULT_SOURCE_ROOT) >= (int)len) {
        return EEP_ERR_INVALID_ARG;
    }
    return EEP_OK;
}

/*
 * EEP_JIT_ARCH=auto: the compute capability of the current context's device, else of device 0,
 * through the driver only if it is already loaded (the runtime opened its device before it makes
 * its JIT); a process without a driver gets the fallback without an error on its log.
 */
static void eep_jit_auto_arch(char *dst, size_t len)
{
    const eep_cuda_sym_t *cu;
    CUdevice              dev;
    int                   major = 0, minor = 0;
    const char           *from = "current context";

    if (eep_cuda_sym_driver_loaded(&cu) != EEP_OK) {
        snprintf(dst, len, "%s", EEP_JIT_FALLBACK_ARCH);
        eep_debug(EEP_SUBSYS_JIT, "EEP_JIT_ARCH=auto: no CUDA driver loaded, %s", dst);
        return;
    }
    if (cu->cuCtxGetDevice(&dev) != CUDA_SUCCESS) {
        from = "device 0";
        if (cu->cuDeviceGet(&dev, 0) != CUDA_SUCCESS) {
            snprintf(dst, len, "%s", EEP_JIT_FALLBACK_ARCH);
            eep_debug(EEP_SUBSYS_JIT, "EEP_JIT_ARCH=auto: no device, %s", dst);
            return;
        }
    }
    if (cu->cuDeviceGetAttribute(&major, CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR, dev) !=
            CUDA_SUCCESS ||
        cu->cuDeviceGetAttribute(&minor, CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR, dev) !=
            CUDA_SUCCESS ||
        major < 1 || major > 99 || minor < 0 || minor > 9) {
        snprintf(dst, len, "%s", EEP_JIT_FALLBACK_ARCH);
        eep_warn(EEP_SUBSYS_JIT, "EEP_JIT_ARCH=auto: cannot read the %s's compute capability, %s",
                 from, dst);
        return;
    }
    snprintf(dst, len, "sm_%d%d", major, minor);
    eep_debug(EEP_SUBSYS_JIT, "EEP_JIT_ARCH=auto: %s of the %s", dst, from);
}

eep_status_t eep_jit_create(const eep_jit_params_t *params, eep_jit_t **jit_p)
{
    eep_jit_config_t *cfg;
    eep_jit_t        *jit;
    eep_status_t      status;
    const char       *arch, *root;
    char              path[PATH_MAX + 8], auto_arch[16], default_root[PATH_MAX];

    if (jit_p == NULL) {
        eep_error(EEP_SUBSYS_JIT, "eep_jit_create: jit_p is NULL");
        return EEP_ERR_INVALID_ARG;
    }
    if (params != NULL && params->size < sizeof(*params)) {
        eep_error(EEP_SUBSYS_JIT,
                  "eep_jit_create: params->size %zu is smaller than "
                  "sizeof(eep_jit_params_t) %zu",
                  params->size, sizeof(*params));
        return EEP_ERR_INVALID_ARG;
    }
    cfg = malloc(sizeof(*cfg)); /* 6 KiB of strings: not on the stack */
    jit = calloc(1, sizeof(*jit));
    if (cfg == NULL || jit == NULL) {
        status = EEP_ERR_NO_MEMORY;
        goto err_free;
    }
    status = eep_config_load(&eep_jit_knob_table, cfg);
    if (status != EEP_OK) {
        goto err_free;
    }
    if (params != NULL && params->cache_dir != NULL) {
        status = eep_jit_copy_path(jit->cache_dir, sizeof(jit->cache_dir), params->cache_dir,
                                   "cache_dir");
    } else if (cfg->cache_dir[0] != '\0') {
        status = eep_jit_copy_path(jit->cache_dir, sizeof(jit->cache_dir), cfg->cache_dir,
                                   "EEP_JIT_CACHE_DIR");
    } else {
        status = eep_jit_default_cache_dir(jit->cache_dir, sizeof(jit->cache_dir));
    }
    if (status != EEP_OK) {
        goto err_free;
    }
    root = params != NULL && params->source_root != NULL ? params->source_root : cfg->source_root;
    if (root[0] == '\0') {
        status = eep_jit_default_source_root(default_root, sizeof(default_root));
        if (status != EEP_OK) {
            eep_error(EEP_SUBSYS_JIT, "the default kernel source root is too long");
            goto err_free;
        }
        root = default_root;
    }
    if (realpath(root, jit->source_root) == NULL) {
        eep_error(EEP_SUBSYS_JIT, "kernel source root %s: %m (set EEP_JIT_SOURCE_ROOT)", root);
        status = EEP_ERR_INVALID_ARG;
        goto err_free;
    }
    arch = params != NULL && params->arch != NULL ? params->arch : cfg->arch;
    if (strcmp(arch, "auto") == 0) {
        eep_jit_auto_arch(auto_arch, sizeof(auto_arch));
        arch = auto_arch;
    }
    if (strncmp(arch, "sm_", 3) != 0 || arch[3] < '1' || arch[3] > '9' ||
        strlen(arch) >= sizeof(jit->arch)) {
        eep_error(EEP_SUBSYS_JIT, "arch '%s' is not a real GPU architecture like sm_90 (or auto)",
                  arch);
        status = EEP_ERR_INVALID_ARG;
        goto err_free;
    }
    memcpy(jit->arch, arch, strlen(arch) + 1); /* length checked above */
    status = eep_jit_parse_backend(cfg->backend, &jit->backend);
    if (status != EEP_OK) {
        goto err_free;
    }
    jit->keep_source = cfg->keep_source;
    jit->pch         = cfg->pch;
    eep_jit_find_nvcc(jit, cfg->nvcc);
    eep_jit_canon(jit->cuda_home, sizeof(jit->cuda_home), EEP_JIT_CUDA_HOME);
    snprintf(path, sizeof(path), "%s/include", jit->cuda_home);
    eep_jit_canon(jit->cuda_include, sizeof(jit->cuda_include), path);
    snprintf(path, sizeof(path), "%s/cccl", jit->cuda_include);
    eep_jit_canon(jit->cccl_include, sizeof(jit->cccl_include), path);
    eep_jit_canon(jit->nccl_include, sizeof(jit->nccl_include), EEP_JIT_NCCL_INCLUDE);
    snprintf(path, sizeof(path), "%s/v1", jit->cache_dir);
    status = eep_jit_mkdirs(path);
    if (status != EEP_OK) {
        goto err_free;
    }
    pthread_mutex_init(&jit->lock, NULL);
    pthread_mutex_init(&jit->memo_lock, NULL);
    eep_jit_prefetch_init(jit);
    jit->memo_racy_s = EEP_JIT_MEMO_RACY_S;
    eep_debug(EEP_SUBSYS_JIT, "jit: cache %s, sources %s, arch %s, nvcc %s, nccl %s",
              jit->cache_dir, jit->source_root, jit->arch,
              jit->nvcc[0] != '\0' ? jit->nvcc : "(none)", jit->nccl_include);
    free(cfg);
    *jit_p = jit;
    return EEP_OK;

err_free:
    free(jit);
    free(cfg);
    return status;
}

const char *eep_jit_cache_dir(const eep_jit_t *jit)
{
    return jit->cache_dir;
}

void eep_jit_counts(const eep_jit_t *jit, uint64_t *compiles_p, uint64_t *hits_p)
{
    *compiles_p = jit != NULL ? __atomic_load_n(&jit->n_compiles, __ATOMIC_RELAXED) : 0;
    *hits_p     = jit != NULL ? __atomic_load_n(&jit->n_cache_hits, __ATOMIC_RELAXED) : 0;
}

const char *eep_jit_arch(const eep_jit_t *jit)
{
    return jit->arch;
}

const char *eep_jit_source_root(const eep_jit_t *jit)
{
    return jit->source_root;
}

void eep_jit_destroy(eep_jit_t *jit)
{
    const eep_cuda_sym_t *cu = NULL;
    eep_jit_kernel_t     *k, *next;
    CUcontext             popped;

    if (jit == NULL) {
        return;
    }
    eep_jit_prefetch_shutdown(jit); /* first: the worker uses the rest */
    if (jit->kernels != NULL && eep_cuda_sym_driver(&cu) != EEP_OK) {
        cu = NULL;
    }
    for (k = jit->kernels; k != NULL; k = next) {
        next = k->next;
        /* Unload in the module's own context; a context destroyed first took the module along. */
        if (cu != NULL && cu->cuCtxPushCurrent((CUcontext)k->ctx) == CUDA_SUCCESS) {
            if (cu->cuModuleUnload((CUmodule)k->module) != CUDA_SUCCESS) {
                eep_debug(EEP_SUBSYS_JIT, "unloading kernel %.16s failed (context gone?)", k->key);
            }
            cu->cuCtxPopCurrent(&popped);
        }
        free(k);
    }
    eep_jit_memo_cleanup(jit);
    pthread_mutex_destroy(&jit->memo_lock);
    pthread_mutex_destroy(&jit->lock);
    free(jit);
}

/* ---- compile ------------------------------------------------------------------------------- */

/* Cache hit or compile-and-store for a unit whose key is computed; returns the cubin. */
static eep_status_t eep_jit_fetch(eep_jit_t *jit, const eep_jit_spec_t *spec, eep_jit_unit_t *unit,
                                  eep_jit_info_t *info, void **cubin_p, size_t *size_p)
{
    const eep_jit_backend_ops_t *ops = eep_jit_backend_ops(unit->backend);
    eep_status_t                 status;
    char                        *log   = NULL;
    void                        *cubin = NULL;
    size_t                       size  = 0;
    double                       t0;
    int                          lock_fd = -1;

    status = eep_jit_cache_path(jit, unit->key, ".cubin", info->path, sizeof(info->path));
    if (status != EEP_OK) {
        return status;
    }
    status = eep_jit_cache_read(info->path, &cubin, &size);
    if (status == EEP_OK) {
        info->cache_hit = 1;
        goto out;
    }
    if (status != EEP_ERR_NOT_FOUND && status != EEP_ERR_IO) {
        return status;
    }
    status = eep_jit_cache_lock(jit, unit->key, &lock_fd);
    if (status != EEP_OK) {
        return status;
    }
    /* Whoever held the lock may have stored it meanwhile. */
    status = eep_jit_cache_read(info->path, &cubin, &size);
    if (status == EEP_OK) {
        info->cache_hit = 1;
        goto out_unlock;
    }
    if (jit->keep_source) {
        eep_jit_keep_file(jit, unit->key, ".cu", unit->source);
    }
    t0 = eep_clock_ms();
    eep_jit_foreground_begin();
    status = ops->compile(jit, unit, &cubin, &size, &log);
    eep_jit_foreground_end();
    info->compile_ms = eep_clock_ms() - t0;
    eep_jit_set_last_log(log);
    if (status != EEP_OK) {
        eep_error(EEP_SUBSYS_JIT, "%s failed to compile %s<%s> from %s (key %.16s)%s%s", ops->name,
                  spec->function, spec->template_args != NULL ? spec->template_args : "",
                  spec->header, unit->key, log != NULL ? ":\n" : "", log != NULL ? log : "");
        if (jit->keep_source) {
            eep_jit_keep_file(jit, unit->key, ".log", log);
        }
        goto out_unlock;
    }
    if (log != NULL && log[0] != '\0') {
        eep_debug(EEP_SUBSYS_JIT, "%s log for %.16s:\n%s", ops->name, unit->key, log);
    }
    eep_info(EEP_SUBSYS_JIT, "compiled %s<%s> with %s in %.0f ms (%zu bytes, key %.16s)",
             spec->function, spec->template_args != NULL ? spec->template_args : "", ops->name,
             info->compile_ms, size, unit->key);
    status = eep_jit_cache_write(info->path, cubin, size);
    if (status != EEP_OK) {
        /* The cubin is good; only the next process pays for the failed store. */
        eep_warn(EEP_SUBSYS_JIT, "cannot store %s in the jit cache: %s", info->path,
                 eep_status_string(status));
        status = EEP_OK;
    }
out_unlock:
    eep_jit_cache_unlock(lock_fd);
out:
    free(log);
    if (status != EEP_OK) {
        free(cubin);
        return status;
    }
    /* counted for eep_runtime_stats; the prefetch thread compiles too */
    __atomic_add_fetch(info->cache_hit ? &jit->n_cache_hits : &jit->n_compiles, 1,
                       __ATOMIC_RELAXED);
    *cubin_p = cubin;
    *size_p  = size;
    return EEP_OK;
}

/* Build the unit and its key; on success the caller cleans @p unit_p up. */
static eep_status_t eep_jit_prepare(eep_jit_t *jit, const eep_jit_spec_t *spec,
                                    eep_jit_unit_t *unit_p, eep_jit_info_t *info)
{
    eep_status_t status;

    memset(info, 0, sizeof(*info));
    status = eep_jit_unit_build(jit, spec, unit_p);
    if (status != EEP_OK) {
        return status;
    }
    info->backend = unit_p->backend;
    status        = eep_jit_unit_key(jit, unit_p);
    if (status != EEP_OK) {
        eep_jit_unit_cleanup(unit_p);
        return status;
    }
    memcpy(info->key, unit_p->key, sizeof(info->key));
    return EEP_OK;
}

static eep_status_t eep_jit_compile_cubin(eep_jit_t *jit, const eep_jit_spec_t *spec,
                                          eep_jit_info_t *info_p, void **cubin_p, size_t *size_p)
{
    eep_jit_info_t info;
    eep_jit_unit_t unit;
    eep_status_t   status;
    double         start = eep_clock_ms();

    if (jit == NULL || spec == NULL) {
        eep_error(EEP_SUBSYS_JIT, "eep_jit_compile: %s is NULL", jit == NULL ? "jit" : "spec");
        return EEP_ERR_INVALID_ARG;
    }
    status = eep_jit_prepare(jit, spec, &unit, &info);
    if (status != EEP_OK) {
        return status;
    }
    status = eep_jit_fetch(jit, spec, &unit, &info, cubin_p, size_p);
    eep_jit_unit_cleanup(&unit);
    if (status != EEP_OK) {
        return status;
    }
    info.total_ms = eep_clock_ms() - start;
    if (info_p != NULL) {
        *info_p = info;
    }
    return EEP_OK;
}

eep_status_t eep_jit_compile(eep_jit_t *jit, const eep_jit_spec_t *spec, eep_jit_info_t *info_p)
{
    eep_status_t status;
    void        *cubin = NULL;
    size_t       size;

    status = eep_jit_compile_cubin(jit, spec, info_p, &cubin, &size);
    free(cubin);
    return status;
}

/* ---- load and launch ----------------------------------------------------------------------- */

static eep_jit_kernel_t *eep_jit_find_locked(eep_jit_t *jit, CUcontext ctx, const char *key)
{
    eep_jit_kernel_t *k;

    for (k = jit->kernels; k != NULL; k = k->next) {
        if (k->ctx == (void *)ctx && strcmp(k->key, key) == 0) {
            return k;
        }
    }
    return NULL;
}

static eep_status_t eep_jit_load(const eep_cuda_sym_t *cu, const void *cubin, const char *key,
                                 eep_jit_kernel_t *k)
{
    CUmodule     module;
    CUfunction   function;
    eep_status_t status;
    size_t       offset, size;

    status = eep_status_from_cu(cu->cuModuleLoadData(&module, cubin),
                                "cuModuleLoadData(jit kernel)");
    if (status != EEP_OK) {
        return status;
    }
    status = eep_status_from_cu(cu->cuModuleGetFunction(&function, module, EEP_JIT_ENTRY_NAME),
                                "cuModuleGetFunction(" EEP_JIT_ENTRY_NAME ")");
    if (status != EEP_OK) {
        cu->cuModuleUnload(module);
        return status;
    }
    k->module     = module;
    k->function   = function;
    k->param_size = 0;
    if (cu->cuFuncGetParamInfo != NULL &&
        cu->cuFuncGetParamInfo(function, 0, &offset, &size) == CUDA_SUCCESS) {
        k->param_size = size;
    }
    memcpy(k->key, key, sizeof(k->key));
    return EEP_OK;
}

/* Before a load for a launch on @p stream: let the stream's queued work finish (see jit.h). */
static eep_status_t eep_jit_quiesce(const eep_cuda_sym_t *cu, CUstream stream)
{
    CUstreamCaptureStatus capture = CU_STREAM_CAPTURE_STATUS_NONE;

    if (cu->cuStreamIsCapturing != NULL &&
        (cu->cuStreamIsCapturing(stream, &capture) != CUDA_SUCCESS ||
         capture != CU_STREAM_CAPTURE_STATUS_NONE)) {
        return EEP_OK; /* captured: nothing of the stream runs now; a sync would end the capture */
    }
    return eep_status_from_cu(cu->cuStreamSynchronize(stream), "cuStreamSynchronize(before load)");
}

static eep_status_t eep_jit_get_kernel_impl(eep_jit_t *jit, const eep_jit_spec_t *spec, int quiesce,
                                            CUstream stream, eep_jit_kernel_t **kernel_p)
{
    const eep_cuda_sym_t *cu;
    eep_jit_kernel_t     *k, *found;
    eep_jit_unit_t        unit;
    eep_jit_info_t        info;
    eep_status_t          status;
    CUcontext             ctx   = NULL;
    void                 *cubin = NULL;
    size_t                size;

    if (jit == NULL || spec == NULL || kernel_p == NULL) {
        eep_error(EEP_SUBSYS_JIT, "eep_jit_get_kernel: %s is NULL",
                  jit == NULL    ? "jit"
                  : spec == NULL ? "spec"
                                 : "kernel_p");
        return EEP_ERR_INVALID_ARG;
    }
    /* Without a driver nothing can be loaded: say so before spending seconds compiling. */
    status = eep_cuda_sym_driver(&cu);
    if (status != EEP_OK) {
        return status;
    }
    status = eep_status_from_cu(cu->cuCtxGetCurrent(&ctx), "cuCtxGetCurrent");
    if (status != EEP_OK) {
        return status;
    }
    if (ctx == NULL) {
        eep_error(EEP_SUBSYS_JIT, "eep_jit_get_kernel: no current CUDA context (make the device's "
                                  "primary context current first)");
        return EEP_ERR_INVALID_ARG;
    }
    /* The key alone tells whether this context already has it: no cache read, no load. */
    status = eep_jit_prepare(jit, spec, &unit, &info);
    if (status != EEP_OK) {
        return status;
    }
    pthread_mutex_lock(&jit->lock);
    found = eep_jit_find_locked(jit, ctx, info.key);
    pthread_mutex_unlock(&jit->lock);
    if (found == NULL) {
        status = eep_jit_fetch(jit, spec, &unit, &info, &cubin, &size);
    }
    eep_jit_unit_cleanup(&unit);
    if (status == EEP_OK && found == NULL && quiesce) {
        status = eep_jit_quiesce(cu, stream);
    }
    if (status != EEP_OK) {
        free(cubin);
        return status;
    }
    pthread_mutex_lock(&jit->lock);
    found = eep_jit_find_locked(jit, ctx, info.key); /* another thread may have loaded it */
    if (found == NULL) {
        k = calloc(1, sizeof(*k));
        if (k == NULL) {
            status = EEP_ERR_NO_MEMORY;
        } else {
            status = eep_jit_load(cu, cubin, info.key, k);
            if (status == EEP_OK) {
                k->jit       = jit;
                k->ctx       = ctx;
                k->next      = jit->kernels;
                jit->kernels = k;
                found        = k;
            } else {
                free(k);
            }
        }
    }
    pthread_mutex_unlock(&jit->lock);
    free(cubin);
    if (status != EEP_OK) {
        return status;
    }
    *kernel_p = found;
    return EEP_OK;
}

eep_status_t eep_jit_get_kernel(eep_jit_t *jit, const eep_jit_spec_t *spec,
                                eep_jit_kernel_t **kernel_p)
{
    return eep_jit_get_kernel_impl(jit, spec, 0, NULL, kernel_p);
}

eep_status_t eep_jit_get_kernel_on(eep_jit_t *jit, const eep_jit_spec_t *spec, void *stream,
                                   eep_jit_kernel_t **kernel_p)
{
    return eep_jit_get_kernel_impl(jit, spec, 1, (CUstream)stream, kernel_p);
}

eep_status_t eep_jit_launch(const eep_jit_kernel_t *kernel, unsigned grid_x, unsigned block_x,
                            size_t shared_bytes, void *stream, const void *params,
                            size_t params_size)
{
    return eep_jit_launch_ex(kernel, grid_x, block_x, shared_bytes, stream, params, params_size, 0);
}

eep_status_t eep_jit_launch_ex(const eep_jit_kernel_t *kernel, unsigned grid_x, unsigned block_x,
                               size_t shared_bytes, void *stream, const void *params,
                               size_t params_size, unsigned flags)
{
    const eep_cuda_sym_t *cu;
    eep_status_t          status;
    void                 *args[1];

    if (kernel == NULL || params == NULL || grid_x == 0 || block_x == 0) {
        eep_error(EEP_SUBSYS_JIT, "eep_jit_launch: %s",
                  kernel == NULL   ? "kernel is NULL"
                  : params == NULL ? "params is NULL"
                                   : "grid_x and block_x must be positive");
        return EEP_ERR_INVALID_ARG;
    }
    if (kernel->param_size != 0 && params_size != kernel->param_size) {
        eep_error(EEP_SUBSYS_JIT,
                  "eep_jit_launch: params_size %zu but kernel %.16s takes %zu bytes", params_size,
                  kernel->key, kernel->param_size);
        return EEP_ERR_INVALID_ARG;
    }
    status = eep_cuda_sym_driver(&cu);
    if (status != EEP_OK) {
        return status;
    }
    if (shared_bytes > 48 * 1024) {
        status = eep_status_from_cu(
            cu->cuFuncSetAttribute((CUfunction)kernel->function,
                                   CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES,
                                   (int)shared_bytes),
            "cuFuncSetAttribute(max dynamic shared memory)");
        if (status != EEP_OK) {
            return status;
        }
    }
    args[0] = (void *)params;
    if ((flags & EEP_JIT_LAUNCH_PDL) != 0 && cu->cuLaunchKernelEx != NULL) {
        CUlaunchAttribute attr;
        CUlaunchConfig    cfg;

        memset(&attr, 0, sizeof(attr));
        memset(&cfg, 0, sizeof(cfg));
        attr.id = CU_LAUNCH_ATTRIBUTE_PROGRAMMATIC_STREAM_SERIALIZATION;
        attr.value.programmaticStreamSerializationAllowed = 1;
        cfg.gridDimX                                      = grid_x;
        cfg.gridDimY                                      = 1;
        cfg.gridDimZ                                      = 1;
        cfg.blockDimX                                     = block_x;
        cfg.blockDimY                                     = 1;
        cfg.blockDimZ                                     = 1;
        cfg.sharedMemBytes                                = (unsigned)shared_bytes;
        cfg.hStream                                       = (CUstream)stream;
        cfg.attrs                                         = &attr;
        cfg.numAttrs                                      = 1;
        return eep_status_from_cu(
            cu->cuLaunchKernelEx(&cfg, (CUfunction)kernel->function, args, NULL),
            "cuLaunchKernelEx(jit kernel, programmatic dependent launch)");
    }
    return eep_status_from_cu(cu->cuLaunchKernel((CUfunction)kernel->function, grid_x, 1, 1,
                                                 block_x, 1, 1, (unsigned)shared_bytes,
                                                 (CUstream)stream, args, NULL),
                              "cuLaunchKernel(jit kernel)");
}
