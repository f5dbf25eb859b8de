/*
 * eep_bench_ep.c - `eep-bench ep`: dispatch/combine correctness and speed against NCCL.
 *
 *   eep-bench ep --nranks 2 --baseline nccl --tokens 4096 --hidden 7168 --topk 8 --experts 256
 *
 * With --nranks N the process forks N ranks on this host (one GPU each, file bootstrap in a fresh
 * temporary directory); without it, it is one rank of a job started by a launcher (EEP_BOOTSTRAP,
 * EEP_RANK, EEP_WORLD_SIZE).  Every rank builds the whole world's inputs from the seed, computes
 * its expected outputs with the CPU reference, poisons every output, runs, and checks every
 * element: counts, offsets, every row (padding rows zero, rows past the end untouched) and the
 * combined tokens bit for bit, twice (bitwise reproducibility).  Then it times dispatch and
 * combine.  Rank 0 prints one table row per implementation with the slowest rank's numbers.
 *
 * The baseline runs first, then "ours" (eep_dispatch/eep_combine through a runtime adopting the
 * same communicator); until the kernels land, ours's row says why it did not run.
 *
 * This file forks the ranks and drives each one (inputs, reference, GPU, NCCL, one row per
 * implementation); eep_bench_ep_parts.h says where the other parts live.
 */
#include "eep_bench_ep_parts.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <ftw.h>
#include <unistd.h>

#include "eep/eep.h"
#include "util/log.h"
#include "elastic/gpu/nccl_util.h"
#include "bench/kernels/baseline_params.h"

static int rank_main(const bench_opts_t *opts, eep_bootstrap_t *bs)
{
    bench_opts_t       o   = *opts;
    eep_bench_ctx_t    ctx = { 0 };
    eep_ref_gen_t      gen;
    eep_ref_input_t   *in   = NULL;
    eep_ref_recv_t    *recv = NULL;
    uint16_t         **y = NULL, **out = NULL;
    eep_bench_inputs_t din  = { 0 };
    bench_result_t     mine = { 0 }, *all = NULL;
    ncclUniqueId       id;
    CUdevice           dev;
    CUcontext          cuctx = NULL;
    eep_status_t       status;
    int                ndev = 0, r, b, rc = 1, have_ref = 0;
    eep_ref_recv_t    *rm   = NULL; /* --layout rank: ours' reference */
    uint16_t         **rm_y = NULL, **rm_out = NULL;
    double             hbm_rate = 0;
    size_t             hb, sb, T;

    ctx.rank  = eep_bootstrap_rank(bs);
    ctx.world = eep_bootstrap_nranks(bs);
    eep_log_set_rank(ctx.rank);
    o.shape.world = ctx.world;
    if (eep_ep_shape_check(&o.shape, NULL) != EEP_OK || eep_bench_ep_gen_from_opts(&o, &gen) != 0) {
        fprintf(stderr, "eep-bench ep: invalid shape or gating for %d ranks\n", ctx.world);
        return 1;
    }
    hb = (size_t)o.shape.hidden * eep_ep_elem_bytes(o.shape.dtype);
    sb = o.shape.dtype == EEP_DTYPE_FP8_E4M3 ? (size_t)o.shape.hidden / 128 * 4 : 0;

    /* Inputs of the whole world (a pure function of the seed), the reference, y. */
    in  = calloc((size_t)ctx.world, sizeof(*in));
    all = calloc((size_t)ctx.world, sizeof(*all));
    if (in == NULL || all == NULL) {
        goto out;
    }
    for (r = 0; r < ctx.world; r++) {
        if (eep_ref_input_generate(&o.shape, &gen, r, &in[r]) != EEP_OK) {
            goto out;
        }
    }
    if (o.check) {
        recv = calloc((size_t)ctx.world, sizeof(*recv));
        y    = calloc((size_t)ctx.world, sizeof(*y));
        out  = calloc((size_t)ctx.world, sizeof(*out));
        if (recv == NULL || y == NULL || out == NULL ||
            eep_ref_dispatch(&o.shape, in, recv, NULL, NULL) != EEP_OK) {
            goto out;
        }
        have_ref = 1;
        eep_bench_ep_y_table_init();
        for (r = 0; r < ctx.world; r++) {
            y[r] = eep_bench_ep_make_y(&o.shape, &recv[r], r);
            if (y[r] == NULL) {
                goto out;
            }
        }
        /* Only this rank's combined tokens are checked here. */
        out[ctx.rank] = malloc((size_t)in[ctx.rank].num_tokens * (size_t)o.shape.hidden * 2 + 2);
        if (out[ctx.rank] == NULL ||
            eep_ref_combine_src(&o.shape, in, recv, (const uint16_t *const *)y, ctx.rank,
                                out[ctx.rank]) != EEP_OK) {
            goto out;
        }
        /* Ours in the rank-major layout: its own reference (every rank's, for the combine). */
        if (o.layout == EEP_EP_LAYOUT_RANK_MAJOR) {
            rm     = calloc((size_t)ctx.world, sizeof(*rm));
            rm_y   = calloc((size_t)ctx.world, sizeof(*rm_y));
            rm_out = calloc((size_t)ctx.world, sizeof(*rm_out));
            if (rm == NULL || rm_y == NULL || rm_out == NULL) {
                goto out;
            }
            for (r = 0; r < ctx.world; r++) {
                if (eep_ref_rank_major(&o.shape, in, r, &rm[r]) != EEP_OK ||
                    (rm_y[r] = eep_bench_ep_make_y(&o.shape, &rm[r], r)) == NULL ||
                    (rm_out[r] = malloc((size_t)in[r].num_tokens * (size_t)o.shape.hidden * 2 +
                                        2)) == NULL) {
                    goto out;
                }
            }
            if (eep_ref_combine_rank_major(&o.shape, in, rm, (const uint16_t *const *)rm_y,
                                           rm_out) != EEP_OK) {
                goto out;
            }
        }
    }

    /* GPU, stream, NCCL, JIT. */
    status = eep_cuda_sym_driver(&ctx.cu);
    if (status != EEP_OK) {
        fprintf(stderr, "eep-bench ep: no GPU driver: %s\n", eep_status_string(status));
        rc = 77;
        goto out;
    }
    if (ctx.cu->cuDeviceGetCount(&ndev) != CUDA_SUCCESS || ndev < 1) {
        fprintf(stderr, "eep-bench ep: no GPU\n");
        rc = 77;
        goto out;
    }
    CU_TRY(ctx.cu->cuDeviceGet(&dev, ctx.rank % ndev));
    CU_TRY(ctx.cu->cuDevicePrimaryCtxRetain(&cuctx, dev));
    CU_TRY(ctx.cu->cuCtxSetCurrent(cuctx));
    CU_TRY(ctx.cu->cuStreamCreate(&ctx.stream, CU_STREAM_NON_BLOCKING));
    if (eep_nccl_check_version(NULL) != EEP_OK) {
        goto out;
    }
    if (ctx.rank == 0 &&
        eep_status_from_nccl(ncclGetUniqueId(&id), NULL, "ncclGetUniqueId") != EEP_OK) {
        goto out;
    }
    if (eep_bootstrap_bcast(bs, &id, sizeof(id), 0) != EEP_OK ||
        eep_status_from_nccl(ncclCommInitRank(&ctx.comm, ctx.world, id, ctx.rank), NULL,
                             "ncclCommInitRank") != EEP_OK ||
        eep_jit_create(NULL, &ctx.jit) != EEP_OK) {
        goto out;
    }

    /* This rank's inputs on the GPU. */
    T              = (size_t)in[ctx.rank].num_tokens;
    din.num_tokens = in[ctx.rank].num_tokens;
    din.idx_dtype  = o.idx_dtype;
    CU_TRY(ctx.cu->cuMemAlloc(&din.x, T * hb + 16));
    CU_TRY(ctx.cu->cuMemAlloc(&din.x_scales, T * sb + 16));
    CU_TRY(ctx.cu->cuMemAlloc(&din.topk_idx, T * (size_t)o.shape.num_topk * 8 + 16));
    CU_TRY(ctx.cu->cuMemAlloc(&din.topk_weights, T * (size_t)o.shape.num_topk * 4 + 16));
    if (T > 0) {
        size_t n = T * (size_t)o.shape.num_topk;

        CU_TRY(ctx.cu->cuMemcpyHtoD(din.x, in[ctx.rank].x, T * hb));
        if (sb) {
            CU_TRY(ctx.cu->cuMemcpyHtoD(din.x_scales, in[ctx.rank].x_scales, T * sb));
        }
        if (o.idx_dtype == EEP_INDEX_INT64) {
            CU_TRY(ctx.cu->cuMemcpyHtoD(din.topk_idx, in[ctx.rank].topk_idx, n * 8));
        } else {
            int32_t *i32 = malloc(n * 4);

            if (i32 == NULL) {
                goto out;
            }
            eep_ref_topk_to_i32(&in[ctx.rank], o.shape.num_topk, i32);
            status = eep_status_from_cu(ctx.cu->cuMemcpyHtoD(din.topk_idx, i32, n * 4),
                                        "cuMemcpyHtoD");
            free(i32);
            if (status != EEP_OK) {
                goto out;
            }
        }
        CU_TRY(ctx.cu->cuMemcpyHtoD(din.topk_weights, in[ctx.rank].topk_weights, n * 4));
    }

    if (ctx.rank == 0) {
        printf("| impl     | n | T     | H     | K  | E    | type | gating       | dispatch us | "
               "GB/s    | combine us | GB/s    | check  | recv GB/s | SMs budget: send+copy | "
               "floor us d / c (x floor) |\n");
    }
    {
        double g = eep_bench_ep_measure_hbm_gbps(&ctx);

        if (ctx.rank == 0) {
            printf("floor: HBM %.0f GB/s (device-to-device copy, read + write, this run), link "
                   "%.0f GB/s (EEP_EP_LINK_GBPS or 430); dispatch reads x once and writes each "
                   "row once, combine reads each row once and writes out once\n",
                   g, eep_bench_link_gbps());
        }
        hbm_rate = g;
    }
    rc = 0;
    /* The baseline first: its row is out even if ours then fails or hangs. */
    if (o.baseline) {
        memset(&mine, 0, sizeof(mine));
        status = eep_bench_ep_run_baseline(&ctx, &o, in, recv, y, have_ref ? out[ctx.rank] : NULL,
                                           &din, &mine);
        mine.recv_bytes = eep_bench_ep_recv_token_bytes(&o.shape, in, ctx.rank);
        mine.hbm_gbps   = hbm_rate;
        eep_bench_ep_hbm_bytes(&o.shape, in, ctx.rank, EEP_EP_LAYOUT_EXPERT_MAJOR,
                               &mine.dispatch_hbm, &mine.combine_hbm);
        if (status != EEP_OK) {
            fprintf(stderr, "rank %d: baseline failed: %s\n", ctx.rank, eep_status_string(status));
            mine.ran = 0;
            mine.errors++;
        }
        if (eep_bootstrap_allgather(bs, &mine, all, sizeof(mine)) != EEP_OK) {
            goto out;
        }
        if (ctx.rank == 0) {
            eep_bench_ep_print_row("nccl", &o, all, ctx.world);
        }
        for (r = 0; r < ctx.world; r++) {
            rc |= all[r].errors != 0 || !all[r].ran;
        }
    }
    for (b = 0; o.ours && b < o.num_budgets; b++) {
        o.num_sms = o.budgets[b];
        memset(&mine, 0, sizeof(mine));
        status = rm != NULL
                     ? eep_bench_ep_run_ours(&ctx, &o, in, rm, rm_y, rm_out[ctx.rank], &din, &mine)
                     : eep_bench_ep_run_ours(&ctx, &o, in, recv, y, have_ref ? out[ctx.rank] : NULL,
                                             &din, &mine);

        mine.recv_bytes = eep_bench_ep_recv_token_bytes(&o.shape, in, ctx.rank);
        mine.hbm_gbps   = hbm_rate;
        if (status != EEP_OK && status != EEP_ERR_UNSUPPORTED) {
            fprintf(stderr, "rank %d: ours failed: %s\n", ctx.rank, eep_status_string(status));
        }
        if (eep_bootstrap_allgather(bs, &mine, all, sizeof(mine)) != EEP_OK) {
            goto out;
        }
        if (ctx.rank == 0) {
            eep_bench_ep_print_row("ours", &o, all, ctx.world);
            if (all[0].graph_dispatch_us > 0) {
                for (r = 0; r < ctx.world; r++) {
                    all[r].dispatch_us = all[r].graph_dispatch_us;
                    all[r].combine_us  = all[r].graph_combine_us;
                }
                eep_bench_ep_print_row("ours/gr", &o, all, ctx.world);
            }
            if (all[0].graph_pair_us > 0) {
                double worst = 0;

                for (r = 0; r < ctx.world; r++) {
                    worst = all[r].graph_pair_us > worst ? all[r].graph_pair_us : worst;
                }
                printf("ours/pair: %d dispatch+combine pairs in one CUDA graph: %.1f us per "
                       "pair (slowest rank)\n",
                       GRAPH_PAIRS, worst);
                fflush(stdout); /* a forked rank leaves by _exit */
            }
        }
        for (r = 0; r < ctx.world; r++) {
            rc |= all[r].errors != 0 || !all[r].ran;
        }
    }

out:
    if (ctx.cu != NULL) {
        if (din.x)
            ctx.cu->cuMemFree(din.x);
        if (din.x_scales)
            ctx.cu->cuMemFree(din.x_scales);
        if (din.topk_idx)
            ctx.cu->cuMemFree(din.topk_idx);
        if (din.topk_weights)
            ctx.cu->cuMemFree(din.topk_weights);
    }
    eep_jit_destroy(ctx.jit);
    if (ctx.comm != NULL) {
        ncclCommDestroy(ctx.comm);
    }
    if (ctx.stream != NULL) {
        ctx.cu->cuStreamDestroy(ctx.stream);
    }
    if (cuctx != NULL) {
        ctx.cu->cuDevicePrimaryCtxRelease(dev);
    }
    for (r = 0; in != NULL && r < ctx.world; r++) {
        eep_ref_input_free(&in[r]);
        if (recv != NULL) {
            eep_ref_recv_free(&recv[r]);
        }
        if (y != NULL) {
            free(y[r]);
        }
        if (out != NULL) {
            free(out[r]);
        }
        if (rm != NULL) {
            eep_ref_recv_free(&rm[r]);
        }
        if (rm_y != NULL) {
            free(rm_y[r]);
        }
        if (rm_out != NULL) {
            free(rm_out[r]);
        }
    }
    free(rm);
    free(rm_y);
    free(rm_out);
    free(in);
    free(recv);
    free(y);
    free(out);
    free(all);
    return rc;
}

static int remove_entry(const char *path, const struct stat *st, int flag, struct FTW *ftw)
{
    (void)st;
    (void)flag;
    (void)ftw;
    return remove(path);
}

static void remove_tree(const char *dir)
{
    if (nftw(dir, remove_entry, 8, FTW_DEPTH | FTW_PHYS) != 0) {
        fprintf(stderr, "eep-bench ep: could not remove %s\n", dir);
    }
}

/* One rank: bootstrap (file directory from --nranks, else the knobs) and run. */
static int rank_run(const bench_opts_t *o, int rank, const char *dir)
{
    eep_bootstrap_params_t bp = { .size   = sizeof(bp),
                                  .kind   = EEP_BOOTSTRAP_FILE,
                                  .rank   = rank,
                                  .nranks = o->nranks,
                                  .path   = dir };
    eep_bootstrap_t       *bs = NULL;
    int                    rc;

    if (eep_bootstrap_create(dir != NULL ? &bp : NULL, &bs) != EEP_OK) {
        fprintf(stderr, "eep-bench ep: bootstrap failed\n");
        return 1;
    }
    rc = rank_main(o, bs);
    eep_bootstrap_destroy(bs);
    return rc;
}

int eep_bench_ep_main(int argc, char **argv)
{
    bench_opts_t o;
    char         dir[] = "/tmp/eep-bench-XXXXXX";
    pid_t        pids[EEP_BL_MAX_WORLD];
    int          r, rc, worst = 0;

    rc = eep_bench_ep_parse_opts(argc, argv, &o);
    if (rc != 0) {
        return rc > 0 ? 0 : 2;
    }
    if (o.nranks <= 0) {
        return rank_run(&o, -1, NULL);
    }
    if (o.nranks > EEP_BL_MAX_WORLD || mkdtemp(dir) == NULL) {
        fprintf(stderr, "eep-bench ep: --nranks must be 1..%d (and /tmp writable)\n",
                EEP_BL_MAX_WORLD);
        return 2;
    }
    fflush(NULL);
    /* Fork before anything touches CUDA: a child must not inherit a driver state. */
    for (r = 0; r < o.nranks; r++) {
        pids[r] = fork();
        if (pids[r] == 0) {
            _exit(rank_run(&o, r, dir));
        }
        if (pids[r] < 0) {
            perror("fork");
            o.nranks = r;
            worst    = 1;
            break;
        }
    }
    for (r = 0; r < o.nranks; r++) {
        int st = 0;

        if (waitpid(pids[r], &st, 0) < 0 || !WIFEXITED(st)) {
            worst = 1;
        } else if (WEXITSTATUS(st) != 0 && (worst == 0 || worst == 77)) {
            worst = WEXITSTATUS(st);
        }
    }
    remove_tree(dir); /* the bootstrap's files */
    return worst;
}
