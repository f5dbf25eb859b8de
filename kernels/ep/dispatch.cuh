/*
 * kernels/ep/dispatch.cuh - direct-mode dispatch (every peer an NVLink/LSA peer), one kernel.
 *
 *   template <int IdxBits, int Mode, int Phase>
 *   __device__ void eep_ep_dispatch_body(const eep_epk_params_t &p);
 *
 * Phase 0 (the dispatch kernel), G blocks, block b owns tokens [b*C, (b+1)*C):
 *   1. count: the block counts, per global expert and per destination rank, the tokens before
 *      its chunk (shared-memory atomics: sums do not depend on order);
 *   2. order: per round of scan_warps*32 tokens, each warp sets one bit per (token, expert) and
 *      (token, destination) in shared masks; a prefix over warps gives every token its exact
 *      position among this rank's tokens for each of its experts and destinations, in token
 *      order, with no atomics on positions and no grid-wide sync;
 *   3. send: one warp per token writes its wire record once to each destination rank's region
 *      (slot = its position among the tokens for that rank) through LSA pointers, 16-byte
 *      stores; the record carries the per-expert positions;
 *   4. the block owning the last token holds the totals: it writes each peer's count slot
 *      (tokens, per-local-expert rows), release-ordered;
 *   5. the last block to finish sending (a self-cleaning counter) sends "done" to every peer.
 * CACHED skips 1, 2 and 4: slots come from the handle.  Modes other than CPU_SYNC then run the
 * copy epilogue in the same kernel (Phase 0 includes it); CPU_SYNC: block 0 waits for the counts,
 * publishes them (device arrays and a host-mapped mirror), and the host launches Phase 1 (copy
 * only) once it has sized the outputs.
 * Copy epilogue: wait for every peer's done (bounded), compute offsets, then one warp per
 * received record places it at offsets[e] + rows of e from lower sources + its position: source
 * then token order, a function of the inputs alone.  Padding rows are zeroed.
 *
 * Every word a peer waits for is (sequence << 32) | value; the sequence comes from a device
 * counter advanced by the kernel itself (graph replays stay in step); parity = sequence & 1
 * selects the slot and region (docs/dispatch.md, section 3).
 */
#ifndef EEP_KERNELS_EP_DISPATCH_CUH
#define EEP_KERNELS_EP_DISPATCH_CUH

#include "ep_params.h"

#ifdef __CUDACC__
#include <nccl.h>
#include <nccl_device.h>

#include "../../barrier/impl/bounded_wait.cuh"


template <int IdxBits>
__device__ __forceinline__ long long eep_epk_id(const eep_epk_params_t &p, long long i)
{
    if (IdxBits == 64) {
        return ((const long long *)p.topk_idx)[i];
    }
    return ((const int *)p.topk_idx)[i];
}

/* Route one token: destination mask, or bad (mask 0, *bad_p the offending id). */
template <int IdxBits>
__device__ __forceinline__ unsigned eep_epk_route(const eep_epk_params_t &p, int t, bool *bad_p,
                                                  long long *bad_id_p)
{
    unsigned mask = 0;
    const long long base = (long long)t * p.num_topk;

    *bad_p = false;
    for (int k = 0; k < p.num_topk; k++) {
        long long e = eep_epk_id<IdxBits>(p, base + k);

        if (e < -1 || e >= p.num_experts) {
            *bad_p = true;
            *bad_id_p = e;
            return 0;
        }
        if (e < 0) {
            continue;
        }
        for (int j = 0; j < k; j++) {
            if (eep_epk_id<IdxBits>(p, base + j) == e) {
                *bad_p = true;
                *bad_id_p = e;
                return 0;
            }
        }
        mask |= 1u << (unsigned)(e / p.num_local);
    }
    return mask;
}

/* A bad expert id: one fault record {phase, peer -1, expected token, observed id}, abort flag. */
__device__ __noinline__ void eep_epk_fault_bad(const eep_epk_params_t &p, int t, long long id)
{
    unsigned int slot = atomicAdd(p.fault_claim, 1u);

    if (slot < EEP_FAULT_MAX_RECORDS) {
        volatile eep_fault_record_t *r = &p.fault->records[slot];
        unsigned long long           now = eep_globaltimer();

        r->phase     = EEP_PHASE_EP_BAD_EXPERT;
        r->rank      = p.rank;
        r->peer      = -1;
        r->expected  = (unsigned long long)t;
        r->observed  = (unsigned long long)id;
        r->time_ns   = now;
        r->waited_ns = 0;
        __threadfence_system();
        r->valid = 1u;
        *(volatile unsigned int *)&p.fault->nrecords = slot + 1u;
    }
    __threadfence_system();
    *(volatile unsigned int *)&p.fault->abort_flag = EEP_ABORT_FAULT;
    __threadfence_system();
}

__device__ __forceinline__ unsigned char *eep_epk_peer(const eep_epk_params_t &p,
                                                       unsigned long long off, int peer)
{
    return (unsigned char *)ncclGetLsaPointer((ncclWindow_t)p.window, (size_t)off, peer);
}

__device__ __forceinline__ void eep_epk_copy16(void *dst, const void *src, unsigned bytes,
                                               unsigned lane, unsigned nlanes)
{
    const uint4 *s4 = (const uint4 *)src;
    uint4       *d4 = (uint4 *)dst;

    for (unsigned i = lane; i < bytes / 16; i += nlanes) {
        d4[i] = s4[i];
    }
}

__device__ __forceinline__ void eep_epk_copy4(void *dst, const void *src, unsigned bytes,
                                              unsigned lane, unsigned nlanes)
{
    for (unsigned i = lane; i < bytes / 4; i += nlanes) {
        ((unsigned int *)dst)[i] = ((const unsigned int *)src)[i];
    }
}

/*
 * Copy @p bytes (a multiple of 16) from @p src to every destination rank in @p dmask (record
 * address: base[d] + off), one warp, U 16-byte loads in flight per lane before their stores: a
 * copy is bound by memory latency otherwise (each store would wait for its own load).
 */
template <int U>
__device__ __forceinline__ void eep_epk_fanout16(unsigned char *const *base,
                                                 unsigned long long off, unsigned dmask,
                                                 const void *src, unsigned bytes, unsigned lane)
{
    const uint4   *s4 = (const uint4 *)src;
    const unsigned n = bytes / 16;

    for (unsigned i = lane; i < n; i += 32u * U) {
        uint4 r[U];
#pragma unroll
        for (int u = 0; u < U; u++) {
            if (i + 32u * u < n) {
                r[u] = s4[i + 32u * u];
            }
        }
        for (unsigned m = dmask; m != 0; m &= m - 1) {
            uint4 *d4 = (uint4 *)(base[__ffs(m) - 1] + off);
#pragma unroll
            for (int u = 0; u < U; u++) {
                if (i + 32u * u < n) {
                    d4[i + 32u * u] = r[u];
                }
            }
        }
    }
}

/* Wait, by the first world threads of the block, until word @p idx of every peer's slot carries
   @p seq.  @return false when a wait gave up (fault recorded) or the runtime aborted. */
__device__ __forceinline__ bool eep_epk_wait_slots(const eep_epk_params_t &p,
                                                   const unsigned char *my_counts, int parity,
                                                   int idx, unsigned long long seq, int phase,
                                                   int *block_failed)
{
    eep_wait_ctx w;

    w.fault        = p.fault;
    w.fault_claim  = p.fault_claim;
    w.block_failed = block_failed;
    w.timeout_ns   = p.timeout_ns;
    w.rank         = p.rank;
    if ((int)threadIdx.x < p.world) {
        const unsigned long long *word = (const unsigned long long *)(
            my_counts + ((unsigned long long)threadIdx.x * 2 + parity) * p.slot_bytes) + idx;
        /* Back off between polls: every block waits here, and a grid of tight .sys-scope
           spinners slowed the blocks still copying (time grew with the SM count). */
        unsigned polls = 0;
        if (eep_wait_geq(w, [word, &polls] {
                             if (polls++ != 0) {
                                 __nanosleep(128);
                             }
                             return eep_ld_relaxed_sys(word);
                         }, seq << 32, phase, (int)threadIdx.x)) {
            (void)eep_ld_acquire_sys(word);
        }
    }
    __syncthreads();
    return !*(volatile int *)block_failed;
}

/* Shared state of the copy epilogue. */
struct eep_epk_copy_smem {
    int n[EEP_EPK_MAX_WORLD];        /* records from each source */
    int rec_base[EEP_EPK_MAX_WORLD + 1];
    int counts[256];
    int offsets[257];
};

/* The copy epilogue: received records -> expert-major outputs (+ handle), padding rows. */
template <int Mode>
__device__ void eep_epk_copy(const eep_epk_params_t &p, unsigned long long seq,
                             int *src_prefix /* [world * El] shared */, eep_epk_copy_smem &sm,
                             int *block_failed)
{
    const int           parity = (int)(seq & 1ull);
    const int           El = p.num_local, K = p.num_topk, lo = p.rank * El;
    const unsigned      lane = threadIdx.x & 31u, warp = threadIdx.x >> 5;
    unsigned char      *mine = eep_epk_peer(p, 0, p.rank);
    const unsigned char *my_counts = mine + p.counts_off;

    if (!eep_epk_wait_slots(p, my_counts, parity, EEP_EPK_SLOT_DDONE, seq, EEP_PHASE_EP_DISPATCH,
                            block_failed)) {
        return;
    }
    /* Counts and offsets: from the peers' slots, or the handle (CACHED). */
    if (Mode == EEP_EPK_CACHED) {
        for (int s = threadIdx.x; s < p.world; s += blockDim.x) {
            sm.n[s] = ((const int *)p.h_recv_n)[s];
        }
        for (int e = threadIdx.x; e < El; e += blockDim.x) {
            sm.counts[e] = ((const int *)p.h_counts)[e];
        }
        for (int e = threadIdx.x; e <= El; e += blockDim.x) {
            sm.offsets[e] = ((const int *)p.h_offsets)[e];
        }
    } else {
        for (int s = threadIdx.x; s < p.world; s += blockDim.x) {
            const unsigned long long *slot = (const unsigned long long *)(
                my_counts + ((unsigned long long)s * 2 + parity) * p.slot_bytes);
            sm.n[s] = (int)(unsigned)(slot[EEP_EPK_SLOT_TOKENS] & 0xffffffffull);
        }
        for (int e = threadIdx.x; e < El; e += blockDim.x) {
            int running = 0;

            for (int s = 0; s < p.world; s++) {
                const unsigned long long *slot = (const unsigned long long *)(
                    my_counts + ((unsigned long long)s * 2 + parity) * p.slot_bytes);
                src_prefix[s * El + e] = running;
                running += (int)(unsigned)(slot[EEP_EPK_SLOT_COUNTS + e] & 0xffffffffull);
            }
            sm.counts[e] = running;
        }
        __syncthreads();
        if (threadIdx.x == 0) {
            int off = 0;

            sm.offsets[0] = 0;
            for (int e = 0; e < El; e++) {
                off += (sm.counts[e] + p.alignment - 1) / p.alignment * p.alignment;
                sm.offsets[e + 1] = off;
            }
        }
    }
    __syncthreads();
    if (threadIdx.x == 0) {
        int b = 0;

        for (int s = 0; s < p.world; s++) {
            sm.rec_base[s] = b;
            b += sm.n[s];
        }
        sm.rec_base[p.world] = b;
    }
    __syncthreads();
    if (blockIdx.x == 0) {
        for (int e = threadIdx.x; e <= El; e += blockDim.x) {
            if (e < El) {
                ((int *)p.recv_counts)[e] = sm.counts[e];
            }
            ((int *)p.recv_offsets)[e] = sm.offsets[e];
            if (Mode != EEP_EPK_CACHED) {
                if (e < El) {
                    ((int *)p.h_counts)[e] = sm.counts[e];
                }
                ((int *)p.h_offsets)[e] = sm.offsets[e];
            }
        }
        if (Mode != EEP_EPK_CACHED) {
            for (int s = threadIdx.x; s < p.world; s += blockDim.x) {
                ((int *)p.h_recv_n)[s] = sm.n[s];
            }
        }
    }

    /* One warp per received record. */
    const int      total = sm.rec_base[p.world];
    const int      gwarps = gridDim.x * EEP_EPK_WARPS;
    const unsigned rec_x = 0;

    for (int q = blockIdx.x * EEP_EPK_WARPS + warp; q < total; q += gwarps) {
        int s = 0;

        while (sm.rec_base[s + 1] <= q) {
            s++;
        }
        const int            i = q - sm.rec_base[s];
        const long long      rec = (long long)s * p.max_tokens + i;
        const unsigned char *row = mine + p.drecv_off +
                                   (unsigned long long)(parity * p.world + s) * p.drecv_region +
                                   (unsigned long long)i * p.token_bytes;
        const int           *ids = (const int *)(row + p.meta_off);
        const float         *wts = (const float *)(ids + K);
        const int           *pos = ids + 2 * K + 1;
        int                  my_id = -1, my_row = -1, my_local = 0;
        float                my_w = 0.0f;

        if ((int)lane < K) {
            my_id = ids[lane];
            my_w  = wts[lane];
            my_local = my_id >= lo && my_id < lo + El;
            if (my_local) {
                const int e = my_id - lo;

                my_row = Mode == EEP_EPK_CACHED ?
                         ((const int *)p.h_recv_rows)[rec * K + lane] :
                         sm.offsets[e] + src_prefix[s * El + e] + pos[lane];
            }
        }
        /* Handle: rows and weights per lane, token, ordinal among the token's ranks. */
        unsigned dst_bit = ((int)lane < K && my_id >= 0) ? 1u << (unsigned)(my_id / El) : 0u;
        unsigned dmask = __reduce_or_sync(0xffffffffu, dst_bit);
        if ((int)lane < K) {
            if (Mode != EEP_EPK_CACHED) {
                ((int *)p.h_recv_rows)[rec * K + lane] = my_row;
            }
            ((float *)p.h_recv_w)[rec * K + lane] = my_local ? my_w : 0.0f;
        }
        if (lane == 0 && Mode != EEP_EPK_CACHED) {
            ((int *)p.h_recv_tok)[rec] = ids[2 * K];
            ((int *)p.h_recv_ord)[rec] = __popc(dmask & ((1u << p.rank) - 1u));
        }
        {
            const uint4   *s4 = (const uint4 *)row;
            const unsigned n = p.hidden_bytes / 16;
            unsigned       rows_mask = __ballot_sync(0xffffffffu, my_row >= 0);

            for (unsigned v0 = lane; v0 < n; v0 += 32u * 8u) {
                uint4 r8[8];
#pragma unroll
                for (int u = 0; u < 8; u++) {
                    if (v0 + 32u * u < n) {
                        r8[u] = s4[v0 + 32u * u];
                    }
                }
                for (unsigned m = rows_mask; m != 0; m &= m - 1) {
                    const int r = __shfl_sync(0xffffffffu, my_row, __ffs(m) - 1);
                    uint4    *d4 = (uint4 *)((unsigned char *)p.recv_x +
                                             (unsigned long long)r * p.hidden_bytes);
#pragma unroll
                    for (int u = 0; u < 8; u++) {
                        if (v0 + 32u * u < n) {
                            d4[v0 + 32u * u] = r8[u];
                        }
                    }
                }
            }
            for (unsigned m = rows_mask; m != 0; m &= m - 1) {
                const int r = __shfl_sync(0xffffffffu, my_row, __ffs(m) - 1);

                if (p.scale_bytes != 0) {
                    eep_epk_copy4((unsigned char *)p.recv_x_scales +
                                  (unsigned long long)r * p.scale_bytes, row + p.scale_off,
                                  p.scale_bytes, lane, 32);
                }
                if ((int)lane < K) {
                    ((int *)p.recv_topk_idx)[(long long)r * K + lane] = my_local ? my_id - lo : -1;
                    ((float *)p.recv_topk_weights)[(long long)r * K + lane] =
                        my_local ? my_w : 0.0f;
                }
            }
        }
    }

    /* Padding rows of each expert group: block b takes experts b, b + G, ... */
    for (int e = blockIdx.x; e < El; e += gridDim.x) {
        const long long first = sm.offsets[e] + sm.counts[e], end = sm.offsets[e + 1];
        const unsigned  vecs = p.hidden_bytes / 16, sw = p.scale_bytes / 4;

        for (long long r = first; r < end; r++) {
            uint4 *x4 = (uint4 *)((unsigned char *)p.recv_x + (unsigned long long)r * p.hidden_bytes);

            for (unsigned v = threadIdx.x; v < vecs; v += blockDim.x) {
                x4[v] = make_uint4(0, 0, 0, 0);
            }
            for (unsigned v = threadIdx.x; v < sw; v += blockDim.x) {
                ((unsigned int *)((unsigned char *)p.recv_x_scales +
                                  (unsigned long long)r * p.scale_bytes))[v] = 0;
            }
            for (int k = threadIdx.x; k < K; k += blockDim.x) {
                ((int *)p.recv_topk_idx)[r * K + k]       = -1;
                ((float *)p.recv_topk_weights)[r * K + k] = 0.0f;
            }
        }
    }
}

template <int IdxBits, int Mode, int Phase>
__device__ void eep_ep_dispatch_body(const eep_epk_params_t &p)
{
    static_assert(Mode >= 0 && Mode <= 2, "Mode: 0 CPU_SYNC, 1 NO_CPU_SYNC, 2 CACHED");
    static_assert(Phase == 0 || (Phase == 1 && Mode == EEP_EPK_CPU_SYNC), "Phase 1: CPU_SYNC copy");
    extern __shared__ int dyn[];
    __shared__ int               block_failed, last_block;
    __shared__ unsigned long long sh_seq;
    __shared__ eep_epk_copy_smem  csm;
    __shared__ unsigned char     *peer_base[EEP_EPK_MAX_WORLD];

    const int      E = p.num_experts, W = p.world, El = p.num_local, K = p.num_topk;
    const int      NC = E + W; /* counters: experts, then destinations */
    const unsigned lane = threadIdx.x & 31u, warp = threadIdx.x >> 5;
    unsigned long long *ctl_seq = (unsigned long long *)(p.ctl + EEP_EPK_CTL_DSEQ);

    if (threadIdx.x == 0) {
        block_failed = 0;
        last_block   = 0;
        /* Phase 0 advances the sequence (written back by the last block); Phase 1 reuses it. */
        sh_seq = *(volatile unsigned long long *)ctl_seq + (Phase == 0 ? 1ull : 0ull);
    }
    for (int d = threadIdx.x; d < W; d += blockDim.x) {
        peer_base[d] = eep_epk_peer(p, 0, d);
    }
    __syncthreads();
    const unsigned long long seq = sh_seq;
    const int                parity = (int)(seq & 1ull);

    if (Phase == 1) {
        eep_epk_copy<Mode>(p, seq, dyn, csm, &block_failed);
        return;
    }

    const int T = p.num_tokens, G = gridDim.x;
    const int C = (T + G - 1) / G;
    const int t0 = min(T, (int)blockIdx.x * C), t1 = min(T, t0 + C);
    const unsigned long long my_region = p.drecv_off +
                                         (unsigned long long)(parity * W + p.rank) * p.drecv_region;

    if (Mode == EEP_EPK_CACHED) {
        /* Slots from the handle; one warp per token. */
        for (int t = t0 + (int)warp; t < t1; t += EEP_EPK_WARPS) {
            const int *slots = (const int *)p.h_send_slot + (long long)t * W;

            for (int d = 0; d < W; d++) {
                const int slot = slots[d];

                if (slot < 0) {
                    continue;
                }
                unsigned char *rec = peer_base[d] + my_region + (unsigned long long)slot * p.token_bytes;
                eep_epk_fanout16<8>(&peer_base[d], my_region + (unsigned long long)slot *
                                    p.token_bytes, 1u, (const unsigned char *)p.x +
                                    (unsigned long long)t * p.hidden_bytes, p.hidden_bytes, lane);
                if (p.scale_bytes != 0) {
                    eep_epk_copy4(rec + p.scale_off, (const unsigned char *)p.x_scales +
                                  (unsigned long long)t * p.scale_bytes, p.scale_bytes, lane, 32);
                }
                int   *ids = (int *)(rec + p.meta_off);
                float *wts = (float *)(ids + K);
                for (int k = lane; k < K; k += 32) {
                    ids[k] = (int)eep_epk_id<IdxBits>(p, (long long)t * K + k);
                    wts[k] = ((const float *)p.topk_weights)[(long long)t * K + k];
                }
                if (lane == 0) {
                    ids[2 * K] = t;
                }
            }
        }
    } else {
        int *base   = dyn;                        /* [NC] running counts before the round */
        int *masks  = base + NC;                  /* [scan_warps][NC] lane bits */
        int *prefix = masks + p.scan_warps * NC;  /* [scan_warps][NC] counts before the warp */
        const int SW = p.scan_warps, R = SW * 32;

        /* 1. counts of the tokens before this chunk */
        for (int j = threadIdx.x; j < NC; j += blockDim.x) {
            base[j] = 0;
        }
        __syncthreads();
        for (int t = threadIdx.x; t < t0; t += blockDim.x) {
            bool      bad;
            long long bad_id;
            unsigned  m = eep_epk_route<IdxBits>(p, t, &bad, &bad_id);

            if (bad) {
                continue;
            }
            for (int k = 0; k < K; k++) {
                long long e = eep_epk_id<IdxBits>(p, (long long)t * K + k);
                if (e >= 0) {
                    atomicAdd(&base[e], 1);
                }
            }
            while (m != 0) {
                int d = __ffs(m) - 1;
                m &= m - 1;
                atomicAdd(&base[E + d], 1);
            }
        }
        __syncthreads();

        /* 2 + 3, one round of R tokens at a time */
        for (int r0 = t0; r0 < t1; r0 += R) {
            for (int j = threadIdx.x; j < SW * NC; j += blockDim.x) {
                masks[j] = 0;
            }
            __syncthreads();
            if ((int)warp < SW) {
                const int t = r0 + (int)warp * 32 + (int)lane;

                if (t < t1) {
                    bool      bad;
                    long long bad_id;
                    unsigned  m = eep_epk_route<IdxBits>(p, t, &bad, &bad_id);
                    int      *mw = masks + warp * NC;

                    if (bad) {
                        eep_epk_fault_bad(p, t, bad_id);
                    } else {
                        for (int k = 0; k < K; k++) {
                            long long e = eep_epk_id<IdxBits>(p, (long long)t * K + k);
                            if (e >= 0) {
                                atomicOr(&mw[e], (int)(1u << lane));
                            }
                        }
                        while (m != 0) {
                            int d = __ffs(m) - 1;
                            m &= m - 1;
                            atomicOr(&mw[E + d], (int)(1u << lane));
                        }
                    }
                }
            }
            __syncthreads();
            for (int j = threadIdx.x; j < NC; j += blockDim.x) {
                int running = base[j];

                for (int w = 0; w < SW; w++) {
                    prefix[w * NC + j] = running;
                    running += __popc((unsigned)masks[w * NC + j]);
                }
                base[j] = running;
            }
            __syncthreads();
            /* send: one warp per token of the round */
            for (int q = (int)warp; q < R && r0 + q < t1; q += EEP_EPK_WARPS) {
                const int      t = r0 + q, w = q >> 5;
                const unsigned l = (unsigned)(q & 31), lt = (1u << l) - 1u;
                const int     *mw = masks + w * NC, *pw = prefix + w * NC;
                int           *slots = (int *)p.h_send_slot + (long long)t * W;
                int            my_id = -1, my_pos = -1;
                float          my_w = 0.0f;

                if ((int)lane < K) {
                    my_id = (int)eep_epk_id<IdxBits>(p, (long long)t * K + lane);
                    my_w  = ((const float *)p.topk_weights)[(long long)t * K + lane];
                    if (my_id >= 0 && my_id < E && (((unsigned)mw[my_id] >> l) & 1u)) {
                        my_pos = pw[my_id] + __popc((unsigned)mw[my_id] & lt);
                    }
                }
                for (int d = lane; d < W; d += 32) {
                    slots[d] = (((unsigned)mw[E + d] >> l) & 1u) ?
                               pw[E + d] + __popc((unsigned)mw[E + d] & lt) : -1;
                }
                unsigned dm = 0;
                for (int d = 0; d < W; d++) {
                    dm |= (((unsigned)mw[E + d] >> l) & 1u) << d;
                }
                /* every destination's record at its own slot: offsets differ per d, so fan out
                   per destination (the source row stays in L1/L2 after the first) */
                for (unsigned m = dm; m != 0; m &= m - 1) {
                    const int d = __ffs(m) - 1;
                    const int slot = pw[E + d] + __popc((unsigned)mw[E + d] & lt);
                    unsigned char *rec = peer_base[d] + my_region +
                                         (unsigned long long)slot * p.token_bytes;

                    eep_epk_fanout16<8>(&peer_base[d], my_region +
                                        (unsigned long long)slot * p.token_bytes, 1u,
                                        (const unsigned char *)p.x +
                                        (unsigned long long)t * p.hidden_bytes, p.hidden_bytes,
                                        lane);
                    if (p.scale_bytes != 0) {
                        eep_epk_copy4(rec + p.scale_off, (const unsigned char *)p.x_scales +
                                      (unsigned long long)t * p.scale_bytes, p.scale_bytes, lane, 32);
                    }
                    int   *ids = (int *)(rec + p.meta_off);
                    float *wts = (float *)(ids + K);
                    if ((int)lane < K) {
                        ids[lane] = my_id;
                        wts[lane] = my_w;
                        ids[2 * K + 1 + lane] = my_pos;
                    }
                    if (lane == 0) {
                        ids[2 * K] = t;
                    }
                }
            }
            __syncthreads();
        }

        /* 4. the block that owns the last token has the totals: count slots to every peer */
        const int owner = T == 0 ? 0 : (T - 1) / C;
        if ((int)blockIdx.x == owner) {
            for (int d = 0; d < W; d++) {
                unsigned long long *slot = (unsigned long long *)(
                    peer_base[d] + p.counts_off + ((unsigned long long)p.rank * 2 + parity) *
                                                  p.slot_bytes);
                for (int e = threadIdx.x; e < El; e += blockDim.x) {
                    slot[EEP_EPK_SLOT_COUNTS + e] = (seq << 32) | (unsigned)base[d * El + e];
                }
            }
            __syncthreads();
            if ((int)threadIdx.x < W) {
                const int           d = threadIdx.x;
                unsigned long long *slot = (unsigned long long *)(
                    peer_base[d] + p.counts_off + ((unsigned long long)p.rank * 2 + parity) *
                                                  p.slot_bytes);
                __threadfence_system();
                eep_st_release_sys(slot + EEP_EPK_SLOT_TOKENS, (seq << 32) | (unsigned)base[E + d]);
            }
        }
    }

    /* 5. the last block done sending signals every peer */
    __syncthreads();
    if (threadIdx.x == 0) {
        unsigned int *ctr = (unsigned int *)(p.ctl + EEP_EPK_CTL_DCTR);

        __threadfence_system();
        if (atomicAdd(ctr, 1u) == (unsigned)G - 1u) {
            *(volatile unsigned int *)ctr = 0u; /* self-cleaning: ready for the next launch */
            *(volatile unsigned long long *)ctl_seq = seq;
            __threadfence_system();
            last_block = 1;
        }
    }
    __syncthreads();
    if (last_block && (int)threadIdx.x < W) {
        unsigned long long *slot = (unsigned long long *)(
            peer_base[threadIdx.x] + p.counts_off +
            ((unsigned long long)p.rank * 2 + parity) * p.slot_bytes);
        __threadfence_system();
        eep_st_release_sys(slot + EEP_EPK_SLOT_DDONE, (seq << 32) | 1ull);
    }

    if (Mode != EEP_EPK_CPU_SYNC) {
        eep_epk_copy<Mode>(p, seq, dyn, csm, &block_failed);
        return;
    }
    /* CPU_SYNC: block 0 waits for the counts, publishes them on the device and the host. */
    if (blockIdx.x != 0) {
        return;
    }
    const unsigned char *my_counts = peer_base[p.rank] + p.counts_off;
    if (!eep_epk_wait_slots(p, my_counts, parity, EEP_EPK_SLOT_TOKENS, seq, EEP_PHASE_EP_DISPATCH,
                            &block_failed)) {
        return;
    }
    for (int e = threadIdx.x; e < El; e += blockDim.x) {
        int running = 0;

        for (int s = 0; s < W; s++) {
            const unsigned long long *slot = (const unsigned long long *)(
                my_counts + ((unsigned long long)s * 2 + parity) * p.slot_bytes);
            running += (int)(unsigned)(slot[EEP_EPK_SLOT_COUNTS + e] & 0xffffffffull);
        }
        csm.counts[e] = running;
    }
    __syncthreads();
    if (threadIdx.x == 0) {
        volatile unsigned long long *mirror = (volatile unsigned long long *)p.host_mirror;
        int                          off = 0;

        csm.offsets[0] = 0;
        for (int e = 0; e < El; e++) {
            off += (csm.counts[e] + p.alignment - 1) / p.alignment * p.alignment;
            csm.offsets[e + 1] = off;
            mirror[e] = (unsigned long long)(unsigned)csm.counts[e];
        }
        mirror[El] = (unsigned long long)(unsigned)off;
        __threadfence_system();
        mirror[El + 1] = seq; /* the host waits for this word last */
        __threadfence_system();
    }
    __syncthreads();
    for (int e = threadIdx.x; e <= El; e += blockDim.x) {
        if (e < El) {
            ((int *)p.recv_counts)[e] = csm.counts[e];
        }
        ((int *)p.recv_offsets)[e] = csm.offsets[e];
    }
}

#endif /* __CUDACC__ */

#endif /* EEP_KERNELS_EP_DISPATCH_CUH */
