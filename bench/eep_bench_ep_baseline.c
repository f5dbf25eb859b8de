/*
 * eep_bench_ep_baseline.c - the NCCL baseline of dispatch/combine: the same token movement done
 * the way a user would without ElasticEP.
 *
 * Dispatch: route + scan + pack kernels permute tokens by destination rank; the per-destination
 * counts go through ncclAllGather and a copy to pinned host memory, and the host waits for them
 * (NCCL's send/recv sizes are host arguments); a grouped ncclSend/ncclRecv moves the tokens; an
 * expert scan + unpack + pad lay them out expert-major.  Combine reverses it with the counts the
 * host already knows.  Kernels come from kernels/ep/baseline_*.cuh through the JIT; buffers are
 * sized once for the worst case of the shape, so a call allocates nothing.
 */
#include "eep_bench_ep.h"

#include <stdlib.h>
#include <string.h>

#include "util/log.h"
#include "elastic/gpu/nccl_util.h"
#include "bench/kernels/baseline_params.h"

enum {
    BL_ROUTE,
    BL_SCAN,
    BL_PACK,
    BL_EXPERT_SCAN,
    BL_OFFSETS,
    BL_UNPACK,
    BL_PAD,
    BL_REDUCE,
    BL_SUM,
    BL_NKERNELS
};

static const struct {
    const char *header, *function, *param_type;
    int         threads;
    int         idx_template; /* template argument: the index width (32 or 64) */
} bl_kernels[BL_NKERNELS] = {
    [BL_ROUTE] = { "bench/kernels/baseline_dispatch.cuh", "eep_bl_route_body",
                   "eep_bl_route_params_t", 256, 1 },
    [BL_SCAN] = { "bench/kernels/baseline_dispatch.cuh", "eep_bl_scan_body", "eep_bl_scan_params_t",
                  EEP_BL_SCAN_THREADS, 0 },
    [BL_PACK] = { "bench/kernels/baseline_dispatch.cuh", "eep_bl_pack_body", "eep_bl_pack_params_t",
                  256, 1 },
    [BL_EXPERT_SCAN] = { "bench/kernels/baseline_dispatch.cuh", "eep_bl_expert_scan_body",
                         "eep_bl_expert_scan_params_t", EEP_BL_SCAN_THREADS, 0 },
    [BL_OFFSETS]     = { "bench/kernels/baseline_dispatch.cuh", "eep_bl_offsets_body",
                         "eep_bl_offsets_params_t", 32, 0 },
    [BL_UNPACK]      = { "bench/kernels/baseline_dispatch.cuh", "eep_bl_unpack_body",
                         "eep_bl_unpack_params_t", 256, 0 },
    [BL_PAD]    = { "bench/kernels/baseline_dispatch.cuh", "eep_bl_pad_body", "eep_bl_pad_params_t",
                    256, 0 },
    [BL_REDUCE] = { "bench/kernels/baseline_combine.cuh", "eep_bl_reduce_body",
                    "eep_bl_reduce_params_t", 256, 0 },
    [BL_SUM]    = { "bench/kernels/baseline_combine.cuh", "eep_bl_sum_body", "eep_bl_sum_params_t",
                    256, 0 },
};

struct eep_bl {
    eep_bench_ctx_t  *ctx;
    eep_ep_shape_t    shape;
    eep_ep_wire_t     wire;
    eep_bl_shape_t    ks; /* kernel shape; num_tokens set per call */
    eep_bl_wire_t     kw;
    int64_t           rows_max;
    eep_jit_kernel_t *k[BL_NKERNELS];
    int               sms;

    /* Device buffers. */
    CUdeviceptr   dst_mask;     /* [T] u64 */
    CUdeviceptr   send_pos;     /* [T, world] */
    CUdeviceptr   send_counts;  /* [world] */
    CUdeviceptr   send_offsets; /* [world] */
    CUdeviceptr   all_counts;   /* [world, world] */
    CUdeviceptr   bad;          /* int[2] */
    CUdeviceptr   send_buf;     /* [T * world] wire records */
    CUdeviceptr   recv_buf;     /* [world * T] wire records */
    CUdeviceptr   lane_pos;     /* [world * T, K] */
    CUdeviceptr   row_of;       /* [world * T, K] */
    CUdeviceptr   c_send;       /* [world * T, hidden] bf16 */
    CUdeviceptr   c_recv;       /* [T * world, hidden] bf16 */
    eep_bl_view_t view;

    /* Pinned host mirror of the counts and the layout of the last dispatch. */
    int32_t *h_counts; /* [world * world + 2]: all_counts then bad[2] */
    int     *send_n, *send_off, *recv_n, *recv_off; /* [world] each, tokens */
    int      num_recv;
    int      has_layout;
};

static eep_status_t bl_alloc(eep_bl_t *bl, CUdeviceptr *p, size_t bytes, const char *what)
{
    eep_status_t status;

    status = eep_status_from_cu(bl->ctx->cu->cuMemAlloc(p, bytes > 0 ? bytes : 16), what);
    if (status != EEP_OK) {
        eep_error(EEP_SUBSYS_TOOL, "baseline: cannot allocate %s (%zu bytes)", what, bytes);
    }
    return status;
}

void eep_bl_destroy(eep_bl_t *bl)
{
    const eep_cuda_sym_t *cu;
    CUdeviceptr          *bufs[] = {
                 &bl->dst_mask,
                 &bl->send_pos,
                 &bl->send_counts,
                 &bl->send_offsets,
                 &bl->all_counts,
                 &bl->bad,
                 &bl->send_buf,
                 &bl->recv_buf,
                 &bl->lane_pos,
                 &bl->row_of,
                 &bl->c_send,
                 &bl->c_recv,
                 &bl->view.recv_x,
                 &bl->view.recv_x_scales,
                 &bl->view.recv_topk_idx,
                 &bl->view.recv_topk_weights,
                 &bl->view.expert_counts,
                 &bl->view.expert_offsets,
                 &bl->view.out,
    };
    size_t i;

    if (bl == NULL) {
        return;
    }
    cu = bl->ctx->cu;
    for (i = 0; i < sizeof(bufs) / sizeof(bufs[0]); i++) {
        if (*bufs[i] != 0) {
            cu->cuMemFree(*bufs[i]);
        }
    }
    if (bl->h_counts != NULL) {
        cu->cuMemFreeHost(bl->h_counts);
    }
    free(bl->send_n);
    free(bl);
}

eep_status_t eep_bl_create(eep_bench_ctx_t *ctx, const eep_ep_shape_t *shape,
                           eep_index_dtype_t idx_dtype, eep_bl_t **bl_p)
{
    const eep_cuda_sym_t *cu = ctx->cu;
    eep_bl_t             *bl;
    eep_status_t          status;
    CUdevice              dev;
    size_t                W = (size_t)shape->world, T = (size_t)shape->max_tokens;
    size_t                K = (size_t)shape->num_topk, H = (size_t)shape->hidden;
    size_t                El;
    int                   i;

    if (eep_ep_shape_check(shape, NULL) != EEP_OK || shape->world > EEP_BL_MAX_WORLD) {
        eep_error(EEP_SUBSYS_TOOL, "baseline: unsupported shape (world %d, at most %d)",
                  shape->world, EEP_BL_MAX_WORLD);
        return EEP_ERR_INVALID_ARG;
    }
    if (!eep_ep_place_even(shape)) { /* its kernels place expert e on rank e / El */
        eep_error(EEP_SUBSYS_TOOL,
                  "baseline: invalid argument num_experts: %d experts on %d ranks is an uneven "
                  "placement; the NCCL baseline's kernels need num_experts %% world == 0",
                  shape->num_experts, shape->world);
        return EEP_ERR_INVALID_ARG;
    }
    bl = calloc(1, sizeof(*bl));
    if (bl == NULL) {
        return EEP_ERR_NO_MEMORY;
    }
    bl->ctx   = ctx;
    bl->shape = *shape;
    El        = (size_t)eep_ep_local_experts(shape);
    eep_ep_wire_layout(shape, &bl->wire);
    bl->rows_max = eep_ep_rows_max(shape);
    bl->ks       = (eep_bl_shape_t){ .rank        = ctx->rank,
                                     .world       = ctx->world,
                                     .num_tokens  = 0,
                                     .max_tokens  = shape->max_tokens,
                                     .hidden      = shape->hidden,
                                     .num_topk    = shape->num_topk,
                                     .num_experts = shape->num_experts,
                                     .num_local   = (int)El,
                                     .alignment   = shape->alignment };
    bl->kw       = (eep_bl_wire_t){ .token_bytes  = (unsigned)bl->wire.token_bytes,
                                    .hidden_bytes = (unsigned)bl->wire.hidden_bytes,
                                    .scale_off    = (unsigned)bl->wire.scale_off,
                                    .scale_bytes  = (unsigned)bl->wire.scale_bytes,
                                    .meta_off     = (unsigned)bl->wire.meta_off };

    /* Kernels: compiled once per shape family, cached on disk by the JIT. */
    for (i = 0; i < BL_NKERNELS; i++) {
        eep_jit_spec_t spec = {
            .size          = sizeof(spec),
            .header        = bl_kernels[i].header,
            .function      = bl_kernels[i].function,
            .template_args = bl_kernels[i].idx_template
                                 ? (idx_dtype == EEP_INDEX_INT64 ? "64" : "32")
                                 : NULL,
            .param_type    = bl_kernels[i].param_type,
            .launch_bounds = bl_kernels[i].threads,
        };

        status = eep_jit_get_kernel(ctx->jit, &spec, &bl->k[i]);
        if (status != EEP_OK) {
            eep_error(EEP_SUBSYS_TOOL, "baseline: kernel %s: %s", spec.function,
                      eep_status_string(status));
            goto err;
        }
    }
    status = eep_status_from_cu(cu->cuCtxGetDevice(&dev), "cuCtxGetDevice");
    if (status == EEP_OK) {
        status = eep_status_from_cu(
            cu->cuDeviceGetAttribute(&bl->sms, CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT, dev),
            "cuDeviceGetAttribute");
    }
    if (status != EEP_OK) {
        goto err;
    }

    if ((status = bl_alloc(bl, &bl->dst_mask, T * 8, "dst_mask")) != EEP_OK ||
        (status = bl_alloc(bl, &bl->send_pos, T * W * 4, "send_pos")) != EEP_OK ||
        (status = bl_alloc(bl, &bl->send_counts, W * 4, "send_counts")) != EEP_OK ||
        (status = bl_alloc(bl, &bl->send_offsets, W * 4, "send_offsets")) != EEP_OK ||
        (status = bl_alloc(bl, &bl->all_counts, W * W * 4, "all_counts")) != EEP_OK ||
        (status = bl_alloc(bl, &bl->bad, 8, "bad")) != EEP_OK ||
        (status = bl_alloc(bl, &bl->send_buf, T * W * bl->wire.token_bytes, "send_buf")) !=
            EEP_OK ||
        (status = bl_alloc(bl, &bl->recv_buf, W * T * bl->wire.token_bytes, "recv_buf")) !=
            EEP_OK ||
        (status = bl_alloc(bl, &bl->lane_pos, W * T * K * 4, "lane_pos")) != EEP_OK ||
        (status = bl_alloc(bl, &bl->row_of, W * T * K * 4, "row_of")) != EEP_OK ||
        (status = bl_alloc(bl, &bl->c_send, W * T * H * 2, "combine send")) != EEP_OK ||
        (status = bl_alloc(bl, &bl->c_recv, T * W * H * 2, "combine recv")) != EEP_OK ||
        (status = bl_alloc(bl, &bl->view.recv_x, (size_t)bl->rows_max * bl->wire.hidden_bytes,
                           "recv_x")) != EEP_OK ||
        (status = bl_alloc(bl, &bl->view.recv_x_scales, (size_t)bl->rows_max * bl->wire.scale_bytes,
                           "recv_x_scales")) != EEP_OK ||
        (status = bl_alloc(bl, &bl->view.recv_topk_idx, (size_t)bl->rows_max * K * 4,
                           "recv_topk_idx")) != EEP_OK ||
        (status = bl_alloc(bl, &bl->view.recv_topk_weights, (size_t)bl->rows_max * K * 4,
                           "recv_topk_weights")) != EEP_OK ||
        (status = bl_alloc(bl, &bl->view.expert_counts, El * 4, "expert_counts")) != EEP_OK ||
        (status = bl_alloc(bl, &bl->view.expert_offsets, (El + 1) * 4, "expert_offsets")) !=
            EEP_OK ||
        (status = bl_alloc(bl, &bl->view.out, T * H * 2 + 16, "combine out")) != EEP_OK) {
        goto err;
    }
    bl->view.capacity = bl->rows_max;
    status            = eep_status_from_cu(
                   cu->cuMemAllocHost((void **)&bl->h_counts, (W * W + 2) * sizeof(int32_t)),
                   "cuMemAllocHost");
    if (status != EEP_OK) {
        goto err;
    }
    bl->send_n = calloc(4 * W, sizeof(int));
    if (bl->send_n == NULL) {
        status = EEP_ERR_NO_MEMORY;
        goto err;
    }
    bl->send_off = bl->send_n + W;
    bl->recv_n   = bl->send_n + 2 * W;
    bl->recv_off = bl->send_n + 3 * W;
    *bl_p        = bl;
    return EEP_OK;

err:
    eep_bl_destroy(bl);
    return status;
}

void eep_bl_view(const eep_bl_t *bl, eep_bl_view_t *view_p)
{
    *view_p = bl->view;
}

static eep_status_t bl_launch(eep_bl_t *bl, int which, unsigned grid, const void *params,
                              size_t size)
{
    return eep_jit_launch(bl->k[which], grid > 0 ? grid : 1, (unsigned)bl_kernels[which].threads, 0,
                          bl->ctx->stream, params, size);
}

static unsigned bl_grid(const eep_bl_t *bl, long long items, int per_block)
{
    long long g   = (items + per_block - 1) / per_block;
    long long cap = 4LL * bl->sms;

    return (unsigned)(g < 1 ? 1 : g > cap ? cap : g);
}

eep_status_t eep_bl_dispatch(eep_bl_t *bl, const eep_bench_inputs_t *in, int *bad_token_p)
{
    const eep_cuda_sym_t *cu  = bl->ctx->cu;
    eep_bench_ctx_t      *ctx = bl->ctx;
    eep_bl_shape_t        ks  = bl->ks;
    eep_status_t          status;
    ncclResult_t          res;
    int                   W         = ctx->world, d, s, off;
    const int             minus1[2] = { -1, -1 };

    ks.num_tokens = in->num_tokens;
    status = eep_status_from_cu(cu->cuMemcpyHtoDAsync(bl->bad, minus1, sizeof(minus1), ctx->stream),
                                "cuMemcpyHtoDAsync");
    if (status != EEP_OK) {
        return status;
    }
    {
        eep_bl_route_params_t p = {
            .s = ks, .topk_idx = in->topk_idx, .dst_mask = bl->dst_mask, .bad = bl->bad
        };
        status = bl_launch(bl, BL_ROUTE, bl_grid(bl, in->num_tokens, 256), &p, sizeof(p));
    }
    if (status == EEP_OK) {
        eep_bl_scan_params_t p = { .s            = ks,
                                   .dst_mask     = bl->dst_mask,
                                   .send_pos     = bl->send_pos,
                                   .send_counts  = bl->send_counts,
                                   .send_offsets = bl->send_offsets };
        status                 = bl_launch(bl, BL_SCAN, 1, &p, sizeof(p));
    }
    if (status == EEP_OK) {
        eep_bl_pack_params_t p = { .s            = ks,
                                   .w            = bl->kw,
                                   .x            = in->x,
                                   .x_scales     = in->x_scales,
                                   .topk_idx     = in->topk_idx,
                                   .topk_weights = in->topk_weights,
                                   .send_pos     = bl->send_pos,
                                   .send_offsets = bl->send_offsets,
                                   .send_buf     = bl->send_buf };
        status = bl_launch(bl, BL_PACK, bl_grid(bl, (long long)in->num_tokens * W, 8), &p,
                           sizeof(p));
    }
    if (status != EEP_OK) {
        return status;
    }
    /* Counts: everyone learns everyone's, then the host must see them to size the transfers. */
    res = ncclAllGather((const void *)bl->send_counts, (void *)bl->all_counts, (size_t)W, ncclInt32,
                        ctx->comm, (cudaStream_t)ctx->stream);
    if (res != ncclSuccess) {
        return eep_status_from_nccl(res, ctx->comm, "ncclAllGather(counts)");
    }
    if ((status = eep_status_from_cu(
             cu->cuMemcpyDtoHAsync(bl->h_counts, bl->all_counts, (size_t)W * W * 4, ctx->stream),
             "cuMemcpyDtoHAsync")) != EEP_OK ||
        (status = eep_status_from_cu(
             cu->cuMemcpyDtoHAsync(bl->h_counts + W * W, bl->bad, 8, ctx->stream),
             "cuMemcpyDtoHAsync")) != EEP_OK ||
        (status = eep_status_from_cu(cu->cuStreamSynchronize(ctx->stream),
                                     "cuStreamSynchronize")) != EEP_OK) {
        return status;
    }
    if (bad_token_p != NULL) {
        *bad_token_p = bl->h_counts[W * W];
    }
    off = 0;
    for (d = 0; d < W; d++) {
        bl->send_n[d]   = bl->h_counts[ctx->rank * W + d];
        bl->send_off[d] = off;
        off += bl->send_n[d];
    }
    off                 = 0;
    bl->view.bytes_sent = 0;
    for (s = 0; s < W; s++) {
        bl->recv_n[s]   = bl->h_counts[s * W + ctx->rank];
        bl->recv_off[s] = off;
        off += bl->recv_n[s];
        if (s != ctx->rank) {
            bl->view.bytes_sent += (int64_t)bl->send_n[s] * (int64_t)bl->wire.token_bytes;
        }
    }
    bl->num_recv = off;

    res = ncclGroupStart();
    for (d = 0; d < W && res == ncclSuccess; d++) {
        size_t tb = bl->wire.token_bytes;

        if (bl->send_n[d] > 0) {
            res = ncclSend((const void *)(bl->send_buf + (size_t)bl->send_off[d] * tb),
                           (size_t)bl->send_n[d] * tb, ncclUint8, d, ctx->comm,
                           (cudaStream_t)ctx->stream);
        }
        if (res == ncclSuccess && bl->recv_n[d] > 0) {
            res = ncclRecv((void *)(bl->recv_buf + (size_t)bl->recv_off[d] * tb),
                           (size_t)bl->recv_n[d] * tb, ncclUint8, d, ctx->comm,
                           (cudaStream_t)ctx->stream);
        }
    }
    if (res == ncclSuccess) {
        res = ncclGroupEnd();
    } else {
        ncclGroupEnd();
    }
    if (res != ncclSuccess) {
        return eep_status_from_nccl(res, ctx->comm, "ncclSend/ncclRecv(dispatch)");
    }

    {
        eep_bl_expert_scan_params_t p = { .s             = ks,
                                          .w             = bl->kw,
                                          .recv_buf      = bl->recv_buf,
                                          .num_recv      = bl->num_recv,
                                          .lane_pos      = bl->lane_pos,
                                          .expert_counts = bl->view.expert_counts };
        status = bl_launch(bl, BL_EXPERT_SCAN, (unsigned)ks.num_local, &p, sizeof(p));
    }
    if (status == EEP_OK) {
        eep_bl_offsets_params_t p = { .s              = ks,
                                      .expert_counts  = bl->view.expert_counts,
                                      .expert_offsets = bl->view.expert_offsets };
        status                    = bl_launch(bl, BL_OFFSETS, 1, &p, sizeof(p));
    }
    if (status == EEP_OK) {
        eep_bl_unpack_params_t p = { .s                 = ks,
                                     .w                 = bl->kw,
                                     .recv_buf          = bl->recv_buf,
                                     .num_recv          = bl->num_recv,
                                     .lane_pos          = bl->lane_pos,
                                     .expert_offsets    = bl->view.expert_offsets,
                                     .recv_x            = bl->view.recv_x,
                                     .recv_x_scales     = bl->view.recv_x_scales,
                                     .recv_topk_idx     = bl->view.recv_topk_idx,
                                     .recv_topk_weights = bl->view.recv_topk_weights,
                                     .row_of            = bl->row_of };
        status = bl_launch(bl, BL_UNPACK, bl_grid(bl, bl->num_recv, 8), &p, sizeof(p));
    }
    if (status == EEP_OK) {
        eep_bl_pad_params_t p = { .s                 = ks,
                                  .w                 = bl->kw,
                                  .expert_counts     = bl->view.expert_counts,
                                  .expert_offsets    = bl->view.expert_offsets,
                                  .recv_x            = bl->view.recv_x,
                                  .recv_x_scales     = bl->view.recv_x_scales,
                                  .recv_topk_idx     = bl->view.recv_topk_idx,
                                  .recv_topk_weights = bl->view.recv_topk_weights };
        status                = bl_launch(bl, BL_PAD, (unsigned)ks.num_local, &p, sizeof(p));
    }
    if (status == EEP_OK) {
        bl->ks.num_tokens = in->num_tokens;
        bl->has_layout    = 1;
    }
    return status;
}

eep_status_t eep_bl_combine(eep_bl_t *bl, CUdeviceptr y)
{
    eep_bench_ctx_t *ctx = bl->ctx;
    eep_status_t     status;
    ncclResult_t     res;
    size_t           row = (size_t)bl->shape.hidden * 2;
    int              d;

    if (!bl->has_layout) {
        eep_error(EEP_SUBSYS_TOOL, "baseline: combine before any dispatch");
        return EEP_ERR_INVALID_ARG;
    }
    {
        eep_bl_reduce_params_t p = { .s        = bl->ks,
                                     .w        = bl->kw,
                                     .recv_buf = bl->recv_buf,
                                     .num_recv = bl->num_recv,
                                     .row_of   = bl->row_of,
                                     .y        = y,
                                     .send_buf = bl->c_send };
        status = bl_launch(bl, BL_REDUCE, bl_grid(bl, bl->num_recv, 1), &p, sizeof(p));
    }
    if (status != EEP_OK) {
        return status;
    }
    /* The reverse of dispatch: I send back what I received, and receive what I sent. */
    bl->view.combine_bytes_sent = 0;
    res                         = ncclGroupStart();
    for (d = 0; d < ctx->world && res == ncclSuccess; d++) {
        if (bl->recv_n[d] > 0) {
            res = ncclSend((const void *)(bl->c_send + (size_t)bl->recv_off[d] * row),
                           (size_t)bl->recv_n[d] * row, ncclUint8, d, ctx->comm,
                           (cudaStream_t)ctx->stream);
            if (d != ctx->rank) {
                bl->view.combine_bytes_sent += (int64_t)bl->recv_n[d] * (int64_t)row;
            }
        }
        if (res == ncclSuccess && bl->send_n[d] > 0) {
            res = ncclRecv((void *)(bl->c_recv + (size_t)bl->send_off[d] * row),
                           (size_t)bl->send_n[d] * row, ncclUint8, d, ctx->comm,
                           (cudaStream_t)ctx->stream);
        }
    }
    if (res == ncclSuccess) {
        res = ncclGroupEnd();
    } else {
        ncclGroupEnd();
    }
    if (res != ncclSuccess) {
        return eep_status_from_nccl(res, ctx->comm, "ncclSend/ncclRecv(combine)");
    }
    {
        eep_bl_sum_params_t p = { .s            = bl->ks,
                                  .recv_buf     = bl->c_recv,
                                  .send_pos     = bl->send_pos,
                                  .send_offsets = bl->send_offsets,
                                  .out          = bl->view.out };
        status = bl_launch(bl, BL_SUM, bl_grid(bl, bl->ks.num_tokens, 1), &p, sizeof(p));
    }
    return status;
}
