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


/* Waits of the EP kernels read the host-mapped abort flag at most this often: up to one waiting
   warp per record at once (thousands), each read a PCIe round trip. */
#define EEP_EPK_ABORT_CHECK_NS 500000ull

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
    w.abort_check_ns = EEP_EPK_ABORT_CHECK_NS;
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

/* Store the tag of a record (after a system fence by the whole warp: the record's bytes, written
   by every lane, are visible to the peer before its tag). */
__device__ __forceinline__ void eep_epk_tag_store(unsigned char *rec, unsigned tag_off,
                                                  unsigned long long seq)
{
    asm volatile("st.relaxed.sys.global.u64 [%0], %1;" ::"l"(rec + tag_off), "l"(seq) : "memory");
}

/* Shared state of the expanders (the copy from received records to expert-major rows). */
struct eep_epk_copy_smem {
    int n[EEP_EPK_MAX_WORLD];        /* records from each source */
    int rec_base[EEP_EPK_MAX_WORLD + 1];
    int counts[256];
    int offsets[257];
    int pad_base[257];               /* padding rows of experts < e */
};

/*
 * The expanders: received records -> expert-major outputs (+ handle), padding rows zeroed.
 * Block @p xb of @p XB.  Waits for every peer's count word (also the call's handshake, see
 * docs/dispatch.md section 3), computes the layout, zeroes the padding rows, then takes records
 * one warp each and copies each as soon as its tag shows this call's sequence: rows are placed
 * while later records still travel, and no "all landed" signal is needed.
 */
template <int Mode>
__device__ void eep_epk_expand(const eep_epk_params_t &p, unsigned long long seq, int xb, int XB,
                               int *src_prefix /* [world * El] shared */, eep_epk_copy_smem &sm,
                               int *block_failed)
{
    const int            parity = (int)(seq & 1ull);
    const int            El = p.num_local, K = p.num_topk, lo = p.rank * El;
    const unsigned       lane = threadIdx.x & 31u, warp = threadIdx.x >> 5;
    unsigned char       *mine = eep_epk_peer(p, 0, p.rank);
    const unsigned char *my_counts = mine + p.counts_off;

    if (!eep_epk_wait_slots(p, my_counts, parity, EEP_EPK_SLOT_TOKENS, seq, EEP_PHASE_EP_DISPATCH,
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
        b = 0;
        for (int e = 0; e < El; e++) {
            sm.pad_base[e] = b;
            b += sm.offsets[e + 1] - sm.offsets[e] - sm.counts[e];
        }
        sm.pad_base[El] = b;
    }
    __syncthreads();
    if (xb == 0) {
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

    const int gwarps = XB * EEP_EPK_WARPS, gw = xb * EEP_EPK_WARPS + (int)warp;

    /* Padding rows first (they need no data: the records keep arriving meanwhile), one warp per
       row: x = 0, scales = 0, ids = -1, weights = 0. */
    for (int j = gw; j < sm.pad_base[El]; j += gwarps) {
        int e = 0;

        while (sm.pad_base[e + 1] <= j) {
            e++;
        }
        const long long r = sm.offsets[e] + sm.counts[e] + (j - sm.pad_base[e]);
        uint4          *x4 = (uint4 *)((unsigned char *)p.recv_x +
                                       (unsigned long long)r * p.hidden_bytes);

        for (unsigned v = lane; v < p.hidden_bytes / 16; v += 32) {
            x4[v] = make_uint4(0, 0, 0, 0);
        }
        for (unsigned v = lane; v < p.scale_bytes / 4; v += 32) {
            ((unsigned int *)((unsigned char *)p.recv_x_scales +
                              (unsigned long long)r * p.scale_bytes))[v] = 0;
        }
        for (int k = lane; k < K; k += 32) {
            ((int *)p.recv_topk_idx)[r * K + k]       = -1;
            ((float *)p.recv_topk_weights)[r * K + k] = 0.0f;
        }
    }

    /* Records: one warp each, sources interleaved so that the local records (which land first)
       do not all go to the first warps. */
    eep_wait_ctx w;

    w.fault        = p.fault;
    w.fault_claim  = p.fault_claim;
    w.block_failed = block_failed;
    w.timeout_ns   = p.timeout_ns;
    w.rank         = p.rank;
    w.abort_check_ns = EEP_EPK_ABORT_CHECK_NS;
    const int total = sm.rec_base[p.world];
    for (int q = gw; q < total; q += gwarps) {
        int s = 0;

        while (sm.rec_base[s + 1] <= q) {
            s++;
        }
        const int            i = q - sm.rec_base[s];
        const long long      rec = (long long)s * p.max_tokens + i;
        const unsigned char *row = mine + p.drecv_off +
                                   (unsigned long long)(parity * p.world + s) * p.drecv_region +
                                   (unsigned long long)i * p.token_bytes;
        const unsigned long long *tag = (const unsigned long long *)(row + p.tag_off);
        int                  ok = 1;

        if (lane == 0) {
            unsigned polls = 0;

            ok = eep_wait_geq(w, [tag, &polls] {
                                  if (polls++ > 64) {
                                      __nanosleep(64);
                                  }
                                  return eep_ld_relaxed_sys(tag);
                              }, seq, EEP_PHASE_EP_DISPATCH, s);
        }
        if (!__shfl_sync(0xffffffffu, ok, 0)) {
            return;
        }
        (void)eep_ld_acquire_sys(tag);

        const int   *ids = (const int *)(row + p.meta_off);
        const float *wts = (const float *)(ids + K);
        const int   *pos = ids + 2 * K + 1;
        int          my_id = -1, my_row = -1, my_local = 0;
        float        my_w = 0.0f;

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
}

/* One token's record to every destination in @p dm (slot per destination from @p slot_of).
   No fence: the caller fences once for several tokens, then stores their tags. */
template <typename SlotOf>
__device__ __forceinline__ void eep_epk_send_token(const eep_epk_params_t &p,
                                                   unsigned char *const *peer_base,
                                                   unsigned long long my_region, int t,
                                                   unsigned dm, SlotOf slot_of, int my_id,
                                                   float my_w, int my_pos, unsigned lane)
{
    const int K = p.num_topk;

    for (unsigned m = dm; m != 0; m &= m - 1) {
        const int      d = __ffs(m) - 1;
        unsigned char *rec = peer_base[d] + my_region +
                             (unsigned long long)slot_of(d) * p.token_bytes;

        eep_epk_fanout16<8>(&peer_base[d], my_region + (unsigned long long)slot_of(d) *
                            p.token_bytes, 1u, (const unsigned char *)p.x +
                            (unsigned long long)t * p.hidden_bytes, p.hidden_bytes, lane);
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

/* The tags of one token's records (after the warp's system fence). */
template <typename SlotOf>
__device__ __forceinline__ void eep_epk_send_tags(const eep_epk_params_t &p,
                                                  unsigned char *const *peer_base,
                                                  unsigned long long my_region, unsigned dm,
                                                  SlotOf slot_of, unsigned long long seq,
                                                  unsigned lane)
{
    for (unsigned m = dm; m != 0; m &= m - 1) {
        const int d = __ffs(m) - 1;

        if ((int)lane == d % 32) {
            eep_epk_tag_store(peer_base[d] + my_region +
                              (unsigned long long)slot_of(d) * p.token_bytes, p.tag_off, seq);
        }
    }
}

/* Count, per global expert and per destination, the tokens in [t_begin, t_end) into @p base
   (shared, NC = E + world counters, zeroed by the caller). */
template <int IdxBits>
__device__ __forceinline__ void eep_epk_count(const eep_epk_params_t &p, int t_begin, int t_end,
                                              int *base)
{
    const int E = p.num_experts, K = p.num_topk;

    for (int t = t_begin + (int)threadIdx.x; t < t_end; t += blockDim.x) {
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
}

/*
 * Blocks [0, S) send (S = p.send_blocks): block b owns tokens [b*C, (b+1)*C), C = ceil(T / S).
 * Block S counts every token and sends the count slots (the call's handshake: CACHED sends the
 * word alone), then, like every later block, expands (CPU_SYNC: publishes the counts to the host
 * instead, and the expansion is Phase 1, a launch of its own after the host has sized outputs).
 */
template <int IdxBits, int Mode, int Phase>
__device__ void eep_ep_dispatch_body(const eep_epk_params_t &p)
{
    static_assert(Mode >= 0 && Mode <= 2, "Mode: 0 CPU_SYNC, 1 NO_CPU_SYNC, 2 CACHED");
    static_assert(Phase == 0 || (Phase == 1 && Mode == EEP_EPK_CPU_SYNC), "Phase 1: CPU_SYNC copy");
    extern __shared__ int dyn[];
    __shared__ int               block_failed;
    __shared__ unsigned long long sh_seq;
    __shared__ eep_epk_copy_smem  csm;
    __shared__ unsigned char     *peer_base[EEP_EPK_MAX_WORLD];

    const int      E = p.num_experts, W = p.world, El = p.num_local, K = p.num_topk;
    const int      NC = E + W; /* counters: experts, then destinations */
    const unsigned lane = threadIdx.x & 31u, warp = threadIdx.x >> 5;
    unsigned long long *ctl_seq = (unsigned long long *)(p.ctl + EEP_EPK_CTL_DSEQ);

    if (threadIdx.x == 0) {
        block_failed = 0;
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
        eep_epk_expand<Mode>(p, seq, (int)blockIdx.x, (int)gridDim.x, dyn, csm, &block_failed);
        return;
    }

    const int T = p.num_tokens, G = gridDim.x, S = p.send_blocks;
    const unsigned long long my_region = p.drecv_off +
                                         (unsigned long long)(parity * W + p.rank) * p.drecv_region;

    if ((int)blockIdx.x < S) {
        const int C = (T + S - 1) / S;
        const int t0 = min(T, (int)blockIdx.x * C), t1 = min(T, t0 + C);

        if (Mode == EEP_EPK_CACHED) {
            /* Slots from the handle; one warp per token, one fence per 4 tokens of a warp. */
            for (int t4 = t0 + (int)warp; t4 < t1; t4 += 4 * EEP_EPK_WARPS) {
                for (int j = 0; j < 4; j++) {
                    const int  t = t4 + j * EEP_EPK_WARPS;
                    if (t >= t1) {
                        break;
                    }
                    const int *slots = (const int *)p.h_send_slot + (long long)t * W;
                    unsigned   dm = 0;
                    int        my_id = -1;
                    float      my_w = 0.0f;

                    for (int d = 0; d < W; d++) {
                        dm |= (slots[d] >= 0 ? 1u : 0u) << d;
                    }
                    if ((int)lane < K) {
                        my_id = (int)eep_epk_id<IdxBits>(p, (long long)t * K + lane);
                        my_w  = ((const float *)p.topk_weights)[(long long)t * K + lane];
                    }
                    eep_epk_send_token(p, peer_base, my_region, t, dm,
                                       [slots](int d) { return slots[d]; }, my_id, my_w, -1,
                                       lane);
                }
                __threadfence_system();
                __syncwarp();
                for (int j = 0; j < 4; j++) {
                    const int  t = t4 + j * EEP_EPK_WARPS;
                    if (t >= t1) {
                        break;
                    }
                    const int *slots = (const int *)p.h_send_slot + (long long)t * W;
                    unsigned   dm = 0;

                    for (int d = 0; d < W; d++) {
                        dm |= (slots[d] >= 0 ? 1u : 0u) << d;
                    }
                    eep_epk_send_tags(p, peer_base, my_region, dm,
                                      [slots](int d) { return slots[d]; }, seq, lane);
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
            eep_epk_count<IdxBits>(p, 0, t0, base);
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
                    eep_epk_send_token(p, peer_base, my_region, t, dm,
                                       [mw, pw, lt, E](int d) {
                                           return pw[E + d] + __popc((unsigned)mw[E + d] & lt);
                                       }, my_id, my_w, my_pos, lane);
                }
                /* one fence per warp and round, then the tags of its tokens */
                __threadfence_system();
                __syncwarp();
                for (int q = (int)warp; q < R && r0 + q < t1; q += EEP_EPK_WARPS) {
                    const int      w = q >> 5;
                    const unsigned l = (unsigned)(q & 31), lt = (1u << l) - 1u;
                    const int     *mw = masks + w * NC, *pw = prefix + w * NC;
                    unsigned       dm = 0;

                    for (int d = 0; d < W; d++) {
                        dm |= (((unsigned)mw[E + d] >> l) & 1u) << d;
                    }
                    eep_epk_send_tags(p, peer_base, my_region, dm,
                                      [mw, pw, lt, E](int d) {
                                          return pw[E + d] + __popc((unsigned)mw[E + d] & lt);
                                      }, seq, lane);
                }
                __syncthreads();
            }
        }
    } else if ((int)blockIdx.x == S) {
        /* The counter: totals of every token, sent to every peer at once (the expanders of
           every rank wait for these words first). */
        int *base = dyn;

        if (Mode != EEP_EPK_CACHED) {
            for (int j = threadIdx.x; j < NC; j += blockDim.x) {
                base[j] = 0;
            }
            __syncthreads();
            eep_epk_count<IdxBits>(p, 0, T, base);
            __syncthreads();
            for (int d = 0; d < W; d++) {
                unsigned long long *slot = (unsigned long long *)(
                    peer_base[d] + p.counts_off + ((unsigned long long)p.rank * 2 + parity) *
                                                  p.slot_bytes);
                for (int e = threadIdx.x; e < El; e += blockDim.x) {
                    slot[EEP_EPK_SLOT_COUNTS + e] = (seq << 32) | (unsigned)base[d * El + e];
                }
            }
            __syncthreads();
        }
        if ((int)threadIdx.x < W) {
            const int           d = threadIdx.x;
            unsigned long long *slot = (unsigned long long *)(
                peer_base[d] + p.counts_off + ((unsigned long long)p.rank * 2 + parity) *
                                              p.slot_bytes);
            __threadfence_system();
            eep_st_release_sys(slot + EEP_EPK_SLOT_TOKENS,
                               (seq << 32) | (Mode != EEP_EPK_CACHED ? (unsigned)base[E + d] : 0u));
        }
        __syncthreads();
    }

    /* The last block of the launch writes the sequence back (every block has read it). */
    __syncthreads();
    if (threadIdx.x == 0) {
        unsigned int *ctr = (unsigned int *)(p.ctl + EEP_EPK_CTL_DCTR);

        if (atomicAdd(ctr, 1u) == (unsigned)G - 1u) {
            *(volatile unsigned int *)ctr = 0u; /* self-cleaning: ready for the next launch */
            *(volatile unsigned long long *)ctl_seq = seq;
            __threadfence();
        }
    }
    if ((int)blockIdx.x < S) {
        return;
    }

    if (Mode != EEP_EPK_CPU_SYNC) {
        eep_epk_expand<Mode>(p, seq, (int)blockIdx.x - S, G - S, dyn, csm, &block_failed);
        return;
    }
    /* CPU_SYNC (grid S + 1): the counter waits for the counts, publishes them on the device and
       the host. */
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
