/*
 * kernels/ep/dispatch_route.cuh - dispatch, phases 1, 2 and 4: a token's top-k ids to local
 * experts and destination ranks (bad ids reported), ids staged in shared memory, the
 * senders' order masks and positions, the per-expert counts and the chunk-count exchange,
 * and the counter's count slots (eep_epk_publish).
 */
#ifndef EEP_KERNELS_EP_DISPATCH_ROUTE_CUH
#define EEP_KERNELS_EP_DISPATCH_ROUTE_CUH

#include "dispatch_copy.cuh" /* eep_epk_copy_smem: the counter lays out its rows too */
#include "ep_common.cuh"

#ifdef __CUDACC__

template <int IdxBits>
__device__ __forceinline__ long long eep_epk_id(const eep_epk_params_t &p, long long i)
{
    if (IdxBits == 64) {
        return ((const long long *)p.topk_idx)[i];
    }
    return ((const int *)p.topk_idx)[i];
}

/* Token @p t's top-k id and weight of this lane (lane k < K: entry k, -1 when its expert's rank
   is dead (eep_epk_live_id); other lanes -1 and 0). */
template <int IdxBits>
__device__ __forceinline__ void eep_epk_lane_topk(const eep_epk_params_t &p, int t, unsigned lane,
                                                  int *id_p, float *w_p)
{
    const int K = EEP_EPK_K(p);

    *id_p = -1;
    *w_p  = 0.0f;
    if ((int)lane < K) {
        *id_p = (int)eep_epk_live_id(p, eep_epk_id<IdxBits>(p, (long long)t * K + lane));
        *w_p  = ((const float *)p.topk_weights)[(long long)t * K + lane];
    }
}

/* Route one token whose K ids come from get(k): its destination mask (the live ranks of its
   experts, eep_epk_rank_of; a dead rank's expert routes nowhere); or bad (an id outside [-1, E)
   or repeated in the token, checked on the ids as given: mask 0, *bad_id_p the offending id). */
template <typename GetId>
__device__ __forceinline__ unsigned eep_epk_route_ids(const eep_epk_params_t &p, GetId get, int K,
                                                      int E, bool *bad_p, long long *bad_id_p)
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
        if (eep_epk_live_id(p, e) >= 0) {
            mask |= 1u << (unsigned)eep_epk_rank_of(p, (int)e);
        }
    }
    return mask;
}

/* Route token t from the global ids. */
template <int IdxBits>
__device__ __forceinline__ unsigned eep_epk_route(const eep_epk_params_t &p, int t, bool *bad_p,
                                                  long long *bad_id_p)
{
    const long long base = (long long)t * EEP_EPK_K(p);

    return eep_epk_route_ids(
        p, [&p, base](int k) { return eep_epk_id<IdxBits>(p, base + k); }, EEP_EPK_K(p),
        p.num_experts, bad_p, bad_id_p);
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

/* A top-k id as staged in shared memory: itself, or -2 when out of range (not -1 and not in
   [0, @p E)); eep_epk_route reports a -2. */
__device__ __forceinline__ int eep_epk_staged_id(long long v, int E)
{
    return (v < -1 || v >= E) ? -2 : (int)v;
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
                stage[i] = eep_epk_staged_id(v[u], E);
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
 * none, or an expert of a dead rank: eep_epk_live_id), the token's destinations (the group's OR)
 * in *@p m_p.  @return whether the token is bad
 * (an id out of range, or repeated: each lane checks its id against the token's earlier ones),
 * alike on every lane of the group.  Every lane of the warp calls this (a ballot and shuffles).
 */
__device__ __forceinline__ bool eep_epk_group_route(const eep_epk_params_t &p, const int *tid,
                                                    bool on, unsigned k, int G, int *e_p,
                                                    unsigned *m_p)
{
    const unsigned lane  = threadIdx.x & 31u;
    const unsigned gmask = (G == 32 ? 0xffffffffu : ((1u << G) - 1u)) << (lane - k);
    const int      e0    = on ? tid[k] : -1;
    bool           bad   = on && e0 < -1;
    unsigned       m;

    for (int i = 0; on && e0 >= 0 && i < (int)k; i++) {
        bad |= tid[i] == e0;
    }
    /* checked as given, routed live (a dead rank's expert: -1) */
    const int e = (int)eep_epk_live_id(p, e0);
    m           = !on || e < 0 ? 0u : 1u << (unsigned)eep_epk_rank_of(p, e);
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
        const bool bad = eep_epk_group_route(p, ids + q * K, q < nt && (int)k < K, k, G, &e, &m);

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
        const bool bad = eep_epk_group_route(p, ids + (on ? t * K : 0), on, k, G, &e, &m);
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
    const int      E = p.num_experts, K = EEP_EPK_K(p), W = EEP_EPK_W(p);
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
            const bool bad = eep_epk_group_route(p, stage + j * K, j < n && (int)k < K, k, G, &e,
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

/* Threads [0, @p nb) each wait until block threadIdx.x's chunk flag reads @p seq (the blocks run
   at the same time: a bounded wait, abortable; a wait that gives up sets *@p failed), then the
   block meets. */
__device__ __forceinline__ void eep_epk_chunk_wait(const eep_epk_params_t &p, int nb,
                                                   unsigned long long seq, int *failed)
{
    if ((int)threadIdx.x < nb) {
        const unsigned long long *flag  = (const unsigned long long *)p.chunk_flags + threadIdx.x;
        const eep_wait_ctx        w     = eep_epk_wait_ctx(p, failed);
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
}

/* @p base (shared) = the sum of the chunk counts of sending blocks [0, @p nb), once each has
   published for this call (eep_epk_chunk_wait). */
__device__ __forceinline__ void eep_epk_chunk_sum(const eep_epk_params_t &p, int *base, int NC,
                                                  int nb, unsigned long long seq)
{
    __shared__ int failed;

    if (threadIdx.x == 0) {
        failed = 0;
    }
    __syncthreads();
    eep_epk_chunk_wait(p, nb, seq, &failed);
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

/*
 * Degraded mode, the counter block (every thread of it): the dropped report of this call's
 * tokens, dropped_topk[t][k] = 1 where lane k names an expert (in [0, E)) of a dead rank, else 0
 * (written whether or not anything is dead: the caller's buffer holds this call's report; with
 * forwarding also the lanes behind a dead forwarder, eep_epk_live_id), and
 * *num_dropped their count, by one shared atomic per thread that found any.
 */
template <int IdxBits>
__device__ void eep_epk_report_dropped(const eep_epk_params_t &p)
{
    __shared__ int n_dropped;
    const int      nk   = p.num_tokens * EEP_EPK_K(p);
    int            mine = 0;

    if (threadIdx.x == 0) {
        n_dropped = 0;
    }
    __syncthreads();
    for (int i = threadIdx.x; i < nk; i += blockDim.x) {
        const long long e    = (p.drop_mask | p.dead_mask) != 0 ? eep_epk_id<IdxBits>(p, i) : -1;
        const int       drop = e >= 0 && eep_epk_live_id(p, e) < 0;

        if (p.dropped_topk != 0) {
            ((unsigned char *)p.dropped_topk)[i] = (unsigned char)drop;
        }
        mine += drop;
    }
    if (mine != 0) {
        atomicAdd(&n_dropped, mine);
    }
    __syncthreads();
    if (threadIdx.x == 0 && p.num_dropped != 0) {
        *(int *)p.num_dropped = n_dropped;
    }
}

/* CPU_SYNC, Phase 0, the counter block: wait for every peer's counts, publish counts and
   offsets on the device and in the host-mapped mirror (tagged words, eep_epk_mirror_put). */
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
            /* a dead peer's slot is stale: it sent nothing */
            running += eep_epk_muted(p, s)
                           ? 0
                           : (int)(unsigned)(slot[EEP_EPK_SLOT_COUNTS + e] & 0xffffffffull);
        }
        csm.counts[e] = running;
    }
    if (p.rank_major && threadIdx.x == 0) { /* rank-major: rows before each source */
        int run = 0;

        for (int s = 0; s < W; s++) {
            const unsigned long long *slot =
                (const unsigned long long *)(my_counts +
                                             ((unsigned long long)s * 2 + parity) * p.slot_bytes);
            csm.nbase[s] = run;
            run += eep_epk_muted(p, s) ? 0
                                       : (int)(unsigned)(slot[EEP_EPK_SLOT_TOKENS] & 0xffffffffull);
        }
        csm.nbase[W] = run;
    }
    __syncthreads();
    eep_epk_layout_scan(csm, El, p.alignment);
    __syncthreads();
    eep_epk_mirror_put(p, csm.counts, El, p.rank_major ? csm.nbase[W] : csm.offsets[El], seq);
    __syncthreads();
    for (int e = threadIdx.x; e <= El; e += blockDim.x) {
        if (e < El) {
            ((int *)p.recv_counts)[e] = csm.counts[e];
        }
        if (!p.rank_major) {
            ((int *)p.recv_offsets)[e] = csm.offsets[e];
        }
    }
    for (int s = threadIdx.x; p.rank_major && s <= W; s += blockDim.x) {
        ((int *)p.recv_offsets)[s] = csm.nbase[s];
    }
}

#endif /* __CUDACC__ */

#endif /* EEP_KERNELS_EP_DISPATCH_ROUTE_CUH */
