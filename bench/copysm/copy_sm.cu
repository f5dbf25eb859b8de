/*
 * bench/copysm/copy_sm.cu - does a same-device copy need SMs?
 *
 * A standalone nvcc program (not part of libeep).  A one-rank rank-major dispatch can move x to
 * recv_x with cuMemcpyDtoDAsync "by the copy engine" beside its routing kernel (elastic/ep/
 * ep_solo.c, EEP_EP_COPY_ENGINE); whether that copy occupies SMs decides whether it fits a
 * call's SM budget.  Here every SM is filled by a kernel that spins for 2 ms (1024-thread blocks
 * with 100 KiB of shared memory each, as many as fit: no other block can start), and a copy of
 * T 4096 x H 7168 bytes (an fp8 x) is enqueued on another stream at the same moment, four ways:
 *   memcpy   cudaMemcpyAsync, device to device (what cuMemcpyDtoDAsync does)
 *   batch    cudaMemcpyBatchAsync with cudaMemcpyFlagPreferOverlapWithCompute
 *   graph    a graph's memcpy node, device to device
 *   d2h      device to pinned host memory: a copy engine's copy, the control
 * A copy that ends long before the spin does ran without SMs; one that ends just after it waited
 * for them.  Each way's time alone (mean of 20) is printed too.
 *
 *   nvcc -O2 -std=c++17 -arch=sm_90 -o build/bin/eep-copy-sm bench/copysm/copy_sm.cu
 *   build/bin/eep-copy-sm
 */
#include "../cuda_check.h"

#include <cuda_runtime.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define SPIN_NS    2000000ull
#define SPIN_SMEM  (100 * 1024)
#define ALONE_REPS 20

__global__ void spin(unsigned long long ns)
{
    extern __shared__ char smem[];
    unsigned long long     t0, t;

    asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t0));
    do {
        asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t));
    } while (t - t0 < ns);
    if (threadIdx.x == 0) {
        smem[0] = 1;
    }
}

struct copy_way {
    const char          *name;
    void                *dst, *src;
    size_t               bytes;
    int                  kind; /* 0 memcpy, 1 batch, 2 graph, 3 d2h */
    cudaGraphExec_t      graph;
    cudaMemcpyAttributes attr;
};

static cudaError_t copy_enqueue(copy_way *w, cudaStream_t s)
{
    void       *dsts[1]  = { w->dst };
    const void *srcs[1]  = { w->src };
    size_t      sizes[1] = { w->bytes }, attr_idx = 0;

    switch (w->kind) {
    case 1:
        return cudaMemcpyBatchAsync(dsts, srcs, sizes, 1, &w->attr, &attr_idx, 1, s);
    case 2:
        return cudaGraphLaunch(w->graph, s);
    case 3:
        return cudaMemcpyAsync(w->dst, w->src, w->bytes, cudaMemcpyDeviceToHost, s);
    default:
        return cudaMemcpyAsync(w->dst, w->src, w->bytes, cudaMemcpyDeviceToDevice, s);
    }
}

int main(void)
{
    const size_t    bytes = (size_t)4096 * 7168;
    int             sms = 0, per_sm = 0;
    void           *a, *b, *host;
    cudaStream_t    s_spin, s_copy;
    cudaEvent_t     e0, e_spin, e_copy, c0, c1;
    cudaGraph_t     g;
    cudaGraphNode_t node;
    copy_way        ways[4];

    CHECK(cudaSetDevice(0));
    CHECK(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, 0));
    CHECK(cudaFuncSetAttribute(spin, cudaFuncAttributeMaxDynamicSharedMemorySize, SPIN_SMEM));
    CHECK(cudaOccupancyMaxActiveBlocksPerMultiprocessor(&per_sm, spin, 1024, SPIN_SMEM));
    CHECK(cudaMalloc(&a, bytes));
    CHECK(cudaMalloc(&b, bytes));
    CHECK(cudaMallocHost(&host, bytes));
    CHECK(cudaMemset(a, 1, bytes));
    CHECK(cudaStreamCreateWithFlags(&s_spin, cudaStreamNonBlocking));
    CHECK(cudaStreamCreateWithFlags(&s_copy, cudaStreamNonBlocking));
    CHECK(cudaEventCreate(&e0));
    CHECK(cudaEventCreate(&e_spin));
    CHECK(cudaEventCreate(&e_copy));
    CHECK(cudaEventCreate(&c0));
    CHECK(cudaEventCreate(&c1));
    CHECK(cudaGraphCreate(&g, 0));
    CHECK(cudaGraphAddMemcpyNode1D(&node, g, NULL, 0, b, a, bytes, cudaMemcpyDeviceToDevice));
    memset(ways, 0, sizeof(ways));
    for (int k = 0; k < 4; k++) {
        ways[k].dst   = k == 3 ? host : b;
        ways[k].src   = a;
        ways[k].bytes = bytes;
        ways[k].kind  = k;
    }
    ways[0].name                 = "memcpy (device to device)";
    ways[1].name                 = "batch, PreferOverlapWithCompute";
    ways[2].name                 = "graph memcpy node";
    ways[3].name                 = "d2h to pinned host (control)";
    ways[1].attr.srcAccessOrder  = cudaMemcpySrcAccessOrderStream;
    ways[1].attr.flags           = cudaMemcpyFlagPreferOverlapWithCompute;
    ways[1].attr.srcLocHint.type = cudaMemLocationTypeDevice;
    ways[1].attr.dstLocHint.type = cudaMemLocationTypeDevice;
    CHECK(cudaGraphInstantiate(&ways[2].graph, g, 0));
    printf("%d SMs, %d spinning blocks an SM; copies of %zu bytes\n", sms, per_sm, bytes);
    for (int k = 0; k < 4; k++) {
        copy_way *w = &ways[k];
        float     alone, t_spin, t_copy;

        for (int i = 0; i < 3; i++) {
            CHECK(copy_enqueue(w, s_copy));
        }
        CHECK(cudaEventRecord(c0, s_copy));
        for (int i = 0; i < ALONE_REPS; i++) {
            CHECK(copy_enqueue(w, s_copy));
        }
        CHECK(cudaEventRecord(c1, s_copy));
        CHECK(cudaDeviceSynchronize());
        CHECK(cudaEventElapsedTime(&alone, c0, c1));
        alone = alone * 1e3f / ALONE_REPS;
        CHECK(cudaEventRecord(e0, s_spin));
        spin<<<sms * per_sm, 1024, SPIN_SMEM, s_spin>>>(SPIN_NS);
        CHECK(cudaGetLastError());
        CHECK(cudaEventRecord(e_spin, s_spin));
        CHECK(cudaStreamWaitEvent(s_copy, e0, 0));
        CHECK(copy_enqueue(w, s_copy));
        CHECK(cudaEventRecord(e_copy, s_copy));
        CHECK(cudaDeviceSynchronize());
        CHECK(cudaEventElapsedTime(&t_spin, e0, e_spin));
        CHECK(cudaEventElapsedTime(&t_copy, e0, e_copy));
        printf("%-32s alone %7.1f us (%5.0f GB/s each way); beside the spin: spin ends %7.1f us, "
               "copy ends %7.1f us: %s\n",
               w->name, alone, (double)bytes / (alone * 1e-6) / 1e9, t_spin * 1e3f, t_copy * 1e3f,
               t_copy < 0.5f * t_spin ? "ran without SMs" : "waited for SMs");
    }
    return 0;
}
