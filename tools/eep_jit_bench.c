/*
 * eep_jit_bench.c - eep-jit-bench: how long the JIT takes, cold and warm, per backend.
 *
 *   eep-jit-bench [--cache DIR] [--reps N] [--gpu] [--only NAME] [--version]
 *
 * With a fresh temp cache (default) each kernel is compiled once (cold: key + compile + store),
 * then looked up N times (warm: key + read + checksum; median reported).  Run twice with the same
 * --cache to see a fresh process's warm start.  --gpu also loads each kernel into device 0's
 * primary context (first get_kernel, then the median of N repeated lookups) and launches the fill
 * probe over a poisoned buffer, checking every element.  The EP pair is compiled for 2 ranks and
 * then for 1 (a survivor's shrink); with EEP_JIT_PCH=1 (default) every compile after the first
 * loads NVRTC's precompiled shared headers, so compare a run with EEP_JIT_PCH=0.  --only runs the
 * cases whose name starts with NAME ("lsa probe / nvrtc": one small compile, what the install test
 * uses to show that an installed tool compiles from the installed kernel sources).
 */
#include <getopt.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "eep/version.h"
#include "util/clock.h"
#include "elastic/gpu/cuda_sym.h"
#include "elastic/ep/ep_kernels.h"
#include "elastic/ep/ep_layout.h"
#include "util/log.h"
#include "kernels/ep/ep_params.h"
#include "kernels/probe/fill_probe.cuh"

typedef struct {
    const char    *name;
    eep_jit_spec_t spec;
    /* > 0: an EP kernel for this many ranks, its spec made by eep_ep_kernel_spec as elastic/ep/ep.c
       makes it (bench_shape, no CPU sync), combine or dispatch */
    int ep_world, ep_combine;
} eep_jit_bench_case_t;

static int eep_jit_bench_cmp(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;

    return x < y ? -1 : x > y;
}

static double eep_jit_bench_median(double *v, int n)
{
    qsort(v, (size_t)n, sizeof(*v), eep_jit_bench_cmp);
    return n % 2 ? v[n / 2] : (v[n / 2 - 1] + v[n / 2]) / 2;
}

static int eep_jit_bench_fill(eep_jit_t *jit, const eep_jit_spec_t *spec)
{
    const unsigned int      n = 1u << 22;
    const eep_cuda_sym_t   *cu;
    eep_fill_probe_params_t p;
    eep_jit_kernel_t       *k;
    unsigned int           *host, i, bad = 0;
    CUdeviceptr             d;

    if (eep_cuda_sym_driver(&cu) != EEP_OK || eep_jit_get_kernel(jit, spec, &k) != EEP_OK) {
        return -1;
    }
    host = malloc(n * sizeof(*host));
    if (host == NULL || cu->cuMemAlloc(&d, n * sizeof(*host)) != CUDA_SUCCESS) {
        free(host);
        return -1;
    }
    cu->cuMemsetD32(d, 0xdeadbeefu, n);
    p = (eep_fill_probe_params_t){ .out = d, .n = n, .seed = 11 };
    if (eep_jit_launch(k, 264, 256, 0, NULL, &p, sizeof(p)) != EEP_OK ||
        cu->cuCtxSynchronize() != CUDA_SUCCESS ||
        cu->cuMemcpyDtoH(host, d, n * sizeof(*host)) != CUDA_SUCCESS) {
        bad = n;
    }
    for (i = 0; i < n && bad < n; i++) {
        bad += host[i] != 11u * 5u + i;
    }
    cu->cuMemFree(d);
    free(host);
    printf("launch fill probe over %u elements: %s (%u wrong)\n", n, bad == 0 ? "ok" : "WRONG",
           bad);
    return bad == 0 ? 0 : -1;
}

/*
 * A survivor's view of EEP_EP_PREFETCH_SHRINK: the EP pair is built for 6 ranks and its 5-rank
 * variant queued in the background (as elastic/ep/ep.c does); once that is done, what the lookups
 * of the 5-rank pair cost (cache hits), against compiling the 4-rank pair, which nobody queued.
 */
static int eep_jit_bench_shrink(eep_jit_t *jit)
{
    eep_ep_shape_t           shape = eep_ep_shape_product(2); /* bf16 K 8 H 7168 */
    eep_ep_kernel_names_t    names;
    eep_jit_spec_t           spec;
    eep_jit_prefetch_stats_t stats;
    eep_jit_info_t           info;
    double                   t0, built, wait, hit[2] = { 0, 0 }, cold[2] = { 0, 0 };
    int                      c, rc = 0;

    shape.world = 6;
    t0          = eep_clock_ms();
    for (c = 0; c < 2; c++) {
        eep_ep_kernel_spec(c, 32, EEP_EPK_NO_CPU_SYNC, 0, &shape, &names, &spec);
        rc |= eep_jit_compile(jit, &spec, &info) != EEP_OK;
        rc |= eep_ep_prefetch_shrink(jit, c, 32, EEP_EPK_NO_CPU_SYNC, 0, &shape) != EEP_OK;
    }
    built = eep_clock_ms() - t0;
    eep_jit_prefetch_wait(jit, &stats);
    wait = eep_clock_ms() - t0 - built;
    for (shape.world = 5; shape.world >= 4; shape.world--) {
        for (c = 0; c < 2; c++) {
            eep_ep_kernel_spec(c, 32, EEP_EPK_NO_CPU_SYNC, 0, &shape, &names, &spec);
            rc |= eep_jit_compile(jit, &spec, &info) != EEP_OK;
            if (shape.world == 5) {
                hit[c] = info.total_ms;
                rc |= !info.cache_hit;
            } else {
                cold[c] = info.total_ms;
            }
        }
    }
    printf("shrink prefetch (EP pair, bf16 K 8 H 7168): built for 6 ranks in %.0f ms, the 5-rank "
           "pair compiled in the background in %.0f ms more (%lu done, %lu failed); then a "
           "5-rank survivor's lookups: dispatch %.1f ms, combine %.1f ms (cache hits); a 4-rank "
           "pair nobody queued: %.0f + %.0f ms\n",
           built, wait, stats.done, stats.failed, hit[0], hit[1], cold[0], cold[1]);
    return rc;
}

static int eep_jit_bench_usage(FILE *out)
{
    fprintf(out, "usage: eep-jit-bench [--cache DIR] [--reps N] [--gpu] [--only NAME] [--version]\n"
                 "  --cache DIR  the JIT cache to use (default: a fresh temp dir: cold compiles)\n"
                 "  --reps N     warm lookups per kernel (20)\n"
                 "  --gpu        also load each kernel on device 0 and run the fill probe\n"
                 "  --only NAME  only the kernels whose name starts with NAME\n");
    return out == stderr ? 2 : 0;
}

int main(int argc, char **argv)
{
    static const struct option longopts[] = {
        { "cache", required_argument, NULL, 'c' },
        { "reps", required_argument, NULL, 'r' },
        { "gpu", no_argument, NULL, 'g' },
        { "only", required_argument, NULL, 'o' },
        { "version", no_argument, NULL, 'V' },
        { "help", no_argument, NULL, 'h' },
        { NULL, 0, NULL, 0 },
    };
    eep_jit_bench_case_t cases[] = {
        { .name = "lsa probe / nvrtc",
          .spec = { .header        = "kernels/probe/lsa_probe.cuh",
                    .function      = "eep_lsa_probe_body",
                    .template_args = "1",
                    .param_type    = "eep_lsa_probe_params_t",
                    .launch_bounds = 256,
                    .backend       = EEP_JIT_BACKEND_NVRTC } },
        { .name = "lsa probe / nvcc",
          .spec = { .header        = "kernels/probe/lsa_probe.cuh",
                    .function      = "eep_lsa_probe_body",
                    .template_args = "1",
                    .param_type    = "eep_lsa_probe_params_t",
                    .launch_bounds = 256,
                    .backend       = EEP_JIT_BACKEND_NVCC } },
        { .name = "gin probe / nvrtc",
          .spec = { .header        = "kernels/probe/gin_probe.cuh",
                    .function      = "eep_gin_probe_body",
                    .template_args = "0",
                    .param_type    = "eep_gin_probe_params_t",
                    .needs_gin     = 1,
                    .backend       = EEP_JIT_BACKEND_NVRTC } },
        { .name = "gin probe / nvcc",
          .spec = { .header        = "kernels/probe/gin_probe.cuh",
                    .function      = "eep_gin_probe_body",
                    .template_args = "0",
                    .param_type    = "eep_gin_probe_params_t",
                    .needs_gin     = 1,
                    .backend       = EEP_JIT_BACKEND_NVCC } },
        /* The EP pair as elastic/ep/ep.c asks for it (bf16, top-k 8, H 7168, no CPU sync) on 2
         * ranks, then on 1: what a survivor compiles after a shrink, in the same process. */
        { .name = "ep dispatch w2", .ep_world = 2 },
        { .name = "ep combine w2", .ep_world = 2, .ep_combine = 1 },
        { .name = "ep dispatch w1", .ep_world = 1 },
        { .name = "ep combine w1", .ep_world = 1, .ep_combine = 1 },
        { .name = "fill probe / nvrtc",
          .spec = { .header        = "kernels/probe/fill_probe.cuh",
                    .function      = "eep_fill_probe_body",
                    .template_args = "5u",
                    .param_type    = "eep_fill_probe_params_t",
                    .launch_bounds = 256,
                    .backend       = EEP_JIT_BACKEND_NVRTC } },
    };
    const size_t          n_cases = sizeof(cases) / sizeof(cases[0]);
    eep_ep_kernel_names_t ep_names[sizeof(cases) / sizeof(cases[0])]; /* their specs' strings */
    eep_jit_params_t      params = { .size = sizeof(params) };
    const eep_cuda_sym_t *cu     = NULL;
    eep_jit_kernel_t     *k;
    eep_jit_info_t        info;
    eep_status_t          status;
    eep_jit_t            *jit;
    char                  tmpl[] = "/tmp/eep-jit-bench.XXXXXX";
    double               *t, t0, first;
    CUcontext             ctx = NULL;
    CUdevice              dev = 0;
    size_t                c, n_run = 0;
    const char           *only = NULL;
    char                 *end;
    long                  v;
    int                   i, reps = 20, gpu = 0, rc = 0;

    opterr = 0;
    while ((i = getopt_long(argc, argv, "+:h", longopts, NULL)) != -1) {
        switch (i) {
        case 'c':
            params.cache_dir = optarg;
            break;
        case 'r':
            v = strtol(optarg, &end, 10);
            if (*optarg == '\0' || *end != '\0' || v < 1 || v > 1000000) {
                fprintf(stderr,
                        "eep-jit-bench: --reps needs a whole number in [1, 1000000], "
                        "not '%s'\n",
                        optarg);
                return 2;
            }
            reps = (int)v;
            break;
        case 'g':
            gpu = 1;
            break;
        case 'o':
            only = optarg;
            break;
        case 'V':
            printf("eep-jit-bench (ElasticEP) %s\n", eep_version());
            return 0;
        case 'h':
            return eep_jit_bench_usage(stdout);
        case ':':
            fprintf(stderr, "eep-jit-bench: %s needs a value\n", argv[optind - 1]);
            return 2;
        default:
            fprintf(stderr, "eep-jit-bench: unknown option '%s'\n", argv[optind - 1]);
            return eep_jit_bench_usage(stderr);
        }
    }
    if (optind < argc) {
        fprintf(stderr, "eep-jit-bench: unexpected argument '%s'\n", argv[optind]);
        return eep_jit_bench_usage(stderr);
    }
    if ((t = malloc((size_t)reps * sizeof(*t))) == NULL) {
        return 1;
    }
    if (params.cache_dir == NULL && (params.cache_dir = mkdtemp(tmpl)) == NULL) {
        perror("mkdtemp");
        return 1;
    }
    /* The context first: EEP_JIT_ARCH=auto (the default) then compiles for device 0's own arch. */
    if (gpu) {
        if (eep_cuda_sym_driver(&cu) != EEP_OK || cu->cuDeviceGet(&dev, 0) != CUDA_SUCCESS ||
            cu->cuDevicePrimaryCtxRetain(&ctx, dev) != CUDA_SUCCESS ||
            cu->cuCtxSetCurrent(ctx) != CUDA_SUCCESS) {
            fprintf(stderr, "eep-jit-bench: --gpu but no usable GPU\n");
            return 1;
        }
    }
    if (eep_jit_create(&params, &jit) != EEP_OK) {
        return 1;
    }
    printf("cache %s, arch %s, sources %s, %d warm repetitions\n", eep_jit_cache_dir(jit),
           eep_jit_arch(jit), eep_jit_source_root(jit), reps);
    printf("%-20s %-6s %12s %12s %14s", "kernel / backend", "first", "first ms", "compile ms",
           "warm median ms");
    printf(gpu ? " %12s %14s\n" : "\n", "load ms", "lookup med ms");
    for (c = 0; c < n_cases; c++) {
        if (only != NULL && strncmp(cases[c].name, only, strlen(only)) != 0) {
            continue;
        }
        n_run++;
        if (cases[c].ep_world > 0) {
            eep_ep_shape_t shape = eep_ep_shape_product(2);

            shape.world = cases[c].ep_world;
            eep_ep_kernel_spec(cases[c].ep_combine, 32, EEP_EPK_NO_CPU_SYNC, 0, &shape,
                               &ep_names[c], &cases[c].spec);
            cases[c].spec.backend = EEP_JIT_BACKEND_NVRTC;
        }
        cases[c].spec.size = sizeof(cases[c].spec);
        status             = eep_jit_compile(jit, &cases[c].spec, &info);
        if (status != EEP_OK) {
            printf("%-20s %s\n", cases[c].name,
                   status == EEP_ERR_UNSUPPORTED
                       ? "unsupported: NCCL 2.28.9's GIN headers do not compile under NVRTC"
                       : eep_status_string(status));
            rc |= status != EEP_ERR_UNSUPPORTED;
            continue;
        }
        printf("%-20s %-6s %12.1f %12.1f", cases[c].name, info.cache_hit ? "hit" : "cold",
               info.total_ms, info.compile_ms);
        first = info.total_ms;
        for (i = 0; i < reps; i++) {
            status = eep_jit_compile(jit, &cases[c].spec, &info);
            t[i]   = info.total_ms;
            rc |= status != EEP_OK || !info.cache_hit;
        }
        printf(" %14.3f", eep_jit_bench_median(t, reps));
        (void)first;
        if (gpu) {
            t0     = eep_clock_ms();
            status = eep_jit_get_kernel(jit, &cases[c].spec, &k);
            first  = eep_clock_ms() - t0;
            for (i = 0; i < reps && status == EEP_OK; i++) {
                t0     = eep_clock_ms();
                status = eep_jit_get_kernel(jit, &cases[c].spec, &k);
                t[i]   = eep_clock_ms() - t0;
            }
            if (status == EEP_OK) {
                printf(" %12.2f %14.3f", first, eep_jit_bench_median(t, reps));
            } else {
                printf(" load failed: %s", eep_status_string(status));
                rc = 1;
            }
        }
        printf("\n");
    }
    if (only != NULL && n_run == 0) {
        fprintf(stderr, "eep-jit-bench: no kernel's name starts with '%s'\n", only);
        rc = 2;
    }
    if (only == NULL) {
        rc |= eep_jit_bench_shrink(jit);
    }
    if (gpu && only == NULL) {
        rc |= eep_jit_bench_fill(jit, &cases[n_cases - 1].spec) != 0;
    }
    eep_jit_destroy(jit);
    if (ctx != NULL) {
        cu->cuDevicePrimaryCtxRelease(dev);
    }
    free(t);
    return rc;
}
