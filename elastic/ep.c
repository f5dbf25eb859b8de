/*
 * ep.c - eep_dispatch / eep_combine entry points.
 *
 * Placeholder until the runtime (window, fault page, epoch) and the dispatch/combine kernels land:
 * both calls refuse with EEP_ERR_UNSUPPORTED and say so, so that programs linking them (eep-bench)
 * build today.  The real flow, documented in docs/dispatch.md, is: world = the runtime's {rank,
 * world, epoch}; eep_ep_dispatch_args_check(); pick num_sms (args, EEP_EP_NUM_SMS, the model);
 * JIT-select the kernel for (world, hidden, K, dtype, SMs, mode); launch; CPU_SYNC: wait for the
 * counts in the host-mapped mirror (bounded, abortable), eep_ep_capacity_check(), launch the copy.
 */
#include "eep/ep.h"

#include "elastic/log.h"

eep_status_t eep_dispatch(eep_runtime_t *rt, const eep_dispatch_args_t *args,
                          eep_ep_handle_t **handle_p, void *stream)
{
    (void)args;
    (void)handle_p;
    (void)stream;
    if (rt == NULL) {
        eep_error(EEP_SUBSYS_KERNEL, "dispatch: invalid argument rt: NULL runtime");
        return EEP_ERR_INVALID_ARG;
    }
    eep_error(EEP_SUBSYS_KERNEL, "dispatch: not available yet in this build (kernels pending)");
    return EEP_ERR_UNSUPPORTED;
}

eep_status_t eep_combine(eep_runtime_t *rt, const void *y, const eep_ep_handle_t *handle,
                         void *out, void *stream)
{
    (void)y;
    (void)handle;
    (void)out;
    (void)stream;
    if (rt == NULL) {
        eep_error(EEP_SUBSYS_KERNEL, "combine: invalid argument rt: NULL runtime");
        return EEP_ERR_INVALID_ARG;
    }
    eep_error(EEP_SUBSYS_KERNEL, "combine: not available yet in this build (kernels pending)");
    return EEP_ERR_UNSUPPORTED;
}
