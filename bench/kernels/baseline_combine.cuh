/*
 * bench/kernels/baseline_combine.cuh - the NCCL baseline's combine kernels (no NCCL inside).
 *
 * The host runs: reduce -> [grouped ncclSend/ncclRecv, the dispatch's counts reversed] -> sum.
 * The arithmetic is the contract of eep/ep.h, in the same order as the CPU reference:
 * on the expert rank, p = bf16(fma over the token's local top-k lanes ascending); on the source
 * rank, out = bf16(sum of f32(p) over destination ranks ascending).  Each thread owns 8
 * consecutive channels (hidden is a multiple of 8 for bf16), so loads are 16 bytes.
 */
#ifndef EEP_KERNELS_EP_BASELINE_COMBINE_CUH
#define EEP_KERNELS_EP_BASELINE_COMBINE_CUH

#include "baseline_params.h"
#include "../../kernels/ep/ep_numeric.cuh"

#ifdef __CUDACC__

/* One block per received row (grid-stride). */
__device__ void eep_bl_reduce_body(const eep_bl_reduce_params_t &p)
{
    const eep_bl_shape_t &s    = p.s;
    const eep_bl_wire_t  &w    = p.w;
    const int             vecs = s.hidden / 8;

    for (int i = blockIdx.x; i < p.num_recv; i += gridDim.x) {
        const unsigned char *row = (const unsigned char *)p.recv_buf +
                                   (unsigned long long)i * w.token_bytes;
        const float *wts    = (const float *)(row + w.meta_off) + s.num_topk;
        const int   *row_of = (const int *)p.row_of + (long long)i * s.num_topk;
        uint4       *dst    = (uint4 *)((unsigned short *)p.send_buf + (long long)i * s.hidden);

        for (int v = threadIdx.x; v < vecs; v += blockDim.x) {
            float acc[8] = { 0, 0, 0, 0, 0, 0, 0, 0 };

            for (int k = 0; k < s.num_topk; k++) {
                int r = row_of[k];

                if (r < 0) {
                    continue;
                }
                float y[8];
                eep_bf16x8_unpack(
                    ((const uint4 *)((const unsigned short *)p.y + (long long)r * s.hidden))[v], y);
                for (int j = 0; j < 8; j++) {
                    acc[j] = eep_fma(wts[k], y[j], acc[j]);
                }
            }
            dst[v] = eep_bf16x8_pack(acc);
        }
    }
}

/* One block per token (grid-stride). */
__device__ void eep_bl_sum_body(const eep_bl_sum_params_t &p)
{
    const eep_bl_shape_t &s    = p.s;
    const int             vecs = s.hidden / 8;

    for (int t = blockIdx.x; t < s.num_tokens; t += gridDim.x) {
        const int *pos = (const int *)p.send_pos + (long long)t * s.world;
        uint4     *dst = (uint4 *)((unsigned short *)p.out + (long long)t * s.hidden);

        for (int v = threadIdx.x; v < vecs; v += blockDim.x) {
            float acc[8] = { 0, 0, 0, 0, 0, 0, 0, 0 };

            for (int d = 0; d < s.world; d++) {
                if (pos[d] < 0) {
                    continue;
                }
                long long r = (long long)((const int *)p.send_offsets)[d] + pos[d];
                float     y[8];

                eep_bf16x8_unpack(
                    ((const uint4 *)((const unsigned short *)p.recv_buf + r * s.hidden))[v], y);
                for (int j = 0; j < 8; j++) {
                    acc[j] = eep_add(acc[j], y[j]);
                }
            }
            dst[v] = eep_bf16x8_pack(acc);
        }
    }
}

#endif /* __CUDACC__ */

#endif /* EEP_KERNELS_EP_BASELINE_COMBINE_CUH */
