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
 * Forwarding (lsaSize L > 1, ranks node-major: node n = rank / L, local index rank % L).  A token
 * bound for node m crosses GIN once, to the rank of m with this rank's local index (the
 * forwarder), which stores it over NVLink into the receive region of each of its destinations on
 * m, exactly as a sender of m's node would; the combine's partials of m's ranks for this rank's
 * tokens go to that forwarder over NVLink and from it back over GIN.  Regions after the send
 * staging (window offsets; elastic/ep/ep_layout.c, eep_ep_gin_stage_bytes, adds them up in the
 * same order), N = nodes, T = max_tokens:
 *   rec   [2][N][T] records, by source node and source token
 *   meta  [2][N][T] {u64 sequence, u32 destination mask, u32 slot at each rank of the node}
 *   cnt   [2][N] the node's L count slots (word 1 of the first: the source's token count)
 *   crow  [2][N][L][T] combine rows, by source node, writing local rank and token
 *   cdone [L] u64: local rank l's expert side of combine n is done (n)
 *   mstage [N][T] the meta this rank puts to each node's forwarder
 */
__device__ __forceinline__ bool eep_epk_fwd_on(const eep_epk_params_t &p)
{
    return eep_epk_gin(p).lsa_size > 1;
}

__device__ __forceinline__ unsigned eep_epk_fwd_meta_bytes(int L)
{
    return (unsigned)((12 + 4 * L + 7) / 8 * 8);
}

__device__ __forceinline__ unsigned long long eep_epk_fwd_base(const eep_epk_params_t &p)
{
    return eep_epk_gin_slot_stage(p, EEP_EPK_W(p));
}

__device__ __forceinline__ unsigned long long eep_epk_fwd_rec(const eep_epk_params_t &p, int par,
                                                              int n, int t)
{
    const int N = eep_epk_gin(p).nodes;

    return eep_epk_fwd_base(p) +
           ((unsigned long long)(par * N + n) * p.max_tokens + t) * p.token_bytes;
}

__device__ __forceinline__ unsigned long long eep_epk_fwd_meta(const eep_epk_params_t &p, int par,
                                                               int n, int t)
{
    const int N = eep_epk_gin(p).nodes, L = eep_epk_gin(p).lsa_size;

    return eep_epk_fwd_base(p) + 2ull * N * p.max_tokens * p.token_bytes +
           ((unsigned long long)(par * N + n) * p.max_tokens + t) * eep_epk_fwd_meta_bytes(L);
}

__device__ __forceinline__ unsigned long long eep_epk_fwd_cnt(const eep_epk_params_t &p, int par,
                                                              int n)
{
    const int N = eep_epk_gin(p).nodes, L = eep_epk_gin(p).lsa_size;

    return eep_epk_fwd_meta(p, 2, 0, 0) + (unsigned long long)(par * N + n) * L * p.slot_bytes;
}

__device__ __forceinline__ unsigned long long eep_epk_fwd_crow(const eep_epk_params_t &p, int par,
                                                               int n, int l, int t)
{
    const int N = eep_epk_gin(p).nodes, L = eep_epk_gin(p).lsa_size;

    return eep_epk_fwd_cnt(p, 2, 0) +
           (((unsigned long long)(par * N + n) * L + l) * p.max_tokens + t) * p.crecv_row;
}

__device__ __forceinline__ unsigned long long eep_epk_fwd_cdone(const eep_epk_params_t &p, int l)
{
    return eep_epk_fwd_crow(p, 2, 0, 0, 0) + (unsigned long long)l * 8u;
}

__device__ __forceinline__ unsigned long long eep_epk_fwd_mstage(const eep_epk_params_t &p, int m,
                                                                 int t)
{
    const int L = eep_epk_gin(p).lsa_size;

    return eep_epk_fwd_cdone(p, 0) + (unsigned long long)(L * 8 + 127) / 128 * 128 +
           ((unsigned long long)m * p.max_tokens + t) * eep_epk_fwd_meta_bytes(L);
}

/* The rail peers: the rank of every other node with this rank's local index. */
__device__ __forceinline__ unsigned eep_epk_rail_mask(const eep_epk_params_t &p)
{
    const int L = eep_epk_gin(p).lsa_size, N = eep_epk_gin(p).nodes, l = p.rank % L;
    unsigned  m = 0;

    for (int n = 0; n < N; n++) {
        m |= n != p.rank / L ? 1u << (unsigned)(n * L + l) : 0u;
    }
    return m;
}

/*
 * Wait, by thread d < W of the block for each bit d of @p mask, until signal @p sig_base + d reads
 * at least @p target (bounded: deadline, abort flag; the fault names world rank d), then acquire.
 * A dead rank's bit (p.dead_mask) is left out: its signal never comes.  No block sync: callers
 * sync.
 */
__device__ __forceinline__ void eep_epk_gin_wait_mask(const eep_epk_params_t &p, unsigned mask,
                                                      int sig_base, unsigned long long target,
                                                      int phase, int *block_failed,
                                                      bool relay = false)
{
    const int d = (int)threadIdx.x;

    mask &= ~p.dead_mask;
    if (d < EEP_EPK_W(p) && ((mask >> (unsigned)d) & 1u)) {
        eep_wait_ctx w = eep_epk_wait_ctx(p, block_failed);

        /* a forwarder relays for its node's ranks: its own abort flag (a bad id of its own, say)
           must not stop it, or they wait for it to their deadline; the deadline still bounds it */
        if (relay) {
            w.abort_check_ns = p.timeout_ns;
        }
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

/* Every GIN peer's signal (eep_epk_gin_wait_mask over p.gin_mask). */
__device__ __forceinline__ void eep_epk_gin_wait_peers(const eep_epk_params_t &p, int sig_base,
                                                       unsigned long long target, int phase,
                                                       int *block_failed)
{
    eep_epk_gin_wait_mask(p, p.gin_mask, sig_base, target, phase, block_failed);
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
__device__ __noinline__ bool eep_epk_fwd_dispatch(const eep_epk_params_t &p, unsigned long long seq,
                                                  int parity, int *block_failed);

__device__ __noinline__ bool eep_epk_gin_dispatch_puts(const eep_epk_params_t &p,
                                                       unsigned long long seq, int parity,
                                                       int *block_failed)
{
    if (eep_epk_fwd_on(p)) {
        return eep_epk_fwd_dispatch(p, seq, parity, block_failed);
    }
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
        if (eep_epk_is_gin(p, d) && !eep_epk_dead(p, d)) { /* nothing to a dead peer */
            gin.put(
                ncclTeamWorld(dc), d, (ncclWindow_t)p.window,
                (size_t)(p.counts_off + ((unsigned long long)p.rank * 2 + parity) * p.slot_bytes),
                (ncclWindow_t)p.window, (size_t)eep_epk_gin_slot_stage(p, d),
                (size_t)(EEP_EPK_SLOT_COUNTS + p.num_local_max) * 8u, /* d's count: <= max */
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
        if (eep_epk_is_gin(p, d) && !eep_epk_dead(p, d)) {
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

/* A record of this rank's forward region to world rank @p d (of this node) at @p dst: every
   16-byte vector but the one holding the tag, a fence, then that one (the tag last, as a sender
   stores it); one warp, every lane. */
__device__ __forceinline__ void eep_epk_fwd_copy_record(const eep_epk_params_t &p,
                                                        const unsigned char    *src,
                                                        unsigned char *dst, unsigned lane)
{
    const unsigned nv = p.token_bytes / 16u, tv = p.tag_off / 16u;

    for (unsigned v = lane; v < nv; v += 32u) {
        if (v != tv) {
            ((uint4 *)dst)[v] = ((const uint4 *)src)[v];
        }
    }
    eep_epk_fence_release(p);
    __syncwarp();
    if (lane == 0) {
        ((uint4 *)dst)[tv] = ((const uint4 *)src)[tv];
    }
}

/*
 * Forwarding, the forwarder's half of a dispatch (the block that put this rank's own tokens):
 * wait for every rail peer's signal of this call (its records, metadata and count slots for this
 * node have landed), then store each record it sent into the receive region of each of its
 * destinations on this node (slot from its metadata), through LSA, tag last; remember what was
 * forwarded in the handle (h_fwd_*, for the combine); then the node's count slots, the token
 * word last (release).  @return false when a wait gave up.
 */
__device__ __noinline__ bool eep_epk_fwd_forward(const eep_epk_params_t &p, unsigned long long seq,
                                                 int parity, int *block_failed)
{
    __shared__ int       fwd_count[EEP_EPK_MAX_WORLD];
    const eep_epk_gin_t &g = eep_epk_gin(p);
    const int            W = EEP_EPK_W(p), L = g.lsa_size, N = g.nodes, T = p.max_tokens;
    const int            me_node = p.rank / L, ls = p.rank % L, nb = me_node * L;
    const unsigned       node_mask = ((1u << (unsigned)L) - 1u) << (unsigned)nb;
    const unsigned       lane = threadIdx.x & 31u, warp = threadIdx.x >> 5;
    const unsigned char *mine = eep_epk_peer(p, 0, p.rank);

    eep_epk_gin_wait_mask(p, eep_epk_rail_mask(p), g.sig0, seq, EEP_PHASE_EP_DISPATCH, block_failed,
                          true);
    if ((int)threadIdx.x < N) {
        fwd_count[threadIdx.x] = 0;
    }
    __syncthreads();
    if (*(volatile int *)block_failed) {
        return false;
    }
    for (int it = (int)warp; it < N * T; it += EEP_EPK_WARPS) {
        const int n = it / T, t = it % T;

        if (n == me_node) {
            continue;
        }
        const unsigned long long cw = *(
            const volatile unsigned long long *)(mine + eep_epk_fwd_cnt(p, parity, n) + 8u);
        if (t >= (int)(unsigned)(cw & 0xffffffffull)) {
            continue; /* the source has fewer tokens */
        }
        const unsigned char *meta = mine + eep_epk_fwd_meta(p, parity, n, t);
        if (*(const volatile unsigned long long *)meta != seq) {
            continue; /* not sent to this node in this call */
        }
        const unsigned dm    = *(const unsigned *)(meta + 8);
        const int     *slots = (const int *)(meta + 12);
        const int      s     = n * L + ls;

        if (lane == 0) {
            const int i = atomicAdd(&fwd_count[n], 1);

            ((int *)p.h_fwd_tok)[(long long)n * T + i] = t;
            ((int *)p.h_fwd_dm)[(long long)n * T + i]  = (int)dm;
        }
        for (unsigned m = dm & node_mask; m != 0; m &= m - 1) {
            const int d = __ffs(m) - 1;

            eep_epk_fwd_copy_record(
                p, mine + eep_epk_fwd_rec(p, parity, n, t),
                eep_epk_peer(p,
                             p.drecv_off + (unsigned long long)(parity * W + s) * p.drecv_region +
                                 (unsigned long long)slots[d - nb] * p.token_bytes,
                             d),
                lane);
        }
    }
    __syncthreads();
    if ((int)threadIdx.x < N) {
        ((int *)p.h_fwd_n)[threadIdx.x] = (int)threadIdx.x == me_node ? 0 : fwd_count[threadIdx.x];
    }
    eep_fence_release_sys(); /* the records before their count slots */
    __syncthreads();
    for (int j = threadIdx.x; j < N * L; j += blockDim.x) {
        const int n = j / L, l = j % L;

        /* degraded: nothing relayed for a dead source (its slot here is an older call's), nor
           to a dead rank of this node */
        if (n == me_node || eep_epk_dead(p, n * L + ls) || eep_epk_dead(p, nb + l)) {
            continue;
        }
        const unsigned long long *src = (const unsigned long long *)(mine +
                                                                     eep_epk_fwd_cnt(p, parity, n) +
                                                                     (unsigned long long)l *
                                                                         p.slot_bytes);
        unsigned long long       *dst = (unsigned long long *)eep_epk_peer(
                  p, p.counts_off + ((unsigned long long)(n * L + ls) * 2 + parity) * p.slot_bytes,
                  nb + l);

        for (int w = 1; w < EEP_EPK_SLOT_COUNTS + p.num_local_max; w++) {
            dst[w] = src[w];
        }
        eep_st_release_sys(dst + EEP_EPK_SLOT_TOKENS, src[EEP_EPK_SLOT_TOKENS]);
    }
    return true;
}

/*
 * Forwarding, the source's half of a dispatch (the last of the call's senders and counter): each
 * token once to the forwarder of each other node that holds one of its experts (the record
 * staged for its first destination there, and its metadata: the call's sequence, the token's
 * destination mask, its slot at each rank of the node), then each forwarder's count slots with
 * the call's signal; then this rank forwards what its rail peers sent (eep_epk_fwd_forward), and
 * drains.  @return false when a wait gave up.
 */
__device__ __noinline__ bool eep_epk_fwd_dispatch(const eep_epk_params_t &p, unsigned long long seq,
                                                  int parity, int *block_failed)
{
    __shared__ int       nputs;
    const eep_epk_gin_t &g  = eep_epk_gin(p);
    const ncclDevComm   &dc = eep_epk_gin_dc(p);
    const int            W = EEP_EPK_W(p), T = p.num_tokens, L = g.lsa_size, N = g.nodes;
    const int            me_node = p.rank / L, ls = p.rank % L;
    const unsigned       fm   = eep_epk_fwd_meta_bytes(L);
    unsigned char       *mine = eep_epk_peer(p, 0, p.rank);
    ncclGin              gin(dc, 0);
    int                  n_mine = 0;

    if (threadIdx.x == 0) {
        nputs = 0;
    }
    __threadfence_system();
    __syncthreads();
    for (int i = threadIdx.x; i < T * N; i += blockDim.x) {
        const int t = i / N, m = i % N;

        if (m == me_node) {
            continue;
        }
        const int *slots = (const int *)p.h_send_slot + (long long)t * W;
        unsigned   dm    = 0;

        for (int d = 0; d < W; d++) {
            dm |= slots[d] >= 0 ? 1u << (unsigned)d : 0u;
        }
        const unsigned nm = dm & (((1u << (unsigned)L) - 1u) << (unsigned)(m * L));
        if (nm == 0) {
            continue;
        }
        const int      d0 = __ffs(nm) - 1, f = m * L + ls;
        unsigned char *ms = mine + eep_epk_fwd_mstage(p, m, t);

        *(unsigned long long *)ms = seq;
        *(unsigned *)(ms + 8)     = dm;
        for (int l = 0; l < L; l++) {
            ((int *)(ms + 12))[l] = slots[m * L + l];
        }
        __threadfence_system(); /* the metadata, before its put reads it */
        gin.put(
            ncclTeamWorld(dc), f, (ncclWindow_t)p.window,
            (size_t)eep_epk_fwd_rec(p, parity, me_node, t), (ncclWindow_t)p.window,
            (size_t)(eep_epk_gin_rec_stage(p, d0) + (unsigned long long)slots[d0] * p.token_bytes),
            (size_t)p.token_bytes, ncclGin_None{}, ncclGin_CounterInc{ (ncclGinCounter_t)g.ctr0 });
        gin.put(ncclTeamWorld(dc), f, (ncclWindow_t)p.window,
                (size_t)eep_epk_fwd_meta(p, parity, me_node, t), (ncclWindow_t)p.window,
                (size_t)eep_epk_fwd_mstage(p, m, t), (size_t)fm, ncclGin_None{},
                ncclGin_CounterInc{ (ncclGinCounter_t)g.ctr0 });
        n_mine += 2;
    }
    __syncthreads(); /* every record and its metadata posted before the count slots */
    for (int m = threadIdx.x; m < N; m += blockDim.x) {
        if (m == me_node || eep_epk_dead(p, m * L + ls)) {
            continue; /* degraded: a dead forwarder gets nothing (nothing goes to its node) */
        }
        /* word 1 of the node's first slot (unused by the receivers): this rank's token count */
        unsigned long long *w1 = (unsigned long long *)(mine + eep_epk_gin_slot_stage(p, m * L)) +
                                 1;

        *w1 = (seq << 32) | (unsigned)T;
        __threadfence_system();
        gin.put(ncclTeamWorld(dc), m * L + ls, (ncclWindow_t)p.window,
                (size_t)eep_epk_fwd_cnt(p, parity, me_node), (ncclWindow_t)p.window,
                (size_t)eep_epk_gin_slot_stage(p, m * L), (size_t)L * p.slot_bytes,
                ncclGin_SignalInc{ (ncclGinSignal_t)(g.sig0 + p.rank) },
                ncclGin_CounterInc{ (ncclGinCounter_t)g.ctr0 });
        n_mine++;
    }
    if (n_mine != 0) {
        atomicAdd(&nputs, n_mine);
    }
    if (!eep_epk_fwd_forward(p, seq, parity, block_failed)) {
        return false;
    }
    return eep_epk_gin_drain(p, EEP_EPK_CTL_DPUTS, g.ctr0, &nputs, EEP_PHASE_EP_DISPATCH,
                             block_failed);
}

/*
 * Forwarding, the combine (the last block of the expert side): tell every rank of this node that
 * this rank's partials are written (its done word in their windows), wait for theirs, then put
 * the partials of this node's ranks for the tokens this rank forwarded back to each source
 * (region = the writer's ordinal among the token's ranks, as the source side reads them), a bare
 * signal to every rail peer, and drain.  @return false when a wait gave up.
 */
__device__ __noinline__ bool eep_epk_fwd_combine(const eep_epk_params_t &p, unsigned long long seq,
                                                 int parity, unsigned long long region0,
                                                 int *block_failed)
{
    __shared__ int       nputs;
    const eep_epk_gin_t &g  = eep_epk_gin(p);
    const ncclDevComm   &dc = eep_epk_gin_dc(p);
    const int            W = EEP_EPK_W(p), T = p.max_tokens, L = g.lsa_size, N = g.nodes;
    const int            me_node = p.rank / L, ls = p.rank % L, nb = me_node * L;
    const unsigned       node_mask = ((1u << (unsigned)L) - 1u) << (unsigned)nb;
    const unsigned       rail      = eep_epk_rail_mask(p);
    unsigned char       *mine      = eep_epk_peer(p, 0, p.rank);
    ncclGin              gin(dc, 0);
    int                  n_mine = 0;

    if (threadIdx.x == 0) {
        nputs = 0;
    }
    __threadfence_system(); /* every block's rows (acquired by the ticket) before the done word */
    __syncthreads();
    /* degraded: no done word to, and none awaited from, a dead rank of this node */
    if ((int)threadIdx.x < L && !eep_epk_dead(p, nb + (int)threadIdx.x)) {
        eep_st_release_sys(
            (unsigned long long *)eep_epk_peer(p, eep_epk_fwd_cdone(p, ls), nb + threadIdx.x), seq);
    }
    if ((int)threadIdx.x < L && !eep_epk_dead(p, nb + (int)threadIdx.x)) {
        const eep_wait_ctx        w     = eep_epk_wait_ctx(p, block_failed);
        const unsigned long long *word  = (const unsigned long long *)(mine +
                                                                      eep_epk_fwd_cdone(
                                                                           p, (int)threadIdx.x));
        unsigned                  polls = 0;

        if (eep_wait_geq(
                w,
                [word, &polls] {
                    if (polls++ != 0) {
                        __nanosleep(128);
                    }
                    return eep_ld_relaxed_sys(word);
                },
                seq, EEP_PHASE_EP_COMBINE, nb + (int)threadIdx.x)) {
            eep_fence_acquire_sys();
        }
    }
    __syncthreads();
    if (*(volatile int *)block_failed) {
        return false;
    }
    __threadfence_system(); /* the rows this node's ranks wrote, for the proxy's reads */
    for (int it = threadIdx.x; it < N * T; it += blockDim.x) {
        const int n = it / T, i = it % T;

        if (n == me_node || i >= ((const int *)p.h_fwd_n)[n]) {
            continue;
        }
        const int      t  = ((const int *)p.h_fwd_tok)[(long long)n * T + i];
        const unsigned dm = (unsigned)((const int *)p.h_fwd_dm)[(long long)n * T + i];
        const int      s  = n * L + ls;

        for (unsigned m = dm & node_mask; m != 0; m &= m - 1) {
            const int d   = __ffs(m) - 1;
            const int ord = __popc(dm & ((1u << (unsigned)d) - 1u));

            gin.put(ncclTeamWorld(dc), s, (ncclWindow_t)p.window,
                    (size_t)(region0 + (unsigned long long)ord * p.crecv_region +
                             (unsigned long long)t * p.crecv_row),
                    (ncclWindow_t)p.window, (size_t)eep_epk_fwd_crow(p, parity, n, d - nb, t),
                    (size_t)p.crecv_row, ncclGin_None{},
                    ncclGin_CounterInc{ (ncclGinCounter_t)(g.ctr0 + 1) });
            n_mine++;
        }
    }
    __syncthreads(); /* every row posted before the signals */
    for (int d = threadIdx.x; d < W; d += blockDim.x) {
        if (((rail >> (unsigned)d) & 1u) && !eep_epk_dead(p, d)) {
            gin.signal(ncclTeamWorld(dc), d,
                       ncclGin_SignalInc{ (ncclGinSignal_t)(g.sig0 + W + p.rank) });
        }
    }
    if (n_mine != 0) {
        atomicAdd(&nputs, n_mine);
    }
    return eep_epk_gin_drain(p, EEP_EPK_CTL_CPUTS, g.ctr0 + 1, &nputs, EEP_PHASE_EP_COMBINE,
                             block_failed);
}

#endif /* __CUDACC__ && EEP_EPK_GIN */

#endif /* EEP_KERNELS_EP_EP_GIN_CUH */
