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

#include <pthread.h>
#include <sched.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <time.h>

#include "elastic/runtime/bootstrap.h"
#include "util/clock.h"
#include "elastic/gpu/cuda_sym.h"
#include "util/log.h"
#include "elastic/gpu/nccl_gin_leak.h"
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
    /* what NCCL 2.28.9 leaves behind at the comm's end (elastic/gpu/nccl_gin_leak.h) */
    eep_nccl_gin_leak_t gin_leak;
    /* A runtime made from views: the view machine owns the sets (comm, window, dev comm); the
       fields above only mirror the current one.  Aborts of old sets run on threads of their own;
       teardown waits for them (bounded). */
    int             view_managed;
    pthread_mutex_t lock;
    pthread_cond_t  cond;
    int             pending_aborts;
};

/* End @p comm: finalized (by @p deadline_ms) and destroyed, else (or with @p abort) aborted.
   @return how: "finalize + destroy", "abort", or "none" (no communicator). */
static const char *eep_nccl_comm_release(ncclComm_t comm, int abort, double deadline_ms)
{
    if (comm == NULL) {
        return "none";
    }
    if (!abort &&
        eep_nccl_wait(comm, ncclCommFinalize(comm), deadline_ms, "ncclCommFinalize") == EEP_OK) {
        ncclCommDestroy(comm);
        return "finalize + destroy";
    }
    ncclCommAbort(comm);
    return "abort";
}

typedef struct eep_nccl_split_arg {
    int           color, key;
    ncclConfig_t *config;
} eep_nccl_split_arg_t;

static ncclResult_t eep_nccl_make_split(ncclComm_t parent, ncclComm_t *slot, void *arg)
{
    eep_nccl_split_arg_t *a = (eep_nccl_split_arg_t *)arg;

    return ncclCommSplit(parent, a->color, a->key, slot, a->config);
}

/* Does GIN work here?  Ask on a split of @p comm, which is thrown away whatever happens. */
static eep_status_t eep_nccl_gin_probe(ncclComm_t comm, int rank, int single_node, double deadline,
                                       int *gin_p)
{
    ncclConfig_t            config = NCCL_CONFIG_INITIALIZER;
    ncclDevCommRequirements reqs;
    ncclDevComm             dc;
    ncclComm_t              probe = NULL;
    eep_nccl_split_arg_t    split = { 0, rank, &config };
    eep_status_t            status;

    config.blocking = 0;
    status          = eep_nccl_wait_child(comm, eep_nccl_make_split, &split, deadline,
                                          "ncclCommSplit (GIN probe)", NULL, NULL, &probe);
    if (status != EEP_OK) {
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
    eep_gin_reqs_t          gr;
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
    eep_gin_reqs(rt->nranks, rt->rail_size, rt->gin, &gr);
    memset(&reqs, 0, sizeof(reqs));
    reqs.lsaBarrierCount = 1;
    reqs.ginSignalCount  = gr.signals;
    reqs.ginCounterCount = gr.counters;
    status = eep_nccl_wait(n->comm, ncclDevCommCreate(n->comm, &reqs, &n->dc), deadline,
                           "ncclDevCommCreate");
    if (status != EEP_OK) {
        return status;
    }
    n->have_dc = 1;
    if (n->owned) { /* an adopted comm outlives us: its leftovers are its owner's */
        (void)eep_nccl_gin_leak_note(&n->dc, &n->gin_leak);
    }
    if (rt->gin && n->dc.ginContextCount == 0) {
        eep_error(EEP_SUBSYS_RUNTIME, "device communicator has no GIN context although the probe "
                                      "found GIN");
        return EEP_ERR_NCCL;
    }
    memcpy(&rt->devcomm, &n->dc, sizeof(n->dc));
    rt->gin_signal0     = 0;
    rt->ep_gin_signal0  = gr.ep_signal0;
    rt->ep_gin_counter0 = gr.ep_ctr0;
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
    if (n->view_managed) {
        /* The view machine aborted its last set (eep_runtime_membership_end); wait for it. */
        eep_runtime_nccl_view_drain(rt, rt->cfg.init_timeout_ms);
        if (eep_runtime_nccl_view_pending(rt) > 0) {
            rt->nccl = NULL; /* leaked on purpose: a stuck abort thread still uses it */
            return;
        }
        pthread_mutex_destroy(&n->lock);
        pthread_cond_destroy(&n->cond);
        free(n);
        rt->nccl = NULL;
        return;
    }
    /* Device communicator and window deregistration are local in 2.28.9, and needed also before
       an abort: ncclCommAbort leaves a registered window mapped (its memory is never freed:
       measured, tests/gpu/test_view_leak, 64 MiB a window).  So always, before the end. */
    if (n->have_dc) {
        eep_nccl_wait(n->comm, ncclDevCommDestroy(n->comm, &n->dc), deadline, "ncclDevCommDestroy");
    }
    if (n->win != NULL) {
        eep_nccl_wait(n->comm, ncclCommWindowDeregister(n->comm, n->win), deadline,
                      "ncclCommWindowDeregister");
    }
    if (n->owned) {
        eep_nccl_comm_release(n->comm, abort, deadline);
        (void)eep_nccl_gin_leak_reclaim(&n->gin_leak);
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

/* ---------------------------------------------------------------------------------------- */
/* The communicator operations of the view machine (runtime_view.h), on NCCL.  Context: the   */
/* runtime.  A set is {ncclComm_t, eep_nccl_view_window_t *, eep_nccl_view_devcomm_t *}.     */

static_assert(sizeof(ncclUniqueId) == EEP_COMM_UID_BYTES, "ncclUniqueId is not 128 bytes");

typedef struct {
    ncclWindow_t win;
    void        *buf; /* ncclMemAlloc'd for this view alone: a removed rank's stores never
                         reach the buffers the survivors use next (fencing) */
} eep_nccl_view_window_t;

typedef struct {
    ncclDevComm         dc;
    int                 gin;
    eep_nccl_gin_leak_t gin_leak; /* given back after the set's abort (nccl_gin_leak.h) */
} eep_nccl_view_devcomm_t;

static double eep_nccl_view_deadline(const eep_runtime_t *rt)
{
    return eep_clock_ms() + (double)rt->cfg.init_timeout_ms;
}

/* A creation that normally takes well under a second and has waited this long, while a newer
   view is waiting, waits for a member that skipped this view: give it up. */
#define EEP_NCCL_VIEW_ABANDON_MS 2000.0

static int eep_nccl_view_abandon(void *arg, double waited_ms)
{
    const eep_runtime_t    *rt = (const eep_runtime_t *)arg;
    const eep_membership_t *ms = &rt->membership;

    return waited_ms > EEP_NCCL_VIEW_ABANDON_MS && ms->ops != NULL && ms->ops->has_newer != NULL &&
           ms->ops->has_newer(ms->ctx, rt->applying_epoch);
}

static eep_status_t eep_nccl_view_wait(eep_runtime_t *rt, ncclComm_t comm, ncclResult_t res,
                                       const char *what)
{
    return eep_nccl_wait_until(comm, res, eep_nccl_view_deadline(rt), what, eep_nccl_view_abandon,
                               rt);
}

typedef struct eep_nccl_shrink_arg {
    int          *exclude;
    int           n_exclude;
    ncclConfig_t *config;
} eep_nccl_shrink_arg_t;

static ncclResult_t eep_nccl_make_shrink(ncclComm_t parent, ncclComm_t *slot, void *arg)
{
    eep_nccl_shrink_arg_t *a = (eep_nccl_shrink_arg_t *)arg;

    return ncclCommShrink(parent, a->exclude, a->n_exclude, slot, a->config, NCCL_SHRINK_ABORT);
}

static eep_status_t eep_nccl_view_shrink(void *ctx, void *old_comm, const int *exclude,
                                         int n_exclude, void **comm_p)
{
    eep_runtime_t        *rt     = (eep_runtime_t *)ctx;
    ncclConfig_t          config = NCCL_CONFIG_INITIALIZER;
    ncclComm_t            newc   = NULL;
    int                   excl[EEP_MAX_RANKS];
    eep_nccl_shrink_arg_t arg = { excl, n_exclude, &config };
    eep_status_t          status;

    if (n_exclude < 1 || n_exclude > EEP_MAX_RANKS) {
        eep_error(EEP_SUBSYS_RUNTIME, "shrink: n_exclude %d outside [1, %d]", n_exclude,
                  EEP_MAX_RANKS);
        return EEP_ERR_INVALID_ARG;
    }
    memcpy(excl, exclude, (size_t)n_exclude * sizeof(int)); /* NCCL sorts it in place */
    config.blocking = 0;
    status          = eep_nccl_wait_child((ncclComm_t)old_comm, eep_nccl_make_shrink, &arg,
                                          eep_nccl_view_deadline(rt), "ncclCommShrink",
                                          eep_nccl_view_abandon, rt, &newc);
    if (status == EEP_OK) {
        *comm_p = newc;
    }
    return status;
}

static eep_status_t eep_nccl_view_uid_create(void *ctx, eep_comm_uid_t *uid_p)
{
    ncclUniqueId id;
    eep_status_t status;

    (void)ctx;
    status = eep_status_from_nccl(ncclGetUniqueId(&id), NULL, "ncclGetUniqueId");
    if (status == EEP_OK) {
        memcpy(uid_p->bytes, &id, sizeof(id));
    }
    return status;
}

static eep_status_t eep_nccl_view_create(void *ctx, const eep_comm_uid_t *uid, int world, int rank,
                                         void **comm_p)
{
    eep_runtime_t *rt     = (eep_runtime_t *)ctx;
    ncclConfig_t   config = NCCL_CONFIG_INITIALIZER;
    ncclUniqueId   id;
    ncclComm_t     comm = NULL;
    eep_status_t   status;

    memcpy(&id, uid->bytes, sizeof(id));
    config.blocking  = 0;
    ncclResult_t res = ncclCommInitRankConfig(&comm, world, id, rank, &config);
    if (res != ncclSuccess && res != ncclInProgress) {
        status = eep_status_from_nccl(res, comm, "ncclCommInitRankConfig");
        if (comm != NULL) {
            ncclCommAbort(comm);
        }
        return status;
    }
    status = eep_nccl_view_wait(rt, comm, ncclSuccess, "ncclCommInitRankConfig");
    if (status != EEP_OK) {
        ncclCommAbort(comm);
        return status;
    }
    *comm_p = comm;
    return EEP_OK;
}

static eep_status_t eep_nccl_view_window(void *ctx, void *comm, void **window_p)
{
    eep_runtime_t          *rt = (eep_runtime_t *)ctx;
    const eep_cuda_sym_t   *cu;
    eep_nccl_view_window_t *w;
    eep_status_t            status;

    if ((status = eep_cuda_sym_driver(&cu)) != EEP_OK) {
        return status;
    }
    w = (eep_nccl_view_window_t *)calloc(1, sizeof(*w));
    if (w == NULL) {
        return EEP_ERR_NO_MEMORY;
    }
    status = eep_status_from_nccl(ncclMemAlloc(&w->buf, rt->window_bytes), (ncclComm_t)comm,
                                  "ncclMemAlloc(view window)");
    if (status != EEP_OK) {
        free(w);
        return status;
    }
    /* Zeroed before registration (collective): no peer can store into it before that. */
    status = eep_status_from_cu(cu->cuMemsetD8((CUdeviceptr)w->buf, 0, rt->window_bytes),
                                "cuMemsetD8(view window)");
    if (status == EEP_OK) {
        status = eep_status_from_cu(cu->cuCtxSynchronize(), "cuCtxSynchronize");
    }
    if (status == EEP_OK) {
        status = eep_nccl_view_wait(rt, (ncclComm_t)comm,
                                    ncclCommWindowRegister((ncclComm_t)comm, w->buf,
                                                           rt->window_bytes, &w->win,
                                                           NCCL_WIN_DEFAULT),
                                    "ncclCommWindowRegister");
    }
    if (status != EEP_OK) {
        ncclMemFree(w->buf);
        free(w);
        return status;
    }
    *window_p = w;
    return EEP_OK;
}

/*
 * The device communicator of a view's set.  GIN follows from the communicator alone (a rail team
 * of more than one rank needs it), never from a probe: every member of the new communicator,
 * newcomers included, must make the same request, and a probe is itself a collective that only
 * some of them would run.  Without GIN where it is needed the create fails, and so does the view.
 */
static eep_status_t eep_nccl_view_devcomm(void *ctx, void *comm, void *window, void **devcomm_p)
{
    eep_runtime_t           *rt = (eep_runtime_t *)ctx;
    ncclDevCommRequirements  reqs;
    eep_gin_reqs_t           gr;
    eep_nccl_view_devcomm_t *d;
    eep_status_t             status;
    ncclTeam_t               rail   = ncclTeamRail((ncclComm_t)comm);
    int                      nranks = 0;

    (void)window;
    if (rail.nRanks > 1 && strcasecmp(rt->cfg.gin, "off") == 0) {
        eep_error(EEP_SUBSYS_RUNTIME,
                  "the view spans %d nodes but EEP_GIN=off: the scale-out barrier needs GIN",
                  rail.nRanks);
        return EEP_ERR_UNSUPPORTED;
    }
    d = (eep_nccl_view_devcomm_t *)calloc(1, sizeof(*d));
    if (d == NULL) {
        return EEP_ERR_NO_MEMORY;
    }
    d->gin = rail.nRanks > 1;
    if (ncclCommCount((ncclComm_t)comm, &nranks) != ncclSuccess) {
        free(d);
        eep_error(EEP_SUBSYS_RUNTIME, "the view's communicator has no rank count (ncclCommCount)");
        return EEP_ERR_NCCL;
    }
    /* the same reservations as the first communicator's: hybrid kernels use the EP's signals */
    eep_gin_reqs(nranks, rail.nRanks, d->gin, &gr);
    memset(&reqs, 0, sizeof(reqs));
    reqs.lsaBarrierCount = 1;
    reqs.ginSignalCount  = gr.signals;
    reqs.ginCounterCount = gr.counters;
    status               = eep_nccl_view_wait(rt, (ncclComm_t)comm,
                                              ncclDevCommCreate((ncclComm_t)comm, &reqs, &d->dc),
                                              "ncclDevCommCreate");
    if (status == EEP_OK && d->gin && d->dc.ginContextCount == 0) {
        eep_error(EEP_SUBSYS_RUNTIME, "the view's device communicator has no GIN context");
        status = EEP_ERR_NCCL;
    }
    if (status != EEP_OK) {
        free(d);
        return status;
    }
    (void)eep_nccl_gin_leak_note(&d->dc, &d->gin_leak);
    *devcomm_p = d;
    return EEP_OK;
}

/*
 * An old set's communicator is ended by ncclCommFinalize + ncclCommDestroy when the finalize
 * completes within this bound, else by ncclCommAbort.  Both end NCCL's proxy threads, which poll
 * every 500 ms (2.28.9 src/proxy.cc: the service and UDS threads), but the abort waited twice as
 * long: 978-983 ms an abort against 490-510 ms a finalize + destroy, 2 ranks on 1 x H200
 * (test_view_leak with NCCL's INFO timestamps, bench/RESULTS.md 2026-12-03).  A view applies
 * after its old set is released (runtime_membership.c), so this is on the critical path of every
 * shrink and grow.  The finalize talks to no peer (no operation is pending on an old set: the
 * library's kernels are its own; NCCL_SHRINK_ABORT leaves the parent's abort flag unset again),
 * so a dead member does not hold it up; the bound covers a NCCL that thinks otherwise.
 */
#define EEP_NCCL_VIEW_FINALIZE_MS 300.0

/*
 * End a set and free its buffer.  The device communicator and the window are released first
 * (both local in 2.28.9, no peer involved): NCCL's abort does not drop a registered window's
 * mapping, so without this every view kept its window's memory (tests/gpu/test_view_leak: the
 * window and ~2 MiB more per set, at 1 and 2 ranks).
 */
static void eep_nccl_view_release(const eep_view_comm_set_t *set)
{
    eep_nccl_view_window_t  *w      = (eep_nccl_view_window_t *)set->window;
    eep_nccl_view_devcomm_t *d      = (eep_nccl_view_devcomm_t *)set->devcomm;
    ncclComm_t               c      = (ncclComm_t)set->comm;
    ncclResult_t             dc_res = ncclSuccess, win_res = ncclSuccess;
    size_t                   back = 0;
    const char              *how  = "none";

    /* synchronous calls: their result, not the communicator's (it may carry the view's fault) */
    if (c != NULL && d != NULL) {
        dc_res = ncclDevCommDestroy(c, &d->dc);
        if (dc_res != ncclSuccess) {
            (void)eep_status_from_nccl(dc_res, c, "ncclDevCommDestroy (old view)");
        }
    }
    if (c != NULL && w != NULL && w->win != NULL) {
        win_res = ncclCommWindowDeregister(c, w->win);
        if (win_res != ncclSuccess) {
            (void)eep_status_from_nccl(win_res, c, "ncclCommWindowDeregister (old view)");
        }
    }
    if (c != NULL) {
        how = eep_nccl_comm_release(c, 0, eep_clock_ms() + EEP_NCCL_VIEW_FINALIZE_MS);
        if (d != NULL) {
            back = eep_nccl_gin_leak_reclaim(&d->gin_leak);
        }
    }
    if (w != NULL) {
        ncclMemFree(w->buf);
        free(w);
    }
    free(set->devcomm);
    eep_info(EEP_SUBSYS_RUNTIME,
             "view: an old set released (device communicator %s, window %s, then %s and free; "
             "%zu MiB that NCCL's GIN proxy left given back)",
             d == NULL ? "none" : ncclGetErrorString(dc_res),
             w == NULL ? "none" : ncclGetErrorString(win_res), how, back >> 20);
}

static void eep_nccl_view_discard(void *ctx, const eep_view_comm_set_t *set)
{
    (void)ctx;
    eep_nccl_view_release(set);
}

typedef struct {
    eep_runtime_nccl_t *n;
    void               *cu_ctx;
    eep_view_comm_set_t set;
    double              start_ms;
} eep_nccl_view_abort_t;

static void *eep_nccl_view_abort_main(void *arg)
{
    eep_nccl_view_abort_t *a = (eep_nccl_view_abort_t *)arg;
    eep_runtime_nccl_t    *n = a->n;
    const eep_cuda_sym_t  *cu;

    if (eep_cuda_sym_driver(&cu) == EEP_OK) {
        cu->cuCtxSetCurrent((CUcontext)a->cu_ctx);
    }
    eep_nccl_view_release(&a->set);
    eep_info(EEP_SUBSYS_RUNTIME, "view: the old communicator was released in %.0f ms",
             eep_clock_ms() - a->start_ms);
    pthread_mutex_lock(&n->lock);
    n->pending_aborts--;
    pthread_cond_broadcast(&n->cond);
    pthread_mutex_unlock(&n->lock);
    free(a);
    return NULL;
}

/* Off the critical path (NCCL's abort takes ~0.5-1 s): a detached thread; teardown waits. */
static void eep_nccl_view_abort_async(void *ctx, const eep_view_comm_set_t *set)
{
    eep_runtime_t         *rt = (eep_runtime_t *)ctx;
    eep_runtime_nccl_t    *n  = rt->nccl;
    eep_nccl_view_abort_t *a;
    pthread_attr_t         attr;
    pthread_t              tid;
    int                    ret = -1;

    a = (eep_nccl_view_abort_t *)calloc(1, sizeof(*a));
    if (a != NULL) {
        a->n        = n;
        a->cu_ctx   = rt->cu_ctx;
        a->set      = *set;
        a->start_ms = eep_clock_ms();
        pthread_mutex_lock(&n->lock);
        n->pending_aborts++;
        pthread_mutex_unlock(&n->lock);
        pthread_attr_init(&attr);
        pthread_attr_setdetachstate(&attr, PTHREAD_CREATE_DETACHED);
        ret = pthread_create(&tid, &attr, eep_nccl_view_abort_main, a);
        pthread_attr_destroy(&attr);
    }
    if (ret != 0) {
        /* No thread: abort here (slow but correct). */
        eep_warn(EEP_SUBSYS_RUNTIME, "view: no thread for the old communicator's abort: inline");
        if (a != NULL) {
            pthread_mutex_lock(&n->lock);
            n->pending_aborts--;
            pthread_mutex_unlock(&n->lock);
            free(a);
        }
        eep_nccl_view_release(set);
    }
}

static const eep_view_comm_ops_t eep_nccl_view_ops = {
    .name            = "nccl",
    .shrink          = eep_nccl_view_shrink,
    .uid_create      = eep_nccl_view_uid_create,
    .create          = eep_nccl_view_create,
    .window_register = eep_nccl_view_window,
    .devcomm_create  = eep_nccl_view_devcomm,
    .discard         = eep_nccl_view_discard,
    .abort_async     = eep_nccl_view_abort_async,
};

extern "C" eep_status_t eep_runtime_nccl_view_begin(eep_runtime_t              *rt,
                                                    const eep_view_comm_ops_t **ops_p)
{
    eep_runtime_nccl_t *n;
    eep_status_t        status;

    if ((status = eep_nccl_check_version(NULL)) != EEP_OK) {
        return status;
    }
    n = (eep_runtime_nccl_t *)calloc(1, sizeof(*n));
    if (n == NULL) {
        return EEP_ERR_NO_MEMORY;
    }
    n->view_managed = 1;
    pthread_mutex_init(&n->lock, NULL);
    pthread_cond_init(&n->cond, NULL);
    rt->nccl = n;
    *ops_p   = &eep_nccl_view_ops;
    return EEP_OK;
}

extern "C" eep_status_t
eep_runtime_nccl_view_adopt(eep_runtime_t *rt, const eep_view_comm_set_t *set, int rank, int nranks)
{
    eep_runtime_nccl_t            *n   = rt->nccl;
    const eep_nccl_view_window_t  *w   = (const eep_nccl_view_window_t *)set->window;
    const eep_nccl_view_devcomm_t *d   = (const eep_nccl_view_devcomm_t *)set->devcomm;
    ncclComm_t                     c   = (ncclComm_t)set->comm;
    ncclTeam_t                     lsa = ncclTeamLsa(c), rail = ncclTeamRail(c);
    eep_workspace_layout_t         layout;
    eep_gin_reqs_t                 gr;
    eep_status_t                   status;

    status = eep_workspace_layout(nranks, lsa.nRanks, rt->window_bytes, &layout);
    if (status != EEP_OK) {
        return status;
    }
    n->comm    = c;
    n->win     = w->win;
    n->buf     = w->buf;
    n->dc      = d->dc;
    n->have_dc = 1;
    if (rt->gin != d->gin) {
        /* The barrier variant is compiled with or without GIN: pick it again. */
        rt->barrier_kernels[0] = rt->barrier_kernels[1] = NULL;
    }
    rt->rank        = rank;
    rt->nranks      = nranks;
    rt->lsa_rank    = lsa.rank;
    rt->lsa_size    = lsa.nRanks;
    rt->rail_rank   = rail.rank;
    rt->rail_size   = rail.nRanks;
    rt->gin         = d->gin;
    rt->gin_probed  = 0;
    rt->layout      = layout;
    rt->window      = (void *)w->win;
    rt->buf         = w->buf;
    rt->gin_signal0 = 0;
    eep_gin_reqs(nranks, rail.nRanks, d->gin, &gr);
    rt->ep_gin_signal0  = gr.ep_signal0; /* the view's GIN may differ from the first comm's */
    rt->ep_gin_counter0 = gr.ep_ctr0;
    memcpy(&rt->devcomm, &d->dc, sizeof(d->dc));
    return EEP_OK;
}

extern "C" void eep_runtime_nccl_view_clear(eep_runtime_t *rt)
{
    eep_runtime_nccl_t *n = rt->nccl;

    if (n != NULL) {
        n->comm    = NULL;
        n->win     = NULL;
        n->buf     = NULL;
        n->have_dc = 0;
    }
    rt->window = NULL;
    rt->buf    = NULL;
}

extern "C" void eep_runtime_nccl_view_drain(eep_runtime_t *rt, int64_t timeout_ms)
{
    eep_runtime_nccl_t *n = rt->nccl;
    struct timespec     until;

    if (n == NULL || !n->view_managed) {
        return;
    }
    clock_gettime(CLOCK_REALTIME, &until);
    until.tv_sec += (time_t)(timeout_ms / 1000) + 1;
    pthread_mutex_lock(&n->lock);
    while (n->pending_aborts > 0) {
        if (pthread_cond_timedwait(&n->cond, &n->lock, &until) != 0) {
            break;
        }
    }
    if (n->pending_aborts > 0) {
        /* A thread still holds the runtime: keep its state alive rather than free it under it. */
        eep_error(EEP_SUBSYS_RUNTIME, "view: %d old communicators still aborting after %lld ms",
                  n->pending_aborts, (long long)timeout_ms);
    }
    pthread_mutex_unlock(&n->lock);
}

extern "C" int eep_runtime_nccl_view_pending(eep_runtime_t *rt)
{
    eep_runtime_nccl_t *n = rt->nccl;
    int                 pending;

    if (n == NULL || !n->view_managed) {
        return 0;
    }
    pthread_mutex_lock(&n->lock);
    pending = n->pending_aborts;
    pthread_mutex_unlock(&n->lock);
    return pending;
}
