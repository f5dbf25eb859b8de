/*
 * cuda_sym.c - load the CUDA driver and NVRTC on first use and translate their result codes.
 *
 * One process-wide table (like the log singleton, it is process state by nature: there is one
 * driver per process).  Each half is loaded at most once under a mutex; the result, success or
 * the failure status, is published with a release store so later calls are one acquire load and
 * a failure is reported once, not on every call.  Driver functions are resolved with dlsym of the
 * exported name <cuda.h> maps them to (cuMemAlloc -> cuMemAlloc_v2): that symbol has exactly the
 * prototype the header declares.  Not cuGetProcAddress(name, CUDA_VERSION): it returns the newest
 * ABI of a name as of that version, which is not always the declared one (in 13.0,
 * "cuCtxSynchronize" comes back as the v13000 variant taking a CUcontext while cuda.h declares
 * cuCtxSynchronize(void); calling it through the table failed with CONTEXT_IS_DESTROYED on the
 * H200).
 */
#include "elastic/gpu/cuda_sym.h"

#include <dlfcn.h>
#include <pthread.h>
#include <stddef.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include "util/log.h"

#ifndef EEP_CUDA_SYM_NVRTC_FILE
#define EEP_CUDA_SYM_NVRTC_FILE "/usr/local/cuda/lib64/libnvrtc.so.13"
#endif

enum { EEP_SYM_UNLOADED = 0, EEP_SYM_READY, EEP_SYM_FAILED };

/* The name a field resolves to after <cuda.h>'s macros (cuMemAlloc -> "cuMemAlloc_v2"). */
#define EEP_SYM_STR_(_x) #_x
#define EEP_SYM_STR(_x)  EEP_SYM_STR_(_x)

typedef struct {
    const char *name;     /* as written in the list, for messages */
    const char *abi_name; /* after the header's macros: dlsym takes this */
    size_t      offset;   /* of the field in eep_cuda_sym_t */
    int         required;
} eep_cuda_sym_row_t;

#define EEP_SYM_ROW(_name, _required)                                                              \
    { #_name, EEP_SYM_STR(_name), offsetof(eep_cuda_sym_t, _name), _required },

static const eep_cuda_sym_row_t eep_cuda_driver_rows[] = { EEP_CUDA_DRIVER_FUNCS(EEP_SYM_ROW) };
static const eep_cuda_sym_row_t eep_nvrtc_rows[]       = { EEP_NVRTC_FUNCS(EEP_SYM_ROW) };

#define EEP_NROWS(_a) (sizeof(_a) / sizeof((_a)[0]))

static struct {
    pthread_mutex_t lock;
    int             driver_state; /* EEP_SYM_*; read with acquire, written with release */
    int             nvrtc_state;
    eep_status_t    driver_status;
    eep_status_t    nvrtc_status;
    char            driver_lib[4096]; /* test override, "" for the default */
    char            nvrtc_lib[4096];
    eep_cuda_sym_t  sym;
} eep_cuda_sym_ctx = { .lock = PTHREAD_MUTEX_INITIALIZER };

static void **eep_cuda_sym_slot(size_t offset)
{
    return (void **)((char *)&eep_cuda_sym_ctx.sym + offset);
}

static void eep_cuda_sym_lib_path(void *handle, void *any_symbol, char *buf, size_t len)
{
    Dl_info info;

    (void)handle;
    if (any_symbol != NULL && dladdr(any_symbol, &info) != 0 && info.dli_fname != NULL) {
        snprintf(buf, len, "%s", info.dli_fname);
    } else {
        snprintf(buf, len, "(unknown)");
    }
}

static eep_status_t eep_cuda_sym_load_driver(void)
{
    const char     *lib = eep_cuda_sym_ctx.driver_lib[0] != '\0' ? eep_cuda_sym_ctx.driver_lib
                                                                 : "libcuda.so.1";
    eep_cuda_sym_t *sym = &eep_cuda_sym_ctx.sym;
    eep_status_t    status;
    void           *handle, *fn;
    size_t          i;
    CUresult        res;

    handle = dlopen(lib, RTLD_NOW | RTLD_LOCAL);
    if (handle == NULL) {
        eep_error(EEP_SUBSYS_RUNTIME,
                  "no CUDA driver: cannot load %s (%s); this machine needs the "
                  "NVIDIA driver to run kernels (compiling them needs no driver)",
                  lib, dlerror());
        return EEP_ERR_NO_DEVICE;
    }
    for (i = 0; i < EEP_NROWS(eep_cuda_driver_rows); i++) {
        const eep_cuda_sym_row_t *row = &eep_cuda_driver_rows[i];

        fn = dlsym(handle, row->abi_name);
        if (fn == NULL && row->required) {
            eep_error(EEP_SUBSYS_RUNTIME,
                      "the CUDA driver %s lacks %s (%s): it is older than the "
                      "CUDA %d.%d headers ElasticEP was built with; update the NVIDIA driver",
                      lib, row->name, row->abi_name, CUDA_VERSION / 1000, CUDA_VERSION % 1000 / 10);
            status = EEP_ERR_NO_DEVICE;
            goto err_close;
        }
        if (fn == NULL) {
            eep_debug(EEP_SUBSYS_RUNTIME, "optional driver function %s is unavailable", row->name);
        }
        *eep_cuda_sym_slot(row->offset) = fn;
    }
    eep_cuda_sym_lib_path(handle, (void *)sym->cuInit, sym->driver_path, sizeof(sym->driver_path));
    res = sym->cuInit(0);
    if (res != CUDA_SUCCESS) {
        status = eep_status_from_cu(res, "cuInit");
        if (status != EEP_ERR_NO_DEVICE) {
            status = EEP_ERR_NO_DEVICE; /* whatever the reason, there is no usable device */
        }
        goto err_close;
    }
    res = sym->cuDriverGetVersion(&sym->driver_version);
    if (res != CUDA_SUCCESS) {
        status = eep_status_from_cu(res, "cuDriverGetVersion");
        goto err_close;
    }
    eep_debug(EEP_SUBSYS_RUNTIME, "cuda driver %d loaded from %s", sym->driver_version,
              sym->driver_path);
    return EEP_OK;

err_close:
    /* Keep the table consistent: a failed load leaves no dangling pointers behind. */
    for (i = 0; i < EEP_NROWS(eep_cuda_driver_rows); i++) {
        *eep_cuda_sym_slot(eep_cuda_driver_rows[i].offset) = NULL;
    }
    dlclose(handle);
    return status;
}

/* Called with the lock held (or from eep_cuda_sym_nvrtc_file, which takes it). */
static int eep_cuda_sym_nvrtc_file_locked(char *path_p, size_t len)
{
    const char *lib = eep_cuda_sym_ctx.nvrtc_lib;

    if (lib[0] != '\0') {
        return strchr(lib, '/') != NULL && access(lib, R_OK) == 0 &&
               snprintf(path_p, len, "%s", lib) < (int)len;
    }
    return access(EEP_CUDA_SYM_NVRTC_FILE, R_OK) == 0 &&
           snprintf(path_p, len, "%s", EEP_CUDA_SYM_NVRTC_FILE) < (int)len;
}

int eep_cuda_sym_nvrtc_file(char *path_p, size_t len)
{
    int found;

    pthread_mutex_lock(&eep_cuda_sym_ctx.lock);
    found = eep_cuda_sym_nvrtc_file_locked(path_p, len);
    pthread_mutex_unlock(&eep_cuda_sym_ctx.lock);
    return found;
}

static eep_status_t eep_cuda_sym_load_nvrtc(void)
{
    static const char *const defaults[]   = { "libnvrtc.so.13", "libnvrtc.so" };
    eep_cuda_sym_t          *sym          = &eep_cuda_sym_ctx.sym;
    const char              *tried        = NULL;
    char                     errors[1024] = "", file[4096];
    void                    *handle       = NULL, *fn;
    size_t                   i, used;
    nvrtcResult              res;

    /* The toolkit's file first, so that what is loaded is what the JIT keyed on. */
    if (eep_cuda_sym_ctx.nvrtc_lib[0] == '\0' &&
        eep_cuda_sym_nvrtc_file_locked(file, sizeof(file))) {
        tried  = file;
        handle = dlopen(file, RTLD_NOW | RTLD_LOCAL);
        if (handle == NULL) {
            snprintf(errors, sizeof(errors), "%s", dlerror());
        }
    }
    if (handle != NULL) {
        /* loaded from the toolkit */
    } else if (eep_cuda_sym_ctx.nvrtc_lib[0] != '\0') {
        tried  = eep_cuda_sym_ctx.nvrtc_lib;
        handle = dlopen(tried, RTLD_NOW | RTLD_LOCAL);
        if (handle == NULL) {
            snprintf(errors, sizeof(errors), "%s", dlerror());
        }
    } else {
        for (i = 0; i < EEP_NROWS(defaults) && handle == NULL; i++) {
            tried  = defaults[i];
            handle = dlopen(tried, RTLD_NOW | RTLD_LOCAL);
            if (handle == NULL) {
                used = strlen(errors);
                snprintf(errors + used, sizeof(errors) - used, "%s%s", used > 0 ? "; " : "",
                         dlerror());
            }
        }
    }
    if (handle == NULL) {
        eep_error(EEP_SUBSYS_JIT,
                  "no NVRTC: cannot load %s (%s); install the CUDA toolkit's "
                  "libnvrtc or use the nvcc backend (EEP_JIT_BACKEND=nvcc)",
                  tried, errors);
        return EEP_ERR_JIT;
    }
    for (i = 0; i < EEP_NROWS(eep_nvrtc_rows); i++) {
        fn = dlsym(handle, eep_nvrtc_rows[i].abi_name);
        if (fn == NULL && eep_nvrtc_rows[i].required) {
            eep_error(EEP_SUBSYS_JIT, "NVRTC library %s lacks %s; it is not a usable NVRTC", tried,
                      eep_nvrtc_rows[i].name);
            goto err_close;
        }
        *eep_cuda_sym_slot(eep_nvrtc_rows[i].offset) = fn;
    }
    res = sym->nvrtcVersion(&sym->nvrtc_major, &sym->nvrtc_minor);
    if (res != NVRTC_SUCCESS) {
        eep_status_from_nvrtc(res, "nvrtcVersion");
        goto err_close;
    }
    eep_cuda_sym_lib_path(handle, (void *)sym->nvrtcVersion, sym->nvrtc_path,
                          sizeof(sym->nvrtc_path));
    eep_debug(EEP_SUBSYS_JIT, "nvrtc %d.%d loaded from %s", sym->nvrtc_major, sym->nvrtc_minor,
              sym->nvrtc_path);
    return EEP_OK;

err_close:
    for (i = 0; i < EEP_NROWS(eep_nvrtc_rows); i++) {
        *eep_cuda_sym_slot(eep_nvrtc_rows[i].offset) = NULL;
    }
    sym->nvrtc_major = sym->nvrtc_minor = 0;
    dlclose(handle);
    return EEP_ERR_JIT;
}

/* Load one half at most once; @p state_p and @p status_p are that half's fields. */
static eep_status_t eep_cuda_sym_once(int *state_p, eep_status_t                        *status_p,
                                      eep_status_t (*load)(void), const eep_cuda_sym_t **sym_p)
{
    int state = __atomic_load_n(state_p, __ATOMIC_ACQUIRE);

    if (state == EEP_SYM_UNLOADED) {
        pthread_mutex_lock(&eep_cuda_sym_ctx.lock);
        state = __atomic_load_n(state_p, __ATOMIC_ACQUIRE);
        if (state == EEP_SYM_UNLOADED) {
            *status_p = load();
            state     = *status_p == EEP_OK ? EEP_SYM_READY : EEP_SYM_FAILED;
            __atomic_store_n(state_p, state, __ATOMIC_RELEASE);
        }
        pthread_mutex_unlock(&eep_cuda_sym_ctx.lock);
    }
    if (state != EEP_SYM_READY) {
        return *status_p; /* the failure was logged when it happened */
    }
    *sym_p = &eep_cuda_sym_ctx.sym;
    return EEP_OK;
}

eep_status_t eep_cuda_sym_driver(const eep_cuda_sym_t **sym_p)
{
    return eep_cuda_sym_once(&eep_cuda_sym_ctx.driver_state, &eep_cuda_sym_ctx.driver_status,
                             eep_cuda_sym_load_driver, sym_p);
}

eep_status_t eep_cuda_sym_driver_loaded(const eep_cuda_sym_t **sym_p)
{
    if (__atomic_load_n(&eep_cuda_sym_ctx.driver_state, __ATOMIC_ACQUIRE) != EEP_SYM_READY) {
        return EEP_ERR_NO_DEVICE;
    }
    *sym_p = &eep_cuda_sym_ctx.sym;
    return EEP_OK;
}

eep_status_t eep_cuda_sym_nvrtc(const eep_cuda_sym_t **sym_p)
{
    return eep_cuda_sym_once(&eep_cuda_sym_ctx.nvrtc_state, &eep_cuda_sym_ctx.nvrtc_status,
                             eep_cuda_sym_load_nvrtc, sym_p);
}

void eep_cuda_sym_test_override(const char *driver_lib, const char *nvrtc_lib)
{
    size_t i;

    pthread_mutex_lock(&eep_cuda_sym_ctx.lock);
    snprintf(eep_cuda_sym_ctx.driver_lib, sizeof(eep_cuda_sym_ctx.driver_lib), "%s",
             driver_lib != NULL ? driver_lib : "");
    snprintf(eep_cuda_sym_ctx.nvrtc_lib, sizeof(eep_cuda_sym_ctx.nvrtc_lib), "%s",
             nvrtc_lib != NULL ? nvrtc_lib : "");
    for (i = 0; i < EEP_NROWS(eep_cuda_driver_rows); i++) {
        *eep_cuda_sym_slot(eep_cuda_driver_rows[i].offset) = NULL;
    }
    for (i = 0; i < EEP_NROWS(eep_nvrtc_rows); i++) {
        *eep_cuda_sym_slot(eep_nvrtc_rows[i].offset) = NULL;
    }
    eep_cuda_sym_ctx.sym.driver_version = 0;
    eep_cuda_sym_ctx.sym.nvrtc_major = eep_cuda_sym_ctx.sym.nvrtc_minor = 0;
    __atomic_store_n(&eep_cuda_sym_ctx.driver_state, EEP_SYM_UNLOADED, __ATOMIC_RELEASE);
    __atomic_store_n(&eep_cuda_sym_ctx.nvrtc_state, EEP_SYM_UNLOADED, __ATOMIC_RELEASE);
    pthread_mutex_unlock(&eep_cuda_sym_ctx.lock);
}

eep_status_t eep_status_from_cu(CUresult res, const char *what)
{
    const char  *name = NULL, *text = NULL;
    eep_status_t status;

    switch (res) {
    case CUDA_SUCCESS:
        return EEP_OK;
    case CUDA_ERROR_NOT_READY:
        return EEP_INPROGRESS;
    case CUDA_ERROR_INVALID_VALUE:
    case CUDA_ERROR_INVALID_HANDLE:
        status = EEP_ERR_INVALID_ARG;
        break;
    case CUDA_ERROR_OUT_OF_MEMORY:
        status = EEP_ERR_NO_MEMORY;
        break;
    case CUDA_ERROR_NO_DEVICE:
    case CUDA_ERROR_STUB_LIBRARY:
    case CUDA_ERROR_DEVICE_UNAVAILABLE:
    case CUDA_ERROR_DEVICE_NOT_LICENSED:
    case CUDA_ERROR_INVALID_DEVICE:
    case CUDA_ERROR_SYSTEM_DRIVER_MISMATCH:
    case CUDA_ERROR_COMPAT_NOT_SUPPORTED_ON_DEVICE:
    case CUDA_ERROR_SYSTEM_NOT_READY:
        status = EEP_ERR_NO_DEVICE;
        break;
    case CUDA_ERROR_INVALID_IMAGE:
    case CUDA_ERROR_INVALID_PTX:
    case CUDA_ERROR_UNSUPPORTED_PTX_VERSION:
    case CUDA_ERROR_NO_BINARY_FOR_GPU:
    case CUDA_ERROR_JIT_COMPILER_NOT_FOUND:
    case CUDA_ERROR_NOT_FOUND: /* a symbol missing from a module */
        status = EEP_ERR_JIT;
        break;
    case CUDA_ERROR_ILLEGAL_ADDRESS:
    case CUDA_ERROR_LAUNCH_FAILED:
    case CUDA_ERROR_LAUNCH_TIMEOUT:
    case CUDA_ERROR_ASSERT:
    case CUDA_ERROR_HARDWARE_STACK_ERROR:
    case CUDA_ERROR_ILLEGAL_INSTRUCTION:
    case CUDA_ERROR_MISALIGNED_ADDRESS:
    case CUDA_ERROR_INVALID_ADDRESS_SPACE:
    case CUDA_ERROR_INVALID_PC:
    case CUDA_ERROR_ECC_UNCORRECTABLE:
        status = EEP_ERR_DEVICE_FAULT;
        break;
    case CUDA_ERROR_LAUNCH_OUT_OF_RESOURCES:
        status = EEP_ERR_NO_RESOURCE;
        break;
    case CUDA_ERROR_NOT_SUPPORTED:
        status = EEP_ERR_UNSUPPORTED;
        break;
    default:
        status = EEP_ERR_CUDA;
        break;
    }
    /* The table may be half loaded (cuInit failing is translated here too). */
    if (eep_cuda_sym_ctx.sym.cuGetErrorName != NULL) {
        eep_cuda_sym_ctx.sym.cuGetErrorName(res, &name);
    }
    if (eep_cuda_sym_ctx.sym.cuGetErrorString != NULL) {
        eep_cuda_sym_ctx.sym.cuGetErrorString(res, &text);
    }
    eep_error(EEP_SUBSYS_RUNTIME, "%s failed: %s (%s, cuda %d)", what,
              text != NULL ? text : "unknown error", name != NULL ? name : "no name", (int)res);
    return status;
}

eep_status_t eep_status_from_nvrtc(nvrtcResult res, const char *what)
{
    const char  *text = NULL;
    eep_status_t status;

    switch (res) {
    case NVRTC_SUCCESS:
        return EEP_OK;
    case NVRTC_ERROR_OUT_OF_MEMORY:
        status = EEP_ERR_NO_MEMORY;
        break;
    case NVRTC_ERROR_INVALID_INPUT:
    case NVRTC_ERROR_INVALID_PROGRAM:
        status = EEP_ERR_INVALID_ARG;
        break;
    default:
        status = EEP_ERR_JIT;
        break;
    }
    if (eep_cuda_sym_ctx.sym.nvrtcGetErrorString != NULL) {
        text = eep_cuda_sym_ctx.sym.nvrtcGetErrorString(res);
    }
    eep_error(EEP_SUBSYS_JIT, "%s failed: %s (nvrtc %d)", what,
              text != NULL ? text : "unknown error", (int)res);
    return status;
}
