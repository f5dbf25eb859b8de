// tests/gpu/gin/probe_hw_queues.cu - a probe of the CUDA driver, not a test of ours (gin/gin_cuda.c
// says why it matters).  (1) Does a copy on a fresh stream land while another stream of the same
// context has a launch queued behind a kernel that waits for that copy?  (2) The same from a
// second context of the process (cuCtxCreate), and can that context copy into and write the
// primary context's cuMem memory?  One process, no NCCL.  Build and run on the GPU machine:
//   nvcc -O2 -arch=sm_90 -o /tmp/probe_hw_queues tests/gpu/gin/probe_hw_queues.cu -lcuda
//   CUDA_DEVICE_MAX_CONNECTIONS=8 /tmp/probe_hw_queues [extra streams]
// Prints RESULT lines (bench/RESULTS.md, 2026-12-02: same context 2.1 s, the kernel's deadline;
// second context 1.0 ms).
#include <cuda.h>
#include <cuda_runtime.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>
#include <unistd.h>

#define CK(x)                                                                                      \
    do {                                                                                           \
        CUresult r_ = (x);                                                                         \
        if (r_ != CUDA_SUCCESS) {                                                                  \
            const char *s;                                                                         \
            cuGetErrorName(r_, &s);                                                                \
            printf("FAIL %s: %s (line %d)\n", #x, s, __LINE__);                                    \
        }                                                                                          \
    } while (0)

__global__ void spin(volatile unsigned long long *flag, unsigned long long want,
                     unsigned long long *out, long long budget)
{
    long long t0 = clock64();
    while (*flag < want) {
        if (clock64() - t0 > budget) {
            out[0] = 0xdead;
            return;
        }
    }
    out[0] = 1;
}
__global__ void tiny(unsigned long long *p)
{
    p[1] += 1;
}

static double now_ms(void)
{
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return t.tv_sec * 1e3 + t.tv_nsec / 1e6;
}

static CUdeviceptr vmm_alloc(size_t size, CUdevice dev)
{
    CUmemAllocationProp prop = {};
    prop.type                = CU_MEM_ALLOCATION_TYPE_PINNED;
    prop.location.type       = CU_MEM_LOCATION_TYPE_DEVICE;
    prop.location.id         = dev;
    size_t gran              = 0;
    CK(cuMemGetAllocationGranularity(&gran, &prop, CU_MEM_ALLOC_GRANULARITY_MINIMUM));
    size = (size + gran - 1) / gran * gran;
    CUmemGenericAllocationHandle h;
    CUdeviceptr                  p = 0;
    CK(cuMemCreate(&h, size, &prop, 0));
    CK(cuMemAddressReserve(&p, size, gran, 0, 0));
    CK(cuMemMap(p, size, 0, h, 0));
    CUmemAccessDesc a = {};
    a.location        = prop.location;
    a.flags           = CU_MEM_ACCESS_FLAGS_PROT_READWRITE;
    CK(cuMemSetAccess(p, size, &a, 1));
    return p;
}

int main(int argc, char **argv)
{
    int       nstreams = argc > 1 ? atoi(argv[1]) : 8;
    CUdevice  dev;
    CUcontext primary, priv;
    cudaSetDevice(0);
    cudaFree(0);
    CK(cuCtxGetCurrent(&primary));
    CK(cuCtxGetDevice(&dev));
    const char *mc = getenv("CUDA_DEVICE_MAX_CONNECTIONS");
    printf("CUDA_DEVICE_MAX_CONNECTIONS=%s, %d extra streams\n", mc ? mc : "(unset)", nstreams);

    CUdeviceptr vmm    = vmm_alloc(1 << 21, dev); // flag at [0], src at [64..]
    CUdeviceptr legacy = 0;
    CK(cuMemAlloc(&legacy, 4096));
    CK(cuMemsetD8(vmm, 0, 1 << 21));
    CK(cuMemsetD8(legacy, 0, 4096));
    unsigned long long *out = NULL;
    cudaMalloc(&out, 64);
    cudaMemset(out, 0, 64);
    unsigned long long one = 1;
    CK(cuMemcpyHtoD(vmm + 4096, &one, 8)); // the copy's source: value 1

    // (2) a private context writes the primary's VMM memory and legacy memory
    CUctxCreateParams cp = {};
    CK(cuCtxCreate(&priv, &cp, 0, dev));
    CUstream ps;
    CK(cuStreamCreate(&ps, CU_STREAM_NON_BLOCKING));
    CK(cuMemcpyAsync(vmm + 8192, vmm + 4096, 8, ps));
    CK(cuStreamWriteValue64(ps, vmm + 8200, 7, 0));
    CK(cuStreamSynchronize(ps));
    CUresult lr = cuMemcpyAsync(legacy, vmm + 4096, 8, ps);
    CUresult ls = cuStreamSynchronize(ps);
    printf("private context: legacy cuMemAlloc memory copy -> %d / sync %d\n", (int)lr, (int)ls);
    CK(cuCtxSetCurrent(primary));
    unsigned long long got[2] = { 0, 0 };
    CK(cuMemcpyDtoH(got, vmm + 8192, 16));
    printf("RESULT private context wrote primary's VMM memory: copy %llu (want 1), write %llu "
           "(want 7)\n",
           got[0], got[1]);

    // (1) the false dependency: S1 = [spin waiting for flag][tiny]; extra streams; copy on a fresh stream
    for (int mode = 0; mode < 2; mode++) {
        CK(cuCtxSetCurrent(primary));
        CK(cuMemsetD8(vmm, 0, 8));
        cudaMemset(out, 0, 64);
        cudaDeviceSynchronize();
        cudaStream_t s1;
        cudaStreamCreateWithFlags(&s1, cudaStreamNonBlocking);
        cudaStream_t *extra = (cudaStream_t *)calloc(nstreams, sizeof(*extra));
        for (int i = 0; i < nstreams; i++)
            cudaStreamCreateWithFlags(&extra[i], cudaStreamNonBlocking);
        long long budget = 1400000000LL * 3; // ~2-3 s
        spin<<<1, 1, 0, s1>>>((volatile unsigned long long *)vmm, 1, out, budget);
        tiny<<<1, 1, 0, s1>>>(out); // queued behind the waiting kernel
        usleep(20000);
        double   t0 = now_ms();
        CUstream cs;
        if (mode == 1) {
            CK(cuCtxSetCurrent(priv));
            CK(cuStreamCreate(&cs, CU_STREAM_NON_BLOCKING));
        } else {
            CK(cuStreamCreate(&cs, CU_STREAM_NON_BLOCKING));
        }
        CK(cuMemcpyAsync(vmm, vmm + 4096, 8, cs)); // sets the flag
        CK(cuStreamSynchronize(cs));
        double t1 = now_ms();
        CK(cuCtxSetCurrent(primary));
        cudaStreamSynchronize(s1);
        unsigned long long o = 0;
        cudaMemcpy(&o, out, 8, cudaMemcpyDeviceToHost);
        printf("RESULT %s stream: the flag copy took %.1f ms; the waiting kernel %s\n",
               mode ? "private-context" : "same-context", t1 - t0,
               o == 1 ? "saw it" : "timed out (false dependency)");
        CK(cuCtxSetCurrent(mode ? priv : primary));
        CK(cuStreamDestroy(cs));
        CK(cuCtxSetCurrent(primary));
        for (int i = 0; i < nstreams; i++)
            cudaStreamDestroy(extra[i]);
        cudaStreamDestroy(s1);
        free(extra);
    }
    return 0;
}
