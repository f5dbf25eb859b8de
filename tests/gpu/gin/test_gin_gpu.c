/* tests/gpu/gin/test_gin_gpu.c - N ranks on one GPU through our NCCL net + GIN plugin (gin/), one
 * process per rank, started by scripts/one-gpu-cluster.sh.  Checks, in order: NCCL all-reduce
 * over the plugin's network; ncclDevCommCreate with GIN (ginContextCount >= 1, proxy type); GIN
 * put ordering (random overlapping puts then put + signal, every byte checked), many senders on
 * one signal (exact sums), bare signals, counters (putValue only with --put-value: NCCL 2.28.9's
 * proxy writes its value out of bounds, fixed in 2.29.7); then the last rank is SIGKILLed while
 * the others put to it: the survivors see the plugin's eep_gin_peers_lost report it while
 * ncclCommGetAsyncError stays clean (2.28.9 cannot shrink a comm with an async error), shrink
 * (NCCL_SHRINK_ABORT), register a new window, build a new GIN dev comm and pass the GIN checks
 * again (at N=2 one rank is left: a NOTE says whether its GIN dev comm builds); then a newcomer process joins a fresh comm (a new unique id) of N ranks and all pass
 * them once more.  With --bench, rank 0 and 1 also measure put bandwidth and the signal round
 * trip (a test transport: these numbers are not NCCL's GIN).  Every step prints a timestamped
 * "BEGIN name" first, so a hang names its step.  Prints "PASS name" / "FAIL name:
 * why" / "BENCH ..." lines; exit 0 when every check passed, 77 (skip) without a GPU. */
#include <dlfcn.h>
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
    int          put_value; /* --put-value: run gin_put_value (NCCL 2.28.9 bug, see below) */
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

/* "BEGIN name (rank r of n) at HH:MM:SS.mmm": every step says when it starts, so a hang names
 * the step it is stuck in. */
static void gg_begin(gg_t *g, const char *what)
{
    struct timespec ts;
    struct tm       tm;

    clock_gettime(CLOCK_REALTIME, &ts);
    gmtime_r(&ts.tv_sec, &tm);
    printf("BEGIN %s (rank %d of %d) at %02d:%02d:%02d.%03ld UTC\n", what, g->rank, g->nranks,
           tm.tm_hour, tm.tm_min, tm.tm_sec, ts.tv_nsec / 1000000);
    fflush(stdout);
}

/* What a kernel's last wait was for and what it saw ("" when it ended well). */
static const char *gg_wait_str(const gk_result_t *res, char *buf, size_t len)
{
    static const char *kinds[] = { "nothing", "signal", "counter", "flush to rank" };
    int k = res->wait_kind >= 0 && res->wait_kind <= GK_WAIT_FLUSH ? res->wait_kind : 0;

    if (res->status == 0) {
        snprintf(buf, len, "%s", "");
    } else if (k == GK_WAIT_FLUSH) {
        snprintf(buf, len, "; %s: waited for flush to rank %d: producer %llu, consumer %llu",
                 res->status == GK_TIMEOUT ? "TIMEOUT" : "WRONG", res->wait_id,
                 (unsigned long long)res->wait_want, (unsigned long long)res->observed);
    } else {
        snprintf(buf, len, "; %s: waited for %s %d >= %llu, saw %llu, after %llu puts",
                 res->status == GK_TIMEOUT ? "TIMEOUT" : "WRONG (passed it)", kinds[k],
                 res->wait_id, (unsigned long long)res->wait_want,
                 (unsigned long long)res->observed, (unsigned long long)res->puts);
    }
    return buf;
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

    gg_begin(g, "allreduce_over_plugin_net");
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

static void gg_check_put_order(gg_t *g, void *dc, ncclWindow_t win, int nputs, int queued)
{
    const char    *name = queued ? "gin_put_order_launch_queued_behind" : "gin_put_order";
    unsigned char *got = malloc(GK_DST_BYTES), *want = malloc(GK_DST_BYTES);
    int            from = (g->rank + g->nranks - 1) % g->nranks, i;
    uint64_t       src, dst, size, k, bad = 0, first = 0;
    gk_result_t    res = { 0 };
    char           wait[160];
    int            rc;

    gg_begin(g, name);
    rc = queued ? gk_put_order_queued(dc, win, nputs, g->wait_ns, &res, g->stream)
                : gk_put_order(dc, win, nputs, g->wait_ns, &res, g->stream);

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
    gg_result(g, name, rc == 0 && res.status == 0 && bad == 0,
              "%d puts from rank %d, status %lld, %llu bytes wrong (first %llu), %.2f ms%s", nputs,
              from, (long long)res.status, (unsigned long long)bad, (unsigned long long)first,
              res.elapsed_ns / 1e6, gg_wait_str(&res, wait, sizeof(wait)));
    free(got);
    free(want);
}

static void gg_check_many_senders(gg_t *g, void *dc, ncclWindow_t win, int nsig)
{
    gk_result_t res = { 0 };
    char        wait[160];
    int         rc;

    gg_begin(g, "gin_many_senders_signal");
    rc = gk_many_senders(dc, win, nsig, g->wait_ns, &res, g->stream);
    gg_result(g, "gin_many_senders_signal", rc == 0 && res.status == 0,
              "%d bare ADD + %d INC per rank to rank 0, status %lld, %.2f ms%s", nsig, nsig,
              (long long)res.status, res.elapsed_ns / 1e6, gg_wait_str(&res, wait, sizeof(wait)));
}

static void gg_check_put_value(gg_t *g, void *dc, ncclWindow_t win)
{
    gk_result_t res      = { 0 };
    uint64_t    vals[64] = { 0 };
    char        wait[160];
    int         rc, r, bad = 0;

    gg_begin(g, "gin_put_value");
    rc = gk_put_value(dc, win, g->wait_ns, &res, g->stream);
    if (g->rank == 0) {
        cudaMemcpy(vals, g->buf + GK_VAL_BASE, sizeof(uint64_t) * (size_t)g->nranks,
                   cudaMemcpyDeviceToHost);
        for (r = 0; r < g->nranks && r < 64; r++) {
            bad += vals[r] != 0xC0FFEE00u + (uint64_t)r;
        }
    }
    gg_result(g, "gin_put_value", rc == 0 && res.status == 0 && bad == 0,
              "putValue + SignalAdd from every rank to rank 0, status %lld, %d values wrong%s",
              (long long)res.status, bad, gg_wait_str(&res, wait, sizeof(wait)));
}

static void gg_check_counter(gg_t *g, void *dc, ncclWindow_t win)
{
    gk_result_t res = { 0 };
    char        wait[160];
    int         rc;

    gg_begin(g, "gin_counter");
    rc = gk_counter(dc, win, 100, 256 * 1024, g->wait_ns, &res, g->stream);
    gg_result(g, "gin_counter", rc == 0 && res.status == 0 && res.observed == 100,
              "100 puts of 256 KiB, counter %llu, %.2f ms%s", (unsigned long long)res.observed,
              res.elapsed_ns / 1e6, gg_wait_str(&res, wait, sizeof(wait)));
}

/* Zeroes the dev comm's signals and counters, then a barrier: the next check starts clean. */
static void gg_step(gg_t *g, ncclComm_t comm, void *dc)
{
    gk_reset(dc, g->stream);
    gg_barrier(g, comm);
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
    gg_begin(g, "window_register");
    rc = ncclCommWindowRegister(comm, g->buf, GK_WIN_BYTES, &win, NCCL_WIN_DEFAULT);
    gg_result(g, "window_register", rc == ncclSuccess, "%s", ncclGetErrorString(rc));
    gg_begin(g, "devcomm_create_gin");
    t0 = gg_now_s();
    rc = gk_devcomm_create(comm, &dc, &contexts, &type);
    gg_result(g, "devcomm_create_gin", rc == 0 && contexts >= 1 && type == 2,
              "result %d, ginContextCount %d, ginTypes[0] %d, %.1f ms", rc, contexts, type,
              (gg_now_s() - t0) * 1e3);
    if (rc != 0 || contexts < 1) {
        return;
    }
    gg_step(g, comm, dc);
    gg_check_put_order(g, dc, win, 500, 0);
    gg_fill_window(g); /* before the step's barrier: no peer puts into it yet */
    gg_step(g, comm, dc);
    gg_check_put_order(g, dc, win, 200, 1); /* gin_cuda.c: the plugin's own CUDA context */
    gg_step(g, comm, dc);
    gg_check_many_senders(g, dc, win, 200);
    gg_step(g, comm, dc);
    gg_check_counter(g, dc, win);
    if (g->put_value) {
        /* Only with --put-value: NCCL 2.28.9's proxy writes putValue's value 8 bytes outside its
         * inline buffer (src/gin/gin_host_proxy.cc:233; fixed in 2.29.7), clobbering its heap:
         * round 2 saw lost signals at N=2 and illegal memory accesses at N=4 and 8, after which
         * nothing ran.  The library never calls putValue. */
        gg_step(g, comm, dc);
        gg_check_put_value(g, dc, win);
    }
    gg_barrier(g, comm);
    gg_begin(g, "devcomm_destroy");
    gk_devcomm_destroy(comm, dc);
    ncclCommWindowDeregister(comm, win);
}

/* --bench: rank 0 -> rank 1 put bandwidth (counter-completed, in batches of 32) and the bare
 * signal ping-pong's round trip, each printed as a row for bench/RESULTS.md, labelled: a test
 * transport on one GPU (copies on one GPU's copy engines; signals applied by the target's host
 * thread), not NCCL's GIN and nothing about a network. */
static void gg_bench(gg_t *g, ncclComm_t comm)
{
    static const size_t sizes[] = { 4096, 65536, 1u << 20, 4u << 20 };
    ncclWindow_t        win     = NULL;
    void               *dc      = NULL;
    gk_result_t         res     = { 0 };
    char                wait[160], setup[96];
    int                 contexts, type, rounds, k;
    size_t              i;

    snprintf(setup, sizeof(setup), "N=%d ranks on 1 GPU, %s", g->nranks,
             getenv("ONE_GPU_MPS") != NULL && atoi(getenv("ONE_GPU_MPS")) == 1
                 ? "MPS"
                 : "time-sliced (no MPS)");
    gg_begin(g, "bench");
    if (g->nranks < 2 || ncclCommWindowRegister(comm, g->buf, GK_WIN_BYTES, &win, 0) != 0 ||
        gk_devcomm_create(comm, &dc, &contexts, &type) != 0) {
        gg_result(g, "bench_setup", 0, "no window or dev comm");
        return;
    }
    for (i = 0; i < sizeof(sizes) / sizeof(sizes[0]); i++) {
        int iters = sizes[i] >= (1u << 20) ? 64 : 256;

        gg_step(g, comm, dc);
        if (gk_bench_bw(dc, win, sizes[i], iters, g->wait_ns, &res, g->stream) == 0 &&
            g->rank == 0) {
            printf("BENCH | GIN put bandwidth, %zu B puts x %d | %.3f GB/s | %s | eep-gin plugin: "
                   "a test transport, not NCCL's GIN | status %lld%s |\n",
                   sizes[i], iters,
                   res.elapsed_ns ? (double)sizes[i] * iters / (double)res.elapsed_ns : 0.0, setup,
                   (long long)res.status, gg_wait_str(&res, wait, sizeof(wait)));
        }
    }
    for (k = 0; k < 2; k++) { /* a warm-up, then the measured one */
        rounds = k == 0 ? 20 : 500;
        gg_step(g, comm, dc);
        if (gk_bench_rtt(dc, rounds, g->wait_ns, &res, g->stream) == 0 && g->rank == 0 && k == 1) {
            printf("BENCH | GIN signal round trip (bare SignalInc ping-pong, %d rounds) | %.1f us "
                   "| %s | eep-gin plugin: a test transport, not NCCL's GIN | status %lld%s |\n",
                   rounds, res.elapsed_ns / (double)rounds / 1e3, setup, (long long)res.status,
                   gg_wait_str(&res, wait, sizeof(wait)));
        }
    }
    fflush(stdout);
    gg_barrier(g, comm);
    gk_devcomm_destroy(comm, dc);
    ncclCommWindowDeregister(comm, win);
}

typedef struct {
    ncclComm_t    comm;
    volatile int *stop;
    double        seen_s; /* when the plugin reported the loss */
    ncclResult_t  err;    /* ncclCommGetAsyncError then: must stay ncclSuccess (shrink needs it) */
    uint64_t      lost0, lost;
    double        timeout_s;
} gg_watch_t;

/* The plugin's death report (gin/README.md "Peer death"): eep_gin_peers_lost, found in the
 * plugin NCCL loaded (NCCL_NET_PLUGIN) without loading it again.  ~0 when it is not there. */
static uint64_t gg_peers_lost(void)
{
    const char *path     = getenv("NCCL_NET_PLUGIN");
    void       *lib      = path != NULL ? dlopen(path, RTLD_NOW | RTLD_NOLOAD) : NULL;
    uint64_t (*fn)(void) = lib != NULL ? (uint64_t(*)(void))dlsym(lib, "eep_gin_peers_lost") : NULL;
    uint64_t n           = fn != NULL ? fn() : ~0ull;

    if (lib != NULL) {
        dlclose(lib);
    }
    return n;
}

static void *gg_watch(void *arg)
{
    gg_watch_t *w   = arg;
    double      end = gg_now_s() + w->timeout_s;

    while (gg_now_s() < end) {
        w->lost = gg_peers_lost();
        if (w->lost != ~0ull && w->lost > w->lost0) {
            w->seen_s = gg_now_s();
            break;
        }
        usleep(5000);
    }
    if (ncclCommGetAsyncError(w->comm, &w->err) != ncclSuccess) {
        w->err = ncclInternalError;
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
    gk_result_t  res = { 0 };
    gg_watch_t   w   = { .comm = comm, .timeout_s = 30 };
    pthread_t    th;
    ncclComm_t   shrunk = NULL;
    double       t0;

    printf("---- kill rank %d ----\n", victim);
    gg_begin(g, "kill_setup");
    gg_fill_window(g);
    ncclCommWindowRegister(comm, g->buf, GK_WIN_BYTES, &win, 0);
    rc = gk_devcomm_create(comm, &dc, &contexts, &type);
    gg_barrier(g, comm);
    if (g->rank == victim) {
        gg_begin(g, "victim_dies_in_300ms");
        fflush(NULL);
        usleep(300 * 1000); /* the others' probes are putting by now */
        raise(SIGKILL);
    }
    cudaHostAlloc((void **)&stop_h, sizeof(int), cudaHostAllocMapped);
    *stop_h = 0;
    cudaHostGetDevicePointer((void **)&stop_d, stop_h, 0);
    w.stop  = stop_h;
    w.lost0 = gg_peers_lost();
    gg_begin(g, "peer_death (probe puts to the victim every 50 ms)");
    t0 = gg_now_s();
    pthread_create(&th, NULL, gg_watch, &w);
    rc = rc == 0 ? gk_kill_probe(dc, win, victim, stop_d, 200, 50u * 1000 * 1000,
                                 40ull * 1000000000, &res, g->stream)
                 : -1;
    pthread_join(th, NULL);
    /* NCCL 2.28.9 refuses to shrink a comm with an async error, so the plugin reports the death
     * itself and the comm stays clean (gin/README.md "Peer death"). */
    gg_result(g, "peer_death_reported", w.seen_s > 0 && w.lost0 != ~0ull,
              "eep_gin_peers_lost %llu -> %llu, %.0f ms after the probe started, %llu puts",
              (unsigned long long)w.lost0, (unsigned long long)w.lost,
              w.seen_s > 0 ? (w.seen_s - t0) * 1e3 : -1.0, (unsigned long long)res.puts);
    gg_result(g, "peer_death_comm_clean", w.err == ncclSuccess,
              "ncclCommGetAsyncError %d (%s): shrink needs ncclSuccess", w.err,
              ncclGetErrorString(w.err));
    gg_result(g, "peer_death_kernel_bounded", rc == 0, "probe kernel ended");
    cudaFreeHost(stop_h);

    gg_begin(g, "shrink_abort");
    t0 = gg_now_s();
    rc = ncclCommShrink(comm, &victim, 1, &shrunk, NULL, NCCL_SHRINK_ABORT);
    gg_result(g, "shrink_abort", rc == ncclSuccess && shrunk != NULL, "%s, %.1f ms",
              ncclGetErrorString(rc), (gg_now_s() - t0) * 1e3);
    gg_begin(g, "abort_old_comm");
    t0 = gg_now_s();
    rc = ncclCommAbort(comm); /* frees the old window and dev comm; must not wait on the dead */
    gg_result(g, "abort_old_comm", rc == ncclSuccess, "%.1f ms", (gg_now_s() - t0) * 1e3);
    gk_devcomm_forget(dc); /* its comm is gone: only our copy is freed */
    if (shrunk == NULL) {
        return NULL;
    }
    g->nranks = g->nranks - 1;
    gg_check_allreduce(g, shrunk);
    if (g->nranks == 1) {
        /* N=2 leaves one rank: no peer to put to.  Say whether NCCL builds a GIN dev comm on it
         * (not a failure either way); shrink with GIN checks is tested at N >= 3 (N=4, 8). */
        ncclWindow_t win1 = NULL;
        void        *dc1  = NULL;
        int          ctx1 = 0, type1 = -1, rc1;

        gg_begin(g, "shrunk_one_rank_devcomm");
        rc1 = ncclCommWindowRegister(shrunk, g->buf, GK_WIN_BYTES, &win1, NCCL_WIN_DEFAULT);
        if (rc1 == ncclSuccess) {
            rc1 = gk_devcomm_create(shrunk, &dc1, &ctx1, &type1);
        }
        printf("NOTE shrunk_one_rank_devcomm (rank %d): 1 rank left; GIN dev comm: result %d, "
               "ginContextCount %d (informational; GIN checks after a shrink run at N >= 3)\n",
               g->rank, rc1, ctx1);
        fflush(stdout);
        if (dc1 != NULL) {
            gk_devcomm_destroy(shrunk, dc1);
        }
        if (win1 != NULL) {
            ncclCommWindowDeregister(shrunk, win1);
        }
        return shrunk;
    }
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
    } else if (gg_uid_read(g, "uid.grow", &id, 60) != 0) {
        gg_result(g, "grow_init", 0, "no unique id");
        return;
    }
    g->nranks = world;
    gg_begin(g, newcomer ? "grow_init (newcomer)" : "grow_init");
    t0 = gg_now_s();
    rc = ncclCommInitRank(&grown, world, id, g->rank);
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
    int          bench    = 0;
    int          version = 0, world, ndev = 0;
    ncclUniqueId id;
    ncclComm_t   comm = NULL, shrunk = NULL;
    pid_t        child = -1;
    char         self[4096];
    ssize_t      n;

    g.dir = getenv("ONE_GPU_CLUSTER_DIR");
    if (getenv("EEP_RANK") == NULL || getenv("EEP_WORLD_SIZE") == NULL || g.dir == NULL) {
        printf("SKIP: run me through scripts/one-gpu-cluster.sh (EEP_RANK, EEP_WORLD_SIZE, "
               "ONE_GPU_CLUSTER_DIR)\n");
        return 77;
    }
    if (cudaGetDeviceCount(&ndev) != cudaSuccess || ndev < 1) {
        printf("SKIP: no GPU\n");
        return 77;
    }
    for (int a = 1; a < argc; a++) {
        bench += strcmp(argv[a], "--bench") == 0;
        g.put_value += strcmp(argv[a], "--put-value") == 0;
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
    /* the launcher's GPU for this rank (scripts/one-gpu-cluster.sh --gpus), else the first */
    cudaSetDevice(getenv("EEP_DEVICE") != NULL ? atoi(getenv("EEP_DEVICE")) : 0);
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
    gg_begin(&g, "comm_init");
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
        int rc = gg_wait_child(child, 120);
        gg_result(&g, "newcomer_exit", rc == 0, "exit %d", rc);
    }
out:
    ncclMemFree(g.buf);
    printf("%s: rank %d, %d failure(s)\n", g.failures ? "FAILED" : "PASSED", g.rank, g.failures);
    return g.failures ? 1 : 0;
}
