/*
 * eep_bench_barrier.c - `eep-bench barrier [OUT.md [N]]`: barrier latency, ours (both modes)
 * beside NCCL's ncclLsaBarrierSession and a 4-byte ncclAllReduce, all in the same run on the same
 * communicator; and three probes (bench/kernels/barrier_probes.cuh) that ask where the barrier's time goes.
 *
 * Two views, N samples each (default 10,000), after warm-up:
 *   in-kernel    N barriers inside one launch; per-barrier time = difference of consecutive
 *                clock64() exit stamps, converted to ns with the launch's %globaltimer span:
 *                the kernel launch is excluded.  (Not applicable to ncclAllReduce.)
 *   per-launch   N separate launches, each between two CUDA events: median of event time.
 *   back-to-back N separate launches enqueued without waiting: wall time / N (what a
 *                training loop sees when the barrier is on its critical path).
 * Every column reports the slowest rank's median (or mean).  Run one process per GPU through
 * tests/gpu/launch.sh (`make bench-barrier`); rank 0 prints a markdown table (and writes it to
 * OUT.md if given).
 */
#include <nccl.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "eep_bench_barrier.h"
#include "eep_bench_stats.h"
#include "elastic/runtime/runtime.h"
#include "tests/common/gpu_test.h"

#define WARM 100

enum {
    OP_OURS_PAR,
    OP_OURS_SEQ,
    OP_NCCL_LSA,
    OP_PROBE_RELAXED,
    OP_PROBE_WARPS,
    OP_PROBE_PULL,
    OP_ALLREDUCE,
    OP_ALLREDUCE_NB,
    OP_COUNT
};
static const char *const op_names[OP_COUNT] = {
    "eep_barrier, parallel mode",
    "eep_barrier, sequential mode",
    "NCCL ncclLsaBarrierSession kernel",
    "probe, not a barrier: arrivals after the first without a fence",
    "probe: arrivals alternating between 2 warps",
    "probe: pull (arrive in own memory, poll the peer's over NVLink)",
    "ncclAllReduce, 4 bytes (blocking comm)",
    "ncclAllReduce, 4 bytes (the runtime's non-blocking comm)",
};

typedef struct {
    eep_runtime_t        *rt;
    eep_bootstrap_t      *bs;
    const eep_cuda_sym_t *cu;
    CUstream              stream;
    eep_jit_kernel_t     *nccl_kernel;
    eep_jit_kernel_t
               *probe_kernel[3]; /* bench/kernels/barrier_probes.cuh; NULL: over 32 LSA peers */
    ncclComm_t  comm;            /* the runtime's (non-blocking) */
    ncclComm_t  ar_comm;         /* a plain blocking communicator for the all-reduce baseline */
    CUdeviceptr d_cycles, d_stamps, d_red;
    unsigned    block;
    int         n;
} bench_t;

/* One operation, once, on the bench stream; iterations > 1 only for the in-kernel view. */
static eep_status_t run_op(bench_t *b, int op, unsigned iterations, int hooks)
{
    eep_barrier_opts_t   o;
    eep_barrier_params_t p;
    ncclResult_t         res;
    ncclComm_t           comm;

    memset(&o, 0, sizeof(o));
    o.size       = sizeof(o);
    o.mode       = op == OP_OURS_SEQ ? EEP_BARRIER_SEQUENTIAL : EEP_BARRIER_PARALLEL;
    o.iterations = iterations;
    if (hooks) {
        o.cycles = (uint64_t *)(uintptr_t)b->d_cycles;
        o.stamps = (uint64_t *)(uintptr_t)b->d_stamps;
    }
    switch (op) {
    case OP_OURS_PAR:
    case OP_OURS_SEQ:
        return eep_barrier_ex(b->rt, &o, b->stream);
    case OP_NCCL_LSA:
        eep_barrier_params_fill(b->rt, &o, &p);
        return eep_jit_launch(b->nccl_kernel, 1, b->block, 0, b->stream, &p, sizeof(p));
    case OP_PROBE_RELAXED:
    case OP_PROBE_WARPS:
    case OP_PROBE_PULL:
        eep_barrier_params_fill(b->rt, &o, &p);
        return eep_jit_launch(b->probe_kernel[op - OP_PROBE_RELAXED], 1, 64, 0, b->stream, &p,
                              sizeof(p));
    default:
        comm = op == OP_ALLREDUCE ? b->ar_comm : b->comm;
        res  = ncclAllReduce((void *)(uintptr_t)b->d_red, (void *)(uintptr_t)b->d_red, 1, ncclFloat,
                             ncclSum, comm, (cudaStream_t)b->stream);
        if (res == ncclInProgress) {
            ncclResult_t async = ncclInProgress;

            while (ncclCommGetAsyncError(comm, &async) == ncclSuccess && async == ncclInProgress) {
            }
            res = async;
        }
        return res == ncclSuccess ? EEP_OK : EEP_ERR_NCCL;
    }
}

/* In-kernel view: median and mean per barrier in us. */
static void in_kernel(bench_t *b, int op, double *med_p, double *mean_p)
{
    unsigned  total = (unsigned)(b->n + WARM);
    uint64_t *cyc   = malloc(sizeof(uint64_t) * total);
    uint64_t *st    = malloc(2 * sizeof(uint64_t) * total);
    double   *d     = malloc(sizeof(double) * (size_t)b->n);
    double    ns_per_cycle;
    int       i;

    GPU_OK(eep_bootstrap_barrier(b->bs));
    GPU_OK(run_op(b, op, total, 1));
    GPU_OK(eep_runtime_sync(b->rt, b->stream));
    GPU_OK(eep_status_from_cu(b->cu->cuMemcpyDtoH(cyc, b->d_cycles, sizeof(uint64_t) * total),
                              "DtoH"));
    GPU_OK(eep_status_from_cu(b->cu->cuMemcpyDtoH(st, b->d_stamps, 2 * sizeof(uint64_t) * total),
                              "DtoH"));
    ns_per_cycle = (double)(st[2 * (total - 1) + 1] - st[2 * (WARM - 1) + 1]) /
                   (double)(cyc[total - 1] - cyc[WARM - 1]);
    for (i = 0; i < b->n; i++) {
        d[i] = (double)(cyc[WARM + i] - cyc[WARM + i - 1]) * ns_per_cycle / 1e3;
    }
    *mean_p = (double)(st[2 * (total - 1) + 1] - st[2 * (WARM - 1) + 1]) / b->n / 1e3;
    *med_p  = eep_bench_median(d, b->n);
    free(cyc);
    free(st);
    free(d);
}

/* Per-launch view: median of event-timed single launches, and back-to-back wall time / n. */
static void per_launch(bench_t *b, int op, double *med_p, double *b2b_p)
{
    CUevent *ev = malloc(sizeof(CUevent) * 2 * (size_t)b->n);
    double  *d  = malloc(sizeof(double) * (size_t)b->n);
    double   t0;
    float    ms;
    int      i;

    for (i = 0; i < 2 * b->n; i++) {
        GPU_OK(eep_status_from_cu(b->cu->cuEventCreate(&ev[i], CU_EVENT_DEFAULT), "event"));
    }
    GPU_OK(eep_bootstrap_barrier(b->bs));
    for (i = 0; i < WARM; i++) {
        GPU_OK(run_op(b, op, 1, 0));
    }
    GPU_OK(eep_runtime_sync(b->rt, b->stream));
    GPU_OK(eep_bootstrap_barrier(b->bs));
    for (i = 0; i < b->n; i++) {
        b->cu->cuEventRecord(ev[2 * i], b->stream);
        GPU_OK(run_op(b, op, 1, 0));
        b->cu->cuEventRecord(ev[2 * i + 1], b->stream);
    }
    GPU_OK(eep_runtime_sync(b->rt, b->stream));
    for (i = 0; i < b->n; i++) {
        b->cu->cuEventElapsedTime(&ms, ev[2 * i], ev[2 * i + 1]);
        d[i] = (double)ms * 1e3;
    }
    *med_p = eep_bench_median(d, b->n);

    GPU_OK(eep_bootstrap_barrier(b->bs));
    t0 = gpu_test_now_ms();
    for (i = 0; i < b->n; i++) {
        GPU_OK(run_op(b, op, 1, 0));
    }
    GPU_OK(eep_runtime_sync(b->rt, b->stream));
    *b2b_p = (gpu_test_now_ms() - t0) * 1e3 / b->n;
    for (i = 0; i < 2 * b->n; i++) {
        b->cu->cuEventDestroy(ev[i]);
    }
    free(ev);
    free(d);
}

int eep_bench_barrier_main(int argc, char **argv)
{
    bench_t            b;
    eep_jit_t         *jit = NULL;
    eep_jit_spec_t     spec;
    eep_runtime_info_t info;
    double             mine[OP_COUNT][4], *all;
    char               table[8192];
    size_t             len = 0;
    int                op, c, r, nranks;
    FILE              *out;

    memset(&b, 0, sizeof(b));
    b.bs   = gpu_test_bootstrap("barrier_bench", 2);
    b.rt   = gpu_test_runtime(b.bs, NULL);
    b.cu   = gpu_test_cu();
    b.n    = argc > 2 ? atoi(argv[2]) : 10000;
    b.comm = (ncclComm_t)eep_runtime_nccl_comm(b.rt);
    nranks = eep_bootstrap_nranks(b.bs);
    GPU_OK(eep_runtime_query(b.rt, &info));
    b.block = (unsigned)((info.lsa_size + 31) / 32 * 32);
    GPU_OK(eep_status_from_cu(b.cu->cuStreamCreate(&b.stream, CU_STREAM_NON_BLOCKING), "stream"));
    GPU_OK(eep_status_from_cu(b.cu->cuMemAlloc(&b.d_cycles, sizeof(uint64_t) * (b.n + WARM)),
                              "alloc"));
    GPU_OK(eep_status_from_cu(b.cu->cuMemAlloc(&b.d_stamps, 2 * sizeof(uint64_t) * (b.n + WARM)),
                              "alloc"));
    GPU_OK(eep_status_from_cu(b.cu->cuMemAlloc(&b.d_red, 16), "alloc"));
    GPU_OK(eep_status_from_cu(b.cu->cuMemsetD32(b.d_red, 0, 4), "memset"));
    memset(&spec, 0, sizeof(spec));
    spec.size          = sizeof(spec);
    spec.header        = "bench/kernels/nccl_lsa_barrier.cuh";
    spec.function      = "eep_bench_nccl_lsa_body";
    spec.param_type    = "eep_barrier_params_t";
    spec.launch_bounds = EEP_BARRIER_MAX_THREADS;
    GPU_OK(eep_jit_create(NULL, &jit));
    GPU_OK(eep_jit_get_kernel(jit, &spec, &b.nccl_kernel));
    for (c = 0; c < 3 && info.lsa_size <= 32; c++) {
        spec.header        = "bench/kernels/barrier_probes.cuh";
        spec.function      = "eep_bench_barrier_probe_body";
        spec.template_args = c == 0 ? "0" : c == 1 ? "1" : "2";
        GPU_OK(eep_jit_get_kernel(jit, &spec, &b.probe_kernel[c]));
    }
    {
        ncclUniqueId id;

        memset(&id, 0, sizeof(id));
        if (gpu_test_rank == 0) {
            GPU_REQUIRE(ncclGetUniqueId(&id) == ncclSuccess, "ncclGetUniqueId");
        }
        GPU_OK(eep_bootstrap_bcast(b.bs, &id, sizeof(id), 0));
        GPU_REQUIRE(ncclCommInitRank(&b.ar_comm, nranks, id, gpu_test_rank) == ncclSuccess,
                    "ncclCommInitRank");
    }

    for (op = 0; op < OP_COUNT; op++) {
        mine[op][0] = mine[op][1] = mine[op][2] = mine[op][3] = -1;
        if (op >= OP_PROBE_RELAXED && op <= OP_PROBE_PULL && b.probe_kernel[0] == NULL) {
            continue;
        }
        if (op != OP_ALLREDUCE && op != OP_ALLREDUCE_NB) {
            in_kernel(&b, op, &mine[op][0], &mine[op][1]);
        }
        per_launch(&b, op, &mine[op][2], &mine[op][3]);
    }
    all = malloc(sizeof(mine) * (size_t)nranks);
    GPU_OK(eep_bootstrap_allgather(b.bs, mine, all, sizeof(mine)));
    for (r = 1; r < nranks; r++) { /* slowest rank */
        for (op = 0; op < OP_COUNT; op++) {
            for (c = 0; c < 4; c++) {
                double v = all[(size_t)r * OP_COUNT * 4 + op * 4 + c];

                if (v > mine[op][c]) {
                    mine[op][c] = v;
                }
            }
        }
    }
    if (gpu_test_rank == 0) {
        len += (size_t)snprintf(table + len, sizeof(table) - len,
                                "| %d GPUs, N = %d | in-kernel median (us) | in-kernel mean (us) "
                                "| per-launch median (us) | back-to-back (us/op) |\n"
                                "|---|---|---|---|---|\n",
                                nranks, b.n);
        for (op = 0; op < OP_COUNT; op++) {
            char v[4][32];

            for (c = 0; c < 4; c++) {
                snprintf(v[c], sizeof(v[c]), mine[op][c] >= 0 ? "%.2f" : "n/a", mine[op][c]);
            }
            len += (size_t)snprintf(table + len, sizeof(table) - len,
                                    "| %s | %s | %s | %s | %s |\n", op_names[op], v[0], v[1], v[2],
                                    v[3]);
        }
        printf("%s", table);
        if (argc > 1 && (out = fopen(argv[1], "w")) != NULL) {
            fputs(table, out);
            fclose(out);
        }
    }
    free(all);
    GPU_OK(eep_bootstrap_barrier(b.bs));
    b.cu->cuMemFree(b.d_cycles);
    b.cu->cuMemFree(b.d_stamps);
    b.cu->cuMemFree(b.d_red);
    b.cu->cuStreamDestroy(b.stream);
    ncclCommDestroy(b.ar_comm);
    eep_jit_destroy(jit);
    eep_runtime_destroy(b.rt);
    eep_bootstrap_destroy(b.bs);
    return gpu_test_finish("barrier_bench");
}
