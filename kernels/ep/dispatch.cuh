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

#include "dispatch_copy.cuh"
#include "dispatch_route.cuh"
#include "dispatch_send.cuh"
#include "dispatch_solo.cuh"
#include "ep_common.cuh"
#include "ep_gin.cuh"

#ifdef __CUDACC__

/* Peer @p d's count slot (parity @p parity) as the counter writes it: in the peer's window, or,
   for a GIN peer (hybrid), in this rank's staging, put to the peer by eep_epk_gin_dispatch_puts. */
__device__ __forceinline__ unsigned long long *
eep_epk_count_slot(const eep_epk_params_t &p, unsigned char *const *peer_base, int d, int parity)
{
#if EEP_EPK_GIN
    if (eep_epk_is_gin(p, d)) {
        return (unsigned long long *)(peer_base[p.rank] + eep_epk_gin_slot_stage(p, d));
    }
#endif
    return (unsigned long long *)(peer_base[d] + p.counts_off +
                                  ((unsigned long long)p.rank * 2 + parity) * p.slot_bytes);
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

    const int           E = p.num_experts, W = EEP_EPK_W(p), K = EEP_EPK_K(p);
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
        peer_base[d] = eep_epk_peer_base(p, d);
    }
    __syncthreads();
    const unsigned long long seq    = sh_seq;
    const int                parity = (int)(seq & 1ull);
#if EEP_EPK_GIN
    /* Hybrid: a GIN peer's records go to this rank's staging, laid out as the peer's receive
       region for this rank (the senders' `peer_base[d] + my_region + slot` lands there). */
    if (Phase == 0 && p.gin_mask != 0) {
        const unsigned long long mr = p.drecv_off +
                                      (unsigned long long)(parity * W + p.rank) * p.drecv_region;

        for (int d = threadIdx.x; d < W; d += blockDim.x) {
            if (eep_epk_is_gin(p, d)) {
                peer_base[d] = peer_base[p.rank] + eep_epk_gin_rec_stage(p, d) - mr;
            }
        }
        __syncthreads();
    }
#endif

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
                                const long long e = eep_epk_live_id(
                                    p, eep_epk_id<IdxBits>(p, (long long)t * K + k));
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
                        my_id = (int)eep_epk_live_id(
                            p, eep_epk_id<IdxBits>(p, (long long)t * K + lane));
                        my_w = ((const float *)p.topk_weights)[(long long)t * K + lane];
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

        if (p.dropped_topk != 0 || p.num_dropped != 0) {
            eep_epk_report_dropped<IdxBits>(p);
        }
        if (Mode != EEP_EPK_CACHED) {
            if (T * K <= EEP_EPK_RECOUNT_MAX_IDS) { /* few ids: every token counted here */
                eep_epk_count<IdxBits>(p, 0, T, base, dyn + NC, 2 * p.scan_warps * NC);
            } else {
                eep_epk_chunk_sum(p, base, NC, S, seq); /* every sender's chunk */
            }
            eep_epk_stamp(p, 1);
            /* each expert's count to the rank that holds it, in its local slot's word (none to
               a rank this one cannot reach: dead, or behind a dead forwarder) */
            for (int e = threadIdx.x; e < E; e += blockDim.x) {
                const unsigned pl = eep_epk_place_of(p, e);

                if (!eep_epk_unreachable(p, (int)(pl >> 16))) {
                    unsigned long long *slot = eep_epk_count_slot(p, peer_base, (int)(pl >> 16),
                                                                  parity);

                    slot[EEP_EPK_SLOT_COUNTS + (pl & 0xffffu)] = (seq << 32) | (unsigned)base[e];
                }
            }
            __syncthreads();
        }
        if ((int)threadIdx.x < W && !eep_epk_unreachable(p, (int)threadIdx.x)) {
            const int           d    = threadIdx.x;
            unsigned long long *slot = eep_epk_count_slot(p, peer_base, d, parity);
            /* a release store: after the __syncthreads, it orders every count word above */
            eep_epk_st_release(p, slot + EEP_EPK_SLOT_TOKENS,
                               (seq << 32) | (Mode != EEP_EPK_CACHED ? (unsigned)base[E + d] : 0u));
        }
        __syncthreads();
    }

    eep_epk_stamp(p, 2);
#if EEP_EPK_GIN
    /* Hybrid: the last of the senders and the counter puts everything for the GIN peers; the
       expanders (and CPU_SYNC's publisher) first wait for every GIN peer's signal of this call,
       after which its count slot and records read as if stored over NVLink. */
    if (p.gin_mask != 0) {
        if ((int)blockIdx.x <= S && eep_epk_gin_last(p, EEP_EPK_CTL_DGIN, parity, S + 1) &&
            !eep_epk_gin_dispatch_puts(p, seq, parity, &block_failed)) {
            return;
        }
        const bool expands = Mode != EEP_EPK_CPU_SYNC ? (int)blockIdx.x >= S : (int)blockIdx.x == S;
        /* with forwarding (lsaSize > 1) every record and count word arrives over NVLink from
           a forwarder of this node, tagged as a sender's: nothing to wait for here */
        if (expands && !eep_epk_fwd_on(p) &&
            !eep_epk_gin_wait(p, eep_epk_gin(p).sig0, seq, EEP_PHASE_EP_DISPATCH, &block_failed)) {
            return;
        }
    }
#endif
    if ((int)blockIdx.x >= S && Mode != EEP_EPK_CPU_SYNC) {
        eep_epk_expand<Mode, LL>(p, seq, (int)blockIdx.x - S, G - S, dyn, csm, &block_failed);
    } else if ((int)blockIdx.x == S && Mode == EEP_EPK_CPU_SYNC) {
        eep_epk_publish(p, seq, peer_base[p.rank] + p.counts_off, csm, &block_failed);
    }
    eep_epk_stamp(p, 7);
}

/* The dispatch: records with flagged lines for small buffers (EEP_EPK_LINES_DISPATCH in p.lines,
   set by the host from max_tokens_per_rank, the same on every rank; fixed at JIT time), plain
   records with a tag otherwise.  Phases 2 and 3: the one-rank path without records
   (dispatch_solo.cuh). */
template <int IdxBits, int Mode, int Phase>
__device__ void eep_ep_dispatch_body(const eep_epk_params_t &p)
{
    eep_epk_prologue(p);
    if constexpr (Phase >= 2) {
        eep_epk_solo<IdxBits, Mode, Phase>(p);
    } else if (EEP_EPK_LINES(p) & EEP_EPK_LINES_DISPATCH) {
        eep_epk_dispatch<IdxBits, Mode, Phase, true>(p);
    } else {
        eep_epk_dispatch<IdxBits, Mode, Phase, false>(p);
    }
}

#endif /* __CUDACC__ */

#endif /* EEP_KERNELS_EP_DISPATCH_CUH */
