/*
 * cuda_sym.h - the CUDA driver API and NVRTC, reached through one symbol table.
 *
 * libeep links neither libcuda nor libnvrtc: a machine without a GPU driver must still load the
 * library, compile kernels and run the control plane.  Every cu* and nvrtc* function we call is
 * listed once below (an X-macro), resolved on first use (dlsym of the exported symbol the header
 * declares, see cuda_sym.c for why not cuGetProcAddress) and called through the table:
 *
 *     const eep_cuda_sym_t *cu;
 *     status = eep_cuda_sym_driver(&cu);           // EEP_ERR_NO_DEVICE without a driver
 *     if (status != EEP_OK) { ... }
 *     status = eep_status_from_cu(cu->cuStreamCreate(&s, CU_STREAM_NON_BLOCKING),
 *                                 "cuStreamCreate");
 *
 * <cuda.h> and <nvrtc.h> are included for their types only.  The macros in <cuda.h> that map a
 * name to its versioned symbol (cuMemAlloc -> cuMemAlloc_v2) apply to the table's fields as well,
 * so `cu->cuMemAlloc` is the same ABI the header declares.  Functions marked optional (0) may be
 * NULL on an older driver; check before calling them.
 */
#ifndef EEP_CUDA_SYM_H
#define EEP_CUDA_SYM_H

#include <cuda.h>
#include <nvrtc.h>

#include "eep/status.h"

#ifdef __cplusplus
extern "C" {
#endif

/* _X(name, required): every driver function ElasticEP calls. */
#define EEP_CUDA_DRIVER_FUNCS(_X)                                                                  \
    /* errors, init, versions */                                                                   \
    _X(cuGetErrorName, 1)                                                                          \
    _X(cuGetErrorString, 1)                                                                        \
    _X(cuInit, 1)                                                                                  \
    _X(cuDriverGetVersion, 1)                                                                      \
    /* devices */                                                                                  \
    _X(cuDeviceGet, 1)                                                                             \
    _X(cuDeviceGetCount, 1)                                                                        \
    _X(cuDeviceGetAttribute, 1)                                                                    \
    _X(cuDeviceGetName, 1)                                                                         \
    _X(cuDeviceGetPCIBusId, 1)                                                                     \
    _X(cuDeviceTotalMem, 1)                                                                        \
    _X(cuDeviceGetUuid, 0)                                                                         \
    _X(cuDeviceCanAccessPeer, 1)                                                                   \
    /* contexts and primary contexts */                                                            \
    _X(cuDevicePrimaryCtxRetain, 1)                                                                \
    _X(cuDevicePrimaryCtxRelease, 1)                                                               \
    _X(cuDevicePrimaryCtxGetState, 1)                                                              \
    _X(cuDevicePrimaryCtxSetFlags, 1)                                                              \
    _X(cuCtxCreate, 0)                                                                             \
    _X(cuCtxDestroy, 1)                                                                            \
    _X(cuCtxGetCurrent, 1)                                                                         \
    _X(cuCtxSetCurrent, 1)                                                                         \
    _X(cuCtxPushCurrent, 1)                                                                        \
    _X(cuCtxPopCurrent, 1)                                                                         \
    _X(cuCtxGetDevice, 1)                                                                          \
    _X(cuCtxSynchronize, 1)                                                                        \
    _X(cuCtxGetStreamPriorityRange, 1)                                                             \
    /* memory */                                                                                   \
    _X(cuMemAlloc, 1)                                                                              \
    _X(cuMemFree, 1)                                                                               \
    _X(cuMemAllocHost, 1)                                                                          \
    _X(cuMemFreeHost, 1)                                                                           \
    _X(cuMemHostAlloc, 1)                                                                          \
    _X(cuMemHostGetDevicePointer, 1)                                                               \
    _X(cuMemHostRegister, 1)                                                                       \
    _X(cuMemHostUnregister, 1)                                                                     \
    _X(cuMemGetInfo, 1)                                                                            \
    _X(cuMemGetAddressRange, 1)                                                                    \
    _X(cuMemRetainAllocationHandle, 0)                                                             \
    _X(cuMemRelease, 0)                                                                            \
    _X(cuMemUnmap, 0)                                                                              \
    _X(cuMemAddressFree, 0)                                                                        \
    _X(cuMemcpy, 1)                                                                                \
    _X(cuMemcpyAsync, 1)                                                                           \
    _X(cuMemcpyHtoD, 1)                                                                            \
    _X(cuMemcpyDtoH, 1)                                                                            \
    _X(cuMemcpyDtoD, 1)                                                                            \
    _X(cuMemcpyHtoDAsync, 1)                                                                       \
    _X(cuMemcpyDtoHAsync, 1)                                                                       \
    _X(cuMemcpyDtoDAsync, 1)                                                                       \
    _X(cuMemcpyPeerAsync, 1)                                                                       \
    _X(cuMemsetD8, 1)                                                                              \
    _X(cuMemsetD32, 1)                                                                             \
    _X(cuMemsetD8Async, 1)                                                                         \
    _X(cuMemsetD32Async, 1)                                                                        \
    _X(cuPointerGetAttribute, 1)                                                                   \
    _X(cuPointerGetAttributes, 1)                                                                  \
    /* streams and stream memory operations */                                                     \
    _X(cuStreamCreate, 1)                                                                          \
    _X(cuStreamCreateWithPriority, 1)                                                              \
    _X(cuStreamDestroy, 1)                                                                         \
    _X(cuStreamSynchronize, 1)                                                                     \
    _X(cuStreamQuery, 1)                                                                           \
    _X(cuStreamIsCapturing, 0)                                                                     \
    _X(cuStreamWaitEvent, 1)                                                                       \
    _X(cuStreamGetCtx, 0)                                                                          \
    _X(cuStreamWriteValue32, 1)                                                                    \
    _X(cuStreamWaitValue32, 1)                                                                     \
    _X(cuStreamWriteValue64, 0)                                                                    \
    _X(cuStreamWaitValue64, 0)                                                                     \
    _X(cuLaunchHostFunc, 1)                                                                        \
    /* events */                                                                                   \
    _X(cuEventCreate, 1)                                                                           \
    _X(cuEventDestroy, 1)                                                                          \
    _X(cuEventRecord, 1)                                                                           \
    _X(cuEventSynchronize, 1)                                                                      \
    _X(cuEventQuery, 1)                                                                            \
    _X(cuEventElapsedTime, 0)                                                                      \
    /* modules, libraries, functions */                                                            \
    _X(cuModuleLoadData, 1)                                                                        \
    _X(cuModuleLoadDataEx, 1)                                                                      \
    _X(cuModuleUnload, 1)                                                                          \
    _X(cuModuleGetFunction, 1)                                                                     \
    _X(cuModuleGetGlobal, 1)                                                                       \
    _X(cuLibraryLoadData, 0)                                                                       \
    _X(cuLibraryUnload, 0)                                                                         \
    _X(cuLibraryGetKernel, 0)                                                                      \
    _X(cuKernelGetFunction, 0)                                                                     \
    _X(cuFuncGetAttribute, 1)                                                                      \
    _X(cuFuncSetAttribute, 1)                                                                      \
    _X(cuFuncGetParamInfo, 0)                                                                      \
    _X(cuOccupancyMaxActiveBlocksPerMultiprocessor, 1)                                             \
    /* launch */                                                                                   \
    _X(cuLaunchKernel, 1)                                                                          \
    _X(cuLaunchKernelEx, 0)

/* _X(name, required): every NVRTC function ElasticEP calls. */
#define EEP_NVRTC_FUNCS(_X)                                                                        \
    _X(nvrtcGetErrorString, 1)                                                                     \
    _X(nvrtcVersion, 1)                                                                            \
    _X(nvrtcCreateProgram, 1)                                                                      \
    _X(nvrtcDestroyProgram, 1)                                                                     \
    _X(nvrtcCompileProgram, 1)                                                                     \
    _X(nvrtcGetProgramLogSize, 1)                                                                  \
    _X(nvrtcGetProgramLog, 1)                                                                      \
    _X(nvrtcGetCUBINSize, 1)                                                                       \
    _X(nvrtcGetCUBIN, 1)                                                                           \
    _X(nvrtcGetPTXSize, 1)                                                                         \
    _X(nvrtcGetPTX, 1)                                                                             \
    _X(nvrtcGetPCHCreateStatus, 0)                                                                 \
    _X(nvrtcGetPCHHeapSizeRequired, 0)                                                             \
    _X(nvrtcSetPCHHeapSize, 0)

#define EEP_CUDA_SYM_FIELD(_name, _required) __typeof__(&_name) _name;

typedef struct {
    EEP_CUDA_DRIVER_FUNCS(EEP_CUDA_SYM_FIELD)
    EEP_NVRTC_FUNCS(EEP_CUDA_SYM_FIELD)
    int  driver_version; /* cuDriverGetVersion(), e.g. 13000; 0 until the driver is loaded */
    int  nvrtc_major;    /* nvrtcVersion(); 0 until NVRTC is loaded */
    int  nvrtc_minor;
    char driver_path[4096]; /* the loaded files, for logs and the JIT cache key */
    char nvrtc_path[4096];
} eep_cuda_sym_t;

/**
 * Load the driver (libcuda.so.1) once per process, resolve its functions and call cuInit(0).
 * Thread-safe; after the first call this is an atomic load.
 * @param [out] sym_p  the table (its driver half is valid).
 * @return EEP_OK; EEP_ERR_NO_DEVICE with one clear message when there is no driver, it lacks a
 *         required function, or cuInit finds no device.  Later calls return the same status.
 */
eep_status_t eep_cuda_sym_driver(const eep_cuda_sym_t **sym_p);

/**
 * The driver half if someone already loaded it, without loading it (no message on a machine
 * without a driver): for defaults that follow the GPU in use when there is one (EEP_JIT_ARCH=auto).
 * @param [out] sym_p  the table, written only on EEP_OK.
 * @return EEP_OK; EEP_ERR_NO_DEVICE when the driver is not loaded (yet, or at all).
 */
eep_status_t eep_cuda_sym_driver_loaded(const eep_cuda_sym_t **sym_p);

/**
 * Load NVRTC (libnvrtc.so.13, else libnvrtc.so) once per process and resolve its functions.
 * Needs no GPU.
 * @param [out] sym_p  the table (its NVRTC half is valid).
 * @return EEP_OK; EEP_ERR_JIT with one clear message when NVRTC cannot be loaded (the nvcc
 *         backend may still work).
 */
eep_status_t eep_cuda_sym_nvrtc(const eep_cuda_sym_t **sym_p);

/**
 * The file eep_cuda_sym_nvrtc() would load first, found without loading it: the test override
 * when it is a path, else the toolkit's libnvrtc.so.13 ($CUDA_HOME/lib64, baked in at build time)
 * when that file exists.  The JIT keys on this file so that a warm lookup needs no NVRTC in memory.
 * @return 1 with the path in @p path_p; 0 when NVRTC would come from the loader's search path.
 */
int eep_cuda_sym_nvrtc_file(char *path_p, size_t len);

/**
 * Translate a CUresult, logging @p what with the driver's name and text for it.
 * CUDA_ERROR_NOT_READY gives EEP_INPROGRESS without a log line.
 * @return EEP_OK, EEP_INPROGRESS, or the matching error (no driver or device: EEP_ERR_NO_DEVICE;
 *         faults in a kernel: EEP_ERR_DEVICE_FAULT; bad image: EEP_ERR_JIT; ...;
 *         else EEP_ERR_CUDA).
 */
eep_status_t eep_status_from_cu(CUresult res, const char *what);

/**
 * Translate an nvrtcResult, logging @p what and NVRTC's text for it.
 * @return EEP_OK, EEP_ERR_NO_MEMORY, EEP_ERR_INVALID_ARG (bad program handle or input), or
 *         EEP_ERR_JIT.
 */
eep_status_t eep_status_from_nvrtc(nvrtcResult res, const char *what);

/**
 * Test hook: the libraries to dlopen instead of the defaults (NULL: the default), applied to the
 * next eep_cuda_sym_driver() / eep_cuda_sym_nvrtc().  Forgets what was loaded before (without
 * dlclose, so pointers already handed out stay valid).  Not for production code.
 */
void eep_cuda_sym_test_override(const char *driver_lib, const char *nvrtc_lib);

#ifdef __cplusplus
}
#endif

#endif /* EEP_CUDA_SYM_H */
