/*
 * elastic/runtime/runtime_stats.c - eep_runtime_stats: what a runtime did, and how long its
 * kernels waited for each peer.
 *
 * The wait counters are u64 ns in device memory, added by the kernels' bounded waits with one
 * atomicAdd per wait that spun (kernels/common/wait.cuh; device atomics, which host-mapped memory
 * over PCIe does not give).  The host reads them with an async copy into a pinned buffer on a
 * non-blocking stream of the runtime's own and waits for that stream only, so a read never waits
 * for the caller's streams, and a kernel still running is counted as far as it got.
 */
#include <string.h>

#include "elastic/gpu/cuda_sym.h"
#include "elastic/jit/jit.h"
#include "elastic/runtime/runtime.h"
#include "util/log.h"

#define EEP_WAIT_STAT_BYTES ((size_t)EEP_WAIT_STAT_WORDS * 8) /* totals, then watermarks */

eep_status_t eep_runtime_stats_alloc(eep_runtime_t *rt)
{
    const eep_cuda_sym_t *cu;
    CUdeviceptr           d = 0;
    eep_status_t          status;

    if ((status = eep_cuda_sym_driver(&cu)) != EEP_OK) {
        return status;
    }
    status = eep_status_from_cu(cu->cuMemAlloc(&d, EEP_WAIT_STAT_BYTES), "cuMemAlloc(wait stats)");
    if (status != EEP_OK) {
        return status;
    }
    status = eep_status_from_cu(cu->cuMemsetD8(d, 0, EEP_WAIT_STAT_BYTES),
                                "cuMemsetD8(wait stats)");
    if (status != EEP_OK) {
        cu->cuMemFree(d);
        return status;
    }
    rt->wait_stats_dev = (uint64_t)d;
    return EEP_OK;
}

void eep_runtime_stats_free(eep_runtime_t *rt)
{
    const eep_cuda_sym_t *cu;

    if (eep_cuda_sym_driver(&cu) != EEP_OK) {
        return;
    }
    if (rt->stats_stream != NULL) {
        cu->cuStreamDestroy((CUstream)rt->stats_stream);
        rt->stats_stream = NULL;
    }
    if (rt->wait_stats_host != NULL) {
        cu->cuMemFreeHost(rt->wait_stats_host);
        rt->wait_stats_host = NULL;
    }
    if (rt->wait_stats_dev != 0) {
        cu->cuMemFree((CUdeviceptr)rt->wait_stats_dev);
        rt->wait_stats_dev = 0;
    }
}

/* The device's counters into rt->wait_stats_host (the stream and buffer made on first use). */
static eep_status_t eep_runtime_stats_read(eep_runtime_t *rt)
{
    const eep_cuda_sym_t *cu;
    CUstream              s;
    eep_status_t          status;

    if ((status = eep_cuda_sym_driver(&cu)) != EEP_OK) {
        return status;
    }
    if (rt->stats_stream == NULL) {
        status = eep_status_from_cu(cu->cuStreamCreate(&s, CU_STREAM_NON_BLOCKING),
                                    "cuStreamCreate(stats)");
        if (status != EEP_OK) {
            return status;
        }
        rt->stats_stream = s;
    }
    if (rt->wait_stats_host == NULL) {
        status = eep_status_from_cu(
            cu->cuMemHostAlloc(&rt->wait_stats_host, EEP_WAIT_STAT_BYTES, 0),
            "cuMemHostAlloc(wait stats)");
        if (status != EEP_OK) {
            rt->wait_stats_host = NULL;
            return status;
        }
    }
    status = eep_status_from_cu(
        cu->cuMemcpyDtoHAsync(rt->wait_stats_host, (CUdeviceptr)rt->wait_stats_dev,
                              EEP_WAIT_STAT_BYTES, (CUstream)rt->stats_stream),
        "cuMemcpyDtoHAsync(wait stats)");
    if (status != EEP_OK) {
        return status;
    }
    return eep_status_from_cu(cu->cuStreamSynchronize((CUstream)rt->stats_stream),
                              "cuStreamSynchronize(stats)");
}

eep_status_t eep_runtime_stats(eep_runtime_t *rt, eep_runtime_stats_t *stats_p)
{
    eep_runtime_stats_t s;
    eep_status_t        status;
    int                 ph, peer;

    if (rt == NULL || stats_p == NULL) {
        eep_error(EEP_SUBSYS_RUNTIME, "eep_runtime_stats: invalid argument %s: NULL",
                  rt == NULL ? "rt" : "stats_p");
        return EEP_ERR_INVALID_ARG;
    }
    if (stats_p->size < sizeof(eep_runtime_stats_t)) {
        eep_error(EEP_SUBSYS_RUNTIME,
                  "eep_runtime_stats: invalid argument stats_p->size: %zu, below %zu (set it to "
                  "sizeof(eep_runtime_stats_t))",
                  stats_p->size, sizeof(eep_runtime_stats_t));
        return EEP_ERR_INVALID_ARG;
    }
    memset(&s, 0, sizeof(s));
    s.size           = sizeof(s);
    s.epoch          = rt->epoch;
    s.rank           = rt->rank;
    s.nranks         = rt->nranks;
    s.dispatch_calls = rt->n_dispatch;
    s.combine_calls  = rt->n_combine;
    s.barrier_calls  = rt->n_barrier;
    s.dispatch_bytes = rt->dispatch_bytes;
    s.combine_bytes  = rt->combine_bytes;
    memcpy(s.faults, rt->faults, sizeof(s.faults));
    eep_jit_counts(rt->jit, &s.jit_compiles, &s.jit_cache_hits);
    if (rt->wait_stats_dev != 0) {
        status = eep_runtime_stats_read(rt);
        if (status != EEP_OK) {
            return status;
        }
        for (ph = 0; ph < EEP_WAIT_STAT_PHASES; ph++) {
            for (peer = 0; peer < EEP_MAX_RANKS; peer++) {
                s.wait_seconds[ph][peer] =
                    (double)((const uint64_t *)rt->wait_stats_host)[ph * EEP_MAX_RANKS + peer] *
                    1e-9;
            }
        }
    }
    memcpy(stats_p, &s, sizeof(s));
    return EEP_OK;
}
