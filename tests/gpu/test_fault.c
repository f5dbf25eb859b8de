/*
 * test_fault.c - one rank never arrives: every other rank's barrier gives up at its deadline,
 * reports EEP_ERR_PEER_TIMEOUT naming that rank within the deadline plus 10%, and the same CUDA
 * context then runs another kernel correctly.
 */
#include <stdint.h>
#include <stdlib.h>

#include "tests/common/gpu_test.h"

#define TIMEOUT_MS 1000
#define PROBE_N    (1u << 20)

typedef struct {
    unsigned int *out;
    unsigned int  n;
    unsigned int  seed;
} eep_probe_params_t; /* tests/gpu/probe_kernel.cuh */

static void run_probe_kernel(const eep_cuda_sym_t *cu)
{
    eep_jit_t         *jit = NULL;
    eep_jit_kernel_t  *k   = NULL;
    eep_jit_spec_t     spec;
    eep_probe_params_t p;
    CUdeviceptr        d;
    unsigned int      *h = malloc(PROBE_N * sizeof(unsigned int));
    unsigned int       i, bad = 0;

    memset(&spec, 0, sizeof(spec));
    spec.size          = sizeof(spec);
    spec.header        = "tests/gpu/probe_kernel.cuh";
    spec.function      = "eep_probe_body";
    spec.param_type    = "eep_probe_params_t";
    spec.launch_bounds = 256;
    GPU_OK(eep_jit_create(NULL, &jit));
    GPU_OK(eep_jit_get_kernel(jit, &spec, &k));
    GPU_OK(eep_status_from_cu(cu->cuMemAlloc(&d, PROBE_N * sizeof(unsigned int)), "cuMemAlloc"));
    GPU_OK(eep_status_from_cu(cu->cuMemsetD32(d, 0xdeadbeef, PROBE_N), "cuMemsetD32"));
    p.out  = (unsigned int *)(uintptr_t)d;
    p.n    = PROBE_N;
    p.seed = 0x5eed0000u + (unsigned)gpu_test_rank;
    GPU_OK(eep_jit_launch(k, 128, 256, 0, NULL, &p, sizeof(p)));
    GPU_OK(eep_status_from_cu(cu->cuCtxSynchronize(), "cuCtxSynchronize"));
    GPU_OK(eep_status_from_cu(cu->cuMemcpyDtoH(h, d, PROBE_N * sizeof(unsigned int)), "DtoH"));
    for (i = 0; i < PROBE_N; i++) {
        bad += h[i] != (p.seed ^ (i * 2654435761u));
    }
    GPU_CHECK(bad == 0, "probe kernel after the fault: %u of %u words wrong", bad, PROBE_N);
    printf("kernel after the fault: %u words checked, %u wrong\n", PROBE_N, bad);
    cu->cuMemFree(d);
    eep_jit_destroy(jit);
    free(h);
}

int main(void)
{
    eep_bootstrap_t      *bs     = gpu_test_bootstrap("test_fault", 2);
    eep_runtime_t        *rt     = gpu_test_runtime(bs, NULL);
    const eep_cuda_sym_t *cu     = gpu_test_cu();
    int                   absent = eep_bootstrap_nranks(bs) - 1;
    eep_barrier_mode_t    mode;

    /* Warm: compile both variants, everyone present. */
    GPU_OK(eep_barrier(rt, EEP_BARRIER_PARALLEL, NULL));
    GPU_OK(eep_barrier(rt, EEP_BARRIER_SEQUENTIAL, NULL));
    GPU_OK(eep_runtime_sync(rt, NULL));
    GPU_OK(eep_bootstrap_barrier(bs));

    for (mode = EEP_BARRIER_PARALLEL; mode <= EEP_BARRIER_SEQUENTIAL; mode++) {
        const char *name = mode ? "sequential" : "parallel";

        if (gpu_test_rank != absent) {
            eep_barrier_opts_t o;
            eep_fault_record_t rec;
            eep_status_t       status;
            double             t0, ms;

            memset(&o, 0, sizeof(o));
            o.size       = sizeof(o);
            o.mode       = mode;
            o.timeout_ms = TIMEOUT_MS;
            t0           = gpu_test_now_ms();
            status       = eep_barrier_ex(rt, &o, NULL);
            GPU_CHECK(status == EEP_OK, "%s: launch: %s", name, eep_status_name(status));
            status = eep_runtime_sync(rt, NULL);
            ms     = gpu_test_now_ms() - t0;
            printf("%s: rank %d missing: %s after %.1f ms (deadline %d ms)\n", name, absent,
                   eep_status_name(status), ms, TIMEOUT_MS);
            GPU_CHECK(status == EEP_ERR_PEER_TIMEOUT, "%s: status %s", name,
                      eep_status_name(status));
            GPU_CHECK(ms >= TIMEOUT_MS * 0.99 && ms <= TIMEOUT_MS * 1.10,
                      "%s: reported after "
                      "%.1f ms, deadline %d ms",
                      name, ms, TIMEOUT_MS);
            GPU_REQUIRE(eep_runtime_fault(rt, &rec) == EEP_OK, "%s: no fault record", name);
            printf("%s: record: phase %d rank %d peer %d expected %llu observed %llu waited "
                   "%.1f ms\n",
                   name, rec.phase, rec.rank, rec.peer, rec.expected, rec.observed,
                   (double)rec.waited_ns / 1e6);
            GPU_CHECK(rec.peer == absent, "%s: record names peer %d, not %d", name, rec.peer,
                      absent);
            GPU_CHECK(rec.rank == gpu_test_rank && rec.phase == EEP_PHASE_BARRIER_LSA &&
                          rec.observed < rec.expected,
                      "%s: record fields", name);
            /* With the flag up, a barrier returns the fault at once instead of launching. */
            GPU_CHECK(eep_barrier(rt, mode, NULL) == EEP_ERR_PEER_TIMEOUT,
                      "%s: barrier after "
                      "the fault",
                      name);
            run_probe_kernel(cu);
            GPU_OK(eep_runtime_clear_fault(rt));
            GPU_CHECK(eep_poll(rt) == EEP_OK, "%s: poll after clear", name);
        }
        /* The absent rank waits here (host only) until the others are done. */
        GPU_OK(eep_bootstrap_barrier(bs));
    }
    /* The barrier counters are now out of step: a real job would rebuild the group.  Abort the
       communicator rather than finalize it. */
    eep_runtime_abort(rt);
    eep_runtime_destroy(rt);
    eep_bootstrap_destroy(bs);
    return gpu_test_finish("test_fault");
}
