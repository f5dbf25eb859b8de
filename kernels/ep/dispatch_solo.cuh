/*
 * kernels/ep/dispatch_solo.cuh - dispatch at one rank with rank-major outputs, without records.
 *
 *   template <int IdxBits, int Mode, int Phase>
 *   __device__ void eep_epk_solo(const eep_epk_params_t &p);     (Phase 2 or 3)
 *
 * With one rank every token's row is its index among the received tokens (those with a live
 * expert id), its ids and weights are the caller's, and nothing travels: the records, tags,
 * count slots and work counters of the general kernel (dispatch.cuh) only cost latency there,
 * a dependent chain per record (bench/RESULTS.md, 2026-12-03: 64 us at 24 SMs for T 4096 with no
 * byte to copy).  So the host (elastic/ep/ep.c, eep_ep_solo_dispatch) takes this path for
 * world 1, rank-major, direct mode, and it fills the same handle arrays as the general kernel,
 * so that the combine and later cached calls are the same as after a general dispatch:
 *
 * Phase 2, a dispatch that routes (CPU_SYNC and NO_CPU_SYNC), blocks own chunks of tokens:
 *   1. each block routes its tokens from staged ids (a bad id is reported and its token
 *      dropped, as the general kernel does), counts them per local expert and numbers its
 *      received tokens in order (a block scan); the call's sequence (eep_epk_begin, so that the
 *      general kernel's sequences and parities stay in step) is taken in two halves, its atomic
 *      in flight beside the staging loads.  A chunk within one round of staging (T up to 512 a
 *      block at K 8) stays resident: its weights are staged beside its ids and its numbers kept
 *      in shared memory, so that steps 2 and 3 read no global word of it again;
 *   2. every block but the last publishes its received tokens as one word tagged with the
 *      call's sequence (chunk_flags[1][b]: a later block reads the count in the word it waits
 *      for, one round trip, bounded), then its counts to the chunk scratch (flag = the sequence);
 *      its first row = the earlier blocks' received tokens.  The last block publishes nothing
 *      (nobody waits for it): it waits for the others' flags and sums their counts and its own:
 *      the layout words of the handle, recv_counts and recv_offsets, and (CPU_SYNC) the host
 *      mirror, before its own rows.  Each dependent global round trip costs ~1-2 us while the
 *      copy engine fills HBM (2026-12-05 trace), so the chain is kept short;
 *   3. a group of lanes a token writes the handle's words of each received token (slot, source
 *      token, row and weight 1 on its first lane), and with EEP_EPK_SOLO_META its output ids
 *      and weights; with EEP_EPK_SOLO_ROWS a warp a token copies its x row, except a row the
 *      copy engine already holds (p.ce_copied: x row t is recv_x row t), with
 *      EEP_EPK_SOLO_SCALES the scale rows (eep_epk_solo_scales; the host asks for them where
 *      the copy engine does not move them: without it, and CACHED's copy of x alone).
 * Phase 3, the rows of a layout the handle holds (h_send_slot): CACHED (the whole call),
 *   CPU_SYNC after the host sized its outputs (the alloc hook), or after the copy engine (the
 *   rows after a token not received, recv_x row t != x row t).  EEP_EPK_SOLO_META and _ROWS as in
 *   phase 2; CACHED also writes recv_counts, recv_offsets and the dropped report.
 */
#ifndef EEP_KERNELS_EP_DISPATCH_SOLO_CUH
#define EEP_KERNELS_EP_DISPATCH_SOLO_CUH

#include "dispatch_copy.cuh"
#include "dispatch_route.cuh"
#include "ep_common.cuh"

#ifdef __CUDACC__

/* Block @p b's chunk of @p T tokens among @p G blocks: [*t0_p, *t1_p). */
__device__ __forceinline__ void eep_epk_solo_chunk(int T, int b, int G, int *t0_p, int *t1_p)
{
    const int C = (T + G - 1) / G;

    *t0_p = min(T, b * C);
    *t1_p = min(T, *t0_p + C);
}

/* Copy x row @p t to recv_x row @p r, by the 32 lanes of a warp, 8 vectors a lane in flight. */
__device__ __forceinline__ void eep_epk_solo_row(const eep_epk_params_t &p, long long t,
                                                 long long r, unsigned lane)
{
    const uint4 *s  = (const uint4 *)((const unsigned char *)p.x + t * EEP_EPK_HB(p));
    uint4       *d  = (uint4 *)((unsigned char *)p.recv_x + r * EEP_EPK_HB(p));
    const int    nv = (int)(EEP_EPK_HB(p) / 16u);

    for (int v0 = (int)lane; v0 < nv; v0 += 32 * 8) {
        uint4 r8[8];
#pragma unroll
        for (int u = 0; u < 8; u++) {
            if (v0 + 32 * u < nv) {
                r8[u] = s[v0 + 32 * u];
            }
        }
#pragma unroll
        for (int u = 0; u < 8; u++) {
            if (v0 + 32 * u < nv) {
                d[v0 + 32 * u] = r8[u];
            }
        }
    }
}

/*
 * The scale rows of tokens [@p t0, @p t1) to their rows in h_send_slot, by the @p n lanes from
 * lane @p i0 of the calling group, V (uint4, or unsigned where a row or a base is not 16-byte
 * aligned) a lane 4 at a time in flight: the words of all the tokens at once, not a warp a
 * token (a scale row is 224 bytes at H 7168: a warp a row waits a memory round trip for each,
 * 11 in a row at T 4096 within 24 SMs, ~10 us measured against ~1).
 */
template <typename V>
__device__ __forceinline__ void eep_epk_solo_scales_v(const eep_epk_params_t &p, int t0, int t1,
                                                      long long i0, long long n)
{
    const long long vpr   = (long long)(p.scale_bytes / sizeof(V)); /* vectors a row */
    const long long total = (long long)(t1 - t0) * vpr;
    const V        *s     = (const V *)p.x_scales;
    V              *d     = (V *)p.recv_x_scales;
    const int      *slot  = (const int *)p.h_send_slot;

    for (long long j0 = i0; j0 < total; j0 += 4 * n) {
        V         v[4];
        long long at[4];
        int       r[4];
#pragma unroll
        for (int u = 0; u < 4; u++) {
            const long long j = j0 + u * n;
            const long long t = t0 + j / vpr;

            r[u] = -1;
            if (j < total) {
                at[u] = j % vpr;
                r[u]  = slot[t];
                v[u]  = s[t * vpr + at[u]];
            }
        }
#pragma unroll
        for (int u = 0; u < 4; u++) {
            if (r[u] >= 0) {
                d[(long long)r[u] * vpr + at[u]] = v[u];
            }
        }
    }
}

__device__ __forceinline__ void eep_epk_solo_scales(const eep_epk_params_t &p, int t0, int t1,
                                                    long long i0, long long n)
{
    if (p.scale_bytes % 16u == 0 && ((p.x_scales | p.recv_x_scales) & 15u) == 0) {
        eep_epk_solo_scales_v<uint4>(p, t0, t1, i0, n);
    } else {
        eep_epk_solo_scales_v<unsigned>(p, t0, t1, i0, n);
    }
}

/*
 * The rows of tokens [@p t0, @p t1), a warp a token, their rows in h_send_slot (-1: not
 * received): with @p scales every scale row (eep_epk_solo_scales, first), with @p x the x rows
 * (with p.ce_copied, a token whose row is its index is left to the copy engine).  Every lane of
 * the block calls this.
 */
__device__ __forceinline__ void eep_epk_solo_rows(const eep_epk_params_t &p, int t0, int t1,
                                                  int first_warp, int warps, bool x, bool scales)
{
    const unsigned lane = threadIdx.x & 31u;

    if (scales && p.scale_bytes != 0) {
        eep_epk_solo_scales(p, t0, t1, (long long)first_warp * 32 + lane, (long long)warps * 32);
    }
    for (int t = t0 + first_warp; x && t < t1; t += warps) {
        const int r = ((const int *)p.h_send_slot)[t];

        if (r >= 0 && !(p.ce_copied && r == t)) {
            eep_epk_solo_row(p, t, r, lane);
        }
    }
}

/* Where eep_epk_solo_words reads a token's row, ids and weights: the handle and the caller's
   arrays (global), or a resident chunk's staging (eep_epk_solo_staged). */
template <int IdxBits>
struct eep_epk_solo_global {
    const eep_epk_params_t &p;
    __device__ int          row(int t) const
    {
        return ((const int *)p.h_send_slot)[t];
    }
    __device__ long long id(int t, int k) const
    {
        return eep_epk_id<IdxBits>(p, (long long)t * EEP_EPK_K(p) + k);
    }
    __device__ float w(int t, int k) const
    {
        return ((const float *)p.topk_weights)[(long long)t * EEP_EPK_K(p) + k];
    }
};

/* Tokens [t0, t0 + n) of a chunk staged whole: rows[j] token t0 + j's row (-1: not received),
   ids and weights [j * K + k] (a received token's ids are all in range). */
struct eep_epk_solo_staged {
    int            t0, K;
    const int     *rows, *ids;
    const float   *ws;
    __device__ int row(int t) const
    {
        return rows[t - t0];
    }
    __device__ long long id(int t, int k) const
    {
        return ids[(t - t0) * K + k];
    }
    __device__ float w(int t, int k) const
    {
        return ws[(t - t0) * K + k];
    }
};

/*
 * The words of received tokens [@p t0, @p t1) whose rows are final in @p src, a group of G lanes
 * (K rounded up to a power of two) a token: with @p handle the handle's (source token, ordinal
 * 0, row and weight 1 on the first lane with a live expert, -1 and 0 on the others), with
 * @p meta the outputs' ids (local slots; -1) and weights (0 where the id is -1).  Tokens
 * @p first, @p first + @p step, ... of the range, in passes of a warp's tokens.
 */
template <int IdxBits, typename Src>
__device__ __forceinline__ void eep_epk_solo_words(const eep_epk_params_t &p, const Src &src,
                                                   int t0, int t1, int first, int step, bool handle,
                                                   bool meta)
{
    const int      K = EEP_EPK_K(p), G = eep_epk_group_lanes(K), TPW = 32 / G;
    const unsigned lane = threadIdx.x & 31u, k = lane % (unsigned)G;
    const unsigned gmask = (G == 32 ? 0xffffffffu : ((1u << G) - 1u)) << (lane - k);

    for (int q0 = t0 + first * TPW; q0 < t1; q0 += step * TPW) {
        const int  t  = q0 + (int)(lane / (unsigned)G);
        const int  r  = t < t1 ? src.row(t) : -1;
        const bool on = r >= 0 && (int)k < K;
        int        id = -1;
        float      w  = 0.0f;

        if (on) {
            id = (int)eep_epk_live_id(p, src.id(t, (int)k));
            w  = src.w(t, (int)k);
        }
        /* the token's first lane with a live expert holds its row (a received token has one) */
        const unsigned live       = __ballot_sync(0xffffffffu, on && id >= 0) & gmask;
        const bool     first_live = live != 0 && (int)lane == __ffs((int)live) - 1;
        if (!on) {
            continue;
        }
        const long long rk = (long long)r * K + k;
        if (handle) {
            if (k == 0) {
                ((int *)p.h_recv_tok)[r] = t;
                ((int *)p.h_recv_ord)[r] = 0;
            }
            ((int *)p.h_recv_rows)[rk] = first_live ? r : -1;
            ((float *)p.h_recv_w)[rk]  = first_live ? 1.0f : 0.0f;
        }
        if (meta) {
            ((int *)p.recv_topk_idx)[rk] = id >= 0 ? (int)(eep_epk_place_of(p, id) & 0xffffu) : -1;
            ((float *)p.recv_topk_weights)[rk] = id >= 0 ? w : 0.0f;
        }
    }
}

/* Stage the ids of tokens [@p c0, @p c0 + @p n) as eep_epk_stage_ids does, and with @p ws
   their weights too, the loads of both in flight at once.  Every thread calls this; the caller
   syncs after. */
template <int IdxBits>
__device__ __forceinline__ void eep_epk_solo_stage(const eep_epk_params_t &p, int c0, int n,
                                                   int *stage, float *ws)
{
    const int    K = EEP_EPK_K(p), E = p.num_experts, nk = n * K;
    const float *wg = (const float *)p.topk_weights + (long long)c0 * K;

    if (ws == nullptr) {
        eep_epk_stage_ids<IdxBits>(p, c0, n, stage);
        return;
    }
    for (int i0 = threadIdx.x; i0 < nk; i0 += blockDim.x * 4) {
        long long v[4];
        float     w[4];
#pragma unroll
        for (int u = 0; u < 4; u++) {
            const int i = i0 + u * (int)blockDim.x;

            v[u] = i < nk ? eep_epk_id<IdxBits>(p, (long long)c0 * K + i) : 0;
            w[u] = i < nk ? wg[i] : 0.0f;
        }
#pragma unroll
        for (int u = 0; u < 4; u++) {
            const int i = i0 + u * (int)blockDim.x;

            if (i < nk) {
                stage[i] = eep_epk_staged_id(v[u], E);
                ws[i]    = w[u];
            }
        }
    }
}

/*
 * Phase 2, step 1: route and count tokens [@p t0, @p t1) (ids staged @p R tokens a round in
 * @p stage, their received flags in @p rflag), the local expert counts into @p cnt[0, El) and
 * the received tokens into @p cnt[El] (shared, zeroed by the caller), each received token's
 * number among the chunk's into h_send_slot (-1: not received).  With @p ws (the chunk within
 * one round: resident) its weights are staged too, and the numbers stay in @p rflag instead:
 * the chunk's words are then written from shared memory alone.  Every thread calls this.
 */
template <int IdxBits>
__device__ void eep_epk_solo_count(const eep_epk_params_t &p, int t0, int t1, int R, int *stage,
                                   float *ws, int *rflag, int *cnt)
{
    __shared__ int warp_tot[EEP_EPK_WARPS];
    const int      K = EEP_EPK_K(p), El = p.num_local, G = eep_epk_group_lanes(K);
    const int      TPW  = 32 / G;
    const unsigned lane = threadIdx.x & 31u, warp = threadIdx.x >> 5, k = lane % (unsigned)G;

    for (int r0 = t0; r0 < t1; r0 += R) {
        const int n = min(R, t1 - r0);

        eep_epk_solo_stage<IdxBits>(p, r0, n, stage, ws);
        __syncthreads();
        for (int j0 = 0; j0 < n; j0 += (int)(blockDim.x / 32u) * TPW) {
            const int  j  = j0 + (int)warp * TPW + (int)(lane / (unsigned)G);
            const bool on = j < n && (int)k < K;
            int        e;
            unsigned   m;
            const bool bad = eep_epk_group_route(p, stage + (on ? j * K : 0), on, k, G, &e, &m);

            if (!bad && e >= 0) {
                atomicAdd(&cnt[eep_epk_place_of(p, e) & 0xffffu], 1);
            }
            if (j < n && k == 0) {
                rflag[j] = !bad && m != 0u;
                if (bad) {
                    eep_epk_fault_bad_token<IdxBits>(p, r0 + j);
                }
            }
        }
        __syncthreads();
        /* the round's received tokens numbered in order: a ballot a warp, then the warps' totals */
        const int      i   = (int)threadIdx.x;
        const int      f   = i < n ? rflag[i] : 0;
        const unsigned bal = __ballot_sync(0xffffffffu, f != 0);

        if (lane == 0) {
            warp_tot[warp] = __popc(bal);
        }
        __syncthreads();
        int before = cnt[El], total = 0;

        for (int w = 0; w < EEP_EPK_WARPS; w++) {
            before += w < (int)warp ? warp_tot[w] : 0;
            total += warp_tot[w];
        }
        if (i < n) {
            const int slot = f ? before + __popc(bal & ((1u << lane) - 1u)) : -1;

            if (ws != nullptr) {
                rflag[i] = slot; /* thread i alone read rflag[i] (above the last sync) */
            } else {
                ((int *)p.h_send_slot)[r0 + i] = slot;
            }
        }
        __syncthreads();
        if (threadIdx.x == 0) {
            cnt[El] += total;
        }
        __syncthreads();
    }
}

/*
 * The last block of phase 2, once every other block published: the totals of every chunk (the
 * others' from the scratch, its own @p cnt; *@p base := the received tokens of the others, from
 * their rows words), in one round trip; CPU_SYNC: the host mirror at once (eep_epk_mirror_put),
 * before the layout scan; then the layout words: the handle's counts, offsets and records per
 * source, recv_counts and recv_offsets.
 */
template <int Mode>
__device__ void eep_epk_solo_totals(const eep_epk_params_t &p, unsigned long long seq, int *cnt,
                                    eep_epk_copy_smem &csm, int *base)
{
    const int                 El = p.num_local, NC = El + 1, G = (int)gridDim.x;
    const int                *tot  = (const int *)p.chunk_totals;
    const unsigned            lane = threadIdx.x & 31u, warp = threadIdx.x >> 5;
    const unsigned long long *rows_words = (const unsigned long long *)p.chunk_flags +
                                           EEP_EPK_MAX_SEND_BLOCKS;
    /* the others' received tokens: the low halves of their rows words (written before their
       flags, which the wait read), loaded by the last warp beside the columns' loads */
    const bool         rw_warp = warp == blockDim.x / 32u - 1u;
    unsigned long long rw      = rw_warp && (int)lane < G - 1 ? __ldcg(rows_words + lane) : 0ull;

    /* a column (expert) a thread, 32 blocks' loads in flight at once (a fixed count, predicated):
       each round trip costs ~1-2 us under the copy engine's traffic; "#pragma unroll 32" over
       G - 1 < 32 blocks left them all to the remainder loop (2026-12-06 trace, H100: the last
       block 20-38 us behind the others at T 4096), and the received column as a 257th word
       cost a second pass (2026-12-06: totals 5.4 us after the wait) */
    for (int j = threadIdx.x; j < El; j += blockDim.x) {
        int sum = 0;

        for (int b0 = 0; b0 < G - 1; b0 += 32) {
            int v[32];
#pragma unroll
            for (int u = 0; u < 32; u++) {
                v[u] = b0 + u < G - 1 ? __ldcg(tot + (long long)(b0 + u) * NC + j) : 0;
            }
#pragma unroll
            for (int u = 0; u < 32; u++) {
                sum += v[u];
            }
        }
        csm.counts[j] = sum + cnt[j];
    }
    if (rw_warp) {
        int r = (int)(unsigned)rw;

        for (int b = (int)lane + 32; b < G - 1; b += 32) {
            r += (int)(unsigned)__ldcg(rows_words + b);
        }
        for (int o = 16; o > 0; o >>= 1) {
            r += __shfl_xor_sync(0xffffffffu, r, o);
        }
        if (lane == 0) {
            *base   = r;
            cnt[El] = r + cnt[El];
        }
    }
    __syncthreads();
    const int n = cnt[El];

    eep_epk_stamp(p, 4);
    if (Mode == EEP_EPK_CPU_SYNC) {
        eep_epk_mirror_put(p, csm.counts, El, n, seq);
        eep_epk_stamp(p, 5);
    }
    eep_epk_layout_scan(csm, El, p.alignment);
    __syncthreads();
    for (int e = threadIdx.x; e <= El; e += blockDim.x) {
        if (e < El) {
            ((int *)p.h_counts)[e]    = csm.counts[e];
            ((int *)p.recv_counts)[e] = csm.counts[e];
        }
        ((int *)p.h_offsets)[e]          = csm.offsets[e];
        ((int *)p.h_offsets)[El + 1 + e] = csm.pad_base[e];
    }
    if (threadIdx.x == 0) {
        ((int *)p.h_recv_n)[0]     = n;
        ((int *)p.recv_offsets)[0] = 0;
        ((int *)p.recv_offsets)[1] = n;
        if (Mode == EEP_EPK_NO_CPU_SYNC && p.rows_word != 0) {
            /* one 8-byte store: the host never sees a tag with another call's count (no fence:
               nothing waits for it, a cached call that finds it not yet there copies serially) */
            *(volatile unsigned long long *)p.rows_word = (p.rows_tag << 32) | (unsigned)n;
        }
    }
}

template <int IdxBits, int Mode, int Phase>
__device__ void eep_epk_solo(const eep_epk_params_t &p)
{
    static_assert(Phase == 2 || Phase == 3, "the one-rank path: Phase 2 routes, 3 places rows");
    static_assert(Phase == 3 || Mode != EEP_EPK_CACHED, "CACHED: phase 3 only");
    EEP_EPK_DYN_SMEM(dyn);
    __shared__ int                block_failed;
    __shared__ unsigned long long sh_seq;
    __shared__ int                sh_base;
    __shared__ eep_epk_copy_smem  csm;

    const int      T = p.num_tokens, El = p.num_local, K = EEP_EPK_K(p);
    const int      G = (int)gridDim.x, b = (int)blockIdx.x;
    const unsigned warp   = threadIdx.x >> 5;
    const bool     meta   = (p.solo & EEP_EPK_SOLO_META) != 0;
    const bool     rows   = (p.solo & EEP_EPK_SOLO_ROWS) != 0;
    const bool     scales = (p.solo & EEP_EPK_SOLO_SCALES) != 0;

    if (EEP_EPK_W(p) != 1) {
        return; /* the host takes this path at one rank only */
    }
    eep_epk_stamp(p, 0);
    if (Phase == 3) {
        const int gw = b * EEP_EPK_WARPS + (int)warp, gwarps = G * EEP_EPK_WARPS;

        if (Mode != EEP_EPK_CACHED && p.ce_copied && !meta &&
            __ldcg((const int *)p.h_recv_n) == T) {
            return; /* the fix-up after the copy engine, every token received: row t is x's */
        }

        if (Mode == EEP_EPK_CACHED && b == 0) {
            for (int e = threadIdx.x; e < El; e += blockDim.x) {
                ((int *)p.recv_counts)[e] = ((const int *)p.h_counts)[e];
            }
            if (threadIdx.x == 0) {
                ((int *)p.recv_offsets)[0] = 0;
                ((int *)p.recv_offsets)[1] = ((const int *)p.h_recv_n)[0];
            }
            if (p.dropped_topk != 0 || p.num_dropped != 0) {
                eep_epk_report_dropped<IdxBits>(p);
            }
        }
        if (meta) {
            const eep_epk_solo_global<IdxBits> src = { p };

            eep_epk_solo_words<IdxBits>(p, src, 0, T, gw, gwarps, false, true);
        }
        eep_epk_stamp(p, 6);
        if (rows || scales) {
            eep_epk_solo_rows(p, 0, T, gw, gwarps, rows, scales);
        }
        eep_epk_stamp(p, 7);
        return;
    }

    const int R      = EEP_EPK_SOLO_ROUND(K);
    int      *stage  = dyn;                      /* [R * K] the round's ids */
    float    *wstage = (float *)(stage + R * K); /* [R * K] their weights (resident) */
    int      *rflag  = (int *)(wstage + R * K);  /* [R] received; resident: the rows */
    int      *cnt    = rflag + R;                /* [El + 1] counts per local expert, received */
    int       t0, t1;

    eep_epk_solo_chunk(T, b, G, &t0, &t1);
    const bool resident = t1 - t0 <= R;
    /* 1: the ticket's atomic in flight beside the staging loads (waited for after the count) */
    unsigned long long ticket = 0;

    if (threadIdx.x == 0) {
        block_failed = 0;
        sh_base      = 0;
        ticket       = eep_epk_begin_ticket(p, EEP_EPK_CTL_DSEQ);
    }
    for (int e = threadIdx.x; e <= El; e += blockDim.x) {
        cnt[e] = 0;
    }
    eep_epk_solo_count<IdxBits>(p, t0, t1, R, stage, resident ? wstage : nullptr, rflag, cnt);
    if (threadIdx.x == 0) {
        sh_seq = eep_epk_begin_seq(p, EEP_EPK_CTL_DSEQ, EEP_EPK_CTL_DWORK, ticket);
    }
    __syncthreads();
    const unsigned long long seq = sh_seq;

    eep_epk_stamp(p, 1);
    /* 2: its received tokens, tagged with the call, in one word (what a later block waits for),
       then its counts for the last block (which publishes none: nobody waits for it) */
    unsigned long long *rows_words = (unsigned long long *)p.chunk_flags + EEP_EPK_MAX_SEND_BLOCKS;

    if (b != G - 1) {
        if (threadIdx.x == 0) {
            *(volatile unsigned long long *)(rows_words + b) = (seq << 32) | (unsigned)cnt[El];
        }
        eep_epk_chunk_publish(p, cnt, El + 1, seq);
        /* the earlier chunks' received tokens, a word each (bounded waits) */
        if ((int)threadIdx.x < b) {
            const unsigned long long *word  = rows_words + threadIdx.x;
            const eep_wait_ctx        w     = eep_epk_wait_ctx(p, &block_failed);
            const unsigned            tag   = (unsigned)seq;
            unsigned long long        v     = 0;
            unsigned                  polls = 0;

            if (eep_wait_geq(
                    w,
                    [word, tag, &v, &polls] {
                        if (polls++ > 16) {
                            __nanosleep(32);
                        }
                        v = eep_ld_acquire_gpu(word);
                        return (unsigned)(v >> 32) == tag ? 1ull : 0ull;
                    },
                    1ull, EEP_PHASE_EP_DISPATCH, p.rank) &&
                (unsigned)v != 0u) {
                atomicAdd(&sh_base, (int)(unsigned)v);
            }
        }
    } else {
        eep_epk_chunk_wait(p, G - 1, seq, &block_failed);
        eep_epk_stamp(p, 3);
        if (!*(volatile int *)&block_failed) {
            eep_epk_solo_totals<Mode>(p, seq, cnt, csm, &sh_base); /* cnt[El] := every chunk's */
        }
    }
    __syncthreads();
    if (*(volatile int *)&block_failed) {
        return; /* a wait gave up: the fault is recorded */
    }
    eep_epk_stamp(p, 2);
    /* 3: the chunk's rows made final, then their words and bytes */
    const int base = sh_base;

    if (resident) {
        for (int j = threadIdx.x; j < t1 - t0; j += blockDim.x) {
            const int r = rflag[j] >= 0 ? rflag[j] + base : -1;

            rflag[j]                       = r;
            ((int *)p.h_send_slot)[t0 + j] = r;
        }
    } else {
        for (int t = t0 + (int)threadIdx.x; t < t1; t += blockDim.x) {
            int *slot = (int *)p.h_send_slot + t;

            if (*slot >= 0) {
                *slot += base;
            }
        }
    }
    __syncthreads();
    if (resident) {
        const eep_epk_solo_staged src = { t0, K, rflag, stage, wstage };

        eep_epk_solo_words<IdxBits>(p, src, t0, t1, (int)warp, EEP_EPK_WARPS, true, meta);
    } else {
        const eep_epk_solo_global<IdxBits> src = { p };

        eep_epk_solo_words<IdxBits>(p, src, t0, t1, (int)warp, EEP_EPK_WARPS, true, meta);
    }
    eep_epk_stamp(p, 6);
    if (rows || scales) {
        eep_epk_solo_rows(p, t0, t1, (int)warp, EEP_EPK_WARPS, rows, scales);
    }
    if (b == 0 && (p.dropped_topk != 0 || p.num_dropped != 0)) {
        eep_epk_report_dropped<IdxBits>(p);
    }
    eep_epk_stamp(p, 7);
}

#endif /* __CUDACC__ */

#endif /* EEP_KERNELS_EP_DISPATCH_SOLO_CUH */
