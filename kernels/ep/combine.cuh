/*
 * kernels/ep/combine.cuh - direct-mode combine, one kernel.
 *
 *   __device__ void eep_ep_combine_body(const eep_epk_params_t &p);
 *
 * Every block first tells every peer "combine n started" (its count slot's CDONE word: the
 * call's handshake, docs/dispatch.md section 3).  Expert side: for each record received by the
 * dispatch (from the handle: source token, rows and weights per top-k lane, ordinal of this rank
 * among the token's destination ranks; at prefill size only the records from peers) one warp, or
 * at decode size a group of warps splitting its channels (eep_epc_split), computes the partial
 * p = bf16(fma over its local lanes ascending, from 0) in fp32, writes it, 16 bytes per lane,
 * into the source rank's combine region `ordinal` at row `token` (LSA pointer), fences (release)
 * and stores the row's tag (the call's sequence).  Source side: one warp per token (a group of
 * warps at decode size), at prefill size computing this rank's own partial of the token from its
 * rows (the same arithmetic; never written out), waits for the tags of the other rows in regions
 * 0, 1, ... (= destination ranks ascending), sums the partials in that order in fp32 and writes
 * bf16: no "all landed" signal, so a token is summed as soon as its own partials are in.
 * Block 0 finally waits for every peer's start word.  The arithmetic is eep/ep.h's;
 * kernels/ep/ep_numeric.cuh fixes the roundings.
 */
#ifndef EEP_KERNELS_EP_COMBINE_CUH
#define EEP_KERNELS_EP_COMBINE_CUH

#include "dispatch.cuh"
#include "ep_numeric.cuh"

#ifdef __CUDACC__

/*
 * The weighted sum of one record's rows over vectors v0 + 32 u (u < U, below @p ve) of 8
 * channels: lane k < K holds the record's row @p my_row (-1: not a local expert) and weight
 * @p my_w, @p rows_mask their ballot; G rows' loads in flight, then the fmas in lane order k
 * ascending from 0 (the contract's order, eep/ep.h); the bf16 partial packed into @p part.
 * Every lane of the warp calls it (it shuffles with the full mask).
 */
template <int U, int G>
__device__ __forceinline__ void eep_epc_weighted(const eep_epk_params_t &p, int my_row,
                                                 float my_w, unsigned rows_mask, int v0, int ve,
                                                 uint4 (&part)[U])
{
    float    acc[U][8];
    unsigned m = rows_mask;

#pragma unroll
    for (int u = 0; u < U; u++) {
#pragma unroll
        for (int j = 0; j < 8; j++) {
            acc[u][j] = 0.0f;
        }
    }
    while (m != 0) { /* m is warp-uniform (a ballot) */
        int   rr[G];
        float ww[G];
        uint4 yv[G][U];
#pragma unroll
        for (int g = 0; g < G; g++) {
            int k = -1;
            if (m != 0) {
                k = __ffs(m) - 1;
                m &= m - 1;
            }
            rr[g] = __shfl_sync(0xffffffffu, my_row, k < 0 ? 0 : k);
            ww[g] = __shfl_sync(0xffffffffu, my_w, k < 0 ? 0 : k);
            if (k < 0) {
                rr[g] = -1;
            }
        }
#pragma unroll
        for (int g = 0; g < G; g++) {
#pragma unroll
            for (int u = 0; u < U; u++) {
                if (rr[g] >= 0 && v0 + 32 * u < ve) {
                    yv[g][u] = ((const uint4 *)((const unsigned short *)p.y +
                                                (long long)rr[g] * EEP_EPK_H(p)))[v0 + 32 * u];
                }
            }
        }
#pragma unroll
        for (int g = 0; g < G; g++) {
            if (rr[g] < 0) {
                continue;
            }
#pragma unroll
            for (int u = 0; u < U; u++) {
                float y[8];
                eep_bf16x8_unpack(yv[g][u], y);
#pragma unroll
                for (int j = 0; j < 8; j++) {
                    acc[u][j] = eep_fma(ww[g], y[j], acc[u][j]);
                }
            }
        }
    }
#pragma unroll
    for (int u = 0; u < U; u++) {
        part[u] = eep_bf16x8_pack(acc[u]);
    }
}

/*
 * The expert side of one record (source @p s, index @p i): the bf16 partial of channels
 * [8 vb, 8 ve) into the source's combine region; one warp.  @return the row (its tag is stored by
 * the caller after a fence).
 */
__device__ __forceinline__ unsigned char *eep_epc_partial(const eep_epk_params_t &p,
                                                          unsigned char *const *peer_base,
                                                          unsigned long long region0, int s,
                                                          int i, int vb, int ve, unsigned lane)
{
    const int K = EEP_EPK_K(p);

    const long long rec = (long long)s * p.max_tokens + i;
    const int       tok = ((const int *)p.h_recv_tok)[rec];
    const int       ord = ((const int *)p.h_recv_ord)[rec];
    const int       my_row = (int)lane < K ? ((const int *)p.h_recv_rows)[rec * K + lane] : -1;
    const float     my_w = (int)lane < K ? ((const float *)p.h_recv_w)[rec * K + lane] : 0.0f;
    const unsigned  rows_mask = __ballot_sync(0xffffffffu, my_row >= 0);
    unsigned char  *dst_row = peer_base[s] + region0 +
                              (unsigned long long)ord * p.crecv_region +
                              (unsigned long long)tok * p.crecv_row;
    uint4          *dst = (uint4 *)dst_row;

    /* 2 vectors of 8 channels per lane x up to 4 top-k lanes in flight (8 loads) */
    /* every lane runs every iteration (the body shuffles with the full mask): a slice under 32
       vectors (H 2048 split over 16 warps) let lanes leave and hung the warp */
    for (int b0 = vb; b0 < ve; b0 += 32 * 2) {
        const int v0 = b0 + (int)lane;
        uint4     part[2];

        eep_epc_weighted<2, 4>(p, my_row, my_w, rows_mask, v0, ve, part);
#pragma unroll
        for (int u = 0; u < 2; u++) {
            if (v0 + 32 * u < ve) {
                dst[v0 + 32 * u] = part[u];
            }
        }
    }
    return dst_row;
}

/*
 * Warps per item when @p items (records, or tokens) are spread over a grid of @p blocks: the
 * largest of 16, 8, 4, 2 that still gives every item its own warp group, else 1 (one warp per
 * item, items taken in turn).  A power of two, so groups never straddle blocks.
 */
__device__ __forceinline__ int eep_epc_split(int items, int blocks)
{
    for (int s = EEP_EPK_WARPS; s >= 2; s /= 2) {
        if (items <= blocks * (EEP_EPK_WARPS / s)) {
            return s;
        }
    }
    return 1;
}

/* The source rank of received record @p q (records numbered source by source; @p rec_base, the
   prefix of the per-source counts, has W + 1 entries). */
__device__ __forceinline__ int eep_epc_source(const int *rec_base, int q)
{
    int s = 0;

    while (rec_base[s + 1] <= q) {
        s++;
    }
    return s;
}

__device__ void eep_ep_combine_body(const eep_epk_params_t &p)
{
    __shared__ int                block_failed;
    __shared__ unsigned long long sh_seq;
    __shared__ int                rec_base[EEP_EPK_MAX_WORLD + 1];
    __shared__ unsigned char     *peer_base[EEP_EPK_MAX_WORLD];

    const int           W = EEP_EPK_W(p), vecs = EEP_EPK_H(p) / 8;
    const unsigned      lane = threadIdx.x & 31u, warp = threadIdx.x >> 5;
    unsigned long long *ctl_seq = (unsigned long long *)(p.ctl + EEP_EPK_CTL_CSEQ);
    const int           gwarps = gridDim.x * EEP_EPK_WARPS;

    if (threadIdx.x == 0) {
        block_failed = 0;
        sh_seq = *(volatile unsigned long long *)ctl_seq + 1ull;
    }
    if (threadIdx.x < 32) { /* records per source, prefix by a warp scan (W <= 32) */
        const int n = (int)lane < W ? ((const int *)p.h_recv_n)[lane] : 0;
        const int incl = eep_epk_warp_incl_scan(n, lane);

        if ((int)lane < W) {
            rec_base[lane] = incl - n;
        }
        if (lane == 31) {
            rec_base[W] = incl;
        }
    }
    for (int d = threadIdx.x; d < W; d += blockDim.x) {
        peer_base[d] = eep_epk_peer(p, 0, d);
    }
    __syncthreads();
    const unsigned long long seq = sh_seq;
    const int                parity = (int)(seq & 1ull);
    const unsigned long long region0 =
        p.crecv_off + (unsigned long long)parity * p.crecv_regions * p.crecv_region;

    eep_epk_stamp(p, 0);
    eep_epk_start(p, EEP_EPK_CTL_CCTR, EEP_EPK_CTL_CWORK, EEP_EPK_CTL_CSEQ, seq);
    /* The handshake word, to every peer. */
    if (blockIdx.x == 0 && (int)threadIdx.x < W) {
        unsigned long long *slot = (unsigned long long *)(
            peer_base[threadIdx.x] + p.counts_off +
            ((unsigned long long)p.rank * 2 + parity) * p.slot_bytes);
        eep_st_release_sys(slot + EEP_EPK_SLOT_CDONE, (seq << 32) | 1ull);
    }

    /* Expert side, few records (decode): `split` warps per record (2 to 16: a warp group),
       the groups of a block taking records in step, the group's warps splitting the channels;
       the block syncs, fences, and the first thread of each group stores its record's tag.  A
       record's channels over one warp are ~H/512 dependent rounds of loads, which at decode
       size is most of the kernel; enough records to fill the grid take the dynamic path. */
    /* More records than warp groups (prefill): only the records from peers here; this rank's
       own tokens are summed on the source side from the rows themselves (no partial written and
       read back: 2 x 59 MB of HBM traffic at T 4096, H 7168, 2 ranks).  Remote record r is
       record r (before this rank's) or r + nl (after them).  Few records (decode): every record
       here, since the source side's warps come to their tokens only after their records'
       fences, and computing the own partial there put ~2 us on the critical path. */
    const bool own_at_source = eep_epc_split(rec_base[W], (int)gridDim.x) == 1;
    const int  lb = rec_base[p.rank];
    const int  nl = own_at_source ? rec_base[p.rank + 1] - lb : 0;
    const int  recs = rec_base[W] - nl;
    const int split = eep_epc_split(recs, (int)gridDim.x);
    if (split > 1) {
        const int groups = EEP_EPK_WARPS / split, g = (int)warp / split, gw = (int)warp % split;
        const int per_round = (int)gridDim.x * groups;

        for (int q0 = (int)blockIdx.x * groups; q0 < recs; q0 += per_round) {
            const int      q = q0 + g < lb ? q0 + g : q0 + g + nl;
            unsigned char *row = nullptr;

            if (q0 + g < recs) {
                const int s = eep_epc_source(rec_base, q);

                row = eep_epc_partial(p, peer_base, region0, s, q - rec_base[s],
                                      vecs * gw / split, vecs * (gw + 1) / split, lane);
                eep_fence_release_sys();
            }
            __syncthreads();
            if (row != nullptr && gw == 0 && lane == 0) {
                eep_fence_release_sys();
                eep_epk_tag_store(row, (unsigned)EEP_EPK_H(p) * 2u, seq);
            }
        }
    }
    /* Expert side: records taken dynamically (this parity's counter, zeroed by the previous
       call), one system fence per 4 records of a warp, then their tags. */
    unsigned int  *work = (unsigned int *)(p.ctl + EEP_EPK_CTL_CWORK) + parity;
    unsigned char *done_rows[4] = { nullptr, nullptr, nullptr, nullptr };
    int            ndone = 0;
    for (; split == 1;) {
        int q = 0;

        if (lane == 0) {
            q = (int)atomicAdd(work, 1u);
        }
        q = __shfl_sync(0xffffffffu, q, 0);
        if (q >= recs) {
            break;
        }
        q = q < lb ? q : q + nl;
        const int      s = eep_epc_source(rec_base, q);
        unsigned char *dst_row = eep_epc_partial(p, peer_base, region0, s, q - rec_base[s], 0,
                                                 vecs, lane);
        done_rows[ndone++] = dst_row;
        if (ndone == 4) {
            eep_fence_release_sys();
            __syncwarp();
            if (lane < 4) {
                eep_epk_tag_store(done_rows[lane], (unsigned)EEP_EPK_H(p) * 2u, seq);
            }
            ndone = 0;
        }
    }
    if (ndone > 0) {
        eep_fence_release_sys();
        __syncwarp();
        if ((int)lane < ndone) {
            eep_epk_tag_store(done_rows[lane], (unsigned)EEP_EPK_H(p) * 2u, seq);
        }
    }

    eep_epk_stamp(p, 1);
    /* Source side: `tsplit` warps per token (as many as the grid has for few tokens), each
       summing its slice of the channels: this rank's own partial computed here from its rows
       (the handle's record of the token at its slot) when own_at_source, the others once their
       rows' tags hold this call's sequence (waited for after the own partial, so that it
       overlaps their flight); partials in region order j = destination ranks ascending, as the
       contract fixes. */
    const eep_wait_ctx   w = eep_epk_wait_ctx(p, &block_failed);
    const unsigned char *mine = peer_base[p.rank] + region0;
    const int            tsplit = eep_epc_split(p.num_tokens, (int)gridDim.x);
    const int            gwarp = (int)blockIdx.x * EEP_EPK_WARPS + (int)warp;
    const int            tvb = vecs * (gwarp % tsplit) / tsplit;
    const int            tve = vecs * (gwarp % tsplit + 1) / tsplit;
    const int            K = EEP_EPK_K(p);
    bool                 failed = false;
    for (int t = gwarp / tsplit; t < p.num_tokens && tvb < tve && !failed;
         t += gwarps / tsplit) {
        const int *slots = (const int *)p.h_send_slot + (long long)t * W;
        unsigned   dm = 0;

        for (int d = lane; d < W; d += 32) {
            dm |= slots[d] >= 0 ? 1u << d : 0u;
        }
        dm = __reduce_or_sync(0xffffffffu, dm);
        const int n = __popc(dm);
        /* this rank's region index among the token's destinations when its partial is computed
           here, or -1 */
        const int jl = own_at_source && ((dm >> p.rank) & 1u) ?
                       __popc(dm & ((1u << p.rank) - 1u)) : -1;
        int       my_row = -1;
        float     my_w = 0.0f;
        if (jl >= 0 && (int)lane < K) {
            const long long rec = (long long)p.rank * p.max_tokens + slots[p.rank];

            my_row = ((const int *)p.h_recv_rows)[rec * K + lane];
            my_w   = ((const float *)p.h_recv_w)[rec * K + lane];
        }
        const unsigned rows_mask = __ballot_sync(0xffffffffu, my_row >= 0);
        uint4         *out = (uint4 *)((unsigned short *)p.out + (long long)t * EEP_EPK_H(p));
        bool           waited = false;

        for (int b0 = tvb; b0 < tve; b0 += 32 * 4) {
            const int v0 = b0 + (int)lane;
            uint4     own[4];
            float     acc[4][8];

            if (jl >= 0) {
                eep_epc_weighted<4, 2>(p, my_row, my_w, rows_mask, v0, tve, own);
            }
            /* lane j < n, j != jl, waits for region j's row (its source: the j-th destination
               rank), once per token */
            if (!waited) {
                int ok = 1;

                if ((int)lane < n && (int)lane != jl) {
                    const unsigned long long *tag = (const unsigned long long *)(
                        mine + (unsigned long long)lane * p.crecv_region +
                        (unsigned long long)t * p.crecv_row + (unsigned long long)EEP_EPK_H(p) * 2);
                    unsigned polls = 0;
                    unsigned mm = dm;

                    for (int j = 0; j < (int)lane; j++) {
                        mm &= mm - 1;
                    }
                    ok = eep_wait_geq(w, [tag, &polls] {
                                          if (polls++ > 64) {
                                              __nanosleep(64);
                                          }
                                          return eep_ld_relaxed_sys(tag);
                                      }, seq, EEP_PHASE_EP_COMBINE, __ffs(mm) - 1);
                    if (ok) {
                        eep_fence_acquire_sys(); /* the warp follows through the __syncwarp */
                    }
                }
                if (__any_sync(0xffffffffu, !ok)) {
                    failed = true;
                    break;
                }
                __syncwarp();
                waited = true;
            }
#pragma unroll
            for (int u = 0; u < 4; u++) {
#pragma unroll
                for (int i = 0; i < 8; i++) {
                    acc[u][i] = 0.0f;
                }
            }
            for (int j = 0; j < n; j++) {
                const uint4 *p4 = (const uint4 *)(mine + (unsigned long long)j * p.crecv_region +
                                                  (unsigned long long)t * p.crecv_row);
                uint4        pv[4];
#pragma unroll
                for (int u = 0; u < 4; u++) {
                    if (j == jl) {
                        pv[u] = own[u];
                    } else if (v0 + 32 * u < tve) {
                        pv[u] = p4[v0 + 32 * u];
                    }
                }
#pragma unroll
                for (int u = 0; u < 4; u++) {
                    float y[8];
                    eep_bf16x8_unpack(pv[u], y);
#pragma unroll
                    for (int i = 0; i < 8; i++) {
                        acc[u][i] = eep_add(acc[u][i], y[i]);
                    }
                }
            }
#pragma unroll
            for (int u = 0; u < 4; u++) {
                if (v0 + 32 * u < tve) {
                    out[v0 + 32 * u] = eep_bf16x8_pack(acc[u]);
                }
            }
        }
    }

    eep_epk_stamp(p, 2);
    /* Every peer started this combine (so none can be two calls ahead: docs/dispatch.md 3). */
    if (blockIdx.x == 0) {
        (void)eep_epk_wait_slots(p, peer_base[p.rank] + p.counts_off, parity, EEP_EPK_SLOT_CDONE,
                                 seq, EEP_PHASE_EP_COMBINE, &block_failed);
    }

    eep_epk_stamp(p, 3);
    eep_epk_stamp(p, 7);
}

#endif /* __CUDACC__ */

#endif /* EEP_KERNELS_EP_COMBINE_CUH */
