/*
 * ep_args.h - host-side checks of dispatch/combine arguments (private to elastic/ep_*).
 *
 * Everything the host can know is checked here, before any launch, and reported once with the
 * argument's name.  Expert ids are only read by the device: an id outside [-1, num_experts) or
 * repeated within one token is flagged by the dispatch kernel into the runtime's fault page with
 * the offending token (docs/dispatch.md, "Bad input"), never here.
 */
#ifndef EEP_EP_ARGS_H
#define EEP_EP_ARGS_H

#include <stdint.h>

#include "eep/ep.h"
#include "elastic/ep/ep_layout.h"

/* What the calling runtime is, as far as argument checks care. */
typedef struct {
    const void *runtime; /* identity (the eep_runtime_t pointer) */
    uint64_t    epoch;   /* current membership epoch */
    int         rank;
    int         world;
    /* The runtime's expert placement for calls of place_experts experts (its view's; checked when
       the runtime took it), with place_local_max the most experts it puts on one rank; calls of
       another expert count, or placement NULL: the default policy (eep/ep.h). */
    int                       place_experts;
    int                       place_local_max;
    const eep_expert_place_t *placement;
    /* Degraded mode: the ranks the runtime knows dead (bit r; never this rank's own). */
    uint32_t dead_mask;
} eep_ep_world_t;

/** The placement of a call of @p num_experts experts on @p world into @p shape (placement and
    local_max; the default unless the runtime's placement is for that count). */
void eep_ep_world_place(const eep_ep_world_t *world, int num_experts, eep_ep_shape_t *shape);

/**
 * Check a dispatch call.
 * @param [in] args    as given to eep_dispatch.
 * @param [in] world   the calling runtime.
 * @param [in] handle  *handle_p as given (may be NULL; required in CACHED mode).
 * @param [out] shape_p  the call's shape, filled on success (may be NULL).
 * @return EEP_OK; EEP_ERR_INVALID_ARG naming the argument; EEP_ERR_STALE_EPOCH for a cached
 *         dispatch on a handle of an older epoch.  The reason is logged (EEP_SUBSYS_KERNEL).
 */
eep_status_t eep_ep_dispatch_args_check(const eep_dispatch_args_t *args,
                                        const eep_ep_world_t *world, const eep_ep_handle_t *handle,
                                        eep_ep_shape_t *shape_p);

/**
 * Check a combine call (y, handle, out as given to eep_combine).
 * @return EEP_OK, EEP_ERR_INVALID_ARG or EEP_ERR_STALE_EPOCH, logged.
 */
eep_status_t eep_ep_combine_args_check(const void *y, const eep_ep_handle_t *handle,
                                       const void *out, const eep_ep_world_t *world);

/**
 * Check that @p handle is alive, was made by @p world's runtime and in its current epoch.
 * @param [in] what  the caller, for the message ("combine").
 */
eep_status_t eep_ep_handle_check(const eep_ep_handle_t *handle, const eep_ep_world_t *world,
                                 const char *what);

/**
 * The dead ranks of a dispatch (degraded mode, eep/ep.h): the runtime's and args->dead_mask
 * (fourth version of the struct; 0 before).  Checked by eep_ep_dispatch_args_check.
 */
uint32_t eep_ep_args_dead_mask(const eep_dispatch_args_t *args, const eep_ep_world_t *world);

/**
 * Degraded mode, the dead set @p dead as the kernels use it (kernels/ep/ep_params.h): drop, the
 * ranks rank @p rank cannot reach, and mute, the sources that cannot reach it.  Both are @p dead
 * unless @p lsa_size > 1 (hybrid mode with forwarding, nodes of lsa_size GPUs, ranks
 * node-major): then a token of rank s crosses to another node at that node's rank with s's local
 * index (its forwarder; the combine's partials return the same way), so a dead forwarder also
 * cuts every rank of its node off for its rail peers, both ways.  Ranks past 31 are ignored.
 */
void eep_ep_reach_masks(int world, int rank, int lsa_size, uint32_t dead, uint32_t *drop_p,
                        uint32_t *mute_p);

/** The call's output layout (expert-major for callers whose struct predates the field). */
eep_ep_layout_t eep_ep_args_layout(const eep_dispatch_args_t *args);

/** The most rows a dispatch of @p shape can receive in @p layout (the outputs' worst case). */
int64_t eep_ep_layout_rows_max(const eep_ep_shape_t *shape, eep_ep_layout_t layout);

/**
 * CPU_SYNC, once the exact row count is known: check that the caller's buffers hold it.
 * @return EEP_OK or EEP_ERR_INVALID_ARG naming recv_capacity.
 */
eep_status_t eep_ep_capacity_check(const eep_dispatch_args_t *args, int64_t rows);

#endif /* EEP_EP_ARGS_H */
