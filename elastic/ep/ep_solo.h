/*
 * ep_solo.h - dispatch at one rank: the copy engine's share of a rank-major dispatch, and the
 * path without records (kernels/ep/dispatch_solo.cuh), for elastic/ep/ep.c.
 */
#ifndef EEP_EP_SOLO_H
#define EEP_EP_SOLO_H

#include <stddef.h>
#include <stdint.h>

#include "eep/ep.h"
#include "elastic/ep/ep_layout.h"
#include "elastic/ep/ep_state.h"
#include "elastic/gpu/cuda_sym.h"
#include "kernels/ep/ep_params.h"

/* One rank, rank-major, CPU_SYNC, the general kernel: the copy engine wanted for x of @p hb
   bytes a row within @p budget SMs (0: none), @p overlapped beside the kernel or after the counts
   (ep_solo.c says where each won). */
int eep_ep_ce_wanted(const struct eep_ep_state *st, const eep_ep_shape_t *shape,
                     const eep_dispatch_args_t *a, size_t hb, int budget, int overlapped);

/* x (and scales) -> recv_x on the state's stream, beside what the caller's @p stream runs next
   (@p owed: 1 once something was enqueued there, which eep_ep_ce_join must then wait for). */
eep_status_t eep_ep_ce_fork(const eep_cuda_sym_t *cu, struct eep_ep_state *st,
                            const eep_epk_params_t *p, size_t T, size_t hb, size_t sb, void *stream,
                            int *owed);
eep_status_t eep_ep_ce_join(const eep_cuda_sym_t *cu, struct eep_ep_state *st, void *stream,
                            int *owed);

/* The serial way, once the counts are known (every token received): sets p->ce_copied. */
eep_status_t eep_ep_copy_engine(const eep_cuda_sym_t *cu, const struct eep_ep_state *st,
                                const eep_ep_shape_t *shape, const eep_dispatch_args_t *a,
                                int64_t rows, size_t hb, size_t sb, int budget, void *stream,
                                eep_epk_params_t *p);

/* The path without records applies: one rank, rank-major, direct mode, EEP_EP_SOLO 1. */
int eep_ep_solo_wanted(const struct eep_ep_state *st, const eep_ep_shape_t *shape,
                       const eep_dispatch_args_t *a);

/*
 * The call's launches on that path, @p p filled as for the general kernel (the handle's arrays
 * included), within @p budget SMs (0: the device).  @p h: the handle (CACHED: its layout).
 * @p [out] rows_p: the rows as eep_dispatch reports them; @p owed as eep_ep_ce_fork's (the
 * caller joins on failure).
 */
eep_status_t eep_ep_solo_dispatch(eep_runtime_t *rt, struct eep_ep_state *st,
                                  const eep_cuda_sym_t *cu, const eep_ep_shape_t *shape,
                                  const eep_dispatch_args_t *a, const eep_ep_handle_t *h,
                                  int idx_bits, int budget, size_t hb, size_t sb, void *stream,
                                  eep_epk_params_t *p, int64_t *rows_p, int *owed);

/* CPU_SYNC, from ep.c (both paths): wait for the launched kernel's counts, give them to the
   caller, and the outputs for that many rows (@p [out] rows_p). */
eep_status_t eep_ep_take_counts(eep_runtime_t *rt, struct eep_ep_state *st,
                                const eep_dispatch_args_t *a, int El, size_t hb, size_t sb,
                                eep_epk_params_t *p, int64_t *rows_p);

#endif
