/*
 * test_ep_state.c - the dispatch/combine state's making (elastic/ep/ep_state.c) when the driver
 * fails part way: everything it allocated is given back.  The driver here is a fake (a table of
 * counting functions standing in for libcuda, which is not under test), failing the allocation
 * named by the test; the runtime is a zeroed struct with the fields the state reads (2 ranks,
 * every peer a GIN peer, so the hybrid mode's GIN parameters are allocated first).
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <cmocka.h>

#include "elastic/ep/ep_state.h"
#include "elastic/runtime/runtime.h"

/* The fake driver: live device and host allocations, and the call that fails. */
static int         g_dev_live, g_host_live;
static const char *g_fail; /* "cuMemAlloc#N" (the N-th device allocation), "cuMemHostAlloc", ... */
static int         g_dev_allocs;

static CUresult fake_attr(int *v, CUdevice_attribute a, CUdevice d)
{
    (void)d;
    *v = a == CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT ? 132 : 9;
    return CUDA_SUCCESS;
}

static CUresult fake_alloc(CUdeviceptr *p, size_t bytes)
{
    char name[32];

    snprintf(name, sizeof(name), "cuMemAlloc#%d", ++g_dev_allocs);
    if (g_fail != NULL && strcmp(g_fail, name) == 0) {
        return CUDA_ERROR_OUT_OF_MEMORY;
    }
    *p = (CUdeviceptr)(uintptr_t)malloc(bytes);
    g_dev_live++;
    return CUDA_SUCCESS;
}

static CUresult fake_free(CUdeviceptr p)
{
    free((void *)(uintptr_t)p);
    g_dev_live--;
    return CUDA_SUCCESS;
}

static CUresult fake_htod(CUdeviceptr d, const void *h, size_t n)
{
    memcpy((void *)(uintptr_t)d, h, n);
    return CUDA_SUCCESS;
}

static CUresult fake_memset(CUdeviceptr d, unsigned char v, size_t n)
{
    if (g_fail != NULL && strcmp(g_fail, "cuMemsetD8") == 0) {
        return CUDA_ERROR_ILLEGAL_ADDRESS;
    }
    memset((void *)(uintptr_t)d, v, n);
    return CUDA_SUCCESS;
}

static CUresult fake_host_alloc(void **p, size_t bytes, unsigned int flags)
{
    (void)flags;
    if (g_fail != NULL && strcmp(g_fail, "cuMemHostAlloc") == 0) {
        return CUDA_ERROR_OUT_OF_MEMORY;
    }
    *p = malloc(bytes);
    g_host_live++;
    return CUDA_SUCCESS;
}

static CUresult fake_host_free(void *p)
{
    free(p);
    g_host_live--;
    return CUDA_SUCCESS;
}

static CUresult fake_host_devptr(CUdeviceptr *d, void *h, unsigned int flags)
{
    (void)flags;
    if (g_fail != NULL && strcmp(g_fail, "cuMemHostGetDevicePointer") == 0) {
        return CUDA_ERROR_NOT_SUPPORTED;
    }
    *d = (CUdeviceptr)(uintptr_t)h;
    return CUDA_SUCCESS;
}

static void fake_driver(eep_cuda_sym_t *cu)
{
    memset(cu, 0, sizeof(*cu));
    cu->cuDeviceGetAttribute      = fake_attr;
    cu->cuMemAlloc                = fake_alloc;
    cu->cuMemFree                 = fake_free;
    cu->cuMemcpyHtoD              = fake_htod;
    cu->cuMemsetD8                = fake_memset;
    cu->cuMemHostAlloc            = fake_host_alloc;
    cu->cuMemFreeHost             = fake_host_free;
    cu->cuMemHostGetDevicePointer = fake_host_devptr;
}

/* Make the state with @p fail failing: an error, no state, nothing left allocated. */
static void fails_clean(const char *fail, eep_status_t expect)
{
    eep_runtime_t       *rt = calloc(1, sizeof(*rt));
    struct eep_ep_state *st = NULL;
    eep_cuda_sym_t       cu;

    assert_non_null(rt);
    fake_driver(&cu);
    rt->nranks         = 2; /* one GPU a node: both peers GIN peers, hybrid mode */
    rt->lsa_size       = 1;
    rt->rail_size      = 2;
    rt->gin            = 1;
    rt->ep_gin_signal0 = 0;
    g_dev_live = g_host_live = g_dev_allocs = 0;
    g_fail                                  = fail;
    assert_int_equal(eep_ep_state_get(rt, &cu, &st), expect);
    assert_null(rt->ep);
    assert_true(g_dev_allocs >= 1); /* the GIN parameters were allocated before the failure */
    assert_int_equal(g_dev_live, 0);
    assert_int_equal(g_host_live, 0);
    free(rt);
}

static void test_host_alloc_fails(void **state)
{
    (void)state;
    fails_clean("cuMemHostAlloc", EEP_ERR_NO_MEMORY);
}

static void test_host_pointer_fails(void **state)
{
    (void)state;
    fails_clean("cuMemHostGetDevicePointer", EEP_ERR_UNSUPPORTED);
}

static void test_scratch_alloc_fails(void **state)
{
    (void)state;
    fails_clean("cuMemAlloc#2", EEP_ERR_NO_MEMORY); /* #1: the GIN parameters */
}

static void test_scratch_memset_fails(void **state)
{
    (void)state;
    fails_clean("cuMemsetD8", EEP_ERR_DEVICE_FAULT);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_host_alloc_fails),
        cmocka_unit_test(test_host_pointer_fails),
        cmocka_unit_test(test_scratch_alloc_fails),
        cmocka_unit_test(test_scratch_memset_fails),
    };

    return cmocka_run_group_tests(tests, NULL, NULL);
}
