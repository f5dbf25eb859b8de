/*
 * test_ep_hybrid.c - hybrid dispatch/combine with N ranks on ONE GPU (scripts/one-gpu-cluster.sh:
 * every rank its own NCCL node, every peer a GIN peer through our plugin, lsaSize 1), and a rank
 * that dies or stops in the middle of a call.  Skips (77) outside the one-GPU cluster.
 *
 *   test_ep_hybrid kill|stop dispatch|combine
 *
 * 1. The runtime has GIN, lsa 1, rail N: eep_ep_transport says hybrid.  Warm pairs: lane 0's
 *    expert (7t + 3r) mod E with weight 1, the other lanes -1, y = recv_x, so
 *    combine must give back x bit for bit (partial = fma(1, x, 0) = x, exactly): every element of
 *    every rank's out is compared with its x, after outputs were poisoned, over 3 pairs with new
 *    x each time (eep-bench's shape: top-k 8 with lanes 1-7 -1).
 * 2. The victim (rank N-1) launches the named call (dispatch, or combine after a good dispatch),
 *    says so through a file, and stops itself (SIGSTOP) or is SIGKILLed by rank 0 (kill).  The
 *    survivors go on calling (the call, then the other one, up to 3 calls: a call whose peer's
 *    data had already left may still complete) until one fails; it must be EEP_ERR_PEER_TIMEOUT
 *    within 3 deadlines (+ slack), with a fault record naming the victim's world rank.
 * 3. The survivors shrink the communicator (ncclCommShrink, abort mode, the victim excluded),
 *    make a fresh runtime on it and run 2 checked pairs: the next runtime works.  Rank 0 then
 *    SIGKILLs a stopped victim.
 * PASS / FAIL lines as gpu_test.h; "BEGIN" lines with UTC times for the round's log.
 */
#include <nccl.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/types.h>
#include <unistd.h>

#include "eep/ep.h"
#include "elastic/ep/ep_layout.h"
#include "elastic/gpu/nccl_util.h"
#include "tests/common/gpu_test.h"

/* eep-bench's shape in the round (scripts/gin-round.sh: T 256, H 2048, top-k 8, 8 experts a rank,
   alignment 16, int64 ids), so that its kernels are in the JIT cache before the deadlines here
   are short */
#define T      256
#define HIDDEN 2048
#define TOPK   8
#define EPR    8 /* experts per rank */
#define ALIGN  16

typedef struct {
    CUdeviceptr x, idx, w, recv_x, recv_idx, recv_w, counts, offsets, out;
    int64_t     rows;
    uint16_t   *hx; /* this pair's x, on the host */
    uint64_t    seed;
} bufs_t;

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

static uint64_t rng_next(uint64_t *s)
{
    *s ^= *s << 13;
    *s ^= *s >> 7;
    *s ^= *s << 17;
    return *s;
}

static eep_ep_shape_t shape_of(int world)
{
    eep_ep_shape_t s;

    memset(&s, 0, sizeof(s));
    s.world       = world;
    s.max_tokens  = T;
    s.hidden      = HIDDEN;
    s.num_topk    = TOPK;
    s.num_experts = EPR * world;
    s.alignment   = ALIGN;
    s.dtype       = EEP_DTYPE_BF16;
    return s;
}

/* The window a runtime of @p world ranks needs for shape_of(world) (gin-round runs 2-8 ranks). */
static size_t window_of(int world)
{
    const eep_ep_shape_t      s = shape_of(world);
    const eep_ep_shape_desc_t d = { s.max_tokens, s.hidden, s.num_topk, s.num_experts, s.dtype };
    size_t                    bytes = 0;

    GPU_OK(eep_ep_window_size(world, &d, 1, &bytes));
    return bytes;
}

static void bufs_make(const eep_cuda_sym_t *cu, bufs_t *b, int rank, int world)
{
    eep_ep_shape_t s   = shape_of(world);
    int64_t       *idx = malloc((size_t)T * TOPK * 8);
    float         *w   = malloc((size_t)T * TOPK * 4);

    memset(b, 0, sizeof(*b));
    b->rows = eep_ep_recv_rows_max(s.world, s.max_tokens, s.num_topk, s.num_experts, s.alignment);
    GPU_REQUIRE(b->rows > 0, "rows_max %lld", (long long)b->rows);
    GPU_OK(eep_status_from_cu(cu->cuMemAlloc(&b->x, (size_t)T * HIDDEN * 2), "alloc x"));
    GPU_REQUIRE(idx != NULL && w != NULL, "malloc");
    GPU_OK(eep_status_from_cu(cu->cuMemAlloc(&b->idx, (size_t)T * TOPK * 8), "alloc idx"));
    GPU_OK(eep_status_from_cu(cu->cuMemAlloc(&b->w, (size_t)T * TOPK * 4), "alloc w"));
    GPU_OK(eep_status_from_cu(cu->cuMemAlloc(&b->recv_x, (size_t)b->rows * HIDDEN * 2), "rx"));
    GPU_OK(eep_status_from_cu(cu->cuMemAlloc(&b->recv_idx, (size_t)b->rows * TOPK * 4), "ri"));
    GPU_OK(eep_status_from_cu(cu->cuMemAlloc(&b->recv_w, (size_t)b->rows * TOPK * 4), "rw"));
    GPU_OK(eep_status_from_cu(cu->cuMemAlloc(&b->counts, EPR * 4), "counts"));
    GPU_OK(eep_status_from_cu(cu->cuMemAlloc(&b->offsets, (EPR + 1) * 4), "offsets"));
    GPU_OK(eep_status_from_cu(cu->cuMemAlloc(&b->out, (size_t)T * HIDDEN * 2), "out"));
    /* lane 0 a routed expert with weight 1, every other lane -1: the combine gives x back */
    for (int t = 0; t < T; t++) {
        for (int k = 0; k < TOPK; k++) {
            idx[t * TOPK + k] = k == 0 ? (7 * t + 3 * rank) % s.num_experts : -1;
            w[t * TOPK + k]   = k == 0 ? 1.0f : 0.0f;
        }
    }
    GPU_OK(eep_status_from_cu(cu->cuMemcpyHtoD(b->idx, idx, (size_t)T * TOPK * 8), "idx"));
    GPU_OK(eep_status_from_cu(cu->cuMemcpyHtoD(b->w, w, (size_t)T * TOPK * 4), "w"));
    free(idx);
    free(w);
    b->hx = malloc((size_t)T * HIDDEN * 2);
    GPU_REQUIRE(b->hx != NULL, "malloc");
    b->seed = 0x9e3779b97f4a7c15ull ^ (uint64_t)(rank + 1) * 0x1000193ull;
}

static void bufs_free(const eep_cuda_sym_t *cu, bufs_t *b)
{
    CUdeviceptr *all[] = { &b->x,      &b->idx,    &b->w,       &b->recv_x, &b->recv_idx,
                           &b->recv_w, &b->counts, &b->offsets, &b->out };

    for (size_t i = 0; i < sizeof(all) / sizeof(all[0]); i++) {
        cu->cuMemFree(*all[i]);
    }
    free(b->hx);
}

static eep_dispatch_args_t args_of(const bufs_t *b, int world)
{
    eep_ep_shape_t      s = shape_of(world);
    eep_dispatch_args_t a;

    memset(&a, 0, sizeof(a));
    a.size                = sizeof(a);
    a.x                   = (const void *)(uintptr_t)b->x;
    a.dtype               = EEP_DTYPE_BF16;
    a.topk_idx            = (const void *)(uintptr_t)b->idx;
    a.topk_idx_dtype      = EEP_INDEX_INT64;
    a.topk_weights        = (const float *)(uintptr_t)b->w;
    a.num_tokens          = T;
    a.hidden              = HIDDEN;
    a.num_topk            = TOPK;
    a.num_experts         = s.num_experts;
    a.expert_alignment    = ALIGN;
    a.max_tokens_per_rank = T;
    a.mode                = EEP_EP_MODE_NO_CPU_SYNC;
    a.recv_capacity       = b->rows;
    a.recv_x              = (void *)(uintptr_t)b->recv_x;
    a.recv_topk_idx       = (int32_t *)(uintptr_t)b->recv_idx;
    a.recv_topk_weights   = (float *)(uintptr_t)b->recv_w;
    a.recv_expert_counts  = (int32_t *)(uintptr_t)b->counts;
    a.recv_expert_offsets = (int32_t *)(uintptr_t)b->offsets;
    return a;
}

/* New x (finite positive bf16), outputs poisoned. */
static void fresh_inputs(const eep_cuda_sym_t *cu, bufs_t *b)
{
    for (size_t i = 0; i < (size_t)T * HIDDEN; i++) {
        b->hx[i] = (uint16_t)(0x3c00u + (rng_next(&b->seed) & 0x03ffu));
    }
    GPU_OK(eep_status_from_cu(cu->cuMemcpyHtoD(b->x, b->hx, (size_t)T * HIDDEN * 2), "x"));
    GPU_OK(eep_status_from_cu(cu->cuMemsetD8(b->recv_x, 0xa5, (size_t)b->rows * HIDDEN * 2), "p"));
    GPU_OK(eep_status_from_cu(cu->cuMemsetD8(b->out, 0xa5, (size_t)T * HIDDEN * 2), "p"));
}

/* One checked pair: dispatch, (sync on the first: JIT loads), combine with y = recv_x, out == x
   bit for bit.  @return the first failing status (checks count as failures too). */
/* The survivors' shrink: abort mode, the victim (*arg) excluded. */
static ncclResult_t shrink_victim(ncclComm_t parent, ncclComm_t *slot, void *arg)
{
    int excl[1] = { *(const int *)arg };

    return ncclCommShrink(parent, excl, 1, slot, NULL, NCCL_SHRINK_ABORT);
}

static eep_status_t pair(eep_runtime_t *rt, const eep_cuda_sym_t *cu, bufs_t *b, int world,
                         eep_ep_handle_t **h, const char *what)
{
    eep_dispatch_args_t a = args_of(b, world);
    uint16_t           *out;
    eep_status_t        status;
    size_t              bad = 0, first = 0;

    fresh_inputs(cu, b);
    status = eep_dispatch(rt, &a, h, NULL);
    if (status == EEP_OK) {
        status = eep_runtime_sync(rt, NULL);
    }
    if (status == EEP_OK) {
        status = eep_combine(rt, (const void *)(uintptr_t)b->recv_x, *h, (void *)(uintptr_t)b->out,
                             NULL);
    }
    if (status == EEP_OK) {
        status = eep_runtime_sync(rt, NULL);
    }
    GPU_CHECK(status == EEP_OK, "%s: %s", what, eep_status_name(status));
    if (status != EEP_OK) {
        return status;
    }
    out = malloc((size_t)T * HIDDEN * 2);
    GPU_REQUIRE(out != NULL, "malloc");
    GPU_OK(eep_status_from_cu(cu->cuMemcpyDtoH(out, b->out, (size_t)T * HIDDEN * 2), "out"));
    for (size_t i = 0; i < (size_t)T * HIDDEN; i++) {
        if (out[i] != b->hx[i] && bad++ == 0) {
            first = i;
        }
    }
    GPU_CHECK(bad == 0,
              "%s: %zu of %d elements differ, first at token %zu channel %zu (%04x, "
              "want %04x)",
              what, bad, T * HIDDEN, first / HIDDEN, first % HIDDEN, out[first], b->hx[first]);
    printf("%s %s [rank %d of %d]: out == x, %d elements\n", bad == 0 ? "PASS" : "FAIL", what,
           gpu_test_rank, world, T * HIDDEN);
    fflush(stdout);
    free(out);
    return bad == 0 ? EEP_OK : EEP_ERR_INTERNAL;
}

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

static int wait_file(const char *dir, const char *name, int rank, double timeout_ms)
{
    double end = gpu_test_now_ms() + timeout_ms;
    char   path[512];

    snprintf(path, sizeof(path), "%s/%s.%d", dir, name, rank);
    while (gpu_test_now_ms() < end) {
        if (access(path, F_OK) == 0) {
            return 1;
        }
        usleep(2000);
    }
    return 0;
}

int main(int argc, char **argv)
{
    const char           *dir        = getenv("ONE_GPU_CLUSTER_DIR");
    const char           *kind       = argc > 1 ? argv[1] : "stop";
    const char           *when       = argc > 2 ? argv[2] : "dispatch";
    const int             in_combine = strcmp(when, "combine") == 0;
    eep_bootstrap_t      *bs;
    eep_runtime_t        *rt, *rt2;
    eep_runtime_info_t    info;
    eep_ep_handle_t      *h = NULL, *h2 = NULL;
    eep_fault_record_t    rec;
    const eep_cuda_sym_t *cu;
    eep_status_t          status = EEP_OK;
    bufs_t                b;
    pid_t                 me = getpid(), *pids;
    int                   nranks, victim, calls = 0, timeout_ms;
    double                t0, ms;
    char                  what[96];

    if (dir == NULL) {
        printf("SKIP test_ep_hybrid: run me through scripts/one-gpu-cluster.sh\n");
        return 77;
    }
    if (strcmp(kind, "kill") != 0 && strcmp(kind, "stop") != 0) {
        printf("FAIL test_ep_hybrid: usage: test_ep_hybrid kill|stop dispatch|combine\n");
        return 2;
    }
    bs     = gpu_test_bootstrap("test_ep_hybrid", 2);
    nranks = eep_bootstrap_nranks(bs);
    victim = nranks - 1;
    begin("runtime_create (GIN, hybrid mode)");
    rt = gpu_test_runtime_window(bs, NULL, window_of(nranks));
    cu = gpu_test_cu();
    GPU_OK(eep_runtime_query(rt, &info));
    GPU_REQUIRE(info.lsa_size == 1 && info.rail_size == nranks && info.gin == 1,
                "lsa %d, rail %d, gin %d: not the one-GPU cluster with GIN", info.lsa_size,
                info.rail_size, info.gin);
    timeout_ms = info.timeout_ms;
    {
        const char *mode = eep_ep_transport(rt);

        GPU_REQUIRE(mode != NULL && strcmp(mode, "hybrid") == 0,
                    "dispatch/combine transport %s, want hybrid (every peer a GIN peer)",
                    mode != NULL ? mode : "(none)");
        printf("PASS transport [rank %d]: %s (lsa 1, rail %d, gin on)\n", gpu_test_rank, mode,
               nranks);
    }
    bufs_make(cu, &b, gpu_test_rank, nranks);

    /* 1. checked pairs */
    for (int i = 0; i < 3; i++) {
        snprintf(what, sizeof(what), "hybrid_pair_%d", i);
        begin(what);
        GPU_REQUIRE(pair(rt, cu, &b, nranks, &h, what) == EEP_OK, "%s", what);
    }

    /* 2. the victim dies or stops in the middle of a call */
    pids = calloc((size_t)nranks, sizeof(pid_t));
    GPU_REQUIRE(pids != NULL, "calloc");
    GPU_OK(eep_bootstrap_allgather(bs, &me, pids, sizeof(pid_t)));
    GPU_OK(eep_bootstrap_barrier(bs));
    snprintf(what, sizeof(what), "victim_%s_mid_%s", kind, when);
    begin(what);
    eep_dispatch_args_t a = args_of(&b, nranks);
    if (in_combine) { /* a good dispatch first, every rank */
        status = eep_dispatch(rt, &a, &h, NULL);
        if (status == EEP_OK) {
            status = eep_runtime_sync(rt, NULL);
        }
        GPU_REQUIRE(status == EEP_OK, "the dispatch before the victim's combine: %s",
                    eep_status_name(status));
    }
    if (gpu_test_rank == victim) {
        status = in_combine ? eep_combine(rt, (const void *)(uintptr_t)b.recv_x, h,
                                          (void *)(uintptr_t)b.out, NULL)
                            : eep_dispatch(rt, &a, &h, NULL);
        GPU_REQUIRE(status == EEP_OK, "victim's launch: %s", eep_status_name(status));
        touch(dir, "launched", victim);
        if (strcmp(kind, "stop") == 0) {
            raise(SIGSTOP); /* rank 0 SIGKILLs it at the end */
        }
        for (;;) {
            pause(); /* SIGKILL by rank 0 */
        }
    }
    GPU_REQUIRE(wait_file(dir, "launched", victim, 60000), "the victim never launched");
    if (strcmp(kind, "kill") == 0 && gpu_test_rank == 0) {
        kill(pids[victim], SIGKILL);
        printf("rank 0: SIGKILLed rank %d (pid %d) in its %s\n", victim, (int)pids[victim], when);
    }
    t0 = gpu_test_now_ms();
    for (calls = 0; calls < 3 && status == EEP_OK; calls++) {
        const int combine = (calls % 2 == 0) == in_combine;

        status = combine ? eep_combine(rt, (const void *)(uintptr_t)b.recv_x, h,
                                       (void *)(uintptr_t)b.out, NULL)
                         : eep_dispatch(rt, &a, &h, NULL);
        if (status == EEP_OK) {
            status = eep_runtime_sync(rt, NULL);
        }
    }
    ms = gpu_test_now_ms() - t0;
    memset(&rec, 0, sizeof(rec));
    (void)eep_runtime_fault(rt, &rec);
    GPU_CHECK(status == EEP_ERR_PEER_TIMEOUT, "after %d call(s): %s", calls,
              eep_status_name(status));
    GPU_CHECK(rec.peer == victim, "fault record names rank %d (phase %d), want %d", rec.peer,
              rec.phase, victim);
    GPU_CHECK(ms < 3.0 * timeout_ms + 5000.0, "%.0f ms, deadline %d ms a call", ms, timeout_ms);
    printf("%s %s [rank %d]: %s after %d call(s), %.0f ms (deadline %d ms), fault names rank %d "
           "(phase %d, expected %llu, observed %llu)\n",
           status == EEP_ERR_PEER_TIMEOUT && rec.peer == victim ? "PASS" : "FAIL", what,
           gpu_test_rank, eep_status_name(status), calls, ms, timeout_ms, rec.peer, rec.phase,
           rec.expected, rec.observed);
    fflush(stdout);

    /* 3. the survivors' next runtime: shrink, adopt, checked pairs */
    begin("shrink_and_next_runtime");
    {
        ncclComm_t   old = (ncclComm_t)eep_runtime_nccl_comm(rt), next = NULL;
        eep_status_t st;

        /* the runtime's communicator is non-blocking, and so is its shrink (config NULL): NCCL
           writes the child later, from a thread of its own (eep_nccl_wait_child) */
        st = eep_nccl_wait_child(old, shrink_victim, &victim, gpu_test_now_ms() + 60000,
                                 "ncclCommShrink", NULL, NULL, &next);
        GPU_REQUIRE(st == EEP_OK && next != NULL, "ncclCommShrink: %s", eep_status_name(st));
        eep_ep_handle_destroy(h);
        eep_runtime_destroy(rt); /* aborts the old communicator (a fault was seen) */
        rt2 = gpu_test_runtime_window(NULL, next, window_of(nranks - 1));
        bufs_free(cu, &b);
        bufs_make(cu, &b, gpu_test_rank, nranks - 1);
        for (int i = 0; i < 2; i++) {
            snprintf(what, sizeof(what), "next_runtime_pair_%d (%d ranks)", i, nranks - 1);
            GPU_CHECK(pair(rt2, cu, &b, nranks - 1, &h2, what) == EEP_OK, "%s", what);
        }
        eep_ep_handle_destroy(h2);
        touch(dir, "survived", gpu_test_rank);
        if (gpu_test_rank == 0) {
            for (int r = 0; r < victim; r++) {
                GPU_CHECK(wait_file(dir, "survived", r, 120000), "rank %d did not finish", r);
            }
            if (strcmp(kind, "stop") == 0) {
                kill(pids[victim], SIGKILL);
            }
        }
        eep_runtime_destroy(rt2);
    }
    bufs_free(cu, &b);
    free(pids);
    return gpu_test_finish("test_ep_hybrid");
}
