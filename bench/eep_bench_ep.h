/*
 * eep_bench_ep.h - internals of `eep-bench ep`: dispatch/combine against the NCCL baseline.
 *
 * One process per GPU (rank).  Every rank makes the whole world's inputs from one seed
 * (tests/common/ep_reference.h), so it can compute its own expected outputs on the CPU and check
 * every element the GPU produced, for the baseline and (once it lands) eep_dispatch/eep_combine,
 * on the same data in the same run.
 */
#ifndef EEP_BENCH_EP_H
#define EEP_BENCH_EP_H

#include <nccl.h>

#include "eep/ep.h"
#include "elastic/gpu/cuda_sym.h"
#include "elastic/ep/ep_layout.h"
#include "elastic/jit/jit.h"

/* What every part of the benchmark shares on one rank. */
typedef struct {
    const eep_cuda_sym_t *cu;
    eep_jit_t            *jit;
    ncclComm_t            comm;
    CUstream              stream;
    int                   rank, world;
} eep_bench_ctx_t;

/* Device inputs of one rank. */
typedef struct {
    int               num_tokens;
    eep_index_dtype_t idx_dtype;
    CUdeviceptr       x, x_scales, topk_idx, topk_weights;
} eep_bench_inputs_t;

/* The NCCL baseline: its buffers, kernels and the layout of its last dispatch. */
typedef struct eep_bl eep_bl_t;

/* Where the baseline's outputs are (owned by it, sized for the worst case). */
typedef struct {
    int64_t     capacity; /* rows */
    CUdeviceptr recv_x, recv_x_scales, recv_topk_idx, recv_topk_weights;
    CUdeviceptr expert_counts;      /* [El] int32 */
    CUdeviceptr expert_offsets;     /* [El + 1] int32 */
    CUdeviceptr out;                /* combine output [max_tokens, hidden] bf16 */
    int64_t     bytes_sent;         /* last dispatch: wire bytes sent to other ranks */
    int64_t     combine_bytes_sent; /* last combine: bf16 bytes sent to other ranks */
} eep_bl_view_t;

/**
 * Compile the baseline's kernels (through the JIT) and allocate its buffers for @p shape.
 * @return EEP_OK, EEP_ERR_JIT, EEP_ERR_NO_MEMORY, EEP_ERR_CUDA, EEP_ERR_INVALID_ARG (world > 64).
 */
eep_status_t eep_bl_create(eep_bench_ctx_t *ctx, const eep_ep_shape_t *shape,
                           eep_index_dtype_t idx_dtype, eep_bl_t **bl_p);
void         eep_bl_destroy(eep_bl_t *bl);
void         eep_bl_view(const eep_bl_t *bl, eep_bl_view_t *view_p);

/**
 * Dispatch as a user would: route, permute, all-gather the counts, copy them to the host and
 * wait (the baseline's one host synchronisation), grouped ncclSend/ncclRecv, expert-major layout.
 * Everything is enqueued on ctx->stream; returns after the NCCL group is enqueued.
 * @param [out] bad_token_p  the first token with a bad expert id, -1 if none (read at the host
 *                           sync; may be NULL).
 */
eep_status_t eep_bl_dispatch(eep_bl_t *bl, const eep_bench_inputs_t *in, int *bad_token_p);

/**
 * Combine the last dispatch: weighted partials on the expert rank, grouped send/recv back, sum
 * in rank order on the source rank into view.out.
 * @param [in] y  [rows, hidden] bf16 expert outputs in the dispatch's layout.
 */
eep_status_t eep_bl_combine(eep_bl_t *bl, CUdeviceptr y);

/** Entry of `eep-bench ep`. */
int eep_bench_ep_main(int argc, char **argv);

#endif /* EEP_BENCH_EP_H */
