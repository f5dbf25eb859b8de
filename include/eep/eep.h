/*
 * eep/eep.h - the public API of the ElasticEP data plane (libeep).
 *
 * One eep_runtime_t per rank: it owns the GPU choice, the NCCL communicator (created or adopted),
 * one symmetric window holding the workspace, the NCCL device communicator and a host-mapped fault
 * page.  Every device wait is bounded: a kernel that gives up records {phase, peer, expected,
 * observed} in the fault page, raises the abort flag and exits; eep_poll() turns that into an
 * eep_status_t.  The header needs no CUDA or NCCL header: streams and communicators are void *.
 *
 * Threading: calls on one runtime are serialised by the caller and made with the runtime's GPU
 * context current (eep_runtime_create makes the device's primary context current on its thread).
 */
#ifndef EEP_EEP_H
#define EEP_EEP_H

#include <stddef.h>
#include <stdint.h>

#include "eep/layout.h"
#include "eep/membership.h"
#include "eep/status.h"

#ifdef __cplusplus
extern "C" {
#endif

/* ------------------------------------------------------------------------------------------ */
/* Bootstrap: rank, world size and small all-gathers for standalone use (tests, benchmarks,     */
/* users without the control plane).  Backends: a shared directory, or a TCP rendezvous on      */
/* rank 0; the control plane adds an etcd one.                                                  */

typedef struct eep_bootstrap eep_bootstrap_t;

typedef enum {
    EEP_BOOTSTRAP_ENV = 0, /* from the knobs: EEP_BOOTSTRAP=file:DIR or tcp:HOST:PORT */
    EEP_BOOTSTRAP_FILE,    /* a directory every rank can see, fresh for each job */
    EEP_BOOTSTRAP_TCP,     /* rank 0 listens on address:port, the others connect */
} eep_bootstrap_kind_t;

typedef struct {
    size_t               size; /* sizeof(eep_bootstrap_params_t) */
    eep_bootstrap_kind_t kind;
    int                  rank;       /* -1: EEP_RANK */
    int                  nranks;     /* 0: EEP_WORLD_SIZE */
    const char          *path;       /* FILE: the directory */
    const char          *address;    /* TCP: "host:port" of rank 0 */
    int                  timeout_ms; /* each exchange; 0: EEP_BOOTSTRAP_TIMEOUT_MS */
} eep_bootstrap_params_t;

/**
 * Join the bootstrap group.  TCP: rank 0 listens first; others retry until the timeout.
 * @param [in]  params  see eep_bootstrap_params_t; NULL takes everything from the knobs.
 * @param [out] bs_p    the handle, written on success only.
 * @return EEP_OK; EEP_ERR_INVALID_ARG naming the bad field; EEP_ERR_TIMEOUT when peers are missing.
 */
eep_status_t eep_bootstrap_create(const eep_bootstrap_params_t *params, eep_bootstrap_t **bs_p);

/** Leave the group and free it; NULL is a no-op. */
void eep_bootstrap_destroy(eep_bootstrap_t *bs);

/** @return this rank, and the world size. */
int eep_bootstrap_rank(const eep_bootstrap_t *bs);
int eep_bootstrap_nranks(const eep_bootstrap_t *bs);

/**
 * All-gather @p len bytes from every rank into @p all (nranks * len bytes, in rank order).
 * Collective: every rank calls it the same number of times with the same @p len.
 */
eep_status_t eep_bootstrap_allgather(eep_bootstrap_t *bs, const void *mine, void *all, size_t len);

/** Broadcast @p len bytes of @p buf from @p root.  Collective. */
eep_status_t eep_bootstrap_bcast(eep_bootstrap_t *bs, void *buf, size_t len, int root);

/** Wait until every rank has called it.  Collective. */
eep_status_t eep_bootstrap_barrier(eep_bootstrap_t *bs);

/* ------------------------------------------------------------------------------------------ */
/* Runtime                                                                                      */

#ifndef EEP_RUNTIME_T_DECLARED
#define EEP_RUNTIME_T_DECLARED
typedef struct eep_runtime eep_runtime_t;
#endif

typedef struct {
    size_t           size;         /* sizeof(eep_runtime_params_t) */
    eep_bootstrap_t *bootstrap;    /* gives rank/nranks and carries the NCCL id; may be NULL
                                      when nccl_comm is given */
    void            *nccl_comm;    /* ncclComm_t to adopt (not destroyed by us), or NULL to
                                      create a non-blocking one through the bootstrap */
    int              device;       /* CUDA ordinal; -1: EEP_DEVICE, else rank % visible GPUs */
    size_t           window_bytes; /* symmetric window; 0: EEP_WINDOW_SIZE */
    int              timeout_ms;   /* default device-wait deadline; 0: EEP_TIMEOUT_MS */
    /* ---- since the second version of this struct (older callers' size leaves it 0) ---- */
    uint64_t epoch; /* membership epoch of the view the communicator was built from (0: none,
                       the standalone default); handles carry it (eep_runtime_epoch) */
    /* ---- since the third version ---- */
    /* A membership provider (the control plane's agent): with bootstrap and nccl_comm NULL, the
       runtime waits for the first view that holds this rank (join_timeout_ms) and builds its
       communicator from the unique id that view's root publishes; later views are applied in
       place by eep_membership_sync().  The provider must outlive the runtime. */
    const eep_membership_t *membership;
    int                     join_timeout_ms; /* 0: EEP_INIT_TIMEOUT_MS */
} eep_runtime_params_t;

/* What a runtime found, for tests and tools. */
typedef struct {
    int    rank, nranks;         /* world */
    int    lsa_rank, lsa_size;   /* NVLink (scale-up) team */
    int    rail_rank, rail_size; /* scale-out team: same local index on every node */
    int    device;               /* CUDA ordinal in use */
    int    gin;                  /* GIN is in use (scale-out barrier through GIN signals) */
    int    gin_probed;           /* a GIN probe ran (on a throw-away split) */
    size_t window_bytes;
    size_t workspace_bytes; /* bytes at the start of the window used by the workspace */
    int    timeout_ms;
} eep_runtime_info_t;

/**
 * Create one rank's runtime.  Collective over the bootstrap group (or the adopted communicator):
 * every rank calls it with the same window size.
 * @param [out] rt_p  written on success only.
 * @return EEP_OK; EEP_ERR_NO_DEVICE without a CUDA driver or GPU; EEP_ERR_INVALID_ARG naming the
 *         bad field; EEP_ERR_VERSION_MISMATCH when libnccl differs from the headers; EEP_ERR_NCCL;
 *         EEP_ERR_TIMEOUT when communicator creation did not finish in time (it is aborted).
 */
eep_status_t eep_runtime_create(const eep_runtime_params_t *params, eep_runtime_t **rt_p);

/**
 * Destroy; waits for this rank's kernels, releases window, device and NCCL communicators (aborts
 * the communicator instead of finalizing it when a fault was seen).  NULL is a no-op.
 */
void eep_runtime_destroy(eep_runtime_t *rt);

/**
 * @param [in] rt  the runtime, or NULL.
 * @return the membership epoch the runtime is in: the view its communicator was built from
 *         (params.epoch at create, then each view applied); 0 for NULL.  Dispatch handles made in
 *         an older epoch give EEP_ERR_STALE_EPOCH in combine and cached dispatch.
 */
uint64_t eep_runtime_epoch(const eep_runtime_t *rt);

/** Fill @p info_p. */
eep_status_t eep_runtime_query(const eep_runtime_t *rt, eep_runtime_info_t *info_p);

/**
 * @return the processes whose runtimes run on @p rt's GPU at once, this one included: on a GPU
 *         shared through MPS (the one-GPU cluster, co-location) those in a registry in
 *         EEP_GPU_SHARE_DIR (default /dev/shm: processes that see the same folder); 1 without
 *         MPS (processes take turns, each with the whole GPU), without a registry, and for NULL.
 *         Above 1, dispatch and combine count on their share of the SMs and launch without
 *         programmatic dependent launch (docs/dispatch.md).
 */
int eep_runtime_gpu_sharers(const eep_runtime_t *rt);

/**
 * @return the ncclComm_t in use (for NCCL collectives on the same ranks).  A communicator the
 *         runtime created is non-blocking (so that it can always be aborted): each collective on
 *         it may return ncclInProgress, and on the 2 x H200 machine a 4-byte ncclAllReduce took
 *         ~57 us there against ~9 us on a blocking communicator (bench/RESULTS.md).  Latency-bound
 *         collectives belong on a communicator of their own.
 */
void *eep_runtime_nccl_comm(const eep_runtime_t *rt);

/**
 * Non-blocking health check: the fault page and NCCL's asynchronous error.
 * @return EEP_OK; EEP_ERR_PEER_TIMEOUT when a device wait expired (the log names the peer; see
 *         eep_runtime_fault); EEP_ERR_ABORTED after eep_runtime_abort; an NCCL error class.
 */
eep_status_t eep_poll(eep_runtime_t *rt);

/** Synchronize @p stream (a CUstream, NULL for the default stream), then eep_poll(). */
eep_status_t eep_runtime_sync(eep_runtime_t *rt, void *stream);

/**
 * Without blocking: has the work queued on @p stream finished?
 * @return EEP_INPROGRESS while it runs; once it has finished, what eep_poll() returns.  Lets a
 *         caller keep watching membership while a kernel waits, and eep_runtime_abort() it when a
 *         newer view makes the wait pointless (the kernel then leaves within microseconds instead
 *         of at its deadline).
 */
eep_status_t eep_runtime_stream_query(eep_runtime_t *rt, void *stream);

/**
 * Wait for the work queued on @p stream, asking @p should_abort(@p ctx) between polls (every
 * 100 us) whether the wait has become pointless (a newer view, a lost lease, a signal).  When it
 * says so, the runtime's abort flag is raised once and the wait goes on until the aborted work
 * has left the stream (it leaves its device waits within microseconds).
 * @return what eep_runtime_stream_query() returns once the work has finished: EEP_OK,
 *         EEP_ERR_ABORTED after an abort, EEP_ERR_PEER_TIMEOUT, ...; EEP_ERR_INVALID_ARG for a
 *         NULL @p rt.
 */
eep_status_t eep_runtime_stream_wait(eep_runtime_t *rt, void              *stream,
                                     int (*should_abort)(void *ctx), void *ctx);

/**
 * Copy the first fault record.
 * @return EEP_OK with *rec_p filled; EEP_ERR_NOT_FOUND when there is none.
 */
eep_status_t eep_runtime_fault(const eep_runtime_t *rt, eep_fault_record_t *rec_p);

/**
 * Set the device-wait deadline of this runtime's later calls (dispatch, combine, and barriers
 * without one of their own), e.g. a long one for the first step after a view, while peers may
 * still compile that view's kernels (nvcc takes seconds for GIN variants), then the short one
 * that detects a dead peer.  Calls already launched keep theirs.
 * @param timeout_ms  > 0; 0 restores the deadline the runtime was created with.
 * @return EEP_OK; EEP_ERR_INVALID_ARG (rt NULL, timeout_ms negative).
 */
eep_status_t eep_runtime_set_timeout(eep_runtime_t *rt, int timeout_ms);

/** Raise the abort flag: every running and later kernel of this runtime leaves its waits. */
void eep_runtime_abort(eep_runtime_t *rt);

/**
 * Lower the abort flag and drop the records, once the caller has handled the fault (e.g. after
 * rebuilding the group).  No kernel of this runtime may be running.
 */
eep_status_t eep_runtime_clear_fault(eep_runtime_t *rt);

/* ------------------------------------------------------------------------------------------ */
/* Statistics: what a rank did and how long it waited for whom (issue 28)                      */

/* What eep_runtime_stats reports; counts are since eep_runtime_create. */
typedef struct {
    size_t   size; /* in: sizeof(eep_runtime_stats_t) */
    uint64_t epoch;
    int      rank, nranks;
    uint64_t dispatch_calls, combine_calls, barrier_calls; /* enqueued */
    /* token bytes routed: num_tokens x top-k x hidden x element size, per call */
    uint64_t dispatch_bytes, combine_bytes;
    uint64_t jit_compiles, jit_cache_hits;
    uint64_t faults[6]; /* device waits that gave up or bad input, by EEP_PHASE_* (eep/layout.h),
                           counted as eep_runtime_clear_fault drops their records */
    /*
     * Seconds this rank's kernels spent waiting for world rank `peer`, by phase
     * (EEP_WAIT_STAT_*: barrier, dispatch counts, dispatch data, combine): each bounded wait
     * that had to spin adds its time once, on the device.  `peer` is the world rank at the time
     * of the wait (a view change renumbers ranks: take differences per epoch).
     */
    double wait_seconds[EEP_WAIT_STAT_PHASES][EEP_MAX_RANKS];
} eep_runtime_stats_t;

/**
 * Read the statistics of @p rt.  Blocks no stream: the device's wait counters are copied on a
 * stream of the runtime's own (kernels running meanwhile may be counted or not yet).  Call it
 * between calls on the runtime's thread, like every other call.
 * @param [out] stats_p  filled on EEP_OK; its size field says how much the caller knows.
 * @return EEP_OK; EEP_ERR_INVALID_ARG naming a NULL argument or a size below the first version.
 */
eep_status_t eep_runtime_stats(eep_runtime_t *rt, eep_runtime_stats_t *stats_p);

/* ------------------------------------------------------------------------------------------ */
/* Barrier                                                                                      */

typedef enum {
    /*
     * Scale-out (GIN, rail team) and scale-up (LSA, NVLink team) at the same time on 2 SMs (1 SM
     * when there is one scale-out rank).  On exit every direct partner (same node, same rail) has
     * arrived; it is not a transitive global barrier.
     */
    EEP_BARRIER_PARALLEL = 0,
    /* Scale-out then scale-up on 1 SM: on exit every rank of the job has arrived. */
    EEP_BARRIER_SEQUENTIAL = 1,
} eep_barrier_mode_t;

typedef struct {
    size_t             size; /* sizeof(eep_barrier_opts_t) */
    eep_barrier_mode_t mode;
    int                timeout_ms; /* 0: the runtime's default */
    unsigned           iterations; /* barriers in this one launch; 0 means 1 (benchmarks) */
    /* Test hooks: spin this long before arriving (a late rank), and record %globaltimer at
       arrival and exit of each iteration into stamps[2 * i], stamps[2 * i + 1] (device memory,
       2 * iterations entries), or NULL. */
    uint64_t  delay_ns;
    uint64_t *stamps;
    uint64_t *cycles; /* clock64() at each exit, iterations entries, or NULL */
} eep_barrier_opts_t;

/**
 * Enqueue one barrier on @p stream (a CUstream, NULL for the default stream).  Needs no host work
 * between calls: the counters only grow.  Returns once launched; a timeout surfaces later through
 * eep_poll() or eep_runtime_sync().
 * @return EEP_OK; the pending fault status when the abort flag is already up (nothing launched).
 */
eep_status_t eep_barrier(eep_runtime_t *rt, eep_barrier_mode_t mode, void *stream);

/** eep_barrier with options (per-call timeout, benchmark and test hooks). */
eep_status_t eep_barrier_ex(eep_runtime_t *rt, const eep_barrier_opts_t *opts, void *stream);

#ifdef __cplusplus
}
#endif

#endif /* EEP_EEP_H */
