/*
 * bench/kernels/baseline_dispatch.cuh - the NCCL baseline's dispatch kernels (no NCCL inside).
 *
 * The host runs: route -> scan -> pack -> [ncclAllGather of counts, copy to host, sync,
 * grouped ncclSend/ncclRecv] -> expert_scan -> offsets -> unpack + pad.  Orders are fixed by
 * scans, never by atomics, so the outputs are the layout eep/ep.h promises: within a local
 * expert, rows by source rank then source token (the receive buffer is source-major with tokens
 * in order, and expert_scan keeps that order).
 *
 * Each body is a device function taking its parameter struct by const reference (elastic/jit/jit.h).
 */
#ifndef EEP_KERNELS_EP_BASELINE_DISPATCH_CUH
#define EEP_KERNELS_EP_BASELINE_DISPATCH_CUH

#include "baseline_params.h"

#ifdef __CUDACC__

/* Exclusive block-wide scan of one int per thread; *total_p gets the block's sum.  All threads of
   the block must call it; blockDim.x a multiple of 32, at most 1024. */
__device__ __forceinline__ int eep_bl_block_scan(int v, int *total_p)
{
    __shared__ int warp_sums[32];
    const unsigned lane = threadIdx.x & 31u, warp = threadIdx.x >> 5, nwarps = blockDim.x >> 5;
    int            incl = v;

    for (int d = 1; d < 32; d <<= 1) {
        int o = __shfl_up_sync(0xffffffffu, incl, d);
        if (lane >= (unsigned)d) {
            incl += o;
        }
    }
    if (lane == 31) {
        warp_sums[warp] = incl;
    }
    __syncthreads();
    if (warp == 0) {
        int s = lane < nwarps ? warp_sums[lane] : 0;
        for (int d = 1; d < 32; d <<= 1) {
            int o = __shfl_up_sync(0xffffffffu, s, d);
            if (lane >= (unsigned)d) {
                s += o;
            }
        }
        warp_sums[lane] = s; /* inclusive over warps */
    }
    __syncthreads();
    int before = warp == 0 ? 0 : warp_sums[warp - 1];
    *total_p   = warp_sums[nwarps - 1];
    __syncthreads(); /* warp_sums is reused by the next call */
    return before + incl - v;
}

template <int IdxBits>
__device__ __forceinline__ long long eep_bl_load_id(unsigned long long base, long long i)
{
    if (IdxBits == 64) {
        return ((const long long *)base)[i];
    }
    return ((const int *)base)[i];
}

/* One thread per token. */
template <int IdxBits>
__device__ void eep_bl_route_body(const eep_bl_route_params_t &p)
{
    const eep_bl_shape_t &s = p.s;

    for (int t = blockIdx.x * blockDim.x + threadIdx.x; t < s.num_tokens;
         t += gridDim.x * blockDim.x) {
        unsigned long long mask   = 0;
        int                bad    = 0;
        long long          bad_id = 0;

        for (int k = 0; k < s.num_topk && !bad; k++) {
            long long e = eep_bl_load_id<IdxBits>(p.topk_idx, (long long)t * s.num_topk + k);

            if (e < -1 || e >= s.num_experts) {
                bad    = 1;
                bad_id = e;
                break;
            }
            if (e < 0) {
                continue;
            }
            for (int j = 0; j < k; j++) {
                if (eep_bl_load_id<IdxBits>(p.topk_idx, (long long)t * s.num_topk + j) == e) {
                    bad    = 1;
                    bad_id = e;
                }
            }
            mask |= 1ull << (e / s.num_local);
        }
        if (bad) {
            int *flag = (int *)p.bad;

            mask = 0; /* dropped: it goes nowhere, and combine gives zeros */
            if (atomicCAS(flag, -1, t) == -1) {
                flag[1] = (int)bad_id;
            }
        }
        ((unsigned long long *)p.dst_mask)[t] = mask;
    }
}

/* One block of EEP_BL_SCAN_THREADS threads. */
__device__ void eep_bl_scan_body(const eep_bl_scan_params_t &p)
{
    const eep_bl_shape_t     &s    = p.s;
    const unsigned long long *mask = (const unsigned long long *)p.dst_mask;
    int                      *pos  = (int *)p.send_pos;
    __shared__ int            counts[EEP_BL_MAX_WORLD];

    for (int d = 0; d < s.world; d++) {
        int running = 0;

        for (int base = 0; base < s.num_tokens; base += blockDim.x) {
            int t = base + (int)threadIdx.x;
            int f = t < s.num_tokens ? (int)((mask[t] >> d) & 1ull) : 0;
            int total;
            int ex = eep_bl_block_scan(f, &total);

            if (t < s.num_tokens) {
                pos[(long long)t * s.world + d] = f ? running + ex : -1;
            }
            running += total;
        }
        if (threadIdx.x == 0) {
            counts[d] = running;
        }
    }
    __syncthreads();
    if (threadIdx.x == 0) {
        int off = 0;

        for (int d = 0; d < s.world; d++) {
            ((int *)p.send_counts)[d]  = counts[d];
            ((int *)p.send_offsets)[d] = off;
            off += counts[d];
        }
    }
}

/* Copy one wire record's parts: 16-byte vectors for the hidden part, words for the rest. */
__device__ __forceinline__ void eep_bl_copy16(void *dst, const void *src, unsigned bytes,
                                              unsigned lane, unsigned nlanes)
{
    const uint4 *s4 = (const uint4 *)src;
    uint4       *d4 = (uint4 *)dst;

    for (unsigned i = lane; i < bytes / 16; i += nlanes) {
        d4[i] = s4[i];
    }
}

__device__ __forceinline__ void eep_bl_copy4(void *dst, const void *src, unsigned bytes,
                                             unsigned lane, unsigned nlanes)
{
    for (unsigned i = lane; i < bytes / 4; i += nlanes) {
        ((unsigned int *)dst)[i] = ((const unsigned int *)src)[i];
    }
}

/* One warp per (token, destination) pair. */
template <int IdxBits>
__device__ void eep_bl_pack_body(const eep_bl_pack_params_t &p)
{
    const eep_bl_shape_t &s      = p.s;
    const eep_bl_wire_t  &w      = p.w;
    const unsigned        lane   = threadIdx.x & 31u;
    const long long       nwarps = (long long)gridDim.x * (blockDim.x >> 5);
    const long long       pairs  = (long long)s.num_tokens * s.world;

    for (long long q = (long long)blockIdx.x * (blockDim.x >> 5) + (threadIdx.x >> 5); q < pairs;
         q += nwarps) {
        int t = (int)(q / s.world), d = (int)(q % s.world);
        int pos = ((const int *)p.send_pos)[q];

        if (pos < 0) {
            continue;
        }
        unsigned char *row = (unsigned char *)p.send_buf +
                             (unsigned long long)(((const int *)p.send_offsets)[d] + pos) *
                                 w.token_bytes;

        eep_bl_copy16(row, (const unsigned char *)p.x + (unsigned long long)t * w.hidden_bytes,
                      w.hidden_bytes, lane, 32);
        if (w.scale_bytes != 0) {
            eep_bl_copy4(row + w.scale_off,
                         (const unsigned char *)p.x_scales + (unsigned long long)t * w.scale_bytes,
                         w.scale_bytes, lane, 32);
        }
        int   *ids = (int *)(row + w.meta_off);
        float *wts = (float *)(ids + s.num_topk);
        for (int k = (int)lane; k < s.num_topk; k += 32) {
            ids[k] = (int)eep_bl_load_id<IdxBits>(p.topk_idx, (long long)t * s.num_topk + k);
            wts[k] = ((const float *)p.topk_weights)[(long long)t * s.num_topk + k];
        }
        if (lane == 0) {
            ids[2 * s.num_topk] = t;
        }
    }
}

/* One block per local expert (gridDim.x == El), EEP_BL_SCAN_THREADS threads. */
__device__ void eep_bl_expert_scan_body(const eep_bl_expert_scan_params_t &p)
{
    const eep_bl_shape_t &s       = p.s;
    const eep_bl_wire_t  &w       = p.w;
    const int             e       = blockIdx.x;
    const int             gid     = s.rank * s.num_local + e;
    int                   running = 0;

    for (int base = 0; base < p.num_recv; base += blockDim.x) {
        int i = base + (int)threadIdx.x, lane_hit = -1;
        int total;

        if (i < p.num_recv) {
            const int *ids = (const int *)((const unsigned char *)p.recv_buf +
                                           (unsigned long long)i * w.token_bytes + w.meta_off);
            for (int k = 0; k < s.num_topk; k++) {
                if (ids[k] == gid) {
                    lane_hit = k;
                }
            }
        }
        int ex = eep_bl_block_scan(lane_hit >= 0, &total);
        if (lane_hit >= 0) {
            ((int *)p.lane_pos)[(long long)i * s.num_topk + lane_hit] = running + ex;
        }
        running += total;
    }
    if (threadIdx.x == 0) {
        ((int *)p.expert_counts)[e] = running;
    }
}

/* One thread. */
__device__ void eep_bl_offsets_body(const eep_bl_offsets_params_t &p)
{
    if (blockIdx.x == 0 && threadIdx.x == 0) {
        const int *counts = (const int *)p.expert_counts;
        int       *off    = (int *)p.expert_offsets;
        const int  a      = p.s.alignment;

        off[0] = 0;
        for (int e = 0; e < p.s.num_local; e++) {
            off[e + 1] = off[e] + (counts[e] + a - 1) / a * a;
        }
    }
}

/* One warp per received row. */
__device__ void eep_bl_unpack_body(const eep_bl_unpack_params_t &p)
{
    const eep_bl_shape_t &s      = p.s;
    const eep_bl_wire_t  &w      = p.w;
    const unsigned        lane   = threadIdx.x & 31u;
    const int             nwarps = gridDim.x * (blockDim.x >> 5);
    const int             lo     = s.rank * s.num_local;

    for (int i = blockIdx.x * (blockDim.x >> 5) + (threadIdx.x >> 5); i < p.num_recv; i += nwarps) {
        const unsigned char *row = (const unsigned char *)p.recv_buf +
                                   (unsigned long long)i * w.token_bytes;
        const int   *ids = (const int *)(row + w.meta_off);
        const float *wts = (const float *)(ids + s.num_topk);

        for (int k = 0; k < s.num_topk; k++) {
            int e = ids[k] - lo;

            if (ids[k] < 0 || e < 0 || e >= s.num_local) {
                if (lane == 0) {
                    ((int *)p.row_of)[(long long)i * s.num_topk + k] = -1;
                }
                continue;
            }
            long long out = ((const int *)p.expert_offsets)[e] +
                            ((const int *)p.lane_pos)[(long long)i * s.num_topk + k];

            eep_bl_copy16((unsigned char *)p.recv_x + out * w.hidden_bytes, row, w.hidden_bytes,
                          lane, 32);
            if (w.scale_bytes != 0) {
                eep_bl_copy4((unsigned char *)p.recv_x_scales + out * w.scale_bytes,
                             row + w.scale_off, w.scale_bytes, lane, 32);
            }
            for (int j = (int)lane; j < s.num_topk; j += 32) {
                int  g     = ids[j];
                bool local = g >= lo && g < lo + s.num_local;

                ((int *)p.recv_topk_idx)[out * s.num_topk + j]       = local ? g - lo : -1;
                ((float *)p.recv_topk_weights)[out * s.num_topk + j] = local ? wts[j] : 0.0f;
            }
            if (lane == 0) {
                ((int *)p.row_of)[(long long)i * s.num_topk + k] = (int)out;
            }
        }
    }
}

/* One block per local expert. */
__device__ void eep_bl_pad_body(const eep_bl_pad_params_t &p)
{
    const eep_bl_shape_t &s = p.s;
    const eep_bl_wire_t  &w = p.w;
    const int             e = blockIdx.x;
    const int first = ((const int *)p.expert_offsets)[e] + ((const int *)p.expert_counts)[e];
    const int end   = ((const int *)p.expert_offsets)[e + 1];

    for (long long r = first; r < end; r++) {
        uint4 *x4 = (uint4 *)((unsigned char *)p.recv_x + r * w.hidden_bytes);

        for (unsigned i = threadIdx.x; i < w.hidden_bytes / 16; i += blockDim.x) {
            x4[i] = make_uint4(0, 0, 0, 0);
        }
        for (unsigned i = threadIdx.x; i < w.scale_bytes / 4; i += blockDim.x) {
            ((unsigned int *)((unsigned char *)p.recv_x_scales + r * w.scale_bytes))[i] = 0;
        }
        for (int k = threadIdx.x; k < s.num_topk; k += blockDim.x) {
            ((int *)p.recv_topk_idx)[r * s.num_topk + k]       = -1;
            ((float *)p.recv_topk_weights)[r * s.num_topk + k] = 0.0f;
        }
    }
}

#endif /* __CUDACC__ */

#endif /* EEP_KERNELS_EP_BASELINE_DISPATCH_CUH */
