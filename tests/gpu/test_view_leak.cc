/*
 * test_view_leak.c - does a view's communicator set (communicator, registered window, device
 * communicator) give all its GPU memory and fds back when it is released?  N ranks on one GPU
 * (scripts/one-gpu-cluster.sh, each rank its own node: GIN signals in the device communicator) or
 * one rank per GPU (tests/gpu/launch.sh).
 *
 * Each variant makes ITER sets the way a view does (a child of the runtime's communicator: a
 * non-blocking ncclCommSplit; ncclMemAlloc + ncclCommWindowRegister; ncclDevCommCreate with an
 * LSA barrier and, across nodes, GIN signals) and releases each before the next:
 *   abort       ncclCommAbort, then ncclMemFree (what a view change did: NCCL's abort was taken
 *               to release the window and the device communicator)
 *   dereg-abort ncclDevCommDestroy and ncclCommWindowDeregister first, then ncclCommAbort,
 *               ncclMemFree (a view change now, elastic/runtime/runtime_nccl.cc)
 *   destroy     the same, then ncclCommFinalize + ncclCommDestroy (the graceful end)
 *   no-reclaim  dereg-abort without giving back what NCCL 2.28.9's GIN proxy leaves at the comm's
 *               end (elastic/gpu/nccl_gin_leak.h; the other variants give it back, as a view
 *               change does): a probe of NCCL, not a check, expected to grow by a 2 MiB granule
 *               per GIN context a rank and set wherever GIN runs (ranks on one GPU: each its node)
 * After a warm-up set, the device memory in use (cuMemGetInfo: the whole GPU's, so every rank
 * reads it between two bootstrap barriers, when all have released) and this process's open fds
 * are read after every release; dereg-abort and destroy PASS when neither grows over their sets
 * by more than LEAK_TOL_MIB / LEAK_TOL_FDS.  "abort" is a probe of NCCL, not a check: it is
 * expected to grow by about a window a set (measured 2026-12-02, NCCL 2.28.9).  Each variant
 * prints "LEAK variant: +X MiB, +F fds over ITER sets"; "abort" and "no-reclaim" are probes.
 * argv[1]: ITER (default 8).  argv[2]: the variants to run, comma-separated (default all).
 */
#include <nccl.h>
#include <nccl_device.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "elastic/gpu/nccl_gin_leak.h"
#include "elastic/gpu/nccl_util.h"
#include "elastic/runtime/runtime.h"
#include "tests/common/gpu_test.h"
#include "util/clock.h"
#include "util/fd_count.h"

#define WINDOW_BYTES (64u << 20)
#define LEAK_TOL_MIB 8.0
#define LEAK_TOL_FDS 2
#define DEADLINE_MS  60000.0

typedef enum { V_ABORT, V_DEREG_ABORT, V_DESTROY, V_NO_RECLAIM, V_COUNT } variant_t;

static const char *const variant_names[] = { "abort", "dereg-abort", "destroy", "no-reclaim" };

typedef struct {
    ncclComm_t          comm;
    void               *buf;
    ncclWindow_t        win;
    ncclDevComm         dc;
    int                 have_dc;
    eep_nccl_gin_leak_t leak; /* NCCL's GIN proxy leftovers, given back after the release */
} set_t;

static double used_mib(const eep_cuda_sym_t *cu)
{
    size_t free_b = 0, total_b = 0;

    GPU_OK(eep_status_from_cu(cu->cuCtxSynchronize(), "cuCtxSynchronize"));
    GPU_OK(eep_status_from_cu(cu->cuMemGetInfo(&free_b, &total_b), "cuMemGetInfo"));
    return (double)(total_b - free_b) / (1024.0 * 1024.0);
}

typedef struct {
    int           key;
    ncclConfig_t *config;
} split_arg_t;

static ncclResult_t make_split(ncclComm_t parent, ncclComm_t *slot, void *arg)
{
    split_arg_t *a = (split_arg_t *)arg;

    return ncclCommSplit(parent, 0, a->key, slot, a->config);
}

static int set_make(ncclComm_t base, int rank, set_t *s)
{
    ncclConfig_t            config = NCCL_CONFIG_INITIALIZER;
    split_arg_t             arg    = { rank, &config };
    ncclDevCommRequirements reqs;
    double                  end = eep_clock_ms() + DEADLINE_MS;
    ncclTeam_t              rail;

    memset(s, 0, sizeof(*s));
    config.blocking = 0;
    if (eep_nccl_wait_child(base, make_split, &arg, end, "ncclCommSplit", NULL, NULL, &s->comm) !=
        EEP_OK) {
        return -1;
    }
    if (eep_status_from_nccl(ncclMemAlloc(&s->buf, WINDOW_BYTES), s->comm, "ncclMemAlloc") !=
            EEP_OK ||
        eep_nccl_wait(
            s->comm,
            ncclCommWindowRegister(s->comm, s->buf, WINDOW_BYTES, &s->win, NCCL_WIN_DEFAULT), end,
            "ncclCommWindowRegister") != EEP_OK) {
        return -1;
    }
    rail = ncclTeamRail(s->comm);
    memset(&reqs, 0, sizeof(reqs));
    reqs.lsaBarrierCount = 1;
    reqs.ginSignalCount  = rail.nRanks > 1 ? rail.nRanks : 0;
    if (eep_nccl_wait(s->comm, ncclDevCommCreate(s->comm, &reqs, &s->dc), end,
                      "ncclDevCommCreate") != EEP_OK) {
        return -1;
    }
    s->have_dc = 1;
    GPU_OK(eep_nccl_gin_leak_note(&s->dc, &s->leak));
    return 0;
}

static void set_release(set_t *s, variant_t v, size_t *reclaimed_p)
{
    double end = eep_clock_ms() + DEADLINE_MS;

    if (v != V_ABORT) {
        if (s->have_dc) {
            (void)eep_nccl_wait(s->comm, ncclDevCommDestroy(s->comm, &s->dc), end,
                                "ncclDevCommDestroy");
        }
        if (s->win != NULL) {
            (void)eep_nccl_wait(s->comm, ncclCommWindowDeregister(s->comm, s->win), end,
                                "ncclCommWindowDeregister");
        }
    }
    if (v == V_DESTROY &&
        eep_nccl_wait(s->comm, ncclCommFinalize(s->comm), end, "ncclCommFinalize") == EEP_OK) {
        ncclCommDestroy(s->comm);
    } else if (s->comm != NULL) {
        ncclCommAbort(s->comm);
    }
    if (v != V_NO_RECLAIM && v != V_ABORT) {
        *reclaimed_p += eep_nccl_gin_leak_reclaim(&s->leak);
    }
    if (s->buf != NULL) {
        ncclMemFree(s->buf);
    }
    memset(s, 0, sizeof(*s));
}

static void barrier(eep_bootstrap_t *bs)
{
    int mine = gpu_test_rank, all[EEP_MAX_RANKS];

    GPU_OK(eep_bootstrap_allgather(bs, &mine, all, sizeof(mine)));
}

static void run_variant(eep_runtime_t *rt, eep_bootstrap_t *bs, const eep_cuda_sym_t *cu,
                        variant_t v, int iters)
{
    ncclComm_t base = (ncclComm_t)eep_runtime_nccl_comm(rt);
    set_t      s;
    double     mib0 = 0, mib = 0;
    int        fds0 = 0, fds = 0, i;
    size_t     reclaimed = 0;

    for (i = 0; i <= iters; i++) {
        GPU_REQUIRE(set_make(base, gpu_test_rank, &s) == 0, "%s: set %d not made", variant_names[v],
                    i);
        set_release(&s, v, &reclaimed);
        barrier(bs);
        mib = used_mib(cu);
        fds = eep_open_fds();
        barrier(bs);
        if (i == 0) { /* the warm-up set */
            mib0 = mib;
            fds0 = fds;
        }
    }
    printf("LEAK %s [rank %d]: %+.1f MiB, %+d fds over %d sets (after warm-up: %.1f MiB, %d fds; "
           "%.1f MiB of NCCL's GIN proxy leftovers given back here)\n",
           variant_names[v], gpu_test_rank, mib - mib0, fds - fds0, iters, mib0, fds0,
           (double)reclaimed / (1024.0 * 1024.0));
    if (v == V_ABORT) {
        printf("NOTE abort alone [rank %d]: %+.1f MiB a set (NCCL's abort keeps registered "
               "windows mapped)\n",
               gpu_test_rank, (mib - mib0) / iters);
    } else if (v == V_NO_RECLAIM) {
        printf("NOTE no-reclaim [rank %d]: %+.1f MiB a set, the whole GPU (NCCL 2.28.9's GIN proxy "
               "never frees its producer indices)\n",
               gpu_test_rank, (mib - mib0) / iters);
    } else {
        GPU_CHECK(mib - mib0 <= LEAK_TOL_MIB && fds - fds0 <= LEAK_TOL_FDS,
                  "%s: %+.1f MiB and %+d fds over %d sets", variant_names[v], mib - mib0,
                  fds - fds0, iters);
    }
    fflush(stdout);
}

int main(int argc, char **argv)
{
    int                   iters = argc > 1 ? atoi(argv[1]) : 8;
    const char           *which = argc > 2 ? argv[2] : "abort,no-reclaim,dereg-abort,destroy";
    eep_bootstrap_t      *bs    = gpu_test_bootstrap("test_view_leak", 1);
    eep_runtime_t        *rt    = gpu_test_runtime(bs, NULL);
    const eep_cuda_sym_t *cu    = gpu_test_cu();

    if (iters < 1 || iters > 1000) {
        fprintf(stderr, "usage: %s [ITER 1..1000] [variants]\n", argv[0]);
        return 2;
    }
    for (int v = 0; v < V_COUNT; v++) {
        char list[128], *save = NULL;

        snprintf(list, sizeof(list), "%s", which);
        for (char *t = strtok_r(list, ",", &save); t != NULL; t = strtok_r(NULL, ",", &save)) {
            if (strcmp(t, variant_names[v]) == 0) {
                run_variant(rt, bs, cu, (variant_t)v, iters);
            }
        }
    }
    eep_runtime_destroy(rt);
    eep_bootstrap_destroy(bs);
    return gpu_test_finish("test_view_leak");
}
