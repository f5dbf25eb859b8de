/*
 * gpu_test.h - helpers of the GPU tests: one process per GPU, joined by the standalone bootstrap
 * from the environment (tests/gpu/launch.sh sets EEP_RANK, EEP_WORLD_SIZE, EEP_BOOTSTRAP).
 * A test prints "PASS name" / "FAIL name: why" lines and exits 0 (pass), 1 (fail) or 77 (skip).
 */
#ifndef EEP_TESTS_GPU_TEST_H
#define EEP_TESTS_GPU_TEST_H

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "eep/eep.h"
#include "elastic/gpu/cuda_sym.h"
#include "elastic/jit/jit.h"
#include "util/log.h"

static int gpu_test_failures;
static int gpu_test_rank = -1;

/* Every macro evaluates its condition exactly once (they wrap calls with side effects). */
#define GPU_CHECK(_cond, ...)                                                                      \
    do {                                                                                           \
        if (!(_cond)) {                                                                            \
            printf("FAIL [rank %d] %s:%d: %s: ", gpu_test_rank, __FILE__, __LINE__, #_cond);       \
            printf(__VA_ARGS__);                                                                   \
            printf("\n");                                                                          \
            fflush(stdout);                                                                        \
            gpu_test_failures++;                                                                   \
        }                                                                                          \
    } while (0)

/* A check after which the test cannot go on. */
#define GPU_REQUIRE(_cond, ...)                                                                    \
    do {                                                                                           \
        int _gpu_ok = !!(_cond);                                                                   \
        GPU_CHECK(_gpu_ok, __VA_ARGS__);                                                           \
        if (!_gpu_ok) {                                                                            \
            printf("FAIL [rank %d]: %s\n", gpu_test_rank, #_cond);                                 \
            exit(1);                                                                               \
        }                                                                                          \
    } while (0)

#define GPU_OK(_expr)                                                                              \
    do {                                                                                           \
        eep_status_t _gpu_status = (_expr);                                                        \
        GPU_REQUIRE(_gpu_status == EEP_OK, "%s: %s", #_expr, eep_status_name(_gpu_status));        \
    } while (0)

/* A driver call that must succeed (CUresult), once evaluated. */
#define GPU_CU(_expr)                                                                              \
    do {                                                                                           \
        CUresult _gpu_res = (_expr);                                                               \
        GPU_REQUIRE(_gpu_res == CUDA_SUCCESS, "%s: cuda %d", #_expr, (int)_gpu_res);               \
    } while (0)

static inline double gpu_test_now_ms(void)
{
    struct timespec ts;

    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec * 1e3 + (double)ts.tv_nsec / 1e6;
}

/* Join the bootstrap; skip (77) when there is none or fewer than @p min_ranks ranks. */
static inline eep_bootstrap_t *gpu_test_bootstrap(const char *name, int min_ranks)
{
    eep_bootstrap_t *bs = NULL;

    if (eep_bootstrap_create(NULL, &bs) != EEP_OK) {
        printf("SKIP %s: no bootstrap (run through tests/gpu/launch.sh)\n", name);
        exit(77);
    }
    gpu_test_rank = eep_bootstrap_rank(bs);
    if (eep_bootstrap_nranks(bs) < min_ranks) {
        printf("SKIP %s: needs %d GPUs, have %d\n", name, min_ranks, eep_bootstrap_nranks(bs));
        exit(77);
    }
    return bs;
}

/* A runtime on @p bs (or adopting @p comm) with a window of @p window_bytes (0: the default). */
static inline eep_runtime_t *gpu_test_runtime_window(eep_bootstrap_t *bs, void *comm,
                                                     size_t window_bytes)
{
    eep_runtime_params_t p;
    eep_runtime_t       *rt = NULL;
    eep_status_t         status;

    memset(&p, 0, sizeof(p));
    p.size         = sizeof(p);
    p.bootstrap    = bs;
    p.nccl_comm    = comm;
    p.device       = -1;
    p.window_bytes = window_bytes;
    status         = eep_runtime_create(&p, &rt);
    if (status == EEP_ERR_NO_DEVICE) {
        printf("SKIP: no GPU\n");
        exit(77);
    }
    GPU_REQUIRE(status == EEP_OK, "eep_runtime_create: %s", eep_status_name(status));
    return rt;
}

static inline eep_runtime_t *gpu_test_runtime(eep_bootstrap_t *bs, void *comm)
{
    return gpu_test_runtime_window(bs, comm, 0);
}

static inline const eep_cuda_sym_t *gpu_test_cu(void)
{
    const eep_cuda_sym_t *cu = NULL;

    GPU_REQUIRE(eep_cuda_sym_driver(&cu) == EEP_OK, "no driver");
    return cu;
}

static inline int gpu_test_finish(const char *name)
{
    if (gpu_test_failures == 0) {
        printf("PASS %s [rank %d]\n", name, gpu_test_rank);
        return 0;
    }
    printf("FAIL %s [rank %d]: %d check(s) failed\n", name, gpu_test_rank, gpu_test_failures);
    return 1;
}

#endif /* EEP_TESTS_GPU_TEST_H */
