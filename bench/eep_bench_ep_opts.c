/*
 * eep_bench_ep_opts.c - the interface of `eep-bench ep`: its command line in (usage, the options,
 * the gating's generator settings), one table row per implementation out.
 *
 * A row holds the slowest rank's times and rates, every rank's errors summed, and the floor
 * (eep_bench_ep_floor.c) beside the times; a row that did not run says why.
 */
#include "eep_bench_ep_parts.h"

#include <getopt.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

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
            "  --gating G          random, masked, hotspot, hotspot-only, silent, masked-rank,\n"
            "                      dropped (every 5th token to no expert), t1\n"
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

int eep_bench_ep_parse_opts(int argc, char **argv, bench_opts_t *o)
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

int eep_bench_ep_gen_from_opts(const bench_opts_t *o, eep_ref_gen_t *gen)
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
    } else if (strcmp(o->gating, "dropped") == 0) {
        gen->drop_every = 5;
    } else if (strcmp(o->gating, "t1") == 0) {
        gen->num_tokens = 1;
    } else {
        fprintf(stderr, "eep-bench ep: unknown gating '%s'\n", o->gating);
        return -1;
    }
    return 0;
}

void eep_bench_ep_print_row(const char *impl, const bench_opts_t *o, const bench_result_t *all,
                            int world)
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
