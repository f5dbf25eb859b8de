/*
 * test_jit_load.c - a kernel load never waits behind our own spinning kernel (elastic/jit/jit.h,
 * eep_jit_get_kernel_on).  One process per GPU; each runs alone.
 *
 * The situation of a GIN PROXY rank at a view's first step: a kernel spins on a flag (a barrier
 * or a dispatch waiting for a peer's signal) while the application thread asks the JIT for a
 * kernel that is not loaded yet (the combine of the new shape), and a second thread of the same
 * process must write the flag through the driver (the proxy applying the signal with
 * cuStreamWriteValue64 or a copy).  If the load waits for the GPU and the write waits for the
 * load, the spinner only ends at its deadline.  Each round: spinner launched (already loaded),
 * the writer thread started (it writes after 200 ms), then a get of a kernel compiled into the
 * cache beforehand but not loaded.  eep_jit_get_kernel_on must let the spinner see the flag;
 * the plain eep_jit_get_kernel round is reported (whether this driver blocks a load behind a
 * running kernel), not asserted, and so is a cuMemFree in the same place (an old view's
 * teardown frees).
 */
#include <pthread.h>
#include <stdint.h>
#include <stdlib.h>
#include <unistd.h>

#include "kernels/probe/spin_probe.cuh"
#include "tests/common/gpu_test.h"

typedef struct {
    const eep_cuda_sym_t *cu;
    CUcontext             ctx;
    CUdeviceptr           flag;
    double                wrote_ms; /* how long the write itself took */
    int                   rc;
} writer_t;

/* The "proxy": 200 ms after the spinner started, set the flag through the driver, on its own
   non-blocking stream, and wait for it to land. */
static void *writer_main(void *arg)
{
    writer_t          *w   = arg;
    CUstream           s   = NULL;
    unsigned long long one = 1;
    double             t0;

    usleep(200 * 1000);
    t0 = gpu_test_now_ms();
    if (w->cu->cuCtxSetCurrent(w->ctx) != CUDA_SUCCESS ||
        w->cu->cuStreamCreate(&s, CU_STREAM_NON_BLOCKING) != CUDA_SUCCESS) {
        w->rc = 1;
        return NULL;
    }
    if (w->cu->cuStreamWriteValue64 != NULL) {
        w->rc = w->cu->cuStreamWriteValue64(s, w->flag, 1, 0) != CUDA_SUCCESS;
    } else {
        w->rc = w->cu->cuMemcpyHtoDAsync(w->flag, &one, sizeof(one), s) != CUDA_SUCCESS;
    }
    w->rc |= w->cu->cuStreamSynchronize(s) != CUDA_SUCCESS;
    w->wrote_ms = gpu_test_now_ms() - t0;
    w->cu->cuStreamDestroy(s);
    return NULL;
}

static eep_jit_spec_t spin_spec(const char *tag)
{
    eep_jit_spec_t s = { .size          = sizeof(s),
                         .header        = "kernels/probe/spin_probe.cuh",
                         .function      = "eep_spin_probe_body",
                         .template_args = tag,
                         .param_type    = "eep_spin_probe_params_t",
                         .launch_bounds = 32,
                         .backend       = EEP_JIT_BACKEND_AUTO };
    return s;
}

/* One round; returns the spinner's result (1 saw the flag, 2 timed out). */
static unsigned round_run(const eep_cuda_sym_t *cu, CUcontext ctx, eep_jit_t *jit,
                          eep_jit_kernel_t *spinner, const char *tag, int on_stream,
                          double *load_ms, double *wrote_ms)
{
    eep_jit_spec_t          spec = spin_spec(tag);
    eep_spin_probe_params_t p;
    eep_jit_kernel_t       *k = NULL;
    CUdeviceptr             mem, spare;
    CUstream                s;
    pthread_t               th;
    writer_t                w;
    unsigned                result = 0;
    double                  t0, t_more = 0;
    CUdeviceptr             more = 0; /* freed once the spinner ended: a free waits (round 3) */
    eep_status_t            status;

    GPU_OK(eep_jit_compile(jit, &spec, NULL)); /* in the disk cache, not in the context */
    GPU_CU(cu->cuMemAlloc(&spare, 64u << 20));
    GPU_CU(cu->cuMemAlloc(&mem, 16));
    GPU_CU(cu->cuMemsetD8(mem, 0, 16));
    GPU_CU(cu->cuStreamCreate(&s, CU_STREAM_NON_BLOCKING));
    GPU_CU(cu->cuCtxSynchronize());
    memset(&p, 0, sizeof(p));
    p.flag        = mem;
    p.expect      = 1;
    p.deadline_ns = 3000ull * 1000 * 1000;
    p.result      = mem + 8;
    GPU_OK(eep_jit_launch(spinner, 1, 32, 0, s, &p, sizeof(p)));
    memset(&w, 0, sizeof(w));
    w.cu   = cu;
    w.ctx  = ctx;
    w.flag = mem;
    GPU_REQUIRE(pthread_create(&th, NULL, writer_main, &w) == 0, "pthread_create");
    t0 = gpu_test_now_ms();
    if (on_stream == 2) { /* no load: a free of memory allocated before the spin */
        status = eep_status_from_cu(cu->cuMemFree(spare), "cuMemFree");
    } else if (on_stream == 3) { /* a context-wide sync (torch.cuda.synchronize) */
        status = eep_status_from_cu(cu->cuCtxSynchronize(), "cuCtxSynchronize");
    } else if (on_stream == 4) { /* an allocation and an event (what torch does around a call) */
        CUevent ev = NULL;

        status = eep_status_from_cu(cu->cuMemAlloc(&more, 64u << 20), "cuMemAlloc");
        if (status == EEP_OK) {
            status = eep_status_from_cu(cu->cuEventCreate(&ev, CU_EVENT_DISABLE_TIMING),
                                        "cuEventCreate");
        }
        if (status == EEP_OK) {
            status = eep_status_from_cu(cu->cuEventRecord(ev, s), "cuEventRecord");
        }
        if (ev != NULL) {
            t_more = gpu_test_now_ms();
            cu->cuEventDestroy(ev);
        }
    } else {
        status = on_stream ? eep_jit_get_kernel_on(jit, &spec, s, &k)
                           : eep_jit_get_kernel(jit, &spec, &k);
    }
    *load_ms = (t_more > 0 ? t_more : gpu_test_now_ms()) - t0;
    GPU_CHECK(status == EEP_OK, "get kernel %s: %s", tag, eep_status_name(status));
    pthread_join(th, NULL);
    *wrote_ms = w.wrote_ms;
    GPU_CHECK(w.rc == 0, "the writer thread's driver calls failed");
    GPU_CU(cu->cuStreamSynchronize(s));
    GPU_CU(cu->cuMemcpyDtoH(&result, mem + 8, sizeof(result)));
    cu->cuStreamDestroy(s);
    cu->cuMemFree(mem);
    if (more != 0) {
        cu->cuMemFree(more);
    }
    if (on_stream != 2) {
        cu->cuMemFree(spare);
    }
    return result;
}

/*
 * Reported, not asserted: does a load in one process, or the first launch of what it loaded,
 * wait for another process's kernel on the same GPU?  Rank 0 spins 600 ms (its own writer ends it); rank 1 loads a fresh module 100 ms
 * into that spin.  A load of ~500 ms means yes: then a rank that loads a kernel while a peer's
 * kernel waits for this rank's proxy deadlocks across processes (an MPS client cannot preempt
 * another; time-sliced contexts can).
 */
static void cross_process(const eep_cuda_sym_t *cu, eep_jit_t *jit, eep_jit_kernel_t *spinner,
                          eep_bootstrap_t *bs)
{
    eep_jit_spec_t          spec = spin_spec("3");
    eep_spin_probe_params_t p;
    eep_jit_kernel_t       *k = NULL;
    CUdeviceptr             mem;
    unsigned                result = 0;
    double                  t0, ms;

    GPU_OK(eep_jit_compile(jit, &spec, NULL));
    GPU_CU(cu->cuMemAlloc(&mem, 16));
    GPU_CU(cu->cuMemsetD8(mem, 0, 16));
    GPU_CU(cu->cuCtxSynchronize());
    memset(&p, 0, sizeof(p));
    p.flag        = mem;
    p.expect      = 1;
    p.deadline_ns = 600ull * 1000 * 1000; /* no writer: the deadline ends it */
    p.result      = mem + 8;
    GPU_OK(eep_bootstrap_barrier(bs));
    if (gpu_test_rank == 0) {
        t0 = gpu_test_now_ms();
        GPU_OK(eep_jit_launch(spinner, 1, 32, 0, NULL, &p, sizeof(p)));
        GPU_CU(cu->cuCtxSynchronize());
        GPU_CU(cu->cuMemcpyDtoH(&result, mem + 8, sizeof(result)));
        printf("RESULT cross-process: rank 0's spinner ran %.0f ms (result %u)\n",
               gpu_test_now_ms() - t0, result);
    } else if (gpu_test_rank == 1) {
        usleep(100 * 1000);
        t0 = gpu_test_now_ms();
        GPU_OK(eep_jit_get_kernel(jit, &spec, &k));
        ms = gpu_test_now_ms() - t0;
        printf(
            "RESULT cross-process: rank 1's load 100 ms into rank 0's 600 ms spin took %.0f ms%s\n",
            ms, ms > 300 ? ": a load waits for another process's kernel" : "");
        /* and its first launch (a fresh module's), to its end: does that wait for rank 0? */
        {
            eep_spin_probe_params_t q = p;

            q.expect = 0; /* returns at once */
            t0       = gpu_test_now_ms();
            GPU_OK(eep_jit_launch(k, 1, 32, 0, NULL, &q, sizeof(q)));
            GPU_CU(cu->cuStreamSynchronize(NULL));
            ms = gpu_test_now_ms() - t0;
            printf(
                "RESULT cross-process: rank 1's first launch of it (and its end) took %.0f ms%s\n",
                ms, ms > 300 ? ": a first launch waits for another process's kernel" : "");
        }
    }
    GPU_OK(eep_bootstrap_barrier(bs));
    cu->cuMemFree(mem);
}

int main(void)
{
    eep_bootstrap_t      *bs    = gpu_test_bootstrap("test_jit_load", 1);
    const eep_cuda_sym_t *cu    = gpu_test_cu();
    eep_jit_spec_t        spin0 = spin_spec("0");
    eep_jit_params_t      jp;
    eep_jit_t            *jit     = NULL;
    eep_jit_kernel_t     *spinner = NULL;
    CUdevice              dev;
    CUcontext             ctx;
    char                  cache[64] = "/tmp/eep-jit-load.XXXXXX", cmd[128];
    double                load_ms, wrote_ms;
    unsigned              r;
    int                   count = 0;

    GPU_CU(cu->cuDeviceGetCount(&count));
    GPU_CU(cu->cuDeviceGet(&dev, gpu_test_rank % (count > 0 ? count : 1)));
    GPU_CU(cu->cuDevicePrimaryCtxRetain(&ctx, dev));
    GPU_CU(cu->cuCtxSetCurrent(ctx));
    GPU_REQUIRE(mkdtemp(cache) != NULL, "mkdtemp");
    memset(&jp, 0, sizeof(jp));
    jp.size      = sizeof(jp);
    jp.cache_dir = cache;
    GPU_OK(eep_jit_create(&jp, &jit));
    GPU_OK(eep_jit_get_kernel(jit, &spin0, &spinner));

    /* on one GPU only rank 0 runs the two in-process rounds (another process's kernels would
       take part: that is the cross-process round's question) */
    if (gpu_test_rank == 0 || count > 1) {
        /* the reported round first: a fresh module (tag 1) loaded the old way while the spinner runs */
        r = round_run(cu, ctx, jit, spinner, "1", 0, &load_ms, &wrote_ms);
        printf("RESULT plain load while a kernel spins: spinner %s, load %.0f ms, the writer's "
               "driver write %.0f ms%s\n",
               r == 1 ? "saw the flag" : "timed out (3 s)", load_ms, wrote_ms,
               r == 1 ? "" : ": this driver makes a load wait for the GPU (the deadlock)");
        /* the asserted round: tag 2 through eep_jit_get_kernel_on */
        r = round_run(cu, ctx, jit, spinner, "2", 1, &load_ms, &wrote_ms);
        printf("RESULT load on the spinner's stream: spinner %s, load %.0f ms, write %.0f ms\n",
               r == 1 ? "saw the flag" : "timed out (3 s)", load_ms, wrote_ms);
        GPU_CHECK(r == 1, "eep_jit_get_kernel_on: the spinner timed out (result %u)", r);
        GPU_CHECK(wrote_ms < 2000, "the writer waited %.0f ms", wrote_ms);
        /* reported: does a cuMemFree (an old view's teardown frees) wait for the GPU too? */
        r = round_run(cu, ctx, jit, spinner, "4", 2, &load_ms, &wrote_ms);
        printf("RESULT free while a kernel spins: spinner %s, cuMemFree %.0f ms, write %.0f ms%s\n",
               r == 1 ? "saw the flag" : "timed out (3 s)", load_ms, wrote_ms,
               r == 1 ? "" : ": a free waits for the GPU as a load does");
        r = round_run(cu, ctx, jit, spinner, "5", 3, &load_ms, &wrote_ms);
        printf("RESULT cuCtxSynchronize while a kernel spins: spinner %s, sync %.0f ms, write %.0f "
               "ms%s\n",
               r == 1 ? "saw the flag" : "timed out (3 s)", load_ms, wrote_ms,
               r == 1 ? "" : ": a context sync blocks the proxy's writes");
        r = round_run(cu, ctx, jit, spinner, "6", 4, &load_ms, &wrote_ms);
        printf(
            "RESULT cuMemAlloc + cuEventCreate/Record while a kernel spins: spinner %s, %.0f ms, "
            "write %.0f ms\n",
            r == 1 ? "saw the flag" : "timed out (3 s)", load_ms, wrote_ms);
    }
    GPU_OK(eep_bootstrap_barrier(bs));

    if (eep_bootstrap_nranks(bs) >= 2 && count == 1) {
        cross_process(cu, jit, spinner, bs);
    } else {
        printf("SKIP cross-process round: needs 2 ranks on one GPU (launch.sh -n 2 with one "
               "visible GPU)\n");
    }

    eep_jit_destroy(jit);
    cu->cuDevicePrimaryCtxRelease(dev);
    snprintf(cmd, sizeof(cmd), "rm -rf '%s'", cache);
    GPU_CHECK(system(cmd) == 0, "rm cache");
    eep_bootstrap_destroy(bs);
    return gpu_test_finish("test_jit_load");
}
