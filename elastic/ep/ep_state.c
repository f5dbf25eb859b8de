/*
 * ep_state.c - the dispatch/combine state of a runtime (struct eep_ep_state, ep_state.h): made at
 * the first call, with the device's SMs and this rank's share of them, the pinned count mirror,
 * the dispatch scratch and the trace buffers, freed by the runtime's destructor; the mode and the
 * GIN parameters chosen again after every view.  Also the device tables of uneven expert
 * placements (per expert count and membership epoch) and the per-runtime kernel table, so that a
 * warm call never hashes a source file, and the state's queries eep_ep_transport and
 * eep_ep_trace_copy.
 */
#include "elastic/ep/ep_state.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "elastic/ep/ep_handle.h"
#include "elastic/ep/ep_kernels.h"
#include "elastic/ep/ep_mode.h"
#include "elastic/ep/ep_sm_model.h"
#include "util/clock.h"
#include "util/log.h"
#include "elastic/runtime/runtime.h"

/* Free the placement tables (no kernel of the runtime runs). */
static void eep_ep_places_free(const eep_cuda_sym_t *cu, struct eep_ep_state *st)
{
    for (int i = 0; i < EEP_EP_PLACE_SLOTS; i++) {
        if (st->places[i].dev != 0) {
            cu->cuMemFree((CUdeviceptr)st->places[i].dev);
        }
        memset(&st->places[i], 0, sizeof(st->places[i]));
    }
}

/*
 * The device table of @p shape's placement (uneven placements only: an even one is arithmetic
 * in the kernels), made on first use per expert count and membership epoch and kept: a warm call
 * finds it in a scan of a few entries.  A new epoch's placement may differ: the tables of older
 * epochs are freed then (between steps, eep_membership_sync: no kernel of the runtime runs).
 */
eep_status_t eep_ep_place_dev(const eep_runtime_t *rt, const eep_cuda_sym_t *cu,
                              struct eep_ep_state *st, const eep_ep_shape_t *shape,
                              unsigned long long *dev_p)
{
    eep_ep_place_slot_t *slot = NULL;
    uint32_t            *table;
    CUdeviceptr          d = 0;
    eep_status_t         status;
    int                  i;

    for (i = 0; i < EEP_EP_PLACE_SLOTS; i++) {
        if (st->places[i].num_experts == shape->num_experts && st->places[i].epoch == rt->epoch) {
            *dev_p = st->places[i].dev;
            return EEP_OK;
        }
        if (st->places[i].num_experts != 0 && st->places[i].epoch != rt->epoch) {
            eep_ep_places_free(cu, st);
            i = -1; /* scan again: every slot is free now */
            continue;
        }
        if (slot == NULL && st->places[i].num_experts == 0) {
            slot = &st->places[i];
        }
    }
    if (slot == NULL) {
        eep_error(EEP_SUBSYS_KERNEL,
                  "dispatch/combine: more than %d expert counts with an uneven placement on one "
                  "runtime",
                  EEP_EP_PLACE_SLOTS);
        return EEP_ERR_NO_RESOURCE;
    }
    table = malloc((size_t)shape->num_experts * sizeof(*table));
    if (table == NULL) {
        return EEP_ERR_NO_MEMORY;
    }
    eep_ep_place_table(shape, table);
    status = eep_status_from_cu(cu->cuMemAlloc(&d, (size_t)shape->num_experts * sizeof(*table)),
                                "cuMemAlloc(placement table)");
    if (status == EEP_OK) {
        status = eep_status_from_cu(
            cu->cuMemcpyHtoD(d, table, (size_t)shape->num_experts * sizeof(*table)),
            "cuMemcpyHtoD(placement table)");
    }
    free(table);
    if (status != EEP_OK) {
        if (d != 0) {
            cu->cuMemFree(d);
        }
        return status;
    }
    slot->num_experts = shape->num_experts;
    slot->epoch       = rt->epoch;
    slot->dev         = (uint64_t)d;
    *dev_p            = (unsigned long long)d;
    return EEP_OK;
}

/* Give back what @p st holds (the driver's allocations, then the struct): the runtime's destructor,
   and eep_ep_state_get when a later step of the making fails. */
static void eep_ep_state_free(const eep_cuda_sym_t *cu, struct eep_ep_state *st)
{
    if (cu != NULL) {
        if (st->mirror != NULL) {
            cu->cuMemFreeHost((void *)st->mirror);
        }
        if (st->chunk != 0) {
            cu->cuMemFree((CUdeviceptr)st->chunk);
        }
        if (st->gin_dev != 0) {
            cu->cuMemFree((CUdeviceptr)st->gin_dev);
        }
        eep_ep_places_free(cu, st);
        if (st->ce_fork != NULL) {
            cu->cuEventDestroy(st->ce_fork);
        }
        if (st->ce_join != NULL) {
            cu->cuEventDestroy(st->ce_join);
        }
        if (st->ce_stream != NULL) { /* pending copies still finish: cuStreamDestroy's rule */
            cu->cuStreamDestroy(st->ce_stream);
        }
        for (int i = 0; i < 2; i++) {
            if (st->trace[i] != 0) {
                cu->cuMemFree((CUdeviceptr)st->trace[i]);
            }
        }
    }
    free(st);
}

/* The runtime's destructor for the dispatch/combine state (registered when it is made; kernels
   are owned by rt->jit). */
static void eep_ep_state_destroy(eep_runtime_t *rt, void *arg)
{
    const eep_cuda_sym_t *cu;

    (void)arg;
    if (rt == NULL || rt->ep == NULL) {
        return;
    }
    eep_ep_state_free(eep_cuda_sym_driver(&cu) == EEP_OK ? cu : NULL, rt->ep);
    rt->ep = NULL;
}

/* A view gave the runtime a new window: nothing of the old layout may be read as this one's
   (tags, flags, counts); the scratch holds call sequences, so it starts from zero again on every
   rank, as the new window does.  Kernels stay (the table's keys hold the rank count). */
static void eep_ep_state_view_reset(eep_runtime_t *rt, void *arg)
{
    const eep_cuda_sym_t *cu;
    struct eep_ep_state  *st = rt->ep;

    (void)arg;
    if (st == NULL || eep_cuda_sym_driver(&cu) != EEP_OK) {
        return;
    }
    /* the envelope is laid out for the old world: the next call lays out the new window (shapes
       reserved with eep_ep_reserve must be reserved again after a view: a known limit) */
    st->have_env = 0;
    /* the mode follows the new teams (a view of 1 rank is direct, the next of 2 nodes hybrid),
       and the GIN parameters hold the old dev comm: both made again before the next call (here
       rt->nranks is still the old view's) */
    st->topo_stale = 1;
    eep_ep_places_free(cu, st); /* the view's placement may differ */
    memset((void *)st->mirror, 0, 8 * EEP_EP_MIRROR_WORDS);
    if (st->chunk != 0) {
        eep_status_from_cu(cu->cuMemsetD8((CUdeviceptr)st->chunk, 0, EEP_EP_CHUNK_SCRATCH_BYTES),
                           "cuMemsetD8(dispatch scratch, new view)");
        eep_status_from_cu(cu->cuCtxSynchronize(), "cuCtxSynchronize(new view)");
    }
}

/* Hybrid: the eep_epk_gin_t the kernels read (dev comm, the EP's signal and counter bases), in
   device memory, made once per runtime. */
static eep_status_t eep_ep_gin_make(const eep_runtime_t *rt, const eep_cuda_sym_t *cu,
                                    struct eep_ep_state *st)
{
    eep_epk_gin_t g;
    CUdeviceptr   d = 0;
    eep_status_t  status;

    memset(&g, 0, sizeof(g));
    g.devcomm  = rt->devcomm;
    g.sig0     = rt->ep_gin_signal0;
    g.ctr0     = rt->ep_gin_counter0;
    g.lsa_size = rt->lsa_size;
    g.nodes    = rt->nranks / rt->lsa_size;
    status     = eep_status_from_cu(cu->cuMemAlloc(&d, sizeof(g)), "cuMemAlloc(gin params)");
    if (status == EEP_OK) {
        status = eep_status_from_cu(cu->cuMemcpyHtoD(d, &g, sizeof(g)), "cuMemcpyHtoD(gin params)");
    }
    if (status != EEP_OK) {
        if (d != 0) {
            cu->cuMemFree(d);
        }
        return status;
    }
    st->gin_dev = (uint64_t)d;
    return EEP_OK;
}

/* Processes that share this GPU through MPS (the one-GPU cluster, co-location) run at once and
   spin in kernels that wait for one another, so all their blocks must be resident together:
   each counts on its share of the SMs, and none launches with PDL (a kernel launched early holds
   SMs while it waits for the one before it, which doubles a rank's blocks; at 6 and 8 ranks
   under MPS every dispatch timed out).  Without MPS they take turns, each with the whole GPU.
   Read at the first call and after every view (a newcomer may share the GPU). */
static void eep_ep_state_share(const eep_runtime_t *rt, struct eep_ep_state *st)
{
    const int sharers = eep_runtime_gpu_sharers(rt);

    st->device_sms   = eep_ep_shared_sms(st->whole_sms, sharers);
    st->launch_flags = st->pdl_capable && sharers <= 1 ? EEP_JIT_LAUNCH_PDL : 0;
    if (sharers != st->sharers) {
        eep_info(EEP_SUBSYS_KERNEL,
                 "dispatch/combine: %d process(es) run on this GPU at once: %d of its %d SMs "
                 "are this rank's, programmatic dependent launch %s",
                 sharers, st->device_sms, st->whole_sms,
                 st->launch_flags ? "on"
                 : sharers > 1    ? "off (shared through MPS)"
                                  : "off (EEP_EP_PDL=0 or before sm_90)");
    }
    st->sharers = sharers;
}

/* The mode from the runtime's current teams, and in hybrid mode the GIN parameters of its current
   dev comm: at the first call and after every view. */
static eep_status_t eep_ep_state_topology(const eep_runtime_t *rt, const eep_cuda_sym_t *cu,
                                          struct eep_ep_state *st)
{
    const eep_ep_topology_t topo = { .nranks    = rt->nranks,
                                     .lsa_size  = rt->lsa_size,
                                     .rail_size = rt->rail_size,
                                     .gin       = rt->gin && rt->ep_gin_signal0 >= 0 };
    eep_status_t            status;
    int                     hybrid = 0;

    status = eep_ep_mode_choose(&topo, st->cfg.mode, &hybrid);
    if (status != EEP_OK) {
        return status;
    }
    if (st->gin_dev != 0) {
        cu->cuMemFree((CUdeviceptr)st->gin_dev);
        st->gin_dev = 0;
    }
    st->hybrid = hybrid;
    if (hybrid && (status = eep_ep_gin_make(rt, cu, st)) != EEP_OK) {
        return status;
    }
    eep_ep_state_share(rt, st);
    st->topo_stale = 0;
    return EEP_OK;
}

eep_status_t eep_ep_state_get(eep_runtime_t *rt, const eep_cuda_sym_t *cu,
                              struct eep_ep_state **st_p)
{
    struct eep_ep_state *st;
    eep_status_t         status;
    void                *host = NULL;
    CUdeviceptr          dev  = 0;

    if (rt->ep != NULL) {
        status = rt->ep->topo_stale ? eep_ep_state_topology(rt, cu, rt->ep) : EEP_OK;
        *st_p  = rt->ep;
        return status;
    }
    st = calloc(1, sizeof(*st));
    if (st == NULL) {
        return EEP_ERR_NO_MEMORY;
    }
    status = eep_config_load(&eep_ep_knob_table, &st->cfg);
    if (status == EEP_OK) {
        status = eep_status_from_cu(
            cu->cuDeviceGetAttribute(&st->whole_sms, CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT,
                                     (CUdevice)rt->cu_dev),
            "cuDeviceGetAttribute(SMs)");
    }
    if (status == EEP_OK) {
        int major = 0;

        status = eep_status_from_cu(
            cu->cuDeviceGetAttribute(&major, CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR,
                                     (CUdevice)rt->cu_dev),
            "cuDeviceGetAttribute(compute capability)");
        st->pdl_capable = st->cfg.pdl && major >= 9;
    }
    if (status == EEP_OK) {
        status = eep_ep_state_topology(rt, cu, st); /* and the GPU's sharers */
    }
    if (status == EEP_OK) {
        status = eep_status_from_cu(
            cu->cuMemHostAlloc(&host, 8 * EEP_EP_MIRROR_WORDS,
                               CU_MEMHOSTALLOC_DEVICEMAP | CU_MEMHOSTALLOC_PORTABLE),
            "cuMemHostAlloc(count mirror)");
    }
    if (status == EEP_OK) {
        memset(host, 0, 8 * EEP_EP_MIRROR_WORDS);
        status = eep_status_from_cu(cu->cuMemHostGetDevicePointer(&dev, host, 0),
                                    "cuMemHostGetDevicePointer(count mirror)");
    }
    st->mirror = (volatile uint64_t *)host;
    if (status != EEP_OK) {
        eep_ep_state_free(cu, st); /* and the GIN parameters the topology made */
        return status;
    }
    st->mirror_dev = (uint64_t)dev;
    {
        /* zeroed once: the flags hold call sequences, never reset */
        const size_t bytes = EEP_EP_CHUNK_SCRATCH_BYTES;
        CUdeviceptr  d     = 0;

        status = eep_status_from_cu(cu->cuMemAlloc(&d, bytes), "cuMemAlloc(dispatch scratch)");
        if (status == EEP_OK) {
            status    = eep_status_from_cu(cu->cuMemsetD8(d, 0, bytes),
                                           "cuMemsetD8(dispatch scratch)");
            st->chunk = (uint64_t)d;
        }
        if (status != EEP_OK) {
            eep_ep_state_free(cu, st); /* st->chunk is the scratch, once allocated */
            return status;
        }
    }
    for (int i = 0; i < 2 && st->cfg.trace; i++) {
        CUdeviceptr d = 0;

        if (eep_status_from_cu(cu->cuMemAlloc(&d, (size_t)EEP_EPK_TRACE_WORDS * 8),
                               "cuMemAlloc(trace)") == EEP_OK) {
            cu->cuMemsetD8(d, 0, (size_t)EEP_EPK_TRACE_WORDS * 8);
            st->trace[i] = (uint64_t)d;
        }
    }
    rt->ep = st;
    status = eep_runtime_add_dtor(rt, eep_ep_state_destroy, NULL);
    if (status == EEP_OK && rt->vm != NULL) {
        status = eep_runtime_add_view_hook(rt, eep_ep_state_view_reset, NULL);
    }
    if (status != EEP_OK) {
        eep_ep_state_destroy(rt, NULL);
        return status;
    }
    *st_p = st;
    return EEP_OK;
}

/*
 * A kernel by (function, template arguments, shape), from the per-runtime table or the JIT.  The
 * shape's top-k, ranks and hidden size are compiled in (kernels/ep/ep_params.h, EEP_EPK_FIXED_*):
 * one variant per shape, compiled once and kept in the JIT's disk cache.  On a table miss the
 * same kernel for one rank fewer is queued for a background compile (EEP_EP_PREFETCH_SHRINK):
 * after a rank is lost, the survivors' next call finds it cached instead of compiling for
 * seconds in the middle of their recovery.
 */
eep_status_t eep_ep_kernel(eep_runtime_t *rt, struct eep_ep_state *st, int combine, int idx_bits,
                           int mode, int phase, const eep_ep_shape_t *shape, void *stream,
                           eep_jit_kernel_t **kernel_p)
{
    char                  key[EEP_EP_KERNEL_KEY];
    eep_ep_kernel_names_t names;
    eep_jit_spec_t        spec;
    eep_status_t          status;
    int                   i;

    /* the table's key: every input of eep_ep_kernel_spec (combine has no template arguments; its
       mode says whether the one-row path is in) */
    snprintf(key, sizeof(key), "%s<%d, %d, %d> k%d w%d h%d %s%s",
             combine == EEP_EP_KERNEL_TOPK_GRAD ? "g"
             : combine                          ? "c"
                                                : "d",
             combine ? 0 : idx_bits, combine == EEP_EP_KERNEL_TOPK_GRAD ? 0 : mode,
             combine ? 0 : phase, shape->num_topk, shape->world, shape->hidden,
             shape->dtype == EEP_DTYPE_FP8_E4M3 ? "fp8" : "bf16", st->hybrid ? " gin" : "");
    for (i = 0; i < EEP_EP_KERNEL_SLOTS && st->kernels[i].kernel != NULL; i++) {
        if (strcmp(st->kernels[i].key, key) == 0) {
            *kernel_p = st->kernels[i].kernel;
            return EEP_OK;
        }
    }
    /* not in the table: the JIT (its disk cache, or a compile); the spec is built only here */
    eep_ep_kernel_spec_mode(combine, idx_bits, mode, phase, st->hybrid, shape, &names, &spec);
    status = eep_jit_get_kernel_on(rt->jit, &spec, stream, kernel_p); /* see jit.h: no load while
                                                                         our kernels spin */
    if (status != EEP_OK) {
        eep_error(EEP_SUBSYS_KERNEL, "cannot build the %s kernel %s",
                  combine ? "combine" : "dispatch", key);
        return status;
    }
    if (st->cfg.prefetch_shrink) {
        (void)eep_ep_prefetch_shrink_mode(rt->jit, combine, idx_bits, mode, phase, st->hybrid,
                                          shape);
        /* and one rank more, for the newcomer's view that grows the group back */
        (void)eep_ep_prefetch_grow_mode(rt->jit, combine, idx_bits, mode, phase, st->hybrid, shape);
    }
    if (i < EEP_EP_KERNEL_SLOTS) {
        snprintf(st->kernels[i].key, sizeof(st->kernels[i].key), "%s", key);
        st->kernels[i].kernel = *kernel_p;
    }
    return EEP_OK;
}

const char *eep_ep_transport(eep_runtime_t *rt)
{
    const eep_cuda_sym_t *cu = NULL;
    struct eep_ep_state  *st = NULL;

    if (rt == NULL || eep_cuda_sym_driver(&cu) != EEP_OK ||
        eep_ep_state_get(rt, cu, &st) != EEP_OK) {
        return NULL;
    }
    return st->hybrid ? "hybrid" : "direct";
}

void eep_ep_host_mark(struct eep_ep_state *st, int part)
{
    if (st->cfg.trace) {
        const double now = eep_clock_ms();

        st->host_ms[part] += now - st->host_at;
        st->host_at = now;
    }
}

eep_status_t eep_ep_host_trace(eep_runtime_t *rt, double *ms, uint64_t *calls)
{
    if (rt == NULL || rt->ep == NULL || !rt->ep->cfg.trace || ms == NULL || calls == NULL) {
        return EEP_ERR_NOT_FOUND;
    }
    memcpy(ms, rt->ep->host_ms, sizeof(rt->ep->host_ms));
    *calls = rt->ep->host_calls;
    return EEP_OK;
}

eep_status_t eep_ep_trace_copy(eep_runtime_t *rt, int combine, uint64_t *stamps, size_t n)
{
    const eep_cuda_sym_t *cu;
    eep_status_t          status;

    if (rt == NULL || rt->ep == NULL || rt->ep->trace[combine != 0] == 0 || stamps == NULL) {
        return EEP_ERR_NOT_FOUND;
    }
    if ((status = eep_cuda_sym_driver(&cu)) != EEP_OK) {
        return status;
    }
    n = n < (size_t)EEP_EPK_TRACE_WORDS ? n : (size_t)EEP_EPK_TRACE_WORDS;
    return eep_status_from_cu(
        cu->cuMemcpyDtoH(stamps, (CUdeviceptr)rt->ep->trace[combine != 0], n * sizeof(uint64_t)),
        "cuMemcpyDtoH(trace)");
}
