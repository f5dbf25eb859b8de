/*
 * eep_bench_ep_run.c - one implementation on one rank, checked then timed: the NCCL baseline and
 * ours (eep_dispatch/eep_combine, host loop then CUDA-graph replays).
 *
 * Both take the same steps: the check (outputs poisoned, every element of one dispatch compared,
 * combine run twice for bitwise reproducibility), then a warm-up, then dispatch timed alone and
 * combine timed alone, each loop started once every rank has lined up (an NCCL all-reduce).
 */
#include "eep_bench_ep_parts.h"
#include "eep_bench_stats.h"

#include <dlfcn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "eep/eep.h"
#include "elastic/ep/ep_handle.h"
#include "elastic/gpu/nccl_util.h"

double eep_bench_ep_now_us(void)
{
    struct timespec ts;

    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec * 1e6 + (double)ts.tv_nsec / 1e3;
}

/* All ranks leave together: an all-reduce of one int (in @p scratch), then a stream sync. */
static eep_status_t line_up(eep_bench_ctx_t *ctx, CUdeviceptr scratch)
{
    eep_status_t status;

    status = eep_status_from_nccl(ncclAllReduce((const void *)scratch, (void *)scratch, 1,
                                                ncclInt32, ncclMax, ctx->comm,
                                                (cudaStream_t)ctx->stream),
                                  ctx->comm, "ncclAllReduce");
    if (status == EEP_OK) {
        status = eep_status_from_cu(ctx->cu->cuStreamSynchronize(ctx->stream),
                                    "cuStreamSynchronize");
    }
    return status;
}

/* The baseline on this rank: check, then time. */
eep_status_t eep_bench_ep_run_baseline(eep_bench_ctx_t *ctx, const bench_opts_t *o,
                                       const eep_ref_input_t *in, const eep_ref_recv_t *recv,
                                       uint16_t *const *y_host, const uint16_t *out_want,
                                       const eep_bench_inputs_t *din, bench_result_t *res)
{
    const eep_cuda_sym_t *cu = ctx->cu;
    const eep_ep_shape_t *s  = &o->shape;
    eep_bl_t             *bl = NULL;
    eep_bl_view_t         v;
    CUdeviceptr           y    = 0;
    uint16_t             *out1 = NULL, *out2 = NULL;
    size_t                out_bytes = (size_t)in[ctx->rank].num_tokens * (size_t)s->hidden * 2;
    eep_status_t          status;
    int                   bad_token = -1, i;
    double                t0;

    status = eep_bl_create(ctx, s, o->idx_dtype, &bl);
    if (status != EEP_OK) {
        return status;
    }
    eep_bl_view(bl, &v);
    CU_TRY(cu->cuMemAlloc(&y, (size_t)v.capacity * (size_t)s->hidden * 2 + 16));

    if (o->check) {
        const eep_ref_recv_t *r = &recv[ctx->rank];

        out1 = malloc(out_bytes + 2);
        out2 = malloc(out_bytes + 2);
        if (out1 == NULL || out2 == NULL) {
            status = EEP_ERR_NO_MEMORY;
            goto out;
        }
        status = eep_bench_ep_poison_outputs(ctx, s, &v);
        if (status == EEP_OK) {
            status = eep_bl_dispatch(bl, din, &bad_token);
        }
        if (status != EEP_OK) {
            goto out;
        }
        CU_TRY(cu->cuStreamSynchronize(ctx->stream));
        if (bad_token >= 0) {
            fprintf(stderr, "rank %d: baseline flagged token %d as bad\n", ctx->rank, bad_token);
            res->errors++;
        }
        res->errors += eep_bench_ep_check_dispatch(ctx, s, &v, r, 0, 0, 0);
        /* y in the reference layout (the checked one), NaN in padding rows. */
        CU_TRY(cu->cuMemsetD8(y, 0xff, (size_t)v.capacity * (size_t)s->hidden * 2));
        if (r->num_rows > 0) {
            CU_TRY(cu->cuMemcpyHtoD(y, y_host[ctx->rank],
                                    (size_t)r->num_rows * (size_t)s->hidden * 2));
        }
        for (i = 0; i < 2; i++) {
            CU_TRY(cu->cuMemsetD8Async(v.out, 0xa5, out_bytes + 2, ctx->stream));
            status = eep_bl_combine(bl, y);
            if (status != EEP_OK) {
                goto out;
            }
            CU_TRY(cu->cuStreamSynchronize(ctx->stream));
            CU_TRY(cu->cuMemcpyDtoH(i == 0 ? out1 : out2, v.out, out_bytes + 2));
        }
        res->errors += eep_bench_ep_diff("combine out", out1, out_want, out_bytes / 2, 2,
                                         ctx->rank);
        res->errors += eep_bench_ep_diff("combine out (second run)", out2, out1, out_bytes / 2, 2,
                                         ctx->rank);
        res->errors += eep_bench_ep_diff("combine out (past the end)", out1 + out_bytes / 2,
                                         "\xa5\xa5", 1, 2, ctx->rank);
    }

    /* Timing: dispatch alone (it syncs the host once per call), then combine alone on the last
       layout.  Each loop starts after an NCCL all-reduce of one int, so every rank's clock starts
       when all ranks are ready (the slowest rank's time is reported). */
    for (i = 0; i < o->warmup; i++) {
        if ((status = eep_bl_dispatch(bl, din, NULL)) != EEP_OK ||
            (status = eep_bl_combine(bl, y)) != EEP_OK) {
            goto out;
        }
    }
    if ((status = line_up(ctx, y)) != EEP_OK) {
        goto out;
    }
    t0 = eep_bench_ep_now_us();
    for (i = 0; i < o->iters; i++) {
        if ((status = eep_bl_dispatch(bl, din, NULL)) != EEP_OK) {
            goto out;
        }
    }
    CU_TRY(cu->cuStreamSynchronize(ctx->stream));
    res->dispatch_us = (eep_bench_ep_now_us() - t0) / o->iters;
    if ((status = line_up(ctx, y)) != EEP_OK) {
        goto out;
    }
    t0 = eep_bench_ep_now_us();
    for (i = 0; i < o->iters; i++) {
        if ((status = eep_bl_combine(bl, y)) != EEP_OK) {
            goto out;
        }
    }
    CU_TRY(cu->cuStreamSynchronize(ctx->stream));
    res->combine_us = (eep_bench_ep_now_us() - t0) / o->iters;
    eep_bl_view(bl, &v);
    res->dispatch_bytes = (double)v.bytes_sent;
    res->combine_bytes  = (double)v.combine_bytes_sent;
    res->ran            = 1;
out:
    free(out1);
    free(out2);
    if (y != 0) {
        cu->cuMemFree(y);
    }
    eep_bl_destroy(bl);
    return status;
}

/* Driver entry points for graphs (not in libeep's symbol table: only the bench needs them). */
typedef CUresult (*bench_begin_capture_fn)(CUstream, CUstreamCaptureMode);
typedef CUresult (*bench_end_capture_fn)(CUstream, CUgraph *);
typedef CUresult (*bench_instantiate_fn)(CUgraphExec *, CUgraph, unsigned long long);
typedef CUresult (*bench_graph_launch_fn)(CUgraphExec, CUstream);
typedef CUresult (*bench_graph_exec_destroy_fn)(CUgraphExec);
typedef CUresult (*bench_graph_destroy_fn)(CUgraph);

#define GRAPH_BATCHES 3

/*
 * Ours without host overhead: one dispatch (then one combine) captured in a CUDA graph and
 * replayed @p iters times, three times over; @return the median batch's mean us per replay in
 * *d_us / *c_us (0 where it could not be captured).  Then GRAPH_PAIRS dispatch+combine pairs in
 * one graph (what a decode step captures: kernels back to back, so a launch can overlap the
 * previous kernel's end): *pair_us per pair.  Only for modes without a host wait (NO_CPU_SYNC,
 * CACHED).
 */
static eep_status_t graph_times(eep_bench_ctx_t *ctx, eep_runtime_t *rt,
                                const eep_dispatch_args_t *a, eep_ep_handle_t **h, CUdeviceptr y,
                                CUdeviceptr out, int iters, CUdeviceptr scratch, double *d_us,
                                double *c_us, double *pair_us)
{
    void                       *lib = dlopen("libcuda.so.1", RTLD_NOW | RTLD_NOLOAD);
    bench_begin_capture_fn      begin;
    bench_end_capture_fn        end;
    bench_instantiate_fn        inst;
    bench_graph_launch_fn       launch;
    bench_graph_exec_destroy_fn exec_destroy;
    bench_graph_destroy_fn      destroy;
    eep_status_t                status = EEP_OK;
    int                         which, i;

    *d_us = *c_us = *pair_us = 0;
    if (lib == NULL) {
        return EEP_OK;
    }
    begin        = (bench_begin_capture_fn)dlsym(lib, "cuStreamBeginCapture_v2");
    end          = (bench_end_capture_fn)dlsym(lib, "cuStreamEndCapture");
    inst         = (bench_instantiate_fn)dlsym(lib, "cuGraphInstantiateWithFlags");
    launch       = (bench_graph_launch_fn)dlsym(lib, "cuGraphLaunch");
    exec_destroy = (bench_graph_exec_destroy_fn)dlsym(lib, "cuGraphExecDestroy");
    destroy      = (bench_graph_destroy_fn)dlsym(lib, "cuGraphDestroy");
    if (begin == NULL || end == NULL || inst == NULL || launch == NULL || exec_destroy == NULL ||
        destroy == NULL) {
        dlclose(lib);
        return EEP_OK;
    }
    for (which = 0; which < 3 && status == EEP_OK; which++) {
        CUgraph     g  = NULL;
        CUgraphExec ge = NULL;
        double      t0, batch_us[GRAPH_BATCHES];
        int         b, n = which == 2 ? GRAPH_PAIRS : 1;

        if (begin(ctx->stream, CU_STREAM_CAPTURE_MODE_RELAXED) != CUDA_SUCCESS) {
            break;
        }
        for (i = 0; i < n && status == EEP_OK; i++) {
            if (which != 1) {
                status = eep_dispatch(rt, a, h, ctx->stream);
            }
            if (which != 0 && status == EEP_OK) {
                status = eep_combine(rt, (const void *)y, *h, (void *)out, ctx->stream);
            }
        }
        if (end(ctx->stream, &g) != CUDA_SUCCESS || status != EEP_OK ||
            inst(&ge, g, 0) != CUDA_SUCCESS) {
            if (g != NULL) {
                destroy(g);
            }
            status = status != EEP_OK ? status : EEP_ERR_INTERNAL;
            break;
        }
        /* warm up, then GRAPH_BATCHES timed batches, each lined up first; the median batch:
           a batch of 20 replays sometimes took 30-40 ms on the 2 x H200 host (3 rows in 6
           runs, the same shape's other rows normal), which one batch's mean turned into
           1.5-2 ms a call */
        for (i = 0; i < 3 && status == EEP_OK; i++) {
            status = eep_status_from_cu(launch(ge, ctx->stream), "cuGraphLaunch");
        }
        for (b = 0; b < GRAPH_BATCHES && status == EEP_OK; b++) {
            status = line_up(ctx, scratch);
            t0     = eep_bench_ep_now_us();
            for (i = 0; i < iters && status == EEP_OK; i++) {
                status = eep_status_from_cu(launch(ge, ctx->stream), "cuGraphLaunch");
            }
            if (status == EEP_OK) {
                status = eep_runtime_sync(rt, ctx->stream);
            }
            batch_us[b] = (eep_bench_ep_now_us() - t0) / iters / n;
        }
        if (status == EEP_OK) {
            *(which == 0   ? d_us
              : which == 1 ? c_us
                           : pair_us) = eep_bench_median(batch_us, GRAPH_BATCHES);
        }
        exec_destroy(ge);
        destroy(g);
    }
    dlclose(lib);
    return status;
}

/*
 * --trace: the host's time in the timed dispatch loop's calls by part (eep_ep_host_trace, @p ms
 * and @p calls before and after the loop), beside the loop's enqueue time and its time a call
 * once the stream is done: a loop whose enqueue time is its time is bound by the host.
 */
static void print_host_trace(int rank, double (*ms)[EEP_EP_HOST_PARTS], const uint64_t *calls,
                             double enqueued_us, double call_us)
{
    static const char *names[EEP_EP_HOST_PARTS] = { "checks", "fork", "launch", "counts", "rest" };
    const double       n                        = (double)(calls[1] - calls[0]);
    double             sum                      = 0;
    int                k;

    if (n <= 0) {
        return;
    }
    printf("host rank %d dispatch us a call: %.1f enqueued, %.1f done |", rank, enqueued_us,
           call_us);
    for (k = 0; k < EEP_EP_HOST_PARTS; k++) {
        const double us = (ms[1][k] - ms[0][k]) * 1e3 / n;

        sum += us;
        printf(" %s %.1f", names[k], us);
    }
    printf(" | in calls %.1f\n", sum);
}

/* eep_dispatch/eep_combine on this rank, over a runtime that adopts the benchmark's
   communicator: check, then time.  Whatever stops it is said in res->why. */
eep_status_t eep_bench_ep_run_ours(eep_bench_ctx_t *ctx, const bench_opts_t *o,
                                   const eep_ref_input_t *in, const eep_ref_recv_t *recv,
                                   uint16_t *const *y_host, const uint16_t *out_want,
                                   const eep_bench_inputs_t *din, bench_result_t *res)
{
    const eep_cuda_sym_t *cu = ctx->cu;
    const eep_ep_shape_t *s  = &o->shape;
    eep_runtime_params_t  rp = { .size = sizeof(rp), .nccl_comm = ctx->comm, .device = -1 };
    eep_runtime_t        *rt = NULL;
    eep_ep_handle_t      *h  = NULL;
    eep_dispatch_args_t   a;
    eep_bl_view_t         v;
    CUdeviceptr           y    = 0;
    int64_t               rows = eep_ep_rows_max(s), num_rows = -1;
    size_t                El = (size_t)eep_ep_local_experts(s), K = (size_t)s->num_topk;
    size_t                hb = (size_t)s->hidden * eep_ep_elem_bytes(s->dtype);
    size_t                sb = s->dtype == EEP_DTYPE_FP8_E4M3 ? (size_t)s->hidden / 128 * 4 : 0;
    size_t                out_bytes   = (size_t)in[ctx->rank].num_tokens * (size_t)s->hidden * 2;
    int32_t              *host_counts = calloc(El + 1, sizeof(int32_t));
    uint16_t             *out1 = malloc(out_bytes + 2), *out2 = malloc(out_bytes + 2);
    eep_status_t          status = EEP_OK;
    int                   i, host_traced;
    double                t0, enqueued_us, host_ms[2][EEP_EP_HOST_PARTS];
    uint64_t              host_calls[2];

    memset(&v, 0, sizeof(v));
    if (host_counts == NULL || out1 == NULL || out2 == NULL) {
        status = EEP_ERR_NO_MEMORY;
        goto out;
    }
    {
        /* The window holds the workspace (well under 32 MiB) and this shape's buffers, and for
           hybrid mode (a world of more than one node) the GIN send staging. */
        eep_ep_buffer_sizes_t z;
        const size_t          stage = eep_ep_gin_stage_bytes_max(s);

        if (eep_ep_buffer_sizes(s, &z) == EEP_OK) {
            rp.window_bytes = (z.total_bytes + stage + ((size_t)64 << 20)) / ((size_t)2 << 20) *
                              ((size_t)2 << 20);
        }
    }
    status = eep_runtime_create(&rp, &rt);
    if (status != EEP_OK) {
        snprintf(res->why, sizeof(res->why), "eep_runtime_create: %s", eep_status_string(status));
        goto out;
    }
    {
        const char *transport = eep_ep_transport(rt);

        if (transport == NULL) {
            snprintf(res->why, sizeof(res->why), "no dispatch/combine transport (see the log)");
            status = EEP_ERR_UNSUPPORTED;
            goto out;
        }
        if (ctx->rank == 0) {
            printf("ours: %s mode (%d ranks)\n", transport, ctx->world);
        }
    }
    v.capacity = rows;
    CU_TRY(cu->cuMemAlloc(&v.recv_x, (size_t)rows * hb + 16));
    CU_TRY(cu->cuMemAlloc(&v.recv_x_scales, (size_t)rows * sb + 16));
    CU_TRY(cu->cuMemAlloc(&v.recv_topk_idx, (size_t)rows * K * 4 + 16));
    CU_TRY(cu->cuMemAlloc(&v.recv_topk_weights, (size_t)rows * K * 4 + 16));
    CU_TRY(cu->cuMemAlloc(&v.expert_counts, El * 4 + 16));
    CU_TRY(cu->cuMemAlloc(&v.expert_offsets,
                          (El > (size_t)s->world ? El : (size_t)s->world) * 4 + 20));
    CU_TRY(cu->cuMemAlloc(&v.out, (size_t)s->max_tokens * (size_t)s->hidden * 2 + 16));
    CU_TRY(cu->cuMemAlloc(&y, (size_t)rows * (size_t)s->hidden * 2 + 16));

    memset(&a, 0, sizeof(a));
    a.size                = sizeof(a);
    a.x                   = (const void *)din->x;
    a.x_scales            = sb ? (const float *)din->x_scales : NULL;
    a.dtype               = s->dtype;
    a.topk_idx            = (const void *)din->topk_idx;
    a.topk_idx_dtype      = din->idx_dtype;
    a.topk_weights        = (const float *)din->topk_weights;
    a.num_tokens          = din->num_tokens;
    a.hidden              = s->hidden;
    a.num_topk            = s->num_topk;
    a.num_experts         = s->num_experts;
    a.expert_alignment    = s->alignment;
    a.max_tokens_per_rank = s->max_tokens;
    a.recv_capacity       = rows;
    a.num_sms             = o->num_sms;
    a.recv_x              = (void *)v.recv_x;
    a.recv_x_scales       = sb ? (float *)v.recv_x_scales : NULL;
    a.recv_topk_idx       = (int32_t *)v.recv_topk_idx;
    a.recv_topk_weights   = (float *)v.recv_topk_weights;
    a.recv_expert_counts  = (int32_t *)v.expert_counts;
    a.recv_expert_offsets = (int32_t *)v.expert_offsets;
    a.host_expert_counts  = host_counts;
    a.num_recv_rows_p     = &num_rows;
    a.skip_padding_x      = o->skip_pad;
    a.layout              = o->layout;
    /* Cached mode needs a layout first. */
    a.mode = o->mode == EEP_EP_MODE_CACHED ? EEP_EP_MODE_NO_CPU_SYNC : o->mode;

    if ((status = eep_bench_ep_poison_outputs(ctx, s, &v)) != EEP_OK) {
        goto out;
    }
    status = eep_dispatch(rt, &a, &h, ctx->stream);
    if (status == EEP_ERR_UNSUPPORTED) {
        snprintf(res->why, sizeof(res->why), "eep_dispatch: not available yet");
        goto out;
    }
    if (status == EEP_OK && o->mode == EEP_EP_MODE_CACHED) {
        /* Check what the cached dispatch produced, not the one before it. */
        a.mode = EEP_EP_MODE_CACHED;
        if ((status = eep_bench_ep_poison_outputs(ctx, s, &v)) == EEP_OK) {
            status = eep_dispatch(rt, &a, &h, ctx->stream);
        }
    }
    if (status != EEP_OK || (status = eep_runtime_sync(rt, ctx->stream)) != EEP_OK) {
        snprintf(res->why, sizeof(res->why), "dispatch: %s", eep_status_string(status));
        goto out;
    }
    if (o->check) {
        const eep_ref_recv_t *r = &recv[ctx->rank];

        const int rm = o->layout == EEP_EP_LAYOUT_RANK_MAJOR;

        res->errors += eep_bench_ep_check_dispatch(
            ctx, s, &v, r, o->skip_pad, rm,
            rm && s->world == 1 ? a.num_tokens : 0); /* eep/ep.h: the copy engine's rows */
        if (o->mode == EEP_EP_MODE_CPU_SYNC) {
            res->errors += eep_bench_ep_diff("host_expert_counts", host_counts, r->expert_counts,
                                             El, 4, ctx->rank);
            res->errors += eep_bench_ep_diff("num_recv_rows", &num_rows, &r->num_rows, 1, 8,
                                             ctx->rank);
        }
        CU_TRY(cu->cuMemsetD8(y, 0xff, (size_t)rows * (size_t)s->hidden * 2));
        if (r->num_rows > 0) {
            CU_TRY(cu->cuMemcpyHtoD(y, y_host[ctx->rank],
                                    (size_t)r->num_rows * (size_t)s->hidden * 2));
        }
        for (i = 0; i < 2; i++) {
            CU_TRY(cu->cuMemsetD8Async(v.out, 0xa5, out_bytes + 2, ctx->stream));
            if ((status = eep_combine(rt, (const void *)y, h, (void *)v.out, ctx->stream)) !=
                    EEP_OK ||
                (status = eep_runtime_sync(rt, ctx->stream)) != EEP_OK) {
                snprintf(res->why, sizeof(res->why), "combine: %s", eep_status_string(status));
                goto out;
            }
            CU_TRY(cu->cuMemcpyDtoH(i == 0 ? out1 : out2, v.out, out_bytes + 2));
        }
        res->errors += eep_bench_ep_diff("combine out", out1, out_want, out_bytes / 2, 2,
                                         ctx->rank);
        res->errors += eep_bench_ep_diff("combine out (second run)", out2, out1, out_bytes / 2, 2,
                                         ctx->rank);
        res->errors += eep_bench_ep_diff("combine out (past the end)", out1 + out_bytes / 2,
                                         "\xa5\xa5", 1, 2, ctx->rank);
    }

    /* Timing, as for the baseline. */
    for (i = 0; i < o->warmup; i++) {
        if ((status = eep_dispatch(rt, &a, &h, ctx->stream)) != EEP_OK ||
            (status = eep_combine(rt, (const void *)y, h, (void *)v.out, ctx->stream)) != EEP_OK) {
            goto out;
        }
    }
    if ((status = line_up(ctx, y)) != EEP_OK) {
        goto out;
    }
    host_traced = eep_ep_host_trace(rt, host_ms[0], &host_calls[0]) == EEP_OK;
    t0          = eep_bench_ep_now_us();
    for (i = 0; i < o->iters; i++) {
        if ((status = eep_dispatch(rt, &a, &h, ctx->stream)) != EEP_OK) {
            goto out;
        }
    }
    enqueued_us = (eep_bench_ep_now_us() - t0) / o->iters;
    CU_TRY(cu->cuStreamSynchronize(ctx->stream));
    res->dispatch_us = (eep_bench_ep_now_us() - t0) / o->iters;
    if (host_traced && eep_ep_host_trace(rt, host_ms[1], &host_calls[1]) == EEP_OK) {
        print_host_trace(ctx->rank, host_ms, host_calls, enqueued_us, res->dispatch_us);
    }
    if ((status = line_up(ctx, y)) != EEP_OK) {
        goto out;
    }
    t0 = eep_bench_ep_now_us();
    for (i = 0; i < o->iters; i++) {
        if ((status = eep_combine(rt, (const void *)y, h, (void *)v.out, ctx->stream)) != EEP_OK) {
            goto out;
        }
    }
    if ((status = eep_runtime_sync(rt, ctx->stream)) != EEP_OK) {
        goto out;
    }
    res->combine_us = (eep_bench_ep_now_us() - t0) / o->iters;
    if (o->mode != EEP_EP_MODE_CPU_SYNC &&
        (status = graph_times(ctx, rt, &a, &h, y, v.out, o->iters, y, &res->graph_dispatch_us,
                              &res->graph_combine_us, &res->graph_pair_us)) != EEP_OK) {
        goto out;
    }
    eep_bench_ep_print_trace(rt, ctx->rank, h->num_sms, h->num_sms + h->copy_sms);
    eep_bench_ep_traffic(s, in, ctx->rank, &res->dispatch_bytes, &res->combine_bytes);
    eep_bench_ep_hbm_bytes(s, in, ctx->rank, o->layout, &res->dispatch_hbm, &res->combine_hbm);
    res->sms      = h->num_sms;
    res->copy_sms = h->copy_sms;
    /* the budget in force: the call's, else the knob's (EEP_EP_NUM_SMS), else none */
    res->budget = o->num_sms > 0 ? o->num_sms : (int)eep_bench_ep_knobs()->num_sms;
    res->ran    = 1;
out:
    if (status != EEP_OK && res->why[0] == '\0') {
        snprintf(res->why, sizeof(res->why), "%s", eep_status_string(status));
    }
    free(host_counts);
    free(out1);
    free(out2);
    eep_ep_handle_destroy(h);
    {
        CUdeviceptr bufs[] = { v.recv_x,        v.recv_x_scales,
                               v.recv_topk_idx, v.recv_topk_weights,
                               v.expert_counts, v.expert_offsets,
                               v.out,           y };

        for (i = 0; i < (int)(sizeof(bufs) / sizeof(bufs[0])); i++) {
            if (bufs[i] != 0) {
                cu->cuMemFree(bufs[i]);
            }
        }
    }
    eep_runtime_destroy(rt);
    return status;
}
