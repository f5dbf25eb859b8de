/*
 * kernels/ep/dispatch_send.cuh - dispatch, phase 3: a token's wire record (scales, metadata,
 * hidden bytes as 16-byte vectors or flagged lines) to each destination rank through LSA
 * pointers, in pieces at decode size, then the tags.
 */
#ifndef EEP_KERNELS_EP_DISPATCH_SEND_CUH
#define EEP_KERNELS_EP_DISPATCH_SEND_CUH

#include "ep_common.cuh"

#ifdef __CUDACC__

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

#endif /* __CUDACC__ */

#endif /* EEP_KERNELS_EP_DISPATCH_SEND_CUH */
