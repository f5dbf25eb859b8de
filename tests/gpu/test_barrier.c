/*
 * test_barrier.c - the barrier holds everyone until the last rank arrives, and runs back to back
 * without any host work or reset.
 *
 * 1. Late rank: the last rank spins DELAY_US before arriving, in each of ITERS barriers of one
 *    launch.  On every other rank, consecutive exits must be at least DELAY_US apart (a local-clock
 *    check), and each exit must come after the late rank's arrival stamp (a cross-GPU check on
 *    %globaltimer).  The GPUs' %globaltimer clocks differ by a constant offset (about 24 us on the
 *    2 x H200 machine), so it is first calibrated from a launch without delay, where every rank
 *    leaves each barrier at the same moment give or take the NVLink latency.
 * 2. Back to back: COUNT (default 1,000,000) separate eep_barrier launches in each mode, then the
 *    arrival counters in the window must equal the exact number of barriers entered.
 */
#include <stdint.h>
#include <stdlib.h>

#include "elastic/runtime/runtime.h"
#include "tests/common/gpu_test.h"

#define ITERS    20
#define DELAY_US 200
#define SKEW_NS  3000ull /* allowance after offset calibration: NVLink latency + jitter */

static uint64_t barriers_entered;

static int cmp_i64(const void *a, const void *b)
{
    int64_t x = *(const int64_t *)a, y = *(const int64_t *)b;

    return x < y ? -1 : x > y;
}

/* One launch of ITERS barriers; every rank's stamps gathered into all[rank][2 * ITERS]. */
static void stamped_launch(eep_runtime_t *rt, eep_bootstrap_t *bs, eep_barrier_mode_t mode,
                           const eep_cuda_sym_t *cu, CUdeviceptr d_stamps, uint64_t delay_ns,
                           uint64_t *all)
{
    uint64_t           stamps[2 * ITERS];
    eep_barrier_opts_t o;
    eep_status_t       status;

    memset(&o, 0, sizeof(o));
    o.size       = sizeof(o);
    o.mode       = mode;
    o.iterations = ITERS;
    o.delay_ns   = delay_ns;
    o.stamps     = (uint64_t *)(uintptr_t)d_stamps;
    GPU_OK(eep_bootstrap_barrier(bs));
    status = eep_barrier_ex(rt, &o, NULL);
    GPU_CHECK(status == EEP_OK, "launch: %s", eep_status_name(status));
    status = eep_runtime_sync(rt, NULL);
    GPU_REQUIRE(status == EEP_OK, "sync: %s", eep_status_name(status));
    barriers_entered += ITERS;
    GPU_OK(eep_status_from_cu(cu->cuMemcpyDtoH(stamps, d_stamps, sizeof(stamps)), "DtoH"));
    GPU_OK(eep_bootstrap_allgather(bs, stamps, all, sizeof(stamps)));
}

static void late_rank_test(eep_runtime_t *rt, eep_bootstrap_t *bs, eep_barrier_mode_t mode,
                           const eep_cuda_sym_t *cu, CUdeviceptr d_stamps)
{
    const char *name   = mode ? "sequential" : "parallel";
    int         nranks = eep_bootstrap_nranks(bs), late = nranks - 1, i;
    uint64_t   *all        = malloc(2 * ITERS * sizeof(uint64_t) * (size_t)nranks);
    uint64_t   *mine       = all + (size_t)gpu_test_rank * 2 * ITERS;
    uint64_t   *l          = all + (size_t)late * 2 * ITERS;
    uint64_t    min_gap    = UINT64_MAX;
    int64_t     min_margin = INT64_MAX, offset, d[ITERS];

    /* Calibrate: my clock minus the late rank's, from exits of barriers nobody delays. */
    stamped_launch(rt, bs, mode, cu, d_stamps, 0, all);
    for (i = 0; i < ITERS; i++) {
        d[i] = (int64_t)mine[2 * i + 1] - (int64_t)l[2 * i + 1];
    }
    qsort(d, ITERS, sizeof(d[0]), cmp_i64);
    offset = d[ITERS / 2];

    stamped_launch(rt, bs, mode, cu, d_stamps, gpu_test_rank == late ? DELAY_US * 1000ull : 0, all);
    if (gpu_test_rank != late) {
        for (i = 1; i < ITERS; i++) {
            uint64_t gap = mine[2 * i + 1] - mine[2 * i - 1];

            min_gap = gap < min_gap ? gap : min_gap;
            GPU_CHECK(gap + 2000 >= DELAY_US * 1000ull,
                      "%s: iteration %d left %llu ns after the "
                      "previous one, less than the late rank's %d us",
                      name, i, (unsigned long long)gap, DELAY_US);
        }
        for (i = 0; i < ITERS; i++) {
            int64_t margin = (int64_t)mine[2 * i + 1] - (int64_t)l[2 * i] - offset;

            min_margin = margin < min_margin ? margin : min_margin;
            GPU_CHECK(margin + (int64_t)SKEW_NS >= 0,
                      "%s: iteration %d: left %lld ns before the "
                      "late rank arrived",
                      name, i, (long long)-margin);
        }
        printf("late rank %s: min exit gap %.1f us (delay %d us); min (my exit - late arrival) "
               "%.2f us after removing a clock offset of %.2f us\n",
               name, (double)min_gap / 1e3, DELAY_US, (double)min_margin / 1e3,
               (double)offset / 1e3);
    }
    free(all);
}

static void back_to_back(eep_runtime_t *rt, eep_barrier_mode_t mode, long count)
{
    const char  *name   = mode ? "sequential" : "parallel";
    eep_status_t status = EEP_OK;
    double       t0     = gpu_test_now_ms(), t1;
    long         i;

    for (i = 0; i < count && status == EEP_OK; i++) {
        status = eep_barrier(rt, mode, NULL);
    }
    GPU_CHECK(status == EEP_OK, "%s: launch %ld: %s", name, i, eep_status_name(status));
    status = eep_runtime_sync(rt, NULL);
    t1     = gpu_test_now_ms();
    GPU_CHECK(status == EEP_OK, "%s: after %ld barriers: %s", name, count, eep_status_name(status));
    barriers_entered += (uint64_t)count;
    printf("%ld back-to-back %s barriers: %.2f s, %.2f us each\n", count, name, (t1 - t0) / 1e3,
           (t1 - t0) * 1e3 / (double)count);
}

int main(int argc, char **argv)
{
    eep_bootstrap_t      *bs    = gpu_test_bootstrap("test_barrier", 2);
    eep_runtime_t        *rt    = gpu_test_runtime(bs, NULL);
    const eep_cuda_sym_t *cu    = gpu_test_cu();
    long                  count = argc > 1 ? atol(argv[1]) : 1000000;
    CUdeviceptr           d_stamps;
    uint64_t              slots[EEP_MAX_LSA_RANKS];
    int                   i, nranks = eep_bootstrap_nranks(bs);

    GPU_OK(
        eep_status_from_cu(cu->cuMemAlloc(&d_stamps, 2 * ITERS * sizeof(uint64_t)), "cuMemAlloc"));
    /* Warm: compile both variants and line everyone up. */
    GPU_OK(eep_barrier(rt, EEP_BARRIER_PARALLEL, NULL));
    GPU_OK(eep_barrier(rt, EEP_BARRIER_SEQUENTIAL, NULL));
    GPU_OK(eep_runtime_sync(rt, NULL));
    barriers_entered = 2;

    late_rank_test(rt, bs, EEP_BARRIER_PARALLEL, cu, d_stamps);
    late_rank_test(rt, bs, EEP_BARRIER_SEQUENTIAL, cu, d_stamps);
    GPU_OK(eep_bootstrap_barrier(bs));
    back_to_back(rt, EEP_BARRIER_PARALLEL, count);
    back_to_back(rt, EEP_BARRIER_SEQUENTIAL, count);

    /* Every peer's arrival slot in my window counts exactly the barriers it entered. */
    GPU_OK(
        eep_status_from_cu(cu->cuMemcpyDtoH(slots, (CUdeviceptr)rt->buf + rt->layout.lsa_arrive_off,
                                            sizeof(uint64_t) * (size_t)nranks),
                           "DtoH"));
    for (i = 0; i < nranks; i++) {
        GPU_CHECK(slots[i] == barriers_entered, "arrival slot of rank %d is %llu, expected %llu", i,
                  (unsigned long long)slots[i], (unsigned long long)barriers_entered);
    }
    printf("arrival counters: %llu barriers from each of %d ranks\n",
           (unsigned long long)barriers_entered, nranks);
    cu->cuMemFree(d_stamps);
    GPU_OK(eep_bootstrap_barrier(bs));
    eep_runtime_destroy(rt);
    eep_bootstrap_destroy(bs);
    return gpu_test_finish("test_barrier");
}
