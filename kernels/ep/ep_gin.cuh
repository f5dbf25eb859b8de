/*
 * kernels/ep/ep_gin.cuh - the GIN leg of the hybrid dispatch and combine (EEP_EPK_GIN variants,
 * compiled by nvcc: NVRTC cannot compile NCCL 2.28.9's GIN headers).
 *
 * A peer on another node (bit d of p.gin_mask) is never written through a pointer: the senders
 * write its records (dispatch), count slot and partial rows (combine) into this rank's own
 * staging area, exactly as they would write them into the peer's window, and one block per call,
 * the last of the call's writers to finish (a ticket), puts them to the peer in one go:
 *   dispatch: every record, then the count slot with SignalInc{sig0 + me} (the signal follows
 *             the records on the same context, so "signal >= n" means the whole call n landed);
 *   combine:  every partial row, then a bare SignalInc{sig0 + W + me}.
 * Every put also bumps a local counter; the putting block waits (bounded) until the counter
 * says every source was consumed, so the next call may write the staging again.
 * Receivers wait for signal >= the call's sequence with readSignal in a bounded loop (the
 * deadline and the abort flag of kernels/common/wait.cuh; NCCL's own waitSignal has no bound),
 * after which every byte of the call from that peer is visible and the direct-mode code reads
 * it as if it had been stored over NVLink (tags and flags included).  Signals are one SignalInc
 * per call and peer, never mixed with other operations and never reset.
 * One GIN context (0) carries everything: the ordering rule holds per context and peer.
 */
#ifndef EEP_KERNELS_EP_EP_GIN_CUH
#define EEP_KERNELS_EP_EP_GIN_CUH

#include "ep_common.cuh"

#ifndef EEP_EPK_GIN
#define EEP_EPK_GIN 0
#endif

#if defined(__CUDACC__) && EEP_EPK_GIN

__device__ __forceinline__ const eep_epk_gin_t &eep_epk_gin(const eep_epk_params_t &p)
{
    return *(const eep_epk_gin_t *)p.gin;
}

__device__ __forceinline__ const ncclDevComm &eep_epk_gin_dc(const eep_epk_params_t &p)
{
    return *reinterpret_cast<const ncclDevComm *>(&eep_epk_gin(p).devcomm);
}

__device__ __forceinline__ bool eep_epk_is_gin(const eep_epk_params_t &p, int d)
{
    return ((p.gin_mask >> (unsigned)d) & 1u) != 0;
}

/* Window offsets of the staging: records for peer d ([T] records, as in its receive region),
   partial rows by received record (source s, index i), count slot for peer d. */
__device__ __forceinline__ unsigned long long eep_epk_gin_rec_stage(const eep_epk_params_t &p,
                                                                    int                     d)
{
    return p.gstage_off + (unsigned long long)d * p.drecv_region;
}

__device__ __forceinline__ unsigned long long eep_epk_gin_row_stage(const eep_epk_params_t &p,
                                                                    long long               rec)
{
    return p.gstage_off + (unsigned long long)EEP_EPK_W(p) * p.drecv_region +
           (unsigned long long)rec * p.crecv_row;
}

__device__ __forceinline__ unsigned long long eep_epk_gin_slot_stage(const eep_epk_params_t &p,
                                                                     int                     d)
{
    return p.gstage_off + (unsigned long long)EEP_EPK_W(p) * p.drecv_region +
           (unsigned long long)EEP_EPK_W(p) * p.max_tokens * p.crecv_row +
           (unsigned long long)d * p.slot_bytes;
}

/*
 * Wait, by thread d < W of the block for each GIN peer d, until signal @p sig_base + d reads at
 * least @p target (bounded: deadline, abort flag; the fault names world rank d), then acquire.
 * No block sync: callers sync.
 */
__device__ __forceinline__ void eep_epk_gin_wait_peers(const eep_epk_params_t &p, int sig_base,
                                                       unsigned long long target, int phase,
                                                       int *block_failed)
{
    const int d = (int)threadIdx.x;

    if (d < EEP_EPK_W(p) && eep_epk_is_gin(p, d)) {
        const eep_wait_ctx    w = eep_epk_wait_ctx(p, block_failed);
        ncclGin               gin(eep_epk_gin_dc(p), 0);
        const ncclGinSignal_t sig   = (ncclGinSignal_t)(sig_base + d);
        unsigned              polls = 0;

        if (eep_wait_geq(
                w,
                [&gin, sig, &polls] {
                    if (polls++ != 0) {
                        __nanosleep(256);
                    }
                    return (unsigned long long)gin.readSignal(sig);
                },
                target, phase, d)) {
            eep_fence_acquire_sys();
        }
    }
}

/* eep_epk_gin_wait_peers, then the block meets.  @return false when a wait gave up. */
__device__ __forceinline__ bool eep_epk_gin_wait(const eep_epk_params_t &p, int sig_base,
                                                 unsigned long long target, int phase,
                                                 int *block_failed)
{
    eep_epk_gin_wait_peers(p, sig_base, target, phase, block_failed);
    __syncthreads();
    return !*(volatile int *)block_failed;
}

/* This block is done with what the call's GIN puts read: take a ticket (the ctl word at
   @p ticket_off, by parity, zeroed by eep_epk_begin for the next call).  @return true in the
   last of @p participants blocks (every block of the block calls it; it syncs the block). */
__device__ __forceinline__ bool eep_epk_gin_last(const eep_epk_params_t &p, unsigned ticket_off,
                                                 int parity, int participants)
{
    __shared__ int last;

    __syncthreads();
    if (threadIdx.x == 0) {
        eep_fence_release_sys(); /* the block's staging writes, before the ticket */
        const unsigned t = atomicAdd((unsigned int *)(p.ctl + ticket_off) + parity, 1u);

        last = t == (unsigned)participants - 1u;
        if (last) {
            eep_fence_acquire_sys(); /* every block's staging writes, before the puts */
        }
    }
    __syncthreads();
    return last != 0;
}

/* The block's @p n puts: added to the total issued (ctl word @p puts_off), then wait until the
   local counter @p ctr says every source was consumed.  Thread 0 waits; the block meets.
   @return false when the wait gave up. */
__device__ __forceinline__ bool eep_epk_gin_drain(const eep_epk_params_t &p, unsigned puts_off,
                                                  int ctr, int *n, int phase, int *block_failed)
{
    __syncthreads();
    if (threadIdx.x == 0) {
        unsigned long long      *issued = (unsigned long long *)(p.ctl + puts_off);
        const unsigned long long target = *(volatile unsigned long long *)issued +
                                          (unsigned long long)*n;
        const eep_wait_ctx w = eep_epk_wait_ctx(p, block_failed);
        ncclGin            gin(eep_epk_gin_dc(p), 0);
        unsigned           polls = 0;

        *(volatile unsigned long long *)issued = target;
        (void)eep_wait_geq(
            w,
            [&gin, ctr, &polls] {
                if (polls++ != 0) {
                    __nanosleep(256);
                }
                return (unsigned long long)gin.readCounter((ncclGinCounter_t)ctr);
            },
            target, phase, -1);
        *n = 0;
    }
    __syncthreads();
    return !*(volatile int *)block_failed;
}

/*
 * Dispatch, the last block of the call's senders and counter: every staged record to its GIN
 * peer (slot from the handle's send slots), then each GIN peer's count slot with the call's
 * signal, then the drain.  @return false when the drain gave up.
 */
__device__ __noinline__ bool eep_epk_gin_dispatch_puts(const eep_epk_params_t &p, int parity,
                                                       int *block_failed)
{
    __shared__ int           nputs;
    const eep_epk_gin_t     &g  = eep_epk_gin(p);
    const ncclDevComm       &dc = eep_epk_gin_dc(p);
    const int                W = EEP_EPK_W(p), T = p.num_tokens;
    const unsigned long long my_region = p.drecv_off +
                                         (unsigned long long)(parity * W + p.rank) * p.drecv_region;
    ncclGin gin(dc, 0);
    int     mine = 0;

    if (threadIdx.x == 0) {
        nputs = 0;
    }
    __threadfence_system(); /* the staging (every block's, acquired by the ticket) for the proxy */
    __syncthreads();
    for (int i = threadIdx.x; i < T * W; i += blockDim.x) {
        const int t = i / W, d = i % W;
        const int slot = ((const int *)p.h_send_slot)[(long long)t * W + d];

        if (slot >= 0 && eep_epk_is_gin(p, d)) {
            const unsigned long long at = (unsigned long long)slot * p.token_bytes;

            gin.put(ncclTeamWorld(dc), d, (ncclWindow_t)p.window, (size_t)(my_region + at),
                    (ncclWindow_t)p.window, (size_t)(eep_epk_gin_rec_stage(p, d) + at),
                    (size_t)p.token_bytes, ncclGin_None{},
                    ncclGin_CounterInc{ (ncclGinCounter_t)g.ctr0 });
            mine++;
        }
    }
    __syncthreads(); /* every record posted before any count slot (same context: ordered) */
    for (int d = threadIdx.x; d < W; d += blockDim.x) {
        if (eep_epk_is_gin(p, d)) {
            gin.put(
                ncclTeamWorld(dc), d, (ncclWindow_t)p.window,
                (size_t)(p.counts_off + ((unsigned long long)p.rank * 2 + parity) * p.slot_bytes),
                (ncclWindow_t)p.window, (size_t)eep_epk_gin_slot_stage(p, d),
                (size_t)(EEP_EPK_SLOT_COUNTS + p.num_local) * 8u,
                ncclGin_SignalInc{ (ncclGinSignal_t)(g.sig0 + p.rank) },
                ncclGin_CounterInc{ (ncclGinCounter_t)g.ctr0 });
            mine++;
        }
    }
    if (mine != 0) {
        atomicAdd(&nputs, mine);
    }
    return eep_epk_gin_drain(p, EEP_EPK_CTL_DPUTS, g.ctr0, &nputs, EEP_PHASE_EP_DISPATCH,
                             block_failed);
}

/*
 * Combine, the last block of the call's expert side: every staged partial row to its source
 * (region = this rank's ordinal among the token's ranks, row = the token), then a bare signal
 * to every GIN peer (also to those it sent nothing: the source waits for every peer's), then
 * the drain.  @return false when the drain gave up.
 */
__device__ __noinline__ bool eep_epk_gin_combine_puts(const eep_epk_params_t &p,
                                                      unsigned long long region0, int *block_failed)
{
    __shared__ int       nputs;
    const eep_epk_gin_t &g  = eep_epk_gin(p);
    const ncclDevComm   &dc = eep_epk_gin_dc(p);
    const int            W = EEP_EPK_W(p), T = p.max_tokens;
    ncclGin              gin(dc, 0);
    int                  mine = 0;

    if (threadIdx.x == 0) {
        nputs = 0;
    }
    __threadfence_system();
    __syncthreads();
    for (int i = threadIdx.x; i < W * T; i += blockDim.x) {
        const int s = i / T, j = i % T;

        if (!eep_epk_is_gin(p, s) || j >= ((const int *)p.h_recv_n)[s]) {
            continue;
        }
        const long long rec = (long long)s * p.max_tokens + j;
        const int       tok = ((const int *)p.h_recv_tok)[rec];
        const int       ord = ((const int *)p.h_recv_ord)[rec];

        gin.put(ncclTeamWorld(dc), s, (ncclWindow_t)p.window,
                (size_t)(region0 + (unsigned long long)ord * p.crecv_region +
                         (unsigned long long)tok * p.crecv_row),
                (ncclWindow_t)p.window, (size_t)eep_epk_gin_row_stage(p, rec), (size_t)p.crecv_row,
                ncclGin_None{}, ncclGin_CounterInc{ (ncclGinCounter_t)(g.ctr0 + 1) });
        mine++;
    }
    __syncthreads(); /* every row posted before the signals */
    for (int d = threadIdx.x; d < W; d += blockDim.x) {
        if (eep_epk_is_gin(p, d)) {
            gin.signal(ncclTeamWorld(dc), d,
                       ncclGin_SignalInc{ (ncclGinSignal_t)(g.sig0 + W + p.rank) });
        }
    }
    if (mine != 0) {
        atomicAdd(&nputs, mine);
    }
    return eep_epk_gin_drain(p, EEP_EPK_CTL_CPUTS, g.ctr0 + 1, &nputs, EEP_PHASE_EP_COMBINE,
                             block_failed);
}

#endif /* __CUDACC__ && EEP_EPK_GIN */

#endif /* EEP_KERNELS_EP_EP_GIN_CUH */
