/*
 * test_jit_launch.c - load and launch JIT kernels on a GPU (skips without a driver).
 *
 * The fill probe is compiled, loaded into the primary context, launched over a poisoned buffer
 * and every element checked (a plain launch, then one with programmatic dependent launch); a
 * second lookup returns the same loaded kernel; a wrong params size is refused before the driver
 * sees it; the NVRTC-built LSA probe and the nvcc-built GIN probe load (their launch needs an
 * NCCL dev comm: make gpu-check's job).
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include "elastic/gpu/cuda_sym.h"
#include "elastic/jit/jit_int.h"
#include "kernels/probe/fill_probe.cuh"
#include "tests/common/jit_test_util.h"

static void test_fill_launch(void **state)
{
    eep_jit_spec_t          fill = { .size          = sizeof(fill),
                                     .header        = "kernels/probe/fill_probe.cuh",
                                     .function      = "eep_fill_probe_body",
                                     .template_args = "3u",
                                     .param_type    = "eep_fill_probe_params_t",
                                     .launch_bounds = 256 };
    eep_jit_spec_t          lsa  = { .size          = sizeof(lsa),
                                     .header        = "kernels/probe/lsa_probe.cuh",
                                     .function      = "eep_lsa_probe_body",
                                     .template_args = "1",
                                     .param_type    = "eep_lsa_probe_params_t",
                                     .launch_bounds = 256 };
    eep_jit_spec_t          gin  = { .size          = sizeof(gin),
                                     .header        = "kernels/probe/gin_probe.cuh",
                                     .function      = "eep_gin_probe_body",
                                     .template_args = "0",
                                     .param_type    = "eep_gin_probe_params_t",
                                     .needs_gin     = 1 };
    const eep_cuda_sym_t   *cu;
    eep_fill_probe_params_t p;
    eep_jit_kernel_t       *k1 = NULL, *k2 = NULL, *kl = NULL, *kg = NULL;
    eep_jit_params_t        params;
    eep_jit_t              *jit;
    char                   *cache;
    CUdeviceptr             d;
    CUcontext               ctx;
    CUdevice                dev;
    unsigned int           *host, i, bad = 0;
    const unsigned int      n = 1u << 20;

    (void)state;
    assert_int_equal(eep_cuda_sym_driver(&cu), EEP_OK); /* main() skipped without one */
    eep_log_set_hook(jt_hook, NULL);
    cache  = jt_mkdtemp("jit-launch");
    params = (eep_jit_params_t){ .size = sizeof(params), .cache_dir = cache };
    assert_int_equal(eep_jit_create(&params, &jit), EEP_OK);

    assert_int_equal(cu->cuCtxSetCurrent(NULL), CUDA_SUCCESS);
    jt_hook_reset();
    assert_int_equal(eep_jit_get_kernel(jit, &fill, &k1), EEP_ERR_INVALID_ARG); /* no context */
    assert_non_null(strstr(jt_hook_last, "no current CUDA context"));

    assert_int_equal(cu->cuDeviceGet(&dev, 0), CUDA_SUCCESS);
    assert_int_equal(cu->cuDevicePrimaryCtxRetain(&ctx, dev), CUDA_SUCCESS);
    assert_int_equal(cu->cuCtxSetCurrent(ctx), CUDA_SUCCESS);
    assert_int_equal(eep_jit_get_kernel(jit, &fill, &k1), EEP_OK);
    assert_int_equal(eep_jit_get_kernel(jit, &fill, &k2), EEP_OK);
    assert_ptr_equal(k1, k2);

    host = malloc(n * sizeof(*host));
    assert_non_null(host);
    assert_int_equal(cu->cuMemAlloc(&d, n * sizeof(*host)), CUDA_SUCCESS);
    assert_int_equal(cu->cuMemsetD32(d, 0xdeadbeefu, n), CUDA_SUCCESS);
    p = (eep_fill_probe_params_t){ .out = d, .n = n, .seed = 7 };
    if (k1->param_size != 0) {
        assert_int_equal(k1->param_size, sizeof(p));
        assert_int_equal(eep_jit_launch(k1, 1, 32, 0, NULL, &p, sizeof(p) - 4),
                         EEP_ERR_INVALID_ARG);
    }
    assert_int_equal(eep_jit_launch(k1, 132, 256, 0, NULL, &p, sizeof(p)), EEP_OK);
    assert_int_equal(cu->cuCtxSynchronize(), CUDA_SUCCESS);
    assert_int_equal(cu->cuMemcpyDtoH(host, d, n * sizeof(*host)), CUDA_SUCCESS);
    for (i = 0; i < n; i++) {
        bad += host[i] != 7u * 3u + i;
    }
    assert_int_equal(bad, 0);

    /* the same fill with programmatic dependent launch (cuLaunchKernelEx), after a plain one */
    p.seed = 11;
    assert_int_equal(cu->cuMemsetD32(d, 0xdeadbeefu, n), CUDA_SUCCESS);
    assert_int_equal(eep_jit_launch_ex(NULL, 1, 32, 0, NULL, &p, sizeof(p), EEP_JIT_LAUNCH_PDL),
                     EEP_ERR_INVALID_ARG);
    assert_int_equal(eep_jit_launch_ex(k1, 132, 256, 0, NULL, &p, sizeof(p), EEP_JIT_LAUNCH_PDL),
                     EEP_OK);
    assert_int_equal(cu->cuCtxSynchronize(), CUDA_SUCCESS);
    assert_int_equal(cu->cuMemcpyDtoH(host, d, n * sizeof(*host)), CUDA_SUCCESS);
    for (i = 0, bad = 0; i < n; i++) {
        bad += host[i] != 11u * 3u + i;
    }
    assert_int_equal(bad, 0);

    assert_int_equal(eep_jit_get_kernel(jit, &lsa, &kl), EEP_OK);
    assert_int_equal(eep_jit_get_kernel(jit, &gin, &kg), EEP_OK);
    assert_ptr_not_equal(kl, kg);
    if (kl->param_size != 0) {
        printf("lsa probe params: %zu bytes\n", kl->param_size);
    }

    eep_jit_destroy(jit);
    assert_int_equal(cu->cuMemFree(d), CUDA_SUCCESS);
    assert_int_equal(cu->cuDevicePrimaryCtxRelease(dev), CUDA_SUCCESS);
    free(host);
    jt_rm_rf(cache);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_fill_launch),
    };

    const eep_cuda_sym_t *cu;

    eep_log_set_level(EEP_LOG_LEVEL_WARN);
    if (eep_cuda_sym_driver(&cu) != EEP_OK) {
        printf("skip: no CUDA driver or device on this machine\n");
        return 77;
    }
    return cmocka_run_group_tests(tests, NULL, NULL);
}
