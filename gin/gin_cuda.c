/* gin/gin_cuda.c - the CUDA driver behind one table, resolved from libcuda.so.1 with dlopen at
 * the first init.  Without a driver (CI, this plugin's own CPU tests) the table stays empty and
 * only host-memory registrations work; a CUDA registration then fails with one clear message.
 *
 * The plugin's GPU work (the copies of puts, the writes of signals) runs in a CUDA context of its
 * own, not the application's.  A GPU has a few hardware work queues per context
 * (CUDA_DEVICE_MAX_CONNECTIONS, 8 by default) and streams share them: on a stream that shares
 * a queue with an application stream whose next launch waits for a kernel, our copy waits too.
 * That kernel is the very one waiting for the copy (a combine, with torch's next op queued
 * behind it): measured, both ranks stalled until the 30 s deadline.  A context of our own has
 * queues of its own; the GPU time-slices the two contexts, so a copy waits at most a slice.
 * Its memory is all cuMem (windows, NCCL's signals, our peer mappings), which every context of
 * the process reaches. */
#include <dlfcn.h>
#include <pthread.h>
#include <stdio.h>
#include <string.h>

#include "gin/gin_int.h"

eep_gin_cuda_t eep_gin_cu;

static pthread_once_t eep_gin_cuda_once = PTHREAD_ONCE_INIT;

#define EEP_GIN_STR2(_x) #_x
#define EEP_GIN_STR(_x)  EEP_GIN_STR2(_x)

static void eep_gin_cuda_do_load(void)
{
    void *lib = dlopen("libcuda.so.1", RTLD_NOW | RTLD_LOCAL);

    if (lib == NULL) {
        EEP_GIN_INFO("no CUDA driver (%s): host memory only", dlerror());
        return;
    }
#define EEP_GIN_CUDA_RESOLVE(_name)                                                                \
    *(void **)&eep_gin_cu._name = dlsym(lib, EEP_GIN_STR(_name));                                  \
    if (eep_gin_cu._name == NULL) {                                                                \
        EEP_GIN_WARN("libcuda.so.1 lacks %s: host memory only", EEP_GIN_STR(_name));               \
        return;                                                                                    \
    }
    EEP_GIN_CUDA_FUNCS(EEP_GIN_CUDA_RESOLVE)
#undef EEP_GIN_CUDA_RESOLVE
    if (eep_gin_cu.cuInit(0) != CUDA_SUCCESS) {
        EEP_GIN_INFO("cuInit failed: host memory only");
        return;
    }
    eep_gin_cu.loaded = 1; /* the library stays open for the life of the process */
}

int eep_gin_cuda_load(void)
{
    pthread_once(&eep_gin_cuda_once, eep_gin_cuda_do_load);
    return eep_gin_cu.loaded ? 0 : -1;
}

static pthread_mutex_t eep_gin_ctx_lock = PTHREAD_MUTEX_INITIALIZER;
static CUcontext       eep_gin_own_ctx[64]; /* by device ordinal; made once, kept */

CUcontext eep_gin_cuda_work_context(CUcontext caller, int dev)
{
    CUctxCreateParams params = { 0 };
    CUcontext         ctx    = NULL, popped;

    if (!eep_gin_cu.loaded || caller == NULL) {
        return NULL;
    }
    if (!eep_gin_own_context() || dev < 0 || dev >= 64) {
        return caller;
    }
    pthread_mutex_lock(&eep_gin_ctx_lock);
    if (eep_gin_own_ctx[dev] == NULL) {
        /* made current here by the create: popped at once, the caller's context comes back */
        if (EEP_GIN_CU(cuCtxCreate(&ctx, &params, 0, (CUdevice)dev)) == 0) {
            eep_gin_cu.cuCtxPopCurrent(&popped);
            eep_gin_own_ctx[dev] = ctx;
            EEP_GIN_INFO("device %d: the plugin's copies run in a CUDA context of their own (%p)",
                         dev, (void *)ctx);
        } else {
            EEP_GIN_WARN("device %d: no CUDA context of the plugin's own: copies share the "
                         "application's (they can wait behind its queued work)",
                         dev);
        }
    }
    ctx = eep_gin_own_ctx[dev] != NULL ? eep_gin_own_ctx[dev] : caller;
    pthread_mutex_unlock(&eep_gin_ctx_lock);
    return ctx;
}

void eep_gin_cuda_enter(void *coll_comm, eep_gin_cuda_scope_t *scope)
{
    const eep_gin_comm_t *comm = coll_comm;
    CUcontext             cur  = NULL;
    CUresult              res;

    memset(scope, 0, sizeof(*scope));
    if (!eep_gin_cu.loaded || comm == NULL || comm->magic != EEP_GIN_COMM_MAGIC ||
        comm->workctx == NULL) {
        return;
    }
    scope->mode  = CU_STREAM_CAPTURE_MODE_RELAXED;
    scope->moded = eep_gin_cu.cuThreadExchangeStreamCaptureMode(&scope->mode) == CUDA_SUCCESS;
    if (eep_gin_cu.cuCtxGetCurrent(&cur) == CUDA_SUCCESS && cur == comm->workctx) {
        return;
    }
    res           = eep_gin_cu.cuCtxPushCurrent(comm->workctx);
    scope->pushed = res == CUDA_SUCCESS;
    if (res != CUDA_SUCCESS && res != CUDA_ERROR_DEINITIALIZED) { /* at exit: nothing to do */
        eep_gin_cuda_check(res, "cuCtxPushCurrent(work context)", __FILE__, __LINE__);
    }
}

void eep_gin_cuda_leave(const eep_gin_cuda_scope_t *scope)
{
    CUcontext           popped;
    CUstreamCaptureMode mode = scope->mode;

    if (scope->pushed) {
        eep_gin_cu.cuCtxPopCurrent(&popped);
    }
    if (scope->moded) {
        eep_gin_cu.cuThreadExchangeStreamCaptureMode(&mode);
    }
}

int eep_gin_cuda_check(CUresult res, const char *call, const char *file, int line)
{
    const char *msg = NULL;

    if (res == CUDA_SUCCESS) {
        return 0;
    }
    if (eep_gin_cu.cuGetErrorString != NULL) {
        eep_gin_cu.cuGetErrorString(res, &msg);
    }
    eep_gin_log(EEP_NCCL_LOG_WARN, file, line, "%s failed: %d %s", call, (int)res,
                msg != NULL ? msg : "");
    return -1;
}
