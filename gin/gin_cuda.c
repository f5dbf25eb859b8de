/* gin/gin_cuda.c - the CUDA driver behind one table, resolved from libcuda.so.1 with dlopen at
 * the first init.  Without a driver (CI, this plugin's own CPU tests) the table stays empty and
 * only host-memory registrations work; a CUDA registration then fails with one clear message. */
#include <dlfcn.h>
#include <pthread.h>
#include <stdio.h>

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
