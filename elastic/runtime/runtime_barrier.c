/*
 * runtime_barrier.c - eep_barrier: pick the barrier kernel variant and launch it.
 *
 * The kernel is barrier/barrier_kernel.cuh's eep_barrier_body<Mode, Gin>, JIT-compiled once per
 * runtime and mode (NVRTC for LSA-only variants, nvcc for GIN ones) and kept in the runtime.  A
 * call is one launch with no host work besides it: the counters the kernel uses only grow.  If
 * the abort flag is already up, nothing is launched and the pending fault is returned.
 */
#include <stdio.h>
#include <string.h>

#include "elastic/gpu/cuda_sym.h"
#include "util/log.h"
#include "elastic/runtime/runtime.h"

void eep_barrier_params_fill(const eep_runtime_t *rt, const eep_barrier_opts_t *opts,
                             eep_barrier_params_t *p)
{
    int timeout_ms = opts->timeout_ms > 0 ? opts->timeout_ms : rt->timeout_ms;

    memset(p, 0, sizeof(*p));
    memcpy(&p->devcomm, &rt->devcomm, sizeof(p->devcomm));
    p->window         = rt->window;
    p->fault          = (eep_fault_page_t *)(uintptr_t)rt->fault_dev;
    p->fault_claim    = (unsigned int *)((char *)rt->buf + rt->layout.counters_off);
    p->lsa_arrive_off = rt->layout.lsa_arrive_off;
    p->gin_epoch_off  = rt->layout.gin_epoch_off;
    p->timeout_ns     = (unsigned long long)timeout_ms * 1000000ull;
    p->delay_ns       = opts->delay_ns;
    p->stamps         = (unsigned long long *)opts->stamps;
    p->cycles         = (unsigned long long *)opts->cycles;
    p->iterations     = opts->iterations > 0 ? opts->iterations : 1;
    p->gin_signal0    = rt->gin_signal0;
    p->wait_stats     = (unsigned long long *)(uintptr_t)rt->wait_stats_dev;
}

static eep_status_t eep_barrier_kernel(eep_runtime_t *rt, eep_barrier_mode_t mode, void *stream,
                                       eep_jit_kernel_t **kernel_p)
{
    eep_jit_spec_t spec;
    eep_status_t   status;
    char           args[32];

    if (rt->barrier_kernels[mode] != NULL) {
        *kernel_p = rt->barrier_kernels[mode];
        return EEP_OK;
    }
    snprintf(args, sizeof(args), "%d, %s", mode == EEP_BARRIER_SEQUENTIAL ? 1 : 0,
             rt->gin ? "true" : "false");
    memset(&spec, 0, sizeof(spec));
    spec.size          = sizeof(spec);
    spec.header        = "barrier/barrier_kernel.cuh";
    spec.function      = "eep_barrier_body";
    spec.template_args = args;
    spec.param_type    = "eep_barrier_params_t";
    spec.launch_bounds = EEP_BARRIER_MAX_THREADS;
    spec.needs_gin     = rt->gin;
    spec.backend       = EEP_JIT_BACKEND_AUTO;
    spec.defines       = rt->gin ? "EEP_BARRIER_GIN=1" : NULL;
    status = eep_jit_get_kernel_on(rt->jit, &spec, stream, &rt->barrier_kernels[mode]); /* jit.h */
    if (status != EEP_OK) {
        eep_error(EEP_SUBSYS_BARRIER, "cannot build the %s barrier kernel",
                  mode == EEP_BARRIER_SEQUENTIAL ? "sequential" : "parallel");
        return status;
    }
    *kernel_p = rt->barrier_kernels[mode];
    return EEP_OK;
}

eep_status_t eep_barrier_ex(eep_runtime_t *rt, const eep_barrier_opts_t *opts, void *stream)
{
    eep_barrier_params_t p;
    eep_barrier_opts_t   o;
    eep_jit_kernel_t    *kernel;
    eep_status_t         status;
    unsigned             grid, block, peers;

    if (rt == NULL || opts == NULL) {
        eep_error(EEP_SUBSYS_BARRIER, "eep_barrier_ex: rt and opts must not be NULL");
        return EEP_ERR_INVALID_ARG;
    }
    if (opts->size == 0 || opts->size > sizeof(o)) {
        eep_error(EEP_SUBSYS_BARRIER,
                  "eep_barrier_opts_t.size %zu is not a size this library "
                  "knows (%zu)",
                  opts->size, sizeof(o));
        return EEP_ERR_INVALID_ARG;
    }
    memset(&o, 0, sizeof(o));
    memcpy(&o, opts, opts->size);
    if (o.mode != EEP_BARRIER_PARALLEL && o.mode != EEP_BARRIER_SEQUENTIAL) {
        eep_error(EEP_SUBSYS_BARRIER,
                  "barrier mode %d is neither EEP_BARRIER_PARALLEL nor "
                  "EEP_BARRIER_SEQUENTIAL",
                  (int)o.mode);
        return EEP_ERR_INVALID_ARG;
    }
    if (o.timeout_ms < 0) {
        eep_error(EEP_SUBSYS_BARRIER, "barrier timeout_ms %d is negative", o.timeout_ms);
        return EEP_ERR_INVALID_ARG;
    }
    /* A raised abort flag: report it instead of launching a kernel that would leave at once. */
    if (__atomic_load_n(&rt->fault_host->abort_flag, __ATOMIC_ACQUIRE) != EEP_ABORT_NONE) {
        return eep_poll(rt);
    }
    status = eep_barrier_kernel(rt, o.mode, stream, &kernel);
    if (status != EEP_OK) {
        return status;
    }
    eep_barrier_params_fill(rt, &o, &p);
    peers = (unsigned)(rt->lsa_size > rt->rail_size ? rt->lsa_size : rt->rail_size);
    block = (peers + 31) / 32 * 32;
    if (block > EEP_BARRIER_MAX_THREADS) {
        block = EEP_BARRIER_MAX_THREADS;
    }
    grid = (o.mode == EEP_BARRIER_PARALLEL && rt->gin) ? 2 : 1;
    rt->n_barrier++;
    return eep_jit_launch(kernel, grid, block, 0, stream, &p, sizeof(p));
}

eep_status_t eep_barrier(eep_runtime_t *rt, eep_barrier_mode_t mode, void *stream)
{
    eep_barrier_opts_t o;

    memset(&o, 0, sizeof(o));
    o.size = sizeof(o);
    o.mode = mode;
    return eep_barrier_ex(rt, &o, stream);
}
