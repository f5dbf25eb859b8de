/*
 * ep_state.h - the dispatch/combine state of a runtime (rt->ep, private to elastic/ep/): its
 * settings and SM share, the count mirror and scratch, the mode (direct or hybrid) and GIN
 * parameters, the placement tables and the kernel table; made at the first call (ep_state.c).
 */
#ifndef EEP_EP_STATE_H
#define EEP_EP_STATE_H

#include <stdint.h>

#include "eep/ep.h"
#include "elastic/ep/ep_handle.h"
#include "elastic/ep/ep_knobs.h"
#include "elastic/ep/ep_layout.h"
#include "elastic/gpu/cuda_sym.h"
#include "elastic/jit/jit.h"
#include "kernels/ep/ep_params.h"

#ifdef __cplusplus
extern "C" {
#endif

/* The kernel table: its entries, and the length of a key. */
#define EEP_EP_KERNEL_SLOTS       64
#define EEP_EP_KERNEL_KEY         64
#define EEP_EP_CHUNK_TOTALS_BYTES ((size_t)EEP_EPK_MAX_SEND_BLOCKS * EEP_EPK_MAX_COUNTERS * 4)
/* the dispatch scratch: the chunk totals, then two words a block (eep_epk_params_t chunk_flags) */
#define EEP_EP_CHUNK_SCRATCH_BYTES                                                                 \
    (EEP_EP_CHUNK_TOTALS_BYTES + (size_t)EEP_EPK_MAX_SEND_BLOCKS * 16)
#define EEP_EP_PLACE_SLOTS 8 /* expert counts with a placement table at once */

typedef struct {
    char              key[EEP_EP_KERNEL_KEY];
    eep_jit_kernel_t *kernel;
} eep_ep_kernel_slot_t;

/* A placement's device table (eep_epk_params_t.place) for one expert count, as the runtime's
   placement was in one membership epoch. */
typedef struct {
    int      num_experts; /* 0: free */
    uint64_t epoch;
    uint64_t dev; /* u32 [num_experts] */
} eep_ep_place_slot_t;

/* The pinned mirror: the counts (u64[EEP_EP_MAX_LOCAL_EXPERTS + 2], CPU_SYNC), then a ring of
   EEP_EP_ROWS_RING words where one-rank NO_CPU_SYNC dispatches leave their received rows
   (tag << 32 | rows, eep_ep_solo_rows_known), so that a cached call on their handle knows them. */
#define EEP_EP_ROWS_RING      64
#define EEP_EP_MIRROR_WORDS   (EEP_EP_MAX_LOCAL_EXPERTS + 2 + EEP_EP_ROWS_RING)
#define EEP_EP_ROWS_SLOT(tag) (EEP_EP_MAX_LOCAL_EXPERTS + 2 + (tag) % EEP_EP_ROWS_RING)

struct eep_ep_state {
    eep_ep_config_t      cfg;
    int                  whole_sms;    /* the device's */
    int                  device_sms;   /* this rank's share of them (eep_ep_shared_sms) */
    int                  pdl_capable;  /* EEP_EP_PDL and sm_90+ */
    int                  sharers;      /* processes on this GPU at the last view (gpu_share.h) */
    unsigned             launch_flags; /* EEP_JIT_LAUNCH_PDL where capable and not shared */
    volatile uint64_t   *mirror;       /* pinned, host-mapped: u64[EEP_EP_MIRROR_WORDS] */
    uint64_t             mirror_dev;
    uint64_t             trace[2]; /* EEP_EP_TRACE: device stamps of dispatch, combine */
    uint64_t             chunk;    /* device scratch: senders' chunk counts, then flags */
    eep_ep_kernel_slot_t kernels[EEP_EP_KERNEL_SLOTS];
    int                  have_env; /* the window's dispatch/combine area is laid out ... */
    eep_ep_envelope_t    env;      /* ... for these shapes (eep_ep_reserve, or the first call) */
    int                  hybrid;   /* 1: hybrid mode (eep_ep_mode_choose) */
    uint64_t             gin_dev;  /* hybrid: device copy of the eep_epk_gin_t */
    int topo_stale; /* a view changed the teams and the dev comm: choose the mode again */
    eep_ep_place_slot_t places[EEP_EP_PLACE_SLOTS];
    /* one rank's side stream (ep_solo.c): the copy engine's copy beside the dispatch kernel
       (eep_ep_ce_fork), or a launch beside the copy (eep_ep_solo_beside), and the fork and join
       events, made at their first use */
    CUstream ce_stream;
    CUevent  ce_fork, ce_join;
    /* EEP_EP_TRACE: the host's milliseconds in dispatch calls by part (EEP_EP_HOST_*, summed
       over host_calls calls; eep_ep_host_mark), host_at the last mark */
    double   host_ms[EEP_EP_HOST_PARTS];
    double   host_at;
    uint64_t host_calls;
    uint32_t rows_tag; /* the last NO_CPU_SYNC one-rank call's tag in the rows ring */
};

/* EEP_EP_TRACE: the host's time in this dispatch call since the last mark goes to @p part. */
void eep_ep_host_mark(struct eep_ep_state *st, int part);

/**
 * The runtime's state, made at its first call (and the mode chosen again after a view).
 * @param [out] st_p  the state (rt->ep).
 * @return EEP_OK, or why it cannot be made (the error logged where it was found).
 */
eep_status_t eep_ep_state_get(eep_runtime_t *rt, const eep_cuda_sym_t *cu,
                              struct eep_ep_state **st_p);

/** The device table of @p shape's uneven placement in the runtime's epoch, made on first use. */
eep_status_t eep_ep_place_dev(const eep_runtime_t *rt, const eep_cuda_sym_t *cu,
                              struct eep_ep_state *st, const eep_ep_shape_t *shape,
                              unsigned long long *dev_p);

/** A kernel (@p combine: EEP_EP_KERNEL_*) for @p shape, from the per-runtime table or the JIT. */
eep_status_t eep_ep_kernel(eep_runtime_t *rt, struct eep_ep_state *st, int combine, int idx_bits,
                           int mode, int phase, const eep_ep_shape_t *shape, void *stream,
                           eep_jit_kernel_t **kernel_p);

#ifdef __cplusplus
}
#endif

#endif /* EEP_EP_STATE_H */
