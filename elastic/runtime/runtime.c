/*
 * runtime.c - eep_runtime_t: one rank's handle on the data plane.
 *
 * Create: check the arguments, load the knobs, load the CUDA driver (a machine without one gets
 * EEP_ERR_NO_DEVICE, never a link error), pick the GPU and make its primary context current, map
 * the fault page (pinned host memory the kernels write and the host polls), then hand over to
 * runtime_nccl.cc for the communicator, window and device communicator.  The fault page is the
 * only channel from a kernel that gave up to the host: eep_poll() reads it without touching the
 * GPU, so it works while a kernel is still running.
 */
#include "elastic/runtime/runtime.h"

#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#include "util/config.h"
#include "elastic/gpu/cuda_sym.h"
#include "elastic/gpu/gpu_share.h"
#include "util/log.h"
#include "elastic/runtime/wait_loop.h"

#define EEP_WINDOW_GRANULARITY (2u << 20)

/*
 * NCCL's RAS (its resiliency service, a thread per process that keeps TCP links to every peer of
 * every communicator) keeps sockets for departed peers: on the one-GPU cluster a survivor's open
 * fds grew by 12 over 28 fault rounds (sockets that no /proc/net table lists) and were still up
 * 70 s after the last (bench/RESULTS.md, issue 24); with NCCL_RAS_ENABLE=0 they were flat.  A
 * job whose peers come and go is what this runtime is for, and it has its own failure detection,
 * so RAS is off unless the environment says otherwise.  Done once, before this runtime's first
 * NCCL call (NCCL reads the variable at its first communicator); a value the user set is kept,
 * with a warning.
 */
static void eep_runtime_nccl_env_cb(void)
{
    const char *ras;

    if (eep_config_system_env_default("NCCL_RAS_ENABLE", "0") == 1) {
        eep_info(EEP_SUBSYS_RUNTIME, "NCCL_RAS_ENABLE=0 (NCCL's RAS keeps sockets for departed "
                                     "peers; set NCCL_RAS_ENABLE=1 to keep it on)");
    } else if ((ras = eep_config_system_env("NCCL_RAS_ENABLE")) != NULL && strcmp(ras, "0") != 0) {
        eep_warn(EEP_SUBSYS_RUNTIME,
                 "NCCL_RAS_ENABLE=%s from the environment: NCCL's RAS keeps sockets for "
                 "departed peers, so open fds grow as ranks leave",
                 ras);
    }
}

static void eep_runtime_nccl_env_once(void)
{
    static pthread_once_t once = PTHREAD_ONCE_INIT;

    pthread_once(&once, eep_runtime_nccl_env_cb);
}

static eep_status_t eep_runtime_check_params(const eep_runtime_params_t *params,
                                             eep_runtime_t             **rt_p)
{
    if (rt_p == NULL) {
        eep_error(EEP_SUBSYS_RUNTIME, "eep_runtime_create: rt_p is NULL");
        return EEP_ERR_INVALID_ARG;
    }
    if (params == NULL) {
        eep_error(EEP_SUBSYS_RUNTIME, "eep_runtime_create: params is NULL");
        return EEP_ERR_INVALID_ARG;
    }
    if (params->size < offsetof(eep_runtime_params_t, timeout_ms) + sizeof(int) ||
        params->size > sizeof(eep_runtime_params_t)) {
        eep_error(EEP_SUBSYS_RUNTIME,
                  "eep_runtime_params_t.size %zu is not a size this library "
                  "knows (%zu): set it to sizeof(eep_runtime_params_t)",
                  params->size, sizeof(eep_runtime_params_t));
        return EEP_ERR_INVALID_ARG;
    }
    if (params->size >= offsetof(eep_runtime_params_t, join_timeout_ms) + sizeof(int) &&
        params->membership != NULL) {
        if (params->bootstrap != NULL || params->nccl_comm != NULL) {
            eep_error(EEP_SUBSYS_RUNTIME,
                      "eep_runtime_create: params.membership excludes params.bootstrap and "
                      "params.nccl_comm (the views give rank, world and communicator)");
            return EEP_ERR_INVALID_ARG;
        }
        if (params->join_timeout_ms < 0) {
            eep_error(EEP_SUBSYS_RUNTIME, "params.join_timeout_ms %d is negative",
                      params->join_timeout_ms);
            return EEP_ERR_INVALID_ARG;
        }
    } else if (params->bootstrap == NULL && params->nccl_comm == NULL) {
        eep_error(EEP_SUBSYS_RUNTIME,
                  "eep_runtime_create: params.bootstrap and params.nccl_comm "
                  "are both NULL: give a bootstrap (to create a communicator), a communicator "
                  "or a membership provider");
        return EEP_ERR_INVALID_ARG;
    }
    if (params->device < -1) {
        eep_error(EEP_SUBSYS_RUNTIME, "params.device %d is negative (use -1 for the default)",
                  params->device);
        return EEP_ERR_INVALID_ARG;
    }
    if (params->timeout_ms < 0) {
        eep_error(EEP_SUBSYS_RUNTIME, "params.timeout_ms %d is negative (use 0 for the default)",
                  params->timeout_ms);
        return EEP_ERR_INVALID_ARG;
    }
    return EEP_OK;
}

/* Note whether MPS shares this GPU and enter the registry of processes using it
   (eep_runtime_gpu_sharers, which elastic/ep reads); without a registry (no folder, no UUID)
   the GPU counts as this process's alone. */
static void eep_runtime_join_gpu_share(eep_runtime_t *rt, const eep_cuda_sym_t *cu)
{
    CUuuid uuid;

    /* MPS: processes on the GPU run at once (without it they take turns, each with the whole
       GPU); a driver that cannot say counts as MPS, the safe side */
    if (cu->cuDeviceGetAttribute(&rt->gpu_mps, CU_DEVICE_ATTRIBUTE_MPS_ENABLED,
                                 (CUdevice)rt->cu_dev) != CUDA_SUCCESS) {
        rt->gpu_mps = 1;
    }
    if (rt->cfg.gpu_share_dir[0] == '\0' || cu->cuDeviceGetUuid == NULL ||
        cu->cuDeviceGetUuid(&uuid, (CUdevice)rt->cu_dev) != CUDA_SUCCESS ||
        eep_gpu_share_join(rt->cfg.gpu_share_dir, (const unsigned char *)uuid.bytes,
                           &rt->gpu_share) != EEP_OK) {
        eep_debug(EEP_SUBSYS_RUNTIME, "no GPU share registry (EEP_GPU_SHARE_DIR '%s')",
                  rt->cfg.gpu_share_dir);
        rt->gpu_share = NULL;
    }
}

/* Pick and activate the GPU.  @p comm_device: the adopted communicator's device, or -1. */
static eep_status_t eep_runtime_open_device(eep_runtime_t *rt, const eep_cuda_sym_t *cu,
                                            int requested, int comm_device)
{
    CUdevice     dev;
    CUcontext    ctx;
    eep_status_t status;
    int          count = 0;

    status = eep_status_from_cu(cu->cuDeviceGetCount(&count), "cuDeviceGetCount");
    if (status != EEP_OK) {
        return status;
    }
    if (count < 1) {
        eep_error(EEP_SUBSYS_RUNTIME, "no CUDA device is visible");
        return EEP_ERR_NO_DEVICE;
    }
    if (comm_device >= 0) {
        rt->device = comm_device;
    } else if (requested >= 0) {
        rt->device = requested;
    } else if (rt->cfg.device >= 0) {
        rt->device = (int)rt->cfg.device;
    } else {
        rt->device = rt->rank % count;
    }
    if (rt->device >= count) {
        eep_error(EEP_SUBSYS_RUNTIME, "device %d requested but only %d visible", rt->device, count);
        return EEP_ERR_INVALID_ARG;
    }
    status = eep_status_from_cu(cu->cuDeviceGet(&dev, rt->device), "cuDeviceGet");
    if (status != EEP_OK) {
        return status;
    }
    status = eep_status_from_cu(cu->cuDevicePrimaryCtxRetain(&ctx, dev),
                                "cuDevicePrimaryCtxRetain");
    if (status != EEP_OK) {
        return status;
    }
    rt->cu_dev = dev;
    rt->cu_ctx = ctx;
    eep_runtime_join_gpu_share(rt, cu);
    /* NCCL (through the runtime API) uses the current context's device. */
    return eep_status_from_cu(cu->cuCtxSetCurrent(ctx), "cuCtxSetCurrent");
}

static eep_status_t eep_runtime_map_fault_page(eep_runtime_t *rt, const eep_cuda_sym_t *cu)
{
    CUdeviceptr  dptr;
    void        *host = NULL;
    eep_status_t status;

    status = eep_status_from_cu(
        cu->cuMemHostAlloc(&host, sizeof(eep_fault_page_t),
                           CU_MEMHOSTALLOC_DEVICEMAP | CU_MEMHOSTALLOC_PORTABLE),
        "cuMemHostAlloc(fault page)");
    if (status != EEP_OK) {
        return status;
    }
    memset(host, 0, sizeof(eep_fault_page_t));
    rt->fault_host          = host;
    rt->fault_host->magic   = EEP_FAULT_MAGIC;
    rt->fault_host->version = EEP_LAYOUT_VERSION;

    status = eep_status_from_cu(cu->cuMemHostGetDevicePointer(&dptr, host, 0),
                                "cuMemHostGetDevicePointer(fault page)");
    if (status != EEP_OK) {
        return status;
    }
    rt->fault_dev = (uint64_t)dptr;
    return EEP_OK;
}

eep_status_t eep_runtime_create(const eep_runtime_params_t *params, eep_runtime_t **rt_p)
{
    eep_runtime_params_t  p;
    const eep_cuda_sym_t *cu;
    eep_runtime_t        *rt;
    eep_status_t          status;
    int                   comm_device = -1;

    status = eep_runtime_check_params(params, rt_p);
    if (status != EEP_OK) {
        return status;
    }
    memset(&p, 0, sizeof(p));
    memcpy(&p, params, params->size);
    rt = calloc(1, sizeof(*rt));
    if (rt == NULL) {
        return EEP_ERR_NO_MEMORY;
    }
    eep_config_check_env_once();
    eep_runtime_nccl_env_once();
    status = eep_config_load(&eep_runtime_knob_table, &rt->cfg);
    if (status != EEP_OK) {
        goto err_free;
    }
    rt->epoch              = p.epoch;
    rt->timeout_ms         = p.timeout_ms > 0 ? p.timeout_ms : (int)rt->cfg.timeout_ms;
    rt->timeout_ms_created = rt->timeout_ms;
    rt->window_bytes       = p.window_bytes > 0 ? p.window_bytes : (size_t)rt->cfg.window_bytes;
    rt->window_bytes = (rt->window_bytes + EEP_WINDOW_GRANULARITY - 1) / EEP_WINDOW_GRANULARITY *
                       EEP_WINDOW_GRANULARITY;
    if (rt->window_bytes == 0) {
        eep_error(EEP_SUBSYS_RUNTIME, "window size is 0: set params.window_bytes or "
                                      "EEP_WINDOW_SIZE");
        status = EEP_ERR_INVALID_ARG;
        goto err_free;
    }

    /* The driver first: without it nothing else can work, and the answer must be clear. */
    status = eep_cuda_sym_driver(&cu);
    if (status != EEP_OK) {
        eep_error(EEP_SUBSYS_RUNTIME, "no usable CUDA driver: the data plane needs a GPU");
        status = EEP_ERR_NO_DEVICE;
        goto err_free;
    }
    if (p.membership != NULL) {
        rt->rank   = 0; /* until the first view */
        rt->nranks = 1;
    } else if (p.nccl_comm != NULL) {
        status = eep_runtime_nccl_comm_info(p.nccl_comm, &rt->rank, &rt->nranks, &comm_device);
        if (status != EEP_OK) {
            goto err_free;
        }
    } else {
        rt->rank   = eep_bootstrap_rank(p.bootstrap);
        rt->nranks = eep_bootstrap_nranks(p.bootstrap);
    }
    eep_log_set_rank(rt->rank);
    status = eep_workspace_layout(rt->nranks, 1, rt->window_bytes, &rt->layout);
    if (status != EEP_OK) {
        goto err_free;
    }
    status = eep_runtime_open_device(rt, cu, p.device, comm_device);
    if (status != EEP_OK) {
        goto err_release_ctx;
    }
    status = eep_runtime_map_fault_page(rt, cu);
    if (status == EEP_OK) {
        status = eep_runtime_stats_alloc(rt);
    }
    if (status != EEP_OK) {
        goto err_free_page;
    }
    if (p.membership != NULL) {
        status = eep_runtime_membership_start(rt, p.membership, p.join_timeout_ms);
    } else {
        status = eep_runtime_nccl_setup(rt, p.bootstrap, p.nccl_comm);
    }
    if (status != EEP_OK) {
        goto err_nccl;
    }
    status = eep_jit_create(NULL, &rt->jit);
    if (status != EEP_OK) {
        goto err_nccl;
    }
    *rt_p = rt;
    return EEP_OK;

err_nccl:
    /* A half-made communicator is aborted, never finalized: a peer may have failed. */
    eep_runtime_membership_end(rt);
    eep_runtime_nccl_teardown(rt, 1);
err_free_page:
    eep_runtime_stats_free(rt);
    if (rt->fault_host != NULL) {
        cu->cuMemFreeHost(rt->fault_host);
    }
err_release_ctx:
    eep_gpu_share_leave(rt->gpu_share);
    if (rt->cu_ctx != NULL) {
        cu->cuDevicePrimaryCtxRelease(rt->cu_dev);
    }
err_free:
    free(rt);
    return status;
}

void eep_runtime_destroy(eep_runtime_t *rt)
{
    const eep_cuda_sym_t *cu;
    int                   abort_comm;

    if (rt == NULL) {
        return;
    }
    if (eep_cuda_sym_driver(&cu) != EEP_OK) {
        free(rt);
        return;
    }
    cu->cuCtxSetCurrent((CUcontext)rt->cu_ctx);
    /* Every wait of our kernels is bounded, so this returns. */
    eep_status_from_cu(cu->cuCtxSynchronize(), "cuCtxSynchronize(destroy)");
    abort_comm = rt->fault_seen || rt->fault_host->abort_flag != EEP_ABORT_NONE;
    while (rt->n_dtors > 0) {
        rt->n_dtors--;
        rt->dtors[rt->n_dtors].func(rt, rt->dtors[rt->n_dtors].arg);
    }
    eep_jit_destroy(rt->jit);
    eep_runtime_membership_end(rt);
    eep_runtime_nccl_teardown(rt, abort_comm);
    eep_runtime_stats_free(rt);
    cu->cuMemFreeHost(rt->fault_host);
    cu->cuDevicePrimaryCtxRelease(rt->cu_dev);
    eep_gpu_share_leave(rt->gpu_share);
    free(rt);
}

eep_status_t eep_runtime_add_dtor(eep_runtime_t *rt, eep_runtime_dtor_func_t func, void *arg)
{
    if (rt->n_dtors == EEP_RUNTIME_MAX_DTORS) {
        eep_error(EEP_SUBSYS_RUNTIME, "runtime: more than %d destructors", EEP_RUNTIME_MAX_DTORS);
        return EEP_ERR_NO_RESOURCE;
    }
    rt->dtors[rt->n_dtors].func = func;
    rt->dtors[rt->n_dtors].arg  = arg;
    rt->n_dtors++;
    return EEP_OK;
}

eep_status_t eep_runtime_query(const eep_runtime_t *rt, eep_runtime_info_t *info_p)
{
    if (rt == NULL || info_p == NULL) {
        eep_error(EEP_SUBSYS_RUNTIME, "eep_runtime_query: rt and info_p must not be NULL");
        return EEP_ERR_INVALID_ARG;
    }
    memset(info_p, 0, sizeof(*info_p));
    info_p->rank            = rt->rank;
    info_p->nranks          = rt->nranks;
    info_p->lsa_rank        = rt->lsa_rank;
    info_p->lsa_size        = rt->lsa_size;
    info_p->rail_rank       = rt->rail_rank;
    info_p->rail_size       = rt->rail_size;
    info_p->device          = rt->device;
    info_p->gin             = rt->gin;
    info_p->gin_probed      = rt->gin_probed;
    info_p->window_bytes    = rt->window_bytes;
    info_p->workspace_bytes = rt->layout.data_off;
    info_p->timeout_ms      = rt->timeout_ms;
    return EEP_OK;
}

int eep_runtime_gpu_sharers(const eep_runtime_t *rt)
{
    return rt != NULL && rt->gpu_mps ? eep_gpu_share_count(rt->gpu_share) : 1;
}

uint64_t eep_runtime_epoch(const eep_runtime_t *rt)
{
    return rt != NULL ? rt->epoch : 0;
}

eep_status_t eep_runtime_set_epoch(eep_runtime_t *rt, uint64_t epoch)
{
    if (epoch <= rt->epoch) {
        eep_error(EEP_SUBSYS_RUNTIME,
                  "runtime: membership epoch %llu is not newer than the current epoch %llu",
                  (unsigned long long)epoch, (unsigned long long)rt->epoch);
        return EEP_ERR_STALE_EPOCH;
    }
    rt->epoch = epoch;
    return EEP_OK;
}

void *eep_runtime_nccl_comm(const eep_runtime_t *rt)
{
    return rt != NULL ? eep_runtime_nccl_comm_get(rt) : NULL;
}

static const char *eep_phase_name(int phase)
{
    switch (phase) {
    case EEP_PHASE_BARRIER_LSA:
        return "scale-up barrier";
    case EEP_PHASE_BARRIER_GIN:
        return "scale-out barrier";
    case EEP_PHASE_EP_DISPATCH:
        return "dispatch";
    case EEP_PHASE_EP_COMBINE:
        return "combine";
    default:
        return "unknown phase";
    }
}

eep_status_t eep_runtime_fault(const eep_runtime_t *rt, eep_fault_record_t *rec_p)
{
    unsigned i;

    if (rt == NULL || rec_p == NULL) {
        eep_error(EEP_SUBSYS_RUNTIME, "eep_runtime_fault: rt and rec_p must not be NULL");
        return EEP_ERR_INVALID_ARG;
    }
    for (i = 0; i < EEP_FAULT_MAX_RECORDS; i++) {
        const volatile eep_fault_record_t *r = &rt->fault_host->records[i];

        if (__atomic_load_n(&rt->fault_host->records[i].valid, __ATOMIC_ACQUIRE) != 0) {
            memcpy(rec_p, (const void *)r, sizeof(*rec_p));
            return EEP_OK;
        }
    }
    return EEP_ERR_NOT_FOUND;
}

/* Say once what raised the abort flag, from the first fault record (read once). */
static void eep_runtime_log_fault(eep_runtime_t *rt, unsigned flag)
{
    eep_fault_record_t rec;
    int                have = eep_runtime_fault(rt, &rec) == EEP_OK;

    if (have && rec.phase == EEP_PHASE_EP_BAD_EXPERT) {
        eep_error(EEP_SUBSYS_KERNEL,
                  "dispatch: token %llu of rank %d has expert id %lld "
                  "outside [-1, num_experts) or repeated: dropped",
                  rec.expected, rec.rank, (long long)rec.observed);
    } else if (have && flag != EEP_ABORT_FAULT &&
               (rec.phase == EEP_PHASE_EP_DISPATCH || rec.phase == EEP_PHASE_EP_COMBINE)) {
        /* Dispatch/combine wait on (sequence << 32) | value words: show both halves. */
        eep_error(EEP_SUBSYS_KERNEL,
                  "%s timed out waiting for peer %d after %llu us "
                  "(expected sequence %llu, seen sequence %llu value %llu)",
                  eep_phase_name(rec.phase), rec.peer, rec.waited_ns / 1000, rec.expected >> 32,
                  rec.observed >> 32, rec.observed & 0xffffffffull);
    } else if (have && flag != EEP_ABORT_FAULT) {
        eep_error(EEP_SUBSYS_BARRIER,
                  "%s timed out waiting for peer %d after %llu us "
                  "(expected %llu, observed %llu)",
                  eep_phase_name(rec.phase), rec.peer, rec.waited_ns / 1000, rec.expected,
                  rec.observed);
    } else if (flag == EEP_ABORT_HOST) {
        eep_warn(EEP_SUBSYS_RUNTIME, "runtime aborted by the host");
    }
}

eep_status_t eep_poll(eep_runtime_t *rt)
{
    unsigned flag;

    if (rt == NULL) {
        eep_error(EEP_SUBSYS_RUNTIME, "eep_poll: rt is NULL");
        return EEP_ERR_INVALID_ARG;
    }
    if (rt->fenced) {
        return EEP_ERR_FENCED; /* no communicator of a current view (runtime_membership.c) */
    }
    flag = __atomic_load_n(&rt->fault_host->abort_flag, __ATOMIC_ACQUIRE);
    if (flag != EEP_ABORT_NONE) {
        if (!rt->fault_seen) {
            rt->fault_seen = 1;
            eep_runtime_log_fault(rt, flag);
        }
        return flag == EEP_ABORT_HOST    ? EEP_ERR_ABORTED
               : flag == EEP_ABORT_FAULT ? EEP_ERR_DEVICE_FAULT
                                         : EEP_ERR_PEER_TIMEOUT;
    }
    return eep_runtime_nccl_poll(rt);
}

eep_status_t eep_runtime_sync(eep_runtime_t *rt, void *stream)
{
    const eep_cuda_sym_t *cu;
    eep_status_t          status;

    if (rt == NULL) {
        eep_error(EEP_SUBSYS_RUNTIME, "eep_runtime_sync: rt is NULL");
        return EEP_ERR_INVALID_ARG;
    }
    status = eep_cuda_sym_driver(&cu);
    if (status != EEP_OK) {
        return status;
    }
    status = eep_status_from_cu(cu->cuStreamSynchronize((CUstream)stream), "cuStreamSynchronize");
    if (status != EEP_OK) {
        return status;
    }
    return eep_poll(rt);
}

eep_status_t eep_runtime_stream_query(eep_runtime_t *rt, void *stream)
{
    const eep_cuda_sym_t *cu;
    eep_status_t          status;
    CUresult              res;

    if (rt == NULL) {
        eep_error(EEP_SUBSYS_RUNTIME, "eep_runtime_stream_query: rt is NULL");
        return EEP_ERR_INVALID_ARG;
    }
    status = eep_cuda_sym_driver(&cu);
    if (status != EEP_OK) {
        return status;
    }
    res = cu->cuStreamQuery((CUstream)stream);
    if (res == CUDA_ERROR_NOT_READY) {
        return EEP_INPROGRESS;
    }
    status = eep_status_from_cu(res, "cuStreamQuery");
    if (status != EEP_OK) {
        return status;
    }
    return eep_poll(rt);
}

typedef struct {
    eep_runtime_t *rt;
    void          *stream;
} eep_stream_wait_ctx_t;

static eep_status_t eep_stream_wait_query(void *ctx)
{
    eep_stream_wait_ctx_t *c = ctx;

    return eep_runtime_stream_query(c->rt, c->stream);
}

static void eep_stream_wait_abort(void *ctx)
{
    eep_runtime_abort(((eep_stream_wait_ctx_t *)ctx)->rt);
}

eep_status_t eep_runtime_stream_wait(eep_runtime_t *rt, void              *stream,
                                     int (*should_abort)(void *ctx), void *ctx)
{
    eep_stream_wait_ctx_t c = { rt, stream };
    eep_wait_loop_t       w;

    if (rt == NULL) {
        eep_error(EEP_SUBSYS_RUNTIME, "eep_runtime_stream_wait: rt is NULL");
        return EEP_ERR_INVALID_ARG;
    }
    w.query        = eep_stream_wait_query;
    w.abort        = eep_stream_wait_abort;
    w.ctx          = &c;
    w.should_abort = should_abort;
    w.watch_ctx    = ctx;
    w.poll_us      = 100;
    return eep_wait_loop_run(&w);
}

eep_status_t eep_runtime_set_timeout(eep_runtime_t *rt, int timeout_ms)
{
    if (rt == NULL) {
        eep_error(EEP_SUBSYS_RUNTIME, "eep_runtime_set_timeout: rt is NULL");
        return EEP_ERR_INVALID_ARG;
    }
    if (timeout_ms < 0) {
        eep_error(EEP_SUBSYS_RUNTIME,
                  "eep_runtime_set_timeout: timeout_ms %d is negative (0 restores %d)", timeout_ms,
                  rt->timeout_ms_created);
        return EEP_ERR_INVALID_ARG;
    }
    rt->timeout_ms = timeout_ms > 0 ? timeout_ms : rt->timeout_ms_created;
    return EEP_OK;
}

void eep_runtime_abort(eep_runtime_t *rt)
{
    unsigned none = EEP_ABORT_NONE;

    if (rt == NULL) {
        return;
    }
    __atomic_compare_exchange_n((unsigned *)&rt->fault_host->abort_flag, &none, EEP_ABORT_HOST, 0,
                                __ATOMIC_SEQ_CST, __ATOMIC_SEQ_CST);
}

eep_status_t eep_runtime_clear_fault(eep_runtime_t *rt)
{
    const eep_cuda_sym_t *cu;
    eep_status_t          status;
    int                   i;

    if (rt == NULL) {
        eep_error(EEP_SUBSYS_RUNTIME, "eep_runtime_clear_fault: rt is NULL");
        return EEP_ERR_INVALID_ARG;
    }
    status = eep_cuda_sym_driver(&cu);
    if (status != EEP_OK) {
        return status;
    }
    status = eep_status_from_cu(cu->cuCtxSynchronize(), "cuCtxSynchronize");
    if (status != EEP_OK) {
        return status;
    }
    /* The device counter that hands out record slots, then the page. */
    status = eep_status_from_cu(
        cu->cuMemsetD32((CUdeviceptr)rt->buf + rt->layout.counters_off, 0, 1),
        "cuMemsetD32(fault claim)");
    if (status != EEP_OK) {
        return status;
    }
    for (i = 0; i < EEP_FAULT_MAX_RECORDS; i++) { /* eep_runtime_stats' faults, by phase */
        const volatile eep_fault_record_t *r = &rt->fault_host->records[i];

        if (r->valid && r->phase >= 0 && r->phase < (int)(sizeof(rt->faults) / 8)) {
            rt->faults[r->phase]++;
        }
    }
    memset((void *)rt->fault_host->records, 0, sizeof(rt->fault_host->records));
    rt->fault_host->nrecords = 0;
    __atomic_store_n(&rt->fault_host->abort_flag, EEP_ABORT_NONE, __ATOMIC_RELEASE);
    rt->fault_seen = 0;
    return EEP_OK;
}
