/*
 * kernels/ep/dispatch.cuh - direct-mode dispatch (every peer an NVLink/LSA peer), one kernel.
 *
 *   template <int IdxBits, int Mode, int Phase>
 *   __device__ void eep_ep_dispatch_body(const eep_epk_params_t &p);
 *
 * Phase 0 (the dispatch kernel): blocks [0, S) send, block S counts, blocks >= S copy
 * (S = p.send_blocks; the counter copies too once it has counted):
 *   1. sender b owns tokens [b*C, (b+1)*C): it counts them per global expert and destination,
 *      publishes the counts to a device scratch (flag = the call's sequence), and sums the
 *      earlier chunks' counts into its running base;
 *   2. order: per round of scan_warps*32 tokens, each warp sets one bit per (token, expert) in
 *      shared masks (destinations by ballot); a prefix over warps gives every token its exact
 *      position among this rank's tokens for each of its experts and destinations, in token
 *      order, with no atomics on positions and no grid-wide sync;
 *   3. send: one warp per token writes its wire record to each destination rank's region (slot =
 *      its position among the tokens for that rank) through LSA pointers, 16-byte stores; after
 *      the round one system fence, then each record's tag (the call's sequence); the record to
 *      this rank is metadata only (the copy reads a local token from x);
 *   4. the counter sums every sender's chunk counts and writes each peer's count slot (tokens,
 *      per-local-expert rows), release-ordered: the counts and the call's handshake;
 *   5. copy: wait for every peer's count word, lay out offsets (warp scans), zero the padding
 *      rows, then take records from a work counter and place each once its tag holds this
 *      call's sequence, at offsets[e] + rows of e from lower sources + its position (source then
 *      token order, a function of the inputs alone);
 *   6. (at the start) one atomic per block on the control word takes a ticket and reads the
 *      sequence; the block with the last ticket zeroes the next call's work counter (one per
 *      parity) and advances the word (eep_epk_begin).
 * Buffers of up to 1024 tokens (p.lines, kernels/ep/ll_line.cuh): in 3 a token's scales and
 * metadata go first, then one fence and the tags, then its hidden bytes as flagged lines (no
 * fence, no tag); in 5 a record's metadata is read once its tag holds the sequence, its lines
 * once their flags do.
 * CACHED skips 1, 2 and the counts of 4: slots and layout come from the handle (offsets and
 * the padding rows' prefix: nothing is scanned; at decode size the records go before the
 * padding rows).  CPU_SYNC: the
 * launch is senders + counter; the counter publishes the counts (device arrays and a host-mapped
 * mirror) and the host launches Phase 1 (the copy alone, on the copy blocks) once it has sized
 * the outputs.
 *
 * Every word a peer waits for is (sequence << 32) | value, every tag the sequence itself; the
 * sequence comes from a device counter advanced by the kernel itself (graph replays stay in
 * step); parity = sequence & 1 selects the slot and region (docs/dispatch.md, section 3).
 */
#ifndef EEP_KERNELS_EP_DISPATCH_CUH
#define EEP_KERNELS_EP_DISPATCH_CUH

#include "ep_params.h"

#ifdef __CUDACC__
#ifndef EEP_EPK_EMULATION /* tests/emu/ep_kernel_shim.h stands in for NCCL's device API */
#include <nccl.h>
#include <nccl_device.h>
#endif
#ifndef EEP_EPK_DYN_SMEM
#define EEP_EPK_DYN_SMEM(name) extern __shared__ int name[]
#endif
#ifndef EEP_EPK_TEST_SEND_DELAY /* tests/emu/ep_kernel_shim.h: a slow sender */
#define EEP_EPK_TEST_SEND_DELAY(p)
#endif

#include "../common/bounded_wait.cuh"
#include "ll_line.cuh"

/* At most this many top-k ids (T * K) a call, every sending block and the counter count the
   tokens they need themselves instead of exchanging chunk counts (decode sizes).  A define, so a
   test can move it. */
#ifndef EEP_EPK_RECOUNT_MAX_IDS
#define EEP_EPK_RECOUNT_MAX_IDS 2048
#endif

/* Waits of the EP kernels read the host-mapped abort flag at most this often: up to one waiting
   warp per record at once (thousands), each read a PCIe round trip. */
#define EEP_EPK_ABORT_CHECK_NS 500000ull

/* EEP_EP_TRACE: thread 0 stamps phase k of its block (docs/dispatch.md, "Where the time goes"). */
__device__ __forceinline__ void eep_epk_stamp(const eep_epk_params_t &p, int k)
{
    if (p.trace != 0 && threadIdx.x == 0 && blockIdx.x < EEP_EPK_TRACE_BLOCKS) {
        unsigned long long *t = (unsigned long long *)p.trace + blockIdx.x * 8u;

        if (k == 0) {
            for (int i = 1; i < 8; i++) {
                t[i] = 0;
            }
        }
        t[k] = eep_globaltimer();
    }
}

/* EEP_EP_TRACE: the block's first instruction (@p began, 0 when not tracing) and now, after
   griddepcontrol.wait: a block that began late shows here, not only as a spread of phase 0 */
__device__ __forceinline__ unsigned long long eep_epk_launch_began(const eep_epk_params_t &p)
{
    return p.trace != 0 ? eep_globaltimer() : 0ull;
}

__device__ __forceinline__ void eep_epk_launch_stamp(const eep_epk_params_t &p,
                                                     unsigned long long      began)
{
    if (p.trace != 0 && threadIdx.x == 0 && blockIdx.x < EEP_EPK_TRACE_BLOCKS) {
        unsigned long long *t = (unsigned long long *)p.trace + EEP_EPK_TRACE_LAUNCH +
                                blockIdx.x * 2u;

        t[0] = began;
        t[1] = eep_globaltimer();
    }
}

template <int IdxBits>
__device__ __forceinline__ long long eep_epk_id(const eep_epk_params_t &p, long long i)
{
    if (IdxBits == 64) {
        return ((const long long *)p.topk_idx)[i];
    }
    return ((const int *)p.topk_idx)[i];
}

/* Token @p t's top-k id and weight of this lane (lane k < K: entry k; other lanes -1 and 0). */
template <int IdxBits>
__device__ __forceinline__ void eep_epk_lane_topk(const eep_epk_params_t &p, int t, unsigned lane,
                                                  int *id_p, float *w_p)
{
    const int K = EEP_EPK_K(p);

    *id_p = -1;
    *w_p  = 0.0f;
    if ((int)lane < K) {
        *id_p = (int)eep_epk_id<IdxBits>(p, (long long)t * K + lane);
        *w_p  = ((const float *)p.topk_weights)[(long long)t * K + lane];
    }
}

/* Route one token whose K ids come from get(k): its destination mask; or bad (an id outside
   [-1, E) or repeated in the token: mask 0, *bad_id_p the offending id). */
template <typename GetId>
__device__ __forceinline__ unsigned eep_epk_route_ids(GetId get, int K, int E, int El, bool *bad_p,
                                                      long long *bad_id_p)
{
    unsigned mask = 0;

    *bad_p = false;
    for (int k = 0; k < K; k++) {
        const long long e = get(k);

        if (e < -1 || e >= E) {
            *bad_p    = true;
            *bad_id_p = e;
            return 0;
        }
        if (e < 0) {
            continue;
        }
        for (int j = 0; j < k; j++) {
            if (get(j) == e) {
                *bad_p    = true;
                *bad_id_p = e;
                return 0;
            }
        }
        mask |= 1u << (unsigned)(e / El);
    }
    return mask;
}

/* Route token t from the global ids. */
template <int IdxBits>
__device__ __forceinline__ unsigned eep_epk_route(const eep_epk_params_t &p, int t, bool *bad_p,
                                                  long long *bad_id_p)
{
    const long long base = (long long)t * EEP_EPK_K(p);

    return eep_epk_route_ids([&p, base](int k) { return eep_epk_id<IdxBits>(p, base + k); },
                             EEP_EPK_K(p), p.num_experts, p.num_local, bad_p, bad_id_p);
}

/* A bad expert id: one fault record {phase, peer -1, expected token, observed id}, abort flag. */
__device__ __noinline__ void eep_epk_fault_bad(const eep_epk_params_t &p, int t, long long id)
{
    unsigned int slot = atomicAdd(p.fault_claim, 1u);

    if (slot < EEP_FAULT_MAX_RECORDS) {
        volatile eep_fault_record_t *r   = &p.fault->records[slot];
        unsigned long long           now = eep_globaltimer();

        r->phase     = EEP_PHASE_EP_BAD_EXPERT;
        r->rank      = p.rank;
        r->peer      = -1;
        r->expected  = (unsigned long long)t;
        r->observed  = (unsigned long long)id;
        r->time_ns   = now;
        r->waited_ns = 0;
        __threadfence_system();
        r->valid                                     = 1u;
        *(volatile unsigned int *)&p.fault->nrecords = slot + 1u;
    }
    __threadfence_system();
    *(volatile unsigned int *)&p.fault->abort_flag = EEP_ABORT_FAULT;
    __threadfence_system();
}

/* Token @p t found bad by a routing from staged ids (which keep no id): its offending id, found
   again from the global ids (rare), recorded as eep_epk_fault_bad does. */
template <int IdxBits>
__device__ __noinline__ void eep_epk_fault_bad_token(const eep_epk_params_t &p, int t)
{
    bool      again;
    long long bad_id = -1;

    (void)eep_epk_route<IdxBits>(p, t, &again, &bad_id);
    eep_epk_fault_bad(p, t, bad_id);
}

/* The scope of the kernels' flags and fences: the system's (peers on other GPUs, over NVLink),
   or the GPU's at one rank (EEP_EPK_W 1: every writer and reader on this GPU; MEMBAR.GPU
   instead of MEMBAR.SYS).  The JIT fixes W per variant, so the test folds away. */
__device__ __forceinline__ void eep_epk_fence_release(const eep_epk_params_t &p)
{
    if (EEP_EPK_W(p) == 1) {
        eep_fence_release_gpu();
    } else {
        eep_fence_release_sys();
    }
}

__device__ __forceinline__ void eep_epk_fence_acquire(const eep_epk_params_t &p)
{
    if (EEP_EPK_W(p) == 1) {
        eep_fence_acquire_gpu();
    } else {
        eep_fence_acquire_sys();
    }
}

__device__ __forceinline__ unsigned long long eep_epk_ld_relaxed(const eep_epk_params_t   &p,
                                                                 const unsigned long long *w)
{
    return EEP_EPK_W(p) == 1 ? eep_ld_relaxed_gpu(w) : eep_ld_relaxed_sys(w);
}

__device__ __forceinline__ void eep_epk_st_release(const eep_epk_params_t &p, unsigned long long *w,
                                                   unsigned long long v)
{
    if (EEP_EPK_W(p) == 1) {
        eep_st_release_gpu(w, v);
    } else {
        eep_st_release_sys(w, v);
    }
}

__device__ __forceinline__ unsigned char *eep_epk_peer(const eep_epk_params_t &p,
                                                       unsigned long long off, int peer)
{
    return (unsigned char *)ncclGetLsaPointer((ncclWindow_t)p.window, (size_t)off, peer);
}

__device__ __forceinline__ void eep_epk_copy4(void *dst, const void *src, unsigned bytes,
                                              unsigned lane, unsigned nlanes)
{
    for (unsigned i = lane; i < bytes / 4; i += nlanes) {
        ((unsigned int *)dst)[i] = ((const unsigned int *)src)[i];
    }
}

/* A token's destination ranks, from its handle slots (-1: not sent there). */
__device__ __forceinline__ unsigned eep_epk_slot_mask(const int *slots, int W)
{
    unsigned dm = 0;

    for (int d = 0; d < W; d++) {
        dm |= (slots[d] >= 0 ? 1u : 0u) << d;
    }
    return dm;
}

/* A token's destination ranks, from its round's masks (@p mw: its warp's row, @p l: its lane). */
__device__ __forceinline__ unsigned eep_epk_round_mask(const int *mw, int E, int W, unsigned l)
{
    unsigned dm = 0;

    for (int d = 0; d < W; d++) {
        dm |= (((unsigned)mw[E + d] >> l) & 1u) << d;
    }
    return dm;
}

/* The bounded-wait context of an EP kernel's waits (kernels/common/bounded_wait.cuh). */
__device__ __forceinline__ eep_wait_ctx eep_epk_wait_ctx(const eep_epk_params_t &p,
                                                         int                    *block_failed)
{
    eep_wait_ctx w;

    w.fault          = p.fault;
    w.fault_claim    = p.fault_claim;
    w.block_failed   = block_failed;
    w.timeout_ns     = p.timeout_ns;
    w.rank           = p.rank;
    w.abort_check_ns = EEP_EPK_ABORT_CHECK_NS;
    return w;
}

/* Wait, by the first world threads of the block (no block sync), until word @p idx of every
   peer's slot carries @p seq. */
__device__ __forceinline__ void eep_epk_wait_slot_words(const eep_epk_params_t &p,
                                                        const unsigned char *my_counts, int parity,
                                                        int idx, unsigned long long seq, int phase,
                                                        int *block_failed)
{
    const eep_wait_ctx w = eep_epk_wait_ctx(p, block_failed);
    if ((int)threadIdx.x < EEP_EPK_W(p)) {
        const unsigned long long
            *word = (const unsigned long long *)(my_counts +
                                                 ((unsigned long long)threadIdx.x * 2 + parity) *
                                                     p.slot_bytes) +
                    idx;
        /* Back off between polls: every block waits here, and a grid of tight .sys-scope
           spinners slowed the blocks still copying (time grew with the SM count). */
        unsigned polls = 0;
        if (eep_wait_geq(
                w,
                [&p, word, &polls] {
                    if (polls++ != 0) {
                        __nanosleep(128);
                    }
                    return eep_epk_ld_relaxed(p, word);
                },
                seq << 32, phase, (int)threadIdx.x)) {
            eep_epk_fence_acquire(p); /* a caller that reads on syncs the block after this */
        }
    }
}

/* eep_epk_wait_slot_words, then the block meets.  @return false when a wait gave up (fault
   recorded) or the runtime aborted. */
__device__ __forceinline__ bool eep_epk_wait_slots(const eep_epk_params_t &p,
                                                   const unsigned char *my_counts, int parity,
                                                   int idx, unsigned long long seq, int phase,
                                                   int *block_failed)
{
    eep_epk_wait_slot_words(p, my_counts, parity, idx, seq, phase, block_failed);
    __syncthreads();
    return !*(volatile int *)block_failed;
}

/* Store the tag of a record (after a system fence by the whole warp: the record's bytes, written
   by every lane, are visible to the peer before its tag). */
__device__ __forceinline__ void eep_epk_tag_store(unsigned char *rec, unsigned tag_off,
                                                  unsigned long long seq)
{
    eep_st_relaxed_sys((unsigned long long *)(rec + tag_off), seq);
}

/* Wait until a record's tag @p tag reads @p seq (the poll backs off after 64 tries), then
   acquire: the record's bytes, stored before the tag's release, are visible.  @return false
   when the wait gave up (the fault is recorded; eep_wait_geq). */
__device__ __forceinline__ int eep_epk_wait_tag(const eep_epk_params_t &p, const eep_wait_ctx &w,
                                                const unsigned long long *tag,
                                                unsigned long long seq, int phase, int peer)
{
    unsigned polls = 0;
    auto     poll  = [&p, tag, &polls] {
        if (polls++ > 64) {
            __nanosleep(64);
        }
        return eep_epk_ld_relaxed(p, tag);
    };

    const int ok = eep_wait_geq(w, poll, seq, phase, peer);

    if (ok) {
        eep_epk_fence_acquire(p);
    }
    return ok;
}

/* Units of a token's hidden bytes that the senders and copiers split: flagged lines (LL), or
   16-byte vectors. */
template <bool LL>
__device__ __forceinline__ unsigned eep_epk_units(const eep_epk_params_t &p)
{
    const unsigned nv = EEP_EPK_HB(p) / 16u;

    return LL ? (unsigned)eep_ll_lines((int)nv) : nv;
}

/* Shared state of the expanders (the copy from received records to expert-major rows). */
struct eep_epk_copy_smem {
    int n[EEP_EPK_MAX_WORLD]; /* records from each source */
    int counts[256];
    int offsets[257];
    int pad_base[257];            /* padding rows of experts < e */
    int warp_off[8], warp_pad[8]; /* eep_epk_layout_scan: per-warp totals (El <= 256) */
};
/* eep_epk_layout_scan: a warp for each 32 of 256 local experts */
static_assert(EEP_EPK_WARPS >= 256 / 32, "eep_epk_layout_scan needs 8 warps a block");

__device__ __forceinline__ int eep_epk_warp_incl_scan(int v, unsigned lane)
{
#pragma unroll
    for (int o = 1; o < 32; o <<= 1) {
        const int u = __shfl_up_sync(0xffffffffu, v, o);

        v += (int)lane >= o ? u : 0;
    }
    return v;
}

/*
 * The block fills sm.offsets and sm.pad_base (the padding rows of experts < e) from sm.counts:
 * warp w scans experts [32w, 32w + 32) (padded sizes and padding rows), the warps' totals meet
 * in shared memory, then every expert adds the totals of the warps before its own.  (One warp
 * looping over 256 experts, 8 dependent scans, took ~0.5 us on the copy blocks' path; a serial
 * loop by one thread ~5 us; one warp with 8 experts a lane and one scan, ~0.5 us more than
 * this at T 128, its 8 divisions by the alignment in a row.)  Every thread of the block calls
 * this; the caller syncs before and after.
 */
__device__ __forceinline__ void eep_epk_layout_scan(eep_epk_copy_smem &sm, int El, int alignment)
{
    const unsigned lane = threadIdx.x & 31u;
    const int      warp = (int)(threadIdx.x >> 5), NW = (El + 31) / 32;
    const int      e        = (int)threadIdx.x;
    int            excl_off = 0, excl_pad = 0;

    if (warp < NW) {
        const int c      = e < El ? sm.counts[e] : 0;
        const int a      = e < El ? (c + alignment - 1) / alignment * alignment : 0;
        const int incl   = eep_epk_warp_incl_scan(a, lane);
        const int pad    = a - c;
        const int incl_p = eep_epk_warp_incl_scan(pad, lane);

        excl_off = incl - a;
        excl_pad = incl_p - pad;
        if (lane == 31) {
            sm.warp_off[warp] = incl;
            sm.warp_pad[warp] = incl_p;
        }
    }
    __syncthreads();
    if (warp < NW) {
        int carry_off = 0, carry_pad = 0;

        for (int w = 0; w < warp; w++) {
            carry_off += sm.warp_off[w];
            carry_pad += sm.warp_pad[w];
        }
        if (e < El) {
            sm.offsets[e]  = carry_off + excl_off;
            sm.pad_base[e] = carry_pad + excl_pad;
        }
        if (e == El - 1) { /* the last warp: its totals end the arrays */
            sm.pad_base[El] = carry_pad + sm.warp_pad[warp];
            sm.offsets[El]  = carry_off + sm.warp_off[warp];
        }
    }
}

/*
 * The copy of received records to expert-major rows (eep_epk_expand; sm.n holds the records
 * from each source, and, unless CACHED, sm.offsets the layout and @p src_prefix the rows of
 * each expert from lower sources).  Warp by warp, no block sync.  @return false when a wait
 * gave up (the fault is recorded; the warp copied no more).
 */
template <int Mode, bool LL>
__device__ __forceinline__ bool
eep_epk_copy_records(const eep_epk_params_t &p, unsigned long long seq, int xb, int XB,
                     const int *src_prefix, const eep_epk_copy_smem &sm, int *block_failed)
{
    const int            parity = (int)(seq & 1ull);
    const int            El = p.num_local, K = EEP_EPK_K(p), lo = p.rank * El;
    const unsigned       lane = threadIdx.x & 31u, warp = threadIdx.x >> 5;
    const unsigned char *mine   = eep_epk_peer(p, 0, p.rank);
    const int            gwarps = XB * EEP_EPK_WARPS, gw = xb * EEP_EPK_WARPS + (int)warp;

    /* Records: one warp each, sources interleaved so that the local records (which land first)
       do not all go to the first warps. */
    const eep_wait_ctx w = eep_epk_wait_ctx(p, block_failed);
    /* Taken dynamically (this parity's counter, zeroed by the previous call), in the order slot
       0 of every source, slot 1 of every source, ...: a warp that would wait for a late record
       does not hold back others behind a static share. */
    int max_n = 0, total = 0;
    for (int s = 0; s < EEP_EPK_W(p); s++) {
        max_n = max(max_n, sm.n[s]);
        total += sm.n[s];
    }
    /* Few records (decode): each is split into up to 16 pieces of its hidden bytes, one warp
       each, so that a record is not copied to its rows by one warp alone (16 rather than 8:
       one rank, T 128, 14 pieces a record, pair 25.7 -> 25.1 us with one_each below; two ranks
       at T 128 have ~8 warps a record either way).  Many records (prefill): a piece is at most
       one round of the copy loop (256 vectors, or 32 lines), so that the last pieces taken end
       soon after the others (a whole record is ~115 KB of row stores at K 8: one rank, T 4096,
       bf16, the copy blocks ended 114-158 us with whole records; 4 pieces: dispatch 3-4 %
       faster, every mode). */
    const unsigned nu     = eep_epk_units<LL>(p);                   /* lines, or vectors */
    const unsigned round  = LL ? 8u * EEP_LL_WARP_LINES : 32u * 8u; /* units of one round */
    const int      rounds = (int)((nu + round - 1) / round);
    const int      CHK    = max(min(rounds, 16), min(16, total > 0 ? gwarps / total : 1));
    const int      span   = max_n * EEP_EPK_W(p) * CHK;
    unsigned int  *work   = (unsigned int *)(p.ctl + EEP_EPK_CTL_DWORK) + parity;
    /* No more pieces than warps (decode): warp gw takes piece gw, no counter (every warp would
       otherwise take one same-address atomic, then a second to learn that nothing is left; a
       dynamic share with 16 pieces gained about half as much). */
    const bool one_each = span <= gwarps;
    for (int it = 0;; it++) {
        int q = 0;

        if (one_each) {
            if (it > 0) {
                break;
            }
            q = gw;
        } else {
            if (lane == 0) {
                q = (int)atomicAdd(work, 1u);
            }
            q = __shfl_sync(0xffffffffu, q, 0);
        }
        if (q >= span) {
            break;
        }
        const int c = q % CHK, s = (q / CHK) % EEP_EPK_W(p), i = q / CHK / EEP_EPK_W(p);
        if (i >= sm.n[s]) {
            continue;
        }
        const long long      rec = (long long)s * p.max_tokens + i;
        const unsigned char *row = mine + p.drecv_off +
                                   (unsigned long long)(parity * EEP_EPK_W(p) + s) *
                                       p.drecv_region +
                                   (unsigned long long)i * p.token_bytes;
        const unsigned long long *tag = (const unsigned long long *)(row + p.tag_off);
        int                       ok  = 1;

        if (lane == 0) {
            ok = eep_epk_wait_tag(p, w, tag, seq, EEP_PHASE_EP_DISPATCH, s);
        }
        if (!__shfl_sync(0xffffffffu, ok, 0)) {
            return false;
        }
        __syncwarp(); /* orders every lane's reads of the record after lane 0's acquire */

        const int   *ids   = (const int *)(row + p.meta_off);
        const float *wts   = (const float *)(ids + K);
        const int   *pos   = ids + 2 * K + 1;
        int          my_id = -1, my_row = -1, my_local = 0;
        float        my_w = 0.0f;

        if ((int)lane < K) {
            my_id    = ids[lane];
            my_w     = wts[lane];
            my_local = my_id >= lo && my_id < lo + El;
            if (my_local) {
                const int e = my_id - lo;

                my_row = Mode == EEP_EPK_CACHED
                             ? ((const int *)p.h_recv_rows)[rec * K + lane]
                             : sm.offsets[e] + src_prefix[s * El + e] + pos[lane];
            }
        }
        /* Handle: rows and weights per lane, token, ordinal among the token's ranks. */
        unsigned dst_bit = ((int)lane < K && my_id >= 0) ? 1u << (unsigned)(my_id / El) : 0u;
        unsigned dmask   = __reduce_or_sync(0xffffffffu, dst_bit);
        if ((int)lane < K && c == 0) {
            if (Mode != EEP_EPK_CACHED) {
                ((int *)p.h_recv_rows)[rec * K + lane] = my_row;
            }
            ((float *)p.h_recv_w)[rec * K + lane] = my_local ? my_w : 0.0f;
        }
        if (lane == 0 && c == 0 && Mode != EEP_EPK_CACHED) {
            ((int *)p.h_recv_tok)[rec] = ids[2 * K];
            ((int *)p.h_recv_ord)[rec] = __popc(dmask & ((1u << p.rank) - 1u));
        }
        /* A remote record's hidden bytes and scales came with it; this rank's own tokens are
           read from x (their records carry the metadata only). */
        const long long      t_src  = ids[2 * K];
        const bool           local  = s == p.rank;
        const unsigned char *data   = local ? (const unsigned char *)p.x +
                                                (unsigned long long)t_src * EEP_EPK_HB(p)
                                            : row;
        const unsigned char *scales = local ? (const unsigned char *)p.x_scales +
                                                  (unsigned long long)t_src * p.scale_bytes
                                            : row + p.scale_off;
        {
            const uint4 *s4 = (const uint4 *)data;
            const int    nv = (int)(EEP_EPK_HB(p) / 16);
            /* piece c of CHK: units [ub, ue) (lines, or vectors) */
            const unsigned ub        = (unsigned)((unsigned long long)nu * c / CHK);
            const unsigned ue        = (unsigned)((unsigned long long)nu * (c + 1) / CHK);
            unsigned       rows_mask = __ballot_sync(0xffffffffu, my_row >= 0);
            /* a flagged record's lines (8 x 4 a round), or a plain one's (or x's) vectors (8 per
               lane a round) */
            const bool lines = LL && !local;
            auto       vec   = [&](unsigned b0, int u) {
                if (lines) { /* 8 x 4 lines a round */
                    const int line = eep_ll_round_line((int)b0, u, lane);
                    return line < (int)ue ? eep_ll_vector(line, lane, nv) : -1;
                }
                const int v = (int)(b0 + lane) + 32 * u;
                return v < (LL ? min((int)ue * EEP_LL_DATA_SLOTS, nv) : (int)ue) ? v : -1;
            };

            /* the loop runs the same number of times on every lane (its body shuffles with the
               full mask): a piece narrower than 32 vectors, e.g. fp8 H 2048 split 8 ways, left
               lanes out and hung the warp */
            for (unsigned b0 = LL && local ? ub * EEP_LL_DATA_SLOTS : ub;
                 b0 < (LL && local ? min(ue * EEP_LL_DATA_SLOTS, (unsigned)nv) : ue);
                 b0 += lines ? 8u * EEP_LL_WARP_LINES : 32u * 8u) {
                uint4 r8[8];

                if (lines) {
                    if (!eep_warp_wait_geq(
                            w,
                            [&] {
                                unsigned long long f = ~0ull;
#pragma unroll
                                for (int u = 0; u < 8; u++) {
                                    const int    line = eep_ll_round_line((int)b0, u, lane);
                                    const uint4 *slot = eep_ll_slot((unsigned char *)row, line,
                                                                    lane);

                                    f = min(f, eep_ll_load(slot, r8[u], line < (int)ue, lane));
                                }
                                return f;
                            },
                            seq, EEP_PHASE_EP_DISPATCH, s)) {
                        return false;
                    }
                } else {
#pragma unroll
                    for (int u = 0; u < 8; u++) {
                        if (vec(b0, u) >= 0) {
                            r8[u] = s4[vec(b0, u)];
                        }
                    }
                }
                for (unsigned m = rows_mask; m != 0; m &= m - 1) {
                    const int r  = __shfl_sync(0xffffffffu, my_row, __ffs(m) - 1);
                    uint4    *d4 = (uint4 *)((unsigned char *)p.recv_x +
                                          (unsigned long long)r * EEP_EPK_HB(p));
#pragma unroll
                    for (int u = 0; u < 8; u++) {
                        if (vec(b0, u) >= 0) {
                            d4[vec(b0, u)] = r8[u];
                        }
                    }
                }
            }
            for (unsigned m = c == 0 ? rows_mask : 0u; m != 0; m &= m - 1) {
                const int r = __shfl_sync(0xffffffffu, my_row, __ffs(m) - 1);

                if (p.scale_bytes != 0) {
                    eep_epk_copy4((unsigned char *)p.recv_x_scales +
                                      (unsigned long long)r * p.scale_bytes,
                                  scales, p.scale_bytes, lane, 32);
                }
                if ((int)lane < K) {
                    ((int *)p.recv_topk_idx)[(long long)r * K + lane] = my_local ? my_id - lo : -1;
                    ((float *)p.recv_topk_weights)[(long long)r * K + lane] = my_local ? my_w
                                                                                       : 0.0f;
                }
            }
        }
    }
    return true;
}

/*
 * The expanders: received records -> expert-major outputs (+ handle), padding rows zeroed.
 * Block @p xb of @p XB.  Waits for every peer's count word (also the call's handshake, see
 * docs/dispatch.md section 3), computes the layout, zeroes the padding rows, then takes records
 * one warp each and copies each as soon as its tag shows this call's sequence: rows are placed
 * while later records still travel, and no "all landed" signal is needed.
 */
template <int Mode, bool LL>
__device__ void eep_epk_expand(const eep_epk_params_t &p, unsigned long long seq, int xb, int XB,
                               int *src_prefix /* [world * El] shared */, eep_epk_copy_smem &sm,
                               int *block_failed)
{
    const int            parity = (int)(seq & 1ull);
    const int            El = p.num_local, K = EEP_EPK_K(p);
    const unsigned       lane = threadIdx.x & 31u, warp = threadIdx.x >> 5;
    unsigned char       *mine      = eep_epk_peer(p, 0, p.rank);
    const unsigned char *my_counts = mine + p.counts_off;

    /* CACHED needs nothing from the peers to begin (the layout is the handle's, a record is
       read once its tag holds the sequence, this rank's tokens come from x): its blocks wait for
       the peers' count words last, which the parity argument (docs/dispatch.md, section 3)
       needs before the kernel ends.  Waiting first cost every cached call ~3.5 us at T 128. */
    if (Mode != EEP_EPK_CACHED && !eep_epk_wait_slots(p, my_counts, parity, EEP_EPK_SLOT_TOKENS,
                                                      seq, EEP_PHASE_EP_DISPATCH, block_failed)) {
        return;
    }
    eep_epk_stamp(p, 3);
    /* Counts and offsets: from the peers' slots, or the handle (CACHED: the whole layout, the
       padding rows' prefix included, so nothing is scanned: the scan took ~1.2 us at T 128).
       A cached decode-size call (flagged records) copies its records before the padding rows,
       their rows being the handle's; at prefill size the padding rows go first (records
       first: one rank, T 4096 alignment 128, 207 -> 211 us). */
    constexpr bool rows_first = Mode == EEP_EPK_CACHED && LL;
    if (Mode == EEP_EPK_CACHED) {
        for (int s = threadIdx.x; s < EEP_EPK_W(p); s += blockDim.x) {
            sm.n[s] = ((const int *)p.h_recv_n)[s];
        }
        for (int e = threadIdx.x; e < El; e += blockDim.x) {
            sm.counts[e] = ((const int *)p.h_counts)[e];
        }
        for (int e = threadIdx.x; e <= El; e += blockDim.x) {
            sm.offsets[e]  = ((const int *)p.h_offsets)[e];
            sm.pad_base[e] = ((const int *)p.h_offsets)[El + 1 + e];
        }
    } else {
        for (int s = threadIdx.x; s < EEP_EPK_W(p); s += blockDim.x) {
            const unsigned long long *slot =
                (const unsigned long long *)(my_counts +
                                             ((unsigned long long)s * 2 + parity) * p.slot_bytes);
            sm.n[s] = (int)(unsigned)(slot[EEP_EPK_SLOT_TOKENS] & 0xffffffffull);
        }
        for (int e = threadIdx.x; e < El; e += blockDim.x) {
            int running = 0;

#pragma unroll 8
            for (int s = 0; s < EEP_EPK_W(p); s++) {
                const unsigned long long *slot =
                    (const unsigned long long *)(my_counts + ((unsigned long long)s * 2 + parity) *
                                                                 p.slot_bytes);
                src_prefix[s * El + e] = running;
                running += (int)(unsigned)(slot[EEP_EPK_SLOT_COUNTS + e] & 0xffffffffull);
            }
            sm.counts[e] = running;
        }
    }
    __syncthreads();
    if (Mode != EEP_EPK_CACHED) {
        eep_epk_layout_scan(sm, El, p.alignment);
        __syncthreads();
    }
    if (rows_first) {
        if (!eep_epk_copy_records<Mode, LL>(p, seq, xb, XB, src_prefix, sm, block_failed)) {
            return; /* no block sync follows */
        }
        eep_epk_stamp(p, 6);
    }
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
                ((int *)p.h_offsets)[e]          = sm.offsets[e];
                ((int *)p.h_offsets)[El + 1 + e] = sm.pad_base[e];
            }
        }
        if (Mode != EEP_EPK_CACHED) {
            for (int s = threadIdx.x; s < EEP_EPK_W(p); s += blockDim.x) {
                ((int *)p.h_recv_n)[s] = sm.n[s];
            }
        }
    }

    const int gwarps = XB * EEP_EPK_WARPS, gw = xb * EEP_EPK_WARPS + (int)warp;

    eep_epk_stamp(p, 4);

    /* Padding rows, before the records unless rows_first (they need no data: the records keep
       arriving meanwhile), one warp per row: x = 0, scales = 0 (unless skip_pad_x), ids = -1,
       weights = 0.  A row's expert by binary search in pad_base from the previous row's (j only
       grows): a linear walk from expert 0 cost ~60 us at one rank, T 128, 256 experts,
       alignment 128 (31744 rows). */
    int e = 0; /* pad_base[e] <= j, for every j of this warp from here on */
    for (int j = gw; j < sm.pad_base[El]; j += gwarps) {
        int hi = El; /* pad_base[hi] > j */

        while (hi - e > 1) {
            const int mid = (e + hi) >> 1;

            if (sm.pad_base[mid] <= j) {
                e = mid;
            } else {
                hi = mid;
            }
        }
        const long long r = sm.offsets[e] + sm.counts[e] + (j - sm.pad_base[e]);
        uint4 *x4 = (uint4 *)((unsigned char *)p.recv_x + (unsigned long long)r * EEP_EPK_HB(p));

        for (unsigned v = lane; v < (p.skip_pad_x ? 0u : EEP_EPK_HB(p) / 16); v += 32) {
            x4[v] = make_uint4(0, 0, 0, 0);
        }
        for (unsigned v = lane; v < (p.skip_pad_x ? 0u : p.scale_bytes / 4); v += 32) {
            ((unsigned int *)((unsigned char *)p.recv_x_scales +
                              (unsigned long long)r * p.scale_bytes))[v] = 0;
        }
        for (int k = lane; k < K; k += 32) {
            ((int *)p.recv_topk_idx)[r * K + k]       = -1;
            ((float *)p.recv_topk_weights)[r * K + k] = 0.0f;
        }
    }

    eep_epk_stamp(p, 5);
    if (!rows_first &&
        !eep_epk_copy_records<Mode, LL>(p, seq, xb, XB, src_prefix, sm, block_failed)) {
        return;
    }
    if (Mode == EEP_EPK_CACHED) { /* no block sync: nothing follows, and failed warps left */
        eep_epk_wait_slot_words(p, my_counts, parity, EEP_EPK_SLOT_TOKENS, seq,
                                EEP_PHASE_EP_DISPATCH, block_failed);
    }
    if (!rows_first) {
        eep_epk_stamp(p, 6);
    }
}

/* The scales (not to this rank) and the metadata of token @p t to every destination in @p dm. */
template <typename SlotOf>
__device__ __forceinline__ void
eep_epk_send_meta(const eep_epk_params_t &p, unsigned char *const *peer_base,
                  unsigned long long my_region, int t, unsigned dm, SlotOf slot_of, int my_id,
                  float my_w, int my_pos, unsigned lane)
{
    const int K = EEP_EPK_K(p);

    for (unsigned m = dm; m != 0; m &= m - 1) {
        const int      d   = __ffs(m) - 1;
        unsigned char *rec = peer_base[d] + my_region +
                             (unsigned long long)slot_of(d) * p.token_bytes;

        if (p.scale_bytes != 0 && d != p.rank) {
            eep_epk_copy4(rec + p.scale_off,
                          (const unsigned char *)p.x_scales + (unsigned long long)t * p.scale_bytes,
                          p.scale_bytes, lane, 32);
        }
        int   *ids = (int *)(rec + p.meta_off);
        float *wts = (float *)(ids + K);
        if ((int)lane < K) {
            ids[lane]             = my_id;
            wts[lane]             = my_w;
            ids[2 * K + 1 + lane] = my_pos;
        }
        if (lane == 0) {
            ids[2 * K] = t;
        }
    }
}

/* The tags of one token's records (after the warp's system fence). */
template <typename SlotOf>
__device__ __forceinline__ void
eep_epk_send_tags(const eep_epk_params_t &p, unsigned char *const *peer_base,
                  unsigned long long my_region, unsigned dm, SlotOf slot_of, unsigned long long seq,
                  unsigned lane)
{
    for (unsigned m = dm; m != 0; m &= m - 1) {
        const int d = __ffs(m) - 1;

        if ((int)lane == d % 32) {
            eep_epk_tag_store(peer_base[d] + my_region +
                                  (unsigned long long)slot_of(d) * p.token_bytes,
                              p.tag_off, seq);
        }
    }
}

/*
 * Units [ub, ue) of token @p t's hidden bytes to every destination in @p dm but this rank (slot
 * per destination from @p slot_of), loaded once, 8 per lane in flight; with @p meta also the
 * scales (not to this rank) and the metadata (to every destination).  This rank's own record is
 * metadata only: its copy blocks read the hidden bytes and scales from x itself (no staging
 * write and read back of a local token).
 * Plain records (!LL): the units are 16-byte vectors; no fence: the caller fences, then stores
 * the tags.  Flagged records (LL, decode size): the units are lines of the record's hidden area
 * (kernels/ep/ll_line.cuh), each stored with the call's sequence @p seq, so they need no fence
 * and no tag; the scales and metadata go first, then one fence and the tags (the copy blocks
 * wait for those before they know the rows), then the lines.
 */
template <bool LL, typename SlotOf>
__device__ __forceinline__ void
eep_epk_send_token(const eep_epk_params_t &p, unsigned char *const *peer_base,
                   unsigned long long my_region, int t, unsigned dm, SlotOf slot_of, int my_id,
                   float my_w, int my_pos, unsigned lane, unsigned ub, unsigned ue, bool meta,
                   unsigned long long seq)
{
    const uint4   *s4     = (const uint4 *)((const unsigned char *)p.x +
                                      (unsigned long long)t * EEP_EPK_HB(p));
    const unsigned remote = dm & ~(1u << (unsigned)p.rank);
    const int      nv     = (int)(EEP_EPK_HB(p) / 16u);

    if (LL && meta) {
        eep_epk_send_meta(p, peer_base, my_region, t, dm, slot_of, my_id, my_w, my_pos, lane);
        eep_epk_fence_release(p);
        __syncwarp();
        eep_epk_send_tags(p, peer_base, my_region, dm, slot_of, seq, lane);
    }
    EEP_EPK_TEST_SEND_DELAY(p);
    /* 8 vectors per lane a round (LL: 8 x 4 lines; every lane runs every round, the line
       stores meet) */
    constexpr int UN = 8;
    for (unsigned b0 = ub; remote != 0 && b0 < ue; b0 += LL ? UN * EEP_LL_WARP_LINES : 32u * UN) {
        uint4 r[UN];
#pragma unroll
        for (int u = 0; u < UN; u++) {
            const int line = eep_ll_round_line((int)b0, u, lane);
            const int v    = LL ? (line < (int)ue ? eep_ll_vector(line, lane, nv) : -1)
                                : ((int)(b0 + lane) + 32 * u < (int)ue ? (int)(b0 + lane) + 32 * u
                                                                       : -1);
            if (v >= 0) {
                r[u] = s4[v];
            } else if (LL) {
                r[u] = make_uint4(0u, 0u, 0u, 0u);
            }
        }
        for (unsigned m = remote; m != 0; m &= m - 1) {
            const int      d   = __ffs(m) - 1;
            unsigned char *rec = peer_base[d] + my_region +
                                 (unsigned long long)slot_of(d) * p.token_bytes;
#pragma unroll
            for (int u = 0; u < UN; u++) {
                if (LL) {
                    const int line = eep_ll_round_line((int)b0, u, lane);

                    eep_ll_store(eep_ll_slot(rec, line, lane), r[u], seq, line < (int)ue, lane);
                } else if ((int)(b0 + lane) + 32 * u < (int)ue) {
                    ((uint4 *)rec)[b0 + lane + 32u * u] = r[u];
                }
            }
        }
    }
    if (!LL && meta) {
        eep_epk_send_meta(p, peer_base, my_region, t, dm, slot_of, my_id, my_w, my_pos, lane);
    }
}

/* Pieces per token when a sending block sends @p n tokens at once: a short run (decode) splits
   each token's hidden bytes over up to 8 warps; else 1 (one warp a token). */
__device__ __forceinline__ int eep_epk_pieces(int n)
{
    return n > 0 && n * 2 <= EEP_EPK_WARPS ? min(8, EEP_EPK_WARPS / n) : 1;
}

/* This warp sent one of a token's @p P pieces: fence it; the warp that finishes the token's last
   piece (@p done, shared, counts them) stores the token's tags. */
template <typename SlotOf>
__device__ __forceinline__ void
eep_epk_piece_sent(const eep_epk_params_t &p, unsigned char *const *peer_base,
                   unsigned long long my_region, unsigned dm, SlotOf slot_of,
                   unsigned long long seq, unsigned lane, int *done, int P)
{
    int last = 0;

    eep_epk_fence_release(p);
    __syncwarp();
    if (lane == 0) {
        last = atomicAdd(done, 1) == P - 1;
    }
    if (__shfl_sync(0xffffffffu, last, 0)) {
        eep_epk_fence_release(p); /* after seeing the other pieces' fences */
        eep_epk_send_tags(p, peer_base, my_region, dm, slot_of, seq, lane);
    }
}

/* The start of every dispatch/combine launch, thread 0 of each block: one atomic on the
   kernel's control word at @p word_off, (sequence of the last launch << 32) | blocks of this
   launch started so far, both takes the block's ticket and reads the call's sequence (the old
   word's high half + 1, which @return gives).  The block that takes the last ticket zeroes the
   other parity's work counter at @p work_off (the next call's: this call's was zeroed by the
   previous one), then advances the word to (sequence << 32) | 0 for the next launch, which the
   stream starts only after this one ends.  A read of the sequence, a fence and a ticket atomic
   cost the block's first barrier about a microsecond more (2026-11-30 trace). */
__device__ __forceinline__ unsigned long long eep_epk_begin(const eep_epk_params_t &p,
                                                            unsigned word_off, unsigned work_off)
{
    unsigned long long      *word = (unsigned long long *)(p.ctl + word_off);
    const unsigned long long old  = atomicAdd(word, 1ull);
    const unsigned long long seq  = (old >> 32) + 1ull;

    if ((unsigned)(old & 0xffffffffull) == gridDim.x - 1u) {
        const unsigned other = (unsigned)((seq & 1ull) ^ 1ull);

        *(volatile unsigned int *)(p.ctl + work_off + 4u * other) = 0u;
        atomicAdd(word, (1ull << 32) - (unsigned long long)gridDim.x);
    }
    return seq;
}

/* Stage the ids of tokens [c0, c0 + n) into shared memory as int32 (-2: out of range), 8 loads in
   flight per thread (a load-then-store loop waits for every load: ~1 us each).  Every thread of
   the block calls this; the caller syncs after. */
template <int IdxBits>
__device__ __forceinline__ void eep_epk_stage_ids(const eep_epk_params_t &p, int c0, int n,
                                                  int *stage)
{
    const int K = EEP_EPK_K(p), E = p.num_experts, nk = n * K;

    for (int i0 = threadIdx.x; i0 < nk; i0 += blockDim.x * 8) {
        long long v[8];
#pragma unroll
        for (int u = 0; u < 8; u++) {
            const int i = i0 + u * (int)blockDim.x;

            v[u] = i < nk ? eep_epk_id<IdxBits>(p, (long long)c0 * K + i) : 0;
        }
#pragma unroll
        for (int u = 0; u < 8; u++) {
            const int i = i0 + u * (int)blockDim.x;

            if (i < nk) {
                stage[i] = (v[u] < -1 || v[u] >= E) ? -2 : (int)v[u];
            }
        }
    }
}

/* Lanes a token's group has when its K ids go one to a lane: K rounded up to a power of two. */
__device__ __forceinline__ int eep_epk_group_lanes(int K)
{
    return K <= 1 ? 1 : K <= 2 ? 2 : K <= 4 ? 4 : K <= 8 ? 8 : K <= 16 ? 16 : 32;
}

/*
 * Lane @p k of a token's group of @p G lanes (@p on: this (token, k) exists) routing the token
 * from its staged ids @p tid (out-of-range ids staged as -2): the lane's id in *@p e_p (-1:
 * none), the token's destinations (the group's OR) in *@p m_p.  @return whether the token is bad
 * (an id out of range, or repeated: each lane checks its id against the token's earlier ones),
 * alike on every lane of the group.  Every lane of the warp calls this (a ballot and shuffles).
 */
__device__ __forceinline__ bool eep_epk_group_route(const int *tid, bool on, unsigned k, int El,
                                                    int G, int *e_p, unsigned *m_p)
{
    const unsigned lane  = threadIdx.x & 31u;
    const unsigned gmask = (G == 32 ? 0xffffffffu : ((1u << G) - 1u)) << (lane - k);
    const int      e     = on ? tid[k] : -1;
    bool           bad   = on && e < -1;
    unsigned       m;

    for (int i = 0; on && e >= 0 && i < (int)k; i++) {
        bad |= tid[i] == e;
    }
    m = !on || e < 0 ? 0u : 1u << (unsigned)(e / El);
    /* any lane bad -> every id of the token dropped; destinations OR'ed */
    bad = (__ballot_sync(0xffffffffu, bad) & gmask) != 0;
    for (int o = 1; o < G; o <<= 1) {
        m |= __shfl_xor_sync(0xffffffffu, m, o);
    }
    *e_p = e;
    *m_p = m;
    return bad;
}

/*
 * The senders' routing of one warp's @p nt (1..32) tokens from their staged ids (@p ids: token
 * 0's K ids, then token 1's, ...; out-of-range ids staged as -2), token j being @p t0 + j: a
 * group of lanes a token (eep_epk_group_route, as eep_epk_count has it; 32 / G tokens a pass);
 * each valid id sets bit j of its expert's order mask (@p mw, shared).  A bad token is reported
 * and dropped.  @return in lane L: token L's destination mask (0: bad or no token).  (One thread
 * a token, its K ids one after another, was a chain of K*K/2 shared loads and K atomics.)  Every
 * lane of the warp calls this.
 */
template <int IdxBits>
__device__ __forceinline__ unsigned eep_epk_route_warp(const eep_epk_params_t &p, const int *ids,
                                                       int nt, int t0, int *mw, unsigned lane)
{
    const int      K = EEP_EPK_K(p), G = eep_epk_group_lanes(K);
    const int      TPW  = 32 / G; /* tokens a pass */
    const unsigned k    = lane % (unsigned)G;
    unsigned       mine = 0;

    for (int q0 = 0; q0 < nt; q0 += TPW) {
        const int  q = q0 + (int)(lane / (unsigned)G);
        int        e;
        unsigned   m;
        const bool bad = eep_epk_group_route(ids + q * K, q < nt && (int)k < K, k, p.num_local, G,
                                             &e, &m);

        if (!bad && e >= 0) {
            atomicOr(&mw[e], (int)(1u << (unsigned)q));
        }
        if (bad && k == 0 && q < nt) {
            eep_epk_fault_bad_token<IdxBits>(p, t0 + q);
        }
        /* token L of this pass (q0 <= L < q0 + TPW) is in lane (L - q0) * G */
        const unsigned got = __shfl_sync(0xffffffffu, bad ? 0u : m,
                                         (unsigned)(((int)lane - q0) * G) & 31u);
        if ((int)lane >= q0 && (int)lane < q0 + TPW) {
            mine = got;
        }
    }
    return mine;
}

/*
 * The decode-size order in one pass (eep_epk_dispatch, "one_pass"): tokens [0, @p n) from their
 * staged ids (@p ids: token 0's K ids, then token 1's, ...; out-of-range ids staged as -2), routed
 * by every warp of the block, a group of G lanes a token (eep_epk_group_route): each valid id
 * sets bit t & 31 of its expert's mask in row t >> 5 of @p masks (NC = E + world ints a row,
 * zeroed by the caller), and the token's first lane its destinations' bits.  A bad token sets
 * nothing; it is reported when it is one of this block's own, [@p r0, @p r1).  So one pass over
 * the block's own tokens and those before them gives both their counts and their order, where a
 * count of the earlier tokens followed by a round over the own ones took two (each a staging of
 * ids, a route and block syncs).  Every thread of the block calls this; the caller syncs after.
 */
template <int IdxBits>
__device__ void eep_epk_route_block(const eep_epk_params_t &p, const int *ids, int n, int r0,
                                    int r1, int *masks, int NC)
{
    const int      K = EEP_EPK_K(p), E = p.num_experts, G = eep_epk_group_lanes(K);
    const int      TPW  = 32 / G; /* tokens a warp and pass */
    const unsigned lane = threadIdx.x & 31u, k = lane % (unsigned)G;

    for (int j0 = 0; j0 < n; j0 += (int)(blockDim.x / 32u) * TPW) {
        const int  t  = j0 + (int)(threadIdx.x >> 5) * TPW + (int)(lane / (unsigned)G);
        const bool on = t < n && (int)k < K;
        int        e;
        unsigned   m;
        const bool bad = eep_epk_group_route(ids + (on ? t * K : 0), on, k, p.num_local, G, &e, &m);
        int       *mw  = masks + (t >> 5) * NC;
        const int  bit = (int)(1u << (unsigned)(t & 31));

        if (!bad && e >= 0) {
            atomicOr(&mw[e], bit);
        }
        if (t < n && k == 0 && !bad) {
            for (unsigned dm = m; dm != 0; dm &= dm - 1) {
                atomicOr(&mw[E + __ffs(dm) - 1], bit);
            }
        }
        if (bad && k == 0 && t >= r0 && t < r1) {
            eep_epk_fault_bad_token<IdxBits>(p, t);
        }
    }
}

/*
 * Count, per global expert and per destination, the tokens in [t_begin, t_end) into @p base
 * (shared, NC = E + world counters, zeroed here first).  The ids go through shared memory
 * (@p stage, @p stage_ints) in chunks, loaded coalesced by the whole block: routing straight
 * from global memory was a chain of ~K*K/2 dependent loads per token (tens of us at T 4096).
 * One lane per (token, k) in groups of G = K rounded up to a power of two: a lane checks its id
 * against the token's earlier ones (independent loads, no early exit), the group agrees by
 * shuffles on "bad" and on the destination mask, and each valid id takes one shared atomic.  A
 * thread per token (its K ids one after another, each compared with the ones before) took
 * ~2.5 us for 122 tokens (2 x H200, 2026-12-01 trace).  Every thread of the block calls this.
 */
template <int IdxBits>
__device__ void eep_epk_count(const eep_epk_params_t &p, int t_begin, int t_end, int *base,
                              int *stage, int stage_ints)
{
    const int      E = p.num_experts, K = EEP_EPK_K(p), El = p.num_local, W = EEP_EPK_W(p);
    const int      CH   = max(1, min(1024, stage_ints / K));
    const int      G    = eep_epk_group_lanes(K);
    const int      TPW  = 32 / G; /* tokens per warp and pass */
    const unsigned lane = threadIdx.x & 31u, k = lane % (unsigned)G;

    for (int j = threadIdx.x; j < E + W; j += blockDim.x) {
        base[j] = 0;
    }
    __syncthreads();
    for (int c0 = t_begin; c0 < t_end; c0 += CH) {
        const int n = min(CH, t_end - c0);

        eep_epk_stage_ids<IdxBits>(p, c0, n, stage);
        __syncthreads();
        for (int j0 = 0; j0 < n; j0 += (int)(blockDim.x / 32u) * TPW) {
            const int  j = j0 + (int)(threadIdx.x >> 5) * TPW + (int)(lane / (unsigned)G);
            int        e;
            unsigned   m;
            const bool bad = eep_epk_group_route(stage + j * K, j < n && (int)k < K, k, El, G, &e,
                                                 &m);

            if (!bad && e >= 0) {
                atomicAdd(&base[e], 1);
            }
            /* experts above by one shared atomic per id (aggregating them with
               __match_any_sync first cost the T 128 count ~1.5 us more, 2026-11-30 trace; a hot
               expert serialises at most T * K <= a few thousand atomics a block); destinations
               by one ballot per warp, the token's first lane speaking for it (every thread
               would hit one of world counters) */
            const bool lead = j < n && k == 0 && !bad;
            for (int d = 0; d < W; d++) {
                const unsigned b = __ballot_sync(0xffffffffu, lead && ((m >> d) & 1u));

                if (lane == 0 && b != 0) {
                    atomicAdd(&base[E + d], __popc(b));
                }
            }
        }
        __syncthreads();
    }
}

/* A sender block's chunk counts (shared @p base, NC counters) to the scratch, then its flag. */
__device__ __forceinline__ void eep_epk_chunk_publish(const eep_epk_params_t &p, const int *base,
                                                      int NC, unsigned long long seq)
{
    int *mine = (int *)p.chunk_totals + (long long)blockIdx.x * NC;

    for (int j = threadIdx.x; j < NC; j += blockDim.x) {
        mine[j] = base[j];
    }
    __threadfence();
    __syncthreads();
    if (threadIdx.x == 0) {
        eep_st_release_gpu((unsigned long long *)p.chunk_flags + blockIdx.x, seq);
    }
}

/* @p base (shared) = the sum of the chunk counts of sending blocks [0, @p nb), once each has
   published for this call (they run at the same time: a bounded wait, abortable). */
__device__ __forceinline__ void eep_epk_chunk_sum(const eep_epk_params_t &p, int *base, int NC,
                                                  int nb, unsigned long long seq)
{
    __shared__ int failed;

    if (threadIdx.x == 0) {
        failed = 0;
    }
    __syncthreads();
    if ((int)threadIdx.x < nb) {
        const unsigned long long *flag  = (const unsigned long long *)p.chunk_flags + threadIdx.x;
        const eep_wait_ctx        w     = eep_epk_wait_ctx(p, &failed);
        unsigned                  polls = 0;
        (void)eep_wait_geq(
            w,
            [flag, &polls] {
                if (polls++ > 16) {
                    __nanosleep(32);
                }
                return eep_ld_acquire_gpu(flag);
            },
            seq, EEP_PHASE_EP_DISPATCH, p.rank);
    }
    __syncthreads();
    for (int j = threadIdx.x; j < NC; j += blockDim.x) {
        int sum = 0;

#pragma unroll 8
        for (int b = 0; b < nb; b++) {
            sum += __ldcg((const int *)p.chunk_totals + (long long)b * NC + j);
        }
        base[j] = sum;
    }
    __syncthreads();
}

/* CPU_SYNC, Phase 0, the counter block: wait for every peer's counts, publish counts and
   offsets on the device and in the host-mapped mirror (its last word last). */
__device__ void eep_epk_publish(const eep_epk_params_t &p, unsigned long long seq,
                                const unsigned char *my_counts, eep_epk_copy_smem &csm,
                                int *block_failed)
{
    const int El = p.num_local, W = EEP_EPK_W(p), parity = (int)(seq & 1ull);

    if (!eep_epk_wait_slots(p, my_counts, parity, EEP_EPK_SLOT_TOKENS, seq, EEP_PHASE_EP_DISPATCH,
                            block_failed)) {
        return;
    }
    for (int e = threadIdx.x; e < El; e += blockDim.x) {
        int running = 0;

        for (int s = 0; s < W; s++) {
            const unsigned long long *slot =
                (const unsigned long long *)(my_counts +
                                             ((unsigned long long)s * 2 + parity) * p.slot_bytes);
            running += (int)(unsigned)(slot[EEP_EPK_SLOT_COUNTS + e] & 0xffffffffull);
        }
        csm.counts[e] = running;
    }
    __syncthreads();
    eep_epk_layout_scan(csm, El, p.alignment);
    __syncthreads();
    {
        volatile unsigned long long *mirror = (volatile unsigned long long *)p.host_mirror;

        for (int e = threadIdx.x; e <= El; e += blockDim.x) {
            mirror[e] = (unsigned long long)(unsigned)(e < El ? csm.counts[e] : csm.offsets[El]);
        }
        __threadfence_system();
        __syncthreads();
        if (threadIdx.x == 0) {
            mirror[El + 1] = seq; /* the host waits for this word last */
            __threadfence_system();
        }
    }
    __syncthreads();
    for (int e = threadIdx.x; e <= El; e += blockDim.x) {
        if (e < El) {
            ((int *)p.recv_counts)[e] = csm.counts[e];
        }
        ((int *)p.recv_offsets)[e] = csm.offsets[e];
    }
}

/*
 * Blocks [0, S) send (S = p.send_blocks): block b owns tokens [b*C, (b+1)*C), C = ceil(T / S).
 * Block S counts every token and sends the count slots (the call's handshake: CACHED sends the
 * word alone), then, like every later block, expands (CPU_SYNC: publishes the counts to the host
 * instead, and the expansion is Phase 1, a launch of its own after the host has sized outputs).
 */
template <int IdxBits, int Mode, int Phase, bool LL>
__device__ __forceinline__ void eep_epk_dispatch(const eep_epk_params_t &p)
{
    static_assert(Mode >= 0 && Mode <= 2, "Mode: 0 CPU_SYNC, 1 NO_CPU_SYNC, 2 CACHED");
    static_assert(Phase == 0 || (Phase == 1 && Mode == EEP_EPK_CPU_SYNC), "Phase 1: CPU_SYNC copy");
    EEP_EPK_DYN_SMEM(dyn);
    __shared__ int                block_failed;
    __shared__ unsigned long long sh_seq;
    __shared__ eep_epk_copy_smem  csm;
    __shared__ unsigned char     *peer_base[EEP_EPK_MAX_WORLD];

    const int           E = p.num_experts, W = EEP_EPK_W(p), El = p.num_local, K = EEP_EPK_K(p);
    const int           NC   = E + W; /* counters: experts, then destinations */
    const unsigned      lane = threadIdx.x & 31u, warp = threadIdx.x >> 5;
    unsigned long long *ctl_seq = (unsigned long long *)(p.ctl + EEP_EPK_CTL_DSEQ);

    if (threadIdx.x == 0) {
        block_failed = 0;
        /* Phase 0 takes the next sequence (eep_epk_begin); Phase 1 (CPU_SYNC's copy, after
           Phase 0 ended) reuses it. */
        sh_seq = Phase == 0 ? eep_epk_begin(p, EEP_EPK_CTL_DSEQ, EEP_EPK_CTL_DWORK)
                            : *(volatile unsigned long long *)ctl_seq >> 32;
    }
    for (int d = threadIdx.x; d < W; d += blockDim.x) {
        peer_base[d] = eep_epk_peer(p, 0, d);
    }
    __syncthreads();
    const unsigned long long seq    = sh_seq;
    const int                parity = (int)(seq & 1ull);

    eep_epk_stamp(p, 0);
    if (Phase == 1) {
        eep_epk_expand<Mode, LL>(p, seq, (int)blockIdx.x, (int)gridDim.x, dyn, csm, &block_failed);
        eep_epk_stamp(p, 7);
        return;
    }

    const int                T = p.num_tokens, G = gridDim.x, S = p.send_blocks;
    const unsigned long long my_region = p.drecv_off +
                                         (unsigned long long)(parity * W + p.rank) * p.drecv_region;

    if ((int)blockIdx.x < S) {
        const int      C  = (T + S - 1) / S;
        const int      t0 = min(T, (int)blockIdx.x * C), t1 = min(T, t0 + C);
        __shared__ int piece_done[EEP_EPK_WARPS / 2]; /* pieces sent, per token of a split send */

        if (Mode == EEP_EPK_CACHED) {
            /* Slots from the handle.  Few tokens (decode): each token split into P pieces of
               its hidden bytes, one warp each, the warp that finishes its last piece storing
               the tags (as in the counted path below); else one warp per token, one fence per
               4 tokens of a warp. */
            const int      nt = t1 - t0;
            const int      P  = eep_epk_pieces(nt);
            const unsigned nu = eep_epk_units<LL>(p); /* lines, or vectors */

            if (P > 1) {
                if ((int)threadIdx.x < EEP_EPK_WARPS / 2) {
                    piece_done[threadIdx.x] = 0;
                }
                __syncthreads();
            }
            for (int it = (int)warp; P > 1 && it < nt * P; it += EEP_EPK_WARPS) {
                const int      q = it / P, c = it % P, t = t0 + q;
                const int     *slots   = (const int *)p.h_send_slot + (long long)t * W;
                const unsigned dm      = eep_epk_slot_mask(slots, W);
                auto           slot_of = [slots](int d) { return slots[d]; };
                int            my_id;
                float          my_w;

                eep_epk_lane_topk<IdxBits>(p, t, lane, &my_id, &my_w);
                eep_epk_send_token<LL>(p, peer_base, my_region, t, dm, slot_of, my_id, my_w, -1,
                                       lane, (unsigned)((unsigned long long)nu * c / P),
                                       (unsigned)((unsigned long long)nu * (c + 1) / P), c == 0,
                                       seq);
                if (!LL) {
                    eep_epk_piece_sent(p, peer_base, my_region, dm, slot_of, seq, lane,
                                       &piece_done[q], P);
                }
            }
            for (int t4 = t0 + (int)warp; P == 1 && t4 < t1; t4 += 4 * EEP_EPK_WARPS) {
                for (int j = 0; j < 4; j++) {
                    const int t = t4 + j * EEP_EPK_WARPS;
                    if (t >= t1) {
                        break;
                    }
                    const int     *slots = (const int *)p.h_send_slot + (long long)t * W;
                    const unsigned dm    = eep_epk_slot_mask(slots, W);
                    int            my_id;
                    float          my_w;

                    eep_epk_lane_topk<IdxBits>(p, t, lane, &my_id, &my_w);
                    eep_epk_send_token<LL>(
                        p, peer_base, my_region, t, dm, [slots](int d) { return slots[d]; }, my_id,
                        my_w, -1, lane, 0u, nu, true, seq);
                }
                if (LL) {
                    continue; /* the records' tags went with their metadata */
                }
                eep_epk_fence_release(p);
                __syncwarp();
                for (int j = 0; j < 4; j++) {
                    const int t = t4 + j * EEP_EPK_WARPS;
                    if (t >= t1) {
                        break;
                    }
                    const int *slots = (const int *)p.h_send_slot + (long long)t * W;

                    eep_epk_send_tags(
                        p, peer_base, my_region, eep_epk_slot_mask(slots, W),
                        [slots](int d) { return slots[d]; }, seq, lane);
                }
            }
        } else {
            int *base    = dyn;                       /* [NC] running counts before the round */
            int *masks   = base + NC;                 /* [scan_warps][NC] lane bits */
            int *prefix  = masks + p.scan_warps * NC; /* [scan_warps][NC] counts before the warp */
            const int SW = p.scan_warps, R = SW * 32;

            /* Decode size, when every token's ids fit the staging area and the masks' rows:
               one pass (eep_epk_route_block) over tokens [0, t1) orders the own ones and counts
               the earlier ones at once, instead of a count of [0, t0), then a round.  The test is
               the same in every block (a block that published its chunk counts would wait for
               the earlier blocks' otherwise). */
            const bool one_pass = T * K <= EEP_EPK_RECOUNT_MAX_IDS && T <= R && T * K <= SW * NC;

            /* 1. counts of this chunk, published for the others (and the counter); the counts
               before it are the sum over the earlier chunks' (counting [0, t0) itself cost the
               last block tens of us at T 4096).  Few ids (decode): the block counts [0, t0)
               itself, a few us less than the publish-and-sum round trips between blocks. */
            if (one_pass) {
                for (int j = threadIdx.x; j < NC; j += blockDim.x) {
                    base[j] = 0;
                }
            } else if (T * K <= EEP_EPK_RECOUNT_MAX_IDS) {
                eep_epk_count<IdxBits>(p, 0, t0, base, masks, 2 * SW * NC);
            } else {
                eep_epk_count<IdxBits>(p, t0, t1, base, masks, 2 * SW * NC);
                eep_epk_chunk_publish(p, base, NC, seq);
                eep_epk_chunk_sum(p, base, NC, (int)blockIdx.x, seq);
            }
            eep_epk_stamp(p, 1);

            /* 2 + 3, one round of R tokens at a time */
            /* the round's ids go through shared memory (the prefix area, free until the masks are
               built) when they fit: routing from global memory is a chain of dependent loads */
            const bool staged = R * K <= SW * NC;
            for (int r0 = t0; r0 < t1; r0 += R) {
                /* the masks' rows start at token m0: the round's first, or 0 in one pass */
                const int m0 = one_pass ? 0 : r0;
                /* the rows this round's tokens need (a decode round of 8 tokens: 1 of 16) */
                const int SWu = min(SW, (min(R, t1 - m0) + 31) / 32);
                for (int j = threadIdx.x; j < SWu * NC; j += blockDim.x) {
                    masks[j] = 0;
                }
                for (int j = threadIdx.x; j < EEP_EPK_WARPS / 2; j += blockDim.x) {
                    piece_done[j] = 0;
                }
                if (staged || one_pass) {
                    eep_epk_stage_ids<IdxBits>(p, m0, min(R, t1 - m0), prefix);
                }
                __syncthreads();
                if (one_pass) {
                    eep_epk_route_block<IdxBits>(p, prefix, t1, t0, t1, masks, NC);
                } else if ((int)warp < SWu) {
                    const int t  = r0 + (int)warp * 32 + (int)lane;
                    int      *mw = masks + warp * NC;
                    unsigned  m  = 0;

                    if (staged) {
                        m = eep_epk_route_warp<IdxBits>(p, prefix + (int)warp * 32 * K,
                                                        min(32, t1 - r0 - (int)warp * 32),
                                                        r0 + (int)warp * 32, mw, lane);
                    } else if (t < t1) {
                        bool      bad;
                        long long bad_id = -1;

                        m = eep_epk_route<IdxBits>(p, t, &bad, &bad_id);
                        if (bad) {
                            eep_epk_fault_bad(p, t, bad_id);
                        } else {
                            for (int k = 0; k < K; k++) {
                                const long long e = eep_epk_id<IdxBits>(p, (long long)t * K + k);
                                if (e >= 0) {
                                    atomicOr(&mw[e], (int)(1u << lane));
                                }
                            }
                        }
                    }
                    /* destination bits by ballot: the whole warp would hit one word */
                    for (int d = 0; d < W; d++) {
                        const unsigned b = __ballot_sync(0xffffffffu, (m >> d) & 1u);

                        if (lane == 0) {
                            mw[E + d] = (int)b;
                        }
                    }
                }
                __syncthreads();
                for (int j = threadIdx.x; j < NC; j += blockDim.x) {
                    int running = base[j];

                    for (int w = 0; w < SWu; w++) {
                        prefix[w * NC + j] = running;
                        running += __popc((unsigned)masks[w * NC + j]);
                    }
                    base[j] = running;
                }
                __syncthreads();
                /* send: one warp per token of the round; a short round (decode) splits each
                   token into P pieces of its hidden bytes, one warp each, and the warp that
                   finishes a token's last piece stores its tags */
                const int      nr = min(R, t1 - r0);
                const int      P  = eep_epk_pieces(nr);
                const unsigned nu = eep_epk_units<LL>(p);
                for (int it = (int)warp; it < nr * P; it += EEP_EPK_WARPS) {
                    const int      q = it / P, c = it % P;
                    const int      t = r0 + q, w = (t - m0) >> 5;
                    const unsigned l = (unsigned)((t - m0) & 31), lt = (1u << l) - 1u;
                    const int     *mw = masks + w * NC, *pw = prefix + w * NC;
                    int           *slots = (int *)p.h_send_slot + (long long)t * W;
                    int            my_id = -1, my_pos = -1;
                    float          my_w    = 0.0f;
                    auto           slot_of = [mw, pw, lt, E](int d) {
                        return pw[E + d] + __popc((unsigned)mw[E + d] & lt);
                    };

                    if ((int)lane < K) {
                        my_id = (int)eep_epk_id<IdxBits>(p, (long long)t * K + lane);
                        my_w  = ((const float *)p.topk_weights)[(long long)t * K + lane];
                        if (my_id >= 0 && my_id < E && (((unsigned)mw[my_id] >> l) & 1u)) {
                            my_pos = pw[my_id] + __popc((unsigned)mw[my_id] & lt);
                        }
                    }
                    const unsigned dm = eep_epk_round_mask(mw, E, W, l);
                    if (c == 0) {
                        for (int d = lane; d < W; d += 32) {
                            slots[d] = ((dm >> d) & 1u) ? slot_of(d) : -1;
                        }
                    }
                    eep_epk_send_token<LL>(p, peer_base, my_region, t, dm, slot_of, my_id, my_w,
                                           my_pos, lane, (unsigned)((unsigned long long)nu * c / P),
                                           (unsigned)((unsigned long long)nu * (c + 1) / P), c == 0,
                                           seq);
                    if (P > 1 && !LL) {
                        eep_epk_piece_sent(p, peer_base, my_region, dm, slot_of, seq, lane,
                                           &piece_done[q], P);
                    }
                }
                if (P == 1 && !LL) {
                    /* one fence per warp and round, then the tags of its tokens */
                    eep_epk_fence_release(p);
                    __syncwarp();
                    for (int q = (int)warp; q < nr; q += EEP_EPK_WARPS) {
                        const int      w = (r0 + q - m0) >> 5;
                        const unsigned l = (unsigned)((r0 + q - m0) & 31), lt = (1u << l) - 1u;
                        const int     *mw = masks + w * NC, *pw = prefix + w * NC;

                        eep_epk_send_tags(
                            p, peer_base, my_region, eep_epk_round_mask(mw, E, W, l),
                            [mw, pw, lt, E](int d) {
                                return pw[E + d] + __popc((unsigned)mw[E + d] & lt);
                            },
                            seq, lane);
                    }
                }
                __syncthreads();
            }
        }
    } else if ((int)blockIdx.x == S) {
        /* The counter: totals of every token, sent to every peer at once (the expanders of
           every rank wait for these words first). */
        int *base = dyn;

        if (Mode != EEP_EPK_CACHED) {
            if (T * K <= EEP_EPK_RECOUNT_MAX_IDS) { /* few ids: every token counted here */
                eep_epk_count<IdxBits>(p, 0, T, base, dyn + NC, 2 * p.scan_warps * NC);
            } else {
                eep_epk_chunk_sum(p, base, NC, S, seq); /* every sender's chunk */
            }
            eep_epk_stamp(p, 1);
            for (int d = 0; d < W; d++) {
                unsigned long long *slot = (unsigned long long *)(peer_base[d] + p.counts_off +
                                                                  ((unsigned long long)p.rank * 2 +
                                                                   parity) *
                                                                      p.slot_bytes);
                for (int e = threadIdx.x; e < El; e += blockDim.x) {
                    slot[EEP_EPK_SLOT_COUNTS + e] = (seq << 32) | (unsigned)base[d * El + e];
                }
            }
            __syncthreads();
        }
        if ((int)threadIdx.x < W) {
            const int           d    = threadIdx.x;
            unsigned long long *slot = (unsigned long long *)(peer_base[d] + p.counts_off +
                                                              ((unsigned long long)p.rank * 2 +
                                                               parity) *
                                                                  p.slot_bytes);
            /* a release store: after the __syncthreads, it orders every count word above */
            eep_epk_st_release(p, slot + EEP_EPK_SLOT_TOKENS,
                               (seq << 32) | (Mode != EEP_EPK_CACHED ? (unsigned)base[E + d] : 0u));
        }
        __syncthreads();
    }

    eep_epk_stamp(p, 2);
    if ((int)blockIdx.x >= S && Mode != EEP_EPK_CPU_SYNC) {
        eep_epk_expand<Mode, LL>(p, seq, (int)blockIdx.x - S, G - S, dyn, csm, &block_failed);
    } else if ((int)blockIdx.x == S && Mode == EEP_EPK_CPU_SYNC) {
        eep_epk_publish(p, seq, peer_base[p.rank] + p.counts_off, csm, &block_failed);
    }
    eep_epk_stamp(p, 7);
}

/* The dispatch: records with flagged lines for small buffers (EEP_EPK_LINES_DISPATCH in p.lines,
   set by the host from max_tokens_per_rank, the same on every rank; fixed at JIT time), plain
   records with a tag otherwise. */
template <int IdxBits, int Mode, int Phase>
__device__ void eep_ep_dispatch_body(const eep_epk_params_t &p)
{
    const unsigned long long began = eep_epk_launch_began(p);

    eep_grid_dep_wait(); /* launched early (PDL): the previous kernel is done and visible */
    eep_epk_launch_stamp(p, began);
    eep_grid_dep_launch(); /* the next kernel may take SMs as this one's blocks leave */
    if (EEP_EPK_LINES(p) & EEP_EPK_LINES_DISPATCH) {
        eep_epk_dispatch<IdxBits, Mode, Phase, true>(p);
    } else {
        eep_epk_dispatch<IdxBits, Mode, Phase, false>(p);
    }
}

#endif /* __CUDACC__ */

#endif /* EEP_KERNELS_EP_DISPATCH_CUH */
