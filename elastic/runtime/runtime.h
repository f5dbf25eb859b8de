/*
 * runtime.h - the internals of eep_runtime_t, shared by runtime.c (C: GPU, fault page, lifecycle,
 * polling), runtime_nccl.cc (the one C++ file: communicator, window, device communicator) and
 * runtime_barrier.c (eep_barrier), plus the workspace layout arithmetic.
 */
#ifndef EEP_RUNTIME_H
#define EEP_RUNTIME_H

#include <stddef.h>
#include <stdint.h>

#include "barrier/barrier_params.h"
#include "eep/eep.h"
#include "elastic/jit/jit.h"
#include "elastic/runtime/runtime_knobs.h"
#include "elastic/runtime/runtime_view.h"

#ifdef __cplusplus
extern "C" {
#endif

/* Where the workspace regions sit in the window (byte offsets from its start). */
typedef struct {
    size_t lsa_arrive_off; /* u64[EEP_MAX_LSA_RANKS]: arrive[j] = barriers LSA peer j entered */
    size_t gin_epoch_off;  /* u64: barriers this rank entered on the scale-out (GIN) side */
    size_t counters_off;   /* u64[EEP_WS_COUNTERS]: monotonic counters; [0] claims fault slots */
    size_t peer_slots_off; /* nranks slots of peer_slot_bytes: per-peer exchange (counts) */
    size_t peer_slot_bytes;
    size_t data_off; /* first byte after the workspace: token buffers */
    size_t window_bytes;
} eep_workspace_layout_t;

#define EEP_WS_PEER_SLOT_BYTES 256

/**
 * Lay out the workspace for @p nranks ranks in a window of @p window_bytes.
 * @return EEP_OK; EEP_ERR_INVALID_ARG (nranks outside [1, EEP_MAX_RANKS], lsa_size outside
 *         [1, EEP_MAX_LSA_RANKS] or not dividing nranks) or EEP_ERR_NO_RESOURCE (window too small).
 */
eep_status_t eep_workspace_layout(int nranks, int lsa_size, size_t window_bytes,
                                  eep_workspace_layout_t *layout_p);

/* The GIN resources a device communicator reserves: the scale-out barrier's signals (ids 0 ..
   rail - 1), then the hybrid dispatch/combine's (EEP_EPK_GIN_SIGNALS(nranks)) and its counters.
   The same for the runtime's first communicator and for every view's: a view's dev comm that
   reserved fewer would let hybrid kernels signal past its range. */
typedef struct {
    int signals, counters;   /* ncclDevCommRequirements' ginSignalCount, ginCounterCount */
    int ep_signal0, ep_ctr0; /* the EP's first signal and counter; -1 without GIN */
} eep_gin_reqs_t;

/** The reservations of a communicator of @p nranks in rail teams of @p rail_size, @p gin on. */
void eep_gin_reqs(int nranks, int rail_size, int gin, eep_gin_reqs_t *reqs_p);

typedef struct eep_runtime_nccl eep_runtime_nccl_t; /* runtime_nccl.cc */

/* What a part made on top of a runtime gives back when the runtime is destroyed (STYLE habit 5:
   the root keeps a destructor list, so the runtime names none of the parts). */
typedef void (*eep_runtime_dtor_func_t)(eep_runtime_t *rt, void *arg);

#define EEP_RUNTIME_MAX_DTORS 8

struct eep_runtime {
    eep_runtime_config_t  cfg;
    int                   rank, nranks;
    int                   lsa_rank, lsa_size, rail_rank, rail_size;
    int                   device;
    int                   gin, gin_probed;
    int                   timeout_ms;
    int                   timeout_ms_created; /* eep_runtime_set_timeout(rt, 0) restores it */
    uint64_t              epoch;              /* membership epoch (eep_runtime_epoch) */
    int                   fault_seen;         /* a fault was reported: abort the comm on destroy */
    void                 *cu_ctx;             /* CUcontext: the device's primary context */
    int                   cu_dev;             /* CUdevice */
    struct eep_gpu_share *gpu_share;          /* this runtime's entry (gpu_share.h), or NULL */
    int                   gpu_mps;            /* the GPU's contexts run at once (MPS) */
    eep_fault_page_t     *fault_host;         /* pinned, device-mapped */
    uint64_t              fault_dev;          /* its device address */
    /* statistics (runtime_stats.c): the kernels' wait ns, u64 [EEP_WAIT_STAT_PHASES][EEP_MAX_RANKS]
       in device memory, read through a pinned copy on a stream of our own */
    uint64_t            wait_stats_dev;
    void               *wait_stats_host, *stats_stream;
    uint64_t            n_dispatch, n_combine, n_barrier, dispatch_bytes, combine_bytes, faults[6];
    eep_runtime_nccl_t *nccl;
    void               *window; /* ncclWindow_t */
    void               *buf;    /* ncclMemAlloc base (local address) */
    size_t              window_bytes;
    eep_devcomm_blob_t  devcomm; /* ncclDevComm */
    int                 gin_signal0;
    int                 ep_gin_signal0, ep_gin_counter0; /* hybrid EP's (-1: no GIN) */
    eep_workspace_layout_t layout;
    eep_jit_t             *jit;
    eep_jit_kernel_t      *barrier_kernels[2]; /* by eep_barrier_mode_t */
    struct eep_ep_state   *ep; /* dispatch/combine state (elastic/ep/ep_state.c), lazily made */
    struct {
        eep_runtime_dtor_func_t func;
        void                   *arg;
    } dtors[EEP_RUNTIME_MAX_DTORS]; /* run last-registered first, before the JIT and comm go */
    int n_dtors;
    struct {
        eep_runtime_dtor_func_t func;
        void                   *arg;
    } view_hooks[EEP_RUNTIME_MAX_DTORS]; /* run after a view brought a new communicator set */
    int n_view_hooks;
    /* ---- a runtime made from membership views (runtime_membership.c); vm NULL: standalone ---- */
    eep_view_machine_t *vm;
    eep_membership_t    membership;
    int                 fenced;      /* no communicator of a current view (abort flag raised) */
    int                 num_experts; /* the current view's placement (0: none) */
    eep_expert_place_t *placement;
    int32_t            *local_experts; /* [num_local]: global ids by slot */
    int                 num_local;
    int                 place_local_max; /* the most experts the placement puts on one rank */
    int                 place_default;   /* 1: it is eep_placement_default's for the view */
    double              last_apply_ms;
    const char         *last_action;
    uint64_t            applying_epoch; /* the view being applied (its waits may abandon it) */
};

/** The wait counters (runtime_stats.c): made with the fault page, freed with it.  @return status. */
eep_status_t eep_runtime_stats_alloc(eep_runtime_t *rt);
void         eep_runtime_stats_free(eep_runtime_t *rt);

/**
 * Register @p func(@p rt, @p arg) to run when @p rt is destroyed, after its kernels finished and
 * before its JIT (kernels) and communicator are released; the latest registered runs first.
 * @return EEP_OK, or EEP_ERR_NO_RESOURCE when the list is full.
 */
eep_status_t eep_runtime_add_dtor(eep_runtime_t *rt, eep_runtime_dtor_func_t func, void *arg);

/**
 * Register @p func(@p rt, @p arg) to run each time a view gave the runtime a new communicator set
 * (new window: every per-window state of a part must be reset, e.g. the EP layout).  No kernel
 * of the runtime runs when it is called.
 * @return EEP_OK, or EEP_ERR_NO_RESOURCE when the list is full.
 */
eep_status_t eep_runtime_add_view_hook(eep_runtime_t *rt, eep_runtime_dtor_func_t func, void *arg);

/* runtime_membership.c: create the communicator from the first view that holds this rank. */
eep_status_t eep_runtime_membership_start(eep_runtime_t *rt, const eep_membership_t *ms,
                                          int join_timeout_ms);
/* Abort the current set (off the critical path) and free the view state. */
void eep_runtime_membership_end(eep_runtime_t *rt);

/* runtime_nccl.cc, the view machine's communicator operations on NCCL (context: the runtime). */
eep_status_t eep_runtime_nccl_view_begin(eep_runtime_t *rt, const eep_view_comm_ops_t **ops_p);
/* Make @p set the runtime's communicator, window and device communicator. */
eep_status_t eep_runtime_nccl_view_adopt(eep_runtime_t *rt, const eep_view_comm_set_t *set,
                                         int rank, int nranks);
/* No communicator (fenced or failed): forget the mirrored handles. */
void eep_runtime_nccl_view_clear(eep_runtime_t *rt);
/* Wait (bounded) for the old sets' background aborts; @return those still running. */
void eep_runtime_nccl_view_drain(eep_runtime_t *rt, int64_t timeout_ms);
int  eep_runtime_nccl_view_pending(eep_runtime_t *rt);

/**
 * Move the runtime to membership epoch @p epoch (a view was applied): handles of older epochs are
 * refused from now on.
 * @return EEP_OK; EEP_ERR_STALE_EPOCH when @p epoch is not newer than the current one (logged,
 *         naming both).
 */
eep_status_t eep_runtime_set_epoch(eep_runtime_t *rt, uint64_t epoch);

/* runtime_nccl.cc: create or adopt the communicator, probe GIN, allocate and register the window,
   create the device communicator; fills rt->{rank..rail_size, gin*, window, buf, devcomm}. */
eep_status_t eep_runtime_nccl_setup(eep_runtime_t *rt, eep_bootstrap_t *bs, void *adopt_comm);
/* Tear down in reverse; aborts the communicator (ours) when @p abort is set. */
void eep_runtime_nccl_teardown(eep_runtime_t *rt, int abort);
/* ncclCommGetAsyncError, translated. */
eep_status_t eep_runtime_nccl_poll(eep_runtime_t *rt);
void        *eep_runtime_nccl_comm_get(const eep_runtime_t *rt);
/* rank, size and CUDA device of an adopted communicator. */
eep_status_t eep_runtime_nccl_comm_info(void *comm, int *rank_p, int *nranks_p, int *device_p);

/* runtime_barrier.c: fill the barrier kernel's parameters (benchmarks reuse it). */
void eep_barrier_params_fill(const eep_runtime_t *rt, const eep_barrier_opts_t *opts,
                             eep_barrier_params_t *p);

#ifdef __cplusplus
}
#endif

#endif /* EEP_RUNTIME_H */
