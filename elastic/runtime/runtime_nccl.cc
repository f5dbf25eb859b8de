/*
 * runtime_nccl.cc - the runtime's NCCL side: communicator, GIN probe, symmetric window, device
 * communicator.  The one host file that includes NCCL's device headers (they are C++); the C side
 * sees ncclDevComm only as an opaque 200-byte blob.
 *
 * Communicators we create are non-blocking (config.blocking = 0) so that every step can be
 * bounded and aborted: each call is followed by polling ncclCommGetAsyncError until it leaves
 * ncclInProgress or EEP_INIT_TIMEOUT_MS passes.  GIN is requested only where a probe found it, and
 * the probe runs on a throw-away ncclCommSplit: in 2.28.9 a failed GIN request leaves the
 * communicator it was made on unusable for later device-API calls.
 */
#include <nccl.h>
#include <nccl_device.h>

#include <sched.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <time.h>

#include "elastic/runtime/bootstrap.h"
#include "util/clock.h"
#include "elastic/gpu/cuda_sym.h"
#include "util/log.h"
#include "elastic/gpu/nccl_util.h"
#include "elastic/runtime/runtime.h"
#include "kernels/ep/ep_params.h" /* EEP_EPK_GIN_SIGNALS: the hybrid EP's signals */

static_assert(sizeof(ncclDevComm) == EEP_DEVCOMM_BYTES, "ncclDevComm is not the 2.28.9 layout");
static_assert(alignof(ncclDevComm) <= alignof(eep_devcomm_blob_t), "ncclDevComm alignment");

struct eep_runtime_nccl {
    ncclComm_t   comm;
    int          owned; /* we created it: we finalize/abort and destroy it */
    ncclWindow_t win;
    void        *buf;
    ncclDevComm  dc;
    int          have_dc;
};

/* Wait for a non-blocking NCCL operation on @p comm to finish, within @p deadline_ms. */
static eep_status_t eep_nccl_wait(ncclComm_t comm, ncclResult_t res, double deadline_ms,
                                  const char *what)
{
    struct timespec pause = { 0, 50000 };
    ncclResult_t    async = ncclSuccess;

    if (res != ncclSuccess && res != ncclInProgress) {
        return eep_status_from_nccl(res, comm, what);
    }
    for (;;) {
        res = ncclCommGetAsyncError(comm, &async);
        if (res != ncclSuccess) {
            return eep_status_from_nccl(res, comm, "ncclCommGetAsyncError");
        }
        if (async != ncclInProgress) {
            return eep_status_from_nccl(async, comm, what);
        }
        if (eep_clock_ms() > deadline_ms) {
            eep_error(EEP_SUBSYS_RUNTIME, "%s did not finish before EEP_INIT_TIMEOUT_MS", what);
            return EEP_ERR_TIMEOUT;
        }
        nanosleep(&pause, NULL);
    }
}

static void eep_nccl_comm_release(ncclComm_t comm, int abort, double deadline_ms)
{
    if (comm == NULL) {
        return;
    }
    if (!abort &&
        eep_nccl_wait(comm, ncclCommFinalize(comm), deadline_ms, "ncclCommFinalize") == EEP_OK) {
        ncclCommDestroy(comm);
        return;
    }
    ncclCommAbort(comm);
}

/* Does GIN work here?  Ask on a split of @p comm, which is thrown away whatever happens. */
static eep_status_t eep_nccl_gin_probe(ncclComm_t comm, int rank, int single_node, double deadline,
                                       int *gin_p)
{
    ncclConfig_t            config = NCCL_CONFIG_INITIALIZER;
    ncclDevCommRequirements reqs;
    ncclDevComm             dc;
    ncclComm_t              probe = NULL;
    eep_status_t            status;

    config.blocking = 0;
    status          = eep_nccl_wait(comm, ncclCommSplit(comm, 0, rank, &probe, &config), deadline,
                                    "ncclCommSplit (GIN probe)");
    if (status == EEP_OK) {
        status = eep_nccl_wait(probe, ncclSuccess, deadline, "ncclCommSplit (GIN probe)");
    }
    if (status != EEP_OK) {
        eep_nccl_comm_release(probe, 1, deadline);
        return status;
    }
    memset(&reqs, 0, sizeof(reqs));
    memset(&dc, 0, sizeof(dc));
    reqs.ginSignalCount = 1;
    reqs.ginForceEnable = single_node ? true : false;
    /* A failure here is the answer "no GIN", not an error: NCCL logs "GIN not supported". */
    ncclResult_t res   = ncclDevCommCreate(probe, &reqs, &dc);
    ncclResult_t async = ncclInProgress;
    if (res == ncclSuccess || res == ncclInProgress) {
        while (ncclCommGetAsyncError(probe, &async) == ncclSuccess && async == ncclInProgress &&
               eep_clock_ms() < deadline) {
            sched_yield();
        }
        res = async;
    }
    *gin_p = res == ncclSuccess && dc.ginContextCount > 0;
    eep_info(EEP_SUBSYS_RUNTIME, "GIN probe: %s (%s, %d contexts)",
             *gin_p ? "available" : "not available", ncclGetErrorString(res),
             res == ncclSuccess ? (int)dc.ginContextCount : 0);
    if (res == ncclSuccess) {
        ncclDevCommDestroy(probe, &dc);
        eep_nccl_comm_release(probe, 0, deadline);
    } else {
        eep_nccl_comm_release(probe, 1, deadline);
    }
    return EEP_OK;
}

extern "C" eep_status_t eep_runtime_nccl_setup(eep_runtime_t *rt, eep_bootstrap_t *bs,
                                               void *adopt_comm)
{
    const eep_cuda_sym_t   *cu;
    eep_runtime_nccl_t     *n;
    ncclDevCommRequirements reqs;
    eep_status_t            status;
    double                  deadline = eep_clock_ms() + (double)rt->cfg.init_timeout_ms;
    int                     probe = 0, gin = 0;

    status = eep_cuda_sym_driver(&cu);
    if (status != EEP_OK) {
        return status;
    }
    status = eep_nccl_check_version(NULL);
    if (status != EEP_OK) {
        return status;
    }
    n = (eep_runtime_nccl_t *)calloc(1, sizeof(*n));
    if (n == NULL) {
        return EEP_ERR_NO_MEMORY;
    }
    rt->nccl = n;

    /* 1. The communicator: adopt, or create a non-blocking one from an id rank 0 broadcasts. */
    if (adopt_comm != NULL) {
        n->comm = (ncclComm_t)adopt_comm;
    } else {
        ncclUniqueId id;
        ncclConfig_t config = NCCL_CONFIG_INITIALIZER;

        memset(&id, 0, sizeof(id));
        if (rt->rank == 0) {
            status = eep_status_from_nccl(ncclGetUniqueId(&id), NULL, "ncclGetUniqueId");
            if (status != EEP_OK) {
                return status;
            }
        }
        status = eep_bootstrap_bcast(bs, &id, sizeof(id), 0);
        if (status != EEP_OK) {
            return status;
        }
        config.blocking  = 0;
        ncclResult_t res = ncclCommInitRankConfig(&n->comm, rt->nranks, id, rt->rank, &config);
        if (res != ncclSuccess && res != ncclInProgress) {
            /* n->comm may be set to a half-made communicator: abort it. */
            status = eep_status_from_nccl(res, n->comm, "ncclCommInitRankConfig");
            if (n->comm != NULL) {
                ncclCommAbort(n->comm);
                n->comm = NULL;
            }
            return status;
        }
        n->owned = 1;
        status   = eep_nccl_wait(n->comm, ncclSuccess, deadline, "ncclCommInitRankConfig");
        if (status != EEP_OK) {
            return status;
        }
    }

    /* 2. Teams. */
    ncclTeam_t lsa = ncclTeamLsa(n->comm), rail = ncclTeamRail(n->comm);
    rt->lsa_rank  = lsa.rank;
    rt->lsa_size  = lsa.nRanks;
    rt->rail_rank = rail.rank;
    rt->rail_size = rail.nRanks;
    status        = eep_workspace_layout(rt->nranks, rt->lsa_size, rt->window_bytes, &rt->layout);
    if (status != EEP_OK) {
        return status;
    }

    /* 3. GIN, only where it exists. */
    if (strcasecmp(rt->cfg.gin, "off") == 0) {
        probe = 0;
    } else if (strcasecmp(rt->cfg.gin, "auto") == 0) {
        probe = rt->rail_size > 1;
    } else if (strcasecmp(rt->cfg.gin, "probe") == 0 || strcasecmp(rt->cfg.gin, "require") == 0) {
        probe = 1;
    } else {
        eep_error(EEP_SUBSYS_RUNTIME, "EEP_GIN '%s' is not one of auto, probe, off, require",
                  rt->cfg.gin);
        return EEP_ERR_INVALID_ARG;
    }
    if (probe) {
        status = eep_nccl_gin_probe(n->comm, rt->rank, rt->rail_size == 1, deadline, &gin);
        if (status != EEP_OK) {
            return status;
        }
        rt->gin_probed = 1;
        /* Every rank must agree, or the device-communicator create below would differ between
           ranks: GIN only if every rank found it (through the bootstrap when there is one). */
        if (bs != NULL) {
            int *all = (int *)calloc((size_t)rt->nranks, sizeof(int));

            if (all == NULL) {
                return EEP_ERR_NO_MEMORY;
            }
            status = eep_bootstrap_allgather(bs, &gin, all, sizeof(int));
            for (int r = 0; status == EEP_OK && r < rt->nranks; r++) {
                if (!all[r] && gin) {
                    eep_warn(EEP_SUBSYS_RUNTIME, "GIN works here but not on rank %d: not used", r);
                    gin = 0;
                }
            }
            free(all);
            if (status != EEP_OK) {
                return status;
            }
        }
    }
    if (!gin && strcasecmp(rt->cfg.gin, "require") == 0) {
        eep_error(EEP_SUBSYS_RUNTIME, "EEP_GIN=require but GIN is not available (no RDMA NIC or "
                                      "no GIN-capable NCCL net plugin)");
        return EEP_ERR_UNSUPPORTED;
    }
    if (!gin && rt->rail_size > 1) {
        eep_error(EEP_SUBSYS_RUNTIME,
                  "the job spans %d nodes but GIN is not available: the "
                  "scale-out barrier needs it",
                  rt->rail_size);
        return EEP_ERR_UNSUPPORTED;
    }
    rt->gin = gin && rt->rail_size > 1;

    /* 4. The window: one VMM allocation, zeroed before any peer can reach it (registration is
          collective, so no peer stores into it before every rank registered). */
    status = eep_status_from_nccl(ncclMemAlloc(&n->buf, rt->window_bytes), n->comm, "ncclMemAlloc");
    if (status != EEP_OK) {
        n->buf = NULL;
        return status;
    }
    status = eep_status_from_cu(cu->cuMemsetD8((CUdeviceptr)n->buf, 0, rt->window_bytes),
                                "cuMemsetD8(window)");
    if (status == EEP_OK) {
        status = eep_status_from_cu(cu->cuCtxSynchronize(), "cuCtxSynchronize");
    }
    if (status != EEP_OK) {
        return status;
    }
    status = eep_nccl_wait(
        n->comm,
        ncclCommWindowRegister(n->comm, n->buf, rt->window_bytes, &n->win, NCCL_WIN_DEFAULT),
        deadline, "ncclCommWindowRegister");
    if (status != EEP_OK) {
        n->win = NULL;
        return status;
    }

    /* 5. The device communicator: GIN signals for the scale-out barrier (ids 0 .. rail - 1), then
          the hybrid dispatch/combine's (EEP_EPK_GIN_SIGNALS(world), from rail_size) and its two
          local-completion counters (kernels/ep/ep_params.h); one LSA barrier slot (NCCL's own
          barrier, used as the benchmark's reference). */
    memset(&reqs, 0, sizeof(reqs));
    reqs.lsaBarrierCount = 1;
    if (rt->gin) {
        reqs.ginSignalCount  = rt->rail_size + EEP_EPK_GIN_SIGNALS(rt->nranks);
        reqs.ginCounterCount = EEP_EPK_GIN_COUNTERS;
    }
    status = eep_nccl_wait(n->comm, ncclDevCommCreate(n->comm, &reqs, &n->dc), deadline,
                           "ncclDevCommCreate");
    if (status != EEP_OK) {
        return status;
    }
    n->have_dc = 1;
    if (rt->gin && n->dc.ginContextCount == 0) {
        eep_error(EEP_SUBSYS_RUNTIME, "device communicator has no GIN context although the probe "
                                      "found GIN");
        return EEP_ERR_NCCL;
    }
    memcpy(&rt->devcomm, &n->dc, sizeof(n->dc));
    rt->gin_signal0     = 0;
    rt->ep_gin_signal0  = rt->gin ? rt->rail_size : -1;
    rt->ep_gin_counter0 = rt->gin ? 0 : -1;
    rt->window          = (void *)n->win;
    rt->buf             = n->buf;
    eep_info(EEP_SUBSYS_RUNTIME, "rank %d of %d: lsa %d/%d, rail %d/%d, gin %s, window %zu bytes",
             rt->rank, rt->nranks, rt->lsa_rank, rt->lsa_size, rt->rail_rank, rt->rail_size,
             rt->gin ? "on" : "off", rt->window_bytes);
    return EEP_OK;
}

extern "C" void eep_runtime_nccl_teardown(eep_runtime_t *rt, int abort)
{
    eep_runtime_nccl_t *n        = rt->nccl;
    double              deadline = eep_clock_ms() + (double)rt->cfg.init_timeout_ms;

    if (n == NULL) {
        return;
    }
    /* Device communicator and window deregistration are local in 2.28.9.  An aborted
       communicator of ours frees them itself; an adopted one lives on, so release them there. */
    int release = !abort || !n->owned;

    if (n->have_dc && release) {
        eep_nccl_wait(n->comm, ncclDevCommDestroy(n->comm, &n->dc), deadline, "ncclDevCommDestroy");
    }
    if (n->win != NULL && release) {
        eep_nccl_wait(n->comm, ncclCommWindowDeregister(n->comm, n->win), deadline,
                      "ncclCommWindowDeregister");
    }
    if (n->owned) {
        eep_nccl_comm_release(n->comm, abort, deadline);
    }
    /* After an abort NCCL has released its mappings of the buffer; free it last. */
    if (n->buf != NULL) {
        ncclMemFree(n->buf);
    }
    free(n);
    rt->nccl = NULL;
}

extern "C" eep_status_t eep_runtime_nccl_poll(eep_runtime_t *rt)
{
    ncclResult_t async = ncclSuccess;
    ncclResult_t res;

    if (rt->nccl == NULL || rt->nccl->comm == NULL) {
        return EEP_OK;
    }
    res = ncclCommGetAsyncError(rt->nccl->comm, &async);
    if (res != ncclSuccess) {
        return eep_status_from_nccl(res, rt->nccl->comm, "ncclCommGetAsyncError");
    }
    if (async == ncclSuccess || async == ncclInProgress) {
        return EEP_OK;
    }
    return eep_status_from_nccl(async, rt->nccl->comm, "communicator");
}

extern "C" void *eep_runtime_nccl_comm_get(const eep_runtime_t *rt)
{
    return rt->nccl != NULL ? (void *)rt->nccl->comm : NULL;
}

extern "C" eep_status_t eep_runtime_nccl_comm_info(void *comm, int *rank_p, int *nranks_p,
                                                   int *device_p)
{
    ncclComm_t   c = (ncclComm_t)comm;
    eep_status_t status;

    status = eep_status_from_nccl(ncclCommUserRank(c, rank_p), c, "ncclCommUserRank");
    if (status == EEP_OK) {
        status = eep_status_from_nccl(ncclCommCount(c, nranks_p), c, "ncclCommCount");
    }
    if (status == EEP_OK) {
        status = eep_status_from_nccl(ncclCommCuDevice(c, device_p), c, "ncclCommCuDevice");
    }
    return status;
}
