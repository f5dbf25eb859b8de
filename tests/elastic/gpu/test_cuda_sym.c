/*
 * test_cuda_sym.c - the CUDA/NVRTC symbol table: not linked, loads lazily, fails with one clear
 * message and the right status, and translates result codes.  CPU-only; on a GPU machine the
 * real driver is checked too.
 */
#include <link.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <string.h>
#include <cmocka.h>

#include "elastic/gpu/cuda_sym.h"
#include "util/log.h"

static int  hook_errors;
static char hook_last[2048];

static void hook(eep_log_level_t level, eep_log_subsys_t subsys, const char *msg, void *arg)
{
    (void)subsys;
    (void)arg;
    if (level == EEP_LOG_LEVEL_ERROR) {
        hook_errors++;
        snprintf(hook_last, sizeof(hook_last), "%s", msg);
    }
}

static void hook_reset(void)
{
    hook_errors  = 0;
    hook_last[0] = '\0';
}

static int find_loaded(struct dl_phdr_info *info, size_t size, void *arg)
{
    (void)size;
    if (strstr(info->dlpi_name, "libcuda.so") != NULL ||
        strstr(info->dlpi_name, "libnvrtc") != NULL) {
        *(int *)arg = 1;
    }
    return 0;
}

/* Runs first: this binary links libeep.a, and nothing has asked for the driver yet. */
static void test_not_linked(void **state)
{
    char  cmd[4200], line[512];
    FILE *p;
    int   loaded = 0, needed = 0, cuda = 0;

    (void)state;
    dl_iterate_phdr(find_loaded, &loaded);
    assert_int_equal(loaded, 0);
#ifdef EEP_TEST_LIBEEP_SO
    snprintf(cmd, sizeof(cmd), "readelf -d '%s' 2>&1", EEP_TEST_LIBEEP_SO);
    p = popen(cmd, "r");
    assert_non_null(p);
    while (fgets(line, sizeof(line), p) != NULL) {
        if (strstr(line, "(NEEDED)") != NULL) {
            needed++;
            cuda += strstr(line, "libcuda") != NULL || strstr(line, "libnvrtc") != NULL;
        }
    }
    assert_int_equal(pclose(p), 0);
    assert_true(needed > 0); /* readelf did read it (libc at least) */
    assert_int_equal(cuda, 0);
#else
    (void)cmd, (void)line, (void)p, (void)needed, (void)cuda;
#endif
}

static void test_no_driver(void **state)
{
    const eep_cuda_sym_t *sym = NULL;

    (void)state;
    eep_cuda_sym_test_override("libeep-no-such-cuda-driver.so.1", NULL);
    hook_reset();
    assert_int_equal(eep_cuda_sym_driver(&sym), EEP_ERR_NO_DEVICE);
    assert_null(sym);
    assert_int_equal(hook_errors, 1);
    assert_non_null(strstr(hook_last, "no CUDA driver"));
    assert_non_null(strstr(hook_last, "libeep-no-such-cuda-driver.so.1"));
    /* Reported once: later calls give the same status without another line. */
    assert_int_equal(eep_cuda_sym_driver(&sym), EEP_ERR_NO_DEVICE);
    assert_int_equal(hook_errors, 1);
    eep_cuda_sym_test_override(NULL, NULL);
}

static void test_no_nvrtc(void **state)
{
    const eep_cuda_sym_t *sym = NULL;

    (void)state;
    eep_cuda_sym_test_override(NULL, "libeep-no-such-nvrtc.so");
    hook_reset();
    assert_int_equal(eep_cuda_sym_nvrtc(&sym), EEP_ERR_JIT);
    assert_null(sym);
    assert_int_equal(hook_errors, 1);
    assert_non_null(strstr(hook_last, "no NVRTC"));
    assert_non_null(strstr(hook_last, "EEP_JIT_BACKEND=nvcc"));
    eep_cuda_sym_test_override(NULL, NULL);
}

/* The CUDA toolkit is installed wherever ElasticEP builds, so NVRTC loads without a GPU. */
static void test_nvrtc_loads(void **state)
{
    const eep_cuda_sym_t *sym   = NULL;
    int                   major = 0, minor = 0;

    (void)state;
    assert_int_equal(eep_cuda_sym_nvrtc(&sym), EEP_OK);
    assert_non_null(sym);
    assert_true(sym->nvrtc_major >= 12);
    assert_non_null(strstr(sym->nvrtc_path, "nvrtc"));
    assert_int_equal(sym->nvrtcVersion(&major, &minor), NVRTC_SUCCESS);
    assert_int_equal(major, sym->nvrtc_major);
    assert_non_null(sym->nvrtcCompileProgram);
    assert_non_null(sym->nvrtcGetCUBIN);
}

static void test_cu_translation(void **state)
{
    (void)state;
    hook_reset();
    assert_int_equal(eep_status_from_cu(CUDA_SUCCESS, "x"), EEP_OK);
    assert_int_equal(eep_status_from_cu(CUDA_ERROR_NOT_READY, "x"), EEP_INPROGRESS);
    assert_int_equal(hook_errors, 0);
    assert_int_equal(eep_status_from_cu(CUDA_ERROR_OUT_OF_MEMORY, "cuMemAlloc"), EEP_ERR_NO_MEMORY);
    assert_non_null(strstr(hook_last, "cuMemAlloc failed"));
    assert_non_null(strstr(hook_last, "cuda 2"));
    assert_int_equal(eep_status_from_cu(CUDA_ERROR_NO_DEVICE, "cuInit"), EEP_ERR_NO_DEVICE);
    assert_int_equal(eep_status_from_cu(CUDA_ERROR_ILLEGAL_ADDRESS, "k"), EEP_ERR_DEVICE_FAULT);
    assert_int_equal(eep_status_from_cu(CUDA_ERROR_LAUNCH_FAILED, "k"), EEP_ERR_DEVICE_FAULT);
    assert_int_equal(eep_status_from_cu(CUDA_ERROR_NO_BINARY_FOR_GPU, "load"), EEP_ERR_JIT);
    assert_int_equal(eep_status_from_cu(CUDA_ERROR_INVALID_VALUE, "v"), EEP_ERR_INVALID_ARG);
    assert_int_equal(eep_status_from_cu(CUDA_ERROR_LAUNCH_OUT_OF_RESOURCES, "l"),
                     EEP_ERR_NO_RESOURCE);
    assert_int_equal(eep_status_from_cu(CUDA_ERROR_UNKNOWN, "u"), EEP_ERR_CUDA);
    assert_int_equal(hook_errors, 8);
}

static void test_nvrtc_translation(void **state)
{
    const eep_cuda_sym_t *sym;

    (void)state;
    assert_int_equal(eep_cuda_sym_nvrtc(&sym), EEP_OK);
    hook_reset();
    assert_int_equal(eep_status_from_nvrtc(NVRTC_SUCCESS, "x"), EEP_OK);
    assert_int_equal(hook_errors, 0);
    assert_int_equal(eep_status_from_nvrtc(NVRTC_ERROR_COMPILATION, "nvrtcCompileProgram"),
                     EEP_ERR_JIT);
    assert_non_null(strstr(hook_last, "nvrtcCompileProgram failed"));
    /* NVRTC's own words, not only the number */
    assert_non_null(strstr(hook_last, sym->nvrtcGetErrorString(NVRTC_ERROR_COMPILATION)));
    assert_int_equal(eep_status_from_nvrtc(NVRTC_ERROR_OUT_OF_MEMORY, "x"), EEP_ERR_NO_MEMORY);
    assert_int_equal(eep_status_from_nvrtc(NVRTC_ERROR_INVALID_PROGRAM, "x"), EEP_ERR_INVALID_ARG);
    assert_int_equal(eep_status_from_nvrtc(NVRTC_ERROR_INVALID_OPTION, "x"), EEP_ERR_JIT);
}

/* With a GPU: the real driver resolves and counts devices; without: one clear skip. */
static void test_real_driver(void **state)
{
    const eep_cuda_sym_t *sym = NULL;
    eep_status_t          status;
    int                   count = 0;
    unsigned int          word  = 0;
    CUdeviceptr           d;
    CUcontext             ctx;
    CUdevice              dev;
    CUevent               ev;

    (void)state;
    eep_cuda_sym_test_override(NULL, NULL);
    eep_log_set_hook(NULL, NULL);
    status = eep_cuda_sym_driver(&sym);
    eep_log_set_hook(hook, NULL);
    if (status == EEP_ERR_NO_DEVICE) {
        printf("skip: no CUDA driver or device on this machine\n");
        skip();
    }
    assert_int_equal(status, EEP_OK);
    assert_true(sym->driver_version >= 12000);
    assert_int_equal(sym->cuDeviceGetCount(&count), CUDA_SUCCESS);
    assert_true(count > 0);
    assert_non_null(sym->cuLaunchKernel);
    assert_non_null(sym->cuMemAlloc);
    /* Each entry has the declared prototype: cuCtxSynchronize(void) is the v2000 ABI (CUDA 13's
       cuGetProcAddress("cuCtxSynchronize", 13000) hands out a variant taking a context). */
    assert_int_equal(sym->cuDeviceGet(&dev, 0), CUDA_SUCCESS);
    assert_int_equal(sym->cuDevicePrimaryCtxRetain(&ctx, dev), CUDA_SUCCESS);
    assert_int_equal(sym->cuCtxSetCurrent(ctx), CUDA_SUCCESS);
    assert_int_equal(sym->cuCtxSynchronize(), CUDA_SUCCESS);
    assert_int_equal(sym->cuMemAlloc(&d, 4096), CUDA_SUCCESS);
    assert_int_equal(sym->cuMemsetD32(d, 0x12345678u, 1024), CUDA_SUCCESS);
    assert_int_equal(sym->cuMemcpyDtoH(&word, d + 4092, sizeof(word)), CUDA_SUCCESS);
    assert_int_equal(word, 0x12345678u);
    assert_int_equal(sym->cuEventCreate(&ev, CU_EVENT_DEFAULT), CUDA_SUCCESS);
    assert_int_equal(sym->cuEventRecord(ev, NULL), CUDA_SUCCESS);
    assert_int_equal(sym->cuEventSynchronize(ev), CUDA_SUCCESS);
    assert_int_equal(sym->cuEventDestroy(ev), CUDA_SUCCESS);
    assert_int_equal(sym->cuMemFree(d), CUDA_SUCCESS);
    assert_int_equal(sym->cuCtxSynchronize(), CUDA_SUCCESS);
    assert_int_equal(sym->cuDevicePrimaryCtxRelease(dev), CUDA_SUCCESS);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_not_linked),     cmocka_unit_test(test_no_driver),
        cmocka_unit_test(test_no_nvrtc),       cmocka_unit_test(test_nvrtc_loads),
        cmocka_unit_test(test_cu_translation), cmocka_unit_test(test_nvrtc_translation),
        cmocka_unit_test(test_real_driver),
    };

    eep_log_set_level(EEP_LOG_LEVEL_ERROR);
    eep_log_set_hook(hook, NULL);
    return cmocka_run_group_tests(tests, NULL, NULL);
}
