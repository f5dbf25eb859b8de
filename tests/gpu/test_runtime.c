/*
 * test_runtime.c - runtime bring-up on real GPUs: create/query/destroy, a barrier in each mode,
 * the host abort path, a forced GIN probe on a throw-away split (the main communicator must stay
 * usable when GIN is missing), and adopting a caller's NCCL communicator.
 */
#include <nccl.h>
#include <stdlib.h>

#include "tests/common/gpu_test.h"

static void check_barriers(eep_runtime_t *rt, const char *what)
{
    eep_status_t status;

    status = eep_barrier(rt, EEP_BARRIER_PARALLEL, NULL);
    GPU_CHECK(status == EEP_OK, "%s: parallel barrier: %s", what, eep_status_name(status));
    status = eep_barrier(rt, EEP_BARRIER_SEQUENTIAL, NULL);
    GPU_CHECK(status == EEP_OK, "%s: sequential barrier: %s", what, eep_status_name(status));
    status = eep_runtime_sync(rt, NULL);
    GPU_CHECK(status == EEP_OK, "%s: sync: %s", what, eep_status_name(status));
}

int main(void)
{
    eep_bootstrap_t   *bs = gpu_test_bootstrap("test_runtime", 1);
    eep_runtime_t     *rt;
    eep_runtime_info_t info;
    eep_status_t       status;
    int                nranks = eep_bootstrap_nranks(bs);

    /* 1. Plain create: single node, so the NVLink team is the world and there is no GIN. */
    rt = gpu_test_runtime(bs, NULL);
    GPU_OK(eep_runtime_query(rt, &info));
    printf("rank %d/%d device %d lsa %d/%d rail %d/%d gin %d workspace %zu window %zu\n", info.rank,
           info.nranks, info.device, info.lsa_rank, info.lsa_size, info.rail_rank, info.rail_size,
           info.gin, info.workspace_bytes, info.window_bytes);
    GPU_CHECK(info.nranks == nranks && info.rank == gpu_test_rank, "rank/size");
    GPU_CHECK(info.lsa_size == nranks && info.rail_size == 1, "one NVLink domain");
    GPU_CHECK(info.gin == 0 && info.gin_probed == 0, "no GIN probe on one node by default");
    GPU_CHECK(info.workspace_bytes > 0 && info.workspace_bytes <= info.window_bytes, "layout");
    GPU_CHECK(eep_runtime_nccl_comm(rt) != NULL, "nccl comm");
    GPU_CHECK(eep_poll(rt) == EEP_OK, "poll");
    check_barriers(rt, "plain");

    /* 2. Host abort: poll reports it, barriers refuse to launch, clearing restores service. */
    eep_runtime_abort(rt);
    GPU_CHECK(eep_poll(rt) == EEP_ERR_ABORTED, "poll after abort");
    status = eep_barrier(rt, EEP_BARRIER_PARALLEL, NULL);
    GPU_CHECK(status == EEP_ERR_ABORTED, "barrier after abort: %s", eep_status_name(status));
    GPU_OK(eep_runtime_clear_fault(rt));
    GPU_CHECK(eep_poll(rt) == EEP_OK, "poll after clear");
    GPU_OK(eep_bootstrap_barrier(bs));
    check_barriers(rt, "after clear");
    eep_runtime_destroy(rt);

    /* 3. Forced GIN probe: no RDMA NIC here, so the probe fails on its split and the runtime
          must still come up LSA-only on an unpoisoned communicator. */
    setenv("EEP_GIN", "probe", 1);
    rt = gpu_test_runtime(bs, NULL);
    unsetenv("EEP_GIN");
    GPU_OK(eep_runtime_query(rt, &info));
    printf("GIN probe: probed %d, gin %d\n", info.gin_probed, info.gin);
    GPU_CHECK(info.gin_probed == 1, "probe ran");
    check_barriers(rt, "after GIN probe");
    eep_runtime_destroy(rt);

    /* 4. Adopt a caller's communicator (blocking, made with plain NCCL calls). */
    {
        ncclUniqueId          id;
        ncclComm_t            comm = NULL;
        const eep_cuda_sym_t *cu   = gpu_test_cu();
        CUdevice              dev;
        CUcontext             ctx;
        int                   count = 0;

        memset(&id, 0, sizeof(id));
        if (gpu_test_rank == 0) {
            GPU_REQUIRE(ncclGetUniqueId(&id) == ncclSuccess, "ncclGetUniqueId");
        }
        GPU_OK(eep_bootstrap_bcast(bs, &id, sizeof(id), 0));
        cu->cuDeviceGetCount(&count);
        cu->cuDeviceGet(&dev, gpu_test_rank % count);
        cu->cuDevicePrimaryCtxRetain(&ctx, dev);
        cu->cuCtxSetCurrent(ctx);
        GPU_REQUIRE(ncclCommInitRank(&comm, nranks, id, gpu_test_rank) == ncclSuccess,
                    "ncclCommInitRank");
        rt = gpu_test_runtime(NULL, comm);
        GPU_OK(eep_runtime_query(rt, &info));
        GPU_CHECK(info.rank == gpu_test_rank && info.device == gpu_test_rank % count,
                  "adopted rank %d device %d", info.rank, info.device);
        check_barriers(rt, "adopted");
        eep_runtime_destroy(rt);
        GPU_CHECK(ncclCommDestroy(comm) == ncclSuccess, "caller destroys its comm");
        cu->cuDevicePrimaryCtxRelease(dev);
    }
    eep_bootstrap_destroy(bs);
    return gpu_test_finish("test_runtime");
}
