/*
 * tests/gpu/probe_kernel.cuh - a trivial kernel for the JIT: fills a buffer with a pattern.  The
 * fault test runs it after a barrier timed out, to show the CUDA context is still usable.
 */
#ifndef EEP_TESTS_PROBE_KERNEL_CUH
#define EEP_TESTS_PROBE_KERNEL_CUH

typedef struct eep_probe_params {
    unsigned int *out;
    unsigned int  n;
    unsigned int  seed;
} eep_probe_params_t;

__device__ void eep_probe_body(const eep_probe_params_t &p)
{
    for (unsigned int i = blockIdx.x * blockDim.x + threadIdx.x; i < p.n;
         i += gridDim.x * blockDim.x) {
        p.out[i] = p.seed ^ (i * 2654435761u);
    }
}

#endif
