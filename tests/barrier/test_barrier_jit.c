/*
 * test_barrier_jit.c - every barrier kernel variant compiles without a GPU: the LSA-only ones
 * through NVRTC (the in-process path used at run time), the GIN ones through nvcc (NCCL 2.28.9's
 * GIN headers need it), and NCCL's own LSA barrier used as the benchmark reference.  The GIN
 * variants cannot run on the test machine (no RDMA NIC), so compiling them here is their check.
 * Skips when neither compiler is present.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <cmocka.h>

#include "barrier/barrier_params.h"
#include "elastic/jit/jit.h"
#include "util/log.h"

static eep_jit_t *jit;
static char       cache[] = "/tmp/eep-barrier-jit-XXXXXX";

static int setup(void **state)
{
    eep_jit_params_t p;

    (void)state;
    if (mkdtemp(cache) == NULL) {
        return -1;
    }
    memset(&p, 0, sizeof(p));
    p.size      = sizeof(p);
    p.cache_dir = cache;
    return eep_jit_create(&p, &jit) == EEP_OK ? 0 : -1;
}

static int teardown(void **state)
{
    char cmd[128];

    (void)state;
    eep_jit_destroy(jit);
    snprintf(cmd, sizeof(cmd), "rm -rf '%s'", cache);
    return system(cmd) == 0 ? 0 : -1;
}

static void compile(const char *header, const char *function, const char *args, int gin,
                    eep_jit_backend_t want)
{
    eep_jit_spec_t spec;
    eep_jit_info_t info;
    eep_status_t   status;

    memset(&spec, 0, sizeof(spec));
    spec.size          = sizeof(spec);
    spec.header        = header;
    spec.function      = function;
    spec.template_args = args;
    spec.param_type    = "eep_barrier_params_t";
    spec.launch_bounds = EEP_BARRIER_MAX_THREADS;
    spec.needs_gin     = gin;
    spec.defines       = gin ? "EEP_BARRIER_GIN=1" : NULL;
    status             = eep_jit_compile(jit, &spec, &info);
    if (status != EEP_OK) {
        fail_msg("%s<%s> did not compile: %s\n%s", function, args ? args : "",
                 eep_status_name(status), eep_jit_last_log());
    }
    assert_int_equal(info.backend, want);
}

static void test_lsa_variants_nvrtc(void **state)
{
    (void)state;
    compile("barrier/barrier_kernel.cuh", "eep_barrier_body", "0, false", 0, EEP_JIT_BACKEND_NVRTC);
    compile("barrier/barrier_kernel.cuh", "eep_barrier_body", "1, false", 0, EEP_JIT_BACKEND_NVRTC);
}

static void test_gin_variants_nvcc(void **state)
{
    (void)state;
    compile("barrier/barrier_kernel.cuh", "eep_barrier_body", "0, true", 1, EEP_JIT_BACKEND_NVCC);
    compile("barrier/barrier_kernel.cuh", "eep_barrier_body", "1, true", 1, EEP_JIT_BACKEND_NVCC);
}

static void test_nccl_reference_kernel(void **state)
{
    (void)state;
    compile("bench/kernels/nccl_lsa_barrier.cuh", "eep_bench_nccl_lsa_body", NULL, 0,
            EEP_JIT_BACKEND_NVRTC);
    compile("bench/kernels/barrier_probes.cuh", "eep_bench_barrier_probe_body", "0", 0,
            EEP_JIT_BACKEND_NVRTC);
    compile("bench/kernels/barrier_probes.cuh", "eep_bench_barrier_probe_body", "1", 0,
            EEP_JIT_BACKEND_NVRTC);
    compile("bench/kernels/barrier_probes.cuh", "eep_bench_barrier_probe_body", "2", 0,
            EEP_JIT_BACKEND_NVRTC);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_lsa_variants_nvrtc),
        cmocka_unit_test(test_gin_variants_nvcc),
        cmocka_unit_test(test_nccl_reference_kernel),
    };

    eep_log_set_level(EEP_LOG_LEVEL_ERROR);
    return cmocka_run_group_tests(tests, setup, teardown);
}
