/* tests/gpu/gin/gin_kernels.cu - device code of the GIN GPU test (test_gin_gpu.c): put ordering,
 * many senders on one signal, putValue, bare signals, counters, a probe that keeps putting to a
 * rank about to die, and the put-bandwidth / signal-round-trip measurements.  One thread of one
 * block issues everything (ncclCoopThread); every wait reads the signal or counter in a loop with
 * a %globaltimer deadline, so a lost peer ends the kernel with GK_TIMEOUT rather than a hang.
 * Also the host calls that need NCCL's C++ device headers (ncclDevCommCreate/Destroy). */
#include <nccl.h>
#include <nccl_device.h>

#include <cstdio>
#include <cstring>

#include "tests/gpu/gin/gin_kernels.h"

#if NCCL_VERSION_CODE != 22809
#error "the GIN GPU test is built against NCCL 2.28.9's device headers only"
#endif

static __device__ uint64_t gk_now(void)
{
    uint64_t t;
    asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t));
    return t;
}

static __device__ int gk_wait_signal(const ncclGin &gin, int sig, uint64_t least, uint64_t end,
                                     gk_result_t *res)
{
    uint64_t v;
    while ((v = gin.readSignal(sig)) < least) {
        if (gk_now() > end) {
            res->observed = v;
            return GK_TIMEOUT;
        }
        __nanosleep(500);
    }
    res->observed = v;
    return 0;
}

static __device__ int gk_wait_counter(const ncclGin &gin, int ctr, uint64_t least, uint64_t end,
                                      gk_result_t *res)
{
    uint64_t v;
    while ((v = gin.readCounter(ctr)) < least) {
        if (gk_now() > end) {
            res->observed = v;
            return GK_TIMEOUT;
        }
        __nanosleep(500);
    }
    res->observed = v;
    return 0;
}

__global__ void gk_put_order_kernel(ncclDevComm dc, ncclWindow_t win, int nputs, uint64_t tmo,
                                    gk_result_t *res)
{
    if (threadIdx.x != 0) {
        return;
    }
    ncclGin  gin{ dc, 0 };
    uint64_t start = gk_now(), src, dst, size;
    int      peer  = (dc.rank + 1) % dc.nRanks;

    for (int i = 0; i < nputs; i++) {
        gk_put_draw(dc.rank, i, &src, &dst, &size);
        if (i + 1 < nputs) {
            gin.put(ncclTeamWorld(dc), peer, win, dst, win, GK_SRC_BASE + src, size);
        } else {
            gin.put(ncclTeamWorld(dc), peer, win, dst, win, GK_SRC_BASE + src, size,
                    ncclGin_SignalInc{ GK_SIG_ORDER });
        }
    }
    res->puts   = (uint64_t)nputs;
    res->status = gk_wait_signal(gin, GK_SIG_ORDER, 1, start + tmo, res);
    gin.flush(ncclCoopThread());
    res->elapsed_ns = gk_now() - start;
}

__global__ void gk_many_senders_kernel(ncclDevComm dc, ncclWindow_t win, int nsig, uint64_t tmo,
                                       gk_result_t *res)
{
    if (threadIdx.x != 0) {
        return;
    }
    ncclGin  gin{ dc, 0 };
    uint64_t start = gk_now();
    int      st    = 0;

    for (int i = 0; i < nsig; i++) {
        gin.signal(ncclTeamWorld(dc), 0,
                   ncclGin_SignalAdd{ GK_SIG_ADD, (uint64_t)dc.rank * 100000 + (uint64_t)i + 1 });
        gin.signal(ncclTeamWorld(dc), 0, ncclGin_SignalInc{ GK_SIG_INC });
        if (i % 64 == 63) {
            gin.flush(ncclCoopThread()); /* stay inside the proxy's queue */
        }
    }
    gin.putValue(ncclTeamWorld(dc), 0, win, GK_VAL_BASE + (size_t)dc.rank * 8,
                 (uint64_t)0xC0FFEE00u + (uint64_t)dc.rank, ncclGin_SignalAdd{ GK_SIG_VALUE, 1 });
    if (dc.rank == 0) {
        uint64_t want = 0;
        for (int r = 0; r < dc.nRanks; r++) {
            for (int i = 0; i < nsig; i++) {
                want += (uint64_t)r * 100000 + (uint64_t)i + 1;
            }
        }
        st = gk_wait_signal(gin, GK_SIG_ADD, want, start + tmo, res);
        if (st == 0 && res->observed != want) {
            st = -2; /* passed the exact sum */
        }
        if (st == 0) {
            st = gk_wait_signal(gin, GK_SIG_INC, (uint64_t)dc.nRanks * nsig, start + tmo, res);
        }
        if (st == 0) {
            st = gk_wait_signal(gin, GK_SIG_VALUE, (uint64_t)dc.nRanks, start + tmo, res);
        }
    }
    gin.flush(ncclCoopThread());
    res->status     = st;
    res->elapsed_ns = gk_now() - start;
}

__global__ void gk_counter_kernel(ncclDevComm dc, ncclWindow_t win, int nputs, size_t bytes,
                                  uint64_t tmo, gk_result_t *res)
{
    if (threadIdx.x != 0) {
        return;
    }
    ncclGin  gin{ dc, 0 };
    uint64_t start = gk_now();
    int      peer  = (dc.rank + 1) % dc.nRanks;

    for (int i = 0; i < nputs; i++) {
        gin.put(ncclTeamWorld(dc), peer, win, ((size_t)i * bytes) % (GK_DST_BYTES - bytes), win,
                GK_SRC_BASE, bytes, ncclGin_None{}, ncclGin_CounterInc{ GK_CTR_PUTS });
    }
    res->puts       = (uint64_t)nputs;
    res->status     = gk_wait_counter(gin, GK_CTR_PUTS, (uint64_t)nputs, start + tmo, res);
    res->elapsed_ns = gk_now() - start;
}

__global__ void gk_kill_probe_kernel(ncclDevComm dc, ncclWindow_t win, int victim,
                                     volatile int *stop, int max_puts, uint64_t gap, uint64_t tmo,
                                     gk_result_t *res)
{
    if (threadIdx.x != 0) {
        return;
    }
    ncclGin  gin{ dc, 0 };
    uint64_t start = gk_now(), next = start;
    int      n = 0;

    /* No flush: once the victim is gone NCCL's progress thread stops, and a flush (or a put
     * into a full queue) would wait for it forever.  max_puts stays below the queue's size. */
    while (!*stop && gk_now() < start + tmo) {
        if (n < max_puts && gk_now() >= next) {
            gin.put(ncclTeamWorld(dc), victim, win, 0, win, GK_SRC_BASE, 4096,
                    ncclGin_SignalInc{ GK_SIG_KILL });
            n++;
            next = gk_now() + gap;
        }
        __nanosleep(10000);
    }
    res->puts       = (uint64_t)n;
    res->status     = *stop ? 0 : GK_TIMEOUT;
    res->elapsed_ns = gk_now() - start;
}

__global__ void gk_bench_bw_kernel(ncclDevComm dc, ncclWindow_t win, size_t bytes, int iters,
                                   uint64_t tmo, gk_result_t *res)
{
    if (threadIdx.x != 0 || dc.rank != 0) {
        return;
    }
    ncclGin  gin{ dc, 0 };
    uint64_t base  = gin.readCounter(GK_CTR_BW);
    uint64_t start = gk_now();
    int      st    = 0;

    for (int i = 0; i < iters && st == 0; i++) {
        gin.put(ncclTeamWorld(dc), 1, win, 0, win, GK_SRC_BASE, bytes, ncclGin_None{},
                ncclGin_CounterInc{ GK_CTR_BW });
        if (i % 32 == 31 || i + 1 == iters) {
            st = gk_wait_counter(gin, GK_CTR_BW, base + (uint64_t)i + 1, start + tmo, res);
        }
    }
    res->status     = st;
    res->puts       = (uint64_t)iters;
    res->elapsed_ns = gk_now() - start;
}

__global__ void gk_bench_rtt_kernel(ncclDevComm dc, int rounds, uint64_t tmo, gk_result_t *res)
{
    if (threadIdx.x != 0 || dc.rank > 1) {
        return;
    }
    ncclGin  gin{ dc, 0 };
    uint64_t start = gk_now();
    int      st    = 0;

    for (int i = 0; i < rounds && st == 0; i++) {
        if (dc.rank == 0) {
            gin.signal(ncclTeamWorld(dc), 1, ncclGin_SignalInc{ GK_SIG_PING });
            st = gk_wait_signal(gin, GK_SIG_PONG, (uint64_t)i + 1, start + tmo, res);
        } else {
            st = gk_wait_signal(gin, GK_SIG_PING, (uint64_t)i + 1, start + tmo, res);
            gin.signal(ncclTeamWorld(dc), 0, ncclGin_SignalInc{ GK_SIG_PONG });
        }
    }
    gin.flush(ncclCoopThread());
    res->status     = st;
    res->puts       = (uint64_t)rounds;
    res->elapsed_ns = gk_now() - start;
}

extern "C" int gk_devcomm_create(ncclComm_t comm, void **dc_p, int *contexts_p, int *gin_type_p)
{
    ncclDevCommRequirements reqs;
    ncclDevComm            *dc = new ncclDevComm;
    ncclResult_t            r;

    memset(&reqs, 0, sizeof(reqs)); /* 2.28.9 has no initializer macro */
    memset(dc, 0, sizeof(*dc));
    reqs.ginSignalCount  = GK_NSIGNALS;
    reqs.ginCounterCount = GK_NCOUNTERS;
    r                    = ncclDevCommCreate(comm, &reqs, dc);
    if (r != ncclSuccess) {
        delete dc;
        return (int)r;
    }
    *contexts_p = dc->ginContextCount;
    *gin_type_p = dc->ginContextCount > 0 ? dc->ginTypes[0] : -1;
    *dc_p       = dc;
    return 0;
}

extern "C" void gk_devcomm_destroy(ncclComm_t comm, void *dc)
{
    if (dc != NULL) {
        ncclDevCommDestroy(comm, (ncclDevComm *)dc);
        delete (ncclDevComm *)dc;
    }
}

extern "C" void gk_devcomm_forget(void *dc)
{
    delete (ncclDevComm *)dc;
}

/* Launches on s and waits for it; the result is copied back into *res. */
static int gk_finish(gk_result_t *dres, gk_result_t *res, cudaStream_t s)
{
    cudaError_t e = cudaGetLastError();

    if (e == cudaSuccess) {
        e = cudaStreamSynchronize(s);
    }
    if (e == cudaSuccess) {
        e = cudaMemcpy(res, dres, sizeof(*res), cudaMemcpyDeviceToHost);
    }
    cudaFree(dres);
    if (e != cudaSuccess) {
        fprintf(stderr, "kernel failed: %s\n", cudaGetErrorString(e));
        return -1;
    }
    return 0;
}

static gk_result_t *gk_result_alloc(void)
{
    gk_result_t *d = NULL;

    if (cudaMalloc(&d, sizeof(*d)) != cudaSuccess || cudaMemset(d, 0, sizeof(*d)) != cudaSuccess) {
        return NULL;
    }
    return d;
}

#define GK_LAUNCH(_kernel, ...)                                                                    \
    gk_result_t *d = gk_result_alloc();                                                            \
    if (d == NULL) {                                                                               \
        return -1;                                                                                 \
    }                                                                                              \
    _kernel<<<1, 32, 0, s>>>(*(ncclDevComm *)dc, __VA_ARGS__, d);                                  \
    return gk_finish(d, res, s)

extern "C" int gk_put_order(void *dc, ncclWindow_t win, int nputs, uint64_t timeout_ns,
                            gk_result_t *res, cudaStream_t s)
{
    GK_LAUNCH(gk_put_order_kernel, win, nputs, timeout_ns);
}

extern "C" int gk_many_senders(void *dc, ncclWindow_t win, int nsig, uint64_t timeout_ns,
                               gk_result_t *res, cudaStream_t s)
{
    GK_LAUNCH(gk_many_senders_kernel, win, nsig, timeout_ns);
}

extern "C" int gk_counter(void *dc, ncclWindow_t win, int nputs, size_t bytes, uint64_t timeout_ns,
                          gk_result_t *res, cudaStream_t s)
{
    GK_LAUNCH(gk_counter_kernel, win, nputs, bytes, timeout_ns);
}

extern "C" int gk_kill_probe(void *dc, ncclWindow_t win, int victim, volatile int *stop,
                             int max_puts, uint64_t gap_ns, uint64_t timeout_ns, gk_result_t *res,
                             cudaStream_t s)
{
    GK_LAUNCH(gk_kill_probe_kernel, win, victim, stop, max_puts, gap_ns, timeout_ns);
}

extern "C" int gk_bench_bw(void *dc, ncclWindow_t win, size_t bytes, int iters, uint64_t timeout_ns,
                           gk_result_t *res, cudaStream_t s)
{
    GK_LAUNCH(gk_bench_bw_kernel, win, bytes, iters, timeout_ns);
}

extern "C" int gk_bench_rtt(void *dc, int rounds, uint64_t timeout_ns, gk_result_t *res,
                            cudaStream_t s)
{
    GK_LAUNCH(gk_bench_rtt_kernel, rounds, timeout_ns);
}
