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
 * p = bf16(fma over its local lanes ascending, from 0) in fp32 and writes it into the source rank's
 * combine region `ordinal` at row `token` (LSA pointer).  Source side: one warp per token (a group
 * of warps at decode size), at prefill size (at one rank: every size) computing this rank's own
 * partial of the token from its rows (the same arithmetic; never written out), reads the other rows
 * in regions 0, 1, ... (= destination ranks ascending) once they are in, sums the partials in that
 * order in fp32 and writes bf16: no "all landed" signal, so a token is summed as soon as its
 * partials are in.  How a row says it is in (p.lines, from the buffers' size, the same on every
 * rank): decode-size buffers write flagged 128-byte lines (kernels/ep/ll_line.cuh: 7 vectors of 8
 * channels and the call's sequence per line; no fence, no tag), read line by line until the flags
 * read the sequence; larger ones write plain rows, then a fence and a tag per row (per 4 rows of a
 * warp), and the source side waits for the tags.
 * Block 0 finally waits for every peer's start word.  The arithmetic is eep/ep.h's;
 * kernels/ep/ep_numeric.cuh fixes the roundings.
 *
 * Training (issue 26): p.combine_flags EEP_EPK_COMBINE_UNWEIGHTED sums the rows as they are (every
 * weight 1: fmaf(1, y, acc) rounds as y + acc, the backward of dispatch).  The second entry,
 *   __device__ void eep_ep_combine_topk_grad_body(const eep_epk_params_t &p);
 * moves K fp32 values per record instead of H bf16 channels, through the same rows, tags, lines
 * and handshake: for lane k of token t, on the rank of expert k, d = dot(y[row], y_grad[row]) (one
 * warp: lane l sums channels of vectors l, l + 32, ... with fmaf in order, then a butterfly of
 * adds over lanes 16, 8, 4, 2, 1; tests/common/ep_reference.c repeats it bit for bit), 0 on the
 * other lanes, summed over the token's ranks ascending into topk_grad[t][k] (exactly d).
 */
#ifndef EEP_KERNELS_EP_COMBINE_CUH
#define EEP_KERNELS_EP_COMBINE_CUH

#include "ep_common.cuh"
#include "ep_gin.cuh"
#include "ep_numeric.cuh"
#include "ll_line.cuh"

#ifdef __CUDACC__

/* 1: the one-row path (eep_epc_one_row) is compiled in; the host asks for it for rank-major
   handles and unweighted combines only (elastic/ep/ep_kernels.h EEP_EP_COMBINE_ONE_ROW) */
#ifndef EEP_EPK_ONE_ROW
#define EEP_EPK_ONE_ROW 0
#endif

/*
 * The weighted sum of one record's rows over vectors vec(u) (u < U; -1: none) of 8 channels:
 * lane k < K holds the record's row @p my_row (-1: not a local expert) and weight
 * @p my_w, @p rows_mask their ballot; G rows' loads in flight, then the fmas in lane order k
 * ascending from 0 (the contract's order, eep/ep.h); the bf16 partial packed into @p part.
 * Every lane of the warp calls it (it shuffles with the full mask).
 */
template <int U, int G, typename Vec>
__device__ __forceinline__ void eep_epc_weighted(const eep_epk_params_t &p, int my_row, float my_w,
                                                 unsigned rows_mask, Vec vec, uint4 (&part)[U])
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
                if (rr[g] >= 0 && vec(u) >= 0) {
                    yv[g][u] = ((const uint4 *)((const unsigned short *)p.y +
                                                (long long)rr[g] * EEP_EPK_H(p)))[vec(u)];
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
 * Top-k gradients: lane k < K gets dot(y[row_k], y_grad[row_k]) in fp32 for each row in
 * @p rows_mask (0 elsewhere); every lane of the warp calls it.  The order: lane l sums the
 * channels of vectors l, l + 32, ... ascending with fmaf from 0, then the lanes' sums are added
 * in a butterfly (xor 16, 8, 4, 2, 1; IEEE adds commute, so every lane ends with one value).
 */
__device__ __forceinline__ float eep_epc_dots(const eep_epk_params_t &p, int my_row,
                                              unsigned rows_mask, unsigned lane)
{
    const int vecs = EEP_EPK_H(p) / 8;
    float     mine = 0.0f;
    unsigned  m    = rows_mask;

    while (m != 0) { /* warp-uniform (a ballot) */
        const int    k   = __ffs(m) - 1;
        const int    row = __shfl_sync(0xffffffffu, my_row, k);
        const uint4 *yr  = (const uint4 *)((const unsigned short *)p.y +
                                          (long long)row * EEP_EPK_H(p));
        const uint4 *gr  = (const uint4 *)((const unsigned short *)p.y_grad +
                                          (long long)row * EEP_EPK_H(p));
        float        acc = 0.0f;

        m &= m - 1;
        for (int v = (int)lane; v < vecs; v += 32) {
            float a[8], b[8];
            eep_bf16x8_unpack(yr[v], a);
            eep_bf16x8_unpack(gr[v], b);
#pragma unroll
            for (int j = 0; j < 8; j++) {
                acc = eep_fma(a[j], b[j], acc);
            }
        }
#pragma unroll
        for (int x = 16; x >= 1; x /= 2) {
            acc = eep_add(acc, __shfl_xor_sync(0xffffffffu, acc, x));
        }
        if ((int)lane == k) {
            mine = acc;
        }
    }
    return mine;
}

/* The 16-byte vector @p v of a top-k gradient row: the dots of lanes 4v .. 4v + 3 (zeros for
   v < 0).  Every lane calls it (full-mask shuffles); K <= 32 keeps 4v + 3 a lane. */
__device__ __forceinline__ uint4 eep_epc_dot_vec(float dot, int v)
{
    const int b = v < 0 ? 0 : 4 * v;
    uint4     r;

    r.x = __float_as_uint(__shfl_sync(0xffffffffu, dot, (b + 0) & 31));
    r.y = __float_as_uint(__shfl_sync(0xffffffffu, dot, (b + 1) & 31));
    r.z = __float_as_uint(__shfl_sync(0xffffffffu, dot, (b + 2) & 31));
    r.w = __float_as_uint(__shfl_sync(0xffffffffu, dot, (b + 3) & 31));
    return v < 0 ? make_uint4(0u, 0u, 0u, 0u) : r;
}

/* The units of a combine row: 16-byte vectors of 8 bf16 channels, or (TG) of 4 fp32 gradients. */
template <bool TG>
__device__ __forceinline__ int eep_epc_vecs(const eep_epk_params_t &p)
{
    return TG ? (EEP_EPK_K(p) + 3) / 4 : EEP_EPK_H(p) / 8;
}

/* A record's weight for the partial: 1 in an unweighted combine. */
__device__ __forceinline__ float eep_epc_weight(const eep_epk_params_t &p, float w)
{
    return (p.combine_flags & EEP_EPK_COMBINE_UNWEIGHTED) ? 1.0f : w;
}

/*
 * The expert side of one record (source @p s, index @p i): the bf16 partial of units [b, e) of
 * the source's combine row in region `ordinal`, row `token`; one warp, every lane.  LL: the units
 * are flagged 128-byte lines, stored with @p seq as their flag (kernels/ep/ll_line.cuh); else
 * they are 16-byte vectors of a plain row whose tag the caller stores after a fence.
 * @return the row.
 */
template <bool LL, bool TG>
__device__ __forceinline__ unsigned char *
eep_epc_partial(const eep_epk_params_t &p, unsigned char *const *peer_base,
                unsigned long long region0, int s, int i, int b, int e, unsigned long long seq,
                unsigned lane)
{
    const int K = EEP_EPK_K(p), vecs = eep_epc_vecs<TG>(p);

    const long long rec       = (long long)s * p.max_tokens + i;
    const int       tok       = ((const int *)p.h_recv_tok)[rec];
    const int       ord       = ((const int *)p.h_recv_ord)[rec];
    const int       my_row    = (int)lane < K ? ((const int *)p.h_recv_rows)[rec * K + lane] : -1;
    const float     my_w      = (int)lane < K
                                    ? eep_epc_weight(p, ((const float *)p.h_recv_w)[rec * K + lane])
                                    : 0.0f;
    const unsigned  rows_mask = __ballot_sync(0xffffffffu, my_row >= 0);
    const float     dot       = TG && b < e ? eep_epc_dots(p, my_row, rows_mask, lane) : 0.0f;
    unsigned char  *dst_row   = peer_base[s] + region0 + (unsigned long long)ord * p.crecv_region +
                             (unsigned long long)tok * p.crecv_row;
#if EEP_EPK_GIN
    if (eep_epk_is_gin(p, s) && eep_epk_fwd_on(p)) {
        /* to the forwarder of s's tokens on this node (its local index), over NVLink */
        const int L = eep_epk_gin(p).lsa_size;

        dst_row = eep_epk_peer(p, eep_epk_fwd_crow(p, (int)(seq & 1ull), s / L, p.rank % L, tok),
                               p.rank / L * L + s % L);
    } else if (eep_epk_is_gin(p, s)) { /* staged by record; eep_epk_gin_combine_puts sends it */
        dst_row = peer_base[p.rank] + eep_epk_gin_row_stage(p, rec);
    }
#endif

    /* 2 vectors per lane (LL: 2 x 4 lines) x up to 4 top-k rows in flight (8 loads) a round;
       every lane runs every round (the body shuffles with the full mask, LL stores meet): a
       slice under 32 vectors (H 2048 split over 16 warps) let lanes leave and hung the warp */
    for (int b0 = b; b0 < e; b0 += LL ? 2 * EEP_LL_WARP_LINES : 2 * 32) {
        int   line[2], vv[2];
        uint4 part[2];

#pragma unroll
        for (int u = 0; u < 2; u++) {
            if (LL) {
                line[u] = eep_ll_round_line(b0, u, lane);
                vv[u]   = line[u] < e ? eep_ll_vector(line[u], lane, vecs) : -1;
            } else {
                line[u] = 0;
                vv[u]   = b0 + 32 * u + (int)lane < e ? b0 + 32 * u + (int)lane : -1;
            }
        }
        if (TG) {
#pragma unroll
            for (int u = 0; u < 2; u++) {
                part[u] = eep_epc_dot_vec(dot, vv[u]);
            }
        } else {
            eep_epc_weighted<2, 4>(
                p, my_row, my_w, rows_mask, [&vv](int u) { return vv[u]; }, part);
        }
#pragma unroll
        for (int u = 0; u < 2; u++) {
            if (LL) {
                eep_ll_store(eep_ll_slot(dst_row, line[u], lane),
                             vv[u] >= 0 ? part[u] : make_uint4(0u, 0u, 0u, 0u), seq, line[u] < e,
                             lane);
            } else if (vv[u] >= 0) {
                ((uint4 *)dst_row)[vv[u]] = part[u];
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

/* What the source side knows of one token: its destination ranks @p dm (n of them), the region
   index jl of this rank's own partial when it is computed here (-1: read like the others), that
   partial's rows and weights (lane k < K), and where the sum goes. */
struct eep_epc_token {
    int            n, jl;
    unsigned       dm, rows_mask;
    int            my_row;
    float          my_w;
    float          dot; /* TG: this lane's own top-k gradient (computed here when jl >= 0) */
    uint4         *out;
    float         *tg;   /* TG: the token's topk_grad row */
    unsigned char *rows; /* region 0's row of the token; region j's is j crecv_region further */
};

/* Region j's source: the j-th destination rank of the token. */
__device__ __forceinline__ int eep_epc_region_source(unsigned dm, int j)
{
    for (int k = 0; k < j; k++) {
        dm &= dm - 1;
    }
    return __ffs(dm) - 1;
}

/* acc[u] += the 8 channels of @p pv[u] (TG: its 4 fp32 values), for the u where vec(u) >= 0
   (fp32, in call order). */
template <bool TG, int U, typename Vec>
__device__ __forceinline__ void eep_epc_accumulate(float (&acc)[U][8], const uint4 (&pv)[U],
                                                   Vec vec)
{
#pragma unroll
    for (int u = 0; u < U; u++) {
        if (TG && vec(u) >= 0) {
            acc[u][0] = eep_add(acc[u][0], __uint_as_float(pv[u].x));
            acc[u][1] = eep_add(acc[u][1], __uint_as_float(pv[u].y));
            acc[u][2] = eep_add(acc[u][2], __uint_as_float(pv[u].z));
            acc[u][3] = eep_add(acc[u][3], __uint_as_float(pv[u].w));
        } else if (vec(u) >= 0) {
            float y[8];
            eep_bf16x8_unpack(pv[u], y);
#pragma unroll
            for (int i = 0; i < 8; i++) {
                acc[u][i] = eep_add(acc[u][i], y[i]);
            }
        }
    }
}

/* This rank's own partial of token @p k over vectors vec(u): weighted rows, or (TG) its dots. */
template <bool TG, int U, int G, typename Vec>
__device__ __forceinline__ void eep_epc_own(const eep_epk_params_t &p, const eep_epc_token &k,
                                            Vec vec, uint4 (&own)[U])
{
    if (TG) {
#pragma unroll
        for (int u = 0; u < U; u++) {
            own[u] = eep_epc_dot_vec(k.dot, vec(u));
        }
    } else {
        eep_epc_weighted<U, G>(p, k.my_row, k.my_w, k.rows_mask, vec, own);
    }
}

/* Store the sum of vector @p v (>= 0): 8 bf16 channels of out, or (TG) 4 top-k gradients. */
template <bool TG>
__device__ __forceinline__ void eep_epc_store(const eep_epk_params_t &p, const eep_epc_token &k,
                                              int v, const float (&acc)[8])
{
    if (TG) {
#pragma unroll
        for (int i = 0; i < 4; i++) {
            if (4 * v + i < EEP_EPK_K(p)) {
                k.tg[4 * v + i] = acc[i];
            }
        }
    } else {
        k.out[v] = eep_bf16x8_pack(acc);
    }
}

/*
 * The sum of token @p k's partials over lines [b, e) (flagged lines, LL): the own partial first
 * (if computed here), then each region's lines loaded until their flags read @p seq, added in
 * region order.  Rounds of 8 lines (2 vectors per lane).  @return false when a wait gave up.
 */
template <bool TG>
__device__ __forceinline__ bool eep_epc_sum_lines(const eep_epk_params_t &p, const eep_wait_ctx &w,
                                                  const eep_epc_token &k, int b, int e,
                                                  unsigned long long seq, unsigned lane)
{
    const int vecs = eep_epc_vecs<TG>(p);

    for (int l0 = b; l0 < e; l0 += 2 * EEP_LL_WARP_LINES) {
        int   line[2], vv[2];
        uint4 own[2];
        float acc[2][8];

#pragma unroll
        for (int u = 0; u < 2; u++) {
            line[u] = eep_ll_round_line(l0, u, lane);
            vv[u]   = line[u] < e ? eep_ll_vector(line[u], lane, vecs) : -1;
#pragma unroll
            for (int i = 0; i < 8; i++) {
                acc[u][i] = 0.0f;
            }
        }
        if (k.jl >= 0) {
            eep_epc_own<TG, 2, 4>(
                p, k, [&vv](int u) { return vv[u]; }, own);
        }
        for (int j = 0; j < k.n; j++) {
            uint4 pv[2];

            if (j == k.jl) {
#pragma unroll
                for (int u = 0; u < 2; u++) {
                    pv[u] = own[u];
                }
            } else {
                unsigned char *row = k.rows + (unsigned long long)j * p.crecv_region;

                if (!eep_warp_wait_geq(
                        w,
                        [&] {
                            unsigned long long f = ~0ull;
#pragma unroll
                            for (int u = 0; u < 2; u++) {
                                f = min(f, eep_ll_load(eep_ll_slot(row, line[u], lane), pv[u],
                                                       line[u] < e, lane));
                            }
                            return f;
                        },
                        seq, EEP_PHASE_EP_COMBINE, eep_epc_region_source(k.dm, j))) {
                    return false;
                }
            }
            eep_epc_accumulate<TG>(acc, pv, [&vv](int u) { return vv[u]; });
        }
#pragma unroll
        for (int u = 0; u < 2; u++) {
            if (vv[u] >= 0) {
                eep_epc_store<TG>(p, k, vv[u], acc[u]);
            }
        }
    }
    return true;
}

/* bf16(0 + bf16(fma(1, y, 0))) of two bf16 channels, on bits: y itself, except -0 -> +0 (a
   round-to-nearest -0 + +0) and any NaN -> 0x7FFF (eep_f32_to_bf16); subnormals are kept, as
   fmaf keeps them (no flush-to-zero in the JIT's flags). */
__device__ __forceinline__ unsigned int eep_bf16_one(unsigned int h)
{
    return h == 0x8000u ? 0u : (h & 0x7fffu) > 0x7f80u ? 0x7fffu : h;
}

__device__ __forceinline__ unsigned int eep_bf16x2_one(unsigned int u)
{
    return eep_bf16_one(u & 0xffffu) | (eep_bf16_one(u >> 16) << 16);
}

/*
 * Token @p k's only partial is its own, from the one row @p row with weight 1 (one rank and a
 * rank-major handle, an unweighted combine, or a token whose one local lane is its only
 * destination): out = bf16(0 + bf16(fma(1, y, 0))), which is y's bits with -0 and NaN made
 * canonical (the general path's very roundings), 8 vectors a lane in flight.  The general path
 * ran such rows at ~22 GB/s an SM (one rank, T 4096, H 7168, 24 SMs: 225 us, 7.8x the HBM
 * floor; 101 us this way), bound by its 4 loads behind each round's stores and ~130 float
 * instructions a vector.  Bits only: a float path here for other weights (~1,000 more unrolled
 * instructions) made the expert-major combine 7-15 % slower (bench/RESULTS.md).
 */
__device__ __forceinline__ void eep_epc_one_row(const eep_epk_params_t &p, const eep_epc_token &k,
                                                int row, int b, int e, unsigned lane)
{
    constexpr int U  = 8;
    const uint4  *y4 = (const uint4 *)((const unsigned short *)p.y + (long long)row * EEP_EPK_H(p));

    for (int b0 = b; b0 < e; b0 += 32 * U) {
        uint4 v[U];

#pragma unroll
        for (int u = 0; u < U; u++) { /* every load first */
            const int vi = b0 + 32 * u + (int)lane;
            if (vi < e) {
                v[u] = y4[vi];
            }
        }
#pragma unroll
        for (int u = 0; u < U; u++) {
            const int vi = b0 + 32 * u + (int)lane;
            if (vi < e) {
                k.out[vi] = make_uint4(eep_bf16x2_one(v[u].x), eep_bf16x2_one(v[u].y),
                                       eep_bf16x2_one(v[u].z), eep_bf16x2_one(v[u].w));
            }
        }
    }
}

/*
 * The sum of token @p k's partials over vectors [b, e) (plain rows with a tag after the data):
 * the own partial of the first round computed before the wait, so that it overlaps the other
 * rows' flight; lane j < n, j != jl, waits for region j's tag once; then rounds of 4 vectors per
 * lane, partials added in region order.  @return false when a wait gave up.
 */
template <bool TG>
__device__ __forceinline__ bool eep_epc_sum_rows(const eep_epk_params_t &p, const eep_wait_ctx &w,
                                                 const eep_epc_token &k, int b, int e,
                                                 unsigned long long seq, unsigned lane)
{
    bool waited = false;

    if (EEP_EPK_ONE_ROW && !TG && k.n == 1 && k.jl == 0 &&
        __popc(k.rows_mask) == 1) { /* warp-uniform */
        const int src = __ffs(k.rows_mask) - 1;

        if (__shfl_sync(0xffffffffu, k.my_w, src) == 1.0f) {
            eep_epc_one_row(p, k, __shfl_sync(0xffffffffu, k.my_row, src), b, e, lane);
            return true;
        }
    }
    for (int b0 = b; b0 < e; b0 += 32 * 4) {
        const int v0 = b0 + (int)lane;
        uint4     own[4];
        float     acc[4][8];

        if (k.jl >= 0) {
            eep_epc_own<TG, 4, 2>(
                p, k, [v0, e](int u) { return v0 + 32 * u < e ? v0 + 32 * u : -1; }, own);
        }
        if (!waited) {
            int ok = 1;

            if ((int)lane < k.n && (int)lane != k.jl) {
                const unsigned char      *row = k.rows + (unsigned long long)lane * p.crecv_region;
                const unsigned char      *tag_at = row + p.crow_tag;
                const unsigned long long *tag    = (const unsigned long long *)tag_at;

                /* the warp follows the acquire through the __syncwarp below */
                ok = eep_epk_wait_tag(p, w, tag, seq, EEP_PHASE_EP_COMBINE,
                                      eep_epc_region_source(k.dm, (int)lane));
            }
            if (__any_sync(0xffffffffu, !ok)) {
                return false;
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
        for (int j = 0; j < k.n; j++) {
            const uint4 *p4 = (const uint4 *)(k.rows + (unsigned long long)j * p.crecv_region);
            uint4        pv[4];

#pragma unroll
            for (int u = 0; u < 4; u++) {
                if (j == k.jl) {
                    pv[u] = own[u];
                } else if (v0 + 32 * u < e) {
                    pv[u] = p4[v0 + 32 * u];
                }
            }
            /* every u (as before the helper: conditional adds spill here) */
            eep_epc_accumulate<TG>(acc, pv, [](int) { return 0; });
        }
#pragma unroll
        for (int u = 0; u < 4; u++) {
            if (v0 + 32 * u < e) {
                eep_epc_store<TG>(p, k, v0 + 32 * u, acc[u]);
            }
        }
    }
    return true;
}

template <bool LL, bool TG>
__device__ __forceinline__ void eep_epc_body(const eep_epk_params_t &p)
{
    __shared__ int                block_failed;
    __shared__ unsigned long long sh_seq;
    __shared__ int                rec_base[EEP_EPK_MAX_WORLD + 1];
    __shared__ unsigned char     *peer_base[EEP_EPK_MAX_WORLD];

    const int      W = EEP_EPK_W(p), vecs = eep_epc_vecs<TG>(p);
    const unsigned lane = threadIdx.x & 31u, warp = threadIdx.x >> 5;
    const int      gwarps = gridDim.x * EEP_EPK_WARPS;

    if (threadIdx.x == 0) {
        block_failed = 0;
        sh_seq       = eep_epk_begin(p, EEP_EPK_CTL_CSEQ, EEP_EPK_CTL_CWORK);
    }
    if (threadIdx.x < 32) { /* records per source, prefix by a warp scan (W <= 32) */
        const int n    = (int)lane < W ? ((const int *)p.h_recv_n)[lane] : 0;
        const int incl = eep_epk_warp_incl_scan(n, lane);

        if ((int)lane < W) {
            rec_base[lane] = incl - n;
        }
        if (lane == 31) {
            rec_base[W] = incl;
        }
    }
    for (int d = threadIdx.x; d < W; d += blockDim.x) {
        peer_base[d] = eep_epk_peer_base(p, d);
    }
    __syncthreads();
    const unsigned long long seq     = sh_seq;
    const int                parity  = (int)(seq & 1ull);
    const unsigned long long region0 = p.crecv_off + (unsigned long long)parity * p.crecv_regions *
                                                         p.crecv_region;

    eep_epk_stamp(p, 0);
    /* The handshake word, to every peer. */
#if EEP_EPK_GIN
    if (blockIdx.x == 0 && (int)threadIdx.x < W && eep_epk_is_gin(p, (int)threadIdx.x)) {
        ncclGin gin(eep_epk_gin_dc(p), 0);

        if (!eep_epk_dead(p, (int)threadIdx.x)) { /* nothing to a dead peer */
            gin.signal(
                ncclTeamWorld(eep_epk_gin_dc(p)), (int)threadIdx.x,
                ncclGin_SignalInc{ (ncclGinSignal_t)(eep_epk_gin(p).sig0 + 2 * W + p.rank) });
        }
    } else
#endif
        if (blockIdx.x == 0 && (int)threadIdx.x < W && !eep_epk_dead(p, (int)threadIdx.x)) {
        unsigned long long *slot = (unsigned long long *)(peer_base[threadIdx.x] + p.counts_off +
                                                          ((unsigned long long)p.rank * 2 +
                                                           parity) *
                                                              p.slot_bytes);
        eep_epk_st_release(p, slot + EEP_EPK_SLOT_CDONE, (seq << 32) | 1ull);
    }

    /* Expert side, few records (decode): `split` warps per record (2 to 16: a warp group),
       the groups of a block taking records in step, the group's warps splitting the units
       (lines, or vectors).  A record's channels over one warp are ~H/512 dependent rounds of
       loads, which at decode size is most of the kernel; enough records to fill the grid take
       the dynamic path.  LL: no fence, no sync, no tag (each line carries its flag); else the
       block syncs, fences, and the first thread of each group stores its record's tag. */
    /* More records than warp groups (prefill): only the records from peers here; this rank's
       own tokens are summed on the source side from the rows themselves (no partial written and
       read back: 2 x 59 MB of HBM traffic at T 4096, H 7168, 2 ranks).  Remote record r is
       record r (before this rank's) or r + nl (after them).  Few records (decode): every record
       here, since the source side's warps come to their tokens only after their records, and
       computing the own partial there put ~2 us on the critical path. */
    const int units = LL ? eep_ll_lines(vecs) : vecs;
    /* One rank (a survivor after a shrink to itself): every token's only partial is its own,
       so the source side sums its rows straight into out, at any size (no partial written,
       no line flags or tags waited for). */
    const bool own_at_source = W == 1 || eep_epc_split(rec_base[W], (int)gridDim.x) == 1;
    const int  lb            = rec_base[p.rank];
    const int  nl            = own_at_source ? rec_base[p.rank + 1] - lb : 0;
    const int  recs          = rec_base[W] - nl;
    const int  split         = eep_epc_split(recs, (int)gridDim.x);
    if (split > 1) {
        const int groups = EEP_EPK_WARPS / split, g = (int)warp / split, gw = (int)warp % split;
        const int per_round = (int)gridDim.x * groups;

        /* LL groups go on alone; else the block meets once per round of records */
        for (int q0 = (int)blockIdx.x * groups; LL ? q0 + g < recs : q0 < recs; q0 += per_round) {
            const int      q   = q0 + g < lb ? q0 + g : q0 + g + nl;
            unsigned char *row = nullptr;

            if (q0 + g < recs) {
                const int s = eep_epc_source(rec_base, q);

                row = eep_epc_partial<LL, TG>(p, peer_base, region0, s, q - rec_base[s],
                                              units * gw / split, units * (gw + 1) / split, seq,
                                              lane);
                if (!LL) {
                    eep_epk_fence_release(p);
                }
            }
            if (!LL) {
                __syncthreads();
                if (row != nullptr && gw == 0 && lane == 0) {
                    eep_epk_fence_release(p);
                    eep_epk_tag_store(row, p.crow_tag, seq);
                }
            }
        }
    }
    /* Expert side: records taken dynamically (this parity's counter, zeroed by the previous
       call); plain rows: one system fence per 4 records of a warp, then their tags. */
    unsigned int  *work         = (unsigned int *)(p.ctl + EEP_EPK_CTL_CWORK) + parity;
    unsigned char *done_rows[4] = { nullptr, nullptr, nullptr, nullptr };
    int            ndone        = 0;
    for (; split == 1;) {
        int q = 0;

        if (lane == 0) {
            q = (int)atomicAdd(work, 1u);
        }
        q = __shfl_sync(0xffffffffu, q, 0);
        if (q >= recs) {
            break;
        }
        q                  = q < lb ? q : q + nl;
        const int      s   = eep_epc_source(rec_base, q);
        unsigned char *row = eep_epc_partial<LL, TG>(p, peer_base, region0, s, q - rec_base[s], 0,
                                                     units, seq, lane);
        if (!LL) {
            done_rows[ndone++] = row;
            if (ndone == 4) {
                eep_epk_fence_release(p);
                __syncwarp();
                if (lane < 4) {
                    eep_epk_tag_store(done_rows[lane], p.crow_tag, seq);
                }
                ndone = 0;
            }
        }
    }
    if (ndone > 0) {
        eep_epk_fence_release(p);
        __syncwarp();
        if ((int)lane < ndone) {
            eep_epk_tag_store(done_rows[lane], p.crow_tag, seq);
        }
    }

    eep_epk_stamp(p, 1);
#if EEP_EPK_GIN
    /* Hybrid: the last block done with the expert side puts every GIN peer's partials (and its
       signal); every block then waits for each GIN peer's signal of this call before its
       source side reads their rows (which then read as if stored over NVLink). */
    if (p.gin_mask != 0) {
        const bool fwd = eep_epk_fwd_on(p);

        if (eep_epk_gin_last(p, EEP_EPK_CTL_CGIN, parity, (int)gridDim.x) &&
            !(fwd ? eep_epk_fwd_combine(p, seq, parity, region0, &block_failed)
                  : eep_epk_gin_combine_puts(p, region0, &block_failed))) {
            return;
        }
        /* the signals come from the peers that put the rows: each GIN peer, or with forwarding
           the rail peers (the forwarders of this rank's tokens) */
        eep_epk_gin_wait_mask(p, fwd ? eep_epk_rail_mask(p) : p.gin_mask, eep_epk_gin(p).sig0 + W,
                              seq, EEP_PHASE_EP_COMBINE, &block_failed);
        __syncthreads();
        if (*(volatile int *)&block_failed) {
            return;
        }
    }
#endif
    /* Source side: `tsplit` warps per token (as many as the grid has for few tokens), each
       summing its slice of the units: this rank's own partial computed here from its rows (the
       handle's record of the token at its slot) when own_at_source, the others as they land
       (after the own partial, so that it overlaps their flight); partials in region order j =
       destination ranks ascending, as the contract fixes. */
    const eep_wait_ctx w      = eep_epk_wait_ctx(p, &block_failed);
    const int          tsplit = eep_epc_split(p.num_tokens, (int)gridDim.x);
    const int          gwarp  = (int)blockIdx.x * EEP_EPK_WARPS + (int)warp;
    const int          tb     = units * (gwarp % tsplit) / tsplit;
    const int          te     = units * (gwarp % tsplit + 1) / tsplit;
    const int          K      = EEP_EPK_K(p);
    for (int t = gwarp / tsplit; t < p.num_tokens && tb < te; t += gwarps / tsplit) {
        const int    *slots = (const int *)p.h_send_slot + (long long)t * W;
        eep_epc_token k;

        k.dm = 0;
        for (int d = lane; d < W; d += 32) {
            k.dm |= slots[d] >= 0 ? 1u << d : 0u;
        }
        k.dm = __reduce_or_sync(0xffffffffu, k.dm);
        k.n  = __popc(k.dm);
        k.jl = own_at_source && ((k.dm >> p.rank) & 1u) ? __popc(k.dm & ((1u << p.rank) - 1u)) : -1;
        k.my_row = -1;
        k.my_w   = 0.0f;
        if (k.jl >= 0 && (int)lane < K) {
            const long long rec = (long long)p.rank * p.max_tokens + slots[p.rank];

            k.my_row = ((const int *)p.h_recv_rows)[rec * K + lane];
            k.my_w   = eep_epc_weight(p, ((const float *)p.h_recv_w)[rec * K + lane]);
        }
        k.rows_mask = __ballot_sync(0xffffffffu, k.my_row >= 0);
        k.dot       = TG && k.jl >= 0 ? eep_epc_dots(p, k.my_row, k.rows_mask, lane) : 0.0f;
        k.out  = TG ? nullptr : (uint4 *)((unsigned short *)p.out + (long long)t * EEP_EPK_H(p));
        k.tg   = TG ? (float *)p.topk_grad + (long long)t * K : nullptr;
        k.rows = peer_base[p.rank] + region0 + (unsigned long long)t * p.crecv_row;
        if (!(LL ? eep_epc_sum_lines<TG>(p, w, k, tb, te, seq, lane)
                 : eep_epc_sum_rows<TG>(p, w, k, tb, te, seq, lane))) {
            break;
        }
    }

    eep_epk_stamp(p, 2);
    /* Every peer started this combine (so none can be two calls ahead: docs/dispatch.md 3). */
#if EEP_EPK_GIN
    if (blockIdx.x == 0 && p.gin_mask != 0) { /* GIN peers signal, the others store the word */
        eep_epk_gin_wait_peers(p, eep_epk_gin(p).sig0 + 2 * W, seq, EEP_PHASE_EP_COMBINE,
                               &block_failed);
        if ((int)threadIdx.x < W && !eep_epk_is_gin(p, (int)threadIdx.x)) {
            eep_epk_wait_slot_words_one(p, peer_base[p.rank] + p.counts_off, parity,
                                        EEP_EPK_SLOT_CDONE, seq, EEP_PHASE_EP_COMBINE,
                                        &block_failed);
        }
        __syncthreads();
    } else
#endif
        if (blockIdx.x == 0) {
        (void)eep_epk_wait_slots(p, peer_base[p.rank] + p.counts_off, parity, EEP_EPK_SLOT_CDONE,
                                 seq, EEP_PHASE_EP_COMBINE, &block_failed);
    }

    eep_epk_stamp(p, 3);
    eep_epk_stamp(p, 7);
}

/* The combine: flagged lines when the buffers are sized for decode (EEP_EPK_LINES_COMBINE in
   p.lines, set by the host from max_tokens_per_rank, the same on every rank; fixed at JIT time),
   plain tagged rows otherwise. */
__device__ void eep_ep_combine_body(const eep_epk_params_t &p)
{
    eep_epk_prologue(p);
    if (EEP_EPK_LINES(p) & EEP_EPK_LINES_COMBINE) {
        eep_epc_body<true, false>(p);
    } else {
        eep_epc_body<false, false>(p);
    }
}

/* The top-k weight gradients of a combine (the file's opening comment): topk_grad[t][k] =
   dot(y[row], y_grad[row]) of lane k's row, through the combine's rows and handshake. */
__device__ void eep_ep_combine_topk_grad_body(const eep_epk_params_t &p)
{
    eep_epk_prologue(p);
    if (EEP_EPK_LINES(p) & EEP_EPK_LINES_COMBINE) {
        eep_epc_body<true, true>(p);
    } else {
        eep_epc_body<false, true>(p);
    }
}

#endif /* __CUDACC__ */

#endif /* EEP_KERNELS_EP_COMBINE_CUH */
