/* gin/gin_cuda.c - the CUDA driver behind one table, resolved from libcuda.so.1 with dlopen at
 * the first init.  Without a driver (CI, this plugin's own CPU tests) the table stays empty and
 * only host-memory registrations work; a CUDA registration then fails with one clear message. */
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
    *(void **)&eep_gin_cu.cuMemcpyBatchAsync = dlsym(lib, EEP_GIN_STR(cuMemcpyBatchAsync));
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

/*
 * A device-to-device copy on the copy engines.  The driver runs a plain cuMemcpyAsync between two
 * allocations of one GPU (a peer process's memory mapped here, on the one-GPU cluster) as a kernel
 * on the SMs: behind our own EP kernel that fills the GPU and spins until this very copy lands, it
 * never starts (measured on an H200: the combine's puts waited for its 4 s deadline).  A batch
 * copy flagged CU_MEMCPY_FLAG_PREFER_OVERLAP_WITH_COMPUTE goes to the copy engines; a driver
 * without it (or one that refuses it, logged once) gets the plain copy.
 */
CUresult eep_gin_cuda_copy_dtod(CUdeviceptr dst, CUdeviceptr src, size_t size, CUstream stream)
{
    static int         refused;
    CUmemcpyAttributes attr;
    size_t             attr_idx = 0;
    CUresult           res;

    if (eep_gin_cu.cuMemcpyBatchAsync != NULL && !__atomic_load_n(&refused, __ATOMIC_RELAXED)) {
        memset(&attr, 0, sizeof(attr));
        attr.srcAccessOrder  = CU_MEMCPY_SRC_ACCESS_ORDER_STREAM;
        attr.srcLocHint.type = CU_MEM_LOCATION_TYPE_DEVICE;
        attr.dstLocHint.type = CU_MEM_LOCATION_TYPE_DEVICE;
        attr.flags           = CU_MEMCPY_FLAG_PREFER_OVERLAP_WITH_COMPUTE;
        res = eep_gin_cu.cuMemcpyBatchAsync(&dst, &src, &size, 1, &attr, &attr_idx, 1, stream);
        if (res == CUDA_SUCCESS) {
            return res;
        }
        if (!__atomic_exchange_n(&refused, 1, __ATOMIC_RELAXED)) {
            EEP_GIN_WARN("cuMemcpyBatchAsync (copy engines) failed (%d): device copies now run as "
                         "plain cuMemcpyAsync, which waits for free SMs",
                         (int)res);
        }
    }
    return eep_gin_cu.cuMemcpyAsync(dst, src, size, stream);
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
