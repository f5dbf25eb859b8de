/*
 * test_ep_baseline_jit.c - every kernel of the NCCL baseline (kernels/ep/baseline_*.cuh) compiles
 * through the JIT contract (elastic/jit/jit.h), for both index widths.  Needs NVRTC, not a GPU; skips
 * when NVRTC cannot be loaded.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <cmocka.h>

#include "elastic/gpu/cuda_sym.h"
#include "elastic/jit/jit.h"
#include "bench/kernels/baseline_params.h"
#include "tests/common/ep_jit_test_util.h"

static const struct {
    const char *header, *function, *param_type;
    int         threads, templated;
} kernels[] = {
    { "bench/kernels/baseline_dispatch.cuh", "eep_bl_route_body", "eep_bl_route_params_t", 256, 1 },
    { "bench/kernels/baseline_dispatch.cuh", "eep_bl_scan_body", "eep_bl_scan_params_t", 1024, 0 },
    { "bench/kernels/baseline_dispatch.cuh", "eep_bl_pack_body", "eep_bl_pack_params_t", 256, 1 },
    { "bench/kernels/baseline_dispatch.cuh", "eep_bl_expert_scan_body",
      "eep_bl_expert_scan_params_t", 1024, 0 },
    { "bench/kernels/baseline_dispatch.cuh", "eep_bl_offsets_body", "eep_bl_offsets_params_t", 32,
      0 },
    { "bench/kernels/baseline_dispatch.cuh", "eep_bl_unpack_body", "eep_bl_unpack_params_t", 256,
      0 },
    { "bench/kernels/baseline_dispatch.cuh", "eep_bl_pad_body", "eep_bl_pad_params_t", 256, 0 },
    { "bench/kernels/baseline_combine.cuh", "eep_bl_reduce_body", "eep_bl_reduce_params_t", 256,
      0 },
    { "bench/kernels/baseline_combine.cuh", "eep_bl_sum_body", "eep_bl_sum_params_t", 256, 0 },
};

static char cache_dir[] = "/tmp/eep-test-ep-jit-XXXXXX";

static void test_compile_all(void **state)
{
    eep_jit_params_t params = { .size = sizeof(params), .cache_dir = cache_dir };
    eep_jit_t       *jit    = NULL;
    size_t           i;
    int              w;

    (void)state;
    assert_int_equal(eep_jit_create(&params, &jit), EEP_OK);
    for (i = 0; i < sizeof(kernels) / sizeof(kernels[0]); i++) {
        for (w = 0; w < (kernels[i].templated ? 2 : 1); w++) {
            eep_jit_spec_t spec = {
                .size          = sizeof(spec),
                .header        = kernels[i].header,
                .function      = kernels[i].function,
                .template_args = kernels[i].templated ? (w == 0 ? "32" : "64") : NULL,
                .param_type    = kernels[i].param_type,
                .launch_bounds = kernels[i].threads,
                .backend       = EEP_JIT_BACKEND_NVRTC,
            };

            ep_jit_compile_check(jit, &spec, NULL);
        }
    }
    eep_jit_destroy(jit);
}

int main(void)
{
    const struct CMUnitTest tests[] = { cmocka_unit_test(test_compile_all) };
    int                     rc      = ep_jit_test_begin(cache_dir);

    if (rc >= 0) {
        return rc;
    }
    rc = cmocka_run_group_tests(tests, NULL, NULL);
    ep_jit_test_end(cache_dir);
    return rc;
}
