/*
 * test_ep_jit.c - every variant of the direct-mode dispatch/combine kernels (kernels/ep/
 * dispatch.cuh, combine.cuh) compiles through the JIT with NVRTC, as elastic/ep.c asks for them:
 * index width x mode (x phase for CPU_SYNC's copy kernel), and combine.  Needs NVRTC, not a GPU;
 * skips when NVRTC cannot be loaded.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <cmocka.h>

#include "elastic/cuda_sym.h"
#include "elastic/jit.h"
#include "kernels/ep/ep_params.h"
#include "tests/unit/ep_jit_test_util.h"

static char cache_dir[] = "/tmp/eep-test-ep-jit2-XXXXXX";

static void compile_one(eep_jit_t *jit, const char *header, const char *function,
                        const char *targs)
{
    eep_jit_spec_t spec = {
        .size = sizeof(spec), .header = header, .function = function, .template_args = targs,
        .param_type = "eep_epk_params_t", .launch_bounds = EEP_EPK_THREADS,
        .backend = EEP_JIT_BACKEND_NVRTC,
    };

    ep_jit_compile_check(jit, &spec);
}

static void test_compile_all(void **state)
{
    static const char *const variants[] = { "32, 0, 0", "32, 0, 1", "64, 0, 0", "64, 0, 1",
                                            "32, 1, 0", "64, 1, 0", "32, 2, 0", "64, 2, 0" };
    eep_jit_params_t params = { .size = sizeof(params), .cache_dir = cache_dir };
    eep_jit_t       *jit = NULL;
    size_t           i;

    (void)state;
    assert_int_equal(eep_jit_create(&params, &jit), EEP_OK);
    for (i = 0; i < sizeof(variants) / sizeof(variants[0]); i++) {
        compile_one(jit, "kernels/ep/dispatch.cuh", "eep_ep_dispatch_body", variants[i]);
    }
    compile_one(jit, "kernels/ep/combine.cuh", "eep_ep_combine_body", NULL);
    eep_jit_destroy(jit);
}

int main(void)
{
    const struct CMUnitTest tests[] = { cmocka_unit_test(test_compile_all) };
    int                     rc = ep_jit_test_begin(cache_dir);

    if (rc >= 0) {
        return rc;
    }
    rc = cmocka_run_group_tests(tests, NULL, NULL);
    ep_jit_test_end(cache_dir);
    return rc;
}
