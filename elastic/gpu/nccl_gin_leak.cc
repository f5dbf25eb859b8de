/* elastic/gpu/nccl_gin_leak.cc - NCCL 2.28.9's leaked proxy GIN producer indices (see the
 * header).  C++ for the device communicator's struct, which NCCL declares for C++ only. */
#include "elastic/gpu/nccl_gin_leak.h"

#include <nccl.h>
#include <nccl_device.h>
#include <nccl_device/gin/proxy/gin_proxy_device_host_common.h>
#include <nccl_device/net_device.h>
#include <string.h>

#include "elastic/gpu/cuda_sym.h"
#include "util/log.h"

/* NCCL 2.30 frees them itself; this library builds against 2.28.x only (nccl_util.h). */
static_assert(NCCL_VERSION_CODE < 23000, "NCCL frees its proxy GIN indices from 2.30 on");

extern "C" eep_status_t eep_nccl_gin_leak_note(const void *devcomm, eep_nccl_gin_leak_t *leak)
{
    const ncclDevComm    *dc = (const ncclDevComm *)devcomm;
    const eep_cuda_sym_t *cu;
    eep_status_t          status;
    int                   n;

    memset(leak, 0, sizeof(*leak));
    if (dc == NULL || (status = eep_cuda_sym_driver(&cu)) != EEP_OK) {
        return dc == NULL ? EEP_OK : status;
    }
    n = dc->ginContextCount < EEP_NCCL_GIN_LEAK_MAX ? dc->ginContextCount : EEP_NCCL_GIN_LEAK_MAX;
    for (int i = 0; i < n; i++) {
        ncclGinProxyGpuCtx_t ctx;

        if (dc->ginTypes[i] != NCCL_NET_DEVICE_GIN_PROXY || dc->ginHandles[i] == NULL) {
            continue;
        }
        status = eep_status_from_cu(
            cu->cuMemcpyDtoH(&ctx, (CUdeviceptr)dc->ginHandles[i], sizeof(ctx)),
            "cuMemcpyDtoH(proxy GIN context)");
        if (status != EEP_OK) {
            memset(leak, 0, sizeof(*leak));
            return status;
        }
        if (ctx.pis != NULL) {
            leak->ptr[leak->n++] = (void *)ctx.pis;
        }
    }
    return EEP_OK;
}

extern "C" size_t eep_nccl_gin_leak_reclaim(eep_nccl_gin_leak_t *leak)
{
    const eep_cuda_sym_t        *cu;
    size_t                       freed = 0;
    CUmemGenericAllocationHandle h;

    if (leak->n == 0 || eep_cuda_sym_driver(&cu) != EEP_OK ||
        cu->cuMemRetainAllocationHandle == NULL || cu->cuMemRelease == NULL ||
        cu->cuMemUnmap == NULL || cu->cuMemAddressFree == NULL) {
        leak->n = 0;
        return 0;
    }
    for (int i = 0; i < leak->n; i++) {
        CUdeviceptr p = (CUdeviceptr)leak->ptr[i], base = 0;
        size_t      size = 0;

        /* only a live cuMem allocation mapped from exactly here (ncclCuMemAlloc's shape) */
        if (cu->cuMemGetAddressRange(&base, &size, p) != CUDA_SUCCESS || base != p || size == 0 ||
            cu->cuMemRetainAllocationHandle(&h, (void *)p) != CUDA_SUCCESS) {
            eep_debug(EEP_SUBSYS_RUNTIME, "proxy GIN indices at %p: not a cuMem allocation, left",
                      leak->ptr[i]);
            continue;
        }
        cu->cuMemRelease(h); /* the retain's reference; the mapping holds NCCL's */
        if (cu->cuMemUnmap(p, size) == CUDA_SUCCESS) {
            cu->cuMemRelease(h); /* NCCL's creation reference: the memory goes now */
            cu->cuMemAddressFree(p, size);
            freed += size;
        }
    }
    leak->n = 0;
    return freed;
}
