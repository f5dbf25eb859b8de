/*
 * ep.c - eep_dispatch / eep_combine entry points.
 *
 * Today: every host-side check runs against the calling runtime, then the calls refuse with
 * EEP_ERR_UNSUPPORTED because the dispatch/combine kernels are not written yet.  Programs that
 * call them (eep-bench) build and run now, and bad arguments already get the final errors.
 *
 * The flow still to be written (docs/dispatch.md): num_sms = eep_ep_pick_sms(call, knob, model);
 * JIT-select the kernel for (world, hidden, K, dtype, SMs, mode, index width); fill its
 * parameters from eep_ep_buffer_sizes() and the runtime's window; launch on @p stream;
 * CPU_SYNC: poll the host-mapped count mirror (bounded, abortable), eep_ep_capacity_check(),
 * alloc hook, launch the copy; fill the handle (ep_handle.h).
 */
#include "eep/ep.h"

#include "elastic/ep_args.h"
#include "elastic/log.h"
#include "elastic/runtime.h"

/* The runtime as the argument checks see it.  The membership epoch is 0 until the runtime
   tracks views (then: the epoch of the view it was built from). */
static void eep_ep_world_of(const eep_runtime_t *rt, eep_ep_world_t *world)
{
    world->runtime = rt;
    world->epoch   = 0;
    world->rank    = rt->rank;
    world->world   = rt->nranks;
}

eep_status_t eep_dispatch(eep_runtime_t *rt, const eep_dispatch_args_t *args,
                          eep_ep_handle_t **handle_p, void *stream)
{
    eep_ep_world_t world;
    eep_ep_shape_t shape;
    eep_status_t   status;

    (void)stream;
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
    eep_error(EEP_SUBSYS_KERNEL, "dispatch: not available yet in this build (kernels pending)");
    return EEP_ERR_UNSUPPORTED;
}

eep_status_t eep_combine(eep_runtime_t *rt, const void *y, const eep_ep_handle_t *handle,
                         void *out, void *stream)
{
    eep_ep_world_t world;
    eep_status_t   status;

    (void)stream;
    if (rt == NULL) {
        eep_error(EEP_SUBSYS_KERNEL, "combine: invalid argument rt: NULL runtime");
        return EEP_ERR_INVALID_ARG;
    }
    eep_ep_world_of(rt, &world);
    status = eep_ep_combine_args_check(y, handle, out, &world);
    if (status != EEP_OK) {
        return status;
    }
    eep_error(EEP_SUBSYS_KERNEL, "combine: not available yet in this build (kernels pending)");
    return EEP_ERR_UNSUPPORTED;
}
