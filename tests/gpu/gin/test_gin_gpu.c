/* tests/gpu/gin/test_gin_gpu.c - N ranks on one GPU through our NCCL net + GIN plugin (gin/), one
 * process per rank, started by scripts/one-gpu-cluster.sh.  Checks, in order: NCCL all-reduce
 * over the plugin's network; ncclDevCommCreate with GIN (ginContextCount >= 1, proxy type); GIN
 * put ordering (random overlapping puts then put + signal, every byte checked), many senders on
 * one signal (exact sums), putValue and bare signals, counters; then the last rank is SIGKILLed
 * while the others put to it: the survivors see ncclCommGetAsyncError report it, shrink
 * (NCCL_SHRINK_ABORT), register a new window, build a new GIN dev comm and pass the GIN checks
 * again; then a newcomer process joins a fresh comm (a new unique id) of N ranks and all pass
 * them once more.  With --bench, rank 0 and 1 also measure put bandwidth and the signal round
 * trip (a test transport: these numbers are not NCCL's GIN).  Prints "PASS name" / "FAIL name:
 * why" / "BENCH ..." lines; exit 0 when every check passed, 77 (skip) without a GPU. */
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <cuda_runtime.h>
#include <nccl.h>

#include "tests/gpu/gin/gin_kernels.h"

typedef struct {
    int          rank, nranks;
    const char  *dir;     /* the cluster's rendezvous folder */
    uint64_t     wait_ns; /* deadline of every device wait */
    cudaStream_t stream;
    char        *buf; /* the window's memory, kept across comms */
    int          failures;
} gg_t;

static void gg_result(gg_t *g, const char *what, int ok, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));

static void gg_result(gg_t *g, const char *what, int ok, const char *fmt, ...)
{
    char    why[256] = "";
    va_list ap;

    va_start(ap, fmt);
    vsnprintf(why, sizeof(why), fmt, ap);
    va_end(ap);
    printf("%s %s (rank %d of %d)%s%s\n", ok ? "PASS" : "FAIL", what, g->rank, g->nranks,
           why[0] ? ": " : "", why);
    fflush(stdout);
    g->failures += !ok;
}

static double gg_now_s(void)
{
    struct timespec ts;

    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + ts.tv_nsec * 1e-9;
}

/* A unique id through the rendezvous folder: written to a temp file and renamed (atomic). */
static int gg_uid_publish(gg_t *g, const char *name, const ncclUniqueId *id)
{
    char  path[512], tmp[520];
    FILE *f;

    snprintf(path, sizeof(path), "%s/%s", g->dir, name);
    snprintf(tmp, sizeof(tmp), "%s.tmp", path);
    f = fopen(tmp, "wb");
    if (f == NULL || fwrite(id, sizeof(*id), 1, f) != 1 || fclose(f) != 0) {
        return -1;
    }
    return rename(tmp, path);
}

static int gg_uid_read(gg_t *g, const char *name, ncclUniqueId *id, double timeout_s)
{
    char   path[512];
    double end = gg_now_s() + timeout_s;
    FILE  *f;

    snprintf(path, sizeof(path), "%s/%s", g->dir, name);
    while (gg_now_s() < end) {
        f = fopen(path, "rb");
        if (f != NULL) {
            size_t n = fread(id, sizeof(*id), 1, f);
            fclose(f);
            if (n == 1) {
                return 0;
            }
        }
        usleep(10000);
    }
    fprintf(stderr, "rank %d: no %s within %.0f s\n", g->rank, path, timeout_s);
    return -1;
}

/* A barrier over the comm: an all-reduce of one int (through the plugin's network). */
static int gg_barrier(gg_t *g, ncclComm_t comm)
{
    int *d = NULL, rc;

    if (cudaMalloc((void **)&d, sizeof(int)) != cudaSuccess) {
        return -1;
    }
    rc = ncclAllReduce(d, d, 1, ncclInt, ncclSum, comm, g->stream) == ncclSuccess &&
                 cudaStreamSynchronize(g->stream) == cudaSuccess
             ? 0
             : -1;
    cudaFree(d);
    return rc;
}

static void gg_check_allreduce(gg_t *g, ncclComm_t comm)
{
    const size_t n = 256 * 1024;
    float       *d = NULL, *h = malloc(n * sizeof(float));
    size_t       i, bad       = 0;
    double       t0 = gg_now_s();
    ncclResult_t r;

    for (i = 0; i < n; i++) {
        h[i] = (float)((g->rank + 1) * (int)(i % 97));
    }
    cudaMalloc((void **)&d, n * sizeof(float));
    cudaMemcpy(d, h, n * sizeof(float), cudaMemcpyHostToDevice);
    r = ncclAllReduce(d, d, n, ncclFloat, ncclSum, comm, g->stream);
    cudaStreamSynchronize(g->stream);
    cudaMemcpy(h, d, n * sizeof(float), cudaMemcpyDeviceToHost);
    for (i = 0; i < n; i++) {
        float want = (float)(g->nranks * (g->nranks + 1) / 2 * (int)(i % 97));
        bad += h[i] != want;
    }
    gg_result(g, "allreduce_over_plugin_net", r == ncclSuccess && bad == 0,
              "%zu floats, %zu wrong, %.1f ms", n, bad, (gg_now_s() - t0) * 1e3);
    cudaFree(d);
    free(h);
}

/* Fills the window: the put area poisoned, the source area with this rank's pattern. */
static void gg_fill_window(gg_t *g)
{
    unsigned char *h = malloc(GK_SRC_BYTES);
    uint64_t       k;

    for (k = 0; k < GK_SRC_BYTES; k++) {
        h[k] = gk_src_byte(g->rank, k);
    }
    cudaMemset(g->buf, 0xee, GK_DST_BYTES);
    cudaMemcpy(g->buf + GK_SRC_BASE, h, GK_SRC_BYTES, cudaMemcpyHostToDevice);
    cudaMemset(g->buf + GK_VAL_BASE, 0, GK_WIN_BYTES - GK_VAL_BASE);
    cudaDeviceSynchronize();
    free(h);
}

static void gg_check_put_order(gg_t *g, void *dc, ncclWindow_t win, int nputs)
{
    unsigned char *got = malloc(GK_DST_BYTES), *want = malloc(GK_DST_BYTES);
    int            from = (g->rank + g->nranks - 1) % g->nranks, i;
    uint64_t       src, dst, size, k, bad = 0, first = 0;
    gk_result_t    res;
    int            rc = gk_put_order(dc, win, nputs, g->wait_ns, &res, g->stream);

    cudaMemcpy(got, g->buf, GK_DST_BYTES, cudaMemcpyDeviceToHost);
    memset(want, 0xee, GK_DST_BYTES);
    for (i = 0; i < nputs; i++) {
        gk_put_draw(from, i, &src, &dst, &size);
        for (k = 0; k < size; k++) {
            want[dst + k] = gk_src_byte(from, src + k);
        }
    }
    for (k = 0; k < GK_DST_BYTES; k++) {
        if (got[k] != want[k] && bad++ == 0) {
            first = k;
        }
    }
    gg_result(g, "gin_put_order", rc == 0 && res.status == 0 && bad == 0,
              "%d puts from rank %d, status %lld, %llu bytes wrong (first %llu), %.2f ms", nputs,
              from, (long long)res.status, (unsigned long long)bad, (unsigned long long)first,
              res.elapsed_ns / 1e6);
    free(got);
    free(want);
}

static void gg_check_many_senders(gg_t *g, void *dc, ncclWindow_t win, int nsig)
{
    gk_result_t res;
    uint64_t    vals[64] = { 0 };
    int         rc = gk_many_senders(dc, win, nsig, g->wait_ns, &res, g->stream), r, bad = 0;

    if (g->rank == 0) {
        cudaMemcpy(vals, g->buf + GK_VAL_BASE, sizeof(uint64_t) * (size_t)g->nranks,
                   cudaMemcpyDeviceToHost);
        for (r = 0; r < g->nranks && r < 64; r++) {
            bad += vals[r] != 0xC0FFEE00u + (uint64_t)r;
        }
    }
    gg_result(g, "gin_many_senders_signal_putvalue", rc == 0 && res.status == 0 && bad == 0,
              "%d ADD + %d INC per rank, status %lld (last signal %llu), %d values wrong", nsig,
              nsig, (long long)res.status, (unsigned long long)res.observed, bad);
}

static void gg_check_counter(gg_t *g, void *dc, ncclWindow_t win)
{
    gk_result_t res;
    int         rc = gk_counter(dc, win, 100, 256 * 1024, g->wait_ns, &res, g->stream);

    gg_result(g, "gin_counter", rc == 0 && res.status == 0 && res.observed == 100,
              "100 puts of 256 KiB, counter %llu, %.2f ms", (unsigned long long)res.observed,
              res.elapsed_ns / 1e6);
}

/* The GIN checks on one comm: a window on g->buf, a dev comm, three kernels. */
static void gg_gin_checks(gg_t *g, ncclComm_t comm, const char *label)
{
    ncclWindow_t win      = NULL;
    void        *dc       = NULL;
    int          contexts = 0, type = -1, rc;
    double       t0;

    printf("---- %s: %d ranks ----\n", label, g->nranks);
    gg_fill_window(g);
    rc = ncclCommWindowRegister(comm, g->buf, GK_WIN_BYTES, &win, NCCL_WIN_DEFAULT);
    gg_result(g, "window_register", rc == ncclSuccess, "%s", ncclGetErrorString(rc));
    t0 = gg_now_s();
    rc = gk_devcomm_create(comm, &dc, &contexts, &type);
    gg_result(g, "devcomm_create_gin", rc == 0 && contexts >= 1 && type == 2,
              "result %d, ginContextCount %d, ginTypes[0] %d, %.1f ms", rc, contexts, type,
              (gg_now_s() - t0) * 1e3);
    if (rc != 0 || contexts < 1) {
        return;
    }
    gg_barrier(g, comm);
    gg_check_put_order(g, dc, win, 500);
    gg_barrier(g, comm);
    gg_check_many_senders(g, dc, win, 200);
    gg_barrier(g, comm);
    gg_check_counter(g, dc, win);
    gg_barrier(g, comm);
    gk_devcomm_destroy(comm, dc);
    ncclCommWindowDeregister(comm, win);
}

static void gg_bench(gg_t *g, ncclComm_t comm)
{
    static const size_t sizes[] = { 4096, 65536, 1u << 20, 4u << 20 };
    ncclWindow_t        win     = NULL;
    void               *dc      = NULL;
    gk_result_t         res;
    int                 contexts, type;
    size_t              i;

    if (g->nranks < 2 || ncclCommWindowRegister(comm, g->buf, GK_WIN_BYTES, &win, 0) != 0 ||
        gk_devcomm_create(comm, &dc, &contexts, &type) != 0) {
        return;
    }
    for (i = 0; i < sizeof(sizes) / sizeof(sizes[0]); i++) {
        int iters = sizes[i] >= (1u << 20) ? 64 : 256;

        gg_barrier(g, comm);
        if (gk_bench_bw(dc, win, sizes[i], iters, g->wait_ns, &res, g->stream) == 0 &&
            g->rank == 0) {
            printf("BENCH put_bw bytes %zu iters %d status %lld GB/s %.3f (test transport)\n",
                   sizes[i], iters, (long long)res.status,
                   res.elapsed_ns ? (double)sizes[i] * iters / (double)res.elapsed_ns : 0.0);
        }
    }
    gg_barrier(g, comm);
    if (gk_bench_rtt(dc, 200, g->wait_ns, &res, g->stream) == 0 && g->rank == 0) {
        printf("BENCH signal_rtt rounds 200 status %lld us %.1f (test transport)\n",
               (long long)res.status, res.elapsed_ns / 200.0 / 1e3);
    }
    fflush(stdout);
    gg_barrier(g, comm);
    gk_devcomm_destroy(comm, dc);
    ncclCommWindowDeregister(comm, win);
}

typedef struct {
    ncclComm_t    comm;
    volatile int *stop;
    double        seen_s; /* when the async error appeared */
    ncclResult_t  err;
    double        timeout_s;
} gg_watch_t;

static void *gg_watch(void *arg)
{
    gg_watch_t  *w   = arg;
    double       end = gg_now_s() + w->timeout_s;
    ncclResult_t r;

    while (gg_now_s() < end) {
        if (ncclCommGetAsyncError(w->comm, &r) != ncclSuccess ||
            (r != ncclSuccess && r != ncclInProgress)) {
            w->err    = r;
            w->seen_s = gg_now_s();
            break;
        }
        usleep(5000);
    }
    *w->stop = 1;
    return NULL;
}

/* Kill the last rank; survivors detect, shrink, and run the GIN checks on the shrunk comm.
 * Returns the shrunk comm (NULL on the victim, which does not return). */
static ncclComm_t gg_kill_and_shrink(gg_t *g, ncclComm_t comm)
{
    int          victim = g->nranks - 1, rc, contexts, type;
    ncclWindow_t win    = NULL;
    void        *dc     = NULL;
    int         *stop_h = NULL, *stop_d = NULL;
    gk_result_t  res;
    gg_watch_t   w = { .comm = comm, .timeout_s = 60 };
    pthread_t    th;
    ncclComm_t   shrunk = NULL;
    double       t0;

    printf("---- kill rank %d ----\n", victim);
    gg_fill_window(g);
    ncclCommWindowRegister(comm, g->buf, GK_WIN_BYTES, &win, 0);
    rc = gk_devcomm_create(comm, &dc, &contexts, &type);
    gg_barrier(g, comm);
    if (g->rank == victim) {
        fflush(NULL);
        usleep(300 * 1000); /* the others' probes are putting by now */
        raise(SIGKILL);
    }
    cudaHostAlloc((void **)&stop_h, sizeof(int), cudaHostAllocMapped);
    *stop_h = 0;
    cudaHostGetDevicePointer((void **)&stop_d, stop_h, 0);
    w.stop = stop_h;
    t0     = gg_now_s();
    pthread_create(&th, NULL, gg_watch, &w);
    rc = rc == 0 ? gk_kill_probe(dc, win, victim, stop_d, 200, 50u * 1000 * 1000,
                                 120ull * 1000000000, &res, g->stream)
                 : -1;
    pthread_join(th, NULL);
    gg_result(g, "peer_death_async_error", w.err != ncclSuccess && w.seen_s > 0,
              "ncclCommGetAsyncError %d (%s) %.0f ms after the probe started, %llu puts", w.err,
              ncclGetErrorString(w.err), (w.seen_s - t0) * 1e3, (unsigned long long)res.puts);
    gg_result(g, "peer_death_kernel_bounded", rc == 0, "probe kernel ended");
    cudaFreeHost(stop_h);

    t0 = gg_now_s();
    rc = ncclCommShrink(comm, &victim, 1, &shrunk, NULL, NCCL_SHRINK_ABORT);
    gg_result(g, "shrink_abort", rc == ncclSuccess && shrunk != NULL, "%s, %.1f ms",
              ncclGetErrorString(rc), (gg_now_s() - t0) * 1e3);
    t0 = gg_now_s();
    rc = ncclCommAbort(comm); /* frees the old window and dev comm; must not wait on the dead */
    gg_result(g, "abort_old_comm", rc == ncclSuccess, "%.1f ms", (gg_now_s() - t0) * 1e3);
    gk_devcomm_forget(dc); /* its comm is gone: only our copy is freed */
    if (shrunk == NULL) {
        return NULL;
    }
    g->nranks = g->nranks - 1;
    gg_check_allreduce(g, shrunk);
    gg_gin_checks(g, shrunk, "shrunk comm");
    return shrunk;
}

/* Starts the newcomer: this program again, with its own host id and the last rank's number.
 * The environment is built before fork: the child of a threaded process (NCCL's, CUDA's) may
 * call nothing but execve. */
extern char **environ;
static pid_t  gg_spawn_newcomer(const char *self, int newcomer_rank)
{
    static char  rank[32], hostid[256];
    static char *argv[] = { NULL, "--newcomer", NULL };
    char       **envp;
    size_t       n = 0, i, j = 0;
    pid_t        pid;

    while (environ[n] != NULL) {
        n++;
    }
    envp = calloc(n + 3, sizeof(char *));
    if (envp == NULL) {
        return -1;
    }
    snprintf(rank, sizeof(rank), "EEP_RANK=%d", newcomer_rank);
    snprintf(hostid, sizeof(hostid), "NCCL_HOSTID=%s-newcomer",
             getenv("NCCL_HOSTID") != NULL ? getenv("NCCL_HOSTID") : "eep-gin");
    for (i = 0; i < n; i++) {
        if (strncmp(environ[i], "EEP_RANK=", 9) != 0 &&
            strncmp(environ[i], "NCCL_HOSTID=", 12) != 0) {
            envp[j++] = environ[i];
        }
    }
    envp[j++] = rank;
    envp[j++] = hostid;
    argv[0]   = (char *)self;
    fflush(NULL);
    pid = fork();
    if (pid == 0) {
        execve(self, argv, envp);
        _exit(127);
    }
    free(envp);
    return pid;
}

static int gg_wait_child(pid_t pid, double timeout_s)
{
    double end = gg_now_s() + timeout_s;
    int    status;

    while (gg_now_s() < end) {
        if (waitpid(pid, &status, WNOHANG) == pid) {
            return WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
        }
        usleep(20000);
    }
    kill(pid, SIGKILL);
    waitpid(pid, &status, 0);
    return -1;
}

/* The grown comm: survivors 0..n-2 and the newcomer n-1, from a new unique id. */
static void gg_grow(gg_t *g, int world, int newcomer)
{
    ncclUniqueId id;
    ncclComm_t   grown = NULL;
    double       t0;
    int          rc;

    if (g->rank == 0 && !newcomer) {
        ncclGetUniqueId(&id);
        gg_uid_publish(g, "uid.grow", &id);
    } else if (gg_uid_read(g, "uid.grow", &id, 120) != 0) {
        gg_result(g, "grow_init", 0, "no unique id");
        return;
    }
    g->nranks = world;
    t0        = gg_now_s();
    rc        = ncclCommInitRank(&grown, world, id, g->rank);
    gg_result(g, "grow_init", rc == ncclSuccess, "%s, %.1f ms%s", ncclGetErrorString(rc),
              (gg_now_s() - t0) * 1e3, newcomer ? " (newcomer)" : "");
    if (rc != ncclSuccess) {
        return;
    }
    gg_check_allreduce(g, grown);
    gg_gin_checks(g, grown, "grown comm (fresh unique id, a newcomer)");
    ncclCommFinalize(grown);
    ncclCommDestroy(grown);
}

int main(int argc, char **argv)
{
    gg_t         g        = { 0 };
    int          newcomer = argc > 1 && strcmp(argv[1], "--newcomer") == 0;
    int          bench    = argc > 1 && strcmp(argv[1], "--bench") == 0;
    int          version = 0, world, ndev = 0;
    ncclUniqueId id;
    ncclComm_t   comm = NULL, shrunk = NULL;
    pid_t        child = -1;
    char         self[4096];
    ssize_t      n;

    g.dir = getenv("EEP_CLUSTER_DIR");
    if (getenv("EEP_RANK") == NULL || getenv("EEP_WORLD_SIZE") == NULL || g.dir == NULL) {
        printf("SKIP: run me through scripts/one-gpu-cluster.sh (EEP_RANK, EEP_WORLD_SIZE, "
               "EEP_CLUSTER_DIR)\n");
        return 77;
    }
    if (cudaGetDeviceCount(&ndev) != cudaSuccess || ndev < 1) {
        printf("SKIP: no GPU\n");
        return 77;
    }
    g.rank    = atoi(getenv("EEP_RANK"));
    world     = atoi(getenv("EEP_WORLD_SIZE"));
    g.nranks  = world;
    g.wait_ns = (uint64_t)(getenv("EEP_GIN_GPU_WAIT_S") ? atoi(getenv("EEP_GIN_GPU_WAIT_S")) : 60) *
                1000000000ull;
    ncclGetVersion(&version);
    if (version != NCCL_VERSION_CODE) {
        printf("FAIL nccl_version: loaded %d, built against %d\n", version, NCCL_VERSION_CODE);
        return 1;
    }
    cudaSetDevice(0);
    cudaStreamCreateWithFlags(&g.stream, cudaStreamNonBlocking);
    if (ncclMemAlloc((void **)&g.buf, GK_WIN_BYTES) != ncclSuccess) {
        printf("FAIL ncclMemAlloc\n");
        return 1;
    }
    n                   = readlink("/proc/self/exe", self, sizeof(self) - 1);
    self[n > 0 ? n : 0] = 0;

    if (newcomer) {
        gg_grow(&g, world, 1);
        goto out;
    }
    if (g.rank == 0) {
        ncclGetUniqueId(&id);
        gg_uid_publish(&g, "uid.0", &id);
    } else if (gg_uid_read(&g, "uid.0", &id, 120) != 0) {
        return 1;
    }
    if (ncclCommInitRank(&comm, world, id, g.rank) != ncclSuccess) {
        printf("FAIL comm_init (rank %d)\n", g.rank);
        return 1;
    }
    gg_check_allreduce(&g, comm);
    gg_gin_checks(&g, comm, "world comm");
    if (bench) {
        gg_bench(&g, comm);
    }
    shrunk = gg_kill_and_shrink(&g, comm); /* the victim dies inside */
    if (g.rank == 0) {
        child = gg_spawn_newcomer(self, world - 1);
    }
    gg_grow(&g, world, 0);
    if (shrunk != NULL) {
        ncclCommFinalize(shrunk);
        ncclCommDestroy(shrunk);
    }
    if (child > 0) {
        int rc = gg_wait_child(child, 300);
        gg_result(&g, "newcomer_exit", rc == 0, "exit %d", rc);
    }
out:
    ncclMemFree(g.buf);
    printf("%s: rank %d, %d failure(s)\n", g.failures ? "FAILED" : "PASSED", g.rank, g.failures);
    return g.failures ? 1 : 0;
}
