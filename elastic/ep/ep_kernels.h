/*
 * ep_kernels.h - which JIT kernel a dispatch or combine of a shape runs: its spec (template
 * arguments, the shape compiled in), and the background compile of the variant for one rank fewer.
 */
#ifndef EEP_EP_KERNELS_H
#define EEP_EP_KERNELS_H

#include "elastic/ep/ep_layout.h"
#include "elastic/jit/jit.h"

#ifdef __cplusplus
extern "C" {
#endif

/* The strings an eep_ep_kernel_spec() points into. */
typedef struct {
    char targs[32];
    char defines[192];
} eep_ep_kernel_names_t;

/* The kernel families (the @p combine argument below). */
#define EEP_EP_KERNEL_DISPATCH  0 /* eep_ep_dispatch_body<idx_bits, mode, phase> */
#define EEP_EP_KERNEL_COMBINE   1 /* eep_ep_combine_body */
#define EEP_EP_KERNEL_TOPK_GRAD 2 /* eep_ep_combine_topk_grad_body (issue 26) */
/* The combine's @p mode: the one-row path compiled in (kernels/ep/combine.cuh eep_epc_one_row). */
#define EEP_EP_COMBINE_ONE_ROW  1

/**
 * The JIT spec of the dispatch kernel (@p combine 0: eep_ep_dispatch_body<idx_bits, mode, phase>)
 * or of a combine kernel (1: the combine, 2: its top-k weight gradients) for @p shape: its top-k,
 * ranks, hidden size and element size compiled in as spec defines (EEP_EPK_FIXED_*).  For the
 * combine (1), @p mode EEP_EP_COMBINE_ONE_ROW compiles in the one-row path (EEP_EPK_ONE_ROW=1:
 * rank-major handles and unweighted combines), which, compiled in, slowed the expert-major
 * weighted combine by 12-14 % without being taken (bench/RESULTS.md).  The one source of both the kernels a call launches and
 * those prefetched for one rank fewer, so that their cache keys agree.  @p spec_p points into
 * @p names.
 */
void eep_ep_kernel_spec(int combine, int idx_bits, int mode, int phase, const eep_ep_shape_t *shape,
                        eep_ep_kernel_names_t *names, eep_jit_spec_t *spec_p);

/**
 * eep_ep_kernel_spec for the hybrid variants too (@p hybrid 1: EEP_EPK_GIN=1, which needs GIN's
 * headers and so nvcc, spec.needs_gin; kernels/ep/ep_gin.cuh).  A different variant, a different
 * cache key.
 */
void eep_ep_kernel_spec_mode(int combine, int idx_bits, int mode, int phase, int hybrid,
                             const eep_ep_shape_t *shape, eep_ep_kernel_names_t *names,
                             eep_jit_spec_t *spec_p);

/** eep_ep_prefetch_shrink of the variant eep_ep_kernel_spec_mode(@p hybrid) names. */
eep_status_t eep_ep_prefetch_shrink_mode(eep_jit_t *jit, int combine, int idx_bits, int mode,
                                         int phase, int hybrid, const eep_ep_shape_t *shape);

/**
 * Queue the background compile (eep_jit_prefetch) of the same kernel for one rank fewer than
 * @p shape has, as a survivor will ask for it after a rank is lost; nothing for one rank.
 * @return as eep_jit_prefetch (its outcome is the JIT's to log); EEP_OK for one rank.
 */
eep_status_t eep_ep_prefetch_shrink(eep_jit_t *jit, int combine, int idx_bits, int mode, int phase,
                                    const eep_ep_shape_t *shape);

/** eep_ep_prefetch_grow of the variant eep_ep_kernel_spec_mode(@p hybrid) names. */
eep_status_t eep_ep_prefetch_grow_mode(eep_jit_t *jit, int combine, int idx_bits, int mode,
                                       int phase, int hybrid, const eep_ep_shape_t *shape);

/** The same for one rank more (a newcomer's view grows the group back); EEP_OK at the limit. */
eep_status_t eep_ep_prefetch_grow(eep_jit_t *jit, int combine, int idx_bits, int mode, int phase,
                                  const eep_ep_shape_t *shape);

#ifdef __cplusplus
}
#endif

#endif /* EEP_EP_KERNELS_H */
