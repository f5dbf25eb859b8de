/*
 * test_one_gpu_runtime.c - the runtime and its barrier with N ranks on ONE GPU, through our NCCL
 * net + GIN plugin (gin/, a test transport), started by scripts/one-gpu-cluster.sh (it skips
 * elsewhere: tests/gpu/launch.sh's one process per GPU has no GIN).  Each rank is a one-GPU
 * "node", so lsaSize is 1 and the rail team is the world: the barrier's scale-up side is trivial
 * and its scale-out side (GIN signals) is all there is.
 *
 * 1. eep_runtime_create with GIN requested (the round sets EEP_GIN=require): lsa 1, rail N, GIN
 *    on, after the probe on a throw-away split.
 * 2. COUNT (argv[1], default 100,000; the round runs 20,000) back-to-back eep_barrier launches
 *    in parallel mode, then in sequential mode, synchronizing every IN_FLIGHT launches (the test
 *    transport's known limit, gin/README.md); this rank's GIN barrier count in the window must
 *    equal the number of barriers entered.
 * 3. The last rank stops itself (SIGSTOP); every other rank's barrier (deadline 2 s) must end in
 *    EEP_ERR_PEER_TIMEOUT with a fault record naming the stopped rank in the GIN phase.  Rank 0
 *    then SIGKILLs it (the launcher's --allow-killed) once every survivor has checked.
 * Every step prints a timestamped "BEGIN name" line first.  PASS / FAIL lines as gpu_test.h.
 */
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/types.h>
#include <unistd.h>

#include "elastic/runtime/runtime.h"
#include "tests/common/gpu_test.h"

#define STOP_TIMEOUT_MS 2000
/* Launches in flight at most: the test transport applies GIN signals with CUDA calls on NCCL's
 * progress thread, which wait behind this thread when it blocks in a launch into a full queue
 * (~1,000 kernels): round 2 deadlocked at launch 1141 (120 barriers done).  gin/README.md. */
#define IN_FLIGHT       256

static uint64_t entered;

static void begin(const char *what)
{
    struct timespec ts;
    struct tm       tm;

    clock_gettime(CLOCK_REALTIME, &ts);
    gmtime_r(&ts.tv_sec, &tm);
    printf("BEGIN %s (rank %d) at %02d:%02d:%02d.%03ld UTC\n", what, gpu_test_rank, tm.tm_hour,
           tm.tm_min, tm.tm_sec, ts.tv_nsec / 1000000);
    fflush(stdout);
}

static void back_to_back(eep_runtime_t *rt, eep_barrier_mode_t mode, long count, int nranks)
{
    const char  *name   = mode ? "sequential" : "parallel";
    eep_status_t status = EEP_OK;
    double       t0, t1;
    long         i;
    char         what[64];

    snprintf(what, sizeof(what), "barrier_%s_x%ld", name, count);
    begin(what);
    t0 = gpu_test_now_ms();
    for (i = 0; i < count && status == EEP_OK; i++) {
        status = eep_barrier(rt, mode, NULL);
        if (status == EEP_OK && (i + 1) % IN_FLIGHT == 0) {
            status = eep_runtime_sync(rt, NULL); /* gin/README.md: "Known limit" */
        }
    }
    GPU_CHECK(status == EEP_OK, "%s: launch %ld: %s", name, i, eep_status_name(status));
    status = eep_runtime_sync(rt, NULL);
    t1     = gpu_test_now_ms();
    GPU_CHECK(status == EEP_OK, "%s: after %ld barriers: %s", name, count, eep_status_name(status));
    entered += (uint64_t)count;
    printf("%s %s [rank %d]: %ld back-to-back barriers, %.2f s, %.2f us each\n",
           status == EEP_OK ? "PASS" : "FAIL", what, gpu_test_rank, count, (t1 - t0) / 1e3,
           (t1 - t0) * 1e3 / (double)count);
    printf("BENCH | barrier (%s, GIN only: lsaSize 1), back to back | %.2f us | N=%d ranks on 1 "
           "GPU, %s | eep-gin plugin: a test transport, not NCCL's GIN |\n",
           name, (t1 - t0) * 1e3 / (double)count, nranks,
           getenv("ONE_GPU_MPS") != NULL && atoi(getenv("ONE_GPU_MPS")) == 1
               ? "MPS"
               : "time-sliced (no MPS)");
    fflush(stdout);
}

/* 'T' in /proc/PID/stat: the process is stopped. */
static int is_stopped(pid_t pid)
{
    char  path[64], buf[512], *p;
    FILE *f;
    int   stopped = 0;

    snprintf(path, sizeof(path), "/proc/%d/stat", (int)pid);
    f = fopen(path, "r");
    if (f != NULL) {
        if (fgets(buf, sizeof(buf), f) != NULL && (p = strrchr(buf, ')')) != NULL) {
            stopped = p[1] == ' ' && (p[2] == 'T' || p[2] == 't');
        }
        fclose(f);
    }
    return stopped;
}

/* A file in the cluster's rendezvous folder, for the survivors (the bootstrap's collectives
 * would wait for the stopped rank). */
static void touch(const char *dir, const char *name, int rank)
{
    char  path[512];
    FILE *f;

    snprintf(path, sizeof(path), "%s/%s.%d", dir, name, rank);
    f = fopen(path, "w");
    if (f != NULL) {
        fclose(f);
    }
}

static int all_touched(const char *dir, const char *name, int count, double timeout_ms)
{
    double end = gpu_test_now_ms() + timeout_ms;
    char   path[512];
    int    r;

    while (gpu_test_now_ms() < end) {
        for (r = 0; r < count; r++) {
            snprintf(path, sizeof(path), "%s/%s.%d", dir, name, r);
            if (access(path, F_OK) != 0) {
                break;
            }
        }
        if (r == count) {
            return 1;
        }
        usleep(10000);
    }
    return 0;
}

static void stopped_peer(eep_runtime_t *rt, eep_bootstrap_t *bs, const char *dir)
{
    int                nranks = eep_bootstrap_nranks(bs), victim = nranks - 1;
    pid_t              me = getpid(), *pids = calloc((size_t)nranks, sizeof(pid_t));
    eep_barrier_opts_t o;
    eep_fault_record_t rec;
    eep_status_t       status;
    double             t0, end, ms;

    begin("barrier_timeout_names_stopped_peer");
    GPU_REQUIRE(pids != NULL, "calloc");
    GPU_OK(eep_bootstrap_allgather(bs, &me, pids, sizeof(pid_t)));
    GPU_OK(eep_bootstrap_barrier(bs));
    if (gpu_test_rank == victim) {
        begin("victim_stops_itself");
        raise(SIGSTOP); /* rank 0 SIGKILLs it */
        printf("FAIL [rank %d]: continued after SIGSTOP\n", gpu_test_rank);
        exit(1);
    }
    end = gpu_test_now_ms() + 10000;
    while (!is_stopped(pids[victim]) && gpu_test_now_ms() < end) {
        usleep(1000);
    }
    GPU_CHECK(is_stopped(pids[victim]), "rank %d (pid %d) did not stop", victim, (int)pids[victim]);
    memset(&o, 0, sizeof(o));
    o.size       = sizeof(o);
    o.mode       = EEP_BARRIER_PARALLEL;
    o.timeout_ms = STOP_TIMEOUT_MS;
    t0           = gpu_test_now_ms();
    status       = eep_barrier_ex(rt, &o, NULL);
    if (status == EEP_OK) {
        status = eep_runtime_sync(rt, NULL);
    }
    ms = gpu_test_now_ms() - t0;
    memset(&rec, 0, sizeof(rec));
    GPU_CHECK(status == EEP_ERR_PEER_TIMEOUT, "barrier with rank %d stopped: %s", victim,
              eep_status_name(status));
    GPU_CHECK(eep_runtime_fault(rt, &rec) == EEP_OK, "no fault record");
    GPU_CHECK(
        rec.peer == victim && rec.phase == EEP_PHASE_BARRIER_GIN,
        "fault record: peer %d phase %d (want peer %d, phase %d), expected %llu observed %llu",
        rec.peer, rec.phase, victim, EEP_PHASE_BARRIER_GIN, rec.expected, rec.observed);
    printf("%s barrier_timeout_names_stopped_peer [rank %d]: %s after %.0f ms (deadline %d ms), "
           "fault names rank %d (phase %d, waited for %llu, saw %llu)\n",
           status == EEP_ERR_PEER_TIMEOUT && rec.peer == victim ? "PASS" : "FAIL", gpu_test_rank,
           eep_status_name(status), ms, STOP_TIMEOUT_MS, rec.peer, rec.phase, rec.expected,
           rec.observed);
    fflush(stdout);
    touch(dir, "checked", gpu_test_rank);
    if (gpu_test_rank == 0) {
        GPU_CHECK(all_touched(dir, "checked", victim, 60000), "the survivors did not all check");
        begin("kill_stopped_victim");
        kill(pids[victim], SIGKILL);
    }
    free(pids);
}

int main(int argc, char **argv)
{
    const char           *dir   = getenv("ONE_GPU_CLUSTER_DIR");
    long                  count = argc > 1 ? atol(argv[1]) : 100000;
    eep_bootstrap_t      *bs;
    eep_runtime_t        *rt;
    eep_runtime_info_t    info;
    const eep_cuda_sym_t *cu;
    uint64_t              gin_count = 0;
    double                t0;
    int                   nranks;

    if (dir == NULL) {
        printf("SKIP test_one_gpu_runtime: run me through scripts/one-gpu-cluster.sh\n");
        return 77;
    }
    bs     = gpu_test_bootstrap("test_one_gpu_runtime", 2);
    nranks = eep_bootstrap_nranks(bs);
    begin("runtime_create_gin");
    t0 = gpu_test_now_ms();
    rt = gpu_test_runtime(bs, NULL);
    cu = gpu_test_cu();
    GPU_OK(eep_runtime_query(rt, &info));
    GPU_CHECK(info.lsa_size == 1 && info.rail_size == nranks && info.gin == 1,
              "lsa %d/%d, rail %d/%d, gin %d", info.lsa_rank, info.lsa_size, info.rail_rank,
              info.rail_size, info.gin);
    printf("%s runtime_create_gin [rank %d]: lsa %d/%d, rail %d/%d, gin %d (probed %d), %.0f ms\n",
           info.lsa_size == 1 && info.rail_size == nranks && info.gin == 1 ? "PASS" : "FAIL",
           gpu_test_rank, info.lsa_rank, info.lsa_size, info.rail_rank, info.rail_size, info.gin,
           info.gin_probed, gpu_test_now_ms() - t0);
    fflush(stdout);
    if (info.gin != 1) {
        return gpu_test_finish("test_one_gpu_runtime");
    }

    begin("barrier_warm (JIT both variants)");
    /* each variant's first launch JIT-loads it: synchronize in between, so no module load runs
       while a barrier kernel of this rank spins (round 2, N=4: the first barrier deadlocked) */
    GPU_OK(eep_barrier(rt, EEP_BARRIER_PARALLEL, NULL));
    GPU_OK(eep_runtime_sync(rt, NULL));
    GPU_OK(eep_barrier(rt, EEP_BARRIER_SEQUENTIAL, NULL));
    GPU_OK(eep_runtime_sync(rt, NULL));
    entered = 2;
    GPU_OK(eep_bootstrap_barrier(bs));
    back_to_back(rt, EEP_BARRIER_PARALLEL, count, nranks);
    back_to_back(rt, EEP_BARRIER_SEQUENTIAL, count, nranks);
    GPU_OK(eep_status_from_cu(cu->cuMemcpyDtoH(&gin_count,
                                               (CUdeviceptr)rt->buf + rt->layout.gin_epoch_off,
                                               sizeof(gin_count)),
                              "DtoH"));
    GPU_CHECK(gin_count == entered, "GIN barrier count %llu, expected %llu",
              (unsigned long long)gin_count, (unsigned long long)entered);
    GPU_OK(eep_bootstrap_barrier(bs));

    stopped_peer(rt, bs, dir);
    begin("runtime_destroy (aborts: a fault was seen)");
    eep_runtime_destroy(rt);
    eep_bootstrap_destroy(bs);
    return gpu_test_finish("test_one_gpu_runtime");
}
