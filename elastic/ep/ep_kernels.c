/*
 * ep_kernels.c - the JIT specs of the dispatch/combine kernels (kernels/ep/) for a shape, and the
 * prefetch of the variant a survivor of a lost rank will ask for.
 */
#include "elastic/ep/ep_kernels.h"

#include <stdio.h>
#include <string.h>

#include "kernels/ep/ep_params.h"

void eep_ep_kernel_spec_mode(int combine, int idx_bits, int mode, int phase, int hybrid,
                             const eep_ep_shape_t *shape, eep_ep_kernel_names_t *names,
                             eep_jit_spec_t *spec_p)
{
    snprintf(names->targs, sizeof(names->targs), "%d, %d, %d", idx_bits, mode, phase);
    /* unit #defines, not -D flags: NVRTC's precompiled headers need one command line */
    snprintf(names->defines, sizeof(names->defines),
             "EEP_EPK_FIXED_K=%d EEP_EPK_FIXED_W=%d "
             "EEP_EPK_FIXED_H=%d EEP_EPK_FIXED_HB=%zu EEP_EPK_FIXED_LINES=%d%s%s",
             shape->num_topk, shape->world, shape->hidden,
             (size_t)shape->hidden * eep_ep_elem_bytes(shape->dtype), eep_ep_lines(shape),
             hybrid ? " EEP_EPK_GIN=1" : "",
             combine == EEP_EP_KERNEL_COMBINE && mode == EEP_EP_COMBINE_ONE_ROW
                 ? " EEP_EPK_ONE_ROW=1"
                 : "");
    memset(spec_p, 0, sizeof(*spec_p));
    spec_p->size          = sizeof(*spec_p);
    spec_p->header        = combine ? "kernels/ep/combine.cuh" : "kernels/ep/dispatch.cuh";
    spec_p->function      = combine == EEP_EP_KERNEL_TOPK_GRAD ? "eep_ep_combine_topk_grad_body"
                            : combine                          ? "eep_ep_combine_body"
                                                               : "eep_ep_dispatch_body";
    spec_p->template_args = combine ? NULL : names->targs;
    spec_p->defines       = names->defines;
    spec_p->param_type    = "eep_epk_params_t";
    spec_p->launch_bounds = EEP_EPK_THREADS;
    spec_p->backend       = EEP_JIT_BACKEND_AUTO;
    spec_p->needs_gin     = hybrid ? 1 : 0; /* NCCL 2.28.9's GIN headers: nvcc only */
}

void eep_ep_kernel_spec(int combine, int idx_bits, int mode, int phase, const eep_ep_shape_t *shape,
                        eep_ep_kernel_names_t *names, eep_jit_spec_t *spec_p)
{
    eep_ep_kernel_spec_mode(combine, idx_bits, mode, phase, 0, shape, names, spec_p);
}

eep_status_t eep_ep_prefetch_shrink_mode(eep_jit_t *jit, int combine, int idx_bits, int mode,
                                         int phase, int hybrid, const eep_ep_shape_t *shape)
{
    eep_ep_shape_t        smaller = *shape;
    eep_ep_kernel_names_t names;
    eep_jit_spec_t        spec;

    if (shape->world <= 1) {
        return EEP_OK;
    }
    smaller.world--;
    eep_ep_kernel_spec_mode(combine, idx_bits, mode, phase, hybrid, &smaller, &names, &spec);
    return eep_jit_prefetch(jit, &spec);
}

eep_status_t eep_ep_prefetch_grow_mode(eep_jit_t *jit, int combine, int idx_bits, int mode,
                                       int phase, int hybrid, const eep_ep_shape_t *shape)
{
    eep_ep_shape_t        larger = *shape;
    eep_ep_kernel_names_t names;
    eep_jit_spec_t        spec;

    if (shape->world >= EEP_EPK_MAX_WORLD) {
        return EEP_OK;
    }
    larger.world++;
    eep_ep_kernel_spec_mode(combine, idx_bits, mode, phase, hybrid, &larger, &names, &spec);
    return eep_jit_prefetch(jit, &spec);
}

eep_status_t eep_ep_prefetch_grow(eep_jit_t *jit, int combine, int idx_bits, int mode, int phase,
                                  const eep_ep_shape_t *shape)
{
    return eep_ep_prefetch_grow_mode(jit, combine, idx_bits, mode, phase, 0, shape);
}

eep_status_t eep_ep_prefetch_shrink(eep_jit_t *jit, int combine, int idx_bits, int mode, int phase,
                                    const eep_ep_shape_t *shape)
{
    return eep_ep_prefetch_shrink_mode(jit, combine, idx_bits, mode, phase, 0, shape);
}
