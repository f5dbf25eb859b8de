/*
 * kernels/ep/ep_common.cuh - what the dispatch and combine kernels share: the NCCL device
 * headers (or the emulation's stand-ins), trace stamps, the scope of flags and fences, peer
 * pointers, the slot and tag waits (bounded: kernels/common/bounded_wait.cuh), a token's copy
 * units, a warp scan, and the start of every launch (eep_epk_begin).
 */
#ifndef EEP_KERNELS_EP_EP_COMMON_CUH
#define EEP_KERNELS_EP_EP_COMMON_CUH

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

#include "../common/wait.cuh"
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

/* The first thing every dispatch and combine kernel does: with programmatic dependent launch it
   may start while the stream's previous kernel runs, so it waits for that kernel's writes before
   touching memory, stamps its launch (EEP_EP_TRACE), and lets the next kernel be scheduled. */
__device__ __forceinline__ void eep_epk_prologue(const eep_epk_params_t &p)
{
    const unsigned long long began = eep_epk_launch_began(p);

    eep_grid_dep_wait(); /* launched early (PDL): the previous kernel is done and visible */
    eep_epk_launch_stamp(p, began);
    eep_grid_dep_launch(); /* the next kernel may take SMs as this one's blocks leave */
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

/* World rank @p peer's window at @p off, through its LSA pointer: a peer of this node (its LSA
   index is peer - p.lsa_base; direct mode: lsa_base 0, every rank a peer). */
__device__ __forceinline__ unsigned char *eep_epk_peer(const eep_epk_params_t &p,
                                                       unsigned long long off, int peer)
{
    return (unsigned char *)ncclGetLsaPointer((ncclWindow_t)p.window, (size_t)off,
                                              peer - p.lsa_base);
}

/* The pointer base of world rank @p d for the senders: its window through LSA, or null for a
   peer on another node (bit d of p.gin_mask: reached over GIN, kernels/ep/ep_gin.cuh). */
__device__ __forceinline__ unsigned char *eep_epk_peer_base(const eep_epk_params_t &p, int d)
{
    return ((p.gin_mask >> (unsigned)d) & 1u) ? nullptr : eep_epk_peer(p, 0, d);
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

/* Where global expert @p e (0 <= e < num_experts) lives, as (rank << 16) | local slot: the
   arithmetic of an even placement (every rank num_local experts, in blocks: the fast path, a
   division by a uniform value), else one read-only load from the host-checked table, u32 a
   expert (a few KB at most, L1-resident after the first reads). */
__device__ __forceinline__ unsigned eep_epk_place_of(const eep_epk_params_t &p, int e)
{
    if (p.place_even) {
        const int r = e / p.num_local;

        return ((unsigned)r << 16) | (unsigned)(e - r * p.num_local);
    }
    return __ldg((const unsigned *)p.place + e);
}

/* The rank that holds expert @p e. */
__device__ __forceinline__ int eep_epk_rank_of(const eep_epk_params_t &p, int e)
{
    return p.place_even ? e / p.num_local : (int)(__ldg((const unsigned *)p.place + e) >> 16);
}

/* Degraded mode (ep_params.h): world rank @p r is known dead (nothing to it, no wait for it). */
__device__ __forceinline__ bool eep_epk_dead(const eep_epk_params_t &p, int r)
{
    return ((p.dead_mask >> (unsigned)r) & 1u) != 0;
}

/* Source @p s cannot reach this rank (dead, or its forwarder here is): its count words never
   come, its slot counts as zero. */
__device__ __forceinline__ bool eep_epk_muted(const eep_epk_params_t &p, int s)
{
    return (((p.mute_mask | p.dead_mask) >> (unsigned)s) & 1u) != 0; /* the dead, always */
}

/* This rank cannot reach rank @p d (dead, or behind a dead forwarder): nothing is sent to it. */
__device__ __forceinline__ bool eep_epk_unreachable(const eep_epk_params_t &p, int d)
{
    return (((p.drop_mask | p.dead_mask) >> (unsigned)d) & 1u) != 0;
}

/* A top-k id as the dispatch routes it: -1 when it names an expert (in [0, num_experts)) of a
   rank this rank cannot reach (p.drop_mask: dead, or behind a dead forwarder), else as given
   (out-of-range ids stay, for the bad-id checks).  Every sender, the counter and the records'
   metadata see the same ids, so those lanes are simply absent: no record, no row, no count, no
   partial.  One uniform test when nothing is dead. */
__device__ __forceinline__ long long eep_epk_live_id(const eep_epk_params_t &p, long long e)
{
    return (p.drop_mask | p.dead_mask) != 0 && e >= 0 && e < p.num_experts &&
                   eep_epk_unreachable(p, eep_epk_rank_of(p, (int)e))
               ? -1
               : e;
}

/* The bounded-wait context of an EP kernel's waits (kernels/common/wait.cuh). */
__device__ __forceinline__ eep_wait_ctx eep_epk_wait_ctx(const eep_epk_params_t &p,
                                                         int                    *block_failed)
{
    eep_wait_ctx w = eep_wait_ctx_make(p.fault, p.fault_claim, block_failed, p.timeout_ns, p.rank,
                                       EEP_EPK_ABORT_CHECK_NS);

    w.wait_ns = (unsigned long long *)p.wait_stats;
    return w;
}

/* Wait, by thread threadIdx.x (< world), until word @p idx of peer threadIdx.x's slot carries
   @p seq (no block sync). */
__device__ __forceinline__ void
eep_epk_wait_slot_words_one(const eep_epk_params_t &p, const unsigned char *my_counts, int parity,
                            int idx, unsigned long long seq, int phase, int *block_failed)
{
    eep_wait_ctx w = eep_epk_wait_ctx(p, block_failed);
    w.stat_slot    = phase == EEP_PHASE_EP_DISPATCH ? EEP_WAIT_STAT_DISPATCH_COUNTS : -1;
    if (eep_epk_muted(p, (int)threadIdx.x)) {
        return; /* degraded mode: a dead peer's word never comes (its slot counts as zero) */
    }
    {
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

/* Wait, by the first world threads of the block (no block sync), until word @p idx of every
   peer's slot carries @p seq. */
__device__ __forceinline__ void eep_epk_wait_slot_words(const eep_epk_params_t &p,
                                                        const unsigned char *my_counts, int parity,
                                                        int idx, unsigned long long seq, int phase,
                                                        int *block_failed)
{
    if ((int)threadIdx.x < EEP_EPK_W(p)) {
        eep_epk_wait_slot_words_one(p, my_counts, parity, idx, seq, phase, block_failed);
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

__device__ __forceinline__ int eep_epk_warp_incl_scan(int v, unsigned lane)
{
#pragma unroll
    for (int o = 1; o < 32; o <<= 1) {
        const int u = __shfl_up_sync(0xffffffffu, v, o);

        v += (int)lane >= o ? u : 0;
    }
    return v;
}

/* The start of every dispatch/combine launch, thread 0 of each block: one atomic on the
   kernel's control word at @p word_off, (sequence of the last launch << 32) | blocks of this
   launch started so far, both takes the block's ticket and reads the call's sequence (the old
   word's high half + 1, which @return gives).  The block that takes the last ticket zeroes the
   other parity's work counter at @p work_off (the next call's: this call's was zeroed by the
   previous one), then advances the word to (sequence << 32) | 0 for the next launch, which the
   stream starts only after this one ends.  A read of the sequence, a fence and a ticket atomic
   cost the block's first barrier about a microsecond more (2026-11-30 trace).  In two halves
   where the block has loads to issue meanwhile: eep_epk_begin_ticket takes the ticket (the old
   word, not yet waited for) and eep_epk_begin_seq, given it, does the rest. */
__device__ __forceinline__ unsigned long long eep_epk_begin_ticket(const eep_epk_params_t &p,
                                                                   unsigned                word_off)
{
    return atomicAdd((unsigned long long *)(p.ctl + word_off), 1ull);
}

__device__ __forceinline__ unsigned long long eep_epk_begin_seq(const eep_epk_params_t &p,
                                                                unsigned                word_off,
                                                                unsigned                work_off,
                                                                unsigned long long      old)
{
    unsigned long long      *word = (unsigned long long *)(p.ctl + word_off);
    const unsigned long long seq  = (old >> 32) + 1ull;

    if ((unsigned)(old & 0xffffffffull) == gridDim.x - 1u) {
        const unsigned other = (unsigned)((seq & 1ull) ^ 1ull);

        *(volatile unsigned int *)(p.ctl + work_off + 4u * other) = 0u;
        /* the hybrid kernels' GIN ticket of that parity (EEP_EPK_CTL_DGIN/CGIN = work + 16) */
        *(volatile unsigned int *)(p.ctl + work_off + 16u + 4u * other) = 0u;
        atomicAdd(word, (1ull << 32) - (unsigned long long)gridDim.x);
    }
    return seq;
}

/*
 * CPU_SYNC, one block (every thread of it): the counts of @p El local experts (@p counts) and the
 * rows @p n to the host mirror, each word tagged with the call ((low half of @p seq) << 32 |
 * value), then the call's sequence in word El + 1, which the host polls first.  No fence: the
 * host reads on until every word carries the sequence's tag (eep_ep_wait_counts), so the order
 * in which the posted writes land does not matter and the block waits for no PCIe round trip
 * (a fence before the sequence word and one after it held the one-rank kernel's last block ~6 us
 * under the copy engine's traffic: 2026-12-06 trace, 1 x H100).
 */
__device__ __forceinline__ void eep_epk_mirror_put(const eep_epk_params_t &p, const int *counts,
                                                   int El, int n, unsigned long long seq)
{
    volatile unsigned long long *mirror = (volatile unsigned long long *)p.host_mirror;
    const unsigned long long     tag    = (seq & 0xffffffffull) << 32;

    for (int e = threadIdx.x; e <= El; e += blockDim.x) {
        mirror[e] = tag | (unsigned)(e < El ? counts[e] : n);
    }
    if (threadIdx.x == 0) {
        mirror[El + 1] = seq;
    }
}

__device__ __forceinline__ unsigned long long eep_epk_begin(const eep_epk_params_t &p,
                                                            unsigned word_off, unsigned work_off)
{
    return eep_epk_begin_seq(p, word_off, work_off, eep_epk_begin_ticket(p, word_off));
}

#endif /* __CUDACC__ */

#endif /* EEP_KERNELS_EP_EP_COMMON_CUH */
