/*
 * kernels/ep/dispatch_copy.cuh - dispatch, phase 5: the copy blocks lay out the expert-major
 * rows (warp scans of the counts, padding rows) and place each received record once its tag
 * holds the call's sequence (eep_epk_expand).
 */
#ifndef EEP_KERNELS_EP_DISPATCH_COPY_CUH
#define EEP_KERNELS_EP_DISPATCH_COPY_CUH

#include "ep_common.cuh"

#ifdef __CUDACC__

/* Shared state of the expanders (the copy from received records to expert-major rows). */
struct eep_epk_copy_smem {
    int n[EEP_EPK_MAX_WORLD];         /* records from each source */
    int nbase[EEP_EPK_MAX_WORLD + 1]; /* rank-major: rows before each source (sum of n) */
    int counts[256];
    int offsets[257];
    int pad_base[257];            /* padding rows of experts < e */
    int warp_off[8], warp_pad[8]; /* eep_epk_layout_scan: per-warp totals (El <= 256) */
};
/* eep_epk_layout_scan: a warp for each 32 of 256 local experts */
static_assert(EEP_EPK_WARPS >= 256 / 32, "eep_epk_layout_scan needs 8 warps a block");

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
    if (El == 0 && threadIdx.x == 0) { /* a rank that holds no expert: empty layout */
        sm.offsets[0]  = 0;
        sm.pad_base[0] = 0;
    }
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
    const int            El = p.num_local, K = EEP_EPK_K(p);
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
    /* Rank-major: one row a record, so a round of loads feeds one row's stores, not K: a piece
       per round left each warp's dependent chain (work counter, tag, metadata) in front of 4 KB
       of stores, ~17 GB/s an SM at one rank (T 4096, 21 copy SMs); whole records unless there
       are fewer records than warps. */
    const int     CHK  = p.rank_major ? max(1, min(16, total > 0 ? gwarps / total : 1))
                                      : max(min(rounds, 16), min(16, total > 0 ? gwarps / total : 1));
    const int     span = max_n * EEP_EPK_W(p) * CHK;
    unsigned int *work = (unsigned int *)(p.ctl + EEP_EPK_CTL_DWORK) + parity;
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
        int          my_id = -1, my_row = -1, my_local = 0, my_slot = -1;
        unsigned     my_rank_bit = 0u; /* the rank of this lane's expert, as a bit */
        float        my_w        = 0.0f;

        if ((int)lane < K) {
            my_id = ids[lane];
            my_w  = wts[lane];
            if (my_id >= 0) { /* the senders drop a token with an id outside [-1, E) */
                const unsigned pl = eep_epk_place_of(p, my_id);

                my_rank_bit = 1u << (pl >> 16);
                my_local    = (int)(pl >> 16) == p.rank;
                my_slot     = (int)(pl & 0xffffu);
            }
            if (my_local && !p.rank_major) {
                const int e = my_slot;

                my_row = Mode == EEP_EPK_CACHED
                             ? ((const int *)p.h_recv_rows)[rec * K + lane]
                             : sm.offsets[e] + src_prefix[s * El + e] + pos[lane];
            }
        }
        /* Rank-major: the record's one row (sources ascending, then slots), held by its first
           local lane; the handle gives that lane the row and weight 1, so that the combine sums
           bf16(1 * y[row]) = y[row], the caller's own sum of its local experts. */
        const unsigned local_mask = __ballot_sync(0xffffffffu, my_local);
        const bool     rm_lane    = p.rank_major && local_mask != 0 &&
                             (int)lane == __ffs((int)local_mask) - 1;
        if (rm_lane) {
            my_row = sm.nbase[s] + i;
        }
        /* Handle: rows and weights per lane, token, ordinal among the token's ranks. */
        unsigned dmask = __reduce_or_sync(0xffffffffu, my_rank_bit);
        if ((int)lane < K && c == 0) {
            if (Mode != EEP_EPK_CACHED) {
                ((int *)p.h_recv_rows)[rec * K + lane] = my_row;
            }
            ((float *)p.h_recv_w)[rec * K + lane] = p.rank_major ? (rm_lane ? 1.0f : 0.0f)
                                                    : my_local   ? my_w
                                                                 : 0.0f;
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
            /* The copy engine already moved x to recv_x row for row (p.ce_copied, one rank,
               rank-major, every token received): a record whose row is its token's index needs
               its metadata only.  Warp-uniform (the row is the first local lane's). */
            const int  first_row = rows_mask != 0
                                       ? __shfl_sync(0xffffffffu, my_row, __ffs((int)rows_mask) - 1)
                                       : -1;
            const bool ce_done   = p.ce_copied && local && first_row == (int)t_src;
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
                 !ce_done && b0 < (LL && local ? min(ue * EEP_LL_DATA_SLOTS, (unsigned)nv) : ue);
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

                if (p.scale_bytes != 0 && !ce_done) {
                    eep_epk_copy4((unsigned char *)p.recv_x_scales +
                                      (unsigned long long)r * p.scale_bytes,
                                  scales, p.scale_bytes, lane, 32);
                }
                if ((int)lane < K) {
                    ((int *)p.recv_topk_idx)[(long long)r * K + lane] = my_local ? my_slot : -1;
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
            /* degraded mode: a dead peer sent nothing (its slot holds an older call's) */
            sm.n[s] = eep_epk_muted(p, s)
                          ? 0
                          : (int)(unsigned)(slot[EEP_EPK_SLOT_TOKENS] & 0xffffffffull);
        }
        for (int e = threadIdx.x; e < El; e += blockDim.x) {
            int running = 0;

#pragma unroll 8
            for (int s = 0; s < EEP_EPK_W(p); s++) {
                const unsigned long long *slot =
                    (const unsigned long long *)(my_counts + ((unsigned long long)s * 2 + parity) *
                                                                 p.slot_bytes);
                src_prefix[s * El + e] = running;
                running += eep_epk_muted(p, s)
                               ? 0
                               : (int)(unsigned)(slot[EEP_EPK_SLOT_COUNTS + e] & 0xffffffffull);
            }
            sm.counts[e] = running;
        }
    }
    __syncthreads();
    if (p.rank_major) {
        if (threadIdx.x == 0) {
            int run = 0;

            for (int s = 0; s < EEP_EPK_W(p); s++) {
                sm.nbase[s] = run;
                run += sm.n[s];
            }
            sm.nbase[EEP_EPK_W(p)] = run;
        }
        __syncthreads();
    }
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
        for (int s = threadIdx.x; p.rank_major && s <= EEP_EPK_W(p); s += blockDim.x) {
            ((int *)p.recv_offsets)[s] = sm.nbase[s];
        }
        for (int e = threadIdx.x; e <= El; e += blockDim.x) {
            if (e < El) {
                ((int *)p.recv_counts)[e] = sm.counts[e];
            }
            if (!p.rank_major) {
                ((int *)p.recv_offsets)[e] = sm.offsets[e];
            }
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
    for (int j = gw; j < (p.rank_major ? 0 : sm.pad_base[El]); j += gwarps) {
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

#endif /* __CUDACC__ */

#endif /* EEP_KERNELS_EP_DISPATCH_COPY_CUH */
