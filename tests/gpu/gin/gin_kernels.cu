/* tests/gpu/gin/gin_kernels.cu - device code of the GIN GPU test (test_gin_gpu.c): put ordering,
 * many senders on one signal, putValue, bare signals, counters, a probe that keeps putting to a
 * rank about to die, and the put-bandwidth / signal-round-trip measurements.  One thread of one
 * block issues everything (ncclCoopThread); every wait (signal, counter, and flush: NCCL's own
 * flush has no bound, gk_flush reads the proxy's queue indices) loops with a %globaltimer deadline
 * and records what it waited for and what it saw, so a stuck step ends with GK_TIMEOUT and names
 * itself rather than hanging.
 * Also the host calls that need NCCL's C++ device headers (ncclDevCommCreate/Destroy). */
#include <nccl.h>
#include <nccl_device.h>
#include <nccl_device/gin/proxy/gin_proxy_device_host_common.h>

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

static __device__ void gk_waiting(gk_result_t *res, int kind, int id, uint64_t want, uint64_t v)
{
    res->wait_kind = kind;
    res->wait_id   = id;
    res->wait_want = want;
    res->observed  = v;
}

static __device__ int gk_wait_signal(const ncclGin &gin, int sig, uint64_t least, uint64_t end,
                                     gk_result_t *res)
{
    uint64_t v;
    while ((v = gin.readSignal(sig)) < least) {
        if (gk_now() > end) {
            gk_waiting(res, GK_WAIT_SIGNAL, sig, least, v);
            return GK_TIMEOUT;
        }
        __nanosleep(500);
    }
    gk_waiting(res, GK_WAIT_SIGNAL, sig, least, v);
    return 0;
}

static __device__ int gk_wait_counter(const ncclGin &gin, int ctr, uint64_t least, uint64_t end,
                                      gk_result_t *res)
{
    uint64_t v;
    while ((v = gin.readCounter(ctr)) < least) {
        if (gk_now() > end) {
            gk_waiting(res, GK_WAIT_COUNTER, ctr, least, v);
            return GK_TIMEOUT;
        }
        __nanosleep(500);
    }
    gk_waiting(res, GK_WAIT_COUNTER, ctr, least, v);
    return 0;
}

/* gin.flush with a deadline.  NCCL's flush spins until every peer's queue is consumed (consumer
 * index reaches the producer's) with no bound: if the proxy's progress thread stopped (a plugin
 * error, a lost peer) it never returns, and the hang names nothing.  For the PROXY backend the
 * same indices are read here (ncclGinProxyGpuCtx_t of NCCL 2.28.9's gin_proxy_device_host_common.h,
 * the dev comm's ginHandles[context]), with a deadline; other backends use NCCL's flush. */
static __device__ int gk_flush(const ncclDevComm &dc, const ncclGin &gin, uint64_t end,
                               gk_result_t *res)
{
    if (dc.ginTypes[0] != NCCL_NET_DEVICE_GIN_PROXY) {
        gin.flush(ncclCoopThread());
        return 0;
    }
    const ncclGinProxyGpuCtx_t *pc = (const ncclGinProxyGpuCtx_t *)dc.ginHandles[0];
    for (int pe = 0; pe < dc.nRanks; pe++) {
        cuda::atomic_ref<uint32_t, cuda::thread_scope_system> pi(pc->pis[pe]);
        cuda::atomic_ref<uint32_t, cuda::thread_scope_system> ci(pc->cis[pe]);
        uint32_t p = pi.load(cuda::memory_order_relaxed), c;

        while ((int32_t)((c = ci.load(cuda::memory_order_acquire)) - p) < 0) {
            if (gk_now() > end) {
                gk_waiting(res, GK_WAIT_FLUSH, pe, p, c);
                return GK_TIMEOUT;
            }
            __nanosleep(200);
        }
    }
    return 0;
}

__global__ void gk_reset_kernel(ncclDevComm dc)
{
    if (threadIdx.x != 0) {
        return;
    }
    ncclGin gin{ dc, 0 };
    for (int i = 0; i < GK_NSIGNALS; i++) {
        gin.resetSignal(i);
    }
    for (int i = 0; i < GK_NCOUNTERS; i++) {
        gin.resetCounter(i);
    }
}

__global__ void gk_put_order_kernel(ncclDevComm dc, ncclWindow_t win, int nputs, uint64_t tmo,
                                    gk_result_t *res)
{
    if (threadIdx.x != 0) {
        return;
    }
    ncclGin  gin{ dc, 0 };
    uint64_t start = gk_now(), src, dst, size;
    int      peer = (dc.rank + 1) % dc.nRanks, st = 0;

    for (int i = 0; i < nputs && st == 0; i++) {
        gk_put_draw(dc.rank, i, &src, &dst, &size);
        if (i + 1 < nputs) {
            gin.put(ncclTeamWorld(dc), peer, win, dst, win, GK_SRC_BASE + src, size);
        } else {
            gin.put(ncclTeamWorld(dc), peer, win, dst, win, GK_SRC_BASE + src, size,
                    ncclGin_SignalInc{ GK_SIG_ORDER });
        }
        res->puts = (uint64_t)i + 1;
        if (i % 128 == 127) {
            st = gk_flush(dc, gin, start + tmo, res); /* stay inside the proxy's queue (256) */
        }
    }
    if (st == 0) {
        st = gk_wait_signal(gin, GK_SIG_ORDER, 1, start + tmo, res);
    }
    if (st == 0) {
        st = gk_flush(dc, gin, start + tmo, res);
    }
    res->status     = st;
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

    (void)win;
    for (int i = 0; i < nsig && st == 0; i++) {
        gin.signal(ncclTeamWorld(dc), 0,
                   ncclGin_SignalAdd{ GK_SIG_ADD, (uint64_t)dc.rank * 100000 + (uint64_t)i + 1 });
        gin.signal(ncclTeamWorld(dc), 0, ncclGin_SignalInc{ GK_SIG_INC });
        res->puts = 2 * ((uint64_t)i + 1);
        if (i % 64 == 63) {
            st = gk_flush(dc, gin, start + tmo, res); /* stay inside the proxy's queue */
        }
    }
    if (st == 0 && dc.rank == 0) {
        uint64_t want = 0;
        for (int r = 0; r < dc.nRanks; r++) {
            for (int i = 0; i < nsig; i++) {
                want += (uint64_t)r * 100000 + (uint64_t)i + 1;
            }
        }
        st = gk_wait_signal(gin, GK_SIG_ADD, want, start + tmo, res);
        if (st == 0 && res->observed != want) {
            st = GK_WRONG; /* passed the exact sum */
        }
        if (st == 0) {
            st = gk_wait_signal(gin, GK_SIG_INC, (uint64_t)dc.nRanks * nsig, start + tmo, res);
        }
        if (st == 0 && res->observed != (uint64_t)dc.nRanks * nsig) {
            st = GK_WRONG;
        }
    }
    if (st == 0) {
        st = gk_flush(dc, gin, start + tmo, res);
    }
    res->status     = st;
    res->elapsed_ns = gk_now() - start;
}

__global__ void gk_put_value_kernel(ncclDevComm dc, ncclWindow_t win, uint64_t tmo,
                                    gk_result_t *res)
{
    if (threadIdx.x != 0) {
        return;
    }
    ncclGin  gin{ dc, 0 };
    uint64_t start = gk_now();
    int      st    = 0;

    gin.putValue(ncclTeamWorld(dc), 0, win, GK_VAL_BASE + (size_t)dc.rank * 8,
                 (uint64_t)0xC0FFEE00u + (uint64_t)dc.rank, ncclGin_SignalAdd{ GK_SIG_VALUE, 1 });
    res->puts = 1;
    if (dc.rank == 0) {
        st = gk_wait_signal(gin, GK_SIG_VALUE, (uint64_t)dc.nRanks, start + tmo, res);
        if (st == 0 && res->observed != (uint64_t)dc.nRanks) {
            st = GK_WRONG;
        }
    }
    if (st == 0) {
        st = gk_flush(dc, gin, start + tmo, res);
    }
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
    res->wait_kind  = GK_WAIT_NONE;
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
    if (st == 0) {
        st = gk_flush(dc, gin, start + tmo, res);
    }
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

__global__ void gk_noop_kernel(void)
{
}

/* gk_put_order with a launch queued right behind it on the same stream, as an application's next
   op is queued behind a combine: a plugin whose copies shared a hardware work queue with this
   stream would hold them behind that launch, which waits for the kernel waiting for them
   (gin/gin_cuda.c).  Whether the queues are shared depends on the driver's assignment: on the
   H200 this test passed with EEP_GIN_CUDA_CONTEXT=caller too (2026-12-02), so it guards the
   behaviour, it does not prove the fix; python/tests/gpu_python.py's autograd step did. */
extern "C" int gk_put_order_queued(void *dc, ncclWindow_t win, int nputs, uint64_t timeout_ns,
                                   gk_result_t *res, cudaStream_t s)
{
    gk_result_t *d = gk_result_alloc();

    if (d == NULL) {
        return -1;
    }
    gk_put_order_kernel<<<1, 32, 0, s>>>(*(ncclDevComm *)dc, win, nputs, timeout_ns, d);
    gk_noop_kernel<<<1, 1, 0, s>>>();
    return gk_finish(d, res, s);
}

extern "C" int gk_put_value(void *dc, ncclWindow_t win, uint64_t timeout_ns, gk_result_t *res,
                            cudaStream_t s)
{
    GK_LAUNCH(gk_put_value_kernel, win, timeout_ns);
}

extern "C" int gk_reset(void *dc, cudaStream_t s)
{
    gk_reset_kernel<<<1, 32, 0, s>>>(*(ncclDevComm *)dc);
    return cudaGetLastError() == cudaSuccess && cudaStreamSynchronize(s) == cudaSuccess ? 0 : -1;
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
