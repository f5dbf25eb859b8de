/*
 * ep.c - eep_dispatch / eep_combine: check, pick the kernel, fill its parameters, launch.
 *
 * Direct mode (every rank an NVLink/LSA peer) or hybrid mode (peers of other nodes over GIN,
 * kernels/ep/ep_gin.cuh), chosen once per runtime from its teams and EEP_EP_MODE
 * (elastic/ep/ep_mode.c); at most EEP_EPK_MAX_WORLD ranks.  A call is
 * one kernel launch (CPU_SYNC dispatch: two, with the host wait for the counts between them), no
 * memset and no barrier: the kernels tag every signal with a call sequence kept on the device and
 * alternate two parities of every slot and region (docs/dispatch.md, section 3).  Kernels come
 * from the JIT (kernels/ep/dispatch.cuh, combine.cuh) and are kept in a small per-runtime table so
 * that a warm call never hashes a source file.  The layout numbers come from ep_layout.c.
 */
#include "eep/ep.h"

#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "util/clock.h"
#include "elastic/gpu/cuda_sym.h"
#include "elastic/ep/ep_args.h"
#include "elastic/ep/ep_handle.h"
#include "elastic/ep/ep_knobs.h"
#include "elastic/ep/ep_kernels.h"
#include "elastic/ep/ep_layout.h"
#include "elastic/ep/ep_mode.h"
#include "elastic/ep/ep_sm_model.h"
#include "util/log.h"
#include "elastic/runtime/runtime.h"
#include "kernels/ep/ep_params.h"

#define EEP_EP_KERNEL_SLOTS       64
#define EEP_EP_KERNEL_KEY         64
#define EEP_EP_SMEM_BUDGET        (160 * 1024) /* dynamic shared memory of the order masks */
#define EEP_EP_CHUNK_TOTALS_BYTES ((size_t)EEP_EPK_MAX_SEND_BLOCKS * EEP_EPK_MAX_COUNTERS * 4)

typedef struct {
    char              key[EEP_EP_KERNEL_KEY];
    eep_jit_kernel_t *kernel;
} eep_ep_kernel_slot_t;

struct eep_ep_state {
    eep_ep_config_t      cfg;
    int                  device_sms;
    unsigned             launch_flags; /* EEP_JIT_LAUNCH_PDL where EEP_EP_PDL and sm_90+ */
    volatile uint64_t   *mirror;       /* pinned, host-mapped: u64[EEP_EP_MAX_LOCAL_EXPERTS + 2] */
    uint64_t             mirror_dev;
    uint64_t             trace[2]; /* EEP_EP_TRACE: device stamps of dispatch, combine */
    uint64_t             chunk;    /* device scratch: senders' chunk counts, then flags */
    eep_ep_kernel_slot_t kernels[EEP_EP_KERNEL_SLOTS];
    int                  hybrid;     /* 1: hybrid mode (eep_ep_mode_choose) */
    uint64_t             gin_dev;    /* hybrid: device copy of the eep_epk_gin_t */
    int                  have_shape; /* the window's dispatch/combine area is laid out ... */
    eep_ep_shape_t       shape;      /* ... for this shape (its first call) */
};

/* The runtime as the argument checks see it: its membership epoch is that of the view its
   communicator was built from (eep_runtime_epoch). */
static void eep_ep_world_of(const eep_runtime_t *rt, eep_ep_world_t *world)
{
    world->runtime = rt;
    world->epoch   = rt->epoch;
    world->rank    = rt->rank;
    world->world   = rt->nranks;
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
    if (eep_cuda_sym_driver(&cu) == EEP_OK) {
        if (rt->ep->mirror != NULL) {
            cu->cuMemFreeHost((void *)rt->ep->mirror);
        }
        if (rt->ep->chunk != 0) {
            cu->cuMemFree((CUdeviceptr)rt->ep->chunk);
        }
        if (rt->ep->gin_dev != 0) {
            cu->cuMemFree((CUdeviceptr)rt->ep->gin_dev);
        }
        for (int i = 0; i < 2; i++) {
            if (rt->ep->trace[i] != 0) {
                cu->cuMemFree((CUdeviceptr)rt->ep->trace[i]);
            }
        }
    }
    free(rt->ep);
    rt->ep = NULL;
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

static eep_status_t eep_ep_state_get(eep_runtime_t *rt, const eep_cuda_sym_t *cu,
                                     struct eep_ep_state **st_p)
{
    struct eep_ep_state *st;
    eep_status_t         status;
    void                *host = NULL;
    CUdeviceptr          dev  = 0;

    if (rt->ep != NULL) {
        *st_p = rt->ep;
        return EEP_OK;
    }
    st = calloc(1, sizeof(*st));
    if (st == NULL) {
        return EEP_ERR_NO_MEMORY;
    }
    status = eep_config_load(&eep_ep_knob_table, &st->cfg);
    if (status == EEP_OK) {
        const eep_ep_topology_t topo = { .nranks    = rt->nranks,
                                         .lsa_size  = rt->lsa_size,
                                         .rail_size = rt->rail_size,
                                         .gin       = rt->gin && rt->ep_gin_signal0 >= 0 };

        status = eep_ep_mode_choose(&topo, st->cfg.mode, &st->hybrid);
    }
    if (status == EEP_OK && st->hybrid) {
        status = eep_ep_gin_make(rt, cu, st);
    }
    if (status == EEP_OK) {
        status = eep_status_from_cu(
            cu->cuDeviceGetAttribute(&st->device_sms, CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT,
                                     (CUdevice)rt->cu_dev),
            "cuDeviceGetAttribute(SMs)");
    }
    if (status == EEP_OK) {
        int major = 0;

        status = eep_status_from_cu(
            cu->cuDeviceGetAttribute(&major, CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR,
                                     (CUdevice)rt->cu_dev),
            "cuDeviceGetAttribute(compute capability)");
        st->launch_flags = st->cfg.pdl && major >= 9 ? EEP_JIT_LAUNCH_PDL : 0;
    }
    if (status == EEP_OK) {
        status = eep_status_from_cu(
            cu->cuMemHostAlloc(&host, 8 * (EEP_EP_MAX_LOCAL_EXPERTS + 2),
                               CU_MEMHOSTALLOC_DEVICEMAP | CU_MEMHOSTALLOC_PORTABLE),
            "cuMemHostAlloc(count mirror)");
    }
    if (status == EEP_OK) {
        memset(host, 0, 8 * (EEP_EP_MAX_LOCAL_EXPERTS + 2));
        status = eep_status_from_cu(cu->cuMemHostGetDevicePointer(&dev, host, 0),
                                    "cuMemHostGetDevicePointer(count mirror)");
    }
    if (status != EEP_OK) {
        if (host != NULL) {
            cu->cuMemFreeHost(host);
        }
        free(st);
        return status;
    }
    st->mirror     = (volatile uint64_t *)host;
    st->mirror_dev = (uint64_t)dev;
    {
        /* zeroed once: the flags hold call sequences, never reset */
        const size_t bytes = EEP_EP_CHUNK_TOTALS_BYTES + (size_t)EEP_EPK_MAX_SEND_BLOCKS * 8;
        CUdeviceptr  d     = 0;

        status = eep_status_from_cu(cu->cuMemAlloc(&d, bytes), "cuMemAlloc(dispatch scratch)");
        if (status == EEP_OK) {
            status    = eep_status_from_cu(cu->cuMemsetD8(d, 0, bytes),
                                           "cuMemsetD8(dispatch scratch)");
            st->chunk = (uint64_t)d;
        }
        if (status != EEP_OK) {
            if (d != 0) {
                cu->cuMemFree(d);
            }
            cu->cuMemFreeHost(host);
            free(st);
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
static eep_status_t eep_ep_kernel(eep_runtime_t *rt, struct eep_ep_state *st, int combine,
                                  int idx_bits, int mode, int phase, const eep_ep_shape_t *shape,
                                  eep_jit_kernel_t **kernel_p)
{
    char                  key[EEP_EP_KERNEL_KEY];
    eep_ep_kernel_names_t names;
    eep_jit_spec_t        spec;
    eep_status_t          status;
    int                   i;

    /* the table's key: every input of eep_ep_kernel_spec (combine has no template arguments) */
    snprintf(key, sizeof(key), "%s<%d, %d, %d> k%d w%d h%d %s%s", combine ? "c" : "d",
             combine ? 0 : idx_bits, combine ? 0 : mode, combine ? 0 : phase, shape->num_topk,
             shape->world, shape->hidden, shape->dtype == EEP_DTYPE_FP8_E4M3 ? "fp8" : "bf16",
             st->hybrid ? " gin" : "");
    for (i = 0; i < EEP_EP_KERNEL_SLOTS && st->kernels[i].kernel != NULL; i++) {
        if (strcmp(st->kernels[i].key, key) == 0) {
            *kernel_p = st->kernels[i].kernel;
            return EEP_OK;
        }
    }
    /* not in the table: the JIT (its disk cache, or a compile); the spec is built only here */
    eep_ep_kernel_spec_mode(combine, idx_bits, mode, phase, st->hybrid, shape, &names, &spec);
    status = eep_jit_get_kernel(rt->jit, &spec, kernel_p);
    if (status != EEP_OK) {
        eep_error(EEP_SUBSYS_KERNEL, "cannot build the %s kernel %s",
                  combine ? "combine" : "dispatch", key);
        return status;
    }
    if (st->cfg.prefetch_shrink) {
        (void)eep_ep_prefetch_shrink_mode(rt->jit, combine, idx_bits, mode, phase, st->hybrid,
                                          shape);
    }
    if (i < EEP_EP_KERNEL_SLOTS) {
        snprintf(st->kernels[i].key, sizeof(st->kernels[i].key), "%s", key);
        st->kernels[i].kernel = *kernel_p;
    }
    return EEP_OK;
}

/* Everything common to dispatch and combine: state, direct mode, window, base parameters. */
static eep_status_t eep_ep_prepare(eep_runtime_t *rt, const eep_ep_shape_t *shape,
                                   const eep_cuda_sym_t **cu_p, struct eep_ep_state **st_p,
                                   eep_epk_params_t *p)
{
    eep_ep_buffer_sizes_t z;
    eep_status_t          status;
    size_t                ep_off = rt->layout.data_off;

    if (__atomic_load_n(&rt->fault_host->abort_flag, __ATOMIC_ACQUIRE) != EEP_ABORT_NONE) {
        return eep_poll(rt);
    }
    if ((status = eep_cuda_sym_driver(cu_p)) != EEP_OK ||
        (status = eep_ep_state_get(rt, *cu_p, st_p)) != EEP_OK) {
        return status;
    }
    if ((status = eep_ep_buffer_sizes(shape, &z)) != EEP_OK) {
        return status;
    }
    /* hybrid: the GIN send staging follows the area (kernels/ep/ep_gin.cuh) */
    const size_t stage = (*st_p)->hybrid ? eep_ep_gin_stage_bytes(shape, rt->lsa_size) : 0;
    /* One layout per runtime: after a change, a wait could find an older layout's bytes where
       it expects a tag, flag or count word (and accept them); nothing resets the area.  A
       membership change (world size) is a layout change too: whatever shrinks or grows a
       runtime in place must zero this area on every rank (then a barrier) and clear
       have_shape. */
    if ((*st_p)->have_shape && !eep_ep_layout_equal(&(*st_p)->shape, shape)) {
        const eep_ep_shape_t *o = &(*st_p)->shape;

        eep_error(EEP_SUBSYS_KERNEL,
                  "dispatch/combine: this runtime's buffers are laid out for "
                  "max_tokens_per_rank %d, hidden %d, top-k %d, %d experts, %s; this call's "
                  "shape (%d, %d, %d, %d, %s) needs another layout: use one shape per runtime "
                  "(or another runtime for this one)",
                  o->max_tokens, o->hidden, o->num_topk, o->num_experts,
                  o->dtype == EEP_DTYPE_FP8_E4M3 ? "fp8" : "bf16", shape->max_tokens, shape->hidden,
                  shape->num_topk, shape->num_experts,
                  shape->dtype == EEP_DTYPE_FP8_E4M3 ? "fp8" : "bf16");
        return EEP_ERR_UNSUPPORTED;
    }
    (*st_p)->shape      = *shape;
    (*st_p)->have_shape = 1;
    if (ep_off + z.total_bytes + stage > rt->window_bytes) {
        eep_error(EEP_SUBSYS_KERNEL,
                  "dispatch/combine: this shape needs %zu bytes of window "
                  "after the %zu-byte workspace (%s mode), the window has %zu: create the "
                  "runtime with window_bytes >= %zu (or raise EEP_WINDOW_SIZE)",
                  z.total_bytes + stage, ep_off, (*st_p)->hybrid ? "hybrid" : "direct",
                  rt->window_bytes, ep_off + z.total_bytes + stage);
        return EEP_ERR_NO_RESOURCE;
    }
    /* shape->world is rt->nranks: the argument checks took it from this runtime */
    if ((status = eep_ep_params_layout(shape, rt->rank, ep_off, rt->buf, p)) != EEP_OK) {
        return status;
    }
    p->window      = rt->window;
    p->fault       = (eep_fault_page_t *)(uintptr_t)rt->fault_dev;
    p->fault_claim = (unsigned int *)((char *)rt->buf + rt->layout.counters_off);
    p->timeout_ns  = (unsigned long long)rt->timeout_ms * 1000000ull;
    /* the LSA team is a block of consecutive ranks (NCCL: node-major); the others are GIN's */
    p->lsa_base = rt->rank - rt->lsa_rank;
    if ((*st_p)->hybrid) {
        p->gin_mask   = eep_ep_gin_mask(rt->nranks, rt->rank, rt->lsa_rank, rt->lsa_size);
        p->gin        = (*st_p)->gin_dev;
        p->gstage_off = ep_off + z.total_bytes;
    }
    return EEP_OK;
}

static void eep_ep_params_handle(eep_epk_params_t *p, const eep_ep_handle_t *h)
{
    p->h_counts    = (uintptr_t)h->d_expert_counts;
    p->h_offsets   = (uintptr_t)h->d_expert_offsets;
    p->h_send_slot = (uintptr_t)h->d_send_slot;
    p->h_recv_n    = (uintptr_t)h->d_recv_n;
    p->h_recv_tok  = (uintptr_t)h->d_recv_tok;
    p->h_recv_ord  = (uintptr_t)h->d_recv_ord;
    p->h_recv_rows = (uintptr_t)h->d_recv_rows;
    p->h_recv_w    = (uintptr_t)h->d_recv_w;
    p->h_fwd_n     = (uintptr_t)h->d_fwd_n;
    p->h_fwd_tok   = (uintptr_t)h->d_fwd_tok;
    p->h_fwd_dm    = (uintptr_t)h->d_fwd_dm;
}

/* CPU_SYNC: wait (bounded, abortable) until the dispatch kernel has published the counts. */
static eep_status_t eep_ep_wait_counts(eep_runtime_t *rt, struct eep_ep_state *st, int El)
{
    const double deadline = eep_clock_ms() + (double)rt->timeout_ms;
    unsigned     spins;

    for (spins = 0;; spins++) {
        if (__atomic_load_n(&st->mirror[El + 1], __ATOMIC_ACQUIRE) != 0) {
            return EEP_OK;
        }
        if ((spins & 1023u) == 1023u) {
            if (__atomic_load_n(&rt->fault_host->abort_flag, __ATOMIC_ACQUIRE) != EEP_ABORT_NONE) {
                return eep_poll(rt);
            }
            if (eep_clock_ms() > deadline) {
                eep_error(EEP_SUBSYS_KERNEL, "dispatch: the counts did not arrive within %d ms",
                          rt->timeout_ms);
                return EEP_ERR_PEER_TIMEOUT;
            }
        }
    }
}

/* CPU_SYNC outputs: the alloc hook, or the caller's buffers checked against the exact size. */
static eep_status_t eep_ep_outputs(const eep_dispatch_args_t *a, int64_t rows, size_t hb, size_t sb,
                                   eep_epk_params_t *p)
{
    void  *ptrs[4];
    size_t bytes[4] = { (size_t)rows * hb, (size_t)rows * sb, (size_t)rows * a->num_topk * 4,
                        (size_t)rows * a->num_topk * 4 };
    static const char *const names[4] = { "recv_x", "recv_x_scales", "recv_topk_idx",
                                          "recv_topk_weights" };
    int                      i;

    if (a->alloc == NULL) {
        eep_status_t status = eep_ep_capacity_check(a, rows);

        if (status != EEP_OK) {
            return status;
        }
        ptrs[0] = a->recv_x;
        ptrs[1] = a->recv_x_scales;
        ptrs[2] = a->recv_topk_idx;
        ptrs[3] = a->recv_topk_weights;
    } else {
        for (i = 0; i < 4; i++) {
            ptrs[i] = NULL;
            if (i == 1 && sb == 0) {
                continue;
            }
            ptrs[i] = a->alloc(a->alloc_arg, bytes[i] > 0 ? bytes[i] : 16, names[i]);
            if (ptrs[i] == NULL) {
                eep_error(EEP_SUBSYS_KERNEL,
                          "dispatch: the alloc hook gave no memory for %s "
                          "(%zu bytes)",
                          names[i], bytes[i]);
                return EEP_ERR_NO_MEMORY;
            }
        }
    }
    p->recv_x            = (uintptr_t)ptrs[0];
    p->recv_x_scales     = (uintptr_t)ptrs[1];
    p->recv_topk_idx     = (uintptr_t)ptrs[2];
    p->recv_topk_weights = (uintptr_t)ptrs[3];
    return EEP_OK;
}

eep_status_t eep_dispatch(eep_runtime_t *rt, const eep_dispatch_args_t *args,
                          eep_ep_handle_t **handle_p, void *stream)
{
    const eep_cuda_sym_t *cu = NULL;
    struct eep_ep_state  *st = NULL;
    eep_ep_world_t        world;
    eep_ep_shape_t        shape;
    eep_epk_params_t      p;
    eep_ep_handle_t      *h, *created = NULL;
    eep_jit_kernel_t     *kernel;
    eep_status_t          status;
    int                   El, NC, sw, sms, copy, idx_bits;
    unsigned              grid;
    size_t                dyn;
    int64_t               rows;

    if (rt == NULL) {
        eep_error(EEP_SUBSYS_KERNEL, "dispatch: invalid argument rt: NULL runtime");
        return EEP_ERR_INVALID_ARG;
    }
    if (handle_p == NULL) {
        eep_error(EEP_SUBSYS_KERNEL, "dispatch: invalid argument handle_p: NULL pointer");
        return EEP_ERR_INVALID_ARG;
    }
    eep_ep_world_of(rt, &world);
    status = eep_ep_dispatch_args_check(args, &world, *handle_p, &shape);
    if (status != EEP_OK) {
        return status;
    }
    if ((status = eep_ep_prepare(rt, &shape, &cu, &st, &p)) != EEP_OK) {
        return status;
    }
    El  = p.num_local;
    sms = eep_ep_pick_sms(&st->cfg, &shape, st->device_sms, 0.0, args->num_sms);
    if (sms < 1) {
        return EEP_ERR_INVALID_ARG;
    }
    sms = sms > EEP_EPK_MAX_SEND_BLOCKS ? EEP_EPK_MAX_SEND_BLOCKS : sms;
    /* Copy blocks: the rest of the device unless a knob says otherwise (docs/dispatch.md 5). */
    copy = st->cfg.copy_sms > 0 ? (int)st->cfg.copy_sms : st->device_sms - sms;
    copy = copy < 1 ? 1 : copy;
    h    = *handle_p;
    if (h == NULL) {
        status = eep_ep_handle_create(rt, world.epoch, rt->rank, &created);
        if (status != EEP_OK) {
            return status;
        }
        h = created;
    }
    if ((status = eep_ep_handle_arrays(cu, h, &shape)) != EEP_OK) {
        goto fail;
    }
    /* Order masks: as many warps as the shared-memory budget allows (E + world counters each). */
    NC                  = shape.num_experts + shape.world;
    sw                  = (int)((EEP_EP_SMEM_BUDGET / 4 / (size_t)NC - 1) / 2);
    sw                  = sw < 1 ? 1 : sw > EEP_EPK_WARPS ? EEP_EPK_WARPS : sw;
    dyn                 = (size_t)(1 + 2 * sw) * (size_t)NC * 4;
    p.scan_warps        = sw;
    p.send_blocks       = sms;
    p.skip_pad_x        = args->size >= offsetof(eep_dispatch_args_t, skip_padding_x) + sizeof(int)
                              ? args->skip_padding_x
                              : 0;
    p.trace             = st->trace[0];
    p.chunk_totals      = st->chunk;
    p.chunk_flags       = st->chunk + EEP_EP_CHUNK_TOTALS_BYTES;
    p.num_tokens        = args->num_tokens;
    p.x                 = (uintptr_t)args->x;
    p.x_scales          = (uintptr_t)args->x_scales;
    p.topk_idx          = (uintptr_t)args->topk_idx;
    p.topk_weights      = (uintptr_t)args->topk_weights;
    p.recv_x            = (uintptr_t)args->recv_x;
    p.recv_x_scales     = (uintptr_t)args->recv_x_scales;
    p.recv_topk_idx     = (uintptr_t)args->recv_topk_idx;
    p.recv_topk_weights = (uintptr_t)args->recv_topk_weights;
    p.recv_counts       = (uintptr_t)args->recv_expert_counts;
    p.recv_offsets      = (uintptr_t)args->recv_expert_offsets;
    p.host_mirror       = st->mirror_dev;
    eep_ep_params_handle(&p, h);
    idx_bits = args->topk_idx_dtype == EEP_INDEX_INT64 ? 64 : 32;

    if ((status = eep_ep_kernel(rt, st, 0, idx_bits, (int)args->mode, 0, &shape, &kernel)) !=
        EEP_OK) {
        goto fail;
    }
    if (args->mode == EEP_EP_MODE_CPU_SYNC) {
        __atomic_store_n(&st->mirror[El + 1], 0, __ATOMIC_RELEASE);
    }
    /* Senders, then the counter; without CPU sync the copy blocks too (the counter is one). */
    grid   = (unsigned)(sms + (args->mode == EEP_EP_MODE_CPU_SYNC ? 1 : copy));
    status = eep_jit_launch_ex(kernel, grid, EEP_EPK_THREADS, dyn, stream, &p, sizeof(p),
                               st->launch_flags);
    if (status != EEP_OK) {
        goto fail;
    }
    rows = eep_ep_rows_max(&shape);
    if (args->mode == EEP_EP_MODE_CPU_SYNC) {
        size_t hb = (size_t)shape.hidden * eep_ep_elem_bytes(shape.dtype);
        size_t sb = shape.dtype == EEP_DTYPE_FP8_E4M3 ? (size_t)shape.hidden / 128 * 4 : 0;
        int    e;

        if ((status = eep_ep_wait_counts(rt, st, El)) != EEP_OK) {
            goto fail;
        }
        rows = (int64_t)(uint32_t)st->mirror[El];
        if (args->host_expert_counts != NULL) {
            for (e = 0; e < El; e++) {
                args->host_expert_counts[e] = (int32_t)(uint32_t)st->mirror[e];
            }
        }
        if ((status = eep_ep_outputs(args, rows, hb, sb, &p)) != EEP_OK ||
            (status = eep_ep_kernel(rt, st, 0, idx_bits, (int)args->mode, 1, &shape, &kernel)) !=
                EEP_OK ||
            (status = eep_jit_launch_ex(kernel, (unsigned)copy, EEP_EPK_THREADS, dyn, stream, &p,
                                        sizeof(p), st->launch_flags)) != EEP_OK) {
            /* The data is on its way and the peers wait for nothing more: the copy is lost,
               the protocol is not (the next dispatch's kernel reads fresh slots). */
            goto fail;
        }
    }
    if (args->num_recv_rows_p != NULL) {
        *args->num_recv_rows_p = rows;
    }
    if (args->mode != EEP_EP_MODE_CACHED) {
        h->shape         = shape;
        h->num_tokens    = args->num_tokens;
        h->num_sms       = sms;
        h->copy_sms      = copy;
        h->num_recv_rows = rows;
        h->has_layout    = 1;
        h->epoch         = world.epoch;
        h->rank          = rt->rank;
    }
    h->seq++;
    *handle_p = h;
    return EEP_OK;
fail:
    eep_ep_handle_destroy(created);
    return status;
}

eep_status_t eep_combine(eep_runtime_t *rt, const void *y, const eep_ep_handle_t *handle, void *out,
                         void *stream)
{
    const eep_cuda_sym_t *cu = NULL;
    struct eep_ep_state  *st = NULL;
    eep_ep_world_t        world;
    eep_epk_params_t      p;
    eep_jit_kernel_t     *kernel;
    eep_status_t          status;

    if (rt == NULL) {
        eep_error(EEP_SUBSYS_KERNEL, "combine: invalid argument rt: NULL runtime");
        return EEP_ERR_INVALID_ARG;
    }
    eep_ep_world_of(rt, &world);
    status = eep_ep_combine_args_check(y, handle, out, &world);
    if (status != EEP_OK) {
        return status;
    }
    if ((status = eep_ep_prepare(rt, &handle->shape, &cu, &st, &p)) != EEP_OK) {
        return status;
    }
    p.num_tokens = handle->num_tokens;
    p.trace      = st->trace[1];
    p.y          = (uintptr_t)y;
    p.out        = (uintptr_t)out;
    eep_ep_params_handle(&p, handle);
    if ((status = eep_ep_kernel(rt, st, 1, 0, 0, 0, &handle->shape, &kernel)) != EEP_OK) {
        return status;
    }
    return eep_jit_launch_ex(kernel, (unsigned)(handle->num_sms + handle->copy_sms),
                             EEP_EPK_THREADS, 0, stream, &p, sizeof(p), st->launch_flags);
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
