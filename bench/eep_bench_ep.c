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
 */
#include "eep_bench_ep.h"
#include "eep_bench_stats.h"

#include <dlfcn.h>
#include <getopt.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <ftw.h>
#include <time.h>
#include <unistd.h>

#include "eep/eep.h"
#include "elastic/ep/ep_handle.h"
#include "elastic/ep/ep_knobs.h"
#include "elastic/ep/ep_sm_model.h"
#include "util/config.h"
#include "util/log.h"
#include "elastic/gpu/nccl_util.h"
#include "bench/kernels/baseline_params.h"
#include "kernels/ep/ep_params.h"
#include "tests/common/ep_reference.h"

static const eep_ep_config_t *eep_bench_ep_knobs(void);

typedef struct {
    int               nranks;   /* > 0: fork this many local ranks */
    int               baseline; /* --baseline nccl */
    int               check;
    int               ours;       /* run eep_dispatch/eep_combine (default; --no-ours skips) */
    eep_ep_mode_t     mode;       /* of ours: --mode cpu-sync|no-cpu-sync|cached */
    int               num_sms;    /* of ours: the SM budget of this run (0: the whole device) */
    int               budgets[8]; /* --num-sms B[,B...]: one row of ours per budget */
    int               num_budgets;
    int               skip_pad; /* of ours: --skip-padding-x (padding rows' x left as it was) */
    eep_ep_layout_t   layout;   /* of ours: --layout expert|rank */
    int               iters, warmup;
    uint64_t          seed;
    const char       *gating; /* random, masked, hotspot, hotspot-only, silent, masked-rank, t1 */
    eep_ep_shape_t    shape;
    int               tokens; /* --tokens: tokens per rank (shape.max_tokens unless --max-tokens) */
    int               max_tokens; /* --max-tokens: the buffers' max_tokens_per_rank, or 0 */
    eep_index_dtype_t idx_dtype;
} bench_opts_t;

/* Per-rank results, all-gathered to rank 0. */
typedef struct {
    double  dispatch_us, combine_us;
    double  dispatch_bytes, combine_bytes; /* to other ranks, per call */
    double  recv_bytes; /* received-token bytes (hidden + scales), local included, per call */
    int     sms;        /* sending SMs of ours (0: not ours) */
    int     copy_sms;   /* its copying SMs */
    int     budget;     /* its SM budget (0: the whole device) */
    double  dispatch_hbm, combine_hbm; /* the fewest HBM bytes each moves on this rank */
    double  hbm_gbps;                  /* this rank's device-to-device copy rate, same run */
    double  graph_dispatch_us, graph_combine_us; /* ours, one call per CUDA graph replay */
    double  graph_pair_us; /* ours, per dispatch+combine pair, GRAPH_PAIRS pairs per graph */
    int64_t errors;
    int     ran;
    char    why[96]; /* when not run */
} bench_result_t;

static void usage(FILE *out)
{
    fprintf(out,
            "usage: eep-bench ep [options]\n"
            "  --nranks N          fork N local ranks (one GPU each); else one rank of a job\n"
            "  --baseline nccl     also run the NCCL baseline (grouped ncclSend/ncclRecv)\n"
            "  --tokens T          max_tokens_per_rank and tokens per rank (4096)\n"
            "  --max-tokens M      max_tokens_per_rank M >= T instead (the T column is T)\n"
            "  --hidden H          (7168)\n"
            "  --topk K            (8)\n"
            "  --experts E         (256)\n"
            "  --align A           expert_alignment (128)\n"
            "  --dtype bf16|fp8    (bf16)\n"
            "  --index int32|int64 topk_idx type (int64)\n"
            "  --gating G          random, masked, hotspot, hotspot-only, silent, masked-rank, t1\n"
            "  --mode M            ours: cpu-sync, no-cpu-sync (default) or cached\n"
            "  --no-ours           skip eep_dispatch/eep_combine (baseline only)\n"
            "  --num-sms B[,B...]  SM budgets of ours, a row each (0: the whole device, the\n"
            "                      bandwidth model's split; default 0)\n"
            "  --trace             print where ours' last dispatch and combine spent their time\n"
            "  --skip-padding-x    ours leaves padding rows' x and scales unwritten\n"
            "  --layout L          ours: expert (expert-major, default) or rank (rank-major)\n"
            "  --iters N           timed iterations (20); --warmup N (5)\n"
            "  --seed S            (1); --no-check skips the CPU reference\n");
}

static int parse_opts(int argc, char **argv, bench_opts_t *o)
{
    static const struct option longopts[] = {
        { "nranks", required_argument, NULL, 'n' },
        { "baseline", required_argument, NULL, 'b' },
        { "tokens", required_argument, NULL, 't' },
        { "hidden", required_argument, NULL, 'H' },
        { "topk", required_argument, NULL, 'k' },
        { "experts", required_argument, NULL, 'e' },
        { "align", required_argument, NULL, 'a' },
        { "dtype", required_argument, NULL, 'd' },
        { "index", required_argument, NULL, 'x' },
        { "gating", required_argument, NULL, 'g' },
        { "iters", required_argument, NULL, 'i' },
        { "warmup", required_argument, NULL, 'w' },
        { "seed", required_argument, NULL, 's' },
        { "no-check", no_argument, NULL, 'C' },
        { "mode", required_argument, NULL, 'm' },
        { "no-ours", no_argument, NULL, 'O' },
        { "num-sms", required_argument, NULL, 'S' },
        { "trace", no_argument, NULL, 'T' },
        { "skip-padding-x", no_argument, NULL, 'P' },
        { "max-tokens", required_argument, NULL, 'M' },
        { "layout", required_argument, NULL, 'L' },
        { "help", no_argument, NULL, 'h' },
        { NULL, 0, NULL, 0 },
    };
    int c;

    memset(o, 0, sizeof(*o));
    o->check     = 1;
    o->ours      = 1;
    o->mode      = EEP_EP_MODE_NO_CPU_SYNC;
    o->iters     = 20;
    o->warmup    = 5;
    o->seed      = 1;
    o->gating    = "random";
    o->shape     = eep_ep_shape_product(0); /* world: --nranks */
    o->idx_dtype = EEP_INDEX_INT64;
    optind       = 1;
    while ((c = getopt_long(argc, argv, "h", longopts, NULL)) != -1) {
        switch (c) {
        case 'n':
            o->nranks = atoi(optarg);
            break;
        case 'b':
            if (strcmp(optarg, "nccl") != 0) {
                fprintf(stderr, "eep-bench ep: unknown baseline '%s' (only nccl)\n", optarg);
                return -1;
            }
            o->baseline = 1;
            break;
        case 't':
            o->tokens = atoi(optarg);
            break;
        case 'M':
            o->max_tokens = atoi(optarg);
            break;
        case 'H':
            o->shape.hidden = atoi(optarg);
            break;
        case 'k':
            o->shape.num_topk = atoi(optarg);
            break;
        case 'e':
            o->shape.num_experts = atoi(optarg);
            break;
        case 'a':
            o->shape.alignment = atoi(optarg);
            break;
        case 'd':
            if (strcmp(optarg, "bf16") == 0) {
                o->shape.dtype = EEP_DTYPE_BF16;
            } else if (strcmp(optarg, "fp8") == 0) {
                o->shape.dtype = EEP_DTYPE_FP8_E4M3;
            } else {
                fprintf(stderr, "eep-bench ep: --dtype is bf16 or fp8\n");
                return -1;
            }
            break;
        case 'x':
            o->idx_dtype = strcmp(optarg, "int32") == 0 ? EEP_INDEX_INT32 : EEP_INDEX_INT64;
            break;
        case 'g':
            o->gating = optarg;
            break;
        case 'i':
            o->iters = atoi(optarg);
            break;
        case 'w':
            o->warmup = atoi(optarg);
            break;
        case 's':
            o->seed = strtoull(optarg, NULL, 0);
            break;
        case 'C':
            o->check = 0;
            break;
        case 'O':
            o->ours = 0;
            break;
        case 'S': {
            char *p = optarg, *end;

            o->num_budgets = 0;
            do {
                long v = strtol(p, &end, 10);

                if (end == p || v < 0 || v == 1 || v > 1024 || o->num_budgets == 8 ||
                    (*end != ',' && *end != '\0')) {
                    fprintf(stderr,
                            "eep-bench ep: --num-sms takes up to 8 budgets, each 0 or "
                            "2..1024, comma-separated (got '%s')\n",
                            optarg);
                    return -1;
                }
                o->budgets[o->num_budgets++] = (int)v;
                p                            = end + 1;
            } while (*end == ',');
            break;
        }
        case 'T': /* read when ours' runtime starts */
            setenv("EEP_EP_TRACE", "1", 1);
            break;
        case 'P':
            o->skip_pad = 1;
            break;
        case 'L':
            if (strcmp(optarg, "expert") == 0) {
                o->layout = EEP_EP_LAYOUT_EXPERT_MAJOR;
            } else if (strcmp(optarg, "rank") == 0) {
                o->layout = EEP_EP_LAYOUT_RANK_MAJOR;
            } else {
                fprintf(stderr, "eep-bench ep: --layout is expert or rank\n");
                return -1;
            }
            break;
        case 'm':
            if (strcmp(optarg, "cpu-sync") == 0) {
                o->mode = EEP_EP_MODE_CPU_SYNC;
            } else if (strcmp(optarg, "no-cpu-sync") == 0) {
                o->mode = EEP_EP_MODE_NO_CPU_SYNC;
            } else if (strcmp(optarg, "cached") == 0) {
                o->mode = EEP_EP_MODE_CACHED;
            } else {
                fprintf(stderr, "eep-bench ep: --mode is cpu-sync, no-cpu-sync or cached\n");
                return -1;
            }
            break;
        case 'h':
            usage(stdout);
            return 1;
        default:
            usage(stderr);
            return -1;
        }
    }
    if (o->num_budgets == 0) {
        o->num_budgets = 1; /* budgets[0] = 0: the whole device */
    }
    if (optind != argc || o->iters < 1 || o->warmup < 0) {
        usage(stderr);
        return -1;
    }
    if (o->tokens > 0) {
        o->shape.max_tokens = o->tokens;
    } else {
        o->tokens = o->shape.max_tokens;
    }
    if (o->max_tokens != 0) {
        if (o->max_tokens < o->tokens) {
            fprintf(stderr, "eep-bench ep: --max-tokens %d is below --tokens %d\n", o->max_tokens,
                    o->tokens);
            return -1;
        }
        o->shape.max_tokens = o->max_tokens;
    }
    return 0;
}

static int gen_from_opts(const bench_opts_t *o, eep_ref_gen_t *gen)
{
    eep_ref_gen_init(gen, o->seed);
    if (o->tokens < o->shape.max_tokens) {
        gen->num_tokens = o->tokens; /* --max-tokens: buffers larger than the call */
    }
    if (strcmp(o->gating, "random") == 0) {
        return 0;
    }
    if (strcmp(o->gating, "masked") == 0) {
        gen->masked_fraction = 0.2;
    } else if (strcmp(o->gating, "hotspot") == 0) {
        gen->hotspot_expert = 0;
    } else if (strcmp(o->gating, "hotspot-only") == 0) {
        gen->hotspot_expert = 0;
        gen->hotspot_only   = 1;
    } else if (strcmp(o->gating, "silent") == 0) {
        gen->silent_rank = 0;
    } else if (strcmp(o->gating, "masked-rank") == 0) {
        gen->masked_rank = 0;
    } else if (strcmp(o->gating, "t1") == 0) {
        gen->num_tokens = 1;
    } else {
        fprintf(stderr, "eep-bench ep: unknown gating '%s'\n", o->gating);
        return -1;
    }
    return 0;
}

/* Expert outputs: a function of (source rank, source token, expert, channel), so any correct
   layout gives the same y; padding rows are NaN, which combine must never read.  One hash per
   row picks a start and an odd stride into a table of random bf16 values: cheap enough that the
   CPU reference does not eat GPU-machine time. */
#define Y_TABLE 4096
static uint16_t y_table[Y_TABLE];

static void y_table_init(void)
{
    uint64_t st = 0x5eed;
    int      i;

    for (i = 0; i < Y_TABLE; i++) {
        y_table[i] = eep_ref_f32_to_bf16(
            (float)(eep_ref_rand(&st) >> 40) * (1.0f / 16777216.0f) * 4.0f - 2.0f);
    }
}

static void y_row(int src, int t, int expert, int hidden, uint16_t *row)
{
    uint64_t st  = ((uint64_t)src << 48) ^ ((uint64_t)t << 16) ^ (uint64_t)expert;
    uint64_t key = eep_ref_rand(&st);
    uint32_t off = (uint32_t)key % Y_TABLE, stride = (uint32_t)(key >> 32) | 1u;
    int      h;

    for (h = 0; h < hidden; h++) {
        row[h] = y_table[(off + (uint32_t)h * stride) % Y_TABLE];
    }
}

static uint16_t *make_y(const eep_ep_shape_t *s, const eep_ref_recv_t *r, int rank)
{
    size_t    H = (size_t)s->hidden;
    uint16_t *y = malloc(((size_t)r->num_rows + 1) * H * sizeof(uint16_t));
    int64_t   row;
    size_t    h;

    if (y == NULL) {
        return NULL;
    }
    for (row = 0; row < r->num_rows; row++) {
        if (r->src_rank[row] >= 0) {
            int e = r->topk_idx[row * s->num_topk + r->src_lane[row]];

            y_row(r->src_rank[row], r->src_token[row], rank * r->num_local + e, s->hidden,
                  y + (size_t)row * H);
        } else {
            for (h = 0; h < H; h++) {
                y[(size_t)row * H + h] = 0x7fc0;
            }
        }
    }
    return y;
}

/* Count differing elements of size @p elem; print the first few. */
static int64_t diff(const char *what, const void *got, const void *want, size_t n, size_t elem,
                    int rank)
{
    int64_t bad = 0;
    size_t  i;

    for (i = 0; i < n; i++) {
        if (memcmp((const char *)got + i * elem, (const char *)want + i * elem, elem) != 0) {
            if (bad < 3) {
                uint64_t g = 0, w = 0;

                memcpy(&g, (const char *)got + i * elem, elem < 8 ? elem : 8);
                memcpy(&w, (const char *)want + i * elem, elem < 8 ? elem : 8);
                fprintf(stderr, "rank %d: %s[%zu] = 0x%llx, expected 0x%llx\n", rank, what, i,
                        (unsigned long long)g, (unsigned long long)w);
            }
            bad++;
        }
    }
    return bad;
}

#define CU_TRY(_call)                                                                              \
    do {                                                                                           \
        status = eep_status_from_cu((_call), #_call);                                              \
        if (status != EEP_OK) {                                                                    \
            goto out;                                                                              \
        }                                                                                          \
    } while (0)

/* Check the baseline's dispatch outputs against the reference, every element. */
static int64_t check_dispatch(eep_bench_ctx_t *ctx, const eep_ep_shape_t *s, const eep_bl_view_t *v,
                              const eep_ref_recv_t *r, int skip_pad, int rank_major)
{
    /* expert-major: El + 1 offsets; rank-major: world + 1 rows before each source */
    const size_t          n_off = rank_major ? (size_t)s->world + 1 : (size_t)r->num_local + 1;
    const eep_cuda_sym_t *cu    = ctx->cu;
    size_t   rows = (size_t)v->capacity, K = (size_t)s->num_topk, El = (size_t)r->num_local;
    size_t   hb = (size_t)s->hidden * eep_ep_elem_bytes(s->dtype);
    size_t   sb = s->dtype == EEP_DTYPE_FP8_E4M3 ? (size_t)s->hidden / 128 * 4 : 0;
    size_t   nr = (size_t)r->num_rows;
    uint8_t *x = malloc(rows * hb + 1), *sc = malloc(rows * sb + 1), *poison;
    int32_t *idx = malloc(rows * K * 4 + 4), *cnt = malloc(El * 4 + 4), *off = malloc(n_off * 4);
    int32_t *want_off = malloc(n_off * 4);
    float   *wts      = malloc(rows * K * 4 + 4);
    int64_t  bad      = 0;
    size_t   i, big = rows * hb > rows * K * 4 ? rows * hb : rows * K * 4;

    poison = malloc(big + 1);
    if (!x || !sc || !idx || !cnt || !off || !want_off || !wts || !poison) {
        bad = -1;
        goto out;
    }
    memset(poison, 0xa5, big + 1);
    if (cu->cuMemcpyDtoH(x, v->recv_x, rows * hb) != CUDA_SUCCESS ||
        (sb && cu->cuMemcpyDtoH(sc, v->recv_x_scales, rows * sb) != CUDA_SUCCESS) ||
        cu->cuMemcpyDtoH(idx, v->recv_topk_idx, rows * K * 4) != CUDA_SUCCESS ||
        cu->cuMemcpyDtoH(wts, v->recv_topk_weights, rows * K * 4) != CUDA_SUCCESS ||
        cu->cuMemcpyDtoH(cnt, v->expert_counts, El * 4) != CUDA_SUCCESS ||
        cu->cuMemcpyDtoH(off, v->expert_offsets, n_off * 4) != CUDA_SUCCESS) {
        bad = -1;
        goto out;
    }
    for (i = 0; i < n_off; i++) {
        want_off[i] = (int32_t)r->expert_offsets[i];
    }
    bad += diff("expert_counts", cnt, r->expert_counts, El, 4, ctx->rank);
    bad += diff("expert_offsets", off, want_off, n_off, 4, ctx->rank);
    if (skip_pad) {
        /* padding rows must still hold the poison: nothing was written there */
        for (i = 0; i < nr; i++) {
            const int pad = r->src_rank[i] < 0;

            bad += diff("recv_x", x + i * hb, pad ? poison : r->x + i * hb, hb, 1, ctx->rank);
            bad += diff("recv_x_scales", sc + i * sb,
                        pad ? poison : (const uint8_t *)r->x_scales + i * sb, sb / 4, 4, ctx->rank);
        }
    } else {
        bad += diff("recv_x", x, r->x, nr * hb, 1, ctx->rank);
        bad += diff("recv_x_scales", sc, r->x_scales, nr * sb / 4, 4, ctx->rank);
    }
    bad += diff("recv_topk_idx", idx, r->topk_idx, nr * K, 4, ctx->rank);
    bad += diff("recv_topk_weights", wts, r->topk_weights, nr * K, 4, ctx->rank);
    /* Nothing written past the real rows. */
    bad += diff("recv_x (past the end)", x + nr * hb, poison, (rows - nr) * hb, 1, ctx->rank);
    bad += diff("recv_topk_idx (past the end)", idx + nr * K, poison, (rows - nr) * K, 4,
                ctx->rank);
out:
    free(x);
    free(sc);
    free(idx);
    free(cnt);
    free(off);
    free(want_off);
    free(wts);
    free(poison);
    return bad;
}

static eep_status_t poison_outputs(eep_bench_ctx_t *ctx, const eep_ep_shape_t *s,
                                   const eep_bl_view_t *v)
{
    const eep_cuda_sym_t *cu   = ctx->cu;
    size_t                rows = (size_t)v->capacity, K = (size_t)s->num_topk;
    size_t                El     = (size_t)eep_ep_local_experts(s);
    size_t                hb     = (size_t)s->hidden * eep_ep_elem_bytes(s->dtype);
    size_t                sb     = s->dtype == EEP_DTYPE_FP8_E4M3 ? (size_t)s->hidden / 128 * 4 : 0;
    eep_status_t          status = EEP_OK;

    CU_TRY(cu->cuMemsetD8Async(v->recv_x, 0xa5, rows * hb, ctx->stream));
    if (sb) {
        CU_TRY(cu->cuMemsetD8Async(v->recv_x_scales, 0xa5, rows * sb, ctx->stream));
    }
    CU_TRY(cu->cuMemsetD8Async(v->recv_topk_idx, 0xa5, rows * K * 4, ctx->stream));
    CU_TRY(cu->cuMemsetD8Async(v->recv_topk_weights, 0xa5, rows * K * 4, ctx->stream));
    CU_TRY(cu->cuMemsetD8Async(v->expert_counts, 0xa5, El * 4, ctx->stream));
    CU_TRY(cu->cuMemsetD8Async(v->expert_offsets, 0xa5,
                               ((El > (size_t)s->world ? El : (size_t)s->world) + 1) * 4,
                               ctx->stream));
    CU_TRY(cu->cuMemsetD8Async(v->out, 0xa5, (size_t)s->max_tokens * (size_t)s->hidden * 2,
                               ctx->stream));
out:
    return status;
}

static double now_us(void)
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
static eep_status_t run_baseline(eep_bench_ctx_t *ctx, const bench_opts_t *o,
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
        status = poison_outputs(ctx, s, &v);
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
        res->errors += check_dispatch(ctx, s, &v, r, 0, 0);
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
        res->errors += diff("combine out", out1, out_want, out_bytes / 2, 2, ctx->rank);
        res->errors += diff("combine out (second run)", out2, out1, out_bytes / 2, 2, ctx->rank);
        res->errors += diff("combine out (past the end)", out1 + out_bytes / 2, "\xa5\xa5", 1, 2,
                            ctx->rank);
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
    t0 = now_us();
    for (i = 0; i < o->iters; i++) {
        if ((status = eep_bl_dispatch(bl, din, NULL)) != EEP_OK) {
            goto out;
        }
    }
    CU_TRY(cu->cuStreamSynchronize(ctx->stream));
    res->dispatch_us = (now_us() - t0) / o->iters;
    if ((status = line_up(ctx, y)) != EEP_OK) {
        goto out;
    }
    t0 = now_us();
    for (i = 0; i < o->iters; i++) {
        if ((status = eep_bl_combine(bl, y)) != EEP_OK) {
            goto out;
        }
    }
    CU_TRY(cu->cuStreamSynchronize(ctx->stream));
    res->combine_us = (now_us() - t0) / o->iters;
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

/* Wire bytes this rank sends to other ranks per dispatch, bf16 bytes per combine (the same
   definitions as the baseline's counters). */
/* Bytes of the tokens @p rank receives per dispatch (hidden + scales, its own included). */
/* The rank that holds expert @p e (the shape's placement). */
static int rank_of_expert(const eep_ep_shape_t *s, int64_t e)
{
    int r, slot;

    eep_ep_expert_place(s, (int)e, &r, &slot);
    return r;
}

static double recv_token_bytes(const eep_ep_shape_t *s, const eep_ref_input_t *in, int rank)
{
    eep_ep_wire_t w;
    int           src, t, k;
    double        b = 0;

    eep_ep_wire_layout(s, &w);
    for (src = 0; src < s->world; src++) {
        for (t = 0; t < in[src].num_tokens; t++) {
            for (k = 0; k < s->num_topk; k++) {
                int64_t e = in[src].topk_idx[(size_t)t * (size_t)s->num_topk + (size_t)k];

                if (e >= 0 && rank_of_expert(s, e) == rank) {
                    b += (double)(w.hidden_bytes + w.scale_bytes);
                    break;
                }
            }
        }
    }
    return b;
}

/* The fewest HBM bytes of this rank's dispatch (read x once, write each row of the layout once:
   expert-major, a row per (token, local expert); rank-major, a row per received token) and
   combine (read each row once, write out once): the floor's numerator.  Padding rows are not
   counted (a layout that needs them pays for them above the floor). */
static void hbm_bytes(const eep_ep_shape_t *s, const eep_ref_input_t *in, int rank,
                      eep_ep_layout_t layout, double *d_p, double *c_p)
{
    eep_ep_wire_t w;
    int           src, t, k;
    double        rows = 0, row_b, out_b = (double)s->hidden * 2;

    eep_ep_wire_layout(s, &w);
    row_b = (double)(w.hidden_bytes + w.scale_bytes);
    for (src = 0; src < s->world; src++) {
        for (t = 0; t < in[src].num_tokens; t++) {
            for (k = 0; k < s->num_topk; k++) {
                int64_t e = in[src].topk_idx[(size_t)t * (size_t)s->num_topk + (size_t)k];

                if (e >= 0 && rank_of_expert(s, e) == rank) {
                    rows++;
                    if (layout == EEP_EP_LAYOUT_RANK_MAJOR) {
                        break; /* one row per received token */
                    }
                }
            }
        }
    }
    *d_p = (double)in[rank].num_tokens * row_b + rows * row_b;
    *c_p = rows * out_b + (double)in[rank].num_tokens * out_b;
}

/* Device-to-device copy rate of this GPU (GB/s, bytes read + written), measured now. */
static double measure_hbm_gbps(eep_bench_ctx_t *ctx)
{
    const size_t bytes = (size_t)512 << 20;
    CUdeviceptr  a = 0, b = 0;
    double       t0, best = 0;
    int          i;

    if (ctx->cu->cuMemAlloc(&a, bytes) != CUDA_SUCCESS ||
        ctx->cu->cuMemAlloc(&b, bytes) != CUDA_SUCCESS) {
        goto out;
    }
    for (i = 0; i < 6; i++) {
        t0 = now_us();
        if (ctx->cu->cuMemcpyDtoDAsync(b, a, bytes, ctx->stream) != CUDA_SUCCESS ||
            ctx->cu->cuStreamSynchronize(ctx->stream) != CUDA_SUCCESS) {
            goto out;
        }
        if (i > 0) { /* the first warms up */
            double g = 2.0 * (double)bytes / (now_us() - t0) / 1e3;

            best = g > best ? g : best;
        }
    }
out:
    if (a != 0) {
        ctx->cu->cuMemFree(a);
    }
    if (b != 0) {
        ctx->cu->cuMemFree(b);
    }
    return best;
}

static void traffic(const eep_ep_shape_t *s, const eep_ref_input_t *in, int rank, double *d_p,
                    double *c_p)
{
    eep_ep_wire_t w;
    int           src, t, k, r;
    double        d = 0, c = 0;

    eep_ep_wire_layout(s, &w);
    for (src = 0; src < s->world; src++) {
        for (t = 0; t < in[src].num_tokens; t++) {
            uint64_t hit = 0;

            for (k = 0; k < s->num_topk; k++) {
                int64_t e = in[src].topk_idx[(size_t)t * (size_t)s->num_topk + (size_t)k];

                if (e >= 0) {
                    hit |= 1ull << rank_of_expert(s, e);
                }
            }
            for (r = 0; r < s->world; r++) {
                if (((hit >> r) & 1) && r != src) {
                    if (src == rank) {
                        d += (double)w.token_bytes;
                    }
                    if (r == rank) {
                        c += (double)s->hidden * 2;
                    }
                }
            }
        }
    }
    *d_p = d;
    *c_p = c;
}

/* eep_dispatch/eep_combine on this rank, over a runtime that adopts the benchmark's
   communicator: check, then time.  Whatever stops it is said in res->why. */
/*
 * --trace: for the last dispatch and combine, per phase stamp k (kernels/ep/dispatch.cuh,
 * eep_epk_stamp) and block group, the earliest / latest block in us after the first block's
 * phase 0; first, when the blocks began and left griddepcontrol.wait (negative: before that).
 * Dispatch groups: senders [0, S), the counter S, copy blocks (S, G); combine: all blocks.
 */
/* " | name min-max": the earliest and latest stamp of blocks [lo, hi), st[b * stride] (0: none),
   in us after @p t0; nothing when no block has one. */
static void print_span(const uint64_t *st, int stride, int lo, int hi, uint64_t t0,
                       const char *name)
{
    double mn = 1e30, mx = -1e30;
    int    found = 0, b;

    for (b = lo; b < hi; b++) {
        if (st[(size_t)b * stride] != 0) {
            double us = (double)(int64_t)(st[(size_t)b * stride] - t0) / 1e3;

            mn    = us < mn ? us : mn;
            mx    = us > mx ? us : mx;
            found = 1;
        }
    }
    if (found) {
        printf(" | %s %.1f-%.1f", name, mn, mx);
    }
}

static void print_trace(eep_runtime_t *rt, int rank, int S, int G)
{
    static uint64_t    st[EEP_EPK_TRACE_WORDS];
    static const char *dnames[8] = { "start",  "counted", "sent",    "counts in",
                                     "layout", "padding", "records", "end" };
    static const char *cnames[8] = { "start", "expert side", "source side", "handshake",
                                     "-",     "-",           "-",           "end" };
    int                which, g, k, b;

    for (which = 0; which < 2; which++) {
        uint64_t t0 = UINT64_MAX;

        if (eep_ep_trace_copy(rt, which, st, EEP_EPK_TRACE_WORDS) != EEP_OK) {
            return;
        }
        for (b = 0; b < G; b++) {
            if (st[b * 8] != 0 && st[b * 8] < t0) {
                t0 = st[b * 8];
            }
        }
        for (g = 0; g < (which == 0 ? 3 : 1); g++) {
            int lo = which == 1 ? 0 : g == 0 ? 0 : g == 1 ? S : S + 1;
            int hi = which == 1 ? G : g == 0 ? S : g == 1 ? S + 1 : G;

            printf("trace rank %d %s %-8s", rank, which == 0 ? "dispatch" : "combine ",
                   which == 1 ? "all"
                   : g == 0   ? "senders"
                   : g == 1   ? "counter"
                              : "copiers");
            for (k = 0; k < 2; k++) {
                print_span(st + EEP_EPK_TRACE_LAUNCH + k, 2, lo, hi, t0,
                           k == 0 ? "began" : "waited");
            }
            for (k = 0; k < 8; k++) {
                print_span(st + k, 8, lo, hi, t0, which == 0 ? dnames[k] : cnames[k]);
            }
            printf("\n");
        }
    }
    fflush(stdout);
}

/* Driver entry points for graphs (not in libeep's symbol table: only the bench needs them). */
typedef CUresult (*bench_begin_capture_fn)(CUstream, CUstreamCaptureMode);
typedef CUresult (*bench_end_capture_fn)(CUstream, CUgraph *);
typedef CUresult (*bench_instantiate_fn)(CUgraphExec *, CUgraph, unsigned long long);
typedef CUresult (*bench_graph_launch_fn)(CUgraphExec, CUstream);
typedef CUresult (*bench_graph_exec_destroy_fn)(CUgraphExec);
typedef CUresult (*bench_graph_destroy_fn)(CUgraph);

#define GRAPH_BATCHES 3
#define GRAPH_PAIRS   8 /* pairs in the pair graph: a decode step's MoE layers, in a row */

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
            t0     = now_us();
            for (i = 0; i < iters && status == EEP_OK; i++) {
                status = eep_status_from_cu(launch(ge, ctx->stream), "cuGraphLaunch");
            }
            if (status == EEP_OK) {
                status = eep_runtime_sync(rt, ctx->stream);
            }
            batch_us[b] = (now_us() - t0) / iters / n;
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

static eep_status_t run_ours(eep_bench_ctx_t *ctx, const bench_opts_t *o, const eep_ref_input_t *in,
                             const eep_ref_recv_t *recv, uint16_t *const *y_host,
                             const uint16_t *out_want, const eep_bench_inputs_t *din,
                             bench_result_t *res)
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
    int                   i;
    double                t0;

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

    if ((status = poison_outputs(ctx, s, &v)) != EEP_OK) {
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
        if ((status = poison_outputs(ctx, s, &v)) == EEP_OK) {
            status = eep_dispatch(rt, &a, &h, ctx->stream);
        }
    }
    if (status != EEP_OK || (status = eep_runtime_sync(rt, ctx->stream)) != EEP_OK) {
        snprintf(res->why, sizeof(res->why), "dispatch: %s", eep_status_string(status));
        goto out;
    }
    if (o->check) {
        const eep_ref_recv_t *r = &recv[ctx->rank];

        res->errors += check_dispatch(ctx, s, &v, r, o->skip_pad,
                                      o->layout == EEP_EP_LAYOUT_RANK_MAJOR);
        if (o->mode == EEP_EP_MODE_CPU_SYNC) {
            res->errors += diff("host_expert_counts", host_counts, r->expert_counts, El, 4,
                                ctx->rank);
            res->errors += diff("num_recv_rows", &num_rows, &r->num_rows, 1, 8, ctx->rank);
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
        res->errors += diff("combine out", out1, out_want, out_bytes / 2, 2, ctx->rank);
        res->errors += diff("combine out (second run)", out2, out1, out_bytes / 2, 2, ctx->rank);
        res->errors += diff("combine out (past the end)", out1 + out_bytes / 2, "\xa5\xa5", 1, 2,
                            ctx->rank);
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
    t0 = now_us();
    for (i = 0; i < o->iters; i++) {
        if ((status = eep_dispatch(rt, &a, &h, ctx->stream)) != EEP_OK) {
            goto out;
        }
    }
    CU_TRY(cu->cuStreamSynchronize(ctx->stream));
    res->dispatch_us = (now_us() - t0) / o->iters;
    if ((status = line_up(ctx, y)) != EEP_OK) {
        goto out;
    }
    t0 = now_us();
    for (i = 0; i < o->iters; i++) {
        if ((status = eep_combine(rt, (const void *)y, h, (void *)v.out, ctx->stream)) != EEP_OK) {
            goto out;
        }
    }
    if ((status = eep_runtime_sync(rt, ctx->stream)) != EEP_OK) {
        goto out;
    }
    res->combine_us = (now_us() - t0) / o->iters;
    if (o->mode != EEP_EP_MODE_CPU_SYNC &&
        (status = graph_times(ctx, rt, &a, &h, y, v.out, o->iters, y, &res->graph_dispatch_us,
                              &res->graph_combine_us, &res->graph_pair_us)) != EEP_OK) {
        goto out;
    }
    print_trace(rt, ctx->rank, h->num_sms, h->num_sms + h->copy_sms);
    traffic(s, in, ctx->rank, &res->dispatch_bytes, &res->combine_bytes);
    hbm_bytes(s, in, ctx->rank, o->layout, &res->dispatch_hbm, &res->combine_hbm);
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

/* The ep knobs as this process sees them (loaded once). */
static const eep_ep_config_t *eep_bench_ep_knobs(void)
{
    static eep_ep_config_t cfg;
    static int             loaded;

    if (!loaded) {
        if (eep_config_load(&eep_ep_knob_table, &cfg) != EEP_OK) {
            memset(&cfg, 0, sizeof(cfg));
        }
        loaded = 1;
    }
    return &cfg;
}

/* The link rate of the floor: EEP_EP_LINK_GBPS when set, else the model's H200 default. */
static double eep_bench_link_gbps(void)
{
    const double g = eep_bench_ep_knobs()->link_gbps;

    return g > 0.0 ? g : EEP_EP_DEFAULT_LINK_GBPS;
}

static void print_row(const char *impl, const bench_opts_t *o, const bench_result_t *all, int world)
{
    double  d = 0, c = 0, db = 0, cb = 0, rb = 0, dh = 0, ch = 0, hbm = 0, link = 0;
    double  d_floor = 0, c_floor = 0;
    int64_t errors = 0;
    int     r, ran = 1, sms = 0, copy = 0, budget = 0;
    char    smsbuf[48], floorbuf[64];

    for (r = 0; r < world; r++) {
        d      = fmax(d, all[r].dispatch_us);
        c      = fmax(c, all[r].combine_us);
        db     = fmax(db, all[r].dispatch_bytes);
        cb     = fmax(cb, all[r].combine_bytes);
        rb     = fmax(rb, all[r].recv_bytes);
        sms    = all[r].sms > sms ? all[r].sms : sms;
        copy   = all[r].copy_sms > copy ? all[r].copy_sms : copy;
        budget = all[r].budget > budget ? all[r].budget : budget;
        dh     = fmax(dh, all[r].dispatch_hbm);
        ch     = fmax(ch, all[r].combine_hbm);
        hbm    = r == 0 || all[r].hbm_gbps < hbm ? all[r].hbm_gbps : hbm;
        errors += all[r].errors;
        ran &= all[r].ran;
    }
    if (sms > 0 && budget > 0) {
        snprintf(smsbuf, sizeof(smsbuf), "%d: %d+%d", budget, sms, copy);
    } else if (sms > 0) {
        snprintf(smsbuf, sizeof(smsbuf), "all: %d+%d", sms, copy);
    } else {
        snprintf(smsbuf, sizeof(smsbuf), "-");
    }
    /* The floor: link bytes at the link's rate or HBM bytes at the copy rate measured in this
       run, whichever takes longer (RESULTS tables state both rates). */
    link = eep_bench_link_gbps();
    if (hbm > 0 && dh > 0) {
        d_floor = fmax(dh / hbm / 1e3, world > 1 ? db / link / 1e3 : 0.0);
        c_floor = fmax(ch / hbm / 1e3, world > 1 ? cb / link / 1e3 : 0.0);
    }
    if (!ran) {
        const char *why = "see the log";

        for (r = 0; r < world; r++) {
            if (all[r].why[0] != '\0') {
                why = all[r].why;
                break;
            }
        }
        printf("| %-8s | %d | %5d | %5d | %2d | %4d | %-4s | %-12s | not run: %s |\n", impl, world,
               o->tokens, o->shape.hidden, o->shape.num_topk, o->shape.num_experts,
               o->shape.dtype == EEP_DTYPE_FP8_E4M3 ? "fp8" : "bf16", o->gating, why);
        fflush(stdout);
        return;
    }
    printf("| %-8s | %d | %5d | %5d | %2d | %4d | %-4s | %-12s | %9.1f | %7.1f | %9.1f | %7.1f | "
           "%-6s | %7.1f | %-11s | %s |\n",
           impl, world, o->tokens, o->shape.hidden, o->shape.num_topk, o->shape.num_experts,
           o->shape.dtype == EEP_DTYPE_FP8_E4M3 ? "fp8" : "bf16", o->gating, d, db / d / 1e3, c,
           cb / c / 1e3,
           !o->check     ? "skip"
           : errors == 0 ? "ok"
                         : "FAIL",
           rb / d / 1e3, smsbuf,
           d_floor > 0 ? (snprintf(floorbuf, sizeof(floorbuf), "%.1f / %.1f (%.1fx / %.1fx)",
                                   d_floor, c_floor, d / d_floor, c / c_floor),
                          floorbuf)
                       : "-");
    fflush(stdout);
}

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
    if (eep_ep_shape_check(&o.shape, NULL) != EEP_OK || gen_from_opts(&o, &gen) != 0) {
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
        y_table_init();
        for (r = 0; r < ctx.world; r++) {
            y[r] = make_y(&o.shape, &recv[r], r);
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
                    (rm_y[r] = make_y(&o.shape, &rm[r], r)) == NULL ||
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
        double g = measure_hbm_gbps(&ctx);

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
        status = run_baseline(&ctx, &o, in, recv, y, have_ref ? out[ctx.rank] : NULL, &din, &mine);
        mine.recv_bytes = recv_token_bytes(&o.shape, in, ctx.rank);
        mine.hbm_gbps   = hbm_rate;
        hbm_bytes(&o.shape, in, ctx.rank, EEP_EP_LAYOUT_EXPERT_MAJOR, &mine.dispatch_hbm,
                  &mine.combine_hbm);
        if (status != EEP_OK) {
            fprintf(stderr, "rank %d: baseline failed: %s\n", ctx.rank, eep_status_string(status));
            mine.ran = 0;
            mine.errors++;
        }
        if (eep_bootstrap_allgather(bs, &mine, all, sizeof(mine)) != EEP_OK) {
            goto out;
        }
        if (ctx.rank == 0) {
            print_row("nccl", &o, all, ctx.world);
        }
        for (r = 0; r < ctx.world; r++) {
            rc |= all[r].errors != 0 || !all[r].ran;
        }
    }
    for (b = 0; o.ours && b < o.num_budgets; b++) {
        o.num_sms = o.budgets[b];
        memset(&mine, 0, sizeof(mine));
        status = rm != NULL ? run_ours(&ctx, &o, in, rm, rm_y, rm_out[ctx.rank], &din, &mine)
                            : run_ours(&ctx, &o, in, recv, y, have_ref ? out[ctx.rank] : NULL, &din,
                                       &mine);
        mine.recv_bytes = recv_token_bytes(&o.shape, in, ctx.rank);
        mine.hbm_gbps   = hbm_rate;
        if (status != EEP_OK && status != EEP_ERR_UNSUPPORTED) {
            fprintf(stderr, "rank %d: ours failed: %s\n", ctx.rank, eep_status_string(status));
        }
        if (eep_bootstrap_allgather(bs, &mine, all, sizeof(mine)) != EEP_OK) {
            goto out;
        }
        if (ctx.rank == 0) {
            print_row("ours", &o, all, ctx.world);
            if (all[0].graph_dispatch_us > 0) {
                for (r = 0; r < ctx.world; r++) {
                    all[r].dispatch_us = all[r].graph_dispatch_us;
                    all[r].combine_us  = all[r].graph_combine_us;
                }
                print_row("ours/gr", &o, all, ctx.world);
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

    rc = parse_opts(argc, argv, &o);
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
