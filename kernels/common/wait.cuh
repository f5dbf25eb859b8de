/*
 * kernels/common/wait.cuh - the device side of "every wait is bounded".
 *
 * A wait spins on one word with system-scope acquire loads.  Every 8 polls it reads %globaltimer
 * against the deadline; at most every EEP_ABORT_CHECK_NS it also reads the host-mapped abort flag
 * (a PCIe round trip, so not on every poll: a barrier that completes in a few microseconds never
 * pays for it).  On expiry the first waiting thread of the block records {phase, peer, expected,
 * observed} in the fault page and raises the abort flag; every other wait of every kernel of the
 * runtime then leaves at its next abort check.  Nothing traps: the CUDA context stays usable.
 *
 * Wait accounting (issue 28): a wait that had to spin adds the ns it spent into the runtime's
 * wait_ns[slot][peer] (EEP_WAIT_STAT_*, device memory) with one atomicAdd as it leaves, however
 * it leaves (reached, expired, aborted); a wait done within its first polls reads no clock and
 * counts nothing.  The slot follows the fault phase unless the caller names one (stat_slot).
 * The counts are seconds the rank waited, not thread-seconds: every block and warp waits for the
 * same peer at the same time, so a wait adds only the part of its interval after the latest end
 * of an earlier wait on that (slot, peer) (a watermark, the array's second half, set with
 * atomicMax): overlapping waits count once, and no count outgrows the wall clock.
 *
 * The fault page lives in pinned host memory; atomics on it are not portable across PCIe, so a
 * record slot is claimed with an atomic on a device counter and the record is written with plain
 * stores, its `valid` word last, each step fenced at system scope.
 */
#ifndef EEP_KERNELS_COMMON_WAIT_CUH
#define EEP_KERNELS_COMMON_WAIT_CUH

#include "../../include/eep/layout.h"
#include "mem_ops.cuh"

#define EEP_ABORT_CHECK_NS 20000ull

__device__ __forceinline__ unsigned int eep_abort_raised(const eep_fault_page_t *fault)
{
    return *(volatile const unsigned int *)&fault->abort_flag;
}

/* Everything a wait needs to give up properly. */
struct eep_wait_ctx {
    eep_fault_page_t  *fault;
    unsigned int      *fault_claim;
    int               *block_failed; /* shared: set once a wait of this block gave up */
    unsigned long long timeout_ns;   /* each wait's deadline, from when it starts spinning */
    int                rank;
    /* how often a spinning wait reads the host-mapped abort flag (a PCIe read): kernels with
       thousands of waiters at once check rarely, or the reads crowd out everyone's traffic */
    unsigned long long  abort_check_ns;
    unsigned long long *wait_ns;   /* u64 [EEP_WAIT_STAT_PHASES][EEP_MAX_RANKS], or nullptr */
    int                 stat_slot; /* EEP_WAIT_STAT_*, or -1: from the fault phase */
};

/* The one maker of a wait context, for every kernel (barrier, dispatch, combine). */
__device__ __forceinline__ eep_wait_ctx eep_wait_ctx_make(eep_fault_page_t  *fault,
                                                          unsigned int      *fault_claim,
                                                          int               *block_failed,
                                                          unsigned long long timeout_ns, int rank,
                                                          unsigned long long abort_check_ns)
{
    eep_wait_ctx w;

    w.fault          = fault;
    w.fault_claim    = fault_claim;
    w.block_failed   = block_failed;
    w.timeout_ns     = timeout_ns;
    w.rank           = rank;
    w.abort_check_ns = abort_check_ns;
    w.wait_ns        = nullptr;
    w.stat_slot      = -1;
    return w;
}

/* A wait that spun since @p start_ns leaves: its time goes to (slot, @p peer). */
__device__ __forceinline__ void eep_wait_account(const eep_wait_ctx &w, int phase, int peer,
                                                 unsigned long long start_ns)
{
    if (w.wait_ns == nullptr || start_ns == 0 || peer < 0 || peer >= EEP_MAX_RANKS) {
        return;
    }
    const int                slot  = w.stat_slot >= 0                 ? w.stat_slot
                                     : phase == EEP_PHASE_EP_DISPATCH ? EEP_WAIT_STAT_DISPATCH_DATA
                                     : phase == EEP_PHASE_EP_COMBINE  ? EEP_WAIT_STAT_COMBINE
                                                                      : EEP_WAIT_STAT_BARRIER;
    unsigned long long      *total = &w.wait_ns[slot * EEP_MAX_RANKS + peer];
    unsigned long long      *mark  = total + EEP_WAIT_STAT_PHASES * EEP_MAX_RANKS; /* last end */
    const unsigned long long now   = eep_globaltimer();
    const unsigned long long prev  = atomicMax(mark, now);
    const unsigned long long from  = prev > start_ns ? prev : start_ns;

    if (now > from) {
        atomicAdd(total, now - from);
    }
}

/* Record a fault (first waiter of the block only) and raise the abort flag. */
__device__ __noinline__ void eep_fault_raise(const eep_wait_ctx &w, int phase, int peer,
                                             unsigned long long expected,
                                             unsigned long long observed, unsigned long long now,
                                             unsigned long long start_ns)
{
    if (atomicCAS(w.block_failed, 0, 1) != 0) {
        return;
    }
    unsigned int slot = atomicAdd(w.fault_claim, 1u);
    if (slot < EEP_FAULT_MAX_RECORDS) {
        volatile eep_fault_record_t *r = &w.fault->records[slot];
        r->phase                       = phase;
        r->rank                        = w.rank;
        r->peer                        = peer;
        r->expected                    = expected;
        r->observed                    = observed;
        r->time_ns                     = now;
        r->waited_ns                   = now - start_ns;
        __threadfence_system();
        r->valid                                     = 1u;
        *(volatile unsigned int *)&w.fault->nrecords = slot + 1u;
    }
    __threadfence_system();
    *(volatile unsigned int *)&w.fault->abort_flag = EEP_ABORT_TIMEOUT;
    __threadfence_system();
}

/* The clock of one wait: started at its first check. */
struct eep_wait_clock {
    unsigned long long start_ns, deadline_ns, next_abort_check;
};

/*
 * One check of a spinning wait: @return true when it must give up: another wait of the block
 * gave up, the deadline passed (the fault is recorded with @p seen, the last value observed, and
 * the abort flag raised), or the runtime aborted.
 */
__device__ __forceinline__ bool eep_wait_expired(const eep_wait_ctx &w, eep_wait_clock &c,
                                                 unsigned long long target, unsigned long long seen,
                                                 int phase, int peer)
{
    unsigned long long now = eep_globaltimer();

    if (c.start_ns == 0) {
        c.start_ns         = now;
        c.deadline_ns      = now + w.timeout_ns;
        c.next_abort_check = now + w.abort_check_ns;
    }
    if (*(volatile int *)w.block_failed) {
        return true;
    }
    if (now >= c.deadline_ns) {
        eep_fault_raise(w, phase, peer, target, seen, now, c.start_ns);
        return true;
    }
    if (now >= c.next_abort_check) {
        c.next_abort_check = now + w.abort_check_ns;
        if (eep_abort_raised(w.fault)) {
            atomicCAS(w.block_failed, 0, 1);
            return true;
        }
    }
    return false;
}

/*
 * Spin until load() >= target (a monotonic counter).  @return true when reached; false when this
 * wait (or another of the block, or the runtime) gave up.
 */
template <typename Load>
__device__ __forceinline__ bool eep_wait_geq(const eep_wait_ctx &w, Load load,
                                             unsigned long long target, int phase, int peer)
{
    unsigned long long v = load();
    if (v >= target) {
        return true;
    }
    /* The clock is read only once the wait has spun a little: a barrier that completes within a
       few polls never touches it (the deadline is late by those few polls, well under 1 us). */
    eep_wait_clock c = { 0, 0, 0 };
    for (unsigned int polls = 1;; polls++) {
        v = load();
        if (v >= target) {
            eep_wait_account(w, phase, peer, c.start_ns);
            return true;
        }
        if ((polls & 7u) == 0 && eep_wait_expired(w, c, target, v, phase, peer)) {
            eep_wait_account(w, phase, peer, c.start_ns);
            return false;
        }
    }
}

/*
 * The warp's form of eep_wait_geq: every lane of the warp calls it together, and poll() (run by
 * every lane each round) returns the value that lane waits on (lanes with nothing to wait for
 * return @p target).  Ends when every lane's value is >= target; the clock, the block's failure
 * word and the abort flag are read by lane 0 and its verdict shuffled, so the warp never
 * diverges around its collective operations (poll may use them too).  On expiry the fault names
 * @p peer and the first short lane's value.  @return true when reached.
 */
template <typename Poll>
__device__ __forceinline__ bool eep_warp_wait_geq(const eep_wait_ctx &w, Poll poll,
                                                  unsigned long long target, int phase, int peer)
{
    const bool     lead = (threadIdx.x & 31u) == 0;
    eep_wait_clock c    = { 0, 0, 0 };

    for (unsigned int polls = 0;; polls++) {
        const unsigned long long v      = poll();
        const unsigned           shortm = __ballot_sync(0xffffffffu, v < target);
        if (shortm == 0) {
            if (lead) {
                eep_wait_account(w, phase, peer, c.start_ns);
            }
            return true;
        }
        if ((polls & 7u) != 7u) {
            continue;
        }
        const unsigned long long seen = __shfl_sync(0xffffffffu, v, __ffs(shortm) - 1);
        const int verdict = lead && eep_wait_expired(w, c, target, seen, phase, peer) ? 1 : 0;
        if (__shfl_sync(0xffffffffu, verdict, 0) != 0) {
            if (lead) {
                eep_wait_account(w, phase, peer, c.start_ns);
            }
            return false;
        }
    }
}

#endif /* EEP_KERNELS_COMMON_WAIT_CUH */
