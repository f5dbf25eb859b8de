/*
 * nccl_gin_leak.h - give back the device memory NCCL 2.28.9 leaves behind at each communicator's
 * end when the communicator ran GIN through the CPU proxy (the one-GPU cluster's transport).
 *
 * NCCL's proxy GIN context (src/gin/gin_host_proxy.cc at v2.28.9-1) allocates the producer
 * indices of its queues (`pis`, ncclGinProxyGpuCtx_t in the public header
 * nccl_device/gin/proxy/gin_proxy_device_host_common.h) with ncclCudaCalloc and its destructor
 * never frees them (NCCL 2.30.3 does).  With cuMem that is one granule (2 MiB on an H200) per GIN
 * context, four contexts a communicator: 8 MiB for every view a long-lived rank applied
 * (measured: `make gpu-elastic`, +16 MiB a kill-and-grow round in every rank).
 *
 * Use: note the addresses from the device communicator while it lives, free them once the
 * communicator is destroyed or aborted (NCCL no longer touches them then).  Only cuMem
 * allocations that start at the noted address are freed; anything else is left alone.
 */
#ifndef EEP_NCCL_GIN_LEAK_H
#define EEP_NCCL_GIN_LEAK_H

#include <stddef.h>

#include "eep/status.h"

#ifdef __cplusplus
extern "C" {
#endif

#define EEP_NCCL_GIN_LEAK_MAX 4 /* ncclDevComm's ginHandles[] */

/** The allocations a communicator's proxy GIN contexts will leave behind. */
typedef struct eep_nccl_gin_leak {
    void *ptr[EEP_NCCL_GIN_LEAK_MAX];
    int   n;
} eep_nccl_gin_leak_t;

/**
 * Note the leaked-to-be allocations of the communicator behind @p devcomm (a ncclDevComm *).
 * A device communicator without proxy GIN contexts notes nothing.  Reads device memory (a
 * synchronous copy of a few bytes per context).
 * @return EEP_OK, or the CUDA error (@p leak then notes nothing).
 */
eep_status_t eep_nccl_gin_leak_note(const void *devcomm, eep_nccl_gin_leak_t *leak);

/**
 * Free what @p leak noted, after its communicator was destroyed or aborted; @p leak is emptied.
 * A noted allocation that is not (or no longer) a cuMem allocation starting there is skipped.
 * @return the number of bytes given back.
 */
size_t eep_nccl_gin_leak_reclaim(eep_nccl_gin_leak_t *leak);

#ifdef __cplusplus
}
#endif

#endif /* EEP_NCCL_GIN_LEAK_H */
